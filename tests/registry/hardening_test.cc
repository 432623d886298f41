// Issue 37 for the registry: no request ends the process or answers with what it must not. Bytes
// that are not UTF-8 (in a query, a decoded page token, a header, stored before the door checked
// them, a capture cut inside a character), bodies nested 100,000 deep, values of the wrong JSON
// type, review flags into another team's queue or of unbounded size, artifact path conflicts, and
// the floor's own answers in MLflow's error shape. Each test ends by checking the server still
// serves.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "registry/internal/search.h"
#include "registry_fixture.h"
#include "store/sql.h"

namespace infera::registry::regtest {
namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

std::string deeplyNested() { return std::string(100'000, '[') + std::string(100'000, ']'); }

class HardeningTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    emu_ = startEmulator({"m"});
    ASSERT_TRUE(emu_);
    dir_ = tempDir();
    store_ = storeUrl(GetParam(), dir_);
    server_ = startServer(serverYaml(store_, dir_, {{"da", emu_->url()}},
                                     "  max_artifact_bytes: 1000000\n"
                                     "  capture: {max_body_bytes: 256}\n",
                                     topExtra()));
    ASSERT_TRUE(server_);
    api_ = std::make_unique<Mlflow>(server_->port(), token_);
    admin_api_ = std::make_unique<Mlflow>(server_->adminPort(), token_);
  }
  virtual std::string topExtra() const { return ""; }

  Reply adminCall(const std::string& method, const std::string& target,
                  const json& body = nullptr) const {
    return admin(*server_, method, target, body, token_);
  }
  // A raw request to the data port (any body, any headers).
  Reply data(const std::string& method, const std::string& target, const std::string& body,
             std::vector<std::pair<std::string, std::string>> headers = {}) const {
    headers.push_back({"content-type", "application/json"});
    if (!token_.empty() && std::none_of(headers.begin(), headers.end(),
                                        [](const auto& h) { return h.first == "authorization"; })) {
      headers.push_back({"authorization", "Bearer " + token_});
    }
    return toReply(testing::httpRequest(server_->port(), method, target, body, headers));
  }
  // The server still answers the MLflow API.
  void expectServing() const {
    const Reply r = api_->get("registered-models/search", "max_results=10");
    EXPECT_EQ(r.status, 200) << r.text;
  }
  // fraud: versions 1 and 2; version 1 served by the emulator and captured.
  void setUpCapturedFraud() {
    registerModel(*api_, "fraud", 2);
    ASSERT_EQ(adminCall("PUT", "/admin/registry/models/fraud/bindings/1", {{"deployments", {"da"}}})
                  .status,
              200);
    ASSERT_EQ(adminCall("PUT", "/admin/registry/models/fraud/versions/1/capture", {{"sample", 1.0}})
                  .status,
              200);
  }
  static void expectMlflowError(const Reply& r, int status, const std::string& code) {
    EXPECT_EQ(r.status, status) << r.text;
    ASSERT_TRUE(r.body.is_object()) << r.text;
    EXPECT_EQ(r.body.value("error_code", ""), code) << r.text;
    EXPECT_TRUE(r.body.contains("message")) << r.text;
    EXPECT_FALSE(r.body.contains("error")) << r.text;
  }

  std::unique_ptr<emulator::Emulator> emu_;
  std::string dir_, store_;
  std::string token_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Mlflow> api_, admin_api_;
};

// The door refuses the query; its answer is MLflow's shape on both ports.
TEST_P(HardeningTest, AnInvalidUtf8QueryIsAnMlflowShaped400AndTheServerKeepsServing) {
  registerModel(*api_, "fraud", 1);
  expectMlflowError(api_->get("registered-models/get", "name=%FF"), 400, "INVALID_PARAMETER_VALUE");
  expectMlflowError(admin_api_->get("registered-models/get", "name=%FF"), 400,
                    "INVALID_PARAMETER_VALUE");
  const Reply ajax = toReply(testing::httpRequest(
      server_->port(), "GET", "/ajax-api/2.0/mlflow/registered-models/get?name=%C3%28"));
  expectMlflowError(ajax, 400, "INVALID_PARAMETER_VALUE");
  const Reply artifacts = toReply(testing::httpRequest(
      server_->port(), "GET", "/api/2.0/mlflow-artifacts/artifacts?path=registry/%FF/1"));
  expectMlflowError(artifacts, 400, "INVALID_PARAMETER_VALUE");
  EXPECT_EQ(api_->get("registered-models/get", "name=fraud").status, 200);
  expectServing();
}

