// Anthropic Messages <-> chat completions translation (gateway/internal/anthropic.h), table-driven:
// requests (what maps to what, what is refused and where), answers, stop reasons and usage,
// errors, and streams event by event.

#include "gateway/internal/anthropic.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/json.h"

namespace infera::gateway::anthropic {
namespace {

using json = nlohmann::json;

json chatOf(const std::string& messages_request) {
  auto in = readJson(messages_request);
  EXPECT_TRUE(in.ok()) << messages_request;
  auto out = requestToChat(*in);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? json::parse(*out) : json();
}

struct RequestCase {
  const char* name;
  const char* messages;  // a Messages request
  const char* chat;      // the chat completions body it becomes
};

TEST(AnthropicRequest, TranslatesToChatCompletions) {
  const RequestCase cases[] = {
      {"plain text", R"({"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]})",
       R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16})"},
      {"system string, sampling, stops, user id",
       R"({"model":"m","max_tokens":8,"system":"be brief","temperature":0.5,"top_p":0.9,"top_k":40,
           "stop_sequences":["END"],"metadata":{"user_id":"u1"},
           "messages":[{"role":"user","content":"hi"}]})",
       R"({"model":"m","messages":[{"role":"system","content":"be brief"},
           {"role":"user","content":"hi"}],"max_tokens":8,"stop":["END"],"temperature":0.5,
           "top_p":0.9,"top_k":40,"user":"u1"})"},
      {"system blocks (cache_control ignored), content blocks and an image",
       R"({"model":"m","max_tokens":8,"system":[{"type":"text","text":"a",
           "cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}],
           "messages":[{"role":"user","content":[{"type":"text","text":"look"},
           {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},
           {"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]})",
       R"({"model":"m","messages":[{"role":"system","content":"a\nb"},
           {"role":"user","content":[{"type":"text","text":"look"},
           {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},
           {"type":"image_url","image_url":{"url":"https://x/y.png"}}]}],"max_tokens":8})"},
      {"a tool round trip: tools, choice, the call and its result",
       R"({"model":"m","max_tokens":64,
           "tools":[{"name":"get_weather","description":"Weather now",
             "input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
           "tool_choice":{"type":"any","disable_parallel_tool_use":true},
           "messages":[{"role":"user","content":"Weather in Paris?"},
             {"role":"assistant","content":[{"type":"text","text":"Checking."},
               {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
             {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1",
               "content":"18C"},{"type":"text","text":"And tomorrow?"}]}]})",
       R"({"model":"m","messages":[{"role":"user","content":"Weather in Paris?"},
           {"role":"assistant","content":"Checking.","tool_calls":[{"id":"toolu_1",
             "type":"function","function":{"name":"get_weather",
             "arguments":"{\"city\":\"Paris\"}"}}]},
           {"role":"tool","tool_call_id":"toolu_1","content":"18C"},
           {"role":"user","content":[{"type":"text","text":"And tomorrow?"}]}],
           "max_tokens":64,"tools":[{"type":"function","function":{"name":"get_weather",
             "description":"Weather now","parameters":{"type":"object",
             "properties":{"city":{"type":"string"}}}}}],
           "tool_choice":"required","parallel_tool_calls":false})"},
      {"a tool result in blocks, marked as an error; a named tool choice",
       R"({"model":"m","max_tokens":4,"tool_choice":{"type":"tool","name":"f"},
           "tools":[{"name":"f","input_schema":{"type":"object"}}],
           "messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f",
             "input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",
             "is_error":true,"content":[{"type":"text","text":"boom"}]}]}]})",
       R"({"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"t",
           "type":"function","function":{"name":"f","arguments":"{}"}}]},
           {"role":"tool","tool_call_id":"t","content":"Error: boom"}],"max_tokens":4,
           "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
           "tool_choice":{"type":"function","function":{"name":"f"}}})"},
      {"a last assistant turn is a prefill the answer continues",
       R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"JSON please"},
           {"role":"assistant","content":"{"}]})",
       R"({"model":"m","messages":[{"role":"user","content":"JSON please"},
           {"role":"assistant","content":"{"}],"add_generation_prompt":false,
           "continue_final_message":true,"max_tokens":4})"},
      {"a stream asks for usage; thinking disabled is accepted",
       R"({"model":"m","max_tokens":4,"stream":true,"thinking":{"type":"disabled"},
           "messages":[{"role":"user","content":"hi"}]})",
       R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true,
           "stream_options":{"include_usage":true}})"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(chatOf(c.messages), json::parse(c.chat)) << c.name;
  }
  // The model comes first (the gateway finds it in the body it routes).
  auto out = requestToChat(*readJson(cases[1].messages));
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->starts_with(R"({"model":"m",)")) << *out;
}

