#include "gateway/internal/proxy.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/clock.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "gateway/internal/balancer.h"
#include "gateway/internal/exchange.h"
#include "net/trace.h"

namespace infera::gateway {

ProxyHandler::ProxyHandler(int shard, net::asio::io_context& ctx, GatewayMetrics& metrics,
                           obs::AccessLog* access_log, access::AccessWorker* access,
                           InferenceObserver* observer)
    : shard_(shard),
      ctx_(ctx),
      metrics_(metrics),
      access_log_(access_log),
      rng_(0x1f3a5b7c9d + static_cast<uint64_t>(shard) * 104729),
      parser_(std::make_unique<simdjson::dom::parser>()),
      ids_(static_cast<uint64_t>(monoNanos()) + static_cast<uint64_t>(shard) * 7777),
      access_(access),
      observer_(observer) {
  if (access_log_) {
    flush_timer_ = std::make_unique<net::asio::steady_timer>(ctx_);
    // Hands this worker's access-log buffer to the writer thread every 200 ms.
    struct Flusher {
      ProxyHandler* self;
      std::shared_ptr<bool>
          alive;  // false once the handler is gone (a queued run must not touch it)
      void operator()(const boost::system::error_code& ec) const {
        if (ec || !*alive) return;
        self->access_log_->flushShard(self->shard_);
        self->flush_timer_->expires_after(std::chrono::milliseconds(200));
        self->flush_timer_->async_wait(*this);
      }
    };
    flush_timer_->expires_after(std::chrono::milliseconds(200));
    flush_timer_->async_wait(Flusher{this, alive_});
  }
}

ProxyHandler::~ProxyHandler() {
  *alive_ = false;
  if (flush_timer_) flush_timer_->cancel();
  if (access_log_) access_log_->flushShard(shard_);
}

void ProxyHandler::setTable(std::shared_ptr<const RouteTable> table) {
  auto next_ptr = std::make_shared<StateVector>();
  StateVector& next = *next_ptr;
  std::unordered_map<std::string, std::shared_ptr<WorkerEndpoint>> by_key;
  next.reserve(table->endpoints.size());
  for (const auto& ep : table->endpoints) {
    auto& slot = by_key[ep.key];
    if (!slot) {
      net::PoolConfig pc;
      pc.connect_timeout = std::chrono::milliseconds(ep.deployment->timeouts.connect_ms);
      // Room for every connection this worker may have in flight to the endpoint: a smaller cap
      // closes connections after their request and opens new ones under load.
      pc.max_idle = static_cast<size_t>(ep.max_inflight_per_worker);
      const auto it = state_by_key_.find(ep.key);
      if (it != state_by_key_.end()) {
        slot = it->second;
        slot->pool->configure(pc);           // a reload may have changed the limits,
        slot->pool->setAddress(ep.address);  // the address or the TLS settings
      } else {
        slot = std::make_shared<WorkerEndpoint>();
        slot->pool = net::ConnectionPool::create(ctx_, ep.address, pc);
      }
    }
    // The table's shared state for this endpoint (a new one when it left a table and came back).
    slot->view = &ep.shared->views[static_cast<size_t>(shard_)];
    slot->view->in_flight.store(slot->inflight, std::memory_order_relaxed);
    slot->view->ewma_s.store(slot->ewma_s, std::memory_order_relaxed);
    next.push_back(slot);
  }
  state_ = std::move(next_ptr);
  state_by_key_ = std::move(by_key);
  table_ = std::move(table);
}

void ProxyHandler::hashPrompt(Exchange& x) {
  if (block_buffers_.empty()) {
    x.blocks = std::make_unique<uint64_t[]>(static_cast<size_t>(kMaxPrefixBlocks));
  } else {
    x.blocks = std::move(block_buffers_.back());
    block_buffers_.pop_back();
  }
  const EngineRoutingConfig& cfg = *x.route->engine;
  const size_t max_blocks = static_cast<size_t>(std::min(cfg.prefix_max_blocks, kMaxPrefixBlocks));
  x.n_blocks = promptBlockHashes(x.fields.root, static_cast<size_t>(cfg.prefix_block_bytes),
                                 std::span<uint64_t>(x.blocks.get(), max_blocks));
}

int ProxyHandler::pickEngine(Exchange& x, const RouteTable& table, const StateVector& state,
                             const std::vector<uint32_t>& candidates,
                             std::span<const uint32_t> tried, int64_t now_ns) {
  const Route& route = *x.route;
  const EngineRoutingConfig& cfg = *route.engine;
  EngineCandidate buf[64];
  size_t n = 0;
  uint64_t slots = 0;
  uint64_t session = 0;
  if (cfg.session_weight > 0) {
    const std::string_view id = x.req.header(cfg.session_header);
    if (!id.empty()) session = loraHash(id);
  }
  const int64_t stale_ns = cfg.stale_ms * 1'000'000;
  for (const uint32_t idx : candidates) {
    if (std::find(tried.begin(), tried.end(), idx) != tried.end()) continue;
    const Endpoint& ep = table.endpoints[idx];
    WorkerEndpoint& ws = *state[idx];
    if (!available(ep, ws, now_ns, x.batch_work)) continue;
    const EngineSignals& sig = ep.shared->engine;
    EngineCandidate c;
    c.index = idx;
    c.slot = ep.prefix_slot;
    c.known = freshSignals(sig, ws, now_ns, stale_ns);
    if (c.known) {
      c.load = sig.load.load(std::memory_order_relaxed) + ws.sent_since_scrape;
      c.waiting = sig.waiting.load(std::memory_order_relaxed) + ws.sent_since_scrape;
      c.kv_usage = std::max(0.0f, sig.kv_usage.load(std::memory_order_relaxed));
    }
    if (route.lora_hash != 0) {
      for (const auto& l : sig.loras)
        c.lora = c.lora || l.load(std::memory_order_relaxed) == route.lora_hash;
    }
    c.ewma_s = ws.ewma_s;
    if (c.ewma_s > 0) {
      const double age_ns = static_cast<double>(now_ns - ws.sampled_ns);
      if (age_ns > 1e8) c.ewma_s *= std::exp2(-age_ns / kEwmaHalfLifeNs);
    }
    if (session != 0) c.session = mix64(session ^ ep.key_hash);
    if (c.slot >= 0) slots |= uint64_t{1} << c.slot;
    buf[n++] = c;
  }
  uint16_t matched[64];
  const std::span<const uint64_t> blocks(x.blocks.get(), x.blocks ? x.n_blocks : 0);
  if (!blocks.empty() && slots != 0) route.prefix_index->match(blocks, slots, matched);
  const EngineChoice choice = pickEngineCandidate(cfg, std::span<const EngineCandidate>(buf, n),
                                                  matched, blocks.size(), rng_, route.turn.get());
  if (choice.position < 0) return -1;
  const EngineCandidate& chosen = buf[choice.position];
  ++state[chosen.index]->sent_since_scrape;
  if (!blocks.empty() && chosen.slot >= 0) {
    route.prefix_index->record(blocks, chosen.slot, static_cast<uint32_t>(now_ns / 1'000'000'000));
    const Endpoint& ep = table.endpoints[chosen.index];
    ep.prefix_hit_blocks->inc(shard_, choice.matched);
    ep.prefix_sent_blocks->inc(shard_, static_cast<double>(blocks.size()));
  }
  return static_cast<int>(chosen.index);
}
int ProxyHandler::pick(const RouteTable& table, const StateVector& state,
                       const std::vector<uint32_t>& candidates, std::span<const uint32_t> tried,
                       int64_t now_ns, Exchange* x) {
  // Engine-aware routes score up to 64 endpoints (the prefix index's slots); more balance by
  // latency.
  if (x != nullptr && x->route != nullptr && x->route->engine != nullptr &&
      candidates.size() <= 64) {
    return pickEngine(*x, table, state, candidates, tried, now_ns);
  }
  Candidate buf[64];
  std::vector<Candidate> big;
  size_t n = 0;
  const bool small = candidates.size() <= 64;
  for (const uint32_t idx : candidates) {
    if (std::find(tried.begin(), tried.end(), idx) != tried.end()) continue;
    const Endpoint& ep = table.endpoints[idx];
    const WorkerEndpoint& ws = *state[idx];
    if (!available(ep, ws, now_ns, x != nullptr && x->batch_work)) continue;
    double ewma = ws.ewma_s;
    if (ewma > 0) {
      const double age_ns = static_cast<double>(now_ns - ws.sampled_ns);
      if (age_ns > 1e8) ewma *= std::exp2(-age_ns / kEwmaHalfLifeNs);
    }
    Candidate c{idx, ewma, ws.inflight, ep.weight, ep.local};
    if (small) {
      buf[n++] = c;
    } else {
      big.push_back(c);
    }
  }
  std::span<const Candidate> span =
      small ? std::span<const Candidate>(buf, n) : std::span<const Candidate>(big);
  int loser = -1;
  const int pos = pickCandidate(span, table.region_margin, rng_, &loser);
  if (loser >= 0) state[span[static_cast<size_t>(loser)].index]->ewma_s *= kLoserDecay;
  return pos < 0 ? -1 : static_cast<int>(span[static_cast<size_t>(pos)].index);
}

void ProxyHandler::recordFailure(const RouteTable& table, const Endpoint& ep, int64_t now_ns) {
  EndpointShared& s = *ep.shared;
  const int failures = s.consecutive_failures.fetch_add(1, std::memory_order_relaxed) + 1;
  const OutlierConfig& o = table.outlier;
  if (failures >= o.consecutive_failures) {
    const int n = s.ejections.fetch_add(1, std::memory_order_relaxed) + 1;
    int64_t ms = o.base_ejection_ms;
    for (int i = 1; i < n && ms < o.max_ejection_ms; ++i) ms *= 2;
    ms = std::min(ms, o.max_ejection_ms);
    s.ejected_until_ns.store(now_ns + ms * 1'000'000, std::memory_order_relaxed);
    s.consecutive_failures.store(0, std::memory_order_relaxed);
    ep.deployment->ejections->inc(shard_);
  }
}

void ProxyHandler::recordSuccess(const Endpoint& ep, int64_t now_ns) {
  EndpointShared& s = *ep.shared;
  if (s.consecutive_failures.load(std::memory_order_relaxed) != 0) {
    s.consecutive_failures.store(0, std::memory_order_relaxed);
  }
  // A success after re-admission resets the ejection back-off.
  if (s.ejections.load(std::memory_order_relaxed) != 0 &&
      s.ejected_until_ns.load(std::memory_order_relaxed) <= now_ns) {
    s.ejections.store(0, std::memory_order_relaxed);
  }
}

Task<void> ProxyHandler::sendError(Exchange& x, int status, std::string_view message,
                                   std::string_view type, std::string_view code) {
  x.status = status;
  metrics_.errorCounter(code)->inc(shard_);
  const std::string body = x.api == ClientApi::kMessages ? anthropic::errorJson(status, message)
                                                         : net::errorJson(message, type, code);
  HttpHeader rid{"x-request-id", x.request_id};
  const std::span<const HttpHeader> headers = responseHeaders(x, rid);
  co_await x.w.send(status, "application/json", body, headers);
}

std::span<const HttpHeader> ProxyHandler::responseHeaders(Exchange& x, HttpHeader& rid) {
  if (x.extra.empty()) return std::span<const HttpHeader>(&rid, 1);
  if (x.extra.front().name != "x-request-id") x.extra.insert(x.extra.begin(), std::move(rid));
  return std::span<const HttpHeader>(x.extra);
}

void ProxyHandler::begin(Exchange& x) {
  x.table = table_;
  x.state = state_;
  x.start_ns = monoNanos();
  const std::string_view given_id = x.req.header("x-request-id");
  x.request_id = obs::isAcceptableRequestId(given_id) ? std::string(given_id) : ids_.next();
  metrics_.in_flight->add(shard_, 1);
}

Task<void> ProxyHandler::notReady(Exchange& x) {
  co_await sendError(x, 503, "gateway has no configuration yet", "server_error", "not_ready");
}

Task<void> ProxyHandler::unmatched(net::HttpRequest& req, net::ResponseWriter& w, int status,
                                   std::string allow) {
  Exchange x{req, w};
  if (req.path().starts_with("/v1/messages")) x.api = ClientApi::kMessages;  // Anthropic's shape
  const Served served(*this, x);
  const std::string_view path = req.path();
  if (status == 405) {
    const std::string msg_text = "use " + allow + " for " + std::string(path);
    co_await sendError(x, 405, msg_text, "invalid_request_error", "method_not_allowed");
  } else {
    const bool api = path.starts_with("/v1/") || path.starts_with("/v2");
    const std::string msg_text = (api ? "unknown endpoint " : "unknown path ") + std::string(path);
    co_await sendError(x, 404, msg_text, "invalid_request_error", "not_found");
  }
}

// The request's GenAI attributes on its server span (OpenTelemetry's GenAI semantic
// conventions: operation, model, usage), and the gateway's own (team, deployment, stream).
void ProxyHandler::traceExchange(Exchange& x) {
  net::RequestTrace& t = *x.req.trace;
  constexpr size_t root = net::RequestTrace::kRoot;
  const std::string_view path = x.req.path();
  const char* op = path.ends_with("/chat/completions") ? "chat"
                   : path.ends_with("/completions")    ? "text_completion"
                   : path.ends_with("/embeddings")     ? "embeddings"
                                                       : nullptr;
  if (op) t.attr(root, "gen_ai.operation.name", std::string(op));
  if (x.fields.has_model) t.attr(root, "gen_ai.request.model", x.fields.model);
  if (x.deployment) {
    t.attr(root, "gen_ai.response.model", x.deployment->upstream_model);
    t.attr(root, "infera.deployment", x.deployment->name);
  }
  if (x.grant) t.attr(root, "infera.team", std::string(x.grant.principal().team));
  if (x.usage.seen) {
    t.attr(root, "gen_ai.usage.input_tokens", x.usage.prompt);
    t.attr(root, "gen_ai.usage.output_tokens", x.usage.completion);
  }
  if (x.stream) {
    t.attr(root, "infera.stream", true);
    if (x.ttft_s > 0) t.attr(root, "infera.time_to_first_token_s", x.ttft_s);
  }
  if (x.cache_hit) t.attr(root, "infera.cache_hit", true);
  if (x.attempts > 1) t.attr(root, "infera.attempts", int64_t{x.attempts});
}

void ProxyHandler::finishExchange(Exchange& x) {
  if (x.req.trace && x.req.trace->recording()) traceExchange(x);
  if (x.blocks) block_buffers_.push_back(std::move(x.blocks));
  // A request of a flow-controlled route ended: its room may let a waiter go.
  if (x.route && x.route->engine && x.route->engine->flow_control) dispatch(x.route->model);
  if (x.grant) finishAccess(x);
  const int64_t end_ns = monoNanos();
  const double seconds = static_cast<double>(end_ns - x.start_ns) / 1e9;
  const int cls = codeClassIndex(x.status);
  if (x.route) {
    x.route->duration->observe(shard_, seconds);
    if (x.deployment) {
      x.deployment->requests_by_class[cls]->inc(shard_);
      if (x.usage.seen) {
        x.deployment->prompt_tokens->inc(shard_, static_cast<double>(x.usage.prompt));
        x.deployment->completion_tokens->inc(shard_, static_cast<double>(x.usage.completion));
      }
    } else {
      x.route->no_deployment_by_class[cls]->inc(shard_);
    }
    if (x.arm || x.keep_answer || x.shadow) finishExperiment(x, seconds);
  }
  if (access_log_) {
    obs::AccessRecord r;
    r.unix_ms = SystemClock::instance().unixMillis();
    r.request_id = x.request_id;
    r.method = x.req.method;
    r.path = x.client_path.empty() ? x.req.path() : std::string_view(x.client_path);
    if (x.route) r.model = x.route->model;
    if (x.deployment) r.deployment = x.deployment->name;
    if (x.endpoint) r.endpoint = x.endpoint->label;
    r.status = x.status;
    r.duration_s = seconds;
    r.ttfb_s = x.ttfb_s;
    r.attempts = x.attempts;
    r.stream = x.stream;
    r.bytes_out = x.bytes_out;
    access_log_->append(shard_, r);
  }
}

Task<void> ProxyHandler::handleModels(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{req, w};
  const Served served(*this, x);
  if (!x.table) {
    co_await notReady(x);
    co_return;
  }
  const HttpHeader rid{"x-request-id", x.request_id};
  if (!access_) {
    x.status = 200;
    co_await x.w.send(200, "application/json", x.table->models_json,
                      std::span<const HttpHeader>(&rid, 1));
    co_return;
  }
  const bool ok = co_await authenticate(x);
  if (!ok) co_return;
  // Only the models (and aliases) this key may use.
  const std::string body = modelsJson(*x.table, [&](const std::string& name, const Route& route) {
    return !access_->checkAccess(x.grant, access::ResourceKind::kModel, name, route.model);
  });
  x.grant.reset();  // listing models is not usage
  x.status = 200;
  co_await x.w.send(200, "application/json", body, std::span<const HttpHeader>(&rid, 1));
}

Task<void> ProxyHandler::handleOpenAi(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{req, w};
  if (req.path() == "/v1/messages") x.api = ClientApi::kMessages;
  if (req.path() == "/v1/responses") x.api = ClientApi::kResponses;
  const Served served(*this, x);
  if (!x.table) {
    co_await notReady(x);
    co_return;
  }
  net::RequestTrace* const trace = x.req.trace;
  if (access_) {
    const size_t span = trace ? trace->start("access.authenticate") : 0;
    const bool ok = co_await authenticate(x);
    if (trace) trace->end(span);
    if (!ok) co_return;
  }
  // Anthropic's Messages, OpenAI's Responses: translated to a chat completion before anything
  // reads it.
  if (x.api != ClientApi::kOpenAi && !co_await readTranslated(x, false)) co_return;
  auto fields = scanRequest(*parser_, x.req.body, access_ && access_->cacheEnabled());
  if (!fields.ok()) {
    co_await sendError(x, 400, fields.status().message(), "invalid_request_error", "invalid_json");
    co_return;
  }
  x.fields = std::move(*fields);
  if (!x.fields.has_model) {
    co_await sendError(x, 400, "you must provide a model parameter", "invalid_request_error",
                       "missing_model");
    co_return;
  }
  const Route* named = findRoute(*x.table, x.fields.model);
  const Targets targets =
      named ? resolveRoute(*named, Protocol::kOpenAi,
                           named->experiment() ? requestKeys(x, *named) : RequestKeys{})
            : Targets{};
  if (!targets.route) {
    const std::string msg_text =
        "The model `" + x.fields.model + "` does not exist or you do not have access to it.";
    co_await sendError(x, 404, msg_text, "invalid_request_error", "model_not_found");
    co_return;
  }
  x.route = targets.route;
  x.rewrite_model = true;
  x.stream = x.fields.stream;
  x.usage.input_only = tokenUse(x.req.path()) == TokenUse::kInput;
  if (x.route->engine && x.route->engine->prefix_weight > 0) hashPrompt(x);
  if (targets.split || targets.shadow || targets.route->tag_responses ||
      targets.route->capture.enabled()) {
    applyTargets(x, targets);
  }
  if (x.grant) {
    const size_t span = trace ? trace->start("access.admit") : 0;
    const bool go_on = co_await admit(x);
    if (trace) trace->end(span);
    if (!go_on) co_return;
  }
  // Only where it does anything: a coroutine frame per request otherwise (the hot path).
  if ((x.route->engine && x.route->engine->flow_control) || x.route->batch_capped) {
    const size_t span = trace ? trace->start("gateway.flow_control") : 0;
    const bool go_on = co_await prioritize(x, *targets.endpoints, true);
    if (trace) {
      trace->attr(span, "infera.priority", std::string(priorityName(x.priority)));
      trace->end(span);
    }
    if (!go_on) co_return;
  }
  co_await forward(x, *targets.endpoints);
}

Task<void> ProxyHandler::handleKServeMeta(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{req, w};
  const Served served(*this, x);
  if (!x.table) {
    co_await notReady(x);
    co_return;
  }
  const std::string_view path = x.req.path();
  const HttpHeader rid{"x-request-id", x.request_id};
  x.status = 200;
  std::string_view body = path == "/v2/health/live" ? "{\"live\":true}"
                          : path == "/v2/health/ready"
                              ? "{\"ready\":true}"
                              : "{\"name\":\"infera\",\"version\":\"0.1.0\",\"extensions\":[]}";
  co_await x.w.send(200, "application/json", body, std::span<const HttpHeader>(&rid, 1));
}

Task<void> ProxyHandler::handleKServe(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{req, w};
  const Served served(*this, x);
  if (!x.table) {
    co_await notReady(x);
    co_return;
  }
  const std::string_view path = x.req.path();
  net::KServeModelPath kp;
  if (!net::parseKServeModelPath(path, kp)) {
    const std::string msg_text = "unknown endpoint " + std::string(path);
    co_await sendError(x, 404, msg_text, "invalid_request_error", "not_found");
    co_return;
  }
  // Who is calling comes first: a caller without a key learns nothing of which models exist.
  if (access_) {
    const bool ok = co_await authenticate(x);
    if (!ok) co_return;
  }
  std::string model(kp.model);
  x.kserve_tail = std::string(kp.after_model);  // forwarded as given, versions included
  // A registry version is served as "name/N": /v2/models/name/versions/N/... names it.
  if (!kp.version.empty()) {
    std::string versioned = model + "/" + std::string(kp.version);
    if (findRoute(*x.table, versioned)) {
      model = std::move(versioned);
      x.kserve_tail = std::string(kp.rest);
    }
  }
  const Route* named = findRoute(*x.table, model);
  const Targets targets =
      named ? resolveRoute(*named, Protocol::kKServe,
                           named->experiment() ? requestKeys(x, *named) : RequestKeys{})
            : Targets{};
  if (targets.route &&
      (targets.split || targets.route->tag_responses || targets.route->capture.enabled())) {
    Targets no_shadow = targets;
    no_shadow.shadow = nullptr;  // shadows mirror OpenAI requests only
    applyTargets(x, no_shadow);
  }
  if (!targets.route) {
    const std::string msg_text = "model '" + model + "' is not found";
    co_await sendError(x, 404, msg_text, "invalid_request_error", "model_not_found");
    co_return;
  }
  x.route = targets.route;
  if (x.grant) {
    const bool go_on = co_await admit(x);
    if (!go_on) co_return;
  }
  if (targets.endpoints->empty()) {
    const std::string msg_text = "model '" + model + "' has no KServe v2 endpoints";
    co_await sendError(x, 404, msg_text, "invalid_request_error", "model_not_found");
    co_return;
  }
  if (x.route->batch_capped && !co_await prioritize(x, *targets.endpoints, false)) co_return;
  co_await forward(x, *targets.endpoints);
}

// What the last failed try (or a deployment at its limit) leaves for the answer when no try got
// one.
struct ProxyHandler::Failure {
  int status = 503;
  std::string message;  // built only on failure
  std::string_view code = "no_healthy_endpoint";
  std::string_view limit_type = "requests";  // of the last deployment refusal
  int64_t retry_ms = -1;                     // the soonest a refusing deployment has room again
};

void ProxyHandler::clientLeft(Exchange& x, net::UpstreamConnection* conn) {
  if (conn) conn->abort();
  x.current = nullptr;
  x.aborted = true;
  if (x.route) x.route->client_aborts->inc(shard_);
}

Task<bool> ProxyHandler::reserveDeployment(Exchange& x, const Deployment& dep, Failure& f) {
  auto reserve = access_->admitResource(x.grant, dep.limited);
  const std::optional<access::ResourceFull> full = co_await std::move(reserve);
  if (!full) co_return true;
  if (full->retry_after_ms >= 0) {
    f.limit_type = full->tokens ? "tokens" : "requests";
    f.retry_ms = f.retry_ms < 0 ? full->retry_after_ms : std::min(f.retry_ms, full->retry_after_ms);
  }
  f.status = 429;
  f.code = "deployment_rate_limited";
  f.message = "deployment " + dep.name + " of model " + dep.model + " is at its rate limit";
  co_return false;
}

Task<Result<const net::ClientResponseHead*>> ProxyHandler::tryEndpoint(
    Exchange& x, const Endpoint& ep, WorkerEndpoint& ws,
    std::unique_ptr<net::UpstreamConnection>& conn, Deadline total) {
  const Deployment& dep = *ep.deployment;
  std::string_view body = x.req.body;
  buildUpstreamBody(x, dep, body);
  std::string_view target = x.req.target;
  if (ep.protocol == Protocol::kKServe) {
    x.target = ep.address.base_path + "/v2/models/" + dep.upstream_model + x.kserve_tail;
    const auto q = x.req.target.find('?');
    if (q != std::string::npos) x.target += x.req.target.substr(q);
    target = x.target;
  } else if (!ep.address.base_path.empty()) {
    x.target = ep.address.base_path + x.req.target;
    target = x.target;
  }
  // Headers go to the upstream as the client sent them, minus hop-by-hop headers and the
  // client's credentials, filtered while the request head is written (no copies).
  net::ClientRequest creq;
  creq.method = x.req.method;
  creq.target = target;
  creq.host = ep.host_header;
  creq.headers = x.req.headers;
  creq.body = body;
  creq.skip_hop_by_hop = true;
  creq.skip_authorization = true;
  creq.request_id = x.request_id;
  std::string traceparent;
  if (net::RequestTrace* trace = x.req.trace) {
    // One client span per attempt, named as OpenTelemetry names HTTP client spans; the backend
    // continues the trace from it.
    x.upstream_span = trace->start(std::string(x.req.method), net::SpanKind::kClient);
    trace->attr(x.upstream_span, "server.address", ep.address.host);
    trace->attr(x.upstream_span, "server.port", int64_t{ep.address.port});
    trace->attr(x.upstream_span, "infera.deployment", dep.name);
    trace->attr(x.upstream_span, "infera.endpoint", ep.label);
    traceparent = trace->traceparent(x.upstream_span);
    creq.traceparent = traceparent;
  }
  const Deadline try_deadline = std::min(total, deadlineAfter(dep.timeouts.first_byte_ms));
  int64_t sent_ns = monoNanos();
  // A pooled connection the upstream closed meanwhile fails before any response byte (on send,
  // or EOF/reset instead of a head): the upstream did not take the request, so it is sent once
  // more on a new connection, without counting as a try.
  Result<const net::ClientResponseHead*> head = Status::unavailable("not sent");
  for (int fresh = 0; fresh < 2; ++fresh) {
    auto c = co_await ws.pool->acquire(std::min(total, deadlineAfter(dep.timeouts.connect_ms)),
                                       fresh == 1);
    if (!c.ok()) {
      head = c.takeStatus();
      break;
    }
    conn = std::move(*c);
    x.current = conn.get();
    sent_ns = monoNanos();  // latency samples exclude connecting
    Status sent = co_await conn->send(creq, try_deadline);
    const bool send_failed = !sent.isOk();
    if (send_failed) {
      head = std::move(sent);
    } else {
      x.sent_upstream = true;
      head = co_await conn->readHead(try_deadline);
    }
    const bool stale = conn->reused() && (send_failed || conn->closedBeforeResponse());
    if (head.ok() || !stale || x.client_gone || SteadyClock::now() >= try_deadline) break;
    x.current = nullptr;
    conn.reset();
  }
  if (head.ok()) {
    const int64_t head_ns = monoNanos();
    const double latency = static_cast<double>(head_ns - sent_ns) / 1e9;
    x.ttfb_s = latency;
    dep.upstream_latency->observe(shard_, latency);
    ws.ewma_s = ws.ewma_s == 0 ? latency : (1 - kEwmaAlpha) * ws.ewma_s + kEwmaAlpha * latency;
    ws.sampled_ns = head_ns;
    ws.view->ewma_s.store(ws.ewma_s, std::memory_order_relaxed);
  }
  co_return head;
}

Task<void> ProxyHandler::forward(Exchange& x, const std::vector<uint32_t>& candidates) {
  const RouteTable& table = *x.table;
  const Deployment& first = *x.route->first_deployment;
  const Deadline total = deadlineAfter(first.timeouts.total_ms);
  const int max_attempts = std::max(1, first.retry.attempts);
  x.w.watchDisconnect([&x] {
    x.client_gone = true;
    if (x.current) x.current->abort();
  });

  std::array<uint32_t, 16> tried_buf;  // attempts <= 10 (config): no allocation
  size_t n_tried = 0;
  Failure f;
  for (int attempt = 0; attempt < max_attempts && !x.client_gone && n_tried < tried_buf.size();
       ++attempt) {
    const int idx = pick(table, *x.state, candidates,
                         std::span<const uint32_t>(tried_buf.data(), n_tried), monoNanos(), &x);
    if (idx < 0) break;
    const Endpoint& ep = table.endpoints[static_cast<size_t>(idx)];
    const Deployment& dep = *ep.deployment;
    std::shared_ptr<WorkerEndpoint> ws = (*x.state)[static_cast<size_t>(idx)];
    tried_buf[n_tried++] = static_cast<uint32_t>(idx);
    // A deployment's own limits (also when this one has none but the previous try's had: a retry
    // gives that one its share back).
    const bool reserve = x.grant && (dep.limited.limited() || x.grant.holdsResource());
    if (reserve && !co_await reserveDeployment(x, dep, f)) {
      --attempt;  // at its own limit: another deployment may have room (not counted as a try)
      continue;
    }
    if (attempt > 0) dep.retries->inc(shard_);
    ++x.attempts;
    x.deployment = &dep;
    x.endpoint = &ep;
    ++ws->inflight;
    if (x.batch_work) ++ws->batch_inflight;
    ws->view->in_flight.store(ws->inflight, std::memory_order_relaxed);
    struct InflightGuard {
      WorkerEndpoint& w;
      bool batch;
      ~InflightGuard() {
        --w.inflight;
        if (batch) --w.batch_inflight;
        w.view->in_flight.store(w.inflight, std::memory_order_relaxed);
      }
    } guard{*ws, x.batch_work};

    std::unique_ptr<net::UpstreamConnection> conn;
    const Result<const net::ClientResponseHead*> head =
        co_await tryEndpoint(x, ep, *ws, conn, total);
    if (x.req.trace && !head.ok()) {
      x.req.trace->error(x.upstream_span, head.status().message());
      x.req.trace->end(x.upstream_span);
    }
    if (x.client_gone) break;
    if (!head.ok()) {
      x.current = nullptr;
      recordFailure(table, ep, monoNanos());
      const Status& st = head.status();
      const bool timeout = st.code() == StatusCode::kDeadlineExceeded;
      f.status = timeout ? 504 : 503;
      f.code = timeout ? "upstream_timeout" : "upstream_unavailable";
      f.message = timeout ? "upstream " + dep.name + " timed out before responding"
                          : "upstream " + dep.name + " unavailable: " + st.message();
      if (SteadyClock::now() >= total) break;
      if (timeout ? !dep.retry.on_timeout : !dep.retry.on_connect_failure) break;
      continue;
    }
    const net::ClientResponseHead& h = **head;
    if (x.req.trace) {
      x.req.trace->attr(x.upstream_span, "http.response.status_code", int64_t{h.status});
      if (h.status >= 500) x.req.trace->error(x.upstream_span, "HTTP " + std::to_string(h.status));
    }
    if (h.status >= 500) {
      recordFailure(table, ep, monoNanos());
      if (dep.retry.on_5xx && attempt + 1 < max_attempts && SteadyClock::now() < total) {
        // Not forwarded: nothing reached the client yet, so another endpoint may answer.
        if (x.req.trace) x.req.trace->end(x.upstream_span);
        conn->abort();
        x.current = nullptr;
        f.status = h.status;
        f.code = "upstream_error";
        f.message = "upstream " + dep.name + " answered " + std::to_string(h.status);
        continue;
      }
    } else {
      recordSuccess(ep, monoNanos());
    }
    // From here on there is no retry.
    bool keep_conn = false;
    co_await relay(x, ep, *ws, *conn, h, total, keep_conn);
    if (x.req.trace) x.req.trace->end(x.upstream_span);  // the body relayed: the exchange ended
    x.current = nullptr;
    if (keep_conn) ws->pool->release(std::move(conn));
    co_return;
  }
  x.current = nullptr;
  if (x.client_gone) {
    x.status = 499;
    clientLeft(x, nullptr);
    x.w.closeAfterResponse();
    co_await x.w.send(499, "application/json", "{}");
    co_return;
  }
  co_await answerUnserved(x, f);
}

Task<void> ProxyHandler::answerUnserved(Exchange& x, const Failure& f) {
  std::string message =
      f.message.empty() ? "no healthy endpoint for model " + x.route->model : f.message;
  if (f.status == 429) {
    // Only when no backend got the request (an earlier attempt that did was work done).
    if (x.grant && !x.sent_upstream) x.grant.refusedByResources();
    if (f.retry_ms >= 0) access::appendRetryAfter(x.extra, f.retry_ms);
  }
  co_await sendError(x, f.status, message, f.status == 429 ? f.limit_type : "server_error", f.code);
}

Task<void> ProxyHandler::relay(Exchange& x, const Endpoint& ep, WorkerEndpoint& ws,
                               net::UpstreamConnection& conn, const net::ClientResponseHead& h,
                               Deadline total, bool& keep_conn) {
  (void)ws;
  if (x.api != ClientApi::kOpenAi) {
    auto translated = relayTranslated(x, ep, conn, h, total, keep_conn);
    co_await std::move(translated);
    co_return;
  }
  const RouteTable& table = *x.table;
  x.status = h.status;
  const std::string_view content_type = h.header("content-type");
  const bool sse = content_type.starts_with("text/event-stream");
  if (sse) {
    x.stream = true;
    metrics_.active_streams->add(shard_, 1);
  }
  struct StreamGauge {
    GatewayMetrics& m;
    int shard;
    bool on;
    ~StreamGauge() {
      if (on) m.active_streams->add(shard, -1);
    }
  } stream_gauge{metrics_, shard_, sse};
  const int64_t clen = h.chunked ? -1 : h.content_length;
  HttpHeader rid_h{"x-request-id", x.request_id};
  const std::span<const HttpHeader> out_headers = responseHeaders(x, rid_h);
  // Usage the client did not ask for can only be removed from a chunked stream.
  const bool governed = static_cast<bool>(x.grant);
  const bool rewrite_sse =
      sse && governed && clen < 0 && (x.usage.strip_final_usage || x.usage.strip_continuous);
  const bool scan_sse = sse && (governed || x.want_usage);
  x.capture = !sse && (governed || x.want_usage) &&
              (content_type.starts_with("application/json") || content_type.empty());
  if (x.capture) x.resp_content_type = std::string(content_type);
  std::span<const HttpHeader> relayed = h.headers;
  std::vector<HttpHeader> own_limits_only;
  auto backend_limit = [](const HttpHeader& hh) { return hh.name.starts_with("x-ratelimit-"); };
  if (governed && !x.extra.empty() &&
      std::any_of(h.headers.begin(), h.headers.end(), backend_limit)) {
    // The gateway's x-ratelimit-* describe the caller's limits; the backend's would contradict
    // them.
    for (const auto& hh : h.headers) {
      if (!hh.name.starts_with("x-ratelimit-")) own_limits_only.push_back(hh);
    }
    relayed = own_limits_only;
  }
  if (!co_await x.w.start(h.status, content_type, out_headers, clen, relayed)) {
    clientLeft(x, &conn);
    co_return;
  }
  bool first_chunk = true;
  bool usage_in_place = false;
  for (;;) {
    auto piece = co_await conn.readBody(total);
    if (!piece.ok()) {
      x.current = nullptr;
      if (x.client_gone || x.w.clientGone()) {
        clientLeft(x, nullptr);
        co_return;
      }
      x.route->stream_errors->inc(shard_);
      recordFailure(table, ep, monoNanos());
      if (sse && clen < 0) {
        // End the client's stream with an error event rather than leaving it hanging (only a
        // chunked response can carry bytes the upstream never declared), after ending the event
        // the backend was in the middle of, so that every event the client sees is framed.
        std::string ev = x.mid_event ? "\n\nevent: error\ndata: " : "event: error\ndata: ";
        const bool timeout = piece.status().code() == StatusCode::kDeadlineExceeded;
        ev += net::errorJson(
            timeout ? "upstream timed out mid-stream" : "upstream connection lost mid-stream",
            "server_error", timeout ? "upstream_timeout" : "upstream_disconnected");
        ev += "\n\n";
        if (co_await x.w.writeChunk(ev)) co_await x.w.finish();
      } else {
        x.w.closeAfterResponse();
      }
      co_return;
    }
    if (piece->empty()) break;
    if (first_chunk) {
      first_chunk = false;
      x.ttft_s = static_cast<double>(monoNanos() - x.start_ns) / 1e9;
      if (sse) x.route->ttft->observe(shard_, x.ttft_s);
    }
    std::string_view out = *piece;
    if (x.keep_answer) {
      // Up to 3 bytes past the limit: enough to see where the character at the cut ends.
      const size_t keep = static_cast<size_t>(x.route->capture.max_bytes) + 3;
      const size_t room = keep - std::min(x.answer.size(), keep);
      x.answer.append(piece->substr(0, std::min(room, piece->size())));
    }
    if (scan_sse) {
      x.sse_out.clear();
      scanSse(x.usage, *piece, rewrite_sse ? &x.sse_out : nullptr);
      if (rewrite_sse) out = x.sse_out;
    } else if (x.capture) {
      if (x.resp_body.empty() && clen >= 0 && piece->size() == static_cast<size_t>(clen) &&
          !x.cacheable && !x.compare) {
        // The whole answer in one piece, and nothing keeps it: its usage is read in place once
        // the client has it.
        usage_in_place = true;
        x.capture = false;
      } else if (x.resp_body.size() + piece->size() <= (8u << 20)) {
        x.resp_body.append(*piece);
      } else {
        x.capture = false;
        x.resp_body.clear();
      }
    }
    if (out.empty()) continue;
    x.bytes_out += out.size();
    // Streams go on byte for byte as they arrive; what is remembered is whether they stopped
    // inside an event, which a failure must end before its own event.
    if (sse) x.mid_event = !endsEvent(out);
    if (!co_await x.w.writeChunk(out)) {
      clientLeft(x, &conn);
      co_return;
    }
    if (usage_in_place) readUsage(x.usage, *piece);
  }
  if (rewrite_sse && !x.usage.sse_buf.empty()) {
    // An unterminated last event passes as it came.
    x.bytes_out += x.usage.sse_buf.size();
    const bool tail_ok = co_await x.w.writeChunk(x.usage.sse_buf);
    x.usage.sse_buf.clear();
    if (!tail_ok) {
      clientLeft(x, &conn);
      co_return;
    }
  }
  co_await x.w.finish();
  keep_conn = true;
  if (x.capture && !x.resp_body.empty()) {
    readUsage(x.usage, x.resp_body);
    if (x.compare && h.status == 200) x.primary_output = std::string(answerOutput(x.resp_body));
    if (x.cacheable && h.status == 200 && x.usage.seen) {
      access::CachedAnswer e;
      e.body = std::move(x.resp_body);
      e.content_type = x.resp_content_type;
      e.prompt_tokens = x.usage.prompt;
      e.completion_tokens = x.usage.completion;
      access_->cachePut(x.cache_key, std::move(e));
    }
  }
}

// ---------------- access control ----------------

Task<bool> ProxyHandler::authenticate(Exchange& x) {
  // Usage is read from the answer, so it must come back uncompressed.
  std::erase_if(x.req.headers, [](const HttpHeader& h) { return h.name == "accept-encoding"; });
  // An in-process request (a batch line) acts for the key that made it, named by the process.
  // Anthropic's clients send their key as x-api-key.
  auto denied = access_->authenticateRequest(
      x.req, x.grant, x.api == ClientApi::kMessages ? "x-api-key" : std::string_view());
  if (denied) {
    co_await sendError(x, denied->status, denied->message, denied->type, denied->code);
    co_return false;
  }
  co_return true;
}

Task<bool> ProxyHandler::admit(Exchange& x) {
  const Route& route = *x.route;
  const std::string_view requested =
      x.fields.has_model ? std::string_view(x.fields.model) : std::string_view(route.model);
  if (auto denied =
          access_->checkAccess(x.grant, access::ResourceKind::kModel, requested, route.model)) {
    co_await sendError(x, denied->status, denied->message, denied->type, denied->code);
    co_return false;
  }
  access::AdmitRequest ar;
  ar.resource = &route.limited;
  ar.price = route.price;
  if (x.req.in_process != nullptr && x.req.in_process->batch) {
    // A batch line reserves what it will be billed: its share of the price (finishAccess).
    ar.price.prompt_per_1m *= x.req.in_process->price_factor;
    ar.price.completion_per_1m *= x.req.in_process->price_factor;
  }
  const TokenUse use = tokenUse(x.req.path());
  const bool input_only = use == TokenUse::kInput;
  if (use != TokenUse::kNone) {
    // Worst case: every body byte a prompt token is far above any tokenizer (~4 bytes a token);
    // a quarter of the bytes is the estimate, reconciled to the backend's usage afterwards.
    ar.est_prompt_tokens = static_cast<int64_t>(x.req.body.size() / 4) + 1;
    if (!input_only) {
      const int64_t per_choice =
          x.fields.max_tokens >= 0 ? x.fields.max_tokens : access_->defaultMaxTokens();
      ar.max_completion_tokens = per_choice * x.fields.n;
    }
  }
  if (access_->cacheEnabled() && use != TokenUse::kNone && !x.stream) {
    const std::string_view opt = x.req.header("x-infera-cache");
    x.cacheable = opt != "off" && (input_only || route.cache || opt == "on" ||
                                   (x.fields.has_temperature && x.fields.temperature == 0));
  }
  std::optional<access::CachedAnswer> hit;
  if (x.cacheable) {
    x.cache_key = access_->cacheKey(route.model, x.fields.canonical, x.grant);
    hit = co_await access_->cacheGet(x.cache_key);
    access_->countCache(hit.has_value());
  }
  if (hit) {
    // Counts against the caller's limits at its real size, not against the model's capacity.
    ar.est_prompt_tokens = hit->prompt_tokens;
    ar.max_completion_tokens = hit->completion_tokens;
    ar.price = PriceConfig{};
    ar.count_resource = false;
  }
  auto admission = access_->admit(x.grant, ar, x.extra);
  const std::optional<access::Denial> refused = co_await std::move(admission);
  if (refused) {
    co_await sendError(x, refused->status, refused->message, refused->type, refused->code);
    co_return false;
  }
  if (hit) {
    x.cache_hit = true;
    x.usage.seen = true;
    x.usage.prompt = hit->prompt_tokens;
    x.usage.completion = hit->completion_tokens;
    x.extra.push_back({"x-infera-cache", "hit"});
    x.status = 200;
    HttpHeader rid{"x-request-id", x.request_id};
    const std::span<const HttpHeader> headers = responseHeaders(x, rid);
    if (x.api != ClientApi::kOpenAi) {
      int status = 200;
      const std::string answer = translatedAnswer(x, status, hit->body);  // kept as chat
      co_await x.w.send(status, "application/json", answer, headers);
    } else {
      co_await x.w.send(200, hit->content_type, hit->body, headers);
    }
    co_return false;
  }
  if (x.cacheable) x.extra.push_back({"x-infera-cache", "miss"});
  co_return true;
}

void ProxyHandler::buildUpstreamBody(Exchange& x, const Deployment& dep, std::string_view& body) {
  const RequestFields& f = x.fields;
  const bool rename =
      x.rewrite_model && f.model_end > f.model_begin && dep.upstream_model != f.model;
  // Governance always asks a streaming backend for usage, and strips what the client did not ask
  // for.
  const bool add_usage = x.grant && x.stream && !f.include_usage;
  const bool add_continuous = x.grant && x.stream && dep.continuous_usage && !f.continuous_usage;
  x.usage.strip_final_usage = add_usage;
  x.usage.strip_continuous = add_continuous;
  if (!rename && !add_usage && !add_continuous) return;
  struct Edit {
    size_t begin, end;
    std::string text;
  };
  Edit edits[2];
  size_t n = 0;
  if (rename) {
    std::string m;
    net::appendJsonString(m, dep.upstream_model);
    edits[n++] = {f.model_begin, f.model_end, std::move(m)};
  }
  if (add_usage || add_continuous) {
    std::string so = "{\"include_usage\":";
    so += (add_usage || f.include_usage) ? "true" : "false";
    if (add_continuous || f.continuous_usage) so += ",\"continuous_usage_stats\":true";
    so += f.stream_options_rest;
    so += '}';
    if (f.has_stream_options) {
      edits[n++] = {f.stream_options_begin, f.stream_options_end, std::move(so)};
    } else {
      const size_t open = x.req.body.find('{');
      edits[n++] = {open + 1, open + 1, "\"stream_options\":" + so + ","};
    }
  }
  if (n == 2 && edits[1].begin < edits[0].begin) std::swap(edits[0], edits[1]);
  x.body_override.clear();
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) {
    x.body_override.append(x.req.body, pos, edits[i].begin - pos);
    x.body_override += edits[i].text;
    pos = edits[i].end;
  }
  x.body_override.append(x.req.body, pos);
  body = x.body_override;
}

void ProxyHandler::finishAccess(Exchange& x) {
  access::UsageRecord r;
  r.request_id = x.request_id;
  r.model = x.route ? x.route->model : std::string();
  if (x.deployment) r.deployment = x.deployment->name;
  if (x.endpoint) r.region = x.endpoint->region;
  r.latency_ms = static_cast<double>(monoNanos() - x.start_ns) / 1e6;
  r.ttft_ms = (x.stream ? x.ttft_s : x.ttfb_s) * 1000.0;
  r.status = x.status;
  r.stream = x.stream;
  r.cached = x.cache_hit;
  r.aborted = x.aborted;
  const bool reserved = x.grant.reserved();
  if (x.usage.seen) {
    r.prompt_tokens = x.usage.prompt;
    r.completion_tokens = x.usage.completion;
  } else if (x.bytes_out > 0 && reserved && (x.status < 400 || x.aborted)) {
    // The response started but no usage came back (an abort before the final chunk, or a backend
    // that does not report usage): bill the estimate.
    r.estimated = true;
    r.prompt_tokens = x.grant.estimatedPrompt();
    r.completion_tokens = x.stream ? x.usage.content_events : x.grant.maxCompletion();
  } else if (x.aborted && reserved && x.sent_upstream) {
    // The client left before any answer came back, after the request went to a backend, which may
    // have read the prompt: bill the prompt estimate (the backend stops when the gateway hangs up).
    r.estimated = true;
    r.prompt_tokens = x.grant.estimatedPrompt();
  }
  PriceConfig price = x.route ? x.route->price : PriceConfig{};
  if (x.req.in_process != nullptr && x.req.in_process->batch) {
    // A batch line: marked in usage, billed at the batch price factor.
    r.batch = true;
    price.prompt_per_1m *= x.req.in_process->price_factor;
    price.completion_per_1m *= x.req.in_process->price_factor;
  }
  access_->finish(x.grant, std::move(r), price);
}

// ---------------- experiments: arms, data capture, shadows ----------------
}  // namespace infera::gateway
