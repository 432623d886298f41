// Governance end to end on embedded defaults (SQLite file, in-process counters): keys and teams
// through the admin API, authentication, permissions, limits with OpenAI's 429 conventions, usage
// records (exact for streams, completed and aborted), budgets, revocation, rotation, the cache.

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "access/access_fixture.h"
#include "core/log.h"
#include "fakes/http_test_client.h"
#include "store/sql.h"

namespace infera::access {
namespace {

using namespace govtest;
using testing::TestClient;
using testing::waitFor;

// How many requests a limit admits one after another (each settled before the next) when each
// reserves `reserve` up front and then uses `used`: request k goes while what the k-1 before it
// used, plus its own reservation, is within the limit. A limit enforced at twice its value, on
// reservations alone, or never reconciled admits another number.
int64_t admittedInTurn(double limit, double reserve, double used) {
  int64_t k = 0;
  while (static_cast<double>(k) * used + reserve <= limit + 1e-9 && k < 1000) ++k;
  return k;
}

// The gateway's prompt estimate for a body (a quarter of its bytes, plus one).
int64_t promptEstimate(const std::string& body) {
  return static_cast<int64_t>(body.size() / 4) + 1;
}

class GovernanceTest : public ::testing::Test {
 protected:
  void start(const std::string& governance_extra = "", const std::string& model_extra = "",
             const std::string& deployment_extra = "", double token_ms = 0) {
    emu_ = startEmulator(token_ms);
    ASSERT_TRUE(emu_);
    db_path_ = tempPath("gov.db");
    gw_ = startGov(govConfig(emu_->url(), "sqlite:" + db_path_, governance_extra, model_extra,
                             deployment_extra),
                   stepped_time_ ? &clock_ : nullptr);
    ASSERT_TRUE(gw_);
  }
  // Usage rows straight from the store file, by request id.
  json usageByRequest() {
    auto db = store::SqlDb::open("sqlite:" + db_path_);
    EXPECT_TRUE(db.ok());
    json out = json::object();
    if (!db.ok()) return out;
    auto r = (*db)->exec(
        "SELECT request_id, prompt_tokens, completion_tokens, aborted, estimated, status, stream, "
        "cached, team, "
        "key_id FROM infera_usage");
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return out;
    for (size_t i = 0; i < r->rows.size(); ++i) {
      out[r->text(i, 0)] = {{"prompt", r->integer(i, 1)},  {"completion", r->integer(i, 2)},
                            {"aborted", r->integer(i, 3)}, {"estimated", r->integer(i, 4)},
                            {"status", r->integer(i, 5)},  {"stream", r->integer(i, 6)},
                            {"cached", r->integer(i, 7)},  {"team", r->text(i, 8)},
                            {"key", r->text(i, 9)}};
    }
    return out;
  }

  // With stepped_time_ set before start(), access control reads clock_ (a test steps it instead
  // of waiting).
  bool stepped_time_ = false;
  FakeClock clock_{FakeClock::AtSystemTime{}};
  std::unique_ptr<emulator::Emulator> emu_;
  std::string db_path_;
  std::unique_ptr<server::Server> gw_;
};

TEST_F(GovernanceTest, AdminApiNeedsTheAdminToken) {
  start();
  EXPECT_EQ(admin(*gw_, "GET", "/admin/teams", "", "").status, 401);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/teams", "", "wrong").status, 401);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/teams").status, 200);
  // Bad input is refused with a clear message and writes nothing.
  const auto bad = admin(*gw_, "POST", "/admin/teams", R"({"name":"t","rpm":-1})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("rpm"), std::string::npos);
  EXPECT_EQ(parse(admin(*gw_, "GET", "/admin/teams").body)["teams"].size(), 0u);
  EXPECT_EQ(admin(*gw_, "POST", "/admin/keys", R"({"team":"nope"})").status, 404);
  // The other admin paths need the token too (probes and metrics do not), and a reload is
  // audited, refused or not (this gateway has no config file to re-read).
  EXPECT_EQ(admin(*gw_, "GET", "/admin/endpoints", "", "").status, 401);
  EXPECT_EQ(admin(*gw_, "POST", "/admin/reload", "", "wrong").status, 401);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/endpoints").status, 200);
  EXPECT_EQ(admin(*gw_, "GET", "/metrics", "", "").status, 200);
  EXPECT_EQ(admin(*gw_, "GET", "/readyz", "", "").status, 200);
  const auto reload = admin(*gw_, "POST", "/admin/reload");
  EXPECT_EQ(reload.status, 400);
  EXPECT_NE(reload.body.find("config file"), std::string::npos) << reload.body;
  const json audit = parse(admin(*gw_, "GET", "/admin/audit?since=1h").body)["audit"];
  ASSERT_EQ(audit.size(), 1u) << audit.dump();  // the refused changes above wrote nothing
  EXPECT_EQ(audit[0]["action"], "config.reload");
  EXPECT_EQ(audit[0]["actor"], "admin");
  EXPECT_EQ(audit[0]["detail"]["ok"], false);
}

// Keys (good, wrong, revoked), the admin token, prompts and completions appear in neither the
// process log (every component at debug level; Release builds compile debug lines out, the dev
// and asan builds run them) nor the access log.
TEST_F(GovernanceTest, KeysPromptsAndCompletionsStayOutOfTheLogs) {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  // The loggers exist before the gateway starts: their sinks are not changed while it logs.
  std::vector<spdlog::logger*> loggers;
  for (const char* c : {"gateway", "governance", "net", "store"})
    loggers.push_back(componentLogger(c));
  for (auto* l : loggers) l->sinks().push_back(sink);
  const spdlog::level::level_enum level = spdlog::get_level();
  setLogLevel("debug");
  struct Restore {
    std::vector<spdlog::logger*>& loggers;
    std::shared_ptr<spdlog::sinks::sink> sink;
    spdlog::level::level_enum level;
    std::unique_ptr<server::Server>& gw;
    ~Restore() {
      gw.reset();  // nothing logs while the sinks change, also when an assertion ended the test
                   // early
      for (auto* l : loggers) std::erase(l->sinks(), sink);
      setLogLevel(spdlog::level::to_string_view(level).data());
    }
  } restore{loggers, sink, level, gw_};

  emu_ = startEmulator();
  ASSERT_TRUE(emu_);
  db_path_ = tempPath("logs.db");
  const std::string access = tempPath("logs-access.jsonl");
  gw_ = startGov("access_log: " + access + "\n" + govConfig(emu_->url(), "sqlite:" + db_path_));
  ASSERT_TRUE(gw_);
  const std::string key = makeKey(*gw_, "logs", json{{"rpm", 3}});
  const std::string secret_part = key.substr(key.size() - 16);
  const std::string prompt = "zebra quartz marmalade prompt";
  const std::string body =
      R"({"model":"m1","max_tokens":6,"messages":[{"role":"user","content":")" + prompt + R"("}]})";
  const auto ok = call(*gw_, key, body);
  ASSERT_EQ(ok.status, 200) << ok.body;
  const std::string completion =
      parse(ok.body)["choices"][0]["message"]["content"].get<std::string>();
  ASSERT_GE(completion.size(), 12u) << completion;  // long enough to be told apart from other text
  EXPECT_EQ(call(*gw_, key, chat("m1", 4, true)).status, 200);
  std::string wrong = key;
  wrong.back() = wrong.back() == 'a' ? 'b' : 'a';
  EXPECT_EQ(call(*gw_, wrong, body).status, 401);
  EXPECT_EQ(call(*gw_, key, body).status, 200);
  EXPECT_EQ(call(*gw_, key, body).status, 429);
  const std::string id = parse(admin(*gw_, "GET", "/admin/keys?team=logs").body)["keys"][0]["id"];
  EXPECT_EQ(admin(*gw_, "POST", "/admin/keys/" + id + "/revoke").status, 200);
  EXPECT_EQ(call(*gw_, key, body).status, 401);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/teams", "", "not-the-token").status, 401);
  gw_.reset();  // flushes the access log

  std::ifstream in(access);
  std::stringstream access_text;
  access_text << in.rdbuf();
  ASSERT_NE(access_text.str().find("\"status\":429"), std::string::npos) << access_text.str();
  const std::string process = captured.str();
  ASSERT_NE(process.find("governance on: store"), std::string::npos)
      << "the capture saw nothing: " << process;
  for (const std::string& text : {process, access_text.str()}) {
    for (const std::string& secret :
         {key, secret_part, wrong.substr(wrong.size() - 16), std::string(kAdminToken),
          std::string("not-the-token"), prompt, completion}) {
      EXPECT_EQ(text.find(secret), std::string::npos) << "'" << secret << "' is in a log:\n"
                                                      << text;
    }
  }
}

// A team key on the admin port (the console's read-only view): its own team's keys, users and
// usage, nothing of another team, and 403 for every change; whoami says who it is; revoked, it is
// nobody.
TEST_F(GovernanceTest, TeamKeysReadOnlyTheirOwnTeamOnTheAdminPort) {
  start();
  ASSERT_EQ(admin(*gw_, "POST", "/admin/teams", R"({"name":"ml"})").status, 201);
  ASSERT_EQ(admin(*gw_, "POST", "/admin/teams", R"({"name":"web"})").status, 201);
  const json mine = parse(admin(*gw_, "POST", "/admin/keys", R"({"team":"ml","name":"ro"})").body);
  const json other = parse(admin(*gw_, "POST", "/admin/keys", R"({"team":"web"})").body);
  const std::string key = mine["key"];
  const json who = parse(admin(*gw_, "GET", "/admin/whoami", "", key).body);
  EXPECT_EQ(who["role"], "team");
  EXPECT_EQ(who["team"], "ml");
  EXPECT_EQ(who["key_id"], mine["id"]);
  EXPECT_EQ(parse(admin(*gw_, "GET", "/admin/whoami").body)["role"], "admin");
  EXPECT_EQ(parse(admin(*gw_, "GET", "/admin/whoami", "", "").body)["role"], "none");
  EXPECT_EQ(parse(admin(*gw_, "GET", "/admin/whoami", "", "sk-inf-nope").body)["role"], "none");

  const json keys = parse(admin(*gw_, "GET", "/admin/keys", "", key).body)["keys"];
  ASSERT_EQ(keys.size(), 1u) << keys.dump();
  EXPECT_EQ(keys[0]["team"], "ml");
  EXPECT_FALSE(keys[0].contains("key")) << "never a secret";
  EXPECT_EQ(admin(*gw_, "GET", "/admin/keys?team=web", "", key).status, 403);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/keys/" + other["id"].get<std::string>(), "", key).status,
            404);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/teams/ml", "", key).status, 200);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/teams/web", "", key).status, 404);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/users", "", key).status, 200);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/usage?group_by=team", "", key).status, 200);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/usage?team=web", "", key).status, 403);

  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/admin/teams"},
           {"POST", "/admin/teams"},
           {"POST", "/admin/keys"},
           {"PATCH", "/admin/keys/" + mine["id"].get<std::string>()},
           {"POST", "/admin/keys/" + mine["id"].get<std::string>() + "/revoke"},
           {"GET", "/admin/audit"},
           {"GET", "/admin/endpoints"},
           {"POST", "/admin/reload"},
           {"GET", "/admin/config"}}) {
    const auto r = admin(*gw_, method, path, R"({"team":"ml","name":"x"})", key);
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.body;
    EXPECT_NE(r.body.find("admin_token_required"), std::string::npos) << r.body;
  }
  EXPECT_EQ(parse(admin(*gw_, "GET", "/admin/keys/" + mine["id"].get<std::string>()).body)["state"],
            "active");
  EXPECT_EQ(parse(admin(*gw_, "GET", "/admin/teams").body)["teams"].size(), 2u);

  ASSERT_EQ(admin(*gw_, "POST", "/admin/keys/" + mine["id"].get<std::string>() + "/revoke").status,
            200);
  EXPECT_EQ(admin(*gw_, "GET", "/admin/keys", "", key).status, 401);
  EXPECT_EQ(parse(admin(*gw_, "GET", "/admin/whoami", "", key).body)["role"], "none");
}

