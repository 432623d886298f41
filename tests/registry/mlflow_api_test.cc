// MLflow's model-registry REST API as MLflow's own clients send it (query-string GETs, JSON
// bodies on POST/PATCH/DELETE, Content-Type application/json), checked against MLflow's
// documented shapes: fields present and omitted, versions as strings, int64 as numbers, error
// bodies and statuses, paging tokens, search filters. The same suite runs on SQLite and on
// PostgreSQL. (Python's mlflow package cannot be installed here: PyPI is not reachable; the
// requests below are shaped like its RestStore's, from the research notes.)
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "registry/internal/search.h"
#include "registry_fixture.h"

namespace infera::registry::regtest {
namespace {

class MlflowApiTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = tempDir();
    server_ = startServer(serverYaml(storeUrl(GetParam(), dir_), dir_, {}));
    ASSERT_TRUE(server_);
    api_ = std::make_unique<Mlflow>(server_->port());
  }
  const Mlflow& api() const { return *api_; }
  std::set<std::string> keys(const json& j) const {
    std::set<std::string> out;
    for (auto it = j.begin(); it != j.end(); ++it) out.insert(it.key());
    return out;
  }
  std::string dir_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Mlflow> api_;
};

TEST_P(MlflowApiTest, CreateAndGetRegisteredModelHaveMlflowsShape) {
  const Reply c = api().post("registered-models/create", {{"name", "fraud"}});
  ASSERT_EQ(c.status, 200) << c.text;
  EXPECT_EQ(c.resp.header("content-type"), "application/json");
  const json& rm = c.body["registered_model"];
  EXPECT_EQ(keys(rm),
            (std::set<std::string>{"name", "creation_timestamp", "last_updated_timestamp"}));
  EXPECT_EQ(rm["name"], "fraud");
  EXPECT_TRUE(rm["creation_timestamp"].is_number_integer());
  EXPECT_GT(rm["creation_timestamp"].get<int64_t>(), 1'600'000'000'000);  // milliseconds
  const Reply g = api().get("registered-models/get", "name=fraud");
  ASSERT_EQ(g.status, 200);
  EXPECT_EQ(g.body["registered_model"], rm);
  // Tags and a description come back; the same name again is RESOURCE_ALREADY_EXISTS with 400.
  const Reply t = api().post(
      "registered-models/create",
      {{"name", "fraud2"}, {"description", "d"}, {"tags", {{{"key", "team"}, {"value", "risk"}}}}});
  ASSERT_EQ(t.status, 200);
  EXPECT_EQ(t.body["registered_model"]["description"], "d");
  EXPECT_EQ(t.body["registered_model"]["tags"], json::parse(R"([{"key":"team","value":"risk"}])"));
  const Reply dup = api().post("registered-models/create", {{"name", "fraud"}});
  EXPECT_EQ(dup.status, 400);
  EXPECT_EQ(dup.body, json({{"error_code", "RESOURCE_ALREADY_EXISTS"},
                            {"message", "Registered Model (name=fraud) already exists."}}));
}

