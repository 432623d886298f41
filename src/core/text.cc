#include "core/text.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace infera {

std::string toHex(const unsigned char* data, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[data[i] >> 4];
    out[2 * i + 1] = kHex[data[i] & 0xf];
  }
  return out;
}

std::string percentEncode(std::string_view in) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size());
  for (const char ch : in) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

bool percentDecode(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hexDigitValue(in[i + 1]);
    const int lo = hexDigitValue(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

std::string envOr(const char* name, std::string_view fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(fallback);
}

std::string redactUrl(std::string_view url) {
  std::string out(url);
  const size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    // The password runs from the first ':' after the user name to the last '@' (a password may
    // hold '?', '#', '/' or '@' that a lenient parser accepts); over-hiding is the safe mistake.
    const size_t start = scheme + 3;
    const size_t at = out.rfind('@');
    const size_t colon = out.find(':', start);
    if (at != std::string::npos && at > start && colon != std::string::npos && colon < at &&
        out.find('/', start) > colon) {
      out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // A password given as a parameter (libpq's ?password=..., or key=value connection strings).
  for (size_t p = out.find("password="); p != std::string::npos; p = out.find("password=", p + 1)) {
    const size_t v = p + 9;
    const size_t e = out.find_first_of("& ", v);
    out.replace(v, (e == std::string::npos ? out.size() : e) - v, "***");
  }
  return out;
}

std::vector<std::string> queryValues(std::string_view query, std::string_view key) {
  std::vector<std::string> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view kv = query.substr(0, amp);
    const size_t eq = kv.find('=');
    std::string k(kv.substr(0, eq));
    std::replace(k.begin(), k.end(), '+', ' ');
    std::string kd;
    if (percentDecode(k, kd) && kd == key) {
      std::string v(eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1));
      std::replace(v.begin(), v.end(), '+', ' ');
      std::string vd;
      out.push_back(percentDecode(v, vd) ? vd : v);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

}  // namespace infera
