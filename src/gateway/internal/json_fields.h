#pragma once
// Reading fields of an already-parsed JSON body without exceptions, for the API translations
// (anthropic.cc, responses.cc): a field of the wrong type reads as missing, and the caller's
// check refuses it (a 400 naming its path) or goes without, never a nlohmann exception.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/status.h"

namespace infera::gateway::json_fields {

// "<path>: <why>" as kInvalidArgument.
inline Status bad(const std::string& path, const std::string& why) {
  return Status::invalidArgument(path + ": " + why);
}

inline bool isInteger(const nlohmann::json& j) {
  return j.is_number_integer() || j.is_number_unsigned();
}

// obj[key] when obj is an object holding a string there, else `def`.
inline std::string str(const nlohmann::json& obj, std::string_view key, std::string_view def = "") {
  if (!obj.is_object()) return std::string(def);
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string(def);
}

// obj[key] when it is an object, else an empty object.
inline const nlohmann::json& objectAt(const nlohmann::json& obj, std::string_view key) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  if (!obj.is_object()) return kEmpty;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_object() ? *it : kEmpty;
}

// obj[key] when it is an integer, else 0.
inline int64_t intAt(const nlohmann::json& obj, std::string_view key) {
  if (!obj.is_object()) return 0;
  const auto it = obj.find(key);
  return it != obj.end() && isInteger(*it) ? it->get<int64_t>() : 0;
}

// A request body's first checks, the same for every translated API: an object, no field beside
// `known` (refused by name, as the original APIs refuse them), and a string "model".
inline Status knownFieldsAndModel(const nlohmann::json& request,
                                  std::span<const std::string_view> known) {
  if (!request.is_object())
    return Status::invalidArgument("the request body must be a JSON object");
  for (const auto& [k, v] : request.items()) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      return bad(k, "is not supported (no such field, or not available on this backend)");
    }
  }
  const auto model = request.find("model");
  if (model == request.end() || !model->is_string()) return bad("model", "must be a string");
  return Status::ok();
}

// The same value as an ordered_json (what the translations build their answers with).
inline nlohmann::ordered_json ordered(const nlohmann::json& j) {
  return nlohmann::ordered_json::parse(dumpJson(j));
}

}  // namespace infera::gateway::json_fields