TEST_P(MlflowApiTest, ErrorsCarryMlflowsCodesMessagesAndStatuses) {
  const Reply missing = api().post("registered-models/create", json::object());
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(missing.body["error_code"], "INVALID_PARAMETER_VALUE");
  EXPECT_EQ(missing.body["message"],
            "Missing value for required parameter 'name'. See the API docs for more information "
            "about request "
            "parameters.");
  EXPECT_EQ(api().post("registered-models/create", {{"name", ""}}).body["error_code"],
            "INVALID_PARAMETER_VALUE");
  const Reply nf = api().get("registered-models/get", "name=nope");
  EXPECT_EQ(nf.status, 404);
  EXPECT_EQ(nf.body, json({{"error_code", "RESOURCE_DOES_NOT_EXIST"},
                           {"message", "Registered Model with name=nope not found"}}));
  // Content-Type is checked on POST: missing, or not JSON.
  // (hand-framed: the test client adds a JSON content-type to every body it sends)
  testing::TestClient raw(server_->port());
  ASSERT_TRUE(
      raw.sendRaw("POST /api/2.0/mlflow/registered-models/create HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                  "content-length: 12\r\n\r\n{\"name\":\"x\"}"));
  testing::TestResponse no_ct_raw;
  ASSERT_TRUE(raw.readHead(no_ct_raw));
  while (auto piece = raw.readPiece()) no_ct_raw.body += *piece;
  auto no_ct = toReply(no_ct_raw);
  EXPECT_EQ(no_ct.status, 400);
  EXPECT_EQ(no_ct.body["message"], "Bad Request. Content-Type header is missing.");
  auto text_ct =
      toReply(httpRequest(server_->port(), "POST", "/api/2.0/mlflow/registered-models/create",
                          R"({"name":"x"})", {{"content-type", "text/plain"}}));
  EXPECT_EQ(text_ct.body["message"],
            "Bad Request. Content-Type must be one of ['application/json'].");
  auto charset = toReply(httpRequest(server_->port(), "POST",
                                     "/api/2.0/mlflow/registered-models/create", R"({"name":"x"})",
                                     {{"content-type", "application/json; charset=utf-8"}}));
  EXPECT_EQ(charset.status, 200) << charset.text;
  // A wrong JSON type gets MLflow's hint (two spaces after "supplied:").
  const Reply typed =
      api().post("registered-models/create", {{"name", "y"}, {"tags", "not-a-list"}});
  EXPECT_EQ(typed.status, 400);
  EXPECT_EQ(typed.body["message"],
            "Invalid value \"not-a-list\" for parameter 'tags' supplied:  Hint: Value was of type "
            "'str'. See the API "
            "docs for more information about request parameters.");
  // Unknown endpoints and methods are JSON too.
  const Reply unknown = api().get("registered-models/nope");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.body["error_code"], "ENDPOINT_NOT_FOUND");
  EXPECT_EQ(api().send("PUT", "registered-models/create", {{"name", "z"}}).status, 405);
  // The web UI's prefix serves the same API.
  auto ajax = toReply(
      httpRequest(server_->port(), "GET", "/ajax-api/2.0/mlflow/registered-models/get?name=x"));
  EXPECT_EQ(ajax.status, 200);
}

TEST_P(MlflowApiTest, VersionsAreStringsNumberedFromOneAndNeverReused) {
  ASSERT_EQ(api().post("registered-models/create", {{"name", "m"}}).status, 200);
  const Reply v1 = api().post("model-versions/create", {{"name", "m"}, {"source", "s3://b/p"}});
  ASSERT_EQ(v1.status, 200) << v1.text;
  const json& mv = v1.body["model_version"];
  // What the reference server answers for a fresh version: empty strings filled in, status READY.
  EXPECT_EQ(keys(mv),
            (std::set<std::string>{"name", "version", "creation_timestamp",
                                   "last_updated_timestamp", "current_stage", "description",
                                   "source", "run_id", "status", "run_link"}));
  EXPECT_EQ(mv["version"], "1");
  EXPECT_EQ(mv["current_stage"], "None");
  EXPECT_EQ(mv["description"], "");
  EXPECT_EQ(mv["run_id"], "");
  EXPECT_EQ(mv["run_link"], "");
  EXPECT_EQ(mv["status"], "READY");
  EXPECT_EQ(mv["source"], "s3://b/p");
  for (int i = 2; i <= 3; ++i) {
    ASSERT_EQ(api()
                  .post("model-versions/create",
                        {{"name", "m"}, {"source", "s3://b/p"}, {"run_id", "abc"}})
                  .body["model_version"]["version"],
              std::to_string(i));
  }
  ASSERT_EQ(api().send("DELETE", "model-versions/delete", {{"name", "m"}, {"version", "3"}}).status,
            200);
  const Reply gone = api().get("model-versions/get", "name=m&version=3");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(gone.body["message"], "Model Version (name=m, version=3) not found");
  EXPECT_EQ(api()
                .post("model-versions/create", {{"name", "m"}, {"source", "x"}})
                .body["model_version"]["version"],
            "4");
  const Reply bad = api().get("model-versions/get", "name=m&version=abc");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["message"], "Parameter 'version' must be an integer, got 'abc'.");
  // A version sent as a JSON number is read as its text.
  EXPECT_EQ(api()
                .post("model-versions/set-tag",
                      {{"name", "m"}, {"version", 1}, {"key", "k"}, {"value", "v"}})
                .status,
            200);
  EXPECT_EQ(api().get("model-versions/get", "name=m&version=1").body["model_version"]["tags"],
            json::parse(R"([{"key":"k","value":"v"}])"));
  // Create on a missing model is the model's not-found.
  EXPECT_EQ(api().post("model-versions/create", {{"name", "nope"}, {"source", "x"}}).status, 404);
  // Deleting the model removes everything; the name starts again at 1.
  ASSERT_EQ(api().send("DELETE", "registered-models/delete", {{"name", "m"}}).status, 200);
  ASSERT_EQ(api().post("registered-models/create", {{"name", "m"}}).status, 200);
  EXPECT_EQ(api()
                .post("model-versions/create", {{"name", "m"}, {"source", "x"}})
                .body["model_version"]["version"],
            "1");
}

