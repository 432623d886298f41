#include "gateway/internal/proxy.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/clock.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "gateway/internal/balancer.h"
#include "gateway/internal/request_scan.h"
#include "gateway/internal/usage_scan.h"
#include "net/trace.h"

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

// Whether `s` ends at an SSE event boundary (a blank line).
bool endsEvent(std::string_view s) { return s.ends_with("\n\n") || s.ends_with("\r\n\r\n"); }

// What a deterministic answer said: its "choices" (chat, completions) or "data" (embeddings),
// without the id and timestamps that differ between two answers to the same request.
std::string_view answerOutput(std::string_view json) {
  size_t b = 0, e = 0;
  if (findTopLevelValue(json, "choices", b, e) || findTopLevelValue(json, "data", b, e))
    return json.substr(b, e - b);
  return json;
}

// What batch work may hold of an endpoint on this worker now: its deployment's batch share, or all
// of its share of max_concurrent once no interactive request has come for batch_idle_ms.
int batchCap(const Endpoint& ep, int64_t now_ns) {
  if (ep.batch_idle_ns > 0 &&
      now_ns - ep.shared->interactive_ns.load(std::memory_order_relaxed) >= ep.batch_idle_ns)
    return ep.max_inflight_per_worker;
  return ep.max_batch_per_worker;
}

// An endpoint a request may go to now: healthy, not ejected, under this worker's share of its
// concurrency limit (and, for batch work, of its deployment's batch share).
bool available(const Endpoint& ep, const WorkerEndpoint& ws, int64_t now_ns, bool batch = false) {
  return ep.shared->healthy.load(std::memory_order_relaxed) &&
         ep.shared->ejected_until_ns.load(std::memory_order_relaxed) <= now_ns &&
         ws.inflight < ep.max_inflight_per_worker &&
         (!batch || ws.batch_inflight < batchCap(ep, now_ns));
}

// How soon batch work turned away by a deployment's max_batch_share may come back.
constexpr int64_t kBatchCapRetryMs = 100;

// Whether an endpoint's engine signals are fresh; when they are, this worker's count of what it
// sent there since the scrape it last saw starts again at each new scrape.
bool freshSignals(const EngineSignals& sig, WorkerEndpoint& ws, int64_t now_ns, int64_t stale_ns) {
  const int64_t updated = sig.updated_ns.load(std::memory_order_acquire);
  if (updated == 0 || now_ns - updated > stale_ns) return false;
  const uint32_t seq = sig.seq.load(std::memory_order_relaxed);
  if (seq != ws.seen_seq) {
    ws.seen_seq = seq;
    ws.sent_since_scrape = 0;
  }
  return true;
}

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
  bool sent_upstream = false;  // a backend got the whole request (it may have read the prompt)
  bool stream = false;
  uint64_t bytes_out = 0;
  double ttfb_s = 0;
  // Access control (only when it is on).
  access::Grant grant;
  std::vector<HttpHeader> extra;  // x-request-id first, then rate-limit and cache headers
  UsageScan usage;                // the backend's usage, and what of it the client must not see
  double ttft_s = 0;
  bool aborted = false;
  bool capture = false;
  std::string sse_out;
  bool mid_event = false;  // the last bytes relayed ended inside an SSE event
  std::string resp_body;
  std::string resp_content_type;
  bool cacheable = false;
  bool cache_hit = false;
  std::string cache_key;
  // Experiments (registry routes).
  const Route* split = nullptr;  // the experiment route an arm was chosen from
  const Arm* arm = nullptr;
  const Route* shadow = nullptr;  // mirror after answering
  bool want_usage = false;        // read usage from the answer without access control too
  bool compare = false;           // deterministic: keep the primary's output for the shadow's
  std::string primary_output;
  bool keep_answer = false;  // data capture: keep the answer's first bytes
  std::string answer;
  // Engine-aware routing: the prompt's prefix block hashes (a buffer lent by the handler).
  std::unique_ptr<uint64_t[]> blocks;
  size_t n_blocks = 0;
  // Flow control: the timer the request waits on in the gateway's queue (null when not waiting).
  net::asio::steady_timer* flow_timer = nullptr;
  // Its priority class (read when the route has flow control or a batch cap), and whether that
  // makes it batch work (max_batch_share).
  Priority priority = Priority::kStandard;
  bool batch_work = false;
  // Tracing (req.trace, when the request is traced): the current upstream attempt's span.
  size_t upstream_span = 0;
};

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

