#pragma once
// Shared by the fuzz targets: a failed property is a finding (abort with what disagreed), both
// under libFuzzer and in the corpus regression runners.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace infera::fuzz {

// Printable form of bytes for a finding's message (non-printables as \xNN), cut at 300 bytes.
inline std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 300; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > 300) out += "...";
  return out;
}

[[noreturn]] inline void fail(const char* file, int line, const char* cond,
                              const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING at %s:%d: %s\n  %s\n", file, line, cond, what.c_str());
  std::abort();
}

}  // namespace infera::fuzz

// A property of the code under test; its failure aborts with `what` (a std::string expression).
#define FUZZ_CHECK(cond, what)                                            \
  do {                                                                    \
    if (!(cond)) ::infera::fuzz::fail(__FILE__, __LINE__, #cond, (what)); \
  } while (0)
