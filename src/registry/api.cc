#include "registry/internal/api.h"

#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/log.h"
#include "core/text.h"
#include "core/utf8.h"
#include "registry/internal/mlflow.h"
#include "registry/internal/routing.h"
#include "registry/internal/search.h"

namespace infera::registry {

using Json = nlohmann::json;
using net::Task;

RegistryMetrics::RegistryMetrics(obs::MetricsRegistry& r)
    : registry(r),
      requests(r.counterFamily("infera_registry_requests_total",
                               "Registry API requests by API and status class.",
                               {"api", "code_class"})),
      artifact_bytes_in(r.counterFamily("infera_registry_artifact_bytes_total",
                                        "Artifact bytes uploaded and downloaded.", {"direction"})
                            ->counter({"in"})),
      artifact_bytes_out(r.counterFamily("infera_registry_artifact_bytes_total",
                                         "Artifact bytes uploaded and downloaded.", {"direction"})
                             ->counter({"out"})),
      syncs_ok(r.counterFamily("infera_registry_syncs_total",
                               "Routing state reloads from the store, by result.", {"result"})
                   ->counter({"ok"})),
      syncs_failed(r.counterFamily("infera_registry_syncs_total",
                                   "Routing state reloads from the store, by result.", {"result"})
                       ->counter({"error"})),
      sync_polls(r.counterFamily("infera_registry_sync_polls_total",
                                 "Looks at the store's routing generation by the control thread "
                                 "(every sync_interval_ms), changed or not.")
                     ->counter()),
      rebuilds(r.counterFamily("infera_registry_route_rebuilds_total",
                               "Gateway route tables rebuilt because the registry's routes moved.")
                   ->counter()),
      dropped_shadows(
          r.counterFamily("infera_registry_dropped_total",
                          "Shadow outcomes and captures not kept (the write queue was full).",
                          {"kind"})
              ->counter({"shadow"})),
      dropped_captures(
          r.counterFamily("infera_registry_dropped_total",
                          "Shadow outcomes and captures not kept (the write queue was full).",
                          {"kind"})
              ->counter({"capture"})),
      write_failures(
          r.counterFamily(
               "infera_registry_write_failures_total",
               "Batches of shadow outcomes or captures the store refused (kept and retried).")
              ->counter()) {}

namespace {

constexpr size_t kUploadChunk = 1 << 20;    // bytes handed to a worker per write
constexpr size_t kDownloadChunk = 1 << 20;  // bytes read per piece
// The free text of a review flag (docs/registry.md): what a reviewer reads, not a document.
constexpr size_t kMaxFlagReasonBytes = 4096;
// A request id, model or target named by a flag (names are at most 256 bytes; a target adds a
// version or an alias).
constexpr size_t kMaxFlagNameBytes = 512;

std::string queryOf(const net::HttpRequest& req) {
  const size_t q = req.target.find('?');
  return q == std::string::npos ? std::string() : req.target.substr(q + 1);
}

std::string firstQuery(const net::HttpRequest& req, std::string_view key) {
  auto v = queryValues(queryOf(req), key);
  return v.empty() ? std::string() : v.front();
}

std::string decoded(std::string_view s) {
  std::string out;
  return percentDecode(s, out) ? out : std::string(s);
}

// A request body through the shared reader (size, depth, UTF-8, duplicate keys): {} when empty.
Result<Json> readRequestJson(std::string_view body) {
  if (body.empty()) return Json::object();
  return readJson(body);
}

Task<void> sendJson(net::ResponseWriter& w, int status, const std::string& body) {
  co_await w.send(status, "application/json", body);
}

std::string adminCode(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return "invalid_parameter";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kAlreadyExists:
      return "already_exists";
    case StatusCode::kFailedPrecondition:
      return "conflict";
    case StatusCode::kPermissionDenied:
      return "permission_denied";
    case StatusCode::kUnauthenticated:
      return "unauthenticated";
    case StatusCode::kPayloadTooLarge:
      return "too_large";
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted:
      return "unavailable";
    default:
      return "internal_error";
  }
}

int adminStatus(const Status& s) {
  const int st = mlflowStatus(s);
  return s.code() == StatusCode::kAlreadyExists ? 409 : st;
}

std::string adminError(const Status& s) {
  return net::errorJson(s.message(), "invalid_request_error", adminCode(s));
}

Json moveJson(const AliasMove& m) {
  return {{"model", m.name},
          {"alias", m.alias},
          {"seq", m.seq},
          {"ts_ms", m.ts_ms},
          {"from_version", m.from_version ? Json(std::to_string(m.from_version)) : Json(nullptr)},
          {"to_version", m.to_version ? Json(std::to_string(m.to_version)) : Json(nullptr)},
          {"actor", m.actor},
          {"reason", m.reason}};
}

// A stored body as JSON when it is JSON (within the shared reader's limits), else as text: a
// capture cut at max_body_bytes, or bytes written before the door checked them (dumpJson
// replaces what is not UTF-8).
Json maybeJson(const std::string& s) {
  Result<Json> j = readJson(s);
  if (!j.ok()) return s;
  return std::move(*j);
}

Json reviewJson(const ReviewItem& r, bool bodies) {
  Json j = {{"request_id", r.request_id},
            {"ts_ms", r.ts_ms},
            {"model", r.model},
            {"target", r.target},
            {"arm", r.arm},
            {"key_id", r.key_id},
            {"status", r.status},
            {"latency_ms", r.latency_ms},
            {"flagged", r.flagged},
            {"reason", r.reason},
            {"flagged_by", r.flagged_by},
            {"flagged_ms", r.flagged_ms},
            {"verdict", r.verdict},
            {"label", r.label},
            {"reviewer", r.reviewer},
            {"note", r.note},
            {"reviewed_ms", r.reviewed_ms}};
  if (bodies) {
    j["request"] = maybeJson(r.request);
    j["response"] = maybeJson(r.response);
  }
  return j;
}

Json outcomeJson(const gateway::ShadowOutcome& o) {
  return {{"ts_ms", o.ts_ms},
          {"request_id", o.request_id},
          {"primary", o.primary},
          {"shadow", o.shadow},
          {"status", o.status},
          {"error", o.error},
          {"latency_ms", o.latency_ms},
          {"primary_latency_ms", o.primary_latency_ms},
          {"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.completion_tokens},
          {"matched", o.matched < 0 ? Json(nullptr) : Json(o.matched == 1)}};
}

Json statsJson(const gateway::ExperimentStats& s) {
  Json arms = Json::array();
  for (const auto& a : s.arms) {
    arms.push_back({{"arm", a.arm},
                    {"target", a.target},
                    {"weight", a.weight},
                    {"requests", a.requests},
                    {"errors", a.errors},
                    {"error_rate", a.requests > 0 ? a.errors / a.requests : 0.0},
                    {"latency_p50_s", a.p50_s},
                    {"latency_p99_s", a.p99_s},
                    {"ttft_p50_s", a.ttft_p50_s},
                    {"ttft_p99_s", a.ttft_p99_s},
                    {"prompt_tokens", a.prompt_tokens},
                    {"completion_tokens", a.completion_tokens}});
  }
  Json j = {{"arms", arms}};
  if (s.shadow) {
    const auto& sh = *s.shadow;
    j["shadow"] = {
        {"target", sh.target},      {"share", sh.share},       {"ok", sh.ok},
        {"error", sh.error},        {"failed", sh.failed},     {"shed", sh.shed},
        {"match", sh.match},        {"mismatch", sh.mismatch}, {"latency_p50_s", sh.p50_s},
        {"latency_p99_s", sh.p99_s}};
  }
  return j;
}

// The floor's own answers (invalid UTF-8 at the door, a cross-site refusal, a handler that threw)
// in MLflow's error shape, so an MLflow client reads them like the registry's.
net::EarlyAnswer mlflowShape(int status, std::string_view message, std::string_view) {
  std::string_view code = status >= 500 ? "INTERNAL_ERROR" : "BAD_REQUEST";
  switch (status) {
    case 400:
      code = "INVALID_PARAMETER_VALUE";
      break;
    case 401:
      code = "UNAUTHENTICATED";
      break;
    case 403:
      code = "PERMISSION_DENIED";
      break;
    case 404:
      code = "RESOURCE_DOES_NOT_EXIST";
      break;
    case 413:
      code = "RESOURCE_EXHAUSTED";
      break;
    case 429:
    case 503:
      code = "TEMPORARILY_UNAVAILABLE";
      break;
    default:
      break;
  }
  return net::EarlyAnswer{status, "application/json", mlflowError(code, status, message).body};
}

std::string classOf(int status) {
  const int c = status / 100;
  return c >= 1 && c <= 5 ? std::to_string(c) + "xx" : "other";
}

// One admin operation: its inputs as the route gave them, its answer and what to audit.
struct AdminCall {
  std::string method;
  std::map<std::string, std::string> params;  // path parameters, percent-decoded
  std::string query;
  Json body;  // {} when the body is empty; else what readJson read (any JSON value)
  std::string actor;
  // Which registered models the caller may touch (null: all, the admin token's).
  std::function<bool(const std::string& model)> visible;
  std::string param(const std::string& k) const {
    auto it = params.find(k);
    return it == params.end() ? std::string() : it->second;
  }
  std::string q(const std::string& k) const {
    auto v = queryValues(query, k);
    return v.empty() ? std::string() : v.front();
  }
};

struct AdminReply {
  int status = 200;
  std::string body;
  std::string audit_action;
  std::string audit_target;
  bool changed = false;
};

using AdminOp = std::function<Result<AdminReply>(RegistryStore&, const AdminCall&, ApiShared&)>;

AdminReply reply(const Json& j, int status = 200) {
  AdminReply r;
  r.status = status;
  r.body = dumpJson(j);
  return r;
}

AdminReply changed(AdminReply r, std::string action, std::string target) {
  r.audit_action = "registry." + std::move(action);
  r.audit_target = std::move(target);
  r.changed = true;
  return r;
}

Result<std::string> bodyString(const AdminCall& c, const std::string& field, bool required) {
  if (!c.body.is_object()) return Status::invalidArgument("the body must be a JSON object");
  if (!c.body.contains(field) || c.body[field].is_null()) {
    if (required) return Status::invalidArgument(field + ": required");
    return std::string();
  }
  if (c.body[field].is_string()) return c.body[field].get<std::string>();
  if (c.body[field].is_number_integer()) return std::to_string(c.body[field].get<int64_t>());
  return Status::invalidArgument(field + ": must be a string");
}

// Typed reads of optional body fields: a value of another type is a 400 naming the field, where
// nlohmann's value()/get<>() would throw on a pool thread. The body is an object (checked first).
Result<double> bodyNumber(const AdminCall& c, const std::string& field, double def) {
  const auto it = c.body.find(field);
  if (it == c.body.end() || it->is_null()) return def;
  if (!it->is_number()) return Status::invalidArgument(field + ": must be a number");
  return it->get<double>();
}

Result<int64_t> bodyInt(const AdminCall& c, const std::string& field, int64_t def) {
  const auto it = c.body.find(field);
  if (it == c.body.end() || it->is_null()) return def;
  if (!it->is_number_integer()) return Status::invalidArgument(field + ": must be an integer");
  return it->get<int64_t>();
}

Result<bool> bodyBool(const AdminCall& c, const std::string& field, bool def) {
  const auto it = c.body.find(field);
  if (it == c.body.end() || it->is_null()) return def;
  if (!it->is_boolean()) return Status::invalidArgument(field + ": must be true or false");
  return it->get<bool>();
}

// ---- aliases and history ----

Result<AdminReply> opSetAlias(RegistryStore& s, const AdminCall& c, ApiShared&) {
  INFERA_ASSIGN_OR_RETURN(const std::string version, bodyString(c, "version", true));
  INFERA_ASSIGN_OR_RETURN(const int64_t v, parseVersion(version));
  INFERA_ASSIGN_OR_RETURN(const std::string reason, bodyString(c, "reason", false));
  INFERA_ASSIGN_OR_RETURN(const AliasMove m,
                          s.setAlias(c.param("name"), c.param("alias"), v, c.actor, reason));
  return changed(reply({{"move", moveJson(m)}}), "alias.set",
                 c.param("name") + "@" + c.param("alias"));
}

Result<AdminReply> opDeleteAlias(RegistryStore& s, const AdminCall& c, ApiShared&) {
  INFERA_RETURN_IF_ERROR(s.deleteAlias(c.param("name"), c.param("alias"), c.actor, c.q("reason")));
  return changed(reply(Json::object()), "alias.delete", c.param("name") + "@" + c.param("alias"));
}

Result<AdminReply> opRollback(RegistryStore& s, const AdminCall& c, ApiShared&) {
  std::string reason;
  if (c.body.is_object()) {
    INFERA_ASSIGN_OR_RETURN(reason, bodyString(c, "reason", false));
  }
  INFERA_ASSIGN_OR_RETURN(const AliasMove m,
                          s.rollbackAlias(c.param("name"), c.param("alias"), c.actor, reason));
  return changed(reply({{"move", moveJson(m)}}), "alias.rollback",
                 c.param("name") + "@" + c.param("alias"));
}

Result<AdminReply> opHistory(RegistryStore& s, const AdminCall& c, ApiShared&) {
  int limit = 100;
  if (!c.q("limit").empty()) limit = std::clamp(std::atoi(c.q("limit").c_str()), 1, 10000);
  INFERA_ASSIGN_OR_RETURN(const auto moves, s.aliasHistory(c.param("name"), c.q("alias"), limit));
  Json a = Json::array();
  for (const auto& m : moves) a.push_back(moveJson(m));
  return reply({{"history", a}});
}

// ---- bindings ----

Result<AdminReply> opBindings(RegistryStore& s, const AdminCall& c, ApiShared& sh) {
  INFERA_RETURN_IF_ERROR(s.getModel(c.param("name")).takeStatus());
  INFERA_ASSIGN_OR_RETURN(const auto bs, s.bindings(c.param("name")));
  Json a = Json::array();
  for (const auto& b : bs)
    a.push_back({{"ref", b.ref}, {"deployments", b.deployments}, {"updated_ms", b.updated_ms}});
  Json cfg = Json::array();
  for (const auto& b : sh.config_bindings()) {
    if (b.model == c.param("name")) cfg.push_back({{"ref", b.ref}, {"deployments", b.deployments}});
  }
  return reply({{"bindings", a}, {"config_bindings", cfg}});
}

Result<AdminReply> opSetBinding(RegistryStore& s, const AdminCall& c, ApiShared& sh) {
  Binding b;
  b.model = c.param("name");
  b.ref = c.param("ref");
  if (!c.body.is_object() || !c.body.contains("deployments") || !c.body["deployments"].is_array() ||
      c.body["deployments"].empty()) {
    return Status::invalidArgument(
        "deployments: a non-empty list of deployment names (\"d1\" or \"model/d1\")");
  }
  for (const auto& d : c.body["deployments"]) {
    if (!d.is_string()) return Status::invalidArgument("deployments: names must be strings");
    const std::string name = d.get<std::string>();
    if (!sh.deployment_exists(name)) {
      return Status::invalidArgument("deployments: '" + name +
                                     "' is not a deployment of the config's models");
    }
    b.deployments.push_back(name);
  }
  INFERA_RETURN_IF_ERROR(s.setBinding(b));
  return changed(reply({{"binding", {{"ref", b.ref}, {"deployments", b.deployments}}}}),
                 "binding.set", routeName(b.model, b.ref));
}

Result<AdminReply> opDeleteBinding(RegistryStore& s, const AdminCall& c, ApiShared&) {
  INFERA_RETURN_IF_ERROR(s.deleteBinding(c.param("name"), c.param("ref")));
  return changed(reply(Json::object()), "binding.delete",
                 routeName(c.param("name"), c.param("ref")));
}

// ---- experiments ----

Status checkRefExists(RegistryStore& s, const std::string& model, const std::string& ref) {
  if (ref.starts_with("@")) return s.versionByAlias(model, ref.substr(1)).takeStatus();
  INFERA_ASSIGN_OR_RETURN(const int64_t v, parseVersion(ref));
  return s.getVersion(model, v).takeStatus();
}

Result<AdminReply> opGetExperiment(RegistryStore& s, const AdminCall& c, ApiShared& sh) {
  INFERA_ASSIGN_OR_RETURN(const auto spec, s.experiment(c.param("name")));
  if (!spec) return Status::notFound("model " + c.param("name") + " has no experiment");
  INFERA_ASSIGN_OR_RETURN(Json stored, readJson(*spec));
  Json j = {{"experiment", std::move(stored)}};
  if (auto st = sh.stats(c.param("name"))) j["stats"] = statsJson(*st);
  return reply(j);
}

Result<AdminReply> storeExperiment(RegistryStore& s, const AdminCall& c,
                                   const ExperimentSpec& spec) {
  const std::string name = c.param("name");
  INFERA_RETURN_IF_ERROR(s.getModel(name).takeStatus());
  for (const auto& a : spec.arms) {
    const Status e = checkRefExists(s, name, a.ref);
    if (!e.isOk()) return Status::invalidArgument("arm " + a.name + ": " + e.message());
  }
  if (!spec.shadow.empty()) {
    const Status e = checkRefExists(s, name, spec.shadow);
    if (!e.isOk()) return Status::invalidArgument("shadow: " + e.message());
  }
  const std::string json = experimentJson(spec);
  INFERA_RETURN_IF_ERROR(s.setExperiment(name, json));
  INFERA_ASSIGN_OR_RETURN(Json written, readJson(json));
  return changed(reply({{"experiment", std::move(written)}}), "experiment.set", name);
}

Result<AdminReply> opSetExperiment(RegistryStore& s, const AdminCall& c, ApiShared&) {
  if (!c.body.is_object()) return Status::invalidArgument("the body must be a JSON object");
  INFERA_ASSIGN_OR_RETURN(const ExperimentSpec spec, parseExperiment(dumpJson(c.body)));
  return storeExperiment(s, c, spec);
}

// PATCH: {"weights": {"arm": w, ...}} and/or {"shadow": {"share": x}}: edits the live experiment.
Result<AdminReply> opPatchExperiment(RegistryStore& s, const AdminCall& c, ApiShared&) {
  INFERA_ASSIGN_OR_RETURN(const auto cur, s.experiment(c.param("name")));
  if (!cur) return Status::notFound("model " + c.param("name") + " has no experiment");
  INFERA_ASSIGN_OR_RETURN(ExperimentSpec spec, parseExperiment(*cur));
  if (!c.body.is_object()) return Status::invalidArgument("the body must be a JSON object");
  if (c.body.contains("weights")) {
    const Json& w = c.body["weights"];
    if (!w.is_object()) return Status::invalidArgument("weights: an object of arm name to weight");
    for (auto it = w.begin(); it != w.end(); ++it) {
      auto arm = std::find_if(spec.arms.begin(), spec.arms.end(),
                              [&](const ArmSpec& a) { return a.name == it.key(); });
      if (arm == spec.arms.end())
        return Status::invalidArgument("weights: no arm named " + it.key());
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
          it.value().get<int64_t>() > 1'000'000) {
        return Status::invalidArgument("weights." + it.key() + ": an integer in [0, 1000000]");
      }
      arm->weight = static_cast<int>(it.value().get<int64_t>());
    }
  }
  if (c.body.contains("shadow_share")) {
    if (!c.body["shadow_share"].is_number())
      return Status::invalidArgument("shadow_share: a number in [0, 1]");
    const double share = c.body["shadow_share"].get<double>();
    if (!(share >= 0 && share <= 1))
      return Status::invalidArgument("shadow_share: a number in [0, 1]");
    spec.shadow_share = share;
  }
  INFERA_ASSIGN_OR_RETURN(ExperimentSpec checked, parseExperiment(experimentJson(spec)));
  return storeExperiment(s, c, checked);
}

Result<AdminReply> opDeleteExperiment(RegistryStore& s, const AdminCall& c, ApiShared&) {
  INFERA_RETURN_IF_ERROR(s.deleteExperiment(c.param("name")));
  return changed(reply(Json::object()), "experiment.delete", c.param("name"));
}

Result<AdminReply> opShadow(RegistryStore& s, const AdminCall& c, ApiShared& sh) {
  int limit = 100;
  if (!c.q("limit").empty()) limit = std::clamp(std::atoi(c.q("limit").c_str()), 1, 10000);
  INFERA_ASSIGN_OR_RETURN(const auto outcomes, s.shadowOutcomes(c.param("name"), limit));
  Json a = Json::array();
  int64_t ok = 0, failed = 0, matched = 0, mismatched = 0;
  for (const auto& o : outcomes) {
    a.push_back(outcomeJson(o));
    if (o.error.empty() && o.status > 0 && o.status < 400) ++ok;
    if (!o.error.empty() || o.status >= 400) ++failed;
    if (o.matched == 1) ++matched;
    if (o.matched == 0) ++mismatched;
  }
  Json j = {{"outcomes", a},
            {"summary",
             {{"count", outcomes.size()},
              {"ok", ok},
              {"failed", failed},
              {"matched", matched},
              {"mismatched", mismatched}}}};
  if (auto st = sh.stats(c.param("name")); st && st->shadow) j["stats"] = statsJson(*st)["shadow"];
  return reply(j);
}

// ---- capture, opt-outs, review ----

std::string target(const AdminCall& c) { return c.param("name") + "/" + c.param("version"); }

Result<AdminReply> opGetCapture(RegistryStore& s, const AdminCall& c, ApiShared&) {
  INFERA_ASSIGN_OR_RETURN(const auto cs, s.captureSettings(target(c)));
  if (!cs) return reply({{"capture", nullptr}});
  return reply({{"capture",
                 {{"sample", cs->sample},
                  {"flag_errors", cs->flag_errors},
                  {"flag_slower_ms", cs->flag_slower_ms},
                  {"flag_contains", cs->flag_contains}}}});
}

Result<AdminReply> opSetCapture(RegistryStore& s, const AdminCall& c, ApiShared&) {
  if (!c.body.is_object()) return Status::invalidArgument("the body must be a JSON object");
  CaptureSettings cs;
  cs.target = target(c);
  INFERA_ASSIGN_OR_RETURN(cs.sample, bodyNumber(c, "sample", 0.0));
  if (!(cs.sample >= 0 && cs.sample <= 1)) return Status::invalidArgument("sample: in [0, 1]");
  INFERA_ASSIGN_OR_RETURN(cs.flag_errors, bodyBool(c, "flag_errors", false));
  INFERA_ASSIGN_OR_RETURN(cs.flag_slower_ms, bodyInt(c, "flag_slower_ms", 0));
  if (cs.flag_slower_ms < 0) return Status::invalidArgument("flag_slower_ms: must be >= 0");
  if (c.body.contains("flag_contains")) {
    if (!c.body["flag_contains"].is_array())
      return Status::invalidArgument("flag_contains: a list of strings");
    for (const auto& w : c.body["flag_contains"]) {
      if (!w.is_string()) return Status::invalidArgument("flag_contains: a list of strings");
      cs.flag_contains.push_back(w.get<std::string>());
    }
  }
  INFERA_RETURN_IF_ERROR(s.setCapture(cs));
  return changed(reply({{"capture",
                         {{"sample", cs.sample},
                          {"flag_errors", cs.flag_errors},
                          {"flag_slower_ms", cs.flag_slower_ms},
                          {"flag_contains", cs.flag_contains}}}}),
                 "capture.set", cs.target);
}

Result<AdminReply> opDeleteCapture(RegistryStore& s, const AdminCall& c, ApiShared&) {
  INFERA_RETURN_IF_ERROR(s.deleteCapture(target(c)));
  return changed(reply(Json::object()), "capture.delete", target(c));
}

Result<AdminReply> opOptOuts(RegistryStore& s, const AdminCall&, ApiShared&) {
  INFERA_ASSIGN_OR_RETURN(const auto keys, s.optOutKeys());
  return reply({{"keys", keys}});
}

Result<AdminReply> opSetOptOut(RegistryStore& s, const AdminCall& c, ApiShared&) {
  const bool out = c.method != "DELETE";
  INFERA_RETURN_IF_ERROR(s.setOptOut(c.param("key"), out));
  return changed(reply({{"key", c.param("key")}, {"opted_out", out}}),
                 out ? "optout.set" : "optout.delete", c.param("key"));
}

ReviewQuery reviewQuery(const AdminCall& c) {
  ReviewQuery q;
  q.model = c.q("model");
  if (!c.q("version").empty()) q.target = q.model + "/" + c.q("version");
  q.state = c.q("state");
  q.after = c.q("after");
  if (!c.q("limit").empty()) q.limit = std::clamp(std::atoi(c.q("limit").c_str()), 1, 1000);
  return q;
}

Result<AdminReply> opReviews(RegistryStore& s, const AdminCall& c, ApiShared&) {
  const ReviewQuery q = reviewQuery(c);
  if (!q.state.empty() && q.state != "pending" && q.state != "reviewed" && q.state != "flagged" &&
      q.state != "captured") {
    return Status::invalidArgument("state: pending, reviewed, flagged or captured");
  }
  INFERA_ASSIGN_OR_RETURN(const auto items, s.reviews(q));
  Json a = Json::array();
  for (const auto& it : items) a.push_back(reviewJson(it, true));
  Json j = {{"reviews", a}};
  if (static_cast<int>(items.size()) == q.limit && !items.empty())
    j["next"] = items.back().request_id;
  return reply(j);
}

Result<AdminReply> opReview(RegistryStore& s, const AdminCall& c, ApiShared&) {
  INFERA_ASSIGN_OR_RETURN(const auto item, s.reviewItem(c.param("id")));
  if (!item)
    return Status::notFound("no captured or flagged inference with request id " + c.param("id"));
  return reply({{"review", reviewJson(*item, true)}});
}

Result<AdminReply> opAnswerReview(RegistryStore& s, const AdminCall& c, ApiShared& sh) {
  if (sh.flush_records) INFERA_RETURN_IF_ERROR(sh.flush_records());
  INFERA_ASSIGN_OR_RETURN(const std::string verdict, bodyString(c, "verdict", true));
  INFERA_ASSIGN_OR_RETURN(const std::string label, bodyString(c, "label", false));
  INFERA_ASSIGN_OR_RETURN(std::string reviewer, bodyString(c, "reviewer", false));
  INFERA_ASSIGN_OR_RETURN(const std::string note, bodyString(c, "note", false));
  if (reviewer.empty()) reviewer = c.actor;
  INFERA_RETURN_IF_ERROR(s.review(c.param("id"), verdict, label, reviewer, note));
  INFERA_ASSIGN_OR_RETURN(const auto item, s.reviewItem(c.param("id")));
  AdminReply r = reply({{"review", reviewJson(*item, false)}});
  r.audit_action = "registry.review";
  r.audit_target = c.param("id");
  return r;
}

// The registered model a route name belongs to ("fraud/2", "fraud@champion" -> "fraud").
std::string modelOfTarget(const std::string& target) {
  return target.substr(0, target.find_first_of("/@"));
}

Result<AdminReply> opFlag(RegistryStore& s, const AdminCall& c, ApiShared& sh) {
  INFERA_ASSIGN_OR_RETURN(const std::string id, bodyString(c, "request_id", true));
  INFERA_ASSIGN_OR_RETURN(const std::string reason, bodyString(c, "reason", false));
  INFERA_ASSIGN_OR_RETURN(const std::string model, bodyString(c, "model", false));
  INFERA_ASSIGN_OR_RETURN(const std::string tgt, bodyString(c, "target", false));
  if (reason.size() > kMaxFlagReasonBytes) {
    return Status::invalidArgument("reason: at most " + std::to_string(kMaxFlagReasonBytes) +
                                   " bytes, got " + std::to_string(reason.size()));
  }
  const std::vector<std::pair<std::string, const std::string*>> names = {
      {"request_id", &id}, {"model", &model}, {"target", &tgt}};
  for (const auto& [field, value] : names) {
    if (value->size() > kMaxFlagNameBytes) {
      return Status::invalidArgument(field + ": at most " + std::to_string(kMaxFlagNameBytes) +
                                     " bytes");
    }
  }
  if (!model.empty() && !tgt.empty() && modelOfTarget(tgt) != model)
    return Status::invalidArgument("target: '" + tgt + "' is not a route of model " + model);
  if (sh.flush_records) INFERA_RETURN_IF_ERROR(sh.flush_records());
  if (c.visible) {
    // A key files flags only into the queues of models it may use: the captured inference's model
    // when there is one (the store keeps it), and every model the flag names.
    INFERA_ASSIGN_OR_RETURN(const auto item, s.reviewItem(id));
    if (item && !item->model.empty() && !c.visible(item->model)) {
      return Status::notFound("no captured or flagged inference with request id " + id +
                              " of a model this key may use");
    }
    if ((!item || item->model.empty()) && model.empty() && tgt.empty()) {
      return Status::invalidArgument("model: required (the inference " + id +
                                     " was not captured; name the registered model it belongs to)");
    }
    for (const std::string& m : {model, modelOfTarget(tgt)}) {
      if (!m.empty() && !c.visible(m))
        return Status::notFound("Registered Model with name=" + m + " not found");
    }
  }
  INFERA_RETURN_IF_ERROR(s.flag(id, reason.empty() ? "flagged" : reason, c.actor, model, tgt));
  return reply({{"request_id", id}, {"flagged", true}});
}

Result<AdminReply> opRoutes(RegistryStore&, const AdminCall&, ApiShared& sh) {
  AdminReply r;
  r.body = "{\"routes\":" + sh.routes_json() + "}";
  return r;
}

Result<AdminReply> opArtifactList(RegistryStore& s, const AdminCall& c, ApiShared&) {
  INFERA_ASSIGN_OR_RETURN(const int64_t v, parseVersion(c.param("version")));
  INFERA_ASSIGN_OR_RETURN(const auto files, s.artifacts(c.param("name"), v));
  Json a = Json::array();
  for (const auto& f : files)
    a.push_back(
        {{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}, {"created_ms", f.created_ms}});
  return reply({{"artifacts", a}});
}

}  // namespace

