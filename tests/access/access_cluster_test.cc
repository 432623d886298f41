// Governance across replicas, with real servers: limits exact within ±5% under 60 s of saturating
// load (one replica; three replicas sharing one Redis), the local fallback while Redis is down and
// the return to Redis, and keys/revocations/usage shared through PostgreSQL.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "access/access_fixture.h"
#include "access/internal/limiter.h"
#include "core/clock.h"
#include "fakes/http_test_client.h"
#include "fakes/servers.h"
#include "store/redis.h"
#include "store/sql.h"

namespace infera::access {
namespace {

using namespace govtest;
using testing::TestClient;
using testing::waitFor;

// Saturating load from `threads` keep-alive clients spread over the replicas, for `duration` after
// the first admitted request. Returns the tokens the backend reported for every admitted request.
struct LoadResult {
  int64_t admitted_tokens = 0;
  int64_t admitted = 0;
  int64_t limited = 0;
  int64_t other = 0;
};

LoadResult saturate(const std::vector<server::Server*>& replicas, const std::string& key,
                    std::chrono::milliseconds duration, int threads) {
  std::atomic<int64_t> tokens{0}, admitted{0}, limited{0}, other{0};
  std::atomic<int64_t> first_ns{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  const std::string body = chat("m1", 20);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      server::Server& gw = *replicas[static_cast<size_t>(t) % replicas.size()];
      auto client = std::make_unique<TestClient>(gw.port());
      while (!stop.load()) {
        auto r = client->request(
            "POST", "/v1/chat/completions", body,
            {{"authorization", "Bearer " + key}, {"content-type", "application/json"}});
        if (!r) {
          client = std::make_unique<TestClient>(gw.port());
          continue;
        }
        const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
        if (r->status == 200) {
          int64_t expected = 0;
          first_ns.compare_exchange_strong(expected, now);
          const json j = json::parse(r->body, nullptr, false);
          // Counted only inside the measured window.
          if (now - first_ns.load() < std::chrono::nanoseconds(duration).count()) {
            tokens += j["usage"]["total_tokens"].get<int64_t>();
            ++admitted;
          }
        } else if (r->status == 429) {
          ++limited;
        } else {
          ++other;
        }
        if (first_ns.load() != 0 &&
            now - first_ns.load() >= std::chrono::nanoseconds(duration).count())
          break;
      }
    });
  }
  for (auto& th : pool) th.join();
  return {tokens.load(), admitted.load(), limited.load(), other.load()};
}