struct ProxyHandler::FlowState {
  FlowQueue queue;
  int pending = 0;        // admitted waiters not yet on their way to an endpoint
  int pending_batch = 0;  // of those, batch work
  std::unique_ptr<net::asio::steady_timer> tick;
  bool ticking = false;
};

obs::Counter* ProxyHandler::flowCounter(const Route& route, Priority p, std::string_view team,
                                        std::string_view outcome) {
  std::string key = route.model;
  key += '\x1f';
  key += priorityName(p);
  key += '\x1f';
  key += team;
  key += '\x1f';
  key += outcome;
  const auto it = flow_counters_.find(key);
  if (it != flow_counters_.end()) return it->second;
  obs::Counter* c = metrics_.flow_outcomes->counter(
      {route.model, std::string(priorityName(p)), std::string(team), std::string(outcome)});
  flow_counters_.emplace(std::move(key), c);
  return c;
}

int ProxyHandler::roomFor(const RouteTable& table, const StateVector& state, const Route& route,
                          int64_t now_ns) {
  const EngineRoutingConfig& cfg = *route.engine;
  const int64_t stale_ns = cfg.stale_ms * 1'000'000;
  int room = 0;
  for (const uint32_t idx : route.openai_endpoints) {
    const Endpoint& ep = table.endpoints[idx];
    WorkerEndpoint& ws = *state[idx];
    if (!available(ep, ws, now_ns)) continue;
    // Never more than this worker's free slots of max_concurrent: a request let through past them
    // would find no endpoint to go to.
    const int slots = ep.max_inflight_per_worker - ws.inflight;
    const EngineSignals& sig = ep.shared->engine;
    if (!freshSignals(sig, ws, now_ns, stale_ns)) {
      ++room;  // unknown signals give no reason to hold a request back
      continue;
    }
    // What this worker sent since the scrape counts as waiting until the next one says better.
    const int waiting = sig.waiting.load(std::memory_order_relaxed) + ws.sent_since_scrape;
    if (cfg.max_kv_usage > 0 && sig.kv_usage.load(std::memory_order_relaxed) >= cfg.max_kv_usage) {
      continue;
    }
    if (cfg.max_waiting > 0) {
      room += std::min(slots, std::max(0, cfg.max_waiting - waiting));
    } else {
      ++room;
    }
  }
  return room;
}

int ProxyHandler::batchRoom(const RouteTable& table, const StateVector& state,
                            const std::vector<uint32_t>& endpoints, int64_t now_ns) {
  int room = 0;
  for (const uint32_t idx : endpoints) {
    const Endpoint& ep = table.endpoints[idx];
    const WorkerEndpoint& ws = *state[idx];
    if (available(ep, ws, now_ns)) room += std::max(0, batchCap(ep, now_ns) - ws.batch_inflight);
  }
  return room;
}

