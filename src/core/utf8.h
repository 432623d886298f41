#pragma once
// UTF-8 at the door: every string that enters the process (a path, a query value, a header that
// becomes a name or a label, a JSON body) is valid UTF-8 or is refused; what is written out
// (JSON answers, logs) never carries a byte sequence that is not. Thread-safe, no allocation but
// the output strings.

#include <cstddef>
#include <string>
#include <string_view>

namespace infera {

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF).
bool validUtf8(std::string_view s);

// The length of the longest well-formed UTF-8 prefix of `s` (s.size() when all of it is).
size_t validUtf8Prefix(std::string_view s);

// `s` with every ill-formed sequence replaced by U+FFFD (what a reader of stored bytes from before
// the door shows instead of failing), appended to `out`.
void appendValidUtf8(std::string& out, std::string_view s);
std::string toValidUtf8(std::string_view s);

// The longest prefix of `s` of at most `max_bytes` that does not end inside a multi-byte
// character (a body cut at a limit stays valid UTF-8 when it was).
std::string_view truncateUtf8(std::string_view s, size_t max_bytes);

// Whether the percent-decoded bytes of `s` ("%C3%A9" -> "é"; '+' left as it is) are valid UTF-8
// and every escape is well-formed.
bool validPercentEncodedUtf8(std::string_view s);

}  // namespace infera
