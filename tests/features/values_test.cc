// The value codec and Feast's JSON conversions (§6 of the Feast notes): what each type accepts,
// how it prints (floats widened, doubles never as integers, bytes base64), timestamps both ways.

#include <gtest/gtest.h>
#include <simdjson.h>

#include "features/internal/values.h"

namespace infera::features {
namespace {

class ValuesTest : public ::testing::Test {
 protected:
  // Encodes `json` as `type` and prints it back; "ERR: ..." when it is refused.
  std::string roundTrip(const std::string& json, const std::string& type, bool lenient = false) {
    auto t = parseFeatureType(type);
    EXPECT_TRUE(t.has_value()) << type;
    simdjson::dom::element e;
    EXPECT_EQ(parser_.parse(json).get(e), simdjson::SUCCESS) << json;
    std::string enc;
    Status s = encodeJsonValue(e, *t, lenient, enc);
    if (!s.isOk()) return "ERR: " + s.message();
    std::string_view in(enc);
    std::string out;
    bool was_null = false;
    EXPECT_TRUE(appendValueJson(in, *t, out, was_null));
    EXPECT_TRUE(in.empty());
    return out;
  }
  simdjson::dom::parser parser_;
};

TEST_F(ValuesTest, ParsesFeastAndPlainTypeNames) {
  EXPECT_EQ(typeName(*parseFeatureType("Float32")), "float");
  EXPECT_EQ(typeName(*parseFeatureType("float64")), "double");
  EXPECT_EQ(typeName(*parseFeatureType("UnixTimestamp")), "unix_timestamp");
  EXPECT_EQ(typeName(*parseFeatureType("Array(Int64)")), "list<int64>");
  EXPECT_EQ(typeName(*parseFeatureType("list<bytes>")), "list<bytes>");
  EXPECT_FALSE(parseFeatureType("Map").has_value());
  EXPECT_FALSE(parseFeatureType("Array(Array(Int64))").has_value());
}

TEST_F(ValuesTest, IntegersFollowPythonInt) {
  EXPECT_EQ(roundTrip("1001", "int64"), "1001");
  EXPECT_EQ(roundTrip("\"1001\"", "int64"), "1001");  // int("1001")
  EXPECT_EQ(roundTrip("12.9", "int64"), "12");        // truncated
  EXPECT_EQ(roundTrip("true", "int64"), "1");
  EXPECT_EQ(roundTrip("-9223372036854775808", "int64"), "-9223372036854775808");
  EXPECT_TRUE(roundTrip("\"abc\"", "int64").starts_with("ERR: expected an integer"));
  EXPECT_TRUE(roundTrip("3000000000", "int32").starts_with("ERR:"));
}

TEST_F(ValuesTest, DoublesAlwaysPrintAsFloats) {
  EXPECT_EQ(roundTrip("100", "double"), "100.0");
  EXPECT_EQ(roundTrip("0.5", "double"), "0.5");
  EXPECT_EQ(roundTrip("1e-05", "double"), "1e-05");
  EXPECT_TRUE(
      roundTrip("\"0.5\"", "double").starts_with("ERR:"));  // Feast refuses strings for Float64
  EXPECT_EQ(roundTrip("\"0.5\"", "double", true), "0.5");   // CSV ingest reads them
  // A float is stored as float32 and widened when printed, as Feast does.
  EXPECT_EQ(roundTrip("0.7", "float"), "0.699999988079071");
}

TEST_F(ValuesTest, StringsTakePythonStrOfScalars) {
  EXPECT_EQ(roundTrip("\"é\\\"x\"", "string"), "\"é\\\"x\"");
  EXPECT_EQ(roundTrip("1001", "string"), "\"1001\"");
  EXPECT_EQ(roundTrip("42.0", "string"), "\"42.0\"");
  EXPECT_EQ(roundTrip("true", "string"), "\"True\"");
}

// A stored string that is not UTF-8 (written before the door checked bodies) prints as U+FFFD,
// and a long string quoted in an error is cut between characters, not inside one.
TEST_F(ValuesTest, StringsPrintAsValidUtf8AndErrorsCutAtCharacters) {
  std::string enc(1, static_cast<char>(Scalar::kString));
  const std::string raw =
      "a\xff\xc3"
      "b";
  putVarint(enc, raw.size());
  enc += raw;
  std::string_view in(enc);
  std::string out;
  bool was_null = false;
  ASSERT_TRUE(appendValueJson(in, {Scalar::kString, false}, out, was_null));
  EXPECT_EQ(out,
            "\"a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b\"");
  std::string chars = "a";
  for (int i = 0; i < 30; ++i) chars += "é";  // 2 bytes each: byte 40 falls inside one
  const std::string err = roundTrip("\"" + chars + "\"", "int64");
  ASSERT_TRUE(err.starts_with("ERR: expected an integer")) << err;
  EXPECT_EQ(err.find("\xEF\xBF\xBD"), std::string::npos) << err;
  EXPECT_NE(err.find("\"" + chars.substr(0, 39) + "\""), std::string::npos) << err;
}

TEST_F(ValuesTest, BytesAreBase64BoolsAndListsAreChecked) {
  EXPECT_EQ(roundTrip("\"aGVsbG8=\"", "bytes"), "\"aGVsbG8=\"");
  EXPECT_TRUE(roundTrip("\"not base64!\"", "bytes").starts_with("ERR:"));
  EXPECT_EQ(roundTrip("1", "bool"), "true");
  EXPECT_TRUE(roundTrip("\"yes\"", "bool").starts_with("ERR:"));
  EXPECT_EQ(roundTrip("[1, 2.5]", "Array(Float64)"), "[1.0,2.5]");  // ints accepted in float lists
  EXPECT_EQ(roundTrip("[\"a\", \"b\"]", "Array(String)"), "[\"a\",\"b\"]");
  EXPECT_TRUE(roundTrip("[\"a\", 1]", "Array(String)").starts_with("ERR: element 1:"));
  EXPECT_EQ(roundTrip("null", "Array(Int64)"), "null");
  EXPECT_EQ(roundTrip("1715000000", "unix_timestamp"), "1715000000");
}

TEST_F(ValuesTest, AValueReadAsAnotherTypeIsRefused) {
  simdjson::dom::element e;
  ASSERT_EQ(parser_.parse(std::string("12")).get(e), simdjson::SUCCESS);
  std::string enc;
  ASSERT_TRUE(encodeJsonValue(e, {Scalar::kInt64, false}, false, enc).isOk());
  std::string_view in(enc);
  std::string out;
  bool was_null = false;
  EXPECT_FALSE(appendValueJson(in, {Scalar::kDouble, false}, out, was_null));
  EXPECT_TRUE(out.empty());
}

TEST_F(ValuesTest, ParsesTheTimestampFormsClientsSend) {
  const int64_t base = 1652439582LL * 1'000'000;  // 2022-05-13 10:59:42 UTC
  EXPECT_EQ(*parseTimestampText("2022-05-13 10:59:42+00:00"), base);
  EXPECT_EQ(*parseTimestampText("2022-05-13T10:59:42"), base);  // naive = UTC
  EXPECT_EQ(*parseTimestampText("2022-05-13T10:59:42Z"), base);
  EXPECT_EQ(*parseTimestampText("2022-05-13T12:59:42+02:00"), base);
  EXPECT_EQ(*parseTimestampText("2022-05-13 10:59:42.123456+00:00"), base + 123456);
  EXPECT_EQ(*parseTimestampText("2022-05-13T10:59:42.5"), base + 500000);
  EXPECT_EQ(*parseTimestampText("2022-05-13"), 1652400000LL * 1'000'000);
  EXPECT_FALSE(parseTimestampText("13/05/2022").ok());
  EXPECT_FALSE(parseTimestampText("2022-13-01").ok());
  simdjson::dom::element e;
  ASSERT_EQ(parser_.parse(std::string("1652439582")).get(e), simdjson::SUCCESS);
  EXPECT_EQ(*parseTimestamp(e), base);  // seconds
  ASSERT_EQ(parser_.parse(std::string("1652439582000")).get(e), simdjson::SUCCESS);
  EXPECT_EQ(*parseTimestamp(e), base);  // milliseconds
  ASSERT_EQ(parser_.parse(std::string("1652439582000000000")).get(e), simdjson::SUCCESS);
  EXPECT_EQ(*parseTimestamp(e), base);  // nanoseconds (pandas)
}

TEST_F(ValuesTest, PrintsTimestampsWithFeastsAdaptiveFraction) {
  const int64_t base = 1640991600LL * 1'000'000;  // 2021-12-31T23:00:00Z
  std::string s;
  appendTimestamp(s, base);
  EXPECT_EQ(s, "\"2021-12-31T23:00:00Z\"");
  s.clear();
  appendTimestamp(s, base + 500000);
  EXPECT_EQ(s, "\"2021-12-31T23:00:00.500Z\"");
  s.clear();
  appendTimestamp(s, base + 123456);
  EXPECT_EQ(s, "\"2021-12-31T23:00:00.123456Z\"");
  s.clear();
  appendTimestamp(s, 0);
  EXPECT_EQ(s, "\"1970-01-01T00:00:00Z\"");
}

TEST_F(ValuesTest, RowHeaderIsTheEventTime) {
  std::string row;
  putEventTime(row, -5);
  putEventTime(row, 1'700'000'000'123'456);
  EXPECT_EQ(eventTimeOf(row), -5);
  EXPECT_EQ(eventTimeOf(std::string_view(row).substr(8)), 1'700'000'000'123'456);
}

}  // namespace
}  // namespace infera::features
