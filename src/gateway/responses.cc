#include "gateway/internal/responses.h"

#include <utility>
#include <vector>

#include "core/json.h"
#include "gateway/internal/json_fields.h"
#include "net/sse.h"

namespace infera::gateway::responses {
namespace {

using json = nlohmann::json;
using ordered = nlohmann::ordered_json;

using namespace json_fields;  // NOLINT(google-build-using-namespace)

ordered copy(const json& j) { return json_fields::ordered(j); }

constexpr std::string_view kKnown[] = {
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "stream",
    "store",
    "metadata",
    "user",
    "text",
    "previous_response_id",
    "reasoning",
    "truncation",
    "include",
};

// A message item's content as chat content: a string, or parts (text, images).
Result<ordered> contentOf(const json& content, const std::string& path, bool& text_only,
                          std::string& text) {
  text_only = true;
  if (content.is_string()) {
    text = content.get<std::string>();
    return ordered(text);
  }
  if (!content.is_array()) return bad(path, "must be a string or an array of parts");
  ordered parts = ordered::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& p = content[i];
    const std::string pp = path + "[" + std::to_string(i) + "]";
    const std::string type = str(p, "type");
    if (type == "input_text" || type == "output_text") {
      const auto t = p.find("text");
      if (t == p.end() || !t->is_string()) return bad(pp + ".text", "must be a string");
      text += t->get<std::string>();
      parts.push_back({{"type", "text"}, {"text", *t}});
    } else if (type == "input_image") {
      const auto u = p.find("image_url");
      if (u == p.end() || !u->is_string()) {
        return bad(pp + ".image_url", "must be a URL (file ids cannot be passed to this backend)");
      }
      text_only = false;
      ordered img = {{"url", *u}};
      if (const std::string d = str(p, "detail"); !d.empty()) img["detail"] = d;
      parts.push_back({{"type", "image_url"}, {"image_url", std::move(img)}});
    } else {
      return bad(pp + ".type", "'" + type + "' parts cannot be passed to this model's backend");
    }
  }
  return parts;
}

Status appendInput(const json& input, ordered& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return Status::ok();
  }
  if (!input.is_array() || input.empty())
    return bad("input", "must be a string or a non-empty array");
  ordered* calls = nullptr;  // the assistant message collecting consecutive function calls
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string path = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return bad(path, "must be an object");
    const std::string type = str(item, "type", "message");
    if (type == "message") {
      std::string role = str(item, "role");
      if (role == "developer") role = "system";
      if (role != "user" && role != "system" && role != "assistant") {
        return bad(path + ".role", "must be user, system, developer or assistant");
      }
      const auto c = item.find("content");
      if (c == item.end()) return bad(path + ".content", "is required");
      bool text_only = true;
      std::string text;
      INFERA_ASSIGN_OR_RETURN(ordered content, contentOf(*c, path + ".content", text_only, text));
      // System and assistant turns as plain text, as chat templates expect.
      if (role != "user") {
        if (!text_only) return bad(path + ".content", "images belong to user messages");
        content = text;
      }
      messages.push_back({{"role", role}, {"content", std::move(content)}});
      calls = nullptr;
    } else if (type == "function_call") {
      const auto id = item.find("call_id");
      const auto name = item.find("name");
      const auto args = item.find("arguments");
      if (id == item.end() || !id->is_string() || name == item.end() || !name->is_string() ||
          args == item.end() || !args->is_string()) {
        return bad(path, "a function_call needs call_id, name and arguments strings");
      }
      if (calls == nullptr) {
        messages.push_back(
            {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ordered::array()}});
        calls = &messages.back();
      }
      (*calls)["tool_calls"].push_back({{"id", *id},
                                        {"type", "function"},
                                        {"function", {{"name", *name}, {"arguments", *args}}}});
    } else if (type == "function_call_output") {
      const auto id = item.find("call_id");
      const auto output = item.find("output");
      if (id == item.end() || !id->is_string() || output == item.end() || !output->is_string()) {
        return bad(path, "a function_call_output needs call_id and output strings");
      }
      messages.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", *output}});
      calls = nullptr;
    } else {
      return bad(path + ".type", "'" + type + "' items cannot be passed to this model's backend");
    }
  }
  return Status::ok();
}

