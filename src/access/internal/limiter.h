#pragma once
// Access internals: request/token/cost counters for admission control.
//
// A request reserves its worst case on every counter that applies (key, team, model, daily quota,
// budget) in one atomic step: all or nothing. When the response ends the reservation is adjusted
// to what was used. Per-minute limits are rolling 60 s windows of 1 s buckets, so no 60 s interval
// ever admits more than the limit (plus what reconciliation adds beyond a reservation); day and
// month quotas are calendar (UTC) periods.
//
// Counters live in this process (LocalCounters, shared by all workers) or in Redis (the reserve
// script decides the admissions a worker queued while its previous call was out, and grants leases,
// see RedisLeases), with LocalCounters as the fallback while Redis is down.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "access/limits.h"
#include "core/text.h"
#include "net/asio.h"
#include "store/redis.h"

namespace infera::access {

enum class Window : uint8_t { kMinute, kDay, kMonth };

enum class Scope : uint8_t {
  kKey,
  kTeam,
  kUser,
  kModel,
  kDeployment,
  kDaily,
  kBudgetTokens,
  kBudgetCost,
  kUserDaily,
  kUserBudgetTokens,
  kUserBudgetCost
};
std::string_view scopeName(Scope s);
// Counted in micro-USD rather than tokens.
inline bool isCostScope(Scope s) { return s == Scope::kBudgetCost || s == Scope::kUserBudgetCost; }
// A daily quota or a budget (refused as insufficient_quota).
inline bool isQuotaScope(Scope s) {
  return s == Scope::kDaily || s == Scope::kBudgetTokens || s == Scope::kBudgetCost ||
         s == Scope::kUserDaily || s == Scope::kUserBudgetTokens || s == Scope::kUserBudgetCost;
}

// UTC period ids: yyyymmdd for days, yyyymm for months.
int64_t periodId(Window w, int64_t unix_ms);
int64_t periodStartMs(Window w, int64_t unix_ms);  // day/month: when the period began
int64_t periodEndMs(Window w, int64_t unix_ms);

struct Charge {
  // e.g. "k:<id>:t"; the window's period is appended for day/month. Points into the key/team
  // snapshot or the route table, which the request holds while it runs.
  std::string_view counter;
  Window window = Window::kMinute;
  Scope scope = Scope::kKey;
  bool tokens = false;  // token (or cost) counter rather than a request counter
  int64_t limit = 0;    // > 0
  int64_t amount = 0;   // reserved
  // The snapshot's or route table's memo of the in-process counter (null for names built per
  // request: those are looked up by name each time, and removed once idle).
  std::atomic<LocalCounterEntry*>* local = nullptr;
  // Redis, day/month counters: where the counter starts if Redis does not hold it (Redis lost its
  // data): the store's usage since period `seed_period` (periodId) began; used only in that period.
  int64_t seed = 0;
  int64_t seed_period = 0;
  // Redis Cluster: the counter's hash tag, which puts it in one slot with the others of the same
  // tag (a team's key, team and user counters: "t:<team>"; a model's or deployment's: its own
  // name without the ":r"/":t"). Empty with one Redis (its keys are named as they always were).
  std::string_view tag = {};
  // The seed if it is a figure for the period at unix_ms (a request built before midnight carries
  // the day before's), else 0.
  int64_t seedAt(int64_t unix_ms) const {
    return window != Window::kMinute && seed > 0 && seed_period == periodId(window, unix_ms) ? seed
                                                                                             : 0;
  }
};

struct Admission {
  bool admitted = false;
  int refused = -1;            // index of the charge that did not fit
  int64_t used = 0;            // on refusal: what that counter had used
  int64_t retry_after_ms = 0;  // on refusal
  int64_t stamp_ms = 0;        // when the reservation was recorded (for adjust)
  // Redis Cluster: per charge, when its part was recorded, if the parts of one admission (one call
  // per hash tag, each on its own master) were recorded in different seconds; else empty.
  std::vector<int64_t> stamps_ms;
  int64_t stampOf(size_t charge) const {
    return charge < stamps_ms.size() ? stamps_ms[charge] : stamp_ms;
  }
  int64_t key_ms = 0;              // Redis: the local time that named the day/month counters
  bool fallback = false;           // decided by the local fallback (Redis down)
  bool skipped = false;            // fail-open: nothing was reserved
  std::vector<int64_t> remaining;  // per charge, after this reservation
  std::vector<int64_t> reset_ms;   // per charge: until capacity starts to come back
  double share = 1.0;  // the part of each limit that applied (the local fallback's 1/replicas)
};

// `limit` times `share` (at least 1), as in-process counters enforce a share of a limit.
int64_t scaledLimit(int64_t limit, double share);

// One in-process counter. A minute counter's live seconds are (latest - 60, latest]; `sum` is
// their total, kept as amounts come and go so that a reservation reads it without scanning the
// 60 slots (each slot holds its second and amount side by side: one cache line per update).
struct LocalCounter {
  struct Slot {
    int64_t sec = 0;
    int64_t val = 0;
  };
  std::array<Slot, 60> slots{};
  int64_t latest = 0;
  int64_t sum = 0;
  int64_t period = 0;
  int64_t period_used = 0;
  bool live(int64_t s) const { return s > latest - 60 && s <= latest; }
  void advance(int64_t now);  // moves `latest` up to now, dropping what left the window
  void add(int64_t s,
           int64_t amount);    // into second s's slot (restarted if it held another second)
  int64_t oldestLive() const;  // oldest live second holding something (latest if none)
  // A day/month counter's use in period p (periodId): restarted at 0 when p is a new period.
  int64_t& periodUse(int64_t p) {
    if (period != p) {
      period = p;
      period_used = 0;
    }
    return period_used;
  }
};

class LocalCounters;
struct LocalCounterEntry {
  std::mutex mu;
  const LocalCounters* owner = nullptr;
  bool pinned = false;  // remembered by a CounterName: never removed (under the shard's mutex)
  LocalCounter c;       // under mu
};

class LocalCounters {
 public:
  // `share` scales every limit (the local share of a limit while Redis is down).
  Admission reserve(std::span<const Charge> charges, int64_t now_ms, double share = 1.0);
  // Adds delta[i] (negative: a refund) to the bucket/period the reservation at stamp_ms used.
  void adjust(std::span<const Charge> charges, std::span<const int64_t> delta, int64_t stamp_ms,
              int64_t now_ms);
  // Sets a period counter if it has no value yet (usage since the period began, after a restart).
  void seed(const Charge& c, int64_t used, int64_t now_ms);
  // Raises a period counter to at least `used` for the current period (Redis down: the store's
  // figures, which moved on since an earlier outage left this counter behind).
  void raiseTo(const Charge& c, int64_t used, int64_t now_ms);
  int64_t used(const Charge& c, int64_t now_ms);
  // Removes the counters only known by name (e.g. those of users without a record, named by a
  // request header) that hold nothing any more (an empty minute window, and no day or month
  // period still running), so that arbitrary names cannot grow memory without bound. Returns
  // how many were removed.
  size_t sweep(int64_t now_ms);
  size_t size();

