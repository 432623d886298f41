#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <unordered_map>

#include "core/text.h"
#include "store/sql_internal.h"

namespace infera::store {
namespace {

// Prepared statements are kept per connection, keyed by their SQL text: components run the same
// few statements over and over. Past this many distinct statements the cache starts over.
constexpr size_t kMaxCachedStatements = 128;

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

Status sqliteError(sqlite3* db, int rc, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
    return Status::alreadyExists(std::move(msg));
  }
  const int primary = rc & 0xff;
  // Still locked after the busy timeout, or the file cannot be opened: the store is out of reach
  // for now, which callers treat like an unreachable server.
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED || primary == SQLITE_CANTOPEN) {
    return Status::unavailable(std::move(msg));
  }
  return Status::internal(std::move(msg));
}

bool onlySeparators(const char* tail) {
  for (; tail != nullptr && *tail != '\0'; ++tail) {
    const char c = *tail;
    if (c != ';' && c != ' ' && c != '\n' && c != '\t' && c != '\r') return false;
  }
  return true;
}

class SqliteDb final : public SqlDb {
 public:
  explicit SqliteDb(sqlite3* db) : db_(db) {}
  ~SqliteDb() override {
    cache_.clear();  // statements must be finalized before the connection closes
    sqlite3_close(db_);
  }

  SqlDialect dialect() const override { return SqlDialect::kSqlite; }

