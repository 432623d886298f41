// OpenAI Responses <-> chat completions translation (gateway/internal/responses.h), table-driven:
// requests, refusals naming the field, answers (text, function calls, incomplete), and streams
// event by event.

#include "gateway/internal/responses.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/json.h"

namespace infera::gateway::responses {
namespace {

using json = nlohmann::json;

TEST(ResponsesRequest, TranslatesToChatCompletions) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model":"m","input":"hi"})",
       R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"},
      {R"({"model":"m","instructions":"be brief","input":[{"role":"developer","content":"d"},
          {"role":"user","content":[{"type":"input_text","text":"look"},
          {"type":"input_image","image_url":"https://x/y.png","detail":"low"}]}],
          "max_output_tokens":9,"temperature":0.2,"top_p":0.5,"user":"u","store":false,
          "metadata":{"k":"v"},"truncation":"disabled","include":[]})",
       R"({"model":"m","messages":[{"role":"system","content":"be brief"},
          {"role":"system","content":"d"},{"role":"user","content":[{"type":"text","text":"look"},
          {"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}}]}],
          "max_tokens":9,"temperature":0.2,"top_p":0.5,"user":"u"})"},
      {R"({"model":"m","input":[{"role":"user","content":"weather?"},
          {"type":"function_call","call_id":"c1","name":"w","arguments":"{\"city\":\"Paris\"}"},
          {"type":"function_call","call_id":"c2","name":"w","arguments":"{}"},
          {"type":"function_call_output","call_id":"c1","output":"18C"},
          {"type":"function_call_output","call_id":"c2","output":"?"},
          {"type":"message","role":"assistant","content":[{"type":"output_text","text":"18C"}]}],
          "tools":[{"type":"function","name":"w","description":"Weather","parameters":
          {"type":"object"},"strict":true}],"tool_choice":{"type":"function","name":"w"},
          "parallel_tool_calls":false,"stream":true,
          "text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true}}})",
       R"({"model":"m","messages":[{"role":"user","content":"weather?"},
          {"role":"assistant","content":null,"tool_calls":[
          {"id":"c1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},
          {"id":"c2","type":"function","function":{"name":"w","arguments":"{}"}}]},
          {"role":"tool","tool_call_id":"c1","content":"18C"},
          {"role":"tool","tool_call_id":"c2","content":"?"},
          {"role":"assistant","content":"18C"}],
          "tools":[{"type":"function","function":{"name":"w","description":"Weather",
          "parameters":{"type":"object"},"strict":true}}],
          "tool_choice":{"type":"function","function":{"name":"w"}},"parallel_tool_calls":false,
          "response_format":{"type":"json_schema","json_schema":{"name":"out",
          "schema":{"type":"object"},"strict":true}},"stream":true,
          "stream_options":{"include_usage":true}})"},
  };
  for (const auto& [in, want] : cases) {
    auto out = requestToChat(*readJson(in));
    ASSERT_TRUE(out.ok()) << in << ": " << out.status().message();
    EXPECT_EQ(json::parse(*out), json::parse(want)) << in;
    EXPECT_TRUE(out->starts_with(R"({"model":"m",)")) << *out;
  }
}

TEST(ResponsesRequest, RefusesWhatChatCannotCarryNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model":"m","input":"x","previous_response_id":"resp_1"})",
       "previous_response_id: responses are not stored"},
      {R"({"model":"m","input":"x","reasoning":{"effort":"high"}})", "reasoning:"},
      {R"({"model":"m","input":"x","tools":[{"type":"web_search_preview"}]})",
       "tools[0].type: 'web_search_preview' tools are not available"},
      {R"({"model":"m","input":"x","colour":1})", "colour: is not supported"},
      {R"({"model":"m"})", "input: is required"},
      {R"({"model":"m","input":[{"type":"reasoning","summary":[]}]})",
       "input[0].type: 'reasoning' items"},
      {R"({"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]})",
       "input[0].content[0].type: 'input_file' parts"},
      {R"({"model":"m","input":[{"role":"tool","content":"x"}]})", "input[0].role"},
      {R"({"model":"m","input":[{"role":7,"content":"x"}]})", "input[0].role"},
      {R"({"model":"m","input":"x","tool_choice":"sometimes"})", "tool_choice: must be"},
      {R"({"model":"m","input":"x","max_output_tokens":0})", "max_output_tokens"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"xml"}}})", "text.format.type"},
  };
  for (const auto& [body, want] : cases) {
    auto out = requestToChat(*readJson(body));
    ASSERT_FALSE(out.ok()) << body << " -> " << *out;
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(want), std::string::npos)
        << body << " -> " << out.status().message();
  }
}

