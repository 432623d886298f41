#pragma once
// The vector index service: collections of vectors with JSON payloads, HNSW search with payload
// filters applied inside the graph traversal, durable writes (WAL + snapshots), served on the data
// port with Qdrant's REST API (`/collections/...`, the {"result","status","time"} envelope), so
// `@qdrant/js-client-rest` and curl users of Qdrant work unchanged. docs/vectors.md has the API,
// the engine, the durability model and what Qdrant has that Infera does not.
//
//   auto v = vectors::VectorService::create(config, workers);   // loads every collection
//   // per loop, on that loop, before it serves:
//   (*v)->addDataRoutes(i, ctx, data_router, access_worker);
//
// Threads: searches run on the calling loop (CPU work, like an in-process index); writes go to
// the service's writer threads, which append to the WAL, fsync, apply and post the answer back to
// the loop. create() blocks (it reads the data directory); destroy the service after the loops
// stopped (it finishes the queued writes and snapshots every collection).

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "net/asio.h"
#include "net/router.h"

namespace infera {
class ConfigReader;
}
namespace infera::access {
class AccessWorker;
}

namespace infera::vectors {

// The `vectors` section. Off unless present. Every setting needs a restart.
struct VectorsConfig {
  bool enabled = false;
  std::string data_dir = "./infera-data/vectors";
  std::string path_prefix;               // "" or "/qdrant": the API at PREFIX/collections/...
  int write_threads = 1;                 // writer threads (collections are spread over them)
  int64_t max_batch_points = 10'000;     // points per upsert; more is a 400
  int64_t max_queued_writes = 1'024;     // per writer thread; more is a 503
  int64_t snapshot_min_points = 20'000;  // points written between snapshots (at least)
  bool fsync = true;                     // false: no fdatasync (tests, benchmarks; not durable)
};

// The section's keys (reader at the section; sets enabled). Errors go to the reader.
void readVectorsConfig(ConfigReader& section, VectorsConfig& out);

class VectorService {
 public:
  // Opens (or creates) data_dir and loads every collection: its snapshot, then its WAL's tail.
  // kInternal when a file cannot be read.
  static Result<std::unique_ptr<VectorService>> create(const VectorsConfig& config, int workers);
  virtual ~VectorService() = default;

  // On loop `loop`'s thread before it serves: the Qdrant API on `router` (its per-loop state owned
  // by the router). `access`: that loop's access worker (null: no access control); with it, every
  // request needs a key (`api-key` header or `Authorization: Bearer`) allowed the collection.
  virtual void addDataRoutes(int loop, net::asio::io_context& ctx, net::Router& router,
                             access::AccessWorker* access) = 0;
  // On the admin router: GET /admin/vectors/collections (every collection's Qdrant info object and
  // Infera's stats, for the console and operators), each route wrapped in `guard` (the admin
  // token check). Called once, before the admin loop serves; the handlers run on that loop.
  virtual void addAdminRoutes(net::Router& admin, const net::RouteGuard& guard) = 0;
  // Seconds create() took to load the data directory, and the points it re-applied from WALs.
  virtual double loadSeconds() const = 0;
  virtual uint64_t replayedPoints() const = 0;
};

}  // namespace infera::vectors
