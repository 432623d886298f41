// One contract, two online stores: RocksDB on real files in a temporary directory, Redis on a real
// redis-server on a free port. Newest event wins whatever the arrival order, reads come back in
// key order across views, a dropped view's storage is freed, the registry blob is kept, the
// per-loop sessions do the same as the blocking calls, and each store reclaims expired rows.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>

#include "fakes/servers.h"
#include "features/internal/online_store.h"
#include "features/internal/pool.h"
#include "features/internal/values.h"
#include "net/loops.h"

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
  std::vector<RowWrite> writes(2);
  writes[0] = RowWrite{1, std::string("s"), row(7, "one"), 0};
  writes[1] = RowWrite{2, std::string("s"), row(8, "two"), 0};
  auto write = session->write(std::move(writes));
  Status w = co_await std::move(write);
  std::vector<std::string> rows;
  std::vector<ReadKey> keys(3);
  keys[0] = ReadKey{2, std::string_view("s")};
  keys[1] = ReadKey{1, std::string_view("s")};
  keys[2] = ReadKey{1, std::string_view("none")};
  Status r = co_await session->read(keys, rows);
  session.reset();
  done->set_value({w.isOk() ? std::move(r) : std::move(w), rows});
}

class StoreContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "rocksdb") {
      dir_ = tempDir();
      reopen();
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
};

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
  EXPECT_EQ(rows, (std::vector<std::string>{row(8, "two"), row(7, "one"), ""}));
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

INSTANTIATE_TEST_SUITE_P(Stores, StoreContractTest, ::testing::Values("rocksdb", "redis"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace infera::features
