#include "emulator/emulator.h"

#include <simdjson.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <mutex>
#include <random>
#include <unordered_map>

#include "core/log.h"
#include "net/loops.h"
#include "net/server.h"
#include "net/sse.h"

namespace infera::emulator {
namespace {

using net::HttpHeader;
using net::HttpRequest;
using net::ResponseWriter;
using net::Task;

constexpr std::string_view kWords[] = {
    "The",    " quick", " brown", " fox",   " jumps",  " over", " the",   " lazy",
    " dog",   ".",      " A",     " model", " of",     " the",  " world", " is",
    " built", " one",   " token", " at",    " a",      " time", ",",      " and",
    " every", " token", " costs", " a",     " little", " time", " and",   " money"};

int64_t unixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct ParsedRequest {
  std::string model;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  int max_tokens = -1;
  int prompt_tokens = 0;
};

void appendUsage(std::string& out, int prompt, int completion) {
  out += "{\"prompt_tokens\":";
  out += std::to_string(prompt);
  out += ",\"total_tokens\":";
  out += std::to_string(prompt + completion);
  out += ",\"completion_tokens\":";
  out += std::to_string(completion);
  out += "}";
}

class EmulatorImpl;

class Handler final : public net::HttpHandler {
 public:
  Handler(EmulatorImpl& emu, int index);
  Task<void> handle(HttpRequest& req, ResponseWriter& w) override;

 private:
  Task<void> error(ResponseWriter& w, int status, std::string_view message, std::string_view type,
                   std::string_view code) {
    const std::string body = net::errorJson(message, type, code);
    co_await w.send(status, "application/json", body);
  }
  bool knownModel(std::string_view m) const;
  Result<ParsedRequest> parseOpenAi(const HttpRequest& req, bool chat);
  Task<void> generate(HttpRequest& req, ResponseWriter& w, bool chat);
  Task<void> embeddings(HttpRequest& req, ResponseWriter& w);
  Task<void> models(ResponseWriter& w);
  Task<void> kserve(HttpRequest& req, ResponseWriter& w);
  Task<void> kserveInfer(std::string_view model, HttpRequest& req, ResponseWriter& w);
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  // Sleeps until `until`, in slices, returning early once the emulator stops or *gone is set, so
  // shutdown never waits for a long emulated generation.
  Task<void> sleepFor(net::Deadline until, const bool* gone = nullptr);
  Task<bool> hang(ResponseWriter& w);

  EmulatorImpl& emu_;
  std::mt19937_64 rng_;
  simdjson::dom::parser parser_;
  uint64_t next_id_ = 0;
  int index_;
};

class EmulatorImpl final : public Emulator {
 public:
  explicit EmulatorImpl(EmulatorConfig cfg) : config_(std::move(cfg)), loops_(config_.workers) {
    faults_.set(config_.faults);
    faults_.ttft_ms = config_.ttft_ms;
    faults_.token_ms = config_.token_ms;
  }
  ~EmulatorImpl() override { stop(); }

  Status init() {
    net::ServerConfig sc;
    sc.host = config_.host;
    sc.port = config_.port;
    sc.max_body_bytes = 64 << 20;
    sc.tls = config_.tls;
    loops_.start();
    auto server = net::HttpServer::create(loops_, sc, [this](int i, net::asio::io_context&) {
      return std::make_unique<Handler>(*this, i);
    });
    if (!server.ok()) {
      loops_.stop();
      return server.takeStatus();
    }
    server_ = std::move(*server);
    return Status::ok();
  }

