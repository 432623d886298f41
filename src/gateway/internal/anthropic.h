#pragma once
// Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`) for backends that
// speak OpenAI chat completions: the request translated to a chat completions body, the answer
// (whole, or its stream event by event) translated back, and errors in Anthropic's shape. Pure
// functions and one small state machine, no I/O: docs/gateway.md "Anthropic Messages" lists what
// maps to what and what is refused (never dropped silently).

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace infera::gateway::anthropic {

// A Messages request as a chat completions body (JSON text): system prompt first, content blocks
// as parts, tool_use/tool_result as tool calls and tool messages, tools and tool_choice,
// stop_sequences, sampling fields, metadata.user_id; a stream asks for usage. kInvalidArgument
// naming the field (its JSON path) when the request is malformed or asks for what chat
// completions cannot carry (server tools, thinking, documents, citations, cache control is
// accepted and ignored: it only steers Anthropic's own cache).
// `count_only` (count_tokens): max_tokens is not required (1 is used).
Result<std::string> requestToChat(const nlohmann::json& request, bool count_only = false);

// A chat completion (JSON text, status 200) as a Messages answer: text and tool_use blocks,
// stop_reason from finish_reason (and vLLM's stop_reason for the matched stop sequence), usage
// (input tokens without the cached ones, which are cache_read_input_tokens). kInternal when the
// text is not a chat completion. `id`: the message's id ("msg_..."), `model`: as the caller named
// it.
Result<std::string> answerFromChat(std::string_view chat, std::string_view id,
                                   std::string_view model);

// Anthropic's error type for an HTTP status (400 invalid_request_error, 401 authentication_error,
// 403 permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 503 and
// 529 overloaded_error, else api_error) and the error body {"type":"error","error":{...}}.
std::string_view errorType(int status);
std::string errorJson(int status, std::string_view message);
// A backend's error answer (OpenAI's {"error":{"message":...}} or any text) in Anthropic's shape.
std::string errorFromChat(int status, std::string_view body);

// `POST /v1/messages/count_tokens`' answer for a request's estimate.
std::string countTokensJson(int64_t input_tokens);

// Translates a chat completions SSE stream into Messages stream events (message_start, then per
// content block content_block_start/_delta/_stop, message_delta with stop_reason and usage,
// message_stop). Fed the data of each chat event in order; writes whole SSE events.
class StreamTranslator {
 public:
  StreamTranslator(std::string id, std::string model);
  // One chat event's data: a chunk's JSON, or "[DONE]" (ignored: finish() ends the message).
  // A chunk that is not JSON is passed by (an engine's comment or keep-alive).
  void onData(std::string_view data, std::string& out);
  // The upstream stream ended (after its last chunk): closes the open block and the message. Once.
  void finish(std::string& out);
  // The upstream failed mid-stream: an `error` event (the message is not finished).
  void fail(int status, std::string_view message, std::string& out);
  bool finished() const { return finished_; }

 private:
  void start(std::string& out);
  void closeBlock(std::string& out);
  std::string id_, model_;
  bool started_ = false;
  bool finished_ = false;
  int block_ = -1;              // index of the open content block (-1: none)
  bool block_is_text_ = false;  // the open block is text (else a tool_use)
  int tool_index_ = -1;         // the chat tool call index the open tool_use block carries
  int blocks_ = 0;              // blocks opened so far
  std::string stop_reason_ = "end_turn";
  nlohmann::json stop_sequence_;  // null unless a stop sequence ended it
  int64_t input_ = 0, output_ = 0, cached_ = 0;
  bool usage_seen_ = false;
};

// Splits `text` (whole SSE events, as the usage scanner emits them) and feeds each event's data
// to `t`.
void translateEvents(StreamTranslator& t, std::string_view text, std::string& out);

}  // namespace infera::gateway::anthropic
