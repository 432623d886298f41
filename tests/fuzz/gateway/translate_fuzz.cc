// Fuzz target: the translations to and from chat completions (gateway/internal/anthropic.h for
// Anthropic's Messages, gateway/internal/responses.h for OpenAI's Responses). The input is used
// three ways: as a request of each API, as a chat completion answer, and as a chat completions SSE
// stream (translated by each API's stream translator).
//
// Properties:
//  - request: whatever the JSON, the translation is a refusal (kInvalidArgument) or a chat body
//    the shared reader reads back, an object whose first member is the request's model, with a
//    non-empty messages array and the request's max_tokens;
//  - answer: a translation is a Messages answer (type "message", a content array, usage with
//    non-negative counts when the chat usage's are);
//  - stream: the translated events do not depend on how the backend's stream is cut into pieces;
//    every event is "event: <type>\ndata: <JSON whose type is <type>>\n\n"; the message starts
//    first and ends with message_delta then message_stop; content blocks open and close in order,
//    their indices counting up from 0;
//  - Responses: the same for its request (a refusal, or a chat body with the model first and
//    non-empty messages) and answer (type "response"); its stream's events are numbered 0, 1, ...
//    in order, start with response.created and end with response.completed or
//    response.incomplete (or error), whatever the pieces.

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/json.h"
#include "fuzz_check.h"
#include "gateway/internal/anthropic.h"
#include "gateway/internal/responses.h"
#include "gateway/internal/usage_scan.h"

