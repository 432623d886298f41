// The Qdrant REST API of the vector index through a real `infera serve` on loopback (data and
// admin ports on port 0): what a hostile or careless request must not do (stop the process, write
// a broken document, reach another team's collection, make a score that is not a number).

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/utf8.h"
#include "fakes/http_test_client.h"
#include "server/config.h"
#include "server/server.h"

namespace infera::vectors {
namespace {

using nlohmann::json;
using testing::httpRequest;
using testing::TestResponse;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kAdminToken = "vectors-admin-token";

std::string tempDir() {
  char tmpl[] = "/tmp/infera-vectors-api-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  return d ? d : "/tmp";
}

// Qdrant's error body: {"status":{"error":"..."},"time":N}; the message, or "" when the body is
// not that shape.
std::string qdrantErrorMessage(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("status") || !j["status"].is_object() ||
      !j["status"].contains("error") || !j["status"]["error"].is_string() || !j.contains("time") ||
      !j["time"].is_number()) {
    return "";
  }
  return j["status"]["error"].get<std::string>();
}

class VectorsApiTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tempDir(); }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // `governance`: access control on (teams and keys in a SQLite file in the test's directory).
  // `extra`: more top-level YAML.
  void start(bool governance, const std::string& extra = {}) {
    server_.reset();
    ::unsetenv("INFERA_ADMIN_TOKEN");
    ::unsetenv("INFERA_KEY_SECRET");
    std::string yaml =
        "workers: 2\nlisten: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
        "health_check: {enabled: false}\nlog_level: warn\n"
        "vectors:\n  data_dir: " +
        dir_ + "/vectors\n  fsync: false\n" + extra;
    if (governance) {
      yaml += "governance:\n  store: sqlite:" + dir_ +
              "/access.db\n  admin_token: " + std::string(kAdminToken) +
              "\n  key_secret: test-secret-0123456789abcdef0123456789\n"
              "  sync_interval_ms: 100\n  usage_flush_ms: 100\n";
    }
    auto cfg = server::loadConfigString(yaml);
    ASSERT_TRUE(cfg.ok()) << cfg.status().message() << "\n" << yaml;
    auto s = server::Server::start(std::move(*cfg));
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
  }

  TestResponse call(const std::string& method, const std::string& target,
                    const std::string& body = {}, const std::string& key = {}) {
    Headers h = {{"content-type", "application/json"}};
    if (!key.empty()) h.push_back({"api-key", key});
    auto r = httpRequest(server_->port(), method, target, body, h);
    EXPECT_TRUE(r.has_value()) << method << " " << target << ": no answer";
    return r ? *r : TestResponse{};
  }
  TestResponse admin(const std::string& method, const std::string& target,
                     const std::string& body = {}) {
    auto r = httpRequest(server_->adminPort(), method, target, body,
                         {{"content-type", "application/json"},
                          {"authorization", std::string("Bearer ") + kAdminToken}});
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  }
  // A team and one key of it.
  std::string teamKey(const std::string& team) {
    const auto t = admin("POST", "/admin/teams", json{{"name", team}}.dump());
    EXPECT_EQ(t.status, 201) << t.body;
    const auto k = admin("POST", "/admin/keys", json{{"team", team}}.dump());
    EXPECT_EQ(k.status, 201) << k.body;
    const json j = json::parse(k.body, nullptr, false);
    return j.is_object() && j.contains("key") ? j["key"].get<std::string>() : "";
  }
  void createCollection(const std::string& name, const std::string& distance,
                        const std::string& key = {}) {
    const auto r = call("PUT", "/collections/" + name,
                        R"({"vectors":{"size":2,"distance":")" + distance + R"("}})", key);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  json names(const std::string& key = {}) {
    const auto r = call("GET", "/collections", "", key);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(validUtf8(r.body));
    const json j = json::parse(r.body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.body;
    json out = json::array();
    if (j.is_discarded()) return out;
    for (const auto& c : j["result"]["collections"]) out.push_back(c["name"]);
    return out;
  }

  std::string dir_;
  std::unique_ptr<server::Server> server_;
};

const char* kTwoPoints =
    R"({"points":[{"id":1,"vector":[0.5,0.5],"payload":{"secret":"team a's"}},)"
    R"({"id":2,"vector":[0.25,0.75],"payload":{"secret":"also a's"}}]})";

TEST_F(VectorsApiTest, DeeplyNestedPayloadIsA400InQdrantsShapeAndTheServerKeepsServing) {
  start(false);
  createCollection("deep", "Dot");
  const size_t depth = 100'000;
  const std::string body = R"({"points":[{"id":1,"vector":[0.5,0.5],"payload":{"a":)" +
                           std::string(depth, '[') + std::string(depth, ']') + "}}]}";
  const auto r = call("PUT", "/collections/deep/points?wait=true", body);
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  const std::string message = qdrantErrorMessage(r.body);
  EXPECT_TRUE(message.starts_with("Format error in JSON body: ")) << r.body.substr(0, 300);
  EXPECT_NE(message.find("deeper"), std::string::npos) << message;
  // Still serving, and nothing was written.
  const auto n = call("POST", "/collections/deep/points/count", "{}");
  ASSERT_EQ(n.status, 200) << n.body;
  EXPECT_EQ(json::parse(n.body)["result"]["count"], 0);
  // The same nesting in a search body and a filter.
  const auto s = call("POST", "/collections/deep/points/search",
                      R"({"vector":[1,1],"limit":1,"filter":)" + std::string(depth, '[') +
                          std::string(depth, ']') + "}");
  EXPECT_EQ(s.status, 400);
  EXPECT_EQ(call("GET", "/collections/deep").status, 200);
}

// Found by review: a set-payload under a key of 200,000 steps nested the stored payload 200,000
// deep; the next read, snapshot or write overflowed the stack, and so did every restart's replay.
TEST_F(VectorsApiTest, APayloadKeyTooDeepIsRefusedAndNothingNestsPastTheFloorsLimit) {
  start(false);
  createCollection("keys", "Dot");
  ASSERT_EQ(call("PUT", "/collections/keys/points?wait=true", kTwoPoints).status, 200);
  std::string key = "a";
  for (int i = 0; i < 200'000; ++i) key += ".a";
  const auto r = call("POST", "/collections/keys/points/payload?wait=true",
                      R"({"points":[1],"key":")" + key + R"(","payload":{"x":1}})");
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 200);
  // 32 steps are fine; 32 steps plus a payload nesting 100 more are not (past 128 together).
  std::string ok_key = "a";
  for (int i = 1; i < 32; ++i) ok_key += ".a";
  EXPECT_EQ(call("POST", "/collections/keys/points/payload?wait=true",
                 R"({"points":[1],"key":")" + ok_key + R"(","payload":{"x":1}})")
                .status,
            200);
  EXPECT_EQ(call("POST", "/collections/keys/points/payload?wait=true",
                 R"({"points":[1],"key":")" + ok_key + R"(","payload":{"x":)" +
                     std::string(100, '[') + std::string(100, ']') + "}}")
                .status,
            400);
  const auto got = call("GET", "/collections/keys/points/1");
  EXPECT_EQ(got.status, 200) << got.body.substr(0, 200);
  EXPECT_TRUE(validUtf8(got.body));
}

TEST_F(VectorsApiTest, NonAsciiNameRoundTripsAndAnIllFormedOneIsA400InQdrantsShape) {
  start(false);
  createCollection("caf%C3%A9", "Cosine");
  EXPECT_EQ(names(), json::array({"café"}));
  const auto info = call("GET", "/collections/caf%C3%A9");
  EXPECT_EQ(info.status, 200) << info.body;
  ASSERT_EQ(call("PUT", "/collections/caf%C3%A9/points?wait=true",
                 R"({"points":[{"id":7,"vector":[1,0],"payload":{"city":"Zürich"}}]})")
                .status,
            200);
  const auto got = call("GET", "/collections/caf%C3%A9/points/7");
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(json::parse(got.body)["result"]["payload"]["city"], "Zürich");

  for (const char* method : {"PUT", "GET", "DELETE"}) {
    const auto bad = call(method, "/collections/%FF", R"({"vectors":{"size":2,"distance":"Dot"}})");
    EXPECT_EQ(bad.status, 400) << method << " " << bad.body;
    EXPECT_FALSE(qdrantErrorMessage(bad.body).empty()) << method << " " << bad.body;
    EXPECT_TRUE(validUtf8(bad.body));
  }
  const auto bad_points = call("POST", "/collections/x%FFy/points/scroll", "{}");
  EXPECT_EQ(bad_points.status, 400);
  EXPECT_FALSE(qdrantErrorMessage(bad_points.body).empty()) << bad_points.body;
  EXPECT_EQ(names(), json::array({"café"}));
}

TEST_F(VectorsApiTest, NamesStoredBeforeTheDoorAreShownAsValidUtf8) {
  // A store an older version wrote: a name with a raw 0xFF byte in config.json, no owner.
  start(false);
  createCollection("old", "Dot");
  server_.reset();
  const std::string file = dir_ + "/vectors/collections/old/config.json";
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  const size_t at = config.find("\"name\":\"old\"");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, 12, "\"name\":\"old\xFF\"");
  std::ofstream(file, std::ios::trunc) << config;
  start(true);
  const std::string key = teamKey("a");
  EXPECT_EQ(names(key), json::array({"old\xEF\xBF\xBD"}));  // U+FFFD
  // Reachable under that spelling (and shared: any team reads it).
  EXPECT_EQ(call("GET", "/collections/old%EF%BF%BD", "", key).status, 200);
  const auto all = admin("GET", "/admin/vectors/collections");
  ASSERT_EQ(all.status, 200) << all.body;
  EXPECT_TRUE(validUtf8(all.body));
  const json j = json::parse(all.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << all.body;
  ASSERT_EQ(j["collections"].size(), 1u);
  EXPECT_EQ(j["collections"][0]["owner"], "");
}

TEST_F(VectorsApiTest, ErrorsOfTheFloorComeInQdrantsShape) {
  start(false);
  const auto r = call("GET", "/collections/%FF");
  EXPECT_EQ(r.status, 400);
  EXPECT_FALSE(qdrantErrorMessage(r.body).empty()) << r.body;
  const auto aliases = call("GET", "/aliases?x=%FF");
  EXPECT_EQ(aliases.status, 400);
  EXPECT_FALSE(qdrantErrorMessage(aliases.body).empty()) << aliases.body;
}

TEST_F(VectorsApiTest, VectorsWhoseScoreCouldOverflowAreRefusedOnUpsertAndQuery) {
  start(false);
  for (const std::string distance : {"Dot", "Euclid", "Cosine"}) {
    const std::string c = "/collections/" + distance;
    createCollection(distance, distance);
    const auto up =
        call("PUT", c + "/points?wait=true", R"({"points":[{"id":1,"vector":[3e38,3e38]}]})");
    EXPECT_EQ(up.status, 400) << distance << " " << up.body;
    EXPECT_NE(qdrantErrorMessage(up.body).find("takes magnitudes up to"), std::string::npos)
        << up.body;
    const auto batch =
        call("PUT", c + "/points?wait=true", R"({"batch":{"ids":[1],"vectors":[[1,-3e37]]}})");
    EXPECT_EQ(batch.status, 400) << distance << " " << batch.body;
    ASSERT_EQ(call("PUT", c + "/points?wait=true",
                   R"({"points":[{"id":2,"vector":[1e18,-1e18]},{"id":3,"vector":[1,2]}]})")
                  .status,
              200);
    for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
             {"/points/search", R"({"vector":[3e38,3e38],"limit":3})"},
             {"/points/query", R"({"query":[3e38,3e38],"limit":3})"},
             {"/points/search/batch", R"({"searches":[{"vector":[3e38,1],"limit":3}]})"}}) {
      const auto q = call("POST", c + path, body);
      EXPECT_EQ(q.status, 400) << distance << path << " " << q.body;
      EXPECT_FALSE(qdrantErrorMessage(q.body).empty()) << q.body;
    }
    // Within the limit, every score is a finite number.
    const auto q = call("POST", c + "/points/search", R"({"vector":[1e18,1e18],"limit":3})");
    ASSERT_EQ(q.status, 200) << q.body;
    const json j = json::parse(q.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << distance << " " << q.body;
    ASSERT_EQ(j["result"].size(), 2u) << q.body;
    for (const auto& p : j["result"]) EXPECT_TRUE(p["score"].is_number()) << q.body;
  }
}

