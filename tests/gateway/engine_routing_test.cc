// Engine-aware routing's parts: reading an engine's metrics, the prompt's block hashes, the prefix
// index and the scorer.
#include "gateway/internal/engine_routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace infera::gateway {
namespace {

// As a vLLM V1 server exposes them (names, label order and number format from real captures).
constexpr std::string_view kVllm =
    R"(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4219
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2097152.0
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.7438593e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql-lora,chat",waiting_lora_adapters="x\"y"} 1.7438594e+09
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
)";

TEST(EngineMetrics, ReadsVllmsQueueKvUsageAndTheCurrentAdapters) {
  EngineSample s;
  ASSERT_TRUE(parseEngineMetrics(kVllm, s));
  EXPECT_EQ(s.running, 4);
  EXPECT_EQ(s.waiting, 3);
  EXPECT_DOUBLE_EQ(s.kv_usage, 0.4219);
  EXPECT_EQ(s.loras, (std::vector<std::string>{"sql-lora", "chat", "x\"y"}));
}

TEST(EngineMetrics, SumsSeveralSeriesAndReadsOlderNamesAndTriton) {
  EngineSample s;
  ASSERT_TRUE(
      parseEngineMetrics("vllm:num_requests_running{engine=\"0\"} 2\n"
                         "vllm:num_requests_running{engine=\"1\"} 3\r\n"
                         "vllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\n"
                         "vllm:gpu_cache_usage_perc{engine=\"1\"} 0.75\n",
                         s));
  EXPECT_EQ(s.running, 5);
  EXPECT_EQ(s.kv_usage, 0.75);
  ASSERT_TRUE(parseEngineMetrics(
      "nv_inference_pending_request_count{model=\"resnet\",version=\"1\"} 7 1700000000000\n", s));
  EXPECT_EQ(s.waiting, 7);
  EXPECT_EQ(s.kv_usage, -1);  // not exposed
}

TEST(EngineMetrics, MalformedOrMissingSignalsAreUnknownNeverIdle) {
  EngineSample s;
  // No queue metric at all: a text that says nothing of load is not an idle engine.
  EXPECT_FALSE(parseEngineMetrics("", s));
  EXPECT_FALSE(parseEngineMetrics("# only comments\nother_metric 1\n", s));
  EXPECT_FALSE(parseEngineMetrics("<html>502 Bad Gateway</html>", s));
  EXPECT_FALSE(parseEngineMetrics("vllm:num_requests_waiting NaN\n", s));
  EXPECT_FALSE(parseEngineMetrics("vllm:num_requests_waiting -1\n", s));
  EXPECT_FALSE(parseEngineMetrics("vllm:num_requests_waiting 1e400\n", s));
  EXPECT_FALSE(parseEngineMetrics("vllm:num_requests_waiting{engine=\"0\" 3\n", s));
  EXPECT_FALSE(parseEngineMetrics("vllm:num_requests_waiting{engine=\"0} 3\n", s));
  EXPECT_FALSE(parseEngineMetrics("vllm:num_requests_waiting 3x\n", s));
  EXPECT_FALSE(parseEngineMetrics("vllm:num_requests_waiting\n", s));
}

simdjson::dom::element parse(simdjson::dom::parser& p, const std::string& json) {
  simdjson::dom::element e;
  EXPECT_EQ(p.parse(json).get(e), simdjson::SUCCESS);
  return e;
}

std::vector<uint64_t> blocksOf(const std::string& json, size_t block = 16, size_t max = 64) {
  simdjson::dom::parser p;
  std::vector<uint64_t> out(max);
  out.resize(promptBlockHashes(parse(p, json), block, out));
  return out;
}

TEST(PromptBlocks, EqualPrefixesShareLeadingBlocksAndOnlyThose) {
  const std::string system = std::string(100, 'S');
  auto chat = [&](const std::string& question) {
    return R"({"messages":[{"role":"system","content":")" + system +
           R"("},{"role":"user","content":")" + question + R"("}]})";
  };
  const auto a = blocksOf(chat(std::string(40, 'a')));
  const auto b = blocksOf(chat(std::string(40, 'b')));
  // "system\n" + 100 + "\n" = 108 bytes: the first 6 blocks of 16 hold only the system message.
  ASSERT_EQ(a.size(), (108 + 5 + 40 + 1) / 16);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(a[i], b[i]) << i;
  for (size_t i = 7; i < a.size(); ++i) EXPECT_NE(a[i], b[i]) << i;
  // The role is part of the prompt; content parts read as the same text.
  EXPECT_NE(blocksOf(R"({"messages":[{"role":"user","content":")" + system + R"("}]})")[0],
            blocksOf(R"({"messages":[{"role":"tool","content":")" + system + R"("}]})")[0]);
  EXPECT_EQ(blocksOf(R"({"messages":[{"role":"user","content":")" + system + R"("}]})"),
            blocksOf(R"({"messages":[{"role":"user","content":[{"type":"text","text":")" + system +
                     R"("}]}]})"));
  // Completions and embeddings: the prompt / input text.
  EXPECT_EQ(blocksOf(R"({"prompt":")" + system + R"("})"),
            blocksOf(R"({"input":")" + system + R"("})"));
}

