#include "vectors/internal/request.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "net/http.h"

namespace infera::vectors {

Status badRequest(const std::string& m) { return Status::invalidArgument("Bad request: " + m); }
Status wrongInput(const std::string& m) { return Status::invalidArgument("Wrong input: " + m); }

namespace {
Status formatError(const std::string& m) {
  return Status::invalidArgument("Format error in JSON body: " + m);
}
Status validationError(const std::string& m) {
  return Status::failedPrecondition("Validation error in JSON body: [" + m + "]");
}
Status noSuchVector(const std::string& name) {
  return wrongInput("Not existing vector name error: " + name);
}
Status conversion() { return wrongInput("Conversion between sparse and regular vectors failed"); }

// Prefetches in one request, counting the root: each is a search, so a request stays bounded.
constexpr size_t kMaxQueryNodes = 64;
// limit (+ offset at the root), and the limits of a request's levels added up.
constexpr size_t kMaxLimit = 100'000;

bool isSparse(const Json& j) { return j.is_object() && j.contains("indices"); }
constexpr float kMaxSparseValue = 1e15f;
// RRF weights: 1 / ((rank + 1) / w + k - 1) <= w for k >= 1, so 64 lists stay finite.
constexpr double kMaxRrfWeight = 1e6;
}  // namespace

std::string stringOr(const Json& obj, const char* key, const std::string& def) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : def;
}

Result<std::optional<Filter>> optionalFilter(const Json& body, const char* key) {
  if (!body.contains(key) || body[key].is_null()) return std::optional<Filter>();
  INFERA_ASSIGN_OR_RETURN(Filter f, parseFilter(body[key]));
  return std::optional<Filter>(std::move(f));
}

Result<size_t> optionalCount(const Json& body, const char* key, size_t def) {
  if (!body.contains(key) || body[key].is_null()) return def;
  if (!body[key].is_number_unsigned())
    return formatError(std::string(key) + " must be a non-negative integer");
  return body[key].get<size_t>();
}

Result<bool> optionalBool(const Json& body, const char* key, bool def) {
  if (!body.contains(key) || body[key].is_null()) return def;
  if (body[key].is_boolean()) return body[key].get<bool>();
  return formatError(std::string(key) + " must be a bool");
}

Result<PayloadSelector> selector(const Json& body, bool def) {
  if (!body.contains("with_payload")) {
    PayloadSelector s;
    s.mode = def ? PayloadSelector::Mode::kAll : PayloadSelector::Mode::kNone;
    return s;
  }
  return parsePayloadSelector(body["with_payload"]);
}

bool VectorSelector::wants(const std::string& name) const {
  return any && (names.empty() || std::find(names.begin(), names.end(), name) != names.end());
}

Result<VectorSelector> vectorSelector(const Json& body, const CollectionParams& p) {
  const char* key = body.contains("with_vector") ? "with_vector" : "with_vectors";
  VectorSelector s;
  if (!body.contains(key) || body[key].is_null()) return s;
  const Json& v = body[key];
  if (v.is_boolean()) {
    s.any = v.get<bool>();
    return s;
  }
  if (!v.is_array()) return formatError(std::string(key) + " must be a bool or a list of names");
  for (const auto& n : v) {
    if (!n.is_string()) return formatError(std::string(key) + " names must be strings");
    const std::string name = n.get<std::string>();
    if (p.denseIndex(name) < 0 && !p.sparse.contains(name)) return noSuchVector(name);
    s.names.push_back(name);
  }
  s.any = !s.names.empty();
  return s;
}

// The largest component magnitude a collection of `dim` dimensions takes. With every |x_i| and
// |y_i| at most B, |dot| <= dim * B^2 and the squared Euclidean distance <= dim * (2B)^2, so
// B = sqrt(FLT_MAX / (8 * dim)) keeps both, every partial sum a kernel forms (in any order) and
// float32 rounding a factor of two below FLT_MAX: no score is ever inf. Cosine vectors are
// normalised in double, but one rule for every metric is simpler to state, and no embedding comes
// near it (4.6e18 at dim 2, 2.5e16 at dim 65536).
static double componentLimit(size_t dim) {
  return std::sqrt(double(std::numeric_limits<float>::max()) / (8.0 * double(dim)));
}

