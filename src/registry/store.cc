#include "registry/internal/store.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/json.h"
#include "core/utf8.h"

namespace infera::registry {

using store::SqlResult;
using store::SqlValue;
using Json = nlohmann::json;

namespace {

constexpr const char* kStages[] = {"None", "Staging", "Production", "Archived"};

// A unique-key violation inside a transaction means a concurrent writer took the key first; the
// transaction is run again (it then sees that writer's row).
constexpr std::string_view kRetryMarker = "retry: ";

Status conflictToRetry(Status s) {
  if (s.code() == StatusCode::kAlreadyExists)
    return Status::cancelled(std::string(kRetryMarker) + s.message());
  return s;
}

SqlValue text(const std::string& s) { return SqlValue(s); }
SqlValue optText(const std::optional<std::string>& s) { return s ? SqlValue(*s) : SqlValue(); }
SqlValue num(int64_t v) { return SqlValue(v); }

Status modelMissing(const std::string& name) {
  return Status::notFound("Registered Model with name=" + name + " not found");
}
Status versionMissing(const std::string& name, int64_t v) {
  return Status::notFound("Model Version (name=" + name + ", version=" + std::to_string(v) +
                          ") not found");
}

// A captured body as the store keeps it: the gateway cuts bodies at capture.max_body_bytes, which
// may fall inside a character; that partial character goes (the cut moves back to the boundary),
// and any other ill-formed bytes (an upstream's answer) become U+FFFD: PostgreSQL refuses them in
// TEXT, and every reader gets valid UTF-8.
std::string capturedText(std::string_view body) {
  const size_t valid = validUtf8Prefix(body);
  // At most 3 bytes short of a boundary: the start of one character cut off.
  if (valid < body.size() && body.size() - valid <= 3) {
    const auto lead = static_cast<unsigned char>(body[valid]);
    const size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
    if (len > body.size() - valid) body = body.substr(0, valid);
  }
  return toValidUtf8(body);
}

std::string joinJson(const std::vector<std::string>& v) { return dumpJson(Json(v)); }
std::vector<std::string> splitJson(const std::string& s) {
  std::vector<std::string> out;
  Result<Json> j = readJson(s);
  if (j.ok() && j->is_array()) {
    for (const auto& e : *j) {
      if (e.is_string()) out.push_back(e.get<std::string>());
    }
  }
  return out;
}

constexpr const char* kVersionCols =
    "name, version, created_ms, updated_ms, description, source, run_id, run_link, status, "
    "status_message, stage, "
    "storage_location, model_id, artifact_bytes, artifact_files";

ModelVersion versionFromRow(const SqlResult& r, size_t i) {
  ModelVersion v;
  v.name = r.text(i, 0);
  v.version = r.integer(i, 1);
  v.created_ms = r.integer(i, 2);
  v.updated_ms = r.integer(i, 3);
  if (!r.isNull(i, 4)) v.description = r.text(i, 4);
  v.source = r.text(i, 5);
  if (!r.isNull(i, 6)) v.run_id = r.text(i, 6);
  if (!r.isNull(i, 7)) v.run_link = r.text(i, 7);
  v.status = r.text(i, 8);
  v.status_message = r.text(i, 9);
  v.stage = r.text(i, 10);
  v.storage_location = r.text(i, 11);
  v.model_id = r.text(i, 12);
  v.artifact_bytes = r.integer(i, 13);
  v.artifact_files = r.integer(i, 14);
  return v;
}

AliasMove moveFromRow(const SqlResult& r, size_t i) {
  AliasMove m;
  m.name = r.text(i, 0);
  m.alias = r.text(i, 1);
  m.seq = r.integer(i, 2);
  m.ts_ms = r.integer(i, 3);
  m.from_version = r.integer(i, 4);
  m.to_version = r.integer(i, 5);
  m.actor = r.text(i, 6);
  m.reason = r.text(i, 7);
  return m;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Json captureSpec(const CaptureSettings& c) {
  return {{"sample", c.sample},
          {"flag_errors", c.flag_errors},
          {"flag_slower_ms", c.flag_slower_ms},
          {"flag_contains", c.flag_contains}};
}

CaptureSettings captureFromSpec(const std::string& target, const std::string& spec,
                                int64_t updated) {
  CaptureSettings c;
  c.target = target;
  c.updated_ms = updated;
  Result<Json> read = readJson(spec);
  if (!read.ok() || !read->is_object()) return c;
  const Json& j = *read;
  // Stored by setCapture; read by type all the same (value() throws on a mismatch).
  if (j.contains("sample") && j["sample"].is_number()) c.sample = j["sample"].get<double>();
  if (j.contains("flag_errors") && j["flag_errors"].is_boolean())
    c.flag_errors = j["flag_errors"].get<bool>();
  if (j.contains("flag_slower_ms") && j["flag_slower_ms"].is_number_integer())
    c.flag_slower_ms = j["flag_slower_ms"].get<int64_t>();
  if (j.contains("flag_contains") && j["flag_contains"].is_array()) {
    for (const auto& e : j["flag_contains"]) {
      if (e.is_string()) c.flag_contains.push_back(e.get<std::string>());
    }
  }
  return c;
}

}  // namespace

std::optional<std::string> canonicalStage(std::string_view stage) {
  const std::string l = lower(stage);
  for (const char* s : kStages) {
    if (lower(s) == l) return std::string(s);
  }
  return std::nullopt;
}

Result<int64_t> parseVersion(std::string_view version) {
  int64_t v = 0;
  bool ok = !version.empty() && version.size() <= 18;
  for (char c : version) {
    if (c < '0' || c > '9') ok = false;
  }
  if (ok) v = std::stoll(std::string(version));
  if (!ok) {
    return Status::invalidArgument("Parameter 'version' must be an integer, got '" +
                                   std::string(version) + "'.");
  }
  return v;
}

Status validateAlias(const std::string& alias) {
  if (alias.empty()) return Status::invalidArgument("Registered model alias name cannot be empty.");
  for (unsigned char c : alias) {
    if (!(std::isalnum(c) || c == '_' || c == '-')) {
      return Status::invalidArgument(
          "Invalid alias name: '" + alias +
          "'. Names may only contain alphanumerics, underscores (_), and dashes (-).");
    }
  }
  if (alias.size() > 255) {
    return Status::invalidArgument(
        "'Registered model alias name' exceeds the maximum length of 255 characters");
  }
  if (lower(alias) == "latest")
    return Status::invalidArgument("'latest' alias name (case insensitive) is reserved.");
  if ((alias[0] == 'v' || alias[0] == 'V') && alias.size() > 1 &&
      std::all_of(alias.begin() + 1, alias.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Status::invalidArgument("Version alias name '" + alias + "' is reserved.");
  }
  return Status::ok();
}

Status validateTag(const std::string& key, const std::string& value) {
  for (unsigned char c : key) {
    if (!(std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ' ' || c == ':' ||
          c == '/')) {
      return Status::invalidArgument(
          "Invalid value \"" + key +
          "\" for parameter 'key' supplied: Names may only contain alphanumerics, "
          "underscores (_), dashes (-), periods (.), spaces ( ), colon(:) and slashes (/).");
    }
  }
  const bool bad_path = key == "." || key.starts_with("/") || key.find("..") != std::string::npos ||
                        key.find("//") != std::string::npos;
  if (bad_path) {
    return Status::invalidArgument(
        "Invalid value \"" + key + "\" for parameter 'key' supplied: Names may be " +
        "treated as files in certain cases, and must not resolve to other names when " +
        "treated as such. This name would resolve to '" + key + "'");
  }
  if (key.size() > 250)
    return Status::invalidArgument("'key' exceeds the maximum length of 250 characters");
  if (value.size() > 100000)
    return Status::invalidArgument("'value' exceeds the maximum length of 100000 characters");
  return Status::ok();
}

Result<std::unique_ptr<RegistryStore>> RegistryStore::open(const std::string& url,
                                                           const Clock& clock) {
  INFERA_ASSIGN_OR_RETURN(auto db, store::SqlDb::open(url));
  std::unique_ptr<RegistryStore> s(new RegistryStore(std::move(db), clock));
  INFERA_RETURN_IF_ERROR(s->migrate());
  return s;
}

Status RegistryStore::migrate() {
  // Idempotent; several replicas may run it at once (IF NOT EXISTS + ON CONFLICT).
  const char* schema = R"sql(
CREATE TABLE IF NOT EXISTS infera_registry_meta (k TEXT PRIMARY KEY, v BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS infera_registry_models (
  name TEXT PRIMARY KEY, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL, description TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS infera_registry_model_tags (
  name TEXT NOT NULL, k TEXT NOT NULL, v TEXT NOT NULL, PRIMARY KEY (name, k));
CREATE TABLE IF NOT EXISTS infera_registry_versions (
  name TEXT NOT NULL, version BIGINT NOT NULL, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL,
  description TEXT, source TEXT NOT NULL, run_id TEXT, run_link TEXT, status TEXT NOT NULL,
  status_message TEXT NOT NULL, stage TEXT NOT NULL, deleted BIGINT NOT NULL, storage_location TEXT NOT NULL,
  model_id TEXT NOT NULL, artifact_bytes BIGINT NOT NULL, artifact_files BIGINT NOT NULL,
  PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS infera_registry_version_tags (
  name TEXT NOT NULL, version BIGINT NOT NULL, k TEXT NOT NULL, v TEXT NOT NULL, PRIMARY KEY (name, version, k));
CREATE TABLE IF NOT EXISTS infera_registry_aliases (
  name TEXT NOT NULL, alias TEXT NOT NULL, version BIGINT NOT NULL, PRIMARY KEY (name, alias));
CREATE TABLE IF NOT EXISTS infera_registry_alias_history (
  name TEXT NOT NULL, alias TEXT NOT NULL, seq BIGINT NOT NULL, ts_ms BIGINT NOT NULL, from_version BIGINT NOT NULL,
  to_version BIGINT NOT NULL, actor TEXT NOT NULL, reason TEXT NOT NULL, PRIMARY KEY (name, alias, seq));
CREATE TABLE IF NOT EXISTS infera_registry_artifacts (
  name TEXT NOT NULL, version BIGINT NOT NULL, path TEXT NOT NULL, size BIGINT NOT NULL, sha256 TEXT NOT NULL,
  created_ms BIGINT NOT NULL, PRIMARY KEY (name, version, path));
CREATE TABLE IF NOT EXISTS infera_registry_bindings (
  name TEXT NOT NULL, ref TEXT NOT NULL, deployments TEXT NOT NULL, updated_ms BIGINT NOT NULL,
  PRIMARY KEY (name, ref));
CREATE TABLE IF NOT EXISTS infera_registry_experiments (
  name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_ms BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS infera_registry_shadow (
  ts_ms BIGINT NOT NULL, request_id TEXT NOT NULL, model TEXT NOT NULL, primary_route TEXT NOT NULL,
  shadow_route TEXT NOT NULL, status BIGINT NOT NULL, error TEXT NOT NULL, latency_ms DOUBLE PRECISION NOT NULL,
  primary_latency_ms DOUBLE PRECISION NOT NULL, prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL,
  matched BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS infera_registry_shadow_ts ON infera_registry_shadow (ts_ms);
CREATE TABLE IF NOT EXISTS infera_registry_captures (
  request_id TEXT PRIMARY KEY, ts_ms BIGINT NOT NULL, model TEXT NOT NULL, target TEXT NOT NULL, arm TEXT NOT NULL,
  key_id TEXT NOT NULL, status BIGINT NOT NULL, latency_ms DOUBLE PRECISION NOT NULL, request TEXT NOT NULL,
  response TEXT NOT NULL, captured BIGINT NOT NULL, flagged BIGINT NOT NULL, reason TEXT NOT NULL,
  flagged_by TEXT NOT NULL, flagged_ms BIGINT NOT NULL, verdict TEXT NOT NULL, label TEXT NOT NULL,
  reviewer TEXT NOT NULL, note TEXT NOT NULL, reviewed_ms BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS infera_registry_captures_target ON infera_registry_captures (target, ts_ms);
CREATE TABLE IF NOT EXISTS infera_registry_capture_settings (
  target TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_ms BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS infera_registry_optout (key_id TEXT PRIMARY KEY, ts_ms BIGINT NOT NULL)
)sql";
  INFERA_RETURN_IF_ERROR(db_->execScript(schema));
  auto r = db_->exec(
      "INSERT INTO infera_registry_meta (k, v) VALUES ('generation', 1) ON CONFLICT (k) DO "
      "NOTHING");
  return r.ok() ? Status::ok() : r.status();
}

Result<int64_t> RegistryStore::generation() {
  INFERA_ASSIGN_OR_RETURN(SqlResult r,
                          db_->exec("SELECT v FROM infera_registry_meta WHERE k = 'generation'"));
  if (r.rows.empty()) return Status::internal("infera_registry_meta has no generation row");
  return r.integer(0, 0);
}

Status RegistryStore::mutate(const std::function<Status()>& body) {
  for (int attempt = 0;; ++attempt) {
    INFERA_RETURN_IF_ERROR(db_->begin());
    // The generation first: on PostgreSQL its row lock orders concurrent registry writers, so a
    // writer's reads below see every change committed before it (version numbers, alias chains).
    auto g = db_->exec("UPDATE infera_registry_meta SET v = v + 1 WHERE k = 'generation'");
    // The body's own kAlreadyExists ("Registered Model (name=x) already exists.") is the answer;
    // only a raw statement's unique-constraint violation, which the body marks with
    // conflictToRetry, or a failed commit means a concurrent writer won and the body runs again.
    Status s = g.ok() ? body() : conflictToRetry(g.status());
    if (s.isOk()) {
      s = conflictToRetry(db_->commit());
      if (s.isOk()) return s;
    } else {
      (void)db_->rollback();
    }
    const bool retry = s.code() == StatusCode::kCancelled && s.message().starts_with(kRetryMarker);
    if (!retry) return s;
    if (attempt >= 20)
      return Status::unavailable("registry store: too many conflicting writers: " + s.message());
  }
}

Status RegistryStore::requireModel(const std::string& name) {
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r, db_->exec("SELECT 1 FROM infera_registry_models WHERE name = ?1", {text(name)}));
  if (r.rows.empty()) return modelMissing(name);
  return Status::ok();
}

// ---------------- registered models ----------------

Status RegistryStore::fillModel(RegisteredModel& m) {
  INFERA_ASSIGN_OR_RETURN(
      SqlResult tags,
      db_->exec("SELECT k, v FROM infera_registry_model_tags WHERE name = ?1 ORDER BY k",
                {text(m.name)}));
  m.tags.clear();
  for (size_t i = 0; i < tags.rows.size(); ++i)
    m.tags.push_back({tags.text(i, 0), tags.text(i, 1)});
  INFERA_ASSIGN_OR_RETURN(
      SqlResult al, db_->exec("SELECT alias, version FROM infera_registry_aliases WHERE name = ?1 "
                              "ORDER BY alias",
                              {text(m.name)}));
  m.aliases.clear();
  for (size_t i = 0; i < al.rows.size(); ++i)
    m.aliases.push_back({al.text(i, 0), al.integer(i, 1)});
  INFERA_ASSIGN_OR_RETURN(m.latest_versions, latestVersions(m.name, {}));
  for (auto& v : m.latest_versions) v.aliases.clear();  // MLflow's SQL store leaves them out here
  return Status::ok();
}

Result<RegisteredModel> RegistryStore::getModel(const std::string& name) {
  INFERA_ASSIGN_OR_RETURN(SqlResult r, db_->exec("SELECT name, created_ms, updated_ms, description "
                                                 "FROM infera_registry_models WHERE name = ?1",
                                                 {text(name)}));
  if (r.rows.empty()) return modelMissing(name);
  RegisteredModel m;
  m.name = r.text(0, 0);
  m.created_ms = r.integer(0, 1);
  m.updated_ms = r.integer(0, 2);
  m.description = r.text(0, 3);
  INFERA_RETURN_IF_ERROR(fillModel(m));
  return m;
}

Result<RegisteredModel> RegistryStore::createModel(const std::string& name,
                                                   const std::string& description,
                                                   const std::vector<Tag>& tags) {
  for (const auto& t : tags) INFERA_RETURN_IF_ERROR(validateTag(t.key, t.value));
  const int64_t ts = now();
  if (Status ms = mutate([&]() -> Status {
        INFERA_ASSIGN_OR_RETURN(
            SqlResult e,
            db_->exec("SELECT 1 FROM infera_registry_models WHERE name = ?1", {text(name)}));
        if (!e.rows.empty())
          return Status::alreadyExists("Registered Model (name=" + name + ") already exists.");
        auto ins = db_->exec(
            "INSERT INTO infera_registry_models (name, created_ms, updated_ms, description) "
            "VALUES (?1, ?2, ?2, ?3)",
            {text(name), num(ts), text(description)});
        if (!ins.ok()) return conflictToRetry(ins.takeStatus());
        for (const auto& t : tags) {
          auto ti = db_->exec(
              "INSERT INTO infera_registry_model_tags (name, k, v) VALUES (?1, ?2, ?3) "
              "ON CONFLICT (name, k) DO UPDATE SET v = excluded.v",
              {text(name), text(t.key), text(t.value)});
          if (!ti.ok()) return ti.takeStatus();
        }
        return Status::ok();
      });
      !ms.isOk())
    return ms;
  return getModel(name);
}

Result<RegisteredModel> RegistryStore::renameModel(const std::string& name,
                                                   const std::string& new_name) {
  const int64_t ts = now();
  if (Status ms = mutate([&]() -> Status {
        INFERA_RETURN_IF_ERROR(requireModel(name));
        INFERA_ASSIGN_OR_RETURN(
            SqlResult e,
            db_->exec("SELECT 1 FROM infera_registry_models WHERE name = ?1", {text(new_name)}));
        if (!e.rows.empty())
          return Status::alreadyExists("Registered Model (name=" + new_name + ") already exists.");
        for (const char* sql :
             {"UPDATE infera_registry_models SET name = ?2, updated_ms = ?3 WHERE name = ?1",
              "UPDATE infera_registry_versions SET name = ?2, updated_ms = ?3 WHERE name = ?1"}) {
          auto u = db_->exec(sql, {text(name), text(new_name), num(ts)});
          if (!u.ok()) return conflictToRetry(u.takeStatus());
        }
        const char* stmts[] = {
            "UPDATE infera_registry_model_tags SET name = ?2 WHERE name = ?1",
            "UPDATE infera_registry_version_tags SET name = ?2 WHERE name = ?1",
            "UPDATE infera_registry_aliases SET name = ?2 WHERE name = ?1",
            "UPDATE infera_registry_alias_history SET name = ?2 WHERE name = ?1",
            "UPDATE infera_registry_artifacts SET name = ?2 WHERE name = ?1",
            "UPDATE infera_registry_bindings SET name = ?2 WHERE name = ?1",
            "UPDATE infera_registry_experiments SET name = ?2 WHERE name = ?1",
        };
        for (const char* sql : stmts) {
          auto u = db_->exec(sql, {text(name), text(new_name)});
          if (!u.ok()) return conflictToRetry(u.takeStatus());
        }
        // Capture settings and captured inferences name their version as "name/N".
        auto cs = db_->exec(
            "UPDATE infera_registry_capture_settings SET target = CAST(?2 AS TEXT) || "
            "substr(target, ?3) "
            "WHERE substr(target, 1, ?4) = CAST(?1 AS TEXT) || '/'",
            {text(name), text(new_name), num(static_cast<int64_t>(name.size()) + 1),
             num(static_cast<int64_t>(name.size()) + 1)});
        if (!cs.ok()) return cs.takeStatus();
        auto cap = db_->exec(
            "UPDATE infera_registry_captures SET model = ?2, target = CAST(?2 AS TEXT) || "
            "substr(target, ?3) "
            "WHERE model = ?1",
            {text(name), text(new_name), num(static_cast<int64_t>(name.size()) + 1)});
        return cap.ok() ? Status::ok() : cap.takeStatus();
      });
      !ms.isOk())
    return ms;
  return getModel(new_name);
}

Result<RegisteredModel> RegistryStore::updateModel(const std::string& name,
                                                   const std::string& description) {
  const int64_t ts = now();
  if (Status ms = mutate([&]() -> Status {
        INFERA_ASSIGN_OR_RETURN(
            SqlResult u,
            db_->exec("UPDATE infera_registry_models SET description = ?2, updated_ms = ?3 "
                      "WHERE name = ?1",
                      {text(name), text(description), num(ts)}));
        if (u.affected == 0) return modelMissing(name);
        return Status::ok();
      });
      !ms.isOk())
    return ms;
  return getModel(name);
}

Status RegistryStore::deleteModel(const std::string& name) {
  return mutate([&]() -> Status {
    INFERA_RETURN_IF_ERROR(requireModel(name));
    // A hard delete with everything under it: the name can be reused and its versions restart at
    // 1. Captured inferences and shadow outcomes stay (they are data, not the model).
    const char* stmts[] = {
        "DELETE FROM infera_registry_models WHERE name = ?1",
        "DELETE FROM infera_registry_model_tags WHERE name = ?1",
        "DELETE FROM infera_registry_versions WHERE name = ?1",
        "DELETE FROM infera_registry_version_tags WHERE name = ?1",
        "DELETE FROM infera_registry_aliases WHERE name = ?1",
        "DELETE FROM infera_registry_alias_history WHERE name = ?1",
        "DELETE FROM infera_registry_artifacts WHERE name = ?1",
        "DELETE FROM infera_registry_bindings WHERE name = ?1",
        "DELETE FROM infera_registry_experiments WHERE name = ?1",
    };
    for (const char* sql : stmts) {
      auto d = db_->exec(sql, {text(name)});
      if (!d.ok()) return d.takeStatus();
    }
    auto cs = db_->exec(
        "DELETE FROM infera_registry_capture_settings WHERE substr(target, 1, ?2) = CAST(?1 AS "
        "TEXT) || '/'",
        {text(name), num(static_cast<int64_t>(name.size()) + 1)});
    return cs.ok() ? Status::ok() : cs.takeStatus();
  });
}

Result<std::vector<RegisteredModel>> RegistryStore::allModels() {
  INFERA_ASSIGN_OR_RETURN(SqlResult r,
                          db_->exec("SELECT name, created_ms, updated_ms, description FROM "
                                    "infera_registry_models"));
  std::map<std::string, RegisteredModel> by_name;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    RegisteredModel m;
    m.name = r.text(i, 0);
    m.created_ms = r.integer(i, 1);
    m.updated_ms = r.integer(i, 2);
    m.description = r.text(i, 3);
    by_name.emplace(m.name, std::move(m));
  }
  INFERA_ASSIGN_OR_RETURN(
      SqlResult tags, db_->exec("SELECT name, k, v FROM infera_registry_model_tags ORDER BY k"));
  for (size_t i = 0; i < tags.rows.size(); ++i) {
    auto it = by_name.find(tags.text(i, 0));
    if (it != by_name.end()) it->second.tags.push_back({tags.text(i, 1), tags.text(i, 2)});
  }
  INFERA_ASSIGN_OR_RETURN(
      SqlResult al,
      db_->exec("SELECT name, alias, version FROM infera_registry_aliases ORDER BY alias"));
  for (size_t i = 0; i < al.rows.size(); ++i) {
    auto it = by_name.find(al.text(i, 0));
    if (it != by_name.end()) it->second.aliases.push_back({al.text(i, 1), al.integer(i, 2)});
  }
  // The highest version per stage, per model.
  INFERA_ASSIGN_OR_RETURN(
      SqlResult latest,
      db_->exec(std::string("SELECT ") + kVersionCols +
                " FROM infera_registry_versions v WHERE deleted = 0 AND version = (SELECT "
                "MAX(version) FROM infera_registry_versions w WHERE w.name = v.name AND "
                "w.stage = v.stage AND w.deleted = 0) ORDER BY version"));
  for (size_t i = 0; i < latest.rows.size(); ++i) {
    ModelVersion v = versionFromRow(latest, i);
    auto it = by_name.find(v.name);
    if (it != by_name.end()) it->second.latest_versions.push_back(std::move(v));
  }
  std::vector<RegisteredModel> out;
  out.reserve(by_name.size());
  for (auto& [n, m] : by_name) out.push_back(std::move(m));
  return out;
}

Status RegistryStore::setModelTag(const std::string& name, const std::string& key,
                                  const std::string& value) {
  INFERA_RETURN_IF_ERROR(validateTag(key, value));
  return mutate([&]() -> Status {
    INFERA_RETURN_IF_ERROR(requireModel(name));
    auto r = db_->exec(
        "INSERT INTO infera_registry_model_tags (name, k, v) VALUES (?1, ?2, ?3) "
        "ON CONFLICT (name, k) DO UPDATE SET v = excluded.v",
        {text(name), text(key), text(value)});
    return r.ok() ? Status::ok() : conflictToRetry(r.takeStatus());
  });
}

Status RegistryStore::deleteModelTag(const std::string& name, const std::string& key) {
  return mutate([&]() -> Status {
    INFERA_RETURN_IF_ERROR(requireModel(name));
    auto r = db_->exec("DELETE FROM infera_registry_model_tags WHERE name = ?1 AND k = ?2",
                       {text(name), text(key)});
    return r.ok() ? Status::ok() : r.takeStatus();
  });
}

// ---------------- aliases ----------------

Result<AliasMove> RegistryStore::moveAliasLocked(const std::string& name, const std::string& alias,
                                                 int64_t to, const std::string& actor,
                                                 const std::string& reason) {
  INFERA_ASSIGN_OR_RETURN(
      SqlResult cur, db_->exec("SELECT version FROM infera_registry_aliases WHERE name = ?1 AND "
                               "alias = ?2",
                               {text(name), text(alias)}));
  const int64_t from = cur.rows.empty() ? 0 : cur.integer(0, 0);
  if (cur.rows.empty() && to == 0) return AliasMove{};  // deleting an alias that is not there
  Result<SqlResult> w =
      to == 0
          ? db_->exec("DELETE FROM infera_registry_aliases WHERE name = ?1 AND alias = ?2",
                      {text(name), text(alias)})
          : db_->exec(
                "INSERT INTO infera_registry_aliases (name, alias, version) VALUES (?1, ?2, ?3) "
                "ON CONFLICT (name, alias) DO UPDATE SET version = excluded.version",
                {text(name), text(alias), num(to)});
  if (!w.ok()) return conflictToRetry(w.takeStatus());
  AliasMove m;
  m.name = name;
  m.alias = alias;
  m.ts_ms = now();
  m.from_version = from;
  m.to_version = to;
  m.actor = actor;
  m.reason = reason;
  INFERA_ASSIGN_OR_RETURN(
      SqlResult seq, db_->exec("SELECT COALESCE(MAX(seq), 0) FROM infera_registry_alias_history "
                               "WHERE name = ?1 AND alias = ?2",
                               {text(name), text(alias)}));
  m.seq = seq.integer(0, 0) + 1;
  auto h = db_->exec(
      "INSERT INTO infera_registry_alias_history (name, alias, seq, ts_ms, from_version, "
      "to_version, "
      "actor, reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
      {text(name), text(alias), num(m.seq), num(m.ts_ms), num(from), num(to), text(actor),
       text(reason)});
  if (!h.ok()) return conflictToRetry(h.takeStatus());
  return m;
}

Result<AliasMove> RegistryStore::setAlias(const std::string& name, const std::string& alias,
                                          int64_t version, const std::string& actor,
                                          const std::string& reason) {
  INFERA_RETURN_IF_ERROR(validateAlias(alias));
  AliasMove out;
  if (Status ms = mutate([&]() -> Status {
        INFERA_RETURN_IF_ERROR(requireModel(name));
        INFERA_ASSIGN_OR_RETURN(
            SqlResult v, db_->exec("SELECT 1 FROM infera_registry_versions WHERE name = ?1 AND "
                                   "version = ?2 AND deleted = 0",
                                   {text(name), num(version)}));
        if (v.rows.empty()) return versionMissing(name, version);
        INFERA_ASSIGN_OR_RETURN(out, moveAliasLocked(name, alias, version, actor, reason));
        return Status::ok();
      });
      !ms.isOk())
    return ms;
  return out;
}

Status RegistryStore::deleteAlias(const std::string& name, const std::string& alias,
                                  const std::string& actor, const std::string& reason) {
  return mutate([&]() -> Status {
    INFERA_RETURN_IF_ERROR(requireModel(name));
    return moveAliasLocked(name, alias, 0, actor, reason).takeStatus();
  });
}

Result<ModelVersion> RegistryStore::versionByAlias(const std::string& name,
                                                   const std::string& alias) {
  if (lower(alias) == "latest") {
    INFERA_ASSIGN_OR_RETURN(
        SqlResult r, db_->exec("SELECT MAX(version) FROM infera_registry_versions WHERE name = ?1 "
                               "AND deleted = 0",
                               {text(name)}));
    if (r.rows.empty() || r.isNull(0, 0)) {
      INFERA_RETURN_IF_ERROR(requireModel(name));
      return Status::notFound("Latest version not found for model " + name + ".");
    }
    return loadVersion(name, r.integer(0, 0), true);
  }
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r, db_->exec("SELECT version FROM infera_registry_aliases WHERE name = ?1 AND "
                             "alias = ?2",
                             {text(name), text(alias)}));
  if (r.rows.empty())
    return Status::invalidArgument("Registered model alias " + alias + " not found.");
  return loadVersion(name, r.integer(0, 0), true);
}

Result<std::vector<AliasMove>> RegistryStore::aliasHistory(const std::string& name,
                                                           const std::string& alias, int limit) {
  Result<SqlResult> r =
      alias.empty()
          ? db_->exec(
                "SELECT name, alias, seq, ts_ms, from_version, to_version, actor, reason FROM "
                "infera_registry_alias_history WHERE name = ?1 ORDER BY ts_ms DESC, seq DESC "
                "LIMIT ?2",
                {text(name), num(limit)})
          : db_->exec(
                "SELECT name, alias, seq, ts_ms, from_version, to_version, actor, reason FROM "
                "infera_registry_alias_history WHERE name = ?1 AND alias = ?2 ORDER BY seq "
                "DESC LIMIT ?3",
                {text(name), text(alias), num(limit)});
  if (!r.ok()) return r.takeStatus();
  std::vector<AliasMove> out;
  for (size_t i = 0; i < r->rows.size(); ++i) out.push_back(moveFromRow(*r, i));
  if (out.empty()) INFERA_RETURN_IF_ERROR(requireModel(name));
  return out;
}

Result<AliasMove> RegistryStore::rollbackAlias(const std::string& name, const std::string& alias,
                                               const std::string& actor,
                                               const std::string& reason) {
  AliasMove out;
  if (Status ms = mutate([&]() -> Status {
        INFERA_RETURN_IF_ERROR(requireModel(name));
        INFERA_ASSIGN_OR_RETURN(
            SqlResult last,
            db_->exec(
                "SELECT name, alias, seq, ts_ms, from_version, to_version, actor, reason FROM "
                "infera_registry_alias_history WHERE name = ?1 AND alias = ?2 ORDER BY seq DESC "
                "LIMIT 1",
                {text(name), text(alias)}));
        if (last.rows.empty()) {
          return Status::failedPrecondition("alias " + alias + " of model " + name +
                                            " has never moved: nothing to roll back to");
        }
        const AliasMove prev = moveFromRow(last, 0);
        if (prev.from_version == 0) {
          return Status::failedPrecondition(
              "alias " + alias + " of model " + name + " was created by its last move (to " +
              std::to_string(prev.to_version) + "): nothing to roll back to");
        }
        INFERA_ASSIGN_OR_RETURN(
            SqlResult v, db_->exec("SELECT 1 FROM infera_registry_versions WHERE name = ?1 AND "
                                   "version = ?2 AND deleted = 0",
                                   {text(name), num(prev.from_version)}));
        if (v.rows.empty()) {
          return Status::failedPrecondition("alias " + alias + " pointed to version " +
                                            std::to_string(prev.from_version) +
                                            " before its last move, which is deleted");
        }
        const std::string why =
            reason.empty() ? "rollback of move " + std::to_string(prev.seq) : reason;
        INFERA_ASSIGN_OR_RETURN(out, moveAliasLocked(name, alias, prev.from_version, actor, why));
        return Status::ok();
      });
      !ms.isOk())
    return ms;
  return out;
}

// ---------------- versions ----------------

Result<ModelVersion> RegistryStore::loadVersion(const std::string& name, int64_t version,
                                                bool with_aliases) {
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r, db_->exec(std::string("SELECT ") + kVersionCols +
                                 " FROM infera_registry_versions WHERE name = ?1 AND version = ?2 "
                                 "AND deleted = 0",
                             {text(name), num(version)}));
  if (r.rows.empty()) return versionMissing(name, version);
  ModelVersion v = versionFromRow(r, 0);
  INFERA_ASSIGN_OR_RETURN(
      SqlResult tags, db_->exec("SELECT k, v FROM infera_registry_version_tags WHERE name = ?1 AND "
                                "version = ?2 ORDER BY k",
                                {text(name), num(version)}));
  for (size_t i = 0; i < tags.rows.size(); ++i)
    v.tags.push_back({tags.text(i, 0), tags.text(i, 1)});
  if (with_aliases) {
    INFERA_ASSIGN_OR_RETURN(
        SqlResult al, db_->exec("SELECT alias FROM infera_registry_aliases WHERE name = ?1 AND "
                                "version = ?2 ORDER BY alias",
                                {text(name), num(version)}));
    for (size_t i = 0; i < al.rows.size(); ++i) v.aliases.push_back(al.text(i, 0));
  }
  return v;
}

Result<ModelVersion> RegistryStore::getVersion(const std::string& name, int64_t version) {
  return loadVersion(name, version, true);
}

Result<ModelVersion> RegistryStore::createVersion(const NewVersion& nv) {
  for (const auto& t : nv.tags) INFERA_RETURN_IF_ERROR(validateTag(t.key, t.value));
  const int64_t ts = now();
  int64_t version = 0;
  if (Status ms = mutate([&]() -> Status {
        INFERA_RETURN_IF_ERROR(requireModel(nv.name));
        // Soft-deleted versions keep their rows, so their numbers are never given out again.
        INFERA_ASSIGN_OR_RETURN(
            SqlResult mx,
            db_->exec("SELECT COALESCE(MAX(version), 0) FROM infera_registry_versions "
                      "WHERE name = ?1",
                      {text(nv.name)}));
        version = mx.integer(0, 0) + 1;
        auto ins = db_->exec(
            "INSERT INTO infera_registry_versions (name, version, created_ms, updated_ms, "
            "description, source, run_id, "
            "run_link, status, status_message, stage, deleted, storage_location, model_id, "
            "artifact_bytes, "
            "artifact_files) VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6, ?7, 'READY', '', 'None', 0, ?5, "
            "?8, 0, 0)",
            {text(nv.name), num(version), num(ts), optText(nv.description), text(nv.source),
             optText(nv.run_id), optText(nv.run_link), text(nv.model_id)});
        if (!ins.ok()) return conflictToRetry(ins.takeStatus());
        for (const auto& t : nv.tags) {
          auto ti = db_->exec(
              "INSERT INTO infera_registry_version_tags (name, version, k, v) VALUES (?1, ?2, ?3, "
              "?4) "
              "ON CONFLICT (name, version, k) DO UPDATE SET v = excluded.v",
              {text(nv.name), num(version), text(t.key), text(t.value)});
          if (!ti.ok()) return ti.takeStatus();
        }
        auto u = db_->exec("UPDATE infera_registry_models SET updated_ms = ?2 WHERE name = ?1",
                           {text(nv.name), num(ts)});
        return u.ok() ? Status::ok() : u.takeStatus();
      });
      !ms.isOk())
    return ms;
  return loadVersion(nv.name, version, true);
}

Result<ModelVersion> RegistryStore::updateVersion(const std::string& name, int64_t version,
                                                  const std::optional<std::string>& description) {
  const int64_t ts = now();
  if (Status ms = mutate([&]() -> Status {
        INFERA_ASSIGN_OR_RETURN(
            SqlResult u,
            db_->exec("UPDATE infera_registry_versions SET description = ?3, updated_ms = "
                      "?4 WHERE name = ?1 AND version = ?2 AND deleted = 0",
                      {text(name), num(version), optText(description), num(ts)}));
        if (u.affected == 0) return versionMissing(name, version);
        return Status::ok();
      });
      !ms.isOk())
    return ms;
  return loadVersion(name, version, true);
}

Status RegistryStore::deleteVersion(const std::string& name, int64_t version,
                                    const std::string& actor) {
  const int64_t ts = now();
  return mutate([&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(SqlResult u,
                            db_->exec("UPDATE infera_registry_versions SET deleted = 1, stage = "
                                      "'Deleted_Internal', description = NULL, "
                                      "status_message = '', source = 'REDACTED-SOURCE-PATH', "
                                      "run_id = 'REDACTED-RUN-ID', run_link = "
                                      "'REDACTED-RUN-LINK', storage_location = '', updated_ms = ?3 "
                                      "WHERE name = ?1 AND version = ?2 AND "
                                      "deleted = 0",
                                      {text(name), num(version), num(ts)}));
    if (u.affected == 0) return versionMissing(name, version);
    // Every alias pointing at it goes too (each a recorded move).
    INFERA_ASSIGN_OR_RETURN(
        SqlResult al, db_->exec("SELECT alias FROM infera_registry_aliases WHERE name = ?1 AND "
                                "version = ?2",
                                {text(name), num(version)}));
    for (size_t i = 0; i < al.rows.size(); ++i) {
      auto m = moveAliasLocked(name, al.text(i, 0), 0, actor,
                               "version " + std::to_string(version) + " deleted");
      if (!m.ok()) return m.takeStatus();
    }
    for (const char* sql :
         {"DELETE FROM infera_registry_version_tags WHERE name = ?1 AND version = ?2",
          "DELETE FROM infera_registry_artifacts WHERE name = ?1 AND version = ?2"}) {
      auto d = db_->exec(sql, {text(name), num(version)});
      if (!d.ok()) return d.takeStatus();
    }
    for (const char* sql :
         {"DELETE FROM infera_registry_bindings WHERE name = ?1 AND ref = ?2",
          "DELETE FROM infera_registry_capture_settings WHERE target = CAST(?1 AS TEXT) || '/' || "
          "CAST(?2 AS TEXT)"}) {
      auto d = db_->exec(sql, {text(name), text(std::to_string(version))});
      if (!d.ok()) return d.takeStatus();
    }
    auto m = db_->exec("UPDATE infera_registry_models SET updated_ms = ?2 WHERE name = ?1",
                       {text(name), num(ts)});
    return m.ok() ? Status::ok() : m.takeStatus();
  });
}

Result<std::vector<ModelVersion>> RegistryStore::allVersions() {
  INFERA_ASSIGN_OR_RETURN(SqlResult r,
                          db_->exec(std::string("SELECT ") + kVersionCols +
                                    " FROM infera_registry_versions WHERE deleted = 0"));
  std::map<std::pair<std::string, int64_t>, ModelVersion> by_key;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    ModelVersion v = versionFromRow(r, i);
    by_key.emplace(std::make_pair(v.name, v.version), std::move(v));
  }
  INFERA_ASSIGN_OR_RETURN(
      SqlResult tags,
      db_->exec("SELECT name, version, k, v FROM infera_registry_version_tags ORDER BY k"));
  for (size_t i = 0; i < tags.rows.size(); ++i) {
    auto it = by_key.find({tags.text(i, 0), tags.integer(i, 1)});
    if (it != by_key.end()) it->second.tags.push_back({tags.text(i, 2), tags.text(i, 3)});
  }
  INFERA_ASSIGN_OR_RETURN(
      SqlResult al,
      db_->exec("SELECT name, version, alias FROM infera_registry_aliases ORDER BY alias"));
  for (size_t i = 0; i < al.rows.size(); ++i) {
    auto it = by_key.find({al.text(i, 0), al.integer(i, 1)});
    if (it != by_key.end()) it->second.aliases.push_back(al.text(i, 2));
  }
  std::vector<ModelVersion> out;
  out.reserve(by_key.size());
  for (auto& [k, v] : by_key) out.push_back(std::move(v));
  return out;
}

Result<std::vector<ModelVersion>> RegistryStore::latestVersions(
    const std::string& name, const std::vector<std::string>& stages) {
  std::set<std::string> wanted;
  for (const auto& s : stages) {
    auto c = canonicalStage(s);
    if (!c) {
      return Status::invalidArgument("Invalid Model Version stage: " + s +
                                     ". Value must be one of None, Staging, Production, Archived.");
    }
    wanted.insert(*c);
  }
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r,
      db_->exec("SELECT stage, MAX(version) FROM infera_registry_versions WHERE name = "
                "?1 AND deleted = 0 GROUP BY stage",
                {text(name)}));
  std::vector<int64_t> versions;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    if (wanted.empty() || wanted.count(r.text(i, 0))) versions.push_back(r.integer(i, 1));
  }
  std::sort(versions.begin(), versions.end());
  std::vector<ModelVersion> out;
  for (int64_t v : versions) {
    INFERA_ASSIGN_OR_RETURN(ModelVersion mv, loadVersion(name, v, true));
    out.push_back(std::move(mv));
  }
  return out;
}

Result<ModelVersion> RegistryStore::transitionStage(const std::string& name, int64_t version,
                                                    const std::string& stage,
                                                    bool archive_existing) {
  const auto canon = canonicalStage(stage);
  if (!canon) {
    return Status::invalidArgument("Invalid Model Version stage: " + stage +
                                   ". Value must be one of None, Staging, Production, Archived.");
  }
  if (archive_existing && *canon != "Staging" && *canon != "Production") {
    return Status::invalidArgument(
        "Model version transition cannot archive existing model versions because '" + *canon +
        "' is not an Active stage. Valid stages are ['Staging', 'Production']");
  }
  const int64_t ts = now();
  if (Status ms = mutate([&]() -> Status {
        INFERA_ASSIGN_OR_RETURN(
            SqlResult u,
            db_->exec("UPDATE infera_registry_versions SET stage = ?3, updated_ms = ?4 "
                      "WHERE name = ?1 AND version = ?2 AND deleted = 0",
                      {text(name), num(version), text(*canon), num(ts)}));
        if (u.affected == 0) return versionMissing(name, version);
        if (archive_existing) {
          auto a = db_->exec(
              "UPDATE infera_registry_versions SET stage = 'Archived', updated_ms = ?4 WHERE name "
              "= ?1 AND "
              "version <> ?2 AND stage = ?3 AND deleted = 0",
              {text(name), num(version), text(*canon), num(ts)});
          if (!a.ok()) return a.takeStatus();
        }
        auto m = db_->exec("UPDATE infera_registry_models SET updated_ms = ?2 WHERE name = ?1",
                           {text(name), num(ts)});
        return m.ok() ? Status::ok() : m.takeStatus();
      });
      !ms.isOk())
    return ms;
  return loadVersion(name, version, true);
}

Status RegistryStore::setVersionTag(const std::string& name, int64_t version,
                                    const std::string& key, const std::string& value) {
  INFERA_RETURN_IF_ERROR(validateTag(key, value));
  return mutate([&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(SqlResult v,
                            db_->exec("SELECT 1 FROM infera_registry_versions WHERE name = ?1 AND "
                                      "version = ?2 AND deleted = 0",
                                      {text(name), num(version)}));
    if (v.rows.empty()) return versionMissing(name, version);
    auto r = db_->exec(
        "INSERT INTO infera_registry_version_tags (name, version, k, v) VALUES (?1, ?2, ?3, ?4) "
        "ON CONFLICT (name, version, k) DO UPDATE SET v = excluded.v",
        {text(name), num(version), text(key), text(value)});
    return r.ok() ? Status::ok() : conflictToRetry(r.takeStatus());
  });
}

Status RegistryStore::deleteVersionTag(const std::string& name, int64_t version,
                                       const std::string& key) {
  return mutate([&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(SqlResult v,
                            db_->exec("SELECT 1 FROM infera_registry_versions WHERE name = ?1 AND "
                                      "version = ?2 AND deleted = 0",
                                      {text(name), num(version)}));
    if (v.rows.empty()) return versionMissing(name, version);
    auto r = db_->exec(
        "DELETE FROM infera_registry_version_tags WHERE name = ?1 AND version = ?2 AND k = ?3",
        {text(name), num(version), text(key)});
    return r.ok() ? Status::ok() : r.takeStatus();
  });
}

Result<std::string> RegistryStore::downloadUri(const std::string& name, int64_t version) {
  INFERA_ASSIGN_OR_RETURN(ModelVersion v, loadVersion(name, version, false));
  // models:/<name>/<version> sources resolve to that version's own download URI.
  std::string uri = v.storage_location.empty() ? v.source : v.storage_location;
  for (int hops = 0; hops < 8 && uri.starts_with("models:/"); ++hops) {
    const std::string rest = uri.substr(8);
    const size_t slash = rest.rfind('/');
    if (slash == std::string::npos) break;
    auto ver = parseVersion(rest.substr(slash + 1));
    if (!ver.ok()) break;
    auto next = loadVersion(rest.substr(0, slash), *ver, false);
    if (!next.ok()) break;
    uri = next->storage_location.empty() ? next->source : next->storage_location;
  }
  return uri;
}

Status RegistryStore::recordArtifact(const std::string& name, int64_t version,
                                     const std::string& path, int64_t size,
                                     const std::string& sha256, const std::string& location) {
  const int64_t ts = now();
  return mutate([&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(SqlResult v,
                            db_->exec("SELECT 1 FROM infera_registry_versions WHERE name = ?1 AND "
                                      "version = ?2 AND deleted = 0",
                                      {text(name), num(version)}));
    if (v.rows.empty()) return versionMissing(name, version);
    auto r = db_->exec(
        "INSERT INTO infera_registry_artifacts (name, version, path, size, sha256, created_ms) "
        "VALUES "
        "(?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (name, version, path) DO UPDATE SET size = "
        "excluded.size, "
        "sha256 = excluded.sha256, created_ms = excluded.created_ms",
        {text(name), num(version), text(path), num(size), text(sha256), num(ts)});
    if (!r.ok()) return conflictToRetry(r.takeStatus());
    auto u = db_->exec(
        "UPDATE infera_registry_versions SET storage_location = ?3, updated_ms = ?4, "
        "artifact_bytes = "
        "(SELECT COALESCE(SUM(size), 0) FROM infera_registry_artifacts a WHERE a.name = ?1 AND "
        "a.version = ?2), artifact_files = (SELECT COUNT(*) FROM infera_registry_artifacts a WHERE "
        "a.name = ?1 AND a.version = ?2) WHERE name = ?1 AND version = ?2",
        {text(name), num(version), text(location), num(ts)});
    return u.ok() ? Status::ok() : u.takeStatus();
  });
}

Result<std::vector<RegistryStore::Artifact>> RegistryStore::artifacts(const std::string& name,
                                                                      int64_t version) {
  INFERA_RETURN_IF_ERROR(loadVersion(name, version, false).takeStatus());
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r, db_->exec("SELECT path, size, sha256, created_ms FROM infera_registry_artifacts "
                             "WHERE name = ?1 AND version = ?2 ORDER BY path",
                             {text(name), num(version)}));
  std::vector<Artifact> out;
  for (size_t i = 0; i < r.rows.size(); ++i)
    out.push_back({r.text(i, 0), r.integer(i, 1), r.text(i, 2), r.integer(i, 3)});
  return out;
}

Result<std::optional<RegistryStore::Artifact>> RegistryStore::artifact(const std::string& name,
                                                                       int64_t version,
                                                                       const std::string& path) {
  INFERA_RETURN_IF_ERROR(loadVersion(name, version, false).takeStatus());
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r, db_->exec("SELECT path, size, sha256, created_ms FROM infera_registry_artifacts "
                             "WHERE name = ?1 AND version = ?2 AND path = ?3",
                             {text(name), num(version), text(path)}));
  if (r.rows.empty()) return std::optional<Artifact>();
  return std::optional<Artifact>(
      Artifact{r.text(0, 0), r.integer(0, 1), r.text(0, 2), r.integer(0, 3)});
}

