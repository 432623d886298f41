#pragma once
// OpenAI's Responses API (`POST /v1/responses`) for backends that speak chat completions: the
// request translated to a chat completions body, the answer (whole, or its stream event by event)
// translated back. Pure functions and one state machine, no I/O; docs/gateway.md "OpenAI
// Responses" lists what maps to what and what is refused (never dropped silently). Responses are
// not stored: `previous_response_id` is refused and there is no retrieve/delete.

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace infera::gateway::responses {

// kInvalidArgument naming the field (its JSON path) for what is malformed or cannot be carried.
Result<std::string> requestToChat(const nlohmann::json& request);

// A chat completion (JSON text, status 200) as a Response object. `request`: the Responses
// request (echoed fields: instructions, tools, sampling); `id` "resp_..."; `created_at` unix
// seconds. kInternal when the text is not a chat completion.
Result<std::string> answerFromChat(std::string_view chat, const nlohmann::json& request,
                                   std::string_view id, int64_t created_at);

// Translates a chat completions SSE stream into Responses stream events (response.created,
// response.in_progress, output items with their text deltas or function-call argument deltas,
// response.completed or response.incomplete with usage; `error` when the backend fails).
class StreamTranslator {
 public:
  StreamTranslator(nlohmann::json request, std::string id, int64_t created_at);
  void onData(std::string_view data, std::string& out);  // one chat event's data
  void finish(std::string& out);                         // the upstream ended; once
  void fail(std::string_view message, std::string& out);
  bool finished() const { return finished_; }

 private:
  struct Item;
  void start(std::string& out);
  void emit(std::string& out, std::string_view type, nlohmann::ordered_json data);
  void closeItem(std::string& out);
  nlohmann::ordered_json response(std::string_view status) const;
  nlohmann::json request_;
  std::string id_;
  int64_t created_at_;
  bool started_ = false, finished_ = false;
  int64_t seq_ = 0;
  // The open output item: a message (text) or a function call; done items kept for the final
  // response object.
  int open_ = -1;  // index into items_
  int tool_index_ = -1;
  nlohmann::ordered_json items_ = nlohmann::ordered_json::array();
  std::string text_, args_;
  std::string finish_reason_;
  int64_t input_ = 0, output_ = 0, cached_ = 0;
};

void translateEvents(StreamTranslator& t, std::string_view text, std::string& out);

}  // namespace infera::gateway::responses
