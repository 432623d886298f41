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
  // Characters a lenient parser accepts inside a password.
  EXPECT_EQ(redactUrl("redis://:pa?ss#w/rd@cache:6379"), "redis://:***@cache:6379");
  // A password parameter.
  EXPECT_EQ(redactUrl("postgresql://db/x?sslmode=require&password=s3cret&user=a"),
            "postgresql://db/x?sslmode=require&password=***&user=a");
  EXPECT_EQ(redactUrl("host=db password=s3cret dbname=x"), "host=db password=*** dbname=x");
}

}  // namespace
}  // namespace infera
