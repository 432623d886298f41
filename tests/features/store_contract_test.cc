// One contract, three online stores: RocksDB on real files in a temporary directory, Redis on a
// real redis-server on a free port, and Redis on a real Redis Cluster (3 masters, 3 replicas).
// Newest event wins whatever the arrival order, reads come back in key order across views, a
// dropped view's storage is freed, the registry blob is kept, the per-loop sessions do the same as
// the blocking calls, and each store reclaims expired rows.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <thread>

#include "fakes/servers.h"
#include "features/internal/online_store.h"
#include "features/internal/pool.h"
#include "features/internal/values.h"
#include "net/loops.h"
#include "store/redis.h"

namespace infera::features {
namespace {

std::string tempDir() {
  char tmpl[] = "/tmp/infera-features-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  return d ? d : "/tmp";
}

std::string row(int64_t ts_us, const std::string& payload) {
  std::string r;
  putEventTime(r, ts_us);
  return r + payload;
}

// Writes two rows through a session, reads three keys back, and destroys the session on its loop.
net::Task<void> sessionRoundTrip(std::unique_ptr<Session> session,
                                 std::promise<std::pair<Status, std::vector<std::string>>>* done) {
  // g++ 12 miscompiles braced lists of string literals inside coroutines: built step by step.
  // Entities "s" and "t" are in different slots of a cluster: the write is two script calls and
  // the read three MGETs there, answered together.
  std::vector<RowWrite> writes(3);
  writes[0] = RowWrite{1, std::string("s"), row(7, "one"), 0};
  writes[1] = RowWrite{2, std::string("s"), row(8, "two"), 0};
  writes[2] = RowWrite{1, std::string("t"), row(9, "three"), 0};
  auto write = session->write(std::move(writes));
  Status w = co_await std::move(write);
  std::vector<std::string> rows;
  std::vector<ReadKey> keys(4);
  keys[0] = ReadKey{2, std::string_view("s")};
  keys[1] = ReadKey{1, std::string_view("s")};
  keys[2] = ReadKey{1, std::string_view("none")};
  keys[3] = ReadKey{1, std::string_view("t")};
  Status r = co_await session->read(keys, rows);
  session.reset();
  done->set_value({w.isOk() ? std::move(r) : std::move(w), rows});
}

class StoreContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    if (GetParam() == "rocksdb") {
      dir_ = tempDir();
      reopen();
    } else if (GetParam() == "redis_cluster") {
      // One cluster for the suite (six servers take seconds to join), emptied before each test.
      if (!cluster_) cluster_ = testing::RedisCluster::start();
      ASSERT_TRUE(cluster_);
      auto client = store::RedisClient::connect(*store::parseRedisUrl(cluster_->url()));
      ASSERT_TRUE(client.ok()) << client.status().message();
      auto masters = (*client)->masters();
      ASSERT_TRUE(masters.ok()) << masters.status().message();
      ASSERT_EQ(masters->size(), 3u);
      for (auto& m : *masters) ASSERT_TRUE(m->command({"FLUSHALL"}).ok());
      RedisStoreOptions o;
      o.url = cluster_->url();
      auto s = openRedisStore(o, clock_);
      ASSERT_TRUE(s.ok()) << s.status().message();
      store_ = std::move(*s);
    } else {
      redis_ = testing::RedisServer::start();
      ASSERT_TRUE(redis_);
      RedisStoreOptions o;
      o.url = redis_->url();
      auto s = openRedisStore(o, clock_);
      ASSERT_TRUE(s.ok()) << s.status().message();
      store_ = std::move(*s);
    }
    ASSERT_TRUE(store_->createView(1, 0).isOk());
    ASSERT_TRUE(store_->createView(2, 0).isOk());
  }
  void TearDown() override {
    store_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void reopen() {
    store_.reset();
    RocksDbOptions o;
    o.path = dir_ + "/db";
    auto s = openRocksDbStore(o, clock_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(*s);
  }
  std::vector<std::string> read(const std::vector<std::pair<uint32_t, std::string>>& keys) {
    std::vector<ReadKey> rk;
    for (const auto& [v, k] : keys) rk.push_back({v, k});
    std::vector<std::string> rows;
    Status s = store_->read(rk, rows);
    EXPECT_TRUE(s.isOk()) << s.message();
    return rows;
  }

  FakeClock clock_{FakeClock::AtSystemTime{}};
  std::string dir_;
  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<OnlineStore> store_;
  static std::unique_ptr<testing::RedisCluster> cluster_;
};

std::unique_ptr<testing::RedisCluster> StoreContractTest::cluster_;

TEST_P(StoreContractTest, ReadsRowsInKeyOrderAcrossViews) {
  ASSERT_TRUE(
      store_
          ->write(
              {{1, "k1", row(10, "a"), 0}, {2, "k1", row(11, "b"), 0}, {1, "k2", row(12, "c"), 0}})
          .isOk());
  const auto rows = read({{2, "k1"}, {1, "missing"}, {1, "k2"}, {1, "k1"}, {3, "k1"}});
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0], row(11, "b"));
  EXPECT_EQ(rows[1], "");
  EXPECT_EQ(rows[2], row(12, "c"));
  EXPECT_EQ(rows[3], row(10, "a"));
  EXPECT_EQ(rows[4], "");  // a view without storage holds nothing
}

