// Failures under load, as the user sees them: Redis and PostgreSQL killed and restarted while
// requests keep coming. (Disk full, kill -9 of the gateway and a backend dying mid-stream have
// their own tests: tests/cli/disk_full_test.sh, tests/cli/*durability_test.sh,
// tests/gateway/hardening_test.cc.)
#include <gtest/gtest.h>

#include "access/access_fixture.h"
#include "fakes/servers.h"
#include "store/sql.h"

namespace infera::server {
namespace {

using namespace access::govtest;
using testing::waitFor;

// Redis killed under load: admissions fall back to the local share (no request fails), and once
// Redis is back they are decided in Redis again.
TEST(FaultsTest, RedisRestartedUnderLoadFailsNoRequestAndLimitsReturnToRedis) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  auto gw = startGov(govConfig(emu->url(), "sqlite:" + tempPath("redis-faults.db"),
                               "  redis: " + redis->url() + "\n  redis_timeout_ms: 200\n"));
  ASSERT_TRUE(gw);
  const std::string key = makeKey(*gw, "load", json{{"rpm", 1000000}, {"tpm", 100000000}});
  Load load([&](size_t) { return call(*gw, key, chat("m1", 2)).status; });
  ASSERT_TRUE(waitFor([&] { return load.count(200) > 50; }));
  redis->kill();
  ASSERT_TRUE(waitFor([&] { return gw->metricSum("infera_ratelimit_fallback_total") > 20; },
                      std::chrono::seconds(20)));
  ASSERT_TRUE(redis->restart());
  // Back in Redis (after the client's reconnect): a stretch of 100 requests without a fallback.
  EXPECT_TRUE(waitFor(
      [&] {
        const double f0 = gw->metricSum("infera_ratelimit_fallback_total");
        const int64_t c0 = load.count(200);
        if (!waitFor([&] { return load.count(200) > c0 + 100; })) return false;
        return gw->metricSum("infera_ratelimit_fallback_total") == f0;
      },
      std::chrono::seconds(30)))
      << "admissions still decided by the fallback";
  load.stop();
  EXPECT_EQ(load.count(200), load.total()) << "every request answered 200: " << load.summary();
}

// PostgreSQL killed under load: keys keep working from the snapshot every replica holds, usage
// writes fail (counted, kept) and all reach the store once it is back; an admin change during the
// outage is refused with a clear 503 and changes nothing.
TEST(FaultsTest, PostgresRestartedUnderLoadLosesNoUsageAndAdminChangesFailCleanly) {
  auto pg = testing::PostgresServer::start(/*durable=*/true);
  ASSERT_TRUE(pg);
  ASSERT_TRUE(pg->createDatabase("faults"));
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  auto gw = startGov(govConfig(emu->url(), pg->url("faults")));
  ASSERT_TRUE(gw);
  const std::string key = makeKey(*gw, "load", json{{"rpm", 1000000}, {"tpm", 100000000}});
  Load load([&](size_t) { return call(*gw, key, chat("m1", 2)).status; });
  ASSERT_TRUE(waitFor([&] { return load.count(200) > 50; }));
  ASSERT_TRUE(pg->stop());
  ASSERT_TRUE(waitFor([&] { return gw->metricSum("infera_usage_write_failures_total") > 0; },
                      std::chrono::seconds(20)));
  const int64_t before = load.count(200);
  ASSERT_TRUE(waitFor([&] { return load.count(200) > before + 50; }, std::chrono::seconds(20)))
      << "requests stopped while the store was down: " << load.summary();
  const auto refused = admin(*gw, "POST", "/admin/teams", R"({"name":"during-outage"})");
  EXPECT_EQ(refused.status, 503) << refused.body;
  ASSERT_TRUE(pg->restart());
  load.stop();
  const int64_t served = load.count(200);
  EXPECT_EQ(served, load.total()) << "every request answered 200: " << load.summary();
  // Every served request's usage reaches the store (the key's setup calls of makeKey excluded: they
  // are admin calls, not usage).
  auto db = store::SqlDb::open(pg->url("faults"));
  ASSERT_TRUE(db.ok()) << db.status().message();
  int64_t rows = -1;
  EXPECT_TRUE(waitFor(
      [&] {
        auto r = (*db)->exec("SELECT COUNT(*) FROM infera_usage WHERE team = 'load'");
        rows = r.ok() && !r->rows.empty() ? r->integer(0, 0) : -1;
        return rows == served;
      },
      std::chrono::seconds(30)))
      << rows << " usage rows for " << served << " requests served";
  // The refused admin change left nothing behind, and admin changes work again.
  auto teams = (*db)->exec("SELECT COUNT(*) FROM infera_teams WHERE name = 'during-outage'");
  ASSERT_TRUE(teams.ok());
  EXPECT_EQ(teams->integer(0, 0), 0);
  EXPECT_TRUE(waitFor(
      [&] { return admin(*gw, "POST", "/admin/teams", R"({"name":"after"})").status == 201; },
      std::chrono::seconds(20)));
}

}  // namespace
}  // namespace infera::server
