// Serving through the gateway from the registry: versions and aliases bound to deployments,
// `name`, `name@alias` and `name/3` in OpenAI and KServe calls, alias moves under load (no failed
// request, every worker within a second, other replicas within a second), A/B splits (accuracy,
// stickiness, the override header, live weights), per-arm metrics, shadows that never touch the
// client's answer or latency (hanging, failing, mismatching shadows), data capture and review.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>
#include <thread>

#include "fakes/recording_backend.h"
#include "registry_fixture.h"

namespace infera::registry::regtest {
namespace {

using Clock = std::chrono::steady_clock;

class ServingTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    a_ = startEmulator({"m"});
    b_ = startEmulator({"m"});
    c_ = startEmulator({"m"});
    ASSERT_TRUE(a_ && b_ && c_);
    dir_ = tempDir();
    store_ = storeUrl(GetParam().empty() ? "sqlite" : GetParam(), dir_);
    start();
  }
  void start(const std::string& registry_extra = "") {
    server_ = startServer(serverYaml(store_, dir_,
                                     {{"da", a_->url()}, {"db", b_->url()}, {"dc", c_->url()}},
                                     registry_extra, topExtra()));
    ASSERT_TRUE(server_);
    api_ = std::make_unique<Mlflow>(server_->port(), token_);
  }
  // More of the server's config (a fixture with access control adds its section).
  virtual std::string topExtra() const { return ""; }
  // fraud: versions 1..3 served by da, db, dc; champion -> 1, challenger -> 2.
  void setUpFraud() {
    registerModel(*api_, "fraud", 3);
    for (const auto& [v, d] :
         std::vector<std::pair<std::string, std::string>>{{"1", "da"}, {"2", "db"}, {"3", "dc"}}) {
      const Reply r = admin(*server_, "PUT", "/admin/registry/models/fraud/bindings/" + v,
                            {{"deployments", {d}}}, token_);
      ASSERT_EQ(r.status, 200) << r.text;
    }
    ASSERT_EQ(admin(*server_, "POST", "/admin/registry/models/fraud/aliases/champion",
                    {{"version", "1"}}, token_)
                  .status,
              200);
    ASSERT_EQ(admin(*server_, "POST", "/admin/registry/models/fraud/aliases/challenger",
                    {{"version", "2"}}, token_)
                  .status,
              200);
  }
  Reply chatTo(const std::string& model,
               const std::vector<std::pair<std::string, std::string>>& extra = {},
               const std::string& body_extra = "") const {
    std::vector<std::pair<std::string, std::string>> h = {{"content-type", "application/json"}};
    for (const auto& e : extra) h.push_back(e);
    return toReply(httpRequest(server_->port(), "POST", "/v1/chat/completions",
                               chat(model, 4, body_extra), h));
  }
  std::string routeOf(const std::string& model) const {
    return chatTo(model).resp.header("x-infera-route");
  }

  std::unique_ptr<emulator::Emulator> a_, b_, c_;
  std::string dir_, store_;
  std::string token_;  // the admin token, with access control on
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Mlflow> api_;
};

TEST_P(ServingTest, VersionsAliasesAndTheModelsNameRouteToTheirDeployments) {
  setUpFraud();
  const Reply v2 = chatTo("fraud/2");
  ASSERT_EQ(v2.status, 200) << v2.text;
  EXPECT_EQ(v2.header("x-infera-route"), "fraud/2");
  EXPECT_EQ(v2.body["choices"][0]["message"]["content"], "The quick brown fox");
  EXPECT_EQ(b_->stats().requests.load(), 1u);
  EXPECT_EQ(routeOf("fraud@challenger"), "fraud/2");
  EXPECT_EQ(routeOf("fraud@champion"), "fraud/1");
  EXPECT_EQ(routeOf("fraud"), "fraud/1");  // the default alias, champion
  EXPECT_EQ(a_->stats().requests.load(), 2u);
  EXPECT_EQ(chatTo("fraud@nope").status, 404);
  EXPECT_EQ(chatTo("fraud/9").status, 404);
  // /v1/models lists what the registry serves.
  const auto models = httpRequest(server_->port(), "GET", "/v1/models");
  ASSERT_TRUE(models);
  for (const char* n : {"\"fraud\"", "\"fraud/1\"", "\"fraud@champion\"", "\"fraud@challenger\""}) {
    EXPECT_NE(models->body.find(n), std::string::npos) << n << " in " << models->body;
  }
  // KServe: /v2/models/fraud@champion/... and /v2/models/fraud/versions/2/...
  const auto ks = httpRequest(server_->port(), "GET", "/v2/models/fraud/versions/2/ready");
  ASSERT_TRUE(ks);
  EXPECT_EQ(ks->header("x-infera-route"), "fraud/2");
  // An alias bound to deployments of its own serves those, whatever version it points to.
  ASSERT_EQ(admin(*server_, "PUT", "/admin/registry/models/fraud/bindings/%40champion",
                  {{"deployments", {"dc"}}})
                .status,
            200);
  EXPECT_EQ(routeOf("fraud@champion"), "fraud@champion");
  const uint64_t c_before = c_->stats().requests.load();
  ASSERT_EQ(chatTo("fraud@champion").status, 200);
  EXPECT_EQ(c_->stats().requests.load(), c_before + 1);
  // A binding must name a deployment of the config.
  EXPECT_EQ(
      admin(*server_, "PUT", "/admin/registry/models/fraud/bindings/1", {{"deployments", {"nope"}}})
          .status,
      400);
}

