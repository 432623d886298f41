// Flow control (docs/routing.md "Flow control"): requests of an engine-aware route wait in the
// gateway's queue, by priority class and team, for an endpoint with room; batch work is capped by
// its deployments' max_batch_share.
#include <algorithm>
#include <cmath>

#include "core/clock.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "gateway/internal/exchange.h"
#include "net/trace.h"

namespace infera::gateway {

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

}  // namespace infera::gateway
