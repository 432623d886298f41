// The Kubernetes scheduler loop: one event loop holds the watches, the cache, the engine, the
// bindings and the HTTP handlers, so nothing here locks (see kube.h).
//
// The cache is the truth the engine is rebuilt from: every node, and every pod bound to a node
// (by anyone) and not finished, plus our own pending pods. The engine is updated incrementally on
// watch events and rebuilt from the cache when something it cannot express changes (a node's
// capacity, a node removed, a relist, a refused eviction).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "core/log.h"
#include "net/router.h"
#include "net/server.h"
#include "obs/metrics.h"
#include "scheduler/kube/internal/api_client.h"
#include "scheduler/kube/internal/leader.h"
#include "scheduler/kube/internal/objects.h"
#include "scheduler/kube/kube.h"
#include "scheduler/kube/webhook.h"
#include "scheduler/scheduler.h"

namespace infera::sched::kube {
namespace {

using net::Task;
namespace asio = net::asio;

spdlog::logger* logger() {
  static spdlog::logger* l = componentLogger("sched-kube");
  return l;
}

int64_t wallSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string tierLabel(Tier t) { return std::to_string(static_cast<int>(t)); }

struct CachedPod {
  KubePod pod;
  // Accounted in the engine (bound, or assumed while binding); PodId 0 is a valid id.
  std::optional<PodId> engine_id;
  std::string assumed_node;        // our decision, while the binding is in flight
  std::string last_reason;         // the unschedulable reason last reported (Event + condition)
  std::set<std::string> awaiting;  // victims (keys) whose eviction this pod waits for
  std::string nominated_node;      // ... and the node they leave, held for it meanwhile
  int64_t idle_since_s = -1;       // idle reclaim: first idle sample of the current idle stretch
  int64_t warned_s = -1;           // ... when the IdleReclaimWarning Event was posted
  bool reclaimed = false;          // ... evicted (or, dry run, reported) once
  std::string repack_to;           // re-packing: the node last recommended for it ("" = none)
  bool accountable() const {
    return !pod.terminal() && (!pod.node_name.empty() || !assumed_node.empty());
  }
};

struct Metrics {
  explicit Metrics(obs::MetricsRegistry& r)
      : decisions(r.counterFamily("infera_sched_decisions_total",
                                  "Scheduling decisions by result (bound, unschedulable, "
                                  "quota, preempting, gang_wait, error)",
                                  {"result"})),
        pending_seconds(r.histogramFamily(
            "infera_sched_pending_seconds", "Time from pod creation to binding, per queue and tier",
            {"queue", "tier"},
            {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400})),
        decision_seconds(r.histogramFamily("infera_sched_decision_seconds",
                                           "Engine time per scheduling decision", {},
                                           obs::MetricsRegistry::latencyBuckets())),
        pending_pods(r.gaugeFamily("infera_sched_pending_pods",
                                   "Pods with our schedulerName waiting for a node")),
        empty_share(r.gaugeFamily(
            "infera_sched_free_gpus_on_empty_nodes_ratio",
            "Share of free GPUs that sit on fully empty GPU nodes (1 = perfectly packed)")),
        guarantee_share(
            r.gaugeFamily("infera_sched_nodes_for_guarantees_ratio",
                          "Share of GPU nodes needed to hold every tier-0 guarantee at once")),
        gpus(r.gaugeFamily("infera_sched_gpus", "GPUs in the engine by state", {"state"})),
        preemptions(r.counterFamily("infera_sched_preemptions_total",
                                    "Pods evicted for a tier-0 pod reclaiming its guarantee")),
        evictions_refused(
            r.counterFamily("infera_sched_evictions_refused_total",
                            "Evictions the API server refused (429: a PodDisruptionBudget)")),
        watch_restarts(r.counterFamily("infera_sched_watch_restarts_total",
                                       "Watches started again, by resource and reason",
                                       {"resource", "reason"})),
        relists(r.counterFamily("infera_sched_relists_total",
                                "Full lists of a resource (start, 410 Gone)", {"resource"})),
        engine_rebuilds(r.counterFamily("infera_sched_engine_rebuilds_total",
                                        "Engine state rebuilt from the cache")),
        unaccounted(
            r.gaugeFamily("infera_sched_unaccounted_pods",
                          "Bound pods the engine could not account (unknown node, over capacity)")),
        api_errors(r.counterFamily("infera_sched_api_errors_total",
                                   "API server calls that failed, by operation", {"op"})),
        admission(r.counterFamily("infera_sched_admission_reviews_total",
                                  "AdmissionReviews answered, by result", {"result"})),
        idle_reclaims(r.counterFamily(
            "infera_sched_idle_reclaims_total",
            "Idle reclaim actions by policy and action (warned, evicted, refused, dry_run)",
            {"policy", "action"})),
        reclaimed_gpu_seconds(r.counterFamily(
            "infera_sched_reclaimed_gpu_seconds_total",
            "GPU-seconds freed by idle reclaim, counted from eviction to the pod's idle window end",
            {"policy"})),
        metric_queries(r.counterFamily("infera_sched_gpu_metric_queries_total",
                                       "Prometheus queries for GPU utilisation, by result",
                                       {"result"})),
        queue_gpus(r.gaugeFamily("infera_sched_queue_gpus",
                                 "GPUs per queue and GPU type (\"*\" = all types): used (every "
                                 "tier), guaranteed and max (only where set)",
                                 {"queue", "gpu_type", "kind"})),
        repack_plans(r.counterFamily("infera_sched_repack_plans_total",
                                     "Re-packing plans made (recommendations only)")),
        repack_moves(r.gaugeFamily("infera_sched_repack_recommended_moves",
                                   "Pod moves the last re-packing plan recommends")),
        repack_nodes(r.gaugeFamily("infera_sched_repack_freeable_nodes",
                                   "GPU nodes the last re-packing plan would empty")),
        reloads(r.counterFamily("infera_sched_config_reloads_total",
                                "sched.yaml reloads by result (applied, refused)", {"result"})),
        leader(r.gaugeFamily("infera_sched_leader",
                             "1 while this replica holds the scheduler's Lease (or has no "
                             "leader election)")) {
    leader->gauge()->set(1);
  }
  obs::Family* decisions;
  obs::Family* pending_seconds;
  obs::Family* decision_seconds;
  obs::Family* pending_pods;
  obs::Family* empty_share;
  obs::Family* guarantee_share;
  obs::Family* gpus;
  obs::Family* preemptions;
  obs::Family* evictions_refused;
  obs::Family* watch_restarts;
  obs::Family* relists;
  obs::Family* engine_rebuilds;
  obs::Family* unaccounted;
  obs::Family* api_errors;
  obs::Family* admission;
  obs::Family* idle_reclaims;
  obs::Family* reclaimed_gpu_seconds;
  obs::Family* metric_queries;
  obs::Family* queue_gpus;
  obs::Family* repack_plans;
  obs::Family* repack_moves;
  obs::Family* repack_nodes;
  obs::Family* reloads;
  obs::Family* leader;
};

// What a reload changes (restartNeeded says what it may not): everything but kube, metrics,
// leader election and the listeners, which stay as `into` has them (resolved for in-cluster use).
void takeReloadable(ServeConfig& into, const ServeConfig& from) {
  into.policy = from.policy;
  into.scheduling = from.scheduling;
  into.webhook.gpu_pods_only = from.webhook.gpu_pods_only;
  into.webhook.cpu_per_gpu = from.webhook.cpu_per_gpu;
  into.webhook.memory_gib_per_gpu = from.webhook.memory_gib_per_gpu;
  into.reclaim = from.reclaim;
  into.repack = from.repack;
}

class Controller {
 public:
  Controller(asio::io_context& ctx, ServeConfig cfg, net::UpstreamAddress address,
             std::optional<net::UpstreamAddress> prometheus, obs::MetricsRegistry& registry)
      : ctx_(ctx),
        cfg_(std::move(cfg)),
        prometheus_(std::move(prometheus)),
        api_(ctx, std::move(address), cfg_.kube.token_file,
             std::chrono::milliseconds(cfg_.kube.request_timeout_ms)),
        m_(registry),
        wake_(ctx) {
    m_.empty_share->setCallback([this] { return emptyShare(); });
    m_.guarantee_share->setCallback([this] { return guaranteeShare(); });
    m_.gpus->setCallback({"capacity"}, [this] {
      return engine_ ? static_cast<double>(engine_->stats().gpu_milli_capacity) / 1000 : 0.0;
    });
    m_.gpus->setCallback({"allocated"}, [this] {
      return engine_ ? static_cast<double>(engine_->stats().gpu_milli_allocated) / 1000 : 0.0;
    });
    m_.pending_pods->setCallback([this] { return static_cast<double>(pendingCount()); });
    m_.unaccounted->setCallback([this] { return static_cast<double>(unaccounted_); });
  }

