#include "gateway/internal/request_scan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infera::gateway {
namespace {

TEST(RequestScanTest, FindsModelStreamAndTheModelSpan) {
  simdjson::dom::parser p;
  const std::string body =
      R"({"messages":[{"model":"inner"}], "model" : "llama3", "stream":true,"x":{"model":1}})";
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
  EXPECT_EQ(scanRequest(p, R"({"model":"a","x":1,"model":"b"})").status().code(),
            StatusCode::kInvalidArgument);
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

namespace infera::gateway {
namespace {

// One reading of a body: a key twice anywhere is refused, whatever its escapes, because readers
// disagree on which copy counts (simdjson and Go take the first, Python and nlohmann the last).
// Found by fuzz_usage_scan (corpus/usage_scan/usage_after_first_object): the scan went on past the
// end of the first top-level object and billed the usage of a second one.
TEST(RequestScanTest, FindTopLevelValueStopsAtTheEndOfTheTopLevelObject) {
  size_t b = 0, e = 0;
  EXPECT_FALSE(
      infera::gateway::findTopLevelValue(R"({} {"usage":{"prompt_tokens":8}})", "usage", b, e));
  EXPECT_FALSE(
      infera::gateway::findTopLevelValue(std::string_view("{}\0{\"usage\":1}", 14), "usage", b, e));
  EXPECT_TRUE(infera::gateway::findTopLevelValue(R"({"a":{},"usage":1})", "usage", b, e));
}

std::string lastValue(std::string_view json, std::string_view key) {
  size_t b = 0, e = 0;
  if (!findLastTopLevelValue(json, key, b, e)) return "<absent>";
  EXPECT_LE(b, e);
  EXPECT_LE(e, json.size());
  return std::string(json.substr(b, e - b));
}

// The walk back from the closing brace reads what a JSON parser keeps: the last of a key given
// twice (nlohmann, Python's json and JSON.parse keep the last), the top level only, through
// strings with quotes, escaped quotes and backslash runs.
TEST(RequestScanTest, FindLastTopLevelValueReadsTheValueAParserKeeps) {
  const std::string body =
      R"({"id":"c1","choices":[{"message":{"content":"say \"usage\": {\"x\":1} \\\\","usage":{"prompt_tokens":99}}}],)"
      R"("note":"ends with a backslash \\","usage":{"prompt_tokens":7,"completion_tokens":3}})";
  EXPECT_EQ(lastValue(body, "usage"), R"({"prompt_tokens":7,"completion_tokens":3})");
  EXPECT_EQ(lastValue(body, "note"), R"("ends with a backslash \\")");
  EXPECT_EQ(lastValue(body, "id"), R"("c1")");
  EXPECT_EQ(lastValue(body, "choices").substr(0, 13), R"([{"message":{)");
  EXPECT_EQ(lastValue(body, "prompt_tokens"), "<absent>");
  // After the usage object: a string that ends in an escaped quote, braces inside strings, an
  // even backslash run before a closing quote, a key with an escaped quote in it.
  EXPECT_EQ(lastValue(R"({"usage":{"a":1},"fp":"x\"}"})", "usage"), R"({"a":1})");
  EXPECT_EQ(lastValue(R"({"usage":{"a":"}\\"},"k":"{\\\\"})", "usage"), R"({"a":"}\\"})");
  EXPECT_EQ(lastValue(R"({"usage":2,"a\"b":[1,{"c":"]"}]})", "usage"), "2");
  EXPECT_EQ(lastValue(R"({"usage":2,"a\"b":[1,{"c":"]"}]})", "a\\\"b"), R"([1,{"c":"]"}])");
  // Scalars, spaces and newlines between tokens, an empty object.
  EXPECT_EQ(lastValue(" {\n \"a\" : true ,\t\"b\":-1.5e3 , \"c\" :null \r\n} \n", "a"), "true");
  EXPECT_EQ(lastValue(" {\n \"a\" : true ,\t\"b\":-1.5e3 , \"c\" :null \r\n} \n", "b"), "-1.5e3");
  EXPECT_EQ(lastValue(" {\n \"a\" : true ,\t\"b\":-1.5e3 , \"c\" :null \r\n} \n", "c"), "null");
  EXPECT_EQ(lastValue("{}", "a"), "<absent>");
  EXPECT_EQ(lastValue("{ }", "a"), "<absent>");
  // A key twice: the last one; nested keys of the same name do not count.
  EXPECT_EQ(lastValue(R"({"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}})", "usage"),
            R"({"prompt_tokens":2})");
  EXPECT_EQ(lastValue(R"({"x":{"b":1},"b":4,"y":{"b":5}})", "b"), "4");
  // Not an object.
  EXPECT_EQ(lastValue(R"([{"usage":1}])", "usage"), "<absent>");
  EXPECT_EQ(lastValue(R"("usage")", "usage"), "<absent>");
  EXPECT_EQ(lastValue("", "usage"), "<absent>");
}