TEST_P(MlflowApiTest, AliasesShowOnTheModelAndTheVersionAndGoWithADeletedVersion) {
  registerModel(api(), "m", 2);
  ASSERT_EQ(
      api()
          .post("registered-models/alias", {{"name", "m"}, {"alias", "champion"}, {"version", "2"}})
          .status,
      200);
  const Reply byalias = api().get("registered-models/alias", "name=m&alias=champion");
  ASSERT_EQ(byalias.status, 200) << byalias.text;
  EXPECT_EQ(byalias.body["model_version"]["version"], "2");
  EXPECT_EQ(byalias.body["model_version"]["aliases"], json::parse(R"(["champion"])"));
  EXPECT_EQ(api().get("registered-models/get", "name=m").body["registered_model"]["aliases"],
            json::parse(R"([{"alias":"champion","version":"2"}])"));
  // The reserved names, and an unknown alias (400, not 404, in MLflow).
  EXPECT_EQ(
      api()
          .post("registered-models/alias", {{"name", "m"}, {"alias", "latest"}, {"version", "1"}})
          .body["message"],
      "'latest' alias name (case insensitive) is reserved.");
  EXPECT_EQ(api()
                .post("registered-models/alias", {{"name", "m"}, {"alias", "v3"}, {"version", "1"}})
                .body["message"],
            "Version alias name 'v3' is reserved.");
  EXPECT_EQ(
      api()
          .post("registered-models/alias", {{"name", "m"}, {"alias", "a b"}, {"version", "1"}})
          .status,
      400);
  const Reply unknown = api().get("registered-models/alias", "name=m&alias=nope");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(unknown.body, json({{"error_code", "INVALID_PARAMETER_VALUE"},
                                {"message", "Registered model alias nope not found."}}));
  EXPECT_EQ(
      api().get("registered-models/alias", "name=m&alias=LATEST").body["model_version"]["version"],
      "2");
  // Deleting the version takes its aliases; deleting an alias that is not there is silent.
  ASSERT_EQ(api().send("DELETE", "model-versions/delete", {{"name", "m"}, {"version", "2"}}).status,
            200);
  EXPECT_FALSE(
      api().get("registered-models/get", "name=m").body["registered_model"].contains("aliases"));
  EXPECT_EQ(api()
                .send("DELETE", "registered-models/alias", {{"name", "m"}, {"alias", "champion"}})
                .status,
            200);
  EXPECT_EQ(
      api().send("DELETE", "registered-models/alias", {{"name", "nope"}, {"alias", "a"}}).status,
      404);
}