  void start() {
    if (cfg_.leader_election.enabled) {
      leader_ = false;
      LeaderElectionConfig le = cfg_.leader_election;
      if (le.identity.empty()) {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        le.identity = std::string(host) + "_" + std::to_string(::getpid());
      }
      elector_ = std::make_unique<LeaderElector>(ctx_, api_, le);
      m_.leader->gauge()->set(0);
      net::spawn(ctx_, elector_->run([this](bool leader) { onLeadership(leader); }),
                 "kube leader election");
    }
    net::spawn(ctx_, watchLoop(Kind::kNodes), "kube node watch");
    net::spawn(ctx_, watchLoop(Kind::kPods), "kube pod watch");
    net::spawn(ctx_, scheduleLoop(), "kube schedule loop");
    if (prometheus_) net::spawn(ctx_, reclaimLoop(), "kube idle reclaim");
    if (cfg_.repack.enabled) net::spawn(ctx_, repackLoop(), "kube re-packing");
  }

  void stop() {
    stopping_ = true;
    if (elector_) elector_->stop();
    api_.abortStreams();
    wake_.cancel();
  }

  Metrics& metrics() { return m_; }

  // A reload (KubeScheduler::reload, checked already): what may change without a restart is
  // taken, and the engine is rebuilt under it before the next pass. On the loop's thread.
  void applyConfig(const ServeConfig& next) {
    takeReloadable(cfg_, next);
    needs_rebuild_ = true;
    m_.reloads->counter({"applied"})->inc(0);
    INFERA_LOG(logger(), info, "reload: {} queues, {} placement rules, policy {}",
               cfg_.scheduling.queues.size(), cfg_.scheduling.placement.size(), cfg_.policy);
    wake();
  }

 private:
  enum class Kind { kNodes, kPods };

  // --- gauges ---------------------------------------------------------------------------------

  double emptyShare() const {
    if (!engine_) return 0;
    const ClusterStats s = engine_->stats();
    const int64_t free = s.gpu_milli_capacity - s.gpu_milli_allocated;
    return free > 0 ? static_cast<double>(s.gpu_milli_on_empty_nodes) / static_cast<double>(free)
                    : 0.0;
  }
  double guaranteeShare() const {
    if (!engine_) return 0;
    int gpu_nodes = 0;
    for (const auto& [name, n] : nodes_) gpu_nodes += n.spec.gpus > 0 && !n.spec.closed ? 1 : 0;
    return gpu_nodes > 0 ? static_cast<double>(engine_->nodesForGuarantees()) / gpu_nodes : 0.0;
  }
  size_t pendingCount() const {
    size_t n = 0;
    for (const auto& [key, p] : pods_) n += isPendingOurs(p) ? 1 : 0;
    return n;
  }
  bool isPendingOurs(const CachedPod& p) const {
    return p.pod.scheduler_name == cfg_.kube.scheduler_name && p.pod.node_name.empty() &&
           p.assumed_node.empty() && !p.pod.terminal() && !p.pod.deleting;
  }

  void wake() {
    dirty_ = true;
    wake_.cancel();
  }

  // A standby keeps its cache warm from the watches; on taking over it lists again (so what the
  // previous leader bound just before it died is in the cache) and rebuilds the engine.
  void onLeadership(bool leader) {
    INFERA_LOG(logger(), info, "{} {} the lease", elector_->identity(),
               leader ? "acquired" : "lost");
    leader_ = leader;
    m_.leader->gauge()->set(leader ? 1 : 0);
    if (leader) {
      relist_[0] = relist_[1] = true;
      api_.abortStreams();
    }
    wake();
  }

  // --- engine ---------------------------------------------------------------------------------

  Status rebuildEngine() {
    SchedulerConfig sc;
    sc.policy = cfg_.policy;
    sc.scheduling = cfg_.scheduling;
    std::vector<NodeSpec> nodes;
    for (const auto& [name, n] : nodes_) nodes.push_back(n.spec);  // closed ones hold their pods
    auto engine = Scheduler::create(sc, nodes);
    if (!engine.ok()) return engine.status();
    engine_ = std::move(*engine);
    by_engine_id_.clear();
    unaccounted_ = 0;
    m_.engine_rebuilds->counter()->inc(0);
    for (auto& [key, p] : pods_) {
      p.engine_id.reset();
      if (p.accountable()) account(key, p);
    }
    return Status::ok();
  }

  void account(const std::string& key, CachedPod& p) {
    if (!engine_) return;
    const std::string& node = p.pod.node_name.empty() ? p.assumed_node : p.pod.node_name;
    auto placed = engine_->assume(p.pod.spec, node, wallSeconds());
    if (!placed.ok()) {
      ++unaccounted_;
      INFERA_LOG(logger(), debug, "pod {} on {} not accounted: {}", key, node,
                 placed.status().message());
      return;
    }
    p.engine_id = placed->pod;
    by_engine_id_[placed->pod] = key;
  }

  void unaccount(CachedPod& p) {
    if (!p.engine_id || !engine_) return;
    (void)engine_->release(*p.engine_id);  // unknown: the engine already unbound it (a victim)
    by_engine_id_.erase(*p.engine_id);
    p.engine_id.reset();
  }

  // --- cache updates from watch events --------------------------------------------------------

  void applyNode(const std::string& type, const Json& obj) {
    auto n = nodeFromJson(obj, cfg_.kube);
    if (!n.ok()) return;
    const auto it = nodes_.find(n->name);
    if (type == "DELETED") {
      if (it != nodes_.end()) {
        nodes_.erase(it);
        needs_rebuild_ = true;
        wake();
      }
      return;
    }
    if (it == nodes_.end()) {
      const KubeNode node = *n;
      nodes_[node.name] = node;
      if (engine_) {
        if (!engine_->addNode(node.spec).ok()) needs_rebuild_ = true;
        // Pods that were bound to it before we saw it.
        for (auto& [key, p] : pods_) {
          if (!p.engine_id && p.accountable() &&
              (p.pod.node_name == node.name || p.assumed_node == node.name)) {
            account(key, p);
          }
        }
      }
      wake();
      return;
    }
    const KubeNode& old = it->second;
    const bool same = old.spec.closed == n->spec.closed &&
                      old.spec.cpu_milli == n->spec.cpu_milli &&
                      old.spec.memory_mib == n->spec.memory_mib && old.spec.gpus == n->spec.gpus &&
                      old.spec.gpu_model == n->spec.gpu_model &&
                      old.spec.labels == n->spec.labels && old.spec.taints == n->spec.taints;
    it->second = std::move(*n);
    if (!same) {
      needs_rebuild_ = true;
      wake();
    }
  }

