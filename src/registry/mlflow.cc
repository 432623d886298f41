#include "registry/internal/mlflow.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/text.h"
#include "core/utf8.h"
#include "registry/internal/search.h"

namespace infera::registry {

using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;

namespace {

constexpr int64_t kModelSearchMax = 1000;
constexpr int64_t kVersionSearchMax = 200000;

std::string pythonType(const Json& v) {
  if (v.is_string()) return "str";
  if (v.is_boolean()) return "bool";
  if (v.is_number_integer()) return "int";
  if (v.is_number()) return "float";
  if (v.is_array()) return "list";
  if (v.is_object()) return "dict";
  return "NoneType";
}

// json.dumps as Python writes it (", " and ": " separators).
std::string pythonDumps(const Json& v) {
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + pythonDumps(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (first ? "" : ", ") + dumpJson(Json(it.key())) + ": " + pythonDumps(it.value());
      first = false;
    }
    return out + "}";
  }
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "null";
  return dumpJson(v);
}

Status typeError(const std::string& field, const Json& v) {
  return Status::invalidArgument(
      "Invalid value " + pythonDumps(v) + " for parameter '" + field +
      "' supplied:  Hint: Value was of type '" + pythonType(v) +
      "'. See the API docs for more information about request parameters.");
}

Status missing(const std::string& field) {
  return Status::invalidArgument(
      "Missing value for required parameter '" + field +
      "'. See the API docs for more information about request parameters.");
}

std::string numberText(const Json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  const double d = v.get<double>();
  if (std::floor(d) == d && std::fabs(d) < 1e15) return std::to_string(static_cast<int64_t>(d));
  return dumpJson(v);
}

Result<Json> readBody(std::string_view text) {
  Result<Json> j = readJson(text);
  if (!j.ok() && j.status().code() == StatusCode::kInvalidArgument)
    return Status::invalidArgument("Malformed request body: " + j.status().message());
  return j;
}

// A request's parameters: the query string for GET (unless it has none and a JSON body is
// present), else the JSON body.
class Params {
 public:
  // The body goes through the shared reader (size, depth, UTF-8, duplicate keys). MLflow reads a
  // body that is not JSON as {} (flask's get_json(silent=True)) and then names the first missing
  // parameter; every endpoint taking a body has a required one, so answering the reader's 400
  // INVALID_PARAMETER_VALUE instead changes only the message, and says what is wrong.
  static Result<Params> read(const MlflowRequest& r) {
    Params p;
    p.from_query_ = r.method == "GET" && (!r.query.empty() || r.body.empty());
    p.query_ = r.query;
    if (!p.from_query_ && !r.body.empty()) {
      INFERA_ASSIGN_OR_RETURN(Json j, readBody(r.body));
      // A JSON string holding JSON (an old client's double encoding) is read once more.
      if (j.is_string()) {
        const std::string inner = j.get<std::string>();
        INFERA_ASSIGN_OR_RETURN(j, readBody(inner));
      }
      // Any other value (an array, a number) has none of the parameters, as in MLflow.
      if (j.is_object()) p.body_ = std::move(j);
    }
    return p;
  }

  bool fromQuery() const { return from_query_; }

  Result<std::optional<std::string>> str(const std::string& field) const {
    if (from_query_) {
      auto v = queryValues(query_, field);
      if (v.empty()) return std::optional<std::string>();
      return std::optional<std::string>(v.front());
    }
    if (!body_.contains(field) || body_[field].is_null()) return std::optional<std::string>();
    const Json& v = body_[field];
    if (v.is_string()) return std::optional<std::string>(v.get<std::string>());
    // Lenient: a number where a string is expected (a version sent as 1) is its text.
    if (v.is_number()) return std::optional<std::string>(numberText(v));
    return typeError(field, v);
  }

  Result<std::string> required(const std::string& field) const {
    INFERA_ASSIGN_OR_RETURN(std::optional<std::string> v, str(field));
    if (!v || v->empty()) return missing(field);
    return *v;
  }

