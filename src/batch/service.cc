#include <mutex>

#include "access/access.h"
#include "batch/batch.h"
#include "batch/internal/service.h"
#include "core/log.h"
#include "obs/metrics.h"

namespace infera::batch {

Metrics::Metrics(obs::MetricsRegistry& r) {
  auto* lines = r.counterFamily("infera_batch_lines_total",
                                "Batch lines by what became of them in this process: ok and failed "
                                "(recorded), retried, aborted (in flight at a stop, or called back "
                                "before they started when their batch stopped; not recorded).",
                                {"result"});
  lines_ok = lines->counter({"ok"});
  lines_failed = lines->counter({"failed"});
  lines_retried = lines->counter({"retried"});
  lines_aborted = lines->counter({"aborted"});
  auto* batches = r.counterFamily("infera_batch_batches_total",
                                  "Batches this process validated, failed at validation, or "
                                  "finalized (completed, cancelled or expired).",
                                  {"event"});
  batches_validated = batches->counter({"validated"});
  batches_failed = batches->counter({"failed"});
  batches_finished = batches->counter({"finished"});
  files_expired = r.counterFamily("infera_batch_files_expired_total",
                                  "Files this process deleted when their expiry passed.", {})
                      ->counter({});
}

namespace {

class BatchServiceImpl final : public BatchService {
 public:
  BatchServiceImpl(const BatchConfig& config, BatchDeps deps)
      : shared_(config, deps.clock ? *deps.clock : SystemClock::instance(),
                config.file_dir.empty() ? config.data_dir + "/files" : config.file_dir,
                deps.metrics, deps.access),
        loops_(static_cast<size_t>(std::max(1, deps.workers)), nullptr),
        vector_prefix_(deps.vector_path_prefix) {}

  ~BatchServiceImpl() override { stop(); }

  Status init() {
    INFERA_RETURN_IF_ERROR(shared_.files.init());
    {
      // Migrate once, before the pool's threads and the executor open their own connections.
      INFERA_ASSIGN_OR_RETURN(auto s, BatchStore::open(shared_.config.store));
      INFERA_RETURN_IF_ERROR(s->migrate());
    }
    const std::string url = shared_.config.store;
    INFERA_RETURN_IF_ERROR(shared_.pool.start([url] { return BatchStore::open(url); }));
    runner_ = std::make_unique<Runner>(
        shared_,
        [this](size_t i) {
          std::lock_guard<std::mutex> lock(mu_);
          return i < loops_.size() ? loops_[i] : nullptr;
        },
        loops_.size());
    return Status::ok();
  }

  void addDataRoutes(int loop, net::asio::io_context& ctx, net::Router& router,
                     access::AccessWorker* access) override {
    // The gateway's handlers this loop runs lines through (registered before ours; a streamed
    // route reads a body an in-process request does not have, so none is taken).
    auto lines = std::make_unique<LoopLines>(ctx);
    lines->price_factor = shared_.config.price_factor;
    for (const std::string& ep : shared_.config.endpoints) {
      const net::Router::Match m = router.match("POST", ep);
      if (m.handler != nullptr && m.streamed_limit == 0) lines->handlers[ep] = *m.handler;
    }
    // The handlers are copied: a router may move (the loop takes it), its routes' state does not.
    lines->vector_prefix = vector_prefix_;
    if (const net::Router::Match m = router.match("PUT", vector_prefix_ + "/collections/_/points");
        m.handler != nullptr && m.streamed_limit == 0)
      lines->vector_upsert = *m.handler;
    if (const net::Router::Match m = router.match("GET", vector_prefix_ + "/collections/_");
        m.handler != nullptr)
      lines->vector_info = *m.handler;
    addApiRoutes(shared_, ctx, router, access, *lines);
    std::lock_guard<std::mutex> lock(mu_);
    if (loop >= 0 && static_cast<size_t>(loop) < loops_.size()) loops_[loop] = lines.get();
    router.own(std::move(lines));
  }

  void addAdminRoutes(net::asio::io_context& ctx, net::Router& admin,
                      const net::RouteGuard& guard) override {
    addAdminApiRoutes(shared_, ctx, admin, guard);
  }

  void start() override {
    std::lock_guard<std::mutex> lock(start_mu_);
    if (started_ || !runner_) return;
    started_ = true;
    const Status s = runner_->start();
    if (!s.isOk())
      INFERA_LOG(componentLogger("batch"), err, "the batch executor did not start: {}",
                 s.message());
  }

  void stop() override {
    std::lock_guard<std::mutex> lock(start_mu_);
    if (runner_) runner_->stop();
  }

 private:
  Shared shared_;
  std::mutex mu_;
  std::vector<LoopLines*> loops_;
  const std::string vector_prefix_;  // vectors.path_prefix ("" without a vector index)
  std::unique_ptr<Runner> runner_;
  std::mutex start_mu_;
  bool started_ = false;
};

}  // namespace

Result<std::unique_ptr<BatchService>> BatchService::create(const BatchConfig& config,
                                                           BatchDeps deps) {
  auto s = std::make_unique<BatchServiceImpl>(config, deps);
  INFERA_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<BatchService>(std::move(s));
}

}  // namespace infera::batch
