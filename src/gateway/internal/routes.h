#pragma once
// Gateway internals: the immutable routing snapshot built from the settings and the route
// source's models, the endpoint state shared across workers, and the metrics the gateway declares.

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "access/limits.h"
#include "core/text.h"
#include "gateway/config.h"
#include "gateway/internal/engine_routing.h"
#include "net/client.h"
#include "net/http.h"
#include "obs/metrics.h"

namespace infera::gateway {

// Shared by all workers and kept across reloads (keyed by deployment + address). Written with
// relaxed atomics, only on failures, health-check results and ejections.
struct EndpointShared {
  std::atomic<bool> healthy{true};  // active health check verdict
  std::atomic<int> consecutive_failures{0};
  std::atomic<int> ejections{0};  // for the back-off; reset by a success after re-admission
  std::atomic<int64_t> ejected_until_ns{0};
  std::atomic<int> check_failures{0};
  std::atomic<int> check_successes{0};
  std::atomic<bool> probe_in_flight{false};
  // When a request above the batch class last arrived for this endpoint's route (monotonic ns; 0 =
  // never): batch work borrows the endpoint's whole max_concurrent once it is batch_idle_ms old.
  std::atomic<int64_t> interactive_ns{0};

  // Each worker's view, for GET /admin/endpoints: written by that worker only (relaxed stores of
  // its own figures, one cache line each, so workers never share a line), read by the admin loop.
  struct alignas(64) WorkerView {
    std::atomic<int> in_flight{0};
    std::atomic<double> ewma_s{0};  // 0 = no sample yet
  };
  explicit EndpointShared(int worker_count)
      : views(std::make_unique<WorkerView[]>(static_cast<size_t>(worker_count))),
        workers(worker_count) {}
  std::unique_ptr<WorkerView[]> views;
  const int workers;
  // Engine-aware routing: the engine's signals (scraped when a deployment's routing asks).
  EngineSignals engine;
};

struct GatewayMetrics {
  explicit GatewayMetrics(obs::MetricsRegistry& r);
  obs::MetricsRegistry& registry;
  obs::Family* requests;          // {model, deployment, code_class}
  obs::Family* duration;          // {model}
  obs::Family* ttft;              // {model}
  obs::Family* upstream_latency;  // {deployment}
  obs::Family* retries;           // {deployment}
  obs::Family* ejections;         // {deployment}
  obs::Family* errors;            // {code}: errors the gateway answered itself
  obs::Family* endpoint_healthy;  // {deployment, endpoint}
  obs::Family* reloads;           // {result}
  obs::Family* client_aborts;     // {model}
  obs::Family* stream_errors;     // {model}: upstream died mid-stream
  // Experiments (registry routes): per arm, and shadow outcomes.
  obs::Family* arm_requests;     // {model, arm, code_class}
  obs::Family* arm_errors;       // {model, arm}: status >= 500
  obs::Family* arm_duration;     // {model, arm}
  obs::Family* arm_ttft;         // {model, arm}: to the first body byte
  obs::Family* arm_tokens;       // {model, arm, kind}
  obs::Family* shadow_requests;  // {model, shadow, outcome}
  obs::Family* shadow_duration;  // {model, shadow}
  obs::Family* shadow_matches;   // {model, shadow, result}
  obs::Family* captures;         // {model}
  // Engine-aware routing: each endpoint's signals and the prompt blocks it held when chosen.
  obs::Family* engine_load;           // {deployment, endpoint}: running + waiting; -1 unknown
  obs::Family* engine_kv;             // {deployment, endpoint}: 0..1; -1 unknown
  obs::Family* engine_age;            // {deployment, endpoint}: seconds since the last scrape
  obs::Family* engine_scrape_errors;  // {deployment, endpoint}
  obs::Family* prefix_blocks;         // {deployment, endpoint, result=hit|sent}
  obs::Family* prefix_overwrites;     // {model}
  // Flow control.
  obs::Family* flow_queued;    // {model, priority}: waiting in the gateway now
  obs::Family* flow_wait;      // {model, priority}: time waited before being sent
  obs::Family* flow_outcomes;  // {model, priority, team, outcome=queued|admitted|timeout|shed|left}
  // Autoscaling signals per deployment (docs/operations.md).
  obs::Family* deployment_in_flight;  // {model, deployment}: sent to its endpoints, not ended
  obs::Family* deployment_tokens;     // {model, deployment, kind=prompt|completion}
  obs::Gauge* in_flight;
  obs::Gauge* active_streams;
  // Pre-resolved error counters (read-only after construction: no lock on lookup).
  obs::Counter* errorCounter(std::string_view code) const;
  std::vector<std::pair<std::string, obs::Counter*>> error_counters;
};

struct Deployment;

struct Endpoint {
  std::string key;    // "deployment|url": identity across reloads
  std::string label;  // url or emulator:name, for logs and metrics
  std::string region;
  bool local = false;
  int weight = 1;
  int max_inflight_per_worker = 1024;
  // Of those, what batch work may hold (its deployment's max_batch_share; = the above: no cap).
  int max_batch_per_worker = 1024;
  // Its deployment's batch_idle_ms: after this long with no interactive request, batch work may
  // hold the whole max_concurrent (0 = the share always holds).
  int64_t batch_idle_ns = 0;
  Protocol protocol = Protocol::kOpenAi;
  net::UpstreamAddress address;
  std::string host_header;
  const Deployment* deployment = nullptr;
  std::shared_ptr<EndpointShared> shared;
  obs::Gauge* healthy_gauge = nullptr;
  // Engine-aware routing (its deployment's routing.enabled): the endpoint's prefix-index slot
  // (-1: none), a hash of its key (session affinity), and its signal gauges.
  int prefix_slot = -1;
  uint64_t key_hash = 0;
  obs::Gauge* engine_load = nullptr;
  obs::Gauge* engine_kv = nullptr;
  obs::Gauge* engine_age = nullptr;
  obs::Counter* prefix_hit_blocks = nullptr;   // prompt blocks it held when chosen
  obs::Counter* prefix_sent_blocks = nullptr;  // prompt blocks of the requests sent to it
};

constexpr int kCodeClasses = 6;  // 1xx..5xx plus "other"
int codeClassIndex(int status);

struct Deployment {
  std::string name;
  std::string model;  // canonical model name
  std::string upstream_model;
  TimeoutConfig timeouts;
  RetryConfig retry;
  access::LimitedResource limited;  // its own limits; counters "d:model/deployment:r|t"
  bool continuous_usage = false;
  EngineRoutingConfig routing;
  std::vector<uint32_t> endpoints;
  obs::Counter* requests_by_class[kCodeClasses] = {};
  // Tokens of the answers whose usage the gateway read (governed requests, experiment arms): the
  // demand an autoscaler reads (infera_gateway_deployment_tokens_total).
  obs::Counter* prompt_tokens = nullptr;
  obs::Counter* completion_tokens = nullptr;
  obs::Histogram* upstream_latency = nullptr;
  obs::Counter* retries = nullptr;
  obs::Counter* ejections = nullptr;
};

struct Route;

// One arm of an experiment: its share of the split route's traffic and its metric cells.
struct Arm {
  std::string name;
  const Route* route = nullptr;
  uint32_t weight = 0;
  net::HttpHeader header;  // x-infera-arm
  obs::Counter* requests_by_class[6] = {};
  obs::Counter* errors = nullptr;
  obs::Histogram* duration = nullptr;
  obs::Histogram* ttft = nullptr;
  obs::Counter* prompt_tokens = nullptr;
  obs::Counter* completion_tokens = nullptr;
};

// Outcome counters of one shadow target, resolved once per table.
struct ShadowCells {
  obs::Counter* ok = nullptr;
  obs::Counter* error = nullptr;   // the shadow answered >= 400
  obs::Counter* failed = nullptr;  // no answer: connect failure, timeout, no endpoint
  obs::Counter* shed = nullptr;    // the per-worker cap was full
  obs::Counter* match = nullptr;
  obs::Counter* mismatch = nullptr;
  obs::Histogram* duration = nullptr;
};

struct Route {
  std::string model;
  std::vector<uint32_t> openai_endpoints;
  std::vector<uint32_t> kserve_endpoints;
  const Deployment* first_deployment = nullptr;
  access::LimitedResource limited;  // the model's own limits; counters "m:model:r|t"
  PriceConfig price;
  bool cache = false;
  obs::Histogram* duration = nullptr;
  obs::Histogram* ttft = nullptr;
  obs::Counter* client_aborts = nullptr;
  obs::Counter* stream_errors = nullptr;
  obs::Counter* no_deployment_by_class[kCodeClasses] = {};
  // A split route (an experiment): requests go to one of the arms; it has no endpoints itself.
  std::vector<Arm> arms;
  std::vector<uint32_t> arm_weights;  // parallel to arms (armForHash)
  StickyBy sticky_by = StickyBy::kUser;
  std::string sticky_header;
  std::string salt;
  // Shadow: a share of requests mirrored after the answer.
  const Route* shadow = nullptr;
  double shadow_share = 0;
  int64_t shadow_timeout_ms = 0;
  int shadow_max_concurrent = 0;
  ShadowCells shadow_cells;
  CaptureConfig capture;  // capture.enabled(): data capture on
  obs::Counter* captures = nullptr;
  bool tag_responses = false;
  bool batch_capped = false;     // a deployment caps batch work (max_batch_share < 1)
  net::HttpHeader route_header;  // x-infera-route: model
  // Engine-aware routing (its deployments' routing, the same for all): null = latency balancing.
  const EngineRoutingConfig* engine = nullptr;
  std::shared_ptr<PrefixIndex> prefix_index;    // kept across reloads, per model
  std::shared_ptr<std::atomic<uint64_t>> turn;  // policy round_robin: the next turn (all workers)
  uint64_t lora_hash = 0;                       // loraHash of the first deployment's upstream model
  // Flow control (engine->flow_control): the route's default priority and per-priority cells.
  Priority default_priority = Priority::kStandard;
  obs::Gauge* flow_queued[kPriorities] = {};
  obs::Histogram* flow_wait[kPriorities] = {};
  // An experiment decides per request (an arm, or a shadow draw).
  bool experiment() const { return !arms.empty() || shadow != nullptr; }
};

struct RouteTable {
  int64_t generation = 0;
  std::string region;
  double region_margin = 0.5;
  OutlierConfig outlier;
  HealthCheckConfig health_check;
  std::vector<Endpoint> endpoints;
  std::vector<std::unique_ptr<Deployment>> deployments;
  std::vector<std::unique_ptr<Route>> routes;
  // Models and aliases (looked up with string_views: no key is built per request).
  std::unordered_map<std::string, const Route*, TransparentStringHash, std::equal_to<>> by_name;
  std::string models_json;  // GET /v1/models body
  // Models and aliases in config order (GET /v1/models lists those a key may use), and the
  // "created" time the list shows.
  std::vector<std::pair<std::string, const Route*>> names;
  std::string created;
};

// The GET /v1/models body for the names `keep(name, route)` says yes to.
template <typename Keep>
std::string modelsJson(const RouteTable& t, Keep&& keep) {
  std::string out = "{\"object\":\"list\",\"data\":[";
  bool first = true;
  for (const auto& [name, route] : t.names) {
    if (!keep(name, *route)) continue;
    if (!first) out += ",";
    first = false;
    out += "{\"id\":";
    net::appendJsonString(out, name);
    out += ",\"object\":\"model\",\"created\":" + t.created + ",\"owned_by\":\"infera\"}";
  }
  out += "]}";
  return out;
}

// Where a request goes: the route of the model it names and the endpoints that speak its API;
// for an experiment, the arm chosen (its route is the one served) and whether a shadow copy goes
// to the shadow target after the answer.
struct Targets {
  const Route* route = nullptr;
  const std::vector<uint32_t>* endpoints =
      nullptr;                   // may be empty: the model has none for this API
  const Route* split = nullptr;  // the experiment's route when an arm was chosen
  const Arm* arm = nullptr;
  const Route* shadow = nullptr;  // mirror the request here after answering
};

// What an experiment decides on: the ids a request is sticky by, an arm forced by a header
// (x-infera-arm, for testing), the request's headers (a sticky header), and draws for requests
// without a sticky id and for the shadow share.
struct RequestKeys {
  std::string_view user;
  std::string_view key;
  std::string_view forced_arm;
  const std::vector<net::HttpHeader>* headers = nullptr;
  uint64_t random = 0;     // a fresh draw
  double shadow_draw = 1;  // uniform in [0, 1)
};
// The targets of `model` (a name or an alias) for `protocol`; route null when no model is so named
// (or an experiment has no arm with weight). Pure: the same keys give the same targets.
Targets resolveTargets(const RouteTable& table, std::string_view model, Protocol protocol,
                       const RequestKeys& keys = {});
// The two steps of resolveTargets: the route named `model` (null: none), then its targets.
const Route* findRoute(const RouteTable& table, std::string_view model);
Targets resolveRoute(const Route& route, Protocol protocol, const RequestKeys& keys);

// Builds a snapshot of `models` with `config`'s settings. Resolves URLs (blocking DNS: control
// thread only). `emulator_urls` maps in-process emulator names to their URLs; `shared` carries
// endpoint state across reloads.
// `prefix_indexes` (optional) keeps each model's prefix index across reloads.
using PrefixIndexes = std::unordered_map<std::string, std::shared_ptr<PrefixIndex>>;
Result<std::shared_ptr<const RouteTable>> buildRouteTable(
    const GatewayConfig& config, const std::vector<ModelConfig>& models,
    const std::unordered_map<std::string, std::string>& emulator_urls,
    std::unordered_map<std::string, std::shared_ptr<EndpointShared>>& shared,
    GatewayMetrics& metrics, int64_t generation, PrefixIndexes* prefix_indexes = nullptr);

}  // namespace infera::gateway
