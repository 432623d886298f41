// Policy figures on the real Alibaba GPU trace under the FGD protocol.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "scheduler/scheduler.h"
#include "scheduler/simulator.h"
#include "scheduler/trace.h"

namespace infera::sched {
namespace {

std::string traceDir() {
  const char* s = std::getenv("INFERA_SOURCE_DIR");
  return std::string(s ? s : ".") + "/../shared/data/alibaba-gpu-v2023/csv";
}

// The real trace: each policy's mean unallocated GPUs at 130% load over 2 seeds must stay within
// the tolerance of the 10-seed figures recorded in docs/scheduler.md (which also compares them
// with the paper). 2 seeds keep this under ~10 s in a RelWithDebInfo build.
TEST(SimulatorTraceTest, PolicyFiguresOnDefaultPodList) {
  const auto nodes = loadNodeCsv(traceDir() + "/openb_node_list_gpu_node.csv");
  const auto pods = loadPodCsv(traceDir() + "/openb_pod_list_default.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  ASSERT_TRUE(pods.ok()) << pods.status().message();
  // policy -> (10-seed mean, tolerance)
  const std::map<std::string, std::pair<double, double>> expected = {
      {"infera", {254, 20}},      {"fgd", {336, 30}},         {"best-fit", {426, 35}},
      {"dot-product", {601, 50}}, {"gpu-packing", {673, 50}}, {"gpu-clustering", {702, 70}},
      {"random-fit", {767, 60}}};
  std::map<std::string, double> got;
  for (const auto& [policy, want] : expected) {
    FgdProtocolConfig cfg;
    cfg.policy = policy;
    cfg.seeds = {42, 43};
    auto r = runFgdProtocol(*nodes, *pods, cfg);
    ASSERT_TRUE(r.ok()) << r.status().message();
    got[policy] = r->mean_unallocated;
    EXPECT_NEAR(r->mean_unallocated, want.first, want.second) << policy;
  }
  EXPECT_LT(got["infera"], got["fgd"]);
  EXPECT_LT(got["fgd"], got["best-fit"]);
  EXPECT_LT(got["best-fit"], got["random-fit"]);
}

// The lists dominated by shared (fractional) GPUs are where FGD is strongest; Infera's default must
// leave fewer GPUs unallocated there too, by a clear margin (10 seeds: 511 vs 553 on gpushare60,
// 642 vs 689 on gpushare80; see docs/scheduler.md). 3 seeds keep this to a few seconds.
TEST(SimulatorTraceTest, InferaBeatsFgdOnGpuShareLists) {
  const auto nodes = loadNodeCsv(traceDir() + "/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  for (const std::string list : {"gpushare60", "gpushare80"}) {
    const auto pods = loadPodCsv(traceDir() + "/openb_pod_list_" + list + ".csv");
    ASSERT_TRUE(pods.ok()) << pods.status().message();
    std::map<std::string, double> got;
    for (const std::string policy : {"infera", "fgd"}) {
      FgdProtocolConfig cfg;
      cfg.policy = policy;
      cfg.seeds = {42, 43, 44};
      auto r = runFgdProtocol(*nodes, *pods, cfg);
      ASSERT_TRUE(r.ok()) << r.status().message();
      got[policy] = r->mean_unallocated;
    }
    EXPECT_LT(got["infera"], got["fgd"] - 20) << list;
  }
}

}  // namespace
}  // namespace infera::sched