TEST_P(ServingTest, AnAliasMoveUnderLoadFailsNoRequestAndEveryWorkerServesItBeforeTheAnswer) {
  setUpFraud();
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::atomic<int> on_v2{0};
  std::vector<std::thread> load;
  for (int t = 0; t < 3; ++t) {
    load.emplace_back([&] {
      testing::TestClient client(server_->port());
      while (!stop.load()) {
        auto r = client.request("POST", "/v1/chat/completions", chat("fraud@champion", 2),
                                {{"content-type", "application/json"}});
        if (!r || r->status != 200) {
          ++failed;
          if (!r) return;
          continue;
        }
        ++ok;
        if (r->header("x-infera-route") == "fraud/2") ++on_v2;
      }
    });
  }
  // The generation of the routes each worker serves (infera_gateway_worker_config_generation).
  const auto perWorker = [&] {
    std::map<std::string, double> out;
    std::istringstream in(server_->metricsText());
    std::string line;
    const std::string prefix = "infera_gateway_worker_config_generation{worker=\"";
    while (std::getline(in, line)) {
      if (line.rfind(prefix, 0) != 0) continue;
      out[line.substr(prefix.size(), line.find('"', prefix.size()) - prefix.size())] =
          std::stod(line.substr(line.rfind(' ') + 1));
    }
    return out;
  };
  for (int i = 0; i < 10; ++i) {
    const std::string to = i % 2 == 0 ? "2" : "1";
    const Reply mv = admin(*server_, "POST", "/admin/registry/models/fraud/aliases/champion",
                           {{"version", to}, {"reason", "move " + std::to_string(i)}});
    ASSERT_EQ(mv.status, 200) << mv.text;
    // The move is answered once every worker serves it (well within the second the name
    // promises): each worker's table is the gateway's newest at once, without waiting, and a
    // request on any connection lands on the new version. (Asking a few requests on new
    // connections would pass while one worker kept the old route whenever the kernel sent
    // those connections elsewhere.)
    const double generation = server_->metricSum("infera_gateway_config_generation");
    const auto workers = perWorker();
    ASSERT_EQ(workers.size(), 2u);  // the fixture's two workers
    for (const auto& [worker, g] : workers) {
      EXPECT_EQ(g, generation) << "worker " << worker << " after move " << i;
    }
    for (int k = 0; k < 4; ++k) EXPECT_EQ(routeOf("fraud@champion"), "fraud/" + to) << i;
  }
  stop = true;
  for (auto& t : load) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(ok.load(), 20);
  EXPECT_GT(on_v2.load(), 0);
  // Every move is in the history, newest first, each from the previous one's target.
  const Reply h = admin(*server_, "GET", "/admin/registry/models/fraud/history?alias=champion");
  ASSERT_EQ(h.status, 200);
  ASSERT_EQ(h.body["history"].size(), 11u);
  EXPECT_EQ(h.body["history"][0]["reason"], "move 9");
  EXPECT_EQ(h.body["history"][0]["actor"], "test-operator");
  for (size_t i = 0; i + 1 < h.body["history"].size(); ++i) {
    EXPECT_EQ(h.body["history"][i]["from_version"], h.body["history"][i + 1]["to_version"]);
  }
}

TEST_P(ServingTest, RollbackMovesTheAliasBackAndIsRecorded) {
  setUpFraud();
  ASSERT_EQ(admin(*server_, "POST", "/admin/registry/models/fraud/aliases/champion",
                  {{"version", "2"}, {"reason", "ship v2"}})
                .status,
            200);
  EXPECT_EQ(routeOf("fraud"), "fraud/2");
  const Reply rb = admin(*server_, "POST", "/admin/registry/models/fraud/aliases/champion/rollback",
                         {{"reason", "v2 regressed"}});
  ASSERT_EQ(rb.status, 200) << rb.text;
  EXPECT_EQ(rb.body["move"]["from_version"], "2");
  EXPECT_EQ(rb.body["move"]["to_version"], "1");
  EXPECT_EQ(routeOf("fraud"), "fraud/1");  // answered after the routes moved
  const Reply h = admin(*server_, "GET", "/admin/registry/models/fraud/history");
  ASSERT_EQ(h.body["history"][0]["reason"], "v2 regressed");
  ASSERT_EQ(h.body["history"][1]["reason"], "ship v2");
  // An alias created by its only move has nothing to go back to.
  EXPECT_EQ(
      admin(*server_, "POST", "/admin/registry/models/fraud/aliases/challenger/rollback").status,
      409);
  // The MLflow API's moves are recorded too.
  ASSERT_EQ(api_->post("registered-models/alias",
                       {{"name", "fraud"}, {"alias", "challenger"}, {"version", "3"}})
                .status,
            200);
  const Reply hc = admin(*server_, "GET", "/admin/registry/models/fraud/history?alias=challenger");
  EXPECT_EQ(hc.body["history"][0]["to_version"], "3");
  EXPECT_EQ(hc.body["history"][0]["from_version"], "2");
}

