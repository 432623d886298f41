#include "gateway/gateway.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "access/access.h"
#include "core/clock.h"
#include "core/log.h"
#include "gateway/internal/anthropic.h"
#include "gateway/internal/proxy.h"
#include "gateway/internal/routes.h"
#include "obs/metrics.h"

namespace infera::gateway {
namespace {

using net::Task;

class GatewayImpl final : public Gateway {
 public:
  GatewayImpl(GatewayConfig settings, const RouteSource& routes, GatewayDeps deps)
      : settings_(std::move(settings)),
        routes_(routes),
        deps_(std::move(deps)),
        metrics_(deps_.metrics),
        loops_(static_cast<size_t>(deps_.workers)),
        worker_generations_(static_cast<size_t>(deps_.workers)) {}

  ~GatewayImpl() override { stopHealthChecks(); }

  Status init() {
    log_ = componentLogger("gateway");
    INFERA_ASSIGN_OR_RETURN(
        current_, buildRouteTable(settings_, routes_.models(), deps_.emulator_urls, shared_,
                                  metrics_, ++generation_, &prefix_indexes_));
    metrics_.registry
        .gaugeFamily("infera_gateway_config_generation", "Generation of the config in use.")
        ->setCallback([this] { return static_cast<double>(generation_.load()); });
    auto per_worker = metrics_.registry.gaugeFamily(
        "infera_gateway_worker_config_generation",
        "Generation of the route table each worker serves (each reaches a change before it is "
        "answered).",
        {"worker"});
    for (size_t i = 0; i < worker_generations_.size(); ++i) {
      per_worker->setCallback({std::to_string(i)}, [this, i] {
        return static_cast<double>(worker_generations_[i].load(std::memory_order_relaxed));
      });
    }
    updateHealthGauges(*current_);
    return Status::ok();
  }

  void addDataRoutes(int loop, net::asio::io_context& ctx, net::Router& router,
                     access::AccessWorker* access) override {
    auto h = std::make_unique<ProxyHandler>(loop, ctx, metrics_, deps_.access_log, access,
                                            deps_.observer);
    {
      std::lock_guard<std::mutex> lock(control_mu_);
      h->setTable(current_);
      worker_generations_[static_cast<size_t>(loop)].store(current_->generation);
      loops_[static_cast<size_t>(loop)] = {&ctx, h.get()};
    }
    ProxyHandler* p = h.get();
    using Handle = net::Task<void> (ProxyHandler::*)(net::HttpRequest&, net::ResponseWriter&);
    auto to = [p](Handle handle) {
      return [p, handle](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) {
        return (p->*handle)(req, w);
      };
    };
    router.add("GET", "/v1/models", to(&ProxyHandler::handleModels));
    // OpenAI's APIs, Anthropic's Messages, and vLLM's pooling and tokenizer APIs (rerank in its
    // Jina/Cohere shapes, score, tokenize): each routed by the body's model.
    for (const char* path : {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                             "/v1/messages", "/v1/responses", "/v1/rerank", "/rerank", "/v2/rerank",
                             "/v1/score", "/score", "/tokenize", "/detokenize"}) {
      router.add("POST", path, to(&ProxyHandler::handleOpenAi));
    }
    router.add("POST", "/v1/messages/count_tokens", to(&ProxyHandler::handleCountTokens));
    for (const char* path : {"/v2", "/v2/health/live", "/v2/health/ready"}) {
      router.add("*", path, to(&ProxyHandler::handleKServeMeta));
    }
    router.add("*", "/v2/models/{model}", to(&ProxyHandler::handleKServe));
    router.add("*", "/v2/models/{model}/{rest...}", to(&ProxyHandler::handleKServe));
    if (access) {
      // A client waiting for 100 Continue without a good key gets its 401 before sending the body.
      // The key from the head, refused in the API's error shape; Anthropic's clients send theirs
      // as x-api-key.
      auto checker = [access](bool anthropic_api) {
        return [access,
                anthropic_api](const net::HttpRequest& head) -> std::optional<net::EarlyAnswer> {
          access::Grant g;
          auto denied = access->authenticateRequest(
              head, g, anthropic_api ? "x-api-key" : std::string_view());
          if (!denied) return std::nullopt;
          return net::EarlyAnswer{denied->status, "application/json",
                                  anthropic_api
                                      ? anthropic::errorJson(denied->status, denied->message)
                                      : access::denialJson(*denied)};
        };
      };
      for (const char* path :
           {"/v1/", "/rerank", "/v2/rerank", "/score", "/tokenize", "/detokenize"}) {
        router.setBeforeBody(path, checker(false));
      }
      router.setBeforeBody("/v1/messages", checker(true));
    }
    // The floor's own answers (invalid UTF-8 at the door, a handler that threw) in Anthropic's
    // shape for its API.
    router.setErrorShape("/v1/messages", [](int status, std::string_view message,
                                            std::string_view) {
      return net::EarlyAnswer{status, "application/json", anthropic::errorJson(status, message)};
    });
    router.setFallback(
        "", [p](net::HttpRequest& req, net::ResponseWriter& w, int status, std::string_view allow) {
          return p->unmatched(req, w, status, std::string(allow));
        });
    router.own(std::move(h));
  }

