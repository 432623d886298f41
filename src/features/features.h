#pragma once
// The online feature store: definitions as code (a repository of YAML files: entities, feature
// views, push sources, feature services, stream aggregations), an online store (RocksDB embedded,
// or Redis for scale-out: one config line), and Feast's feature-server API on the data port
// (POST /get-online-features, /push, /write-to-online-store; GET /health) with access control.
//
//   features::FeaturesConfig cfg;                       // the `features:` section
//   auto fs = features::FeatureStore::create(cfg, {metrics, workers, &clock});
//   // per loop, on that loop, before it serves:
//   (*fs)->addDataRoutes(i, ctx, data_router, access_worker);
//   (*fs)->addAdminRoutes(admin_router, guard);        // plan, apply, registry, ingest
//   auto plan = (*fs)->apply(files);                   // a new registry, swapped into every loop
//
// Errors: create() is kInvalidArgument for a bad repository (every error with file, key path and
// line), kUnavailable when the store cannot be opened or reached. plan()/apply() are
// kInvalidArgument for a bad repository and kFailedPrecondition for a change that breaks a served
// feature (nothing is applied then).
//
// Thread-safety: create/plan/apply from any thread (one at a time); the routes run on their
// loops. The store must outlive the servers whose routers hold its routes.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "net/asio.h"
#include "net/router.h"

namespace infera {
class ConfigReader;
}
namespace infera::obs {
class MetricsRegistry;
}
namespace infera::access {
class AccessWorker;
}

namespace infera::features {

struct FeaturesConfig {
  bool enabled = false;           // true when the config file has a `features:` section
  std::string store = "rocksdb";  // "rocksdb" (embedded, under data_dir) or "redis://host:port/db"
  std::string data_dir = "infera-features";  // RocksDB goes in <data_dir>/rocksdb
  std::string
      repository;  // a directory of definitions applied at start ("" = keep the stored ones)
  std::string redis_prefix = "infera:f:";
  int64_t redis_timeout_ms = 200;
  // A value past its view's ttl is served as OUTSIDE_MAX_AGE (value kept) for this long, then is
  // gone (NOT_FOUND) and the store reclaims it.
  int64_t retain_expired_s = 86400;
  bool enforce_ttl = true;  // false: stale values stay PRESENT (Feast's Python server)
  int pool_threads = 2;     // blocking work: RocksDB, aggregation updates
  int pool_queue = 4096;
  bool sync_writes = false;  // RocksDB WAL fsync per write (power loss; kill -9 needs none)
  int64_t block_cache_mb = 256;
};

// Reads the `features:` section (call when it is present).
void readFeaturesConfig(ConfigReader& r, FeaturesConfig& cfg);
// Settings a reload cannot change (every one: the store is opened once): their names.
std::vector<std::string> restartNeeded(const FeaturesConfig& running, const FeaturesConfig& next);

struct FeaturesDeps {
  obs::MetricsRegistry& metrics;
  int workers = 1;
  const Clock* clock = nullptr;  // TTL and windows; null = the system clock
};

// What plan/apply found: the changes ("+ feature view x (3 features)", "- feature view y ...")
// and whether they were applied.
struct PlanResult {
  std::vector<std::string> changes;
  std::vector<std::string> breaking;
  bool applied = false;
};

// Reads and validates a repository directory without opening a store (`infera config validate`):
// its counts, or kInvalidArgument with every error (file, key path, line), kNotFound without files.
struct RepositorySummary {
  size_t entities = 0;
  size_t views = 0;
  size_t services = 0;
};
Result<RepositorySummary> checkRepository(const std::string& dir);

class FeatureStore {
 public:
  static Result<std::unique_ptr<FeatureStore>> create(const FeaturesConfig& config,
                                                      FeaturesDeps deps);
  virtual ~FeatureStore() = default;

  // On loop `loop`'s thread before it serves: the Feast routes, with that loop's store session
  // and parser (owned by the router). `access` is the loop's access worker (null: none).
  virtual void addDataRoutes(int loop, net::asio::io_context& ctx, net::Router& router,
                             access::AccessWorker* access) = 0;
  // /admin/features/{plan,apply,registry,ingest}; `guard` wraps each (the admin token check).
  virtual void addAdminRoutes(net::Router& admin, const net::RouteGuard& guard) = 0;

  // A repository (file name -> YAML text): what applying it would change, or apply it (storage
  // of new views created, of removed views freed). Blocking.
  virtual Result<PlanResult> plan(const std::map<std::string, std::string>& files) = 0;
  virtual Result<PlanResult> apply(const std::map<std::string, std::string>& files) = 0;
};

}  // namespace infera::features
