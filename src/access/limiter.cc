#include "access/internal/limiter.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <ctime>
#include <functional>
#include <limits>

#include "access/internal/lua_scripts.h"

namespace infera::access {

std::string_view scopeName(Scope s) {
  switch (s) {
    case Scope::kKey:
      return "key";
    case Scope::kTeam:
      return "team";
    case Scope::kUser:
      return "user";
    case Scope::kModel:
      return "model";
    case Scope::kDeployment:
      return "deployment";
    case Scope::kDaily:
      return "daily quota";
    case Scope::kBudgetTokens:
      return "token budget";
    case Scope::kBudgetCost:
      return "cost budget";
    case Scope::kUserDaily:
      return "user daily quota";
    case Scope::kUserBudgetTokens:
      return "user token budget";
    case Scope::kUserBudgetCost:
      return "user cost budget";
  }
  return "?";
}

int64_t periodId(Window w, int64_t unix_ms) {
  const time_t secs = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  const int64_t ym = static_cast<int64_t>(tm.tm_year + 1900) * 100 + tm.tm_mon + 1;
  return w == Window::kMonth ? ym : ym * 100 + tm.tm_mday;
}

int64_t periodStartMs(Window w, int64_t unix_ms) {
  if (w == Window::kMinute) return unix_ms - 60'000;
  if (w == Window::kDay) return unix_ms / 86'400'000 * 86'400'000;
  const time_t secs = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  struct tm first {};
  first.tm_year = tm.tm_year;
  first.tm_mon = tm.tm_mon;
  first.tm_mday = 1;
  return static_cast<int64_t>(timegm(&first)) * 1000;
}

int64_t periodEndMs(Window w, int64_t unix_ms) {
  if (w == Window::kMinute) return unix_ms + 60'000;
  if (w == Window::kDay) return (unix_ms / 86'400'000 + 1) * 86'400'000;
  const time_t secs = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  struct tm next {};
  next.tm_year = tm.tm_mon == 11 ? tm.tm_year + 1 : tm.tm_year;
  next.tm_mon = (tm.tm_mon + 1) % 12;
  next.tm_mday = 1;
  return static_cast<int64_t>(timegm(&next)) * 1000;
}

int64_t scaledLimit(int64_t limit, double share) {
  if (share >= 1.0) return limit;
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(limit) * share)));
}

LocalCounters::Shard& LocalCounters::shard(std::string_view key) {
  return shards_[std::hash<std::string_view>{}(key) % shards_.size()];
}

LocalCounterEntry& LocalCounters::entryLocked(Shard& s, std::string_view key) {
  const auto it = s.counters.find(key);
  if (it != s.counters.end()) return *it->second;
  auto e = std::make_unique<LocalCounterEntry>();
  e->owner = this;
  return *s.counters.emplace(std::string(key), std::move(e)).first->second;
}

template <class F>
auto LocalCounters::with(const Charge& ch, F&& fn) {
  if (ch.local) {
    // Remembered by the snapshot or route table: no lookup; such counters are never removed, so
    // the entry outlives the shard lock. (A memo of another LocalCounters is replaced.)
    LocalCounterEntry* e = pinnedEntry(ch);
    std::lock_guard<std::mutex> lock(e->mu);
    return fn(e->c);
  }
  // Known by name only: the shard lock is held throughout, so sweep() cannot remove it meanwhile.
  Shard& s = shard(ch.counter);
  std::lock_guard<std::mutex> lock(s.mu);
  LocalCounterEntry& e = entryLocked(s, ch.counter);
  std::lock_guard<std::mutex> entry_lock(e.mu);
  return fn(e.c);
}

namespace {
size_t slotOf(int64_t second) { return static_cast<size_t>(((second % 60) + 60) % 60); }
}  // namespace

void LocalCounter::advance(int64_t now) {
  // A little behind `latest` (another thread read the clock first): the window stays. A jump of
  // a minute or more either way (idle counter; the wall clock stepped back) re-anchors it at now
  // and recounts (seconds after now do not count).
  if (now <= latest && latest - now < 60) return;
  if (now - latest >= 60 || now < latest) {
    latest = now;
    sum = 0;
    for (const Slot& sl : slots) {
      if (live(sl.sec)) sum += sl.val;
    }
    return;
  }
  // Seconds latest-59 .. now-60 leave the window.
  for (int64_t t = latest - 59; t <= now - 60; ++t) {
    const Slot& sl = slots[slotOf(t)];
    if (sl.sec == t) sum -= sl.val;
  }
  latest = now;
}

