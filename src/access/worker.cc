#include <openssl/sha.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "access/internal/governance.h"
#include "core/log.h"
#include "core/text.h"

namespace infera::access {

GovWorker::GovWorker(Governance& g, int shard, net::asio::io_context& ctx)
    : g_(g),
      shard_(shard),
      ctx_(ctx),
      cache_per_team_(g.config_.cache.scope == "team"),
      flush_timer_(ctx),
      leases_(g.config_.redis.empty() ? 0 : g.config_.redis_lease_ms,
              g.config_.replicas * static_cast<int>(g.usage_buffers_.size())),
      lease_timer_(ctx) {
  {
    // Subscribed and handed the latest snapshot at once: a snapshot published from now on is
    // posted to this loop (and one older than what it holds is ignored).
    std::lock_guard<std::mutex> lock(g_.publish_mu_);
    snapshot_ = g_.snapshot();
    g_.subscribers_.push_back({&ctx_, this});
  }
  std::random_device rd;
  call_prefix_ = std::to_string((static_cast<uint64_t>(rd()) << 32) | rd()) + "-" +
                 std::to_string(shard) + "-";
  if (!g_.config_.redis.empty()) {
    auto addr = store::parseRedisUrl(g_.config_.redis);
    if (addr.ok()) {
      store::AsyncRedisOptions o;
      o.command_timeout = std::chrono::milliseconds(g_.config_.redis_timeout_ms);
      o.connect_timeout =
          std::chrono::milliseconds(std::max<int64_t>(g_.config_.redis_timeout_ms, 200));
      redis_ = std::shared_ptr<store::AsyncRedis>(store::AsyncRedis::create(ctx_, *addr, o));
      cluster_ = addr->cluster;
    }
  }
}

GovWorker::~GovWorker() {
  {
    std::lock_guard<std::mutex> lock(g_.publish_mu_);
    std::erase_if(g_.subscribers_,
                  [this](const Governance::Subscriber& s) { return s.worker == this; });
  }
  *alive_ = false;
  flush_timer_.cancel();
  lease_timer_.cancel();
  if (!redis_) return;
  // What the leases did not use, the reconciliations not yet sent and the cancel and
  // reconciliation calls not yet answered go to Redis now, blocking: the worker's loop stops right
  // after its handler is gone, so a spawned call (or its retry) would never run. Each applies once
  // by its id, so one that did reach Redis is harmless. Bounded: one connection with
  // redis_timeout_ms (200 ms at least, 1 s at most) per step, nothing more after a failure, and
  // nothing while Redis is known to be down.
  leases_.endAll(pending_);
  std::vector<ScriptCall> last;
  pending_.take(call_prefix_ + "a" + std::to_string(++adjust_seq_), last);
  for (ScriptCall& c : last) unanswered_->add(adjustScript(), std::move(c.keys), std::move(c.args));
  std::vector<std::shared_ptr<const Unanswered::Call>> calls;
  for (const auto& [id, call] : unanswered_->calls) calls.push_back(call);
  if (!calls.empty()) {
    Status s = Status::ok();
    size_t sent = 0;
    auto addr = store::parseRedisUrl(g_.config_.redis);
    if (g_.redis_down.load()) {
      s = Status::unavailable("Redis is unreachable");
    } else if (!addr.ok()) {
      s = addr.status();
    } else {
      const auto timeout =
          std::chrono::milliseconds(std::clamp<int64_t>(g_.config_.redis_timeout_ms, 200, 1'000));
      auto rc = store::RedisClient::connect(*addr, timeout);
      if (!rc.ok()) s = rc.status();
      for (; sent < calls.size() && s.isOk(); ++sent) {
        auto r = (*rc)->eval(*calls[sent]->script, calls[sent]->keys, calls[sent]->args);
        if (!r.ok()) {
          s = r.status();
        } else if (r->type == store::RedisReply::Type::kError) {
          s = Status::internal(r->str);
        }
        if (!s.isOk()) break;
      }
    }
    const size_t unsent = calls.size() - sent;
    if (unsent > 0) {
      g_.redis_errors->inc(shard_);
      INFERA_LOG(g_.log, warn,
                 "rate limits: {} reconciliation/cancel calls (leases given back included) not "
                 "sent to Redis at "
                 "shutdown: {}",
                 unsent, s.message());
    }
  }
  redis_->close();
}

const AccessConfig& GovWorker::config() const { return g_.config_; }
std::string_view GovWorker::userHeader() const { return g_.config_.user_header; }
bool GovWorker::cacheEnabled() const { return g_.cache_ != nullptr; }
void GovWorker::countCache(bool hit) { (hit ? g_.cache_hits : g_.cache_misses)->inc(shard_); }

std::string GovWorker::cacheKey(std::string_view model, std::string_view canonical_request,
                                const Grant& grant) const {
  return access::cacheKey(model, canonical_request,
                          cache_per_team_ && grant ? std::string_view(grant.t_->team) : "");
}

namespace {

std::string redisCacheKey(const std::string& key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  // "cache2": entries carry their expiry first (an earlier version's "infera:cache:" entries did
  // not).
  return "infera:cache2:" + toHex(digest, sizeof(digest));
}

}  // namespace

net::Task<std::optional<CachedAnswer>> GovWorker::cacheGet(const std::string& key) {
  const int64_t now = g_.nowMs();
  auto local = g_.cache_->get(key, now);
  if (local || !redis_ || !g_.config_.cache.redis) co_return local;
  // Shared tier: "expires_ms\ncontent-type\nprompt\ncompletion\nbody", expiring in Redis too (PX):
  // the local copy keeps the entry's own expiry, so it never outlives the first answer's TTL.
  std::vector<std::string> argv = {"GET", redisCacheKey(key)};
  // g++ 12: no temporaries with destructors inside a co_await expression (name the task first).
  auto get = redis_->command(std::move(argv));
  auto reply = co_await std::move(get);
  if (!reply.ok() || reply->type != store::RedisReply::Type::kString) co_return std::nullopt;
  const std::string& v = reply->str;
  const size_t x = v.find('\n');
  const size_t a = x == std::string::npos ? x : v.find('\n', x + 1);
  const size_t b = a == std::string::npos ? a : v.find('\n', a + 1);
  const size_t c = b == std::string::npos ? b : v.find('\n', b + 1);
  if (c == std::string::npos) co_return std::nullopt;
  CachedAnswer e;
  e.expires_ms = std::atoll(v.c_str());
  if (e.expires_ms <= now) co_return std::nullopt;
  e.content_type = v.substr(x + 1, a - x - 1);
  e.prompt_tokens = std::atoll(v.c_str() + a + 1);
  e.completion_tokens = std::atoll(v.c_str() + b + 1);
  e.body = v.substr(c + 1);
  g_.cache_->put(key, e);
  std::optional<CachedAnswer> out(std::move(e));
  co_return out;
}

void GovWorker::cachePut(const std::string& key, CachedAnswer e) {
  e.expires_ms = g_.nowMs() + g_.config_.cache.ttl_ms;
  if (redis_ && g_.config_.cache.redis &&
      static_cast<int64_t>(e.body.size()) <= g_.config_.cache.max_entry_bytes) {
    std::string v = std::to_string(e.expires_ms) + "\n" + e.content_type + "\n" +
                    std::to_string(e.prompt_tokens) + "\n" + std::to_string(e.completion_tokens) +
                    "\n" + e.body;
    const int64_t ttl = std::max<int64_t>(1, e.expires_ms - g_.nowMs());
    std::vector<std::string> argv = {"SET", redisCacheKey(key), std::move(v), "PX",
                                     std::to_string(ttl)};
    struct Put {
      static net::Task<void> run(std::shared_ptr<store::AsyncRedis> r,
                                 std::vector<std::string> args) {
        auto set = r->command(std::move(args));
        auto ignored = co_await std::move(set);
        (void)ignored;  // best effort: the local tier has it
      }
    };
    net::spawn(ctx_, Put::run(redis_, std::move(argv)), "cache put");
  }
  g_.cache_->put(key, std::move(e));
}

std::optional<Denial> GovWorker::authenticate(std::string_view authorization,
                                              std::string_view user_header, GovTicket& t) {
  t.snapshot = snapshot_;
  std::string_view token = authorization;
  if (token.size() > 7 && (token.substr(0, 7) == "Bearer " || token.substr(0, 7) == "bearer ")) {
    token.remove_prefix(7);
  } else {
    token = {};
  }
  if (token.empty()) {
    if (!g_.config_.require_keys) {
      t.team = "anonymous";
      return std::nullopt;
    }
    g_.denied_auth->inc(shard_);
    return Denial{401,
                  "You didn't provide an API key. You need to provide your API key in an "
                  "Authorization header "
                  "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                  "invalid_request_error", "missing_api_key"};
  }
  const KeyInfo* key = nullptr;
  std::string_view id, secret;
  if (parseKeyToken(token, id, secret)) {
    const auto cached = token_cache_.find(id);
    if (cached != token_cache_.end() && constantTimeEqual(secret, cached->second.secret)) {
      key = cached->second.key;
    } else if (snapshot_) {
      const auto it = snapshot_->by_id.find(std::string(id));
      if (it != snapshot_->by_id.end() &&
          constantTimeEqual(hashSecret(g_.key_secret_, it->second->rec.salt, secret),
                            it->second->rec.hash)) {
        key = it->second;
        if (token_cache_.size() > 4096) token_cache_.clear();
        token_cache_.insert_or_assign(std::string(id), VerifiedKey{key, std::string(secret)});
      }
    }
  }
  if (!key) {
    g_.denied_auth->inc(shard_);
    // Never echo the key itself.
    return Denial{401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"};
  }
  return acceptKey(key, user_header, t);
}

std::optional<Denial> GovWorker::acceptKey(const KeyInfo* key, std::string_view user_header,
                                           GovTicket& t) {
  if (key->rec.expires_ms != 0 && key->rec.expires_ms <= g_.nowMs()) {
    g_.denied_auth->inc(shard_);
    return Denial{401, "This API key has expired.", "invalid_request_error", "expired_api_key"};
  }
  t.key = key;
  t.team = key->rec.team;
  if (!user_header.empty()) {
    if (!key->rec.allow_user) {
      return Denial{403, "this API key may not set " + g_.config_.user_header, "permission_error",
                    "user_header_not_allowed"};
    }
    t.user = std::string(user_header.substr(0, 128));
    if (snapshot_) t.user_info = snapshot_->user(t.team, t.user);
  }
  return std::nullopt;
}

bool GovWorker::allowed(const GovTicket& t, std::string_view requested,
                        std::string_view canonical) const {
  if (!t.key) return true;
  auto matchAny = [&](const std::vector<std::string>& patterns) {
    if (patterns.empty()) return true;
    for (const auto& p : patterns) {
      if (globMatch(p, requested) || globMatch(p, canonical)) return true;
    }
    return false;
  };
  return matchAny(t.key->team->rec.models) && matchAny(t.key->rec.models) &&
         (!t.user_info || matchAny(t.user_info->rec.models));
}

Denial GovWorker::refusal(const GovTicket& t, std::span<const Charge> charges,
                          const Admission& a) const {
  if (a.refused == -2) {
    return Denial{
        503, "rate limiter unavailable (Redis unreachable and governance.redis_fallback is closed)",
        "server_error", "rate_limiter_unavailable"};
  }
  const Charge& c = charges[static_cast<size_t>(a.refused)];
  g_.limited->counter({std::string(scopeName(c.scope))})->inc(shard_);
  std::string who;
  switch (c.scope) {
    case Scope::kKey:
      who = "key " + (t.key ? t.key->rec.id : std::string("?"));
      break;
    case Scope::kUser:
      who = "user '" + t.user + "' of team '" + t.team + "'";
      break;
    case Scope::kModel:
      who = "model";
      break;
    case Scope::kDeployment:
      who = "deployment";
      break;
    default:
      who = "team '" + t.team + "'";
      break;
  }
  char wait[32];
  std::snprintf(wait, sizeof(wait), "%.3gs", static_cast<double>(a.retry_after_ms) / 1000.0);
  if (isQuotaScope(c.scope)) {
    const bool user = c.scope == Scope::kUserDaily || c.scope == Scope::kUserBudgetTokens ||
                      c.scope == Scope::kUserBudgetCost;
    const bool daily = c.scope == Scope::kDaily || c.scope == Scope::kUserDaily;
    const std::string unit = isCostScope(c.scope) ? " micro-USD" : " tokens";
    std::string what = std::string(scopeName(c.scope));
    if (user) what.erase(0, 5);  // "user daily quota" -> "daily quota"
    return Denial{
        429,
        (user ? "User '" + t.user + "' of team '" + t.team + "'" : "Team '" + t.team + "'") +
            " is over its " + what + ": limit " + std::to_string(c.limit) + unit + ", used " +
            std::to_string(a.used) + ", this request needs up to " + std::to_string(c.amount) +
            ". It resets in " + formatResetDuration(a.retry_after_ms) + ".",
        "insufficient_quota", daily ? "daily_quota_exceeded" : "budget_exceeded"};
  }
  const std::string what = c.tokens ? "tokens per min (TPM)" : "requests per min (RPM)";
  std::string msg = "Rate limit reached for " + who + " on " + what + ": Limit " +
                    std::to_string(c.limit) + ", Used " + std::to_string(a.used) + ", Requested " +
                    std::to_string(c.amount) + ".";
  if (c.amount > c.limit) {
    msg += " This request alone exceeds the limit (lower max_tokens).";
  } else {
    msg += std::string(" Please try again in ") + wait + ".";
  }
  return Denial{429, msg, c.tokens ? "tokens" : "requests", "rate_limit_exceeded"};
}

Admission GovWorker::reserveLocal(std::span<const Charge> charges) {
  const int64_t now = g_.nowMs();
  if (charges.empty()) {
    Admission a;
    a.admitted = true;
    a.stamp_ms = now;
    return a;
  }
  return g_.local_.reserve(charges, now);
}

Admission GovWorker::fallback(std::span<const Charge> charges, int64_t now) {
  g_.redis_fallbacks->inc(shard_);
  if (g_.config_.redis_fallback == "open") {
    Admission a;
    a.admitted = true;
    a.skipped = true;
    a.fallback = true;
    a.stamp_ms = now;
    a.remaining.assign(charges.size(), 0);
    a.reset_ms.assign(charges.size(), 0);
    return a;
  }
  if (g_.config_.redis_fallback == "closed") {
    Admission a;
    a.refused = -2;
    return a;
  }
  // Day/month counters start this period from this replica's share of the store's figures.
  const int64_t replicas = std::max(1, g_.config_.replicas);
  for (const Charge& c : charges) {
    if (const int64_t seed = c.seedAt(now); seed > 0) g_.local_.raiseTo(c, seed / replicas, now);
  }
  Admission a = g_.local_.reserve(charges, now, 1.0 / static_cast<double>(replicas));
  a.fallback = true;
  return a;
}

net::Task<Admission> GovWorker::reserveRemote(std::span<const Charge> charges) {
  if (charges.empty()) {
    Admission a;
    a.admitted = true;
    a.stamp_ms = g_.nowMs();
    co_return a;
  }
  // Away from the limits a lease of this worker's usually has room for all the charges.
  if (leases_.enabled()) {
    Admission a;
    if (leases_.take(charges, g_.nowMs(), a)) {
      g_.redis_lease_admissions->inc(shard_);
      co_return a;
    }
  }
  // Joins the next batch: the admissions queued before the loop gets back to the batch's posted
  // handler go to Redis in one script call. While kMaxCallsInFlight calls are out, new admissions
  // wait for one of them to come back (group commit): under load the calls grow instead of
  // multiplying, which keeps Redis's CPU per admission and its queue short.
  PendingAdmission p{charges, {}, false, net::asio::steady_timer(ctx_)};
  p.timer.expires_at(net::asio::steady_timer::time_point::max());
  batch_.push_back(&p);
  dispatchBatch();
  boost::system::error_code ec;
  co_await p.timer.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
  co_return std::move(p.result);
}

void GovWorker::dispatchBatch() {
  if (batch_posted_ || batch_.empty() || calls_in_flight_ >= kMaxCallsInFlight) return;
  batch_posted_ = true;
  net::asio::post(ctx_, [this, alive = alive_] {
    if (!*alive) return;
    batch_posted_ = false;
    std::vector<PendingAdmission*> batch;
    batch.swap(batch_);
    ++calls_in_flight_;
    net::spawn(ctx_, runBatch(std::move(batch)), "rate-limit admission");
  });
}

net::Task<void> GovWorker::runBatch(std::vector<PendingAdmission*> batch) {
  // Each waiter's frame lives until its timer is cancelled, which only happens here. However this
  // coroutine ends (even by an exception), the waiters not yet answered get the local fallback and
  // the next batch is dispatched, so a failure cannot stall this worker's admissions.
  struct Finish {
    GovWorker* w;
    const std::vector<PendingAdmission*>* batch;
    size_t answered = 0;  // batch[0, answered) may be gone already
    ~Finish() {
      w->answer(std::span(*batch).subspan(answered), w->g_.nowMs());
      --w->calls_in_flight_;
      w->dispatchBatch();
    }
  } finish{this, &batch};
  constexpr size_t kMaxPerCall = 128;
  for (size_t start = 0; start < batch.size(); start += kMaxPerCall) {
    const size_t n = std::min(kMaxPerCall, batch.size() - start);
    const int64_t now = g_.nowMs();
    std::vector<std::span<const Charge>> admissions;
    admissions.reserve(n);
    for (size_t i = 0; i < n; ++i) admissions.push_back(batch[start + i]->charges);
    // Leases ride along as admissions of their own, after the requests' (one counter each, so a
    // lease that does not fit refuses nothing else).
    std::vector<Charge> leases;
    leases_.plan(admissions, now, leases);
    int64_t lease_end = std::numeric_limits<int64_t>::max();
    for (const Charge& l : leases) admissions.push_back(std::span(&l, 1));
    const std::string call_id = call_prefix_ + std::to_string(++call_seq_);
    // g++ 12: no temporaries with destructors inside a co_await expression (name the task first).
    const auto sent = std::chrono::steady_clock::now();
    auto call = decide(admissions, now, call_id);
    Decisions d = co_await std::move(call);
    g_.redis_call_seconds->observe(
        shard_, std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count());
    g_.redis_call_admissions->observe(shard_, static_cast<double>(n));
    // Admissions left undecided (a call failed) have no figures: observe() passes them by.
    leases_.observe(admissions, d.decided, now);
    for (size_t k = 0; k < leases.size(); ++k) {
      if (!d.known[n + k]) continue;
      Admission& l = d.decided[n + k];
      l.key_ms = now;
      if (!l.admitted) continue;
      lease_end = std::min(lease_end, leases_.grant(leases[k], l, now, pending_));
      g_.redis_leases->inc(shard_);
    }
    for (size_t i = 0; i < n; ++i) {
      if (!d.known[i]) continue;
      PendingAdmission& p = *batch[start + i];
      p.result = std::move(d.decided[i]);
      p.result.key_ms = now;  // period keys were named with this clock; adjust must use the same
      p.done = true;
    }
    if (!d.failed) {
      if (g_.redis_down.exchange(false)) INFERA_LOG(g_.log, info, "Redis rate limiting is back");
    } else {
      // The admissions left undecided are decided locally below (answer()).
      g_.redis_errors->inc(shard_);
      if (!g_.redis_down.exchange(true)) {
        INFERA_LOG(g_.log, warn, "Redis unreachable for rate limits ({}); fallback: {}", d.why,
                   g_.config_.redis_fallback);
      }
    }
    answer(std::span(batch).subspan(start, n), now);
    finish.answered = start + n;
    // Once a second whatever happened (also while Redis is down) the leases are tended: counters
    // that went idle are dropped. A lease ending sooner than the timer is set for re-arms it.
    if (leases_.enabled() && now - leases_tended_ms_ >= 1000) {
      tendLeases();
    } else {
      scheduleFlush();  // a lease a grant replaced gave back what it had left
      armLeaseTimer(lease_end, g_.nowMs());
    }
  }
}

net::Task<GovWorker::Decisions> GovWorker::decide(std::vector<std::span<const Charge>> admissions,
                                                  int64_t now, std::string call_id) {
  Decisions out;
  out.decided.resize(admissions.size());
  out.known.assign(admissions.size(), 0);
  // One call per hash tag (Charge::tag): with one Redis, or when every counter has the same tag,
  // the admissions as they are; otherwise each admission's charges of each tag, copied.
  struct Part {
    std::string_view tag;
    std::vector<std::span<const Charge>> subs;  // its share of each admission it has charges of
    std::vector<std::vector<Charge>> owned;     // what subs point into, when split
    std::vector<std::vector<uint32_t>> index;   // per sub: its charges' places in the admission
    ReserveCall call;
    std::vector<Admission> decided;  // per sub
    bool failed = false;
  };
  std::vector<Part> parts;
  // Per admission: (part, sub) of each of its shares.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> where;
  std::optional<std::string_view> tag0;
  bool split = false;
  for (const auto& charges : admissions) {
    for (const Charge& c : charges) {
      if (!tag0) tag0 = c.tag;
      split = split || c.tag != *tag0;
    }
  }
  if (!split) {
    Part& p = parts.emplace_back();
    p.subs = admissions;
  } else {
    where.resize(admissions.size());
    for (size_t a = 0; a < admissions.size(); ++a) {
      for (size_t i = 0; i < admissions[a].size(); ++i) {
        const Charge& c = admissions[a][i];
        size_t pi = 0;
        while (pi < parts.size() && parts[pi].tag != c.tag) ++pi;
        if (pi == parts.size()) parts.emplace_back().tag = c.tag;
        Part& p = parts[pi];
        if (where[a].empty() || where[a].back().first != pi) {
          where[a].emplace_back(static_cast<uint32_t>(pi), static_cast<uint32_t>(p.owned.size()));
          p.owned.emplace_back();
          p.index.emplace_back();
        }
        p.owned.back().push_back(c);
        p.index.back().push_back(static_cast<uint32_t>(i));
      }
    }
    for (Part& p : parts) {
      for (const auto& o : p.owned) p.subs.emplace_back(o);
    }
  }
  std::vector<net::Task<Result<store::RedisReply>>> calls;
  // Each part's call has its own id: two tags can share a slot and so a summary hash (names that
  // differ only after a '}': Redis hashes up to the first one), where the markers of calls with
  // one id would meet.
  std::vector<std::string> ids(parts.size(), call_id);
  for (size_t pi = 1; pi < parts.size(); ++pi) ids[pi] += "/" + std::to_string(pi);
  for (size_t pi = 0; pi < parts.size(); ++pi) {
    Part& p = parts[pi];
    buildReserveCall(p.subs, now, ids[pi], p.call);
    calls.push_back(redis_->eval(reserveScript(), std::move(p.call.keys), std::move(p.call.args)));
  }
  auto sent = store::awaitAll(ctx_, std::move(calls));
  auto replies = co_await std::move(sent);
  for (size_t pi = 0; pi < parts.size(); ++pi) {
    Part& p = parts[pi];
    const auto& reply = replies[pi];
    // The call may have run although no usable answer came: it timed out after being sent, or
    // Redis answered something else than a decision.
    bool may_have_run = !reply.ok() && reply.status().code() == StatusCode::kDeadlineExceeded;
    std::string why = !reply.ok() ? reply.status().message() : std::string();
    if (reply.ok()) {
      auto decided = parseReserveReply(*reply, p.subs, p.call);
      if (decided.ok()) {
        p.decided = std::move(*decided);
        continue;
      }
      why = decided.status().message();
      may_have_run = true;
    }
    p.failed = true;
    if (!out.failed) out.why = why;
    out.failed = true;
    // Whatever the call did in Redis is undone.
    if (may_have_run) cancelCall(p.subs, now, ids[pi]);
  }
  if (!split) {
    if (!parts[0].failed) {
      out.decided = std::move(parts[0].decided);
      out.known.assign(admissions.size(), 1);
    }
    co_return out;
  }
  for (size_t a = 0; a < admissions.size(); ++a) {
    const auto& shares = where[a];
    bool failed = false, refused = false;
    for (const auto& [pi, si] : shares) {
      failed = failed || parts[pi].failed;
      refused = refused || (!parts[pi].failed && !parts[pi].decided[si].admitted);
    }
    if (shares.size() == 1) {
      // All of it in one part, its charges in their order: that part's decision.
      if (!failed) {
        out.decided[a] = std::move(parts[shares[0].first].decided[shares[0].second]);
        out.known[a] = 1;
      }
      continue;
    }
    const size_t nc = admissions[a].size();
    Admission m;
    m.remaining.assign(nc, 0);
    m.reset_ms.assign(nc, 0);
    std::vector<int64_t> stamps(nc, 0);
    bool first = true, differ = false;
    for (const auto& [pi, si] : shares) {
      if (parts[pi].failed) continue;
      const Admission& x = parts[pi].decided[si];
      const auto& index = parts[pi].index[si];
      for (size_t j = 0; j < index.size(); ++j) {
        if (j < x.remaining.size()) m.remaining[index[j]] = x.remaining[j];
        if (j < x.reset_ms.size()) m.reset_ms[index[j]] = x.reset_ms[j];
        stamps[index[j]] = x.stamp_ms;
      }
      if (first) {
        m.stamp_ms = x.stamp_ms;
        first = false;
      } else if (x.stamp_ms / 1000 != m.stamp_ms / 1000) {
        differ = true;
      }
      if (!x.admitted && m.refused < 0 && x.refused >= 0 &&
          static_cast<size_t>(x.refused) < index.size()) {
        m.refused = static_cast<int>(index[static_cast<size_t>(x.refused)]);
        m.used = x.used;
        m.retry_after_ms = x.retry_after_ms;
      }
    }
    if (!failed && !refused) {
      m.admitted = true;
      if (differ) m.stamps_ms = std::move(stamps);
      out.decided[a] = std::move(m);
      out.known[a] = 1;
      continue;
    }
    // Not admitted as a whole: the parts that were admitted give back what they reserved.
    for (const auto& [pi, si] : shares) {
      if (parts[pi].failed || !parts[pi].decided[si].admitted) continue;
      const auto charges = parts[pi].subs[si];
      std::vector<int64_t> back(charges.size());
      for (size_t j = 0; j < charges.size(); ++j) back[j] = -charges[j].amount;
      pending_.add(charges, back, parts[pi].decided[si].stamp_ms, now);
    }
    if (refused) {
      out.decided[a] = std::move(m);
      out.known[a] = 1;
    }
  }
  co_return out;
}

void GovWorker::cancelCall(std::span<const std::span<const Charge>> admissions, int64_t now,
                           const std::string& call_id) {
  // At most kMaxCancels undo tasks per worker at a time: a long outage must not pile them up.
  if (*cancels_ >= kMaxCancels) {
    g_.redis_errors->inc(shard_);
    return;
  }
  ++*cancels_;       // the task lowers it when it ends
  ReserveCall undo;  // the same arguments again (rebuilt here rather than kept for every call)
  buildReserveCall(admissions, now, call_id, undo);
  auto [listed, cancel] =
      unanswered_->add(cancelScript(), std::move(undo.keys), std::move(undo.args));
  net::spawn(ctx_,
             cancelRemote(ctx_, redis_, g_.redis_cancelled, g_.redis_errors, shard_, cancels_,
                          unanswered_, listed, std::move(cancel)),
             "rate-limit cancel");
}

void GovWorker::answer(std::span<PendingAdmission* const> waiters, int64_t now) {
  for (PendingAdmission* p : waiters) {
    if (!p->done) {
      p->result = fallback(p->charges, now);
      p->done = true;
    }
    p->timer.cancel();
  }
}

void GovWorker::adjust(std::span<const Charge> charges, std::span<const int64_t> delta,
                       const Admission& a) {
  bool any = false;
  for (int64_t d : delta) any = any || d != 0;
  if (!any || a.skipped || !a.admitted) return;
  if (!redis_ || a.fallback) {
    g_.local_.adjust(charges, delta, a.stamp_ms, g_.nowMs());
    return;
  }
  // A refund of a reservation made in the second of a live lease goes back into the lease.
  std::array<int64_t, 16> rest{};
  if (leases_.enabled() && charges.size() <= rest.size()) {
    const int64_t now = g_.nowMs();
    bool left = false;
    for (size_t i = 0; i < charges.size() && i < delta.size(); ++i) {
      rest[i] = delta[i];
      if (delta[i] < 0)
        rest[i] += leases_.giveBack(charges[i], -delta[i], a.stampOf(i), a.key_ms, now);
      left = left || rest[i] != 0;
    }
    if (!left) return;
    delta = std::span<const int64_t>(rest.data(), std::min(charges.size(), delta.size()));
  }
  // Batched: one script call carries the adjustments of every request that ended in the last
  // kAdjustBatchMs (or kAdjustBatchMax of them).
  if (a.stamps_ms.empty()) {
    pending_.add(charges, delta, a.stamp_ms, a.key_ms);
  } else {
    // A cluster admission whose parts were recorded in different seconds: each to its own.
    for (size_t i = 0; i < charges.size() && i < delta.size(); ++i)
      pending_.add(charges.subspan(i, 1), delta.subspan(i, 1), a.stampOf(i), a.key_ms);
  }
  scheduleFlush();
}

void GovWorker::scheduleFlush() {
  if (pending_.size() == 0) return;
  if (pending_.size() >= kAdjustBatchMax) {
    flushAdjustments();
  } else if (!flush_scheduled_) {
    flush_scheduled_ = true;
    flush_timer_.expires_after(std::chrono::milliseconds(kAdjustBatchMs));
    flush_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
      if (ec || !*alive) return;
      flush_scheduled_ = false;
      flushAdjustments();
    });
  }
}

void GovWorker::tendLeases() {
  const int64_t now = g_.nowMs();
  leases_tended_ms_ = now;
  const int64_t next = leases_.expire(now, pending_);
  scheduleFlush();
  armLeaseTimer(next, now);
}

void GovWorker::armLeaseTimer(int64_t next, int64_t now) {
  if (next == std::numeric_limits<int64_t>::max() || next >= lease_timer_at_) return;
  lease_timer_at_ = next;
  lease_timer_.expires_after(std::chrono::milliseconds(std::max<int64_t>(0, next - now)));
  lease_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !*alive) return;
    lease_timer_at_ = std::numeric_limits<int64_t>::max();
    tendLeases();
  });
}

