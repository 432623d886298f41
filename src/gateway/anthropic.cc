#include "gateway/internal/anthropic.h"

#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "gateway/internal/json_fields.h"
#include "net/sse.h"

namespace infera::gateway::anthropic {
namespace {

using json = nlohmann::json;
using ordered = nlohmann::ordered_json;

using namespace json_fields;  // NOLINT(google-build-using-namespace)

// The fields a request may carry (anything else is refused by name, as Anthropic's API does).
constexpr std::string_view kKnown[] = {
    "model", "max_tokens", "messages", "system",      "stop_sequences", "stream",   "temperature",
    "top_p", "top_k",      "tools",    "tool_choice", "metadata",       "thinking",
};

// A text block's text (refusing what a chat message cannot carry).
Result<std::string> textOf(const json& block, const std::string& path) {
  const auto t = block.find("text");
  if (t == block.end() || !t->is_string()) return bad(path + ".text", "must be a string");
  if (const auto c = block.find("citations"); c != block.end() && !c->is_null()) {
    return bad(path + ".citations", "citations cannot be passed to this model's backend");
  }
  return t->get<std::string>();
}

// An image block as a chat image_url part.
Result<ordered> imagePart(const json& block, const std::string& path) {
  const auto src = block.find("source");
  if (src == block.end() || !src->is_object()) return bad(path + ".source", "must be an object");
  const std::string type = str(*src, "type");
  std::string url;
  if (type == "base64") {
    const auto media = src->find("media_type");
    const auto data = src->find("data");
    if (media == src->end() || !media->is_string() || data == src->end() || !data->is_string()) {
      return bad(path + ".source", "a base64 image needs media_type and data strings");
    }
    url = "data:" + media->get<std::string>() + ";base64," + data->get<std::string>();
  } else if (type == "url") {
    const auto u = src->find("url");
    if (u == src->end() || !u->is_string()) return bad(path + ".source.url", "must be a string");
    url = u->get<std::string>();
  } else {
    return bad(path + ".source.type", "must be base64 or url for this model's backend");
  }
  ordered part;
  part["type"] = "image_url";
  part["image_url"] = {{"url", url}};
  return part;
}

// A tool_result's content as a tool message's text.
Result<std::string> toolResultText(const json& block, const std::string& path) {
  std::string text;
  const auto c = block.find("content");
  if (c == block.end() || c->is_null()) {
    // No content: an empty result.
  } else if (c->is_string()) {
    text = c->get<std::string>();
  } else if (c->is_array()) {
    for (size_t i = 0; i < c->size(); ++i) {
      const json& b = (*c)[i];
      const std::string p = path + ".content[" + std::to_string(i) + "]";
      if (!b.is_object() || str(b, "type") != "text") {
        return bad(p, "a tool result can carry only text blocks to this model's backend");
      }
      INFERA_ASSIGN_OR_RETURN(std::string t, textOf(b, p));
      if (!text.empty()) text += "\n";
      text += t;
    }
  } else {
    return bad(path + ".content", "must be a string or an array of blocks");
  }
  if (const auto e = block.find("is_error"); e != block.end() && e->is_boolean() && e->get<bool>())
    text = "Error: " + text;  // chat tool messages have no error flag: it goes into the text
  return text;
}

// One Messages message as chat messages (a user message with tool results becomes the tool
// messages first, then what else it says).
Status appendMessage(const json& m, const std::string& path, ordered& out) {
  if (!m.is_object()) return bad(path, "must be an object");
  const std::string role = str(m, "role");
  if (role != "user" && role != "assistant")
    return bad(path + ".role", "must be user or assistant");
  const auto content = m.find("content");
  if (content == m.end()) return bad(path + ".content", "is required");
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", content->get<std::string>()}});
    return Status::ok();
  }
  if (!content->is_array()) return bad(path + ".content", "must be a string or an array of blocks");
  ordered parts = ordered::array();
  ordered tool_calls = ordered::array();
  std::vector<ordered> tool_messages;
  for (size_t i = 0; i < content->size(); ++i) {
    const json& b = (*content)[i];
    const std::string p = path + ".content[" + std::to_string(i) + "]";
    if (!b.is_object()) return bad(p, "must be an object");
    const std::string type = str(b, "type");
    if (type == "text") {
      INFERA_ASSIGN_OR_RETURN(std::string t, textOf(b, p));
      parts.push_back({{"type", "text"}, {"text", std::move(t)}});
    } else if (type == "image") {
      if (role != "user") return bad(p, "images are allowed in user messages only");
      INFERA_ASSIGN_OR_RETURN(ordered part, imagePart(b, p));
      parts.push_back(std::move(part));
    } else if (type == "tool_use") {
      if (role != "assistant") return bad(p, "tool_use blocks belong to assistant messages");
      const auto id = b.find("id");
      const auto name = b.find("name");
      const auto input = b.find("input");
      if (id == b.end() || !id->is_string() || name == b.end() || !name->is_string()) {
        return bad(p, "a tool_use block needs id and name strings");
      }
      if (input == b.end() || !input->is_object()) return bad(p + ".input", "must be an object");
      ordered call;
      call["id"] = id->get<std::string>();
      call["type"] = "function";
      call["function"] = {{"name", name->get<std::string>()}, {"arguments", dumpJson(*input)}};
      tool_calls.push_back(std::move(call));
    } else if (type == "tool_result") {
      if (role != "user") return bad(p, "tool_result blocks belong to user messages");
      const auto id = b.find("tool_use_id");
      if (id == b.end() || !id->is_string()) return bad(p + ".tool_use_id", "must be a string");
      INFERA_ASSIGN_OR_RETURN(std::string text, toolResultText(b, p));
      ordered tm;
      tm["role"] = "tool";
      tm["tool_call_id"] = id->get<std::string>();
      tm["content"] = std::move(text);
      tool_messages.push_back(std::move(tm));
    } else if (type == "thinking" || type == "redacted_thinking") {
      return bad(p, "thinking blocks cannot be passed to this model's backend");
    } else {
      return bad(p + ".type", "'" + type + "' blocks cannot be passed to this model's backend");
    }
  }
  for (auto& tm : tool_messages) out.push_back(std::move(tm));
  if (parts.empty() && tool_calls.empty()) return Status::ok();  // only tool results
  ordered msg;
  msg["role"] = role;
  if (role == "assistant") {
    // An assistant turn's text as one string (tool calls beside it), as chat templates expect.
    std::string text;
    for (const auto& part : parts) text += part["text"].get<std::string>();
    if (!text.empty() || tool_calls.empty()) {
      msg["content"] = std::move(text);
    } else {
      msg["content"] = nullptr;
    }
    if (!tool_calls.empty()) msg["tool_calls"] = std::move(tool_calls);
  } else {
    msg["content"] = std::move(parts);
  }
  out.push_back(std::move(msg));
  return Status::ok();
}

Result<ordered> translateTools(const json& tools) {
  if (!tools.is_array()) return bad("tools", "must be an array");
  ordered out = ordered::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return bad(p, "must be an object");
    if (const auto ty = t.find("type"); ty != t.end() && !ty->is_null()) {
      if (!ty->is_string()) return bad(p + ".type", "must be a string");
      if (*ty != "custom") {
        return bad(p + ".type", "server tool '" + ty->get<std::string>() +
                                    "' is not available on this model's backend");
      }
    }
    const auto name = t.find("name");
    if (name == t.end() || !name->is_string()) return bad(p + ".name", "must be a string");
    const auto schema = t.find("input_schema");
    if (schema == t.end() || !schema->is_object()) {
      return bad(p + ".input_schema", "must be an object (a JSON schema)");
    }
    ordered fn;
    fn["name"] = name->get<std::string>();
    if (const auto d = t.find("description"); d != t.end() && d->is_string())
      fn["description"] = *d;
    fn["parameters"] = json_fields::ordered(*schema);
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

Status translateToolChoice(const json& tc, ordered& chat) {
  if (!tc.is_object()) return bad("tool_choice", "must be an object");
  const std::string type = str(tc, "type");
  if (type == "auto") {
    chat["tool_choice"] = "auto";
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "none") {
    chat["tool_choice"] = "none";
  } else if (type == "tool") {
    const auto name = tc.find("name");
    if (name == tc.end() || !name->is_string()) return bad("tool_choice.name", "must be a string");
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    return bad("tool_choice.type", "must be auto, any, tool or none");
  }
  if (const auto d = tc.find("disable_parallel_tool_use"); d != tc.end()) {
    if (!d->is_boolean()) return bad("tool_choice.disable_parallel_tool_use", "must be a boolean");
    if (d->get<bool>()) chat["parallel_tool_calls"] = false;
  }
  return Status::ok();
}

void event(std::string& out, std::string_view name, const ordered& data) {
  net::appendSseEvent(out, name, dumpJson(data));
}

std::string stopReason(std::string_view finish_reason) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls" || finish_reason == "function_call") return "tool_use";
  if (finish_reason == "content_filter") return "refusal";
  return "end_turn";
}

// The usage object of a Messages answer from a chat usage object.
ordered usageOf(int64_t prompt, int64_t completion, int64_t cached) {
  ordered u;
  u["input_tokens"] = prompt - cached;
  u["cache_creation_input_tokens"] = 0;
  u["cache_read_input_tokens"] = cached;
  u["output_tokens"] = completion;
  return u;
}

int64_t cachedOf(const json& usage) {
  const auto d = usage.find("prompt_tokens_details");
  return d != usage.end() && d->is_object() ? intAt(*d, "cached_tokens") : 0;
}

}  // namespace

