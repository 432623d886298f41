// Golden tests of the engine's rules on small hand-made clusters.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace infera::sched {
namespace {

NodeSpec gpuNode(const std::string& name, const std::string& model, int gpus,
                 int64_t cpu_milli = 64000, int64_t mem_mib = 256 * 1024) {
  NodeSpec n;
  n.name = name;
  n.gpu_model = model;
  n.gpus = gpus;
  n.cpu_milli = cpu_milli;
  n.memory_mib = mem_mib;
  return n;
}

PodSpec gpuPod(const std::string& name, int num_gpu, int gpu_milli = 1000, int64_t cpu = 1000,
               int64_t mem = 1024) {
  PodSpec p;
  p.name = name;
  p.num_gpu = num_gpu;
  p.gpu_milli = gpu_milli;
  p.cpu_milli = cpu;
  p.memory_mib = mem;
  return p;
}

std::unique_ptr<Scheduler> makeEngine(const std::vector<NodeSpec>& nodes,
                                      const std::string& yaml = "",
                                      const std::string& policy = "infera") {
  SchedulerConfig cfg;
  cfg.policy = policy;
  if (!yaml.empty()) {
    auto sc = parseSchedulingConfigString(yaml);
    EXPECT_TRUE(sc.ok()) << sc.status().message();
    if (sc.ok()) cfg.scheduling = *sc;
  }
  auto engine = Scheduler::create(cfg, nodes);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// Two queues sharing one 4-GPU node: team-a is guaranteed all 4 GPUs.
constexpr const char* kTwoQueues = R"(
queues:
  - name: org
    children:
      - name: team-a
        guaranteed: {gpus: {A10: 4}}
      - name: team-b
        max: {gpus: {"*": 4}}
)";

TEST(SchedulerTest, AssumeAccountsABoundPodOnItsNodeWithoutADecision) {
  auto engine = makeEngine({gpuNode("a", "A10", 4), gpuNode("b", "A10", 4)});
  auto held = engine->assume(gpuPod("running", 3), "b");
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_EQ(held->node_name, "b");
  EXPECT_EQ(engine->stats().gpu_milli_allocated, 3000);
  // The next decision sees it: a 2-GPU pod no longer fits on b.
  auto next = engine->schedule(gpuPod("next", 2));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->node_name, "a");
  EXPECT_EQ(engine->assume(gpuPod("x", 1), "nowhere").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine->assume(gpuPod("y", 2), "b").status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine->release(held->pod).isOk());
  EXPECT_EQ(engine->stats().gpu_milli_allocated, 2000);
}

TEST(SchedulerTest, StartsWithNoNodesAndTakesThemLater) {
  auto engine = makeEngine({});
  EXPECT_EQ(engine->schedule(gpuPod("p", 1)).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine->addNode(gpuNode("a", "A10", 4)).ok());
  EXPECT_TRUE(engine->schedule(gpuPod("p", 1)).ok());
}

TEST(SchedulerTest, PlacementRuleMatchesServiceAccount) {
  auto engine = makeEngine({gpuNode("a", "A10", 4)}, R"(
queues: [{name: batch, max: {gpus: {"*": 1}}}, {name: other}]
placement:
  - match: {service_account: runner}
    queue: batch
  - match: {}
    queue: other
)");
  PodSpec p = gpuPod("p", 1);
  p.service_account = "runner";
  auto placed = engine->schedule(p);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->queue, "batch");
  PodSpec q = gpuPod("q", 1);
  q.service_account = "runner";
  EXPECT_EQ(engine->schedule(q).status().code(), StatusCode::kFailedPrecondition);  // batch max 1
  PodSpec r = gpuPod("r", 1);
  auto other = engine->schedule(r);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->queue, "other");
}

TEST(SchedulerTest, RejectsUnknownPolicy) {
  SchedulerConfig cfg;
  cfg.policy = "nope";
  const auto engine = Scheduler::create(cfg, {gpuNode("n0", "A10", 4)});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
}

TEST(SchedulerTest, EveryPolicyPlacesAPodAndReleasesIt) {
  for (const auto& policy : policyNames()) {
    auto engine = makeEngine({gpuNode("n0", "A10", 2), gpuNode("n1", "T4", 4)}, "", policy);
    ASSERT_NE(engine, nullptr);
    const auto placed = engine->schedule(gpuPod("p", 2));
    ASSERT_TRUE(placed.ok()) << policy << ": " << placed.status().message();
    EXPECT_EQ(placed->gpu_indices.size(), 2u);
    EXPECT_EQ(engine->stats().gpu_milli_allocated, 2000);
    ASSERT_TRUE(engine->release(placed->pod).isOk());
    EXPECT_EQ(engine->stats().gpu_milli_allocated, 0);
  }
}

TEST(SchedulerTest, SharesOneGpuBetweenMilliGpuPods) {
  auto engine = makeEngine({gpuNode("n0", "T4", 1)});
  const auto a = engine->schedule(gpuPod("a", 1, 600));
  const auto b = engine->schedule(gpuPod("b", 1, 400));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->gpu_indices, b->gpu_indices);
  const auto c = engine->schedule(gpuPod("c", 1, 100));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
}

TEST(SchedulerTest, HonoursGpuTypeSet) {
  auto engine = makeEngine({gpuNode("t4", "T4", 8), gpuNode("v100", "V100M32", 8)});
  PodSpec p = gpuPod("p", 1);
  p.gpu_types = {"V100M16", "V100M32"};
  const auto placed = engine->schedule(p);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "v100");
  EXPECT_EQ(placed->gpu_type, "V100M32");
}

constexpr const char* kLadder = R"(
gpu_types:
  - {name: T4, rank: 1, cost: 0.35}
  - {name: A10, rank: 2, cost: 0.75}
  - {name: A100, rank: 3, cost: 3.0}
  - {name: H100, rank: 4, cost: 5.0}
)";

TEST(SchedulerTest, LadderPicksCheapestSufficientTypeThatFitsNow) {
  auto engine = makeEngine({gpuNode("h100", "H100", 8), gpuNode("a100", "A100", 1),
                            gpuNode("a10", "A10", 1), gpuNode("t4", "T4", 8)},
                           kLadder);
  PodSpec p = gpuPod("p", 1);
  p.min_gpu_type = "A10";  // "A10 or better"
  auto first = engine->schedule(p);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->gpu_type, "A10");  // T4 is cheaper but not sufficient
  p.name = "q";
  auto second = engine->schedule(p);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->gpu_type, "A100");  // A10 full: next cheapest that can place it now
  p.name = "r";
  auto third = engine->schedule(p);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->gpu_type, "H100");
}

TEST(SchedulerTest, ProportionalCpuMemoryRefusesPodThatWouldStrandGpus) {
  const std::string yaml = "proportional: {enabled: true, slack: 0.1, mode: check}\n";
  auto engine = makeEngine({gpuNode("n0", "A10", 4, 64000, 256 * 1024)}, yaml);
  // 1 of 4 GPUs may take 16 cores (+10%) and 64 GiB (+10%).
  const auto hog = engine->schedule(gpuPod("hog", 1, 1000, 8000, 250 * 1024));
  ASSERT_FALSE(hog.ok());
  EXPECT_EQ(hog.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(engine->schedule(gpuPod("fair", 1, 1000, 17000, 70 * 1024)).ok());
}

TEST(SchedulerTest, ProportionalSetModeSizesCpuAndMemoryToTheGpuShare) {
  const std::string yaml = "proportional: {enabled: true, mode: set}\n";
  auto engine = makeEngine({gpuNode("n0", "A10", 4, 64000, 256 * 1024)}, yaml);
  const auto placed = engine->schedule(gpuPod("p", 2, 1000, 1000, 1024));
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->cpu_milli, 32000);
  EXPECT_EQ(placed->memory_mib, 128 * 1024);
}

TEST(SchedulerTest, TierZeroReclaimsBorrowedQuota) {
  auto engine = makeEngine({gpuNode("n0", "A10", 4)}, kTwoQueues);
  // team-b borrows team-a's idle guarantee with best-effort pods.
  std::vector<PodId> borrowed;
  for (int i = 0; i < 4; ++i) {
    PodSpec p = gpuPod("b" + std::to_string(i), 1);
    p.queue = "org/team-b";
    p.tier = Tier::kBestEffort;
    p.creation_s = i;
    auto placed = engine->schedule(p, i);
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    borrowed.push_back(placed->pod);
  }
  PodSpec owner = gpuPod("a0", 2);
  owner.queue = "org/team-a";
  owner.tier = Tier::kGuaranteed;
  const auto placed = engine->schedule(owner, 10);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  ASSERT_EQ(placed->evicted.size(), 2u);  // minimal: exactly the 2 GPUs it needs
  for (const Eviction& e : placed->evicted) {
    EXPECT_NE(e.reason.find("borrowed quota reclaimed by tier-0 pod a0"), std::string::npos)
        << e.reason;
  }
}

TEST(SchedulerTest, QueueUsageListsUseAgainstGuaranteedAndMaxPerType) {
  auto engine = makeEngine({gpuNode("n0", "A10", 4)}, kTwoQueues);
  PodSpec p = gpuPod("b0", 3);
  p.queue = "org/team-b";
  p.tier = Tier::kBestEffort;
  ASSERT_TRUE(engine->schedule(p).ok());
  std::map<std::string, QueueUsage> by;
  for (const QueueUsage& u : engine->queueUsage()) by[u.queue + " " + u.gpu_type] = u;
  ASSERT_TRUE(by.count("org/team-a A10"));
  EXPECT_EQ(by["org/team-a A10"].guaranteed_milli, 4000);
  EXPECT_EQ(by["org/team-a A10"].used_milli, 0);
  EXPECT_EQ(by["org/team-a A10"].max_milli, -1);
  EXPECT_EQ(by["org/team-b *"].max_milli, 4000);
  EXPECT_EQ(by["org/team-b *"].used_milli, 3000);
  EXPECT_EQ(by["org/team-b A10"].used_milli, 3000);
  EXPECT_EQ(by["org/team-b A10"].guaranteed_milli, -1);
  EXPECT_EQ(by["org A10"].used_milli, 3000);  // the parent carries its children's use
  EXPECT_EQ(by.count("org/team-a *"), 0u);    // nothing used, no all-types quota
}

