#include "gateway/config.h"

#include <set>

#include "core/config.h"
#include "core/text.h"

namespace infera::gateway {
namespace {

void readListen(ConfigReader& r, ListenConfig& l) {
  r.optional("host", l.host);
  int port = l.port;
  r.optional("port", port, 0, 65535);
  l.port = static_cast<uint16_t>(port);
}

void readTimeouts(ConfigReader& r, TimeoutConfig& t) {
  r.optional("connect_ms", t.connect_ms, 1, 3'600'000);
  r.optional("first_byte_ms", t.first_byte_ms, 1, 3'600'000);
  r.optional("total_ms", t.total_ms, 1, 24 * 3'600'000LL);
}

void readRetry(ConfigReader& r, RetryConfig& rc) {
  r.optional("attempts", rc.attempts, 1, 10);
  r.optional("on_5xx", rc.on_5xx);
  r.optional("on_connect_failure", rc.on_connect_failure);
  r.optional("on_timeout", rc.on_timeout);
}

void readProtocol(ConfigReader& r, Protocol& p) {
  std::string s = protocolName(p).data();
  if (r.optionalEnum("protocol", s, {"openai", "kserve"})) {
    p = s == "kserve" ? Protocol::kKServe : Protocol::kOpenAi;
  }
}

void readLimits(ConfigReader& r, LimitConfig& l) {
  r.optional("rpm", l.rpm, 0, 1LL << 40);
  r.optional("tpm", l.tpm, 0, 1LL << 50);
}

void readGovernance(ConfigReader& g, GovernanceConfig& gc) {
  gc.enabled = true;
  g.optional("enabled", gc.enabled);
  g.optional("require_keys", gc.require_keys);
  g.optional("store", gc.store);
  if (!(gc.store.rfind("sqlite:", 0) == 0 || gc.store.rfind("postgresql://", 0) == 0 ||
        gc.store.rfind("postgres://", 0) == 0)) {
    g.error("store", "must be sqlite:PATH or a postgresql:// URL (got '" + redactUrl(gc.store) + "')");
  }
  g.optional("admin_token", gc.admin_token);
  g.optional("key_secret", gc.key_secret);
  // At most 4 s: changes reach every replica within 5 s (the poll plus the snapshot's rebuild).
  g.optional("sync_interval_ms", gc.sync_interval_ms, 10, 4'000);
  g.optional("usage_flush_ms", gc.usage_flush_ms, 10, 60'000);
  g.optional("usage_retention_days", gc.usage_retention_days, 0, 36'500);
  g.optional("usage_rollup_retention_days", gc.usage_rollup_retention_days, 0, 36'500);
  g.optional("default_max_tokens", gc.default_max_tokens, 1, 10'000'000);
  g.optional("redis", gc.redis);
  if (!gc.redis.empty() && gc.redis.rfind("redis://", 0) != 0) {
    g.error("redis", "must be a redis://host:port URL (got '" + redactUrl(gc.redis) + "')");
  }
  g.optional("redis_timeout_ms", gc.redis_timeout_ms, 1, 10'000);
  g.optionalEnum("redis_fallback", gc.redis_fallback, {"local", "open", "closed"});
  g.optional("replicas", gc.replicas, 1, 10'000);
  g.optional("redis_lease_ms", gc.redis_lease_ms, 0, 1'000);
  g.optional("user_header", gc.user_header);
  g.object("cache", [&](ConfigReader& c) {
    gc.cache.enabled = true;
    c.optional("enabled", gc.cache.enabled);
    c.optional("ttl_ms", gc.cache.ttl_ms, 1, 30LL * 86'400'000);
    c.optional("max_bytes", gc.cache.max_bytes, 1024, 1LL << 40);
    c.optional("max_entry_bytes", gc.cache.max_entry_bytes, 16, 1LL << 30);
    c.optional("redis", gc.cache.redis);
    c.optionalEnum("scope", gc.cache.scope, {"team", "global"});
  });
  if (gc.cache.redis && gc.redis.empty()) g.error("cache", "redis: true needs governance.redis");
}

}  // namespace

std::string_view protocolName(Protocol p) { return p == Protocol::kKServe ? "kserve" : "openai"; }

Result<GatewayConfig> parseGatewayConfig(const YAML::Node& root) {
  GatewayConfig cfg;
  ConfigErrors errors;
  ConfigReader r(root, &errors);
  r.optional("region", cfg.region);
  r.optional("workers", cfg.workers, 0, 256);
  r.object("listen", [&](ConfigReader& l) { readListen(l, cfg.listen); });
  r.object("admin", [&](ConfigReader& l) { readListen(l, cfg.admin); });
  int64_t v = static_cast<int64_t>(cfg.max_body_bytes);
  if (r.optional("max_body_bytes", v, 1024, 1LL << 32)) cfg.max_body_bytes = static_cast<size_t>(v);
  v = static_cast<int64_t>(cfg.max_header_bytes);
  if (r.optional("max_header_bytes", v, 1024, 1 << 20)) cfg.max_header_bytes = static_cast<size_t>(v);
  r.optional("idle_timeout_ms", cfg.idle_timeout_ms, 100, 3'600'000);
  r.optional("drain_timeout_ms", cfg.drain_timeout_ms, 0, 3'600'000);
  r.optional("access_log", cfg.access_log);
  r.optionalEnum("log_level", cfg.log_level, {"trace", "debug", "info", "warn", "error", "off"});
  r.optional("region_margin", cfg.region_margin, 0, 100);
  r.object("timeouts", [&](ConfigReader& t) { readTimeouts(t, cfg.timeouts); });
  r.object("retry", [&](ConfigReader& t) { readRetry(t, cfg.retry); });
  r.object("health_check", [&](ConfigReader& h) {
    auto& hc = cfg.health_check;
    h.optional("enabled", hc.enabled);
    h.optional("interval_ms", hc.interval_ms, 10, 3'600'000);
    h.optional("timeout_ms", hc.timeout_ms, 1, 600'000);
    h.optional("unhealthy_threshold", hc.unhealthy_threshold, 1, 100);
    h.optional("healthy_threshold", hc.healthy_threshold, 1, 100);
    h.optional("openai_path", hc.openai_path);
    h.optional("kserve_path", hc.kserve_path);
  });
  r.object("outlier", [&](ConfigReader& o) {
    o.optional("consecutive_failures", cfg.outlier.consecutive_failures, 1, 1000);
    o.optional("base_ejection_ms", cfg.outlier.base_ejection_ms, 1, 3'600'000);
    o.optional("max_ejection_ms", cfg.outlier.max_ejection_ms, 1, 24 * 3'600'000LL);
  });
  r.forEachEntry("emulators", [&](const std::string& name, ConfigReader& e) {
    emulator::EmulatorConfig ec;
    ec.port = 0;  // in-process emulators take a free port unless told otherwise
    emulator::readEmulatorConfig(e, ec);
    cfg.emulators[name] = ec;
  });

  r.object("governance", [&](ConfigReader& g) { readGovernance(g, cfg.governance); });

  std::set<std::string> names;  // models and aliases share one namespace
  std::vector<std::pair<std::string, int>> emulator_refs;
  r.forEach(
      "models",
      [&](ConfigReader& m, size_t) {
        ModelConfig mc;
        m.required("name", mc.name);
        m.optional("aliases", mc.aliases);
        m.object("limits", [&](ConfigReader& l) { readLimits(l, mc.limits); });
        m.object("price", [&](ConfigReader& p) {
          p.optional("prompt_per_1m", mc.price.prompt_per_1m, 0, 1e9);
          p.optional("completion_per_1m", mc.price.completion_per_1m, 0, 1e9);
        });
        m.optional("cache", mc.cache);
        if (!mc.name.empty() && !names.insert(mc.name).second) {
          m.error("name", "model or alias '" + mc.name + "' is defined twice");
        }
        for (const auto& a : mc.aliases) {
          if (!names.insert(a).second) m.error("aliases", "model or alias '" + a + "' is defined twice");
        }
        std::set<std::string> dep_names;
        m.forEach(
            "deployments",
            [&](ConfigReader& d, size_t di) {
              DeploymentConfig dc;
              dc.timeouts = cfg.timeouts;
              dc.retry = cfg.retry;
              d.optional("name", dc.name);
              if (dc.name.empty()) dc.name = mc.name + "-" + std::to_string(di);
              if (!dep_names.insert(dc.name).second) {
                d.error("name", "deployment '" + dc.name + "' is defined twice in this model");
              }
              d.optional("upstream_model", dc.upstream_model);
              if (dc.upstream_model.empty()) dc.upstream_model = mc.name;
              readProtocol(d, dc.protocol);
              d.object("timeouts", [&](ConfigReader& t) { readTimeouts(t, dc.timeouts); });
              d.object("retry", [&](ConfigReader& t) { readRetry(t, dc.retry); });
              d.object("limits", [&](ConfigReader& l) { readLimits(l, dc.limits); });
              d.optional("continuous_usage", dc.continuous_usage);
              d.forEach(
                  "endpoints",
                  [&](ConfigReader& e, size_t) {
                    EndpointConfig ec;
                    ec.protocol = dc.protocol;
                    ec.line = e.line();
                    e.optional("url", ec.url);
                    e.optional("emulator", ec.emulator);
                    if (ec.url.empty() == ec.emulator.empty()) {
                      e.error("", "needs exactly one of 'url' or 'emulator'");
                    }
                    if (!ec.url.empty() && ec.url.rfind("http://", 0) != 0) {
                      e.error("url", "must start with http:// (got '" + ec.url + "')");
                    }
                    if (!ec.emulator.empty()) emulator_refs.emplace_back(ec.emulator, ec.line);
                    if (!ec.emulator.empty() && cfg.emulators.count(ec.emulator) == 0) {
                      e.error("emulator", "names unknown emulator '" + ec.emulator +
                                              "' (define it under emulators:)");
                    }
                    readProtocol(e, ec.protocol);
                    e.optional("region", ec.region);
                    e.optional("weight", ec.weight, 1, 1000);
                    e.optional("max_concurrent", ec.max_concurrent, 1, 1'000'000);
                    dc.endpoints.push_back(ec);
                  },
                  true);
              mc.deployments.push_back(std::move(dc));
            },
            true);
        cfg.models.push_back(std::move(mc));
      },
      false);
  r.finish();
  INFERA_RETURN_IF_ERROR(errors.toStatus());
  return cfg;
}

Result<GatewayConfig> loadGatewayConfig(const std::string& path) {
  INFERA_ASSIGN_OR_RETURN(YAML::Node root, loadYamlFile(path));
  auto cfg = parseGatewayConfig(root);
  if (!cfg.ok()) return cfg.status().withContext(path);
  return cfg;
}

Result<GatewayConfig> loadGatewayConfigString(const std::string& yaml) {
  INFERA_ASSIGN_OR_RETURN(YAML::Node root, loadYamlString(yaml));
  return parseGatewayConfig(root);
}

}  // namespace infera::gateway
