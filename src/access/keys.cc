#include "access/internal/keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <bit>
#include <map>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/json.h"
#include "core/text.h"

namespace infera::access {

using store::SqlResult;
using store::SqlValue;

bool globMatch(std::string_view p, std::string_view t) {
  // Iterative match with backtracking to the last '*'.
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (pi < p.size() && p[pi] == t[ti]) {
      ++pi;
      ++ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::vector<std::string> splitPatterns(std::string_view csv) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= csv.size()) {
    size_t j = csv.find(',', i);
    if (j == std::string_view::npos) j = csv.size();
    std::string_view part = csv.substr(i, j - i);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (!part.empty()) out.emplace_back(part);
    i = j + 1;
  }
  return out;
}

namespace {

std::string joinPatterns(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& p : v) {
    if (!s.empty()) s += ',';
    s += p;
  }
  return s;
}

constexpr std::string_view kPrefix = "sk-inf-";
constexpr size_t kIdChars = 12;
constexpr size_t kSecretChars = 40;

}  // namespace

std::string randomToken(size_t chars) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string out;
  out.reserve(chars);
  unsigned char buf[64];
  while (out.size() < chars) {
    if (RAND_bytes(buf, sizeof(buf)) != 1) std::abort();  // no CSPRNG: nothing safe to do
    for (unsigned char b : buf) {
      if (b >= 248) continue;  // 248 = 4 * 62: keeps the draw uniform
      out += alphabet[b % 62];
      if (out.size() == chars) break;
    }
  }
  return out;
}

std::string keyToken(std::string_view id, std::string_view secret) {
  std::string t(kPrefix);
  t += id;
  t += '-';
  t += secret;
  return t;
}

bool parseKeyToken(std::string_view token, std::string_view& id, std::string_view& secret) {
  if (!token.starts_with(kPrefix) || token.size() != kPrefix.size() + kIdChars + 1 + kSecretChars)
    return false;
  id = token.substr(kPrefix.size(), kIdChars);
  if (token[kPrefix.size() + kIdChars] != '-') return false;
  secret = token.substr(kPrefix.size() + kIdChars + 1);
  return true;
}