  Result<std::vector<std::string>> list(const std::string& field) const {
    if (from_query_) return queryValues(query_, field);
    std::vector<std::string> out;
    if (!body_.contains(field) || body_[field].is_null()) return out;
    const Json& v = body_[field];
    if (!v.is_array()) return typeError(field, v);
    for (const auto& e : v) {
      if (e.is_string()) {
        out.push_back(e.get<std::string>());
      } else {
        return typeError(field, v);
      }
    }
    return out;
  }

  Result<std::optional<int64_t>> int64(const std::string& field) const {
    if (from_query_) {
      auto v = queryValues(query_, field);
      if (v.empty()) return std::optional<int64_t>();
      const std::string& s = v.front();
      const bool digits = !s.empty() && s.size() <= 18 &&
                          std::all_of(s.begin() + (s[0] == '-' ? 1 : 0), s.end(),
                                      [](char c) { return c >= '0' && c <= '9'; }) &&
                          s != "-";
      if (!digits) return typeError(field, Json(s));
      return std::optional<int64_t>(std::stoll(s));
    }
    if (!body_.contains(field) || body_[field].is_null()) return std::optional<int64_t>();
    const Json& v = body_[field];
    if (v.is_number_integer()) return std::optional<int64_t>(v.get<int64_t>());
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (!s.empty() && s.size() <= 18 &&
          std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return std::optional<int64_t>(std::stoll(s));
      }
    }
    return typeError(field, v);
  }

  Result<bool> boolean(const std::string& field) const {
    if (from_query_) {
      auto v = queryValues(query_, field);
      if (v.empty()) return false;
      if (v.front() == "true" || v.front() == "True") return true;
      if (v.front() == "false" || v.front() == "False") return false;
      return typeError(field, Json(v.front()));
    }
    if (!body_.contains(field) || body_[field].is_null()) return false;
    if (!body_[field].is_boolean()) return typeError(field, body_[field]);
    return body_[field].get<bool>();
  }

  Result<std::vector<Tag>> tags() const {
    std::vector<Tag> out;
    if (from_query_ || !body_.contains("tags") || body_["tags"].is_null()) return out;
    const Json& v = body_["tags"];
    if (!v.is_array()) return typeError("tags", v);
    for (const auto& t : v) {
      if (!t.is_object()) return typeError("tags", v);
      Tag tag;
      if (t.contains("key") && t["key"].is_string()) tag.key = t["key"].get<std::string>();
      if (t.contains("value")) {
        if (t["value"].is_string()) {
          tag.value = t["value"].get<std::string>();
        } else if (t["value"].is_number()) {
          tag.value = numberText(t["value"]);
        } else if (!t["value"].is_null()) {
          return typeError("tags", v);
        }
      }
      if (tag.key.empty()) return missing("key");
      out.push_back(std::move(tag));
    }
    return out;
  }

  std::string detail() const {
    if (!from_query_) return dumpJson(body_);
    Json j = Json::object();
    j["query"] = query_;
    return dumpJson(j);
  }

 private:
  Params() = default;
  bool from_query_ = false;
  std::string query_;
  Json body_ = Json::object();
};

OJson tagsJson(const std::vector<Tag>& tags) {
  OJson a = OJson::array();
  for (const auto& t : tags) a.push_back(OJson{{"key", t.key}, {"value", t.value}});
  return a;
}

OJson versionObject(const ModelVersion& v) {
  OJson j;
  j["name"] = v.name;
  j["version"] = std::to_string(v.version);
  j["creation_timestamp"] = v.created_ms;
  j["last_updated_timestamp"] = v.updated_ms;
  j["current_stage"] = v.stage;
  if (v.description) j["description"] = *v.description;
  j["source"] = v.source;
  if (v.run_id) j["run_id"] = *v.run_id;
  j["status"] = v.status;  // always: a client without it polls for five minutes
  if (!v.status_message.empty()) j["status_message"] = v.status_message;
  if (!v.tags.empty()) j["tags"] = tagsJson(v.tags);
  if (v.run_link) j["run_link"] = *v.run_link;
  if (!v.aliases.empty()) j["aliases"] = v.aliases;
  if (!v.model_id.empty()) j["model_id"] = v.model_id;
  return j;
}

