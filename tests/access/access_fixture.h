#pragma once
// Shared by the governance tests: gateways with governance on in front of real emulators, the
// admin API driven over HTTP like `infera keys/teams` does, and small JSON helpers.

#include <gtest/gtest.h>
#include <simdjson.h>
#include <stdlib.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "emulator/emulator.h"
#include "fakes/http_test_client.h"
#include "fakes/scratch_dir.h"
#include "server/config.h"
#include "server/server.h"

namespace infera::access::govtest {

using nlohmann::json;
using testing::httpRequest;
using testing::TestResponse;

inline constexpr const char* kAdminToken = "test-admin-token";

// A file name in a fresh directory, removed when the test process exits.
inline std::string tempPath(const std::string& stem) {
  return testing::scratchDir("infera-gov") + "/" + stem;
}

// A governance section plus one model `m1` (alias `m1-alias`) and a second model `m2`, served by
// the emulator at `emulator_url`.
inline std::string govConfig(const std::string& emulator_url, const std::string& store,
                             const std::string& governance_extra = "",
                             const std::string& model_extra = "",
                             const std::string& deployment_extra = "") {
  return "workers: 2\nlisten: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
         "health_check: {enabled: false}\n"
         "governance:\n  store: " +
         store + "\n  admin_token: " + kAdminToken +
         "\n  key_secret: test-secret-0123456789abcdef0123456789\n  sync_interval_ms: 100\n  "
         "usage_flush_ms: 100\n" +
         governance_extra + "models:\n  - name: m1\n    aliases: [m1-alias]\n" + model_extra +
         "    deployments:\n      - name: d1\n" + deployment_extra +
         "        endpoints: [{url: " + emulator_url +
         "}]\n  - name: m2\n    deployments:\n      - name: d2\n        endpoints: [{url: " +
         emulator_url + "}]\n";
}

// `clock`: the clock access control reads (null: the system's); tests step a FakeClock.
inline std::unique_ptr<server::Server> startGov(const std::string& yaml,
                                                const Clock* clock = nullptr) {
  ::unsetenv("INFERA_ADMIN_TOKEN");
  ::unsetenv("INFERA_KEY_SECRET");
  auto cfg = server::loadConfigString(yaml);
  EXPECT_TRUE(cfg.ok()) << cfg.status().message() << "\n" << yaml;
  if (!cfg.ok()) return nullptr;
  server::Options options;
  options.clock = clock;
  auto gw = server::Server::start(std::move(*cfg), {}, options);
  EXPECT_TRUE(gw.ok()) << gw.status().message();
  if (!gw.ok()) return nullptr;
  return std::move(*gw);
}

inline std::unique_ptr<emulator::Emulator> startEmulator(double token_ms = 0, int64_t ttft_ms = 0) {
  emulator::EmulatorConfig cfg;
  cfg.port = 0;
  cfg.workers = 1;
  cfg.models = {"m1", "m2"};
  cfg.token_ms = token_ms;
  cfg.ttft_ms = ttft_ms;
  cfg.usage_ledger = 100'000;  // the tests compare usage records with what the emulator produced
  auto emu = emulator::Emulator::start(cfg);
  EXPECT_TRUE(emu.ok()) << emu.status().message();
  return emu.ok() ? std::move(*emu) : nullptr;
}

inline TestResponse admin(const server::Server& gw, const std::string& method,
                          const std::string& target, const std::string& body = {},
                          const std::string& token = kAdminToken) {
  std::vector<std::pair<std::string, std::string>> h = {{"content-type", "application/json"}};
  if (!token.empty()) h.push_back({"authorization", "Bearer " + token});
  auto r = httpRequest(gw.adminPort(), method, target, body, h);
  EXPECT_TRUE(r.has_value()) << method << " " << target;
  return r ? *r : TestResponse{};
}

// The value of each series of a gauge family by its `worker` label, from the metrics text.
inline std::map<std::string, double> perWorker(const server::Server& gw,
                                               const std::string& family) {
  std::map<std::string, double> out;
  std::istringstream in(gw.metricsText());
  std::string line;
  const std::string prefix = family + "{worker=\"";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t end = line.find('"', prefix.size());
    const size_t space = line.rfind(' ');
    if (end == std::string::npos || space == std::string::npos) continue;
    out[line.substr(prefix.size(), end - prefix.size())] = std::stod(line.substr(space + 1));
  }
  return out;
}

