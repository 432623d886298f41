#pragma once
// Shared by the registry tests: `infera serve` (server::Server) with the registry on, its store on
// a real SQLite file or a real PostgreSQL (one server per test binary, a fresh database per test),
// in-process emulators as backends, and HTTP helpers shaped like MLflow's Python RestStore
// (query-string GETs, JSON bodies on POST/PATCH/DELETE, Content-Type application/json).

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "emulator/emulator.h"
#include "fakes/http_test_client.h"
#include "fakes/scratch_dir.h"
#include "fakes/servers.h"
#include "server/config.h"
#include "server/server.h"

namespace infera::registry::regtest {

using nlohmann::json;
using testing::httpRequest;
using testing::TestResponse;

// A fresh directory, removed when the test process exits. Artifact tests write up to a GiB here.
inline std::string tempDir() { return testing::scratchDir("infera-reg"); }

// One PostgreSQL for the whole test binary (started on first use).
inline testing::PostgresServer* postgres() {
  static std::unique_ptr<testing::PostgresServer> pg = testing::PostgresServer::start();
  return pg.get();
}

// "sqlite" -> a fresh file; "postgres" -> a fresh database on the shared server.
inline std::string storeUrl(const std::string& kind, const std::string& dir) {
  if (kind == "sqlite") return "sqlite:" + dir + "/registry.db";
  static std::atomic<int> n{0};
  const std::string db = "reg" + std::to_string(::getpid()) + "_" + std::to_string(n++);
  testing::PostgresServer* pg = postgres();
  EXPECT_NE(pg, nullptr) << "PostgreSQL did not start";
  if (!pg) return "sqlite:" + dir + "/fallback.db";
  EXPECT_TRUE(pg->createDatabase(db));
  return pg->url(db);
}

inline std::unique_ptr<emulator::Emulator> startEmulator(const std::vector<std::string>& models,
                                                         const emulator::FaultConfig& faults = {}) {
  emulator::EmulatorConfig cfg;
  cfg.port = 0;
  cfg.workers = 1;
  cfg.models = models;
  cfg.faults = faults;
  auto emu = emulator::Emulator::start(cfg);
  EXPECT_TRUE(emu.ok()) << emu.status().message();
  return emu.ok() ? std::move(*emu) : nullptr;
}

struct Reply {
  int status = 0;
  json body;
  std::string text;
  std::string header(const std::string& n) const { return resp.header(n); }
  TestResponse resp;
};

inline Reply toReply(const std::optional<TestResponse>& r) {
  Reply out;
  EXPECT_TRUE(r.has_value());
  if (!r) return out;
  out.resp = *r;
  out.status = r->status;
  out.text = r->body;
  out.body = json::parse(r->body.empty() ? "{}" : r->body, nullptr, false);
  return out;
}

// A client like MLflow's RestStore: `port` is the data port (MLFLOW_TRACKING_URI) or the admin
// port.
class Mlflow {
 public:
  explicit Mlflow(uint16_t port, std::string token = {}) : port_(port), token_(std::move(token)) {}
  Reply get(const std::string& endpoint, const std::string& query = {}) const {
    return toReply(httpRequest(port_, "GET",
                               "/api/2.0/mlflow/" + endpoint + (query.empty() ? "" : "?" + query),
                               "", headers(false)));
  }
  Reply send(const std::string& method, const std::string& endpoint, const json& body) const {
    return toReply(
        httpRequest(port_, method, "/api/2.0/mlflow/" + endpoint, body.dump(), headers(true)));
  }
  Reply post(const std::string& endpoint, const json& body) const {
    return send("POST", endpoint, body);
  }
  std::vector<std::pair<std::string, std::string>> headers(bool body) const {
    std::vector<std::pair<std::string, std::string>> h = {
        {"user-agent", "mlflow-python-client/2.9.2"}};
    if (body) h.push_back({"content-type", "application/json"});
    if (!token_.empty()) h.push_back({"authorization", "Bearer " + token_});
    return h;
  }

 private:
  uint16_t port_;
  std::string token_;
};

inline Reply admin(const server::Server& s, const std::string& method, const std::string& target,
                   const json& body = nullptr, const std::string& token = {}) {
  std::vector<std::pair<std::string, std::string>> h = {{"content-type", "application/json"},
                                                        {"x-infera-actor", "test-operator"}};
  if (!token.empty()) h.push_back({"authorization", "Bearer " + token});
  return toReply(httpRequest(s.adminPort(), method, target, body.is_null() ? "" : body.dump(), h));
}

inline std::string chat(const std::string& model, int max_tokens = 4,
                        const std::string& extra = "") {
  return R"({"model":")" + model + R"(","max_tokens":)" + std::to_string(max_tokens) + extra +
         R"(,"messages":[{"role":"user","content":"hello there"}]})";
}

inline std::unique_ptr<server::Server> startServer(const std::string& yaml) {
  ::unsetenv("INFERA_ADMIN_TOKEN");
  ::unsetenv("INFERA_KEY_SECRET");
  auto cfg = server::loadConfigString(yaml);
  EXPECT_TRUE(cfg.ok()) << cfg.status().message() << "\n" << yaml;
  if (!cfg.ok()) return nullptr;
  auto s = server::Server::start(std::move(*cfg));
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(*s) : nullptr;
}

// A server with the registry on `store`, and models whose deployments the registry binds:
// `backend` with deployments named by `deployments` (name -> URL).
inline std::string serverYaml(const std::string& store, const std::string& dir,
                              const std::vector<std::pair<std::string, std::string>>& deployments,
                              const std::string& registry_extra = "",
                              const std::string& top_extra = "") {
  std::string y =
      "workers: 2\nlisten: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
      "health_check: {enabled: false}\nlog_level: warn\n" +
      top_extra;
  y += "registry:\n  store: " + store + "\n  data_dir: " + dir + "\n  sync_interval_ms: 50\n" +
       registry_extra;
  if (!deployments.empty()) {
    y += "models:\n  - name: backend\n    deployments:\n";
    for (const auto& [name, url] : deployments) {
      y += "      - name: " + name +
           "\n        upstream_model: m\n        endpoints: [{url: " + url + "}]\n";
    }
  }
  return y;
}

// Registers `name` with `versions` versions (sources s3://bucket/name/N).
inline void registerModel(const Mlflow& m, const std::string& name, int versions) {
  const Reply c = m.post("registered-models/create", {{"name", name}});
  ASSERT_EQ(c.status, 200) << c.text;
  for (int v = 1; v <= versions; ++v) {
    const Reply mv =
        m.post("model-versions/create",
               {{"name", name}, {"source", "s3://bucket/" + name + "/" + std::to_string(v)}});
    ASSERT_EQ(mv.status, 200) << mv.text;
    ASSERT_EQ(mv.body["model_version"]["version"], std::to_string(v));
  }
}

}  // namespace infera::registry::regtest
