#include "store/sql_behaviour.h"

#include <cmath>
#include <limits>

namespace infera::store {
namespace {

constexpr const char* kSchema =
    "CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT NOT NULL, score DOUBLE PRECISION, note "
    "TEXT);"
    "CREATE UNIQUE INDEX items_name ON items (name);";

TEST_P(SqlBehaviourTest, RoundTripsIntegersRealsTextAndNull) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  // 2^53 + 1 does not survive a trip through a double; it must stay an integer all the way.
  const int64_t big = (int64_t{1} << 53) + 1;
  const std::string text = "h\xC3\xA9llo 'quoted' ?1 \"x\"";
  auto ins = db_->exec("INSERT INTO items (id, name, score, note) VALUES (?1, ?2, ?3, ?4)",
                       {big, text, 0.1, std::monostate{}});
  ASSERT_TRUE(ins.ok()) << ins.status().toString();
  EXPECT_EQ(ins->affected, 1);
  ASSERT_TRUE(db_->exec("INSERT INTO items (id, name, score, note) VALUES (?1, ?2, ?3, ?4)",
                        {std::numeric_limits<int64_t>::min(), std::string("min"), -1.5e300,
                         std::string("")})
                  .ok());

  auto r = db_->exec("SELECT id, name, score, note FROM items WHERE id = ?1", {big});
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->columns, (std::vector<std::string>{"id", "name", "score", "note"}));
  ASSERT_EQ(r->rows.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<int64_t>(r->rows[0][0]));
  EXPECT_EQ(std::get<int64_t>(r->rows[0][0]), big);
  EXPECT_EQ(r->text(0, 1), text);
  ASSERT_TRUE(std::holds_alternative<double>(r->rows[0][2]));
  EXPECT_EQ(std::get<double>(r->rows[0][2]), 0.1);  // exact: "%.17g" on the way in
  EXPECT_TRUE(r->isNull(0, 3));
  EXPECT_EQ(r->text(0, 3), "");
  EXPECT_EQ(r->integer(0, 3, 7), 7);

  auto m = db_->exec("SELECT id, score, note FROM items WHERE name = ?1", {std::string("min")});
  ASSERT_TRUE(m.ok()) << m.status().toString();
  ASSERT_EQ(m->rows.size(), 1u);
  EXPECT_EQ(m->integer(0, 0), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(m->real(0, 1), -1.5e300);
  EXPECT_FALSE(m->isNull(0, 2));  // an empty string is not NULL
  EXPECT_EQ(m->text(0, 2), "");
}

TEST_P(SqlBehaviourTest, ParametersAreTypedAndNumbered) {
  // ?N may repeat and come in any order; a ?1 inside a literal is text, not a parameter.
  const int64_t big = int64_t{1} << 40;  // past int4: the parameter must not be narrowed
  auto r = db_->exec("SELECT ?2, CAST(?1 AS BIGINT), '?1', CAST(?1 AS BIGINT) + 1",
                     {big, std::string("two")});
  ASSERT_TRUE(r.ok()) << r.status().toString();
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_EQ(r->text(0, 0), "two");
  ASSERT_TRUE(std::holds_alternative<int64_t>(r->rows[0][1]));
  EXPECT_EQ(r->integer(0, 1), big);
  EXPECT_EQ(r->text(0, 2), "?1");
  EXPECT_EQ(r->integer(0, 3), big + 1);
  // Untyped on PostgreSQL (text back), an integer on SQLite: the typed reads agree.
  auto bare = db_->exec("SELECT ?1", {int64_t{-17}});
  ASSERT_TRUE(bare.ok()) << bare.status().toString();
  EXPECT_EQ(bare->integer(0, 0), -17);
  EXPECT_EQ(bare->text(0, 0), "-17");

  // A NULL parameter has no type: PostgreSQL needs the context (a column, a CAST) to give it one.
  auto n = db_->exec("SELECT CAST(?1 AS TEXT) IS NULL, ?2 * 2.0", {std::monostate{}, 1.25});
  ASSERT_TRUE(n.ok()) << n.status().toString();
  EXPECT_EQ(n->integer(0, 0), 1);
  EXPECT_EQ(n->real(0, 1), 2.5);
}

TEST_P(SqlBehaviourTest, WrongParameterCountIsAnError) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  auto r = db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(count(*db_, "items"), 0);
}