TEST(ResponsesAnswer, TranslatesChatCompletions) {
  const json request = json::parse(R"({"model":"m","input":"hi","instructions":"be brief",
      "tools":[{"type":"function","name":"w","parameters":{}}]})");
  auto out = answerFromChat(
      R"({"choices":[{"message":{"content":"Hello","tool_calls":[{"id":"call_1","type":"function",
          "function":{"name":"w","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],
          "usage":{"prompt_tokens":10,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}})",
      request, "resp_r1", 1700000000);
  ASSERT_TRUE(out.ok()) << out.status().message();
  const json r = json::parse(*out);
  EXPECT_EQ(r["id"], "resp_r1");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "m");
  EXPECT_EQ(r["instructions"], "be brief");
  EXPECT_EQ(r["store"], false);
  ASSERT_EQ(r["output"].size(), 2u);
  EXPECT_EQ(r["output"][0], json::parse(R"({"type":"message","id":"msg_r1","status":"completed",
      "role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]})"));
  EXPECT_EQ(r["output"][1], json::parse(R"({"type":"function_call","id":"fc_r1_0",
      "call_id":"call_1","name":"w","arguments":"{\"a\":1}","status":"completed"})"));
  EXPECT_EQ(r["usage"], json::parse(R"({"input_tokens":10,"input_tokens_details":
      {"cached_tokens":2},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":0},
      "total_tokens":14})"));
  auto cut =
      answerFromChat(R"({"choices":[{"message":{"content":"abc"},"finish_reason":"length"}]})",
                     request, "resp_r2", 1);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(json::parse(*cut)["status"], "incomplete");
  EXPECT_EQ(json::parse(*cut)["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_FALSE(answerFromChat("nope", request, "resp_r3", 1).ok());
}

std::vector<json> eventsOf(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string ev = sse.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = ev.find('\n');
    json data = json::parse(ev.substr(nl + 7));
    EXPECT_EQ("event: " + data["type"].get<std::string>(), ev.substr(0, nl)) << ev;
    out.push_back(std::move(data));
  }
  return out;
}

TEST(ResponsesStream, TextThenAFunctionCallThenCompletedWithUsage) {
  std::string chat;
  for (
      const char* c :
      {R"({"choices":[{"delta":{"role":"assistant","content":""}}]})",
       R"({"choices":[{"delta":{"content":"Let me "}}]})",
       R"({"choices":[{"delta":{"content":"check."}}]})",
       R"({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"w","arguments":""}}]}}]})",
       R"({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]})",
       R"({"choices":[{"delta":{},"finish_reason":"tool_calls"}]})",
       R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9}})"}) {
    chat += std::string("data: ") + c + "\n\n";
  }
  chat += "data: [DONE]\n\n";
  StreamTranslator t(json::parse(R"({"model":"m","input":"x"})"), "resp_s1", 5);
  std::string out;
  translateEvents(t, chat, out);
  t.finish(out);
  const auto events = eventsOf(out);
  std::vector<std::string> types;
  for (const auto& e : events) types.push_back(e["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta",
                       "response.output_text.delta", "response.output_text.done",
                       "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta",
                       "response.function_call_arguments.done", "response.output_item.done",
                       "response.completed"}));
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i]["sequence_number"], i);
  const json& done = events.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["usage"]["input_tokens"], 12);
  EXPECT_EQ(done["usage"]["output_tokens"], 9);
  ASSERT_EQ(done["output"].size(), 2u);
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Let me check.");
  EXPECT_EQ(done["output"][1]["call_id"], "call_a");
  EXPECT_EQ(done["output"][1]["arguments"], "{}");
  // A backend's error chunk is an error event, not a completed response.
  StreamTranslator f(json::parse(R"({"model":"m","input":"x"})"), "resp_s2", 5);
  std::string err;
  translateEvents(f, "data: {\"error\":{\"message\":\"engine died\"}}\n\n", err);
  f.finish(err);
  const auto failed = eventsOf(err);
  ASSERT_FALSE(failed.empty());
  EXPECT_EQ(failed.back()["type"], "error");
  EXPECT_EQ(failed.back()["message"], "engine died");
}

}  // namespace
}  // namespace infera::gateway::responses
