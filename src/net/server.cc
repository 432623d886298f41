#include "net/server.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <charconv>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unordered_set>

#include "core/log.h"
#include "core/utf8.h"
#include "net/internal/request_head.h"
#include "net/internal/tls.h"
#include "net/watchdog.h"

namespace infera::net {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using boost::system::error_code;

struct LoopState;

// What a streamed body counts against max_body_bytes_in_flight: a read buffer's worth.
constexpr int64_t kStreamedBodyHeld = 1 << 20;

// What the server does to every connection whatever its stream (drain, shutdown).
class ConnectionBase : public ResponseWriter {
 public:
  virtual void closeIfIdle() = 0;
  virtual void closeSocket() = 0;
};

// The disconnect watch of one connection, reused by every request (the wait may outlive a
// request: it completes when the next request's bytes arrive, and is then ignored or re-armed).
struct WatchState {
  std::function<void()> on_close;
  bool active = false;
  bool pending = false;
  bool tls = false;
  tcp::socket* socket = nullptr;
  std::optional<asio::steady_timer> recheck;  // TLS: see checkTlsPeer
};
void armWatch(const std::shared_ptr<WatchState>& w);
void checkTlsPeer(const std::shared_ptr<WatchState>& w);

// One connection logic for both kinds of port: Connection<tcp::socket> (plain HTTP, the code it
// always was) and Connection<TlsStream> (the same after a TLS handshake; `if constexpr` marks the
// few places where they differ: the idle wait, writes, closing).
template <class Stream>
class Connection final : public ConnectionBase {
 public:
  Connection(LoopState& loop, tcp::socket socket, std::shared_ptr<const TlsServerContext> tls);
  ~Connection() override;

  // `self` keeps the connection alive for the coroutine's life (coroutines start lazily).
  Task<void> run(std::shared_ptr<Connection> self);
  void closeIfIdle() override {
    if (idle_) closeSocket();
  }
  void closeSocket() override {
    error_code ec;
    tcp::socket& socket = lowestLayer(stream_);
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }

  // ResponseWriter
  Task<bool> send(int status, std::string_view content_type, std::string_view body,
                  std::span<const HttpHeader> extra) override;
  Task<bool> start(int status, std::string_view content_type, std::span<const HttpHeader> extra,
                   int64_t content_length, std::span<const HttpHeader> relayed) override;
  Task<bool> writeChunk(std::string_view data) override;
  Task<bool> finish() override;
  bool started() const override { return started_; }
  int status() const override { return status_; }
  bool finished() const override { return finished_; }
  bool clientGone() const override { return gone_; }
  void closeAfterResponse() override { keep_alive_ = false; }
  void watchDisconnect(std::function<void()> on_close) override;

 private:
  void writeHead(int status, std::string_view content_type, std::span<const HttpHeader> extra,
                 int64_t content_length, bool chunked, std::span<const HttpHeader> relayed = {});
  Task<bool> writeBuffers(std::string_view a, std::string_view b = {}, std::string_view c = {});
  Task<void> sendError(int status, std::string_view message, std::string_view type,
                       std::string_view code);
  // An answer of the floor in the handler's error shape (HttpHandler::errorAnswer); closes after.
  Task<void> sendShaped(int status, std::string_view message, std::string_view code);
  // What the handler let escape (caught around its co_await in run(), inline: a coroutine of its
  // own would cost a frame per request): logged with the request id and answered 500 in its error
  // shape (or, when the response had started, the connection ends): one request lost, never the
  // worker or the process.
  Task<void> handlerThrew(std::exception_ptr thrown);
  // After an early error response: stop sending, then read and discard what the client is still
  // sending (bounded in bytes and time) so closing does not reset the connection before the
  // client has read the response.
  Task<void> lingeringClose();
  // Before the parser reads a chunked body: reads until the buffer holds at least the 5 bytes of
  // the shortest possible rest of the body ("0\r\n\r\n"). Beast 1.74 asserts (debug builds)
  // when it comes back to a last chunk with fewer than 5 bytes, which a body that starts with its
  // last chunk makes it do when the bytes come a few at a time (tests/fuzz/README.md). A chunked
  // body not yet done always has 5 bytes still to come, so waiting for them changes nothing else.
  Task<error_code> fillChunkedLead(RequestParser& parser);
  // TLS: the handshake, bounded by the header timeout (false: failed, counted, to be closed).
  Task<bool> handshake();
  // TLS: sends close_notify, without waiting for the client's (it may never send one).
  Task<void> closeNotify();
  static Stream makeStream(tcp::socket&& socket, const TlsServerContext* tls) {
    if constexpr (kTls<Stream>) {
      return Stream(std::move(socket), tls->ssl());
    } else {
      return std::move(socket);
    }
  }

  // A streamed route's body, read from the connection piece by piece while its handler runs.
  class StreamedBody final : public BodyReader {
   public:
    StreamedBody(Connection& c, RequestParser& p) : c_(c), p_(p) {}
    Task<Result<std::string_view>> read() override;
    int64_t declaredLength() const override {
      const auto len = p_.content_length();
      return len ? static_cast<int64_t>(*len) : -1;
    }
    bool done() const override { return p_.is_done(); }
    bool failed() const { return failed_; }

   private:
    Connection& c_;
    RequestParser& p_;
    std::string piece_;
    bool failed_ = false;
  };

