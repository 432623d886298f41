// Fuzz target: request paths as the gateway routes them: net::unsafePathReason (which refuses
// paths a backend could resolve differently from the router) and net::parseKServeModelPath. The
// input is a path (before '?').
//
// Properties:
//  - a path unsafePathReason accepts starts with '/', is unchanged by RFC 3986 normalisation
//    (section 6.2.2: percent-encoded unreserved characters decoded, then remove_dot_segments of
//    5.2.4), and percent-decoding it yields the same segments as decoding each of its segments:
//    no encoded '/', no '\' or NUL, no "." or ".." segment, plain or encoded; so a backend that
//    normalises and decodes routes it to the segments the router saw;
//  - a path of plain segments (unreserved and sub-delim characters, ':' and '@', no "." or ".."
//    segment, no '%') is accepted;
//  - parseKServeModelPath splits exactly: prefix + model + after_model is the path, the model has
//    no '/', and after_model is "/versions/" + version + rest when it names a version, else rest.

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "net/http.h"

namespace {

using infera::fuzz::printable;

int hexValue(char h) {
  if (h >= '0' && h <= '9') return h - '0';
  if (h >= 'a' && h <= 'f') return h - 'a' + 10;
  if (h >= 'A' && h <= 'F') return h - 'A' + 10;
  return -1;
}

bool isUnreserved(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// Decodes %XX escapes (all of them, or only those of unreserved characters); false on a malformed
// one.
bool percentDecode(std::string_view in, bool unreserved_only, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hexValue(in[i + 1]), lo = hexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    const char c = static_cast<char>(hi * 16 + lo);
    if (unreserved_only && !isUnreserved(c)) {
      out.append(in.substr(i, 3));
    } else {
      out += c;
    }
    i += 2;
  }
  return true;
}

// RFC 3986 5.2.4, as written there.
std::string removeDotSegments(std::string in) {
  std::string out;
  while (!in.empty()) {
    if (in.starts_with("../")) {
      in.erase(0, 3);
    } else if (in.starts_with("./")) {
      in.erase(0, 2);
    } else if (in.starts_with("/./")) {
      in.erase(0, 2);
    } else if (in == "/.") {
      in = "/";
    } else if (in.starts_with("/../") || in == "/..") {
      in = in == "/.." ? "/" : in.substr(3);
      const size_t last = out.rfind('/');
      out.erase(last == std::string::npos ? 0 : last);
    } else if (in == "." || in == "..") {
      in.clear();
    } else {
      const size_t next = in.find('/', in.front() == '/' ? 1 : 0);
      out += in.substr(0, next);
      in.erase(0, next == std::string::npos ? in.size() : next);
    }
  }
  return out;
}

std::vector<std::string> split(std::string_view path) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    out.emplace_back(path.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) return out;
    start = slash + 1;
  }
}

void checkAccepted(const std::string& path) {
  const std::string what = "path: " + printable(path);
  FUZZ_CHECK(!path.empty() && path.front() == '/',
             "accepted a path not starting with '/': " + what);
  std::string normal;
  FUZZ_CHECK(percentDecode(path, true, normal), "accepted a malformed escape: " + what);
  FUZZ_CHECK(removeDotSegments(normal) == normal, "normalisation changes an accepted path to " +
                                                      printable(removeDotSegments(normal)) + ": " +
                                                      what);
  std::vector<std::string> decoded_segments;
  for (const auto& seg : split(path)) {
    std::string d;
    FUZZ_CHECK(percentDecode(seg, false, d), "accepted a malformed escape: " + what);
    FUZZ_CHECK(d.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos,
               "a segment decodes to '/', '\\' or NUL: " + what);
    FUZZ_CHECK(d != "." && d != "..", "a dot segment accepted: " + what);
    decoded_segments.push_back(d);
  }
  std::string decoded;
  FUZZ_CHECK(percentDecode(path, false, decoded), "accepted a malformed escape: " + what);
  FUZZ_CHECK(split(decoded) == decoded_segments, "decoding changes the segments: " + what);
}

bool plainPath(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  for (const auto& seg : split(path.substr(1))) {
    if (seg == "." || seg == "..") return false;
    for (const char c : seg) {
      if (!isUnreserved(c) && std::string_view("!$&'()*+,;=:@").find(c) == std::string_view::npos)
        return false;
    }
  }
  return true;
}

void checkKServe(std::string_view path) {
  infera::net::KServeModelPath kp;
  const bool under = infera::net::parseKServeModelPath(path, kp);
  constexpr std::string_view kPrefix = "/v2/models/";
  FUZZ_CHECK(under == path.starts_with(kPrefix), "KServe prefix misjudged: " + printable(path));
  if (!under) return;
  FUZZ_CHECK(kp.model.find('/') == std::string_view::npos, "model with '/': " + printable(path));
  FUZZ_CHECK(std::string(kPrefix) + std::string(kp.model) + std::string(kp.after_model) == path,
             "model + after_model is not the path: " + printable(path));
  FUZZ_CHECK(kp.after_model.empty() || kp.after_model.front() == '/',
             "after_model not at a '/': " + printable(path));
  if (kp.after_model.starts_with("/versions/")) {
    FUZZ_CHECK(kp.version.find('/') == std::string_view::npos &&
                   "/versions/" + std::string(kp.version) + std::string(kp.rest) == kp.after_model,
               "version + rest is not after_model: " + printable(path));
    FUZZ_CHECK(kp.rest.empty() || kp.rest.front() == '/', "rest not at a '/': " + printable(path));
  } else {
    FUZZ_CHECK(kp.version.empty() && kp.rest == kp.after_model,
               "a version where none is named: " + printable(path));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path(reinterpret_cast<const char*>(data), size);
  const std::string_view reason = infera::net::unsafePathReason(path);
  if (reason.empty()) checkAccepted(path);
  if (plainPath(path)) {
    FUZZ_CHECK(reason.empty(),
               "a plain path refused (" + std::string(reason) + "): " + printable(path));
  }
  checkKServe(path);
  return 0;
}
