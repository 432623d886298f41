#include "server/config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "fakes/tls_pki.h"

namespace infera::server {
namespace {

// Every one of `expected` appears in the error message `m`.
void expectEveryMessage(const std::string& m, std::initializer_list<const char*> expected) {
  for (const char* e : expected)
    EXPECT_NE(m.find(e), std::string::npos) << "missing: " << e << "\nin:\n" << m;
}

TEST(ServerConfigTest, ParsesDeploymentsWithInheritedDefaults) {
  const auto cfg = loadConfigString(R"(
region: us-east
timeouts: {first_byte_ms: 1234}
retry: {attempts: 2}
models:
  - name: m
    aliases: [a1]
    deployments:
      - name: d1
        protocol: kserve
        retry: {attempts: 4}
        endpoints:
          - {url: "http://127.0.0.1:1", region: us-east, weight: 3, max_concurrent: 10}
)");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const auto& d = cfg->gateway.models[0].deployments[0];
  EXPECT_EQ(d.timeouts.first_byte_ms, 1234);
  EXPECT_EQ(d.retry.attempts, 4);
  EXPECT_EQ(d.upstream_model, "m");
  EXPECT_EQ(d.endpoints[0].protocol, gateway::Protocol::kKServe);
  EXPECT_EQ(d.endpoints[0].weight, 3);
}

TEST(ServerConfigTest, ReportsEveryErrorWithPathAndLine) {
  const auto cfg = loadConfigString(R"(workers: -1
listen: {port: 70000}
colour: blue
models:
  - name: m
    aliases: [m]
    deployments:
      - endpoints:
          - {url: "ftp://x", weight: 0}
          - {emulator: ghost}
          - {}
)");
  ASSERT_FALSE(cfg.ok());
  expectEveryMessage(
      cfg.status().message(),
      {
          "workers (line 1): must be in [0, 256], got -1",
          "listen.port (line 2): must be in [0, 65535], got 70000",
          "colour (line 3): unknown key",
          "models[0].aliases (line 6): model or alias 'm' is defined twice",
          "models[0].deployments[0].endpoints[0].url (line 9): must start with http://",
          "models[0].deployments[0].endpoints[0].weight (line 9): must be in [1, 1000], got 0",
          "models[0].deployments[0].endpoints[1].emulator (line 10): names unknown emulator "
          "'ghost'",
          "models[0].deployments[0].endpoints[2] (line 11): needs exactly one of 'url' or "
          "'emulator'",
      });
}

// Engine-aware routing: every key checked, and one policy per model.
// batch_idle_ms lets batch work borrow an idle pool: only beside a share, and only where an
// interactive request that finds the pool borrowed waits (flow control) rather than being refused.
TEST(ServerConfigTest, EveryTracingSettingIsARestart) {
  const auto cfg = loadConfigString(R"(tracing: {endpoint: "http://127.0.0.1:4318/v1/traces"}
models:
  - name: m
    deployments: [{name: a, endpoints: [{url: "http://127.0.0.1:1"}]}]
)");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->tracing.max_retries, 3);
  const auto restarts = [&](const std::function<void(obs::TracingConfig&)>& change) {
    Config next = *cfg;
    change(next.tracing);
    const auto r = restartNeeded(*cfg, next);
    return std::find(r.begin(), r.end(), "tracing") != r.end();
  };
  EXPECT_TRUE(restarts([](obs::TracingConfig& t) { t.max_retries = 0; }));
  EXPECT_TRUE(restarts([](obs::TracingConfig& t) { t.timeout_ms = 1; }));
  EXPECT_TRUE(restarts([](obs::TracingConfig& t) { t.sample_ratio = 0.5; }));
  EXPECT_FALSE(restarts([](obs::TracingConfig&) {}));
}

TEST(ServerConfigTest, BatchIdleMsNeedsAShareAndFlowControl) {
  const auto cfg = loadConfigString(R"(models:
  - name: m
    deployments:
      - name: a
        batch_idle_ms: 500
        routing: {policy: engine, max_waiting: 4, flow_control: {}}
        endpoints: [{url: "http://127.0.0.1:1"}]
  - name: n
    deployments:
      - max_batch_share: 0.25
        batch_idle_ms: 500
        endpoints: [{url: "http://127.0.0.1:2"}]
)");
  ASSERT_FALSE(cfg.ok());
  expectEveryMessage(cfg.status().message(),
                     {"models[0].deployments[0].batch_idle_ms (line 5): needs max_batch_share",
                      "models[1].deployments[0].batch_idle_ms (line 11): needs "
                      "routing.flow_control"});
  const auto ok = loadConfigString(R"(models:
  - name: m
    deployments:
      - max_batch_share: 0.25
        batch_idle_ms: 500
        routing: {policy: engine, max_waiting: 4, flow_control: {}}
        endpoints: [{url: "http://127.0.0.1:1"}]
)");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->gateway.models[0].deployments[0].batch_idle_ms, 500);
}

TEST(ServerConfigTest, RoutingErrorsNameTheKeyAndOnePolicyHoldsPerModel) {
  const auto cfg = loadConfigString(R"(models:
  - name: m
    deployments:
      - name: a
        routing: {policy: smart, weights: {prefix: -1}, metrics_path: metrics, flow_control: {}}
        endpoints: [{url: "http://127.0.0.1:1"}]
      - name: b
        routing: {policy: engine, flow_control: {fairness: age}}
        endpoints: [{url: "http://127.0.0.1:2"}]
)");
  ASSERT_FALSE(cfg.ok());
  expectEveryMessage(
      cfg.status().message(),
      {
          "models[0].deployments[0].routing.policy (line 5): must be one of",
          "models[0].deployments[0].routing.weights.prefix (line 5): must be in [0, 1000], got -1",
          "models[0].deployments[0].routing.metrics_path (line 5): must start with /",
          "models[0].deployments[0].routing.flow_control (line 5): needs max_waiting or "
          "max_kv_usage",
          "models[0].deployments[1].routing.flow_control.fairness (line 8): must be one of",
          "models[0].deployments (line 4): every deployment of a model needs the same routing: "
          "(b differs from a)",
      });
  const auto ok = loadConfigString(R"(models:
  - name: m
    deployments:
      - routing: {policy: engine, max_waiting: 4, flow_control: {queue_timeout_ms: 100}}
        endpoints: [{url: "http://127.0.0.1:1"}]
)");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  const auto& r = ok->gateway.models[0].deployments[0].routing;
  EXPECT_TRUE(r.enabled);
  EXPECT_TRUE(r.flow_control);
  EXPECT_EQ(r.queue_timeout_ms, 100);
  EXPECT_EQ(r.prefix_weight, 3);
  // The baselines: no scorer, so weights are an error; filters and flow control still apply.
  const auto rr = loadConfigString(R"(models:
  - name: m
    deployments:
      - routing: {policy: round_robin, weights: {queue: 1}, max_waiting: 2, flow_control: {}}
        endpoints: [{url: "http://127.0.0.1:1"}]
)");
  ASSERT_FALSE(rr.ok());
  expectEveryMessage(rr.status().message(),
                     {"models[0].deployments[0].routing.weights (line 4): apply to policy: "
                      "engine only"});
  const auto random = loadConfigString(R"(models:
  - name: m
    deployments:
      - routing: {policy: random, max_waiting: 2, flow_control: {}}
        endpoints: [{url: "http://127.0.0.1:1"}]
)");
  ASSERT_TRUE(random.ok()) << random.status().message();
  const auto& rd = random->gateway.models[0].deployments[0].routing;
  EXPECT_TRUE(rd.enabled);
  EXPECT_TRUE(rd.flow_control);
  EXPECT_EQ(rd.pick, gateway::EnginePick::kRandom);
  EXPECT_EQ(rd.prefix_weight + rd.queue_weight + rd.kv_weight + rd.lora_weight + rd.session_weight +
                rd.latency_weight,
            0);
  // Priorities by key, user and team: each value checked, each name kept.
  const auto by = loadConfigString(R"(models:
  - name: m
    deployments:
      - routing:
          policy: engine
          max_waiting: 2
          flow_control:
            priorities:
              teams: {jobs: batch, oncall: urgent}
              users: {nightly: sheddable}
              keys: {k1: critical}
              groups: {x: batch}
        endpoints: [{url: "http://127.0.0.1:1"}]
)");
  ASSERT_FALSE(by.ok());
  expectEveryMessage(
      by.status().message(),
      {"models[0].deployments[0].routing.flow_control.priorities.teams.oncall (line 9): must be "
       "one of",
       "models[0].deployments[0].routing.flow_control.priorities.groups (line 12): unknown key"});
  const auto good = loadConfigString(R"(models:
  - name: m
    deployments:
      - routing:
          policy: engine
          max_waiting: 2
          flow_control: {priorities: {teams: {jobs: batch}, users: {nightly: sheddable}, keys: {k1: critical}}}
        endpoints: [{url: "http://127.0.0.1:1"}]
)");
  ASSERT_TRUE(good.ok()) << good.status().message();
  const auto& g = good->gateway.models[0].deployments[0].routing;
  EXPECT_EQ(g.team_priorities.at("jobs"), "batch");
  EXPECT_EQ(g.user_priorities.at("nightly"), "sheddable");
  EXPECT_EQ(g.key_priorities.at("k1"), "critical");
}

// Governance settings: errors name the key path and line, and never echo a password of a URL.
TEST(ServerConfigTest, GovernanceErrorsNameTheKeyAndHideUrlPasswords) {
  const auto cfg = loadConfigString(R"(governance:
  store: "mysql://infera:hunter2@db/x"
  sync_interval_ms: 10000
  redis: "rediss://:hunter2@cache:6380"
  redis_fallback: maybe
models: [{name: m, deployments: [{endpoints: [{url: "http://127.0.0.1:1"}]}]}]
)");
  ASSERT_FALSE(cfg.ok());
  const std::string& m = cfg.status().message();
  expectEveryMessage(m,
                     {
                         "governance.store (line 2): must be sqlite:PATH or a postgresql:// URL "
                         "(got 'mysql://infera:***@db/x')",
                         "governance.sync_interval_ms (line 3): must be in [10, 4000], got 10000",
                         "governance.redis (line 4): TLS to redis (rediss://) is not supported: "
                         "'rediss://:***@cache:6380'",
                         "governance.redis_fallback (line 5)",
                     });
  EXPECT_EQ(m.find("hunter2"), std::string::npos) << m;
}

// The vectors section: off unless present, errors with path and line, unknown keys rejected, and
// every change needs a restart.
TEST(ServerConfigTest, VectorsSectionIsValidatedAndNeedsARestart) {
  const auto off = loadConfigString("workers: 1\n");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->vectors.enabled);
  const auto on = loadConfigString("vectors:\n  data_dir: /tmp/v\n  path_prefix: /qdrant\n");
  ASSERT_TRUE(on.ok()) << on.status().message();
  EXPECT_TRUE(on->vectors.enabled);
  EXPECT_EQ(on->vectors.path_prefix, "/qdrant");
  EXPECT_EQ(on->vectors.data_dir, "/tmp/v");
  const auto bad =
      loadConfigString("vectors:\n  path_prefix: qdrant/\n  max_batch_points: 0\n  colour: red\n");
  ASSERT_FALSE(bad.ok());
  expectEveryMessage(bad.status().message(),
                     {
                         "vectors.path_prefix (line 2): must start with '/' and not end with one",
                         "vectors.max_batch_points (line 3): must be in [1, 1000000], got 0",
                         "vectors.colour (line 4): unknown key",
                     });
  const auto restart = restartNeeded(*off, *on);
  EXPECT_NE(std::find(restart.begin(), restart.end(), "vectors"), restart.end());
}

TEST(ServerConfigTest, SchedulerSectionNamesTheMetricsUrlAndNeedsARestart) {
  const auto off = loadConfigString("workers: 1\n");
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->scheduler_metrics_url.empty());
  const auto on = loadConfigString("scheduler: {metrics_url: \"http://sched:8081/metrics\"}\n");
  ASSERT_TRUE(on.ok()) << on.status().message();
  EXPECT_EQ(on->scheduler_metrics_url, "http://sched:8081/metrics");
  const auto bad = loadConfigString("scheduler:\n  metrics_url: sched:8081\n  port: 1\n");
  ASSERT_FALSE(bad.ok());
  expectEveryMessage(bad.status().message(),
                     {"scheduler.metrics_url (line 2): must start with http:// or https://",
                      "scheduler.port (line 3): unknown key"});
  const auto missing = loadConfigString("scheduler: {}\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("scheduler.metrics_url (line 1): is required"),
            std::string::npos)
      << missing.status().message();
  const auto restart = restartNeeded(*off, *on);
  EXPECT_NE(std::find(restart.begin(), restart.end(), "scheduler"), restart.end());
}