 private:
  static int64_t usedLocked(LocalCounter& c, Window w, int64_t now_ms);
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::unique_ptr<LocalCounterEntry>, TransparentStringHash,
                       std::equal_to<>>
        counters;
  };
  Shard& shard(std::string_view key);
  LocalCounterEntry& entryLocked(Shard& s, std::string_view key);
  // The entry a charge's memo names (resolved and pinned on first use; no lock held after).
  LocalCounterEntry* pinnedEntry(const Charge& ch);
  // Runs fn(counter) with the counter's mutex held.
  template <class F>
  auto with(const Charge& ch, F&& fn);
  std::array<Shard, 16> shards_;
};

// The Lua scripts and their argument layout (shared by the data plane and tests).
const store::RedisScript& reserveScript();
const store::RedisScript& adjustScript();
// Undoes a reserve call that may have run although its answer never came (same KEYS and ARGV).
const store::RedisScript& cancelScript();
// Redis key of a charge's counter at a time (period appended for day/month): infera:rl:<name>, or
// infera:rl:{<tag>}<name> for a counter with a hash tag (Redis Cluster).
std::string redisCounterKey(const Charge& c, int64_t unix_ms);

// A Lua script's keys and arguments for one call.
struct ScriptCall {
  std::vector<std::string> keys;
  std::vector<std::string> args;
};