TEST_P(SqlBehaviourTest, CountsAffectedRowsOfWritesOnly) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  for (int64_t i = 1; i <= 3; ++i) {
    auto r = db_->exec("INSERT INTO items (id, name, score) VALUES (?1, ?2, ?3)",
                       {i, std::string("n").append(std::to_string(i)), static_cast<double>(i)});
    ASSERT_TRUE(r.ok()) << r.status().toString();
    EXPECT_EQ(r->affected, 1);
  }
  auto up = db_->exec("UPDATE items SET score = score * 10 WHERE id >= ?1", {int64_t{2}});
  ASSERT_TRUE(up.ok()) << up.status().toString();
  EXPECT_EQ(up->affected, 2);
  auto sel = db_->exec("SELECT id FROM items ORDER BY id");
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(sel->rows.size(), 3u);
  EXPECT_EQ(sel->affected, 0);
  auto del = db_->exec("DELETE FROM items WHERE score > ?1", {15.0});
  ASSERT_TRUE(del.ok()) << del.status().toString();
  EXPECT_EQ(del->affected, 2);
  EXPECT_EQ(count(*db_, "items"), 1);
}

TEST_P(SqlBehaviourTest, AggregatesReadAsNumbers) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  for (int64_t i = 1; i <= 4; ++i) {
    ASSERT_TRUE(
        db_->exec("INSERT INTO items (id, name, score) VALUES (?1, ?2, ?3)",
                  {i, std::string("n").append(std::to_string(i)), static_cast<double>(i) / 2})
            .ok());
  }
  // SUM(BIGINT) is numeric on PostgreSQL and an integer on SQLite: the typed reads agree.
  auto r = db_->exec("SELECT SUM(id), AVG(score), COUNT(*), MAX(name) FROM items");
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->integer(0, 0), 10);
  EXPECT_EQ(r->real(0, 0), 10.0);
  EXPECT_DOUBLE_EQ(r->real(0, 1), 1.25);
  EXPECT_EQ(r->integer(0, 2), 4);
  EXPECT_EQ(r->text(0, 3), "n4");
  auto none = db_->exec("SELECT SUM(id) FROM items WHERE id > 100");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->isNull(0, 0));
  EXPECT_EQ(none->integer(0, 0, -1), -1);
}

TEST_P(SqlBehaviourTest, UniqueViolationIsAlreadyExists) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("a")})
          .ok());
  auto pk =
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("b")});
  ASSERT_FALSE(pk.ok());
  EXPECT_EQ(pk.status().code(), StatusCode::kAlreadyExists) << pk.status().toString();
  auto uniq =
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{2}, std::string("a")});
  ASSERT_FALSE(uniq.ok());
  EXPECT_EQ(uniq.status().code(), StatusCode::kAlreadyExists) << uniq.status().toString();
  auto not_null =
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{3}, std::monostate{}});
  ASSERT_FALSE(not_null.ok());
  EXPECT_EQ(not_null.status().code(), StatusCode::kInternal) << not_null.status().toString();
  auto syntax = db_->exec("SELEC 1");
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().code(), StatusCode::kInternal);
  EXPECT_FALSE(syntax.status().message().empty());
  EXPECT_EQ(count(*db_, "items"), 1);
}

TEST_P(SqlBehaviourTest, ParametersTakeTheTypeOfTheirContext) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  ASSERT_TRUE(db_->exec("INSERT INTO items (id, name, score) VALUES (?1, ?2, ?3)",
                        {int64_t{5000000000}, std::string("abcdef"), int64_t{3}})
                  .ok());  // an integer into a DOUBLE PRECISION column
  auto r = db_->exec("SELECT substr(name, ?1, ?2), score + ?3 FROM items WHERE id = ?4 LIMIT ?5",
                     {int64_t{2}, int64_t{3}, 0.5, int64_t{5000000000}, int64_t{10}});
  ASSERT_TRUE(r.ok()) << r.status().toString();
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_EQ(r->text(0, 0), "bcd");
  EXPECT_EQ(r->real(0, 1), 3.5);
}

TEST_P(SqlBehaviourTest, UpsertWithOnConflict) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  const std::string upsert =
      "INSERT INTO items (id, name, score) VALUES (?1, ?2, ?3) "
      "ON CONFLICT (id) DO UPDATE SET score = items.score + excluded.score";
  ASSERT_TRUE(db_->exec(upsert, {int64_t{7}, std::string("seven"), 1.5}).ok());
  auto second = db_->exec(upsert, {int64_t{7}, std::string("seven"), 2.0});
  ASSERT_TRUE(second.ok()) << second.status().toString();
  EXPECT_EQ(second->affected, 1);
  auto r = db_->exec("SELECT score FROM items WHERE id = ?1", {int64_t{7}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->real(0, 0), 3.5);
}

