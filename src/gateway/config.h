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
  std::vector<EndpointConfig> endpoints;
};

struct ModelConfig {
  std::string name;
  std::vector<std::string> aliases;
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
};

Result<GatewayConfig> parseGatewayConfig(const YAML::Node& root);
Result<GatewayConfig> loadGatewayConfig(const std::string& path);
Result<GatewayConfig> loadGatewayConfigString(const std::string& yaml);

std::string_view protocolName(Protocol p);

}  // namespace infera::gateway
