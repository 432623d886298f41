// The experiment arm choice (a pure function of the sticky id and the weights) and how
// resolveTargets uses it: arms, stickiness, the override header, the shadow draw.
#include "gateway/internal/split.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <unordered_map>

#include "gateway/internal/routes.h"
#include "obs/metrics.h"

namespace infera::gateway {
namespace {

TEST(SplitTest, TenThousandIdsSplitWithinTwoPercentOfTheWeights) {
  const uint32_t weights[] = {70, 20, 10};
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 10000; ++i) {
    const int arm = armForHash(weights, stickyHash("exp-1", "user-" + std::to_string(i)));
    ASSERT_GE(arm, 0);
    ++counts[arm];
  }
  EXPECT_NEAR(counts[0] / 10000.0, 0.70, 0.02);
  EXPECT_NEAR(counts[1] / 10000.0, 0.20, 0.02);
  EXPECT_NEAR(counts[2] / 10000.0, 0.10, 0.02);
}

TEST(SplitTest, TheSameIdAlwaysGetsTheSameArm) {
  const uint32_t weights[] = {50, 50};
  for (int i = 0; i < 1000; ++i) {
    const std::string id = "key-" + std::to_string(i);
    const int first = armForHash(weights, stickyHash("s", id));
    for (int k = 0; k < 3; ++k) ASSERT_EQ(armForHash(weights, stickyHash("s", id)), first) << id;
  }
}

TEST(SplitTest, AnotherSaltReshufflesAssignments) {
  const uint32_t weights[] = {50, 50};
  int moved = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string id = "u" + std::to_string(i);
    moved += armForHash(weights, stickyHash("a", id)) != armForHash(weights, stickyHash("b", id));
  }
  EXPECT_NEAR(moved / 2000.0, 0.5, 0.05);  // independent hashes: half change arm
}

TEST(SplitTest, ZeroWeightsGetNothingAndNoWeightsMeansNoArm) {
  const uint32_t weights[] = {0, 5, 0};
  for (int i = 0; i < 500; ++i)
    EXPECT_EQ(armForHash(weights, stickyHash("", std::to_string(i))), 1);
  const uint32_t none[] = {0, 0};
  EXPECT_EQ(armForHash(none, 12345), -1);
  EXPECT_EQ(armForHash({}, 12345), -1);
}

TEST(SplitTest, SaltAndIdAreSeparated) { EXPECT_NE(stickyHash("ab", "c"), stickyHash("a", "bc")); }

// resolveTargets over a table built from configs: an experiment route with two arms and a shadow.
class ResolveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = [](const std::string& name) {
      ModelConfig m;
      m.name = name;
      DeploymentConfig d;
      d.name = name + "-dep";
      d.upstream_model = name;
      EndpointConfig e;
      e.url = "http://127.0.0.1:9";
      d.endpoints.push_back(e);
      m.deployments.push_back(d);
      return m;
    };
    std::vector<ModelConfig> models = {model("m/1"), model("m/2"), model("m/3")};
    models[1].aliases = {"m@challenger"};
    ModelConfig split;
    split.name = "m";
    split.split.arms = {{"a", "m/1", 80}, {"b", "m@challenger", 20}, {"missing", "m/9", 50}};
    split.split.salt = "m";
    split.shadow = {"m/3", 0.25, 1000, 4};
    models.push_back(split);
    GatewayConfig cfg;
    auto t = buildRouteTable(cfg, models, {}, shared_, metrics_, 1);
    ASSERT_TRUE(t.ok()) << t.status().message();
    table_ = *t;
  }
  obs::MetricsRegistry registry_{1};
  GatewayMetrics metrics_{registry_};
  std::unordered_map<std::string, std::shared_ptr<EndpointShared>> shared_;
  std::shared_ptr<const RouteTable> table_;
};

TEST_F(ResolveTest, AnArmWithoutARouteIsLeftOutAndTheOthersSplitByWeight) {
  const Route* r = findRoute(*table_, "m");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->arms.size(), 2u);
  std::map<std::string, int> served;
  for (int i = 0; i < 10000; ++i) {
    RequestKeys k;
    const std::string user = "user" + std::to_string(i);
    k.user = user;
    const Targets t = resolveTargets(*table_, "m", Protocol::kOpenAi, k);
    ASSERT_NE(t.route, nullptr);
    ASSERT_NE(t.arm, nullptr);
    EXPECT_EQ(t.split, r);
    ++served[t.route->model];
  }
  EXPECT_NEAR(served["m/1"] / 10000.0, 0.8, 0.02);
  EXPECT_NEAR(served["m/2"] / 10000.0, 0.2, 0.02);
}

