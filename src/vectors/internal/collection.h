#pragma once
// One collection: its parameters, the HNSW graph, the id -> slot map, payloads, payload indexes
// and the query planner. Operations (Op) are applied by the collection's single writer; reads run
// on any thread.
//
// Threads: reads take a shared lock for their whole duration; the writer plans each insert with
// no lock (it is the only mutator) and takes the exclusive lock only to commit it, so readers wait
// at most one commit. The lock prefers writers (a stream of searches cannot starve writes).

#include <pthread.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "vectors/internal/filter.h"
#include "vectors/internal/hnsw.h"
#include "vectors/internal/json.h"
#include "vectors/internal/point_id.h"
#include "vectors/internal/sparse.h"

namespace infera::vectors {

enum class Distance : uint8_t { kCosine, kEuclid, kDot };
std::string_view distanceName(Distance d);

// A named dense vector after a collection's first (multimodal collections: an image and a text
// vector). Each has its own HNSW graph over the same slots.
struct DenseParams {
  std::string name;
  size_t dim = 0;
  Distance distance = Distance::kCosine;
  int m = 16;
  int ef_construct = 100;
  bool quantization = false;  // int8 scalar
  float quantile = 0.99f;
  bool always_ram = true;
  bool binary = false;   // 1-bit binary quantization
  bool on_disk = false;  // the original floats memory-mapped from a file
};

struct CollectionParams {
  size_t dim = 0;
  Distance distance = Distance::kCosine;
  int m = 16;
  int ef_construct = 100;
  int64_t full_scan_threshold_kb =
      10'000;                 // filtered subsets smaller than this are scanned exactly
  bool quantization = false;  // int8 scalar
  float quantile = 0.99f;
  bool always_ram = true;
  bool binary = false;          // 1-bit binary quantization (instead of int8)
  bool on_disk = false;         // the original floats memory-mapped from a file
  bool on_disk_payload = true;  // echoed only (payloads live in memory)
  // Where on_disk vectors map their (unlinked) files: the store's data dir. Not persisted.
  std::string disk_dir;
  // The first dense vector's name ("": the unnamed one), the named dense vectors after it, and
  // the named sparse vectors (Qdrant's `vectors: {name: {...}}` and `sparse_vectors`).
  std::string dense_name;
  std::vector<DenseParams> extra_dense;
  std::map<std::string, SparseModifier> sparse;
  // Records carry `vector` as an object of names (a plain list only for a lone unnamed vector).
  bool named() const { return !dense_name.empty() || !sparse.empty() || !extra_dense.empty(); }
  // 0: the first dense vector, 1 + k: extra_dense[k]; -1: no dense vector of that name.
  int denseIndex(const std::string& name) const;
  // The parameters of dense vector `i` (from denseIndex).
  DenseParams dense(int i) const;
  size_t denseCount() const { return 1 + extra_dense.size(); }
};
Json paramsToJson(const CollectionParams& p);
// The graph's parameters for dense vector `d`, its on_disk file under `disk_dir`.
HnswParams hnswParams(const DenseParams& d, const std::string& disk_dir);
Result<CollectionParams> paramsFromJson(const Json& j);

enum class PayloadType : uint8_t {
  kKeyword,
  kInteger,
  kFloat,
  kBool,
  kText,
  kUuid,
  kDatetime,
  kGeo
};
std::string_view payloadTypeName(PayloadType t);
bool payloadTypeFromName(std::string_view s, PayloadType& out);

// One write, as logged in the WAL and applied by the writer.
struct Op {
  enum class Type : uint8_t {
    kUpsert = 1,
    kDelete = 2,
    kSetPayload = 3,
    kOverwritePayload = 4,
    kDeletePayloadKeys = 5,
    kClearPayload = 6,
    kCreateIndex = 7,
    kDeleteIndex = 8,
    kUpdateVectors = 9,   // replaces the named vectors given, keeps the others
    kDeleteVectors = 10,  // removes the sparse vectors named in `keys`
  };
  Type type = Type::kUpsert;
  std::vector<PointId> ids;
  std::vector<float> vectors;  // kUpsert: ids.size() x dim, already normalised for cosine
  // kUpsert: per extra dense vector (CollectionParams::extra_dense), ids.size() x its dim.
  std::vector<std::vector<float>> extra_vectors;
  // kUpsert, kUpdateVectors: per id, its sparse vectors by name (empty: none).
  std::vector<std::vector<std::pair<std::string, SparseVector>>> sparse;
  // kUpdateVectors: per id, the dense vectors it replaces, by dense index.
  std::vector<std::vector<std::pair<int, std::vector<float>>>> dense_updates;
  std::vector<Json> payloads;     // kUpsert: one per id (null: none); set/overwrite: one
  Json filter;                    // null: by ids
  std::vector<std::string> keys;  // kDeletePayloadKeys
  std::string key;                // kSetPayload: merge at this path ("" = top level); index: field
  PayloadType index_type = PayloadType::kKeyword;
};
std::string encodeOp(const Op& op);
Result<Op> decodeOp(std::string_view bytes);

struct PayloadSelector {
  enum class Mode { kNone, kAll, kInclude, kExclude } mode = Mode::kNone;
  std::vector<JsonPath> paths;
};
// Parses with_payload (true/false, [paths], {include}/{exclude}, {enable}).
Result<PayloadSelector> parsePayloadSelector(const Json& j);
// What `sel` keeps of a payload (an object; {} for kNone).
Json selectPayload(const Json& payload, const PayloadSelector& sel);

struct SearchRequest {
  std::vector<float> vector;  // dim floats (normalised by the caller for cosine)
  std::optional<Filter> filter;
  size_t limit = 10;
  size_t offset = 0;
  std::optional<float> score_threshold;
  size_t hnsw_ef = 0;  // 0: max(ef_construct, limit + offset)
  bool exact = false;
  PayloadSelector with_payload;
  bool with_vector = false;
  std::optional<PointId> exclude;  // a query by point id leaves that point out
};

struct Record {
  PointId id;
  uint64_t version = 0;
  float score = 0;
  std::optional<Json> payload;
  std::optional<std::vector<float>> vector;                  // the first dense vector
  std::vector<std::vector<float>> extra;                     // with a vector: the other dense
  std::vector<std::pair<std::string, SparseVector>> sparse;  // with a vector: its sparse ones
};

// One level of a Query API request (Qdrant's `query` with its `prefetch`es), parsed and checked by
// the API. A level with prefetches scores their merged candidates: fused (RRF/DBSF) or rescored
// with its own vector; one without scores the collection. Filters go down to the leaves (a level's
// filter is ANDed into every prefetch below it, as Qdrant propagates them).
struct QueryNode {
  enum class Kind : uint8_t { kNone, kDense, kSparse, kRrf, kDbsf };
  Kind kind = Kind::kNone;   // kNone: points in id order (a leaf only)
  std::vector<float> dense;  // kDense: the vector's dim floats, normalised for cosine
  int dense_index = 0;       // kDense: which dense vector (CollectionParams::denseIndex)
  std::string sparse_name;   // kSparse: which sparse vector
  SparseVector sparse;       // kSparse: weights as sent (the IDF is applied at search)
  int rrf_k = 2;
  std::vector<float> weights;  // kRrf: one per prefetch, or none
  std::vector<QueryNode> prefetch;
  std::optional<Filter> filter;
  size_t limit = 10;
  std::optional<float> score_threshold;
  size_t hnsw_ef = 0;
  bool exact = false;
  // params.quantization: traverse the floats (ignore), or fetch limit x oversampling candidates
  // by the codes before the rescoring on the originals.
  bool quant_ignore = false;
  float oversampling = 1.0f;
  // kDense with `mmr`: the `limit` points picked from the mmr_candidates best (0: limit) by
  // maximal marginal relevance, lambda x relevance - (1 - lambda) x the largest similarity to a
  // point already picked; each keeps its own score (as Qdrant answers).
  bool mmr = false;
  float mmr_lambda = 0.5f;
  size_t mmr_candidates = 0;
};

// How the planner answered a filtered search (tests, stats).
enum class Plan { kHnsw, kHnswFiltered, kExactSubset, kExactAll };

struct ScrollRequest {
  std::optional<Filter> filter;
  size_t limit = 10;
  std::optional<PointId> offset;
  PayloadSelector with_payload;
  bool with_vector = false;
};

class Collection {
 public:
  Collection(std::string name, CollectionParams params);
  ~Collection();
  Collection(const Collection&) = delete;
  Collection& operator=(const Collection&) = delete;