  uint16_t port() const override { return server_->port(); }
  std::string url() const override {
    return (config_.tls ? "https://" : "http://") + config_.host + ":" +
           std::to_string(server_->port());
  }
  FaultControl& faults() override { return faults_; }
  const EmulatorStats& stats() const override { return stats_; }
  std::optional<RequestUsage> usageFor(const std::string& request_id) const override {
    std::lock_guard<std::mutex> lock(ledger_mu_);
    const auto it = ledger_.find(request_id);
    if (it == ledger_.end()) return std::nullopt;
    return it->second;
  }
  void recordUsage(std::string_view request_id, int prompt, int completion, bool completed) {
    if (request_id.empty() || config_.usage_ledger == 0) return;
    std::lock_guard<std::mutex> lock(ledger_mu_);
    std::string id(request_id);
    if (ledger_.emplace(id, RequestUsage{prompt, completion, completed}).second) {
      ledger_order_.push_back(std::move(id));
      if (ledger_order_.size() > config_.usage_ledger) {
        ledger_.erase(ledger_order_.front());
        ledger_order_.pop_front();
      }
    }
  }
  void stop() override {
    if (!server_) return;
    // Hanging requests and long sleeps end once stopping is set; streams get a moment to finish.
    stopping_ = true;
    server_->drain(std::chrono::milliseconds(500));
    server_.reset();
    loops_.stop();
  }

  const EmulatorConfig& config() const { return config_; }
  EmulatorStats& mutableStats() { return stats_; }
  bool stopping() const { return stopping_.load(); }

