// Infera's default against FGD on every pod list of the Alibaba GPU trace (FGD protocol), at the
// end and at every 5% step of the load curve. Slow (~1 min in RelWithDebInfo): labelled `slow`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/data_dir.h"
#include "scheduler/report.h"
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

FgdResult run(const std::vector<NodeSpec>& nodes, const std::vector<PodSpec>& pods,
              const std::string& policy) {
  FgdProtocolConfig cfg;
  cfg.policy = policy;
  cfg.seeds = {42, 43, 44};
  auto r = runFgdProtocol(nodes, pods, cfg);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : FgdResult{};
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
  int with_paper = 0;
  for (const std::string& path : lists) {
    const auto pods = loadPodCsv(path);
    ASSERT_TRUE(pods.ok()) << pods.status().message();
    const FgdResult infera = run(*nodes, *pods, "infera");
    const FgdResult fgd = run(*nodes, *pods, "fgd");
    EXPECT_LT(infera.mean_unallocated, fgd.mean_unallocated) << path;
    // Fidelity of the FGD baseline on every list the paper's artifact ran (17 of 24): within 5%
    // of its published figure (our 3-seed mean against its 10-seed mean; with 10 seeds each it is
    // within 2.4% on all 17, docs/scheduler.md).
    const std::string list = std::filesystem::path(path).stem().string().substr(15);
    const double paper = paperUnallocatedGpus("fgd", list);
    if (paper > 0) {
      ++with_paper;
      EXPECT_NEAR(fgd.mean_unallocated, paper, 0.05 * paper) << list;
    }
    // Along the curve: no step from 50% to 130% of arrivals where Infera leaves more GPUs
    // unallocated than FGD (mean of the three seeds; the weights were raised until this held on
    // seeds 42-51, 100-109 and 200-209, so this guards against a regression, docs/scheduler.md).
    // The slack is for the floating-point sum of the means only.
    ASSERT_EQ(infera.mean_curve.size(), fgd.mean_curve.size()) << path;
    int steps = 0;
    for (size_t i = 0; i < infera.mean_curve.size(); ++i) {
      const CurvePoint& a = infera.mean_curve[i];
      const CurvePoint& b = fgd.mean_curve[i];
      ASSERT_NEAR(a.load, b.load, 1e-9) << path;
      if (a.load < 0.5 - 1e-9) continue;
      ++steps;
      EXPECT_LE(a.unallocated_gpus, b.unallocated_gpus + 1e-6)
          << path << " at " << a.load * 100 << "% of arrivals";
    }
    EXPECT_EQ(steps, 17) << path;  // 50, 55, ..., 130
  }
  EXPECT_EQ(with_paper, 17);
}

}  // namespace
}  // namespace infera::sched
