#include "cli/admin_cmd.h"

#include <chrono>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/admin_client.h"
#include "core/text.h"
#include "net/client.h"

namespace infera::cli {
namespace {

using nlohmann::json;

std::string urlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '*' || c == ',') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// One admin request (30 s); exits 1 with the API's message on failure.
json call(const AdminOptions& o, const std::string& method, const std::string& path,
          const json& body = nullptr) {
  return adminCall(o, method, path, body, std::chrono::seconds(30));
}

// A time given on the command line, as unix milliseconds: digits are milliseconds already; else
// UTC "YYYY-MM-DD", "YYYY-MM-DDTHH:MM" or "YYYY-MM-DDTHH:MM:SS" (a space for the T, a trailing Z
// allowed). Nothing for anything else.
std::optional<int64_t> parseTimeArg(const std::string& s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return s.size() <= 18 ? std::optional<int64_t>(std::stoll(s)) : std::nullopt;
  }
  std::string t = s;
  if (!t.empty() && (t.back() == 'Z' || t.back() == 'z')) t.pop_back();
  if (t.size() > 10 && (t[10] == 'T' || t[10] == 't')) t[10] = ' ';
  static constexpr std::pair<size_t, const char*> kForms[] = {
      {10, "%Y-%m-%d"}, {16, "%Y-%m-%d %H:%M"}, {19, "%Y-%m-%d %H:%M:%S"}};
  struct tm tm {};
  bool parsed = false;
  for (const auto& [len, format] : kForms) {
    if (t.size() != len) continue;
    const char* end = strptime(t.c_str(), format, &tm);
    parsed = end != nullptr && *end == '\0';
  }
  if (!parsed) return std::nullopt;
  struct tm given = tm;
  const time_t t_s = timegm(&tm);
  // timegm rolls 2026-02-31 over to March: such a date is not a time.
  if (tm.tm_mday != given.tm_mday || tm.tm_mon != given.tm_mon) return std::nullopt;
  return static_cast<int64_t>(t_s) * 1000;
}

std::string joined(const json& arr) {
  if (!arr.is_array() || arr.empty()) return "*";
  std::string s;
  for (const auto& v : arr) {
    if (!s.empty()) s += ",";
    s += v.get<std::string>();
  }
  return s;
}

std::string limitText(const json& j, const char* k) {
  const int64_t v = j.value(k, int64_t{0});
  return v > 0 ? std::to_string(v) : "-";
}

void printKey(const json& k) {
  std::printf("%-14s %-14s %-8s %-10s %-10s %-22s %s\n", k.value("id", "").c_str(),
              k.value("team", "").c_str(), k.value("state", "").c_str(),
              limitText(k, "rpm").c_str(), limitText(k, "tpm").c_str(),
              timeText(k.value("expires_ms", int64_t{0})).c_str(), joined(k["models"]).c_str());
}

void printKeyHeader() {
  std::printf("%-14s %-14s %-8s %-10s %-10s %-22s %s\n", "ID", "TEAM", "STATE", "RPM", "TPM",
              "EXPIRES", "MODELS");
}

void printTeam(const json& t) {
  std::string budget = "-";
  if (t.value("budget_tokens", int64_t{0}) > 0) {
    budget = std::to_string(t.value("budget_tokens", int64_t{0})) + " tok/" +
             t.value("budget_period", "");
  } else if (t.value("budget_usd", 0.0) > 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "$%.2f/%s", t.value("budget_usd", 0.0),
                  t.value("budget_period", "").c_str());
    budget = buf;
  }
  std::printf("%-16s %-10s %-10s %-12s %-22s %s\n", t.value("name", "").c_str(),
              limitText(t, "rpm").c_str(), limitText(t, "tpm").c_str(),
              limitText(t, "daily_tokens").c_str(), budget.c_str(), joined(t["models"]).c_str());
}

