#pragma once
// The one JSON reader for request bodies and query values (DESIGN.md, "the floor under every
// route"): a size limit, a nesting-depth limit checked before anything is built, UTF-8 validated
// (nlohmann's lexer refuses ill-formed strings), and a key given twice in one object refused (a
// reader that kept the first and one that kept the last would read one body two ways). Handlers
// never parse raw bodies themselves: they call readJson() and map its kInvalidArgument to their
// API's error shape. dumpJson() never throws (ill-formed UTF-8 from stores written before the
// door is replaced) and never writes a non-finite number (NaN and infinities become null, which
// is what JSON can say).
//
//   INFERA_ASSIGN_OR_RETURN(nlohmann::json body, readJson(req.body));
//   const std::string text = dumpJson(answer);
//
// Thread-safe (no state).

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace infera {

struct JsonLimits {
  size_t max_bytes = 64 * 1024 * 1024;  // the servers' body limits are usually smaller
  int max_depth = 128;                  // arrays and objects nested in each other
};

// kInvalidArgument with what is wrong ("nests deeper than 128 levels", "a key given twice in one
// object: \"a\"", "malformed JSON at byte 12: ...", "invalid UTF-8 ..."); kPayloadTooLarge
// past max_bytes. An empty text is malformed (callers that accept no body check for it first).
Result<nlohmann::json> readJson(std::string_view text, const JsonLimits& limits = {});
Result<nlohmann::ordered_json> readOrderedJson(std::string_view text,
                                               const JsonLimits& limits = {});

// The deepest nesting of arrays and objects in `text` (strings skipped), scanning no further than
// one level past `stop_at`. Malformed text gives some number; the parser reports the error.
int jsonDepth(std::string_view text, int stop_at);

// Compact JSON text; never throws.
std::string dumpJson(const nlohmann::json& j);
std::string dumpJson(const nlohmann::ordered_json& j);

}  // namespace infera
