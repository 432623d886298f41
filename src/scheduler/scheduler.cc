#include "scheduler/scheduler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "scheduler/cluster.h"

namespace infera::sched {
namespace {

constexpr int kTotal = kMaxGpuTypes;  // quota index for "*" (all GPU types)
constexpr double kTieEps = 1e-9;

struct QueueState {
  std::string name;
  int parent = -1;
  bool has_children = false;
  std::array<int64_t, kMaxGpuTypes + 1> guaranteed;  // -1 = unset
  std::array<int64_t, kMaxGpuTypes + 1> max;
  int64_t cpu_max = -1;
  int64_t mem_max = -1;
  std::array<int64_t, kMaxGpuTypes + 1> used{};  // all tiers
  // Tier-0 use per type; at kTotal, the tier-0 use charged to the "*" guarantee (types without a
  // guarantee of their own).
  std::array<int64_t, kMaxGpuTypes + 1> used_t0{};
  int64_t cpu_used = 0;
  int64_t mem_used = 0;
};

struct PodRecord {
  std::string name;
  PodReq req;
  Tier tier = Tier::kShared;
  int queue = -1;
  int node = -1;
  std::vector<int> gpus;
  int64_t cpu = 0;  // effective (after proportional adjustment)
  int64_t mem = 0;
  int64_t creation_s = 0;
  int64_t bound_s = 0;  // when it was bound (or last migrated)
  int idle_policy = -1;
  int64_t idle_since = -1;
  bool alive = false;
  uint32_t generation = 0;  // bumped each time the slot is reused
  // What other pods' inter-pod terms look at: its namespace and labels, and its own
  // anti-affinity terms (which keep pods they select out of its domains).
  std::string ns;
  std::map<std::string, std::string> labels;
  std::vector<PodAffinityTerm> anti_affinity;
  // Its preferred terms, which score the nodes for pods they select (kube-scheduler's symmetry),
  // and its required affinity terms, which score them with weight 1 (hardPodAffinityWeight).
  std::vector<WeightedPodTerm> soft_affinity;
  std::vector<WeightedPodTerm> soft_anti_affinity;
  std::vector<PodAffinityTerm> affinity;
  bool terminating = false;  // not counted by topology spread
};

// One term of a running pod's, in SchedulerImpl::terms_by_pair_.
struct TermRef {
  PodId holder;
  uint8_t kind;  // 0 soft_affinity, 1 soft_anti_affinity, 2 affinity
  uint32_t index;
};
// An index's list (running pods, or their terms) whose entries of ended pods are dropped lazily:
// each end counts one stale entry, and the list is compacted once they are half of it.
template <typename T>
struct IndexList {
  std::vector<T> items;
  size_t stale = 0;
};
PodId holderOf(PodId id) { return id; }
PodId holderOf(const TermRef& r) { return r.holder; }

// Whether a running pod's terms score the nodes for the pods they select.
bool scoresOthers(const PodRecord& p) {
  return !p.soft_affinity.empty() || !p.soft_anti_affinity.empty() || !p.affinity.empty();
}

struct Plan {
  PodReq req;  // effective request on the chosen node
  Tier tier = Tier::kShared;
  int queue = -1;
  int node = -1;
  int gpu = -1;  // sharing pods
  std::vector<PodId> victims;
};

bool labelsMatch(const std::map<std::string, std::string>& want, const PodSpec& pod) {
  for (const auto& [k, v] : want) {
    const auto it = pod.labels.find(k);
    if (it != pod.labels.end()) {
      if (it->second != v) return false;
    } else if (!(k == "qos" && pod.qos == v)) {
      return false;
    }
  }
  return true;
}

uint64_t stableHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : s) {
    h = (h ^ c) * 1099511628211ull;
  }
  return h;
}

std::string gpuMilliText(int64_t milli) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", static_cast<double>(milli) / kMilliPerGpu);
  return buf;
}

class SchedulerImpl final : public Scheduler {
 public:
  static Result<std::unique_ptr<SchedulerImpl>> make(SchedulerConfig config,
                                                     const std::vector<NodeSpec>& nodes) {
    auto s = std::unique_ptr<SchedulerImpl>(new SchedulerImpl(std::move(config)));
    INFERA_RETURN_IF_ERROR(s->init(nodes));
    return s;
  }

  Result<Placement> schedule(const PodSpec& pod, int64_t now_s) override {
    INFERA_ASSIGN_OR_RETURN(Plan plan, makePlan(pod, now_s, /*allow_preempt=*/true));
    return commit(pod, plan, now_s);
  }

  Result<Placement> assume(const PodSpec& pod, const std::string& node_name,
                           int64_t now_s) override {
    const auto node = node_index_.find(node_name);
    if (node == node_index_.end()) return Status::notFound("no node " + node_name);
    Plan plan;
    INFERA_ASSIGN_OR_RETURN(const PodReq r, toReq(pod));
    INFERA_RETURN_IF_ERROR(resolveQueue(pod, &plan.queue, &plan.tier));
    plan.node = node->second;
    const NodeState& n = nodes_[plan.node];
    // It holds what it asked for, and the node's GPU type is what it got.
    plan.req = r;
    plan.req.types = kAnyType;
    if (!fits(n, plan.req)) {
      return Status::resourceExhausted("pod " + pod.name + " does not fit on " + node_name);
    }
    return commit(pod, plan, now_s);
  }

  Result<Placement> decide(const PodSpec& pod, int64_t now_s) override {
    INFERA_ASSIGN_OR_RETURN(Plan plan, makePlan(pod, now_s, /*allow_preempt=*/false));
    Placement p;
    fillPlacement(p, plan);
    return p;
  }

  Status release(PodId id) override {
    if (live(id) == nullptr) {
      return Status::notFound("no running pod with id " + std::to_string(id));
    }
    unbind(id);
    return Status::ok();
  }

  Result<Eviction> evict(PodId id, std::string reason) override {
    if (live(id) == nullptr) {
      return Status::notFound("no running pod with id " + std::to_string(id));
    }
    Eviction e{id, rec(id).name, nodes_[rec(id).node].name, std::move(reason)};
    unbind(id);
    return e;
  }

  Result<int> addNode(const NodeSpec& spec) override {
    INFERA_RETURN_IF_ERROR(appendNode(spec));
    return static_cast<int>(nodes_.size()) - 1;
  }

  void recordUtilization(PodId id, double utilization, int64_t now_s) override {
    PodRecord* live_pod = live(id);
    if (live_pod == nullptr) return;
    PodRecord& p = *live_pod;
    if (p.idle_policy < 0) return;
    if (utilization < cfg_.scheduling.idle_reclaim[p.idle_policy].utilization_below) {
      if (p.idle_since < 0) p.idle_since = now_s;
    } else {
      p.idle_since = -1;
    }
  }

  std::vector<Eviction> reclaimIdle(int64_t now_s) override {
    std::vector<Eviction> out;
    for (uint32_t slot = 0; slot < pods_.size(); ++slot) {
      const PodRecord& p = pods_[slot];
      const PodId id = idOf(slot);
      if (!p.alive || p.idle_policy < 0 || p.idle_since < 0) continue;
      const IdlePolicy& pol = cfg_.scheduling.idle_reclaim[p.idle_policy];
      const double idle_h = static_cast<double>(now_s - p.idle_since) / 3600.0;
      if (idle_h + 1e-9 < pol.idle_hours) continue;
      char reason[256];
      std::snprintf(reason, sizeof(reason),
                    "idle reclaim '%s': GPU utilisation below %.0f%% for %.1f h (limit %.1f h)",
                    pol.name.c_str(), pol.utilization_below * 100, idle_h, pol.idle_hours);
      out.push_back(Eviction{id, p.name, nodes_[p.node].name, reason});
      unbind(id);
    }
    return out;
  }