// 58 s from the first admission: the rolling window has 1 s buckets, so the first second's
// admissions leave it between 59 and 60 s later; the whole run stays inside one window.
constexpr auto kWindow = std::chrono::milliseconds(58'000);
constexpr int64_t kTpm = 6'000;

TEST(GovernanceCluster, OneReplicaAdmitsTheConfiguredTpmWithin5Percent) {
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  auto gw = startGov(govConfig(emu->url(), "sqlite:" + tempPath("one.db")));
  ASSERT_TRUE(gw);
  const std::string key = makeKey(*gw, "load", json::object(), json{{"tpm", kTpm}});
  const LoadResult r = saturate({gw.get()}, key, kWindow, 3);
  std::printf(
      "one replica: admitted %lld tokens in %lld requests (limit %lld), %lld refused, %lld other\n",
      static_cast<long long>(r.admitted_tokens), static_cast<long long>(r.admitted),
      static_cast<long long>(kTpm), static_cast<long long>(r.limited),
      static_cast<long long>(r.other));
  EXPECT_GT(r.limited, r.admitted);  // the load really saturated the limit
  EXPECT_EQ(r.other, 0);
  EXPECT_GE(r.admitted_tokens, kTpm * 95 / 100);
  EXPECT_LE(r.admitted_tokens, kTpm * 105 / 100);
}

// A counter's total as Redis holds it: a minute counter's summary ('B' and five little-endian
// doubles, the total first) or a period counter's integer.
std::string summaryTotal(const std::string& raw) {
  if (raw.size() == 41 && raw[0] == 'B') {
    double total = 0;
    std::memcpy(&total, raw.data() + 1, sizeof total);
    return std::to_string(static_cast<int64_t>(total));
  }
  return raw.substr(0, raw.find(' '));
}

// Redis's clock, in whole minutes (the per-minute summary hashes are named by it).
int64_t redisMinute(store::RedisClient& rc) {
  auto time = rc.command({"TIME"});
  return time.ok() && !time->elements.empty() ? std::stoll(time->elements[0].str) / 60 : -1;
}

// A minute counter's total as a Redis Cluster holds it: the summary in the hash of its tag's
// minute (this minute's, else the previous one's); "" if none.
std::string clusterTotal(store::RedisClient& rc, const std::string& tag,
                         const std::string& counter) {
  const int64_t minute = redisMinute(rc);
  for (int64_t m : {minute, minute - 1}) {
    auto r = rc.command({"HGET", "infera:rl:sum:{" + tag + "}:" + std::to_string(m),
                         "infera:rl:{" + tag + "}" + counter});
    if (r.ok() && r->type == store::RedisReply::Type::kString) return summaryTotal(r->str);
  }
  return "";
}

// A Redis Cluster master killed while requests come: the admissions of its slots (this team's)
// are decided by the local fallback until its replica is promoted, none fails, and then they go
// to the cluster again, to the new master.
TEST(GovernanceCluster, OnARedisClusterAKilledMasterFallsBackUntilItsReplicaTakesOver) {
  auto cluster = testing::RedisCluster::start();
  ASSERT_TRUE(cluster);
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  auto gw = startGov(govConfig(
      emu->url(), "sqlite:" + tempPath("rc-failover.db"),
      "  redis: " + cluster->url() + "\n  redis_timeout_ms: 1000\n  redis_lease_ms: 0\n"));
  ASSERT_TRUE(gw);
  const std::string key = makeKey(*gw, "fo", json{{"rpm", 100'000}});
  const int victim = cluster->masterOf(store::redisKeySlot("{t:fo}"), 0);
  ASSERT_GE(victim, 0);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(call(*gw, key, chat("m1", 0)).status, 200);
  EXPECT_EQ(gw->metricSum("infera_ratelimit_fallback_total"), 0);
  cluster->node(static_cast<size_t>(victim)).kill();
  // Until the replica takes over (cluster-node-timeout, 1 s here, and a vote): decided locally.
  int statuses_not_200 = 0;
  for (int i = 0; i < 5; ++i) statuses_not_200 += call(*gw, key, chat("m1", 0)).status != 200;
  EXPECT_EQ(statuses_not_200, 0);
  EXPECT_GE(gw->metricSum("infera_ratelimit_fallback_total"), 1);
  ASSERT_TRUE(cluster->waitHealthy(std::chrono::seconds(20)));
  size_t asker = 0;
  while (static_cast<int>(asker) == victim) ++asker;
  EXPECT_NE(cluster->masterOf(store::redisKeySlot("{t:fo}"), asker), victim);
  // Back on the cluster once the client has the new map: a request decided in Redis again.
  ASSERT_TRUE(waitFor([&] {
    const double before = gw->metricSum("infera_ratelimit_fallback_total");
    return call(*gw, key, chat("m1", 0)).status == 200 &&
           gw->metricSum("infera_ratelimit_fallback_total") == before;
  }));
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(cluster->url()));
  ASSERT_TRUE(rc.ok());
  const std::string before = clusterTotal(**rc, "t:fo", "t:fo:r");
  ASSERT_FALSE(before.empty());
  const double fallbacks = gw->metricSum("infera_ratelimit_fallback_total");
  for (int i = 0; i < 10; ++i) EXPECT_EQ(call(*gw, key, chat("m1", 0)).status, 200);
  EXPECT_EQ(gw->metricSum("infera_ratelimit_fallback_total"), fallbacks);
  // Counted on the new master.
  EXPECT_EQ(std::stoll(clusterTotal(**rc, "t:fo", "t:fo:r")), std::stoll(before) + 10);
}

// Three replicas sharing one Redis, or a Redis Cluster (3 masters + 3 replicas). On the cluster
// the model has a limit too (twice the key's, so the key's binds): its counters live in another
// slot than the team's, and every admission is two calls at once, to two masters.
void threeReplicasAdmitTheTpmOnce(bool cluster) {
  std::unique_ptr<testing::RedisServer> redis;
  std::unique_ptr<testing::RedisCluster> nodes;
  std::string url;
  if (cluster) {
    nodes = testing::RedisCluster::start();
    ASSERT_TRUE(nodes);
    url = nodes->url();
  } else {
    redis = testing::RedisServer::start();
    ASSERT_TRUE(redis);
    url = redis->url();
  }
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  const std::string db = "sqlite:" + tempPath(cluster ? "three-cluster.db" : "three.db");
  const std::string model_limits =
      cluster ? "    limits: {tpm: " + std::to_string(2 * kTpm) + "}\n" : std::string();
  std::vector<std::unique_ptr<server::Server>> replicas;
  for (int i = 0; i < 3; ++i) {
    // A saturating load on a 2-core box (three replicas, their load threads and Redis, beside
    // another test): a Redis call can take longer than the 50 ms default, and a fallback is not
    // what this test measures.
    replicas.push_back(startGov(
        govConfig(emu->url(), db, "  redis: " + url + "\n  replicas: 3\n  redis_timeout_ms: 1000\n",
                  model_limits)));
    ASSERT_TRUE(replicas.back());
  }
  const std::string measured = makeKey(*replicas[0], "load", json::object(), json{{"tpm", kTpm}});
  // Every replica knows the key (shared store, polled every 100 ms here); max_tokens 0 costs only
  // a few prompt tokens.
  for (auto& g : replicas) {
    ASSERT_TRUE(waitFor([&] { return call(*g, measured, chat("m1", 0)).status == 200; }));
  }
  std::vector<server::Server*> ptrs;
  for (auto& g : replicas) ptrs.push_back(g.get());
  const LoadResult r = saturate(ptrs, measured, kWindow, 3);
  std::printf(
      "three replicas, %s: admitted %lld tokens in %lld requests (limit %lld), %lld "
      "refused\n",
      cluster ? "a redis cluster" : "one redis", static_cast<long long>(r.admitted_tokens),
      static_cast<long long>(r.admitted), static_cast<long long>(kTpm),
      static_cast<long long>(r.limited));
  EXPECT_GT(r.limited, r.admitted);
  EXPECT_EQ(r.other, 0);
  // The warm-up calls (max_tokens 0: a few prompt tokens each) share the window; allow for them.
  EXPECT_GE(r.admitted_tokens, kTpm * 95 / 100 - 60);
  EXPECT_LE(r.admitted_tokens, kTpm * 105 / 100);
  double fallbacks = 0, from_leases = 0;
  for (auto& g : replicas) {
    fallbacks += g->metricSum("infera_ratelimit_fallback_total");
    from_leases += g->metricSum("infera_ratelimit_redis_lease_admissions_total");
  }
  EXPECT_EQ(fallbacks, 0);
  std::printf("three replicas: %.0f admissions decided from leases\n", from_leases);
  if (cluster) {
    // The model's counter took what the key's did (its own limit, twice as high, never bound).
    auto rc = store::RedisClient::connect(*store::parseRedisUrl(url));
    ASSERT_TRUE(rc.ok());
    const std::string model = clusterTotal(**rc, "m:m1", "m:m1:t");
    ASSERT_FALSE(model.empty());
    std::printf("the model's counter on the cluster: %s tokens\n", model.c_str());
    EXPECT_LE(std::stoll(model), 2 * kTpm);
    EXPECT_GE(std::stoll(model), kTpm * 95 / 100 - 60) << model;
  }
}

TEST(GovernanceCluster, ThreeReplicasSharingRedisAdmitTheTpmOnceNotThreeTimes) {
  threeReplicasAdmitTheTpmOnce(false);
}

TEST(GovernanceCluster, ThreeReplicasSharingARedisClusterAdmitTheTpmOnce) {
  threeReplicasAdmitTheTpmOnce(true);
}

// The reserve script straight against a real Redis: one call deciding admissions of two keys
// (three shapes: amounts repeat within an admission, and one admission's amounts are all 1), each
// all or nothing and in order; Redis then holds exactly the admitted amounts; the cancel script
// refunds them once, or stops a call that has not run yet; a call with malformed arguments is
// refused without writing anything.
// A minute counter's summary ("" if none): this minute's hash, else the previous minute's.
std::string summaryOf(store::RedisClient& rc, const std::string& counter) {
  const int64_t minute = redisMinute(rc);
  for (int64_t m : {minute, minute - 1}) {
    auto r = rc.command({"HGET", "infera:rl:sum:" + std::to_string(m), "infera:rl:" + counter});
    if (r.ok() && r->type == store::RedisReply::Type::kString) return r->str;
  }
  return "";
}

TEST(GovernanceCluster, ReserveScriptDecidesSeveralShapesInOneCall) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc.ok()) << rc.status().message();
  const auto m = Window::kMinute;
  Charge a1[2] = {{"k:a:r", m, Scope::kKey, false, 10, 1},
                  {"k:a:t", m, Scope::kKey, true, 100, 60}};
  Charge b1[3] = {{"k:b:r", m, Scope::kKey, false, 10, 1},
                  {"k:b:t", m, Scope::kKey, true, 100, 30},
                  {"t:x:d", Window::kDay, Scope::kDaily, true, 1000, 30}};
  Charge a2[2] = {{"k:a:r", m, Scope::kKey, false, 10, 1},
                  {"k:a:t", m, Scope::kKey, true, 100, 50}};
  Charge b2[3] = {{"k:b:r", m, Scope::kKey, false, 10, 1},
                  {"k:b:t", m, Scope::kKey, true, 100, 1},
                  {"t:x:d", Window::kDay, Scope::kDaily, true, 1000, 1}};
  const std::span<const Charge> admissions[4] = {a1, b1, a2, b2};
  const int64_t now_ms = SystemClock::instance().unixMillis();
  ReserveCall call;
  buildReserveCall(admissions, now_ms, "test-1", call);
  auto reply = (*rc)->eval(reserveScript(), call.keys, call.args);
  ASSERT_TRUE(reply.ok()) << reply.status().message();
  ASSERT_FALSE(reply->isError()) << reply->str;
  auto decided = parseReserveReply(*reply, admissions, call);
  ASSERT_TRUE(decided.ok()) << decided.status().message();
  const auto& d = *decided;
  EXPECT_TRUE(d[0].admitted);
  EXPECT_TRUE(d[1].admitted);
  EXPECT_FALSE(d[2].admitted);  // 60 + 50 tokens > 100
  EXPECT_EQ(d[2].refused, 1);
  EXPECT_EQ(d[2].used, 60);
  EXPECT_EQ(d[2].remaining, (std::vector<int64_t>{9, 40}));  // each counter without a2
  ASSERT_TRUE(d[3].admitted);
  EXPECT_EQ(d[3].remaining, (std::vector<int64_t>{8, 69, 969}));

  auto totals = [&] {
    std::vector<std::string> out;
    for (const char* k : {"k:a:r", "k:a:t", "k:b:r", "k:b:t"})
      out.push_back(summaryTotal(summaryOf(**rc, k)));
    auto day = (*rc)->command({"GET", redisCounterKey(b1[2], now_ms)});
    out.push_back(day.ok() ? day->str : "?");
    return out;
  };
  const std::vector<std::string> expected = {"1", "60", "2", "31", "31"};
  EXPECT_EQ(totals(), expected);
  auto ttl = [&](const std::string& name) {
    auto r = (*rc)->command({"PTTL", "infera:rl:" + name});
    return r.ok() ? r->integer : -3;
  };
  // The call's minute's summary hash expires at the end of minute m + 3, and holds the
  // call's marker: its second and which admissions it admitted.
  const int64_t call_minute = reply->elements[0].integer / 60'000;
  const std::string call_hash = "infera:rl:sum:" + std::to_string(call_minute);
  auto expires = (*rc)->command({"EXPIRETIME", call_hash});
  ASSERT_TRUE(expires.ok());
  EXPECT_EQ(expires->integer, (call_minute + 4) * 60);
  auto marker = (*rc)->command({"HGET", call_hash, "infera:rl:call:test-1"});
  ASSERT_TRUE(marker.ok());
  EXPECT_EQ(marker->str, std::to_string(reply->elements[0].integer / 1000) + ":1101");
  // The call's second, once over, goes from the summaries into the bucket hashes.
  auto second = [&] {
    auto r = (*rc)->command({"TIME"});
    return r.ok() && !r->elements.empty() ? r->elements[0].str : std::string("?");
  };
  const std::string call_second =
      std::to_string(reply->elements[0].integer / 1000);  // the script's clock
  ASSERT_TRUE(waitFor([&] { return second() != call_second; }));
  // The first call of the new second fails after reading the counters (a2 does not fit, so the
  // script reads the packed admissions, which do not add up): it writes nothing, not even the
  // finished second's move into the hashes.
  ReserveCall failing;
  buildReserveCall(admissions, now_ms, "test-0b", failing);
  failing.args.back() += " 7";
  auto failed = (*rc)->eval(reserveScript(), failing.keys, failing.args);
  ASSERT_TRUE(failed.ok());
  EXPECT_TRUE(failed->isError());
  EXPECT_EQ(totals(), expected);
  for (const char* k : {"k:a:r", "k:a:t", "k:b:r", "k:b:t"}) {
    auto len = (*rc)->command({"HLEN", std::string("infera:rl:") + k});
    ASSERT_TRUE(len.ok());
    EXPECT_EQ(len->integer, 0) << k;
  }

  // Undoing the call (as a gateway does when the answer never came) refunds exactly what it
  // admitted, once: here the finished second's amounts, refunded on their way into the hashes (so
  // nothing is left to move there).
  const std::vector<std::string> zero = {"0", "0", "0", "0", "0"};
  auto undo = (*rc)->eval(cancelScript(), call.keys, call.args);
  ASSERT_TRUE(undo.ok() && !undo->isError()) << (undo.ok() ? undo->str : undo.status().message());
  EXPECT_EQ(undo->integer, 1);
  EXPECT_EQ(totals(), zero);
  for (const char* k : {"k:a:r", "k:a:t", "k:b:r", "k:b:t"}) {
    auto len = (*rc)->command({"HLEN", std::string("infera:rl:") + k});
    ASSERT_TRUE(len.ok());
    EXPECT_EQ(len->integer, 0) << k;
  }
  auto again = (*rc)->eval(cancelScript(), call.keys, call.args);
  ASSERT_TRUE(again.ok() && !again->isError());
  EXPECT_EQ(again->integer, 0);
  EXPECT_EQ(totals(), zero);
  // A call cancelled before it reaches Redis never runs.
  ReserveCall late;
  buildReserveCall(admissions, now_ms, "test-2", late);
  auto pre = (*rc)->eval(cancelScript(), late.keys, late.args);
  ASSERT_TRUE(pre.ok() && !pre->isError());
  EXPECT_EQ(pre->integer, 0);
  auto stale = (*rc)->eval(reserveScript(), late.keys, late.args);
  EXPECT_TRUE(!stale.ok() || stale->isError());
  EXPECT_EQ(totals(), zero);

  ReserveCall broken;
  buildReserveCall(admissions, now_ms, "test-3", broken);
  broken.args.pop_back();
  auto bad = (*rc)->eval(reserveScript(), broken.keys, broken.args);
  ASSERT_TRUE(!bad.ok() || bad->isError());
  if (bad.ok()) {
    EXPECT_NE(bad->str.find("do not add up"), std::string::npos) << bad->str;
  }
  EXPECT_EQ(totals(), zero);
  // Packed admissions that do not match the counters' sums are refused when the script reads
  // them (here: a2 does not fit, so it must), writing nothing.
  ReserveCall mismatch;
  buildReserveCall(admissions, now_ms, "test-4", mismatch);
  mismatch.args.back() += " 7";
  auto mis = (*rc)->eval(reserveScript(), mismatch.keys, mismatch.args);
  ASSERT_TRUE(mis.ok());
  EXPECT_TRUE(mis->isError());
  EXPECT_EQ(totals(), zero);

  // Away from the limits the script admits the whole call from the counters' sums (one -1 for
  // all), and an undo refunds those sums.
  const std::span<const Charge> fitting[2] = {a1, b1};
  ReserveCall fast;
  buildReserveCall(fitting, now_ms, "test-5", fast);
  auto fr = (*rc)->eval(reserveScript(), fast.keys, fast.args);
  ASSERT_TRUE(fr.ok() && !fr->isError()) << (fr.ok() ? fr->str : fr.status().message());
  ASSERT_FALSE(fr->elements.empty());
  EXPECT_EQ(fr->elements.back().integer, -1);
  auto fd = parseReserveReply(*fr, fitting, fast);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  EXPECT_TRUE((*fd)[0].admitted && (*fd)[1].admitted);
  EXPECT_EQ((*fd)[1].remaining, (std::vector<int64_t>{9, 70, 970}));
  EXPECT_EQ(totals(), (std::vector<std::string>{"1", "60", "1", "30", "30"}));
  // The next second's first call moves the finished second into the bucket hashes (which expire).
  const std::string fast_second = std::to_string(fr->elements[0].integer / 1000);
  ASSERT_TRUE(waitFor([&] { return second() != fast_second; }));
  const std::span<const Charge> small[1] = {b2};
  ReserveCall next;
  buildReserveCall(small, now_ms, "test-6", next);
  auto nr = (*rc)->eval(reserveScript(), next.keys, next.args);
  ASSERT_TRUE(nr.ok() && !nr->isError()) << (nr.ok() ? nr->str : nr.status().message());
  EXPECT_EQ(totals(), (std::vector<std::string>{"1", "60", "2", "31", "31"}));
  for (const char* k : {"k:b:r", "k:b:t"}) {
    auto bucket = (*rc)->command({"HGET", std::string("infera:rl:") + k, fast_second});
    ASSERT_TRUE(bucket.ok());
    EXPECT_EQ(bucket->str, std::string(k) == "k:b:r" ? "1" : "30") << k;
    EXPECT_GT(ttl(k), 0) << k;
    EXPECT_LE(ttl(k), 61'000) << k;
  }
  // Undoing the fast call refunds its sums: from the hash for the finished second.
  auto fundo = (*rc)->eval(cancelScript(), fast.keys, fast.args);
  ASSERT_TRUE(fundo.ok() && !fundo->isError());
  EXPECT_EQ(fundo->integer, 1);
  EXPECT_EQ(totals(), (std::vector<std::string>{"0", "0", "1", "1", "1"}));
  auto nundo = (*rc)->eval(cancelScript(), next.keys, next.args);
  ASSERT_TRUE(nundo.ok() && !nundo->isError());
  EXPECT_EQ(totals(), zero);
}

// A minute's summary hash: the call that creates it sets it to expire at the end of minute m + 3
// and unlinks the one of minute m - 3 (later calls of the minute touch neither).
// It holds the minute's call markers, which the cancel script finds there or in the previous
// minute's hash; a cancel of a call that has not run marks this minute's and the next one's.
TEST(GovernanceCluster, SummaryHashesLiveThreeMinutesAndHoldCallMarkers) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc.ok()) << rc.status().message();
  auto hash = [](int64_t minute) { return "infera:rl:sum:" + std::to_string(minute); };
  auto exists = [&](int64_t minute) {
    auto r = (*rc)->command({"EXISTS", hash(minute)});
    return r.ok() ? r->integer : -1;
  };
  auto field = [&](int64_t minute, const std::string& f) {
    auto r = (*rc)->command({"HGET", hash(minute), f});
    return r.ok() ? r->str : std::string("?");
  };
  auto expiry = [&](int64_t minute) {
    auto r = (*rc)->command({"EXPIRETIME", hash(minute)});
    return r.ok() ? r->integer : -3;
  };
  const int64_t before = redisMinute(**rc);
  for (int64_t m = before - 4; m <= before; ++m)
    ASSERT_TRUE((*rc)->command({"HSET", hash(m), "x", "1"}).ok());
  Charge a[2] = {{"k:a:r", Window::kMinute, Scope::kKey, false, 10, 1},
                 {"k:a:t", Window::kMinute, Scope::kKey, true, 1000, 60}};
  const std::span<const Charge> one[1] = {a};
  const int64_t now_ms = SystemClock::instance().unixMillis();
  auto reserve = [&](const std::string& id, ReserveCall& call) {
    buildReserveCall(one, now_ms, id, call);
    return (*rc)->eval(reserveScript(), call.keys, call.args);
  };
  ReserveCall first;
  auto r1 = reserve("lt-1", first);
  ASSERT_TRUE(r1.ok() && !r1->isError()) << (r1.ok() ? r1->str : r1.status().message());
  const int64_t c = r1->elements[0].integer / 60'000;
  EXPECT_EQ(exists(c - 3), 0);
  EXPECT_EQ(exists(c - 2), 1);
  EXPECT_EQ(expiry(c), (c + 4) * 60);
  EXPECT_EQ(field(c, "infera:rl:call:lt-1"), std::to_string(r1->elements[0].integer / 1000) + ":A");
  ASSERT_TRUE((*rc)->command({"HSET", hash(c - 3), "x", "1"}).ok());
  ReserveCall second;
  auto r2 = reserve("lt-2", second);
  ASSERT_TRUE(r2.ok() && !r2->isError());
  if (r2->elements[0].integer / 60'000 == c) {
    EXPECT_EQ(exists(c - 3), 1);  // not the minute's first call
  }
  EXPECT_EQ(summaryTotal(summaryOf(**rc, "k:a:t")), "120");

  // lt-1's marker as if the call had run two minutes before (a cancel retried for 100 s): the
  // cancel finds it there, refunds once and marks it refunded in this minute's hash.
  const std::string m1 = "infera:rl:call:lt-1";
  const std::string v1 = field(c, m1);
  ASSERT_TRUE((*rc)->command({"HDEL", hash(c), m1}).ok());
  ASSERT_TRUE((*rc)->command({"HSET", hash(redisMinute(**rc) - 2), m1, v1}).ok());
  auto u1 = (*rc)->eval(cancelScript(), first.keys, first.args);
  ASSERT_TRUE(u1.ok() && !u1->isError()) << (u1.ok() ? u1->str : u1.status().message());
  EXPECT_EQ(u1->integer, 1);
  EXPECT_EQ(summaryTotal(summaryOf(**rc, "k:a:t")), "60");
  const int64_t n = redisMinute(**rc);
  EXPECT_EQ(field(n, m1), "refunded");
  auto u1again = (*rc)->eval(cancelScript(), first.keys, first.args);
  ASSERT_TRUE(u1again.ok() && !u1again->isError());
  EXPECT_EQ(u1again->integer, 0);
  EXPECT_EQ(summaryTotal(summaryOf(**rc, "k:a:t")), "60");

  // A call cancelled before it runs: marked in this minute's hash and the next two (which expire
  // at the end of their minute + 3, and unlink nothing).
  ReserveCall third;
  buildReserveCall(one, now_ms, "lt-3", third);
  auto u3 = (*rc)->eval(cancelScript(), third.keys, third.args);
  ASSERT_TRUE(u3.ok() && !u3->isError());
  EXPECT_EQ(u3->integer, 0);
  const int64_t k = redisMinute(**rc);
  const int64_t marked =
      field(k, "infera:rl:call:lt-3") == "cancelled" ? k : k - 1;  // the minute may have turned
  for (int64_t m = marked; m <= marked + 2; ++m)
    EXPECT_EQ(field(m, "infera:rl:call:lt-3"), "cancelled") << m;
  EXPECT_EQ(expiry(marked + 2), (marked + 6) * 60);
  if (marked == c) {
    EXPECT_EQ(exists(c - 2), 1);
  }
  auto late = (*rc)->eval(reserveScript(), third.keys, third.args);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->isError());
  EXPECT_EQ(summaryTotal(summaryOf(**rc, "k:a:t")), "60");
}

