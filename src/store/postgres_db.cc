#include <libpq-fe.h>
#include <poll.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/log.h"
#include "store/sql_internal.h"

namespace infera::store {
namespace {

// Type OIDs from the server catalogue (pg_type.dat); stable across releases.
constexpr Oid kBoolOid = 16;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt2Oid = 21;
constexpr Oid kInt4Oid = 23;
constexpr Oid kFloat4Oid = 700;
constexpr Oid kFloat8Oid = 701;
constexpr Oid kNumericOid = 1700;

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

std::string trimmed(const char* msg) {
  std::string s = msg != nullptr ? msg : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Server notices ("there is no transaction in progress", the FATAL goodbye of a terminated
// backend) would otherwise go to stderr.
void logNotice(void* /*arg*/, const char* message) {
  INFERA_LOG(componentLogger("store"), debug, "postgresql notice: {}", trimmed(message));
}

SqlValue convertValue(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return std::monostate{};
  const char* v = PQgetvalue(r, row, col);
  const auto len = static_cast<size_t>(PQgetlength(r, row, col));
  switch (PQftype(r, col)) {
    case kInt2Oid:
    case kInt4Oid:
    case kInt8Oid: {
      int64_t i = 0;
      const auto [ptr, ec] = std::from_chars(v, v + len, i);
      if (ec == std::errc() && ptr == v + len) return i;
      break;
    }
    case kFloat4Oid:
    case kFloat8Oid:
    case kNumericOid: {
      // strtod also reads the server's "NaN", "Infinity" and "-Infinity".
      char* end = nullptr;
      const double d = std::strtod(v, &end);
      if (end == v + len) return d;
      break;
    }
    case kBoolOid:  // SQLite has no boolean; 0/1 keeps both dialects alike
      return static_cast<int64_t>(v[0] == 't' ? 1 : 0);
    default:
      break;
  }
  return std::string(v, len);
}

class PostgresDb final : public SqlDb {
 public:
  explicit PostgresDb(PGconn* conn) : conn_(conn) {}
  ~PostgresDb() override { PQfinish(conn_); }

  SqlDialect dialect() const override { return SqlDialect::kPostgres; }

  Result<SqlResult> exec(std::string_view sql, std::span<const SqlValue> params) override {
    INFERA_RETURN_IF_ERROR(ensureConnected());
    sql_ = toPostgresPlaceholders(sql);
    // Untyped text parameters: the server gives each the type its context wants (a column, an
    // operator's other side, a function's signature). Typing integers as int8 would break calls
    // such as substr(text, int, int); the cost is that a bare `SELECT ?1` comes back as text.
    storage_.clear();
    storage_.reserve(params.size());
    values_.assign(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      const SqlValue& p = params[i];
      if (const auto* iv = std::get_if<int64_t>(&p)) {
        storage_.push_back(std::to_string(*iv));
        values_[i] = storage_.back().c_str();
      } else if (const auto* dv = std::get_if<double>(&p)) {
        storage_.push_back(formatDouble(*dv));
        values_[i] = storage_.back().c_str();
      } else if (const auto* sv = std::get_if<std::string>(&p)) {
        values_[i] = sv->c_str();
      }
    }
    PgResult r(PQexecParams(conn_, sql_.c_str(), static_cast<int>(params.size()), nullptr,
                            values_.data(), nullptr, nullptr, 0));
    const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
    SqlResult out;
    if (st == PGRES_EMPTY_QUERY) return out;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      return error(r.get(), "executing statement");
    }
    const int ncols = PQnfields(r.get());
    const int nrows = PQntuples(r.get());
    out.columns.reserve(static_cast<size_t>(ncols));
    for (int c = 0; c < ncols; ++c) out.columns.emplace_back(PQfname(r.get(), c));
    out.rows.resize(static_cast<size_t>(nrows));
    for (int row = 0; row < nrows; ++row) {
      auto& dst = out.rows[static_cast<size_t>(row)];
      dst.reserve(static_cast<size_t>(ncols));
      for (int c = 0; c < ncols; ++c) dst.push_back(convertValue(r.get(), row, c));
    }
    // PQcmdTuples also counts the rows a SELECT returned; `affected` is for writes only.
    if (std::strncmp(PQcmdStatus(r.get()), "SELECT", 6) != 0) {
      const char* n = PQcmdTuples(r.get());
      std::from_chars(n, n + std::strlen(n), out.affected);
    }
    return out;
  }

  Status execScript(std::string_view sql) override {
    INFERA_RETURN_IF_ERROR(ensureConnected());
    const std::string text(sql);
    PgResult r(PQexec(conn_, text.c_str()));  // the simple protocol runs several statements
    const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY) {
      return Status::ok();
    }
    return error(r.get(), "executing script");
  }

  Status begin() override {
    if (in_txn_) return Status::failedPrecondition("begin(): a transaction is already open");
    INFERA_RETURN_IF_ERROR(command("BEGIN"));
    in_txn_ = true;
    return Status::ok();
  }

  Status commit() override {
    if (!in_txn_) return Status::failedPrecondition("commit(): no transaction is open");
    if (txn_lost_) {
      in_txn_ = txn_lost_ = false;
      return Status::unavailable(
          "commit(): the connection to PostgreSQL broke during the transaction");
    }
    if (PQtransactionStatus(conn_) == PQTRANS_INERROR) {
      // PostgreSQL would answer COMMIT with ROLLBACK and no error; say so instead.
      Status s = command("ROLLBACK");
      in_txn_ = false;
      if (!s.isOk()) return s;
      return Status::failedPrecondition(
          "commit(): the transaction was aborted by an earlier error and rolled back");
    }
    Status s = command("COMMIT");
    in_txn_ = false;  // a failed COMMIT ends the transaction too
    return s;
  }

  Status rollback() override {
    if (!in_txn_) return Status::failedPrecondition("rollback(): no transaction is open");
    in_txn_ = false;
    if (txn_lost_) {
      txn_lost_ = false;  // the server dropped it with the connection
      return Status::ok();
    }
    Status s = command("ROLLBACK");
    if (!s.isOk() && PQstatus(conn_) == CONNECTION_BAD) return Status::ok();
    return s;
  }

 private:
  // A connection the server closed while idle (restart, idle timeout, pg_terminate_backend) has
  // its goodbye waiting in the socket: read it before sending, so that a statement is only ever
  // sent on a live connection. A connection found broken gets one PQreset before we give up; a
  // statement that fails mid-flight is not retried (it may have run).
  Status ensureConnected() {
    // Usually nothing is readable (one poll, no read). A goodbye is a FATAL message and then
    // EOF, which libpq notices on the read after the one that returned the message.
    for (int reads = 0; reads < 4 && PQstatus(conn_) == CONNECTION_OK && !txn_lost_; ++reads) {
      pollfd p{PQsocket(conn_), POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0 || PQconsumeInput(conn_) == 0) break;
    }
    if (in_txn_ && (txn_lost_ || PQstatus(conn_) != CONNECTION_OK)) {
      txn_lost_ = true;
      return Status::unavailable(
          "the connection to PostgreSQL broke during the transaction; roll back");
    }
    if (PQstatus(conn_) == CONNECTION_OK) return Status::ok();
    PQreset(conn_);
    if (PQstatus(conn_) == CONNECTION_OK) return Status::ok();
    return Status::unavailable("cannot reach PostgreSQL: " + trimmed(PQerrorMessage(conn_)));
  }

  Status command(const char* sql) {
    INFERA_RETURN_IF_ERROR(ensureConnected());
    PgResult r(PQexec(conn_, sql));
    if (r && PQresultStatus(r.get()) == PGRES_COMMAND_OK) return Status::ok();
    return error(r.get(), sql);
  }

  Status error(const PGresult* r, std::string_view context) {
    std::string msg(context);
    msg += ": ";
    const char* state = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
    msg += trimmed(r != nullptr && PQresultErrorMessage(r)[0] != '\0' ? PQresultErrorMessage(r)
                                                                      : PQerrorMessage(conn_));
    if (PQstatus(conn_) != CONNECTION_OK) {
      if (in_txn_) txn_lost_ = true;
      return Status::unavailable(std::move(msg));
    }
    const std::string_view code = state != nullptr ? state : "";
    if (code == "23505") return Status::alreadyExists(std::move(msg));
    // 08xxx connection exceptions; 57P01-57P03 admin/crash shutdown, cannot connect now.
    if (code.substr(0, 2) == "08" || code.substr(0, 4) == "57P0") {
      return Status::unavailable(std::move(msg));
    }
    return Status::internal(std::move(msg));
  }

  PGconn* conn_;
  bool in_txn_ = false;
  bool txn_lost_ = false;
  // Reused per statement.
  std::string sql_;
  std::vector<std::string> storage_;
  std::vector<const char*> values_;
};

}  // namespace

Result<std::unique_ptr<SqlDb>> openPostgres(const std::string& url) {
  // connect_timeout first: a value in the URI itself overrides it (expand_dbname).
  const char* keys[] = {"connect_timeout", "dbname", nullptr};
  const char* values[] = {"5", url.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, 1);
  if (conn == nullptr) return Status::internal("PQconnectdbParams: out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    Status s =
        Status::unavailable("cannot connect to PostgreSQL: " + trimmed(PQerrorMessage(conn)));
    PQfinish(conn);
    return s;
  }
  PQsetNoticeProcessor(conn, logNotice, nullptr);
  return std::unique_ptr<SqlDb>(std::make_unique<PostgresDb>(conn));
}

}  // namespace infera::store
