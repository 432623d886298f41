#include "scheduler/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "scheduler/cluster.h"
#include "scheduler/scheduler.h"

namespace infera::sched {
namespace {

// The mean and the 99th percentile (the value at index 0.99 n) of `v`; unchanged when empty.
void meanAndP99(std::vector<double> v, double* mean, double* p99) {
  if (v.empty()) return;
  double sum = 0;
  for (const double w : v) sum += w;
  *mean = sum / static_cast<double>(v.size());
  const size_t k =
      std::min(v.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  *p99 = v[k];
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t gpuDemand(const PodSpec& p) {
  if (p.num_gpu == 0) return 0;
  return static_cast<int64_t>(p.num_gpu) * (p.gpu_milli <= 0 ? kMilliPerGpu : p.gpu_milli);
}

double fragRatio(const ClusterStats& s) {
  const double free = static_cast<double>(s.gpu_milli_capacity - s.gpu_milli_allocated);
  return free > 0 ? s.fragmentation_milli / free : 0;
}

void countFailed(const PodSpec& p, FailedPods& f) {
  if (p.num_gpu == 0) {
    ++f.cpu_only;
  } else if (p.num_gpu >= 2) {
    ++f.multi;
  } else if (p.gpu_milli > 0 && p.gpu_milli < kMilliPerGpu) {
    ++f.shared;
  } else {
    ++f.whole;
  }
  if (!p.gpu_types.empty() || !p.min_gpu_type.empty()) ++f.typed;
}

uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a * 0x9E3779B97F4A7C15ull + b);
  return r.next();
}

uint64_t nameHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

Result<FgdResult> runFgdProtocol(const std::vector<NodeSpec>& nodes,
                                 const std::vector<PodSpec>& pods, const FgdProtocolConfig& cfg) {
  if (pods.empty()) return Status::invalidArgument("empty pod list");
  if (cfg.seeds.empty()) return Status::invalidArgument("no seeds");
  FgdResult result;
  result.policy = cfg.policy;
  int64_t capacity = 0;
  for (const NodeSpec& n : nodes) capacity += static_cast<int64_t>(n.gpus) * kMilliPerGpu;
  if (capacity == 0) return Status::invalidArgument("cluster has no GPUs");
  result.capacity_gpus = static_cast<double>(capacity) / kMilliPerGpu;
  const auto target = static_cast<int64_t>(std::llround(cfg.load * static_cast<double>(capacity)));
  const int levels = static_cast<int>(std::floor(cfg.load / cfg.curve_step + 1e-9));

  for (size_t si = 0; si < cfg.seeds.size(); ++si) {
    const uint64_t seed = cfg.seeds[si];
    SchedulerConfig sc;
    sc.policy = cfg.policy;
    sc.seed = seed;
    sc.workload = pods;
    INFERA_ASSIGN_OR_RETURN(auto engine, Scheduler::create(sc, nodes));

    // Arrivals: the list shuffled by the seed, then uniform redraws until the target is reached.
    Rng rng(mix(seed, 0xA11CE));
    std::vector<size_t> order(pods.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);

    FgdRun run;
    run.seed = seed;
    int64_t arrived = 0;
    int next_level = 1;
    const auto t0 = std::chrono::steady_clock::now();
    size_t k = 0;
    while (arrived < target) {
      const PodSpec& pod = k < order.size() ? pods[order[k]] : pods[rng.below(pods.size())];
      ++k;
      ++run.pods_arrived;
      arrived += gpuDemand(pod);
      const auto placed = engine->schedule(pod);
      if (!placed.ok()) {
        ++run.pods_failed;
        countFailed(pod, run.failed);
      }
      while (next_level <= levels &&
             arrived >= static_cast<int64_t>(next_level * cfg.curve_step * capacity)) {
        const ClusterStats s = engine->stats();
        CurvePoint c;
        c.load = next_level * cfg.curve_step;
        c.alloc_ratio = static_cast<double>(s.gpu_milli_allocated) / capacity;
        c.frag_ratio = fragRatio(s);
        c.allocated_gpus = static_cast<double>(s.gpu_milli_allocated) / kMilliPerGpu;
        c.unallocated_gpus =
            static_cast<double>(s.gpu_milli_capacity - s.gpu_milli_allocated) / kMilliPerGpu;
        c.fragmented_gpus = s.fragmentation_milli / kMilliPerGpu;
        c.failed = run.failed;
        run.curve.push_back(c);
        ++next_level;
      }
      if (cfg.progress && (run.pods_arrived & 1023) == 0) {
        cfg.progress((si + std::min(1.0, static_cast<double>(arrived) / target)) /
                     cfg.seeds.size());
      }
    }
    run.seconds = secondsSince(t0);
    run.decisions_per_second = run.seconds > 0 ? run.pods_arrived / run.seconds : 0;
    const ClusterStats s = engine->stats();
    run.unallocated_gpus =
        static_cast<double>(s.gpu_milli_capacity - s.gpu_milli_allocated) / kMilliPerGpu;
    run.alloc_ratio = static_cast<double>(s.gpu_milli_allocated) / capacity;
    run.frag_ratio = fragRatio(s);
    result.runs.push_back(std::move(run));
    if (cfg.progress) cfg.progress(static_cast<double>(si + 1) / cfg.seeds.size());
  }

  const double n = static_cast<double>(result.runs.size());
  for (const FgdRun& r : result.runs) {
    result.mean_unallocated += r.unallocated_gpus / n;
    result.mean_alloc_ratio += r.alloc_ratio / n;
    result.mean_frag_ratio += r.frag_ratio / n;
  }
  double var = 0;
  for (const FgdRun& r : result.runs) {
    var += (r.unallocated_gpus - result.mean_unallocated) *
           (r.unallocated_gpus - result.mean_unallocated) / n;
  }
  result.stddev_unallocated = std::sqrt(var);
  size_t points = result.runs.front().curve.size();
  for (const FgdRun& r : result.runs) points = std::min(points, r.curve.size());
  for (size_t i = 0; i < points; ++i) {
    CurvePoint c;
    c.load = result.runs.front().curve[i].load;
    c.unallocated_min = 1e300;
    c.unallocated_max = -1e300;
    for (const FgdRun& r : result.runs) {
      const CurvePoint& p = r.curve[i];
      c.alloc_ratio += p.alloc_ratio / n;
      c.frag_ratio += p.frag_ratio / n;
      c.allocated_gpus += p.allocated_gpus / n;
      c.unallocated_gpus += p.unallocated_gpus / n;
      c.fragmented_gpus += p.fragmented_gpus / n;
      c.failed.cpu_only += p.failed.cpu_only / n;
      c.failed.shared += p.failed.shared / n;
      c.failed.whole += p.failed.whole / n;
      c.failed.multi += p.failed.multi / n;
      c.failed.typed += p.failed.typed / n;
      c.unallocated_min = std::min(c.unallocated_min, p.unallocated_gpus);
      c.unallocated_max = std::max(c.unallocated_max, p.unallocated_gpus);
    }
    result.mean_curve.push_back(c);
  }
  return result;
}

namespace {

// Synthetic utilisation (the trace has none): a kind per pod from a stable hash, then
//  notebook  - busy for 1-12 h after start, idle (1%) afterwards;
//  training  - 10% are stuck at 0% from the start, the rest run at 60-95%;
//  inference - 20-80%.
std::string syntheticKind(const PodSpec& p) {
  const auto it = p.labels.find("kind");
  if (it != p.labels.end()) return it->second;
  const uint64_t h = nameHash(p.name);
  if (p.num_gpu == 0) return "cpu";
  if (p.num_gpu == 1 && p.gpu_milli > 0 && p.gpu_milli < kMilliPerGpu && h % 4 == 0) {
    return "notebook";
  }
  if (p.num_gpu >= 2 || h % 5 == 0) return "training";
  return "inference";
}

double syntheticUtil(const std::string& kind, uint64_t h, int64_t ran_s) {
  const double u = static_cast<double>(h % 1000) / 1000.0;
  if (kind == "notebook") {
    const int64_t busy_s = (1 + static_cast<int64_t>(h % 12)) * 3600;
    return ran_s < busy_s ? 0.3 + 0.4 * u : 0.01;
  }
  if (kind == "training") return (h % 10 == 0) ? 0.0 : 0.6 + 0.35 * u;
  if (kind == "inference") return 0.2 + 0.6 * u;
  return 0.5;
}

struct PodSim {
  int64_t remaining_s = -1;  // run time still owed, -1 = forever
  int64_t started_s = -1;    // current run
  int64_t first_start_s = -1;
  PodId id = 0;
  bool running = false;
  bool pending = false;
  bool done = false;
  bool reclaimed = false;
  uint64_t hash = 0;
  std::string kind;
};

// Trace-driven synthetic arrivals (ReplayConfig::offered_load).
std::vector<PodSpec> syntheticArrivals(const std::vector<PodSpec>& list, int64_t capacity_milli,
                                       const ReplayConfig& cfg) {
  const auto horizon = static_cast<double>(cfg.horizon_s);
  auto duration = [&](const PodSpec& p) {
    return p.deletion_s > p.creation_s
               ? std::min(horizon, static_cast<double>(p.deletion_s - p.creation_s))
               : horizon;
  };
  double mean_gd = 0;  // milli-GPU x seconds per drawn pod
  for (const PodSpec& p : list) mean_gd += static_cast<double>(gpuDemand(p)) * duration(p);
  mean_gd /= static_cast<double>(list.size());
  std::vector<PodSpec> out;
  if (mean_gd <= 0) return out;
  const double rate = cfg.offered_load * static_cast<double>(capacity_milli) / mean_gd;  // pods/s
  Rng rng(mix(cfg.seed, 0x10AD));
  double t = 0;
  for (int k = 0;; ++k) {
    t += -std::log(1.0 - rng.uniform()) / rate;
    if (t >= horizon) break;
    const PodSpec& src = list[rng.below(list.size())];
    PodSpec p = src;
    p.name = src.name + "#" + std::to_string(k);
    p.creation_s = static_cast<int64_t>(t);
    p.deletion_s =
        src.deletion_s > src.creation_s ? p.creation_s + static_cast<int64_t>(duration(src)) : -1;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

Result<ReplayResult> runReplay(const std::vector<NodeSpec>& nodes, const std::vector<PodSpec>& in,
                               const ReplayConfig& cfg) {
  ReplayResult out;
  out.policy = cfg.policy;
  if (cfg.arrival_speedup <= 0) return Status::invalidArgument("arrival_speedup must be > 0");
  if (cfg.offered_load < 0) return Status::invalidArgument("offered_load must be >= 0");
  if (cfg.sample_interval_s <= 0) return Status::invalidArgument("sample_interval_s must be > 0");
  if (cfg.offered_load > 0 && cfg.horizon_s <= 0)
    return Status::invalidArgument("horizon_s must be > 0");
  if (in.empty()) return Status::invalidArgument("no pods");
  int64_t capacity_milli = 0;
  for (const NodeSpec& n : nodes) capacity_milli += static_cast<int64_t>(n.gpus) * kMilliPerGpu;
  out.offered_load = cfg.offered_load;
  out.arrival_speedup = cfg.offered_load > 0 ? 1.0 : cfg.arrival_speedup;
  std::vector<PodSpec> pods =
      cfg.offered_load > 0 ? syntheticArrivals(in, capacity_milli, cfg) : in;
  if (pods.empty())
    return Status::invalidArgument(
        "no arrivals: the pod list asks for no GPUs to offer a load with");
  out.arrivals = static_cast<int>(pods.size());
  for (PodSpec& p : pods) {
    const int64_t duration = p.deletion_s > p.creation_s ? p.deletion_s - p.creation_s : -1;
    p.creation_s = static_cast<int64_t>(static_cast<double>(p.creation_s) / out.arrival_speedup);
    p.deletion_s = duration >= 0 ? p.creation_s + duration : -1;
  }
  std::stable_sort(pods.begin(), pods.end(),
                   [](const PodSpec& a, const PodSpec& b) { return a.creation_s < b.creation_s; });
  SchedulerConfig sc;
  sc.policy = cfg.policy;
  sc.seed = cfg.seed;
  sc.scheduling = cfg.scheduling;
  sc.workload = pods;
  std::vector<PodSim> sim(pods.size());
  int64_t end_s = 0;
  for (size_t i = 0; i < pods.size(); ++i) {
    PodSpec& p = pods[i];
    sim[i].kind = syntheticKind(p);
    p.labels["kind"] = sim[i].kind;
    sim[i].hash = nameHash(p.name) ^ cfg.seed;
    sim[i].remaining_s = p.deletion_s > p.creation_s ? p.deletion_s - p.creation_s : -1;
    // The replay window ends with the last arrival (the trace is a snapshot taken then).
    end_s = std::max(end_s, p.creation_s);
  }
  INFERA_ASSIGN_OR_RETURN(auto engine, Scheduler::create(sc, nodes));
  out.pods = static_cast<int>(pods.size());
  const auto t0 = std::chrono::steady_clock::now();

  using Dep = std::pair<int64_t, size_t>;  // (time, pod)
  std::priority_queue<Dep, std::vector<Dep>, std::greater<>> departures;
  std::vector<size_t> pending;                        // kept ordered by (tier, creation)
  std::unordered_map<PodId, size_t> id_to_pod_index;  // running pods
  for (const NodeSpec& n : nodes) out.whole_node_gpus = std::max(out.whole_node_gpus, n.gpus);
  auto wholeNode = [&](const PodSpec& p) {
    return out.whole_node_gpus > 1 && p.num_gpu >= out.whole_node_gpus;
  };
  std::vector<double> whole_node_pending;
  for (const PodSpec& p : pods) out.whole_node_pods += wholeNode(p);
  auto record = [&](size_t i, const Placement& p, int64_t now) {
    PodSim& s = sim[i];
    s.id = p.pod;
    s.running = true;
    s.pending = false;
    s.started_s = now;
    if (s.first_start_s < 0) {
      s.first_start_s = now;
      ++out.scheduled;
      out.pending_times_s.push_back(static_cast<double>(now - pods[i].creation_s));
      if (wholeNode(pods[i])) {
        whole_node_pending.push_back(static_cast<double>(now - pods[i].creation_s));
      }
    }
    id_to_pod_index[p.pod] = i;
    if (s.remaining_s >= 0) departures.push({now + s.remaining_s, i});
    for (const Eviction& e : p.evicted) {
      ++out.preemptions;
      if (out.evictions.size() < cfg.max_evictions_listed) out.evictions.push_back(e);
      const auto victim = id_to_pod_index.find(e.pod);
      if (victim == id_to_pod_index.end()) continue;
      const size_t v = victim->second;
      id_to_pod_index.erase(victim);
      PodSim& vs = sim[v];
      vs.running = false;
      if (vs.remaining_s >= 0)
        vs.remaining_s = std::max<int64_t>(0, vs.remaining_s - (now - vs.started_s));
      vs.pending = true;
      pending.push_back(v);
    }
  };
  auto tierOf = [&](size_t i) { return static_cast<int>(pods[i].tier); };
  auto trySchedule = [&](size_t i, int64_t now) {
    ++out.decisions;
    auto placed = engine->schedule(pods[i], now);
    if (placed.ok()) {
      record(i, *placed, now);
      return true;
    }
    if (placed.status().code() == StatusCode::kInvalidArgument) {
      sim[i].done = true;  // malformed: never schedulable
    }
    return false;
  };
  auto retryPending = [&](int64_t now) {
    std::stable_sort(pending.begin(), pending.end(), [&](size_t a, size_t b) {
      return tierOf(a) != tierOf(b) ? tierOf(a) < tierOf(b)
                                    : pods[a].creation_s < pods[b].creation_s;
    });
    std::unordered_set<uint64_t> failed_shapes;
    std::vector<size_t> still;
    // Placements below can preempt, which appends the victims to `pending`: walk a moved-out list.
    std::vector<size_t> work;
    work.swap(pending);
    for (const size_t i : work) {
      if (sim[i].done || !sim[i].pending) continue;
      const PodSpec& p = pods[i];
      uint64_t key = mix(static_cast<uint64_t>(p.cpu_milli), static_cast<uint64_t>(p.memory_mib));
      key = mix(key, static_cast<uint64_t>(p.num_gpu * 1001 + p.gpu_milli));
      key = mix(key, static_cast<uint64_t>(p.tier));
      for (const auto& t : p.gpu_types) key = mix(key, nameHash(t));
      key = mix(key, nameHash(p.queue + "|" + p.ns + "|" + p.qos));
      if (failed_shapes.count(key) || !trySchedule(i, now)) {
        failed_shapes.insert(key);
        if (!sim[i].done) still.push_back(i);
      }
    }
    still.insert(still.end(), pending.begin(), pending.end());  // victims preempted meanwhile
    pending.swap(still);
  };

  size_t next_arrival = 0;
  int64_t next_sample = 0;
  double ratio_sum = 0, empty_sum = 0;
  // Pending pods are retried when capacity frees, at most once per kRetryIntervalS of simulated
  // time (as kube-scheduler moves unschedulable pods back on cluster events, with back-off).
  constexpr int64_t kRetryIntervalS = 10;
  bool retry_due = false;
  int64_t next_retry = 0;
  auto retrySoon = [&](int64_t now) {
    if (pending.empty()) return;
    if (now >= next_retry) {
      retryPending(now);
      retry_due = false;
      next_retry = now + kRetryIntervalS;
    } else {
      retry_due = true;
    }
  };
  // Re-packing: plans every repack_interval_s within the budget of the last hour.
  out.repack_moves_per_hour = cfg.repack_moves_per_hour;
  const bool repacking = cfg.repack_moves_per_hour > 0 && cfg.repack_interval_s > 0;
  int64_t next_repack = repacking ? cfg.repack_interval_s : std::numeric_limits<int64_t>::max();
  std::deque<int64_t> move_times;  // of the moves in the last hour
  auto repack = [&](int64_t now) {
    while (!move_times.empty() && move_times.front() <= now - 3600) move_times.pop_front();
    const int budget = cfg.repack_moves_per_hour - static_cast<int>(move_times.size());
    if (budget <= 0) return;
    RepackConfig rc = cfg.repack;
    if (rc.min_node_gpus <= 0) rc.min_node_gpus = out.whole_node_gpus;
    // On demand: one plan per waiting whole-node pod that no node can take now (oldest first),
    // each emptying one node that would host it. Otherwise one plan for the next such pod.
    std::vector<const PodSpec*> wanting;
    if (rc.target_empty_nodes <= 0 && cfg.repack_on_demand) {
      std::vector<size_t> waiting;
      for (const size_t i : pending) {
        if (!sim[i].done && pods[i].num_gpu >= rc.min_node_gpus) waiting.push_back(i);
      }
      std::sort(waiting.begin(), waiting.end(), [&](size_t a, size_t b) {
        return pods[a].creation_s != pods[b].creation_s ? pods[a].creation_s < pods[b].creation_s
                                                        : a < b;
      });
      for (const size_t i : waiting) {
        if (static_cast<int>(wanting.size()) >= budget) break;
        const auto d = engine->decide(pods[i], now);
        if (!d.ok() && d.status().code() == StatusCode::kResourceExhausted)
          wanting.push_back(&pods[i]);
      }
      if (wanting.empty()) return;
    } else {
      wanting.push_back(nullptr);
    }
    bool moved = false;
    for (const PodSpec* want : wanting) {
      rc.max_moves = cfg.repack_moves_per_hour - static_cast<int>(move_times.size());
      if (rc.max_moves <= 0) break;
      if (want != nullptr) rc.for_pod = *want;
      const RepackPlan plan = engine->planRepack(rc, now);
      if (plan.moves.empty()) continue;
      ++out.repack_plans;
      out.repack_nodes_emptied += static_cast<int>(plan.nodes_emptied.size());
      for (const Migration& m : plan.moves) {
        const auto it = id_to_pod_index.find(m.pod);
        if (it == id_to_pod_index.end() || !engine->migrate(m.pod, m.to_node, now).ok()) continue;
        PodSim& s = sim[it->second];
        if (s.remaining_s >= 0) {
          s.remaining_s =
              std::max<int64_t>(0, s.remaining_s - (now - s.started_s)) + cfg.repack_restart_s;
          departures.push({now + s.remaining_s, it->second});
        }
        s.started_s = now;
        ++out.repack_moves;
        move_times.push_back(now);
        out.repack_move_times.push_back(now);
        moved = true;
        if (out.migrations.size() < cfg.max_evictions_listed) out.migrations.push_back(m);
      }
    }
    if (moved) retrySoon(now);
  };
  while (next_arrival < pods.size() || next_sample <= end_s) {
    int64_t now = next_sample;
    if (next_arrival < pods.size()) now = std::min(now, pods[next_arrival].creation_s);
    if (!departures.empty()) now = std::min(now, departures.top().first);
    if (retry_due) now = std::min(now, next_retry);
    now = std::min(now, next_repack);
    bool freed = false;
    while (!departures.empty() && departures.top().first <= now) {
      const size_t i = departures.top().second;
      departures.pop();
      PodSim& s = sim[i];
      // Stale entry: the pod was preempted or reclaimed after this departure was scheduled.
      if (!s.running || s.started_s + s.remaining_s != now) continue;
      if (engine->release(s.id).isOk()) freed = true;
      id_to_pod_index.erase(s.id);
      s.running = false;
      s.done = true;
    }
    if (freed || (retry_due && now >= next_retry)) retrySoon(now);
    while (next_arrival < pods.size() && pods[next_arrival].creation_s <= now) {
      const size_t i = next_arrival++;
      sim[i].pending = true;
      if (!trySchedule(i, now) && !sim[i].done) pending.push_back(i);
    }
    if (now == next_repack) {
      repack(now);
      next_repack += cfg.repack_interval_s;
    }
    if (now == next_sample) {
      if (cfg.utilization_model) {
        for (size_t i = 0; i < pods.size(); ++i) {
          const PodSim& s = sim[i];
          if (!s.running) continue;
          engine->recordUtilization(s.id, syntheticUtil(s.kind, s.hash, now - s.started_s), now);
        }
      }
      bool reclaimed = false;
      for (const Eviction& e : engine->reclaimIdle(now)) {
        const auto it = id_to_pod_index.find(e.pod);
        if (it == id_to_pod_index.end()) continue;
        const size_t i = it->second;
        id_to_pod_index.erase(it);
        sim[i].running = false;
        sim[i].done = true;
        sim[i].reclaimed = true;
        ++out.idle_reclaimed_pods;
        out.idle_reclaimed_gpus += static_cast<double>(gpuDemand(pods[i])) / kMilliPerGpu;
        if (out.evictions.size() < cfg.max_evictions_listed) out.evictions.push_back(e);
        reclaimed = true;
      }
      if (reclaimed) retrySoon(now);
      const ClusterStats st = engine->stats();
      SeriesPoint sp;
      sp.t = now;
      sp.gpu_alloc_ratio = st.gpu_milli_capacity > 0
                               ? static_cast<double>(st.gpu_milli_allocated) / st.gpu_milli_capacity
                               : 0;
      const double free = static_cast<double>(st.gpu_milli_capacity - st.gpu_milli_allocated);
      sp.free_on_empty_share = free > 0 ? st.gpu_milli_on_empty_nodes / free : 0;
      sp.pending = static_cast<int>(pending.size());
      sp.running = st.running_pods;
      ratio_sum += sp.gpu_alloc_ratio;
      empty_sum += sp.free_on_empty_share;
      out.series.push_back(sp);
      next_sample += cfg.sample_interval_s;
      if (cfg.progress && end_s > 0) cfg.progress(std::min(1.0, static_cast<double>(now) / end_s));
    }
  }
  out.seconds = secondsSince(t0);
  out.never_scheduled = out.pods - out.scheduled;
  for (const double w : out.pending_times_s) out.waited += w > 0;
  out.waited_share = out.scheduled > 0 ? static_cast<double>(out.waited) / out.scheduled : 0;
  meanAndP99(out.pending_times_s, &out.mean_pending_s, &out.p99_pending_s);
  out.whole_node_started = static_cast<int>(whole_node_pending.size());
  for (size_t i = 0; i < pods.size(); ++i) {
    if (wholeNode(pods[i]) && sim[i].first_start_s < 0) {
      whole_node_pending.push_back(static_cast<double>(end_s - pods[i].creation_s));
    }
  }
  meanAndP99(std::move(whole_node_pending), &out.whole_node_mean_pending_s,
             &out.whole_node_p99_pending_s);
  if (!out.series.empty()) {
    out.mean_gpu_alloc_ratio = ratio_sum / out.series.size();
    out.mean_free_on_empty_share = empty_sum / out.series.size();
  }
  out.nodes_for_guarantees = engine->nodesForGuarantees();
  out.nodes_for_guarantees_share =
      nodes.empty() ? 0 : static_cast<double>(out.nodes_for_guarantees) / nodes.size();
  if (cfg.progress) cfg.progress(1.0);
  return out;
}

}  // namespace infera::sched