// An admission call that times out may still run in Redis later (the server was stuck, not gone).
// The gateway decides that request locally and undoes the call in Redis, so the team's daily quota
// there is not also charged the request's worst case.
TEST(GovernanceCluster, TimedOutAdmissionCallIsUndoneInRedis) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  auto gw = startGov(govConfig(emu->url(), "sqlite:" + tempPath("undo.db"),
                               "  redis: " + redis->url() + "\n  redis_timeout_ms: 200\n"));
  ASSERT_TRUE(gw);
  const std::string key = makeKey(*gw, "undo", json{{"daily_tokens", 1000000}});
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc.ok());
  const std::string day_key =
      "infera:rl:t:undo:d:" +
      std::to_string(periodId(Window::kDay, SystemClock::instance().unixMillis()));
  auto day = [&]() -> std::string {
    auto r = (*rc)->command({"GET", day_key});
    return r.ok() ? r->str : "?";
  };
  const auto first = call(*gw, key, chat("m1", 5));
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string used =
      std::to_string(parse(first.body)["usage"]["total_tokens"].get<int64_t>());
  ASSERT_TRUE(waitFor([&] { return day() == used; })) << day() << " vs " << used;  // reconciled

  redis->pause();
  const auto second = call(*gw, key, chat("m1", 500));  // its call times out: decided locally
  redis->resume();
  EXPECT_EQ(second.status, 200) << second.body;
  EXPECT_GE(gw->metricSum("infera_ratelimit_fallback_total"), 1);
  ASSERT_TRUE(
      waitFor([&] { return gw->metricSum("infera_ratelimit_redis_cancelled_calls_total") >= 1; }));
  // The stale call, if Redis ran it after resuming (it does: redis-server executes what it had
  // read before it sees the gateway's close), was refunded; if not, it was cancelled first.
  EXPECT_EQ(day(), used);
}

