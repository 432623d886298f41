#pragma once
// Quota-as-code: the scheduler's YAML config (GPU-type ladder and costs, hierarchical queues with
// guaranteed/max quota per GPU type, placement rules, proportional CPU/memory, idle reclaim).
// Parsing reports every error with its path and line and rejects unknown keys. See
// docs/scheduler.md for the format and examples/scheduler/ for complete files.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "scheduler/types.h"

namespace infera {
class ConfigReader;
}

namespace infera::sched {

// One rung of the GPU-type ladder. Higher rank = more capable; cost orders the choice among the
// types a pod accepts (cheapest sufficient first).
struct GpuTypeInfo {
  std::string name;
  int rank = 0;
  double cost = 1.0;
};

// Quota in milli-GPU per GPU type ("*" = summed over all types), plus optional CPU and memory.
// Absent entries are unlimited for `max` and zero for `guaranteed`.
struct Quota {
  std::map<std::string, int64_t> gpu_milli;
  std::optional<int64_t> cpu_milli;
  std::optional<int64_t> memory_mib;
};

struct QueueSpec {
  std::string name;    // full path, "org/team"
  std::string parent;  // "" for a root queue
  Quota guaranteed;
  Quota max;
};

// Maps pods to a queue (and optionally a tier). The first matching rule wins. With `spread`, the
// pod goes to one of the listed queues by a stable hash of its name (used to assign trace pods).
struct PlacementRule {
  std::string ns;                             // "" = any namespace
  std::string service_account;                // "" = any service account
  std::map<std::string, std::string> labels;  // all must match
  std::string queue;
  std::vector<std::string> spread;
  std::optional<Tier> tier;
};

struct ProportionalConfig {
  bool enabled = false;
  double slack = 0.1;         // fraction of the node's per-GPU share allowed on top
  bool set_requests = false;  // "set": requests become the share; "check": over-share is refused
};

struct IdlePolicy {
  std::string name;
  std::map<std::string, std::string> match_labels;
  double idle_hours = 4;
  double utilization_below = 0.05;  // a sample under this counts as idle
};

struct SchedulingConfig {
  std::vector<GpuTypeInfo> gpu_types;
  std::vector<QueueSpec> queues;  // parents before children
  std::vector<PlacementRule> placement;
  ProportionalConfig proportional;
  std::vector<IdlePolicy> idle_reclaim;
};

Result<SchedulingConfig> parseSchedulingConfigString(const std::string& yaml_text);
// The same mapping read where it sits in a larger file (sched.yaml's `scheduling:`); errors go to
// the reader's ConfigErrors with their full key path. Checks unknown keys (finish()).
void readSchedulingConfig(ConfigReader& r, SchedulingConfig& cfg);
Result<SchedulingConfig> loadSchedulingConfigFile(const std::string& path);

}  // namespace infera::sched