TEST_P(ServingTest, ConcurrentAliasMovesLeaveOneConsistentHistory) {
  registerModel(*api_, "m", 4);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      Mlflow mine(server_->port());
      for (int i = 0; i < 15; ++i) {
        const std::string v = std::to_string(1 + (t + i) % 4);
        if (mine.post("registered-models/alias", {{"name", "m"}, {"alias", "live"}, {"version", v}})
                .status != 200)
          ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  const Reply h = admin(*server_, "GET", "/admin/registry/models/m/history?alias=live&limit=1000");
  ASSERT_EQ(h.body["history"].size(), 90u);
  std::set<int64_t> seqs;
  for (size_t i = 0; i < h.body["history"].size(); ++i) {
    seqs.insert(h.body["history"][i]["seq"].get<int64_t>());
    if (i + 1 < h.body["history"].size()) {
      EXPECT_EQ(h.body["history"][i]["from_version"], h.body["history"][i + 1]["to_version"])
          << "at " << i;
    }
  }
  EXPECT_EQ(seqs.size(), 90u);
  EXPECT_TRUE(h.body["history"].back()["from_version"].is_null());
  EXPECT_EQ(
      api_->get("registered-models/alias", "name=m&alias=live").body["model_version"]["version"],
      h.body["history"][0]["to_version"]);
}

INSTANTIATE_TEST_SUITE_P(Stores, ServingTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return std::string(param_info.param); });

TEST(ReplicaTest, AnotherReplicaSeesAnAliasMoveAtItsNextPoll) {
  auto a = startEmulator({"m"});
  auto b = startEmulator({"m"});
  ASSERT_TRUE(a && b);
  const std::string dir1 = tempDir(), dir2 = tempDir();
  const std::string store = storeUrl("postgres", dir1);
  auto one = startServer(
      serverYaml(store, dir1, {{"da", a->url()}, {"db", b->url()}}, "  sync_interval_ms: 200\n"));
  auto two = startServer(
      serverYaml(store, dir2, {{"da", a->url()}, {"db", b->url()}}, "  sync_interval_ms: 200\n"));
  ASSERT_TRUE(one && two);
  Mlflow api(one->port());
  registerModel(api, "fraud", 2);
  ASSERT_EQ(admin(*one, "PUT", "/admin/registry/models/fraud/bindings/1", {{"deployments", {"da"}}})
                .status,
            200);
  ASSERT_EQ(admin(*one, "PUT", "/admin/registry/models/fraud/bindings/2", {{"deployments", {"db"}}})
                .status,
            200);
  ASSERT_EQ(admin(*one, "POST", "/admin/registry/models/fraud/aliases/champion", {{"version", "1"}})
                .status,
            200);
  auto routeOn = [](const server::Server& s) {
    auto r = httpRequest(s.port(), "POST", "/v1/chat/completions", chat("fraud@champion"),
                         {{"content-type", "application/json"}});
    return r ? r->header("x-infera-route") : std::string();
  };
  ASSERT_TRUE(testing::waitFor([&] { return routeOn(*two) == "fraud/1"; }));
  // Counted in the other replica's polls of the store (every sync_interval_ms, 200 ms here), not
  // in wall-clock time that a loaded machine stretches: a poll that began before the move was
  // written may read the old generation; the one after it applies the move. Polls counted after
  // the answer: at most 2 until the route is seen, plus one that may end while it is looked at.
  int64_t worst_polls = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string to = i % 2 == 0 ? "2" : "1";
    ASSERT_EQ(
        admin(*one, "POST", "/admin/registry/models/fraud/aliases/champion", {{"version", to}})
            .status,
        200);
    const double polls0 = two->metricSum("infera_registry_sync_polls_total");
    ASSERT_TRUE(
        testing::waitFor([&] { return routeOn(*two) == "fraud/" + to; }, std::chrono::seconds(30)));
    worst_polls =
        std::max(worst_polls,
                 static_cast<int64_t>(two->metricSum("infera_registry_sync_polls_total") - polls0));
  }
  EXPECT_LE(worst_polls, 3) << "the other replica needed " << worst_polls << " polls";
}

