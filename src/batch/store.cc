#include "batch/internal/store.h"

#include <openssl/rand.h>

#include <cstdio>

namespace infera::batch {

using store::SqlValue;

namespace {

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS batch_files (
  id TEXT PRIMARY KEY, team TEXT NOT NULL, key_id TEXT NOT NULL, purpose TEXT NOT NULL,
  filename TEXT NOT NULL, bytes BIGINT NOT NULL, sha256 TEXT NOT NULL, created_ms BIGINT NOT NULL,
  expires_ms BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS batch_files_by_time ON batch_files (created_ms, id);
CREATE INDEX IF NOT EXISTS batch_files_by_expiry ON batch_files (expires_ms);
CREATE TABLE IF NOT EXISTS batch_batches (
  id TEXT PRIMARY KEY, team TEXT NOT NULL, key_id TEXT NOT NULL, user_name TEXT NOT NULL,
  endpoint TEXT NOT NULL, input_file_id TEXT NOT NULL, completion_window TEXT NOT NULL,
  status TEXT NOT NULL, ending TEXT NOT NULL, errors TEXT NOT NULL, metadata TEXT NOT NULL,
  output_file_id TEXT NOT NULL, error_file_id TEXT NOT NULL, total BIGINT NOT NULL,
  completed BIGINT NOT NULL, failed BIGINT NOT NULL, prompt_tokens BIGINT NOT NULL,
  completion_tokens BIGINT NOT NULL, created_ms BIGINT NOT NULL, expires_ms BIGINT NOT NULL,
  in_progress_ms BIGINT NOT NULL, finalizing_ms BIGINT NOT NULL, completed_ms BIGINT NOT NULL,
  failed_ms BIGINT NOT NULL, expired_ms BIGINT NOT NULL, cancelling_ms BIGINT NOT NULL,
  cancelled_ms BIGINT NOT NULL, owner TEXT NOT NULL, lease_ms BIGINT NOT NULL,
  vector_collection TEXT NOT NULL DEFAULT '', output_expires_s BIGINT NOT NULL DEFAULT 0,
  enqueued_tokens BIGINT NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS batch_batches_by_time ON batch_batches (created_ms, id);
CREATE INDEX IF NOT EXISTS batch_batches_by_status ON batch_batches (status);
CREATE TABLE IF NOT EXISTS batch_chunks (
  batch_id TEXT NOT NULL, chunk BIGINT NOT NULL, first_line BIGINT NOT NULL,
  lines BIGINT NOT NULL, offset_bytes BIGINT NOT NULL, owner TEXT NOT NULL,
  lease_ms BIGINT NOT NULL, done BIGINT NOT NULL, PRIMARY KEY (batch_id, chunk));
CREATE TABLE IF NOT EXISTS batch_results (
  batch_id TEXT NOT NULL, line BIGINT NOT NULL, ok BIGINT NOT NULL, line_json TEXT NOT NULL,
  PRIMARY KEY (batch_id, line));
)";

constexpr const char* kFileColumns =
    "id, team, key_id, purpose, filename, bytes, sha256, created_ms, expires_ms";

FileRow fileAt(const store::SqlResult& r, size_t i) {
  FileRow f;
  f.id = r.text(i, 0);
  f.team = r.text(i, 1);
  f.key_id = r.text(i, 2);
  f.purpose = r.text(i, 3);
  f.filename = r.text(i, 4);
  f.bytes = r.integer(i, 5);
  f.sha256 = r.text(i, 6);
  f.created_ms = r.integer(i, 7);
  f.expires_ms = r.integer(i, 8);
  return f;
}

constexpr const char* kBatchColumns =
    "id, team, key_id, user_name, endpoint, input_file_id, completion_window, status, ending, "
    "errors, metadata, output_file_id, error_file_id, total, completed, failed, prompt_tokens, "
    "completion_tokens, created_ms, expires_ms, in_progress_ms, finalizing_ms, completed_ms, "
    "failed_ms, expired_ms, cancelling_ms, cancelled_ms, vector_collection, output_expires_s, "
    "enqueued_tokens";

BatchRow batchAt(const store::SqlResult& r, size_t i) {
  BatchRow b;
  size_t c = 0;
  b.id = r.text(i, c++);
  b.team = r.text(i, c++);
  b.key_id = r.text(i, c++);
  b.user = r.text(i, c++);
  b.endpoint = r.text(i, c++);
  b.input_file_id = r.text(i, c++);
  b.completion_window = r.text(i, c++);
  b.status = r.text(i, c++);
  b.ending = r.text(i, c++);
  b.errors = r.text(i, c++);
  b.metadata = r.text(i, c++);
  b.output_file_id = r.text(i, c++);
  b.error_file_id = r.text(i, c++);
  for (int64_t* v :
       {&b.total, &b.completed, &b.failed, &b.prompt_tokens, &b.completion_tokens, &b.created_ms,
        &b.expires_ms, &b.in_progress_ms, &b.finalizing_ms, &b.completed_ms, &b.failed_ms,
        &b.expired_ms, &b.cancelling_ms, &b.cancelled_ms})
    *v = r.integer(i, c++);
  b.vector_collection = r.text(i, c++);
  b.output_expires_s = r.integer(i, c++);
  b.enqueued_tokens = r.integer(i, c++);
  return b;
}

std::string randomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  if (RAND_bytes(buf.data(), static_cast<int>(buf.size())) != 1) {
    // OpenSSL's generator failed (it does not on Linux with getrandom): fall back to the
    // system's random device rather than answer with a predictable id.
    FILE* f = std::fopen("/dev/urandom", "rb");
    if (f != nullptr) {
      (void)std::fread(buf.data(), 1, buf.size(), f);
      std::fclose(f);
    }
  }
  std::string out;
  out.reserve(bytes * 2);
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char b : buf) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

// The WHERE of a listing: the viewer's rows, after the cursor, in the order.
struct ListQuery {
  std::string where;
  std::vector<SqlValue> params;
};

}  // namespace

std::string newFileId() { return "file-" + randomHex(12); }
std::string newBatchId() { return "batch_" + randomHex(16); }
std::string newRequestId() { return "batch_req_" + randomHex(16); }

Result<std::unique_ptr<BatchStore>> BatchStore::open(const std::string& url) {
  INFERA_ASSIGN_OR_RETURN(auto db, store::SqlDb::open(url));
  return std::make_unique<BatchStore>(std::move(db));
}

Status BatchStore::migrate() {
  INFERA_RETURN_IF_ERROR(db_->execScript(kSchema));
  // Added after the first release of the schema.
  INFERA_RETURN_IF_ERROR(
      db_->addColumnIfMissing("batch_batches", "vector_collection", "TEXT NOT NULL DEFAULT ''"));
  INFERA_RETURN_IF_ERROR(
      db_->addColumnIfMissing("batch_batches", "output_expires_s", "BIGINT NOT NULL DEFAULT 0"));
  return db_->addColumnIfMissing("batch_batches", "enqueued_tokens", "BIGINT NOT NULL DEFAULT 0");
}

// ---------------- files ----------------

Status BatchStore::insertFile(const FileRow& f) {
  return db_
      ->exec(std::string("INSERT INTO batch_files (") + kFileColumns +
                 ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
             {f.id, f.team, f.key_id, f.purpose, f.filename, f.bytes, f.sha256, f.created_ms,
              f.expires_ms})
      .takeStatus();
}

Status BatchStore::upsertFile(const FileRow& f) {
  return db_
      ->exec(std::string("INSERT INTO batch_files (") + kFileColumns +
                 ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (id) DO UPDATE SET "
                 "bytes = excluded.bytes, sha256 = excluded.sha256, created_ms = "
                 "excluded.created_ms, expires_ms = excluded.expires_ms",
             {f.id, f.team, f.key_id, f.purpose, f.filename, f.bytes, f.sha256, f.created_ms,
              f.expires_ms})
      .takeStatus();
}

Result<std::optional<FileRow>> BatchStore::file(const std::string& id) {
  INFERA_ASSIGN_OR_RETURN(
      auto r,
      db_->exec(std::string("SELECT ") + kFileColumns + " FROM batch_files WHERE id = ?1", {id}));
  if (r.rows.empty()) return std::optional<FileRow>();
  return std::optional<FileRow>(fileAt(r, 0));
}

namespace {

// Rows of `table` the viewer sees, after the cursor row (by created_ms, then id), in the order.
Result<ListQuery> listWhere(store::SqlDb& db, const char* table, const Viewer& v, const Page& p,
                            bool with_purpose) {
  ListQuery q;
  q.where = " WHERE 1 = 1";
  if (!v.all) {
    q.params.emplace_back(v.team);
    q.where += " AND (team = ?" + std::to_string(q.params.size()) + " OR team = '')";
  }
  if (with_purpose && p.now_ms > 0) {
    // An expired file is gone for its readers before the sweep deletes it.
    q.params.emplace_back(p.now_ms);
    q.where += " AND (expires_ms = 0 OR expires_ms > ?" + std::to_string(q.params.size()) + ")";
  }
  if (with_purpose && !p.purpose.empty()) {
    q.params.emplace_back(p.purpose);
    q.where += " AND purpose = ?" + std::to_string(q.params.size());
  }
  if (!p.team.empty()) {
    q.params.emplace_back(p.team);
    q.where += " AND team = ?" + std::to_string(q.params.size());
  }
  if (!with_purpose && !p.status.empty()) {
    q.params.emplace_back(p.status);
    q.where += " AND status = ?" + std::to_string(q.params.size());
  }
  if (!p.after.empty()) {
    // The cursor resolves only among the rows the viewer sees (another team's id tells nothing).
    INFERA_ASSIGN_OR_RETURN(auto c,
                            db.exec(std::string("SELECT created_ms FROM ") + table +
                                        " WHERE id = ?1 AND (?2 = 1 OR team = ?3 OR team = '')",
                                    {p.after, int64_t{v.all ? 1 : 0}, v.team}));
    if (c.rows.empty()) return Status::notFound("no such object for 'after': " + p.after);
    q.params.emplace_back(c.integer(0, 0));
    const std::string t = std::to_string(q.params.size());
    q.params.emplace_back(p.after);
    const std::string id = std::to_string(q.params.size());
    q.where +=
        p.ascending
            ? " AND (created_ms > ?" + t + " OR (created_ms = ?" + t + " AND id > ?" + id + "))"
            : " AND (created_ms < ?" + t + " OR (created_ms = ?" + t + " AND id < ?" + id + "))";
  }
  q.where +=
      p.ascending ? " ORDER BY created_ms ASC, id ASC" : " ORDER BY created_ms DESC, id DESC";
  q.where += " LIMIT " + std::to_string(p.limit + 1);
  return q;
}

}  // namespace

Result<std::vector<FileRow>> BatchStore::files(const Viewer& v, const Page& page) {
  INFERA_ASSIGN_OR_RETURN(const ListQuery q, listWhere(*db_, "batch_files", v, page, true));
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec(std::string("SELECT ") + kFileColumns + " FROM batch_files" + q.where,
                        std::span<const SqlValue>(q.params)));
  std::vector<FileRow> out;
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(fileAt(r, i));
  return out;
}

