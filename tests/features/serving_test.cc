// The Feast feature-server API through a real `infera serve` on loopback (data and admin ports on
// port 0), against RocksDB files or a real redis-server: the same tests, one config line apart.
// Request bodies follow Feast's documented examples (docs/reference/feature-servers/
// python-feature-server.md), with event times near the injected clock's now.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/utf8.h"
#include "fakes/http_test_client.h"
#include "fakes/servers.h"
#include "features/internal/online_store.h"
#include "features/internal/registry.h"
#include "features/internal/values.h"
#include "server/config.h"
#include "server/server.h"

namespace infera::features {
namespace {

using nlohmann::json;
using testing::httpRequest;
using testing::TestResponse;

const std::string kRepo = std::string(INFERA_TEST_SOURCE_DIR) + "/tests/testdata/features/repo";

std::string tempDir() {
  char tmpl[] = "/tmp/infera-features-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  return d ? d : "/tmp";
}

class ServingTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = tempDir();
    if (GetParam() == "redis") {
      redis_ = testing::RedisServer::start();
      ASSERT_TRUE(redis_);
    }
    start();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string storeLine() const { return GetParam() == "redis" ? redis_->url() : "rocksdb"; }

  void start(const std::string& extra = "", const std::string& governance = "") {
    server_.reset();
    const std::string yaml =
        "workers: 2\nlisten: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n" +
        governance + "features:\n  store: " + storeLine() + "\n  data_dir: " + dir_ +
        "\n  repository: " + kRepo + "\n  retain_expired: 1d\n" + extra;
    auto cfg = server::loadConfigString(yaml);
    ASSERT_TRUE(cfg.ok()) << cfg.status().message() << "\n" << yaml;
    server::Options o;
    o.clock = &clock_;
    auto s = server::Server::start(std::move(*cfg), {}, o);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
  }

  TestResponse post(const std::string& path, const std::string& body,
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
    headers.push_back({"content-type", "application/json"});
    auto r = httpRequest(server_->port(), "POST", path, body, headers);
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  }
  TestResponse admin(const std::string& method, const std::string& path,
                     const std::string& body = {}) {
    auto r = httpRequest(server_->adminPort(), method, path, body,
                         {{"content-type", "application/json"}});
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  }
  json getFeatures(const std::string& body, int expect = 200) {
    const auto r = post("/get-online-features", body);
    EXPECT_EQ(r.status, expect) << r.body;
    json j = json::parse(r.body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.body;
    return j;
  }

  // An ISO time `ago_s` before the injected clock's now, as Feast clients send it.
  std::string isoAgo(int64_t ago_s) const {
    std::string s;
    appendTimestamp(s, (clock_.unixMillis() / 1000 - ago_s) * 1'000'000);
    s = s.substr(1, s.size() - 3);  // unquoted, without the Z
    s[10] = ' ';
    return s + "+00:00";
  }
  std::string pushDriverStats(int64_t driver, double conv, int64_t trips, int64_t ago_s) {
    return R"({"push_source_name":"driver_stats_push_source","df":{"driver_id":[)" +
           std::to_string(driver) + R"(],"event_timestamp":[")" + isoAgo(ago_s) +
           R"("],"created":[")" + isoAgo(ago_s) + R"("],"conv_rate":[)" + json(conv).dump() +
           R"(],"acc_rate":[1.0],"avg_daily_trips":[)" + std::to_string(trips) +
           R"(]},"to":"online_and_offline"})";
  }