Result<std::vector<float>> parseDense(const Json& v, const DenseParams& p) {
  if (!v.is_array()) return formatError("vector must be a list of numbers");
  if (v.size() != p.dim) {
    return wrongInput("Vector dimension error: expected dim: " + std::to_string(p.dim) + ", got " +
                      std::to_string(v.size()));
  }
  std::vector<float> out(p.dim);
  const double limit = componentLimit(p.dim);
  for (size_t i = 0; i < p.dim; ++i) {
    const Json& x = v[i];
    if (!x.is_number()) return formatError("vector must be a list of numbers");
    out[i] = float(x.get<double>());
    if (!std::isfinite(out[i]))
      return wrongInput("vector component " + std::to_string(i) + " is not a finite number");
    if (std::fabs(double(out[i])) > limit) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "vector component %zu is %g: a %zu-dimensional collection takes magnitudes up "
                    "to %g (larger ones could overflow the float32 score)",
                    i, double(out[i]), p.dim, limit);
      return wrongInput(buf);
    }
  }
  if (p.distance == Distance::kCosine) {
    double n = 0;
    for (float x : out) n += double(x) * double(x);
    n = std::sqrt(n);
    if (n > 1e-30 && std::fabs(n - 1.0) > 1e-6) {
      for (float& x : out) x = float(x / n);
    }
  }
  return out;
}

Result<SparseVector> parseSparse(const Json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("indices") || !j.contains("values"))
    return formatError(where + ": a sparse vector needs `indices` and `values`");
  for (const auto& [k, v] : j.items()) {
    if (k != "indices" && k != "values")
      return formatError(where + ": unknown field `" + k + "`, expected `indices` or `values`");
  }
  const Json& ix = j["indices"];
  const Json& vs = j["values"];
  if (!ix.is_array() || !vs.is_array())
    return formatError(where + ": indices and values must be lists");
  std::vector<std::pair<uint32_t, float>> entries;
  entries.reserve(ix.size());
  for (const auto& x : ix) {
    if (!x.is_number_unsigned() || x.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
      return formatError(where + ".indices: invalid value " + dumpJson(x) +
                         ", expected u32 (an integer in 0..4294967295)");
    }
    entries.push_back({uint32_t(x.get<uint64_t>()), 0.0f});
  }
  for (const auto& x : vs) {
    if (!x.is_number()) return formatError(where + ".values: invalid value, expected a number");
  }
  if (vs.size() != ix.size())
    return validationError(where + ".values: must be the same length as indices");
  for (size_t i = 0; i < vs.size(); ++i) {
    entries[i].second = float(vs[i].get<double>());
    if (!std::isfinite(entries[i].second))
      return wrongInput(where + ".values[" + std::to_string(i) + "] is not a finite number");
    // |value| <= 1e15: a product of two is <= 1e30, and a sum of as many as a body can hold (times
    // an IDF weight) stays far below float's 3.4e38, so no sparse score is ever inf or NaN.
    if (std::fabs(entries[i].second) > kMaxSparseValue) {
      return wrongInput(where + ".values[" + std::to_string(i) + "] is " + dumpJson(vs[i]) +
                        ": sparse values take magnitudes up to 1e15 (larger ones could overflow "
                        "the float32 score)");
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  SparseVector out;
  out.indices.reserve(entries.size());
  out.values.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i && entries[i].first == entries[i - 1].first)
      return validationError(where + ".indices: must be unique");
    out.indices.push_back(entries[i].first);
    out.values.push_back(entries[i].second);
  }
  return out;
}