TEST_P(HardeningTest, PageTokensThatDecodeToInvalidUtf8OrDeepJsonAre400s) {
  registerModel(*api_, "fraud", 1);
  for (const std::string& decoded :
       {std::string("\xFF\xFE{"), std::string("{\"offset\": \"\xE9\"}"), std::string(1000, '['),
        std::string("{\"offset\": 1, \"offset\": 2}")}) {
    const std::string token = base64Encode(decoded);
    std::string q;
    for (char c : token)
      q += c == '+' ? "%2B" : c == '/' ? "%2F" : c == '=' ? "%3D" : std::string(1, c);
    expectMlflowError(api_->get("registered-models/search", "page_token=" + q), 400,
                      "INVALID_PARAMETER_VALUE");
    expectMlflowError(api_->get("model-versions/search", "page_token=" + q), 400,
                      "INVALID_PARAMETER_VALUE");
  }
  // A good token still pages.
  const Reply page =
      api_->get("registered-models/search", "page_token=" + base64Encode("{\"offset\": 0}"));
  EXPECT_EQ(page.status, 200) << page.text;
  expectServing();
}

TEST_P(HardeningTest, AdminValuesOfTheWrongJsonTypeAre400sNamingTheKey) {
  registerModel(*api_, "fraud", 2);
  const Reply sample =
      adminCall("PUT", "/admin/registry/models/fraud/versions/1/capture", {{"sample", "0.5"}});
  EXPECT_EQ(sample.status, 400) << sample.text;
  EXPECT_NE(sample.text.find("sample"), std::string::npos) << sample.text;
  const Reply errors = adminCall("PUT", "/admin/registry/models/fraud/versions/1/capture",
                                 {{"sample", 0.5}, {"flag_errors", "yes"}});
  EXPECT_EQ(errors.status, 400) << errors.text;
  EXPECT_NE(errors.text.find("flag_errors"), std::string::npos) << errors.text;
  const Reply slower = adminCall("PUT", "/admin/registry/models/fraud/versions/1/capture",
                                 {{"flag_slower_ms", "soon"}});
  EXPECT_EQ(slower.status, 400) << slower.text;
  EXPECT_NE(slower.text.find("flag_slower_ms"), std::string::npos) << slower.text;
  const Reply share =
      adminCall("PUT", "/admin/registry/models/fraud/experiment",
                {{"arms", {{{"target", "1"}}}}, {"shadow", {{"target", "2"}, {"share", "half"}}}});
  EXPECT_EQ(share.status, 400) << share.text;
  EXPECT_NE(share.text.find("share"), std::string::npos) << share.text;
  const Reply timeout = adminCall(
      "PUT", "/admin/registry/models/fraud/experiment",
      {{"arms", {{{"target", "1"}}}}, {"shadow", {{"target", "2"}, {"timeout_ms", "x"}}}});
  EXPECT_EQ(timeout.status, 400) << timeout.text;
  EXPECT_NE(timeout.text.find("timeout_ms"), std::string::npos) << timeout.text;
  // Nothing was stored, and good values still are.
  EXPECT_TRUE(adminCall("GET", "/admin/registry/models/fraud/versions/1/capture")
                  .body["capture"]
                  .is_null());
  EXPECT_EQ(adminCall("GET", "/admin/registry/models/fraud/experiment").status, 404);
  EXPECT_EQ(
      adminCall("PUT", "/admin/registry/models/fraud/versions/1/capture", {{"sample", 0.5}}).status,
      200);
  expectServing();
}

