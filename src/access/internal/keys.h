#pragma once
// Access internals: API keys, teams, users, the audit log and usage records in the metadata store
// (SQLite file or PostgreSQL), and the immutable snapshot of them the data plane reads.
//
// A key is "sk-inf-<id>-<secret>". Only the id and HMAC-SHA256(server secret, salt || secret) are
// stored; the secret is shown once, at creation. Verification recomputes the HMAC and compares in
// constant time.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "access/access.h"
#include "access/limits.h"
#include "core/clock.h"
#include "core/status.h"
#include "core/text.h"
#include "store/sql.h"

namespace infera::access {

struct TeamRecord {
  std::string name;
  std::vector<std::string> models;  // allow-list patterns ('*' wildcard); empty = every model
  int64_t rpm = 0;                  // 0 = no limit
  int64_t tpm = 0;
  int64_t daily_tokens = 0;
  int64_t user_rpm = 0;  // each user of the team (x-infera-user), 0 = none
  int64_t user_tpm = 0;
  int64_t budget_tokens = 0;            // per budget_period
  double budget_usd = 0;                // per budget_period (needs model prices)
  std::string budget_period = "month";  // day | month
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

// A user inside a team (named by the user header of a key allowed to set it). Users without a
// record get the team's per-user defaults (user_rpm, user_tpm); a record sets the user's own
// limits, daily quota, budgets (over the team's budget_period) and a narrower model list.
struct UserRecord {
  std::string team;
  std::string name;
  std::vector<std::string> models;  // further restricts the team's list; empty = the team's
  int64_t rpm = 0;                  // 0 = the team's user_rpm
  int64_t tpm = 0;                  // 0 = the team's user_tpm
  int64_t daily_tokens = 0;         // 0 = none
  int64_t budget_tokens = 0;        // per the team's budget_period; 0 = none
  double budget_usd = 0;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

struct KeyRecord {
  std::string id;
  std::string team;
  std::string name;
  std::vector<std::string> models;  // further restricts the team's list; empty = the team's
  int64_t rpm = 0;
  int64_t tpm = 0;
  bool allow_user = false;  // may name a user with the user header
  int64_t created_ms = 0;
  int64_t expires_ms = 0;  // 0 = never
  int64_t revoked_ms = 0;  // 0 = active
  std::string rotated_from;
  // Stored only; never returned by the API.
  std::string salt;
  std::string hash;
};

struct AuditRecord {
  int64_t ts_ms = 0;
  std::string actor;
  std::string action;
  std::string target;
  std::string detail;  // JSON
};

struct UsageQuery {
  std::string team, key_id, model, user;
  int64_t from_ms = 0;
  int64_t to_ms = 0;                                      // 0 = now
  std::string granularity = "hour";                       // minute | hour | day | total
  std::vector<std::string> group_by = {"team", "model"};  // of team, key, model, user, deployment
};

// '*' matches any run of characters; everything else literally.
bool globMatch(std::string_view pattern, std::string_view text);
std::vector<std::string> splitPatterns(std::string_view csv);

// A record's settable fields as JSON: the audit log's detail, and the core of the admin API's
// answers (which add timestamps and state). Never a key's secret, salt or hash.
nlohmann::json fieldsJson(const TeamRecord& t);
nlohmann::json fieldsJson(const UserRecord& u);
nlohmann::json fieldsJson(const KeyRecord& k);

// Key material. The token parser accepts only well-formed tokens.
std::string randomToken(size_t chars);  // [A-Za-z0-9], from the OS CSPRNG
std::string keyToken(std::string_view id, std::string_view secret);
bool parseKeyToken(std::string_view token, std::string_view& id, std::string_view& secret);
std::string hashSecret(std::string_view server_secret, std::string_view salt,
                       std::string_view secret);
bool constantTimeEqual(std::string_view a, std::string_view b);

// Schema, CRUD and queries. Every mutation bumps the change generation the gateway polls, and
// writes an audit row, in one transaction. One thread at a time (it owns one SqlDb).
class MetaStore {
 public:
  // `clock` stamps what the store records (and decides expiry at rotation); it must outlive the
  // store.
  static Result<std::unique_ptr<MetaStore>> open(const std::string& url,
                                                 const Clock& clock = SystemClock::instance());
  store::SqlDb& db() { return *db_; }

  Result<int64_t> generation();

  Status createTeam(const TeamRecord& t, const std::string& actor);
  Status updateTeam(const TeamRecord& t, const std::string& actor);
  Status deleteTeam(const std::string& name, const std::string& actor);
  Result<std::vector<TeamRecord>> teams();
  Result<std::optional<TeamRecord>> team(const std::string& name);

