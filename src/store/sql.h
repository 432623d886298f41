#pragma once
// The metadata-store seam: one small SQL interface over an embedded SQLite file and a shared
// PostgreSQL server, so components write their schema and queries once. Statements use numbered
// placeholders ?1, ?2, ... in both dialects (translated to $1, $2 for PostgreSQL); keep SQL to the
// common subset (TEXT, BIGINT, DOUBLE PRECISION, INSERT ... ON CONFLICT, no AUTOINCREMENT/SERIAL).
// PostgreSQL receives parameters as untyped text and types each from its context (a column, the
// other operand, a function's signature): where nothing fixes the type (a bare `SELECT ?1`, a
// NULL in `?1 IS NULL`) write a CAST, or read the result with the typed accessors below.
//
// A SqlDb is used by one thread at a time; open one per thread that needs it.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"

namespace infera::store {

enum class SqlDialect { kSqlite, kPostgres };

// NULL, integer, real or text.
using SqlValue = std::variant<std::monostate, int64_t, double, std::string>;

struct SqlResult {
  std::vector<std::string> columns;
  std::vector<std::vector<SqlValue>> rows;
  int64_t affected = 0;  // rows changed by INSERT/UPDATE/DELETE

  // Typed reads of rows[row][col]: NULL gives the fallback; integers and reals convert to each
  // other; text that holds a number is parsed (PostgreSQL numeric).
  int64_t integer(size_t row, size_t col, int64_t fallback = 0) const;
  double real(size_t row, size_t col, double fallback = 0) const;
  std::string text(size_t row, size_t col) const;  // NULL -> ""
  bool isNull(size_t row, size_t col) const;
  // rows[row][col]; an index out of range is a bug (INFERA_CHECK).
  const SqlValue& at(size_t row, size_t col) const;
};

class SqlDb {
 public:
  // "sqlite:PATH" (or a plain path ending in .db/.sqlite), "sqlite::memory:",
  // "postgresql://..." / "postgres://..." (libpq connection URI). SQLite files are opened in WAL
  // mode with a busy timeout, so several processes and threads may share one file.
  static Result<std::unique_ptr<SqlDb>> open(const std::string& url);
  virtual ~SqlDb() = default;

  virtual SqlDialect dialect() const = 0;
  // One statement with parameters. Errors carry the database's message (kUnavailable when the
  // server cannot be reached; kAlreadyExists for a unique-constraint violation; kInternal else).
  virtual Result<SqlResult> exec(std::string_view sql, std::span<const SqlValue> params = {}) = 0;
  Result<SqlResult> exec(std::string_view sql, std::initializer_list<SqlValue> params) {
    return exec(sql, std::span<const SqlValue>(params.begin(), params.size()));
  }
  // Several statements separated by ';', no parameters (schema creation).
  virtual Status execScript(std::string_view sql) = 0;
  // Adds `column` (of SQL type `type`, with a DEFAULT for the rows there) to `table` when an older
  // schema lacks it. Replicas may race: one ALTER wins, the others find the column there.
  Status addColumnIfMissing(std::string_view table, std::string_view column, std::string_view type);
  // Transactions (no nesting: begin() inside one, or commit()/rollback() outside one, is
  // kFailedPrecondition). After a failed statement inside a transaction, roll back: PostgreSQL
  // aborts the whole transaction, and commit() then rolls back and returns kFailedPrecondition.
  virtual Status begin() = 0;
  virtual Status commit() = 0;
  virtual Status rollback() = 0;
};

// "?1 ... ?12" -> "$1 ... $12", leaving text inside single-quoted literals alone.
std::string toPostgresPlaceholders(std::string_view sql);

}  // namespace infera::store
