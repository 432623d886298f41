#include "net/client.h"

#include <netdb.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <charconv>
#include <deque>
#include <limits>

#include "net/internal/request_head.h"
#include "net/internal/tls.h"
#include "net/watchdog.h"

namespace infera::net {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using boost::system::error_code;

constexpr size_t kBodyChunkBytes = 16 * 1024;

// Stream: tcp::socket (http://) or TlsStream (https://); one exchange logic for both.
template <class Stream>
class UpstreamConnectionImpl final : public UpstreamConnection {
 public:
  UpstreamConnectionImpl(asio::io_context& ctx, tcp::socket socket,
                         std::shared_ptr<const TlsClientContext> tls, uint64_t generation)
      : tls_(std::move(tls)),
        stream_(makeStream(std::move(socket), tls_.get())),
        watchdog_(ctx,
                  [this] {
                    timed_out_ = true;
                    closeSocket();
                  }),
        generation_(generation) {
    request_head_.reserve(512);
  }
  ~UpstreamConnectionImpl() override {
    // OpenSSL marks the session of an SSL freed without a shutdown not resumable (and the pool
    // holds that session): a connection closed after clean exchanges counts as shut down.
    if constexpr (kTls<Stream>) {
      if (!tls_failed_)
        SSL_set_shutdown(stream_.native_handle(), SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    }
  }

  // TLS: the client handshake (SNI, the name to verify, the session to offer) until `deadline`.
  Task<Status> handshake(const std::string& host, const std::shared_ptr<TlsSessionSlot>& slot,
                         Deadline deadline, const tcp::endpoint& ep) {
    session_ = slot;
    prepareClientSsl(stream_.native_handle(), *tls_, host, session_.get());
    watchdog_.expireAt(deadline);
    error_code ec;
    co_await stream_.async_handshake(asio::ssl::stream_base::client,
                                     asio::redirect_error(asio::use_awaitable, ec));
    watchdog_.disarm();
    if (!ec) co_return Status::ok();
    tls_failed_ = true;
    const std::string where = "TLS handshake with upstream " + host + " (" +
                              ep.address().to_string() + ":" + std::to_string(ep.port()) + ")";
    if (timed_out_) co_return Status::deadlineExceeded(where + " timed out");
    co_return Status::unavailable(where +
                                  " failed: " + clientHandshakeError(stream_.native_handle(), ec));
  }

  Task<Status> send(const ClientRequest& req, Deadline deadline) override {
    clean_ = false;
    timed_out_ = false;
    request_head_.clear();
    appendRequestHead(req, request_head_);
    head_only_ = req.method == "HEAD";
    std::string_view body = req.body;
    if constexpr (kTls<Stream>) {
      // One TLS record (and syscall) per buffer: a small body goes with the head.
      if (!body.empty() && request_head_.size() + body.size() <= 16 * 1024) {
        request_head_.append(body);
        body = {};
      }
    }
    std::array<asio::const_buffer, 2> bufs{asio::buffer(request_head_),
                                           asio::buffer(body.data(), body.size())};
    watchdog_.expireAt(deadline);
    error_code ec;
    if constexpr (kTls<Stream>) {
      if (body.empty()) {
        co_await asio::async_write(stream_, asio::buffer(request_head_),
                                   asio::redirect_error(asio::use_awaitable, ec));
      } else {
        co_await asio::async_write(stream_, bufs, asio::redirect_error(asio::use_awaitable, ec));
      }
    } else {
      co_await asio::async_write(stream_, bufs, asio::redirect_error(asio::use_awaitable, ec));
    }
    watchdog_.disarm();
    if (ec) co_return errorStatus(ec, "sending request");
    co_return Status::ok();
  }

  Task<Result<const ClientResponseHead*>> readHead(Deadline deadline) override {
    closed_before_response_ = false;
    error_code ec;
    watchdog_.expireAt(deadline);
    // Interim 1xx responses (100 Continue, 103 Early Hints) are skipped: only the final one counts.
    for (bool first = true;; first = false) {
      parser_.emplace();
      // Not boost::none: Beast 1.74 compares the length against an empty optional and fails.
      parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
      parser_->header_limit(64 * 1024);
      if (head_only_) parser_->skip(true);
      const size_t buffered = buffer_.size();
      co_await http::async_read_header(stream_, buffer_, *parser_,
                                       asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        closed_before_response_ = first && buffered == 0 && !timed_out_ && !aborted_ &&
                                  (ec == http::error::end_of_stream ||
                                   ec == asio::error::connection_reset || ec == asio::error::eof);
        break;
      }
      const int status = static_cast<int>(parser_->get().result_int());
      if (status < 100 || status >= 200 || status == 101) break;
    }
    watchdog_.disarm();
    if (ec) co_return errorStatus(ec, "reading response head");
    const auto& msg = parser_->get();
    head_.status = static_cast<int>(msg.result_int());
    size_t n = 0;  // reuse the previous response's header strings
    for (const auto& f : msg.base()) {
      if (n == head_.headers.size()) head_.headers.emplace_back();
      HttpHeader& h = head_.headers[n++];
      h.name.assign(f.name_string().data(), f.name_string().size());
      for (auto& c : h.name) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      h.value.assign(f.value().data(), f.value().size());
    }
    head_.headers.resize(n);
    head_.chunked = parser_->chunked();
    const auto len = parser_->content_length();
    head_.content_length = len ? static_cast<int64_t>(*len) : -1;
    keep_alive_ = msg.keep_alive();
    if (parser_->is_done()) clean_ = keep_alive_;
    co_return &head_;
  }

  Task<Result<std::string_view>> readBody(Deadline deadline) override {
    for (;;) {
      if (!parser_ || parser_->is_done()) {
        clean_ = keep_alive_;
        co_return std::string_view();
      }
      auto& body = parser_->get().body();
      body.data = chunk_;
      body.size = kBodyChunkBytes;
      watchdog_.expireAt(deadline);
      error_code ec;
      co_await http::async_read_some(stream_, buffer_, *parser_,
                                     asio::redirect_error(asio::use_awaitable, ec));
      watchdog_.disarm();
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return errorStatus(ec, "reading response body");
      const size_t n = kBodyChunkBytes - body.size;
      if (n > 0) co_return std::string_view(chunk_, n);
    }
  }

  void abort() override {
    aborted_ = true;
    closeSocket();
  }
  bool reusable() const override { return clean_ && !aborted_ && lowestLayer(stream_).is_open(); }
  bool reused() const override { return reused_; }
  bool closedBeforeResponse() const override { return closed_before_response_; }
  void markReused() { reused_ = true; }
  tcp::socket& socket() { return lowestLayer(stream_); }
  uint64_t generation() const { return generation_; }

 private:
  static Stream makeStream(tcp::socket&& socket, const TlsClientContext* tls) {
    if constexpr (kTls<Stream>) {
      return Stream(std::move(socket), tls->ssl());
    } else {
      return std::move(socket);
    }
  }
  // No close_notify to the upstream: it would be a blocking write or a coroutine per closed
  // connection, and HTTP framing, not TLS's end, tells a whole response.
  void closeSocket() {
    error_code ec;
    tcp::socket& socket = lowestLayer(stream_);
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }
  Status errorStatus(const error_code& ec, const char* what) {
    clean_ = false;
    if (ec.category() == asio::error::get_ssl_category()) tls_failed_ = true;
    if (timed_out_) return Status::deadlineExceeded(std::string("upstream timed out ") + what);
    if (aborted_) return Status::cancelled(std::string("upstream request cancelled while ") + what);
    return Status::unavailable(std::string("upstream error ") + what + ": " + ec.message());
  }

  std::shared_ptr<const TlsClientContext> tls_;  // outlives stream_ (its SSL_CTX)
  std::shared_ptr<TlsSessionSlot> session_;      // where new sessions go (SSL ex_data points here)
  Stream stream_;
  Watchdog watchdog_;
  uint64_t generation_;  // the pool's address generation it was made for
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  ClientResponseHead head_;
  std::string request_head_;
  char chunk_[kBodyChunkBytes];
  bool keep_alive_ = true;
  bool clean_ = false;
  bool timed_out_ = false;
  bool aborted_ = false;
  bool head_only_ = false;
  bool reused_ = false;
  bool closed_before_response_ = false;
  bool tls_failed_ = false;  // a TLS-level error (not a close or a cancellation) was seen
};

// Where and how to connect: TLS when `tls` is set (its handshake until the earlier of the deadline
// and handshake_budget after the TCP connect).
struct ConnectTarget {
  tcp::endpoint endpoint;
  std::shared_ptr<const TlsClientContext> tls;
  std::string host;
  std::shared_ptr<TlsSessionSlot> session;
  std::chrono::milliseconds handshake_budget = std::chrono::milliseconds::max();
  uint64_t generation = 0;
};

template <class Stream>
Task<Result<std::unique_ptr<UpstreamConnectionImpl<Stream>>>> connectTo(asio::io_context& ctx,
                                                                        const ConnectTarget& target,
                                                                        Deadline deadline) {
  const tcp::endpoint& ep = target.endpoint;
  tcp::socket socket(ctx);
  bool timed_out = false;
  Watchdog wd(ctx, [&] {
    timed_out = true;
    error_code ec;
    socket.close(ec);
  });
  wd.expireAt(deadline);
  error_code ec;
  co_await socket.async_connect(ep, asio::redirect_error(asio::use_awaitable, ec));
  wd.disarm();
  if (ec) {
    if (timed_out) {
      co_return Status::deadlineExceeded("connect to upstream " + ep.address().to_string() + ":" +
                                         std::to_string(ep.port()) + " timed out");
    }
    co_return Status::unavailable("connect to upstream " + ep.address().to_string() + ":" +
                                  std::to_string(ep.port()) + " failed: " + ec.message());
  }
  socket.set_option(tcp::no_delay(true), ec);
  auto conn = std::make_unique<UpstreamConnectionImpl<Stream>>(ctx, std::move(socket), target.tls,
                                                               target.generation);
  if constexpr (kTls<Stream>) {
    const auto now = SteadyClock::now();
    const Deadline hs_deadline = target.handshake_budget == std::chrono::milliseconds::max()
                                     ? deadline
                                     : std::min(deadline, now + target.handshake_budget);
    Status hs = co_await conn->handshake(target.host, target.session, hs_deadline, ep);
    if (!hs.isOk()) co_return hs;
  }
  co_return conn;
}

template <class Stream>
class ConnectionPoolImpl final : public ConnectionPool {
 public:
  ConnectionPoolImpl(asio::io_context& ctx, const UpstreamAddress& address, PoolConfig cfg)
      : ctx_(ctx), config_(cfg), sweep_timer_(ctx) {
    target_.endpoint = address.endpoint;
    target_.tls = address.tls;
    target_.host = address.host;
    if constexpr (kTls<Stream>) target_.session = std::make_shared<TlsSessionSlot>();
  }
  ~ConnectionPoolImpl() override { *alive_ = false; }

