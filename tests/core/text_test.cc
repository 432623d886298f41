#include "core/text.h"

#include <gtest/gtest.h>

namespace infera {
namespace {

TEST(RedactUrl, HidesThePasswordAndKeepsTheRest) {
  EXPECT_EQ(redactUrl("postgresql://infera:s3cret@db.internal:5432/infera?sslmode=require"),
            "postgresql://infera:***@db.internal:5432/infera?sslmode=require");
  EXPECT_EQ(redactUrl("redis://:p@ss@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
  // Nothing to hide: unchanged.
  EXPECT_EQ(redactUrl("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
  EXPECT_EQ(redactUrl("postgresql://infera@db/x"), "postgresql://infera@db/x");
  EXPECT_EQ(redactUrl("sqlite:/var/lib/infera/gov.db"), "sqlite:/var/lib/infera/gov.db");
  // An '@' or ':' after the authority is not a password.
  EXPECT_EQ(redactUrl("postgresql://db/x?user=a:b@c"), "postgresql://db/x?user=a:b@c");
}

}  // namespace
}  // namespace infera