  // Access control on; teams alpha and beta with a key each (alpha_key_, beta_key_); the test
  // repository applied with kOwned beside it, served by every loop when this returns.
  void startWithTeams() {
    start("", "governance:\n  store: sqlite://" + dir_ +
                  "/access.db\n  admin_token: tok\n  key_secret: "
                  "test-secret-0123456789abcdef0123456789\n  sync_interval_ms: 100\n  "
                  "usage_flush_ms: 100\n");
    for (const char* team : {"alpha", "beta"}) {
      ASSERT_EQ(adminAs("/admin/teams", json({{"name", team}}).dump()).status, 201);
      const auto k = adminAs("/admin/keys", json({{"team", team}}).dump());
      ASSERT_EQ(k.status, 201) << k.body;
      (std::string(team) == "alpha" ? alpha_key_ : beta_key_) =
          json::parse(k.body)["key"].get<std::string>();
    }
    auto files = readRepositoryDir(kRepo);
    ASSERT_TRUE(files.ok());
    json body = {{"files", *files}};
    body["files"]["owned.yaml"] = kOwned;
    const auto r = adminAs("/admin/features/apply", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_TRUE(testing::waitFor([&] {
      return postAs(alpha_key_, "/get-online-features",
                    R"({"feature_service":"alpha_service","entities":{"driver_id":[1]}})")
                 .status == 200;
    }));
  }
  TestResponse adminAs(const std::string& path, const std::string& body) {
    auto r = httpRequest(server_->adminPort(), "POST", path, body,
                         {{"content-type", "application/json"}, {"authorization", "Bearer tok"}});
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  }
  TestResponse postAs(const std::string& key, const std::string& path, const std::string& body) {
    return post(path, body, {{"authorization", "Bearer " + key}});
  }
  std::string pushAlphaScore(int64_t driver, int64_t score, int64_t ago_s) {
    return R"({"push_source_name":"alpha_push","df":{"driver_id":[)" + std::to_string(driver) +
           R"(],"event_timestamp":[")" + isoAgo(ago_s) + R"("],"score":[)" + std::to_string(score) +
           "]}}";
  }
  // The {"module","class","message"} inside a FeastError body (a JSON string holding JSON).
  static json feastDetail(const TestResponse& r) {
    const json outer = json::parse(r.body, nullptr, false);
    if (!outer.is_string()) return json();
    return json::parse(outer.get<std::string>(), nullptr, false);
  }

  // Views and services owned by teams, beside the test repository's shared ones: alpha_mirror is
  // fed by the shared driver_stats_push_source; mixed_service is shared but reads alpha's view.
  static constexpr const char* kOwned = R"(push_sources:
  - name: alpha_push
feature_views:
  - name: alpha_scores
    owner: alpha
    entities: [driver]
    source: alpha_push
    schema:
      - {name: score, dtype: int64}
  - name: alpha_mirror
    owner: alpha
    entities: [driver]
    source: driver_stats_push_source
    schema:
      - {name: conv_rate, dtype: Float32}
feature_services:
  - {name: alpha_service, owner: alpha, features: [alpha_scores]}
  - {name: beta_rates, owner: beta, features: ["driver_hourly_stats:conv_rate"]}
  - {name: mixed_service, features: [alpha_scores, "driver_profile:city"]}
)";

  FakeClock clock_{FakeClock::AtSystemTime{}};
  std::string alpha_key_, beta_key_;
  std::string dir_;
  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<server::Server> server_;
};

const char* kGetDocsExample =
    R"({"features":["driver_hourly_stats:conv_rate","driver_hourly_stats:acc_rate","driver_hourly_stats:avg_daily_trips"],
        "entities":{"driver_id":[1001,1002,1003]}})";

TEST_P(ServingTest, PushedFeaturesComeBackColumnMajorInFeastsShape) {
  auto r = post("/push", pushDriverStats(1001, 0.5, 1000, 60));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "");  // Feast answers a push with an empty 200
  ASSERT_EQ(post("/push", pushDriverStats(1002, 0.25, 7, 30)).status, 200);
  const json j = getFeatures(kGetDocsExample);
  EXPECT_EQ(j["metadata"]["feature_names"],
            json::parse(R"(["driver_id","conv_rate","acc_rate","avg_daily_trips"])"));
  ASSERT_EQ(j["results"].size(), 4u);
  EXPECT_EQ(j["results"][0]["values"], json::parse("[1001,1002,1003]"));
  EXPECT_EQ(j["results"][0]["statuses"], json::parse(R"(["PRESENT","PRESENT","PRESENT"])"));
  EXPECT_EQ(j["results"][0]["event_timestamps"][0], "1970-01-01T00:00:00Z");
  EXPECT_EQ(j["results"][1]["values"], json::parse("[0.5,0.25,null]"));
  EXPECT_EQ(j["results"][1]["statuses"], json::parse(R"(["PRESENT","PRESENT","NOT_FOUND"])"));
  EXPECT_EQ(j["results"][3]["values"], json::parse("[1000,7,null]"));
  const std::string ts = j["results"][1]["event_timestamps"][0];
  EXPECT_EQ(ts, isoAgo(60).substr(0, 10) + "T" + isoAgo(60).substr(11, 8) + "Z");
  EXPECT_EQ(j["results"][1]["event_timestamps"][2], "1970-01-01T00:00:00Z");
  // Floats print as floats, never as integers (the acc_rate of 1.0).
  const auto raw = post("/get-online-features", kGetDocsExample).body;
  EXPECT_NE(raw.find("\"values\":[1.0,1.0,null]"), std::string::npos) << raw;
}