void GovWorker::flushAdjustments() {
  std::vector<ScriptCall> calls;
  pending_.take(call_prefix_ + "a" + std::to_string(++adjust_seq_), calls);
  for (ScriptCall& c : calls) {
    auto [listed, call] = unanswered_->add(adjustScript(), std::move(c.keys), std::move(c.args));
    net::spawn(ctx_,
               adjustRemote(ctx_, redis_, g_.redis_adjust_retries, g_.redis_errors, shard_,
                            adjust_retrying_, unanswered_, listed, std::move(call)),
               "rate-limit adjust");
  }
}

net::Task<Result<store::RedisReply>> GovWorker::callUntilAnswered(
    net::asio::io_context& ctx, std::shared_ptr<store::AsyncRedis> redis,
    const store::RedisScript& script, const std::vector<std::string>& keys,
    const std::vector<std::string>& args, std::chrono::steady_clock::time_point give_up) {
  net::asio::steady_timer wait(ctx);
  for (;;) {
    auto call = redis->eval(script, keys, args);
    auto r = co_await std::move(call);
    if (r.ok() || std::chrono::steady_clock::now() >= give_up) co_return r;
    wait.expires_after(std::chrono::milliseconds(500));
    boost::system::error_code ec;
    co_await wait.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
    if (ec) co_return Status::cancelled("stopped");
  }
}

