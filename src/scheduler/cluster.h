#pragma once
// Private to src/scheduler: the engine's node state, resource requests, the FGD fragmentation
// model and the placement policy interface.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/types.h"

namespace infera::sched {

inline constexpr int kMaxGpuTypes = 32;
using TypeMask = uint32_t;
inline constexpr TypeMask kAnyType = ~TypeMask{0};

// A pod's demand as the engine sees it: interned GPU types, per-GPU milli.
struct PodReq {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int gpu_milli = 0;  // per GPU, 1..1000 when num_gpu > 0
  TypeMask types = kAnyType;
  // The pod's node constraints (NodeConstraints) as an index into the engine's table of the
  // nodes each distinct constraint allows; -1 = every node (no constraints, no tainted nodes).
  int eligible = -1;
  int64_t gpuTotalMilli() const { return static_cast<int64_t>(num_gpu) * gpu_milli; }
  bool sharing() const { return num_gpu == 1 && gpu_milli < kMilliPerGpu; }
};

struct NodeState {
  std::string name;
  int64_t cpu_capacity = 0;
  int64_t mem_capacity = 0;
  int64_t cpu_free = 0;
  int64_t mem_free = 0;
  int gpus = 0;
  int type = -1;  // interned GPU model, -1 for CPU-only
  std::array<int16_t, kMaxGpusPerNode> gpu_free{};
  std::array<int16_t, kMaxGpusPerNode> sorted_free{};  // gpu_free, descending (FragModel's key)
  int gpu_free_total = 0;                              // milli
  int full_free_gpus = 0;
  int pods = 0;
  // GPU-clustering bookkeeping: running pods per shape class (see shapeClass).
  std::array<int, kMaxGpusPerNode + 2> shape_count{};

  bool typeAllowed(TypeMask m) const { return type < 0 ? m == kAnyType : ((m >> type) & 1u) != 0; }
};

// Whether `req` fits on `n` with the given free CPU/memory override (proportional mode adjusts
// requests per node; callers pass the effective values).
inline bool gpuFits(const NodeState& n, int num_gpu, int gpu_milli) {
  if (num_gpu == 0) return true;
  if (gpu_milli >= kMilliPerGpu) return n.full_free_gpus >= num_gpu;
  for (int g = 0; g < n.gpus; ++g) {
    if (n.gpu_free[g] >= gpu_milli) return true;
  }
  return false;
}

inline bool fits(const NodeState& n, const PodReq& r) {
  if (r.num_gpu > 0 && (n.type < 0 || !n.typeAllowed(r.types))) return false;
  return n.cpu_free >= r.cpu_milli && n.mem_free >= r.memory_mib &&
         gpuFits(n, r.num_gpu, r.gpu_milli);
}

// Shape class for GPU clustering (the FGD simulator's GPU affinity tags): 0 CPU-only (no tag),
// 1 sharing ("share-gpu"), 1 + n for n whole GPUs ("n-gpu").
inline int shapeClass(const PodReq& r) {
  if (r.num_gpu == 0) return 0;
  if (r.sharing()) return 1;
  return 1 + r.num_gpu;
}

// Node constraints (constraints.cc): whether a pod with `c` may go to `node` (its labels, name and
// NoSchedule/NoExecute taints); whether a node has such a taint; a canonical key of `c` (equal
// constraints, equal keys).
bool constraintsAllow(const NodeConstraints& c, const NodeSpec& node);
// The node selector and required node affinity alone (taints not looked at).
bool nodeAffinityAllows(const NodeConstraints& c, const NodeSpec& node);
bool hasHardTaint(const NodeSpec& node);
std::string constraintKey(const NodeConstraints& c);
// One node selector term against a node (a term without requirements matches none).
bool nodeTermMatches(const NodeSelectorTerm& t, const NodeSpec& node);
// How many of the node's PreferNoSchedule taints the tolerations (those with effect "" or
// PreferNoSchedule) leave untolerated: kube-scheduler's TaintToleration score, before it is
// normalised.
int intolerablePreferNoSchedule(const std::vector<Toleration>& tolerations, const NodeSpec& node);

// One decision's soft scores before normalisation (soft.cc), per node index; a component whose
// `on` is false does not apply (it would be the same for every node).
struct SoftRaw {
  struct Component {
    bool on = false;
    std::vector<int64_t> value;
  };
  Component node_affinity;  // sum of the weights of the preferred terms the node matches
  Component taints;         // intolerable PreferNoSchedule taints
  Component pod_affinity;   // preferred (anti-)affinity weights of the node's domains
  // ScheduleAnyway spread: per constraint, the selected pods in each node's domain and the
  // domain's id (kube-scheduler's per-node count for kubernetes.io/hostname); nodes without
  // every constraint's key are not scored (0).
  struct Spread {
    int max_skew = 1;
    bool hostname = false;
    int domains = 0;          // distinct domains (ids in `domain` are below this)
    std::vector<int> domain;  // per node, -1 when not scored
    std::vector<int64_t> count;
  };
  std::vector<Spread> spread;
  std::vector<uint8_t> spread_scored;
  bool empty() const {
    return !node_affinity.on && !taints.on && !pod_affinity.on && spread.empty();
  }
};
// kube-scheduler's weighted sum of the normalised scores (NodeAffinity 2, InterPodAffinity 2,
// PodTopologySpread 2, TaintToleration 3; each 0-100 over `nodes`, the nodes that fit), one per
// node of `nodes`, in `out`.
void softTotals(const SoftRaw& raw, const std::vector<int>& nodes, std::vector<int64_t>& out);

// Applies a placement of `r` on GPUs `gpus` (one index per GPU) with sign +1 (bind) or -1 (free).
void applyToNode(NodeState& n, int64_t cpu, int64_t mem, int gpu_milli,
                 const std::vector<int>& gpus, int shape, int sign);

// Fragmentation (FGD, Weng et al. ATC'23): the expected milli-GPU on a node that a pod drawn from
// the target workload could not use. Classes are pod shapes with their popularity.
//
// A node's fragmentation depends only on its GPU type, the multiset of free milli-GPU and which
// class CPU/memory thresholds its free CPU/memory clear; results are memoised on that key, so
// the many nodes in identical states cost one hash lookup. Not thread-safe (the memo mutates).
class FragModel {
 public:
  struct Class {
    PodReq req;
    double weight = 0;
  };
  FragModel() = default;
  explicit FragModel(std::vector<Class> classes);
  bool empty() const { return classes_.empty(); }
  const std::vector<Class>& classes() const { return classes_; }

