#include "core/json.h"

#include <vector>

namespace infera {

int jsonDepth(std::string_view text, int stop_at) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_at) return deepest;
        }
        break;
      case ']':
      case '}':
        --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
}

namespace {

template <typename J>
Result<J> read(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return Status::payloadTooLarge("the JSON body is " + std::to_string(text.size()) +
                                   " bytes, over the limit of " + std::to_string(limits.max_bytes));
  }
  if (jsonDepth(text, limits.max_depth) > limits.max_depth) {
    return Status::invalidArgument("the JSON body nests arrays and objects deeper than " +
                                   std::to_string(limits.max_depth) + " levels");
  }
  // Keys seen in each open object (small objects: a linear scan beats a set).
  std::vector<std::vector<std::string>> open;
  std::string duplicate;
  bool has_duplicate = false;
  const typename J::parser_callback_t cb = [&](int, typename J::parse_event_t ev, J& parsed) {
    using Ev = typename J::parse_event_t;
    switch (ev) {
      case Ev::object_start:
        open.emplace_back();
        break;
      case Ev::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case Ev::key:
        if (!open.empty() && parsed.is_string()) {
          const auto& k = parsed.template get_ref<const std::string&>();
          auto& keys = open.back();
          for (const auto& seen : keys) {
            if (seen == k && !has_duplicate) {
              has_duplicate = true;
              duplicate = k;
            }
          }
          keys.push_back(k);
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    J j = J::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true);
    if (has_duplicate) {
      std::string msg = "a key given twice in one object: ";
      msg += dumpJson(J(duplicate));
      return Status::invalidArgument(std::move(msg));
    }
    return j;
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message quotes the offending bytes (which may be ill-formed): keep them out.
    std::string msg = "malformed JSON at byte " + std::to_string(e.byte);
    const std::string what = e.what();
    if (what.find("UTF-8") != std::string::npos || what.find("utf-8") != std::string::npos) {
      msg += ": invalid UTF-8 in a string";
    } else if (what.find("unexpected end of input") != std::string::npos) {
      msg += ": unexpected end of input";
    } else if (what.find("control character") != std::string::npos) {
      msg += ": a control character in a string must be escaped";
    } else if (what.find("surrogate") != std::string::npos) {
      msg += ": an unpaired UTF-16 surrogate in a \\u escape";
    } else {
      msg += ": syntax error";
    }
    return Status::invalidArgument(std::move(msg));
  } catch (const std::exception& e) {
    return Status::invalidArgument(std::string("malformed JSON: ") + e.what());
  }
}

template <typename J>
std::string dump(const J& j) {
  // nlohmann writes NaN and infinities as null.
  try {
    return j.dump(-1, ' ', false, J::error_handler_t::replace);
  } catch (const std::exception&) {
    // Only an allocation failure is left; an answer that says so beats a dead worker.
    return "null";
  }
}

}  // namespace

Result<nlohmann::json> readJson(std::string_view text, const JsonLimits& limits) {
  return read<nlohmann::json>(text, limits);
}

Result<nlohmann::ordered_json> readOrderedJson(std::string_view text, const JsonLimits& limits) {
  return read<nlohmann::ordered_json>(text, limits);
}

std::string dumpJson(const nlohmann::json& j) { return dump(j); }
std::string dumpJson(const nlohmann::ordered_json& j) { return dump(j); }

}  // namespace infera
