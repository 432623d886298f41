// Unit tests of governance parts: key material, model patterns, the rolling-window counters (with
// explicit times), reset durations, the cache and its key, and the metadata store on SQLite.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "access/internal/governance.h"
#include "access/internal/keys.h"
#include "access/internal/limiter.h"
#include "core/clock.h"

namespace infera::access {
namespace {

TEST(GlobMatch, WildcardsAndLiterals) {
  EXPECT_TRUE(globMatch("*", "anything"));
  EXPECT_TRUE(globMatch("gpt-4*", "gpt-4o-mini"));
  EXPECT_TRUE(globMatch("*-mini", "gpt-4o-mini"));
  EXPECT_TRUE(globMatch("llama*8b", "llama-3-8b"));
  EXPECT_FALSE(globMatch("gpt-4*", "gpt-3.5"));
  EXPECT_FALSE(globMatch("m1", "m12"));
  EXPECT_TRUE(globMatch("m1", "m1"));
  EXPECT_EQ(splitPatterns(" a, b*,,c "), (std::vector<std::string>{"a", "b*", "c"}));
}

TEST(KeyMaterial, TokensParseAndHashesAreKeyedAndSalted) {
  const std::string secret = randomToken(40);
  EXPECT_EQ(secret.size(), 40u);
  EXPECT_NE(secret, randomToken(40));
  const std::string token = keyToken("abcdefghijkl", secret);
  std::string_view id, s;
  ASSERT_TRUE(parseKeyToken(token, id, s));
  EXPECT_EQ(id, "abcdefghijkl");
  EXPECT_EQ(s, secret);
  EXPECT_FALSE(parseKeyToken("sk-inf-short", id, s));
  EXPECT_FALSE(parseKeyToken("Bearer " + token, id, s));
  const std::string h = hashSecret("server", "salt1", secret);
  EXPECT_EQ(h.size(), 64u);
  EXPECT_EQ(h, hashSecret("server", "salt1", secret));
  EXPECT_NE(h, hashSecret("server", "salt2", secret));   // salted
  EXPECT_NE(h, hashSecret("server2", "salt1", secret));  // keyed
  EXPECT_TRUE(constantTimeEqual(h, hashSecret("server", "salt1", secret)));
  EXPECT_FALSE(constantTimeEqual(h, h.substr(1)));
}

Charge minuteCharge(int64_t limit, int64_t amount, bool tokens = true) {
  return Charge{"k:test:t", Window::kMinute, Scope::kKey, tokens, limit, amount};
}

TEST(LocalCounters, RollingMinuteNeverAdmitsMoreThanTheLimitInAnyWindow) {
  LocalCounters c;
  const int64_t t0 = 1'800'000'000'000;  // ms
  // Saturating load: one 10-token request every 100 ms for 3 minutes against 1,000 TPM.
  std::vector<std::pair<int64_t, int64_t>> admitted;  // (time, tokens)
  for (int64_t t = t0; t < t0 + 180'000; t += 100) {
    const Charge ch = minuteCharge(1000, 10);
    const Admission a = c.reserve(std::span<const Charge>(&ch, 1), t);
    if (a.admitted) admitted.emplace_back(t, 10);
  }
  // Any 60 s window holds at most the limit; and the limit is reached (within one request).
  for (int64_t start = t0; start + 60'000 <= t0 + 180'000; start += 1000) {
    int64_t sum = 0;
    for (const auto& [t, n] : admitted) {
      if (t >= start && t < start + 60'000) sum += n;
    }
    EXPECT_LE(sum, 1000) << "window at " << (start - t0);
    EXPECT_GE(sum, 990) << "window at " << (start - t0);
  }
}

// A reservation is one step over all its counters: a request refused by its second counter never
// shows its first counter as taken to a concurrent request (which would be refused for nothing).
TEST(LocalCounters, ARefusedRequestNeverHoldsACounterAnotherRequestNeeds) {
  LocalCounters c;
  const int64_t now = 1'800'000'000'000;
  const CounterName shared_name("t:atom:r"), full_name("k:atom:t");
  Charge full{full_name.name, Window::kMinute, Scope::kKey, true, 10, 10};
  full.local = &full_name.local;
  ASSERT_TRUE(c.reserve(std::span<const Charge>(&full, 1), now).admitted);  // now at its limit
  // One request a time fits the shared counter (limit 1).
  Charge shared{shared_name.name, Window::kMinute, Scope::kTeam, false, 1, 1};
  shared.local = &shared_name.local;
  const Charge refused_pair[2] = {
      shared, Charge{full_name.name, Window::kMinute, Scope::kKey, true, 10, 1, &full_name.local}};
  constexpr int kRounds = 100'000;
  std::atomic<bool> stop{false};
  std::thread refused_requests([&] {
    while (!stop.load(std::memory_order_relaxed))
      ASSERT_FALSE(c.reserve(refused_pair, now).admitted);
  });
  int spurious = 0;
  for (int i = 0; i < kRounds; ++i) {
    const Admission a = c.reserve(std::span<const Charge>(&shared, 1), now);
    if (!a.admitted) {
      ++spurious;
      continue;
    }
    const int64_t back = -1;
    c.adjust(std::span<const Charge>(&shared, 1), std::span<const int64_t>(&back, 1), a.stamp_ms,
             now);
  }
  stop = true;
  refused_requests.join();
  EXPECT_EQ(spurious, 0);
  EXPECT_EQ(c.used(shared, now), 0);
}

// Many counters (more than are held inline), known by name, one of them charged twice: the
// charges on one counter add up, and a refusal reserves nothing on any of them.
TEST(LocalCounters, ManyCountersAndACounterChargedTwiceAreOneStep) {
  LocalCounters c;
  const int64_t now = 1'800'000'000'000;
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) names.push_back("u:many:" + std::to_string(i));
  std::vector<Charge> charges;
  for (const auto& name : names)
    charges.push_back(Charge{name, Window::kMinute, Scope::kUser, true, 100, 30});
  charges.push_back(
      Charge{names[3], Window::kMinute, Scope::kUser, true, 100, 30});  // u:many:3 again: 60
  ASSERT_TRUE(c.reserve(charges, now).admitted);
  EXPECT_EQ(c.used(charges[3], now), 60);
  EXPECT_EQ(c.used(charges[19], now), 30);
  const Admission second =
      c.reserve(charges, now);  // u:many:3 would reach 120, at its second charge
  ASSERT_FALSE(second.admitted);
  EXPECT_EQ(second.refused, 20);
  EXPECT_EQ(second.used, 90);  // 60 held + the 30 of its first charge in this request
  EXPECT_EQ(second.remaining[3], 40);
  EXPECT_EQ(second.remaining[20], 40);
  for (size_t i = 0; i < names.size(); ++i)
    EXPECT_EQ(c.used(charges[i], now), i == 3 ? 60 : 30) << i;
}

TEST(LocalCounters, RefusalSaysWhenToRetryAndReservesNothing) {
  LocalCounters c;
  const int64_t t0 = 1'800'000'000'000;
  Charge both[2] = {Charge{"k:a:r", Window::kMinute, Scope::kKey, false, 100, 1},
                    minuteCharge(50, 40)};
  ASSERT_TRUE(c.reserve(both, t0).admitted);
  const Admission refused = c.reserve(both, t0 + 10'000);
  ASSERT_FALSE(refused.admitted);
  EXPECT_EQ(refused.refused, 1);
  EXPECT_EQ(refused.used, 40);
  EXPECT_EQ(refused.retry_after_ms, 50'000);  // when the t0 bucket leaves the window
  // Nothing of the refused request stays on the request counter (index 0): one request, not two.
  EXPECT_EQ(c.used(both[0], t0 + 10'000), 1);
  // Past the window everything fits again.
  EXPECT_TRUE(c.reserve(both, t0 + 61'000).admitted);
}

TEST(LocalCounters, AdjustReturnsWhatWasNotUsed) {
  LocalCounters c;
  const int64_t t0 = 1'800'000'000'000;
  const Charge ch = minuteCharge(100, 80);
  const Admission a = c.reserve(std::span<const Charge>(&ch, 1), t0);
  ASSERT_TRUE(a.admitted);
  EXPECT_EQ(a.remaining[0], 20);
  EXPECT_FALSE(c.reserve(std::span<const Charge>(&ch, 1), t0 + 5'000).admitted);
  const int64_t delta = -70;  // used 10 of the 80 reserved
  c.adjust(std::span<const Charge>(&ch, 1), std::span<const int64_t>(&delta, 1), a.stamp_ms,
           t0 + 5'000);
  EXPECT_EQ(c.used(ch, t0 + 5'000), 10);
  EXPECT_TRUE(c.reserve(std::span<const Charge>(&ch, 1), t0 + 5'000).admitted);
}

TEST(LocalCounters, RunningMinuteTotalsMatchARecountUnderRandomTraffic) {
  // The counter keeps its 60 s total as amounts come and go; here every read is checked against a
  // recount of what the test itself reserved, refunded and added, over random steps (many within
  // a second, some of several seconds, a few jumps past the whole window). Reconciliations go to
  // reservations of earlier seconds too: refunds (at most what the reservation has left) to its
  // second while it is in the window; use beyond the reservation to its second, or to the current
  // one once its second has left the window.
  LocalCounters c;
  std::mt19937_64 rng(7);
  const Charge ch = minuteCharge(int64_t{1} << 40, 0);
  struct Reservation {
    int64_t stamp_ms, left;
  };
  std::vector<Reservation> made;
  std::vector<std::pair<int64_t, int64_t>> book;  // (second, amount) as the test did them
  int64_t now_ms = 1'800'000'000'000;
  for (int i = 0; i < 20'000; ++i) {
    const int r = static_cast<int>(rng() % 1000);
    now_ms += r < 900   ? static_cast<int64_t>(rng() % 50)
              : r < 995 ? static_cast<int64_t>(rng() % 5'000)
                        : 70'000;
    const int64_t now_s = now_ms / 1000;
    Charge one = ch;
    one.amount = 1 + static_cast<int64_t>(rng() % 100);
    const Admission a = c.reserve(std::span<const Charge>(&one, 1), now_ms);
    ASSERT_TRUE(a.admitted);
    book.emplace_back(now_s, one.amount);
    made.push_back({a.stamp_ms, one.amount});
    if (made.size() > 200) made.erase(made.begin());
    // Reconcile a random recent reservation (up to ~200 requests back, some outside the window).
    Reservation& old = made[rng() % made.size()];
    const int64_t old_s = old.stamp_ms / 1000;
    const bool live = old_s > now_s - 60;
    int64_t delta = 0;
    if (rng() % 3 == 0) {
      delta = static_cast<int64_t>(rng() % 20);  // used more than reserved
    } else if (live && old.left > 0) {
      delta = -static_cast<int64_t>(rng() % static_cast<uint64_t>(old.left + 1));  // used less
    }
    if (delta != 0) {
      c.adjust(std::span<const Charge>(&one, 1), std::span<const int64_t>(&delta, 1), old.stamp_ms,
               now_ms);
      if (delta < 0) {
        book.emplace_back(old_s, delta);
        old.left += delta;
      } else {
        book.emplace_back(live ? old_s : now_s, delta);
        if (live) old.left += delta;
      }
    }
    int64_t expect = 0;
    for (const auto& [sec, amount] : book) {
      if (sec > now_s - 60) expect += amount;
    }
    ASSERT_EQ(c.used(ch, now_ms), expect) << "step " << i;
    std::erase_if(book, [&](const auto& e) { return e.first <= now_s - 60; });
  }
}

TEST(LocalCounters, AClockSteppedBackAMinuteStillEnforcesTheLimit) {
  LocalCounters c;
  const Charge ch = minuteCharge(10, 10);
  const int64_t t = 1'800'000'000'000;
  ASSERT_TRUE(c.reserve(std::span<const Charge>(&ch, 1), t).admitted);
  EXPECT_FALSE(c.reserve(std::span<const Charge>(&ch, 1), t + 1'000).admitted);
  // The wall clock steps back 100 s: the window is re-anchored there (what was counted "in the
  // future" does not count), and the limit holds again from that point.
  ASSERT_TRUE(c.reserve(std::span<const Charge>(&ch, 1), t - 100'000).admitted);
  EXPECT_FALSE(c.reserve(std::span<const Charge>(&ch, 1), t - 99'000).admitted);
  EXPECT_EQ(c.used(ch, t - 99'000), 10);
  // Small timestamps (under a minute) index slots safely.
  LocalCounters early;
  const Charge one = minuteCharge(5, 1);
  for (int64_t ms = 0; ms < 5'000; ms += 1'000)
    ASSERT_TRUE(early.reserve(std::span<const Charge>(&one, 1), ms).admitted);
  EXPECT_FALSE(early.reserve(std::span<const Charge>(&one, 1), 5'000).admitted);
}

TEST(LocalCounters, DailyPeriodsResetAtUtcMidnightAndShareScalesLimits) {
  LocalCounters c;
  const int64_t midnight = 1'799'971'200'000;  // 2027-01-15 00:00:00 UTC
  ASSERT_EQ(midnight % 86'400'000, 0);
  const Charge day{"t:x:d", Window::kDay, Scope::kDaily, true, 100, 60};
  EXPECT_TRUE(c.reserve(std::span<const Charge>(&day, 1), midnight - 5'000).admitted);
  const Admission late = c.reserve(std::span<const Charge>(&day, 1), midnight - 1'000);
  EXPECT_FALSE(late.admitted);
  EXPECT_EQ(late.retry_after_ms, 1'000);
  EXPECT_TRUE(c.reserve(std::span<const Charge>(&day, 1), midnight).admitted);
  EXPECT_EQ(periodId(Window::kDay, midnight), 20270115);
  EXPECT_EQ(periodId(Window::kMonth, midnight), 202701);
  EXPECT_EQ(periodEndMs(Window::kMonth, midnight), 1'801'440'000'000);  // 2027-02-01
  // A third of a 90-token limit while Redis is down.
  const Charge ch{"k:share:t", Window::kMinute, Scope::kKey, true, 90, 20};
  EXPECT_TRUE(c.reserve(std::span<const Charge>(&ch, 1), midnight, 1.0 / 3).admitted);
  EXPECT_FALSE(c.reserve(std::span<const Charge>(&ch, 1), midnight, 1.0 / 3).admitted);
}

TEST(LocalCounters, MemoisedCountersAreTheNamedOnesAndBelongToTheirOwner) {
  LocalCounters a, b;
  const CounterName name("k:memo:t");
  const int64_t now = 1'799'971'200'000;
  Charge memo{name.name, Window::kMinute, Scope::kKey, true, 100, 30};
  memo.local = &name.local;
  const Charge by_name{"k:memo:t", Window::kMinute, Scope::kKey, true, 100, 30};
  EXPECT_TRUE(a.reserve(std::span<const Charge>(&memo, 1), now).admitted);
  ASSERT_NE(name.local.load(), nullptr);
  EXPECT_TRUE(a.reserve(std::span<const Charge>(&by_name, 1), now).admitted);
  EXPECT_EQ(a.used(memo, now), 60);
  EXPECT_EQ(a.used(by_name, now), 60);
  // Another LocalCounters (another gateway in this process) keeps its own count for the name.
  EXPECT_TRUE(b.reserve(std::span<const Charge>(&memo, 1), now).admitted);
  EXPECT_EQ(b.used(memo, now), 30);
  EXPECT_EQ(a.used(by_name, now), 60);
  EXPECT_EQ(a.used(memo, now), 60);
  // A copied name starts unresolved.
  const CounterName copy = name;
  EXPECT_EQ(copy.local.load(), nullptr);
}

TEST(LocalCounters, SweepRemovesIdleCountersKnownOnlyByName) {
  LocalCounters c;
  const CounterName team("t:sweep:t");
  const int64_t now = 1'799'971'200'000;
  Charge pinned{team.name, Window::kMinute, Scope::kTeam, true, 1'000'000, 5};
  pinned.local = &team.local;
  // Request-header user names: each makes a counter of its own.
  std::vector<std::string> names;
  for (int i = 0; i < 500; ++i) names.push_back("t:sweep:t:u:user" + std::to_string(i));
  for (const auto& n : names) {
    const Charge user{n, Window::kMinute, Scope::kUser, true, 1000, 5};
    ASSERT_TRUE(c.reserve(std::span<const Charge>(&user, 1), now).admitted);
  }
  ASSERT_TRUE(c.reserve(std::span<const Charge>(&pinned, 1), now).admitted);
  EXPECT_EQ(c.size(), 501u);
  // Still inside the minute: everything holds tokens, nothing goes.
  EXPECT_EQ(c.sweep(now + 30'000), 0u);
  // One user refunded to zero is idle at once.
  const Charge first{names[0], Window::kMinute, Scope::kUser, true, 1000, 5};
  const int64_t refund = -5;
  c.adjust(std::span<const Charge>(&first, 1), std::span<const int64_t>(&refund, 1), now,
           now + 30'000);
  EXPECT_EQ(c.sweep(now + 30'000), 1u);
  // A minute later the rest are idle; the memoised one stays (its memo must stay valid).
  EXPECT_EQ(c.sweep(now + 61'000), 499u);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.used(pinned, now + 61'000), 0);
  ASSERT_TRUE(c.reserve(std::span<const Charge>(&pinned, 1), now + 61'000).admitted);
  EXPECT_EQ(c.used(pinned, now + 61'000), 5);
  // A swept name starts again from nothing.
  const Charge again{names[1], Window::kMinute, Scope::kUser, true, 1000, 5};
  EXPECT_EQ(c.used(again, now + 61'000), 0);
  // A live daily quota known by name is kept; one of a past day is not.
  const Charge day{"t:sweep:d:u:x", Window::kDay, Scope::kUserDaily, true, 1000, 5};
  ASSERT_TRUE(c.reserve(std::span<const Charge>(&day, 1), now + 61'000).admitted);
  EXPECT_EQ(c.sweep(now + 62'000), 1u);  // `again`, which only read
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.sweep(now + 2 * 86'400'000), 1u);
  EXPECT_EQ(c.size(), 1u);
}

TEST(LocalCounters, ThreadsReservingWhileTheControlThreadSweepsLoseNothing) {
  // Workers reserve and refund on memoised counters (team) and on counters known only by name
  // (header users, refunded to zero so that the sweeper removes them under the workers' feet).
  LocalCounters c;
  const CounterName team("t:race:r");
  const int64_t now = 1'799'971'200'000;
  constexpr int kThreads = 4, kRounds = 20'000;
  std::atomic<bool> stop{false};
  std::atomic<size_t> swept{0};
  std::thread sweeper([&] {
    while (!stop.load()) swept += c.sweep(now);
  });
  std::vector<std::thread> workers;
  for (int w = 0; w < kThreads; ++w) {
    workers.emplace_back([&, w] {
      for (int i = 0; i < kRounds; ++i) {
        const std::string user = "t:race:r:u:" + std::to_string(w) + "-" + std::to_string(i % 7);
        Charge charges[2] = {Charge{team.name, Window::kMinute, Scope::kTeam, false, 1'000'000, 1},
                             Charge{user, Window::kMinute, Scope::kUser, false, 1'000'000, 3}};
        charges[0].local = &team.local;
        const Admission a = c.reserve(charges, now);
        ASSERT_TRUE(a.admitted);
        const int64_t back[2] = {0, -3};  // the user's share goes back: that counter is idle again
        c.adjust(charges, back, a.stamp_ms, now);
      }
    });
  }
  for (auto& t : workers) t.join();
  stop = true;
  sweeper.join();
  Charge total{team.name, Window::kMinute, Scope::kTeam, false, 1'000'000, 1};
  total.local = &team.local;
  EXPECT_EQ(c.used(total, now), int64_t{kThreads} * kRounds);
  EXPECT_GT(swept.load(), 0u);
  const size_t held = c.size();
  EXPECT_GE(held, 1u);
  EXPECT_EQ(c.sweep(now), held - 1);  // every user counter left is idle; the team's stays
  EXPECT_EQ(c.size(), 1u);
}

TEST(PendingAdjustments, SumsPerCounterAndSecondUnderTheCountersRedisKeys) {
  PendingAdjustments p;
  const int64_t t0 = 1'799'971'200'000;  // 2027-01-15 00:00:00 UTC
  const Charge charges[2] = {Charge{"k:a:t", Window::kMinute, Scope::kKey, true, 100, 10},
                             Charge{"t:b:d", Window::kDay, Scope::kDaily, true, 1000, 10}};
  const int64_t first[2] = {-4, -4}, second[2] = {-3, 0}, third[2] = {4, 2};
  p.add(charges, first, t0, t0);
  p.add(charges, second, t0 + 500, t0 + 500);     // the same second: summed
  p.add(charges, third, t0 + 1'000, t0 + 1'000);  // the next second: apart (the minute -4+4 too)
  EXPECT_EQ(p.size(), 4u);
  std::vector<ScriptCall> calls;
  p.take("call-1", calls);
  EXPECT_EQ(p.size(), 0u);
  ASSERT_EQ(calls.size(), 1u);  // no hash tags: one call
  const auto& keys = calls[0].keys;
  const auto& args = calls[0].args;
  ASSERT_EQ(args.size(), 1 + 3 * keys.size());
  EXPECT_EQ(args[0], "call-1");
  std::map<std::string, std::string> got;  // key|window|second -> delta
  for (size_t i = 0; i < keys.size(); ++i) {
    got[keys[i] + "|" + args[1 + 3 * i] + "|" + args[2 + 3 * i]] = args[3 + 3 * i];
  }
  const std::string minute_key = redisCounterKey(charges[0], t0);
  const std::string day_key = redisCounterKey(charges[1], t0);
  EXPECT_EQ(minute_key, "infera:rl:k:a:t");
  EXPECT_EQ(day_key, "infera:rl:t:b:d:20270115");
  const std::string s0 = std::to_string(t0 / 1000), s1 = std::to_string(t0 / 1000 + 1);
  EXPECT_EQ(got, (std::map<std::string, std::string>{{minute_key + "|0|" + s0, "-7"},
                                                     {day_key + "|1|" + s0, "-4"},
                                                     {minute_key + "|0|" + s1, "4"},
                                                     {day_key + "|1|" + s1, "2"}}));
  // Sums that came back to zero are not sent; nothing at all makes no call.
  const int64_t up[2] = {5, 0}, down[2] = {-5, 0};
  p.add(charges, up, t0, t0);
  p.add(charges, down, t0, t0);
  std::vector<ScriptCall> none;
  p.take("call-2", none);
  EXPECT_TRUE(none.empty());
}

// On a Redis Cluster counters carry hash tags: a team's counters are named in its slot, a model's
// in its own, and the adjustments go out as one call per tag, each with every key in one slot.
TEST(PendingAdjustments, OneCallPerHashTagWithEveryKeyInItsSlot) {
  PendingAdjustments p;
  const int64_t t0 = 1'799'971'200'000;  // 2027-01-15 00:00:00 UTC
  Charge charges[3] = {Charge{"k:a:t", Window::kMinute, Scope::kKey, true, 100, 10},
                       Charge{"t:b:d", Window::kDay, Scope::kDaily, true, 1000, 10},
                       Charge{"m:x:t", Window::kMinute, Scope::kModel, true, 1000, 10}};
  charges[0].tag = charges[1].tag = "t:b";
  charges[2].tag = "m:x";
  EXPECT_EQ(redisCounterKey(charges[0], t0), "infera:rl:{t:b}k:a:t");
  EXPECT_EQ(redisCounterKey(charges[1], t0), "infera:rl:{t:b}t:b:d:20270115");
  EXPECT_EQ(redisCounterKey(charges[2], t0), "infera:rl:{m:x}m:x:t");
  const int64_t delta[3] = {-4, -3, -2};
  p.add(charges, delta, t0, t0);
  std::vector<ScriptCall> calls;
  p.take("call-9", calls);
  ASSERT_EQ(calls.size(), 2u);
  std::map<std::string, std::set<std::string>> keys_by_slot_of_first;
  std::set<std::string> ids;  // one per call: tags may share a slot (and so a marker's hash)
  size_t keys = 0;
  for (const ScriptCall& c : calls) {
    ASSERT_FALSE(c.keys.empty());
    ASSERT_EQ(c.args.size(), 1 + 3 * c.keys.size());
    EXPECT_EQ(c.args[0].rfind("call-9", 0), 0u) << c.args[0];
    ids.insert(c.args[0]);
    for (const auto& k : c.keys) {
      EXPECT_EQ(store::redisKeySlot(k), store::redisKeySlot(c.keys[0])) << k;
      keys_by_slot_of_first[c.keys[0]].insert(k);
      ++keys;
    }
  }
  EXPECT_EQ(keys, 3u);
  EXPECT_EQ(ids.size(), calls.size());
  EXPECT_EQ(keys_by_slot_of_first.size(), 2u);
  // The two tags are in different slots (so the split was needed).
  EXPECT_NE(store::redisKeySlot("{t:b}"), store::redisKeySlot("{m:x}"));
}

// What a PendingAdjustments sends: "key|window|second" -> delta.
std::map<std::string, std::string> sentSums(PendingAdjustments& p) {
  std::vector<ScriptCall> calls;
  p.take("give-back", calls);
  std::map<std::string, std::string> got;
  for (const ScriptCall& c : calls) {
    for (size_t i = 0; i < c.keys.size(); ++i) {
      got[c.keys[i] + "|" + c.args[1 + 3 * i] + "|" + c.args[2 + 3 * i]] = c.args[3 + 3 * i];
    }
  }
  return got;
}

// A worker's leases, without Redis: admissions come from them only when every charge has room in
// a lease of the same Redis second; leases are sized by the worker's traffic and capped by what
// the counter had left; what a lease did not use goes back when it ends.
TEST(RedisLeases, AdmitOnlyWithRoomOnEveryChargeAndGiveBackWhatIsLeft) {
  RedisLeases leases(100, 1);
  const int64_t t0 =
      1'799'971'200'000;  // 2027-01-15 00:00:00 UTC (local and Redis clocks alike here)
  const Charge req{"k:a:r", Window::kMinute, Scope::kKey, false, 1'000, 1};
  const Charge tok{"k:a:t", Window::kMinute, Scope::kKey, true, 100'000, 50};
  const Charge day{"t:b:d", Window::kDay, Scope::kDaily, true, 1'000'000, 50};
  const Charge charges[3] = {req, tok, day};
  const std::span<const Charge> one(charges);
  const std::vector<std::span<const Charge>> batch{one};
  Admission a;
  EXPECT_FALSE(leases.take(charges, t0, a));
  // Four requests in this second, traffic enough for leases; but no answer yet tells how much a
  // counter has left, so none is asked for.
  std::vector<Charge> asked;
  for (int i = 0; i < 4; ++i) leases.plan(batch, t0 + i, asked);
  EXPECT_TRUE(asked.empty());
  // The call's answer: what each counter had left after it.
  Admission decided;
  decided.admitted = true;
  decided.remaining = {999, 99'950, 999'950};
  decided.reset_ms = {60'000, 60'000, 86'400'000};
  leases.observe(batch, std::span(&decided, 1), t0);
  leases.plan(batch, t0 + 10, asked);
  // Four times the call's amounts (more than 100 ms of the worker's five requests this second),
  // under the caps (1/8 of what was left).
  ASSERT_EQ(asked.size(), 3u);
  EXPECT_EQ(asked[0].counter, "k:a:r");
  EXPECT_EQ(asked[0].amount, 4);
  EXPECT_EQ(asked[1].amount, 200);
  EXPECT_EQ(asked[2].amount, 200);
  // Redis grants them in its second t0/1000, at t0 + 300 by its clock: usable until that second
  // ends.
  PendingAdjustments back;
  for (size_t i = 0; i < asked.size(); ++i) {
    Admission g;
    g.admitted = true;
    g.stamp_ms = t0 + 300;
    g.key_ms = t0 + 10;
    g.remaining = {charges[i].limit - 1'000};  // the counter's use: 1,000 with the lease
    g.reset_ms = {59'000};
    leases.grant(asked[i], g, t0 + 10, back);
  }
  EXPECT_EQ(leases.live(), 3u);
  EXPECT_EQ(back.size(), 0u);
  // Four requests fit in the request lease (and in 200 tokens).
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(leases.take(charges, t0 + 20 + i, a)) << i;
    EXPECT_TRUE(a.admitted);
    EXPECT_EQ(a.stamp_ms, t0 + 300);
    EXPECT_EQ(a.key_ms, t0 + 10);
    ASSERT_EQ(a.remaining.size(), 3u);
    // Redis's 1,000 less what the lease still holds unused.
    EXPECT_EQ(a.remaining[0], 1'000 - (1'000 - (3 - i)));
    EXPECT_EQ(a.remaining[1], 100'000 - (1'000 - (200 - 50 * (i + 1))));
    EXPECT_EQ(a.reset_ms[0], 59'000 - (10 + i));
  }
  // The fifth finds the request lease used up: all or nothing.
  EXPECT_FALSE(leases.take(charges, t0 + 30, a));
  // A refund of a reservation made in the lease's second goes back into it; one of another second
  // does not.
  EXPECT_EQ(leases.giveBack(tok, 30, t0 + 999, t0 + 10, t0 + 40), 30);
  EXPECT_EQ(leases.giveBack(tok, 30, t0 - 1, t0 + 10, t0 + 40), 0);
  EXPECT_EQ(leases.giveBack(req, 1, t0 + 500, t0 + 10, t0 + 40), 1);
  // Room for a request again, but 30 tokens are not 50: nothing taken.
  EXPECT_FALSE(leases.take(charges, t0 + 50, a));
  // At the end of Redis's second (700 ms after the sending: the second had 700 ms left) each lease
  // gives back what it did not use: a request and 30 tokens on the minute counters, nothing on the
  // day's.
  EXPECT_EQ(leases.expire(t0 + 709, back), t0 + 710);
  EXPECT_EQ(leases.live(), 3u);
  EXPECT_FALSE(leases.take(charges, t0 + 710, a));
  EXPECT_EQ(leases.expire(t0 + 710, back), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(leases.live(), 0u);
  const auto got = sentSums(back);
  const std::string s0 = std::to_string(t0 / 1000);
  EXPECT_EQ(got, (std::map<std::string, std::string>{{"infera:rl:k:a:r|0|" + s0, "-1"},
                                                     {"infera:rl:k:a:t|0|" + s0, "-30"}}));
}

// Everything a lease held goes back exactly once: a merged grant keeps the later end, a grant in a
// newer second ends the old lease, a decision it cannot use goes back at once, a lease of a counter
// whose window changed ends, the worker's stop ends the rest. Refunds go in only up to what was
// granted; a counter charged twice by one request needs room for both; headers follow the latest
// answer and never exceed the limit.
TEST(RedisLeases, EveryLeaseEndsOnceWithWhatItHadLeftGivenBack) {
  RedisLeases leases(100, 1);
  const int64_t t0 = 1'799'971'200'000;  // 2027-01-15 00:00:00 UTC
  PendingAdjustments back;
  auto decision = [](int64_t stamp_ms, int64_t remaining) {
    Admission g;
    g.admitted = true;
    g.stamp_ms = stamp_ms;
    g.key_ms = 1'799'971'200'010;
    g.remaining = {remaining};
    g.reset_ms = {59'000};
    return g;
  };
  Charge tok{"k:a:t", Window::kMinute, Scope::kKey, true, 100'000, 100};
  EXPECT_EQ(leases.grant(tok, decision(t0 + 300, 99'000), t0 + 10, back), t0 + 710);
  tok.amount = 50;  // the same second, from a call sent earlier: merged, the later end kept
  EXPECT_EQ(leases.grant(tok, decision(t0 + 400, 98'950), t0 + 5, back), t0 + 710);
  const Charge day{"t:b:bt", Window::kDay, Scope::kBudgetTokens, true, 1'000'000, 500};
  leases.grant(day, decision(t0 + 300, 990'000), t0 + 10, back);
  EXPECT_EQ(leases.live(), 2u);
  // The budget's period becomes a month: its day lease ends.
  const Charge month{"t:b:bt", Window::kMonth, Scope::kBudgetTokens, true, 1'000'000, 10};
  std::vector<Charge> asked;
  leases.plan(std::vector<std::span<const Charge>>{std::span(&month, 1)}, t0 + 20, asked);
  EXPECT_EQ(leases.expire(t0 + 20, back), t0 + 710);
  EXPECT_EQ(leases.live(), 1u);
  // 2 x 60 of 150 fit; 2 x 20 of the 30 left do not.
  const Charge twice60[2] = {{"k:a:t", Window::kMinute, Scope::kKey, true, 100'000, 60},
                             {"k:a:t", Window::kMinute, Scope::kKey, true, 100'000, 60}};
  const Charge twice20[2] = {{"k:a:t", Window::kMinute, Scope::kKey, true, 100'000, 20},
                             {"k:a:t", Window::kMinute, Scope::kKey, true, 100'000, 20}};
  Admission a;
  EXPECT_TRUE(leases.take(twice60, t0 + 30, a));
  EXPECT_FALSE(leases.take(twice20, t0 + 31, a));
  // A refund of 200 goes in only up to the 150 granted (30 left: 120); the rest is Redis's.
  EXPECT_EQ(leases.giveBack(tok, 200, t0 + 500, t0 + 10, t0 + 40), 120);
  // An answer: the counter had 99,900 left (the lease in it) and capacity returns in 30 s. With 140
  // of the lease unused after the next request, 100,040 would be left: the limit is the most.
  tok.amount = 10;
  Admission answer;
  answer.admitted = true;
  answer.remaining = {99'900};
  answer.reset_ms = {30'000};
  leases.observe(std::vector<std::span<const Charge>>{std::span(&tok, 1)}, std::span(&answer, 1),
                 t0 + 50);
  ASSERT_TRUE(leases.take(std::span(&tok, 1), t0 + 60, a));
  EXPECT_EQ(a.remaining[0], 100'000);
  EXPECT_EQ(a.reset_ms[0], 29'990);
  // A decision it cannot use (no figures) goes back at once.
  Admission odd = decision(t0 + 300, 0);
  odd.remaining.clear();
  const Charge other{"k:x:t", Window::kMinute, Scope::kKey, true, 100'000, 33};
  EXPECT_EQ(leases.grant(other, odd, t0 + 10, back), std::numeric_limits<int64_t>::max());
  // A lease of the next second replaces the one with 140 left.
  tok.amount = 70;
  EXPECT_EQ(leases.grant(tok, decision(t0 + 1'200, 98'000), t0 + 1'000, back), t0 + 1'800);
  // The worker stops: the new lease's 70.
  leases.endAll(back);
  EXPECT_EQ(leases.live(), 0u);
  const auto got = sentSums(back);
  const std::string s0 = std::to_string(t0 / 1000), s1 = std::to_string(t0 / 1000 + 1);
  EXPECT_EQ(got, (std::map<std::string, std::string>{{"infera:rl:t:b:bt:20270115|1|" + s0, "-500"},
                                                     {"infera:rl:k:a:t|0|" + s0, "-140"},
                                                     {"infera:rl:k:x:t|0|" + s0, "-33"},
                                                     {"infera:rl:k:a:t|0|" + s1, "-70"}}));
}

TEST(RedisLeases, SizedByTrafficCappedByWhatIsLeftAndNoneNearALimit) {
  const int64_t t0 = 1'799'971'200'000;
  const Charge tok{"k:a:t", Window::kMinute, Scope::kKey, true, 100'000, 10};
  const std::vector<Charge> one_request{tok};
  const std::vector<std::span<const Charge>> batch{std::span<const Charge>(one_request)};
  auto answer = [&](RedisLeases& l, int64_t left, int64_t now) {
    Admission d;
    d.admitted = true;
    d.remaining = {left};
    d.reset_ms = {60'000};
    l.observe(batch, std::span(&d, 1), now);
  };
  // A second of 2,000 tokens through the worker (200 requests, which ask for nothing: no answer
  // yet), then an answer saying `left` and the next call's plan.
  auto afterBusySecond = [&](RedisLeases& l, int64_t left) {
    std::vector<Charge> asked;
    for (int i = 0; i < 200; ++i) l.plan(batch, t0 + i, asked);
    EXPECT_TRUE(asked.empty());
    answer(l, left, t0 + 1'000);
    l.plan(batch, t0 + 1'000, asked);
    return asked;
  };
  {
    // A 100 ms lease is 200 of those tokens.
    RedisLeases l(100, 1);
    const std::vector<Charge> asked = afterBusySecond(l, 90'000);
    ASSERT_EQ(asked.size(), 1u);
    EXPECT_EQ(asked[0].amount, 200);
  }
  {
    // The cap: 1/(8 x holders) of what the counter had left, 4 holders.
    RedisLeases l(100, 4);
    std::vector<Charge> asked = afterBusySecond(l, 3'210);
    ASSERT_EQ(asked.size(), 1u);
    EXPECT_EQ(asked[0].amount, (3'210 - 10) / 32);
    // Nearer the limit a lease would not cover two requests: none.
    answer(l, 600, t0 + 1'001);
    asked.clear();
    l.plan(batch, t0 + 1'001, asked);
    EXPECT_TRUE(asked.empty());
    // An answer older than a second is no guide (traffic enough this second).
    answer(l, 90'000, t0 + 1'002);
    asked.clear();
    for (int i = 0; i < 10; ++i) l.plan(batch, t0 + 2'003 + i, asked);
    EXPECT_TRUE(asked.empty());
    // A fresh one is.
    answer(l, 90'000, t0 + 2'013);
    l.plan(batch, t0 + 2'014, asked);
    EXPECT_EQ(asked.size(), 1u);
  }
  {
    // A counter this worker sends a request now and then gets no lease.
    RedisLeases l(100, 1);
    std::vector<Charge> asked;
    for (int i = 0; i < 3; ++i) {
      answer(l, 90'000, t0 + 1'000 * i);
      l.plan(batch, t0 + 1'000 * i, asked);
    }
    EXPECT_TRUE(asked.empty());
  }
  {
    // Counters named per request (users named by a header) are forgotten once idle for seconds.
    RedisLeases l(100, 1);
    std::vector<std::string> names;
    for (int i = 0; i < 100; ++i) names.push_back("t:a:u:user-" + std::to_string(i) + ":t");
    std::vector<Charge> asked;
    for (const std::string& n : names) {
      const Charge c{n, Window::kMinute, Scope::kUser, true, 100'000, 10};
      l.plan(std::vector<std::span<const Charge>>{std::span(&c, 1)}, t0, asked);
    }
    EXPECT_EQ(l.size(), 100u);
    PendingAdjustments back;
    l.expire(t0 + 1'000, back);
    EXPECT_EQ(l.size(), 100u);
    l.expire(t0 + 10'000, back);
    EXPECT_EQ(l.size(), 0u);
    EXPECT_EQ(back.size(), 0u);
  }
  {
    // Off: nothing asked, nothing taken.
    RedisLeases l(0, 1);
    answer(l, 90'000, t0);
    std::vector<Charge> asked;
    l.plan(batch, t0, asked);
    EXPECT_TRUE(asked.empty());
    Admission a;
    EXPECT_FALSE(l.take(one_request, t0, a));
  }
}

TEST(ResetDuration, OpenAiStyle) {
  EXPECT_EQ(formatResetDuration(0), "0s");
  EXPECT_EQ(formatResetDuration(250), "250ms");
  EXPECT_EQ(formatResetDuration(1500), "1.5s");
  EXPECT_EQ(formatResetDuration(60'000), "1m0s");
  EXPECT_EQ(formatResetDuration(3'723'000), "1h2m3s");
}

TEST(RedisScripts, ACallSendsEachCounterAndShapeOnceAndFewNumbersPerAdmission) {
  Charge first[3] = {Charge{"k:a:r", Window::kMinute, Scope::kKey, false, 10, 1},
                     Charge{"k:a:t", Window::kMinute, Scope::kKey, true, 100, 50},
                     Charge{"t:b:d", Window::kDay, Scope::kDaily, true, 1000, 50}};
  Charge second[3] = {Charge{"k:a:r", Window::kMinute, Scope::kKey, false, 10, 1},
                      Charge{"k:a:t", Window::kMinute, Scope::kKey, true, 100, 40},
                      Charge{"t:b:d", Window::kDay, Scope::kDaily, true, 1000, 40}};
  Charge third[1] = {Charge{"t:b:d", Window::kDay, Scope::kDaily, true, 1000, 50}};
  first[2].seed = second[2].seed = third[0].seed =
      321;  // the store's use, if Redis lost the counter
  first[2].seed_period = second[2].seed_period = third[0].seed_period =
      periodId(Window::kDay, 1'799'971'200'000);
  const std::span<const Charge> admissions[3] = {first, second, third};
  ReserveCall call;
  buildReserveCall(admissions, 1'799'971'200'000, "w1-7", call);
  ASSERT_EQ(call.keys.size(), 3u);
  EXPECT_EQ(call.keys[0], "infera:rl:k:a:r");
  EXPECT_EQ(call.keys[2], "infera:rl:t:b:d:20270115");
  const std::vector<std::string> expected = {
      "w1-7",                       // the call's id
      "3",                          // distinct counters
      "0", "10", "61", "2", "0",    // k:a:r: minute window, limit, ttl, sum, seed
      "0", "100", "61", "90", "0",  // k:a:t: 50 + 40
      "1", "1000", std::to_string(86'400 + 86'400), "140",
      "321",  // t:b:d: day, ttl to the day's end + 1 day
      "3",    // admissions
      // packed: 2 shapes — 3 charges, 2 slots, (counter, slot) x3; 1 charge, 1 slot: counter 3
      // slot 1 — then per admission its shape and amounts: (1: 1, 50), (1: 1, 40), (2: 50)
      "2 3 2 1 1 2 2 3 2 1 1 3 1 1 1 50 1 1 40 2 50"};
  EXPECT_EQ(call.args, expected);
  EXPECT_EQ(reserveScript().sha1.size(), 40u);
  // A seed of the day before (a request built before midnight, sent after it) is not sent.
  ReserveCall next_day;
  buildReserveCall(admissions, 1'799'971'200'000 + 86'400'000, "w1-8", next_day);
  ASSERT_EQ(next_day.args.size(), expected.size());
  EXPECT_EQ(next_day.args[16], "0");

  // The reply: now, per counter (use, oldest second), per admission its verdict. Replayed in order:
  // the first admission sees the counters' starting use, the second sees the first's reservation,
  // the third (refused at its only charge) sees both.
  using T = store::RedisReply::Type;
  store::RedisReply reply;
  reply.type = T::kArray;
  for (int64_t v : {int64_t{1'799'971'230'500}, int64_t{3}, int64_t{1'799'971'200}, int64_t{0},
                    int64_t{0}, int64_t{870}, int64_t{0}, int64_t{0}, int64_t{0}, int64_t{1}}) {
    store::RedisReply e;
    e.type = T::kInteger;
    e.integer = v;
    reply.elements.push_back(e);
  }
  auto decided = parseReserveReply(reply, admissions, call);
  ASSERT_TRUE(decided.ok()) << decided.status().message();
  ASSERT_EQ(decided->size(), 3u);
  const Admission& a = (*decided)[0];
  ASSERT_TRUE(a.admitted);
  EXPECT_EQ(a.remaining, (std::vector<int64_t>{6, 50, 80}));
  EXPECT_EQ(a.reset_ms[0], 29'500);  // oldest live second 1'799'971'200 leaves the window at +60 s
  EXPECT_EQ(a.reset_ms[1], 59'500);  // was empty: its only bucket, now's second, leaves in 59.5 s
  const Admission& b = (*decided)[1];
  ASSERT_TRUE(b.admitted);
  EXPECT_EQ(b.remaining, (std::vector<int64_t>{5, 10, 40}));
  const Admission& c = (*decided)[2];
  EXPECT_FALSE(c.admitted);
  EXPECT_EQ(c.refused, 0);
  EXPECT_EQ(c.used, 960);
  EXPECT_EQ(c.retry_after_ms, 86'400'000 - 30'500);  // the day's end

  reply.elements.pop_back();
  EXPECT_FALSE(parseReserveReply(reply, admissions, call).ok());

  // When every counter has room for its sum the script answers -1 for the whole call: all
  // admitted, replayed in order as above.
  reply.elements.resize(8);
  reply.elements[5].integer = 800;  // the day counter has room for all three (800 + 140 <= 1000)
  reply.elements[7].integer = -1;
  auto all = parseReserveReply(reply, admissions, call);
  ASSERT_TRUE(all.ok()) << all.status().message();
  for (const Admission& ad : *all) EXPECT_TRUE(ad.admitted);
  EXPECT_EQ((*all)[1].remaining, (std::vector<int64_t>{5, 10, 1000 - 800 - 50 - 40}));
  EXPECT_EQ((*all)[2].remaining, (std::vector<int64_t>{1000 - 800 - 50 - 40 - 50}));
  reply.elements[7].integer = -2;
  EXPECT_FALSE(parseReserveReply(reply, admissions, call).ok());
}

TEST(ResponseCache, LruWithinBytesAndTtl) {
  ResponseCache cache(1000, 400);
  cache.put("a", {std::string(300, 'a'), "application/json", 1, 2, 10'000});
  cache.put("b", {std::string(300, 'b'), "application/json", 1, 2, 10'000});
  ASSERT_TRUE(cache.get("a", 0).has_value());  // a is now most recent
  cache.put("c", {std::string(300, 'c'), "application/json", 1, 2, 10'000});
  cache.put("d", {std::string(300, 'd'), "application/json", 1, 2, 10'000});  // evicts b (LRU)
  EXPECT_FALSE(cache.get("b", 0).has_value());
  EXPECT_TRUE(cache.get("a", 0).has_value());
  EXPECT_LE(cache.bytes(), 1000);
  cache.put("big",
            {std::string(500, 'x'), "application/json", 1, 2, 10'000});  // above the entry bound
  EXPECT_FALSE(cache.get("big", 0).has_value());
  EXPECT_FALSE(cache.get("a", 10'000).has_value());  // expired
}

// (How a body becomes its canonical form is the gateway's one reading: request_scan_test.cc.)
TEST(ResponseCache, KeyIsPerModelAndPerTeam) {
  const std::string canon = R"({"messages":[{"content":"x","role":"user"}],"temperature":0})";
  EXPECT_EQ(cacheKey("m", canon), cacheKey("m", canon));
  EXPECT_NE(cacheKey("m", canon), cacheKey("other", canon));
  EXPECT_NE(cacheKey("m", canon, "team-a"), cacheKey("m", canon, "team-b"));
  EXPECT_NE(cacheKey("m", canon, "team-a"), cacheKey("m", canon));
}

class MetaStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/infera-meta-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    auto s = MetaStore::open("sqlite:" + dir_ + "/meta.db");
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  std::unique_ptr<MetaStore> store_;
};

// Not inlined: g++ 12 reports a false -Wrestrict on the inlined string assignments.
[[gnu::noinline]] UsageRecord usageAt(int64_t ts_ms, std::string team, std::string key,
                                      int64_t completion, int status = 200) {
  UsageRecord r;
  r.ts_ms = ts_ms;
  r.request_id = std::string("r").append(std::to_string(ts_ms));
  r.team = std::move(team);
  r.key_id = std::move(key);
  r.model = "m";
  r.prompt_tokens = 10;
  r.completion_tokens = completion;
  r.latency_ms = static_cast<double>(completion);
  r.status = status;
  return r;
}

int64_t rowCount(MetaStore& s, const std::string& table) {
  auto r = s.db().exec("SELECT COUNT(*) FROM " + table);
  return r.ok() ? r->integer(0, 0) : -1;
}

TEST_F(MetaStoreTest, EveryChangeBumpsTheGenerationAndIsAudited) {
  const int64_t g0 = *store_->generation();
  TeamRecord t;
  t.name = "ml";
  t.tpm = 1000;
  ASSERT_TRUE(store_->createTeam(t, "alice").isOk());
  EXPECT_EQ(store_->createTeam(t, "alice").code(), StatusCode::kAlreadyExists);
  KeyRecord k;
  k.team = "ml";
  k.tpm = 500;
  auto token = store_->createKey(k, "secret", "alice");
  ASSERT_TRUE(token.ok()) << token.status().message();
  EXPECT_EQ(*store_->generation(), g0 + 2);  // the team and the key; not the refused duplicate
  KeyRecord too_much = k;
  too_much.tpm = 5000;
  EXPECT_EQ(store_->createKey(too_much, "secret", "alice").status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->revokeKey(k.id, "bob").isOk());
  EXPECT_EQ(store_->revokeKey(k.id, "bob").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->deleteTeam("ml", "bob").code(), StatusCode::kOk);
  auto audit = store_->audit(0, 100);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 4u);
  EXPECT_EQ((*audit)[0].action, "team.delete");
  EXPECT_EQ((*audit)[0].actor, "bob");
  EXPECT_EQ((*audit)[3].action, "team.create");
  EXPECT_EQ((*audit)[3].actor, "alice");
  // The snapshot leaves revoked keys out.
  auto snap = buildSnapshot(1, *store_->teams(), *store_->keys());
  EXPECT_TRUE(snap->by_id.empty());
}

// A rotation must not fail because the team's limits went down after the key was made: the new
// key is clamped to what the team allows now, and the audit row says what changed.
TEST_F(MetaStoreTest, RotationClampsTheNewKeyToTheTeamsLimitsNow) {
  TeamRecord t;
  t.name = "ml";
  t.rpm = 100;
  t.tpm = 1000;
  t.models = {"llama-*", "gpt-*"};
  ASSERT_TRUE(store_->createTeam(t, "alice").isOk());
  KeyRecord k;
  k.team = "ml";
  k.rpm = 80;
  k.tpm = 900;
  k.models = {"llama-*", "gpt-*"};
  ASSERT_TRUE(store_->createKey(k, "secret", "alice").ok());
  t.rpm = 50;
  t.models = {"llama-*"};
  ASSERT_TRUE(store_->updateTeam(t, "alice").isOk());
  KeyRecord rotated;
  auto token = store_->rotateKey(k.id, 60'000, "secret", "bob", rotated);
  ASSERT_TRUE(token.ok()) << token.status().message();
  EXPECT_EQ(rotated.rpm, 50);
  EXPECT_EQ(rotated.tpm, 900);  // within the team's 1000: unchanged
  EXPECT_EQ(rotated.models, (std::vector<std::string>{"llama-*"}));
  auto stored = store_->key(rotated.id);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->rpm, 50);
  auto audit = store_->audit(0, 1);
  ASSERT_TRUE(audit.ok() && !audit->empty());
  EXPECT_EQ((*audit)[0].action, "key.rotate");
  EXPECT_NE((*audit)[0].detail.find("rpm 80 -> 50"), std::string::npos) << (*audit)[0].detail;
  // The old key, in its grace period, is not rotated again (its successor would inherit the
  // grace period's end); an expired key is not rotated at all.
  KeyRecord twice;
  const auto second = store_->rotateKey(k.id, 60'000, "secret", "bob", twice);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(rotated.id), std::string::npos)
      << second.status().message();
  KeyRecord short_lived;
  short_lived.team = "ml";
  short_lived.expires_ms = infera::SystemClock::instance().unixMillis() - 1;
  ASSERT_TRUE(store_->createKey(short_lived, "secret", "alice").ok());
  KeyRecord from_expired;
  EXPECT_EQ(store_->rotateKey(short_lived.id, 0, "secret", "bob", from_expired).status().code(),
            StatusCode::kFailedPrecondition);
  // A key none of whose models the team allows any more is not widened to all of the team's.
  t.models = {"mistral-*"};
  ASSERT_TRUE(store_->updateTeam(t, "alice").isOk());
  KeyRecord again;
  EXPECT_EQ(store_->rotateKey(rotated.id, 0, "secret", "bob", again).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(MetaStoreTest, UsageRollsUpByMinuteHourAndDay) {
  std::vector<UsageRecord> batch;
  const int64_t base = 1'800'000'000'000 - (1'800'000'000'000 % 86'400'000);  // a UTC midnight
  for (int i = 0; i < 120; ++i) {
    UsageRecord r;
    r.ts_ms = base + i * 30'000;  // one every 30 s for an hour
    r.request_id = std::string("r").append(std::to_string(i));
    r.team = i % 2 ? "a" : "b";
    r.model = "m";
    r.prompt_tokens = 10;
    r.completion_tokens = i;
    r.status = 200;
    batch.push_back(r);
  }
  ASSERT_TRUE(store_->insertUsage(batch).isOk());
  UsageQuery q;
  q.from_ms = base;
  q.to_ms = base + 86'400'000;
  q.granularity = "minute";
  q.group_by = {};
  auto minute = nlohmann::json::parse(*store_->queryUsage(q));
  ASSERT_EQ(minute.size(), 60u);
  EXPECT_EQ(minute[0]["requests"], 2);
  EXPECT_EQ(minute[0]["completion_tokens"], 0 + 1);
  q.granularity = "day";
  q.group_by = {"team"};
  auto day = nlohmann::json::parse(*store_->queryUsage(q));
  ASSERT_EQ(day.size(), 2u);
  EXPECT_EQ(day[0]["team"], "a");
  EXPECT_EQ(day[0]["requests"], 60);
  EXPECT_EQ(day[0]["prompt_tokens"], 600);
  EXPECT_EQ(day[0]["bucket_ms"], base);
  q.group_by = {"nonsense"};
  EXPECT_EQ(store_->queryUsage(q).status().code(), StatusCode::kInvalidArgument);
  auto since = store_->teamUsageSince("b", base);
  ASSERT_TRUE(since.ok());
  int64_t expect = 0;
  for (int i = 0; i < 120; i += 2) expect += 10 + i;
  EXPECT_EQ(since->first, expect);
}

TEST_F(MetaStoreTest, RollupsAddUpAcrossBatchesAndAgreeWithTheRecords) {
  const int64_t base = 1'800'000'000'000 - (1'800'000'000'000 % 3'600'000);  // on the hour
  // Three batches; the same minute and key appear in several (the roll-up row is added to).
  for (int b = 0; b < 3; ++b) {
    std::vector<UsageRecord> batch;
    for (int i = 0; i < 50; ++i) {
      const int64_t ts = base + (b * 50 + i) * 1'000;  // one a second: minutes 0, 1 and 2
      batch.push_back(
          usageAt(ts, i % 3 ? "a" : "b", i % 2 ? "k1" : "k2", i, i % 10 == 0 ? 500 : 200));
    }
    ASSERT_TRUE(store_->insertUsage(batch).isOk());
  }
  EXPECT_EQ(rowCount(*store_, "infera_usage"), 150);
  EXPECT_EQ(rowCount(*store_, "infera_usage_minute"), 3 * 2 * 2);  // minutes x teams x keys
  // What the queries read (roll-ups) equals the raw records' own sums.
  auto raw = store_->db().exec(
      "SELECT team, key_id, COUNT(*), SUM(completion_tokens), SUM(CASE WHEN status >= 400 THEN 1 "
      "ELSE 0 END), "
      "AVG(latency_ms) FROM infera_usage GROUP BY team, key_id ORDER BY team, key_id");
  ASSERT_TRUE(raw.ok());
  UsageQuery q;
  q.granularity = "total";
  q.group_by = {"team", "key"};
  q.to_ms = base + 3'600'000;
  auto rows = nlohmann::json::parse(*store_->queryUsage(q));
  ASSERT_EQ(rows.size(), raw->rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["team"], raw->text(i, 0));
    EXPECT_EQ(rows[i]["key"], raw->text(i, 1));
    EXPECT_EQ(rows[i]["requests"], raw->integer(i, 2));
    EXPECT_EQ(rows[i]["completion_tokens"], raw->integer(i, 3));
    EXPECT_EQ(rows[i]["errors"], raw->integer(i, 4));
    EXPECT_NEAR(rows[i]["avg_latency_ms"].get<double>(), raw->real(i, 5), 1e-9);
  }
  // A range resolves to whole minutes: from inside minute 1 counts all of minutes 1 and 2.
  q.group_by.clear();
  q.from_ms = base + 60'000 + 30'000;
  q.to_ms = base + 3 * 60'000;
  auto later = nlohmann::json::parse(*store_->queryUsage(q));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0]["requests"], 90);
}

TEST_F(MetaStoreTest, BatchesOfEverySizeWriteEveryRecordAndRollup) {
  // Records go in statements of 32 rows and then powers of two: sizes around those edges, with as
  // many distinct roll-up rows as records (each record its own key).
  const int64_t base = 1'800'000'000'000 - (1'800'000'000'000 % 3'600'000);
  int64_t written = 0, tokens = 0;
  for (const int size : {1, 2, 3, 31, 32, 33, 63, 64, 65, 200}) {
    std::vector<UsageRecord> batch;
    for (int i = 0; i < size; ++i) {
      const int64_t n = written + i;
      batch.push_back(usageAt(base + n, "t", std::string("k").append(std::to_string(n)), n));
      tokens += n;
    }
    ASSERT_TRUE(store_->insertUsage(batch).isOk()) << size;
    written += size;
    ASSERT_EQ(rowCount(*store_, "infera_usage"), written) << size;
    ASSERT_EQ(rowCount(*store_, "infera_usage_minute"), written) << size;
  }
  for (const char* table : {"infera_usage", "infera_usage_minute"}) {
    auto sum = store_->db().exec(std::string("SELECT SUM(completion_tokens) FROM ") + table);
    ASSERT_TRUE(sum.ok());
    EXPECT_EQ(sum->integer(0, 0), tokens) << table;
  }
}

TEST_F(MetaStoreTest, AStoreWithoutRollupsGetsThemFromItsRecordsOnce) {
  // A store as the gateway wrote it before roll-ups: raw records and the old team index only.
  const std::string path = dir_ + "/old.db";
  {
    auto db = store::SqlDb::open("sqlite:" + path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)
                    ->execScript(R"sql(
CREATE TABLE infera_meta (k TEXT PRIMARY KEY, v BIGINT NOT NULL);
INSERT INTO infera_meta (k, v) VALUES ('generation', 7);
CREATE TABLE infera_usage (
  ts_ms BIGINT NOT NULL, request_id TEXT NOT NULL, key_id TEXT NOT NULL, team TEXT NOT NULL,
  user_id TEXT NOT NULL, model TEXT NOT NULL, deployment TEXT NOT NULL, region TEXT NOT NULL,
  prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL, latency_ms DOUBLE PRECISION NOT NULL,
  ttft_ms DOUBLE PRECISION NOT NULL, status BIGINT NOT NULL, cached BIGINT NOT NULL, stream BIGINT NOT NULL,
  aborted BIGINT NOT NULL, estimated BIGINT NOT NULL, cost_usd DOUBLE PRECISION NOT NULL);
CREATE INDEX infera_usage_team_ts ON infera_usage (team, ts_ms);
INSERT INTO infera_usage VALUES (60000, 'a', 'k', 't', '', 'm', 'd', 'r', 5, 7, 1.0, 0, 200, 0, 0, 0, 0, 0.5);
INSERT INTO infera_usage VALUES (61000, 'b', 'k', 't', '', 'm', 'd', 'r', 5, 3, 3.0, 0, 429, 0, 0, 0, 0, 0.25);
INSERT INTO infera_usage VALUES (180000, 'c', 'k', 't', '', 'm', 'd', 'r', 1, 1, 1.0, 0, 200, 1, 0, 0, 0, 0)
)sql")
                    .isOk());
  }
  for (int open = 0; open < 2; ++open) {  // the second open must not add them again
    auto s = MetaStore::open("sqlite:" + path);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(*(*s)->generation(), 7);
    EXPECT_EQ(rowCount(**s, "infera_usage_minute"), 2);
    auto since = (*s)->teamUsageSince("t", 0);
    ASSERT_TRUE(since.ok());
    EXPECT_EQ(since->first, 5 + 7 + 5 + 3 + 1 + 1);
    EXPECT_DOUBLE_EQ(since->second, 0.75);
    auto idx =
        (*s)->db().exec("SELECT COUNT(*) FROM sqlite_master WHERE name = 'infera_usage_team_ts'");
    ASSERT_TRUE(idx.ok());
    EXPECT_EQ(idx->integer(0, 0), 0);  // dropped: the roll-ups serve the per-team reads
  }
}

TEST_F(MetaStoreTest, RetentionDeletesOldRecordsAndRollupsAnHourAtATime) {
  const int64_t day = 86'400'000, now = 1'800'000'000'000;
  std::vector<UsageRecord> batch;
  for (int h = 0; h < 72; ++h)
    batch.push_back(usageAt(now - h * 3'600'000 - 1, "t", "k", 1));  // 3 days, hourly
  ASSERT_TRUE(store_->insertUsage(batch).isOk());
  // Records older than a day go (an hour of them per call); roll-ups are kept.
  int calls = 0;
  int64_t removed = 0;
  for (;;) {
    auto r = store_->pruneUsage(now - day, 0);
    ASSERT_TRUE(r.ok()) << r.status().message();
    if (*r == 0) break;
    removed += *r;
    ++calls;
  }
  EXPECT_EQ(removed, 72 - 24);
  EXPECT_EQ(calls, 72 - 24);  // one hour of records (here one record) per call
  EXPECT_EQ(rowCount(*store_, "infera_usage"), 24);
  EXPECT_EQ(rowCount(*store_, "infera_usage_minute"), 72);
  // Roll-ups older than two days go too.
  while (*store_->pruneUsage(0, now - 2 * day) > 0) {
  }
  EXPECT_EQ(rowCount(*store_, "infera_usage_minute"), 48);
  auto since = store_->teamUsageSince("t", 0);
  ASSERT_TRUE(since.ok());
  EXPECT_EQ(since->first, 48 * 11);
}

}  // namespace
}  // namespace infera::access
