#include "gateway/internal/request_scan.h"

#include <algorithm>
#include <cstring>

#include "net/http.h"

namespace infera::gateway {

namespace {
size_t skipString(std::string_view s, size_t i) {
  // s[i] == '"'; returns the index after the closing quote. Finds quotes with memchr (strings are
  // most of a completion's bytes); a quote after an odd run of backslashes is escaped.
  const size_t open = i;
  ++i;
  while (i < s.size()) {
    const void* q = std::memchr(s.data() + i, '"', s.size() - i);
    if (!q) return s.size();
    const size_t at = static_cast<size_t>(static_cast<const char*>(q) - s.data());
    size_t backslashes = 0;
    while (at - backslashes > open + 1 && s[at - backslashes - 1] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return at + 1;
    i = at + 1;
  }
  return s.size();
}
size_t skipSpace(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  return i;
}
}  // namespace

bool findTopLevelValue(std::string_view json, std::string_view key, size_t& begin, size_t& end,
                       int* count) {
  int found = 0;
  if (count) *count = 0;
  int depth = 0;
  bool expect_key = false;
  size_t i = 0;
  while (i < json.size()) {
    const char c = json[i];
    if (c == '"') {
      const size_t close = skipString(json, i);
      if (depth == 1 && expect_key) {
        const std::string_view k = json.substr(i + 1, close - i - 2);
        size_t j = skipSpace(json, close);
        if (j < json.size() && json[j] == ':') {
          j = skipSpace(json, j + 1);
          if (k == key && found++ > 0) {
            if (count) *count = found;
          } else if (k == key) {
            if (count) *count = found;
            begin = j;
            // Value end: a string, or up to the next top-level ',' or '}'.
            if (j < json.size() && json[j] == '"') {
              end = skipString(json, j);
            } else {
              int d = 0;
              size_t e = j;
              while (e < json.size()) {
                const char ch = json[e];
                if (ch == '"') {
                  e = skipString(json, e);
                  continue;
                }
                if (ch == '{' || ch == '[') ++d;
                if (ch == '}' || ch == ']') {
                  if (d == 0) break;
                  --d;
                }
                if (ch == ',' && d == 0) break;
                ++e;
              }
              while (e > j && (json[e - 1] == ' ' || json[e - 1] == '\n' || json[e - 1] == '\t' ||
                               json[e - 1] == '\r')) {
                --e;
              }
              end = e;
            }
            if (!count) return true;
          }
          expect_key = false;
          i = j;
          continue;
        }
      }
      i = close;
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
      expect_key = depth == 1 && c == '{';
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 1) {
      expect_key = true;
    }
    ++i;
  }
  return found > 0;
}

Result<RequestFields> scanRequest(simdjson::dom::parser& parser, const std::string& body) {
  simdjson::dom::element doc;
  const auto err = parser.parse(body.data(), body.size(), true).get(doc);
  if (err != simdjson::SUCCESS) {
    return Status::invalidArgument(std::string("request body is not valid JSON: ") +
                                   simdjson::error_message(err));
  }
  simdjson::dom::object obj;
  if (doc.get(obj) != simdjson::SUCCESS) {
    return Status::invalidArgument("request body must be a JSON object");
  }
  RequestFields f;
  std::string_view model;
  const auto model_err = obj["model"].get(model);
  if (model_err == simdjson::SUCCESS) {
    f.model.assign(model.data(), model.size());
    f.has_model = !f.model.empty();
  } else if (model_err != simdjson::NO_SUCH_FIELD) {
    return Status::invalidArgument("'model' must be a string");
  }
  bool stream = false;
  if (obj["stream"].get(stream) == simdjson::SUCCESS) f.stream = stream;
  int64_t mt = 0;
  if (obj["max_completion_tokens"].get(mt) == simdjson::SUCCESS || obj["max_tokens"].get(mt) == simdjson::SUCCESS) {
    f.max_tokens = std::clamp<int64_t>(mt, 0, int64_t{1} << 31);  // bounded: reservations stay exact integers
  }
  int64_t n = 1;
  if (obj["n"].get(n) == simdjson::SUCCESS) f.n = std::clamp<int64_t>(n, 1, 128);
  double temp = 1;
  if (obj["temperature"].get(temp) == simdjson::SUCCESS) {
    f.has_temperature = true;
    f.temperature = temp;
  }
  simdjson::dom::object so;
  simdjson::dom::element so_el;
  if (obj["stream_options"].get(so_el) == simdjson::SUCCESS && so_el.is_null()) {
    // "stream_options": null is replaced like an empty object (never a second key).
    f.has_stream_options = true;
    int count = 0;
    if (!findTopLevelValue(body, "stream_options", f.stream_options_begin, f.stream_options_end, &count) || count != 1) {
      return Status::invalidArgument("the request must have at most one top-level \"stream_options\" field");
    }
  } else if (obj["stream_options"].get(so) == simdjson::SUCCESS) {
    f.has_stream_options = true;
    for (auto field : so) {
      bool b = false;
      if (field.key == "include_usage") {
        if (field.value.get(b) == simdjson::SUCCESS) f.include_usage = b;
      } else if (field.key == "continuous_usage_stats") {
        if (field.value.get(b) == simdjson::SUCCESS) f.continuous_usage = b;
      } else {
        f.stream_options_rest += ',';
        net::appendJsonString(f.stream_options_rest, field.key);
        f.stream_options_rest += ':';
        f.stream_options_rest += simdjson::minify(field.value);
      }
    }
    int count = 0;
    if (!findTopLevelValue(body, "stream_options", f.stream_options_begin, f.stream_options_end, &count) || count != 1) {
      return Status::invalidArgument("the request must have at most one top-level \"stream_options\" field");
    }
  }
  if (f.has_model) {
    // The gateway must route by the same model the backend reads: one plain "model" key only.
    int count = 0;
    if (!findTopLevelValue(body, "model", f.model_begin, f.model_end, &count) || count != 1) {
      return Status::invalidArgument("the request must have exactly one top-level \"model\" field");
    }
  }
  return f;
}

}  // namespace infera::gateway