// The registry says when each view was last written and its newest event time (since the start;
// null before any write); an older event pushed later does not move the newest one back.
TEST_P(ServingTest, ViewFreshnessIsReportedInTheRegistry) {
  auto viewOf = [&](const std::string& name) {
    const auto r = admin("GET", "/admin/features/registry");
    EXPECT_EQ(r.status, 200) << r.body;
    const json reg = json::parse(r.body);
    for (const auto& v : reg["views"]) {
      if (v["name"] == name) return v;
    }
    ADD_FAILURE() << "no view " << name;
    return json();
  };
  json v = viewOf("driver_hourly_stats");
  EXPECT_TRUE(v["last_write_ms"].is_null()) << v.dump();
  EXPECT_TRUE(v["newest_event_ms"].is_null());
  const int64_t now_s = clock_.unixMillis() / 1000;
  ASSERT_EQ(post("/push", pushDriverStats(1001, 0.5, 1000, 30)).status, 200);
  clock_.advance(std::chrono::seconds(5));
  ASSERT_EQ(post("/push", pushDriverStats(1002, 0.25, 7, 600)).status, 200);
  v = viewOf("driver_hourly_stats");
  EXPECT_EQ(v["last_write_ms"], clock_.unixMillis()) << v.dump();
  EXPECT_EQ(v["newest_event_ms"], (now_s - 30) * 1000) << "the newest of the two events";
}

TEST_P(ServingTest, FeatureServicesAndFullFeatureNames) {
  ASSERT_EQ(post("/push", pushDriverStats(7, 0.125, 3, 10)).status, 200);
  json j = getFeatures(
      R"({"feature_service":"driver_rates","entities":{"driver_id":[7]},"full_feature_names":true})");
  EXPECT_EQ(j["metadata"]["feature_names"],
            json::parse(R"(["driver_id","dhs__conv_rate","dhs__acc_rate"])"));
  EXPECT_EQ(j["results"][1]["values"][0], 0.125);
  // The service wins over a features list; without full names the bare feature names.
  j = getFeatures(
      R"({"feature_service":"driver_activity","features":["x:y"],"entities":{"driver_id":[7]}})");
  EXPECT_EQ(j["metadata"]["feature_names"],
            json::parse(R"(["driver_id","conv_rate","acc_rate","avg_daily_trips","trips_10m"])"));
  EXPECT_EQ(j["results"][4]["statuses"][0], "NOT_FOUND");  // no trip events yet
}

TEST_P(ServingTest, StatusesFollowTtlAndNulls) {
  // driver_hourly_stats has ttl 1d; retain_expired is 1d.
  ASSERT_EQ(post("/push", pushDriverStats(1, 0.5, 1, 3600)).status, 200);
  ASSERT_EQ(post("/push", pushDriverStats(2, 0.5, 1, 86400 + 3600)).status, 200);  // stale already
  ASSERT_EQ(post("/push", pushDriverStats(3, 0.5, 1, 3 * 86400)).status,
            200);  // past retain: not written
  const std::string nulls =
      R"({"push_source_name":"driver_stats_push_source","df":{"driver_id":[4],"event_timestamp":[")" +
      isoAgo(5) + R"("],"conv_rate":[null],"acc_rate":[0.5],"avg_daily_trips":[null]}})";
  ASSERT_EQ(post("/push", nulls).status, 200);
  const std::string q =
      R"({"features":["driver_hourly_stats:conv_rate"],"entities":{"driver_id":[1,2,3,4]}})";
  json j = getFeatures(q);
  EXPECT_EQ(j["results"][1]["statuses"],
            json::parse(R"(["PRESENT","OUTSIDE_MAX_AGE","NOT_FOUND","NULL_VALUE"])"));
  EXPECT_EQ(j["results"][1]["values"],
            json::parse("[0.5,0.5,null,null]"));  // a stale value is kept
  EXPECT_EQ(server_->metricSum("infera_features_written_total{kind=\"expired\"}"), 1);
  clock_.advance(std::chrono::hours(24));
  j = getFeatures(q);
  EXPECT_EQ(j["results"][1]["statuses"],
            json::parse(R"(["OUTSIDE_MAX_AGE","NOT_FOUND","NOT_FOUND","NULL_VALUE"])"));
}

TEST_P(ServingTest, AnOlderEventNeverOverwritesANewerOne) {
  ASSERT_EQ(post("/push", pushDriverStats(5, 0.75, 10, 60)).status, 200);
  ASSERT_EQ(post("/push", pushDriverStats(5, 0.125, 20, 600)).status,
            200);  // arrives late, happened earlier
  json j = getFeatures(
      R"({"features":["driver_hourly_stats:avg_daily_trips"],"entities":{"driver_id":[5]}})");
  EXPECT_EQ(j["results"][1]["values"][0], 10);
  ASSERT_EQ(post("/push", pushDriverStats(5, 0.125, 30, 1)).status, 200);
  j = getFeatures(
      R"({"features":["driver_hourly_stats:avg_daily_trips"],"entities":{"driver_id":[5]}})");
  EXPECT_EQ(j["results"][1]["values"][0], 30);
}