TEST(SchedulerTest, TierOneIsNeverPreempted) {
  auto engine = makeEngine({gpuNode("n0", "A10", 4)}, R"(
queues:
  - name: team-a
    guaranteed: {gpus: {A10: 2}}
  - name: team-b
)");
  // team-b tier-1 pods fill the shared part (4 - 2 reserved = 2 GPUs) ...
  for (int i = 0; i < 2; ++i) {
    PodSpec p = gpuPod("s" + std::to_string(i), 1);
    p.queue = "team-b";
    p.tier = Tier::kShared;
    ASSERT_TRUE(engine->schedule(p).ok());
  }
  // ... and cannot take the reserved guarantee.
  PodSpec extra = gpuPod("s2", 1);
  extra.queue = "team-b";
  extra.tier = Tier::kShared;
  const auto refused = engine->schedule(extra);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  // team-a's tier-0 pods get their 2 guaranteed GPUs without touching tier-1.
  for (int i = 0; i < 2; ++i) {
    PodSpec p = gpuPod("g" + std::to_string(i), 1);
    p.queue = "team-a";
    p.tier = Tier::kGuaranteed;
    const auto placed = engine->schedule(p);
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    EXPECT_TRUE(placed->evicted.empty());
  }
  // Over its guarantee, tier 0 is refused rather than preempting tier 1.
  PodSpec over = gpuPod("g2", 1);
  over.queue = "team-a";
  over.tier = Tier::kGuaranteed;
  EXPECT_FALSE(engine->schedule(over).ok());
  EXPECT_EQ(engine->stats().running_pods, 4);
}

// A "*" guarantee (any GPU type) is reserved against tier 1 as well: here 3 of the 4 GPUs (2 x A10,
// 2 x V100) are guaranteed to team-a in any type, so team-b's tier-1 pods get only one.
TEST(SchedulerTest, AnyTypeGuaranteesAreReservedAgainstTierOne) {
  auto engine = makeEngine({gpuNode("n0", "A10", 2), gpuNode("n1", "V100", 2)}, R"(
queues:
  - name: team-a
    guaranteed: {gpus: {"*": 3}}
  - name: team-b
)");
  PodSpec first = gpuPod("s0", 1);
  first.queue = "team-b";
  first.tier = Tier::kShared;
  ASSERT_TRUE(engine->schedule(first).ok());
  PodSpec second = gpuPod("s1", 1);
  second.queue = "team-b";
  second.tier = Tier::kShared;
  const auto refused = engine->schedule(second);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("reserved for guarantees"), std::string::npos)
      << refused.status().message();
  // team-a's tier-0 pods get all 3 guaranteed GPUs, of either type, without preempting.
  for (int i = 0; i < 3; ++i) {
    PodSpec p = gpuPod("g" + std::to_string(i), 1);
    p.queue = "team-a";
    p.tier = Tier::kGuaranteed;
    const auto placed = engine->schedule(p);
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    EXPECT_TRUE(placed->evicted.empty());
  }
  // Once team-a's guarantee is in use, nothing is reserved any more, but the cluster is full.
  EXPECT_EQ(engine->stats().running_pods, 4);
}

// A long-running engine reuses the slots of ended pods, and an ended pod's id stays unknown even
// after its slot holds another pod.
// Per-type and "*" guarantees side by side: the "*" part serves only types without their own
// guarantee, so A10 tier-0 use does not eat it, and it stays reserved against tier 1.
TEST(SchedulerTest, AnyTypeGuaranteeServesOtherTypesAndStaysReserved) {
  auto engine = makeEngine({gpuNode("n0", "A10", 4), gpuNode("n1", "V100", 4)}, R"(
queues:
  - name: team-a
    guaranteed: {gpus: {A10: 4, "*": 2}}
  - name: team-b
)");
  auto pod = [](const std::string& name, const std::string& type, const std::string& queue,
                Tier tier) {
    PodSpec p = gpuPod(name, 1);
    p.gpu_types = {type};
    p.queue = queue;
    p.tier = tier;
    return p;
  };
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        engine->schedule(pod("a" + std::to_string(i), "A10", "team-a", Tier::kGuaranteed)).ok());
  }
  // Tier 1 gets the V100s the "*" guarantee does not hold: 4 - 2.
  ASSERT_TRUE(engine->schedule(pod("s0", "V100", "team-b", Tier::kShared)).ok());
  ASSERT_TRUE(engine->schedule(pod("s1", "V100", "team-b", Tier::kShared)).ok());
  EXPECT_EQ(engine->schedule(pod("s2", "V100", "team-b", Tier::kShared)).status().code(),
            StatusCode::kFailedPrecondition);
  // The "*" guarantee is intact after 4 A10s at tier 0: two V100 tier-0 pods start at once.
  ASSERT_TRUE(engine->schedule(pod("v0", "V100", "team-a", Tier::kGuaranteed)).ok());
  ASSERT_TRUE(engine->schedule(pod("v1", "V100", "team-a", Tier::kGuaranteed)).ok());
  const auto over = engine->schedule(pod("v2", "V100", "team-a", Tier::kGuaranteed));
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("guaranteed GPUs"), std::string::npos)
      << over.status().message();
  EXPECT_EQ(engine->stats().running_pods, 8);
}

TEST(SchedulerTest, EndedPodIdsStayUnknownWhenTheirSlotIsReused) {
  auto engine = makeEngine({gpuNode("n0", "A10", 2)});
  const auto first = engine->schedule(gpuPod("first", 1));
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(engine->release(first->pod).isOk());
  const auto second = engine->schedule(gpuPod("second", 1));
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->pod, first->pod);
  EXPECT_EQ(static_cast<uint32_t>(second->pod), static_cast<uint32_t>(first->pod));  // same slot
  EXPECT_EQ(engine->release(first->pod).code(), StatusCode::kNotFound);
  EXPECT_EQ(engine->evict(first->pod, "stale").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine->stats().running_pods, 1);
  for (int i = 0; i < 1000; ++i) {  // churn: the engine keeps one slot per running pod
    const auto p = engine->schedule(gpuPod("churn", 1));
    ASSERT_TRUE(p.ok());
    ASSERT_LT(static_cast<uint32_t>(p->pod), 2u);  // never more slots than pods at once
    ASSERT_TRUE(engine->release(p->pod).isOk());
  }
  EXPECT_TRUE(engine->release(second->pod).isOk());
  EXPECT_EQ(engine->stats().running_pods, 0);
}

TEST(SchedulerTest, TierZeroNeverPreemptsTierOneEvenWhenNodeIsFull) {
  auto engine = makeEngine({gpuNode("n0", "A10", 2)});  // no queues: no reservation
  PodSpec shared = gpuPod("shared", 2);
  shared.tier = Tier::kShared;
  ASSERT_TRUE(engine->schedule(shared).ok());
  PodSpec urgent = gpuPod("urgent", 1);
  urgent.tier = Tier::kGuaranteed;
  const auto r = engine->schedule(urgent);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST(SchedulerTest, VictimOrderIsFewestGpusThenYoungest) {
  auto engine = makeEngine({gpuNode("n0", "A10", 4)});
  struct V {
    const char* name;
    int gpus;
    int64_t created;
  };
  // 4 GPUs: a 2-GPU pod (old), two 1-GPU pods (old and young).
  for (const V& v : {V{"big", 2, 1}, V{"old1", 1, 2}, V{"young1", 1, 5}}) {
    PodSpec p = gpuPod(v.name, v.gpus);
    p.tier = Tier::kBestEffort;
    p.creation_s = v.created;
    ASSERT_TRUE(engine->schedule(p, v.created).ok());
  }
  PodSpec filler = gpuPod("filler", 0);  // CPU-only, tier 1: never a victim
  ASSERT_TRUE(engine->schedule(filler).ok());
  // Needs 2 GPUs with none free: the 2-GPU pod alone or both 1-GPU pods would do; the minimal
  // set (fewest victims) wins.
  PodSpec urgent = gpuPod("urgent", 2);
  urgent.tier = Tier::kGuaranteed;
  auto r = engine->schedule(urgent, 10);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->evicted.size(), 1u);
  EXPECT_EQ(r->evicted[0].pod_name, "big");
  // Needs 1 GPU: among 1-GPU victims the youngest goes first.
  PodSpec urgent2 = gpuPod("urgent2", 1);
  urgent2.tier = Tier::kGuaranteed;
  r = engine->schedule(urgent2, 11);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->evicted.size(), 1u);
  EXPECT_EQ(r->evicted[0].pod_name, "young1");
  EXPECT_NE(r->evicted[0].reason.find("tier-2 pod preempted by tier-0 pod urgent2"),
            std::string::npos);
}

TEST(SchedulerTest, IdleReclaimEvictsOnlyPodsIdleLongEnough) {
  auto engine = makeEngine({gpuNode("n0", "A10", 4)}, R"(
idle_reclaim:
  - name: idle-notebooks
    match: {labels: {kind: notebook}}
    idle_hours: 4
    utilization_below: 0.05
)");
  PodSpec nb = gpuPod("nb", 1, 500);
  nb.labels["kind"] = "notebook";
  PodSpec busy = nb;
  busy.name = "busy";
  PodSpec train = gpuPod("train", 1);
  train.labels["kind"] = "training";
  const auto a = engine->schedule(nb);
  const auto b = engine->schedule(busy);
  const auto c = engine->schedule(train);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (int h = 0; h <= 5; ++h) {
    const int64_t t = h * 3600;
    engine->recordUtilization(a->pod, 0.01, t);
    engine->recordUtilization(b->pod, h == 3 ? 0.5 : 0.01, t);  // woke up at hour 3
    engine->recordUtilization(c->pod, 0.0, t);                  // no policy matches
  }
  const auto reclaimed = engine->reclaimIdle(5 * 3600);
  ASSERT_EQ(reclaimed.size(), 1u);
  EXPECT_EQ(reclaimed[0].pod_name, "nb");
  EXPECT_NE(reclaimed[0].reason.find("idle-notebooks"), std::string::npos);
  EXPECT_NE(reclaimed[0].reason.find("5.0 h"), std::string::npos);
  EXPECT_EQ(engine->stats().running_pods, 2);
}

TEST(SchedulerTest, PlacementRulesMapPodsToQueuesAndTiers) {
  auto engine = makeEngine({gpuNode("n0", "A10", 2)}, R"(
queues:
  - name: team-a
    max: {gpus: {"*": 1}}
placement:
  - match: {namespace: vision}
    queue: team-a
    tier: 2
)");
  PodSpec p = gpuPod("p", 1);
  p.ns = "vision";
  ASSERT_TRUE(engine->schedule(p).ok());
  p.name = "q";
  const auto r = engine->schedule(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("team-a: max GPU quota"), std::string::npos);
}

TEST(SchedulerTest, DecideDoesNotCommit) {
  auto engine = makeEngine({gpuNode("n0", "A10", 2)});
  const auto d = engine->decide(gpuPod("p", 2));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->node_name, "n0");
  EXPECT_EQ(engine->stats().gpu_milli_allocated, 0);
}

