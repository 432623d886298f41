#include "access/internal/governance.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/log.h"
#include "core/text.h"

namespace infera::access {
namespace {

// The first line of the file at `path` (at least `min_size` characters), or, when there is no
// such file, a random secret written to it (mode 0600, created exclusively).
Result<std::string> fileSecret(const std::string& path, size_t min_size) {
  if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);  // a failure shows in open()
  }
  std::ifstream in(path);
  if (in) {
    std::string s;
    std::getline(in, s);
    while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
    if (s.size() >= min_size) return s;
    return Status::failedPrecondition(
        path + " holds no usable secret (need >= " + std::to_string(min_size) + " characters)");
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

}  // namespace

Result<std::unique_ptr<Access>> Access::start(const AccessConfig& config,
                                              obs::MetricsRegistry& metrics, int workers,
                                              const Clock& clock) {
  INFERA_ASSIGN_OR_RETURN(auto g, Governance::start(config, metrics, workers, clock));
  return std::unique_ptr<Access>(std::move(g));
}

std::vector<std::string> Access::restartNeeded(const AccessConfig& running,
                                               const AccessConfig& next) {
  std::vector<std::string> out;
  if (running.enabled != next.enabled) out.push_back("governance (on or off)");
  if (running.store != next.store) out.push_back("governance.store");
  if (running.redis != next.redis) out.push_back("governance.redis");
  return out;
}

Result<std::unique_ptr<Governance>> Governance::start(const AccessConfig& config,
                                                      obs::MetricsRegistry& metrics, int workers,
                                                      const Clock& clock) {
  std::unique_ptr<Governance> g(new Governance(config, workers, clock));
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
          "governance.key_secret (or INFERA_KEY_SECRET) is required with a shared PostgreSQL "
          "store: every replica "
          "must hash keys with the same secret");
    }
    // Kept beside the SQLite file.
    INFERA_ASSIGN_OR_RETURN(key_secret_, fileSecret(config_.store.substr(7) + ".key-secret", 32));
  }
  admin_token_ = envOr("INFERA_ADMIN_TOKEN", config_.admin_token);
  if (admin_token_.empty() && !config_.admin_token_file.empty()) {
    const bool created = ::access(config_.admin_token_file.c_str(), F_OK) != 0;
    auto t = fileSecret(config_.admin_token_file, 1);
    if (!t.ok()) return t.status().withContext("governance.admin_token_file");
    admin_token_ = std::move(*t);
    if (created) {
      INFERA_LOG(log, info, "admin token created in {} (mode 0600)", config_.admin_token_file);
    }
  }
  if (admin_token_.empty()) {
    INFERA_LOG(log, warn,
               "access control is on but no admin token is set (INFERA_ADMIN_TOKEN, "
               "governance.admin_token or governance.admin_token_file): the admin API refuses "
               "every call but the team-key reads until one is set and the server restarted");
  }
  auto cs = MetaStore::open(config_.store, clock_);
  if (!cs.ok())
    return cs.status().withContext("opening governance store " + redactUrl(config_.store));
  control_store_ = std::move(*cs);
  auto as = MetaStore::open(config_.store, clock_);
  if (!as.ok())
    return as.status().withContext("opening governance store " + redactUrl(config_.store));
  admin_store_ = std::move(*as);
  if (config_.cache.enabled) {
    cache_ =
        std::make_unique<ResponseCache>(config_.cache.max_bytes, config_.cache.max_entry_bytes);
  }

  usage_tokens =
      metrics.counterFamily("infera_usage_tokens_total", "Tokens used, by team, model and kind.",
                            {"team", "model", "kind"});
  usage_requests = metrics.counterFamily(
      "infera_usage_requests_total", "Governed requests, by team and model.", {"team", "model"});
  denied_auth =
      metrics
          .counterFamily("infera_auth_failures_total", "Requests refused for a missing or bad key.")
          ->counter();
  limited = metrics.counterFamily("infera_rate_limited_total",
                                  "Requests refused by a limit, by scope.", {"scope"});
  redis_fallbacks =
      metrics
          .counterFamily("infera_ratelimit_fallback_total",
                         "Admissions decided without Redis (unreachable), by the fallback rule.")
          ->counter();
  redis_errors =
      metrics
          .counterFamily("infera_ratelimit_redis_errors_total", "Failed Redis rate-limit calls.")
          ->counter();
  redis_cancelled =
      metrics
          .counterFamily("infera_ratelimit_redis_cancelled_calls_total",
                         "Admission calls whose answer never came, undone in Redis (refunded if "
                         "they ran, else cancelled before they could).")
          ->counter();
  seed_refreshes =
      metrics
          .counterFamily("infera_ratelimit_quota_refreshes_total",
                         "Times the store's day/month quota figures (where a counter Redis lost "
                         "starts) were rebuilt.")
          ->counter();
  redis_adjust_retries =
      metrics
          .counterFamily("infera_ratelimit_redis_adjust_retries_total",
                         "Reconciliation calls re-sent because Redis did not answer (each applies "
                         "once: the script records the call's id).")
          ->counter();
  redis_call_seconds =
      metrics
          .histogramFamily("infera_ratelimit_redis_call_seconds",
                           "Redis admission script calls: time from send to reply.", {},
                           obs::MetricsRegistry::latencyBuckets())
          ->histogram();
  redis_call_admissions = metrics
                              .histogramFamily("infera_ratelimit_redis_call_admissions",
                                               "Admissions decided by one Redis script call.", {},
                                               {1, 2, 4, 8, 16, 32, 64, 128})
                              ->histogram();
  redis_leases =
      metrics
          .counterFamily(
              "infera_ratelimit_redis_leases_total",
              "Leases granted: capacity a worker reserved in Redis ahead of its requests.")
          ->counter();
  redis_lease_admissions =
      metrics
          .counterFamily("infera_ratelimit_redis_lease_admissions_total",
                         "Admissions decided from a lease, without a Redis call.")
          ->counter();
  usage_dropped = metrics
                      .counterFamily("infera_usage_write_failures_total",
                                     "Usage batches that could not be written (kept and retried).")
                      ->counter();
  usage_written =
      metrics
          .counterFamily("infera_usage_records_written_total",
                         "Usage records written to the store (committed: a restart keeps them).")
          ->counter();
  cache_hits = metrics.counterFamily("infera_cache_hits_total", "Response cache hits.")->counter();
  cache_misses =
      metrics.counterFamily("infera_cache_misses_total", "Response cache misses.")->counter();
  metrics.gaugeFamily("infera_cache_bytes", "Bytes held by the response cache.")
      ->setCallback([this] { return cache_ ? static_cast<double>(cache_->bytes()) : 0.0; });
  metrics
      .gaugeFamily("infera_ratelimit_local_counters",
                   "In-process rate-limit counters held (those of names seen only in requests go "
                   "once idle).")
      ->setCallback([this] { return static_cast<double>(local_.size()); });
  metrics.gaugeFamily("infera_governance_generation", "Key/team snapshot generation in use.")
      ->setCallback([this] {
        auto s = snapshot();
        return s ? static_cast<double>(s->generation) : 0.0;
      });

  auto per_worker =
      metrics.gaugeFamily("infera_governance_worker_generation",
                          "Key/team snapshot generation each worker serves.", {"worker"});
  for (size_t i = 0; i < worker_generations_.size(); ++i) {
    worker_generations_[i].store(-1);
    per_worker->setCallback({std::to_string(i)}, [this, i] {
      return static_cast<double>(worker_generations_[i].load(std::memory_order_relaxed));
    });
  }
  INFERA_RETURN_IF_ERROR(sync(true));
  control_ = std::thread([this] { controlLoop(); });
  INFERA_LOG(
      log, info, "governance on: store {}, limits {}, {} keys, {} teams",
      sqlite ? config_.store : "postgresql",
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

std::unique_ptr<AccessWorker> Governance::worker(int shard, net::asio::io_context& ctx) {
  return std::make_unique<GovWorker>(*this, shard, ctx);
}

void Governance::publishLocked(const std::shared_ptr<const GovSnapshot>& snap) {
  for (const Subscriber& s : subscribers_) {
    // The worker's alive flag is cleared on its loop when it goes, so a post that runs later is
    // harmless.
    net::asio::post(*s.ctx, [w = s.worker, alive = s.worker->alive(), snap] {
      if (*alive) w->setSnapshot(snap);
    });
  }
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
  std::lock_guard<std::mutex> publish_lock(publish_mu_);
  publishLocked(snap);
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
    INFERA_LOG(
        log, warn,
        "quota figures for Redis not refreshed: a usage query failed (keeping the last ones)");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(seeds_mu_);
    quota_seeds_ = std::move(seeds);
  }
  seed_refreshes->inc(0);
}

