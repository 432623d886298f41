// Fuzz target: usage extraction from backends' answers (gateway/internal/usage_scan.h), which bills
// and caches on what it reads, and the SSE rewriting that removes usage a client did not ask for.
// The input is used three ways: as a JSON answer (readUsage), as the data of one SSE event, and as
// a whole SSE stream (scanSse).
//
// Properties:
//  - JSON answer, the walk back (findLastTopLevelValue): on such JSON (below) every top-level
//    member reads as nlohmann reads it;
//  - JSON answer, any input: the usage read is the general walk back's (readUsage reads the shape
//    backends write with a narrower walk, which must agree with it, duplicates and escapes too);
//  - JSON answer: when nlohmann reads the input as JSON with no key twice (and no \u00XX escape,
//    which could spell a key the scan compares as written), the usage read is nlohmann's: the
//    top-level "usage" object's prompt_tokens, completion_tokens and total_tokens when they are
//    non-negative integers, and nothing else;
//  - one event "data: <input>": the same reading, a choice counted when "choices" starts with an
//    object, and with each strip setting the event the client gets is the backend's, or dropped
//    (the usage-only final chunk), or a JSON object that reads as the backend's without "usage"
//    (or with usage null in a chunk with a choice);
//  - a stream: what the client gets and the usage read do not depend on how the stream is cut
//    into pieces; without stripping, the client gets the stream byte for byte.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "gateway/internal/request_scan.h"
#include "gateway/internal/usage_scan.h"

