// The simulator on a small hand-made trace (golden) and on the real Alibaba trace (figures
// within a stated tolerance).
#include "scheduler/simulator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

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

TEST(SimulatorTest, ReplayReportsPendingPreemptionAndWritesCharts) {
  const auto nodes = loadNodeCsv(testdata("nodes_small.csv"));
  const auto pods = loadPodCsv(testdata("pods_small.csv"));
  ASSERT_TRUE(nodes.ok() && pods.ok());
  ReplayConfig rc;
  rc.sample_interval_s = 600;
  auto r = runReplay(*nodes, *pods, rc);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->pods, 16);
  EXPECT_EQ(r->scheduled + r->never_scheduled, 16);
  EXPECT_GT(r->scheduled, 10);
  EXPECT_FALSE(r->series.empty());
  EXPECT_GE(r->mean_free_on_empty_share, 0.0);
  EXPECT_LE(r->mean_free_on_empty_share, 1.0);
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