  void addAdminRoutes(net::Router& admin, const net::RouteGuard& guard) override {
    admin.add(
        "GET", "/admin/endpoints",
        guard([this](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
          const std::string body = endpointsJson();
          co_await w.send(200, "application/json", body);
        }));
  }

  Status apply(GatewayConfig next) override {
    std::lock_guard<std::mutex> lock(control_mu_);
    return applyLocked(std::move(next));
  }

  Status rebuild() override {
    std::lock_guard<std::mutex> lock(control_mu_);
    GatewayConfig same = settings_;
    return applyLocked(std::move(same));
  }

  int64_t generation() const override { return generation_.load(); }

  std::string endpointsJson() const override {
    auto t = table();
    std::string body = "{\"generation\":" + std::to_string(t->generation) + ",\"endpoints\":[";
    const int64_t now = monoNanos();
    for (size_t i = 0; i < t->endpoints.size(); ++i) {
      const auto& ep = t->endpoints[i];
      if (i) body += ",";
      body += "{\"model\":";
      net::appendJsonString(body, ep.deployment->model);
      body += ",\"deployment\":";
      net::appendJsonString(body, ep.deployment->name);
      body += ",\"endpoint\":";
      net::appendJsonString(body, ep.label);
      body += ",\"region\":";
      net::appendJsonString(body, ep.region);
      body += ",\"protocol\":\"" + std::string(protocolName(ep.protocol)) + "\"";
      body += ",\"weight\":" + std::to_string(ep.weight);
      body += std::string(",\"healthy\":") + (ep.shared->healthy.load() ? "true" : "false");
      body += std::string(",\"ejected\":") +
              (ep.shared->ejected_until_ns.load() > now ? "true" : "false");
      // The workers' views: requests in flight (summed) and EWMA latency (the mean of the
      // workers that have a sample).
      int in_flight = 0;
      double ewma_sum = 0;
      int sampled = 0;
      for (int k = 0; k < ep.shared->workers; ++k) {
        const auto& v = ep.shared->views[static_cast<size_t>(k)];
        in_flight += v.in_flight.load(std::memory_order_relaxed);
        const double e = v.ewma_s.load(std::memory_order_relaxed);
        if (e > 0) {
          ewma_sum += e;
          ++sampled;
        }
      }
      body += ",\"in_flight\":" + std::to_string(in_flight);
      if (sampled > 0) {
        body += ",\"ewma_ms\":" + std::to_string(ewma_sum / sampled * 1000);
      }
      if (ep.deployment->routing.enabled) engineJson(ep, now, body);
      body += "}";
    }
    body += "]}";
    return body;
  }