TEST(RequestScanTest, FindLastTopLevelValuesReadsSeveralKeysInOneWalk) {
  const std::string_view usage = R"({"prompt_tokens":9,"total_tokens":25,"completion_tokens":16})";
  const std::string_view keys[] = {"prompt_tokens", "completion_tokens", "total_tokens", "x"};
  ValueSpan spans[4];
  findLastTopLevelValues(usage, keys, spans);
  const char* want[] = {"9", "16", "25"};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(spans[i].found) << keys[i];
    EXPECT_EQ(usage.substr(spans[i].begin, spans[i].end - spans[i].begin), want[i]);
  }
  EXPECT_FALSE(spans[3].found);
}

// The nested walk reads the counts of the usage object a parser keeps, in the same walk.
TEST(RequestScanTest, FindLastTopLevelValuesReadsANestedObjectOnTheWay) {
  auto counts = [](std::string_view json) {
    static constexpr std::string_view kOuter[] = {"usage"};
    static constexpr std::string_view kInner[] = {"prompt_tokens", "completion_tokens"};
    ValueSpan usage[1], inner[2];
    const NestedKeys nested{"usage", kInner, inner};
    findLastTopLevelValues(json, kOuter, usage, &nested);
    std::string out = usage[0].found ? "usage " : "no usage ";
    for (const ValueSpan& v : inner) {
      out += v.found ? std::string(json.substr(v.begin, v.end - v.begin)) : "-";
      out += ' ';
    }
    return out;
  };
  EXPECT_EQ(counts(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}})"),
            "usage 7 3 ");
  // Members after usage, objects among them (walked too, their keys not taken).
  EXPECT_EQ(
      counts(
          R"({"usage":{"prompt_tokens":7,"completion_tokens":3},"kv":{"prompt_tokens":1},"fp":"x"})"),
      "usage 7 3 ");
  // The last usage counts; inside it the last of a key given twice; nested deeper is skipped.
  EXPECT_EQ(
      counts(
          R"({"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":5,"d":{"completion_tokens":9},"prompt_tokens":6}})"),
      "usage 6 - ");
  // The last usage is not an object: no counts, though an earlier one was.
  EXPECT_EQ(counts(R"({"usage":{"prompt_tokens":1},"usage":null})"), "usage - - ");
  EXPECT_EQ(counts(R"({"a":{"prompt_tokens":1}})"), "no usage - - ");
  // An object walked whose key never comes (broken text) leaves nothing behind either.
  EXPECT_EQ(counts(R"({"usage":{"prompt_tokens":7},{"prompt_tokens":1}})"), "no usage - - ");
  // A broken usage object reads as nothing.
  EXPECT_EQ(counts(R"({"usage":{"prompt_tokens" 1}})"), "no usage - - ");
  EXPECT_EQ(counts(R"({"usage":{}})"), "usage - - ");
}

// On a well-formed object without a key twice both scans read the same span of every key; on any
// cut or damaged copy of it the walk back reads inside the text or nothing.
TEST(RequestScanTest, FindLastTopLevelValueAgreesWithTheForwardScanAndStaysInsideBrokenText) {
  const std::vector<std::string> texts = {
      R"({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a \"b\" \\ {c} [d]"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"total_tokens":21,"completion_tokens":16,"prompt_tokens_details":null},"prompt_logprobs":null})",
      R"({ "a" : [ ] , "b" : { } , "c" : "" , "d" : 0 , "e" : "\\" })",
      R"({"k\"ey":"v","n":[[[]]],"s":"\"\\\"\\\\"})",
  };
  for (const std::string& t : texts) {
    std::vector<JsonMember> members;
    ASSERT_TRUE(scanTopLevelMembers(t, members)) << t;
    for (const JsonMember& m : members) {
      if (m.escaped) continue;  // both compare keys as written
      size_t fb = 0, fe = 0, lb = 0, le = 0;
      ASSERT_TRUE(findTopLevelValue(t, m.key, fb, fe)) << m.key;
      ASSERT_TRUE(findLastTopLevelValue(t, m.key, lb, le)) << m.key;
      EXPECT_EQ(fb, lb) << t << " key " << m.key;
      EXPECT_EQ(fe, le) << t << " key " << m.key;
      EXPECT_EQ(fb, m.begin);
      EXPECT_EQ(fe, m.end);
    }
    for (size_t cut = 0; cut < t.size(); ++cut) {
      for (const std::string& broken :
           {t.substr(0, cut), t.substr(cut), t.substr(0, cut) + t.substr(cut + 1),
            t.substr(0, cut) + '"' + t.substr(cut + 1), t.substr(0, cut) + '\\' + t.substr(cut + 1),
            t.substr(0, cut) + '}' + t.substr(cut + 1)}) {
        for (const char* key : {"usage", "a", "s", "n", "e"}) lastValue(broken, key);
      }
    }
  }
}

