#include "core/status.h"

#include <gtest/gtest.h>

namespace infera {
namespace {

Result<int> parsePositive(int v) {
  if (v <= 0) return Status::invalidArgument("must be positive, got " + std::to_string(v));
  return v;
}

Result<int> doubled(int v) {
  INFERA_ASSIGN_OR_RETURN(int x, parsePositive(v));
  return x * 2;
}

Status checkBoth(int a, int b) {
  INFERA_RETURN_IF_ERROR(parsePositive(a));
  INFERA_RETURN_IF_ERROR(parsePositive(b));
  return Status::ok();
}

TEST(StatusTest, OkStatusHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.toString(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeMessageAndContext) {
  const Status s = Status::notFound("no route for model x").withContext("router");
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.toString(), "NOT_FOUND: router: no route for model x");
  const Status copy = s;
  EXPECT_EQ(copy.message(), s.message());
}

TEST(StatusTest, AssignOrReturnPropagatesErrorsAndValues) {
  EXPECT_EQ(*doubled(4), 8);
  const auto bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "must be positive, got -1");
}

TEST(StatusTest, ReturnIfErrorStopsAtFirstError) {
  EXPECT_TRUE(checkBoth(1, 2).isOk());
  EXPECT_EQ(checkBoth(1, -5).message(), "must be positive, got -5");
}

TEST(StatusDeathTest, ValueOnErrorResultAborts) {
  Result<int> r = Status::internal("boom");
  EXPECT_DEATH({ (void)r.value(); }, "boom");
}

}  // namespace
}  // namespace infera