  void applyPod(const std::string& type, const Json& obj) {
    auto parsed = podFromJson(obj, cfg_.kube);
    if (!parsed.ok()) {
      INFERA_LOG(logger(), warn, "ignoring pod: {}", parsed.status().message());
      return;
    }
    KubePod pod = std::move(*parsed);
    const std::string key = pod.key();
    auto it = pods_.find(key);
    if (type == "DELETED") {
      if (it != pods_.end()) {
        unaccount(it->second);
        pods_.erase(it);
        forgetVictim(key);
        wake();
      }
      return;
    }
    if (it != pods_.end() && it->second.pod.uid != pod.uid) {
      unaccount(it->second);
      pods_.erase(it);
      forgetVictim(key);
      it = pods_.end();
    }
    const bool ours = pod.scheduler_name == cfg_.kube.scheduler_name;
    // Only what uses or may use a node is kept: bound pods of every scheduler and ours.
    if (it == pods_.end()) {
      if (pod.terminal() || (pod.node_name.empty() && !ours)) return;
      CachedPod c;
      c.pod = std::move(pod);
      auto& slot = pods_[key] = std::move(c);
      if (slot.accountable()) account(key, slot);
      wake();
      return;
    }
    CachedPod& c = it->second;
    const std::string old_node = c.pod.node_name.empty() ? c.assumed_node : c.pod.node_name;
    const bool was_deleting = c.pod.deleting;
    c.pod = std::move(pod);
    if (!c.pod.node_name.empty()) c.assumed_node.clear();
    const std::string new_node = c.pod.node_name.empty() ? c.assumed_node : c.pod.node_name;
    if (c.pod.terminal()) {
      unaccount(c);
      pods_.erase(it);
      forgetVictim(key);
      wake();
      return;
    }
    // A pod being deleted keeps its node until it is gone; the engine is told (spread stops
    // counting it) by accounting it again.
    if (new_node != old_node || (!c.engine_id && c.accountable()) ||
        (c.engine_id && was_deleting != c.pod.deleting)) {
      unaccount(c);
      if (c.accountable()) account(key, c);
      wake();
    }
  }

  void forgetVictim(const std::string& key) {
    const auto v = victims_.find(key);
    if (v == victims_.end()) return;
    const auto b = pods_.find(v->second);
    if (b != pods_.end()) b->second.awaiting.erase(key);
    victims_.erase(v);
  }

  // --- list and watch -------------------------------------------------------------------------

  static const char* path(Kind k) { return k == Kind::kNodes ? "/api/v1/nodes" : "/api/v1/pods"; }
  static const char* name(Kind k) { return k == Kind::kNodes ? "nodes" : "pods"; }

  Task<Status> list(Kind kind, std::string* rv) {
    auto r = co_await api_.call("GET", path(kind));
    if (!r.ok()) co_return r.takeStatus();
    if (r->status != 200) {
      co_return Status::unavailable(std::string("list ") + name(kind) + ": HTTP " +
                                    std::to_string(r->status) + " " + r->body.substr(0, 200));
    }
    Json j = Json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("items")) {
      co_return Status::unavailable(std::string("list ") + name(kind) + ": not a list");
    }
    // nlohmann throws on a member of the wrong type: converted here, the list is retried.
    try {
      *rv = j["metadata"].value("resourceVersion", "");
      std::set<std::string> seen;
      if (kind == Kind::kNodes) {
        for (const Json& item : j["items"]) {
          seen.insert(item["metadata"].value("name", ""));
          applyNode("MODIFIED", item);
        }
        for (auto it = nodes_.begin(); it != nodes_.end();) {
          it = seen.count(it->first) ? std::next(it) : nodes_.erase(it);
        }
        nodes_synced_ = true;
      } else {
        for (const Json& item : j["items"]) {
          const Json& meta = item["metadata"];
          seen.insert(meta.value("namespace", "") + "/" + meta.value("name", ""));
          applyPod("MODIFIED", item);
        }
        // Pods gone while we were not watching: deleted (a relist loses no pod and keeps no ghost).
        for (auto it = pods_.begin(); it != pods_.end();) {
          if (seen.count(it->first) || !it->second.assumed_node.empty()) {
            ++it;
          } else {
            it = pods_.erase(it);
          }
        }
        pods_synced_ = true;
      }
    } catch (const Json::exception& e) {
      co_return Status::unavailable(std::string("list ") + name(kind) + ": " + e.what());
    }
    m_.relists->counter({name(kind)})->inc(0);
    needs_rebuild_ = true;
    wake();
    co_return Status::ok();
  }

  // One line of a watch stream: {"type", "object"}. BOOKMARK moves the resourceVersion only;
  // ERROR carries a Status (410 Expired: list again).
  Status onWatchLine(Kind kind, std::string_view line, std::string* rv, bool* expired,
                     bool* got_event) {
    Json ev = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (ev.is_discarded() || !ev.is_object() || !ev.contains("object")) {
      return Status::unavailable("malformed watch event");
    }
    const std::string type = ev.value("type", "");
    const Json& obj = ev["object"];
    if (type == "ERROR") {
      if (obj.is_object() && obj.value("code", 0) == 410) *expired = true;
      return Status::failedPrecondition("watch error: " +
                                        (obj.is_object() ? obj.value("message", "") : ""));
    }
    *got_event = true;
    std::string obj_rv;
    if (obj.is_object() && obj.contains("metadata") && obj["metadata"].is_object()) {
      obj_rv = obj["metadata"].value("resourceVersion", "");
    }
    if (type != "BOOKMARK") {
      if (kind == Kind::kNodes) {
        applyNode(type, obj);
      } else {
        applyPod(type, obj);
      }
    }
    if (!obj_rv.empty()) *rv = obj_rv;
    return Status::ok();
  }

  Task<void> watchLoop(Kind kind) {
    std::string rv;
    bool need_list = true;
    int backoff_ms = cfg_.kube.backoff_initial_ms;
    asio::steady_timer timer(ctx_);
    while (!stopping_) {
      if (relist_[static_cast<int>(kind)]) {
        relist_[static_cast<int>(kind)] = false;
        need_list = true;
      }
      if (need_list) {
        api_.refreshToken();
        Status s = co_await list(kind, &rv);
        if (!s.isOk()) {
          m_.api_errors->counter({std::string("list_") + name(kind)})->inc(0);
          INFERA_LOG(logger(), warn, "{}; retrying in {} ms", s.message(), backoff_ms);
          co_await sleepFor(timer, backoff_ms);
          backoff_ms = std::min(backoff_ms * 2, cfg_.kube.backoff_max_ms);
          continue;
        }
        need_list = false;
      }
      if (relist_[static_cast<int>(kind)]) continue;  // asked for while this loop listed
      const std::string target =
          std::string(path(kind)) + "?watch=true&resourceVersion=" + rv +
          "&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(cfg_.kube.watch_timeout_s);
      bool expired = false;
      bool got_event = false;
      const std::function<Status(std::string_view)> on_line = [&](std::string_view line) -> Status {
        try {
          return onWatchLine(kind, line, &rv, &expired, &got_event);
        } catch (const Json::exception& e) {
          return Status::unavailable(std::string("malformed watch event: ") + e.what());
        }
      };
      int http_status = 0;
      Status s = co_await api_.stream(target, on_line, &http_status);
      if (stopping_) break;
      if (relist_[static_cast<int>(kind)]) continue;  // taken over: list at the loop's top
      if (expired || http_status == 410) {
        m_.watch_restarts->counter({name(kind), "expired"})->inc(0);
        INFERA_LOG(logger(), info, "{} watch at resourceVersion {} expired: relisting", name(kind),
                   rv);
        need_list = true;
        continue;
      }
      if (s.isOk()) {
        m_.watch_restarts->counter({name(kind), "timeout"})->inc(0);
        backoff_ms = cfg_.kube.backoff_initial_ms;
        continue;
      }
      m_.watch_restarts->counter({name(kind), "error"})->inc(0);
      if (got_event) backoff_ms = cfg_.kube.backoff_initial_ms;
      INFERA_LOG(logger(), info, "{} watch ended ({}); again in {} ms from resourceVersion {}",
                 name(kind), s.message(), backoff_ms, rv);
      co_await sleepFor(timer, backoff_ms);
      backoff_ms = std::min(backoff_ms * 2, cfg_.kube.backoff_max_ms);
    }
  }

  Task<void> sleepFor(asio::steady_timer& timer, int ms) {
    timer.expires_after(std::chrono::milliseconds(ms));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }

  // --- scheduling -----------------------------------------------------------------------------

