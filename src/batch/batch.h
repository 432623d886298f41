#pragma once
// Batch inference: OpenAI's Files API (/v1/files) and Batches API (/v1/batches) on the data port,
// and the durable executor that runs a batch's lines through the gateway's own handlers, as the
// key that created the batch, in the flow control's `batch` priority class. State lives in the
// metadata store (SQLite file or PostgreSQL, shared by replicas): files by their rows and the
// bytes under file_dir, batches split into chunks of lines that runners claim with a lease, and
// every line's answer recorded before it counts as done, so a process killed mid-batch resumes
// where it stopped and no custom_id is answered twice in the output. docs/batch.md has the API,
// the lifecycle and what OpenAI has that Infera does not.
//
//   auto batch = batch::BatchService::create(config, {metrics, access, workers, clock});
//   // per data loop, on that loop, after the gateway's routes (lines run through them):
//   (*batch)->addDataRoutes(i, ctx, data_router, access_worker);
//   (*batch)->start(loops);            // the executor thread
//   (*batch)->stop();                  // before the servers and loops go: lines in flight are
//                                      // aborted and done again after a restart
//
// Threads: HTTP handlers run on their loops and send store and file work to the service's pool;
// the executor is one thread that reads input files, claims chunks and records answers, and posts
// each line to a data loop where it runs as an in-process request.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "net/asio.h"
#include "net/router.h"

namespace infera {
class ConfigReader;
}
namespace infera::obs {
class MetricsRegistry;
}
namespace infera::access {
class Access;
class AccessWorker;
}  // namespace infera::access

namespace infera::batch {

// The `batch` section. Off unless present. Every setting needs a restart.
struct BatchConfig {
  bool enabled = false;
  // "" = the access store when access control is on, else sqlite:<data_dir>/batch.db
  // (server::parseConfig fills it in).
  std::string store;
  std::string data_dir = "./infera-data/batch";
  std::string file_dir;                     // "" = <data_dir>/files; shared by replicas
  int64_t max_file_bytes = 512LL << 20;     // per uploaded file (OpenAI: 512 MB); more is 413
  int64_t max_lines = 50'000;               // requests per batch input file (OpenAI: 50,000)
  int64_t max_line_bytes = 4LL << 20;       // one input line
  int64_t max_response_bytes = 16LL << 20;  // one line's answer kept in the output
  int64_t concurrency = 16;                 // lines in flight per process
  int64_t chunk_lines = 256;                // lines claimed together
  int64_t lease_ms = 30'000;                // a claim another replica may take over after
  int64_t poll_ms = 200;                    // how often the executor looks for work
  int max_attempts = 3;                     // per line, for 429, 5xx and transport errors
  int64_t retry_base_ms = 500;              // back-off: base × 2^(attempt-1), ≤ 30 s
  int threads = 2;                          // store and file workers for the API
  int64_t max_queued = 1024;                // queued API store/file tasks; more is 503
  int64_t max_open_batches = 100;           // per team, not yet ended; more is 429
  // An uploaded file of purpose `batch` that names no expires_after expires this long after it
  // was made (OpenAI: 30 days); 0 = kept until deleted. Other files are kept unless they name one.
  int64_t batch_file_expiry_s = 2'592'000;
  // Per team: the estimated prompt tokens (a line's bytes / 4, as the gateway estimates a prompt)
  // its batches in progress may hold; a batch that would go past it fails validation with
  // token_limit_exceeded (OpenAI's enqueued token limit). 0 = no limit.
  int64_t max_enqueued_tokens = 0;
  double price_factor = 0.5;  // batch lines are billed at this share of the route\'s price
  std::vector<std::string> endpoints = {"/v1/chat/completions", "/v1/completions",
                                        "/v1/embeddings"};
  std::vector<std::string> completion_windows = {"24h"};  // accepted values ("<n>h" or "<n>m")
  int line = 0;                                           // of the section, for messages
};

void readBatchConfig(ConfigReader& section, BatchConfig& out);
std::vector<std::string> restartNeeded(const BatchConfig& running, const BatchConfig& next);
// "24h" -> 86'400'000; "90m" -> 5'400'000; else kInvalidArgument.
Result<int64_t> parseWindow(const std::string& window);

struct BatchDeps {
  obs::MetricsRegistry& metrics;
  access::Access* access = nullptr;  // null: no access control (every caller is the operator)
  int workers = 1;
  const Clock* clock = nullptr;  // null: the system clock
  // The vector index's path prefix (vectors.path_prefix) when the process serves one: batches
  // into a collection reach its routes there.
  std::string vector_path_prefix;
};

class BatchService {
 public:
  // Opens (and migrates) the store and the file directory; kInvalidArgument/kUnavailable.
  static Result<std::unique_ptr<BatchService>> create(const BatchConfig& config, BatchDeps deps);
  virtual ~BatchService() = default;

  // On loop `loop`'s thread before it serves, after the gateway's routes are on `router`: the
  // Files and Batches APIs, and the gateway handlers this loop runs batch lines through.
  // `access`: that loop's access worker (null: no access control).
  virtual void addDataRoutes(int loop, net::asio::io_context& ctx, net::Router& router,
                             access::AccessWorker* access) = 0;
  // On the admin loop: every team's batches for the operator (GET /admin/batches?team=&status=
  // &limit=&after=, GET /admin/batches/{id}, POST /admin/batches/{id}/cancel), behind `guard`.
  virtual void addAdminRoutes(net::asio::io_context& ctx, net::Router& admin,
                              const net::RouteGuard& guard) = 0;
  // Starts the executor (after every loop's addDataRoutes).
  virtual void start() = 0;
  // Stops the executor: no new lines; the lines in flight are aborted (their answers are not
  // recorded: they run again after a restart), their chunks' leases left to expire. Call before
  // the data servers and loops stop. Idempotent; the destructor calls it.
  virtual void stop() = 0;
};

}  // namespace infera::batch