// ---------------- serving ----------------

Result<std::vector<Binding>> RegistryStore::bindings(const std::string& name) {
  Result<SqlResult> r =
      name.empty()
          ? db_->exec(
                "SELECT name, ref, deployments, updated_ms FROM infera_registry_bindings ORDER BY "
                "name, ref")
          : db_->exec(
                "SELECT name, ref, deployments, updated_ms FROM infera_registry_bindings WHERE "
                "name = ?1 ORDER BY ref",
                {text(name)});
  if (!r.ok()) return r.takeStatus();
  std::vector<Binding> out;
  for (size_t i = 0; i < r->rows.size(); ++i) {
    out.push_back({r->text(i, 0), r->text(i, 1), splitJson(r->text(i, 2)), r->integer(i, 3)});
  }
  return out;
}

Status RegistryStore::setBinding(const Binding& b) {
  const int64_t ts = now();
  return mutate([&]() -> Status {
    INFERA_RETURN_IF_ERROR(requireModel(b.model));
    if (!b.ref.starts_with("@")) {
      INFERA_ASSIGN_OR_RETURN(int64_t v, parseVersion(b.ref));
      INFERA_ASSIGN_OR_RETURN(
          SqlResult e, db_->exec("SELECT 1 FROM infera_registry_versions WHERE name = ?1 AND "
                                 "version = ?2 AND deleted = 0",
                                 {text(b.model), num(v)}));
      if (e.rows.empty()) return versionMissing(b.model, v);
    } else {
      INFERA_RETURN_IF_ERROR(validateAlias(b.ref.substr(1)));
    }
    auto r = db_->exec(
        "INSERT INTO infera_registry_bindings (name, ref, deployments, updated_ms) VALUES (?1, ?2, "
        "?3, "
        "?4) ON CONFLICT (name, ref) DO UPDATE SET deployments = excluded.deployments, updated_ms "
        "= "
        "excluded.updated_ms",
        {text(b.model), text(b.ref), text(joinJson(b.deployments)), num(ts)});
    return r.ok() ? Status::ok() : conflictToRetry(r.takeStatus());
  });
}

