#include <fstream>
#include <sstream>

#include "core/config.h"
#include "scheduler/kube/kube.h"
#include "scheduler/scheduler.h"

namespace infera::sched::kube {
namespace {

void readListen(ConfigReader& r, ListenConfig& out) {
  r.optional("host", out.host);
  r.optional("port", out.port, 0, 65535);
}

void readKube(ConfigReader& r, KubeConfig& k) {
  r.optional("api_server", k.api_server);
  if (!k.api_server.empty() && k.api_server.rfind("https://", 0) != 0 &&
      k.api_server.rfind("http://", 0) != 0) {
    r.error("api_server", "must start with https:// or http://");
  }
  r.optional("ca_file", k.ca_file);
  r.optional("token_file", k.token_file);
  r.optional("insecure_skip_verify", k.insecure_skip_verify);
  r.optional("scheduler_name", k.scheduler_name);
  if (k.scheduler_name.empty()) r.error("scheduler_name", "must not be empty");
  r.optional("component", k.component);
  r.optional("gpu_resource", k.gpu_resource);
  r.optional("gpu_type_label", k.gpu_type_label);
  r.optional("default_gpu_type", k.default_gpu_type);
  r.optional("gpu_milli_annotation", k.gpu_milli_annotation);
  r.optional("gpu_milli_resource", k.gpu_milli_resource);
  r.optional("queue_annotation", k.queue_annotation);
  r.optional("tier_annotation", k.tier_annotation);
  r.optional("gpu_types_annotation", k.gpu_types_annotation);
  r.optional("min_gpu_type_annotation", k.min_gpu_type_annotation);
  r.optional("group_annotation", k.group_annotation);
  r.optional("group_size_annotation", k.group_size_annotation);
  r.optional("watch_timeout_s", k.watch_timeout_s, 1, 3600);
  r.optional("backoff_initial_ms", k.backoff_initial_ms, 1, 60'000);
  r.optional("backoff_max_ms", k.backoff_max_ms, 1, 600'000);
  r.optional("retry_interval_ms", k.retry_interval_ms, 10, 3'600'000);
  r.optional("request_timeout_ms", k.request_timeout_ms, 100, 600'000);
  r.optional("max_binds_in_flight", k.max_binds_in_flight, 1, 1024);
  if (k.backoff_max_ms < k.backoff_initial_ms) {
    r.error("backoff_max_ms", "must be at least backoff_initial_ms");
  }
}

}  // namespace

Result<ServeConfig> parseServeConfigString(const std::string& yaml_text) {
  INFERA_ASSIGN_OR_RETURN(YAML::Node root, loadYamlString(yaml_text));
  ServeConfig cfg;
  ConfigErrors errors;
  ConfigReader r(root, &errors);
  r.object("kube", [&](ConfigReader& k) { readKube(k, cfg.kube); });
  r.optional("policy", cfg.policy);
  const auto& names = policyNames();
  if (std::find(names.begin(), names.end(), cfg.policy) == names.end()) {
    r.error("policy", "unknown policy '" + cfg.policy + "'");
  }
  r.object("metrics", [&](ConfigReader& m) { readListen(m, cfg.metrics); });
  r.object("webhook", [&](ConfigReader& w) {
    cfg.webhook.enabled = true;
    w.optional("enabled", cfg.webhook.enabled);
    w.optional("host", cfg.webhook.listen.host);
    w.optional("port", cfg.webhook.listen.port, 0, 65535);
    w.optional("gpu_pods_only", cfg.webhook.gpu_pods_only);
    w.optional("cpu_per_gpu", cfg.webhook.cpu_per_gpu, 0.0, 1024.0);
    w.optional("memory_gib_per_gpu", cfg.webhook.memory_gib_per_gpu, 0.0, 16384.0);
    if (w.present("tls")) {
      net::TlsServerConfig tls;
      w.object("tls", [&](ConfigReader& t) { net::readTlsServerConfig(t, tls); });
      cfg.webhook.tls = tls;
    } else if (cfg.webhook.enabled) {
      w.error("tls", "is required: the API server calls webhooks over HTTPS only");
    }
  });
  r.object("leader_election", [&](ConfigReader& l) {
    cfg.leader_election.enabled = true;
    l.optional("enabled", cfg.leader_election.enabled);
    l.optional("lease_namespace", cfg.leader_election.lease_namespace);
    l.optional("lease_name", cfg.leader_election.lease_name);
    l.optional("identity", cfg.leader_election.identity);
    l.optional("lease_duration_s", cfg.leader_election.lease_duration_s, 1, 3600);
    l.optional("renew_interval_ms", cfg.leader_election.renew_interval_ms, 10, 3'600'000);
  });
  r.object("reclaim", [&](ConfigReader& c) {
    ReclaimConfig& rc = cfg.reclaim;
    rc.enabled = true;
    c.optional("enabled", rc.enabled);
    c.required("prometheus_url", rc.prometheus_url);
    if (!rc.prometheus_url.empty() && rc.prometheus_url.rfind("http://", 0) != 0 &&
        rc.prometheus_url.rfind("https://", 0) != 0) {
      c.error("prometheus_url", "must start with http:// or https://");
    }
    c.optional("query", rc.query);
    c.optional("utilization_scale", rc.utilization_scale, 1e-9, 1e9);
    c.optional("namespace_label", rc.namespace_label);
    c.optional("pod_label", rc.pod_label);
    c.optional("interval_ms", rc.interval_ms, 10, 86'400'000);
    c.optional("warn_before_s", rc.warn_before_s, 0, 30 * 86'400);
    c.optional("dry_run", rc.dry_run);
  });
  r.object("repack", [&](ConfigReader& c) {
    RepackServeConfig& rp = cfg.repack;
    rp.enabled = true;
    c.optional("enabled", rp.enabled);
    c.optional("interval_ms", rp.interval_ms, 10, 86'400'000);
    c.optional("max_moves", rp.max_moves, 1, 10'000);
    c.optional("min_age_s", rp.min_age_s, 0, 30 * 86'400);
    c.optional("min_tier", rp.min_tier, 0, 2);
    c.optional("node_gpus", rp.node_gpus, 0, kMaxGpusPerNode);
    c.optional("target_empty_nodes", rp.target_empty_nodes, 0, 1'000'000);
    bool dry_run = true;
    c.optional("dry_run", dry_run);
    if (!dry_run) c.error("dry_run", "only recommendations (dry_run: true) are built so far");
  });
  r.object("scheduling", [&](ConfigReader& s) { readSchedulingConfig(s, cfg.scheduling); });
  r.finish();
  INFERA_RETURN_IF_ERROR(errors.toStatus());
  return cfg;
}

Result<ServeConfig> loadServeConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::notFound("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parseServeConfigString(ss.str());
  if (!r.ok()) return r.status().withContext(path);
  return r;
}

std::vector<std::string> restartNeeded(const ServeConfig& running, const ServeConfig& next) {
  std::vector<std::string> out;
  if (!(running.kube == next.kube)) out.push_back("kube");
  if (!(running.metrics == next.metrics)) out.push_back("metrics");
  if (!(running.leader_election == next.leader_election)) out.push_back("leader_election");
  if (running.webhook.enabled != next.webhook.enabled) out.push_back("webhook.enabled");
  if (!(running.webhook.listen == next.webhook.listen)) out.push_back("webhook.host/port");
  if (running.webhook.tls != next.webhook.tls) out.push_back("webhook.tls");
  if (running.reclaim.enabled != next.reclaim.enabled) out.push_back("reclaim.enabled");
  if (running.reclaim.prometheus_url != next.reclaim.prometheus_url) {
    out.push_back("reclaim.prometheus_url");
  }
  if (running.repack.enabled != next.repack.enabled) out.push_back("repack.enabled");
  return out;
}

}  // namespace infera::sched::kube