TEST(SchedulerTest, InferaKeepsEmptyNodesEmpty) {
  // One node half used, one empty: a 1-GPU pod goes to the used node.
  auto engine = makeEngine({gpuNode("a", "A10", 4), gpuNode("b", "A10", 4)});
  ASSERT_TRUE(engine->schedule(gpuPod("first", 2)).ok());
  const auto second = engine->schedule(gpuPod("second", 1));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(engine->stats().empty_gpu_nodes, 1);
}

TEST(SchedulerTest, RejectsMalformedPods) {
  auto engine = makeEngine({gpuNode("n0", "A10", 2)});
  EXPECT_EQ(engine->schedule(gpuPod("p", 2, 500)).status().code(), StatusCode::kInvalidArgument);
  PodSpec ladder = gpuPod("q", 1);
  ladder.min_gpu_type = "A10";  // no ladder configured
  EXPECT_EQ(engine->schedule(ladder).status().code(), StatusCode::kInvalidArgument);
}

// Four 8-GPU A10 nodes and one T4 node: n0 holds one 2-GPU pod, n1 two 2-GPU pods, n2 one 1-GPU
// pod, n3 is empty; every pod tier 2 and bound at t=0.
struct RepackCluster {
  std::unique_ptr<Scheduler> engine;
  std::map<std::string, PodId> ids;
};
RepackCluster repackCluster(Tier tier = Tier::kBestEffort) {
  RepackCluster c;
  c.engine = makeEngine({gpuNode("n0", "A10", 8), gpuNode("n1", "A10", 8), gpuNode("n2", "A10", 8),
                         gpuNode("n3", "A10", 8), gpuNode("t0", "T4", 8)});
  struct At {
    const char* pod;
    int gpus;
    const char* node;
  };
  for (const At& a : {At{"a", 2, "n0"}, At{"b", 2, "n1"}, At{"c", 2, "n1"}, At{"d", 1, "n2"}}) {
    PodSpec p = gpuPod(a.pod, a.gpus);
    p.tier = tier;
    auto held = c.engine->assume(p, a.node, 0);
    EXPECT_TRUE(held.ok()) << held.status().message();
    if (held.ok()) c.ids[a.pod] = held->pod;
  }
  return c;
}

TEST(SchedulerTest, RepackPlanEmptiesNodesFewestMovesFirstAndChangesNothing) {
  RepackCluster c = repackCluster();
  const ClusterStats before = c.engine->stats();
  RepackConfig cfg;
  cfg.max_moves = 1;
  cfg.min_age_s = 600;
  const RepackPlan one = c.engine->planRepack(cfg, 3600);
  // One move frees a node: n0 (its 2-GPU pod) or n2 (its 1-GPU pod); the one with less to move.
  ASSERT_EQ(one.moves.size(), 1u);
  EXPECT_EQ(one.moves[0].pod_name, "d");
  EXPECT_EQ(one.moves[0].from, "n2");
  // Never into the empty node (that only moves the hole) nor onto another GPU type.
  EXPECT_TRUE(one.moves[0].to == "n0" || one.moves[0].to == "n1") << one.moves[0].to;
  EXPECT_EQ(one.nodes_emptied, std::vector<std::string>{"n2"});
  EXPECT_EQ(one.gpu_milli_freed, 8000);
  EXPECT_NE(one.moves[0].reason.find("frees node n2 (8 GPUs)"), std::string::npos);
  // A plan commits nothing.
  const ClusterStats after = c.engine->stats();
  EXPECT_EQ(after.gpu_milli_allocated, before.gpu_milli_allocated);
  EXPECT_EQ(after.empty_gpu_nodes, before.empty_gpu_nodes);
  // Three moves: n2 and n0 come free (1 + 1 moves); n1 would need 2 more.
  cfg.max_moves = 3;
  const RepackPlan two = c.engine->planRepack(cfg, 3600);
  EXPECT_EQ(two.moves.size(), 2u);
  EXPECT_EQ(two.nodes_emptied.size(), 2u);
  // Stop at a target of empty nodes: n3 and t0 are two already.
  cfg.target_empty_nodes = 3;
  EXPECT_EQ(c.engine->planRepack(cfg, 3600).moves.size(), 1u);
  cfg.target_empty_nodes = 2;
  EXPECT_TRUE(c.engine->planRepack(cfg, 3600).moves.empty());
}

TEST(SchedulerTest, APlanLeavesLaterDecisionsAsTheyWouldHaveBeen) {
  // The same cluster twice (same seed); one makes a plan first. n1..n6 are in one state (4 of 8
  // GPUs used), so the plan's trial placement of n0's pod ties among them and draws from the
  // engine's generator, as the later 4-GPU decisions among them do (5 draws): those must not see
  // the plan's draw.
  auto make = [] {
    std::vector<NodeSpec> nodes;
    for (int n = 0; n < 8; ++n) nodes.push_back(gpuNode("n" + std::to_string(n), "A10", 8));
    auto engine = makeEngine(nodes);
    PodSpec a = gpuPod("a", 1);
    a.tier = Tier::kBestEffort;
    EXPECT_TRUE(engine->assume(a, "n0", 0).ok());
    for (int n = 1; n <= 6; ++n) {
      PodSpec p = gpuPod("b" + std::to_string(n), 4);
      p.tier = Tier::kShared;  // not movable: only n0 is a source
      EXPECT_TRUE(engine->assume(p, "n" + std::to_string(n), 0).ok());
    }
    return engine;
  };
  auto planned = make();
  auto plain = make();
  RepackConfig cfg;
  cfg.min_age_s = 0;
  ASSERT_EQ(planned->planRepack(cfg, 10).moves.size(), 1u);
  std::string a_nodes, b_nodes;
  for (int i = 0; i < 6; ++i) {
    const PodSpec p = gpuPod("next" + std::to_string(i), 4);
    const auto a = planned->schedule(p, 20);
    const auto b = plain->schedule(p, 20);
    ASSERT_TRUE(a.ok() && b.ok()) << i;
    a_nodes += a->node_name + " ";
    b_nodes += b->node_name + " ";
  }
  EXPECT_EQ(a_nodes, b_nodes);
}

TEST(SchedulerTest, MigratingAPlanFreesAWholeNodeForAnEightGpuPod) {
  RepackCluster c = repackCluster();
  // Fill the empty node: no 8-GPU pod fits any more.
  PodSpec filler = gpuPod("filler", 1);
  filler.tier = Tier::kShared;
  ASSERT_TRUE(c.engine->assume(filler, "n3", 0).ok());
  PodSpec big = gpuPod("big", 8);
  big.gpu_types = {"A10"};
  EXPECT_EQ(c.engine->decide(big).status().code(), StatusCode::kResourceExhausted);
  RepackConfig cfg;
  cfg.max_moves = 1;
  cfg.min_age_s = 0;
  const RepackPlan plan = c.engine->planRepack(cfg, 100);
  ASSERT_EQ(plan.moves.size(), 1u);
  for (const Migration& m : plan.moves) {
    auto moved = c.engine->migrate(m.pod, m.to_node, 100);
    ASSERT_TRUE(moved.ok()) << moved.status().message();
    EXPECT_EQ(moved->pod, m.pod);  // a migration keeps the pod's id
    EXPECT_EQ(moved->node_name, m.to);
  }
  EXPECT_EQ(c.engine->stats().empty_gpu_nodes, 2);  // t0 (T4) and the one just freed
  auto placed = c.engine->schedule(big);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, plan.nodes_emptied[0]);
  // The moved pod is still accounted: releasing it frees its GPU on its new node.
  ASSERT_TRUE(c.engine->release(plan.moves[0].pod).isOk());
}

TEST(SchedulerTest, RepackForAWaitingPodEmptiesOneNodeThatWouldHostIt) {
  RepackCluster c = repackCluster();
  PodSpec filler = gpuPod("filler", 1);
  ASSERT_TRUE(c.engine->assume(filler, "n3", 0).ok());  // no empty A10 node left
  RepackConfig cfg;
  cfg.max_moves = 10;
  cfg.min_age_s = 0;
  PodSpec want = gpuPod("want", 8);
  want.gpu_types = {"A10"};
  cfg.for_pod = want;
  const RepackPlan plan = c.engine->planRepack(cfg, 10);
  ASSERT_EQ(plan.nodes_emptied.size(), 1u);  // one node for one pod, though the budget allows more
  EXPECT_EQ(plan.nodes_emptied[0], "n2");    // the cheapest A10 node to free
  for (const Migration& m : plan.moves) EXPECT_NE(m.to, "t0");
  // Without the pod: as many nodes as the moves allow. n0, n1 and n2 hold 7 GPUs of pods, which
  // all fit beside the filler on n3: the three are emptied (in 4 moves, within the 10).
  cfg.for_pod.reset();
  const RepackPlan all = c.engine->planRepack(cfg, 10);
  EXPECT_EQ(all.nodes_emptied.size(), 3u);
  EXPECT_EQ(all.moves.size(), 4u);
  // A T4 pod already fits on the empty T4 node: nothing to do.
  want.gpu_types = {"T4"};
  cfg.for_pod = want;
  EXPECT_TRUE(c.engine->planRepack(cfg, 10).moves.empty());
  // More CPU than any node has: no node would host it, however empty.
  want.gpu_types = {"A10"};
  want.cpu_milli = 1'000'000;
  cfg.for_pod = want;
  EXPECT_TRUE(c.engine->planRepack(cfg, 10).moves.empty());
}

TEST(SchedulerTest, RepackMovesOnlyOldEnoughPreemptiblePodsOutsideTheirDisruptionBudgets) {
  RepackConfig cfg;
  cfg.max_moves = 10;
  cfg.min_age_s = 600;
  {
    RepackCluster c = repackCluster(Tier::kShared);  // tier 1: not preemptible
    EXPECT_TRUE(c.engine->planRepack(cfg, 3600).moves.empty());
    cfg.min_tier = Tier::kShared;  // the operator allows tier 1 to move
    EXPECT_FALSE(c.engine->planRepack(cfg, 3600).moves.empty());
    cfg.min_tier = Tier::kBestEffort;
  }
  RepackCluster c = repackCluster();
  EXPECT_TRUE(c.engine->planRepack(cfg, 599).moves.empty());  // every pod younger than 600 s
  // A budget protects d: n2 cannot come free, n0 and then n1 can.
  const PodId d = c.ids["d"];
  cfg.may_disrupt = [d](PodId id) { return id != d; };
  const RepackPlan plan = c.engine->planRepack(cfg, 3600);
  for (const Migration& m : plan.moves) {
    EXPECT_NE(m.pod, d);
    EXPECT_NE(m.to, "n3");
  }
  EXPECT_EQ(std::count(plan.nodes_emptied.begin(), plan.nodes_emptied.end(), "n2"), 0);
  EXPECT_FALSE(plan.nodes_emptied.empty());
}