void LocalCounter::add(int64_t s, int64_t amount) {
  Slot& sl = slots[slotOf(s)];
  if (sl.sec != s) {
    if (live(sl.sec)) sum -= sl.val;
    sl.sec = s;
    sl.val = 0;
  }
  // Amounts never go below zero (a refund larger than what the second holds stops at zero).
  const int64_t next = std::max<int64_t>(0, sl.val + amount);
  if (live(s)) sum += next - sl.val;
  sl.val = next;
}

int64_t LocalCounter::oldestLive() const {
  for (int64_t t = latest - 59; t < latest; ++t) {
    const Slot& sl = slots[slotOf(t)];
    if (sl.sec == t && sl.val != 0) return t;
  }
  return latest;
}

int64_t LocalCounters::usedLocked(LocalCounter& c, Window w, int64_t now_ms) {
  if (w != Window::kMinute) {
    return c.period == periodId(w, now_ms) ? c.period_used : 0;
  }
  c.advance(now_ms / 1000);
  return c.sum;
}

int64_t LocalCounters::used(const Charge& ch, int64_t now_ms) {
  return with(ch, [&](LocalCounter& c) { return usedLocked(c, ch.window, now_ms); });
}

LocalCounterEntry* LocalCounters::pinnedEntry(const Charge& ch) {
  LocalCounterEntry* e = ch.local->load(std::memory_order_acquire);
  if (!e || e->owner != this) {
    Shard& s = shard(ch.counter);
    std::lock_guard<std::mutex> lock(s.mu);
    e = &entryLocked(s, ch.counter);
    e->pinned = true;
    ch.local->store(e, std::memory_order_release);
  }
  return e;
}

Admission LocalCounters::reserve(std::span<const Charge> charges, int64_t now_ms, double share) {
  Admission a;
  a.stamp_ms = now_ms;
  a.share = share;
  a.remaining.resize(charges.size());
  a.reset_ms.resize(charges.size());
  const int64_t now = now_ms / 1000;
  const size_t n = charges.size();
  // Every counter's lock at once, taken in one order (shards by index, then entries by address;
  // single-counter paths take a shard before an entry too), so checking and reserving are one
  // step: no request sees a reservation that is then taken back. Everything that allocates is
  // done before a lock is taken or under the guard that releases them.
  constexpr size_t kInline = 16;
  static_assert(std::tuple_size_v<decltype(shards_)> <= 32, "shards are a 32-bit mask");
  std::array<LocalCounterEntry*, kInline> entry_small{}, order_small{};
  std::array<int64_t, kInline> used_small{};
  std::vector<LocalCounterEntry*> entry_large, order_large;
  std::vector<int64_t> used_large;
  const size_t inline_n = std::min(n, kInline);
  std::span<LocalCounterEntry*> entry(entry_small.data(), inline_n),
      order(order_small.data(), inline_n);
  std::span<int64_t> used(used_small.data(), inline_n);
  if (n > kInline) {
    entry_large.assign(n, nullptr);
    order_large.assign(n, nullptr);
    used_large.assign(n, 0);
    entry = entry_large;
    order = order_large;
    used = used_large;
  }
  uint32_t shards = 0;  // of counters known by name only: held throughout (sweep() may remove them)
  for (size_t i = 0; i < n; ++i) {
    if (charges[i].local) {
      entry[i] = pinnedEntry(charges[i]);
    } else {
      shards |= 1u << static_cast<uint32_t>(&shard(charges[i].counter) - shards_.data());
    }
  }
  struct Unlock {
    LocalCounters* self;
    uint32_t shards = 0;                 // locked
    std::span<LocalCounterEntry*> held;  // locked entries
    ~Unlock() {
      for (LocalCounterEntry* e : held) e->mu.unlock();
      for (uint32_t m = shards; m != 0; m &= m - 1)
        self->shards_[static_cast<size_t>(std::countr_zero(m))].mu.unlock();
    }
  } unlock{this, 0, {}};
  for (uint32_t m = shards; m != 0; m &= m - 1) {
    const uint32_t k = static_cast<uint32_t>(std::countr_zero(m));
    shards_[k].mu.lock();
    unlock.shards |= 1u << k;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!entry[i]) entry[i] = &entryLocked(shard(charges[i].counter), charges[i].counter);
  }
  std::copy(entry.begin(), entry.end(), order.begin());
  // Insertion sort (a request has a handful of counters), by std::less: a total order of pointers.
  const std::less<LocalCounterEntry*> before;
  for (size_t i = 1; i < order.size(); ++i) {
    for (size_t j = i; j > 0 && before(order[j], order[j - 1]); --j)
      std::swap(order[j], order[j - 1]);
  }
  const size_t distinct =
      static_cast<size_t>(std::unique(order.begin(), order.end()) - order.begin());
  for (size_t i = 0; i < distinct; ++i) {
    order[i]->mu.lock();
    unlock.held = order.first(i + 1);
  }

  // What each counter holds, plus what earlier charges of this request on the same counter add.
  for (size_t i = 0; i < n && a.refused < 0; ++i) {
    const Charge& ch = charges[i];
    const int64_t limit = scaledLimit(ch.limit, share);
    int64_t u = usedLocked(entry[i]->c, ch.window, now_ms);
    for (size_t j = 0; j < i; ++j) {
      if (entry[j] == entry[i]) u += charges[j].amount;
    }
    used[i] = u;
    if (u + ch.amount <= limit) continue;
    a.refused = static_cast<int>(i);
    a.used = u;
    if (ch.window != Window::kMinute) {
      a.retry_after_ms = periodEndMs(ch.window, now_ms) - now_ms;
    } else if (ch.amount > limit) {
      a.retry_after_ms = 60'000;
    } else {
      // When enough of the window's seconds have left it for this request to fit.
      const LocalCounter& c = entry[i]->c;
      std::vector<std::pair<int64_t, int64_t>> live;
      for (const LocalCounter::Slot& sl : c.slots) {
        if (c.live(sl.sec) && sl.val != 0) live.emplace_back(sl.sec, sl.val);
      }
      std::sort(live.begin(), live.end());
      int64_t freed = 0;
      a.retry_after_ms = 1000;
      for (const auto& [sec, val] : live) {
        freed += val;
        if (u - freed + ch.amount <= limit) {
          a.retry_after_ms = std::max<int64_t>(1, (sec + 60) * 1000 - now_ms);
          break;
        }
      }
    }
  }
  if (a.refused >= 0) {
    // Nothing reserved; what every counter has left without this request (for the headers).
    for (size_t i = 0; i < n; ++i) {
      const Charge& ch = charges[i];
      const LocalCounter& c = entry[i]->c;
      a.remaining[i] = std::max<int64_t>(
          0, scaledLimit(ch.limit, share) - usedLocked(entry[i]->c, ch.window, now_ms));
      a.reset_ms[i] = static_cast<int>(i) == a.refused ? a.retry_after_ms
                      : ch.window == Window::kMinute
                          ? (std::min(now, c.oldestLive()) + 60) * 1000 - now_ms
                          : periodEndMs(ch.window, now_ms) - now_ms;
    }
    return a;
  }
  for (size_t i = 0; i < n; ++i) {
    const Charge& ch = charges[i];
    LocalCounter& c = entry[i]->c;
    const int64_t u = used[i];  // the window was advanced to now by the check
    if (ch.window == Window::kMinute) {
      c.add(now, ch.amount);
      a.reset_ms[i] = (std::min(now, c.oldestLive()) + 60) * 1000 - now_ms;
    } else {
      c.periodUse(periodId(ch.window, now_ms)) += ch.amount;
      a.reset_ms[i] = periodEndMs(ch.window, now_ms) - now_ms;
    }
    a.remaining[i] = std::max<int64_t>(0, scaledLimit(ch.limit, share) - u - ch.amount);
  }
  a.admitted = true;
  return a;
}