// Replaces every PKI/ in `yaml` with the directory of `pki`.
std::string withPki(std::string yaml, const testing::TestPki& pki) {
  for (size_t at = yaml.find("PKI/"); at != std::string::npos; at = yaml.find("PKI/", at)) {
    yaml.replace(at, 4, pki.dir() + "/");
  }
  return yaml;
}

TEST(ServerConfigTest, TlsSectionsOfPortsAndEndpoints) {
  const auto pki = testing::TestPki::create();
  ASSERT_TRUE(pki);
  const auto cfg = loadConfigString(withPki(R"(
listen:
  port: 0
  tls: {cert_file: PKI/server.pem, key_file: PKI/server.key, watch_interval_ms: 250}
admin:
  tls: {cert_file: PKI/server.pem, key_file: PKI/server.key, client_ca_file: PKI/ca.pem}
models:
  - name: m
    deployments:
      - tls: {ca_file: PKI/ca.pem, server_name: backend.internal}
        endpoints:
          - {url: "https://127.0.0.1:1"}
          - {url: "https://127.0.0.1:2", tls: {verify: false, cert_file: PKI/client.pem, key_file: PKI/client.key}}
          - {url: "http://127.0.0.1:3"}
)",
                                            *pki));
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  ASSERT_TRUE(cfg->listen.tls);
  EXPECT_EQ(cfg->listen.tls->cert_file, pki->path("server.pem"));
  EXPECT_EQ(cfg->listen.tls->watch_interval, std::chrono::milliseconds(250));
  EXPECT_EQ(cfg->listen.tls->client_ca_file, "");
  ASSERT_TRUE(cfg->admin.tls);
  EXPECT_EQ(cfg->admin.tls->client_ca_file, pki->path("ca.pem"));
  EXPECT_EQ(cfg->admin.tls->watch_interval, std::chrono::milliseconds(5000));
  const auto& eps = cfg->gateway.models[0].deployments[0].endpoints;
  EXPECT_EQ(eps[0].tls.ca_file, pki->path("ca.pem"));  // the deployment's
  EXPECT_EQ(eps[0].tls.server_name, "backend.internal");
  EXPECT_TRUE(eps[0].tls.verify);
  EXPECT_FALSE(eps[1].tls.verify);  // its own on top of the deployment's
  EXPECT_EQ(eps[1].tls.ca_file, pki->path("ca.pem"));
  EXPECT_EQ(eps[1].tls.key_file, pki->path("client.key"));
  EXPECT_TRUE(eps[2].tls == net::TlsClientConfig{});  // http://: none

  // Certificates reload; turning TLS on or off is a restart.
  Config next = *cfg;
  next.listen.tls->cert_file = pki->path("server2.pem");
  EXPECT_TRUE(restartNeeded(*cfg, next).empty());
  next.listen.tls.reset();
  const auto restart = restartNeeded(*cfg, next);
  EXPECT_NE(std::find(restart.begin(), restart.end(), "listen.tls (on or off)"), restart.end());
}

