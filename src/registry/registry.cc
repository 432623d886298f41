#include "registry/registry.h"

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "access/access.h"
#include "core/config.h"
#include "core/log.h"
#include "core/text.h"
#include "gateway/gateway.h"
#include "obs/metrics.h"
#include "registry/internal/api.h"
#include "registry/internal/artifacts.h"
#include "registry/internal/pool.h"
#include "registry/internal/routing.h"
#include "registry/internal/store.h"

namespace infera::registry {
namespace {

constexpr size_t kMaxQueuedRecords = 10'000;  // shadow outcomes and captures waiting for the store

class RegistryImpl;

// The config's models plus the registry's, derived afresh each time the gateway asks (so a
// reload's new deployments reach registry routes too).
class CombinedSource final : public gateway::RouteSource {
 public:
  explicit CombinedSource(RegistryImpl& r) : r_(r) {}
  std::vector<gateway::ModelConfig> models() const override;

 private:
  RegistryImpl& r_;
};

class RegistryImpl final : public Registry, public gateway::InferenceObserver {
 public:
  RegistryImpl(const RegistryConfig& config, RegistryDeps deps)
      : config_(config),
        deps_(deps),
        clock_(deps.clock ? *deps.clock : SystemClock::instance()),
        metrics_(deps.metrics),
        pool_(std::make_unique<WorkerPool>(config.threads, static_cast<size_t>(config.max_queued))),
        files_(config.artifact_dir.empty() ? config.data_dir + "/artifacts" : config.artifact_dir),
        source_(*this),
        shared_{config_, *pool_, files_, deps.access, metrics_, {}, {}, {}, {}, {}, {}} {
    config_bindings_ = config.bindings;
  }

  ~RegistryImpl() override {
    // The workers first: a task still queued may sync routes or audit, which needs the rest.
    pool_.reset();
    {
      std::lock_guard<std::mutex> lock(control_mu_);
      stop_ = true;
    }
    control_cv_.notify_all();
    if (control_.joinable()) control_.join();
    (void)flush();
  }

  Status init() {
    log_ = componentLogger("registry");
    if (config_.store.starts_with("sqlite:") && config_.store != "sqlite::memory:") {
      std::error_code ec;
      std::filesystem::create_directories(
          std::filesystem::path(config_.store.substr(7)).parent_path(), ec);
    }
    INFERA_RETURN_IF_ERROR(files_.init());
    INFERA_ASSIGN_OR_RETURN(control_store_, RegistryStore::open(config_.store, clock_));
    INFERA_RETURN_IF_ERROR(
        pool_->start([this] { return RegistryStore::open(config_.store, clock_); }));
    shared_.after_write = [this](RegistryStore& s) { (void)sync(s, true); };
    shared_.stats = [this](const std::string& model) -> std::optional<gateway::ExperimentStats> {
      gateway::Gateway* g = gateway_.load();
      if (!g) return std::nullopt;
      return g->experimentStats(model);
    };
    shared_.routes_json = [this] { return routesJson(); };
    shared_.flush_records = [this] { return flush(); };
    shared_.deployment_exists = [this](const std::string& d) {
      const gateway::RouteSource* base = base_.load();
      return base && findDeployment(base->models(), d) != nullptr;
    };
    shared_.config_bindings = [this] {
      std::lock_guard<std::mutex> lock(state_mu_);
      return config_bindings_;
    };
    metrics_.registry
        .gaugeFamily("infera_registry_generation",
                     "Registry change generation applied to the routes.")
        ->setCallback([this] { return static_cast<double>(applied_.load()); });
    metrics_.registry
        .gaugeFamily("infera_registry_queued_tasks",
                     "Store and file tasks waiting for a registry worker.")
        ->setCallback([this] { return static_cast<double>(pool_ ? pool_->queued() : 0); });
    metrics_.registry
        .counterFamily("infera_registry_rejected_tasks_total",
                       "Store and file tasks refused because the registry's queue was full (503).")
        ->setCallback([this] { return static_cast<double>(pool_ ? pool_->rejected() : 0); });
    std::lock_guard<std::mutex> lock(store_mu_);
    INFERA_RETURN_IF_ERROR(sync(*control_store_, true));
    INFERA_LOG(log_, info, "registry on: store {}, artifacts in {}", redactUrl(config_.store),
               files_.root());
    return Status::ok();
  }

  // ---- Registry ----

  gateway::RouteSource& routeSource(const gateway::RouteSource& base) override {
    base_ = &base;
    return source_;
  }
  gateway::InferenceObserver* observer() override { return this; }
  void attach(gateway::Gateway* g) override { gateway_ = g; }

  void start() override {
    control_ = std::thread([this] { controlLoop(); });
  }

