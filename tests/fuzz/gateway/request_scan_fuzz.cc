// Fuzz target: the gateway's one reading of an OpenAI request body (gateway::scanRequest), checked
// against a second, full JSON parser (nlohmann::json, which reads numbers, escapes and UTF-8 on its
// own). The input is the body.
//
// Properties:
//  - when scanRequest accepts a body, nlohmann accepts it too, finds no key twice in any object,
//  and
//    every field the gateway decides on (model, stream, max_tokens / max_completion_tokens, n,
//    temperature, user, stream_options.include_usage / continuous_usage_stats and the other
//    stream_options members) is what nlohmann reads for that key, with the gateway's types;
//  - the model span holds exactly the model's value token: replacing it with another string gives
//    the same document with only the model changed (what a deployment rename does); likewise the
//    stream_options span, and inserting stream_options after '{' (what asking for usage does);
//  - the canonical form (the cache key) reads, with nlohmann, as the body without model, user and
//    stream_options, and is a fixed point (its own canonical form);
//  - the fields do not depend on whether the canonical form is asked for;
//  - whenever nlohmann reads the body as an object with no key twice, scanTopLevelMembers finds
//    its members, in order, with keys unescaped as nlohmann reads them and value spans that read
//    as the values.

#include <simdjson.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "gateway/internal/request_scan.h"

namespace {

using infera::fuzz::printable;
using Json = nlohmann::ordered_json;  // keeps members in document order

// Parses `text`; `dup` is set when an object has a key twice. Discarded value on a syntax error.
Json parseJson(const std::string& text, bool& dup) {
  dup = false;
  std::vector<std::set<std::string>> keys;
  Json::parser_callback_t cb = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (event == Json::parse_event_t::key && !keys.empty()) {
      if (!keys.back().insert(parsed.get<std::string>()).second) dup = true;
    }
    return true;
  };
  return Json::parse(text, cb, /*allow_exceptions=*/false);
}

Json parseJson(const std::string& text) {
  bool dup = false;
  return parseJson(text, dup);
}

std::string show(const std::string& body) { return "body: " + printable(body); }

// What the gateway must have read for a count field: absent or null leave `out`; a negative or
// too large integer or a non-integer is a refusal (false).
bool expectedCount(const Json& obj, const char* key, int64_t max, int64_t& out) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return true;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = std::min(static_cast<int64_t>(u), max);
    return true;
  }
  if (it->is_number_integer()) {
    const int64_t i = it->get<int64_t>();
    if (i < 0) return false;
    out = std::min(i, max);
    return true;
  }
  return false;
}

// A boolean field: absent or null read as false; another type is a refusal.
bool expectedBool(const Json& obj, const char* key, bool& out) {
  out = false;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_boolean()) return false;
  out = it->get<bool>();
  return true;
}

std::string replaced(const std::string& body, size_t begin, size_t end, const std::string& with) {
  return body.substr(0, begin) + with + body.substr(end);
}