  Task<void> scheduleLoop() {
    while (!stopping_) {
      if (!dirty_) {
        wake_.expires_after(std::chrono::milliseconds(cfg_.kube.retry_interval_ms));
        boost::system::error_code ec;
        co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (stopping_) break;
        if (ec != asio::error::operation_aborted) dirty_ = true;  // periodic retry
        continue;
      }
      dirty_ = false;
      if (!leader_ || !nodes_synced_ || !pods_synced_ || relist_[0] || relist_[1]) continue;
      if (needs_rebuild_ || !engine_) {
        needs_rebuild_ = false;
        Status s = rebuildEngine();
        if (!s.isOk()) {
          INFERA_LOG(logger(), err, "engine: {}", s.message());
          continue;
        }
      }
      co_await pass();
      exportQueueUsage();
    }
  }

  // The queue gauges after a pass. A configured queue's use series, once exported, stays (it
  // drops to 0, not away); a quota a reload removed, and every series of a removed queue, go.
  void exportQueueUsage() {
    if (!engine_) return;
    std::set<std::vector<std::string>> now;
    for (const QueueUsage& u : engine_->queueUsage()) {
      auto set = [&](const char* kind, double v) {
        std::vector<std::string> labels{u.queue, u.gpu_type, kind};
        m_.queue_gpus->gauge(labels)->set(v);
        now.insert(std::move(labels));
      };
      set("used", u.used_milli / 1000.0);
      if (u.guaranteed_milli >= 0) set("guaranteed", u.guaranteed_milli / 1000.0);
      if (u.max_milli >= 0) set("max", u.max_milli / 1000.0);
    }
    std::set<std::string> queues;
    for (const QueueSpec& q : cfg_.scheduling.queues) queues.insert(q.name);
    for (const auto& labels : exported_queues_) {
      if (now.count(labels)) continue;
      if (labels[2] == "used" && queues.count(labels[0])) {
        m_.queue_gpus->gauge(labels)->set(0);
        now.insert(labels);
      } else {
        m_.queue_gpus->remove(labels);
      }
    }
    exported_queues_ = std::move(now);
  }

  // Whether pod a goes before pod b: tier 0 first, then priority, then age.
  bool before(const std::string& a, const std::string& b) const {
    const PodSpec& x = pods_.at(a).pod.spec;
    const PodSpec& y = pods_.at(b).pod.spec;
    if (x.tier != y.tier) return x.tier < y.tier;
    if (x.priority != y.priority) return x.priority > y.priority;
    if (x.creation_s != y.creation_s) return x.creation_s < y.creation_s;
    return a < b;
  }

  // The pending pods in the order they get nodes.
  std::vector<std::string> pendingOrder() const {
    std::vector<std::string> keys;
    for (const auto& [key, p] : pods_) {
      if (isPendingOurs(p) && p.awaiting.empty()) keys.push_back(key);
    }
    std::sort(keys.begin(), keys.end(),
              [&](const std::string& a, const std::string& b) { return before(a, b); });
    return keys;
  }

