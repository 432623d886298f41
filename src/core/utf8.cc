#include "core/utf8.h"

#include <cstdint>
#include <cstring>

#include "core/text.h"

namespace infera {

namespace {

// The length of the well-formed sequence starting at s[i], or 0 when it is ill-formed there.
size_t sequenceAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  const size_t left = s.size() - i;
  const auto cont = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !cont(i + 1) || !cont(i + 2)) return 0;
    if (c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(i + 1) >= 0xA0) return 0;  // UTF-16 surrogates
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    if (c == 0xF0 && b(i + 1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(i + 1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

// Skips ASCII eight bytes at a time (the common case: paths, keys, English text).
size_t skipAscii(std::string_view s, size_t i) {
  while (i + 8 <= s.size()) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (w & 0x8080808080808080ULL) break;
    i += 8;
  }
  while (i < s.size() && static_cast<uint8_t>(s[i]) < 0x80) ++i;
  return i;
}

}  // namespace

size_t validUtf8Prefix(std::string_view s) {
  size_t i = 0;
  for (;;) {
    i = skipAscii(s, i);
    if (i >= s.size()) return s.size();
    const size_t n = sequenceAt(s, i);
    if (n == 0) return i;
    i += n;
  }
}

bool validUtf8(std::string_view s) { return validUtf8Prefix(s) == s.size(); }

void appendValidUtf8(std::string& out, std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t good = validUtf8Prefix(s.substr(i));
    out.append(s.data() + i, good);
    i += good;
    if (i < s.size()) {
      out += "\xEF\xBF\xBD";  // U+FFFD for the one byte that starts no well-formed sequence
      ++i;
    }
  }
}

std::string toValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  appendValidUtf8(out, s);
  return out;
}

std::string_view truncateUtf8(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t end = max_bytes;
  // Back off continuation bytes, then the lead byte whose sequence the cut would split.
  size_t back = 0;
  while (end > 0 && back < 3 && (static_cast<uint8_t>(s[end]) & 0xC0) == 0x80) {
    --end;
    ++back;
  }
  return s.substr(0, end);
}

bool validPercentEncodedUtf8(std::string_view s) {
  // Fast path: no escape and no high byte.
  size_t i = skipAscii(s, 0);
  if (i == s.size() && s.find('%') == std::string_view::npos) return true;
  std::string decoded;
  return percentDecode(s, decoded) && validUtf8(decoded);
}

}  // namespace infera