TEST(GovernanceCluster, AReconciliationRedisMissedIsResentAndAppliedOnce) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto emu = startEmulator(25);  // 25 ms a token: a 40-token answer takes ~1 s
  ASSERT_TRUE(emu);
  auto gw = startGov(govConfig(emu->url(), "sqlite:" + tempPath("recon.db"),
                               "  redis: " + redis->url() + "\n  redis_timeout_ms: 200\n"));
  ASSERT_TRUE(gw);
  const std::string key = makeKey(*gw, "recon", json{{"daily_tokens", 1000000}});
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc.ok());
  const std::string day_key =
      "infera:rl:t:recon:d:" +
      std::to_string(periodId(Window::kDay, SystemClock::instance().unixMillis()));
  auto day = [&]() -> std::string {
    auto r = (*rc)->command({"GET", day_key});
    return r.ok() ? r->str : "?";
  };
  // A slow request is admitted through Redis: its worst case is reserved there.
  TestResponse slow;
  std::thread slow_call([&] { slow = call(*gw, key, chat("m1", 40)); });
  ASSERT_TRUE(waitFor([&] { return !day().empty() && day() != "?"; }));
  const std::string reserved = day();
  // Redis stops answering. A second request's admission call times out (decided locally, its
  // call undone later), which breaks the connection: when the slow answer ends, its
  // reconciliation cannot even be sent. It is re-sent until Redis is back.
  redis->pause();
  EXPECT_EQ(call(*gw, key, chat("m1", 1)).status, 200);
  slow_call.join();
  ASSERT_EQ(slow.status, 200) << slow.body;
  ASSERT_TRUE(
      waitFor([&] { return gw->metricSum("infera_ratelimit_redis_adjust_retries_total") >= 1; }));
  redis->resume();
  const std::string used = std::to_string(parse(slow.body)["usage"]["total_tokens"].get<int64_t>());
  ASSERT_NE(used, reserved);
  // Applied exactly once: the daily counter ends at the slow request's usage (twice would take it
  // below; never would leave the reservation).
  ASSERT_TRUE(waitFor([&] { return day() == used; }, std::chrono::seconds(10)))
      << day() << " vs " << used;
  ASSERT_TRUE(
      waitFor([&] { return gw->metricSum("infera_ratelimit_redis_cancelled_calls_total") >= 1; }));
  EXPECT_EQ(day(), used);
}