  // Preemptors waiting for their victims to stop, with the node each was nominated to.
  std::vector<std::pair<std::string, std::string>> nominees() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [key, p] : pods_) {
      if (!p.awaiting.empty() && !p.nominated_node.empty() && isPendingOurs(p))
        out.emplace_back(key, p.nominated_node);
    }
    return out;
  }

  // The spec the engine sees for `key`: the nodes held for preemptors that go before it are
  // excluded (metadata.name NotIn, added to every required term), so room a victim leaves while
  // its preemptor waits for the others is not taken by a pod the preemptor outranks, as
  // kube-scheduler counts nominated pods on their node. `held` receives the nodes excluded; the
  // pod's own spec is returned when there are none, else `scratch`.
  const PodSpec& withHolds(const std::string& key,
                           const std::vector<std::pair<std::string, std::string>>& nominated,
                           std::vector<std::string>& held, PodSpec& scratch) const {
    const PodSpec& own = pods_.at(key).pod.spec;
    held.clear();
    for (const auto& [nominee, node] : nominated) {
      if (nominee != key && before(nominee, key) &&
          std::find(held.begin(), held.end(), node) == held.end()) {
        held.push_back(node);
      }
    }
    if (held.empty()) return own;
    scratch = own;
    auto& terms = scratch.constraints.required_terms;
    if (terms.empty()) {
      terms.emplace_back();  // no required affinity: one term of the holds alone
    } else {
      // A term with no requirement matches no node; adding to it would make it match.
      std::erase_if(terms, [](const NodeSelectorTerm& t) {
        return t.match_expressions.empty() && t.match_fields.empty();
      });
      if (terms.empty()) return own;  // matched no node before; still matches none
    }
    for (NodeSelectorTerm& t : terms) {
      for (const std::string& node : held)
        t.match_fields.push_back({"metadata.name", "NotIn", {node}});
    }
    return scratch;
  }

  static std::string heldNote(const std::vector<std::string>& held) {
    if (held.empty()) return {};
    std::string out = " (held for preemptors waiting for their victims to stop: ";
    for (size_t i = 0; i < held.size(); ++i) out += (i ? ", " : "") + held[i];
    return out + ")";
  }

  struct Bind {
    std::string key;
    std::string node;
    std::string queue;
    Tier tier = Tier::kShared;
  };
  struct Refusal {
    std::string key;
    std::string reason;
  };

  Task<void> pass() {
    std::vector<Bind> binds;
    std::vector<Refusal> refusals;
    std::vector<std::pair<std::string, Eviction>> evictions;  // beneficiary, victim
    std::pair<std::string, std::string> nominated;            // beneficiary, its node
    std::set<std::string> gangs_done;
    const auto nominated_now = nominees();
    std::vector<std::string> held;
    PodSpec scratch;
    for (const std::string& key : pendingOrder()) {
      auto it = pods_.find(key);
      if (it == pods_.end() || !isPendingOurs(it->second)) continue;
      CachedPod& c = it->second;
      if (!c.pod.group.empty()) {
        if (gangs_done.insert(c.pod.ns + "/" + c.pod.group).second) {
          placeGang(c, nominated_now, binds, refusals);
        }
        continue;
      }
      const PodSpec& spec = withHolds(key, nominated_now, held, scratch);
      const auto t0 = std::chrono::steady_clock::now();
      auto placed = engine_->schedule(spec, wallSeconds());
      m_.decision_seconds->histogram()->observe(
          0, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (!placed.ok()) {
        const bool quota = placed.status().code() == StatusCode::kFailedPrecondition;
        m_.decisions->counter({quota ? "quota" : "unschedulable"})->inc(0);
        refusals.push_back({key, placed.status().message() + heldNote(held)});
        continue;
      }
      if (!placed->evicted.empty()) {
        // Tier 0 reclaiming its guarantee: evict first, bind once the victims are gone (their
        // resources are theirs until the kubelet stops them).
        m_.decisions->counter({"preempting"})->inc(0);
        for (const Eviction& e : placed->evicted) {
          const auto v = by_engine_id_.find(e.pod);
          if (v == by_engine_id_.end()) continue;
          c.awaiting.insert(v->second);
          victims_[v->second] = key;
          evictions.emplace_back(key, e);
        }
        nominated = {key, placed->node_name};
        c.nominated_node = placed->node_name;
        needs_rebuild_ = true;  // the engine unbound victims that still run; the cache has them
        break;
      }
      m_.decisions->counter({"bound"})->inc(0);
      c.nominated_node.clear();
      c.engine_id = placed->pod;
      by_engine_id_[placed->pod] = key;
      c.assumed_node = placed->node_name;
      binds.push_back({key, placed->node_name, placed->queue, placed->tier});
    }
    co_await runBinds(binds);
    if (!nominated.first.empty()) co_await nominate(nominated.first, nominated.second);
    for (const auto& [beneficiary, victim] : evictions) co_await evict(beneficiary, victim);
    for (const Refusal& r : refusals) co_await reportUnschedulable(r.key, r.reason);
    // A preemption's victims wake the next pass when they are gone (their DELETED events); a
    // refused one waits for the periodic retry, so a PDB cannot turn this into a busy loop.
  }

  // A gang: every member pending and present, placed all or none.
  void placeGang(CachedPod& first,
                 const std::vector<std::pair<std::string, std::string>>& nominated,
                 std::vector<Bind>& binds, std::vector<Refusal>& refusals) {
    std::vector<std::string> members;
    for (const std::string& key : pendingOrder()) {
      const CachedPod& p = pods_.at(key);
      if (p.pod.ns == first.pod.ns && p.pod.group == first.pod.group) members.push_back(key);
    }
    // Members already bound (or being bound) count: one whose binding failed is placed again
    // alone, the others keeping their room, so a failed binding cannot leave a gang waiting for
    // members it already has. Pods bound are never unbound (Kubernetes has no such call).
    int running = 0;
    for (const auto& [key, p] : pods_) {
      if (p.pod.ns == first.pod.ns && p.pod.group == first.pod.group && p.accountable() &&
          !p.pod.deleting) {
        ++running;  // members stopping (a gang being replaced) do not count
      }
    }
    const int size = first.pod.group_size;
    const int need = size - running;
    if (static_cast<int>(members.size()) < need) {
      m_.decisions->counter({"gang_wait"})->inc(0);
      for (const auto& k : members) {
        refusals.push_back({k, "gang " + first.pod.group + ": " +
                                   std::to_string(members.size() + running) + " of " +
                                   std::to_string(size) + " pods created"});
      }
      return;
    }
    // The members still missing, all or none (pods beyond the size, once it is complete, together).
    if (need > 0) members.resize(static_cast<size_t>(need));
    std::vector<std::pair<std::string, Placement>> placed;
    std::string failure;
    std::vector<std::string> held;
    PodSpec scratch;
    for (const auto& k : members) {
      const PodSpec& spec = withHolds(k, nominated, held, scratch);
      auto p = engine_->decide(spec, wallSeconds());
      if (p.ok()) p = engine_->schedule(spec, wallSeconds());
      if (!p.ok()) {
        failure = p.status().message() + heldNote(held);
        break;
      }
      placed.emplace_back(k, std::move(*p));
    }
    if (!failure.empty()) {
      for (const auto& [k, p] : placed) (void)engine_->release(p.pod);
      m_.decisions->counter({"unschedulable"})->inc(0);
      for (const auto& k : members) {
        refusals.push_back({k, "gang " + first.pod.group + " (" + std::to_string(size) +
                                   " pods, all or none): " + failure});
      }
      return;
    }
    for (auto& [k, p] : placed) {
      CachedPod& c = pods_.at(k);
      m_.decisions->counter({"bound"})->inc(0);
      c.engine_id = p.pod;
      by_engine_id_[p.pod] = k;
      c.assumed_node = p.node_name;
      binds.push_back({k, p.node_name, p.queue, p.tier});
    }
  }

  // Binds with at most max_binds_in_flight requests at once.
  Task<void> runBinds(const std::vector<Bind>& binds) {
    if (binds.empty()) co_return;
    size_t next = 0;
    int running = 0;
    asio::steady_timer done(ctx_);
    done.expires_at(asio::steady_timer::time_point::max());
    auto worker = [&]() -> Task<void> {
      while (next < binds.size()) {
        const Bind& b = binds[next++];
        co_await bindOne(b);
      }
      if (--running == 0) done.cancel();
    };
    const int n =
        std::max(1, std::min<int>(cfg_.kube.max_binds_in_flight, static_cast<int>(binds.size())));
    running = n;
    for (int i = 0; i < n; ++i) net::spawn(ctx_, worker(), "kube bind");
    boost::system::error_code ec;
    co_await done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }

  Task<void> bindOne(const Bind& b) {
    auto it = pods_.find(b.key);
    if (it == pods_.end()) co_return;
    if (!leader_) {  // lost the lease during this pass: the new leader decides
      unaccount(it->second);
      it->second.assumed_node.clear();
      co_return;
    }
    const KubePod pod = it->second.pod;
    const std::string target = "/api/v1/namespaces/" + pod.ns + "/pods/" + pod.name + "/binding";
    const std::string body = bindingJson(pod, b.node);
    auto r = co_await api_.call("POST", target, body);
    it = pods_.find(b.key);
    const bool ok = r.ok() && (r->status == 201 || r->status == 200);
    if (ok) {
      const int64_t waited = std::max<int64_t>(0, wallSeconds() - pod.spec.creation_s);
      m_.pending_seconds->histogram({b.queue.empty() ? "-" : b.queue, tierLabel(b.tier)})
          ->observe(0, static_cast<double>(waited));
      INFERA_LOG(logger(), info, "bound {} to {}", b.key, b.node);
      co_return;
    }
    m_.api_errors->counter({"bind"})->inc(0);
    INFERA_LOG(
        logger(), warn, "binding {} to {} failed: {}", b.key, b.node,
        r.ok() ? std::to_string(r->status) + " " + r->body.substr(0, 200) : r.status().message());
    if (it == pods_.end() || it->second.pod.uid != pod.uid) co_return;
    // 409: bound meanwhile (by us before a restart, or by someone else): the watch brings the
    // node. Otherwise the assumption is undone and the pod retried.
    if (!it->second.assumed_node.empty()) {
      unaccount(it->second);
      it->second.assumed_node.clear();
      wake();
    }
  }

  // status.nominatedNodeName, as kube-scheduler sets it for a preemptor: `kubectl get pod -o
  // wide` shows where the pod is going while its victims leave.
  Task<void> nominate(const std::string& key, const std::string& node) {
    auto it = pods_.find(key);
    if (it == pods_.end()) co_return;
    const KubePod pod = it->second.pod;
    const std::string patch = nominatedNodePatch(node);
    co_await patchStatus(pod, patch);
  }

  // A strategic-merge PATCH of the pod's status subresource (a failure is counted, not retried:
  // the next pass writes the status again). Arguments as for postEvent.
  Task<void> patchStatus(const KubePod& pod, const std::string& patch) {
    const std::string target = "/api/v1/namespaces/" + pod.ns + "/pods/" + pod.name + "/status";
    auto r = co_await api_.call("PATCH", target, patch, "application/strategic-merge-patch+json");
    if (!r.ok() || r->status != 200) m_.api_errors->counter({"patch_status"})->inc(0);
  }

  Task<void> evict(const std::string& beneficiary, const Eviction& e) {
    // The engine names pods by their cache key ("ns/name").
    auto v = pods_.find(e.pod_name);
    if (v == pods_.end()) co_return;
    const KubePod victim = v->second.pod;
    const std::string target =
        "/api/v1/namespaces/" + victim.ns + "/pods/" + victim.name + "/eviction";
    const std::string body = evictionJson(victim);
    auto r = co_await api_.call("POST", target, body);
    if (r.ok() && (r->status == 201 || r->status == 200)) {
      m_.preemptions->counter()->inc(0);
      INFERA_LOG(logger(), info, "evicted {}: {}", e.pod_name, e.reason);
      const std::string victim_message = e.reason + " (beneficiary " + beneficiary + ")";
      co_await postEvent(victim, "Warning", "Preempted", victim_message);
      auto b = pods_.find(beneficiary);
      if (b != pods_.end()) {
        const KubePod pod = b->second.pod;
        const std::string message =
            "evicted " + e.pod_name + " on " + e.node + " to reclaim its queue's guarantee";
        co_await postEvent(pod, "Normal", "Preempting", message);
      }
      co_return;
    }
    // Refused (a PodDisruptionBudget: 429) or failed: the victim keeps running; the beneficiary
    // stops waiting for it and is tried again (another victim set, or it stays pending).
    if (r.ok() && r->status == 429) m_.evictions_refused->counter()->inc(0);
    m_.api_errors->counter({"evict"})->inc(0);
    const std::string why = r.ok() ? "HTTP " + std::to_string(r->status) : r.status().message();
    auto b = pods_.find(beneficiary);
    const std::string message = "eviction of " + e.pod_name + " refused (" + why + ")";
    if (b != pods_.end()) {
      b->second.awaiting.erase(e.pod_name);
      victims_.erase(e.pod_name);
      // The node stays held (and nominated) while victims evicted for it are still stopping:
      // the room they leave is the beneficiary's to try.
      const bool still_waiting = !b->second.awaiting.empty();
      if (!still_waiting) b->second.nominated_node.clear();
      if (b->second.last_reason != message) {
        b->second.last_reason = message;
        const KubePod pod = b->second.pod;
        co_await postEvent(pod, "Warning", "PreemptionRefused", message);
      }
      const std::string none;
      if (!still_waiting) co_await nominate(beneficiary, none);
    }
    needs_rebuild_ = true;
  }

  Task<void> reportUnschedulable(const std::string& key, const std::string& reason) {
    auto it = pods_.find(key);
    if (it == pods_.end() || it->second.last_reason == reason) co_return;
    it->second.last_reason = reason;
    const KubePod pod = it->second.pod;
    co_await postEvent(pod, "Warning", "FailedScheduling", reason);
    const std::string patch = unschedulablePatch(reason, wallSeconds());
    co_await patchStatus(pod, patch);
  }

  // Arguments are references the caller keeps alive across the await (g++ 12 double-destroys
  // temporaries made inside a co_await expression, so callers name their strings).
  Task<void> postEvent(const KubePod& pod, std::string_view type, std::string_view reason,
                       const std::string& message) {
    const std::string target = "/api/v1/namespaces/" + pod.ns + "/events";
    const std::string body =
        eventJson(pod, type, reason, message, cfg_.kube.component, wallSeconds());
    auto r = co_await api_.call("POST", target, body);
    if (!r.ok() || r->status != 201) m_.api_errors->counter({"event"})->inc(0);
  }

  // --- idle reclaim ---------------------------------------------------------------------------

  static std::string urlEncode(std::string_view s) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char c : s) {
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
        out += static_cast<char>(c);
      } else {
        out += '%';
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
    return out;
  }

  // Utilisation (0..1) by "ns/pod" from one instant query; kUnavailable when Prometheus is not
  // there or answers something else than a vector.
  Task<Result<std::map<std::string, double>>> queryUtilization() {
    const ReclaimConfig& rc = cfg_.reclaim;
    const std::string target = "/api/v1/query?query=" + urlEncode(rc.query);
    const std::vector<net::HttpHeader> headers = {{"accept", "application/json"}};
    const auto deadline =
        net::SteadyClock::now() + std::chrono::milliseconds(cfg_.kube.request_timeout_ms);
    auto r = co_await net::fetch(*prometheus_, "GET", target, "", headers, deadline);
    if (!r.ok()) co_return r.takeStatus();
    if (r->status != 200) {
      co_return Status::unavailable("prometheus answered HTTP " + std::to_string(r->status));
    }
    std::map<std::string, double> out;
    try {
      const Json j = Json::parse(r->body);
      if (j.value("status", "") != "success" || j["data"].value("resultType", "") != "vector") {
        co_return Status::unavailable("prometheus: not a vector result");
      }
      for (const Json& e : j["data"]["result"]) {
        const Json& m = e["metric"];
        const std::string ns = m.value(rc.namespace_label, "");
        const std::string pod = m.value(rc.pod_label, "");
        if (ns.empty() || pod.empty()) continue;
        const double v = std::stod(e["value"][1].get<std::string>());
        out[ns + "/" + pod] = v / rc.utilization_scale;
      }
    } catch (const std::exception& e) {
      co_return Status::unavailable(std::string("prometheus: malformed answer: ") + e.what());
    }
    co_return out;
  }

  const IdlePolicy* idlePolicyFor(const KubePod& pod) const {
    for (const IdlePolicy& p : cfg_.scheduling.idle_reclaim) {
      if (p.match_labels.empty()) continue;
      bool all = true;
      for (const auto& [k, v] : p.match_labels) {
        const auto it = pod.spec.labels.find(k);
        all = all && it != pod.spec.labels.end() && it->second == v;
      }
      if (all) return &p;
    }
    return nullptr;
  }

  Task<void> reclaimLoop() {
    asio::steady_timer timer(ctx_);
    while (!stopping_) {
      co_await sleepFor(timer, cfg_.reclaim.interval_ms);
      if (stopping_ || !leader_ || !pods_synced_) continue;
      auto util = co_await queryUtilization();
      if (!util.ok()) {
        m_.metric_queries->counter({"error"})->inc(0);
        INFERA_LOG(logger(), warn, "idle reclaim: {}", util.status().message());
        continue;
      }
      m_.metric_queries->counter({"ok"})->inc(0);
      co_await reclaimPass(*util);
    }
  }

  // One look at every bound pod an idle policy covers: idle stretches start and end with the
  // samples; past the policy's window a Warning Event, warn_before_s later the eviction. A pod
  // with no sample keeps its state (no data is not idleness).
  Task<void> reclaimPass(const std::map<std::string, double>& util) {
    const ReclaimConfig& rc = cfg_.reclaim;
    const int64_t now = wallSeconds();
    struct Action {
      std::string key;
      // A copy: a reload may replace the policies between this pass's awaits.
      std::shared_ptr<const IdlePolicy> policy;
      bool evict;
    };
    std::vector<Action> actions;
    for (auto& [key, c] : pods_) {
      if (c.pod.node_name.empty() || c.pod.deleting || c.reclaimed) continue;
      const IdlePolicy* policy = idlePolicyFor(c.pod);
      if (policy == nullptr) continue;
      const auto sample = util.find(key);
      if (sample == util.end()) continue;
      if (sample->second >= policy->utilization_below) {
        c.idle_since_s = -1;
        c.warned_s = -1;
        continue;
      }
      if (c.idle_since_s < 0) c.idle_since_s = now;
      if (now - c.idle_since_s < static_cast<int64_t>(policy->idle_hours * 3600)) continue;
      if (c.warned_s < 0) {
        c.warned_s = now;
        actions.push_back({key, std::make_shared<const IdlePolicy>(*policy), false});
      } else if (now - c.warned_s >= rc.warn_before_s) {
        c.reclaimed = true;
        actions.push_back({key, std::make_shared<const IdlePolicy>(*policy), true});
      }
    }
    for (const Action& a : actions) {
      auto it = pods_.find(a.key);
      if (it == pods_.end()) continue;
      const KubePod pod = it->second.pod;
      const double idle_s = static_cast<double>(now - it->second.idle_since_s);
      char below[32];
      std::snprintf(below, sizeof below, "%.0f%%", a.policy->utilization_below * 100);
      const std::string why = "GPU utilisation below " + std::string(below) + " for " +
                              std::to_string(static_cast<int64_t>(idle_s)) + " s (idle policy " +
                              a.policy->name + ")";
      if (!a.evict) {
        m_.idle_reclaims->counter({a.policy->name, "warned"})->inc(0);
        const std::string message = why + ": evicted in " + std::to_string(rc.warn_before_s) +
                                    " s unless it is used" +
                                    (rc.dry_run ? " (dry run: it will not be)" : "");
        co_await postEvent(pod, "Warning", "IdleReclaimWarning", message);
        continue;
      }
      if (rc.dry_run) {
        m_.idle_reclaims->counter({a.policy->name, "dry_run"})->inc(0);
        const std::string message = "dry run: would evict: " + why;
        co_await postEvent(pod, "Normal", "IdleReclaim", message);
        continue;
      }
      const std::string target = "/api/v1/namespaces/" + pod.ns + "/pods/" + pod.name + "/eviction";
      const std::string body = evictionJson(pod);
      auto r = co_await api_.call("POST", target, body);
      if (r.ok() && (r->status == 201 || r->status == 200)) {
        m_.idle_reclaims->counter({a.policy->name, "evicted"})->inc(0);
        m_.reclaimed_gpu_seconds->counter({a.policy->name})
            ->inc(0, pod.spec.num_gpu * (pod.spec.gpu_milli / 1000.0) * idle_s);
        const std::string message = "evicted: " + why;
        co_await postEvent(pod, "Warning", "IdleReclaimed", message);
        INFERA_LOG(logger(), info, "idle reclaim evicted {}: {}", a.key, why);
      } else {
        m_.idle_reclaims->counter({a.policy->name, "refused"})->inc(0);
        auto again = pods_.find(a.key);
        if (again != pods_.end()) again->second.reclaimed = false;  // tried again next time
        const std::string message =
            "idle reclaim eviction refused (" +
            (r.ok() ? "HTTP " + std::to_string(r->status) : r.status().message()) + ")";
        co_await postEvent(pod, "Warning", "IdleReclaimRefused", message);
      }
    }
  }

  // --- re-packing (recommendations) -----------------------------------------------------------

  Task<void> repackLoop() {
    asio::steady_timer timer(ctx_);
    while (!stopping_) {
      co_await sleepFor(timer, cfg_.repack.interval_ms);
      if (stopping_ || !leader_ || !pods_synced_ || !nodes_synced_ || !engine_) continue;
      co_await repackPass();
    }
  }

  // Every PodDisruptionBudget of the cluster (policy/v1), read for each re-packing plan.
  Task<Result<std::vector<KubePdb>>> listPdbs() {
    auto r = co_await api_.call("GET", "/apis/policy/v1/poddisruptionbudgets");
    if (!r.ok()) co_return r.takeStatus();
    if (r->status != 200) {
      co_return Status::unavailable("list poddisruptionbudgets: HTTP " + std::to_string(r->status) +
                                    " " + r->body.substr(0, 200));
    }
    const Json j = Json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    const Json* items = j.is_object() && j.contains("items") ? &j["items"] : nullptr;
    if (items == nullptr || !items->is_array()) {
      co_return Status::unavailable("list poddisruptionbudgets: not a list");
    }
    std::vector<KubePdb> out;
    for (const Json& item : *items) {
      auto pdb = pdbFromJson(item);
      if (!pdb.ok())
        co_return Status::unavailable("list poddisruptionbudgets: " + pdb.status().message());
      out.push_back(std::move(*pdb));
    }
    co_return out;
  }

  Task<void> repackPass() {
    const RepackServeConfig& rp = cfg_.repack;
    RepackConfig rc;
    rc.max_moves = rp.max_moves;
    rc.min_age_s = rp.min_age_s;
    rc.min_tier = static_cast<Tier>(rp.min_tier);
    rc.min_node_gpus = rp.node_gpus;
    if (rc.min_node_gpus <= 0) {
      for (const auto& [name, n] : nodes_)
        rc.min_node_gpus = std::max(rc.min_node_gpus, n.spec.gpus);
    }
    rc.target_empty_nodes = rp.target_empty_nodes;
    // PodDisruptionBudgets: a pod one of them selects moves only while that budget allows a
    // disruption, and a plan never asks more of a budget than it allows (below). Without them no
    // plan: a recommendation must not be one the budgets would refuse.
    auto pdbs = co_await listPdbs();
    if (stopping_ || !leader_ || !pods_synced_ || !nodes_synced_ || !engine_) co_return;
    if (!pdbs.ok()) {
      // No stale recommendation stays on the gauges; said once per failing spell.
      m_.repack_moves->gauge()->set(0);
      m_.repack_nodes->gauge()->set(0);
      if (!pdb_list_failing_) {
        INFERA_LOG(logger(), warn, "re-packing skipped until the budgets can be read: {}",
                   pdbs.status().message());
      }
      pdb_list_failing_ = true;
      co_return;
    }
    pdb_list_failing_ = false;
    const std::function<std::vector<size_t>(PodId)> budgets = [&](PodId id) {
      std::vector<size_t> out;
      const auto key = by_engine_id_.find(id);
      const auto it = key == by_engine_id_.end() ? pods_.end() : pods_.find(key->second);
      if (it == pods_.end()) return out;
      for (size_t b = 0; b < pdbs->size(); ++b) {
        if ((*pdbs)[b].selects(it->second.pod)) out.push_back(b);
      }
      return out;
    };
    // Pods on nodes an earlier round had to drop (their pods together overdraw a budget): planned
    // again without them, so such a node does not hide one behind it.
    std::set<PodId> held;
    rc.may_disrupt = [&](PodId id) {
      if (held.count(id)) return false;
      const std::vector<size_t> of = budgets(id);
      // The eviction API refuses a pod under more than one budget, whatever their room.
      if (of.size() > 1) return false;
      for (const size_t b : of) {
        if ((*pdbs)[b].disruptions_allowed <= 0) return false;
      }
      return true;
    };
    RepackPlan plan = engine_->planRepack(rc, wallSeconds());
    for (int round = 0; !pdbs->empty(); ++round) {
      RepackPlan kept = keepWithinBudgets(plan, *pdbs, budgets);
      if (kept.nodes_emptied.size() == plan.nodes_emptied.size() || round == 3) {
        plan = std::move(kept);
        break;
      }
      for (const Migration& m : plan.moves) {
        if (std::find(kept.nodes_emptied.begin(), kept.nodes_emptied.end(), m.from) ==
            kept.nodes_emptied.end()) {
          held.insert(m.pod);
        }
      }
      plan = engine_->planRepack(rc, wallSeconds());
    }
    m_.repack_plans->counter()->inc(0);
    m_.repack_moves->gauge()->set(static_cast<double>(plan.moves.size()));
    m_.repack_nodes->gauge()->set(static_cast<double>(plan.nodes_emptied.size()));
    std::set<std::string> recommended;
    std::vector<std::pair<KubePod, std::string>> events;
    for (const Migration& m : plan.moves) {
      const auto key = by_engine_id_.find(m.pod);
      if (key == by_engine_id_.end()) continue;
      const auto it = pods_.find(key->second);
      if (it == pods_.end()) continue;
      recommended.insert(key->second);
      if (it->second.repack_to == m.to) continue;  // said already
      it->second.repack_to = m.to;
      events.emplace_back(it->second.pod, "recommend moving to " + m.to + ": " + m.reason +
                                              " (dry run: nothing is moved)");
      INFERA_LOG(logger(), info, "re-packing recommends moving {} from {} to {}: {}", key->second,
                 m.from, m.to, m.reason);
    }
    for (auto& [key, c] : pods_) {
      if (!recommended.count(key)) c.repack_to.clear();
    }
    for (const auto& [pod, message] : events) {
      co_await postEvent(pod, "Normal", "RepackRecommended", message);
    }
  }

  asio::io_context& ctx_;
  ServeConfig cfg_;
  std::optional<net::UpstreamAddress> prometheus_;
  ApiClient api_;
  Metrics m_;
  asio::steady_timer wake_;
  bool dirty_ = false;
  bool stopping_ = false;
  bool nodes_synced_ = false;
  bool pods_synced_ = false;
  bool needs_rebuild_ = true;
  bool pdb_list_failing_ = false;    // re-packing: the budgets could not be listed last time
  bool leader_ = true;               // without leader election every replica schedules
  bool relist_[2] = {false, false};  // by Kind: list again at the next turn of its watch loop
  std::unique_ptr<LeaderElector> elector_;
  std::map<std::string, KubeNode> nodes_;
  std::map<std::string, CachedPod> pods_;  // by "ns/name"
  std::map<PodId, std::string> by_engine_id_;
  std::map<std::string, std::string> victims_;  // victim key -> the beneficiary waiting for it
  std::unique_ptr<Scheduler> engine_;
  std::set<std::vector<std::string>> exported_queues_;  // labels of the queue series exported
  int unaccounted_ = 0;
};