void ProxyHandler::dispatch(const std::string& model) {
  const auto it = flow_.find(model);
  if (it == flow_.end() || !table_) return;
  FlowState& fs = *it->second;
  if (fs.queue.size() == 0) return;
  auto admit = [&fs](FlowQueue::Waiter* w) {
    w->admitted = true;
    ++fs.pending;
    if (w->priority >= Priority::kBatch) ++fs.pending_batch;
    static_cast<net::asio::steady_timer*>(w->wake)->cancel();
  };
  const Route* route = findRoute(*table_, model);
  if (route == nullptr || route->engine == nullptr || !route->engine->flow_control) {
    // A reload turned flow control off (or removed the model): nobody waits any more.
    while (FlowQueue::Waiter* w = fs.queue.popNext()) admit(w);
    return;
  }
  // Another worker's more urgent waiter goes first: this worker holds its less urgent ones (the
  // queued gauge's cells are every worker's counts).
  auto held = [&](Priority p) {
    for (int q = 0; q < static_cast<int>(p); ++q) {
      const double others = route->flow_queued[q]->value() -
                            static_cast<double>(fs.queue.count(static_cast<Priority>(q)));
      if (others > 0.5) return true;
    }
    return false;
  };
  const int64_t now_ns = monoNanos();
  int room = roomFor(*table_, *state_, *route, now_ns) - fs.pending;
  // Batch work also needs room under the deployments' max_batch_share (batch is the last class
  // that waits: nothing behind a batch waiter is more urgent).
  int batch_room =
      route->batch_capped
          ? batchRoom(*table_, *state_, route->openai_endpoints, now_ns) - fs.pending_batch
          : room;
  while (room-- > 0) {
    const FlowQueue::Waiter* next = fs.queue.next();
    if (next == nullptr || held(next->priority)) break;
    if (next->priority >= Priority::kBatch && batch_room-- <= 0) break;
    admit(fs.queue.popNext());
  }
  if (fs.queue.size() > 0 && !fs.ticking) {
    // Room also comes from other workers' and other gateways' requests ending, seen in the next
    // scrape: look again at the scrape interval while anyone waits.
    if (!fs.tick) fs.tick = std::make_unique<net::asio::steady_timer>(ctx_);
    fs.ticking = true;
    struct Tick {
      ProxyHandler* self;
      std::shared_ptr<bool> alive;
      std::string model;
      void operator()(const boost::system::error_code&) const {
        if (!*alive) return;
        const auto f = self->flow_.find(model);
        if (f != self->flow_.end()) f->second->ticking = false;
        self->dispatch(model);
      }
    };
    fs.tick->expires_after(std::chrono::milliseconds(
        std::clamp<int64_t>(route->engine->metrics_interval_ms / 2, 5, 50)));
    fs.tick->async_wait(Tick{this, alive_, model});
  }
}

bool ProxyHandler::readPriority(Exchange& x) {
  const Route& route = *x.route;
  Priority prio = route.default_priority;
  const access::Principal who = x.grant ? x.grant.principal() : access::Principal{};
  const EngineRoutingConfig* engine = route.engine;
  if (engine != nullptr && (!engine->key_priorities.empty() || !engine->user_priorities.empty() ||
                            !engine->team_priorities.empty())) {
    const EngineRoutingConfig& cfg = *engine;
    // The key's class, else its team's (config.cc checked the names). A user's may only lower
    // it: the user is named by the caller (x-infera-user), as the header is.
    auto lookup = [](const std::map<std::string, std::string, std::less<>>& names,
                     std::string_view id, Priority& out) {
      if (id.empty()) return false;
      const auto it = names.find(id);
      return it != names.end() && parsePriority(it->second, out);
    };
    if (!lookup(cfg.key_priorities, who.key_id, prio)) lookup(cfg.team_priorities, who.team, prio);
    Priority user_prio;
    if (lookup(cfg.user_priorities, who.user, user_prio) && user_prio > prio) prio = user_prio;
  }
  const std::string_view asked = x.req.header("x-infera-priority");
  if (!asked.empty()) {
    Priority p;
    if (!parsePriority(asked, p)) return false;
    // A caller may lower its request's priority, never raise it above its route's.
    if (p > prio) prio = p;
  }
  x.priority = prio;
  x.batch_work = prio >= Priority::kBatch;
  return true;
}