// A summary an earlier version wrote as text at K:s is still read (and rewritten in the binary
// form, in the minute's hash).
TEST(GovernanceCluster, AnEarlierVersionsTextSummaryIsStillRead) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc.ok());
  auto time = (*rc)->command({"TIME"});
  ASSERT_TRUE(time.ok() && !time->elements.empty());
  const std::string sec = time->elements[0].str;
  // 5 requests this second, all still in the current-second amount.
  ASSERT_TRUE(
      (*rc)
          ->command({"SET", "infera:rl:k:old:r:s", "5 " + sec + " " + sec + " -1 5", "PX", "61000"})
          .ok());
  Charge one[1] = {{"k:old:r", Window::kMinute, Scope::kKey, false, 6, 1}};
  const std::span<const Charge> two[2] = {one, one};
  ReserveCall call;
  buildReserveCall(two, SystemClock::instance().unixMillis(), "old-1", call);
  auto reply = (*rc)->eval(reserveScript(), call.keys, call.args);
  ASSERT_TRUE(reply.ok() && !reply->isError())
      << (reply.ok() ? reply->str : reply.status().message());
  auto decided = parseReserveReply(*reply, two, call);
  ASSERT_TRUE(decided.ok()) << decided.status().message();
  EXPECT_TRUE((*decided)[0].admitted);                 // 5 + 1 <= 6
  EXPECT_FALSE((*decided)[1].admitted);                // 7 > 6
  const std::string now = summaryOf(**rc, "k:old:r");  // rewritten, in binary, in the minute's hash
  EXPECT_EQ(now.size(), 41u);
  EXPECT_EQ(summaryTotal(now), "6");
}

// The reconciliation script applies a call once per id, whatever the number of times it is sent.
TEST(GovernanceCluster, AdjustScriptAppliesACallOnce) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc.ok());
  ASSERT_TRUE((*rc)->command({"SET", "infera:rl:t:x:d:1", "100"}).ok());
  const std::vector<std::string> keys = {"infera:rl:t:x:d:1"};
  const std::vector<std::string> args = {"call-1", "1", "0", "-30"};
  for (int i = 0; i < 3; ++i) {
    auto r = (*rc)->eval(adjustScript(), keys, args);
    ASSERT_TRUE(r.ok() && !r->isError()) << (r.ok() ? r->str : r.status().message());
    EXPECT_EQ(r->integer, i == 0 ? 1 : 0);
  }
  EXPECT_EQ((*rc)->command({"GET", "infera:rl:t:x:d:1"})->str, "70");
  // Arguments that do not add up are refused and write nothing.
  auto bad = (*rc)->eval(adjustScript(), keys, {"call-2", "1", "0"});
  ASSERT_TRUE(bad.ok());
  EXPECT_TRUE(bad->isError());
  EXPECT_EQ((*rc)->command({"GET", "infera:rl:t:x:d:1"})->str, "70");
}

// Redis loses its data (a restart without persistence): a team's daily quota in Redis starts again
// from what the store recorded today, not from zero.
TEST(GovernanceCluster, ADailyQuotaRedisLostStartsFromTheStoresUsage) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  auto gw = startGov(govConfig(emu->url(), "sqlite:" + tempPath("reseed.db"),
                               "  redis: " + redis->url() + "\n  redis_timeout_ms: 1000\n"));
  ASSERT_TRUE(gw);
  const std::string key = makeKey(*gw, "reseed", json{{"daily_tokens", 1'000'000}});
  for (int i = 0; i < 3; ++i) ASSERT_EQ(call(*gw, key, chat("m1", 8)).status, 200);
  int64_t recorded = 0;
  ASSERT_TRUE(waitFor([&] {
    const json rows = usageRows(*gw, "since=1h&granularity=total&group_by=team&team=reseed");
    if (rows.empty() || rows[0]["requests"] != 3) return false;
    recorded = rows[0]["total_tokens"].get<int64_t>();
    return true;
  }));
  ASSERT_GT(recorded, 24);
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc.ok());
  const std::string day_key =
      "infera:rl:t:reseed:d:" +
      std::to_string(periodId(Window::kDay, SystemClock::instance().unixMillis()));
  auto before = (*rc)->command({"GET", day_key});
  ASSERT_TRUE(before.ok());
  ASSERT_GE(std::atoll(before->str.c_str()), recorded);  // Redis counted them
  ASSERT_TRUE((*rc)->command({"FLUSHALL"}).ok());
  // Any change of keys or teams has the store's figures refreshed at once (else within a minute).
  const double refreshes = gw->metricSum("infera_ratelimit_quota_refreshes_total");
  ASSERT_EQ(admin(*gw, "PATCH", "/admin/teams/reseed", R"({"rpm":1000})").status, 200);
  ASSERT_TRUE(
      waitFor([&] { return gw->metricSum("infera_ratelimit_quota_refreshes_total") > refreshes; }));
  ASSERT_EQ(call(*gw, key, chat("m1", 8)).status, 200);
  auto after = (*rc)->command({"GET", day_key});
  ASSERT_TRUE(after.ok());
  // The store's tokens plus this request's (its reservation, or its usage once reconciled).
  EXPECT_GT(std::atoll(after->str.c_str()), recorded) << after->str;

  // Redis down: the local fallback's day counter starts from the store's figures too. With the
  // quota set 10 tokens above today's use, the next request (~30 tokens reserved) does not fit.
  ASSERT_TRUE(waitFor([&] {
    const json rows = usageRows(*gw, "since=1h&granularity=total&group_by=team&team=reseed");
    if (rows.empty() || rows[0]["requests"] != 4) return false;
    recorded = rows[0]["total_tokens"].get<int64_t>();
    return true;
  }));
  const double refreshed = gw->metricSum("infera_ratelimit_quota_refreshes_total");
  ASSERT_EQ(admin(*gw, "PATCH", "/admin/teams/reseed", json{{"daily_tokens", recorded + 10}}.dump())
                .status,
            200);
  ASSERT_TRUE(
      waitFor([&] { return gw->metricSum("infera_ratelimit_quota_refreshes_total") > refreshed; }));
  redis->kill();
  const auto refused = call(*gw, key, chat("m1", 8));
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(errorCode(refused), "daily_quota_exceeded");
  EXPECT_GE(gw->metricSum("infera_ratelimit_fallback_total"), 1);
}