TEST_P(ServingTest, WriteToOnlineStoreTakesTheRemoteClientsColumns) {
  // What Feast's remote online store sends: join keys, every feature, a naive event_timestamp,
  // created (may be null).
  const std::string body =
      R"({"feature_view_name":"driver_profile","allow_registry_cache":false,"df":{
      "driver_id":[1001,1002],"city":["Lyon","Nantes"],"rating":[4,4.5],"tags":[["a","b"],[]],"active":[true,false],
      "event_timestamp":[")" +
      isoAgo(2).substr(0, 19) + R"(",")" + isoAgo(1).substr(0, 19) +
      R"("],"created":[null,null]}})";
  const auto r = post("/write-to-online-store", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "null");
  const json j = getFeatures(
      R"({"features":["driver_profile:city","driver_profile:rating","driver_profile:tags","driver_profile:active"],
          "entities":{"driver_id":["1002",1001]}})");  // a numeric string is an int64 key, as Feast
                                                       // converts it
  EXPECT_EQ(j["results"][0]["values"], json::parse("[1002,1001]"));
  EXPECT_EQ(j["results"][1]["values"], json::parse(R"(["Nantes","Lyon"])"));
  EXPECT_EQ(j["results"][2]["values"], json::parse("[4.5,4.0]"));
  EXPECT_EQ(j["results"][3]["values"], json::parse(R"([[],["a","b"]])"));
  EXPECT_EQ(j["results"][4]["values"], json::parse("[false,true]"));
}

TEST_P(ServingTest, ErrorsUseFeastsShapesAndStatuses) {
  auto r = post("/get-online-features",
                R"({"features":["nope:conv_rate"],"entities":{"driver_id":[1]}})");
  EXPECT_EQ(r.status, 404);
  json detail = json::parse(json::parse(r.body).get<std::string>());  // a JSON string holding JSON
  EXPECT_EQ(detail["module"], "feast.errors");
  EXPECT_EQ(detail["class"], "FeatureViewNotFoundException");
  EXPECT_EQ(detail["message"], "Feature view nope does not exist in project rides");
  r = post("/get-online-features",
           R"({"features":["driver_hourly_stats:nope"],"entities":{"driver_id":[1]}})");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("Feature nope not found in projection driver_hourly_stats"),
            std::string::npos)
      << r.body;
  r = post("/get-online-features", R"({"feature_service":"nope","entities":{"driver_id":[1]}})");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("FeatureServiceNotFoundException"), std::string::npos);
  r = post("/get-online-features",
           R"({"features":["driver_hourly_stats:conv_rate"],"entities":{"driver_id":["abc"]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("entity key driver_id, row 0: expected an integer"), std::string::npos)
      << r.body;
  r = post("/get-online-features", R"({"features":["driver_hourly_stats:conv_rate"]})");
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(json::parse(r.body)["detail"][0]["loc"], json::parse(R"(["body","entities"])"));
  r = post("/get-online-features",
           R"({"features":["driver_hourly_stats:conv_rate"],"entities":{"rider_id":["x"]}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("Missing join key values for keys: [driver_id]"), std::string::npos)
      << r.body;
  r = post(
      "/get-online-features",
      R"({"features":["driver_hourly_stats:rating","driver_profile:rating"],"entities":{"driver_id":[1]}})");
  EXPECT_EQ(r.status, 404);  // driver_hourly_stats has no rating
  r = post(
      "/get-online-features",
      R"({"features":["rider_profile:rating","driver_profile:rating"],"entities":{"driver_id":[1],"rider_id":["a"]}})");
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.body.find("FeatureNameCollisionError"), std::string::npos) << r.body;
  r = post("/push", R"({"push_source_name":"nope","df":{"driver_id":[1]}})");
  EXPECT_EQ(r.status, 422);
  EXPECT_NE(r.body.find("Unable to find push source 'nope'."), std::string::npos);
  r = post("/write-to-online-store", R"({"feature_view_name":"nope","df":{}})");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("Can't recognize feast object with a name nope"), std::string::npos);
}

