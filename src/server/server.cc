#include "server/server.h"

#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "access/access.h"
#include "batch/batch.h"
#include "console/console.h"
#include "core/json.h"
#include "core/log.h"
#include "core/text.h"
#include "emulator/emulator.h"
#include "features/features.h"
#include "gateway/gateway.h"
#include "gateway/route_source.h"
#include "net/client.h"
#include "net/loops.h"
#include "net/router.h"
#include "net/server.h"
#include "obs/access_log.h"
#include "obs/metrics.h"
#include "obs/otlp.h"
#include "registry/registry.h"
#include "server/internal/config_api.h"
#include "server/internal/shared_config.h"
#include "vectors/vectors.h"

#ifndef INFERA_VERSION
#define INFERA_VERSION "0.1.0"
#endif
#ifndef INFERA_GIT_COMMIT
#define INFERA_GIT_COMMIT "unknown"
#endif

namespace infera::server {
namespace {

using net::Task;

int resolveWorkers(int configured) {
  if (configured > 0) return configured;
  const int n = static_cast<int>(std::thread::hardware_concurrency());
  return n > 0 ? n : 1;
}

// The families a scrape asks for: `name[]=x` (or `name%5B%5D=x`) in the query string.
std::vector<std::string> metricNamesOf(std::string_view target) {
  std::vector<std::string> out;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    for (const std::string_view key : {"name[]=", "name%5B%5D=", "name%5b%5d="}) {
      if (kv.substr(0, key.size()) == key) out.emplace_back(kv.substr(key.size()));
    }
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
  }
  return out;
}

Task<void> sendJson(net::ResponseWriter& w, int status, std::string body) {
  co_await w.send(status, "application/json", body);
}

// `config_store: shared` at start: the store's newest generation is what runs; an empty store
// gets the file as generation 1 (two replicas starting at once: one inserts, the other reads it).
struct SharedStart {
  std::unique_ptr<SharedConfigStore> store;
  ConfigGeneration applied;
};

Result<SharedStart> startShared(Config& config, const std::string& path) {
  if (path.empty()) {
    return Status::failedPrecondition("config_store: shared needs a config file (its bootstrap)");
  }
  SharedStart out;
  INFERA_ASSIGN_OR_RETURN(out.store, SharedConfigStore::open(config.access.store));
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto log = componentLogger("server");
  for (int attempt = 0; attempt < 2; ++attempt) {
    INFERA_ASSIGN_OR_RETURN(auto newest, out.store->newest());
    if (newest) {
      out.applied = std::move(*newest);
      break;
    }
    ConfigGeneration first{1, file, "bootstrap", "bootstrap from " + path,
                           SystemClock::instance().unixMillis()};
    const Status s = out.store->insert(first);
    if (s.isOk()) {
      INFERA_LOG(log, info, "config_store: shared: {} stored as generation 1", path);
      out.applied = std::move(first);
      break;
    }
    if (s.code() != StatusCode::kAlreadyExists) return s.withContext("config_store: shared");
  }
  if (out.applied.generation == 0) {
    return Status::unavailable("config_store: shared: no generation could be read or stored");
  }
  if (out.applied.yaml != file) {
    INFERA_LOG(log, warn,
               "config_store: shared: serving generation {} (by {}); {} differs from it and is "
               "only the bootstrap (edit through the console or POST /admin/config; `infera config "
               "history`)",
               out.applied.generation, out.applied.actor, path);
    auto cfg = loadConfigText(out.applied.yaml, path);
    if (!cfg.ok()) {
      return cfg.status().withContext("config_store: shared generation " +
                                      std::to_string(out.applied.generation));
    }
    const auto restart = restartNeeded(config, *cfg);
    for (const auto& k : restart) {
      if (k == "config_store" || k.rfind("governance", 0) == 0) {
        return Status::failedPrecondition(
            "config_store: shared generation " + std::to_string(out.applied.generation) +
            " changes " + k + ", which only the file may (the store is found through it)");
      }
    }
    config = std::move(*cfg);
  }
  return out;
}

class ServerImpl final : public Server {
 public:
  ServerImpl(Config config, std::string path, Options options)
      : config_(std::move(config)),
        path_(std::move(path)),
        options_(options),
        workers_(resolveWorkers(config_.workers)),
        registry_(workers_),
        loops_(workers_),
        admin_loops_(1) {}

  ~ServerImpl() override {
    stopPoller();
    if (batch_) batch_->stop();  // first: its lines run on the data loops' routers
    if (gateway_) gateway_->stopHealthChecks();
    admin_.reset();  // first: a /metrics scrape reads data_'s stats
    data_.reset();  // the routers and what they own (the gateway's and access's per-loop state), on
                    // their loops
    loops_.stop();
    tracer_.reset();   // after the routers that submit to it: exports what is queued
    vectors_.reset();  // after the loops: finishes queued writes, snapshots every collection
    features_.reset();
    batch_.reset();
    model_registry_
        .reset();     // after the loops, before access (its last tasks may audit) and the gateway
    access_.reset();  // after the workers: writes the last usage records
    admin_loops_.stop();
    gateway_.reset();
    emulators_.clear();
  }

