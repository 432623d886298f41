#pragma once
// The model registry: registered models and their versions (numbered per model from 1, never
// reused), tags, aliases with a history of every move and one-step rollback, artifacts (a
// version's files, streamed to and from the data directory with their sha256 and size), and what
// the gateway serves from it: versions and aliases bound to deployments, A/B splits across
// versions or aliases with sticky assignment, shadow traffic, data capture and a review queue.
// Served on the data port with MLflow's model-registry REST API (/api/2.0/mlflow/..., what
// MLFLOW_TRACKING_URI clients send) and on the admin port with the same API plus the registry's
// own admin API (/admin/registry/...). docs/registry.md has the API, the data model and what
// MLflow has that Infera does not.
//
//   auto reg = registry::Registry::create(config, {metrics, access, workers});   // opens the store
//   gateway::RouteSource& routes = (*reg)->routeSource(static_routes);           // config +
//   registry auto gw = gateway::Gateway::create(settings, routes, {..., (*reg)->observer()});
//   (*reg)->attach(gw->get());            // alias moves rebuild the gateway's route table
//   // per loop, on that loop, before it serves:
//   (*reg)->addDataRoutes(i, ctx, data_router, access_worker);
//   (*reg)->addAdminRoutes(admin_router, guard);
//   (*reg)->start();                      // the control thread: replica sync, capture writes
//
// Threads: create() blocks (it opens the store). The HTTP handlers run on their loops and never
// block them: store and file work goes to the registry's bounded worker pool and the answer is
// posted back. The control thread polls the store's change generation every sync_interval_ms
// (other replicas' changes) and rebuilds the gateway's routes when they moved; a change made
// through this process rebuilds them before it is answered. The direct methods below block (call
// them off the loops). Destroy the registry after the servers whose routers hold its routes.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "gateway/observer.h"
#include "gateway/route_source.h"
#include "net/asio.h"
#include "net/router.h"

namespace infera {
class ConfigReader;
}
namespace infera::obs {
class MetricsRegistry;
}
namespace infera::access {
class Access;
class AccessWorker;
}  // namespace infera::access
namespace infera::gateway {
class Gateway;
}

namespace infera::registry {

// ---- value types ----

struct Tag {
  std::string key;
  std::string value;
};

struct AliasRef {
  std::string alias;
  int64_t version = 0;
};

struct ModelVersion {
  std::string name;
  int64_t version = 0;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  std::optional<std::string> description;  // null: omitted from MLflow JSON ("" is emitted)
  std::string source;
  std::optional<std::string> run_id;
  std::optional<std::string> run_link;
  std::string status = "READY";
  std::string status_message;
  std::string stage = "None";    // None | Staging | Production | Archived
  std::string storage_location;  // the download URI (source unless artifacts were uploaded)
  std::string model_id;
  std::vector<Tag> tags;
  std::vector<std::string> aliases;
  int64_t artifact_bytes = 0;  // files uploaded to the registry
  int64_t artifact_files = 0;
};

struct RegisteredModel {
  std::string name;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  std::string description;
  std::vector<Tag> tags;
  std::vector<AliasRef> aliases;
  std::vector<ModelVersion> latest_versions;  // the highest version per stage
};

// One move of an alias: created (from 0), moved, or deleted (to 0).
struct AliasMove {
  std::string name;
  std::string alias;
  int64_t seq = 0;  // per (model, alias), from 1
  int64_t ts_ms = 0;
  int64_t from_version = 0;
  int64_t to_version = 0;
  std::string actor;
  std::string reason;
};

// ---- configuration ----

// A version ("3") or an alias ("@champion") of a model served by gateway deployments, named as
// "deployment" or "model/deployment" of the config's models.
struct BindingConfig {
  std::string model;
  std::string ref;
  std::vector<std::string> deployments;
  int line = 0;
};

// The `registry` section. Off unless present. Bindings apply at a reload; the rest needs a restart.
struct RegistryConfig {
  bool enabled = false;
  // "" = the access store when access control is on, else sqlite:<data_dir>/registry.db
  // (server::parseConfig fills it in).
  std::string store;
  std::string data_dir = "./infera-data/registry";
  std::string artifact_dir;                    // "" = <data_dir>/artifacts
  int64_t max_artifact_bytes = 10LL << 30;     // per file; more is 413
  int threads = 2;                             // store and file workers
  int64_t max_queued = 1024;                   // queued store/file tasks; more is 503
  int64_t sync_interval_ms = 200;              // replica sync: other replicas' changes within this
  std::string default_alias = "champion";      // what `model: "name"` resolves to
  int64_t capture_max_body_bytes = 64 * 1024;  // per captured request and response
  int64_t capture_max_rows = 10'000;           // per model version (unflagged rows go first)
  int64_t shadow_max_rows = 100'000;           // shadow outcomes kept (oldest go first)
  std::vector<BindingConfig> bindings;
};

// The section's keys (reader at the section; sets enabled). Errors go to the reader.
void readRegistryConfig(ConfigReader& section, RegistryConfig& out);
// What a reload cannot change (everything but bindings).
std::vector<std::string> restartNeeded(const RegistryConfig& running, const RegistryConfig& next);

struct RegistryDeps {
  obs::MetricsRegistry& metrics;
  access::Access* access = nullptr;  // null: no access control (every caller may read and write)
  int workers = 1;
  const Clock* clock = nullptr;  // null: the system clock
};

class Registry {
 public:
  // Opens (and migrates) the store and the artifact directory; kInvalidArgument/kUnavailable.
  static Result<std::unique_ptr<Registry>> create(const RegistryConfig& config, RegistryDeps deps);
  virtual ~Registry() = default;

