#include "gateway/config.h"

#include <cctype>

#include "core/config.h"

namespace infera::gateway {
namespace {

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

void readRouting(ConfigReader& r, EngineRoutingConfig& e) {
  std::string policy = "latency";
  r.optionalEnum("policy", policy, {"latency", "engine", "random", "round_robin"});
  e.enabled = policy != "latency";
  e.pick = policy == "random"        ? EnginePick::kRandom
           : policy == "round_robin" ? EnginePick::kRoundRobin
                                     : EnginePick::kScore;
  r.object("weights", [&](ConfigReader& w) {
    if (e.pick != EnginePick::kScore) w.error("", "apply to policy: engine only");
    w.optional("prefix", e.prefix_weight, 0, 1000);
    w.optional("queue", e.queue_weight, 0, 1000);
    w.optional("kv_cache", e.kv_weight, 0, 1000);
    w.optional("lora", e.lora_weight, 0, 1000);
    w.optional("session", e.session_weight, 0, 1000);
    w.optional("latency", e.latency_weight, 0, 1000);
  });
  r.optional("session_header", e.session_header);
  for (char& c : e.session_header)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  r.optional("max_waiting", e.max_waiting, 0, 1'000'000);
  r.optional("max_kv_usage", e.max_kv_usage, 0, 1);
  r.optional("metrics_interval_ms", e.metrics_interval_ms, 10, 60'000);
  r.optional("metrics_timeout_ms", e.metrics_timeout_ms, 1, 60'000);
  r.optional("stale_ms", e.stale_ms, 10, 3'600'000);
  r.optional("metrics_path", e.metrics_path);
  if (e.metrics_path.empty() || e.metrics_path[0] != '/') {
    r.error("metrics_path", "must start with / (got '" + e.metrics_path + "')");
  }
  r.optional("prefix_block_bytes", e.prefix_block_bytes, 16, 4096);
  r.optional("prefix_max_blocks", e.prefix_max_blocks, 1, kMaxPrefixBlocks);
  r.optional("prefix_index_entries", e.prefix_index_entries, 1024, 1 << 24);
  r.object("flow_control", [&](ConfigReader& f) {
    e.flow_control = true;
    f.optional("enabled", e.flow_control);
    f.optional("queue_timeout_ms", e.queue_timeout_ms, 1, 3'600'000);
    f.optional("max_queued", e.max_queued, 1, 65536);
    f.optionalEnum("fairness", e.fairness, {"team", "user", "none"});
    f.optionalEnum("default_priority", e.default_priority,
                   {"critical", "standard", "batch", "sheddable"});
    f.object("priorities", [&](ConfigReader& by) {
      if (!by.node().IsMap()) {
        by.error("", "must be a mapping with keys, users and teams");
        return;
      }
      auto names = [](ConfigReader& m, std::map<std::string, std::string, std::less<>>& out) {
        if (!m.node().IsMap()) {
          m.error("", "must be a mapping of name: priority class");
          return;
        }
        for (const auto& kv : m.node()) {
          const std::string name = kv.first.Scalar();
          std::string p;
          if (m.optionalEnum(name, p, {"critical", "standard", "batch", "sheddable"})) {
            out[name] = p;
          }
        }
      };
      by.object("keys", [&](ConfigReader& m) { names(m, e.key_priorities); });
      by.object("users", [&](ConfigReader& m) { names(m, e.user_priorities); });
      by.object("teams", [&](ConfigReader& m) { names(m, e.team_priorities); });
    });
  });
  if (e.flow_control && e.max_waiting == 0 && e.max_kv_usage == 0) {
    r.error("flow_control", "needs max_waiting or max_kv_usage (what saturated means)");
  }
  if (e.flow_control && !e.enabled) {
    r.error("flow_control", "needs policy: engine (or random, round_robin)");
  }
  if (e.pick != EnginePick::kScore) {
    // No scorer: the choice among the endpoints the filters leave is random or in turn.
    e.prefix_weight = e.queue_weight = e.kv_weight = e.lora_weight = e.session_weight = 0;
    e.latency_weight = 0;
  }
  if (e.enabled && e.stale_ms <= e.metrics_interval_ms) {
    r.error("stale_ms", "must be longer than metrics_interval_ms (" +
                            std::to_string(e.metrics_interval_ms) + ")");
  }
}

}  // namespace

std::string_view protocolName(Protocol p) { return p == Protocol::kKServe ? "kserve" : "openai"; }

void readGatewaySettings(ConfigReader& r, GatewayConfig& cfg) {
  r.optional("region", cfg.region);
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
}

void readModels(ConfigReader& r, const std::set<std::string>& emulators, GatewayConfig& cfg) {
  std::set<std::string> names;  // models and aliases share one namespace
  r.forEach(
      "models",
      [&](ConfigReader& m, size_t) {
        ModelConfig mc;
        m.required("name", mc.name);
        m.optional("aliases", mc.aliases);
        m.object("limits", [&](ConfigReader& l) { access::readLimits(l, mc.limits); });
        m.object("price", [&](ConfigReader& p) { access::readPrice(p, mc.price); });
        m.optional("cache", mc.cache);
        if (!mc.name.empty() && !names.insert(mc.name).second) {
          m.error("name", "model or alias '" + mc.name + "' is defined twice");
        }
        for (const auto& a : mc.aliases) {
          if (!names.insert(a).second)
            m.error("aliases", "model or alias '" + a + "' is defined twice");
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
              d.object("limits", [&](ConfigReader& l) { access::readLimits(l, dc.limits); });
              d.optional("continuous_usage", dc.continuous_usage);
              d.object("tls", [&](ConfigReader& t) { net::readTlsClientConfig(t, dc.tls); });
              d.object("routing", [&](ConfigReader& t) { readRouting(t, dc.routing); });
              d.optional("max_batch_share", dc.max_batch_share, 0.01, 1);
              if (d.optional("batch_idle_ms", dc.batch_idle_ms, 0, 3'600'000) &&
                  dc.batch_idle_ms > 0) {
                if (dc.max_batch_share >= 1) {
                  d.error("batch_idle_ms",
                          "needs max_batch_share below 1 (what batch work holds "
                          "while interactive requests come)");
                } else if (!dc.routing.flow_control) {
                  d.error("batch_idle_ms",
                          "needs routing.flow_control: an interactive request that finds every "
                          "slot borrowed by batch work must wait for one, not be refused");
                }
              }
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
                    const bool https = ec.url.rfind("https://", 0) == 0;
                    if (!ec.url.empty() && !https && ec.url.rfind("http://", 0) != 0) {
                      e.error("url", "must start with http:// or https:// (got '" + ec.url + "')");
                    }
                    if (https) ec.tls = dc.tls;
                    if (e.present("tls")) {
                      if (!https) e.error("tls", "is for https:// endpoints only");
                      e.object("tls",
                               [&](ConfigReader& t) { net::readTlsClientConfig(t, ec.tls); });
                    }
                    if (!ec.emulator.empty() && emulators.count(ec.emulator) == 0) {
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
        // One route balances over all its deployments' endpoints: one policy for all of them.
        for (size_t i = 1; i < mc.deployments.size(); ++i) {
          if (!(mc.deployments[i].routing == mc.deployments[0].routing)) {
            m.error("deployments", "every deployment of a model needs the same routing: (" +
                                       mc.deployments[i].name + " differs from " +
                                       mc.deployments[0].name + ")");
            break;
          }
        }
        cfg.models.push_back(std::move(mc));
      },
      false);
}

}  // namespace infera::gateway