TEST(PromptBlocks, AnyPromptHashesAtMostTheBlocksAsked) {
  const std::string huge = R"({"prompt":")" + std::string(1 << 20, 'x') + R"("})";
  EXPECT_EQ(blocksOf(huge, 64, 256).size(), 256u);
  EXPECT_EQ(blocksOf(R"({"prompt":"short"})", 64, 256).size(), 0u);  // no full block
  EXPECT_EQ(blocksOf(R"({"model":"m"})").size(), 0u);
}

TEST(PrefixIndex, MatchesEachSlotsLeadingBlocks) {
  PrefixIndex index(1024);
  const std::vector<uint64_t> a = {11, 12, 13, 14};
  const std::vector<uint64_t> b = {11, 12, 23};
  index.record(a, 0, 1);
  index.record(b, 5, 2);
  uint16_t matched[64];
  index.match(std::vector<uint64_t>{11, 12, 13, 99}, (1u << 0) | (1u << 5) | (1u << 7), matched);
  EXPECT_EQ(matched[0], 3);
  EXPECT_EQ(matched[5], 2);
  EXPECT_EQ(matched[7], 0);
  index.match(a, 1u << 0, matched);
  EXPECT_EQ(matched[0], 4);
  EXPECT_EQ(index.overwrites(), 0u);
}

TEST(PrefixIndex, ATableFullOverwritesItsOldestEntriesAndCountsThem) {
  PrefixIndex index(4);  // one probe window
  ASSERT_EQ(index.capacity(), 4u);
  index.record(std::vector<uint64_t>{100, 101, 102, 103}, 1, 1);
  index.record(std::vector<uint64_t>{100}, 1, 5);  // refreshed
  index.record(std::vector<uint64_t>{104}, 2, 6);
  EXPECT_EQ(index.overwrites(), 1u);
  uint16_t matched[64];
  index.match(std::vector<uint64_t>{100}, 1u << 1, matched);
  EXPECT_EQ(matched[1], 1);  // the refreshed entry stayed
  index.match(std::vector<uint64_t>{104}, 1u << 2, matched);
  EXPECT_EQ(matched[2], 1);
}

TEST(PrefixIndex, SlotsAreStablePerEndpointAndBounded) {
  PrefixIndex index(1024);
  EXPECT_EQ(index.slotFor("d|a"), 0);
  EXPECT_EQ(index.slotFor("d|b"), 1);
  EXPECT_EQ(index.slotFor("d|a"), 0);
  for (int i = 2; i < 64; ++i) EXPECT_EQ(index.slotFor("d|" + std::to_string(i)), i);
  EXPECT_EQ(index.slotFor("d|one too many"), -1);
}

EngineCandidate known(uint32_t index, int slot, double load, double kv = 0) {
  EngineCandidate c;
  c.index = index;
  c.slot = slot;
  c.known = true;
  c.load = load;
  c.waiting = load;
  c.kv_usage = kv;
  return c;
}

TEST(EngineScorer, ThePrefixHolderWinsAtEqualLoadAndTheQueueDecidesWithout) {
  EngineRoutingConfig cfg;
  std::mt19937_64 rng(1);
  uint16_t matched[64] = {};
  matched[1] = 10;
  const std::vector<EngineCandidate> c = {known(0, 0, 3), known(1, 1, 3), known(2, 2, 0)};
  // Prefix 3 x 10/10 beats the idle endpoint's whole queue score (2).
  auto choice = pickEngineCandidate(cfg, c, matched, 10, rng);
  EXPECT_EQ(choice.position, 1);
  EXPECT_EQ(choice.matched, 10);
  // Without a prompt prefix the least loaded wins.
  choice = pickEngineCandidate(cfg, c, matched, 0, rng);
  EXPECT_EQ(choice.position, 2);
  // A short shared prefix (2 of 10 blocks) does not outweigh a queue.
  matched[1] = 2;
  EXPECT_EQ(pickEngineCandidate(cfg, c, matched, 10, rng).position, 2);
}

