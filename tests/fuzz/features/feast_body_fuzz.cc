// Fuzz target: the feature server's reading of request bodies (features/internal/json_body.h:
// simdjson under the floor's rules), differential against the floor's own reader (core/json.h
// readJson, nlohmann): one body must read one way whichever reader a service uses. The input is a
// body such as POST /get-online-features takes.
//
// Properties, for every input:
//  - the two readers agree on accepting it (both refuse nesting past 128, ill-formed UTF-8 and a
//    key given twice; both refuse text that is not JSON);
//  - an accepted body reads as the same value through both (simdjson's text of it, read by
//    nlohmann, equals readJson's value);
//  - the refusal's message is valid UTF-8.
// Numbers that the two parsers represent differently by design are left out: integers beyond
// 64 bits (simdjson refuses them, nlohmann reads a double) and NUL bytes (nlohmann stops there).

#include <cstdint>
#include <string>
#include <string_view>

#include "core/json.h"
#include "core/utf8.h"
#include "features/internal/json_body.h"
#include "fuzz_check.h"

namespace {
using infera::fuzz::printable;

// A run of 20 or more digits: an integer past 64 bits, or a long mantissa nlohmann and simdjson
// may round differently.
bool hasLongNumber(std::string_view s) {
  int run = 0;
  for (const char c : s) {
    run = (c >= '0' && c <= '9') ? run + 1 : 0;
    if (run >= 20) return true;
  }
  return false;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  if (body.find('\0') != std::string_view::npos || hasLongNumber(body)) return 0;
  static simdjson::dom::parser parser;
  simdjson::dom::element doc;
  const auto error = infera::features::parseBody(parser, body, doc);
  const auto floor = infera::readJson(body);
  if (error) {
    FUZZ_CHECK(infera::validUtf8(error->message),
               "a message that is not UTF-8: " + printable(error->message));
  }
  FUZZ_CHECK(!error == floor.ok(),
             std::string("the readers disagree: features ") +
                 (error ? "refuses (" + error->message + ")" : std::string("accepts")) +
                 ", the floor " +
                 (floor.ok() ? "accepts" : "refuses (" + floor.status().message() + ")") + ": " +
                 printable(body));
  if (!error) {
    const std::string text = simdjson::to_string(doc);
    const auto again = infera::readJson(text);
    FUZZ_CHECK(again.ok() && *again == *floor,
               "read differently: " + printable(text) + " vs " + infera::dumpJson(*floor));
  }
  return 0;
}
