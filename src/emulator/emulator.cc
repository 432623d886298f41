#include "emulator/emulator.h"

#include <simdjson.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <future>
#include <mutex>
#include <random>
#include <unordered_map>

#include "core/log.h"
#include "emulator/internal/engine.h"
#include "emulator/internal/scoring.h"
#include "net/loops.h"
#include "net/server.h"
#include "net/sse.h"
#include "obs/metrics.h"

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
  int lora = 0;                  // engine mode: 1 + the adapter's index, 0 for the base model
  std::vector<uint32_t> tokens;  // engine mode: the prompt's token ids (docs/emulator.md)
  // Chat with tools (docs/emulator.md "Tool calls"): the function it calls and the arguments it
  // makes up from the function's parameters; empty: an answer in text.
  std::string tool_name;
  std::string tool_arguments;
};

// Arguments for a function's JSON-schema parameters: each property a fixed value of its type
// ("emulated", 1, true, [] or {}), so tests know what comes back.
std::string emulatedArguments(simdjson::dom::element parameters) {
  std::string out = "{";
  simdjson::dom::object props;
  if (parameters["properties"].get(props) == simdjson::SUCCESS) {
    for (auto [key, schema] : props) {
      std::string_view type;
      if (schema["type"].get(type) != simdjson::SUCCESS) type = "string";
      if (out.size() > 1) out += ',';
      net::appendJsonString(out, key);
      out += ':';
      if (type == "integer" || type == "number") {
        out += '1';
      } else if (type == "boolean") {
        out += "true";
      } else if (type == "array") {
        out += "[]";
      } else if (type == "object") {
        out += "{}";
      } else {
        out += "\"emulated\"";
      }
    }
  }
  return out + "}";
}

void appendUsage(std::string& out, int prompt, int completion) {
  out += "{\"prompt_tokens\":";
  out += std::to_string(prompt);
  out += ",\"total_tokens\":";
  out += std::to_string(prompt + completion);
  out += ",\"completion_tokens\":";
  out += std::to_string(completion);
  out += "}";
}

// One engine model on the emulator's single loop (engine mode requires workers: 1, so the model,
// its step loop, the handlers and /metrics share one thread and need no lock). Handlers queue a
// request with a Sink and wait on its timer; each finished step updates the sinks and cancels
// their timers to wake them.
class EngineRuntime {
 public:
  struct Sink {
    net::asio::steady_timer* wake = nullptr;
    int tokens = 0;         // output tokens produced so far
    bool finished = false;  // every token produced (the request left the engine)
    bool stopped = false;   // the emulator is stopping
    bool max_tokens_given = false;
    int64_t first_token_us = 0;
    int64_t last_token_us = 0;
  };

  EngineRuntime(const EmulatorConfig& cfg, net::asio::io_context& ctx)
      : config_(cfg.engine),
        model_(cfg.engine),
        idle_(ctx),
        step_timer_(ctx),
        epoch_(net::SteadyClock::now()),
        metrics_(1) {
    model_name_ =
        config_.served_model_name.empty() ? cfg.models.front() : config_.served_model_name;
    declareMetrics();
  }

  void start(net::asio::io_context& ctx) { net::spawn(ctx, run(), "emulated engine"); }

  std::string refuse(size_t prompt_tokens, int max_tokens) const {
    return model_.refuse(prompt_tokens, max_tokens);
  }
  uint64_t add(std::vector<uint32_t> prompt, int max_tokens, int lora, Sink* sink) {
    const uint64_t id = model_.add(std::move(prompt), max_tokens, lora, nowUs());
    sinks_.emplace(id, sink);
    idle_.cancel();
    return id;
  }
  void abort(uint64_t id) {
    if (sinks_.erase(id) == 0) return;
    model_.abort(id);
    success_abort_->inc(0);
    idle_.cancel();  // freed blocks may let a waiting request in
  }
  // On the loop: ends the step loop and wakes every waiting handler.
  void shutdown() {
    stopped_ = true;
    for (auto& [id, sink] : sinks_) {
      sink->stopped = true;
      sink->wake->cancel();
    }
    sinks_.clear();
    idle_.cancel();
    step_timer_.cancel();
  }
  std::string scrape();
  const std::string& modelName() const { return model_name_; }

