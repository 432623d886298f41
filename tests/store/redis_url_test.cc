#include <gtest/gtest.h>

#include "store/redis.h"

namespace infera::store {
namespace {

TEST(RedisUrlTest, ParsesHostPortAndDatabase) {
  auto a = parseRedisUrl("redis://cache.internal:6380/3");
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->host, "cache.internal");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 3);
  EXPECT_EQ(a->password, "");
  EXPECT_EQ(a->user, "");
}

TEST(RedisUrlTest, DefaultsPortAndDatabase) {
  auto a = parseRedisUrl("redis://10.0.0.5");
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->host, "10.0.0.5");
  EXPECT_EQ(a->port, 6379);
  EXPECT_EQ(a->db, 0);
  auto slash = parseRedisUrl("redis://10.0.0.5:7000/");
  ASSERT_TRUE(slash.ok());
  EXPECT_EQ(slash->port, 7000);
  EXPECT_EQ(slash->db, 0);
}

TEST(RedisUrlTest, ReadsUserAndPercentDecodedPassword) {
  auto a = parseRedisUrl("redis://svc:p%40ss%3Aword@127.0.0.1:6379/1");
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->user, "svc");
  EXPECT_EQ(a->password, "p@ss:word");
  EXPECT_EQ(a->db, 1);
  auto no_user = parseRedisUrl("redis://:secret@localhost");
  ASSERT_TRUE(no_user.ok());
  EXPECT_EQ(no_user->user, "");
  EXPECT_EQ(no_user->password, "secret");
  EXPECT_EQ(no_user->host, "localhost");
  auto bare = parseRedisUrl("redis://secret@localhost");  // as redis-cli reads it: a password
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->password, "secret");
}

TEST(RedisUrlTest, ParsesBracketedIpv6) {
  auto a = parseRedisUrl("redis://[::1]:6390/2");
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 6390);
  EXPECT_EQ(a->db, 2);
}

TEST(RedisUrlTest, RejectsMalformedUrls) {
  for (const char* bad :
       {"http://localhost", "localhost:6379", "redis://", "redis://:6379", "redis://host:0",
        "redis://host:70000", "redis://host:abc", "redis://host:", "redis://host/x",
        "redis://host/-1", "redis://host?db=1", "redis://[::1", "redis://p%4@host"}) {
    auto r = parseRedisUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(parseRedisUrl("rediss://host").status().code(), StatusCode::kUnimplemented);
}

TEST(RedisUrlTest, ReadsAClusterWithItsSeedNodes) {
  auto a = parseRedisUrl("redis-cluster://svc:pw@10.0.0.1:7000,10.0.0.2,[::1]:7002");
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_TRUE(a->cluster);
  EXPECT_EQ(a->host, "10.0.0.1");
  EXPECT_EQ(a->port, 7000);
  EXPECT_EQ(a->user, "svc");
  EXPECT_EQ(a->password, "pw");
  ASSERT_EQ(a->more_seeds.size(), 2u);
  EXPECT_EQ(a->more_seeds[0], (std::pair<std::string, uint16_t>{"10.0.0.2", 6379}));
  EXPECT_EQ(a->more_seeds[1], (std::pair<std::string, uint16_t>{"::1", 7002}));
  auto one = parseRedisUrl("redis-cluster://cache:7000");
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->cluster);
  EXPECT_TRUE(one->more_seeds.empty());
  EXPECT_FALSE(parseRedisUrl("redis://h1").value().cluster);
  for (const char* bad : {"redis://h1:7000,h2:7001", "redis-cluster://h1,,h2", "redis-cluster://",
                          "redis-cluster://h1:7000/1", "redis-cluster://h1,h2:0"}) {
    auto r = parseRedisUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(parseRedisUrl("redis://h1:7000,h2:7001").status().message().find("redis-cluster://"),
            std::string::npos);
}

TEST(RedisScriptTest, Sha1IsLowercaseHexOfTheSource) {
  const RedisScript s("return 1");
  EXPECT_EQ(s.sha1, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");  // sha1sum of "return 1"
  EXPECT_EQ(s.source, "return 1");
}

}  // namespace
}  // namespace infera::store