Status parsePointVectors(const Json& v, const CollectionParams& p, const std::string& where,
                         bool whole, std::vector<std::vector<float>>& dense,
                         std::vector<std::pair<std::string, SparseVector>>& sparse) {
  dense.assign(p.denseCount(), {});
  sparse.clear();
  if (v.is_array()) {
    if (!p.dense_name.empty()) return noSuchVector("");
    INFERA_ASSIGN_OR_RETURN(dense[0], parseDense(v, p.dense(0)));
    return Status::ok();
  }
  if (!v.is_object()) return formatError(where + " must be a list or an object of named vectors");
  if (isSparse(v)) return conversion();  // a bare sparse vector, not named
  for (const auto& [name, x] : v.items()) {
    if (const int i = p.denseIndex(name); i >= 0) {
      if (isSparse(x)) return conversion();
      INFERA_ASSIGN_OR_RETURN(dense[size_t(i)], parseDense(x, p.dense(i)));
    } else if (p.sparse.contains(name)) {
      if (x.is_array()) return conversion();
      INFERA_ASSIGN_OR_RETURN(SparseVector s, parseSparse(x, where + "." + name));
      if (!s.empty() || !whole) sparse.emplace_back(name, std::move(s));
    } else {
      return noSuchVector(name);
    }
  }
  if (whole) {
    for (int i = 0; i < int(dense.size()); ++i) {
      if (dense[size_t(i)].empty()) {
        return badRequest(where + " has no `" + p.dense(i).name +
                          "` vector: Infera needs every point's dense vectors");
      }
    }
  }
  return Status::ok();
}