std::string hashSecret(std::string_view server_secret, std::string_view salt,
                       std::string_view secret) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  std::string msg;
  msg.reserve(salt.size() + secret.size());
  msg.append(salt);
  msg.append(secret);
  HMAC(EVP_sha256(), server_secret.data(), static_cast<int>(server_secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return toHex(out, len);
}

bool constantTimeEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

nlohmann::json fieldsJson(const TeamRecord& t) {
  return {{"name", t.name},
          {"models", t.models},
          {"rpm", t.rpm},
          {"tpm", t.tpm},
          {"daily_tokens", t.daily_tokens},
          {"budget_tokens", t.budget_tokens},
          {"budget_usd", t.budget_usd},
          {"budget_period", t.budget_period},
          {"user_rpm", t.user_rpm},
          {"user_tpm", t.user_tpm}};
}

nlohmann::json fieldsJson(const UserRecord& u) {
  return {{"team", u.team},
          {"name", u.name},
          {"models", u.models},
          {"rpm", u.rpm},
          {"tpm", u.tpm},
          {"daily_tokens", u.daily_tokens},
          {"budget_tokens", u.budget_tokens},
          {"budget_usd", u.budget_usd}};
}

nlohmann::json fieldsJson(const KeyRecord& k) {
  return {{"id", k.id},
          {"team", k.team},
          {"name", k.name},
          {"models", k.models},
          {"rpm", k.rpm},
          {"tpm", k.tpm},
          {"allow_user", k.allow_user},
          {"expires_ms", k.expires_ms}};
}

// ---- MetaStore ----

Result<std::unique_ptr<MetaStore>> MetaStore::open(const std::string& url, const Clock& clock) {
  INFERA_ASSIGN_OR_RETURN(auto db, store::SqlDb::open(url));
  std::unique_ptr<MetaStore> s(new MetaStore(std::move(db), clock));
  INFERA_RETURN_IF_ERROR(s->migrate());
  return s;
}

Status MetaStore::migrate() {
  // Idempotent; several replicas may run it at once (PostgreSQL: IF NOT EXISTS + ON CONFLICT).
  const char* schema = R"sql(
CREATE TABLE IF NOT EXISTS infera_meta (k TEXT PRIMARY KEY, v BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS infera_teams (
  name TEXT PRIMARY KEY, models TEXT NOT NULL, rpm BIGINT NOT NULL, tpm BIGINT NOT NULL,
  daily_tokens BIGINT NOT NULL, budget_tokens BIGINT NOT NULL, budget_usd DOUBLE PRECISION NOT NULL,
  budget_period TEXT NOT NULL, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL,
  user_rpm BIGINT NOT NULL DEFAULT 0, user_tpm BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS infera_keys (
  id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT NOT NULL, salt TEXT NOT NULL, hash TEXT NOT NULL,
  models TEXT NOT NULL, rpm BIGINT NOT NULL, tpm BIGINT NOT NULL, allow_user BIGINT NOT NULL,
  created_ms BIGINT NOT NULL, expires_ms BIGINT NOT NULL, revoked_ms BIGINT NOT NULL, rotated_from TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS infera_users (
  team TEXT NOT NULL, name TEXT NOT NULL, models TEXT NOT NULL, rpm BIGINT NOT NULL, tpm BIGINT NOT NULL,
  daily_tokens BIGINT NOT NULL, budget_tokens BIGINT NOT NULL, budget_usd DOUBLE PRECISION NOT NULL,
  created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL, PRIMARY KEY (team, name));
CREATE TABLE IF NOT EXISTS infera_audit (
  ts_ms BIGINT NOT NULL, seq BIGINT NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL,
  detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS infera_usage (
  ts_ms BIGINT NOT NULL, request_id TEXT NOT NULL, key_id TEXT NOT NULL, team TEXT NOT NULL,
  user_id TEXT NOT NULL, model TEXT NOT NULL, deployment TEXT NOT NULL, region TEXT NOT NULL,
  prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL, latency_ms DOUBLE PRECISION NOT NULL,
  ttft_ms DOUBLE PRECISION NOT NULL, status BIGINT NOT NULL, cached BIGINT NOT NULL, stream BIGINT NOT NULL,
  aborted BIGINT NOT NULL, estimated BIGINT NOT NULL, cost_usd DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS infera_usage_ts ON infera_usage (ts_ms);
CREATE TABLE IF NOT EXISTS infera_usage_minute (
  minute_ms BIGINT NOT NULL, team TEXT NOT NULL, key_id TEXT NOT NULL, user_id TEXT NOT NULL, model TEXT NOT NULL,
  deployment TEXT NOT NULL, requests BIGINT NOT NULL, prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL,
  cached BIGINT NOT NULL, aborted BIGINT NOT NULL, errors BIGINT NOT NULL, cost_usd DOUBLE PRECISION NOT NULL,
  latency_ms_sum DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (minute_ms, team, key_id, user_id, model, deployment));
CREATE INDEX IF NOT EXISTS infera_usage_minute_team ON infera_usage_minute (team, minute_ms);
DROP INDEX IF EXISTS infera_usage_team_ts;
CREATE INDEX IF NOT EXISTS infera_keys_team ON infera_keys (team)
)sql";
  INFERA_RETURN_IF_ERROR(db_->execScript(schema));
  // Columns added after a table was first made (stores written by an older version).
  for (const auto& [table, column] : {std::pair<const char*, const char*>{"infera_usage", "batch"},
                                      {"infera_usage_minute", "batch_requests"}}) {
    INFERA_RETURN_IF_ERROR(db_->addColumnIfMissing(table, column, "BIGINT NOT NULL DEFAULT 0"));
  }
  auto r = db_->exec(
      "INSERT INTO infera_meta (k, v) VALUES ('generation', 1) ON CONFLICT (k) DO NOTHING");
  if (!r.ok()) return r.status();
  // Stores written before the per-minute roll-ups existed get them from their raw records, once:
  // the replica whose insert of the marker lands does it, in the same transaction (on PostgreSQL
  // the others wait on the marker's row and then find it there).
  INFERA_RETURN_IF_ERROR(db_->begin());
  auto mark = db_->exec(
      "INSERT INTO infera_meta (k, v) VALUES ('usage_rollups', 1) ON CONFLICT (k) DO NOTHING");
  if (mark.ok() && mark->affected == 1) {
    mark = db_->exec(
        "INSERT INTO infera_usage_minute SELECT (ts_ms / 60000) * 60000, team, key_id, user_id, "
        "model, deployment, "
        "COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(cached), SUM(aborted), "
        "SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), SUM(cost_usd), SUM(latency_ms), "
        "SUM(batch) FROM infera_usage "
        "GROUP BY (ts_ms / 60000) * 60000, team, key_id, user_id, model, deployment");
  }
  if (!mark.ok()) {
    (void)db_->rollback();
    return mark.status();
  }
  return db_->commit();
}

Result<int64_t> MetaStore::generation() {
  INFERA_ASSIGN_OR_RETURN(SqlResult r,
                          db_->exec("SELECT v FROM infera_meta WHERE k = 'generation'"));
  if (r.rows.empty()) return Status::internal("infera_meta has no generation row");
  return r.integer(0, 0);
}

Status MetaStore::mutate(const std::string& actor, const std::string& action,
                         const std::string& target, const std::string& detail,
                         const std::function<Status()>& body) {
  INFERA_RETURN_IF_ERROR(db_->begin());
  Status s = body();
  if (s.isOk()) {
    auto g = db_->exec("UPDATE infera_meta SET v = v + 1 WHERE k = 'generation'");
    if (!g.ok()) s = g.status();
  }
  if (s.isOk()) {
    // seq (the new generation) orders changes made within one millisecond.
    auto a = db_->exec(
        "INSERT INTO infera_audit (ts_ms, seq, actor, action, target, detail) "
        "SELECT ?1, v, ?2, ?3, ?4, ?5 FROM infera_meta WHERE k = 'generation'",
        {SqlValue(clock_.unixMillis()), SqlValue(actor), SqlValue(action), SqlValue(target),
         SqlValue(detail)});
    if (!a.ok()) s = a.status();
  }
  if (!s.isOk()) {
    (void)db_->rollback();
    return s;
  }
  return db_->commit();
}

Status MetaStore::recordEvent(const std::string& actor, const std::string& action,
                              const std::string& target, const std::string& detail) {
  return mutate(actor, action, target, detail, [] { return Status::ok(); });
}

namespace {

constexpr const char* kUserCols =
    "team, name, models, rpm, tpm, daily_tokens, budget_tokens, budget_usd, created_ms, updated_ms";

UserRecord userFromRow(const SqlResult& r, size_t i) {
  UserRecord u;
  u.team = r.text(i, 0);
  u.name = r.text(i, 1);
  u.models = splitPatterns(r.text(i, 2));
  u.rpm = r.integer(i, 3);
  u.tpm = r.integer(i, 4);
  u.daily_tokens = r.integer(i, 5);
  u.budget_tokens = r.integer(i, 6);
  u.budget_usd = r.real(i, 7);
  u.created_ms = r.integer(i, 8);
  u.updated_ms = r.integer(i, 9);
  return u;
}

// A key's or user's (`what`) limits are at most the team's, its model patterns within the team's.
// One without its own limit (0) is held to the team's at request time.
Status checkWithinTeam(const char* what, int64_t rpm, int64_t tpm,
                       const std::vector<std::string>& models, const TeamRecord& t) {
  const std::string w = what;
  if (t.rpm > 0 && rpm > t.rpm) {
    return Status::invalidArgument(w + " rpm " + std::to_string(rpm) + " exceeds team rpm " +
                                   std::to_string(t.rpm));
  }
  if (t.tpm > 0 && tpm > t.tpm) {
    return Status::invalidArgument(w + " tpm " + std::to_string(tpm) + " exceeds team tpm " +
                                   std::to_string(t.tpm));
  }
  if (!t.models.empty()) {
    for (const auto& p : models) {
      bool covered = false;
      for (const auto& tp : t.models) covered = covered || globMatch(tp, p);
      if (!covered) {
        return Status::invalidArgument(w + " model pattern '" + p + "' is outside team '" + t.name +
                                       "''s models");
      }
    }
  }
  return Status::ok();
}

// A user's quota and budgets are not above the team's either.
Status checkUserWithinTeam(const UserRecord& u, const TeamRecord& t) {
  INFERA_RETURN_IF_ERROR(checkWithinTeam("user", u.rpm, u.tpm, u.models, t));
  if (t.daily_tokens > 0 && u.daily_tokens > t.daily_tokens) {
    return Status::invalidArgument("user daily_tokens exceeds the team's daily_tokens");
  }
  if (t.budget_tokens > 0 && u.budget_tokens > t.budget_tokens) {
    return Status::invalidArgument("user budget_tokens exceeds the team's budget_tokens");
  }
  if (t.budget_usd > 0 && u.budget_usd > t.budget_usd) {
    return Status::invalidArgument("user budget_usd exceeds the team's budget_usd");
  }
  return Status::ok();
}

TeamRecord teamFromRow(const SqlResult& r, size_t i) {
  TeamRecord t;
  t.name = r.text(i, 0);
  t.models = splitPatterns(r.text(i, 1));
  t.rpm = r.integer(i, 2);
  t.tpm = r.integer(i, 3);
  t.daily_tokens = r.integer(i, 4);
  t.budget_tokens = r.integer(i, 5);
  t.budget_usd = r.real(i, 6);
  t.budget_period = r.text(i, 7);
  t.created_ms = r.integer(i, 8);
  t.updated_ms = r.integer(i, 9);
  t.user_rpm = r.integer(i, 10);
  t.user_tpm = r.integer(i, 11);
  return t;
}

constexpr const char* kTeamCols =
    "name, models, rpm, tpm, daily_tokens, budget_tokens, budget_usd, budget_period, created_ms, "
    "updated_ms, "
    "user_rpm, user_tpm";
constexpr const char* kKeyCols =
    "id, team, name, salt, hash, models, rpm, tpm, allow_user, created_ms, expires_ms, revoked_ms, "
    "rotated_from";

KeyRecord keyFromRow(const SqlResult& r, size_t i) {
  KeyRecord k;
  k.id = r.text(i, 0);
  k.team = r.text(i, 1);
  k.name = r.text(i, 2);
  k.salt = r.text(i, 3);
  k.hash = r.text(i, 4);
  k.models = splitPatterns(r.text(i, 5));
  k.rpm = r.integer(i, 6);
  k.tpm = r.integer(i, 7);
  k.allow_user = r.integer(i, 8) != 0;
  k.created_ms = r.integer(i, 9);
  k.expires_ms = r.integer(i, 10);
  k.revoked_ms = r.integer(i, 11);
  k.rotated_from = r.text(i, 12);
  return k;
}

Status checkKeyWithinTeam(const KeyRecord& k, const TeamRecord& t) {
  return checkWithinTeam("key", k.rpm, k.tpm, k.models, t);
}

// Lowers a key's limits and models to what its team allows now, so a rotation (often urgent) does
// not fail because the team's limits went down after the key was made. Returns what changed;
// kFailedPrecondition when none of the key's model patterns is left (an empty list would widen
// the key to all of the team's models).
Result<std::vector<std::string>> clampKeyToTeam(KeyRecord& k, const TeamRecord& t) {
  std::vector<std::string> changed;
  if (t.rpm > 0 && k.rpm > t.rpm) {
    changed.push_back("rpm " + std::to_string(k.rpm) + " -> " + std::to_string(t.rpm));
    k.rpm = t.rpm;
  }
  if (t.tpm > 0 && k.tpm > t.tpm) {
    changed.push_back("tpm " + std::to_string(k.tpm) + " -> " + std::to_string(t.tpm));
    k.tpm = t.tpm;
  }
  if (!t.models.empty() && !k.models.empty()) {
    std::vector<std::string> kept;
    for (const auto& p : k.models) {
      bool covered = false;
      for (const auto& tp : t.models) covered = covered || globMatch(tp, p);
      if (covered) {
        kept.push_back(p);
      } else {
        changed.push_back("model pattern '" + p + "' dropped");
      }
    }
    if (kept.empty()) {
      return Status::failedPrecondition("none of the key's model patterns is within team '" +
                                        t.name +
                                        "''s models any more; update the key's models first");
    }
    k.models = std::move(kept);
  }
  return changed;
}

}  // namespace

Status MetaStore::createTeam(const TeamRecord& t, const std::string& actor) {
  const int64_t now = clock_.unixMillis();
  return mutate(actor, "team.create", t.name, dumpJson(fieldsJson(t)), [&]() -> Status {
    auto r = db_->exec(
        std::string("INSERT INTO infera_teams (") + kTeamCols +
            ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10, ?11)",
        {SqlValue(t.name), SqlValue(joinPatterns(t.models)), SqlValue(t.rpm), SqlValue(t.tpm),
         SqlValue(t.daily_tokens), SqlValue(t.budget_tokens), SqlValue(t.budget_usd),
         SqlValue(t.budget_period), SqlValue(now), SqlValue(t.user_rpm), SqlValue(t.user_tpm)});
    if (!r.ok() && r.status().code() == StatusCode::kAlreadyExists) {
      return Status::alreadyExists("team '" + t.name + "' already exists");
    }
    return r.ok() ? Status::ok() : r.status();
  });
}

Status MetaStore::updateTeam(const TeamRecord& t, const std::string& actor) {
  const int64_t now = clock_.unixMillis();
  return mutate(actor, "team.update", t.name, dumpJson(fieldsJson(t)), [&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(
        SqlResult r,
        db_->exec("UPDATE infera_teams SET models = ?2, rpm = ?3, tpm = ?4, daily_tokens = ?5, "
                  "budget_tokens = ?6, "
                  "budget_usd = ?7, budget_period = ?8, updated_ms = ?9, user_rpm = ?10, user_tpm "
                  "= ?11 WHERE name = ?1",
                  {SqlValue(t.name), SqlValue(joinPatterns(t.models)), SqlValue(t.rpm),
                   SqlValue(t.tpm), SqlValue(t.daily_tokens), SqlValue(t.budget_tokens),
                   SqlValue(t.budget_usd), SqlValue(t.budget_period), SqlValue(now),
                   SqlValue(t.user_rpm), SqlValue(t.user_tpm)}));
    if (r.affected == 0) return Status::notFound("no team '" + t.name + "'");
    return Status::ok();
  });
}

Status MetaStore::deleteTeam(const std::string& name, const std::string& actor) {
  return mutate(actor, "team.delete", name, "{}", [&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(
        SqlResult active,
        db_->exec("SELECT COUNT(*) FROM infera_keys WHERE team = ?1 AND revoked_ms = 0",
                  {SqlValue(name)}));
    if (active.integer(0, 0) > 0) {
      return Status::failedPrecondition("team '" + name + "' still has " +
                                        std::to_string(active.integer(0, 0)) +
                                        " active keys; revoke them first");
    }
    INFERA_ASSIGN_OR_RETURN(
        SqlResult r, db_->exec("DELETE FROM infera_teams WHERE name = ?1", {SqlValue(name)}));
    if (r.affected == 0) return Status::notFound("no team '" + name + "'");
    // Its users go with it (their usage records stay).
    return db_->exec("DELETE FROM infera_users WHERE team = ?1", {SqlValue(name)}).status();
  });
}

Status MetaStore::createUser(const UserRecord& u, const std::string& actor) {
  const int64_t now = clock_.unixMillis();
  return mutate(
      actor, "user.create", u.team + "/" + u.name, dumpJson(fieldsJson(u)), [&]() -> Status {
        INFERA_ASSIGN_OR_RETURN(auto team, this->team(u.team));
        if (!team) return Status::notFound("no team '" + u.team + "'");
        INFERA_RETURN_IF_ERROR(checkUserWithinTeam(u, *team));
        auto r = db_->exec(std::string("INSERT INTO infera_users (") + kUserCols +
                               ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)",
                           {SqlValue(u.team), SqlValue(u.name), SqlValue(joinPatterns(u.models)),
                            SqlValue(u.rpm), SqlValue(u.tpm), SqlValue(u.daily_tokens),
                            SqlValue(u.budget_tokens), SqlValue(u.budget_usd), SqlValue(now)});
        if (!r.ok() && r.status().code() == StatusCode::kAlreadyExists) {
          return Status::alreadyExists("user '" + u.name + "' of team '" + u.team +
                                       "' already exists");
        }
        return r.ok() ? Status::ok() : r.status();
      });
}

Status MetaStore::updateUser(const UserRecord& u, const std::string& actor) {
  const int64_t now = clock_.unixMillis();
  return mutate(
      actor, "user.update", u.team + "/" + u.name, dumpJson(fieldsJson(u)), [&]() -> Status {
        INFERA_ASSIGN_OR_RETURN(auto team, this->team(u.team));
        if (!team) return Status::notFound("no team '" + u.team + "'");
        INFERA_RETURN_IF_ERROR(checkUserWithinTeam(u, *team));
        INFERA_ASSIGN_OR_RETURN(
            SqlResult r,
            db_->exec("UPDATE infera_users SET models = ?3, rpm = ?4, tpm = ?5, daily_tokens = ?6, "
                      "budget_tokens = ?7, "
                      "budget_usd = ?8, updated_ms = ?9 WHERE team = ?1 AND name = ?2",
                      {SqlValue(u.team), SqlValue(u.name), SqlValue(joinPatterns(u.models)),
                       SqlValue(u.rpm), SqlValue(u.tpm), SqlValue(u.daily_tokens),
                       SqlValue(u.budget_tokens), SqlValue(u.budget_usd), SqlValue(now)}));
        if (r.affected == 0)
          return Status::notFound("no user '" + u.name + "' in team '" + u.team + "'");
        return Status::ok();
      });
}

Status MetaStore::deleteUser(const std::string& team, const std::string& name,
                             const std::string& actor) {
  return mutate(actor, "user.delete", team + "/" + name, "{}", [&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(SqlResult r,
                            db_->exec("DELETE FROM infera_users WHERE team = ?1 AND name = ?2",
                                      {SqlValue(team), SqlValue(name)}));
    if (r.affected == 0) return Status::notFound("no user '" + name + "' in team '" + team + "'");
    return Status::ok();
  });
}

Result<std::vector<UserRecord>> MetaStore::users(const std::string& team) {
  const std::string sql = std::string("SELECT ") + kUserCols + " FROM infera_users" +
                          (team.empty() ? "" : " WHERE team = ?1") + " ORDER BY team, name";
  INFERA_ASSIGN_OR_RETURN(SqlResult r,
                          team.empty() ? db_->exec(sql) : db_->exec(sql, {SqlValue(team)}));
  std::vector<UserRecord> out;
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(userFromRow(r, i));
  return out;
}

Result<std::optional<UserRecord>> MetaStore::user(const std::string& team,
                                                  const std::string& name) {
  INFERA_ASSIGN_OR_RETURN(SqlResult r,
                          db_->exec(std::string("SELECT ") + kUserCols +
                                        " FROM infera_users WHERE team = ?1 AND name = ?2",
                                    {SqlValue(team), SqlValue(name)}));
  if (r.rows.empty()) return std::optional<UserRecord>();
  return std::optional<UserRecord>(userFromRow(r, 0));
}

Result<std::vector<TeamRecord>> MetaStore::teams() {
  INFERA_ASSIGN_OR_RETURN(SqlResult r, db_->exec(std::string("SELECT ") + kTeamCols +
                                                 " FROM infera_teams ORDER BY name"));
  std::vector<TeamRecord> out;
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(teamFromRow(r, i));
  return out;
}

Result<std::optional<TeamRecord>> MetaStore::team(const std::string& name) {
  INFERA_ASSIGN_OR_RETURN(SqlResult r, db_->exec(std::string("SELECT ") + kTeamCols +
                                                     " FROM infera_teams WHERE name = ?1",
                                                 {SqlValue(name)}));
  if (r.rows.empty()) return std::optional<TeamRecord>();
  return std::optional<TeamRecord>(teamFromRow(r, 0));
}

Result<std::string> MetaStore::createKey(KeyRecord& k, const std::string& server_secret,
                                         const std::string& actor) {
  k.id = randomToken(kIdChars);
  k.salt = randomToken(16);
  const std::string secret = randomToken(kSecretChars);
  k.hash = hashSecret(server_secret, k.salt, secret);
  k.created_ms = clock_.unixMillis();
  Status s = mutate(actor, "key.create", k.id, dumpJson(fieldsJson(k)), [&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(auto team, this->team(k.team));
    if (!team) return Status::notFound("no team '" + k.team + "'");
    INFERA_RETURN_IF_ERROR(checkKeyWithinTeam(k, *team));
    auto r = db_->exec(std::string("INSERT INTO infera_keys (") + kKeyCols +
                           ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12)",
                       {SqlValue(k.id), SqlValue(k.team), SqlValue(k.name), SqlValue(k.salt),
                        SqlValue(k.hash), SqlValue(joinPatterns(k.models)), SqlValue(k.rpm),
                        SqlValue(k.tpm), SqlValue(int64_t{k.allow_user ? 1 : 0}),
                        SqlValue(k.created_ms), SqlValue(k.expires_ms), SqlValue(k.rotated_from)});
    return r.ok() ? Status::ok() : r.status();
  });
  if (!s.isOk()) return s;
  return keyToken(k.id, secret);
}

Status MetaStore::updateKey(const KeyRecord& k, const std::string& actor) {
  return mutate(actor, "key.update", k.id, dumpJson(fieldsJson(k)), [&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(auto team, this->team(k.team));
    if (!team) return Status::notFound("no team '" + k.team + "'");
    INFERA_RETURN_IF_ERROR(checkKeyWithinTeam(k, *team));
    INFERA_ASSIGN_OR_RETURN(
        SqlResult r,
        db_->exec(
            "UPDATE infera_keys SET name = ?2, models = ?3, rpm = ?4, tpm = ?5, allow_user = ?6, "
            "expires_ms = ?7 WHERE id = ?1",
            {SqlValue(k.id), SqlValue(k.name), SqlValue(joinPatterns(k.models)), SqlValue(k.rpm),
             SqlValue(k.tpm), SqlValue(int64_t{k.allow_user ? 1 : 0}), SqlValue(k.expires_ms)}));
    if (r.affected == 0) return Status::notFound("no key '" + k.id + "'");
    return Status::ok();
  });
}

Status MetaStore::revokeKey(const std::string& id, const std::string& actor) {
  return mutate(actor, "key.revoke", id, "{}", [&]() -> Status {
    INFERA_ASSIGN_OR_RETURN(
        SqlResult r,
        db_->exec("UPDATE infera_keys SET revoked_ms = ?2 WHERE id = ?1 AND revoked_ms = 0",
                  {SqlValue(id), SqlValue(clock_.unixMillis())}));
    if (r.affected == 0) return Status::notFound("no active key '" + id + "'");
    return Status::ok();
  });
}

Result<std::string> MetaStore::rotateKey(const std::string& id, int64_t grace_ms,
                                         const std::string& server_secret, const std::string& actor,
                                         KeyRecord& created) {
  INFERA_ASSIGN_OR_RETURN(auto old, key(id));
  if (!old || old->revoked_ms != 0) return Status::notFound("no active key '" + id + "'");
  if (old->expires_ms != 0 && old->expires_ms <= clock_.unixMillis()) {
    return Status::failedPrecondition("key '" + id + "' has expired: create a new key instead");
  }
  created = *old;
  created.rotated_from = id;
  created.id = randomToken(kIdChars);
  created.salt = randomToken(16);
  const std::string secret = randomToken(kSecretChars);
  created.hash = hashSecret(server_secret, created.salt, secret);
  created.created_ms = clock_.unixMillis();
  const int64_t old_expiry = created.created_ms + grace_ms;
  // The new key gets at most what the team allows now (checked again inside the transaction).
  INFERA_ASSIGN_OR_RETURN(auto team_now, team(created.team));
  if (!team_now) return Status::notFound("no team '" + created.team + "'");
  INFERA_ASSIGN_OR_RETURN(const std::vector<std::string> clamped,
                          clampKeyToTeam(created, *team_now));
  nlohmann::json detail = fieldsJson(created);
  detail["rotated_from"] = id;
  detail["grace_ms"] = grace_ms;
  if (!clamped.empty()) detail["clamped_to_team"] = clamped;
  Status s = mutate(actor, "key.rotate", id, dumpJson(detail), [&]() -> Status {
    // A key rotated already is in its grace period: a second successor would inherit that end.
    INFERA_ASSIGN_OR_RETURN(
        SqlResult successor,
        db_->exec("SELECT id FROM infera_keys WHERE rotated_from = ?1 AND revoked_ms = 0 LIMIT 1",
                  {SqlValue(id)}));
    if (!successor.rows.empty()) {
      return Status::failedPrecondition("key '" + id + "' was already rotated to '" +
                                        successor.text(0, 0) + "': rotate that one");
    }
    INFERA_ASSIGN_OR_RETURN(auto team_in_tx, this->team(created.team));
    if (!team_in_tx) return Status::notFound("no team '" + created.team + "'");
    INFERA_RETURN_IF_ERROR(checkKeyWithinTeam(created, *team_in_tx));
    auto r = db_->exec(std::string("INSERT INTO infera_keys (") + kKeyCols +
                           ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12)",
                       {SqlValue(created.id), SqlValue(created.team), SqlValue(created.name),
                        SqlValue(created.salt), SqlValue(created.hash),
                        SqlValue(joinPatterns(created.models)), SqlValue(created.rpm),
                        SqlValue(created.tpm), SqlValue(int64_t{created.allow_user ? 1 : 0}),
                        SqlValue(created.created_ms), SqlValue(created.expires_ms), SqlValue(id)});
    if (!r.ok()) return r.status();
    auto u = db_->exec(
        "UPDATE infera_keys SET expires_ms = ?2 WHERE id = ?1 AND (expires_ms = 0 OR expires_ms > "
        "?2)",
        {SqlValue(id), SqlValue(old_expiry)});
    return u.ok() ? Status::ok() : u.status();
  });
  if (!s.isOk()) return s;
  return keyToken(created.id, secret);
}

Result<std::vector<KeyRecord>> MetaStore::keys(const std::string& team) {
  Result<SqlResult> r =
      team.empty() ? db_->exec(std::string("SELECT ") + kKeyCols +
                               " FROM infera_keys ORDER BY created_ms, id")
                   : db_->exec(std::string("SELECT ") + kKeyCols +
                                   " FROM infera_keys WHERE team = ?1 ORDER BY created_ms, id",
                               {SqlValue(team)});
  if (!r.ok()) return r.status();
  std::vector<KeyRecord> out;
  for (size_t i = 0; i < r->rows.size(); ++i) out.push_back(keyFromRow(*r, i));
  return out;
}

Result<std::optional<KeyRecord>> MetaStore::key(const std::string& id) {
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r, db_->exec(std::string("SELECT ") + kKeyCols + " FROM infera_keys WHERE id = ?1",
                             {SqlValue(id)}));
  if (r.rows.empty()) return std::optional<KeyRecord>();
  return std::optional<KeyRecord>(keyFromRow(r, 0));
}

