#pragma once
// The Qdrant REST API on one loop: request parsing, validation (a bad request changes nothing),
// the planner's search, writes handed to the Store and awaited, and Qdrant's envelope and errors.
// One instance per loop (owned by that loop's router); not thread-safe.

#include <memory>
#include <string>

#include "net/router.h"
#include "vectors/internal/store.h"
#include "vectors/vectors.h"

namespace infera::access {
class AccessWorker;
}

namespace infera::vectors {

void addQdrantRoutes(Store& store, const VectorsConfig& config, net::asio::io_context& ctx,
                     net::Router& router, access::AccessWorker* access);

}  // namespace infera::vectors