  Result<SqlResult> exec(std::string_view sql, std::span<const SqlValue> params) override {
    sqlite3_stmt* stmt = nullptr;
    INFERA_RETURN_IF_ERROR(prepare(sql, stmt));
    SqlResult out;
    if (stmt == nullptr) return out;  // empty statement
    // Leave the cached statement reset and unbound however this returns.
    struct Resetter {
      sqlite3_stmt* s;
      ~Resetter() {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
      }
    } resetter{stmt};

    const int expected = sqlite3_bind_parameter_count(stmt);
    if (static_cast<size_t>(expected) != params.size()) {
      return Status::invalidArgument("statement takes " + std::to_string(expected) +
                                     " parameters, got " + std::to_string(params.size()));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const int idx = static_cast<int>(i) + 1;
      const SqlValue& p = params[i];
      int rc = SQLITE_OK;
      if (const auto* iv = std::get_if<int64_t>(&p)) {
        rc = sqlite3_bind_int64(stmt, idx, *iv);
      } else if (const auto* dv = std::get_if<double>(&p)) {
        rc = sqlite3_bind_double(stmt, idx, *dv);
      } else if (const auto* sv = std::get_if<std::string>(&p)) {
        // SQLITE_STATIC: the caller's values outlive the statement's use (reset below).
        rc = sqlite3_bind_text64(stmt, idx, sv->data(), sv->size(), SQLITE_STATIC, SQLITE_UTF8);
      } else {
        rc = sqlite3_bind_null(stmt, idx);
      }
      if (rc != SQLITE_OK) return sqliteError(db_, rc, "binding parameter " + std::to_string(idx));
    }

    const int ncols = sqlite3_column_count(stmt);
    out.columns.reserve(static_cast<size_t>(ncols));
    for (int c = 0; c < ncols; ++c) out.columns.emplace_back(sqlite3_column_name(stmt, c));
    for (;;) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return sqliteError(db_, rc, "executing statement");
      auto& row = out.rows.emplace_back();
      row.reserve(static_cast<size_t>(ncols));
      for (int c = 0; c < ncols; ++c) {
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_INTEGER:
            row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, c)));
            break;
          case SQLITE_FLOAT:
            row.emplace_back(sqlite3_column_double(stmt, c));
            break;
          case SQLITE_TEXT: {
            const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
            row.emplace_back(std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt, c))));
            break;
          }
          case SQLITE_BLOB: {
            const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt, c));
            const auto n = static_cast<size_t>(sqlite3_column_bytes(stmt, c));
            row.emplace_back(n == 0 ? std::string() : std::string(p, n));
            break;
          }
          default:
            row.emplace_back(std::monostate{});
        }
      }
    }
    // sqlite3_changes() keeps the count of the last writing statement; a read reports none.
    out.affected = sqlite3_stmt_readonly(stmt) ? 0 : sqlite3_changes64(db_);
    return out;
  }

  Status execScript(std::string_view sql) override {
    const std::string text(sql);
    char* err = nullptr;
    const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
    if (rc == SQLITE_OK) return Status::ok();
    std::string msg = err != nullptr ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    Status s = sqliteError(nullptr, rc, "executing script");
    return Status(s.code(), "executing script: " + msg);
  }

  Status begin() override {
    if (in_txn_) return Status::failedPrecondition("begin(): a transaction is already open");
    // IMMEDIATE takes the write lock now (waiting up to the busy timeout): a deferred transaction
    // that later upgrades from read to write fails with SQLITE_BUSY without waiting.
    INFERA_RETURN_IF_ERROR(simple("BEGIN IMMEDIATE"));
    in_txn_ = true;
    return Status::ok();
  }

  Status commit() override {
    if (!in_txn_) return Status::failedPrecondition("commit(): no transaction is open");
    Status s = simple("COMMIT");
    // A failed COMMIT (SQLITE_BUSY) leaves the transaction open for a retry or a rollback.
    in_txn_ = sqlite3_get_autocommit(db_) == 0;
    return s;
  }

  Status rollback() override {
    if (!in_txn_) return Status::failedPrecondition("rollback(): no transaction is open");
    in_txn_ = false;
    // Some errors (SQLITE_FULL, SQLITE_IOERR, ...) roll the transaction back on their own.
    if (sqlite3_get_autocommit(db_) != 0) return Status::ok();
    return simple("ROLLBACK");
  }

  Status configure() {
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, 5000);
    INFERA_RETURN_IF_ERROR(simple("PRAGMA journal_mode=WAL"));
    return simple("PRAGMA foreign_keys=ON");
  }

 private:
  Status simple(const char* sql) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
    sqlite3_free(err);
    if (rc != SQLITE_OK) return sqliteError(db_, rc, sql);
    return Status::ok();
  }

  Status prepare(std::string_view sql, sqlite3_stmt*& stmt) {
    if (const auto it = cache_.find(sql); it != cache_.end()) {
      stmt = it->second.get();
      return Status::ok();
    }
    std::string key(sql);
    const char* tail = nullptr;
    sqlite3_stmt* raw = nullptr;
    const int rc = sqlite3_prepare_v3(db_, key.data(), static_cast<int>(key.size()),
                                      SQLITE_PREPARE_PERSISTENT, &raw, &tail);
    StmtPtr owned(raw);
    if (rc != SQLITE_OK) return sqliteError(db_, rc, "preparing statement");
    if (!onlySeparators(tail)) {
      return Status::invalidArgument("exec() runs one statement; use execScript() for several");
    }
    stmt = raw;
    if (raw == nullptr) return Status::ok();
    if (cache_.size() >= kMaxCachedStatements) cache_.clear();
    cache_.emplace(std::move(key), std::move(owned));
    return Status::ok();
  }

  sqlite3* db_;
  std::unordered_map<std::string, StmtPtr, TransparentStringHash, std::equal_to<>>
      cache_;  // by SQL text
  bool in_txn_ = false;
};

}  // namespace

Result<std::unique_ptr<SqlDb>> openSqlite(const std::string& path) {
  // Created for its owner only (keys' hashes, usage): SQLite would create it with the process's
  // umask (0644 by default), and gives its -wal and -shm files the database file's mode.
  if (path != ":memory:" && !path.empty()) {
    // Its directory too, as for every path the server writes (server::checkHostPaths).
    if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
    }
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
  }
  sqlite3* db = nullptr;
  // NOMUTEX: a SqlDb is used by one thread at a time (sql.h), so SQLite's per-call lock is waste.
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = sqliteError(db, rc, "opening SQLite database '" + path + "'");
    sqlite3_close(db);
    return Status::unavailable(s.message());
  }
  auto out = std::make_unique<SqliteDb>(db);
  INFERA_RETURN_IF_ERROR(out->configure());
  return std::unique_ptr<SqlDb>(std::move(out));
}

}  // namespace infera::store