net::Task<void> GovWorker::cancelRemote(net::asio::io_context& ctx,
                                        std::shared_ptr<store::AsyncRedis> redis,
                                        obs::Counter* cancelled, obs::Counter* errors, int shard,
                                        std::shared_ptr<int> running,
                                        std::shared_ptr<Unanswered> unanswered, uint64_t listed,
                                        std::shared_ptr<const Unanswered::Call> call) {
  struct Done {
    std::shared_ptr<int> n;
    ~Done() { --*n; }
  } done{running};
  const Unlist unlist{std::move(unanswered), listed};
  auto sent = callUntilAnswered(ctx, redis, cancelScript(), call->keys, call->args,
                                std::chrono::steady_clock::now() + std::chrono::seconds(100));
  auto r = co_await std::move(sent);
  if (r.ok() && !r->isError()) {
    cancelled->inc(shard);
  } else {
    errors->inc(shard);  // refused by the script, or never answered
  }
}

net::Task<void> GovWorker::adjustRemote(net::asio::io_context& ctx,
                                        std::shared_ptr<store::AsyncRedis> redis,
                                        obs::Counter* retried, obs::Counter* errors, int shard,
                                        std::shared_ptr<int> retrying,
                                        std::shared_ptr<Unanswered> unanswered, uint64_t listed,
                                        std::shared_ptr<const Unanswered::Call> call) {
  const Unlist unlist{std::move(unanswered), listed};
  auto first = redis->eval(adjustScript(), call->keys, call->args);
  auto r = co_await std::move(first);
  if (!r.ok() && *retrying < kMaxRetrying) {
    ++*retrying;
    struct Done {
      std::shared_ptr<int> n;
      ~Done() { --*n; }
    } done{retrying};
    retried->inc(shard);
    auto again = callUntilAnswered(ctx, redis, adjustScript(), call->keys, call->args,
                                   std::chrono::steady_clock::now() + std::chrono::seconds(100));
    r = co_await std::move(again);
  }
  if (!r.ok() || r->isError()) errors->inc(shard);
}