class KubeSchedulerImpl final : public KubeScheduler {
 public:
  KubeSchedulerImpl(ServeConfig cfg, ServeConfig as_loaded, net::UpstreamAddress address,
                    std::optional<net::UpstreamAddress> prometheus)
      : cfg_(std::move(cfg)),
        loaded_(std::move(as_loaded)),
        address_(std::move(address)),
        prometheus_(std::move(prometheus)),
        registry_(1),
        loops_(1) {}
  // The controller's coroutines still queued on the loops point into it, and its timers and
  // sockets into the loops' services: the loops' handlers go first, then the controller, then
  // the loops.
  ~KubeSchedulerImpl() override {
    stop();
    loops_.shutdown();
    controller_.reset();
  }

  Status start() override {
    std::lock_guard<std::mutex> lock(reload_mu_);
    controller_ =
        std::make_unique<Controller>(loops_.loop(0), cfg_, address_, prometheus_, registry_);
    Metrics* metrics = &controller_->metrics();
    net::ServerConfig sc;
    sc.host = cfg_.metrics.host;
    sc.port = static_cast<uint16_t>(cfg_.metrics.port);
    obs::MetricsRegistry* reg = &registry_;
    auto metrics_server = net::HttpServer::create(
        loops_, sc, [reg](int, asio::io_context&) -> std::unique_ptr<net::HttpHandler> {
          net::Router router;
          router.add(
              "GET", "/metrics",
              [reg](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
                const std::string body = reg->scrape();
                co_await w.send(200, "text/plain; version=0.0.4", body);
              });
          router.add("GET", "/healthz",
                     [](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
                       co_await w.send(200, "text/plain", "ok\n");
                     });
          return std::make_unique<net::RouterHandler>(std::move(router));
        });
    if (!metrics_server.ok()) return metrics_server.status().withContext("metrics port");
    metrics_server_ = std::move(*metrics_server);
    if (cfg_.webhook.enabled) {
      net::ServerConfig wc;
      wc.host = cfg_.webhook.listen.host;
      wc.port = static_cast<uint16_t>(cfg_.webhook.listen.port);
      wc.tls = cfg_.webhook.tls;
      webhook_policy_.set(WebhookPolicy{cfg_.kube, cfg_.scheduling, cfg_.webhook});
      CurrentPolicy* current = &webhook_policy_;
      auto webhook_server = net::HttpServer::create(
          loops_, wc,
          [current, metrics](int, asio::io_context&) -> std::unique_ptr<net::HttpHandler> {
            net::Router router;
            router.add("POST", "/mutate",
                       [current, metrics](net::HttpRequest& req, net::ResponseWriter& w,
                                          net::PathParams) -> Task<void> {
                         const auto policy = current->get();
                         auto answer = admissionResponse(req.body, *policy);
                         if (!answer.ok()) {
                           metrics->admission->counter({"bad_request"})->inc(0);
                           const std::string msg = answer.status().message() + "\n";
                           co_await w.send(400, "text/plain", msg);
                           co_return;
                         }
                         metrics->admission->counter({"mutated"})->inc(0);
                         co_await w.send(200, "application/json", *answer);
                       });
            return std::make_unique<net::RouterHandler>(std::move(router));
          });
      if (!webhook_server.ok()) return webhook_server.status().withContext("webhook port");
      webhook_server_ = std::move(*webhook_server);
    }
    loops_.start();
    Controller* c = controller_.get();
    asio::post(loops_.loop(0), [c] { c->start(); });
    started_ = true;
    return Status::ok();
  }

