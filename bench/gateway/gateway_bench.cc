// Micro-benchmarks of the gateway's per-request pieces: request field scan, balancer pick, a
// metric increment (access control's pieces: bench/access). End-to-end figures come from
// bench/load/*.sh.
#include <benchmark/benchmark.h>
#include <simdjson.h>
#include <unistd.h>

#include "gateway/internal/balancer.h"
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

}  // namespace
}  // namespace infera::gateway