  LoopState& loop_;
  std::shared_ptr<const TlsServerContext> tls_;  // outlives stream_ (which uses its SSL_CTX)
  Stream stream_;
  beast::flat_buffer buffer_;
  Watchdog watchdog_;
  HttpRequest request_;
  std::string head_;
  bool idle_ = true;
  bool keep_alive_ = true;
  bool started_ = false;
  int status_ = 0;  // of the response started
  bool finished_ = false;
  bool chunked_ = false;
  bool gone_ = false;
  bool head_only_ = false;
  bool no_body_ = false;
  bool head_pending_ = false;  // head formatted, to go out with the first body bytes
  bool http10_ = false;        // the request is HTTP/1.0: no chunked framing in the answer
  bool tls_open_ = false;      // TLS: handshake done, close_notify not sent yet
  std::string out_;            // TLS: the pieces of one write, coalesced into one record
  std::shared_ptr<WatchState> watch_ = std::make_shared<WatchState>();
};

struct LoopState {
  LoopState(asio::io_context& c, const ServerConfig& cfg, ServerStats& s)
      : ctx(c), config(cfg), stats(s), acceptor(c) {}
  asio::io_context& ctx;
  const ServerConfig& config;
  ServerStats& stats;
  tcp::acceptor acceptor;
  std::unique_ptr<HttpHandler> handler;
  std::unordered_set<ConnectionBase*> connections;
  std::shared_ptr<const TlsServerContext> tls;  // TLS ports: what new connections get
  bool draining = false;
  SteadyClock::time_point last_accept_log{};
};

template <class Stream>
Connection<Stream>::Connection(LoopState& loop, tcp::socket socket,
                               std::shared_ptr<const TlsServerContext> tls)
    : loop_(loop),
      tls_(std::move(tls)),
      stream_(makeStream(std::move(socket), tls_.get())),
      watchdog_(loop.ctx, [this] {
        loop_.stats.timeouts.fetch_add(1, std::memory_order_relaxed);
        closeSocket();
      }) {
  loop_.connections.insert(this);
  loop_.stats.connections_open.fetch_add(1, std::memory_order_relaxed);
  loop_.stats.connections_total.fetch_add(1, std::memory_order_relaxed);
  error_code ec;
  lowestLayer(stream_).set_option(tcp::no_delay(true), ec);
  head_.reserve(512);
}

template <class Stream>
Connection<Stream>::~Connection() {
  loop_.connections.erase(this);
  loop_.stats.connections_open.fetch_sub(1, std::memory_order_relaxed);
}

template <class Stream>
Task<bool> Connection<Stream>::handshake() {
  watchdog_.expireAfter(loop_.config.header_timeout);
  error_code ec;
  co_await stream_.async_handshake(asio::ssl::stream_base::server,
                                   asio::redirect_error(asio::use_awaitable, ec));
  watchdog_.disarm();
  if (ec) {
    // No client certificate, TLS 1.1, no common ALPN protocol, not TLS at all, a timeout, ...
    loop_.stats.tls_handshake_failures.fetch_add(1, std::memory_order_relaxed);
    static spdlog::logger* log = componentLogger("net");
    error_code peer_ec;
    const auto peer = lowestLayer(stream_).remote_endpoint(peer_ec);
    INFERA_LOG(log, debug, "TLS handshake from {} failed: {}",
               peer_ec ? std::string("?") : peer.address().to_string(), ec.message());
    co_return false;
  }
  tls_open_ = true;
  loop_.stats.tls_handshakes.fetch_add(1, std::memory_order_relaxed);
  if (SSL_session_reused(stream_.native_handle()) == 1) {
    loop_.stats.tls_resumed.fetch_add(1, std::memory_order_relaxed);
  }
  co_return true;
}

template <class Stream>
Task<void> Connection<Stream>::closeNotify() {
  if (!tls_open_ || gone_ || !lowestLayer(stream_).is_open()) co_return;
  tls_open_ = false;
  // As if the client's close_notify had come: SSL_shutdown writes ours and completes.
  SSL_set_shutdown(stream_.native_handle(), SSL_RECEIVED_SHUTDOWN);
  watchdog_.expireAfter(
      std::min<std::chrono::milliseconds>(loop_.config.write_timeout, std::chrono::seconds(1)));
  error_code ec;
  co_await stream_.async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
  watchdog_.disarm();
}

template <class Stream>
Task<void> Connection<Stream>::run([[maybe_unused]] std::shared_ptr<Connection> self) {
  const ServerConfig& cfg = loop_.config;
  if constexpr (kTls<Stream>) {
    if (!co_await handshake()) {
      closeSocket();
      co_return;
    }
  }
  bool first = true;
  std::optional<RequestParser> parser;
  for (;;) {
    if (loop_.draining) break;
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(cfg.max_header_bytes));
    // A streamed route may take more than max_body_bytes: the head is read with the larger limit
    // and every request's own limit is applied once its route is known (below).
    parser->body_limit(std::max<uint64_t>(cfg.max_body_bytes, cfg.max_streamed_body_bytes));
    error_code ec;
    if (!first && buffer_.size() == 0) {
      // Between keep-alive requests: idle until the next request's first byte, then that
      // request's head has the header timeout like the first one's.
      idle_ = true;
      watchdog_.expireAfter(cfg.idle_timeout);
      if constexpr (kTls<Stream>) {
        // A readable socket says nothing about bytes already inside the TLS engine (a pipelined
        // request decrypted with the previous one): read instead of waiting.
        const size_t n = co_await stream_.async_read_some(
            buffer_.prepare(16 * 1024), asio::redirect_error(asio::use_awaitable, ec));
        buffer_.commit(n);
      } else {
        co_await stream_.async_wait(tcp::socket::wait_read,
                                    asio::redirect_error(asio::use_awaitable, ec));
      }
      if (ec || loop_.draining) break;
    }
    idle_ = buffer_.size() == 0 && first;
    watchdog_.expireAfter(cfg.header_timeout);
    co_await http::async_read_header(stream_, buffer_, *parser,
                                     asio::redirect_error(asio::use_awaitable, ec));
    idle_ = false;
    first = false;
    if (ec) {
      if (ec == http::error::body_limit) {
        // Beast rejects a declared content-length over the limit right after the head.
        loop_.stats.rejected_too_large.fetch_add(1, std::memory_order_relaxed);
        // content_length() asserts a finished head; the field itself is already parsed.
        const auto declared = parser->get()[http::field::content_length];
        const std::string msg = "request body of " + std::string(declared.data(), declared.size()) +
                                " bytes exceeds the limit of " +
                                std::to_string(cfg.max_body_bytes) + " bytes";
        // Answered in the route's error shape (Qdrant's on its paths) when the head reads well;
        // its fields are parsed, only the body was refused.
        fillRequestHead(parser->get(), request_);
        const bool shaped = requestHeadProblem(parser->get().version(), request_).empty() &&
                            requestTextProblem(request_).empty();
        if (shaped) {
          co_await sendShaped(413, msg, "request_too_large");
        } else {
          co_await sendError(413, msg, "invalid_request_error", "request_too_large");
        }
        co_await lingeringClose();
      } else if (ec == http::error::header_limit) {
        loop_.stats.rejected_too_large.fetch_add(1, std::memory_order_relaxed);
        co_await sendError(431, "request headers too large", "invalid_request_error",
                           "headers_too_large");
      } else if (ec != http::error::end_of_stream && ec != asio::error::eof &&
                 ec != asio::error::operation_aborted && ec != asio::error::connection_reset &&
                 parser->got_some()) {
        // Bad framing is answered before closing, never a silent close. got_some(), not the
        // buffer: Beast consumes a complete start line from the buffer, so a head cut after it
        // left the buffer empty when it arrived in one read (closed silently) and not when it
        // arrived byte by byte (400), as fuzz_http_request found.
        loop_.stats.bad_requests.fetch_add(1, std::memory_order_relaxed);
        const std::string msg = "malformed HTTP request: " + ec.message();
        co_await sendError(400, msg, "invalid_request_error", "bad_request");
        co_await lingeringClose();
      }
      break;
    }
    fillRequestHead(parser->get(), request_);
    http10_ = parser->get().version() < 11;
    if (const std::string problem = requestHeadProblem(parser->get().version(), request_);
        !problem.empty()) {
      loop_.stats.bad_requests.fetch_add(1, std::memory_order_relaxed);
      co_await sendError(400, problem, "invalid_request_error", "bad_request");
      co_await lingeringClose();
      break;
    }
    // The floor (DESIGN.md): strings enter as valid UTF-8 or not at all, and a browser on another
    // site changes nothing here. Both are answered before the body is read.
    if (const std::string_view problem = requestTextProblem(request_); !problem.empty()) {
      loop_.stats.rejected_utf8.fetch_add(1, std::memory_order_relaxed);
      co_await sendShaped(400, problem, "invalid_utf8");
      co_await lingeringClose();
      break;
    }
    if (const std::string problem = crossSiteProblem(request_, cfg.allowed_origins);
        !problem.empty()) {
      loop_.stats.rejected_cross_site.fetch_add(1, std::memory_order_relaxed);
      co_await sendShaped(403, problem, "cross_site_request");
      co_await lingeringClose();
      break;
    }
    // A route that reads its body as it arrives has its own limit; every other body is read
    // whole, up to max_body_bytes.
    std::optional<uint64_t> streamed;
    if (cfg.max_streamed_body_bytes > 0 && !parser->is_done()) {
      streamed = loop_.handler->streamedBodyLimit(request_);
      if (streamed) streamed = std::min(*streamed, cfg.max_streamed_body_bytes);
    }
    const uint64_t body_limit = streamed ? *streamed : cfg.max_body_bytes;
    parser->body_limit(body_limit);  // a chunked body is counted as it arrives
    // Reject an oversized declared body before reading it.
    if (const auto len = parser->content_length(); len && *len > body_limit) {
      loop_.stats.rejected_too_large.fetch_add(1, std::memory_order_relaxed);
      // Named, not a temporary: g++ 12 mishandles temporaries with destructors in co_await.
      const std::string msg = "request body of " + std::to_string(*len) +
                              " bytes exceeds the limit of " + std::to_string(body_limit) +
                              " bytes";
      // The head is read: answered in the route's error shape (Qdrant's on its paths).
      co_await sendShaped(413, msg, "request_too_large");
      co_await lingeringClose();
      break;
    }
    // The body's bytes are held from here until the handler returns (bounded server-wide).
    struct BodyBytes {
      std::atomic<int64_t>& in_flight;
      int64_t held = 0;
      ~BodyBytes() { in_flight.fetch_sub(held, std::memory_order_relaxed); }
    } body_bytes{loop_.stats.body_bytes_in_flight};
    if (!parser->is_done()) {
      const auto len = parser->content_length();
      body_bytes.held = len ? static_cast<int64_t>(*len) : static_cast<int64_t>(cfg.max_body_bytes);
      // A streamed body is held a read buffer at a time, not whole.
      if (streamed) body_bytes.held = std::min<int64_t>(body_bytes.held, kStreamedBodyHeld);
      const int64_t before =
          loop_.stats.body_bytes_in_flight.fetch_add(body_bytes.held, std::memory_order_relaxed);
      if (cfg.max_body_bytes_in_flight > 0 &&
          before + body_bytes.held > cfg.max_body_bytes_in_flight) {
        loop_.stats.rejected_busy.fetch_add(1, std::memory_order_relaxed);
        co_await sendError(503, "server busy: too many request bytes in flight, retry shortly",
                           "server_error", "server_busy");
        co_await lingeringClose();
        break;
      }
      const auto expect = parser->get()[http::field::expect];
      if (!http10_ && !expect.empty() &&
          equalsLowerCase(trimOws(std::string_view(expect.data(), expect.size())),
                          "100-continue")) {
        // The client waits for a go-ahead before sending its body: a final answer now if the
        // request will be refused anyway, else 100 Continue.
        if (auto early = loop_.handler->beforeBody(request_)) {
          keep_alive_ = false;
          started_ = true;
          writeHead(early->status, early->content_type, {},
                    static_cast<int64_t>(early->body.size()), false);
          co_await writeBuffers(head_, early->body);
          finished_ = true;
          co_await lingeringClose();
          break;
        }
        if (!co_await writeBuffers("HTTP/1.1 100 Continue\r\n\r\n")) break;
      }
    }
    // A streamed body is read by the handler itself (request_.body_reader); any other is read
    // whole here first.
    const bool reads_body = !parser->is_done() && streamed;
    if (!parser->is_done() && !reads_body) {
      watchdog_.expireAfter(cfg.body_timeout);
      ec = co_await fillChunkedLead(*parser);
      if (!ec) {
        co_await http::async_read(stream_, buffer_, *parser,
                                  asio::redirect_error(asio::use_awaitable, ec));
      }
      if (ec) {
        if (ec == http::error::body_limit) {
          loop_.stats.rejected_too_large.fetch_add(1, std::memory_order_relaxed);
          co_await sendError(413, "request body exceeds the limit", "invalid_request_error",
                             "request_too_large");
          co_await lingeringClose();
        } else if (ec != http::error::end_of_stream && ec != http::error::partial_message &&
                   ec != asio::error::eof && ec != asio::error::operation_aborted &&
                   ec != asio::error::connection_reset) {
          loop_.stats.bad_requests.fetch_add(1, std::memory_order_relaxed);
          const std::string msg = "malformed HTTP request body: " + ec.message();
          co_await sendError(400, msg, "invalid_request_error", "bad_request");
          co_await lingeringClose();
        }
        break;
      }
    }
    watchdog_.disarm();
    loop_.stats.requests_total.fetch_add(1, std::memory_order_relaxed);
    std::optional<StreamedBody> reader;
    if (reads_body) {
      reader.emplace(*this, *parser);
      request_.body.clear();
      request_.body_reader = &*reader;
    } else {
      request_.body = std::move(parser->get().body());
    }
    keep_alive_ = request_.keep_alive && !loop_.draining;
    started_ = finished_ = chunked_ = no_body_ = head_pending_ = false;
    status_ = 0;
    head_only_ = request_.method == "HEAD";
    // The try stays here, around the one call site: a helper coroutine would cost every request
    // a frame (docs/benchmarks.md, the floor's cost).
    std::exception_ptr thrown;
    try {
      co_await loop_.handler->handle(request_, *this);
    } catch (...) {
      thrown = std::current_exception();
    }
    if (thrown) co_await handlerThrew(thrown);
    request_.body_reader = nullptr;
    watch_->active = false;
    watch_->on_close = nullptr;
    if (!started_ && !gone_) {
      co_await sendError(500, "handler wrote no response", "server_error", "internal_error");
    } else if (started_ && !finished_) {
      keep_alive_ = false;  // a response cut short cannot be framed; close.
    }
    // A streamed body the handler did not read to its end (it answered early, or the read failed)
    // cannot be skipped reliably: the connection ends here, without resetting the client's view of
    // the answer.
    if (reads_body && !parser->is_done() && !gone_) {
      co_await lingeringClose();
      break;
    }
    if (gone_ || !keep_alive_ || loop_.draining) break;
  }
  watchdog_.disarm();
  if constexpr (kTls<Stream>) co_await closeNotify();
  closeSocket();
}