TEST_P(MlflowApiTest, TagsAreUpsertsAndDeletingAMissingOneIsSilent) {
  registerModel(api(), "m", 1);
  ASSERT_EQ(api()
                .post("registered-models/set-tag", {{"name", "m"}, {"key", "env"}, {"value", "a"}})
                .status,
            200);
  ASSERT_EQ(api()
                .post("registered-models/set-tag", {{"name", "m"}, {"key", "env"}, {"value", "b"}})
                .status,
            200);
  EXPECT_EQ(api().get("registered-models/get", "name=m").body["registered_model"]["tags"],
            json::parse(R"([{"key":"env","value":"b"}])"));
  // DELETE with a JSON body, as the Python client sends it.
  EXPECT_EQ(
      api().send("DELETE", "registered-models/delete-tag", {{"name", "m"}, {"key", "env"}}).status,
      200);
  EXPECT_EQ(
      api().send("DELETE", "registered-models/delete-tag", {{"name", "m"}, {"key", "env"}}).status,
      200);
  EXPECT_FALSE(
      api().get("registered-models/get", "name=m").body["registered_model"].contains("tags"));
  const Reply bad =
      api().post("registered-models/set-tag", {{"name", "m"}, {"key", "a/../b"}, {"value", "x"}});
  EXPECT_EQ(bad.status, 400);
  ASSERT_EQ(api()
                .post("model-versions/set-tag",
                      {{"name", "m"}, {"version", "1"}, {"key", "q"}, {"value", "1"}})
                .status,
            200);
  EXPECT_EQ(api()
                .send("DELETE", "model-versions/delete-tag",
                      {{"name", "m"}, {"version", "1"}, {"key", "q"}})
                .status,
            200);
  EXPECT_EQ(api()
                .send("DELETE", "model-versions/delete-tag",
                      {{"name", "m"}, {"version", "9"}, {"key", "q"}})
                .status,
            404);
}

TEST_P(MlflowApiTest, SearchModelsFiltersOrdersAndPagesLikeMlflow) {
  for (const char* n : {"fraud-a", "fraud-b", "Fraud-c", "churn", "fraud-d"}) {
    ASSERT_EQ(api().post("registered-models/create", {{"name", n}}).status, 200);
  }
  ASSERT_EQ(api()
                .post("registered-models/set-tag",
                      {{"name", "churn"}, {"key", "team"}, {"value", "growth"}})
                .status,
            200);
  // LIKE is case-sensitive, ILIKE not.
  auto names = [](const Reply& r) {
    std::vector<std::string> out;
    if (r.body.contains("registered_models")) {
      for (const auto& m : r.body["registered_models"]) out.push_back(m["name"]);
    }
    return out;
  };
  EXPECT_EQ(names(api().get("registered-models/search",
                            "filter=name%20LIKE%20%27fraud%25%27&max_results=100")),
            (std::vector<std::string>{"fraud-a", "fraud-b", "fraud-d"}));
  EXPECT_EQ(names(api().get("registered-models/search", "filter=name+ILIKE+%27fraud%25%27")).size(),
            4u);
  EXPECT_EQ(names(api().get("registered-models/search", "filter=tags.team%3D%27growth%27")),
            (std::vector<std::string>{"churn"}));
  // Pages of two: MLflow's token (base64 of {"offset": 2}), none after the last page.
  const Reply p1 = api().get("registered-models/search", "max_results=2");
  ASSERT_EQ(p1.status, 200);
  EXPECT_EQ(names(p1), (std::vector<std::string>{"Fraud-c", "churn"}));  // name ASC, byte order
  EXPECT_EQ(p1.body["next_page_token"], "eyJvZmZzZXQiOiAyfQ==");
  const Reply p3 =
      api().get("registered-models/search", "max_results=2&page_token=eyJvZmZzZXQiOiA0fQ%3D%3D");
  EXPECT_EQ(names(p3), (std::vector<std::string>{"fraud-d"}));
  EXPECT_FALSE(p3.body.contains("next_page_token"));
  // order_by repeated; an empty result is {}.
  EXPECT_EQ(names(api().get("registered-models/search", "order_by=name%20DESC&max_results=1")),
            (std::vector<std::string>{"fraud-d"}));
  const Reply none = api().get("registered-models/search", "filter=name%3D%27zzz%27");
  EXPECT_EQ(none.text, "{}");
  // MLflow's refusals.
  EXPECT_EQ(api().get("registered-models/search", "filter=name%20%3D%20fraud").body["message"],
            "Parameter value is either not quoted or unidentified quote types used for string "
            "value fraud. Use "
            "either single or double quotes.");
  EXPECT_EQ(api().get("registered-models/search", "filter=foo%3D%27x%27").status, 400);
  EXPECT_EQ(
      api().get("registered-models/search", "filter=name%3D%27a%27%20OR%20name%3D%27b%27").status,
      400);
  EXPECT_EQ(api().get("registered-models/search", "max_results=2000").body["message"],
            "Invalid value \"2000\" for parameter 'max_results' supplied:  Hint: Value was of type "
            "'str'. See the API "
            "docs for more information about request parameters.");
  EXPECT_EQ(api().get("registered-models/search", "page_token=%21%21").body["message"],
            "Invalid page token, could not base64-decode");
  EXPECT_EQ(api().get("registered-models/search", "order_by=creation_timestamp").status, 400);
}

