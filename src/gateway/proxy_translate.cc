// APIs translated to chat completions for the backends (docs/gateway.md "Anthropic Messages",
// "OpenAI Responses"): the body is translated before routing, access control, limits, the cache
// and the backend read it, so they all see one chat request (and bill it from its usage); the
// answer is translated back, whole or event by event; errors take the API's shape.
#include <algorithm>
#include <optional>

#include "core/clock.h"
#include "core/json.h"
#include "gateway/internal/exchange.h"
#include "gateway/internal/responses.h"

namespace infera::gateway {

namespace {

// The answer's id: the request's, as Anthropic's "msg_..." and OpenAI's "resp_..." ids look.
std::string answerId(ClientApi api, std::string_view request_id) {
  return (api == ClientApi::kMessages ? "msg_" : "resp_") + std::string(request_id);
}

int64_t unixSeconds() { return SystemClock::instance().unixMillis() / 1000; }

// An error the gateway answers itself, in the API's shape.
std::string apiError(ClientApi api, int status, std::string_view message) {
  if (api == ClientApi::kMessages) return anthropic::errorJson(status, message);
  return net::errorJson(message, status >= 500 ? "server_error" : "invalid_request_error",
                        status == 504 ? "upstream_timeout" : "upstream_error");
}

// The two APIs' stream translators behind one face.
class StreamTranslation {
 public:
  StreamTranslation(ClientApi api, std::string id, std::string model,
                    const nlohmann::json& request) {
    if (api == ClientApi::kMessages) {
      messages_.emplace(std::move(id), std::move(model));
    } else {
      responses_.emplace(request, std::move(id), unixSeconds());
    }
  }
  void events(std::string_view chat, std::string& out) {
    if (messages_) {
      anthropic::translateEvents(*messages_, chat, out);
    } else {
      responses::translateEvents(*responses_, chat, out);
    }
  }
  void finish(std::string& out) { messages_ ? messages_->finish(out) : responses_->finish(out); }
  void fail(int status, std::string_view message, std::string& out) {
    messages_ ? messages_->fail(status, message, out) : responses_->fail(message, out);
  }

