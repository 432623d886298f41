#include "gateway/internal/request_scan.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/text.h"
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

// The end of the JSON value starting at s[i] (a valid document: simdjson checked it).
size_t skipValue(std::string_view s, size_t i) {
  if (i >= s.size()) return i;
  if (s[i] == '"') return skipString(s, i);
  int depth = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') {
      i = skipString(s, i);
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return i;
      if (--depth == 0) return i + 1;
    } else if (depth == 0 && (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r')) {
      return i;
    }
    ++i;
  }
  return i;
}

void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool hex4(std::string_view s, size_t i, uint32_t& out) {
  if (i + 4 > s.size()) return false;
  out = 0;
  for (size_t k = i; k < i + 4; ++k) {
    const int v = hexDigitValue(s[k]);
    if (v < 0) return false;
    out = (out << 4) | static_cast<uint32_t>(v);
  }
  return true;
}

}  // namespace

bool unescapeJsonString(std::string_view quoted, std::string& out) {
  out.clear();
  if (quoted.size() < 2 || quoted.front() != '"' || quoted.back() != '"') return false;
  const std::string_view s = quoted.substr(1, quoted.size() - 2);
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i >= s.size()) return false;
    switch (s[i]) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case '/':
        out += '/';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp = 0;
        if (!hex4(s, i + 1, cp)) return false;
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair
          uint32_t lo = 0;
          if (i + 6 < s.size() && s[i + 1] == '\\' && s[i + 2] == 'u' && hex4(s, i + 3, lo) &&
              lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
          } else {
            cp = 0xFFFD;  // a lone surrogate, as simdjson reads it
          }
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          cp = 0xFFFD;
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

bool scanTopLevelMembers(std::string_view json, std::vector<JsonMember>& out) {
  out.clear();
  size_t i = skipSpace(json, 0);
  if (i >= json.size() || json[i] != '{') return false;
  i = skipSpace(json, i + 1);
  if (i < json.size() && json[i] == '}') return true;
  while (i < json.size()) {
    if (json[i] != '"') return false;
    JsonMember m;
    const size_t key_end = skipString(json, i);
    const std::string_view raw_key = json.substr(i, key_end - i);
    if (!unescapeJsonString(raw_key, m.key)) return false;
    m.escaped = raw_key.find('\\') != std::string_view::npos;
    i = skipSpace(json, key_end);
    if (i >= json.size() || json[i] != ':') return false;
    i = skipSpace(json, i + 1);
    m.begin = i;
    m.end = skipValue(json, i);
    out.push_back(std::move(m));
    i = skipSpace(json, out.back().end);
    if (i >= json.size()) return false;
    if (json[i] == '}') return true;
    if (json[i] != ',') return false;
    i = skipSpace(json, i + 1);
  }
  return false;
}

namespace {

// The first object, at any depth, with a key twice (keys compared unescaped, as every JSON
// reader compares them); its key, or empty.
bool findDuplicateKey(const simdjson::dom::element& e, std::string& dup, int depth = 0) {
  if (depth > 64) {
    dup = "(nested deeper than 64 levels)";
    return true;
  }
  simdjson::dom::object obj;
  simdjson::dom::array arr;
  if (e.get(obj) == simdjson::SUCCESS) {
    std::string_view small[16];
    std::vector<std::string_view> big;
    size_t n = 0;
    for (auto field : obj) {
      std::string_view* seen = n < 16 ? small : big.data();
      const size_t count = n < 16 ? n : big.size();
      for (size_t k = 0; k < count; ++k) {
        if (seen[k] == field.key) {
          dup = std::string(field.key);
          return true;
        }
      }
      if (n < 16) {
        small[n] = field.key;
        if (n == 15) big.assign(small, small + 16);
      } else {
        big.push_back(field.key);
      }
      ++n;
      if (findDuplicateKey(field.value, dup, depth + 1)) return true;
    }
  } else if (e.get(arr) == simdjson::SUCCESS) {
    for (auto v : arr) {
      if (findDuplicateKey(v, dup, depth + 1)) return true;
    }
  }
  return false;
}

void appendCanonical(std::string& out, const simdjson::dom::element& e) {
  switch (e.type()) {
    case simdjson::dom::element_type::OBJECT: {
      const simdjson::dom::object obj = e.get_object().value_unsafe();
      std::vector<std::pair<std::string_view, simdjson::dom::element>> fields;
      for (auto f : obj) fields.emplace_back(f.key, f.value);
      std::sort(fields.begin(), fields.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < fields.size(); ++i) {
        if (i) out += ',';
        net::appendJsonString(out, fields[i].first);
        out += ':';
        appendCanonical(out, fields[i].second);
      }
      out += '}';
      break;
    }
    case simdjson::dom::element_type::ARRAY: {
      out += '[';
      bool first = true;
      const simdjson::dom::array arr = e.get_array().value_unsafe();
      for (auto v : arr) {
        if (!first) out += ',';
        first = false;
        appendCanonical(out, v);
      }
      out += ']';
      break;
    }
    case simdjson::dom::element_type::STRING:
      net::appendJsonString(out, e.get_string().value_unsafe());
      break;
    case simdjson::dom::element_type::INT64:
      out += std::to_string(e.get_int64().value_unsafe());
      break;
    case simdjson::dom::element_type::UINT64:
      out += std::to_string(e.get_uint64().value_unsafe());
      break;
    case simdjson::dom::element_type::DOUBLE: {
      char buf[32];
      const double d = e.get_double().value_unsafe();
      if (d == 0) {  // -0.0 too: numbers by value, and "-0" would read back as the integer 0
        out += '0';
        break;
      }
      const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d);
      out.append(buf, ec == std::errc() ? static_cast<size_t>(end - buf) : 0);
      break;
    }
    case simdjson::dom::element_type::BOOL:
      out += e.get_bool().value_unsafe() ? "true" : "false";
      break;
    case simdjson::dom::element_type::NULL_VALUE:
      out += "null";
      break;
  }
}