  void addDataRoutes(int, net::asio::io_context& ctx, net::Router& router,
                     access::AccessWorker* access) override {
    auto api = std::make_unique<Api>(shared_, ctx, access, false);
    api->addDataRoutes(router);
    router.own(std::move(api));
  }

  void addAdminRoutes(net::asio::io_context& ctx, net::Router& admin,
                      const net::RouteGuard& guard) override {
    auto api = std::make_unique<Api>(shared_, ctx, nullptr, true);
    api->addAdminRoutes(admin, guard);
    admin.own(std::move(api));
  }

  Status setBindings(std::vector<BindingConfig> bindings) override {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      config_bindings_ = std::move(bindings);
    }
    std::lock_guard<std::mutex> lock(store_mu_);
    return sync(*control_store_, true);
  }

  Result<AliasMove> setAlias(const std::string& model, const std::string& alias, int64_t version,
                             const std::string& actor, const std::string& reason) override {
    std::lock_guard<std::mutex> lock(store_mu_);
    INFERA_ASSIGN_OR_RETURN(AliasMove m,
                            control_store_->setAlias(model, alias, version, actor, reason));
    (void)sync(*control_store_, true);
    audit(actor, "registry.alias.set", model + "@" + alias, m);
    return m;
  }

  Result<AliasMove> rollback(const std::string& model, const std::string& alias,
                             const std::string& actor, const std::string& reason) override {
    std::lock_guard<std::mutex> lock(store_mu_);
    INFERA_ASSIGN_OR_RETURN(AliasMove m,
                            control_store_->rollbackAlias(model, alias, actor, reason));
    (void)sync(*control_store_, true);
    audit(actor, "registry.alias.rollback", model + "@" + alias, m);
    return m;
  }

  Result<std::vector<AliasMove>> history(const std::string& model, const std::string& alias,
                                         int limit) override {
    std::lock_guard<std::mutex> lock(store_mu_);
    return control_store_->aliasHistory(model, alias, limit);
  }

  std::string routesJson() const override {
    const gateway::RouteSource* base = base_.load();
    std::lock_guard<std::mutex> lock(state_mu_);
    return deriveRoutes(state_, config_bindings_,
                        base ? base->models() : std::vector<gateway::ModelConfig>{},
                        config_.default_alias, config_.capture_max_body_bytes)
        .json;
  }

  int64_t appliedGeneration() const override { return applied_.load(); }

  Status flush() override {
    std::vector<gateway::ShadowOutcome> shadows;
    std::vector<gateway::CapturedInference> captures;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      shadows.swap(shadows_);
      captures.swap(captures_);
    }
    if (shadows.empty() && captures.empty()) return Status::ok();
    std::lock_guard<std::mutex> lock(store_mu_);
    Status s = control_store_->insertShadow(shadows, config_.shadow_max_rows);
    if (s.isOk()) s = control_store_->insertCaptures(captures, config_.capture_max_rows);
    if (!s.isOk()) {
      metrics_.write_failures->inc(0);
      // Kept for the next pass, within the queue's bound.
      std::lock_guard<std::mutex> qlock(queue_mu_);
      for (auto& o : shadows) {
        if (shadows_.size() < kMaxQueuedRecords) shadows_.push_back(std::move(o));
      }
      for (auto& c : captures) {
        if (captures_.size() < kMaxQueuedRecords) captures_.push_back(std::move(c));
      }
    }
    return s;
  }

  // ---- InferenceObserver (worker loops: queue and return) ----

  void shadowDone(gateway::ShadowOutcome&& o) override {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (shadows_.size() >= kMaxQueuedRecords) {
      metrics_.dropped_shadows->inc(0);
      return;
    }
    shadows_.push_back(std::move(o));
  }

  void captured(gateway::CapturedInference&& c) override {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (captures_.size() >= kMaxQueuedRecords) {
      metrics_.dropped_captures->inc(0);
      return;
    }
    captures_.push_back(std::move(c));
  }

  // The gateway's models from the registry, for the route source.
  std::vector<gateway::ModelConfig> registryModels(
      const std::vector<gateway::ModelConfig>& base) const {
    std::lock_guard<std::mutex> lock(state_mu_);
    return deriveRoutes(state_, config_bindings_, base, config_.default_alias,
                        config_.capture_max_body_bytes)
        .models;
  }
  const gateway::RouteSource* base() const { return base_.load(); }

