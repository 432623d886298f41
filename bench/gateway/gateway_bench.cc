// Micro-benchmarks of the gateway's per-request pieces: request field scan, balancer pick, a
// metric increment (access control's pieces: bench/access). End-to-end figures come from
// bench/load/*.sh.
#include <benchmark/benchmark.h>
#include <simdjson.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gateway/internal/balancer.h"
#include "gateway/internal/engine_routing.h"
#include "gateway/internal/request_scan.h"
#include "obs/metrics.h"

namespace infera::gateway {
namespace {

const std::string kSmallChat =
    R"({"model":"llama-3-8b","messages":[{"role":"system","content":"You are helpful."},)"
    R"({"role":"user","content":"Write one sentence about the sea."}],"max_tokens":16,"temperature":0.2})";

void BM_ScanRequest_SmallChat(benchmark::State& state) {
  simdjson::dom::parser parser;
  for (auto _ : state) {
    auto f = scanRequest(parser, kSmallChat);
    benchmark::DoNotOptimize(f);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kSmallChat.size()));
}
BENCHMARK(BM_ScanRequest_SmallChat);

void BM_PickCandidate_8Endpoints(benchmark::State& state) {
  std::vector<Candidate> c;
  for (uint32_t i = 0; i < 8; ++i)
    c.push_back({i, 0.001 * (1 + i % 3), static_cast<int>(i % 4), 1, i < 4});
  std::mt19937_64 rng(1);
  for (auto _ : state) benchmark::DoNotOptimize(pickCandidate(c, 0.5, rng));
}
BENCHMARK(BM_PickCandidate_8Endpoints);

void BM_CounterInc_Sharded(benchmark::State& state) {
  obs::MetricsRegistry r(2);
  auto* c = r.counterFamily("x_total", "x", {"model"})->counter({"m"});
  for (auto _ : state) c->inc(0);
  benchmark::DoNotOptimize(c->value());
}
BENCHMARK(BM_CounterInc_Sharded);

// The engine-aware routing decision (docs/routing.md) as a request pays it once its body is
// parsed: the prompt's block hashes (bounded by prefix_max_blocks), the prefix index's match over
// the candidates, the scoring, and recording the choice. A tenant's long system prompt and a short
// question, as in bench/load/engine_routing.sh; state.range(0) endpoints, 48 tenants' prefixes in
// the index.
std::string tenantChat(int tenant, int question) {
  std::string body = R"({"model":"m","stream":true,"max_tokens":32,"messages":[)";
  body += R"({"role":"system","content":")";
  char word[32];
  for (int w = 0; w < 2500; ++w) {
    std::snprintf(word, sizeof word, "t%dw%d ", tenant, w);
    body += word;
  }
  std::snprintf(word, sizeof word, "question %d", question);
  body += R"("},{"role":"user","content":")";
  body += word;
  body += R"( about the sea"}]})";
  return body;
}

void BM_EngineDecision(benchmark::State& state) {
  const int endpoints = static_cast<int>(state.range(0));
  EngineRoutingConfig cfg;
  cfg.enabled = true;
  PrefixIndex index(static_cast<size_t>(cfg.prefix_index_entries));
  std::vector<EngineCandidate> candidates;
  uint64_t slots = 0;
  for (int i = 0; i < endpoints; ++i) {
    EngineCandidate c;
    c.index = static_cast<uint32_t>(i);
    c.slot = index.slotFor("d|http://10.0.0." + std::to_string(i) + ":8000");
    c.known = true;
    c.load = c.waiting = i % 7;
    c.kv_usage = 0.1 * (i % 9);
    candidates.push_back(c);
    slots |= uint64_t{1} << c.slot;
  }
  std::vector<simdjson::padded_string> bodies;
  for (int t = 0; t < 48; ++t) bodies.emplace_back(tenantChat(t, t * 7));
  std::vector<simdjson::dom::element> roots;
  std::vector<simdjson::dom::parser> parsers(bodies.size());
  for (size_t i = 0; i < bodies.size(); ++i) roots.push_back(parsers[i].parse(bodies[i]).value());
  std::vector<uint64_t> blocks(static_cast<size_t>(cfg.prefix_max_blocks));
  std::mt19937_64 rng(1);
  // Warm: every tenant's prefix recorded at one endpoint.
  for (size_t t = 0; t < roots.size(); ++t) {
    const size_t n =
        promptBlockHashes(roots[t], static_cast<size_t>(cfg.prefix_block_bytes), blocks);
    index.record(std::span<const uint64_t>(blocks.data(), n),
                 candidates[t % candidates.size()].slot, 1);
  }
  size_t t = 0;
  for (auto _ : state) {
    const simdjson::dom::element& root = roots[t];
    t = t + 1 == roots.size() ? 0 : t + 1;
    const size_t n = promptBlockHashes(root, static_cast<size_t>(cfg.prefix_block_bytes), blocks);
    const std::span<const uint64_t> span(blocks.data(), n);
    uint16_t matched[64];
    index.match(span, slots, matched);
    const EngineChoice choice = pickEngineCandidate(cfg, candidates, matched, n, rng);
    index.record(span, candidates[static_cast<size_t>(choice.position)].slot, 2);
    benchmark::DoNotOptimize(choice);
  }
}
BENCHMARK(BM_EngineDecision)->Arg(8)->Arg(32);

// The prompt's block hashes alone (the 2,500-word system prompt, ~18 KB: the 256-block bound).
void BM_PromptBlockHashes(benchmark::State& state) {
  simdjson::dom::parser parser;
  const simdjson::padded_string body(tenantChat(3, 5));
  const simdjson::dom::element root = parser.parse(body).value();
  std::vector<uint64_t> blocks(256);
  size_t n = 0;
  for (auto _ : state) {
    n = promptBlockHashes(root, 64, blocks);
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * 64));
}
BENCHMARK(BM_PromptBlockHashes);

// The scoring alone (no prompt: the prefix score is 0), for the part that grows with endpoints.
void BM_EngineScore(benchmark::State& state) {
  const int endpoints = static_cast<int>(state.range(0));
  EngineRoutingConfig cfg;
  std::vector<EngineCandidate> candidates;
  for (int i = 0; i < endpoints; ++i) {
    EngineCandidate c;
    c.index = static_cast<uint32_t>(i);
    c.slot = i;
    c.known = true;
    c.load = c.waiting = i % 7;
    c.kv_usage = 0.1 * (i % 9);
    candidates.push_back(c);
  }
  uint16_t matched[64] = {};
  std::mt19937_64 rng(1);
  for (auto _ : state)
    benchmark::DoNotOptimize(pickEngineCandidate(cfg, candidates, matched, 0, rng));
}
BENCHMARK(BM_EngineScore)->Arg(8)->Arg(32);

}  // namespace
}  // namespace infera::gateway