Status wrongType(std::string_view field, std::string_view want) {
  return Status::invalidArgument("'" + std::string(field) + "' must be " + std::string(want));
}

// An integer field: absent or null leaves `out`; else a non-negative integer up to `max`.
Status readCount(const simdjson::dom::element& v, std::string_view name, int64_t max,
                 int64_t& out) {
  if (v.is_null()) return Status::ok();
  int64_t i = 0;
  if (v.get(i) != simdjson::SUCCESS) {
    uint64_t u = 0;
    if (v.get(u) == simdjson::SUCCESS) {
      return Status::invalidArgument("'" + std::string(name) + "' is too large");
    }
    return wrongType(name, "an integer");
  }
  if (i < 0) return Status::invalidArgument("'" + std::string(name) + "' must not be negative");
  out = std::min(i, max);
  return Status::ok();
}

}  // namespace

Result<RequestFields> scanRequest(simdjson::dom::parser& parser, const std::string& body,
                                  bool canonical) {
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
  // One reading: a key twice in any object is refused (readers disagree on which one counts:
  // simdjson and Go's first, Python's and nlohmann's last), so what the gateway routes, permits,
  // bills and caches is what every backend reads.
  std::string dup;
  if (findDuplicateKey(doc, dup)) {
    return Status::invalidArgument("request body has the key \"" + dup + "\" twice in one object");
  }
  // The top-level members with their byte spans, in the order the parse saw them; the fields below
  // are read from the parse and their spans (for rewriting the body) from this scan, matched by
  // position and checked key by key.
  thread_local std::vector<JsonMember> members;
  if (!scanTopLevelMembers(body, members) || members.size() != obj.size()) {
    return Status::invalidArgument("request body could not be read as one JSON object");
  }
  RequestFields f;
  f.root = doc;
  int64_t max_tokens = -1, max_completion_tokens = -1;
  size_t i = 0;
  for (auto field : obj) {
    const JsonMember& m = members[i++];
    if (m.key != field.key)
      return Status::invalidArgument("request body could not be read as one JSON object");
    if (m.escaped) {
      // OpenAI's top-level keys are plain identifiers; a client that escapes one is up to
      // something (and a reader that compares raw bytes would miss it).
      return Status::invalidArgument("top-level keys must be written without escapes (\"" + m.key +
                                     "\")");
    }
    const std::string_view key = field.key;
    const simdjson::dom::element& v = field.value;
    if (key == "model") {
      std::string_view model;
      if (v.get(model) != simdjson::SUCCESS) return wrongType("model", "a string");
      f.model.assign(model.data(), model.size());
      f.has_model = !f.model.empty();
      f.model_begin = m.begin;
      f.model_end = m.end;
    } else if (key == "stream") {
      bool stream = false;
      if (!v.is_null() && v.get(stream) != simdjson::SUCCESS)
        return wrongType("stream", "true or false");
      f.stream = stream;
    } else if (key == "max_tokens") {
      INFERA_RETURN_IF_ERROR(readCount(v, key, int64_t{1} << 31, max_tokens));
    } else if (key == "max_completion_tokens") {
      INFERA_RETURN_IF_ERROR(readCount(v, key, int64_t{1} << 31, max_completion_tokens));
    } else if (key == "n") {
      int64_t n = 1;
      INFERA_RETURN_IF_ERROR(readCount(v, key, 128, n));
      f.n = std::max<int64_t>(1, n);
    } else if (key == "temperature") {
      double t = 1;
      if (!v.is_null()) {
        if (v.get(t) != simdjson::SUCCESS) return wrongType("temperature", "a number");
        f.has_temperature = true;
        f.temperature = t;
      }
    } else if (key == "user") {
      if (!v.is_null() && !v.is_string()) return wrongType("user", "a string");
    } else if (key == "stream_options") {
      f.has_stream_options = true;
      f.stream_options_begin = m.begin;
      f.stream_options_end = m.end;
      simdjson::dom::object so;
      if (v.is_null()) continue;  // replaced like an empty object
      if (v.get(so) != simdjson::SUCCESS) return wrongType("stream_options", "an object");
      for (auto o : so) {
        bool b = false;
        if (o.key == "include_usage") {
          if (!o.value.is_null() && o.value.get(b) != simdjson::SUCCESS) {
            return wrongType("stream_options.include_usage", "true or false");
          }
          f.include_usage = b;
        } else if (o.key == "continuous_usage_stats") {
          if (!o.value.is_null() && o.value.get(b) != simdjson::SUCCESS) {
            return wrongType("stream_options.continuous_usage_stats", "true or false");
          }
          f.continuous_usage = b;
        } else {
          f.stream_options_rest += ',';
          net::appendJsonString(f.stream_options_rest, o.key);
          f.stream_options_rest += ':';
          f.stream_options_rest += simdjson::minify(o.value);
        }
      }
    }
  }
  // max_completion_tokens supersedes max_tokens (OpenAI's rule).
  f.max_tokens = max_completion_tokens >= 0 ? max_completion_tokens : max_tokens;
  if (canonical) {
    // The cache's reading of the request: the same parse, keys sorted, strings and numbers written
    // one way, without what does not change the answer (model: the route is keyed apart; user;
    // stream_options).
    f.canonical.reserve(body.size());
    f.canonical += '{';
    std::vector<std::pair<std::string_view, simdjson::dom::element>> fields;
    for (auto field : obj) {
      if (field.key == "model" || field.key == "user" || field.key == "stream_options") continue;
      fields.emplace_back(field.key, field.value);
    }
    std::sort(fields.begin(), fields.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = 0; k < fields.size(); ++k) {
      if (k) f.canonical += ',';
      net::appendJsonString(f.canonical, fields[k].first);
      f.canonical += ':';
      appendCanonical(f.canonical, fields[k].second);
    }
    f.canonical += '}';
  }
  return f;
}

