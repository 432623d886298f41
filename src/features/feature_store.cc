#include <sys/stat.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/json.h"
#include "core/log.h"
#include "features/features.h"
#include "features/internal/ingest.h"
#include "features/internal/json_body.h"
#include "features/internal/online_store.h"
#include "features/internal/pool.h"
#include "features/internal/registry.h"
#include "features/internal/serving.h"
#include "net/http.h"
#include "obs/metrics.h"
#include "store/redis.h"

namespace infera::features {
namespace {

using net::Task;
using nlohmann::json;

Status makeDirs(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
        return Status::unavailable("cannot create directory " + cur + ": " + std::strerror(errno));
      }
    }
    if (i < path.size()) cur += path[i];
  }
  return Status::ok();
}

Task<void> sendJson(net::ResponseWriter& w, int status, const std::string& body) {
  co_await w.send(status, "application/json", body);
}

std::string adminError(const Status& s) {
  const char* code = s.code() == StatusCode::kFailedPrecondition ? "breaking_change"
                     : s.code() == StatusCode::kNotFound         ? "not_found"
                     : s.code() == StatusCode::kPayloadTooLarge  ? "payload_too_large"
                                                                 : "invalid_repository";
  return net::errorJson(s.message(), "invalid_request_error", code);
}

int adminStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kPayloadTooLarge:
      return 413;
    default:
      return 503;
  }
}

class FeatureStoreImpl final : public FeatureStore {
 public:
  FeatureStoreImpl(FeaturesConfig config, FeaturesDeps deps)
      : config_(std::move(config)),
        deps_(deps),
        clock_(deps.clock ? *deps.clock : SystemClock::instance()),
        metrics_(deps.metrics),
        loops_(static_cast<size_t>(std::max(deps.workers, 1))) {}

  // The pool first: its jobs use the store.
  ~FeatureStoreImpl() override { pool_.reset(); }

  Status init() {
    log_ = componentLogger("features");
    pool_ =
        std::make_unique<WorkerPool>(config_.pool_threads, static_cast<size_t>(config_.pool_queue));
    if (config_.store == "rocksdb") {
      INFERA_RETURN_IF_ERROR(makeDirs(config_.data_dir));
      RocksDbOptions o;
      o.path = config_.data_dir + "/rocksdb";
      o.retain_expired_s = config_.retain_expired_s;
      o.sync_writes = config_.sync_writes;
      o.block_cache_bytes = static_cast<size_t>(config_.block_cache_mb) << 20;
      INFERA_ASSIGN_OR_RETURN(store_, openRocksDbStore(o, clock_));
    } else {
      RedisStoreOptions o;
      o.url = config_.store;
      o.prefix = config_.redis_prefix;
      o.retain_expired_s = config_.retain_expired_s;
      o.timeout_ms = config_.redis_timeout_ms;
      auto s = openRedisStore(o, clock_);
      if (!s.ok()) return s.status().withContext("features.store " + redactUrl(config_.store));
      store_ = std::move(*s);
    }
    shared_.config = &config_;
    shared_.store = store_.get();
    shared_.pool = pool_.get();
    shared_.clock = &clock_;
    shared_.metrics = &metrics_;
    metrics_registry()
        .counterFamily("infera_features_pool_shed_total",
                       "Feature store jobs refused because the worker pool's queue was full.")
        ->setCallback([this] { return static_cast<double>(pool_->shed()); });

    // The registry kept with the data, then the configured repository over it.
    current_ = std::make_shared<Registry>();
    INFERA_ASSIGN_OR_RETURN(std::string blob, store_->loadMeta());
    if (!blob.empty()) {
      INFERA_ASSIGN_OR_RETURN(auto saved, parseSerializedRegistry(blob));
      auto reg = buildRegistry(saved.first, saved.second);
      if (!reg.ok())
        return reg.status().withContext("the stored feature registry no longer builds");
      current_ = std::move(*reg);
    }
    // Storage a crash left behind (a view removed after the registry was saved) is freed now.
    for (uint32_t id : store_->storedViews()) {
      if (!current_->viewById(id)) INFERA_RETURN_IF_ERROR(store_->dropView(id));
    }
    for (const auto& [n, v] : current_->views)
      INFERA_RETURN_IF_ERROR(store_->createView(v->id, v->ttl_s));
    if (!config_.repository.empty()) {
      INFERA_ASSIGN_OR_RETURN(auto files, readRepositoryDir(config_.repository));
      auto r = apply(files);
      if (!r.ok()) return r.status().withContext("features.repository " + config_.repository);
      for (const auto& c : r->changes) INFERA_LOG(log_, info, "feature repository: {}", c);
    }
    INFERA_LOG(log_, info, "feature store: {} ({} views, {} feature services)", store_->kind(),
               current_->views.size(), current_->services.size());
    return Status::ok();
  }