 private:
  EmulatorConfig config_;
  FaultControl faults_;
  EmulatorStats stats_;
  mutable std::mutex ledger_mu_;
  std::unordered_map<std::string, RequestUsage> ledger_;
  std::deque<std::string> ledger_order_;
  net::EventLoops loops_;
  std::unique_ptr<net::HttpServer> server_;
  std::atomic<bool> stopping_{false};
};

Handler::Handler(EmulatorImpl& emu, int index)
    : emu_(emu), rng_(emu.config().seed + static_cast<uint64_t>(index) * 7919), index_(index) {}

bool Handler::knownModel(std::string_view m) const {
  for (const auto& name : emu_.config().models) {
    if (name == m) return true;
  }
  return false;
}

Result<ParsedRequest> Handler::parseOpenAi(const HttpRequest& req, bool chat) {
  simdjson::dom::element doc;
  if (parser_.parse(req.body.data(), req.body.size(), true).get(doc) != simdjson::SUCCESS ||
      !doc.is_object()) {
    return Status::invalidArgument("request body is not a JSON object");
  }
  ParsedRequest p;
  std::string_view model;
  if (doc["model"].get(model) != simdjson::SUCCESS) {
    return Status::invalidArgument("missing required field 'model'");
  }
  p.model = std::string(model);
  bool b = false;
  if (doc["stream"].get(b) == simdjson::SUCCESS) p.stream = b;
  simdjson::dom::object so;
  if (doc["stream_options"].get(so) == simdjson::SUCCESS) {
    if (so["include_usage"].get(b) == simdjson::SUCCESS) p.include_usage = b;
    if (so["continuous_usage_stats"].get(b) == simdjson::SUCCESS) p.continuous_usage = b;
  }
  int64_t mt = 0;
  if (doc["max_completion_tokens"].get(mt) == simdjson::SUCCESS ||
      doc["max_tokens"].get(mt) == simdjson::SUCCESS) {
    if (mt < 0) return Status::invalidArgument("max_tokens must be >= 0");
    p.max_tokens = static_cast<int>(std::min<int64_t>(mt, 1 << 20));
  }
  int prompt = 0;
  if (chat) {
    simdjson::dom::array messages;
    if (doc["messages"].get(messages) != simdjson::SUCCESS) {
      return Status::invalidArgument("missing required field 'messages'");
    }
    for (auto m : messages) {
      std::string_view content;
      if (m["content"].get(content) == simdjson::SUCCESS) prompt += estimateTokens(content);
      prompt += 3;  // role and framing, as chat templates add
    }
  } else {
    std::string_view text;
    simdjson::dom::array arr;
    if (doc["prompt"].get(text) == simdjson::SUCCESS) {
      prompt = estimateTokens(text);
    } else if (doc["prompt"].get(arr) == simdjson::SUCCESS) {
      for (auto e : arr) {
        if (e.get(text) == simdjson::SUCCESS) prompt += estimateTokens(text);
      }
    } else {
      return Status::invalidArgument("missing required field 'prompt'");
    }
  }
  p.prompt_tokens = std::max(prompt, 1);
  return p;
}

Task<void> Handler::sleepFor(net::Deadline until, const bool* gone) {
  while (net::SteadyClock::now() < until && !emu_.stopping() && !(gone && *gone)) {
    co_await net::sleepUntil(
        std::min(until, net::SteadyClock::now() + std::chrono::milliseconds(50)));
  }
}

Task<bool> Handler::hang(ResponseWriter& w) {
  // Never answers: waits until the client leaves or the emulator stops.
  bool gone = false;
  w.watchDisconnect([&gone] { gone = true; });
  co_await sleepFor(net::Deadline::max(), &gone);
  w.closeAfterResponse();
  co_return true;
}

Task<void> Handler::handle(HttpRequest& req, ResponseWriter& w) {
  auto& stats = emu_.mutableStats();
  stats.requests.fetch_add(1, std::memory_order_relaxed);
  const std::string_view path = req.path();
  FaultControl& f = emu_.faults();
  const bool is_data = path.starts_with("/v1/") || path.find("/infer") != std::string_view::npos;
  if (is_data) {
    if (const int64_t lat = f.added_latency_ms.load(); lat > 0) {
      co_await sleepFor(net::SteadyClock::now() + std::chrono::milliseconds(lat));
    }
    if (const double hr = f.hang_rate.load(); hr > 0 && uniform() < hr) {
      co_await hang(w);
      co_return;
    }
    if (const double er = f.error_rate.load(); er > 0 && uniform() < er) {
      stats.injected_errors.fetch_add(1, std::memory_order_relaxed);
      const int status = f.error_status.load();
      co_await error(w, status, "injected fault",
                     status >= 500 ? "server_error" : "invalid_request_error", "injected_fault");
      co_return;
    }
  }
  if (path == "/v1/chat/completions" && req.method == "POST") {
    co_await generate(req, w, true);
  } else if (path == "/v1/completions" && req.method == "POST") {
    co_await generate(req, w, false);
  } else if (path == "/v1/embeddings" && req.method == "POST") {
    co_await embeddings(req, w);
  } else if (path == "/v1/models" && req.method == "GET") {
    co_await models(w);
  } else if (path == "/health" || path == "/v1/health") {
    co_await w.send(200, "application/json", "{}");
  } else if (path.starts_with("/v2")) {
    co_await kserve(req, w);
  } else {
    const std::string msg = "no route for " + std::string(path);
    co_await error(w, 404, msg, "invalid_request_error", "not_found");
  }
}

Task<void> Handler::generate(HttpRequest& req, ResponseWriter& w, bool chat) {
  auto parsed = parseOpenAi(req, chat);
  if (!parsed.ok()) {
    const std::string msg = parsed.status().message();
    co_await error(w, 400, msg, "invalid_request_error", "invalid_request");
    co_return;
  }
  const ParsedRequest& p = *parsed;
  if (!knownModel(p.model)) {
    const std::string msg = "The model `" + p.model + "` does not exist.";
    co_await error(w, 404, msg, "invalid_request_error", "model_not_found");
    co_return;
  }
  auto& stats = emu_.mutableStats();
  FaultControl& f = emu_.faults();
  const int n_tokens = p.max_tokens >= 0 ? p.max_tokens : emu_.config().default_max_tokens;
  const int64_t created = unixSeconds();
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(index_) + "-" +
                         std::to_string(++next_id_);
  const std::string_view object = chat ? "chat.completion" : "text_completion";
  const auto ttft = std::chrono::microseconds(f.ttft_ms.load() * 1000);
  const auto per_token = std::chrono::microseconds(static_cast<int64_t>(f.token_ms.load() * 1000));
  const std::string finish = p.max_tokens >= 0 ? "length" : "stop";
  std::string model_json;
  net::appendJsonString(model_json, p.model);

  if (!p.stream) {
    auto when = net::SteadyClock::now() + ttft + per_token * std::max(0, n_tokens - 1);
    if (ttft.count() > 0 || per_token.count() > 0) {
      bool gone = false;
      w.watchDisconnect([&gone] { gone = true; });
      co_await sleepFor(when, &gone);
      if (gone) co_return;
    }
    std::string text;
    for (int i = 0; i < n_tokens; ++i) text += emulatedToken(i);
    std::string body;
    body.reserve(256 + text.size());
    body += "{\"id\":\"" + id + "\",\"object\":\"";
    body += object;
    body += "\",\"created\":" + std::to_string(created) + ",\"model\":" + model_json +
            ",\"choices\":[{\"index\":0,";
    if (chat) {
      body += "\"message\":{\"role\":\"assistant\",\"content\":";
      net::appendJsonString(body, text);
      body += "},";
    } else {
      body += "\"text\":";
      net::appendJsonString(body, text);
      body += ",";
    }
    body += "\"logprobs\":null,\"finish_reason\":\"" + finish + "\"}],\"usage\":";
    appendUsage(body, p.prompt_tokens, n_tokens);
    body += "}";
    stats.completion_tokens.fetch_add(static_cast<uint64_t>(n_tokens), std::memory_order_relaxed);
    const bool sent = co_await w.send(200, "application/json", body);
    emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, sent ? n_tokens : 0, sent);
    co_return;
  }