TEST(SchedulerTest, RepackSkipsANodeWhosePodsCannotAllMoveAndUndoesItsTrials) {
  // n0: two 3-GPU pods; n1: one 4-GPU pod. Freeing n1 fails at once (2 GPUs free on n0); freeing
  // n0 moves the first 3-GPU pod to n1 on trial, then finds no room for the second: n0 is not
  // proposed and the trial is undone.
  auto engine = makeEngine({gpuNode("n0", "A10", 8), gpuNode("n1", "A10", 8)});
  for (const auto& [pod, gpus, node] :
       {std::tuple{"p1", 3, "n0"}, std::tuple{"p2", 3, "n0"}, std::tuple{"q", 4, "n1"}}) {
    PodSpec p = gpuPod(pod, gpus);
    p.tier = Tier::kBestEffort;
    ASSERT_TRUE(engine->assume(p, node, 0).ok());
  }
  RepackConfig cfg;
  cfg.min_age_s = 0;
  const RepackPlan plan = engine->planRepack(cfg, 10);
  EXPECT_TRUE(plan.moves.empty());
  EXPECT_EQ(plan.candidates, 2);
  // Nothing moved: n1 still has 4 GPUs free and n0 two.
  auto four = engine->schedule(gpuPod("four", 4));
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->node_name, "n1");
  auto two = engine->schedule(gpuPod("two", 2));
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->node_name, "n0");
  EXPECT_EQ(engine->stats().gpu_milli_allocated, 16000);
}

TEST(SchedulerTest, MigrateRefusesUnknownPodsBadTargetsOtherTypesAndFullNodes) {
  RepackCluster c = repackCluster();
  const PodId a = c.ids["a"];  // on n0 (node 0)
  EXPECT_EQ(c.engine->migrate(a + (1ull << 40), 1, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.engine->migrate(a, 0, 0).status().code(), StatusCode::kInvalidArgument);   // same
  EXPECT_EQ(c.engine->migrate(a, 99, 0).status().code(), StatusCode::kInvalidArgument);  // none
  EXPECT_EQ(c.engine->migrate(a, 4, 0).status().code(), StatusCode::kInvalidArgument);   // T4
  PodSpec full = gpuPod("full", 8);
  ASSERT_TRUE(c.engine->assume(full, "n3", 0).ok());
  EXPECT_EQ(c.engine->migrate(a, 3, 0).status().code(), StatusCode::kResourceExhausted);
  auto ok = c.engine->migrate(a, 1, 0);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->node_name, "n1");
  EXPECT_EQ(ok->gpu_indices.size(), 2u);
}

// --- node constraints: node selector, required node affinity, taints and tolerations ---------

NodeSpec labelled(NodeSpec n, std::map<std::string, std::string> labels,
                  std::vector<Taint> taints = {}) {
  n.labels = std::move(labels);
  n.taints = std::move(taints);
  return n;
}

TEST(SchedulerTest, NodeSelectorAndRequiredAffinityKeepAPodToMatchingNodes) {
  // Four nodes; the policy alone would choose by packing. Each constraint leaves one choice.
  auto engine = makeEngine({labelled(gpuNode("a", "A10", 8), {{"zone", "z1"}, {"rack", "7"}}),
                            labelled(gpuNode("b", "A10", 8), {{"zone", "z2"}, {"rack", "12"}}),
                            labelled(gpuNode("c", "A10", 8), {{"zone", "z3"}}),
                            labelled(gpuNode("d", "A10", 8), {{"zone", "z2"}, {"spot", "true"}})});
  PodSpec sel = gpuPod("sel", 1);
  sel.constraints.node_selector = {{"zone", "z2"}, {"rack", "12"}};
  auto placed = engine->schedule(sel);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "b");

  // Terms are ORed, requirements inside one ANDed; NotIn matches a node without the label.
  PodSpec aff = gpuPod("aff", 1);
  aff.constraints.required_terms = {
      NodeSelectorTerm{{{"zone", "In", {"z9"}}}, {}},
      NodeSelectorTerm{
          {{"zone", "In", {"z2", "z3"}}, {"spot", "NotIn", {"true"}}, {"rack", "DoesNotExist", {}}},
          {}}};
  placed = engine->schedule(aff);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "c");

  // Gt compares integers; matchFields names the node.
  PodSpec gt = gpuPod("gt", 1);
  gt.constraints.required_terms = {NodeSelectorTerm{{{"rack", "Gt", {"9"}}}, {}}};
  placed = engine->schedule(gt);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "b");
  PodSpec by_name = gpuPod("by-name", 1);
  by_name.constraints.required_terms = {NodeSelectorTerm{{}, {{"metadata.name", "In", {"d"}}}}};
  placed = engine->schedule(by_name);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "d");

  // Nothing matches: the reason says how many nodes the constraints excluded.
  PodSpec none = gpuPod("none", 1);
  none.constraints.node_selector = {{"zone", "z4"}};
  auto refused = engine->schedule(none);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("4 of 4 nodes excluded"), std::string::npos)
      << refused.status().message();
  // A matching node that is full: still refused, never placed elsewhere.
  PodSpec big = gpuPod("big", 8);
  big.constraints.node_selector = {{"zone", "z1"}};
  ASSERT_TRUE(engine->schedule(big).ok());
  PodSpec more = gpuPod("more", 1);
  more.constraints.node_selector = {{"zone", "z1"}};
  EXPECT_EQ(engine->schedule(more).status().code(), StatusCode::kResourceExhausted);
}

// --- inter-pod constraints: required pod (anti-)affinity and topology spread -----------------

PodSpec labelledPod(const std::string& name, int num_gpu, std::map<std::string, std::string> labels,
                    std::string ns = "default") {
  PodSpec p = gpuPod(name, num_gpu);
  p.labels = std::move(labels);
  p.ns = std::move(ns);
  return p;
}

PodAffinityTerm termFor(std::map<std::string, std::string> match, std::string key) {
  PodAffinityTerm t;
  t.selector.match_labels = std::move(match);
  t.topology_key = std::move(key);
  return t;
}

TEST(SchedulerTest, PodAntiAffinitySpreadsReplicasOneToANodeAndIsSymmetric) {
  // Four 8-GPU nodes in two zones: the packing policy alone would stack 1-GPU replicas on one.
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back(labelled(
        gpuNode("n" + std::to_string(i), "A10", 8),
        {{"kubernetes.io/hostname", "n" + std::to_string(i)}, {"zone", i < 2 ? "z1" : "z2"}}));
  }
  auto engine = makeEngine(nodes);
  std::set<std::string> used;
  for (int i = 0; i < 4; ++i) {
    PodSpec r = labelledPod("web-" + std::to_string(i), 1, {{"app", "web"}});
    r.pod_constraints.anti_affinity = {termFor({{"app", "web"}}, "kubernetes.io/hostname")};
    auto placed = engine->schedule(r);
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    EXPECT_TRUE(used.insert(placed->node_name).second) << "two replicas on " << placed->node_name;
  }
  // A fifth has no node left; the reason names the inter-pod constraints.
  PodSpec fifth = labelledPod("web-4", 1, {{"app", "web"}});
  fifth.pod_constraints.anti_affinity = {termFor({{"app", "web"}}, "kubernetes.io/hostname")};
  auto refused = engine->schedule(fifth);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("4 of 4 nodes ruled out by its pod affinity"),
            std::string::npos)
      << refused.status().message();
  // Symmetry: a pod without terms that the running replicas' anti-affinity selects is kept off
  // every node too; another label goes anywhere; the same label in another namespace too.
  EXPECT_EQ(engine->schedule(labelledPod("plain-web", 1, {{"app", "web"}})).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(engine->schedule(labelledPod("db", 1, {{"app", "db"}})).ok());
  EXPECT_TRUE(engine->schedule(labelledPod("web-other-ns", 1, {{"app", "web"}}, "other")).ok());
  // Zone anti-affinity: two zones, so a third pod of the group has no domain.
  auto zoned = makeEngine(nodes);
  std::set<std::string> zones;
  for (int i = 0; i < 3; ++i) {
    PodSpec r = labelledPod("z-" + std::to_string(i), 1, {{"app", "batch"}});
    r.pod_constraints.anti_affinity = {termFor({{"app", "batch"}}, "zone")};
    auto placed = zoned->schedule(r);
    if (i < 2) {
      ASSERT_TRUE(placed.ok()) << placed.status().message();
      zones.insert(placed->node_name < "n2" ? "z1" : "z2");
    } else {
      EXPECT_EQ(placed.status().code(), StatusCode::kResourceExhausted);
    }
  }
  EXPECT_EQ(zones.size(), 2u);
  // A released replica frees its node for the group again.
  auto again = makeEngine(nodes);
  PodSpec solo = labelledPod("solo", 8, {{"app", "solo"}});
  solo.pod_constraints.anti_affinity = {termFor({{"app", "solo"}}, "kubernetes.io/hostname")};
  std::vector<Placement> solos;
  for (int i = 0; i < 4; ++i) {
    solo.name = "solo-" + std::to_string(i);
    auto placed = again->schedule(solo);
    ASSERT_TRUE(placed.ok());
    solos.push_back(*placed);
  }
  // Every node is full now; freeing one (8 GPUs and its anti-affinity) lets the group back in.
  solo.name = "solo-4";
  EXPECT_FALSE(again->schedule(solo).ok());
  ASSERT_TRUE(again->release(solos[2].pod).isOk());
  auto placed = again->schedule(solo);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, solos[2].node_name);
}

TEST(SchedulerTest, PodAffinityCoLocatesAndTheFirstOfAGroupGoesAnywhere) {
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(labelled(gpuNode("n" + std::to_string(i), "A10", 8),
                             {{"kubernetes.io/hostname", "n" + std::to_string(i)}}));
  }
  nodes.push_back(gpuNode("unlabelled", "A10", 8));
  auto engine = makeEngine(nodes);
  // Cache pods fill n0 and n1 partly; the sidecar must land beside the "cache" pod on n1.
  ASSERT_TRUE(engine->assume(labelledPod("filler", 6, {{"app", "other"}}), "n0", 0).ok());
  ASSERT_TRUE(engine->assume(labelledPod("cache", 1, {{"app", "cache"}}), "n1", 0).ok());
  PodSpec side = labelledPod("side", 1, {{"app", "side"}});
  side.pod_constraints.affinity = {termFor({{"app", "cache"}}, "kubernetes.io/hostname")};
  auto placed = engine->schedule(side);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "n1");
  // Nothing selected and the term does not select the pod itself: nowhere.
  PodSpec lonely = labelledPod("lonely", 1, {{"app", "x"}});
  lonely.pod_constraints.affinity = {termFor({{"app", "missing"}}, "kubernetes.io/hostname")};
  EXPECT_EQ(engine->schedule(lonely).status().code(), StatusCode::kResourceExhausted);
  // The first of a group that selects itself goes anywhere; the second follows it.
  PodSpec g0 = labelledPod("g0", 1, {{"app", "group"}});
  g0.pod_constraints.affinity = {termFor({{"app", "group"}}, "kubernetes.io/hostname")};
  placed = engine->schedule(g0);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  const std::string first = placed->node_name;
  g0.name = "g1";
  placed = engine->schedule(g0);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, first);
  // A node without the topology key never satisfies an affinity term.
  EXPECT_NE(first, "unlabelled");
}