 private:
  int64_t nowUs() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(net::SteadyClock::now() - epoch_)
        .count();
  }

  void declareMetrics();
  void observe(const StepOutput& o, int64_t end_us, Sink& sink);
  Task<void> run();

  EngineConfig config_;
  EngineModel model_;
  std::unordered_map<uint64_t, Sink*> sinks_;
  net::asio::steady_timer idle_;
  net::asio::steady_timer step_timer_;
  net::SteadyClock::time_point epoch_;
  bool stopped_ = false;
  std::string model_name_;
  obs::MetricsRegistry metrics_;
  obs::Histogram* ttft_ = nullptr;
  obs::Histogram* itl_ = nullptr;
  obs::Histogram* tpot_ = nullptr;
  obs::Histogram* e2e_ = nullptr;
  obs::Histogram* queue_ = nullptr;
  obs::Histogram* prefill_time_ = nullptr;
  obs::Histogram* decode_time_ = nullptr;
  obs::Counter* success_length_ = nullptr;
  obs::Counter* success_stop_ = nullptr;
  obs::Counter* success_abort_ = nullptr;
  obs::Family* lora_info_ = nullptr;
  std::vector<std::string> lora_values_;
  std::vector<StepOutput> outputs_;
};

Task<void> EngineRuntime::run() {
  boost::system::error_code ec;
  while (!stopped_) {
    const auto start = net::SteadyClock::now();
    const int64_t start_us = nowUs();
    const int64_t step_us = model_.hasWork() ? model_.schedule(start_us) : 0;
    if (step_us == 0) {
      // Nothing can run: wait for a request to arrive or leave.
      idle_.expires_at(net::Deadline::max());
      co_await idle_.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
      continue;
    }
    step_timer_.expires_at(start + std::chrono::microseconds(step_us));
    co_await step_timer_.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
    if (stopped_) break;
    const int64_t end_us = start_us + step_us;
    outputs_.clear();
    model_.complete(end_us, outputs_);
    for (const StepOutput& o : outputs_) {
      const auto it = sinks_.find(o.id);
      if (it == sinks_.end()) continue;  // aborted requests leave the model with their sink
      Sink* sink = it->second;
      observe(o, end_us, *sink);
      sink->tokens = o.num_output;
      if (o.finished) {
        sink->finished = true;
        sinks_.erase(it);
      }
      sink->wake->cancel();
    }
  }
}