namespace {

struct Reading {
  const Collection& coll;
  bool legacy;
  size_t nodes = 0;
  size_t limits = 0;                // the levels' limits added up
  std::vector<PointId> referenced;  // points queried by id: left out of the answer
};

// `target` (a list, {indices, values}, or a point id) as the query of `node` on vector `name`.
Status readTarget(Reading& rd, const Json& target, const std::string& name, QueryNode& node) {
  const CollectionParams& p = rd.coll.params();
  const int dense_index = p.denseIndex(name);
  const bool dense = dense_index >= 0;
  if (!dense && !p.sparse.contains(name)) return noSuchVector(name);
  node.dense_index = std::max(0, dense_index);
  if (target.is_number_unsigned() || target.is_string()) {
    INFERA_ASSIGN_OR_RETURN(PointId id, pointIdFromJson(target));
    rd.referenced.push_back(id);
    if (dense) {
      node.kind = QueryNode::Kind::kDense;
      INFERA_ASSIGN_OR_RETURN(node.dense, rd.coll.vectorOf(id, dense_index));
    } else {
      node.kind = QueryNode::Kind::kSparse;
      node.sparse_name = name;
      INFERA_ASSIGN_OR_RETURN(node.sparse, rd.coll.sparseOf(id, name));
    }
    return Status::ok();
  }
  const Json* v = &target;
  if (target.is_object() && target.size() == 1 && target.begin().key().empty() &&
      target.begin().value().is_array()) {
    v = &target.begin().value();  // {"": [...]}: the unnamed vector spelled out
  }
  if (v->is_array() && !v->empty() && (*v)[0].is_array())
    return badRequest("multivectors are not supported by Infera");
  if (dense) {
    if (isSparse(*v)) return conversion();
    if (!v->is_array()) return formatError("query must be a vector, a sparse vector or a point id");
    node.kind = QueryNode::Kind::kDense;
    INFERA_ASSIGN_OR_RETURN(node.dense, parseDense(*v, p.dense(dense_index)));
    return Status::ok();
  }
  if (v->is_array()) return conversion();
  node.kind = QueryNode::Kind::kSparse;
  node.sparse_name = name;
  INFERA_ASSIGN_OR_RETURN(node.sparse, parseSparse(*v, "query"));
  return Status::ok();
}

// The `query` of a /points/query level.
Status readQuery(Reading& rd, const Json& q, const std::string& name, bool named_using,
                 QueryNode& node) {
  if (!q.is_object() || isSparse(q)) return readTarget(rd, q, name, node);
  if (q.contains("fusion") || q.contains("rrf")) {
    if (named_using) return badRequest("Fusion queries cannot be combined with the 'using' field.");
    if (q.contains("fusion")) {
      const std::string f = stringOr(q, "fusion", "");
      if (f != "rrf" && f != "dbsf")
        return formatError("unknown variant `" + f + "`, expected `rrf` or `dbsf`");
      node.kind = f == "rrf" ? QueryNode::Kind::kRrf : QueryNode::Kind::kDbsf;
      return Status::ok();
    }
    const Json& r = q["rrf"];
    if (!r.is_object()) return formatError("rrf must be an object");
    node.kind = QueryNode::Kind::kRrf;
    if (r.contains("k") && !r["k"].is_null()) {
      if (!r["k"].is_number_unsigned() || r["k"].get<uint64_t>() < 1 ||
          r["k"].get<uint64_t>() > 1'000'000)
        return validationError("rrf.k: value must be an integer in 1..1000000");
      node.rrf_k = int(r["k"].get<uint64_t>());
    }
    if (r.contains("weights") && !r["weights"].is_null()) {
      if (!r["weights"].is_array()) return formatError("rrf.weights must be a list of numbers");
      for (const auto& w : r["weights"]) {
        if (!w.is_number() || !std::isfinite(w.get<double>()))
          return formatError("rrf.weights must be a list of numbers");
        if (std::fabs(w.get<double>()) > kMaxRrfWeight)
          return validationError("rrf.weights: a weight must be within -1e6..1e6");
        node.weights.push_back(w.get<float>());
      }
    }
    return Status::ok();
  }
  if (q.contains("nearest")) {
    INFERA_RETURN_IF_ERROR(readTarget(rd, q["nearest"], name, node));
    if (q.contains("mmr") && !q["mmr"].is_null()) {
      const Json& m = q["mmr"];
      if (!m.is_object()) return formatError("mmr must be an object");
      if (node.kind != QueryNode::Kind::kDense)
        return badRequest("mmr is supported on dense vectors only by Infera");
      node.mmr = true;
      if (m.contains("diversity") && !m["diversity"].is_null()) {
        if (!m["diversity"].is_number() || m["diversity"].get<double>() < 0 ||
            m["diversity"].get<double>() > 1)
          return validationError("mmr.diversity: value must be in 0..1");
        node.mmr_lambda = 1.0f - m["diversity"].get<float>();
      }
      INFERA_ASSIGN_OR_RETURN(node.mmr_candidates, optionalCount(m, "candidates_limit", 0));
      rd.limits += node.mmr_candidates;
    }
    return Status::ok();
  }
  const std::string kind = q.empty() ? std::string("{}") : q.begin().key();
  for (const char* k : {"recommend", "discover", "context", "order_by", "formula", "sample",
                        "relevance_feedback"}) {
    if (kind == k) {
      return badRequest("query kind " + kind +
                        " is not supported by Infera (nearest, fusion and rescoring are)");
    }
  }
  return formatError("data did not match any variant of untagged enum QueryInterface");
}

Status readLevel(Reading& rd, const Json& j, bool root, QueryNode& node) {
  if (++rd.nodes > kMaxQueryNodes) {
    return badRequest("a query holds at most " + std::to_string(kMaxQueryNodes - 1) +
                      " prefetches");
  }
  if (!j.is_object())
    return formatError(root ? "expected an object" : "prefetch must be an object");
  if (!rd.legacy && j.contains("lookup_from") && !j["lookup_from"].is_null())
    return badRequest("lookup_from is not supported by Infera");
  if (j.contains("using") && !j["using"].is_null() && !j["using"].is_string())
    return formatError("using must be a string");
  const bool named_using = j.contains("using") && j["using"].is_string();
  const std::string name = stringOr(j, "using", "");
  if (rd.legacy) {
    if (!j.contains("vector")) return formatError("missing field `vector`");
    const Json& v = j["vector"];
    if (v.is_object() && v.contains("vector")) {
      INFERA_RETURN_IF_ERROR(readTarget(rd, v["vector"], stringOr(v, "name", ""), node));
    } else {
      INFERA_RETURN_IF_ERROR(readTarget(rd, v, "", node));
    }
  } else {
    if (j.contains("prefetch") && !j["prefetch"].is_null()) {
      const Json& pf = j["prefetch"];
      if (!pf.is_array() && !pf.is_object())
        return formatError("prefetch must be an object or a list");
      if (pf.is_object()) {
        node.prefetch.emplace_back();
        INFERA_RETURN_IF_ERROR(readLevel(rd, pf, false, node.prefetch.back()));
      } else {
        for (const auto& x : pf) {
          node.prefetch.emplace_back();
          INFERA_RETURN_IF_ERROR(readLevel(rd, x, false, node.prefetch.back()));
        }
      }
    }
    if (j.contains("query") && !j["query"].is_null())
      INFERA_RETURN_IF_ERROR(readQuery(rd, j["query"], name, named_using, node));
  }
  using K = QueryNode::Kind;
  const bool fusion = node.kind == K::kRrf || node.kind == K::kDbsf;
  if (!node.prefetch.empty() && node.kind == K::kNone) {
    return badRequest(
        "A query is needed to merge the prefetches. Can't have prefetches without defining a "
        "query.");
  }
  if (fusion && node.prefetch.empty()) return badRequest("cannot apply Fusion without prefetches");
  if (!node.weights.empty() && node.weights.size() != node.prefetch.size()) {
    return badRequest("Number of weights in RRF should match number of pre-fetches: got " +
                      std::to_string(node.weights.size()) + ", expected " +
                      std::to_string(node.prefetch.size()));
  }
  if (j.contains("score_threshold") && !j["score_threshold"].is_null()) {
    if (!j["score_threshold"].is_number()) return formatError("score_threshold must be a number");
    if (node.kind == K::kNone) {
      return badRequest(
          "A query is needed to use the score_threshold. Can't have score_threshold without "
          "defining a query.");
    }
    node.score_threshold = j["score_threshold"].get<float>();
  }
  INFERA_ASSIGN_OR_RETURN(node.filter, optionalFilter(j));
  const char* limit_key =
      (rd.legacy && !j.contains("limit") && j.contains("top")) ? "top" : "limit";
  if (rd.legacy && !j.contains("limit") && !j.contains("top"))
    return formatError("missing field `limit`");
  INFERA_ASSIGN_OR_RETURN(node.limit, optionalCount(j, limit_key, 10));
  if (rd.legacy && node.limit == 0) return validationError("limit: value must be at least 1");
  rd.limits += node.limit;
  if (node.limit > kMaxLimit || rd.limits > kMaxLimit) {
    return badRequest("the limits of a query and its prefetches add up to more than " +
                      std::to_string(kMaxLimit));
  }
  if (j.contains("params") && j["params"].is_object()) {
    const Json& ps = j["params"];
    INFERA_ASSIGN_OR_RETURN(node.hnsw_ef, optionalCount(ps, "hnsw_ef", 0));
    INFERA_ASSIGN_OR_RETURN(node.exact, optionalBool(ps, "exact", false));
    if (ps.contains("quantization") && !ps["quantization"].is_null()) {
      const Json& qp = ps["quantization"];
      if (!qp.is_object()) return formatError("params.quantization must be an object");
      INFERA_ASSIGN_OR_RETURN(node.quant_ignore, optionalBool(qp, "ignore", false));
      // `rescore`: Infera always rescores the candidates on the original vectors.
      INFERA_RETURN_IF_ERROR(optionalBool(qp, "rescore", true).takeStatus());
      if (qp.contains("oversampling") && !qp["oversampling"].is_null()) {
        if (!qp["oversampling"].is_number() || !(qp["oversampling"].get<double>() >= 1.0) ||
            qp["oversampling"].get<double>() > 100.0)
          return validationError("params.quantization.oversampling: value must be in 1..100");
        node.oversampling = qp["oversampling"].get<float>();
      }
    }
  }
  return Status::ok();
}

}  // namespace