  void addDataRoutes(int loop, net::asio::io_context& ctx, net::Router& router,
                     access::AccessWorker* access) override {
    std::shared_ptr<const Registry> reg;
    {
      std::lock_guard<std::mutex> lock(control_mu_);
      reg = current_;
    }
    auto h = std::make_unique<FeatureHandler>(loop, ctx, shared_, access, reg);
    FeatureHandler* p = h.get();
    {
      std::lock_guard<std::mutex> lock(control_mu_);
      loops_[static_cast<size_t>(loop)] = {&ctx, p};
      p->setRegistry(current_);  // an apply between the two locks
    }
    router.add("POST", "/get-online-features",
               [p](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) {
                 return p->getOnlineFeatures(req, w);
               });
    router.add("POST", "/push",
               [p](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) {
                 return p->push(req, w);
               });
    router.add("POST", "/write-to-online-store",
               [p](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) {
                 return p->writeToOnlineStore(req, w);
               });
    router.add("GET", "/health",
               [p](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) {
                 return p->health(req, w);
               });
    // The floor's answers on these paths (invalid UTF-8 at the door, a cross-site refusal, a
    // handler that threw) in the shape Feast's clients read. The admin routes keep the admin
    // port's shape (net::errorJson), the router's default.
    for (const char* path : {"/get-online-features", "/push", "/write-to-online-store", "/health"})
      router.setErrorShape(path, feastErrorAnswer);
    router.own(std::move(h));
  }

  void addAdminRoutes(net::Router& admin, const net::RouteGuard& guard) override {
    auto files_of = [](const std::string& body,
                       std::map<std::string, std::string>& files) -> Status {
      Result<json> parsed = readJson(body);
      if (!parsed.ok()) return parsed.takeStatus();
      const json& j = *parsed;
      if (!j.is_object() || !j.contains("files") || !j["files"].is_object()) {
        return Status::invalidArgument("expected {\"files\": {\"name.yaml\": \"<yaml>\", ...}}");
      }
      for (const auto& [k, v] : j["files"].items()) {
        if (!v.is_string()) return Status::invalidArgument("files." + k + " must be a string");
        files[k] = v.get<std::string>();
      }
      return Status::ok();
    };
    auto planning = [this, files_of](bool do_apply) {
      return [this, files_of, do_apply](net::HttpRequest& req, net::ResponseWriter& w,
                                        net::PathParams) -> Task<void> {
        std::map<std::string, std::string> files;
        Status s = files_of(req.body, files);
        Result<PlanResult> r =
            s.isOk() ? (do_apply ? apply(files) : plan(files)) : Result<PlanResult>(s);
        if (!r.ok()) {
          const std::string error = adminError(r.status());
          co_await sendJson(w, adminStatus(r.status()), error);
          co_return;
        }
        json out = {{"changes", r->changes}, {"breaking", r->breaking}, {"applied", r->applied}};
        const std::string text = dumpJson(out);
        co_await sendJson(w, 200, text);
      };
    };
    admin.add("POST", "/admin/features/plan", guard(planning(false)));
    admin.add("POST", "/admin/features/apply", guard(planning(true)));
    admin.add(
        "GET", "/admin/features/registry",
        guard([this](net::HttpRequest&, net::ResponseWriter& w, net::PathParams) -> Task<void> {
          const std::string text = registryJson();
          co_await sendJson(w, 200, text);
        }));
    admin.add(
        "POST", "/admin/features/ingest",
        guard([this](net::HttpRequest& req, net::ResponseWriter& w, net::PathParams) -> Task<void> {
          auto [status, body] = ingest(req.body);
          co_await sendJson(w, status, body);
        }));
  }

