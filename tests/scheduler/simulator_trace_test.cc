// Policy figures on the real Alibaba GPU trace under the FGD protocol.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "core/data_dir.h"
#include "scheduler/report.h"
#include "scheduler/scheduler.h"
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

// The real trace: the FGD paper's baselines must land near the paper's own figures (mean
// unallocated GPUs at 130% load, default pod list; ours over 10 seeds are within 3%, see
// docs/scheduler.md), and Infera's default near its recorded 10-seed figure. 2 seeds keep this
// under ~15 s in a RelWithDebInfo build; the tolerance covers the 2-seed spread (sd up to ~20).
TEST(SimulatorTraceTest, PaperBaselinesReproduceAndInferaLeavesFewestOnDefaultPodList) {
  const auto nodes = loadNodeCsv(traceDir() + "/openb_node_list_gpu_node.csv");
  const auto pods = loadPodCsv(traceDir() + "/openb_pod_list_default.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  ASSERT_TRUE(pods.ok()) << pods.status().message();
  // policy -> (expected mean, tolerance): the paper's figure (6%) or, for infera, ours.
  std::map<std::string, std::pair<double, double>> expected = {{"infera", {254, 15}}};
  for (const std::string p :
       {"fgd", "best-fit", "dot-product", "gpu-packing", "gpu-clustering", "random-fit"}) {
    const double paper = paperUnallocatedGpus(p, "default");
    ASSERT_GT(paper, 0) << p;
    expected[p] = {paper, 0.06 * paper};
  }
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
  // The paper's order: FGD < BestFit < GpuPacking, GpuClustering < DotProd < Random; Infera first.
  EXPECT_LT(got["infera"], got["fgd"] - 15);
  EXPECT_LT(got["fgd"], got["best-fit"]);
  EXPECT_LT(got["best-fit"], got["gpu-packing"]);
  EXPECT_LT(got["best-fit"], got["gpu-clustering"]);
  EXPECT_LT(got["gpu-packing"], got["dot-product"]);
  EXPECT_LT(got["dot-product"], got["random-fit"]);
}

// The lists dominated by shared (fractional) GPUs are where FGD is strongest; Infera's default must
// leave fewer GPUs unallocated there too (10 seeds: 511 vs 540 on gpushare60, 641 vs 668 on
// gpushare80, 793 vs 816 on gpushare100; see docs/scheduler.md). 3 seeds keep this to seconds.
TEST(SimulatorTraceTest, InferaBeatsFgdOnGpuShareLists) {
  const auto nodes = loadNodeCsv(traceDir() + "/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  for (const std::string list : {"gpushare60", "gpushare80", "gpushare100"}) {
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
    EXPECT_LT(got["infera"], got["fgd"] - 10) << list;
  }
}

// Along the load curve, not only at its end: on one list of each family, Infera's default leaves no
// more GPUs unallocated than FGD at 70, 90 and 110% of arrivals (mean of seeds 42-44; the policy's
// weights were set on seeds 42-51, 100-109 and 200-209 over all 24 lists, docs/scheduler.md). No
// tolerance: the slack is for the floating-point sum of the means only (at 70% and 90% on the cpu
// lists both place everything and tie exactly).
TEST(SimulatorTraceTest, InferaAtOrBelowFgdAlongTheCurveOnEveryFamily) {
  const auto nodes = loadNodeCsv(traceDir() + "/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  constexpr double kToleranceGpus = 1e-6;
  for (const std::string list : {"cpu050", "gpushare40", "gpuspec33", "multigpu50"}) {
    const auto pods = loadPodCsv(traceDir() + "/openb_pod_list_" + list + ".csv");
    ASSERT_TRUE(pods.ok()) << pods.status().message();
    std::map<std::string, std::vector<CurvePoint>> curves;
    for (const std::string policy : {"infera", "fgd"}) {
      FgdProtocolConfig cfg;
      cfg.policy = policy;
      cfg.seeds = {42, 43, 44};
      auto r = runFgdProtocol(*nodes, *pods, cfg);
      ASSERT_TRUE(r.ok()) << r.status().message();
      curves[policy] = r->mean_curve;
    }
    for (const double load : {0.70, 0.90, 1.10}) {
      auto at = [&](const std::vector<CurvePoint>& c) {
        const CurvePoint* best = nullptr;
        for (const auto& p : c) {
          if (!best || std::abs(p.load - load) < std::abs(best->load - load)) best = &p;
        }
        return best;
      };
      const CurvePoint* mine = at(curves["infera"]);
      const CurvePoint* fgd = at(curves["fgd"]);
      ASSERT_TRUE(mine && fgd) << list;
      ASSERT_NEAR(mine->load, load, 0.026) << list;
      EXPECT_LE(mine->unallocated_gpus, fgd->unallocated_gpus + kToleranceGpus)
          << list << " at " << load * 100 << "% of arrivals: infera " << mine->unallocated_gpus
          << ", fgd " << fgd->unallocated_gpus;
      // Something is still unallocated at 110%: the comparison is not between two full clusters.
      if (load > 1.0) {
        EXPECT_GT(fgd->unallocated_gpus, 0) << list;
      }
    }
  }
}

// The most moves in any hour of the run: every window (t - 3600, t] ending at a move.
int mostMovesInAnHour(const std::vector<int64_t>& times) {
  int most = 0;
  size_t first = 0;
  for (size_t last = 0; last < times.size(); ++last) {
    while (times[first] <= times[last] - 3600) ++first;
    most = std::max(most, static_cast<int>(last - first + 1));
  }
  return most;
}

// Live re-packing in the time replay (docs/scheduler.md): 12 h of arrivals at 1.2x the cluster's
// GPUs. The planner keeps to its hourly budget in every hour, where the scenario wants more
// (a larger budget moves more in one hour), loses no pod (every moved pod still ends),
// and whole-node (8-GPU) pods wait less than without it, counting the ones never started until
// the end. Deterministic for the seed: the figures are the run's, not a sample.
TEST(SimulatorTraceTest, RepackingCutsWholeNodePendingWithinItsBudget) {
  const auto nodes = loadNodeCsv(traceDir() + "/openb_node_list_gpu_node.csv");
  const auto pods = loadPodCsv(traceDir() + "/openb_pod_list_default.csv");
  ASSERT_TRUE(nodes.ok() && pods.ok());
  ReplayConfig cfg;
  cfg.offered_load = 1.2;
  cfg.horizon_s = 12 * 3600;
  auto without = runReplay(*nodes, *pods, cfg);
  cfg.repack.min_tier = Tier::kShared;  // no config: every trace pod is tier 1
  cfg.repack_moves_per_hour = 6;
  auto with = runReplay(*nodes, *pods, cfg);
  cfg.repack_moves_per_hour = 30;
  auto more = runReplay(*nodes, *pods, cfg);
  ASSERT_TRUE(without.ok() && with.ok() && more.ok());
  EXPECT_EQ(without->repack_moves, 0);
  ASSERT_EQ(static_cast<int>(with->repack_move_times.size()), with->repack_moves);
  ASSERT_EQ(static_cast<int>(more->repack_move_times.size()), more->repack_moves);
  // The scenario wants more than 6 moves in some hour (26 with a budget of 30), and a budget of
  // 6 keeps every hour of the run at 6 or fewer; 30 keeps to 30.
  EXPECT_GT(mostMovesInAnHour(more->repack_move_times), 6);
  EXPECT_LE(mostMovesInAnHour(more->repack_move_times), 30);
  EXPECT_GT(with->repack_moves, 0);
  EXPECT_LE(mostMovesInAnHour(with->repack_move_times), 6);
  for (const auto* r : {&with, &more}) {
    const ReplayResult& run = **r;
    EXPECT_GT(run.repack_nodes_emptied, 0);
    EXPECT_EQ(run.whole_node_gpus, 8);
    EXPECT_EQ(run.arrivals, without->arrivals);  // the same arrivals
    EXPECT_EQ(run.scheduled + run.never_scheduled, run.pods);
    EXPECT_LT(run.whole_node_mean_pending_s, without->whole_node_mean_pending_s);
    EXPECT_GE(run.whole_node_started, without->whole_node_started);
    for (const Migration& m : run.migrations) {
      EXPECT_NE(m.from, m.to);
      EXPECT_NE(m.reason.find("re-packing frees node " + m.from), std::string::npos) << m.reason;
    }
  }
}

}  // namespace
}  // namespace infera::sched