TEST(ServerConfigTest, TlsErrorsNameTheKeyLineAndFile) {
  const auto pki = testing::TestPki::create();
  ASSERT_TRUE(pki);
  const auto cfg = loadConfigString(withPki(R"(listen:
  tls: {cert_file: /nonexistent/c.pem, colour: x}
admin: {tls: {cert_file: PKI/server.pem, key_file: PKI/server.key, watch_interval_ms: -1}}
models:
  - name: m
    deployments:
      - endpoints:
          - {url: "http://127.0.0.1:3", tls: {verify: false}}
          - {url: "https://127.0.0.1:3", tls: {cert_file: PKI/client.pem}}
          - {url: "https://127.0.0.1:3", tls: {ca_file: /nonexistent/ca.pem, sni: x}}
)",
                                            *pki));
  ASSERT_FALSE(cfg.ok());
  expectEveryMessage(
      cfg.status().message(),
      {
          "listen.tls.key_file (line 2): is required",
          "listen.tls.cert_file (line 2): cannot read '/nonexistent/c.pem': No such file or "
          "directory",
          "listen.tls.colour (line 2): unknown key",
          "admin.tls.watch_interval_ms (line 3): must be in [0, 3600000], got -1",
          "models[0].deployments[0].endpoints[0].tls (line 8): is for https:// endpoints only",
          "models[0].deployments[0].endpoints[1].tls (line 9): cert_file and key_file go together",
          "models[0].deployments[0].endpoints[2].tls.ca_file (line 10): cannot read "
          "'/nonexistent/ca.pem'",
          "models[0].deployments[0].endpoints[2].tls.sni (line 10): unknown key",
      });
}

