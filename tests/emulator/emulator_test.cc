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

// Engine mode: the HTTP surface over one engine model, as a router reads a vLLM engine.
class EngineModeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EmulatorConfig cfg;
    cfg.port = 0;
    cfg.models = {"m1"};
    cfg.engine.enabled = true;
    cfg.engine.num_gpu_blocks = 512;
    cfg.engine.max_model_len = 4096;
    cfg.engine.lora_adapters = {"sql-lora"};
    auto emu = Emulator::start(cfg);
    ASSERT_TRUE(emu.ok()) << emu.status().message();
    emu_ = std::move(*emu);
  }
  std::string metrics() {
    const auto r = httpRequest(emu_->port(), "GET", "/metrics");
    EXPECT_TRUE(r && r->status == 200);
    return r ? r->body : "";
  }
  // The value of one series, by its exact name and labels; -1 when absent.
  double series(const std::string& name_and_labels) {
    const std::string text = metrics();
    const auto at = text.find("\n" + name_and_labels + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + name_and_labels.size() + 2));
  }
  std::unique_ptr<Emulator> emu_;
};

std::string words(int n, const std::string& stem) {
  std::string out;
  for (int i = 0; i < n; ++i) out += stem + std::to_string(i) + " ";
  return out;
}

TEST_F(EngineModeTest, ARepeatedSystemPromptHitsTheCacheAndVllmsMetricsShowIt) {
  const std::string system = words(600, "s");
  auto ask = [&](const std::string& question) {
    return httpRequest(emu_->port(), "POST", "/v1/chat/completions",
                       R"({"model":"m1","max_tokens":4,"messages":[{"role":"system","content":")" +
                           system + R"("},{"role":"user","content":")" + question + R"("}]})");
  };
  const auto a = ask("what is one");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200) << a->body;
  // 603 tokens for the system message (600 words, role and framing), 6 for the question.
  EXPECT_NE(a->body.find(R"("prompt_tokens":609,)"), std::string::npos) << a->body;
  EXPECT_NE(a->body.find(R"("content":"The quick brown fox")"), std::string::npos) << a->body;
  EXPECT_EQ(series(R"(vllm:prefix_cache_hits_total{engine="0",model_name="m1"})"), 0);
  const auto b = ask("what is two");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 200);
  // Shared: the system message and the next message's start and role, 605 tokens: 37 whole
  // blocks of 16 are hits.
  EXPECT_EQ(series(R"(vllm:prefix_cache_hits_total{engine="0",model_name="m1"})"), 37 * 16);
  EXPECT_EQ(series(R"(vllm:prefix_cache_queries_total{engine="0",model_name="m1"})"), 2 * 609);
  EXPECT_EQ(series(R"(vllm:time_to_first_token_seconds_count{engine="0",model_name="m1"})"), 2);
  EXPECT_EQ(series(R"(vllm:inter_token_latency_seconds_count{engine="0",model_name="m1"})"), 6);
  EXPECT_EQ(
      series(R"(vllm:request_success_total{engine="0",finished_reason="length",model_name="m1"})"),
      2);
  EXPECT_EQ(series(R"(vllm:generation_tokens_total{engine="0",model_name="m1"})"), 8);
  EXPECT_EQ(series(R"(vllm:num_requests_running{engine="0",model_name="m1"})"), 0);
  EXPECT_EQ(series(R"(vllm:kv_cache_usage_perc{engine="0",model_name="m1"})"), 0);
  const std::string text = metrics();
  EXPECT_NE(text.find("# TYPE vllm:num_preemptions_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE vllm:e2e_request_latency_seconds histogram\n"), std::string::npos);
  EXPECT_NE(
      text.find(
          R"(vllm:lora_requests_info{max_lora="1",waiting_lora_adapters="",running_lora_adapters=""} )"),
      std::string::npos)
      << text;
}

TEST_F(EngineModeTest, StreamsOneChunkPerEngineTokenAndAnAdapterIsAModel) {
  const auto r = httpRequest(
      emu_->port(), "POST", "/v1/chat/completions",
      R"({"model":"sql-lora","stream":true,"max_tokens":3,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi there"}]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  net::SseReader reader;
  std::vector<std::string> events;
  ASSERT_TRUE(reader.feed(r->body, [&](const net::SseEvent& e) { events.push_back(e.data); }));
  ASSERT_EQ(events.size(), 6u) << r->body;  // role, 3 tokens, usage, [DONE]
  EXPECT_NE(events[0].find(R"("role":"assistant")"), std::string::npos);
  EXPECT_NE(events[3].find(R"("finish_reason":"length")"), std::string::npos);
  EXPECT_NE(events[4].find(R"("usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3})"),
            std::string::npos)
      << events[4];
  const auto models = httpRequest(emu_->port(), "GET", "/v1/models");
  ASSERT_TRUE(models);
  EXPECT_NE(models->body.find(R"("id":"sql-lora","object":"model")"), std::string::npos);
  EXPECT_NE(models->body.find(R"("parent":"m1")"), std::string::npos) << models->body;
}

TEST_F(EngineModeTest, AClientThatLeavesIsAbortedInTheEngineAndItsBlocksFreed) {
  TestClient c(emu_->port());
  ASSERT_TRUE(c.send(
      "POST", "/v1/completions",
      R"({"model":"m1","stream":true,"max_tokens":3000,"prompt":")" + words(500, "w") + R"("})"));
  TestResponse head;
  ASSERT_TRUE(c.readHead(head));
  ASSERT_TRUE(c.readPiece());  // the first token
  EXPECT_EQ(series(R"(vllm:num_requests_running{engine="0",model_name="m1"})"), 1);
  EXPECT_GT(series(R"(vllm:kv_cache_usage_perc{engine="0",model_name="m1"})"), 0);
  c.close();
  EXPECT_TRUE(testing::waitFor([&] {
    return series(
               R"(vllm:request_success_total{engine="0",finished_reason="abort",model_name="m1"})") ==
           1;
  }));
  EXPECT_EQ(series(R"(vllm:num_requests_running{engine="0",model_name="m1"})"), 0);
  EXPECT_EQ(series(R"(vllm:kv_cache_usage_perc{engine="0",model_name="m1"})"), 0);
}

TEST_F(EngineModeTest, APromptPastTheContextLengthIsRefusedWithVllmsMessage) {
  const auto r =
      httpRequest(emu_->port(), "POST", "/v1/completions",
                  R"({"model":"m1","max_tokens":100,"prompt":")" + words(4000, "w") + R"("})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("maximum context length is 4096 tokens. However, you requested 4100 "
                         "tokens (4000 in the messages, 100 in the completion)"),
            std::string::npos)
      << r->body;
  EXPECT_EQ(series(R"(vllm:num_requests_waiting{engine="0",model_name="m1"})"), 0);
}

TEST(EmulatorConfigTest, AnEngineRunsOnOneLoop) {
  ConfigErrors errors;
  ConfigReader r(YAML::Load("workers: 2\nengine:\n  num_gpu_blocks: 10\n  max_model_len: 200\n"),
                 &errors);
  EmulatorConfig cfg;
  readEmulatorConfig(r, cfg);
  r.finish();
  const std::string msg = errors.toStatus().message();
  EXPECT_NE(msg.find("workers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be 1 with engine:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("engine.max_model_len (line 4): must fit the KV cache"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace infera::emulator