void LocalCounters::adjust(std::span<const Charge> charges, std::span<const int64_t> delta,
                           int64_t stamp_ms, int64_t now_ms) {
  const int64_t stamp = stamp_ms / 1000;
  const int64_t now = now_ms / 1000;
  for (size_t i = 0; i < charges.size() && i < delta.size(); ++i) {
    if (delta[i] == 0) continue;
    const Charge& ch = charges[i];
    with(ch, [&](LocalCounter& c) {
      if (ch.window == Window::kMinute) {
        c.advance(now);
        if (c.live(stamp) && c.slots[slotOf(stamp)].sec == stamp) {
          c.add(stamp, delta[i]);  // back to (or more on) the second it was reserved in
        } else if (delta[i] > 0) {
          c.add(now, delta[i]);  // that second has left the window: use beyond it counts now
        }
      } else if (c.period == periodId(ch.window, stamp_ms)) {
        c.period_used = std::max<int64_t>(0, c.period_used + delta[i]);
      }
    });
  }
}

void LocalCounters::seed(const Charge& ch, int64_t used, int64_t now_ms) {
  if (ch.window == Window::kMinute) return;
  with(ch, [&](LocalCounter& c) {
    const int64_t p = periodId(ch.window, now_ms);
    if (c.period != p) c.periodUse(p) = used;
  });
}

void LocalCounters::raiseTo(const Charge& ch, int64_t used, int64_t now_ms) {
  if (ch.window == Window::kMinute) return;
  with(ch, [&](LocalCounter& c) {
    int64_t& u = c.periodUse(periodId(ch.window, now_ms));
    u = std::max(u, used);
  });
}

