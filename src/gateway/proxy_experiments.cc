// Experiments (A/B arms chosen by request keys), data capture and shadow traffic of registry
// routes.
#include <algorithm>
#include <cmath>

#include "core/clock.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "gateway/internal/exchange.h"
#include "net/trace.h"

namespace infera::gateway {

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