TEST(RequestScanTest, RefusesAKeyTwiceInAnyObjectAfterUnescaping) {
  simdjson::dom::parser p;
  for (const char* body : {
           R"({"model":"echo-a","mod\u0065l":"echo-b","messages":[]})",
           R"({"model":"m","max_tokens":100,"max_tok\u0065ns":1})",
           R"({"model":"m","max_tokens":100,"max_tokens":1})",
           R"({"model":"m","stream":false,"stream":true})",
           R"({"model":"m","stream_options":{"include_usage":true,"include_usag\u0065":false}})",
           R"({"model":"m","messages":[{"role":"user","content":"a","content":"b"}]})",
           R"({"model":"m","messages":[{"role":"user","content":"a","c\u006fntent":"b"}]})",
           R"({"model":"m","tools":[{"function":{"parameters":{"x":1,"x":2}}}]})",
       }) {
    const auto f = scanRequest(p, body);
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(f.status().message().find("twice"), std::string::npos) << f.status().message();
  }
  // The same key in different objects is fine, and so are escapes in nested keys and values.
  const auto ok = scanRequest(
      p, R"({"model":"m","messages":[{"content":"a"},{"content":"b"}],"x":{"pr\u00e9nom":1}})");
  EXPECT_TRUE(ok.ok()) << ok.status().message();
}

TEST(RequestScanTest, ReadsEveryFieldItDecidesOnWithItsType) {
  simdjson::dom::parser p;
  const auto f = scanRequest(
      p,
      R"({"model":"m","stream":true,"max_tokens":50,"max_completion_tokens":20,"n":3,"temperature":0,)"
      R"("user":"u","stream_options":{"include_usage":true,"other":[1, 2]}})");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f->stream);
  EXPECT_EQ(f->max_tokens, 20);  // max_completion_tokens supersedes max_tokens
  EXPECT_EQ(f->n, 3);
  EXPECT_TRUE(f->has_temperature);
  EXPECT_EQ(f->temperature, 0);
  EXPECT_TRUE(f->include_usage);
  EXPECT_EQ(f->stream_options_rest, R"(,"other":[1,2])");
  // A field the gateway decides on, of a type the backend might coerce differently, is refused.
  for (const char* body : {
           R"({"model":"m","stream":"true"})",
           R"({"model":"m","max_tokens":"100"})",
           R"({"model":"m","max_tokens":1.5})",
           R"({"model":"m","max_tokens":-1})",
           R"({"model":"m","max_tokens":18446744073709551615})",
           R"({"model":"m","n":"2"})",
           R"({"model":"m","temperature":"0"})",
           R"({"model":"m","user":7})",
           R"({"model":"m","stream_options":[]})",
           R"({"model":"m","stream_options":{"include_usage":"yes"}})",
       }) {
    EXPECT_EQ(scanRequest(p, body).status().code(), StatusCode::kInvalidArgument) << body;
  }
  // Null is "not given".
  const auto nulls =
      scanRequest(p, R"({"model":"m","stream":null,"max_tokens":null,"temperature":null})");
  ASSERT_TRUE(nulls.ok()) << nulls.status().message();
  EXPECT_FALSE(nulls->stream);
  EXPECT_EQ(nulls->max_tokens, -1);
  EXPECT_FALSE(nulls->has_temperature);
}

// The response cache keys on the same reading: whitespace, key order and escapes do not change
// the key, values do, and model, user and stream_options are not part of it.
TEST(RequestScanTest, CanonicalFormIgnoresWhitespaceKeyOrderAndEscapesButNotValues) {
  simdjson::dom::parser p;
  auto canon = [&](const std::string& body) {
    auto f = scanRequest(p, body, true);
    EXPECT_TRUE(f.ok()) << f.status().message();
    return f.ok() ? f->canonical : std::string();
  };
  const std::string a =
      canon(R"({"model":"m","temperature":0,"messages":[{"role":"user","content":"x"}]})");
  const std::string b = canon(
      R"({ "messages": [{"content":"\u0078","role":"user"}], "temperature": 0, "model": "alias", "user":"u" })");
  const std::string c =
      canon(R"({"model":"m","temperature":0,"messages":[{"role":"user","content":"y"}]})");
  const std::string d =
      canon(R"({"model":"m","temperature":0.0,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, R"({"messages":[{"content":"x","role":"user"}],"temperature":0})");
  EXPECT_EQ(d, R"({"messages":[{"content":"x","role":"user"}],"temperature":0})");
  // Minus zero is zero, and its canonical form reads back as itself (fuzz_request_scan).
  const std::string e =
      canon(R"({"model":"m","temperature":-0.0,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(e, a);
  EXPECT_EQ(canon(e), e);
  EXPECT_EQ(scanRequest(p, "not json", true).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace infera::gateway
