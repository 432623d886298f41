#include "vectors/internal/api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "access/access.h"
#include "core/json.h"
#include "core/text.h"
#include "core/utf8.h"
#include "vectors/internal/request.h"

namespace infera::vectors {
namespace {

using net::Task;
using Clock = std::chrono::steady_clock;

// An answer: HTTP status and the `result` JSON text (success) or the error message.
struct Reply {
  int status = 200;
  std::string result;  // JSON text
  std::string error;
  std::vector<net::HttpHeader> headers;
};

int httpStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
      return 409;
    case StatusCode::kFailedPrecondition:
      return 422;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kPayloadTooLarge:
      return 413;
    default:
      return 500;
  }
}

Reply fail(const Status& s) {
  Reply r;
  r.status = httpStatus(s);
  r.error = s.message();
  if (r.status == 500 && !r.error.starts_with("Service internal error"))
    r.error = "Service internal error: " + r.error;
  return r;
}
// Qdrant's error body: {"status":{"error":"..."},"time":...} (the message made valid UTF-8).
std::string qdrantError(std::string_view message, std::string_view time) {
  std::string body = "{\"status\":{\"error\":";
  net::appendJsonString(body, message);
  body += "},\"time\":";
  body += time;
  body += "}";
  return body;
}

// The floor's answers in that shape (net::ErrorShape; never throws but on allocation).
net::EarlyAnswer qdrantErrorAnswer(int status, std::string_view message, std::string_view) {
  std::string prefix = status == 400   ? "Bad request: "
                       : status == 403 ? "Forbidden: "
                       : status >= 500 ? "Service internal error: "
                                       : "";
  return {status, "application/json", qdrantError(prefix + std::string(message), "0.0")};
}

Reply ok(std::string result) {
  Reply r;
  r.result = std::move(result);
  return r;
}

// Arrays and objects nested in `j` (a body read by the floor: at most its depth limit).
size_t jsonNesting(const Json& j) {
  if (!j.is_structured()) return 0;
  size_t deepest = 0;
  for (const auto& v : j) deepest = std::max(deepest, jsonNesting(v));
  return deepest + 1;
}

Status collectionMissing(std::string_view name) {
  return Status::notFound("Not found: Collection `" + std::string(name) + "` doesn't exist!");
}

// Core's reader; a malformed escape never gets here (the door refuses the target), and would be
// kept as sent.
std::string percentDecode(std::string_view s) {
  std::string out;
  return infera::percentDecode(s, out) ? out : std::string(s);
}

// A query-string parameter's value ("" when absent).
std::string queryParam(std::string_view target, std::string_view key) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) == key)
      return eq == std::string_view::npos ? "true" : percentDecode(kv.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return {};
}

Status validateName(const std::string& name) {
  static const std::string kBad = "<>:\"/\\|?*";
  if (name.empty() || name.size() > 255) {
    return Status::failedPrecondition(
        "Validation error in path parameters: [collection_name: length must be between 1 and 255]");
  }
  for (char c : name) {
    if (kBad.find(c) != std::string::npos || c == '\0' || c == '\x1f') {
      return Status::failedPrecondition(
          std::string("Validation error in path parameters: [collection_name: ") +
          "collection name cannot contain \"" + std::string(1, c) + "\" char]");
    }
  }
  return Status::ok();
}

