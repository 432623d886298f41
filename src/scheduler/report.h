#pragma once
// Rendering simulation results: a JSON report, SVG charts and a one-screen text summary.

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "scheduler/simulator.h"

namespace infera::sched {

// The FGD paper's figures (mean unallocated GPUs at 130% load, from its artifact's published
// results) for its six policies on the 17 pod lists it ran; negative for any other policy or list.
double paperUnallocatedGpus(const std::string& policy, const std::string& pod_list);

// Where `r` is furthest behind `reference` along the mean curve, from `from_load` on: the step and
// how many more GPUs it leaves unallocated there (<= 0: never behind). Empty without points.
struct StepComparison {
  double load = 0;
  double more_unallocated = 0;
};
std::optional<StepComparison> worstStepAgainst(const FgdResult& r, const FgdResult& reference,
                                               double from_load);

// The table of policies, then each one's worst step against `reference` (when it is among them).
std::string fgdSummary(const std::vector<FgdResult>& results, const std::string& reference = "fgd");
// Per policy: the mean curve (with the spread over seeds) and every seed's run with its curve;
// each step has allocated, unallocated and fragmented GPUs, ratios and failed pods by kind.
std::string fgdJson(const std::vector<FgdResult>& results);
// Allocation ratio vs arrived load, one line per policy.
std::string fgdAllocationSvg(const std::vector<FgdResult>& results);
// Unallocated GPUs vs arrived load from 50%, one line per policy with a band over seeds.
std::string fgdUnallocatedSvg(const std::vector<FgdResult>& results);
// Writes report.json, alloc_vs_load.svg, unallocated_vs_load.svg and summary.txt into `dir`.
Status writeFgdReport(const std::string& dir, const std::vector<FgdResult>& results,
                      const std::string& reference = "fgd");

std::string replaySummary(const ReplayResult& r);
std::string replayJson(const ReplayResult& r);
// The same replay without (`base`) and with re-packing: free GPUs on empty nodes, whole-node pods'
// pending time, all pods' pending time, pods moved.
std::string repackComparison(const ReplayResult& base, const ReplayResult& repack);
// Writes report.json, pending_time.svg, free_node_aggregation.svg, allocation.svg, summary.txt.
Status writeReplayReport(const std::string& dir, const ReplayResult& r);

}  // namespace infera::sched