TEST_P(StoreContractTest, AnOlderEventNeverOverwritesANewerOne) {
  ASSERT_TRUE(store_->write({{1, "k", row(200, "new"), 0}}).isOk());
  ASSERT_TRUE(store_->write({{1, "k", row(100, "old"), 0}}).isOk());
  EXPECT_EQ(read({{1, "k"}})[0], row(200, "new"));
  // In one batch too, whatever the order.
  ASSERT_TRUE(
      store_->write({{1, "j", row(300, "late"), 0}, {1, "j", row(250, "early"), 0}}).isOk());
  EXPECT_EQ(read({{1, "j"}})[0], row(300, "late"));
  // Equal times: the later write wins; newer always wins.
  ASSERT_TRUE(store_->write({{1, "k", row(200, "again"), 0}}).isOk());
  EXPECT_EQ(read({{1, "k"}})[0], row(200, "again"));
  ASSERT_TRUE(store_->write({{1, "k", row(201, "newest"), 0}}).isOk());
  EXPECT_EQ(read({{1, "k"}})[0], row(201, "newest"));
}

TEST_P(StoreContractTest, PutIsUnconditional) {
  ASSERT_TRUE(store_->put({{1, "k", row(200, "x"), 0}}).isOk());
  ASSERT_TRUE(store_->put({{1, "k", row(100, "y"), 0}}).isOk());
  EXPECT_EQ(read({{1, "k"}})[0], row(100, "y"));
}

TEST_P(StoreContractTest, DroppingAViewFreesItsRowsOnly) {
  std::vector<RowWrite> many;
  for (int i = 0; i < 2500; ++i) many.push_back({1, "k" + std::to_string(i), row(1, "v"), 0});
  many.push_back({2, "k0", row(1, "kept"), 0});
  ASSERT_TRUE(store_->write(std::move(many)).isOk());
  ASSERT_TRUE(store_->dropView(1).isOk());
  ASSERT_TRUE(store_->createView(1, 0).isOk());  // a view re-created later starts empty
  EXPECT_EQ(read({{1, "k0"}, {1, "k2499"}}), (std::vector<std::string>{"", ""}));
  EXPECT_EQ(read({{2, "k0"}})[0], row(1, "kept"));
}