// The two other fallbacks while Redis is down: `open` admits without counting (and reports no
// x-ratelimit-* figures), `closed` answers 503; both count the fallback.
TEST(GovernanceCluster, RedisDownFailsOpenOrClosedAsConfigured) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  const std::string url = redis->url();
  redis->kill();
  for (const std::string mode : {"open", "closed"}) {
    auto gw = startGov(govConfig(
        emu->url(), "sqlite:" + tempPath("failmode-" + mode + ".db"),
        "  redis: " + url + "\n  redis_fallback: " + mode + "\n  redis_timeout_ms: 200\n"));
    ASSERT_TRUE(gw) << mode;
    const std::string key = makeKey(*gw, "fm", json::object(), json{{"rpm", 2}});
    int ok = 0, unavailable = 0, other = 0;
    for (int i = 0; i < 5; ++i) {
      const auto r = call(*gw, key, chat("m1", 1));
      ok += r.status == 200;
      unavailable += r.status == 503;
      other += r.status != 200 && r.status != 503;
      if (r.status == 200) {
        EXPECT_EQ(r.header("x-ratelimit-remaining-requests"), "") << mode;
      } else if (r.status == 503) {
        EXPECT_EQ(parse(r.body)["error"]["code"], "rate_limiter_unavailable") << r.body;
      }
    }
    EXPECT_EQ(other, 0) << mode;
    EXPECT_EQ(ok, mode == "open" ? 5 : 0) << mode;  // beyond the key's 2 per minute: nothing counts
    EXPECT_EQ(unavailable, mode == "closed" ? 5 : 0) << mode;
    EXPECT_GE(gw->metricSum("infera_ratelimit_fallback_total"), 5) << mode;
  }
}

TEST(GovernanceCluster, RedisDownFallsBackToALocalShareAndComesBack) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  auto gw = startGov(
      govConfig(emu->url(), "sqlite:" + tempPath("fallback.db"),
                "  redis: " + redis->url() + "\n  replicas: 3\n  redis_timeout_ms: 200\n"));
  ASSERT_TRUE(gw);
  const std::string key = makeKey(*gw, "fb", json::object(), json{{"rpm", 30}});
  const std::string id = key.substr(7, 12);
  // Probes whether every worker is back on Redis without spending `key`'s limit.
  const std::string probe = makeKey(*gw, "probe", json::object(), json{{"rpm", 1000000}});
  ASSERT_EQ(call(*gw, key, chat("m1", 1)).status, 200);
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(summaryTotal(summaryOf(**rc, "k:" + id + ":r")), "1");  // the counter lives in Redis

  redis->kill();
  // Still serving, now on a third of the limit (10 per minute), and saying so in metrics and in
  // the headers (the limit that applies is the share).
  int ok = 0, limited = 0, other = 0;
  for (int i = 0; i < 20; ++i) {
    const auto r = call(*gw, key, chat("m1", 1));
    const int s = r.status;
    ok += s == 200;
    limited += s == 429;
    other += s != 200 && s != 429;
    EXPECT_EQ(r.header("x-ratelimit-limit-requests"), "10") << i;
  }
  EXPECT_EQ(other, 0);
  EXPECT_EQ(ok, 10);
  EXPECT_EQ(limited, 10);
  EXPECT_GE(gw->metricSum("infera_ratelimit_fallback_total"), 20);

  ASSERT_TRUE(redis->restart());
  // Back on Redis (fresh counters there): every worker reconnects on its next request after the
  // back-off. A worker still on its local share answers 200 too (a full-suite run caught one whose
  // connect, refused just before the restart, was seen after it, while the other was back), so
  // "back" is three rounds of 4 probe calls in a row with no fallback decision; the probe's limit
  // is far away, so waiting spends nothing of `key`'s.
  int clean_rounds = 0;
  ASSERT_TRUE(waitFor(
      [&] {
        const double before = gw->metricSum("infera_ratelimit_fallback_total");
        bool clean = true;
        for (int i = 0; i < 4; ++i) clean = call(*gw, probe, chat("m1", 1)).status == 200 && clean;
        clean = clean && gw->metricSum("infera_ratelimit_fallback_total") == before;
        clean_rounds = clean ? clean_rounds + 1 : 0;
        return clean_rounds == 3;
      },
      std::chrono::seconds(10)));
  // Admissions resume and are counted in Redis again.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(call(*gw, key, chat("m1", 1)).status, 200) << i;
  auto rc2 = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc2.ok());
  EXPECT_NE(summaryOf(**rc2, "k:" + id + ":r"), "");
  const double fallbacks = gw->metricSum("infera_ratelimit_fallback_total");
  EXPECT_EQ(call(*gw, key, chat("m1", 1)).status, 200);
  EXPECT_EQ(gw->metricSum("infera_ratelimit_fallback_total"), fallbacks);
}

TEST(GovernanceCluster, RedisCountersRefuseAndReconcileLikeInProcessOnes) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  // Redis calls may take up to 1 s here: on a loaded box one past the 50 ms default is decided
  // by the local fallback (counted apart), which admitted a request Redis would have refused.
  auto gw = startGov(govConfig(
      emu->url(), "sqlite:" + tempPath("redis-rules.db"),
      "  redis: " + redis->url() + "\n  default_max_tokens: 150\n  redis_timeout_ms: 1000\n"));
  ASSERT_TRUE(gw);
  // Requests per minute: 3 admitted, the 4th refused with OpenAI's headers.
  const std::string rpm_key = makeKey(*gw, "rpm", json::object(), json{{"rpm", 3}});
  for (int i = 0; i < 3; ++i) {
    const auto r = call(*gw, rpm_key, chat("m1", 1));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-ratelimit-remaining-requests"), std::to_string(2 - i));
  }
  const auto limited = call(*gw, rpm_key, chat("m1", 1));
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(errorCode(limited), "rate_limit_exceeded");
  EXPECT_GE(std::atoi(limited.header("retry-after").c_str()), 1);
  EXPECT_EQ(limited.header("x-ratelimit-limit-requests"), "3");
  EXPECT_EQ(limited.header("x-ratelimit-remaining-requests"), "0");
  EXPECT_FALSE(limited.header("x-ratelimit-reset-requests").empty());
  // Tokens: each request reserves its prompt estimate (a quarter of the body, plus one) and
  // default_max_tokens (150), then uses ~21; reconciled in Redis, exactly as many fit in 400 as
  // in process (2 without refunds). Refunds reach Redis in batches (every 10 ms): a refusal counts
  // as final only once no refund is left to land (2 s without an admission; each admission in
  // between is a request that fit).
  const auto admittedInTurn = [](double limit, double reserve, double used) {
    int64_t k = 0;
    while (static_cast<double>(k) * used + reserve <= limit + 1e-9 && k < 1000) ++k;
    return k;
  };
  TestResponse last;
  const auto countAdmitted = [&](const std::string& key, const std::string& body,
                                 int64_t& used_each) {
    int ok = 0;
    used_each = 0;
    for (int i = 0; i < 30; ++i) {
      last = call(*gw, key, body);
      if (last.status != 200) {
        EXPECT_EQ(last.status, 429);
        if (!waitFor(
                [&] {
                  last = call(*gw, key, body);
                  return last.status == 200;
                },
                std::chrono::seconds(2)))
          break;
      }
      if (ok == 0) used_each = parse(last.body)["usage"]["total_tokens"].get<int64_t>();
      ++ok;
    }
    return ok;
  };
  const std::string tpm_key = makeKey(*gw, "tpm", json::object(), json{{"tpm", 400}});
  const std::string body =
      R"({"model":"m1","messages":[{"role":"user","content":"hello there, how are you"}]})";
  int64_t tpm_each = 0;
  const int ok = countAdmitted(tpm_key, body, tpm_each);
  ASSERT_GT(tpm_each, 0);
  // What the limiter did, for a failure's message.
  const auto limiterState = [&] {
    std::string out;
    for (const char* m :
         {"infera_ratelimit_redis_cancelled_calls_total",
          "infera_ratelimit_redis_adjust_retries_total", "infera_ratelimit_redis_leases_total",
          "infera_ratelimit_redis_lease_admissions_total", "infera_ratelimit_fallback_total",
          "infera_ratelimit_redis_errors_total"})
      out += std::string("\n  ") + m + " " + std::to_string(gw->metricSum(m));
    return out;
  };
  EXPECT_EQ(ok, admittedInTurn(400, static_cast<double>(body.size() / 4 + 1 + 150),
                               static_cast<double>(tpm_each)))
      << "each request used " << tpm_each << limiterState();
  // Daily token budget (a period counter): refused with insufficient_quota once spent, at exactly
  // the request that would pass it.
  const std::string budget_key = makeKey(
      *gw, "budget", json{{"budget_tokens", 100}, {"budget_period", "day"}}, json::object());
  int64_t budget_each = 0;
  const std::string small = chat("m1", 10);
  const int spent = countAdmitted(budget_key, small, budget_each);
  ASSERT_GT(budget_each, 0);
  EXPECT_EQ(spent, admittedInTurn(100, static_cast<double>(small.size() / 4 + 1 + 10),
                                  static_cast<double>(budget_each)));
  EXPECT_EQ(last.status, 429) << last.body << limiterState();
  EXPECT_EQ(errorCode(last), "budget_exceeded");
  EXPECT_EQ(gw->metricSum("infera_ratelimit_fallback_total"), 0);
  EXPECT_EQ(gw->metricSum("infera_ratelimit_redis_errors_total"), 0);
}

