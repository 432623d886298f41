#pragma once
// The gateway's configuration: models, their aliases, deployments and endpoints, and how they
// are balanced, checked, retried and timed out. Plain structs with defaults, read from the
// top-level mapping of the process's YAML (src/server owns the file: every error with its key
// path and line; unknown keys rejected; cross-references checked).

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "access/config.h"
#include "net/tls.h"

namespace infera {
class ConfigReader;
}

namespace infera::gateway {

enum class Protocol { kOpenAi, kKServe };

using access::LimitConfig;
using access::PriceConfig;

struct TimeoutConfig {
  int64_t connect_ms = 2'000;
  int64_t first_byte_ms = 60'000;  // per try: until the upstream response head
  int64_t total_ms = 600'000;      // whole request, all tries and the body
};

struct RetryConfig {
  int attempts = 3;  // tries in total (1 = no retry)
  bool on_5xx = true;
  bool on_connect_failure = true;
  bool on_timeout = true;
};

struct EndpointConfig {
  std::string url;           // http[s]://host:port[/prefix]
  std::string emulator;      // name of an in-process emulator (instead of url)
  net::TlsClientConfig tls;  // https:// only: the deployment's `tls:`, then the endpoint's own
  Protocol protocol = Protocol::kOpenAi;
  std::string region;
  int weight = 1;
  int max_concurrent = 1024;  // requests in flight to this endpoint, across workers
  int line = 0;
};

// Engine-aware routing of a deployment (docs/routing.md): the gateway reads each endpoint's
// engine signals (vLLM's /metrics, Triton's queue) and scores endpoints by what they hold. Off by
// default: the deployment then balances by latency as before, at the same cost.
// The most prompt blocks hashed per request (the prefix scan's bound).
inline constexpr int kMaxPrefixBlocks = 1024;

// How an engine-routed deployment picks among the endpoints left by the filters: by the weighted
// scorers (`policy: engine`), uniformly at random (`random`), or in turn
// (`round_robin`: one counter per route, shared by the workers). The last two are baselines
// (bench/load/engine_routing.sh) that still read the signals, so filters and flow control work with
// them.
enum class EnginePick : uint8_t { kScore, kRandom, kRoundRobin };

struct EngineRoutingConfig {
  bool enabled = false;  // `routing: {policy: engine | random | round_robin}`
  EnginePick pick = EnginePick::kScore;
  // Scorer weights; the endpoint with the highest weighted sum wins (ties: a random one).
  double prefix_weight = 3;   // share of the prompt's leading blocks last sent to that endpoint
  double queue_weight = 2;    // fewer requests running + waiting (min-max over the candidates)
  double kv_weight = 1;       // more free KV cache
  double lora_weight = 1;     // the adapter asked for is loaded there
  double session_weight = 0;  // the endpoint a session header's value hashes to
  double latency_weight = 0;  // lower EWMA latency, as the default policy
  std::string session_header = "x-session-id";
  // Filters: endpoints past these (when their signals are known) are not chosen while another
  // is under them. 0 = no filter.
  int max_waiting = 0;
  double max_kv_usage = 0;
  // Signals: scraped every interval on one thread; older than stale_ms = unknown (never idle).
  int64_t metrics_interval_ms = 100;
  int64_t metrics_timeout_ms = 500;
  int64_t stale_ms = 1000;
  std::string metrics_path = "/metrics";
  // The approximate prefix index: the rendered prompt in blocks of prefix_block_bytes, at most
  // prefix_max_blocks of them (longer prompts: their first blocks), in a table of
  // prefix_index_entries block hashes per model (memory bounded; overwrites counted).
  int prefix_block_bytes = 64;
  int prefix_max_blocks = 256;
  int prefix_index_entries = 1 << 16;
  // Flow control: when every endpoint is past a filter (max_waiting, max_kv_usage), requests wait
  // in the gateway, most urgent priority first and shared fairly between teams (or users) by
  // tokens, for at most queue_timeout_ms (then 429 with retry-after); at most max_queued per
  // worker (then the waiter that would be served last is shed: FlowQueue::shedFor). Sheddable
  // requests never wait.
  bool flow_control = false;
  int64_t queue_timeout_ms = 30'000;
  int max_queued = 1024;
  std::string fairness = "team";              // team | user | none
  std::string default_priority = "standard";  // critical | standard | batch | sheddable
  // Priorities by who asks (names of critical | standard | batch | sheddable): a key's (by key
  // id), else its team's, else default_priority; a user's (named by the caller) and the header
  // may only lower it.
  std::map<std::string, std::string, std::less<>> key_priorities;
  std::map<std::string, std::string, std::less<>> user_priorities;
  std::map<std::string, std::string, std::less<>> team_priorities;
  bool operator==(const EngineRoutingConfig&) const = default;
};

struct DeploymentConfig {
  std::string name;
  std::string upstream_model;  // model name sent to the backend; default the model's name
  Protocol protocol = Protocol::kOpenAi;
  TimeoutConfig timeouts;
  RetryConfig retry;
  LimitConfig limits;             // protects this deployment's capacity (all keys together)
  bool continuous_usage = false;  // backend supports vLLM's stream_options.continuous_usage_stats
  net::TlsClientConfig tls;       // defaults of its https:// endpoints
  EngineRoutingConfig routing;
  // The share of each endpoint's max_concurrent that batch work (the batch and sheddable
  // priority classes: the batch executor's lines, x-infera-priority) may hold; 1 = no cap.
  double max_batch_share = 1;
  // With a share: after this long with no request above the batch class for the model, batch work
  // may fill the endpoints (up to max_concurrent) until the next one comes; 0 = never. Needs flow
  // control, where that request waits for the slots batch work holds instead of being refused.
  int64_t batch_idle_ms = 0;
  std::vector<EndpointConfig> endpoints;
};

// An experiment arm: a share of a model's traffic sent to another model of the route source
// (a registry version "name/3" or alias "name@a").
struct ArmConfig {
  std::string name;    // the arm's label (metrics, x-infera-arm)
  std::string target;  // a model or alias name of the same route source
  int weight = 1;      // relative to the other arms' (0 = no traffic)
};

// Whose requests stay on one arm: the same id always hashes to the same arm while the weights
// stand.
enum class StickyBy { kUser, kKey, kHeader };

struct SplitConfig {
  std::vector<ArmConfig> arms;           // empty: no split
  StickyBy sticky_by = StickyBy::kUser;  // kUser falls back to the key, then to a random draw
  std::string sticky_header;             // kHeader: this header's value (lower-case name)
  std::string salt;                      // mixed into the hash (a new salt reshuffles assignments)
};

// A share of a model's requests mirrored, after the client got its answer, to another model of
// the route source; the shadow's answer is recorded (InferenceObserver) and never sent anywhere.
struct ShadowConfig {
  std::string target;           // "" = none
  double share = 0;             // 0..1
  int64_t timeout_ms = 10'000;  // the whole shadow exchange
  int max_concurrent = 16;      // per worker; more are shed (counted)
};

// Data capture of a model's requests and responses (InferenceObserver::captured).
struct CaptureConfig {
  double sample = 0;                       // share captured
  int64_t max_bytes = 64 * 1024;           // of the request and of the response, each
  bool flag_errors = false;                // capture and flag answers with status >= 500
  int64_t flag_slower_ms = 0;              // ... answers slower than this (0 = off)
  std::vector<std::string> flag_contains;  // ... answers containing any of these
  std::vector<std::string> opt_out_keys;   // never captured (key ids)
  bool enabled() const {
    return sample > 0 || flag_errors || flag_slower_ms > 0 || !flag_contains.empty();
  }
};

struct ModelConfig {
  std::string name;
  std::vector<std::string> aliases;
  LimitConfig limits;  // all keys together
  PriceConfig price;
  bool cache = false;  // cache every non-streaming answer of this model (not only temperature 0)
  std::vector<DeploymentConfig> deployments;
  // Set by the model registry (not read from the config file's models).
  SplitConfig split;  // requests for this name go to an arm (then it needs no deployments)
  ShadowConfig shadow;
  CaptureConfig capture;
  bool tag_responses = false;  // answers carry x-infera-route (and x-infera-arm)
};

struct HealthCheckConfig {
  bool enabled = true;
  int64_t interval_ms = 5'000;
  int64_t timeout_ms = 1'000;
  int unhealthy_threshold = 2;
  int healthy_threshold = 1;
  std::string openai_path = "/health";
  std::string kserve_path = "/v2/health/ready";
};

struct OutlierConfig {
  int consecutive_failures = 5;
  int64_t base_ejection_ms = 5'000;
  int64_t max_ejection_ms = 300'000;
};

// What src/server gives the gateway: the routing half of the config file.
struct GatewayConfig {
  std::string region;
  double region_margin = 0.5;  // stay local unless local latency > (1+margin) x the best remote
  TimeoutConfig timeouts;      // defaults for deployments
  RetryConfig retry;
  HealthCheckConfig health_check;
  OutlierConfig outlier;
  std::vector<ModelConfig> models;
};

// The gateway's keys of the config's top-level mapping; errors go to the reader. Settings:
// region, region_margin, timeouts, retry, health_check, outlier. Models: `models`, where an
// endpoint's `emulator:` must name one of `emulators` (the process's in-process emulators) and a
// deployment's timeouts and retry start from the settings read before.
void readGatewaySettings(ConfigReader& root, GatewayConfig& out);
void readModels(ConfigReader& root, const std::set<std::string>& emulators, GatewayConfig& out);

std::string_view protocolName(Protocol p);

}  // namespace infera::gateway
