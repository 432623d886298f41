// The admin config API (GET/POST /admin/config) and /admin/status: its YAML <-> JSON mapping, the
// error parsing, the check by the config loader, the write-back with a backup, and the routes on a
// real `Server` with access control (a bad change changes nothing; a good one reloads, is
// audited and persisted).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fakes/http_test_client.h"
#include "server/config.h"
#include "server/internal/config_api.h"
#include "server/server.h"

namespace infera::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("infera-config-api-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
  inline static int counter_ = 0;
};

TEST(ConfigApiTest, YamlScalarsBecomeTypedJsonAndQuotedOnesStayStrings) {
  const auto root = loadYamlString(R"(
a: 12
b: -3.5
c: true
d: "12"
e: 'true'
f: plain text
g: ~
h: [x, 2, false]
i: {j: 1e3}
)");
  ASSERT_TRUE(root.ok());
  const ojson j = yamlToJson(*root);
  EXPECT_EQ(j["a"], 12);
  EXPECT_EQ(j["b"], -3.5);
  EXPECT_EQ(j["c"], true);
  EXPECT_EQ(j["d"], "12");
  EXPECT_EQ(j["e"], "true");
  EXPECT_EQ(j["f"], "plain text");
  EXPECT_TRUE(j["g"].is_null());
  EXPECT_EQ(j["h"], ojson::parse(R"(["x", 2, false])"));
  EXPECT_EQ(j["i"]["j"], 1000.0);
}

TEST(ConfigApiTest, JsonWrittenAsYamlReadsBackTheSame) {
  const ojson j = ojson::parse(R"({
    "strings": ["true", "123", "", "a: b", "#x", "null", "1.5", "- y", "plain"],
    "n": 7, "x": 0.25, "big": 1e-7, "flag": false, "none": null,
    "models": [{"name": "m", "deployments": [{"endpoints": [{"url": "http://h:1", "weight": 3}]}]}]
  })");
  const auto yaml = jsonToYaml(j);
  ASSERT_TRUE(yaml.ok()) << yaml.status().message();
  const auto back = loadYamlString(*yaml);
  ASSERT_TRUE(back.ok()) << *yaml;
  EXPECT_EQ(yamlToJson(*back), j) << *yaml;
  // Key order is the document's; a whole float is written as an integer (a browser sends 2.0 as 2).
  EXPECT_LT(yaml->find("strings"), yaml->find("models")) << *yaml;
  EXPECT_EQ(*jsonToYaml(ojson::parse(R"({"b": 2.0, "a": 1})")), "b: 2\na: 1\n");
  EXPECT_NE(yaml->find("weight: 3"), std::string::npos) << *yaml;
  EXPECT_FALSE(jsonToYaml(ojson::array()).ok());
}

TEST(ConfigApiTest, ErrorsAreSplitIntoTheirKeyPathsAndLines) {
  const auto cfg = loadConfigString(
      "workers: -1\ncolour: blue\nmodels:\n  - name: m\n    "
      "deployments:\n      - endpoints: [{url: 'http://h:1', "
      "weight: 0}]\n");
  ASSERT_FALSE(cfg.ok());
  const auto errors = configErrorsOf(cfg.status());
  ASSERT_EQ(errors.size(), 3u) << cfg.status().message();
  EXPECT_EQ(errors[0].path, "workers");
  EXPECT_EQ(errors[0].line, 1);
  EXPECT_EQ(errors[0].message, "must be in [0, 256], got -1");
  bool weight = false, colour = false;
  for (const auto& e : errors) {
    weight = weight || e.path == "models[0].deployments[0].endpoints[0].weight";
    colour = colour || (e.path == "colour" && e.message == "unknown key");
  }
  EXPECT_TRUE(weight);
  EXPECT_TRUE(colour);
  const auto syntax = configErrorsOf(loadYamlString("a: [1,\n").status());
  ASSERT_EQ(syntax.size(), 1u);
  EXPECT_EQ(syntax[0].path, "");
  EXPECT_GT(syntax[0].line, 0);
}

