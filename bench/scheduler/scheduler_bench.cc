// Scheduler speed on the 1,213-node Alibaba trace cluster, with the quality figure beside it.
//   BM_Decisions/<policy>: one placement decision + commit per iteration, the cluster refilled
//     from empty each time the FGD protocol's 130% load is reached (time to refill excluded).
//   BM_FgdProtocol10Seeds/<policy>: a whole 10-seed FGD-protocol run per iteration.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "core/data_dir.h"
#include "scheduler/scheduler.h"
#include "scheduler/simulator.h"
#include "scheduler/trace.h"

namespace infera::sched {
namespace {

// The shipped trace (data/ in the repository; INFERA_DATA_DIR overrides it).
std::string traceCsv(const std::string& file) {
  auto dir = findDataDir("alibaba-gpu-v2023");
  if (!dir.ok()) {
    std::fprintf(stderr, "%s\n", dir.status().message().c_str());
    std::exit(1);
  }
  return *dir + "/csv/" + file;
}

struct Trace {
  std::vector<NodeSpec> nodes;
  std::vector<PodSpec> pods;
};

const Trace& trace() {
  static const Trace t = [] {
    Trace out;
    auto nodes = loadNodeCsv(traceCsv("openb_node_list_gpu_node.csv"));
    auto pods = loadPodCsv(traceCsv("openb_pod_list_default.csv"));
    if (!nodes.ok() || !pods.ok()) {
      std::fprintf(stderr, "cannot load the trace\n");
      std::exit(1);
    }
    out.nodes = std::move(*nodes);
    out.pods = std::move(*pods);
    return out;
  }();
  return t;
}

void BM_Decisions(benchmark::State& state, const std::string& policy) {
  const Trace& t = trace();
  int64_t capacity = 0;
  for (const auto& n : t.nodes) capacity += static_cast<int64_t>(n.gpus) * kMilliPerGpu;
  SchedulerConfig cfg;
  cfg.policy = policy;
  cfg.workload = t.pods;
  std::unique_ptr<Scheduler> engine;
  int64_t arrived = 0;
  size_t next = 0;
  double unallocated_sum = 0;
  int fills = 0;
  auto reset = [&] {
    if (engine) {
      const ClusterStats s = engine->stats();
      unallocated_sum += static_cast<double>(s.gpu_milli_capacity - s.gpu_milli_allocated) / 1000;
      ++fills;
    }
    engine = std::move(*Scheduler::create(cfg, t.nodes));
    arrived = 0;
  };
  reset();
  fills = 0;
  unallocated_sum = 0;
  for (auto _ : state) {
    const PodSpec& pod = t.pods[(next++ * 7919) % t.pods.size()];
    arrived += static_cast<int64_t>(pod.num_gpu) * pod.gpu_milli;
    auto placed = engine->schedule(pod);
    benchmark::DoNotOptimize(placed);
    if (arrived * 10 >= capacity * 13) {
      state.PauseTiming();
      reset();
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations());
  if (fills > 0) state.counters["unallocated_gpus"] = unallocated_sum / fills;
}

void BM_FgdProtocol10Seeds(benchmark::State& state, const std::string& policy) {
  const Trace& t = trace();
  double unallocated = 0;
  for (auto _ : state) {
    FgdProtocolConfig cfg;
    cfg.policy = policy;
    auto r = runFgdProtocol(t.nodes, t.pods, cfg);
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    unallocated = r->mean_unallocated;
  }
  state.counters["unallocated_gpus"] = unallocated;
}

BENCHMARK_CAPTURE(BM_Decisions, infera, std::string("infera"));
BENCHMARK_CAPTURE(BM_Decisions, fgd, std::string("fgd"));
BENCHMARK_CAPTURE(BM_Decisions, best_fit, std::string("best-fit"));
BENCHMARK_CAPTURE(BM_FgdProtocol10Seeds, infera, std::string("infera"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_FgdProtocol10Seeds, fgd, std::string("fgd"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace
}  // namespace infera::sched
