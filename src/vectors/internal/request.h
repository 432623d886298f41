#pragma once
// Reading Qdrant's request JSON into the collection's terms: a point's vectors (dense, named,
// sparse), search and Query API requests (prefetch trees, fusion, `using`, query by id), with
// Qdrant's error words and codes. A request that does not read changes nothing. Pure functions
// (a query by id reads the collection); thread-compatible.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "vectors/internal/collection.h"

namespace infera::vectors {

Status badRequest(const std::string& m);  // 400 "Bad request: m"
Status wrongInput(const std::string& m);  // 400 "Wrong input: m"
// obj[key] when it is a string, else `def`.
std::string stringOr(const Json& obj, const char* key, const std::string& def);
Result<std::optional<Filter>> optionalFilter(const Json& body, const char* key = "filter");
Result<size_t> optionalCount(const Json& body, const char* key, size_t def);
Result<bool> optionalBool(const Json& body, const char* key, bool def);
Result<PayloadSelector> selector(const Json& body, bool def);

// with_vector / with_vectors: false, true, or a list of vector names (checked to exist).
struct VectorSelector {
  bool any = false;
  std::vector<std::string> names;  // empty with `any`: all
  bool wants(const std::string& name) const;
};
Result<VectorSelector> vectorSelector(const Json& body, const CollectionParams& p);

// A dense vector (a JSON list) of p.dim finite floats within the magnitude that keeps every score
// finite, normalised for cosine.
Result<std::vector<float>> parseDense(const Json& list, const DenseParams& d);
// A sparse vector {indices, values}: indices unique non-negative 32-bit integers, as many finite
// values; returned sorted by index. `where` names it in errors ("points[3].vector.text").
Result<SparseVector> parseSparse(const Json& j, const std::string& where);
// A point's `vector`: a list (the unnamed dense vector) or {name: list | {indices, values}}.
// `dense` gets one vector per dense index (CollectionParams::denseIndex; empty: not given).
// `whole`: an upsert, which needs every dense vector; else an update of the named ones only.
Status parsePointVectors(const Json& v, const CollectionParams& p, const std::string& where,
                         bool whole, std::vector<std::vector<float>>& dense,
                         std::vector<std::pair<std::string, SparseVector>>& sparse);

// A search or Query API request read whole.
struct QueryRequest {
  QueryNode root;
  size_t offset = 0;
  PayloadSelector with_payload;
  VectorSelector with_vector;
  bool scroll = false;  // no query and no prefetch: points in id order
  size_t nodes = 0;     // levels (the root and its prefetches): each is a search
  size_t limits = 0;    // their limits (and the offset) added up
};
// What one batch may hold over all of its searches (a batch is one request's work).
inline constexpr size_t kMaxBatchNodes = 1024;
inline constexpr size_t kMaxBatchLimits = 1'000'000;
// `legacy`: the /points/search shape (`vector`, `top`); else /points/query's.
Result<QueryRequest> parseQueryRequest(const Json& body, const Collection& coll, bool legacy);

// Records as Qdrant writes them: `vector` a list for a collection with only the unnamed dense
// vector, else an object of the selected names.
void appendRecord(std::string& out, const Record& r, bool scored, const CollectionParams& p,
                  const VectorSelector& sel);
std::string recordsJson(const std::vector<Record>& rs, bool scored, const CollectionParams& p,
                        const VectorSelector& sel);

}  // namespace infera::vectors