// ---------------- callers ----------------

struct Api::Caller {
  bool admin = false;
  std::optional<access::Denial> denied;
  access::Grant grant;
  std::string actor;
};

Api::Api(ApiShared& shared, net::asio::io_context& ctx, access::AccessWorker* access,
         bool admin_port)
    : shared_(shared), ctx_(ctx), access_(access), admin_port_(admin_port) {}

Api::Caller Api::caller(const net::HttpRequest& req) const {
  Caller c;
  const std::string_view actor = req.header("x-infera-actor");
  if (admin_port_ || !shared_.access) {
    // The admin port's guard checked the token already; without access control every caller may
    // read and write (keep the data port on a trusted network).
    c.admin = true;
    c.actor = actor.empty() ? "admin" : std::string(actor);
    return c;
  }
  std::string authorization(req.header("authorization"));
  // MLflow clients send MLFLOW_TRACKING_USERNAME/PASSWORD as Basic auth: the password is the token.
  if (authorization.size() > 6 &&
      (authorization.starts_with("Basic ") || authorization.starts_with("basic "))) {
    std::string creds;
    if (base64Decode(authorization.substr(6), creds)) {
      const size_t colon = creds.find(':');
      authorization = "Bearer " + (colon == std::string::npos ? creds : creds.substr(colon + 1));
    }
  }
  if (!shared_.access->refuseAdmin(authorization)) {
    c.admin = true;
    c.actor = actor.empty() ? "admin" : std::string(actor);
    return c;
  }
  if (!access_) {
    c.denied = access::Denial{401, "the registry needs a key or the admin token",
                              "invalid_request_error", "missing_api_key"};
    return c;
  }
  c.denied = access_->authenticate(authorization, req.header(access_->userHeader()), c.grant);
  if (!c.denied) {
    const access::Principal p = c.grant.principal();
    c.actor = p.key_id.empty() ? "team:" + std::string(p.team) : "key:" + std::string(p.key_id);
  }
  return c;
}