  const std::string& name() const { return name_; }
  const CollectionParams& params() const { return params_; }

  // --- reads (any thread) ---
  Result<std::vector<Record>> search(const SearchRequest& req, SearchScratch& scratch,
                                     Plan* plan = nullptr) const;
  // The Query API: the root's ranked points from `offset` (root.limit of them).
  Result<std::vector<Record>> query(const QueryNode& root, size_t offset,
                                    const PayloadSelector& with_payload, bool with_vector,
                                    SearchScratch& scratch) const;
  // The stored vector of `id` (for a query by id); kNotFound "No point with id X found".
  Result<std::vector<float>> vectorOf(const PointId& id, int dense_index = 0) const;
  // Its sparse vector `name` (empty when the point has none).
  Result<SparseVector> sparseOf(const PointId& id, const std::string& name) const;
  std::vector<Record> retrieve(const std::vector<PointId>& ids, const PayloadSelector& sel,
                               bool with_vector) const;
  // Records in id order from `offset`; `next` is the id after the page, if any.
  std::vector<Record> scroll(const ScrollRequest& req, std::optional<PointId>& next) const;
  size_t count(const Filter* filter) const;
  size_t points() const;
  // GET /collections/{name}'s result.
  Json info() const;

  // --- the writer ---
  // Applies `op` with sequence number `seq` (its operation id). An error changes nothing.
  Status apply(const Op& op, uint64_t seq);
  uint64_t appliedSeq() const { return applied_seq_; }
  // Writes the collection's whole state; loads it back into an empty collection.
  Status save(const std::string& file) const;
  Status load(const std::string& file);
  // Graph and memory figures (stats, benchmarks).
  Json stats() const;