  std::optional<ExperimentStats> experimentStats(std::string_view model) const override {
    auto t = table();
    const Route* r = findRoute(*t, model);
    if (!r || !r->experiment()) return std::nullopt;
    ExperimentStats out;
    for (const auto& a : r->arms) {
      ArmStats s;
      s.arm = a.name;
      s.target = a.route->model;
      s.weight = a.weight;
      for (const auto* c : a.requests_by_class) s.requests += c->value();
      s.errors = a.errors->value();
      s.p50_s = a.duration->quantile(0.5);
      s.p99_s = a.duration->quantile(0.99);
      s.ttft_p50_s = a.ttft->quantile(0.5);
      s.ttft_p99_s = a.ttft->quantile(0.99);
      s.prompt_tokens = a.prompt_tokens->value();
      s.completion_tokens = a.completion_tokens->value();
      out.arms.push_back(std::move(s));
    }
    if (r->shadow) {
      const ShadowCells& c = r->shadow_cells;
      ShadowStats s;
      s.target = r->shadow->model;
      s.share = r->shadow_share;
      s.ok = c.ok->value();
      s.error = c.error->value();
      s.failed = c.failed->value();
      s.shed = c.shed->value();
      s.match = c.match->value();
      s.mismatch = c.mismatch->value();
      s.p50_s = c.duration->quantile(0.5);
      s.p99_s = c.duration->quantile(0.99);
      out.shadow = std::move(s);
    }
    return out;
  }

  void startHealthChecks(net::asio::io_context& ctx) override {
    health_ctx_ = &ctx;
    health_running_ = true;
    signals_running_ = true;
    net::asio::post(ctx, [this] {
      health_timer_ = std::make_unique<net::asio::steady_timer>(*health_ctx_);
      signals_timer_ = std::make_unique<net::asio::steady_timer>(*health_ctx_);
      net::spawn(*health_ctx_, healthLoop(), "health checks");
      net::spawn(*health_ctx_, signalsLoop(), "engine signals");
    });
  }

  void stopHealthChecks() override {
    if (!health_ctx_) return;
    stopping_ = true;
    net::asio::post(*health_ctx_, [this] {
      if (health_timer_) health_timer_->cancel();
      if (signals_timer_) signals_timer_->cancel();
    });
    // Scrapes in flight end by their own deadline (metrics_timeout_ms); a loop that no longer
    // runs drops them with their table.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (health_running_.load() || signals_running_.load() ||
           (scrapes_->load() > 0 && std::chrono::steady_clock::now() < give_up)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    health_ctx_ = nullptr;
  }

 private:
  Status applyLocked(GatewayConfig next) {
    auto t = buildRouteTable(next, routes_.models(), deps_.emulator_urls, shared_, metrics_,
                             generation_.load() + 1, &prefix_indexes_);
    if (!t.ok()) return t.takeStatus();
    ++generation_;
    settings_ = std::move(next);
    current_ = *t;
    // Every worker serves the new table before apply returns (and so before a reload, a console
    // apply or a registry change answers): a request sent after the answer never meets the old
    // routes on a worker that had not swapped yet. A loop of this very thread cannot be waited
    // for (it runs the post after we return); a loop that does not run the post within the
    // deadline (stopping) is logged.
    struct Pending {
      std::mutex mu;
      std::condition_variable cv;
      size_t left = 0;
    };
    auto pending = std::make_shared<Pending>();
    for (size_t i = 0; i < loops_.size(); ++i) {
      const Loop& l = loops_[i];
      if (!l.handler) continue;
      const bool here = l.ctx->get_executor().running_in_this_thread();
      if (!here) ++pending->left;
      std::atomic<int64_t>* gen = &worker_generations_[i];
      net::asio::post(*l.ctx, [h = l.handler, tab = current_, pending, here, gen] {
        h->setTable(tab);
        gen->store(tab->generation, std::memory_order_relaxed);
        if (here) return;
        std::lock_guard<std::mutex> lock(pending->mu);
        if (--pending->left == 0) pending->cv.notify_all();
      });
    }
    {
      std::unique_lock<std::mutex> lock(pending->mu);
      if (!pending->cv.wait_for(lock, std::chrono::seconds(5),
                                [&] { return pending->left == 0; })) {
        INFERA_LOG(log_, warn, "{} worker(s) had not taken routes generation {} after 5 s",
                   pending->left, generation_.load());
      }
    }
    updateHealthGauges(*current_);
    return Status::ok();
  }