// ---------------- MLflow REST ----------------

Task<void> Api::mlflow(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p) {
  Caller c = caller(req);
  if (c.denied) {
    const bool unauth = c.denied->status == 401;
    const std::string body = mlflowError(unauth ? "UNAUTHENTICATED" : "PERMISSION_DENIED",
                                         c.denied->status, c.denied->message)
                                 .body;
    shared_.metrics.requests->counter({"mlflow", classOf(c.denied->status)})->inc(0);
    co_await sendJson(w, c.denied->status, body);
    co_return;
  }
  MlflowRequest mr;
  mr.method = req.method;
  mr.endpoint = std::string(p["rest"]);
  mr.query = queryOf(req);
  mr.body = req.body;
  mr.content_type = std::string(req.header("content-type"));
  mr.actor = c.actor;
  bool write = false;
  for (const auto& e : mlflowEndpoints()) {
    if (mr.endpoint == e.path && mr.method == e.method) write = e.write;
  }
  if (write && !c.admin) {
    const std::string body =
        mlflowError("PERMISSION_DENIED", 403,
                    "registry writes need the admin token (MLFLOW_TRACKING_TOKEN)")
            .body;
    co_await sendJson(w, 403, body);
    co_return;
  }
  if (!c.admin && access_) {
    // checkAccess reads only the grant and the immutable key snapshot it holds: safe from the
    // worker while this request waits for it.
    access::AccessWorker* aw = access_;
    const access::Grant* g = &c.grant;
    mr.visible = [aw, g](const std::string& name) {
      return !aw->checkAccess(*g, access::ResourceKind::kRegisteredModel, name, name);
    };
  }
  ApiShared* sh = &shared_;
  const PoolJob<MlflowReply> job = [sh,
                                    mr = std::move(mr)](RegistryStore& s) -> Result<MlflowReply> {
    MlflowReply reply = handleMlflow(s, mr);
    if (reply.status == 200 && reply.changed) {
      for (const auto& [name, version] : reply.removed_versions)
        (void)sh->files.remove(name, version);
      sh->after_write(s);
      if (sh->access && !reply.audit_action.empty()) {
        (void)sh->access->audit(mr.actor, reply.audit_action, reply.audit_target,
                                reply.audit_detail);
      }
    }
    return reply;
  };
  auto r = co_await runOnPool<MlflowReply>(ctx_, shared_.pool, job);
  const MlflowReply out = r.ok() ? std::move(*r) : mlflowError(r.status());
  shared_.metrics.requests->counter({"mlflow", classOf(out.status)})->inc(0);
  co_await sendJson(w, out.status, out.body);
}