// nlohmann's value() and get<> throw on a field of another type; these answer in Qdrant's shape
// (400, or the field ignored as Qdrant's serde defaults would) instead of the floor's 500.
TEST_F(VectorsApiTest, FieldsOfTheWrongTypeAreNeverA500) {
  start(false);
  const auto bad_distance =
      call("PUT", "/collections/typed", R"({"vectors":{"size":2,"distance":5}})");
  EXPECT_EQ(bad_distance.status, 400) << bad_distance.body;
  const auto bad_quant = call("PUT", "/collections/typed",
                              R"({"vectors":{"size":2,"distance":"Dot"},)"
                              R"("quantization_config":{"scalar":{"type":1}}})");
  EXPECT_EQ(bad_quant.status, 400) << bad_quant.body;
  const auto odd_quantile = call("PUT", "/collections/typed",
                                 R"({"vectors":{"size":2,"distance":"Dot"},)"
                                 R"("quantization_config":{"scalar":{"quantile":"x"}}})");
  EXPECT_LT(odd_quantile.status, 500) << odd_quantile.body;
  (void)call("DELETE", "/collections/typed");
  createCollection("typed", "Dot");
  const auto using_number =
      call("POST", "/collections/typed/points/query", R"({"query":[1,1],"using":5})");
  EXPECT_EQ(using_number.status, 400) << using_number.body;
  const auto name_number = call("POST", "/collections/typed/points/search",
                                R"({"vector":{"name":5,"vector":[1,1]},"limit":1})");
  EXPECT_LT(name_number.status, 500) << name_number.body;
  for (const auto* r : {&bad_distance, &bad_quant, &using_number}) {
    EXPECT_FALSE(qdrantErrorMessage(r->body).empty()) << r->body;
  }
}