void checkAccepted(const std::string& body, const infera::gateway::RequestFields& f) {
  bool dup = false;
  const Json j = parseJson(body, dup);
  FUZZ_CHECK(!j.is_discarded(), "scanRequest accepts what nlohmann refuses: " + show(body));
  FUZZ_CHECK(!dup, "scanRequest accepts a key twice: " + show(body));
  FUZZ_CHECK(j.is_object(), "scanRequest accepts a non-object: " + show(body));

  // model: a string; has_model when non-empty; its span is its token.
  const auto model = j.find("model");
  if (model == j.end()) {
    FUZZ_CHECK(!f.has_model && f.model.empty(), "a model where nlohmann reads none: " + show(body));
  } else {
    FUZZ_CHECK(model->is_string(), "a non-string model accepted: " + show(body));
    FUZZ_CHECK(f.model == model->get<std::string>() && f.has_model == !f.model.empty(),
               "model '" + printable(f.model) + "' but nlohmann reads '" +
                   printable(model->get<std::string>()) + "': " + show(body));
    FUZZ_CHECK(f.model_begin < f.model_end && f.model_end <= body.size(),
               "model span out of the body: " + show(body));
    const std::string token = body.substr(f.model_begin, f.model_end - f.model_begin);
    const Json tok = parseJson(token);
    FUZZ_CHECK(
        tok.is_string() && tok.get<std::string>() == f.model && token.front() == '"' &&
            token.back() == '"',
        "the model span is not the model's token ('" + printable(token) + "'): " + show(body));
    Json renamed = j;
    renamed["model"] = "renamed-model";
    FUZZ_CHECK(
        parseJson(replaced(body, f.model_begin, f.model_end, "\"renamed-model\"")) == renamed,
        "renaming the model through its span changes more than the model: " + show(body));
  }

  bool stream = false;
  FUZZ_CHECK(expectedBool(j, "stream", stream), "a non-boolean stream accepted: " + show(body));
  FUZZ_CHECK(f.stream == stream, "stream differs from nlohmann's: " + show(body));

  int64_t max_tokens = -1, max_completion_tokens = -1, n = 1;
  FUZZ_CHECK(expectedCount(j, "max_tokens", int64_t{1} << 31, max_tokens),
             "bad max_tokens accepted: " + show(body));
  FUZZ_CHECK(expectedCount(j, "max_completion_tokens", int64_t{1} << 31, max_completion_tokens),
             "bad max_completion_tokens accepted: " + show(body));
  FUZZ_CHECK(expectedCount(j, "n", 128, n), "bad n accepted: " + show(body));
  const int64_t want_max = max_completion_tokens >= 0 ? max_completion_tokens : max_tokens;
  FUZZ_CHECK(f.max_tokens == want_max, "max_tokens " + std::to_string(f.max_tokens) +
                                           ", nlohmann " + std::to_string(want_max) + ": " +
                                           show(body));
  FUZZ_CHECK(f.n == std::max<int64_t>(1, n), "n differs from nlohmann's: " + show(body));

  const auto temp = j.find("temperature");
  if (temp == j.end() || temp->is_null()) {
    FUZZ_CHECK(!f.has_temperature, "a temperature where nlohmann reads none: " + show(body));
  } else {
    FUZZ_CHECK(temp->is_number(), "a non-number temperature accepted: " + show(body));
    FUZZ_CHECK(f.has_temperature && f.temperature == temp->get<double>(),
               "temperature " + std::to_string(f.temperature) + ", nlohmann " +
                   std::to_string(temp->get<double>()) + ": " + show(body));
  }

  const auto user = j.find("user");
  FUZZ_CHECK(user == j.end() || user->is_null() || user->is_string(),
             "a non-string user accepted: " + show(body));

  const auto so = j.find("stream_options");
  FUZZ_CHECK(f.has_stream_options == (so != j.end()),
             "stream_options presence differs: " + show(body));
  if (so == j.end()) {
    FUZZ_CHECK(!f.include_usage && !f.continuous_usage && f.stream_options_rest.empty(),
               "stream options where nlohmann reads none: " + show(body));
    if (!j.empty()) {
      // What the proxy does to ask a backend for usage: insert the member after the first '{'.
      const size_t open = body.find('{');
      nlohmann::json asked = nlohmann::json::parse(body, nullptr, false);
      asked["stream_options"] = nlohmann::json::parse(R"({"include_usage":true})");
      const std::string inserted =
          replaced(body, open + 1, open + 1, R"("stream_options":{"include_usage":true},)");
      FUZZ_CHECK(nlohmann::json::parse(inserted, nullptr, false) == asked,
                 "inserting stream_options after '{' changes more: " + show(body));
    }
  } else {
    FUZZ_CHECK(so->is_null() || so->is_object(),
               "a non-object stream_options accepted: " + show(body));
    bool include_usage = false, continuous = false;
    Json rest = Json::object();
    if (so->is_object()) {
      FUZZ_CHECK(expectedBool(*so, "include_usage", include_usage),
                 "bad include_usage accepted: " + show(body));
      FUZZ_CHECK(expectedBool(*so, "continuous_usage_stats", continuous),
                 "bad continuous_usage_stats accepted: " + show(body));
      for (const auto& [k, v] : so->items()) {
        if (k != "include_usage" && k != "continuous_usage_stats") rest[k] = v;
      }
    }
    FUZZ_CHECK(f.include_usage == include_usage && f.continuous_usage == continuous,
               "stream_options flags differ from nlohmann's: " + show(body));
    const std::string rest_text =
        "{" + (f.stream_options_rest.empty() ? "" : f.stream_options_rest.substr(1)) + "}";
    FUZZ_CHECK(!f.stream_options_rest.empty() == !rest.empty() && parseJson(rest_text) == rest,
               "stream_options' other members read differently ('" +
                   printable(f.stream_options_rest) + "'): " + show(body));
    FUZZ_CHECK(f.stream_options_begin < f.stream_options_end && f.stream_options_end <= body.size(),
               "stream_options span out of the body: " + show(body));
    FUZZ_CHECK(parseJson(body.substr(f.stream_options_begin,
                                     f.stream_options_end - f.stream_options_begin)) == *so,
               "the stream_options span is not its value: " + show(body));
    Json asked = j;
    asked["stream_options"] = Json::parse(R"({"include_usage":true})");
    FUZZ_CHECK(parseJson(replaced(body, f.stream_options_begin, f.stream_options_end,
                                  R"({"include_usage":true})")) == asked,
               "replacing stream_options through its span changes more: " + show(body));
  }
}

