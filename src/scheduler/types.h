#pragma once
// Value types of the GPU scheduler: nodes, pods, placements and evictions. Plain data, no
// behaviour; see scheduler.h for the engine that consumes them.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace infera::sched {

inline constexpr int kMilliPerGpu = 1000;
// Upper bound of GPUs on one node (the trace has at most 8).
inline constexpr int kMaxGpusPerNode = 16;

// Tier 0 runs on its queue's guaranteed quota and may preempt; tier 1 uses the shared pool and is
// never preempted; tier 2 is best effort and preemptible.
enum class Tier : uint8_t { kGuaranteed = 0, kShared = 1, kBestEffort = 2 };

// Kubernetes' hard node constraints, with core/v1's meaning (kube-scheduler's NodeAffinity and
// TaintToleration filters): a pod goes only to nodes whose labels match its node selector and one
// of its required affinity terms, and whose NoSchedule/NoExecute taints it tolerates all of.
// PreferNoSchedule taints and preferred affinities are soft: see SoftConstraints.
struct Taint {
  std::string key;
  std::string value;
  std::string effect;  // NoSchedule | PreferNoSchedule | NoExecute
  bool operator==(const Taint&) const = default;
};

struct Toleration {
  std::string key;           // "" with op Exists: every taint
  std::string op = "Equal";  // Equal | Exists
  std::string value;
  std::string effect;  // "" = every effect
};

struct NodeSelectorRequirement {
  std::string key;  // a label (match_expressions) or "metadata.name" (match_fields)
  std::string op;   // In | NotIn | Exists | DoesNotExist | Gt | Lt
  std::vector<std::string> values;
};

// Requirements ANDed; a term with none matches no node.
struct NodeSelectorTerm {
  std::vector<NodeSelectorRequirement> match_expressions;
  std::vector<NodeSelectorRequirement> match_fields;
};

struct NodeConstraints {
  std::map<std::string, std::string> node_selector;  // every label must equal
  std::vector<NodeSelectorTerm> required_terms;      // ORed; empty = no required affinity
  std::vector<Toleration> tolerations;
  bool empty() const {
    return node_selector.empty() && required_terms.empty() && tolerations.empty();
  }
};

// A label selector (metav1.LabelSelector): every match_labels pair and every expression (In,
// NotIn, Exists, DoesNotExist) must hold; an empty selector selects every pod. An unknown
// operator selects nothing, as the API server's labels.Parse refuses it.
struct LabelSelector {
  std::map<std::string, std::string> match_labels;
  std::vector<NodeSelectorRequirement> match_expressions;
};

// A required inter-pod (anti-)affinity term (core/v1 PodAffinityTerm): the running pods its
// selector picks in `namespaces` (empty: the namespace of the pod that has the term; or every
// namespace with all_namespaces, `namespaceSelector: {}`), grouped into domains by the value of
// the nodes' `topology_key` label (kubernetes.io/hostname: each node its own domain).
struct PodAffinityTerm {
  LabelSelector selector;
  std::vector<std::string> namespaces;
  bool all_namespaces = false;
  std::string topology_key;
};

// A hard topology spread constraint (whenUnsatisfiable: DoNotSchedule): placed in a domain, the
// pods its selector picks in the pod's namespace (the pod too, if it matches) may exceed the
// emptiest domain by at most max_skew. Domains are those of the nodes the pod's node constraints
// allow (kube-scheduler's nodeAffinityPolicy Honor; taints are not looked at, nodeTaintsPolicy
// Ignore); with fewer than min_domains of them the emptiest counts as 0.
struct SpreadConstraint {
  int max_skew = 1;
  std::string topology_key;
  LabelSelector selector;
  int min_domains = 1;
};

// kube-scheduler's InterPodAffinity and PodTopologySpread filters, their hard parts: a pod goes
// only to a node whose domain holds a pod each affinity term selects (the first pod of a group
// whose term selects itself goes anywhere), whose domain holds no pod an anti-affinity term
// selects, where no running pod's anti-affinity term selects it, and within every spread
// constraint's skew. Preferred terms and ScheduleAnyway constraints: see SoftConstraints.
struct PodConstraints {
  std::vector<PodAffinityTerm> affinity;
  std::vector<PodAffinityTerm> anti_affinity;
  std::vector<SpreadConstraint> spread;
  // Set by a reader for a constraint the engine cannot honour (a namespaceSelector with labels,
  // say): such a pod is refused with it rather than placed where it may not belong.
  std::string unsupported;
  bool empty() const { return affinity.empty() && anti_affinity.empty() && spread.empty(); }
};

// A preferred term (weight 1-100): kube-scheduler's scores add `weight` where it holds.
struct WeightedNodeTerm {
  int weight = 0;
  NodeSelectorTerm term;
};
struct WeightedPodTerm {
  int weight = 0;
  PodAffinityTerm term;
};

