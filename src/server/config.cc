#include "server/config.h"

#include <set>
#include <thread>

#include "access/access.h"
#include "core/config.h"

namespace infera::server {
namespace {

void readListen(ConfigReader& r, ListenConfig& l) {
  r.optional("host", l.host);
  int port = l.port;
  r.optional("port", port, 0, 65535);
  l.port = static_cast<uint16_t>(port);
  r.object("tls", [&](ConfigReader& t) { net::readTlsServerConfig(t, l.tls.emplace()); });
  if (r.optional("allowed_origins", l.allowed_origins)) {
    for (auto& o : l.allowed_origins) {
      for (auto& c : o) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
      if (o != "*" && o.find("://") == std::string::npos) {
        r.error("allowed_origins",
                "an origin is \"scheme://host[:port]\" or \"*\", got \"" + o + "\"");
      }
    }
  }
}

// A binding's deployments must be deployments of the config's models ("d" or "model/d").
void checkBindings(const Config& cfg, ConfigErrors& errors) {
  for (size_t i = 0; i < cfg.registry.bindings.size(); ++i) {
    const auto& b = cfg.registry.bindings[i];
    for (const auto& d : b.deployments) {
      const size_t slash = d.find('/');
      bool found = false;
      for (const auto& m : cfg.gateway.models) {
        if (slash != std::string::npos && m.name != d.substr(0, slash)) continue;
        const std::string dep = slash == std::string::npos ? d : d.substr(slash + 1);
        for (const auto& dc : m.deployments) found = found || dc.name == dep;
      }
      if (!found) {
        errors.add("registry.bindings[" + std::to_string(i) + "].deployments", b.line,
                   "names unknown deployment '" + d +
                       "' (a deployment of the models: \"name\" or \"model/name\")");
      }
    }
  }
}

}  // namespace

Result<Config> parseConfig(const YAML::Node& root) {
  Config cfg;
  ConfigErrors errors;
  ConfigReader r(root, &errors);
  r.optional("workers", cfg.workers, 0, 256);
  r.object("listen", [&](ConfigReader& l) { readListen(l, cfg.listen); });
  r.object("admin", [&](ConfigReader& l) { readListen(l, cfg.admin); });
  int64_t v = static_cast<int64_t>(cfg.max_body_bytes);
  if (r.optional("max_body_bytes", v, 1024, 1LL << 32)) cfg.max_body_bytes = static_cast<size_t>(v);
  v = static_cast<int64_t>(cfg.max_header_bytes);
  if (r.optional("max_header_bytes", v, 1024, 1 << 20))
    cfg.max_header_bytes = static_cast<size_t>(v);
  r.optional("max_connections", cfg.max_connections, 0, 10'000'000);
  r.optional("max_body_bytes_in_flight", cfg.max_body_bytes_in_flight, 0, 1LL << 40);
  r.optional("header_timeout_ms", cfg.header_timeout_ms, 100, 3'600'000);
  r.optional("idle_timeout_ms", cfg.idle_timeout_ms, 100, 3'600'000);
  r.optional("drain_timeout_ms", cfg.drain_timeout_ms, 0, 3'600'000);
  r.optional("access_log", cfg.access_log);
  r.optionalEnum("log_level", cfg.log_level, {"trace", "debug", "info", "warn", "error", "off"});
  gateway::readGatewaySettings(r, cfg.gateway);
  std::set<std::string> emulator_names;
  r.forEachEntry("emulators", [&](const std::string& name, ConfigReader& e) {
    emulator::EmulatorConfig ec;
    ec.port = 0;  // in-process emulators take a free port unless told otherwise
    emulator::readEmulatorConfig(e, ec);
    cfg.emulators[name] = ec;
    emulator_names.insert(name);
  });
  r.object("governance", [&](ConfigReader& g) { access::readAccessConfig(g, cfg.access); });
  r.object("features", [&](ConfigReader& f) { features::readFeaturesConfig(f, cfg.features); });
  r.object("vectors", [&](ConfigReader& vr) { vectors::readVectorsConfig(vr, cfg.vectors); });
  r.object("registry", [&](ConfigReader& rr) { registry::readRegistryConfig(rr, cfg.registry); });
  r.object("batch", [&](ConfigReader& br) { batch::readBatchConfig(br, cfg.batch); });
  r.object("scheduler", [&](ConfigReader& s) {
    s.required("metrics_url", cfg.scheduler_metrics_url);
    const std::string& u = cfg.scheduler_metrics_url;
    if (!u.empty() && u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0) {
      s.error("metrics_url", "must start with http:// or https://, got \"" + u + "\"");
    }
  });
  gateway::readModels(r, emulator_names, cfg.gateway);
  r.finish();
  checkBindings(cfg, errors);
  INFERA_RETURN_IF_ERROR(errors.toStatus());
  if (cfg.registry.enabled && cfg.registry.store.empty()) {
    // The registry shares access control's store (replicas share it); else a file of its own.
    cfg.registry.store =
        cfg.access.enabled ? cfg.access.store : "sqlite:" + cfg.registry.data_dir + "/registry.db";
  }
  if (cfg.batch.enabled && cfg.batch.store.empty()) {
    // Batches share access control's store (replicas share the work through it); else a file.
    cfg.batch.store =
        cfg.access.enabled ? cfg.access.store : "sqlite:" + cfg.batch.data_dir + "/batch.db";
  }
  return cfg;
}

Result<Config> loadConfig(const std::string& path) {
  INFERA_ASSIGN_OR_RETURN(YAML::Node root, loadYamlFile(path));
  auto cfg = parseConfig(root);
  if (!cfg.ok()) return cfg.status().withContext(path);
  // A relative feature repository is beside the config file, wherever infera runs from.
  std::string& repo = cfg->features.repository;
  if (!repo.empty() && repo[0] != '/' && path.rfind('/') != std::string::npos) {
    repo = path.substr(0, path.rfind('/') + 1) + repo;
  }
  return cfg;
}

Result<Config> loadConfigString(const std::string& yaml) {
  INFERA_ASSIGN_OR_RETURN(YAML::Node root, loadYamlString(yaml));
  return parseConfig(root);
}

std::vector<std::string> restartNeeded(const Config& running, const Config& next) {
  std::vector<std::string> out;
  auto workers = [](int n) {
    if (n > 0) return n;
    const int hc = static_cast<int>(std::thread::hardware_concurrency());
    return hc > 0 ? hc : 1;
  };
  if (workers(running.workers) != workers(next.workers)) out.push_back("workers");
  if (running.listen.host != next.listen.host || running.listen.port != next.listen.port)
    out.push_back("listen");
  if (running.admin.host != next.admin.host || running.admin.port != next.admin.port)
    out.push_back("admin");
  // Certificates reload; plain <-> TLS is another kind of port.
  if (running.listen.tls.has_value() != next.listen.tls.has_value())
    out.push_back("listen.tls (on or off)");
  if (running.admin.tls.has_value() != next.admin.tls.has_value())
    out.push_back("admin.tls (on or off)");
  if (running.listen.allowed_origins != next.listen.allowed_origins)
    out.push_back("listen.allowed_origins");
  if (running.admin.allowed_origins != next.admin.allowed_origins)
    out.push_back("admin.allowed_origins");
  if (running.max_body_bytes != next.max_body_bytes) out.push_back("max_body_bytes");
  if (running.max_connections != next.max_connections) out.push_back("max_connections");
  if (running.max_body_bytes_in_flight != next.max_body_bytes_in_flight)
    out.push_back("max_body_bytes_in_flight");
  if (running.header_timeout_ms != next.header_timeout_ms) out.push_back("header_timeout_ms");
  if (running.access_log != next.access_log) out.push_back("access_log");
  for (const auto& [name, ec] : next.emulators) {
    if (!running.emulators.count(name)) out.push_back("emulators." + name + " (new)");
  }
  for (auto& s : access::Access::restartNeeded(running.access, next.access))
    out.push_back(std::move(s));
  for (auto& s : features::restartNeeded(running.features, next.features))
    out.push_back(std::move(s));
  const auto& rv = running.vectors;
  const auto& nv = next.vectors;
  if (rv.enabled != nv.enabled || rv.data_dir != nv.data_dir || rv.path_prefix != nv.path_prefix ||
      rv.write_threads != nv.write_threads || rv.max_batch_points != nv.max_batch_points ||
      rv.max_queued_writes != nv.max_queued_writes ||
      rv.snapshot_min_points != nv.snapshot_min_points || rv.fsync != nv.fsync) {
    out.push_back("vectors");
  }
  for (auto& s : registry::restartNeeded(running.registry, next.registry))
    out.push_back(std::move(s));
  for (auto& s : batch::restartNeeded(running.batch, next.batch)) out.push_back(std::move(s));
  if (running.scheduler_metrics_url != next.scheduler_metrics_url) out.push_back("scheduler");
  return out;
}

}  // namespace infera::server