template <class Stream>
Task<Result<std::string_view>> Connection<Stream>::StreamedBody::read() {
  if (failed_) co_return Status::unavailable("the request body failed to read earlier");
  std::string& body = p_.get().body();
  for (;;) {
    if (!body.empty()) {
      // Hands out what the parser appended, keeping both buffers' capacity (no growth past a read).
      piece_.clear();
      piece_.swap(body);
      co_return std::string_view(piece_);
    }
    if (p_.is_done()) co_return std::string_view();
    c_.watchdog_.expireAfter(c_.loop_.config.body_timeout);
    error_code ec = co_await c_.fillChunkedLead(p_);
    if (!ec) {
      co_await http::async_read_some(c_.stream_, c_.buffer_, p_,
                                     asio::redirect_error(asio::use_awaitable, ec));
    }
    c_.watchdog_.disarm();
    if (!ec) continue;
    failed_ = true;
    if (ec == http::error::body_limit) {
      c_.loop_.stats.rejected_too_large.fetch_add(1, std::memory_order_relaxed);
      co_return Status::payloadTooLarge("request body exceeds the limit");
    }
    if (!lowestLayer(c_.stream_).is_open() || ec == asio::error::operation_aborted) {
      co_return Status::deadlineExceeded("request body: no bytes within the body timeout");
    }
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ec == asio::error::eof || ec == asio::error::connection_reset) {
      co_return Status::unavailable("the client closed the connection before the end of the body");
    }
    c_.loop_.stats.bad_requests.fetch_add(1, std::memory_order_relaxed);
    co_return Status::invalidArgument("malformed HTTP request body: " + ec.message());
  }
}

