// The simulator on a small hand-made trace (golden) and on the real Alibaba trace (figures
// within a stated tolerance).
#include "scheduler/simulator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "scheduler/queues.h"
#include "scheduler/report.h"
#include "scheduler/scheduler.h"
#include "scheduler/trace.h"

namespace infera::sched {
namespace {

std::string sourceDir() {
  const char* s = std::getenv("INFERA_SOURCE_DIR");
  return s ? s : ".";
}
std::string testdata(const std::string& f) {
  return sourceDir() + "/tests/testdata/scheduler/" + f;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The summary without the timing column (decisions/s varies from run to run).
std::string stableSummary(const std::vector<FgdResult>& results) {
  std::string out;
  for (const FgdResult& r : results) {
    char line[160];
    std::snprintf(line, sizeof(line), "%s unallocated=%.3f alloc=%.5f frag=%.5f\n",
                  r.policy.c_str(), r.mean_unallocated, r.mean_alloc_ratio, r.mean_frag_ratio);
    out += line;
  }
  return out;
}

TEST(SimulatorTest, LoadsTraceCsv) {
  const auto nodes = loadNodeCsv(testdata("nodes_small.csv"));
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  ASSERT_EQ(nodes->size(), 6u);
  EXPECT_EQ((*nodes)[4].gpu_model, "V100M32");
  const auto pods = loadPodCsv(testdata("pods_small.csv"));
  ASSERT_TRUE(pods.ok()) << pods.status().message();
  ASSERT_EQ(pods->size(), 16u);
  EXPECT_EQ((*pods)[5].gpu_types, std::vector<std::string>{"V100M32"});
  EXPECT_EQ((*pods)[1].labels.at("qos"), "BE");
  EXPECT_EQ((*pods)[3].deletion_s, 20000);
}

TEST(SimulatorTest, MissingFileIsNotFound) {
  EXPECT_EQ(loadNodeCsv("/nonexistent.csv").status().code(), StatusCode::kNotFound);
}

// Golden: every policy under the FGD protocol on the small trace, 3 seeds.
TEST(SimulatorTest, SmallTraceFgdProtocolMatchesGolden) {
  const auto nodes = loadNodeCsv(testdata("nodes_small.csv"));
  const auto pods = loadPodCsv(testdata("pods_small.csv"));
  ASSERT_TRUE(nodes.ok() && pods.ok());
  std::vector<FgdResult> results;
  for (const auto& policy : policyNames()) {
    FgdProtocolConfig cfg;
    cfg.policy = policy;
    cfg.seeds = {1, 2, 3};
    auto r = runFgdProtocol(*nodes, *pods, cfg);
    ASSERT_TRUE(r.ok()) << r.status().message();
    results.push_back(*r);
  }
  const std::string got = stableSummary(results);
  const std::string expected_path = testdata("small_fgd.expected");
  if (std::getenv("INFERA_UPDATE_GOLDEN")) {
    std::ofstream(expected_path) << got;
  }
  EXPECT_EQ(got, readFile(expected_path)) << "set INFERA_UPDATE_GOLDEN=1 to regenerate";
}

TEST(SimulatorTest, SameSeedGivesSameReport) {
  const auto nodes = loadNodeCsv(testdata("nodes_small.csv"));
  const auto pods = loadPodCsv(testdata("pods_small.csv"));
  ASSERT_TRUE(nodes.ok() && pods.ok());
  for (const std::string policy : {"infera", "random-fit"}) {
    FgdProtocolConfig cfg;
    cfg.policy = policy;
    cfg.seeds = {7};
    auto a = runFgdProtocol(*nodes, *pods, cfg);
    auto b = runFgdProtocol(*nodes, *pods, cfg);
    ASSERT_TRUE(a.ok() && b.ok());
    a->runs[0].seconds = b->runs[0].seconds = 0;
    a->runs[0].decisions_per_second = b->runs[0].decisions_per_second = 0;
    EXPECT_EQ(fgdJson({*a}), fgdJson({*b})) << policy;
  }
  ReplayConfig rc;
  auto sc = loadSchedulingConfigFile(sourceDir() + "/examples/scheduler/queues.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  rc.scheduling = *sc;
  auto x = runReplay(*nodes, *pods, rc);
  auto y = runReplay(*nodes, *pods, rc);
  ASSERT_TRUE(x.ok() && y.ok());
  x->seconds = y->seconds = 0;
  EXPECT_EQ(replayJson(*x), replayJson(*y));
}

// A scenario small enough to follow by hand, with tiers: one 8-GPU node; queue prod (tier 0,
// guaranteed all 8 GPUs) and queue batch (tier 2, preemptible).
//   t=0      be1 (batch, 8 GPUs, 10000 s of work) starts: pending 0.
//   t=1000   ls1 (prod, 4 GPUs, 5000 s) finds the node full and preempts be1 (the one
//            preemption): pending 0. be1 waits with 9000 s of work left.
//   t=2000   be2 (batch, 8 GPUs, 1000 s) waits: 4 GPUs free.
//   t=6000   ls1 ends; be1, the older, restarts first (its pending time stays its first start's).
//   t=15000  be1 ends; be2 starts: pending 13000 s.
//   t=16000  be2 ends; the node is empty until late (1 GPU) arrives at 20000 and ends the replay.
// Samples every 600 s from 0 to 19800: 34, of which those at 16200..19800 (7) see the empty node
// (free GPUs on empty nodes / free GPUs = 1), every other one 0.
TEST(SimulatorTest, ReplayReportsPendingPreemptionAndWritesCharts) {
  const auto sc = parseSchedulingConfigString(R"(
gpu_types: [{name: G2, rank: 1, cost: 1}]
queues:
  - {name: prod, guaranteed: {gpus: {G2: 8}}, max: {gpus: {"*": 8}}}
  - {name: batch, max: {gpus: {"*": 8}}}
placement:
  - {match: {labels: {qos: LS}}, queue: prod, tier: 0}
  - {queue: batch, tier: 2}
)");
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  std::vector<NodeSpec> nodes(1);
  nodes[0].name = "n0";
  nodes[0].cpu_milli = 64000;
  nodes[0].memory_mib = 262144;
  nodes[0].gpus = 8;
  nodes[0].gpu_model = "G2";
  auto pod = [](std::string name, std::string qos, int gpus, int64_t created, int64_t ends) {
    PodSpec p;
    p.name = std::move(name);
    p.labels["qos"] = qos;
    p.qos = qos;
    p.cpu_milli = 1000;
    p.memory_mib = 1024;
    p.num_gpu = gpus;
    p.gpu_milli = 1000;
    p.creation_s = created;
    p.deletion_s = ends;
    return p;
  };
  const std::vector<PodSpec> pods = {pod("be1", "BE", 8, 0, 10000), pod("ls1", "LS", 4, 1000, 6000),
                                     pod("be2", "BE", 8, 2000, 3000),
                                     pod("late", "BE", 1, 20000, -1)};
  ReplayConfig rc;
  rc.scheduling = *sc;
  rc.sample_interval_s = 600;
  auto r = runReplay(nodes, pods, rc);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->pods, 4);
  EXPECT_EQ(r->scheduled, 4);
  EXPECT_EQ(r->never_scheduled, 0);
  EXPECT_EQ(r->preemptions, 1);
  ASSERT_EQ(r->evictions.size(), 1u);
  EXPECT_EQ(r->evictions[0].pod_name, "be1");
  EXPECT_NE(r->evictions[0].reason.find("tier-0 pod ls1"), std::string::npos)
      << r->evictions[0].reason;
  // Pending times in arrival order: be1, ls1, be2, late.
  EXPECT_EQ(r->pending_times_s, (std::vector<double>{0, 0, 13000, 0}));
  EXPECT_EQ(r->waited, 1);
  EXPECT_DOUBLE_EQ(r->waited_share, 0.25);
  EXPECT_DOUBLE_EQ(r->mean_pending_s, 13000.0 / 4);
  EXPECT_DOUBLE_EQ(r->p99_pending_s, 13000);
  ASSERT_EQ(r->series.size(), 34u);
  EXPECT_DOUBLE_EQ(r->mean_free_on_empty_share, 7.0 / 34);
  const std::string dir =
      std::filesystem::temp_directory_path().string() + "/infera_sched_replay_test";
  ASSERT_TRUE(writeReplayReport(dir, *r).isOk());
  for (const char* f : {"report.json", "allocation.svg", "pending_time.svg",
                        "free_node_aggregation.svg", "summary.txt"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
  }
  EXPECT_NE(readFile(dir + "/allocation.svg").find("<svg"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// The small trace without queues: every pod is tier 1, so nothing is ever preempted.
TEST(SimulatorTest, ReplayWithoutTiersPreemptsNothing) {
  const auto nodes = loadNodeCsv(testdata("nodes_small.csv"));
  const auto pods = loadPodCsv(testdata("pods_small.csv"));
  ASSERT_TRUE(nodes.ok() && pods.ok());
  ReplayConfig rc;
  rc.sample_interval_s = 600;
  auto r = runReplay(*nodes, *pods, rc);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->pods, 16);
  EXPECT_EQ(r->scheduled, 15);  // the seed's run: one pod still waits at the end
  EXPECT_EQ(r->never_scheduled, 1);
  EXPECT_EQ(r->preemptions, 0);
  EXPECT_TRUE(r->evictions.empty());
  EXPECT_FALSE(r->series.empty());
}

// Synthetic arrivals: pods drawn from the list, with their trace durations, arriving at the rate
// that offers the asked GPU load. Five times the load brings about five times the pods, fills the
// cluster more and makes pods wait; the same seed gives the same report.
TEST(SimulatorTest, SyntheticArrivalsOfferTheAskedLoad) {
  const auto nodes = loadNodeCsv(testdata("nodes_small.csv"));
  const auto pods = loadPodCsv(testdata("pods_small.csv"));
  ASSERT_TRUE(nodes.ok() && pods.ok());
  ReplayConfig low;
  low.offered_load = 0.3;
  low.horizon_s = 7 * 24 * 3600;
  low.sample_interval_s = 600;
  ReplayConfig high = low;
  high.offered_load = 1.5;
  auto a = runReplay(*nodes, *pods, low);
  auto b = runReplay(*nodes, *pods, high);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->pods, a->arrivals);
  EXPECT_GT(a->arrivals, 50);
  EXPECT_NEAR(static_cast<double>(b->arrivals) / a->arrivals, 5.0, 1.0);
  EXPECT_GT(b->mean_gpu_alloc_ratio, a->mean_gpu_alloc_ratio + 0.2);
  EXPECT_GT(b->waited_share, a->waited_share);
  auto again = runReplay(*nodes, *pods, high);
  ASSERT_TRUE(again.ok());
  b->seconds = again->seconds = 0;
  EXPECT_EQ(replayJson(*b), replayJson(*again));
  ReplayConfig bad = low;
  bad.offered_load = -1;
  EXPECT_EQ(runReplay(*nodes, *pods, bad).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace infera::sched