// /api/2.0/mlflow-artifacts/artifacts/registry/<name>/<version>/<path>: MLflow's artifact proxy
// for the registry's own files (get-download-uri answers mlflow-artifacts:/registry/...).
Task<void> Api::mlflowArtifacts(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p) {
  Caller c = caller(req);
  if (c.denied) {
    const std::string body =
        mlflowError(c.denied->status == 401 ? "UNAUTHENTICATED" : "PERMISSION_DENIED",
                    c.denied->status, c.denied->message)
            .body;
    co_await sendJson(w, c.denied->status, body);
    co_return;
  }
  std::string rest(p["rest"]);
  if (rest.empty()) {
    // A listing: ?path=registry/<name>/<version>
    rest = firstQuery(req, "path");
  }
  std::vector<std::string> seg;
  for (size_t i = 0; i <= rest.size();) {
    size_t j = rest.find('/', i);
    if (j == std::string::npos) j = rest.size();
    seg.push_back(decoded(rest.substr(i, j - i)));
    i = j + 1;
  }
  const bool listing = p["rest"].empty();
  if (seg.size() < (listing ? 3u : 4u) || seg[0] != "registry") {
    const std::string body =
        mlflowError("RESOURCE_DOES_NOT_EXIST", 404,
                    "Infera serves artifacts under registry/<model>/<version>/")
            .body;
    co_await sendJson(w, 404, body);
    co_return;
  }
  const std::string name = seg[1];
  auto version = parseVersion(seg[2]);
  if (!version.ok()) {
    const std::string body = mlflowError(version.status()).body;
    co_await sendJson(w, 400, body);
    co_return;
  }
  if (!c.admin && access_ &&
      access_->checkAccess(c.grant, access::ResourceKind::kRegisteredModel, name, name)) {
    const std::string body =
        mlflowError(Status::notFound("Registered Model with name=" + name + " not found")).body;
    co_await sendJson(w, 404, body);
    co_return;
  }
  if (listing) {
    const PoolJob<std::vector<RegistryStore::Artifact>> job =
        [name, v = *version](RegistryStore& s) { return s.artifacts(name, v); };
    auto files = co_await runOnPool<std::vector<RegistryStore::Artifact>>(ctx_, shared_.pool, job);
    if (!files.ok()) {
      const std::string body = mlflowError(files.status()).body;
      co_await sendJson(w, mlflowStatus(files.status()), body);
      co_return;
    }
    Json a = Json::array();
    for (const auto& f : *files)
      a.push_back({{"path", f.path}, {"is_dir", false}, {"file_size", f.size}});
    Json j = Json::object();
    if (!a.empty()) j["files"] = a;
    const std::string body = dumpJson(j);
    co_await sendJson(w, 200, body);
    co_return;
  }
  std::string path;
  for (size_t i = 3; i < seg.size(); ++i) path += (i > 3 ? "/" : "") + seg[i];
  if (req.method == "PUT") {
    if (!c.admin) {
      const std::string body =
          mlflowError("PERMISSION_DENIED", 403, "registry writes need the admin token").body;
      co_await sendJson(w, 403, body);
      co_return;
    }
    co_await upload(req, w, c, name, *version, path, true);
  } else {
    co_await download(req, w, name, *version, path, true);
  }
}

