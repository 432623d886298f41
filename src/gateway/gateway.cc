#include "gateway/gateway.h"

#include <mutex>
#include <unordered_map>

#include "core/clock.h"
#include "core/log.h"
#include "gateway/governance.h"
#include "gateway/proxy.h"
#include "gateway/routes.h"
#include "net/loops.h"
#include "net/server.h"
#include "obs/access_log.h"
#include "obs/metrics.h"

#ifndef INFERA_VERSION
#define INFERA_VERSION "0.1.0"
#endif
#ifndef INFERA_GIT_COMMIT
#define INFERA_GIT_COMMIT "unknown"
#endif

namespace infera::gateway {
namespace {

using net::HttpHeader;
using net::Task;

int resolveWorkers(int configured) {
  if (configured > 0) return configured;
  const int n = static_cast<int>(std::thread::hardware_concurrency());
  return n > 0 ? n : 1;
}

class GatewayImpl;

class AdminHandler final : public net::HttpHandler {
 public:
  explicit AdminHandler(GatewayImpl& g) : g_(g) {}
  Task<void> handle(net::HttpRequest& req, net::ResponseWriter& w) override;

 private:
  GatewayImpl& g_;
};

class GatewayImpl final : public Gateway {
 public:
  GatewayImpl(GatewayConfig config, std::string path)
      : config_(std::move(config)),
        path_(std::move(path)),
        workers_(resolveWorkers(config_.workers)),
        registry_(workers_),
        metrics_(registry_),
        loops_(workers_),
        admin_loops_(1),
        handlers_(static_cast<size_t>(workers_), nullptr) {}

