#pragma once
// Trace-driven simulation on virtual time: the FGD paper's protocol (fill to 130% load, no
// departures, each pod placed once) and a time replay with departures, queues, tiers, pending
// retry, preemption and idle reclaim. Results are plain structs; report.h renders them.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "scheduler/queues.h"
#include "scheduler/scheduler.h"
#include "scheduler/types.h"

namespace infera::sched {

// Called with progress in [0, 1]; may be empty.
using ProgressFn = std::function<void(double)>;

struct FgdProtocolConfig {
  std::string policy = "infera";
  std::vector<uint64_t> seeds = {42, 43, 44, 45, 46, 47, 48, 49, 50, 51};
  double load = 1.3;         // arrived GPU demand / cluster GPU capacity at the end
  double curve_step = 0.05;  // allocation ratio is recorded at each multiple of this load
  ProgressFn progress;
};

// Pods refused so far, by kind (typed pods are counted in their kind too).
struct FailedPods {
  double cpu_only = 0;  // no GPU
  double shared = 0;    // part of one GPU
  double whole = 0;     // one whole GPU
  double multi = 0;     // two GPUs or more
  double typed = 0;     // with a GPU-type constraint
  double total() const { return cpu_only + shared + whole + multi; }
};

struct CurvePoint {
  double load = 0;         // arrived GPU demand / capacity
  double alloc_ratio = 0;  // allocated GPUs / capacity
  double frag_ratio = 0;   // fragmented free GPU / free GPU
  double allocated_gpus = 0;
  double unallocated_gpus = 0;
  double fragmented_gpus = 0;  // the paper's measure against the workload, in GPUs
  FailedPods failed;           // cumulative, up to this step
  // Mean curves only: the spread of unallocated GPUs over the seeds at this step.
  double unallocated_min = 0;
  double unallocated_max = 0;
};

struct FgdRun {
  uint64_t seed = 0;
  int pods_arrived = 0;
  int pods_failed = 0;
  FailedPods failed;            // at the final load
  double unallocated_gpus = 0;  // at the final load
  double alloc_ratio = 0;
  double frag_ratio = 0;
  double seconds = 0;
  double decisions_per_second = 0;
  std::vector<CurvePoint> curve;
};

struct FgdResult {
  std::string policy;
  std::string pod_list;
  double capacity_gpus = 0;
  std::vector<FgdRun> runs;
  double mean_unallocated = 0;
  double stddev_unallocated = 0;
  double mean_alloc_ratio = 0;
  double mean_frag_ratio = 0;
  std::vector<CurvePoint> mean_curve;
};

// Runs the FGD protocol for one policy over every seed. `pods` is also the workload the
// fragmentation-aware policies are told about (as in the paper).
Result<FgdResult> runFgdProtocol(const std::vector<NodeSpec>& nodes,
                                 const std::vector<PodSpec>& pods, const FgdProtocolConfig& cfg);

struct ReplayConfig {
  std::string policy = "infera";
  uint64_t seed = 42;
  SchedulingConfig scheduling;  // queues, tiers mapping, ladder, proportional, idle reclaim
  int64_t sample_interval_s = 3600;
  // Arrival times are divided by this (durations kept): the trace's pods mostly live under an
  // hour but arrive over ~150 days, so at speed 1 the cluster is nearly idle.
  double arrival_speedup = 1.0;
  // > 0: trace-driven synthetic arrivals instead of the trace's own times (which, at any speed-up,
  // never load this trace's cluster: its pods mostly live minutes and arrive over ~150 days).
  // Pods are drawn uniformly (seeded) from the list, keep their trace duration (capped at the
  // horizon; none = runs to the end) and arrive as a Poisson process at the rate that offers this
  // share of GPU capacity: rate = offered_load x capacity / mean(GPU x duration).
  double offered_load = 0;
  int64_t horizon_s = 24 * 3600;  // synthetic arrivals: how long they keep coming
  // Synthetic utilisation model for idle reclaim (see docs/scheduler.md).
  bool utilization_model = true;
  size_t max_evictions_listed = 200;
  // Live re-packing (off at 0): every repack_interval_s the planner (Scheduler::planRepack, with
  // `repack`'s limits) may move as many pods as the hour's budget has left; each moved pod
  // restarts on its new node, keeping its remaining run time plus repack_restart_s.
  int repack_moves_per_hour = 0;
  int64_t repack_interval_s = 300;
  int64_t repack_restart_s = 60;
  RepackConfig repack;  // max_moves is set from the budget; min_node_gpus 0 = the largest node's
  // With repack.target_empty_nodes 0: plan only while whole-node pods wait, for as many empty
  // nodes as there are such pods waiting (false: empty as many as the budget allows).
  bool repack_on_demand = true;
  ProgressFn progress;
};

struct SeriesPoint {
  int64_t t = 0;
  double gpu_alloc_ratio = 0;
  double free_on_empty_share = 0;  // free GPUs sitting on fully empty nodes / free GPUs
  int pending = 0;
  int running = 0;
};

struct ReplayResult {
  std::string policy;
  double arrival_speedup = 1;  // trace times: the speed-up used
  double offered_load = 0;  // synthetic arrivals: the offered GPU load asked for (0 = trace times)
  int arrivals = 0;         // pods that arrived (synthetic arrivals: drawn from the list)
  int pods = 0;
  int scheduled = 0;        // started at least once
  int never_scheduled = 0;  // still pending at the end of the trace (or refused)
  int waited = 0;           // started later than created
  double waited_share = 0;
  double mean_pending_s = 0;
  double p99_pending_s = 0;
  int preemptions = 0;
  int idle_reclaimed_pods = 0;
  double idle_reclaimed_gpus = 0;
  int nodes_for_guarantees = 0;
  double nodes_for_guarantees_share = 0;
  double mean_gpu_alloc_ratio = 0;
  double mean_free_on_empty_share = 0;
  int64_t decisions = 0;
  double seconds = 0;
  std::vector<SeriesPoint> series;
  std::vector<Eviction> evictions;      // first max_evictions_listed, with reasons
  std::vector<double> pending_times_s;  // per pod that started
  // Whole-node pods: those asking for as many GPUs as the largest node has (8 on the trace).
  int whole_node_gpus = 0;
  int whole_node_pods = 0;     // arrived
  int whole_node_started = 0;  // started at least once
  // Over every arrived whole-node pod: one never started counts its wait until the end of the run
  // (a lower bound), so runs that start different numbers of them compare fairly.
  double whole_node_mean_pending_s = 0;
  double whole_node_p99_pending_s = 0;
  // Re-packing (repack_moves_per_hour > 0).
  int repack_moves_per_hour = 0;
  int repack_plans = 0;                    // plans that proposed at least one move
  int repack_moves = 0;                    // pods moved
  int repack_nodes_emptied = 0;            // nodes the applied plans emptied
  std::vector<int64_t> repack_move_times;  // of every move, in seconds, in order
  std::vector<Migration> migrations;       // first max_evictions_listed, with reasons
};

Result<ReplayResult> runReplay(const std::vector<NodeSpec>& nodes, const std::vector<PodSpec>& pods,
                               const ReplayConfig& cfg);

}  // namespace infera::sched