TEST(AnthropicRequest, RefusesWhatChatCannotCarryNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"([1])", "must be a JSON object"},
      {R"({"max_tokens":4,"messages":[{"role":"user","content":"x"}]})", "model: must be a string"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}]})",
       "max_tokens: must be a positive"},
      {R"({"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]})", "max_tokens"},
      {R"({"model":"m","max_tokens":4,"messages":[]})", "messages: must be a non-empty array"},
      {R"({"model":"m","max_tokens":4,"messages":[{"role":"system","content":"x"}]})",
       "messages[0].role: must be user or assistant"},
      {R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}],"colour":1})",
       "colour: is not supported"},
      {R"({"model":"m","max_tokens":4,"thinking":{"type":"enabled","budget_tokens":1024},
          "messages":[{"role":"user","content":"x"}]})",
       "thinking: extended thinking is not available"},
      {R"({"model":"m","max_tokens":4,"tools":[{"type":"web_search_20250305","name":"w"}],
          "messages":[{"role":"user","content":"x"}]})",
       "tools[0].type: server tool 'web_search_20250305'"},
      {R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":[
          {"type":"document","source":{"type":"text","data":"x"}}]}]})",
       "messages[0].content[0].type: 'document' blocks cannot be passed"},
      {R"({"model":"m","max_tokens":4,"messages":[{"role":"assistant","content":[
          {"type":"thinking","thinking":"x","signature":"s"}]}]})",
       "messages[0].content[0]: thinking blocks cannot be passed"},
      {R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":[
          {"type":"tool_use","id":"a","name":"f","input":{}}]}]})",
       "tool_use blocks belong to assistant messages"},
      {R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":[
          {"type":"tool_result","tool_use_id":"a","content":[{"type":"image","source":{}}]}]}]})",
       "a tool result can carry only text blocks"},
      {R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":[
          {"type":"text","text":"x","citations":[{"type":"char_location"}]}]}]})",
       "citations cannot be passed"},
      {R"({"model":"m","max_tokens":4,"tool_choice":{"type":"sometimes"},
          "messages":[{"role":"user","content":"x"}]})",
       "tool_choice.type: must be auto, any, tool or none"},
      {R"({"model":"m","max_tokens":4,"stream":"yes","messages":[{"role":"user","content":"x"}]})",
       "stream: must be a boolean"},
      // Fields of the wrong type read as missing (never an exception, which would be a 500).
      {R"({"model":"m","max_tokens":4,"messages":[{"role":1,"content":"x"}]})",
       "messages[0].role: must be user or assistant"},
      {R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":[{"type":7}]}]})",
       "messages[0].content[0].type: '' blocks cannot be passed"},
      {R"({"model":"m","max_tokens":4,"tools":[{"type":5,"name":"f","input_schema":{}}],
          "messages":[{"role":"user","content":"x"}]})",
       "tools[0].type"},
      {R"({"model":"m","max_tokens":4,"tool_choice":{"type":[]},
          "messages":[{"role":"user","content":"x"}]})",
       "tool_choice.type"},
  };
  for (const auto& [body, want] : cases) {
    auto in = readJson(body);
    ASSERT_TRUE(in.ok()) << body;
    auto out = requestToChat(*in);
    ASSERT_FALSE(out.ok()) << body << " -> " << *out;
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(want), std::string::npos)
        << body << " -> " << out.status().message();
  }
  // count_tokens needs no max_tokens.
  auto count =
      requestToChat(*readJson(R"({"model":"m","messages":[{"role":"user","content":"x"}]})"),
                    /*count_only=*/true);
  EXPECT_TRUE(count.ok()) << count.status().message();
}

struct AnswerCase {
  const char* name;
  const char* chat;
  const char* message;
};