OJson modelObject(const RegisteredModel& m) {
  OJson j;
  j["name"] = m.name;
  j["creation_timestamp"] = m.created_ms;
  if (m.updated_ms != 0) j["last_updated_timestamp"] = m.updated_ms;
  if (!m.description.empty()) j["description"] = m.description;
  if (!m.latest_versions.empty()) {
    OJson a = OJson::array();
    for (const auto& v : m.latest_versions) a.push_back(versionObject(v));
    j["latest_versions"] = a;
  }
  if (!m.tags.empty()) j["tags"] = tagsJson(m.tags);
  if (!m.aliases.empty()) {
    OJson a = OJson::array();
    for (const auto& al : m.aliases)
      a.push_back(OJson{{"alias", al.alias}, {"version", std::to_string(al.version)}});
    j["aliases"] = a;
  }
  return j;
}

MlflowReply ok(const OJson& j) {
  MlflowReply r;
  r.body = dumpJson(j);
  return r;
}

MlflowReply okEmpty() {
  MlflowReply r;
  r.body = "{}";
  return r;
}

MlflowReply written(MlflowReply r, const std::string& action, const std::string& target,
                    const Params& p) {
  r.audit_action = "registry." + action;
  r.audit_target = target;
  r.audit_detail = p.detail();
  r.changed = true;
  return r;
}

// Checks a model name for what the gateway needs to route "name@alias" and "name/3".
Status validateModelName(const std::string& name) {
  if (name.find('/') != std::string::npos || name.find('@') != std::string::npos) {
    return Status::invalidArgument(
        "Invalid registered model name '" + name +
        "': Infera serves versions as name/version and aliases as name@alias, so names "
        "may not contain '/' or '@'.");
  }
  if (name.size() > 256)
    return Status::invalidArgument("'name' exceeds the maximum length of 256 characters");
  return Status::ok();
}

#define MLFLOW_TRY(lhs, expr)                                        \
  auto INFERA_CONCAT(mlflow_r_, __LINE__) = (expr);                  \
  if (!INFERA_CONCAT(mlflow_r_, __LINE__).ok()) {                    \
    return mlflowError(INFERA_CONCAT(mlflow_r_, __LINE__).status()); \
  }                                                                  \
  lhs = std::move(INFERA_CONCAT(mlflow_r_, __LINE__)).value()

#define MLFLOW_CHECK(expr)                                                 \
  do {                                                                     \
    const ::infera::Status mlflow_s_ = ::infera::internal::asStatus(expr); \
    if (!mlflow_s_.isOk()) return mlflowError(mlflow_s_);                  \
  } while (0)

using Handler = MlflowReply (*)(RegistryStore&, const MlflowRequest&, const Params&);

bool hidden(const MlflowRequest& req, const std::string& name) {
  return req.visible && !req.visible(name);
}

Status notFoundModel(const std::string& name) {
  return Status::notFound("Registered Model with name=" + name + " not found");
}

// ---------------- registered models ----------------

MlflowReply createModel(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  MLFLOW_CHECK(validateModelName(name));
  MLFLOW_TRY(const std::optional<std::string> desc, p.str("description"));
  MLFLOW_TRY(const std::vector<Tag> tags, p.tags());
  (void)req;
  MLFLOW_TRY(const RegisteredModel m, s.createModel(name, desc.value_or(""), tags));
  return written(ok(OJson{{"registered_model", modelObject(m)}}), "model.create", name, p);
}

