#include "gateway/request_scan.h"

#include <gtest/gtest.h>

namespace infera::gateway {
namespace {

TEST(RequestScanTest, FindsModelStreamAndTheModelSpan) {
  simdjson::dom::parser p;
  const std::string body = R"({"messages":[{"model":"inner"}], "model" : "llama3", "stream":true,"x":{"model":1}})";
  const auto f = scanRequest(p, body);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->model, "llama3");
  EXPECT_TRUE(f->stream);
  EXPECT_EQ(body.substr(f->model_begin, f->model_end - f->model_begin), "\"llama3\"");
}

TEST(RequestScanTest, HandlesEscapesInStrings) {
  simdjson::dom::parser p;
  const std::string body = R"({"a":"x\",\"model\":\"no","model":"m\"1"})";
  const auto f = scanRequest(p, body);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->model, "m\"1");
  EXPECT_EQ(body.substr(f->model_begin, f->model_end - f->model_begin), R"("m\"1")");
}

TEST(RequestScanTest, RejectsMalformedAndNonObjectBodies) {
  simdjson::dom::parser p;
  EXPECT_EQ(scanRequest(p, "{bad").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(scanRequest(p, "[1,2]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(scanRequest(p, R"({"model":5})").status().code(), StatusCode::kInvalidArgument);
  const auto none = scanRequest(p, R"({"messages":[]})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_model);
}

}  // namespace
}  // namespace infera::gateway

namespace infera::gateway {
namespace {

TEST(RequestScanTest, RejectsDuplicateOrEscapedModelKeys) {
  simdjson::dom::parser p;
  EXPECT_EQ(scanRequest(p, R"({"model":"a","x":1,"model":"b"})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(scanRequest(p, R"({"mod\u0065l":"a"})").status().code(), StatusCode::kInvalidArgument);
  const auto ok = scanRequest(p, R"({"x":{"model":"inner"},"model":"a"})");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->model, "a");
}

}  // namespace
}  // namespace infera::gateway