TEST(AnthropicAnswer, TranslatesChatCompletions) {
  const AnswerCase cases[] = {
      {"text, end_turn, usage with cached tokens",
       R"({"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",
           "content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,
           "completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":4}}})",
       R"({"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
           "content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn",
           "stop_sequence":null,"usage":{"input_tokens":6,"cache_creation_input_tokens":0,
           "cache_read_input_tokens":4,"output_tokens":3}})"},
      {"a stop sequence vLLM names; max tokens",
       R"({"choices":[{"message":{"content":"a"},"finish_reason":"stop","stop_reason":"END"}],
           "usage":{"prompt_tokens":1,"completion_tokens":1}})",
       R"({"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
           "content":[{"type":"text","text":"a"}],"stop_reason":"stop_sequence",
           "stop_sequence":"END","usage":{"input_tokens":1,"cache_creation_input_tokens":0,
           "cache_read_input_tokens":0,"output_tokens":1}})"},
      {"tool calls (and arguments a model got wrong kept)",
       R"({"choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function",
           "function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"call_2","type":"function",
           "function":{"name":"g","arguments":"{oops"}}]},"finish_reason":"tool_calls"}],
           "usage":{"prompt_tokens":5,"completion_tokens":7}})",
       R"({"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
           "content":[{"type":"tool_use","id":"call_1","name":"f","input":{"a":1}},
           {"type":"tool_use","id":"call_2","name":"g","input":{"arguments":"{oops"}}],
           "stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":5,
           "cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":7}})"},
      {"reasoning is not passed on; a tool call with a null id and arguments as an object",
       R"({"choices":[{"message":{"content":"a","reasoning_content":"hmm","tool_calls":[{"id":null,
           "type":"function","function":{"name":"f","arguments":{"a":1}}}]},
           "finish_reason":"tool_calls"}]})",
       R"({"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
           "content":[{"type":"text","text":"a"},{"type":"tool_use","id":"","name":"f",
           "input":{"a":1}}],"stop_reason":"tool_use","stop_sequence":null,
           "usage":{"input_tokens":0,"cache_creation_input_tokens":0,
           "cache_read_input_tokens":0,"output_tokens":0}})"},
      {"length", R"({"choices":[{"message":{"content":"abc"},"finish_reason":"length"}]})",
       R"({"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
           "content":[{"type":"text","text":"abc"}],"stop_reason":"max_tokens",
           "stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,
           "cache_read_input_tokens":0,"output_tokens":0}})"},
  };
  for (const auto& c : cases) {
    auto out = answerFromChat(c.chat, "msg_1", "claude-x");
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status().message();
    EXPECT_EQ(json::parse(*out), json::parse(c.message)) << c.name;
  }
  EXPECT_FALSE(answerFromChat("not json", "msg_1", "m").ok());
  EXPECT_FALSE(answerFromChat(R"({"data":[]})", "msg_1", "m").ok());
}

TEST(AnthropicErrors, TakeAnthropicsShapeAndTypes) {
  EXPECT_EQ(json::parse(errorJson(429, "slow down")),
            json::parse(R"({"type":"error","error":{"type":"rate_limit_error",
                "message":"slow down"}})"));
  const std::pair<int, const char*> types[] = {
      {400, "invalid_request_error"},
      {401, "authentication_error"},
      {403, "permission_error"},
      {404, "not_found_error"},
      {413, "request_too_large"},
      {429, "rate_limit_error"},
      {500, "api_error"},
      {502, "api_error"},
      {503, "overloaded_error"},
      {529, "overloaded_error"},
  };
  for (const auto& [status, type] : types) EXPECT_EQ(errorType(status), type) << status;
  EXPECT_EQ(json::parse(errorFromChat(400, R"({"error":{"message":"bad","type":"x"}})")),
            json::parse(R"({"type":"error","error":{"type":"invalid_request_error",
                "message":"bad"}})"));
  EXPECT_EQ(json::parse(errorFromChat(400, R"({"object":"error","message":"too long"})")),
            json::parse(R"({"type":"error","error":{"type":"invalid_request_error",
                "message":"too long"}})"));
  EXPECT_EQ(json::parse(errorFromChat(500, "<html>")),
            json::parse(R"({"type":"error","error":{"type":"api_error",
                "message":"the model's backend answered 500"}})"));
}

// The events of a translated stream, as (event name, data JSON).
std::vector<std::pair<std::string, json>> eventsOf(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event: " << sse.substr(pos);
    if (end == std::string::npos) break;
    const std::string ev = sse.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = ev.find('\n');
    EXPECT_TRUE(ev.starts_with("event: ") && nl != std::string::npos) << ev;
    const std::string name = ev.substr(7, nl - 7);
    EXPECT_TRUE(ev.substr(nl + 1).starts_with("data: ")) << ev;
    json data = json::parse(ev.substr(nl + 7));
    EXPECT_EQ(data.value("type", ""), name) << ev;
    out.emplace_back(name, std::move(data));
  }
  return out;
}

// A chat SSE stream of `chunks` (each on one data line, as engines send them).
std::string chatStream(const std::vector<std::string>& chunks) {
  std::string s;
  for (const auto& c : chunks) s += "data: " + json::parse(c).dump() + "\n\n";
  return s + "data: [DONE]\n\n";
}