TEST_P(StoreContractTest, KeepsTheRegistryBlob) {
  EXPECT_EQ(*store_->loadMeta(), "");
  ASSERT_TRUE(store_->saveMeta("{\"files\":{}}").isOk());
  EXPECT_EQ(*store_->loadMeta(), "{\"files\":{}}");
  if (GetParam() == "rocksdb") {
    ASSERT_TRUE(store_->write({{1, "k", row(5, "durable"), 0}}).isOk());
    reopen();
    EXPECT_EQ(*store_->loadMeta(), "{\"files\":{}}");
    EXPECT_EQ(read({{1, "k"}})[0], row(5, "durable"));
    EXPECT_EQ(store_->storedViews(), (std::vector<uint32_t>{1, 2}));
  }
}

TEST_P(StoreContractTest, SessionsOnALoopReadAndWriteLikeTheBlockingCalls) {
  net::EventLoops loops(1);
  loops.start();
  WorkerPool pool(2, 64);
  std::promise<std::pair<Status, std::vector<std::string>>> done;
  net::asio::post(loops.loop(0), [&] {
    net::spawn(loops.loop(0), sessionRoundTrip(store_->session(loops.loop(0), pool), &done),
               "session test");
  });
  auto [s, rows] = done.get_future().get();
  loops.stop();
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(rows, (std::vector<std::string>{row(8, "two"), row(7, "one"), "", row(9, "three")}));
}

TEST_P(StoreContractTest, ReclaimsRowsPastTheirExpiry) {
  const int64_t now_us = clock_.unixMillis() * 1000;
  ASSERT_TRUE(store_->createView(3, 3600).isOk());  // 1 h ttl
  ASSERT_TRUE(
      store_
          ->write({{3, "stale", row(now_us - 7200LL * 1'000'000, "x"), now_us - 3600LL * 1'000'000},
                   {3, "fresh", row(now_us, "y"), now_us + 3600LL * 1'000'000}})
          .isOk());
  ASSERT_TRUE(store_->compact()
                  .isOk());  // RocksDB's compaction filter runs; Redis expired the key on write
  const auto rows = read({{3, "stale"}, {3, "fresh"}});
  EXPECT_EQ(rows[0], "");
  EXPECT_EQ(rows[1], row(now_us, "y"));
  // Time passes past the fresh row's expiry too.
  if (GetParam() == "rocksdb") {
    clock_.advance(std::chrono::hours(2));
    ASSERT_TRUE(store_->compact().isOk());
    EXPECT_EQ(read({{3, "fresh"}})[0], "");
  }
}

// Reads and writes through a loop's session while `redis-cli --cluster reshard` moves the slots
// every entity lives in: no read or write fails, and every acknowledged row is there after.
struct ReshardTraffic {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> writes{0}, reads{0}, failures{0};
  std::string first_failure;
  std::map<std::string, std::string> acknowledged;  // "<view>/<entity>" -> row
};

net::Task<void> reshardTraffic(std::unique_ptr<Session> session,
                               const std::vector<std::string>* entities, ReshardTraffic* t,
                               std::promise<void>* done) {
  const auto fail = [t](const Status& s) {
    if (t->failures++ == 0) t->first_failure = s.message();
  };
  for (int64_t round = 1; !t->stop.load() || round < 3; ++round) {
    for (size_t start = 0; start < entities->size(); start += 20) {
      std::vector<RowWrite> rows;
      for (size_t i = start; i < std::min(start + 20, entities->size()); ++i) {
        for (uint32_t view = 1; view <= 2; ++view) {
          RowWrite w;
          w.view = view;
          w.key = (*entities)[i];
          w.row = row(round, "r" + std::to_string(round));
          rows.push_back(std::move(w));
        }
      }
      std::vector<RowWrite> sent = rows;
      auto write = session->write(std::move(rows));
      Status ws = co_await std::move(write);
      ++t->writes;
      if (!ws.isOk()) {
        fail(ws);
      } else {
        for (const auto& w : sent) t->acknowledged[std::to_string(w.view) + "/" + w.key] = w.row;
      }
      // Read back 40 entities (both views) that include the ones just written.
      std::vector<ReadKey> keys;
      for (size_t i = start; i < std::min(start + 40, entities->size()); ++i) {
        keys.push_back(ReadKey{1, std::string_view((*entities)[i])});
        keys.push_back(ReadKey{2, std::string_view((*entities)[i])});
      }
      std::vector<std::string> got;
      auto read = session->read(keys, got);
      Status rs = co_await std::move(read);
      ++t->reads;
      if (!rs.isOk()) {
        fail(rs);
        continue;
      }
      for (size_t k = 0; k < keys.size(); ++k) {
        const auto it =
            t->acknowledged.find(std::to_string(keys[k].view) + "/" + std::string(keys[k].key));
        if (it != t->acknowledged.end() && got[k] != it->second) {
          fail(Status::internal("stale or missing row for " + it->first));
        }
      }
    }
  }
  session.reset();
  done->set_value();
}