// Team b's key on every kind of route of team a's collection: answered as if it did not exist,
// and nothing changes.
TEST_F(VectorsApiTest, AnotherTeamsCollectionIsInvisibleAndUnchangedOnEveryRoute) {
  start(true);
  const std::string a = teamKey("a");
  const std::string b = teamKey("b");
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  createCollection("acoll", "Dot", a);
  ASSERT_EQ(call("PUT", "/collections/acoll/points?wait=true", kTwoPoints, a).status, 200);
  ASSERT_EQ(call("PUT", "/collections/acoll/index",
                 R"({"field_name":"secret","field_schema":"keyword"})", a)
                .status,
            200);
  const std::string missing = "Not found: Collection `acoll` doesn't exist!";

  struct Probe {
    const char* method;
    const char* path;
    const char* body;
  };
  const std::vector<Probe> probes = {
      {"GET", "/collections/acoll", ""},
      {"GET", "/collections/acoll/stats", ""},
      {"GET", "/collections/acoll/aliases", ""},
      {"PATCH", "/collections/acoll", R"({"optimizers_config":{}})"},
      {"PUT", "/collections/acoll/index", R"({"field_name":"other","field_schema":"keyword"})"},
      {"DELETE", "/collections/acoll/index/secret?wait=true", ""},
      {"PUT", "/collections/acoll/points?wait=true",
       R"({"points":[{"id":1,"vector":[9,9],"payload":{"secret":"b's"}}]})"},
      {"POST", "/collections/acoll/points", R"({"ids":[1,2],"with_payload":true})"},
      {"GET", "/collections/acoll/points/1", ""},
      {"POST", "/collections/acoll/points/delete?wait=true", R"({"points":[1,2]})"},
      {"POST", "/collections/acoll/points/payload?wait=true",
       R"({"payload":{"secret":"b's"},"points":[1]})"},
      {"PUT", "/collections/acoll/points/payload?wait=true",
       R"({"payload":{"secret":"b's"},"points":[1]})"},
      {"POST", "/collections/acoll/points/payload/delete?wait=true",
       R"({"keys":["secret"],"points":[1]})"},
      {"POST", "/collections/acoll/points/payload/clear?wait=true", R"({"points":[1,2]})"},
      {"POST", "/collections/acoll/points/count", "{}"},
      {"POST", "/collections/acoll/points/scroll", R"({"with_payload":true})"},
      {"POST", "/collections/acoll/points/search", R"({"vector":[1,1],"limit":5})"},
      {"POST", "/collections/acoll/points/search/batch",
       R"({"searches":[{"vector":[1,1],"limit":5}]})"},
      {"POST", "/collections/acoll/points/query", R"({"query":[1,1],"limit":5})"},
      {"POST", "/collections/acoll/points/query/batch",
       R"({"searches":[{"query":[1,1],"limit":5}]})"},
      {"POST", "/collections/acoll/points/query/groups",
       R"({"query":[1,1],"group_by":"secret","limit":5})"},
      {"PUT", "/collections/acoll/points/vectors?wait=true",
       R"({"points":[{"id":1,"vector":[9,9]}]})"},
      {"POST", "/collections/acoll/points/vectors/delete?wait=true",
       R"({"points":[1],"vector":["x"]})"},
  };
  auto probeAll = [&] {
    for (const Probe& p : probes) {
      const auto r = call(p.method, p.path, p.body, b);
      EXPECT_EQ(r.status, 404) << p.method << " " << p.path << ": " << r.body;
      EXPECT_EQ(qdrantErrorMessage(r.body), missing) << p.method << " " << p.path;
      EXPECT_EQ(r.body.find("team a"), std::string::npos) << r.body;
    }
    // As for a collection that does not exist: exists is false, a drop drops nothing, a create
    // finds the name taken without replacing it or saying whose it is.
    const auto ex = call("GET", "/collections/acoll/exists", "", b);
    ASSERT_EQ(ex.status, 200) << ex.body;
    EXPECT_EQ(json::parse(ex.body)["result"]["exists"], false);
    const auto drop = call("DELETE", "/collections/acoll", "", b);
    ASSERT_EQ(drop.status, 200) << drop.body;
    EXPECT_EQ(json::parse(drop.body)["result"], false);
    const auto create =
        call("PUT", "/collections/acoll", R"({"vectors":{"size":4,"distance":"Euclid"}})", b);
    EXPECT_EQ(create.status, 409) << create.body;
    EXPECT_EQ(qdrantErrorMessage(create.body), "Wrong input: Collection `acoll` already exists!");
    EXPECT_EQ(names(b), json::array());
  };
  auto unchanged = [&] {
    EXPECT_EQ(names(a), json::array({"acoll"}));
    const auto info = call("GET", "/collections/acoll", "", a);
    ASSERT_EQ(info.status, 200) << info.body;
    const json i = json::parse(info.body);
    EXPECT_EQ(i["result"]["config"]["params"]["vectors"]["size"], 2);
    EXPECT_EQ(i["result"]["config"]["params"]["vectors"]["distance"], "Dot");
    EXPECT_TRUE(i["result"]["payload_schema"].contains("secret")) << info.body;
    EXPECT_FALSE(i["result"]["payload_schema"].contains("other")) << info.body;
    const auto pts =
        call("POST", "/collections/acoll/points", R"({"ids":[1,2],"with_vector":true})", a);
    ASSERT_EQ(pts.status, 200) << pts.body;
    const json p = json::parse(pts.body)["result"];
    ASSERT_EQ(p.size(), 2u) << pts.body;
    EXPECT_EQ(p[0]["payload"], json({{"secret", "team a's"}}));
    EXPECT_EQ(p[0]["vector"], json({0.5, 0.5}));
    EXPECT_EQ(p[1]["payload"], json({{"secret", "also a's"}}));
  };
  probeAll();
  unchanged();

  // Ownership is stored with the collection: the same after a restart.
  start(true);
  probeAll();
  unchanged();

  // The admin port sees and names every team's collections.
  const auto all = admin("GET", "/admin/vectors/collections");
  ASSERT_EQ(all.status, 200) << all.body;
  const json j = json::parse(all.body);
  ASSERT_EQ(j["collections"].size(), 1u);
  EXPECT_EQ(j["collections"][0]["owner"], "a");
}

// A collection made without access control is shared: every team reads and writes its points,
// none drops it or changes its schema; a team's own collection it manages fully.
TEST_F(VectorsApiTest, SharedCollectionsAreReadAndWrittenByTeamsButManagedOnlyByTheAdmin) {
  start(false);
  createCollection("shared", "Dot");
  start(true);
  const std::string b = teamKey("b");
  EXPECT_EQ(names(b), json::array({"shared"}));
  EXPECT_EQ(call("PUT", "/collections/shared/points?wait=true", kTwoPoints, b).status, 200);
  const auto scroll = call("POST", "/collections/shared/points/scroll", "{}", b);
  ASSERT_EQ(scroll.status, 200) << scroll.body;
  EXPECT_EQ(json::parse(scroll.body)["result"]["points"].size(), 2u);
  for (const auto& [method, path, body] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"DELETE", "/collections/shared", ""},
           {"PATCH", "/collections/shared", "{}"},
           {"PUT", "/collections/shared", R"({"vectors":{"size":2,"distance":"Dot"}})"},
           {"PUT", "/collections/shared/index",
            R"({"field_name":"secret","field_schema":"keyword"})"},
           {"DELETE", "/collections/shared/index/secret", ""}}) {
    const auto r = call(method, path, body, b);
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.body;
    EXPECT_TRUE(qdrantErrorMessage(r.body).starts_with("Forbidden: ")) << r.body;
  }
  EXPECT_EQ(names(b), json::array({"shared"}));
  // Its own: everything, including dropping it.
  createCollection("bcoll", "Dot", b);
  EXPECT_EQ(
      call("PUT", "/collections/bcoll/index", R"({"field_name":"k","field_schema":"keyword"})", b)
          .status,
      200);
  const auto drop = call("DELETE", "/collections/bcoll", "", b);
  ASSERT_EQ(drop.status, 200) << drop.body;
  EXPECT_EQ(json::parse(drop.body)["result"], true);
}

// Qdrant's Query API over a collection with a named dense vector and two sparse ones: sparse
// search with IDF, hybrid prefetch + fusion equal to fusing the two answers here, the legacy
// search and query/batch on named vectors, every malformed request refused with nothing written,
// and the sparse vectors back after a restart (WAL replay).
TEST_F(VectorsApiTest, NamedAndSparseVectorsAnswerTheQueryApiWithPrefetchAndFusion) {
  start(false);
  const std::string c = "/collections/hybrid";
  ASSERT_EQ(call("PUT", c,
                 R"({"vectors":{"dense":{"size":2,"distance":"Dot"}},)"
                 R"("sparse_vectors":{"text":{"modifier":"idf"},"kw":{}}})")
                .status,
            200);
  const json info = json::parse(call("GET", c).body);
  EXPECT_EQ(info["result"]["config"]["params"]["vectors"],
            json::parse(R"({"dense":{"size":2,"distance":"Dot"}})"));
  EXPECT_EQ(info["result"]["config"]["params"]["sparse_vectors"],
            json::parse(R"({"text":{"modifier":"idf"},"kw":{}})"));
  auto up = call("PUT", c + "/points?wait=true", R"({"points":[
      {"id":1,"vector":{"dense":[1,0],"text":{"indices":[1],"values":[1]},"kw":{"indices":[7],"values":[1]}}},
      {"id":2,"vector":{"dense":[0.9,0.1],"text":{"indices":[2,1],"values":[1,0.5]}}},
      {"id":3,"vector":{"dense":[0,1],"text":{"indices":[3],"values":[2]}}},
      {"id":4,"vector":{"dense":[0.5,0.5],"text":{"indices":[2],"values":[1]}}},
      {"id":5,"vector":{"dense":[-1,0],"text":{"indices":[1],"values":[2]}}},
      {"id":6,"vector":{"dense":[0.2,0.8]}}]})");
  ASSERT_EQ(up.status, 200) << up.body;
  up = call("PUT", c + "/points?wait=true",
            R"({"batch":{"ids":[7,8],"vectors":{"dense":[[0.7,0.7],[0.1,0.1]],)"
            R"("text":[{"indices":[4],"values":[1]},{"indices":[1],"values":[0.1]}]}}})");
  ASSERT_EQ(up.status, 200) << up.body;
  // A point's vectors come back by name, sparse ones sorted by index.
  const json p2 = json::parse(call("GET", c + "/points/2").body);
  EXPECT_EQ(p2["result"]["vector"]["text"], json::parse(R"({"indices":[1,2],"values":[0.5,1]})"));
  EXPECT_EQ(p2["result"]["vector"]["dense"].size(), 2u);
  EXPECT_FALSE(p2["result"]["vector"].contains("kw")) << "point 2 has no kw vector";

  auto points = [&](const std::string& path, const std::string& body) {
    const auto r = call("POST", c + path, body);
    EXPECT_EQ(r.status, 200) << body << " -> " << r.body;
    const json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j["result"].is_object() ? j["result"]["points"] : j["result"];
  };
  auto ids = [](const json& pts) {
    std::vector<int> out;
    for (const auto& p : pts) out.push_back(p["id"].get<int>());
    return out;
  };
  // Sparse with IDF: 7 points have `text`, 4 of them dimension 1.
  const json sparse =
      points("/points/query", R"({"query":{"indices":[1],"values":[1]},"using":"text","limit":3})");
  EXPECT_EQ(ids(sparse), (std::vector<int>{5, 1, 2}));
  const double idf = std::log((7 - 4 + 0.5) / (4 + 0.5) + 1);
  EXPECT_NEAR(sparse[0]["score"].get<double>(), 2 * idf, 1e-5);
  const json dense = points("/points/query", R"({"query":[1,0],"using":"dense","limit":3})");
  EXPECT_EQ(ids(dense), (std::vector<int>{1, 2, 7}));
  // Hybrid: both as prefetches, fused by RRF (k = 2) exactly as computed from the two answers.
  std::map<int, double> want;
  for (const json* list : {&dense, &sparse}) {
    for (size_t r = 0; r < list->size(); ++r) want[(*list)[r]["id"].get<int>()] += 1.0 / (r + 2.0);
  }
  const std::string hybrid = R"({"prefetch":[{"query":[1,0],"using":"dense","limit":3},)"
                             R"({"query":{"indices":[1],"values":[1]},"using":"text","limit":3}],)";
  const json rrf = points("/points/query", hybrid + R"("query":{"fusion":"rrf"},"limit":3})");
  EXPECT_EQ(ids(rrf), (std::vector<int>{1, 2, 5}));
  for (const auto& p : rrf) EXPECT_NEAR(p["score"].get<double>(), want[p["id"].get<int>()], 1e-6);
  const json dbsf = points("/points/query", hybrid + R"("query":{"fusion":"dbsf"},"limit":10})");
  EXPECT_EQ(dbsf.size(), 4u) << "the union of the two prefetches";
  // Rescoring the sparse candidates with the dense vector; a filter at the root reaches them.
  const json rescored = points(
      "/points/query",
      R"({"prefetch":{"query":{"indices":[1],"values":[1]},"using":"text","limit":10},)"
      R"("query":[1,0],"using":"dense","filter":{"must_not":[{"has_id":[1]}]},"with_vector":["text"]})");
  EXPECT_EQ(ids(rescored), (std::vector<int>{2, 8, 5}));
  EXPECT_EQ(rescored[0]["vector"], json::parse(R"({"text":{"indices":[1,2],"values":[0.5,1]}})"));
  // The legacy search and the batch take named vectors too.
  EXPECT_EQ(
      ids(points("/points/search",
                 R"({"vector":{"name":"text","vector":{"indices":[1],"values":[1]}},"limit":2})")),
      (std::vector<int>{5, 1}));
  const json batch =
      points("/points/query/batch", R"({"searches":[{"query":[0,1],"using":"dense","limit":1},)"
                                    R"({"query":{"indices":[7],"values":[1]},"using":"kw"}]})");
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(ids(batch[0]["points"]), std::vector<int>{3});
  EXPECT_EQ(ids(batch[1]["points"]), std::vector<int>{1});
  // A query by id uses that point's vector of `using`, and leaves the point out.
  EXPECT_EQ(ids(points("/points/query", R"({"query":5,"using":"text","limit":2})")),
            (std::vector<int>{1, 2}));

  // Refusals: the reason in Qdrant's shape, and nothing written.
  const std::vector<std::tuple<std::string, std::string, int, std::string>> bad = {
      {"PUT",
       R"({"points":[{"id":9,"vector":{"dense":[1,1],"text":{"indices":[1,2],"values":[1]}}}]})",
       422, "must be the same length as indices"},
      {"PUT",
       R"({"points":[{"id":9,"vector":{"dense":[1,1],"text":{"indices":[3,3],"values":[1,2]}}}]})",
       422, "must be unique"},
      {"PUT",
       R"({"points":[{"id":9,"vector":{"dense":[1,1],"text":{"indices":[-1],"values":[1]}}}]})",
       400, "expected u32"},
      {"PUT", R"({"points":[{"id":9,"vector":{"dense":[1,1],"nope":[1,1]}}]})", 400,
       "Not existing vector name error: nope"},
      {"PUT", R"({"points":[{"id":9,"vector":{"dense":[1,1],"text":[1,1]}}]})", 400,
       "Conversion between sparse and regular vectors failed"},
      {"PUT", R"({"points":[{"id":9,"vector":[1,1]}]})", 400, "Not existing vector name error"},
      {"PUT", R"({"points":[{"id":9,"vector":{"text":{"indices":[1],"values":[1]}}}]})", 400,
       "needs every point's dense vector"},
      {"PUT",
       R"({"points":[{"id":9,"vector":{"dense":[1,1],"text":{"indices":[1],"values":[1e999]}}}]})",
       400, ""},
      {"POST", R"({"query":{"fusion":"rrf"}})", 400, "cannot apply Fusion without prefetches"},
      {"POST", R"({"prefetch":[{"query":[1,0],"using":"dense"}]})", 400,
       "A query is needed to merge the prefetches"},
      {"POST",
       R"({"prefetch":[{"query":[1,0],"using":"dense"}],"query":{"fusion":"rrf"},"using":"dense"})",
       400, "Fusion queries cannot be combined with the 'using' field."},
      {"POST",
       R"({"prefetch":[{"query":[1,0],"using":"dense"}],"query":{"rrf":{"weights":[1,2]}}})", 400,
       "Number of weights in RRF should match number of pre-fetches: got 2, expected 1"},
      {"POST", R"({"query":[1,0],"using":"nope"})", 400, "Not existing vector name error: nope"},
      {"POST", R"({"query":[1,0]})", 400, "Not existing vector name error: "},
      {"POST", R"({"query":{"indices":[1],"values":[1]},"using":"dense"})", 400,
       "Conversion between sparse and regular vectors failed"},
      {"POST", R"({"query":[1,0],"using":"text"})", 400,
       "Conversion between sparse and regular vectors failed"},
      {"POST", R"({"score_threshold":1})", 400, "A query is needed to use the score_threshold"},
      {"POST", R"({"query":{"recommend":{"positive":[1]}},"using":"dense"})", 400, "not supported"},
      // Bounds that keep every score finite and every request's work bounded (a hostile pass
      // found scores of null from 1e38 sparse values and 1e300 weights, and an offset of 2^64-1
      // that wrapped the limit check).
      {"PUT",
       R"({"points":[{"id":9,"vector":{"dense":[1,1],"text":{"indices":[1],"values":[1e16]}}}]})",
       400, "sparse values take magnitudes up to 1e15"},
      {"POST",
       R"({"prefetch":[{"query":[1,0],"using":"dense"}],"query":{"rrf":{"weights":[1e300]}}})", 422,
       "a weight must be within"},
      {"POST", R"({"query":[1,0],"using":"dense","offset":18446744073709551615})", 400,
       "limit + offset must not exceed 100000"},
  };
  for (const auto& [method, body, status, words] : bad) {
    const auto r =
        call(method, method == "PUT" ? c + "/points?wait=true" : c + "/points/query", body);
    EXPECT_EQ(r.status, status) << body << " -> " << r.body;
    EXPECT_NE(qdrantErrorMessage(r.body).find(words), std::string::npos)
        << body << " -> " << r.body;
  }
  // Sixty-four prefetches (each a search) are one too many.
  std::string many = R"({"query":{"fusion":"rrf"},"prefetch":[)";
  for (int i = 0; i < 64; ++i)
    many += std::string(i ? "," : "") + R"({"query":[1,0],"using":"dense"})";
  const auto r = call("POST", c + "/points/query", many + "]}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(call("POST", c + "/points/count", "{}").body)["result"]["count"], 8);

  // After a restart (the WAL replayed), the same answers.
  server_.reset();
  start(false);
  EXPECT_EQ(ids(points("/points/query", hybrid + R"("query":{"fusion":"rrf"},"limit":3})")),
            (std::vector<int>{1, 2, 5}));
  EXPECT_EQ(json::parse(call("GET", c + "/points/2").body)["result"]["vector"]["text"],
            json::parse(R"({"indices":[1,2],"values":[0.5,1]})"));
}