void checkCanonical(simdjson::dom::parser& parser, const std::string& body,
                    const std::string& canonical) {
  // Compared without member order (nlohmann::json sorts keys): the canonical form sorts them.
  nlohmann::json want = nlohmann::json::parse(body, nullptr, false);
  want.erase("model");
  want.erase("user");
  want.erase("stream_options");
  const nlohmann::json got = nlohmann::json::parse(canonical, nullptr, false);
  FUZZ_CHECK(!got.is_discarded() && got == want, "the canonical form reads differently ('" +
                                                     printable(canonical) + "'): " + show(body));
  const auto again = infera::gateway::scanRequest(parser, canonical, true);
  if (again.ok()) {
    FUZZ_CHECK(again->canonical == canonical, "the canonical form is not a fixed point ('" +
                                                  printable(again->canonical) +
                                                  "'): " + show(body));
  }
}

bool sameFields(const infera::gateway::RequestFields& a, const infera::gateway::RequestFields& b) {
  return a.model == b.model && a.has_model == b.has_model && a.stream == b.stream &&
         a.model_begin == b.model_begin && a.model_end == b.model_end &&
         a.max_tokens == b.max_tokens && a.n == b.n && a.has_temperature == b.has_temperature &&
         a.temperature == b.temperature && a.has_stream_options == b.has_stream_options &&
         a.include_usage == b.include_usage && a.continuous_usage == b.continuous_usage &&
         a.stream_options_begin == b.stream_options_begin &&
         a.stream_options_end == b.stream_options_end &&
         a.stream_options_rest == b.stream_options_rest;
}

void checkMembers(const std::string& body) {
  bool dup = false;
  const Json j = parseJson(body, dup);
  if (j.is_discarded() || !j.is_object() || dup) return;
  std::vector<infera::gateway::JsonMember> members;
  FUZZ_CHECK(infera::gateway::scanTopLevelMembers(body, members),
             "scanTopLevelMembers refuses an object: " + show(body));
  FUZZ_CHECK(members.size() == j.size(),
             "scanTopLevelMembers finds " + std::to_string(members.size()) + " members, nlohmann " +
                 std::to_string(j.size()) + ": " + show(body));
  size_t i = 0;
  for (const auto& [k, v] : j.items()) {
    const auto& m = members[i++];
    FUZZ_CHECK(m.key == k, "member key '" + printable(m.key) + "', nlohmann '" + printable(k) +
                               "': " + show(body));
    FUZZ_CHECK(m.begin < m.end && m.end <= body.size() &&
                   parseJson(body.substr(m.begin, m.end - m.begin)) == v,
               "the span of member '" + printable(k) + "' is not its value: " + show(body));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdjson::dom::parser parser;
  const std::string body(reinterpret_cast<const char*>(data), size);
  checkMembers(body);
  const auto plain = infera::gateway::scanRequest(parser, body, false);
  const auto with_canonical = infera::gateway::scanRequest(parser, body, true);
  FUZZ_CHECK(plain.ok() == with_canonical.ok(),
             "acceptance depends on the canonical flag: " + show(body));
  if (!plain.ok()) return 0;
  FUZZ_CHECK(sameFields(*plain, *with_canonical),
             "fields depend on the canonical flag: " + show(body));
  checkAccepted(body, *plain);
  checkCanonical(parser, body, with_canonical->canonical);
  return 0;
}