inline json parse(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << body;
  return j;
}

// Creates a team and a key on it; returns the key's secret token.
inline std::string makeKey(const server::Server& gw, const std::string& team,
                           const json& team_fields = json::object(),
                           const json& key_fields = json::object()) {
  json t = team_fields;
  t["name"] = team;
  const auto tr = admin(gw, "POST", "/admin/teams", t.dump());
  EXPECT_TRUE(tr.status == 201 || tr.status == 409) << tr.body;
  json k = key_fields;
  k["team"] = team;
  const auto kr = admin(gw, "POST", "/admin/keys", k.dump());
  EXPECT_EQ(kr.status, 201) << kr.body;
  const json kj = parse(kr.body);
  return kj.value("key", "");
}

inline std::string chat(const std::string& model, int max_tokens, bool stream = false,
                        const std::string& extra = "") {
  return R"({"model":")" + model + R"(","max_tokens":)" + std::to_string(max_tokens) +
         R"(,"stream":)" + (stream ? "true" : "false") + extra +
         R"(,"messages":[{"role":"user","content":"hello there, how are you"}]})";
}

inline TestResponse call(const server::Server& gw, const std::string& key, const std::string& body,
                         const std::vector<std::pair<std::string, std::string>>& extra = {},
                         const std::string& path = "/v1/chat/completions") {
  std::vector<std::pair<std::string, std::string>> h = {{"content-type", "application/json"}};
  if (!key.empty()) h.push_back({"authorization", "Bearer " + key});
  for (const auto& e : extra) h.push_back(e);
  auto r = httpRequest(gw.port(), "POST", path, body, h);
  EXPECT_TRUE(r.has_value());
  return r ? *r : TestResponse{};
}

// The gateway reconciles a request's reservation just after its last byte is sent, so a client
// that fires the next request at once can still see the previous reservation. Counting loops
// that assert how many requests fit wait for the gateway to be idle first.
inline TestResponse callSettled(const server::Server& gw, const std::string& key,
                                const std::string& body) {
  EXPECT_TRUE(
      testing::waitFor([&] { return gw.metricSum("infera_gateway_requests_in_flight") == 0; }));
  return call(gw, key, body);
}

inline std::string errorCode(const TestResponse& r) {
  const json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("error")) return "";
  return j["error"].value("code", "");
}

// Usage rows from the admin API (waits for the flush).
inline json usageRows(const server::Server& gw, const std::string& query) {
  const auto r = admin(gw, "GET", "/admin/usage?" + query);
  EXPECT_EQ(r.status, 200) << r.body;
  const json j = parse(r.body);
  return j.contains("rows") ? j["rows"] : json::array();
}

// Requests sent one after another on `threads` threads until stopped (send(i) sends the i-th of a
// thread and returns its status), counting the statuses.
class Load {
 public:
  explicit Load(std::function<int(size_t)> send, int threads = 2) : send_(std::move(send)) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t] {
        for (size_t i = static_cast<size_t>(t); !stop_; ++i) {
          const int status = send_(i);
          std::lock_guard<std::mutex> lock(mu_);
          ++statuses_[status];
        }
      });
    }
  }
  ~Load() { stop(); }
  void stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int64_t count(int status) {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_[status];
  }
  int64_t total() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    for (const auto& [s, c] : statuses_) n += c;
    return n;
  }
  std::string summary() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& [s, c] : statuses_) out += std::to_string(s) + ": " + std::to_string(c) + " ";
    return out;
  }

 private:
  std::function<int(size_t)> send_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<int, int64_t> statuses_;
  std::vector<std::thread> threads_;
};

}  // namespace infera::access::govtest