TEST_F(GovernanceTest, KeysAuthenticateAndAreNeverShownAgain) {
  start();
  const std::string key = makeKey(*gw_, "ml");
  ASSERT_TRUE(key.starts_with("sk-inf-")) << key;

  const auto missing = call(*gw_, "", chat("m1", 2));
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(errorCode(missing), "missing_api_key");
  const auto wrong =
      call(*gw_, key.substr(0, key.size() - 1) + (key.back() == 'a' ? "b" : "a"), chat("m1", 2));
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(errorCode(wrong), "invalid_api_key");
  EXPECT_EQ(wrong.body.find(key.substr(7)), std::string::npos);  // never echoes the key

  const auto ok = call(*gw_, key, chat("m1", 2));
  EXPECT_EQ(ok.status, 200) << ok.body;

  // list/show never reveal the secret, salt or hash.
  const auto list = admin(*gw_, "GET", "/admin/keys");
  EXPECT_EQ(list.status, 200);
  EXPECT_EQ(list.body.find(key.substr(20)), std::string::npos);
  EXPECT_EQ(list.body.find("hash"), std::string::npos);
  EXPECT_EQ(list.body.find("salt"), std::string::npos);
  // Nor does the store: only the salted keyed hash is there.
  auto db = store::SqlDb::open("sqlite:" + db_path_);
  ASSERT_TRUE(db.ok());
  auto rows = (*db)->exec("SELECT hash, salt FROM infera_keys");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(rows->text(0, 0).find(key.substr(20)), std::string::npos);
  EXPECT_EQ(rows->text(0, 0).size(), 64u);
}

TEST_F(GovernanceTest, ModelPermissionsAreAtMostTheTeams) {
  start();
  const std::string key = makeKey(*gw_, "vision", json{{"models", "m1*"}});
  EXPECT_EQ(call(*gw_, key, chat("m1", 1)).status, 200);
  EXPECT_EQ(call(*gw_, key, chat("m1-alias", 1)).status, 200);
  const auto denied = call(*gw_, key, chat("m2", 1));
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(errorCode(denied), "model_not_allowed");
  // A key cannot be given models outside its team's list.
  const auto wider = admin(*gw_, "POST", "/admin/keys", R"({"team":"vision","models":"m2"})");
  EXPECT_EQ(wider.status, 400) << wider.body;
  // Nor limits above the team's.
  admin(*gw_, "PATCH", "/admin/teams/vision", R"({"tpm":1000})");
  EXPECT_EQ(admin(*gw_, "POST", "/admin/keys", R"({"team":"vision","tpm":5000})").status, 400);
}