Status RegistryStore::deleteBinding(const std::string& name, const std::string& ref) {
  return mutate([&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(
        SqlResult d, db_->exec("DELETE FROM infera_registry_bindings WHERE name = ?1 AND ref = ?2",
                               {text(name), text(ref)}));
    if (d.affected == 0) return Status::notFound("no binding of " + name + " " + ref);
    return Status::ok();
  });
}

Result<std::optional<std::string>> RegistryStore::experiment(const std::string& name) {
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r,
      db_->exec("SELECT spec FROM infera_registry_experiments WHERE name = ?1", {text(name)}));
  if (r.rows.empty()) return std::optional<std::string>();
  return std::optional<std::string>(r.text(0, 0));
}

Status RegistryStore::setExperiment(const std::string& name, const std::string& spec_json) {
  const int64_t ts = now();
  return mutate([&]() -> Status {
    INFERA_RETURN_IF_ERROR(requireModel(name));
    auto r = db_->exec(
        "INSERT INTO infera_registry_experiments (name, spec, updated_ms) VALUES (?1, ?2, ?3) ON "
        "CONFLICT (name) DO UPDATE SET spec = excluded.spec, updated_ms = excluded.updated_ms",
        {text(name), text(spec_json), num(ts)});
    return r.ok() ? Status::ok() : conflictToRetry(r.takeStatus());
  });
}