namespace {
std::atomic<LocalCounterEntry*>* localMemo(const CounterName& c) { return &c.local; }
// A counter's hash tag on a Redis Cluster: its name without the ":r"/":t" (or ":d", ":bt", ...)
// that says what it counts, e.g. "t:<team>" for a team's, "m:<model>" for a model's.
std::string_view tagOf(std::string_view counter) { return counter.substr(0, counter.rfind(':')); }
std::atomic<LocalCounterEntry*>* localMemo(const std::string&) {
  return nullptr;
}  // named per request
}  // namespace

void GovWorker::buildCharges(GovTicket& t, const LimitedResource* resource,
                             const PriceConfig& price, bool count_resource) {
  t.reserved_tokens = t.est_prompt + t.max_completion;
  t.reserved_cost = static_cast<int64_t>(
      std::ceil(static_cast<double>(t.est_prompt) * price.prompt_per_1m +
                static_cast<double>(t.max_completion) * price.completion_per_1m));
  t.charges.clear();
  t.charges.reserve(8);  // one allocation for the usual key, team, user and model charges
  auto add = [&](const auto& counter, Window w, Scope s, bool tokens, int64_t limit,
                 int64_t amount) {
    if (limit <= 0) return;
    t.charges.push_back(Charge{counter, w, s, tokens, limit, amount, localMemo(counter)});
  };
  if (t.key) {
    const KeyInfo& k = *t.key;
    const TeamInfo& tm = *k.team;
    add(k.c_req, Window::kMinute, Scope::kKey, false, k.rec.rpm, 1);
    add(k.c_tok, Window::kMinute, Scope::kKey, true, k.rec.tpm, t.reserved_tokens);
    add(tm.c_req, Window::kMinute, Scope::kTeam, false, tm.rec.rpm, 1);
    add(tm.c_tok, Window::kMinute, Scope::kTeam, true, tm.rec.tpm, t.reserved_tokens);
    add(tm.c_day, Window::kDay, Scope::kDaily, true, tm.rec.daily_tokens, t.reserved_tokens);
    const Window bw = tm.rec.budget_period == "day" ? Window::kDay : Window::kMonth;
    if (const UserInfo* u = t.user_info) {
      // A user with a record: its own limits (the team's per-user ones where it sets none),
      // daily quota and budgets.
      add(u->c_req, Window::kMinute, Scope::kUser, false,
          u->rec.rpm > 0 ? u->rec.rpm : tm.rec.user_rpm, 1);
      add(u->c_tok, Window::kMinute, Scope::kUser, true,
          u->rec.tpm > 0 ? u->rec.tpm : tm.rec.user_tpm, t.reserved_tokens);
      add(u->c_day, Window::kDay, Scope::kUserDaily, true, u->rec.daily_tokens, t.reserved_tokens);
      add(u->c_budget_tokens, bw, Scope::kUserBudgetTokens, true, u->rec.budget_tokens,
          t.reserved_tokens);
      add(u->c_budget_cost, bw, Scope::kUserBudgetCost, true,
          static_cast<int64_t>(u->rec.budget_usd * 1e6), t.reserved_cost);
    } else if (!t.user.empty() && (tm.rec.user_rpm > 0 || tm.rec.user_tpm > 0)) {
      // Any other user of the team has the team's per-user limits (counter names owned by the
      // ticket).
      t.user_req = userCounter(tm.c_req, t.user);
      t.user_tok = userCounter(tm.c_tok, t.user);
      add(t.user_req, Window::kMinute, Scope::kUser, false, tm.rec.user_rpm, 1);
      add(t.user_tok, Window::kMinute, Scope::kUser, true, tm.rec.user_tpm, t.reserved_tokens);
    }
    add(tm.c_budget_tokens, bw, Scope::kBudgetTokens, true, tm.rec.budget_tokens,
        t.reserved_tokens);
    add(tm.c_budget_cost, bw, Scope::kBudgetCost, true,
        static_cast<int64_t>(tm.rec.budget_usd * 1e6), t.reserved_cost);
    if (remote()) {
      // Day/month counters Redis may have lost start from the store's figures.
      std::shared_ptr<const Governance::QuotaSeeds> seeds;
      const int64_t now = g_.nowMs();
      for (Charge& c : t.charges) {
        if (c.window == Window::kMinute) continue;
        if (!seeds) {
          std::lock_guard<std::mutex> lock(g_.seeds_mu_);
          seeds = g_.quota_seeds_;
          if (!seeds) break;
        }
        const auto it = seeds->find(redisCounterKey(c, now));
        if (it != seeds->end()) {
          c.seed = it->second;
          c.seed_period = periodId(c.window, now);
        }
      }
    }
  }
  if (resource && count_resource) {
    add(resource->req, Window::kMinute, Scope::kModel, false, resource->limits.rpm, 1);
    add(resource->tok, Window::kMinute, Scope::kModel, true, resource->limits.tpm,
        t.reserved_tokens);
  }
  if (cluster_) {
    // Redis Cluster: every counter of a team (its keys', its users', its own) has the team's hash
    // tag, so that one call reserves them in one slot; a model's counters have the model's.
    const std::string_view team = t.key ? tagOf(t.key->team->c_req.name) : std::string_view();
    for (Charge& c : t.charges) c.tag = c.scope == Scope::kModel ? tagOf(c.counter) : team;
  }
}

