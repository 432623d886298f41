// Routes that read their request body as it arrives (Router::addStreamed,
// HttpRequest::body_reader): bodies beyond max_body_bytes in pieces, never whole, with every check
// of the server kept — a declared length over the route's limit is a 413 before the handler runs, a
// chunked body over it fails the read, Expect: 100-continue is answered first, an answer given
// before the body's end closes the connection after it, and other routes keep max_body_bytes.
#include <gtest/gtest.h>

#include <atomic>

#include "fakes/http_test_client.h"
#include "net/router.h"
#include "net/server.h"

namespace infera::net {
namespace {

using testing::TestClient;

struct Seen {
  std::atomic<int> calls{0};
  std::atomic<size_t> largest_piece{0};
};

class StreamedBodyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loops_.start();
    ServerConfig cfg;
    cfg.max_body_bytes = 1024;
    cfg.max_streamed_body_bytes = 64 << 20;
    cfg.header_timeout = std::chrono::milliseconds(2000);
    auto s = HttpServer::create(loops_, cfg, [this](int, asio::io_context&) {
      Router r;
      Seen* seen = &seen_;
      r.addStreamed(
          "PUT", "/upload/{name}",
          [seen](HttpRequest& req, ResponseWriter& w, PathParams p) -> Task<void> {
            ++seen->calls;
            EXPECT_TRUE(req.body.empty());
            EXPECT_NE(req.body_reader, nullptr);
            if (p["name"] == "early") {
              co_await w.send(403, "text/plain", "no");  // answers without reading the body
              co_return;
            }
            uint64_t bytes = 0, sum = 0;
            int pieces = 0;
            for (;;) {
              auto piece = co_await req.body_reader->read();
              if (!piece.ok()) {
                const int status =
                    piece.status().code() == StatusCode::kPayloadTooLarge ? 413 : 400;
                const std::string msg = piece.status().message();
                co_await w.send(status, "text/plain", msg);
                co_return;
              }
              if (piece->empty()) break;
              ++pieces;
              bytes += piece->size();
              for (unsigned char c : *piece) sum += c;
              size_t seen_max = seen->largest_piece.load();
              while (piece->size() > seen_max &&
                     !seen->largest_piece.compare_exchange_weak(seen_max, piece->size())) {
              }
            }
            EXPECT_TRUE(req.body_reader->done());
            const std::string out = "bytes=" + std::to_string(bytes) +
                                    " sum=" + std::to_string(sum) +
                                    " pieces=" + std::to_string(pieces > 1 ? 2 : pieces);
            co_await w.send(200, "text/plain", out);
          },
          4 << 20);
      r.add("POST", "/plain", [](HttpRequest& req, ResponseWriter& w, PathParams) -> Task<void> {
        const std::string out =
            "plain " + std::to_string(req.body.size()) + (req.body_reader ? " streamed" : "");
        co_await w.send(200, "text/plain", out);
      });
      return std::make_unique<RouterHandler>(std::move(r));
    });
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
  }
  void TearDown() override {
    server_.reset();
    loops_.stop();
  }
  static std::string body(size_t n) {
    std::string b(n, '\0');
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<char>('a' + i % 26);
    return b;
  }
  static uint64_t sum(const std::string& b) {
    uint64_t s = 0;
    for (unsigned char c : b) s += c;
    return s;
  }
  Seen seen_;
  EventLoops loops_{2};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(StreamedBodyTest, ABodyBeyondMaxBodyBytesArrivesInPiecesAndTheConnectionIsKept) {
  const std::string b = body(3 << 20);
  TestClient c(server_->port());
  const auto r = c.request("PUT", "/upload/x", b, {{"content-type", "application/octet-stream"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body,
            "bytes=" + std::to_string(b.size()) + " sum=" + std::to_string(sum(b)) + " pieces=2");
  EXPECT_LE(seen_.largest_piece.load(), size_t{1} << 20);  // a read buffer, never the body
  // The same connection serves the next request; other routes keep max_body_bytes.
  const auto p = c.request("POST", "/plain", "hello");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->body, "plain 5");
  const auto big = c.request("POST", "/plain", std::string(2000, 'x'));
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(server_->stats().connections_total.load(), 1u);
}

TEST_F(StreamedBodyTest, ChunkedBodiesStreamToo) {
  TestClient c(server_->port());
  std::string req = "PUT /upload/x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string piece = body(100000);
  for (int i = 0; i < 5; ++i) {
    char size[16];
    std::snprintf(size, sizeof(size), "%zx\r\n", piece.size());
    req += size + piece + "\r\n";
  }
  req += "0\r\n\r\n";
  ASSERT_TRUE(c.sendRaw(req));
  testing::TestResponse head;
  ASSERT_TRUE(c.readHead(head));
  EXPECT_EQ(head.status, 200);
  std::string text;
  while (auto p = c.readPiece()) text += *p;
  EXPECT_EQ(text, "bytes=500000 sum=" + std::to_string(5 * sum(piece)) + " pieces=2");
}

TEST_F(StreamedBodyTest, ADeclaredLengthOverTheRoutesLimitIs413BeforeTheHandler) {
  TestClient c(server_->port());
  ASSERT_TRUE(c.sendRaw("PUT /upload/x HTTP/1.1\r\nHost: t\r\nContent-Length: 5000000\r\n\r\nabc"));
  testing::TestResponse head;
  ASSERT_TRUE(c.readHead(head));
  EXPECT_EQ(head.status, 413);
  std::string text;
  while (auto p = c.readPiece()) text += *p;
  EXPECT_NE(text.find("exceeds the limit of 4194304 bytes"), std::string::npos) << text;
  EXPECT_EQ(seen_.calls.load(), 0);
}

TEST_F(StreamedBodyTest, AChunkedBodyOverTheLimitFailsTheRead) {
  TestClient c(server_->port());
  std::string req = "PUT /upload/x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string piece = body(1 << 20);
  for (int i = 0; i < 5; ++i) {
    char size[16];
    std::snprintf(size, sizeof(size), "%zx\r\n", piece.size());
    req += size + piece + "\r\n";
  }
  req += "0\r\n\r\n";
  ASSERT_TRUE(c.sendRaw(req));
  testing::TestResponse head;
  ASSERT_TRUE(c.readHead(head));
  EXPECT_EQ(head.status, 413);
  EXPECT_EQ(seen_.calls.load(), 1);
}

TEST_F(StreamedBodyTest, ExpectContinueIsAnsweredBeforeTheBody) {
  TestClient c(server_->port());
  ASSERT_TRUE(c.sendRaw(
      "PUT /upload/x HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  testing::TestResponse interim;
  ASSERT_TRUE(c.readHead(interim));
  EXPECT_EQ(interim.status, 100);
  ASSERT_TRUE(c.sendRaw("hello"));
  testing::TestResponse head;
  ASSERT_TRUE(c.readHead(head));
  EXPECT_EQ(head.status, 200);
}

TEST_F(StreamedBodyTest, AnAnswerBeforeTheBodysEndClosesTheConnectionAfterIt) {
  TestClient c(server_->port());
  const std::string b = body(2 << 20);
  ASSERT_TRUE(c.sendRaw("PUT /upload/early HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                        std::to_string(b.size()) + "\r\n\r\n"));
  testing::TestResponse head;
  ASSERT_TRUE(c.readHead(head));
  EXPECT_EQ(head.status, 403);
  std::string text;
  while (auto p = c.readPiece()) text += *p;
  EXPECT_EQ(text, "no");
  // The rest of the body is not read as a next request: the server closes.
  (void)c.sendRaw(b.substr(0, 1000));
  EXPECT_TRUE(c.readAll().empty());
}

}  // namespace
}  // namespace infera::net