// Several named dense vectors (an image and a text one), each its own graph and distance: queried
// by `using`, one replaced by PUT /points/vectors while the other stays, sparse vectors deleted by
// name, refusals that change nothing, and all of it back after a restart.
TEST_F(VectorsApiTest, SeveralNamedDenseVectorsAreQueriedUpdatedAndKeptByName) {
  start(false);
  const std::string c = "/collections/multi";
  ASSERT_EQ(call("PUT", c,
                 R"({"vectors":{"image":{"size":2,"distance":"Euclid"},)"
                 R"("text":{"size":3,"distance":"Dot","hnsw_config":{"m":8}}},)"
                 R"("sparse_vectors":{"kw":{}}})")
                .status,
            200);
  const json info = json::parse(call("GET", c).body);
  EXPECT_EQ(info["result"]["config"]["params"]["vectors"],
            json::parse(
                R"({"image":{"size":2,"distance":"Euclid"},)"
                R"("text":{"size":3,"distance":"Dot","hnsw_config":{"m":8,"ef_construct":100}}})"));
  auto up = call("PUT", c + "/points?wait=true", R"({"points":[
      {"id":1,"vector":{"image":[0,0],"text":[1,0,0],"kw":{"indices":[5],"values":[1]}}},
      {"id":2,"vector":{"image":[1,0],"text":[0,1,0],"kw":{"indices":[5],"values":[2]}}},
      {"id":3,"vector":{"image":[3,3],"text":[0,0,1]}}]})");
  ASSERT_EQ(up.status, 200) << up.body;
  auto ids = [&](const std::string& body) {
    const auto r = call("POST", c + "/points/query", body);
    EXPECT_EQ(r.status, 200) << body << " -> " << r.body;
    std::vector<int> out;
    const json j = json::parse(r.body, nullptr, false);
    if (!j.is_discarded() && j["result"].is_object()) {
      for (const auto& p : j["result"]["points"]) out.push_back(p["id"].get<int>());
    }
    return out;
  };
  EXPECT_EQ(ids(R"({"query":[2.9,2.9],"using":"image","limit":2})"), (std::vector<int>{3, 2}));
  EXPECT_EQ(ids(R"({"query":[0,1,0.5],"using":"text","limit":2})"), (std::vector<int>{2, 3}));
  // Both dense vectors as prefetches, fused.
  EXPECT_EQ(
      ids(R"({"prefetch":[{"query":[0.1,0],"using":"image","limit":2},)"
          R"({"query":[1,0.2,0],"using":"text","limit":2}],"query":{"fusion":"rrf"},"limit":1})"),
      std::vector<int>{1});
  // Every point needs every dense vector.
  const auto missing =
      call("PUT", c + "/points?wait=true", R"({"points":[{"id":4,"vector":{"image":[1,1]}}]})");
  EXPECT_EQ(missing.status, 400) << missing.body;
  EXPECT_NE(qdrantErrorMessage(missing.body).find("no `text` vector"), std::string::npos)
      << missing.body;
  // PUT /points/vectors replaces point 3's text vector; its image vector and payload stay.
  ASSERT_EQ(
      call("PUT", c + "/points/payload?wait=true", R"({"payload":{"k":"v"},"points":[3]})").status,
      200);
  up = call("PUT", c + "/points/vectors?wait=true",
            R"({"points":[{"id":3,"vector":{"text":[0.9,0,0]}}]})");
  ASSERT_EQ(up.status, 200) << up.body;
  EXPECT_EQ(ids(R"({"query":[1,0,0],"using":"text","limit":2})"), (std::vector<int>{1, 3}));
  EXPECT_EQ(ids(R"({"query":[2.9,2.9],"using":"image","limit":1})"), std::vector<int>{3});
  const json p3 = json::parse(call("GET", c + "/points/3").body);
  EXPECT_EQ(p3["result"]["vector"]["text"], json::parse("[0.9,0,0]"));
  EXPECT_EQ(p3["result"]["vector"]["image"], json::parse("[3,3]"));
  EXPECT_EQ(p3["result"]["payload"], json::parse(R"({"k":"v"})"));
  // Refused, with nothing changed: a missing point (the whole update), a wrong size, a dense
  // vector deleted, an unknown name.
  const auto absent = call("PUT", c + "/points/vectors?wait=true",
                           R"({"points":[{"id":1,"vector":{"text":[0,0,1]}},)"
                           R"({"id":99,"vector":{"text":[0,0,1]}}]})");
  EXPECT_EQ(absent.status, 404) << absent.body;
  EXPECT_EQ(call("PUT", c + "/points/vectors?wait=true",
                 R"({"points":[{"id":1,"vector":{"text":[0,1]}}]})")
                .status,
            400);
  EXPECT_EQ(ids(R"({"query":[1,0,0],"using":"text","limit":1})"), std::vector<int>{1})
      << "point 1's text vector is unchanged";
  EXPECT_EQ(
      call("POST", c + "/points/vectors/delete?wait=true", R"({"points":[1],"vector":["image"]})")
          .status,
      400);
  EXPECT_EQ(call("POST", c + "/points/vectors/delete?wait=true", R"({"points":[1],"vector":["x"]})")
                .status,
            400);
  // A sparse vector deleted by name: point 1 no longer answers a kw query.
  ASSERT_EQ(
      call("POST", c + "/points/vectors/delete?wait=true", R"({"points":[1],"vector":["kw"]})")
          .status,
      200);
  EXPECT_EQ(ids(R"({"query":{"indices":[5],"values":[1]},"using":"kw"})"), std::vector<int>{2});

  server_.reset();
  start(false);
  EXPECT_EQ(ids(R"({"query":[1,0,0],"using":"text","limit":2})"), (std::vector<int>{1, 3}));
  EXPECT_EQ(ids(R"({"query":[2.9,2.9],"using":"image","limit":2})"), (std::vector<int>{3, 2}));
  EXPECT_EQ(ids(R"({"query":{"indices":[5],"values":[1]},"using":"kw"})"), std::vector<int>{2});
}

