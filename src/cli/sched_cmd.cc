// Flags and wiring only: the work is in src/scheduler (simulator.h, report.h, queues.h).
#include "cli/sched_cmd.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/progress.h"
#include "core/data_dir.h"
#include "scheduler/queues.h"
#include "scheduler/report.h"
#include "scheduler/scheduler.h"
#include "scheduler/simulator.h"
#include "scheduler/trace.h"

namespace infera::cli {
namespace {

struct SimulateOptions {
  std::string data_dir;  // "" = the shipped trace, found by findDataDir()
  std::string nodes_csv;
  std::string pod_list = "default";
  std::string pods_csv;
  std::string mode = "fgd";
  std::vector<std::string> policies = {"infera", "fgd"};
  int seeds = 10;
  uint64_t first_seed = 42;
  double load = 1.3;
  double speedup = 1.0;
  double offered_load = 0;
  double horizon_h = 24;
  int64_t sample_s = 3600;
  std::string config;
  int repack_moves_per_hour = 0;  // replay mode: > 0 runs without and with re-packing
  int64_t repack_interval_s = 300;
  int64_t repack_min_age_s = 1800;
  int64_t repack_restart_s = 60;
  int repack_min_tier = 2;
  int repack_node_gpus = 0;
  int repack_target_empty = 0;
  bool repack_always = false;
  std::string out_dir = "sched-report";
  std::string reference = "fgd";
  bool progress = true;
};

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.toString().c_str());
  return 1;
}

