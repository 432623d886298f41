// Micro-benchmarks of access control's per-request pieces: local rate-limit counters, the Redis
// reserve call's arguments and reply, and the usage writer. End-to-end figures come from
// bench/load/governance.sh.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>

#include "access/internal/keys.h"
#include "access/internal/limiter.h"

namespace infera::access {
namespace {

// A request's local admission and reconciliation: key and team request/token counters, found by
// name (arg 0, as for users named by a header) or through the snapshot's memo (arg 1, as for keys,
// teams, models and deployments).
void BM_LocalCounters_ReserveAdjust(benchmark::State& state) {
  LocalCounters counters;
  const CounterName names[4] = {std::string("k:key1:r"), std::string("k:key1:t"),
                                std::string("t:team:r"), std::string("t:team:t")};
  Charge charges[4];
  for (size_t i = 0; i < 4; ++i) {
    charges[i].counter = names[i].name;
    if (state.range(0) == 1) charges[i].local = &names[i].local;
    charges[i].tokens = i % 2 == 1;
    charges[i].limit = int64_t{1} << 50;
    charges[i].amount = charges[i].tokens ? 40 : 1;
  }
  const int64_t delta[4] = {0, -20, 0, -20};
  int64_t now_ms = 1'700'000'000'000;
  for (auto _ : state) {
    now_ms += 1;  // ~1,000 requests per second of counter time: every slot is live
    Admission a = counters.reserve(charges, now_ms);
    counters.adjust(charges, delta, a.stamp_ms, now_ms);
    benchmark::DoNotOptimize(a);
  }
}
BENCHMARK(BM_LocalCounters_ReserveAdjust)->Arg(0)->Arg(1);

// The gateway's side of one Redis admission call for N admissions of one key (key and team request
// and token counters): the call's arguments, then the admissions read back from an all-admitted
// reply. Reported per admission (Redis's own time is not in it).
void BM_RedisReserveCall_BuildAndParse(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const std::string names[4] = {"k:key1:r", "k:key1:t", "t:team:r", "t:team:t"};
  Charge charges[4];
  for (size_t i = 0; i < 4; ++i) {
    charges[i].counter = names[i];
    charges[i].tokens = i % 2 == 1;
    charges[i].limit = int64_t{1} << 50;
    charges[i].amount = charges[i].tokens ? 40 : 1;
  }
  const std::vector<std::span<const Charge>> admissions(n, std::span<const Charge>(charges));
  store::RedisReply reply;
  reply.type = store::RedisReply::Type::kArray;
  auto integer = [](int64_t v) {
    store::RedisReply e;
    e.type = store::RedisReply::Type::kInteger;
    e.integer = v;
    return e;
  };
  const int64_t now_ms = 1'700'000'000'000;
  reply.elements.push_back(integer(now_ms));
  for (size_t i = 0; i < 4; ++i) {
    reply.elements.push_back(integer(1000));
    reply.elements.push_back(integer(now_ms / 1000 - 30));
  }
  reply.elements.push_back(integer(-1));
  ReserveCall call;
  for (auto _ : state) {
    buildReserveCall(admissions, now_ms, "worker-1-42", call);
    auto decided = parseReserveReply(reply, admissions, call);
    if (!decided.ok()) {
      state.SkipWithError(decided.status().message().c_str());
      break;
    }
    benchmark::DoNotOptimize(decided);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_RedisReserveCall_BuildAndParse)->Arg(1)->Arg(20);

// The usage writer: batches of 1,000 records (what 1 s of a busy worker gives) into a SQLite file.
// Reported per record.
void BM_UsageInsert_SQLite(benchmark::State& state) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("infera-bench-usage-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto store = MetaStore::open("sqlite:" + (dir / "usage.db").string());
  if (!store.ok()) {
    state.SkipWithError(store.status().message().c_str());
    return;
  }
  std::vector<UsageRecord> batch(1000);
  const std::string keys[4] = {"key-aaaaaaaa", "key-bbbbbbbb", "key-cccccccc", "key-dddddddd"};
  int64_t ts = 1'700'000'000'000, n = 0;
  for (auto _ : state) {
    for (auto& u : batch) {
      u.ts_ms = ts++;
      u.request_id = "req-" + std::to_string(n++);
      u.key_id = keys[n % 4];
      u.team = n % 2 ? "search" : "ads";
      u.model = "llama-3-8b";
      u.deployment = "vllm-a10";
      u.region = "eu-west";
      u.prompt_tokens = 12;
      u.completion_tokens = 16;
      u.latency_ms = 3.5;
      u.status = 200;
    }
    const Status s = (*store)->insertUsage(batch);
    if (!s.isOk()) state.SkipWithError(s.message().c_str());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * batch.size()));
  store->reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_UsageInsert_SQLite)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace infera::access
