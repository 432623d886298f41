// Infera's default against FGD on every pod list of the Alibaba GPU trace (FGD protocol). Slow
// (~1 min in RelWithDebInfo): labelled `slow`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/data_dir.h"
#include "scheduler/simulator.h"
#include "scheduler/trace.h"

namespace infera::sched {
namespace {

// The shipped trace (data/ in the repository; INFERA_DATA_DIR overrides it).
std::string traceDir() {
  auto dir = findDataDir("alibaba-gpu-v2023");
  EXPECT_TRUE(dir.ok()) << dir.status().message();
  return dir.ok() ? *dir + "/csv" : std::string("missing-trace");
}

double meanUnallocated(const std::vector<NodeSpec>& nodes, const std::vector<PodSpec>& pods,
                       const std::string& policy) {
  FgdProtocolConfig cfg;
  cfg.policy = policy;
  cfg.seeds = {42, 43, 44};
  auto r = runFgdProtocol(nodes, pods, cfg);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->mean_unallocated : 0;
}

TEST(SimulatorTraceAllListsTest, InferaLeavesFewerGpusThanFgdOnEveryPodList) {
  const auto nodes = loadNodeCsv(traceDir() + "/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  std::vector<std::string> lists;
  for (const auto& e : std::filesystem::directory_iterator(traceDir())) {
    const std::string f = e.path().filename().string();
    if (f.rfind("openb_pod_list_", 0) == 0) lists.push_back(e.path().string());
  }
  ASSERT_EQ(lists.size(), 24u);
  for (const std::string& path : lists) {
    const auto pods = loadPodCsv(path);
    ASSERT_TRUE(pods.ok()) << pods.status().message();
    const double infera = meanUnallocated(*nodes, *pods, "infera");
    const double fgd = meanUnallocated(*nodes, *pods, "fgd");
    EXPECT_LT(infera, fgd) << path;
  }
}

}  // namespace
}  // namespace infera::sched