  Result<PlanResult> plan(const std::map<std::string, std::string>& files) override {
    std::lock_guard<std::mutex> lock(control_mu_);
    INFERA_ASSIGN_OR_RETURN(auto next, buildRegistry(files, current_->ids));
    Plan p = planChanges(*current_, *next);
    return PlanResult{p.changes, p.breaking, false};
  }

  Result<PlanResult> apply(const std::map<std::string, std::string>& files) override {
    std::lock_guard<std::mutex> lock(control_mu_);
    INFERA_ASSIGN_OR_RETURN(auto next, buildRegistry(files, current_->ids));
    Plan p = planChanges(*current_, *next);
    if (!p.breaking.empty()) {
      std::string msg = "refused: the change breaks served features";
      for (const auto& b : p.breaking) msg += "\n  " + b;
      return Status::failedPrecondition(msg);
    }
    for (const auto& [n, v] : next->views)
      INFERA_RETURN_IF_ERROR(store_->createView(v->id, v->ttl_s));
    // The registry first: a crash before the drops leaves storage that start-up frees, never a
    // registry that names missing storage.
    INFERA_RETURN_IF_ERROR(store_->saveMeta(serializeRegistry(*next)));
    current_ = next;
    for (const auto& l : loops_) {
      if (l.handler) net::asio::post(*l.ctx, [h = l.handler, r = current_] { h->setRegistry(r); });
    }
    for (uint32_t id : p.dropped_views) {
      Status s = store_->dropView(id);
      if (!s.isOk())
        INFERA_LOG(log_, warn,
                   "freeing a removed view's storage failed (freed at the next start): {}",
                   s.message());
    }
    return PlanResult{p.changes, {}, true};
  }

 private:
  obs::MetricsRegistry& metrics_registry() { return deps_.metrics; }

  std::shared_ptr<const Registry> snapshot() {
    std::lock_guard<std::mutex> lock(control_mu_);
    return current_;
  }

  std::string registryJson() {
    auto reg = snapshot();
    const auto fresh = shared_.freshness();
    json views = json::array();
    for (const auto& [n, v] : reg->views) {
      json ents = json::array();
      for (const auto* e : v->entities)
        ents.push_back(
            {{"name", e->name}, {"join_key", e->join_key}, {"type", typeName({e->type, false})}});
      json feats = json::array();
      for (const auto& f : v->features) {
        json jf = {{"name", f.name}, {"type", typeName(f.type)}};
        if (f.agg >= 0) {
          const auto& a = v->aggregations[static_cast<size_t>(f.agg)];
          jf["function"] = aggFunctionName(a.function);
          jf["column"] = a.column;
          jf["window_s"] = a.window_s;
          jf["bucket_s"] = a.bucket_s;
        }
        feats.push_back(jf);
      }
      std::string ts = "event_timestamp";
      auto src = reg->push_sources.find(v->source);
      if (src != reg->push_sources.end()) ts = src->second.timestamp_field;
      views.push_back({{"name", n},
                       {"entities", ents},
                       {"features", feats},
                       {"ttl_s", v->ttl_s},
                       {"online", v->online},
                       {"source", v->source},
                       {"timestamp_field", ts},
                       {"aggregated", v->aggregated()},
                       {"owner", v->owner}});  // "" = shared
      // Since this server started: null until a write reaches the view.
      const auto f = fresh.find(n);
      json& jv = views.back();
      jv["last_write_ms"] = f == fresh.end() ? json(nullptr) : json(f->second.last_write_ms);
      jv["newest_event_ms"] =
          f == fresh.end() ? json(nullptr) : json(f->second.newest_event_us / 1000);
    }
    json services = json::array();
    for (const auto& [n, s] : reg->services) {
      json refs = json::array();
      for (const auto& p : s.projections) {
        for (size_t fi : p.features) refs.push_back(p.alias + ":" + p.view->features[fi].name);
      }
      services.push_back({{"name", n}, {"features", refs}, {"owner", s.owner}});
    }
    json sources = json::array();
    for (const auto& [n, ps] : reg->push_sources)
      sources.push_back({{"name", n}, {"timestamp_field", ps.timestamp_field}});
    json entities = json::array();
    for (const auto& [n, e] : reg->entities)
      entities.push_back(
          {{"name", n}, {"join_key", e->join_key}, {"type", typeName({e->type, false})}});
    StoreStats st = store_->stats();
    json out = {{"project", reg->project},
                {"store", store_->kind()},
                {"entities", entities},
                {"views", views},
                {"push_sources", sources},
                {"feature_services", services},
                {"store_stats", {{"keys", st.keys}, {"bytes", st.bytes}}}};
    return dumpJson(out);
  }

