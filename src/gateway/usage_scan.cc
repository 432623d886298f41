#include "gateway/internal/usage_scan.h"

#include <algorithm>
#include <charconv>
#include <cstring>

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

// prompt_tokens, completion_tokens and total_tokens, each when it is a count, as the usage read.
struct Counts {
  bool has[3] = {false, false, false};
  int64_t value[3] = {0, 0, 0};
};

void useCounts(UsageScan& s, const Counts& c) {
  const int64_t prompt = c.value[0], total = c.value[2];
  int64_t completion = c.value[1];
  if (!c.has[0] && !c.has[2]) return;
  if (!c.has[1] && c.has[2]) completion = std::max<int64_t>(0, total - prompt);
  s.seen = true;
  s.prompt = prompt;
  s.completion = completion;
  if (s.input_only) {
    // Rerank answers only a total: every token of it was read, none written.
    s.prompt += s.completion;
    s.completion = 0;
  }
}

// The same, the counts' spans in `text`.
void useCounts(UsageScan& s, std::string_view text, const ValueSpan (&spans)[3]) {
  Counts c;
  for (size_t n = 0; n < 3; ++n) c.has[n] = nonNegative(text, spans[n], c.value[n]);
  useCounts(s, c);
}

// Whether the key whose closing quote is at `close` is `key` written plainly (its opening quote not
// after a backslash, where it could be inside a string: such text is left to the walk back, with
// `plain` false). A literal's length is known here, so the compare is a few loads.
template <size_t N>
bool keyBefore(std::string_view json, size_t close, const char (&key)[N], bool& plain) {
  constexpr size_t len = N - 1;
  if (close < len + 2 || json[close] != '"' || json[close - len - 1] != '"' ||
      std::memcmp(json.data() + close - len, key, len) != 0) {
    return false;
  }
  plain = json[close - len - 2] != '\\';
  return true;
}

// The answer as backends write it: ending with "usage":{"k":digits,...}} (then only spaces), every
// key one of the three counts written plainly and every value up to 18 digits, nothing between the
// tokens. Reads the counts as the walk back would (the last of a key given twice) and returns true;
// false, with `counts` unspecified, for anything else, which the walk back reads.
bool readPlainTrailingUsage(std::string_view json, Counts& counts) {
  size_t i = json.size();
  while (i > 0 && (json[i - 1] == '\n' || json[i - 1] == ' ' || json[i - 1] == '\r')) --i;
  if (i < 2 || json[i - 1] != '}' || json[i - 2] != '}') return false;
  i -= 2;  // json[i] ends the member read next: the usage object's '}' or a ','
  for (;;) {
    const size_t v_end = i;
    int64_t value = 0, scale = 1;
    while (i > 0 && v_end - i < 18) {
      const unsigned d = static_cast<unsigned char>(json[i - 1]) - unsigned('0');
      if (d > 9) break;
      value += scale * d;
      scale *= 10;
      --i;
    }
    if (i == v_end || i < 2 || json[i - 1] != ':' || json[i - 2] != '"') return false;
    const size_t k_close = i - 2;
    bool plain = false;
    size_t n = 0, len = 0;
    if (keyBefore(json, k_close, "prompt_tokens", plain)) {
      n = 0, len = 13;
    } else if (keyBefore(json, k_close, "completion_tokens", plain)) {
      n = 1, len = 17;
    } else if (keyBefore(json, k_close, "total_tokens", plain)) {
      n = 2, len = 12;
    } else {
      return false;
    }
    if (!plain) return false;
    if (!counts.has[n]) {
      counts.has[n] = true;
      counts.value[n] = value;
    }
    const size_t before = k_close - len - 2;  // the byte before the key's opening quote
    if (json[before] == ',') {
      i = before;
      continue;
    }
    // The usage object's opening brace, after the top-level key "usage".
    bool usage_plain = false;
    return json[before] == '{' && before >= 2 && json[before - 1] == ':' &&
           keyBefore(json, before - 2, "usage", usage_plain) && usage_plain;
  }
}

}  // namespace

// Both read the last occurrence of a key, as JSON parsers (and so the client's SDK) do, walking
// back from the end: usage comes at or near the end of OpenAI-compatible answers, so the scan
// costs the bytes after it and its own, not the answer's, and reads the counts on the way. The
// shape backends write is read by a narrower walk first (a third of the instructions, for the
// per-arm token counts every A/B answer pays; the fuzz target checks that both read alike).
void readUsage(UsageScan& s, std::string_view json) {
  if (Counts plain; readPlainTrailingUsage(json, plain)) {
    useCounts(s, plain);
    return;
  }
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
