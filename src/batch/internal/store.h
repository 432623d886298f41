#pragma once
// Batch internals: the Files and Batches tables in the metadata store (SQLite file or
// PostgreSQL, through store::SqlDb, so the same code runs on both), and the claims the executor
// makes on them. A batch's input is split into chunks of lines at validation; a runner claims a
// chunk with a lease (an UPDATE that succeeds only while the previous lease has run out, so two
// replicas never hold one chunk), renews it while it works, and records each line's answer with
// INSERT ... ON CONFLICT DO NOTHING before it counts: a line answered twice (a lease taken over
// from a replica that was only slow) is kept once, and the counters move only for the row that
// went in.
//
// One thread at a time (it owns one SqlDb); open one per thread.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "store/sql.h"

namespace infera::batch {

struct FileRow {
  std::string id;
  std::string team;  // "" = shared (made without access control)
  std::string key_id;
  std::string purpose;
  std::string filename;
  int64_t bytes = 0;
  std::string sha256;
  int64_t created_ms = 0;
  int64_t expires_ms = 0;  // 0 = never
};

struct BatchRow {
  std::string id;
  std::string team;
  std::string key_id;
  std::string user;
  std::string endpoint;
  std::string input_file_id;
  std::string completion_window;
  std::string status;    // validating | failed | in_progress | finalizing | completed | expired |
                         // cancelling | cancelled
  std::string ending;    // "" | cancelled | expired: how the work stops before every line is done
  std::string errors;    // JSON array of {code, message, param, line}, "" = none
  std::string metadata;  // JSON object text, "" = null
  std::string output_file_id;
  std::string error_file_id;
  int64_t total = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t created_ms = 0;
  int64_t expires_ms = 0;
  int64_t in_progress_ms = 0;
  int64_t finalizing_ms = 0;
  int64_t completed_ms = 0;
  int64_t failed_ms = 0;
  int64_t expired_ms = 0;
  int64_t cancelling_ms = 0;
  int64_t cancelled_ms = 0;
  std::string vector_collection;  // /v1/embeddings: where each line's vector is upserted ("": none)
  int64_t output_expires_s = 0;   // output and error files expire this long after they are made
  int64_t enqueued_tokens = 0;    // its lines' estimated prompt tokens (set at validation)
};

// A run of input lines claimed together: physical lines [first_line, first_line + lines) of the
// input file (1-based), starting at byte `offset`.
struct Chunk {
  std::string batch_id;
  int64_t chunk = 0;
  int64_t first_line = 0;
  int64_t lines = 0;
  int64_t offset = 0;
};

// One line's answer: `line_json` is the whole output (ok) or error (failed) file line.
struct LineResult {
  int64_t line = 0;
  bool ok = false;
  std::string line_json;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// Who lists: a team sees its own and the shared rows; the operator (empty team, all = true) sees
// every row.
struct Viewer {
  bool all = false;
  std::string team;
};

struct Page {
  std::string after;  // an id: rows after it in the order
  int64_t limit = 20;
  bool ascending = false;  // files: order=asc; batches are always newest first
  std::string purpose;     // files only: "" = any
  std::string team;        // "" = any (the operator's filters)
  std::string status;      // batches only: "" = any
  int64_t now_ms = 0;      // files only: > 0 leaves out the files expired by then
};

class BatchStore {
 public:
  static Result<std::unique_ptr<BatchStore>> open(const std::string& url);
  explicit BatchStore(std::unique_ptr<store::SqlDb> db) : db_(std::move(db)) {}
  Status migrate();

  // ---- files ----
  Status insertFile(const FileRow& f);
  // Replaces a row with the same id (the executor's output files, written again after a takeover).
  Status upsertFile(const FileRow& f);
  Result<std::optional<FileRow>> file(const std::string& id);
  // One more than page.limit rows, so the caller knows has_more.
  Result<std::vector<FileRow>> files(const Viewer& v, const Page& page);
  // kFailedPrecondition (and nothing deleted) when the file is the input of a batch that has not
  // ended; kNotFound when there is no such row.
  Status deleteFile(const std::string& id);
  // kFailedPrecondition when the file is the input of a batch that has not ended.
  Status fileInUse(const std::string& id);
  // Up to `limit` files whose expiry (expires_ms > 0) is at or before `now_ms`, soonest first,
  // but for the inputs of batches that have not ended.
  Result<std::vector<std::string>> expiredFiles(int64_t now_ms, int64_t limit);