Result<std::vector<AuditRecord>> MetaStore::audit(int64_t since_ms, int limit) {
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r,
      db_->exec("SELECT ts_ms, actor, action, target, detail FROM infera_audit WHERE ts_ms >= ?1 "
                "ORDER BY ts_ms DESC, seq DESC LIMIT ?2",
                {SqlValue(since_ms), SqlValue(int64_t{limit})}));
  std::vector<AuditRecord> out;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    out.push_back({r.integer(i, 0), r.text(i, 1), r.text(i, 2), r.text(i, 3), r.text(i, 4)});
  }
  return out;
}

namespace {

// Multi-row INSERTs of 1, 2, 4, ..., 32 rows, their text built once: a batch goes in statements of
// 32 rows, then its remainder in powers of two, so a store prepares at most six statements per
// table however batch sizes vary, and its statement cache keeps them all. (32 rows of 18 columns
// stay under the 999 parameters SQLite allowed before 3.32.)
class MultiRowInsert {
 public:
  static constexpr size_t kMaxRows = 32;
  // "INSERT INTO <head> VALUES (?1, ..., ?cols), (...) x rows <tail>"
  MultiRowInsert(std::string_view head, size_t cols, std::string_view tail) {
    for (size_t i = 0; i < sql_.size(); ++i) {
      const size_t rows = size_t{1} << i;
      std::string& sql = sql_[i];
      sql = "INSERT INTO ";
      sql += head;
      sql += " VALUES ";
      for (size_t r = 0; r < rows; ++r) {
        if (r) sql += ", ";
        sql += '(';
        for (size_t c = 0; c < cols; ++c) {
          if (c) sql += ", ";
          sql += '?';
          sql += std::to_string(r * cols + c + 1);
        }
        sql += ')';
      }
      sql += tail;
    }
  }
  // Rows for the next statement when `left` (> 0) remain.
  static size_t rowsFor(size_t left) { return std::min(kMaxRows, std::bit_floor(left)); }
  const std::string& sql(size_t rows) const {
    return sql_[static_cast<size_t>(std::countr_zero(rows))];
  }