TEST_F(GovernanceTest, RequestLimitAnswers429WithOpenAiHeaders) {
  start();
  const std::string key = makeKey(*gw_, "small", json{{"rpm", 3}, {"tpm", 100000}});
  for (int i = 0; i < 3; ++i) {
    const auto r = call(*gw_, key, chat("m1", 2));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-ratelimit-limit-requests"), "3");
    EXPECT_EQ(r.header("x-ratelimit-remaining-requests"), std::to_string(2 - i));
    EXPECT_EQ(r.header("x-ratelimit-limit-tokens"), "100000");
    EXPECT_FALSE(r.header("x-ratelimit-remaining-tokens").empty());
    EXPECT_FALSE(r.header("x-ratelimit-reset-requests").empty());
    EXPECT_FALSE(r.header("x-ratelimit-reset-tokens").empty());
  }
  const auto limited = call(*gw_, key, chat("m1", 2));
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(errorCode(limited), "rate_limit_exceeded");
  const int retry = std::atoi(limited.header("retry-after").c_str());
  EXPECT_GE(retry, 1);
  EXPECT_LE(retry, 60);
  EXPECT_EQ(limited.header("x-ratelimit-remaining-requests"), "0");
  EXPECT_EQ(limited.header("x-ratelimit-limit-requests"), "3");
  EXPECT_FALSE(limited.header("x-ratelimit-reset-requests").empty());
  // The tokens' figures too, although tokens did not refuse it (what is left without this request).
  EXPECT_EQ(limited.header("x-ratelimit-limit-tokens"), "100000");
  const int64_t tokens_left = std::atoll(limited.header("x-ratelimit-remaining-tokens").c_str());
  EXPECT_GT(tokens_left, 99'000);
  EXPECT_LT(tokens_left, 100'000);
  EXPECT_NE(parse(limited.body)["error"]["message"].get<std::string>().find("requests per min"),
            std::string::npos);
  EXPECT_EQ(emu_->stats().requests.load(), 3u);  // the refused request never reached the backend
}

TEST_F(GovernanceTest, TokenReservationRefusesUpFrontAndReconcilesToActualUsage) {
  start("  default_max_tokens: 150\n");
  const std::string key = makeKey(*gw_, "tok", json{{"tpm", 400}});
  // Worst case (prompt estimate + max_tokens) above the limit: refused before the backend.
  const auto too_big = call(*gw_, key, chat("m1", 500));
  EXPECT_EQ(too_big.status, 429);
  EXPECT_EQ(errorCode(too_big), "rate_limit_exceeded");
  EXPECT_EQ(emu_->stats().requests.load(), 0u);
  // No max_tokens: ~180 tokens reserved (prompt estimate + default_max_tokens 150), ~21 used (the
  // emulator writes 16). Reservations alone would admit 2; reconciled, about 10 fit.
  const std::string body =
      R"({"model":"m1","messages":[{"role":"user","content":"hello there, how are you"}]})";
  int ok = 0;
  TestResponse last;
  int64_t used_each = 0;
  for (int i = 0; i < 30; ++i) {
    last = callSettled(*gw_, key, body);
    if (last.status != 200) break;
    if (ok == 0) used_each = parse(last.body)["usage"]["total_tokens"].get<int64_t>();
    ++ok;
  }
  // Exactly as many as fit: request k is admitted while what the k-1 before it used, plus its own
  // reservation (a quarter of the body's bytes + 1, plus default_max_tokens), is within the 400.
  // A limit enforced on reservations alone would admit 2; one that never reconciled, or counted
  // twice, another number.
  ASSERT_GT(used_each, 0);
  EXPECT_EQ(ok, admittedInTurn(400, static_cast<double>(promptEstimate(body) + 150),
                               static_cast<double>(used_each)))
      << "each request used " << used_each;
  EXPECT_EQ(last.status, 429);
  EXPECT_EQ(last.header("x-ratelimit-limit-tokens"), "400");
  EXPECT_LT(std::atoi(last.header("x-ratelimit-remaining-tokens").c_str()), 180);
}

// vLLM's pooling and tokenizer APIs through the gateway: routed by the body's model like chat,
// authenticated before the body, and billed from the engine's own usage as input tokens (rerank
// reports only a total); tokenize and detokenize cost no tokens.
TEST_F(GovernanceTest, RerankScoreAndTokenizeAreRoutedAndBilledAsInput) {
  start();
  const std::string key = makeKey(*gw_, "pool");
  auto post = [&](const std::string& path, const std::string& body, const std::string& id) {
    return call(*gw_, key, body, {{"x-request-id", id}}, path);
  };
  const auto rerank = post("/v1/rerank",
                           R"({"model":"m1","query":"red apples","documents":["green apples",)"
                           R"("red apples are sweet","bananas"],"top_n":2})",
                           "rr-1");
  ASSERT_EQ(rerank.status, 200) << rerank.body;
  const json r = parse(rerank.body);
  ASSERT_EQ(r["results"].size(), 2u);
  EXPECT_EQ(r["results"][0]["index"], 1);  // "red apples are sweet" shares the most words
  EXPECT_EQ(r["results"][0]["document"]["text"], "red apples are sweet");
  const int64_t rerank_tokens = r["usage"]["total_tokens"].get<int64_t>();
  ASSERT_GT(rerank_tokens, 0);
  // The Jina/Cohere paths vLLM serves reach the same engine.
  EXPECT_EQ(post("/rerank", R"({"model":"m1","query":"a","documents":["a"]})", "rr-2").status, 200);
  EXPECT_EQ(post("/v2/rerank", R"({"model":"m1","query":"a","documents":["a"]})", "rr-3").status,
            200);
  const auto score = post(
      "/v1/score", R"({"model":"m1","text_1":"red apples","text_2":["red apples","x"]})", "sc-1");
  ASSERT_EQ(score.status, 200) << score.body;
  const json sc = parse(score.body);
  EXPECT_EQ(sc["data"][0]["score"], 1.0);
  EXPECT_EQ(sc["data"][1]["score"], 0.0);
  const int64_t score_tokens = sc["usage"]["prompt_tokens"].get<int64_t>();
  const auto tok = post("/tokenize", R"({"model":"m1","prompt":"hello big world"})", "tk-1");
  ASSERT_EQ(tok.status, 200) << tok.body;
  const json t = parse(tok.body);
  EXPECT_EQ(t["count"], 3);
  const auto detok =
      post("/detokenize", R"({"model":"m1","tokens":)" + t["tokens"].dump() + "}", "tk-2");
  ASSERT_EQ(detok.status, 200) << detok.body;
  EXPECT_EQ(parse(detok.body)["prompt"], "hello big world");
  // A model the engine does not know is the gateway's 404; no key is 401 before the body.
  EXPECT_EQ(post("/score", R"({"model":"nope","text_1":"a","text_2":"b"})", "sc-2").status, 404);
  EXPECT_EQ(call(*gw_, "", R"({"model":"m1","prompt":"x"})", {}, "/tokenize").status, 401);
  json rows;
  ASSERT_TRUE(waitFor([&] {
    rows = usageByRequest();
    return rows.contains("rr-1") && rows.contains("sc-1") && rows.contains("tk-1") &&
           rows.contains("tk-2");
  }));
  EXPECT_EQ(rows["rr-1"]["prompt"], rerank_tokens);
  EXPECT_EQ(rows["rr-1"]["completion"], 0);
  EXPECT_EQ(rows["rr-1"]["estimated"], 0);
  EXPECT_EQ(rows["sc-1"]["prompt"], score_tokens);
  EXPECT_EQ(rows["sc-1"]["completion"], 0);
  EXPECT_EQ(rows["tk-1"]["prompt"], 0);
  EXPECT_EQ(rows["tk-1"]["completion"], 0);
}

TEST_F(GovernanceTest, UsageIsRecordedPerRequestAndQueryableByTeamAndModel) {
  start();
  const std::string a = makeKey(*gw_, "alpha");
  const std::string b = makeKey(*gw_, "beta");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(call(*gw_, a, chat("m1", 4)).status, 200);
  ASSERT_EQ(call(*gw_, b, chat("m2", 7)).status, 200);
  ASSERT_EQ(call(*gw_, b, R"({"model":"m1","input":"embed me"})", {}, "/v1/embeddings").status,
            200);
  json rows;
  ASSERT_TRUE(waitFor([&] {
    rows = usageRows(*gw_, "since=1h&granularity=total&group_by=team,model");
    int64_t n = 0;
    for (const auto& r : rows) n += r["requests"].get<int64_t>();
    return n == 5;
  }));
  bool saw_alpha = false, saw_beta_m2 = false;
  for (const auto& r : rows) {
    if (r["team"] == "alpha") {
      saw_alpha = true;
      EXPECT_EQ(r["model"], "m1");
      EXPECT_EQ(r["requests"], 3);
      EXPECT_EQ(r["completion_tokens"], 12);
      EXPECT_GT(r["prompt_tokens"].get<int64_t>(), 0);
    }
    if (r["team"] == "beta" && r["model"] == "m2") {
      saw_beta_m2 = true;
      EXPECT_EQ(r["completion_tokens"], 7);
    }
  }
  EXPECT_TRUE(saw_alpha);
  EXPECT_TRUE(saw_beta_m2);
  // Per-minute roll-up, filtered by team.
  const json minute = usageRows(*gw_, "since=1h&granularity=minute&team=alpha&group_by=model");
  int64_t n = 0;
  for (const auto& r : minute) {
    EXPECT_EQ(r["bucket_ms"].get<int64_t>() % 60000, 0);
    n += r["requests"].get<int64_t>();
  }
  EXPECT_EQ(n, 3);
  // Prometheus counters by team and model.
  EXPECT_EQ(gw_->metricSum("infera_usage_requests_total"), 5);
  EXPECT_NE(gw_->metricsText().find(
                "infera_usage_tokens_total{team=\"alpha\",model=\"m1\",kind=\"completion\"} 12"),
            std::string::npos);
}

TEST_F(GovernanceTest, StreamsAreBilledExactlyAndUsageTheClientDidNotAskForIsStripped) {
  start("", "", "        continuous_usage: true\n");
  const std::string key = makeKey(*gw_, "streams");
  // Client did not ask for usage: the gateway asked the backend anyway, and strips it.
  const auto plain = call(*gw_, key, chat("m1", 5, true));
  ASSERT_EQ(plain.status, 200);
  EXPECT_EQ(plain.body.find("usage"), std::string::npos) << plain.body;
  EXPECT_NE(plain.body.find("[DONE]"), std::string::npos);
  // Client asked for the final usage chunk: it gets it (and null usage on the other chunks).
  const auto with_usage =
      call(*gw_, key, chat("m1", 5, true, R"(,"stream_options":{"include_usage":true})"));
  ASSERT_EQ(with_usage.status, 200);
  EXPECT_NE(with_usage.body.find(R"("choices":[],"usage":{"prompt_tokens")"), std::string::npos)
      << with_usage.body;
  EXPECT_NE(with_usage.body.find(R"("usage":null)"), std::string::npos) << with_usage.body;
  const std::string ids[2] = {plain.header("x-request-id"), with_usage.header("x-request-id")};
  json usage;
  ASSERT_TRUE(waitFor([&] {
    usage = usageByRequest();
    return usage.contains(ids[0]) && usage.contains(ids[1]);
  }));
  for (const auto& id : ids) {
    const auto truth = emu_->usageFor(id);
    ASSERT_TRUE(truth.has_value());
    EXPECT_EQ(usage[id]["completion"], truth->completion_tokens);
    EXPECT_EQ(usage[id]["prompt"], truth->prompt_tokens);
    EXPECT_EQ(usage[id]["estimated"], 0);
  }
}

// A client that leaves before any answer byte, once its request reached a backend, is billed the
// prompt estimate (aborted, estimated), not nothing.
TEST_F(GovernanceTest, AClientLeavingBeforeTheAnswerIsBilledThePromptEstimate) {
  emu_ = startEmulator(0, /*ttft_ms=*/5000);
  ASSERT_TRUE(emu_);
  db_path_ = tempPath("early-abort.db");
  gw_ = startGov(govConfig(emu_->url(), "sqlite:" + db_path_));
  ASSERT_TRUE(gw_);
  const std::string key = makeKey(*gw_, "early");
  const std::string body = chat("m1", 20);
  TestClient c(gw_->port());
  ASSERT_TRUE(c.send("POST", "/v1/chat/completions", body,
                     {{"authorization", "Bearer " + key},
                      {"content-type", "application/json"},
                      {"x-request-id", "early-1"}}));
  ASSERT_TRUE(waitFor([&] { return emu_->stats().requests.load() == 1; }));
  c.close();
  json usage;
  ASSERT_TRUE(waitFor([&] {
    usage = usageByRequest();
    return usage.contains("early-1");
  }));
  EXPECT_EQ(usage["early-1"]["aborted"], 1);
  EXPECT_EQ(usage["early-1"]["estimated"], 1);
  EXPECT_EQ(usage["early-1"]["status"], 499);
  EXPECT_EQ(usage["early-1"]["prompt"],
            static_cast<int64_t>(body.size() / 4 + 1));  // the byte-based estimate
  EXPECT_EQ(usage["early-1"]["completion"], 0);
}

TEST_F(GovernanceTest, EveryCompletedAndAbortedStreamIsRecordedWithTheBackendsCounts) {
  start("", "", "        continuous_usage: true\n", /*token_ms=*/15);
  const std::string key = makeKey(*gw_, "streams");
  std::vector<std::string> completed, aborted;
  for (int i = 0; i < 8; ++i) {
    TestClient c(gw_->port());
    ASSERT_TRUE(c.send("POST", "/v1/chat/completions", chat("m1", 30, true),
                       {{"authorization", "Bearer " + key}, {"content-type", "application/json"}}));
    TestResponse head;
    ASSERT_TRUE(c.readHead(head));
    ASSERT_EQ(head.status, 200);
    const std::string id = head.header("x-request-id");
    if (i % 2 == 0) {
      while (c.readPiece()) {
      }
      completed.push_back(id);
    } else {
      // Read a few tokens, then leave.
      std::string seen;
      while (seen.find("content\":\" brown") == std::string::npos) {
        auto p = c.readPiece();
        ASSERT_TRUE(p.has_value());
        seen += *p;
      }
      c.close();
      aborted.push_back(id);
    }
  }
  json usage;
  ASSERT_TRUE(waitFor([&] {
    usage = usageByRequest();
    for (const auto& id : completed) {
      if (!usage.contains(id)) return false;
    }
    for (const auto& id : aborted) {
      if (!usage.contains(id) || !emu_->usageFor(id)) return false;
    }
    return true;
  }));
  for (const auto& id : completed) {
    const auto truth = emu_->usageFor(id);
    ASSERT_TRUE(truth && truth->completed);
    EXPECT_EQ(usage[id]["completion"], 30);
    EXPECT_EQ(usage[id]["completion"], truth->completion_tokens);
    EXPECT_EQ(usage[id]["prompt"], truth->prompt_tokens);
  }
  for (const auto& id : aborted) {
    const auto truth = emu_->usageFor(id);
    ASSERT_TRUE(truth);
    EXPECT_FALSE(truth->completed);
    EXPECT_EQ(usage[id]["aborted"], 1);
    EXPECT_EQ(usage[id]["prompt"], truth->prompt_tokens);
    // The last cumulative usage the gateway saw: every token the backend wrote, except at most the
    // one in flight when the client left.
    const int64_t billed = usage[id]["completion"].get<int64_t>();
    EXPECT_LE(billed, truth->completion_tokens);
    EXPECT_GE(billed, truth->completion_tokens - 1);
    EXPECT_GE(billed, 3);
  }
}

TEST_F(GovernanceTest, RevocationTakesEffectWithinOneSecondAndRotationKeepsAGracePeriod) {
  stepped_time_ = true;
  start();
  const std::string key = makeKey(*gw_, "ops");
  ASSERT_EQ(call(*gw_, key, chat("m1", 1)).status, 200);
  const std::string id = key.substr(7, 12);

  // Rotation: a new key works at once, the old one until its grace ends.
  const auto rot = admin(*gw_, "POST", "/admin/keys/" + id + "/rotate", R"({"grace":"2s"})");
  ASSERT_EQ(rot.status, 201) << rot.body;
  const std::string fresh = parse(rot.body)["key"].get<std::string>();
  ASSERT_TRUE(waitFor([&] { return call(*gw_, fresh, chat("m1", 1)).status == 200; },
                      std::chrono::seconds(1)));
  EXPECT_EQ(call(*gw_, key, chat("m1", 1)).status, 200);
  clock_.advance(std::chrono::milliseconds(1'900));
  EXPECT_EQ(call(*gw_, key, chat("m1", 1)).status, 200);  // still within its 2 s of grace
  clock_.advance(std::chrono::milliseconds(200));
  EXPECT_EQ(call(*gw_, key, chat("m1", 1)).status, 401);  // the grace is over: no waiting for it
  EXPECT_EQ(errorCode(call(*gw_, key, chat("m1", 1))), "expired_api_key");

  // Revocation reaches every worker within 1 s: each worker says which key/team generation it
  // serves, and every one must reach the generation the revocation wrote (asking a few requests
  // on new connections would pass while one worker kept the old keys, as long as the kernel sent
  // those connections elsewhere).
  const std::string fresh_id = fresh.substr(7, 12);
  ASSERT_EQ(admin(*gw_, "POST", "/admin/keys/" + fresh_id + "/revoke").status, 200);
  int64_t revoked_generation = 0;
  {
    auto db = store::SqlDb::open("sqlite:" + db_path_);
    ASSERT_TRUE(db.ok());
    auto r = (*db)->exec("SELECT v FROM infera_meta WHERE k = 'generation'");
    ASSERT_TRUE(r.ok() && r->rows.size() == 1);
    revoked_generation = r->integer(0, 0);
  }
  std::map<std::string, double> generations;
  EXPECT_TRUE(waitFor(
      [&] {
        generations = perWorker(*gw_, "infera_governance_worker_generation");
        if (generations.size() != 2) return false;  // the fixture's two workers
        for (const auto& [worker, g] : generations) {
          if (g < static_cast<double>(revoked_generation)) return false;
        }
        return true;
      },
      std::chrono::seconds(1)))
      << "a worker still serves an older generation than " << revoked_generation << ": "
      << ::testing::PrintToString(generations);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(call(*gw_, fresh, chat("m1", 1)).status, 401);

  // Every change is in the audit log.
  const json audit = parse(admin(*gw_, "GET", "/admin/audit?since=1h").body)["audit"];
  std::vector<std::string> actions;
  for (const auto& a : audit) actions.push_back(a["action"].get<std::string>());
  EXPECT_NE(std::find(actions.begin(), actions.end(), "key.revoke"), actions.end());
  EXPECT_NE(std::find(actions.begin(), actions.end(), "key.rotate"), actions.end());
  EXPECT_NE(std::find(actions.begin(), actions.end(), "key.create"), actions.end());
  EXPECT_NE(std::find(actions.begin(), actions.end(), "team.create"), actions.end());
}

TEST_F(GovernanceTest, ExpiredKeysAreRefused) {
  start();
  makeKey(*gw_, "temp");
  const auto kr = admin(*gw_, "POST", "/admin/keys", R"({"team":"temp","expires_ms":1000})");
  ASSERT_EQ(kr.status, 201);
  const std::string key = parse(kr.body)["key"].get<std::string>();
  const auto r = call(*gw_, key, chat("m1", 1));
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(errorCode(r), "expired_api_key");
}

TEST_F(GovernanceTest, TeamBudgetAnswers429InsufficientQuota) {
  start();
  const std::string key =
      makeKey(*gw_, "capped", json{{"budget_tokens", 100}, {"budget_period", "day"}});
  int ok = 0;
  TestResponse last;
  int64_t used_each = 0;
  for (int i = 0; i < 30; ++i) {
    last = callSettled(*gw_, key, chat("m1", 10));
    if (last.status != 200) break;
    if (ok == 0) used_each = parse(last.body)["usage"]["total_tokens"].get<int64_t>();
    ++ok;
  }
  ASSERT_GT(used_each, 0);
  EXPECT_EQ(ok, admittedInTurn(100, static_cast<double>(promptEstimate(chat("m1", 10)) + 10),
                               static_cast<double>(used_each)))
      << "each request used " << used_each;
  EXPECT_EQ(last.status, 429);
  EXPECT_EQ(errorCode(last), "budget_exceeded");
  EXPECT_EQ(parse(last.body)["error"]["type"], "insufficient_quota");
  EXPECT_NE(parse(last.body)["error"]["message"].get<std::string>().find("token budget"),
            std::string::npos);
}

TEST_F(GovernanceTest, DailyQuotaAndCostBudgetFromModelPrices) {
  // m1 costs $1 per 1M prompt tokens and $10,000 per 1M completion tokens: 1 cent per token out.
  start("", "    price: {prompt_per_1m: 1, completion_per_1m: 10000}\n");
  // A $0.50 daily budget: each request reserves max_tokens x 1 cent (+ prompt), uses 5 cents.
  const std::string cost_key =
      makeKey(*gw_, "spender", json{{"budget_usd", 0.5}, {"budget_period", "day"}}, json::object());
  int ok = 0;
  TestResponse last;
  json usage;
  for (int i = 0; i < 30; ++i) {
    last = callSettled(*gw_, cost_key, chat("m1", 5));
    if (last.status != 200) break;
    if (ok == 0) usage = parse(last.body)["usage"];
    ++ok;
  }
  // $1 per 1M prompt tokens, 1 cent per completion token: each reserves its prompt estimate and
  // 5 completion tokens, and uses ~5 cents. $0.50 / 5 cents is 10, less the reservation of the
  // last: exactly 9 fit.
  ASSERT_TRUE(usage.is_object());
  const auto dollars = [](double prompt, double completion) {
    return (prompt * 1 + completion * 10'000) / 1e6;
  };
  const double used =
      dollars(usage["prompt_tokens"].get<double>(), usage["completion_tokens"].get<double>());
  const double reserve = dollars(static_cast<double>(promptEstimate(chat("m1", 5))), 5);
  EXPECT_EQ(ok, admittedInTurn(0.5, reserve, used)) << usage.dump();
  EXPECT_EQ(ok, 9);
  EXPECT_EQ(last.status, 429);
  EXPECT_EQ(errorCode(last), "budget_exceeded");
  EXPECT_NE(parse(last.body)["error"]["message"].get<std::string>().find("cost budget"),
            std::string::npos);
  // The cost is in the usage rows.
  ASSERT_TRUE(waitFor([&] {
    const json rows = usageRows(*gw_, "since=1h&granularity=total&group_by=team&team=spender");
    return rows.size() == 1 && rows[0]["requests"] == ok + 1 &&
           rows[0]["cost_usd"].get<double>() > 0.05 * ok - 1e-9;
  }));
  // Daily token quota.
  const std::string daily_key = makeKey(*gw_, "daily", json{{"daily_tokens", 60}}, json::object());
  int daily_ok = 0;
  int64_t daily_used = 0;
  for (int i = 0; i < 30; ++i) {
    last = callSettled(*gw_, daily_key, chat("m1", 5));
    if (last.status != 200) break;
    if (daily_ok == 0) daily_used = parse(last.body)["usage"]["total_tokens"].get<int64_t>();
    ++daily_ok;
  }
  ASSERT_GT(daily_used, 0);
  EXPECT_EQ(daily_ok, admittedInTurn(60, static_cast<double>(promptEstimate(chat("m1", 5)) + 5),
                                     static_cast<double>(daily_used)));
  EXPECT_EQ(last.status, 429);
  EXPECT_EQ(errorCode(last), "daily_quota_exceeded");
  EXPECT_EQ(parse(last.body)["error"]["type"], "insufficient_quota");
}

TEST_F(GovernanceTest, ModelAndDeploymentLimitsProtectTheBackend) {
  start("", "    limits: {rpm: 2}\n");
  const std::string a = makeKey(*gw_, "a");
  const std::string b = makeKey(*gw_, "b");
  EXPECT_EQ(call(*gw_, a, chat("m1", 1)).status, 200);
  EXPECT_EQ(call(*gw_, b, chat("m1", 1)).status, 200);
  const auto r = call(*gw_, a, chat("m1", 1));
  EXPECT_EQ(r.status, 429);
  EXPECT_NE(r.body.find("model"), std::string::npos);
  EXPECT_EQ(call(*gw_, a, chat("m2", 1)).status, 200);  // other models are not affected
}

TEST_F(GovernanceTest, AFullDeploymentAnswers429WhenNoOtherHasRoom) {
  start("", "", "        limits: {rpm: 2}\n");
  const std::string key = makeKey(*gw_, "dep", {{"rpm", 10}});
  EXPECT_EQ(call(*gw_, key, chat("m1", 1)).status, 200);
  EXPECT_EQ(call(*gw_, key, chat("m1", 1)).header("x-ratelimit-remaining-requests"), "8");
  const auto full = call(*gw_, key, chat("m1", 1));
  EXPECT_EQ(full.status, 429);
  EXPECT_EQ(errorCode(full), "deployment_rate_limited");
  EXPECT_EQ(parse(full.body)["error"]["type"], "requests");
  // When the deployment has room again (its first request leaves the window within a minute).
  ASSERT_FALSE(full.header("retry-after").empty());
  EXPECT_GE(std::stoi(full.header("retry-after")), 1);
  EXPECT_LE(std::stoi(full.header("retry-after")), 60);
  EXPECT_EQ(emu_->stats().requests.load(), 2u);
  // The gateway refused that request: it does not count against the team's requests per minute
  // (given back when its exchange ends, with its usage record, just after the answer).
  ASSERT_TRUE(waitFor([&] { return usageByRequest().contains(full.header("x-request-id")); }));
  EXPECT_EQ(call(*gw_, key, chat("m2", 1)).header("x-ratelimit-remaining-requests"),
            "7");  // another model's deployment
}

// A deployment at its own limit is skipped for another deployment of the model that has room.
TEST_F(GovernanceTest, AFullDeploymentSpillsToAnotherOfTheSameModel) {
  emu_ = startEmulator();
  ASSERT_TRUE(emu_);
  db_path_ = tempPath("spill.db");
  std::string yaml =
      govConfig(emu_->url(), "sqlite:" + db_path_, "", "", "        limits: {rpm: 1}\n");
  const size_t m2 = yaml.find("  - name: m2\n");
  ASSERT_NE(m2, std::string::npos);
  yaml.insert(m2, "      - name: d1b\n        endpoints: [{url: " + emu_->url() + "}]\n");
  gw_ = startGov(yaml);
  ASSERT_TRUE(gw_);
  const std::string key = makeKey(*gw_, "spill");
  // Until the balancer has picked the full d1 at least once more (it picks among both at random).
  int sent = 0;
  while (sent < 60 && gw_->metricSum("infera_rate_limited_total") < 1) {
    EXPECT_EQ(call(*gw_, key, chat("m1", 1)).status, 200) << sent;
    ++sent;
  }
  ASSERT_GE(gw_->metricSum("infera_rate_limited_total"),
            1);  // d1 refused one, and it still got 200
  std::map<std::string, int64_t> by_deployment;
  ASSERT_TRUE(waitFor([&] {
    auto db = store::SqlDb::open("sqlite:" + db_path_);
    if (!db.ok()) return false;
    auto r = (*db)->exec("SELECT deployment, COUNT(*) FROM infera_usage GROUP BY deployment");
    if (!r.ok()) return false;
    by_deployment.clear();
    int64_t n = 0;
    for (size_t i = 0; i < r->rows.size(); ++i) {
      by_deployment[r->text(i, 0)] = r->integer(i, 1);
      n += r->integer(i, 1);
    }
    return n == sent;
  }));
  EXPECT_EQ(by_deployment["d1"], 1);  // its one request per minute
  EXPECT_EQ(by_deployment["d1b"], sent - 1);
}

TEST_F(GovernanceTest, DeterministicRequestsAreServedFromTheCache) {
  start("  cache: {ttl_ms: 60000}\n");
  const std::string key = makeKey(*gw_, "cache");
  const std::string body = chat("m1", 3, false, R"(,"temperature":0)");
  const auto first = call(*gw_, key, body);
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.header("x-infera-cache"), "miss");
  // The entry is stored once the answer has been relayed.
  ASSERT_TRUE(waitFor([&] { return gw_->metricSum("infera_cache_bytes") > 0; }));
  // Same request with other whitespace and key order: a hit, the same answer, no backend call.
  const std::string reordered =
      R"({ "messages":[{"content":"hello there, how are you","role":"user"}], "temperature":0, "stream":false, "max_tokens":3, "model":"m1" })";
  const uint64_t before = emu_->stats().requests.load();
  const auto second = call(*gw_, key, reordered);
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(second.header("x-infera-cache"), "hit");
  EXPECT_EQ(second.body, first.body);
  EXPECT_EQ(emu_->stats().requests.load(), before);
  // Non-deterministic requests are not cached unless asked.
  EXPECT_EQ(call(*gw_, key, chat("m1", 3)).header("x-infera-cache"), "");
  EXPECT_EQ(call(*gw_, key, chat("m1", 3), {{"x-infera-cache", "on"}}).header("x-infera-cache"),
            "miss");
  // Cached answers still count as usage, marked cached.
  json usage;
  ASSERT_TRUE(waitFor([&] {
    usage = usageByRequest();
    return usage.contains(second.header("x-request-id"));
  }));
  EXPECT_EQ(usage[second.header("x-request-id")]["cached"], 1);
  EXPECT_EQ(usage[second.header("x-request-id")]["completion"], 3);
  // Entries are per team: another team's identical request is a miss (a hit would tell it what
  // this team asked).
  const std::string other = makeKey(*gw_, "cache-other");
  EXPECT_EQ(call(*gw_, other, reordered).header("x-infera-cache"), "miss");
}

// A hit does not count against the model's (or a deployment's) limits: the backend did no work.
// With `scope: global` one entry serves every team.
TEST_F(GovernanceTest, CacheHitsSpareTheModelsLimitsAndGlobalScopeSharesEntries) {
  start("  cache: {ttl_ms: 60000, scope: global}\n", "    limits: {rpm: 1}\n");
  const std::string a = makeKey(*gw_, "ga");
  const std::string b = makeKey(*gw_, "gb");
  const std::string body = chat("m1", 3, false, R"(,"temperature":0)");
  ASSERT_EQ(call(*gw_, a, body).header("x-infera-cache"), "miss");
  ASSERT_TRUE(waitFor([&] { return gw_->metricSum("infera_cache_bytes") > 0; }));
  for (int i = 0; i < 3; ++i) {
    const auto hit = call(*gw_, i % 2 ? a : b, body);
    EXPECT_EQ(hit.status, 200) << hit.body;
    EXPECT_EQ(hit.header("x-infera-cache"), "hit");
  }
  // The model's one request per minute went to the first answer.
  const auto refused = call(*gw_, a, chat("m1", 3));
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(errorCode(refused), "rate_limit_exceeded");
}

TEST_F(GovernanceTest, UsersInsideATeamOnlyWhenTheKeyAllowsIt) {
  start();
  const std::string plain = makeKey(*gw_, "people");
  const auto kr = admin(*gw_, "POST", "/admin/keys", R"({"team":"people","allow_user":true})");
  const std::string with_user = parse(kr.body)["key"].get<std::string>();
  EXPECT_EQ(call(*gw_, plain, chat("m1", 1), {{"x-infera-user", "ann"}}).status, 403);
  EXPECT_EQ(call(*gw_, with_user, chat("m1", 1), {{"x-infera-user", "ann"}}).status, 200);
  ASSERT_TRUE(waitFor([&] {
    const json rows = usageRows(*gw_, "since=1h&granularity=total&group_by=user&user=ann");
    return rows.size() == 1 && rows[0]["requests"] == 1;
  }));
  // Per-user limits from the team: each user gets 2 requests a minute, independently.
  ASSERT_EQ(admin(*gw_, "PATCH", "/admin/teams/people", R"({"user_rpm":2})").status, 200);
  EXPECT_EQ(call(*gw_, with_user, chat("m1", 1), {{"x-infera-user", "bob"}}).status, 200);
  EXPECT_EQ(call(*gw_, with_user, chat("m1", 1), {{"x-infera-user", "bob"}}).status, 200);
  const auto third = call(*gw_, with_user, chat("m1", 1), {{"x-infera-user", "bob"}});
  EXPECT_EQ(third.status, 429);
  EXPECT_NE(third.body.find("user 'bob'"), std::string::npos) << third.body;
  EXPECT_EQ(call(*gw_, with_user, chat("m1", 1), {{"x-infera-user", "cy"}}).status, 200);
  EXPECT_EQ(call(*gw_, with_user, chat("m1", 1)).status, 200);  // no user: only key/team limits
  // bob's and cy's request counters are held in the process (and swept once idle).
  EXPECT_GE(gw_->metricSum("infera_ratelimit_local_counters"), 2);
}

// Issue 37, defect 3: a user header or a path that is not UTF-8 became a usage label that then
// stopped GET /admin/usage (and the console's usage page) answering at all. The door refuses such
// a request before anything is recorded; bytes a store holds from before the door are shown with
// U+FFFD, never a broken answer.
TEST_F(GovernanceTest, NamesThatAreNotUtf8AreRefusedAtTheDoorAndStoredOnesStillList) {
  start();
  makeKey(*gw_, "people");
  const auto kr = admin(*gw_, "POST", "/admin/keys", R"({"team":"people","allow_user":true})");
  const std::string key = parse(kr.body)["key"].get<std::string>();
  const auto latin1 = call(*gw_, key, chat("m1", 1), {{"x-infera-user", "Jos\xE9"}});
  EXPECT_EQ(latin1.status, 400) << latin1.body;
  EXPECT_EQ(parse(latin1.body)["error"]["code"], "invalid_utf8") << latin1.body;
  const auto path = call(*gw_, key, chat("m1", 1), {}, "/v1/%FE/completions");
  EXPECT_EQ(path.status, 400) << path.body;
  ASSERT_EQ(call(*gw_, key, chat("m1", 1), {{"x-infera-user", "Jos\xC3\xA9"}}).status, 200);
  ASSERT_TRUE(waitFor([&] {
    const json rows = usageRows(*gw_, "since=1h&granularity=total&group_by=user");
    int64_t n = 0;
    for (const auto& r : rows) n += r["requests"].get<int64_t>();
    return n == 1;
  }));
  EXPECT_EQ(usageRows(*gw_, "since=1h&granularity=total&group_by=user")[0]["user"], "Jos\xC3\xA9");
  // A store written before the door: raw bytes in a usage row, its roll-up and an audit entry.
  {
    auto db = store::SqlDb::open("sqlite:" + db_path_);
    ASSERT_TRUE(db.ok());
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const std::string bad = "bad\xFF\xFE";
    ASSERT_TRUE(
        (*db)
            ->exec("INSERT INTO infera_usage (ts_ms, request_id, key_id, team, user_id, model, "
                   "deployment, region, prompt_tokens, completion_tokens, latency_ms, ttft_ms, "
                   "status, cached, stream, aborted, estimated, cost_usd) VALUES (?, 'r-old', 'k', "
                   "'people', ?, ?, 'd1', "
                   "'', 1, 1, 1.0, 0, 404, 0, 0, 0, 0, 0)",
                   {store::SqlValue(now), store::SqlValue(bad), store::SqlValue(bad)})
            .ok());
    ASSERT_TRUE(
        (*db)
            ->exec("INSERT INTO infera_usage_minute (minute_ms, team, key_id, user_id, model, "
                   "deployment, requests, prompt_tokens, completion_tokens, cached, aborted, "
                   "errors, cost_usd, latency_ms_sum) VALUES (?, 'people', 'k', ?, ?, 'd1', "
                   "1, 1, 1, 0, 0, 1, 0, 1.0)",
                   {store::SqlValue(now - now % 60000), store::SqlValue(bad), store::SqlValue(bad)})
            .ok());
    ASSERT_TRUE((*db)
                    ->exec("INSERT INTO infera_audit VALUES (?, 999999, ?, 'alias.set', ?, '{}')",
                           {store::SqlValue(now), store::SqlValue(std::string("console:Jos\xE9")),
                            store::SqlValue(bad)})
                    .ok());
  }
  for (const std::string q :
       {"/admin/usage?since=1h&granularity=total&group_by=user,model",
        "/admin/usage?since=1h&granularity=minute&group_by=model",
        "/admin/usage?since=1h&granularity=hour&group_by=team,user", "/admin/audit?since=1h"}) {
    const auto r = admin(*gw_, "GET", q);
    EXPECT_EQ(r.status, 200) << q << ": " << r.body;
    EXPECT_FALSE(parse(r.body).is_discarded()) << q << " is not JSON: " << r.body.substr(0, 300);
    EXPECT_NE(r.body.find("bad\xEF\xBF\xBD\xEF\xBF\xBD"), std::string::npos) << q;
  }
}

TEST_F(GovernanceTest, AUsersOwnRecordSetsItsLimitsQuotaBudgetAndModels) {
  start();
  makeKey(*gw_, "lab", json{{"models", "m1,m2"}, {"user_rpm", 100}, {"daily_tokens", 100000}});
  const auto kr = admin(*gw_, "POST", "/admin/keys", R"({"team":"lab","allow_user":true})");
  ASSERT_EQ(kr.status, 201) << kr.body;
  const std::string key = parse(kr.body)["key"].get<std::string>();
  auto as = [&](const std::string& user, const std::string& model, int max_tokens = 1) {
    EXPECT_TRUE(waitFor([&] { return gw_->metricSum("infera_gateway_requests_in_flight") == 0; }));
    return call(*gw_, key, chat(model, max_tokens), {{"x-infera-user", user}});
  };
  // A user is at most its team: models outside the team's, limits above it, or an unknown team
  // are refused and nothing is written.
  EXPECT_EQ(
      admin(*gw_, "POST", "/admin/users", R"({"team":"lab","name":"dana","models":"m3"})").status,
      400);
  EXPECT_EQ(
      admin(*gw_, "POST", "/admin/users", R"({"team":"lab","name":"dana","daily_tokens":200000})")
          .status,
      400);
  EXPECT_EQ(admin(*gw_, "POST", "/admin/users", R"({"team":"nope","name":"dana"})").status, 404);
  EXPECT_EQ(admin(*gw_, "POST", "/admin/users", R"({"team":"lab","name":"a/b"})").status, 400);
  EXPECT_EQ(parse(admin(*gw_, "GET", "/admin/users?team=lab").body)["users"].size(), 0u);
  // dana: 2 requests a minute, m1 only.
  const auto created =
      admin(*gw_, "POST", "/admin/users", R"({"team":"lab","name":"dana","rpm":2,"models":"m1"})");
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(parse(created.body)["rpm"], 2);
  EXPECT_EQ(admin(*gw_, "POST", "/admin/users", R"({"team":"lab","name":"dana"})").status, 409);
  const auto m2 = as("dana", "m2");
  EXPECT_EQ(m2.status, 403);
  EXPECT_EQ(errorCode(m2), "model_not_allowed");
  EXPECT_EQ(as("dana", "m1").status, 200);
  EXPECT_EQ(as("dana", "m1").status, 200);
  const auto third = as("dana", "m1");
  EXPECT_EQ(third.status, 429);
  EXPECT_NE(third.body.find("user 'dana' of team 'lab'"), std::string::npos) << third.body;
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(as("eve", "m2").status, 200);  // no record: the team's defaults
  // A daily quota of the user's own (its rpm back to the team's default of 100). The quota starts
  // from what dana used today (seeded from the store when the record changes): wait until both
  // answered requests are written, so the seed holds them.
  int64_t dana_before = 0;
  ASSERT_TRUE(waitFor([&] {
    const json rows = usageRows(*gw_, "since=1h&granularity=total&group_by=user&user=dana");
    if (rows.size() != 1 || rows[0]["completion_tokens"] != 2) return false;
    dana_before = rows[0]["prompt_tokens"].get<int64_t>() + 2;
    return true;
  }));
  ASSERT_EQ(admin(*gw_, "PATCH", "/admin/users/lab/dana", R"({"rpm":0,"daily_tokens":60})").status,
            200);
  int ok = 0;
  TestResponse last;
  int64_t dana_each = 0;
  for (int i = 0; i < 30; ++i) {
    last = as("dana", "m1", 5);
    if (last.status != 200) break;
    if (ok == 0) dana_each = parse(last.body)["usage"]["total_tokens"].get<int64_t>();
    ++ok;
  }
  ASSERT_GT(dana_each, 0);
  EXPECT_EQ(ok, admittedInTurn(static_cast<double>(60 - dana_before),
                               static_cast<double>(promptEstimate(chat("m1", 5)) + 5),
                               static_cast<double>(dana_each)))
      << dana_before << " used before, " << dana_each << " each";
  EXPECT_EQ(last.status, 429);
  EXPECT_EQ(errorCode(last), "daily_quota_exceeded");
  EXPECT_NE(last.body.find("User 'dana' of team 'lab' is over its daily quota"), std::string::npos)
      << last.body;
  EXPECT_EQ(as("eve", "m1", 5).status, 200);  // the team's quota is far from used
  // A token budget of the user's own, which a restart does not reset (seeded from the usage).
  ASSERT_EQ(
      admin(*gw_, "POST", "/admin/users", R"({"team":"lab","name":"fay","budget_tokens":100})")
          .status,
      201);
  int fay_ok = 0;
  int64_t fay_each = 0;
  for (int i = 0; i < 30; ++i) {
    last = as("fay", "m1", 10);
    if (last.status != 200) break;
    if (fay_ok == 0) fay_each = parse(last.body)["usage"]["total_tokens"].get<int64_t>();
    ++fay_ok;
  }
  ASSERT_GT(fay_each, 0);
  EXPECT_EQ(fay_ok, admittedInTurn(100, static_cast<double>(promptEstimate(chat("m1", 10)) + 10),
                                   static_cast<double>(fay_each)));
  EXPECT_EQ(errorCode(last), "budget_exceeded");
  ASSERT_TRUE(waitFor([&] {
    const json rows = usageRows(*gw_, "since=1h&granularity=total&group_by=user&user=fay");
    return rows.size() == 1 && rows[0]["requests"] == fay_ok + 1;
  }));
  const json users = parse(admin(*gw_, "GET", "/admin/users?team=lab").body)["users"];
  ASSERT_EQ(users.size(), 2u);
  EXPECT_EQ(users[0]["name"], "dana");
  EXPECT_EQ(users[0]["daily_tokens"], 60);
  const json audit = parse(admin(*gw_, "GET", "/admin/audit?since=1h").body);
  EXPECT_NE(audit.dump().find("user.update"), std::string::npos);
  gw_.reset();
  gw_ = startGov(govConfig(emu_->url(), "sqlite:" + db_path_));
  ASSERT_TRUE(gw_);
  EXPECT_EQ(errorCode(as("fay", "m1", 10)), "budget_exceeded");
  // Without its record a user is back on the team's defaults.
  ASSERT_EQ(admin(*gw_, "DELETE", "/admin/users/lab/dana").status, 200);
  EXPECT_EQ(as("dana", "m2").status, 200);
  EXPECT_EQ(admin(*gw_, "DELETE", "/admin/users/lab/dana").status, 404);
}

TEST_F(GovernanceTest, KeysSurviveARestartAndTheSecretStaysPrivate) {
  start();
  const std::string key = makeKey(*gw_, "persist");
  gw_.reset();
  gw_ = startGov(govConfig(emu_->url(), "sqlite:" + db_path_));
  ASSERT_TRUE(gw_);
  EXPECT_EQ(call(*gw_, key, chat("m1", 1)).status, 200);
}

// Flow control's priorities by who asks (docs/routing.md "Flow control"): a team's configured
// class orders its waiters, a key holder's header only lowers its own. One engine that runs one
// sequence at a time and a gateway with one worker (the order holds per worker).
TEST(FlowPriorityTest, ATeamsConfiguredPriorityOrdersItsWaitersAndTheHeaderOnlyLowersIt) {
  emulator::EmulatorConfig ecfg;
  ecfg.port = 0;
  ecfg.models = {"m1"};
  ecfg.engine.enabled = true;
  ecfg.engine.max_num_seqs = 1;
  ecfg.engine.time_scale = 2;  // ~12 ms a step: 20 tokens take ~0.25 s
  auto emu = emulator::Emulator::start(ecfg);
  ASSERT_TRUE(emu.ok()) << emu.status().message();
  const std::string db = tempPath("flow.db");
  auto gw = startGov(
      "workers: 1\nlisten: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
      "health_check: {enabled: false}\nlog_level: warn\ngovernance:\n  store: sqlite:" +
      db + "\n  admin_token: " + kAdminToken +
      "\n  key_secret: test-secret-0123456789abcdef0123456789\n"
      "models:\n  - name: m1\n    deployments:\n      - name: pool\n"
      "        routing: {policy: engine, metrics_interval_ms: 10, stale_ms: 2000, max_waiting: 1,\n"
      "                  flow_control: {queue_timeout_ms: 20000,\n"
      "                                 priorities: {teams: {jobs: batch, oncall: critical},\n"
      "                                              users: {boss: critical}}}}\n"
      "        endpoints: [{url: \"" +
      (*emu)->url() + "\"}]\n");
  ASSERT_TRUE(gw);
  std::map<std::string, std::string> keys;
  for (const std::string team : {"jobs", "oncall", "plain"}) {
    ASSERT_EQ(admin(*gw, "POST", "/admin/teams", R"({"name":")" + team + R"("})").status, 201);
    // The plain team's key may name users (x-infera-user).
    const auto k = admin(
        *gw, "POST", "/admin/keys",
        R"({"team":")" + team + R"(","allow_user":)" + (team == "plain" ? "true" : "false") + "}");
    ASSERT_EQ(k.status, 201) << k.body;
    keys[team] = json::parse(k.body)["key"].get<std::string>();
  }
  ASSERT_TRUE(waitFor([&] {
    const auto r = admin(*gw, "GET", "/admin/endpoints");
    return r.body.find(R"("known":true)") != std::string::npos;
  }));
  auto metric = [&](const std::string& series) {
    const std::string text = gw->metricsText();
    const auto at = text.find("\n" + series + " ");
    return at == std::string::npos ? 0.0 : std::stod(text.substr(at + series.size() + 2));
  };
  auto outcome = [&](const std::string& priority, const std::string& team) {
    return metric(R"(infera_gateway_flow_requests_total{model="m1",priority=")" + priority +
                  R"(",team=")" + team + R"(",outcome="queued"})");
  };
  testing::CompletionOrder requests;
  auto send = [&](const std::string& name, const std::string& team, const std::string& priority,
                  const std::string& user = "") {
    requests.send(name, [&gw, &keys, team, priority, user] {
      std::vector<std::pair<std::string, std::string>> h = {
          {"authorization", "Bearer " + keys.at(team)}};
      if (!priority.empty()) h.push_back({"x-infera-priority", priority});
      if (!user.empty()) h.push_back({"x-infera-user", user});
      return httpRequest(
          gw->port(), "POST", "/v1/chat/completions",
          R"({"model":"m1","max_tokens":20,"messages":[{"role":"user","content":"hi"}]})", h);
    });
  };
  // The jobs team's work is batch by its team, without a header.
  for (int i = 0; i < 5; ++i) send("jobs" + std::to_string(i), "jobs", "");
  ASSERT_TRUE(waitFor(
      [&] { return metric(R"(infera_gateway_flow_queued{model="m1",priority="batch"})") >= 2; }));
  const int queued_before =
      static_cast<int>(metric(R"(infera_gateway_flow_queued{model="m1",priority="batch"})"));
  // The on-call team is critical by its team. The plain team's key cannot raise itself to
  // critical, neither with the header nor by naming a user assigned critical (the caller names
  // both): it stays standard.
  send("oncall", "oncall", "");
  ASSERT_TRUE(waitFor([&] { return outcome("critical", "oncall") == 1; }));
  send("plain", "plain", "critical", "boss");
  const std::vector<std::string> done = requests.join();
  ASSERT_EQ(done.size(), 7u);
  for (const auto& d : done) EXPECT_EQ(d.find(':'), std::string::npos) << d;
  EXPECT_GE(outcome("batch", "jobs"), 2);
  EXPECT_EQ(outcome("critical", "jobs") + outcome("standard", "jobs"), 0);
  EXPECT_EQ(outcome("critical", "oncall"), 1);
  EXPECT_EQ(outcome("standard", "plain"), 1);
  EXPECT_EQ(outcome("critical", "plain"), 0);
  // Both overtook the batch work still queued when they came (one may have been admitted in the
  // moment between the count and their arrival).
  const auto pos = [&](const std::string& name) {
    return static_cast<int>(std::find(done.begin(), done.end(), name) - done.begin());
  };
  const int last = static_cast<int>(done.size()) - 1;
  EXPECT_GE(last - pos("plain"), std::max(1, queued_before - 1)) << ::testing::PrintToString(done);
  EXPECT_LT(pos("oncall"), pos("plain")) << ::testing::PrintToString(done);
}

// Batch work turned away at a deployment's max_batch_share is not served, so it costs the key's
// request limit nothing: a key with rpm 4 whose batch requests bounce 10 times still gets its
// interactive requests through (the refusals were given back).
TEST(FlowPriorityTest, BatchWorkRefusedAtItsShareGivesTheKeysRequestsBack) {
  emulator::EmulatorConfig ecfg;
  ecfg.port = 0;
  ecfg.models = {"m1"};
  ecfg.token_ms = 20;
  auto emu = emulator::Emulator::start(ecfg);
  ASSERT_TRUE(emu.ok()) << emu.status().message();
  const std::string db = tempPath("share.db");
  auto gw = startGov(
      "workers: 1\nlisten: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
      "health_check: {enabled: false}\nlog_level: warn\ngovernance:\n  store: sqlite:" +
      db + "\n  admin_token: " + kAdminToken +
      "\n  key_secret: test-secret-0123456789abcdef0123456789\n"
      "models:\n  - name: m1\n    deployments:\n      - max_batch_share: 0.5\n"
      "        endpoints: [{url: \"" +
      (*emu)->url() + "\", max_concurrent: 2}]\n");
  ASSERT_TRUE(gw);
  ASSERT_EQ(admin(*gw, "POST", "/admin/teams", R"({"name":"jobs"})").status, 201);
  const auto k = admin(*gw, "POST", "/admin/keys", R"({"team":"jobs","rpm":4})");
  ASSERT_EQ(k.status, 201) << k.body;
  const std::string key = json::parse(k.body)["key"].get<std::string>();
  const std::string body =
      R"({"model":"m1","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"hi"}]})";
  // One batch stream holds the share (1 of 2); it counts 1 of the key's 4 requests.
  testing::TestClient held(gw->port());
  ASSERT_TRUE(held.send(
      "POST", "/v1/chat/completions",
      R"({"model":"m1","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]})",
      {{"authorization", "Bearer " + key}, {"x-infera-priority", "batch"}}));
  testing::TestResponse head;
  ASSERT_TRUE(held.readHead(head));
  ASSERT_EQ(head.status, 200);
  for (int i = 0; i < 10; ++i) {
    const auto r =
        httpRequest(gw->port(), "POST", "/v1/chat/completions", body,
                    {{"authorization", "Bearer " + key}, {"x-infera-priority", "batch"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 429) << r->body;
    EXPECT_EQ(errorCode(*r), "model_saturated");
  }
  // The three requests left of the minute's four are there.
  for (int i = 0; i < 3; ++i) {
    const auto r = httpRequest(gw->port(), "POST", "/v1/chat/completions", body,
                               {{"authorization", "Bearer " + key}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  const auto over = httpRequest(gw->port(), "POST", "/v1/chat/completions", body,
                                {{"authorization", "Bearer " + key}});
  ASSERT_TRUE(over);
  EXPECT_EQ(errorCode(*over), "rate_limit_exceeded");
}

}  // namespace
}  // namespace infera::access