Task<void> Api::adminArtifacts(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p) {
  const Caller c = caller(req);
  const std::string name = decoded(p["name"]);
  auto version = parseVersion(decoded(p["version"]));
  if (!version.ok()) {
    const std::string body = adminError(version.status());
    co_await sendJson(w, 400, body);
    co_return;
  }
  std::string path;
  const std::string_view raw = p["path"];
  for (size_t i = 0; i <= raw.size();) {
    size_t j = raw.find('/', i);
    if (j == std::string_view::npos) j = raw.size();
    path += (i > 0 ? "/" : "") + decoded(raw.substr(i, j - i));
    i = j + 1;
  }
  if (req.method == "PUT") {
    co_await upload(req, w, c, name, *version, path, false);
  } else {
    co_await download(req, w, name, *version, path, false);
  }
}

Task<void> Api::upload(net::HttpRequest& req, net::ResponseWriter& w, const Caller& c,
                       std::string name, int64_t version, std::string path, bool mlflow_errors) {
  auto fail = [&](const Status& s) -> Task<void> {
    const std::string body = mlflow_errors ? mlflowError(s).body : adminError(s);
    co_await sendJson(w, mlflow_errors ? mlflowStatus(s) : adminStatus(s), body);
  };
  INFERA_CHECK(req.body_reader != nullptr, "artifact uploads are streamed routes");
  net::BodyReader& body = *req.body_reader;
  const int64_t limit = shared_.config.max_artifact_bytes;
  ArtifactFiles* files = &shared_.files;
  using UploadRef = std::shared_ptr<ArtifactFiles::Upload>;
  const PoolJob<UploadRef> begin_job = [files, name, version,
                                        path](RegistryStore& s) -> Result<UploadRef> {
    INFERA_RETURN_IF_ERROR(s.getVersion(name, version).takeStatus());
    INFERA_ASSIGN_OR_RETURN(auto up, files->begin(name, version, path));
    return UploadRef(up.release(), ArtifactFiles::UploadDeleter{});
  };
  auto began = co_await runOnPool<UploadRef>(ctx_, shared_.pool, begin_job);
  if (!began.ok()) {
    co_await fail(began.status());
    co_return;
  }
  UploadRef up = *began;
  std::string chunk;
  chunk.reserve(kUploadChunk);

  for (;;) {
    auto piece = co_await body.read();
    if (!piece.ok()) {
      co_await fail(piece.status());
      co_return;
    }
    shared_.metrics.artifact_bytes_in->inc(0, static_cast<double>(piece->size()));
    chunk.append(*piece);
    if (chunk.size() >= kUploadChunk || (piece->empty() && !chunk.empty())) {
      // The chunk goes to the worker by pointer: this coroutine waits for it, so it stays put.
      const std::string* data = &chunk;
      const PoolJob<bool> write_job = [files, up, data, limit](RegistryStore&) -> Result<bool> {
        INFERA_RETURN_IF_ERROR(files->append(*up, *data, limit));
        return true;
      };
      auto wrote = co_await runOnPool<bool>(ctx_, shared_.pool, write_job);
      chunk.clear();
      if (!wrote.ok()) {
        co_await fail(wrote.status());
        co_return;
      }
    }
    if (piece->empty()) break;
  }
  ApiShared* sh = &shared_;
  const std::string actor = c.actor;
  const PoolJob<ArtifactFiles::Committed> commit_job =
      [sh, files, up, name, version, path,
       actor](RegistryStore& s) -> Result<ArtifactFiles::Committed> {
    INFERA_ASSIGN_OR_RETURN(ArtifactFiles::Committed cm, files->commit(*up));
    const std::string location =
        "mlflow-artifacts:/registry/" + encodeSegment(name) + "/" + std::to_string(version);
    INFERA_RETURN_IF_ERROR(s.recordArtifact(name, version, path, cm.size, cm.sha256, location));
    if (sh->access) {
      const Json detail = {{"path", path}, {"size", cm.size}, {"sha256", cm.sha256}};
      (void)sh->access->audit(actor, "registry.artifact.upload",
                              name + "/" + std::to_string(version), dumpJson(detail));
    }
    return cm;
  };
  auto done = co_await runOnPool<ArtifactFiles::Committed>(ctx_, shared_.pool, commit_job);
  if (!done.ok()) {
    co_await fail(done.status());
    co_return;
  }
  const std::string answer =
      dumpJson(Json{{"path", path}, {"size", done->size}, {"sha256", done->sha256}});
  co_await sendJson(w, 200, answer);
}

