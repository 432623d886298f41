#include "core/config.h"

#include <gtest/gtest.h>

namespace infera {
namespace {

struct Backend {
  std::string url;
  int max_connections = 64;
};
struct TestConfig {
  int workers = 2;
  bool verbose = false;
  std::vector<Backend> backends;
};

Result<TestConfig> parse(const std::string& text) {
  INFERA_ASSIGN_OR_RETURN(YAML::Node root, loadYamlString(text));
  TestConfig cfg;
  ConfigErrors errors;
  ConfigReader r(root, &errors);
  r.optional("workers", cfg.workers, 1, 256);
  r.optional("verbose", cfg.verbose);
  r.forEach(
      "backends",
      [&](ConfigReader& b, size_t) {
        Backend be;
        b.required("url", be.url);
        b.optional("max_connections", be.max_connections, 1, 65536);
        cfg.backends.push_back(be);
      },
      /*required=*/true);
  r.finish();
  INFERA_RETURN_IF_ERROR(errors.toStatus());
  return cfg;
}

TEST(ConfigTest, ParsesValuesAndKeepsDefaults) {
  const auto cfg = parse("workers: 4\nbackends:\n  - url: http://a\n");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->workers, 4);
  EXPECT_FALSE(cfg->verbose);
  ASSERT_EQ(cfg->backends.size(), 1u);
  EXPECT_EQ(cfg->backends[0].max_connections, 64);
}

TEST(ConfigTest, ReportsEveryErrorWithPathAndLine) {
  const auto cfg = parse(
      "workers: 0\n"
      "verbose: maybe\n"
      "backends:\n"
      "  - url: http://a\n"
      "  - url: http://b\n"
      "  - url: http://c\n"
      "    max_connections: 0\n"
      "    colour: red\n"
      "extra: 1\n");
  ASSERT_FALSE(cfg.ok());
  const std::string& m = cfg.status().message();
  EXPECT_NE(m.find("5 config errors"), std::string::npos) << m;
  EXPECT_NE(m.find("workers (line 1): must be in [1, 256], got 0"), std::string::npos) << m;
  EXPECT_NE(m.find("verbose (line 2): must be true or false, got 'maybe'"), std::string::npos) << m;
  EXPECT_NE(m.find("backends[2].max_connections (line 7): must be in [1, 65536], got 0"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("backends[2].colour (line 8): unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("extra (line 9): unknown key"), std::string::npos) << m;
}

// A key one or two letters off a known one names it; one far from every key does not.
TEST(ConfigTest, AnUnknownKeyNamesTheNearOne) {
  const auto cfg = parse(
      "worker: 4\n"
      "backends:\n"
      "  - url: http://a\n"
      "    max_conections: 3\n"
      "    colour: red\n");
  ASSERT_FALSE(cfg.ok());
  const std::string& m = cfg.status().message();
  EXPECT_NE(m.find("worker (line 1): unknown key (did you mean 'workers'?)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("backends[0].max_conections (line 4): unknown key (did you mean "
                   "'max_connections'?)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("backends[0].colour (line 5): unknown key"), std::string::npos) << m;
  EXPECT_EQ(m.find("colour (line 5): unknown key (did"), std::string::npos) << m;
  EXPECT_EQ(nearestKey("url", {"uri", "urls"}), "uri");  // equal distance: the first in order
  EXPECT_EQ(nearestKey("ab", {"xy"}), "");
  EXPECT_EQ(nearestKey("timeout_ms", {"timeout_s"}), "timeout_s");
}

TEST(ConfigTest, MissingRequiredKeysAreNamed) {
  const auto cfg = parse("backends:\n  - max_connections: 3\n");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("backends[0].url (line 2): is required"), std::string::npos)
      << cfg.status().message();
  const auto none = parse("workers: 2\n");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("backends (line 1): is required"), std::string::npos)
      << none.status().message();
}

TEST(ConfigTest, SyntaxErrorNamesTheLine) {
  const auto cfg = parse("workers: 2\nbackends: [\n");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("line"), std::string::npos) << cfg.status().message();
}

}  // namespace
}  // namespace infera