TEST_P(MlflowApiTest, SearchVersionsByNameRunIdTagsAndVersionNumber) {
  registerModel(api(), "m", 0);
  for (int i = 1; i <= 4; ++i) {
    const json body = {{"name", "m"},
                       {"source", "s3://b/" + std::to_string(i)},
                       {"run_id", i % 2 ? "run-a" : "run-b"},
                       {"tags", {{{"key", "env"}, {"value", i <= 2 ? "prod" : "dev"}}}}};
    ASSERT_EQ(api().post("model-versions/create", body).status, 200);
  }
  registerModel(api(), "other", 1);
  auto versions = [](const Reply& r) {
    std::vector<std::string> out;
    if (r.body.contains("model_versions")) {
      for (const auto& v : r.body["model_versions"])
        out.push_back(v["name"].get<std::string>() + "/" + v["version"].get<std::string>());
    }
    return out;
  };
  // The client's default shape: filter name='m', max_results=10000; default order newest first.
  EXPECT_EQ(
      versions(api().get("model-versions/search",
                         "filter=name%3D%27m%27&max_results=10000&order_by=version_number%20ASC")),
      (std::vector<std::string>{"m/1", "m/2", "m/3", "m/4"}));
  EXPECT_EQ(
      versions(api().get(
          "model-versions/search",
          "filter=name%3D%27m%27%20AND%20run_id%20IN%20(%27run-b%27)&order_by=version_number")),
      (std::vector<std::string>{"m/2", "m/4"}));
  EXPECT_EQ(versions(api().get("model-versions/search",
                               "filter=tags.env%3D%27prod%27%20AND%20version_number%3E%3D2")),
            (std::vector<std::string>{"m/2"}));
  EXPECT_EQ(
      versions(api().get("model-versions/search", "filter=source_path%3D%27s3%3A%2F%2Fb%2F3%27")),
      (std::vector<std::string>{"m/3"}));
  const Reply page =
      api().get("model-versions/search",
                "filter=name%3D%27m%27&max_results=3&order_by=version_number%20DESC");
  EXPECT_EQ(versions(page), (std::vector<std::string>{"m/4", "m/3", "m/2"}));
  EXPECT_EQ(page.body["next_page_token"], "eyJvZmZzZXQiOiAzfQ==");
  EXPECT_EQ(api().get("model-versions/search", "filter=run_id%20IN%20()").body["message"],
            "While parsing a list in the query, expected a non-empty list of string values, but "
            "got empty list");
  EXPECT_EQ(api().get("model-versions/search", "max_results=0").body["message"],
            "Invalid value for max_results. It must be a positive integer, but got 0");
}