  std::shared_ptr<const RouteTable> table() const {
    std::lock_guard<std::mutex> lock(control_mu_);
    return current_;
  }

  void updateHealthGauges(const RouteTable& t) {
    for (const auto& ep : t.endpoints) ep.healthy_gauge->set(ep.shared->healthy.load() ? 1 : 0);
  }

  Task<void> probe(const RouteTable& t, const Endpoint& ep,
                   std::shared_ptr<const RouteTable> keep) {
    (void)keep;
    struct InFlight {
      std::atomic<bool>& flag;
      ~InFlight() { flag = false; }
    } in_flight{ep.shared->probe_in_flight};
    const auto& hc = t.health_check;
    const std::string& path = ep.protocol == Protocol::kKServe ? hc.kserve_path : hc.openai_path;
    auto r =
        co_await net::fetch(ep.address, "GET", path, "", {},
                            net::SteadyClock::now() + std::chrono::milliseconds(hc.timeout_ms));
    const bool ok = r.ok() && r->status >= 200 && r->status < 400;
    EndpointShared& s = *ep.shared;
    if (ok) {
      s.check_failures = 0;
      const int n = ++s.check_successes;
      if (!s.healthy.load() && n >= hc.healthy_threshold) {
        s.healthy = true;
        INFERA_LOG(log_, info, "endpoint {} ({}) is healthy again", ep.label, ep.deployment->name);
      }
    } else {
      s.check_successes = 0;
      const int n = ++s.check_failures;
      if (s.healthy.load() && n >= hc.unhealthy_threshold) {
        s.healthy = false;
        INFERA_LOG(log_, warn, "endpoint {} ({}) failed {} health checks: {}", ep.label,
                   ep.deployment->name, n,
                   r.ok() ? "status " + std::to_string(r->status) : r.status().message());
      }
    }
    ep.healthy_gauge->set(s.healthy.load() ? 1 : 0);
  }

  Task<void> healthLoop() {
    struct Done {
      std::atomic<bool>& b;
      ~Done() { b = false; }
    } done{health_running_};
    while (!stopping_) {
      auto t = table();
      if (t->health_check.enabled) {
        std::unordered_map<std::string, bool> seen;
        for (const auto& ep : t->endpoints) {
          if (seen.emplace(ep.key, true).second && !ep.shared->probe_in_flight.exchange(true)) {
            net::spawn(*health_ctx_, probe(*t, ep, t), "health probe");
          }
        }
      }
      health_timer_->expires_after(std::chrono::milliseconds(t->health_check.interval_ms));
      boost::system::error_code ec;
      co_await health_timer_->async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
    }
  }

  // Engine-aware routing's signals: every endpoint of a deployment whose routing is on has its
  // metrics scraped on this one thread at the shortest interval asked; each result is stored in
  // the endpoint's shared signals, which the workers read.
  // Touches nothing of the gateway's but what it is given (a stop does not wait for it forever).
  static Task<void> scrape(const Endpoint& ep, std::shared_ptr<const RouteTable> keep,
                           std::shared_ptr<std::atomic<int>> count) {
    (void)keep;
    struct InFlight {
      EngineSignals& s;
      std::atomic<int>& n;
      ~InFlight() {
        s.in_flight = false;
        --n;
      }
    } in_flight{ep.shared->engine, *count};
    const EngineRoutingConfig& cfg = ep.deployment->routing;
    auto r = co_await net::fetch(
        ep.address, "GET", cfg.metrics_path, "", {},
        net::SteadyClock::now() + std::chrono::milliseconds(cfg.metrics_timeout_ms));
    EngineSignals& sig = ep.shared->engine;
    EngineSample sample;
    if (r.ok() && r->status == 200 && parseEngineMetrics(r->body, sample)) {
      sig.store(sample, monoNanos());
      ep.engine_load->set(sample.running + sample.waiting);
      ep.engine_kv->set(sample.kv_usage);
    } else {
      sig.failures.fetch_add(1, std::memory_order_relaxed);
    }
  }

