#pragma once
// HTTP value types shared by the server, the client and the components above net.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infera::net {

class BodyReader;    // net/server.h
class RequestTrace;  // net/trace.h

// Who an in-process request acts for (the batch executor submits a batch's lines through the
// gateway's own handlers as the key that created the batch). Set only by code in this process,
// never from the wire: the server builds requests with it null.
struct InProcessCaller {
  std::string key_id;  // empty: no key (access control off, or an anonymous batch)
  std::string user;
  bool batch = false;         // a batch line: its usage record is marked as batch work
  double price_factor = 1.0;  // the share of the route's price its usage is billed at
};

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
  // Set only for a route that reads its body as it arrives (Router::addStreamed): `body` is then
  // empty and the handler reads the pieces from here. Valid while the handler runs.
  BodyReader* body_reader = nullptr;
  // Set only for a request made inside the process (see InProcessCaller): the caller it acts for,
  // instead of an Authorization header.
  const InProcessCaller* in_process = nullptr;
  // The request's trace while its route's handler runs (Router::setTraceSink; null: not traced).
  RequestTrace* trace = nullptr;

  // The path part of target (before '?').
  std::string_view path() const;
  // Case-insensitive header lookup; empty when absent.
  std::string_view header(std::string_view lower_name) const;
};

// A KServe v2 / Open Inference Protocol model path: /v2/models/{model}[/versions/{version}][rest].
struct KServeModelPath {
  std::string_view model;
  std::string_view version;  // empty when the path names no version
  std::string_view rest;     // "", "/ready", "/infer", ...
  // Everything after the model name, as given ("/versions/3/infer").
  std::string_view after_model;
};
// False when `path` is not under /v2/models/.
bool parseKServeModelPath(std::string_view path, KServeModelPath& out);

// Whether a request path (before '?') may be routed as sent: origin-form (starts with '/'), no
// "." or ".." segment and no '/' or '\\' inside a segment, whether written plainly or
// percent-encoded, and no malformed percent escape. A router matches segments as sent, so a path
// it could read one way and a backend (which resolves dot segments and decodes %2F) another is
// refused instead. The reason when it is not, else empty.
std::string_view unsafePathReason(std::string_view path);

// Headers a request may carry at most once (the gateway and access control decide on their
// value: authorization, host, x-request-id, api-key, and every x-infera-* header).
bool isSingletonHeader(std::string_view lower_name);

// Hop-by-hop headers (RFC 9110 7.6.1) plus those a proxy sets itself (host, content-length,
// expect). Lower-case names.
bool isHopByHopHeader(std::string_view lower_name);

// "OK", "Not Found", ...
std::string_view reasonPhrase(int status);

// The OpenAI-style error body used everywhere on the data plane:
// {"error":{"message":..., "type":..., "param":null, "code":...}}
std::string errorJson(std::string_view message, std::string_view type, std::string_view code);

// JSON string escaping (quotes included); ill-formed UTF-8 is written as U+FFFD.
void appendJsonString(std::string& out, std::string_view s);

}  // namespace infera::net