  Status init() {
    log_ = componentLogger("server");
    setLogLevel(config_.log_level);
    obs::registerProcessMetrics(registry_, INFERA_VERSION, INFERA_GIT_COMMIT);
    reloads_ = registry_.counterFamily("infera_gateway_config_reloads_total",
                                       "Config reloads by result.", {"result"});
    if (shared_) {
      shared_errors_ =
          registry_
              .counterFamily("infera_config_shared_errors_total",
                             "config_store: shared: polls that failed and generations that "
                             "could not be applied.")
              ->counter();
      registry_
          .gaugeFamily("infera_config_shared_generation",
                       "config_store: shared: the generation applied on this replica.")
          ->setCallback([this] { return static_cast<double>(shared_gen_.load()); });
    }

    if (config_.tracing.enabled) {
      INFERA_ASSIGN_OR_RETURN(tracer_,
                              obs::OtlpExporter::start(config_.tracing, registry_, INFERA_VERSION));
    }
    // Backends started in this process (the emulator is a backend like any other to the gateway).
    std::unordered_map<std::string, std::string> emulator_urls;
    for (const auto& [name, ec] : config_.emulators) {
      auto emu = emulator::Emulator::start(ec);
      if (!emu.ok()) return emu.status().withContext("starting emulator " + name);
      emulator_urls[name] = (*emu)->url();
      INFERA_LOG(log_, info, "in-process emulator '{}' serving {}", name, (*emu)->url());
      emulators_[name] = std::move(*emu);
    }
    if (!config_.access_log.empty()) {
      auto al = obs::AccessLog::open(config_.access_log, workers_);
      if (!al.ok()) return al.takeStatus();
      access_log_ = std::move(*al);
    }
    if (config_.access.enabled) {
      const Clock& clock = options_.clock ? *options_.clock : SystemClock::instance();
      INFERA_ASSIGN_OR_RETURN(access_,
                              access::Access::start(config_.access, registry_, workers_, clock));
    }
    routes_.set(config_.gateway.models);
    const gateway::RouteSource* source = &routes_;
    gateway::InferenceObserver* observer = nullptr;
    if (config_.registry.enabled) {
      // The registry's routes join the config's: the gateway reads both from one source.
      const Clock* clock = options_.clock ? options_.clock : &SystemClock::instance();
      INFERA_ASSIGN_OR_RETURN(
          model_registry_, registry::Registry::create(config_.registry,
                                                      {registry_, access_.get(), workers_, clock}));
      source = &model_registry_->routeSource(routes_);
      observer = model_registry_->observer();
    }
    INFERA_ASSIGN_OR_RETURN(
        gateway_, gateway::Gateway::create(config_.gateway, *source,
                                           {registry_, access_log_.get(), std::move(emulator_urls),
                                            workers_, observer}));
    if (model_registry_) {
      model_registry_->attach(gateway_.get());
      model_registry_->start();
    }
    if (config_.features.enabled) {
      const Clock* clock = options_.clock ? options_.clock : &SystemClock::instance();
      INFERA_ASSIGN_OR_RETURN(features_, features::FeatureStore::create(
                                             config_.features, {registry_, workers_, clock}));
    }
    if (config_.vectors.enabled) {
      INFERA_ASSIGN_OR_RETURN(vectors_, vectors::VectorService::create(config_.vectors, workers_));
    }
    if (config_.batch.enabled) {
      const Clock* clock = options_.clock ? options_.clock : &SystemClock::instance();
      INFERA_ASSIGN_OR_RETURN(
          batch_, batch::BatchService::create(
                      config_.batch, {registry_, access_.get(), workers_, clock,
                                      config_.vectors.enabled ? config_.vectors.path_prefix : ""}));
    }
    if (!config_.scheduler_metrics_url.empty()) {
      auto a = net::resolveUrl(config_.scheduler_metrics_url);
      if (!a.ok()) return a.status().withContext("scheduler.metrics_url");
      scheduler_metrics_ = std::move(*a);
    }
    registerNetMetrics();

    loops_.start();
    admin_loops_.start();
    net::ServerConfig sc;
    sc.host = config_.listen.host;
    sc.port = config_.listen.port;
    sc.max_body_bytes = config_.max_body_bytes;
    sc.max_header_bytes = config_.max_header_bytes;
    sc.header_timeout = std::chrono::milliseconds(config_.header_timeout_ms);
    sc.max_connections = config_.max_connections;
    sc.max_body_bytes_in_flight = config_.max_body_bytes_in_flight;
    sc.idle_timeout = std::chrono::milliseconds(config_.idle_timeout_ms);
    // Artifact and file uploads stream their bodies (beyond max_body_bytes, never held whole).
    sc.max_streamed_body_bytes = maxStreamedBody();
    sc.tls = config_.listen.tls;
    sc.allowed_origins = config_.listen.allowed_origins;
    auto data = net::HttpServer::create(loops_, sc, [this](int i, net::asio::io_context& ctx) {
      return std::make_unique<net::RouterHandler>(dataRouter(i, ctx));
    });
    if (!data.ok()) return data.status().withContext("listen");
    data_ = std::move(*data);

    net::ServerConfig ac;
    ac.host = config_.admin.host;
    ac.port = config_.admin.port;
    if (model_registry_)
      ac.max_streamed_body_bytes = static_cast<uint64_t>(config_.registry.max_artifact_bytes);
    ac.tls = config_.admin.tls;
    ac.allowed_origins = config_.admin.allowed_origins;
    auto admin = net::HttpServer::create(admin_loops_, ac, [this](int, net::asio::io_context& ctx) {
      return std::make_unique<net::RouterHandler>(adminRouter(ctx));
    });
    if (!admin.ok()) return admin.status().withContext("admin");
    admin_ = std::move(*admin);
    gateway_->startHealthChecks(admin_loops_.loop(0));
    if (batch_) batch_->start();
    INFERA_LOG(log_, info, "serving on {}:{} (admin {}:{}), {} workers, {} models",
               config_.listen.host, data_->port(), config_.admin.host, admin_->port(), workers_,
               config_.gateway.models.size());
    if (shared_) poller_ = std::thread([this] { pollShared(); });
    return Status::ok();
  }

  void useShared(SharedStart s) {
    shared_ = std::move(s.store);
    shared_gen_ = s.applied.generation;
    shared_yaml_ = std::move(s.applied.yaml);
  }

  uint16_t port() const override { return data_->port(); }
  uint16_t adminPort() const override { return admin_->port(); }

  Status reload() override {
    if (path_.empty()) {
      return Status::failedPrecondition("this gateway was not started from a config file");
    }
    if (shared_) return applyNewestShared(/*only_newer=*/false);
    auto cfg = loadConfig(path_);
    if (!cfg.ok()) return rejected(cfg.takeStatus());
    return apply(std::move(*cfg));
  }