// ---- experiments ----

class ExperimentTest : public ServingTest {};

TEST_P(ExperimentTest, ASplitIsWithinTwoPercentOfItsWeightsOverTenThousandRequestsAndSticky) {
  setUpFraud();
  const Reply ex = admin(*server_, "PUT", "/admin/registry/models/fraud/experiment",
                         {{"arms",
                           {{{"name", "a"}, {"target", "@champion"}, {"weight", 70}},
                            {{"name", "b"}, {"target", "@challenger"}, {"weight", 30}}}},
                          {"sticky", "user"}});
  ASSERT_EQ(ex.status, 200) << ex.text;
  std::atomic<int> on_a{0}, on_b{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      testing::TestClient client(server_->port());
      for (int i = t; i < 10000; i += 4) {
        auto r = client.request(
            "POST", "/v1/chat/completions", chat("fraud", 1),
            {{"content-type", "application/json"}, {"x-infera-user", "user-" + std::to_string(i)}});
        if (!r || r->status != 200) {
          ++bad;
          continue;
        }
        const std::string arm = r->header("x-infera-arm");
        if (arm == "a" && r->header("x-infera-route") == "fraud/1") ++on_a;
        if (arm == "b" && r->header("x-infera-route") == "fraud/2") ++on_b;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(on_a + on_b, 10000);
  EXPECT_NEAR(on_a / 10000.0, 0.70, 0.02);
  EXPECT_NEAR(on_b / 10000.0, 0.30, 0.02);
  // Sticky: a user's requests stay on its arm.
  const std::string arm = chatTo("fraud", {{"x-infera-user", "alice"}}).header("x-infera-arm");
  for (int i = 0; i < 30; ++i)
    ASSERT_EQ(chatTo("fraud", {{"x-infera-user", "alice"}}).header("x-infera-arm"), arm);
  // The override header, for testing an arm.
  EXPECT_EQ(chatTo("fraud", {{"x-infera-user", "alice"}, {"x-infera-arm", arm == "a" ? "b" : "a"}})
                .header("x-infera-arm"),
            arm == "a" ? "b" : "a");
  // Weights edited live: everything to b.
  ASSERT_EQ(admin(*server_, "PATCH", "/admin/registry/models/fraud/experiment",
                  {{"weights", {{"a", 0}, {"b", 100}}}})
                .status,
            200);
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(chatTo("fraud", {{"x-infera-user", "u" + std::to_string(i)}}).header("x-infera-arm"),
              "b");
  }
}

TEST_P(ExperimentTest, TwentyExperimentsRunAtOnceEachOnItsOwnModelAndWeights) {
  // m0..m19, versions 1 and 2 on da and db; even models send everything to arm "one" (version 1),
  // odd models to arm "two" (version 2): one model's split never leaks into another's.
  constexpr int kModels = 20;
  for (int i = 0; i < kModels; ++i) {
    const std::string m = "m" + std::to_string(i);
    registerModel(*api_, m, 2);
    ASSERT_EQ(admin(*server_, "PUT", "/admin/registry/models/" + m + "/bindings/1",
                    {{"deployments", {"da"}}})
                  .status,
              200);
    ASSERT_EQ(admin(*server_, "PUT", "/admin/registry/models/" + m + "/bindings/2",
                    {{"deployments", {"db"}}})
                  .status,
              200);
    const int w1 = i % 2 == 0 ? 100 : 0;
    const Reply ex = admin(*server_, "PUT", "/admin/registry/models/" + m + "/experiment",
                           {{"arms",
                             {{{"name", "one"}, {"target", "1"}, {"weight", w1}},
                              {{"name", "two"}, {"target", "2"}, {"weight", 100 - w1}}}},
                            {"sticky", "user"}});
    ASSERT_EQ(ex.status, 200) << ex.text;
  }
  testing::TestClient client(server_->port());
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < kModels; ++i) {
      const std::string m = "m" + std::to_string(i);
      auto r = client.request(
          "POST", "/v1/chat/completions", chat(m, 1),
          {{"content-type", "application/json"}, {"x-infera-user", "u" + std::to_string(round)}});
      ASSERT_TRUE(r && r->status == 200) << m << ": " << (r ? r->body : "no answer");
      EXPECT_EQ(r->header("x-infera-arm"), i % 2 == 0 ? "one" : "two") << m;
      EXPECT_EQ(r->header("x-infera-route"), m + (i % 2 == 0 ? "/1" : "/2")) << m;
    }
  }
  // Editing one experiment's weights moves that model only.
  ASSERT_EQ(admin(*server_, "PATCH", "/admin/registry/models/m0/experiment",
                  {{"weights", {{"one", 0}, {"two", 100}}}})
                .status,
            200);
  EXPECT_EQ(chatTo("m0", {{"x-infera-user", "x"}}).header("x-infera-arm"), "two");
  EXPECT_EQ(chatTo("m2", {{"x-infera-user", "x"}}).header("x-infera-arm"), "one");
  const Reply routes = admin(*server_, "GET", "/admin/registry/routes");
  ASSERT_EQ(routes.status, 200);
  int splits = 0;
  for (const auto& [name, r] : routes.body["routes"].items()) splits += r.contains("arms") ? 1 : 0;
  EXPECT_EQ(splits, kModels);
}

