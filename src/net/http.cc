#include "net/http.h"

#include <cstdio>

#include "core/text.h"
#include "core/utf8.h"

namespace infera::net {

std::string_view HttpRequest::path() const {
  const auto q = target.find('?');
  return q == std::string::npos ? std::string_view(target) : std::string_view(target).substr(0, q);
}

std::string_view HttpRequest::header(std::string_view lower_name) const {
  for (const auto& h : headers) {
    if (h.name == lower_name) return h.value;
  }
  return {};
}

bool parseKServeModelPath(std::string_view path, KServeModelPath& out) {
  constexpr std::string_view kPrefix = "/v2/models/";
  if (!path.starts_with(kPrefix)) return false;
  const std::string_view rest = path.substr(kPrefix.size());
  const size_t slash = rest.find('/');
  out.model = rest.substr(0, slash);  // may be empty: callers answer "model not found"
  out.after_model = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  out.version = {};
  out.rest = out.after_model;
  constexpr std::string_view kVersions = "/versions/";
  if (out.rest.starts_with(kVersions)) {
    const std::string_view v = out.rest.substr(kVersions.size());
    const size_t end = v.find('/');
    out.version = v.substr(0, end);
    out.rest = end == std::string_view::npos ? std::string_view() : v.substr(end);
  }
  return true;
}

std::string_view unsafePathReason(std::string_view path) {
  if (path.empty() || path.front() != '/')
    return "the request target must be a path starting with '/'";
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view seg = path.substr(start, end - start);
    start = end + 1;
    // A raw control byte or space is never part of a URI (RFC 3986 section 2); Beast's target
    // grammar already refuses them, but this is the router's check for paths from anywhere (a
    // reader that stops at NUL would route a shorter path). Found by fuzz_path.
    for (const char c : seg) {
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
        return "control character or space in the path";
    }
    if (seg.find_first_of("%\\") == std::string_view::npos) {  // the common case: nothing to decode
      if (seg == "." || seg == "..") return "dot segment in the path";
      continue;
    }
    std::string decoded;
    decoded.reserve(seg.size());
    for (size_t i = 0; i < seg.size(); ++i) {
      char c = seg[i];
      if (c == '%') {
        if (i + 2 >= seg.size()) return "malformed percent escape in the path";
        const int hi = hexDigitValue(seg[i + 1]), lo = hexDigitValue(seg[i + 2]);
        if (hi < 0 || lo < 0) return "malformed percent escape in the path";
        c = static_cast<char>(hi * 16 + lo);
        i += 2;
        if (c == '/' || c == '\\') return "encoded slash in the path";
        if (c == '\0') return "encoded NUL in the path";
      } else if (c == '\\') {
        return "backslash in the path";
      }
      decoded += c;
    }
    if (decoded == "." || decoded == "..") return "dot segment in the path";
  }
  return {};
}

bool isSingletonHeader(std::string_view n) {
  return n == "authorization" || n == "host" || n == "x-request-id" || n == "api-key" ||
         n.starts_with("x-infera-");
}

bool isHopByHopHeader(std::string_view n) {
  return n == "connection" || n == "keep-alive" || n == "transfer-encoding" ||
         n == "content-length" || n == "te" || n == "trailer" || n == "upgrade" ||
         n == "proxy-connection" || n == "proxy-authorization" || n == "host" || n == "expect";
}

std::string_view reasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

void appendJsonString(std::string& out, std::string_view s) {
  if (!validUtf8(s)) {
    // Bytes from before the door (a store written by an older version): shown, never a broken
    // document.
    appendJsonString(out, toValidUtf8(s));
    return;
  }
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

std::string errorJson(std::string_view message, std::string_view type, std::string_view code) {
  std::string out = "{\"error\":{\"message\":";
  appendJsonString(out, message);
  out += ",\"type\":";
  appendJsonString(out, type);
  out += ",\"param\":null,\"code\":";
  appendJsonString(out, code);
  out += "}}";
  return out;
}

}  // namespace infera::net