Status translateTools(const json& tools, ordered& chat) {
  if (!tools.is_array()) return bad("tools", "must be an array");
  ordered out = ordered::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    if (const std::string type = str(t, "type"); type != "function") {
      return bad(p + ".type", "'" + type + "' tools are not available on this model's backend");
    }
    const auto name = t.find("name");
    if (name == t.end() || !name->is_string()) return bad(p + ".name", "must be a string");
    ordered fn;
    fn["name"] = *name;
    if (const auto d = t.find("description"); d != t.end() && d->is_string())
      fn["description"] = *d;
    if (const auto ps = t.find("parameters"); ps != t.end() && ps->is_object()) {
      fn["parameters"] = copy(*ps);
    }
    if (const auto s = t.find("strict"); s != t.end() && s->is_boolean()) fn["strict"] = *s;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  if (!out.empty()) chat["tools"] = std::move(out);
  return Status::ok();
}

Status translateToolChoice(const json& tc, ordered& chat) {
  if (tc.is_string()) {
    const std::string c = tc.get<std::string>();
    if (c != "auto" && c != "none" && c != "required") {
      return bad("tool_choice", "must be auto, none, required or a function");
    }
    chat["tool_choice"] = c;
    return Status::ok();
  }
  if (str(tc, "type") != "function" || str(tc, "name").empty()) {
    return bad("tool_choice",
               "must be auto, none, required or {\"type\":\"function\",\"name\":...}");
  }
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", str(tc, "name")}}}};
  return Status::ok();
}

Status translateFormat(const json& text, ordered& chat) {
  if (!text.is_object()) return bad("text", "must be an object");
  const json& format = objectAt(text, "format");
  const std::string type = str(format, "type", "text");
  if (type == "text") return Status::ok();
  if (type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
    return Status::ok();
  }
  if (type != "json_schema")
    return bad("text.format.type", "must be text, json_object or json_schema");
  ordered schema;
  schema["name"] = str(format, "name", "response");
  if (const auto s = format.find("schema"); s != format.end() && s->is_object()) {
    schema["schema"] = copy(*s);
  } else {
    return bad("text.format.schema", "must be an object");
  }
  if (const auto s = format.find("strict"); s != format.end() && s->is_boolean())
    schema["strict"] = *s;
  if (const std::string d = str(format, "description"); !d.empty()) schema["description"] = d;
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  return Status::ok();
}

ordered usageOf(int64_t prompt, int64_t completion, int64_t cached) {
  return {{"input_tokens", prompt},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", completion},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", prompt + completion}};
}