void printUser(const json& u) {
  std::string budget = "-";
  if (u.value("budget_tokens", int64_t{0}) > 0) {
    budget = std::to_string(u.value("budget_tokens", int64_t{0})) + " tok";
  } else if (u.value("budget_usd", 0.0) > 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "$%.2f", u.value("budget_usd", 0.0));
    budget = buf;
  }
  std::printf("%-16s %-20s %-10s %-10s %-12s %-16s %s\n", u.value("team", "").c_str(),
              u.value("name", "").c_str(), limitText(u, "rpm").c_str(), limitText(u, "tpm").c_str(),
              limitText(u, "daily_tokens").c_str(), budget.c_str(), joined(u["models"]).c_str());
}

void printUserHeader() {
  std::printf("%-16s %-20s %-10s %-10s %-12s %-16s %s\n", "TEAM", "USER", "RPM", "TPM", "DAILY",
              "BUDGET", "MODELS");
}

void printTeamHeader() {
  std::printf("%-16s %-10s %-10s %-12s %-22s %s\n", "TEAM", "RPM", "TPM", "DAILY", "BUDGET",
              "MODELS");
}

}  // namespace

void registerAdminCommands(CLI::App& app) {
  auto opts = std::make_shared<AdminOptions>(adminOptionsFromEnv());
  auto common = [opts](CLI::App* c) {
    addAdminOptions(c, *opts, "Who is making the change (for the audit log)");
  };

  // ---- teams ----
  auto* teams = app.add_subcommand("teams", "Teams: model allow-lists, limits, quotas, budgets");
  teams->require_subcommand(1);
  auto team_body = std::make_shared<json>(json::object());
  auto team_fields = [team_body](CLI::App* c) {
    c->add_option_function<std::string>(
        "--models", [team_body](const std::string& v) { (*team_body)["models"] = v; },
        "Allowed model patterns, comma-separated ('*' wildcard)");
    for (const char* f : {"rpm", "tpm", "daily-tokens", "budget-tokens", "user-rpm", "user-tpm"}) {
      std::string key = f;
      for (auto& ch : key) ch = ch == '-' ? '_' : ch;
      c->add_option_function<int64_t>(
          std::string("--") + f, [team_body, key](const int64_t& v) { (*team_body)[key] = v; },
          "Limit (0 = none)");
    }
    c->add_option_function<double>(
        "--budget-usd", [team_body](const double& v) { (*team_body)["budget_usd"] = v; },
        "Cost budget per period (needs model prices)");
    c->add_option_function<std::string>(
        "--budget-period", [team_body](const std::string& v) { (*team_body)["budget_period"] = v; },
        "day | month");
  };
  auto team_name = std::make_shared<std::string>();
  auto* tcreate = teams->add_subcommand("create", "Create a team");
  tcreate->add_option("name", *team_name, "Team name")->required();
  team_fields(tcreate);
  common(tcreate);
  tcreate->callback([opts, team_body, team_name] {
    (*team_body)["name"] = *team_name;
    const json t = call(*opts, "POST", "/admin/teams", *team_body);
    output(*opts, t, [&] {
      printTeamHeader();
      printTeam(t);
    });
  });
  auto* tupdate = teams->add_subcommand("update", "Change a team's models or limits");
  tupdate->add_option("name", *team_name, "Team name")->required();
  team_fields(tupdate);
  common(tupdate);
  tupdate->callback([opts, team_body, team_name] {
    const json t = call(*opts, "PATCH", "/admin/teams/" + urlEncode(*team_name), *team_body);
    output(*opts, t, [&] {
      printTeamHeader();
      printTeam(t);
    });
  });
  auto* tlist = teams->add_subcommand("list", "List teams");
  common(tlist);
  tlist->callback([opts] {
    const json j = call(*opts, "GET", "/admin/teams");
    output(*opts, j, [&] {
      printTeamHeader();
      for (const auto& t : j["teams"]) printTeam(t);
    });
  });
  auto* tshow = teams->add_subcommand("show", "Show a team");
  tshow->add_option("name", *team_name, "Team name")->required();
  common(tshow);
  tshow->callback([opts, team_name] {
    const json t = call(*opts, "GET", "/admin/teams/" + urlEncode(*team_name));
    output(*opts, t, [&] {
      printTeamHeader();
      printTeam(t);
    });
  });
  auto* tdelete = teams->add_subcommand("delete", "Delete a team (no active keys left)");
  tdelete->add_option("name", *team_name, "Team name")->required();
  common(tdelete);
  tdelete->callback([opts, team_name] {
    const json j = call(*opts, "DELETE", "/admin/teams/" + urlEncode(*team_name));
    output(*opts, j, [&] { std::printf("deleted team %s\n", team_name->c_str()); });
  });

  // ---- users ----
  auto* users =
      app.add_subcommand("users", "Users inside a team: their own limits, quotas, budgets, models");
  users->require_subcommand(1);
  auto user_body = std::make_shared<json>(json::object());
  auto user_fields = [user_body](CLI::App* c) {
    c->add_option_function<std::string>(
        "--models", [user_body](const std::string& v) { (*user_body)["models"] = v; },
        "Model patterns, within the team's (comma-separated, '*' wildcard)");
    for (const char* f : {"rpm", "tpm", "daily-tokens", "budget-tokens"}) {
      std::string key = f;
      for (auto& ch : key) ch = ch == '-' ? '_' : ch;
      c->add_option_function<int64_t>(
          std::string("--") + f, [user_body, key](const int64_t& v) { (*user_body)[key] = v; },
          "Limit (0 = the team's per-user default, or none)");
    }
    c->add_option_function<double>(
        "--budget-usd", [user_body](const double& v) { (*user_body)["budget_usd"] = v; },
        "Cost budget per the team's budget period");
  };
  auto user_team = std::make_shared<std::string>();
  auto user_name = std::make_shared<std::string>();
  auto userPath = [user_team, user_name] {
    return "/admin/users/" + urlEncode(*user_team) + "/" + urlEncode(*user_name);
  };
  auto* ucreate = users->add_subcommand("create", "Give a user of a team its own limits");
  ucreate->add_option("--team", *user_team, "Team")->required();
  ucreate->add_option("name", *user_name, "User (as the key sends it in x-infera-user)")
      ->required();
  user_fields(ucreate);
  common(ucreate);
  ucreate->callback([opts, user_body, user_team, user_name] {
    (*user_body)["team"] = *user_team;
    (*user_body)["name"] = *user_name;
    const json u = call(*opts, "POST", "/admin/users", *user_body);
    output(*opts, u, [&] {
      printUserHeader();
      printUser(u);
    });
  });
  auto* uupdate = users->add_subcommand("update", "Change a user's limits or models");
  uupdate->add_option("--team", *user_team, "Team")->required();
  uupdate->add_option("name", *user_name, "User")->required();
  user_fields(uupdate);
  common(uupdate);
  uupdate->callback([opts, user_body, userPath] {
    const json u = call(*opts, "PATCH", userPath(), *user_body);
    output(*opts, u, [&] {
      printUserHeader();
      printUser(u);
    });
  });
  auto* ulist = users->add_subcommand("list", "List users with their own limits");
  ulist->add_option("--team", *user_team, "Only this team");
  common(ulist);
  ulist->callback([opts, user_team] {
    const json j =
        call(*opts, "GET",
             "/admin/users" + (user_team->empty() ? "" : "?team=" + urlEncode(*user_team)));
    output(*opts, j, [&] {
      printUserHeader();
      for (const auto& u : j["users"]) printUser(u);
    });
  });
  auto* udelete =
      users->add_subcommand("delete", "Remove a user's own limits (back to the team's defaults)");
  udelete->add_option("--team", *user_team, "Team")->required();
  udelete->add_option("name", *user_name, "User")->required();
  common(udelete);
  udelete->callback([opts, userPath, user_team, user_name] {
    const json j = call(*opts, "DELETE", userPath());
    output(*opts, j, [&] {
      std::printf("deleted user %s of team %s\n", user_name->c_str(), user_team->c_str());
    });
  });

  // ---- keys ----
  auto* keys = app.add_subcommand("keys", "API keys: create (shown once), list, revoke, rotate");
  keys->require_subcommand(1);
  auto key_body = std::make_shared<json>(json::object());
  auto key_fields = [key_body](CLI::App* c) {
    c->add_option_function<std::string>(
        "--models", [key_body](const std::string& v) { (*key_body)["models"] = v; },
        "Model patterns, within the team's (comma-separated, '*' wildcard)");
    c->add_option_function<int64_t>(
        "--rpm", [key_body](const int64_t& v) { (*key_body)["rpm"] = v; },
        "Requests per minute (0 = only the team's limit)");
    c->add_option_function<int64_t>(
        "--tpm", [key_body](const int64_t& v) { (*key_body)["tpm"] = v; },
        "Tokens per minute (0 = only the team's limit)");
    c->add_option_function<std::string>(
        "--expires", [key_body](const std::string& v) { (*key_body)["expires_in"] = v; },
        "Lifetime, e.g. 30d, 12h");
    c->add_option_function<std::string>(
        "--name", [key_body](const std::string& v) { (*key_body)["name"] = v; }, "A label");
    c->add_flag_function(
        "--allow-user", [key_body](int64_t n) { (*key_body)["allow_user"] = n > 0; },
        "Let callers name a user (x-infera-user header)");
  };
  auto key_team = std::make_shared<std::string>();
  auto* kcreate = keys->add_subcommand("create", "Create a key; prints the secret once");
  kcreate->add_option("--team", *key_team, "Team")->required();
  key_fields(kcreate);
  common(kcreate);
  kcreate->callback([opts, key_body, key_team] {
    (*key_body)["team"] = *key_team;
    const json k = call(*opts, "POST", "/admin/keys", *key_body);
    output(*opts, k, [&] {
      std::printf("%s\n", k.value("key", "").c_str());
      std::fprintf(stderr, "key %s for team %s created; the secret above is shown only once\n",
                   k.value("id", "").c_str(), k.value("team", "").c_str());
    });
  });
  auto key_id = std::make_shared<std::string>();
  auto* klist = keys->add_subcommand("list", "List keys (never their secrets)");
  klist->add_option("--team", *key_team, "Only this team's keys");
  common(klist);
  klist->callback([opts, key_team] {
    const json j = call(*opts, "GET",
                        "/admin/keys" + (key_team->empty() ? "" : "?team=" + urlEncode(*key_team)));
    output(*opts, j, [&] {
      printKeyHeader();
      for (const auto& k : j["keys"]) printKey(k);
    });
  });
  auto* kshow = keys->add_subcommand("show", "Show a key");
  kshow->add_option("id", *key_id, "Key id")->required();
  common(kshow);
  kshow->callback([opts, key_id] {
    const json k = call(*opts, "GET", "/admin/keys/" + urlEncode(*key_id));
    output(*opts, k, [&] {
      printKeyHeader();
      printKey(k);
    });
  });
  auto* kupdate = keys->add_subcommand("update", "Change a key's models, limits or expiry");
  kupdate->add_option("id", *key_id, "Key id")->required();
  key_fields(kupdate);
  common(kupdate);
  kupdate->callback([opts, key_id, key_body] {
    const json k = call(*opts, "PATCH", "/admin/keys/" + urlEncode(*key_id), *key_body);
    output(*opts, k, [&] {
      printKeyHeader();
      printKey(k);
    });
  });
  auto* krevoke = keys->add_subcommand("revoke", "Revoke a key (every replica within seconds)");
  krevoke->add_option("id", *key_id, "Key id")->required();
  common(krevoke);
  krevoke->callback([opts, key_id] {
    const json k = call(*opts, "POST", "/admin/keys/" + urlEncode(*key_id) + "/revoke");
    output(*opts, k, [&] { std::printf("revoked %s\n", key_id->c_str()); });
  });
  auto grace = std::make_shared<std::string>("24h");
  auto* krotate =
      keys->add_subcommand("rotate", "New secret; the old key keeps working for --grace");
  krotate->add_option("id", *key_id, "Key id")->required();
  krotate->add_option("--grace", *grace, "How long the old key stays valid (e.g. 24h, 0s)");
  common(krotate);
  krotate->callback([opts, key_id, grace] {
    const json k = call(*opts, "POST", "/admin/keys/" + urlEncode(*key_id) + "/rotate",
                        json{{"grace", *grace}});
    output(*opts, k, [&] {
      std::printf("%s\n", k.value("key", "").c_str());
      std::fprintf(
          stderr,
          "new key %s replaces %s (old one valid until %s); the secret above is shown only once\n",
          k.value("id", "").c_str(), key_id->c_str(),
          timeText(k.value("old_key_expires_ms", int64_t{0})).c_str());
    });
  });

  // ---- usage ----
  struct UsageArgs {
    std::string team, key, model, user, since = "24h", from, to, granularity = "hour",
                                        group_by = "team,model";
  };
  auto ua = std::make_shared<UsageArgs>();
  auto* usage = app.add_subcommand("usage", "Token usage by team/key/model/user over time");
  usage->add_option("--team", ua->team, "Only this team");
  usage->add_option("--key", ua->key, "Only this key id");
  usage->add_option("--model", ua->model, "Only this model");
  usage->add_option("--user", ua->user, "Only this user");
  usage->add_option("--since", ua->since,
                    "How far back (e.g. 1h, 7d; default 24h unless --from or --to is given)");
  usage->add_option("--from", ua->from,
                    "Start (UTC 2026-11-30, 2026-11-30T08:00[:00][Z], or unix ms)");
  usage->add_option("--to", ua->to, "End, exclusive (same forms; default now)");
  usage->add_option("--granularity", ua->granularity, "minute | hour | day | total");
  usage->add_option("--group-by", ua->group_by,
                    "Comma-separated: team,key,model,user,deployment (or none)");
  common(usage);
  usage->callback([opts, ua] {
    std::string q = "/admin/usage?granularity=" + urlEncode(ua->granularity) +
                    "&group_by=" + urlEncode(ua->group_by);
    for (const auto& [name, value] :
         {std::pair<const char*, const std::string*>{"from", &ua->from}, {"to", &ua->to}}) {
      if (value->empty()) continue;
      const auto ms = parseTimeArg(*value);
      if (!ms) {
        throw CLI::ValidationError(
            std::string("--") + name,
            "'" + *value + "' is not a time (want 2026-11-30, 2026-11-30T08:00:00Z or unix ms)");
      }
      q += std::string("&") + name + "=" + std::to_string(*ms);
    }
    if (ua->from.empty() && ua->to.empty()) q += "&since=" + urlEncode(ua->since);
    if (!ua->team.empty()) q += "&team=" + urlEncode(ua->team);
    if (!ua->key.empty()) q += "&key=" + urlEncode(ua->key);
    if (!ua->model.empty()) q += "&model=" + urlEncode(ua->model);
    if (!ua->user.empty()) q += "&user=" + urlEncode(ua->user);
    const json j = call(*opts, "GET", q);
    output(*opts, j, [&] {
      std::vector<std::string> cols;
      if (ua->group_by != "none") {
        size_t i = 0;
        while (i <= ua->group_by.size()) {
          size_t c = ua->group_by.find(',', i);
          if (c == std::string::npos) c = ua->group_by.size();
          if (c > i) cols.push_back(ua->group_by.substr(i, c - i));
          i = c + 1;
        }
      }
      std::printf("%-22s", "BUCKET (UTC)");
      for (const auto& c : cols) std::printf(" %-16s", c.c_str());
      std::printf(" %9s %12s %12s %12s %8s %10s\n", "REQUESTS", "PROMPT", "COMPLETION", "TOTAL",
                  "CACHED", "COST_USD");
      for (const auto& r : j["rows"]) {
        const std::string bucket = ua->granularity == "total"
                                       ? std::string("total")
                                       : timeText(r.value("bucket_ms", int64_t{0}));
        std::printf("%-22s", bucket.c_str());
        for (const auto& c : cols) std::printf(" %-16s", r.value(c, std::string()).c_str());
        std::printf(" %9lld %12lld %12lld %12lld %8lld %10.4f\n",
                    static_cast<long long>(r.value("requests", int64_t{0})),
                    static_cast<long long>(r.value("prompt_tokens", int64_t{0})),
                    static_cast<long long>(r.value("completion_tokens", int64_t{0})),
                    static_cast<long long>(r.value("total_tokens", int64_t{0})),
                    static_cast<long long>(r.value("cached", int64_t{0})),
                    r.value("cost_usd", 0.0));
      }
    });
  });

  // ---- config history / rollback (config_store: shared) ----
  if (CLI::App* config = app.get_subcommand("config")) {
    auto limit = std::make_shared<int>(20);
    auto* history = config->add_subcommand(
        "history",
        "The shared config's generations: who changed it, when, how (config_store: "
        "shared)");
    history->add_option("--limit", *limit, "How many, newest first")->check(CLI::Range(1, 1000));
    common(history);
    history->callback([opts, limit] {
      const json j = call(*opts, "GET", "/admin/config/history?limit=" + std::to_string(*limit));
      output(*opts, j, [&] {
        const int64_t current = j.value("generation", int64_t{0});
        std::printf("%-4s %-10s %-22s %-20s %s\n", "", "GENERATION", "WHEN (UTC)", "ACTOR",
                    "ACTION");
        for (const auto& g : j["generations"]) {
          const int64_t n = g.value("generation", int64_t{0});
          std::printf("%-4s %-10lld %-22s %-20s %s\n", n == current ? "*" : "",
                      static_cast<long long>(n),
                      timeText(g.value("created_ms", int64_t{0})).c_str(),
                      g.value("actor", "").c_str(), g.value("action", "").c_str());
        }
      });
    });
    auto generation = std::make_shared<int64_t>(0);
    auto* rollback = config->add_subcommand(
        "rollback", "Serve an earlier generation of the shared config again (a new generation)");
    rollback->add_option("generation", *generation, "The generation to go back to")->required();
    common(rollback);
    rollback->callback([opts, generation] {
      const json j =
          call(*opts, "POST", "/admin/config/rollback", json{{"generation", *generation}});
      output(*opts, j, [&] {
        std::printf("generation %lld now serves generation %lld's config\n",
                    static_cast<long long>(j.value("generation", int64_t{0})),
                    static_cast<long long>(*generation));
      });
    });
  }

  // ---- audit ----
  auto audit_since = std::make_shared<std::string>("7d");
  auto* audit = app.add_subcommand("audit", "Admin changes: who, what, when");
  audit->add_option("--since", *audit_since, "How far back (e.g. 1h, 7d)");
  common(audit);
  audit->callback([opts, audit_since] {
    const json j = call(*opts, "GET", "/admin/audit?since=" + urlEncode(*audit_since));
    output(*opts, j, [&] {
      std::printf("%-22s %-12s %-14s %-16s %s\n", "WHEN (UTC)", "ACTOR", "ACTION", "TARGET",
                  "DETAIL");
      for (const auto& a : j["audit"]) {
        std::printf("%-22s %-12s %-14s %-16s %s\n", timeText(a.value("ts_ms", int64_t{0})).c_str(),
                    a.value("actor", "").c_str(), a.value("action", "").c_str(),
                    a.value("target", "").c_str(), a["detail"].dump().c_str());
      }
    });
  });
}

}  // namespace infera::cli