TEST_P(MlflowApiTest, LatestVersionsStagesUpdatesRenameAndDownloadUri) {
  registerModel(api(), "m", 3);
  const Reply tr =
      api().post("model-versions/transition-stage", {{"name", "m"},
                                                     {"version", "2"},
                                                     {"stage", "production"},
                                                     {"archive_existing_versions", false}});
  ASSERT_EQ(tr.status, 200) << tr.text;
  EXPECT_EQ(tr.body["model_version"]["current_stage"], "Production");
  EXPECT_EQ(api()
                .post("model-versions/transition-stage",
                      {{"name", "m"}, {"version", "2"}, {"stage", "bogus"}})
                .body["message"],
            "Invalid Model Version stage: bogus. Value must be one of None, Staging, Production, "
            "Archived.");
  // POST first (the client's order), GET as well; one version per stage.
  const Reply latest = api().post("registered-models/get-latest-versions",
                                  {{"name", "m"}, {"stages", {"Production"}}});
  ASSERT_EQ(latest.status, 200);
  ASSERT_EQ(latest.body["model_versions"].size(), 1u);
  EXPECT_EQ(latest.body["model_versions"][0]["version"], "2");
  const Reply all = api().get("registered-models/get-latest-versions", "name=m");
  ASSERT_EQ(all.body["model_versions"].size(), 2u);  // None -> 3, Production -> 2
  EXPECT_EQ(api()
                .get("registered-models/get", "name=m")
                .body["registered_model"]["latest_versions"]
                .size(),
            2u);
  // update: a model's missing description is "" (omitted), a version's is null (omitted).
  EXPECT_EQ(api()
                .send("PATCH", "registered-models/update",
                      {{"name", "m"}, {"description", "fraud model"}})
                .body["registered_model"]["description"],
            "fraud model");
  EXPECT_FALSE(api()
                   .send("PATCH", "registered-models/update", {{"name", "m"}})
                   .body["registered_model"]
                   .contains("description"));
  EXPECT_EQ(api()
                .send("PATCH", "model-versions/update",
                      {{"name", "m"}, {"version", "1"}, {"description", "x"}})
                .body["model_version"]["description"],
            "x");
  EXPECT_FALSE(api()
                   .send("PATCH", "model-versions/update", {{"name", "m"}, {"version", "1"}})
                   .body["model_version"]
                   .contains("description"));
  // download URI: the source, or a models:/ source resolved.
  EXPECT_EQ(api().get("model-versions/get-download-uri", "name=m&version=1").body,
            json({{"artifact_uri", "s3://bucket/m/1"}}));
  ASSERT_EQ(api().post("model-versions/create", {{"name", "m"}, {"source", "models:/m/2"}}).status,
            200);
  EXPECT_EQ(api().get("model-versions/get-download-uri", "name=m&version=4").body["artifact_uri"],
            "s3://bucket/m/2");
  // rename moves versions and aliases; the old name is gone; an existing name is refused.
  ASSERT_EQ(
      api()
          .post("registered-models/alias", {{"name", "m"}, {"alias", "champion"}, {"version", "1"}})
          .status,
      200);
  const Reply rn = api().post("registered-models/rename", {{"name", "m"}, {"new_name", "m2"}});
  ASSERT_EQ(rn.status, 200) << rn.text;
  EXPECT_EQ(rn.body["registered_model"]["name"], "m2");
  EXPECT_EQ(
      api().get("registered-models/alias", "name=m2&alias=champion").body["model_version"]["name"],
      "m2");
  EXPECT_EQ(api().get("registered-models/get", "name=m").status, 404);
  registerModel(api(), "m3", 0);
  EXPECT_EQ(api()
                .post("registered-models/rename", {{"name", "m3"}, {"new_name", "m2"}})
                .body["error_code"],
            "RESOURCE_ALREADY_EXISTS");
  EXPECT_EQ(api().post("registered-models/rename", {{"name", "m3"}}).body["message"],
            "Missing value for required parameter 'new_name'. See the API docs for more "
            "information about request "
            "parameters.");
}