// Binary quantization with the originals on disk: the configuration reads back as Qdrant shows it,
// searches with oversampling (and with the codes ignored) find each stored vector first, the
// floats are mapped (no file left in the directory), misfits are refused, and a restart answers
// the same.
TEST_F(VectorsApiTest, BinaryQuantizedOnDiskVectorsSearchWithOversamplingAndSurviveARestart) {
  start(false);
  const std::string c = "/collections/bq";
  const auto euclid = call("PUT", "/collections/bad",
                           R"({"vectors":{"size":8,"distance":"Euclid"},)"
                           R"("quantization_config":{"binary":{}}})");
  EXPECT_EQ(euclid.status, 400);
  EXPECT_NE(qdrantErrorMessage(euclid.body).find("does not fit Euclid"), std::string::npos)
      << euclid.body;
  EXPECT_EQ(call("PUT", "/collections/bad",
                 R"({"vectors":{"size":8,"distance":"Dot"},)"
                 R"("quantization_config":{"binary":{"encoding":"two_bits"}}})")
                .status,
            400);
  ASSERT_EQ(call("PUT", c,
                 R"({"vectors":{"size":16,"distance":"Cosine","on_disk":true},)"
                 R"("quantization_config":{"binary":{"always_ram":true}}})")
                .status,
            200);
  const json info = json::parse(call("GET", c).body)["result"]["config"];
  EXPECT_EQ(info["params"]["vectors"],
            json::parse(R"({"size":16,"distance":"Cosine","on_disk":true})"));
  EXPECT_EQ(info["quantization_config"], json::parse(R"({"binary":{"always_ram":true}})"));
  // 1,200 points (codes are trained from 1,024 on), in three batches.
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  std::vector<std::vector<float>> rows(1200, std::vector<float>(16));
  for (int b = 0; b < 3; ++b) {
    json batch = {{"ids", json::array()}, {"vectors", json::array()}};
    for (int i = b * 400; i < (b + 1) * 400; ++i) {
      for (float& x : rows[size_t(i)]) x = g(rng);
      batch["ids"].push_back(i);
      batch["vectors"].push_back(rows[size_t(i)]);
    }
    ASSERT_EQ(call("PUT", c + "/points?wait=true", json{{"batch", batch}}.dump()).status, 200);
  }
  const json stats = json::parse(call("GET", c + "/stats").body)["result"];
  EXPECT_EQ(stats["quantization"], "binary");
  EXPECT_TRUE(stats["quantized"].get<bool>());
  EXPECT_GE(stats["mapped_bytes"].get<size_t>(), 1200u * 16 * 4);
  auto top = [&](int i, const std::string& params) {
    const auto r = call(
        "POST", c + "/points/query",
        json{{"query", rows[size_t(i)]}, {"limit", 1}, {"params", json::parse(params)}}.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body, nullptr, false);
    return j.is_discarded() || j["result"]["points"].empty()
               ? -1
               : j["result"]["points"][0]["id"].get<int>();
  };
  int found = 0, found_ignoring = 0;
  for (int i = 0; i < 1200; i += 40) {
    found += top(i, R"({"quantization":{"rescore":true,"oversampling":4}})") == i;
    found_ignoring += top(i, R"({"quantization":{"ignore":true}})") == i;
  }
  EXPECT_EQ(found, 30) << "every stored vector is its own nearest after rescoring";
  EXPECT_EQ(found_ignoring, 30);
  const auto over = call("POST", c + "/points/query",
                         R"({"query":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],)"
                         R"("params":{"quantization":{"oversampling":0.5}}})");
  EXPECT_EQ(over.status, 422) << over.body;
  std::set<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(dir_ + "/vectors/collections/bq"))
    files.insert(f.path().filename().string());
  for (const auto& f : files) EXPECT_FALSE(f.starts_with(".infera-vectors")) << f;

  server_.reset();
  start(false);
  int again = 0;
  for (int i = 0; i < 1200; i += 40) again += top(i, R"({"quantization":{"oversampling":4}})") == i;
  EXPECT_EQ(again, 30);
  EXPECT_EQ(json::parse(call("GET", c + "/stats").body)["result"]["quantization"], "binary");
}