bool Governance::eachQuotaUse(const GovSnapshot& s,
                              const std::function<void(const Charge&, int64_t used)>& fn) {
  const int64_t now = nowMs();
  bool complete = true;
  // Counter `name` (as the snapshot names it) with the tokens, or the cost in micro-USD, that
  // `team` (or one user of it) used since the period began.
  auto seed = [&](const CounterName& name, Window w, bool cost, const std::string& team,
                  const std::string* user) {
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
      if (!s.isOk() && !store_down)
        INFERA_LOG(log, warn, "governance store unreachable, keeping the last snapshot: {}",
                   s.message());
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
      if (removed.ok() && *removed > 0)
        INFERA_LOG(log, debug, "usage retention removed {} rows", *removed);
      next_prune = now + (removed.ok() && *removed > 0 ? std::chrono::milliseconds(100)
                                                       : std::chrono::milliseconds(3'600'000));
    }
  }
  (void)flushUsage();
}

Result<int64_t> Governance::pruneUsageStep() {
  constexpr int64_t kDay = 86'400'000;
  const int64_t now = nowMs();
  const int64_t records =
      config_.usage_retention_days > 0 ? now - config_.usage_retention_days * kDay : 0;
  const int64_t rollups = config_.usage_rollup_retention_days > 0
                              ? now - config_.usage_rollup_retention_days * kDay
                              : 0;
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
  if (s.isOk()) usage_written->inc(0, static_cast<double>(batch.size()));
  if (!s.isOk()) {
    usage_dropped->inc(0);
    INFERA_LOG(log, warn, "usage write of {} records failed (kept for the next flush): {}",
               batch.size(), s.message());
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

}  // namespace infera::access