Status RegistryStore::deleteExperiment(const std::string& name) {
  return mutate([&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(
        SqlResult d,
        db_->exec("DELETE FROM infera_registry_experiments WHERE name = ?1", {text(name)}));
    if (d.affected == 0) return Status::notFound("model " + name + " has no experiment");
    return Status::ok();
  });
}

Result<RoutingState> RegistryStore::routingState() {
  RoutingState s;
  // Read in one transaction so the state is one generation's (SQLite: one snapshot; PostgreSQL:
  // the generation row is read last and a change in between is caught by the next poll).
  INFERA_ASSIGN_OR_RETURN(s.generation, generation());
  INFERA_ASSIGN_OR_RETURN(
      SqlResult v, db_->exec("SELECT name, version FROM infera_registry_versions WHERE deleted = 0 "
                             "ORDER BY name, version"));
  for (size_t i = 0; i < v.rows.size(); ++i) s.versions.push_back({v.text(i, 0), v.integer(i, 1)});
  INFERA_ASSIGN_OR_RETURN(
      SqlResult a, db_->exec("SELECT name, alias, version FROM infera_registry_aliases ORDER BY "
                             "name, alias"));
  for (size_t i = 0; i < a.rows.size(); ++i)
    s.aliases.push_back({a.text(i, 0), a.text(i, 1), a.integer(i, 2)});
  INFERA_ASSIGN_OR_RETURN(s.bindings, bindings(""));
  INFERA_ASSIGN_OR_RETURN(
      SqlResult e, db_->exec("SELECT name, spec FROM infera_registry_experiments ORDER BY name"));
  for (size_t i = 0; i < e.rows.size(); ++i) s.experiments.emplace_back(e.text(i, 0), e.text(i, 1));
  INFERA_ASSIGN_OR_RETURN(
      SqlResult c,
      db_->exec("SELECT target, spec, updated_ms FROM infera_registry_capture_settings "
                "ORDER BY target"));
  for (size_t i = 0; i < c.rows.size(); ++i)
    s.captures.push_back(captureFromSpec(c.text(i, 0), c.text(i, 1), c.integer(i, 2)));
  INFERA_ASSIGN_OR_RETURN(s.opt_out_keys, optOutKeys());
  return s;
}