  void configure(const PoolConfig& config) override {
    config_ = config;
    trim(SteadyClock::now());
  }

  void setAddress(const UpstreamAddress& address) override {
    bool same = address.endpoint == target_.endpoint && address.host == target_.host;
    if constexpr (kTls<Stream>) {
      same = same && address.tls &&
             clientTlsFingerprint(*address.tls) == clientTlsFingerprint(*target_.tls);
    }
    if (same) return;  // keeps its connections and its own (identical) context
    target_.endpoint = address.endpoint;
    target_.host = address.host;
    if constexpr (kTls<Stream>) {
      if (address.tls) target_.tls = address.tls;
      target_.session = std::make_shared<TlsSessionSlot>();
    }
    ++target_.generation;
    idle_.clear();
  }

  Task<Result<std::unique_ptr<UpstreamConnection>>> acquire(Deadline deadline,
                                                            bool fresh) override {
    const auto now = SteadyClock::now();
    while (!fresh && !idle_.empty()) {
      Idle idle = std::move(idle_.back());
      idle_.pop_back();
      if (now - idle.since > config_.idle_timeout || !idle.conn->socket().is_open()) continue;
      // No per-reuse peek (a syscall per request): a connection the peer closed meanwhile fails
      // before any response byte, which callers detect (closedBeforeResponse) and retry; pooled
      // connections are always fully read (release() keeps only clean ones).
      idle.conn->markReused();
      co_return std::unique_ptr<UpstreamConnection>(std::move(idle.conn));
    }
    const Deadline connect_deadline = std::min(deadline, now + config_.connect_timeout);
    target_.handshake_budget = config_.connect_timeout;
    const ConnectTarget target = target_;  // setAddress() may replace target_ while this connects
    auto conn = co_await connectTo<Stream>(ctx_, target, connect_deadline);
    if (!conn.ok()) co_return conn.takeStatus();
    co_return std::unique_ptr<UpstreamConnection>(std::move(*conn));
  }