size_t LocalCounters::sweep(int64_t now_ms) {
  const int64_t now = now_ms / 1000;
  const int64_t day = periodId(Window::kDay, now_ms);
  const int64_t month = periodId(Window::kMonth, now_ms);
  size_t removed = 0;
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    std::erase_if(s.counters, [&](auto& kv) {
      LocalCounterEntry& e = *kv.second;
      if (e.pinned) return false;
      std::lock_guard<std::mutex> entry_lock(e.mu);
      e.c.advance(now);
      const bool period_live =
          e.c.period == day || e.c.period == month;  // kept while its period runs
      const bool idle = e.c.sum == 0 && !period_live;
      removed += idle ? 1 : 0;
      return idle;
    });
  }
  return removed;
}

size_t LocalCounters::size() {
  size_t n = 0;
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    n += s.counters.size();
  }
  return n;
}

// ---- Redis ----

namespace {}  // namespace

const store::RedisScript& reserveScript() {
  static const store::RedisScript s(std::string(lua::counters()) + std::string(lua::reserve()));
  return s;
}

const store::RedisScript& adjustScript() {
  static const store::RedisScript s(std::string(lua::counters()) + std::string(lua::adjust()));
  return s;
}

const store::RedisScript& cancelScript() {
  static const store::RedisScript s(std::string(lua::counters()) + std::string(lua::cancel()));
  return s;
}

namespace {
constexpr std::string_view kCounterPrefix = "infera:rl:";

// A counter's name in Redis without the prefix: a day/month counter has its period appended.
void appendPeriodName(std::string& out, const Charge& c, int64_t unix_ms) {
  out += c.counter;
  if (c.window != Window::kMinute) {
    out += ':';
    out += std::to_string(periodId(c.window, unix_ms));
  }
}
}  // namespace

std::string redisCounterKey(const Charge& c, int64_t unix_ms) {
  std::string k(kCounterPrefix);
  if (!c.tag.empty()) {
    k += '{';
    k += c.tag;
    k += '}';
  }
  appendPeriodName(k, c, unix_ms);
  return k;
}

void buildReserveCall(std::span<const std::span<const Charge>> admissions, int64_t now_ms,
                      std::string_view call_id, ReserveCall& call) {
  call.keys.clear();
  call.args.clear();
  call.args.emplace_back(call_id);
  call.counter_of.assign(admissions.size(), {});
  // Distinct counters (a batch mostly repeats one key's and team's counters) and shapes.
  std::vector<const Charge*> first;
  std::vector<std::vector<uint32_t>> shapes;  // {M, K, counter, slot, counter, slot, ...}
  std::vector<uint32_t> shape_of(admissions.size());
  std::vector<std::vector<int64_t>> slots(admissions.size());
  std::vector<uint32_t> shape;
  for (size_t a = 0; a < admissions.size(); ++a) {
    shape.assign(2, 0);
    for (const Charge& c : admissions[a]) {
      uint32_t i = 0;
      while (i < first.size() && !(first[i]->counter == c.counter && first[i]->window == c.window))
        ++i;
      if (i == first.size()) first.push_back(&c);
      call.counter_of[a].push_back(i);
      auto& sl = slots[a];
      uint32_t j = 0;
      while (j < sl.size() && sl[j] != c.amount) ++j;
      if (j == sl.size()) sl.push_back(c.amount);
      shape.push_back(i + 1);
      shape.push_back(j + 1);
    }
    shape[0] = static_cast<uint32_t>(admissions[a].size());
    shape[1] = static_cast<uint32_t>(slots[a].size());
    uint32_t s = 0;
    while (s < shapes.size() && shapes[s] != shape) ++s;
    if (s == shapes.size()) shapes.push_back(shape);
    shape_of[a] = s + 1;
  }
  call.counters = first.size();
  std::vector<int64_t> sums(first.size(), 0);
  for (size_t a = 0; a < admissions.size(); ++a) {
    for (size_t i = 0; i < admissions[a].size(); ++i)
      sums[call.counter_of[a][i]] += admissions[a][i].amount;
  }
  auto& args = call.args;
  args.reserve(4 + 5 * first.size());
  args.push_back(std::to_string(first.size()));
  for (size_t i = 0; i < first.size(); ++i) {
    const Charge* c = first[i];
    call.keys.push_back(redisCounterKey(*c, now_ms));
    args.push_back(c->window == Window::kMinute ? "0" : "1");
    args.push_back(std::to_string(c->limit));
    // Period counters outlive their period by a day (clock skew between replicas).
    const int64_t ttl_s = c->window == Window::kMinute
                              ? 61
                              : (periodEndMs(c->window, now_ms) - now_ms) / 1000 + 86'400;
    args.push_back(std::to_string(ttl_s));
    args.push_back(std::to_string(sums[i]));
    args.push_back(std::to_string(c->seedAt(now_ms)));
  }
  args.push_back(std::to_string(admissions.size()));
  // The shapes and admissions, space-separated in one argument.
  std::string packed;
  packed.reserve(8 + 12 * shapes.size() + 16 * admissions.size());
  char num[24];
  auto put = [&](int64_t v) {
    if (!packed.empty()) packed += ' ';
    packed.append(num, std::to_chars(num, num + sizeof(num), v).ptr);
  };
  put(static_cast<int64_t>(shapes.size()));
  for (const auto& sh : shapes) {
    for (uint32_t v : sh) put(v);
  }
  for (size_t a = 0; a < admissions.size(); ++a) {
    put(shape_of[a]);
    for (int64_t v : slots[a]) put(v);
  }
  args.push_back(std::move(packed));
}