int runSimulate(const SimulateOptions& o) {
  using namespace infera::sched;
  std::string data_dir = o.data_dir;
  if (data_dir.empty() && (o.nodes_csv.empty() || o.pods_csv.empty())) {
    auto found = findDataDir("alibaba-gpu-v2023");
    if (!found.ok()) return fail(found.status());
    data_dir = std::move(*found);
  }
  const std::string nodes_path =
      o.nodes_csv.empty() ? data_dir + "/csv/openb_node_list_gpu_node.csv" : o.nodes_csv;
  const std::string pods_path =
      o.pods_csv.empty() ? data_dir + "/csv/openb_pod_list_" + o.pod_list + ".csv" : o.pods_csv;
  std::printf("trace: %s, %s\n", nodes_path.c_str(), pods_path.c_str());
  auto nodes = loadNodeCsv(nodes_path);
  if (!nodes.ok()) return fail(nodes.status());
  auto pods = loadPodCsv(pods_path);
  if (!pods.ok()) return fail(pods.status());
  std::vector<std::string> policies = o.policies;
  if (policies.size() == 1 && policies[0] == "all") policies = policyNames();
  for (const auto& p : policies) {
    const auto& names = policyNames();
    if (std::find(names.begin(), names.end(), p) == names.end()) {
      return fail(Status::invalidArgument("unknown policy '" + p + "'"));
    }
  }
  const bool show = o.progress;
  if (o.mode == "fgd") {
    std::vector<FgdResult> results;
    for (const auto& policy : policies) {
      ProgressBar bar(policy, show);
      FgdProtocolConfig cfg;
      cfg.policy = policy;
      cfg.load = o.load;
      cfg.seeds.clear();
      for (int i = 0; i < o.seeds; ++i) cfg.seeds.push_back(o.first_seed + i);
      cfg.progress = [&bar](double f) { bar.update(f); };
      auto r = runFgdProtocol(*nodes, *pods, cfg);
      if (!r.ok()) return fail(r.status());
      r->pod_list = o.pods_csv.empty() ? o.pod_list : o.pods_csv;
      results.push_back(std::move(*r));
    }
    const Status s = writeFgdReport(o.out_dir, results, o.reference);
    if (!s.isOk()) return fail(s);
    std::printf("%s", fgdSummary(results, o.reference).c_str());
    std::printf("report: %s/report.json, %s/alloc_vs_load.svg, %s/unallocated_vs_load.svg\n",
                o.out_dir.c_str(), o.out_dir.c_str(), o.out_dir.c_str());
    return 0;
  }
  ReplayConfig cfg;
  if (!o.config.empty()) {
    auto sc = loadSchedulingConfigFile(o.config);
    if (!sc.ok()) return fail(sc.status());
    cfg.scheduling = std::move(*sc);
  }
  int rc = 0;
  for (const auto& policy : policies) {
    ProgressBar bar(policy, show);
    cfg.policy = policy;
    cfg.seed = o.first_seed;
    cfg.arrival_speedup = o.speedup;
    cfg.offered_load = o.offered_load;
    cfg.horizon_s = static_cast<int64_t>(o.horizon_h * 3600);
    cfg.sample_interval_s = o.sample_s;
    cfg.progress = [&bar](double f) { bar.update(f); };
    const std::string base = policies.size() == 1 ? o.out_dir : o.out_dir + "/" + policy;
    // With --repack: the same arrivals without and with the planner, side by side.
    std::vector<ReplayResult> runs;
    for (const int moves : o.repack_moves_per_hour > 0
                               ? std::vector<int>{0, o.repack_moves_per_hour}
                               : std::vector<int>{0}) {
      cfg.repack_moves_per_hour = moves;
      cfg.repack_interval_s = o.repack_interval_s;
      cfg.repack_restart_s = o.repack_restart_s;
      cfg.repack.min_age_s = o.repack_min_age_s;
      cfg.repack.min_tier = static_cast<Tier>(o.repack_min_tier);
      cfg.repack.min_node_gpus = o.repack_node_gpus;
      cfg.repack.target_empty_nodes = o.repack_target_empty;
      cfg.repack_on_demand = !o.repack_always;
      auto r = runReplay(*nodes, *pods, cfg);
      if (!r.ok()) return fail(r.status());
      const std::string dir = o.repack_moves_per_hour <= 0 ? base
                              : moves > 0                  ? base + "/with-repack"
                                                           : base + "/without-repack";
      const Status s = writeReplayReport(dir, *r);
      if (!s.isOk()) rc = fail(s);
      std::printf("%s", replaySummary(*r).c_str());
      std::printf(
          "report: %s/report.json (+ allocation.svg, pending_time.svg, "
          "free_node_aggregation.svg)\n",
          dir.c_str());
      runs.push_back(std::move(*r));
    }
    if (runs.size() == 2) std::printf("%s", repackComparison(runs[0], runs[1]).c_str());
  }
  return rc;
}