  Status apply(Config next) override {
    std::lock_guard<std::mutex> lock(control_mu_);
    const auto restart = restartNeeded(config_, next);
    if (!restart.empty()) {
      std::string keys;
      for (const auto& k : restart) keys += (keys.empty() ? "" : ", ") + k;
      return rejected(Status::failedPrecondition(keys +
                                                 ": need a restart; reload changes routes, limits, "
                                                 "timeouts, retries, health checks, balancing "
                                                 "and certificates"));
    }
    // Certificates first (read again even when unchanged): one refused refuses the reload, and
    // the old config and certificates keep serving.
    std::shared_ptr<const net::TlsServerContext> data_tls, admin_tls;
    if (next.listen.tls) {
      auto t = data_->loadTls(*next.listen.tls);
      if (!t.ok()) return rejected(t.status().withContext("listen.tls"));
      data_tls = std::move(*t);
    }
    if (next.admin.tls) {
      auto t = admin_->loadTls(*next.admin.tls);
      if (!t.ok()) return rejected(t.status().withContext("admin.tls"));
      admin_tls = std::move(*t);
    }
    routes_.set(next.gateway.models);
    if (model_registry_) (void)model_registry_->setBindings(next.registry.bindings);
    if (Status s = gateway_->apply(next.gateway); !s.isOk()) {
      routes_.set(config_.gateway.models);
      if (model_registry_) (void)model_registry_->setBindings(config_.registry.bindings);
      return rejected(std::move(s));
    }
    if (data_tls)
      INFERA_CHECK(data_->useTls(std::move(data_tls), *next.listen.tls).isOk(),
                   "TLS on a TLS port");
    if (admin_tls)
      INFERA_CHECK(admin_->useTls(std::move(admin_tls), *next.admin.tls).isOk(),
                   "TLS on a TLS port");
    setLogLevel(next.log_level);
    config_ = std::move(next);
    reloads_->counter({"ok"})->inc(0);
    INFERA_LOG(log_, info, "config generation {} in use ({} models)", gateway_->generation(),
               config_.gateway.models.size());
    return Status::ok();
  }

  bool drain(std::chrono::milliseconds timeout) override {
    draining_ = true;
    INFERA_LOG(log_, info, "draining (up to {} ms)", timeout.count());
    return data_->drain(timeout);
  }

  std::string metricsText() const override { return registry_.scrape(); }
  double metricSum(const std::string& name) const override { return registry_.sum(name); }
  int64_t configGeneration() const override { return gateway_->generation(); }

 private:
  // GET /admin/whoami: who the Authorization header makes the caller (never an error: a page may
  // ask before signing in).
  std::string whoamiJson(std::string_view authorization) const {
    nlohmann::json j = {{"access_control", access_ != nullptr}};
    if (!access_ || !access_->refuseAdmin(authorization)) {
      j["role"] = "admin";
    } else if (auto team = access_->teamCaller(authorization)) {
      j.update({{"role", "team"},
                {"team", team->team},
                {"key_id", team->key_id},
                {"key_name", team->key_name},
                {"read_only", true}});
    } else {
      j["role"] = "none";
      return dumpJson(j);
    }
    // What a signed-in page needs first, without a second round trip.
    j["components"] = componentsJson();
    if (j["role"] == "admin") j["config_path"] = path_;
    return dumpJson(j);
  }

  nlohmann::json componentsJson() const {
    return {{"gateway", true},
            {"governance", access_ != nullptr},
            {"registry", model_registry_ != nullptr},
            {"batch", batch_ != nullptr},
            {"features", features_ != nullptr},
            {"vectors", vectors_ != nullptr},
            {"scheduler", scheduler_metrics_.has_value()}};
  }

  // GET /admin/scheduler/metrics: the infera_sched_* families of the configured `infera sched
  // serve` (its /metrics, fetched now), or 502 in the gateway's error shape.
  struct Relayed {
    int status;
    std::string type;
    std::string body;
  };
  Task<Relayed> schedulerMetrics() {
    const net::UpstreamAddress& a = *scheduler_metrics_;
    const std::string target = a.base_path.empty() ? "/" : "";  // fetch() prepends the path
    const std::vector<net::HttpHeader> headers = {{"accept", "text/plain"}};
    auto r = co_await net::fetch(a, "GET", target, "", headers,
                                 net::SteadyClock::now() + std::chrono::seconds(5));
    std::string why;
    if (!r.ok()) {
      why = r.status().message();
    } else if (r->status != 200) {
      why = "HTTP " + std::to_string(r->status);
    }
    if (!why.empty()) {
      co_return Relayed{502, "application/json",
                        net::errorJson("scheduler metrics at " + config_.scheduler_metrics_url +
                                           " unavailable: " + why,
                                       "api_error", "scheduler_unavailable")};
    }
    std::string out;
    std::string_view text = r->body;
    while (!text.empty()) {
      const size_t nl = text.find('\n');
      const std::string_view line = text.substr(0, nl);
      text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
      const std::string_view name =
          line.starts_with("# HELP ") || line.starts_with("# TYPE ") ? line.substr(7) : line;
      if (name.starts_with("infera_sched_")) {
        out.append(line);
        out.push_back('\n');
      }
    }
    co_return Relayed{200, "text/plain; version=0.0.4; charset=utf-8", std::move(out)};
  }

  // GET /admin/status: what runs, for the console (which pages to show) and operators.
  std::string statusJson() {
    nlohmann::json j = {{"version", INFERA_VERSION},
                        {"commit", INFERA_GIT_COMMIT},
                        {"generation", configGeneration()},
                        {"config_path", path_},
                        {"workers", workers_},
                        {"data_port", data_->port()},
                        {"admin_port", admin_->port()},
                        {"components", componentsJson()}};
    return dumpJson(j);
  }

  using JsonReply = std::pair<int, std::string>;