template <class Stream>
Task<error_code> Connection<Stream>::fillChunkedLead(RequestParser& parser) {
  constexpr size_t kShortestRest = 5;
  error_code ec;
  while (parser.chunked() && !parser.is_done() && buffer_.size() < kShortestRest) {
    const size_t n = co_await stream_.async_read_some(
        buffer_.prepare(16 * 1024), asio::redirect_error(asio::use_awaitable, ec));
    buffer_.commit(n);
    if (ec) break;
  }
  co_return ec;
}

template <class Stream>
Task<void> Connection<Stream>::lingeringClose() {
  if constexpr (kTls<Stream>) co_await closeNotify();
  // What the client still sends is discarded below TLS, as raw bytes.
  tcp::socket& socket = lowestLayer(stream_);
  error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  char scratch[4096];
  size_t discarded = 0;
  watchdog_.expireAfter(std::chrono::milliseconds(1000));
  while (!ec && discarded < (4u << 20)) {
    const size_t n = co_await socket.async_read_some(asio::buffer(scratch),
                                                     asio::redirect_error(asio::use_awaitable, ec));
    discarded += n;
  }
  watchdog_.disarm();
}

template <class Stream>
void Connection<Stream>::writeHead(int status, std::string_view content_type,
                                   std::span<const HttpHeader> extra, int64_t content_length,
                                   bool chunked, std::span<const HttpHeader> relayed) {
  status_ = status;
  head_.clear();
  head_ += "HTTP/1.1 ";
  char num[24];
  auto r = std::to_chars(num, num + sizeof(num), status);
  head_.append(num, r.ptr);
  head_ += ' ';
  head_ += reasonPhrase(status);
  head_ += "\r\n";
  if (!content_type.empty()) {
    head_ += "content-type: ";
    head_ += content_type;
    head_ += "\r\n";
  }
  for (const auto& h : relayed) {
    if (isHopByHopHeader(h.name) || h.name == "content-type" || h.name == "x-request-id" ||
        h.name == "server" || h.name == "date") {
      continue;
    }
    head_ += h.name;
    head_ += ": ";
    head_ += h.value;
    head_ += "\r\n";
  }
  for (const auto& h : extra) {
    head_ += h.name;
    head_ += ": ";
    head_ += h.value;
    head_ += "\r\n";
  }
  if (chunked) {
    head_ += "transfer-encoding: chunked\r\n";
  } else if (content_length >= 0) {
    head_ += "content-length: ";
    r = std::to_chars(num, num + sizeof(num), content_length);
    head_.append(num, r.ptr);
    head_ += "\r\n";
  }
  if (!keep_alive_) {
    head_ += "connection: close\r\n";
  } else if (http10_) {
    head_ += "connection: keep-alive\r\n";  // a 1.0 client closes unless told otherwise
  }
  head_ += "\r\n";
}