Status BatchStore::deleteFile(const std::string& id) {
  // One statement: a batch created over the file between a check and the delete cannot slip in.
  INFERA_ASSIGN_OR_RETURN(
      auto d, db_->exec("DELETE FROM batch_files WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM "
                        "batch_batches WHERE input_file_id = ?1 AND status IN ('validating', "
                        "'in_progress', 'finalizing', 'cancelling'))",
                        {id}));
  if (d.affected == 1) return Status::ok();
  INFERA_RETURN_IF_ERROR(fileInUse(id));
  return Status::notFound("No such File object: " + id);
}

Result<std::vector<std::string>> BatchStore::expiredFiles(int64_t now_ms, int64_t limit) {
  // The inputs of batches that have not ended are left out: they wait for their batch (and must
  // not fill every page while files after them are due).
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec("SELECT id FROM batch_files WHERE expires_ms > 0 AND expires_ms <= ?1 AND "
                        "id NOT IN (SELECT input_file_id FROM batch_batches WHERE status IN "
                        "('validating', 'in_progress', 'finalizing', 'cancelling')) ORDER BY "
                        "expires_ms LIMIT ?2",
                        {now_ms, limit}));
  std::vector<std::string> out;
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(r.text(i, 0));
  return out;
}

Status BatchStore::fileInUse(const std::string& id) {
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec("SELECT id FROM batch_batches WHERE input_file_id = ?1 AND status IN "
                        "('validating', 'in_progress', 'finalizing', 'cancelling') LIMIT 1",
                        {id}));
  if (r.rows.empty()) return Status::ok();
  return Status::failedPrecondition("File " + id + " is the input of batch " + r.text(0, 0) +
                                    ", which has not ended: cancel it or wait for it to end.");
}

