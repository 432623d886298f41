#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <thread>

#include "fakes/servers.h"
#include "store/redis.h"

namespace infera::store {
namespace {

namespace asio = net::asio;
using boost::system::error_code;
using infera::testing::RedisServer;
using net::Task;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using Type = RedisReply::Type;

// An io_context on its own thread. run() executes a coroutine on it and waits for the end; a
// coroutine that does not finish within the limit is a hang, which aborts the test binary
// rather than leave the loop touching this test's stack.
class LoopThread {
 public:
  LoopThread() : guard_(ctx_.get_executor()), thread_([this] { ctx_.run(); }) {}
  ~LoopThread() {
    // Everything the clients started must finish on its own once they are closed.
    guard_.reset();
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!ctx_.stopped() && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
    EXPECT_TRUE(ctx_.stopped()) << "coroutines still running 5 s after the test ended";
    ctx_.stop();
    thread_.join();
  }

  void run(std::function<Task<void>()> body,
           std::chrono::seconds limit = std::chrono::seconds(30)) {
    std::promise<void> done;
    auto finished = done.get_future();
    asio::co_spawn(
        ctx_, [body = std::move(body)]() -> Task<void> { co_await body(); },
        [&done](std::exception_ptr e) {
          if (e) {
            done.set_exception(e);
          } else {
            done.set_value();
          }
        });
    if (finished.wait_for(limit) != std::future_status::ready) {
      std::fprintf(stderr, "a test coroutine did not finish within %lld s\n",
                   static_cast<long long>(limit.count()));
      std::abort();
    }
    finished.get();
  }

  asio::io_context& ctx() { return ctx_; }

 private:
  asio::io_context ctx_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// Runs f(0..n-1) concurrently on the current loop and waits for all of them.
Task<void> all(int n, std::function<Task<void>(int)> f) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer done(ex);
  done.expires_at(net::Deadline::max());
  int remaining = n;
  for (int i = 0; i < n; ++i) {
    asio::co_spawn(
        ex, [&f, i]() -> Task<void> { co_await f(i); },
        [&](std::exception_ptr e) {
          EXPECT_FALSE(e) << "a concurrent coroutine threw";
          if (--remaining == 0) done.cancel();
        });
  }
  while (remaining > 0) {
    error_code ec;
    co_await done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

Task<void> sleepFor(milliseconds d) { co_await net::sleepUntil(Clock::now() + d); }

// send(redis, "SET", "k", value): g++ 12 cannot compile a braced list inside a co_await
// expression (and mishandles temporaries with destructors there), so the argv is built here.
template <typename... Args>
Task<Result<RedisReply>> send(AsyncRedis& redis, Args... args) {
  std::vector<std::string> argv{std::string(args)...};
  auto task = redis.command(std::move(argv));
  co_return co_await std::move(task);
}

class AsyncRedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = RedisServer::start();
    ASSERT_NE(server_, nullptr) << "redis-server did not start";
    address_.port = server_->port();
  }
  void TearDown() override {
    loop_.run([this]() -> Task<void> {
      redis_.reset();
      co_return;
    });
  }
  void create(AsyncRedisOptions options, RedisAddress address) {
    loop_.run([&]() -> Task<void> {
      redis_ = AsyncRedis::create(loop_.ctx(), address, options);
      co_return;
    });
  }
  void create(AsyncRedisOptions options = generous()) { create(options, address_); }
  static AsyncRedisOptions generous() {
    AsyncRedisOptions o;
    o.command_timeout = milliseconds(5000);  // sanitizer builds on a busy 2-core box are slow
    o.connect_timeout = milliseconds(2000);
    o.reconnect_backoff = milliseconds(100);
    return o;
  }