TEST_P(ServingTest, ABadBatchNamesRowAndColumnAndWritesNothing) {
  const std::string body =
      R"({"push_source_name":"driver_stats_push_source","df":{"driver_id":[11,12,13],
      "event_timestamp":[")" +
      isoAgo(5) + "\",\"" + isoAgo(5) + "\",\"" + isoAgo(5) +
      R"("],"conv_rate":[0.5,"high",0.5],"acc_rate":[1,1,1],"avg_daily_trips":[1,2,3]}})";
  auto r = post("/push", body);
  ASSERT_EQ(r.status, 400);
  EXPECT_NE(r.body.find(
                "row 1, column conv_rate: expected a number, got the string \\\\\\\"high\\\\\\\""),
            std::string::npos)
      << r.body;
  json j = getFeatures(
      R"({"features":["driver_hourly_stats:avg_daily_trips"],"entities":{"driver_id":[11,12,13]}})");
  EXPECT_EQ(j["results"][1]["statuses"], json::parse(R"(["NOT_FOUND","NOT_FOUND","NOT_FOUND"])"));
  // A missing feature column refuses the batch too.
  r = post(
      "/push",
      R"({"push_source_name":"driver_stats_push_source","df":{"driver_id":[11],"event_timestamp":[")" +
          isoAgo(5) + R"("],"conv_rate":[0.5]}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("column acc_rate (feature of feature view driver_hourly_stats) is missing"),
            std::string::npos)
      << r.body;
}

TEST_P(ServingTest, WindowedAggregatesMoveWithEventsAndTime) {
  auto trip = [&](int64_t driver, double fare, const std::string& rider, const std::string& city,
                  int64_t ago_s) {
    return post("/push", R"({"push_source_name":"trips_push","df":{"driver_id":[)" +
                             std::to_string(driver) + R"(],"event_timestamp":[")" + isoAgo(ago_s) +
                             R"("],"fare":[)" + json(fare).dump() + R"(],"rider_id":[")" + rider +
                             R"("],"city":[")" + city + R"("]}})");
  };
  ASSERT_EQ(trip(9, 10, "r1", "Lyon", 120).status, 200);
  ASSERT_EQ(trip(9, 20, "r2", "Paris", 60).status, 200);
  ASSERT_EQ(trip(9, 30, "r1", "Nice", 30 * 60).status,
            200);  // 30 min ago: not in the 10-minute count
  const std::string q =
      R"({"features":["driver_trip_windows:trips_10m","driver_trip_windows:fare_sum_1h","driver_trip_windows:fare_avg_1h",
          "driver_trip_windows:fare_max_1h","driver_trip_windows:riders_1d","driver_trip_windows:last_city"],
          "entities":{"driver_id":[9]}})";
  json j = getFeatures(q);
  EXPECT_EQ(j["results"][1]["values"][0], 2);
  EXPECT_EQ(j["results"][2]["values"][0], 60.0);
  EXPECT_EQ(j["results"][3]["values"][0], 20.0);
  EXPECT_EQ(j["results"][4]["values"][0], 30.0);
  EXPECT_EQ(j["results"][5]["values"][0], 2);
  EXPECT_EQ(j["results"][6]["values"][0], "Paris");
  EXPECT_EQ(j["results"][1]["statuses"][0], "PRESENT");
  ASSERT_EQ(trip(9, 40, "r3", "Lyon", 0).status, 200);
  j = getFeatures(q);
  EXPECT_EQ(j["results"][1]["values"][0], 3);
  EXPECT_EQ(j["results"][2]["values"][0], 100.0);
  EXPECT_EQ(j["results"][5]["values"][0], 3);
  EXPECT_EQ(j["results"][6]["values"][0], "Lyon");
  clock_.advance(std::chrono::minutes(12));  // the 10-minute window empties
  j = getFeatures(q);
  EXPECT_EQ(j["results"][1]["values"][0], 0);
  EXPECT_EQ(j["results"][2]["values"][0], 100.0);
  clock_.advance(std::chrono::minutes(20));  // the first trip, now 62 minutes old, left the hour
  j = getFeatures(q);
  EXPECT_EQ(j["results"][2]["values"][0], 70.0);
  EXPECT_EQ(j["results"][4]["values"][0], 40.0);
  clock_.advance(std::chrono::hours(2));
  j = getFeatures(q);
  EXPECT_EQ(j["results"][3]["values"][0], nullptr);  // no trips in the last hour: no average
  EXPECT_EQ(j["results"][3]["statuses"][0], "NULL_VALUE");
  EXPECT_EQ(j["results"][5]["values"][0], 3);
}