TEST_P(ExperimentTest, PerArmMetricsAreInPrometheusAndTheAdminApi) {
  setUpFraud();
  ASSERT_EQ(admin(*server_, "PUT", "/admin/registry/models/fraud/experiment",
                  {{"arms",
                    {{{"name", "ctl"}, {"target", "1"}, {"weight", 1}},
                     {{"name", "new"}, {"target", "2"}, {"weight", 1}}}}})
                .status,
            200);
  std::map<std::string, int> sent;
  for (int i = 0; i < 40; ++i)
    ++sent[chatTo("fraud", {{"x-infera-user", "m" + std::to_string(i)}}).header("x-infera-arm")];
  ASSERT_EQ(sent["ctl"] + sent["new"], 40);
  // (an exchange is counted once its answer is written, so the last one may land after the client
  // read it)
  std::string text;
  for (const auto& [arm, n] : sent) {
    const std::string series = "infera_gateway_arm_requests_total{model=\"fraud\",arm=\"" + arm +
                               "\",code_class=\"2xx\"} " + std::to_string(n);
    EXPECT_TRUE(testing::waitFor([&] {
      text = server_->metricsText();
      return text.find(series) != std::string::npos;
    })) << series
        << "\n"
        << text.substr(0, 2000);
  }
  EXPECT_NE(
      text.find("infera_gateway_arm_request_duration_seconds_count{model=\"fraud\",arm=\"ctl\"}"),
      std::string::npos);
  EXPECT_NE(
      text.find("infera_gateway_arm_tokens_total{model=\"fraud\",arm=\"new\",kind=\"completion\"}"),
      std::string::npos);
  const Reply st = admin(*server_, "GET", "/admin/registry/models/fraud/experiment");
  ASSERT_EQ(st.status, 200) << st.text;
  double total = 0, completion = 0;
  for (const auto& a : st.body["stats"]["arms"]) {
    total += a["requests"].get<double>();
    completion += a["completion_tokens"].get<double>();
    EXPECT_GT(a["latency_p99_s"].get<double>(), 0);
  }
  EXPECT_EQ(total, 40);
  EXPECT_EQ(completion, 40 * 4);  // max_tokens 4 each
}

INSTANTIATE_TEST_SUITE_P(Stores, ExperimentTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return std::string(param_info.param); });

// ---- shadows ----

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

class ShadowTest : public ServingTest {
 protected:
  // Shadow of every request (share 1) to version 3 (emulator c_), with a short deadline.
  void shadowAll(int max_concurrent = 8, int timeout_ms = 300) {
    setUpFraud();
    const Reply ex = admin(*server_, "PUT", "/admin/registry/models/fraud/experiment",
                           {{"arms", json::array()},
                            {"shadow",
                             {{"target", "3"},
                              {"share", 1.0},
                              {"timeout_ms", timeout_ms},
                              {"max_concurrent", max_concurrent}}}});
    ASSERT_EQ(ex.status, 200) << ex.text;
  }
  // Interleaves requests with a shadow ("fraud") and without ("fraud@champion": the same version).
  void measure(int n, std::vector<double>& on, std::vector<double>& off,
               std::vector<std::string>& answers_on, std::vector<std::string>& answers_off) {
    testing::TestClient client(server_->port());
    for (int i = 0; i < 2 * n; ++i) {
      const bool shadow = i % 2 == 0;
      const auto t0 = Clock::now();
      auto r = client.request("POST", "/v1/chat/completions",
                              chat(shadow ? "fraud" : "fraud@champion", 4, R"(,"temperature":0)"),
                              {{"content-type", "application/json"}});
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
      json j = json::parse(r->body);
      (shadow ? on : off).push_back(ms);
      (shadow ? answers_on : answers_off).push_back(j["choices"].dump());
    }
  }
};