Result<std::vector<Admission>> parseReserveReply(
    const store::RedisReply& r, std::span<const std::span<const Charge>> admissions,
    const ReserveCall& call) {
  using T = store::RedisReply::Type;
  if (r.type == T::kError) return Status::internal("rate-limit script failed: " + r.str);
  // After the counters: -1 (all admitted), or one verdict per admission.
  const size_t head = 1 + 2 * call.counters;
  const bool all = r.type == T::kArray && r.elements.size() == head + 1 &&
                   r.elements[head].type == T::kInteger && r.elements[head].integer == -1;
  if (r.type != T::kArray || (!all && r.elements.size() != head + admissions.size()) ||
      call.counter_of.size() != admissions.size()) {
    return Status::internal("rate-limit script: unexpected reply");
  }
  for (const auto& e : r.elements) {
    if (e.type != T::kInteger)
      return Status::internal("rate-limit script: non-integer reply element");
  }
  const int64_t now_ms = r.elements[0].integer;
  const int64_t now = now_ms / 1000;
  // Replays the script's decisions on its counters' starting values to get what each admitted
  // request saw (the script decides; this only derives the headers' figures).
  std::vector<int64_t> total(call.counters), oldest(call.counters);
  for (size_t c = 0; c < call.counters; ++c) {
    total[c] = r.elements[1 + 2 * c].integer;
    oldest[c] = r.elements[2 + 2 * c].integer;
  }
  std::vector<Admission> out(admissions.size());
  for (size_t a = 0; a < admissions.size(); ++a) {
    const auto charges = admissions[a];
    const auto& idx = call.counter_of[a];
    Admission& ad = out[a];
    ad.stamp_ms = now_ms;
    const int64_t verdict = all ? 0 : r.elements[head + a].integer;
    if (verdict < 0 || static_cast<size_t>(verdict) > charges.size()) {
      return Status::internal("rate-limit script: bad index");
    }
    if (verdict > 0) {
      const size_t i = static_cast<size_t>(verdict - 1);
      const Charge& c = charges[i];
      ad.refused = static_cast<int>(i);
      ad.used = total[idx[i]];
      if (c.window != Window::kMinute) {
        ad.retry_after_ms = periodEndMs(c.window, now_ms) - now_ms;
      } else if (c.amount > c.limit) {
        ad.retry_after_ms = 60'000;
      } else {
        ad.retry_after_ms = std::max<int64_t>(1, (oldest[idx[i]] + 60) * 1000 - now_ms);
      }
      // What every counter has left without this request (for the x-ratelimit-* headers).
      ad.remaining.resize(charges.size());
      ad.reset_ms.resize(charges.size());
      for (size_t j = 0; j < charges.size(); ++j) {
        const size_t cj = idx[j];
        ad.remaining[j] = std::max<int64_t>(0, charges[j].limit - total[cj]);
        if (j == i) {
          ad.reset_ms[j] = ad.retry_after_ms;
        } else if (charges[j].window == Window::kMinute) {
          ad.reset_ms[j] = total[cj] == 0 ? 60'000 : (oldest[cj] + 60) * 1000 - now_ms;
        } else {
          ad.reset_ms[j] = periodEndMs(charges[j].window, now_ms) - now_ms;
        }
      }
      continue;
    }
    ad.admitted = true;
    ad.remaining.resize(charges.size());
    ad.reset_ms.resize(charges.size());
    for (size_t i = 0; i < charges.size(); ++i) {
      ad.remaining[i] = std::max<int64_t>(0, charges[i].limit - total[idx[i]] - charges[i].amount);
    }
    for (size_t i = 0; i < charges.size(); ++i) {
      const size_t c = idx[i];
      if (charges[i].window == Window::kMinute && total[c] == 0) oldest[c] = now;
      total[c] += charges[i].amount;
      ad.reset_ms[i] = charges[i].window == Window::kMinute
                           ? (oldest[c] + 60) * 1000 - now_ms
                           : periodEndMs(charges[i].window, now_ms) - now_ms;
    }
  }
  return out;
}

