// Scheduler speed on the 1,213-node Alibaba trace cluster, with the quality figure beside it.
//   BM_Decisions/<policy>: one placement decision + commit per iteration, the cluster refilled
//     from empty each time the FGD protocol's 130% load is reached (time to refill excluded).
//   BM_Decisions/<policy>_soft: the same with soft terms on every pod (softTrace below).
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

// The trace with the soft terms a serving deployment writes on every pod: nodes in four zones,
// pods in 50 apps, each preferring (weight 100) a host without its app's pods and spreading its
// app over the zones (ScheduleAnyway). Each decision then scores every node and passes over the
// running pods (kube-scheduler's InterPodAffinity and PodTopologySpread scores).
const Trace& softTrace() {
  static const Trace t = [] {
    Trace out = trace();
    for (size_t i = 0; i < out.nodes.size(); ++i) {
      out.nodes[i].labels["kubernetes.io/hostname"] = out.nodes[i].name;
      out.nodes[i].labels["topology.kubernetes.io/zone"] = "z" + std::to_string(i % 4);
    }
    for (size_t i = 0; i < out.pods.size(); ++i) {
      PodSpec& p = out.pods[i];
      const std::string app = "app-" + std::to_string(i % 50);
      p.labels["app"] = app;
      WeightedPodTerm anti;
      anti.weight = 100;
      anti.term.selector.match_labels = {{"app", app}};
      anti.term.topology_key = "kubernetes.io/hostname";
      p.soft.anti_affinity = {anti};
      SpreadConstraint zone;
      zone.topology_key = "topology.kubernetes.io/zone";
      zone.selector.match_labels = {{"app", app}};
      p.soft.spread = {zone};
    }
    return out;
  }();
  return t;
}

void BM_Decisions(benchmark::State& state, const std::string& policy, bool soft = false) {
  const Trace& t = soft ? softTrace() : trace();
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
BENCHMARK_CAPTURE(BM_Decisions, infera_soft, std::string("infera"), true);
BENCHMARK_CAPTURE(BM_Decisions, best_fit_soft, std::string("best-fit"), true);
BENCHMARK_CAPTURE(BM_FgdProtocol10Seeds, infera, std::string("infera"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_FgdProtocol10Seeds, fgd, std::string("fgd"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace
}  // namespace infera::sched
