#pragma once
// HTTP value types shared by the server, the client and the components above net.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infera::net {

struct HttpHeader {
  std::string name;  // lower-case
  std::string value;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // "/v1/chat/completions?x=y"
  std::vector<HttpHeader> headers;
  std::string body;
  bool keep_alive = true;

  // The path part of target (before '?').
  std::string_view path() const;
  // Case-insensitive header lookup; empty when absent.
  std::string_view header(std::string_view lower_name) const;
  void clear();
};

// Hop-by-hop headers (RFC 9110 7.6.1) plus those a proxy sets itself (host, content-length,
// expect). Lower-case names.
bool isHopByHopHeader(std::string_view lower_name);

// Case-insensitive ASCII comparison.
bool iequals(std::string_view a, std::string_view b);

// "OK", "Not Found", ...
std::string_view reasonPhrase(int status);

// The OpenAI-style error body used everywhere on the data plane:
// {"error":{"message":..., "type":..., "param":null, "code":...}}
std::string errorJson(std::string_view message, std::string_view type, std::string_view code);

// JSON string escaping (quotes included).
void appendJsonString(std::string& out, std::string_view s);

}  // namespace infera::net