TEST_P(HardeningTest, BodiesNestedDeeperThanTheLimitAreRefusedOnEveryRoute) {
  registerModel(*api_, "fraud", 1);
  const std::string deep = deeplyNested();
  const Reply flag = data("POST", "/api/2.0/infera/flags", deep);
  EXPECT_EQ(flag.status, 400) << flag.text.substr(0, 300);
  const Reply create = data("POST", "/api/2.0/mlflow/registered-models/create", deep);
  expectMlflowError(create, 400, "INVALID_PARAMETER_VALUE");
  EXPECT_NE(create.text.find("deeper"), std::string::npos) << create.text;
  // A double-encoded body (a JSON string holding JSON) goes through the same reader.
  const Reply twice = data("POST", "/api/2.0/mlflow/registered-models/create", json(deep).dump());
  expectMlflowError(twice, 400, "INVALID_PARAMETER_VALUE");
  EXPECT_NE(twice.text.find("deeper"), std::string::npos) << twice.text;
  const Reply capture = toReply(testing::httpRequest(
      server_->adminPort(), "PUT", "/admin/registry/models/fraud/versions/1/capture", deep,
      {{"content-type", "application/json"}}));
  EXPECT_EQ(capture.status, 400) << capture.text.substr(0, 300);
  // A key given twice is refused too (two readers would read two bodies).
  const Reply dup =
      data("POST", "/api/2.0/mlflow/registered-models/create", R"({"name":"a","name":"b"})");
  expectMlflowError(dup, 400, "INVALID_PARAMETER_VALUE");
  EXPECT_EQ(api_->get("registered-models/get", "name=a").status, 404);
  EXPECT_EQ(api_->get("registered-models/get", "name=b").status, 404);
  expectServing();
}

// The door refuses a header that is not UTF-8; bytes already stored (before it did) are read with
// U+FFFD in their place.
TEST_P(HardeningTest, AliasHistoryWithBytesStoredBeforeTheDoorIsReadWithReplacements) {
  registerModel(*api_, "fraud", 2);
  const Reply latin1 = toReply(testing::httpRequest(
      server_->adminPort(), "POST", "/admin/registry/models/fraud/aliases/champion",
      json({{"version", "1"}}).dump(),
      {{"content-type", "application/json"}, {"x-infera-actor", "console:Jos\xE9"}}));
  EXPECT_EQ(latin1.status, 400) << latin1.text;
  EXPECT_TRUE(adminCall("GET", "/admin/registry/models/fraud/history").body["history"].empty());
  ASSERT_EQ(adminCall("POST", "/admin/registry/models/fraud/aliases/champion",
                      {{"version", "1"}, {"reason", "first"}})
                .status,
            200);
  if (GetParam() != "sqlite") {
    GTEST_SKIP() << "PostgreSQL's TEXT cannot hold bytes that are not UTF-8";
  }
  auto db = store::SqlDb::open(store_);
  ASSERT_TRUE(db.ok()) << db.status().message();
  auto w = (*db)->exec(
      "UPDATE infera_registry_alias_history SET actor = ?1, reason = ?2 WHERE name = 'fraud'",
      {store::SqlValue(std::string("console:Jos\xE9")),
       store::SqlValue(std::string("cut \xE2\x82"))});
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_EQ(w->affected, 1);
  const Reply h = adminCall("GET", "/admin/registry/models/fraud/history");
  ASSERT_EQ(h.status, 200) << h.text;
  ASSERT_EQ(h.body["history"].size(), 1u) << h.text;
  EXPECT_EQ(h.body["history"][0]["actor"], std::string("console:Jos") + kReplacement);
  EXPECT_EQ(h.body["history"][0]["reason"].get<std::string>().rfind("cut ", 0), 0u);
  expectServing();
}

// The gateway cuts a captured body at capture.max_body_bytes (256 here), inside an "é": the
// capture keeps the whole characters before the cut, and the review listing reads it.
TEST_P(HardeningTest, ACaptureCutInsideACharacterIsStoredAtTheBoundaryAndListed) {
  setUpCapturedFraud();
  std::string body = R"({"model":"fraud/1","max_tokens":4,"messages":[{"role":"user","content":")";
  if ((256 - body.size()) % 2 == 0) body += "a";  // the 256th byte is the first half of an é
  for (int i = 0; i < 200; ++i) body += "\xC3\xA9";
  body += R"("}]})";
  const Reply answer = data("POST", "/v1/chat/completions", body);
  ASSERT_EQ(answer.status, 200) << answer.text;
  const std::string id = answer.header("x-request-id");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(testing::waitFor([&] {
    return adminCall("GET", "/admin/registry/reviews?model=fraud&state=captured")
               .body["reviews"]
               .size() == 1;
  }));
  const Reply list = adminCall("GET", "/admin/registry/reviews?model=fraud&state=captured");
  ASSERT_EQ(list.status, 200) << list.text;
  const json& item = list.body["reviews"][0];
  EXPECT_EQ(item["request_id"], id);
  ASSERT_TRUE(item["request"].is_string()) << item.dump();
  EXPECT_EQ(item["request"].get<std::string>(), body.substr(0, 255));
  const Reply one = adminCall("GET", "/admin/registry/reviews/" + id);
  ASSERT_EQ(one.status, 200) << one.text;
  EXPECT_EQ(one.body["review"]["request"].get<std::string>(), body.substr(0, 255));
  const auto ex = testing::httpRequest(server_->adminPort(), "GET",
                                       "/admin/registry/reviews/export?model=fraud&state=captured");
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->status, 200);
  expectServing();
}

