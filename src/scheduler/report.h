#pragma once
// Rendering simulation results: a JSON report, SVG charts and a one-screen text summary.

#include <string>
#include <vector>

#include "core/status.h"
#include "scheduler/simulator.h"

namespace infera::sched {

// Paper figures (mean unallocated GPUs at 130% load, default pod list), keyed by policy name;
// negative when the paper has none or `pod_list` is not "default".
double paperUnallocatedGpus(const std::string& policy, const std::string& pod_list);

std::string fgdSummary(const std::vector<FgdResult>& results);
std::string fgdJson(const std::vector<FgdResult>& results);
// Allocation ratio vs arrived load, one line per policy.
std::string fgdAllocationSvg(const std::vector<FgdResult>& results);
// Writes report.json, alloc_vs_load.svg and summary.txt into `dir` (created if needed).
Status writeFgdReport(const std::string& dir, const std::vector<FgdResult>& results);

std::string replaySummary(const ReplayResult& r);
std::string replayJson(const ReplayResult& r);
// Writes report.json, pending_time.svg, free_node_aggregation.svg, allocation.svg, summary.txt.
Status writeReplayReport(const std::string& dir, const ReplayResult& r);

}  // namespace infera::sched