  // POST /admin/features/ingest {"feature_view_name", "df", "first_row", "dry_run"}: batch ingest
  // (the CLI's), lenient about CSV text, all-or-nothing per call. Blocking (the admin loop).
  std::pair<int, std::string> ingest(const std::string& body) {
    auto reg = snapshot();
    simdjson::dom::element doc;
    simdjson::dom::object obj;
    auto err = [](int status, const std::string& m, const char* code) {
      return std::make_pair(status, net::errorJson(m, "invalid_request_error", code));
    };
    if (auto e = parseBody(ingest_parser_, body, doc)) {
      return err(400, e->refused ? e->message : "the body is not JSON", "invalid_json");
    }
    if (doc.get(obj) != simdjson::SUCCESS) {
      return err(400, "the body is not a JSON object", "invalid_json");
    }
    std::string_view name;
    simdjson::dom::element df;
    if (obj["feature_view_name"].get(name) != simdjson::SUCCESS ||
        obj["df"].get(df) != simdjson::SUCCESS) {
      return err(400, "expected {\"feature_view_name\", \"df\"}", "invalid_request");
    }
    const FeatureView* v = reg->view(name);
    if (!v) return err(404, "unknown feature view " + std::string(name), "not_found");
    IngestOptions o;
    o.lenient = true;
    int64_t first_row = 0;
    if (obj["first_row"].get(first_row) == simdjson::SUCCESS && first_row > 0)
      o.first_row = static_cast<size_t>(first_row);
    bool dry_run = false;
    if (obj["dry_run"].get(dry_run) != simdjson::SUCCESS) dry_run = false;
    o.now_us = clock_.unixMillis() * 1000;
    o.retain_expired_s = config_.retain_expired_s;
    DataFrame frame;
    Status s = readDataFrame(df, frame);
    std::vector<ViewBatch> batches(1);
    auto src = reg->push_sources.find(v->source);
    if (s.isOk())
      s = buildViewBatch(
          *v, src == reg->push_sources.end() ? "event_timestamp" : src->second.timestamp_field,
          frame, o, batches[0]);
    if (!s.isOk()) return err(400, s.message(), "invalid_rows");
    const size_t rows = frame.rows, expired = batches[0].expired;
    const size_t written = batches[0].rows.size() + batches[0].events.size();
    if (!dry_run) {
      const ServingShared::Noted noted = ServingShared::noted(batches);
      s = writeBatchesBlocking(shared_, batches);
      if (!s.isOk()) return err(503, s.message(), "store_unavailable");
      shared_.recordWrites(noted);
      metrics_.rows_written->inc(0, static_cast<double>(written));
    }
    json out = {{"rows", rows},
                {"written", dry_run ? 0 : written},
                {"expired", expired},
                {"dry_run", dry_run}};
    return {200, dumpJson(out)};
  }