// Over 200 ids, each asked with two different fresh draws: a split that is not sticky (one that
// mixes the draw in) keeps the same arm for only some of them (~68% each at 80/20), so all 200
// agreeing cannot happen by chance. Both arms must be seen: a "split" sending everyone to one arm
// is sticky too.
TEST_F(ResolveTest, StickyByUserThenKeyAndForcedByHeader) {
  std::map<std::string, int> arms_seen;
  int user_and_key_differ = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string id = "user-" + std::to_string(i);
    const std::string other = "key-" + std::to_string(i);
    RequestKeys k;
    k.user = id;
    k.random = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i + 1);
    const Targets a = resolveTargets(*table_, "m", Protocol::kOpenAi, k);
    ASSERT_NE(a.arm, nullptr) << id;
    k.random = ~k.random;  // another draw does not matter when there is an id
    EXPECT_EQ(resolveTargets(*table_, "m", Protocol::kOpenAi, k).arm, a.arm) << id;
    ++arms_seen[a.arm->name];
    RequestKeys by_key;
    by_key.key = id;  // no user: the key is the id, hashed the same way
    by_key.random = 0x2545F4914F6CDD1Dull * static_cast<uint64_t>(i + 1);
    EXPECT_EQ(resolveTargets(*table_, "m", Protocol::kOpenAi, by_key).arm, a.arm) << id;
    by_key.random = ~by_key.random;
    EXPECT_EQ(resolveTargets(*table_, "m", Protocol::kOpenAi, by_key).arm, a.arm) << id;
    // Both set: the user decides, where the key alone would pick another arm.
    RequestKeys key_only;
    key_only.key = other;
    const Targets o = resolveTargets(*table_, "m", Protocol::kOpenAi, key_only);
    RequestKeys both;
    both.user = id;
    both.key = other;
    both.random = k.random;
    EXPECT_EQ(resolveTargets(*table_, "m", Protocol::kOpenAi, both).arm, a.arm) << id;
    user_and_key_differ += o.arm != a.arm;
  }
  EXPECT_GT(arms_seen["a"], 0);
  EXPECT_GT(arms_seen["b"], 0);
  EXPECT_EQ(arms_seen["a"] + arms_seen["b"], 200);
  EXPECT_GT(user_and_key_differ, 0);  // the user-over-key cases above were not all trivial

  RequestKeys k;
  k.user = "alice";
  const Targets a = resolveTargets(*table_, "m", Protocol::kOpenAi, k);
  ASSERT_NE(a.arm, nullptr);
  RequestKeys forced = k;
  forced.forced_arm = a.arm->name == "a" ? "b" : "a";
  const Targets f = resolveTargets(*table_, "m", Protocol::kOpenAi, forced);
  ASSERT_NE(f.arm, nullptr);
  EXPECT_EQ(f.arm->name, forced.forced_arm);
}

TEST_F(ResolveTest, TheShadowGoesWithItsShareOfDraws) {
  int shadowed = 0;
  for (int i = 0; i < 4000; ++i) {
    RequestKeys k;
    k.shadow_draw = (i + 0.5) / 4000.0;
    const Targets t = resolveTargets(*table_, "m", Protocol::kOpenAi, k);
    if (t.shadow) {
      ++shadowed;
      EXPECT_EQ(t.shadow->model, "m/3");
    }
  }
  EXPECT_EQ(shadowed, 1000);
}

TEST_F(ResolveTest, NamesWithoutAnExperimentResolveAsBefore) {
  const Targets t = resolveTargets(*table_, "m@challenger", Protocol::kOpenAi);
  ASSERT_NE(t.route, nullptr);
  EXPECT_EQ(t.route->model, "m/2");
  EXPECT_EQ(t.arm, nullptr);
  EXPECT_EQ(t.shadow, nullptr);
  EXPECT_EQ(resolveTargets(*table_, "nope", Protocol::kOpenAi).route, nullptr);
}

}  // namespace
}  // namespace infera::gateway
