// The admin API of access control on the admin port: teams, users, keys, usage and audit. Each
// route's handler runs with the admin store's lock held (it blocks on SQL: the admin port has its
// own loop); a change reaches this replica's workers before the answer leaves (so a key works as
// soon as it is shown), other replicas poll for it.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "access/internal/governance.h"
#include "core/json.h"
#include "core/log.h"
#include "core/text.h"
#include "net/router.h"

namespace infera::access {

using nlohmann::json;

namespace {

// "30s", "15m", "12h", "7d" -> ms; plain digits are ms.
std::optional<int64_t> parseDuration(std::string_view s) {
  if (s.empty()) return std::nullopt;
  int64_t mult = 1;
  const char unit = s.back();
  if (unit == 's') mult = 1000;
  if (unit == 'm') mult = 60'000;
  if (unit == 'h') mult = 3'600'000;
  if (unit == 'd') mult = 86'400'000;
  if (mult != 1 || unit == 's') s.remove_suffix(1);
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
    if (v > (1LL << 50)) return std::nullopt;
  }
  return v * mult;
}

// Query-string decoding: '+' is a space; a malformed escape leaves the text as it came.
std::string urlDecode(std::string_view s) {
  std::string spaced(s);
  for (char& c : spaced) {
    if (c == '+') c = ' ';
  }
  std::string out;
  return percentDecode(spaced, out) ? out : spaced;
}

std::unordered_map<std::string, std::string> parseQuery(std::string_view q) {
  std::unordered_map<std::string, std::string> out;
  size_t i = 0;
  while (i < q.size()) {
    size_t amp = q.find('&', i);
    if (amp == std::string_view::npos) amp = q.size();
    const std::string_view kv = q.substr(i, amp - i);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      out[urlDecode(kv)] = "";
    } else {
      out[urlDecode(kv.substr(0, eq))] = urlDecode(kv.substr(eq + 1));
    }
    i = amp + 1;
  }
  return out;
}

AdminReply errorReply(int status, const std::string& message, std::string_view code) {
  const std::string_view type = status == 401 || status == 403 ? "authentication_error"
                                : status >= 500                ? "server_error"
                                                               : "invalid_request_error";
  return {status, net::errorJson(message, type, code)};
}

AdminReply statusReply(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound:
      return errorReply(404, s.message(), "not_found");
    case StatusCode::kAlreadyExists:
      return errorReply(409, s.message(), "already_exists");
    case StatusCode::kInvalidArgument:
      return errorReply(400, s.message(), "invalid_request");
    case StatusCode::kFailedPrecondition:
      return errorReply(409, s.message(), "conflict");
    case StatusCode::kUnavailable:
      return errorReply(503, s.message(), "store_unavailable");
    default:
      return errorReply(500, s.message(), "internal_error");
  }
}

json teamToJson(const TeamRecord& t) {
  json j = fieldsJson(t);
  j["created_ms"] = t.created_ms;
  j["updated_ms"] = t.updated_ms;
  return j;
}

json userToJson(const UserRecord& u) {
  json j = fieldsJson(u);
  j["created_ms"] = u.created_ms;
  j["updated_ms"] = u.updated_ms;
  return j;
}

json keyToJson(const KeyRecord& k, int64_t now) {
  json j = fieldsJson(k);  // never the secret, salt or hash
  j["created_ms"] = k.created_ms;
  j["revoked_ms"] = k.revoked_ms;
  j["rotated_from"] = k.rotated_from;
  j["state"] = k.revoked_ms                            ? "revoked"
               : (k.expires_ms && k.expires_ms <= now) ? "expired"
                                                       : "active";
  return j;
}

// Reads typed fields from a JSON body with clear errors.
struct BodyReader {
  const json& j;
  std::string error;
  template <typename T>
  bool get(const char* name, T& out) {
    if (!j.contains(name) || j[name].is_null()) return false;
    try {
      out = j[name].get<T>();
      return true;
    } catch (const std::exception&) {
      if (error.empty()) error = std::string("field '") + name + "' has the wrong type";
      return false;
    }
  }
  bool models(std::vector<std::string>& out) {
    if (!j.contains("models")) return false;
    if (j["models"].is_string()) {
      out = splitPatterns(j["models"].get<std::string>());
      return true;
    }
    return get("models", out);
  }
};

