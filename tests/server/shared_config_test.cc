// config_store: shared — three replicas on one PostgreSQL share one configuration: an edit through
// one is served by all three within a second, under load, with no request failing; a stale edit is
// refused by generation; a replica started later serves the store's generation, not its file; the
// history names who did what, and a rollback reaches every replica.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "access/access_fixture.h"
#include "fakes/servers.h"

namespace infera::server {
namespace {

using namespace access::govtest;
using testing::waitFor;

// A replica's config: governance on the shared PostgreSQL, the config in its store, keyless calls
// allowed, model m1 on the shared emulator.
std::string replicaConfig(const std::string& emulator_url, const std::string& pg_url) {
  return "workers: 1\nlisten: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
         "health_check: {enabled: false}\nconfig_store: shared\nconfig_poll_ms: 100\n"
         "governance:\n  store: " +
         pg_url + "\n  admin_token: " + kAdminToken +
         "\n  key_secret: test-secret-0123456789abcdef0123456789\n  require_keys: false\n"
         "models:\n  - name: m1\n    deployments:\n      - name: d1\n        endpoints: [{url: " +
         emulator_url + "}]\n";
}

std::unique_ptr<Server> startReplica(const std::string& path) {
  auto cfg = loadConfig(path);
  EXPECT_TRUE(cfg.ok()) << cfg.status().message();
  if (!cfg.ok()) return nullptr;
  cfg->log_level = "warn";
  auto s = Server::start(std::move(*cfg), path);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(*s) : nullptr;
}

int chatStatus(const Server& s, const std::string& model) {
  return call(s, "", chat(model, 2)).status;
}

TEST(SharedConfigTest, ThreeReplicasServeAnEditWithinASecondUnderLoad) {
  auto pg = testing::PostgresServer::start();
  ASSERT_TRUE(pg);
  ASSERT_TRUE(pg->createDatabase("shared"));
  auto emu = startEmulator();
  ASSERT_TRUE(emu);
  const std::string path = tempPath("replica.yaml");
  std::ofstream(path) << replicaConfig(emu->url(), pg->url("shared"));
  std::vector<std::unique_ptr<Server>> replicas;
  for (int i = 0; i < 3; ++i) {
    replicas.push_back(startReplica(path));
    ASSERT_TRUE(replicas.back());
  }
  std::vector<Server*> all;
  for (auto& r : replicas) all.push_back(r.get());

  // Generation 1 is the file, bootstrapped by the first replica; the others read it.
  const json first = parse(admin(*replicas[1], "GET", "/admin/config").body);
  ASSERT_EQ(first.value("generation", int64_t{0}), 1) << first.dump();
  EXPECT_EQ(first.value("store", ""), "shared");
  EXPECT_EQ(chatStatus(*replicas[2], "m1-new"), 404);

  // Keyless chat completions for m1, round robin over the replicas, until stopped.
  Load load([&](size_t i) { return chatStatus(*all[i % all.size()], "m1"); });
  ASSERT_TRUE(waitFor([&] { return load.count(200) > 30; }));
  // An edit through replica 0: model m1 gains the alias m1-new.
  json edited = first["config"];
  edited["models"][0]["aliases"] = json::array({"m1-new"});
  const auto t0 = std::chrono::steady_clock::now();
  const auto applied = admin(*replicas[0], "POST", "/admin/config",
                             json{{"config", edited}, {"generation", 1}}.dump(), kAdminToken);
  ASSERT_EQ(applied.status, 200) << applied.body;
  EXPECT_EQ(parse(applied.body).value("generation", int64_t{0}), 2);
  std::map<int, double> seconds;  // replica -> when it answered the new alias
  ASSERT_TRUE(waitFor(
      [&] {
        for (int i = 0; i < 3; ++i) {
          if (seconds.count(i) == 0 &&
              chatStatus(*replicas[static_cast<size_t>(i)], "m1-new") == 200) {
            seconds[i] =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          }
        }
        return seconds.size() == 3;
      },
      std::chrono::seconds(10)));
  for (const auto& [i, s] : seconds) {
    EXPECT_LT(s, 1.0) << "replica " << i << " served the edit after " << s << " s";
    // The gauge is "the generation applied": set once apply() has returned, a moment after the
    // workers already serve the new table (a full run read 1 there once), so it is awaited within
    // the same second.
    EXPECT_TRUE(waitFor(
        [&] {
          return replicas[static_cast<size_t>(i)]->metricSum("infera_config_shared_generation") ==
                 2;
        },
        std::chrono::seconds(1)))
        << "replica " << i << " reports generation "
        << replicas[static_cast<size_t>(i)]->metricSum("infera_config_shared_generation");
  }
  ASSERT_TRUE(waitFor([&] { return load.count(200) > 30; }));
  load.stop();
  EXPECT_EQ(load.count(200), load.total()) << "a request failed during the edit";

  // A stale edit (made on generation 1) is refused by every replica, and changes nothing.
  for (auto* r : all) {
    const auto stale = admin(*r, "POST", "/admin/config",
                             json{{"config", first["config"]}, {"generation", 1}}.dump());
    EXPECT_EQ(stale.status, 409) << stale.body;
    EXPECT_EQ(errorCode(stale), "config_changed");
  }

  // A replica started now from the same file serves the store's generation 2, not the file.
  replicas[2].reset();
  replicas[2] = startReplica(path);
  ASSERT_TRUE(replicas[2]);
  EXPECT_EQ(chatStatus(*replicas[2], "m1-new"), 200);

  // The history: the bootstrap, then the edit by its actor.
  const json h = parse(admin(*replicas[2], "GET", "/admin/config/history").body);
  ASSERT_EQ(h["generations"].size(), 2u) << h.dump();
  EXPECT_EQ(h["generations"][0].value("generation", 0), 2);
  EXPECT_EQ(h["generations"][0].value("action", ""), "apply");
  EXPECT_EQ(h["generations"][1].value("action", "").rfind("bootstrap from ", 0), 0u);
  const json g1 = parse(admin(*replicas[2], "GET", "/admin/config/history/1").body);
  EXPECT_EQ(g1["config"], first["config"]);  // secrets redacted alike
  EXPECT_EQ(admin(*replicas[2], "GET", "/admin/config/history/9").status, 404);
  EXPECT_EQ(admin(*replicas[2], "GET", "/admin/config/history/x").status, 400);
  EXPECT_EQ(admin(*replicas[2], "GET", "/admin/config/history", "", "").status, 401);
  // ?limit=N is read as a query parameter, not found anywhere in the target.
  EXPECT_EQ(
      parse(admin(*replicas[2], "GET", "/admin/config/history?limit=1").body)["generations"].size(),
      1u);
  EXPECT_EQ(parse(admin(*replicas[2], "GET", "/admin/config/history?xlimit=1").body)["generations"]
                .size(),
            2u);
  EXPECT_EQ(admin(*replicas[2], "GET", "/admin/config/history?limit=0").status, 400);
  EXPECT_EQ(admin(*replicas[2], "GET", "/admin/config/history?limit=1&limit=2").status, 400);

  // Rollback to generation 1 through replica 1: generation 3, and the alias is gone everywhere.
  const auto rb = admin(*replicas[1], "POST", "/admin/config/rollback", R"({"generation":1})");
  ASSERT_EQ(rb.status, 200) << rb.body;
  EXPECT_EQ(parse(rb.body).value("generation", int64_t{0}), 3);
  EXPECT_TRUE(waitFor([&] {
    for (auto& r : replicas) {
      if (chatStatus(*r, "m1-new") != 404) return false;
    }
    return true;
  }));
  const json h3 = parse(admin(*replicas[0], "GET", "/admin/config/history").body);
  EXPECT_EQ(h3["generations"][0].value("action", ""), "rollback to 1");
  EXPECT_EQ(admin(*replicas[0], "POST", "/admin/config/rollback", R"({"generation":7})").status,
            404);
  // Changes audited with who: the edit and the rollback.
  const json audit = parse(admin(*replicas[0], "GET", "/admin/audit?since=1h").body);
  int changes = 0;
  for (const auto& a : audit["audit"]) {
    const std::string action = a.value("action", "");
    changes += action == "config.apply" || action == "config.rollback";
  }
  EXPECT_EQ(changes, 2) << audit.dump();
}

// Without governance there is no store to share: the config names the key.
TEST(SharedConfigTest, SharedNeedsAGovernanceStore) {
  const auto cfg = loadConfigString("config_store: shared\n");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("config_store (line 1): \"shared\" keeps the config in "
                                        "governance.store"),
            std::string::npos)
      << cfg.status().message();
}

}  // namespace
}  // namespace infera::server
