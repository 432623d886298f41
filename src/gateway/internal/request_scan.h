#pragma once
// Gateway internals: the one reading of an OpenAI request body. Every field the gateway decides
// on (model, stream, stream_options, max_tokens, max_completion_tokens, n, temperature, user) is
// read from one parse, a body with a key twice in any object is refused, and the cache's key is
// built from the same parse (a canonical form). The body itself is forwarded untouched (except
// the model value when a deployment renames it and stream_options when usage must be asked for).

#include <simdjson.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace infera::gateway {

struct RequestFields {
  std::string model;
  bool has_model = false;
  bool stream = false;
  // Byte span of the top-level "model" value token (quotes included) in the body.
  size_t model_begin = 0;
  size_t model_end = 0;
  // For governance: the reservation's worst case, the cache rule and stream usage.
  int64_t max_tokens = -1;  // max_tokens or max_completion_tokens; -1 = absent
  int64_t n = 1;
  bool has_temperature = false;
  double temperature = 1;
  bool has_stream_options = false;
  bool include_usage = false;
  bool continuous_usage = false;
  size_t stream_options_begin = 0;  // byte span of the stream_options value
  size_t stream_options_end = 0;
  std::string stream_options_rest;  // its other members, as ,"k":v,... (minified)
  // With `canonical`: the body without model, user and stream_options, keys sorted at every depth,
  // strings and numbers written one way (what the response cache keys on).
  std::string canonical;
  // The parsed body, for reading more of it (the prompt's prefix blocks): valid until the parser's
  // next parse, so only before the request's first co_await.
  simdjson::dom::element root;
};

// One top-level member of a JSON object text: its key unescaped and its value's byte span.
struct JsonMember {
  std::string key;
  bool escaped = false;  // the key was written with escapes
  size_t begin = 0;
  size_t end = 0;
};
// The members of a well-formed JSON object text, in order; false if it is not one.
bool scanTopLevelMembers(std::string_view json, std::vector<JsonMember>& out);
// A JSON string token (quotes included) unescaped (\uXXXX and surrogate pairs to UTF-8); false
// when it is not one.
bool unescapeJsonString(std::string_view quoted, std::string& out);

// kInvalidArgument for malformed JSON, a non-object body, a key twice in an object, or a field the
// gateway decides on with the wrong type. A missing model is not an error here (has_model =
// false) so the caller can answer with the right message.
Result<RequestFields> scanRequest(simdjson::dom::parser& parser, const std::string& body,
                                  bool canonical = false);

// Byte span of the first top-level occurrence of the key's value in a JSON object text, keys
// compared as written (for backends' answers; requests go through scanRequest); false if absent.
// *count, when given, receives the number of top-level occurrences.
bool findTopLevelValue(std::string_view json, std::string_view key, size_t& begin, size_t& end,
                       int* count = nullptr);

// A value's byte span in a JSON text.
struct ValueSpan {
  bool found = false;
  size_t begin = 0;
  size_t end = 0;
};
// The last top-level occurrence of each key (compared as written) in a JSON object text, the one a
// JSON parser keeps, read walking back from the object's closing brace: only the members after it
// are read, so a key written last (usage, in OpenAI-compatible answers) costs the bytes of its own
// value whatever the size of the answer. spans[i] is keys[i]'s (found = false if absent). On a
// well-formed object this is what a parser reads; on other text, some span of it or nothing.
// With `nested`, the same walk also reads keys of the object value of the member `of` (its last
// occurrence; `of` should be one of keys), as it passes it: nested->spans[i] is nested->keys[i]'s
// (offsets in json). So usage and its token counts cost one walk.
struct NestedKeys {
  std::string_view of;
  std::span<const std::string_view> keys;
  std::span<ValueSpan> spans;
};
void findLastTopLevelValues(std::string_view json, std::span<const std::string_view> keys,
                            std::span<ValueSpan> spans, const NestedKeys* nested = nullptr);
bool findLastTopLevelValue(std::string_view json, std::string_view key, size_t& begin, size_t& end);

}  // namespace infera::gateway