void EngineRuntime::declareMetrics() {
  // vLLM V1's names, types, help texts and buckets (vllm/v1/metrics/loggers.py), labelled
  // engine and model_name. Gauges and counters the model keeps are read at scrape time (on the
  // loop, as the model).
  const std::vector<std::string> labels = {"engine", "model_name"};
  const std::vector<std::string> values = {"0", model_name_};
  auto gauge = [&](const char* name, const char* help, std::function<double()> fn) {
    metrics_.gaugeFamily(name, help, labels)->setCallback(values, std::move(fn));
  };
  auto counter = [&](const char* name, const char* help, std::function<double()> fn) {
    metrics_.counterFamily(name, help, labels)->setCallback(values, std::move(fn));
  };
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        [this] { return model_.numRunning(); });
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        [this] { return model_.numWaiting(); });
  auto* by_reason = metrics_.gaugeFamily(
      "vllm:num_requests_waiting_by_reason",
      "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
      "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
      "status). Sum of all reasons equals vllm:num_requests_waiting.",
      {"engine", "model_name", "reason"});
  by_reason->setCallback({"0", model_name_, "capacity"},
                         [this] { return model_.numWaiting() - model_.numDeferred(); });
  by_reason->setCallback({"0", model_name_, "deferred"}, [this] { return model_.numDeferred(); });
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        [this] { return model_.kvUsage(); });
  counter("vllm:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.",
          [this] { return static_cast<double>(model_.counters().prefix_queries); });
  counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
          [this] { return static_cast<double>(model_.counters().prefix_hits); });
  counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
          [this] { return static_cast<double>(model_.counters().preemptions); });
  counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
          [this] { return static_cast<double>(model_.counters().prompt_tokens); });
  counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
          [this] { return static_cast<double>(model_.counters().generation_tokens); });
  auto* success = metrics_.counterFamily("vllm:request_success_total",
                                         "Count of successfully processed requests.",
                                         {"engine", "finished_reason", "model_name"});
  success_length_ = success->counter({"0", "length", model_name_});
  success_stop_ = success->counter({"0", "stop", model_name_});
  success_abort_ = success->counter({"0", "abort", model_name_});
  auto histogram = [&](const char* name, const char* help, std::vector<double> bounds) {
    return metrics_.histogramFamily(name, help, labels, std::move(bounds))->histogram(values);
  };
  ttft_ =
      histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                 1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0});
  const std::vector<double> token_bounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                            0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                            7.5,  10.0,  20.0, 40.0,  80.0};
  itl_ = histogram("vllm:inter_token_latency_seconds",
                   "Histogram of inter-token latency in seconds.", token_bounds);
  tpot_ = histogram("vllm:request_time_per_output_token_seconds",
                    "Histogram of time_per_output_token_seconds per request.", token_bounds);
  const std::vector<double> request_bounds = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                              5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                              60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  e2e_ = histogram("vllm:e2e_request_latency_seconds",
                   "Histogram of e2e request latency in seconds.", request_bounds);
  queue_ = histogram("vllm:request_queue_time_seconds",
                     "Histogram of time spent in WAITING phase for request.", request_bounds);
  prefill_time_ =
      histogram("vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.", request_bounds);
  decode_time_ = histogram("vllm:request_decode_time_seconds",
                           "Histogram of time spent in DECODE phase for request.", request_bounds);
  // vLLM sets this gauge to the current time under the adapters' labels; one series is kept
  // (the current adapters), so its cardinality stays bounded.
  lora_info_ = metrics_.gaugeFamily("vllm:lora_requests_info", "Running stats on lora requests.",
                                    {"max_lora", "waiting_lora_adapters", "running_lora_adapters"});
}

std::string EngineRuntime::scrape() {
  if (!config_.lora_adapters.empty()) {
    auto names = [this](const std::vector<int>& ids) {
      std::string out;
      for (int id : ids) {
        if (!out.empty()) out += ",";
        out += config_.lora_adapters[static_cast<size_t>(id - 1)];
      }
      return out;
    };
    std::vector<std::string> values = {std::to_string(config_.max_loras),
                                       names(model_.waitingLoras()), names(model_.runningLoras())};
    if (values != lora_values_) {
      if (!lora_values_.empty()) lora_info_->remove(lora_values_);
      lora_values_ = values;
      lora_info_->gauge(values);
    }
    lora_info_->gauge(values)->set(static_cast<double>(unixSeconds()));
  }
  return metrics_.scrape();
}