Task<bool> ProxyHandler::prioritize(Exchange& x, const std::vector<uint32_t>& endpoints,
                                    bool flow) {
  const Route& route = *x.route;
  flow = flow && route.engine != nullptr && route.engine->flow_control;
  if (!flow && !route.batch_capped) co_return true;
  if (!readPriority(x)) {
    co_await sendError(x, 400,
                       "x-infera-priority must be one of critical, standard, batch, sheddable",
                       "invalid_request_error", "invalid_priority");
    co_return false;
  }
  if (!x.batch_work) {
    // An interactive request: batch work borrowing the endpoints goes back to its share.
    const int64_t now_ns = monoNanos();
    for (const uint32_t idx : endpoints) {
      const Endpoint& ep = x.table->endpoints[idx];
      if (ep.batch_idle_ns > 0) ep.shared->interactive_ns.store(now_ns, std::memory_order_relaxed);
    }
  }
  if (flow) co_return co_await waitForRoom(x);
  if (!x.batch_work || batchRoom(*x.table, *x.state, endpoints, monoNanos()) > 0) co_return true;
  // Not served: the key's, team's and user's request counters get it back.
  if (x.grant) x.grant.refusedByResources();
  access::appendRetryAfter(x.extra, kBatchCapRetryMs);
  co_await sendError(
      x, 429,
      "model " + route.model + " is at its deployments' share for batch work (max_batch_share)",
      "requests", "model_saturated");
  co_return false;
}