TEST_P(MlflowApiTest, ThePythonClientsRegisterModelSequenceWorks) {
  // mlflow.register_model: create the model (RESOURCE_ALREADY_EXISTS ignored), create the version
  // (the client polls model-versions/get until status READY), then MlflowClient's prompt check
  // (registered-models/get) before setting an alias, and models:/name@alias loading.
  ASSERT_EQ(api().post("registered-models/create", {{"name", "iris"}}).status, 200);
  EXPECT_EQ(api().post("registered-models/create", {{"name", "iris"}}).body["error_code"],
            "RESOURCE_ALREADY_EXISTS");
  const Reply mv =
      api().post("model-versions/create", {{"name", "iris"},
                                           {"source", "models:/m-0123456789abcdef"},
                                           {"model_id", "m-0123456789abcdef"},
                                           {"tags", {{{"key", "k"}, {"value", "1"}}}}});
  ASSERT_EQ(mv.status, 200);
  EXPECT_EQ(mv.body["model_version"]["status"], "READY");
  EXPECT_EQ(api().get("model-versions/get", "name=iris&version=1").body["model_version"]["status"],
            "READY");
  EXPECT_EQ(api().get("registered-models/get", "name=iris").status, 200);
  EXPECT_EQ(
      api()
          .post("registered-models/alias", {{"name", "iris"}, {"alias", "prod"}, {"version", "1"}})
          .status,
      200);
  EXPECT_EQ(
      api().get("registered-models/alias", "name=iris&alias=prod").body["model_version"]["source"],
      "models:/m-0123456789abcdef");
  EXPECT_EQ(
      api().get("model-versions/get-download-uri", "name=iris&version=1").body["artifact_uri"],
      "models:/m-0123456789abcdef");
}

INSTANTIATE_TEST_SUITE_P(Stores, MlflowApiTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return std::string(param_info.param); });

// ---- the search grammar as pure functions ----

TEST(SearchTest, LikePatternsAreAnchoredAndCaseSensitiveUnlessIlike) {
  EXPECT_TRUE(likeMatch("fr%", "fraud", false));
  EXPECT_FALSE(likeMatch("fr%", "Fraud", false));
  EXPECT_TRUE(likeMatch("fr%", "Fraud", true));
  EXPECT_TRUE(likeMatch("f_aud", "fraud", false));
  EXPECT_FALSE(likeMatch("raud", "fraud", false));
  EXPECT_TRUE(likeMatch("%a%d", "fraud", false));
}

TEST(SearchTest, PageTokensRoundTripInMlflowsFormat) {
  EXPECT_EQ(encodePageToken(100), "eyJvZmZzZXQiOiAxMDB9");
  EXPECT_EQ(*decodePageToken("eyJvZmZzZXQiOiAxMDB9"), 100);
  EXPECT_EQ(*decodePageToken(""), 0);
  EXPECT_EQ(decodePageToken(base64Encode("[1]")).status().message(),
            "Invalid page token, parsed value=[1]");
  EXPECT_EQ(decodePageToken(base64Encode("nope")).status().message(),
            "Invalid page token, decoded value=nope");
}

TEST(SearchTest, FilterClausesAndQuotedTagKeys) {
  auto f = parseFilter("name = 'm' AND tags.`my key` LIKE 'a%' and tag.\"x.y\" != 'z'",
                       Entity::kModelVersion);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->clauses.size(), 3u);
  EXPECT_EQ(f->clauses[1].key, "my key");
  EXPECT_EQ(f->clauses[2].key, "x.y");
  ModelVersion v;
  v.name = "m";
  v.tags = {{"my key", "abc"}, {"x.y", "q"}};
  EXPECT_TRUE(matches(*f, v));
  v.tags[1].value = "z";
  EXPECT_FALSE(matches(*f, v));
  EXPECT_EQ(parseFilter("run_id IN ('a')", Entity::kRegisteredModel).status().message(),
            "Invalid attribute key 'run_id' specified. Valid keys are '{'name'}'");
  EXPECT_EQ(parseFilter("params.x = 'a'", Entity::kRegisteredModel).status().message(),
            "Invalid entity type 'params'. Valid entity types are ('attribute', 'tag', 'tags')");
  // Prompts are left out unless asked for.
  RegisteredModel prompt;
  prompt.name = "p";
  prompt.tags = {{"mlflow.prompt.is_prompt", "true"}};
  EXPECT_FALSE(matches(*parseFilter("", Entity::kRegisteredModel), prompt));
  EXPECT_TRUE(matches(
      *parseFilter("tags.`mlflow.prompt.is_prompt` = 'true'", Entity::kRegisteredModel), prompt));
}

}  // namespace
}  // namespace infera::registry::regtest