void EngineRuntime::observe(const StepOutput& o, int64_t end_us, Sink& sink) {
  constexpr double kUs = 1e-6;
  if (o.token && o.num_output == 1) {
    ttft_->observe(0, static_cast<double>(end_us - o.arrival_us) * kUs);
    sink.first_token_us = end_us;
  } else if (o.token) {
    itl_->observe(0, static_cast<double>(end_us - sink.last_token_us) * kUs);
  }
  if (o.token) sink.last_token_us = end_us;
  if (o.finished) {
    const int64_t scheduled = o.first_scheduled_us < 0 ? o.arrival_us : o.first_scheduled_us;
    const int64_t first = sink.first_token_us > 0 ? sink.first_token_us : end_us;
    e2e_->observe(0, static_cast<double>(end_us - o.arrival_us) * kUs);
    queue_->observe(0, static_cast<double>(scheduled - o.arrival_us) * kUs);
    prefill_time_->observe(0, static_cast<double>(first - scheduled) * kUs);
    decode_time_->observe(0, static_cast<double>(end_us - first) * kUs);
    if (o.num_output > 1) {
      tpot_->observe(0, static_cast<double>(end_us - first) * kUs / (o.num_output - 1));
    }
    // max_tokens always ends an emulated generation: "length" when the request set it.
    (sink.max_tokens_given ? success_length_ : success_stop_)->inc(0);
  }
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
  // A chat answer that calls p.tool_name (whole, or streamed as vLLM streams tool calls).
  Task<void> callTool(HttpRequest& req, ResponseWriter& w, const ParsedRequest& p);
  Task<void> embeddings(HttpRequest& req, ResponseWriter& w);
  // Rerank, score, tokenize and detokenize (internal/scoring.h).
  Task<void> scoring(HttpRequest& req, ResponseWriter& w, std::string_view path);
  Task<void> models(ResponseWriter& w);
  Task<void> kserve(HttpRequest& req, ResponseWriter& w);
  Task<void> kserveInfer(std::string_view model, HttpRequest& req, ResponseWriter& w);
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  // Sleeps until `until`, in slices, returning early once the emulator stops or *gone is set, so
  // shutdown never waits for a long emulated generation.
  Task<void> sleepFor(net::Deadline until, const bool* gone = nullptr);
  // Engine mode: waits until the engine produced `tokens` tokens (and finished, if asked);
  // false when the client left or the emulator stops.
  Task<bool> waitForEngine(EngineRuntime::Sink& sink, net::asio::steady_timer& wake, int tokens,
                           bool finished, const bool& gone);
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
    if (config_.engine.enabled && config_.workers != 1) {
      return Status::invalidArgument(
          "an emulator with an engine model runs on one loop: workers "
          "must be 1");
    }
    net::ServerConfig sc;
    sc.host = config_.host;
    sc.port = config_.port;
    sc.max_body_bytes = 64 << 20;
    sc.tls = config_.tls;
    loops_.start();
    if (config_.engine.enabled) {
      engine_ = std::make_unique<EngineRuntime>(config_, loops_.loop(0));
      engine_->start(loops_.loop(0));
    }
    auto server = net::HttpServer::create(loops_, sc, [this](int i, net::asio::io_context&) {
      return std::make_unique<Handler>(*this, i);
    });
    if (!server.ok()) {
      stopEngine();
      loops_.stop();
      loops_.shutdown();
      engine_.reset();
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
    stopEngine();
    server_->drain(std::chrono::milliseconds(500));
    server_.reset();
    loops_.stop();
    if (engine_) {
      // The engine's timers belong to the loops: their handlers go first, then the engine.
      loops_.shutdown();
      engine_.reset();
    }
  }
  // The engine model, for engine mode's handlers (on loop 0); null in the simple mode.
  EngineRuntime* engine() { return engine_.get(); }

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
  std::unique_ptr<EngineRuntime> engine_;
  std::atomic<bool> stopping_{false};

  void stopEngine() {
    if (!engine_) return;
    // Wakes every handler waiting for tokens so the drain below ends them; runs on the loop.
    std::promise<void> done;
    auto future = done.get_future();
    net::asio::post(loops_.loop(0), [this, &done] {
      engine_->shutdown();
      done.set_value();
    });
    future.wait();
  }
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
  // Engine mode reads the prompt's token ids (docs/emulator.md "Tokens"); the count is the same
  // in both modes: a token per word, and 3 per chat message for its role and framing.
  const EngineConfig& ec = emu_.config().engine;
  std::vector<uint32_t>* ids = ec.enabled ? &p.tokens : nullptr;
  if (ids != nullptr) {
    for (size_t i = 0; i < ec.lora_adapters.size(); ++i) {
      if (ec.lora_adapters[i] == p.model) p.lora = static_cast<int>(i) + 1;
    }
  }
  auto addText = [&](std::string_view text) {
    if (ids != nullptr) {
      appendTokens(text, *ids);
      return static_cast<int>(0);
    }
    return estimateTokens(text);
  };
  int prompt = 0;
  if (chat) {
    simdjson::dom::array messages;
    if (doc["messages"].get(messages) != simdjson::SUCCESS) {
      return Status::invalidArgument("missing required field 'messages'");
    }
    for (auto m : messages) {
      std::string_view role;
      if (m["role"].get(role) != simdjson::SUCCESS) role = {};
      if (ids != nullptr) {
        ids->push_back(tokenId("<|im_start|>"));
        ids->push_back(tokenId(role));
      }
      std::string_view content;
      simdjson::dom::array parts;
      if (m["content"].get(content) == simdjson::SUCCESS) {
        prompt += addText(content);
      } else if (m["content"].get(parts) == simdjson::SUCCESS) {
        // Content parts: the text parts, in order, as one text.
        std::string text;
        for (auto part : parts) {
          std::string_view t;
          if (part["text"].get(t) == simdjson::SUCCESS) {
            text += t;
            text += ' ';
          }
        }
        prompt += addText(text);
      } else if (ids != nullptr) {
        appendTokens({}, *ids);
      }
      if (ids != nullptr) ids->push_back(tokenId("<|im_end|>"));
      prompt += 3;  // role and framing, as chat templates add
    }
  } else {
    std::string_view text;
    simdjson::dom::array arr;
    if (doc["prompt"].get(text) == simdjson::SUCCESS) {
      prompt = addText(text);
    } else if (doc["prompt"].get(arr) == simdjson::SUCCESS) {
      for (auto e : arr) {
        if (e.get(text) == simdjson::SUCCESS) prompt += addText(text);
      }
    } else {
      return Status::invalidArgument("missing required field 'prompt'");
    }
  }
  if (ids != nullptr) prompt = static_cast<int>(ids->size());
  p.prompt_tokens = std::max(prompt, 1);
  // Tools: unless tool_choice is "none" or the conversation's last turn is a tool's result, the
  // answer calls the named function (tool_choice), else the first one.
  simdjson::dom::array tools;
  if (chat && doc["tools"].get(tools) == simdjson::SUCCESS && tools.size() > 0) {
    std::string_view choice, wanted, last_role;
    const bool none = doc["tool_choice"].get(choice) == simdjson::SUCCESS && choice == "none";
    if (doc["tool_choice"]["function"]["name"].get(wanted) != simdjson::SUCCESS) wanted = {};
    simdjson::dom::array messages;
    if (doc["messages"].get(messages) == simdjson::SUCCESS && messages.size() > 0) {
      if (messages.at(messages.size() - 1)["role"].get(last_role) != simdjson::SUCCESS)
        last_role = {};
    }
    if (!none && last_role != "tool") {
      for (auto t : tools) {
        std::string_view name;
        if (t["function"]["name"].get(name) != simdjson::SUCCESS) continue;
        if (!wanted.empty() && name != wanted) continue;
        p.tool_name = std::string(name);
        p.tool_arguments = emulatedArguments(t["function"]["parameters"]);
        break;
      }
    }
  }
  return p;
}