std::optional<Denial> GovWorker::settle(GovTicket& t) {
  if (!t.admission.admitted) return refusal(t, t.charges, t.admission);
  t.reserved = true;
  return std::nullopt;
}

bool GovWorker::buildResourceCharges(GovTicket& t, const LimitedResource& dep) {
  if (t.dep_reserved) {
    // A retry on another deployment: give the previous one back its request and tokens.
    std::vector<int64_t> back;
    for (const auto& c : t.dep_charges) back.push_back(-c.amount);
    adjust(t.dep_charges, back, t.dep_admission);
    t.dep_reserved = false;
  }
  t.dep_charges.clear();
  if (dep.limits.rpm > 0) {
    t.dep_charges.push_back({dep.req, Window::kMinute, Scope::kDeployment, false, dep.limits.rpm, 1,
                             localMemo(dep.req)});
  }
  if (dep.limits.tpm > 0) {
    t.dep_charges.push_back({dep.tok, Window::kMinute, Scope::kDeployment, true, dep.limits.tpm,
                             t.reserved_tokens, localMemo(dep.tok)});
  }
  if (cluster_) {
    for (Charge& c : t.dep_charges) c.tag = tagOf(c.counter);  // the deployment's own slot
  }
  return !t.dep_charges.empty();
}

bool GovWorker::settleResource(GovTicket& t) {
  if (!t.dep_admission.admitted) {
    if (t.dep_admission.refused >= 0) g_.limited->counter({"deployment"})->inc(shard_);
    return false;
  }
  t.dep_reserved = true;
  return true;
}