  static JsonReply configError(int status, const std::string& message, std::string_view code,
                               const std::vector<ConfigError>& errors = {}) {
    nlohmann::json j =
        nlohmann::json::parse(net::errorJson(message, "invalid_request_error", code));
    if (!errors.empty()) {
      j["error"]["param"] = errors.front().path;
      nlohmann::json list = nlohmann::json::array();
      for (const auto& e : errors) {
        list.push_back({{"path", e.path}, {"line", e.line}, {"message", e.message}});
      }
      j["errors"] = std::move(list);
    }
    return {status, dumpJson(j)};
  }

  // GET /admin/config: the file the server was started from (and reloads), as JSON.
  JsonReply getConfig() {
    if (path_.empty()) {
      return configError(409, "this server was not started from a config file", "no_config_file");
    }
    std::unique_lock<std::mutex> lock(shared_mu_);
    auto doc = shared_ ? configDocumentOf(shared_yaml_) : readConfigDocument(path_);
    if (!doc.ok()) return configError(500, doc.status().message(), "config_unreadable");
    (*doc)["path"] = path_;
    (*doc)["generation"] = shared_ ? shared_gen_.load() : configGeneration();
    (*doc)["writable"] = shared_ ? true : configWritable(path_);
    (*doc)["store"] = shared_ ? "shared" : "file";
    return {200, doc->dump()};
  }

  // The shared store's newest generation (only one newer than the applied one, when asked),
  // loaded as the file would be and applied by the reload path. The poller, SIGHUP and
  // POST /admin/reload come here; a generation that fails to apply is not tried again until a
  // newer one appears (it stays in the log and infera_config_shared_errors_total).
  Status applyNewestShared(bool only_newer) {
    std::lock_guard<std::mutex> lock(shared_mu_);
    auto newest_gen = shared_->newestGeneration();
    if (!newest_gen.ok()) {
      shared_errors_->inc(0);
      return newest_gen.status().withContext("config_store: shared");
    }
    if (only_newer && (*newest_gen <= shared_gen_ || *newest_gen == shared_failed_gen_)) {
      return Status::ok();
    }
    auto g = shared_->get(*newest_gen);
    if (!g.ok() || !*g) {
      shared_errors_->inc(0);
      return g.ok() ? Status::notFound("config generation vanished") : g.status();
    }
    auto cfg = loadConfigText((*g)->yaml, path_);
    Status s = cfg.ok() ? apply(std::move(*cfg)) : cfg.status();
    if (!s.isOk()) {
      shared_failed_gen_ = (*g)->generation;
      shared_errors_->inc(0);
      INFERA_LOG(log_, err, "config_store: shared generation {} (by {}) not applied: {}",
                 (*g)->generation, (*g)->actor, s.message());
      return s;
    }
    if ((*g)->generation != shared_gen_) {
      INFERA_LOG(log_, info, "config_store: shared generation {} ({} by {}) applied",
                 (*g)->generation, (*g)->action, (*g)->actor);
    }
    shared_gen_ = (*g)->generation;
    shared_yaml_ = std::move((*g)->yaml);
    return Status::ok();
  }

  void pollShared() {
    std::unique_lock<std::mutex> lock(poll_mu_);
    while (!stop_poll_) {
      poll_cv_.wait_for(lock, std::chrono::milliseconds(config_.config_poll_ms));
      if (stop_poll_) break;
      lock.unlock();
      const Status s = applyNewestShared(/*only_newer=*/true);
      if (!s.isOk() && s.code() == StatusCode::kUnavailable) {
        INFERA_LOG(log_, warn, "{}", s.message());
      }
      lock.lock();
    }
  }

  void stopPoller() {
    {
      std::lock_guard<std::mutex> lock(poll_mu_);
      stop_poll_ = true;
    }
    poll_cv_.notify_all();
    if (poller_.joinable()) poller_.join();
  }

  // A new generation in the shared store, then applied here (the others apply it when they poll).
  // kAlreadyExists (409) when another edit took the generation first.
  // `based_on`: the generation the change was made on (another applied here since: 409).
  JsonReply storeShared(const std::string& yaml, Config config, std::string_view actor,
                        const std::string& action, const char* audit_action, int64_t based_on) {
    std::lock_guard<std::mutex> lock(shared_mu_);
    if (based_on != shared_gen_) {
      return configError(409,
                         "the config changed since it was read (generation " +
                             std::to_string(shared_gen_.load()) + " now): read it again",
                         "config_changed");
    }
    const ConfigGeneration g{shared_gen_ + 1, yaml, actor.empty() ? "admin" : std::string(actor),
                             action, SystemClock::instance().unixMillis()};
    const Status stored = shared_->insert(g);
    if (stored.code() == StatusCode::kAlreadyExists) {
      return configError(
          409, "the config changed since it was read (" + stored.message() + "): read it again",
          "config_changed");
    }
    if (!stored.isOk()) return configError(503, stored.message(), "config_store_unavailable");
    Status s = apply(std::move(config));
    if (s.isOk()) {
      shared_gen_ = g.generation;
      shared_yaml_ = yaml;
    } else {
      shared_failed_gen_ = g.generation;
    }
    if (access_) {
      nlohmann::json detail = {{"ok", s.isOk()}, {"generation", g.generation}, {"action", action}};
      if (!s.isOk()) detail["error"] = s.message();
      const Status a =
          access_->audit(actor, audit_action, "shared generation " + std::to_string(g.generation),
                         dumpJson(detail));
      if (!a.isOk()) INFERA_LOG(log_, warn, "audit of a config change failed: {}", a.message());
    }
    if (!s.isOk()) {
      return configError(400,
                         "stored as generation " + std::to_string(g.generation) +
                             " but not applied: " + s.message() +
                             " (roll back with POST /admin/config/rollback)",
                         "invalid_config", configErrorsOf(s));
    }
    return {
        200,
        dumpJson(nlohmann::json{
            {"status", "ok"}, {"generation", g.generation}, {"store", "shared"}, {"path", path_}})};
  }