TEST(EngineScorer, AnEngineWithUnknownSignalsIsNeverTakenForIdle) {
  EngineRoutingConfig cfg;
  std::mt19937_64 rng(1);
  uint16_t matched[64] = {};
  EngineCandidate unknown;
  unknown.index = 0;
  const std::vector<EngineCandidate> c = {unknown, known(1, -1, 40, 0.9)};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(pickEngineCandidate(cfg, c, matched, 0, rng).position, 1);
  // Only unknown ones: still a choice (spread at random).
  const std::vector<EngineCandidate> all_unknown = {unknown, unknown};
  std::map<int, int> seen;
  for (int i = 0; i < 200; ++i)
    ++seen[pickEngineCandidate(cfg, all_unknown, matched, 0, rng).position];
  EXPECT_GT(seen[0], 50);
  EXPECT_GT(seen[1], 50);
}

TEST(EngineScorer, SaturatedEnginesAreFilteredWhileAnotherHasRoom) {
  EngineRoutingConfig cfg;
  cfg.max_waiting = 8;
  cfg.max_kv_usage = 0.95;
  std::mt19937_64 rng(1);
  uint16_t matched[64] = {};
  matched[0] = 10;
  std::vector<EngineCandidate> c = {known(0, 0, 9), known(1, 1, 2, 0.99), known(2, 2, 5)};
  auto choice = pickEngineCandidate(cfg, c, matched, 10, rng);
  EXPECT_EQ(choice.position, 2);  // 0 waits too long, 1's cache is full: 2 despite no prefix
  EXPECT_FALSE(choice.filtered);
  c[2] = known(2, 2, 50);
  choice = pickEngineCandidate(cfg, c, matched, 10, rng);
  EXPECT_TRUE(choice.filtered);  // all past a filter: the scores decide among all
  EXPECT_EQ(choice.position, 0);
}

TEST(EngineScorer, AdapterAndSessionScorersPickTheirEndpoint) {
  EngineRoutingConfig cfg;
  cfg.session_weight = 10;
  std::mt19937_64 rng(1);
  uint16_t matched[64] = {};
  std::vector<EngineCandidate> c = {known(0, 0, 1), known(1, 1, 1), known(2, 2, 1)};
  c[2].lora = true;
  EXPECT_EQ(pickEngineCandidate(cfg, c, matched, 0, rng).position, 2);
  c[0].session = 5;
  c[1].session = 9;
  c[2].session = 7;
  EXPECT_EQ(pickEngineCandidate(cfg, c, matched, 0, rng).position, 1);
}