void GovWorker::finish(Grant& grant, UsageRecord&& r, const PriceConfig& price) {
  if (!grant) return;
  GovTicket& t = *grant.t_;
  r.ts_ms = g_.nowMs();
  const int64_t actual = r.prompt_tokens + r.completion_tokens;
  r.cost_usd = r.cached ? 0.0
                        : (static_cast<double>(r.prompt_tokens) * price.prompt_per_1m +
                           static_cast<double>(r.completion_tokens) * price.completion_per_1m) /
                              1e6;
  const int64_t cost_micro = static_cast<int64_t>(std::llround(r.cost_usd * 1e6));
  auto reconcile = [&](const std::vector<Charge>& charges, const Admission& a) {
    // What each charge over-reserved (negative) or under-reserved; requests count as reserved.
    std::array<int64_t, 16> small{};
    std::vector<int64_t> large;
    std::span<int64_t> d(small.data(), charges.size());
    if (charges.size() > small.size()) {
      large.assign(charges.size(), 0);
      d = large;
    }
    for (size_t i = 0; i < charges.size(); ++i) {
      if (!charges[i].tokens) {
        if (t.refused_by_deployments) d[i] = -charges[i].amount;
        continue;
      }
      d[i] = (isCostScope(charges[i].scope) ? cost_micro : actual) - charges[i].amount;
    }
    adjust(charges, d, a);
  };
  if (t.reserved) reconcile(t.charges, t.admission);
  if (t.dep_reserved) reconcile(t.dep_charges, t.dep_admission);
  r.key_id = t.key ? t.key->rec.id : "";
  r.team = t.team;
  r.user = t.user;
  auto team_it = usage_counters_.find(std::string_view(r.team));
  if (team_it == usage_counters_.end()) team_it = usage_counters_.emplace(r.team, ByModel{}).first;
  auto it = team_it->second.find(std::string_view(r.model));
  if (it == team_it->second.end()) {
    UsageCounters c{g_.usage_tokens->counter({r.team, r.model, "prompt"}),
                    g_.usage_tokens->counter({r.team, r.model, "completion"}),
                    g_.usage_requests->counter({r.team, r.model})};
    it = team_it->second.emplace(r.model, c).first;
  }
  it->second.prompt->inc(shard_, static_cast<double>(r.prompt_tokens));
  it->second.completion->inc(shard_, static_cast<double>(r.completion_tokens));
  it->second.requests->inc(shard_);
  g_.recordUsage(shard_, std::move(r));
}