Result<std::string> requestToChat(const nlohmann::json& request, bool count_only) {
  INFERA_RETURN_IF_ERROR(knownFieldsAndModel(request, kKnown));
  ordered chat;
  chat["model"] = request["model"];
  const auto max_tokens = request.find("max_tokens");
  int64_t max = 1;
  if (max_tokens != request.end() || !count_only) {
    if (max_tokens == request.end() || !isInteger(*max_tokens) || max_tokens->get<int64_t>() < 1) {
      return bad("max_tokens", "must be a positive integer");
    }
    max = max_tokens->get<int64_t>();
  }
  ordered messages = ordered::array();
  if (const auto s = request.find("system"); s != request.end()) {
    if (s->is_string()) {
      messages.push_back({{"role", "system"}, {"content", s->get<std::string>()}});
    } else if (s->is_array()) {
      std::string text;
      for (size_t i = 0; i < s->size(); ++i) {
        const json& b = (*s)[i];
        const std::string p = "system[" + std::to_string(i) + "]";
        if (!b.is_object() || str(b, "type") != "text") return bad(p, "must be a text block");
        INFERA_ASSIGN_OR_RETURN(std::string t, textOf(b, p));
        if (!text.empty()) text += "\n";
        text += t;
      }
      messages.push_back({{"role", "system"}, {"content", std::move(text)}});
    } else {
      return bad("system", "must be a string or an array of text blocks");
    }
  }
  const auto msgs = request.find("messages");
  if (msgs == request.end() || !msgs->is_array() || msgs->empty()) {
    return bad("messages", "must be a non-empty array");
  }
  for (size_t i = 0; i < msgs->size(); ++i) {
    INFERA_RETURN_IF_ERROR(
        appendMessage((*msgs)[i], "messages[" + std::to_string(i) + "]", messages));
  }
  chat["messages"] = std::move(messages);
  if (str(msgs->back(), "role") == "assistant") {
    // A last assistant turn is a prefill the answer continues (vLLM's chat template options).
    chat["add_generation_prompt"] = false;
    chat["continue_final_message"] = true;
  }
  chat["max_tokens"] = max;
  if (const auto st = request.find("stop_sequences"); st != request.end()) {
    if (!st->is_array()) return bad("stop_sequences", "must be an array of strings");
    for (const auto& s : *st) {
      if (!s.is_string()) return bad("stop_sequences", "must be an array of strings");
    }
    if (!st->empty()) chat["stop"] = json_fields::ordered(*st);
  }
  for (const char* f : {"temperature", "top_p"}) {
    if (const auto v = request.find(f); v != request.end()) {
      if (!v->is_number()) return bad(f, "must be a number");
      chat[f] = v->get<double>();
    }
  }
  if (const auto v = request.find("top_k"); v != request.end()) {
    if (!isInteger(*v)) return bad("top_k", "must be an integer");
    chat["top_k"] = v->get<int64_t>();  // vLLM's sampling extension
  }
  if (const auto t = request.find("tools"); t != request.end()) {
    INFERA_ASSIGN_OR_RETURN(ordered tools, translateTools(*t));
    if (!tools.empty()) chat["tools"] = std::move(tools);
  }
  if (const auto tc = request.find("tool_choice"); tc != request.end()) {
    INFERA_RETURN_IF_ERROR(translateToolChoice(*tc, chat));
  }
  if (const auto md = request.find("metadata"); md != request.end()) {
    if (!md->is_object()) return bad("metadata", "must be an object");
    if (const auto u = md->find("user_id"); u != md->end() && !u->is_null()) {
      if (!u->is_string()) return bad("metadata.user_id", "must be a string");
      chat["user"] = *u;
    }
  }
  if (const auto th = request.find("thinking"); th != request.end()) {
    if (!th->is_object() || str(*th, "type") != "disabled") {
      return bad("thinking", "extended thinking is not available on this model's backend");
    }
  }
  if (const auto s = request.find("stream"); s != request.end()) {
    if (!s->is_boolean()) return bad("stream", "must be a boolean");
    if (s->get<bool>()) {
      chat["stream"] = true;
      chat["stream_options"] = {{"include_usage", true}};
    }
  }
  return dumpJson(chat);
}

