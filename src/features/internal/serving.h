#pragma once
// The Feast feature-server API on one loop: POST /get-online-features, /push,
// /write-to-online-store and GET /health, with access control (authenticate; access::checkOwner
// on every feature service and view read or written, another team's being unknown to the caller;
// admit; finish). One FeatureHandler per loop, owned by that loop's router; it reads the registry
// snapshot last posted to it.
//
// A request's JSON is parsed by the loop's one simdjson parser under the floor's rules
// (json_body.h), so everything a handler needs from it is taken out before its first co_await
// after the parse (another request on the loop may parse then).

#include <simdjson.h>

#include <memory>
#include <mutex>
#include <unordered_map>

#include "access/access.h"
#include "features/features.h"
#include "features/internal/ingest.h"
#include "features/internal/online_store.h"
#include "features/internal/pool.h"
#include "features/internal/registry.h"
#include "net/server.h"
#include "obs/metrics.h"

namespace infera::features {

struct FeatureMetrics {
  explicit FeatureMetrics(obs::MetricsRegistry& registry);
  obs::Family* requests;  // {endpoint, code_class}
  obs::Family* latency;   // {endpoint}
  obs::Family* values;    // {status}
  obs::Family* written;   // {kind}: rows, events, expired
  obs::Counter* values_by_status[5];
  obs::Counter* rows_written;
  obs::Counter* events_written;
  obs::Counter* expired_skipped;
};

// What every loop's handler shares (owned by the FeatureStore, alive as long as the routes).
struct ServingShared {
  const FeaturesConfig* config = nullptr;
  OnlineStore* store = nullptr;
  WorkerPool* pool = nullptr;
  const Clock* clock = nullptr;
  FeatureMetrics* metrics = nullptr;
  // One lock per aggregation view: its state updates are read-modify-write.
  std::mutex& aggLock(uint32_t view);
  std::mutex agg_mu;
  std::unordered_map<uint32_t, std::unique_ptr<std::mutex>> agg_locks;

  // Freshness per view name, since this process started (not persisted): when rows were last
  // written and the newest event time among them. `noted` is taken from the batches before they
  // are written (their rows move), `recordWrites` after the write succeeded.
  struct Freshness {
    int64_t last_write_ms = 0;
    int64_t newest_event_us = 0;
  };
  using Noted = std::vector<std::pair<std::string, int64_t>>;  // view, newest event (us)
  static Noted noted(const std::vector<ViewBatch>& batches);
  void recordWrites(const Noted& noted);
  std::unordered_map<std::string, Freshness> freshness() const;
  mutable std::mutex fresh_mu;
  std::unordered_map<std::string, Freshness> fresh;
};

// Writes the batches of a push or write: plain views through `write`, aggregation views on the
// pool. Blocking form for the admin ingest route.
Status writeBatchesBlocking(ServingShared& shared, std::vector<ViewBatch>& batches);

class FeatureHandler {
 public:
  FeatureHandler(int loop, net::asio::io_context& ctx, ServingShared& shared,
                 access::AccessWorker* access, std::shared_ptr<const Registry> registry);
  void setRegistry(std::shared_ptr<const Registry> r) { registry_ = std::move(r); }

  net::Task<void> getOnlineFeatures(net::HttpRequest& req, net::ResponseWriter& w);
  net::Task<void> push(net::HttpRequest& req, net::ResponseWriter& w);
  net::Task<void> writeToOnlineStore(net::HttpRequest& req, net::ResponseWriter& w);
  net::Task<void> health(net::HttpRequest& req, net::ResponseWriter& w);

 private:
  struct Exchange;
  net::Task<bool> authenticate(Exchange& x);
  net::Task<bool> admit(Exchange& x);
  net::Task<void> finish(Exchange& x);
  net::Task<void> writeBatches(Exchange& x, std::vector<ViewBatch> batches, int ok_status,
                               std::string_view ok_body);

  int loop_;
  net::asio::io_context& ctx_;
  ServingShared& shared_;
  access::AccessWorker* access_;
  std::shared_ptr<const Registry> registry_;
  simdjson::dom::parser parser_;
  std::unique_ptr<Session> session_;
};

// Feast's error bodies: a FeastError is a JSON string holding {"module","class","message"}.
std::string feastErrorBody(std::string_view cls, std::string_view message);
// The feature server's error shape for the floor's own answers (net::Router::setErrorShape): a
// FeastError (FeastPermissionError for 401/403), or for a 5xx the plain message as a JSON string
// (what Feast answers for an exception that is not a FeastError). Never throws but bad_alloc.
net::EarlyAnswer feastErrorAnswer(int status, std::string_view message, std::string_view code);

}  // namespace infera::features