Result<QueryRequest> parseQueryRequest(const Json& body, const Collection& coll, bool legacy) {
  Reading rd{coll, legacy, 0, 0, {}};
  QueryRequest out;
  INFERA_RETURN_IF_ERROR(readLevel(rd, body, true, out.root));
  INFERA_ASSIGN_OR_RETURN(out.offset, optionalCount(body, "offset", 0));
  out.nodes = rd.nodes;
  out.limits = rd.limits + out.offset;
  if (out.offset > kMaxLimit || out.root.limit + out.offset > kMaxLimit)
    return badRequest("limit + offset must not exceed " + std::to_string(kMaxLimit));
  INFERA_ASSIGN_OR_RETURN(out.with_payload, selector(body, false));
  INFERA_ASSIGN_OR_RETURN(out.with_vector, vectorSelector(body, coll.params()));
  out.scroll = out.root.kind == QueryNode::Kind::kNone;
  if (!rd.referenced.empty()) {
    // Qdrant leaves the points a query names by id out of its answer.
    Condition ids;
    ids.kind = Condition::Kind::kHasId;
    ids.ids = std::move(rd.referenced);
    if (!out.root.filter) out.root.filter.emplace();
    out.root.filter->must_not.push_back(std::move(ids));
  }
  return out;
}

