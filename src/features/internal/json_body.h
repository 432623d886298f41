#pragma once
// Request bodies of the feature API, parsed with simdjson (one parser per loop on the serving
// path) under the floor's rules, the ones core/json.h's readJson() applies to every other body:
//   - nesting deeper than JsonLimits::max_depth (128) is refused before anything is parsed, by
//     the floor's own scan (jsonDepth);
//   - the text must be valid UTF-8 (simdjson validates all of its input);
//   - a key given twice in one object is refused (simdjson keeps both and `at_key` finds the
//     first, where nlohmann keeps the last: one body must not read two ways), checked on the
//     parsed document.
// readJson() itself is not used on these routes: nlohmann builds a tree of small allocations that
// costs several times simdjson's parse on the request path.
//
// Pure functions, thread-safe (the parser is the caller's).

#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>

namespace infera::features {

struct BodyError {
  // Refused by the floor's rules (too deep, a duplicate key, invalid UTF-8): answered 400. Else
  // the text is not JSON at all: Feast (FastAPI) answers that 422 "JSON decode error".
  bool refused = false;
  std::string message;
};

// Parses `body` into `doc` (valid until `parser` parses again), or says what is wrong.
std::optional<BodyError> parseBody(simdjson::dom::parser& parser, std::string_view body,
                                   simdjson::dom::element& doc);

// The first key given twice in one object anywhere in `e`, or nothing.
std::optional<std::string> duplicateKey(simdjson::dom::element e);

}  // namespace infera::features
