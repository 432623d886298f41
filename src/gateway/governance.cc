#include "gateway/governance.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/clock.h"
#include "core/log.h"
#include "core/text.h"

namespace infera::gateway {

using nlohmann::json;

namespace {

int64_t nowMs() { return SystemClock::instance().unixMillis(); }


// A per-store secret kept beside the SQLite file (mode 0600), created on first start.
Result<std::string> fileSecret(const std::string& db_path) {
  const std::string path = db_path + ".key-secret";
  std::ifstream in(path);
  if (in) {
    std::string s;
    std::getline(in, s);
    if (s.size() >= 32) return s;
    return Status::failedPrecondition(path + " holds no usable secret (need >= 32 characters)");
  }
  const std::string s = randomToken(48);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Status::internal("cannot create " + path + ": " + std::strerror(errno));
  const std::string line = s + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!ok) return Status::internal("cannot write " + path);
  return s;
}

// "30s", "15m", "12h", "7d" -> ms; plain digits are ms.
std::optional<int64_t> parseDuration(std::string_view s) {
  if (s.empty()) return std::nullopt;
  int64_t mult = 1;
  const char unit = s.back();
  if (unit == 's') mult = 1000;
  if (unit == 'm') mult = 60'000;
  if (unit == 'h') mult = 3'600'000;
  if (unit == 'd') mult = 86'400'000;
  if (mult != 1 || unit == 's') s.remove_suffix(1);
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
    if (v > (1LL << 50)) return std::nullopt;
  }
  return v * mult;
}

// Query-string decoding: '+' is a space; a malformed escape leaves the text as it came.
std::string urlDecode(std::string_view s) {
  std::string spaced(s);
  for (char& c : spaced) {
    if (c == '+') c = ' ';
  }
  std::string out;
  return percentDecode(spaced, out) ? out : spaced;
}

std::unordered_map<std::string, std::string> parseQuery(std::string_view q) {
  std::unordered_map<std::string, std::string> out;
  size_t i = 0;
  while (i < q.size()) {
    size_t amp = q.find('&', i);
    if (amp == std::string_view::npos) amp = q.size();
    const std::string_view kv = q.substr(i, amp - i);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      out[urlDecode(kv)] = "";
    } else {
      out[urlDecode(kv.substr(0, eq))] = urlDecode(kv.substr(eq + 1));
    }
    i = amp + 1;
  }
  return out;
}

AdminReply errorReply(int status, const std::string& message, std::string_view code) {
  const std::string_view type = status == 401 || status == 403 ? "authentication_error"
                                : status >= 500               ? "server_error"
                                                              : "invalid_request_error";
  return {status, net::errorJson(message, type, code)};
}

AdminReply statusReply(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound: return errorReply(404, s.message(), "not_found");
    case StatusCode::kAlreadyExists: return errorReply(409, s.message(), "already_exists");
    case StatusCode::kInvalidArgument: return errorReply(400, s.message(), "invalid_request");
    case StatusCode::kFailedPrecondition: return errorReply(409, s.message(), "conflict");
    case StatusCode::kUnavailable: return errorReply(503, s.message(), "store_unavailable");
    default: return errorReply(500, s.message(), "internal_error");
  }
}

json teamToJson(const TeamRecord& t) {
  json j = fieldsJson(t);
  j["created_ms"] = t.created_ms;
  j["updated_ms"] = t.updated_ms;
  return j;
}

json userToJson(const UserRecord& u) {
  json j = fieldsJson(u);
  j["created_ms"] = u.created_ms;
  j["updated_ms"] = u.updated_ms;
  return j;
}

json keyToJson(const KeyRecord& k) {
  json j = fieldsJson(k);  // never the secret, salt or hash
  const int64_t now = nowMs();
  j["created_ms"] = k.created_ms;
  j["revoked_ms"] = k.revoked_ms;
  j["rotated_from"] = k.rotated_from;
  j["state"] = k.revoked_ms ? "revoked" : (k.expires_ms && k.expires_ms <= now) ? "expired" : "active";
  return j;
}

// Reads typed fields from a JSON body with clear errors.
struct BodyReader {
  const json& j;
  std::string error;
  template <typename T>
  bool get(const char* name, T& out) {
    if (!j.contains(name) || j[name].is_null()) return false;
    try {
      out = j[name].get<T>();
      return true;
    } catch (const std::exception&) {
      if (error.empty()) error = std::string("field '") + name + "' has the wrong type";
      return false;
    }
  }
  bool models(std::vector<std::string>& out) {
    if (!j.contains("models")) return false;
    if (j["models"].is_string()) {
      out = splitPatterns(j["models"].get<std::string>());
      return true;
    }
    return get("models", out);
  }
};

Status checkNonNegative(const char* name, int64_t v) {
  if (v < 0) return Status::invalidArgument(std::string(name) + " must be >= 0");
  return Status::ok();
}

