#include "gateway/internal/usage_scan.h"

#include <algorithm>
#include <charconv>

#include "gateway/internal/request_scan.h"
#include "net/sse.h"

namespace infera::gateway {

namespace {

// The value of a top-level member starts with `open` ('{' for an object, '[' for an array).
bool memberStartsWith(std::string_view json, std::string_view key, char open, size_t& begin,
                      size_t& end) {
  return findTopLevelValue(json, key, begin, end) && begin < end && json[begin] == open;
}

// A chunk that carries at least one choice: "choices" is an array whose first element is an object.
bool hasChoice(std::string_view json) {
  size_t b = 0, e = 0;
  if (!memberStartsWith(json, "choices", '[', b, e)) return false;
  ++b;
  while (b < e && (json[b] == ' ' || json[b] == '\t' || json[b] == '\r' || json[b] == '\n')) ++b;
  return b < e && json[b] == '{';
}

// A non-negative integer; `out` is left as it was otherwise (a -7 or a 3.9 is no count at all).
bool nonNegative(std::string_view object, const ValueSpan& v, int64_t& out) {
  if (!v.found) return false;
  int64_t n = 0;
  if (v.end > v.begin && v.end - v.begin <= 18) {
    // Up to 18 digits cannot overflow: the plain loop (what counts look like) before from_chars,
    // which reads anything else ("-0" is a count of 0, as a JSON parser reads it).
    bool digits = true;
    for (size_t i = v.begin; i < v.end && digits; ++i) {
      const unsigned d = static_cast<unsigned char>(object[i]) - unsigned('0');
      digits = d <= 9;
      n = n * 10 + d;
    }
    if (digits) {
      out = n;
      return true;
    }
    n = 0;
  }
  const auto [ptr, ec] = std::from_chars(object.data() + v.begin, object.data() + v.end, n);
  if (ec != std::errc() || ptr != object.data() + v.end || n < 0) return false;
  out = n;
  return true;
}

constexpr std::string_view kUsageKeys[] = {"prompt_tokens", "completion_tokens", "total_tokens"};

// prompt_tokens, completion_tokens and total_tokens (spans in `text`) as the usage read.
void useCounts(UsageScan& s, std::string_view text, const ValueSpan (&spans)[3]) {
  int64_t prompt = 0, completion = 0, total = 0;
  const bool has_prompt = nonNegative(text, spans[0], prompt);
  const bool has_completion = nonNegative(text, spans[1], completion);
  const bool has_total = nonNegative(text, spans[2], total);
  if (!has_prompt && !has_total) return;
  if (!has_completion && has_total) completion = std::max<int64_t>(0, total - prompt);
  s.seen = true;
  s.prompt = prompt;
  s.completion = completion;
}

}  // namespace

// Both read the last occurrence of a key, as JSON parsers (and so the client's SDK) do, walking
// back from the end: usage comes at or near the end of OpenAI-compatible answers, so the scan
// costs the bytes after it and its own, not the answer's, and reads the counts on the way.
void readUsage(UsageScan& s, std::string_view json) {
  static constexpr std::string_view kUsage[] = {"usage"};
  ValueSpan usage[1];
  ValueSpan counts[3];
  const NestedKeys nested{"usage", kUsageKeys, counts};
  findLastTopLevelValues(json, kUsage, usage, &nested);
  if (usage[0].found && json[usage[0].begin] == '{') useCounts(s, json, counts);
}

void readUsageObject(UsageScan& s, std::string_view usage) {
  ValueSpan counts[3];
  findLastTopLevelValues(usage, kUsageKeys, counts);
  useCounts(s, usage, counts);
}

void scanSse(UsageScan& s, std::string_view piece, std::string* out) {
  s.sse_buf.append(piece);
  size_t pos = 0;
  for (;;) {
    size_t end = s.sse_buf.find("\n\n", pos);
    size_t term = 2;
    const size_t crlf = s.sse_buf.find("\r\n\r\n", pos);
    if (crlf != std::string::npos && crlf < end) {
      end = crlf;
      term = 4;
    }
    if (end == std::string::npos) break;
    const std::string_view ev(s.sse_buf.data() + pos, end - pos);
    const std::string_view whole(s.sse_buf.data() + pos, end - pos + term);
    pos = end + term;
    // One data line is what OpenAI-compatible servers send; anything else passes untouched.
    std::string_view data;
    if (ev.starts_with("data:") && ev.find('\n') == std::string_view::npos) {
      data = ev.substr(5);
      if (!data.empty() && data.front() == ' ') data.remove_prefix(1);
    }
    if (data.empty() || data == "[DONE]") {
      if (out) out->append(whole);
      continue;
    }
    const bool has_choice = hasChoice(data);
    if (has_choice) ++s.content_events;
    size_t b = 0, e = 0;
    if (data.find("\"usage\"") == std::string_view::npos ||
        !findLastTopLevelValue(data, "usage", b, e)) {
      if (out) out->append(whole);
      continue;
    }
    const bool usage_object = data[b] == '{';
    if (usage_object) readUsageObject(s, data.substr(b, e - b));
    if (!out) continue;
    if (!has_choice && usage_object && s.strip_final_usage) continue;  // the usage-only final chunk
    if (!s.strip_final_usage && !s.strip_continuous) {
      out->append(whole);
      continue;
    }
    // Remove ,"usage":... (client never asked for usage) or null it (asked only for the final one).
    size_t key_begin = data.rfind("\"usage\"", b);
    std::string rewritten;
    if (s.strip_final_usage) {
      size_t cut_begin = key_begin;
      size_t k = key_begin;
      while (k > 0 && (data[k - 1] == ' ')) --k;
      if (k > 0 && data[k - 1] == ',') cut_begin = k - 1;
      size_t cut_end = e;
      if (cut_begin == key_begin) {  // first member: eat the following comma instead
        while (cut_end < data.size() && data[cut_end] == ' ') ++cut_end;
        if (cut_end < data.size() && data[cut_end] == ',') ++cut_end;
      }
      rewritten.append(data.substr(0, cut_begin));
      rewritten.append(data.substr(cut_end));
    } else {
      rewritten.append(data.substr(0, b));
      rewritten.append(has_choice ? "null" : data.substr(b, e - b));
      rewritten.append(data.substr(e));
    }
    net::appendSseData(*out, rewritten);
  }
  s.sse_buf.erase(0, pos);
}

}  // namespace infera::gateway
