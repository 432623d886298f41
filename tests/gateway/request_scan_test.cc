#include "gateway/internal/request_scan.h"

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

TEST(RequestScanTest, FindTopLevelValueSkipsStringsWithEscapedQuotesAndBackslashRuns) {
  auto value = [](std::string_view json, std::string_view key) {
    size_t b = 0, e = 0;
    if (!infera::gateway::findTopLevelValue(json, key, b, e)) return std::string("<absent>");
    return std::string(json.substr(b, e - b));
  };
  // A completion whose content holds quotes, escaped quotes, backslash runs and a decoy "usage".
  const std::string body =
      R"({"id":"c1","choices":[{"message":{"content":"say \"usage\": {\"x\":1} \\\\","usage":{"prompt_tokens":99}}}],)"
      R"("note":"ends with a backslash \\","usage":{"prompt_tokens":7,"completion_tokens":3}})";
  EXPECT_EQ(value(body, "usage"), R"({"prompt_tokens":7,"completion_tokens":3})");
  EXPECT_EQ(value(body, "note"), R"("ends with a backslash \\")");
  EXPECT_EQ(value(body, "id"), R"("c1")");
  // An escaped quote right after the opening one, and one preceded by an odd run of backslashes.
  EXPECT_EQ(value(R"({"a":"\"","b":1})", "b"), "1");
  EXPECT_EQ(value(R"({"a":"x\\\"y","b":2})", "b"), "2");
  EXPECT_EQ(value(R"({"a":"x\\\\","b":3})", "b"), "3");
  // The key itself must match unescaped, at the top level only.
  EXPECT_EQ(value(R"({"x":{"b":1},"b":4})", "b"), "4");
  EXPECT_EQ(value(R"({"x":{"b":1}})", "b"), "<absent>");
  // A string of an even backslash run only; an escaped quote as the very last byte (the string
  // never ends: the scan stops at the end of the text).
  EXPECT_EQ(value(R"({"a":"\\\\","b":6})", "b"), "6");
  EXPECT_EQ(value(R"({"a":"x\")", "a"), R"("x\")");
  EXPECT_EQ(value(R"({"b":"x\")", "c"), "<absent>");
}