// Two faults this must catch, on a busy box too: a fixed cost added to every shadowed request
// (the medians, interleaved, differ by half) and a client held while its shadow hangs (the tail
// reaches the shadow's 1 s deadline; the bound is half of it above the unshadowed tail).
TEST_P(ShadowTest, AHangingShadowChangesNeitherTheAnswerNorItsLatency) {
  c_->faults().hang_rate = 1.0;  // the shadow never answers
  shadowAll(/*max_concurrent=*/4, /*timeout_ms=*/1000);
  std::vector<double> on, off;
  std::vector<std::string> ans_on, ans_off;
  measure(150, on, off, ans_on, ans_off);
  for (size_t i = 0; i < ans_on.size(); ++i) ASSERT_EQ(ans_on[i], ans_off[i]);
  const double p50_on = quantile(on, 0.5), p50_off = quantile(off, 0.5);
  const double p99_on = quantile(on, 0.99), p99_off = quantile(off, 0.99);
  std::printf(
      "hanging shadow: client p50 %.2f / p99 %.2f ms with shadow, %.2f / %.2f ms without "
      "(n=%zu each)\n",
      p50_on, p99_on, p50_off, p99_off, on.size());
  EXPECT_LT(p50_on, p50_off * 1.5 + 1) << "median with a hanging shadow";
  EXPECT_LT(p99_on, p99_off + 500) << "p99 with a hanging shadow";
  // Bounded by its own deadline and cap: timeouts and sheds are counted, never the client's.
  ASSERT_TRUE(testing::waitFor(
      [&] { return server_->metricSum("infera_gateway_shadow_requests_total") >= 150; }));
  const std::string text = server_->metricsText();
  EXPECT_NE(text.find("infera_gateway_shadow_requests_total{model=\"fraud\",shadow=\"fraud/"
                      "3\",outcome=\"shed\"}"),
            std::string::npos);
  ASSERT_TRUE(testing::waitFor([&] {
    const Reply s = admin(*server_, "GET", "/admin/registry/models/fraud/shadow?limit=1000");
    return s.body["summary"]["failed"].get<int64_t>() >= 150;
  }));
  const Reply s = admin(*server_, "GET", "/admin/registry/models/fraud/shadow?limit=1000");
  std::set<std::string> errors;
  for (const auto& o : s.body["outcomes"]) errors.insert(o["error"].get<std::string>());
  EXPECT_TRUE(errors.count("timeout")) << s.text.substr(0, 400);
  EXPECT_TRUE(errors.count("shed"));
}