  // Streaming.
  bool gone = false;
  w.watchDisconnect([&gone] { gone = true; });
  stats.active_streams.fetch_add(1, std::memory_order_relaxed);
  struct ActiveGuard {
    EmulatorStats& s;
    ~ActiveGuard() { s.active_streams.fetch_sub(1, std::memory_order_relaxed); }
  } guard{stats};
  const bool cut = f.disconnect_rate.load() > 0 && uniform() < f.disconnect_rate.load();
  const int cut_after = f.disconnect_after_tokens.load();
  // No temporaries with destructors inside co_await expressions: g++ 12 mishandles them.
  const std::array<HttpHeader, 1> sse_headers{HttpHeader{"cache-control", "no-cache"}};
  if (!co_await w.start(200, "text/event-stream", sse_headers)) {
    co_return;
  }
  const std::string prefix = "{\"id\":\"" + id + "\",\"object\":\"" + std::string(object) +
                             ".chunk\",\"created\":" + std::to_string(created) +
                             ",\"model\":" + model_json + ",\"choices\":[";
  std::string chunk;
  std::string event;
  auto usageTail = [&](int completion) {
    if (p.continuous_usage) {
      chunk += ",\"usage\":";
      appendUsage(chunk, p.prompt_tokens, completion);
    } else if (p.include_usage) {
      chunk += ",\"usage\":null";
    }
  };
  auto next = net::SteadyClock::now() + ttft;
  if (chat) {
    // vLLM sends the role first, with no content token.
    chunk = prefix +
            "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
            "\"finish_reason\":null}]";
    usageTail(0);
    chunk += "}";
    event.clear();
    net::appendSseData(event, chunk);
    if (ttft.count() > 0) co_await sleepFor(next, &gone);
    if (gone || !co_await w.writeChunk(event)) {
      stats.aborted_streams.fetch_add(1, std::memory_order_relaxed);
      emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, 0, false);
      co_return;
    }
  }
  for (int i = 0; i < n_tokens; ++i) {
    if (i > 0 || !chat) {
      if (i > 0) next += per_token;
      if (next > net::SteadyClock::now()) co_await sleepFor(next, &gone);
    }
    if (cut && i >= cut_after) {
      emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, i, false);
      w.closeAfterResponse();
      co_return;  // response started, never finished: the server closes the connection
    }
    const bool last = i == n_tokens - 1;
    chunk = prefix;
    chunk += "{\"index\":0,";
    if (chat) {
      chunk += "\"delta\":{\"content\":";
      net::appendJsonString(chunk, emulatedToken(i));
      chunk += "},";
    } else {
      chunk += "\"text\":";
      net::appendJsonString(chunk, emulatedToken(i));
      chunk += ",";
    }
    chunk += "\"logprobs\":null,\"finish_reason\":";
    chunk += last ? "\"" + finish + "\"" : "null";
    chunk += "}]";
    usageTail(i + 1);
    chunk += "}";
    event.clear();
    net::appendSseData(event, chunk);
    if (gone || !co_await w.writeChunk(event)) {
      stats.completion_tokens.fetch_add(static_cast<uint64_t>(i), std::memory_order_relaxed);
      stats.aborted_streams.fetch_add(1, std::memory_order_relaxed);
      emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, i, false);
      co_return;
    }
  }
  event.clear();
  if (p.include_usage || p.continuous_usage) {
    chunk = prefix + "],\"usage\":";
    appendUsage(chunk, p.prompt_tokens, n_tokens);
    chunk += "}";
    net::appendSseData(event, chunk);
  }
  net::appendSseData(event, "[DONE]");
  stats.completion_tokens.fetch_add(static_cast<uint64_t>(n_tokens), std::memory_order_relaxed);
  if (co_await w.writeChunk(event) && co_await w.finish()) {
    stats.completed_streams.fetch_add(1, std::memory_order_relaxed);
    emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, n_tokens, true);
  } else {
    stats.aborted_streams.fetch_add(1, std::memory_order_relaxed);
    emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, n_tokens, false);
  }
}

