#pragma once
// Small text helpers shared by components: hex encoding, percent-decoding, environment lookups,
// and a transparent string hash (string_view lookups in string-keyed maps allocate nothing).

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace infera {

// The value of one hex digit (either case), or -1.
inline int hexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Lower-case hex of `n` bytes.
std::string toHex(const unsigned char* data, size_t n);

// "%41" -> "A"; false on a malformed escape ('+' is left as it is).
bool percentDecode(std::string_view in, std::string& out);
// `in` fit for one path segment or query value: every byte but ALPHA DIGIT - _ . ~ as %XX.
std::string percentEncode(std::string_view in);

// Query-string values of `key` ("a=1&a=2" -> {"1","2"}), percent-decoded ('+' is a space); a
// value with a malformed escape is given as sent.
std::vector<std::string> queryValues(std::string_view query, std::string_view key);

// The environment variable's value, or `fallback` when it is unset or empty.
std::string envOr(const char* name, std::string_view fallback);

// `url` fit for a log or an error message: a password in its authority
// ("scheme://user:secret@host" or "scheme://:secret@host") or in a password= parameter becomes
// "***".
std::string redactUrl(std::string_view url);

struct TransparentStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace infera