TEST(SchedulerTest, TopologySpreadKeepsZonesWithinTheSkew) {
  // Zone z1 has three nodes, z2 one: packing alone would fill z1 first.
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back(
        labelled(gpuNode("n" + std::to_string(i), "A10", 8), {{"zone", i < 3 ? "z1" : "z2"}}));
  }
  nodes.push_back(gpuNode("nozone", "A10", 8));
  auto engine = makeEngine(nodes);
  SpreadConstraint c;
  c.topology_key = "zone";
  c.selector.match_labels = {{"app", "api"}};
  std::map<std::string, int> per_zone;
  for (int i = 0; i < 8; ++i) {
    PodSpec p = labelledPod("api-" + std::to_string(i), 1, {{"app", "api"}});
    p.pod_constraints.spread = {c};
    auto placed = engine->schedule(p);
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    ASSERT_NE(placed->node_name, "nozone");  // no zone label: cannot be counted, never chosen
    ++per_zone[placed->node_name == "n3" ? "z2" : "z1"];
    EXPECT_LE(std::abs(per_zone["z1"] - per_zone["z2"]), 1) << "after " << i + 1 << " pods";
  }
  EXPECT_EQ(per_zone["z1"], 4);
  EXPECT_EQ(per_zone["z2"], 4);
  // z2's node full (a pod the selector does not pick, not counted): the next goes to z1 (a skew
  // of 1 is allowed), the one after cannot.
  ASSERT_TRUE(engine->assume(labelledPod("z2-filler", 4, {{"app", "other"}}), "n3", 0).ok());
  PodSpec p = labelledPod("api-8", 1, {{"app", "api"}});
  p.pod_constraints.spread = {c};
  auto in_z1 = engine->schedule(p);
  ASSERT_TRUE(in_z1.ok()) << in_z1.status().message();
  EXPECT_NE(in_z1->node_name, "n3");
  p.name = "api-9";
  auto over = engine->schedule(p);
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted) << over.ok();
  // max_skew 2 allows one more in z1.
  c.max_skew = 2;
  p.pod_constraints.spread = {c};
  EXPECT_TRUE(engine->schedule(p).ok());
  // An unsupported constraint is refused with its name, not placed.
  PodSpec odd = labelledPod("odd", 1, {});
  odd.pod_constraints.unsupported = "podAffinity namespaceSelector with labels";
  auto refused = engine->schedule(odd);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("namespaceSelector"), std::string::npos);
}

TEST(SchedulerTest, SpreadCountsTaintedDomainsHonoursMinDomainsAndAnEmptySelectorCountsNothing) {
  // z3's node has a NoSchedule taint the pods do not tolerate: it is still a domain (count 0), as
  // kube-scheduler's default nodeTaintsPolicy Ignore has it, so z1 and z2 stop at max_skew.
  auto engine = makeEngine(
      {labelled(gpuNode("n1", "A10", 8), {{"zone", "z1"}}),
       labelled(gpuNode("n2", "A10", 8), {{"zone", "z2"}}),
       labelled(gpuNode("n3", "A10", 8), {{"zone", "z3"}}, {{"maintenance", "", "NoSchedule"}})});
  SpreadConstraint c;
  c.topology_key = "zone";
  c.selector.match_labels = {{"app", "api"}};
  PodSpec p = labelledPod("api-0", 1, {{"app", "api"}});
  p.pod_constraints.spread = {c};
  ASSERT_TRUE(engine->schedule(p).ok());
  p.name = "api-1";
  ASSERT_TRUE(engine->schedule(p).ok());
  p.name = "api-2";  // z1 and z2 hold one each, z3 none: a second in either is a skew of 2
  EXPECT_EQ(engine->schedule(p).status().code(), StatusCode::kResourceExhausted);
  // An empty selector counts nothing: the constraint never refuses (nodes need the key only).
  SpreadConstraint any = c;
  any.selector = LabelSelector{};
  PodSpec q = labelledPod("any-0", 1, {{"app", "api"}});
  q.pod_constraints.spread = {any};
  EXPECT_TRUE(engine->schedule(q).ok());

  // min_domains: with fewer domains than that, the emptiest counts as 0, so one zone of two
  // nodes takes max_skew pods and no more.
  auto two = makeEngine({labelled(gpuNode("a", "A10", 8), {{"zone", "z1"}}),
                         labelled(gpuNode("b", "A10", 8), {{"zone", "z1"}})});
  SpreadConstraint md = c;
  md.min_domains = 2;
  PodSpec m = labelledPod("m-0", 1, {{"app", "api"}});
  m.pod_constraints.spread = {md};
  ASSERT_TRUE(two->schedule(m).ok());
  m.name = "m-1";
  EXPECT_EQ(two->schedule(m).status().code(), StatusCode::kResourceExhausted);
  m.pod_constraints.spread[0].min_domains = 1;  // one domain is its own minimum: no limit
  EXPECT_TRUE(two->schedule(m).ok());
}

TEST(SchedulerTest, SpreadSkipsTerminatingPodsAndCountsOnlyNodesWithEveryKey) {
  SpreadConstraint zone;
  zone.topology_key = "zone";
  zone.selector.match_labels = {{"app", "api"}};
  // Two pods being deleted in z2 hold their node but are not counted: z1 holds 1, z2 0, so the
  // next goes to z2 (counted, z2 would hold 2 and z1 would be the one to take it).
  auto engine = makeEngine({labelled(gpuNode("n1", "A10", 8), {{"zone", "z1"}}),
                            labelled(gpuNode("n2", "A10", 8), {{"zone", "z2"}})});
  ASSERT_TRUE(engine->assume(labelledPod("r", 1, {{"app", "api"}}), "n1", 0).ok());
  for (const char* name : {"t1", "t2"}) {
    PodSpec t = labelledPod(name, 1, {{"app", "api"}});
    t.terminating = true;
    ASSERT_TRUE(engine->assume(t, "n2", 0).ok());
  }
  PodSpec p = labelledPod("api-new", 1, {{"app", "api"}});
  p.pod_constraints.spread = {zone};
  auto placed = engine->decide(p);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "n2");
  // They still hold their GPUs: n2 has 6 free, not 8.
  EXPECT_EQ(engine->schedule(labelledPod("big", 7, {})).value().node_name, "n1");

  // Two constraints, zone and rack: a node without a rack label is not counted for either (as
  // kube-scheduler's PodTopologySpread counts), so the two api pods on n2 do not count for z2
  // and n3 (z2, rack r2) takes the next; n1 is full.
  SpreadConstraint rack = zone;
  rack.topology_key = "rack";
  rack.max_skew = 10;
  auto keys = makeEngine({labelled(gpuNode("n1", "A10", 8), {{"zone", "z1"}, {"rack", "r1"}}),
                          labelled(gpuNode("n2", "A10", 8), {{"zone", "z2"}}),
                          labelled(gpuNode("n3", "A10", 8), {{"zone", "z2"}, {"rack", "r2"}})});
  ASSERT_TRUE(keys->assume(labelledPod("fill", 8, {}), "n1", 0).ok());
  ASSERT_TRUE(keys->assume(labelledPod("a1", 1, {{"app", "api"}}), "n2", 0).ok());
  ASSERT_TRUE(keys->assume(labelledPod("a2", 1, {{"app", "api"}}), "n2", 0).ok());
  PodSpec both = labelledPod("api-both", 1, {{"app", "api"}});
  both.pod_constraints.spread = {zone, rack};
  auto on_n3 = keys->decide(both);
  ASSERT_TRUE(on_n3.ok()) << on_n3.status().message();
  EXPECT_EQ(on_n3->node_name, "n3");
  // With the zone constraint alone n2 counts: z2 holds 2, z1 0, and z2 is closed.
  PodSpec zone_only = labelledPod("api-zone", 1, {{"app", "api"}});
  zone_only.pod_constraints.spread = {zone};
  EXPECT_EQ(keys->decide(zone_only).status().code(), StatusCode::kResourceExhausted);
}

TEST(SchedulerTest, PreemptionNeverEvictsThePodAnAffinityTermNeeds) {
  // One 4-GPU node full of team-b's best-effort pods; team-a's tier-0 pod needs to be beside the
  // "cache" pod, itself one of them. The victims are chosen among the others.
  auto engine = makeEngine({labelled(gpuNode("n0", "A10", 4), {{"kubernetes.io/hostname", "n0"}})},
                           kTwoQueues);
  PodSpec cache = labelledPod("cache", 2, {{"app", "cache"}});
  cache.queue = "org/team-b";
  cache.tier = Tier::kBestEffort;
  cache.creation_s = 5;  // the youngest: the engine's first victim otherwise
  ASSERT_TRUE(engine->schedule(cache, 5).ok());
  for (int i = 0; i < 2; ++i) {
    PodSpec b = labelledPod("b" + std::to_string(i), 1, {{"app", "batch"}});
    b.queue = "org/team-b";
    b.tier = Tier::kBestEffort;
    b.creation_s = i;
    ASSERT_TRUE(engine->schedule(b, i).ok());
  }
  PodSpec owner = labelledPod("a0", 2, {{"app", "model"}});
  owner.queue = "org/team-a";
  owner.tier = Tier::kGuaranteed;
  owner.pod_constraints.affinity = {termFor({{"app", "cache"}}, "kubernetes.io/hostname")};
  auto placed = engine->schedule(owner, 10);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  ASSERT_EQ(placed->evicted.size(), 2u);
  for (const Eviction& e : placed->evicted) EXPECT_NE(e.pod_name, "cache");
}

