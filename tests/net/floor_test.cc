// The floor under every route (DESIGN.md): what the server and router answer themselves, in the
// service's error shape, before or instead of a handler: ill-formed UTF-8 at the door, cross-site
// state changes, and a handler that throws.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "fakes/http_test_client.h"
#include "net/loops.h"
#include "net/router.h"
#include "net/server.h"

namespace infera::net {
namespace {

using testing::TestClient;

struct Seen {
  std::atomic<int> handled{0};
  std::string last_name;  // written on the server's one loop, read after the answer
};

class FloorTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> allowed_origins = {}) {
    loops_.start();
    ServerConfig cfg;
    cfg.allowed_origins = std::move(allowed_origins);
    auto s = HttpServer::create(loops_, cfg, [this](int, asio::io_context&) {
      Router r;
      Seen* seen = &seen_;
      r.add("*", "/svc/{name}", [seen](HttpRequest& req, ResponseWriter& w, PathParams p) {
        return answer(seen, req, w, std::string(p["name"]));
      });
      r.add("GET", "/svc/throw/now",
            [seen](HttpRequest&, ResponseWriter&, PathParams) -> Task<void> {
              ++seen->handled;
              throw std::runtime_error("a bug in a handler");
              co_return;
            });
      // nlohmann's type_error: what a wrong JSON type in a body used to raise.
      r.add("POST", "/svc/json/type",
            [seen](HttpRequest&, ResponseWriter& w, PathParams) -> Task<void> {
              ++seen->handled;
              const nlohmann::json j = nlohmann::json::parse(R"({"sample":"0.5"})");
              const double sample = j["sample"].get<double>();  // throws
              co_await w.send(200, "text/plain", std::to_string(sample));
            });
      r.add("GET", "/svc/throw/late",
            [seen](HttpRequest&, ResponseWriter& w, PathParams) -> Task<void> {
              ++seen->handled;
              co_await w.start(200, "text/plain");
              co_await w.writeChunk("partial");
              throw std::logic_error("after the head");
            });
      r.add("GET", "/other/throw", [seen](HttpRequest&, ResponseWriter&, PathParams) -> Task<void> {
        ++seen->handled;
        throw 42;  // not even a std::exception
        co_return;
      });
      r.setErrorShape("/svc", [](int status, std::string_view message, std::string_view code) {
        return EarlyAnswer{status, "application/json",
                           nlohmann::json{{"error_code", code}, {"message", message}}.dump()};
      });
      return std::make_unique<RouterHandler>(std::move(r));
    });
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
  }
  static Task<void> answer(Seen* seen, HttpRequest& req, ResponseWriter& w, std::string name) {
    ++seen->handled;
    seen->last_name = std::move(name);
    const std::string body = req.method + " ok";
    co_await w.send(200, "text/plain", body);
  }
  void TearDown() override {
    server_.reset();
    loops_.stop();
  }
  std::optional<testing::TestResponse> get(
      const std::string& target, std::vector<std::pair<std::string, std::string>> h = {}) {
    return testing::httpRequest(server_->port(), "GET", target, "", h);
  }
  std::optional<testing::TestResponse> post(
      const std::string& target, std::vector<std::pair<std::string, std::string>> h = {}) {
    return testing::httpRequest(server_->port(), "POST", target, "{}", h);
  }
  static nlohmann::json body(const testing::TestResponse& r) {
    return nlohmann::json::parse(r.body, nullptr, false);
  }

  EventLoops loops_{1};
  std::unique_ptr<HttpServer> server_;
  Seen seen_;
};

TEST_F(FloorTest, AnswersAThrowingHandlerWith500InTheServiceShapeAndKeepsServing) {
  start();
  const auto r = get("/svc/throw/now");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  const auto j = body(*r);
  EXPECT_EQ(j.value("error_code", ""), "internal_error") << r->body;
  // The message says nothing of the exception's text (it is logged).
  EXPECT_EQ(r->body.find("a bug in a handler"), std::string::npos);
  const auto t = testing::httpRequest(server_->port(), "POST", "/svc/json/type", "{}");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, 500);
  // Outside /svc: the default (OpenAI) shape; a throw of a non-exception type is caught too.
  const auto o = get("/other/throw");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->status, 500);
  EXPECT_EQ(body(*o)["error"].value("code", ""), "internal_error") << o->body;
  EXPECT_EQ(server_->stats().handler_exceptions.load(), 3u);
  // The one loop is still serving.
  const auto next = get("/svc/alive");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(seen_.handled.load(), 4);
}

TEST_F(FloorTest, EndsTheConnectionWhenAHandlerThrowsAfterItsResponseStarted) {
  start();
  TestClient c(server_->port());
  ASSERT_TRUE(c.send("GET", "/svc/throw/late", ""));
  const std::string raw = c.readAll();  // returns when the server closes
  EXPECT_NE(raw.find("HTTP/1.1 200"), std::string::npos);
  EXPECT_NE(raw.find("partial"), std::string::npos);
  EXPECT_EQ(raw.find("0\r\n\r\n"), std::string::npos) << "a cut response must not look complete";
  EXPECT_TRUE(c.eof());
  EXPECT_EQ(server_->stats().handler_exceptions.load(), 1u);
  const auto next = get("/svc/alive");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
}