  // GET /admin/config/history[?limit=N]: the shared store's generations, newest first.
  JsonReply configHistory(std::string_view target) {
    if (!shared_) {
      return configError(409, "the config is a file here (config_store: file): no history",
                         "not_shared");
    }
    int limit = 50;
    const size_t qm = target.find('?');
    const std::vector<std::string> limits = qm == std::string_view::npos
                                                ? std::vector<std::string>()
                                                : queryValues(target.substr(qm + 1), "limit");
    if (limits.size() > 1) return configError(400, "limit given twice", "invalid_limit");
    if (!limits.empty()) {
      const std::string_view v = limits[0];
      int n = 0;
      const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || ptr != v.data() + v.size() || n < 1 || n > 1000) {
        return configError(400, "limit must be 1..1000", "invalid_limit");
      }
      limit = n;
    }
    auto h = shared_->history(limit);
    if (!h.ok()) return configError(503, h.status().message(), "config_store_unavailable");
    nlohmann::json list = nlohmann::json::array();
    for (const auto& g : *h) {
      list.push_back({{"generation", g.generation},
                      {"actor", g.actor},
                      {"action", g.action},
                      {"created_ms", g.created_ms}});
    }
    return {200, dumpJson(nlohmann::json{{"generation", shared_gen_.load()},
                                         {"generations", std::move(list)}})};
  }

  // GET /admin/config/history/{generation}: that generation's config (secrets redacted).
  JsonReply configAt(std::string_view generation) {
    if (!shared_) {
      return configError(409, "the config is a file here (config_store: file): no history",
                         "not_shared");
    }
    int64_t n = 0;
    const auto [ptr, ec] =
        std::from_chars(generation.data(), generation.data() + generation.size(), n);
    if (ec != std::errc() || ptr != generation.data() + generation.size() || n < 1) {
      return configError(400, "a generation is a number >= 1", "invalid_generation");
    }
    auto g = shared_->get(n);
    if (!g.ok()) return configError(503, g.status().message(), "config_store_unavailable");
    if (!*g) return configError(404, "no generation " + std::to_string(n), "not_found");
    auto doc = configDocumentOf((*g)->yaml);
    if (!doc.ok()) return configError(500, doc.status().message(), "config_unreadable");
    (*doc)["generation"] = n;
    (*doc)["actor"] = (*g)->actor;
    (*doc)["action"] = (*g)->action;
    (*doc)["created_ms"] = (*g)->created_ms;
    return {200, doc->dump()};
  }

  // POST /admin/config/rollback {"generation": N, "expected_generation"?}: N's text stored anew as
  // the newest generation and applied (the history keeps both).
  JsonReply rollbackConfig(const std::string& body, std::string_view actor) {
    if (!shared_) {
      return configError(409, "the config is a file here (config_store: file): no history",
                         "not_shared");
    }
    auto read = readOrderedJson(body);
    if (!read.ok()) return configError(400, read.status().message(), "invalid_json");
    const auto& req = *read;
    if (!req.is_object() || !req.contains("generation") || !req["generation"].is_number_integer()) {
      return configError(400, "the body must be {\"generation\": N}", "invalid_json");
    }
    if (req.contains("expected_generation") &&
        (!req["expected_generation"].is_number_integer() ||
         req["expected_generation"].get<int64_t>() != shared_gen_.load())) {
      return configError(409,
                         "the config changed since it was read (generation " +
                             std::to_string(shared_gen_.load()) + " now): read it again",
                         "config_changed");
    }
    const int64_t based_on = shared_gen_.load();
    const int64_t n = req["generation"].get<int64_t>();
    auto g = n >= 1 ? shared_->get(n) : Result<std::optional<ConfigGeneration>>(std::nullopt);
    if (!g.ok()) return configError(503, g.status().message(), "config_store_unavailable");
    if (!*g) return configError(404, "no generation " + std::to_string(n), "not_found");
    auto cfg = loadConfigText((*g)->yaml, path_);
    if (!cfg.ok()) {
      return configError(400, cfg.status().message(), "invalid_config",
                         configErrorsOf(cfg.status()));
    }
    {
      std::lock_guard<std::mutex> lock(control_mu_);
      const auto restart = restartNeeded(config_, *cfg);
      if (!restart.empty()) {
        std::string keys;
        for (const auto& k : restart) keys += (keys.empty() ? "" : ", ") + k;
        return configError(
            409, keys + ": generation " + std::to_string(n) + " differs in what needs a restart",
            "restart_required");
      }
    }
    return storeShared((*g)->yaml, std::move(*cfg), actor, "rollback to " + std::to_string(n),
                       "config.rollback", based_on);
  }

  // "in_place" when only changed values were replaced in the file (its comments kept),
  // "rewritten" when the whole file is written anew.
  static const char* fileEdit(const CheckedConfig& c) {
    return c.edited_in_place ? "in_place" : "rewritten";
  }