TEST(RedisClusterStoreTest, ReshardingWhileReadingAndWritingFailsNothingAndLosesNothing) {
  auto cluster = testing::RedisCluster::start();
  ASSERT_TRUE(cluster);
  const int from = cluster->masterOf(0, 0);
  const int to = cluster->masterOf(16383, 0);
  ASSERT_TRUE(from >= 0 && to >= 0 && from != to);
  RedisStoreOptions o;
  o.url = cluster->url();
  // The property is redirects during a reshard, not latency: with the default 200 ms a full-suite
  // run on two cores (six redis-servers, redis-cli and another test beside) once saw a node answer
  // late, and the timeout closed the connection under 114 pipelined commands. Two seconds keeps a
  // lost command (never answered) a failure.
  o.timeout_ms = 2000;
  FakeClock clock{FakeClock::AtSystemTime{}};
  auto opened = openRedisStore(o, clock);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  std::unique_ptr<OnlineStore> store = std::move(*opened);
  // 400 entities whose keys (hash tag: the entity) are in the 1,000 slots that move.
  std::vector<std::string> entities;
  for (int i = 0; entities.size() < 400; ++i) {
    const std::string e = "e" + std::to_string(i);
    if (store::redisKeySlot(e) < 1000) entities.push_back(e);
  }
  net::EventLoops loops(1);
  loops.start();
  WorkerPool pool(2, 64);
  ReshardTraffic t;
  std::promise<void> done;
  net::asio::post(loops.loop(0), [&] {
    net::spawn(loops.loop(0),
               reshardTraffic(store->session(loops.loop(0), pool), &entities, &t, &done),
               "reshard traffic");
  });
  while (t.writes.load() < 40) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int rc = cluster->reshard(static_cast<size_t>(from), static_cast<size_t>(to), 1000);
  t.stop = true;
  auto finished = done.get_future();
  ASSERT_EQ(finished.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  loops.stop();
  ASSERT_EQ(rc, 0) << "redis-cli --cluster reshard failed (" << cluster->log() << ")";
  EXPECT_EQ(cluster->masterOf(0, 0), to);
  EXPECT_EQ(t.failures.load(), 0) << t.first_failure;
  EXPECT_GT(t.reads.load(), 40);
  // Every acknowledged row, read with the blocking client (a fresh slot map).
  for (uint32_t view = 1; view <= 2; ++view) {
    std::vector<ReadKey> keys;
    for (const auto& e : entities) keys.push_back(ReadKey{view, std::string_view(e)});
    std::vector<std::string> rows;
    ASSERT_TRUE(store->read(keys, rows).isOk());
    for (size_t i = 0; i < entities.size(); ++i) {
      EXPECT_EQ(rows[i], t.acknowledged[std::to_string(view) + "/" + entities[i]]) << entities[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContractTest,
                         ::testing::Values("rocksdb", "redis", "redis_cluster"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace infera::features