  struct Loop {
    net::asio::io_context* ctx = nullptr;
    FeatureHandler* handler = nullptr;  // owned by that loop's router
  };

  FeaturesConfig config_;
  FeaturesDeps deps_;
  const Clock& clock_;
  FeatureMetrics metrics_;
  spdlog::logger* log_ = nullptr;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<OnlineStore> store_;
  ServingShared shared_;
  std::mutex control_mu_;
  std::shared_ptr<const Registry> current_;
  std::vector<Loop> loops_;
  simdjson::dom::parser ingest_parser_;  // the admin loop's
};

}  // namespace

void readFeaturesConfig(ConfigReader& r, FeaturesConfig& c) {
  c.enabled = true;
  if (r.optional("store", c.store) && c.store != "rocksdb") {
    auto a = store::parseRedisUrl(c.store);
    if (!a.ok())
      r.error("store",
              "must be rocksdb, a redis:// URL or a redis-cluster:// URL: " + a.status().message());
  }
  r.optional("data_dir", c.data_dir);
  r.optional("repository", c.repository);
  r.optional("redis_prefix", c.redis_prefix);
  r.optional("redis_timeout_ms", c.redis_timeout_ms, 1, 60'000);
  std::string retain;
  if (r.optional("retain_expired", retain)) {
    auto d = parseDuration(retain);
    if (!d.ok()) {
      r.error("retain_expired", d.status().message());
    } else {
      c.retain_expired_s = *d;
    }
  }
  r.optional("enforce_ttl", c.enforce_ttl);
  r.optional("pool_threads", c.pool_threads, 1, 64);
  r.optional("pool_queue", c.pool_queue, 1, 1'000'000);
  r.optional("sync_writes", c.sync_writes);
  r.optional("block_cache_mb", c.block_cache_mb, 1, 1 << 20);
}

std::vector<std::string> restartNeeded(const FeaturesConfig& a, const FeaturesConfig& b) {
  std::vector<std::string> out;
  if (a.enabled != b.enabled) out.push_back("features");
  if (!a.enabled || !b.enabled) return out;
  if (a.store != b.store) out.push_back("features.store");
  if (a.data_dir != b.data_dir) out.push_back("features.data_dir");
  if (a.repository != b.repository) out.push_back("features.repository");
  if (a.redis_prefix != b.redis_prefix) out.push_back("features.redis_prefix");
  if (a.retain_expired_s != b.retain_expired_s) out.push_back("features.retain_expired");
  if (a.enforce_ttl != b.enforce_ttl) out.push_back("features.enforce_ttl");
  if (a.pool_threads != b.pool_threads || a.pool_queue != b.pool_queue)
    out.push_back("features.pool_threads");
  if (a.sync_writes != b.sync_writes) out.push_back("features.sync_writes");
  if (a.block_cache_mb != b.block_cache_mb) out.push_back("features.block_cache_mb");
  if (a.redis_timeout_ms != b.redis_timeout_ms) out.push_back("features.redis_timeout_ms");
  return out;
}

Result<RepositorySummary> checkRepository(const std::string& dir) {
  INFERA_ASSIGN_OR_RETURN(auto files, readRepositoryDir(dir));
  INFERA_ASSIGN_OR_RETURN(auto reg, buildRegistry(files, {}));
  return RepositorySummary{reg->entities.size(), reg->views.size(), reg->services.size()};
}

Result<std::unique_ptr<FeatureStore>> FeatureStore::create(const FeaturesConfig& config,
                                                           FeaturesDeps deps) {
  auto s = std::make_unique<FeatureStoreImpl>(config, deps);
  INFERA_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<FeatureStore>(std::move(s));
}

}  // namespace infera::features