  void release(std::unique_ptr<UpstreamConnection> conn) override {
    // No trim here (this runs per request): the sweep closes expired connections, configure()
    // those beyond a lowered cap.
    if (!conn || !conn->reusable() || idle_.size() >= config_.max_idle) return;
    auto* impl = static_cast<UpstreamConnectionImpl<Stream>*>(conn.release());
    std::unique_ptr<UpstreamConnectionImpl<Stream>> owned(impl);
    if (impl->generation() != target_.generation) return;  // made for an address since replaced
    idle_.push_back(Idle{std::move(owned), SteadyClock::now()});
    armSweep();
  }

 private:
  struct Idle {
    std::unique_ptr<UpstreamConnectionImpl<Stream>> conn;
    SteadyClock::time_point since;
  };
  // Closes the connections idle for longer than idle_timeout and those beyond max_idle. The
  // oldest are at the front (connections are reused from the back).
  void trim(SteadyClock::time_point now) {
    while (!idle_.empty() &&
           (idle_.size() > config_.max_idle || now - idle_.front().since > config_.idle_timeout)) {
      idle_.pop_front();
    }
  }
  // While connections are idle, a timer trims them every idle_timeout: a connection is closed
  // between one and two idle_timeouts after its last use even when no request comes.
  void armSweep() {
    if (sweep_armed_ || idle_.empty()) return;
    sweep_armed_ = true;
    sweep_timer_.expires_after(config_.idle_timeout);
    // The flag, not only the error code: a sweep that was already due when the pool went away
    // still runs, with success.
    sweep_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
      if (ec || !*alive) return;
      sweep_armed_ = false;
      trim(SteadyClock::now());
      armSweep();
    });
  }
  asio::io_context& ctx_;
  ConnectTarget target_;
  PoolConfig config_;
  std::deque<Idle> idle_;
  asio::steady_timer sweep_timer_;
  bool sweep_armed_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace

std::string_view ClientResponseHead::header(std::string_view lower_name) const {
  for (const auto& h : headers) {
    if (h.name == lower_name) return h.value;
  }
  return {};
}

std::string_view SimpleResponse::header(std::string_view lower_name) const {
  for (const auto& h : headers) {
    if (h.name == lower_name) return h.value;
  }
  return {};
}

std::unique_ptr<ConnectionPool> ConnectionPool::create(asio::io_context& ctx,
                                                       const UpstreamAddress& address,
                                                       PoolConfig config) {
  if (address.tls) return std::make_unique<ConnectionPoolImpl<TlsStream>>(ctx, address, config);
  return std::make_unique<ConnectionPoolImpl<tcp::socket>>(ctx, address, config);
}

std::unique_ptr<ConnectionPool> ConnectionPool::create(asio::io_context& ctx,
                                                       tcp::endpoint endpoint, PoolConfig config) {
  UpstreamAddress address;
  address.endpoint = endpoint;
  address.host = endpoint.address().to_string();
  return std::make_unique<ConnectionPoolImpl<tcp::socket>>(ctx, address, config);
}

Result<UpstreamAddress> resolveUrl(const std::string& url, const TlsClientConfig& tls) {
  constexpr std::string_view kHttp = "http://";
  constexpr std::string_view kHttps = "https://";
  const bool https = url.rfind(kHttps, 0) == 0;
  if (!https && url.rfind(kHttp, 0) != 0) {
    return Status::invalidArgument("URL must start with http:// or https://, got '" + url + "'");
  }
  if (!https && !(tls == TlsClientConfig{})) {
    return Status::invalidArgument("TLS settings given for an http:// URL ('" + url + "')");
  }
  std::string rest = url.substr(https ? kHttps.size() : kHttp.size());
  UpstreamAddress addr;
  addr.port = https ? 443 : 80;
  const auto slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) {
    addr.base_path = rest.substr(slash);
    while (!addr.base_path.empty() && addr.base_path.back() == '/') addr.base_path.pop_back();
  }
  const auto colon = hostport.rfind(':');
  if (colon != std::string::npos && hostport.find(']') == std::string::npos) {
    addr.host = hostport.substr(0, colon);
    const std::string port = hostport.substr(colon + 1);
    int p = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || ptr != port.data() + port.size() || p <= 0 || p > 65535) {
      return Status::invalidArgument("bad port in URL '" + url + "'");
    }
    addr.port = static_cast<uint16_t>(p);
  } else {
    addr.host = hostport;
  }
  if (addr.host.empty()) return Status::invalidArgument("no host in URL '" + url + "'");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(addr.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status::unavailable("cannot resolve host '" + addr.host + "': " + gai_strerror(rc));
  }
  asio::ip::address ip;
  if (res->ai_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(res->ai_addr);
    ip = asio::ip::address_v4(ntohl(sin->sin_addr.s_addr));
  } else {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(res->ai_addr);
    asio::ip::address_v6::bytes_type bytes;
    std::memcpy(bytes.data(), sin6->sin6_addr.s6_addr, 16);
    ip = asio::ip::address_v6(bytes);
  }
  ::freeaddrinfo(res);
  addr.endpoint = tcp::endpoint(ip, addr.port);
  if (https) {
    auto context = makeClientTls(tls);
    if (!context.ok()) return context.status().withContext("TLS for " + url);
    addr.tls = std::move(*context);
  }
  return addr;
}