Result<std::string> answerFromChat(std::string_view chat, std::string_view id,
                                   std::string_view model) {
  auto parsed = readJson(chat);
  if (!parsed.ok()) return Status::internal("the backend's answer is not JSON");
  const json& j = *parsed;
  const auto choices = j.find("choices");
  if (!j.is_object() || choices == j.end() || !choices->is_array() || choices->empty() ||
      !(*choices)[0].is_object()) {
    return Status::internal("the backend's answer is not a chat completion");
  }
  const json& choice = (*choices)[0];
  const json& message = objectAt(choice, "message");
  ordered content = ordered::array();
  // vLLM's reasoning_content is not passed on: Anthropic's API answers thinking only when the
  // request enabled it, which this translation refuses (and a client sends back what it got).
  if (const auto c = message.find("content");
      c != message.end() && c->is_string() && !c->get<std::string>().empty()) {
    content.push_back({{"type", "text"}, {"text", *c}});
  }
  if (const auto calls = message.find("tool_calls"); calls != message.end() && calls->is_array()) {
    for (const json& call : *calls) {
      if (!call.is_object()) continue;
      const json& fn = objectAt(call, "function");
      ordered block;
      block["type"] = "tool_use";
      block["id"] = str(call, "id");
      block["name"] = str(fn, "name");
      if (const auto a = fn.find("arguments"); a != fn.end() && a->is_object()) {
        block["input"] = json_fields::ordered(*a);  // some servers send them as an object
      } else {
        const std::string args = str(fn, "arguments");
        auto input = readJson(args.empty() ? std::string_view("{}") : std::string_view(args));
        // Arguments a model got wrong are kept as it wrote them rather than lost.
        block["input"] = input.ok() && input->is_object() ? json_fields::ordered(*input)
                                                          : ordered{{"arguments", args}};
      }
      content.push_back(std::move(block));
    }
  }
  ordered out;
  out["id"] = id;
  out["type"] = "message";
  out["role"] = "assistant";
  out["model"] = model;
  out["content"] = std::move(content);
  const auto fr = choice.find("finish_reason");
  std::string reason =
      stopReason(fr != choice.end() && fr->is_string() ? fr->get<std::string>() : "");
  ordered stop_sequence = nullptr;
  if (const auto sr = choice.find("stop_reason");
      sr != choice.end() && sr->is_string() && reason == "end_turn") {
    reason = "stop_sequence";  // vLLM names the stop string that ended the answer
    stop_sequence = *sr;
  }
  out["stop_reason"] = reason;
  out["stop_sequence"] = std::move(stop_sequence);
  const json& usage = objectAt(j, "usage");
  out["usage"] =
      usageOf(intAt(usage, "prompt_tokens"), intAt(usage, "completion_tokens"), cachedOf(usage));
  return dumpJson(out);
}