TEST(EngineScorer, RoundRobinTakesTheEndpointsTheFiltersLeaveInTurn) {
  EngineRoutingConfig cfg;
  cfg.pick = EnginePick::kRoundRobin;
  cfg.max_waiting = 8;
  std::mt19937_64 rng(1);
  std::atomic<uint64_t> turn{0};
  uint16_t matched[64] = {};
  std::vector<EngineCandidate> c = {known(0, 0, 1), known(1, 1, 9), known(2, 2, 1), known(3, 3, 0)};
  std::vector<int> order;
  for (int i = 0; i < 6; ++i)
    order.push_back(pickEngineCandidate(cfg, c, matched, 0, rng, &turn).position);
  EXPECT_EQ(order, (std::vector<int>{0, 2, 3, 0, 2, 3}));  // 1 waits past max_waiting
  c[0] = known(0, 0, 20);
  c[2] = known(2, 2, 20);
  c[3] = known(3, 3, 20);
  order.clear();  // all past the filter: all take turns
  for (int i = 0; i < 4; ++i)
    order.push_back(pickEngineCandidate(cfg, c, matched, 0, rng, &turn).position);
  std::sort(order.begin(), order.end());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(EngineScorer, RandomSpreadsOverTheEndpointsWhateverTheirSignals) {
  // policy: random zeroes every weight (config.cc): every candidate ties.
  EngineRoutingConfig cfg;
  cfg.pick = EnginePick::kRandom;
  cfg.prefix_weight = cfg.queue_weight = cfg.kv_weight = cfg.lora_weight = 0;
  std::mt19937_64 rng(7);
  uint16_t matched[64] = {};
  matched[0] = 10;
  const std::vector<EngineCandidate> c = {known(0, 0, 30, 0.9), known(1, 1, 0), known(2, 2, 5)};
  std::map<int, int> seen;
  for (int i = 0; i < 600; ++i) ++seen[pickEngineCandidate(cfg, c, matched, 10, rng).position];
  for (int i = 0; i < 3; ++i) EXPECT_GT(seen[i], 150) << i;
}

std::vector<std::string> drain(FlowQueue& q, std::map<FlowQueue::Waiter*, std::string>& names) {
  std::vector<std::string> order;
  while (FlowQueue::Waiter* w = q.popNext()) order.push_back(names[w]);
  return order;
}

TEST(FlowQueue, TheMostUrgentGoesFirstThenArrivalOrder) {
  FlowQueue q;
  std::map<FlowQueue::Waiter*, std::string> names;
  FlowQueue::Waiter b1, s1, c1, b2;
  b1.priority = b2.priority = Priority::kBatch;
  c1.priority = Priority::kCritical;
  for (auto [w, n] : {std::pair{&b1, "b1"}, {&s1, "s1"}, {&c1, "c1"}, {&b2, "b2"}}) {
    names[w] = n;
    q.push(w);
  }
  EXPECT_EQ(q.count(Priority::kBatch), 2u);
  FlowQueue::Waiter standard, sheddable;
  sheddable.priority = Priority::kSheddable;
  EXPECT_EQ(q.shedFor(standard), &b2);       // a less urgent waiter makes room for the newcomer
  EXPECT_EQ(q.shedFor(sheddable), nullptr);  // the newcomer is the least urgent
  EXPECT_EQ(drain(q, names), (std::vector<std::string>{"c1", "s1", "b1", "b2"}));
}

TEST(FlowQueue, AFullQueueShedsTheHeavyTeamsNewestNotALightNewcomer) {
  FlowQueue q;
  FlowQueue::Waiter h[4], light, heavy_new;
  for (auto& w : h) {
    w.key = "heavy";
    w.cost = 2000;
    q.push(&w);
  }
  // The heavy team has been served: two of its waiters went.
  ASSERT_EQ(q.popNext(), &h[0]);
  ASSERT_EQ(q.popNext(), &h[1]);
  light.key = "light";
  light.cost = 50;
  EXPECT_EQ(q.shedFor(light), &h[3]);  // the heavy team's newest goes, not the light newcomer
  heavy_new.key = "heavy";
  heavy_new.cost = 2000;
  EXPECT_EQ(q.shedFor(heavy_new), nullptr);  // a heavy newcomer is itself the last to serve
  // Equal shares so far, but the heavy team has a backlog: its newest would be served last.
  FlowQueue fresh;
  FlowQueue::Waiter backlog[3], newcomer;
  for (auto& w : backlog) {
    w.key = "heavy";
    w.cost = 100;
    fresh.push(&w);
  }
  newcomer.key = "light";
  newcomer.cost = 100;
  EXPECT_EQ(fresh.shedFor(newcomer), &backlog[2]);
  // Without fairness keys the newest is shed: the newcomer.
  FlowQueue plain;
  FlowQueue::Waiter a, b, c;
  plain.push(&a);
  plain.push(&b);
  EXPECT_EQ(plain.shedFor(c), nullptr);
}

TEST(FlowQueue, TeamsShareByTokensNotByRequests) {
  FlowQueue q;
  std::map<FlowQueue::Waiter*, std::string> names;
  FlowQueue::Waiter h[4], l[2];
  for (int i = 0; i < 4; ++i) {
    h[i].key = "heavy";
    h[i].cost = 1000;
    names[&h[i]] = "h" + std::to_string(i + 1);
    q.push(&h[i]);
  }
  for (int i = 0; i < 2; ++i) {
    l[i].key = "light";
    l[i].cost = 10;
    names[&l[i]] = "l" + std::to_string(i + 1);
    q.push(&l[i]);
  }
  // Both of the light team's short requests go before the heavy team's second long one.
  EXPECT_EQ(drain(q, names), (std::vector<std::string>{"h1", "l1", "l2", "h2", "h3", "h4"}));
}

TEST(FlowQueue, ATeamBackAfterAPauseGetsNoCreditForIt) {
  FlowQueue q;
  std::map<FlowQueue::Waiter*, std::string> names;
  FlowQueue::Waiter a[5], b[3];
  for (int i = 0; i < 5; ++i) {
    a[i].key = "a";
    a[i].cost = 1000;
    names[&a[i]] = "a" + std::to_string(i + 1);
  }
  for (int i = 0; i < 3; ++i) {
    b[i].key = "b";
    b[i].cost = 1000;
    names[&b[i]] = "b" + std::to_string(i + 1);
  }
  for (int i = 0; i < 3; ++i) {  // a alone: served 3000
    q.push(&a[i]);
    ASSERT_EQ(q.popNext(), &a[i]);
  }
  q.push(&a[3]);
  // b starts at the queue's virtual time (where a's last request started, 2000), not 3000 tokens
  // behind a: one request of b goes first, then they alternate by tokens.
  for (auto& w : b) q.push(&w);
  q.push(&a[4]);
  EXPECT_EQ(drain(q, names), (std::vector<std::string>{"b1", "a4", "b2", "b3", "a5"}));
  // A new key starts at the virtual time (4000, where a's last request started), not at 0: it
  // goes before b (5000 served) once, not for five requests.
  FlowQueue::Waiter b4, c1;
  b4.key = "b";
  c1.key = "c";
  b4.cost = c1.cost = 1000;
  names[&b4] = "b4";
  names[&c1] = "c1";
  q.push(&b4);
  q.push(&c1);
  EXPECT_EQ(drain(q, names), (std::vector<std::string>{"c1", "b4"}));
}

}  // namespace
}  // namespace infera::gateway
