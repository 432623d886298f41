#pragma once
// The composition root of `infera serve`: reads the whole config, builds the event loops, the
// data and admin routers and servers, and starts the components on them — in-process emulators
// (backends), access control, the gateway — then applies reloads, each component saying which of
// its settings need a restart.
//
//   auto s = server::Server::start(*server::loadConfig("infera.yaml"), "infera.yaml");
//   (*s)->reload();                      // SIGHUP, POST /admin/reload
//   (*s)->drain(std::chrono::seconds(15));
//
// Adding an HTTP service: a library with an `addDataRoutes(loop, ctx, router, access_worker)`
// and/or `addAdminRoutes(router, guard)`, created in Server's init() and called from its
// per-loop router factories (see docs/architecture.md).
//
// Thread-safe: every method may be called from any thread.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/status.h"
#include "server/config.h"

namespace infera::net {
class Router;
}

namespace infera::server {

struct Options {
  // The clock access control and the feature store read (key expiry, limit windows, usage times,
  // feature TTLs and aggregation windows); tests step a fake.
  const Clock* clock = nullptr;
  // Called with each data-port and admin-port router after every component registered its routes
  // (tests: a route that throws under a service's prefix, to show the floor answers it in that
  // service's shape).
  std::function<void(net::Router&)> extra_data_routes;
  std::function<void(net::Router&)> extra_admin_routes;
};

class Server {
 public:
  // Starts the emulators, access control and the gateway, binds both ports, starts the workers
  // and health checks. `config_path` is where reload() reads from ("" = reload() unavailable).
  static Result<std::unique_ptr<Server>> start(Config config, std::string config_path = {},
                                               Options options = {});
  virtual ~Server() = default;

  virtual uint16_t port() const = 0;
  virtual uint16_t adminPort() const = 0;

  // Re-reads config_path; on any error the old config keeps serving and the error is returned.
  virtual Status reload() = 0;
  // Validates and applies `config`; kFailedPrecondition naming the settings that need a restart.
  virtual Status apply(Config config) = 0;

  // Stops accepting, finishes requests in flight up to the timeout; returns true if all drained.
  virtual bool drain(std::chrono::milliseconds timeout) = 0;

  // Prometheus text of every metric, and one metric's sum over its series (tests).
  virtual std::string metricsText() const = 0;
  virtual double metricSum(const std::string& name) const = 0;
  // The route table's generation (1 at start, +1 per applied reload).
  virtual int64_t configGeneration() const = 0;
};

}  // namespace infera::server
