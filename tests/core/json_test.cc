#include "core/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/utf8.h"

namespace infera {
namespace {

TEST(Utf8Test, AcceptsWellFormedAndRefusesIllFormedSequences) {
  EXPECT_TRUE(validUtf8(""));
  EXPECT_TRUE(validUtf8("plain ascii that is longer than eight bytes"));
  EXPECT_TRUE(validUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(validUtf8("\xFF"));
  EXPECT_FALSE(validUtf8("Jos\xE9"));           // Latin-1
  EXPECT_FALSE(validUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(validUtf8("\xED\xA0\x80"));      // a UTF-16 surrogate
  EXPECT_FALSE(validUtf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(validUtf8("abcdefgh\xE2\x82"));  // cut inside a character
  EXPECT_EQ(validUtf8Prefix("abc\xFF"
                            "def"),
            3u);
}

TEST(Utf8Test, ReplacesEachBadByteAndTruncatesAtCharacterBoundaries) {
  EXPECT_EQ(toValidUtf8("Jos\xE9!"), "Jos\xEF\xBF\xBD!");
  EXPECT_EQ(toValidUtf8("ok"), "ok");
  EXPECT_TRUE(validUtf8(toValidUtf8("\xFF\xFE\xC3")));
  // "é" is two bytes: a cut after its first byte backs off to before it.
  EXPECT_EQ(truncateUtf8("ab\xC3\xA9", 3), "ab");
  EXPECT_EQ(truncateUtf8("ab\xC3\xA9", 4), "ab\xC3\xA9");
  EXPECT_EQ(truncateUtf8("\xF0\x9F\x98\x80x", 2), "");
  EXPECT_EQ(truncateUtf8("abcdef", 3), "abc");
}

TEST(Utf8Test, ChecksPercentDecodedTargets) {
  EXPECT_TRUE(validPercentEncodedUtf8("/collections/caf%C3%A9?x=1"));
  EXPECT_FALSE(validPercentEncodedUtf8("/api/2.0/mlflow/registered-models/get?name=%FF"));
  EXPECT_FALSE(validPercentEncodedUtf8("/a?b=%E9"));
  EXPECT_FALSE(validPercentEncodedUtf8("/a?b=100%"));  // a malformed escape
  EXPECT_FALSE(validPercentEncodedUtf8("/a?b=%zz"));
  EXPECT_FALSE(validPercentEncodedUtf8("/raw\xFF"));
}

TEST(JsonReaderTest, ReadsAValidBody) {
  const auto j = readJson(R"({"a":[1,2,{"b":"caf\u00e9"}],"c":null})");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ((*j)["a"][2]["b"], "caf\xC3\xA9");
  const auto o = readOrderedJson(R"({"z":1,"a":2})");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->begin().key(), "z");
}

TEST(JsonReaderTest, RefusesNestingPastTheLimitBeforeBuildingIt) {
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const auto j = readJson(deep);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("deeper than 128"), std::string::npos);
  // Exactly at the limit is fine; one more is not. Brackets inside strings do not count.
  EXPECT_TRUE(readJson(std::string(128, '[') + std::string(128, ']')).ok());
  EXPECT_FALSE(readJson(std::string(129, '[') + std::string(129, ']')).ok());
  EXPECT_TRUE(readJson("[\"" + std::string(500, '[') + "\"]").ok());
  EXPECT_FALSE(readJson(std::string(5, '{'), JsonLimits{1024, 4}).ok());
}

TEST(JsonReaderTest, RefusesAKeyGivenTwiceInOneObject) {
  const auto j = readJson(R"({"sample":0.5,"x":{"a":1},"sample":1})");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("a key given twice in one object: \"sample\""),
            std::string::npos)
      << j.status().message();
  // The same key in two different objects is fine.
  EXPECT_TRUE(readJson(R"({"a":{"k":1},"b":{"k":2},"k":3})").ok());
  // Escaped spellings of one name are the same key.
  EXPECT_FALSE(readJson(R"({"name":1,"n\u0061me":2})").ok());
}

TEST(JsonReaderTest, RefusesIllFormedUtf8AndMalformedTextWithoutEchoingBytes) {
  const auto bad = readJson("{\"a\":\"Jos\xE9\"}");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("UTF-8"), std::string::npos) << bad.status().message();
  EXPECT_TRUE(validUtf8(bad.status().message()));
  EXPECT_FALSE(readJson("").ok());
  EXPECT_FALSE(readJson("{\"a\":").ok());
  EXPECT_FALSE(readJson("[1,]").ok());
  EXPECT_FALSE(readJson(R"(["\ud800"])").ok());  // an unpaired surrogate
  const auto big = readJson("[1]", JsonLimits{2, 128});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kPayloadTooLarge);
}

TEST(JsonReaderTest, DumpNeverThrowsNorWritesIllFormedUtf8OrNonFiniteNumbers) {
  nlohmann::json j;
  j["name"] = std::string("Jos\xE9");
  j["score"] = std::numeric_limits<double>::infinity();
  j["nan"] = std::nan("");
  const std::string text = dumpJson(j);
  EXPECT_TRUE(validUtf8(text));
  EXPECT_EQ(text, "{\"name\":\"Jos\xEF\xBF\xBD\",\"nan\":null,\"score\":null}");
  EXPECT_TRUE(readJson(text).ok());
}

}  // namespace
}  // namespace infera