// ---------------- batches ----------------

Status BatchStore::insertBatch(const BatchRow& b) {
  return db_
      ->exec(std::string("INSERT INTO batch_batches (") + kBatchColumns +
                 ", owner, lease_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                 "?13, 0, 0, 0, 0, 0, ?14, ?15, 0, 0, 0, 0, 0, 0, 0, ?16, ?17, 0, '', 0)",
             {b.id, b.team, b.key_id, b.user, b.endpoint, b.input_file_id, b.completion_window,
              b.status, b.ending, b.errors, b.metadata, b.output_file_id, b.error_file_id,
              b.created_ms, b.expires_ms, b.vector_collection, b.output_expires_s})
      .takeStatus();
}

Result<std::optional<BatchRow>> BatchStore::batch(const std::string& id) {
  INFERA_ASSIGN_OR_RETURN(auto r, db_->exec(std::string("SELECT ") + kBatchColumns +
                                                " FROM batch_batches WHERE id = ?1",
                                            {id}));
  if (r.rows.empty()) return std::optional<BatchRow>();
  return std::optional<BatchRow>(batchAt(r, 0));
}

Result<std::vector<BatchRow>> BatchStore::batches(const Viewer& v, const Page& page) {
  INFERA_ASSIGN_OR_RETURN(const ListQuery q, listWhere(*db_, "batch_batches", v, page, false));
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec(std::string("SELECT ") + kBatchColumns + " FROM batch_batches" + q.where,
                        std::span<const SqlValue>(q.params)));
  std::vector<BatchRow> out;
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(batchAt(r, i));
  return out;
}