template <class Stream>
Task<bool> Connection<Stream>::writeBuffers(std::string_view a, std::string_view b,
                                            std::string_view c) {
  if (gone_) co_return false;
  std::array<asio::const_buffer, 3> bufs{asio::buffer(a.data(), a.size()),
                                         asio::buffer(b.data(), b.size()),
                                         asio::buffer(c.data(), c.size())};
  watchdog_.expireAfter(loop_.config.write_timeout);
  error_code ec;
  if constexpr (kTls<Stream>) {
    // TLS writes one record (and one syscall) per buffer: a chunk's size line, data and CRLF go
    // as one when they fit a record.
    constexpr size_t kRecordBytes = 16 * 1024;
    if (a.size() + b.size() + c.size() <= kRecordBytes && (!b.empty() || !c.empty())) {
      out_.clear();
      out_.append(a);
      out_.append(b);
      out_.append(c);
      co_await asio::async_write(stream_, asio::buffer(out_),
                                 asio::redirect_error(asio::use_awaitable, ec));
    } else {
      co_await asio::async_write(stream_, bufs, asio::redirect_error(asio::use_awaitable, ec));
    }
  } else {
    co_await asio::async_write(stream_, bufs, asio::redirect_error(asio::use_awaitable, ec));
  }
  watchdog_.disarm();
  if (ec) {
    gone_ = true;
    co_return false;
  }
  co_return true;
}

template <class Stream>
Task<bool> Connection<Stream>::send(int status, std::string_view content_type,
                                    std::string_view body, std::span<const HttpHeader> extra) {
  INFERA_CHECK(!started_, "response already started");
  started_ = true;
  writeHead(status, content_type, extra, static_cast<int64_t>(body.size()), false);
  const bool ok = co_await writeBuffers(head_, head_only_ ? std::string_view() : body);
  finished_ = ok;
  co_return ok;
}

template <class Stream>
Task<bool> Connection<Stream>::start(int status, std::string_view content_type,
                                     std::span<const HttpHeader> extra, int64_t content_length,
                                     std::span<const HttpHeader> relayed) {
  INFERA_CHECK(!started_, "response already started");
  started_ = true;
  // Statuses that never carry a body (and HEAD answers) get neither chunked framing nor bytes.
  no_body_ = head_only_ || status < 200 || status == 204 || status == 304;
  // An HTTP/1.0 client knows no chunked framing: a body of unknown length ends with the connection.
  if (http10_ && content_length < 0 && !no_body_) keep_alive_ = false;
  chunked_ = content_length < 0 && !no_body_ && !http10_;
  writeHead(status, content_type, extra,
            no_body_ && status != 304 && !head_only_ ? -1 : content_length, chunked_, relayed);
  if (!chunked_ && !no_body_ && content_length > 0) {
    // A sized body follows: send the head with its first bytes, in one write (one syscall).
    head_pending_ = true;
    co_return !gone_;
  }
  co_return co_await writeBuffers(head_);
}