TEST(ServerConfigTest, MissingFileAndSyntaxErrorsAreClear) {
  EXPECT_EQ(loadConfig("/nonexistent/infera.yaml").status().code(), StatusCode::kNotFound);
  const auto bad = loadConfigString("models: [\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line"), std::string::npos);
}

// Every shipped example parses, and serving it from a scratch working directory would not fail on
// a path (the multi-region example once named /var/log/infera/access.jsonl, which `config
// validate` passed and `serve` refused as a user).
TEST(ServerConfigTest, ShippedExamplesAreValid) {
  const std::string src = INFERA_TEST_SOURCE_DIR;
  for (const char* f :
       {"/examples/platform.yaml", "/examples/quickstart.yaml", "/examples/multi-region.yaml",
        "/examples/vectors.yaml", "/examples/governance.yaml", "/examples/features.yaml",
        "/examples/registry.yaml", "/examples/batch.yaml"}) {
    const auto cfg = loadConfig(src + f);
    ASSERT_TRUE(cfg.ok()) << f << ": " << cfg.status().message();
    const auto problems = checkHostPaths(*cfg);
    EXPECT_TRUE(problems.empty()) << f << ": " << (problems.empty() ? "" : problems[0]);
  }
}

// What serving would fail on and the parser cannot see: a path under a regular file, a missing
// feature repository. Named by key; a config whose paths are fine has no problem (certificates
// are read by the parser already).
TEST(ServerConfigTest, HostPathsThatServingWouldRefuseAreNamed) {
  const std::string dir = ::testing::TempDir() + "host-paths-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/plain-file";
  std::ofstream(file) << "x";
  auto cfg = loadConfigString("access_log: " + file + "/logs/access.jsonl\n" +
                              "governance: {store: \"sqlite:" + dir + "/new/dir/g.db\", " +
                              "admin_token_file: " + dir + "/secrets/admin-token}\n" +
                              "vectors: {data_dir: " + file + "/vectors}\n" +
                              "features: {repository: " + dir + "/no-such-repo}\n");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const auto problems = checkHostPaths(*cfg);
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_EQ(problems.size(), 3u) << all;
  expectEveryMessage(
      all, {"access_log: cannot create or write ", "/plain-file is not a directory",
            "vectors.data_dir: cannot create or write ", "features.repository: cannot read "});
  EXPECT_EQ(all.find("governance"), std::string::npos) << all;  // missing dirs are created
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace infera::server
