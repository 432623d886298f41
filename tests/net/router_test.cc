#include "net/router.h"

#include <gtest/gtest.h>

#include "fakes/http_test_client.h"
#include "net/loops.h"

namespace infera::net {
namespace {

RouteHandler named(std::string name, std::string* hit) {
  return [name, hit](HttpRequest&, ResponseWriter&, PathParams) -> Task<void> {
    *hit = name;
    co_return;
  };
}

TEST(RouterTest, MatchesLiteralsParametersAndTails) {
  Router r;
  std::string hit;
  r.add("POST", "/v1/chat/completions", named("chat", &hit));
  r.add("GET", "/collections/{name}", named("get", &hit));
  r.add("PUT", "/collections/{name}/points", named("points", &hit));
  r.add("*", "/v2/models/{model}/{rest...}", named("kserve", &hit));

  auto m = r.match("POST", "/v1/chat/completions");
  ASSERT_NE(m.handler, nullptr);
  EXPECT_EQ(m.params.size(), 0u);

  m = r.match("GET", "/collections/docs");
  ASSERT_NE(m.handler, nullptr);
  EXPECT_EQ(m.params["name"], "docs");

  m = r.match("PUT", "/collections/docs/points");
  ASSERT_NE(m.handler, nullptr);
  EXPECT_EQ(m.params["name"], "docs");

  m = r.match("DELETE", "/v2/models/resnet/versions/3/infer");
  ASSERT_NE(m.handler, nullptr);
  EXPECT_EQ(m.params["model"], "resnet");
  EXPECT_EQ(m.params["rest"], "versions/3/infer");
  EXPECT_EQ(m.params["missing"], "");
}

TEST(RouterTest, LiteralSegmentsWinOverParametersAndBacktrack) {
  Router r;
  std::string hit;
  r.add("GET", "/admin/keys/{id}", named("key", &hit));
  r.add("GET", "/admin/keys/export", named("export", &hit));
  r.add("POST", "/admin/keys/{id}/revoke", named("revoke", &hit));
  auto m = r.match("GET", "/admin/keys/export");
  ASSERT_NE(m.handler, nullptr);
  ASSERT_EQ(m.params.size(), 0u);
  // "export" is a literal, but /admin/keys/export/revoke only matches through the parameter.
  m = r.match("POST", "/admin/keys/export/revoke");
  ASSERT_NE(m.handler, nullptr);
  EXPECT_EQ(m.params["id"], "export");
}

TEST(RouterTest, AnswersNotFoundAndMethodNotAllowedWithTheAllowedMethods) {
  Router r;
  std::string hit;
  r.add("GET", "/v1/models", named("models", &hit));
  r.add("POST", "/admin/teams", named("create", &hit));
  r.add("GET", "/admin/teams", named("list", &hit));
  auto m = r.match("DELETE", "/admin/teams");
  EXPECT_EQ(m.handler, nullptr);
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.allow, "POST, GET");
  m = r.match("GET", "/admin/nothing");
  EXPECT_EQ(m.handler, nullptr);
  EXPECT_EQ(m.status, 404);
  // Segments match exactly: no empty segment, trailing slash or dot segment reaches a route.
  EXPECT_EQ(r.match("GET", "/v1/models/").status, 404);
  EXPECT_EQ(r.match("GET", "/v1//models").status, 404);
  EXPECT_EQ(r.match("GET", "/v1/./models").status, 404);
  EXPECT_EQ(r.match("GET", "v1/models").status, 404);
  // A parameter matches one non-empty segment.
  r.add("GET", "/c/{name}", named("c", &hit));
  EXPECT_EQ(r.match("GET", "/c/").status, 404);
  EXPECT_EQ(r.match("GET", "/c/a/b").status, 404);
}

TEST(RouterTest, ExactMethodWinsOverAnyMethod) {
  Router r;
  std::string hit;
  r.add("*", "/v2", named("any", &hit));
  r.add("GET", "/v2", named("get", &hit));
  const auto get = r.match("GET", "/v2").handler;
  const auto post = r.match("POST", "/v2").handler;  // only "*" takes it
  ASSERT_NE(get, nullptr);
  ASSERT_NE(post, nullptr);
  EXPECT_NE(get, post);
  EXPECT_EQ(r.match("DELETE", "/v2").handler, post);
}

// Through a real server: the route's handler runs with its parameters, and the fallback of the
// longest matching prefix answers what no route takes.
TEST(RouterTest, DispatchesThroughAServerWithPrefixFallbacks) {
  EventLoops loops(1);
  loops.start();
  auto server = HttpServer::create(loops, ServerConfig{}, [](int, asio::io_context&) {
    Router r;
    r.add("GET", "/collections/{name}",
          [](HttpRequest&, ResponseWriter& w, PathParams p) -> Task<void> {
            const std::string body = "collection " + std::string(p["name"]);
            co_await w.send(200, "text/plain", body);
          });
    r.setFallback("",
                  [](HttpRequest&, ResponseWriter& w, int status, std::string_view) -> Task<void> {
                    co_await w.send(status, "text/plain", "root fallback");
                  });
    r.setFallback(
        "/collections",
        [](HttpRequest&, ResponseWriter& w, int status, std::string_view allow) -> Task<void> {
          const std::string body = "qdrant-shaped " + std::string(allow);
          co_await w.send(status, "application/json", body);
        });
    return std::make_unique<RouterHandler>(std::move(r));
  });
  ASSERT_TRUE(server.ok()) << server.status().message();
  const uint16_t port = (*server)->port();
  auto a = testing::httpRequest(port, "GET", "/collections/docs");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, "collection docs");
  auto b = testing::httpRequest(port, "DELETE", "/collections/docs");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 405);
  EXPECT_EQ(b->body, "qdrant-shaped GET");
  auto c = testing::httpRequest(port, "GET", "/elsewhere");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, 404);
  EXPECT_EQ(c->body, "root fallback");
  server->reset();
  loops.stop();
}

TEST(RouterTest, OwnedStateLivesAsLongAsTheRouter) {
  struct Flag {
    explicit Flag(std::vector<int>* o, int i) : out(o), id(i) {}
    ~Flag() { out->push_back(id); }
    std::vector<int>* out;
    int id;
  };
  std::vector<int> destroyed;
  {
    Router r;
    r.own(std::make_unique<Flag>(&destroyed, 1));
    r.own(std::make_unique<Flag>(&destroyed, 2));
    EXPECT_TRUE(destroyed.empty());
  }
  EXPECT_EQ(destroyed, (std::vector<int>{2, 1}));
}

}  // namespace
}  // namespace infera::net
