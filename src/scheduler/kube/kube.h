#pragma once
// Infera's GPU scheduler on Kubernetes (`infera sched serve -c sched.yaml`): a standalone
// scheduler beside kube-scheduler, the way YuniKorn, Volcano and KAI run. It lists and watches
// nodes and pods on the API server (resourceVersion, bookmarks, relist on 410 Gone, reconnect
// with back-off), owns pods whose spec.schedulerName is its own, places each pending pod through
// the engine (scheduler.h: queues, tiers, ladder, the fragmentation-aware policy) and binds it
// with pods/binding; a pod that cannot be placed stays pending with an Event and a
// PodScheduled=False condition and is retried when the cluster changes. Tier-0 pods reclaiming
// their guarantee evict the engine's victims through the Eviction API (policy/v1). A mutating
// admission webhook (webhook.h) maps pods to queues. Metrics on /metrics. See docs/kubernetes.md.
//
//   INFERA_ASSIGN_OR_RETURN(ServeConfig cfg, loadServeConfigFile("sched.yaml"));
//   INFERA_ASSIGN_OR_RETURN(auto server, KubeScheduler::create(std::move(cfg)));
//   INFERA_RETURN_IF_ERROR(server->start());   // binds the ports, starts its thread
//   ...; server->stop();
//
// Thread-safety: create/start/stop from one control thread. Everything else (watches, engine,
// bindings, the HTTP handlers) runs on the scheduler's own single event loop, so none of it
// locks.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "net/tls.h"
#include "scheduler/queues.h"