TEST_P(ShadowTest, AFailingShadowIsRecordedAndTheClientNeverSeesIt) {
  c_->faults().error_rate = 1.0;
  c_->faults().error_status = 500;
  // A deadline the loaded box always meets and a cap above the 20 requests (on a loaded box their
  // shadows can all be in flight at once): what is checked is the 500, not a timeout or shedding.
  shadowAll(/*max_concurrent=*/32, /*timeout_ms=*/10'000);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(chatTo("fraud").status, 200);
  ASSERT_TRUE(testing::waitFor([&] {
    const Reply s = admin(*server_, "GET", "/admin/registry/models/fraud/shadow?limit=100");
    return s.body["outcomes"].size() == 20;
  }));
  const Reply s = admin(*server_, "GET", "/admin/registry/models/fraud/shadow?limit=100");
  for (const auto& o : s.body["outcomes"]) {
    EXPECT_EQ(o["status"], 500) << o.dump();
    EXPECT_EQ(o["primary"], "fraud/1");
    EXPECT_EQ(o["shadow"], "fraud/3");
  }
  EXPECT_EQ(server_->metricSum("infera_gateway_shadow_requests_total"), 20);
}

TEST_P(ShadowTest, DeterministicShadowAnswersAreComparedWithThePrimarys) {
  shadowAll(/*max_concurrent=*/32, /*timeout_ms=*/10'000);  // none shed or timed out on a busy box
  for (int i = 0; i < 10; ++i) ASSERT_EQ(chatTo("fraud", {}, R"(,"temperature":0)").status, 200);
  ASSERT_TRUE(testing::waitFor([&] {
    const Reply s = admin(*server_, "GET", "/admin/registry/models/fraud/shadow");
    return s.body["summary"]["matched"] == 10;
  }));
  const Reply s = admin(*server_, "GET", "/admin/registry/models/fraud/shadow");
  EXPECT_EQ(s.body["outcomes"][0]["completion_tokens"], 4);
  EXPECT_EQ(s.body["stats"]["match"], 10);
  // A shadow backend that answers differently is a mismatch.
  auto other = testing::RecordingBackend::start();
  ASSERT_TRUE(other);
  server_.reset();
  server_ = startServer(
      serverYaml(store_, dir_, {{"da", a_->url()}, {"db", b_->url()}, {"dc", other->url()}}));
  ASSERT_TRUE(server_);
  ASSERT_EQ(toReply(httpRequest(server_->port(), "POST", "/v1/chat/completions",
                                chat("fraud", 4, R"(,"temperature":0)"),
                                {{"content-type", "application/json"}}))
                .status,
            200);
  ASSERT_TRUE(testing::waitFor([&] { return other->count() == 1; }));
  ASSERT_TRUE(testing::waitFor([&] {
    return server_->metricsText().find(
               "infera_gateway_shadow_comparisons_total{model=\"fraud\",shadow=\"fraud/"
               "3\",result=\"mismatch\"} 1") != std::string::npos;
  }));
  // The shadow got the client's body with its own deployment's model name.
  EXPECT_NE(other->requests()[0].body.find("\"model\":\"m\""), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Stores, ShadowTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return std::string(param_info.param); });

// ---- data capture and review ----

class CaptureTest : public ServingTest {};

TEST_P(CaptureTest, SampledCapturesFlagsReviewsAndTheExport) {
  setUpFraud();
  ASSERT_EQ(
      admin(*server_, "PUT", "/admin/registry/models/fraud/versions/1/capture", {{"sample", 1.0}})
          .status,
      200);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    const Reply r = chatTo("fraud@champion");
    ASSERT_EQ(r.status, 200);
    ids.push_back(r.header("x-request-id"));
  }
  // Version 2 has no capture.
  ASSERT_EQ(chatTo("fraud/2").status, 200);
  ASSERT_TRUE(testing::waitFor([&] {
    return admin(*server_, "GET", "/admin/registry/reviews?model=fraud&state=captured")
               .body["reviews"]
               .size() == 5;
  }));
  const Reply cap =
      admin(*server_, "GET", "/admin/registry/reviews?model=fraud&version=1&state=captured");
  EXPECT_EQ(cap.body["reviews"][0]["request"]["model"], "fraud@champion");
  EXPECT_EQ(cap.body["reviews"][0]["response"]["choices"][0]["message"]["content"],
            "The quick brown fox");
  EXPECT_EQ(cap.body["reviews"][0]["target"], "fraud/1");
  // A client flags one (by its x-request-id) on the data port; it joins the review queue.
  const auto fl =
      toReply(httpRequest(server_->port(), "POST", "/api/2.0/infera/flags",
                          json({{"request_id", ids[2]}, {"reason", "wrong answer"}}).dump(),
                          {{"content-type", "application/json"}}));
  ASSERT_EQ(fl.status, 200) << fl.text;
  const Reply pending = admin(*server_, "GET", "/admin/registry/reviews?model=fraud&state=pending");
  ASSERT_EQ(pending.body["reviews"].size(), 1u);
  EXPECT_EQ(pending.body["reviews"][0]["request_id"], ids[2]);
  EXPECT_EQ(pending.body["reviews"][0]["reason"], "wrong answer");
  const Reply rv =
      admin(*server_, "POST", "/admin/registry/reviews/" + ids[2],
            {{"verdict", "bad"}, {"label", "The slow red fox"}, {"note", "hallucinated"}});
  ASSERT_EQ(rv.status, 200) << rv.text;
  EXPECT_EQ(rv.body["review"]["reviewer"], "test-operator");
  EXPECT_EQ(admin(*server_, "GET", "/admin/registry/reviews?model=fraud&state=pending")
                .body["reviews"]
                .size(),
            0u);
  // The export: JSON lines of the reviewed cases.
  const auto ex =
      httpRequest(server_->adminPort(), "GET", "/admin/registry/reviews/export?model=fraud");
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->header("content-type"), "application/x-ndjson");
  ASSERT_EQ(std::count(ex->body.begin(), ex->body.end(), '\n'), 1);
  const json line = json::parse(ex->body.substr(0, ex->body.find('\n')));
  EXPECT_EQ(line["label"], "The slow red fox");
  EXPECT_EQ(line["verdict"], "bad");
  EXPECT_EQ(line["request"]["messages"][0]["content"], "hello there");
  // A flag for an inference that was not captured is kept with what the flag says.
  ASSERT_EQ(admin(*server_, "POST", "/admin/registry/flags",
                  {{"request_id", "not-captured"}, {"model", "fraud"}})
                .status,
            200);
  EXPECT_EQ(admin(*server_, "GET", "/admin/registry/reviews?model=fraud&state=pending")
                .body["reviews"]
                .size(),
            1u);
}

TEST_P(CaptureTest, RulesFlagErrorsAndWordsWithoutSampling) {
  setUpFraud();
  ASSERT_EQ(admin(*server_, "PUT", "/admin/registry/models/fraud/versions/2/capture",
                  {{"sample", 0.0}, {"flag_errors", true}, {"flag_contains", {"brown"}}})
                .status,
            200);
  ASSERT_EQ(chatTo("fraud/2").status, 200);  // "The quick brown fox": flagged by the word
  b_->faults().error_rate = 1.0;
  EXPECT_EQ(chatTo("fraud/2").status, 500);
  ASSERT_TRUE(testing::waitFor([&] {
    return admin(*server_, "GET", "/admin/registry/reviews?model=fraud&state=pending")
               .body["reviews"]
               .size() == 2;
  }));
  const Reply p = admin(*server_, "GET", "/admin/registry/reviews?model=fraud&state=pending");
  std::set<std::string> reasons;
  for (const auto& r : p.body["reviews"]) reasons.insert(r["reason"].get<std::string>());
  EXPECT_TRUE(reasons.count("rule: answer contains 'brown'"));
  EXPECT_TRUE(reasons.count("rule: status 500"));
}

