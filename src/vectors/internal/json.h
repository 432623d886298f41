#pragma once
// JSON for the vector index: nlohmann's ordered_json (payloads keep their key order, integers and
// floats stay distinct, u64 ids keep full precision). Parsing never throws here: parse() returns
// an error instead, and dump() replaces invalid UTF-8.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "core/status.h"

namespace infera::vectors {

using Json = nlohmann::ordered_json;

// kInvalidArgument "Format error in JSON body: ..." on malformed JSON.
inline Result<Json> parseJson(std::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return Status::invalidArgument("Format error in JSON body: malformed JSON");
  return j;
}

inline std::string dumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Shortest round-trip text of a float, as JSON ("0.5", "1e-07"; NaN and inf never reach here).
void appendFloat(std::string& out, float v);

}  // namespace infera::vectors