 private:
  std::array<std::string, 6> sql_;  // sql_[i]: 2^i rows
};

// A per-minute roll-up row: the sums of one minute's records with the same team, key, user, model
// and deployment.
struct RollupId {
  int64_t minute_ms;
  std::string_view team, key_id, user, model, deployment;
  auto operator<=>(const RollupId&) const = default;
};
struct RollupSums {
  int64_t requests = 0, prompt_tokens = 0, completion_tokens = 0, cached = 0, aborted = 0,
          errors = 0, batch = 0;
  double cost_usd = 0, latency_ms = 0;
};

}  // namespace

Status MetaStore::insertUsage(const std::vector<UsageRecord>& batch) {
  if (batch.empty()) return Status::ok();
  constexpr size_t kCols = 19;
  constexpr size_t kRollupCols = 15;
  static const MultiRowInsert kInsertRecords(
      "infera_usage (ts_ms, request_id, key_id, team, user_id, model, deployment, region, "
      "prompt_tokens, "
      "completion_tokens, latency_ms, ttft_ms, status, cached, stream, aborted, estimated, "
      "cost_usd, batch)",
      kCols, "");
  static const MultiRowInsert kUpsertRollups(
      "infera_usage_minute (minute_ms, team, key_id, user_id, model, deployment, requests, "
      "prompt_tokens, "
      "completion_tokens, cached, aborted, errors, cost_usd, latency_ms_sum, batch_requests)",
      kRollupCols,
      " ON CONFLICT (minute_ms, team, key_id, user_id, model, deployment) DO UPDATE SET "
      "requests = infera_usage_minute.requests + excluded.requests, "
      "prompt_tokens = infera_usage_minute.prompt_tokens + excluded.prompt_tokens, "
      "completion_tokens = infera_usage_minute.completion_tokens + excluded.completion_tokens, "
      "cached = infera_usage_minute.cached + excluded.cached, "
      "aborted = infera_usage_minute.aborted + excluded.aborted, "
      "errors = infera_usage_minute.errors + excluded.errors, "
      "cost_usd = infera_usage_minute.cost_usd + excluded.cost_usd, "
      "latency_ms_sum = infera_usage_minute.latency_ms_sum + excluded.latency_ms_sum, "
      "batch_requests = infera_usage_minute.batch_requests + excluded.batch_requests");
  // Ordered, so that replicas sharing a PostgreSQL store lock roll-up rows in the same order.
  std::map<RollupId, RollupSums> rollups;
  for (const UsageRecord& u : batch) {
    RollupSums& r =
        rollups[{u.ts_ms - u.ts_ms % 60'000, u.team, u.key_id, u.user, u.model, u.deployment}];
    ++r.requests;
    r.prompt_tokens += u.prompt_tokens;
    r.completion_tokens += u.completion_tokens;
    r.cached += u.cached ? 1 : 0;
    r.aborted += u.aborted ? 1 : 0;
    r.errors += u.status >= 400 ? 1 : 0;
    r.cost_usd += u.cost_usd;
    r.latency_ms += u.latency_ms;
    r.batch += u.batch ? 1 : 0;
  }
  INFERA_RETURN_IF_ERROR(db_->begin());
  auto run = [&](const std::string& sql, const std::vector<SqlValue>& params) {
    auto r = db_->exec(sql, std::span<const SqlValue>(params));
    if (!r.ok()) (void)db_->rollback();
    return r.status();
  };
  std::vector<SqlValue> params;
  for (size_t start = 0, n = 0; start < batch.size(); start += n) {
    n = MultiRowInsert::rowsFor(batch.size() - start);
    params.clear();
    params.reserve(n * kCols);
    for (size_t i = 0; i < n; ++i) {
      const UsageRecord& u = batch[start + i];
      params.emplace_back(u.ts_ms);
      params.emplace_back(u.request_id);
      params.emplace_back(u.key_id);
      params.emplace_back(u.team);
      params.emplace_back(u.user);
      params.emplace_back(u.model);
      params.emplace_back(u.deployment);
      params.emplace_back(u.region);
      params.emplace_back(u.prompt_tokens);
      params.emplace_back(u.completion_tokens);
      params.emplace_back(u.latency_ms);
      params.emplace_back(u.ttft_ms);
      params.emplace_back(int64_t{u.status});
      params.emplace_back(int64_t{u.cached ? 1 : 0});
      params.emplace_back(int64_t{u.stream ? 1 : 0});
      params.emplace_back(int64_t{u.aborted ? 1 : 0});
      params.emplace_back(int64_t{u.estimated ? 1 : 0});
      params.emplace_back(u.cost_usd);
      params.emplace_back(int64_t{u.batch ? 1 : 0});
    }
    INFERA_RETURN_IF_ERROR(run(kInsertRecords.sql(n), params));
  }
  for (auto it = rollups.begin(); it != rollups.end();) {
    const size_t n = MultiRowInsert::rowsFor(static_cast<size_t>(std::distance(it, rollups.end())));
    params.clear();
    params.reserve(n * kRollupCols);
    for (size_t i = 0; i < n; ++i, ++it) {
      const auto& [id, sum] = *it;
      params.emplace_back(id.minute_ms);
      params.emplace_back(std::string(id.team));
      params.emplace_back(std::string(id.key_id));
      params.emplace_back(std::string(id.user));
      params.emplace_back(std::string(id.model));
      params.emplace_back(std::string(id.deployment));
      params.emplace_back(sum.requests);
      params.emplace_back(sum.prompt_tokens);
      params.emplace_back(sum.completion_tokens);
      params.emplace_back(sum.cached);
      params.emplace_back(sum.aborted);
      params.emplace_back(sum.errors);
      params.emplace_back(sum.cost_usd);
      params.emplace_back(sum.latency_ms);
      params.emplace_back(sum.batch);
    }
    INFERA_RETURN_IF_ERROR(run(kUpsertRollups.sql(n), params));
  }
  return db_->commit();
}

Result<int64_t> MetaStore::pruneUsage(int64_t records_before_ms, int64_t rollups_before_ms) {
  // At most an hour of records (a day of roll-ups) per call: each DELETE is short, and the caller
  // lets the usage writer in between calls.
  int64_t removed = 0;
  auto prune = [&](const char* table, const char* column, int64_t before, int64_t span) -> Status {
    if (before <= 0) return Status::ok();
    INFERA_ASSIGN_OR_RETURN(SqlResult oldest,
                            db_->exec(std::string("SELECT MIN(") + column + ") FROM " + table));
    if (oldest.rows.empty() || oldest.isNull(0, 0) || oldest.integer(0, 0) >= before)
      return Status::ok();
    const int64_t end = std::min(before, oldest.integer(0, 0) + span);
    INFERA_ASSIGN_OR_RETURN(
        SqlResult r, db_->exec(std::string("DELETE FROM ") + table + " WHERE " + column + " < ?1",
                               {SqlValue(end)}));
    removed += r.affected;
    return Status::ok();
  };
  INFERA_RETURN_IF_ERROR(prune("infera_usage", "ts_ms", records_before_ms, 3'600'000));
  INFERA_RETURN_IF_ERROR(prune("infera_usage_minute", "minute_ms", rollups_before_ms, 86'400'000));
  return removed;
}

Result<std::string> MetaStore::queryUsage(const UsageQuery& q) {
  static const std::vector<std::pair<std::string, std::string>> kGroupable = {
      {"team", "team"},
      {"key", "key_id"},
      {"model", "model"},
      {"user", "user_id"},
      {"deployment", "deployment"}};
  int64_t bucket = 0;
  if (q.granularity == "minute") {
    bucket = 60'000;
  } else if (q.granularity == "hour") {
    bucket = 3'600'000;
  } else if (q.granularity == "day") {
    bucket = 86'400'000;
  } else if (q.granularity != "total") {
    return Status::invalidArgument("granularity must be minute, hour, day or total (got '" +
                                   q.granularity + "')");
  }
  std::vector<std::string> cols;
  std::vector<std::string> names;
  for (const auto& g : q.group_by) {
    bool found = false;
    for (const auto& [name, col] : kGroupable) {
      if (g == name) {
        cols.push_back(col);
        names.push_back(name);
        found = true;
      }
    }
    if (!found)
      return Status::invalidArgument("cannot group usage by '" + g +
                                     "' (use team, key, model, user, deployment)");
  }
  // Read from the per-minute roll-ups: a minute counts when it starts in [from rounded down to its
  // minute, to).
  std::string select =
      bucket ? "(minute_ms / " + std::to_string(bucket) + ") * " + std::to_string(bucket) : "0";
  std::string sql = "SELECT " + select + " AS bucket";
  for (const auto& c : cols) sql += ", " + c;
  sql +=
      ", SUM(requests), SUM(prompt_tokens), SUM(completion_tokens), SUM(cached), SUM(aborted), "
      "SUM(cost_usd), "
      "SUM(latency_ms_sum), SUM(errors), SUM(batch_requests) FROM infera_usage_minute WHERE "
      "minute_ms >= ?1 AND "
      "minute_ms < ?2";
  const int64_t from = q.from_ms - ((q.from_ms % 60'000) + 60'000) % 60'000;
  std::vector<SqlValue> params = {SqlValue(from),
                                  SqlValue(q.to_ms > 0 ? q.to_ms : clock_.unixMillis() + 1)};
  auto filter = [&](const std::string& col, const std::string& v) {
    if (v.empty()) return;
    params.emplace_back(v);
    sql += " AND " + col + " = ?" + std::to_string(params.size());
  };
  filter("team", q.team);
  filter("key_id", q.key_id);
  filter("model", q.model);
  filter("user_id", q.user);
  sql += " GROUP BY bucket";
  for (const auto& c : cols) sql += ", " + c;
  sql += " ORDER BY bucket";
  for (const auto& c : cols) sql += ", " + c;
  INFERA_ASSIGN_OR_RETURN(SqlResult r, db_->exec(sql, std::span<const SqlValue>(params)));
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < r.rows.size(); ++i) {
    nlohmann::json row;
    row["bucket_ms"] = r.integer(i, 0);
    size_t c = 1;
    for (const auto& n : names) row[n] = r.text(i, c++);
    row["requests"] = r.integer(i, c++);
    row["prompt_tokens"] = r.integer(i, c++);
    row["completion_tokens"] = r.integer(i, c++);
    row["total_tokens"] =
        row["prompt_tokens"].get<int64_t>() + row["completion_tokens"].get<int64_t>();
    row["cached"] = r.integer(i, c++);
    row["aborted"] = r.integer(i, c++);
    row["cost_usd"] = r.real(i, c++);
    const int64_t requests = row["requests"].get<int64_t>();
    const double latency_sum = r.real(i, c++);
    row["avg_latency_ms"] = requests > 0 ? latency_sum / static_cast<double>(requests) : 0.0;
    row["errors"] = r.integer(i, c++);
    row["batch_requests"] = r.integer(i, c++);  // of `requests`: lines of batches
    rows.push_back(std::move(row));
  }
  return dumpJson(rows);
}

Result<std::pair<int64_t, double>> MetaStore::teamUsageSince(const std::string& team,
                                                             int64_t since_ms,
                                                             const std::string* user) {
  const std::string sql =
      std::string(
          "SELECT SUM(prompt_tokens + completion_tokens), SUM(cost_usd) FROM infera_usage_minute "
          "WHERE team = ?1 AND minute_ms >= ?2") +
      (user ? " AND user_id = ?3" : "");
  INFERA_ASSIGN_OR_RETURN(
      SqlResult r, user ? db_->exec(sql, {SqlValue(team), SqlValue(since_ms), SqlValue(*user)})
                        : db_->exec(sql, {SqlValue(team), SqlValue(since_ms)}));
  if (r.rows.empty()) return std::pair<int64_t, double>{0, 0};
  return std::pair<int64_t, double>{r.integer(0, 0), r.real(0, 1)};
}

std::string userCounter(std::string_view team_counter, std::string_view user) {
  std::string c;
  c.reserve(team_counter.size() + 3 + user.size());
  c += team_counter;
  c += ":u:";
  // A user name comes from a request header: ':' and '%' are escaped so that no name can spell
  // another counter's name (e.g. "bob:s", the summary key of user bob's counter in Redis).
  for (char ch : user) {
    if (ch == ':') {
      c += "%3A";
    } else if (ch == '%') {
      c += "%25";
    } else {
      c += ch;
    }
  }
  return c;
}

const UserInfo* GovSnapshot::user(std::string_view team, std::string_view name) const {
  const auto t = by_user.find(team);
  if (t == by_user.end()) return nullptr;
  const auto u = t->second.find(name);
  return u == t->second.end() ? nullptr : u->second;
}

std::shared_ptr<const GovSnapshot> buildSnapshot(int64_t generation, std::vector<TeamRecord> teams,
                                                 std::vector<KeyRecord> keys,
                                                 std::vector<UserRecord> users) {
  auto s = std::make_shared<GovSnapshot>();
  s->generation = generation;
  for (auto& t : teams) {
    auto ti = std::make_unique<TeamInfo>();
    ti->rec = std::move(t);
    const std::string prefix = "t:" + ti->rec.name + ":";
    ti->c_req = prefix + "r";
    ti->c_tok = prefix + "t";
    ti->c_day = prefix + "d";
    ti->c_budget_tokens = prefix + "bt";
    ti->c_budget_cost = prefix + "bc";
    s->by_team[ti->rec.name] = ti.get();
    s->teams.push_back(std::move(ti));
  }
  for (auto& k : keys) {
    if (k.revoked_ms != 0) continue;
    const auto it = s->by_team.find(k.team);
    if (it == s->by_team.end()) continue;
    auto ki = std::make_unique<KeyInfo>();
    ki->rec = std::move(k);
    ki->team = it->second;
    ki->c_req = "k:" + ki->rec.id + ":r";
    ki->c_tok = "k:" + ki->rec.id + ":t";
    s->by_id[ki->rec.id] = ki.get();
    s->keys.push_back(std::move(ki));
  }
  for (auto& u : users) {
    const auto it = s->by_team.find(u.team);
    if (it == s->by_team.end()) continue;
    auto ui = std::make_unique<UserInfo>();
    ui->rec = std::move(u);
    ui->team = it->second;
    const TeamInfo& tm = *it->second;
    ui->c_req = userCounter(tm.c_req, ui->rec.name);
    ui->c_tok = userCounter(tm.c_tok, ui->rec.name);
    ui->c_day = userCounter(tm.c_day, ui->rec.name);
    ui->c_budget_tokens = userCounter(tm.c_budget_tokens, ui->rec.name);
    ui->c_budget_cost = userCounter(tm.c_budget_cost, ui->rec.name);
    s->by_user[ui->rec.team][ui->rec.name] = ui.get();
    s->users.push_back(std::move(ui));
  }
  return s;
}

}  // namespace infera::access