// query/groups: the ranking grouped by a payload value, groups in the order of their best point,
// at most group_size each; an array value joins each of its groups; a point without one is left
// out; the search is widened until the groups fill.
TEST_F(VectorsApiTest, QueryGroupsGroupTheRankingByAPayloadValue) {
  start(false);
  const std::string c = "/collections/groups";
  ASSERT_EQ(call("PUT", c, R"({"vectors":{"size":2,"distance":"Dot"}})").status, 200);
  // Scores along [1,0]: id / 100. Documents: a (ids 100, 98, 96, ...), b (99, 97, ...); id 50 is
  // in both by an array; ids 1..9 have no doc.
  json pts = json::array();
  for (int i = 1; i <= 100; ++i) {
    json payload = i < 10 ? json::object() : json{{"doc", i % 2 ? "b" : "a"}, {"n", i}};
    if (i == 50) payload["doc"] = json::array({"c", "a"});
    if (i == 20) payload["doc"] = 7;  // an integer value is a group too
    pts.push_back({{"id", i}, {"vector", {i / 100.0, 0.0}}, {"payload", payload}});
  }
  ASSERT_EQ(call("PUT", c + "/points?wait=true", json{{"points", pts}}.dump()).status, 200);
  auto groups = [&](const std::string& body) {
    const auto r = call("POST", c + "/points/query/groups", body);
    EXPECT_EQ(r.status, 200) << body << " -> " << r.body;
    const json j = json::parse(r.body, nullptr, false);
    return j.is_discarded() ? json() : j["result"]["groups"];
  };
  const json g =
      groups(R"({"query":[1,0],"group_by":"doc","group_size":2,"limit":2,"with_payload":["n"]})");
  ASSERT_EQ(g.size(), 2u) << g;
  EXPECT_EQ(g[0]["id"], "a");
  EXPECT_EQ(g[0]["hits"][0]["id"], 100);
  EXPECT_EQ(g[0]["hits"][1]["id"], 98);
  EXPECT_EQ(g[0]["hits"][0]["payload"], json::parse(R"({"n":100})"));
  EXPECT_EQ(g[1]["id"], "b");
  EXPECT_EQ(g[1]["hits"].size(), 2u);
  // Far down the ranking: the groups "c" (only id 50) and 7 (only id 20) are found by widening.
  const json all = groups(R"({"query":[1,0],"group_by":"doc","group_size":50,"limit":4})");
  ASSERT_EQ(all.size(), 4u) << all;
  std::map<std::string, size_t> sizes;
  for (const auto& x : all) sizes[x["id"].dump()] = x["hits"].size();
  EXPECT_EQ(sizes["\"a\""], 45u) << "the even ids of 10..100 (50 by its array), but 20 (group 7)";
  EXPECT_EQ(sizes["\"b\""], 45u);
  EXPECT_EQ(sizes["\"c\""], 1u);
  EXPECT_EQ(sizes["7"], 1u);
  EXPECT_EQ(call("POST", c + "/points/query/groups", R"({"query":[1,0]})").status, 400);
  EXPECT_EQ(call("POST", c + "/points/query/groups",
                 R"({"query":[1,0],"group_by":"doc","with_lookup":"other"})")
                .status,
            400);
}

