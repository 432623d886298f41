// The gateway tried as an attacker would: hand-framed requests on raw loopback sockets against a
// gateway with access control on, and a recording backend that shows what was forwarded. Each
// test is a way past permissions, limits or another team's cached answers that used to work
// (docs/security.md lists them), or a framing the gateway used to get wrong.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "access/access_fixture.h"
#include "fakes/http_test_client.h"
#include "fakes/recording_backend.h"
#include "server/server.h"

namespace infera::gateway {
namespace {

using access::govtest::admin;
using access::govtest::kAdminToken;
using access::govtest::tempPath;
using nlohmann::json;
using testing::RecordingBackend;
using testing::TestClient;
using testing::TestResponse;
using testing::waitFor;

class HardeningTest : public ::testing::Test {
 protected:
  void start(RecordingBackend::Behaviour behaviour = {}, const std::string& extra = "",
             const std::string& governance_extra = "", bool governance = true) {
    backend_ = RecordingBackend::start(behaviour);
    ASSERT_TRUE(backend_);
    db_ = tempPath("hardening.db");
    const std::string url = backend_->url();
    const std::string yaml =
        "workers: 1\nlisten: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: "
        "0}\nlog_level: warn\n"
        "health_check: {enabled: false}\n" +
        extra +
        (governance ? "governance:\n  store: sqlite:" + db_ + "\n  admin_token: " + kAdminToken +
                          "\n  key_secret: test-secret-0123456789abcdef0123456789\n  cache: "
                          "{ttl_ms: 60000}\n" +
                          governance_extra
                    : std::string()) +
        "models:\n"
        "  - {name: echo-a, deployments: [{endpoints: [{url: \"" +
        url +
        "\"}]}]}\n"
        "  - {name: echo-b, deployments: [{endpoints: [{url: \"" +
        url +
        "\"}]}]}\n"
        "  - {name: kecho-a, deployments: [{protocol: kserve, endpoints: [{url: \"" +
        url +
        "\"}]}]}\n"
        "  - {name: kecho-b, deployments: [{protocol: kserve, endpoints: [{url: \"" +
        url + "\"}]}]}\n";
    gw_ = access::govtest::startGov(yaml);
    ASSERT_TRUE(gw_);
    if (!governance) return;
    // Team "a" may use echo-a and kecho-a only; its key may name users.
    ASSERT_EQ(
        admin(*gw_, "POST", "/admin/teams", R"({"name":"a","models":["echo-a","kecho-a"]})").status,
        201);
    const auto k = admin(*gw_, "POST", "/admin/keys", R"({"team":"a","allow_user":true})");
    ASSERT_EQ(k.status, 201) << k.body;
    key_ = json::parse(k.body)["key"].get<std::string>();
  }

  // A hand-framed request: head lines (without the final blank line) and body.
  std::string frame(const std::string& request_line, const std::vector<std::string>& headers,
                    const std::string& body) const {
    std::string out =
        request_line + "\r\nhost: 127.0.0.1\r\nauthorization: Bearer " + key_ + "\r\n";
    for (const auto& h : headers) out += h + "\r\n";
    return out + "\r\n" + body;
  }
  // Sends bytes on a fresh connection and reads everything until the gateway closes or goes quiet.
  std::string exchange(const std::string& bytes,
                       std::chrono::milliseconds quiet = std::chrono::milliseconds(1500)) {
    TestClient c(gw_->port(), quiet);
    EXPECT_TRUE(c.sendRaw(bytes));
    return c.readAll();
  }
  static int statusOf(const std::string& raw) {
    return raw.size() > 12 && raw.starts_with("HTTP/1.") ? std::atoi(raw.c_str() + 9) : 0;
  }
  static int responses(const std::string& raw) {
    int n = 0;
    for (size_t p = raw.find("HTTP/1."); p != std::string::npos; p = raw.find("HTTP/1.", p + 1))
      ++n;
    return n;
  }
  TestResponse chat(const std::string& body,
                    const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    std::vector<std::pair<std::string, std::string>> h = {{"authorization", "Bearer " + key_}};
    for (const auto& e : extra) h.push_back(e);
    auto r = testing::httpRequest(gw_->port(), "POST", "/v1/chat/completions", body, h);
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  }