  // POST /admin/config {"config", "dry_run", "generation"}: checked exactly as the file (the
  // loader reads what would be written); then written back with a backup and applied by the
  // reload path, audited.
  JsonReply postConfig(const std::string& body, std::string_view actor) {
    if (path_.empty()) {
      return configError(409, "this server was not started from a config file", "no_config_file");
    }
    // The floor's reader: a key given twice in one object is refused (the check and the file must
    // not each read a different one of them), and so is deep nesting and ill-formed UTF-8.
    auto read = readOrderedJson(body);
    if (!read.ok()) return configError(400, read.status().message(), "invalid_json");
    const nlohmann::ordered_json& req = *read;
    if (!req.is_object() || !req.contains("config") || !req["config"].is_object()) {
      return configError(400, "the body must be a JSON object with a 'config' object",
                         "invalid_json");
    }
    std::string current;  // shared: the text the edit is made on, and its generation
    int64_t generation = 0;
    if (shared_) {
      std::lock_guard<std::mutex> lock(shared_mu_);
      current = shared_yaml_;
      generation = shared_gen_.load();
    } else {
      generation = configGeneration();
    }
    if (req.contains("generation") && (!req["generation"].is_number_integer() ||
                                       req["generation"].get<int64_t>() != generation)) {
      return configError(409,
                         "the config changed since it was read (generation " +
                             std::to_string(generation) + " now): read it again",
                         "config_changed");
    }
    auto checked = checkConfigDocument(req["config"], path_, shared_ ? &current : nullptr);
    if (!checked.ok()) {
      const auto errors = configErrorsOf(checked.status());
      return configError(400, checked.status().message(), "invalid_config", errors);
    }
    std::vector<std::string> restart;
    {
      std::lock_guard<std::mutex> lock(control_mu_);
      restart = restartNeeded(config_, checked->config);
    }
    if (!restart.empty()) {
      std::vector<ConfigError> errors;
      std::string keys;
      for (const auto& k : restart) {
        errors.push_back({k.substr(0, k.find(' ')), 0, "needs a restart"});
        keys += (keys.empty() ? "" : ", ") + k;
      }
      return configError(409, keys + ": need a restart; apply changes them only at the next start",
                         "restart_required", errors);
    }
    if (req.contains("dry_run") && !req["dry_run"].is_boolean()) {
      return configError(400, "dry_run must be true or false", "invalid_json");
    }
    if (req.contains("dry_run") && req["dry_run"].get<bool>()) {
      return {200, dumpJson(nlohmann::json{{"valid", true},
                                           {"yaml", checked->redacted_yaml},
                                           {"file_edit", fileEdit(*checked)}})};
    }
    if (shared_) {
      return storeShared(checked->yaml, std::move(checked->config), actor, "apply", "config.apply",
                         generation);
    }
    const auto backup = writeConfigFile(path_, checked->yaml);
    if (!backup.ok()) return configError(500, backup.status().message(), "config_not_written");
    Status s = reload();
    if (!s.isOk()) {
      // The file the running config came from goes back (nothing applied).
      std::rename(backup->c_str(), path_.c_str());
    }
    if (access_) {
      nlohmann::json detail = {{"ok", s.isOk()},
                               {"generation", configGeneration()},
                               {"backup", *backup},
                               {"file_edit", fileEdit(*checked)}};
      if (!s.isOk()) detail["error"] = s.message();
      const Status a = access_->audit(actor, "config.apply", path_, dumpJson(detail));
      if (!a.isOk()) INFERA_LOG(log_, warn, "audit of a config apply failed: {}", a.message());
    }
    if (!s.isOk()) return configError(400, s.message(), "invalid_config", configErrorsOf(s));
    return {200, dumpJson(nlohmann::json{{"status", "ok"},
                                         {"generation", configGeneration()},
                                         {"path", path_},
                                         {"backup", *backup},
                                         {"file_edit", fileEdit(*checked)}})};
  }

  Status rejected(Status s) {
    reloads_->counter({"error"})->inc(0);
    INFERA_LOG(log_, err, "config reload rejected, old config keeps serving: {}", s.message());
    return s;
  }

  // The largest body a streamed data route reads (0: none).
  uint64_t maxStreamedBody() const {
    uint64_t m = 0;
    if (model_registry_) m = static_cast<uint64_t>(config_.registry.max_artifact_bytes);
    if (batch_)
      m = std::max<uint64_t>(m, static_cast<uint64_t>(config_.batch.max_file_bytes) + 64 * 1024);
    return m;
  }

  // Loop i's data router: every component's data routes, with that loop's access worker.
  net::Router dataRouter(int i, net::asio::io_context& ctx) {
    net::Router r;
    r.setTraceSink(tracer_.get());
    access::AccessWorker* aw = nullptr;
    if (access_) {
      auto w = access_->worker(i, ctx);
      aw = w.get();
      r.own(std::move(w));  // destroyed after the routes' per-loop state that uses it
    }
    gateway_->addDataRoutes(i, ctx, r, aw);
    if (features_) features_->addDataRoutes(i, ctx, r, aw);
    if (vectors_) vectors_->addDataRoutes(i, ctx, r, aw);
    if (model_registry_) model_registry_->addDataRoutes(i, ctx, r, aw);
    if (batch_)
      batch_->addDataRoutes(i, ctx, r, aw);  // after the gateway's: lines run through them
    if (options_.extra_data_routes) options_.extra_data_routes(r);
    return r;
  }

  // The admin token check (when access control is on; without it the admin port is for trusted
  // networks only) in front of a route.
  net::RouteHandler guarded(net::RouteHandler h) const {
    if (!access_) return h;
    return [this, h = std::move(h)](net::HttpRequest& req, net::ResponseWriter& w,
                                    net::PathParams p) -> Task<void> {
      if (auto refused = access_->refuseAdmin(req.header("authorization"))) {
        const std::string body = access::denialJson(*refused);
        co_await sendJson(w, refused->status, body);
        co_return;
      }
      co_await h(req, w, p);
    };
  }