// ---------------- shadow outcomes, capture, review ----------------

Status RegistryStore::insertShadow(const std::vector<gateway::ShadowOutcome>& batch,
                                   int64_t max_rows) {
  if (batch.empty()) return Status::ok();
  INFERA_RETURN_IF_ERROR(db_->begin());
  Status s;
  for (const auto& o : batch) {
    auto r = db_->exec(
        "INSERT INTO infera_registry_shadow (ts_ms, request_id, model, primary_route, "
        "shadow_route, status, error, "
        "latency_ms, primary_latency_ms, prompt_tokens, completion_tokens, matched) VALUES (?1, "
        "?2, ?3, ?4, ?5, ?6, "
        "?7, ?8, ?9, ?10, ?11, ?12)",
        {num(o.ts_ms), text(o.request_id), text(o.model), text(o.primary), text(o.shadow),
         num(o.status), text(o.error), SqlValue(o.latency_ms), SqlValue(o.primary_latency_ms),
         num(o.prompt_tokens), num(o.completion_tokens), num(o.matched)});
    if (!r.ok()) {
      s = r.takeStatus();
      break;
    }
  }
  if (s.isOk()) {
    // Bounded: the oldest rows beyond max_rows go.
    auto p = db_->exec(
        "DELETE FROM infera_registry_shadow WHERE ts_ms < (SELECT ts_ms FROM "
        "infera_registry_shadow "
        "ORDER BY ts_ms DESC LIMIT 1 OFFSET ?1)",
        {num(max_rows)});
    if (!p.ok()) s = p.takeStatus();
  }
  if (!s.isOk()) {
    (void)db_->rollback();
    return s;
  }
  return db_->commit();
}