TEST(ConfigApiTest, SecretsAreRedactedAndRestoredFromTheFile) {
  ojson c =
      ojson::parse(R"({"governance": {"admin_token": "s3cret", "key_secret": "k", "rpm": 1}})");
  const ojson file = c;
  redactSecrets(c);
  EXPECT_EQ(c["governance"]["admin_token"], std::string(kRedacted));
  EXPECT_EQ(c["governance"]["key_secret"], std::string(kRedacted));
  EXPECT_EQ(c["governance"]["rpm"], 1);
  restoreSecrets(c, file);
  EXPECT_EQ(c, file);
}

TEST(ConfigApiTest, CheckUsesTheLoaderAndWriteKeepsABackup) {
  TempDir dir;
  const std::string path = dir.file("infera.yaml");
  const std::string original =
      "# a comment\nmodels:\n  - name: m\n    deployments:\n      - endpoints: [{url: "
      "'http://127.0.0.1:1'}]\n";
  std::ofstream(path) << original;
  auto doc = readConfigDocument(path);
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  ojson proposed = (*doc)["config"];
  proposed["models"][0]["deployments"][0]["endpoints"][0]["weight"] = 0;
  auto bad = checkConfigDocument(proposed, path);
  ASSERT_FALSE(bad.ok());
  const auto errors = configErrorsOf(bad.status());
  ASSERT_EQ(errors.size(), 1u) << bad.status().message();
  EXPECT_EQ(errors[0].path, "models[0].deployments[0].endpoints[0].weight");

  proposed["models"][0]["deployments"][0]["endpoints"][0]["weight"] = 5;
  auto good = checkConfigDocument(proposed, path);
  ASSERT_TRUE(good.ok()) << good.status().message();
  EXPECT_EQ(good->config.gateway.models.at(0).deployments.at(0).endpoints.at(0).weight, 5);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.file("")),
                          std::filesystem::directory_iterator()),
            1)
      << "the check leaves no temporary file";
  auto backup = writeConfigFile(path, good->yaml);
  ASSERT_TRUE(backup.ok()) << backup.status().message();
  EXPECT_EQ(*backup, path + ".bak");
  EXPECT_EQ(readAll(*backup), original);
  EXPECT_EQ(readAll(path), good->yaml);
  EXPECT_TRUE(configWritable(path));
}