TEST(SchedulerTest, PreemptionCountsTheVictimsGoingForAntiAffinity) {
  // As kube-scheduler's preemption: a node that tier-2 pods on it close by anti-affinity (the
  // preemptor's terms or theirs) opens when they are evicted; tier-1 pods, or pods on another
  // node of the domain, keep it closed.
  const auto host = [](const std::string& n, const std::string& zone) {
    return labelled(gpuNode(n, "A10", 4), {{"kubernetes.io/hostname", n}, {"zone", zone}});
  };
  const auto running = [](const std::string& name, int gpus, const std::string& app, Tier tier) {
    PodSpec p = labelledPod(name, gpus, {{"app", app}});
    p.queue = tier == Tier::kBestEffort ? "org/team-b" : "org/team-a";
    p.tier = tier;
    return p;
  };
  const auto urgent = [](int gpus, const std::string& key) {
    PodSpec p = labelledPod("urgent", gpus, {{"app", "web"}});
    p.queue = "org/team-a";
    p.tier = Tier::kGuaranteed;
    p.pod_constraints.anti_affinity = {termFor({{"app", "web"}}, key)};
    return p;
  };
  const auto evicted = [](const Placement& placed) {
    std::set<std::string> out;
    for (const Eviction& e : placed.evicted) out.insert(e.pod_name);
    return out;
  };
  {
    // n0 has room but a tier-2 replica; n1 a tier-1 one. Only n0 can be opened, by that pod.
    auto engine = makeEngine({host("n0", "z1"), host("n1", "z2")}, kTwoQueues);
    ASSERT_TRUE(engine->assume(running("web-old", 1, "web", Tier::kBestEffort), "n0").ok());
    ASSERT_TRUE(engine->assume(running("batch", 1, "batch", Tier::kBestEffort), "n0").ok());
    ASSERT_TRUE(engine->assume(running("web-shared", 1, "web", Tier::kShared), "n1").ok());
    auto placed = engine->schedule(urgent(1, "kubernetes.io/hostname"));
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    EXPECT_EQ(placed->node_name, "n0");
    EXPECT_EQ(evicted(*placed), std::set<std::string>{"web-old"});
  }
  {
    // A full node: the replica must go and, for a 2-GPU pod, one more; for a 1-GPU pod only it.
    for (const int gpus : {1, 2}) {
      auto engine = makeEngine({host("n0", "z1")}, kTwoQueues);
      ASSERT_TRUE(engine->assume(running("web-old", 1, "web", Tier::kBestEffort), "n0").ok());
      ASSERT_TRUE(engine->assume(running("filler", 3, "batch", Tier::kBestEffort), "n0").ok());
      auto placed = engine->schedule(urgent(gpus, "kubernetes.io/hostname"));
      ASSERT_TRUE(placed.ok()) << placed.status().message();
      const std::set<std::string> want =
          gpus == 1 ? std::set<std::string>{"web-old"} : std::set<std::string>{"web-old", "filler"};
      EXPECT_EQ(evicted(*placed), want);
    }
  }
  {
    // Symmetry: a running tier-2 pod whose own anti-affinity selects the preemptor is evicted.
    auto engine = makeEngine({host("n0", "z1")}, kTwoQueues);
    PodSpec guard = running("guard", 1, "guard", Tier::kBestEffort);
    guard.pod_constraints.anti_affinity = {termFor({{"app", "web"}}, "kubernetes.io/hostname")};
    ASSERT_TRUE(engine->assume(guard, "n0").ok());
    PodSpec plain = urgent(1, "kubernetes.io/hostname");
    plain.pod_constraints.anti_affinity.clear();
    auto placed = engine->schedule(plain);
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    EXPECT_EQ(evicted(*placed), std::set<std::string>{"guard"});
  }
  {
    // Zone terms: replicas on two nodes of z1 cannot both go by one node's preemption (victims
    // come from the chosen node only), and a tier-1 replica anywhere in the zone keeps it shut.
    auto engine = makeEngine({host("n0", "z1"), host("n1", "z1")}, kTwoQueues);
    ASSERT_TRUE(engine->assume(running("web-a", 1, "web", Tier::kBestEffort), "n0").ok());
    ASSERT_TRUE(engine->assume(running("web-b", 1, "web", Tier::kBestEffort), "n1").ok());
    EXPECT_EQ(engine->schedule(urgent(1, "zone")).status().code(), StatusCode::kResourceExhausted);
    // Per node, the same replicas are one victim each.
    auto placed = engine->schedule(urgent(1, "kubernetes.io/hostname"));
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    EXPECT_EQ(placed->evicted.size(), 1u);
  }
  {
    // A tier-1 pod closing the node: never preempted, the pod stays pending.
    auto engine = makeEngine({host("n0", "z1")}, kTwoQueues);
    ASSERT_TRUE(engine->assume(running("web-shared", 1, "web", Tier::kShared), "n0").ok());
    EXPECT_EQ(engine->schedule(urgent(1, "kubernetes.io/hostname")).status().code(),
              StatusCode::kResourceExhausted);
  }
}

WeightedPodTerm weighted(int weight, std::map<std::string, std::string> match, std::string key) {
  return {weight, termFor(std::move(match), std::move(key))};
}

TEST(SchedulerTest, PreferredNodeAffinityAndPreferNoScheduleLeadAndPackingDecidesAmongEquals) {
  auto engine = makeEngine({labelled(gpuNode("a", "A10", 4), {{"disk", "hdd"}}),
                            labelled(gpuNode("b", "A10", 4), {{"disk", "ssd"}}),
                            labelled(gpuNode("c", "A10", 4), {{"disk", "ssd"}})});
  ASSERT_TRUE(engine->assume(gpuPod("on-a", 1), "a").ok());
  ASSERT_TRUE(engine->assume(gpuPod("on-c", 1), "c").ok());
  // Packing alone: a or c (each has one GPU used), never the empty b.
  auto plain = engine->decide(gpuPod("plain", 2));
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(plain->node_name, "b");
  // Preferring ssd: b or c, and packing picks the used one, c.
  PodSpec ssd = gpuPod("ssd", 1);
  ssd.soft.node_affinity = {{10, NodeSelectorTerm{{{"disk", "In", {"ssd"}}}, {}}}};
  auto placed = engine->schedule(ssd);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "c");
  // Weights add up: a term for b (by name) outweighs the ssd term alone.
  PodSpec named = ssd;
  named.name = "named";
  named.soft.node_affinity.push_back({20, NodeSelectorTerm{{}, {{"metadata.name", "In", {"b"}}}}});
  placed = engine->schedule(named);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "b");
  // Soft: with the ssd nodes full the pod still goes, to a.
  ASSERT_TRUE(engine->assume(gpuPod("fill-b", 3), "b").ok());
  ASSERT_TRUE(engine->assume(gpuPod("fill-c", 2), "c").ok());
  ssd.name = "ssd-2";
  placed = engine->schedule(ssd);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "a");

  // PreferNoSchedule: packing would pick the used spot node; a pod that does not tolerate the
  // taint goes to the clean one; one that tolerates it (effect PreferNoSchedule or any effect)
  // is placed by packing; a toleration of another effect does not count.
  auto tainted =
      makeEngine({labelled(gpuNode("spot", "A10", 4), {}, {{"spot", "", "PreferNoSchedule"}}),
                  labelled(gpuNode("clean", "A10", 4), {})});
  PodSpec used = gpuPod("used", 1);
  used.constraints.tolerations = {{"spot", "Exists", "", ""}};
  ASSERT_TRUE(tainted->assume(used, "spot").ok());
  placed = tainted->decide(gpuPod("plain", 1));
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "clean");
  for (const std::string effect : {"PreferNoSchedule", ""}) {
    PodSpec tolerant = gpuPod("tolerant", 1);
    tolerant.constraints.tolerations = {{"spot", "Exists", "", effect}};
    placed = tainted->decide(tolerant);
    ASSERT_TRUE(placed.ok());
    EXPECT_EQ(placed->node_name, "spot") << effect;
  }
  PodSpec other = gpuPod("other-effect", 1);
  other.constraints.tolerations = {{"spot", "Exists", "", "NoSchedule"}};
  placed = tainted->decide(other);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "clean");
}

TEST(SchedulerTest, PreferredPodTermsSpreadReplicasAttractAndAreSymmetric) {
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(labelled(
        gpuNode("n" + std::to_string(i), "A10", 4),
        {{"kubernetes.io/hostname", "n" + std::to_string(i)}, {"zone", i < 2 ? "z1" : "z2"}}));
  }
  // Without terms, packing stacks four 1-GPU replicas on one node.
  {
    auto engine = makeEngine(nodes);
    std::set<std::string> used;
    for (int i = 0; i < 4; ++i) {
      auto placed =
          engine->schedule(labelledPod("plain-" + std::to_string(i), 1, {{"app", "web"}}));
      ASSERT_TRUE(placed.ok());
      used.insert(placed->node_name);
    }
    EXPECT_EQ(used.size(), 1u);
  }
  // Preferred anti-affinity by host: one per node, then two per node; never refused.
  auto engine = makeEngine(nodes);
  std::map<std::string, int> per_node;
  for (int i = 0; i < 6; ++i) {
    PodSpec r = labelledPod("web-" + std::to_string(i), 1, {{"app", "web"}});
    r.soft.anti_affinity = {weighted(100, {{"app", "web"}}, "kubernetes.io/hostname")};
    auto placed = engine->schedule(r);
    ASSERT_TRUE(placed.ok()) << placed.status().message();
    ++per_node[placed->node_name];
    if (i == 2) {
      EXPECT_EQ(per_node.size(), 3u);
    }
  }
  for (const auto& [n, k] : per_node) EXPECT_EQ(k, 2) << n;
  // Preferred affinity by zone: next to the cache in z2, though packing (best fit) prefers the
  // fuller node.
  auto attract = makeEngine(nodes, "", "best-fit");
  ASSERT_TRUE(attract->assume(labelledPod("fill", 2, {{"app", "batch"}}), "n0").ok());
  ASSERT_TRUE(attract->assume(labelledPod("cache", 1, {{"app", "cache"}}), "n2").ok());
  PodSpec near = labelledPod("near", 1, {{"app", "model"}});
  EXPECT_EQ(attract->decide(near)->node_name, "n0");  // packing alone
  near.soft.affinity = {weighted(50, {{"app", "cache"}}, "zone")};
  auto placed = attract->decide(near);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "n2");
  // ... in another namespace the term selects nothing, and packing decides.
  near.ns = "other";
  EXPECT_EQ(attract->decide(near)->node_name, "n0");
  // Symmetry: a running pod's preferred anti-affinity keeps a pod it selects off its node, and
  // its preferred affinity draws one.
  PodSpec guard = labelledPod("guard", 1, {{"app", "guard"}});
  guard.soft.anti_affinity = {weighted(50, {{"app", "noisy"}}, "kubernetes.io/hostname")};
  ASSERT_TRUE(attract->assume(guard, "n0").ok());
  EXPECT_NE(attract->decide(labelledPod("noisy", 1, {{"app", "noisy"}}))->node_name, "n0");
  EXPECT_EQ(attract->decide(labelledPod("quiet", 1, {{"app", "quiet"}}))->node_name, "n0");
  PodSpec host = labelledPod("host", 1, {{"app", "host"}});
  host.soft.affinity = {weighted(50, {{"app", "friend"}}, "kubernetes.io/hostname")};
  auto hosted = attract->assume(host, "n1");
  ASSERT_TRUE(hosted.ok());
  EXPECT_EQ(attract->decide(labelledPod("friend", 1, {{"app", "friend"}}))->node_name, "n1");
  // A running pod that goes takes its terms with it: packing decides again (n0 is the fullest).
  ASSERT_TRUE(attract->release(hosted->pod).isOk());
  EXPECT_EQ(attract->decide(labelledPod("friend", 1, {{"app", "friend"}}))->node_name, "n0");
  // A running pod's required affinity scores too, with weight 1 (hardPodAffinityWeight).
  PodSpec needs = labelledPod("needs", 1, {{"app", "needs"}});
  needs.pod_constraints.affinity = {termFor({{"app", "friend"}}, "kubernetes.io/hostname")};
  ASSERT_TRUE(attract->assume(needs, "n1").ok());
  EXPECT_EQ(attract->decide(labelledPod("friend", 1, {{"app", "friend"}}))->node_name, "n1");
}