MlflowReply renameModel(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  MLFLOW_TRY(const std::string new_name, p.required("new_name"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_CHECK(validateModelName(new_name));
  MLFLOW_TRY(const RegisteredModel m, s.renameModel(name, new_name));
  return written(ok(OJson{{"registered_model", modelObject(m)}}), "model.rename", name, p);
}

MlflowReply updateModel(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_TRY(const std::optional<std::string> desc, p.str("description"));
  MLFLOW_TRY(const RegisteredModel m, s.updateModel(name, desc.value_or("")));
  return written(ok(OJson{{"registered_model", modelObject(m)}}), "model.update", name, p);
}

MlflowReply deleteModel(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_CHECK(s.deleteModel(name));
  MlflowReply r = written(okEmpty(), "model.delete", name, p);
  r.removed_versions.emplace_back(name, 0);
  return r;
}

MlflowReply getModel(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_TRY(const RegisteredModel m, s.getModel(name));
  return ok(OJson{{"registered_model", modelObject(m)}});
}

Result<int64_t> maxResults(const Params& p, int64_t def, int64_t max, Entity entity) {
  INFERA_ASSIGN_OR_RETURN(std::optional<int64_t> n, p.int64("max_results"));
  const int64_t v = n.value_or(def);
  if (v > max) {
    if (p.fromQuery()) {
      return Status::invalidArgument(
          "Invalid value \"" + std::to_string(v) +
          "\" for parameter 'max_results' supplied:  Hint: Value was of type 'str'. See "
          "the API docs for more information about request parameters.");
    }
    return Status::invalidArgument(
        "Invalid value for request parameter max_results. It must be at most " +
        std::to_string(max) + ", but got value " + std::to_string(v));
  }
  if (v < 1) {
    return Status::invalidArgument(
        entity == Entity::kModelVersion
            ? "Invalid value for max_results. It must be a positive integer, but got " +
                  std::to_string(v)
            : "Invalid value for request parameter max_results. It must be a positive "
              "integer, but got value " +
                  std::to_string(v));
  }
  return v;
}

MlflowReply searchModels(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::optional<std::string> filter_text, p.str("filter"));
  MLFLOW_TRY(const int64_t max, maxResults(p, 100, kModelSearchMax, Entity::kRegisteredModel));
  MLFLOW_TRY(const std::vector<std::string> order_by, p.list("order_by"));
  MLFLOW_TRY(const std::optional<std::string> token, p.str("page_token"));
  MLFLOW_TRY(const Filter filter, parseFilter(filter_text.value_or(""), Entity::kRegisteredModel));
  MLFLOW_TRY(const std::vector<OrderKey> order, parseOrderBy(order_by, Entity::kRegisteredModel));
  MLFLOW_TRY(const int64_t offset, decodePageToken(token.value_or("")));
  MLFLOW_TRY(std::vector<RegisteredModel> all, s.allModels());
  std::erase_if(
      all, [&](const RegisteredModel& m) { return !matches(filter, m) || hidden(req, m.name); });
  sortModels(all, order);
  OJson j = OJson::object();
  OJson list = OJson::array();
  const size_t begin =
      static_cast<size_t>(std::min<int64_t>(offset, static_cast<int64_t>(all.size())));
  const size_t end = std::min(all.size(), begin + static_cast<size_t>(max));
  for (size_t i = begin; i < end; ++i) list.push_back(modelObject(all[i]));
  if (!list.empty()) j["registered_models"] = list;
  if (end < all.size()) j["next_page_token"] = encodePageToken(static_cast<int64_t>(end));
  return ok(j);
}

MlflowReply latestVersions(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_TRY(const std::vector<std::string> stages, p.list("stages"));
  MLFLOW_TRY(const RegisteredModel m, s.getModel(name));  // not found: the model's error
  (void)m;
  MLFLOW_TRY(const std::vector<ModelVersion> versions, s.latestVersions(name, stages));
  OJson j = OJson::object();
  if (!versions.empty()) {
    OJson a = OJson::array();
    for (const auto& v : versions) a.push_back(versionObject(v));
    j["model_versions"] = a;
  }
  return ok(j);
}

MlflowReply setModelTag(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  MLFLOW_TRY(const std::string key, p.required("key"));
  MLFLOW_TRY(const std::optional<std::string> value, p.str("value"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_CHECK(s.setModelTag(name, key, value.value_or("")));
  return written(okEmpty(), "model.set_tag", name, p);
}

MlflowReply deleteModelTag(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  MLFLOW_TRY(const std::string key, p.required("key"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_CHECK(s.deleteModelTag(name, key));
  return written(okEmpty(), "model.delete_tag", name, p);
}

MlflowReply setAlias(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  MLFLOW_TRY(const std::string alias, p.required("alias"));
  MLFLOW_TRY(const std::string version_text, p.required("version"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_TRY(const int64_t version, parseVersion(version_text));
  MLFLOW_TRY(const AliasMove m, s.setAlias(name, alias, version, req.actor, ""));
  (void)m;
  return written(okEmpty(), "alias.set", name + "@" + alias, p);
}

MlflowReply deleteAlias(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  MLFLOW_TRY(const std::string alias, p.required("alias"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_CHECK(s.deleteAlias(name, alias, req.actor, ""));
  return written(okEmpty(), "alias.delete", name + "@" + alias, p);
}

MlflowReply getAlias(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::string name, p.required("name"));
  MLFLOW_TRY(const std::string alias, p.required("alias"));
  if (hidden(req, name)) return mlflowError(notFoundModel(name));
  MLFLOW_TRY(const ModelVersion v, s.versionByAlias(name, alias));
  return ok(OJson{{"model_version", versionObject(v)}});
}

// ---------------- model versions ----------------

MlflowReply createVersion(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  NewVersion nv;
  MLFLOW_TRY(nv.name, p.required("name"));
  MLFLOW_TRY(nv.source, p.required("source"));
  if (hidden(req, nv.name)) return mlflowError(notFoundModel(nv.name));
  MLFLOW_TRY(const std::optional<std::string> run_id, p.str("run_id"));
  MLFLOW_TRY(const std::optional<std::string> run_link, p.str("run_link"));
  MLFLOW_TRY(const std::optional<std::string> desc, p.str("description"));
  MLFLOW_TRY(const std::optional<std::string> model_id, p.str("model_id"));
  MLFLOW_TRY(nv.tags, p.tags());
  if (nv.source.find("..") != std::string::npos || nv.source.find("%00") != std::string::npos) {
    return mlflowError(
        Status::invalidArgument("Invalid model version source: '" + nv.source +
                                "'. If supplying a source as an http, https, local file path, ftp, "
                                "objectstore, or mlflow-artifacts uri, an "
                                "absolute path must be provided without relative path references "
                                "present. Please provide an absolute path."));
  }
  // The reference server stores "" for what the client did not send.
  nv.run_id = run_id.value_or("");
  nv.run_link = run_link.value_or("");
  nv.description = desc.value_or("");
  nv.model_id = model_id.value_or("");
  MLFLOW_TRY(const ModelVersion v, s.createVersion(nv));
  return written(ok(OJson{{"model_version", versionObject(v)}}), "version.create",
                 v.name + "/" + std::to_string(v.version), p);
}

struct NameVersion {
  std::string name;
  int64_t version = 0;
};

Result<NameVersion> nameVersion(const Params& p) {
  NameVersion nv;
  INFERA_ASSIGN_OR_RETURN(nv.name, p.required("name"));
  INFERA_ASSIGN_OR_RETURN(const std::string v, p.required("version"));
  INFERA_ASSIGN_OR_RETURN(nv.version, parseVersion(v));
  return nv;
}

MlflowReply getVersion(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const NameVersion nv, nameVersion(p));
  if (hidden(req, nv.name)) return mlflowError(notFoundModel(nv.name));
  MLFLOW_TRY(const ModelVersion v, s.getVersion(nv.name, nv.version));
  return ok(OJson{{"model_version", versionObject(v)}});
}

MlflowReply updateVersion(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const NameVersion nv, nameVersion(p));
  if (hidden(req, nv.name)) return mlflowError(notFoundModel(nv.name));
  MLFLOW_TRY(const std::optional<std::string> desc, p.str("description"));
  MLFLOW_TRY(const ModelVersion v, s.updateVersion(nv.name, nv.version, desc));
  return written(ok(OJson{{"model_version", versionObject(v)}}), "version.update",
                 nv.name + "/" + std::to_string(nv.version), p);
}

MlflowReply deleteVersion(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const NameVersion nv, nameVersion(p));
  if (hidden(req, nv.name)) return mlflowError(notFoundModel(nv.name));
  MLFLOW_CHECK(s.deleteVersion(nv.name, nv.version, req.actor));
  MlflowReply r =
      written(okEmpty(), "version.delete", nv.name + "/" + std::to_string(nv.version), p);
  r.removed_versions.emplace_back(nv.name, nv.version);
  return r;
}

MlflowReply searchVersions(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const std::optional<std::string> filter_text, p.str("filter"));
  MLFLOW_TRY(const int64_t max,
             maxResults(p, kVersionSearchMax, kVersionSearchMax, Entity::kModelVersion));
  MLFLOW_TRY(const std::vector<std::string> order_by, p.list("order_by"));
  MLFLOW_TRY(const std::optional<std::string> token, p.str("page_token"));
  MLFLOW_TRY(const Filter filter, parseFilter(filter_text.value_or(""), Entity::kModelVersion));
  MLFLOW_TRY(const std::vector<OrderKey> order, parseOrderBy(order_by, Entity::kModelVersion));
  MLFLOW_TRY(const int64_t offset, decodePageToken(token.value_or("")));
  MLFLOW_TRY(std::vector<ModelVersion> all, s.allVersions());
  std::erase_if(all,
                [&](const ModelVersion& v) { return !matches(filter, v) || hidden(req, v.name); });
  sortVersions(all, order);
  OJson j = OJson::object();
  OJson list = OJson::array();
  const size_t begin =
      static_cast<size_t>(std::min<int64_t>(offset, static_cast<int64_t>(all.size())));
  const size_t end = std::min(all.size(), begin + static_cast<size_t>(max));
  for (size_t i = begin; i < end; ++i) list.push_back(versionObject(all[i]));
  if (!list.empty()) j["model_versions"] = list;
  if (end < all.size()) j["next_page_token"] = encodePageToken(static_cast<int64_t>(end));
  return ok(j);
}

MlflowReply downloadUri(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  // No schema check in MLflow's handler: the store's messages.
  MLFLOW_TRY(const std::optional<std::string> name, p.str("name"));
  MLFLOW_TRY(const std::optional<std::string> version, p.str("version"));
  if (!name || name->empty())
    return mlflowError(Status::invalidArgument("Missing value for required parameter 'name'."));
  MLFLOW_TRY(const int64_t v, parseVersion(version.value_or("")));
  if (hidden(req, *name)) return mlflowError(notFoundModel(*name));
  MLFLOW_TRY(const std::string uri, s.downloadUri(*name, v));
  return ok(OJson{{"artifact_uri", uri}});
}

MlflowReply setVersionTag(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const NameVersion nv, nameVersion(p));
  MLFLOW_TRY(const std::string key, p.required("key"));
  MLFLOW_TRY(const std::optional<std::string> value, p.str("value"));
  if (hidden(req, nv.name)) return mlflowError(notFoundModel(nv.name));
  MLFLOW_CHECK(s.setVersionTag(nv.name, nv.version, key, value.value_or("")));
  return written(okEmpty(), "version.set_tag", nv.name + "/" + std::to_string(nv.version), p);
}

MlflowReply deleteVersionTag(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const NameVersion nv, nameVersion(p));
  MLFLOW_TRY(const std::string key, p.required("key"));
  if (hidden(req, nv.name)) return mlflowError(notFoundModel(nv.name));
  MLFLOW_CHECK(s.deleteVersionTag(nv.name, nv.version, key));
  return written(okEmpty(), "version.delete_tag", nv.name + "/" + std::to_string(nv.version), p);
}

MlflowReply transitionStage(RegistryStore& s, const MlflowRequest& req, const Params& p) {
  MLFLOW_TRY(const NameVersion nv, nameVersion(p));
  MLFLOW_TRY(const std::string stage, p.required("stage"));
  MLFLOW_TRY(const bool archive, p.boolean("archive_existing_versions"));
  if (hidden(req, nv.name)) return mlflowError(notFoundModel(nv.name));
  MLFLOW_TRY(const ModelVersion v, s.transitionStage(nv.name, nv.version, stage, archive));
  return written(ok(OJson{{"model_version", versionObject(v)}}), "version.transition_stage",
                 nv.name + "/" + std::to_string(nv.version), p);
}

struct Route {
  MlflowEndpoint endpoint;
  Handler handler;
};

const std::vector<Route>& routes() {
  static const std::vector<Route> kRoutes = {
      {{"POST", "registered-models/create", true}, createModel},
      {{"POST", "registered-models/rename", true}, renameModel},
      {{"PATCH", "registered-models/update", true}, updateModel},
      {{"DELETE", "registered-models/delete", true}, deleteModel},
      {{"GET", "registered-models/get", false}, getModel},
      {{"GET", "registered-models/search", false}, searchModels},
      {{"POST", "registered-models/get-latest-versions", false}, latestVersions},
      {{"GET", "registered-models/get-latest-versions", false}, latestVersions},
      {{"POST", "registered-models/set-tag", true}, setModelTag},
      {{"DELETE", "registered-models/delete-tag", true}, deleteModelTag},
      {{"POST", "registered-models/alias", true}, setAlias},
      {{"DELETE", "registered-models/alias", true}, deleteAlias},
      {{"GET", "registered-models/alias", false}, getAlias},
      {{"POST", "model-versions/create", true}, createVersion},
      {{"GET", "model-versions/get", false}, getVersion},
      {{"PATCH", "model-versions/update", true}, updateVersion},
      {{"DELETE", "model-versions/delete", true}, deleteVersion},
      {{"GET", "model-versions/search", false}, searchVersions},
      {{"GET", "model-versions/get-download-uri", false}, downloadUri},
      {{"POST", "model-versions/set-tag", true}, setVersionTag},
      {{"DELETE", "model-versions/delete-tag", true}, deleteVersionTag},
      {{"POST", "model-versions/transition-stage", true}, transitionStage},
  };
  return kRoutes;
}

}  // namespace

const std::vector<MlflowEndpoint>& mlflowEndpoints() {
  static const std::vector<MlflowEndpoint> kEndpoints = [] {
    std::vector<MlflowEndpoint> out;
    for (const auto& r : routes()) out.push_back(r.endpoint);
    return out;
  }();
  return kEndpoints;
}

std::string_view mlflowCode(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return "INVALID_PARAMETER_VALUE";
    case StatusCode::kNotFound:
      return "RESOURCE_DOES_NOT_EXIST";
    case StatusCode::kAlreadyExists:
      return "RESOURCE_ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case StatusCode::kFailedPrecondition:
      return "INVALID_STATE";
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
      return "TEMPORARILY_UNAVAILABLE";
    case StatusCode::kPayloadTooLarge:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kUnimplemented:
      return "NOT_IMPLEMENTED";
    default:
      return "INTERNAL_ERROR";
  }
}

int mlflowStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kAlreadyExists:
      return 400;  // MLflow answers RESOURCE_ALREADY_EXISTS with 400
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kFailedPrecondition:
      return 409;  // a rollback with nothing to go back to
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kPayloadTooLarge:
      return 413;
    case StatusCode::kUnimplemented:
      return 501;
    default:
      return 500;
  }
}

MlflowReply mlflowError(std::string_view code, int status, std::string_view message) {
  MlflowReply r;
  r.status = status;
  OJson j;
  j["error_code"] = std::string(code);
  j["message"] = std::string(message);
  r.body = dumpJson(j);
  return r;
}

MlflowReply mlflowError(const Status& s) {
  return mlflowError(mlflowCode(s), mlflowStatus(s), s.message());
}

std::string versionJson(const ModelVersion& v) { return dumpJson(versionObject(v)); }
std::string modelJson(const RegisteredModel& m) { return dumpJson(modelObject(m)); }

MlflowReply handleMlflow(RegistryStore& store, const MlflowRequest& req) {
  const Route* route = nullptr;
  bool path_known = false;
  for (const auto& r : routes()) {
    if (req.endpoint != r.endpoint.path) continue;
    path_known = true;
    if (req.method == r.endpoint.method) route = &r;
  }
  if (!route) {
    return path_known
               ? mlflowError("BAD_REQUEST", 405,
                             "method " + req.method + " is not allowed for " + req.endpoint)
               : mlflowError("ENDPOINT_NOT_FOUND", 404, "no MLflow endpoint " + req.endpoint);
  }
  if (req.method == "POST" || req.method == "PUT") {
    std::string_view ct = req.content_type;
    if (ct.empty())
      return mlflowError(Status::invalidArgument("Bad Request. Content-Type header is missing."));
    ct = ct.substr(0, ct.find(';'));
    while (!ct.empty() && ct.back() == ' ') ct.remove_suffix(1);
    std::string lower_ct(ct);
    for (auto& c : lower_ct) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower_ct != "application/json") {
      return mlflowError(Status::invalidArgument(
          "Bad Request. Content-Type must be one of ['application/json']."));
    }
  }
  Result<Params> params = Params::read(req);
  if (!params.ok()) return mlflowError(params.status());
  return route->handler(store, req, *params);
}

}  // namespace infera::registry
