#include "store/sql.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/text.h"
#include "store/sql_internal.h"

namespace infera::store {
namespace {

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Whole-string numeric parses; PostgreSQL numeric arrives as text such as "12.50".
bool parseInt(std::string_view s, int64_t& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool parseDouble(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

}  // namespace

const SqlValue& SqlResult::at(size_t row, size_t col) const {
  INFERA_CHECK(
      row < rows.size() && col < rows[row].size(),
      "SqlResult index out of range: row " + std::to_string(row) + ", col " + std::to_string(col));
  return rows[row][col];
}

int64_t SqlResult::integer(size_t row, size_t col, int64_t fallback) const {
  const SqlValue& v = at(row, col);
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* d = std::get_if<double>(&v)) {
    return std::isfinite(*d) ? static_cast<int64_t>(*d) : fallback;
  }
  if (const auto* s = std::get_if<std::string>(&v)) {
    int64_t i = 0;
    if (parseInt(*s, i)) return i;
    double d = 0;
    if (parseDouble(*s, d) && std::isfinite(d)) return static_cast<int64_t>(d);
  }
  return fallback;
}

double SqlResult::real(size_t row, size_t col, double fallback) const {
  const SqlValue& v = at(row, col);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* s = std::get_if<std::string>(&v)) {
    double d = 0;
    if (parseDouble(*s, d)) return d;
  }
  return fallback;
}

std::string SqlResult::text(size_t row, size_t col) const {
  const SqlValue& v = at(row, col);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) {
    char buf[32];  // shortest text that reads back as the same double
    const auto r = std::to_chars(buf, buf + sizeof(buf), *d);
    return std::string(buf, r.ptr);
  }
  return {};
}

bool SqlResult::isNull(size_t row, size_t col) const {
  return std::holds_alternative<std::monostate>(at(row, col));
}

std::string formatDouble(double d) {
  char buf[32];
  const int n = std::snprintf(buf, sizeof(buf), "%.17g", d);
  return std::string(buf, static_cast<size_t>(n));
}

Status SqlDb::addColumnIfMissing(std::string_view table, std::string_view column,
                                 std::string_view type) {
  const std::string probe =
      "SELECT " + std::string(column) + " FROM " + std::string(table) + " LIMIT 0";
  if (exec(probe).ok()) return Status::ok();
  const auto added = exec("ALTER TABLE " + std::string(table) + " ADD COLUMN " +
                          std::string(column) + " " + std::string(type));
  if (added.ok() || exec(probe).ok()) return Status::ok();
  return added.status();
}

std::string toPostgresPlaceholders(std::string_view sql) {
  std::string out;
  out.reserve(sql.size());
  char quote = 0;  // ' (literal) or " (identifier) while inside one; doubled quotes toggle twice
  for (size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
      out += c;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out += c;
      continue;
    }
    if (c == '?' && i + 1 < sql.size() && sql[i + 1] >= '0' && sql[i + 1] <= '9') {
      out += '$';
      continue;
    }
    out += c;
  }
  return out;
}

Result<std::unique_ptr<SqlDb>> SqlDb::open(const std::string& url) {
  const std::string_view u(url);
  if (startsWith(u, "postgresql://") || startsWith(u, "postgres://")) return openPostgres(url);
  if (u == "sqlite::memory:") return openSqlite(":memory:");
  if (startsWith(u, "sqlite:")) {
    const std::string path = url.substr(7);
    if (path.empty()) return Status::invalidArgument("sqlite URL has no path: '" + url + "'");
    return openSqlite(path);
  }
  if (endsWith(u, ".db") || endsWith(u, ".sqlite")) return openSqlite(url);
  return Status::invalidArgument(
      "unsupported database URL '" + redactUrl(url) +
      "' (want sqlite:PATH, sqlite::memory:, PATH.db or postgresql://...)");
}

}  // namespace infera::store