namespace {

using infera::fuzz::printable;
using infera::gateway::UsageScan;
using Json = nlohmann::json;

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

// JSON the differential can speak for: valid, no key twice, keys as written equal keys unescaped,
// no NUL byte.
bool comparable(const std::string& text, Json& j) {
  bool dup = false;
  j = parseJson(text, dup);
  // nlohmann stops at a NUL byte as at the end of the input ("false\0{...}" reads as false).
  return !j.is_discarded() && !dup && text.find("\\u00") == std::string::npos &&
         text.find('\0') == std::string::npos;
}

bool expectedInt(const Json& obj, const char* key, int64_t& out) {
  const auto it = obj.find(key);
  if (it == obj.end()) return false;
  if (it->is_number_unsigned()) {
    if (it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return false;
    out = static_cast<int64_t>(it->get<uint64_t>());
    return true;
  }
  if (it->is_number_integer() && it->get<int64_t>() >= 0) {
    out = it->get<int64_t>();
    return true;
  }
  return false;
}

// The usage read from prompt_tokens, completion_tokens and total_tokens (read(0..2, out): whether
// each is a count), by readUsage's rules.
template <typename Read>
UsageScan usageFrom(Read read) {
  UsageScan s;
  int64_t prompt = 0, completion = 0, total = 0;
  const bool has_prompt = read(0, prompt);
  const bool has_completion = read(1, completion);
  const bool has_total = read(2, total);
  if (!has_prompt && !has_total) return s;
  if (!has_completion && has_total) completion = std::max<int64_t>(0, total - prompt);
  s.seen = true;
  s.prompt = prompt;
  s.completion = completion;
  return s;
}

constexpr const char* kCountNames[] = {"prompt_tokens", "completion_tokens", "total_tokens"};

// readUsageObject's contract, on nlohmann's reading of the object.
UsageScan expectedUsage(const Json& usage) {
  return usageFrom([&](int i, int64_t& out) { return expectedInt(usage, kCountNames[i], out); });
}

bool sameUsage(const UsageScan& a, const UsageScan& b) {
  return a.seen == b.seen && a.prompt == b.prompt && a.completion == b.completion;
}

std::string usageText(const UsageScan& s) {
  return s.seen
             ? "prompt " + std::to_string(s.prompt) + " completion " + std::to_string(s.completion)
             : "none";
}

// The general walk back's reading of a JSON answer's usage (findLastTopLevelValues, the usage
// object walked as it is passed), with readUsage's count rules: what readUsage must read on every
// input, whether its narrower walk for the shape backends write takes it or not.
UsageScan walkBackUsage(const std::string& input) {
  using infera::gateway::ValueSpan;
  static constexpr std::string_view kUsage[] = {"usage"};
  static constexpr std::string_view kCounts[] = {kCountNames[0], kCountNames[1], kCountNames[2]};
  ValueSpan usage[1];
  ValueSpan counts[3];
  const infera::gateway::NestedKeys nested{"usage", kCounts, counts};
  infera::gateway::findLastTopLevelValues(input, kUsage, usage, &nested);
  if (!usage[0].found || input[usage[0].begin] != '{') return UsageScan{};
  return usageFrom([&](int i, int64_t& out) {
    const ValueSpan& v = counts[i];
    if (!v.found) return false;
    int64_t n = 0;
    const char* end = input.data() + v.end;
    const auto [ptr, ec] = std::from_chars(input.data() + v.begin, end, n);
    if (ec != std::errc() || ptr != end || n < 0) return false;
    out = n;
    return true;
  });
}

void checkJsonAnswer(const std::string& input) {
  UsageScan got;
  infera::gateway::readUsage(got, input);
  const UsageScan walked = walkBackUsage(input);
  FUZZ_CHECK(sameUsage(got, walked), "usage read " + usageText(got) + ", the walk back reads " +
                                         usageText(walked) + ": " + printable(input));
  Json j;
  if (!comparable(input, j)) return;
  UsageScan want;
  if (j.is_object() && j.contains("usage") && j["usage"].is_object())
    want = expectedUsage(j["usage"]);
  FUZZ_CHECK(sameUsage(got, want), "usage read " + usageText(got) + ", nlohmann reads " +
                                       usageText(want) + ": " + printable(input));
  if (!j.is_object()) return;
  // The walk back reads every top-level member's value as nlohmann does, for keys that cannot
  // have been written with escapes (it compares keys as written): printable ASCII but for the
  // quote, the backslash and the slash.
  for (const auto& [key, value] : j.items()) {
    if (std::any_of(key.begin(), key.end(), [](char c) {
          return c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '/';
        }))
      continue;
    size_t b = 0, e = 0;
    const bool found = infera::gateway::findLastTopLevelValue(input, key, b, e);
    FUZZ_CHECK(found && b < e && e <= input.size() &&
                   Json::parse(input.substr(b, e - b), nullptr, false) == value,
               "the walk back misreads member " + printable(key) + ": " + printable(input));
  }
}

void checkOneEvent(const std::string& data) {
  if (data.find('\n') != std::string::npos) return;
  const std::string event = "data: " + data + "\n\n";
  Json j;
  const bool known = comparable(data, j) && data != "[DONE]";
  const bool is_object = known && j.is_object();
  const bool has_choice = is_object && j.contains("choices") && j["choices"].is_array() &&
                          !j["choices"].empty() && j["choices"][0].is_object();
  const bool has_usage = is_object && j.contains("usage");
  const bool usage_object = has_usage && j["usage"].is_object();
  for (int flags = 0; flags < 4; ++flags) {
    UsageScan s;
    s.strip_final_usage = flags & 1;
    s.strip_continuous = flags & 2;
    std::string out;
    infera::gateway::scanSse(s, event, &out);
    FUZZ_CHECK(s.sse_buf.empty(), "a whole event left buffered: " + printable(event));
    if (flags == 0)
      FUZZ_CHECK(out == event, "an event changed without stripping: " + printable(event));
    if (!known) continue;
    FUZZ_CHECK(s.content_events == (has_choice ? 1 : 0),
               "choice counted wrongly: " + printable(event));
    const UsageScan want = usage_object ? expectedUsage(j["usage"]) : UsageScan{};
    FUZZ_CHECK(sameUsage(s, want), "usage read " + usageText(s) + ", nlohmann reads " +
                                       usageText(want) + ": " + printable(event));
    const std::string what = "strip_final " + std::to_string(s.strip_final_usage) +
                             " strip_continuous " + std::to_string(s.strip_continuous) + ": " +
                             printable(event) + " -> " + printable(out);
    if (!has_usage || flags == 0) {
      FUZZ_CHECK(out == event, "an event without usage changed: " + what);
      continue;
    }
    if (s.strip_final_usage && !has_choice && usage_object) {
      FUZZ_CHECK(out.empty(), "the usage-only final chunk was not dropped: " + what);
      continue;
    }
    FUZZ_CHECK(out.starts_with("data: ") && out.ends_with("\n\n"),
               "a rewritten event is not one data event: " + what);
    const Json rewritten = Json::parse(out.substr(6, out.size() - 8), nullptr, false);
    Json want_json = j;
    if (s.strip_final_usage) {
      want_json.erase("usage");
    } else if (has_choice) {
      want_json["usage"] = nullptr;
    }
    FUZZ_CHECK(!rewritten.is_discarded() && rewritten == want_json,
               "the rewritten event reads wrongly: " + what);
  }
}

void checkStream(const std::string& input) {
  UsageScan counts;
  infera::gateway::scanSse(counts, input, nullptr);
  for (int flags = 0; flags < 4; ++flags) {
    UsageScan whole, pieces;
    whole.strip_final_usage = pieces.strip_final_usage = flags & 1;
    whole.strip_continuous = pieces.strip_continuous = flags & 2;
    std::string out_whole, out_pieces;
    infera::gateway::scanSse(whole, input, &out_whole);
    for (size_t i = 0; i < input.size(); i += 5) {
      infera::gateway::scanSse(pieces, std::string_view(input).substr(i, 5), &out_pieces);
    }
    if (input.empty()) infera::gateway::scanSse(pieces, "", &out_pieces);
    FUZZ_CHECK(out_whole == out_pieces && whole.sse_buf == pieces.sse_buf,
               "the client's stream depends on how the backend's is cut: " + printable(input));
    FUZZ_CHECK(sameUsage(whole, pieces) && sameUsage(whole, counts) &&
                   whole.content_events == pieces.content_events &&
                   whole.content_events == counts.content_events,
               "the usage read depends on the pieces or on rewriting: " + printable(input));
    if (flags == 0) {
      FUZZ_CHECK(out_whole + whole.sse_buf == input,
                 "the stream was changed without stripping: " + printable(input));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  checkJsonAnswer(input);
  checkOneEvent(input);
  checkStream(input);
  return 0;
}
