// The floor through the real composition root: with the registry, the vector index and the feature
// store on, the server's own answers (a handler that throws, a target that is not UTF-8, a
// cross-site POST) come in each service's error shape, and the process goes on serving.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "fakes/http_test_client.h"
#include "net/router.h"
#include "server/config.h"
#include "server/server.h"

namespace infera::server {
namespace {

using nlohmann::json;

struct Service {
  std::string name;
  std::string throw_path;  // a route the test adds under the service's prefix
  std::string utf8_path;   // a path of the service with %FF in it
  std::string post_path;   // a state-changing route of the service
  // Whether `body` is the service's error shape for `status`.
  std::function<bool(int status, const std::string& body)> shaped;
};

bool isJson(const std::string& body, json& out) {
  out = json::parse(body, nullptr, false);
  return !out.is_discarded();
}

std::vector<Service> services() {
  return {
      {"gateway (OpenAI)", "/v1/__throw", "/v1/chat/%FF", "/v1/chat/completions",
       [](int, const std::string& b) {
         json j;
         return isJson(b, j) && j.contains("error") && j["error"]["message"].is_string() &&
                j["error"]["code"].is_string();
       }},
      {"vector index (Qdrant)", "/collections/__throw", "/collections/%FF",
       "/collections/docs/points/delete",
       [](int, const std::string& b) {
         json j;
         return isJson(b, j) && j.contains("status") && j["status"].is_object() &&
                j["status"]["error"].is_string() && j.contains("time");
       }},
      {"registry (MLflow)", "/api/2.0/mlflow/__throw",
       "/api/2.0/mlflow/registered-models/get?name=%FF", "/api/2.0/mlflow/registered-models/create",
       [](int, const std::string& b) {
         json j;
         return isJson(b, j) && j["error_code"].is_string() && j["message"].is_string() &&
                !j.contains("error");
       }},
      {"feature store (Feast)", "/push/__throw", "/push?x=%FF", "/push",
       [](int status, const std::string& b) {
         // FeastError: a JSON string holding {"module","class","message"}; a 5xx: the message as
         // a JSON string.
         json j;
         if (!isJson(b, j) || !j.is_string()) return false;
         if (status >= 500) return true;
         json inner;
         return isJson(j.get<std::string>(), inner) && inner["class"].is_string() &&
                inner["message"].is_string();
       }},
  };
}

TEST(ServerFloorTest, EachServiceAnswersTheFloorInItsOwnShapeAndTheProcessGoesOn) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("infera-floor-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string yaml =
      "workers: 2\nlisten: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
      "log_level: error\nhealth_check: {enabled: false}\n"
      "vectors: {data_dir: " +
      (dir / "vectors").string() +
      "}\n"
      "registry: {data_dir: " +
      (dir / "registry").string() +
      "}\n"
      "features: {data_dir: " +
      (dir / "features").string() + ", repository: " + std::string(INFERA_TEST_SOURCE_DIR) +
      "/examples/features}\n"
      "models:\n  - name: m\n    deployments: [{endpoints: [{url: 'http://127.0.0.1:1'}]}]\n";
  auto cfg = loadConfigString(yaml);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  Options options;
  options.extra_data_routes = [](net::Router& r) {
    for (const auto& s : services()) {
      r.add("GET", s.throw_path,
            [](net::HttpRequest&, net::ResponseWriter&, net::PathParams) -> net::Task<void> {
              throw std::runtime_error("a bug in a handler");
              co_return;
            });
    }
  };
  auto server = Server::start(std::move(*cfg), {}, options);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const uint16_t port = (*server)->port();
  int thrown = 0;
  for (const auto& s : services()) {
    SCOPED_TRACE(s.name);
    const auto t = testing::httpRequest(port, "GET", s.throw_path);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->status, 500);
    EXPECT_TRUE(s.shaped(500, t->body)) << t->body;
    EXPECT_EQ(t->body.find("a bug in a handler"), std::string::npos) << "the text stays in the log";
    ++thrown;
    const auto u = testing::httpRequest(port, "GET", s.utf8_path);
    ASSERT_TRUE(u);
    EXPECT_EQ(u->status, 400);
    EXPECT_TRUE(s.shaped(400, u->body)) << u->body;
    const auto x = testing::httpRequest(port, "POST", s.post_path, "{}",
                                        {{"origin", "http://evil.example"},
                                         {"sec-fetch-site", "cross-site"},
                                         {"content-type", "text/plain"}});
    ASSERT_TRUE(x);
    EXPECT_EQ(x->status, 403);
    EXPECT_TRUE(s.shaped(403, x->body)) << x->body;
  }
  // Still serving, on both workers' connections.
  for (int i = 0; i < 4; ++i) {
    const auto ok = testing::httpRequest(port, "GET", "/collections");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
  }
  EXPECT_EQ((*server)->metricSum("infera_net_handler_exceptions_total"), thrown);
  EXPECT_EQ((*server)->metricSum("infera_net_invalid_utf8_rejections_total"), 4);
  EXPECT_EQ((*server)->metricSum("infera_net_cross_site_rejections_total"), 4);
  server->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace infera::server
