#include "emulator/emulator.h"

#include <gtest/gtest.h>

#include "fakes/http_test_client.h"
#include "net/sse.h"

namespace infera::emulator {
namespace {

using testing::httpRequest;
using testing::TestClient;
using testing::TestResponse;

class EmulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EmulatorConfig cfg;
    cfg.port = 0;
    cfg.models = {"m1", "embed"};
    cfg.default_max_tokens = 7;
    auto emu = Emulator::start(cfg);
    ASSERT_TRUE(emu.ok()) << emu.status().message();
    emu_ = std::move(*emu);
  }
  std::unique_ptr<Emulator> emu_;
};

TEST_F(EmulatorTest, ChatCompletionReportsUsageAndMaxTokens) {
  const auto r = httpRequest(
      emu_->port(), "POST", "/v1/chat/completions",
      R"({"model":"m1","max_tokens":5,"messages":[{"role":"user","content":"one two three"}]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find(R"("content":"The quick brown fox jumps")"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find(R"("usage":{"prompt_tokens":6,"total_tokens":11,"completion_tokens":5})"),
            std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find(R"("finish_reason":"length")"), std::string::npos);
}

TEST_F(EmulatorTest, StreamSendsOneChunkPerTokenThenUsageThenDone) {
  TestClient c(emu_->port());
  ASSERT_TRUE(c.send(
      "POST", "/v1/chat/completions",
      R"({"model":"m1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]})"));
  TestResponse head;
  ASSERT_TRUE(c.readHead(head));
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.header("content-type"), "text/event-stream");
  std::string body;
  while (auto p = c.readPiece()) body += *p;
  net::SseReader reader;
  std::vector<std::string> events;
  ASSERT_TRUE(reader.feed(body, [&](const net::SseEvent& e) { events.push_back(e.data); }));
  // role chunk + 7 token chunks + usage chunk + [DONE]
  ASSERT_EQ(events.size(), 10u) << body;
  EXPECT_NE(events[0].find(R"("role":"assistant")"), std::string::npos);
  EXPECT_NE(events[1].find(R"("usage":null)"), std::string::npos);
  EXPECT_NE(
      events[8].find(
          R"("choices":[],"usage":{"prompt_tokens":4,"total_tokens":11,"completion_tokens":7})"),
      std::string::npos)
      << events[8];
  EXPECT_EQ(events[9], "[DONE]");
  EXPECT_TRUE(testing::waitFor([&] { return emu_->stats().completed_streams.load() == 1; }));
}

TEST_F(EmulatorTest, ContinuousUsageStatsCarryCumulativeCounts) {
  const auto r = httpRequest(
      emu_->port(), "POST", "/v1/completions",
      R"({"model":"m1","prompt":"a b","max_tokens":3,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}})");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find(R"("completion_tokens":1})"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find(R"("completion_tokens":2})"), std::string::npos);
  EXPECT_NE(r->body.find(R"("text_completion.chunk")"), std::string::npos);
}

TEST_F(EmulatorTest, InjectedErrorsUseConfiguredStatus) {
  emu_->faults().error_rate = 1.0;
  emu_->faults().error_status = 503;
  const auto r =
      httpRequest(emu_->port(), "POST", "/v1/chat/completions", R"({"model":"m1","messages":[]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("injected_fault"), std::string::npos);
  EXPECT_EQ(emu_->stats().injected_errors.load(), 1u);
}

TEST_F(EmulatorTest, DisconnectFaultCutsTheStreamMidway) {
  emu_->faults().disconnect_rate = 1.0;
  emu_->faults().disconnect_after_tokens = 2;
  TestClient c(emu_->port());
  ASSERT_TRUE(
      c.send("POST", "/v1/chat/completions", R"({"model":"m1","stream":true,"messages":[]})"));
  TestResponse head;
  ASSERT_TRUE(c.readHead(head));
  std::string body;
  while (auto p = c.readPiece()) body += *p;
  EXPECT_TRUE(c.eof());
  EXPECT_EQ(body.find("[DONE]"), std::string::npos);
  EXPECT_NE(body.find(R"("content":" quick")"), std::string::npos) << body;
}

TEST_F(EmulatorTest, EmbeddingsAreDeterministicAndCountTokens) {
  const std::string req = R"({"model":"embed","input":["hello world","hi"]})";
  const auto a = httpRequest(emu_->port(), "POST", "/v1/embeddings", req);
  const auto b = httpRequest(emu_->port(), "POST", "/v1/embeddings", req);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, b->body);
  EXPECT_NE(a->body.find(R"("index":1)"), std::string::npos);
  EXPECT_NE(a->body.find(R"("usage":{"prompt_tokens":3,"total_tokens":3})"), std::string::npos)
      << a->body;
}

TEST_F(EmulatorTest, UnknownModelIs404) {
  const auto r =
      httpRequest(emu_->port(), "POST", "/v1/chat/completions", R"({"model":"zzz","messages":[]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("model_not_found"), std::string::npos);
}

TEST_F(EmulatorTest, KServeInferDoublesNumericInputsAndKeepsShape) {
  const auto r = httpRequest(
      emu_->port(), "POST", "/v2/models/m1/versions/1/infer",
      R"({"id":"r1","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4.5]]}]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(
      r->body,
      R"({"model_name":"m1","model_version":"1","id":"r1","outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[2,2],"data":[2,4,6,9]}]})");
  const auto ready = httpRequest(emu_->port(), "GET", "/v2/models/m1/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(httpRequest(emu_->port(), "GET", "/v2/models/nope/ready")->status, 404);
  EXPECT_EQ(httpRequest(emu_->port(), "GET", "/v2/health/live")->status, 200);
}

TEST_F(EmulatorTest, ModelsListsConfiguredModels) {
  const auto r = httpRequest(emu_->port(), "GET", "/v1/models");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find(R"("id":"m1")"), std::string::npos);
  EXPECT_NE(r->body.find(R"("id":"embed")"), std::string::npos);
}

}  // namespace
}  // namespace infera::emulator