Task<void> Api::download(net::HttpRequest& req, net::ResponseWriter& w, std::string name,
                         int64_t version, std::string path, bool mlflow_errors) {
  (void)req;
  auto fail = [&](const Status& s) -> Task<void> {
    const std::string body = mlflow_errors ? mlflowError(s).body : adminError(s);
    co_await sendJson(w, mlflow_errors ? mlflowStatus(s) : adminStatus(s), body);
  };
  ArtifactFiles* files = &shared_.files;
  struct Opened {
    std::shared_ptr<ArtifactFiles::Reader> reader;
    std::string sha256;
  };
  const PoolJob<Opened> open_job = [files, name, version,
                                    path](RegistryStore& s) -> Result<Opened> {
    INFERA_ASSIGN_OR_RETURN(const auto meta, s.artifact(name, version, path));
    if (!meta) {
      return Status::notFound("artifact " + path + " of " + name + "/" + std::to_string(version) +
                              " not found");
    }
    INFERA_ASSIGN_OR_RETURN(auto r, files->open(name, version, path));
    return Opened{std::shared_ptr<ArtifactFiles::Reader>(std::move(r)), meta->sha256};
  };
  auto opened = co_await runOnPool<Opened>(ctx_, shared_.pool, open_job);
  if (!opened.ok()) {
    co_await fail(opened.status());
    co_return;
  }
  const auto reader = opened->reader;
  const std::vector<net::HttpHeader> headers = {{"x-infera-sha256", opened->sha256},
                                                {"etag", "\"" + opened->sha256 + "\""}};
  if (!co_await w.start(200, "application/octet-stream", headers, reader->size)) co_return;
  int64_t offset = 0;
  while (offset < reader->size) {
    const PoolJob<std::string> read_job = [files, reader, offset](RegistryStore&) {
      return files->read(*reader, offset, kDownloadChunk);
    };
    auto piece = co_await runOnPool<std::string>(ctx_, shared_.pool, read_job);
    if (!piece.ok() || piece->empty()) {
      // Headers are out: all that is left is to cut the response short.
      w.closeAfterResponse();
      co_return;
    }
    offset += static_cast<int64_t>(piece->size());
    shared_.metrics.artifact_bytes_out->inc(0, static_cast<double>(piece->size()));
    if (!co_await w.writeChunk(*piece)) co_return;
  }
  co_await w.finish();
}