template <class Stream>
Task<bool> Connection<Stream>::writeChunk(std::string_view data) {
  INFERA_CHECK(started_ && !finished_, "writeChunk outside a started response");
  if (data.empty() || no_body_) co_return !gone_;
  if (head_pending_) {
    head_pending_ = false;
    co_return co_await writeBuffers(head_, data);
  }
  if (!chunked_) co_return co_await writeBuffers(data);
  char size_line[24];
  auto r = std::to_chars(size_line, size_line + 20, data.size(), 16);
  *r.ptr++ = '\r';
  *r.ptr++ = '\n';
  co_return co_await writeBuffers(
      std::string_view(size_line, static_cast<size_t>(r.ptr - size_line)), data, "\r\n");
}

template <class Stream>
Task<bool> Connection<Stream>::finish() {
  INFERA_CHECK(started_, "finish before start");
  if (finished_) co_return !gone_;
  bool ok = !gone_;
  if (head_pending_) {
    head_pending_ = false;
    ok = co_await writeBuffers(head_);
  }
  if (chunked_) ok = co_await writeBuffers("0\r\n\r\n");
  finished_ = ok;
  co_return ok;
}

template <class Stream>
Task<void> Connection<Stream>::sendError(int status, std::string_view message,
                                         std::string_view type, std::string_view code) {
  keep_alive_ = false;
  started_ = true;
  const std::string body = errorJson(message, type, code);
  writeHead(status, "application/json", {}, static_cast<int64_t>(body.size()), false);
  co_await writeBuffers(head_, body);
  finished_ = true;
}

template <class Stream>
Task<void> Connection<Stream>::sendShaped(int status, std::string_view message,
                                          std::string_view code) {
  keep_alive_ = false;
  started_ = true;
  const EarlyAnswer a = loop_.handler->errorAnswer(request_, status, message, code);
  writeHead(status, a.content_type, {}, static_cast<int64_t>(a.body.size()), false);
  co_await writeBuffers(head_, a.body);
  finished_ = true;
}

template <class Stream>
Task<void> Connection<Stream>::handlerThrew(std::exception_ptr e) {
  std::string thrown;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    thrown = ex.what();
    if (thrown.empty()) thrown = "an exception without a message";
  } catch (...) {
    thrown = "an exception of unknown type";
  }
  loop_.stats.handler_exceptions.fetch_add(1, std::memory_order_relaxed);
  const std::string_view request_id = request_.header("x-request-id");
  INFERA_LOG(componentLogger("net"), err, "{} {} (request id {}): the handler threw: {}",
             request_.method, toValidUtf8(request_.path()),
             request_id.empty() ? std::string("none") : toValidUtf8(request_id),
             toValidUtf8(thrown));
  if (!started_ && !gone_) {
    co_await sendShaped(500, "internal error: the request failed on the server (logged)",
                        "internal_error");
  } else {
    keep_alive_ = false;  // a response cut short cannot be framed: the connection ends
  }
}

template <class Stream>
void Connection<Stream>::watchDisconnect(std::function<void()> on_close) {
  if (watch_->active || gone_) return;
  watch_->on_close = std::move(on_close);
  watch_->active = true;
  watch_->socket = &lowestLayer(stream_);
  watch_->tls = kTls<Stream>;
  if (!watch_->pending) armWatch(watch_);
}

// Under TLS the first bytes may be a close_notify (encrypted in TLS 1.3: not told apart from data),
// so the FIN behind them decides: POLLRDHUP sees it past unread bytes. While bytes wait without a
// FIN (a pipelined request, or a close_notify whose FIN is still on its way) it looks again every
// 100 ms until the handler returns.
void checkTlsPeer(const std::shared_ptr<WatchState>& w) {
  pollfd p{w->socket->native_handle(), POLLIN | POLLRDHUP, 0};
  const int r = ::poll(&p, 1, 0);
  if (r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    w->active = false;
    w->on_close();
    return;
  }
  if (r == 0) {
    armWatch(w);  // a stale wakeup
    return;
  }
  if (!w->recheck) w->recheck.emplace(w->socket->get_executor());
  w->pending = true;
  w->recheck->expires_after(std::chrono::milliseconds(100));
  w->recheck->async_wait([w](const error_code& ec) {
    w->pending = false;
    if (ec || !w->active) return;
    if (!w->socket->is_open()) {
      w->active = false;
      w->on_close();
      return;
    }
    checkTlsPeer(w);
  });
}

