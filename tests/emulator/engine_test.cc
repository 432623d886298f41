// The engine model on its virtual clock: what a vLLM engine does with a prompt's prefix, a full
// cache, a burst and LoRA adapters, step by step and without sockets.
#include "emulator/internal/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace infera::emulator {
namespace {

// Token ids that no other call with another seed produces.
std::vector<uint32_t> tokens(int n, uint32_t seed) {
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(seed * 1'000'000u + static_cast<uint32_t>(i));
  return out;
}

std::vector<uint32_t> concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Drives the model the way the emulator's step loop does, on a virtual clock.
struct Driver {
  explicit Driver(const EngineConfig& c) : model(c) {}
  EngineModel model;
  int64_t now = 0;
  int steps = 0;
  std::map<uint64_t, int64_t> arrival, first_token, finished;
  std::map<uint64_t, int> produced;

  uint64_t add(std::vector<uint32_t> prompt, int max_tokens, int lora = 0) {
    const uint64_t id = model.add(std::move(prompt), max_tokens, lora, now);
    arrival[id] = now;
    return id;
  }
  // One step; false when nothing could run.
  bool step() {
    const int64_t d = model.schedule(now);
    if (d == 0) return false;
    now += d;
    ++steps;
    std::vector<StepOutput> out;
    model.complete(now, out);
    for (const auto& o : out) {
      if (o.token) {
        if (++produced[o.id] == 1) first_token[o.id] = now;
        EXPECT_EQ(o.num_output, produced[o.id]);
      }
      if (o.finished) {
        EXPECT_EQ(finished.count(o.id), 0u) << "finished twice";
        finished[o.id] = now;
      }
    }
    return true;
  }
  void runIdle() {
    for (int i = 0; i < 1'000'000 && model.hasWork(); ++i) ASSERT_TRUE(step());
    ASSERT_FALSE(model.hasWork());
  }
  int64_t ttft(uint64_t id) { return first_token.at(id) - arrival.at(id); }
  // TTFT of a request run alone on the idle engine.
  int64_t ttftAlone(std::vector<uint32_t> prompt) {
    const uint64_t id = add(std::move(prompt), 2);
    runIdle();
    return ttft(id);
  }
};

int64_t stepUs(const EngineConfig& c, int prefill) {
  return std::llround((c.step_base_ms + c.prefill_ms_per_token * prefill) * 1000.0);
}

EngineConfig profile() {
  EngineConfig c;
  c.enabled = true;
  c.num_gpu_blocks = 2048;
  return c;
}

TEST(EngineModel, TimeToFirstTokenGrowsWithUncachedPromptTokensAndNotWithCachedOnes) {
  const EngineConfig c = profile();
  Driver d(c);
  const auto p1 = tokens(1024, 1);
  const auto p2 = tokens(2048, 2);
  // Fresh prompts: one step each (within max_num_batched_tokens), time by their length.
  EXPECT_EQ(d.ttftAlone(p1), stepUs(c, 1024));
  EXPECT_EQ(d.ttftAlone(p2), stepUs(c, 2048));
  EXPECT_EQ(d.ttftAlone(tokens(1056, 3)), stepUs(c, 1056));
  // The same 32 new tokens after a cached 1024- or 2048-token prefix: the same time, and far
  // less than computing the whole prompt.
  const int64_t after_1k = d.ttftAlone(concat(p1, tokens(32, 4)));
  const int64_t after_2k = d.ttftAlone(concat(p2, tokens(32, 5)));
  EXPECT_EQ(after_1k, stepUs(c, 32));
  EXPECT_EQ(after_2k, after_1k);
  EXPECT_LT(after_1k * 3, stepUs(c, 1056));
}

TEST(EngineModel, ARepeatedPrefixHitsAndIsCountedInTokensAsVllmCountsIt) {
  const EngineConfig c = profile();
  Driver d(c);
  const auto p = tokens(1024, 1);
  d.ttftAlone(p);
  EXPECT_EQ(d.model.counters().prefix_queries, 1024u);
  EXPECT_EQ(d.model.counters().prefix_hits, 0u);
  d.ttftAlone(concat(p, tokens(40, 2)));  // 64 cached blocks, then 40 new tokens
  EXPECT_EQ(d.model.counters().prefix_queries, 1024u + 1064u);
  EXPECT_EQ(d.model.counters().prefix_hits, 1024u);
  // The very same prompt again: at least one token is computed, and hits are whole blocks, so
  // the last block (16 tokens) is recomputed.
  d.ttftAlone(p);
  EXPECT_EQ(d.model.counters().prefix_hits, 1024u + 1008u);
  // Another adapter's blocks are other content: no hit.
  const uint64_t id = d.add(p, 2, /*lora=*/1);
  d.runIdle();
  EXPECT_EQ(d.ttft(id), stepUs(c, 1024) + std::llround(c.lora_load_ms * 1000));
  EXPECT_EQ(d.model.counters().prefix_hits, 1024u + 1008u);
}

TEST(EngineModel, AFullCacheEvictsTheLeastRecentlyUsedBlocksTailFirst) {
  EngineConfig c = profile();
  c.block_size = 4;
  c.num_gpu_blocks = 12;
  c.max_model_len = 48;
  Driver d(c);
  d.model.enableEvents(100);
  const auto x = tokens(8, 1), y = tokens(8, 2), z = tokens(8, 3);
  auto hashes = [](const std::vector<uint32_t>& t) {
    const BlockHash h1 = blockHash(0, 0, t.data(), 4);
    return std::pair{h1, blockHash(h1, 0, t.data() + 4, 4)};
  };
  const auto [x1, x2] = hashes(x);
  const auto [y1, y2] = hashes(y);
  const auto [z1, z2] = hashes(z);
  for (const auto* t : {&x, &y, &z}) {
    d.add(*t, 1);
    d.runIdle();
  }
  for (BlockHash h : {x1, x2, y1, y2, z1, z2}) EXPECT_TRUE(d.model.isCached(h));
  EXPECT_EQ(d.model.kvUsage(), 0.0);  // cached but free
  // x is used again: its first block is hit (the second is recomputed into a private block).
  d.add(x, 1);
  d.runIdle();
  EXPECT_EQ(d.model.counters().prefix_hits, 4u);
  // A 32-token prompt needs 8 of the 12 blocks: the 5 never used go first, then the least
  // recently used cached blocks, a request's last block before its first: x's second (not hit
  // above), then all of y. z, used after y, and x's first block, hit last, stay.
  d.model.takeEvents();
  d.add(tokens(32, 4), 1);
  d.runIdle();
  EXPECT_EQ(d.model.counters().evictions, 3u);
  EXPECT_FALSE(d.model.isCached(x2));
  EXPECT_FALSE(d.model.isCached(y1));
  EXPECT_FALSE(d.model.isCached(y2));
  EXPECT_TRUE(d.model.isCached(x1));
  EXPECT_TRUE(d.model.isCached(z1));
  EXPECT_TRUE(d.model.isCached(z2));
  // The events say the same, in order: the three removals, then the new prompt's 8 blocks.
  const auto events = d.model.takeEvents();
  ASSERT_EQ(events.size(), 11u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(events[0].hash, x2);
  EXPECT_EQ(events[1].hash, y2);
  EXPECT_EQ(events[2].hash, y1);
  for (size_t i = 3; i < events.size(); ++i) EXPECT_EQ(events[i].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(events[3].parent, 0u);
  EXPECT_EQ(events[4].parent, events[3].hash);
}

TEST(EngineModel, ABurstPastCapacityQueuesThenPreemptsAndRecomputesAndEveryRequestFinishes) {
  EngineConfig c = profile();
  c.num_gpu_blocks = 64;  // 1024 tokens
  c.max_model_len = 1024;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 512;
  Driver d(c);
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < 20; ++i) ids.push_back(d.add(tokens(100, i + 1), 200));
  ASSERT_TRUE(d.step());
  // The step's budget admits five 100-token prompts and a 12-token chunk of the sixth.
  EXPECT_EQ(d.model.numRunning(), 6);
  EXPECT_EQ(d.model.numWaiting(), 14);
  int max_running = 0;
  while (d.model.hasWork()) {
    ASSERT_TRUE(d.step());
    max_running = std::max(max_running, d.model.numRunning());
    ASSERT_LE(d.model.kvUsage(), 1.0);
  }
  EXPECT_EQ(max_running, 8);
  // Eight sequences of up to 300 tokens need 150 blocks: the cache (64) preempts.
  EXPECT_GT(d.model.counters().preemptions, 0u);
  for (uint64_t id : ids) {
    EXPECT_EQ(d.produced[id], 200) << id;
    EXPECT_EQ(d.finished.count(id), 1u) << id;
  }
  EXPECT_EQ(d.model.counters().generation_tokens, 20u * 200u);
  // Prefix counters leave the re-admissions of preempted requests out.
  EXPECT_EQ(d.model.counters().prefix_queries, 20u * 100u);
  EXPECT_EQ(d.model.kvUsage(), 0.0);
  // Requests queued behind the first eight waited: later arrivals' first tokens came later.
  EXPECT_LT(d.ttft(ids[0]), d.ttft(ids[19]));
}

TEST(EngineModel, ALongPromptIsPrefilledInChunksWhileRunningSequencesKeepDecoding) {
  EngineConfig c = profile();
  c.max_num_batched_tokens = 512;
  Driver d(c);
  const uint64_t small = d.add(tokens(10, 1), 100);
  ASSERT_TRUE(d.step());
  EXPECT_EQ(d.produced[small], 1);
  const uint64_t big = d.add(tokens(2000, 2), 5);
  // Each step: one decode token for `small`, 511 prompt tokens for `big`: 2000 tokens take four.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(d.step());
    EXPECT_EQ(d.produced[big], 0);
    EXPECT_EQ(d.produced[small], 2 + i);
  }
  ASSERT_TRUE(d.step());
  EXPECT_EQ(d.produced[big], 1);
  EXPECT_EQ(d.produced[small], 5);
  d.runIdle();
  EXPECT_EQ(d.produced[small], 100);
}

TEST(EngineModel, ARequestForAnAdapterWithoutASlotWaitsAndLoadingCostsItsTime) {
  EngineConfig c = profile();
  c.max_loras = 1;
  c.lora_load_ms = 20;
  Driver d(c);
  const uint64_t a = d.add(tokens(16, 1), 3, 1);
  const uint64_t b = d.add(tokens(16, 2), 3, 2);
  const uint64_t base = d.add(tokens(16, 3), 3, 0);
  ASSERT_TRUE(d.step());
  // One slot: adapter 2 waits (vLLM's "deferred"), the base model does not need a slot.
  EXPECT_EQ(d.model.numRunning(), 2);
  EXPECT_EQ(d.model.numDeferred(), 1);
  EXPECT_EQ(d.model.waitingLoras(), std::vector<int>{2});
  EXPECT_EQ(d.model.runningLoras(), std::vector<int>{1});
  d.runIdle();
  EXPECT_GT(d.first_token[b], d.finished[a]);
  EXPECT_LT(d.first_token[base], d.first_token[b]);
  EXPECT_EQ(d.model.counters().lora_loads, 2u);
  // The first step computed 32 prompt tokens and loaded adapter 1.
  EXPECT_EQ(d.ttft(a), stepUs(c, 32) + 20'000);
}

TEST(EngineModel, AnAbortedRequestLeavesTheEngineAndFreesItsBlocks) {
  EngineConfig c = profile();
  Driver d(c);
  const uint64_t id = d.add(tokens(300, 1), 50);
  ASSERT_TRUE(d.step());
  EXPECT_GT(d.model.kvUsage(), 0.0);
  const uint64_t waiting = d.add(tokens(30, 2), 5);
  d.model.abort(waiting);
  d.model.abort(id);
  d.model.abort(id);  // twice is harmless
  EXPECT_FALSE(d.model.hasWork());
  EXPECT_EQ(d.model.kvUsage(), 0.0);
  EXPECT_EQ(d.model.cachedBlocks(), 300 / 16);
}

TEST(EngineModel, RequestsPastTheContextLengthAreRefusedWithVllmsMessage) {
  EngineConfig c = profile();
  c.max_model_len = 100;
  EngineModel m(c);
  EXPECT_EQ(m.refuse(90, 10), "");
  EXPECT_EQ(m.refuse(91, 10),
            "This model's maximum context length is 100 tokens. However, you requested 101 tokens "
            "(91 in the messages, 10 in the completion). Please reduce the length of the messages "
            "or completion.");
}

TEST(EngineTokens, AWordIsATokenAndTextWithoutWordsIsOne) {
  std::vector<uint32_t> t;
  appendTokens("  The quick\tbrown\n", t);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0], tokenId("The"));
  EXPECT_EQ(t[2], tokenId("brown"));
  appendTokens(" \n", t);
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t[3], tokenId(""));
}

}  // namespace
}  // namespace infera::emulator
