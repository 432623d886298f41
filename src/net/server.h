#pragma once
// HTTP/1.1 server: one SO_REUSEPORT acceptor per event loop, keep-alive, header/body size limits,
// header/body/idle/write timeouts, graceful drain, optionally TLS (net/tls.h: TLS 1.2+, ALPN
// http/1.1, client certificates, certificates reloaded without a restart). Request flows are
// coroutines; each loop has its own handler instance, so handlers need no locks.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "net/asio.h"
#include "net/http.h"
#include "net/loops.h"
#include "net/tls.h"

namespace infera::net {

struct ServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0 = any free port
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 8 * 1024 * 1024;
  std::chrono::milliseconds header_timeout{10'000};  // each request's head, from its first byte
  std::chrono::milliseconds idle_timeout{60'000};    // between keep-alive requests
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::milliseconds write_timeout{30'000};
  int backlog = 1024;
  // Connections open at once across the server's loops; one more is accepted and closed at once
  // (counted in ServerStats::rejected_connections). 0 = no limit.
  int64_t max_connections = 0;
  // Request body bytes held at once across the server's loops (a declared length is held from
  // the head until the handler returns; a chunked body holds max_body_bytes): beyond it a request
  // is answered 503 before its body is read. 0 = no limit.
  int64_t max_body_bytes_in_flight = 0;
  // The largest body a streamed route (HttpHandler::streamedBodyLimit) may take; 0 = no route
  // streams its body. Every other request keeps max_body_bytes.
  uint64_t max_streamed_body_bytes = 0;
  // TLS on this port (loaded by create(); its failure fails create). None: plain HTTP. The
  // handshake has the header timeout.
  std::optional<TlsServerConfig> tls;
  // Cross-site requests (the floor of every port): a request whose method changes state (not GET,
  // HEAD or OPTIONS) and that a browser marks as coming from another site (`Sec-Fetch-Site`
  // cross-site or same-site) or whose `Origin` is neither this server's own (its host and port as
  // the Host header names them) nor listed here ("http://console.example:8443") is refused 403
  // before its body is read, with or without access control. "*" lets every origin through.
  // Requests without these headers (curl, SDKs, kube-apiserver) are not cross-site requests.
  std::vector<std::string> allowed_origins;
};

// A request body read piece by piece by its handler, for routes that take bodies larger than
// max_body_bytes without holding them (artifact uploads). The server's checks stay: framing and
// the head are checked before the handler runs, Expect: 100-continue is answered first, a declared
// Content-Length over the route's limit is a 413 before the handler runs, and a chunked body
// beyond it fails the read. Each piece waits at most body_timeout. Used on the connection's loop.
class BodyReader {
 public:
  virtual ~BodyReader() = default;
  // The next piece (valid until the next call; at most a read buffer, ~64 KiB); empty at the end
  // of the body. kPayloadTooLarge past the route's limit, kDeadlineExceeded when a piece took
  // longer than body_timeout, kUnavailable when the client went away, kInvalidArgument for
  // broken chunked framing. After an error the connection closes after the response.
  virtual Task<Result<std::string_view>> read() = 0;
  // The declared Content-Length; -1 for a chunked body.
  virtual int64_t declaredLength() const = 0;
  // The whole body was read.
  virtual bool done() const = 0;
};

// Writes one response to the client. Methods return false once the client is gone; after that
// every write is a no-op returning false. Not thread-safe (lives on its connection's loop).
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response with content-length.
  virtual Task<bool> send(int status, std::string_view content_type, std::string_view body,
                          std::span<const HttpHeader> extra = {}) = 0;
  // A response whose body follows in writeChunk() calls: chunked transfer encoding, or raw
  // bytes when content_length >= 0 is given. `relayed` are an upstream's response headers, written
  // as they are minus hop-by-hop headers, content-type, x-request-id, server and date (a proxy
  // passes them through without copying).
  virtual Task<bool> start(int status, std::string_view content_type,
                           std::span<const HttpHeader> extra = {}, int64_t content_length = -1,
                           std::span<const HttpHeader> relayed = {}) = 0;
  virtual Task<bool> writeChunk(std::string_view data) = 0;
  virtual Task<bool> finish() = 0;
  virtual bool started() const = 0;
  // The status of the response started (0: none yet).
  virtual int status() const = 0;
  virtual bool finished() const = 0;
  virtual bool clientGone() const = 0;
  // Closes the connection after this response.
  virtual void closeAfterResponse() = 0;
  // Calls on_close (once, on this loop) if the client closes its side while the handler runs;
  // used to cancel upstream work. Disarmed when the handler returns.
  virtual void watchDisconnect(std::function<void()> on_close) = 0;
};

// A final answer given before a request's body is read (to a client that sent
// `Expect: 100-continue` and waits for it).
struct EarlyAnswer {
  int status = 0;
  std::string content_type;
  std::string body;
};

// The OpenAI-shaped error answer {"error":{"message","type","param","code"}} (the type from the
// status: invalid_request_error, permission_error, server_error, ...); the message made valid
// UTF-8.
EarlyAnswer defaultErrorAnswer(int status, std::string_view message, std::string_view code);

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Must write exactly one response (the server sends a 500 if it did not start one).
  virtual Task<void> handle(HttpRequest& request, ResponseWriter& writer) = 0;
  // Called with the head only (the body empty) when the client waits for `100 Continue` before
  // sending its body: a final answer (a 401, say) instead of reading the body, or nothing (the
  // server sends 100 Continue and reads it). Must not block.
  virtual std::optional<EarlyAnswer> beforeBody(const HttpRequest& head) {
    (void)head;
    return std::nullopt;
  }
  // Called with the head of a request that has a body, when the server has streamed routes
  // (ServerConfig::max_streamed_body_bytes): the largest body the handler reads itself through
  // request.body_reader, or nothing (the server reads the body whole, up to max_body_bytes).
  // Must not block.
  virtual std::optional<uint64_t> streamedBodyLimit(const HttpRequest& head) {
    (void)head;
    return std::nullopt;
  }
  // The answer the server gives itself for this request in the API's own error shape: a 400 for
  // a request the door refuses (ill-formed UTF-8 in its path, query or a header), a 403 for a
  // cross-site one, a 500 when the handler threw. `code` is a short machine-readable reason
  // ("invalid_utf8", "cross_site_request", "internal_error"). Default: the OpenAI shape. Must not
  // block or throw.
  virtual EarlyAnswer errorAnswer(const HttpRequest& head, int status, std::string_view message,
                                  std::string_view code);
};

// Called once per loop on that loop's thread before accepting.
using HandlerFactory =
    std::function<std::unique_ptr<HttpHandler>(int loop_index, asio::io_context&)>;

struct ServerStats {
  std::atomic<int64_t> connections_open{0};
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> requests_total{0};
  std::atomic<uint64_t> rejected_too_large{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> bad_requests{0};          // framing, head or path refused with a 4xx
  std::atomic<uint64_t> rejected_connections{0};  // over max_connections
  std::atomic<uint64_t> accept_errors{0};         // accept() failed (EMFILE, ENFILE, ...)
  std::atomic<uint64_t> rejected_busy{0};         // over max_body_bytes_in_flight
  std::atomic<int64_t> body_bytes_in_flight{0};
  // TLS ports:
  std::atomic<uint64_t> tls_handshakes{0};  // completed, resumed ones included
  std::atomic<uint64_t> tls_resumed{0};     // of those, resumed sessions
  std::atomic<uint64_t> tls_handshake_failures{
      0};                                // failed or timed out (no client cert, TLS 1.1, ALPN, ...)
  std::atomic<uint64_t> tls_reloads{0};  // certificates put in use after the first
  std::atomic<uint64_t> tls_reload_failures{
      0};                                   // loads refused (the previous certificate kept serving)
  std::atomic<int64_t> tls_not_after_s{0};  // the serving certificate's expiry, unix seconds
  // The floor:
  std::atomic<uint64_t> handler_exceptions{0};   // handlers that threw (answered 500; a bug)
  std::atomic<uint64_t> rejected_utf8{0};        // path, query or header not valid UTF-8 (400)
  std::atomic<uint64_t> rejected_cross_site{0};  // cross-site state changes refused (403)
};

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> create(EventLoops& loops, ServerConfig config,
                                                    HandlerFactory factory);
  virtual ~HttpServer() = default;
  virtual uint16_t port() const = 0;
  // Stops accepting, closes idle connections, lets requests in flight finish (then closes their
  // connections) until `timeout`; returns true if everything drained in time. Blocking; call
  // from outside the loops.
  virtual bool drain(std::chrono::milliseconds timeout) = 0;
  virtual const ServerStats& stats() const = 0;

  // TLS ports only (kFailedPrecondition on a plain one; switching needs a new server).
  // loadTls: loadServerTls(config), a failure logged and counted (tls_reload_failures). Blocking
  // (reads files): call off the loops. useTls: new connections get `context` (existing ones keep
  // theirs) and the file watch follows `config`'s files and interval. reloadTls: both.
  // Thread-safe. Besides these, a watch thread reloads the files when they change on disk.
  virtual Result<std::shared_ptr<const TlsServerContext>> loadTls(
      const TlsServerConfig& config) = 0;
  virtual Status useTls(std::shared_ptr<const TlsServerContext> context,
                        const TlsServerConfig& config) = 0;
  virtual Status reloadTls(const TlsServerConfig& config) = 0;
  // The certificate new connections get (none on a plain port).
  virtual std::optional<TlsCertificateInfo> tlsCertificate() const = 0;
};

}  // namespace infera::net
