// Fuzz target: the door's check of a request's text (net/internal/request_head.h:
// requestTextProblem over the target, core/utf8.h), which every service relies on when it
// percent-decodes a path segment or a query value. The input is a request target.
//
// Properties, for every input:
//  - a target the door accepts percent-decodes (core/text.h percentDecode) without error to valid
//    UTF-8, and so does every path segment and every query name and value split at '/', '&' and
//    '=' (a split at an ASCII byte never cuts a character), so no service reading a part of it can
//    see ill-formed UTF-8;
//  - a target made of well-formed escapes of valid UTF-8 is accepted;
//  - validUtf8 agrees with a reference decoder (RFC 3629 table 3-7, written out below);
//  - toValidUtf8 of anything is valid UTF-8 and leaves valid text unchanged; truncateUtf8 of
//    valid text is a valid prefix no longer than asked and at most 3 bytes shorter.

#include <cstdint>
#include <string>
#include <string_view>

#include "core/text.h"
#include "core/utf8.h"
#include "fuzz_check.h"
#include "net/http.h"
#include "net/internal/request_head.h"

namespace {

using infera::fuzz::printable;

// Reference: RFC 3629 / Unicode table 3-7, code point by code point.
bool referenceValid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    const uint8_t c = b(i);
    uint32_t cp;
    size_t n;
    if (c < 0x80) {
      cp = c;
      n = 1;
    } else if ((c & 0xE0) == 0xC0) {
      cp = c & 0x1F;
      n = 2;
    } else if ((c & 0xF0) == 0xE0) {
      cp = c & 0x0F;
      n = 3;
    } else if ((c & 0xF8) == 0xF0) {
      cp = c & 0x07;
      n = 4;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((b(i + k) & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

void checkParts(std::string_view target, std::string_view whole) {
  size_t start = 0;
  for (size_t i = 0; i <= target.size(); ++i) {
    if (i == target.size() || target[i] == '/' || target[i] == '&' || target[i] == '=' ||
        target[i] == '?') {
      const std::string_view part = target.substr(start, i - start);
      std::string decoded;
      FUZZ_CHECK(infera::percentDecode(part, decoded),
                 "a part of an accepted target does not decode: " + printable(part));
      FUZZ_CHECK(infera::validUtf8(decoded),
                 "a part of an accepted target decodes to ill-formed "
                 "UTF-8: " +
                     printable(part) + " of " + printable(whole));
      start = i + 1;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  FUZZ_CHECK(infera::validUtf8(in) == referenceValid(in),
             "validUtf8 disagrees with the reference on " + printable(in));
  const std::string fixed = infera::toValidUtf8(in);
  FUZZ_CHECK(infera::validUtf8(fixed), "toValidUtf8 wrote ill-formed UTF-8 for " + printable(in));
  if (referenceValid(in)) {
    FUZZ_CHECK(fixed == in, "toValidUtf8 changed valid text " + printable(in));
    for (size_t max : {size_t{0}, size / 2, size > 0 ? size - 1 : 0}) {
      const std::string_view cut = infera::truncateUtf8(in, max);
      FUZZ_CHECK(cut.size() <= max && cut.size() + 3 >= std::min(max, size) &&
                     in.substr(0, cut.size()) == cut && infera::validUtf8(cut),
                 "truncateUtf8(" + std::to_string(max) + ") of " + printable(in));
    }
  }
  infera::net::HttpRequest request;
  request.method = "GET";
  request.target = std::string(in);
  const bool accepted = infera::net::requestTextProblem(request).empty();
  FUZZ_CHECK(accepted == infera::validPercentEncodedUtf8(in), "the door and its check disagree");
  if (accepted) {
    std::string decoded;
    FUZZ_CHECK(infera::percentDecode(in, decoded) && infera::validUtf8(decoded),
               "an accepted target decodes to ill-formed UTF-8: " + printable(in));
    checkParts(in, in);
  }
  // Every escape of valid text is accepted.
  if (referenceValid(in)) {
    std::string escaped;
    for (const char c : in) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      escaped += '%';
      escaped += kHex[static_cast<uint8_t>(c) >> 4];
      escaped += kHex[static_cast<uint8_t>(c) & 0xF];
    }
    request.target = escaped;
    FUZZ_CHECK(infera::net::requestTextProblem(request).empty(),
               "refused the escapes of valid text " + printable(in));
  }
  return 0;
}