Status checkNonNegative(const char* name, int64_t v) {
  if (v < 0) return Status::invalidArgument(std::string(name) + " must be >= 0");
  return Status::ok();
}

Status readTeam(const json& j, TeamRecord& t, bool create) {
  BodyReader r{j, {}};
  if (create && !r.get("name", t.name)) return Status::invalidArgument("field 'name' is required");
  if (create && (t.name.empty() || t.name.size() > 128 ||
                 t.name.find_first_of(" ,/\":") != std::string::npos)) {
    return Status::invalidArgument(
        "team name must be 1-128 characters without spaces, commas, slashes, colons or quotes");
  }
  r.models(t.models);
  r.get("rpm", t.rpm);
  r.get("tpm", t.tpm);
  r.get("daily_tokens", t.daily_tokens);
  r.get("user_rpm", t.user_rpm);
  r.get("user_tpm", t.user_tpm);
  r.get("budget_tokens", t.budget_tokens);
  r.get("budget_usd", t.budget_usd);
  r.get("budget_period", t.budget_period);
  if (!r.error.empty()) return Status::invalidArgument(r.error);
  INFERA_RETURN_IF_ERROR(checkNonNegative("rpm", t.rpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("tpm", t.tpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("daily_tokens", t.daily_tokens));
  INFERA_RETURN_IF_ERROR(checkNonNegative("user_rpm", t.user_rpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("user_tpm", t.user_tpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("budget_tokens", t.budget_tokens));
  if (t.budget_usd < 0) return Status::invalidArgument("budget_usd must be >= 0");
  if (t.budget_period != "day" && t.budget_period != "month") {
    return Status::invalidArgument("budget_period must be 'day' or 'month'");
  }
  return Status::ok();
}

Status readUser(const json& j, UserRecord& u, bool create) {
  BodyReader r{j, {}};
  if (create && !r.get("team", u.team)) return Status::invalidArgument("field 'team' is required");
  if (create && !r.get("name", u.name)) return Status::invalidArgument("field 'name' is required");
  if (create &&
      (u.name.empty() || u.name.size() > 128 || u.name.find_first_of("\n/") != std::string::npos)) {
    return Status::invalidArgument(
        "user name must be 1-128 characters without slashes or newlines");
  }
  r.models(u.models);
  r.get("rpm", u.rpm);
  r.get("tpm", u.tpm);
  r.get("daily_tokens", u.daily_tokens);
  r.get("budget_tokens", u.budget_tokens);
  r.get("budget_usd", u.budget_usd);
  if (!r.error.empty()) return Status::invalidArgument(r.error);
  INFERA_RETURN_IF_ERROR(checkNonNegative("rpm", u.rpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("tpm", u.tpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("daily_tokens", u.daily_tokens));
  INFERA_RETURN_IF_ERROR(checkNonNegative("budget_tokens", u.budget_tokens));
  if (u.budget_usd < 0) return Status::invalidArgument("budget_usd must be >= 0");
  return Status::ok();
}

Status readKey(const json& j, KeyRecord& k, bool create, int64_t now_ms) {
  BodyReader r{j, {}};
  if (create && !r.get("team", k.team)) return Status::invalidArgument("field 'team' is required");
  r.get("name", k.name);
  r.models(k.models);
  r.get("rpm", k.rpm);
  r.get("tpm", k.tpm);
  r.get("allow_user", k.allow_user);
  std::string expires_in;
  if (r.get("expires_in", expires_in)) {
    const auto d = parseDuration(expires_in);
    if (!d || *d <= 0)
      return Status::invalidArgument("expires_in must be a duration like 30d, 12h, 15m");
    k.expires_ms = now_ms + *d;
  }
  r.get("expires_ms", k.expires_ms);
  if (!r.error.empty()) return Status::invalidArgument(r.error);
  INFERA_RETURN_IF_ERROR(checkNonNegative("rpm", k.rpm));
  INFERA_RETURN_IF_ERROR(checkNonNegative("tpm", k.tpm));
  return Status::ok();
}

}  // namespace

std::string denialJson(const Denial& d) { return net::errorJson(d.message, d.type, d.code); }

std::optional<Denial> Governance::refuseAdmin(std::string_view authorization) const {
  if (admin_token_.empty()) {
    return Denial{403,
                  "the admin API is disabled: set INFERA_ADMIN_TOKEN, governance.admin_token or "
                  "governance.admin_token_file",
                  "authentication_error", "admin_disabled"};
  }
  std::string_view given = authorization;
  if (given.size() > 7 && (given.substr(0, 7) == "Bearer " || given.substr(0, 7) == "bearer "))
    given.remove_prefix(7);
  if (!constantTimeEqual(given, admin_token_)) {
    if (teamCaller(authorization)) {
      return Denial{403,
                    "team keys are read-only on the admin port (their team's keys, users and "
                    "usage): this needs the admin token",
                    "permission_error", "admin_token_required"};
    }
    return Denial{401, "missing or wrong admin token (Authorization: Bearer <token>)",
                  "authentication_error", "invalid_admin_token"};
  }
  return std::nullopt;
}

std::optional<TeamCaller> Governance::teamCaller(std::string_view authorization) const {
  std::string_view token = authorization;
  if (token.size() > 7 && (token.substr(0, 7) == "Bearer " || token.substr(0, 7) == "bearer ")) {
    token.remove_prefix(7);
  }
  std::string_view id, secret;
  if (!parseKeyToken(token, id, secret)) return std::nullopt;
  const auto snap = snapshot();
  if (!snap) return std::nullopt;
  const auto it = snap->by_id.find(std::string(id));
  if (it == snap->by_id.end()) return std::nullopt;  // unknown or revoked
  const KeyRecord& k = it->second->rec;
  if (!constantTimeEqual(hashSecret(key_secret_, k.salt, secret), k.hash)) return std::nullopt;
  if (k.expires_ms != 0 && k.expires_ms <= nowMs()) return std::nullopt;
  return TeamCaller{k.team, k.id, k.name};
}

Status Governance::audit(std::string_view actor, const std::string& action,
                         const std::string& target, const std::string& detail) {
  std::lock_guard<std::mutex> lock(admin_mu_);
  return admin_store_->recordEvent(actor.empty() ? "admin" : std::string(actor), action, target,
                                   detail);
}

void Governance::addAdminRoute(net::Router& router, std::string_view method,
                               std::string_view pattern, AdminFn fn) {
  const bool mutates = method != "GET";
  router.add(method, pattern,
             [this, mutates, fn = std::move(fn)](net::HttpRequest& req, net::ResponseWriter& w,
                                                 net::PathParams params) -> net::Task<void> {
               AdminReply r;
               if (auto refused = refuseAdmin(req.header("authorization"))) {
                 r = {refused->status, denialJson(*refused)};
               } else {
                 std::lock_guard<std::mutex> lock(admin_mu_);
                 const std::string_view actor = req.header("x-infera-actor");
                 r = fn(req, params, *admin_store_,
                        actor.empty() ? std::string("admin") : std::string(actor));
                 if (mutates && r.status < 300) {
                   const Status s = sync(false);
                   if (!s.isOk())
                     INFERA_LOG(log, warn, "snapshot refresh after an admin change failed: {}",
                                s.message());
                 }
               }
               co_await w.send(r.status, "application/json", r.body);
             });
}

void Governance::addTeamReadRoute(net::Router& router, std::string_view pattern, AdminFn fn) {
  router.add("GET", pattern,
             [this, fn = std::move(fn)](net::HttpRequest& req, net::ResponseWriter& w,
                                        net::PathParams params) -> net::Task<void> {
               AdminReply r;
               std::string team;  // "" = the admin
               std::optional<Denial> refused = refuseAdmin(req.header("authorization"));
               if (refused) {
                 if (auto caller = teamCaller(req.header("authorization"))) {
                   team = std::move(caller->team);
                   refused.reset();
                 }
               }
               if (refused) {
                 r = {refused->status, denialJson(*refused)};
               } else {
                 std::lock_guard<std::mutex> lock(admin_mu_);
                 r = fn(req, params, *admin_store_, team);
               }
               co_await w.send(r.status, "application/json", r.body);
             });
}

namespace {

// For a team key's call (`scope` its team): the team a query names must be its own.
std::optional<AdminReply> outsideScope(const std::string& scope, const std::string& asked) {
  if (scope.empty() || asked.empty() || asked == scope) return std::nullopt;
  return errorReply(403, "a key of team '" + scope + "' may read only its own team", "other_team");
}

std::optional<AdminReply> parseBody(std::string_view body, json& out) {
  if (body.empty()) {
    out = json::object();
    return std::nullopt;
  }
  auto read = readJson(body);
  if (!read.ok()) return errorReply(400, read.status().message(), "invalid_json");
  out = std::move(*read);
  if (!out.is_object())
    return errorReply(400, "request body must be a JSON object", "invalid_json");
  return std::nullopt;
}

std::string queryOf(const net::HttpRequest& req) {
  const size_t q = req.target.find('?');
  return q == std::string::npos ? std::string() : req.target.substr(q + 1);
}

// A path parameter, percent-decoded as the admin API always read them.
std::string param(const net::PathParams& p, std::string_view name) { return urlDecode(p[name]); }

}  // namespace

void Governance::addAdminRoutes(net::Router& r) {
  // Teams.
  addAdminRoute(r, "GET", "/admin/teams",
                [](net::HttpRequest&, const net::PathParams&, MetaStore& st, const std::string&) {
                  auto teams = st.teams();
                  if (!teams.ok()) return statusReply(teams.status());
                  json arr = json::array();
                  for (const auto& t : *teams) arr.push_back(teamToJson(t));
                  return AdminReply{200, dumpJson(json{{"teams", arr}})};
                });
  addAdminRoute(
      r, "POST", "/admin/teams",
      [](net::HttpRequest& req, const net::PathParams&, MetaStore& st, const std::string& actor) {
        json j;
        if (auto e = parseBody(req.body, j)) return *e;
        TeamRecord t;
        if (Status s = readTeam(j, t, true); !s.isOk()) return statusReply(s);
        if (Status s = st.createTeam(t, actor); !s.isOk()) return statusReply(s);
        auto created = st.team(t.name);
        return AdminReply{201, dumpJson(teamToJson(created.ok() && *created ? **created : t))};
      });
  auto team = [](MetaStore& st, const std::string& id,
                 std::optional<TeamRecord>& out) -> std::optional<AdminReply> {
    auto cur = st.team(id);
    if (!cur.ok()) return statusReply(cur.status());
    if (!*cur) return errorReply(404, "no team '" + id + "'", "not_found");
    out = std::move(*cur);
    return std::nullopt;
  };
  addTeamReadRoute(
      r, "/admin/teams/{name}",
      [team](net::HttpRequest&, const net::PathParams& p, MetaStore& st, const std::string& scope) {
        std::optional<TeamRecord> cur;
        const std::string name = param(p, "name");
        if (!scope.empty() && name != scope) {
          return errorReply(404, "no team '" + name + "'", "not_found");
        }
        if (auto e = team(st, name, cur)) return *e;
        return AdminReply{200, dumpJson(teamToJson(*cur))};
      });
  addAdminRoute(
      r, "PATCH", "/admin/teams/{name}",
      [team](net::HttpRequest& req, const net::PathParams& p, MetaStore& st,
             const std::string& actor) {
        const std::string id = param(p, "name");
        std::optional<TeamRecord> cur;
        if (auto e = team(st, id, cur)) return *e;
        json j;
        if (auto e = parseBody(req.body, j)) return *e;
        TeamRecord t = *cur;
        if (Status s = readTeam(j, t, false); !s.isOk()) return statusReply(s);
        if (Status s = st.updateTeam(t, actor); !s.isOk()) return statusReply(s);
        auto updated = st.team(id);
        return AdminReply{200, dumpJson(teamToJson(updated.ok() && *updated ? **updated : t))};
      });
  addAdminRoute(
      r, "DELETE", "/admin/teams/{name}",
      [team](net::HttpRequest&, const net::PathParams& p, MetaStore& st, const std::string& actor) {
        const std::string id = param(p, "name");
        std::optional<TeamRecord> cur;
        if (auto e = team(st, id, cur)) return *e;
        if (Status s = st.deleteTeam(id, actor); !s.isOk()) return statusReply(s);
        return AdminReply{200, dumpJson(json{{"deleted", id}})};
      });

  // Users: /admin/users[?team=T] (GET list, POST create), /admin/users/{team}/{name}.
  addTeamReadRoute(
      r, "/admin/users",
      [](net::HttpRequest& req, const net::PathParams&, MetaStore& st, const std::string& scope) {
        const auto query = parseQuery(queryOf(req));
        const auto it = query.find("team");
        const std::string asked = it == query.end() ? "" : it->second;
        if (auto e = outsideScope(scope, asked)) return *e;
        auto users = st.users(scope.empty() ? asked : scope);
        if (!users.ok()) return statusReply(users.status());
        json arr = json::array();
        for (const auto& u : *users) arr.push_back(userToJson(u));
        return AdminReply{200, dumpJson(json{{"users", arr}})};
      });
  addAdminRoute(
      r, "POST", "/admin/users",
      [](net::HttpRequest& req, const net::PathParams&, MetaStore& st, const std::string& actor) {
        json j;
        if (auto e = parseBody(req.body, j)) return *e;
        UserRecord u;
        if (Status s = readUser(j, u, true); !s.isOk()) return statusReply(s);
        if (Status s = st.createUser(u, actor); !s.isOk()) return statusReply(s);
        auto created = st.user(u.team, u.name);
        return AdminReply{201, dumpJson(userToJson(created.ok() && *created ? **created : u))};
      });
  auto user = [](MetaStore& st, const net::PathParams& p,
                 std::optional<UserRecord>& out) -> std::optional<AdminReply> {
    const std::string tm = param(p, "team"), name = param(p, "name");
    auto cur = st.user(tm, name);
    if (!cur.ok()) return statusReply(cur.status());
    if (!*cur) return errorReply(404, "no user '" + name + "' in team '" + tm + "'", "not_found");
    out = std::move(*cur);
    return std::nullopt;
  };
  addAdminRoute(
      r, "GET", "/admin/users/{team}/{name}",
      [user](net::HttpRequest&, const net::PathParams& p, MetaStore& st, const std::string&) {
        std::optional<UserRecord> cur;
        if (auto e = user(st, p, cur)) return *e;
        return AdminReply{200, dumpJson(userToJson(*cur))};
      });
  addAdminRoute(
      r, "PATCH", "/admin/users/{team}/{name}",
      [user](net::HttpRequest& req, const net::PathParams& p, MetaStore& st,
             const std::string& actor) {
        std::optional<UserRecord> cur;
        if (auto e = user(st, p, cur)) return *e;
        json j;
        if (auto e = parseBody(req.body, j)) return *e;
        UserRecord u = *cur;
        if (Status s = readUser(j, u, false); !s.isOk()) return statusReply(s);
        if (Status s = st.updateUser(u, actor); !s.isOk()) return statusReply(s);
        auto updated = st.user(u.team, u.name);
        return AdminReply{200, dumpJson(userToJson(updated.ok() && *updated ? **updated : u))};
      });
  addAdminRoute(
      r, "DELETE", "/admin/users/{team}/{name}",
      [user](net::HttpRequest&, const net::PathParams& p, MetaStore& st, const std::string& actor) {
        std::optional<UserRecord> cur;
        if (auto e = user(st, p, cur)) return *e;
        if (Status s = st.deleteUser(cur->team, cur->name, actor); !s.isOk()) return statusReply(s);
        return AdminReply{200, dumpJson(json{{"deleted", cur->team + "/" + cur->name}})};
      });

  // Keys.
  addTeamReadRoute(r, "/admin/keys",
                   [this](net::HttpRequest& req, const net::PathParams&, MetaStore& st,
                          const std::string& scope) {
                     const auto query = parseQuery(queryOf(req));
                     const auto it = query.find("team");
                     const std::string asked = it == query.end() ? "" : it->second;
                     if (auto e = outsideScope(scope, asked)) return *e;
                     auto keys = st.keys(scope.empty() ? asked : scope);
                     if (!keys.ok()) return statusReply(keys.status());
                     json arr = json::array();
                     for (const auto& k : *keys) arr.push_back(keyToJson(k, nowMs()));
                     return AdminReply{200, dumpJson(json{{"keys", arr}})};
                   });
  addAdminRoute(r, "POST", "/admin/keys",
                [this](net::HttpRequest& req, const net::PathParams&, MetaStore& st,
                       const std::string& actor) {
                  json j;
                  if (auto e = parseBody(req.body, j)) return *e;
                  KeyRecord k;
                  if (Status s = readKey(j, k, true, nowMs()); !s.isOk()) return statusReply(s);
                  auto token = st.createKey(k, key_secret_, actor);
                  if (!token.ok()) return statusReply(token.status());
                  json out = keyToJson(k, nowMs());
                  out["key"] = *token;
                  out["note"] = "store this key now: it is shown only once";
                  return AdminReply{201, dumpJson(out)};
                });
  auto key = [](MetaStore& st, const std::string& id,
                std::optional<KeyRecord>& out) -> std::optional<AdminReply> {
    auto cur = st.key(id);
    if (!cur.ok()) return statusReply(cur.status());
    if (!*cur) return errorReply(404, "no key '" + id + "'", "not_found");
    out = std::move(*cur);
    return std::nullopt;
  };
  addTeamReadRoute(r, "/admin/keys/{id}",
                   [this, key](net::HttpRequest&, const net::PathParams& p, MetaStore& st,
                               const std::string& scope) {
                     std::optional<KeyRecord> cur;
                     if (auto e = key(st, param(p, "id"), cur)) return *e;
                     if (!scope.empty() && cur->team != scope) {
                       return errorReply(404, "no key '" + param(p, "id") + "'", "not_found");
                     }
                     return AdminReply{200, dumpJson(keyToJson(*cur, nowMs()))};
                   });
  addAdminRoute(r, "PATCH", "/admin/keys/{id}",
                [this, key](net::HttpRequest& req, const net::PathParams& p, MetaStore& st,
                            const std::string& actor) {
                  std::optional<KeyRecord> cur;
                  if (auto e = key(st, param(p, "id"), cur)) return *e;
                  json j;
                  if (auto e = parseBody(req.body, j)) return *e;
                  KeyRecord k = *cur;
                  if (Status s = readKey(j, k, false, nowMs()); !s.isOk()) return statusReply(s);
                  if (Status s = st.updateKey(k, actor); !s.isOk()) return statusReply(s);
                  return AdminReply{200, dumpJson(keyToJson(k, nowMs()))};
                });
  addAdminRoute(r, "POST", "/admin/keys/{id}/revoke",
                [this, key](net::HttpRequest&, const net::PathParams& p, MetaStore& st,
                            const std::string& actor) {
                  const std::string id = param(p, "id");
                  std::optional<KeyRecord> cur;
                  if (auto e = key(st, id, cur)) return *e;
                  if (Status s = st.revokeKey(id, actor); !s.isOk()) return statusReply(s);
                  auto k = st.key(id);
                  return AdminReply{200, dumpJson(keyToJson(k.ok() && *k ? **k : *cur, nowMs()))};
                });
  addAdminRoute(r, "POST", "/admin/keys/{id}/rotate",
                [this, key](net::HttpRequest& req, const net::PathParams& p, MetaStore& st,
                            const std::string& actor) {
                  const std::string id = param(p, "id");
                  std::optional<KeyRecord> cur;
                  if (auto e = key(st, id, cur)) return *e;
                  json j;
                  if (auto e = parseBody(req.body, j)) return *e;
                  int64_t grace_ms = 86'400'000;
                  if (j.contains("grace") && j["grace"].is_string()) {
                    const auto d = parseDuration(j["grace"].get<std::string>());
                    if (!d)
                      return errorReply(400, "grace must be a duration like 24h, 15m or 0s",
                                        "invalid_request");
                    grace_ms = *d;
                  }
                  KeyRecord created;
                  auto token = st.rotateKey(id, grace_ms, key_secret_, actor, created);
                  if (!token.ok()) return statusReply(token.status());
                  json out = keyToJson(created, nowMs());
                  out["key"] = *token;
                  out["old_key_expires_ms"] = created.created_ms + grace_ms;
                  out["note"] = "store this key now: it is shown only once";
                  return AdminReply{201, dumpJson(out)};
                });

  // Usage and audit.
  addTeamReadRoute(
      r, "/admin/usage",
      [this](net::HttpRequest& req, const net::PathParams&, MetaStore& st,
             const std::string& scope) {
        const auto query = parseQuery(queryOf(req));
        UsageQuery uq;
        auto get = [&](const char* k) {
          const auto it = query.find(k);
          return it == query.end() ? std::string() : it->second;
        };
        uq.team = get("team");
        if (auto e = outsideScope(scope, uq.team)) return *e;
        if (!scope.empty()) uq.team = scope;
        uq.key_id = get("key");
        uq.model = get("model");
        uq.user = get("user");
        if (!get("granularity").empty()) uq.granularity = get("granularity");
        if (!get("group_by").empty()) uq.group_by = splitPatterns(get("group_by"));
        if (get("group_by") == "none") uq.group_by.clear();
        const std::string since = get("since"), from = get("from"), to = get("to");
        if (!since.empty()) {
          const auto d = parseDuration(since);
          if (!d)
            return errorReply(400, "since must be a duration like 1h or 7d", "invalid_request");
          uq.from_ms = nowMs() - *d;
        }
        try {
          if (!from.empty()) uq.from_ms = std::stoll(from);
          if (!to.empty()) uq.to_ms = std::stoll(to);
        } catch (const std::exception&) {
          return errorReply(400, "from and to are unix milliseconds", "invalid_request");
        }
        auto rows = st.queryUsage(uq);
        if (!rows.ok()) return statusReply(rows.status());
        return AdminReply{200,
                          "{\"granularity\":\"" + uq.granularity + "\",\"rows\":" + *rows + "}"};
      });
  addAdminRoute(
      r, "GET", "/admin/audit",
      [this](net::HttpRequest& req, const net::PathParams&, MetaStore& st, const std::string&) {
        const auto query = parseQuery(queryOf(req));
        int64_t since_ms = 0;
        int limit = 100;
        const auto it = query.find("since");
        if (it != query.end()) {
          const auto d = parseDuration(it->second);
          if (!d)
            return errorReply(400, "since must be a duration like 1h or 7d", "invalid_request");
          since_ms = nowMs() - *d;
        }
        const auto lt = query.find("limit");
        if (lt != query.end()) limit = std::clamp(std::atoi(lt->second.c_str()), 1, 10'000);
        auto rows = st.audit(since_ms, limit);
        if (!rows.ok()) return statusReply(rows.status());
        json arr = json::array();
        for (const auto& a : *rows) {
          json d = json::parse(a.detail, nullptr, false);
          arr.push_back({{"ts_ms", a.ts_ms},
                         {"actor", a.actor},
                         {"action", a.action},
                         {"target", a.target},
                         {"detail", d.is_discarded() ? json(a.detail) : d}});
        }
        return AdminReply{200, dumpJson(json{{"audit", arr}})};
      });
}

void addDisabledAdminRoutes(net::Router& r) {
  for (const char* prefix :
       {"/admin/teams", "/admin/users", "/admin/keys", "/admin/usage", "/admin/audit"}) {
    auto off = [](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> net::Task<void> {
      const std::string body =
          net::errorJson("governance is off: add a governance section to the config",
                         "invalid_request_error", "governance_disabled");
      co_await w.send(404, "application/json", body);
    };
    r.add("*", prefix, off);
    r.add("*", std::string(prefix) + "/{rest...}", off);
  }
}

}  // namespace infera::access