Result<std::optional<BatchRow>> BatchStore::cancel(const std::string& id, int64_t now_ms) {
  INFERA_ASSIGN_OR_RETURN(
      auto u, db_->exec("UPDATE batch_batches SET status = 'cancelling', ending = 'cancelled', "
                        "cancelling_ms = ?2 WHERE id = ?1 AND status IN ('validating', "
                        "'in_progress')",
                        {id, now_ms}));
  INFERA_ASSIGN_OR_RETURN(auto b, batch(id));
  if (!b) return b;
  if (u.affected == 0 && b->status != "cancelling" && b->status != "cancelled") {
    return Status::failedPrecondition("Cannot cancel a batch with status '" + b->status + "'.");
  }
  return b;
}

Result<int64_t> BatchStore::expire(int64_t now_ms) {
  INFERA_ASSIGN_OR_RETURN(
      auto u, db_->exec("UPDATE batch_batches SET ending = 'expired' WHERE status IN "
                        "('validating', 'in_progress') AND ending = '' AND expires_ms < ?1",
                        {now_ms}));
  return u.affected;
}

// ---------------- the executor's claims ----------------

Result<std::optional<BatchRow>> BatchStore::claimValidation(const std::string& owner,
                                                            int64_t now_ms, int64_t lease_ms) {
  INFERA_ASSIGN_OR_RETURN(
      auto c, db_->exec("SELECT id FROM batch_batches WHERE status = 'validating' AND lease_ms < "
                        "?1 ORDER BY created_ms LIMIT 1",
                        {now_ms}));
  if (c.rows.empty()) return std::optional<BatchRow>();
  const std::string id = c.text(0, 0);
  INFERA_ASSIGN_OR_RETURN(
      auto u, db_->exec("UPDATE batch_batches SET owner = ?2, lease_ms = ?3 WHERE id = ?1 AND "
                        "status = 'validating' AND lease_ms < ?4",
                        {id, owner, now_ms + lease_ms, now_ms}));
  if (u.affected == 0) return std::optional<BatchRow>();  // another runner was first
  return batch(id);
}