// Changed values are replaced where they stand (a quoted string keeps its quotes): comments,
// flow collections and key order of the rest stay byte for byte. A change of structure, or one the
// edited text would read differently, is not made in place (the whole file is written instead).
TEST(ConfigApiTest, ChangedValuesAreEditedInPlaceKeepingComments) {
  const std::string original =
      "# Infera gateway\n"
      "region: eu   # our region\n"
      "models:\n"
      "  - name: chat  # the chat model\n"
      "    description: 'it''s fast'\n"
      "    deployments:\n"
      "      # primary first\n"
      "      - {name: a, endpoints: [{url: \"http://127.0.0.1:1\", weight: 1}]}\n"
      "      - name: b\n"
      "        endpoints:\n"
      "          - {url: 'http://127.0.0.1:2', weight: 3}\n";
  // A text read as the config screen reads the file.
  auto asJson = [](const std::string& text) {
    auto root = loadYamlString(text);
    EXPECT_TRUE(root.ok()) << text;
    return root.ok() ? yamlToJson(*root) : ojson();
  };
  const ojson have = asJson(original);

  EXPECT_EQ(editScalarsInPlace(original, have), original) << "no change, no edit";

  ojson want = have;
  want["region"] = "us";
  want["models"][0]["description"] = "it's \"quick\"";
  want["models"][0]["deployments"][0]["endpoints"][0]["weight"] = 60;
  want["models"][0]["deployments"][1]["endpoints"][0]["url"] = "http://127.0.0.1:9";
  const auto edited = editScalarsInPlace(original, want);
  ASSERT_TRUE(edited.has_value());
  EXPECT_EQ(*edited,
            "# Infera gateway\n"
            "region: us   # our region\n"
            "models:\n"
            "  - name: chat  # the chat model\n"
            "    description: 'it''s \"quick\"'\n"
            "    deployments:\n"
            "      # primary first\n"
            "      - {name: a, endpoints: [{url: \"http://127.0.0.1:1\", weight: 60}]}\n"
            "      - name: b\n"
            "        endpoints:\n"
            "          - {url: 'http://127.0.0.1:9', weight: 3}\n");
  EXPECT_EQ(asJson(*edited), want);

  // A string that would read as another type is quoted in place.
  ojson typed = have;
  typed["region"] = "123";
  const auto quoted = editScalarsInPlace(original, typed);
  ASSERT_TRUE(quoted.has_value());
  EXPECT_NE(quoted->find("region: \"123\"   # our region"), std::string::npos) << *quoted;

  // Structure in block collections: lines added or removed where they belong, the rest (comments
  // included) byte for byte.
  ojson removed = have;
  removed["models"][0]["deployments"].erase(1);
  EXPECT_EQ(editScalarsInPlace(original, removed),
            "# Infera gateway\n"
            "region: eu   # our region\n"
            "models:\n"
            "  - name: chat  # the chat model\n"
            "    description: 'it''s fast'\n"
            "    deployments:\n"
            "      # primary first\n"
            "      - {name: a, endpoints: [{url: \"http://127.0.0.1:1\", weight: 1}]}\n");
  ojson model = have;  // a model added (the console's "add model")
  model["models"].push_back(ojson{{"name", "embed"}, {"deployments", ojson::array()}});
  model["models"][1]["deployments"].push_back(
      ojson{{"name", "e"}, {"endpoints", ojson::array({ojson{{"url", "http://127.0.0.1:3"}}})}});
  const auto with_model = editScalarsInPlace(original, model);
  ASSERT_TRUE(with_model.has_value());
  EXPECT_EQ(with_model->substr(0, original.size()), original) << *with_model;
  EXPECT_EQ(asJson(*with_model), model);
  ojson keys = have;  // a key added to a model, one removed, one added at the top
  keys["models"][0]["aliases"] = ojson::array({"talk"});
  keys["models"][0].erase("description");
  keys["workers"] = 2;
  const auto with_keys = editScalarsInPlace(original, keys);
  ASSERT_TRUE(with_keys.has_value());
  EXPECT_EQ(*with_keys,
            "# Infera gateway\n"
            "region: eu   # our region\n"
            "models:\n"
            "  - name: chat  # the chat model\n"
            "    deployments:\n"
            "      # primary first\n"
            "      - {name: a, endpoints: [{url: \"http://127.0.0.1:1\", weight: 1}]}\n"
            "      - name: b\n"
            "        endpoints:\n"
            "          - {url: 'http://127.0.0.1:2', weight: 3}\n"
            "    aliases: [talk]\n"
            "workers: 2\n");
  EXPECT_EQ(asJson(*with_keys), keys);
  // A file with CRLF line ends gets CRLF lines.
  const std::string crlf = "# c\r\nmodels:\r\n  - name: a\r\n";
  ojson more = asJson(crlf);
  more["models"].push_back(ojson{{"name", "b"}});
  EXPECT_EQ(editScalarsInPlace(crlf, more), crlf + "  - name: b\r\n");
  // Not in place: a key added inside a flow collection, a value turned into a map, an item
  // inserted in the middle.
  ojson added = have;
  added["models"][0]["deployments"][1]["endpoints"][0]["region"] = "eu";
  EXPECT_FALSE(editScalarsInPlace(original, added).has_value());
  ojson mapped = have;
  mapped["region"] = ojson{{"name", "eu"}};
  EXPECT_FALSE(editScalarsInPlace(original, mapped).has_value());
  ojson middle = have;
  middle["models"][0]["deployments"].insert(middle["models"][0]["deployments"].begin() + 1,
                                            ojson{{"name", "c"}});
  EXPECT_FALSE(editScalarsInPlace(original, middle).has_value());

  // A string that is not plain inside a flow collection: the edit would not read back as asked.
  ojson comma = have;
  comma["models"][0]["deployments"][0]["name"] = "a, b";
  const auto c = editScalarsInPlace(original, comma);
  if (c.has_value()) {
    EXPECT_EQ(asJson(*c), comma);
  }

  // One anchored value read in two places cannot change in one of them only.
  const std::string anchored = "a: &w 5\nb: *w\n";
  ojson one = asJson(anchored);
  one["b"] = 6;
  EXPECT_FALSE(editScalarsInPlace(anchored, one).has_value());
  // A byte order mark stays, and the edit lands where the value is.
  const std::string bommed = "\xEF\xBB\xBF# c\nregion: eu\n";
  ojson b = asJson(bommed);
  b["region"] = "us";
  EXPECT_EQ(editScalarsInPlace(bommed, b), "\xEF\xBB\xBF# c\nregion: us\n");
  // A duplicate key: the loader and the JSON disagree on which one counts, so no edit in place.
  const std::string dup = "region: eu\nregion: us\nworkers: 1\n";
  ojson d = asJson(dup);
  d["workers"] = 2;
  EXPECT_FALSE(editScalarsInPlace(dup, d).has_value());
  // A folded plain scalar reads differently from its text: not edited in place.
  const std::string folded = "description: a long\n  text\nregion: eu\n";
  ojson f = asJson(folded);
  f["description"] = "short";
  EXPECT_FALSE(editScalarsInPlace(folded, f).has_value());
}

class ConfigRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("infera.yaml");
    std::ofstream(path_) << "listen: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: "
                            "0}\nworkers: 1\nlog_level: warn\ngovernance: {store: 'sqlite:"
                         << dir_.file("gov.db")
                         << "', admin_token: tok}\nmodels:\n  - name: m\n    deployments:\n      - "
                            "name: d\n        endpoints: [{url: 'http://127.0.0.1:1', weight: "
                            "1}]\n";
    auto cfg = loadConfig(path_);
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    auto s = Server::start(std::move(*cfg), path_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
  }

  std::optional<testing::TestResponse> call(const std::string& method, const std::string& target,
                                            const std::string& body = {},
                                            const std::string& token = "tok") {
    return testing::httpRequest(server_->adminPort(), method, target, body,
                                {{"authorization", "Bearer " + token}, {"x-infera-actor", "ann"}});
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<Server> server_;
};

TEST_F(ConfigRoutesTest, GetReturnsTheFileAsJsonWithSecretsRedacted) {
  const auto r = call("GET", "/admin/config");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  const json j = json::parse(r->body);
  EXPECT_EQ(j["path"], path_);
  EXPECT_EQ(j["generation"], 1);
  EXPECT_EQ(j["writable"], true);
  EXPECT_EQ(j["config"]["governance"]["admin_token"], std::string(kRedacted));
  // The YAML carries the marker where the token was, and the token nowhere ("tok" ends the value
  // in the file's flow mapping: "admin_token: tok}").
  const std::string yaml = j["yaml"].get<std::string>();
  EXPECT_NE(yaml.find(kRedacted), std::string::npos) << yaml;
  for (const char* leak : {": tok}", ": tok\n", ": tok,", ": 'tok'", ": \"tok\""})
    EXPECT_EQ(yaml.find(leak), std::string::npos) << leak << " in\n" << yaml;
  EXPECT_EQ(call("GET", "/admin/config", "", "wrong")->status, 401);
  const auto status = call("GET", "/admin/status");
  ASSERT_EQ(status->status, 200);
  const json st = json::parse(status->body);
  EXPECT_EQ(st["components"]["governance"], true);
  EXPECT_EQ(st["components"]["registry"], false);
  EXPECT_EQ(st["config_path"], path_);
}

TEST_F(ConfigRoutesTest, ABadChangeIsRefusedAtItsKeyAndChangesNothing) {
  const std::string before = readAll(path_);
  json doc = json::parse(call("GET", "/admin/config")->body);
  json c = doc["config"];
  c["models"][0]["deployments"][0]["endpoints"][0]["weight"] = 0;
  const auto r = call("POST", "/admin/config", json{{"config", c}}.dump());
  ASSERT_EQ(r->status, 400) << r->body;
  const json e = json::parse(r->body);
  EXPECT_EQ(e["error"]["code"], "invalid_config");
  EXPECT_EQ(e["error"]["param"], "models[0].deployments[0].endpoints[0].weight");
  EXPECT_EQ(e["errors"][0]["path"], "models[0].deployments[0].endpoints[0].weight");
  EXPECT_EQ(readAll(path_), before);
  EXPECT_EQ(server_->configGeneration(), 1);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".bak"));

  c = doc["config"];
  c["workers"] = 2;  // needs a restart
  const auto restart = call("POST", "/admin/config", json{{"config", c}}.dump());
  ASSERT_EQ(restart->status, 409) << restart->body;
  EXPECT_EQ(json::parse(restart->body)["error"]["code"], "restart_required");
  EXPECT_EQ(call("POST", "/admin/config", "[1]")->status, 400);
  EXPECT_EQ(call("POST", "/admin/config", json{{"config", doc["config"]}, {"generation", 7}}.dump())
                ->status,
            409);
  EXPECT_EQ(readAll(path_), before);
}

