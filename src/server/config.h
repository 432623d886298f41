#pragma once
// The config file of `infera serve`: the process's own settings (ports, workers, limits of the
// HTTP servers, logs, in-process emulators) and each component's section, read with one
// ConfigReader so that every error names its key path and line and unknown keys are rejected
// anywhere in the file.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "access/config.h"
#include "batch/batch.h"
#include "core/status.h"
#include "emulator/emulator.h"
#include "features/features.h"
#include "gateway/config.h"
#include "net/tls.h"
#include "obs/otlp.h"
#include "registry/registry.h"
#include "vectors/vectors.h"

namespace YAML {
class Node;
}

namespace infera::server {

struct ListenConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::optional<net::TlsServerConfig> tls;  // the `tls:` mapping; none = plain HTTP
  // Browser origins whose pages may send state-changing requests to this port besides its own
  // ("https://console.example"; "*" = any): net::ServerConfig::allowed_origins. Lower-cased.
  std::vector<std::string> allowed_origins;
};

struct Config {
  int workers = 0;  // 0 = one per core
  ListenConfig listen;
  ListenConfig admin{"127.0.0.1", 9090, std::nullopt, {}};
  size_t max_body_bytes = 8 * 1024 * 1024;
  size_t max_header_bytes = 16 * 1024;
  int64_t max_connections = 65'536;  // data port, across workers; more are accepted and closed
  int64_t max_body_bytes_in_flight =
      1LL << 30;  // data port: request body bytes held at once (503 beyond)
  int64_t header_timeout_ms =
      10'000;  // each request's head, from its first byte (or the connection)
  int64_t idle_timeout_ms = 60'000;
  int64_t drain_timeout_ms = 15'000;
  std::string access_log;  // "" = off, "-" = stdout, else a file path
  std::string log_level = "info";
  std::map<std::string, emulator::EmulatorConfig> emulators;  // backends started in this process
  gateway::GatewayConfig gateway;     // region, balancing, health, retries, models
  access::AccessConfig access;        // the `governance` section
  features::FeaturesConfig features;  // the `features` section (enabled when present)
  vectors::VectorsConfig vectors;     // the `vectors` section (off unless present)
  registry::RegistryConfig registry;  // the `registry` section (off unless present)
  batch::BatchConfig batch;           // the `batch` section (off unless present)
  // The `scheduler` section: where an `infera sched serve` (its own process) serves its metrics;
  // the admin port then relays them at GET /admin/scheduler/metrics for the console.
  std::string scheduler_metrics_url;  // "" = none
  // "file": the config is this file (reloads re-read it). "shared": it lives in governance.store
  // as numbered generations, this file only the bootstrap of the first; edits go to the store and
  // every replica applies a newer generation within config_poll_ms (docs/operations.md).
  obs::TracingConfig tracing;  // the `tracing` section: OTLP/HTTP export of request spans
  std::string config_store = "file";
  int64_t config_poll_ms = 250;
};

Result<Config> parseConfig(const YAML::Node& root);
Result<Config> loadConfig(const std::string& path);
Result<Config> loadConfigString(const std::string& yaml);
// `yaml` read as if it were the file at `path` (relative paths resolve beside it; errors name it).
Result<Config> loadConfigText(const std::string& yaml, const std::string& path);

// What serving `config` on this machine would fail on that parsing cannot see, one line per
// problem naming its key ("access_log: cannot create /var/log/infera/access.jsonl: …"): files and
// directories the server writes (the access log, data directories, SQLite stores, the admin token
// file) must be creatable — their nearest existing ancestor a directory this user may write — and
// the files it reads (certificates, keys, a feature repository) readable. `infera config validate`
// runs it; serving creates the missing directories.
std::vector<std::string> checkHostPaths(const Config& config);

// What a reload cannot change without a restart, between `running` and `next` (empty: none).
std::vector<std::string> restartNeeded(const Config& running, const Config& next);

}  // namespace infera::server