Task<bool> Handler::waitForEngine(EngineRuntime::Sink& sink, net::asio::steady_timer& wake,
                                  int tokens, bool finished, const bool& gone) {
  boost::system::error_code ec;
  while (!gone && !sink.stopped && (sink.tokens < tokens || (finished && !sink.finished))) {
    wake.expires_at(net::Deadline::max());
    co_await wake.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
  }
  co_return !gone && !sink.stopped;
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
  } else if (path == "/metrics" && req.method == "GET" && emu_.engine() != nullptr) {
    const std::string body = emu_.engine()->scrape();
    co_await w.send(200, "text/plain; version=0.0.4; charset=utf-8", body);
  } else if (req.method == "POST" &&
             (path == "/v1/rerank" || path == "/rerank" || path == "/v2/rerank" ||
              path == "/v1/score" || path == "/score" || path == "/tokenize" ||
              path == "/detokenize")) {
    co_await scoring(req, w, path);
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
  ParsedRequest& p = *parsed;
  if (!knownModel(p.model) && p.lora == 0) {
    const std::string msg = "The model `" + p.model + "` does not exist.";
    co_await error(w, 404, msg, "invalid_request_error", "model_not_found");
    co_return;
  }
  if (!p.tool_name.empty() && emu_.engine() == nullptr) {
    co_await callTool(req, w, p);
    co_return;
  }
  auto& stats = emu_.mutableStats();
  FaultControl& f = emu_.faults();
  const int n_tokens = p.max_tokens >= 0 ? p.max_tokens : emu_.config().default_max_tokens;

  // Engine mode: the request queues in the engine model; its tokens come as the engine's steps
  // end. The guard takes it out of the engine however this coroutine ends.
  EngineRuntime* engine = emu_.engine();
  EngineRuntime::Sink sink;
  net::asio::steady_timer wake(co_await net::asio::this_coro::executor);
  bool gone = false;
  struct EngineGuard {
    EngineRuntime* engine = nullptr;
    uint64_t id = 0;
    ~EngineGuard() {
      if (engine != nullptr) engine->abort(id);
    }
  } engine_guard;
  if (engine != nullptr) {
    if (const std::string why = engine->refuse(p.tokens.size(), n_tokens); !why.empty()) {
      co_await error(w, 400, why, "BadRequestError", "invalid_request");
      co_return;
    }
    sink.wake = &wake;
    sink.max_tokens_given = p.max_tokens >= 0;
    w.watchDisconnect([&gone, &wake] {
      gone = true;
      wake.cancel();
    });
    engine_guard.id = engine->add(std::move(p.tokens), n_tokens, p.lora, &sink);
    engine_guard.engine = engine;
  }
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
    if (engine != nullptr) {
      if (!co_await waitForEngine(sink, wake, n_tokens, true, gone)) co_return;
    } else if (ttft.count() > 0 || per_token.count() > 0) {
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
  if (engine == nullptr) w.watchDisconnect([&gone] { gone = true; });
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
    if (engine != nullptr) {
      // vLLM sends the role chunk with the engine's first output.
      if (!co_await waitForEngine(sink, wake, std::min(n_tokens, 1), n_tokens == 0, gone)) {
        gone = true;
      }
    } else if (ttft.count() > 0) {
      co_await sleepFor(next, &gone);
    }
    if (gone || !co_await w.writeChunk(event)) {
      stats.aborted_streams.fetch_add(1, std::memory_order_relaxed);
      emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, 0, false);
      co_return;
    }
  }
  for (int i = 0; i < n_tokens; ++i) {
    if (engine != nullptr) {
      if (!gone && !co_await waitForEngine(sink, wake, i + 1, i + 1 == n_tokens, gone)) {
        gone = true;
      }
    } else if (i > 0 || !chat) {
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
  if (engine != nullptr && n_tokens == 0 && !gone &&
      !co_await waitForEngine(sink, wake, 0, true, gone)) {
    stats.aborted_streams.fetch_add(1, std::memory_order_relaxed);
    emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, 0, false);
    co_return;
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

Task<void> Handler::callTool(HttpRequest& req, ResponseWriter& w, const ParsedRequest& p) {
  // The call's tokens: the arguments' (by the emulator's rule) and one for the name.
  const int n_tokens = estimateTokens(p.tool_arguments) + 1;
  const std::string id = "chatcmpl-" + std::to_string(index_) + "-" + std::to_string(++next_id_);
  const std::string call_id = "call_" + std::to_string(index_) + "_" + std::to_string(next_id_);
  std::string head = "{\"id\":\"" + id + "\",\"object\":\"chat.completion";
  std::string tail = "\",\"created\":" + std::to_string(unixSeconds()) + ",\"model\":";
  net::appendJsonString(tail, p.model);
  tail += ",\"choices\":[";
  std::string name, args;
  net::appendJsonString(name, p.tool_name);
  net::appendJsonString(args, p.tool_arguments);
  auto& stats = emu_.mutableStats();
  const auto ttft = std::chrono::microseconds(emu_.faults().ttft_ms.load() * 1000);
  bool gone = false;
  w.watchDisconnect([&gone] { gone = true; });
  if (ttft.count() > 0) co_await sleepFor(net::SteadyClock::now() + ttft, &gone);
  if (gone) co_return;
  stats.completion_tokens.fetch_add(static_cast<uint64_t>(n_tokens), std::memory_order_relaxed);
  if (!p.stream) {
    std::string body = head + tail;
    body += "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{";
    body += "\"id\":\"" + call_id + "\",\"type\":\"function\",\"function\":{\"name\":" + name;
    body += ",\"arguments\":" + args + "}}]},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],";
    body += "\"usage\":";
    appendUsage(body, p.prompt_tokens, n_tokens);
    body += "}";
    const bool sent = co_await w.send(200, "application/json", body);
    emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, sent ? n_tokens : 0, sent);
    co_return;
  }
  // As vLLM streams a tool call: the role, the call's id and name with empty arguments, the
  // arguments in two pieces (the last with finish_reason), then usage when asked for.
  const std::string prefix = head + ".chunk" + tail;
  const std::string_view whole = p.tool_arguments;
  const size_t half = whole.size() / 2;
  std::string first_half, second_half;
  net::appendJsonString(first_half, whole.substr(0, half));
  net::appendJsonString(second_half, whole.substr(half));
  std::string event;
  auto chunk = [&](const std::string& choice, bool usage_null) {
    std::string c = prefix + choice + "]";
    if (usage_null && p.include_usage) c += ",\"usage\":null";
    c += "}";
    net::appendSseData(event, c);
  };
  chunk(
      R"({"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null})",
      true);
  chunk("{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"" + call_id +
            "\",\"type\":\"function\",\"function\":{\"name\":" + name +
            ",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}",
        true);
  chunk("{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":" +
            first_half + "}}]},\"logprobs\":null,\"finish_reason\":null}",
        true);
  chunk("{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":" +
            second_half + "}}]},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}",
        true);
  if (p.include_usage) {
    std::string c = prefix + "],\"usage\":";
    appendUsage(c, p.prompt_tokens, n_tokens);
    c += "}";
    net::appendSseData(event, c);
  }
  net::appendSseData(event, "[DONE]");
  const std::array<HttpHeader, 1> sse_headers{HttpHeader{"cache-control", "no-cache"}};
  bool sent = co_await w.start(200, "text/event-stream", sse_headers);
  if (sent) sent = co_await w.writeChunk(event);
  if (sent) sent = co_await w.finish();
  (sent ? stats.completed_streams : stats.aborted_streams).fetch_add(1, std::memory_order_relaxed);
  emu_.recordUsage(req.header("x-request-id"), p.prompt_tokens, n_tokens, sent);
}