TEST(SchedulerTest, ScheduleAnywaySpreadBalancesZonesAndNeverRefuses) {
  auto engine = makeEngine({labelled(gpuNode("n0", "A10", 4), {{"zone", "z1"}}),
                            labelled(gpuNode("n1", "A10", 4), {{"zone", "z1"}}),
                            labelled(gpuNode("n2", "A10", 4), {{"zone", "z2"}})});
  SpreadConstraint zone;
  zone.topology_key = "zone";
  zone.selector.match_labels = {{"app", "serve"}};
  std::map<std::string, int> per_zone;
  for (int i = 0; i < 5; ++i) {
    PodSpec p = labelledPod("serve-" + std::to_string(i), 2, {{"app", "serve"}});
    p.soft.spread = {zone};
    auto placed = engine->schedule(p);
    ASSERT_TRUE(placed.ok()) << i << ": " << placed.status().message();
    ++per_zone[placed->node_name == "n2" ? "z2" : "z1"];
    if (i == 3) {
      // Four placed: two per zone (packing alone would fill z1's nodes first).
      EXPECT_EQ(per_zone["z1"], 2);
      EXPECT_EQ(per_zone["z2"], 2);
    }
  }
  EXPECT_EQ(per_zone["z1"], 3);  // z2 is full: the fifth goes to z1, not refused
  // Terminating pods and other namespaces' pods are not counted.
  auto counts = makeEngine({labelled(gpuNode("n0", "A10", 8), {{"zone", "z1"}}),
                            labelled(gpuNode("n2", "A10", 8), {{"zone", "z2"}})});
  ASSERT_TRUE(counts->assume(labelledPod("live", 1, {{"app", "serve"}}), "n0").ok());
  for (int i = 0; i < 2; ++i) {
    PodSpec going = labelledPod("going-" + std::to_string(i), 1, {{"app", "serve"}});
    going.terminating = true;
    ASSERT_TRUE(counts->assume(going, "n2").ok());
    ASSERT_TRUE(
        counts
            ->assume(labelledPod("elsewhere-" + std::to_string(i), 1, {{"app", "serve"}}, "other"),
                     "n2")
            .ok());
  }
  PodSpec p = labelledPod("serve", 1, {{"app", "serve"}});
  p.soft.spread = {zone};
  auto placed = counts->decide(p);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "n2");
}

// A closed node (Kubernetes: cordoned or not Ready, with the node controllers' NoSchedule taint)
// keeps its pods in the engine: they count for their queue's quota and for other pods' inter-pod
// terms; it takes only pods that tolerate its taint; and it is left out of the shared pool, the
// stats and re-packing.
TEST(SchedulerTest, ClosedNodeCountsItsPodsAndTakesOnlyPodsThatTolerateItsTaint) {
  NodeSpec cordoned = labelled(gpuNode("cordoned", "A10", 4), {{"zone", "z1"}, {"pool", "maint"}},
                               {{"node.kubernetes.io/unschedulable", "", "NoSchedule"}});
  cordoned.closed = true;
  auto engine = makeEngine({cordoned, labelled(gpuNode("open", "A10", 4), {{"zone", "z1"}}),
                            labelled(gpuNode("open2", "A10", 4), {{"zone", "z2"}})},
                           R"(
queues: [{name: team, max: {gpus: {"*": 4}}}, {name: other}]
)");
  for (int i = 0; i < 3; ++i) {
    PodSpec p = labelledPod("x-" + std::to_string(i), 1, {{"app", "x"}});
    p.queue = "team";
    ASSERT_TRUE(engine->assume(p, "cordoned").ok());
  }
  // Their labels count: anti-affinity with app=x by zone keeps a pod out of z1.
  PodSpec apart = labelledPod("apart", 1, {});
  apart.queue = "other";
  apart.pod_constraints.anti_affinity = {termFor({{"app", "x"}}, "zone")};
  auto placed = engine->decide(apart);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "open2");
  // Their GPUs count for the queue: 3 of its 4.
  PodSpec two = gpuPod("two", 2);
  two.queue = "team";
  placed = engine->schedule(two);
  ASSERT_FALSE(placed.ok());
  EXPECT_NE(placed.status().message().find("max"), std::string::npos) << placed.status().message();
  PodSpec one = gpuPod("one", 1);
  one.queue = "team";
  placed = engine->schedule(one);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_NE(placed->node_name, "cordoned");
  // Re-packing neither empties it nor moves pods onto it.
  RepackConfig repack;
  repack.min_age_s = 0;
  repack.min_tier = Tier::kShared;
  const RepackPlan plan = engine->planRepack(repack, 0);
  EXPECT_TRUE(plan.moves.empty());
  // Stats are the open nodes': 8 GPUs, of which 1 is used.
  const ClusterStats s = engine->stats();
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.gpu_milli_capacity, 8000);
  EXPECT_EQ(s.gpu_milli_allocated, 1000);
  // A pod that tolerates the taint may go to the closed node; one that does not may not.
  PodSpec plain = gpuPod("plain", 1);
  plain.queue = "other";
  plain.constraints.node_selector = {{"pool", "maint"}};
  EXPECT_FALSE(engine->decide(plain).ok());
  PodSpec tolerant = plain;
  tolerant.name = "tolerant";
  tolerant.constraints.tolerations = {
      {"node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"}};
  placed = engine->decide(tolerant);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "cordoned");
  // The shared pool is the open nodes' 8 GPUs, of which 1 is used: 7 more fit (the 3 on the
  // closed node take none of it) ...
  PodSpec four = gpuPod("four", 4);
  four.queue = "other";
  placed = engine->schedule(four);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  PodSpec three = gpuPod("three", 3);
  three.queue = "other";
  placed = engine->schedule(three);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_NE(placed->node_name, "cordoned");
  // ... and then it is full, for the closed node's free GPUs too.
  placed = engine->decide(tolerant);
  ASSERT_FALSE(placed.ok());
  EXPECT_NE(placed.status().message().find("shared A10 pool exhausted"), std::string::npos)
      << placed.status().message();
}

// Inter-pod terms see exactly the running pods: pods that ended, and slots reused by pods with
// other labels, are never counted (the label index drops ended pods lazily).
TEST(SchedulerTest, InterPodTermsSeeOnlyRunningPodsAsPodsComeAndGo) {
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "n" + std::to_string(i);
    nodes.push_back(labelled(gpuNode(name, "A10", 8, 640000), {{"kubernetes.io/hostname", name}}));
  }
  nodes[2].taints = {{"hold", "", "NoSchedule"}};  // counted by spread, placed on by tolerators
  auto engine = makeEngine(nodes);
  std::vector<PodId> web;
  for (int i = 0; i < 10; ++i) {
    auto p = engine->assume(labelledPod("web-" + std::to_string(i), 0, {{"app", "web"}}), "n0");
    ASSERT_TRUE(p.ok()) << p.status().message();
    web.push_back(p->pod);
  }
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(engine->release(web[static_cast<size_t>(i)]).isOk());
  for (int i = 0; i < 9; ++i) {  // the freed slots, reused
    ASSERT_TRUE(
        engine->assume(labelledPod("db-" + std::to_string(i), 0, {{"app", "db"}}), "n1").ok());
  }
  auto only = [&](const std::string& node, const std::string& app) {
    PodSpec p = labelledPod("probe", 1, {{"app", "probe"}});
    p.constraints.node_selector = {{"kubernetes.io/hostname", node}};
    p.constraints.tolerations = {{"hold", "Exists", "", "NoSchedule"}};
    p.pod_constraints.anti_affinity = {termFor({{"app", app}}, "kubernetes.io/hostname")};
    return engine->decide(p).ok();
  };
  EXPECT_FALSE(only("n0", "web"));  // one web pod is left there
  EXPECT_TRUE(only("n1", "web"));   // the db pods in the web pods' old slots are not web
  EXPECT_FALSE(only("n1", "db"));
  EXPECT_TRUE(only("n2", "db"));
  ASSERT_TRUE(engine->release(web[9]).isOk());
  EXPECT_TRUE(only("n0", "web"));
  // A pod that ends while others with its label run, its slot then taken by a new pod with the
  // same label on another node: that pod counts once. Web pods: n0 4 (of 5, one ended), n1 the
  // new one, n2 1 (tainted); a web pod with a hostname spread of skew 1 may go to n1 only
  // (1 + 1 - 1 <= 1), which a second count of the new pod (2 + 1 - 1) would close.
  std::vector<PodId> five;
  for (int i = 0; i < 5; ++i) {
    auto p = engine->assume(labelledPod("w0-" + std::to_string(i), 0, {{"app", "web"}}), "n0");
    ASSERT_TRUE(p.ok());
    five.push_back(p->pod);
  }
  ASSERT_TRUE(engine->assume(labelledPod("w2", 0, {{"app", "web"}}), "n2").ok());
  ASSERT_TRUE(engine->release(five[4]).isOk());
  ASSERT_TRUE(engine->assume(labelledPod("w1", 0, {{"app", "web"}}), "n1").ok());
  PodSpec spread = labelledPod("spread", 1, {{"app", "web"}});
  SpreadConstraint by_host;
  by_host.topology_key = "kubernetes.io/hostname";
  by_host.selector.match_labels = {{"app", "web"}};
  spread.pod_constraints.spread = {by_host};
  auto placed = engine->decide(spread);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "n1");
  // Soft terms read the same: a preferred affinity to db pods draws a pod to n1.
  PodSpec near = labelledPod("near", 1, {{"app", "near"}});
  near.soft.affinity = {{50, termFor({{"app", "db"}}, "kubernetes.io/hostname")}};
  placed = engine->decide(near);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "n1");
  // Running pods' preferred terms the same: an ended holder's term is not read again, though its
  // slot now holds another holder with a term under the same label pair (A: 40 on n0, ended;
  // C: 30 on n1, in A's slot; D: 50 on n0), nor counted twice.
  auto holder = [&](const std::string& name, int weight, const std::string& node) {
    PodSpec h = labelledPod(name, 0, {{"app", "holder"}});
    h.soft.affinity = {{weight, termFor({{"app", "friend"}}, "kubernetes.io/hostname")}};
    return engine->assume(h, node);
  };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(holder("e" + std::to_string(i), 1, "n2").ok());
  auto a = holder("a", 40, "n0");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(engine->release(a->pod).isOk());
  ASSERT_TRUE(holder("c", 30, "n1").ok());
  ASSERT_TRUE(holder("d", 50, "n0").ok());
  placed = engine->decide(labelledPod("friend", 1, {{"app", "friend"}}));
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "n0");
  // A term without matchLabels (an expression only) is read for every pod.
  auto guard = [&](const std::string& name, const std::string& keeps_out, const std::string& node) {
    PodSpec g = labelledPod(name, 0, {{"app", "guard"}});
    PodAffinityTerm t;
    t.selector.match_expressions = {{"app", "In", {keeps_out}}};
    t.topology_key = "kubernetes.io/hostname";
    g.soft.anti_affinity = {{100, t}};
    return engine->assume(g, node);
  };
  ASSERT_TRUE(guard("g1", "x1", "n1").ok());
  ASSERT_TRUE(guard("g0", "x0", "n0").ok());
  EXPECT_EQ(engine->decide(labelledPod("x1", 1, {{"app", "x1"}}))->node_name, "n0");
  EXPECT_EQ(engine->decide(labelledPod("x0", 1, {{"app", "x0"}}))->node_name, "n1");
}

