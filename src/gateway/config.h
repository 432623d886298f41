#pragma once
// Gateway configuration: plain structs with defaults, parsed and validated from YAML (every error
// with its key path and line; unknown keys rejected; cross-references checked).

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "emulator/emulator.h"

namespace YAML {
class Node;
}

namespace infera::gateway {

enum class Protocol { kOpenAi, kKServe };

struct ListenConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
};

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

// Request and token limits per rolling minute; 0 = none.
struct LimitConfig {
  int64_t rpm = 0;
  int64_t tpm = 0;
};

// USD per million tokens, for cost budgets and usage records.
struct PriceConfig {
  double prompt_per_1m = 0;
  double completion_per_1m = 0;
};

struct EndpointConfig {
  std::string url;       // http://host:port[/prefix]
  std::string emulator;  // name of an in-process emulator (instead of url)
  Protocol protocol = Protocol::kOpenAi;
  std::string region;
  int weight = 1;
  int max_concurrent = 1024;  // requests in flight to this endpoint, across workers
  int line = 0;
};

struct DeploymentConfig {
  std::string name;
  std::string upstream_model;  // model name sent to the backend; default the model's name
  Protocol protocol = Protocol::kOpenAi;
  TimeoutConfig timeouts;
  RetryConfig retry;
  LimitConfig limits;             // protects this deployment's capacity (all keys together)
  bool continuous_usage = false;  // backend supports vLLM's stream_options.continuous_usage_stats
  std::vector<EndpointConfig> endpoints;
};

struct ModelConfig {
  std::string name;
  std::vector<std::string> aliases;
  LimitConfig limits;  // all keys together
  PriceConfig price;
  bool cache = false;  // cache every non-streaming answer of this model (not only temperature 0)
  std::vector<DeploymentConfig> deployments;
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

struct CacheConfig {
  bool enabled = false;
  int64_t ttl_ms = 300'000;
  int64_t max_bytes = 64 << 20;  // per process, LRU beyond it
  int64_t max_entry_bytes = 1 << 20;
  bool redis = false;  // also share entries through governance.redis
  // "team": a team's requests hit only its own entries (a hit would tell another team what was
  // asked); "global": one entry serves every team.
  std::string scope = "team";
};

// Keys, teams, limits, usage, budgets, cache. Off unless the `governance` section is present.
struct GovernanceConfig {
  bool enabled = false;
  bool require_keys = true;  // false: requests without a key pass as team "anonymous"
  std::string store = "sqlite:infera.db";  // sqlite:PATH or postgresql://...
  std::string admin_token;  // bearer token for /admin/*; env INFERA_ADMIN_TOKEN wins
  std::string key_secret;   // server secret keying the key hashes; env INFERA_KEY_SECRET wins
  int64_t sync_interval_ms = 500;   // how often the key/team snapshot is checked for changes
  int64_t usage_flush_ms = 1'000;   // usage records reach the store at least this often
  int64_t usage_retention_days = 0;          // raw usage records older than this are deleted; 0 = keep
  int64_t usage_rollup_retention_days = 0;   // per-minute roll-ups (what queries read); 0 = keep
  int64_t default_max_tokens = 1'024;  // completion tokens reserved when a request sets none
  std::string redis;                 // redis://host:port shared counters; "" = this process only
  int64_t redis_timeout_ms = 50;
  std::string redis_fallback = "local";  // local (a 1/replicas share) | open | closed
  int replicas = 1;                      // replicas sharing the limits (for the local share)
  // Leases (RedisLeases): each worker reserves ~this much of its traffic ahead in Redis; 0 = one
  // Redis decision per admission.
  int64_t redis_lease_ms = 100;
  std::string user_header = "x-infera-user";
  CacheConfig cache;
};

struct GatewayConfig {
  std::string region;
  int workers = 0;  // 0 = one per core
  ListenConfig listen;
  ListenConfig admin{"127.0.0.1", 9090};
  size_t max_body_bytes = 8 * 1024 * 1024;
  size_t max_header_bytes = 16 * 1024;
  int64_t idle_timeout_ms = 60'000;
  int64_t drain_timeout_ms = 15'000;
  std::string access_log;     // "" = off, "-" = stdout, else a file path
  std::string log_level = "info";
  double region_margin = 0.5;  // stay local unless local latency > (1+margin) x the best remote
  TimeoutConfig timeouts;      // defaults for deployments
  RetryConfig retry;
  HealthCheckConfig health_check;
  OutlierConfig outlier;
  std::map<std::string, emulator::EmulatorConfig> emulators;
  std::vector<ModelConfig> models;
  GovernanceConfig governance;
};

Result<GatewayConfig> parseGatewayConfig(const YAML::Node& root);
Result<GatewayConfig> loadGatewayConfig(const std::string& path);
Result<GatewayConfig> loadGatewayConfigString(const std::string& yaml);

std::string_view protocolName(Protocol p);

}  // namespace infera::gateway
