#include "net/router.h"

#include <algorithm>

#include "core/status.h"

namespace infera::net {

// One path segment of the patterns registered: literal children, then one parameter child and
// one tail child.
struct Router::Node {
  struct Literal {
    std::string segment;
    std::unique_ptr<Node> node;
  };
  std::vector<Literal> literals;
  std::unique_ptr<Node> param;  // "{name}"
  std::string param_name;
  std::unique_ptr<Node> tail;  // "{name...}": always a leaf
  std::string tail_name;
  struct Method {
    std::string method;  // "*" matches any
    RouteHandler handler;
    uint64_t streamed_limit = 0;
    std::string span_name;  // "METHOD /pattern": the server span of a traced request
  };
  std::vector<Method> methods;

  const Method* find(std::string_view method) const {
    const Method* any = nullptr;
    for (const auto& m : methods) {
      if (m.method == method) return &m;
      if (m.method == "*") any = &m;
    }
    return any;
  }
  std::string allowList() const {
    std::string out;
    for (const auto& m : methods) out += (out.empty() ? "" : ", ") + m.method;
    return out;
  }
};

namespace {

// The next segment of `path` from `pos` (after a '/'); pos moves past it.
std::string_view nextSegment(std::string_view path, size_t& pos) {
  const size_t end = path.find('/', pos);
  const std::string_view seg = path.substr(pos, end == std::string_view::npos ? end : end - pos);
  pos = end == std::string_view::npos ? path.size() + 1 : end + 1;
  return seg;
}

}  // namespace

Router::Router() : root_(std::make_unique<Node>()) {}
Router::~Router() {
  root_.reset();
  fallbacks_.clear();
  before_body_.clear();
  error_shapes_.clear();
  while (!owned_.empty()) owned_.pop_back();
}
Router::Router(Router&&) noexcept = default;
Router& Router::operator=(Router&&) noexcept = default;

void Router::addStreamed(std::string_view method, std::string_view pattern, RouteHandler handler,
                         uint64_t max_body_bytes) {
  INFERA_CHECK(max_body_bytes > 0, "a streamed route needs a body limit");
  addRoute(method, pattern, std::move(handler), max_body_bytes);
  streamed_prefixes_.emplace_back(pattern.substr(0, pattern.find('{')));
}

std::optional<uint64_t> Router::streamedBodyLimit(const HttpRequest& head) const {
  const std::string_view path = head.path();
  bool candidate = false;
  for (const auto& p : streamed_prefixes_) candidate = candidate || path.starts_with(p);
  if (!candidate) return std::nullopt;
  const Match m = match(head.method, path);
  if (!m.handler || m.streamed_limit == 0) return std::nullopt;
  return m.streamed_limit;
}

void Router::add(std::string_view method, std::string_view pattern, RouteHandler handler) {
  addRoute(method, pattern, std::move(handler), 0);
}

void Router::addRoute(std::string_view method, std::string_view pattern, RouteHandler handler,
                      uint64_t streamed_limit) {
  INFERA_CHECK(pattern.starts_with("/"), "route pattern must start with '/'");
  Node* node = root_.get();
  size_t pos = 1;
  bool literal = true;
  while (pos <= pattern.size()) {
    const std::string_view seg = nextSegment(pattern, pos);
    if (seg.size() > 2 && seg.front() == '{' && seg.back() == '}') {
      std::string_view name = seg.substr(1, seg.size() - 2);
      literal = false;
      if (name.ends_with("...")) {
        INFERA_CHECK(pos > pattern.size(), "a {name...} tail must be the pattern's last segment");
        name.remove_suffix(3);
        if (!node->tail) node->tail = std::make_unique<Node>();
        INFERA_CHECK(node->tail_name.empty() || node->tail_name == name,
                     "two tail names at one place");
        node->tail_name = std::string(name);
        node = node->tail.get();
        break;
      }
      if (!node->param) node->param = std::make_unique<Node>();
      INFERA_CHECK(node->param_name.empty() || node->param_name == name,
                   "two parameter names at one place");
      node->param_name = std::string(name);
      node = node->param.get();
      continue;
    }
    auto it = std::find_if(node->literals.begin(), node->literals.end(),
                           [&](const Node::Literal& l) { return l.segment == seg; });
    if (it == node->literals.end()) {
      node->literals.push_back({std::string(seg), std::make_unique<Node>()});
      it = node->literals.end() - 1;
    }
    node = it->node.get();
  }
  for (const auto& m : node->methods) INFERA_CHECK(m.method != method, "route registered twice");
  node->methods.push_back(
      {std::string(method), std::move(handler), streamed_limit,
       std::string(method == "*" ? "HTTP" : method) + " " + std::string(pattern)});
  if (literal && node->methods.size() == 1) exact_.emplace_back(std::string(pattern), node);
}

namespace {

// Fallbacks, error shapes and body checks are kept by path prefix: setting one replaces the
// prefix's entry, and a path gets the entry of the longest prefix it starts with.
template <class T>
void setByPrefix(std::vector<std::pair<std::string, T>>& entries, std::string prefix, T value) {
  for (auto& [p, v] : entries) {
    if (p == prefix) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(prefix), std::move(value));
}

template <class T>
const T* longestPrefix(const std::vector<std::pair<std::string, T>>& entries,
                       std::string_view path) {
  const T* best = nullptr;
  size_t best_len = 0;
  for (const auto& [prefix, v] : entries) {
    if (path.starts_with(prefix) && (!best || prefix.size() >= best_len)) {
      best = &v;
      best_len = prefix.size();
    }
  }
  return best;
}

}  // namespace

void Router::setFallback(std::string prefix, FallbackHandler handler) {
  setByPrefix(fallbacks_, std::move(prefix), std::move(handler));
}

void Router::setErrorShape(std::string prefix, ErrorShape shape) {
  setByPrefix(error_shapes_, std::move(prefix), std::move(shape));
}

EarlyAnswer Router::errorAnswer(std::string_view path, int status, std::string_view message,
                                std::string_view code) const {
  if (const ErrorShape* shape = longestPrefix(error_shapes_, path))
    return (*shape)(status, message, code);
  return defaultErrorAnswer(status, message, code);
}

void Router::setBeforeBody(std::string prefix, BeforeBody check) {
  setByPrefix(before_body_, std::move(prefix), std::move(check));
}

std::optional<EarlyAnswer> Router::beforeBody(const HttpRequest& head) const {
  const BeforeBody* check = longestPrefix(before_body_, head.path());
  if (!check) return std::nullopt;
  return (*check)(head);
}

Router::Match Router::match(std::string_view method, std::string_view path) const {
  Match m;
  if (!path.starts_with('/')) return m;
  for (const auto& [literal, node] : exact_) {
    if (literal.size() != path.size() || literal != path) continue;
    if (const auto* found = node->find(method)) {
      m.handler = &found->handler;
      m.streamed_limit = found->streamed_limit;
      m.span_name = &found->span_name;
    } else {
      m.status = 405;
      m.allow = node->allowList();
    }
    return m;
  }
  // Depth-first: literals, then the parameter, then the tail; the first node with routes for the
  // path wins (its method decides between the handler and a 405).
  const Node* found = nullptr;
  struct Walk {
    const Router::Node* found = nullptr;
    PathParams* params;
    bool go(const Router::Node& n, std::string_view path, size_t pos) {
      if (pos > path.size()) {
        if (n.methods.empty()) return false;
        found = &n;
        return true;
      }
      size_t next = pos;
      const std::string_view seg = nextSegment(path, next);
      for (const auto& l : n.literals) {
        if (l.segment == seg && go(*l.node, path, next)) return true;
      }
      if (n.param && !seg.empty()) {
        params->push(n.param_name, seg);
        if (go(*n.param, path, next)) return true;
        params->pop();
      }
      if (n.tail && pos < path.size() && !n.tail->methods.empty()) {
        params->push(n.tail_name, path.substr(pos));
        found = n.tail.get();
        return true;
      }
      return false;
    }
  } walk{nullptr, &m.params};
  if (walk.go(*root_, path, 1)) found = walk.found;
  if (!found) return m;
  if (const auto* hit = found->find(method)) {
    m.handler = &hit->handler;
    m.streamed_limit = hit->streamed_limit;
    m.span_name = &hit->span_name;
  } else {
    m.status = 405;
    m.allow = found->allowList();
  }
  return m;
}

namespace {

// A route's handler inside its server span (RequestTrace on this frame, reachable by the handler
// through request.trace): named by the route's pattern, ended with the status answered.
Task<void> traced(const RouteHandler* handler, TraceSink* sink, const std::string* span_name,
                  HttpRequest& request, ResponseWriter& writer, PathParams params) {
  RequestTrace trace(sink, request.header("traceparent"), request.header("tracestate"), *span_name);
  if (trace.recording()) {
    trace.attr(RequestTrace::kRoot, "http.request.method", request.method);
    trace.attr(RequestTrace::kRoot, "http.route", span_name->substr(span_name->find(' ') + 1));
    trace.attr(RequestTrace::kRoot, "url.path", std::string(request.path()));
  }
  request.trace = &trace;
  try {
    co_await (*handler)(request, writer, params);
  } catch (...) {
    request.trace = nullptr;
    trace.finish(500);  // the floor answers it 500
    throw;
  }
  request.trace = nullptr;
  trace.finish(writer.status());
}

}  // namespace

Task<void> Router::dispatch(HttpRequest& request, ResponseWriter& writer) const {
  const std::string_view path = request.path();
  Match m = match(request.method, path);
  if (m.handler && trace_sink_ && request.in_process == nullptr) {
    return traced(m.handler, trace_sink_, m.span_name, request, writer, m.params);
  }
  if (m.handler) return (*m.handler)(request, writer, m.params);
  if (const FallbackHandler* fb = longestPrefix(fallbacks_, path)) {
    // The fallback gets `allow` as a view: a coroutine frame of ours owns the string while it runs
    // (dispatch is no coroutine, so `m` is gone before the handler's body starts).
    struct Owning {
      static Task<void> call(const FallbackHandler* f, HttpRequest& req, ResponseWriter& w,
                             int status, std::string allow) {
        co_await (*f)(req, w, status, allow);
      }
    };
    return Owning::call(fb, request, writer, m.status, std::move(m.allow));
  }
  struct Plain {
    static Task<void> send(ResponseWriter& w, int status, std::string allow) {
      const std::string body =
          status == 405 ? "method not allowed (allowed: " + allow + ")\n" : "not found\n";
      co_await w.send(status, "text/plain", body);
    }
  };
  return Plain::send(writer, m.status, std::move(m.allow));
}

}  // namespace infera::net