Task<void> Handler::embeddings(HttpRequest& req, ResponseWriter& w) {
  simdjson::dom::element doc;
  if (parser_.parse(req.body.data(), req.body.size(), true).get(doc) != simdjson::SUCCESS ||
      !doc.is_object()) {
    co_await error(w, 400, "request body is not a JSON object", "invalid_request_error",
                   "invalid_json");
    co_return;
  }
  std::string_view model;
  if (doc["model"].get(model) != simdjson::SUCCESS) {
    co_await error(w, 400, "missing required field 'model'", "invalid_request_error",
                   "invalid_request");
    co_return;
  }
  if (!knownModel(model)) {
    const std::string msg = "The model `" + std::string(model) + "` does not exist.";
    co_await error(w, 404, msg, "invalid_request_error", "model_not_found");
    co_return;
  }
  std::vector<std::string_view> inputs;
  std::string_view one;
  simdjson::dom::array arr;
  if (doc["input"].get(one) == simdjson::SUCCESS) {
    inputs.push_back(one);
  } else if (doc["input"].get(arr) == simdjson::SUCCESS) {
    for (auto e : arr) {
      if (e.get(one) != simdjson::SUCCESS) {
        co_await error(w, 400, "'input' must be a string or an array of strings",
                       "invalid_request_error", "invalid_request");
        co_return;
      }
      inputs.push_back(one);
    }
  } else {
    co_await error(w, 400, "missing required field 'input'", "invalid_request_error",
                   "invalid_request");
    co_return;
  }
  const int dim = emu_.config().embedding_dim;
  std::string body = "{\"object\":\"list\",\"data\":[";
  int prompt = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    prompt += estimateTokens(inputs[i]);
    uint64_t h = std::hash<std::string_view>{}(inputs[i]);
    std::mt19937_64 g(h);
    std::normal_distribution<double> nd(0, 1);
    std::vector<double> v(static_cast<size_t>(dim));
    double norm = 0;
    for (auto& x : v) {
      x = nd(g);
      norm += x * x;
    }
    norm = std::sqrt(norm);
    if (i) body += ",";
    body += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":[";
    char num[32];
    for (int d = 0; d < dim; ++d) {
      std::snprintf(num, sizeof(num), d ? ",%.6f" : "%.6f", v[static_cast<size_t>(d)] / norm);
      body += num;
    }
    body += "]}";
  }
  body += "],\"model\":";
  net::appendJsonString(body, model);
  body += ",\"usage\":{\"prompt_tokens\":" + std::to_string(prompt) +
          ",\"total_tokens\":" + std::to_string(prompt) + "}}";
  co_await w.send(200, "application/json", body);
}