// The soft constraints, kube-scheduler's Score plugins with their default weights:
// NodeAffinity (preferred terms, 2), InterPodAffinity (preferred terms of the pod, and of
// running pods that select it, 2), PodTopologySpread (ScheduleAnyway constraints, 2) and
// TaintToleration (PreferNoSchedule taints the pod does not tolerate, 3), each normalised to
// 0-100 over the nodes that fit. The engine places a pod on the fitting node with the highest
// weighted sum; its policy (packing) decides among nodes with equal sums.
struct SoftConstraints {
  std::vector<WeightedNodeTerm> node_affinity;
  std::vector<WeightedPodTerm> affinity;
  std::vector<WeightedPodTerm> anti_affinity;
  std::vector<SpreadConstraint> spread;  // whenUnsatisfiable: ScheduleAnyway
  bool empty() const {
    return node_affinity.empty() && affinity.empty() && anti_affinity.empty() && spread.empty();
  }
};

struct NodeSpec {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpus = 0;
  std::string gpu_model;                      // "" for CPU-only nodes
  std::map<std::string, std::string> labels;  // pool, region, zone, ...
  std::vector<Taint> taints;
  // Closed (Kubernetes: cordoned or not Ready): its pods are held and counted (queue usage,
  // inter-pod terms), pods go to it only as its taints allow (the reader adds the node
  // controllers' NoSchedule taint), and it is left out of stats(), nodesForGuarantees() and
  // re-packing.
  bool closed = false;
};

struct PodSpec {
  std::string name;
  std::string ns;                             // namespace, used by queue placement rules
  std::map<std::string, std::string> labels;  // used by queue placement rules
  std::string service_account;                // used by queue placement rules ("" = none)
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;    // whole GPUs, or 1 for a GPU-sharing pod
  int gpu_milli = 0;  // per GPU; < 1000 only when num_gpu == 1
  // Allowed GPU types; empty = any. A ladder minimum ("A10 or better") adds every type ranked at
  // or above it in the configured ladder.
  std::vector<std::string> gpu_types;
  std::string min_gpu_type;
  NodeConstraints constraints;     // node selector, required node affinity, tolerations
  PodConstraints pod_constraints;  // inter-pod (anti-)affinity, topology spread
  SoftConstraints soft;            // preferred terms, ScheduleAnyway spread
  Tier tier = Tier::kShared;
  std::string queue;  // "" = resolved by the queue placement rules (or no queues)
  int priority = 0;
  int64_t creation_s = 0;
  int64_t deletion_s = -1;  // -1 = runs forever
  // Being deleted (metadata.deletionTimestamp set): it holds its node's resources until it is
  // gone, but topology spread no longer counts it, as kube-scheduler's PodTopologySpread skips it.
  bool terminating = false;
  std::string qos;  // trace QoS class (LS, BE, ...), informational
};

// A running pod: (generation << 32) | slot. Slots of ended pods are reused; the generation makes
// the id of an ended pod unknown to the engine even after its slot holds another pod.
using PodId = uint64_t;

struct Eviction {
  PodId pod = 0;
  std::string pod_name;
  std::string node;
  std::string reason;  // "preempted by tier-0 pod x (queue a/b reclaims guaranteed A10)"
};

struct Placement {
  PodId pod = 0;
  int node = -1;  // node index in the engine
  std::string node_name;
  std::string gpu_type;          // "" for CPU-only placements on CPU nodes
  std::vector<int> gpu_indices;  // device indices on the node
  int gpu_milli = 0;             // per device
  int64_t cpu_milli = 0;         // after proportional adjustment
  int64_t memory_mib = 0;
  std::string queue;  // the queue it was charged to ("" = none)
  Tier tier = Tier::kShared;
  std::vector<Eviction> evicted;  // victims preempted to make room (empty unless tier 0)
};

// One move of a re-packing plan (Scheduler::planRepack): a running pod restarted on another node.
struct Migration {
  PodId pod = 0;
  std::string pod_name;
  int from_node = -1;
  int to_node = -1;
  std::string from;  // node names
  std::string to;
  int64_t gpu_milli = 0;  // the pod's GPU demand
  std::string reason;     // "frees node X (8 GPUs): 2 of its 2 pods move"
};

// A re-packing proposal: the moves in order (each target is checked against the cluster as the
// moves before it leave it) and what they free. Nothing is changed until the caller migrates.
struct RepackPlan {
  std::vector<Migration> moves;
  std::vector<std::string> nodes_emptied;  // GPU nodes whose GPUs all come free
  int64_t gpu_milli_freed = 0;             // on those nodes
  int candidates = 0;                      // nodes that were tried
};

// A queue's GPU use against its quota for one GPU type ("*": over all types), in milli-GPU.
struct QueueUsage {
  std::string queue;  // its path, "prod/search"
  std::string gpu_type;
  int64_t used_milli = 0;         // every tier
  int64_t guaranteed_milli = -1;  // -1: none set
  int64_t max_milli = -1;         // -1: no limit
};

struct ClusterStats {
  int nodes = 0;
  int64_t gpu_milli_capacity = 0;
  int64_t gpu_milli_allocated = 0;
  int64_t cpu_milli_capacity = 0;
  int64_t cpu_milli_allocated = 0;
  int running_pods = 0;
  int empty_gpu_nodes = 0;  // GPU nodes with every GPU free
  int64_t gpu_milli_on_empty_nodes = 0;
  // FGD fragmentation (milli-GPU) measured against the configured workload; 0 without one.
  double fragmentation_milli = 0;
};

}  // namespace infera::sched