// Used on backends' answers (usage objects, SSE chunks) where keys come as written: raw bytes are
// compared, in one pass, without building the keys.
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
      // The end of the top-level value: what follows is not part of it (fuzz_usage_scan found
      // usage read from a second object after the first, "{} {\"usage\":...}").
      if (--depth <= 0) break;
    } else if (c == ',' && depth == 1) {
      expect_key = true;
    }
    ++i;
  }
  return found > 0;
}

namespace {

// One compare for the common byte (anything above the space); then the four JSON spaces.
bool isJsonSpace(char c) {
  return static_cast<unsigned char>(c) <= ' ' && (c == ' ' || c == '\n' || c == '\t' || c == '\r');
}

// The index of the last non-space byte before `end`, or npos.
size_t lastNonSpace(std::string_view s, size_t end) {
  while (end > 0 && isJsonSpace(s[end - 1])) --end;
  return end == 0 ? std::string_view::npos : end - 1;
}

// s[close] is a string's closing quote; returns its opening quote, or npos. In well-formed JSON a
// quote inside a string follows an odd run of backslashes and a delimiting one an even run, so the
// opening quote is the nearest quote before `close` after an even run.
size_t openingQuote(std::string_view s, size_t close) {
  size_t i = close;
  while (i > 0) {
    const void* q = memrchr(s.data(), '"', i);
    if (!q) return std::string_view::npos;
    const size_t at = static_cast<size_t>(static_cast<const char*>(q) - s.data());
    size_t backslashes = 0;
    while (at > backslashes && s[at - backslashes - 1] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return at;
    i = at;
  }
  return std::string_view::npos;
}

// The first byte of the JSON value whose last byte is s[last], or npos.
size_t valueStart(std::string_view s, size_t last) {
  const char c = s[last];
  if (c == '"') return openingQuote(s, last);
  if (c == '}' || c == ']') {
    int depth = 0;
    size_t i = last;
    for (;;) {
      const char ch = s[i];
      if (ch == '"') {
        i = openingQuote(s, i);
        if (i == std::string_view::npos) return i;
      } else if (ch == '}' || ch == ']') {
        ++depth;
      } else if (ch == '{' || ch == '[') {
        if (--depth == 0) return i;
      }
      if (i == 0) return std::string_view::npos;
      --i;
    }
  }
  // A number or a literal: back to the ':' (or space) before it.
  size_t i = last;
  while (i > 0 && !isJsonSpace(s[i - 1]) && s[i - 1] != ':' && s[i - 1] != ',' && s[i - 1] != '{' &&
         s[i - 1] != '[') {
    --i;
  }
  return i;
}

}  // namespace

namespace {

constexpr size_t kNpos = std::string_view::npos;

// Walks back over the members of the object whose closing brace is json[close], recording the last
// occurrence of each key; with `nested`, the object value of its `of` member is walked member by
// member as it is passed (one level; deeper values are skipped by bracket matching, never by
// recursion), straight into nested->spans, which are cleared again when the object walked turns
// out to be another member's. Returns the index of the object's opening brace, or npos on text
// that is not JSON, and, when `early`, once every key was found (the walk stops there).
size_t walkBack(std::string_view json, size_t close, std::span<const std::string_view> keys,
                std::span<ValueSpan> spans, const NestedKeys* nested, bool early) {
  size_t missing = keys.size();
  bool of_seen = false;
  const size_t n_inner = nested ? std::min(nested->keys.size(), nested->spans.size()) : 0;
  size_t at = close;  // the '}' or ',' after the member to read next
  const size_t first_last = lastNonSpace(json, at);
  if (first_last != kNpos && json[first_last] == '{') return first_last;  // an empty object
  for (;;) {
    if (early && missing == 0) return kNpos;
    const size_t v_last = lastNonSpace(json, at);
    if (v_last == kNpos) return kNpos;
    const bool walk_inner = nested && !of_seen && json[v_last] == '}';
    const size_t v_first = walk_inner ? walkBack(json, v_last, nested->keys.first(n_inner),
                                                 nested->spans.first(n_inner), nullptr, false)
                                      : valueStart(json, v_last);
    // Text that is not JSON: nothing read from an object whose key was never seen is kept.
    auto fail = [&] {
      if (walk_inner) std::fill_n(nested->spans.begin(), n_inner, ValueSpan{});
      return kNpos;
    };
    if (v_first == kNpos) return fail();
    const size_t colon = lastNonSpace(json, v_first);
    if (colon == kNpos || json[colon] != ':') return fail();
    const size_t k_last = lastNonSpace(json, colon);
    if (k_last == kNpos || json[k_last] != '"') return fail();
    const size_t k_first = openingQuote(json, k_last);
    if (k_first == kNpos) return fail();
    const std::string_view k(json.data() + k_first + 1, k_last - k_first - 1);
    for (size_t n = 0; n < keys.size() && n < spans.size(); ++n) {
      if (!spans[n].found && keys[n] == k) {
        spans[n] = ValueSpan{true, v_first, v_last + 1};
        --missing;
        break;
      }
    }
    if (nested && !of_seen && k == nested->of) {
      of_seen = true;
    } else if (walk_inner) {
      fail();  // another member's object
    }
    at = lastNonSpace(json, k_first);
    if (at == kNpos) return kNpos;
    if (json[at] == '{') return at;
    if (json[at] != ',') return kNpos;
  }
}

}  // namespace

void findLastTopLevelValues(std::string_view json, std::span<const std::string_view> keys,
                            std::span<ValueSpan> spans, const NestedKeys* nested) {
  for (auto& sp : spans) sp = ValueSpan{};
  if (nested) {
    for (auto& sp : nested->spans) sp = ValueSpan{};
  }
  const size_t close = lastNonSpace(json, json.size());
  if (close == kNpos || json[close] != '}') return;
  walkBack(json, close, keys, spans, nested, /*early=*/true);
}

bool findLastTopLevelValue(std::string_view json, std::string_view key, size_t& begin,
                           size_t& end) {
  ValueSpan span;
  findLastTopLevelValues(json, std::span<const std::string_view>(&key, 1),
                         std::span<ValueSpan>(&span, 1));
  if (!span.found) return false;
  begin = span.begin;
  end = span.end;
  return true;
}

}  // namespace infera::gateway