namespace infera::sched::kube {

struct KubeConfig {
  // https://host:port of the API server. Empty: in-cluster ($KUBERNETES_SERVICE_HOST/PORT, the
  // service account's token and CA).
  std::string api_server;
  std::string ca_file;     // "" = the system store (in-cluster: the service account's ca.crt)
  std::string token_file;  // bearer token, re-read at every reconnect ("" = none)
  bool insecure_skip_verify = false;
  std::string scheduler_name = "infera";
  std::string component = "infera-scheduler";  // Events' source and reportingComponent
  std::string gpu_resource = "nvidia.com/gpu";
  std::string gpu_type_label = "nvidia.com/gpu.product";
  std::string default_gpu_type = "gpu";  // GPU nodes without the label
  // Milli-GPU sharing: a pod with this annotation (or extended resource) takes that share of one
  // GPU ("500" = half a GPU).
  std::string gpu_milli_annotation = "infera.ai/gpu-milli";
  std::string gpu_milli_resource = "infera.ai/gpu-milli";
  std::string queue_annotation = "infera.ai/queue";
  std::string tier_annotation = "infera.ai/tier";
  std::string gpu_types_annotation = "infera.ai/gpu-types";        // "A10,A100"
  std::string min_gpu_type_annotation = "infera.ai/min-gpu-type";  // ladder minimum
  std::string group_annotation = "infera.ai/group";                // gang: all or none
  std::string group_size_annotation = "infera.ai/group-size";
  int watch_timeout_s = 300;  // each watch's timeoutSeconds (the server closes it; we re-watch)
  int backoff_initial_ms = 100;
  int backoff_max_ms = 10'000;
  int retry_interval_ms = 10'000;  // unschedulable pods are also retried this often
  int request_timeout_ms = 10'000;
  int max_binds_in_flight = 16;
  bool operator==(const KubeConfig&) const = default;
};

struct ListenConfig {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port
  bool operator==(const ListenConfig&) const = default;
};

struct WebhookConfig {
  bool enabled = false;
  ListenConfig listen;
  std::optional<net::TlsServerConfig> tls;  // required when enabled
  // Only pods asking for the GPU resource are mutated (others pass unchanged) unless false.
  bool gpu_pods_only = true;
  // Proportional CPU/memory: requests set to this share per GPU when the pod asks for less
  // (0 = not set).
  double cpu_per_gpu = 0;
  double memory_gib_per_gpu = 0;
};

struct LeaderElectionConfig {
  bool enabled = false;
  std::string lease_namespace = "infera-system";
  std::string lease_name = "infera-scheduler";
  std::string identity;  // "" = hostname + pid
  int lease_duration_s = 15;
  int renew_interval_ms = 2'000;
  bool operator==(const LeaderElectionConfig&) const = default;
};

// Idle reclaim from GPU metrics: every interval the scheduler asks Prometheus for each pod's GPU
// utilisation (DCGM exporter's DCGM_FI_DEV_GPU_UTIL, percent, labelled namespace/pod); a bound pod
// matched by one of scheduling.idle_reclaim's policies whose utilisation stays below the policy's
// threshold for its idle_hours gets a Warning Event (IdleReclaimWarning), and warn_before_s later
// is evicted through the Eviction API (PDBs hold) with an Event naming the policy. dry_run: the
// Events say what would happen; nothing is evicted.
struct ReclaimConfig {
  bool enabled = false;
  std::string prometheus_url;  // http://prometheus:9090
  std::string query = "avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL)";
  double utilization_scale = 100;  // DCGM reports percent: 100 = fully busy
  std::string namespace_label = "namespace";
  std::string pod_label = "pod";
  int interval_ms = 60'000;
  int warn_before_s = 600;
  bool dry_run = false;
};

// Live re-packing, as a recommendation (dry run): every interval the engine's planner
// (Scheduler::planRepack) proposes moves that empty whole GPU nodes; each proposed move is posted
// as a Normal Event (RepackRecommended) on the pod when the proposal for it changes, and counted
// in infera_sched_repack_* metrics. Nothing is moved: carrying moves out is not built yet.
struct RepackServeConfig {
  bool enabled = false;
  int interval_ms = 300'000;
  int max_moves = 10;          // per plan
  int min_age_s = 1800;        // since the scheduler bound (or first saw) the pod
  int min_tier = 2;            // 2 = only preemptible pods
  int node_gpus = 0;           // only nodes with at least this many GPUs (0 = the largest)
  int target_empty_nodes = 0;  // 0 = no target
};

struct ServeConfig {
  KubeConfig kube;
  std::string policy = "infera";
  SchedulingConfig scheduling;
  ListenConfig metrics;
  WebhookConfig webhook;
  LeaderElectionConfig leader_election;
  ReclaimConfig reclaim;
  RepackServeConfig repack;
};

// The sched.yaml of `infera sched serve`: kube:, policy:, metrics:, webhook:, leader_election:
// and scheduling: (the quota-as-code of queues.h). Every error with its key path and line;
// unknown keys rejected.
Result<ServeConfig> parseServeConfigString(const std::string& yaml_text);
Result<ServeConfig> loadServeConfigFile(const std::string& path);

// What a reload cannot change without a restart, between `running` and `next` (empty: none): the
// key paths of kube:, metrics:, leader_election:, webhook's enabled/host/port/tls, reclaim's
// enabled/prometheus_url and repack's enabled. Everything else (policy, scheduling: queues,
// placement rules, ladder, idle policies; the webhook's mutations; reclaim and repack tunables)
// is taken by a reload.
std::vector<std::string> restartNeeded(const ServeConfig& running, const ServeConfig& next);

class KubeScheduler {
 public:
  virtual ~KubeScheduler() = default;
  // Checks the config and builds the engine; nothing is contacted yet. kInvalidArgument for a bad
  // policy, URL or certificate file.
  static Result<std::unique_ptr<KubeScheduler>> create(ServeConfig config);
  // Binds the metrics (and webhook) ports and starts the loop: list, watch, schedule. Returns
  // once the ports are bound (the API server may still be unreachable: it is retried).
  virtual Status start() = 0;
  virtual uint16_t metricsPort() const = 0;
  virtual uint16_t webhookPort() const = 0;  // 0 without a webhook
  // A new sched.yaml without a restart (SIGHUP, or the file changing: `infera sched serve`).
  // Checked whole first: kInvalidArgument naming the keys that need a restart (restartNeeded), or
  // the engine's error for a bad policy or queue tree; then nothing changes. Otherwise the webhook
  // answers by the new rules from its next request, and the engine is rebuilt under the new
  // queues and policy before the next scheduling pass (running pods are accounted again as they
  // are: a lowered quota stops new placements, it evicts nobody). Thread-safe with start/stop.
  virtual Status reload(ServeConfig next) = 0;
  // loadServeConfigFile(path), then reload; a file that does not parse is refused the same way
  // (its error with key path and line). Both count in infera_sched_config_reloads_total{result}.
  virtual Status reloadFile(const std::string& path) = 0;
  // Stops watching and scheduling, drains the ports. Idempotent.
  virtual void stop() = 0;
};

}  // namespace infera::sched::kube