// Leases: a busy worker far from its limits takes most admissions from capacity it reserved in
// Redis ahead, so a call no longer comes with every group of admissions; the requests' headers
// still count every request; and once the leases have ended Redis holds exactly what the requests
// used, on the minute counters and on the daily quota: nothing a lease reserved and did not use.
// The same after a burst cut short by stopping the gateway: its workers give their leases back.
TEST(GovernanceCluster, LeasesAdmitWithoutACallAndLeaveRedisWithWhatWasUsed) {
  auto redis = testing::RedisServer::start();
  ASSERT_TRUE(redis);
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
  ASSERT_TRUE(rc.ok()) << rc.status().message();
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  auto gw = startGov(govConfig(emu->url(), "sqlite:" + tempPath("leases.db"),
                               "  redis: " + redis->url() + "\n  redis_timeout_ms: 1000\n"));
  ASSERT_TRUE(gw);
  constexpr int64_t kRpm = 1'000'000, kBigTpm = 100'000'000, kDaily = 1'000'000'000;
  const std::string key =
      makeKey(*gw, "lease", json{{"rpm", kRpm}, {"tpm", kBigTpm}, {"daily_tokens", kDaily}},
              json::object());
  constexpr int kThreads = 4, kEach = 500, kBurst = kThreads * kEach;
  std::atomic<int64_t> tokens{0}, ok{0}, bad_headers{0};
  auto burst = [&] {
    const int64_t sent_before = ok.load();
    std::vector<std::thread> pool;
    for (int t = 0; t < kThreads; ++t) {
      pool.emplace_back([&] {
        TestClient client(gw->port());
        for (int i = 0; i < kEach; ++i) {
          auto r = client.request(
              "POST", "/v1/chat/completions", chat("m1", 5),
              {{"authorization", "Bearer " + key}, {"content-type", "application/json"}});
          if (!r || r->status != 200) continue;
          ++ok;
          tokens += json::parse(r->body)["usage"]["total_tokens"].get<int64_t>();
          // What is left counts this request, and at most the requests sent and what the other
          // worker's leases hold unused.
          const int64_t left = std::atoll(r->header("x-ratelimit-remaining-requests").c_str());
          if (left >= kRpm || left < kRpm - 2 * (sent_before + kBurst)) ++bad_headers;
        }
      });
    }
    for (auto& th : pool) th.join();
  };
  const std::string day =
      "infera:rl:t:lease:d:" +
      std::to_string(periodId(Window::kDay, SystemClock::instance().unixMillis()));
  auto held = [&] {
    auto d = (*rc)->command({"GET", day});
    return summaryTotal(summaryOf(**rc, "t:lease:r")) + " " +
           summaryTotal(summaryOf(**rc, "t:lease:t")) + " " + (d.ok() ? d->str : "?");
  };
  auto used = [&] {
    return std::to_string(ok.load()) + " " + std::to_string(tokens.load()) + " " +
           std::to_string(tokens.load());
  };
  burst();
  ASSERT_EQ(ok.load(), kBurst);
  EXPECT_EQ(bad_headers.load(), 0);
  const double from_leases = gw->metricSum("infera_ratelimit_redis_lease_admissions_total");
  const double by_calls = gw->metricSum("infera_ratelimit_redis_call_admissions_sum");
  const double calls = gw->metricSum("infera_ratelimit_redis_call_admissions_count");
  std::printf("leases: %.0f admissions from leases, %.0f in %.0f calls, %.0f leases\n", from_leases,
              by_calls, calls, gw->metricSum("infera_ratelimit_redis_leases_total"));
  EXPECT_EQ(from_leases + by_calls, static_cast<double>(kBurst));
  EXPECT_GT(from_leases, by_calls);
  EXPECT_LT(calls, kBurst / 3);
  EXPECT_EQ(gw->metricSum("infera_ratelimit_fallback_total"), 0);
  // Every lease ends with its Redis second and gives back what it did not use; reconciliations go
  // within 10 ms: then Redis holds the requests and the tokens they used, nothing more.
  EXPECT_TRUE(waitFor([&] { return held() == used(); }, std::chrono::seconds(5)))
      << held() << " != " << used();
  // A second burst, and the gateway stopped at once, its leases still live.
  burst();
  ASSERT_EQ(ok.load(), 2 * kBurst);
  EXPECT_EQ(bad_headers.load(), 0);
  EXPECT_GT(gw->metricSum("infera_ratelimit_redis_lease_admissions_total"),
            from_leases + kBurst / 2);
  EXPECT_EQ(gw->metricSum("infera_ratelimit_redis_errors_total"), 0);
  gw.reset();
  EXPECT_EQ(held(), used());
}

// Two replicas sharing a store and a Redis cache tier of entries living `ttl_ms`, and a key of
// team `team` that both know.
struct CacheReplicas {
  FakeClock clock{FakeClock::AtSystemTime{}};  // both replicas' (declared first: outlives them)
  std::unique_ptr<testing::RedisServer> redis;
  std::unique_ptr<testing::RedisCluster> cluster;  // instead of `redis` when asked for
  std::string url;
  std::unique_ptr<emulator::Emulator> emu;
  std::unique_ptr<server::Server> a, b;
  std::string key;
};
void startCacheReplicas(CacheReplicas& r, const std::string& team, int64_t ttl_ms,
                        bool fake_clock = false, bool cluster = false) {
  if (cluster) {
    r.cluster = testing::RedisCluster::start();
    ASSERT_TRUE(r.cluster);
    r.url = r.cluster->url();
  } else {
    r.redis = testing::RedisServer::start();
    ASSERT_TRUE(r.redis);
    r.url = r.redis->url();
  }
  r.emu = startEmulator();
  ASSERT_TRUE(r.emu);
  const std::string db = "sqlite:" + tempPath(team + ".db");
  // A loaded box can hold a Redis call past the 50 ms default: a timed-out GET reads as a miss.
  const std::string extra = "  redis: " + r.url + "\n  redis_timeout_ms: 1000\n" +
                            "  cache: {ttl_ms: " + std::to_string(ttl_ms) + ", redis: true}\n";
  const Clock* clock = fake_clock ? &r.clock : nullptr;
  r.a = startGov(govConfig(r.emu->url(), db, extra), clock);
  r.b = startGov(govConfig(r.emu->url(), db, extra), clock);
  ASSERT_TRUE(r.a && r.b);
  r.key = makeKey(*r.a, team);
  ASSERT_TRUE(waitFor([&] { return call(*r.b, r.key, chat("m1", 0)).status == 200; }));
}

// The keys matching `pattern` on every master of the Redis (or Redis Cluster) at `url`.
size_t countKeys(const std::string& url, const std::string& pattern) {
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(url));
  if (!rc.ok()) return 0;
  auto masters = (*rc)->masters();
  if (!masters.ok()) return 0;
  size_t n = 0;
  for (auto& m : *masters) {
    auto keys = m->command({"KEYS", pattern});
    if (keys.ok()) n += keys->elements.size();
  }
  return n;
}

