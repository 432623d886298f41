#include <atomic>

#include "fakes/servers.h"
#include "store/sql_behaviour.h"

namespace infera::store {
namespace {

using infera::testing::PostgresServer;

// One PostgreSQL server per test process, started on first use; each test gets its own database.
class PostgresEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { server().reset(); }
  static std::unique_ptr<PostgresServer>& server() {
    static std::unique_ptr<PostgresServer> s;
    return s;
  }
  static PostgresServer* get() {
    static bool tried = false;
    if (!tried) {
      tried = true;
      server() = PostgresServer::start();
    }
    return server().get();
  }
};
::testing::Environment* const kPostgresEnv =
    ::testing::AddGlobalTestEnvironment(new PostgresEnvironment);

std::string freshPostgresDatabase() {
  static std::atomic<int> n{0};
  PostgresServer* pg = PostgresEnvironment::get();
  if (pg == nullptr) return {};
  const std::string name = "test_" + std::to_string(n++);
  if (!pg->createDatabase(name)) return {};
  return pg->url(name);
}

INSTANTIATE_TEST_SUITE_P(Postgres, SqlBehaviourTest,
                         ::testing::Values(SqlBackend{"Postgres", freshPostgresDatabase}),
                         backendName);

class PostgresSqlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = freshPostgresDatabase();
    ASSERT_FALSE(url_.empty()) << "PostgreSQL did not start";
    auto db = SqlDb::open(url_);
    ASSERT_TRUE(db.ok()) << db.status().toString();
    db_ = std::move(*db);
    ASSERT_TRUE(db_->execScript("CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT)").isOk());
  }
  // Ends db_'s server-side session the way a restart or an idle timeout would, and waits until
  // that backend is gone.
  void terminateBackendOf(SqlDb& victim) {
    auto pid = victim.exec("SELECT pg_backend_pid()");
    ASSERT_TRUE(pid.ok()) << pid.status().toString();
    auto admin = SqlDb::open(url_);
    ASSERT_TRUE(admin.ok());
    auto killed = (*admin)->exec("SELECT pg_terminate_backend(?1, 5000)", {pid->integer(0, 0)});
    ASSERT_TRUE(killed.ok()) << killed.status().toString();
    ASSERT_EQ(killed->integer(0, 0), 1);
  }
  std::string url_;
  std::unique_ptr<SqlDb> db_;
};

TEST_F(PostgresSqlTest, ReportsDialectAndConvertsColumnsByType) {
  EXPECT_EQ(db_->dialect(), SqlDialect::kPostgres);
  auto r = db_->exec(
      "SELECT 7::smallint, 8::integer, 9::bigint, 1.5::real, 2.25::double precision, "
      "12.50::numeric, "
      "true, 'text'::text, NULL::bigint, 'v'::varchar");
  ASSERT_TRUE(r.ok()) << r.status().toString();
  const auto& row = r->rows.at(0);
  for (int c : {0, 1, 2}) {
    ASSERT_TRUE(std::holds_alternative<int64_t>(row[c])) << c;
  }
  EXPECT_EQ(std::get<int64_t>(row[0]), 7);
  EXPECT_EQ(std::get<int64_t>(row[2]), 9);
  for (int c : {3, 4, 5}) {
    ASSERT_TRUE(std::holds_alternative<double>(row[c])) << c;
  }
  EXPECT_EQ(std::get<double>(row[3]), 1.5);
  EXPECT_EQ(std::get<double>(row[5]), 12.5);
  EXPECT_EQ(std::get<int64_t>(row[6]), 1);  // boolean
  EXPECT_EQ(std::get<std::string>(row[7]), "text");
  EXPECT_TRUE(r->isNull(0, 8));
  EXPECT_EQ(std::get<std::string>(row[9]), "v");
}

TEST_F(PostgresSqlTest, ReconnectsWhenTheServerClosedAnIdleConnection) {
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("a")})
          .ok());
  terminateBackendOf(*db_);
  // The closed connection is noticed before anything is sent, so the statement runs once.
  auto ins =
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{2}, std::string("b")});
  ASSERT_TRUE(ins.ok()) << ins.status().toString();
  auto r = db_->exec("SELECT COUNT(*) FROM items");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->integer(0, 0), 2);
}

TEST_F(PostgresSqlTest, TransactionLostWithItsConnectionFailsUntilRolledBack) {
  ASSERT_TRUE(db_->begin().isOk());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("a")})
          .ok());
  terminateBackendOf(*db_);
  auto ins =
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{2}, std::string("b")});
  ASSERT_FALSE(ins.ok());
  EXPECT_EQ(ins.status().code(), StatusCode::kUnavailable) << ins.status().toString();
  // Not silently continued outside the transaction on a new connection.
  EXPECT_EQ(db_->exec("SELECT 1").status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(db_->rollback().isOk());
  auto r = db_->exec("SELECT COUNT(*) FROM items");
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->integer(0, 0), 0);
}

TEST_F(PostgresSqlTest, CommitAfterAFailedStatementRollsBackAndSaysSo) {
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("a")})
          .ok());
  ASSERT_TRUE(db_->begin().isOk());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{2}, std::string("b")})
          .ok());
  EXPECT_EQ(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("c")})
          .status()
          .code(),
      StatusCode::kAlreadyExists);
  EXPECT_EQ(db_->commit().code(), StatusCode::kFailedPrecondition);
  auto r = db_->exec("SELECT COUNT(*) FROM items");
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->integer(0, 0), 1);
}

TEST(PostgresOpenTest, UnreachableServerIsUnavailable) {
  const uint16_t port = infera::testing::freeLoopbackPort();
  auto db = SqlDb::open("postgresql://postgres@127.0.0.1:" + std::to_string(port) + "/postgres");
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), StatusCode::kUnavailable) << db.status().toString();
}

}  // namespace
}  // namespace infera::store
