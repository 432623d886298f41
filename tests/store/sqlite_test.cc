#include <stdlib.h>

#include <atomic>
#include <filesystem>

#include "store/sql_behaviour.h"

namespace infera::store {
namespace {

// One temporary directory per test process; every database is a new file in it.
class TempDirEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!dir().empty()) std::filesystem::remove_all(dir());
  }
  static const std::string& dir() {
    static const std::string d = [] {
      std::string tmpl = std::filesystem::temp_directory_path().string() + "/infera-sqlite-XXXXXX";
      return ::mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
    }();
    return d;
  }
};
::testing::Environment* const kTempDirEnv =
    ::testing::AddGlobalTestEnvironment(new TempDirEnvironment);

std::string freshSqliteFile() {
  static std::atomic<int> n{0};
  if (TempDirEnvironment::dir().empty()) return {};
  return "sqlite:" + TempDirEnvironment::dir() + "/db" + std::to_string(n++) + ".db";
}

INSTANTIATE_TEST_SUITE_P(Sqlite, SqlBehaviourTest,
                         ::testing::Values(SqlBackend{"Sqlite", freshSqliteFile}), backendName);

TEST(SqliteOpenTest, AcceptsSqliteUrlsAndPlainDbPaths) {
  auto mem = SqlDb::open("sqlite::memory:");
  ASSERT_TRUE(mem.ok()) << mem.status().toString();
  EXPECT_EQ((*mem)->dialect(), SqlDialect::kSqlite);
  ASSERT_TRUE((*mem)->exec("CREATE TABLE t (x BIGINT)").ok());

  const std::string plain = TempDirEnvironment::dir() + "/plain.db";
  auto file = SqlDb::open(plain);
  ASSERT_TRUE(file.ok()) << file.status().toString();
  ASSERT_TRUE((*file)->exec("CREATE TABLE t (x BIGINT)").ok());
  EXPECT_TRUE(std::filesystem::exists(plain));

  auto bad = SqlDb::open("mysql://localhost/db");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SqlDb::open("sqlite:").status().code(), StatusCode::kInvalidArgument);
  // Missing directories are made, as for every path the server writes (`config validate` checks
  // that they can be); a path that cannot be made fails.
  const std::string nested = TempDirEnvironment::dir() + "/no/such/dir/x.db";
  auto missing_dir = SqlDb::open("sqlite:" + nested);
  ASSERT_TRUE(missing_dir.ok()) << missing_dir.status().toString();
  EXPECT_TRUE(std::filesystem::exists(nested));
  auto under_file = SqlDb::open("sqlite:" + plain + "/x.db");
  ASSERT_FALSE(under_file.ok());
  EXPECT_EQ(under_file.status().code(), StatusCode::kUnavailable);
}

TEST(SqliteOpenTest, OpensFilesInWalModeWithForeignKeysOn) {
  auto db = SqlDb::open(freshSqliteFile());
  ASSERT_TRUE(db.ok()) << db.status().toString();
  auto mode = (*db)->exec("PRAGMA journal_mode");
  ASSERT_TRUE(mode.ok());
  EXPECT_EQ(mode->text(0, 0), "wal");
  auto timeout = (*db)->exec("PRAGMA busy_timeout");
  ASSERT_TRUE(timeout.ok());
  EXPECT_EQ(timeout->integer(0, 0), 5000);
  ASSERT_TRUE(
      (*db)
          ->execScript(
              "CREATE TABLE parent (id BIGINT PRIMARY KEY);"
              "CREATE TABLE child (id BIGINT PRIMARY KEY, parent BIGINT REFERENCES parent (id));")
          .isOk());
  auto orphan =
      (*db)->exec("INSERT INTO child (id, parent) VALUES (?1, ?2)", {int64_t{1}, int64_t{99}});
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.status().message().find("FOREIGN KEY"), std::string::npos)
      << orphan.status().toString();
}

TEST(SqliteOpenTest, ReusesPreparedStatementsAcrossCalls) {
  auto db = SqlDb::open("sqlite::memory:");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->exec("CREATE TABLE t (x BIGINT)").ok());
  // The same SQL text many times (a cached statement, reset and rebound each time), mixed with
  // a failing use that must not leave the statement half-run.
  for (int64_t i = 0; i < 300; ++i) {
    ASSERT_TRUE((*db)->exec("INSERT INTO t (x) VALUES (?1)", {i}).ok());
    EXPECT_FALSE((*db)->exec("INSERT INTO t (x) VALUES (?1)").ok());
  }
  auto r = (*db)->exec("SELECT COUNT(*), SUM(x) FROM t");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->integer(0, 0), 300);
  EXPECT_EQ(r->integer(0, 1), 299 * 300 / 2);
}

TEST(PostgresPlaceholdersTest, NumbersBecomeDollarsOutsideQuotes) {
  EXPECT_EQ(toPostgresPlaceholders("SELECT ?1, ?2 FROM t WHERE a = ?12"),
            "SELECT $1, $2 FROM t WHERE a = $12");
  EXPECT_EQ(toPostgresPlaceholders("UPDATE t SET a = ?2 WHERE b = ?1"),
            "UPDATE t SET a = $2 WHERE b = $1");
  EXPECT_EQ(toPostgresPlaceholders("SELECT '?1', ?1"), "SELECT '?1', $1");
  EXPECT_EQ(toPostgresPlaceholders("SELECT 'it''s ?1', ?2"), "SELECT 'it''s ?1', $2");
  EXPECT_EQ(toPostgresPlaceholders("SELECT \"odd?1name\" FROM t WHERE x = ?1"),
            "SELECT \"odd?1name\" FROM t WHERE x = $1");
  EXPECT_EQ(toPostgresPlaceholders("SELECT data ? 'key', data ?| ARRAY['a'] FROM t"),
            "SELECT data ? 'key', data ?| ARRAY['a'] FROM t");
  EXPECT_EQ(toPostgresPlaceholders("?1"), "$1");
  EXPECT_EQ(toPostgresPlaceholders("x ?"), "x ?");
  EXPECT_EQ(toPostgresPlaceholders(""), "");
}

TEST(SqlResultTest, TypedReadsConvertBetweenKinds) {
  SqlResult r;
  r.columns = {"a", "b", "c", "d", "e", "f"};
  r.rows.push_back({SqlValue{int64_t{42}}, SqlValue{2.75}, SqlValue{std::string("12.50")},
                    SqlValue{std::string("17")}, SqlValue{std::monostate{}},
                    SqlValue{std::string("abc")}});
  EXPECT_EQ(r.integer(0, 0), 42);
  EXPECT_EQ(r.real(0, 0), 42.0);
  EXPECT_EQ(r.text(0, 0), "42");
  EXPECT_EQ(r.integer(0, 1), 2);
  EXPECT_EQ(r.text(0, 1), "2.75");
  EXPECT_EQ(r.real(0, 2), 12.5);  // numeric as text
  EXPECT_EQ(r.integer(0, 2), 12);
  EXPECT_EQ(r.integer(0, 3), 17);
  EXPECT_EQ(r.integer(0, 4, -3), -3);
  EXPECT_EQ(r.real(0, 4, 0.5), 0.5);
  EXPECT_TRUE(r.isNull(0, 4));
  EXPECT_FALSE(r.isNull(0, 5));
  EXPECT_EQ(r.integer(0, 5, 9), 9);
  EXPECT_EQ(r.text(0, 5), "abc");
}

}  // namespace
}  // namespace infera::store