// The Response object's fields that echo the request.
ordered skeleton(const json& request, std::string_view id, int64_t created_at,
                 std::string_view status) {
  ordered r;
  r["id"] = id;
  r["object"] = "response";
  r["created_at"] = created_at;
  r["status"] = status;
  r["error"] = nullptr;
  r["incomplete_details"] = nullptr;
  r["instructions"] = request.contains("instructions") ? copy(request["instructions"]) : ordered();
  r["max_output_tokens"] =
      request.contains("max_output_tokens") ? copy(request["max_output_tokens"]) : ordered();
  r["model"] = str(request, "model");
  r["output"] = ordered::array();
  r["parallel_tool_calls"] = request.contains("parallel_tool_calls")
                                 ? copy(request["parallel_tool_calls"])
                                 : ordered(true);
  r["previous_response_id"] = nullptr;
  r["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  r["store"] = false;  // the gateway keeps no responses
  r["temperature"] = request.contains("temperature") ? copy(request["temperature"]) : ordered(1.0);
  r["text"] = request.contains("text") && request["text"].is_object()
                  ? copy(request["text"])
                  : ordered{{"format", {{"type", "text"}}}};
  r["tool_choice"] =
      request.contains("tool_choice") ? copy(request["tool_choice"]) : ordered("auto");
  r["tools"] = request.contains("tools") ? copy(request["tools"]) : ordered::array();
  r["top_p"] = request.contains("top_p") ? copy(request["top_p"]) : ordered(1.0);
  r["truncation"] = "disabled";
  r["usage"] = nullptr;
  r["user"] = request.contains("user") ? copy(request["user"]) : ordered();
  r["metadata"] = request.contains("metadata") ? copy(request["metadata"]) : ordered::object();
  return r;
}

// finish_reason -> the response's status and its incomplete_details.
void setStatus(ordered& r, std::string_view finish_reason) {
  if (finish_reason == "length" || finish_reason == "content_filter") {
    r["status"] = "incomplete";
    r["incomplete_details"] = {
        {"reason", finish_reason == "length" ? "max_output_tokens" : "content_filter"}};
  } else {
    r["status"] = "completed";
  }
}

ordered messageItem(std::string_view id, const std::string& text, std::string_view status) {
  ordered content = ordered::array();
  if (status == "completed") {
    content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", ordered::array()}});
  }
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

ordered callItem(std::string_view id, std::string_view call_id, std::string_view name,
                 std::string_view args, std::string_view status) {
  return {{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
          {"arguments", args},       {"status", status}};
}

}  // namespace

Result<std::string> requestToChat(const nlohmann::json& request) {
  INFERA_RETURN_IF_ERROR(knownFieldsAndModel(request, kKnown));
  ordered chat;
  chat["model"] = request["model"];
  ordered messages = ordered::array();
  if (const auto ins = request.find("instructions"); ins != request.end() && !ins->is_null()) {
    if (!ins->is_string()) return bad("instructions", "must be a string");
    messages.push_back({{"role", "system"}, {"content", *ins}});
  }
  const auto input = request.find("input");
  if (input == request.end()) return bad("input", "is required");
  INFERA_RETURN_IF_ERROR(appendInput(*input, messages));
  chat["messages"] = std::move(messages);
  if (const auto m = request.find("max_output_tokens"); m != request.end() && !m->is_null()) {
    if (!isInteger(*m) || m->get<int64_t>() < 1)
      return bad("max_output_tokens", "must be a positive integer");
    chat["max_tokens"] = m->get<int64_t>();
  }
  for (const char* f : {"temperature", "top_p"}) {
    if (const auto v = request.find(f); v != request.end() && !v->is_null()) {
      if (!v->is_number()) return bad(f, "must be a number");
      chat[f] = v->get<double>();
    }
  }
  if (const auto t = request.find("tools"); t != request.end())
    INFERA_RETURN_IF_ERROR(translateTools(*t, chat));
  if (const auto tc = request.find("tool_choice"); tc != request.end() && !tc->is_null()) {
    INFERA_RETURN_IF_ERROR(translateToolChoice(*tc, chat));
  }
  if (const auto p = request.find("parallel_tool_calls"); p != request.end() && !p->is_null()) {
    if (!p->is_boolean()) return bad("parallel_tool_calls", "must be a boolean");
    chat["parallel_tool_calls"] = *p;
  }
  if (const auto t = request.find("text"); t != request.end() && !t->is_null()) {
    INFERA_RETURN_IF_ERROR(translateFormat(*t, chat));
  }
  if (const auto u = request.find("user"); u != request.end() && !u->is_null()) {
    if (!u->is_string()) return bad("user", "must be a string");
    chat["user"] = *u;
  }
  if (const auto p = request.find("previous_response_id"); p != request.end() && !p->is_null()) {
    return bad("previous_response_id",
               "responses are not stored by this gateway: send the conversation as input items");
  }
  if (const auto r = request.find("reasoning"); r != request.end() && !r->is_null()) {
    if (!r->is_object() || !r->empty())
      return bad("reasoning", "reasoning options are not available on this model's backend");
  }
  if (const auto t = request.find("truncation"); t != request.end() && !t->is_null()) {
    if (*t != "disabled") return bad("truncation", "only \"disabled\" is available");
  }
  if (const auto inc = request.find("include"); inc != request.end() && !inc->is_null()) {
    if (!inc->is_array() || !inc->empty())
      return bad("include", "nothing more can be included from this backend");
  }
  if (const auto s = request.find("store");
      s != request.end() && !s->is_null() && !s->is_boolean()) {
    return bad("store", "must be a boolean");
  }
  if (const auto md = request.find("metadata");
      md != request.end() && !md->is_null() && !md->is_object()) {
    return bad("metadata", "must be an object");
  }
  if (const auto s = request.find("stream"); s != request.end() && !s->is_null()) {
    if (!s->is_boolean()) return bad("stream", "must be a boolean");
    if (s->get<bool>()) {
      chat["stream"] = true;
      chat["stream_options"] = {{"include_usage", true}};
    }
  }
  return dumpJson(chat);
}

Result<std::string> answerFromChat(std::string_view chat, const nlohmann::json& request,
                                   std::string_view id, int64_t created_at) {
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
  ordered r = skeleton(request, id, created_at, "completed");
  const std::string rid(id.substr(id.find('_') + 1));
  if (const std::string text = str(message, "content"); !text.empty()) {
    r["output"].push_back(messageItem("msg_" + rid, text, "completed"));
  }
  if (const auto calls = message.find("tool_calls"); calls != message.end() && calls->is_array()) {
    for (size_t i = 0; i < calls->size(); ++i) {
      const json& call = (*calls)[i];
      const json& fn = objectAt(call, "function");
      const auto a = fn.find("arguments");
      const std::string args = a == fn.end()    ? std::string()
                               : a->is_string() ? a->get<std::string>()
                                                : dumpJson(*a);
      r["output"].push_back(callItem("fc_" + rid + "_" + std::to_string(i), str(call, "id"),
                                     str(fn, "name"), args, "completed"));
    }
  }
  setStatus(r, str(choice, "finish_reason"));
  const json& usage = objectAt(j, "usage");
  const int64_t cached = intAt(objectAt(usage, "prompt_tokens_details"), "cached_tokens");
  r["usage"] = usageOf(intAt(usage, "prompt_tokens"), intAt(usage, "completion_tokens"), cached);
  return dumpJson(r);
}

StreamTranslator::StreamTranslator(nlohmann::json request, std::string id, int64_t created_at)
    : request_(std::move(request)), id_(std::move(id)), created_at_(created_at) {}

ordered StreamTranslator::response(std::string_view status) const {
  ordered r = skeleton(request_, id_, created_at_, status);
  r["output"] = items_;
  return r;
}

void StreamTranslator::emit(std::string& out, std::string_view type, ordered data) {
  ordered e;
  e["type"] = type;
  e["sequence_number"] = seq_++;
  for (auto& [k, v] : data.items()) e[k] = std::move(v);
  net::appendSseEvent(out, type, dumpJson(e));
}

void StreamTranslator::start(std::string& out) {
  if (started_) return;
  started_ = true;
  emit(out, "response.created", {{"response", response("in_progress")}});
  emit(out, "response.in_progress", {{"response", response("in_progress")}});
}

void StreamTranslator::closeItem(std::string& out) {
  if (open_ < 0) return;
  ordered& item = items_[static_cast<size_t>(open_)];
  const std::string item_id = item["id"].get<std::string>();
  if (item["type"] == "message") {
    emit(out, "response.output_text.done",
         {{"item_id", item_id}, {"output_index", open_}, {"content_index", 0}, {"text", text_}});
    ordered part = {{"type", "output_text"}, {"text", text_}, {"annotations", ordered::array()}};
    emit(out, "response.content_part.done",
         {{"item_id", item_id}, {"output_index", open_}, {"content_index", 0}, {"part", part}});
    item = messageItem(item_id, text_, "completed");
  } else {
    emit(out, "response.function_call_arguments.done",
         {{"item_id", item_id}, {"output_index", open_}, {"arguments", args_}});
    item["arguments"] = args_;
    item["status"] = "completed";
  }
  emit(out, "response.output_item.done", {{"output_index", open_}, {"item", item}});
  open_ = -1;
  tool_index_ = -1;
  text_.clear();
  args_.clear();
}

void StreamTranslator::onData(std::string_view data, std::string& out) {
  if (finished_ || data == "[DONE]") return;
  auto parsed = readJson(data);
  if (!parsed.ok() || !parsed->is_object()) return;
  const json& chunk = *parsed;
  if (const auto e = chunk.find("error"); e != chunk.end() && !chunk.contains("choices")) {
    start(out);
    const std::string message = e->is_string() ? e->get<std::string>() : str(*e, "message");
    fail(message.empty() ? "the model's backend failed mid-stream" : message, out);
    return;
  }
  if (const auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
    input_ = intAt(*u, "prompt_tokens");
    output_ = intAt(*u, "completion_tokens");
    cached_ = intAt(objectAt(*u, "prompt_tokens_details"), "cached_tokens");
  }
  start(out);
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;
  const json& choice = (*choices)[0];
  const json& delta = objectAt(choice, "delta");
  const std::string rid = id_.substr(id_.find('_') + 1);
  if (const std::string text = str(delta, "content"); !text.empty()) {
    if (open_ < 0 || items_[static_cast<size_t>(open_)]["type"] != "message") {
      closeItem(out);
      open_ = static_cast<int>(items_.size());
      items_.push_back(messageItem("msg_" + rid, "", "in_progress"));
      emit(out, "response.output_item.added", {{"output_index", open_}, {"item", items_.back()}});
      emit(out, "response.content_part.added",
           {{"item_id", "msg_" + rid},
            {"output_index", open_},
            {"content_index", 0},
            {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", ordered::array()}}}});
    }
    text_ += text;
    emit(out, "response.output_text.delta",
         {{"item_id", "msg_" + rid},
          {"output_index", open_},
          {"content_index", 0},
          {"delta", text}});
  }
  if (const auto calls = delta.find("tool_calls"); calls != delta.end() && calls->is_array()) {
    for (const json& call : *calls) {
      if (!call.is_object()) continue;
      const int index = call.contains("index") && isInteger(call["index"])
                            ? static_cast<int>(call["index"].get<int64_t>())
                            : (tool_index_ >= 0 ? tool_index_ : 0);
      const json& fn = objectAt(call, "function");
      if (open_ < 0 || tool_index_ != index) {
        closeItem(out);
        open_ = static_cast<int>(items_.size());
        tool_index_ = index;
        const std::string item_id = "fc_" + rid + "_" + std::to_string(index);
        items_.push_back(callItem(item_id,
                                  str(call, "id", "call_" + rid + "_" + std::to_string(index)),
                                  str(fn, "name"), "", "in_progress"));
        emit(out, "response.output_item.added", {{"output_index", open_}, {"item", items_.back()}});
      }
      const auto a = fn.find("arguments");
      const std::string args = a == fn.end()    ? std::string()
                               : a->is_string() ? a->get<std::string>()
                                                : dumpJson(*a);
      if (!args.empty()) {
        args_ += args;
        emit(out, "response.function_call_arguments.delta",
             {{"item_id", items_[static_cast<size_t>(open_)]["id"]},
              {"output_index", open_},
              {"delta", args}});
      }
    }
  }
  if (const std::string fr = str(choice, "finish_reason"); !fr.empty()) finish_reason_ = fr;
}

void StreamTranslator::finish(std::string& out) {
  if (finished_) return;
  start(out);
  closeItem(out);
  ordered r = response("completed");
  setStatus(r, finish_reason_);
  r["usage"] = usageOf(input_, output_, cached_);
  const std::string type =
      r["status"] == "incomplete" ? "response.incomplete" : "response.completed";
  emit(out, type, {{"response", std::move(r)}});
  finished_ = true;
}

void StreamTranslator::fail(std::string_view message, std::string& out) {
  emit(out, "error", {{"code", "server_error"}, {"message", message}, {"param", nullptr}});
  finished_ = true;
}

void translateEvents(StreamTranslator& t, std::string_view text, std::string& out) {
  net::SseReader reader;
  const auto each = [&](const net::SseEvent& e) { t.onData(e.data, out); };
  reader.feed(text, each);
  reader.feed("\n\n", each);  // a last event without its blank line
}

}  // namespace infera::gateway::responses
