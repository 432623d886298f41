#include "server/config.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
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

static Result<Config> loadConfigNode(const YAML::Node& root, const std::string& path);

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
  r.object("tracing", [&](ConfigReader& t) { obs::readTracingConfig(t, cfg.tracing); });
  r.optionalEnum("config_store", cfg.config_store, {"file", "shared"});
  r.optional("config_poll_ms", cfg.config_poll_ms, 50, 60'000);
  gateway::readModels(r, emulator_names, cfg.gateway);
  r.finish();
  if (cfg.config_store == "shared" && !cfg.access.enabled) {
    r.error("config_store",
            "\"shared\" keeps the config in governance.store: add a governance section (a "
            "postgresql:// store for replicas on several hosts)");
  }
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
  return loadConfigNode(root, path);
}

Result<Config> loadConfigText(const std::string& yaml, const std::string& path) {
  auto root = loadYamlString(yaml);
  if (!root.ok()) return root.status().withContext(path);
  return loadConfigNode(*root, path);
}

static Result<Config> loadConfigNode(const YAML::Node& root, const std::string& path) {
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

namespace {

// "" when `path` (a file or directory the server creates or appends to) can be made by this user,
// else why not.
std::string creatable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return ec.message();
  if (fs::exists(p, ec)) {
    return ::access(p.c_str(), W_OK) == 0 ? "" : p.string() + " is not writable by this user";
  }
  for (fs::path a = p.parent_path();; a = a.parent_path()) {
    if (fs::exists(a, ec)) {
      if (!fs::is_directory(a, ec)) return a.string() + " is not a directory";
      if (::access(a.c_str(), W_OK | X_OK) != 0) {
        return a.string() + " is not writable by this user";
      }
      return "";
    }
    if (a == a.parent_path()) return "no existing ancestor";
  }
}

std::string readable(const std::string& path) {
  return ::access(path.c_str(), R_OK) == 0 ? "" : std::string(std::strerror(errno));
}

}  // namespace

std::vector<std::string> checkHostPaths(const Config& c) {
  std::vector<std::string> out;
  const auto need = [&](const std::string& key, const std::string& path, bool write) {
    if (path.empty()) return;
    const std::string why = write ? creatable(path) : readable(path);
    if (!why.empty()) {
      out.push_back(key + ": cannot " + (write ? "create or write " : "read ") + path + ": " + why);
    }
  };
  if (c.access_log != "-") need("access_log", c.access_log, true);
  for (const auto* l : {&c.listen, &c.admin}) {
    if (!l->tls) continue;
    const std::string k = l == &c.listen ? "listen.tls." : "admin.tls.";
    need(k + "cert_file", l->tls->cert_file, false);
    need(k + "key_file", l->tls->key_file, false);
    need(k + "client_ca_file", l->tls->client_ca_file, false);
  }
  const auto sqlite = [&](const std::string& key, const std::string& store) {
    if (store.rfind("sqlite:", 0) == 0) need(key, store.substr(7), true);
  };
  if (c.access.enabled) {
    sqlite("governance.store", c.access.store);
    need("governance.admin_token_file", c.access.admin_token_file, true);
  }
  if (c.features.enabled) {
    if (c.features.store == "rocksdb") need("features.data_dir", c.features.data_dir, true);
    need("features.repository", c.features.repository, false);
  }
  if (c.vectors.enabled) need("vectors.data_dir", c.vectors.data_dir, true);
  if (c.registry.enabled) {
    need("registry.data_dir", c.registry.data_dir, true);
    sqlite("registry.store", c.registry.store);
  }
  if (c.batch.enabled) {
    need("batch.data_dir", c.batch.data_dir, true);
    sqlite("batch.store", c.batch.store);
  }
  return out;
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
  if (running.config_store != next.config_store) out.push_back("config_store");
  const auto& rt = running.tracing;
  const auto& nt = next.tracing;
  if (rt.enabled != nt.enabled || rt.endpoint != nt.endpoint ||
      rt.sample_ratio != nt.sample_ratio || rt.errors_always != nt.errors_always ||
      rt.service_name != nt.service_name || rt.headers != nt.headers ||
      rt.max_queue_spans != nt.max_queue_spans || rt.batch_spans != nt.batch_spans ||
      rt.export_interval_ms != nt.export_interval_ms || rt.timeout_ms != nt.timeout_ms ||
      rt.max_retries != nt.max_retries) {
    out.push_back("tracing");
  }
  return out;
}

}  // namespace infera::server