  ~GatewayImpl() override {
    stopping_ = true;
    if (admin_) {
      net::asio::post(admin_loops_.loop(0), [this] {
        if (health_timer_) health_timer_->cancel();
      });
      while (health_running_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    admin_.reset();  // first: a /metrics scrape reads data_'s stats
    if (governance_) governance_->setPublisher(nullptr);
    data_.reset();
    loops_.stop();
    governance_.reset();  // after the workers: writes the last usage records
    admin_loops_.stop();
    emulators_.clear();
  }

  Status init() {
    log_ = componentLogger("gateway");
    setLogLevel(config_.log_level);
    obs::registerProcessMetrics(registry_, INFERA_VERSION, INFERA_GIT_COMMIT);
    for (const auto& [name, ec] : config_.emulators) {
      auto emu = emulator::Emulator::start(ec);
      if (!emu.ok()) return emu.status().withContext("starting emulator " + name);
      emulator_urls_[name] = (*emu)->url();
      INFERA_LOG(log_, info, "in-process emulator '{}' serving {}", name, (*emu)->url());
      emulators_[name] = std::move(*emu);
    }
    if (!config_.access_log.empty()) {
      auto al = obs::AccessLog::open(config_.access_log, workers_);
      if (!al.ok()) return al.takeStatus();
      access_log_ = std::move(*al);
    }
    INFERA_ASSIGN_OR_RETURN(current_, buildRouteTable(config_, emulator_urls_, shared_, metrics_, ++generation_));
    if (config_.governance.enabled) {
      INFERA_ASSIGN_OR_RETURN(governance_, Governance::start(config_.governance, registry_, workers_));
    }
    registry_.gaugeFamily("infera_gateway_config_generation", "Generation of the config in use.")
        ->setCallback([this] { return static_cast<double>(generation_.load()); });
    registry_.gaugeFamily("infera_net_connections_open", "Client connections open on the data port.")
        ->setCallback([this] { return data_ ? static_cast<double>(data_->stats().connections_open.load()) : 0.0; });
    registry_.counterFamily("infera_net_connections_total", "Client connections accepted on the data port.")
        ->setCallback([this] { return data_ ? static_cast<double>(data_->stats().connections_total.load()) : 0.0; });
    registry_.counterFamily("infera_net_coroutine_failures_total",
                            "Spawned coroutines that ended with an exception (logged; a bug).")
        ->setCallback([] { return static_cast<double>(net::spawnFailures()); });
    registry_.counterFamily("infera_net_timeouts_total", "Client connections closed by a read/write timeout.")
        ->setCallback([this] { return data_ ? static_cast<double>(data_->stats().timeouts.load()) : 0.0; });

    loops_.start();
    admin_loops_.start();
    net::ServerConfig sc;
    sc.host = config_.listen.host;
    sc.port = config_.listen.port;
    sc.max_body_bytes = config_.max_body_bytes;
    sc.max_header_bytes = config_.max_header_bytes;
    sc.idle_timeout = std::chrono::milliseconds(config_.idle_timeout_ms);
    const auto initial = current_;
    auto data = net::HttpServer::create(loops_, sc, [this, initial](int i, net::asio::io_context& ctx) {
      auto h = std::make_unique<ProxyHandler>(i, ctx, metrics_, access_log_.get(), governance_.get());
      h->setTable(initial);
      handlers_[static_cast<size_t>(i)] = h.get();
      return h;
    });
    if (!data.ok()) return data.takeStatus();
    data_ = std::move(*data);
    if (governance_) {
      // Every new key/team snapshot reaches each worker on its own loop.
      governance_->setPublisher([this](std::shared_ptr<const GovSnapshot> snap) {
        for (int i = 0; i < workers_; ++i) {
          net::asio::post(loops_.loop(i), [this, i, snap] {
            if (handlers_[static_cast<size_t>(i)]) handlers_[static_cast<size_t>(i)]->setGovernance(snap);
          });
        }
      });
      // A change made between the workers' start and the publisher's: hand over the latest.
      auto snap = governance_->snapshot();
      for (int i = 0; i < workers_; ++i) {
        net::asio::post(loops_.loop(i), [this, i, snap] { handlers_[static_cast<size_t>(i)]->setGovernance(snap); });
      }
    }
    net::ServerConfig ac;
    ac.host = config_.admin.host;
    ac.port = config_.admin.port;
    auto admin = net::HttpServer::create(admin_loops_, ac, [this](int, net::asio::io_context&) {
      return std::make_unique<AdminHandler>(*this);
    });
    if (!admin.ok()) return admin.takeStatus();
    admin_ = std::move(*admin);
    updateHealthGauges(*current_);
    health_running_ = true;
    net::asio::post(admin_loops_.loop(0), [this] {
      health_timer_ = std::make_unique<net::asio::steady_timer>(admin_loops_.loop(0));
      net::spawn(admin_loops_.loop(0), healthLoop(), "health checks");
    });
    INFERA_LOG(log_, info, "serving on {}:{} (admin {}:{}), {} workers, {} models", config_.listen.host,
               data_->port(), config_.admin.host, admin_->port(), workers_, config_.models.size());
    return Status::ok();
  }

  uint16_t port() const override { return data_->port(); }
  uint16_t adminPort() const override { return admin_->port(); }

  Status reload() override {
    if (path_.empty()) {
      return Status::failedPrecondition("this gateway was not started from a config file");
    }
    auto cfg = loadGatewayConfig(path_);
    if (!cfg.ok()) {
      metrics_.reloads->counter({"error"})->inc(0);
      INFERA_LOG(log_, err, "config reload rejected, old config keeps serving: {}", cfg.status().message());
      return cfg.takeStatus();
    }
    return apply(std::move(*cfg));
  }

  Status apply(GatewayConfig next) override {
    std::lock_guard<std::mutex> lock(control_mu_);
    auto fail = [&](Status s) {
      metrics_.reloads->counter({"error"})->inc(0);
      INFERA_LOG(log_, err, "config reload rejected, old config keeps serving: {}", s.message());
      return s;
    };
    if (resolveWorkers(next.workers) != workers_ || next.listen.port != config_.listen.port ||
        next.listen.host != config_.listen.host || next.admin.port != config_.admin.port ||
        next.admin.host != config_.admin.host || next.max_body_bytes != config_.max_body_bytes ||
        next.access_log != config_.access_log || next.governance.enabled != config_.governance.enabled ||
        next.governance.store != config_.governance.store || next.governance.redis != config_.governance.redis) {
      return fail(Status::failedPrecondition(
          "workers, listen, admin, max_body_bytes, access_log and the governance store/redis need a restart; "
          "reload changes routes, limits, timeouts, retries, health checks and balancing"));
    }
    for (const auto& [name, ec] : next.emulators) {
      if (!emulators_.count(name)) {
        return fail(Status::failedPrecondition("emulator '" + name + "' is new: emulators start with the process"));
      }
    }
    auto table = buildRouteTable(next, emulator_urls_, shared_, metrics_, generation_.load() + 1);
    if (!table.ok()) return fail(table.takeStatus());
    ++generation_;
    setLogLevel(next.log_level);
    config_ = std::move(next);
    current_ = *table;
    for (int i = 0; i < workers_; ++i) {
      net::asio::post(loops_.loop(i), [this, i, t = current_] { handlers_[static_cast<size_t>(i)]->setTable(t); });
    }
    updateHealthGauges(*current_);
    metrics_.reloads->counter({"ok"})->inc(0);
    INFERA_LOG(log_, info, "config generation {} in use ({} models)", generation_.load(), config_.models.size());
    return Status::ok();
  }

  bool drain(std::chrono::milliseconds timeout) override {
    draining_ = true;
    INFERA_LOG(log_, info, "draining (up to {} ms)", timeout.count());
    return data_->drain(timeout);
  }

  std::string metricsText() const override { return registry_.scrape(); }
  double metricSum(const std::string& name) const override { return registry_.sum(name); }
  int64_t configGeneration() const override { return generation_.load(); }

  bool draining() const { return draining_.load(); }
  Governance* governance() { return governance_.get(); }
  const std::string& configPath() const { return path_; }
  spdlog::logger* log() const { return log_; }
  std::shared_ptr<const RouteTable> table() {
    std::lock_guard<std::mutex> lock(control_mu_);
    return current_;
  }

 private:
  void updateHealthGauges(const RouteTable& t) {
    for (const auto& ep : t.endpoints) ep.healthy_gauge->set(ep.shared->healthy.load() ? 1 : 0);
  }

  Task<void> probe(const RouteTable& t, const Endpoint& ep, std::shared_ptr<const RouteTable> keep) {
    (void)keep;
    struct InFlight {
      std::atomic<bool>& flag;
      ~InFlight() { flag = false; }
    } in_flight{ep.shared->probe_in_flight};
    const auto& hc = t.health_check;
    const std::string& path = ep.protocol == Protocol::kKServe ? hc.kserve_path : hc.openai_path;
    auto r = co_await net::fetch(ep.address, "GET", path, "", {},
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
        INFERA_LOG(log_, warn, "endpoint {} ({}) failed {} health checks: {}", ep.label, ep.deployment->name, n,
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
            net::spawn(admin_loops_.loop(0), probe(*t, ep, t), "health probe");
          }
        }
      }
      health_timer_->expires_after(std::chrono::milliseconds(t->health_check.interval_ms));
      boost::system::error_code ec;
      co_await health_timer_->async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
    }
  }