 private:
  class ReadLock;
  class WriteLock;
  struct FieldIndex;
  struct Candidates;

  Status upsert(const Op& op, uint64_t seq);
  void removeSlot(uint32_t slot);
  void setPayloadLocked(uint32_t slot, Json payload);
  std::vector<uint32_t> resolveTargets(const Op& op, Status& status) const;
  bool matchesSlot(const Filter& f, uint32_t slot) const;
  Candidates plan(const Filter& f) const;
  Candidates planCondition(const Condition& c) const;
  Record record(uint32_t slot, const PayloadSelector& sel, bool with_vector) const;
  float score(float dist, int dense_index = 0) const;
  bool higherIsBetter(const QueryNode& q) const;
  const Hnsw& hnsw(int i) const { return i == 0 ? index_ : *extra_[size_t(i) - 1]; }
  Hnsw& hnsw(int i) { return i == 0 ? index_ : *extra_[size_t(i) - 1]; }
  Status updateVectors(const Op& op, uint64_t seq);
  void trainQuantizers();
  // One level's ranked slots, at most `limit`, best first (the caller holds the read lock).
  std::vector<Scored> rank(const QueryNode& q, const Filter* inherited, size_t limit,
                           SearchScratch& scratch) const;
  std::vector<Scored> mmrSelect(std::vector<Scored> cands, const QueryNode& q, size_t limit) const;
  // The `want` nearest allowed slots to `vec` by the planner's choice (read lock held).
  void nearest(int dense_index, const float* vec, const Filter* filter, size_t want, size_t hnsw_ef,
               bool exact, SearchScratch& scratch, std::vector<Neighbor>& found, Plan* plan_out,
               const QueryNode* q = nullptr) const;
  void indexSlot(uint32_t slot, bool add);
  size_t words() const { return (index_.capacity() + 63) / 64; }

  std::string name_;
  CollectionParams params_;
  mutable pthread_rwlock_t lock_;
  Hnsw index_;                                // the first dense vector; its slots are the points'
  std::vector<std::unique_ptr<Hnsw>> extra_;  // the other dense vectors, over the same slots
  std::map<PointId, uint32_t> ids_;
  std::vector<PointId> slot_ids_;
  std::vector<Json> payloads_;
  std::vector<uint64_t> versions_;
  std::vector<uint32_t> free_slots_;
  std::map<std::string, std::unique_ptr<FieldIndex>> field_indexes_;
  std::map<std::string, SparseIndex> sparse_;  // by name, as params_.sparse
  SearchScratch writer_scratch_;
  uint64_t applied_seq_ = 0;
  bool any_seq_ = false;
};

}  // namespace infera::vectors
