#include "store/redis.h"

#include "store/redis_internal.h"

#include "core/text.h"

#include <hiredis/hiredis.h>
#include <openssl/evp.h>
#include <sys/time.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <charconv>
#include <optional>

#include "core/log.h"

namespace infera::store {
namespace {

namespace asio = net::asio;
using boost::system::error_code;
using net::Deadline;
using net::SteadyClock;
using net::Task;
using net::tcp;

struct ReplyDeleter {
  void operator()(void* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<void, ReplyDeleter>;

struct ReaderDeleter {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};

RedisReply convertReply(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convertReply(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

// Appends the RESP encoding of `argv` (hiredis formats; we only move bytes).
bool appendCommand(std::string& out, const std::vector<std::string>& argv) {
  std::vector<const char*> ptrs(argv.size());
  std::vector<size_t> lens(argv.size());
  for (size_t i = 0; i < argv.size(); ++i) {
    ptrs[i] = argv[i].data();
    lens[i] = argv[i].size();
  }
  char* cmd = nullptr;
  const int n =
      redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), ptrs.data(), lens.data());
  if (n < 0) return false;
  out.append(cmd, static_cast<size_t>(n));
  redisFreeCommand(cmd);
  return true;
}

}  // namespace

std::vector<std::string> evalArgv(const RedisScript& script, const std::vector<std::string>& keys,
                                  const std::vector<std::string>& args) {
  std::vector<std::string> argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.emplace_back("EVALSHA");
  argv.push_back(script.sha1);
  argv.push_back(std::to_string(keys.size()));
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

bool isNoScript(const Result<RedisReply>& r) {
  return r.ok() && r->isError() && r->str.rfind("NOSCRIPT", 0) == 0;
}

namespace {

std::vector<std::vector<std::string>> setupCommands(const RedisAddress& a) {
  std::vector<std::vector<std::string>> out;
  if (!a.password.empty()) {
    if (a.user.empty()) {
      out.push_back({"AUTH", a.password});
    } else {
      out.push_back({"AUTH", a.user, a.password});
    }
  }
  if (a.db != 0) out.push_back({"SELECT", std::to_string(a.db)});
  return out;
}

std::string endpointName(const RedisAddress& a) { return a.host + ":" + std::to_string(a.port); }

// ---------------------------------------------------------------------------------------------
// Blocking client

class RedisClientImpl final : public RedisClient {
 public:
  RedisClientImpl(RedisAddress address, std::chrono::milliseconds timeout)
      : address_(std::move(address)), timeout_(timeout) {}
  ~RedisClientImpl() override { drop(); }

  Status connectNow() {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout_.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout_.count() % 1000) * 1000);
    redisContext* c = redisConnectWithTimeout(address_.host.c_str(), address_.port, tv);
    if (c == nullptr) return Status::internal("redisConnectWithTimeout: out of memory");
    if (c->err != 0) {
      std::string msg = c->errstr;
      redisFree(c);
      return Status::unavailable("cannot connect to redis " + endpointName(address_) + ": " + msg);
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
      redisFree(c);
      return Status::unavailable("cannot set the redis socket timeout");
    }
    ctx_ = c;
    for (const auto& argv : setupCommands(address_)) {
      auto r = raw(argv);
      if (!r.ok()) return r.takeStatus();
      if (r->isError()) {
        drop();
        const std::string what =
            argv[0] + " failed on redis " + endpointName(address_) + ": " + r->str;
        if (argv[0] == "AUTH") return Status::unauthenticated(what);
        return Status::invalidArgument(what);
      }
    }
    return Status::ok();
  }

  Result<RedisReply> command(const std::vector<std::string>& argv) override {
    if (argv.empty()) return Status::invalidArgument("empty redis command");
    if (ctx_ == nullptr) INFERA_RETURN_IF_ERROR(connectNow());
    return raw(argv);
  }

  Result<std::vector<std::unique_ptr<RedisClient>>> masters() override {
    std::vector<std::unique_ptr<RedisClient>> out;
    INFERA_ASSIGN_OR_RETURN(auto self, connectNode(address_, timeout_));
    out.push_back(std::move(self));
    return out;
  }

 private:
  Result<RedisReply> raw(const std::vector<std::string>& argv) {
    std::vector<const char*> ptrs(argv.size());
    std::vector<size_t> lens(argv.size());
    for (size_t i = 0; i < argv.size(); ++i) {
      ptrs[i] = argv[i].data();
      lens[i] = argv[i].size();
    }
    ReplyPtr reply(redisCommandArgv(ctx_, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
    if (!reply) {
      const int err = ctx_->err;
      const int saved_errno = errno;
      const std::string msg = ctx_->errstr;
      drop();  // the next command reconnects
      if (err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)) {
        return Status::deadlineExceeded("redis " + endpointName(address_) +
                                        " did not answer within " +
                                        std::to_string(timeout_.count()) + " ms");
      }
      return Status::unavailable("redis " + endpointName(address_) + ": " + msg);
    }
    return convertReply(static_cast<const redisReply*>(reply.get()));
  }

  void drop() {
    if (ctx_ != nullptr) redisFree(ctx_);
    ctx_ = nullptr;
  }

  RedisAddress address_;
  std::chrono::milliseconds timeout_;
  redisContext* ctx_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Pipelined client
//
// hiredis formats commands and parses replies; Asio does the I/O. Per connection, the command
// that queues starts a write of everything queued unless one is out (startWrite), and one reader
// coroutine hands replies to the in-flight commands in order. A caller sleeps on its own timer
// set to its deadline; the reader cancels the timer to wake it early. All state lives in
// shared_ptrs that the coroutines and the write's handler hold, so destroying the client while
// they are suspended leaves nothing dangling.

struct Pending {
  explicit Pending(asio::io_context& ctx) : timer(ctx) {}
  void resolve(Result<RedisReply> r) {
    if (result) return;
    result.emplace(std::move(r));
    timer.cancel();
  }
  std::string payload;
  asio::steady_timer timer;
  std::optional<Result<RedisReply>> result;
  bool written = false;  // handed to the socket: the server may have run it
};

struct Conn {
  explicit Conn(asio::io_context& ctx) : socket(ctx), reader(redisReaderCreate()) {}
  tcp::socket socket;
  std::optional<tcp::resolver> resolver;
  std::unique_ptr<redisReader, ReaderDeleter> reader;
  std::deque<std::shared_ptr<Pending>> to_write;   // queued, not yet handed to the socket
  std::deque<std::shared_ptr<Pending>> in_flight;  // written, awaiting replies in this order
  std::string write_buf;
  std::array<char, 16 * 1024> read_buf;
  bool handshake_done = false;
  bool connect_timed_out = false;
  bool broken = false;
  bool writing = false;  // a write is out: what queues meanwhile goes when it completes
};

}  // namespace

struct NodeState {
  NodeState(asio::io_context& c, RedisAddress a, AsyncRedisOptions o)
      : ctx(c), address(std::move(a)), options(o), connect_done(c), log(componentLogger("store")) {
    connect_done.expires_at(Deadline::max());  // never fires; cancel() wakes every waiter
    last_error = error("not connected").message();
  }
  asio::io_context& ctx;
  RedisAddress address;
  AsyncRedisOptions options;
  std::shared_ptr<Conn> conn;        // the live connection, or null
  std::shared_ptr<Conn> connecting;  // the attempt in progress, or null
  asio::steady_timer connect_done;   // callers waiting on `connecting`
  Deadline next_attempt = Deadline::min();
  std::string last_error;
  bool closed = false;
  spdlog::logger* log;

  // kUnavailable, "redis HOST:PORT: what".
  Status error(const std::string& what) const {
    return Status::unavailable("redis " + endpointName(address) + ": " + what);
  }
};

namespace {

using AsyncState = NodeState;

void closeSocket(Conn& c) {
  error_code ec;
  c.socket.shutdown(tcp::socket::shutdown_both, ec);
  c.socket.close(ec);
  if (c.resolver) c.resolver->cancel();
}

// Ends a connection: every command queued or in flight on it fails with `why`. `c` by value:
// callers may pass s.conn itself, which this resets.
// Fails every command of the connection with `why`; those already sent with `sent_why` when given
// (the server may still run them).
void breakConn(AsyncState& s, std::shared_ptr<Conn> c, const Status& why,
               const std::optional<Status>& sent_why = std::nullopt) {
  if (c->broken) return;
  c->broken = true;
  closeSocket(*c);
  if (s.conn == c) {
    s.conn.reset();
    s.last_error = why.message();
    if (!s.closed) INFERA_LOG(s.log, warn, "{}", why.message());
  }
  for (auto& p : c->in_flight) p->resolve(sent_why ? *sent_why : why);
  c->in_flight.clear();
  for (auto& p : c->to_write) p->resolve(why);
  c->to_write.clear();
}

Task<Result<RedisReply>> readOneReply(Conn& c) {
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(c.reader.get(), &raw) != REDIS_OK) {
      co_return Status::unavailable(std::string("protocol error: ") + c.reader->errstr);
    }
    if (raw != nullptr) {
      ReplyPtr reply(raw);
      co_return convertReply(static_cast<const redisReply*>(raw));
    }
    error_code ec;
    const size_t n = co_await c.socket.async_read_some(
        asio::buffer(c.read_buf), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::unavailable("reading: " + ec.message());
    redisReaderFeed(c.reader.get(), c.read_buf.data(), n);
  }
}

// Connects, then AUTH and SELECT (pipelined) when configured.
Task<Status> handshake(std::shared_ptr<AsyncState> s, std::shared_ptr<Conn> c) {
  const RedisAddress& a = s->address;
  error_code ec;
  const auto ip = asio::ip::make_address(a.host, ec);
  if (!ec) {
    const tcp::endpoint ep(ip, a.port);
    co_await c->socket.async_connect(ep, asio::redirect_error(asio::use_awaitable, ec));
  } else {
    c->resolver.emplace(s->ctx);
    const std::string service = std::to_string(a.port);
    ec = {};
    const auto results = co_await c->resolver->async_resolve(
        a.host, service, asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) {
      co_await asio::async_connect(c->socket, results,
                                   asio::redirect_error(asio::use_awaitable, ec));
    }
  }
  if (ec) co_return s->error("cannot connect: " + ec.message());
  c->socket.set_option(tcp::no_delay(true), ec);
  const auto setup = setupCommands(a);
  if (setup.empty()) co_return Status::ok();
  for (const auto& argv : setup) appendCommand(c->write_buf, argv);
  co_await asio::async_write(c->socket, asio::buffer(c->write_buf),
                             asio::redirect_error(asio::use_awaitable, ec));
  c->write_buf.clear();
  if (ec) co_return s->error("writing: " + ec.message());
  for (const auto& argv : setup) {
    auto reply = co_await readOneReply(*c);
    if (!reply.ok()) co_return s->error(reply.status().message());
    if (reply->isError()) co_return s->error(argv[0] + " failed: " + reply->str);
  }
  co_return Status::ok();
}

Task<void> readLoop(std::shared_ptr<AsyncState> s, std::shared_ptr<Conn> c) {
  for (;;) {
    for (;;) {  // hand out every complete reply already buffered
      void* raw = nullptr;
      if (redisReaderGetReply(c->reader.get(), &raw) != REDIS_OK) {
        breakConn(*s, c, s->error(std::string("protocol error: ") + c->reader->errstr));
        co_return;
      }
      if (raw == nullptr) break;
      ReplyPtr reply(raw);
      if (c->in_flight.empty()) {
        breakConn(*s, c, s->error("a reply nobody asked for"));
        co_return;
      }
      std::shared_ptr<Pending> p = std::move(c->in_flight.front());
      c->in_flight.pop_front();
      p->resolve(convertReply(static_cast<const redisReply*>(raw)));
    }
    if (c->broken) co_return;
    error_code ec;
    const size_t n = co_await c->socket.async_read_some(
        asio::buffer(c->read_buf), asio::redirect_error(asio::use_awaitable, ec));
    if (c->broken) co_return;
    if (ec) {
      breakConn(*s, c, s->error("connection lost: " + ec.message()));
      co_return;
    }
    redisReaderFeed(c->reader.get(), c->read_buf.data(), n);
  }
}

// Hands everything queued to the socket in one write, unless a write is out already (its
// completion sends what queued meanwhile). The command that queues calls it, so the bytes leave at
// once (Asio tries the send before returning) instead of after a trip through the loop's queue.
void startWrite(std::shared_ptr<AsyncState> s, std::shared_ptr<Conn> c) {
  if (c->writing || c->broken || c->to_write.empty()) return;
  c->write_buf.clear();
  while (!c->to_write.empty()) {
    c->write_buf += c->to_write.front()->payload;
    c->to_write.front()->written = true;
    c->in_flight.push_back(std::move(c->to_write.front()));
    c->to_write.pop_front();
  }
  c->writing = true;
  asio::async_write(c->socket, asio::buffer(c->write_buf), [s, c](const error_code& ec, size_t) {
    c->writing = false;
    if (c->broken) return;
    if (ec) {
      breakConn(*s, c, s->error("writing: " + ec.message()));
      return;
    }
    startWrite(s, c);
  });
}

// One connection attempt, bounded by connect_timeout; wakes everyone waiting on it.
Task<void> connectOnce(std::shared_ptr<AsyncState> s) {
  auto c = std::make_shared<Conn>(s->ctx);
  s->connecting = c;
  const auto now = SteadyClock::now();
  s->next_attempt = now + s->options.reconnect_backoff;
  asio::steady_timer watchdog(s->ctx);
  watchdog.expires_at(now + s->options.connect_timeout);
  watchdog.async_wait([c](const error_code& ec) {
    if (ec || c->handshake_done) return;
    c->connect_timed_out = true;
    closeSocket(*c);
  });
  auto attempt = handshake(s, c);
  Status st = co_await std::move(attempt);
  c->handshake_done = true;
  watchdog.cancel();
  if (!st.isOk() && c->connect_timed_out) {
    st = s->error("connect timed out after " + std::to_string(s->options.connect_timeout.count()) +
                  " ms");
  }
  if (st.isOk() && s->closed) st = Status::cancelled("redis client closed");
  if (st.isOk()) {
    s->conn = c;
    net::spawn(s->ctx, readLoop(s, c), "redis reader");
    INFERA_LOG(s->log, info, "redis {}: connected", endpointName(s->address));
  } else {
    closeSocket(*c);
    s->last_error = st.message();
    if (!s->closed) INFERA_LOG(s->log, warn, "{}", st.message());
  }
  s->connecting.reset();
  s->connect_done.cancel();
}

}  // namespace

Task<Result<RedisReply>> nodeCommand(std::shared_ptr<NodeState> s,
                                     const std::vector<std::string>& argv, bool asking,
                                     bool* written) {
  if (written != nullptr) *written = false;
  if (argv.empty()) co_return Status::invalidArgument("empty redis command");
  if (s->closed) co_return Status::cancelled("redis client closed");
  if (!s->conn) {
    if (s->connecting) {
      error_code ec;
      co_await s->connect_done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    } else if (SteadyClock::now() >= s->next_attempt) {
      auto attempt = connectOnce(s);
      co_await std::move(attempt);
    }
    if (s->closed) co_return Status::cancelled("redis client closed");
    if (!s->conn) {
      co_return Status::unavailable(s->last_error);
    }
  }
  const std::shared_ptr<Conn> c = s->conn;
  if (c->to_write.size() + c->in_flight.size() >= s->options.max_pending) {
    co_return Status::resourceExhausted("redis " + endpointName(s->address) + ": " +
                                        std::to_string(s->options.max_pending) +
                                        " commands already pending");
  }
  auto p = std::make_shared<Pending>(s->ctx);
  if (!appendCommand(p->payload, argv)) {
    co_return Status::invalidArgument("cannot format redis command");
  }
  const Deadline deadline = SteadyClock::now() + s->options.command_timeout;
  p->timer.expires_at(deadline);
  if (asking) {  // ASK redirection: ASKING right before the command, on the same connection
    auto ask = std::make_shared<Pending>(s->ctx);
    appendCommand(ask->payload, {"ASKING"});
    c->to_write.push_back(std::move(ask));
  }
  c->to_write.push_back(p);
  startWrite(s, c);
  while (!p->result) {
    error_code ec;
    co_await p->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (p->result) break;
    if (SteadyClock::now() >= deadline) {
      p->resolve(Status::deadlineExceeded(
          "redis " + endpointName(s->address) + ": no answer to " + argv[0] + " within " +
          std::to_string(s->options.command_timeout.count()) + " ms"));
      // The others already sent are where this one is: the server may still run them.
      breakConn(*s, c, s->error("connection closed after a command timed out"),
                Status::deadlineExceeded(
                    "redis " + endpointName(s->address) +
                    ": sent, then the connection closed after another command timed out (it "
                    "may still run)"));
    }
  }
  if (written != nullptr) *written = p->written;
  co_return std::move(*p->result);
}

std::shared_ptr<NodeState> makeNode(net::asio::io_context& ctx, const RedisAddress& address,
                                    const AsyncRedisOptions& options) {
  return std::make_shared<NodeState>(ctx, address, options);
}

bool nodeConnected(const NodeState& s) { return s.conn != nullptr; }

const std::string& nodeLastError(const NodeState& s) { return s.last_error; }

void closeNode(NodeState& s) {
  s.closed = true;
  if (s.conn) breakConn(s, s.conn, Status::cancelled("redis client closed"));
  if (s.connecting) closeSocket(*s.connecting);  // the attempt fails and wakes its waiters
}

Result<RedisAddress> parseRedisUrl(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  constexpr std::string_view kClusterScheme = "redis-cluster://";
  RedisAddress a;
  std::string_view rest;
  if (url.substr(0, kScheme.size()) == kScheme) {
    rest = url.substr(kScheme.size());
  } else if (url.substr(0, kClusterScheme.size()) == kClusterScheme) {
    rest = url.substr(kClusterScheme.size());
    a.cluster = true;
  } else {
    if (url.substr(0, 9) == "rediss://") {
      return Status::unimplemented("TLS to redis (rediss://) is not supported: '" + redactUrl(url) +
                                   "'");
    }
    return Status::invalidArgument(
        "redis URL must start with redis:// (or redis-cluster:// for a Redis Cluster), got '" +
        redactUrl(url) + "'");
  }
  const auto bad = [&](std::string_view why) {
    return Status::invalidArgument("bad redis URL '" + redactUrl(url) + "': " + std::string(why));
  };
  const size_t authority_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, authority_end);
  const std::string_view path =
      authority_end == std::string_view::npos ? "" : rest.substr(authority_end);
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    if (const size_t colon = userinfo.find(':'); colon != std::string_view::npos) {
      if (!percentDecode(userinfo.substr(0, colon), a.user)) {
        return bad("bad percent-encoding in user");
      }
      userinfo = userinfo.substr(colon + 1);
    }
    if (!percentDecode(userinfo, a.password)) return bad("bad percent-encoding in password");
  }
  // host[:port] or [IPv6][:port]; a cluster URL lists several, separated by ','.
  const auto host_port = [&](std::string_view part, std::string& host,
                             uint16_t& port_out) -> Status {
    std::string_view port;
    if (!part.empty() && part.front() == '[') {
      const size_t close = part.find(']');
      if (close == std::string_view::npos) return bad("unterminated '[' in host");
      host = std::string(part.substr(1, close - 1));
      const std::string_view after = part.substr(close + 1);
      if (!after.empty()) {
        if (after.front() != ':') return bad("junk after ']'");
        port = after.substr(1);
        if (port.empty()) return bad("empty port");
      }
    } else {
      const size_t colon = part.rfind(':');
      host = std::string(part.substr(0, colon));
      if (colon != std::string_view::npos) {
        port = part.substr(colon + 1);
        if (port.empty()) return bad("empty port");
      }
    }
    if (host.empty()) return bad("no host");
    port_out = 6379;
    if (!port.empty()) {
      int p = 0;
      const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
      if (ec != std::errc() || ptr != port.data() + port.size() || p <= 0 || p > 65535) {
        return bad("port must be 1-65535");
      }
      port_out = static_cast<uint16_t>(p);
    }
    return Status::ok();
  };
  bool first = true;
  while (true) {
    const size_t comma = authority.find(',');
    if (comma != std::string_view::npos && !a.cluster) {
      return bad("several hosts: a Redis Cluster's seed nodes take redis-cluster://");
    }
    const std::string_view part = authority.substr(0, comma);
    if (first) {
      INFERA_RETURN_IF_ERROR(host_port(part, a.host, a.port));
    } else {
      auto& seed = a.more_seeds.emplace_back();
      INFERA_RETURN_IF_ERROR(host_port(part, seed.first, seed.second));
    }
    first = false;
    if (comma == std::string_view::npos) break;
    authority = authority.substr(comma + 1);
  }
  if (!path.empty() && path.front() != '/') {
    return bad("query strings and fragments are not supported");
  }
  if (path.size() > 1) {
    if (a.cluster) return bad("a Redis Cluster has only database 0: no /db in redis-cluster://");
    const std::string_view db = path.substr(1);
    const auto [ptr, ec] = std::from_chars(db.data(), db.data() + db.size(), a.db);
    if (ec != std::errc() || ptr != db.data() + db.size() || a.db < 0) {
      return bad("database must be a number >= 0");
    }
  }
  return a;
}

RedisScript::RedisScript(std::string src) : source(std::move(src)) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // EVP_Digest with SHA-1: the SHA1() shortcut is deprecated in OpenSSL 3.
  EVP_Digest(source.data(), source.size(), md, &len, EVP_sha1(), nullptr);
  sha1 = toHex(md, len);
}