TEST_F(FloorTest, RefusesIllFormedUtf8InThePathQueryOrHeadersBeforeTheHandler) {
  start();
  for (const std::string target :
       {"/svc/%FF", "/svc/ok?name=%FF", "/svc/ok?actor=Jos%E9", "/svc/%C0%AF", "/svc/ok?x=100%"}) {
    const auto r = get(target);
    ASSERT_TRUE(r) << target;
    EXPECT_EQ(r->status, 400) << target;
    EXPECT_EQ(body(*r).value("error_code", ""), "invalid_utf8") << target << ": " << r->body;
  }
  // A header value in Latin-1 ("console:José"), as a careless admin script sends it.
  const auto h = get("/svc/ok", {{"x-infera-actor", "console:Jos\xE9"}});
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 400);
  EXPECT_EQ(seen_.handled.load(), 0);
  EXPECT_EQ(server_->stats().rejected_utf8.load(), 6u);
  // Valid UTF-8, escaped or in a header, passes as it is.
  const auto ok = get("/svc/caf%C3%A9", {{"x-infera-actor", "console:Jos\xC3\xA9"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(seen_.last_name, "caf%C3%A9");
}

TEST_F(FloorTest, RefusesCrossSiteStateChangesButNotReadsOrTheServersOwnPages) {
  start();
  const std::string host = "127.0.0.1:" + std::to_string(server_->port());
  struct Case {
    std::string method;
    std::vector<std::pair<std::string, std::string>> headers;
    int status;
  };
  const std::vector<Case> cases = {
      // A page elsewhere posting text/plain to the loopback server (the quickstart's CSRF).
      {"POST", {{"origin", "http://evil.example"}, {"content-type", "text/plain"}}, 403},
      {"POST", {{"origin", "http://evil.example"}, {"sec-fetch-site", "cross-site"}}, 403},
      // Another port on the same host is same-site, not same-origin.
      {"POST", {{"origin", "http://127.0.0.1:1"}, {"sec-fetch-site", "same-site"}}, 403},
      {"DELETE", {{"sec-fetch-site", "cross-site"}}, 403},
      {"PUT", {{"origin", "null"}}, 403},
      // The server's own page (the console), with and without Sec-Fetch-Site.
      {"POST", {{"origin", "http://" + host}, {"sec-fetch-site", "same-origin"}}, 200},
      // Without Sec-Fetch-Site (older browsers) the Origin must name the Host the request was sent
      // to (the test client sends "host: 127.0.0.1"); another port is another origin.
      {"POST", {{"origin", "http://127.0.0.1"}}, 200},
      {"POST", {{"origin", "http://" + host}}, 403},
      {"POST", {{"sec-fetch-site", "none"}}, 200},
      // Not a browser (curl, SDKs): no Origin, no Sec-Fetch-Site.
      {"POST", {}, 200},
      // Reads are not refused: a cross-site GET cannot read the answer.
      {"GET", {{"origin", "http://evil.example"}, {"sec-fetch-site", "cross-site"}}, 200},
  };
  int handled = 0;
  for (const auto& c : cases) {
    const auto r = testing::httpRequest(server_->port(), c.method, "/svc/x", "{}", c.headers);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, c.status) << c.method << " " << r->body;
    if (c.status == 403) {
      EXPECT_EQ(body(*r).value("error_code", ""), "cross_site_request") << r->body;
    } else {
      ++handled;
    }
  }
  EXPECT_EQ(seen_.handled.load(), handled);
  EXPECT_EQ(server_->stats().rejected_cross_site.load(), 6u);
}

TEST_F(FloorTest, LetsConfiguredOriginsThrough) {
  start({"https://console.example"});
  const auto ok =
      post("/svc/x", {{"origin", "https://console.example"}, {"sec-fetch-site", "cross-site"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  const auto no = post("/svc/x", {{"origin", "https://evil.example"}});
  ASSERT_TRUE(no);
  EXPECT_EQ(no->status, 403);
}

TEST_F(FloorTest, LetsEveryOriginThroughWithAStar) {
  start({"*"});
  const auto ok =
      post("/svc/x", {{"origin", "http://evil.example"}, {"sec-fetch-site", "cross-site"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// SO_REUSEPORT would let a second server (a second `infera serve`) join the port silently and take
// every other connection.
TEST(ListenTest, RefusesAPortAnotherServerAlreadyListensOn) {
  EventLoops loops(2);
  loops.start();
  const auto factory = [](int, asio::io_context&) {
    return std::make_unique<RouterHandler>(Router{});
  };
  auto first = HttpServer::create(loops, ServerConfig{}, factory);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ServerConfig again;
  again.port = (*first)->port();
  auto second = HttpServer::create(loops, again, factory);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("another process is already listening"),
            std::string::npos)
      << second.status().message();
  // Once the first is gone, the port is free again.
  first->reset();
  auto third = HttpServer::create(loops, again, factory);
  EXPECT_TRUE(third.ok()) << third.status().message();
  third->reset();
  loops.stop();
}

}  // namespace
}  // namespace infera::net