Result<std::vector<gateway::ShadowOutcome>> RegistryStore::shadowOutcomes(const std::string& model,
                                                                          int limit) {
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r,
      db_->exec("SELECT ts_ms, request_id, model, primary_route, shadow_route, status, error, "
                "latency_ms, primary_latency_ms, prompt_tokens, completion_tokens, matched FROM "
                "infera_registry_shadow WHERE model = ?1 ORDER BY ts_ms DESC LIMIT ?2",
                {text(model), num(limit)}));
  std::vector<gateway::ShadowOutcome> out;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    gateway::ShadowOutcome o;
    o.ts_ms = r.integer(i, 0);
    o.request_id = r.text(i, 1);
    o.model = r.text(i, 2);
    o.primary = r.text(i, 3);
    o.shadow = r.text(i, 4);
    o.status = static_cast<int>(r.integer(i, 5));
    o.error = r.text(i, 6);
    o.latency_ms = r.real(i, 7);
    o.primary_latency_ms = r.real(i, 8);
    o.prompt_tokens = r.integer(i, 9);
    o.completion_tokens = r.integer(i, 10);
    o.matched = static_cast<int>(r.integer(i, 11));
    out.push_back(std::move(o));
  }
  return out;
}

Result<std::optional<CaptureSettings>> RegistryStore::captureSettings(const std::string& target) {
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r, db_->exec("SELECT spec, updated_ms FROM infera_registry_capture_settings WHERE "
                             "target = ?1",
                             {text(target)}));
  if (r.rows.empty()) return std::optional<CaptureSettings>();
  return std::optional<CaptureSettings>(captureFromSpec(target, r.text(0, 0), r.integer(0, 1)));
}