  Task<void> signalsLoop() {
    struct Done {
      std::atomic<bool>& b;
      ~Done() { b = false; }
    } done{signals_running_};
    while (!stopping_) {
      auto t = table();
      int64_t interval_ms = 1000;  // how soon a reload that turns routing on is seen
      const int64_t now = monoNanos();
      std::unordered_map<std::string_view, bool> seen;
      for (const auto& ep : t->endpoints) {
        const EngineRoutingConfig& cfg = ep.deployment->routing;
        if (!cfg.enabled || !seen.emplace(ep.key, true).second) continue;
        interval_ms = std::min(interval_ms, cfg.metrics_interval_ms);
        const int64_t updated = ep.shared->engine.updated_ns.load(std::memory_order_relaxed);
        const bool stale = updated == 0 || now - updated > cfg.stale_ms * 1'000'000;
        ep.engine_age->set(updated == 0 ? -1 : static_cast<double>(now - updated) / 1e9);
        if (stale) {
          ep.engine_load->set(-1);
          ep.engine_kv->set(-1);
        }
        if (!ep.shared->engine.in_flight.exchange(true)) {
          ++*scrapes_;
          net::spawn(*health_ctx_, scrape(ep, t, scrapes_), "engine metrics scrape");
        }
      }
      signals_timer_->expires_after(std::chrono::milliseconds(interval_ms));
      boost::system::error_code ec;
      co_await signals_timer_->async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
    }
  }

  static void engineJson(const Endpoint& ep, int64_t now, std::string& body) {
    const EngineSignals& sig = ep.shared->engine;
    const int64_t updated = sig.updated_ns.load(std::memory_order_relaxed);
    const bool fresh = updated > 0 && now - updated <= ep.deployment->routing.stale_ms * 1'000'000;
    body += ",\"engine\":{\"known\":";
    body += fresh ? "true" : "false";
    if (updated > 0) {
      body += ",\"age_ms\":" + std::to_string((now - updated) / 1'000'000);
      body += ",\"load\":" + std::to_string(sig.load.load(std::memory_order_relaxed));
      body += ",\"waiting\":" + std::to_string(sig.waiting.load(std::memory_order_relaxed));
      const float kv = sig.kv_usage.load(std::memory_order_relaxed);
      if (kv >= 0) body += ",\"kv_cache_usage\":" + std::to_string(kv);
    }
    body += ",\"scrape_errors\":" + std::to_string(sig.failures.load(std::memory_order_relaxed));
    const double sent = ep.prefix_sent_blocks->value();
    if (sent > 0) {
      body += ",\"prefix_hit_rate\":" + std::to_string(ep.prefix_hit_blocks->value() / sent);
    }
    body += "}";
  }

  struct Loop {
    net::asio::io_context* ctx = nullptr;
    ProxyHandler* handler = nullptr;  // owned by that loop's router
  };

  GatewayConfig settings_;
  const RouteSource& routes_;
  GatewayDeps deps_;
  GatewayMetrics metrics_;
  spdlog::logger* log_ = nullptr;
  mutable std::mutex control_mu_;
  std::shared_ptr<const RouteTable> current_;
  std::unordered_map<std::string, std::shared_ptr<EndpointShared>> shared_;
  std::vector<Loop> loops_;                               // under control_mu_
  std::vector<std::atomic<int64_t>> worker_generations_;  // the table each loop serves
  std::atomic<int64_t> generation_{0};
  net::asio::io_context* health_ctx_ = nullptr;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> health_running_{false};
  std::unique_ptr<net::asio::steady_timer> health_timer_;
  std::atomic<bool> signals_running_{false};
  std::shared_ptr<std::atomic<int>> scrapes_ = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<net::asio::steady_timer> signals_timer_;
  PrefixIndexes prefix_indexes_;  // per model, across reloads (control thread)
};

}  // namespace

Result<std::unique_ptr<Gateway>> Gateway::create(GatewayConfig settings, const RouteSource& routes,
                                                 GatewayDeps deps) {
  auto g = std::make_unique<GatewayImpl>(std::move(settings), routes, std::move(deps));
  INFERA_RETURN_IF_ERROR(g->init());
  return std::unique_ptr<Gateway>(std::move(g));
}

}  // namespace infera::gateway
