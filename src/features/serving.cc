#include "features/internal/serving.h"

#include <algorithm>

#include "core/log.h"
#include "features/internal/json_body.h"
#include "net/http.h"

namespace infera::features {
namespace {

using net::Task;

enum CellStatus : uint8_t {
  kInvalid = 0,
  kPresent = 1,
  kNullValue = 2,
  kNotFound = 3,
  kOutsideMaxAge = 4
};
constexpr const char* kStatusNames[] = {"\"INVALID\"", "\"PRESENT\"", "\"NULL_VALUE\"",
                                        "\"NOT_FOUND\"", "\"OUTSIDE_MAX_AGE\""};
constexpr const char* kEpoch = "\"1970-01-01T00:00:00Z\"";

enum Endpoint { kGet = 0, kPush, kWrite, kHealth, kEndpoints };
constexpr const char* kEndpointNames[] = {"get-online-features", "push", "write-to-online-store",
                                          "health"};

// A failure in Feast's terms: a FeastError class (its body is the double-encoded detail), a plain
// exception (its body is the message as a JSON string), or a request-validation error (422).
struct Failure {
  int status = 500;
  std::string cls;  // empty: plain
  std::string message;
  std::string field;  // validation: the body field
};

Failure notFound(std::string cls, std::string message) {
  return {404, std::move(cls), std::move(message), {}};
}
Failure badRequest(std::string message) { return {400, "FeastError", std::move(message), {}}; }
Failure validation(std::string field, std::string message) {
  return {422, {}, std::move(message), std::move(field)};
}

std::string failureBody(const Failure& f) {
  if (f.status == 422 && !f.field.empty()) {
    std::string b = "{\"detail\":[{\"type\":\"";
    b += f.message == "Field required" ? "missing" : "value_error";
    b += "\",\"loc\":[\"body\",";
    net::appendJsonString(b, f.field);
    b += "],\"msg\":";
    net::appendJsonString(b, f.message);
    b += ",\"input\":null}]}";
    return b;
  }
  if (f.cls.empty()) {
    std::string b;
    net::appendJsonString(b, f.message);
    return b;
  }
  return feastErrorBody(f.cls, f.message);
}

simdjson::dom::element member(simdjson::dom::object o, std::string_view k, bool& found) {
  simdjson::dom::element e;
  found = o.at_key(k).get(e) == simdjson::SUCCESS;
  return e;
}

// A request body as a JSON object, read under the floor's rules (json_body.h): a refusal of the
// floor is a 400, text that is not JSON Feast's 422.
std::optional<Failure> readBody(simdjson::dom::parser& parser, std::string_view text,
                                simdjson::dom::object& body) {
  simdjson::dom::element doc;
  if (auto e = parseBody(parser, text, doc)) {
    if (e->refused) return badRequest(std::move(e->message));
    return Failure{422, {}, "JSON decode error", "0"};
  }
  if (doc.get(body) != simdjson::SUCCESS) return Failure{422, {}, "JSON decode error", "0"};
  return std::nullopt;
}

// The one ownership rule (access::checkOwner) for a feature view or service: nothing when the
// caller may `op` it (its team's, or shared), else the failure `unknown()` builds, the one a name
// that does not exist gets: another team's view or service is not there for this caller.
template <typename Unknown>
std::optional<Failure> checkOwned(const access::Grant& grant, std::string_view name,
                                  std::string_view owner, access::Operation op, Unknown unknown) {
  auto d = access::checkOwner(grant, access::ResourceKind::kFeatureService, name, owner, op);
  if (!d) return std::nullopt;
  if (d->status == 404) return unknown();
  return Failure{d->status, "FeastPermissionError", "Permission error:\n" + d->message, {}};
}
bool mayWrite(const access::Grant& grant, const FeatureView& v) {
  return !access::checkOwner(grant, access::ResourceKind::kFeatureService, v.name, v.owner,
                             access::Operation::kWrite);
}

// A key column of the request: its values encoded as entity-key payloads.
struct KeyColumn {
  std::string name;
  Scalar type;
  std::vector<std::string> parts;
};

struct OutColumn {
  size_t slot;             // index into ReadPlan::views
  const Feature* feature;  // in that view
  std::string name;
};

struct ReadPlan {
  std::vector<const FeatureView*> views;
  std::vector<OutColumn> columns;
  std::vector<KeyColumn> keys;
  std::vector<std::string> compound;  // entity keys of multi-entity views, per slot and row
  std::vector<ReadKey> read_keys;     // slot-major: views[s] row r at s * rows + r
  size_t rows = 0;
  std::string service;
};

void appendKeyJson(std::string& json, std::string_view part, Scalar t) {
  // The payload untagged: prepend the scalar's tag so appendValueJson reads it.
  std::string tagged(1, static_cast<char>(t));
  tagged.append(part);
  std::string_view in(tagged);
  bool was_null = false;
  if (!appendValueJson(in, {t, false}, json, was_null)) json += "null";
}

std::optional<Failure> resolveFeatures(const Registry& reg, const access::Grant& grant,
                                       simdjson::dom::object body, ReadPlan& plan,
                                       bool& full_names) {
  bool found = false;
  full_names = false;
  simdjson::dom::element fe = member(body, "full_feature_names", found);
  if (found && !fe.is_null() && fe.get(full_names) != simdjson::SUCCESS) {
    return validation("full_feature_names", "Input should be a valid boolean");
  }
  // (alias, view, feature) refs in order.
  struct Ref {
    std::string alias;
    const FeatureView* view;
    const Feature* feature;
  };
  std::vector<Ref> refs;
  simdjson::dom::element svc = member(body, "feature_service", found);
  std::string_view service;
  if (found && !svc.is_null()) {
    if (svc.get(service) != simdjson::SUCCESS)
      return validation("feature_service", "Input should be a valid string");
  }
  if (!service.empty()) {
    auto unknown = [&] {
      return notFound(
          "FeatureServiceNotFoundException",
          "Feature service " + std::string(service) + " does not exist in project " + reg.project);
    };
    auto it = reg.services.find(std::string(service));
    if (it == reg.services.end()) return unknown();
    // The service and every view it reads: a view of another team makes the whole service
    // unusable for this caller, and it is told no more than for a name that does not exist.
    const access::Operation read = access::Operation::kRead;
    if (auto f = checkOwned(grant, service, it->second.owner, read, unknown)) return f;
    for (const auto& p : it->second.projections) {
      if (auto f = checkOwned(grant, p.view->name, p.view->owner, read, unknown)) return f;
    }
    plan.service = std::string(service);
    for (const auto& p : it->second.projections) {
      for (size_t fi : p.features) refs.push_back({p.alias, p.view, &p.view->features[fi]});
    }
  } else {
    simdjson::dom::element fl = member(body, "features", found);
    simdjson::dom::array arr;
    if (found && !fl.is_null() && fl.get(arr) != simdjson::SUCCESS) {
      return validation("features", "Input should be a valid list");
    }
    if (found && !fl.is_null()) {
      for (simdjson::dom::element e : arr) {
        std::string_view ref;
        if (e.get(ref) != simdjson::SUCCESS)
          return validation("features", "Input should be a valid string");
        const size_t colon = ref.find(':');
        if (colon == std::string_view::npos) {
          return Failure{500,
                         {},
                         "Invalid feature reference '" + std::string(ref) +
                             "'. Expected format: '<feature_view>:<feature>' or "
                             "'<feature_view>@<version>:<feature>'",
                         {}};
        }
        const std::string_view vn = ref.substr(0, colon);
        const std::string_view fn = ref.substr(colon + 1);
        auto unknown = [&] {
          return notFound(
              "FeatureViewNotFoundException",
              "Feature view " + std::string(vn) + " does not exist in project " + reg.project);
        };
        const FeatureView* v = reg.view(vn);
        if (!v) return unknown();
        // Before anything else is said about the view (its features, its keys).
        if (auto f = checkOwned(grant, vn, v->owner, access::Operation::kRead, unknown)) return f;
        const Feature* f = v->feature(fn);
        if (!f) {
          return notFound(
              "FeastObjectNotFoundException",
              "Feature " + std::string(fn) + " not found in projection " + std::string(vn));
        }
        refs.push_back({std::string(vn), v, f});
      }
    }
    if (refs.empty()) return Failure{500, {}, "No features specified for retrieval", {}};
  }
  // Collisions: the same output name twice.
  std::vector<std::string> names;
  names.reserve(refs.size());
  for (const auto& r : refs)
    names.push_back(full_names ? r.alias + "__" + r.feature->name : r.feature->name);
  {
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    std::string dups;
    for (size_t i = 1; i < sorted.size(); ++i) {
      if (sorted[i] == sorted[i - 1] && (i + 1 == sorted.size() || sorted[i + 1] != sorted[i])) {
        dups += (dups.empty() ? "" : ", ") + sorted[i];
      }
    }
    if (!dups.empty()) {
      return Failure{
          500,
          "FeatureNameCollisionError",
          "Duplicate features named " + dups +
              " found.\nTo resolve this collision, either use the full feature name by setting "
              "'full_feature_names=True', or ensure that the features in question have different "
              "names.",
          {}};
    }
  }
  // Views in order of first appearance (one slot per alias: a service may project a view twice).
  std::vector<std::string> slot_alias;
  for (size_t i = 0; i < refs.size(); ++i) {
    size_t slot = 0;
    while (slot < slot_alias.size() && slot_alias[slot] != refs[i].alias) ++slot;
    if (slot == slot_alias.size()) {
      slot_alias.push_back(refs[i].alias);
      plan.views.push_back(refs[i].view);
    }
    plan.columns.push_back({slot, refs[i].feature, std::move(names[i])});
  }
  return std::nullopt;
}

std::optional<Failure> readEntities(const Registry& reg, simdjson::dom::object body,
                                    ReadPlan& plan) {
  bool found = false;
  simdjson::dom::element ent = member(body, "entities", found);
  if (!found) return validation("entities", "Field required");
  simdjson::dom::object obj;
  if (ent.get(obj) != simdjson::SUCCESS)
    return validation("entities", "Input should be a valid dictionary");
  bool first = true;
  for (auto field : obj) {
    const Entity* e = nullptr;
    auto it = reg.by_join_key.find(field.key);
    if (it != reg.by_join_key.end()) {
      e = it->second;
    } else {
      auto byname = reg.entities.find(std::string(field.key));  // deprecated: an entity's name
      if (byname != reg.entities.end()) e = byname->second.get();
    }
    if (!e) continue;  // Feast drops keys it does not know
    simdjson::dom::array arr;
    if (field.value.get(arr) != simdjson::SUCCESS)
      return validation("entities", "Input should be a valid list");
    KeyColumn kc{e->join_key, e->type, {}};
    kc.parts.reserve(arr.size());
    size_t row = 0;
    for (simdjson::dom::element v : arr) {
      std::string part;
      Status s = encodeJsonKey(v, e->type, part);
      if (!s.isOk()) {
        return badRequest("entity key " + std::string(field.key) + ", row " + std::to_string(row) +
                          ": " + s.message() + " (the join key's type is " +
                          typeName({e->type, false}) + ")");
      }
      kc.parts.push_back(std::move(part));
      ++row;
    }
    if (!first && kc.parts.size() != plan.rows)
      return badRequest("All entity rows must have the same columns.");
    first = false;
    plan.rows = kc.parts.size();
    bool dup = false;
    for (const auto& k : plan.keys) dup = dup || k.name == kc.name;
    if (!dup) plan.keys.push_back(std::move(kc));
  }
  // Every requested view needs its join keys.
  for (const FeatureView* v : plan.views) {
    std::string missing;
    for (const Entity* e : v->entities) {
      bool have = false;
      for (const auto& k : plan.keys) have = have || k.name == e->join_key;
      if (!have) missing += (missing.empty() ? "" : ", ") + e->join_key;
    }
    if (!missing.empty() || plan.rows == 0) {
      return badRequest("Missing join key values for keys: [" +
                        (missing.empty() ? v->entities[0]->join_key : missing) +
                        "] (feature view " + v->name + ")");
    }
  }
  // The read keys, slot-major.
  const size_t n = plan.rows;
  size_t compound = 0;
  for (const FeatureView* v : plan.views) compound += v->entities.size() > 1 ? n : 0;
  plan.compound.reserve(compound);  // stable: read_keys point into it
  plan.read_keys.reserve(plan.views.size() * n);
  for (const FeatureView* v : plan.views) {
    std::vector<const KeyColumn*> cols;
    for (const Entity* e : v->entities) {
      for (const auto& k : plan.keys) {
        if (k.name == e->join_key) cols.push_back(&k);
      }
    }
    for (size_t r = 0; r < n; ++r) {
      if (cols.size() == 1) {
        plan.read_keys.push_back({v->id, cols[0]->parts[r]});
      } else {
        std::string key;
        for (const auto* c : cols) appendEntityKeyPart(key, c->parts[r]);
        plan.compound.push_back(std::move(key));
        plan.read_keys.push_back({v->id, plan.compound.back()});
      }
    }
  }
  return std::nullopt;
}

// One cell's source: the tagged value bytes of a plain view, or an aggregate's JSON.
struct Cell {
  std::string_view bytes;
  uint32_t agg_begin = 0, agg_len = 0;
  int64_t ts = 0;
  uint8_t status = kNotFound;
  bool agg = false;
};

// The cells of view slot `s` (one per requested column of the view and entity row): the tagged
// value bytes of a plain view, or an aggregate's JSON appended to `agg_json`; the row's event
// time; the status by the view's ttl and the stored value.
void collectSlotCells(const ReadPlan& plan, size_t s, const std::vector<std::string>& rows,
                      const FeaturesConfig& cfg, int64_t now_us, std::vector<Cell>& cells,
                      std::string& agg_json) {
  const size_t n = plan.rows;
  const FeatureView& v = *plan.views[s];
  std::vector<int> col_of_id(v.max_feature_id + 1, -1);
  std::vector<size_t> slot_cols;
  for (size_t c = 0; c < plan.columns.size(); ++c) {
    if (plan.columns[c].slot == s) {
      col_of_id[plan.columns[c].feature->id] = static_cast<int>(c);
      slot_cols.push_back(c);
    }
  }
  for (size_t r = 0; r < n; ++r) {
    const std::string& row = rows[s * n + r];
    if (row.size() < kRowHeader) continue;  // NOT_FOUND
    const int64_t ts = eventTimeOf(row);
    uint8_t base = kPresent;
    if (v.ttl_s > 0 && cfg.enforce_ttl) {
      const int64_t age_s = (now_us - ts) / 1'000'000;
      if (age_s > v.ttl_s + cfg.retain_expired_s) continue;  // gone, whether or not yet reclaimed
      if (age_s > v.ttl_s && !v.aggregated()) base = kOutsideMaxAge;
    }
    std::string_view payload = std::string_view(row).substr(kRowHeader);
    if (v.aggregated()) {
      const AggState st = decodeAggState(v, payload);
      for (size_t c : slot_cols) {
        Cell& cell = cells[c * n + r];
        bool null = false;
        cell.agg_begin = static_cast<uint32_t>(agg_json.size());
        appendAggJson(v, st, static_cast<size_t>(plan.columns[c].feature->agg), now_us, agg_json,
                      null);
        cell.agg_len = static_cast<uint32_t>(agg_json.size() - cell.agg_begin);
        cell.agg = true;
        cell.ts = ts;
        cell.status = null ? static_cast<uint8_t>(kNullValue) : base;
      }
      continue;
    }
    while (!payload.empty()) {  // one pass over the row's entries
      uint64_t id = 0;
      if (!getVarint(payload, id)) break;
      const std::string_view at = payload;
      if (!skipValue(payload)) break;
      if (id < col_of_id.size() && col_of_id[id] >= 0) {
        Cell& cell = cells[static_cast<size_t>(col_of_id[id]) * n + r];
        cell.bytes = at.substr(0, at.size() - payload.size());
        cell.ts = ts;
        cell.status = (static_cast<uint8_t>(at[0]) == 0) ? static_cast<uint8_t>(kNullValue) : base;
      }
    }
  }
}

// One entity column: the keys as converted, always PRESENT at time 0.
void appendEntityColumn(const KeyColumn& k, std::string& out) {
  const size_t n = k.parts.size();
  out += "{\"values\":[";
  for (size_t r = 0; r < n; ++r) {
    if (r) out += ',';
    appendKeyJson(out, k.parts[r], k.type);
  }
  out += "],\"statuses\":[";
  for (size_t r = 0; r < n; ++r) out += r ? ",\"PRESENT\"" : "\"PRESENT\"";
  out += "],\"event_timestamps\":[";
  for (size_t r = 0; r < n; ++r) {
    if (r) out += ',';
    out += kEpoch;
  }
  out += "]}";
}

// One feature column from its cells; a value stored under another type reads as NOT_FOUND.
void appendFeatureColumn(FeatureType type, Cell* cells, size_t n, const std::string& agg_json,
                         std::string& out, int64_t counts[5]) {
  out += "{\"values\":[";
  for (size_t r = 0; r < n; ++r) {
    Cell& cell = cells[r];
    if (r) out += ',';
    if (cell.agg) {
      out.append(agg_json, cell.agg_begin, cell.agg_len);
    } else if (cell.status == kNotFound) {
      out += "null";
    } else {
      std::string_view in = cell.bytes;
      bool was_null = false;
      if (!appendValueJson(in, type, out, was_null)) {
        out += "null";
        cell.status = kNotFound;
      }
    }
    ++counts[cell.status];
  }
  out += "],\"statuses\":[";
  for (size_t r = 0; r < n; ++r) {
    if (r) out += ',';
    out += kStatusNames[cells[r].status];
  }
  out += "],\"event_timestamps\":[";
  for (size_t r = 0; r < n; ++r) {
    if (r) out += ',';
    if (cells[r].status == kNotFound) {
      out += kEpoch;
    } else {
      appendTimestamp(out, cells[r].ts);
    }
  }
  out += "]}";
}

// The column-major response: metadata.feature_names (join keys first), then one result per column.
std::string buildResponse(const ReadPlan& plan, const std::vector<std::string>& rows,
                          const FeaturesConfig& cfg, int64_t now_us, FeatureMetrics& m, int shard) {
  const size_t n = plan.rows;
  const size_t ncols = plan.columns.size();
  std::vector<Cell> cells(ncols * n);
  std::string agg_json;
  for (size_t s = 0; s < plan.views.size(); ++s)
    collectSlotCells(plan, s, rows, cfg, now_us, cells, agg_json);

  std::string out;
  out.reserve(64 + ncols * n * 48 + plan.keys.size() * n * 40);
  out += "{\"metadata\":{\"feature_names\":[";
  bool first = true;
  auto comma = [&] {
    if (!first) out += ',';
    first = false;
  };
  for (const auto& k : plan.keys) {
    comma();
    net::appendJsonString(out, k.name);
  }
  for (const auto& c : plan.columns) {
    comma();
    net::appendJsonString(out, c.name);
  }
  out += "]},\"results\":[";
  first = true;
  for (const auto& k : plan.keys) {
    comma();
    appendEntityColumn(k, out);
  }
  int64_t counts[5] = {0, 0, 0, 0, 0};
  for (size_t c = 0; c < ncols; ++c) {
    comma();
    appendFeatureColumn(plan.columns[c].feature->type, &cells[c * n], n, agg_json, out, counts);
  }
  out += "]}";
  for (int s = 1; s < 5; ++s) {
    if (counts[s]) m.values_by_status[s]->inc(shard, static_cast<double>(counts[s]));
  }
  return out;
}

}  // namespace

net::EarlyAnswer feastErrorAnswer(int status, std::string_view message, std::string_view code) {
  (void)code;  // Feast's bodies have no place for it; the status and message say it
  Failure f{status,
            status == 401 || status == 403 ? "FeastPermissionError"
            : status >= 500                ? ""
                                           : "FeastError",
            std::string(message),
            {}};
  return {status, "application/json", failureBody(f)};
}

std::string feastErrorBody(std::string_view cls, std::string_view message) {
  // json.dumps' default separators, then encoded again as a JSON string (Feast's FeastError body).
  std::string inner = "{\"module\": \"feast.errors\", \"class\": ";
  net::appendJsonString(inner, cls);
  inner += ", \"message\": ";
  net::appendJsonString(inner, message);
  inner += "}";
  std::string body;
  net::appendJsonString(body, inner);
  return body;
}

FeatureMetrics::FeatureMetrics(obs::MetricsRegistry& r)
    : requests(r.counterFamily("infera_features_requests_total",
                               "Feature API requests by endpoint and status class.",
                               {"endpoint", "code_class"})),
      latency(r.histogramFamily(
          "infera_features_request_duration_seconds",
          "Feature API request latency, from the request read to the response written.",
          {"endpoint"}, obs::MetricsRegistry::latencyBuckets())),
      values(r.counterFamily("infera_features_values_total", "Feature values served, by status.",
                             {"status"})),
      written(r.counterFamily(
          "infera_features_written_total",
          "Rows written to the online store, aggregation events folded, and rows not written "
          "because they were already past their view's ttl.",
          {"kind"})) {
  const char* names[] = {"INVALID", "PRESENT", "NULL_VALUE", "NOT_FOUND", "OUTSIDE_MAX_AGE"};
  for (int i = 0; i < 5; ++i) values_by_status[i] = values->counter({names[i]});
  rows_written = written->counter({"rows"});
  events_written = written->counter({"events"});
  expired_skipped = written->counter({"expired"});
  for (const char* e : kEndpointNames) {
    latency->histogram({e});
    for (const char* cc : {"2xx", "4xx", "5xx"}) requests->counter({e, cc});
  }
}

std::mutex& ServingShared::aggLock(uint32_t view) {
  std::lock_guard<std::mutex> lock(agg_mu);
  auto& m = agg_locks[view];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

ServingShared::Noted ServingShared::noted(const std::vector<ViewBatch>& batches) {
  Noted out;
  for (const ViewBatch& b : batches) {
    if (!b.view || (b.rows.empty() && b.events.empty())) continue;
    int64_t newest = 0;
    for (const RowWrite& r : b.rows) {
      if (r.row.size() >= 8) newest = std::max(newest, eventTimeOf(r.row));
    }
    for (const AggEvent& e : b.events) newest = std::max(newest, e.ts_us);
    out.emplace_back(b.view->name, newest);
  }
  return out;
}

void ServingShared::recordWrites(const Noted& noted) {
  if (noted.empty()) return;
  const int64_t now_ms = clock->unixMillis();
  std::lock_guard<std::mutex> lock(fresh_mu);
  for (const auto& [view, newest] : noted) {
    Freshness& f = fresh[view];
    f.last_write_ms = now_ms;
    f.newest_event_us = std::max(f.newest_event_us, newest);
  }
}

std::unordered_map<std::string, ServingShared::Freshness> ServingShared::freshness() const {
  std::lock_guard<std::mutex> lock(fresh_mu);
  return fresh;
}

Status writeBatchesBlocking(ServingShared& shared, std::vector<ViewBatch>& batches) {
  const int64_t now_us = shared.clock->unixMillis() * 1000;
  for (auto& b : batches) {
    if (!b.rows.empty()) INFERA_RETURN_IF_ERROR(shared.store->write(std::move(b.rows)));
    if (!b.events.empty()) {
      INFERA_RETURN_IF_ERROR(applyAggEvents(*shared.store, *b.view, b.events, now_us,
                                            shared.config->retain_expired_s,
                                            shared.aggLock(b.view->id)));
    }
  }
  return Status::ok();
}

struct FeatureHandler::Exchange {
  Exchange(Endpoint e, net::HttpRequest& r, net::ResponseWriter& wr) : endpoint(e), req(r), w(wr) {}
  Endpoint endpoint;
  net::HttpRequest& req;
  net::ResponseWriter& w;
  int64_t start_ns = monoNanos();
  access::Grant grant;
  std::vector<net::HttpHeader> extra;
  int status = 0;
  std::string service;
};

FeatureHandler::FeatureHandler(int loop, net::asio::io_context& ctx, ServingShared& shared,
                               access::AccessWorker* access,
                               std::shared_ptr<const Registry> registry)
    : loop_(loop),
      ctx_(ctx),
      shared_(shared),
      access_(access),
      registry_(std::move(registry)),
      session_(shared.store->session(ctx, *shared.pool)) {}

namespace {

Task<void> answer(net::ResponseWriter& w, int& status_out,
                  const std::vector<net::HttpHeader>& extra, int status, std::string_view body) {
  status_out = status;
  co_await w.send(status, "application/json", body, extra);
}

Task<void> fail(net::ResponseWriter& w, int& status_out, const std::vector<net::HttpHeader>& extra,
                const Failure& f) {
  const std::string body = failureBody(f);
  co_await answer(w, status_out, extra, f.status, body);
}

}  // namespace

// Who calls (401), with access control on. Before the body is read: what a body names is
// resolved as its caller sees it (another team's views and services are unknown to it).
Task<bool> FeatureHandler::authenticate(Exchange& x) {
  if (!access_) co_return true;
  if (auto d = access_->authenticateRequest(x.req, x.grant)) {
    const Failure f{d->status, "FeastPermissionError", "Permission error:\n" + d->message, {}};
    co_await fail(x.w, x.status, x.extra, f);
    co_return false;
  }
  co_return true;
}

// The request limits of the caller's key, team and user (429). With access control off: nothing.
Task<bool> FeatureHandler::admit(Exchange& x) {
  if (!access_) co_return true;
  access::AdmitRequest ar;
  auto admission = access_->admit(x.grant, ar, x.extra);
  const std::optional<access::Denial> refused = co_await std::move(admission);
  if (refused) {
    const Failure f{refused->status, "FeastError", refused->message, {}};
    co_await fail(x.w, x.status, x.extra, f);
    co_return false;
  }
  co_return true;
}

Task<void> FeatureHandler::finish(Exchange& x) {
  const double seconds = static_cast<double>(monoNanos() - x.start_ns) / 1e9;
  FeatureMetrics& m = *shared_.metrics;
  const char* cc = x.status < 400 ? "2xx" : x.status < 500 ? "4xx" : "5xx";
  m.requests->counter({kEndpointNames[x.endpoint], cc})->inc(loop_);
  m.latency->histogram({kEndpointNames[x.endpoint]})->observe(loop_, seconds);
  if (access_ && x.grant) {
    access::UsageRecord r;
    r.model = x.service.empty() ? std::string("features:") + kEndpointNames[x.endpoint]
                                : "feature_service:" + x.service;
    r.latency_ms = seconds * 1000;
    r.status = x.status;
    access_->finish(x.grant, std::move(r), access::PriceConfig{});
  }
  co_return;
}

Task<void> FeatureHandler::getOnlineFeatures(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{kGet, req, w};
  if (!(co_await authenticate(x))) {
    co_await finish(x);
    co_return;
  }
  std::shared_ptr<const Registry> reg = registry_;  // this request's snapshot
  ReadPlan plan;
  bool full_names = false;
  std::optional<Failure> failure;
  {
    simdjson::dom::object body;
    failure = readBody(parser_, req.body, body);
    if (!failure) failure = resolveFeatures(*reg, x.grant, body, plan, full_names);
    if (!failure) failure = readEntities(*reg, body, plan);
  }
  // The document is not used past this point (other requests on this loop reuse the parser).
  x.service = plan.service;
  if (!(co_await admit(x))) {
    co_await finish(x);
    co_return;
  }
  if (failure) {
    co_await fail(w, x.status, x.extra, *failure);
    co_await finish(x);
    co_return;
  }
  std::vector<std::string> rows;
  Status s = co_await session_->read(plan.read_keys, rows);
  if (!s.isOk()) {
    const Failure f{s.code() == StatusCode::kUnavailable ? 503 : 500, {}, s.message(), {}};
    co_await fail(w, x.status, x.extra, f);
    co_await finish(x);
    co_return;
  }
  const std::string out = buildResponse(
      plan, rows, *shared_.config, shared_.clock->unixMillis() * 1000, *shared_.metrics, loop_);
  co_await answer(w, x.status, x.extra, 200, out);
  co_await finish(x);
}

Task<void> FeatureHandler::writeBatches(Exchange& x, std::vector<ViewBatch> batches, int ok_status,
                                        std::string_view ok_body) {
  FeatureMetrics& m = *shared_.metrics;
  size_t nrows = 0, nevents = 0, expired = 0;
  for (auto& b : batches) {
    nrows += b.rows.size();
    nevents += b.events.size();
    expired += b.expired;
  }
  const ServingShared::Noted noted = ServingShared::noted(batches);
  Status s = Status::ok();
  std::vector<ViewBatch> agg;
  for (auto& b : batches) {
    if (!b.rows.empty() && s.isOk()) {
      auto t = session_->write(std::move(b.rows));
      s = co_await std::move(t);
    }
    if (!b.events.empty()) agg.push_back(std::move(b));
  }
  if (s.isOk() && !agg.empty()) {
    auto shared = std::make_shared<std::vector<ViewBatch>>(std::move(agg));
    ServingShared* ss = &shared_;
    std::function<Status()> job = [ss, shared] { return writeBatchesBlocking(*ss, *shared); };
    auto task = runOnPoolStatus(*shared_.pool, ctx_, std::move(job));
    s = co_await std::move(task);
  }
  if (!s.isOk()) {
    const Failure f{s.code() == StatusCode::kUnavailable ? 503 : 500, {}, s.message(), {}};
    co_await fail(x.w, x.status, x.extra, f);
    co_return;
  }
  shared_.recordWrites(noted);
  m.rows_written->inc(loop_, static_cast<double>(nrows));
  m.events_written->inc(loop_, static_cast<double>(nevents));
  if (expired) m.expired_skipped->inc(loop_, static_cast<double>(expired));
  x.status = ok_status;
  co_await x.w.send(ok_status, "application/json", ok_body, x.extra);
}

Task<void> FeatureHandler::push(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{kPush, req, w};
  if (!(co_await authenticate(x))) {
    co_await finish(x);
    co_return;
  }
  std::shared_ptr<const Registry> reg = registry_;
  std::vector<ViewBatch> batches;
  std::optional<Failure> failure;
  {
    simdjson::dom::object body;
    bool found = false;
    std::string_view name, to = "online";
    if ((failure = readBody(parser_, req.body, body))) {
    } else if (simdjson::dom::element n = member(body, "push_source_name", found); !found) {
      failure = validation("push_source_name", "Field required");
    } else if (n.get(name) != simdjson::SUCCESS) {
      failure = validation("push_source_name", "Input should be a valid string");
    } else if (simdjson::dom::element t = member(body, "to", found);
               found && !t.is_null() && t.get(to) != simdjson::SUCCESS) {
      failure = validation("to", "Input should be a valid string");
    } else if (to != "online" && to != "offline" && to != "online_and_offline") {
      failure = badRequest(
          std::string(to) +
          " is not a supported push format. Please specify one of these ['online', 'offline', "
          "'online_and_offline'].");
    } else if (to == "offline") {
      failure = Failure{
          501, "FeastError", "this feature server has no offline store: push with to=online", {}};
    } else if (simdjson::dom::element df = member(body, "df", found); !found) {
      failure = validation("df", "Field required");
    } else {
      auto src = reg->push_sources.find(std::string(name));
      auto views = reg->views_by_source.find(std::string(name));
      // The views the caller may write (its team's and the shared ones): a push never reaches
      // another team's view, and a source that feeds only such views is unknown to the caller.
      std::vector<const FeatureView*> writable;
      if (views != reg->views_by_source.end()) {
        for (const FeatureView* v : views->second) {
          if (mayWrite(x.grant, *v)) writable.push_back(v);
        }
      }
      if (src == reg->push_sources.end() || writable.empty()) {
        failure = Failure{422,
                          "PushSourceNotFoundException",
                          "Unable to find push source '" + std::string(name) + "'.",
                          {}};
      } else {
        DataFrame frame;
        Status s = readDataFrame(df, frame);
        IngestOptions o;
        o.now_us = shared_.clock->unixMillis() * 1000;
        o.retain_expired_s = shared_.config->retain_expired_s;
        for (const FeatureView* v : writable) {
          if (!s.isOk()) break;
          if (!v->online) continue;
          batches.emplace_back();
          s = buildViewBatch(*v, src->second.timestamp_field, frame, o, batches.back());
        }
        if (!s.isOk()) failure = badRequest(s.message());
      }
    }
  }
  if (!(co_await admit(x))) {
    co_await finish(x);
    co_return;
  }
  if (failure) {
    co_await fail(w, x.status, x.extra, *failure);
  } else {
    auto task = writeBatches(x, std::move(batches), 200, "");
    co_await std::move(task);
  }
  co_await finish(x);
}

Task<void> FeatureHandler::writeToOnlineStore(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{kWrite, req, w};
  if (!(co_await authenticate(x))) {
    co_await finish(x);
    co_return;
  }
  std::shared_ptr<const Registry> reg = registry_;
  std::vector<ViewBatch> batches;
  std::optional<Failure> failure;
  {
    simdjson::dom::object body;
    bool found = false;
    std::string_view name;
    if ((failure = readBody(parser_, req.body, body))) {
    } else if (simdjson::dom::element n = member(body, "feature_view_name", found); !found) {
      failure = validation("feature_view_name", "Field required");
    } else if (n.get(name) != simdjson::SUCCESS) {
      failure = validation("feature_view_name", "Input should be a valid string");
    } else if (simdjson::dom::element df = member(body, "df", found); !found) {
      failure = validation("df", "Field required");
    } else if (const FeatureView* v = reg->view(name); !v || !mayWrite(x.grant, *v)) {
      // Another team's view is as unknown to the caller as one that does not exist.
      failure = notFound("FeastObjectNotFoundException",
                         "Can't recognize feast object with a name " + std::string(name));
    } else {
      DataFrame frame;
      Status s = readDataFrame(df, frame);
      IngestOptions o;
      o.now_us = shared_.clock->unixMillis() * 1000;
      o.retain_expired_s = shared_.config->retain_expired_s;
      auto src = reg->push_sources.find(v->source);
      const std::string ts_field =
          src == reg->push_sources.end() ? "event_timestamp" : src->second.timestamp_field;
      batches.emplace_back();
      if (s.isOk()) s = buildViewBatch(*v, ts_field, frame, o, batches.back());
      if (!s.isOk()) failure = badRequest(s.message());
    }
  }
  if (!(co_await admit(x))) {
    co_await finish(x);
    co_return;
  }
  if (failure) {
    co_await fail(w, x.status, x.extra, *failure);
  } else {
    auto task = writeBatches(x, std::move(batches), 200, "null");
    co_await std::move(task);
  }
  co_await finish(x);
}

Task<void> FeatureHandler::health(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{kHealth, req, w};
  x.status = 200;
  co_await w.send(200, "application/json", "");
  co_await finish(x);
}

}  // namespace infera::features