Status BatchStore::startBatch(const std::string& id, const std::string& owner,
                              const std::vector<Chunk>& chunks, int64_t total, int64_t now_ms,
                              int64_t enqueued_tokens, int64_t max_enqueued_tokens) {
  INFERA_RETURN_IF_ERROR(db_->begin());
  auto fail = [&](Status s) {
    (void)db_->rollback();
    return s;
  };
  // Only the validator that holds the batch (a validator whose lease ran out and was taken over
  // must not reset the chunks the other one wrote).
  auto held = db_->exec(
      "UPDATE batch_batches SET lease_ms = lease_ms WHERE id = ?1 AND owner = ?2 AND status IN "
      "('validating', 'cancelling')",
      {id, owner});
  if (!held.ok()) return fail(held.takeStatus());
  if (held->affected != 1) return fail(Status::failedPrecondition("the validation was taken over"));
  if (max_enqueued_tokens > 0) {
    // What the team's other batches in progress hold, read in this transaction.
    auto q = db_->exec(
        "SELECT COALESCE(SUM(enqueued_tokens), 0) FROM batch_batches WHERE team = (SELECT team "
        "FROM batch_batches WHERE id = ?1) AND id <> ?1 AND status = 'in_progress' AND ending = ''",
        {id});
    if (!q.ok()) return fail(q.takeStatus());
    const int64_t others = q->integer(0, 0);
    if (others + enqueued_tokens > max_enqueued_tokens) {
      return fail(Status::resourceExhausted(
          "Enqueued token limit reached: the team's batches in progress hold about " +
          std::to_string(others) + " tokens and this one about " + std::to_string(enqueued_tokens) +
          " (limit: " + std::to_string(max_enqueued_tokens) +
          " enqueued tokens, batch.max_enqueued_tokens). Please try again once some in_progress "
          "batches have been completed."));
    }
  }
  // Chunks of an earlier attempt (a validator that died after writing some) go first.
  if (auto d = db_->exec("DELETE FROM batch_chunks WHERE batch_id = ?1", {id}); !d.ok())
    return fail(d.takeStatus());
  for (const Chunk& c : chunks) {
    auto r = db_->exec(
        "INSERT INTO batch_chunks (batch_id, chunk, first_line, lines, offset_bytes, owner, "
        "lease_ms, done) VALUES (?1, ?2, ?3, ?4, ?5, '', 0, 0)",
        {id, c.chunk, c.first_line, c.lines, c.offset});
    if (!r.ok()) return fail(r.takeStatus());
  }
  auto u = db_->exec(
      "UPDATE batch_batches SET total = ?2, in_progress_ms = ?3, lease_ms = 0, owner = '', "
      "enqueued_tokens = ?4, status = CASE WHEN status = 'validating' THEN 'in_progress' ELSE "
      "status END WHERE id = ?1",
      {id, total, now_ms, enqueued_tokens});
  if (!u.ok()) return fail(u.takeStatus());
  return db_->commit();
}

Status BatchStore::failBatch(const std::string& id, const std::string& owner,
                             const std::string& errors_json, int64_t now_ms) {
  return db_
      ->exec(
          "UPDATE batch_batches SET status = 'failed', errors = ?2, failed_ms = ?3, lease_ms = "
          "0, owner = '' WHERE id = ?1 AND owner = ?4 AND status IN ('validating', "
          "'cancelling')",
          {id, errors_json, now_ms, owner})
      .takeStatus();
}

Result<bool> BatchStore::renewBatch(const std::string& id, const std::string& owner,
                                    int64_t until_ms) {
  INFERA_ASSIGN_OR_RETURN(
      auto u, db_->exec("UPDATE batch_batches SET lease_ms = ?3 WHERE id = ?1 AND owner = ?2 AND "
                        "status IN ('validating', 'cancelling', 'finalizing')",
                        {id, owner, until_ms}));
  return u.affected == 1;
}

Status BatchStore::backOffChunk(const Chunk& c, const std::string& owner, int64_t until_ms) {
  return db_
      ->exec(
          "UPDATE batch_chunks SET lease_ms = ?4, owner = '' WHERE batch_id = ?1 AND chunk = "
          "?2 AND owner = ?3 AND done = 0",
          {c.batch_id, c.chunk, owner, until_ms})
      .takeStatus();
}

Result<std::optional<Chunk>> BatchStore::claimChunk(const std::string& owner, int64_t now_ms,
                                                    int64_t lease_ms) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    INFERA_ASSIGN_OR_RETURN(
        auto c, db_->exec("SELECT c.batch_id, c.chunk, c.first_line, c.lines, c.offset_bytes "
                          "FROM batch_chunks c JOIN batch_batches b ON b.id = c.batch_id WHERE "
                          "b.status = 'in_progress' AND b.ending = '' AND c.done = 0 AND "
                          "c.lease_ms < ?1 ORDER BY b.created_ms, c.batch_id, c.chunk LIMIT 1",
                          {now_ms}));
    if (c.rows.empty()) return std::optional<Chunk>();
    Chunk k{c.text(0, 0), c.integer(0, 1), c.integer(0, 2), c.integer(0, 3), c.integer(0, 4)};
    INFERA_ASSIGN_OR_RETURN(
        auto u, db_->exec("UPDATE batch_chunks SET owner = ?3, lease_ms = ?4 WHERE batch_id = ?1 "
                          "AND chunk = ?2 AND done = 0 AND lease_ms < ?5",
                          {k.batch_id, k.chunk, owner, now_ms + lease_ms, now_ms}));
    if (u.affected == 1) return std::optional<Chunk>(std::move(k));
    // Another runner claimed it between the two statements: look again.
  }
  return std::optional<Chunk>();
}

