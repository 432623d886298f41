#include <gtest/gtest.h>

#include <chrono>

#include "fakes/servers.h"
#include "store/redis.h"

namespace infera::store {
namespace {

using infera::testing::RedisServer;
using std::chrono::milliseconds;
using Type = RedisReply::Type;

// "calls=N" of `cmdstat_<command>` in INFO commandstats (0 when the command never ran).
int64_t commandCalls(RedisClient& c, const std::string& command) {
  auto info = c.command({"INFO", "commandstats"});
  if (!info.ok() || info->type != Type::kString) return -1;
  const std::string key = "cmdstat_" + command + ":calls=";
  const auto at = info->str.find(key);
  if (at == std::string::npos) return 0;
  return std::stoll(info->str.substr(at + key.size()));
}

class RedisClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = RedisServer::start();
    ASSERT_NE(server_, nullptr) << "redis-server did not start";
    address_.port = server_->port();
    auto c = RedisClient::connect(address_, milliseconds(2000));
    ASSERT_TRUE(c.ok()) << c.status().toString();
    client_ = std::move(*c);
  }
  RedisReply ok(const std::vector<std::string>& argv) {
    auto r = client_->command(argv);
    EXPECT_TRUE(r.ok()) << argv[0] << ": " << r.status().toString();
    return r.ok() ? *r : RedisReply{};
  }

  std::unique_ptr<RedisServer> server_;
  RedisAddress address_;
  std::unique_ptr<RedisClient> client_;
};

TEST_F(RedisClientTest, SetGetAndIncrBy) {
  const std::string binary("a\0b\r\nc", 6);
  auto set = ok({"SET", "k", binary});
  EXPECT_EQ(set.type, Type::kStatus);
  EXPECT_EQ(set.str, "OK");
  auto get = ok({"GET", "k"});
  EXPECT_EQ(get.type, Type::kString);
  EXPECT_EQ(get.str, binary);
  EXPECT_EQ(ok({"GET", "missing"}).type, Type::kNil);
  auto inc = ok({"INCRBY", "n", "5"});
  EXPECT_EQ(inc.type, Type::kInteger);
  EXPECT_EQ(inc.integer, 5);
  EXPECT_EQ(ok({"INCRBY", "n", "-7"}).integer, -2);
}

TEST_F(RedisClientTest, ReturnsArrays) {
  ok({"RPUSH", "list", "a", "b", "c"});
  auto range = ok({"LRANGE", "list", "0", "-1"});
  ASSERT_EQ(range.type, Type::kArray);
  ASSERT_EQ(range.elements.size(), 3u);
  EXPECT_EQ(range.elements[0].str, "a");
  EXPECT_EQ(range.elements[2].str, "c");
  EXPECT_EQ(ok({"LRANGE", "nothing", "0", "-1"}).elements.size(), 0u);
}

TEST_F(RedisClientTest, ErrorReplyIsAReplyNotAFailedResult) {
  ok({"SET", "k", "not a number"});
  auto r = client_->command({"INCR", "k"});
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_TRUE(r->isError());
  EXPECT_EQ(r->str.rfind("ERR", 0), 0u) << r->str;
  EXPECT_EQ(ok({"PING"}).str, "PONG");  // the connection is fine afterwards
}