// One dense vector's parameters from `v` ({size, distance, hnsw_config, quantization_config}),
// the collection-wide hnsw_config and quantization_config of `body` applied first.
Status parseDenseParams(const Json& body, const Json& v, CollectionParams& p) {
  if (!v.contains("size"))
    return Status::invalidArgument("Format error in JSON body: missing field `size`");
  if (!v["size"].is_number_integer() || v["size"].get<int64_t>() < 1) {
    return Status::failedPrecondition(
        "Validation error in JSON body: [vectors.size: value must be at least 1]");
  }
  p.dim = v["size"].get<size_t>();
  if (p.dim > 65'536) return badRequest("vector size " + std::to_string(p.dim) + " exceeds 65536");
  const std::string d = stringOr(v, "distance", "");
  if (d == "Cosine")
    p.distance = Distance::kCosine;
  else if (d == "Euclid")
    p.distance = Distance::kEuclid;
  else if (d == "Dot")
    p.distance = Distance::kDot;
  else if (d == "Manhattan")
    return badRequest("Manhattan distance is not supported by Infera");
  else
    return Status::invalidArgument("Format error in JSON body: unknown variant `" + d +
                                   "`, expected one of `Cosine`, `Euclid`, `Dot`, `Manhattan`");
  auto hnsw = [&](const Json& h) -> Status {
    if (!h.is_object()) return Status::ok();
    if (h.contains("m") && h["m"].is_number_integer()) {
      p.m = h["m"].get<int>();
      if (p.m < 2 || p.m > 128)
        return badRequest("hnsw_config.m must be in [2, 128] (m = 0 is not supported)");
    }
    if (h.contains("ef_construct") && h["ef_construct"].is_number_integer()) {
      p.ef_construct = h["ef_construct"].get<int>();
      if (p.ef_construct < 4) {
        return Status::failedPrecondition(
            "Validation error in JSON body: [hnsw_config.ef_construct: value must be at least 4]");
      }
    }
    if (h.contains("full_scan_threshold") && h["full_scan_threshold"].is_number_integer()) {
      p.full_scan_threshold_kb = h["full_scan_threshold"].get<int64_t>();
      if (p.full_scan_threshold_kb < 10) {
        return Status::failedPrecondition(
            "Validation error in JSON body: [hnsw_config.full_scan_threshold: value must be at "
            "least 10]");
      }
    }
    return Status::ok();
  };
  auto quant = [&](const Json& q) -> Status {
    if (q.is_null()) return Status::ok();
    if (!q.is_object())
      return Status::invalidArgument(
          "Format error in JSON body: quantization_config must be an object");
    if (q.contains("binary")) {
      const Json& b = q["binary"];
      if (!b.is_object())
        return Status::invalidArgument("Format error in JSON body: binary must be an object");
      if (b.contains("encoding") && !b["encoding"].is_null() &&
          stringOr(b, "encoding", "") != "one_bit") {
        return badRequest("binary quantization encoding `" + stringOr(b, "encoding", "?") +
                          "` is not supported by Infera (one_bit is)");
      }
      if (p.distance == Distance::kEuclid) {
        return badRequest(
            "binary quantization does not fit Euclid distance: its bits keep the direction of a "
            "vector, not its length (use Cosine or Dot, or scalar quantization)");
      }
      p.binary = true;
      p.quantization = false;
      if (b.contains("always_ram") && b["always_ram"].is_boolean())
        p.always_ram = b["always_ram"].get<bool>();
      return Status::ok();
    }
    if (!q.contains("scalar"))
      return badRequest("only scalar (int8) and binary quantization are supported by Infera");
    const Json& s = q["scalar"];
    if (!s.is_object() || (s.contains("type") && stringOr(s, "type", "") != "int8"))
      return badRequest("scalar quantization type must be int8");
    p.quantization = true;
    p.binary = false;
    if (s.contains("quantile") && s["quantile"].is_number())
      p.quantile = s["quantile"].get<float>();
    if (p.quantile < 0.5f || p.quantile > 1.0f) {
      return Status::failedPrecondition(
          "Validation error in JSON body: [quantization_config.scalar.quantile: value must be in "
          "0.5..1]");
    }
    if (s.contains("always_ram") && s["always_ram"].is_boolean()) {
      p.always_ram = s["always_ram"].get<bool>();
    }
    return Status::ok();
  };
  if (body.contains("hnsw_config")) INFERA_RETURN_IF_ERROR(hnsw(body["hnsw_config"]));
  if (v.contains("hnsw_config")) INFERA_RETURN_IF_ERROR(hnsw(v["hnsw_config"]));
  if (body.contains("quantization_config"))
    INFERA_RETURN_IF_ERROR(quant(body["quantization_config"]));
  if (v.contains("quantization_config")) INFERA_RETURN_IF_ERROR(quant(v["quantization_config"]));
  if (v.contains("on_disk") && !v["on_disk"].is_null()) {
    if (!v["on_disk"].is_boolean())
      return Status::invalidArgument("Format error in JSON body: on_disk must be a bool");
    p.on_disk = v["on_disk"].get<bool>();
  }
  return Status::ok();
}

Result<CollectionParams> parseCreate(const Json& body) {
  CollectionParams p;
  if (!body.is_object())
    return Status::invalidArgument("Format error in JSON body: expected an object");
  if (!body.contains("vectors") || !body["vectors"].is_object()) {
    return badRequest(
        "Infera needs `vectors: {size, distance}` (collections without vectors are not supported)");
  }
  const Json& vs = body["vectors"];
  if (vs.empty()) {
    return badRequest(
        "Infera needs a dense vector (`vectors: {size, distance}`, or named ones); collections of "
        "only sparse vectors are not supported");
  }
  if (vs.contains("size") || !vs.begin().value().is_object()) {
    INFERA_RETURN_IF_ERROR(parseDenseParams(body, vs, p));
  } else {
    // Named: {name: {size, distance, ...}, ...}. The first is the points' own graph; each other
    // gets its own over the same slots.
    bool first = true;
    for (const auto& [name, v] : vs.items()) {
      CollectionParams one;
      if (!v.is_object() || v.empty())
        return Status::invalidArgument("Format error in JSON body: missing field `size`");
      INFERA_RETURN_IF_ERROR(parseDenseParams(body, v, one));
      if (first) {
        const auto keep_payload = p.on_disk_payload;
        p = one;
        p.on_disk_payload = keep_payload;
        p.dense_name = name;
        first = false;
      } else {
        DenseParams d = one.dense(0);
        d.name = name;
        p.extra_dense.push_back(std::move(d));
      }
    }
    if (p.extra_dense.size() > 15) return badRequest("a collection holds at most 16 dense vectors");
  }
  if (body.contains("on_disk_payload") && body["on_disk_payload"].is_boolean()) {
    p.on_disk_payload = body["on_disk_payload"].get<bool>();
  }
  if (body.contains("sparse_vectors") && !body["sparse_vectors"].is_null()) {
    const Json& sv = body["sparse_vectors"];
    if (!sv.is_object())
      return Status::invalidArgument("Format error in JSON body: sparse_vectors must be an object");
    for (const auto& [name, cfg] : sv.items()) {
      if (name.empty()) return badRequest("a sparse vector needs a name");
      if (p.denseIndex(name) >= 0)
        return badRequest("vector name `" + name + "` is both dense and sparse");
      if (!cfg.is_object() && !cfg.is_null()) {
        return Status::invalidArgument("Format error in JSON body: sparse_vectors." + name +
                                       " must be an object");
      }
      SparseModifier m = SparseModifier::kNone;
      if (cfg.is_object() && cfg.contains("modifier") && !cfg["modifier"].is_null()) {
        const std::string mod = stringOr(cfg, "modifier", "");
        if (mod == "idf") {
          m = SparseModifier::kIdf;
        } else if (mod != "none") {
          return Status::invalidArgument("Format error in JSON body: sparse_vectors." + name +
                                         ".modifier: unknown variant `" + mod +
                                         "`, expected `none` or `idf`");
        }
      }
      p.sparse[name] = m;
    }
  }
  return p;
}

// What a route does with the collection it names: the operation access::checkOwner checks.
enum class Touch { kNone, kRead, kWrite, kManage };

access::Operation operation(Touch t) {
  switch (t) {
    case Touch::kRead:
      return access::Operation::kRead;
    case Touch::kWrite:
      return access::Operation::kWrite;
    default:
      return access::Operation::kManage;
  }
}

// One request as a handler sees it.
struct Call {
  std::string name;  // the {name} path parameter, decoded ("" on routes without one)
  net::PathParams params;
  // The collection, its owner checked (null when the route names none, or when it is missing or
  // another team's on a route that does not need it to exist).
  std::shared_ptr<CollectionEntry> entry;
  const access::Grant* grant = nullptr;  // empty without access control
};

// The per-loop handler.
class Api {
 public:
  Api(Store& store, const VectorsConfig& config, net::asio::io_context& ctx,
      access::AccessWorker* access)
      : store_(store), config_(config), ctx_(ctx), access_(access) {}

  using Fn = Task<Reply> (Api::*)(net::HttpRequest&, Call&);

  // Authenticates, admits, then resolves the collection the route names and checks its owner
  // (access::checkOwner: another team's collection is answered as if it did not exist, a shared
  // one refuses kManage) before `fn` runs; with `must_exist` a missing one is a 404 here.
  Task<void> serve(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams params, Fn fn,
                   Touch touch, bool must_exist) {
    const auto t0 = Clock::now();
    const std::string name = percentDecode(params.get("name"));
    access::Grant grant;
    Reply r;
    bool denied = false;
    if (!validUtf8(name)) {
      // The door refuses these; a name must never reach the store or an answer as stray bytes.
      r = fail(Status::invalidArgument(
          "Validation error in path parameters: [collection_name: must be valid UTF-8]"));
      denied = true;
    }
    if (access_ && !denied) {
      if (auto d = access_->authenticateRequest(req, grant, "api-key")) {
        r = fail(
            Status(d->status == 401 ? StatusCode::kUnauthenticated : StatusCode::kPermissionDenied,
                   "Forbidden: " + d->message));
        r.status = d->status;
        denied = true;
      } else if (touch != Touch::kNone) {
        if (auto no = access_->checkAccess(grant, access::ResourceKind::kCollection, name, name)) {
          r = fail(Status::permissionDenied("Forbidden: " + no->message));
          r.status = no->status;
          denied = true;
        }
      }
      if (!denied) {
        access::AdmitRequest ar;
        if (auto full = co_await access_->admit(grant, ar, r.headers)) {
          // The refusal keeps the headers admit() wrote (retry-after, the limit's remaining).
          auto headers = std::move(r.headers);
          r = fail(Status::resourceExhausted("Rate limiting exceeded: " + full->message));
          r.headers = std::move(headers);
          r.status = full->status;
          denied = true;
        }
      }
    }
    Call call{name, params, nullptr, &grant};
    if (!denied && touch != Touch::kNone) {
      // After the last suspension before `fn`: the entry checked is the one `fn` uses.
      call.entry = store_.find(name);
      if (call.entry) {
        if (auto no = access::checkOwner(grant, access::ResourceKind::kCollection, name,
                                         call.entry->owner, operation(touch))) {
          call.entry = nullptr;
          if (no->status != 404) {
            r = fail(Status::permissionDenied("Forbidden: " + no->message));
            denied = true;
          }
        }
      }
      if (!denied && !call.entry && must_exist) {
        r = fail(collectionMissing(name));
        denied = true;
      }
    }
    if (!denied) {
      std::vector<net::HttpHeader> admitted = std::move(r.headers);
      r = co_await (this->*fn)(req, call);
      for (auto& h : admitted) r.headers.push_back(std::move(h));
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::string body;
    char tbuf[32];
    std::snprintf(tbuf, sizeof tbuf, "%.6f", secs);
    if (r.error.empty()) {
      body.reserve(r.result.size() + 48);
      body += "{\"result\":";
      body += r.result;
      body += ",\"status\":\"ok\",\"time\":";
      body += tbuf;
      body += "}";
    } else {
      body = qdrantError(r.error, tbuf);
    }
    if (access_ && grant) {
      access::UsageRecord rec;
      rec.model = "collection:" + name;
      rec.status = r.status;
      rec.latency_ms = secs * 1000;
      access_->finish(grant, std::move(rec), {});
    }
    co_await w.send(r.status, "application/json", body, r.headers);
  }

  // --- collections ---

  Task<Reply> listCollections(net::HttpRequest&, Call& c) {
    Json list = Json::array();
    for (const auto& e : store_.entries()) {
      if (access::visibleTo(*c.grant, e->owner)) list.push_back({{"name", e->name}});
    }
    co_return ok(dumpJson(Json{{"collections", list}}));
  }

  Task<Reply> getCollection(net::HttpRequest&, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    co_return ok(dumpJson(e->coll.info()));
  }

  // Infera's own (not Qdrant's): the graph and memory figures `infera vectors stats` prints.
  Task<Reply> stats(net::HttpRequest&, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    co_return ok(dumpJson(e->coll.stats()));
  }

  Task<Reply> exists(net::HttpRequest&, Call& c) {
    co_return ok(c.entry ? "{\"exists\":true}" : "{\"exists\":false}");
  }

  // An existing name is never replaced: the owner (or the operator) hears "already exists", a
  // shared collection's name is kManage (403, serve), and another team's name is hidden by serve,
  // so the store's own check answers "already exists" without saying whose it is.
  Task<Reply> createCollection(net::HttpRequest& req, Call& c) {
    if (Status s = validateName(c.name); !s.isOk()) co_return fail(s);
    if (c.entry) {
      co_return fail(
          Status::alreadyExists("Wrong input: Collection `" + c.name + "` already exists!"));
    }
    auto body = readBody(req.body.empty() ? "{}" : req.body);
    if (!body.ok()) co_return fail(body.status());
    auto params = parseCreate(*body);
    if (!params.ok()) co_return fail(params.status());
    Wait wait(ctx_);
    const Status sub =
        store_.create(c.name, *params, access::owningTeam(*c.grant),
                      [this, w = wait.state](Status s) { post(w, std::move(s), 0); });
    if (!sub.isOk()) co_return fail(sub);
    co_await wait.done();
    if (!wait.state->status.isOk()) co_return fail(wait.state->status);
    co_return ok("true");
  }

  Task<Reply> updateCollection(net::HttpRequest&, Call&) {
    co_return ok(
        "true");  // accepted; Infera's collections are not re-parameterised (docs/vectors.md)
  }

  // Qdrant answers `false` for a collection that does not exist (or that another team owns).
  Task<Reply> deleteCollection(net::HttpRequest&, Call& c) {
    if (!c.entry) co_return ok("false");
    Wait wait(ctx_);
    const Status sub = store_.drop(
        c.entry, [this, w = wait.state](Status s) { post(w, Status::ok(), s.isOk() ? 1 : 0); });
    if (!sub.isOk()) co_return fail(sub);
    co_await wait.done();
    co_return ok(wait.state->op_id ? "true" : "false");
  }

  Task<Reply> aliases(net::HttpRequest&, Call&) { co_return ok("{\"aliases\":[]}"); }

  // --- writes ---

  Task<Reply> createIndex(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    if (!body->is_object() || !(*body)["field_name"].is_string()) {
      co_return fail(
          Status::invalidArgument("Format error in JSON body: missing field `field_name`"));
    }
    Op op;
    op.type = Op::Type::kCreateIndex;
    op.key = (*body)["field_name"].get<std::string>();
    if (auto p = parseJsonPath(op.key); !p.ok()) co_return fail(p.status());
    const Json schema = body->value("field_schema", Json());
    std::string type;
    if (schema.is_string()) type = schema.get<std::string>();
    if (schema.is_object() && schema.contains("type") && schema["type"].is_string())
      type = schema["type"].get<std::string>();
    if (type.empty()) {
      co_return fail(wrongInput("Unable to infer type for the field '" + op.key +
                                "'. Please specify `field_type`"));
    }
    if (!payloadTypeFromName(type, op.index_type)) {
      co_return fail(
          Status::invalidArgument("Format error in JSON body: unknown variant `" + type + "`"));
    }
    co_return co_await write(req, e, std::move(op));
  }

  Task<Reply> deleteIndex(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    Op op;
    op.type = Op::Type::kDeleteIndex;
    op.key = percentDecode(c.params.get("field"));
    co_return co_await write(req, e, std::move(op), true);
  }

  Task<Reply> upsert(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    Op op;
    op.type = Op::Type::kUpsert;
    const CollectionParams& p = e->coll.params();
    std::vector<std::vector<float>> dense;
    std::vector<std::pair<std::string, SparseVector>> sparse;
    op.extra_vectors.resize(p.extra_dense.size());
    auto addPoint = [&](const Json& id, const Json& vec, const Json& payload,
                        const std::string& where) -> Status {
      INFERA_ASSIGN_OR_RETURN(PointId pid, pointIdFromJson(id));
      INFERA_RETURN_IF_ERROR(parsePointVectors(vec, p, where, true, dense, sparse));
      if (!payload.is_null() && !payload.is_object()) {
        return Status::invalidArgument("Format error in JSON body: payload must be an object");
      }
      op.ids.push_back(pid);
      op.vectors.insert(op.vectors.end(), dense[0].begin(), dense[0].end());
      for (size_t k = 0; k < op.extra_vectors.size(); ++k) {
        op.extra_vectors[k].insert(op.extra_vectors[k].end(), dense[k + 1].begin(),
                                   dense[k + 1].end());
      }
      op.payloads.push_back(payload);
      if (!p.sparse.empty()) op.sparse.push_back(std::move(sparse));
      return Status::ok();
    };
    Status s;
    if (body->is_object() && body->contains("points") && (*body)["points"].is_array()) {
      const Json& pts = (*body)["points"];
      if (int64_t(pts.size()) > config_.max_batch_points) s = tooMany(pts.size());
      for (size_t i = 0; i < pts.size() && s.isOk(); ++i) {
        const Json& pt = pts[i];
        if (!pt.is_object() || !pt.contains("id") || !pt.contains("vector")) {
          s = Status::invalidArgument("Format error in JSON body: points[" + std::to_string(i) +
                                      "]: missing field `id` or `vector`");
          break;
        }
        s = addPoint(pt["id"], pt["vector"], pt.value("payload", Json()),
                     "points[" + std::to_string(i) + "].vector");
      }
    } else if (body->is_object() && body->contains("batch") && (*body)["batch"].is_object()) {
      const Json& b = (*body)["batch"];
      const Json ids = b.value("ids", Json());
      Json vecs = b.value("vectors", Json());
      const Json pays = b.value("payloads", Json());
      if (vecs.is_object()) {
        // Named: {name: [one per point]} becomes one {name: vector} per point.
        Json per = Json::array();
        for (const auto& [name, list] : vecs.items()) {
          if (!list.is_array() || (ids.is_array() && list.size() != ids.size())) {
            per = Json();  // refused below with the lengths message
            break;
          }
          for (size_t i = 0; i < list.size(); ++i) {
            if (per.size() <= i) per.push_back(Json::object());
            per[i][name] = list[i];
          }
        }
        vecs = std::move(per);
      }
      if (!ids.is_array() || !vecs.is_array() || ids.size() != vecs.size() ||
          (!pays.is_null() && (!pays.is_array() || pays.size() != ids.size()))) {
        s = wrongInput("batch ids, vectors and payloads must be lists of the same length");
      } else if (int64_t(ids.size()) > config_.max_batch_points) {
        s = tooMany(ids.size());
      }
      for (size_t i = 0; i < ids.size() && s.isOk(); ++i)
        s = addPoint(ids[i], vecs[i], pays.is_null() ? Json() : pays[i],
                     "batch.vectors[" + std::to_string(i) + "]");
    } else {
      s = Status::invalidArgument("Format error in JSON body: expected `points` or `batch`");
    }
    if (!s.isOk()) co_return fail(s);
    co_return co_await write(req, e, std::move(op));
  }

  // PUT /points/vectors: {"points":[{"id", "vector": {name: ...}}]} replaces the named vectors of
  // existing points and keeps the others (and the payload).
  Task<Reply> updateVectors(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    if (!body->is_object() || !(*body)["points"].is_array()) {
      co_return fail(Status::invalidArgument("Format error in JSON body: missing field `points`"));
    }
    const Json& pts = (*body)["points"];
    if (int64_t(pts.size()) > config_.max_batch_points) co_return fail(tooMany(pts.size()));
    const CollectionParams& p = e->coll.params();
    Op op;
    op.type = Op::Type::kUpdateVectors;
    std::vector<std::vector<float>> dense;
    std::vector<std::pair<std::string, SparseVector>> sparse;
    for (size_t i = 0; i < pts.size(); ++i) {
      const Json& pt = pts[i];
      const std::string where = "points[" + std::to_string(i) + "].vector";
      if (!pt.is_object() || !pt.contains("id") || !pt.contains("vector")) {
        co_return fail(Status::invalidArgument("Format error in JSON body: points[" +
                                               std::to_string(i) +
                                               "]: missing field `id` or `vector`"));
      }
      auto id = pointIdFromJson(pt["id"]);
      if (!id.ok()) co_return fail(id.status());
      if (Status s = parsePointVectors(pt["vector"], p, where, false, dense, sparse); !s.isOk())
        co_return fail(s);
      if (pt["vector"].is_object() && pt["vector"].empty()) {
        co_return fail(Status::failedPrecondition("Validation error in JSON body: [" + where +
                                                  ": must name at least one vector]"));
      }
      op.ids.push_back(*id);
      op.dense_updates.emplace_back();
      for (size_t k = 0; k < dense.size(); ++k) {
        if (!dense[k].empty()) op.dense_updates.back().emplace_back(int(k), std::move(dense[k]));
      }
      op.sparse.push_back(std::move(sparse));
    }
    co_return co_await write(req, e, std::move(op));
  }

  // POST /points/vectors/delete: {"points": [...] | "filter": {...}, "vector": [names]}. Sparse
  // vectors only: every point keeps its dense vectors (docs/vectors.md).
  Task<Reply> deleteVectors(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    Op op;
    op.type = Op::Type::kDeleteVectors;
    if (Status s = selectTargets(*body, op); !s.isOk()) co_return fail(s);
    const Json& names = (*body)["vector"];
    if (!names.is_array())
      co_return fail(Status::invalidArgument("Format error in JSON body: missing field `vector`"));
    const CollectionParams& p = e->coll.params();
    for (const auto& n : names) {
      if (!n.is_string())
        co_return fail(
            Status::invalidArgument("Format error in JSON body: vector names must be strings"));
      const std::string name = n.get<std::string>();
      if (p.denseIndex(name) >= 0) {
        co_return fail(badRequest("vector `" + name +
                                  "` is dense: Infera keeps every point's dense vectors (delete or "
                                  "upsert the point instead)"));
      }
      if (!p.sparse.contains(name))
        co_return fail(wrongInput("Not existing vector name error: " + name));
      op.keys.push_back(name);
    }
    co_return co_await write(req, e, std::move(op));
  }

  Task<Reply> deletePoints(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    Op op;
    op.type = Op::Type::kDelete;
    if (Status s = selectTargets(*body, op); !s.isOk()) co_return fail(s);
    co_return co_await write(req, e, std::move(op));
  }

  Task<Reply> setPayload(net::HttpRequest& req, Call& c) {
    co_return co_await payloadOp(req, c.entry, Op::Type::kSetPayload);
  }
  Task<Reply> overwritePayload(net::HttpRequest& req, Call& c) {
    co_return co_await payloadOp(req, c.entry, Op::Type::kOverwritePayload);
  }
  Task<Reply> deletePayload(net::HttpRequest& req, Call& c) {
    co_return co_await payloadOp(req, c.entry, Op::Type::kDeletePayloadKeys);
  }
  Task<Reply> clearPayload(net::HttpRequest& req, Call& c) {
    co_return co_await payloadOp(req, c.entry, Op::Type::kClearPayload);
  }

  // --- reads ---

  Task<Reply> retrieve(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    if (!body->is_object() || !(*body)["ids"].is_array()) {
      co_return fail(Status::invalidArgument("Format error in JSON body: missing field `ids`"));
    }
    std::vector<PointId> ids;
    for (const auto& x : (*body)["ids"]) {
      auto id = pointIdFromJson(x);
      if (!id.ok()) co_return fail(id.status());
      ids.push_back(*id);
    }
    auto sel = selector(*body, true);
    auto wv = vectorSelector(*body, e->coll.params());
    if (!sel.ok()) co_return fail(sel.status());
    if (!wv.ok()) co_return fail(wv.status());
    co_return ok(recordsJson(e->coll.retrieve(ids, *sel, wv->any), false, e->coll.params(), *wv));
  }

  Task<Reply> getPoint(net::HttpRequest&, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto id = pointIdFromText(percentDecode(c.params.get("id")));
    if (!id.ok()) co_return fail(id.status());
    PayloadSelector all;
    all.mode = PayloadSelector::Mode::kAll;
    auto rs = e->coll.retrieve({*id}, all, true);
    if (rs.empty())
      co_return fail(
          Status::notFound("Not found: Point with id " + id->toString() + " does not exists!"));
    std::string out;
    appendRecord(out, rs[0], false, e->coll.params(), VectorSelector{true, {}});
    co_return ok(std::move(out));
  }

  Task<Reply> count(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body.empty() ? "{}" : req.body);
    if (!body.ok()) co_return fail(body.status());
    auto f = optionalFilter(*body);
    if (!f.ok()) co_return fail(f.status());
    const size_t n = e->coll.count(*f ? &**f : nullptr);
    co_return ok("{\"count\":" + std::to_string(n) + "}");
  }

  Task<Reply> scroll(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body.empty() ? "{}" : req.body);
    if (!body.ok()) co_return fail(body.status());
    ScrollRequest sr;
    auto f = optionalFilter(*body);
    auto limit = optionalCount(*body, "limit", 10);
    auto sel = selector(*body, true);
    auto wv = vectorSelector(*body, e->coll.params());
    for (const Status* s : {&f.status(), &limit.status(), &sel.status(), &wv.status()}) {
      if (!s->isOk()) co_return fail(*s);
    }
    if (*limit == 0) co_return fail(badRequest("Limit cannot be 0"));
    if (body->contains("order_by") && !(*body)["order_by"].is_null()) {
      co_return fail(badRequest("order_by is not supported by Infera"));
    }
    if (body->contains("offset") && !(*body)["offset"].is_null()) {
      auto off = pointIdFromJson((*body)["offset"]);
      if (!off.ok()) co_return fail(off.status());
      sr.offset = *off;
    }
    sr.filter = std::move(*f);
    sr.limit = *limit;
    sr.with_payload = *sel;
    sr.with_vector = wv->any;
    std::optional<PointId> next;
    const auto rs = e->coll.scroll(sr, next);
    std::string out =
        "{\"points\":" + recordsJson(rs, false, e->coll.params(), *wv) + ",\"next_page_offset\":";
    if (next) {
      next->appendJson(out);
    } else {
      out += "null";
    }
    out += "}";
    co_return ok(std::move(out));
  }

  Task<Reply> search(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    auto r = runSearch(*e, *body, false);
    if (!r.ok()) co_return fail(r.status());
    co_return ok(std::move(*r));
  }

  Task<Reply> searchBatch(net::HttpRequest& req, Call& c) {
    co_return co_await batch(req, c.entry, false);
  }

  Task<Reply> query(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body.empty() ? "{}" : req.body);
    if (!body.ok()) co_return fail(body.status());
    auto r = runSearch(*e, *body, true);
    if (!r.ok()) co_return fail(r.status());
    co_return ok(std::move(*r));
  }

  Task<Reply> queryBatch(net::HttpRequest& req, Call& c) {
    co_return co_await batch(req, c.entry, true);
  }

  // POST /points/query/groups: the query's points grouped by a payload value (`group_by`: a
  // keyword or integer; a point with several values joins each group), at most `group_size` per
  // group and `limit` groups, groups in the order of their best point. The ranking is fetched
  // wider until the groups fill, the ranking ends, or 100,000 points were ranked.
  Task<Reply> queryGroups(net::HttpRequest& req, Call& c) {
    const std::shared_ptr<CollectionEntry>& e = c.entry;
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    auto r = runGroups(*e, *body);
    if (!r.ok()) co_return fail(r.status());
    co_return ok(std::move(*r));
  }

 private:
  // Waits on this loop for a writer's answer.
  struct WaitState {
    explicit WaitState(net::asio::io_context& ctx) : timer(ctx) {
      timer.expires_at(net::asio::steady_timer::time_point::max());
    }
    net::asio::steady_timer timer;
    Status status;
    uint64_t op_id = 0;
    bool finished = false;
  };
  struct Wait {
    explicit Wait(net::asio::io_context& ctx) : state(std::make_shared<WaitState>(ctx)) {}
    Task<void> done() {
      if (state->finished) co_return;
      boost::system::error_code ec;
      co_await state->timer.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
    }
    // Shared with the writer thread's callback, which may outlive neither but runs on another
    // thread.
    std::shared_ptr<WaitState> state;
  };
  void post(const std::shared_ptr<WaitState>& w, Status s, uint64_t id) {
    net::asio::post(ctx_, [w, s = std::move(s), id]() mutable {
      w->status = std::move(s);
      w->op_id = id;
      w->finished = true;
      w->timer.cancel();
    });
  }

  Status tooMany(size_t n) const {
    return badRequest("a batch of " + std::to_string(n) + " points exceeds the limit of " +
                      std::to_string(config_.max_batch_points) + " (vectors.max_batch_points)");
  }

  Task<Reply> write(net::HttpRequest& req, const std::shared_ptr<CollectionEntry>& e, Op op,
                    bool wait_default = false) {
    const std::string w = queryParam(req.target, "wait");
    const bool wait = w.empty() ? wait_default : w == "true";
    Wait waiter(ctx_);
    auto cb = [this, st = waiter.state](Status s, uint64_t id) { post(st, std::move(s), id); };
    Store::Done durable, applied;
    (wait ? applied : durable) = cb;
    const Status sub = store_.submit(e, std::move(op), std::move(durable), std::move(applied));
    if (!sub.isOk()) co_return fail(sub);
    co_await waiter.done();
    if (!waiter.state->status.isOk()) co_return fail(waiter.state->status);
    co_return ok("{\"operation_id\":" + std::to_string(waiter.state->op_id) + ",\"status\":\"" +
                 (wait ? "completed" : "acknowledged") + "\"}");
  }

  Status selectTargets(const Json& body, Op& op) {
    if (!body.is_object())
      return Status::invalidArgument("Format error in JSON body: expected an object");
    if (body.contains("points") && !body["points"].is_null()) {
      if (!body["points"].is_array())
        return Status::invalidArgument("Format error in JSON body: points must be a list");
      if (int64_t(body["points"].size()) > config_.max_batch_points)
        return tooMany(body["points"].size());
      for (const auto& x : body["points"]) {
        INFERA_ASSIGN_OR_RETURN(PointId id, pointIdFromJson(x));
        op.ids.push_back(id);
      }
      return Status::ok();
    }
    if (body.contains("filter") && !body["filter"].is_null()) {
      INFERA_RETURN_IF_ERROR(parseFilter(body["filter"]).takeStatus());
      op.filter = body["filter"];
      return Status::ok();
    }
    return badRequest("Either list of point ids or filter must be provided");
  }

  Task<Reply> payloadOp(net::HttpRequest& req, const std::shared_ptr<CollectionEntry>& e,
                        Op::Type type) {
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    Op op;
    op.type = type;
    if (Status s = selectTargets(*body, op); !s.isOk()) co_return fail(s);
    if (type == Op::Type::kSetPayload || type == Op::Type::kOverwritePayload) {
      if (!(*body)["payload"].is_object()) {
        co_return fail(
            Status::invalidArgument("Format error in JSON body: missing field `payload`"));
      }
      op.payloads.push_back((*body)["payload"]);
      if (body->contains("key") && (*body)["key"].is_string()) {
        op.key = (*body)["key"].get<std::string>();
        auto p = parseJsonPath(op.key);
        if (!p.ok()) co_return fail(p.status());
        // The payload lands that many levels down: together within the floor's depth limit.
        if (p->steps.size() + jsonNesting(op.payloads.back()) > JsonLimits{}.max_depth) {
          co_return fail(Status::invalidArgument(
              "Format error in JSON body: the payload under key `" + op.key + "` would nest " +
              "deeper than " + std::to_string(JsonLimits{}.max_depth) + " levels"));
        }
      }
    }
    if (type == Op::Type::kDeletePayloadKeys) {
      if (!(*body)["keys"].is_array())
        co_return fail(Status::invalidArgument("Format error in JSON body: missing field `keys`"));
      for (const auto& k : (*body)["keys"]) {
        if (!k.is_string())
          co_return fail(
              Status::invalidArgument("Format error in JSON body: keys must be strings"));
        op.keys.push_back(k.get<std::string>());
      }
    }
    co_return co_await write(req, e, std::move(op));
  }

  // A search (`query`: the /points/query shape, else the legacy /points/search one): the result's
  // JSON text ({"points":[...]} or [...]).
  Result<std::string> runSearch(CollectionEntry& e, const Json& body, bool query) {
    if (!body.is_object())
      return Status::invalidArgument("Format error in JSON body: expected an object");
    INFERA_ASSIGN_OR_RETURN(QueryRequest q, parseQueryRequest(body, e.coll, !query));
    return answer(e, q, query);
  }

  // The search's result JSON text ({"points":[...]} or [...]).
  Result<std::string> answer(CollectionEntry& e, const QueryRequest& q, bool query) {
    std::vector<Record> rs;
    INFERA_ASSIGN_OR_RETURN(
        rs, e.coll.query(q.root, q.offset, q.with_payload, q.with_vector.any, scratch_));
    if (q.scroll) {
      for (auto& r : rs) r.version = 0;  // points in id order, as Qdrant answers them: score 1
    }
    std::string points = recordsJson(rs, true, e.coll.params(), q.with_vector);
    return query ? "{\"points\":" + points + "}" : points;
  }

  Result<std::string> runGroups(CollectionEntry& e, const Json& body) {
    if (!body.is_object())
      return Status::invalidArgument("Format error in JSON body: expected an object");
    if (!body.contains("group_by") || !body["group_by"].is_string())
      return Status::invalidArgument("Format error in JSON body: missing field `group_by`");
    INFERA_ASSIGN_OR_RETURN(JsonPath path, parseJsonPath(body["group_by"].get<std::string>()));
    if (body.contains("with_lookup") && !body["with_lookup"].is_null())
      return badRequest("with_lookup is not supported by Infera");
    INFERA_ASSIGN_OR_RETURN(size_t group_size, optionalCount(body, "group_size", 3));
    if (group_size == 0)
      return Status::failedPrecondition(
          "Validation error in JSON body: [group_size: value must be at least 1]");
    INFERA_ASSIGN_OR_RETURN(QueryRequest q, parseQueryRequest(body, e.coll, false));
    const size_t groups_wanted = q.root.limit;
    if (groups_wanted * group_size > 100'000)
      return badRequest("limit x group_size must not exceed 100000");
    PayloadSelector all;
    all.mode = PayloadSelector::Mode::kAll;
    struct Group {
      Json id;
      std::vector<Record> hits;
    };
    std::vector<Group> groups;
    for (size_t fetch =
             std::min<size_t>(std::max<size_t>(groups_wanted * group_size * 2, 64), 100'000);
         ; fetch = std::min<size_t>(fetch * 4, 100'000)) {
      q.root.limit = fetch;
      std::vector<Record> rs;
      INFERA_ASSIGN_OR_RETURN(rs, e.coll.query(q.root, 0, all, q.with_vector.any, scratch_));
      groups.clear();
      std::map<std::string, size_t> index;  // the group's value as JSON text -> its position
      size_t full = 0;
      for (const Record& r : rs) {
        std::vector<const Json*> vals;
        if (r.payload) valuesAt(*r.payload, path, vals);
        std::vector<std::string> seen;
        auto join = [&](const Json& v) {
          if (!v.is_string() && !v.is_number_integer()) return;
          const std::string key = dumpJson(v);
          if (std::find(seen.begin(), seen.end(), key) != seen.end()) return;
          seen.push_back(key);
          auto it = index.find(key);
          if (it == index.end()) {
            if (groups.size() == groups_wanted) return;
            it = index.emplace(key, groups.size()).first;
            groups.push_back({v, {}});
          }
          Group& g = groups[it->second];
          if (g.hits.size() == group_size) return;
          g.hits.push_back(r);
          full += g.hits.size() == group_size;
        };
        for (const Json* v : vals) {
          if (v->is_array()) {
            for (const auto& x : *v) join(x);
          } else {
            join(*v);
          }
        }
      }
      if ((groups.size() == groups_wanted && full == groups_wanted) || rs.size() < fetch ||
          fetch == 100'000)
        break;
    }
    std::string out = "{\"groups\":[";
    for (size_t i = 0; i < groups.size(); ++i) {
      if (i) out.push_back(',');
      out += "{\"id\":" + dumpJson(groups[i].id) + ",\"hits\":[";
      for (size_t h = 0; h < groups[i].hits.size(); ++h) {
        Record& r = groups[i].hits[h];
        if (q.with_payload.mode == PayloadSelector::Mode::kNone) {
          r.payload.reset();
        } else {
          r.payload = selectPayload(*r.payload, q.with_payload);
        }
        if (h) out.push_back(',');
        appendRecord(out, r, true, e.coll.params(), q.with_vector);
      }
      out += "]}";
    }
    out += "]}";
    return out;
  }

  Task<Reply> batch(net::HttpRequest& req, const std::shared_ptr<CollectionEntry>& e, bool query) {
    auto body = readBody(req.body);
    if (!body.ok()) co_return fail(body.status());
    if (!body->is_object() || !(*body)["searches"].is_array()) {
      co_return fail(
          Status::invalidArgument("Format error in JSON body: missing field `searches`"));
    }
    // Every search is read before any runs: a batch is refused whole, and its searches share one
    // budget of levels and limits (each search's own caps would let a batch multiply them).
    std::vector<QueryRequest> reqs;
    size_t nodes = 0, limits = 0;
    for (const auto& s : (*body)["searches"]) {
      if (!s.is_object())
        co_return fail(Status::invalidArgument("Format error in JSON body: expected an object"));
      auto q = parseQueryRequest(s, e->coll, !query);
      if (!q.ok()) co_return fail(q.status());
      nodes += q->nodes;
      limits += q->limits;
      if (nodes > kMaxBatchNodes || limits > kMaxBatchLimits) {
        co_return fail(badRequest("a batch holds at most " + std::to_string(kMaxBatchNodes) +
                                  " searches and prefetches, with limits adding up to at most " +
                                  std::to_string(kMaxBatchLimits)));
      }
      reqs.push_back(std::move(*q));
    }
    std::string out = "[";
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto r = answer(*e, reqs[i], query);
      if (!r.ok()) co_return fail(r.status());
      if (i) out.push_back(',');
      out += *r;
    }
    out += "]";
    co_return ok(std::move(out));
  }

  Store& store_;
  const VectorsConfig& config_;
  net::asio::io_context& ctx_;
  access::AccessWorker* access_;
  SearchScratch scratch_;
};

}  // namespace

void addQdrantRoutes(Store& store, const VectorsConfig& config, net::asio::io_context& ctx,
                     net::Router& router, access::AccessWorker* access) {
  auto api = std::make_unique<Api>(store, config, ctx, access);
  Api* a = api.get();
  const std::string& pre = config.path_prefix;
  auto add = [&](const char* method, const std::string& path, Api::Fn fn, Touch touch,
                 bool must_exist = true) {
    router.add(method, pre + path,
               [a, fn, touch, must_exist](net::HttpRequest& req, net::ResponseWriter& w,
                                          net::PathParams p) {
                 return a->serve(req, w, p, fn, touch, must_exist);
               });
  };
  // The root answer has no envelope (the client's version check reads it).
  const auto root = [](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
    co_await w.send(
        200, "application/json",
        "{\"title\":\"qdrant - vector search engine (Infera)\",\"version\":\"1.19.0\"}");
  };
  router.add("GET", pre + "/", root);
  if (!pre.empty()) router.add("GET", pre, root);
  using T = Touch;
  add("GET", "/collections", &Api::listCollections, T::kNone);
  add("GET", "/aliases", &Api::aliases, T::kNone);
  add("GET", "/collections/{name}", &Api::getCollection, T::kRead);
  // Creating over an existing name is kManage; a missing one is created (serve lets it through).
  add("PUT", "/collections/{name}", &Api::createCollection, T::kManage, false);
  add("PATCH", "/collections/{name}", &Api::updateCollection, T::kManage);
  add("DELETE", "/collections/{name}", &Api::deleteCollection, T::kManage, false);
  add("GET", "/collections/{name}/exists", &Api::exists, T::kRead, false);
  add("GET", "/collections/{name}/stats", &Api::stats, T::kRead);
  add("GET", "/collections/{name}/aliases", &Api::aliases, T::kRead);
  add("PUT", "/collections/{name}/index", &Api::createIndex, T::kManage);
  add("DELETE", "/collections/{name}/index/{field}", &Api::deleteIndex, T::kManage);
  add("PUT", "/collections/{name}/points", &Api::upsert, T::kWrite);
  add("POST", "/collections/{name}/points", &Api::retrieve, T::kRead);
  add("GET", "/collections/{name}/points/{id}", &Api::getPoint, T::kRead);
  add("POST", "/collections/{name}/points/delete", &Api::deletePoints, T::kWrite);
  add("PUT", "/collections/{name}/points/vectors", &Api::updateVectors, T::kWrite);
  add("POST", "/collections/{name}/points/vectors/delete", &Api::deleteVectors, T::kWrite);
  add("POST", "/collections/{name}/points/payload", &Api::setPayload, T::kWrite);
  add("PUT", "/collections/{name}/points/payload", &Api::overwritePayload, T::kWrite);
  add("POST", "/collections/{name}/points/payload/delete", &Api::deletePayload, T::kWrite);
  add("POST", "/collections/{name}/points/payload/clear", &Api::clearPayload, T::kWrite);
  add("POST", "/collections/{name}/points/count", &Api::count, T::kRead);
  add("POST", "/collections/{name}/points/scroll", &Api::scroll, T::kRead);
  add("POST", "/collections/{name}/points/search", &Api::search, T::kRead);
  add("POST", "/collections/{name}/points/search/batch", &Api::searchBatch, T::kRead);
  add("POST", "/collections/{name}/points/query", &Api::query, T::kRead);
  add("POST", "/collections/{name}/points/query/batch", &Api::queryBatch, T::kRead);
  add("POST", "/collections/{name}/points/query/groups", &Api::queryGroups, T::kRead);
  // The floor's own answers (ill-formed UTF-8 at the door, cross-site refusals, a handler that
  // threw) in Qdrant's shape on every path this API serves. With a prefix, all of it; without,
  // its two top-level paths (never "", which would take the other services' paths too).
  for (const std::string& p : pre.empty() ? std::vector<std::string>{"/collections", "/aliases"}
                                          : std::vector<std::string>{pre}) {
    router.setErrorShape(p, qdrantErrorAnswer);
  }
  router.setFallback(pre + "/collections",
                     [](net::HttpRequest& req, net::ResponseWriter& w, int status,
                        std::string_view) -> Task<void> {
                       const std::string body =
                           qdrantError((status == 405 ? "Method not allowed: " : "Not found: ") +
                                           std::string(req.path()),
                                       "0.0");
                       co_await w.send(status, "application/json", body);
                     });
  router.own(std::move(api));
}

}  // namespace infera::vectors