TEST_P(ServingTest, PlanApplyAddsAndRemovesViewsLive) {
  auto files = readRepositoryDir(kRepo);
  ASSERT_TRUE(files.ok());
  json body = {{"files", *files}};
  body["files"]["extra.yaml"] =
      "feature_views:\n  - name: driver_extra\n    entities: [driver]\n    schema:\n      - {name: "
      "score, dtype: int32}\n";
  auto r = admin("POST", "/admin/features/plan", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["changes"],
            json::parse(R"j(["+ feature view driver_extra (1 feature)"])j"));
  EXPECT_EQ(post("/get-online-features",
                 R"({"features":["driver_extra:score"],"entities":{"driver_id":[1]}})")
                .status,
            404);
  r = admin("POST", "/admin/features/apply", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string w =
      R"({"feature_view_name":"driver_extra","df":{"driver_id":[1],"score":[42],"event_timestamp":[")" +
      isoAgo(1) + R"("]}})";
  ASSERT_TRUE(testing::waitFor([&] { return post("/write-to-online-store", w).status == 200; }));
  json j = getFeatures(R"({"features":["driver_extra:score"],"entities":{"driver_id":[1]}})");
  EXPECT_EQ(j["results"][1]["values"][0], 42);
  // A change that breaks a served feature is refused, naming it.
  json breaking = {{"files", *files}};
  std::string views = breaking["files"]["views.yaml"];
  views.replace(views.find("{name: conv_rate, dtype: Float32}"), 33,
                "{name: conv_rate, dtype: String}");
  breaking["files"]["views.yaml"] = views;
  r = admin("POST", "/admin/features/apply", breaking.dump());
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(r.body.find("feature conv_rate changes type"), std::string::npos) << r.body;
  // Removing the view frees it; a restart keeps the applied registry.
  r = admin("POST", "/admin/features/apply", json({{"files", *files}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("- feature view driver_extra"), std::string::npos);
  ASSERT_TRUE(testing::waitFor([&] {
    return post("/get-online-features",
                R"({"features":["driver_extra:score"],"entities":{"driver_id":[1]}})")
               .status == 404;
  }));
  r = admin("GET", "/admin/features/registry");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["views"].size(), 4u);
}

TEST_P(ServingTest, AccessControlAuthenticatesAndLimitsRequests) {
  start("",
        "governance:\n  store: sqlite://" + dir_ +
            "/access.db\n  admin_token: tok\n  key_secret: test-secret-0123456789abcdef0123456789\n"
            "  sync_interval_ms: 100\n  usage_flush_ms: 100\n");
  auto adm = [&](const std::string& path, const std::string& body) {
    auto r = httpRequest(server_->adminPort(), "POST", path, body,
                         {{"content-type", "application/json"}, {"authorization", "Bearer tok"}});
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  };
  ASSERT_EQ(adm("/admin/teams", R"({"name":"ml","rpm":3})").status, 201);
  const auto kr = adm("/admin/keys", R"({"team":"ml"})");
  ASSERT_EQ(kr.status, 201) << kr.body;
  const std::string key = json::parse(kr.body)["key"];
  const std::string q = R"({"feature_service":"driver_rates","entities":{"driver_id":[1]}})";
  auto r = post("/get-online-features", q);
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("FeastPermissionError"), std::string::npos) << r.body;
  int ok = 0, limited = 0;
  for (int i = 0; i < 5; ++i) {
    r = post("/get-online-features", q, {{"authorization", "Bearer " + key}});
    ok += r.status == 200;
    limited += r.status == 429;
  }
  EXPECT_EQ(ok, 3);
  EXPECT_EQ(limited, 2);
}

