#pragma once
// Batch internals: what the API handlers and the executor share, the per-loop state lines run
// on, and the two halves (api.cc: the Files and Batches routes; runner.cc: the executor).

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "batch/batch.h"
#include "batch/internal/files.h"
#include "batch/internal/store.h"
#include "net/blocking_pool.h"
#include "net/router.h"
#include "net/server.h"

namespace infera::obs {
class Counter;
class MetricsRegistry;
}  // namespace infera::obs

namespace infera::batch {

// The executor's counters (written by its thread only, on shard 0).
struct Metrics {
  explicit Metrics(obs::MetricsRegistry& r);
  obs::Counter* lines_ok;       // answered 2xx and recorded
  obs::Counter* lines_failed;   // answered otherwise (or not at all) and recorded
  obs::Counter* lines_retried;  // sent again after a retryable answer
  obs::Counter* lines_aborted;  // in flight at a stop: not recorded, run again later
  obs::Counter* batches_validated;
  obs::Counter* batches_failed;
  obs::Counter* batches_finished;
  obs::Counter* files_expired;  // deleted by the sweep when their expiry passed
};

struct Shared {
  Shared(const BatchConfig& c, const Clock& clk, std::string file_dir, obs::MetricsRegistry& r,
         access::Access* a)
      : config(c),
        clock(clk),
        files(std::move(file_dir)),
        pool(c.threads, static_cast<size_t>(c.max_queued)),
        metrics(r),
        access(a) {}
  const BatchConfig config;
  const Clock& clock;
  FileDir files;
  net::BlockingPool<BatchStore> pool;
  Metrics metrics;
  access::Access* access;  // null: no access control (no audit log)
  int64_t nowMs() const { return clock.unixMillis(); }
};

// One line on its way through the gateway.
struct LineJob {
  std::string batch_id;
  int64_t line = 0;
  std::string custom_id;
  std::string endpoint;
  std::string body;  // the line's `body`, as the gateway reads it
  std::string key_id;
  std::string user;
  // A batch into a vector collection: the collection, and the line's point id and payload as
  // JSON text (the payload "" = none). The line's vector is upserted there before it counts.
  std::string collection;
  std::string point_id;
  std::string payload;
  // The embeddings answer of a line whose upsert failed and is tried again (with its request id):
  // the retry upserts it again without asking (and billing) the model a second time.
  std::string embedded;
  std::string embedded_request_id;
  size_t loop = 0;  // the data loop it was sent to
  int attempt = 1;
  int64_t not_before_ms = 0;  // a retry waits for its back-off
  size_t slot = 0;            // the executor's chunk slot it belongs to
};

// What came back: an HTTP answer (status > 0), or none (status 0: the line was aborted, or the
// gateway gave no answer).
struct LineOutcome {
  LineJob job;
  int status = 0;
  std::string body;
  std::string request_id;
  bool aborted = false;
  bool too_large = false;  // the answer was over max_response_bytes (not retried)
  bool final = false;      // a failure that would fail again (not retried)
  // A batch into a collection whose upsert failed: the embedding's usage (billed), since the
  // body is then the vector index's answer. -1: read the usage from the body.
  int64_t prompt_tokens = -1;
  int64_t retry_after_ms = 0;  // what the answer's retry-after said
};

// Answers from the loops to the executor thread.
class Mailbox {
 public:
  void put(LineOutcome o) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      q_.push_back(std::move(o));
    }
    cv_.notify_one();
  }
  void wake() { cv_.notify_one(); }
  // Waits up to `ms` for answers (or a wake()), then takes them all.
  std::deque<LineOutcome> take(int64_t ms, const std::atomic<bool>& stop) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return !q_.empty() || stop.load(); });
    std::deque<LineOutcome> out;
    out.swap(q_);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<LineOutcome> q_;
};

// Keeps the gateway's answer to one in-process request.
class CaptureWriter final : public net::ResponseWriter {
 public:
  explicit CaptureWriter(int64_t max_bytes) : max_(max_bytes) {}
  net::Task<bool> send(int status, std::string_view content_type, std::string_view body,
                       std::span<const net::HttpHeader> extra) override {
    (void)content_type;
    if (gone_) co_return false;
    status_ = status;
    takeHeaders(extra);
    started_ = finished_ = true;
    co_return append(body);
  }
  net::Task<bool> start(int status, std::string_view content_type,
                        std::span<const net::HttpHeader> extra, int64_t content_length,
                        std::span<const net::HttpHeader> relayed) override {
    (void)content_type;
    (void)content_length;
    if (gone_) co_return false;
    status_ = status;
    takeHeaders(extra);
    takeHeaders(relayed);
    started_ = true;
    co_return true;
  }
  net::Task<bool> writeChunk(std::string_view data) override {
    if (gone_) co_return false;
    co_return append(data);
  }
  net::Task<bool> finish() override {
    finished_ = true;
    co_return !gone_;
  }
  bool started() const override { return started_; }
  bool finished() const override { return finished_; }
  bool clientGone() const override { return gone_; }
  void closeAfterResponse() override {}
  void watchDisconnect(std::function<void()> on_close) override {
    if (gone_) {
      on_close();  // aborted before the handler got here: it ends now
      return;
    }
    if (!on_close_) on_close_ = std::move(on_close);
  }
  // The executor stops: the line ends as if its client went away.
  void abort() {
    aborted_ = gone_ = true;
    if (auto f = std::move(on_close_)) f();
  }