void PendingAdjustments::add(std::span<const Charge> charges, std::span<const int64_t> delta,
                             int64_t stamp_ms, int64_t key_ms) {
  for (size_t i = 0; i < charges.size() && i < delta.size(); ++i) {
    if (delta[i] == 0) continue;
    const bool minute = charges[i].window == Window::kMinute;
    // Kept without redisCounterKey's prefix (take() adds it); a minute counter's is its name.
    std::string period_key;
    if (!minute) appendPeriodName(period_key, charges[i], key_ms);
    const IdView id{minute ? charges[i].counter : std::string_view(period_key), minute,
                    stamp_ms / 1000};
    const auto it = sums_.find(id);
    if (it != sums_.end()) {
      it->second += delta[i];
    } else {
      sums_.emplace(Id{std::string(id.key), minute, id.stamp_s, std::string(charges[i].tag)},
                    delta[i]);
    }
  }
}

void PendingAdjustments::take(std::string_view call_id, std::vector<ScriptCall>& calls) {
  // One call per tag (calls[first + j] holds tags[j]'s counters); mostly a single one.
  const size_t first = calls.size();
  std::vector<std::string_view> tags;
  for (auto& [id, sum] : sums_) {
    if (sum == 0) continue;
    size_t j = 0;
    while (j < tags.size() && tags[j] != id.tag) ++j;
    if (j == tags.size()) {
      // Each call its own id (the marker's name): two tags can share a slot, see decide().
      tags.push_back(id.tag);
      calls.emplace_back().args.emplace_back(call_id);
      if (j > 0) calls.back().args.back() += "/" + std::to_string(j);
    }
    ScriptCall& call = calls[first + j];
    std::string key(kCounterPrefix);
    if (!id.tag.empty()) key.append("{").append(id.tag).append("}");
    call.keys.push_back(key.append(id.key));
    call.args.push_back(id.minute ? "0" : "1");
    call.args.push_back(std::to_string(id.stamp_s));
    call.args.push_back(std::to_string(sum));
  }
  sums_.clear();
}

// ---------------- RedisLeases ----------------

void RedisLeases::Entry::count(int64_t now_ms, int64_t amount) {
  const int64_t s = now_ms / 1000;
  if (s != sec) {
    used_prev = s == sec + 1 ? used_sec : 0;
    used_sec = 0;
    sec = s;
  }
  used_sec += amount;
}

Charge RedisLeases::Entry::charge() const {
  Charge c;
  c.counter = counter;
  c.tag = tag;
  c.window = window;
  c.limit = limit;
  return c;
}

RedisLeases::Entry* RedisLeases::find(const Charge& c) {
  const auto it = entries_.find(c.counter);
  return it == entries_.end() || it->second.window != c.window ? nullptr : &it->second;
}

RedisLeases::Entry& RedisLeases::entry(const Charge& c) {
  auto it = entries_.find(c.counter);
  if (it == entries_.end()) {
    it = entries_.emplace(std::string(c.counter), Entry{}).first;
    it->second.counter = it->first;
    it->second.tag = c.tag;
    it->second.window = c.window;
  } else if (it->second.window != c.window) {
    // The same name counted over another window now (a budget's period changed): a new counter.
    // A live lease of the old window gives back what it had left with the next expire().
    if (it->second.live) replaced_.push_back(it->second);
    it->second = Entry{};
    it->second.counter = it->first;
    it->second.tag = c.tag;
    it->second.window = c.window;
  }
  return it->second;
}

void RedisLeases::end(Entry& e, PendingAdjustments& back) {
  if (e.live && e.left > 0) {
    const Charge c = e.charge();
    const int64_t d = -e.left;
    back.add(std::span(&c, 1), std::span(&d, 1), e.stamp_ms, e.key_ms);
  }
  e.live = false;
  e.left = 0;
  e.granted = 0;
}