 private:
  // Loads the routing state with `store` (a worker's or the control thread's) when its
  // generation moved (or `force`), and rebuilds the gateway's routes when they changed.
  Status sync(RegistryStore& store, bool force) {
    std::lock_guard<std::mutex> lock(sync_mu_);
    auto gen = store.generation();
    if (!gen.ok()) {
      metrics_.syncs_failed->inc(0);
      return gen.takeStatus();
    }
    if (!force && *gen == applied_.load()) return Status::ok();
    auto state = store.routingState();
    if (!state.ok()) {
      metrics_.syncs_failed->inc(0);
      return state.takeStatus();
    }
    metrics_.syncs_ok->inc(0);
    const gateway::RouteSource* base = base_.load();
    std::string fingerprint;
    {
      std::lock_guard<std::mutex> slock(state_mu_);
      state_ = std::move(*state);
      DerivedRoutes d = deriveRoutes(state_, config_bindings_,
                                     base ? base->models() : std::vector<gateway::ModelConfig>{},
                                     config_.default_alias, config_.capture_max_body_bytes);
      fingerprint = std::move(d.fingerprint);
      // Before routeSource() hands over the config's models every deployment looks unknown:
      // nothing to warn about yet.
      for (const auto& w : d.warnings) {
        if (base && warned_.insert(w).second) INFERA_LOG(log_, warn, "{}", w);
      }
    }
    applied_ = *gen;
    if (fingerprint == fingerprint_) return Status::ok();
    fingerprint_ = std::move(fingerprint);
    if (gateway::Gateway* g = gateway_.load()) {
      const Status s = g->rebuild();
      if (!s.isOk()) {
        INFERA_LOG(log_, err, "registry routes changed but the gateway kept its routes: {}",
                   s.message());
        return s;
      }
      metrics_.rebuilds->inc(0);
    }
    return Status::ok();
  }

  void audit(const std::string& actor, const std::string& action, const std::string& target,
             const AliasMove& m) {
    if (!deps_.access) return;
    const std::string detail = "{\"from_version\":" + std::to_string(m.from_version) +
                               ",\"to_version\":" + std::to_string(m.to_version) + "}";
    (void)deps_.access->audit(actor, action, target, detail);
  }

  void controlLoop() {
    const auto every = std::chrono::milliseconds(config_.sync_interval_ms);
    bool down = false;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(control_mu_);
        control_cv_.wait_for(lock, every, [&] { return stop_; });
        if (stop_) return;
      }
      Status s;
      {
        std::lock_guard<std::mutex> lock(store_mu_);
        s = sync(*control_store_, false);
      }
      metrics_.sync_polls->inc(0);
      if (!s.isOk() && !down)
        INFERA_LOG(log_, warn, "registry store unreachable, routes kept: {}", s.message());
      if (s.isOk() && down) INFERA_LOG(log_, info, "registry store reachable again");
      down = !s.isOk();
      const Status f = flush();
      if (!f.isOk())
        INFERA_LOG(log_, warn, "shadow outcomes and captures not written yet: {}", f.message());
    }
  }

  RegistryConfig config_;
  RegistryDeps deps_;
  const Clock& clock_;
  spdlog::logger* log_ = nullptr;
  RegistryMetrics metrics_;
  std::unique_ptr<WorkerPool> pool_;
  ArtifactFiles files_;
  CombinedSource source_;
  ApiShared shared_;
  std::atomic<const gateway::RouteSource*> base_{nullptr};
  std::atomic<gateway::Gateway*> gateway_{nullptr};

  std::mutex store_mu_;  // control_store_
  std::unique_ptr<RegistryStore> control_store_;
  std::mutex sync_mu_;  // one sync at a time (workers and the control thread)
  std::string fingerprint_;
  std::set<std::string> warned_;
  std::atomic<int64_t> applied_{0};
  mutable std::mutex state_mu_;  // state_, config_bindings_
  RoutingState state_;
  std::vector<BindingConfig> config_bindings_;

  std::mutex queue_mu_;
  std::vector<gateway::ShadowOutcome> shadows_;
  std::vector<gateway::CapturedInference> captures_;

  std::mutex control_mu_;
  std::condition_variable control_cv_;
  bool stop_ = false;
  std::thread control_;
};

std::vector<gateway::ModelConfig> CombinedSource::models() const {
  const gateway::RouteSource* base = r_.base();
  std::vector<gateway::ModelConfig> out =
      base ? base->models() : std::vector<gateway::ModelConfig>{};
  std::vector<gateway::ModelConfig> mine = r_.registryModels(out);
  for (auto& m : mine) out.push_back(std::move(m));
  return out;
}

}  // namespace

Result<std::unique_ptr<Registry>> Registry::create(const RegistryConfig& config,
                                                   RegistryDeps deps) {
  auto r = std::make_unique<RegistryImpl>(config, deps);
  INFERA_RETURN_IF_ERROR(r->init());
  return std::unique_ptr<Registry>(std::move(r));
}

}  // namespace infera::registry