  // ---- batches ----
  Status insertBatch(const BatchRow& b);
  Result<std::optional<BatchRow>> batch(const std::string& id);
  Result<std::vector<BatchRow>> batches(const Viewer& v, const Page& page);
  // validating/in_progress -> cancelling (ending = cancelled). The row after it, or nothing when
  // the batch is unknown. kFailedPrecondition when it is past cancelling.
  Result<std::optional<BatchRow>> cancel(const std::string& id, int64_t now_ms);
  // Batches past their window get ending = expired. How many.
  Result<int64_t> expire(int64_t now_ms);

  // ---- the executor's claims ----
  // A validating batch whose lease ran out, now leased to `owner`.
  Result<std::optional<BatchRow>> claimValidation(const std::string& owner, int64_t now_ms,
                                                  int64_t lease_ms);
  // Validation passed: the chunks, the total, status in_progress (unless the batch was cancelled
  // meanwhile, which keeps its status). All or nothing.
  // Only `owner`, while it holds the validation (kFailedPrecondition when it was taken over).
  // With max_enqueued_tokens > 0: kResourceExhausted (nothing written) when the team's other
  // batches in progress and this one's `enqueued_tokens` would hold more.
  Status startBatch(const std::string& id, const std::string& owner,
                    const std::vector<Chunk>& chunks, int64_t total, int64_t now_ms,
                    int64_t enqueued_tokens = 0, int64_t max_enqueued_tokens = 0);
  // Validation failed: status failed with `errors_json` (only `owner`, while it holds it).
  Status failBatch(const std::string& id, const std::string& owner, const std::string& errors_json,
                   int64_t now_ms);
  // Extends `owner`'s lease on the batch's validation or finalization; false when taken over.
  Result<bool> renewBatch(const std::string& id, const std::string& owner, int64_t until_ms);
  // Gives a chunk back that cannot be worked on now (its input unreadable), claimable again only
  // after `until_ms`, so the chunks of other batches go first.
  Status backOffChunk(const Chunk& c, const std::string& owner, int64_t until_ms);
  // Batches of `team` that have not ended.
  Result<int64_t> openBatches(const std::string& team);
  // A chunk of an in_progress batch (not ending) whose lease ran out, now leased to `owner`.
  Result<std::optional<Chunk>> claimChunk(const std::string& owner, int64_t now_ms,
                                          int64_t lease_ms);
  // Extends `owner`'s lease on the chunk; false when another runner took it over.
  Result<bool> renewChunk(const Chunk& c, const std::string& owner, int64_t until_ms);
  // Done (every line recorded), or given back (lease cleared) when `done` is false.
  Status releaseChunk(const Chunk& c, const std::string& owner, bool done);
  // The lines of [first, last] with a recorded answer.
  Result<std::vector<int64_t>> recordedLines(const std::string& batch_id, int64_t first,
                                             int64_t last);
  // Records answers (a line already recorded is kept as it was) and moves the counters by the
  // rows that went in. One transaction.
  Status record(const std::string& batch_id, const std::vector<LineResult>& results);
  // Whether the batch is ending (cancelled or expired) or gone: the executor stops its lines.
  Result<std::string> ending(const std::string& batch_id);
  // A batch ready to finalize (every chunk done; or ending, with no chunk leased), or one whose
  // finalizer's lease ran out, now status finalizing and leased to `owner`.
  Result<std::optional<BatchRow>> claimFinalize(const std::string& owner, int64_t now_ms,
                                                int64_t lease_ms);
  // Up to `limit` recorded answers after line `after`, in line order, and no more than
  // `max_bytes` of them (but at least one).
  Result<std::vector<LineResult>> results(const std::string& batch_id, int64_t after, int64_t limit,
                                          int64_t max_bytes);
  // A finished batch's recorded answers and chunks (its output files hold them now).
  Status dropResults(const std::string& batch_id);
  // The end: output and error files (ids may be empty) and the final status (completed,
  // cancelled or expired).
  // `unrun`: lines the batch ended without running (cancelled or expired), counted as failed.
  // Only `owner`, while it holds the finalization.
  Status finishBatch(const std::string& id, const std::string& owner, const std::string& status,
                     const std::string& output_file_id, const std::string& error_file_id,
                     int64_t unrun, int64_t now_ms);

 private:
  std::unique_ptr<store::SqlDb> db_;
};

// Random ids in OpenAI's style: "file-" + 24 characters, "batch_" + 32 hex.
std::string newFileId();
std::string newBatchId();
std::string newRequestId();  // "batch_req_" + 32 hex

}  // namespace infera::batch