Result<bool> BatchStore::renewChunk(const Chunk& c, const std::string& owner, int64_t until_ms) {
  INFERA_ASSIGN_OR_RETURN(
      auto u, db_->exec("UPDATE batch_chunks SET lease_ms = ?4 WHERE batch_id = ?1 AND chunk = ?2 "
                        "AND owner = ?3 AND done = 0",
                        {c.batch_id, c.chunk, owner, until_ms}));
  return u.affected == 1;
}

Status BatchStore::releaseChunk(const Chunk& c, const std::string& owner, bool done) {
  return db_
      ->exec(done ? "UPDATE batch_chunks SET done = 1, lease_ms = 0, owner = '' WHERE batch_id = "
                    "?1 AND chunk = ?2"
                  : "UPDATE batch_chunks SET lease_ms = 0, owner = '' WHERE batch_id = ?1 AND "
                    "chunk = ?2 AND owner = ?3 AND done = 0",
             done ? std::initializer_list<SqlValue>{c.batch_id, c.chunk}
                  : std::initializer_list<SqlValue>{c.batch_id, c.chunk, owner})
      .takeStatus();
}

Result<std::vector<int64_t>> BatchStore::recordedLines(const std::string& batch_id, int64_t first,
                                                       int64_t last) {
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec("SELECT line FROM batch_results WHERE batch_id = ?1 AND line >= ?2 AND "
                        "line <= ?3 ORDER BY line",
                        {batch_id, first, last}));
  std::vector<int64_t> out;
  out.reserve(r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(r.integer(i, 0));
  return out;
}

Status BatchStore::record(const std::string& batch_id, const std::vector<LineResult>& results) {
  if (results.empty()) return Status::ok();
  INFERA_RETURN_IF_ERROR(db_->begin());
  int64_t ok = 0, failed = 0, prompt = 0, completion = 0;
  for (const LineResult& r : results) {
    // Only while the batch runs: an answer that comes back after it was finalized is not kept
    // (its line is already in the error file as not run).
    auto ins = db_->exec(
        "INSERT INTO batch_results (batch_id, line, ok, line_json) SELECT ?1, ?2, ?3, ?4 WHERE "
        "EXISTS (SELECT 1 FROM batch_batches WHERE id = ?1 AND status IN ('in_progress', "
        "'cancelling')) ON CONFLICT (batch_id, line) DO NOTHING",
        {batch_id, r.line, int64_t{r.ok ? 1 : 0}, r.line_json});
    if (!ins.ok()) {
      (void)db_->rollback();
      return ins.takeStatus();
    }
    if (ins->affected != 1) continue;  // answered before (a chunk taken over): kept as it was
    (r.ok ? ok : failed) += 1;
    prompt += r.prompt_tokens;
    completion += r.completion_tokens;
  }
  auto u = db_->exec(
      "UPDATE batch_batches SET completed = completed + ?2, failed = failed + ?3, prompt_tokens = "
      "prompt_tokens + ?4, completion_tokens = completion_tokens + ?5 WHERE id = ?1",
      {batch_id, ok, failed, prompt, completion});
  if (!u.ok()) {
    (void)db_->rollback();
    return u.takeStatus();
  }
  return db_->commit();
}

Result<std::string> BatchStore::ending(const std::string& batch_id) {
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec("SELECT ending, status FROM batch_batches WHERE id = ?1", {batch_id}));
  if (r.rows.empty()) return std::string("gone");
  if (r.text(0, 1) != "in_progress" && r.text(0, 1) != "cancelling") return r.text(0, 1);
  return r.text(0, 0);
}