// Issue 37: a team reads only its own views and services and the shared ones; another team's
// answer exactly as a name that does not exist (the name tells nothing).
TEST_P(ServingTest, AnotherTeamsViewsAndServicesAreUnknownToIt) {
  startWithTeams();
  ASSERT_EQ(postAs(alpha_key_, "/push", pushAlphaScore(7, 1, 60)).status, 200);
  auto read = [&](const std::string& key, const std::string& what) {
    return postAs(key, "/get-online-features", "{" + what + R"(,"entities":{"driver_id":[7]}})");
  };
  auto r = read(alpha_key_, R"("feature_service":"alpha_service")");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["results"][1]["values"][0], 1);
  EXPECT_EQ(read(alpha_key_, R"("features":["alpha_scores:score"])").status, 200);

  const json no_service = feastDetail(read(beta_key_, R"("feature_service":"no_such")"));
  r = read(beta_key_, R"("feature_service":"alpha_service")");
  EXPECT_EQ(r.status, 404) << r.body;
  json d = feastDetail(r);
  EXPECT_EQ(d["class"], no_service["class"]);
  EXPECT_EQ(d["message"], "Feature service alpha_service does not exist in project rides");
  for (const char* ref : {"alpha_scores:score", "alpha_scores:no_such_feature"}) {
    r = read(beta_key_, std::string(R"("features":[")") + ref + "\"]");
    EXPECT_EQ(r.status, 404) << r.body;
    d = feastDetail(r);
    EXPECT_EQ(d["class"], "FeatureViewNotFoundException") << ref;
    EXPECT_EQ(d["message"], "Feature view alpha_scores does not exist in project rides");
  }
  // A shared service that reads alpha's view is alpha's to use only.
  EXPECT_EQ(read(beta_key_, R"("feature_service":"mixed_service")").status, 404);
  EXPECT_EQ(read(alpha_key_, R"("feature_service":"mixed_service")").status, 200);
  // Beta's own service, over a shared view: beta's, not alpha's.
  EXPECT_EQ(read(beta_key_, R"("feature_service":"beta_rates")").status, 200);
  EXPECT_EQ(read(alpha_key_, R"("feature_service":"beta_rates")").status, 404);
  // Shared views stay every team's, as before.
  ASSERT_EQ(postAs(beta_key_, "/push", pushDriverStats(7, 0.5, 1, 30)).status, 200);
  r = read(alpha_key_, R"("features":["driver_hourly_stats:conv_rate"])");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["results"][1]["values"][0], 0.5);
  // The admin port sees every owner.
  const auto reg = httpRequest(server_->adminPort(), "GET", "/admin/features/registry", "",
                               {{"authorization", "Bearer tok"}});
  ASSERT_TRUE(reg && reg->status == 200);
  // Named: a range-for over a member of a temporary reads freed memory (found by make asan).
  const json registry = json::parse(reg->body);
  for (const auto& v : registry.at("views")) {
    if (v["name"] == "alpha_scores") {
      EXPECT_EQ(v["owner"], "alpha");
    } else if (v["name"] == "driver_profile") {
      EXPECT_EQ(v["owner"], "");
    }
  }
}

TEST_P(ServingTest, AnotherTeamsPushOrWriteIsRefusedAndWritesNothing) {
  startWithTeams();
  ASSERT_EQ(postAs(alpha_key_, "/push", pushAlphaScore(7, 1, 60)).status, 200);
  auto r = postAs(beta_key_, "/push", pushAlphaScore(7, 99, 1));
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_EQ(feastDetail(r)["class"], "PushSourceNotFoundException");
  r = postAs(
      beta_key_, "/write-to-online-store",
      R"({"feature_view_name":"alpha_scores","df":{"driver_id":[7],"score":[99],"event_timestamp":[")" +
          isoAgo(1) + R"("]}})");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(r.body.find("Can't recognize feast object with a name alpha_scores"),
            std::string::npos);
  const std::string q = R"({"features":["alpha_scores:score"],"entities":{"driver_id":[7]}})";
  r = postAs(alpha_key_, "/get-online-features", q);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["results"][1]["values"][0], 1) << "alpha's value is unchanged";

  // A shared source that feeds a shared view and alpha's: beta's push reaches the shared one only.
  ASSERT_EQ(postAs(beta_key_, "/push", pushDriverStats(8, 0.5, 1, 30)).status, 200);
  const std::string mirror =
      R"({"features":["alpha_mirror:conv_rate"],"entities":{"driver_id":[8,9]}})";
  r = postAs(alpha_key_, "/get-online-features", mirror);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["results"][1]["statuses"][0], "NOT_FOUND");
  r = postAs(beta_key_, "/get-online-features",
             R"({"features":["driver_hourly_stats:conv_rate"],"entities":{"driver_id":[8]}})");
  EXPECT_EQ(json::parse(r.body)["results"][1]["values"][0], 0.5) << r.body;
  ASSERT_EQ(postAs(alpha_key_, "/push", pushDriverStats(9, 0.25, 1, 30)).status, 200);
  r = postAs(alpha_key_, "/get-online-features", mirror);
  EXPECT_EQ(json::parse(r.body)["results"][1]["values"][1], 0.25) << r.body;
}