  net::Router adminRouter(net::asio::io_context& ctx) {
    net::Router r;
    r.add("*", "/metrics",
          [this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) -> Task<void> {
            // ?name[]=family&name[]=... (as Prometheus's client libraries): only those families.
            const std::vector<std::string> names = metricNamesOf(req.target);
            const std::string text = names.empty() ? metricsText() : registry_.scrape(names);
            co_await w.send(200, "text/plain; version=0.0.4; charset=utf-8", text);
          });
    r.add("*", "/healthz",
          [](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
            co_await w.send(200, "text/plain", "ok\n");
          });
    r.add("*", "/readyz",
          [this](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
            if (draining_.load()) {
              co_await w.send(503, "text/plain", "draining\n");
            } else {
              co_await w.send(200, "text/plain", "ready\n");
            }
          });
    r.add("POST", "/admin/reload",
          guarded([this](net::HttpRequest& req, net::ResponseWriter& w,
                         net::PathParams) -> Task<void> {
            const Status s = reload();
            if (access_) {
              std::string detail = std::string("{\"ok\":") + (s.isOk() ? "true" : "false") +
                                   ",\"generation\":" + std::to_string(configGeneration());
              if (!s.isOk()) {
                detail += ",\"error\":";
                net::appendJsonString(detail, s.message());
              }
              detail += "}";
              const Status a =
                  access_->audit(req.header("x-infera-actor"), "config.reload", path_, detail);
              if (!a.isOk())
                INFERA_LOG(log_, warn, "audit of a config reload failed: {}", a.message());
            }
            // Bodies named first: no temporary with a destructor inside a co_await (g++ 12).
            const std::string body =
                s.isOk()
                    ? "{\"status\":\"ok\",\"generation\":" + std::to_string(configGeneration()) +
                          "}"
                    : net::errorJson(s.message(), "invalid_request_error", "invalid_config");
            co_await sendJson(w, s.isOk() ? 200 : 400, body);
          }));
    r.add("GET", "/admin/whoami",
          [this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) -> Task<void> {
            const std::string body = whoamiJson(req.header("authorization"));
            co_await sendJson(w, 200, body);
          });
    r.add("GET", "/admin/status",
          guarded([this](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
            const std::string body = statusJson();
            co_await sendJson(w, 200, body);
          }));
    r.add("GET", "/admin/config",
          guarded([this](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
            auto [status, body] = getConfig();
            co_await sendJson(w, status, body);
          }));
    r.add("POST", "/admin/config",
          guarded(
              [this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) -> Task<void> {
                auto [status, body] = postConfig(req.body, req.header("x-infera-actor"));
                co_await sendJson(w, status, body);
              }));
    r.add("GET", "/admin/config/history",
          guarded(
              [this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) -> Task<void> {
                auto [status, body] = configHistory(req.target);
                co_await sendJson(w, status, body);
              }));
    r.add(
        "GET", "/admin/config/history/{generation}",
        guarded([this](net::HttpRequest&, net::ResponseWriter& w, net::PathParams p) -> Task<void> {
          auto [status, body] = configAt(p.get("generation"));
          co_await sendJson(w, status, body);
        }));
    r.add("POST", "/admin/config/rollback",
          guarded(
              [this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) -> Task<void> {
                auto [status, body] = rollbackConfig(req.body, req.header("x-infera-actor"));
                co_await sendJson(w, status, body);
              }));
    console::addAdminRoutes(r);
    gateway_->addAdminRoutes(r, [this](net::RouteHandler h) { return guarded(std::move(h)); });
    if (features_)
      features_->addAdminRoutes(r, [this](net::RouteHandler h) { return guarded(std::move(h)); });
    if (vectors_)
      vectors_->addAdminRoutes(r, [this](net::RouteHandler h) { return guarded(std::move(h)); });
    if (scheduler_metrics_) {
      r.add(
          "GET", "/admin/scheduler/metrics",
          guarded([this](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
            auto [status, type, body] = co_await schedulerMetrics();
            co_await w.send(status, type, body);
          }));
    }
    if (model_registry_)
      model_registry_->addAdminRoutes(
          ctx, r, [this](net::RouteHandler h) { return guarded(std::move(h)); });
    if (batch_)
      batch_->addAdminRoutes(ctx, r, [this](net::RouteHandler h) { return guarded(std::move(h)); });
    if (access_) {
      access_->addAdminRoutes(r);
    } else {
      access::addDisabledAdminRoutes(r);
    }
    // What no route takes: with access control on, the admin token first (an unknown path tells
    // a caller without it nothing).
    r.setFallback("",
                  [this](net::HttpRequest& req, net::ResponseWriter& w, int status,
                         std::string_view allow) -> Task<void> {
                    if (access_) {
                      if (auto refused = access_->refuseAdmin(req.header("authorization"))) {
                        const std::string body = access::denialJson(*refused);
                        co_await sendJson(w, refused->status, body);
                        co_return;
                      }
                    }
                    const std::string path(req.path());
                    const std::string body =
                        status == 405
                            ? net::errorJson("unsupported method for " + path +
                                                 " (allowed: " + std::string(allow) + ")",
                                             "invalid_request_error", "method_not_allowed")
                            : net::errorJson("unknown admin path " + path, "invalid_request_error",
                                             "not_found");
                    co_await sendJson(w, status == 405 ? 405 : 404, body);
                  });
    if (options_.extra_admin_routes) options_.extra_admin_routes(r);
    return r;
  }

  void registerNetMetrics() {
    registry_
        .gaugeFamily("infera_net_connections_open", "Client connections open on the data port.")
        ->setCallback([this] {
          return data_ ? static_cast<double>(data_->stats().connections_open.load()) : 0.0;
        });
    registry_
        .counterFamily("infera_net_connections_total",
                       "Client connections accepted on the data port.")
        ->setCallback([this] {
          return data_ ? static_cast<double>(data_->stats().connections_total.load()) : 0.0;
        });
    registry_
        .counterFamily("infera_net_coroutine_failures_total",
                       "Spawned coroutines that ended with an exception (logged; a bug).")
        ->setCallback([] { return static_cast<double>(net::spawnFailures()); });
    registry_
        .counterFamily("infera_net_timeouts_total",
                       "Client connections closed by a read/write timeout.")
        ->setCallback(
            [this] { return data_ ? static_cast<double>(data_->stats().timeouts.load()) : 0.0; });
    auto stat = [this](auto field) {
      return [this, field] {
        return data_ ? static_cast<double>((data_->stats().*field).load()) : 0.0;
      };
    };
    registry_
        .counterFamily("infera_net_bad_requests_total",
                       "Requests refused for their framing, head or path (400), data port.")
        ->setCallback(stat(&net::ServerStats::bad_requests));
    registry_
        .counterFamily("infera_net_connections_rejected_total",
                       "Connections closed at accept: max_connections were open (data port).")
        ->setCallback(stat(&net::ServerStats::rejected_connections));
    registry_
        .counterFamily("infera_net_accept_errors_total",
                       "Failed accepts on the data port (EMFILE, ENFILE, ...); serving goes on.")
        ->setCallback(stat(&net::ServerStats::accept_errors));
    registry_
        .counterFamily(
            "infera_net_busy_rejections_total",
            "Requests answered 503 before their body: max_body_bytes_in_flight held (data port).")
        ->setCallback(stat(&net::ServerStats::rejected_busy));
    registry_
        .gaugeFamily("infera_net_body_bytes_in_flight", "Request body bytes held on the data port.")
        ->setCallback(stat(&net::ServerStats::body_bytes_in_flight));
    registerFloorMetrics();
    registerTlsMetrics();
  }

