#pragma once
// The model gateway: OpenAI-compatible /v1/* and KServe v2 / Open Inference Protocol /v2/* on the
// data port, routing each request to a model's endpoints with latency-aware balancing, region
// preference, health checks, outlier ejection, retries and failover, streaming chunk by chunk,
// and reading usage from answers for access control.
//
//   auto gw = gateway::Gateway::create(settings, routes, {metrics, access_log, access, urls,
//   workers});
//   // per loop, on that loop, before it serves:
//   (*gw)->addDataRoutes(i, ctx, data_router, access_worker);
//   (*gw)->addAdminRoutes(admin_router, guard);
//   (*gw)->startHealthChecks(admin_ctx);
//   (*gw)->apply(new_settings);            // reload: a new route table, swapped into every worker
//
// Thread-safety: create/apply/rebuild/endpointsJson from any thread (one at a time per gateway);
// the routes it registers run on their loop only. The gateway must outlive the servers whose
// routers hold its routes, and stop its health checks before the admin loop stops.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "gateway/config.h"
#include "gateway/observer.h"
#include "gateway/route_source.h"
#include "net/asio.h"
#include "net/router.h"

namespace infera::obs {
class MetricsRegistry;
class AccessLog;
}  // namespace infera::obs
namespace infera::access {
class Access;
class AccessWorker;
}  // namespace infera::access

namespace infera::gateway {

struct GatewayDeps {
  obs::MetricsRegistry& metrics;
  obs::AccessLog* access_log = nullptr;  // null: no access log
  // In-process backends by name (an endpoint's `emulator:`), as base URLs.
  std::unordered_map<std::string, std::string> emulator_urls;
  int workers = 1;
  // Receives shadow outcomes and captured inferences (null: routes that ask for them get none).
  InferenceObserver* observer = nullptr;
};

// An experiment arm's figures since the process started (summed over workers).
struct ArmStats {
  std::string arm;
  std::string target;  // the route it sends to ("fraud/3")
  uint32_t weight = 0;
  double requests = 0;
  double errors = 0;  // status >= 500
  double p50_s = 0, p99_s = 0;
  double ttft_p50_s = 0, ttft_p99_s = 0;
  double prompt_tokens = 0, completion_tokens = 0;
};

struct ShadowStats {
  std::string target;
  double share = 0;
  double ok = 0, error = 0, failed = 0, shed = 0;
  double match = 0, mismatch = 0;
  double p50_s = 0, p99_s = 0;
};

struct ExperimentStats {
  std::vector<ArmStats> arms;
  std::optional<ShadowStats> shadow;
};

class Gateway {
 public:
  // Builds the first route table from `settings` and `routes` (blocking DNS: call off the loops).
  // kInvalidArgument for an endpoint that does not resolve or an unknown emulator.
  static Result<std::unique_ptr<Gateway>> create(GatewayConfig settings, const RouteSource& routes,
                                                 GatewayDeps deps);
  virtual ~Gateway() = default;

  // On loop `loop`'s thread before it serves: the data API on `router` (and the data port's answer
  // to every path no route takes: an OpenAI-shaped 404/405), with the loop's balancer state and
  // upstream pools, which the router owns. `access` is that loop's access worker (null: no access
  // control); it must outlive the router's routes.
  virtual void addDataRoutes(int loop, net::asio::io_context& ctx, net::Router& router,
                             access::AccessWorker* access) = 0;
  // GET /admin/endpoints: every endpoint with its health and ejection state; `guard` wraps it
  // (the admin token check).
  virtual void addAdminRoutes(net::Router& admin, const net::RouteGuard& guard) = 0;

  // Active health checks on `ctx` (the admin loop). stopHealthChecks() blocks until they ended.
  virtual void startHealthChecks(net::asio::io_context& ctx) = 0;
  virtual void stopHealthChecks() = 0;

  // A new route table from new settings and the route source's models (reload); on error the old
  // one keeps serving. rebuild(): the same with the settings in use (the source changed).
  virtual Status apply(GatewayConfig settings) = 0;
  virtual Status rebuild() = 0;
  // The route table's generation (1 at start, +1 per applied change).
  virtual int64_t generation() const = 0;
  // The body of GET /admin/endpoints.
  virtual std::string endpointsJson() const = 0;
  // The arms (and shadow) of the route named `model` in the table in use; nothing when it has no
  // experiment.
  virtual std::optional<ExperimentStats> experimentStats(std::string_view model) const = 0;
};

}  // namespace infera::gateway
