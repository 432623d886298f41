// Fuzz target: the floor's JSON reader for request bodies (core/json.h: readJson and
// readOrderedJson), which the registry, the vector index, the feature store, access control's
// admin API, the config API and the admission webhook all read their bodies through. The input is
// a body.
//
// Properties, for every input:
//  - a body it accepts is what nlohmann (the strict parser, no callback) reads, nests no deeper
//    than the limit, and has no object with a key twice (nlohmann keeps the last of two, so the
//    number of keys the SAX events saw equals the members the DOM kept); ordered and unordered
//    readings agree;
//  - a body it refuses is malformed for nlohmann, or nests past the limit, or has a key twice;
//  - the refusal's message is valid UTF-8 (it never echoes the bytes it refused);
//  - what dumpJson writes of an accepted body is valid UTF-8 and reads back as the same value.

#include <cstdint>
#include <string>
#include <string_view>

#include "core/json.h"
#include "core/utf8.h"
#include "fuzz_check.h"

namespace {

using infera::fuzz::printable;
using Json = nlohmann::json;

// Counts key events and the members objects end up with.
struct KeyCounter : nlohmann::json_sax<Json> {
  uint64_t keys = 0;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override {
    ++keys;
    return true;
  }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

uint64_t members(const Json& j) {
  uint64_t n = 0;
  if (j.is_object()) n += j.size();
  if (j.is_structured()) {
    for (const auto& v : j) n += members(v);
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  // nlohmann reads a NUL as the end of input; the floor's reader is nlohmann too, so inputs with
  // NUL tell nothing about the differential.
  if (body.find('\0') != std::string_view::npos) return 0;
  const infera::JsonLimits limits;  // the defaults every service uses
  const auto read = infera::readJson(body, limits);
  const auto ordered = infera::readOrderedJson(body, limits);
  FUZZ_CHECK(read.ok() == ordered.ok(),
             "ordered and unordered readings disagree on " + printable(body));
  const int depth = infera::jsonDepth(body, limits.max_depth);
  if (!read.ok()) {
    FUZZ_CHECK(infera::validUtf8(read.status().message()),
               "a refusal's message is not valid UTF-8: " + printable(read.status().message()));
    if (depth > limits.max_depth) return 0;
    const Json strict = Json::parse(body.begin(), body.end(), nullptr, false);
    if (strict.is_discarded()) return 0;
    KeyCounter counter;
    Json::sax_parse(body.begin(), body.end(), &counter);
    FUZZ_CHECK(counter.keys > members(strict),
               "refused a body nlohmann reads, within the depth limit, with no key twice: " +
                   printable(body) + " (" + read.status().message() + ")");
    return 0;
  }
  FUZZ_CHECK(depth <= limits.max_depth,
             "accepted a body nesting past the limit: " + printable(body));
  const Json strict = Json::parse(body.begin(), body.end(), nullptr, false);
  FUZZ_CHECK(!strict.is_discarded(), "accepted a body nlohmann refuses: " + printable(body));
  FUZZ_CHECK(*read == strict, "read differently from nlohmann: " + printable(body));
  KeyCounter counter;
  Json::sax_parse(body.begin(), body.end(), &counter);
  FUZZ_CHECK(counter.keys == members(strict), "accepted a key given twice: " + printable(body));
  FUZZ_CHECK(Json(*ordered) == strict, "the ordered reading differs: " + printable(body));
  const std::string text = infera::dumpJson(*read);
  FUZZ_CHECK(infera::validUtf8(text), "dumpJson wrote ill-formed UTF-8 for " + printable(body));
  const auto again = infera::readJson(text, limits);
  FUZZ_CHECK(again.ok() && *again == *read,
             "dumpJson's text does not read back as the value: " + printable(text));
  return 0;
}
