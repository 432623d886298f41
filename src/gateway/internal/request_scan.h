#pragma once
// Private to the gateway. Reads only the fields routing needs from an OpenAI request body; the
// body itself is forwarded untouched (except the model value when a deployment renames it).

#include <simdjson.h>

#include <string>
#include <string_view>

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
};

// kInvalidArgument for malformed JSON or a non-object body. A missing model is not an error here
// (has_model = false) so the caller can answer with the right message.
Result<RequestFields> scanRequest(simdjson::dom::parser& parser, const std::string& body);

// Byte span of the first top-level occurrence of the (unescaped) key's value in a JSON object
// text; false if absent. *count, when given, receives the number of top-level occurrences.
bool findTopLevelValue(std::string_view json, std::string_view key, size_t& begin, size_t& end,
                       int* count = nullptr);

}  // namespace infera::gateway