Task<void> Handler::models(ResponseWriter& w) {
  std::string body = "{\"object\":\"list\",\"data\":[";
  const auto created = std::to_string(unixSeconds());
  bool first = true;
  for (const auto& m : emu_.config().models) {
    if (!first) body += ",";
    first = false;
    body += "{\"id\":";
    net::appendJsonString(body, m);
    body += ",\"object\":\"model\",\"created\":" + created + ",\"owned_by\":\"infera-emulator\"}";
  }
  body += "]}";
  co_await w.send(200, "application/json", body);
}

Task<void> Handler::kserve(HttpRequest& req, ResponseWriter& w) {
  const std::string_view path = req.path();
  if (path == "/v2/health/live") {
    co_await w.send(200, "application/json", "{\"live\":true}");
    co_return;
  }
  if (path == "/v2/health/ready") {
    co_await w.send(200, "application/json", "{\"ready\":true}");
    co_return;
  }
  if (path == "/v2") {
    co_await w.send(200, "application/json",
                    "{\"name\":\"infera-emulator\",\"version\":\"1\",\"extensions\":[]}");
    co_return;
  }
  net::KServeModelPath kp;
  if (!net::parseKServeModelPath(path, kp)) {
    const std::string msg = "no route for " + std::string(path);
    co_await error(w, 404, msg, "invalid_request_error", "not_found");
    co_return;
  }
  const std::string_view model = kp.model;
  const std::string_view tail = kp.rest;
  if (!knownModel(model)) {
    const std::string body = "{\"error\":\"model '" + std::string(model) + "' is not found\"}";
    co_await w.send(404, "application/json", body);
    co_return;
  }
  if (tail.empty() && req.method == "GET") {
    std::string body = "{\"name\":";
    net::appendJsonString(body, model);
    body +=
        ",\"versions\":[\"1\"],\"platform\":\"infera-emulator\","
        "\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[-1,-1]}],"
        "\"outputs\":[{\"name\":\"OUTPUT0\",\"datatype\":\"FP32\",\"shape\":[-1,-1]}]}";
    co_await w.send(200, "application/json", body);
  } else if (tail == "/ready" && req.method == "GET") {
    std::string body = "{\"name\":";
    net::appendJsonString(body, model);
    body += ",\"ready\":true}";
    co_await w.send(200, "application/json", body);
  } else if (tail == "/infer" && req.method == "POST") {
    co_await kserveInfer(model, req, w);
  } else {
    const std::string msg = "no route for " + std::string(path);
    co_await error(w, 404, msg, "invalid_request_error", "not_found");
  }
}

// Infer: every numeric input becomes an output named OUTPUTi with each value doubled; BYTES
// inputs are echoed. Enough to check a round trip's shapes, types and values.
Task<void> Handler::kserveInfer(std::string_view model, HttpRequest& req, ResponseWriter& w) {
  simdjson::dom::element doc;
  simdjson::dom::array inputs;
  if (parser_.parse(req.body.data(), req.body.size(), true).get(doc) != simdjson::SUCCESS ||
      doc["inputs"].get(inputs) != simdjson::SUCCESS) {
    co_await w.send(400, "application/json",
                    "{\"error\":\"request must be a JSON object with 'inputs'\"}");
    co_return;
  }
  std::string body = "{\"model_name\":";
  net::appendJsonString(body, model);
  body += ",\"model_version\":\"1\"";
  std::string_view id;
  if (doc["id"].get(id) == simdjson::SUCCESS) {
    body += ",\"id\":";
    net::appendJsonString(body, id);
  }
  body += ",\"outputs\":[";
  size_t idx = 0;
  for (auto in : inputs) {
    std::string_view datatype;
    simdjson::dom::array shape, data;
    if (in["datatype"].get(datatype) != simdjson::SUCCESS ||
        in["shape"].get(shape) != simdjson::SUCCESS || in["data"].get(data) != simdjson::SUCCESS) {
      co_await w.send(400, "application/json",
                      "{\"error\":\"each input needs 'name', 'shape', 'datatype' and 'data'\"}");
      co_return;
    }
    if (idx) body += ",";
    body += "{\"name\":\"OUTPUT" + std::to_string(idx) + "\",\"datatype\":";
    net::appendJsonString(body, datatype);
    body += ",\"shape\":" + simdjson::minify(shape) + ",\"data\":[";
    bool first = true;
    // Flatten nested arrays (row-major), as the v2 protocol allows either form.
    std::vector<simdjson::dom::element> stack;
    for (auto e : data) stack.push_back(e);
    std::reverse(stack.begin(), stack.end());
    while (!stack.empty()) {
      auto e = stack.back();
      stack.pop_back();
      if (e.is_array()) {
        std::vector<simdjson::dom::element> kids;
        for (auto k : e.get_array()) kids.push_back(k);
        for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back(*it);
        continue;
      }
      if (!first) body += ",";
      first = false;
      double d;
      bool bv;
      std::string_view s;
      if (e.get(d) == simdjson::SUCCESS) {
        char num[32];
        std::snprintf(num, sizeof(num), "%.9g", d * 2);
        body += num;
      } else if (e.get(bv) == simdjson::SUCCESS) {
        body += bv ? "true" : "false";
      } else if (e.get(s) == simdjson::SUCCESS) {
        net::appendJsonString(body, s);
      } else {
        body += "null";
      }
    }
    body += "]}";
    ++idx;
  }
  body += "]}";
  co_await w.send(200, "application/json", body);
}

}  // namespace

