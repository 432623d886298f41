#pragma once
// Private to src/store: the two SqlDb back ends and helpers they share.

#include <memory>
#include <string>

#include "store/sql.h"

namespace infera::store {

// `path` is a file path or ":memory:".
Result<std::unique_ptr<SqlDb>> openSqlite(const std::string& path);
// `url` is a libpq connection URI.
Result<std::unique_ptr<SqlDb>> openPostgres(const std::string& url);

// "%.17g": every double survives a text round trip (PostgreSQL text parameters).
std::string formatDouble(double d);

}  // namespace infera::store
