#include "gateway/internal/routes.h"

#include <chrono>

#include "core/log.h"
#include "gateway/internal/split.h"
#include "net/http.h"

namespace infera::gateway {

int codeClassIndex(int status) {
  const int c = status / 100;
  return (c >= 1 && c <= 5) ? c - 1 : 5;
}

GatewayMetrics::GatewayMetrics(obs::MetricsRegistry& r)
    : registry(r),
      requests(r.counterFamily("infera_gateway_requests_total",
                               "Data-plane requests by model, deployment and status class.",
                               {"model", "deployment", "code_class"})),
      duration(r.histogramFamily("infera_gateway_request_duration_seconds",
                                 "Request latency seen by the client, until the last byte.",
                                 {"model"}, obs::MetricsRegistry::latencyBuckets())),
      ttft(r.histogramFamily("infera_gateway_time_to_first_token_seconds",
                             "Streams: time from the request to the first body chunk sent.",
                             {"model"}, obs::MetricsRegistry::latencyBuckets())),
      upstream_latency(r.histogramFamily("infera_gateway_upstream_latency_seconds",
                                         "Time from sending to an endpoint to its response head.",
                                         {"deployment"}, obs::MetricsRegistry::latencyBuckets())),
      retries(r.counterFamily("infera_gateway_upstream_retries_total",
                              "Tries after the first (failover to another endpoint).",
                              {"deployment"})),
      ejections(r.counterFamily("infera_gateway_endpoint_ejections_total",
                                "Passive outlier ejections of endpoints.", {"deployment"})),
      errors(r.counterFamily("infera_gateway_errors_total",
                             "Errors answered by the gateway itself, by error code.", {"code"})),
      endpoint_healthy(r.gaugeFamily("infera_gateway_endpoint_healthy",
                                     "1 when the endpoint passes active health checks.",
                                     {"deployment", "endpoint"})),
      reloads(r.counterFamily("infera_gateway_config_reloads_total", "Config reloads by result.",
                              {"result"})),
      client_aborts(r.counterFamily("infera_gateway_client_aborts_total",
                                    "Requests whose client left before the response ended.",
                                    {"model"})),
      stream_errors(r.counterFamily("infera_gateway_stream_errors_total",
                                    "Streams ended by an upstream failure after they started.",
                                    {"model"})),
      arm_requests(r.counterFamily("infera_gateway_arm_requests_total",
                                   "Requests served by an experiment arm, by status class.",
                                   {"model", "arm", "code_class"})),
      arm_errors(r.counterFamily("infera_gateway_arm_errors_total",
                                 "Requests of an experiment arm answered with status >= 500.",
                                 {"model", "arm"})),
      arm_duration(
          r.histogramFamily("infera_gateway_arm_request_duration_seconds",
                            "Latency of an experiment arm's requests, until the last byte.",
                            {"model", "arm"}, obs::MetricsRegistry::latencyBuckets())),
      arm_ttft(
          r.histogramFamily("infera_gateway_arm_time_to_first_token_seconds",
                            "Time from an experiment arm's request to the first body byte sent.",
                            {"model", "arm"}, obs::MetricsRegistry::latencyBuckets())),
      arm_tokens(r.counterFamily("infera_gateway_arm_tokens_total",
                                 "Tokens of an experiment arm's answers.",
                                 {"model", "arm", "kind"})),
      shadow_requests(r.counterFamily(
          "infera_gateway_shadow_requests_total",
          "Requests mirrored to a shadow target, by outcome (ok, error, failed, shed).",
          {"model", "shadow", "outcome"})),
      shadow_duration(
          r.histogramFamily("infera_gateway_shadow_duration_seconds",
                            "Latency of shadow requests (their own deadline bounds it).",
                            {"model", "shadow"}, obs::MetricsRegistry::latencyBuckets())),
      shadow_matches(r.counterFamily(
          "infera_gateway_shadow_comparisons_total",
          "Deterministic shadow answers compared with the primary's (match, mismatch).",
          {"model", "shadow", "result"})),
      captures(r.counterFamily(
          "infera_gateway_captures_total",
          "Inferences captured for review and training data (sampled or flagged).", {"model"})),
      engine_load(r.gaugeFamily(
          "infera_gateway_engine_load",
          "Engine-aware routing: requests running + waiting on the endpoint's engine at its last "
          "scrape (-1: unknown).",
          {"deployment", "endpoint"})),
      engine_kv(r.gaugeFamily("infera_gateway_engine_kv_cache_usage",
                              "Engine-aware routing: the engine's KV-cache usage, 0..1, at its "
                              "last scrape (-1: unknown).",
                              {"deployment", "endpoint"})),
      engine_age(r.gaugeFamily("infera_gateway_engine_signal_age_seconds",
                               "Engine-aware routing: seconds since the endpoint's last good "
                               "metrics scrape (-1: never); past stale_ms its signals are unknown.",
                               {"deployment", "endpoint"})),
      engine_scrape_errors(r.counterFamily(
          "infera_gateway_engine_scrape_errors_total",
          "Engine-aware routing: metrics scrapes that failed, timed out or did not parse.",
          {"deployment", "endpoint"})),
      prefix_blocks(r.counterFamily(
          "infera_gateway_prefix_blocks_total",
          "Engine-aware routing: prompt blocks of the requests sent to an endpoint (sent) and of "
          "those, the leading ones the gateway had sent there before (hit).",
          {"deployment", "endpoint", "result"})),
      prefix_overwrites(r.counterFamily(
          "infera_gateway_prefix_index_overwrites_total",
          "Engine-aware routing: prefix-index entries overwritten for want of room.", {"model"})),
      flow_queued(r.gaugeFamily("infera_gateway_flow_queued",
                                "Flow control: requests waiting in the gateway for room, by "
                                "priority.",
                                {"model", "priority"})),
      flow_wait(r.histogramFamily("infera_gateway_flow_wait_seconds",
                                  "Flow control: time requests waited in the gateway before "
                                  "being sent.",
                                  {"model", "priority"}, obs::MetricsRegistry::latencyBuckets())),
      flow_outcomes(r.counterFamily(
          "infera_gateway_flow_requests_total",
          "Flow control: requests that had to wait, by priority, team and outcome (queued, "
          "admitted, timeout, shed, left).",
          {"model", "priority", "team", "outcome"})),
      deployment_in_flight(r.gaugeFamily(
          "infera_gateway_deployment_in_flight",
          "Requests sent to a deployment's endpoints and not yet ended, over every worker (an "
          "autoscaler's signal).",
          {"model", "deployment"})),
      deployment_tokens(r.counterFamily(
          "infera_gateway_deployment_tokens_total",
          "Tokens of a deployment's answers whose usage the gateway read (governed requests and "
          "experiment arms), by kind.",
          {"model", "deployment", "kind"})),
      in_flight(r.gaugeFamily("infera_gateway_requests_in_flight", "Data-plane requests in flight.")
                    ->gauge()),
      active_streams(
          r.gaugeFamily("infera_gateway_active_streams", "Streaming responses in flight.")
              ->gauge()) {
  for (const char* code :
       {"invalid_json", "missing_model", "model_not_found", "no_healthy_endpoint",
        "upstream_timeout", "upstream_unavailable", "upstream_error", "not_found",
        "method_not_allowed", "not_ready", "model_saturated", "invalid_priority", "other"}) {
    error_counters.emplace_back(code, errors->counter({code}));
  }
}

obs::Counter* GatewayMetrics::errorCounter(std::string_view code) const {
  for (const auto& [name, counter] : error_counters) {
    if (name == code) return counter;
  }
  return error_counters.back().second;
}

Result<std::shared_ptr<const RouteTable>> buildRouteTable(
    const GatewayConfig& config, const std::vector<ModelConfig>& models,
    const std::unordered_map<std::string, std::string>& emulator_urls,
    std::unordered_map<std::string, std::shared_ptr<EndpointShared>>& shared,
    GatewayMetrics& metrics, int64_t generation, PrefixIndexes* prefix_indexes) {
  auto table = std::make_shared<RouteTable>();
  table->generation = generation;
  table->region = config.region;
  table->region_margin = config.region_margin;
  table->outlier = config.outlier;
  table->health_check = config.health_check;
  const int workers = std::max(1, metrics.registry.shards());
  const auto created = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  for (const auto& mc : models) {
    auto route = std::make_unique<Route>();
    route->model = mc.name;
    route->limited.limits = mc.limits;
    route->limited.req = "m:" + mc.name + ":r";
    route->limited.tok = "m:" + mc.name + ":t";
    route->price = mc.price;
    route->cache = mc.cache;
    route->duration = metrics.duration->histogram({mc.name});
    route->ttft = metrics.ttft->histogram({mc.name});
    route->client_aborts = metrics.client_aborts->counter({mc.name});
    route->stream_errors = metrics.stream_errors->counter({mc.name});
    for (int c = 0; c < kCodeClasses; ++c) {
      const std::string cls = c < 5 ? std::to_string(c + 1) + "xx" : "other";
      route->no_deployment_by_class[c] = metrics.requests->counter({mc.name, "", cls});
    }
    for (const auto& dc : mc.deployments) {
      auto dep = std::make_unique<Deployment>();
      dep->name = dc.name;
      dep->model = mc.name;
      dep->upstream_model = dc.upstream_model;
      dep->timeouts = dc.timeouts;
      dep->retry = dc.retry;
      dep->limited.limits = dc.limits;
      dep->continuous_usage = dc.continuous_usage;
      dep->routing = dc.routing;
      dep->limited.req = "d:" + mc.name + "/" + dc.name + ":r";
      dep->limited.tok = "d:" + mc.name + "/" + dc.name + ":t";
      for (int c = 0; c < kCodeClasses; ++c) {
        const std::string cls = c < 5 ? std::to_string(c + 1) + "xx" : "other";
        dep->requests_by_class[c] = metrics.requests->counter({mc.name, dc.name, cls});
      }
      dep->prompt_tokens = metrics.deployment_tokens->counter({mc.name, dc.name, "prompt"});
      dep->completion_tokens = metrics.deployment_tokens->counter({mc.name, dc.name, "completion"});
      dep->upstream_latency = metrics.upstream_latency->histogram({dc.name});
      dep->retries = metrics.retries->counter({dc.name});
      dep->ejections = metrics.ejections->counter({dc.name});
      for (const auto& ec : dc.endpoints) {
        Endpoint ep;
        std::string url = ec.url;
        if (!ec.emulator.empty()) {
          const auto it = emulator_urls.find(ec.emulator);
          if (it == emulator_urls.end()) {
            return Status::failedPrecondition(
                "emulator '" + ec.emulator + "' is not running (emulators start with the process)");
          }
          url = it->second;
          ep.label = "emulator:" + ec.emulator;
        } else {
          ep.label = ec.url;
        }
        auto addr = net::resolveUrl(url, ec.tls);  // https://: builds its TLS context (reads files)
        if (!addr.ok()) {
          return addr.status().withContext("models." + mc.name + ".deployments." + dc.name +
                                           " endpoint (line " + std::to_string(ec.line) + ")");
        }
        ep.address = *addr;
        ep.host_header = addr->hostHeader();
        ep.key = dc.name + "|" + url;
        ep.region = ec.region;
        ep.local = !config.region.empty() && ec.region == config.region;
        if (config.region.empty() || ec.region.empty()) ep.local = true;
        ep.weight = ec.weight;
        ep.max_inflight_per_worker = std::max(1, (ec.max_concurrent + workers - 1) / workers);
        ep.max_batch_per_worker = ep.max_inflight_per_worker;
        if (dc.max_batch_share < 1) {
          route->batch_capped = true;
          ep.max_batch_per_worker =
              std::max(1, static_cast<int>(dc.max_batch_share * ep.max_inflight_per_worker + 1e-9));
          if (dc.max_batch_share * ep.max_inflight_per_worker < 1 - 1e-9) {
            // The share rounds up to one slot per worker: batch work may hold more than asked.
            INFERA_LOG(componentLogger("gateway"), warn,
                       "model {} deployment {} endpoint {}: max_batch_share {} of {} slots per "
                       "worker (max_concurrent {} over {} workers) is under one; batch work may "
                       "hold 1 per worker (a share of {:.3f})",
                       mc.name, dc.name, ep.label, dc.max_batch_share, ep.max_inflight_per_worker,
                       ec.max_concurrent, workers, 1.0 / ep.max_inflight_per_worker);
          }
          ep.batch_idle_ns = dc.batch_idle_ms * 1'000'000;
        }
        ep.protocol = ec.protocol;
        auto& sh = shared[ep.key];
        if (!sh) sh = std::make_shared<EndpointShared>(workers);
        // With active checks off nothing would ever mark an endpoint healthy again.
        if (!config.health_check.enabled) sh->healthy = true;
        ep.shared = sh;
        ep.healthy_gauge = metrics.endpoint_healthy->gauge({dc.name, ep.label});
        ep.deployment = dep.get();
        if (dc.routing.enabled) {
          ep.key_hash = loraHash(ep.key);
          ep.engine_load = metrics.engine_load->gauge({dc.name, ep.label});
          ep.engine_kv = metrics.engine_kv->gauge({dc.name, ep.label});
          ep.engine_age = metrics.engine_age->gauge({dc.name, ep.label});
          metrics.engine_scrape_errors->setCallback({dc.name, ep.label}, [sh] {
            return static_cast<double>(sh->engine.failures.load(std::memory_order_relaxed));
          });
          ep.prefix_hit_blocks = metrics.prefix_blocks->counter({dc.name, ep.label, "hit"});
          ep.prefix_sent_blocks = metrics.prefix_blocks->counter({dc.name, ep.label, "sent"});
        }
        const auto index = static_cast<uint32_t>(table->endpoints.size());
        dep->endpoints.push_back(index);
        (ep.protocol == Protocol::kKServe ? route->kserve_endpoints : route->openai_endpoints)
            .push_back(index);
        table->endpoints.push_back(std::move(ep));
      }
      {
        // Summed at scrape time from the endpoints' per-worker counts (replaced on reload).
        std::vector<std::shared_ptr<EndpointShared>> eps;
        for (const uint32_t idx : dep->endpoints) eps.push_back(table->endpoints[idx].shared);
        metrics.deployment_in_flight->setCallback({mc.name, dc.name}, [eps = std::move(eps)] {
          double n = 0;
          for (const auto& e : eps) {
            for (int w = 0; w < e->workers; ++w) {
              n += e->views[static_cast<size_t>(w)].in_flight.load(std::memory_order_relaxed);
            }
          }
          return n;
        });
      }
      if (!route->first_deployment) {
        route->first_deployment = dep.get();
        if (dep->routing.enabled) {
          route->engine = &dep->routing;
          route->lora_hash = loraHash(dep->upstream_model);
          if (dep->routing.flow_control) {
            (void)parsePriority(dep->routing.default_priority, route->default_priority);
            for (int p = 0; p < kPriorities; ++p) {
              const std::string name(priorityName(static_cast<Priority>(p)));
              route->flow_queued[p] = metrics.flow_queued->gauge({mc.name, name});
              route->flow_wait[p] = metrics.flow_wait->histogram({mc.name, name});
            }
          }
        }
      }
      table->deployments.push_back(std::move(dep));
    }
    if (route->engine) {
      // The model's prefix index, kept across reloads while its endpoints fit its 64 slots (a
      // fresh one when they do not: the slots of endpoints gone are never reused).
      std::vector<std::string> keys;
      for (const uint32_t idx : route->openai_endpoints) keys.push_back(table->endpoints[idx].key);
      const auto entries = static_cast<size_t>(route->engine->prefix_index_entries);
      std::shared_ptr<PrefixIndex>* kept = prefix_indexes ? &(*prefix_indexes)[mc.name] : nullptr;
      if (kept && *kept && (*kept)->capacity() >= entries && (*kept)->fits(keys)) {
        route->prefix_index = *kept;
      } else {
        route->prefix_index = std::make_shared<PrefixIndex>(entries);
        if (kept) *kept = route->prefix_index;
      }
      route->turn = std::make_shared<std::atomic<uint64_t>>(0);
      for (const uint32_t idx : route->openai_endpoints) {
        Endpoint& ep = table->endpoints[idx];
        ep.prefix_slot = route->prefix_index->slotFor(ep.key);
      }
      metrics.prefix_overwrites->setCallback({mc.name}, [keep = route->prefix_index] {
        return static_cast<double>(keep->overwrites());
      });
    }
    route->capture = mc.capture;
    if (mc.capture.enabled()) route->captures = metrics.captures->counter({mc.name});
    route->tag_responses = mc.tag_responses;
    route->route_header = {"x-infera-route", mc.name};
    auto addName = [&](const std::string& name) {
      table->by_name[name] = route.get();
      table->names.emplace_back(name, route.get());
    };
    addName(mc.name);
    for (const auto& alias : mc.aliases) addName(alias);
    table->routes.push_back(std::move(route));
  }
  // Experiments name other routes of the table: resolved once every route exists. An arm (or a
  // shadow) naming no route, or another experiment, is left out.
  for (size_t i = 0; i < models.size(); ++i) {
    const ModelConfig& mc = models[i];
    Route& route = *table->routes[i];
    auto target = [&](const std::string& name) -> const Route* {
      const auto it = table->by_name.find(name);
      if (it == table->by_name.end() || !it->second->arms.empty() || it->second == &route)
        return nullptr;
      return it->second;
    };
    for (const auto& ac : mc.split.arms) {
      const Route* r = target(ac.target);
      if (!r) continue;
      Arm arm;
      arm.name = ac.name;
      arm.route = r;
      arm.weight = static_cast<uint32_t>(std::max(0, ac.weight));
      arm.header = {"x-infera-arm", ac.name};
      for (int c = 0; c < kCodeClasses; ++c) {
        const std::string cls = c < 5 ? std::to_string(c + 1) + "xx" : "other";
        arm.requests_by_class[c] = metrics.arm_requests->counter({mc.name, ac.name, cls});
      }
      arm.errors = metrics.arm_errors->counter({mc.name, ac.name});
      arm.duration = metrics.arm_duration->histogram({mc.name, ac.name});
      arm.ttft = metrics.arm_ttft->histogram({mc.name, ac.name});
      arm.prompt_tokens = metrics.arm_tokens->counter({mc.name, ac.name, "prompt"});
      arm.completion_tokens = metrics.arm_tokens->counter({mc.name, ac.name, "completion"});
      route.arm_weights.push_back(arm.weight);
      route.arms.push_back(std::move(arm));
    }
    route.sticky_by = mc.split.sticky_by;
    route.sticky_header = mc.split.sticky_header;
    route.salt = mc.split.salt;
    if (!mc.shadow.target.empty() && mc.shadow.share > 0) {
      route.shadow = target(mc.shadow.target);
      if (route.shadow) {
        route.shadow_share = mc.shadow.share;
        route.shadow_timeout_ms = mc.shadow.timeout_ms;
        route.shadow_max_concurrent = std::max(1, mc.shadow.max_concurrent);
        const std::string& sh = route.shadow->model;
        ShadowCells& c = route.shadow_cells;
        c.ok = metrics.shadow_requests->counter({mc.name, sh, "ok"});
        c.error = metrics.shadow_requests->counter({mc.name, sh, "error"});
        c.failed = metrics.shadow_requests->counter({mc.name, sh, "failed"});
        c.shed = metrics.shadow_requests->counter({mc.name, sh, "shed"});
        c.match = metrics.shadow_matches->counter({mc.name, sh, "match"});
        c.mismatch = metrics.shadow_matches->counter({mc.name, sh, "mismatch"});
        c.duration = metrics.shadow_duration->histogram({mc.name, sh});
      }
    }
  }
  table->created = created;
  table->models_json = modelsJson(*table, [](const std::string&, const Route&) { return true; });
  return std::shared_ptr<const RouteTable>(std::move(table));
}

namespace {

// The id a request is sticky by (empty: none).
std::string_view stickyId(const Route& r, const RequestKeys& keys) {
  if (r.sticky_by == StickyBy::kHeader) {
    if (keys.headers) {
      for (const auto& h : *keys.headers) {
        if (h.name == r.sticky_header) return h.value;
      }
    }
    return {};
  }
  if (r.sticky_by == StickyBy::kUser && !keys.user.empty()) return keys.user;
  return keys.key;
}

}  // namespace

const Route* findRoute(const RouteTable& table, std::string_view model) {
  const auto it = table.by_name.find(model);
  return it == table.by_name.end() ? nullptr : it->second;
}

Targets resolveTargets(const RouteTable& table, std::string_view model, Protocol protocol,
                       const RequestKeys& keys) {
  const Route* r = findRoute(table, model);
  return r ? resolveRoute(*r, protocol, keys) : Targets{};
}

Targets resolveRoute(const Route& route, Protocol protocol, const RequestKeys& keys) {
  Targets t;
  const Route* r = &route;
  if (!r->arms.empty()) {
    int arm = -1;
    if (!keys.forced_arm.empty()) {
      for (size_t i = 0; i < r->arms.size(); ++i) {
        if (r->arms[i].name == keys.forced_arm) arm = static_cast<int>(i);
      }
    }
    if (arm < 0) {
      const std::string_view id = stickyId(*r, keys);
      // No sticky id: a fresh draw (such requests spread by weight but stick to nothing).
      const uint64_t h = id.empty() ? keys.random : stickyHash(r->salt, id);
      arm = armForHash(r->arm_weights, h);
    }
    if (arm < 0) return t;
    t.split = r;
    t.arm = &r->arms[static_cast<size_t>(arm)];
    if (r->shadow && keys.shadow_draw < r->shadow_share) t.shadow = r->shadow;
    r = t.arm->route;
  } else if (r->shadow && keys.shadow_draw < r->shadow_share) {
    t.shadow = r->shadow;
  }
  t.route = r;
  t.endpoints = protocol == Protocol::kKServe ? &r->kserve_endpoints : &r->openai_endpoints;
  return t;
}

}  // namespace infera::gateway