void cacheIsShared(bool cluster) {
  CacheReplicas r;
  ASSERT_NO_FATAL_FAILURE(startCacheReplicas(r, "cache", 60'000, false, cluster));
  const std::string body = chat("m1", 4, false, R"(,"temperature":0)");
  const auto first = call(*r.a, r.key, body);
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.header("x-infera-cache"), "miss");
  ASSERT_TRUE(waitFor([&] { return countKeys(r.url, "infera:cache2:*") == 1; }));
  const uint64_t before = r.emu->stats().requests.load();
  const auto second = call(*r.b, r.key, body);
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(second.header("x-infera-cache"), "hit");
  EXPECT_EQ(second.body, first.body);
  EXPECT_EQ(r.emu->stats().requests.load(), before);
}

TEST(GovernanceCluster, TheCacheIsSharedThroughRedis) { cacheIsShared(false); }

// The same with the shared tier on a Redis Cluster (3 masters, 3 replicas): an entry is one key,
// stored on the master of its slot and found there by the other replica.
TEST(GovernanceCluster, TheCacheIsSharedThroughARedisCluster) { cacheIsShared(true); }

// On a Redis Cluster a team's counters and a model's live in different slots (hash tags {t:team}
// and {m:model}), so an admission is decided by one call per slot, sent at once. It is admitted
// when every part is; when the model's part is refused the team's part, admitted in its own slot,
// is given back: Redis ends up holding exactly what was admitted on both.
TEST(GovernanceCluster, OnARedisClusterAnAdmissionSpansSlotsAndARefusalHoldsNothing) {
  auto cluster = testing::RedisCluster::start();
  ASSERT_TRUE(cluster);
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  // No leases: every admission is a script call here.
  auto gw = startGov(
      govConfig(emu->url(), "sqlite:" + tempPath("rc-slots.db"),
                "  redis: " + cluster->url() + "\n  redis_timeout_ms: 1000\n  redis_lease_ms: 0\n",
                "    limits: {rpm: 5}\n"));
  ASSERT_TRUE(gw);
  ASSERT_NE(store::redisKeySlot("{t:slots}"), store::redisKeySlot("{m:m1}"));
  const std::string key = makeKey(*gw, "slots", json{{"rpm", 100}});
  int admitted = 0, limited = 0;
  std::string refusal;
  for (int i = 0; i < 8; ++i) {
    const auto r = call(*gw, key, chat("m1", 0));
    if (r.status == 200) ++admitted;
    if (r.status == 429) {
      ++limited;
      refusal = r.body;
    }
  }
  EXPECT_EQ(admitted, 5);
  EXPECT_EQ(limited, 3);
  EXPECT_NE(refusal.find("model"), std::string::npos) << refusal;
  EXPECT_EQ(gw->metricSum("infera_ratelimit_fallback_total"), 0);
  EXPECT_EQ(gw->metricSum("infera_ratelimit_redis_errors_total"), 0);
  auto rc = store::RedisClient::connect(*store::parseRedisUrl(cluster->url()));
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(clusterTotal(**rc, "m:m1", "m:m1:r"), "5");
  // The team's counter took 8 requests, then got the 3 refused ones back (adjust calls).
  EXPECT_TRUE(waitFor([&] { return clusterTotal(**rc, "t:slots", "t:slots:r") == "5"; }))
      << clusterTotal(**rc, "t:slots", "t:slots:r");
  // Each summary hash is in its counters' slot (a script touching another slot would have failed).
  const int64_t minute = redisMinute(**rc);
  EXPECT_EQ(store::redisKeySlot("infera:rl:sum:{t:slots}:" + std::to_string(minute)),
            store::redisKeySlot("infera:rl:{t:slots}t:slots:r"));
}

// An entry taken from Redis keeps its first answer's expiry in the local tier: it does not live a
// TTL again from the moment another replica read it.
TEST(GovernanceCluster, ACachedAnswerExpiresOnceAcrossReplicas) {
  // Both replicas read one fake clock (the entry's expiry is theirs; Redis's own PX expiry, on
  // real time, is far off at a 60 s TTL): b copies the entry half-way through its life, and the
  // copy ends with the first answer's TTL, not half a TTL later.
  CacheReplicas r;
  ASSERT_NO_FATAL_FAILURE(startCacheReplicas(r, "cache-ttl", 60'000, /*fake_clock=*/true));
  const std::string body = chat("m1", 4, false, R"(,"temperature":0)");
  ASSERT_EQ(call(*r.a, r.key, body).header("x-infera-cache"), "miss");
  // The answer reaches Redis just after it was relayed.
  ASSERT_TRUE(waitFor([&] { return countKeys(r.url, "infera:cache2:*") == 1; }));
  r.clock.advance(std::chrono::seconds(30));
  ASSERT_EQ(call(*r.b, r.key, body).header("x-infera-cache"), "hit");  // from Redis, now local
  r.clock.advance(std::chrono::milliseconds(29'999));
  ASSERT_EQ(call(*r.b, r.key, body).header("x-infera-cache"), "hit");  // 1 ms before the end
  r.clock.advance(std::chrono::milliseconds(2));
  EXPECT_EQ(call(*r.b, r.key, body).header("x-infera-cache"), "miss");
}

TEST(GovernanceCluster, PostgresSharesKeysRevocationsAndUsageAcrossReplicas) {
  auto pg = testing::PostgresServer::start();
  ASSERT_TRUE(pg);
  ASSERT_TRUE(pg->createDatabase("infera"));
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  // Replicas poll the store at the default interval (500 ms; the fixture's is 100 ms): revocation
  // must land within 5 s.
  std::string cfg_a = govConfig(emu->url(), pg->url("infera"));
  const size_t poll = cfg_a.find("  sync_interval_ms: 100\n");
  ASSERT_NE(poll, std::string::npos);
  cfg_a.erase(poll, std::string("  sync_interval_ms: 100\n").size());
  auto a = startGov(cfg_a);
  ASSERT_TRUE(a);
  auto b = startGov(cfg_a);
  ASSERT_TRUE(b);
  const std::string key = makeKey(*a, "shared");
  int64_t served = 0, completion = 0;  // what the test saw admitted, on either replica
  ASSERT_TRUE(
      waitFor([&] { return call(*b, key, chat("m1", 3)).status == 200; }, std::chrono::seconds(5)));
  ASSERT_EQ(call(*a, key, chat("m1", 3)).status, 200);
  served += 2;
  completion += 6;

  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(admin(*a, "POST", "/admin/keys/" + key.substr(7, 12) + "/revoke").status, 200);
  EXPECT_EQ(call(*a, key, chat("m1", 1)).status, 401);  // this replica: at once
  // Waited for longer than the bound it checks, so a replica that misses it fails the check.
  ASSERT_TRUE(waitFor(
      [&] {
        const int status = call(*b, key, chat("m1", 1)).status;
        if (status == 200) {
          ++served;
          ++completion;
        }
        return status == 401;
      },
      std::chrono::seconds(20)));
  const auto seen_after = std::chrono::steady_clock::now() - t0;
  std::printf("revocation seen by the second replica after %lld ms\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(seen_after).count()));
  EXPECT_LT(seen_after, std::chrono::seconds(5));

  // Usage from both replicas lands in the one store.
  json rows;
  ASSERT_TRUE(waitFor([&] {
    rows = usageRows(*b, "since=1h&granularity=total&group_by=team&team=shared");
    return rows.size() == 1 && rows[0]["requests"] == served &&
           rows[0]["completion_tokens"] == completion;
  })) << rows.dump();
  // A secret is required when the store is shared.
  ::unsetenv("INFERA_KEY_SECRET");
  std::string no_secret = cfg_a;
  const size_t p = no_secret.find("  key_secret:");
  no_secret.erase(p, no_secret.find('\n', p) - p + 1);
  auto cfg = server::loadConfigString(no_secret);
  ASSERT_TRUE(cfg.ok());
  auto refused = server::Server::start(std::move(*cfg));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("key_secret"), std::string::npos);
}

}  // namespace
}  // namespace infera::access
