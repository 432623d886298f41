#pragma once
// Loading the Alibaba GPU trace (cluster-trace-gpu-v2023, "openb") CSV files. Columns are found
// by header name, so the short multigpu* files (no times/QoS/type columns) load too.

#include <string>
#include <vector>

#include "core/status.h"
#include "scheduler/types.h"

namespace infera::sched {

// sn,cpu_milli,memory_mib,gpu,model
Result<std::vector<NodeSpec>> loadNodeCsv(const std::string& path);
// name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,
// deletion_time,scheduled_time]. gpu_spec "A|B" becomes gpu_types; qos also goes to labels["qos"].
Result<std::vector<PodSpec>> loadPodCsv(const std::string& path);

}  // namespace infera::sched