  // Fills id, salt, hash, created_ms; returns the full token (shown once).
  Result<std::string> createKey(KeyRecord& k, const std::string& server_secret,
                                const std::string& actor);
  Status updateKey(const KeyRecord& k, const std::string& actor);
  Status revokeKey(const std::string& id, const std::string& actor);
  // A new key with the same team, permissions and limits; the old one expires after grace_ms.
  Result<std::string> rotateKey(const std::string& id, int64_t grace_ms,
                                const std::string& server_secret, const std::string& actor,
                                KeyRecord& created);
  Result<std::vector<KeyRecord>> keys(const std::string& team = {});
  Result<std::optional<KeyRecord>> key(const std::string& id);

  Status createUser(const UserRecord& u, const std::string& actor);
  Status updateUser(const UserRecord& u, const std::string& actor);
  Status deleteUser(const std::string& team, const std::string& name, const std::string& actor);
  Result<std::vector<UserRecord>> users(const std::string& team = {});
  Result<std::optional<UserRecord>> user(const std::string& team, const std::string& name);

  Result<std::vector<AuditRecord>> audit(int64_t since_ms, int limit);
  // An audit row for an action that changes nothing in this store (a config reload).
  Status recordEvent(const std::string& actor, const std::string& action, const std::string& target,
                     const std::string& detail);

  // Writes the records and adds them to the per-minute roll-ups (infera_usage_minute) in one
  // transaction: all or nothing.
  Status insertUsage(const std::vector<UsageRecord>& batch);
  // Deletes records older than records_before_ms and roll-ups of minutes before rollups_before_ms
  // (0: keep), at most the oldest hour of records and day of roll-ups per call: call it until it
  // returns 0. Returns the rows removed.
  Result<int64_t> pruneUsage(int64_t records_before_ms, int64_t rollups_before_ms);
  // JSON rows: [{"bucket_ms":..,"team":..,"model":..,"requests":..,"prompt_tokens":..,...}]
  Result<std::string> queryUsage(const UsageQuery& q);
  // Tokens (and cost) used by a team, or by one user of it, since a time: for budgets and daily
  // quotas after a restart.
  // Tokens and cost a team (or, given `user`, one user of it) used since since_ms (roll-ups).
  Result<std::pair<int64_t, double>> teamUsageSince(const std::string& team, int64_t since_ms,
                                                    const std::string* user = nullptr);

 private:
  MetaStore(std::unique_ptr<store::SqlDb> db, const Clock& clock)
      : db_(std::move(db)), clock_(clock) {}
  Status migrate();
  Status mutate(const std::string& actor, const std::string& action, const std::string& target,
                const std::string& detail, const std::function<Status()>& body);
  std::unique_ptr<store::SqlDb> db_;
  const Clock& clock_;  // created, updated, expiry and audit times
};

// What the data plane reads: immutable, rebuilt on each change, swapped into every worker.
struct TeamInfo {
  TeamRecord rec;
  // Rate-limit counter names, built once per snapshot.
  CounterName c_req, c_tok, c_day, c_budget_tokens, c_budget_cost;
};

struct KeyInfo {
  KeyRecord rec;
  const TeamInfo* team = nullptr;
  CounterName c_req, c_tok;
};

struct UserInfo {
  UserRecord rec;
  const TeamInfo* team = nullptr;
  CounterName c_req, c_tok, c_day, c_budget_tokens, c_budget_cost;
};

// Counter names of a team's user (what UserInfo holds; built per request for users without a
// record): "<team counter>:u:<user>", with ':' and '%' in the user name escaped (%3A, %25).
std::string userCounter(std::string_view team_counter, std::string_view user);

struct GovSnapshot {
  int64_t generation = 0;
  std::vector<std::unique_ptr<TeamInfo>> teams;
  std::vector<std::unique_ptr<KeyInfo>> keys;
  std::unordered_map<std::string, const KeyInfo*> by_id;
  std::unordered_map<std::string, const TeamInfo*> by_team;
  std::vector<std::unique_ptr<UserInfo>> users;
  // By team, then user name (looked up with string_views: no key is built per request).
  using UsersByName =
      std::unordered_map<std::string, const UserInfo*, TransparentStringHash, std::equal_to<>>;
  std::unordered_map<std::string, UsersByName, TransparentStringHash, std::equal_to<>> by_user;
  const UserInfo* user(std::string_view team, std::string_view name) const;
};

std::shared_ptr<const GovSnapshot> buildSnapshot(int64_t generation, std::vector<TeamRecord> teams,
                                                 std::vector<KeyRecord> keys,
                                                 std::vector<UserRecord> users = {});

}  // namespace infera::access