Task<void> Handler::scoring(HttpRequest& req, ResponseWriter& w, std::string_view path) {
  simdjson::dom::element doc;
  if (parser_.parse(req.body.data(), req.body.size(), true).get(doc) != simdjson::SUCCESS ||
      !doc.is_object()) {
    co_await error(w, 400, "request body is not a JSON object", "invalid_request_error",
                   "invalid_json");
    co_return;
  }
  std::string_view model;
  if (doc["model"].get(model) == simdjson::SUCCESS && !knownModel(model)) {
    const std::string msg = "The model `" + std::string(model) + "` does not exist.";
    co_await error(w, 404, msg, "invalid_request_error", "model_not_found");
    co_return;
  }
  const std::string id = std::to_string(index_) + "-" + std::to_string(++next_id_);
  Result<std::string> answer = Status::internal("no answer");
  if (path.ends_with("rerank")) {
    answer = rerankAnswer(doc, "rerank-" + id);
  } else if (path.ends_with("score")) {
    answer = scoreAnswer(doc, "score-" + id, unixSeconds());
  } else if (path == "/tokenize") {
    answer = tokenizeAnswer(doc, 32768);
  } else {
    answer = detokenizeAnswer(doc);
  }
  if (!answer.ok()) {
    const std::string msg = answer.status().message();
    co_await error(w, 400, msg, "invalid_request_error", "invalid_request");
    co_return;
  }
  co_await w.send(200, "application/json", *answer);
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
  const EngineConfig& ec = emu_.config().engine;
  if (ec.enabled) {
    // vLLM lists each LoRA adapter as a model whose parent is the base model.
    for (const auto& a : ec.lora_adapters) {
      body += ",{\"id\":";
      net::appendJsonString(body, a);
      body += ",\"object\":\"model\",\"created\":" + created +
              ",\"owned_by\":\"infera-emulator\",\"root\":";
      net::appendJsonString(body, a);
      body += ",\"parent\":";
      net::appendJsonString(body, emu_.config().models.front());
      body += "}";
    }
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
  r.object("engine", [&](ConfigReader& e) {
    EngineConfig& ec = cfg.engine;
    ec.enabled = true;
    e.optional("enabled", ec.enabled);
    e.optional("block_size", ec.block_size, 1, 1024);
    e.optional("num_gpu_blocks", ec.num_gpu_blocks, 1, 10'000'000);
    e.optional("max_num_seqs", ec.max_num_seqs, 1, 65536);
    e.optional("max_num_batched_tokens", ec.max_num_batched_tokens, 1, 10'000'000);
    e.optional("max_model_len", ec.max_model_len, 1, 10'000'000);
    e.optional("enable_prefix_caching", ec.enable_prefix_caching);
    e.optional("step_base_ms", ec.step_base_ms, 0, 60'000);
    e.optional("prefill_ms_per_token", ec.prefill_ms_per_token, 0, 1000);
    e.optional("decode_ms_per_seq", ec.decode_ms_per_seq, 0, 1000);
    e.optional("kv_ms_per_ktoken", ec.kv_ms_per_ktoken, 0, 1000);
    e.optional("time_scale", ec.time_scale, 0.0001, 1000);
    e.optional("lora_adapters", ec.lora_adapters);
    e.optional("max_loras", ec.max_loras, 1, 1024);
    e.optional("lora_load_ms", ec.lora_load_ms, 0, 600'000);
    e.optional("served_model_name", ec.served_model_name);
    if (static_cast<int64_t>(ec.max_model_len) >
        static_cast<int64_t>(ec.num_gpu_blocks) * ec.block_size) {
      e.error("max_model_len",
              "must fit the KV cache (num_gpu_blocks x block_size = " +
                  std::to_string(static_cast<int64_t>(ec.num_gpu_blocks) * ec.block_size) +
                  " tokens)");
    }
    for (const auto& a : ec.lora_adapters) {
      if (std::find(cfg.models.begin(), cfg.models.end(), a) != cfg.models.end()) {
        e.error("lora_adapters", "'" + a + "' is also a model name");
      }
    }
  });
  if (cfg.engine.enabled && cfg.workers != 1) {
    r.error("workers",
            "must be 1 with engine: (one engine model runs on one loop, as vLLM's "
            "engine core is one process); run more emulators for more engines");
  }
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