// What a hostile pass found, each answered now: an unnamed vector beside a named one comes back by
// name; a batch shares one budget of searches and limits; a body past the limit is refused in
// Qdrant's shape on Qdrant's routes; a vector update naming no vector is a 422.
TEST_F(VectorsApiTest, HostilePassFindingsStayFixed) {
  start(false, "max_body_bytes: 65536\n");
  const std::string c = "/collections/mixed";
  ASSERT_EQ(call("PUT", c,
                 R"({"vectors":{"":{"size":2,"distance":"Dot"},"x":{"size":2,"distance":"Dot"}}})")
                .status,
            200);
  ASSERT_EQ(
      call("PUT", c + "/points?wait=true", R"({"points":[{"id":1,"vector":{"":[1,2],"x":[1,1]}}]})")
          .status,
      200);
  const auto q = call("POST", c + "/points/query", R"({"query":[1,2],"with_vector":true})");
  EXPECT_EQ(json::parse(q.body)["result"]["points"][0]["vector"],
            json::parse(R"({"":[1,2],"x":[1,1]})"))
      << q.body;
  // 20 searches of 63 prefetches each: over the batch's budget, refused before any runs.
  json searches = json::array();
  for (int i = 0; i < 20; ++i) {
    json pf = json::array();
    for (int k = 0; k < 63; ++k) pf.push_back({{"query", {1, 0}}, {"limit", 5}});
    searches.push_back({{"prefetch", pf}, {"query", {{"fusion", "rrf"}}}});
  }
  const auto big = call("POST", c + "/points/query/batch", json{{"searches", searches}}.dump());
  EXPECT_EQ(big.status, 400) << big.body.substr(0, 300);
  EXPECT_NE(qdrantErrorMessage(big.body).find("a batch holds at most"), std::string::npos);
  const auto huge = call("POST", c + "/points/query", std::string(100'000, ' '));
  EXPECT_EQ(huge.status, 413);
  EXPECT_NE(qdrantErrorMessage(huge.body).find("exceeds the limit"), std::string::npos)
      << huge.body;
  const auto empty =
      call("PUT", c + "/points/vectors?wait=true", R"({"points":[{"id":1,"vector":{}}]})");
  EXPECT_EQ(empty.status, 422) << empty.body;
}

}  // namespace
}  // namespace infera::vectors