bool RedisLeases::take(std::span<const Charge> charges, int64_t now_ms, Admission& a) {
  constexpr size_t kMax = 16;
  if (!enabled() || charges.empty() || charges.size() > kMax) return false;
  std::array<Entry*, kMax> es{};
  for (size_t i = 0; i < charges.size(); ++i) {
    const Charge& c = charges[i];
    Entry* e = find(c);
    // A lease of this counter, still live, with room, reserved under the same limit, in the same
    // Redis second as the others (one stamp for the request's reconciliation).
    if (e == nullptr || !e->live || !e->usable(now_ms) || e->limit != c.limit ||
        e->stamp_ms / 1000 != (i == 0 ? e : es[0])->stamp_ms / 1000) {
      return false;
    }
    // Room for this charge and any earlier one of the request on the same counter.
    int64_t need = c.amount;
    for (size_t j = 0; j < i; ++j) need += es[j] == e ? charges[j].amount : 0;
    if (e->left < need) return false;
    es[i] = e;
  }
  // Day/month counters: one local time names all their keys on reconciliation.
  int64_t key_ms = es[0]->key_ms;
  for (size_t i = 0; i < charges.size(); ++i) {
    if (charges[i].window != Window::kMinute) {
      key_ms = es[i]->key_ms;
      break;
    }
  }
  for (size_t i = 0; i < charges.size(); ++i) {
    const Window w = charges[i].window;
    if (w != Window::kMinute && (periodId(w, es[i]->key_ms) != periodId(w, key_ms) ||
                                 periodId(w, key_ms) != periodId(w, now_ms))) {
      return false;
    }
  }
  a = Admission{};
  a.admitted = true;
  a.stamp_ms = es[0]->stamp_ms;
  a.key_ms = key_ms;
  a.remaining.resize(charges.size());
  a.reset_ms.resize(charges.size());
  for (size_t i = 0; i < charges.size(); ++i) {
    Entry& e = *es[i];
    e.left -= charges[i].amount;
    e.count(now_ms, charges[i].amount);
    // Redis holds the whole lease; what is left of it is not used.
    a.remaining[i] = std::clamp<int64_t>(e.limit - (e.use_after - e.left), 0, e.limit);
    a.reset_ms[i] = e.window == Window::kMinute ? std::max<int64_t>(0, e.reset_at_ms - now_ms)
                                                : periodEndMs(e.window, now_ms) - now_ms;
  }
  return true;
}

void RedisLeases::plan(std::span<const std::span<const Charge>> admissions, int64_t now_ms,
                       std::vector<Charge>& out) {
  if (!enabled()) return;
  struct Seen {
    Entry* e;
    const Charge* first;
    int64_t sum = 0;
    int64_t largest = 0;
  };
  std::vector<Seen> seen;
  for (const auto& charges : admissions) {
    for (const Charge& c : charges) {
      Entry& e = entry(c);
      e.count(now_ms, c.amount);
      size_t i = 0;
      while (i < seen.size() && seen[i].e != &e) ++i;
      if (i == seen.size()) seen.push_back({&e, &c});
      seen[i].sum += c.amount;
      seen[i].largest = std::max(seen[i].largest, c.amount);
    }
  }
  for (const Seen& s : seen) {
    const Entry& e = *s.e;
    // A lease with room still serves this counter (the admission came for another one's sake).
    if (e.live && e.usable(now_ms) && e.left >= 2 * s.largest) continue;
    // Only with a recent answer for this counter: the cap needs what it had left.
    if (e.headroom_ms < 0 || now_ms - e.headroom_ms > 1000) continue;
    // Only for a counter this worker is busy with (four requests' worth in the last second or this
    // one so far): a lease for a request now and then would only come back unused.
    const int64_t recent = std::max(e.used_prev, e.used_sec);
    if (recent < 4 * s.largest) continue;
    // This worker's use of the counter over lease_ms, at least four times this call's.
    int64_t want = recent * lease_ms_ / 1000;
    want = std::max(want, 4 * s.sum);
    // Every holder taking its cap leaves the counter most of what it had left.
    const int64_t cap = (e.headroom - s.sum) / (8 * static_cast<int64_t>(holders_));
    want = std::min(want, cap);
    if (want < 2 * std::max<int64_t>(1, s.largest)) continue;
    Charge lease = *s.first;
    lease.amount = want;
    out.push_back(lease);
  }
}

void RedisLeases::observe(std::span<const std::span<const Charge>> admissions,
                          std::span<const Admission> decided, int64_t now_ms) {
  if (!enabled()) return;
  // The last admission on a counter saw what it had left after the call.
  std::vector<const Entry*> done;
  for (size_t a = std::min(admissions.size(), decided.size()); a-- > 0;) {
    const Admission& d = decided[a];
    if (d.remaining.size() != admissions[a].size()) continue;
    for (size_t i = 0; i < admissions[a].size(); ++i) {
      Entry& e = entry(admissions[a][i]);
      if (std::find(done.begin(), done.end(), &e) != done.end()) continue;
      done.push_back(&e);
      e.headroom = d.remaining[i];
      e.headroom_ms = now_ms;
      // A live lease's figures for its requests' headers: the counter's use now (the lease still in
      // it) and when capacity comes back.
      if (e.live && e.limit == admissions[a][i].limit && i < d.reset_ms.size()) {
        e.use_after = e.limit - d.remaining[i];
        if (e.window == Window::kMinute) e.reset_at_ms = now_ms + d.reset_ms[i];
      }
    }
  }
}