  GatewayConfig config_;
  std::string path_;
  int workers_;
  obs::MetricsRegistry registry_;
  GatewayMetrics metrics_;
  spdlog::logger* log_ = nullptr;
  std::map<std::string, std::unique_ptr<emulator::Emulator>> emulators_;
  std::unordered_map<std::string, std::string> emulator_urls_;
  std::unique_ptr<obs::AccessLog> access_log_;
  std::unique_ptr<Governance> governance_;
  net::EventLoops loops_;
  net::EventLoops admin_loops_;
  std::unique_ptr<net::HttpServer> data_;
  std::unique_ptr<net::HttpServer> admin_;
  std::vector<ProxyHandler*> handlers_;
  std::mutex control_mu_;
  std::shared_ptr<const RouteTable> current_;
  std::unordered_map<std::string, std::shared_ptr<EndpointShared>> shared_;
  std::atomic<int64_t> generation_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> health_running_{false};
  std::unique_ptr<net::asio::steady_timer> health_timer_;
};

// GET /admin/endpoints: every endpoint of the current route table with its state.
std::string endpointsJson(GatewayImpl& g) {
  auto t = g.table();
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
    body += std::string(",\"ejected\":") + (ep.shared->ejected_until_ns.load() > now ? "true" : "false");
    body += "}";
  }
  body += "]}";
  return body;
}

Task<void> AdminHandler::handle(net::HttpRequest& req, net::ResponseWriter& w) {
  const std::string_view path = req.path();
  if (path == "/metrics") {
    const std::string text = g_.metricsText();
    co_await w.send(200, "text/plain; version=0.0.4; charset=utf-8", text);
  } else if (path == "/healthz") {
    co_await w.send(200, "text/plain", "ok\n");
  } else if (path == "/readyz") {
    if (g_.draining()) {
      co_await w.send(503, "text/plain", "draining\n");
    } else {
      co_await w.send(200, "text/plain", "ready\n");
    }
  } else if (path == "/admin/reload" || path == "/admin/endpoints") {
    // With governance on, the admin token guards these too (without it there is no token: the
    // admin port is for trusted networks only).
    Governance* gov = g_.governance();
    if (gov) {
      if (auto refused = gov->refuseAdmin(req.header("authorization"))) {
        co_await w.send(refused->status, "application/json", refused->body);
        co_return;
      }
    }
    if (path == "/admin/endpoints") {
      const std::string body = endpointsJson(g_);
      co_await w.send(200, "application/json", body);
      co_return;
    }
    if (req.method != "POST") {
      const std::string body = net::errorJson("use POST /admin/reload", "invalid_request_error", "method_not_allowed");
      co_await w.send(405, "application/json", body);
      co_return;
    }
    const Status s = g_.reload();
    if (gov) {
      std::string detail = std::string("{\"ok\":") + (s.isOk() ? "true" : "false") +
                           ",\"generation\":" + std::to_string(g_.configGeneration());
      if (!s.isOk()) {
        detail += ",\"error\":";
        net::appendJsonString(detail, s.message());
      }
      detail += "}";
      const Status a = gov->auditEvent(req.header("x-infera-actor"), "config.reload", g_.configPath(), detail);
      if (!a.isOk()) INFERA_LOG(g_.log(), warn, "audit of a config reload failed: {}", a.message());
    }
    if (s.isOk()) {
      const std::string body = "{\"status\":\"ok\",\"generation\":" + std::to_string(g_.configGeneration()) + "}";
      co_await w.send(200, "application/json", body);
    } else {
      const std::string body = net::errorJson(s.message(), "invalid_request_error", "invalid_config");
      co_await w.send(400, "application/json", body);
    }
  } else if (Governance::isGovernancePath(path)) {
    Governance* gov = g_.governance();
    if (!gov) {
      const std::string body =
          net::errorJson("governance is off: add a governance section to the config", "invalid_request_error",
                         "governance_disabled");
      co_await w.send(404, "application/json", body);
      co_return;
    }
    const AdminReply reply = gov->admin(req.method, req.target, req.body, req.header("authorization"),
                                        req.header("x-infera-actor"));
    co_await w.send(reply.status, "application/json", reply.body);
  } else {
    const std::string body = net::errorJson("unknown admin path", "invalid_request_error", "not_found");
    co_await w.send(404, "application/json", body);
  }
}

}  // namespace

Result<std::unique_ptr<Gateway>> Gateway::start(GatewayConfig config, std::string config_path) {
  auto g = std::make_unique<GatewayImpl>(std::move(config), std::move(config_path));
  INFERA_RETURN_IF_ERROR(g->init());
  return std::unique_ptr<Gateway>(std::move(g));
}

}  // namespace infera::gateway