// A pod with more topology keys than the engine caches (64): every key is read while the pod's
// decision lasts (under the asan preset, a cache emptied midway is a use after free).
TEST(SchedulerTest, SpreadOverManyTopologyKeysIsScored) {
  std::map<std::string, std::string> labels;
  for (int k = 0; k < 70; ++k) labels["k" + std::to_string(k)] = "v";
  NodeSpec a = labelled(gpuNode("a", "A10", 4), labels);
  a.labels["zone"] = "z1";
  NodeSpec b = labelled(gpuNode("b", "A10", 4), labels);
  b.labels["zone"] = "z2";
  auto engine = makeEngine({a, b});
  ASSERT_TRUE(engine->assume(labelledPod("web-0", 1, {{"app", "web"}}), "a").ok());
  PodSpec p = labelledPod("web-1", 1, {{"app", "web"}});
  for (int k = 0; k < 70; ++k) {
    SpreadConstraint c;
    c.topology_key = "k" + std::to_string(k);
    c.selector.match_labels = {{"app", "web"}};
    p.soft.spread.push_back(c);
  }
  SpreadConstraint zone;
  zone.topology_key = "zone";
  zone.selector.match_labels = {{"app", "web"}};
  p.soft.spread.push_back(zone);
  auto placed = engine->decide(p);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "b");  // the zone without a web pod
}

TEST(SchedulerTest, TaintsKeepPodsOffUnlessTolerated) {
  auto engine =
      makeEngine({labelled(gpuNode("tainted", "A10", 8), {}, {{"gpu", "reserved", "NoSchedule"}}),
                  labelled(gpuNode("execute", "A10", 8), {}, {{"maintenance", "", "NoExecute"}}),
                  labelled(gpuNode("soft", "A10", 8), {}, {{"spot", "true", "PreferNoSchedule"}}),
                  // A control plane without GPUs: never counted against a GPU pod.
                  labelled(gpuNode("control", "", 0), {},
                           {{"node-role.kubernetes.io/control-plane", "", "NoSchedule"}})});
  // Without tolerations only the soft-tainted node is left, whatever the policy prefers.
  for (int i = 0; i < 8; ++i) {
    auto p = engine->schedule(gpuPod("plain-" + std::to_string(i), 1));
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->node_name, "soft");
  }
  const Status full = engine->schedule(gpuPod("plain-9", 1)).status();
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("(2 of 3 nodes excluded"), std::string::npos) << full.message();
  // Equal needs the value; Exists any value; an empty key with Exists tolerates everything; an
  // effect given must be the taint's.
  PodSpec wrong_value = gpuPod("wrong-value", 1);
  wrong_value.constraints.tolerations = {{"gpu", "Equal", "other", "NoSchedule"}};
  EXPECT_FALSE(engine->schedule(wrong_value).ok());
  PodSpec wrong_effect = gpuPod("wrong-effect", 1);
  wrong_effect.constraints.tolerations = {{"gpu", "Exists", "", "NoExecute"}};
  EXPECT_FALSE(engine->schedule(wrong_effect).ok());
  PodSpec equal = gpuPod("equal", 4);
  equal.constraints.tolerations = {{"gpu", "Equal", "reserved", "NoSchedule"}};
  auto placed = engine->schedule(equal);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "tainted");
  PodSpec exists = gpuPod("exists", 8);
  exists.constraints.tolerations = {{"maintenance", "Exists", "", ""}};
  placed = engine->schedule(exists);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "execute");
  PodSpec all = gpuPod("all", 4);
  all.constraints.tolerations = {{"", "Exists", "", ""}};
  placed = engine->schedule(all);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->node_name, "tainted");
}

TEST(SchedulerTest, ConstraintsHoldForPreemptionMigrationAndNodesThatJoinLater) {
  auto engine = makeEngine({labelled(gpuNode("a", "A10", 4), {{"pool", "x"}}),
                            labelled(gpuNode("b", "A10", 4), {{"pool", "y"}})},
                           kTwoQueues);
  // Best-effort pods fill both nodes; a tier-0 pod pinned to pool y preempts on b only.
  for (const char* n : {"a", "b"}) {
    PodSpec filler = gpuPod(std::string("filler-") + n, 4);
    filler.tier = Tier::kBestEffort;
    filler.constraints.node_selector = {{"pool", n[0] == 'a' ? "x" : "y"}};
    ASSERT_TRUE(engine->schedule(filler).ok());
  }
  PodSpec urgent = gpuPod("urgent", 2);
  urgent.queue = "org/team-a";
  urgent.tier = Tier::kGuaranteed;
  urgent.constraints.node_selector = {{"pool", "y"}};
  auto placed = engine->schedule(urgent);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "b");
  ASSERT_EQ(placed->evicted.size(), 1u);
  EXPECT_EQ(placed->evicted[0].pod_name, "filler-b");
  // The pinned pod cannot be migrated off its pool.
  // A node that joins later is judged by the same constraint.
  ASSERT_TRUE(engine->addNode(labelled(gpuNode("c", "A10", 4), {{"pool", "y"}})).ok());
  EXPECT_EQ(engine->migrate(placed->pod, 0, 0).status().code(), StatusCode::kInvalidArgument);
  auto moved = engine->migrate(placed->pod, 2, 0);
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  EXPECT_EQ(moved->node_name, "c");
  PodSpec later = gpuPod("later", 4);
  later.constraints.node_selector = {{"pool", "y"}};
  placed = engine->schedule(later);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->node_name, "b");
}

TEST(SchedulerTest, AMalformedTermMatchesNothingAsInKubeScheduler) {
  // kube-scheduler skips a term that does not parse; the pod's other terms still count. Every
  // requirement below would match node a (label k=5) if it were read loosely.
  auto engine = makeEngine({labelled(gpuNode("a", "A10", 4), {{"k", "5"}})});
  const std::vector<std::pair<NodeSelectorRequirement, bool>> malformed = {
      {{"k", "Near", {"5"}}, false},          // unknown operator
      {{"k", "In", {}}, false},               // In without values
      {{"k", "Exists", {"5"}}, false},        // Exists with values
      {{"k", "Gt", {"1.5"}}, false},          // Gt needs one integer
      {{"k", "Lt", {"9", "10"}}, false},      // ... exactly one
      {{"metadata.uid", "In", {"a"}}, true},  // fields: only metadata.name
      {{"metadata.name", "Exists", {}}, true},
      {{"metadata.name", "In", {"a", "b"}}, true},  // ... with one value
  };
  for (const auto& [req, field] : malformed) {
    PodSpec p = gpuPod("p-" + req.key + "-" + req.op, 1);
    NodeSelectorTerm bad;
    (field ? bad.match_fields : bad.match_expressions).push_back(req);
    p.constraints.required_terms = {bad};
    EXPECT_EQ(engine->schedule(p).status().code(), StatusCode::kResourceExhausted)
        << req.key << " " << req.op;
    p.constraints.required_terms.push_back(NodeSelectorTerm{{{"k", "In", {"5"}}}, {}});
    auto placed = engine->schedule(p);
    ASSERT_TRUE(placed.ok()) << req.key << " " << req.op << ": " << placed.status().message();
    ASSERT_TRUE(engine->release(placed->pod).isOk());
  }
  // A pod already running with such a term is accounted where it is.
  PodSpec running = gpuPod("running", 2);
  running.constraints.required_terms = {NodeSelectorTerm{{{"k", "Gt", {"x"}}}, {}}};
  ASSERT_TRUE(engine->assume(running, "a").ok());
  EXPECT_EQ(engine->stats().gpu_milli_allocated, 2000);
}

TEST(SchedulerTest, ManyDistinctConstraintsArePlacedRightAsTheEngineForgetsUnheldOnes) {
  // One pod per node pinned by name (a DaemonSet's pattern), 1,200 distinct constraints in all:
  // the engine forgets those no running pod holds past 256 and reuses their slots, and every
  // placement is still the pinned node.
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 40; ++i) nodes.push_back(gpuNode("n" + std::to_string(i), "A10", 1));
  auto engine = makeEngine(nodes);
  for (int round = 0; round < 30; ++round) {
    std::vector<PodId> ids;
    for (int i = 0; i < 40; ++i) {
      PodSpec p = gpuPod("pin-" + std::to_string(round) + "-" + std::to_string(i), 1);
      p.constraints.required_terms = {NodeSelectorTerm{
          {}, {{"metadata.name", "In", {"n" + std::to_string((i + round) % 40)}}}}};
      p.constraints.tolerations = {{"round", "Equal", std::to_string(round), ""}};
      auto placed = engine->schedule(p);
      ASSERT_TRUE(placed.ok()) << placed.status().message();
      EXPECT_EQ(placed->node_name, "n" + std::to_string((i + round) % 40));
      ids.push_back(placed->pod);
    }
    for (const PodId id : ids) ASSERT_TRUE(engine->release(id).isOk());
  }
  EXPECT_EQ(engine->stats().gpu_milli_allocated, 0);
}

}  // namespace
}  // namespace infera::sched
