#include "features/internal/values.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/utf8.h"
#include "net/http.h"

namespace infera::features {
namespace {

constexpr uint8_t kNullTag = 0;
constexpr uint8_t kListBit = 0x80;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<Scalar> parseScalar(std::string_view name) {
  const std::string n = lower(name);
  if (n == "int64") return Scalar::kInt64;
  if (n == "int32") return Scalar::kInt32;
  if (n == "double" || n == "float64") return Scalar::kDouble;
  if (n == "float" || n == "float32") return Scalar::kFloat;
  if (n == "string") return Scalar::kString;
  if (n == "bytes") return Scalar::kBytes;
  if (n == "bool") return Scalar::kBool;
  if (n == "unix_timestamp" || n == "unixtimestamp") return Scalar::kUnixTimestamp;
  return std::nullopt;
}

const char* scalarName(Scalar s) {
  switch (s) {
    case Scalar::kInt64:
      return "int64";
    case Scalar::kInt32:
      return "int32";
    case Scalar::kDouble:
      return "double";
    case Scalar::kFloat:
      return "float";
    case Scalar::kString:
      return "string";
    case Scalar::kBytes:
      return "bytes";
    case Scalar::kBool:
      return "bool";
    case Scalar::kUnixTimestamp:
      return "unix_timestamp";
  }
  return "?";
}

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void appendBase64(std::string& out, std::string_view in) {
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += '=';
  }
}

bool decodeBase64(std::string_view in, std::string& out) {
  int8_t map[256];
  std::memset(map, -1, sizeof(map));
  for (int i = 0; i < 64; ++i) map[static_cast<uint8_t>(kB64[i])] = static_cast<int8_t>(i);
  map[static_cast<uint8_t>('-')] = 62;  // url-safe alphabet too
  map[static_cast<uint8_t>('_')] = 63;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char c : in) {
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad) return false;
    const int8_t v = map[static_cast<uint8_t>(c)];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return pad <= 2;
}

