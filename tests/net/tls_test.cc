// TLS on the HTTP server and the upstream client, against certificates made by the openssl CLI at
// test time: verification (CA, host name, verify off), client certificates, protocol versions and
// ALPN, pooled connections and session resumption, certificate reloads (explicit and on a file
// change), handshake timeouts, pipelining and disconnects under TLS.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "fakes/http_test_client.h"
#include "fakes/tls_pki.h"
#include "net/client.h"
#include "net/internal/tls.h"
#include "net/server.h"
#include "net/tls.h"

namespace infera::net {
namespace {

using testing::TestPki;
using testing::waitFor;

// Answers "TLS <method> <target> <body>"; /hold waits until the client leaves (or 10 s).
class Handler final : public HttpHandler {
 public:
  explicit Handler(std::atomic<int>* disconnects) : disconnects_(disconnects) {}
  Task<void> handle(HttpRequest& req, ResponseWriter& w) override {
    if (req.path() == "/hold") {
      bool gone = false;
      w.watchDisconnect([&gone, this] {
        gone = true;
        disconnects_->fetch_add(1);
      });
      const Deadline until = SteadyClock::now() + std::chrono::seconds(10);
      while (!gone && SteadyClock::now() < until)
        co_await sleepUntil(SteadyClock::now() + std::chrono::milliseconds(5));
      if (!gone) co_await w.send(200, "text/plain", "held");
      co_return;
    }
    const std::string body = "TLS " + req.method + " " + req.target + " " + req.body;
    co_await w.send(200, "text/plain", body);
  }