void appendRecord(std::string& out, const Record& r, bool scored, const CollectionParams& p,
                  const VectorSelector& sel) {
  out += "{\"id\":";
  r.id.appendJson(out);
  if (scored) {
    out += ",\"version\":" + std::to_string(r.version) + ",\"score\":";
    appendFloat(out, r.score);
  }
  if (r.payload) {
    out += ",\"payload\":";
    out += dumpJson(*r.payload);
  }
  auto floats = [&](const float* v, size_t n) {
    out.push_back('[');
    for (size_t i = 0; i < n; ++i) {
      if (i) out.push_back(',');
      appendFloat(out, v[i]);
    }
    out.push_back(']');
  };
  if (r.vector && sel.any) {
    if (!p.named()) {
      out += ",\"vector\":";
      floats(r.vector->data(), r.vector->size());
    } else {
      out += ",\"vector\":{";
      bool first = true;
      auto key = [&](const std::string& name) {
        if (!first) out.push_back(',');
        first = false;
        net::appendJsonString(out, name);
        out.push_back(':');
      };
      if (sel.wants(p.dense_name)) {
        key(p.dense_name);
        floats(r.vector->data(), r.vector->size());
      }
      for (size_t k = 0; k < r.extra.size() && k < p.extra_dense.size(); ++k) {
        if (!sel.wants(p.extra_dense[k].name)) continue;
        key(p.extra_dense[k].name);
        floats(r.extra[k].data(), r.extra[k].size());
      }
      for (const auto& [name, v] : r.sparse) {
        if (!sel.wants(name)) continue;
        key(name);
        out += "{\"indices\":[";
        for (size_t i = 0; i < v.indices.size(); ++i) {
          if (i) out.push_back(',');
          out += std::to_string(v.indices[i]);
        }
        out += "],\"values\":";
        floats(v.values.data(), v.values.size());
        out.push_back('}');
      }
      out.push_back('}');
    }
  }
  out.push_back('}');
}

std::string recordsJson(const std::vector<Record>& rs, bool scored, const CollectionParams& p,
                        const VectorSelector& sel) {
  std::string out = "[";
  for (size_t i = 0; i < rs.size(); ++i) {
    if (i) out.push_back(',');
    appendRecord(out, rs[i], scored, p, sel);
  }
  out.push_back(']');
  return out;
}

}  // namespace infera::vectors