  uint16_t metricsPort() const override { return metrics_server_ ? metrics_server_->port() : 0; }
  uint16_t webhookPort() const override { return webhook_server_ ? webhook_server_->port() : 0; }

  Status reload(ServeConfig next) override {
    std::lock_guard<std::mutex> lock(reload_mu_);
    auto refuse = [&](Status s) {
      if (controller_) controller_->metrics().reloads->counter({"refused"})->inc(0);
      return s;
    };
    // Compared with the file as it was loaded: cfg_ holds in-cluster defaults filled in since.
    const std::vector<std::string> restart = restartNeeded(loaded_, next);
    if (!restart.empty()) {
      std::string keys;
      for (const std::string& k : restart) keys += (keys.empty() ? "" : ", ") + k;
      return refuse(Status::invalidArgument("reload refused, these need a restart: " + keys));
    }
    SchedulerConfig sc;
    sc.policy = next.policy;
    sc.scheduling = next.scheduling;
    const Status engine = Scheduler::create(sc, {}).status();
    if (!engine.isOk()) return refuse(engine.withContext("reload refused"));
    loaded_ = next;
    takeReloadable(cfg_, next);
    if (!started_) return Status::ok();
    if (webhook_server_)
      webhook_policy_.set(WebhookPolicy{cfg_.kube, cfg_.scheduling, cfg_.webhook});
    Controller* c = controller_.get();
    asio::post(loops_.loop(0), [c, next = std::move(next)] { c->applyConfig(next); });
    return Status::ok();
  }