Status RegistryStore::setCapture(const CaptureSettings& c) {
  const int64_t ts = now();
  const size_t slash = c.target.rfind('/');
  if (slash == std::string::npos)
    return Status::invalidArgument("capture target must be name/version");
  const std::string name = c.target.substr(0, slash);
  INFERA_ASSIGN_OR_RETURN(int64_t version, parseVersion(c.target.substr(slash + 1)));
  return mutate([&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(SqlResult e,
                            db_->exec("SELECT 1 FROM infera_registry_versions WHERE name = ?1 AND "
                                      "version = ?2 AND deleted = 0",
                                      {text(name), num(version)}));
    if (e.rows.empty()) return versionMissing(name, version);
    auto r = db_->exec(
        "INSERT INTO infera_registry_capture_settings (target, spec, updated_ms) VALUES (?1, ?2, "
        "?3) "
        "ON CONFLICT (target) DO UPDATE SET spec = excluded.spec, updated_ms = excluded.updated_ms",
        {text(c.target), text(dumpJson(captureSpec(c))), num(ts)});
    return r.ok() ? Status::ok() : conflictToRetry(r.takeStatus());
  });
}

Status RegistryStore::deleteCapture(const std::string& target) {
  return mutate([&]() -> Status {
    auto r =
        db_->exec("DELETE FROM infera_registry_capture_settings WHERE target = ?1", {text(target)});
    return r.ok() ? Status::ok() : r.takeStatus();
  });
}