int64_t RedisLeases::grant(const Charge& lease, const Admission& a, int64_t sent_ms,
                           PendingAdjustments& back) {
  if (!a.admitted) return std::numeric_limits<int64_t>::max();
  if (!enabled() || a.remaining.size() != 1 || a.reset_ms.size() != 1) {
    // Reserved in Redis but of no use here: back it goes.
    const int64_t d = -lease.amount;
    back.add(std::span(&lease, 1), std::span(&d, 1), a.stamp_ms, a.key_ms);
    return std::numeric_limits<int64_t>::max();
  }
  Entry& e = entry(lease);
  // Redis reserved it in second a.stamp_ms / 1000, no earlier than the call was sent: it can be
  // used until that second ends, measured from the sending.
  const int64_t expires = sent_ms + (1000 - a.stamp_ms % 1000);
  const bool same_period = lease.window == Window::kMinute ||
                           periodId(lease.window, e.key_ms) == periodId(lease.window, a.key_ms);
  const bool same =
      e.live && e.stamp_ms / 1000 == a.stamp_ms / 1000 && e.limit == lease.limit && same_period;
  if (same) {
    e.left += lease.amount;
    e.granted += lease.amount;
  } else {
    end(e, back);
    e.live = true;
    e.left = lease.amount;
    e.granted = lease.amount;
    e.stamp_ms = a.stamp_ms;
    e.key_ms = a.key_ms;
    e.limit = lease.limit;
  }
  // Both are no later than the end of that second: the later is the closer.
  e.expires_ms = same ? std::max(e.expires_ms, expires) : expires;
  e.use_after = lease.limit - a.remaining[0];
  e.reset_at_ms = sent_ms + a.reset_ms[0];
  return e.expires_ms;
}

int64_t RedisLeases::giveBack(const Charge& c, int64_t refund, int64_t stamp_ms, int64_t key_ms,
                              int64_t now_ms) {
  if (!enabled() || refund <= 0) return 0;
  Entry* e = find(c);
  if (e == nullptr || !e->live || !e->usable(now_ms) || e->stamp_ms / 1000 != stamp_ms / 1000)
    return 0;
  if (c.window != Window::kMinute && periodId(c.window, e->key_ms) != periodId(c.window, key_ms))
    return 0;
  // Never more than was granted: a lease holds no more than its cap allowed.
  const int64_t taken = std::clamp<int64_t>(e->granted - e->left, 0, refund);
  e->left += taken;
  return taken;
}

int64_t RedisLeases::expire(int64_t now_ms, PendingAdjustments& back) {
  for (Entry& e : replaced_) end(e, back);
  replaced_.clear();
  int64_t next = std::numeric_limits<int64_t>::max();
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.live && !e.usable(now_ms)) end(e, back);
    if (e.live) {
      next = std::min(next, e.expires_ms);
    } else if (e.sec < now_ms / 1000 - 5 && now_ms - e.headroom_ms > 5'000) {
      // Idle (names built per request, e.g. header-named users, must not pile up).
      it = entries_.erase(it);
      continue;
    }
    ++it;
  }
  return next;
}

void RedisLeases::endAll(PendingAdjustments& back) {
  for (Entry& e : replaced_) end(e, back);
  replaced_.clear();
  for (auto& [name, e] : entries_) end(e, back);
}

size_t RedisLeases::live() const {
  size_t n = 0;
  for (const auto& [name, e] : entries_) n += e.live ? 1 : 0;
  return n;
}

std::string formatResetDuration(int64_t ms) {
  if (ms <= 0) return "0s";
  if (ms < 1000) return std::to_string(ms) + "ms";
  const int64_t total_s = ms / 1000;
  const int64_t h = total_s / 3600;
  const int64_t m = (total_s % 3600) / 60;
  const int64_t s = total_s % 60;
  std::string out;
  if (h) out += std::to_string(h) + "h";
  if (h || m) out += std::to_string(m) + "m";
  out += std::to_string(s);
  if (!h && !m) {
    // Under a minute: tenths and hundredths, like OpenAI's "1.5s" (no trailing zeros).
    int64_t frac = (ms % 1000) / 10;
    if (frac) {
      out += '.';
      out += static_cast<char>('0' + frac / 10);
      if (frac % 10) out += static_cast<char>('0' + frac % 10);
    }
  }
  out += 's';
  return out;
}

}  // namespace infera::access