 private:
  std::atomic<int>* disconnects_;
};

// A blocking OpenSSL client on a raw socket (what the tests need beyond net's own client: TLS
// versions, ALPN lists, peer certificates, records written one by one).
class RawTlsClient {
 public:
  struct Options {
    std::string ca_file;
    std::string cert_file, key_file;
    std::string alpn;  // wire format; "" = no ALPN
    int max_version = 0;
    bool legacy = false;  // security level 0, so that the client itself offers TLS 1.1
    Options& cert(const std::string& c, const std::string& k) {
      cert_file = c;
      key_file = k;
      return *this;
    }
    Options& alpnList(std::string a) {
      alpn = std::move(a);
      return *this;
    }
    Options& maxVersion(int v, bool old = false) {
      max_version = v;
      legacy = old;
      return *this;
    }
  };
  static Options trusting(const std::string& ca_file) {
    Options o;
    o.ca_file = ca_file;
    return o;
  }
  RawTlsClient(uint16_t port, const Options& o) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (o.legacy) {
      SSL_CTX_set_security_level(ctx_, 0);
      SSL_CTX_set_min_proto_version(ctx_, TLS1_VERSION);
    }
    if (o.max_version != 0) SSL_CTX_set_max_proto_version(ctx_, o.max_version);
    if (!o.ca_file.empty()) {
      SSL_CTX_load_verify_locations(ctx_, o.ca_file.c_str(), nullptr);
      SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    }
    if (!o.cert_file.empty()) {
      SSL_CTX_use_certificate_chain_file(ctx_, o.cert_file.c_str());
      SSL_CTX_use_PrivateKey_file(ctx_, o.key_file.c_str(), SSL_FILETYPE_PEM);
    }
    if (!o.alpn.empty()) {
      SSL_CTX_set_alpn_protos(ctx_, reinterpret_cast<const unsigned char*>(o.alpn.data()),
                              static_cast<unsigned>(o.alpn.size()));
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), "127.0.0.1");
    ERR_clear_error();
    if (SSL_connect(ssl_) == 1) {
      connected_ = true;
    } else {
      error_ = opensslErrors();
    }
  }
  ~RawTlsClient() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    SSL_CTX_free(ctx_);
  }
  bool connected() const { return connected_; }
  const std::string& error() const { return error_; }
  std::string alpn() const {
    const unsigned char* p = nullptr;
    unsigned n = 0;
    SSL_get0_alpn_selected(ssl_, &p, &n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  std::string peerSerial() const {
    X509* cert = SSL_get1_peer_certificate(ssl_);
    if (cert == nullptr) return "";
    BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
    char* hex = BN_bn2hex(bn);
    std::string out = hex;
    OPENSSL_free(hex);
    BN_free(bn);
    X509_free(cert);
    return out;
  }
  bool write(const std::string& bytes) {
    return SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) > 0;
  }
  // Reads until `count` occurrences of `marker` arrived (or the peer closed / 10 s passed).
  std::string readUntil(const std::string& marker, int count = 1) {
    std::string out;
    char buf[4096];
    for (;;) {
      int seen = 0;
      for (size_t at = out.find(marker); at != std::string::npos; at = out.find(marker, at + 1))
        ++seen;
      if (seen >= count) break;
      const int n = SSL_read(ssl_, buf, sizeof(buf));
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // close_notify, then FIN.
  void closePolitely() {
    SSL_shutdown(ssl_);
    ::shutdown(fd_, SHUT_WR);
  }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool connected_ = false;
  std::string error_;
};

const std::string kGet = "GET /x HTTP/1.1\r\nhost: t\r\n\r\n";

// Runs `body` (a coroutine taking the client's io_context) to its end on a loop of its own.
void runClient(const std::function<Task<void>(asio::io_context&)>& body) {
  asio::io_context ctx;
  asio::co_spawn(ctx, body(ctx), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  ctx.run();
}

// One GET on `conn` read to its end; the body, or the error.
Task<Result<std::string>> get(UpstreamConnection& conn, std::string target, Deadline deadline) {
  ClientRequest req;
  req.method = "GET";
  req.target = target;
  req.host = "127.0.0.1";
  auto send = conn.send(req, deadline);
  Status sent = co_await std::move(send);
  if (!sent.isOk()) co_return sent;
  auto read_head = conn.readHead(deadline);
  auto head = co_await std::move(read_head);
  if (!head.ok()) co_return head.takeStatus();
  std::string body;
  for (;;) {
    auto read_body = conn.readBody(deadline);
    auto piece = co_await std::move(read_body);
    if (!piece.ok()) co_return piece.takeStatus();
    if (piece->empty()) break;
    body.append(piece->data(), piece->size());
  }
  co_return body;
}

class TlsTest : public ::testing::Test {
 protected:
  // One PKI for the suite (the openssl CLI takes a second to make it).
  static void SetUpTestSuite() { suite_pki_ = TestPki::create().release(); }
  static void TearDownTestSuite() {
    delete suite_pki_;
    suite_pki_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(suite_pki_, nullptr);
    pki_ = suite_pki_;
    loops_.start();
  }
  void TearDown() override {
    server_.reset();
    loops_.stop();
  }
  TlsServerConfig serverTls(const std::string& name = "server") const {
    TlsServerConfig t;
    t.cert_file = pki_->path(name + ".pem");
    t.key_file = pki_->path(name + ".key");
    return t;
  }
  void startServer(const TlsServerConfig& tls) {
    ServerConfig cfg;
    cfg.header_timeout = std::chrono::milliseconds(500);
    cfg.tls = tls;
    auto s = HttpServer::create(loops_, cfg, [this](int, asio::io_context&) {
      return std::make_unique<Handler>(&disconnects_);
    });
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
  }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(server_->port()); }
  TlsClientConfig trusting() const {
    TlsClientConfig c;
    c.ca_file = pki_->path("ca.pem");
    return c;
  }
  // A fresh connection's handshake and one GET, through a pool for `client`: the body or the error.
  Result<std::string> fetchOnce(const TlsClientConfig& client) {
    auto address = resolveUrl(url(), client);
    if (!address.ok()) return address.takeStatus();
    Result<std::string> out = Status::internal("not run");
    runClient([&](asio::io_context& ctx) -> Task<void> {
      auto pool = ConnectionPool::create(ctx, *address, PoolConfig{});
      const Deadline deadline = SteadyClock::now() + std::chrono::seconds(10);
      auto acquire = pool->acquire(deadline);
      auto conn = co_await std::move(acquire);
      if (!conn.ok()) {
        out = conn.takeStatus();
        co_return;
      }
      auto exchange = get(**conn, "/once", deadline);
      out = co_await std::move(exchange);
    });
    return out;
  }
  std::string serialOfNewConnection() {
    RawTlsClient c(server_->port(), RawTlsClient::trusting(pki_->path("ca.pem")));
    EXPECT_TRUE(c.connected()) << c.error();
    return c.peerSerial();
  }

  static TestPki* suite_pki_;
  TestPki* pki_ = nullptr;
  EventLoops loops_{2};
  std::unique_ptr<HttpServer> server_;
  std::atomic<int> disconnects_{0};
};

TestPki* TlsTest::suite_pki_ = nullptr;

TEST_F(TlsTest, PooledConnectionIsReusedWithoutANewHandshake) {
  startServer(serverTls());
  auto address = resolveUrl(url(), trusting());
  ASSERT_TRUE(address.ok()) << address.status().message();
  EXPECT_EQ(address->port, server_->port());
  runClient([&](asio::io_context& ctx) -> Task<void> {
    auto pool = ConnectionPool::create(ctx, *address, PoolConfig{});
    const Deadline deadline = SteadyClock::now() + std::chrono::seconds(10);
    for (int i = 0; i < 3; ++i) {
      auto acquire = pool->acquire(deadline);
      auto conn = co_await std::move(acquire);
      EXPECT_TRUE(conn.ok()) << conn.status().message();
      if (!conn.ok()) co_return;
      EXPECT_EQ((*conn)->reused(), i > 0);
      const std::string target = "/r" + std::to_string(i);
      auto exchange = get(**conn, target, deadline);
      auto body = co_await std::move(exchange);
      EXPECT_TRUE(body.ok()) << body.status().message();
      if (body.ok()) {
        EXPECT_EQ(*body, "TLS GET /r" + std::to_string(i) + " ");
      }
      pool->release(std::move(*conn));
    }
  });
  EXPECT_EQ(server_->stats().connections_total.load(), 1u);
  EXPECT_EQ(server_->stats().tls_handshakes.load(), 1u);
  EXPECT_EQ(server_->stats().requests_total.load(), 3u);
}

TEST_F(TlsTest, NewConnectionsOfAPoolResumeItsSession) {
  startServer(serverTls());
  auto address = resolveUrl(url(), trusting());
  ASSERT_TRUE(address.ok()) << address.status().message();
  runClient([&](asio::io_context& ctx) -> Task<void> {
    auto pool = ConnectionPool::create(ctx, *address, PoolConfig{});
    const Deadline deadline = SteadyClock::now() + std::chrono::seconds(10);
    for (int i = 0; i < 3; ++i) {
      auto acquire = pool->acquire(deadline, /*fresh=*/true);
      auto conn = co_await std::move(acquire);
      EXPECT_TRUE(conn.ok()) << conn.status().message();
      if (!conn.ok()) co_return;
      auto exchange = get(**conn, "/s", deadline);
      auto body = co_await std::move(exchange);
      EXPECT_TRUE(body.ok()) << body.status().message();
    }
  });
  EXPECT_EQ(server_->stats().tls_handshakes.load(), 3u);
  EXPECT_EQ(server_->stats().tls_resumed.load(), 2u);  // the first one was a full handshake
}

TEST_F(TlsTest, RefusesAServerSignedByAnotherCa) {
  startServer(serverTls());
  TlsClientConfig c;
  c.ca_file = pki_->path("other-ca.pem");
  const auto r = fetchOnce(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find(
                "certificate verify failed: unable to get local issuer certificate"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("TLS handshake with upstream 127.0.0.1"), std::string::npos);
}

TEST_F(TlsTest, RefusesACertificateForAnotherName) {
  startServer(serverTls());
  TlsClientConfig c = trusting();
  c.server_name = "wrong.example";
  const auto r = fetchOnce(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("certificate verify failed: hostname mismatch"),
            std::string::npos)
      << r.status().message();
  // The certificate names localhost: as the server name it verifies (and is sent as SNI).
  c.server_name = "localhost";
  const auto ok = fetchOnce(c);
  EXPECT_TRUE(ok.ok()) << ok.status().message();
}

TEST_F(TlsTest, RefusesAnIpTheCertificateDoesNotName) {
  startServer(serverTls("nameless"));  // DNS:elsewhere.example only
  const auto r = fetchOnce(trusting());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("certificate verify failed: IP address mismatch"),
            std::string::npos)
      << r.status().message();
}

TEST_F(TlsTest, VerifyOffAcceptsAnyCertificate) {
  startServer(serverTls("other-server"));
  TlsClientConfig c;
  c.verify = false;
  const auto r = fetchOnce(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "TLS GET /once ");
}

TEST_F(TlsTest, ClientCertificatesWhenThePortRequiresThem) {
  TlsServerConfig tls = serverTls();
  tls.client_ca_file = pki_->path("ca.pem");
  startServer(tls);
  const auto without = fetchOnce(trusting());
  ASSERT_FALSE(without.ok());
  // TLS 1.3: the client's handshake ends before the server has checked its certificate; the
  // refusal (an alert) is what the request then reads.
  EXPECT_NE(without.status().message().find("certificate required"), std::string::npos)
      << without.status().message();
  EXPECT_TRUE(waitFor([&] { return server_->stats().tls_handshake_failures.load() == 1; }));

  TlsClientConfig with = trusting();
  with.cert_file = pki_->path("client.pem");
  with.key_file = pki_->path("client.key");
  const auto r = fetchOnce(with);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "TLS GET /once ");

  // A certificate from another CA is refused like none.
  RawTlsClient foreign(server_->port(),
                       RawTlsClient::trusting(pki_->path("ca.pem"))
                           .cert(pki_->path("other-server.pem"), pki_->path("other-server.key")));
  const bool answered =
      foreign.connected() && foreign.write(kGet) && !foreign.readUntil("\r\n\r\n").empty();
  EXPECT_FALSE(answered);
}

TEST_F(TlsTest, RefusesTls11AndClientsWithoutHttp11InAlpn) {
  startServer(serverTls());
  RawTlsClient old(server_->port(),
                   RawTlsClient::trusting(pki_->path("ca.pem")).maxVersion(TLS1_1_VERSION, true));
  EXPECT_FALSE(old.connected());
  EXPECT_NE(old.error().find("protocol version"), std::string::npos) << old.error();

  RawTlsClient tls12(server_->port(),
                     RawTlsClient::trusting(pki_->path("ca.pem")).maxVersion(TLS1_2_VERSION));
  ASSERT_TRUE(tls12.connected()) << tls12.error();
  ASSERT_TRUE(tls12.write(kGet));
  EXPECT_NE(tls12.readUntil("TLS GET /x").find("HTTP/1.1 200"), std::string::npos);

  RawTlsClient h2_only(
      server_->port(),
      RawTlsClient::trusting(pki_->path("ca.pem")).alpnList(std::string("\x02h2", 3)));
  EXPECT_FALSE(h2_only.connected());
  EXPECT_NE(h2_only.error().find("no application protocol"), std::string::npos) << h2_only.error();

  RawTlsClient both(
      server_->port(),
      RawTlsClient::trusting(pki_->path("ca.pem")).alpnList(std::string("\x02h2\x08http/1.1", 12)));
  ASSERT_TRUE(both.connected()) << both.error();
  EXPECT_EQ(both.alpn(), "http/1.1");
  EXPECT_TRUE(waitFor([&] { return server_->stats().tls_handshake_failures.load() == 2; }));
}

TEST_F(TlsTest, AReloadServesTheNewCertificateToNewConnectionsOnly) {
  startServer(serverTls());
  RawTlsClient before(server_->port(), RawTlsClient::trusting(pki_->path("ca.pem")));
  ASSERT_TRUE(before.connected()) << before.error();
  EXPECT_EQ(before.peerSerial(), "1001");
  EXPECT_EQ(server_->tlsCertificate()->serial, "1001");

  ASSERT_TRUE(server_->reloadTls(serverTls("server2")).isOk());
  EXPECT_EQ(server_->tlsCertificate()->serial, "1002");
  EXPECT_TRUE(waitFor([&] { return serialOfNewConnection() == "1002"; }));
  EXPECT_EQ(server_->stats().tls_reloads.load(), 1u);
  // The connection opened before keeps its session with the old certificate.
  ASSERT_TRUE(before.write(kGet));
  EXPECT_NE(before.readUntil("TLS GET /x").find("HTTP/1.1 200"), std::string::npos);
}

TEST_F(TlsTest, ABadCertificateIsRefusedAndTheOldOneKeepsServing) {
  startServer(serverTls());
  TlsServerConfig mismatched = serverTls("server2");
  mismatched.key_file = pki_->path("server.key");
  const Status a = server_->reloadTls(mismatched);
  EXPECT_EQ(a.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.message().find("does not match the certificate"), std::string::npos) << a.message();
  const Status b = server_->reloadTls(serverTls("expired"));
  EXPECT_NE(b.message().find("has expired"), std::string::npos) << b.message();
  TlsServerConfig missing = serverTls();
  missing.cert_file = pki_->path("nothing.pem");
  const Status c = server_->reloadTls(missing);
  EXPECT_NE(c.message().find("cert_file " + missing.cert_file), std::string::npos) << c.message();
  EXPECT_EQ(server_->stats().tls_reload_failures.load(), 3u);
  EXPECT_EQ(server_->stats().tls_reloads.load(), 0u);
  EXPECT_EQ(serialOfNewConnection(), "1001");
}

TEST_F(TlsTest, ReloadsWhenTheFilesChangeOnDisk) {
  // The served files are copies, replaced the way a rotation does it (write beside, rename).
  const std::string cert = pki_->path("live.pem"), key = pki_->path("live.key");
  ASSERT_TRUE(testing::replaceFile(pki_->path("server.pem"), cert));
  ASSERT_TRUE(testing::replaceFile(pki_->path("server.key"), key));
  TlsServerConfig tls;
  tls.cert_file = cert;
  tls.key_file = key;
  tls.watch_interval = std::chrono::milliseconds(20);
  startServer(tls);
  EXPECT_EQ(serialOfNewConnection(), "1001");

  ASSERT_TRUE(testing::replaceFile(pki_->path("server2.key"), key));
  ASSERT_TRUE(testing::replaceFile(pki_->path("server2.pem"), cert));
  ASSERT_TRUE(waitFor([&] { return server_->tlsCertificate()->serial == "1002"; }));
  EXPECT_TRUE(waitFor([&] { return serialOfNewConnection() == "1002"; }));

  // A broken file is refused, and not retried at every poll: only when the files change again.
  const uint64_t before =
      server_->stats().tls_reload_failures.load();  // 1 if a poll fell between key and cert
  ASSERT_TRUE(testing::replaceFile(pki_->path("ca.key"), cert));  // not a certificate
  ASSERT_TRUE(waitFor([&] { return server_->stats().tls_reload_failures.load() == before + 1; }));
  EXPECT_EQ(serialOfNewConnection(), "1002");
  ASSERT_TRUE(pki_->issue("server3", "1003"));  // the openssl CLI takes many polls' time
  ASSERT_TRUE(testing::replaceFile(pki_->path("server3.key"), key));
  ASSERT_TRUE(testing::replaceFile(pki_->path("server3.pem"), cert));
  ASSERT_TRUE(waitFor([&] { return server_->tlsCertificate()->serial == "1003"; }));
  EXPECT_LE(server_->stats().tls_reload_failures.load(),
            before + 2);  // + the key-before-cert moment
}

TEST_F(TlsTest, AHandshakeThatNeverComesIsTimedOut) {
  startServer(serverTls());
  testing::TestClient silent(server_->port());  // TCP only: no ClientHello
  ASSERT_TRUE(silent.connected());
  EXPECT_EQ(silent.readAll(), "");  // closed by the server, after the header timeout
  EXPECT_TRUE(waitFor([&] { return server_->stats().tls_handshake_failures.load() == 1; }));
  EXPECT_GE(server_->stats().timeouts.load(), 1u);
  // Plain HTTP on a TLS port gets no answer either.
  testing::TestClient plain(server_->port());
  ASSERT_TRUE(plain.sendRaw(kGet));
  EXPECT_EQ(plain.readAll().find("HTTP/1.1"), std::string::npos);
}

TEST_F(TlsTest, PipelinedRequestsInSeparateRecordsAreAllAnswered) {
  startServer(serverTls());
  RawTlsClient c(server_->port(), RawTlsClient::trusting(pki_->path("ca.pem")));
  ASSERT_TRUE(c.connected()) << c.error();
  // Three records sent before reading: the engine may hold the later ones when the socket has
  // nothing left to read.
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(c.write("GET /p" + std::to_string(i) + " HTTP/1.1\r\nhost: t\r\n\r\n"));
  const std::string all = c.readUntil("TLS GET /p", 3);
  EXPECT_NE(all.find("TLS GET /p0"), std::string::npos);
  EXPECT_NE(all.find("TLS GET /p1"), std::string::npos);
  EXPECT_NE(all.find("TLS GET /p2"), std::string::npos) << all;
  EXPECT_EQ(server_->stats().requests_total.load(), 3u);
}

TEST_F(TlsTest, AClientThatLeavesIsSeenByTheHandler) {
  startServer(serverTls());
  {
    RawTlsClient polite(server_->port(), RawTlsClient::trusting(pki_->path("ca.pem")));
    ASSERT_TRUE(polite.connected()) << polite.error();
    ASSERT_TRUE(polite.write("GET /hold HTTP/1.1\r\nhost: t\r\n\r\n"));
    ASSERT_TRUE(waitFor([&] { return server_->stats().requests_total.load() == 1; }));
    polite.closePolitely();  // close_notify, then FIN
    EXPECT_TRUE(waitFor([&] { return disconnects_.load() == 1; }, std::chrono::seconds(5)));
  }
  {
    RawTlsClient abrupt(server_->port(), RawTlsClient::trusting(pki_->path("ca.pem")));
    ASSERT_TRUE(abrupt.connected()) << abrupt.error();
    ASSERT_TRUE(abrupt.write("GET /hold HTTP/1.1\r\nhost: t\r\n\r\n"));
    ASSERT_TRUE(waitFor([&] { return server_->stats().requests_total.load() == 2; }));
  }  // closed without close_notify
  EXPECT_TRUE(waitFor([&] { return disconnects_.load() == 2; }, std::chrono::seconds(5)));
}

TEST_F(TlsTest, TheBlockingClientSpeaksHttpsWithTheSystemStoreOrSslCertFile) {
  startServer(serverTls());
  ::setenv("SSL_CERT_FILE", pki_->path("ca.pem").c_str(), 1);  // what the system store reads first
  const auto r = fetchBlocking(url() + "/b", "POST", "hi");
  ::unsetenv("SSL_CERT_FILE");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->body, "TLS POST /b hi");
}