TEST_F(ConfigRoutesTest, AKeyGivenTwiceIsRefusedAndChangesNothing) {
  const std::string before = readAll(path_);
  json c = json::parse(call("GET", "/admin/config")->body)["config"];
  std::string body = json{{"config", c}}.dump();
  const std::string weight = "\"weight\":1";
  ASSERT_NE(body.find(weight), std::string::npos) << body;
  body.replace(body.find(weight), weight.size(), "\"weight\":1,\"weight\":9");
  const auto r = call("POST", "/admin/config", body);
  ASSERT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("key given twice"), std::string::npos) << r->body;
  EXPECT_EQ(readAll(path_), before);
  EXPECT_EQ(server_->configGeneration(), 1);
}

TEST_F(ConfigRoutesTest, AGoodChangeIsCheckedThenAppliedPersistedAndAudited) {
  const std::string before = readAll(path_);
  json c = json::parse(call("GET", "/admin/config")->body)["config"];
  c["models"][0]["deployments"][0]["endpoints"][0]["weight"] = 9;
  const auto dry = call("POST", "/admin/config",
                        json{{"config", c}, {"dry_run", true}, {"generation", 1}}.dump());
  ASSERT_EQ(dry->status, 200) << dry->body;
  EXPECT_NE(json::parse(dry->body)["yaml"].get<std::string>().find("weight: 9"), std::string::npos);
  EXPECT_EQ(readAll(path_), before) << "a dry run writes nothing";
  EXPECT_EQ(server_->configGeneration(), 1);

  const auto r = call("POST", "/admin/config", json{{"config", c}, {"generation", 1}}.dump());
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["generation"], 2);
  EXPECT_EQ(json::parse(r->body)["file_edit"], "in_place") << "keys sent in another order";
  EXPECT_EQ(server_->configGeneration(), 2);
  EXPECT_EQ(readAll(path_ + ".bak"), before);
  std::string edited = before;
  edited.replace(edited.find("weight: 1}"), 10, "weight: 9}");
  EXPECT_EQ(readAll(path_), edited) << "only the value changed";
  const auto reread = loadConfig(path_);
  ASSERT_TRUE(reread.ok()) << reread.status().message();
  EXPECT_EQ(reread->gateway.models[0].deployments[0].endpoints[0].weight, 9);
  EXPECT_EQ(reread->access.admin_token, "tok") << "the redacted secret is the file's again";
  const auto endpoints = json::parse(call("GET", "/admin/endpoints")->body);
  EXPECT_EQ(endpoints["endpoints"][0]["weight"], 9);
  const auto audit = json::parse(call("GET", "/admin/audit?since=1h")->body);
  bool found = false;
  for (const auto& a : audit["audit"]) {
    found = found || (a["action"] == "config.apply" && a["actor"] == "ann" &&
                      a["detail"]["generation"] == 2);
  }
  EXPECT_TRUE(found) << audit.dump();
}