int runValidate(const std::vector<std::string>& files) {
  int rc = 0;
  for (const auto& f : files) {
    const auto cfg = sched::loadSchedulingConfigFile(f);
    if (cfg.ok()) {
      std::printf("%s: ok (%zu queues, %zu placement rules, %zu GPU types)\n", f.c_str(),
                  cfg->queues.size(), cfg->placement.size(), cfg->gpu_types.size());
    } else {
      std::fprintf(stderr, "%s\n", cfg.status().message().c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

void registerSchedCommands(CLI::App& app) {
  CLI::App* sched = app.add_subcommand("sched", "GPU scheduler: trace simulation and config");
  sched->require_subcommand(1);

  auto opts = std::make_shared<SimulateOptions>();
  CLI::App* sim = sched->add_subcommand("simulate", "replay the Alibaba GPU trace");
  sim->add_option("--data", opts->data_dir,
                  "trace directory (default: the shipped data/alibaba-gpu-v2023, found next to "
                  "the binary or in its source tree; or $INFERA_DATA_DIR/alibaba-gpu-v2023)");
  sim->add_option("--nodes", opts->nodes_csv,
                  "node CSV (default: DATA/csv/openb_node_list_gpu_node.csv)");
  sim->add_option("--pod-list", opts->pod_list, "pod list name: default, cpu050, gpuspec33, ...")
      ->capture_default_str();
  sim->add_option("--pods", opts->pods_csv, "pod CSV (overrides --pod-list)");
  sim->add_option("--mode", opts->mode, "fgd (paper protocol) or replay (time replay)")
      ->check(CLI::IsMember({"fgd", "replay"}))
      ->capture_default_str();
  sim->add_option("--policy", opts->policies, "policies to run, or 'all'")->delimiter(',');
  sim->add_option("--seeds", opts->seeds, "number of seeds (fgd mode)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sim->add_option("--first-seed", opts->first_seed, "first seed")->capture_default_str();
  sim->add_option("--load", opts->load, "final arrived GPU load (fgd mode)")
      ->check(CLI::Range(0.05, 5.0))
      ->capture_default_str();
  sim->add_option("--speedup", opts->speedup, "divide arrival times by this (replay mode)")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  sim->add_option(
         "--offered-load", opts->offered_load,
         "replay mode: synthetic arrivals drawn from the pod list (trace durations) at this "
         "offered GPU load, instead of the trace's own times (--speedup is then unused)")
      ->check(CLI::Range(0.0, 10.0));
  sim->add_option("--horizon", opts->horizon_h,
                  "replay mode with --offered-load: hours of arrivals")
      ->check(CLI::Range(1.0, 24.0 * 365))
      ->capture_default_str();
  sim->add_option("--sample", opts->sample_s, "sampling interval in seconds (replay mode)")
      ->check(CLI::Range(1, 86400 * 30))
      ->capture_default_str();
  sim->add_option("--config", opts->config, "scheduler YAML: queues, tiers, ladder (replay mode)");
  sim->add_option("--repack", opts->repack_moves_per_hour,
                  "replay mode: also run with live re-packing, moving at most this many pods per "
                  "hour, and compare")
      ->check(CLI::Range(0, 100000));
  sim->add_option("--repack-interval", opts->repack_interval_s, "re-packing: seconds between plans")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  sim->add_option("--repack-min-age", opts->repack_min_age_s,
                  "re-packing: never move a pod bound less than this many seconds ago")
      ->check(CLI::Range(0, 86400 * 30))
      ->capture_default_str();
  sim->add_option("--repack-min-tier", opts->repack_min_tier,
                  "re-packing: move only pods of this tier or above (2 = preemptible only)")
      ->check(CLI::Range(0, 2))
      ->capture_default_str();
  sim->add_option("--repack-restart", opts->repack_restart_s,
                  "re-packing: seconds a moved pod loses to its restart")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  sim->add_option("--repack-node-gpus", opts->repack_node_gpus,
                  "re-packing: empty only nodes with at least this many GPUs (0 = the largest)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  sim->add_option("--repack-target-empty", opts->repack_target_empty,
                  "re-packing: stop planning while this many such nodes are empty (0 = as many as "
                  "whole-node pods wait)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  sim->add_flag("--repack-always", opts->repack_always,
                "re-packing: plan every interval, not only while whole-node pods wait");
  sim->add_option("-o,--out", opts->out_dir, "output directory")->capture_default_str();
  sim->add_option(
         "--reference", opts->reference,
         "fgd mode: the policy the others are compared with at every step of the load curve")
      ->capture_default_str();
  sim->add_flag("!--no-progress", opts->progress, "no progress bar");
  sim->callback([opts] { std::exit(runSimulate(*opts)); });

  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* val =
      sched->add_subcommand("validate", "validate scheduler YAML files (queues, quota)");
  val->add_option("files", *files, "YAML files")->required();
  val->callback([files] { std::exit(runValidate(*files)); });

  registerSchedServeCommands(*sched);

  CLI::App* pol = sched->add_subcommand("policies", "list placement policies");
  pol->callback([] {
    for (const auto& p : sched::policyNames()) std::printf("%s\n", p.c_str());
    std::exit(0);
  });
}

}  // namespace infera::cli