namespace {

using infera::fuzz::printable;
namespace anthropic = infera::gateway::anthropic;

void checkRequest(const std::string& input) {
  auto in = infera::readJson(input);
  if (!in.ok()) return;
  auto out = anthropic::requestToChat(*in);
  if (!out.ok()) {
    FUZZ_CHECK(out.status().code() == infera::StatusCode::kInvalidArgument,
               "a refusal that is not kInvalidArgument: " + printable(input));
    return;
  }
  auto chat = infera::readOrderedJson(*out);
  FUZZ_CHECK(chat.ok() && chat->is_object() && !chat->empty(),
             "the chat body does not read back: " + printable(*out));
  FUZZ_CHECK(chat->begin().key() == "model" && (*chat)["model"] == (*in)["model"],
             "the model is not the chat body's first member: " + printable(*out));
  FUZZ_CHECK((*chat)["messages"].is_array() && !(*chat)["messages"].empty(),
             "no messages: " + printable(*out));
  FUZZ_CHECK((*chat)["max_tokens"] == (*in)["max_tokens"],
             "max_tokens changed: " + printable(*out));
}

void checkAnswer(const std::string& input) {
  auto out = anthropic::answerFromChat(input, "msg_f", "m");
  if (!out.ok()) return;
  auto msg = infera::readJson(*out);
  FUZZ_CHECK(msg.ok() && msg->is_object() && (*msg)["type"] == "message" &&
                 (*msg)["content"].is_array() && (*msg)["usage"].is_object(),
             "not a Messages answer: " + printable(*out));
}

// The translation of `input` fed to it in pieces of `piece` bytes (0: whole), as the proxy does:
// the usage scanner cuts whole events, the translator reads them, the tail is flushed at the end.
// `t` is a fresh translator of either API (found by argument-dependent lookup: its namespace's
// translateEvents).
template <typename Translator>
std::string translate(Translator t, const std::string& input, size_t piece) {
  infera::gateway::UsageScan scan;
  std::string out, events;
  const size_t step = piece == 0 ? std::max<size_t>(1, input.size()) : piece;
  for (size_t i = 0; i < input.size(); i += step) {
    events.clear();
    infera::gateway::scanSse(scan, std::string_view(input).substr(i, step), &events);
    translateEvents(t, events, out);
  }
  translateEvents(t, scan.sse_buf, out);
  t.finish(out);
  return out;
}

void checkStream(const std::string& input) {
  const std::string whole = translate(anthropic::StreamTranslator("msg_f", "m"), input, 0);
  FUZZ_CHECK(translate(anthropic::StreamTranslator("msg_f", "m"), input, 5) == whole,
             "the translated stream depends on the pieces: " + printable(input));
  size_t pos = 0;
  int events = 0, next_block = 0, open = -1;
  std::string last, before_last;
  while (pos < whole.size()) {
    const size_t end = whole.find("\n\n", pos);
    FUZZ_CHECK(end != std::string::npos, "an unterminated event: " + printable(whole));
    const std::string ev = whole.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = ev.find('\n');
    FUZZ_CHECK(ev.starts_with("event: ") && nl != std::string::npos &&
                   ev.compare(nl + 1, 6, "data: ") == 0,
               "a malformed event: " + printable(ev));
    const std::string name = ev.substr(7, nl - 7);
    auto data = infera::readJson(ev.substr(nl + 7));
    FUZZ_CHECK(data.ok() && data->is_object() && (*data)["type"] == name,
               "an event's data does not match its name: " + printable(ev));
    if (events++ == 0) FUZZ_CHECK(name == "message_start", "no message_start first");
    if (name == "content_block_start") {
      FUZZ_CHECK(open < 0 && (*data)["index"] == next_block,
                 "a block opened out of order: " + printable(whole));
      open = next_block++;
    } else if (name == "content_block_delta") {
      FUZZ_CHECK(open >= 0 && (*data)["index"] == open, "a delta outside its block");
    } else if (name == "content_block_stop") {
      FUZZ_CHECK(open >= 0 && (*data)["index"] == open, "a block closed that was not open");
      open = -1;
    }
    before_last = last;
    last = name;
  }
  FUZZ_CHECK(open < 0 && before_last == "message_delta" && last == "message_stop",
             "the message does not end with message_delta, message_stop: " + printable(whole));
}

namespace responses = infera::gateway::responses;

void checkResponses(const std::string& input) {
  if (auto in = infera::readJson(input); in.ok()) {
    auto out = responses::requestToChat(*in);
    if (out.ok()) {
      auto chat = infera::readOrderedJson(*out);
      FUZZ_CHECK(chat.ok() && chat->is_object() && chat->begin().key() == "model" &&
                     (*chat)["messages"].is_array() && !(*chat)["messages"].empty(),
                 "a Responses request's chat body is malformed: " + printable(*out));
    } else {
      FUZZ_CHECK(out.status().code() == infera::StatusCode::kInvalidArgument,
                 "a Responses refusal that is not kInvalidArgument: " + printable(input));
    }
  }
  const nlohmann::json request = {{"model", "m"}, {"input", "x"}};
  if (auto a = responses::answerFromChat(input, request, "resp_f", 1); a.ok()) {
    auto r = infera::readJson(*a);
    FUZZ_CHECK(r.ok() && (*r)["object"] == "response" && (*r)["output"].is_array(),
               "not a Response: " + printable(*a));
  }
  auto fresh = [&] { return responses::StreamTranslator(request, "resp_f", 1); };
  const std::string whole = translate(fresh(), input, 0);
  FUZZ_CHECK(translate(fresh(), input, 5) == whole,
             "the Responses stream depends on the pieces: " + printable(input));
  size_t pos = 0;
  int64_t seq = 0;
  std::string first, last;
  while (pos < whole.size()) {
    const size_t end = whole.find("\n\n", pos);
    FUZZ_CHECK(end != std::string::npos, "an unterminated event: " + printable(whole));
    const std::string ev = whole.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = ev.find('\n');
    FUZZ_CHECK(ev.starts_with("event: ") && nl != std::string::npos, "a malformed event");
    auto data = infera::readJson(ev.substr(nl + 7));
    FUZZ_CHECK(
        data.ok() && (*data)["type"] == ev.substr(7, nl - 7) && (*data)["sequence_number"] == seq++,
        "an event out of order or misnamed: " + printable(ev));
    if (first.empty()) first = ev.substr(7, nl - 7);
    last = ev.substr(7, nl - 7);
  }
  FUZZ_CHECK(first == "response.created" &&
                 (last == "response.completed" || last == "response.incomplete" || last == "error"),
             "the Responses stream does not start and end as it must: " + printable(whole));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  checkRequest(input);
  checkAnswer(input);
  checkStream(input);
  checkResponses(input);
  return 0;
}