  // Fragmentation of `n` as it is.
  double nodeFrag(const NodeState& n) const;
  // Fragmentation of `n` after `r` takes GPU `gpu` (sharing pods) or its first free GPUs.
  double fragAfter(const NodeState& n, const PodReq& r, int gpu) const;

 private:
  struct Key {
    uint64_t w[5];
    bool operator==(const Key& o) const {
      return w[0] == o.w[0] && w[1] == o.w[1] && w[2] == o.w[2] && w[3] == o.w[3] && w[4] == o.w[4];
    }
  };
  struct Member {
    uint16_t cpu_rank;
    uint16_t mem_rank;
    double weight;
  };
  struct Group {
    TypeMask types;
    int num_gpu;
    int gpu_milli;
    std::vector<Member> members;
    double weight;
  };
  // `sorted`: kMaxGpusPerNode entries, the node's free milli-GPU in descending order, then zeros.
  double lookup(int type, int64_t cpu_free, int64_t mem_free, const int16_t* sorted,
                int gpus) const;
  double compute(int type, int cpu_rank, int mem_rank, const int16_t* sorted_free, int gpus) const;

  std::vector<Class> classes_;
  std::vector<Group> groups_;
  double cpu_only_weight_ = 0;
  std::vector<int64_t> cpu_thresholds_;
  std::vector<int64_t> mem_thresholds_;
  // Open-addressing memo; key and value side by side so a probe touches one place. A used slot's
  // key has bit 63 of w[0] set (an empty slot is all zero).
  struct Slot {
    Key key;
    double value;
  };
  mutable std::vector<Slot> slots_;
  mutable size_t size_ = 0;
};

// Builds FGD classes from a pod list: shapes by (cpu, num_gpu, gpu_milli, types), most popular
// first, cut at `coverage` of pods (1.0 = all shapes).
FragModel buildFragModel(const std::vector<PodReq>& pods, double coverage, bool with_memory);

// Read-only view policies score against.
struct ClusterView {
  const std::vector<NodeState>* nodes = nullptr;
  // Per node, 1 when closed (NodeSpec::closed): cluster-wide terms (free GPUs per type, hosts for
  // the big shapes) leave it out.
  const std::vector<uint8_t>* closed = nullptr;
  int64_t max_cpu = 1;
  int64_t max_mem = 1;
  int max_gpu_milli = kMilliPerGpu;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Score (higher is better) of `r` on feasible node `node`. For a sharing pod the policy picks
  // the GPU in `*gpu`; otherwise it leaves -1 (first free GPUs).
  virtual double score(const ClusterView& view, int node, const PodReq& r, int* gpu) = 0;
  // Node state changed (bind/release); policies with per-node caches refresh them.
  virtual void nodeChanged(int /*node*/) {}
  // Random-fit ignores scores: every feasible node ties.
  virtual bool isRandom() const { return false; }
  // How exact ties are broken: false = uniformly at random (kube-scheduler's selectHost); true =
  // the first node in the engine's node order, a seeded permutation (what the FGD simulator's
  // scheduler does; its integer scores tie often, so this decides where e.g. CPU-only pods go
  // under GPU packing).
  virtual bool firstTie() const { return false; }
};

std::unique_ptr<Policy> makePolicy(std::string_view name, const ClusterView& view,
                                   const FragModel* fgd_model, const FragModel* full_model,
                                   uint64_t seed);

// Best-fit GPU for a sharing pod: the fullest GPU that still fits (-1 when none).
int bestFitGpu(const NodeState& n, int gpu_milli);

// splitmix64: a small, portable, seeded generator (same sequence on every platform).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_;
};

}  // namespace infera::sched
