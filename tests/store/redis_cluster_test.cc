// The Redis clients on a real Redis Cluster (3 masters, 3 replicas on loopback): every key on the
// master of its slot; slots moved by `redis-cli --cluster reshard` while a client writes and reads
// (MOVED and ASK followed: no failed command, nothing acknowledged lost); a master killed and its
// replica promoted (errors only inside the failover window, every slot served after it).

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "fakes/servers.h"
#include "store/redis.h"

namespace infera::store {
namespace {

namespace asio = net::asio;
using infera::testing::RedisCluster;
using net::Task;
using Clock = std::chrono::steady_clock;

// A command's argv, built outside coroutines (g++ 12 miscompiles braced lists of strings in them).
template <typename... A>
std::vector<std::string> cmd(const A&... a) {
  return std::vector<std::string>{std::string(a)...};
}

TEST(RedisKeySlotTest, MatchesRedis) {
  // Values from the Redis Cluster specification and CLUSTER KEYSLOT.
  EXPECT_EQ(redisKeySlot("123456789"), 12739);
  EXPECT_EQ(redisKeySlot("foo"), 12182);
  EXPECT_EQ(redisKeySlot("bar"), 5061);
  EXPECT_EQ(redisKeySlot("{user1000}.following"), redisKeySlot("{user1000}.followers"));
  EXPECT_EQ(redisKeySlot("{user1000}.following"), redisKeySlot("user1000"));
  EXPECT_EQ(redisKeySlot("foo{}{bar}"), redisKeySlot("foo{}{bar}"));
  EXPECT_NE(redisKeySlot("foo{}{bar}"), redisKeySlot("bar"));  // empty tag: the whole key
  EXPECT_EQ(redisKeySlot("foo{{bar}}zap"), redisKeySlot("{bar"));
  EXPECT_EQ(redisKeySlot("foo{bar}{zap}"), redisKeySlot("bar"));
  EXPECT_EQ(redisKeySlot(""), 0);
}

// An io_context on a thread of its own; run() executes a coroutine there and waits for it.
class Loop {
 public:
  Loop() : guard_(ctx_.get_executor()), thread_([this] { ctx_.run(); }) {}
  ~Loop() {
    guard_.reset();
    thread_.join();
  }
  asio::io_context& ctx() { return ctx_; }
  template <typename F>
  void run(F body) {
    std::promise<void> done;
    asio::co_spawn(ctx_, std::move(body), [&done](std::exception_ptr e) {
      if (e) {
        done.set_exception(e);
      } else {
        done.set_value();
      }
    });
    auto f = done.get_future();
    ASSERT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready);
    f.get();
  }

 private:
  asio::io_context ctx_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = RedisCluster::start();
    ASSERT_TRUE(cluster_);
    auto a = parseRedisUrl(cluster_->url());
    ASSERT_TRUE(a.ok()) << a.status().message();
    address_ = *a;
    EXPECT_TRUE(address_.cluster);
    EXPECT_EQ(address_.more_seeds.size(), 5u);
  }

  // The value of every key as the cluster holds it now (blocking client, fresh slot map).
  std::map<std::string, std::string> readAll(const std::vector<std::string>& keys) {
    std::map<std::string, std::string> out;
    auto client = RedisClient::connect(address_);
    EXPECT_TRUE(client.ok()) << client.status().message();
    if (!client.ok()) return out;
    for (const auto& k : keys) {
      auto r = (*client)->command({"GET", k});
      EXPECT_TRUE(r.ok()) << r.status().message();
      if (r.ok()) out[k] = r->str;
    }
    return out;
  }

  std::unique_ptr<RedisCluster> cluster_;
  RedisAddress address_;
};

