#include "features/internal/json_body.h"

#include <algorithm>
#include <vector>

#include "core/json.h"

namespace infera::features {

std::optional<std::string> duplicateKey(simdjson::dom::element e) {
  simdjson::dom::array arr;
  if (e.get(arr) == simdjson::SUCCESS) {
    for (simdjson::dom::element v : arr) {
      if (v.is_array() || v.is_object()) {
        if (auto d = duplicateKey(v)) return d;
      }
    }
    return std::nullopt;
  }
  simdjson::dom::object obj;
  if (e.get(obj) != simdjson::SUCCESS) return std::nullopt;
  // Bodies' objects are small (a few fields, a data frame's columns): a linear scan up to a few
  // dozen keys, sorting past that.
  constexpr size_t kLinear = 32;
  std::vector<std::string_view> keys;
  for (auto field : obj) {
    if (keys.size() < kLinear) {
      for (std::string_view k : keys) {
        if (k == field.key) return std::string(k);
      }
    }
    keys.push_back(field.key);
    if (field.value.is_array() || field.value.is_object()) {
      if (auto d = duplicateKey(field.value)) return d;
    }
  }
  if (keys.size() > kLinear) {
    std::sort(keys.begin(), keys.end());
    const auto at = std::adjacent_find(keys.begin(), keys.end());
    if (at != keys.end()) return std::string(*at);
  }
  return std::nullopt;
}

std::optional<BodyError> parseBody(simdjson::dom::parser& parser, std::string_view body,
                                   simdjson::dom::element& doc) {
  const JsonLimits limits;
  if (jsonDepth(body, limits.max_depth) > limits.max_depth) {
    return BodyError{true, "the JSON body nests arrays and objects deeper than " +
                               std::to_string(limits.max_depth) + " levels"};
  }
  const simdjson::error_code err = parser.parse(body.data(), body.size(), true).get(doc);
  if (err == simdjson::UTF8_ERROR) return BodyError{true, "the JSON body is not valid UTF-8"};
  if (err != simdjson::SUCCESS) return BodyError{false, "JSON decode error"};
  if (auto d = duplicateKey(doc)) {
    std::string msg = "the key ";
    msg += dumpJson(nlohmann::json(*d));
    msg += " is given twice in one object";
    return BodyError{true, std::move(msg)};
  }
  return std::nullopt;
}

}  // namespace infera::features
