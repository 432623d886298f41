#pragma once
// The gateway: one process serving the data port (OpenAI-compatible /v1/*, KServe v2 /v2/*) and
// the admin port (/metrics, /healthz, /readyz, /admin/reload), routing each request to a model's
// endpoints with latency-aware balancing, region preference, health checks, outlier ejection,
// retries and failover. Thread-safe: every method may be called from any thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "gateway/config.h"

namespace infera::gateway {

class Gateway {
 public:
  // Starts in-process emulators, binds both ports, starts the workers and health checks.
  // `config_path` is where reload() reads from ("" = reload() unavailable).
  static Result<std::unique_ptr<Gateway>> start(GatewayConfig config, std::string config_path = {});
  virtual ~Gateway() = default;

  virtual uint16_t port() const = 0;
  virtual uint16_t adminPort() const = 0;

  // Re-reads config_path; on any error the old config keeps serving and the error is returned.
  virtual Status reload() = 0;
  // Validates and swaps in `config` (listen ports and workers cannot change without a restart).
  virtual Status apply(GatewayConfig config) = 0;

  // Stops accepting, finishes requests in flight up to the timeout; returns true if all drained.
  virtual bool drain(std::chrono::milliseconds timeout) = 0;

  // Prometheus text of every metric.
  virtual std::string metricsText() const = 0;
  // Sum of a metric over its series (tests).
  virtual double metricSum(const std::string& name) const = 0;
  // Marks every endpoint's active health state (tests; also done by the checker).
  virtual int64_t configGeneration() const = 0;
};

}  // namespace infera::gateway
