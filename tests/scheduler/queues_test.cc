#include "scheduler/queues.h"

#include <gtest/gtest.h>

namespace infera::sched {
namespace {

TEST(QueuesTest, ParsesHierarchyQuotaRulesAndPolicies) {
  const auto cfg = parseSchedulingConfigString(R"(
gpu_types:
  - {name: T4, rank: 1, cost: 0.35}
  - {name: A10, rank: 2, cost: 0.75}
queues:
  - name: research
    max: {gpus: {"*": 32}, cpu: 512, memory_gib: 2048}
    children:
      - name: vision
        guaranteed: {gpus: {A10: 8}}
        max: {gpus: {A10: 16}}
placement:
  - match: {namespace: vision, labels: {app: train}}
    queue: research/vision
    tier: 0
  - spread: [research, research/vision]
proportional: {enabled: true, slack: 0.2, mode: set}
idle_reclaim:
  - name: notebooks
    match: {labels: {kind: notebook}}
    idle_hours: 4
)");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  ASSERT_EQ(cfg->queues.size(), 2u);
  EXPECT_EQ(cfg->queues[1].name, "research/vision");
  EXPECT_EQ(cfg->queues[1].parent, "research");
  EXPECT_EQ(cfg->queues[1].guaranteed.gpu_milli.at("A10"), 8000);
  EXPECT_EQ(cfg->queues[0].max.gpu_milli.at("*"), 32000);
  EXPECT_EQ(cfg->queues[0].max.cpu_milli.value(), 512000);
  EXPECT_EQ(cfg->queues[0].max.memory_mib.value(), 2048 * 1024);
  ASSERT_EQ(cfg->placement.size(), 2u);
  EXPECT_EQ(cfg->placement[0].tier.value(), Tier::kGuaranteed);
  EXPECT_EQ(cfg->placement[1].spread.size(), 2u);
  EXPECT_TRUE(cfg->proportional.set_requests);
  EXPECT_DOUBLE_EQ(cfg->idle_reclaim[0].idle_hours, 4);
}

TEST(QueuesTest, ReportsEveryErrorWithPathAndLine) {
  const auto cfg = parseSchedulingConfigString(R"(gpu_types:
  - {name: T4, rank: 1}
queues:
  - name: team-a
    guaranteed: {gpus: {A10: 4}}
    max: {gpus: {T4: -1}}
    colour: blue
  - name: team-a
placement:
  - queue: nowhere
    tier: 5
)");
  ASSERT_FALSE(cfg.ok());
  const std::string& m = cfg.status().message();
  EXPECT_NE(m.find("queues[0].guaranteed.gpus.A10 (line 5): unknown GPU type 'A10'"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("queues[0].max.gpus.T4 (line 6): must be in [0,"), std::string::npos) << m;
  EXPECT_NE(m.find("queues[0].colour (line 7): unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("queues[1].name (line 8): duplicate queue 'team-a'"), std::string::npos) << m;
  EXPECT_NE(m.find("placement[0].queue (line 10): unknown queue 'nowhere'"), std::string::npos)
      << m;
  EXPECT_NE(m.find("placement[0].tier (line 11): must be in [0, 2], got 5"), std::string::npos)
      << m;
}

TEST(QueuesTest, GuaranteedAboveMaxIsAnError) {
  const auto cfg = parseSchedulingConfigString(R"(queues:
  - name: a
    guaranteed: {gpus: {T4: 8}}
    max: {gpus: {T4: 4}}
)");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(
      cfg.status().message().find("queues[0].guaranteed (line 3): guaranteed T4 GPUs exceed max"),
      std::string::npos)
      << cfg.status().message();
}

// The max over all types ("*") bounds every type's guarantee and their sum (docs/scheduler.md:
// "guaranteed > max are errors"); a guarantee within it is accepted.
TEST(QueuesTest, GuaranteedAboveTheMaxOverAllTypesIsAnError) {
  const auto one = parseSchedulingConfigString(R"(queues:
  - name: a
    guaranteed: {gpus: {T4: 8}}
    max: {gpus: {"*": 4}}
)");
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("queues[0].guaranteed (line 3): guaranteed T4 GPUs (8) "
                                        "exceed the max over all types (max.gpus.\"*\": 4)"),
            std::string::npos)
      << one.status().message();
  const auto sum = parseSchedulingConfigString(R"(queues:
  - name: a
    guaranteed: {gpus: {T4: 3, A100: 2.5}}
    max: {gpus: {"*": 5, T4: 8}}
)");
  ASSERT_FALSE(sum.ok());
  EXPECT_NE(sum.status().message().find("queues[0].guaranteed (line 3): guaranteed GPUs of all "
                                        "types together (5.5) exceed the max over all types "
                                        "(max.gpus.\"*\": 5)"),
            std::string::npos)
      << sum.status().message();
  const auto star = parseSchedulingConfigString(R"(queues:
  - name: a
    guaranteed: {gpus: {"*": 6}}
    max: {gpus: {"*": 5}}
)");
  ASSERT_FALSE(star.ok());
  EXPECT_NE(star.status().message().find("guaranteed * GPUs exceed max"), std::string::npos)
      << star.status().message();
  const auto fits = parseSchedulingConfigString(R"(queues:
  - name: a
    guaranteed: {gpus: {T4: 3, A100: 2}}
    max: {gpus: {"*": 5}}
)");
  EXPECT_TRUE(fits.ok()) << fits.status().message();
}

TEST(QueuesTest, ValidatesTheShippedExamples) {
  const char* src = std::getenv("INFERA_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  for (const char* f : {"/examples/scheduler/queues.yaml"}) {
    const auto cfg = loadSchedulingConfigFile(std::string(src) + f);
    EXPECT_TRUE(cfg.ok()) << f << ": " << cfg.status().message();
  }
}

}  // namespace
}  // namespace infera::sched