TEST_F(RedisClusterTest, EveryKeyLivesOnTheMasterOfItsSlot) {
  auto client = RedisClient::connect(address_);
  ASSERT_TRUE(client.ok()) << client.status().message();
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) keys.push_back("key:" + std::to_string(i));
  for (const auto& k : keys) {
    auto r = (*client)->command({"SET", k, "v" + k});
    ASSERT_TRUE(r.ok() && !r->isError()) << (r.ok() ? r->str : r.status().message());
  }
  // Each key is on the node CLUSTER NODES names for its slot, and only there.
  std::map<int, std::unique_ptr<RedisClient>> direct;
  std::set<int> masters_used;
  for (const auto& k : keys) {
    const int m = cluster_->masterOf(redisKeySlot(k), 0);
    ASSERT_GE(m, 0);
    masters_used.insert(m);
    if (!direct[m]) {
      RedisAddress a = address_;
      a.cluster = false;
      a.more_seeds.clear();
      a.port = cluster_->node(static_cast<size_t>(m)).port();
      direct[m] = *RedisClient::connect(a);
    }
    auto r = direct[m]->command({"GET", k});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->str, "v" + k);
  }
  EXPECT_EQ(masters_used.size(), 3u);
  // Three masters, each a client of its own.
  auto masters = (*client)->masters();
  ASSERT_TRUE(masters.ok()) << masters.status().message();
  EXPECT_EQ(masters->size(), 3u);
  // The pipelined client reads them back too; a multi-key command across slots is refused by
  // Redis (CROSSSLOT), not split behind the caller's back.
  Loop loop;
  auto redis = AsyncRedis::create(loop.ctx(), address_);
  loop.run([&]() -> Task<void> {
    for (const auto& k : keys) {
      auto get = redis->command(cmd("GET", k));
      auto r = co_await std::move(get);
      EXPECT_TRUE(r.ok()) << r.status().message();
      if (r.ok()) {
        EXPECT_EQ(r->str, "v" + k);
      }
    }
    auto mget = redis->command(cmd("MGET", "key:1", "key:2"));
    auto cross = co_await std::move(mget);
    EXPECT_TRUE(cross.ok() && cross->isError() && cross->str.rfind("CROSSSLOT", 0) == 0);
    auto mset = redis->command(cmd("MSET", "{t}a", "1", "{t}b", "2"));
    auto tagged = co_await std::move(mset);
    EXPECT_TRUE(tagged.ok() && !tagged->isError());
    redis->close();
  });
  // A cluster node given as one Redis (redis://): the redirection is an error that says so.
  RedisAddress one = address_;
  one.cluster = false;
  one.more_seeds.clear();
  auto single = AsyncRedis::create(loop.ctx(), one);
  loop.run([&]() -> Task<void> {
    int moved = 0;
    for (const auto& k : keys) {
      auto get = single->command(cmd("GET", k));
      auto r = co_await std::move(get);
      if (!r.ok()) {
        ++moved;
        EXPECT_NE(r.status().message().find("redis-cluster://"), std::string::npos);
      }
    }
    EXPECT_GT(moved, 0);
    single->close();
  });
}

TEST_F(RedisClusterTest, ReshardingWhileWritingAndReadingFailsNothingAndLosesNothing) {
  // 2,000 keys in the slots that move (the first 1,000 slots of the master of slot 0).
  const int from = cluster_->masterOf(0, 0);
  ASSERT_GE(from, 0);
  int to = -1;
  for (size_t i = 0; i < cluster_->size() && to < 0; ++i) {
    if (static_cast<int>(i) != from && cluster_->masterOf(16383, 0) == static_cast<int>(i)) {
      to = static_cast<int>(i);
    }
  }
  ASSERT_GE(to, 0);
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 2000; ++i) {
    std::string k = "moving:" + std::to_string(i);
    if (redisKeySlot(k) < 1000) keys.push_back(std::move(k));
  }
  Loop loop;
  auto redis = AsyncRedis::create(loop.ctx(), address_);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> ops{0}, failures{0};
  std::map<std::string, std::string> acknowledged;  // the last value each key was set to
  std::string first_failure;
  std::promise<void> done;
  asio::co_spawn(
      loop.ctx(),
      [&]() -> Task<void> {
        for (int round = 0; !stop.load() || round < 2; ++round) {
          for (size_t i = 0; i < keys.size(); ++i) {
            const std::string v = std::to_string(round) + ":" + std::to_string(i);
            auto set = redis->command(cmd("SET", keys[i], v));
            auto w = co_await std::move(set);
            ++ops;
            if (!w.ok() || w->isError()) {
              if (failures++ == 0) first_failure = w.ok() ? w->str : w.status().message();
              continue;
            }
            acknowledged[keys[i]] = v;
            const std::string& back = keys[(i + keys.size() / 2) % keys.size()];
            auto get = redis->command(cmd("GET", back));
            auto r = co_await std::move(get);
            ++ops;
            if (!r.ok() || r->isError()) {
              if (failures++ == 0) first_failure = r.ok() ? r->str : r.status().message();
            } else if (acknowledged.count(back) != 0 && r->str != acknowledged[back]) {
              if (failures++ == 0) first_failure = "read " + r->str + " for " + back;
            }
          }
        }
        redis->close();
      },
      [&done](std::exception_ptr) { done.set_value(); });
  while (ops.load() < 4000) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int rc = cluster_->reshard(static_cast<size_t>(from), static_cast<size_t>(to), 1000);
  stop = true;
  ASSERT_EQ(done.get_future().wait_for(std::chrono::seconds(120)), std::future_status::ready);
  ASSERT_EQ(rc, 0) << "redis-cli --cluster reshard failed (" << cluster_->log() << ")";
  EXPECT_EQ(failures.load(), 0) << "first failure: " << first_failure;
  EXPECT_EQ(cluster_->masterOf(0, 0), to);  // the slots did move
  const auto held = readAll(keys);
  for (const auto& k : keys) EXPECT_EQ(held.at(k), acknowledged[k]) << k;
}