// One reserve script call deciding several admissions, each all or nothing, in order (later ones
// see earlier ones' reservations). Its arguments name each distinct counter once (window, limit,
// ttl, and the sum of what all the admissions put on it), then in one packed argument each
// distinct admission shape once (per charge: counter index and amount slot, where an admission's
// slots are its distinct amounts, e.g. 1 request and N tokens) and per admission only its shape
// and amounts. When every counter has room for its sum the script admits all without reading the
// packed part; only near a limit does it decide them one by one.
struct ReserveCall {
  std::vector<std::string> keys;
  std::vector<std::string> args;
  std::vector<std::vector<uint32_t>>
      counter_of;  // per admission, per charge: distinct counter (0-based)
  size_t counters = 0;
};
// `call_id` names the call (unique per call; the script leaves a marker under it for cancelScript).
void buildReserveCall(std::span<const std::span<const Charge>> admissions, int64_t now_ms,
                      std::string_view call_id, ReserveCall& call);
// The script answers a flat list: now (ms), per counter its use and oldest live second before the
// call, then -1 (all admitted) or per admission 0 (admitted) or the 1-based index of the charge
// that did not fit. The remaining/reset of every admitted request are replayed from these in the
// call's order.
// kInternal on a malformed reply.
Result<std::vector<Admission>> parseReserveReply(
    const store::RedisReply& reply, std::span<const std::span<const Charge>> admissions,
    const ReserveCall& call);
// Adjustments of many requests waiting to go to Redis in one adjust script call, summed per
// counter and reservation second.
class PendingAdjustments {
 public:
  // Adds delta[i] for charges[i], reserved at stamp_ms (period counters named at key_ms).
  void add(std::span<const Charge> charges, std::span<const int64_t> delta, int64_t stamp_ms,
           int64_t key_ms);
  size_t size() const { return sums_.size(); }
  // Moves the non-zero sums into adjust script calls, one per hash tag (one call when the
  // counters have none): KEYS the counters, ARGV[1] the call's id (unique per call and tag: the
  // script applies a call once), then per key its window, stamp second and delta. Appends nothing
  // when nothing is to be sent.
  void take(std::string_view call_id, std::vector<ScriptCall>& calls);

 private:
  struct Id {
    std::string key;
    bool minute;
    int64_t stamp_s;
    std::string tag;  // not part of the identity: a counter's tag follows from its name
  };
  struct IdView {
    std::string_view key;
    bool minute;
    int64_t stamp_s;
  };
  // Looked up by IdView (no string is built for a sum that exists already).
  struct IdHash {
    using is_transparent = void;
    size_t operator()(const IdView& id) const {
      return std::hash<std::string_view>{}(id.key) ^
             (static_cast<size_t>(id.stamp_s) * 31 + id.minute);
    }
    size_t operator()(const Id& id) const { return (*this)(IdView{id.key, id.minute, id.stamp_s}); }
  };
  struct IdEq {
    using is_transparent = void;
    static IdView view(const Id& id) { return {id.key, id.minute, id.stamp_s}; }
    static IdView view(const IdView& id) { return id; }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      const IdView x = view(a), y = view(b);
      return x.key == y.key && x.minute == y.minute && x.stamp_s == y.stamp_s;
    }
  };
  std::unordered_map<Id, int64_t, IdHash, IdEq> sums_;
};

// Leases: capacity one worker reserved in Redis ahead of its requests, so that away from the
// limits most admissions are decided in the worker without a Redis call. A lease is an ordinary
// admission of the reserve script (one counter, an amount sized to cover `lease_ms` of this
// worker's recent traffic on it, at most 1/(8 x holders) of what the counter had left), so Redis
// never holds more than the limit: what a lease reserved and its requests did not use goes back to
// Redis when it ends. A lease lives until the end of the Redis second that reserved it (its
// requests are counted in that second's bucket, as if each had called Redis then), and a refund of
// a reservation made in that second goes back into it. Near a limit leases shrink and stop (the
// cap), and every admission goes to Redis again. One per worker, used from its thread only.
class RedisLeases {
 public:
  // lease_ms 0: no leases. holders: the workers of every replica sharing the limits.
  RedisLeases(int64_t lease_ms, int holders)
      : lease_ms_(lease_ms), holders_(std::max(1, holders)) {}
  bool enabled() const { return lease_ms_ > 0; }