Result<std::optional<BatchRow>> BatchStore::claimFinalize(const std::string& owner, int64_t now_ms,
                                                          int64_t lease_ms) {
  INFERA_ASSIGN_OR_RETURN(
      auto c,
      db_->exec("SELECT b.id FROM batch_batches b WHERE ((b.status IN ('in_progress', "
                "'cancelling') AND NOT EXISTS (SELECT 1 FROM batch_chunks c WHERE c.batch_id = "
                "b.id AND c.done = 0 AND (b.ending = '' OR c.lease_ms >= ?1))) OR (b.status = "
                "'finalizing' AND b.lease_ms < ?1)) AND b.lease_ms < ?1 ORDER BY b.created_ms "
                "LIMIT 1",
                {now_ms}));
  if (c.rows.empty()) return std::optional<BatchRow>();
  const std::string id = c.text(0, 0);
  INFERA_ASSIGN_OR_RETURN(
      auto u, db_->exec("UPDATE batch_batches SET status = 'finalizing', finalizing_ms = CASE WHEN "
                        "status = 'finalizing' THEN finalizing_ms ELSE ?2 END, owner = ?3, "
                        "lease_ms = ?4 WHERE id = ?1 AND status IN ('in_progress', 'cancelling', "
                        "'finalizing') AND lease_ms < ?2",
                        {id, now_ms, owner, now_ms + lease_ms}));
  if (u.affected == 0) return std::optional<BatchRow>();
  return batch(id);
}

Result<std::vector<LineResult>> BatchStore::results(const std::string& batch_id, int64_t after,
                                                    int64_t limit, int64_t max_bytes) {
  // The sizes first, so that a page of large answers stays within max_bytes (one row at least).
  INFERA_ASSIGN_OR_RETURN(
      auto sizes, db_->exec("SELECT line, length(line_json) FROM batch_results WHERE batch_id = "
                            "?1 AND line > ?2 ORDER BY line LIMIT ?3",
                            {batch_id, after, limit}));
  if (sizes.rows.empty()) return std::vector<LineResult>();
  int64_t last = sizes.integer(0, 0), bytes = 0;
  for (size_t i = 0; i < sizes.rows.size(); ++i) {
    bytes += sizes.integer(i, 1);
    if (i > 0 && bytes > max_bytes) break;
    last = sizes.integer(i, 0);
  }
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec("SELECT line, ok, line_json FROM batch_results WHERE batch_id = ?1 AND "
                        "line > ?2 AND line <= ?3 ORDER BY line",
                        {batch_id, after, last}));
  std::vector<LineResult> out;
  out.reserve(r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    LineResult l;
    l.line = r.integer(i, 0);
    l.ok = r.integer(i, 1) != 0;
    l.line_json = r.text(i, 2);
    out.push_back(std::move(l));
  }
  return out;
}

Status BatchStore::dropResults(const std::string& batch_id) {
  INFERA_RETURN_IF_ERROR(
      db_->exec("DELETE FROM batch_results WHERE batch_id = ?1", {batch_id}).takeStatus());
  return db_->exec("DELETE FROM batch_chunks WHERE batch_id = ?1", {batch_id}).takeStatus();
}

Result<int64_t> BatchStore::openBatches(const std::string& team) {
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec("SELECT COUNT(*) FROM batch_batches WHERE team = ?1 AND status IN "
                        "('validating', 'in_progress', 'finalizing', 'cancelling')",
                        {team}));
  return r.integer(0, 0);
}

Status BatchStore::finishBatch(const std::string& id, const std::string& owner,
                               const std::string& status, const std::string& output_file_id,
                               const std::string& error_file_id, int64_t unrun, int64_t now_ms) {
  const char* column = status == "completed"   ? "completed_ms"
                       : status == "cancelled" ? "cancelled_ms"
                                               : "expired_ms";
  INFERA_ASSIGN_OR_RETURN(
      auto u,
      db_->exec(
          std::string("UPDATE batch_batches SET status = ?2, output_file_id = ?3, "
                      "error_file_id = ?4, failed = failed + ?6, lease_ms = 0, owner = '', ") +
              column + " = ?5 WHERE id = ?1 AND status = 'finalizing' AND owner = ?7",
          {id, status, output_file_id, error_file_id, now_ms, unrun, owner}));
  if (u.affected != 1) return Status::failedPrecondition("the finalization was taken over");
  return Status::ok();
}

}  // namespace infera::batch