TEST(TlsConfig, LoadErrorsNameTheFileAndTheReason) {
  auto pki = TestPki::create();
  ASSERT_TRUE(pki);
  TlsServerConfig c;
  c.cert_file = pki->path("server.pem");
  EXPECT_NE(loadServerTls(c).status().message().find("needs both cert_file and key_file"),
            std::string::npos);
  c.key_file = pki->path("client.key");
  EXPECT_NE(loadServerTls(c).status().message().find("does not match"), std::string::npos);
  c.key_file = pki->path("server.key");
  c.client_ca_file = pki->path("server.key");
  EXPECT_NE(loadServerTls(c).status().message().find("client_ca_file " + c.client_ca_file),
            std::string::npos);
  c.client_ca_file.clear();
  auto ok = loadServerTls(c);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(certificateInfo(**ok).serial, "1001");
  EXPECT_EQ(certificateInfo(**ok).subject, "CN=server");
  EXPECT_GT(certificateInfo(**ok).not_after_s, 0);

  TlsClientConfig cc;
  cc.ca_file = pki->path("missing.pem");
  EXPECT_NE(makeClientTls(cc).status().message().find("ca_file " + cc.ca_file), std::string::npos);
  cc.ca_file.clear();
  cc.cert_file = pki->path("client.pem");
  EXPECT_NE(makeClientTls(cc).status().message().find("needs both cert_file and key_file"),
            std::string::npos);
  // Same settings, same files: the same fingerprint (a reload keeps the pool's connections).
  cc.key_file = pki->path("client.key");
  auto one = makeClientTls(cc), two = makeClientTls(cc);
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(clientTlsFingerprint(**one), clientTlsFingerprint(**two));
  cc.verify = false;
  EXPECT_NE(clientTlsFingerprint(**makeClientTls(cc)), clientTlsFingerprint(**one));
}

TEST(TlsConfig, HttpsUrlsTakeTlsAndPort443) {
  auto a = resolveUrl("https://127.0.0.1/base");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->port, 443);
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->base_path, "/base");
  auto b = resolveUrl("http://127.0.0.1:81");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->tls);
  TlsClientConfig off;
  off.verify = false;
  EXPECT_FALSE(resolveUrl("http://127.0.0.1:81", off).ok());  // TLS settings on a plain URL
}

TEST(TlsConfig, APlainServerRefusesTlsReloads) {
  EventLoops loops(1);
  loops.start();
  {
    auto s = HttpServer::create(loops, ServerConfig{}, [](int, asio::io_context&) {
      return std::unique_ptr<HttpHandler>(new Handler(nullptr));
    });
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->reloadTls(TlsServerConfig{}).code(), StatusCode::kFailedPrecondition);
    EXPECT_FALSE((*s)->tlsCertificate().has_value());
  }
  loops.stop();
}

}  // namespace
}  // namespace infera::net