  // Admits `charges` from live leases, all or none (every charge needs a lease of the same Redis
  // second with enough left). Fills `a` like a Redis decision and returns true.
  bool take(std::span<const Charge> charges, int64_t now_ms, Admission& a);
  // The leases to ask for in a call carrying `admissions` (appended to `out`, one Charge per
  // counter, amount = the lease): counters whose lease is missing or nearly used, sized by this
  // worker's use of the counter in the last second, capped by what the counter had left in the
  // latest answer. Also counts the admissions' amounts (the next leases' sizes).
  void plan(std::span<const std::span<const Charge>> admissions, int64_t now_ms,
            std::vector<Charge>& out);
  // After a call: what each counter had left (the call's last admission on it tells), for the
  // next leases' cap.
  void observe(std::span<const std::span<const Charge>> admissions,
               std::span<const Admission> decided, int64_t now_ms);
  // Installs a lease the call granted (`a`: its decision; `a.stamp_ms` Redis's time, `a.key_ms`
  // the local time that named its keys; sent_ms: local time the call was sent). A lease it
  // replaces gives back what it had left (`back`). Returns when the lease ends (INT64_MAX: none).
  int64_t grant(const Charge& lease, const Admission& a, int64_t sent_ms, PendingAdjustments& back);
  // Puts a refund of a reservation made at stamp_ms back into the counter's live lease of that
  // second, up to what the lease was granted. Returns the part it took (the rest goes to Redis).
  int64_t giveBack(const Charge& c, int64_t refund, int64_t stamp_ms, int64_t key_ms,
                   int64_t now_ms);
  // Ends the leases that expired by now_ms: what they had left goes to `back` (to Redis). Drops
  // counters idle for seconds. Returns when the next live lease expires (INT64_MAX if none).
  int64_t expire(int64_t now_ms, PendingAdjustments& back);
  // Ends every lease now (shutdown): what they had left goes to `back`.
  void endAll(PendingAdjustments& back);
  size_t live() const;
  size_t size() const { return entries_.size(); }  // counters known (live leases or recent traffic)

 private:
  struct Entry {
    std::string counter;
    std::string tag;  // Charge::tag
    Window window = Window::kMinute;
    // The live lease (left >= 0 while live).
    bool live = false;
    int64_t left = 0;
    int64_t granted = 0;     // what Redis reserved for it (left never exceeds it)
    int64_t stamp_ms = 0;    // Redis's time when it was reserved (its bucket second)
    int64_t key_ms = 0;      // local time that named a day/month counter's key
    int64_t expires_ms = 0;  // local time
    int64_t limit = 0;
    int64_t use_after = 0;    // the counter's use in Redis after the call, the lease included
    int64_t reset_at_ms = 0;  // local time capacity starts to come back (minute counters)
    // What the counter had left in the latest answer, and when (local time).
    int64_t headroom = 0;
    int64_t headroom_ms = -1;
    // This worker's use of the counter: amounts in local second `sec`, and in the one before.
    int64_t sec = 0;
    int64_t used_sec = 0;
    int64_t used_prev = 0;
    void count(int64_t now_ms, int64_t amount);
    // Before its end, which is never more than a second away (a clock stepped back ends it).
    bool usable(int64_t now_ms) const { return now_ms < expires_ms && expires_ms - now_ms <= 1000; }
    Charge charge() const;
  };
  Entry& entry(const Charge& c);
  Entry* find(const Charge& c);
  void end(Entry& e, PendingAdjustments& back);
  int64_t lease_ms_;
  int holders_;
  std::unordered_map<std::string, Entry, TransparentStringHash, std::equal_to<>> entries_;
  std::vector<Entry> replaced_;  // live leases of a counter whose window changed, to give back
};

// "1s", "6m0s", "250ms" (the form OpenAI uses in x-ratelimit-reset-*).
std::string formatResetDuration(int64_t ms);

}  // namespace infera::access
