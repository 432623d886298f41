#include "gateway/internal/routes.h"

#include <chrono>

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
                                 "Request latency seen by the client, until the last byte.", {"model"},
                                 obs::MetricsRegistry::latencyBuckets())),
      ttft(r.histogramFamily("infera_gateway_time_to_first_token_seconds",
                             "Streams: time from the request to the first body chunk sent.", {"model"},
                             obs::MetricsRegistry::latencyBuckets())),
      upstream_latency(r.histogramFamily("infera_gateway_upstream_latency_seconds",
                                         "Time from sending to an endpoint to its response head.",
                                         {"deployment"}, obs::MetricsRegistry::latencyBuckets())),
      retries(r.counterFamily("infera_gateway_upstream_retries_total",
                              "Tries after the first (failover to another endpoint).", {"deployment"})),
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
                                    "Requests whose client left before the response ended.", {"model"})),
      stream_errors(r.counterFamily("infera_gateway_stream_errors_total",
                                    "Streams ended by an upstream failure after they started.", {"model"})),
      in_flight(r.gaugeFamily("infera_gateway_requests_in_flight", "Data-plane requests in flight.")
                    ->gauge()),
      active_streams(r.gaugeFamily("infera_gateway_active_streams", "Streaming responses in flight.")
                         ->gauge()) {
  for (const char* code : {"invalid_json", "missing_model", "model_not_found", "no_healthy_endpoint",
                           "upstream_timeout", "upstream_unavailable", "upstream_error", "not_found",
                           "method_not_allowed", "not_ready", "other"}) {
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
    std::unordered_map<std::string, std::shared_ptr<EndpointShared>>& shared, GatewayMetrics& metrics,
    int64_t generation) {
  auto table = std::make_shared<RouteTable>();
  table->generation = generation;
  table->region = config.region;
  table->region_margin = config.region_margin;
  table->outlier = config.outlier;
  table->health_check = config.health_check;
  const int workers = std::max(1, metrics.registry.shards());
  const auto created = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
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
      dep->limited.req = "d:" + mc.name + "/" + dc.name + ":r";
      dep->limited.tok = "d:" + mc.name + "/" + dc.name + ":t";
      for (int c = 0; c < kCodeClasses; ++c) {
        const std::string cls = c < 5 ? std::to_string(c + 1) + "xx" : "other";
        dep->requests_by_class[c] = metrics.requests->counter({mc.name, dc.name, cls});
      }
      dep->upstream_latency = metrics.upstream_latency->histogram({dc.name});
      dep->retries = metrics.retries->counter({dc.name});
      dep->ejections = metrics.ejections->counter({dc.name});
      for (const auto& ec : dc.endpoints) {
        Endpoint ep;
        std::string url = ec.url;
        if (!ec.emulator.empty()) {
          const auto it = emulator_urls.find(ec.emulator);
          if (it == emulator_urls.end()) {
            return Status::failedPrecondition("emulator '" + ec.emulator +
                                              "' is not running (emulators start with the process)");
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
        ep.protocol = ec.protocol;
        auto& sh = shared[ep.key];
        if (!sh) sh = std::make_shared<EndpointShared>();
        // With active checks off nothing would ever mark an endpoint healthy again.
        if (!config.health_check.enabled) sh->healthy = true;
        ep.shared = sh;
        ep.healthy_gauge = metrics.endpoint_healthy->gauge({dc.name, ep.label});
        ep.deployment = dep.get();
        const auto index = static_cast<uint32_t>(table->endpoints.size());
        dep->endpoints.push_back(index);
        (ep.protocol == Protocol::kKServe ? route->kserve_endpoints : route->openai_endpoints)
            .push_back(index);
        table->endpoints.push_back(std::move(ep));
      }
      if (!route->first_deployment) route->first_deployment = dep.get();
      table->deployments.push_back(std::move(dep));
    }
    auto addName = [&](const std::string& name) {
      table->by_name[name] = route.get();
      table->names.emplace_back(name, route.get());
    };
    addName(mc.name);
    for (const auto& alias : mc.aliases) addName(alias);
    table->routes.push_back(std::move(route));
  }
  table->created = created;
  table->models_json = modelsJson(*table, [](const std::string&, const Route&) { return true; });
  return std::shared_ptr<const RouteTable>(std::move(table));
}

Targets resolveTargets(const RouteTable& table, std::string_view model, Protocol protocol) {
  Targets t;
  const auto it = table.by_name.find(model);
  if (it == table.by_name.end()) return t;
  t.route = it->second;
  t.endpoints = protocol == Protocol::kKServe ? &t.route->kserve_endpoints : &t.route->openai_endpoints;
  return t;
}

}  // namespace infera::gateway