Result<RedisReply> RedisClient::eval(const RedisScript& script,
                                     const std::vector<std::string>& keys,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> argv = evalArgv(script, keys, args);
  auto r = command(argv);
  if (!isNoScript(r)) return r;
  argv[0] = "EVAL";
  argv[1] = script.source;
  return command(argv);
}

Result<std::unique_ptr<RedisClient>> connectNode(const RedisAddress& address,
                                                 std::chrono::milliseconds timeout) {
  auto client = std::make_unique<RedisClientImpl>(address, timeout);
  INFERA_RETURN_IF_ERROR(client->connectNow());
  return std::unique_ptr<RedisClient>(std::move(client));
}

net::Task<std::vector<Result<RedisReply>>> awaitAll(
    net::asio::io_context& ctx, std::vector<net::Task<Result<RedisReply>>> calls) {
  std::vector<Result<RedisReply>> results;
  if (calls.size() == 1) {
    auto only = std::move(calls[0]);
    auto r = co_await std::move(only);
    results.push_back(std::move(r));
    co_return results;
  }
  struct Shared {
    explicit Shared(net::asio::io_context& c) : done(c) {
      done.expires_at(net::Deadline::max());  // never fires; the last answer cancels it
    }
    net::asio::steady_timer done;
    std::vector<Result<RedisReply>> results;
    size_t left = 0;
  };
  auto sh = std::make_shared<Shared>(ctx);
  sh->results.assign(calls.size(), Status::internal("redis: no answer"));
  sh->left = calls.size();
  struct One {
    static net::Task<void> run(std::shared_ptr<Shared> sh, size_t i,
                               net::Task<Result<RedisReply>> call) {
      struct Count {  // however this ends, the waiter hears of it
        Shared& sh;
        ~Count() {
          if (--sh.left == 0) sh.done.cancel();
        }
      } count{*sh};
      sh->results[i] = co_await std::move(call);
    }
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    net::spawn(ctx, One::run(sh, i, std::move(calls[i])), "redis fan-out");
  }
  while (sh->left > 0) {
    boost::system::error_code ec;
    co_await sh->done.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
  }
  co_return std::move(sh->results);
}

}  // namespace infera::store