// With access control on: the traffic of a key on the opt-out list is never captured, whatever
// the sample; taken off the list, it is captured again.
class CaptureWithKeysTest : public CaptureTest {
 protected:
  void SetUp() override {
    token_ = "registry-capture-admin-token-0123456789";
    CaptureTest::SetUp();
  }
  std::string topExtra() const override {
    return "governance:\n  store: sqlite:" + dir_ + "/access.db\n  admin_token: " + token_ +
           "\n  key_secret: capture-test-secret-0123456789abcdef\n  sync_interval_ms: 100\n";
  }
  // A key of team "shop": {id, secret}.
  std::pair<std::string, std::string> key(const std::string& name) const {
    const Reply k =
        admin(*server_, "POST", "/admin/keys", {{"team", "shop"}, {"name", name}}, token_);
    EXPECT_EQ(k.status, 201) << k.text;
    return {k.body.value("id", ""), k.body.value("key", "")};
  }
  // The captured inferences: request id -> key id.
  std::map<std::string, std::string> captured() const {
    const Reply r =
        admin(*server_, "GET", "/admin/registry/reviews?model=fraud&state=captured&limit=1000",
              nullptr, token_);
    std::map<std::string, std::string> out;
    for (const auto& c : r.body["reviews"]) out[c.value("request_id", "")] = c.value("key_id", "");
    return out;
  }
};

TEST_P(CaptureWithKeysTest, KeysOnTheOptOutListAreNeverCaptured) {
  setUpFraud();
  ASSERT_EQ(admin(*server_, "POST", "/admin/teams", {{"name", "shop"}}, token_).status, 201);
  const auto [kept_id, kept] = key("kept");
  const auto [private_id, secret] = key("private");
  ASSERT_FALSE(kept_id.empty() || private_id.empty());
  // The opt-out before the capture setting: once captures run, the opt-out is in force too.
  ASSERT_EQ(
      admin(*server_, "PUT", "/admin/registry/opt-outs/" + private_id, nullptr, token_).status,
      200);
  EXPECT_EQ(admin(*server_, "GET", "/admin/registry/opt-outs", nullptr, token_).body["keys"],
            json::array({private_id}));
  ASSERT_EQ(admin(*server_, "PUT", "/admin/registry/models/fraud/versions/1/capture",
                  {{"sample", 1.0}}, token_)
                .status,
            200);
  // Each request's x-request-id ("" unless answered 200).
  const auto send = [&](const std::string& k) {
    const Reply r = chatTo("fraud@champion", {{"authorization", "Bearer " + k}});
    return r.status == 200 ? r.header("x-request-id") : std::string();
  };
  // Captures are written after the answer: the first that shows says they run.
  std::vector<std::string> kept_ids, private_ids;
  ASSERT_TRUE(testing::waitFor([&] {
    kept_ids.push_back(send(kept));
    const auto c = captured();
    return std::any_of(kept_ids.begin(), kept_ids.end(),
                       [&](const auto& id) { return c.count(id) == 1; });
  }));
  EXPECT_EQ(std::count(kept_ids.begin(), kept_ids.end(), ""), 0);
  for (int i = 0; i < 10; ++i) {
    private_ids.push_back(send(secret));
    kept_ids.push_back(send(kept));  // last: captured after every private request would be
    ASSERT_FALSE(private_ids.back().empty() || kept_ids.back().empty());
  }
  ASSERT_TRUE(testing::waitFor([&] {
    const auto c = captured();
    return std::all_of(kept_ids.begin(), kept_ids.end(),
                       [&](const auto& id) { return c.count(id) == 1 && c.at(id) == kept_id; });
  }));
  const auto c = captured();
  for (const auto& id : private_ids) EXPECT_EQ(c.count(id), 0u) << id;
  for (const auto& [id, k] : c) EXPECT_NE(k, private_id) << id;
  // Off the list: the same key's traffic is captured like any other.
  ASSERT_EQ(
      admin(*server_, "DELETE", "/admin/registry/opt-outs/" + private_id, nullptr, token_).status,
      200);
  std::vector<std::string> ids;
  ASSERT_TRUE(testing::waitFor([&] {
    ids.push_back(send(secret));
    const auto now = captured();
    return std::any_of(ids.begin(), ids.end(), [&](const auto& id) {
      return now.count(id) == 1 && now.at(id) == private_id;
    });
  }));
}

INSTANTIATE_TEST_SUITE_P(Stores, CaptureWithKeysTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return std::string(param_info.param); });

INSTANTIATE_TEST_SUITE_P(Stores, CaptureTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return std::string(param_info.param); });

}  // namespace
}  // namespace infera::registry::regtest