  Status reloadFile(const std::string& path) override {
    auto next = loadServeConfigFile(path);
    if (!next.ok()) {
      std::lock_guard<std::mutex> lock(reload_mu_);
      if (controller_) controller_->metrics().reloads->counter({"refused"})->inc(0);
      return next.status().withContext("reload refused");
    }
    return reload(std::move(*next));
  }

  void stop() override {
    std::lock_guard<std::mutex> lock(reload_mu_);
    if (!started_) return;
    started_ = false;
    Controller* c = controller_.get();
    asio::post(loops_.loop(0), [c] { c->stop(); });
    // Servers go first, while the loops run (their teardown posts to them); the loops' pending
    // coroutines are destroyed with the loops, before the controller they point into.
    if (webhook_server_) webhook_server_->drain(std::chrono::seconds(2));
    if (metrics_server_) metrics_server_->drain(std::chrono::seconds(2));
    webhook_server_.reset();
    metrics_server_.reset();
    loops_.stop();
  }

 private:
  // Destroyed bottom up (after ~KubeSchedulerImpl has shut the loops down and destroyed the
  // controller): the loops, then the metrics the controller counted in.
  ServeConfig cfg_;     // as running: in-cluster defaults resolved
  ServeConfig loaded_;  // as the file said (what a reload is compared with)
  net::UpstreamAddress address_;
  std::optional<net::UpstreamAddress> prometheus_;
  obs::MetricsRegistry registry_;
  // The webhook's rules: read by its handlers on the server's threads, replaced by a reload.
  class CurrentPolicy {
   public:
    void set(WebhookPolicy p) {
      auto next = std::make_shared<const WebhookPolicy>(std::move(p));
      std::lock_guard<std::mutex> lock(mu_);
      policy_ = std::move(next);
    }
    std::shared_ptr<const WebhookPolicy> get() const {
      std::lock_guard<std::mutex> lock(mu_);
      return policy_;
    }

   private:
    mutable std::mutex mu_;
    std::shared_ptr<const WebhookPolicy> policy_;
  };
  CurrentPolicy webhook_policy_;
  std::unique_ptr<Controller> controller_;
  net::EventLoops loops_;
  std::unique_ptr<net::HttpServer> metrics_server_;
  std::unique_ptr<net::HttpServer> webhook_server_;
  std::mutex reload_mu_;  // reload against stop
  bool started_ = false;
};

}  // namespace

Result<std::unique_ptr<KubeScheduler>> KubeScheduler::create(ServeConfig config) {
  ServeConfig as_loaded = config;
  std::string url = config.kube.api_server;
  std::string ca = config.kube.ca_file;
  if (url.empty()) {
    // In-cluster: the service's address and the service account's credentials.
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (host == nullptr || port == nullptr) {
      return Status::invalidArgument(
          "kube.api_server is empty and KUBERNETES_SERVICE_HOST/PORT are not set (not in a pod)");
    }
    url = std::string("https://") + host + ":" + port;
    const std::string sa = "/var/run/secrets/kubernetes.io/serviceaccount/";
    if (ca.empty()) ca = sa + "ca.crt";
    if (config.kube.token_file.empty()) config.kube.token_file = sa + "token";
  }
  net::TlsClientConfig tls;
  if (url.rfind("https://", 0) == 0) {
    tls.ca_file = ca;
    tls.verify = !config.kube.insecure_skip_verify;
  }
  INFERA_ASSIGN_OR_RETURN(net::UpstreamAddress address, net::resolveUrl(url, tls));
  // The engine's config is checked now, so a bad policy fails the start, not the first pass.
  SchedulerConfig sc;
  sc.policy = config.policy;
  sc.scheduling = config.scheduling;
  INFERA_RETURN_IF_ERROR(Scheduler::create(sc, {}).status());
  std::optional<net::UpstreamAddress> prometheus;
  if (config.reclaim.enabled) {
    auto p = net::resolveUrl(config.reclaim.prometheus_url);
    if (!p.ok()) return p.status().withContext("reclaim.prometheus_url");
    prometheus = std::move(*p);
  }
  return std::unique_ptr<KubeScheduler>(new KubeSchedulerImpl(
      std::move(config), std::move(as_loaded), std::move(address), std::move(prometheus)));
}

}  // namespace infera::sched::kube