  int status() const override { return status_; }
  bool aborted() const { return aborted_; }
  bool tooLarge() const { return too_large_; }
  std::string& body() { return body_; }
  const std::string& requestId() const { return request_id_; }
  int64_t retryAfterMs() const { return retry_after_ms_; }

 private:
  bool append(std::string_view data) {
    if (static_cast<int64_t>(body_.size() + data.size()) > max_) {
      too_large_ = gone_ = true;
      return false;
    }
    body_.append(data);
    return true;
  }
  void takeHeaders(std::span<const net::HttpHeader> h) {
    for (const auto& x : h) {
      if (x.name == "x-request-id") request_id_ = x.value;
      if (x.name == "retry-after-ms") retry_after_ms_ = std::atoll(x.value.c_str());
      if (x.name == "retry-after" && retry_after_ms_ == 0)
        retry_after_ms_ = std::atoll(x.value.c_str()) * 1000;
    }
  }
  const int64_t max_;
  int status_ = 0;
  bool started_ = false, finished_ = false, gone_ = false, aborted_ = false, too_large_ = false;
  std::string body_;
  std::string request_id_;
  int64_t retry_after_ms_ = 0;
  std::function<void()> on_close_;
};

// A data loop's side of the executor, owned by that loop's router: the gateway handlers its lines
// run through, and the lines in flight on it (to abort at stop()). Used only on its loop.
struct LoopLines {
  explicit LoopLines(net::asio::io_context& c) : ctx(c) {}
  net::asio::io_context& ctx;
  std::unordered_map<std::string, net::RouteHandler> handlers;  // endpoint -> the gateway's
  // The vector index's routes on this loop (empty without a `vectors:` section), for batches
  // into a collection: PUT /collections/{name}/points and GET /collections/{name}.
  net::RouteHandler vector_upsert;
  net::RouteHandler vector_info;
  std::string vector_prefix;  // vectors.path_prefix
  std::vector<CaptureWriter*> in_flight;
  // The executor sends a few lines ahead of this loop's share of batch.concurrency: they wait
  // here, and a line that ends starts the next at once (no round trip to the executor's thread).
  std::deque<LineJob> waiting;
  int running = 0;
  std::shared_ptr<Mailbox> mailbox;  // where this loop's answers go (the executor's)
  int64_t max_response_bytes = 0;
  bool stopping = false;      // set by abortLines: a line that starts after it ends at once
  double price_factor = 1.0;  // batch.price_factor, for each line's usage
};

// Runs `job` on `loop` (posted there) once fewer than `max_running` of its lines run there (it
// waits in loop.waiting till then), and puts the outcome in `mailbox`.
void runLineOn(LoopLines& loop, LineJob job, std::shared_ptr<Mailbox> mailbox,
               int64_t max_response_bytes, int max_running);
// Aborts every line in flight on `loop` (on its thread): each ends with aborted = true, as do the
// lines waiting there.
void abortLines(LoopLines& loop);
// On `loop`'s thread: the lines of `batch_id` waiting there (not started) end with aborted = true.
void recallLines(LoopLines& loop, const std::string& batch_id);

// The executor: one thread.
class Runner {
 public:
  Runner(Shared& shared, std::function<LoopLines*(size_t)> loop, size_t loops);
  ~Runner();
  Status start();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The API on one data loop.
void addApiRoutes(Shared& shared, net::asio::io_context& ctx, net::Router& router,
                  access::AccessWorker* access, const LoopLines& lines);
// The operator's routes on the admin loop.
void addAdminApiRoutes(Shared& shared, net::asio::io_context& ctx, net::Router& admin,
                       const net::RouteGuard& guard);

// The Batch object's JSON (OpenAI's shape).
std::string batchJson(const BatchRow& b);
// The File object's JSON.
std::string fileJson(const FileRow& f);

}  // namespace infera::batch