TEST_F(RedisClientTest, EvalUsesEvalShaAndLoadsTheScriptOnNoScript) {
  ok({"SCRIPT", "FLUSH"});
  const RedisScript script("return redis.call('INCRBY', KEYS[1], ARGV[1])");
  auto first = client_->eval(script, {"counter"}, {"5"});
  ASSERT_TRUE(first.ok()) << first.status().toString();
  EXPECT_EQ(first->integer, 5);
  EXPECT_EQ(commandCalls(*client_, "eval"), 1);  // NOSCRIPT, then EVAL once
  auto second = client_->eval(script, {"counter"}, {"5"});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->integer, 10);
  EXPECT_EQ(commandCalls(*client_, "eval"), 1);  // cached: EVALSHA only
  EXPECT_EQ(commandCalls(*client_, "evalsha"), 2);

  ok({"SCRIPT", "FLUSH"});
  auto third = client_->eval(script, {"counter"}, {"1"});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->integer, 11);
  EXPECT_EQ(commandCalls(*client_, "eval"), 2);

  const RedisScript failing("return redis.call('INCR', KEYS[1])");
  ok({"SET", "text", "x"});
  auto err = client_->eval(failing, {"text"}, {});
  ASSERT_TRUE(err.ok()) << err.status().toString();
  EXPECT_TRUE(err->isError());
}

TEST_F(RedisClientTest, SelectsTheDatabaseOfTheAddress) {
  RedisAddress db3 = address_;
  db3.db = 3;
  auto c3 = RedisClient::connect(db3);
  ASSERT_TRUE(c3.ok()) << c3.status().toString();
  ASSERT_TRUE((*c3)->command({"SET", "where", "three"}).ok());
  EXPECT_EQ(ok({"GET", "where"}).type, Type::kNil);
  auto back = (*c3)->command({"GET", "where"});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->str, "three");
}

TEST_F(RedisClientTest, AuthenticatesWithThePasswordOfTheAddress) {
  ok({"CONFIG", "SET", "requirepass", "s3cret"});
  RedisAddress with_password = address_;
  with_password.password = "s3cret";
  auto authed = RedisClient::connect(with_password);
  ASSERT_TRUE(authed.ok()) << authed.status().toString();
  auto pong = (*authed)->command({"PING"});
  ASSERT_TRUE(pong.ok());
  EXPECT_EQ(pong->str, "PONG");

  auto anonymous = RedisClient::connect(address_);
  ASSERT_TRUE(anonymous.ok());
  auto refused = (*anonymous)->command({"PING"});
  ASSERT_TRUE(refused.ok());
  EXPECT_TRUE(refused->isError());
  EXPECT_NE(refused->str.find("NOAUTH"), std::string::npos) << refused->str;

  RedisAddress wrong = address_;
  wrong.password = "nope";
  auto denied = RedisClient::connect(wrong);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kUnauthenticated) << denied.status().toString();
}

TEST_F(RedisClientTest, FailsWhileTheServerIsDownAndReconnectsAfterItReturns) {
  ok({"SET", "k", "v"});
  server_->kill();
  auto down = client_->command({"GET", "k"});
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable) << down.status().toString();
  auto still_down = client_->command({"GET", "k"});
  EXPECT_EQ(still_down.status().code(), StatusCode::kUnavailable) << still_down.status().toString();
  ASSERT_TRUE(server_->restart());
  auto back = client_->command({"SET", "k", "again"});
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(ok({"GET", "k"}).str, "again");
}

TEST_F(RedisClientTest, TimesOutWhenTheServerStopsAnswering) {
  // The bounds below fail a timeout kept at twice it.
  auto c = RedisClient::connect(address_, milliseconds(500));
  ASSERT_TRUE(c.ok());
  server_->pause();
  const auto start = std::chrono::steady_clock::now();
  auto r = (*c)->command({"PING"});
  const auto waited = std::chrono::steady_clock::now() - start;
  server_->resume();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().toString();
  EXPECT_GE(waited, milliseconds(490));
  EXPECT_LT(waited, milliseconds(1000));
  auto again = (*c)->command({"PING"});
  ASSERT_TRUE(again.ok()) << again.status().toString();
  EXPECT_EQ(again->str, "PONG");
}

TEST(RedisConnectTest, NothingListeningIsUnavailable) {
  RedisAddress a;
  a.port = infera::testing::freeLoopbackPort();
  auto c = RedisClient::connect(a, milliseconds(500));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().toString();
}

}  // namespace
}  // namespace infera::store