namespace {

template <class Stream>
Task<Result<SimpleResponse>> fetchOver(asio::io_context& ctx, const UpstreamAddress& address,
                                       std::string_view method, std::string_view target,
                                       std::string_view body, std::span<const HttpHeader> headers,
                                       Deadline deadline) {
  ConnectTarget where;
  where.endpoint = address.endpoint;
  where.tls = address.tls;
  where.host = address.host;
  auto conn = co_await connectTo<Stream>(ctx, where, deadline);
  if (!conn.ok()) co_return conn.takeStatus();
  const std::string host = address.hostHeader();
  const std::string full_target = address.base_path + std::string(target);
  ClientRequest req;
  req.method = method;
  req.target = full_target;
  req.host = host;
  req.headers = headers;
  req.body = body;
  Status s = co_await (*conn)->send(req, deadline);
  if (!s.isOk()) co_return s;
  auto head = co_await (*conn)->readHead(deadline);
  if (!head.ok()) co_return head.takeStatus();
  SimpleResponse out;
  out.status = (*head)->status;
  out.headers = (*head)->headers;
  for (;;) {
    auto piece = co_await (*conn)->readBody(deadline);
    if (!piece.ok()) co_return piece.takeStatus();
    if (piece->empty()) break;
    out.body.append(piece->data(), piece->size());
  }
  co_return out;
}

}  // namespace