// POST /api/2.0/infera/flags: a client flags an inference (by its x-request-id) for review.
Task<void> Api::flag(net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) {
  Caller c = caller(req);
  if (c.denied) {
    const std::string body = access::denialJson(*c.denied);
    co_await sendJson(w, c.denied->status, body);
    co_return;
  }
  AdminCall call;
  call.method = req.method;
  if (auto body = readRequestJson(req.body); body.ok()) {
    call.body = std::move(*body);
  } else {
    const std::string answer = adminError(body.status());
    co_await sendJson(w, adminStatus(body.status()), answer);
    co_return;
  }
  call.actor = c.actor;
  if (!c.admin && access_) {
    // As for the MLflow routes: checkAccess reads only the grant and the key snapshot it holds.
    access::AccessWorker* aw = access_;
    const access::Grant* g = &c.grant;
    call.visible = [aw, g](const std::string& name) {
      return !aw->checkAccess(*g, access::ResourceKind::kRegisteredModel, name, name);
    };
  }
  ApiShared* sh = &shared_;
  const PoolJob<AdminReply> job = [sh, call](RegistryStore& s) { return opFlag(s, call, *sh); };
  auto r = co_await runOnPool<AdminReply>(ctx_, shared_.pool, job);
  if (!r.ok()) {
    const std::string body = adminError(r.status());
    co_await sendJson(w, adminStatus(r.status()), body);
    co_return;
  }
  co_await sendJson(w, 200, r->body);
}

void Api::addDataRoutes(net::Router& router) {
  auto mlflowRoute = [this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p) {
    return mlflow(req, w, p);
  };
  router.add("*", "/api/2.0/mlflow/{rest...}", mlflowRoute);
  router.add("*", "/ajax-api/2.0/mlflow/{rest...}", mlflowRoute);
  auto artifacts = [this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p) {
    return mlflowArtifacts(req, w, p);
  };
  router.add("GET", "/api/2.0/mlflow-artifacts/artifacts", artifacts);
  router.add("GET", "/api/2.0/mlflow-artifacts/artifacts/{rest...}", artifacts);
  router.addStreamed("PUT", "/api/2.0/mlflow-artifacts/artifacts/{rest...}", artifacts,
                     static_cast<uint64_t>(shared_.config.max_artifact_bytes));
  router.add("POST", "/api/2.0/infera/flags",
             [this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p) {
               return flag(req, w, p);
             });
  auto notFound = [](net::HttpRequest& req, net::ResponseWriter& w, int status,
                     std::string_view allow) -> Task<void> {
    const std::string body =
        status == 405
            ? mlflowError("BAD_REQUEST", 405,
                          "method not allowed (allowed: " + std::string(allow) + ")")
                  .body
            : mlflowError("ENDPOINT_NOT_FOUND", 404, "no endpoint " + std::string(req.path())).body;
    co_await sendJson(w, status, body);
  };
  router.setFallback("/api/2.0/mlflow", notFound);
  router.setFallback("/ajax-api/2.0/mlflow", notFound);
  // /api/2.0/infera (flags) keeps the default shape, which is its own ({"error":{...}}).
  for (const char* prefix :
       {"/api/2.0/mlflow", "/ajax-api/2.0/mlflow", "/api/2.0/mlflow-artifacts"})
    router.setErrorShape(prefix, mlflowShape);
  if (access_ && shared_.access) {
    // A client waiting for 100 Continue before an upload learns of a bad key first.
    access::Access* acc = shared_.access;
    access::AccessWorker* aw = access_;
    router.setBeforeBody(
        "/api/2.0/mlflow-artifacts/",
        [acc, aw](const net::HttpRequest& head) -> std::optional<net::EarlyAnswer> {
          if (!acc->refuseAdmin(head.header("authorization"))) return std::nullopt;
          return net::EarlyAnswer{
              403, "application/json",
              mlflowError("PERMISSION_DENIED", 403, "registry writes need the admin token").body};
        });
    (void)aw;
  }
}