  RepackPlan planRepack(const RepackConfig& cfg, int64_t now_s) override {
    RepackPlan plan;
    if (cfg.max_moves <= 0) return plan;
    const int min_gpus = std::max(1, cfg.min_node_gpus);
    auto isEmpty = [&](const NodeState& n) { return n.gpus > 0 && n.full_free_gpus == n.gpus; };
    int empty = 0;
    for (size_t n = 0; n < nodes_.size(); ++n) {
      empty += !node_closed_[n] && nodes_[n].gpus >= min_gpus && isEmpty(nodes_[n]);
    }
    if (cfg.target_empty_nodes > 0 && empty >= cfg.target_empty_nodes) return plan;
    PodReq want;
    if (cfg.for_pod) {
      auto r = toReq(*cfg.for_pod);
      if (!r.ok()) return plan;
      want = *r;
    }
    // A node that, emptied, would host the pod it is for (and does not now).
    auto wouldHost = [&](int node) {
      const NodeState& n = nodes_[node];
      if (!cfg.for_pod) return true;
      if (!allowedOn(want, node)) return false;
      if (fits(n, want) || n.cpu_capacity < want.cpu_milli || n.mem_capacity < want.memory_mib)
        return false;
      return want.num_gpu == 0 ||
             (n.type >= 0 && n.typeAllowed(want.types) && n.gpus >= want.num_gpu);
    };
    const int freed_target = cfg.for_pod ? 1 : std::numeric_limits<int>::max();
    // Sources: nodes of the size asked for with GPUs in use whose every pod may move.
    struct Source {
      int node;
      int pods;
      int64_t gpu_used;
    };
    std::vector<Source> sources;
    for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
      const NodeState& node = nodes_[n];
      if (node.gpus < min_gpus || node.type < 0 || node_closed_[static_cast<size_t>(n)] ||
          !wouldHost(n))
        continue;
      if (isEmpty(node) && !cfg.for_pod) continue;
      const auto& on = node_pods_[n];
      if (on.empty() || static_cast<int>(on.size()) > cfg.max_moves) continue;
      const bool all_move = std::all_of(on.begin(), on.end(), [&](PodId id) {
        const PodRecord& p = rec(id);
        return p.tier >= cfg.min_tier && now_s - p.bound_s >= cfg.min_age_s &&
               (!cfg.may_disrupt || cfg.may_disrupt(id));
      });
      if (!all_move) continue;
      sources.push_back(
          Source{n, static_cast<int>(on.size()),
                 static_cast<int64_t>(node.gpus) * kMilliPerGpu - node.gpu_free_total});
    }
    // Fewest moves per node freed first; among equals the larger node, then the less to move.
    std::sort(sources.begin(), sources.end(), [&](const Source& a, const Source& b) {
      if (a.pods != b.pods) return a.pods < b.pods;
      if (nodes_[a.node].gpus != nodes_[b.node].gpus)
        return nodes_[a.node].gpus > nodes_[b.node].gpus;
      if (a.gpu_used != b.gpu_used) return a.gpu_used < b.gpu_used;
      return node_rank_[a.node] < node_rank_[b.node];
    });
    // Targets never include an empty GPU node (that only moves the hole), a node being emptied
    // or a closed one.
    std::vector<uint8_t> blocked(nodes_.size(), 0);
    for (size_t n = 0; n < nodes_.size(); ++n) blocked[n] = isEmpty(nodes_[n]) || node_closed_[n];
    std::vector<uint8_t> received(nodes_.size(), 0);  // targets stay: never emptied after
    std::vector<Applied> applied;  // every tentative move, undone before returning
    const Rng rng_before = rng_;   // ties drawn while planning must not shift later decisions
    constexpr int kMaxCandidates = 256;
    std::vector<uint8_t> tried(nodes_.size(), 0);
    std::vector<uint8_t> soft;  // blocked, and the untried sources as cheap to free as this one
    for (const Source& src : sources) {
      tried[static_cast<size_t>(src.node)] = 1;
      if (static_cast<int>(plan.moves.size()) + src.pods > cfg.max_moves) continue;
      if (cfg.target_empty_nodes > 0 && empty >= cfg.target_empty_nodes) break;
      if (static_cast<int>(plan.nodes_emptied.size()) >= freed_target) break;
      if (received[static_cast<size_t>(src.node)]) continue;
      if (plan.candidates++ >= kMaxCandidates) break;
      blocked[static_cast<size_t>(src.node)] = 1;
      soft = blocked;
      for (const Source& other : sources) {
        if (other.pods > src.pods) break;  // sorted by pods
        if (!tried[static_cast<size_t>(other.node)]) soft[static_cast<size_t>(other.node)] = 1;
      }
      std::vector<PodId> movers = node_pods_[src.node];
      std::sort(movers.begin(), movers.end(), [&](PodId a, PodId b) {
        return rec(a).req.gpuTotalMilli() != rec(b).req.gpuTotalMilli()
                   ? rec(a).req.gpuTotalMilli() > rec(b).req.gpuTotalMilli()
                   : a < b;
      });
      const size_t mark = applied.size();
      bool ok = true;
      for (const PodId id : movers) {
        const PodRecord& p = rec(id);
        Plan target;
        const TypeMask mask = p.req.num_gpu > 0 ? TypeMask{1u} << nodes_[src.node].type : kAnyType;
        // Rather not onto a node the next plans could free as cheaply; onto it if nowhere else.
        exclude_ = &soft;
        bool found = findNode(p.req, mask, &target);
        exclude_ = &blocked;
        if (!found) found = findNode(p.req, mask, &target);
        exclude_ = nullptr;
        if (!found) {
          ok = false;
          break;
        }
        applied.push_back(Applied{id, p.node, p.gpus, p.req});
        moveTo(id, target.node, target.req, target.gpu);
      }
      if (ok) {
        for (size_t i = mark; i < applied.size(); ++i)
          received[static_cast<size_t>(rec(applied[i].pod).node)] = 1;
      } else {
        undoMoves(applied, mark);
        blocked[static_cast<size_t>(src.node)] = isEmpty(nodes_[src.node]);
        continue;
      }
      const NodeState& freed = nodes_[src.node];
      plan.nodes_emptied.push_back(freed.name);
      plan.gpu_milli_freed += static_cast<int64_t>(freed.gpus) * kMilliPerGpu;
      ++empty;
      char reason[160];
      std::snprintf(reason, sizeof(reason), "re-packing frees node %s (%d GPUs): %zu pod(s) move",
                    freed.name.c_str(), freed.gpus, movers.size());
      for (size_t i = mark; i < applied.size(); ++i) {
        const PodRecord& p = rec(applied[i].pod);
        plan.moves.push_back(Migration{applied[i].pod, p.name, applied[i].from, p.node,
                                       nodes_[applied[i].from].name, nodes_[p.node].name,
                                       p.req.gpuTotalMilli(), reason});
      }
    }
    undoMoves(applied, 0);
    rng_ = rng_before;
    return plan;
  }

  Result<Placement> migrate(PodId id, int to_node, int64_t now_s) override {
    PodRecord* live_pod = live(id);
    if (live_pod == nullptr) {
      return Status::notFound("no running pod with id " + std::to_string(id));
    }
    if (to_node < 0 || to_node >= static_cast<int>(nodes_.size()) || to_node == live_pod->node) {
      return Status::invalidArgument("pod " + live_pod->name + ": bad target node");
    }
    if (live_pod->req.num_gpu > 0 && nodes_[to_node].type != nodes_[live_pod->node].type) {
      return Status::invalidArgument("pod " + live_pod->name + ": target node " +
                                     nodes_[to_node].name + " has another GPU type");
    }
    if (node_closed_[static_cast<size_t>(to_node)]) {
      return Status::invalidArgument("pod " + live_pod->name + ": target node " +
                                     nodes_[to_node].name + " is closed");
    }
    if (!allowedOn(live_pod->req, to_node)) {
      return Status::invalidArgument("pod " + live_pod->name + ": target node " +
                                     nodes_[to_node].name +
                                     " is excluded by its node constraints or taints");
    }
    PodReq eff = live_pod->req;
    if (!fits(nodes_[to_node], eff)) {
      return Status::resourceExhausted("pod " + live_pod->name + " does not fit on " +
                                       nodes_[to_node].name);
    }
    moveTo(id, to_node, eff, eff.sharing() ? bestFitGpu(nodes_[to_node], eff.gpu_milli) : -1);
    PodRecord& p = rec(id);
    p.bound_s = now_s;
    Placement out;
    Plan plan;
    plan.node = p.node;
    plan.req = p.req;
    fillPlacement(out, plan);
    out.gpu_indices = p.gpus;
    out.pod = id;
    out.queue = p.queue >= 0 ? queues_[p.queue].name : "";
    out.tier = p.tier;
    return out;
  }

  ClusterStats stats() const override {
    ClusterStats s;
    s.nodes = static_cast<int>(nodes_.size()) - closed_nodes_;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const NodeState& n = nodes_[i];
      if (node_closed_[i]) continue;
      s.gpu_milli_capacity += static_cast<int64_t>(n.gpus) * kMilliPerGpu;
      s.gpu_milli_allocated += static_cast<int64_t>(n.gpus) * kMilliPerGpu - n.gpu_free_total;
      s.cpu_milli_capacity += n.cpu_capacity;
      s.cpu_milli_allocated += n.cpu_capacity - n.cpu_free;
      s.running_pods += n.pods;
      if (n.gpus > 0 && n.full_free_gpus == n.gpus) {
        ++s.empty_gpu_nodes;
        s.gpu_milli_on_empty_nodes += n.gpu_free_total;
      }
      if (stats_model_ != nullptr) s.fragmentation_milli += stats_model_->nodeFrag(n);
    }
    return s;
  }

  std::vector<QueueUsage> queueUsage() const override {
    std::vector<QueueUsage> out;
    for (const QueueState& q : queues_) {
      for (int t = 0; t <= kTotal; ++t) {
        if (t < kTotal && t >= static_cast<int>(type_names_.size())) continue;
        if (q.used[t] == 0 && q.guaranteed[t] < 0 && q.max[t] < 0) continue;
        out.push_back(QueueUsage{q.name, t == kTotal ? "*" : type_names_[t], q.used[t],
                                 q.guaranteed[t], q.max[t]});
      }
    }
    return out;
  }

  int nodesForGuarantees() const override {
    std::array<int64_t, kMaxGpuTypes> need{};
    for (size_t q = 0; q < queues_.size(); ++q) {
      if (isParent(static_cast<int>(q))) continue;
      for (int t = 0; t < kMaxGpuTypes; ++t) {
        if (queues_[q].guaranteed[t] > 0) need[t] += queues_[q].guaranteed[t];
      }
    }
    int count = 0;
    for (int t = 0; t < kMaxGpuTypes; ++t) {
      if (need[t] <= 0) continue;
      std::vector<int> sizes;
      for (const int n : by_type_[t]) {
        if (!node_closed_[static_cast<size_t>(n)]) sizes.push_back(nodes_[n].gpus);
      }
      std::sort(sizes.rbegin(), sizes.rend());
      int64_t have = 0;
      for (const int g : sizes) {
        if (have >= need[t]) break;
        have += static_cast<int64_t>(g) * kMilliPerGpu;
        ++count;
      }
    }
    return count;
  }

  std::string_view policyName() const override { return policy_->name(); }
  const std::string& nodeName(int node) const override { return nodes_[node].name; }

 private:
  explicit SchedulerImpl(SchedulerConfig config) : cfg_(std::move(config)), rng_(cfg_.seed) {}

  Status init(const std::vector<NodeSpec>& nodes) {
    const auto& names = policyNames();
    if (std::find(names.begin(), names.end(), cfg_.policy) == names.end()) {
      return Status::invalidArgument("unknown policy '" + cfg_.policy + "'");
    }
    for (const GpuTypeInfo& t : cfg_.scheduling.gpu_types) {
      INFERA_ASSIGN_OR_RETURN(const int id, internType(t.name));
      rank_[id] = t.rank;
      cost_[id] = t.cost;
    }
    has_ladder_ = !cfg_.scheduling.gpu_types.empty();
    for (const NodeSpec& n : nodes) {
      INFERA_RETURN_IF_ERROR(appendNode(n));
    }
    INFERA_RETURN_IF_ERROR(initQueues());
    // The node order for first-node tie-breaking: a seeded permutation of the initial nodes (the
    // FGD simulator names its nodes with a random per-seed prefix); later nodes come after them.
    Rng order(cfg_.seed ^ 0x0de5'0bde'5eedull);
    for (size_t i = node_rank_.size(); i > 1; --i) {
      std::swap(node_rank_[i - 1], node_rank_[order.below(i)]);
    }

    std::vector<PodReq> workload;
    for (const PodSpec& p : cfg_.workload) {
      auto r = toReq(p);
      if (r.ok()) workload.push_back(*r);
    }
    if (workload.empty()) {
      // Generic mix: half-GPU, 1, 2, 4 and 8 whole GPUs.
      for (const auto& [n, m] : std::vector<std::pair<int, int>>{
               {1, 500}, {1, 1000}, {1, 1000}, {2, 1000}, {4, 1000}, {8, 1000}}) {
        workload.push_back(PodReq{4000 * n, 16384LL * n, n, m, kAnyType});
      }
    }
    fgd_model_ = buildFragModel(workload, cfg_.fgd_typical_coverage, /*with_memory=*/false);
    full_model_ = buildFragModel(workload, 1.0, /*with_memory=*/true);
    stats_model_ = &fgd_model_;
    view_.nodes = &nodes_;  // also for an engine that starts with no nodes (nodes join later)
    view_.closed = &node_closed_;
    policy_ = makePolicy(cfg_.policy, view_, &fgd_model_, &full_model_, cfg_.seed);
    if (!policy_) return Status::invalidArgument("unknown policy '" + cfg_.policy + "'");
    return Status::ok();
  }

  Result<int> internType(const std::string& name) {
    const auto it = type_ids_.find(name);
    if (it != type_ids_.end()) return it->second;
    if (type_names_.size() >= static_cast<size_t>(kMaxGpuTypes)) {
      return Status::resourceExhausted("more than 32 GPU types");
    }
    const int id = static_cast<int>(type_names_.size());
    type_ids_[name] = id;
    type_names_.push_back(name);
    return id;
  }

  Status appendNode(const NodeSpec& spec) {
    if (spec.gpus < 0 || spec.gpus > kMaxGpusPerNode) {
      return Status::invalidArgument("node " + spec.name + ": gpus must be in [0, 16]");
    }
    if (spec.cpu_milli < 0 || spec.memory_mib < 0) {
      return Status::invalidArgument("node " + spec.name + ": negative capacity");
    }
    NodeState n;
    n.name = spec.name;
    n.cpu_capacity = n.cpu_free = spec.cpu_milli;
    n.mem_capacity = n.mem_free = spec.memory_mib;
    n.gpus = spec.gpus;
    if (spec.gpus > 0) {
      if (spec.gpu_model.empty()) {
        return Status::invalidArgument("node " + spec.name + ": GPU node without a GPU model");
      }
      INFERA_ASSIGN_OR_RETURN(n.type, internType(spec.gpu_model));
    }
    for (int g = 0; g < n.gpus; ++g) n.gpu_free[g] = kMilliPerGpu;
    n.sorted_free = n.gpu_free;
    n.gpu_free_total = n.gpus * kMilliPerGpu;
    n.full_free_gpus = n.gpus;
    const int idx = static_cast<int>(nodes_.size());
    if (!node_index_.emplace(n.name, idx).second) {
      return Status::alreadyExists("node " + n.name + " added twice");
    }
    nodes_.push_back(n);
    node_hard_taint_.push_back(hasHardTaint(spec) ? 1 : 0);
    hard_tainted_nodes_ += node_hard_taint_.back();
    node_closed_.push_back(spec.closed ? 1 : 0);
    closed_nodes_ += spec.closed ? 1 : 0;
    soft_tainted_nodes_ += std::any_of(spec.taints.begin(), spec.taints.end(), [](const Taint& t) {
      return t.effect == "PreferNoSchedule";
    });
    node_specs_.push_back(NodeSpec{spec.name, 0, 0, 0, {}, spec.labels, spec.taints, spec.closed});
    domains_.clear();
    for (const auto& [key, e] : elig_index_) {
      Eligibility& el = elig_[static_cast<size_t>(e)];
      el.allowed.push_back(constraintsAllow(el.constraints, node_specs_.back()) ? 1 : 0);
    }
    node_rank_.push_back(static_cast<uint32_t>(node_rank_.size()));
    node_pods_.emplace_back();
    if (n.type >= 0) {
      by_type_[n.type].push_back(idx);
      if (!spec.closed) capacity_[n.type] += static_cast<int64_t>(n.gpus) * kMilliPerGpu;
    }
    view_.nodes = &nodes_;
    view_.max_cpu = std::max(view_.max_cpu, n.cpu_capacity);
    view_.max_mem = std::max(view_.max_mem, n.mem_capacity);
    view_.max_gpu_milli = std::max(view_.max_gpu_milli, n.gpus * kMilliPerGpu);
    if (policy_) policy_->nodeChanged(idx);
    return Status::ok();
  }

  Status initQueues() {
    std::map<std::string, int> index;
    for (const QueueSpec& q : cfg_.scheduling.queues) {
      QueueState s;
      s.name = q.name;
      s.guaranteed.fill(-1);
      s.max.fill(-1);
      if (!q.parent.empty()) {
        const auto it = index.find(q.parent);
        if (it == index.end())
          return Status::invalidArgument("queue " + q.name + ": unknown parent");
        s.parent = it->second;
      }
      for (const auto* src : {&q.guaranteed, &q.max}) {
        auto& dst = src == &q.guaranteed ? s.guaranteed : s.max;
        for (const auto& [type, milli] : src->gpu_milli) {
          if (type == "*") {
            dst[kTotal] = milli;
          } else {
            INFERA_ASSIGN_OR_RETURN(const int id, internType(type));
            dst[id] = milli;
          }
        }
      }
      s.cpu_max = q.max.cpu_milli.value_or(-1);
      s.mem_max = q.max.memory_mib.value_or(-1);
      index[q.name] = static_cast<int>(queues_.size());
      queues_.push_back(s);
    }
    queue_index_ = std::move(index);
    for (QueueState& q : queues_) {
      if (q.parent >= 0) queues_[q.parent].has_children = true;
    }
    for (const PlacementRule& r : cfg_.scheduling.placement) {
      for (const std::string& q : r.spread) {
        if (!queue_index_.count(q)) return Status::invalidArgument("placement: unknown queue " + q);
      }
      if (!r.queue.empty() && !queue_index_.count(r.queue)) {
        return Status::invalidArgument("placement: unknown queue " + r.queue);
      }
    }
    return Status::ok();
  }

  bool isParent(int q) const { return queues_[q].has_children; }

  Result<PodReq> toReq(const PodSpec& p) {
    PodReq r;
    if (p.cpu_milli < 0 || p.memory_mib < 0) {
      return Status::invalidArgument("pod " + p.name + ": negative CPU or memory");
    }
    if (p.num_gpu < 0 || p.num_gpu > kMaxGpusPerNode) {
      return Status::invalidArgument("pod " + p.name + ": num_gpu must be in [0, 16]");
    }
    r.cpu_milli = p.cpu_milli;
    r.memory_mib = p.memory_mib;
    r.num_gpu = p.num_gpu;
    if (p.num_gpu > 0) {
      r.gpu_milli = p.gpu_milli <= 0 ? kMilliPerGpu : p.gpu_milli;
      if (r.gpu_milli > kMilliPerGpu) {
        return Status::invalidArgument("pod " + p.name + ": gpu_milli must be <= 1000");
      }
      if (r.gpu_milli < kMilliPerGpu && p.num_gpu != 1) {
        return Status::invalidArgument("pod " + p.name + ": GPU sharing needs num_gpu == 1");
      }
    }
    if (!p.gpu_types.empty() || !p.min_gpu_type.empty()) {
      TypeMask m = 0;
      for (const std::string& t : p.gpu_types) {
        const auto it = type_ids_.find(t);
        if (it != type_ids_.end()) m |= 1u << it->second;
      }
      if (!p.min_gpu_type.empty()) {
        const auto it = type_ids_.find(p.min_gpu_type);
        if (it == type_ids_.end() || !has_ladder_) {
          return Status::invalidArgument("pod " + p.name + ": unknown ladder GPU type '" +
                                         p.min_gpu_type + "'");
        }
        for (size_t t = 0; t < type_names_.size(); ++t) {
          if (rank_[t] >= rank_[it->second]) m |= 1u << t;
        }
      }
      r.types = m;
    }
    if (!p.constraints.empty()) r.eligible = eligibilityOf(p.constraints);
    return r;
  }

  // The index of the nodes `c` allows, computed once per distinct constraint and kept while a
  // running pod holds it (a table that grows past kMaxIdleEligibility forgets the unheld ones).
  int eligibilityOf(const NodeConstraints& c) {
    std::string key = constraintKey(c);
    const auto it = elig_index_.find(key);
    if (it != elig_index_.end()) return it->second;
    constexpr size_t kMaxIdleEligibility = 256;
    if (elig_index_.size() >= kMaxIdleEligibility) {
      for (auto e = elig_index_.begin(); e != elig_index_.end();) {
        Eligibility& el = elig_[static_cast<size_t>(e->second)];
        if (el.refs > 0) {
          ++e;
          continue;
        }
        el = Eligibility{};
        elig_free_.push_back(e->second);
        e = elig_index_.erase(e);
      }
    }
    int idx;
    if (!elig_free_.empty()) {
      idx = elig_free_.back();
      elig_free_.pop_back();
    } else {
      idx = static_cast<int>(elig_.size());
      elig_.emplace_back();
    }
    Eligibility& el = elig_[static_cast<size_t>(idx)];
    el.constraints = c;
    el.allowed.reserve(node_specs_.size());
    for (const NodeSpec& n : node_specs_) el.allowed.push_back(constraintsAllow(c, n) ? 1 : 0);
    elig_index_.emplace(std::move(key), idx);
    return idx;
  }

  // Whether a pod asking `r` may go to node n by its node constraints (without any: every node
  // but those with a NoSchedule/NoExecute taint).
  bool allowedOn(const PodReq& r, int n) const {
    if (r.eligible < 0) return node_hard_taint_[static_cast<size_t>(n)] == 0;
    return elig_[static_cast<size_t>(r.eligible)].allowed[static_cast<size_t>(n)] != 0;
  }

  void holdEligibility(const PodReq& r, int sign) {
    if (r.eligible >= 0) elig_[static_cast<size_t>(r.eligible)].refs += sign;
  }

  Status resolveQueue(const PodSpec& p, int* queue, Tier* tier) {
    *tier = p.tier;
    *queue = -1;
    if (!p.queue.empty()) {
      const auto it = queue_index_.find(p.queue);
      if (it == queue_index_.end()) {
        return Status::invalidArgument("pod " + p.name + ": unknown queue '" + p.queue + "'");
      }
      *queue = it->second;
      return Status::ok();
    }
    for (const PlacementRule& r : cfg_.scheduling.placement) {
      if (!r.ns.empty() && r.ns != p.ns) continue;
      if (!r.service_account.empty() && r.service_account != p.service_account) continue;
      if (!labelsMatch(r.labels, p)) continue;
      const std::string& name =
          r.spread.empty() ? r.queue : r.spread[stableHash(p.name) % r.spread.size()];
      *queue = queue_index_.at(name);
      if (r.tier) *tier = *r.tier;
      return Status::ok();
    }
    return Status::ok();
  }

  // Unused tier-0 guarantees of type t, or (t = kTotal) of the "*" guarantees: reserved, so tier-1
  // (never preempted) cannot take them. Tier 0 runs on leaf queues, so only theirs count.
  int64_t reservedUnused(int t) const {
    int64_t sum = 0;
    for (size_t q = 0; q < queues_.size(); ++q) {
      const QueueState& s = queues_[q];
      if (s.guaranteed[t] > 0 && !isParent(static_cast<int>(q))) {
        sum += std::max<int64_t>(0, s.guaranteed[t] - s.used_t0[t]);
      }
    }
    return sum;
  }

  // Empty string when queue `q` may take `r` of GPU type `t` (-1: no GPU) at `tier`.
  std::string quotaRefusal(int q, Tier tier, int t, const PodReq& r) const {
    if (q < 0) return {};
    const int64_t milli = r.gpuTotalMilli();
    for (int a = q; a >= 0; a = queues_[a].parent) {
      const QueueState& s = queues_[a];
      if (t >= 0 && s.max[t] >= 0 && s.used[t] + milli > s.max[t]) {
        return "queue " + s.name + ": max " + type_names_[t] + " quota (" + gpuMilliText(s.max[t]) +
               " GPUs) reached";
      }
      if (t >= 0 && s.max[kTotal] >= 0 && s.used[kTotal] + milli > s.max[kTotal]) {
        return "queue " + s.name + ": max GPU quota (" + gpuMilliText(s.max[kTotal]) +
               " GPUs) reached";
      }
      if (s.cpu_max >= 0 && s.cpu_used + r.cpu_milli > s.cpu_max) {
        return "queue " + s.name + ": max CPU quota reached";
      }
      if (s.mem_max >= 0 && s.mem_used + r.memory_mib > s.mem_max) {
        return "queue " + s.name + ": max memory quota reached";
      }
    }
    if (t < 0) return {};
    const QueueState& s = queues_[q];
    if (tier == Tier::kGuaranteed) {
      if (s.guaranteed[t] >= 0) {
        if (s.used_t0[t] + milli > s.guaranteed[t]) {
          return "queue " + s.name + ": tier-0 use would exceed guaranteed " + type_names_[t];
        }
      } else if (s.guaranteed[kTotal] >= 0) {
        if (s.used_t0[kTotal] + milli > s.guaranteed[kTotal]) {
          return "queue " + s.name + ": tier-0 use would exceed guaranteed GPUs";
        }
      } else {
        return "queue " + s.name + ": no guaranteed " + type_names_[t] + " quota for tier 0";
      }
    } else if (tier == Tier::kShared) {
      if (shared_used_[t] + milli + reservedUnused(t) > capacity_[t]) {
        return "shared " + type_names_[t] + " pool exhausted (rest is reserved for guarantees)";
      }
      // The "*" guarantees must still fit in what the per-type reservations leave of every type.
      int64_t left_after_types = 0;
      for (size_t ty = 0; ty < type_names_.size(); ++ty) {
        left_after_types += std::max<int64_t>(
            0, capacity_[ty] - shared_used_[ty] - reservedUnused(static_cast<int>(ty)));
      }
      if (milli + reservedUnused(kTotal) > left_after_types) {
        return "shared GPU pool exhausted (rest is reserved for guarantees)";
      }
    }
    return {};
  }

  // Effective request on node n under proportional CPU/memory; false when refused.
  bool proportional(const NodeState& n, const PodReq& r, PodReq* eff) const {
    *eff = r;
    const ProportionalConfig& pc = cfg_.scheduling.proportional;
    if (!pc.enabled || r.num_gpu == 0 || n.gpus == 0) return true;
    const double share = static_cast<double>(r.gpuTotalMilli()) / (n.gpus * kMilliPerGpu);
    const auto cpu_share = static_cast<int64_t>(n.cpu_capacity * share);
    const auto mem_share = static_cast<int64_t>(n.mem_capacity * share);
    if (pc.set_requests) {
      eff->cpu_milli = cpu_share;
      eff->memory_mib = mem_share;
      return true;
    }
    return r.cpu_milli <= cpu_share * (1 + pc.slack) && r.memory_mib <= mem_share * (1 + pc.slack);
  }

  // Type groups in ladder order: cheapest accepted type first (equal costs share a group).
  std::vector<TypeMask> typeGroups(const PodReq& r) const {
    if (r.num_gpu == 0) return {kAnyType};
    if (!has_ladder_) return {r.types};
    std::vector<int> types;
    for (size_t t = 0; t < type_names_.size(); ++t) {
      if (((r.types >> t) & 1u) && !by_type_[t].empty()) types.push_back(static_cast<int>(t));
    }
    std::stable_sort(types.begin(), types.end(), [&](int a, int b) {
      return cost_[a] != cost_[b] ? cost_[a] < cost_[b] : rank_[a] < rank_[b];
    });
    std::vector<TypeMask> groups;
    for (size_t i = 0; i < types.size(); ++i) {
      if (i > 0 && cost_[types[i]] == cost_[types[i - 1]]) {
        groups.back() |= 1u << types[i];
      } else {
        groups.push_back(1u << types[i]);
      }
    }
    return groups;
  }

  // Best node for r among nodes of types in `mask` (all nodes for CPU-only pods): with soft
  // scores (soft_), the fitting nodes with the highest weighted sum, and the policy's best among
  // them; otherwise the policy's best. Two instantiations, so the common one (no soft scores)
  // carries nothing of the other.
  bool findNode(const PodReq& r, TypeMask mask, Plan* plan) {
    return soft_ != nullptr ? findNodeImpl<true>(r, mask, plan)
                            : findNodeImpl<false>(r, mask, plan);
  }
  template <bool kSoft>
  bool findNodeImpl(const PodReq& r, TypeMask mask, Plan* plan) {
    double best = -std::numeric_limits<double>::infinity();
    uint64_t ties = 0;
    bool found = false;
    const bool random = policy_->isRandom();
    const bool first_tie = policy_->firstTie();
    auto offer = [&](int n, double s, int gpu, const PodReq& eff) __attribute__((always_inline)) {
      if (!found || s > best + kTieEps) {
        best = s;
        ties = 1;
      } else if (s >= best - kTieEps) {
        if (first_tie ? node_rank_[n] > node_rank_[plan->node] : rng_.below(++ties) != 0) return;
      } else {
        return;
      }
      found = true;
      plan->node = n;
      plan->gpu = gpu;
      plan->req = eff;
    };
    struct Fit {
      int node;
      double score;
      int gpu;
      PodReq eff;
    };
    // With soft scores: every fitting node, ranked once all are known.
    std::vector<Fit> fitting;
    auto consider = [&](int n) __attribute__((always_inline)) {
      if (exclude_ != nullptr && (*exclude_)[static_cast<size_t>(n)]) return;
      if (pod_block_ != nullptr && (*pod_block_)[static_cast<size_t>(n)]) return;
      if (!allowedOn(r, n)) return;
      PodReq eff;
      if (!proportional(nodes_[n], r, &eff) || !fits(nodes_[n], eff)) return;
      int gpu = -1;
      const double s = random ? 0.0 : policy_->score(view_, n, eff, &gpu);
      if (random) policy_->score(view_, n, eff, &gpu);
      if constexpr (kSoft) {
        fitting.push_back({n, s, gpu, eff});
      } else {
        offer(n, s, gpu, eff);
      }
    };
    if (r.num_gpu == 0) {
      for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) consider(n);
    } else {
      for (size_t t = 0; t < type_names_.size(); ++t) {
        if (!((mask >> t) & 1u)) continue;
        for (const int n : by_type_[t]) {
          if (nodes_[n].gpu_free_total < r.gpuTotalMilli()) continue;
          consider(n);
        }
      }
    }
    if constexpr (kSoft) {
      if (fitting.empty()) return false;
      std::vector<int> ns;
      ns.reserve(fitting.size());
      for (const Fit& f : fitting) ns.push_back(f.node);
      std::vector<int64_t> totals;
      softTotals(*soft_, ns, totals);
      const int64_t top = *std::max_element(totals.begin(), totals.end());
      for (size_t i = 0; i < fitting.size(); ++i) {
        if (totals[i] == top)
          offer(fitting[i].node, fitting[i].score, fitting[i].gpu, fitting[i].eff);
      }
    }
    return found;
  }

  // Minimal tier-2 victim set on some node of `mask` that lets r fit; false if none.
  bool findVictims(const PodReq& r, TypeMask mask, Plan* plan) {
    size_t best_count = std::numeric_limits<size_t>::max();
    int64_t best_gpu = 0;
    for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
      const NodeState& node = nodes_[n];
      if (r.num_gpu > 0 && (node.type < 0 || !((mask >> node.type) & 1u))) continue;
      if (!allowedOn(r, n)) continue;
      // A node ruled out only by anti-affinity with tier-2 pods on it: those pods must go.
      std::vector<PodId> must;
      if (pod_block_ != nullptr && (*pod_block_)[static_cast<size_t>(n)]) {
        const auto m = anti_victims_.find(n);
        if ((*pod_block_)[static_cast<size_t>(n)] != kBlockedByVictims || m == anti_victims_.end())
          continue;
        must = m->second;
        if (std::any_of(must.begin(), must.end(),
                        [&](PodId id) { return neededByAffinity(rec(id)); }))
          continue;
      }
      PodReq eff;
      if (!proportional(node, r, &eff)) continue;
      std::vector<PodId> cands;
      for (const PodId id : node_pods_[n]) {
        if (rec(id).tier == Tier::kBestEffort && !neededByAffinity(rec(id)) &&
            std::find(must.begin(), must.end(), id) == must.end())
          cands.push_back(id);
      }
      if (cands.empty() && must.empty()) continue;
      // Lowest tier first, then fewest GPUs, then youngest.
      std::sort(cands.begin(), cands.end(), [&](PodId a, PodId b) {
        const PodRecord& pa = rec(a);
        const PodRecord& pb = rec(b);
        if (pa.tier != pb.tier) return pa.tier > pb.tier;
        if (pa.req.gpuTotalMilli() != pb.req.gpuTotalMilli()) {
          return pa.req.gpuTotalMilli() < pb.req.gpuTotalMilli();
        }
        if (pa.creation_s != pb.creation_s) return pa.creation_s > pb.creation_s;
        return a > b;
      });
      NodeState base = node;
      for (const PodId id : must) {
        const PodRecord& p = rec(id);
        applyToNode(base, p.cpu, p.mem, p.req.gpu_milli, p.gpus, shapeClass(p.req), -1);
      }
      NodeState sim = base;
      std::vector<PodId> chosen;
      // One victim is the smallest set there is: take the first (in victim order) that suffices.
      for (const PodId id : fits(base, eff) ? std::vector<PodId>{} : cands) {
        const PodRecord& p = rec(id);
        NodeState trial = base;
        applyToNode(trial, p.cpu, p.mem, p.req.gpu_milli, p.gpus, shapeClass(p.req), -1);
        if (fits(trial, eff)) {
          sim = trial;
          chosen.push_back(id);
          break;
        }
      }
      // Otherwise greedily in victim order, then drop the ones not needed.
      for (const PodId id : chosen.empty() && !fits(base, eff) ? cands : std::vector<PodId>{}) {
        if (fits(sim, eff)) break;
        const PodRecord& p = rec(id);
        applyToNode(sim, p.cpu, p.mem, p.req.gpu_milli, p.gpus, shapeClass(p.req), -1);
        chosen.push_back(id);
      }
      if (!fits(sim, eff)) continue;
      // Minimality: give back every victim the pod can do without (last chosen first).
      for (size_t i = chosen.size(); i-- > 0;) {
        const PodRecord& p = rec(chosen[i]);
        NodeState trial = sim;
        applyToNode(trial, p.cpu, p.mem, p.req.gpu_milli, p.gpus, shapeClass(p.req), +1);
        if (fits(trial, eff)) {
          sim = trial;
          chosen.erase(chosen.begin() + static_cast<long>(i));
        }
      }
      chosen.insert(chosen.begin(), must.begin(), must.end());
      int64_t gpu_sum = 0;
      for (const PodId id : chosen) gpu_sum += rec(id).req.gpuTotalMilli();
      if (chosen.size() < best_count || (chosen.size() == best_count && gpu_sum < best_gpu)) {
        best_count = chosen.size();
        best_gpu = gpu_sum;
        plan->node = n;
        plan->req = eff;
        plan->victims = chosen;
        plan->gpu = -1;
      }
    }
    return best_count != std::numeric_limits<size_t>::max();
  }

  // The value of node n's `key` label (its domain for that topology key), or nullptr.
  const std::string* domainOf(int n, const std::string& key) const {
    const auto& labels = node_specs_[static_cast<size_t>(n)].labels;
    const auto it = labels.find(key);
    return it == labels.end() ? nullptr : &it->second;
  }
  // Calls f(id, record, node) for every running pod `sel` may select: with matchLabels, only the
  // pods that have the rarest of its pairs (by_label_); otherwise every one. The caller still
  // checks the whole selector.
  template <typename F>
  void forSelectable(const LabelSelector& sel, F&& f) const {
    if (sel.match_labels.empty()) {
      for (size_t n = 0; n < node_pods_.size(); ++n) {
        for (const PodId id : node_pods_[n]) f(id, rec(id), static_cast<int>(n));
      }
      return;
    }
    const std::vector<PodId>* rarest = nullptr;
    for (const auto& [k, v] : sel.match_labels) {
      const auto it = by_label_.find(labelKey(k, v));
      if (it == by_label_.end()) return;  // no running pod has this pair
      if (rarest == nullptr || it->second.items.size() < rarest->size()) rarest = &it->second.items;
    }
    for (const PodId id : *rarest) {
      if (isLive(id)) f(id, rec(id), rec(id).node);
    }
  }
  // The term a TermRef names, and its score weight (+weight, -weight, or 1 for a required
  // affinity term: hardPodAffinityWeight).
  static const PodAffinityTerm& termOf(const PodRecord& q, const TermRef& ref, int64_t* weight) {
    if (ref.kind == 0) {
      *weight = q.soft_affinity[ref.index].weight;
      return q.soft_affinity[ref.index].term;
    }
    if (ref.kind == 1) {
      *weight = -q.soft_anti_affinity[ref.index].weight;
      return q.soft_anti_affinity[ref.index].term;
    }
    *weight = 1;
    return q.affinity[ref.index];
  }
  static std::string pairOf(const PodAffinityTerm& t) {
    if (t.selector.match_labels.empty()) return {};
    const auto& [k, v] = *t.selector.match_labels.begin();
    return labelKey(k, v);
  }
  void indexTerms(PodId id, const PodRecord& p) {
    for (uint32_t i = 0; i < p.soft_affinity.size(); ++i)
      terms_by_pair_[pairOf(p.soft_affinity[i].term)].items.push_back({id, 0, i});
    for (uint32_t i = 0; i < p.soft_anti_affinity.size(); ++i)
      terms_by_pair_[pairOf(p.soft_anti_affinity[i].term)].items.push_back({id, 1, i});
    for (uint32_t i = 0; i < p.affinity.size(); ++i)
      terms_by_pair_[pairOf(p.affinity[i])].items.push_back({id, 2, i});
  }
  // p has ended (alive is false): its terms are stale where they are listed.
  void unindexTerms(const PodRecord& p) {
    std::vector<std::string> pairs;
    for (const WeightedPodTerm& t : p.soft_affinity) pairs.push_back(pairOf(t.term));
    for (const WeightedPodTerm& t : p.soft_anti_affinity) pairs.push_back(pairOf(t.term));
    for (const PodAffinityTerm& t : p.affinity) pairs.push_back(pairOf(t));
    for (const std::string& pair : pairs) forgetOne(terms_by_pair_, pair);
  }
  bool isLive(PodId id) const {
    const PodRecord& q = rec(id);
    return q.alive && q.generation == static_cast<uint32_t>(id >> 32);
  }
  // Calls f(holder, ref) for every running pod's term that may select a pod with `labels`.
  template <typename F>
  void forTermsThatMaySelect(const std::map<std::string, std::string>& labels, F&& f) const {
    auto visit = [&](const std::string& pair) {
      const auto it = terms_by_pair_.find(pair);
      if (it == terms_by_pair_.end()) return;
      for (const TermRef& ref : it->second.items) {
        if (isLive(ref.holder)) f(rec(ref.holder), ref);
      }
    };
    visit({});
    for (const auto& [k, v] : labels) visit(labelKey(k, v));
  }
  static std::string labelKey(const std::string& k, const std::string& v) {
    std::string key;
    key.reserve(k.size() + 1 + v.size());
    key.append(k).push_back('\0');
    key.append(v);
    return key;
  }
  // One entry of `key`'s list has ended (its pod is no longer live): it stays, skipped as stale,
  // until the stale entries are half the list, which is then compacted (and dropped if empty).
  template <typename T>
  void forgetOne(std::unordered_map<std::string, IndexList<T>>& index, const std::string& key) {
    const auto it = index.find(key);
    if (it == index.end()) return;
    IndexList<T>& l = it->second;
    if (++l.stale * 2 < l.items.size()) return;
    std::erase_if(l.items, [&](const T& e) { return !isLive(holderOf(e)); });
    l.stale = 0;
    if (l.items.empty()) index.erase(it);
  }
  // Whether a running pod is one the deciding pod's affinity terms select (it must not be a
  // victim: the node was allowed because of it).
  bool neededByAffinity(const PodRecord& q) const {
    if (deciding_ == nullptr) return false;
    for (const PodAffinityTerm& t : deciding_->pod_constraints.affinity) {
      if (termSelects(t, deciding_->ns, q.ns, q.labels)) return true;
    }
    return false;
  }
  // Marks in `blocked` (sized to the nodes) the nodes pod's inter-pod constraints rule out now,
  // and returns how many of the nodes its node constraints allow are among them; `blocked` stays
  // empty when nothing applies (no terms on the pod, no running pod with anti-affinity), which
  // costs nothing. A node without the topology key: an anti-affinity term has no domain there
  // (allowed), an affinity term or a spread constraint cannot be met there (ruled out). Nodes
  // closed only by tier-2 pods on them go in anti_victims (see kBlockedByVictims); for affinity
  // and spread, the victims a tier-0 pod would preempt still count. Re-packing plans do not
  // look at these terms.
  int podTermsBlock(const PodSpec& pod, const PodReq& r, std::vector<uint8_t>& blocked,
                    std::map<int, std::vector<PodId>>& anti_victims) const {
    const PodConstraints& pc = pod.pod_constraints;
    anti_victims.clear();
    if (pc.empty() && anti_holders_.empty()) return 0;
    const int count = static_cast<int>(nodes_.size());
    blocked.assign(nodes_.size(), 0);
    // Anti-affinity, the pod's own terms and running pods' terms that select it: the (key,
    // value) domains it must stay out of, each with the pods that close it, gathered first,
    // then one pass over the nodes.
    std::map<std::string, std::map<std::string, std::vector<PodId>>> avoid;
    for (const PodAffinityTerm& t : pc.anti_affinity) {
      forSelectable(t.selector, [&](PodId id, const PodRecord& q, int n) {
        const std::string* d = domainOf(n, t.topology_key);
        if (d != nullptr && termSelects(t, pod.ns, q.ns, q.labels))
          avoid[t.topology_key][*d].push_back(id);
      });
    }
    for (const PodId id : anti_holders_) {
      const PodRecord& q = rec(id);
      for (const PodAffinityTerm& t : q.anti_affinity) {
        if (!termSelects(t, q.ns, pod.ns, pod.labels)) continue;
        if (const std::string* d = domainOf(q.node, t.topology_key))
          avoid[t.topology_key][*d].push_back(id);
      }
    }
    // A node whose closing pods are all tier 2 and on that node is one preemption can open (as
    // kube-scheduler's preemption removes the victims before it checks the terms): marked
    // kBlockedByVictims, with those pods as victims it must take.
    std::vector<PodId> closers;
    for (int n = 0; n < count && !avoid.empty(); ++n) {
      closers.clear();
      bool closed = false;
      bool victims_only = true;
      for (const auto& [key, domains] : avoid) {
        const std::string* d = domainOf(n, key);
        const auto it = d != nullptr ? domains.find(*d) : domains.end();
        if (it == domains.end()) continue;
        closed = true;
        for (const PodId id : it->second) {
          victims_only = rec(id).node == n && rec(id).tier == Tier::kBestEffort;
          if (!victims_only) break;  // another node's pod, or one never preempted: closed
          closers.push_back(id);
        }
        if (!victims_only) break;
      }
      if (!closed) continue;
      blocked[static_cast<size_t>(n)] = victims_only ? kBlockedByVictims : 1;
      if (victims_only) {
        std::sort(closers.begin(), closers.end());
        closers.erase(std::unique(closers.begin(), closers.end()), closers.end());
        anti_victims[n] = closers;
      }
    }
    if (!pc.affinity.empty()) {
      // As kube-scheduler counts: a running pod that every term selects puts its node's domain
      // of each term's key in `with`; a node must have every key, in such a domain for each.
      auto selectsAll = [&](const std::string& ns,
                            const std::map<std::string, std::string>& labels) {
        return std::all_of(pc.affinity.begin(), pc.affinity.end(), [&](const PodAffinityTerm& t) {
          return termSelects(t, pod.ns, ns, labels);
        });
      };
      std::set<std::pair<std::string, std::string>> with;
      forSelectable(pc.affinity.front().selector, [&](PodId, const PodRecord& q, int n) {
        if (!selectsAll(q.ns, q.labels)) return;
        for (const PodAffinityTerm& t : pc.affinity) {
          if (const std::string* d = domainOf(n, t.topology_key)) with.emplace(t.topology_key, *d);
        }
      });
      // The first pod of a group (nothing selected yet) that its own terms select: any node
      // with the keys.
      const bool first = with.empty() && selectsAll(pod.ns, pod.labels);
      for (int n = 0; n < count; ++n) {
        for (const PodAffinityTerm& t : pc.affinity) {
          const std::string* d = domainOf(n, t.topology_key);
          if (d == nullptr || (!first && !with.count({t.topology_key, *d}))) {
            blocked[static_cast<size_t>(n)] = 1;
          }
        }
      }
    }
    // The nodes spread counts: those its node selector and required node affinity allow (taints
    // are not looked at: nodeTaintsPolicy Ignore) that have every constraint's key, as
    // kube-scheduler counts; pods on other nodes are not counted.
    std::vector<uint8_t> honoured;
    if (!pc.spread.empty()) {
      honoured.assign(nodes_.size(), 0);
      for (int n = 0; n < count; ++n) {
        const bool keys = std::all_of(
            pc.spread.begin(), pc.spread.end(),
            [&](const SpreadConstraint& c) { return domainOf(n, c.topology_key) != nullptr; });
        honoured[static_cast<size_t>(n)] =
            keys && nodeAffinityAllows(pod.constraints, node_specs_[static_cast<size_t>(n)]);
      }
    }
    for (const SpreadConstraint& c : pc.spread) {
      // The domains of the counted nodes, and the pods there its selector picks (an empty
      // selector counts nothing, as kube-scheduler's; terminating pods are not counted).
      std::map<std::string, int> in_domain;
      for (int n = 0; n < count; ++n) {
        if (honoured[static_cast<size_t>(n)]) in_domain.emplace(*domainOf(n, c.topology_key), 0);
      }
      const bool counts = !c.selector.match_labels.empty() || !c.selector.match_expressions.empty();
      forSelectable(c.selector, [&](PodId, const PodRecord& q, int n) {
        if (!counts || q.terminating || q.ns != pod.ns || !honoured[static_cast<size_t>(n)] ||
            !selectorMatches(c.selector, q.labels))
          return;
        const std::string* d = domainOf(n, c.topology_key);
        if (d == nullptr) return;
        const auto it = in_domain.find(*d);
        if (it != in_domain.end()) ++it->second;
      });
      int least = 0;
      if (!in_domain.empty() && static_cast<int>(in_domain.size()) >= c.min_domains) {
        least = std::numeric_limits<int>::max();
        for (const auto& [d, k] : in_domain) least = std::min(least, k);
      }
      const int self = selectorMatches(c.selector, pod.labels) ? 1 : 0;
      for (int n = 0; n < count; ++n) {
        const std::string* d = domainOf(n, c.topology_key);
        const auto it = d != nullptr ? in_domain.find(*d) : in_domain.end();
        if (it == in_domain.end() || it->second + self - least > c.max_skew)
          blocked[static_cast<size_t>(n)] = 1;
      }
    }
    int ruled_out = 0;
    for (int n = 0; n < count; ++n) ruled_out += blocked[static_cast<size_t>(n)] && allowedOn(r, n);
    return ruled_out;
  }

  // The soft scores' raw values for pod on every node (SoftRaw); empty when none applies.
  void softScores(const PodSpec& pod, SoftRaw& out) const {
    // The cache is trimmed here only: references domains() returns stay valid for the call.
    if (domains_.size() >= kMaxDomainKeys) domains_.clear();
    const SoftConstraints& sc = pod.soft;
    const size_t count = nodes_.size();
    if (!sc.node_affinity.empty()) {
      out.node_affinity.on = true;
      out.node_affinity.value.assign(count, 0);
      for (size_t n = 0; n < count; ++n) {
        for (const WeightedNodeTerm& t : sc.node_affinity) {
          if (nodeTermMatches(t.term, node_specs_[n])) out.node_affinity.value[n] += t.weight;
        }
      }
    }
    if (soft_tainted_nodes_ > 0) {
      out.taints.value.assign(count, 0);
      for (size_t n = 0; n < count; ++n) {
        out.taints.value[n] =
            intolerablePreferNoSchedule(pod.constraints.tolerations, node_specs_[n]);
        out.taints.on |= out.taints.value[n] > 0;
      }
    }
    // Inter-pod: each (key, domain) gets +weight for every running pod a preferred affinity term
    // selects there, -weight for anti-affinity; and so for running pods' preferred terms that
    // select this pod, and +1 for their required affinity terms that do (InterPodAffinity's
    // scoring, hardPodAffinityWeight 1).
    std::map<std::string, std::vector<int64_t>> domain_score;  // by key, by domain id
    auto add = [&](const PodAffinityTerm& t, int q_node, int64_t w) {
      const Domains& d = domains(t.topology_key);
      const int id = d.of_node[static_cast<size_t>(q_node)];
      if (id < 0) return;
      std::vector<int64_t>& v = domain_score[t.topology_key];
      if (v.empty()) v.assign(static_cast<size_t>(d.count), 0);
      v[static_cast<size_t>(id)] += w;
    };
    auto own = [&](const WeightedPodTerm& t, int64_t sign) {
      forSelectable(t.term.selector, [&](PodId, const PodRecord& q, int n) {
        if (termSelects(t.term, pod.ns, q.ns, q.labels)) add(t.term, n, sign * t.weight);
      });
    };
    for (const WeightedPodTerm& t : sc.affinity) own(t, 1);
    for (const WeightedPodTerm& t : sc.anti_affinity) own(t, -1);
    forTermsThatMaySelect(pod.labels, [&](const PodRecord& q, const TermRef& ref) {
      int64_t weight = 1;
      const PodAffinityTerm& t = termOf(q, ref, &weight);
      if (termSelects(t, q.ns, pod.ns, pod.labels)) add(t, q.node, weight);
    });
    if (!domain_score.empty()) {
      out.pod_affinity.on = true;
      out.pod_affinity.value.assign(count, 0);
      for (const auto& [key, scores] : domain_score) {
        const std::vector<int>& of_node = domains(key).of_node;
        for (size_t n = 0; n < count; ++n) {
          if (of_node[n] >= 0) out.pod_affinity.value[n] += scores[static_cast<size_t>(of_node[n])];
        }
      }
    }
    if (sc.spread.empty()) return;
    // ScheduleAnyway: nodes with every constraint's key are scored; pods are counted on those
    // its node affinity allows (as the hard constraints count; terminating ones are not).
    std::vector<const Domains*> keys;
    for (const SpreadConstraint& c : sc.spread) keys.push_back(&domains(c.topology_key));
    out.spread_scored.assign(count, 0);
    std::vector<uint8_t> counted(count, 0);
    for (size_t n = 0; n < count; ++n) {
      out.spread_scored[n] = std::all_of(keys.begin(), keys.end(),
                                         [&](const Domains* d) { return d->of_node[n] >= 0; });
      counted[n] = out.spread_scored[n] && nodeAffinityAllows(pod.constraints, node_specs_[n]);
    }
    for (size_t k = 0; k < sc.spread.size(); ++k) {
      const SpreadConstraint& c = sc.spread[k];
      SoftRaw::Spread sp;
      sp.max_skew = c.max_skew;
      sp.hostname = c.topology_key == "kubernetes.io/hostname";
      sp.domains = keys[k]->count;
      sp.domain.assign(count, -1);
      sp.count.assign(count, 0);
      for (size_t n = 0; n < count; ++n) {
        if (out.spread_scored[n]) sp.domain[n] = keys[k]->of_node[n];
      }
      std::vector<int64_t> in_domain(static_cast<size_t>(sp.domains), 0);
      const bool selects =
          !c.selector.match_labels.empty() || !c.selector.match_expressions.empty();
      forSelectable(c.selector, [&](PodId, const PodRecord& q, int n) {
        const auto un = static_cast<size_t>(n);
        if (!selects || q.terminating || q.ns != pod.ns || !selectorMatches(c.selector, q.labels))
          return;
        if (sp.hostname) {
          sp.count[un] += out.spread_scored[un];
        } else if (counted[un]) {
          ++in_domain[static_cast<size_t>(sp.domain[un])];
        }
      });
      if (!sp.hostname) {
        for (size_t n = 0; n < count; ++n) {
          if (sp.domain[n] >= 0) sp.count[n] = in_domain[static_cast<size_t>(sp.domain[n])];
        }
      }
      out.spread.push_back(std::move(sp));
    }
  }

  // Each node's domain for a topology key: an id per distinct value of the label (-1 without
  // it), built on first use and dropped when a node joins (the keys come from pods, so the cache
  // is cleared at the start of a decision once it holds kMaxDomainKeys; what it returns stays
  // valid until then).
  struct Domains {
    std::vector<int> of_node;
    int count = 0;
  };
  static constexpr size_t kMaxDomainKeys = 64;
  const Domains& domains(const std::string& key) const {
    const auto it = domains_.find(key);
    if (it != domains_.end()) return it->second;
    Domains d;
    d.of_node.assign(nodes_.size(), -1);
    std::map<std::string_view, int> ids;
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (const std::string* v = domainOf(static_cast<int>(n), key)) {
        d.of_node[n] = ids.emplace(*v, static_cast<int>(ids.size())).first->second;
      }
    }
    d.count = static_cast<int>(ids.size());
    return domains_.emplace(key, std::move(d)).first->second;
  }

  Result<Plan> makePlan(const PodSpec& pod, int64_t /*now_s*/, bool allow_preempt) {
    Plan plan;
    INFERA_ASSIGN_OR_RETURN(const PodReq r, toReq(pod));
    INFERA_RETURN_IF_ERROR(resolveQueue(pod, &plan.queue, &plan.tier));
    if (!pod.pod_constraints.unsupported.empty()) {
      return Status::failedPrecondition("pod " + pod.name + ": not placed: its " +
                                        pod.pod_constraints.unsupported +
                                        " is not supported by this scheduler");
    }
    // Nodes its inter-pod terms (and running pods' anti-affinity) rule out, for this decision.
    std::vector<uint8_t> blocked;
    const int ruled_out = podTermsBlock(pod, r, blocked, anti_victims_);
    pod_block_ = blocked.empty() ? nullptr : &blocked;
    deciding_ = &pod;
    SoftRaw soft;
    if (!pod.soft.empty() || soft_tainted_nodes_ > 0 || soft_holders_ > 0) softScores(pod, soft);
    soft_ = soft.empty() ? nullptr : &soft;
    struct Unblock {
      const std::vector<uint8_t>*& block;
      const PodSpec*& deciding;
      std::map<int, std::vector<PodId>>& anti_victims;
      const SoftRaw*& soft;
      ~Unblock() {
        block = nullptr;
        deciding = nullptr;
        anti_victims.clear();
        soft = nullptr;
      }
    } unblock{pod_block_, deciding_, anti_victims_, soft_};
    std::string refusal;
    std::vector<TypeMask> quota_ok;
    for (const TypeMask group : typeGroups(r)) {
      TypeMask ok = 0;
      if (r.num_gpu == 0) {
        const std::string why = quotaRefusal(plan.queue, plan.tier, -1, r);
        if (why.empty()) {
          ok = kAnyType;
        } else {
          refusal = why;
        }
      } else {
        for (size_t t = 0; t < type_names_.size(); ++t) {
          if (!((group >> t) & 1u)) continue;
          const std::string why = quotaRefusal(plan.queue, plan.tier, static_cast<int>(t), r);
          if (why.empty()) {
            ok |= 1u << t;
          } else {
            refusal = why;
          }
        }
      }
      if (ok == 0) continue;
      quota_ok.push_back(ok);
      if (findNode(r, ok, &plan)) return plan;
    }
    if (allow_preempt && plan.tier == Tier::kGuaranteed) {
      for (const TypeMask ok : quota_ok) {
        if (findVictims(r, ok, &plan)) return plan;
      }
    }
    if (quota_ok.empty() && !refusal.empty()) {
      return Status::failedPrecondition("pod " + pod.name + ": " + refusal);
    }
    // Among the nodes that could take it otherwise (its GPU types; any node for CPU-only pods),
    // how many its constraints (or taints it does not tolerate) rule out; none can be when the
    // pod has no constraints and no node a hard taint (the simulator's every refusal).
    int excluded = 0;
    int candidates = 0;
    const bool may_exclude = r.eligible >= 0 || hard_tainted_nodes_ > 0;
    for (int n = 0; may_exclude && n < static_cast<int>(nodes_.size()); ++n) {
      if (r.num_gpu > 0 && (nodes_[n].type < 0 || !nodes_[n].typeAllowed(r.types))) continue;
      ++candidates;
      excluded += allowedOn(r, n) ? 0 : 1;
    }
    if (ruled_out > 0) {
      return Status::resourceExhausted(
          "pod " + pod.name + ": no node fits (" + std::to_string(ruled_out) + " of " +
          std::to_string(nodes_.size()) +
          " nodes ruled out by its pod affinity, anti-affinity or topology spread, or by a "
          "running pod's anti-affinity" +
          (excluded > 0 ? "; " + std::to_string(excluded) +
                              " excluded by its node selector, node affinity or taints"
                        : std::string()) +
          ")");
    }
    if (excluded > 0) {
      return Status::resourceExhausted("pod " + pod.name + ": no node fits (" +
                                       std::to_string(excluded) + " of " +
                                       std::to_string(candidates) +
                                       " nodes excluded by its node selector, node affinity or "
                                       "taints it does not tolerate)");
    }
    return Status::resourceExhausted("pod " + pod.name + ": no node fits");
  }

  void fillPlacement(Placement& p, const Plan& plan) const {
    const NodeState& n = nodes_[plan.node];
    p.node = plan.node;
    p.node_name = n.name;
    p.gpu_type = n.type >= 0 ? type_names_[n.type] : "";
    p.gpu_milli = plan.req.gpu_milli;
    p.cpu_milli = plan.req.cpu_milli;
    p.memory_mib = plan.req.memory_mib;
    p.gpu_indices = chooseGpus(n, plan.req, plan.gpu);
  }

  static std::vector<int> chooseGpus(const NodeState& n, const PodReq& r, int gpu) {
    std::vector<int> out;
    if (r.num_gpu == 0) return out;
    if (r.sharing()) {
      out.push_back(gpu >= 0 && n.gpu_free[gpu] >= r.gpu_milli ? gpu : bestFitGpu(n, r.gpu_milli));
      return out;
    }
    for (int g = 0; g < n.gpus && static_cast<int>(out.size()) < r.num_gpu; ++g) {
      if (n.gpu_free[g] == kMilliPerGpu) out.push_back(g);
    }
    return out;
  }

  Result<Placement> commit(const PodSpec& pod, const Plan& plan, int64_t now_s) {
    Placement out;
    for (const PodId v : plan.victims) {
      const PodRecord& victim = rec(v);
      std::string reason;
      const int t = nodes_[victim.node].type;
      const bool borrowing =
          victim.queue >= 0 && t >= 0 &&
          queues_[victim.queue].used[t] > std::max<int64_t>(0, queues_[victim.queue].guaranteed[t]);
      const std::string qname = plan.queue >= 0 ? queues_[plan.queue].name : "-";
      reason = (borrowing ? "borrowed quota reclaimed by tier-0 pod "
                          : "tier-2 pod preempted by tier-0 pod ") +
               pod.name + " (queue " + qname + ")";
      out.evicted.push_back(Eviction{v, victim.name, nodes_[victim.node].name, reason});
      unbind(v);
    }
    fillPlacement(out, plan);
    out.queue = plan.queue >= 0 ? queues_[plan.queue].name : "";
    out.tier = plan.tier;
    if (out.gpu_indices.size() != static_cast<size_t>(plan.req.num_gpu)) {
      return Status::internal("pod " + pod.name + ": GPU selection failed on " + out.node_name);
    }
    PodRecord record;
    record.name = pod.name;
    record.req = plan.req;
    record.tier = plan.tier;
    record.queue = plan.queue;
    record.node = plan.node;
    record.gpus = out.gpu_indices;
    record.cpu = plan.req.cpu_milli;
    record.mem = plan.req.memory_mib;
    record.creation_s = pod.creation_s != 0 ? pod.creation_s : now_s;
    record.bound_s = now_s;
    record.alive = true;
    record.ns = pod.ns;
    record.labels = pod.labels;
    record.anti_affinity = pod.pod_constraints.anti_affinity;
    record.soft_affinity = pod.soft.affinity;
    record.soft_anti_affinity = pod.soft.anti_affinity;
    // Its required affinity scores others only where the engine reads the terms as Kubernetes
    // does (not with a namespaceSelector with labels, say).
    if (pod.pod_constraints.unsupported.empty()) record.affinity = pod.pod_constraints.affinity;
    record.terminating = pod.terminating;
    for (size_t i = 0; i < cfg_.scheduling.idle_reclaim.size(); ++i) {
      const auto& pol = cfg_.scheduling.idle_reclaim[i];
      if (!pol.match_labels.empty() && labelsMatch(pol.match_labels, pod)) {
        record.idle_policy = static_cast<int>(i);
        break;
      }
    }
    // Slots of ended pods are reused (a long-running engine does not grow with the pods it has
    // seen); the generation in the id tells a stale id from the slot's new pod.
    uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
      record.generation = pods_[slot].generation + 1;
      pods_[slot] = std::move(record);
    } else {
      slot = static_cast<uint32_t>(pods_.size());
      pods_.push_back(std::move(record));
    }
    const PodId id = idOf(slot);
    for (const auto& [k, v] : pods_[slot].labels) by_label_[labelKey(k, v)].items.push_back(id);
    if (!pods_[slot].anti_affinity.empty()) anti_holders_.push_back(id);
    if (scoresOthers(pods_[slot])) {
      ++soft_holders_;
      indexTerms(id, pods_[slot]);
    }
    holdEligibility(pods_[slot].req, +1);
    bindAccounting(id, +1);
    out.pod = id;
    return out;
  }

  void bindAccounting(PodId id, int sign) {
    PodRecord& p = rec(id);
    NodeState& n = nodes_[p.node];
    applyToNode(n, p.cpu, p.mem, p.req.gpu_milli, p.gpus, shapeClass(p.req), sign);
    policy_->nodeChanged(p.node);
    auto& on_node = node_pods_[p.node];
    if (sign > 0) {
      on_node.push_back(id);
    } else {
      const auto it = std::find(on_node.begin(), on_node.end(), id);
      if (it != on_node.end()) {
        *it = on_node.back();
        on_node.pop_back();
      }
    }
    const int t = n.type;
    const int64_t milli = p.req.gpuTotalMilli();
    // The shared pool is the open nodes' capacity: pods on closed ones take none of it (they
    // still count for their queues).
    if (t >= 0 && p.tier != Tier::kBestEffort && !node_closed_[static_cast<size_t>(p.node)])
      shared_used_[t] += sign * milli;
    for (int a = p.queue; a >= 0; a = queues_[a].parent) {
      QueueState& q = queues_[a];
      if (t >= 0 && milli > 0) {
        q.used[t] += sign * milli;
        q.used[kTotal] += sign * milli;
        if (p.tier == Tier::kGuaranteed && a == p.queue) {
          q.used_t0[t] += sign * milli;
          if (q.guaranteed[t] < 0) q.used_t0[kTotal] += sign * milli;  // served by "*"
        }
      }
      q.cpu_used += sign * p.cpu;
      q.mem_used += sign * p.mem;
    }
  }

  // Moves a running pod's accounting to `node` (same GPU type for GPU pods, so its queue's use is
  // unchanged), on the GPUs chooseGpus picks there.
  void moveTo(PodId id, int node, const PodReq& req, int gpu) {
    bindAccounting(id, -1);
    PodRecord& p = rec(id);
    p.node = node;
    p.req = req;
    p.cpu = req.cpu_milli;
    p.mem = req.memory_mib;
    p.gpus = chooseGpus(nodes_[node], req, gpu);
    bindAccounting(id, +1);
  }
  // A tentative move of a re-packing plan and what undoes it.
  struct Applied {
    PodId pod;
    int from;
    std::vector<int> gpus;
    PodReq req;
  };
  // Undoes applied[mark..] in reverse, so every node returns to its exact state.
  void undoMoves(std::vector<Applied>& applied, size_t mark) {
    for (size_t i = applied.size(); i-- > mark;) {
      bindAccounting(applied[i].pod, -1);
      PodRecord& p = rec(applied[i].pod);
      p.node = applied[i].from;
      p.gpus = applied[i].gpus;
      p.req = applied[i].req;
      p.cpu = p.req.cpu_milli;
      p.mem = p.req.memory_mib;
      bindAccounting(applied[i].pod, +1);
    }
    applied.resize(mark);
  }

  void unbind(PodId id) {
    bindAccounting(id, -1);
    PodRecord& p = rec(id);
    holdEligibility(p.req, -1);
    if (!p.anti_affinity.empty()) std::erase(anti_holders_, id);
    p.alive = false;  // before the indexes drop it
    if (scoresOthers(p)) {
      --soft_holders_;
      unindexTerms(p);
    }
    for (const auto& [k, v] : p.labels) forgetOne(by_label_, labelKey(k, v));
    p.name.clear();
    p.name.shrink_to_fit();
    p.ns.clear();
    p.labels.clear();
    p.anti_affinity.clear();
    p.soft_affinity.clear();
    p.soft_anti_affinity.clear();
    p.affinity.clear();
    p.gpus.clear();
    p.gpus.shrink_to_fit();
    free_slots_.push_back(static_cast<uint32_t>(id));
  }

  // A PodId is (generation << 32) | slot.
  PodId idOf(uint32_t slot) const {
    return (static_cast<PodId>(pods_[slot].generation) << 32) | slot;
  }
  PodRecord& rec(PodId id) { return pods_[static_cast<uint32_t>(id)]; }
  const PodRecord& rec(PodId id) const { return pods_[static_cast<uint32_t>(id)]; }
  // The running pod `id` names, or nullptr (unknown, ended, or its slot reused since).
  PodRecord* live(PodId id) {
    const auto slot = static_cast<uint32_t>(id);
    if (slot >= pods_.size()) return nullptr;
    PodRecord& p = pods_[slot];
    return p.alive && p.generation == static_cast<uint32_t>(id >> 32) ? &p : nullptr;
  }

  SchedulerConfig cfg_;
  Rng rng_;
  std::vector<NodeState> nodes_;
  std::vector<uint32_t> node_rank_;        // position in the tie-breaking node order
  std::map<std::string, int> node_index_;  // by name
  std::vector<std::vector<PodId>> node_pods_;
  std::array<std::vector<int>, kMaxGpuTypes> by_type_;
  std::array<int64_t, kMaxGpuTypes> capacity_{};
  // Tier-0 + tier-1 GPU use per type (the non-preemptible part).
  std::array<int64_t, kMaxGpuTypes> shared_used_{};
  std::map<std::string, int> type_ids_;
  std::vector<std::string> type_names_;
  std::array<int, kMaxGpuTypes> rank_{};
  std::array<double, kMaxGpuTypes> cost_{};
  bool has_ladder_ = false;
  std::vector<QueueState> queues_;
  std::map<std::string, int> queue_index_;
  std::vector<PodRecord> pods_;
  std::vector<uint32_t> free_slots_;  // slots of ended pods, reused first
  ClusterView view_;
  FragModel fgd_model_;
  FragModel full_model_;
  const FragModel* stats_model_ = nullptr;
  std::unique_ptr<Policy> policy_;
  const std::vector<uint8_t>* exclude_ = nullptr;  // findNode skips these nodes (re-packing)
  // findNode and findVictims skip these: nodes a decision's inter-pod terms rule out.
  const std::vector<uint8_t>* pod_block_ = nullptr;
  // In pod_block_: ruled out only by the anti-affinity of tier-2 pods on the node itself
  // (anti_victims_), which a tier-0 pod's preemption may evict to open it.
  static constexpr uint8_t kBlockedByVictims = 2;
  std::map<int, std::vector<PodId>> anti_victims_;
  const PodSpec* deciding_ = nullptr;  // the pod makePlan is deciding for
  std::vector<PodId> anti_holders_;    // running pods with anti-affinity terms
  int soft_holders_ = 0;               // running pods whose terms score nodes (scoresOthers)
  // Their terms (soft_affinity, soft_anti_affinity, affinity), by the first matchLabels pair of
  // each term's selector ("key\0value"; "" for a term without matchLabels): a pod is checked
  // only against the terms under its own label pairs and "". Ended holders' terms linger (stale)
  // until they are half of a list.
  std::unordered_map<std::string, IndexList<TermRef>> terms_by_pair_;
  // findNode ranks the fitting nodes by these first, when set (makePlan, for one decision).
  const SoftRaw* soft_ = nullptr;
  mutable std::map<std::string, Domains> domains_;  // domains(), by topology key
  // Running pods by label ("key\0value"), for forSelectable; ids of ended pods linger (stale).
  std::unordered_map<std::string, IndexList<PodId>> by_label_;
  // Node constraints: per node its labels/taints and whether a NoSchedule/NoExecute taint keeps
  // unconstrained pods off it; per distinct constraint the nodes it allows (eligibilityOf).
  struct Eligibility {
    NodeConstraints constraints;
    std::vector<uint8_t> allowed;  // by node index
    int refs = 0;                  // running pods that hold it
  };
  std::vector<NodeSpec> node_specs_;  // name, labels, taints only
  std::vector<uint8_t> node_hard_taint_;
  int hard_tainted_nodes_ = 0;        // nodes with a NoSchedule/NoExecute taint
  std::vector<uint8_t> node_closed_;  // NodeSpec::closed, per node
  int closed_nodes_ = 0;
  int soft_tainted_nodes_ = 0;  // nodes with a PreferNoSchedule taint
  std::vector<Eligibility> elig_;
  std::map<std::string, int> elig_index_;  // constraintKey -> elig_ index
  std::vector<int> elig_free_;
};

}  // namespace

const std::vector<std::string>& policyNames() {
  static const std::vector<std::string> kNames = {
      "infera",      "fgd",         "spread",         "most-allocated", "best-fit",
      "dot-product", "gpu-packing", "gpu-clustering", "random-fit"};
  return kNames;
}

Result<std::unique_ptr<Scheduler>> Scheduler::create(SchedulerConfig config,
                                                     const std::vector<NodeSpec>& nodes) {
  INFERA_ASSIGN_OR_RETURN(auto impl, SchedulerImpl::make(std::move(config), nodes));
  return std::unique_ptr<Scheduler>(std::move(impl));
}

}  // namespace infera::sched