bool parseInt(std::string_view s, int64_t& out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

bool parseDouble(std::string_view s, double& out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

void putDouble(std::string& out, double d) {
  char b[8];
  std::memcpy(b, &d, 8);
  out.append(b, 8);
}
void putFloat(std::string& out, float f) {
  char b[4];
  std::memcpy(b, &f, 4);
  out.append(b, 4);
}

std::string describe(simdjson::dom::element v) {
  switch (v.type()) {
    case simdjson::dom::element_type::ARRAY:
      return "a list";
    case simdjson::dom::element_type::OBJECT:
      return "an object";
    case simdjson::dom::element_type::STRING: {
      std::string s = "the string ";
      std::string_view sv;
      if (v.get(sv) != simdjson::SUCCESS) sv = {};
      sv = truncateUtf8(sv, 40);  // whole characters: the message stays text
      net::appendJsonString(s, sv);
      return s;
    }
    case simdjson::dom::element_type::BOOL:
      return "a bool";
    case simdjson::dom::element_type::NULL_VALUE:
      return "null";
    default:
      return "the number " + simdjson::to_string(v);
  }
}

Status mismatch(simdjson::dom::element v, std::string_view want) {
  return Status::invalidArgument("expected " + std::string(want) + ", got " + describe(v));
}

// Python's str() of a JSON scalar, for a string feature given something else.
bool pythonStr(simdjson::dom::element v, std::string& s) {
  int64_t i;
  uint64_t u;
  double d;
  bool b;
  if (v.get(i) == simdjson::SUCCESS) {
    s = std::to_string(i);
  } else if (v.get(u) == simdjson::SUCCESS) {
    s = std::to_string(u);
  } else if (v.get(d) == simdjson::SUCCESS) {
    s.clear();
    appendDouble(s, d);
  } else if (v.get(b) == simdjson::SUCCESS) {
    s = b ? "True" : "False";
  } else {
    return false;
  }
  return true;
}

// A scalar payload (no tag).
Status encodeScalar(simdjson::dom::element v, Scalar t, bool lenient, bool in_list,
                    std::string& out) {
  using simdjson::SUCCESS;
  switch (t) {
    case Scalar::kInt64:
    case Scalar::kInt32:
    case Scalar::kUnixTimestamp: {
      int64_t i = 0;
      double d = 0;
      bool b = false;
      std::string_view s;
      if (v.get(i) == SUCCESS) {
      } else if (!in_list && v.get(d) == SUCCESS && std::isfinite(d) && std::fabs(d) < 9.2e18) {
        i = static_cast<int64_t>(d);  // Python int(): truncates
      } else if (!in_list && t != Scalar::kUnixTimestamp && v.get(b) == SUCCESS) {
        i = b ? 1 : 0;
      } else if (!in_list && t != Scalar::kUnixTimestamp && v.get(s) == SUCCESS && parseInt(s, i)) {
      } else if (lenient && v.get(s) == SUCCESS && parseInt(s, i)) {
      } else {
        return mismatch(v,
                        t == Scalar::kUnixTimestamp ? "epoch seconds (an integer)" : "an integer");
      }
      if (t == Scalar::kInt32 &&
          (i < std::numeric_limits<int32_t>::min() || i > std::numeric_limits<int32_t>::max())) {
        return Status::invalidArgument("value " + std::to_string(i) + " is out of the int32 range");
      }
      putVarint(out, zigzag(i));
      return Status::ok();
    }
    case Scalar::kDouble:
    case Scalar::kFloat: {
      double d = 0;
      std::string_view s;
      if (v.get(d) == SUCCESS) {
      } else if ((lenient || (t == Scalar::kFloat && !in_list)) && v.get(s) == SUCCESS &&
                 parseDouble(s, d)) {
      } else {
        return mismatch(v, "a number");
      }
      if (t == Scalar::kDouble) {
        putDouble(out, d);
      } else {
        putFloat(out, static_cast<float>(d));
      }
      return Status::ok();
    }
    case Scalar::kString: {
      std::string_view s;
      std::string conv;
      if (v.get(s) != SUCCESS) {
        if (in_list || !pythonStr(v, conv)) return mismatch(v, "a string");
        s = conv;
      }
      putVarint(out, s.size());
      out.append(s);
      return Status::ok();
    }
    case Scalar::kBytes: {
      std::string_view s;
      std::string raw;
      if (v.get(s) != SUCCESS || !decodeBase64(s, raw)) return mismatch(v, "base64-encoded bytes");
      putVarint(out, raw.size());
      out.append(raw);
      return Status::ok();
    }
    case Scalar::kBool: {
      bool b = false;
      int64_t i = 0;
      std::string_view s;
      if (v.get(b) == SUCCESS) {
      } else if (!in_list && v.get(i) == SUCCESS) {
        b = i != 0;
      } else if (lenient && v.get(s) == SUCCESS &&
                 (s == "true" || s == "false" || s == "True" || s == "False")) {
        b = s[0] == 't' || s[0] == 'T';
      } else {
        return mismatch(v, "a bool");
      }
      out += static_cast<char>(b ? 1 : 0);
      return Status::ok();
    }
  }
  return Status::internal("unknown type");
}

bool readScalarJson(std::string_view& in, Scalar t, std::string& json) {
  switch (t) {
    case Scalar::kInt64:
    case Scalar::kInt32:
    case Scalar::kUnixTimestamp: {
      uint64_t v;
      if (!getVarint(in, v)) return false;
      char buf[24];
      const auto r = std::to_chars(buf, buf + sizeof(buf), unzigzag(v));
      json.append(buf, r.ptr);
      return true;
    }
    case Scalar::kDouble: {
      if (in.size() < 8) return false;
      double d;
      std::memcpy(&d, in.data(), 8);
      in.remove_prefix(8);
      appendDouble(json, d);
      return true;
    }
    case Scalar::kFloat: {
      if (in.size() < 4) return false;
      float f;
      std::memcpy(&f, in.data(), 4);
      in.remove_prefix(4);
      appendDouble(json, static_cast<double>(f));  // widened, as Feast prints it
      return true;
    }
    case Scalar::kString:
    case Scalar::kBytes: {
      uint64_t n;
      if (!getVarint(in, n) || n > in.size()) return false;
      if (t == Scalar::kString) {
        // Ill-formed UTF-8 (stored before the door checked it) is written as U+FFFD.
        net::appendJsonString(json, in.substr(0, n));
      } else {
        json += '"';
        appendBase64(json, in.substr(0, n));
        json += '"';
      }
      in.remove_prefix(n);
      return true;
    }
    case Scalar::kBool: {
      if (in.empty()) return false;
      json += in[0] ? "true" : "false";
      in.remove_prefix(1);
      return true;
    }
  }
  return false;
}

bool skipScalar(std::string_view& in, Scalar t) {
  switch (t) {
    case Scalar::kInt64:
    case Scalar::kInt32:
    case Scalar::kUnixTimestamp: {
      uint64_t v;
      return getVarint(in, v);
    }
    case Scalar::kDouble:
      if (in.size() < 8) return false;
      in.remove_prefix(8);
      return true;
    case Scalar::kFloat:
      if (in.size() < 4) return false;
      in.remove_prefix(4);
      return true;
    case Scalar::kString:
    case Scalar::kBytes: {
      uint64_t n;
      if (!getVarint(in, n) || n > in.size()) return false;
      in.remove_prefix(n);
      return true;
    }
    case Scalar::kBool:
      if (in.empty()) return false;
      in.remove_prefix(1);
      return true;
  }
  return false;
}

bool validScalar(uint8_t code) { return code >= 1 && code <= 8; }

int64_t daysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

void civilFromDays(int64_t z, int64_t& y, unsigned& m, unsigned& d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  y = static_cast<int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y += m <= 2;
}

bool digits(std::string_view s, size_t at, size_t n, int& out) {
  if (at + n > s.size()) return false;
  out = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

}  // namespace

std::optional<FeatureType> parseFeatureType(std::string_view name) {
  const std::string n = lower(name);
  auto inner = [&](std::string_view open, char close) -> std::optional<std::string_view> {
    if (n.size() > open.size() + 1 && n.compare(0, open.size(), open) == 0 && n.back() == close) {
      return std::string_view(name).substr(open.size(), n.size() - open.size() - 1);
    }
    return std::nullopt;
  };
  std::optional<std::string_view> elem = inner("array(", ')');
  if (!elem) elem = inner("list<", '>');
  if (elem) {
    auto s = parseScalar(*elem);
    if (!s) return std::nullopt;
    return FeatureType{*s, true};
  }
  auto s = parseScalar(name);
  if (!s) return std::nullopt;
  return FeatureType{*s, false};
}

std::string typeName(FeatureType t) {
  return t.list ? "list<" + std::string(scalarName(t.scalar)) + ">"
                : std::string(scalarName(t.scalar));
}

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

bool getVarint(std::string_view& in, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(in[0]);
    in.remove_prefix(1);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

void putEventTime(std::string& out, int64_t ts_us) {
  const uint64_t u = static_cast<uint64_t>(ts_us);
  for (int i = 7; i >= 0; --i) out += static_cast<char>((u >> (i * 8)) & 0xff);
}

int64_t eventTimeOf(std::string_view row) {
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<uint8_t>(row[static_cast<size_t>(i)]);
  return static_cast<int64_t>(u);
}

Status encodeJsonValue(simdjson::dom::element v, FeatureType t, bool lenient, std::string& out) {
  if (v.is_null()) {
    out += static_cast<char>(kNullTag);
    return Status::ok();
  }
  if (v.is_double()) {
    double d = 0;
    if (v.get(d) == simdjson::SUCCESS && std::isnan(d)) {  // a pandas NaN is a missing value
      out += static_cast<char>(kNullTag);
      return Status::ok();
    }
  }
  if (!t.list) {
    out += static_cast<char>(t.scalar);
    return encodeScalar(v, t.scalar, lenient, false, out);
  }
  simdjson::dom::array arr;
  if (v.get(arr) != simdjson::SUCCESS)
    return mismatch(v, "a list of " + std::string(scalarName(t.scalar)));
  out += static_cast<char>(static_cast<uint8_t>(t.scalar) | kListBit);
  putVarint(out, arr.size());
  size_t i = 0;
  for (simdjson::dom::element e : arr) {
    // Ints are accepted in float lists (Feast rejects [1, 2] for Array(Float64); clients send
    // them).
    Status s = encodeScalar(e, t.scalar, lenient, true, out);
    if (!s.isOk())
      return Status::invalidArgument("element " + std::to_string(i) + ": " + s.message());
    ++i;
  }
  return Status::ok();
}

Status encodeJsonKey(simdjson::dom::element v, Scalar t, std::string& out) {
  if (v.is_null())
    return Status::invalidArgument("expected a " + std::string(scalarName(t)) + " key, got null");
  if (t == Scalar::kDouble || t == Scalar::kFloat) {
    return Status::invalidArgument("entity keys of type " + std::string(scalarName(t)) +
                                   " are not supported");
  }
  return encodeScalar(v, t, false, false, out);
}

bool appendValueJson(std::string_view& in, FeatureType t, std::string& json, bool& was_null) {
  if (in.empty()) return false;
  const uint8_t tag = static_cast<uint8_t>(in[0]);
  was_null = tag == kNullTag;
  if (was_null) {
    in.remove_prefix(1);
    json += "null";
    return true;
  }
  const bool list = tag & kListBit;
  const uint8_t code = tag & ~kListBit;
  if (list != t.list || code != static_cast<uint8_t>(t.scalar)) return false;
  std::string_view p = in.substr(1);
  const size_t mark = json.size();
  if (!list) {
    if (!readScalarJson(p, t.scalar, json)) {
      json.resize(mark);
      return false;
    }
  } else {
    uint64_t n;
    if (!getVarint(p, n)) return false;
    json += '[';
    for (uint64_t i = 0; i < n; ++i) {
      if (i) json += ',';
      if (!readScalarJson(p, t.scalar, json)) {
        json.resize(mark);
        return false;
      }
    }
    json += ']';
  }
  in = p;
  return true;
}

bool skipValue(std::string_view& in) {
  if (in.empty()) return false;
  const uint8_t tag = static_cast<uint8_t>(in[0]);
  in.remove_prefix(1);
  if (tag == kNullTag) return true;
  const uint8_t code = tag & ~kListBit;
  if (!validScalar(code)) return false;
  if (!(tag & kListBit)) return skipScalar(in, static_cast<Scalar>(code));
  uint64_t n;
  if (!getVarint(in, n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    if (!skipScalar(in, static_cast<Scalar>(code))) return false;
  }
  return true;
}

void appendDouble(std::string& json, double v) {
  if (!std::isfinite(v)) {
    json += "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  const std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  json.append(s);
  if (s.find_first_of(".e") == std::string_view::npos) json += ".0";
}

Result<int64_t> parseTimestampText(std::string_view s) {
  const std::string given(s);
  auto bad = [&] {
    return Status::invalidArgument("not a timestamp: '" + given.substr(0, 40) +
                                   "' (expected ISO 8601, e.g. 2024-05-01 12:00:00+00:00)");
  };
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos && s.size() <= 19) {
    // A number of seconds, ms, µs or ns since the epoch given as text (a CSV cell).
    int64_t n = 0;
    if (std::from_chars(s.data(), s.data() + s.size(), n).ec != std::errc()) return bad();
    if (n < 100'000'000'000LL) return n * 1'000'000;
    if (n < 100'000'000'000'000LL) return n * 1'000;
    if (n < 100'000'000'000'000'000LL) return n;
    return n / 1000;
  }
  int y, mo, d, h = 0, mi = 0, sec = 0;
  if (!digits(s, 0, 4, y) || s.size() < 10 || s[4] != '-' || !digits(s, 5, 2, mo) || s[7] != '-' ||
      !digits(s, 8, 2, d)) {
    return bad();
  }
  size_t i = 10;
  int64_t frac_us = 0;
  int64_t offset_s = 0;
  if (i < s.size()) {
    if (s[i] != 'T' && s[i] != 't' && s[i] != ' ') return bad();
    if (!digits(s, i + 1, 2, h) || i + 3 >= s.size() || s[i + 3] != ':' || !digits(s, i + 4, 2, mi))
      return bad();
    i += 6;
    if (i < s.size() && s[i] == ':') {
      if (!digits(s, i + 1, 2, sec)) return bad();
      i += 3;
      if (i < s.size() && (s[i] == '.' || s[i] == ',')) {
        ++i;
        int n = 0;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
          if (n < 6) frac_us = frac_us * 10 + (s[i] - '0');
          ++n;
          ++i;
        }
        if (n == 0) return bad();
        for (int k = n; k < 6; ++k) frac_us *= 10;
      }
    }
    if (i < s.size()) {
      if (s[i] == 'Z' || s[i] == 'z') {
        ++i;
      } else if (s[i] == '+' || s[i] == '-') {
        const int sign = s[i] == '-' ? -1 : 1;
        int oh, om = 0;
        if (!digits(s, i + 1, 2, oh)) return bad();
        i += 3;
        if (i < s.size() && s[i] == ':') ++i;
        if (i < s.size()) {
          if (!digits(s, i, 2, om)) return bad();
          i += 2;
        }
        offset_s = sign * (oh * 3600 + om * 60);
      }
      if (i != s.size()) return bad();
    }
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return bad();
  const int64_t days = daysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  const int64_t secs = days * 86400 + h * 3600 + mi * 60 + sec - offset_s;
  return secs * 1'000'000 + frac_us;
}

Result<int64_t> parseTimestamp(simdjson::dom::element v) {
  std::string_view s;
  if (v.get(s) == simdjson::SUCCESS) return parseTimestampText(s);
  double d = 0;
  int64_t i = 0;
  if (v.get(i) == simdjson::SUCCESS) {
    d = static_cast<double>(i);
  } else if (v.get(d) != simdjson::SUCCESS) {
    return Status::invalidArgument("expected a timestamp, got " + describe(v));
  }
  const double a = std::fabs(d);
  if (a < 1e11) return static_cast<int64_t>(std::llround(d * 1e6));
  if (a < 1e14) return static_cast<int64_t>(std::llround(d * 1e3));
  if (a < 1e17) return v.is_int64() ? i : static_cast<int64_t>(std::llround(d));
  return v.is_int64() ? i / 1000 : static_cast<int64_t>(std::llround(d / 1e3));
}

void appendTimestamp(std::string& json, int64_t ts_us) {
  int64_t secs = ts_us / 1'000'000;
  int64_t us = ts_us % 1'000'000;
  if (us < 0) {
    us += 1'000'000;
    --secs;
  }
  int64_t days = secs / 86400;
  int64_t rem = secs % 86400;
  if (rem < 0) {
    rem += 86400;
    --days;
  }
  int64_t y;
  unsigned m, d;
  civilFromDays(days, y, m, d);
  char buf[40];
  int n = std::snprintf(buf, sizeof(buf), "\"%04lld-%02u-%02uT%02lld:%02lld:%02lld",
                        static_cast<long long>(y), m, d, static_cast<long long>(rem / 3600),
                        static_cast<long long>((rem / 60) % 60), static_cast<long long>(rem % 60));
  json.append(buf, static_cast<size_t>(n));
  if (us != 0) {
    if (us % 1000 == 0) {
      n = std::snprintf(buf, sizeof(buf), ".%03lld", static_cast<long long>(us / 1000));
    } else {
      n = std::snprintf(buf, sizeof(buf), ".%06lld", static_cast<long long>(us));
    }
    json.append(buf, static_cast<size_t>(n));
  }
  json += "Z\"";
}

}  // namespace infera::features