void Api::addAdminRoutes(net::Router& r, const net::RouteGuard& guard) {
  // /admin/registry answers in the admin API's shape, which is the floor's default.
  r.setErrorShape("/api/2.0/mlflow", mlflowShape);
  r.add("*", "/api/2.0/mlflow/{rest...}",
        guard([this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p) {
          return mlflow(req, w, p);
        }));
  auto artifacts = guard([this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams p) {
    return adminArtifacts(req, w, p);
  });
  r.add("GET", "/admin/registry/models/{name}/versions/{version}/artifacts/{path...}", artifacts);
  r.addStreamed("PUT", "/admin/registry/models/{name}/versions/{version}/artifacts/{path...}",
                artifacts, static_cast<uint64_t>(shared_.config.max_artifact_bytes));
  auto op = [this, &guard](AdminOp fn) {
    return guard([this, fn = std::move(fn)](net::HttpRequest& req, net::ResponseWriter& w,
                                            net::PathParams p) -> Task<void> {
      AdminCall call;
      call.method = req.method;
      for (const char* k : {"name", "alias", "ref", "version", "key", "id"}) {
        if (!p[k].empty()) call.params[k] = decoded(p[k]);
      }
      call.query = queryOf(req);
      if (auto body = readRequestJson(req.body); body.ok()) {
        call.body = std::move(*body);
      } else {
        const std::string answer = adminError(body.status());
        shared_.metrics.requests->counter({"admin", classOf(adminStatus(body.status()))})->inc(0);
        co_await sendJson(w, adminStatus(body.status()), answer);
        co_return;
      }
      const std::string_view actor = req.header("x-infera-actor");
      call.actor = actor.empty() ? "admin" : std::string(actor);
      ApiShared* sh = &shared_;
      const PoolJob<AdminReply> job = [sh, fn, call](RegistryStore& s) -> Result<AdminReply> {
        auto out = fn(s, call, *sh);
        if (out.ok() && out->changed) sh->after_write(s);
        if (out.ok() && sh->access && !out->audit_action.empty()) {
          (void)sh->access->audit(call.actor, out->audit_action, out->audit_target,
                                  dumpJson(call.body));
        }
        return out;
      };
      auto res = co_await runOnPool<AdminReply>(ctx_, shared_.pool, job);
      const int status = res.ok() ? res->status : adminStatus(res.status());
      shared_.metrics.requests->counter({"admin", classOf(status)})->inc(0);
      const std::string body = res.ok() ? res->body : adminError(res.status());
      co_await sendJson(w, status, body);
    });
  };
  const std::string m = "/admin/registry/models/{name}";
  r.add("POST", m + "/aliases/{alias}", op(opSetAlias));
  r.add("DELETE", m + "/aliases/{alias}", op(opDeleteAlias));
  r.add("POST", m + "/aliases/{alias}/rollback", op(opRollback));
  r.add("GET", m + "/history", op(opHistory));
  r.add("GET", m + "/bindings", op(opBindings));
  r.add("PUT", m + "/bindings/{ref}", op(opSetBinding));
  r.add("DELETE", m + "/bindings/{ref}", op(opDeleteBinding));
  r.add("GET", m + "/experiment", op(opGetExperiment));
  r.add("PUT", m + "/experiment", op(opSetExperiment));
  r.add("PATCH", m + "/experiment", op(opPatchExperiment));
  r.add("DELETE", m + "/experiment", op(opDeleteExperiment));
  r.add("GET", m + "/shadow", op(opShadow));
  r.add("GET", m + "/versions/{version}/artifacts", op(opArtifactList));
  r.add("GET", m + "/versions/{version}/capture", op(opGetCapture));
  r.add("PUT", m + "/versions/{version}/capture", op(opSetCapture));
  r.add("DELETE", m + "/versions/{version}/capture", op(opDeleteCapture));
  r.add("GET", "/admin/registry/opt-outs", op(opOptOuts));
  r.add("PUT", "/admin/registry/opt-outs/{key}", op(opSetOptOut));
  r.add("DELETE", "/admin/registry/opt-outs/{key}", op(opSetOptOut));
  r.add("GET", "/admin/registry/reviews", op(opReviews));
  r.add("GET", "/admin/registry/reviews/{id}", op(opReview));
  r.add("POST", "/admin/registry/reviews/{id}", op(opAnswerReview));
  r.add("POST", "/admin/registry/flags", op(opFlag));
  r.add("GET", "/admin/registry/routes", op(opRoutes));
  // JSON lines of reviewed cases, streamed a page at a time.
  r.add("GET", "/admin/registry/reviews/export",
        guard([this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) -> Task<void> {
          AdminCall call;
          call.query = queryOf(req);
          ReviewQuery q = reviewQuery(call);
          if (q.state.empty()) q.state = "reviewed";
          q.limit = 500;
          bool started = false;
          for (;;) {
            const PoolJob<std::vector<ReviewItem>> job = [q](RegistryStore& s) {
              return s.reviews(q);
            };
            auto page = co_await runOnPool<std::vector<ReviewItem>>(ctx_, shared_.pool, job);
            if (!page.ok()) {
              const std::string body = adminError(page.status());
              if (!started) co_await sendJson(w, adminStatus(page.status()), body);
              if (started) w.closeAfterResponse();
              co_return;
            }
            if (!started) {
              if (!co_await w.start(200, "application/x-ndjson")) co_return;
              started = true;
            }
            std::string lines;
            for (const auto& it : *page) {
              Json j = {{"request_id", it.request_id},
                        {"model", it.model},
                        {"target", it.target},
                        {"arm", it.arm},
                        {"ts_ms", it.ts_ms},
                        {"request", maybeJson(it.request)},
                        {"response", maybeJson(it.response)},
                        {"reason", it.reason},
                        {"verdict", it.verdict},
                        {"label", it.label},
                        {"reviewer", it.reviewer},
                        {"note", it.note}};
              lines += dumpJson(j);
              lines += '\n';
            }
            if (!lines.empty() && !co_await w.writeChunk(lines)) co_return;
            if (static_cast<int>(page->size()) < q.limit) break;
            q.after = page->back().request_id;
          }
          co_await w.finish();
        }));
}

}  // namespace infera::registry