std::string_view errorType(int status) {
  switch (status) {
    case 400:
    case 422:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 402:
      return "billing_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      return status >= 400 && status < 500 ? "invalid_request_error" : "api_error";
  }
}

std::string errorJson(int status, std::string_view message) {
  ordered e;
  e["type"] = "error";
  e["error"] = {{"type", errorType(status)}, {"message", message}};
  return dumpJson(e);
}

std::string errorFromChat(int status, std::string_view body) {
  std::string message;
  if (auto j = readJson(body); j.ok() && j->is_object()) {
    const auto e = j->find("error");
    if (e != j->end() && e->is_object() && e->contains("message") && (*e)["message"].is_string()) {
      message = (*e)["message"].get<std::string>();
    } else if (e != j->end() && e->is_string()) {
      message = e->get<std::string>();
    } else {
      message = str(*j, "message");  // an older vLLM's {"object":"error","message":...}
    }
  }
  if (message.empty()) {
    message = "the model's backend answered " + std::to_string(status);
  }
  return errorJson(status, message);
}

std::string countTokensJson(int64_t input_tokens) {
  return "{\"input_tokens\":" + std::to_string(input_tokens) + "}";
}

StreamTranslator::StreamTranslator(std::string id, std::string model)
    : id_(std::move(id)), model_(std::move(model)) {}