  // The gateway's routes: `base`'s models (the config file's) plus what the registry serves:
  // "name/3" per bound version, "name@alias" per alias, "name" (the default alias, or an
  // experiment's split and shadow). `base` must outlive the registry. Thread-safe.
  virtual gateway::RouteSource& routeSource(const gateway::RouteSource& base) = 0;
  // Receives shadow outcomes and captured inferences from the gateway's workers (never blocks).
  virtual gateway::InferenceObserver* observer() = 0;
  // The gateway whose routes follow the registry (rebuild() on every change); null detaches.
  virtual void attach(gateway::Gateway* gateway) = 0;
  // Starts the control thread (replica sync, capture and shadow writes, pruning).
  virtual void start() = 0;

  // On loop `loop`'s thread before it serves: the MLflow API, the artifact API and review flags on
  // the data port. `access`: that loop's access worker (null: no access control).
  virtual void addDataRoutes(int loop, net::asio::io_context& ctx, net::Router& router,
                             access::AccessWorker* access) = 0;
  // On the admin loop: the MLflow API and /admin/registry/..., each behind `guard`.
  virtual void addAdminRoutes(net::asio::io_context& ctx, net::Router& admin,
                              const net::RouteGuard& guard) = 0;

  // Config bindings changed (a reload). Rebuilds the gateway's routes.
  virtual Status setBindings(std::vector<BindingConfig> bindings) = 0;

  // Direct calls (blocking; the admin API and CLI do the same over HTTP).
  virtual Result<AliasMove> setAlias(const std::string& model, const std::string& alias,
                                     int64_t version, const std::string& actor,
                                     const std::string& reason) = 0;
  // Moves `alias` back to the version it pointed to before its last move. kFailedPrecondition when
  // there is none (or it was deleted).
  virtual Result<AliasMove> rollback(const std::string& model, const std::string& alias,
                                     const std::string& actor, const std::string& reason) = 0;
  // Newest first; `alias` empty = every alias of the model.
  virtual Result<std::vector<AliasMove>> history(const std::string& model, const std::string& alias,
                                                 int limit = 100) = 0;
  // The routes the registry serves now (name -> target), as JSON (GET /admin/registry/routes).
  virtual std::string routesJson() const = 0;
  // The store's change generation this process last applied.
  virtual int64_t appliedGeneration() const = 0;
  // Writes queued shadow outcomes and captures now (tests, shutdown).
  virtual Status flush() = 0;
};

}  // namespace infera::registry
