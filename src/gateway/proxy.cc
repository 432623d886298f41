#include "gateway/proxy.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/clock.h"
#include "gateway/balancer.h"
#include "gateway/request_scan.h"

namespace infera::gateway {

using net::Deadline;
using net::HttpHeader;
using net::SteadyClock;
using net::Task;

namespace {

constexpr double kEwmaAlpha = 0.2;
// An endpoint's latency estimate halves for every second it goes without a new sample, so one
// slow outlier cannot keep an endpoint from being tried again for ever.
constexpr double kEwmaHalfLifeNs = 1e9;

Deadline deadlineAfter(int64_t ms) { return SteadyClock::now() + std::chrono::milliseconds(ms); }

}  // namespace

struct ProxyHandler::Exchange {
  Exchange(net::HttpRequest& r, net::ResponseWriter& wr) : req(r), w(wr) {}
  net::HttpRequest& req;
  net::ResponseWriter& w;
  std::shared_ptr<const RouteTable> table;
  std::shared_ptr<const StateVector> state;  // matches `table`
  const Route* route = nullptr;
  const Deployment* deployment = nullptr;
  const Endpoint* endpoint = nullptr;
  int64_t start_ns = 0;
  std::string request_id;
  RequestFields fields;
  bool rewrite_model = false;
  std::string kserve_tail;  // after /v2/models/{m}
  std::string target;
  std::string body_override;
  net::UpstreamConnection* current = nullptr;
  bool client_gone = false;
  int status = 0;
  int attempts = 0;
  bool stream = false;
  uint64_t bytes_out = 0;
  double ttfb_s = 0;
};

ProxyHandler::ProxyHandler(int shard, net::asio::io_context& ctx, GatewayMetrics& metrics,
                           obs::AccessLog* access_log)
    : shard_(shard),
      ctx_(ctx),
      metrics_(metrics),
      access_log_(access_log),
      rng_(0x1f3a5b7c9d + static_cast<uint64_t>(shard) * 104729),
      parser_(std::make_unique<simdjson::dom::parser>()),
      ids_(static_cast<uint64_t>(monoNanos()) + static_cast<uint64_t>(shard) * 7777) {
  if (access_log_) {
    flush_timer_ = std::make_unique<net::asio::steady_timer>(ctx_);
    // Hands this worker's access-log buffer to the writer thread every 200 ms.
    struct Flusher {
      ProxyHandler* self;
      std::shared_ptr<bool> alive;  // false once the handler is gone (a queued run must not touch it)
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
      const auto it = state_by_key_.find(ep.key);
      if (it != state_by_key_.end()) {
        slot = it->second;
      } else {
        slot = std::make_shared<WorkerEndpoint>();
        net::PoolConfig pc;
        pc.connect_timeout = std::chrono::milliseconds(ep.deployment->timeouts.connect_ms);
        slot->pool = net::ConnectionPool::create(ctx_, ep.address.endpoint, pc);
      }
    }
    next.push_back(slot);
  }
  state_ = std::move(next_ptr);
  state_by_key_ = std::move(by_key);
  table_ = std::move(table);
}

int ProxyHandler::pick(const RouteTable& table, const StateVector& state,
                       const std::vector<uint32_t>& candidates, std::span<const uint32_t> tried,
                       int64_t now_ns) {
  Candidate buf[64];
  std::vector<Candidate> big;
  size_t n = 0;
  const bool small = candidates.size() <= 64;
  for (const uint32_t idx : candidates) {
    if (std::find(tried.begin(), tried.end(), idx) != tried.end()) continue;
    const Endpoint& ep = table.endpoints[idx];
    const WorkerEndpoint& ws = *state[idx];
    if (!ep.shared->healthy.load(std::memory_order_relaxed)) continue;
    if (ep.shared->ejected_until_ns.load(std::memory_order_relaxed) > now_ns) continue;
    if (ws.inflight >= ep.max_inflight_per_worker) continue;
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
  std::span<const Candidate> span = small ? std::span<const Candidate>(buf, n) : std::span<const Candidate>(big);
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
  const std::string body = net::errorJson(message, type, code);
  const HttpHeader rid{"x-request-id", x.request_id};
  co_await x.w.send(status, "application/json", body, std::span<const HttpHeader>(&rid, 1));
}

Task<void> ProxyHandler::handle(net::HttpRequest& req, net::ResponseWriter& w) {
  Exchange x{req, w};
  x.table = table_;
  x.state = state_;
  x.start_ns = monoNanos();
  const std::string_view given_id = req.header("x-request-id");
  x.request_id = obs::isAcceptableRequestId(given_id) ? std::string(given_id) : ids_.next();
  metrics_.in_flight->add(shard_, 1);
  const std::string_view path = req.path();
  if (!x.table) {
    co_await sendError(x, 503, "gateway has no configuration yet", "server_error", "not_ready");
  } else if (path.starts_with("/v1/")) {
    co_await handleOpenAi(x);
  } else if (path.starts_with("/v2")) {
    co_await handleKServe(x);
  } else {
    const std::string msg_text = "unknown path " + std::string(path);
    co_await sendError(x, 404, msg_text, "invalid_request_error", "not_found");
  }
  finishExchange(x);
  metrics_.in_flight->add(shard_, -1);
}

void ProxyHandler::finishExchange(Exchange& x) {
  const int64_t end_ns = monoNanos();
  const double seconds = static_cast<double>(end_ns - x.start_ns) / 1e9;
  const int cls = codeClassIndex(x.status);
  if (x.route) {
    x.route->duration->observe(shard_, seconds);
    if (x.deployment) {
      x.deployment->requests_by_class[cls]->inc(shard_);
    } else {
      x.route->no_deployment_by_class[cls]->inc(shard_);
    }
  }
  if (access_log_) {
    obs::AccessRecord r;
    r.unix_ms = SystemClock::instance().unixMillis();
    r.request_id = x.request_id;
    r.method = x.req.method;
    r.path = x.req.path();
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

Task<void> ProxyHandler::handleOpenAi(Exchange& x) {
  const std::string_view path = x.req.path();
  if (path == "/v1/models") {
    if (x.req.method != "GET") {
      co_await sendError(x, 405, "use GET for /v1/models", "invalid_request_error", "method_not_allowed");
      co_return;
    }
    x.status = 200;
    const HttpHeader rid{"x-request-id", x.request_id};
    co_await x.w.send(200, "application/json", x.table->models_json, std::span<const HttpHeader>(&rid, 1));
    co_return;
  }
  if (path != "/v1/chat/completions" && path != "/v1/completions" && path != "/v1/embeddings") {
    const std::string msg_text = "unknown endpoint " + std::string(path);
    co_await sendError(x, 404, msg_text, "invalid_request_error", "not_found");
    co_return;
  }
  if (x.req.method != "POST") {
    const std::string msg_text = "use POST for " + std::string(path);
    co_await sendError(x, 405, msg_text, "invalid_request_error", "method_not_allowed");
    co_return;
  }
  auto fields = scanRequest(*parser_, x.req.body);
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
  const auto it = x.table->by_name.find(x.fields.model);
  if (it == x.table->by_name.end()) {
    const std::string msg_text =
        "The model `" + x.fields.model + "` does not exist or you do not have access to it.";
    co_await sendError(x, 404, msg_text, "invalid_request_error", "model_not_found");
    co_return;
  }
  x.route = it->second;
  x.rewrite_model = true;
  x.stream = x.fields.stream;
  co_await forward(x, x.route->openai_endpoints);
}

Task<void> ProxyHandler::handleKServe(Exchange& x) {
  const std::string_view path = x.req.path();
  const HttpHeader rid{"x-request-id", x.request_id};
  if (path == "/v2/health/live" || path == "/v2/health/ready" || path == "/v2") {
    x.status = 200;
    std::string_view body = path == "/v2/health/live" ? "{\"live\":true}"
                            : path == "/v2/health/ready"
                                ? "{\"ready\":true}"
                                : "{\"name\":\"infera\",\"version\":\"0.1.0\",\"extensions\":[]}";
    co_await x.w.send(200, "application/json", body, std::span<const HttpHeader>(&rid, 1));
    co_return;
  }
  net::KServeModelPath kp;
  if (!net::parseKServeModelPath(path, kp)) {
    const std::string msg_text = "unknown endpoint " + std::string(path);
    co_await sendError(x, 404, msg_text, "invalid_request_error", "not_found");
    co_return;
  }
  const std::string model(kp.model);
  x.kserve_tail = std::string(kp.after_model);  // forwarded as given, versions included
  const auto it = x.table->by_name.find(model);
  if (it == x.table->by_name.end()) {
    const std::string msg_text = "model '" + model + "' is not found";
    co_await sendError(x, 404, msg_text, "invalid_request_error", "model_not_found");
    co_return;
  }
  x.route = it->second;
  if (x.route->kserve_endpoints.empty()) {
    const std::string msg_text = "model '" + model + "' has no KServe v2 endpoints";
    co_await sendError(x, 404, msg_text, "invalid_request_error", "model_not_found");
    co_return;
  }
  co_await forward(x, x.route->kserve_endpoints);
}

Task<void> ProxyHandler::forward(Exchange& x, const std::vector<uint32_t>& candidates) {
  const RouteTable& table = *x.table;
  const Deployment& first = *x.route->first_deployment;
  const Deadline total = deadlineAfter(first.timeouts.total_ms);
  const int max_attempts = std::max(1, first.retry.attempts);
  // Headers go to the upstream as the client sent them, minus hop-by-hop headers and the
  // client's credentials, filtered while the request head is written (no copies).
  x.w.watchDisconnect([&x] {
    x.client_gone = true;
    if (x.current) x.current->abort();
  });

  std::array<uint32_t, 16> tried_buf;  // attempts <= 10 (config): no allocation
  size_t n_tried = 0;
  int last_status = 503;
  std::string last_message;  // built only on failure
  std::string_view last_code = "no_healthy_endpoint";
  for (int attempt = 0; attempt < max_attempts && !x.client_gone; ++attempt) {
    const int64_t now_ns = monoNanos();
    const int idx = pick(table, *x.state, candidates, std::span<const uint32_t>(tried_buf.data(), n_tried), now_ns);
    if (idx < 0) break;
    const Endpoint& ep = table.endpoints[static_cast<size_t>(idx)];
    const Deployment& dep = *ep.deployment;
    std::shared_ptr<WorkerEndpoint> ws = (*x.state)[static_cast<size_t>(idx)];
    tried_buf[n_tried++] = static_cast<uint32_t>(idx);
    if (attempt > 0) dep.retries->inc(shard_);
    ++x.attempts;
    x.deployment = &dep;
    x.endpoint = &ep;
    ++ws->inflight;
    struct InflightGuard {
      WorkerEndpoint& w;
      ~InflightGuard() { --w.inflight; }
    } guard{*ws};

    std::string_view body = x.req.body;
    if (x.rewrite_model && x.fields.model_end > x.fields.model_begin && dep.upstream_model != x.fields.model) {
      x.body_override.clear();
      x.body_override.append(x.req.body, 0, x.fields.model_begin);
      net::appendJsonString(x.body_override, dep.upstream_model);
      x.body_override.append(x.req.body, x.fields.model_end);
      body = x.body_override;
    }
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
    net::ClientRequest creq;
    creq.method = x.req.method;
    creq.target = target;
    creq.host = ep.host_header;
    creq.headers = x.req.headers;
    creq.body = body;
    creq.skip_hop_by_hop = true;
    creq.skip_authorization = true;
    creq.request_id = x.request_id;
    const Deadline try_deadline = std::min(total, deadlineAfter(dep.timeouts.first_byte_ms));
    int64_t sent_ns = monoNanos();

    std::unique_ptr<net::UpstreamConnection> conn;
    // A pooled connection the upstream closed meanwhile fails before any response byte (on send,
    // or EOF/reset instead of a head): the upstream did not take the request, so it is sent once
    // more on a new connection, without counting as a try.
    Result<const net::ClientResponseHead*> head = Status::unavailable("not sent");
    for (int fresh = 0; fresh < 2; ++fresh) {
      auto c = co_await ws->pool->acquire(std::min(total, deadlineAfter(dep.timeouts.connect_ms)), fresh == 1);
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
        head = co_await conn->readHead(try_deadline);
      }
      const bool stale = conn->reused() && (send_failed || conn->closedBeforeResponse());
      if (head.ok() || !stale || x.client_gone || SteadyClock::now() >= try_deadline) break;
      x.current = nullptr;
      conn.reset();
    }
    const Status st = head.ok() ? Status::ok() : head.status();
    if (x.client_gone) break;
    if (!st.isOk()) {
      x.current = nullptr;
      recordFailure(table, ep, monoNanos());
      const bool timeout = st.code() == StatusCode::kDeadlineExceeded;
      last_status = timeout ? 504 : 503;
      last_code = timeout ? "upstream_timeout" : "upstream_unavailable";
      last_message = timeout ? "upstream " + dep.name + " timed out before responding"
                             : "upstream " + dep.name + " unavailable: " + st.message();
      if (SteadyClock::now() >= total) break;
      if (timeout ? !dep.retry.on_timeout : !dep.retry.on_connect_failure) break;
      continue;
    }
    const net::ClientResponseHead& h = **head;
    const int64_t head_ns = monoNanos();
    const double latency = static_cast<double>(head_ns - sent_ns) / 1e9;
    x.ttfb_s = latency;
    dep.upstream_latency->observe(shard_, latency);
    ws->ewma_s = ws->ewma_s == 0 ? latency : (1 - kEwmaAlpha) * ws->ewma_s + kEwmaAlpha * latency;
    ws->sampled_ns = head_ns;
    if (h.status >= 500) {
      recordFailure(table, ep, head_ns);
      if (dep.retry.on_5xx && attempt + 1 < max_attempts && SteadyClock::now() < total) {
        // Not forwarded: nothing reached the client yet, so another endpoint may answer.
        conn->abort();
        x.current = nullptr;
        last_status = h.status;
        last_code = "upstream_error";
        last_message = "upstream " + dep.name + " answered " + std::to_string(h.status);
        continue;
      }
    } else {
      recordSuccess(ep, head_ns);
    }

    // Relay the response; from here on there is no retry.
    x.status = h.status;
    const std::string_view content_type = h.header("content-type");
    const HttpHeader rid{"x-request-id", x.request_id};
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
    if (!co_await x.w.start(h.status, content_type, std::span<const HttpHeader>(&rid, 1), clen, h.headers)) {
      conn->abort();
      x.current = nullptr;
      x.route->client_aborts->inc(shard_);
      co_return;
    }
    bool first_chunk = true;
    for (;;) {
      auto piece = co_await conn->readBody(total);
      if (!piece.ok()) {
        x.current = nullptr;
        if (x.client_gone || x.w.clientGone()) {
          x.route->client_aborts->inc(shard_);
          co_return;
        }
        x.route->stream_errors->inc(shard_);
        recordFailure(table, ep, monoNanos());
        if (sse && clen < 0) {
          // End the client's stream with an error event rather than leaving it hanging (only a
          // chunked response can carry bytes the upstream never declared).
          std::string ev = "event: error\ndata: ";
          const bool timeout = piece.status().code() == StatusCode::kDeadlineExceeded;
          ev += net::errorJson(timeout ? "upstream timed out mid-stream" : "upstream connection lost mid-stream",
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
        if (sse) x.route->ttft->observe(shard_, static_cast<double>(monoNanos() - x.start_ns) / 1e9);
      }
      x.bytes_out += piece->size();
      if (!co_await x.w.writeChunk(*piece)) {
        conn->abort();
        x.current = nullptr;
        x.route->client_aborts->inc(shard_);
        co_return;
      }
    }
    co_await x.w.finish();
    x.current = nullptr;
    ws->pool->release(std::move(conn));
    co_return;
  }
  x.current = nullptr;
  if (x.client_gone) {
    x.status = 499;
    if (x.route) x.route->client_aborts->inc(shard_);
    x.w.closeAfterResponse();
    co_await x.w.send(499, "application/json", "{}");
    co_return;
  }
  if (last_message.empty()) last_message = "no healthy endpoint for model " + x.route->model;
  co_await sendError(x, last_status, last_message, "server_error", last_code);
}

}  // namespace infera::gateway