Result<std::vector<std::string>> RegistryStore::optOutKeys() {
  INFERA_ASSIGN_OR_RETURN(SqlResult r,
                          db_->exec("SELECT key_id FROM infera_registry_optout ORDER BY key_id"));
  std::vector<std::string> out;
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(r.text(i, 0));
  return out;
}

Status RegistryStore::setOptOut(const std::string& key_id, bool out) {
  const int64_t ts = now();
  return mutate([&]() -> Status {
    auto r =
        out ? db_->exec(
                  "INSERT INTO infera_registry_optout (key_id, ts_ms) VALUES (?1, ?2) ON CONFLICT "
                  "(key_id) "
                  "DO NOTHING",
                  {text(key_id), num(ts)})
            : db_->exec("DELETE FROM infera_registry_optout WHERE key_id = ?1", {text(key_id)});
    return r.ok() ? Status::ok() : conflictToRetry(r.takeStatus());
  });
}

Status RegistryStore::insertCaptures(const std::vector<gateway::CapturedInference>& batch,
                                     int64_t max_rows) {
  if (batch.empty()) return Status::ok();
  INFERA_RETURN_IF_ERROR(db_->begin());
  Status s;
  std::set<std::string> targets;
  for (const auto& c : batch) {
    targets.insert(c.target);
    // Queried by registered model: the route's name up to its version or alias.
    const std::string model = c.target.substr(0, c.target.find_first_of("/@"));
    // A flag that came first (by request id) keeps its reason and verdict; the capture fills in
    // the rest.
    auto r = db_->exec(
        "INSERT INTO infera_registry_captures (request_id, ts_ms, model, target, arm, key_id, "
        "status, latency_ms, "
        "request, response, captured, flagged, reason, flagged_by, flagged_ms, verdict, label, "
        "reviewer, note, "
        "reviewed_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 1, ?11, ?12, ?13, ?14, '', "
        "'', '', '', 0) "
        "ON CONFLICT (request_id) DO UPDATE SET ts_ms = excluded.ts_ms, model = excluded.model, "
        "target = "
        "excluded.target, arm = excluded.arm, key_id = excluded.key_id, status = excluded.status, "
        "latency_ms = "
        "excluded.latency_ms, request = excluded.request, response = excluded.response, captured = "
        "1",
        {text(c.request_id), num(c.ts_ms), text(model), text(c.target), text(c.arm), text(c.key_id),
         num(c.status), SqlValue(c.latency_ms), text(capturedText(c.request)),
         text(capturedText(c.response)), num(c.flagged ? 1 : 0), text(c.reason),
         text(c.flagged ? "rule" : ""), num(c.flagged ? c.ts_ms : 0)});
    if (!r.ok()) {
      s = r.takeStatus();
      break;
    }
  }
  for (const auto& t : targets) {
    if (!s.isOk()) break;
    // Bounded per version: unflagged captures beyond max_rows go, oldest first.
    auto p = db_->exec(
        "DELETE FROM infera_registry_captures WHERE target = ?1 AND flagged = 0 AND ts_ms < "
        "(SELECT "
        "ts_ms FROM infera_registry_captures WHERE target = ?1 ORDER BY ts_ms DESC LIMIT 1 OFFSET "
        "?2)",
        {text(t), num(max_rows)});
    if (!p.ok()) s = p.takeStatus();
  }
  if (!s.isOk()) {
    (void)db_->rollback();
    return s;
  }
  return db_->commit();
}

Status RegistryStore::flag(const std::string& request_id, const std::string& reason,
                           const std::string& by, const std::string& model,
                           const std::string& target) {
  const int64_t ts = now();
  auto r = db_->exec(
      "INSERT INTO infera_registry_captures (request_id, ts_ms, model, target, arm, key_id, "
      "status, latency_ms, "
      "request, response, captured, flagged, reason, flagged_by, flagged_ms, verdict, label, "
      "reviewer, note, "
      "reviewed_ms) VALUES (?1, ?2, ?3, ?4, '', '', 0, 0, '', '', 0, 1, ?5, ?6, ?2, '', '', '', "
      "'', 0) "
      "ON CONFLICT (request_id) DO UPDATE SET flagged = 1, reason = excluded.reason, flagged_by = "
      "excluded.flagged_by, "
      "flagged_ms = excluded.flagged_ms, model = CASE WHEN infera_registry_captures.model = '' "
      "THEN excluded.model "
      "ELSE infera_registry_captures.model END, target = CASE WHEN infera_registry_captures.target "
      "= '' THEN "
      "excluded.target ELSE infera_registry_captures.target END",
      {text(request_id), num(ts), text(model), text(target), text(reason), text(by)});
  return r.ok() ? Status::ok() : r.takeStatus();
}

Status RegistryStore::review(const std::string& request_id, const std::string& verdict,
                             const std::string& label, const std::string& reviewer,
                             const std::string& note) {
  const int64_t ts = now();
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r,
      db_->exec(
          "UPDATE infera_registry_captures SET verdict = ?2, label = ?3, reviewer "
          "= ?4, note = ?5, reviewed_ms = ?6 WHERE request_id = ?1",
          {text(request_id), text(verdict), text(label), text(reviewer), text(note), num(ts)}));
  if (r.affected == 0)
    return Status::notFound("no captured or flagged inference with request id " + request_id);
  return Status::ok();
}

namespace {
constexpr const char* kReviewCols =
    "request_id, ts_ms, model, target, arm, key_id, status, latency_ms, request, response, "
    "flagged, reason, "
    "flagged_by, flagged_ms, verdict, label, reviewer, note, reviewed_ms";

ReviewItem reviewFromRow(const SqlResult& r, size_t i) {
  ReviewItem it;
  it.request_id = r.text(i, 0);
  it.ts_ms = r.integer(i, 1);
  it.model = r.text(i, 2);
  it.target = r.text(i, 3);
  it.arm = r.text(i, 4);
  it.key_id = r.text(i, 5);
  it.status = static_cast<int>(r.integer(i, 6));
  it.latency_ms = r.real(i, 7);
  it.request = r.text(i, 8);
  it.response = r.text(i, 9);
  it.flagged = r.integer(i, 10) != 0;
  it.reason = r.text(i, 11);
  it.flagged_by = r.text(i, 12);
  it.flagged_ms = r.integer(i, 13);
  it.verdict = r.text(i, 14);
  it.label = r.text(i, 15);
  it.reviewer = r.text(i, 16);
  it.note = r.text(i, 17);
  it.reviewed_ms = r.integer(i, 18);
  return it;
}
}  // namespace

Result<std::vector<ReviewItem>> RegistryStore::reviews(const ReviewQuery& q) {
  std::string sql =
      std::string("SELECT ") + kReviewCols + " FROM infera_registry_captures WHERE 1 = 1";
  std::vector<SqlValue> params;
  auto param = [&](SqlValue v) {
    params.push_back(std::move(v));
    return "?" + std::to_string(params.size());
  };
  if (!q.model.empty()) sql += " AND model = " + param(text(q.model));
  if (!q.target.empty()) sql += " AND target = " + param(text(q.target));
  if (q.state == "pending") sql += " AND flagged = 1 AND verdict = ''";
  if (q.state == "reviewed") sql += " AND verdict <> ''";
  if (q.state == "flagged") sql += " AND flagged = 1";
  if (q.state == "captured") sql += " AND captured = 1";
  if (!q.after.empty()) {
    sql +=
        " AND (ts_ms, request_id) > (SELECT ts_ms, request_id FROM infera_registry_captures WHERE "
        "request_id = " +
        param(text(q.after)) + ")";
  }
  sql += " ORDER BY ts_ms, request_id LIMIT " + param(num(q.limit));
  INFERA_ASSIGN_OR_RETURN(SqlResult r, db_->exec(sql, params));
  std::vector<ReviewItem> out;
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(reviewFromRow(r, i));
  return out;
}

Result<std::optional<ReviewItem>> RegistryStore::reviewItem(const std::string& request_id) {
  INFERA_ASSIGN_OR_RETURN(SqlResult r,
                          db_->exec(std::string("SELECT ") + kReviewCols +
                                        " FROM infera_registry_captures WHERE request_id = ?1",
                                    {text(request_id)}));
  if (r.rows.empty()) return std::optional<ReviewItem>();
  return std::optional<ReviewItem>(reviewFromRow(r, 0));
}

}  // namespace infera::registry