  std::unique_ptr<RedisServer> server_;
  RedisAddress address_;
  LoopThread loop_;
  std::unique_ptr<AsyncRedis> redis_;
};

TEST_F(AsyncRedisTest, PipelinesConcurrentCommandsAndAnswersEachInOrder) {
  create();
  constexpr int kCoroutines = 50;
  constexpr int kEach = 20;
  int ok_replies = 0;
  bool in_order = true;
  int64_t final_value = -1;
  loop_.run([&]() -> Task<void> {
    co_await all(kCoroutines, [&](int) -> Task<void> {
      int64_t last = 0;
      for (int j = 0; j < kEach; ++j) {
        auto r = co_await send(*redis_, "INCR", "counter");
        if (!r.ok() || r->type != Type::kInteger) {
          ADD_FAILURE() << (r.ok() ? "not an integer: " + r->str : r.status().toString());
          co_return;
        }
        ++ok_replies;
        in_order = in_order && r->integer > last;  // a later INCR by the same caller sees more
        last = r->integer;
      }
    });
    auto total = co_await send(*redis_, "GET", "counter");
    if (total.ok()) final_value = std::stoll(total->str);
  });
  EXPECT_EQ(ok_replies, kCoroutines * kEach);
  EXPECT_TRUE(in_order);
  EXPECT_EQ(final_value, kCoroutines * kEach);
}

TEST_F(AsyncRedisTest, MatchesEveryPipelinedReplyToItsCommand) {
  create();
  constexpr int kCommands = 500;
  int matched = 0;
  loop_.run([&]() -> Task<void> {
    co_await all(kCommands, [&](int i) -> Task<void> {
      const std::string payload =
          "message-" + std::to_string(i) + std::string(static_cast<size_t>(i % 7) * 100, 'x');
      auto r = co_await send(*redis_, "ECHO", payload);
      if (r.ok() && r->type == Type::kString && r->str == payload) ++matched;
    });
  });
  EXPECT_EQ(matched, kCommands);
  bool connected = false;
  loop_.run([&]() -> Task<void> {
    connected = redis_->connected();
    co_return;
  });
  EXPECT_TRUE(connected);
}

TEST_F(AsyncRedisTest, ErrorRepliesAreRepliesAndTheConnectionStays) {
  create();
  Result<RedisReply> err = Status::internal("unset");
  Result<RedisReply> pong = Status::internal("unset");
  loop_.run([&]() -> Task<void> {
    co_await send(*redis_, "SET", "text", "abc");
    err = co_await send(*redis_, "INCR", "text");
    pong = co_await send(*redis_, "PING");
  });
  ASSERT_TRUE(err.ok()) << err.status().toString();
  EXPECT_TRUE(err->isError());
  ASSERT_TRUE(pong.ok()) << pong.status().toString();
  EXPECT_EQ(pong->str, "PONG");
}

TEST_F(AsyncRedisTest, EvalLoadsTheScriptOnceAndSurvivesScriptFlush) {
  create();
  const RedisScript script("return redis.call('INCRBY', KEYS[1], ARGV[1])");
  std::vector<int64_t> results;
  std::string stats;
  loop_.run([&]() -> Task<void> {
    co_await send(*redis_, "SCRIPT", "FLUSH");
    for (int i = 0; i < 3; ++i) {
      if (i == 2) co_await send(*redis_, "SCRIPT", "FLUSH");
      auto task = redis_->eval(script, {"evald"}, {"4"});
      auto r = co_await std::move(task);
      results.push_back(r.ok() && r->type == Type::kInteger ? r->integer : -1);
    }
    auto info = co_await send(*redis_, "INFO", "commandstats");
    if (info.ok()) stats = info->str;
  });
  EXPECT_EQ(results, (std::vector<int64_t>{4, 8, 12}));
  // EVAL ran only after each NOSCRIPT: first use and after the flush.
  EXPECT_NE(stats.find("cmdstat_eval:calls=2,"), std::string::npos) << stats;
}

TEST_F(AsyncRedisTest, FailsFastWhileTheServerIsDownAndReconnectsAfterTheBackoff) {
  AsyncRedisOptions o = generous();
  o.command_timeout = milliseconds(3000);  // waiting this long would be the failure
  o.connect_timeout = milliseconds(500);
  o.reconnect_backoff = milliseconds(300);
  create(o);
  bool first_ok = false;
  loop_.run([&]() -> Task<void> {
    auto r = co_await send(*redis_, "SET", "k", "before");
    first_ok = r.ok();
  });
  ASSERT_TRUE(first_ok);

  server_->kill();
  std::vector<StatusCode> codes;
  Clock::duration slowest{};
  bool connected = true;
  loop_.run([&]() -> Task<void> {
    for (int i = 0; i < 20; ++i) {
      const auto start = Clock::now();
      auto r = co_await send(*redis_, "GET", "k");
      slowest = std::max(slowest, Clock::now() - start);
      codes.push_back(r.ok() ? StatusCode::kOk : r.status().code());
      co_await sleepFor(milliseconds(25));  // 500 ms in all: includes refused reconnect attempts
    }
    connected = redis_->connected();
  });
  EXPECT_EQ(codes, std::vector<StatusCode>(20, StatusCode::kUnavailable));
  EXPECT_LT(slowest, milliseconds(1000));
  EXPECT_FALSE(connected);

  ASSERT_TRUE(server_->restart());
  const auto restarted = Clock::now();
  Result<RedisReply> back = Status::internal("unset");
  Clock::duration took{};
  loop_.run([&]() -> Task<void> {
    while (Clock::now() - restarted < std::chrono::seconds(5)) {
      back = co_await send(*redis_, "SET", "k", "after");
      if (back.ok()) break;
      EXPECT_EQ(back.status().code(), StatusCode::kUnavailable) << back.status().toString();
      co_await sleepFor(milliseconds(20));
    }
    took = Clock::now() - restarted;
    if (back.ok()) back = co_await send(*redis_, "GET", "k");
  });
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(back->str, "after");
  EXPECT_LT(took, milliseconds(300 + 1500));  // within a backoff (plus slack for a slow box)
}

TEST_F(AsyncRedisTest, CommandTimeoutFailsThatCommandAndClosesTheConnection) {
  AsyncRedisOptions o = generous();
  o.command_timeout = milliseconds(500);  // the bounds below fail a timeout kept at twice it
  create(o);
  bool warm = false;
  loop_.run([&]() -> Task<void> { warm = (co_await send(*redis_, "PING")).ok(); });
  ASSERT_TRUE(warm);

  server_->pause();
  std::vector<StatusCode> codes(3, StatusCode::kOk);
  std::vector<Clock::duration> waited(3);
  bool connected = true;
  loop_.run([&]() -> Task<void> {
    co_await all(3, [&](int i) -> Task<void> {
      const auto start = Clock::now();
      auto r = co_await send(*redis_, "INCR", "t");
      waited[static_cast<size_t>(i)] = Clock::now() - start;
      codes[static_cast<size_t>(i)] = r.ok() ? StatusCode::kOk : r.status().code();
    });
    connected = redis_->connected();
  });
  server_->resume();
  // The first to expire times out; the connection goes with it, failing the others at once. They
  // had been sent too, so they fail the same way: the server may still run them (it does, below).
  EXPECT_EQ(std::count(codes.begin(), codes.end(), StatusCode::kDeadlineExceeded), 3);
  for (const auto& w : waited) {
    EXPECT_GE(w, milliseconds(490));
    EXPECT_LT(w, milliseconds(1000));
  }
  EXPECT_FALSE(connected);

  Result<RedisReply> back = Status::internal("unset");
  loop_.run([&]() -> Task<void> {
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < deadline) {
      back = co_await send(*redis_, "GET", "t");
      if (back.ok()) break;
      co_await sleepFor(milliseconds(20));
    }
  });
  ASSERT_TRUE(back.ok()) << back.status().toString();
  // The INCRs were sent before the pause ended: the server ran them when resumed, even though
  // their callers had been told otherwise. A timeout says nothing about whether a command ran.
  EXPECT_EQ(back->str, "3");
}

TEST_F(AsyncRedisTest, ConnectAttemptIsBoundedByTheConnectTimeout) {
  // A stopped server still completes TCP handshakes (the kernel does), but never answers AUTH.
  server_->pause();
  AsyncRedisOptions o = generous();
  o.connect_timeout = milliseconds(500);  // the bounds below fail a timeout kept at twice it
  RedisAddress a = address_;
  a.password = "whatever";
  create(o, a);
  Result<RedisReply> r = Status::internal("unset");
  Clock::duration took{};
  loop_.run([&]() -> Task<void> {
    const auto start = Clock::now();
    r = co_await send(*redis_, "PING");
    took = Clock::now() - start;
  });
  server_->resume();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().toString();
  EXPECT_NE(r.status().message().find("timed out"), std::string::npos) << r.status().toString();
  EXPECT_GE(took, milliseconds(490));
  EXPECT_LT(took, milliseconds(1000));
}

TEST_F(AsyncRedisTest, CallersArrivingDuringAConnectAttemptWaitForIt) {
  create();
  int ok_replies = 0;
  loop_.run([&]() -> Task<void> {
    // All ten start before the connection exists; one connects, the others wait for it.
    co_await all(10, [&](int) -> Task<void> {
      auto r = co_await send(*redis_, "PING");
      if (r.ok() && r->str == "PONG") ++ok_replies;
    });
  });
  EXPECT_EQ(ok_replies, 10);
}

TEST_F(AsyncRedisTest, AuthenticatesAndSelectsTheDatabaseOnConnect) {
  auto admin = RedisClient::connect(address_);
  ASSERT_TRUE(admin.ok()) << admin.status().toString();
  ASSERT_TRUE((*admin)->command({"CONFIG", "SET", "requirepass", "pw"}).ok());
  RedisAddress a = address_;
  a.password = "pw";
  a.db = 5;
  create(generous(), a);
  Result<RedisReply> set = Status::internal("unset");
  loop_.run([&]() -> Task<void> { set = co_await send(*redis_, "SET", "where", "five"); });
  ASSERT_TRUE(set.ok()) << set.status().toString();
  EXPECT_FALSE(set->isError()) << set->str;
  RedisAddress check = a;
  auto c5 = RedisClient::connect(check);
  ASSERT_TRUE(c5.ok());
  EXPECT_EQ((*c5)->command({"GET", "where"})->str, "five");
  check.db = 0;
  auto c0 = RedisClient::connect(check);
  ASSERT_TRUE(c0.ok());
  EXPECT_EQ((*c0)->command({"GET", "where"})->type, Type::kNil);

  // A wrong password: the connect attempt fails, and so does the command.
  a.password = "wrong";
  std::unique_ptr<AsyncRedis> bad;
  Result<RedisReply> denied = Status::internal("unset");
  loop_.run([&]() -> Task<void> {
    bad = AsyncRedis::create(loop_.ctx(), a, generous());
    denied = co_await send(*bad, "PING");
    bad.reset();
  });
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(denied.status().message().find("AUTH"), std::string::npos)
      << denied.status().toString();
}

TEST_F(AsyncRedisTest, ResolvesHostNames) {
  RedisAddress a = address_;
  a.host = "localhost";  // may resolve to ::1 first, where nothing listens: the next address works
  create(generous(), a);
  Result<RedisReply> pong = Status::internal("unset");
  loop_.run([&]() -> Task<void> { pong = co_await send(*redis_, "PING"); });
  ASSERT_TRUE(pong.ok()) << pong.status().toString();
  EXPECT_EQ(pong->str, "PONG");
}

TEST_F(AsyncRedisTest, CloseCancelsCommandsInFlightAndLaterOnes) {
  create();
  bool warm = false;
  loop_.run([&]() -> Task<void> { warm = (co_await send(*redis_, "PING")).ok(); });
  ASSERT_TRUE(warm);
  server_->pause();  // nothing will be answered
  std::vector<StatusCode> codes;
  StatusCode after = StatusCode::kOk;
  loop_.run([&]() -> Task<void> {
    co_await all(4, [&](int i) -> Task<void> {
      if (i == 3) {  // the closer: lets the others queue and send first
        co_await sleepFor(milliseconds(50));
        redis_->close();
        co_return;
      }
      auto r = co_await send(*redis_, "INCR", "c");
      codes.push_back(r.ok() ? StatusCode::kOk : r.status().code());
    });
    auto r = co_await send(*redis_, "PING");
    after = r.ok() ? StatusCode::kOk : r.status().code();
  });
  EXPECT_EQ(codes, std::vector<StatusCode>(3, StatusCode::kCancelled));
  EXPECT_EQ(after, StatusCode::kCancelled);
}

TEST_F(AsyncRedisTest, DestroyingTheClientWithCommandsInFlightIsSafe) {
  create();
  bool warm = false;
  loop_.run([&]() -> Task<void> { warm = (co_await send(*redis_, "PING")).ok(); });
  ASSERT_TRUE(warm);
  server_->pause();
  std::vector<StatusCode> codes;
  loop_.run([&]() -> Task<void> {
    // Each caller holds its own task; the client goes away while they are suspended.
    co_await all(4, [&](int i) -> Task<void> {
      if (i == 3) {
        co_await sleepFor(milliseconds(50));
        redis_.reset();
        co_return;
      }
      auto task = redis_->command({"INCR", "d"});
      auto r = co_await std::move(task);
      codes.push_back(r.ok() ? StatusCode::kOk : r.status().code());
    });
  });
  EXPECT_EQ(codes, std::vector<StatusCode>(3, StatusCode::kCancelled));
}

TEST_F(AsyncRedisTest, ReconnectsAtMostOncePerBackoff) {
  // A fake server that accepts and hangs up at once: every connect attempt is one accept.
  int accepts = 0;
  int commands = 0;
  int failed = 0;
  AsyncRedisOptions o = generous();
  o.reconnect_backoff = milliseconds(200);
  loop_.run([&]() -> Task<void> {
    net::tcp::acceptor acceptor(loop_.ctx(),
                                net::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    RedisAddress a = address_;
    a.port = acceptor.local_endpoint().port();
    redis_ = AsyncRedis::create(loop_.ctx(), a, o);
    co_await all(2, [&](int i) -> Task<void> {
      if (i == 0) {
        for (;;) {
          error_code ec;
          net::tcp::socket s =
              co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
          if (ec) co_return;
          ++accepts;
          s.close(ec);
        }
      }
      const auto start = Clock::now();
      while (Clock::now() - start < milliseconds(1000)) {
        auto r = co_await send(*redis_, "PING");
        ++commands;
        if (!r.ok() && r.status().code() == StatusCode::kUnavailable) ++failed;
        co_await sleepFor(milliseconds(5));
      }
      redis_.reset();
      error_code ec;
      acceptor.close(ec);
    });
  });
  EXPECT_EQ(failed, commands);
  EXPECT_GT(commands, 50);
  // One attempt at the start and one per 200 ms after: 5 or 6 in a second, never one per command.
  EXPECT_GE(accepts, 3);
  EXPECT_LE(accepts, 7);
}

}  // namespace
}  // namespace infera::store
