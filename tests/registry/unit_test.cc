// Pure parts of the registry: what it serves from a routing state (deriveRoutes), experiment
// specs, MLflow's name checks, and the registry config section (errors with path and line,
// unknown keys), and the worker pool's guard against a job that throws.
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/clock.h"
#include "core/config.h"
#include "registry/internal/pool.h"
#include "registry/internal/routing.h"
#include "registry/internal/store.h"

namespace infera::registry {
namespace {

std::vector<gateway::ModelConfig> baseModels() {
  gateway::ModelConfig m;
  m.name = "backend";
  for (const char* d : {"da", "db"}) {
    gateway::DeploymentConfig dc;
    dc.name = d;
    dc.upstream_model = "m";
    gateway::EndpointConfig e;
    e.url = std::string("http://127.0.0.1:1/") + d;
    dc.endpoints.push_back(e);
    m.deployments.push_back(dc);
  }
  return {m};
}

RoutingState fraudState() {
  RoutingState s;
  s.versions = {{"fraud", 1}, {"fraud", 2}, {"fraud", 3}};
  s.aliases = {{"fraud", "champion", 1}, {"fraud", "challenger", 2}};
  s.bindings = {{"fraud", "1", {"da"}, 0}, {"fraud", "2", {"backend/db"}, 0}};
  return s;
}

const gateway::ModelConfig* find(const DerivedRoutes& d, const std::string& name) {
  for (const auto& m : d.models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

TEST(DeriveRoutesTest, BoundVersionsAliasesAndTheDefaultAlias) {
  const DerivedRoutes d = deriveRoutes(fraudState(), {}, baseModels(), "champion", 1024);
  ASSERT_EQ(d.models.size(), 2u);
  const auto* v1 = find(d, "fraud/1");
  ASSERT_NE(v1, nullptr);
  ASSERT_EQ(v1->deployments.size(), 1u);
  EXPECT_EQ(v1->deployments[0].name, "da");
  EXPECT_EQ(v1->deployments[0].upstream_model, "m");
  EXPECT_EQ(v1->aliases, (std::vector<std::string>{"fraud@champion", "fraud"}));
  EXPECT_TRUE(v1->tag_responses);
  EXPECT_EQ(find(d, "fraud/2")->aliases, (std::vector<std::string>{"fraud@challenger"}));
  EXPECT_EQ(find(d, "fraud/3"), nullptr);  // no binding: not served
  EXPECT_TRUE(d.warnings.empty());
}

TEST(DeriveRoutesTest, AnExperimentBecomesASplitRouteWithItsShadow) {
  RoutingState s = fraudState();
  s.experiments = {
      {"fraud",
       R"({"arms":[{"name":"a","target":"@champion","weight":9},{"name":"b","target":"2","weight":1},
                                          {"name":"c","target":"3","weight":5}],
                                 "sticky":"header","header":"X-Session","shadow":{"target":"@challenger","share":0.1}})"}};
  const DerivedRoutes d = deriveRoutes(s, {}, baseModels(), "champion", 1024);
  const auto* split = find(d, "fraud");
  ASSERT_NE(split, nullptr);
  ASSERT_EQ(split->split.arms.size(), 2u);  // "c" targets an unbound version
  EXPECT_EQ(split->split.arms[0].target, "fraud@champion");
  EXPECT_EQ(split->split.arms[1].target, "fraud/2");
  EXPECT_EQ(split->split.sticky_by, gateway::StickyBy::kHeader);
  EXPECT_EQ(split->split.sticky_header, "x-session");
  EXPECT_EQ(split->shadow.target, "fraud@challenger");
  EXPECT_DOUBLE_EQ(split->shadow.share, 0.1);
  EXPECT_EQ(d.warnings.size(), 1u);
  // The model's name is the split's, no longer an alias of the default alias's version.
  EXPECT_EQ(find(d, "fraud/1")->aliases, (std::vector<std::string>{"fraud@champion"}));
}

TEST(DeriveRoutesTest, ConfigBindingsAliasBindingsCaptureAndTakenNames) {
  RoutingState s = fraudState();
  s.bindings.push_back({"fraud", "@challenger", {"da", "db"}, 0});
  s.captures = {{"fraud/1", 0.5, true, 0, {"bad"}, 0}};
  s.opt_out_keys = {"key1"};
  const std::vector<BindingConfig> cfg = {{"fraud", "3", {"db"}, 7}, {"fraud", "1", {"db"}, 8}};
  auto base = baseModels();
  base[0].aliases = {"fraud/2"};  // the config takes this name
  const DerivedRoutes d = deriveRoutes(s, cfg, base, "champion", 4096);
  EXPECT_EQ(find(d, "fraud/3")->deployments[0].name, "db");  // from the config
  EXPECT_EQ(find(d, "fraud/1")->deployments[0].name, "da");  // the store's binding wins
  EXPECT_EQ(find(d, "fraud@challenger")->deployments.size(), 2u);
  EXPECT_EQ(find(d, "fraud/2"), nullptr);
  EXPECT_FALSE(d.warnings.empty());
  const auto& cap = find(d, "fraud/1")->capture;
  EXPECT_DOUBLE_EQ(cap.sample, 0.5);
  EXPECT_EQ(cap.max_bytes, 4096);
  EXPECT_TRUE(cap.flag_errors);
  EXPECT_EQ(cap.opt_out_keys, (std::vector<std::string>{"key1"}));
  // The fingerprint moves with the routes and only with them.
  EXPECT_EQ(d.fingerprint, deriveRoutes(s, cfg, base, "champion", 4096).fingerprint);
  s.aliases[0].version = 2;
  EXPECT_NE(d.fingerprint, deriveRoutes(s, cfg, base, "champion", 4096).fingerprint);
}

TEST(ExperimentSpecTest, ValidatesArmsStickinessAndTheShadow) {
  EXPECT_TRUE(parseExperiment(R"({"arms":[{"target":"1"}]})").ok());
  EXPECT_TRUE(parseExperiment(R"({"shadow":{"target":"@x","share":0.5}})").ok());
  EXPECT_FALSE(parseExperiment(R"({})").ok());
  EXPECT_FALSE(parseExperiment(R"({"arms":[{"target":"latest"}]})").ok());
  EXPECT_FALSE(parseExperiment(R"({"arms":[{"target":"1","weight":-1}]})").ok());
  EXPECT_FALSE(
      parseExperiment(R"({"arms":[{"name":"a","target":"1"},{"name":"a","target":"2"}]})").ok());
  EXPECT_FALSE(parseExperiment(R"({"arms":[{"target":"1"}],"sticky":"header"})").ok());
  EXPECT_FALSE(parseExperiment(R"({"shadow":{"target":"2","share":2}})").ok());
  const auto e = parseExperiment(
      R"({"arms":[{"target":"@a","weight":3}],"sticky":"key","shadow":{"target":"2"}})");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->arms[0].name, "@a");
  EXPECT_DOUBLE_EQ(e->shadow_share, 1.0);
  EXPECT_EQ(parseExperiment(experimentJson(*e))->arms[0].weight, 3);
}

TEST(NamesTest, MlflowsAliasAndTagRules) {
  EXPECT_TRUE(validateAlias("champion").isOk());
  EXPECT_TRUE(validateAlias("prod-2_b").isOk());
  EXPECT_FALSE(validateAlias("").isOk());
  EXPECT_FALSE(validateAlias("Latest").isOk());
  EXPECT_FALSE(validateAlias("v12").isOk());
  EXPECT_TRUE(validateAlias("v12a").isOk());
  EXPECT_FALSE(validateAlias("a.b").isOk());
  EXPECT_TRUE(validateTag("mlflow.prompt.is_prompt", "x").isOk());
  EXPECT_FALSE(validateTag("/abs", "x").isOk());
  EXPECT_FALSE(validateTag("a/../b", "x").isOk());
  EXPECT_FALSE(validateTag("a*b", "x").isOk());
  EXPECT_EQ(*canonicalStage("PRODUCTION"), "Production");
  EXPECT_FALSE(canonicalStage("prod").has_value());
  EXPECT_EQ(*parseVersion("12"), 12);
  EXPECT_FALSE(parseVersion("1.0").ok());
}

TEST(RegistryConfigTest, ReadsTheSectionAndReportsErrorsWithPathAndLine) {
  auto root = loadYamlString(R"(registry:
  store: sqlite:/tmp/x.db
  default_alias: prod
  max_artifact_bytes: 1048576
  capture: {max_body_bytes: 1024, max_rows_per_version: 10}
  bindings:
    - {model: fraud, version: "3", deployments: [da]}
    - {model: fraud, alias: champion, deployments: [db]}
    - {model: fraud, deployments: [db]}
  bogus: 1
)");
  ASSERT_TRUE(root.ok());
  ConfigErrors errors;
  ConfigReader r(*root, &errors);
  RegistryConfig c;
  r.object("registry", [&](ConfigReader& s) { readRegistryConfig(s, c); });
  r.finish();
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.default_alias, "prod");
  EXPECT_EQ(c.capture_max_body_bytes, 1024);
  ASSERT_EQ(c.bindings.size(), 3u);
  EXPECT_EQ(c.bindings[1].ref, "@champion");
  const std::string all = errors.toStatus().message();
  EXPECT_NE(all.find("registry.bindings[2]"), std::string::npos) << all;
  EXPECT_NE(all.find("needs exactly one of 'version' or 'alias'"), std::string::npos) << all;
  EXPECT_NE(all.find("registry.bogus"), std::string::npos) << all;
  EXPECT_NE(all.find("line 10"), std::string::npos) << all;
  RegistryConfig next = c;
  next.bindings.clear();
  EXPECT_TRUE(restartNeeded(c, next).empty());
  next.default_alias = "x";
  EXPECT_FALSE(restartNeeded(c, next).empty());
}

// A job that throws on a pool thread is its caller's kInternal, not std::terminate; the pool
// goes on with the next job.
TEST(WorkerPoolTest, AJobThatThrowsIsAnInternalErrorAndThePoolKeepsWorking) {
  WorkerPool pool(1, 8);
  ASSERT_TRUE(pool.start([]() -> Result<std::unique_ptr<RegistryStore>> {
                    return RegistryStore::open("sqlite::memory:", SystemClock::instance());
                  })
                  .isOk());
  net::asio::io_context ctx;
  std::optional<Result<int>> thrown, not_std, after;
  auto body = [&]() -> net::Task<void> {
    const PoolJob<int> throws = [](RegistryStore&) -> Result<int> {
      throw std::runtime_error("nlohmann-like failure");
    };
    auto thrown_result = co_await runOnPool<int>(ctx, pool, throws);
    thrown.emplace(std::move(thrown_result));
    const PoolJob<int> throws_int = [](RegistryStore&) -> Result<int> { throw 7; };
    auto not_std_result = co_await runOnPool<int>(ctx, pool, throws_int);
    not_std.emplace(std::move(not_std_result));
    const PoolJob<int> fine = [](RegistryStore&) -> Result<int> { return 42; };
    auto after_result = co_await runOnPool<int>(ctx, pool, fine);
    after.emplace(std::move(after_result));
  };
  net::asio::co_spawn(ctx, body(), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  ctx.run();
  ASSERT_TRUE(thrown && not_std && after);
  EXPECT_EQ(thrown->status().code(), StatusCode::kInternal);
  // What it threw goes to the log, not to the caller.
  EXPECT_EQ(thrown->status().message().find("nlohmann"), std::string::npos);
  EXPECT_EQ(not_std->status().code(), StatusCode::kInternal);
  ASSERT_TRUE(after->ok());
  EXPECT_EQ(**after, 42);
}

}  // namespace
}  // namespace infera::registry
