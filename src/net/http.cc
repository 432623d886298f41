#include "net/http.h"

#include <cstdio>

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

void HttpRequest::clear() {
  method.clear();
  target.clear();
  headers.clear();
  body.clear();
  keep_alive = true;
}

bool isHopByHopHeader(std::string_view n) {
  return n == "connection" || n == "keep-alive" || n == "transfer-encoding" || n == "content-length" ||
         n == "te" || n == "trailer" || n == "upgrade" || n == "proxy-connection" ||
         n == "proxy-authorization" || n == "host" || n == "expect";
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view reasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

void appendJsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
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