TEST_P(HardeningTest, AFlagReasonOverFourKibibytesIsRefusedAndNothingIsStored) {
  setUpCapturedFraud();
  const std::string big(4 << 20, 'x');
  const Reply r =
      data("POST", "/api/2.0/infera/flags",
           json({{"request_id", "req-big"}, {"model", "fraud"}, {"reason", big}}).dump());
  EXPECT_EQ(r.status, 400) << r.text.substr(0, 300);
  EXPECT_NE(r.text.find("reason"), std::string::npos) << r.text.substr(0, 300);
  EXPECT_LT(r.text.size(), 1000u);
  EXPECT_EQ(adminCall("GET", "/admin/registry/reviews/req-big").status, 404);
  const Reply admin_big = adminCall(
      "POST", "/admin/registry/flags",
      {{"request_id", "req-big"}, {"model", "fraud"}, {"reason", std::string(4097, 'x')}});
  EXPECT_EQ(admin_big.status, 400) << admin_big.text.substr(0, 300);
  EXPECT_EQ(adminCall("GET", "/admin/registry/reviews/req-big").status, 404);
  // At the limit it is kept.
  const Reply ok =
      data("POST", "/api/2.0/infera/flags",
           json({{"request_id", "req-ok"}, {"model", "fraud"}, {"reason", std::string(4096, 'y')}})
               .dump());
  EXPECT_EQ(ok.status, 200) << ok.text.substr(0, 300);
  EXPECT_EQ(adminCall("GET", "/admin/registry/reviews/req-ok").body["review"]["reason"],
            std::string(4096, 'y'));
  expectServing();
}

// `cfg` then `cfg/inner` (and the other way round): a conflict between the two artifacts, in each
// API's shape, naming no path of the server's.
TEST_P(HardeningTest, ArtifactPathConflictsAre409sThatNameOnlyArtifactPaths) {
  registerModel(*api_, "fraud", 1);
  const auto put = [&](uint16_t port, const std::string& target) {
    return toReply(testing::httpRequest(port, "PUT", target, "content",
                                        {{"content-type", "application/octet-stream"}}));
  };
  const std::string admin_base = "/admin/registry/models/fraud/versions/1/artifacts/";
  ASSERT_EQ(put(server_->adminPort(), admin_base + "cfg").status, 200);
  const Reply under_file = put(server_->adminPort(), admin_base + "cfg/inner");
  EXPECT_EQ(under_file.status, 409) << under_file.text;
  EXPECT_NE(under_file.text.find("'cfg'"), std::string::npos) << under_file.text;
  ASSERT_EQ(put(server_->adminPort(), admin_base + "dir/inner").status, 200);
  const std::string mlflow_base = "/api/2.0/mlflow-artifacts/artifacts/registry/fraud/1/";
  const Reply over_dir = put(server_->port(), mlflow_base + "dir");
  expectMlflowError(over_dir, 409, "INVALID_STATE");
  const Reply mlflow_under = put(server_->port(), mlflow_base + "cfg/inner/deeper");
  expectMlflowError(mlflow_under, 409, "INVALID_STATE");
  for (const Reply* r : {&under_file, &over_dir, &mlflow_under}) {
    EXPECT_EQ(r->text.find(dir_), std::string::npos) << r->text;
    EXPECT_EQ(r->text.find("/tmp"), std::string::npos) << r->text;
  }
  // What was there is intact, and nothing more was recorded.
  const Reply list = adminCall("GET", "/admin/registry/models/fraud/versions/1/artifacts");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body["artifacts"].size(), 2u) << list.text;
  const auto got = testing::httpRequest(server_->adminPort(), "GET", admin_base + "cfg");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, "content");
  expectServing();
}

INSTANTIATE_TEST_SUITE_P(Stores, HardeningTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return std::string(param_info.param); });