TEST_F(RedisClusterTest, AKilledMasterFailsOnlyItsSlotsAndOnlyUntilItsReplicaTakesOver) {
  const int victim = cluster_->masterOf(0, 0);
  ASSERT_GE(victim, 0);
  size_t asker = 0;
  while (static_cast<int>(asker) == victim) ++asker;
  std::vector<std::string> keys;
  std::set<std::string> victims;  // the keys whose slots the killed master serves
  for (int i = 0; i < 600; ++i) {
    keys.push_back("fo:" + std::to_string(i));
    if (cluster_->masterOf(redisKeySlot(keys.back()), asker) == victim) victims.insert(keys.back());
  }
  ASSERT_FALSE(victims.empty());
  Loop loop;
  auto redis = AsyncRedis::create(loop.ctx(), address_);
  std::atomic<bool> killed{false}, healed{false}, stop{false};
  std::atomic<int64_t> errors_before_kill{0}, errors_after_heal{0}, errors_between{0};
  std::atomic<int64_t> ok_after_heal{0}, ok_other_slots_between{0}, ops{0};
  std::string after_heal_error;
  std::promise<void> done;
  asio::co_spawn(
      loop.ctx(),
      [&]() -> Task<void> {
        // Once healed, two full passes over every key must succeed.
        for (int after = 0; !stop.load() && after < 2;) {
          const bool was_healed = healed.load();
          for (const auto& k : keys) {
            auto set = redis->command(cmd("SET", k, "x"));
            auto w = co_await std::move(set);
            ++ops;
            const bool ok = w.ok() && !w->isError();
            if (!killed.load()) {
              if (!ok) ++errors_before_kill;
            } else if (was_healed) {
              if (ok) {
                ++ok_after_heal;
              } else if (errors_after_heal++ == 0) {
                after_heal_error = w.ok() ? w->str : w.status().message();
              }
            } else if (!ok) {
              ++errors_between;
            } else if (victims.count(k) == 0) {
              ++ok_other_slots_between;
            }
          }
          if (was_healed) ++after;
        }
        redis->close();
      },
      [&done](std::exception_ptr) { done.set_value(); });
  // A full pass over the keys before the kill.
  while (ops.load() < static_cast<int64_t>(keys.size()))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  killed = true;
  cluster_->node(static_cast<size_t>(victim)).kill();
  // The replica is promoted after cluster-node-timeout (1 s) and a vote.
  ASSERT_TRUE(cluster_->waitHealthy(std::chrono::seconds(20)));
  healed = true;
  auto finished = done.get_future();
  ASSERT_EQ(finished.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(errors_before_kill.load(), 0);
  EXPECT_EQ(errors_after_heal.load(), 0) << after_heal_error;
  EXPECT_GE(ok_after_heal.load(), 2 * static_cast<int64_t>(keys.size()));
  EXPECT_NE(cluster_->masterOf(0, asker), victim);
  EXPECT_GT(ok_other_slots_between.load(), 0);  // the other masters' slots kept working
  std::printf(
      "failover: %lld errors inside the window, %lld writes to other masters' slots "
      "succeeded meanwhile\n",
      static_cast<long long>(errors_between.load()),
      static_cast<long long>(ok_other_slots_between.load()));
  stop = true;
}

}  // namespace
}  // namespace infera::store