// Issue 37, defect 5: with access control off (the quickstart), a page the operator opened on
// another site could send a text/plain POST to the loopback admin port and rewrite the config.
TEST(ConfigCrossSiteTest, APageOnAnotherSiteCannotRewriteTheConfigWithoutAccessControl) {
  TempDir dir;
  const std::string path = dir.file("infera.yaml");
  std::ofstream(path) << "listen: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
                         "workers: 1\nlog_level: warn\nmodels:\n  - name: m\n    deployments:\n"
                         "      - name: d\n        endpoints: [{url: 'http://127.0.0.1:1'}]\n";
  auto cfg = loadConfig(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto s = Server::start(std::move(*cfg), path);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const std::string before = readAll(path);
  json c =
      json::parse(testing::httpRequest((*s)->adminPort(), "GET", "/admin/config")->body)["config"];
  c["models"][0]["deployments"][0]["endpoints"][0]["url"] = "http://127.0.0.1:2";  // elsewhere
  const std::string body = json{{"config", c}}.dump();
  for (const auto& headers : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {{"origin", "http://evil.example"}, {"content-type", "text/plain"}},
           {{"origin", "http://evil.example"}, {"sec-fetch-site", "cross-site"}},
           {{"origin", "http://127.0.0.1:8000"}, {"sec-fetch-site", "same-site"}}}) {
    const auto r = testing::httpRequest((*s)->adminPort(), "POST", "/admin/config", body, headers);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "cross_site_request") << r->body;
  }
  EXPECT_EQ(readAll(path), before);
  EXPECT_EQ((*s)->configGeneration(), 1);
  // The console (the admin port's own page) still applies the change.
  const std::string own = "http://127.0.0.1:" + std::to_string((*s)->adminPort());
  const auto ok = testing::httpRequest((*s)->adminPort(), "POST", "/admin/config", body,
                                       {{"origin", own}, {"sec-fetch-site", "same-origin"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ((*s)->configGeneration(), 2);
}

// A wrong JSON type in a body is a 400 naming it, not an exception.
TEST_F(ConfigRoutesTest, AWrongTypeOrDeepNestingIsRefusedWith400) {
  json c = json::parse(call("GET", "/admin/config")->body)["config"];
  const auto r = call("POST", "/admin/config", json{{"config", c}, {"dry_run", "yes"}}.dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const std::string deep =
      "{\"config\":" + std::string(100'000, '[') + std::string(100'000, ']') + "}";
  const auto d = call("POST", "/admin/config", deep);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 400) << d->body;
  EXPECT_EQ(server_->configGeneration(), 1);
  EXPECT_EQ(call("GET", "/admin/status")->status, 200);
}

// Issue 47 item 6: a console apply (and any reload) answers only once every worker serves the new
// routes, so a request sent after the answer never meets the old weights on a worker that had not
// swapped yet. Each worker says which table it serves.
TEST(ConfigApplyTest, AnApplyAnswersOnlyWhenEveryWorkerServesTheNewRoutes) {
  TempDir dir;
  const std::string path = dir.file("infera.yaml");
  std::ofstream(path) << "listen: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
                         "workers: 2\nlog_level: warn\nmodels:\n  - name: m\n    deployments:\n"
                         "      - name: d\n        endpoints: [{url: 'http://127.0.0.1:1'}]\n";
  auto cfg = loadConfig(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto s = Server::start(std::move(*cfg), path);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const auto perWorker = [&] {
    std::map<std::string, std::string> out;
    std::istringstream in((*s)->metricsText());
    std::string line;
    const std::string prefix = "infera_gateway_worker_config_generation{worker=\"";
    while (std::getline(in, line)) {
      if (line.rfind(prefix, 0) == 0) {
        out[line.substr(prefix.size(), line.find('"', prefix.size()) - prefix.size())] =
            line.substr(line.rfind(' ') + 1);
      }
    }
    return out;
  };
  // The workers build their routers on their own loops as the server starts.
  ASSERT_TRUE(testing::waitFor([&] {
    return perWorker() == std::map<std::string, std::string>{{"0", "1"}, {"1", "1"}};
  }));
  for (int weight = 2; weight < 12; ++weight) {
    json c = json::parse(
        testing::httpRequest((*s)->adminPort(), "GET", "/admin/config")->body)["config"];
    c["models"][0]["deployments"][0]["endpoints"][0]["weight"] = weight;
    const auto r = testing::httpRequest((*s)->adminPort(), "POST", "/admin/config",
                                        json{{"config", c}}.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string gen = std::to_string(json::parse(r->body)["generation"].get<int64_t>());
    // Read at once: no waiting.
    EXPECT_EQ(perWorker(), (std::map<std::string, std::string>{{"0", gen}, {"1", gen}}))
        << "after the apply of generation " << gen;
  }
}

}  // namespace
}  // namespace infera::server
