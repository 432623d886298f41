// Fuzz target: the vector index's reading of Qdrant request bodies (vectors/internal/json.h
// readBody: the floor's reader; filter.h parseFilter and matches; point_id.h). The input is a
// request body such as POST /collections/{c}/points/scroll takes: {"filter": ..., "ids": [...]}.
//
// Properties, for every input:
//  - nothing throws or aborts, however deep, wrong-typed or ill-formed the body;
//  - a filter that parses and its negation ({"must_not":[filter]}) disagree on every payload of a
//    fixed set: the reading of a filter is a predicate, not a crash or a guess;
//  - an id that reads from JSON reads back from its own text as the same id;
//  - a search or Query API body (prefetch trees, fusion, named and sparse vectors) that reads runs
//    on a fixed collection and answers at most its limit, ranked (MMR: in its picking order); one
//    that does not is an error;
//  - a point's vectors that read have the collection's sizes, and sparse ones strictly increasing
//    indices with as many values.

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "vectors/internal/filter.h"
#include "vectors/internal/json.h"
#include "vectors/internal/point_id.h"
#include "vectors/internal/request.h"

namespace {

using infera::fuzz::printable;
using infera::vectors::Json;

const std::vector<Json>& payloads() {
  static const std::vector<Json> p = {
      Json::object(),
      Json::parse(R"({"color":"red","n":5,"tags":["a","b"],"geo":{"lat":52.5,"lon":13.4}})"),
      Json::parse(R"({"color":"blue","n":-1.5,"nested":[{"a":1},{"a":2}],"empty":[],"null":null})"),
      Json::parse(R"({"n":10,"text":"the quick brown fox","flag":true,"color":["red","green"]})"),
  };
  return p;
}

// Dense "d" (3, Dot), "e" (2, Euclid) and sparse "s" (IDF): 20 points.
const infera::vectors::Collection& collection() {
  using namespace infera::vectors;
  static const Collection* c = [] {
    CollectionParams p;
    p.dim = 3;
    p.distance = Distance::kDot;
    p.dense_name = "d";
    DenseParams e;
    e.name = "e";
    e.dim = 2;
    e.distance = Distance::kEuclid;
    p.extra_dense = {e};
    p.sparse = {{"s", SparseModifier::kIdf}};
    auto* coll = new Collection("fuzz", p);
    Op op;
    op.type = Op::Type::kUpsert;
    op.extra_vectors.resize(1);
    for (uint64_t i = 0; i < 20; ++i) {
      op.ids.push_back(PointId::num(i));
      for (int k = 0; k < 3; ++k) op.vectors.push_back(float((i * 7 + uint64_t(k) * 3) % 11) - 5);
      for (int k = 0; k < 2; ++k) op.extra_vectors[0].push_back(float((i * 5 + uint64_t(k)) % 7));
      op.payloads.push_back(Json{{"n", i}});
      op.sparse.push_back(
          {{"s", SparseVector{{uint32_t(i % 4), uint32_t(4 + i % 3)}, {1.0f, 0.5f}}}});
    }
    if (!coll->apply(op, 1).isOk()) std::abort();
    return coll;
  }();
  return *c;
}

void checkQuery(const Json& j, bool legacy, std::string_view body) {
  using namespace infera::vectors;
  auto q = parseQueryRequest(j, collection(), legacy);
  if (!q.ok()) return;
  SearchScratch scratch;
  auto r = collection().query(q->root, q->offset, q->with_payload, q->with_vector.any, scratch);
  FUZZ_CHECK(r.ok(), "a query that reads fails to run: " + printable(body));
  FUZZ_CHECK(r->size() <= q->root.limit, "more points than the limit: " + printable(body));
  const bool euclid_leaf = q->root.kind == QueryNode::Kind::kDense && q->root.dense_index == 1;
  // MMR answers in the order it picked, each point with its own score (as Qdrant does).
  for (size_t i = 1; i < r->size() && !q->root.mmr; ++i) {
    const float a = (*r)[i - 1].score, b = (*r)[i].score;
    FUZZ_CHECK(euclid_leaf ? a <= b : a >= b, "points out of rank order: " + printable(body));
  }
  std::string out = recordsJson(*r, true, collection().params(), q->with_vector);
  FUZZ_CHECK(infera::vectors::readBody(out).ok(), "records that do not read back: " + out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    auto read = infera::vectors::readBody(body);
    if (!read.ok() || !read->is_object()) return 0;
    const Json& j = *read;
    if (j.contains("filter")) {
      auto f = infera::vectors::parseFilter(j["filter"]);
      if (f.ok()) {
        Json negated = Json::object();
        negated["must_not"] = Json::array({j["filter"]});
        auto n = infera::vectors::parseFilter(negated);
        FUZZ_CHECK(n.ok(), "a filter parses but its negation does not: " + printable(body) + " (" +
                               n.status().message() + ")");
        const auto id = infera::vectors::PointId::num(7);
        for (const auto& p : payloads()) {
          FUZZ_CHECK(infera::vectors::matches(*f, p, id) != infera::vectors::matches(*n, p, id),
                     "a filter and its negation agree on " + p.dump() + ": " + printable(body));
        }
      }
    }
    if (j.contains("query") || j.contains("prefetch")) checkQuery(j, false, body);
    if (j.contains("vector") && (j.contains("limit") || j.contains("top")))
      checkQuery(j, true, body);
    if (j.contains("points") && j["points"].is_array()) {
      const auto& p = collection().params();
      for (const auto& pt : j["points"]) {
        if (!pt.is_object() || !pt.contains("vector")) continue;
        std::vector<std::vector<float>> dense;
        std::vector<std::pair<std::string, infera::vectors::SparseVector>> sparse;
        if (!infera::vectors::parsePointVectors(pt["vector"], p, "v", true, dense, sparse).isOk())
          continue;
        FUZZ_CHECK(dense.size() == 2 && dense[0].size() == 3 && dense[1].size() == 2,
                   "dense vectors of the wrong size read: " + printable(body));
        for (const auto& [name, v] : sparse) {
          FUZZ_CHECK(v.indices.size() == v.values.size(), "unequal sparse: " + printable(body));
          for (size_t i = 1; i < v.indices.size(); ++i)
            FUZZ_CHECK(v.indices[i - 1] < v.indices[i], "unsorted sparse: " + printable(body));
        }
      }
    }
    if (j.contains("ids") && j["ids"].is_array()) {
      for (const auto& v : j["ids"]) {
        auto id = infera::vectors::pointIdFromJson(v);
        if (!id.ok()) continue;
        auto again = infera::vectors::pointIdFromText(id->toString());
        FUZZ_CHECK(again.ok() && *again == *id,
                   "an id does not read back from its text: " + v.dump() + " -> " + id->toString());
      }
    }
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, std::string("an exception escaped: ") + e.what() + " on " + printable(body));
  }
  return 0;
}
