#pragma once
// A per-loop HTTP router: method + path pattern -> handler, with path parameters. Each component
// registers its routes on the data or admin router of every loop when src/server starts it; the
// router answers what matches nothing in one place (the fallback of the longest matching prefix).
//
//   net::Router r;
//   r.add("POST", "/v1/chat/completions", chat);
//   r.add("GET", "/collections/{name}", getCollection);        // params["name"]
//   r.add("*", "/v2/models/{model}/{rest...}", kserve);        // a tail: the rest of the path
//   r.setFallback("/collections", qdrantNotFound);             // 404/405 in Qdrant's shape
//   co_await r.dispatch(request, writer);
//
// Matching is by path segments, exactly as sent: no decoding, no dot-segment or slash folding
// (a component that routes by a segment decodes and checks it). Literal segments win over
// parameters; a method registered for a pattern wins over "*". Not thread-safe: built before
// its loop serves, then read only on that loop.

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/asio.h"
#include "net/http.h"
#include "net/server.h"
#include "net/trace.h"

namespace infera::net {

// A route's path parameters: views into the request's target (valid while the request is).
class PathParams {
 public:
  static constexpr size_t kMax = 6;
  // The value of `name`, or empty when the route has no such parameter.
  std::string_view get(std::string_view name) const {
    for (size_t i = 0; i < n_; ++i) {
      if (items_[i].first == name) return items_[i].second;
    }
    return {};
  }
  std::string_view operator[](std::string_view name) const { return get(name); }
  size_t size() const { return n_; }
  void push(std::string_view name, std::string_view value) {
    if (n_ < kMax) items_[n_++] = {name, value};
  }
  void pop() { --n_; }

 private:
  std::array<std::pair<std::string_view, std::string_view>, kMax> items_{};
  size_t n_ = 0;
};

using RouteHandler = std::function<Task<void>(HttpRequest&, ResponseWriter&, PathParams)>;
// Wraps a route's handler with a check that runs first (e.g. the admin token), or returns it as is.
using RouteGuard = std::function<RouteHandler(RouteHandler)>;
// Answers a request no route takes: status 404 (no pattern matches the path) or 405 (a pattern
// does, for other methods: `allow` lists them, comma-separated).
using FallbackHandler =
    std::function<Task<void>(HttpRequest&, ResponseWriter&, int status, std::string_view allow)>;
// A service's error body for an answer the server or router gives itself (net::HttpHandler::
// errorAnswer): status, message and a short code in, content type and body out. Must not throw.
using ErrorShape =
    std::function<EarlyAnswer(int status, std::string_view message, std::string_view code)>;

class Router {
 public:
  Router();
  ~Router();
  Router(Router&&) noexcept;
  Router& operator=(Router&&) noexcept;

  // `method` is "GET", "POST", ... or "*" (any). `pattern` starts with '/'; a segment "{name}"
  // matches one non-empty segment, a last segment "{name...}" the rest of the path (one segment
  // or more). Registering the same method and pattern twice is a bug (INFERA_CHECK).
  void add(std::string_view method, std::string_view pattern, RouteHandler handler);
  // A route whose handler reads its body as it arrives (request.body_reader), up to
  // `max_body_bytes` (which may exceed the server's max_body_bytes; the server must be created
  // with ServerConfig::max_streamed_body_bytes at least as large for that).
  void addStreamed(std::string_view method, std::string_view pattern, RouteHandler handler,
                   uint64_t max_body_bytes);
  // The body limit of the streamed route `head` matches, or nothing (the body is read whole).
  std::optional<uint64_t> streamedBodyLimit(const HttpRequest& head) const;
  // The fallback for paths starting with `prefix` (the longest registered prefix wins; "" = every
  // path). Without one: a plain-text 404/405.
  void setFallback(std::string prefix, FallbackHandler handler);
  // The error shape of paths starting with `prefix` (the longest registered prefix wins; without
  // one: OpenAI's {"error":{...}}), used for the answers of the floor: invalid UTF-8 at the door,
  // cross-site refusals, a handler that threw. A service registers it with its routes.
  void setErrorShape(std::string prefix, ErrorShape shape);
  EarlyAnswer errorAnswer(std::string_view path, int status, std::string_view message,
                          std::string_view code) const;
  // For a client that waits for `100 Continue` before sending a body: a check of the head of
  // requests whose path starts with `prefix` (the longest registered prefix wins) that may answer
  // finally instead (a 401 without reading the body). Must not block.
  using BeforeBody = std::function<std::optional<EarlyAnswer>(const HttpRequest& head)>;
  void setBeforeBody(std::string prefix, BeforeBody check);
  std::optional<EarlyAnswer> beforeBody(const HttpRequest& head) const;
  // Keeps `owned` alive as long as the router (per-loop state its handlers point to); destroyed in
  // the reverse order of own() calls, after the routes.
  template <typename T>
  void own(std::unique_ptr<T> owned) {
    owned_.emplace_back(owned.release(), [](void* p) { delete static_cast<T*>(p); });
  }

  // Every request a route takes runs inside a server span sent to `sink` (net/trace.h; null:
  // none). Requests made inside the process (batch lines) are not traced.
  void setTraceSink(TraceSink* sink) { trace_sink_ = sink; }

  struct Match {
    const RouteHandler* handler = nullptr;   // null: no route
    const std::string* span_name = nullptr;  // "METHOD /pattern"
    uint64_t streamed_limit = 0;             // > 0: a streamed route (addStreamed)
    PathParams params;
    int status = 404;   // when handler is null: 404 or 405
    std::string allow;  // for 405
  };
  Match match(std::string_view method, std::string_view path) const;
  // Runs the matching route's handler, or the fallback.
  Task<void> dispatch(HttpRequest& request, ResponseWriter& writer) const;

 private:
  struct Node;
  void addRoute(std::string_view method, std::string_view pattern, RouteHandler handler,
                uint64_t streamed_limit);
  std::unique_ptr<Node> root_;
  // Patterns without parameters by their whole path, looked up first (the common case: a few
  // length-and-bytes compares, no walk). A literal path wins over parameters in the walk too, so
  // the two agree.
  std::vector<std::pair<std::string, const Node*>> exact_;
  std::vector<std::pair<std::string, FallbackHandler>> fallbacks_;
  std::vector<std::pair<std::string, BeforeBody>> before_body_;
  std::vector<std::pair<std::string, ErrorShape>> error_shapes_;
  // The literal prefixes of streamed routes' patterns: other requests skip the match.
  std::vector<std::string> streamed_prefixes_;
  std::vector<std::unique_ptr<void, void (*)(void*)>> owned_;
  TraceSink* trace_sink_ = nullptr;
};

// A server's per-loop handler that dispatches through its router.
class RouterHandler final : public HttpHandler {
 public:
  explicit RouterHandler(Router router) : router_(std::move(router)) {}
  Task<void> handle(HttpRequest& request, ResponseWriter& writer) override {
    return router_.dispatch(request, writer);
  }
  std::optional<EarlyAnswer> beforeBody(const HttpRequest& head) override {
    return router_.beforeBody(head);
  }
  std::optional<uint64_t> streamedBodyLimit(const HttpRequest& head) override {
    return router_.streamedBodyLimit(head);
  }
  EarlyAnswer errorAnswer(const HttpRequest& head, int status, std::string_view message,
                          std::string_view code) override {
    return router_.errorAnswer(head.path(), status, message, code);
  }
  Router& router() { return router_; }

 private:
  Router router_;
};

}  // namespace infera::net