TEST_P(SqlBehaviourTest, CommitPublishesWritesToOtherConnections) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  auto other = open();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(db_->begin().isOk());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("a")})
          .ok());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{2}, std::string("b")})
          .ok());
  EXPECT_EQ(count(*db_, "items"), 2);    // the transaction sees its own writes
  EXPECT_EQ(count(*other, "items"), 0);  // nobody else does yet
  ASSERT_TRUE(db_->commit().isOk());
  EXPECT_EQ(count(*other, "items"), 2);
}

TEST_P(SqlBehaviourTest, RollbackDiscardsWrites) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("kept")})
          .ok());
  ASSERT_TRUE(db_->begin().isOk());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{2}, std::string("gone")})
          .ok());
  ASSERT_TRUE(db_->exec("UPDATE items SET note = ?1", {std::string("changed")}).ok());
  ASSERT_TRUE(db_->rollback().isOk());
  auto r = db_->exec("SELECT id, note FROM items");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_EQ(r->integer(0, 0), 1);
  EXPECT_TRUE(r->isNull(0, 1));
}

TEST_P(SqlBehaviourTest, FailedStatementInTransactionThenRollbackKeepsEarlierState) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("a")})
          .ok());
  ASSERT_TRUE(db_->begin().isOk());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{2}, std::string("b")})
          .ok());
  auto dup =
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{1}, std::string("c")});
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(db_->rollback().isOk());
  EXPECT_EQ(count(*db_, "items"), 1);
  // The connection is usable afterwards, in and out of transactions.
  ASSERT_TRUE(db_->begin().isOk());
  ASSERT_TRUE(
      db_->exec("INSERT INTO items (id, name) VALUES (?1, ?2)", {int64_t{3}, std::string("d")})
          .ok());
  ASSERT_TRUE(db_->commit().isOk());
  EXPECT_EQ(count(*db_, "items"), 2);
}

TEST_P(SqlBehaviourTest, TransactionCallsOutOfOrderAreFailedPrecondition) {
  EXPECT_EQ(db_->commit().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(db_->rollback().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(db_->begin().isOk());
  EXPECT_EQ(db_->begin().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(db_->commit().isOk());
  EXPECT_EQ(db_->commit().code(), StatusCode::kFailedPrecondition);
}

TEST_P(SqlBehaviourTest, TwoConnectionsSeeEachOthersWrites) {
  ASSERT_TRUE(db_->execScript(kSchema).isOk());
  auto other = open();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(db_->exec("INSERT INTO items (id, name, score) VALUES (?1, ?2, ?3)",
                        {int64_t{1}, std::string("a"), 1.0})
                  .ok());
  auto seen = other->exec("SELECT name, score FROM items WHERE id = ?1", {int64_t{1}});
  ASSERT_TRUE(seen.ok()) << seen.status().toString();
  ASSERT_EQ(seen->rows.size(), 1u);
  EXPECT_EQ(seen->text(0, 0), "a");
  auto up = other->exec("UPDATE items SET score = ?1 WHERE id = ?2", {2.5, int64_t{1}});
  ASSERT_TRUE(up.ok()) << up.status().toString();
  EXPECT_EQ(up->affected, 1);
  auto back = db_->exec("SELECT score FROM items WHERE id = ?1", {int64_t{1}});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->real(0, 0), 2.5);
}

TEST_P(SqlBehaviourTest, ExecScriptRunsSeveralStatementsAndExecRunsOne) {
  ASSERT_TRUE(db_->execScript("CREATE TABLE a (x BIGINT); CREATE TABLE b (y TEXT);\n"
                              "INSERT INTO a (x) VALUES (1); INSERT INTO a (x) VALUES (2);")
                  .isOk());
  EXPECT_EQ(count(*db_, "a"), 2);
  EXPECT_EQ(count(*db_, "b"), 0);
  EXPECT_FALSE(db_->exec("INSERT INTO a (x) VALUES (3); INSERT INTO a (x) VALUES (4)").ok());
  EXPECT_EQ(count(*db_, "a"), 2);
  const Status bad = db_->execScript("INSERT INTO missing_table (x) VALUES (1);");
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("missing_table"), std::string::npos) << bad.toString();
}

}  // namespace
}  // namespace infera::store