 private:
  std::optional<anthropic::StreamTranslator> messages_;
  std::optional<responses::StreamTranslator> responses_;
};

// Answers larger than this are not translated whole (the client gets an error instead).
constexpr size_t kMaxTranslatedAnswer = 8u << 20;

}  // namespace

Task<bool> ProxyHandler::readTranslated(Exchange& x, bool count_only) {
  auto body = readJson(x.req.body);
  if (!body.ok()) {
    co_await sendError(x, body.status().code() == StatusCode::kPayloadTooLarge ? 413 : 400,
                       body.status().message(), "invalid_request_error", "invalid_json");
    co_return false;
  }
  auto chat = x.api == ClientApi::kMessages ? anthropic::requestToChat(*body, count_only)
                                            : responses::requestToChat(*body);
  if (!chat.ok()) {
    co_await sendError(x, 400, chat.status().message(), "invalid_request_error", "invalid_request");
    co_return false;
  }
  x.client_model = body->value("model", "");
  if (x.api == ClientApi::kResponses) x.client_request = std::move(*body);  // echoed back
  x.req.body = std::move(*chat);
  // From here on it is a chat completion (the path the backend is sent to included); the key
  // header it came with is the gateway's, never the backend's.
  x.client_path = std::string(x.req.path());
  const std::string_view target = x.req.target;
  const size_t query = target.find('?');
  x.req.target =
      "/v1/chat/completions" +
      (query == std::string_view::npos ? std::string() : std::string(target.substr(query)));
  // The answer is translated, so it must come back uncompressed (also without access control).
  std::erase_if(x.req.headers, [](const HttpHeader& h) {
    return h.name == "x-api-key" || h.name == "accept-encoding";
  });
  co_return true;
}

std::string ProxyHandler::translatedAnswer(Exchange& x, int& status, std::string_view chat) {
  const bool messages = x.api == ClientApi::kMessages;
  if (status != 200) {
    // A backend's error: Anthropic's shape, or OpenAI's as the backend wrote it.
    return messages ? anthropic::errorFromChat(status, chat) : std::string(chat);
  }
  auto answer = messages
                    ? anthropic::answerFromChat(chat, answerId(x.api, x.request_id), x.client_model)
                    : responses::answerFromChat(chat, x.client_request,
                                                answerId(x.api, x.request_id), unixSeconds());
  if (answer.ok()) return std::move(*answer);
  status = 502;  // the backend's 200 was not a chat completion
  return apiError(x.api, 502, answer.status().message());
}

Task<void> ProxyHandler::relayTranslated(Exchange& x, const Endpoint& ep,
                                         net::UpstreamConnection& conn,
                                         const net::ClientResponseHead& h, Deadline total,
                                         bool& keep_conn) {
  const RouteTable& table = *x.table;
  x.status = h.status;
  const bool sse = h.status == 200 && h.header("content-type").starts_with("text/event-stream");
  HttpHeader rid_h{"x-request-id", x.request_id};
  const std::span<const HttpHeader> out_headers = responseHeaders(x, rid_h);
  // A broken upstream read: the client hears why (before anything was sent, or as a stream's
  // error event); false when the client had left.
  auto upstreamFailed = [&] {
    x.current = nullptr;
    if (x.client_gone || x.w.clientGone()) {
      clientLeft(x, nullptr);
      return false;
    }
    x.route->stream_errors->inc(shard_);
    recordFailure(table, ep, monoNanos());
    return true;
  };
  auto firstByte = [&] {
    if (x.ttft_s != 0) return;
    x.ttft_s = static_cast<double>(monoNanos() - x.start_ns) / 1e9;
    if (sse) x.route->ttft->observe(shard_, x.ttft_s);
  };
  if (!sse) {
    // The whole answer, then its translation.
    std::string body;
    for (;;) {
      auto piece = co_await conn.readBody(total);
      if (!piece.ok()) {
        if (!upstreamFailed()) co_return;
        const bool timeout = piece.status().code() == StatusCode::kDeadlineExceeded;
        const std::string err = apiError(
            x.api, timeout ? 504 : 502,
            timeout ? "upstream timed out" : "upstream connection lost before the answer ended");
        x.status = timeout ? 504 : 502;
        co_await x.w.send(x.status, "application/json", err, out_headers);
        co_return;
      }
      if (piece->empty()) break;
      firstByte();
      if (body.size() + piece->size() > kMaxTranslatedAnswer) {
        x.w.closeAfterResponse();
        x.status = 502;
        const std::string err = apiError(x.api, 502, "the backend's answer is too large");
        co_await x.w.send(502, "application/json", err, out_headers);
        co_return;
      }
      body.append(*piece);
    }
    keep_conn = true;
    if (h.status == 200) readUsage(x.usage, body);
    if (x.keep_answer) {
      x.answer = body.substr(0, static_cast<size_t>(x.route->capture.max_bytes) + 3);
    }
    if (x.compare && h.status == 200) x.primary_output = std::string(answerOutput(body));
    int status = h.status;
    const std::string out = translatedAnswer(x, status, body);
    x.status = status;
    x.bytes_out += out.size();
    if (!co_await x.w.send(status, "application/json", out, out_headers)) {
      clientLeft(x, nullptr);
      co_return;
    }
    if (x.cacheable && status == 200 && x.usage.seen) {
      // Kept as the chat answer it was (shared with chat requests of the same canonical form).
      access::CachedAnswer e;
      e.body = std::move(body);
      e.content_type = "application/json";
      e.prompt_tokens = x.usage.prompt;
      e.completion_tokens = x.usage.completion;
      access_->cachePut(x.cache_key, std::move(e));
    }
    co_return;
  }
  x.stream = true;
  metrics_.active_streams->add(shard_, 1);
  struct StreamGauge {
    GatewayMetrics& m;
    int shard;
    ~StreamGauge() { m.active_streams->add(shard, -1); }
  } stream_gauge{metrics_, shard_};
  if (!co_await x.w.start(200, "text/event-stream", out_headers, -1)) {
    clientLeft(x, &conn);
    co_return;
  }
  StreamTranslation t(x.api, answerId(x.api, x.request_id), x.client_model, x.client_request);
  std::string& out = x.messages_out;
  for (;;) {
    auto piece = co_await conn.readBody(total);
    if (!piece.ok()) {
      if (!upstreamFailed()) co_return;
      out.clear();
      const bool timeout = piece.status().code() == StatusCode::kDeadlineExceeded;
      t.fail(timeout ? 504 : 502,
             timeout ? "upstream timed out mid-stream" : "upstream connection lost mid-stream",
             out);
      if (co_await x.w.writeChunk(out)) co_await x.w.finish();
      co_return;
    }
    if (piece->empty()) break;
    firstByte();
    if (x.keep_answer) {
      const size_t keep = static_cast<size_t>(x.route->capture.max_bytes) + 3;
      const size_t room = keep - std::min(x.answer.size(), keep);
      x.answer.append(piece->substr(0, std::min(room, piece->size())));
    }
    // Whole chat events (usage read from them), each translated.
    x.sse_out.clear();
    scanSse(x.usage, *piece, &x.sse_out);
    out.clear();
    t.events(x.sse_out, out);
    if (out.empty()) continue;
    x.bytes_out += out.size();
    if (!co_await x.w.writeChunk(out)) {
      clientLeft(x, &conn);
      co_return;
    }
  }
  out.clear();
  // An unterminated last event, then the message's end.
  t.events(x.usage.sse_buf, out);
  x.usage.sse_buf.clear();
  t.finish(out);
  x.bytes_out += out.size();
  if (!co_await x.w.writeChunk(out)) {
    clientLeft(x, &conn);
    co_return;
  }
  co_await x.w.finish();
  keep_conn = true;
}

Task<void> ProxyHandler::handleCountTokens(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{req, w};
  x.api = ClientApi::kMessages;
  const Served served(*this, x);
  if (!x.table) {
    co_await notReady(x);
    co_return;
  }
  if (access_ && !co_await authenticate(x)) co_return;
  if (!co_await readTranslated(x, /*count_only=*/true)) co_return;
  const Route* named = findRoute(*x.table, x.client_model);
  if (!named) {
    co_await sendError(x, 404, "model: " + x.client_model + " not found", "invalid_request_error",
                       "model_not_found");
    co_return;
  }
  if (x.grant) {
    if (auto denied = access_->checkAccess(x.grant, access::ResourceKind::kModel, x.client_model,
                                           named->model)) {
      co_await sendError(x, denied->status, denied->message, denied->type, denied->code);
      co_return;
    }
  }
  x.grant.reset();  // counting costs nothing and records no usage
  // The gateway's own estimate, as admission reserves it (a quarter of the chat body's bytes):
  // no tokenizer runs here.
  x.status = 200;
  const std::string body =
      anthropic::countTokensJson(static_cast<int64_t>(x.req.body.size() / 4) + 1);
  HttpHeader rid{"x-request-id", x.request_id};
  co_await x.w.send(200, "application/json", body, responseHeaders(x, rid));
}

}  // namespace infera::gateway