Task<Result<SimpleResponse>> fetch(const UpstreamAddress& address, std::string_view method,
                                   std::string_view target, std::string_view body,
                                   std::span<const HttpHeader> headers, Deadline deadline) {
  auto executor = co_await asio::this_coro::executor;
  auto& ctx = static_cast<asio::io_context&>(asio::query(executor, asio::execution::context));
  if (address.tls)
    co_return co_await fetchOver<TlsStream>(ctx, address, method, target, body, headers, deadline);
  co_return co_await fetchOver<tcp::socket>(ctx, address, method, target, body, headers, deadline);
}

Result<SimpleResponse> fetchBlocking(const std::string& url, std::string_view method,
                                     std::string_view body, std::vector<HttpHeader> headers,
                                     std::chrono::milliseconds timeout) {
  // url = http[s]://host:port/path
  const auto scheme_end = url.find("://");
  const auto path_start =
      scheme_end == std::string::npos ? std::string::npos : url.find('/', scheme_end + 3);
  const std::string base = path_start == std::string::npos ? url : url.substr(0, path_start);
  const std::string target = path_start == std::string::npos ? "/" : url.substr(path_start);
  INFERA_ASSIGN_OR_RETURN(UpstreamAddress address, resolveUrl(base));
  asio::io_context ctx(1);
  std::optional<Result<SimpleResponse>> result;
  const std::string method_copy(method);
  const std::string body_copy(body);
  const auto deadline = SteadyClock::now() + timeout;
  asio::co_spawn(
      ctx,
      [&]() -> Task<void> {
        result.emplace(co_await fetch(address, method_copy, target, body_copy, headers, deadline));
      },
      [](std::exception_ptr) {});
  ctx.run();
  if (!result) return Status::internal("fetch did not complete");
  return std::move(*result);
}

}  // namespace infera::net
