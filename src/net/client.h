#pragma once
// HTTP/1.1 client for upstreams, plain or TLS (https://, net/tls.h): per-loop keep-alive connection
// pools. A pooled TLS connection is reused without a new handshake, and a pool offers the last
// session its upstream gave to its next new connection (resumption). Not thread-safe: a pool and
// its connections belong to one event loop.

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "net/asio.h"
#include "net/http.h"
#include "net/tls.h"

namespace infera::net {

// A parsed http[s]://host:port/prefix URL, resolved to an address on the control thread.
struct UpstreamAddress {
  std::string host;  // as written, used for the Host header (and TLS's name unless overridden)
  uint16_t port = 80;
  std::string base_path;  // "" or "/prefix" (no trailing '/')
  tcp::endpoint endpoint;
  std::shared_ptr<const TlsClientContext> tls;  // https: the context its connections use
  std::string hostHeader() const { return host + ":" + std::to_string(port); }
};

// Parses and resolves (blocking DNS, and for https:// builds the TLS context from `tls`, reading
// its files: call off the loops). `tls` other than the default on an http:// URL is an error.
Result<UpstreamAddress> resolveUrl(const std::string& url, const TlsClientConfig& tls = {});

struct ClientRequest {
  std::string_view method = "POST";
  std::string_view target;  // path + query
  std::string_view host;    // Host header value
  std::span<const HttpHeader> headers;
  std::string_view body;
  // Filters applied while writing `headers` (so a proxy forwards a client's headers uncopied):
  bool skip_hop_by_hop = false;  // connection, keep-alive, te, upgrade, host, content-length, ...
  bool skip_authorization = false;  // the client's credentials are not the backend's
  std::string_view request_id;      // when set: sent as x-request-id, replacing any given one
  std::string_view traceparent;     // when set: sent as traceparent, replacing any given one
};

struct ClientResponseHead {
  int status = 0;
  std::vector<HttpHeader> headers;  // lower-case names
  bool chunked = false;
  int64_t content_length = -1;
  std::string_view header(std::string_view lower_name) const;
};

// One upstream connection; one exchange at a time.
class UpstreamConnection {
 public:
  virtual ~UpstreamConnection() = default;
  // Sends the request; kUnavailable when the connection broke (a stale pooled connection may
  // fail here, which callers may retry once on a fresh connection).
  virtual Task<Status> send(const ClientRequest& request, Deadline deadline) = 0;
  virtual Task<Result<const ClientResponseHead*>> readHead(Deadline deadline) = 0;
  // The next piece of the body as it arrives (dechunked); an empty view when the body is done.
  // The view is valid until the next call.
  virtual Task<Result<std::string_view>> readBody(Deadline deadline) = 0;
  // Cancels pending operations and closes (safe to call from another coroutine on this loop).
  virtual void abort() = 0;
  // True when the last exchange completed cleanly and the server allows keep-alive.
  virtual bool reusable() const = 0;
  // True if this connection came from the idle pool (stale-connection retry applies).
  virtual bool reused() const = 0;
  // True when the last readHead failed because the peer closed (EOF or reset) before sending any
  // byte of a response: the request was not processed, so it may be sent again.
  virtual bool closedBeforeResponse() const = 0;
};

// Idle connections are reused newest first; one idle for longer than idle_timeout is closed
// within another idle_timeout (a timer runs while any are idle). A new TLS connection's handshake
// has its own connect_timeout after the TCP connect (both also bounded by the caller's deadline).
struct PoolConfig {
  size_t max_idle = 64;
  std::chrono::milliseconds connect_timeout{2'000};
  std::chrono::milliseconds idle_timeout{30'000};
};

class ConnectionPool {
 public:
  // Connections to `address` (TLS when it has a context; plain otherwise).
  static std::unique_ptr<ConnectionPool> create(asio::io_context& ctx,
                                                const UpstreamAddress& address, PoolConfig config);
  // Plain connections to `endpoint`.
  static std::unique_ptr<ConnectionPool> create(asio::io_context& ctx, tcp::endpoint endpoint,
                                                PoolConfig config);
  virtual ~ConnectionPool() = default;
  // An idle connection (unless `fresh`) or a new one (connect bounded by config and deadline).
  virtual Task<Result<std::unique_ptr<UpstreamConnection>>> acquire(Deadline deadline,
                                                                    bool fresh = false) = 0;
  // Returns a connection; kept if reusable, made for the pool's current address, and the pool has
  // room.
  virtual void release(std::unique_ptr<UpstreamConnection> conn) = 0;
  // New limits (a config reload); idle connections beyond them are closed now.
  virtual void configure(const PoolConfig& config) = 0;
  // A reload's address for the same URL: when its IP or its TLS settings (clientTlsFingerprint)
  // differ, idle connections are closed, those in use are not kept, and new ones use it. Plain
  // or TLS stays what the pool was created with (a different scheme is a different URL).
  virtual void setAddress(const UpstreamAddress& address) = 0;
};

struct SimpleResponse {
  int status = 0;
  std::vector<HttpHeader> headers;
  std::string body;
  std::string_view header(std::string_view lower_name) const;
};

// One request on a fresh connection, whole body read (health checks, tests, admin CLI).
Task<Result<SimpleResponse>> fetch(const UpstreamAddress& address, std::string_view method,
                                   std::string_view target, std::string_view body,
                                   std::span<const HttpHeader> headers, Deadline deadline);

// Blocking form of fetch() for use outside the event loops (CLI, tests): runs its own loop.
Result<SimpleResponse> fetchBlocking(const std::string& url, std::string_view method,
                                     std::string_view body = {},
                                     std::vector<HttpHeader> headers = {},
                                     std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace infera::net