void StreamTranslator::start(std::string& out) {
  if (started_) return;
  started_ = true;
  ordered msg;
  msg["id"] = id_;
  msg["type"] = "message";
  msg["role"] = "assistant";
  msg["model"] = model_;
  msg["content"] = ordered::array();
  msg["stop_reason"] = nullptr;
  msg["stop_sequence"] = nullptr;
  // Engines report usage at the end (message_delta carries it, input tokens included), unless
  // they report it with every chunk.
  msg["usage"] = usageOf(input_, 0, cached_);
  event(out, "message_start", {{"type", "message_start"}, {"message", std::move(msg)}});
}

void StreamTranslator::closeBlock(std::string& out) {
  if (block_ < 0) return;
  event(out, "content_block_stop", {{"type", "content_block_stop"}, {"index", block_}});
  block_ = -1;
  tool_index_ = -1;
}

void StreamTranslator::onData(std::string_view data, std::string& out) {
  if (finished_ || data == "[DONE]") return;
  auto parsed = readJson(data);
  if (!parsed.ok() || !parsed->is_object()) return;
  const json& chunk = *parsed;
  // A backend that failed mid-stream says so in a chunk of its own (vLLM: {"error": ...}).
  if (const auto e = chunk.find("error"); e != chunk.end() && !chunk.contains("choices")) {
    start(out);
    closeBlock(out);
    const std::string message = e->is_string() ? e->get<std::string>() : str(*e, "message");
    const auto code = e->is_object() ? e->find("code") : e->end();
    const int status = code != e->end() && isInteger(*code) && code->get<int64_t>() >= 400 &&
                               code->get<int64_t>() < 600
                           ? static_cast<int>(code->get<int64_t>())
                           : 500;
    fail(status, message.empty() ? "the model's backend failed mid-stream" : message, out);
    return;
  }
  // Usage first: with per-chunk usage (vLLM's continuous_usage_stats) message_start has the
  // input tokens.
  if (const auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
    input_ = intAt(*u, "prompt_tokens");
    output_ = intAt(*u, "completion_tokens");
    cached_ = cachedOf(*u);
    usage_seen_ = true;
  }
  start(out);
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;
  const json& choice = (*choices)[0];
  if (!choice.is_object()) return;
  const json& delta = objectAt(choice, "delta");
  // Text (vLLM's reasoning_content is not passed on, as in whole answers).
  if (const auto t = delta.find("content");
      t != delta.end() && t->is_string() && !t->get<std::string>().empty()) {
    if (block_ < 0 || !block_is_text_) {
      closeBlock(out);
      block_ = blocks_++;
      block_is_text_ = true;
      event(out, "content_block_start",
            {{"type", "content_block_start"},
             {"index", block_},
             {"content_block", {{"type", "text"}, {"text", ""}}}});
    }
    event(out, "content_block_delta",
          {{"type", "content_block_delta"},
           {"index", block_},
           {"delta", {{"type", "text_delta"}, {"text", *t}}}});
  }
  if (const auto calls = delta.find("tool_calls"); calls != delta.end() && calls->is_array()) {
    for (const json& call : *calls) {
      if (!call.is_object()) continue;
      const int index = call.contains("index") && isInteger(call["index"])
                            ? call["index"].get<int>()
                            : (tool_index_ >= 0 ? tool_index_ : 0);
      const json& fn = objectAt(call, "function");
      if (block_ < 0 || tool_index_ != index) {
        closeBlock(out);
        block_ = blocks_++;
        block_is_text_ = false;
        tool_index_ = index;
        ordered cb;
        cb["type"] = "tool_use";
        cb["id"] = str(call, "id", id_ + "_tool" + std::to_string(index));
        cb["name"] = str(fn, "name");
        cb["input"] = ordered::object();
        event(out, "content_block_start",
              {{"type", "content_block_start"}, {"index", block_}, {"content_block", cb}});
      }
      const auto a = fn.find("arguments");
      std::string args;
      if (a != fn.end() && a->is_string()) args = a->get<std::string>();
      if (a != fn.end() && a->is_object()) args = dumpJson(*a);
      if (!args.empty()) {
        event(out, "content_block_delta",
              {{"type", "content_block_delta"},
               {"index", block_},
               {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}});
      }
    }
  }
  if (const auto fr = choice.find("finish_reason"); fr != choice.end() && fr->is_string()) {
    stop_reason_ = stopReason(fr->get<std::string>());
    if (const auto sr = choice.find("stop_reason");
        sr != choice.end() && sr->is_string() && stop_reason_ == "end_turn") {
      stop_reason_ = "stop_sequence";
      stop_sequence_ = *sr;
    }
  }
}

void StreamTranslator::finish(std::string& out) {
  if (finished_) return;
  start(out);
  closeBlock(out);
  ordered delta;
  delta["stop_reason"] = stop_reason_;
  delta["stop_sequence"] = ordered::parse(stop_sequence_.dump());
  event(out, "message_delta",
        {{"type", "message_delta"},
         {"delta", std::move(delta)},
         {"usage", usageOf(input_, output_, cached_)}});
  event(out, "message_stop", {{"type", "message_stop"}});
  finished_ = true;
}

void StreamTranslator::fail(int status, std::string_view message, std::string& out) {
  net::appendSseEvent(out, "error", errorJson(status, message));
  finished_ = true;
}

void translateEvents(StreamTranslator& t, std::string_view text, std::string& out) {
  net::SseReader reader;
  const auto each = [&](const net::SseEvent& e) { t.onData(e.data, out); };
  reader.feed(text, each);
  reader.feed("\n\n", each);  // a last event without its blank line
}

}  // namespace infera::gateway::anthropic