void armWatch(const std::shared_ptr<WatchState>& w) {
  w->pending = true;
  // wait_read completes on data or EOF without consuming anything; MSG_PEEK tells them apart.
  w->socket->async_wait(tcp::socket::wait_read, [w](const error_code& ec) {
    w->pending = false;
    if (!w->active) return;
    if (ec) {
      // The socket was closed under the handler (shutdown, timeout): the client is gone for it.
      w->active = false;
      w->on_close();
      return;
    }
    if (!w->socket->is_open()) {
      w->active = false;
      w->on_close();
      return;
    }
    if (w->tls) {
      checkTlsPeer(w);
      return;
    }
    char byte;
    const ssize_t n = ::recv(w->socket->native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      w->active = false;
      w->on_close();
    } else if (n < 0) {
      armWatch(w);  // a stale wakeup (its bytes were read by the request loop): wait again
    }
    // n > 0: the client pipelined its next request; it is still there.
  });
}

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(EventLoops& loops, ServerConfig config)
      : loops_(loops), config_(std::move(config)) {}

  Status init(HandlerFactory factory) {
    error_code addr_ec;
    const auto address = asio::ip::make_address(config_.host, addr_ec);
    if (addr_ec) {
      return Status::invalidArgument("listen host must be an IP address, got '" + config_.host +
                                     "'");
    }
    tcp::endpoint endpoint(address, config_.port);
    if (config_.port != 0) {
      // SO_REUSEPORT lets a second process join a port and take every other connection: a second
      // `infera serve` on the same ports would start silently and serve half the requests with
      // its own config. A plain bind (no SO_REUSEPORT) first finds any listener already there.
      tcp::acceptor probe(loops_.loop(0));
      error_code ec;
      probe.open(endpoint.protocol(), ec);
      if (!ec) probe.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) probe.bind(endpoint, ec);
      if (ec == asio::error::address_in_use) {
        return Status::unavailable("cannot listen on " + config_.host + ":" +
                                   std::to_string(config_.port) +
                                   ": another process is already listening there");
      }
      probe.close(ec);
    }
    for (int i = 0; i < loops_.size(); ++i) {
      auto state = std::make_unique<LoopState>(loops_.loop(i), config_, stats_);
      error_code ec;
      state->acceptor.open(endpoint.protocol(), ec);
      if (!ec) state->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) {
        int one = 1;
        if (::setsockopt(state->acceptor.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one,
                         sizeof(one)) != 0) {
          ec = error_code(errno, boost::system::system_category());
        }
      }
      if (!ec) state->acceptor.bind(endpoint, ec);
      if (!ec) state->acceptor.listen(config_.backlog, ec);
      if (ec) {
        return Status::unavailable("cannot listen on " + config_.host + ":" +
                                   std::to_string(endpoint.port()) + ": " + ec.message());
      }
      // With port 0, the first bind picks the port and the others join it.
      endpoint.port(state->acceptor.local_endpoint().port());
      states_.push_back(std::move(state));
    }
    port_ = endpoint.port();
    if (config_.tls) {
      auto tls = loadServerTls(*config_.tls);
      if (!tls.ok()) return tls.status().withContext("TLS");
      tls_config_ = *config_.tls;
      tls_ = *tls;
      stats_.tls_not_after_s.store(tls_->info.not_after_s);
      for (auto& st : states_) st->tls = tls_;  // before the loops see the states
      watcher_ = std::thread([this] { watchTlsFiles(); });
    }
    // Handlers are created and acceptors started on their own loops.
    for (int i = 0; i < loops_.size(); ++i) {
      LoopState* st = states_[static_cast<size_t>(i)].get();
      accept_loops_.fetch_add(1);
      asio::post(loops_.loop(i), [this, st, i, factory] {
        st->handler = factory(i, st->ctx);
        spawn(st->ctx, acceptLoop(st), "accept loop");
      });
    }
    return Status::ok();
  }

  uint16_t port() const override { return port_; }
  const ServerStats& stats() const override { return stats_; }

  Result<std::shared_ptr<const TlsServerContext>> loadTls(const TlsServerConfig& config) override {
    if (!config_.tls)
      return Status::failedPrecondition("port " + std::to_string(port_) + " serves plain HTTP");
    auto tls = loadServerTls(config);
    if (!tls.ok()) {
      stats_.tls_reload_failures.fetch_add(1, std::memory_order_relaxed);
      INFERA_LOG(log_, err,
                 "TLS certificate for port {} refused, the previous one keeps serving: {}", port_,
                 tls.status().message());
    }
    return tls;
  }

  Status useTls(std::shared_ptr<const TlsServerContext> context,
                const TlsServerConfig& config) override {
    if (!config_.tls)
      return Status::failedPrecondition("port " + std::to_string(port_) + " serves plain HTTP");
    std::lock_guard<std::mutex> lock(tls_mu_);
    install(std::move(context), config);
    return Status::ok();
  }

  Status reloadTls(const TlsServerConfig& config) override {
    if (!config_.tls)
      return Status::failedPrecondition("port " + std::to_string(port_) + " serves plain HTTP");
    auto tls = loadTls(config);
    if (!tls.ok()) return tls.takeStatus();
    return useTls(std::move(*tls), config);
  }

  std::optional<TlsCertificateInfo> tlsCertificate() const override {
    std::lock_guard<std::mutex> lock(tls_mu_);
    if (!tls_) return std::nullopt;
    return tls_->info;
  }

  bool drain(std::chrono::milliseconds timeout) override {
    for (size_t i = 0; i < states_.size(); ++i) {
      LoopState* st = states_[i].get();
      asio::post(st->ctx, [st] {
        st->draining = true;
        error_code ec;
        st->acceptor.close(ec);
        // Copy first: closing may destroy connections.
        std::vector<ConnectionBase*> conns(st->connections.begin(), st->connections.end());
        for (auto* c : conns) c->closeIfIdle();
      });
    }
    const auto deadline = SteadyClock::now() + timeout;
    while (stats_.connections_open.load() > 0 && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return stats_.connections_open.load() == 0;
  }

  // Contract: destroy the server while its loops still run. Closes everything on the loops,
  // waits for connections and accept loops to end, then destroys the handlers on their loops.
  ~HttpServerImpl() override {
    if (watcher_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(tls_mu_);
        stop_watch_ = true;
      }
      tls_cv_.notify_all();
      watcher_.join();
    }
    for (auto& sp : states_) {
      LoopState* st = sp.get();
      asio::post(st->ctx, [st] {
        st->draining = true;
        error_code ec;
        st->acceptor.close(ec);
        std::vector<ConnectionBase*> conns(st->connections.begin(), st->connections.end());
        for (auto* c : conns) c->closeSocket();
      });
    }
    const auto deadline = SteadyClock::now() + std::chrono::seconds(10);
    while ((stats_.connections_open.load() > 0 || accept_loops_.load() > 0) &&
           SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    INFERA_CHECK(stats_.connections_open.load() == 0 && accept_loops_.load() == 0,
                 "HttpServer destroyed with connections still open (were the loops stopped?)");
    std::atomic<int> pending{static_cast<int>(states_.size())};
    for (auto& sp : states_) {
      LoopState* st = sp.get();
      asio::post(st->ctx, [st, &pending] {
        st->handler.reset();
        pending.fetch_sub(1);
      });
    }
    while (pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

 private:
  Task<void> acceptLoop(LoopState* st) {
    struct Done {
      std::atomic<int>& n;
      ~Done() { n.fetch_sub(1); }
    } done{accept_loops_};
    for (;;) {
      error_code ec;
      tcp::socket socket(st->ctx);
      co_await st->acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || !st->acceptor.is_open()) co_return;
        // e.g. EMFILE: keep serving existing connections and try again shortly (not in a spin);
        // counted, and logged at most once a second.
        stats_.accept_errors.fetch_add(1, std::memory_order_relaxed);
        const auto now = SteadyClock::now();
        if (now - st->last_accept_log >= std::chrono::seconds(1)) {
          st->last_accept_log = now;
          static spdlog::logger* log = componentLogger("net");
          INFERA_LOG(log, warn,
                     "accept on {}:{} failed: {} (existing connections keep being served)",
                     config_.host, port_, ec.message());
        }
        co_await sleepUntil(now + std::chrono::milliseconds(50));
        continue;
      }
      if (st->draining) continue;
      if (config_.max_connections > 0 &&
          stats_.connections_open.load(std::memory_order_relaxed) >= config_.max_connections) {
        stats_.rejected_connections.fetch_add(1, std::memory_order_relaxed);
        error_code ignored;
        socket.close(ignored);
        continue;
      }
      if (config_.tls) {
        auto conn = std::make_shared<Connection<TlsStream>>(*st, std::move(socket), st->tls);
        Connection<TlsStream>* raw = conn.get();
        spawn(st->ctx, raw->run(std::move(conn)), "https connection");
      } else {
        auto conn = std::make_shared<Connection<tcp::socket>>(*st, std::move(socket), nullptr);
        Connection<tcp::socket>* raw = conn.get();
        spawn(st->ctx, raw->run(std::move(conn)), "http connection");
      }
    }
  }

  // Under tls_mu_. New connections on every loop get `context`; the watch follows `config`.
  void install(std::shared_ptr<const TlsServerContext> context, const TlsServerConfig& config) {
    tls_config_ = config;
    tls_ = std::move(context);
    failed_stamps_.clear();
    stats_.tls_reloads.fetch_add(1, std::memory_order_relaxed);
    stats_.tls_not_after_s.store(tls_->info.not_after_s);
    for (auto& sp : states_) {
      LoopState* st = sp.get();
      asio::post(st->ctx, [st, tls = tls_] { st->tls = tls; });
    }
    INFERA_LOG(log_, info, "TLS certificate for port {} in use: {} (serial {})", port_,
               tls_->info.subject, tls_->info.serial);
    tls_cv_.notify_all();
  }

  // The watch thread: every watch_interval, the files' inode, size and mtime; a change loads them
  // (here, off the loops), and a load that fails is not retried until the files change again.
  void watchTlsFiles() {
    std::unique_lock<std::mutex> lock(tls_mu_);
    while (!stop_watch_) {
      const auto interval = tls_config_.watch_interval;
      if (interval.count() <= 0) {
        tls_cv_.wait(lock);
        continue;
      }
      tls_cv_.wait_for(lock, interval);
      if (stop_watch_) break;
      const std::string stamps = tlsFileStamps(tls_config_);
      if (stamps == tls_->stamps || stamps == failed_stamps_) continue;
      auto tls = loadTls(tls_config_);
      if (!tls.ok()) {
        failed_stamps_ = stamps;
        continue;
      }
      install(std::move(*tls), tls_config_);
    }
  }

  EventLoops& loops_;
  ServerConfig config_;
  ServerStats stats_;
  std::vector<std::unique_ptr<LoopState>> states_;
  uint16_t port_ = 0;
  std::atomic<int> accept_loops_{0};
  spdlog::logger* log_ = componentLogger("net");
  // TLS: the context in use and the files it came from, the watch thread (all under tls_mu_).
  mutable std::mutex tls_mu_;
  std::condition_variable tls_cv_;
  TlsServerConfig tls_config_;
  std::shared_ptr<const TlsServerContext> tls_;
  std::string failed_stamps_;
  bool stop_watch_ = false;
  std::thread watcher_;
};

}  // namespace

EarlyAnswer defaultErrorAnswer(int status, std::string_view message, std::string_view code) {
  std::string_view type = "invalid_request_error";
  if (status == 401) type = "authentication_error";
  if (status == 403) type = "permission_error";
  if (status >= 500) type = "server_error";
  return {status, "application/json", errorJson(toValidUtf8(message), type, code)};
}

EarlyAnswer HttpHandler::errorAnswer(const HttpRequest&, int status, std::string_view message,
                                     std::string_view code) {
  return defaultErrorAnswer(status, message, code);
}

Result<std::unique_ptr<HttpServer>> HttpServer::create(EventLoops& loops, ServerConfig config,
                                                       HandlerFactory factory) {
  auto server = std::make_unique<HttpServerImpl>(loops, std::move(config));
  INFERA_RETURN_IF_ERROR(server->init(std::move(factory)));
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace infera::net
