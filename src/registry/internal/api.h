#pragma once
// Registry internals: the HTTP side. One Api per loop (data port loops and the admin loop), owned
// by that loop's router: it authenticates the caller, runs the request on the worker pool, and
// answers on its loop. The data port serves MLflow's REST API (/api/2.0/mlflow/..., also under
// /ajax-api/), MLflow's artifact API for registry versions (/api/2.0/mlflow-artifacts/artifacts/
// registry/<name>/<version>/<path>) and review flags (POST /api/2.0/infera/flags); the admin port
// the same MLflow API and /admin/registry/... behind the admin guard.

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "access/access.h"
#include "gateway/gateway.h"
#include "net/router.h"
#include "obs/metrics.h"
#include "registry/internal/artifacts.h"
#include "registry/internal/pool.h"
#include "registry/registry.h"

namespace infera::registry {

struct RegistryMetrics {
  explicit RegistryMetrics(obs::MetricsRegistry& r);
  obs::MetricsRegistry& registry;
  obs::Family* requests;  // {api, code_class}
  obs::Counter* artifact_bytes_in;
  obs::Counter* artifact_bytes_out;
  obs::Counter* syncs_ok;
  obs::Counter* syncs_failed;
  obs::Counter* sync_polls;  // every look at the store's generation, changed or not
  obs::Counter* rebuilds;
  obs::Counter* dropped_shadows;
  obs::Counter* dropped_captures;
  obs::Counter* write_failures;
};

// What every loop's Api shares (owned by the registry).
struct ApiShared {
  const RegistryConfig& config;
  WorkerPool& pool;
  ArtifactFiles& files;
  access::Access* access = nullptr;
  RegistryMetrics& metrics;
  // After a write, on the worker that made it: the routes follow before the answer (blocking).
  std::function<void(RegistryStore&)> after_write;
  // The gateway's figures for an experiment (null result: none).
  std::function<std::optional<gateway::ExperimentStats>(const std::string& model)> stats;
  std::function<std::string()> routes_json;
  // Writes the captures and shadow outcomes still queued (blocking), so that a flag or a review
  // by request id finds an inference this replica answered just before.
  std::function<Status()> flush_records;
  // Whether a binding's deployment exists among the config's models.
  std::function<bool(const std::string& deployment)> deployment_exists;
  std::function<std::vector<BindingConfig>()> config_bindings;
};

class Api {
 public:
  // `access`: the loop's access worker (data port with access control; null otherwise).
  Api(ApiShared& shared, net::asio::io_context& ctx, access::AccessWorker* access, bool admin_port);
  void addDataRoutes(net::Router& router);
  void addAdminRoutes(net::Router& router, const net::RouteGuard& guard);

  struct Caller;

 private:
  net::Task<void> mlflow(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p);
  net::Task<void> mlflowArtifacts(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p);
  net::Task<void> flag(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p);
  net::Task<void> upload(net::HttpRequest& req, net::ResponseWriter& w, const Caller& c,
                         std::string name, int64_t version, std::string path, bool mlflow_errors);
  net::Task<void> download(net::HttpRequest& req, net::ResponseWriter& w, std::string name,
                           int64_t version, std::string path, bool mlflow_errors);
  net::Task<void> adminArtifacts(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p);
  net::Task<void> admin(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p);
  Caller caller(const net::HttpRequest& req) const;

  ApiShared& shared_;
  net::asio::io_context& ctx_;
  access::AccessWorker* access_;
  bool admin_port_;
};

}  // namespace infera::registry
