#include <filesystem>

#include "core/config.h"
#include "core/log.h"
#include "net/http.h"
#include "vectors/internal/api.h"
#include "vectors/internal/json.h"
#include "vectors/internal/store.h"
#include "vectors/vectors.h"

namespace infera::vectors {

void readVectorsConfig(ConfigReader& r, VectorsConfig& out) {
  out.enabled = true;
  r.optional("data_dir", out.data_dir);
  r.optional("path_prefix", out.path_prefix);
  if (!out.path_prefix.empty() &&
      (out.path_prefix.front() != '/' || out.path_prefix.back() == '/')) {
    r.error("path_prefix",
            "must start with '/' and not end with one, got \"" + out.path_prefix + "\"");
  }
  r.optional("write_threads", out.write_threads, 1, 64);
  r.optional("max_batch_points", out.max_batch_points, 1, 1'000'000);
  r.optional("max_queued_writes", out.max_queued_writes, 1, 1'000'000);
  r.optional("snapshot_min_points", out.snapshot_min_points, 1, int64_t(1) << 40);
  r.optional("fsync", out.fsync);
}

namespace {

class VectorServiceImpl final : public VectorService {
 public:
  explicit VectorServiceImpl(VectorsConfig config) : config_(std::move(config)) {}

  Status init() {
    StoreOptions o;
    o.data_dir = config_.data_dir;
    o.write_threads = config_.write_threads;
    o.max_queued = size_t(config_.max_queued_writes);
    o.snapshot_min_points = uint64_t(config_.snapshot_min_points);
    o.fsync = config_.fsync;
    INFERA_ASSIGN_OR_RETURN(store_, Store::open(o));
    INFERA_LOG(componentLogger("vectors"), info,
               "vectors: {} collections loaded from {} in {:.3f} s ({} points replayed from WALs), "
               "{} kernels",
               store_->names().size(), config_.data_dir, store_->openSeconds(),
               store_->replayedOps(), kernels().name);
    return Status::ok();
  }

  ~VectorServiceImpl() override {
    if (store_) store_->snapshotAll();  // a clean stop restarts without a WAL to replay
  }

  void addDataRoutes(int, net::asio::io_context& ctx, net::Router& router,
                     access::AccessWorker* access) override {
    addQdrantRoutes(*store_, config_, ctx, router, access);
  }
  void addAdminRoutes(net::Router& admin, const net::RouteGuard& guard) override {
    admin.add("GET", "/admin/vectors/collections",
              guard([this](net::HttpRequest&, net::ResponseWriter& w,
                           net::PathParams) -> net::Task<void> {
                const std::string body = collectionsJson();
                co_await w.send(200, "application/json", body);
              }));
  }
  double loadSeconds() const override { return store_->openSeconds(); }
  uint64_t replayedPoints() const override { return store_->replayedOps(); }

 private:
  // {"data_dir", "path_prefix", "load_seconds", "replayed_points", "collections": [{"name",
  // "owner" (the team, "" = shared), "info": GET /collections/{name}'s result, "stats": GET
  // /collections/{name}/stats's}]}. The admin port sees every team's collections.
  std::string collectionsJson() const {
    Json list = Json::array();
    for (const auto& e : store_->entries()) {
      if (e->dropped.load()) continue;  // dropped since entries() was read
      list.push_back({{"name", e->name},
                      {"owner", e->owner},
                      {"info", e->coll.info()},
                      {"stats", e->coll.stats()}});
    }
    Json out = {{"data_dir", config_.data_dir},
                {"path_prefix", config_.path_prefix},
                {"load_seconds", store_->openSeconds()},
                {"replayed_points", store_->replayedOps()},
                {"collections", std::move(list)}};
    return dumpJson(out);  // never throws (names from an older store)
  }

  VectorsConfig config_;
  std::unique_ptr<Store> store_;
};

}  // namespace

Result<std::unique_ptr<VectorService>> VectorService::create(const VectorsConfig& config, int) {
  auto s = std::make_unique<VectorServiceImpl>(config);
  INFERA_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<VectorService>(std::move(s));
}

}  // namespace infera::vectors