Task<bool> ProxyHandler::waitForRoom(Exchange& x) {
  const Route& route = *x.route;
  const EngineRoutingConfig& cfg = *route.engine;
  const Priority prio = x.priority;
  const access::Principal who = x.grant ? x.grant.principal() : access::Principal{};
  auto& slot = flow_[route.model];
  if (!slot) slot = std::make_unique<FlowState>();
  FlowState& fs = *slot;
  const int64_t now_ns = monoNanos();
  int room = roomFor(*x.table, *x.state, route, now_ns) - fs.pending;
  if (x.batch_work && route.batch_capped) {
    room = std::min(
        room, batchRoom(*x.table, *x.state, route.openai_endpoints, now_ns) - fs.pending_batch);
  }
  if (fs.queue.size() == 0 && room > 0) co_return true;
  const std::string_view team = who.team;
  const int pi = static_cast<int>(prio);
  const int64_t retry_ms = std::max<int64_t>(1000, cfg.metrics_interval_ms * 10);
  // Sheddable work never waits: it goes if there is room beyond everyone waiting, else it is shed.
  if (prio == Priority::kSheddable && room - static_cast<int>(fs.queue.size()) > 0) co_return true;
  if (prio == Priority::kSheddable) {
    flowCounter(route, prio, team, "shed")->inc(shard_);
    if (x.grant) x.grant.refusedByResources();  // not served: the counters get it back
    access::appendRetryAfter(x.extra, retry_ms);
    co_await sendError(x, 429,
                       "model " + route.model + " is saturated; sheddable requests do not wait",
                       "requests", "model_saturated");
    co_return false;
  }
  FlowQueue::Waiter w;
  w.priority = prio;
  if (cfg.fairness == "team") {
    w.key = std::string(team);
  } else if (cfg.fairness == "user") {
    w.key = std::string(who.user.empty() ? team : who.user);
  }
  w.cost = x.grant ? static_cast<double>(x.grant.estimatedPrompt() + x.grant.maxCompletion())
                   : static_cast<double>(x.req.body.size() / 4 + 1) +
                         static_cast<double>(std::max<int64_t>(x.fields.max_tokens, 16));
  net::asio::steady_timer timer(ctx_);
  w.wake = &timer;
  if (fs.queue.size() >= static_cast<size_t>(cfg.max_queued)) {
    FlowQueue::Waiter* worst = fs.queue.shedFor(w);
    if (worst == nullptr) {
      flowCounter(route, prio, team, "shed")->inc(shard_);
      if (x.grant) x.grant.refusedByResources();
      access::appendRetryAfter(x.extra, retry_ms);
      co_await sendError(x, 429,
                         "model " + route.model + " is saturated and its wait queue is full",
                         "requests", "model_saturated");
      co_return false;
    }
    // A less urgent waiter, or one of a team served more, makes room.
    worst->shed = true;
    fs.queue.remove(worst);
    static_cast<net::asio::steady_timer*>(worst->wake)->cancel();
  }
  // However this ends (the loop's shutdown included), the waiter leaves the queue.
  struct Queued {
    FlowQueue& q;
    FlowQueue::Waiter& w;
    ~Queued() { q.remove(&w); }
  } queued{fs.queue, w};
  fs.queue.push(&w);
  route.flow_queued[pi]->add(shard_, 1);
  flowCounter(route, prio, team, "queued")->inc(shard_);
  // The one disconnect watch of the request (a writer keeps the first it is given): the same as
  // forward()'s, and it also ends the wait.
  x.flow_timer = &timer;
  x.w.watchDisconnect([&x] {
    x.client_gone = true;
    if (x.flow_timer) x.flow_timer->cancel();
    if (x.current) x.current->abort();
  });
  const int64_t queued_ns = monoNanos();
  timer.expires_after(std::chrono::milliseconds(cfg.queue_timeout_ms));
  dispatch(route.model);  // the most urgent waiter may have room now
  if (!w.admitted && !w.shed && !x.client_gone) {
    boost::system::error_code ec;
    co_await timer.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
  }
  // Out of the queue before anything else is awaited: a dispatch meanwhile must not admit (and
  // count as pending) a waiter that is leaving.
  fs.queue.remove(&w);
  x.flow_timer = nullptr;
  route.flow_queued[pi]->add(shard_, -1);
  route.flow_wait[pi]->observe(shard_, static_cast<double>(monoNanos() - queued_ns) / 1e9);
  const bool gone = x.client_gone;
  if (w.admitted) {
    --fs.pending;
    if (w.priority >= Priority::kBatch) --fs.pending_batch;
    if (!gone) {
      flowCounter(route, prio, team, "admitted")->inc(shard_);
      co_return true;
    }
  }
  if (gone) {
    flowCounter(route, prio, team, "left")->inc(shard_);
    x.status = 499;
    clientLeft(x, nullptr);
    x.w.closeAfterResponse();
    co_await x.w.send(499, "application/json", "{}");
    co_return false;
  }
  if (x.grant) x.grant.refusedByResources();  // shed or timed out: not served
  access::appendRetryAfter(x.extra, retry_ms);
  if (w.shed) {
    flowCounter(route, prio, team, "shed")->inc(shard_);
    co_await sendError(
        x, 429, "model " + route.model + " is saturated; more urgent requests took the place",
        "requests", "model_saturated");
    co_return false;
  }
  flowCounter(route, prio, team, "timeout")->inc(shard_);
  co_await sendError(x, 429,
                     "model " + route.model + " stayed saturated for " +
                         std::to_string(cfg.queue_timeout_ms) + " ms",
                     "requests", "model_saturated");
  co_return false;
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
  const std::string body = net::errorJson(message, type, code);
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

// Each API's coroutine owns its exchange (one coroutine frame less per request than a dispatcher
// in front of them): this guard starts it and, however the coroutine ends, finishes it.
struct ProxyHandler::Served {
  ProxyHandler& h;
  Exchange& x;
  Served(ProxyHandler& handler, Exchange& exchange) : h(handler), x(exchange) { h.begin(x); }
  ~Served() {
    h.finishExchange(x);
    h.metrics_.in_flight->add(h.shard_, -1);
  }
};

Task<void> ProxyHandler::notReady(Exchange& x) {
  co_await sendError(x, 503, "gateway has no configuration yet", "server_error", "not_ready");
}

Task<void> ProxyHandler::unmatched(net::HttpRequest& req, net::ResponseWriter& w, int status,
                                   std::string allow) {
  Exchange x{req, w};
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
  auto denied = access_->authenticateRequest(x.req, x.grant);
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
  const std::string_view path = x.req.path();
  const bool openai = path.starts_with("/v1/");
  const bool embeddings = path == "/v1/embeddings";
  if (openai) {
    // Worst case: every body byte a prompt token is far above any tokenizer (~4 bytes a token);
    // a quarter of the bytes is the estimate, reconciled to the backend's usage afterwards.
    ar.est_prompt_tokens = static_cast<int64_t>(x.req.body.size() / 4) + 1;
    if (!embeddings) {
      const int64_t per_choice =
          x.fields.max_tokens >= 0 ? x.fields.max_tokens : access_->defaultMaxTokens();
      ar.max_completion_tokens = per_choice * x.fields.n;
    }
  }
  if (access_->cacheEnabled() && openai && !x.stream) {
    const std::string_view opt = x.req.header("x-infera-cache");
    x.cacheable = opt != "off" && (embeddings || route.cache || opt == "on" ||
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
    co_await x.w.send(200, hit->content_type, hit->body, headers);
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

RequestKeys ProxyHandler::requestKeys(Exchange& x, const Route& route) {
  RequestKeys k;
  // The headers the split reads, in one pass: the first of each, as HttpRequest::header reads it.
  // Without access control, the user header and the credentials as sent (hashed, never kept).
  const bool from_headers = !x.grant;
  bool user = false, key = false, arm = false;
  for (const net::HttpHeader& h : x.req.headers) {
    const std::string_view n = h.name;
    if (n.size() == 12) {
      if (!arm && n == "x-infera-arm") {
        k.forced_arm = h.value;
        arm = true;
      }
    } else if (n.size() == 13 && from_headers) {
      if (!user && n == "x-infera-user") {
        k.user = h.value;
        user = true;
      } else if (!key && n == "authorization") {
        k.key = h.value;
        key = true;
      }
    }
  }
  if (x.grant) {
    const access::Principal p = x.grant.principal();
    k.user = p.user;
    k.key = p.key_id;
  }
  k.headers = &x.req.headers;
  k.random = rng_();
  // Drawn only for a route with a shadow (the draw decides whether this request is mirrored).
  if (route.shadow) k.shadow_draw = std::uniform_real_distribution<double>(0, 1)(rng_);
  return k;
}

void ProxyHandler::applyTargets(Exchange& x, const Targets& t) {
  x.split = t.split;
  x.arm = t.arm;
  x.shadow = t.shadow;
  x.want_usage = x.arm != nullptr;
  if (x.shadow) {
    // Deterministic requests are compared with the shadow's answer.
    x.compare = !x.fields.stream && x.fields.has_temperature && x.fields.temperature == 0;
    x.want_usage = x.want_usage || x.compare;
  }
  const CaptureConfig& c = t.route->capture;
  if (c.enabled() && observer_) {
    const std::string_view key = x.grant ? x.grant.principal().key_id : std::string_view();
    x.keep_answer = key.empty() || std::find(c.opt_out_keys.begin(), c.opt_out_keys.end(), key) ==
                                       c.opt_out_keys.end();
  }
  if (t.route->tag_responses || x.arm) {
    x.extra.reserve(x.extra.size() + 3);  // the route, the arm and x-request-id: one allocation
    x.extra.push_back(t.route->route_header);
    if (x.arm) x.extra.push_back(x.arm->header);
  }
}

void ProxyHandler::finishExperiment(Exchange& x, double seconds) {
  if (x.arm) {
    const Arm& a = *x.arm;
    a.requests_by_class[codeClassIndex(x.status)]->inc(shard_);
    if (x.status >= 500) a.errors->inc(shard_);
    a.duration->observe(shard_, seconds);
    if (x.ttft_s > 0) a.ttft->observe(shard_, x.ttft_s);
    if (x.usage.seen) {
      a.prompt_tokens->inc(shard_, static_cast<double>(x.usage.prompt));
      a.completion_tokens->inc(shard_, static_cast<double>(x.usage.completion));
    }
  }
  if (x.keep_answer) capture(x, seconds);
  if (x.shadow) startShadow(x, seconds);
}

void ProxyHandler::capture(Exchange& x, double seconds) {
  const CaptureConfig& c = x.route->capture;
  bool flagged = false;
  std::string reason;
  if (c.flag_errors && x.status >= 500) {
    flagged = true;
    reason = "rule: status " + std::to_string(x.status);
  } else if (c.flag_slower_ms > 0 && seconds * 1000 > static_cast<double>(c.flag_slower_ms)) {
    flagged = true;
    reason = "rule: slower than " + std::to_string(c.flag_slower_ms) + " ms";
  } else {
    for (const auto& w : c.flag_contains) {
      if (!w.empty() && x.answer.find(w) != std::string::npos) {
        flagged = true;
        reason = "rule: answer contains '" + w + "'";
        break;
      }
    }
  }
  const bool sampled =
      c.sample > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < c.sample;
  if (!flagged && !sampled) return;
  CapturedInference ci;
  ci.ts_ms = SystemClock::instance().unixMillis();
  ci.request_id = x.request_id;
  ci.model = x.fields.has_model ? x.fields.model : x.route->model;
  ci.target = x.route->model;
  if (x.arm) ci.arm = x.arm->name;
  if (x.grant) ci.key_id = std::string(x.grant.principal().key_id);
  ci.status = x.status;
  ci.latency_ms = seconds * 1000;
  // Cut at max_bytes, but never inside a character: a capture stays valid UTF-8 when the body was.
  ci.request = std::string(truncateUtf8(x.req.body, static_cast<size_t>(c.max_bytes)));
  ci.response = std::string(truncateUtf8(x.answer, static_cast<size_t>(c.max_bytes)));
  ci.flagged = flagged;
  ci.reason = std::move(reason);
  if (x.route->captures) x.route->captures->inc(shard_);
  observer_->captured(std::move(ci));
}

struct ProxyHandler::ShadowJob {
  std::shared_ptr<const RouteTable> table;  // keeps the routes, endpoints and pools alive
  std::shared_ptr<const StateVector> state;
  const Route* shadow = nullptr;
  const ShadowCells* cells = nullptr;
  uint32_t endpoint = 0;
  std::string target;
  std::string body;
  std::vector<HttpHeader> headers;
  ShadowOutcome outcome;
  std::string primary_output;
  bool compare = false;
  Deadline deadline;
  int shard = 0;
  InferenceObserver* observer = nullptr;
  int* inflight = nullptr;  // this worker's count for the shadow route (valid while alive)
  std::shared_ptr<bool> alive;
};

void ProxyHandler::startShadow(Exchange& x, double seconds) {
  const Route& from = x.split ? *x.split : *x.route;
  const Route& sh = *x.shadow;
  const ShadowCells& cells = from.shadow_cells;
  auto it = shadow_inflight_.find(std::string_view(sh.model));
  if (it == shadow_inflight_.end()) it = shadow_inflight_.emplace(sh.model, 0).first;
  ShadowOutcome o;
  o.ts_ms = SystemClock::instance().unixMillis();
  o.request_id = x.request_id;
  o.model = from.model;
  o.primary = x.route->model;
  o.shadow = sh.model;
  o.primary_latency_ms = seconds * 1000;
  auto give_up = [&](const char* why, obs::Counter* counter) {
    counter->inc(shard_);
    o.error = why;
    if (observer_) observer_->shadowDone(std::move(o));
  };
  if (it->second >= from.shadow_max_concurrent) {
    give_up("shed", cells.shed);
    return;
  }
  const int idx = pick(*x.table, *x.state, sh.openai_endpoints, {}, monoNanos());
  if (idx < 0) {
    give_up("no_endpoint", cells.failed);
    return;
  }
  auto job = std::make_unique<ShadowJob>();
  job->table = x.table;
  job->state = x.state;
  job->shadow = &sh;
  job->cells = &cells;
  job->endpoint = static_cast<uint32_t>(idx);
  const Endpoint& ep = x.table->endpoints[static_cast<size_t>(idx)];
  const Deployment& dep = *ep.deployment;
  job->target = ep.address.base_path + x.req.target;
  // The client's body with the shadow deployment's model name (the one reading of the request).
  const RequestFields& f = x.fields;
  if (f.model_end > f.model_begin) {
    job->body.reserve(x.req.body.size());
    job->body.append(x.req.body, 0, f.model_begin);
    net::appendJsonString(job->body, dep.upstream_model);
    job->body.append(x.req.body, f.model_end);
  } else {
    job->body = x.req.body;
  }
  for (const auto& h : x.req.headers) {
    if (net::isHopByHopHeader(h.name) || h.name == "authorization" || h.name == "api-key") continue;
    job->headers.push_back(h);
  }
  job->headers.push_back({"host", ep.host_header});
  job->outcome = std::move(o);
  job->primary_output = std::move(x.primary_output);
  job->compare = x.compare && !job->primary_output.empty();
  job->deadline = deadlineAfter(from.shadow_timeout_ms);
  job->shard = shard_;
  job->observer = observer_;
  job->inflight = &it->second;
  job->alive = alive_;
  ++it->second;
  net::spawn(ctx_, runShadow(std::move(job)), "shadow request");
}

// Runs after the client got its answer, on this worker's loop, bounded by its own deadline; it
// touches only what the job holds (the handler may be gone when it resumes).
Task<void> ProxyHandler::runShadow(std::unique_ptr<ShadowJob> job) {
  ShadowJob& j = *job;
  const int64_t start_ns = monoNanos();
  const Endpoint& ep = j.table->endpoints[j.endpoint];
  WorkerEndpoint& ws = *(*j.state)[j.endpoint];
  std::string output;
  bool failed = true;
  {
    auto c = co_await ws.pool->acquire(j.deadline);
    if (!c.ok()) {
      j.outcome.error =
          c.status().code() == StatusCode::kDeadlineExceeded ? "timeout" : "unavailable";
    } else {
      std::unique_ptr<net::UpstreamConnection> conn = std::move(*c);
      net::ClientRequest creq;
      creq.method = "POST";
      creq.target = j.target;
      creq.host = ep.host_header;
      creq.headers = j.headers;
      creq.body = j.body;
      creq.skip_hop_by_hop = true;
      creq.request_id = j.outcome.request_id;
      const Status sent = co_await conn->send(creq, j.deadline);
      // Not `sent.isOk() ? co_await ... : Result(sent)`: g++ 12 destroys the temporaries of a
      // conditional holding a co_await twice.
      Result<const net::ClientResponseHead*> head =
          sent.isOk() ? Status::cancelled("not read") : sent;
      if (sent.isOk()) {
        auto read = co_await conn->readHead(j.deadline);
        head = std::move(read);
      }
      bool clean = false;
      if (head.ok()) {
        j.outcome.status = (*head)->status;
        clean = true;
        for (;;) {
          auto piece = co_await conn->readBody(j.deadline);
          if (!piece.ok()) {
            clean = false;
            j.outcome.error =
                piece.status().code() == StatusCode::kDeadlineExceeded ? "timeout" : "unavailable";
            break;
          }
          if (piece->empty()) break;
          if (output.size() < (1u << 20)) output.append(*piece);
        }
        failed = !clean;
      } else {
        j.outcome.error =
            head.status().code() == StatusCode::kDeadlineExceeded ? "timeout" : "unavailable";
      }
      if (clean) {
        ws.pool->release(std::move(conn));
      } else {
        conn->abort();
      }
    }
  }
  const double seconds = static_cast<double>(monoNanos() - start_ns) / 1e9;
  j.outcome.latency_ms = seconds * 1000;
  j.cells->duration->observe(j.shard, seconds);
  if (failed) {
    j.cells->failed->inc(j.shard);
  } else if (j.outcome.status >= 400) {
    j.cells->error->inc(j.shard);
  } else {
    j.cells->ok->inc(j.shard);
    UsageScan usage;
    readUsage(usage, output);
    if (usage.seen) {
      j.outcome.prompt_tokens = usage.prompt;
      j.outcome.completion_tokens = usage.completion;
    }
    if (j.compare) {
      j.outcome.matched = answerOutput(output) == j.primary_output ? 1 : 0;
      (j.outcome.matched ? j.cells->match : j.cells->mismatch)->inc(j.shard);
    }
  }
  if (j.observer) j.observer->shadowDone(std::move(j.outcome));
  if (*j.alive) --*j.inflight;
}

}  // namespace infera::gateway