void GovWorker::rateLimitHeaders(const GovTicket& t, std::vector<net::HttpHeader>& out) const {
  const Admission& a = t.admission;
  // Fail-open skipped the counters: there is nothing true to report.
  if ((!t.reserved && a.refused < 0) || a.skipped) return;
  // Per kind, the minute counter with the least left; on a refusal by a minute counter, that one
  // for its kind. (On a refusal `remaining` is what each counter has without this request.)
  const size_t n = std::min({t.charges.size(), a.remaining.size(), a.reset_ms.size()});
  int req = -1, tok = -1;
  for (size_t i = 0; i < n; ++i) {
    const Charge& c = t.charges[i];
    if (c.window != Window::kMinute) continue;
    int& slot = c.tokens ? tok : req;
    if (slot < 0 || a.remaining[i] < a.remaining[static_cast<size_t>(slot)])
      slot = static_cast<int>(i);
  }
  if (a.refused >= 0 && static_cast<size_t>(a.refused) < n &&
      t.charges[static_cast<size_t>(a.refused)].window == Window::kMinute) {
    (t.charges[static_cast<size_t>(a.refused)].tokens ? tok : req) = a.refused;
  }
  // Names per kind (0 requests, 1 tokens): limit, remaining, reset.
  static const std::string kNames[2][3] = {
      {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
       "x-ratelimit-reset-requests"},
      {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"}};
  out.reserve(out.size() + 9);
  auto emit = [&](int idx, int kind) {
    if (idx < 0) return;
    const size_t i = static_cast<size_t>(idx);
    out.push_back({kNames[kind][0], std::to_string(scaledLimit(t.charges[i].limit, a.share))});
    out.push_back({kNames[kind][1], std::to_string(a.remaining[i])});
    out.push_back({kNames[kind][2], formatResetDuration(a.reset_ms[i])});
  };
  emit(req, 0);
  emit(tok, 1);
  if (a.refused >= 0) appendRetryAfter(out, a.retry_after_ms);
}

// ---------------- the AccessWorker API ----------------

void GovWorker::setSnapshot(std::shared_ptr<const GovSnapshot> s) {
  if (snapshot_ && s && s->generation < snapshot_->generation) return;
  snapshot_ = std::move(s);
  token_cache_.clear();
  if (snapshot_ && static_cast<size_t>(shard_) < g_.worker_generations_.size()) {
    g_.worker_generations_[static_cast<size_t>(shard_)].store(snapshot_->generation,
                                                              std::memory_order_relaxed);
  }
}

std::optional<Denial> GovWorker::authenticate(std::string_view authorization, std::string_view user,
                                              Grant& grant) {
  grant.t_ = std::make_unique<GovTicket>();
  auto denied = authenticate(authorization, user, *grant.t_);
  if (denied) grant.t_.reset();  // not identified: no usage record
  return denied;
}

std::optional<Denial> GovWorker::authenticateKey(std::string_view key_id, std::string_view user,
                                                 Grant& grant) {
  grant.t_ = std::make_unique<GovTicket>();
  GovTicket& t = *grant.t_;
  t.snapshot = snapshot_;
  const KeyInfo* key = nullptr;
  if (snapshot_) {
    const auto it = snapshot_->by_id.find(std::string(key_id));
    if (it != snapshot_->by_id.end()) key = it->second;
  }
  std::optional<Denial> denied;
  if (key == nullptr) {
    g_.denied_auth->inc(shard_);
    denied = Denial{401, "The API key " + std::string(key_id) + " is no longer valid (revoked).",
                    "invalid_request_error", "invalid_api_key"};
  } else {
    denied = acceptKey(key, user, t);
  }
  if (denied) grant.t_.reset();
  return denied;
}

std::optional<Denial> GovWorker::checkAccess(const Grant& grant, ResourceKind kind,
                                             std::string_view requested,
                                             std::string_view canonical) const {
  if (!grant) return std::nullopt;
  // Model allow-lists are the teams', keys' and users' `models`; they cover registered models
  // too (a registered model is served under its name). Other kinds have no lists yet: any
  // authenticated caller may use them.
  if (kind != ResourceKind::kModel && kind != ResourceKind::kRegisteredModel) return std::nullopt;
  const GovTicket& t = *grant.t_;
  if (allowed(t, requested, canonical)) return std::nullopt;
  return Denial{403,
                "The key " + (t.key ? t.key->rec.id : std::string()) + " of team '" + t.team +
                    "' may not use model `" + std::string(canonical) + "`.",
                "permission_error", "model_not_allowed"};
}

net::Task<std::optional<Denial>> GovWorker::admit(Grant& grant, const AdmitRequest& request,
                                                  std::vector<net::HttpHeader>& headers) {
  GovTicket& t = *grant.t_;
  t.est_prompt = request.est_prompt_tokens;
  t.max_completion = request.max_completion_tokens;
  buildCharges(t, request.resource, request.price, request.count_resource);
  if (remote()) {
    auto reserve = reserveRemote(t.charges);
    t.admission = co_await std::move(reserve);
  } else {
    t.admission = reserveLocal(t.charges);
  }
  std::optional<Denial> refused = settle(t);
  rateLimitHeaders(t, headers);
  co_return refused;
}

net::Task<std::optional<ResourceFull>> GovWorker::admitResource(Grant& grant,
                                                                const LimitedResource& resource) {
  GovTicket& t = *grant.t_;
  if (!buildResourceCharges(t, resource)) co_return std::nullopt;
  if (remote()) {
    auto reserve = reserveRemote(t.dep_charges);
    t.dep_admission = co_await std::move(reserve);
  } else {
    t.dep_admission = reserveLocal(t.dep_charges);
  }
  if (settleResource(t)) co_return std::nullopt;
  ResourceFull full;
  const Admission& da = t.dep_admission;
  if (da.refused >= 0 && static_cast<size_t>(da.refused) < t.dep_charges.size()) {
    full.tokens = t.dep_charges[static_cast<size_t>(da.refused)].tokens;
    full.retry_after_ms = da.retry_after_ms;
  } else {
    full.retry_after_ms = -1;  // not a limit (the limiter is unavailable)
  }
  co_return full;
}

// ---------------- Grant ----------------

Grant::Grant() = default;
Grant::~Grant() = default;
Grant::Grant(Grant&&) noexcept = default;
Grant& Grant::operator=(Grant&&) noexcept = default;
void Grant::reset() { t_.reset(); }
Principal Grant::principal() const {
  if (!t_) return {};
  return {t_->key ? std::string_view(t_->key->rec.id) : std::string_view(), t_->team, t_->user};
}
bool Grant::reserved() const { return t_ && t_->reserved; }
int64_t Grant::estimatedPrompt() const { return t_ ? t_->est_prompt : 0; }
int64_t Grant::maxCompletion() const { return t_ ? t_->max_completion : 0; }
bool Grant::holdsResource() const { return t_ && t_->dep_reserved; }
void Grant::refusedByResources() {
  if (t_) t_->refused_by_deployments = true;
}

namespace {
std::string_view kindName(ResourceKind kind) {
  switch (kind) {
    case ResourceKind::kModel:
      return "model";
    case ResourceKind::kCollection:
      return "collection";
    case ResourceKind::kFeatureService:
      return "feature service";
    case ResourceKind::kRegisteredModel:
      return "registered model";
  }
  return "resource";
}
}  // namespace

// The team a caller owns resources as: its key's; a caller without a key (require_keys: false)
// owns nothing (what it creates is shared), so no team, "anonymous" or any other, gets its
// resources or lends it theirs.
namespace {
std::string_view ownerName(const Grant& grant) {
  const Principal p = grant.principal();
  return p.key_id.empty() ? std::string_view() : p.team;
}
}  // namespace

std::optional<Denial> checkOwner(const Grant& grant, ResourceKind kind, std::string_view name,
                                 std::string_view owner, Operation op) {
  if (!grant) return std::nullopt;
  const std::string_view team = ownerName(grant);
  if (!owner.empty() && owner == team) return std::nullopt;
  if (owner.empty()) {
    if (op != Operation::kManage) return std::nullopt;
    return Denial{403,
                  "the " + std::string(kindName(kind)) + " `" + std::string(name) +
                      "` is shared by the admin: only the admin port may drop it or change its "
                      "schema",
                  "permission_error", "shared_resource"};
  }
  return Denial{404, std::string(kindName(kind)) + " `" + std::string(name) + "` not found",
                "invalid_request_error", "not_found"};
}

std::string owningTeam(const Grant& grant) { return grant ? std::string(ownerName(grant)) : ""; }

bool visibleTo(const Grant& grant, std::string_view owner) {
  return !grant || owner.empty() || owner == ownerName(grant);
}

std::optional<Denial> AccessWorker::authenticateRequest(const net::HttpRequest& req, Grant& grant,
                                                        std::string_view key_header) {
  if (const net::InProcessCaller* caller = req.in_process) {
    return caller->key_id.empty() ? authenticate("", "", grant)
                                  : authenticateKey(caller->key_id, caller->user, grant);
  }
  const std::string_view authorization = req.header("authorization");
  if (authorization.empty() && !key_header.empty()) {
    const std::string_view key = req.header(key_header);
    if (!key.empty())
      return authenticate("Bearer " + std::string(key), req.header(userHeader()), grant);
  }
  return authenticate(authorization, req.header(userHeader()), grant);
}

void appendRetryAfter(std::vector<net::HttpHeader>& out, int64_t retry_after_ms) {
  out.push_back(
      {"retry-after", std::to_string(std::max<int64_t>(1, (retry_after_ms + 999) / 1000))});
  out.push_back({"retry-after-ms", std::to_string(std::max<int64_t>(1, retry_after_ms))});
}

}  // namespace infera::access