// With access control on: two teams, each allowed its own models.
class FlagAccessTest : public HardeningTest {
 protected:
  void SetUp() override {
    token_ = "registry-hardening-admin-token-0123456789";
    HardeningTest::SetUp();
  }
  std::string topExtra() const override {
    return "governance:\n  store: sqlite:" + dir_ + "/access.db\n  admin_token: " + token_ +
           "\n  key_secret: hardening-test-secret-0123456789abcdef\n  sync_interval_ms: 100\n";
  }
  // A key of `team` (made with its models): the secret.
  std::string teamKey(const std::string& team, const std::string& models) const {
    EXPECT_EQ(adminCall("POST", "/admin/teams", {{"name", team}, {"models", {models}}}).status,
              201);
    const Reply k = adminCall("POST", "/admin/keys", {{"team", team}, {"name", team + "-key"}});
    EXPECT_EQ(k.status, 201) << k.text;
    return k.body.value("key", "");
  }
  Reply flagAs(const std::string& key, const json& body) const {
    return data("POST", "/api/2.0/infera/flags", body.dump(), {{"authorization", "Bearer " + key}});
  }
};

TEST_P(FlagAccessTest, AKeyCannotFlagIntoAnotherTeamsModelQueue) {
  setUpCapturedFraud();
  registerModel(*api_, "churn", 1);
  const std::string alpha = teamKey("alpha", "fraud*");
  const std::string beta = teamKey("beta", "churn*");
  ASSERT_FALSE(alpha.empty() || beta.empty());
  // Keys are in force once the data port reads them.
  ASSERT_TRUE(testing::waitFor([&] {
    return data("GET", "/api/2.0/mlflow/registered-models/get?name=churn", "",
                {{"authorization", "Bearer " + beta}})
               .status == 200;
  }));
  const Reply answer =
      data("POST", "/v1/chat/completions", chat("fraud/1"), {{"authorization", "Bearer " + alpha}});
  ASSERT_EQ(answer.status, 200) << answer.text;
  const std::string id = answer.header("x-request-id");
  ASSERT_TRUE(testing::waitFor(
      [&] { return adminCall("GET", "/admin/registry/reviews/" + id).status == 200; }));

  // Team beta: alpha's captured inference, by its id, and a flag naming alpha's model.
  const Reply by_id = flagAs(beta, {{"request_id", id}, {"reason", "spam"}});
  EXPECT_EQ(by_id.status, 404) << by_id.text;
  const Reply by_model =
      flagAs(beta, {{"request_id", "beta-1"}, {"model", "fraud"}, {"reason", "spam"}});
  EXPECT_EQ(by_model.status, 404) << by_model.text;
  const Reply by_target =
      flagAs(beta, {{"request_id", "beta-2"}, {"target", "fraud/1"}, {"reason", "spam"}});
  EXPECT_EQ(by_target.status, 404) << by_target.text;
  const Reply unnamed = flagAs(beta, {{"request_id", "beta-3"}, {"reason", "spam"}});
  EXPECT_EQ(unnamed.status, 400) << unnamed.text;
  // Nothing of beta's was stored.
  const Reply item = adminCall("GET", "/admin/registry/reviews/" + id);
  EXPECT_FALSE(item.body["review"]["flagged"].get<bool>()) << item.text;
  for (const char* other : {"beta-1", "beta-2", "beta-3"})
    EXPECT_EQ(adminCall("GET", std::string("/admin/registry/reviews/") + other).status, 404);
  EXPECT_EQ(
      adminCall("GET", "/admin/registry/reviews?model=fraud&state=pending").body["reviews"].size(),
      0u);

  // Each team flags into its own queue.
  const Reply own = flagAs(alpha, {{"request_id", id}, {"reason", "wrong answer"}});
  EXPECT_EQ(own.status, 200) << own.text;
  const Reply own_beta = flagAs(beta, {{"request_id", "beta-4"}, {"model", "churn"}});
  EXPECT_EQ(own_beta.status, 200) << own_beta.text;
  const Reply pending = adminCall("GET", "/admin/registry/reviews?model=fraud&state=pending");
  ASSERT_EQ(pending.body["reviews"].size(), 1u) << pending.text;
  EXPECT_EQ(pending.body["reviews"][0]["reason"], "wrong answer");
  expectServing();
}

INSTANTIATE_TEST_SUITE_P(Stores, FlagAccessTest, ::testing::Values("sqlite"),
                         [](const auto& param_info) { return std::string(param_info.param); });

}  // namespace
}  // namespace infera::registry::regtest