  void TearDown() override {
    gw_.reset();
    backend_.reset();
  }

  std::unique_ptr<RecordingBackend> backend_;
  std::unique_ptr<server::Server> gw_;
  std::string db_;
  std::string key_;
};

// 1. One reading of the body: an escaped second "model" key was routed and permitted as echo-a
// while the backend read echo-b.
TEST_F(HardeningTest, AnEscapedDuplicateModelKeyIsRefusedAndNothingIsForwarded) {
  start();
  const auto r = chat(R"({"model":"echo-a","mod\u0065l":"echo-b","messages":[]})");
  EXPECT_EQ(r.status, 400) << r.body;
  const auto half =
      chat(R"({"model":"echo-a","max_tokens":1,"max_tok\u0065ns":100000,"messages":[]})");
  EXPECT_EQ(half.status, 400) << half.body;
  EXPECT_EQ(backend_->count(), 0u);
  // A clean request goes through, and the backend reads the model the key was permitted.
  const auto ok = chat(R"({"model":"echo-a","max_tokens":2,"messages":[]})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  ASSERT_EQ(backend_->count(), 1u);
  EXPECT_EQ(json::parse(backend_->requests()[0].body)["model"], "echo-a");
}

// 2. The cache keyed on another reading than the backend's: a second "messages" planted the
// answer to one prompt under another. Now such a body is refused, and the cache's key is the
// canonical form of the same parse (so an escaped spelling of a prompt is the same prompt).
TEST_F(HardeningTest, TheCacheKeysOnTheSameReadingAsTheBackend) {
  start();
  const auto plant =
      chat(R"({"model":"echo-a","temperature":0,"messages":[{"role":"user","content":"victim"}],)"
           R"("messages":[{"role":"user","content":"attacker"}]})");
  EXPECT_EQ(plant.status, 400);
  EXPECT_EQ(backend_->count(), 0u);
  const auto first =
      chat(R"({"model":"echo-a","temperature":0,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.header("x-infera-cache"), "miss");
  const auto same = chat(
      R"({"messages":[{"content":"h\u0069","role":"user"}],"model":"echo-a","temperature":0.0})");
  ASSERT_EQ(same.status, 200);
  EXPECT_EQ(same.header("x-infera-cache"), "hit");
  EXPECT_EQ(backend_->count(), 1u);
}

// Anthropic's Messages API, attacked as a hostile key holder would: the body is read once (by the
// shared JSON reader: invalid UTF-8, deep nesting and a key given twice are refused in Anthropic's
// error shape, nothing forwarded), access is checked for the model it names, and what the backend
// gets is the translated chat request without the gateway's key header.
TEST_F(HardeningTest, MessagesAreReadOnceCheckedAndForwardedWithoutTheKeyHeader) {
  start();
  auto messages = [&](const std::string& body,
                      std::vector<std::pair<std::string, std::string>> headers = {}) {
    if (headers.empty()) headers = {{"x-api-key", key_}, {"anthropic-version", "2023-06-01"}};
    auto r = testing::httpRequest(gw_->port(), "POST", "/v1/messages", body, headers);
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  };
  auto errorType = [](const TestResponse& r) {
    const json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.value("type", "") == "error" ? j["error"].value("type", "")
                                                           : "not an Anthropic error: " + r.body;
  };
  const std::string hi = R"("max_tokens":3,"messages":[{"role":"user","content":"hi"}]})";
  // Refused before anything is forwarded.
  const auto no_key = messages(R"({"model":"echo-a",)" + hi, {{"anthropic-version", "2023-06-01"}});
  EXPECT_EQ(no_key.status, 401);
  EXPECT_EQ(errorType(no_key), "authentication_error");
  const auto bad_utf8 = messages(
      "{\"model\":\"echo-a\",\"max_tokens\":3,\"messages\":[{\"role\":"
      "\"user\",\"content\":\"\xff\xfe\"}]}");
  EXPECT_EQ(bad_utf8.status, 400);
  EXPECT_EQ(errorType(bad_utf8), "invalid_request_error");
  std::string deep = R"({"model":"echo-a","metadata":)";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  const auto nested = messages(deep + "," + hi);
  EXPECT_EQ(nested.status, 400);
  EXPECT_EQ(errorType(nested), "invalid_request_error");
  const auto twice = messages(R"({"model":"echo-a","mod\u0065l":"echo-b",)" + hi);
  EXPECT_EQ(twice.status, 400);
  EXPECT_NE(twice.body.find("twice"), std::string::npos) << twice.body;
  const auto other_team = messages(R"({"model":"echo-b",)" + hi);
  EXPECT_EQ(other_team.status, 403);
  EXPECT_EQ(errorType(other_team), "permission_error");
  EXPECT_EQ(backend_->count(), 0u);
  // A good one: the backend reads a chat completion of the permitted model, with no x-api-key.
  const auto ok = messages(R"({"model":"echo-a",)" + hi);
  ASSERT_EQ(ok.status, 200) << ok.body;
  const json answer = json::parse(ok.body);
  EXPECT_EQ(answer["type"], "message");
  EXPECT_EQ(answer["content"][0]["text"], "hi");
  EXPECT_EQ(answer["usage"]["input_tokens"], 5);
  EXPECT_EQ(answer["usage"]["output_tokens"], 3);
  ASSERT_EQ(backend_->count(), 1u);
  const auto seen = backend_->requests()[0];
  EXPECT_EQ(seen.target, "/v1/chat/completions");
  EXPECT_EQ(seen.headerCount("x-api-key"), 0);
  EXPECT_EQ(json::parse(seen.body),
            json::parse(R"({"model":"echo-a","messages":[{"role":"user","content":"hi"}],)"
                        R"("max_tokens":3})"));
  // A wrong method or path under /v1/messages: Anthropic's shape too.
  auto wrong = testing::httpRequest(gw_->port(), "GET", "/v1/messages", "", {{"x-api-key", key_}});
  ASSERT_TRUE(wrong.has_value());
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(errorType(*wrong), "invalid_request_error");
  auto batches =
      testing::httpRequest(gw_->port(), "GET", "/v1/messages/batches", "", {{"x-api-key", key_}});
  ASSERT_TRUE(batches.has_value());
  EXPECT_EQ(batches->status, 404);
  EXPECT_EQ(errorType(*batches), "not_found_error");
  // The key as a bearer token works too (Anthropic's SDK sends authToken that way).
  const auto bearer = messages(R"({"model":"echo-a",)" + hi, {{"authorization", "Bearer " + key_}});
  EXPECT_EQ(bearer.status, 200) << bearer.body;
}

// OpenAI's Responses API goes through the same door: one reading by the shared JSON reader
// (refusals in OpenAI's shape, nothing forwarded), the model's permission checked, and the backend
// gets the translated chat completion.
TEST_F(HardeningTest, ResponsesAreReadOnceCheckedAndTranslated) {
  start();
  auto responses = [&](const std::string& body) {
    auto r = testing::httpRequest(gw_->port(), "POST", "/v1/responses", body,
                                  {{"authorization", "Bearer " + key_}});
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  };
  const auto bad_utf8 = responses("{\"model\":\"echo-a\",\"input\":\"\xff\"}");
  EXPECT_EQ(bad_utf8.status, 400);
  EXPECT_TRUE(json::parse(bad_utf8.body).contains("error")) << bad_utf8.body;
  EXPECT_EQ(responses(R"({"model":"echo-a","mod\u0065l":"echo-b","input":"x"})").status, 400);
  EXPECT_EQ(responses(R"({"model":"echo-b","input":"x"})").status, 403);
  EXPECT_EQ(responses(R"({"model":"echo-a","input":"x","previous_response_id":"resp_1"})").status,
            400);
  EXPECT_EQ(backend_->count(), 0u);
  const auto ok = responses(R"({"model":"echo-a","input":"hi","max_output_tokens":3})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  const json r = json::parse(ok.body);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "hi");
  EXPECT_EQ(r["usage"]["input_tokens"], 5);
  ASSERT_EQ(backend_->count(), 1u);
  EXPECT_EQ(backend_->requests()[0].target, "/v1/chat/completions");
  EXPECT_EQ(json::parse(backend_->requests()[0].body),
            json::parse(R"({"model":"echo-a","messages":[{"role":"user","content":"hi"}],)"
                        R"("max_tokens":3})"));
}

// 3. Request smuggling: a Transfer-Encoding whose last coding is not chunked was read as an empty
// body, and the bytes after it ran as a second request.
TEST_F(HardeningTest, AmbiguousFramingIsRefusedWith400AndTheConnectionClosed) {
  start();
  const std::string hidden = frame("POST /v1/chat/completions HTTP/1.1",
                                   {"content-type: application/json", "content-length: 41"},
                                   R"({"model":"echo-b","max_tokens":1,"x":[]})");
  const std::vector<std::vector<std::string>> framings = {
      {"transfer-encoding: xchunked"},
      {"transfer-encoding: chunked, identity"},
      {"transfer-encoding: identity"},
      {"transfer-encoding: chunked", "content-length: 5"},
      {"content-length: 5", "content-length: 6"},
      {"content-length: 5, 6"},
      {"content-length: -5"},
      {"content-length: 0x10"},
  };
  for (const auto& f : framings) {
    auto headers = f;
    headers.push_back("content-type: application/json");
    const std::string raw = exchange(frame("POST /v1/chat/completions HTTP/1.1", headers, hidden));
    EXPECT_EQ(statusOf(raw), 400) << f[0] << "\n" << raw;
    EXPECT_EQ(responses(raw), 1) << f[0] << ": a second request ran\n" << raw;
    EXPECT_NE(raw.find("connection: close"), std::string::npos) << raw;
  }
  EXPECT_EQ(backend_->count(), 0u);
}

// 4. A dot segment in a KServe path was permitted for the model before it and forwarded as
// written (the backend resolved it to the model after it).
TEST_F(HardeningTest, DotSegmentsAndEncodedSlashesInPathsAreRefused) {
  start();
  const std::string body = R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]})";
  for (const char* path :
       {"/v2/models/kecho-a/../kecho-b/infer", "/v2/models/kecho-a/./infer",
        "/v2/models/kecho-a/%2e%2e/kecho-b/infer", "/v2/models/kecho-a%2F..%2Fkecho-b/infer",
        "/v2/models/kecho-a/..%2fkecho-b/infer", "/v2/models/kecho-a\\..\\kecho-b/infer",
        "/v1/chat/../chat/completions"}) {
    const std::string raw = exchange(
        frame(std::string("POST ") + path + " HTTP/1.1",
              {"content-type: application/json", "content-length: " + std::to_string(body.size())},
              body));
    EXPECT_EQ(statusOf(raw), 400) << path << "\n" << raw;
  }
  EXPECT_EQ(backend_->count(), 0u);
  // The plain path is permitted and forwarded as the path that was authorised.
  const std::string ok =
      exchange(frame("POST /v2/models/kecho-a/infer HTTP/1.1",
                     {"content-type: application/json",
                      "content-length: " + std::to_string(body.size()), "connection: close"},
                     body));
  EXPECT_EQ(statusOf(ok), 200) << ok;
  ASSERT_EQ(backend_->count(), 1u);
  EXPECT_EQ(backend_->requests()[0].target, "/v2/models/kecho-a/infer");
}

// 5. Headers the gateway decides on, sent twice: the check read the first and both went on.
TEST_F(HardeningTest, ARepeatedHeaderTheGatewayDecidesOnIsRefused) {
  start();
  const std::string body = R"({"model":"echo-a","max_tokens":1,"messages":[]})";
  for (const auto& dup : std::vector<std::vector<std::string>>{
           {"x-infera-user: ", "x-infera-user: mallory"},
           {"authorization: Bearer sk-inf-nope"},
           {"x-infera-cache: off", "x-infera-cache: on"},
       }) {
    auto headers = dup;
    headers.push_back("content-type: application/json");
    headers.push_back("content-length: " + std::to_string(body.size()));
    const std::string raw = exchange(frame("POST /v1/chat/completions HTTP/1.1", headers, body));
    EXPECT_EQ(statusOf(raw), 400) << dup[0] << "\n" << raw;
  }
  EXPECT_EQ(backend_->count(), 0u);
  // One x-infera-user goes through, forwarded once with the value that was checked.
  const auto ok = chat(body, {{"x-infera-user", "ann"}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  ASSERT_EQ(backend_->count(), 1u);
  EXPECT_EQ(backend_->requests()[0].headerCount("x-infera-user"), 1);
  EXPECT_EQ(backend_->requests()[0].header("x-infera-user"), "ann");
}

// 6. Expect: 100-continue was never answered: every large upload waited ~1 s for curl's fallback.
TEST_F(HardeningTest, ExpectContinueGetsA100OrAFinalStatusBeforeTheBody) {
  start();
  const std::string body = R"({"model":"echo-a","max_tokens":1,"messages":[]})";
  {
    TestClient c(gw_->port(), std::chrono::milliseconds(500));
    ASSERT_TRUE(
        c.sendRaw("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + key_ +
                  "\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: " +
                  std::to_string(body.size()) + "\r\n\r\n"));
    TestResponse interim;
    ASSERT_TRUE(c.readHead(interim)) << "no answer before the body within 500 ms";
    EXPECT_EQ(interim.status, 100);
    ASSERT_TRUE(c.sendRaw(body));
    TestResponse final_response;
    ASSERT_TRUE(c.readHead(final_response));
    EXPECT_EQ(final_response.status, 200);
  }
  {
    // Without a key the answer is final (401) and no body is awaited.
    TestClient c(gw_->port(), std::chrono::milliseconds(500));
    ASSERT_TRUE(c.sendRaw(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        "expect: 100-continue\r\ncontent-length: " +
        std::to_string(body.size()) + "\r\n\r\n"));
    TestResponse r;
    ASSERT_TRUE(c.readHead(r));
    EXPECT_EQ(r.status, 401);
  }
  {
    // Too large: a final 413.
    TestClient c(gw_->port(), std::chrono::milliseconds(500));
    ASSERT_TRUE(
        c.sendRaw("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + key_ +
                  "\r\nexpect: 100-continue\r\ncontent-length: 99999999999\r\n\r\n"));
    TestResponse r;
    ASSERT_TRUE(c.readHead(r));
    EXPECT_EQ(r.status, 413);
  }
}

// 7. HTTP/1.0 clients got transfer-encoding: chunked (chunk sizes appeared in their stream).
TEST_F(HardeningTest, Http10ClientsGetCloseDelimitedBodies) {
  start({.stream = true, .events = 3});
  const std::string body = R"({"model":"echo-a","stream":true,"max_tokens":3,"messages":[]})";
  const std::string raw = exchange("POST /v1/chat/completions HTTP/1.0\r\nauthorization: Bearer " +
                                   key_ + "\r\ncontent-type: application/json\r\ncontent-length: " +
                                   std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_EQ(statusOf(raw), 200) << raw;
  EXPECT_EQ(raw.find("transfer-encoding"), std::string::npos) << raw;
  const std::string payload = raw.substr(raw.find("\r\n\r\n") + 4);
  EXPECT_TRUE(payload.starts_with("data: ")) << payload;
  EXPECT_NE(payload.find("data: [DONE]\n\n"), std::string::npos) << payload;
}

// 8. A backend that died in the middle of an SSE event left the client a half event glued to the
// gateway's error event (`data: {"choices":[{"delevent: error`): without access control, and
// with it when the client asked for usage (the two ways a stream goes through byte for byte). The
// half event is now ended first, so every event is framed and the error event is whole.
void expectWholeEvents(const TestResponse& r) {
  ASSERT_EQ(r.status, 200);
  // Every event is a data line with a whole JSON object, or the gateway's error event.
  size_t pos = 0;
  int events = 0;
  bool error_event = false;
  while (pos < r.body.size()) {
    const size_t end = r.body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos) << "unterminated event at " << pos << ":\n" << r.body;
    const std::string ev = r.body.substr(pos, end - pos);
    pos = end + 2;
    ++events;
    ASSERT_TRUE(ev.starts_with("data: ") || ev.starts_with("event: error\ndata: ")) << ev;
    EXPECT_EQ(ev.find("event: error"), ev.starts_with("event: error") ? 0 : std::string::npos)
        << "the error event is glued to another: " << ev;
    if (ev.starts_with("event: error\ndata: ")) {
      error_event = true;
      EXPECT_FALSE(json::parse(ev.substr(19), nullptr, false).is_discarded()) << ev;
      EXPECT_EQ(pos, r.body.size()) << "events after the error event";
    }
  }
  EXPECT_TRUE(error_event) << r.body;
  EXPECT_GE(events, 2);
}

TEST_F(HardeningTest, ABackendDyingMidEventLeavesTheClientOnlyWholeEvents) {
  start({.stream = true, .events = 4, .cut_after_bytes = 150}, "", "",
        false);  // inside the second event
  expectWholeEvents(chat(R"({"model":"echo-a","stream":true,"max_tokens":4,"messages":[]})"));
}

TEST_F(HardeningTest, ABackendDyingMidEventLeavesAGovernedClientOnlyWholeEvents) {
  start({.stream = true, .events = 4, .cut_after_bytes = 150});
  expectWholeEvents(chat(
      R"({"model":"echo-a","stream":true,"stream_options":{"include_usage":true},"messages":[]})"));
  expectWholeEvents(chat(R"({"model":"echo-a","stream":true,"messages":[]})"));
}

// Framing and identity checks around a request.
TEST_F(HardeningTest, AnHttp11RequestWithoutHostIs400) {
  start();
  const std::string body = R"({"model":"echo-a","max_tokens":1,"messages":[]})";
  const std::string raw =
      exchange("POST /v1/chat/completions HTTP/1.1\r\nauthorization: Bearer " + key_ +
               "\r\ncontent-length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(statusOf(raw), 400) << raw;
  EXPECT_EQ(backend_->count(), 0u);
}

// A model name was answered 404 to a caller without a key (401 only for names that exist), so a
// stranger could list the models; and /v1/models listed every model to every key.
TEST_F(HardeningTest, CallersAreAuthenticatedBeforeModelsAreLookedUp) {
  start();
  const std::string body = R"({"inputs":[]})";
  for (const char* path : {"/v2/models/kecho-a/infer", "/v2/models/no-such-model/infer"}) {
    auto r = testing::httpRequest(gw_->port(), "POST", path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
  }
  auto chat_r = testing::httpRequest(gw_->port(), "POST", "/v1/chat/completions",
                                     R"({"model":"no-such-model","messages":[]})");
  ASSERT_TRUE(chat_r);
  EXPECT_EQ(chat_r->status, 401);
  auto models = testing::httpRequest(gw_->port(), "GET", "/v1/models", "",
                                     {{"authorization", "Bearer " + key_}});
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  const json m = json::parse(models->body);
  std::vector<std::string> ids;
  for (const auto& d : m["data"]) ids.push_back(d["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"echo-a", "kecho-a"}));
}

// A keep-alive connection's second request head is held to the header timeout, not the idle one.
TEST_F(HardeningTest, EveryRequestHeadOnAKeepAliveConnectionHasTheHeaderTimeout) {
  start({}, "header_timeout_ms: 300\nidle_timeout_ms: 30000\n");
  TestClient c(gw_->port(), std::chrono::seconds(5));
  const auto first = c.request("POST", "/v1/chat/completions",
                               R"({"model":"echo-a","max_tokens":1,"messages":[]})",
                               {{"authorization", "Bearer " + key_}});
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200);
  // Half a head, then nothing: closed after ~300 ms, not 30 s.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(c.sendRaw("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"));
  c.readAll();
  EXPECT_TRUE(c.eof());
  // Timed from this head's first byte (not from the connection's start or the last answer).
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::seconds(3));
}

// Connections beyond max_connections are closed at accept and counted; the ones open keep working.
TEST_F(HardeningTest, ConnectionsBeyondTheLimitAreClosedAndCounted) {
  start({}, "max_connections: 3\n");
  std::vector<std::unique_ptr<TestClient>> open;
  for (int i = 0; i < 3; ++i) {
    open.push_back(std::make_unique<TestClient>(gw_->port()));
    ASSERT_TRUE(open.back()->connected());
  }
  ASSERT_TRUE(waitFor([&] { return gw_->metricSum("infera_net_connections_open") == 3; }));
  TestClient extra(gw_->port(), std::chrono::milliseconds(2000));
  extra.readAll();
  EXPECT_TRUE(extra.eof());
  EXPECT_TRUE(
      waitFor([&] { return gw_->metricSum("infera_net_connections_rejected_total") == 1; }));
  const auto r = open[0]->request("POST", "/v1/chat/completions",
                                  R"({"model":"echo-a","max_tokens":1,"messages":[]})",
                                  {{"authorization", "Bearer " + key_}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// Request bodies held at once are bounded server-wide: beyond it a request is answered 503 before
// its body is read (and one that fits goes through).
TEST_F(HardeningTest, BodyBytesInFlightAreBoundedServerWide) {
  start({}, "max_body_bytes_in_flight: 4096\n");
  TestClient holder(gw_->port(), std::chrono::milliseconds(2000));
  // A declared 4000-byte body, of which only the start arrives: its 4000 bytes are held.
  ASSERT_TRUE(
      holder.sendRaw("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " +
                     key_ + "\r\ncontent-length: 4000\r\n\r\n{\"model\":"));
  ASSERT_TRUE(waitFor([&] { return gw_->metricSum("infera_net_body_bytes_in_flight") == 4000; }));
  const std::string body =
      R"({"model":"echo-a","max_tokens":1,"messages":[],"pad":")" + std::string(200, 'x') + "\"}";
  const std::string raw = exchange(frame(
      "POST /v1/chat/completions HTTP/1.1",
      {"content-type: application/json", "content-length: " + std::to_string(body.size())}, body));
  EXPECT_EQ(statusOf(raw), 503) << raw;
  EXPECT_EQ(gw_->metricSum("infera_net_busy_rejections_total"), 1);
  holder.close();
  ASSERT_TRUE(waitFor([&] { return gw_->metricSum("infera_net_body_bytes_in_flight") == 0; }));
  EXPECT_EQ(chat(body).status, 200);
}

// The embedded store's files are the operator's only.
TEST_F(HardeningTest, TheSqliteStoreIsCreatedReadableByItsOwnerOnly) {
  start();
  struct stat st {};
  ASSERT_EQ(::stat(db_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace infera::gateway