void FaultControl::set(const FaultConfig& f) {
  error_rate = f.error_rate;
  error_status = f.error_status;
  added_latency_ms = f.added_latency_ms;
  hang_rate = f.hang_rate;
  disconnect_rate = f.disconnect_rate;
  disconnect_after_tokens = f.disconnect_after_tokens;
}

void readEmulatorConfig(ConfigReader& r, EmulatorConfig& cfg) {
  r.optional("host", cfg.host);
  int port = cfg.port;
  r.optional("port", port, 0, 65535);
  cfg.port = static_cast<uint16_t>(port);
  r.optional("workers", cfg.workers, 1, 64);
  r.optional("models", cfg.models);
  r.optional("ttft_ms", cfg.ttft_ms, 0, 600'000);
  r.optional("token_ms", cfg.token_ms, 0, 60'000);
  r.optional("default_max_tokens", cfg.default_max_tokens, 0, 1 << 20);
  r.optional("embedding_dim", cfg.embedding_dim, 1, 65536);
  int64_t seed = static_cast<int64_t>(cfg.seed);
  r.optional("seed", seed, 0);
  cfg.seed = static_cast<uint64_t>(seed);
  int64_t ledger = static_cast<int64_t>(cfg.usage_ledger);
  r.optional("usage_ledger", ledger, 0, 10'000'000);
  cfg.usage_ledger = static_cast<size_t>(ledger);
  r.object("faults", [&](ConfigReader& f) {
    f.optional("error_rate", cfg.faults.error_rate, 0, 1);
    f.optional("error_status", cfg.faults.error_status, 400, 599);
    f.optional("added_latency_ms", cfg.faults.added_latency_ms, 0, 600'000);
    f.optional("hang_rate", cfg.faults.hang_rate, 0, 1);
    f.optional("disconnect_rate", cfg.faults.disconnect_rate, 0, 1);
    f.optional("disconnect_after_tokens", cfg.faults.disconnect_after_tokens, 0, 1 << 20);
  });
  if (cfg.models.empty()) r.error("models", "must name at least one model");
}

std::string_view emulatedToken(int i) {
  return kWords[static_cast<size_t>(i) % (sizeof(kWords) / sizeof(kWords[0]))];
}

int estimateTokens(std::string_view text) {
  int words = 0;
  bool in_word = false;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return std::max(words, 1);
}

Result<std::unique_ptr<Emulator>> Emulator::start(const EmulatorConfig& config) {
  auto emu = std::make_unique<EmulatorImpl>(config);
  INFERA_RETURN_IF_ERROR(emu->init());
  return std::unique_ptr<Emulator>(std::move(emu));
}

}  // namespace infera::emulator