// Issue 37: every body goes through the floor's rules (core/json.h): too deep, a key given twice
// or ill-formed UTF-8 is a 400 in Feast's shape, and the server goes on serving.
TEST_P(ServingTest, RequestBodiesAreReadUnderTheJsonFloorsRules) {
  startWithTeams();
  const std::string deep(100000, '[');
  for (const char* path : {"/get-online-features", "/push", "/write-to-online-store"}) {
    const auto r = postAs(alpha_key_, path, deep);
    EXPECT_EQ(r.status, 400) << path << " " << r.body;
    EXPECT_NE(feastDetail(r)["message"].get<std::string>().find("deeper than 128 levels"),
              std::string::npos)
        << r.body;
  }
  auto r = postAs(
      alpha_key_, "/get-online-features",
      R"({"features":["driver_hourly_stats:conv_rate"],"features":["alpha_scores:score"],"entities":{"driver_id":[1]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("given twice"), std::string::npos) << r.body;
  r = postAs(
      alpha_key_, "/push",
      R"({"push_source_name":"alpha_push","df":{"driver_id":[1],"driver_id":[2],"event_timestamp":[")" +
          isoAgo(1) + R"("],"score":[5]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  r = postAs(alpha_key_, "/push",
             "{\"push_source_name\":\"alpha_push\xff\",\"df\":{\"driver_id\":[1],\"score\":[5]}}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(validUtf8(r.body));
  r = postAs(
      alpha_key_, "/write-to-online-store",
      "{\"feature_view_name\":\"alpha_scores\",\"df\":{\"driver_id\":[1],\"score\":[\"\xc3\"]}}");
  EXPECT_EQ(r.status, 400) << r.body;
  // The admin port's bodies too.
  r = adminAs("/admin/features/plan", R"({"files":{},"files":{}})");
  EXPECT_EQ(r.status, 400) << r.body;
  // Still serving, and nothing was written.
  r = postAs(alpha_key_, "/get-online-features",
             R"({"features":["alpha_scores:score"],"entities":{"driver_id":[1,2]}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["results"][1]["statuses"],
            json::parse(R"(["NOT_FOUND","NOT_FOUND"])"));
}

// The floor's own answers (here: a query that is not UTF-8, refused at the door before any
// handler) come in the feature server's error shape, not the gateway's.
TEST_P(ServingTest, TheFloorsAnswersUseFeastsErrorShape) {
  startWithTeams();
  const auto r = postAs(alpha_key_, "/push?x=%FF", pushAlphaScore(1, 1, 1));
  EXPECT_EQ(r.status, 400) << r.body;
  const json d = feastDetail(r);
  EXPECT_EQ(d["module"], "feast.errors") << r.body;
  EXPECT_EQ(d["class"], "FeastError") << r.body;
}

// Issue 37: a string stored before the door checked UTF-8 (written into the store directly here)
// is served with U+FFFD, in a document that parses, and the server goes on.
TEST_P(ServingTest, StoredIllFormedStringsAreServedWithReplacementCharacters) {
  server_.reset();  // the store is the server's while it runs
  std::unique_ptr<OnlineStore> store;
  if (GetParam() == "redis") {
    RedisStoreOptions o;
    o.url = redis_->url();
    auto s = openRedisStore(o, clock_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    store = std::move(*s);
  } else {
    RocksDbOptions o;
    o.path = dir_ + "/rocksdb";
    auto s = openRocksDbStore(o, clock_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    store = std::move(*s);
  }
  auto blob = store->loadMeta();
  ASSERT_TRUE(blob.ok() && !blob->empty());
  auto saved = parseSerializedRegistry(*blob);
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  const StorageIds::View& view = saved->second.views.at("driver_profile");
  std::string row, key;
  putEventTime(row, (clock_.unixMillis() - 1000) * 1000);
  putVarint(row, view.features.at("city").first);
  row += static_cast<char>(Scalar::kString);
  const std::string city = "Ly\xff\xc3on";
  putVarint(row, city.size());
  row += city;
  putVarint(key, zigzag(1001));
  std::vector<RowWrite> rows(1);
  rows[0] = RowWrite{view.id, key, row, 0};
  ASSERT_TRUE(store->write(std::move(rows)).isOk());
  store.reset();
  start();
  for (int i = 0; i < 2; ++i) {
    const auto r = post("/get-online-features",
                        R"({"features":["driver_profile:city"],"entities":{"driver_id":[1001]}})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(validUtf8(r.body));
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.body;
    EXPECT_EQ(j["results"][1]["values"][0], "Ly\xEF\xBF\xBD\xEF\xBF\xBDon");
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, ServingTest, ::testing::Values("rocksdb", "redis"),
                         [](const auto& param_info) { return param_info.param; });

TEST(FeaturesConfigTest, ReadsTheSectionAndRejectsUnknownKeys) {
  auto ok = server::loadConfigString(
      "features:\n  store: redis://127.0.0.1:6390/2\n  retain_expired: 2h\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_TRUE(ok->features.enabled);
  EXPECT_EQ(ok->features.retain_expired_s, 7200);
  auto bad = server::loadConfigString("features:\n  store: mysql://x\n  colour: red\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find(
          "features.store (line 2): must be rocksdb, a redis:// URL or a redis-cluster:// URL"),
      std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("features.colour (line 3): unknown key"),
            std::string::npos);
  EXPECT_FALSE(server::loadConfigString("listen: {port: 0}\n")->features.enabled);
}

}  // namespace
}  // namespace infera::features
