#pragma once
// JSON for the vector index: nlohmann's ordered_json (payloads keep their key order, integers and
// floats stay distinct, u64 ids keep full precision). Request bodies are read by the shared reader
// (core/json.h: size and depth limits, UTF-8, duplicate keys), its errors put in Qdrant's words;
// files this process wrote itself are read back without the request limits. Nothing here throws,
// and every writer replaces ill-formed UTF-8 and never writes a non-finite number.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "core/json.h"
#include "core/status.h"
#include "core/utf8.h"

namespace infera::vectors {

using Json = nlohmann::ordered_json;
using ::infera::dumpJson;

// A request body: kInvalidArgument "Format error in JSON body: <why>" (malformed, nested deeper
// than the floor's limit, ill-formed UTF-8, a key given twice), kPayloadTooLarge past the limit.
inline Result<Json> readBody(std::string_view text) {
  auto j = readOrderedJson(text);
  if (j.ok()) return j;
  if (j.status().code() != StatusCode::kInvalidArgument) return j.takeStatus();
  return Status::invalidArgument("Format error in JSON body: " + j.status().message());
}

// JSON this process wrote (config.json, WAL ops, snapshot payloads): kInvalidArgument when it
// does not parse. Not for request input (no limits: what is stored was checked when it came in,
// and a store from an older version must still open: ill-formed UTF-8 in it reads as U+FFFD).
inline Result<Json> parseStoredJson(std::string_view text) {
  std::string repaired;
  if (!validUtf8(text)) {
    repaired = toValidUtf8(text);
    text = repaired;
  }
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return Status::invalidArgument("malformed stored JSON");
  return j;
}

// Shortest round-trip text of a float, as JSON ("0.5", "1e-07"); NaN and infinities, which the
// API refuses at the door, are written as null rather than as text no JSON reader takes.
void appendFloat(std::string& out, float v);

}  // namespace infera::vectors