TEST(AnthropicStream, TextThenToolCallsThenUsageEventByEvent) {
  const std::string chat = chatStream({
      R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})",
      R"({"choices":[{"index":0,"delta":{"content":"Let me "}}]})",
      R"({"choices":[{"index":0,"delta":{"content":"check."}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function",
          "function":{"name":"get_weather","arguments":""}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\""}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":\"Paris\"}"}}]}}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})",
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}})",
  });
  StreamTranslator t("msg_1", "claude-x");
  std::string out;
  translateEvents(t, chat, out);
  t.finish(out);
  const auto events = eventsOf(out);
  std::vector<std::string> names;
  for (const auto& [name, data] : events) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "message_start", "content_block_start", "content_block_delta",
                       "content_block_delta", "content_block_stop", "content_block_start",
                       "content_block_delta", "content_block_delta", "content_block_stop",
                       "message_delta", "message_stop"}));
  ASSERT_EQ(events.size(), 11u);
  EXPECT_EQ(events[0].second["message"]["id"], "msg_1");
  EXPECT_EQ(events[0].second["message"]["model"], "claude-x");
  EXPECT_EQ(events[1].second["content_block"], json::parse(R"({"type":"text","text":""})"));
  EXPECT_EQ(events[2].second["delta"], json::parse(R"({"type":"text_delta","text":"Let me "})"));
  EXPECT_EQ(events[5].second["index"], 1);
  EXPECT_EQ(events[5].second["content_block"],
            json::parse(R"({"type":"tool_use","id":"call_a","name":"get_weather","input":{}})"));
  EXPECT_EQ(events[6].second["delta"],
            json::parse(R"({"type":"input_json_delta","partial_json":"{\"city\""})"));
  EXPECT_EQ(events[9].second["delta"],
            json::parse(R"({"stop_reason":"tool_use","stop_sequence":null})"));
  EXPECT_EQ(events[9].second["usage"]["input_tokens"], 12);
  EXPECT_EQ(events[9].second["usage"]["output_tokens"], 9);
  // Cut anywhere, the same events (the proxy hands whole events; a tail is flushed at the end).
  for (size_t cut = 1; cut < chat.size(); cut += 7) {
    StreamTranslator u("msg_1", "claude-x");
    std::string a;
    const size_t boundary = chat.rfind("\n\n", cut);
    const size_t split = boundary == std::string::npos ? 0 : boundary + 2;
    translateEvents(u, chat.substr(0, split), a);
    translateEvents(u, chat.substr(split), a);
    u.finish(a);
    EXPECT_EQ(a, out) << "cut at " << split;
  }
}

// A backend's error chunk mid-stream (vLLM's {"error":...}) ends the stream with an error event,
// not a clean end_turn; per-chunk usage gives message_start its input tokens.
TEST(AnthropicStream, AnErrorChunkIsAnErrorAndPerChunkUsageFillsMessageStart) {
  StreamTranslator t("msg_4", "m");
  std::string out;
  translateEvents(t,
                  chatStream({R"({"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":7,
                      "completion_tokens":1}})",
                              R"({"error":{"message":"engine died","code":503}})"}),
                  out);
  t.finish(out);  // nothing more once failed
  const auto events = eventsOf(out);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[0].second["message"]["usage"]["input_tokens"], 7);
  EXPECT_EQ(events.back().first, "error");
  EXPECT_EQ(events.back().second["error"]["type"], "overloaded_error");
  EXPECT_EQ(events.back().second["error"]["message"], "engine died");
  for (const auto& [name, data] : events) EXPECT_NE(name, "message_stop");
  EXPECT_EQ(events[events.size() - 2].first, "content_block_stop");  // the open block closed
}

TEST(AnthropicStream, AnEmptyStreamStillStartsAndEndsAMessage) {
  StreamTranslator t("msg_2", "m");
  std::string out;
  t.finish(out);
  t.finish(out);  // once
  const auto events = eventsOf(out);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].first, "message_start");
  EXPECT_EQ(events[1].second["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(events[2].first, "message_stop");
  StreamTranslator f("msg_3", "m");
  std::string err;
  f.onData(R"({"choices":[{"delta":{"content":"x"}}]})", err);
  f.fail(502, "upstream connection lost mid-stream", err);
  const auto failed = eventsOf(err);
  EXPECT_EQ(failed.back().first, "error");
  EXPECT_EQ(failed.back().second["error"]["type"], "api_error");
  EXPECT_TRUE(f.finished());
}

}  // namespace
}  // namespace infera::gateway::anthropic