  // The floor's refusals and the handlers that threw, on both ports (port="data" or "admin").
  void registerFloorMetrics() {
    auto per_port = [this](auto field) {
      return [this, field](bool is_data) {
        return [this, field, is_data] {
          const net::HttpServer* s = is_data ? data_.get() : admin_.get();
          return s ? static_cast<double>((s->stats().*field).load()) : 0.0;
        };
      };
    };
    struct Family {
      const char* name;
      const char* help;
      std::atomic<uint64_t> net::ServerStats::*field;
    };
    for (const Family& f : {
             Family{"infera_net_handler_exceptions_total",
                    "Handlers that threw: answered 500 (or the response cut), logged (a bug).",
                    &net::ServerStats::handler_exceptions},
             Family{"infera_net_invalid_utf8_rejections_total",
                    "Requests refused 400 at the door: a path, query or header not valid UTF-8.",
                    &net::ServerStats::rejected_utf8},
             Family{"infera_net_cross_site_rejections_total",
                    "State-changing requests from another site's page refused 403.",
                    &net::ServerStats::rejected_cross_site},
         }) {
      auto family = registry_.counterFamily(f.name, f.help, {"port"});
      family->setCallback({"data"}, per_port(f.field)(true));
      family->setCallback({"admin"}, per_port(f.field)(false));
    }
  }

  // One series per TLS port (port="data" or "admin").
  void registerTlsMetrics() {
    auto handshakes =
        registry_.counterFamily("infera_net_tls_handshakes_total",
                                "TLS handshakes completed, resumed ones included.", {"port"});
    auto resumed = registry_.counterFamily("infera_net_tls_resumed_handshakes_total",
                                           "TLS handshakes that resumed a session.", {"port"});
    auto failures = registry_.counterFamily("infera_net_tls_handshake_failures_total",
                                            "TLS handshakes failed or timed out (no client "
                                            "certificate, TLS < 1.2, no http/1.1 in ALPN, ...).",
                                            {"port"});
    auto reloads =
        registry_.counterFamily("infera_net_tls_certificate_reloads_total",
                                "Certificate loads after the first (SIGHUP, /admin/reload, a file "
                                "change): ok, or error (refused; the "
                                "previous certificate keeps serving).",
                                {"port", "result"});
    auto expiry = registry_.gaugeFamily(
        "infera_net_tls_certificate_expiry_timestamp_seconds",
        "Expiry (unix time) of the certificate new connections get.", {"port"});
    for (const bool is_data : {true, false}) {
      if (!(is_data ? config_.listen.tls : config_.admin.tls)) continue;
      const std::string port = is_data ? "data" : "admin";
      auto stat = [this, is_data](auto field) {
        return [this, is_data, field] {
          const net::HttpServer* s = is_data ? data_.get() : admin_.get();
          return s ? static_cast<double>((s->stats().*field).load()) : 0.0;
        };
      };
      handshakes->setCallback({port}, stat(&net::ServerStats::tls_handshakes));
      resumed->setCallback({port}, stat(&net::ServerStats::tls_resumed));
      failures->setCallback({port}, stat(&net::ServerStats::tls_handshake_failures));
      reloads->setCallback({port, "ok"}, stat(&net::ServerStats::tls_reloads));
      reloads->setCallback({port, "error"}, stat(&net::ServerStats::tls_reload_failures));
      expiry->setCallback({port}, stat(&net::ServerStats::tls_not_after_s));
    }
  }

  Config config_;
  std::string path_;
  Options options_;
  int workers_;
  obs::MetricsRegistry registry_;
  obs::Family* reloads_ = nullptr;
  spdlog::logger* log_ = nullptr;
  std::map<std::string, std::unique_ptr<emulator::Emulator>> emulators_;
  std::unique_ptr<obs::AccessLog> access_log_;
  std::unique_ptr<access::Access> access_;
  gateway::StaticRouteSource routes_;  // the config file's models
  std::unique_ptr<gateway::Gateway> gateway_;
  std::unique_ptr<features::FeatureStore> features_;
  std::unique_ptr<vectors::VectorService> vectors_;
  std::optional<net::UpstreamAddress> scheduler_metrics_;  // `scheduler.metrics_url`, resolved
  std::unique_ptr<registry::Registry> model_registry_;
  std::unique_ptr<batch::BatchService> batch_;
  net::EventLoops loops_;
  net::EventLoops admin_loops_;
  std::unique_ptr<net::HttpServer> data_;
  std::unique_ptr<net::HttpServer> admin_;
  std::mutex control_mu_;
  std::atomic<bool> draining_{false};
  std::unique_ptr<obs::OtlpExporter> tracer_;  // tracing: on
  // config_store: shared
  std::unique_ptr<SharedConfigStore> shared_;
  std::mutex shared_mu_;                // shared_yaml_, shared_failed_gen_; one change at a time
  std::atomic<int64_t> shared_gen_{0};  // the generation applied here
  std::string shared_yaml_;
  int64_t shared_failed_gen_ = 0;
  obs::Counter* shared_errors_ = nullptr;
  std::thread poller_;
  std::mutex poll_mu_;
  std::condition_variable poll_cv_;
  bool stop_poll_ = false;
};

}  // namespace

Result<std::unique_ptr<Server>> Server::start(Config config, std::string config_path,
                                              Options options) {
  SharedStart shared;
  if (config.config_store == "shared") {
    INFERA_ASSIGN_OR_RETURN(shared, startShared(config, config_path));
  }
  auto s = std::make_unique<ServerImpl>(std::move(config), std::move(config_path), options);
  s->useShared(std::move(shared));
  INFERA_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<Server>(std::move(s));
}

}  // namespace infera::server