Status readTeam(const json& j, TeamRecord& t, bool create) {
  BodyReader r{j, {}};
  if (create && !r.get("name", t.name)) return Status::invalidArgument("field 'name' is required");
  if (create && (t.name.empty() || t.name.size() > 128 || t.name.find_first_of(" ,/\":") != std::string::npos)) {
    return Status::invalidArgument(
        "team name must be 1-128 characters without spaces, commas, slashes, colons or quotes");
  }
  r.models(t.models);
  r.get("rpm", t.rpm);
  r.get("tpm", t.tpm);
  r.get("daily_tokens", t.daily_tokens);
  r.get("user_rpm", t.user_rpm);
  r.get("user_tpm", t.user_tpm);
  r.get("budget_tokens", t.budget_tokens);
  r.get("budget_usd", t.budget_usd);
  r.get("budget_period", t.budget_period);
  if (!r.error.empty()) return Status::invalidArgument(r.error);
  INFERA_RETURN_IF_ERROR(checkNonNegative("rpm", t.rpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("tpm", t.tpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("daily_tokens", t.daily_tokens));
  INFERA_RETURN_IF_ERROR(checkNonNegative("user_rpm", t.user_rpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("user_tpm", t.user_tpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("budget_tokens", t.budget_tokens));
  if (t.budget_usd < 0) return Status::invalidArgument("budget_usd must be >= 0");
  if (t.budget_period != "day" && t.budget_period != "month") {
    return Status::invalidArgument("budget_period must be 'day' or 'month'");
  }
  return Status::ok();
}

Status readUser(const json& j, UserRecord& u, bool create) {
  BodyReader r{j, {}};
  if (create && !r.get("team", u.team)) return Status::invalidArgument("field 'team' is required");
  if (create && !r.get("name", u.name)) return Status::invalidArgument("field 'name' is required");
  if (create && (u.name.empty() || u.name.size() > 128 || u.name.find_first_of("\n/") != std::string::npos)) {
    return Status::invalidArgument("user name must be 1-128 characters without slashes or newlines");
  }
  r.models(u.models);
  r.get("rpm", u.rpm);
  r.get("tpm", u.tpm);
  r.get("daily_tokens", u.daily_tokens);
  r.get("budget_tokens", u.budget_tokens);
  r.get("budget_usd", u.budget_usd);
  if (!r.error.empty()) return Status::invalidArgument(r.error);
  INFERA_RETURN_IF_ERROR(checkNonNegative("rpm", u.rpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("tpm", u.tpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("daily_tokens", u.daily_tokens));
  INFERA_RETURN_IF_ERROR(checkNonNegative("budget_tokens", u.budget_tokens));
  if (u.budget_usd < 0) return Status::invalidArgument("budget_usd must be >= 0");
  return Status::ok();
}

Status readKey(const json& j, KeyRecord& k, bool create) {
  BodyReader r{j, {}};
  if (create && !r.get("team", k.team)) return Status::invalidArgument("field 'team' is required");
  r.get("name", k.name);
  r.models(k.models);
  r.get("rpm", k.rpm);
  r.get("tpm", k.tpm);
  r.get("allow_user", k.allow_user);
  std::string expires_in;
  if (r.get("expires_in", expires_in)) {
    const auto d = parseDuration(expires_in);
    if (!d || *d <= 0) return Status::invalidArgument("expires_in must be a duration like 30d, 12h, 15m");
    k.expires_ms = nowMs() + *d;
  }
  r.get("expires_ms", k.expires_ms);
  if (!r.error.empty()) return Status::invalidArgument(r.error);
  INFERA_RETURN_IF_ERROR(checkNonNegative("rpm", k.rpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("tpm", k.tpm));
  return Status::ok();
}

}  // namespace

// ---------------- ResponseCache ----------------

std::optional<ResponseCache::Entry> ResponseCache::get(const std::string& key, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  if (it->second->entry.expires_ms <= now_ms) {
    bytes_ -= static_cast<int64_t>(it->second->key.size() + it->second->entry.body.size());
    lru_.erase(it->second);
    index_.erase(it);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->entry;
}

void ResponseCache::put(const std::string& key, Entry e) {
  const int64_t size = static_cast<int64_t>(key.size() + e.body.size());
  if (size > max_entry_ || size > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(key);
  if (it != index_.end()) {
    bytes_ -= static_cast<int64_t>(it->second->key.size() + it->second->entry.body.size());
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front(Node{key, std::move(e)});
  index_[key] = lru_.begin();
  bytes_ += size;
  while (bytes_.load() > max_bytes_ && !lru_.empty()) {
    const Node& last = lru_.back();
    bytes_ -= static_cast<int64_t>(last.key.size() + last.entry.body.size());
    index_.erase(last.key);
    lru_.pop_back();
  }
}

size_t ResponseCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

std::string cacheKey(std::string_view model, std::string_view body, std::string_view team) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {};
  j.erase("model");
  j.erase("user");
  j.erase("stream_options");
  // nlohmann's object is a std::map: dump() writes keys sorted and without whitespace.
  std::string key(model);
  key += '\n';
  if (!team.empty()) {
    key += "team ";
    key += team;
    key += '\n';
  }
  key += j.dump();
  return key;
}

// ---------------- Governance ----------------

Result<std::unique_ptr<Governance>> Governance::start(const GovernanceConfig& config, obs::MetricsRegistry& metrics,
                                                      int workers) {
  std::unique_ptr<Governance> g(new Governance(config, workers));
  INFERA_RETURN_IF_ERROR(g->init(metrics));
  return g;
}

Status Governance::init(obs::MetricsRegistry& metrics) {
  log = componentLogger("governance");
  const bool sqlite = config_.store.rfind("sqlite:", 0) == 0;
  key_secret_ = envOr("INFERA_KEY_SECRET", config_.key_secret);
  if (key_secret_.empty()) {
    if (!sqlite) {
      return Status::failedPrecondition(
          "governance.key_secret (or INFERA_KEY_SECRET) is required with a shared PostgreSQL store: every replica "
          "must hash keys with the same secret");
    }
    INFERA_ASSIGN_OR_RETURN(key_secret_, fileSecret(config_.store.substr(7)));
  }
  admin_token_ = envOr("INFERA_ADMIN_TOKEN", config_.admin_token);
  auto cs = MetaStore::open(config_.store);
  if (!cs.ok()) return cs.status().withContext("opening governance store " + redactUrl(config_.store));
  control_store_ = std::move(*cs);
  auto as = MetaStore::open(config_.store);
  if (!as.ok()) return as.status().withContext("opening governance store " + redactUrl(config_.store));
  admin_store_ = std::move(*as);
  if (config_.cache.enabled) {
    cache_ = std::make_unique<ResponseCache>(config_.cache.max_bytes, config_.cache.max_entry_bytes);
  }

  usage_tokens = metrics.counterFamily("infera_usage_tokens_total", "Tokens used, by team, model and kind.",
                                       {"team", "model", "kind"});
  usage_requests = metrics.counterFamily("infera_usage_requests_total", "Governed requests, by team and model.",
                                         {"team", "model"});
  denied_auth = metrics.counterFamily("infera_auth_failures_total", "Requests refused for a missing or bad key.")
                    ->counter();
  limited = metrics.counterFamily("infera_rate_limited_total", "Requests refused by a limit, by scope.", {"scope"});
  redis_fallbacks = metrics.counterFamily("infera_ratelimit_fallback_total",
                                          "Admissions decided without Redis (unreachable), by the fallback rule.")
                        ->counter();
  redis_errors = metrics.counterFamily("infera_ratelimit_redis_errors_total", "Failed Redis rate-limit calls.")
                     ->counter();
  redis_cancelled = metrics
                        .counterFamily("infera_ratelimit_redis_cancelled_calls_total",
                                       "Admission calls whose answer never came, undone in Redis (refunded if "
                                       "they ran, else cancelled before they could).")
                        ->counter();
  seed_refreshes = metrics
                       .counterFamily("infera_ratelimit_quota_refreshes_total",
                                      "Times the store's day/month quota figures (where a counter Redis lost "
                                      "starts) were rebuilt.")
                       ->counter();
  redis_adjust_retries = metrics
                             .counterFamily("infera_ratelimit_redis_adjust_retries_total",
                                            "Reconciliation calls re-sent because Redis did not answer (each applies "
                                            "once: the script records the call's id).")
                             ->counter();
  redis_call_seconds = metrics
                           .histogramFamily("infera_ratelimit_redis_call_seconds",
                                            "Redis admission script calls: time from send to reply.", {},
                                            obs::MetricsRegistry::latencyBuckets())
                           ->histogram();
  redis_call_admissions = metrics
                              .histogramFamily("infera_ratelimit_redis_call_admissions",
                                               "Admissions decided by one Redis script call.", {},
                                               {1, 2, 4, 8, 16, 32, 64, 128})
                              ->histogram();
  redis_leases = metrics
                     .counterFamily("infera_ratelimit_redis_leases_total",
                                    "Leases granted: capacity a worker reserved in Redis ahead of its requests.")
                     ->counter();
  redis_lease_admissions = metrics
                               .counterFamily("infera_ratelimit_redis_lease_admissions_total",
                                              "Admissions decided from a lease, without a Redis call.")
                               ->counter();
  usage_dropped = metrics.counterFamily("infera_usage_write_failures_total",
                                        "Usage batches that could not be written (kept and retried).")
                      ->counter();
  cache_hits = metrics.counterFamily("infera_cache_hits_total", "Response cache hits.")->counter();
  cache_misses = metrics.counterFamily("infera_cache_misses_total", "Response cache misses.")->counter();
  metrics.gaugeFamily("infera_cache_bytes", "Bytes held by the response cache.")->setCallback([this] {
    return cache_ ? static_cast<double>(cache_->bytes()) : 0.0;
  });
  metrics
      .gaugeFamily("infera_ratelimit_local_counters",
                   "In-process rate-limit counters held (those of names seen only in requests go once idle).")
      ->setCallback([this] { return static_cast<double>(local_.size()); });
  metrics.gaugeFamily("infera_governance_generation", "Key/team snapshot generation in use.")->setCallback([this] {
    auto s = snapshot();
    return s ? static_cast<double>(s->generation) : 0.0;
  });

  INFERA_RETURN_IF_ERROR(sync(true));
  control_ = std::thread([this] { controlLoop(); });
  INFERA_LOG(log, info, "governance on: store {}, limits {}, {} keys, {} teams", sqlite ? config_.store : "postgresql",
             config_.redis.empty() ? "in-process" : "redis (fallback " + config_.redis_fallback + ")",
             snapshot()->keys.size(), snapshot()->teams.size());
  return Status::ok();
}

Governance::~Governance() {
  {
    std::lock_guard<std::mutex> lock(control_mu_);
    stop_ = true;
  }
  control_cv_.notify_all();
  if (control_.joinable()) control_.join();
}

void Governance::setPublisher(std::function<void(std::shared_ptr<const GovSnapshot>)> fn) {
  std::lock_guard<std::mutex> lock(publish_mu_);
  publish_ = std::move(fn);
}

std::shared_ptr<const GovSnapshot> Governance::snapshot() const {
  std::lock_guard<std::mutex> lock(snap_mu_);
  return snapshot_;
}

Status Governance::sync(bool force) {
  std::lock_guard<std::mutex> lock(store_mu_);
  INFERA_ASSIGN_OR_RETURN(const int64_t gen, control_store_->generation());
  if (!force && gen == generation_) return Status::ok();
  INFERA_ASSIGN_OR_RETURN(auto teams, control_store_->teams());
  INFERA_ASSIGN_OR_RETURN(auto keys, control_store_->keys());
  INFERA_ASSIGN_OR_RETURN(auto users, control_store_->users());
  auto snap = buildSnapshot(gen, std::move(teams), std::move(keys), std::move(users));
  generation_ = gen;
  seedQuotas(*snap);
  {
    std::lock_guard<std::mutex> snap_lock(snap_mu_);
    snapshot_ = snap;
  }
  // Held while publishing, so setPublisher(nullptr) waits for a publish in progress.
  std::lock_guard<std::mutex> publish_lock(publish_mu_);
  if (publish_) publish_(snap);
  INFERA_LOG(log, debug, "governance snapshot generation {} ({} keys)", gen, snap->keys.size());
  return Status::ok();
}

void Governance::seedQuotas(const GovSnapshot& s) {
  // Local period counters start from the store's usage so a restart does not reset a daily quota
  // or a budget. Redis keeps its own counters, and gets the store's figures for those it lost.
  if (!config_.redis.empty()) {
    // Off the admin path: the control thread refreshes them on its next pass.
    seeds_stale_ = true;
    return;
  }
  const int64_t now = nowMs();
  eachQuotaUse(s, [&](const Charge& c, int64_t used) { local_.seed(c, used, now); });
}

void Governance::refreshQuotaSeeds(const GovSnapshot& s) {
  const int64_t now = nowMs();
  auto seeds = std::make_shared<QuotaSeeds>();
  const bool complete = eachQuotaUse(s, [&](const Charge& c, int64_t used) {
    if (used > 0) seeds->emplace(redisCounterKey(c, now), used);
  });
  if (!complete) {
    INFERA_LOG(log, warn, "quota figures for Redis not refreshed: a usage query failed (keeping the last ones)");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(seeds_mu_);
    quota_seeds_ = std::move(seeds);
  }
  seed_refreshes->inc(0);
}

bool Governance::eachQuotaUse(const GovSnapshot& s, const std::function<void(const Charge&, int64_t used)>& fn) {
  const int64_t now = nowMs();
  bool complete = true;
  // Counter `name` (as the snapshot names it) with the tokens, or the cost in micro-USD, that
  // `team` (or one user of it) used since the period began.
  auto seed = [&](const CounterName& name, Window w, bool cost, const std::string& team, const std::string* user) {
    auto used = control_store_->teamUsageSince(team, periodStartMs(w, now), user);
    if (!used.ok()) {
      complete = false;
      return;
    }
    Charge c;
    c.counter = name;
    c.window = w;
    c.local = &name.local;
    fn(c, cost ? static_cast<int64_t>(used->second * 1e6) : used->first);
  };
  for (const auto& t : s.teams) {
    const TeamRecord& r = t->rec;
    const Window bw = r.budget_period == "day" ? Window::kDay : Window::kMonth;
    if (r.daily_tokens > 0) seed(t->c_day, Window::kDay, false, r.name, nullptr);
    if (r.budget_tokens > 0) seed(t->c_budget_tokens, bw, false, r.name, nullptr);
    if (r.budget_usd > 0) seed(t->c_budget_cost, bw, true, r.name, nullptr);
  }
  for (const auto& u : s.users) {
    const UserRecord& r = u->rec;
    const Window bw = u->team->rec.budget_period == "day" ? Window::kDay : Window::kMonth;
    if (r.daily_tokens > 0) seed(u->c_day, Window::kDay, false, r.team, &r.name);
    if (r.budget_tokens > 0) seed(u->c_budget_tokens, bw, false, r.team, &r.name);
    if (r.budget_usd > 0) seed(u->c_budget_cost, bw, true, r.team, &r.name);
  }
  return complete;
}

void Governance::controlLoop() {
  const auto sync_every = std::chrono::milliseconds(config_.sync_interval_ms);
  const auto flush_every = std::chrono::milliseconds(config_.usage_flush_ms);
  auto next_sync = std::chrono::steady_clock::now() + sync_every;
  auto next_flush = std::chrono::steady_clock::now() + flush_every;
  auto next_prune = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  auto next_sweep = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  bool store_down = false;
  for (;;) {
    bool poked = false;
    {
      std::unique_lock<std::mutex> lock(control_mu_);
      control_cv_.wait_until(lock, std::min({next_sync, next_flush, next_prune, next_sweep}),
                             [&] { return stop_ || poke_; });
      if (stop_) break;
      poked = poke_;
      poke_ = false;
    }
    const auto now = std::chrono::steady_clock::now();
    if (poked || now >= next_sync) {
      next_sync = now + sync_every;
      const Status s = sync(false);
      if (!s.isOk() && !store_down) INFERA_LOG(log, warn, "governance store unreachable, keeping the last snapshot: {}", s.message());
      if (s.isOk() && store_down) INFERA_LOG(log, info, "governance store reachable again");
      store_down = !s.isOk();
    }
    if (now >= next_flush) {
      next_flush = now + flush_every;
      (void)flushUsage();
    }
    if (now >= next_sweep) {
      // In-process counters of names seen only in requests (users without a record) go once idle.
      next_sweep = now + std::chrono::minutes(1);
      const size_t swept = local_.sweep(nowMs());
      if (swept > 0) INFERA_LOG(log, debug, "removed {} idle rate-limit counters", swept);
      seeds_stale_ = true;  // kept within a minute of the store
    }
    if (!config_.redis.empty() && seeds_stale_.exchange(false)) {
      // The figures a day/month counter Redis lost starts from.
      std::shared_ptr<const GovSnapshot> snap = snapshot();
      std::lock_guard<std::mutex> lock(store_mu_);
      if (snap) refreshQuotaSeeds(*snap);
    }
    if (now >= next_prune) {
      // One bounded step (an hour of records) per pass, so flushes and snapshot syncs keep their
      // pace; while there is more to remove the next step follows shortly.
      const auto removed = pruneUsageStep();
      if (!removed.ok()) INFERA_LOG(log, warn, "usage retention: {}", removed.status().message());
      if (removed.ok() && *removed > 0) INFERA_LOG(log, debug, "usage retention removed {} rows", *removed);
      next_prune = now + (removed.ok() && *removed > 0 ? std::chrono::milliseconds(100)
                                                        : std::chrono::milliseconds(3'600'000));
    }
  }
  (void)flushUsage();
}

Result<int64_t> Governance::pruneUsageStep() {
  constexpr int64_t kDay = 86'400'000;
  const int64_t now = nowMs();
  const int64_t records = config_.usage_retention_days > 0 ? now - config_.usage_retention_days * kDay : 0;
  const int64_t rollups =
      config_.usage_rollup_retention_days > 0 ? now - config_.usage_rollup_retention_days * kDay : 0;
  if (records == 0 && rollups == 0) return int64_t{0};
  std::lock_guard<std::mutex> lock(store_mu_);
  return control_store_->pruneUsage(records, rollups);
}

Result<int64_t> Governance::pruneUsage() {
  int64_t total = 0;
  for (;;) {
    INFERA_ASSIGN_OR_RETURN(const int64_t removed, pruneUsageStep());
    if (removed == 0) return total;
    total += removed;
  }
}

void Governance::recordUsage(int shard, UsageRecord&& r) {
  UsageBuffer& b = usage_buffers_[static_cast<size_t>(shard)];
  std::lock_guard<std::mutex> lock(b.mu);
  b.records.push_back(std::move(r));
}

Status Governance::flushUsage() {
  std::lock_guard<std::mutex> flush_lock(flush_mu_);
  std::vector<UsageRecord> batch;
  for (auto& b : usage_buffers_) {
    std::lock_guard<std::mutex> lock(b.mu);
    if (batch.empty()) {
      batch.swap(b.records);
    } else {
      std::move(b.records.begin(), b.records.end(), std::back_inserter(batch));
      b.records.clear();
    }
  }
  if (batch.empty()) return Status::ok();
  Status s;
  {
    std::lock_guard<std::mutex> lock(store_mu_);
    s = control_store_->insertUsage(batch);
  }
  if (!s.isOk()) {
    usage_dropped->inc(0);
    INFERA_LOG(log, warn, "usage write of {} records failed (kept for the next flush): {}", batch.size(), s.message());
    // Put them back in front of newer records (bounded: beyond 1M records the oldest are dropped).
    UsageBuffer& b = usage_buffers_[0];
    std::lock_guard<std::mutex> lock(b.mu);
    if (batch.size() < 1'000'000) {
      std::move(b.records.begin(), b.records.end(), std::back_inserter(batch));
      b.records.swap(batch);
    }
  }
  return s;
}

bool Governance::isGovernancePath(std::string_view path) {
  return path.starts_with("/admin/teams") || path.starts_with("/admin/keys") || path.starts_with("/admin/users") ||
         path.starts_with("/admin/usage") || path.starts_with("/admin/audit");
}

std::optional<AdminReply> Governance::refuseAdmin(std::string_view authorization) const {
  if (admin_token_.empty()) {
    return errorReply(403, "the admin API is disabled: set INFERA_ADMIN_TOKEN or governance.admin_token",
                      "admin_disabled");
  }
  std::string_view given = authorization;
  if (given.size() > 7 && (given.substr(0, 7) == "Bearer " || given.substr(0, 7) == "bearer ")) given.remove_prefix(7);
  if (!constantTimeEqual(given, admin_token_)) {
    return errorReply(401, "missing or wrong admin token (Authorization: Bearer <token>)", "invalid_admin_token");
  }
  return std::nullopt;
}

Status Governance::auditEvent(std::string_view actor, const std::string& action, const std::string& target,
                              const std::string& detail) {
  std::lock_guard<std::mutex> lock(admin_mu_);
  return admin_store_->recordEvent(actor.empty() ? "admin" : std::string(actor), action, target, detail);
}

AdminReply Governance::admin(std::string_view method, std::string_view target, std::string_view body,
                             std::string_view authorization, std::string_view actor) {
  if (auto refused = refuseAdmin(authorization)) return std::move(*refused);
  std::lock_guard<std::mutex> lock(admin_mu_);
  AdminReply r = adminLocked(method, target, body, actor.empty() ? "admin" : actor);
  if ((method == "POST" || method == "PATCH" || method == "DELETE") && r.status < 300) {
    // This replica's workers get the change before the answer leaves (so a key works as soon as
    // it is shown); other replicas poll for it.
    const Status s = sync(false);
    if (!s.isOk()) INFERA_LOG(log, warn, "snapshot refresh after an admin change failed: {}", s.message());
  }
  return r;
}

AdminReply Governance::adminLocked(std::string_view method, std::string_view target, std::string_view body,
                                   std::string_view actor_view) {
  const std::string actor(actor_view);
  MetaStore& st = *admin_store_;
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const auto query = parseQuery(q == std::string_view::npos ? std::string_view() : target.substr(q + 1));
  std::vector<std::string_view> parts;
  {
    size_t i = 1;
    while (i < path.size()) {
      size_t j = path.find('/', i);
      if (j == std::string_view::npos) j = path.size();
      if (j > i) parts.push_back(path.substr(i, j - i));
      i = j + 1;
    }
  }
  // parts[0] == "admin"
  auto parseBody = [&](json& out) -> std::optional<AdminReply> {
    out = body.empty() ? json::object() : json::parse(body, nullptr, false);
    if (out.is_discarded() || !out.is_object()) return errorReply(400, "request body must be a JSON object", "invalid_json");
    return std::nullopt;
  };
  const std::string_view res = parts.size() > 1 ? parts[1] : "";
  const std::string id = parts.size() > 2 ? urlDecode(parts[2]) : "";
  const std::string_view verb = parts.size() > 3 ? parts[3] : "";
  if (parts.size() > 4) return errorReply(404, "unknown admin path", "not_found");

  if (res == "teams") {
    if (id.empty() && method == "GET") {
      auto teams = st.teams();
      if (!teams.ok()) return statusReply(teams.status());
      json arr = json::array();
      for (const auto& t : *teams) arr.push_back(teamToJson(t));
      return {200, json{{"teams", arr}}.dump()};
    }
    if (id.empty() && method == "POST") {
      json j;
      if (auto e = parseBody(j)) return *e;
      TeamRecord t;
      if (Status s = readTeam(j, t, true); !s.isOk()) return statusReply(s);
      if (Status s = st.createTeam(t, actor); !s.isOk()) return statusReply(s);
      auto created = st.team(t.name);
      return {201, teamToJson(created.ok() && *created ? **created : t).dump()};
    }
    if (!id.empty() && verb.empty()) {
      auto cur = st.team(id);
      if (!cur.ok()) return statusReply(cur.status());
      if (!*cur) return errorReply(404, "no team '" + id + "'", "not_found");
      if (method == "GET") return {200, teamToJson(**cur).dump()};
      if (method == "PATCH") {
        json j;
        if (auto e = parseBody(j)) return *e;
        TeamRecord t = **cur;
        if (Status s = readTeam(j, t, false); !s.isOk()) return statusReply(s);
        if (Status s = st.updateTeam(t, actor); !s.isOk()) return statusReply(s);
        auto updated = st.team(id);
        return {200, teamToJson(updated.ok() && *updated ? **updated : t).dump()};
      }
      if (method == "DELETE") {
        if (Status s = st.deleteTeam(id, actor); !s.isOk()) return statusReply(s);
        return {200, json{{"deleted", id}}.dump()};
      }
    }
    return errorReply(405, "unsupported method for " + std::string(path), "method_not_allowed");
  }
  if (res == "users") {
    // /admin/users[?team=T] (GET list, POST create), /admin/users/<team>/<name> (GET, PATCH, DELETE).
    if (id.empty() && method == "GET") {
      const auto it = query.find("team");
      auto users = st.users(it == query.end() ? "" : it->second);
      if (!users.ok()) return statusReply(users.status());
      json arr = json::array();
      for (const auto& u : *users) arr.push_back(userToJson(u));
      return {200, json{{"users", arr}}.dump()};
    }
    if (id.empty() && method == "POST") {
      json j;
      if (auto e = parseBody(j)) return *e;
      UserRecord u;
      if (Status s = readUser(j, u, true); !s.isOk()) return statusReply(s);
      if (Status s = st.createUser(u, actor); !s.isOk()) return statusReply(s);
      auto created = st.user(u.team, u.name);
      return {201, userToJson(created.ok() && *created ? **created : u).dump()};
    }
    if (!id.empty() && !verb.empty()) {
      const std::string name = urlDecode(verb);
      auto cur = st.user(id, name);
      if (!cur.ok()) return statusReply(cur.status());
      if (!*cur) return errorReply(404, "no user '" + name + "' in team '" + id + "'", "not_found");
      if (method == "GET") return {200, userToJson(**cur).dump()};
      if (method == "PATCH") {
        json j;
        if (auto e = parseBody(j)) return *e;
        UserRecord u = **cur;
        if (Status s = readUser(j, u, false); !s.isOk()) return statusReply(s);
        if (Status s = st.updateUser(u, actor); !s.isOk()) return statusReply(s);
        auto updated = st.user(id, name);
        return {200, userToJson(updated.ok() && *updated ? **updated : u).dump()};
      }
      if (method == "DELETE") {
        if (Status s = st.deleteUser(id, name, actor); !s.isOk()) return statusReply(s);
        return {200, json{{"deleted", id + "/" + name}}.dump()};
      }
    }
    return errorReply(405, "unsupported method for " + std::string(path), "method_not_allowed");
  }
  if (res == "keys") {
    if (id.empty() && method == "GET") {
      const auto it = query.find("team");
      auto keys = st.keys(it == query.end() ? "" : it->second);
      if (!keys.ok()) return statusReply(keys.status());
      json arr = json::array();
      for (const auto& k : *keys) arr.push_back(keyToJson(k));
      return {200, json{{"keys", arr}}.dump()};
    }
    if (id.empty() && method == "POST") {
      json j;
      if (auto e = parseBody(j)) return *e;
      KeyRecord k;
      if (Status s = readKey(j, k, true); !s.isOk()) return statusReply(s);
      auto token = st.createKey(k, key_secret_, actor);
      if (!token.ok()) return statusReply(token.status());
      json out = keyToJson(k);
      out["key"] = *token;
      out["note"] = "store this key now: it is shown only once";
      return {201, out.dump()};
    }
    if (!id.empty()) {
      auto cur = st.key(id);
      if (!cur.ok()) return statusReply(cur.status());
      if (!*cur) return errorReply(404, "no key '" + id + "'", "not_found");
      if (verb.empty() && method == "GET") return {200, keyToJson(**cur).dump()};
      if (verb.empty() && method == "PATCH") {
        json j;
        if (auto e = parseBody(j)) return *e;
        KeyRecord k = **cur;
        if (Status s = readKey(j, k, false); !s.isOk()) return statusReply(s);
        if (Status s = st.updateKey(k, actor); !s.isOk()) return statusReply(s);
        return {200, keyToJson(k).dump()};
      }
      if (verb == "revoke" && method == "POST") {
        if (Status s = st.revokeKey(id, actor); !s.isOk()) return statusReply(s);
        auto k = st.key(id);
        return {200, keyToJson(k.ok() && *k ? **k : **cur).dump()};
      }
      if (verb == "rotate" && method == "POST") {
        json j;
        if (auto e = parseBody(j)) return *e;
        int64_t grace_ms = 86'400'000;
        std::string grace;
        if (j.contains("grace") && j["grace"].is_string()) {
          const auto d = parseDuration(j["grace"].get<std::string>());
          if (!d) return errorReply(400, "grace must be a duration like 24h, 15m or 0s", "invalid_request");
          grace_ms = *d;
        }
        KeyRecord created;
        auto token = st.rotateKey(id, grace_ms, key_secret_, actor, created);
        if (!token.ok()) return statusReply(token.status());
        json out = keyToJson(created);
        out["key"] = *token;
        out["old_key_expires_ms"] = created.created_ms + grace_ms;
        out["note"] = "store this key now: it is shown only once";
        return {201, out.dump()};
      }
    }
    return errorReply(405, "unsupported method for " + std::string(path), "method_not_allowed");
  }
  if (res == "usage" && method == "GET" && id.empty()) {
    UsageQuery uq;
    auto get = [&](const char* k) {
      const auto it = query.find(k);
      return it == query.end() ? std::string() : it->second;
    };
    uq.team = get("team");
    uq.key_id = get("key");
    uq.model = get("model");
    uq.user = get("user");
    if (!get("granularity").empty()) uq.granularity = get("granularity");
    if (!get("group_by").empty()) uq.group_by = splitPatterns(get("group_by"));
    if (get("group_by") == "none") uq.group_by.clear();
    const std::string since = get("since"), from = get("from"), to = get("to");
    if (!since.empty()) {
      const auto d = parseDuration(since);
      if (!d) return errorReply(400, "since must be a duration like 1h or 7d", "invalid_request");
      uq.from_ms = nowMs() - *d;
    }
    try {
      if (!from.empty()) uq.from_ms = std::stoll(from);
      if (!to.empty()) uq.to_ms = std::stoll(to);
    } catch (const std::exception&) {
      return errorReply(400, "from and to are unix milliseconds", "invalid_request");
    }
    auto rows = st.queryUsage(uq);
    if (!rows.ok()) return statusReply(rows.status());
    return {200, "{\"granularity\":\"" + uq.granularity + "\",\"rows\":" + *rows + "}"};
  }
  if (res == "audit" && method == "GET" && id.empty()) {
    int64_t since_ms = 0;
    int limit = 100;
    const auto it = query.find("since");
    if (it != query.end()) {
      const auto d = parseDuration(it->second);
      if (!d) return errorReply(400, "since must be a duration like 1h or 7d", "invalid_request");
      since_ms = nowMs() - *d;
    }
    const auto lt = query.find("limit");
    if (lt != query.end()) limit = std::clamp(std::atoi(lt->second.c_str()), 1, 10'000);
    auto rows = st.audit(since_ms, limit);
    if (!rows.ok()) return statusReply(rows.status());
    json arr = json::array();
    for (const auto& a : *rows) {
      json d = json::parse(a.detail, nullptr, false);
      arr.push_back({{"ts_ms", a.ts_ms}, {"actor", a.actor}, {"action", a.action}, {"target", a.target},
                     {"detail", d.is_discarded() ? json(a.detail) : d}});
    }
    return {200, json{{"audit", arr}}.dump()};
  }
  return errorReply(404, "unknown admin path " + std::string(path), "not_found");
}

// ---------------- GovWorker ----------------

GovWorker::GovWorker(Governance& g, int shard, net::asio::io_context& ctx)
    : g_(g),
      shard_(shard),
      ctx_(ctx),
      snapshot_(g.snapshot()),
      cache_per_team_(g.config_.cache.scope == "team"),
      flush_timer_(ctx),
      leases_(g.config_.redis.empty() ? 0 : g.config_.redis_lease_ms,
              g.config_.replicas * static_cast<int>(g.usage_buffers_.size())),
      lease_timer_(ctx) {
  std::random_device rd;
  call_prefix_ = std::to_string((static_cast<uint64_t>(rd()) << 32) | rd()) + "-" + std::to_string(shard) + "-";
  if (!g_.config_.redis.empty()) {
    auto addr = store::parseRedisUrl(g_.config_.redis);
    if (addr.ok()) {
      store::AsyncRedisOptions o;
      o.command_timeout = std::chrono::milliseconds(g_.config_.redis_timeout_ms);
      o.connect_timeout = std::chrono::milliseconds(std::max<int64_t>(g_.config_.redis_timeout_ms, 200));
      redis_ = std::shared_ptr<store::AsyncRedis>(store::AsyncRedis::create(ctx_, *addr, o));
    }
  }
}

GovWorker::~GovWorker() {
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
  std::vector<std::string> keys, args;
  pending_.take(call_prefix_ + "a" + std::to_string(++adjust_seq_), keys, args);
  if (!keys.empty()) unanswered_->add(adjustScript(), std::move(keys), std::move(args));
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
      const auto timeout = std::chrono::milliseconds(std::clamp<int64_t>(g_.config_.redis_timeout_ms, 200, 1'000));
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
                 "rate limits: {} reconciliation/cancel calls (leases given back included) not sent to Redis at "
                 "shutdown: {}",
                 unsent, s.message());
    }
  }
  redis_->close();
}

const GovernanceConfig& GovWorker::config() const { return g_.config_; }
ResponseCache* GovWorker::cache() { return g_.cache_.get(); }
void GovWorker::countCache(bool hit) { (hit ? g_.cache_hits : g_.cache_misses)->inc(shard_); }

namespace {

std::string redisCacheKey(const std::string& key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  // "cache2": entries carry their expiry first (an earlier version's "infera:cache:" entries did not).
  return "infera:cache2:" + toHex(digest, sizeof(digest));
}

}  // namespace

net::Task<std::optional<ResponseCache::Entry>> GovWorker::cacheGet(const std::string& key) {
  const int64_t now = nowMs();
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
  ResponseCache::Entry e;
  e.expires_ms = std::atoll(v.c_str());
  if (e.expires_ms <= now) co_return std::nullopt;
  e.content_type = v.substr(x + 1, a - x - 1);
  e.prompt_tokens = std::atoll(v.c_str() + a + 1);
  e.completion_tokens = std::atoll(v.c_str() + b + 1);
  e.body = v.substr(c + 1);
  g_.cache_->put(key, e);
  std::optional<ResponseCache::Entry> out(std::move(e));
  co_return out;
}

void GovWorker::cachePut(const std::string& key, ResponseCache::Entry e) {
  if (redis_ && g_.config_.cache.redis && static_cast<int64_t>(e.body.size()) <= g_.config_.cache.max_entry_bytes) {
    std::string v = std::to_string(e.expires_ms) + "\n" + e.content_type + "\n" + std::to_string(e.prompt_tokens) +
                    "\n" + std::to_string(e.completion_tokens) + "\n" + e.body;
    const int64_t ttl = std::max<int64_t>(1, e.expires_ms - nowMs());
    std::vector<std::string> argv = {"SET", redisCacheKey(key), std::move(v), "PX", std::to_string(ttl)};
    struct Put {
      static net::Task<void> run(std::shared_ptr<store::AsyncRedis> r, std::vector<std::string> args) {
        auto set = r->command(std::move(args));
        auto ignored = co_await std::move(set);
        (void)ignored;  // best effort: the local tier has it
      }
    };
    net::spawn(ctx_, Put::run(redis_, std::move(argv)), "cache put");
  }
  g_.cache_->put(key, std::move(e));
}

std::optional<GovError> GovWorker::authenticate(std::string_view authorization, std::string_view user_header,
                                                GovTicket& t) {
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
    return GovError{401,
                    "You didn't provide an API key. You need to provide your API key in an Authorization header "
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
          constantTimeEqual(hashSecret(g_.key_secret_, it->second->rec.salt, secret), it->second->rec.hash)) {
        key = it->second;
        if (token_cache_.size() > 4096) token_cache_.clear();
        token_cache_.insert_or_assign(std::string(id), VerifiedKey{key, std::string(secret)});
      }
    }
  }
  if (!key) {
    g_.denied_auth->inc(shard_);
    // Never echo the key itself.
    return GovError{401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"};
  }
  if (key->rec.expires_ms != 0 && key->rec.expires_ms <= nowMs()) {
    g_.denied_auth->inc(shard_);
    return GovError{401, "This API key has expired.", "invalid_request_error", "expired_api_key"};
  }
  t.key = key;
  t.team = key->rec.team;
  if (!user_header.empty()) {
    if (!key->rec.allow_user) {
      return GovError{403, "this API key may not set " + g_.config_.user_header, "permission_error",
                      "user_header_not_allowed"};
    }
    t.user = std::string(user_header.substr(0, 128));
    if (snapshot_) t.user_info = snapshot_->user(t.team, t.user);
  }
  return std::nullopt;
}

bool GovWorker::allowed(const GovTicket& t, std::string_view requested, std::string_view canonical) const {
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

GovError GovWorker::refusal(const GovTicket& t, std::span<const Charge> charges, const Admission& a) const {
  if (a.refused == -2) {
    return GovError{503, "rate limiter unavailable (Redis unreachable and governance.redis_fallback is closed)",
                    "server_error", "rate_limiter_unavailable"};
  }
  const Charge& c = charges[static_cast<size_t>(a.refused)];
  g_.limited->counter({std::string(scopeName(c.scope))})->inc(shard_);
  std::string who;
  switch (c.scope) {
    case Scope::kKey: who = "key " + (t.key ? t.key->rec.id : std::string("?")); break;
    case Scope::kUser: who = "user '" + t.user + "' of team '" + t.team + "'"; break;
    case Scope::kModel: who = "model"; break;
    case Scope::kDeployment: who = "deployment"; break;
    default: who = "team '" + t.team + "'"; break;
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
    return GovError{429,
                    (user ? "User '" + t.user + "' of team '" + t.team + "'" : "Team '" + t.team + "'") +
                        " is over its " + what + ": limit " + std::to_string(c.limit) + unit + ", used " +
                        std::to_string(a.used) + ", this request needs up to " + std::to_string(c.amount) +
                        ". It resets in " + formatResetDuration(a.retry_after_ms) + ".",
                    "insufficient_quota", daily ? "daily_quota_exceeded" : "budget_exceeded"};
  }
  const std::string what = c.tokens ? "tokens per min (TPM)" : "requests per min (RPM)";
  std::string msg = "Rate limit reached for " + who + " on " + what + ": Limit " + std::to_string(c.limit) + ", Used " +
                    std::to_string(a.used) + ", Requested " + std::to_string(c.amount) + ".";
  if (c.amount > c.limit) {
    msg += " This request alone exceeds the limit (lower max_tokens).";
  } else {
    msg += std::string(" Please try again in ") + wait + ".";
  }
  return GovError{429, msg, c.tokens ? "tokens" : "requests", "rate_limit_exceeded"};
}

Admission GovWorker::reserveLocal(std::span<const Charge> charges) {
  const int64_t now = nowMs();
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
    a.stamp_ms = nowMs();
    co_return a;
  }
  // Away from the limits a lease of this worker's usually has room for all the charges.
  if (leases_.enabled()) {
    Admission a;
    if (leases_.take(charges, nowMs(), a)) {
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
      w->answer(std::span(*batch).subspan(answered), nowMs());
      --w->calls_in_flight_;
      w->dispatchBatch();
    }
  } finish{this, &batch};
  constexpr size_t kMaxPerCall = 128;
  for (size_t start = 0; start < batch.size(); start += kMaxPerCall) {
    const size_t n = std::min(kMaxPerCall, batch.size() - start);
    const int64_t now = nowMs();
    std::vector<std::span<const Charge>> admissions;
    admissions.reserve(n);
    for (size_t i = 0; i < n; ++i) admissions.push_back(batch[start + i]->charges);
    // Leases ride along as admissions of their own, after the requests' (one counter each, so a
    // lease that does not fit refuses nothing else).
    std::vector<Charge> leases;
    leases_.plan(admissions, now, leases);
    int64_t lease_end = std::numeric_limits<int64_t>::max();
    for (const Charge& l : leases) admissions.push_back(std::span(&l, 1));
    ReserveCall rc;
    const std::string call_id = call_prefix_ + std::to_string(++call_seq_);
    buildReserveCall(admissions, now, call_id, rc);
    // g++ 12: no temporaries with destructors inside a co_await expression (name the task first).
    const auto sent = std::chrono::steady_clock::now();
    auto call = redis_->eval(reserveScript(), std::move(rc.keys), std::move(rc.args));
    auto reply = co_await std::move(call);
    g_.redis_call_seconds->observe(shard_, std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count());
    g_.redis_call_admissions->observe(shard_, static_cast<double>(n));
    bool ok = reply.ok();
    std::string why = !reply.ok() ? reply.status().message() : std::string();
    // The call may have run although no usable answer came: it timed out after being sent, or
    // Redis answered something else than a decision.
    bool may_have_run = !reply.ok() && reply.status().code() == StatusCode::kDeadlineExceeded;
    if (ok) {
      auto decided = parseReserveReply(*reply, admissions, rc);
      ok = decided.ok();
      if (!ok) why = decided.status().message();
      may_have_run = !ok;
      if (ok) {
        leases_.observe(admissions, *decided, now);
        for (size_t k = 0; k < leases.size(); ++k) {
          Admission& l = (*decided)[n + k];
          l.key_ms = now;
          if (!l.admitted) continue;
          lease_end = std::min(lease_end, leases_.grant(leases[k], l, now, pending_));
          g_.redis_leases->inc(shard_);
        }
      }
      for (size_t i = 0; i < n && ok; ++i) {
        PendingAdmission& p = *batch[start + i];
        p.result = std::move((*decided)[i]);
        p.result.key_ms = now;  // period keys were named with this clock; adjust must use the same
        p.done = true;
      }
    }
    if (ok) {
      if (g_.redis_down.exchange(false)) INFERA_LOG(g_.log, info, "Redis rate limiting is back");
    } else {
      g_.redis_errors->inc(shard_);
      // These admissions are decided locally below; whatever the call did in Redis is undone (at
      // most kMaxCancels undo tasks per worker at a time: a long outage must not pile them up).
      if (may_have_run) {
        if (*cancels_ < kMaxCancels) {
          ++*cancels_;  // the task lowers it when it ends
          ReserveCall undo;  // the same arguments again (rebuilt here rather than kept for every call)
          buildReserveCall(admissions, now, call_id, undo);
          auto [listed, cancel] = unanswered_->add(cancelScript(), std::move(undo.keys), std::move(undo.args));
          net::spawn(ctx_,
                     cancelRemote(ctx_, redis_, g_.redis_cancelled, g_.redis_errors, shard_, cancels_,
                                  unanswered_, listed, std::move(cancel)),
                     "rate-limit cancel");
        } else {
          g_.redis_errors->inc(shard_);
        }
      }
      if (!g_.redis_down.exchange(true)) {
        INFERA_LOG(g_.log, warn, "Redis unreachable for rate limits ({}); fallback: {}", why,
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
      armLeaseTimer(lease_end, nowMs());
    }
  }
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

void GovWorker::adjust(std::span<const Charge> charges, std::span<const int64_t> delta, const Admission& a) {
  bool any = false;
  for (int64_t d : delta) any = any || d != 0;
  if (!any || a.skipped || !a.admitted) return;
  if (!redis_ || a.fallback) {
    g_.local_.adjust(charges, delta, a.stamp_ms, nowMs());
    return;
  }
  // A refund of a reservation made in the second of a live lease goes back into the lease.
  std::array<int64_t, 16> rest{};
  if (leases_.enabled() && charges.size() <= rest.size()) {
    const int64_t now = nowMs();
    bool left = false;
    for (size_t i = 0; i < charges.size() && i < delta.size(); ++i) {
      rest[i] = delta[i];
      if (delta[i] < 0) rest[i] += leases_.giveBack(charges[i], -delta[i], a.stamp_ms, a.key_ms, now);
      left = left || rest[i] != 0;
    }
    if (!left) return;
    delta = std::span<const int64_t>(rest.data(), std::min(charges.size(), delta.size()));
  }
  // Batched: one script call carries the adjustments of every request that ended in the last
  // kAdjustBatchMs (or kAdjustBatchMax of them).
  pending_.add(charges, delta, a.stamp_ms, a.key_ms);
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
  const int64_t now = nowMs();
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
  std::vector<std::string> keys, args;
  pending_.take(call_prefix_ + "a" + std::to_string(++adjust_seq_), keys, args);
  if (keys.empty()) return;
  auto [listed, call] = unanswered_->add(adjustScript(), std::move(keys), std::move(args));
  net::spawn(ctx_,
             adjustRemote(ctx_, redis_, g_.redis_adjust_retries, g_.redis_errors, shard_, adjust_retrying_,
                          unanswered_, listed, std::move(call)),
             "rate-limit adjust");
}

net::Task<Result<store::RedisReply>> GovWorker::callUntilAnswered(net::asio::io_context& ctx,
                                                                   std::shared_ptr<store::AsyncRedis> redis,
                                                                   const store::RedisScript& script,
                                                                   const std::vector<std::string>& keys,
                                                                   const std::vector<std::string>& args,
                                                                   std::chrono::steady_clock::time_point give_up) {
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

net::Task<void> GovWorker::cancelRemote(net::asio::io_context& ctx, std::shared_ptr<store::AsyncRedis> redis,
                                        obs::Counter* cancelled, obs::Counter* errors, int shard,
                                        std::shared_ptr<int> running, std::shared_ptr<Unanswered> unanswered,
                                        uint64_t listed, std::shared_ptr<const Unanswered::Call> call) {
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

net::Task<void> GovWorker::adjustRemote(net::asio::io_context& ctx, std::shared_ptr<store::AsyncRedis> redis,
                                        obs::Counter* retried, obs::Counter* errors, int shard,
                                        std::shared_ptr<int> retrying, std::shared_ptr<Unanswered> unanswered,
                                        uint64_t listed, std::shared_ptr<const Unanswered::Call> call) {
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
std::atomic<LocalCounterEntry*>* localMemo(const std::string&) { return nullptr; }  // named per request
}  // namespace

void GovWorker::buildCharges(GovTicket& t, const Route& route, const PriceConfig& price, bool count_model) {
  t.reserved_tokens = t.est_prompt + t.max_completion;
  t.reserved_cost = static_cast<int64_t>(std::ceil(static_cast<double>(t.est_prompt) * price.prompt_per_1m +
                                                   static_cast<double>(t.max_completion) * price.completion_per_1m));
  t.charges.clear();
  t.charges.reserve(8);  // one allocation for the usual key, team, user and model charges
  auto add = [&](const auto& counter, Window w, Scope s, bool tokens, int64_t limit, int64_t amount) {
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
      add(u->c_req, Window::kMinute, Scope::kUser, false, u->rec.rpm > 0 ? u->rec.rpm : tm.rec.user_rpm, 1);
      add(u->c_tok, Window::kMinute, Scope::kUser, true, u->rec.tpm > 0 ? u->rec.tpm : tm.rec.user_tpm,
          t.reserved_tokens);
      add(u->c_day, Window::kDay, Scope::kUserDaily, true, u->rec.daily_tokens, t.reserved_tokens);
      add(u->c_budget_tokens, bw, Scope::kUserBudgetTokens, true, u->rec.budget_tokens, t.reserved_tokens);
      add(u->c_budget_cost, bw, Scope::kUserBudgetCost, true, static_cast<int64_t>(u->rec.budget_usd * 1e6),
          t.reserved_cost);
    } else if (!t.user.empty() && (tm.rec.user_rpm > 0 || tm.rec.user_tpm > 0)) {
      // Any other user of the team has the team's per-user limits (counter names owned by the ticket).
      t.user_req = userCounter(tm.c_req, t.user);
      t.user_tok = userCounter(tm.c_tok, t.user);
      add(t.user_req, Window::kMinute, Scope::kUser, false, tm.rec.user_rpm, 1);
      add(t.user_tok, Window::kMinute, Scope::kUser, true, tm.rec.user_tpm, t.reserved_tokens);
    }
    add(tm.c_budget_tokens, bw, Scope::kBudgetTokens, true, tm.rec.budget_tokens, t.reserved_tokens);
    add(tm.c_budget_cost, bw, Scope::kBudgetCost, true, static_cast<int64_t>(tm.rec.budget_usd * 1e6),
        t.reserved_cost);
    if (remote()) {
      // Day/month counters Redis may have lost start from the store's figures.
      std::shared_ptr<const Governance::QuotaSeeds> seeds;
      const int64_t now = nowMs();
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
  if (count_model) {
    add(route.limit_req, Window::kMinute, Scope::kModel, false, route.limits.rpm, 1);
    add(route.limit_tok, Window::kMinute, Scope::kModel, true, route.limits.tpm, t.reserved_tokens);
  }
}

std::optional<GovError> GovWorker::settle(GovTicket& t) {
  if (!t.admission.admitted) return refusal(t, t.charges, t.admission);
  t.reserved = true;
  return std::nullopt;
}

bool GovWorker::buildDeploymentCharges(GovTicket& t, const Deployment& dep) {
  if (t.dep_reserved) {
    // A retry on another deployment: give the previous one back its request and tokens.
    std::vector<int64_t> back;
    for (const auto& c : t.dep_charges) back.push_back(-c.amount);
    adjust(t.dep_charges, back, t.dep_admission);
    t.dep_reserved = false;
  }
  t.dep_charges.clear();
  if (dep.limits.rpm > 0) {
    t.dep_charges.push_back(
        {dep.limit_req, Window::kMinute, Scope::kDeployment, false, dep.limits.rpm, 1, localMemo(dep.limit_req)});
  }
  if (dep.limits.tpm > 0) {
    t.dep_charges.push_back(
        {dep.limit_tok, Window::kMinute, Scope::kDeployment, true, dep.limits.tpm, t.reserved_tokens,
         localMemo(dep.limit_tok)});
  }
  return !t.dep_charges.empty();
}

bool GovWorker::settleDeployment(GovTicket& t) {
  if (!t.dep_admission.admitted) {
    if (t.dep_admission.refused >= 0) g_.limited->counter({"deployment"})->inc(shard_);
    return false;
  }
  t.dep_reserved = true;
  return true;
}

void GovWorker::finish(GovTicket& t, UsageRecord&& r, const PriceConfig& price) {
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
    if (slot < 0 || a.remaining[i] < a.remaining[static_cast<size_t>(slot)]) slot = static_cast<int>(i);
  }
  if (a.refused >= 0 && static_cast<size_t>(a.refused) < n &&
      t.charges[static_cast<size_t>(a.refused)].window == Window::kMinute) {
    (t.charges[static_cast<size_t>(a.refused)].tokens ? tok : req) = a.refused;
  }
  // Names per kind (0 requests, 1 tokens): limit, remaining, reset.
  static const std::string kNames[2][3] = {
      {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"},
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

void appendRetryAfter(std::vector<net::HttpHeader>& out, int64_t retry_after_ms) {
  out.push_back({"retry-after", std::to_string(std::max<int64_t>(1, (retry_after_ms + 999) / 1000))});
  out.push_back({"retry-after-ms", std::to_string(std::max<int64_t>(1, retry_after_ms))});
}

}  // namespace infera::gateway
