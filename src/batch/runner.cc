// The batch executor: validates input files into chunks, claims chunks with leases, runs their
// lines through the gateway's own handlers on the data loops (in-process requests as the batch's
// key, priority class `batch`), records every answer before it counts, and writes the output and
// error files when a batch ends.

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <functional>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "batch/internal/service.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/log.h"
#include "core/text.h"
#include "net/server.h"
#include "obs/metrics.h"

#include <simdjson.h>

namespace infera::batch {

using Json = nlohmann::json;
using net::Task;

// ---------------- one line on a loop ----------------

namespace {

// Answers worth asking again: none at all, timeouts, 429 and the transient 5xx.
bool retryable(int status) {
  return status == 0 || status == 408 || status == 429 || status == 500 || status == 502 ||
         status == 503 || status == 504;
}

std::string errorBody(std::string_view message, std::string_view type, std::string_view code) {
  return dumpJson(
      Json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}});
}

// A line of a batch into a vector collection, once its embeddings answer (out.body, 2xx) is in:
// its one vector is upserted with the line's point id and payload, as the batch's key, through
// the vector index's own route (wait=true: written before the line counts). `out` becomes the
// failure when the answer holds no vector or the upsert is refused.
Task<void> deliverVector(LoopLines& loop, LineJob& job, const net::InProcessCaller& caller,
                         LineOutcome& out) {
  std::string vector;
  int64_t prompt = -1;  // the embedding's usage, kept when the body becomes an error
  {
    static thread_local simdjson::dom::parser parser;
    simdjson::dom::element doc;
    simdjson::dom::array data, embedding;
    const bool parsed = parser.parse(out.body).get(doc) == simdjson::SUCCESS && doc.is_object();
    if (int64_t n = 0; parsed && doc["usage"]["prompt_tokens"].get(n) == simdjson::SUCCESS)
      prompt = n;
    if (!parsed || doc["data"].get(data) != simdjson::SUCCESS || data.size() != 1 ||
        data.at(0)["embedding"].get(embedding) != simdjson::SUCCESS || embedding.size() == 0) {
      out.status = 502;
      out.final = true;  // the same answer would come again
      out.prompt_tokens = prompt;
      out.body = errorBody("The embeddings answer holds no single vector of floats to upsert.",
                           "server_error", "invalid_embedding");
      co_return;
    }
    vector = simdjson::minify(embedding);
  }
  const std::string name = percentEncode(job.collection);
  if (!loop.vector_upsert) {
    out.status = 404;
    out.body = errorBody("This server has no vector index (no vectors: section) to upsert into.",
                         "invalid_request_error", "vector_index_missing");
    co_return;
  }
  net::HttpRequest req;
  req.method = "PUT";
  req.target = loop.vector_prefix + "/collections/" + name + "/points?wait=true";
  req.headers = {{"content-type", "application/json"}};
  req.body.reserve(vector.size() + job.payload.size() + job.point_id.size() + 48);
  req.body = "{\"points\":[{\"id\":" + job.point_id + ",\"vector\":" + vector;
  if (!job.payload.empty()) req.body += ",\"payload\":" + job.payload;
  req.body += "}]}";
  req.in_process = &caller;
  CaptureWriter w(1 << 20);
  loop.in_flight.push_back(&w);
  try {
    net::PathParams params;
    params.push("name", name);
    net::Task<void> handled = loop.vector_upsert(req, w, params);
    co_await std::move(handled);
  } catch (const std::exception& e) {
    INFERA_LOG(componentLogger("batch"), err, "batch {} line {}: the vector upsert threw: {}",
               job.batch_id, job.line, e.what());
  }
  std::erase(loop.in_flight, &w);
  if (w.aborted()) {
    out.aborted = true;
    co_return;
  }
  if (w.status() < 200 || w.status() >= 300) {
    // The vector index's own error (Qdrant's shape) is the line's answer; 429 and 5xx retry, and
    // the retry upserts the embedding it already has.
    out.status = w.status() > 0 ? w.status() : 500;
    if (retryable(out.status)) {
      job.embedded = std::move(out.body);
      job.embedded_request_id = out.request_id;
    }
    out.body = std::move(w.body());
    out.retry_after_ms = w.retryAfterMs();
    out.prompt_tokens = prompt;
  }
}

Task<void> runLine(LoopLines& loop, LineJob job, std::shared_ptr<Mailbox> mailbox,
                   int64_t max_response_bytes) {
  LineOutcome out;
  const auto it = loop.handlers.find(job.endpoint);
  if (loop.stopping) {
    out.aborted = true;  // posted before the stop, started after it: not run
  } else if (!job.embedded.empty()) {
    // Only the upsert failed before: the embedding it has goes in again.
    const net::InProcessCaller caller{job.key_id, job.user, true, loop.price_factor};
    out.status = 200;
    out.body = std::move(job.embedded);
    out.request_id = std::move(job.embedded_request_id);
    job.embedded.clear();
    job.embedded_request_id.clear();
    co_await deliverVector(loop, job, caller, out);
  } else if (it == loop.handlers.end()) {
    out.status = 404;
    out.body = errorBody("The gateway serves no route for " + job.endpoint, "invalid_request_error",
                         "unknown_url");
  } else {
    net::HttpRequest req;
    req.method = "POST";
    req.target = job.endpoint;
    req.headers = {{"content-type", "application/json"}, {"x-infera-priority", "batch"}};
    req.body = job.body;
    const net::InProcessCaller caller{job.key_id, job.user, true, loop.price_factor};
    req.in_process = &caller;
    CaptureWriter w(max_response_bytes);
    loop.in_flight.push_back(&w);
    try {
      net::Task<void> handled = it->second(req, w, net::PathParams{});
      co_await std::move(handled);
    } catch (const std::exception& e) {
      INFERA_LOG(componentLogger("batch"), err, "batch {} line {}: the handler threw: {}",
                 job.batch_id, job.line, e.what());
      if (!w.started()) out.status = 500;
    }
    std::erase(loop.in_flight, &w);
    if (out.status == 0 && !w.aborted() && !w.tooLarge()) out.status = w.status();
    out.aborted = w.aborted();
    out.retry_after_ms = w.retryAfterMs();
    if (w.tooLarge()) {
      out.status = 500;
      out.too_large = true;
      out.body = errorBody("the answer is larger than batch.max_response_bytes", "server_error",
                           "response_too_large");
    } else {
      out.body = std::move(w.body());
    }
    out.request_id = w.requestId();
    if (!job.collection.empty() && !out.aborted && out.status >= 200 && out.status < 300 &&
        !loop.stopping) {
      co_await deliverVector(loop, job, caller, out);
    }
  }
  out.job = std::move(job);
  mailbox->put(std::move(out));
  // The next line sent ahead to this loop takes the place at once.
  --loop.running;
  if (!loop.waiting.empty() && !loop.stopping) {
    LineJob next = std::move(loop.waiting.front());
    loop.waiting.pop_front();
    ++loop.running;
    net::spawn(loop.ctx, runLine(loop, std::move(next), mailbox, max_response_bytes), "batch line");
  }
}

}  // namespace

void runLineOn(LoopLines& loop, LineJob job, std::shared_ptr<Mailbox> mailbox,
               int64_t max_response_bytes, int max_running) {
  LoopLines* l = &loop;
  net::asio::post(loop.ctx, [l, job = std::move(job), mailbox = std::move(mailbox),
                             max_response_bytes, max_running]() mutable {
    l->mailbox = mailbox;
    l->max_response_bytes = max_response_bytes;
    if (l->running >= max_running || l->stopping) {
      l->waiting.push_back(std::move(job));
      if (l->stopping) abortLines(*l);  // posted after the stop: answered as not run
      return;
    }
    ++l->running;
    net::spawn(l->ctx, runLine(*l, std::move(job), std::move(mailbox), max_response_bytes),
               "batch line");
  });
}

void recallLines(LoopLines& loop, const std::string& batch_id) {
  auto kept = loop.waiting.begin();
  for (auto it = loop.waiting.begin(); it != loop.waiting.end(); ++it) {
    if (it->batch_id != batch_id) {
      if (kept != it) *kept = std::move(*it);
      ++kept;
      continue;
    }
    LineOutcome out;
    out.aborted = true;
    out.job = std::move(*it);
    if (loop.mailbox) loop.mailbox->put(std::move(out));
  }
  loop.waiting.erase(kept, loop.waiting.end());
}

void abortLines(LoopLines& loop) {
  loop.stopping = true;
  // Lines sent ahead that never started: not run (they run again after a restart).
  while (!loop.waiting.empty()) {
    LineOutcome out;
    out.aborted = true;
    out.job = std::move(loop.waiting.front());
    loop.waiting.pop_front();
    if (loop.mailbox) loop.mailbox->put(std::move(out));
  }
  // abort() may resume nothing synchronously, but copy first: a callback may end a line.
  const std::vector<CaptureWriter*> lines = loop.in_flight;
  for (CaptureWriter* w : lines) {
    if (std::find(loop.in_flight.begin(), loop.in_flight.end(), w) != loop.in_flight.end())
      w->abort();
  }
}

// ---------------- the executor ----------------

namespace {

constexpr size_t kSlots = 4;                // chunks held at once
constexpr int64_t kAheadPerLoop = 4;        // lines sent ahead to wait on each data loop, at least
constexpr int64_t kRecordEveryMs = 50;      // answers are written at least this often
constexpr size_t kRecordBatch = 256;        // or when this many wait
constexpr int64_t kRecordBytes = 64 << 20;  // or this many bytes of answers
constexpr int64_t kFinalizeBytes = 64 << 20;  // answers read per query when writing the output
constexpr int64_t kBackOffMs = 60'000;        // a chunk whose input cannot be read waits this long
constexpr int64_t kFinalizePage = 1000;       // results read per query when writing the output
constexpr int64_t kMaxBackoffMs = 30'000;
constexpr size_t kMaxErrors = 100;  // validation errors kept per batch

// A point id as Qdrant takes it: an unsigned 64-bit integer or a UUID (8-4-4-4-12 hex digits).
bool isUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

// A line's point id when it gives none: its custom_id, when that is a decimal unsigned 64-bit
// integer or a UUID; as JSON text into `json`.
bool pointIdFromCustomId(std::string_view id, std::string& json) {
  if (isUuid(id)) {
    json.clear();
    net::appendJsonString(json, id);
    return true;
  }
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), v);
  if (id.empty() || ec != std::errc() || end != id.data() + id.size()) return false;
  json = std::to_string(v);
  return true;
}

// Why a line of a batch into a vector collection cannot be delivered ("" = it can), and the
// parameter at fault.
std::string vectorLineProblem(const Json& line, const Json& body, const char*& param) {
  const auto in = body.find("input");
  const bool one_input =
      in != body.end() &&
      ((in->is_string() && !in->get_ref<const std::string&>().empty()) ||
       (in->is_array() && in->size() == 1 && ((*in)[0].is_string() || (*in)[0].is_array())) ||
       (in->is_array() && !in->empty() &&
        std::all_of(in->begin(), in->end(), [](const Json& t) { return t.is_number_integer(); })));
  if (!one_input) {
    param = "body.input";
    return "With vector_collection, each line embeds one input: 'input' must be a string, a list "
           "of one string, or one list of token ids.";
  }
  if (const auto e = body.find("encoding_format");
      e != body.end() && !(e->is_string() && e->get_ref<const std::string&>() == "float")) {
    param = "body.encoding_format";
    return "With vector_collection, 'encoding_format' must be 'float' (or absent).";
  }
  std::string id;
  if (const auto p = line.find("point_id"); p != line.end()) {
    if (!p->is_number_unsigned() && !(p->is_string() && isUuid(p->get_ref<const std::string&>()))) {
      param = "point_id";
      return "'point_id' must be an unsigned integer or a UUID.";
    }
  } else if (!pointIdFromCustomId(line["custom_id"].get_ref<const std::string&>(), id)) {
    param = "point_id";
    return "With vector_collection, a line needs a 'point_id' (an unsigned integer or a UUID), or "
           "a custom_id that is one.";
  }
  if (const auto p = line.find("payload"); p != line.end() && !p->is_null() && !p->is_object()) {
    param = "payload";
    return "'payload' must be an object.";
  }
  return {};
}

std::string randomOwner() { return "runner-" + newRequestId().substr(10, 16); }

// The output file ids of a batch: made from its id, so a finalizer that takes over writes the same.
std::string outputFileId(const std::string& batch_id, const char* kind) {
  const std::string hex = batch_id.size() > 6 ? batch_id.substr(6) : batch_id;
  return "file-" + hex + "-" + kind;
}

Json errorEntry(const char* code, std::string message, const Json& param, int64_t line) {
  return Json{{"code", code},
              {"message", std::move(message)},
              {"param", param},
              {"line", line > 0 ? Json(line) : Json(nullptr)}};
}

// What is wrong with a validated file's line (an entry of the batch's `errors`), or null: every
// check but the custom_id's uniqueness.
Json lineError(const Json& j, const BatchRow& b, int64_t line_no) {
  for (const char* key : {"custom_id", "method", "url", "body"}) {
    if (!j.contains(key)) {
      return errorEntry("missing_required_parameter",
                        "Missing required parameter: '" + std::string(key) + "'.", key, line_no);
    }
  }
  if (!j["custom_id"].is_string() || j["custom_id"].get_ref<const std::string&>().empty() ||
      j["custom_id"].get_ref<const std::string&>().size() > 512) {
    return errorEntry("invalid_request", "'custom_id' must be a non-empty string.", "custom_id",
                      line_no);
  }
  if (!j["method"].is_string() || j["method"].get_ref<const std::string&>() != "POST")
    return errorEntry("invalid_request", "Only the POST method is supported.", "method", line_no);
  if (!j["url"].is_string() || j["url"].get_ref<const std::string&>() != b.endpoint) {
    return errorEntry("invalid_url",
                      "The URL provided for this request does not match the batch endpoint.", "url",
                      line_no);
  }
  const Json& body = j["body"];
  if (!body.is_object())
    return errorEntry("invalid_request", "'body' must be an object.", "body", line_no);
  if (const auto st = body.find("stream");
      st != body.end() && st->is_boolean() && st->get<bool>()) {
    return errorEntry("streaming_unsupported", "Streaming is not supported in the Batch API.",
                      "body.stream", line_no);
  }
  if (const auto m = body.find("model"); m == body.end() || !m->is_string())
    return errorEntry("invalid_request", "Model parameter is required.", "body.model", line_no);
  if (!b.vector_collection.empty()) {
    const char* param = nullptr;
    const std::string why = vectorLineProblem(j, body, param);
    if (!why.empty()) return errorEntry("invalid_request", why, param, line_no);
  }
  return nullptr;
}

Json duplicateIdError(int64_t line_no) {
  return errorEntry("duplicate_custom_id",
                    "The custom_id for this request is a duplicate of another request. The "
                    "custom_id parameter must be unique for each request in a batch.",
                    "custom_id", line_no);
}

// A custom_id's 64-bit hash (FNV-1a, then mixed).
uint64_t idHash(std::string_view id) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : id) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return mix64(h);
}

// The custom_ids validation has seen, in a Bloom filter whose size follows the file's (at most
// 1 MiB, however many lines): an id whose bits were all set already was seen before or is a false
// positive; the caller tells them apart by the ids themselves.
class IdFilter {
 public:
  explicit IdFilter(int64_t file_bytes) {
    // About 8 bits a line of 64 bytes or more: at most 2^23 bits (80 a line at 100,000 lines).
    size_t bits = size_t{1} << 15;
    while (bits < (size_t{1} << 23) && static_cast<int64_t>(bits) < file_bytes) bits <<= 1;
    words_.assign(bits / 64, 0);
    mask_ = bits - 1;
  }
  // False when every bit of `h` was set already.
  bool insert(uint64_t h) {
    bool fresh = false;
    const uint64_t step = (h >> 32 | h << 32) | 1;  // double hashing: h + i * step
    for (uint64_t i = 0; i < kProbes; ++i) {
      const uint64_t bit = (h + i * step) & mask_;
      uint64_t& word = words_[bit >> 6];
      const uint64_t m = uint64_t{1} << (bit & 63);
      if ((word & m) == 0) {
        fresh = true;
        word |= m;
      }
    }
    return fresh;
  }

 private:
  static constexpr uint64_t kProbes = 6;
  std::vector<uint64_t> words_;
  uint64_t mask_ = 0;
};

}  // namespace

struct Runner::Impl {
  Impl(Shared& s, std::function<LoopLines*(size_t)> l, size_t n)
      : sh(s),
        loop(std::move(l)),
        loops(n),
        owner(randomOwner()),
        mailbox(std::make_shared<Mailbox>()),
        loop_out(n, 0) {}

  struct Slot {
    bool active = false;
    Chunk chunk;
    BatchRow batch;
    std::unique_ptr<FileDir::Reader> file;
    std::unique_ptr<LineReader> lines;
    int64_t next_line = 0;  // the physical line lines->next() gives next
    std::vector<int64_t> recorded;
    size_t recorded_at = 0;
    bool exhausted = false;   // every line read
    bool dropped = false;     // the lease was lost or the batch is ending: no more sends
    bool lost = false;        // the lease was lost (another runner has the chunk): no renewals
    int64_t outstanding = 0;  // sent or waiting for a retry, not yet recorded
  };

  Shared& sh;
  std::function<LoopLines*(size_t)> loop;
  size_t loops;
  const std::string owner;
  std::shared_ptr<Mailbox> mailbox;
  std::unique_ptr<BatchStore> store;
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::array<Slot, kSlots> slots;
  std::vector<LineJob> retries;
  std::unordered_map<std::string, std::vector<LineResult>> unrecorded;  // by batch
  std::vector<size_t> unrecorded_slots;  // the slot of each unrecorded result, in order
  size_t unrecorded_count = 0;
  int64_t in_flight = 0;          // lines on the loops
  std::vector<int64_t> loop_out;  // lines sent to each loop, not answered yet
  // batch.concurrency over the loops (the first ones take the remainder): at most this many run
  // on loop i at once.
  int share(size_t loop_index) const;
  // Lines sent ahead to wait on loop i: as many as run there (at least kAheadPerLoop), so the
  // loop has work while this thread is busy elsewhere (a commit's fsync, a claim).
  int64_t ahead(size_t loop_index) const {
    return share(loop_index) == 0 ? 0 : std::max<int64_t>(kAheadPerLoop, share(loop_index));
  }
  // Lines that may be out: batch.concurrency, plus those waiting ahead on the loops.
  int64_t maxOut() const {
    int64_t n = 0;
    for (size_t i = 0; i < loops; ++i) n += share(i) + ahead(i);
    return n;
  }
  // The lines of `batch_id` still waiting on the loops (sent ahead, not started) come back as
  // aborted: a batch that stops (cancelled, expired, its chunk taken over) runs no more of them.
  void recall(const std::string& batch_id);
  int64_t last_housekeeping = 0, last_renew = 0, last_record = 0, last_claim_miss = 0;
  spdlog::logger* log = componentLogger("batch");

  void logError(const char* what, const Status& s) {
    INFERA_LOG(log, warn, "batch executor: {}: {}", what, s.message());
  }

  void run();
  void housekeeping(int64_t now);
  void sweepFiles(int64_t now);
  // Validation's second look at the custom_ids the filter had seen (`suspects`: their hashes),
  // through line `last_line`: each real duplicate fails. False when the validation was taken over.
  bool duplicatesPass(const BatchRow& b, const std::string& by, std::vector<uint64_t> suspects,
                      int64_t last_line, const std::function<void(Json)>& fail);
  bool validate(int64_t now);
  bool finalize(int64_t now);
  void renewLeases(int64_t now);
  bool claim(int64_t now);
  bool sendDueRetry(int64_t now);
  // Sends lines until `concurrency` are in flight (or nothing is left to send now).
  void fill(int64_t now);
  bool sendNewLine();
  void send(LineJob job);
  // Keeps the pipeline's bookkeeping going during long work on this thread (validation,
  // finalization): leases renewed, answers taken in and recorded.
  void tick();
  int64_t unrecorded_bytes = 0;
  simdjson::dom::parser response_parser;   // the answers (usage, and whether they are JSON)
  simdjson::ondemand::parser line_parser;  // the input lines (custom_id and body)
  // The fields of a validated line a run needs: its custom_id and body (as JSON text) and, when
  // `job.collection` is set, its point id and payload.
  bool lineFields(const std::string& text, LineJob& job);
  void handle(LineOutcome&& o, int64_t now);
  void addResult(size_t slot, const std::string& batch_id, LineResult r);
  void recordResults();
  void closeSlots();
  void drain();
};

void Runner::Impl::housekeeping(int64_t now) {
  if (auto e = store->expire(now); !e.ok()) logError("expiring batches", e.status());
  sweepFiles(now);
  // Batches that stop early: their slots stop sending.
  for (Slot& s : slots) {
    if (!s.active || s.dropped) continue;
    auto ending = store->ending(s.chunk.batch_id);
    if (!ending.ok()) {
      logError("reading a batch's state", ending.status());
      continue;
    }
    if (!ending->empty()) {
      s.dropped = true;
      recall(s.chunk.batch_id);
    }
  }
  (void)validate(sh.clock.unixMillis());
  for (int i = 0; i < 4 && finalize(sh.clock.unixMillis()); ++i) {
  }
}

bool Runner::Impl::duplicatesPass(const BatchRow& b, const std::string& by,
                                  std::vector<uint64_t> suspects, int64_t last_line,
                                  const std::function<void(Json)>& fail) {
  // The lines whose custom_id hash is a suspect's are read again, and only their ids are kept: a
  // duplicate is an id seen before; a false positive of the filter (or a hash collision) is not.
  std::sort(suspects.begin(), suspects.end());
  suspects.erase(std::unique(suspects.begin(), suspects.end()), suspects.end());
  auto reader = sh.files.open(b.input_file_id);
  if (!reader.ok()) {
    fail(errorEntry("invalid_request", "The input file could not be read.", "file_id", 0));
    return true;
  }
  LineReader lines(**reader, 0, static_cast<size_t>(sh.config.max_line_bytes));
  std::unordered_set<std::string> seen;
  std::string text;
  for (int64_t line_no = 1; line_no <= last_line; ++line_no) {
    if (line_no % 1000 == 999) {
      tick();
      auto kept = store->renewBatch(b.id, by, sh.clock.unixMillis() + sh.config.lease_ms);
      if (kept.ok() && !*kept) return false;
    }
    auto more = lines.next(text);
    if (!more.ok()) continue;  // the first pass said what was wrong with it
    if (!*more) break;
    auto j = readJson(text);
    if (!j.ok() || !j->is_object() || !lineError(*j, b, line_no).is_null()) continue;
    const std::string& id = (*j)["custom_id"].get_ref<const std::string&>();
    if (!std::binary_search(suspects.begin(), suspects.end(), idHash(id))) continue;
    if (!seen.insert(id).second) fail(duplicateIdError(line_no));
  }
  return true;
}

void Runner::Impl::sweepFiles(int64_t now) {
  // Files past their expiry: the row, then the bytes (as DELETE /v1/files does). The input of a
  // batch that has not ended stays until the batch ends. Another replica may sweep the same file:
  // whichever deletes the row removes the bytes.
  auto expired = store->expiredFiles(now, 100);
  if (!expired.ok()) {
    logError("listing expired files", expired.status());
    return;
  }
  for (const std::string& id : *expired) {
    const Status d = store->deleteFile(id);
    if (d.code() == StatusCode::kFailedPrecondition || d.code() == StatusCode::kNotFound) continue;
    if (!d.isOk()) {
      logError("deleting an expired file", d);
      continue;
    }
    if (const Status r = sh.files.remove(id); !r.isOk()) logError("removing an expired file", r);
    sh.metrics.files_expired->inc(0);
    INFERA_LOG(log, info, "file {}: expired and deleted", id);
  }
}

bool Runner::Impl::validate(int64_t now) {
  auto claimed = store->claimValidation(owner, now, sh.config.lease_ms);
  if (!claimed.ok()) {
    logError("claiming a validation", claimed.status());
    return false;
  }
  if (!*claimed) return false;
  const BatchRow& b = **claimed;
  Json errors = Json::array();
  int64_t error_count = 0;
  auto fail = [&](Json e) {
    ++error_count;
    if (errors.size() < kMaxErrors) errors.push_back(std::move(e));
  };
  auto file = store->file(b.input_file_id);
  if (!file.ok()) {
    logError("reading an input file's row", file.status());
    return false;  // the lease runs out and it is tried again
  }
  if (!*file || (!(*file)->team.empty() && (*file)->team != b.team) ||
      ((*file)->expires_ms > 0 && (*file)->expires_ms <= now)) {
    fail(errorEntry("invalid_request",
                    "Cannot find file " + b.input_file_id + ", or it is not accessible to you.",
                    "file_id", 0));
  } else if ((*file)->purpose != "batch") {
    fail(errorEntry("invalid_request",
                    "File " + b.input_file_id + " has purpose '" + (*file)->purpose +
                        "'; a batch's input file must have purpose 'batch'.",
                    "file_id", 0));
  }
  std::vector<Chunk> chunks;
  int64_t total = 0;
  int64_t enqueued = 0;  // the lines' estimated prompt tokens
  if (error_count == 0) {
    auto reader = sh.files.open(b.input_file_id);
    if (!reader.ok()) {
      logError("opening an input file", reader.status());
      fail(errorEntry("invalid_request", "The input file could not be read.", "file_id", 0));
    } else {
      LineReader lines(**reader, 0, static_cast<size_t>(sh.config.max_line_bytes));
      IdFilter ids((*file)->bytes);
      std::vector<uint64_t> suspects;  // hashes of the ids the filter had seen
      std::string text;
      int64_t line_no = 0, chunk_first = 0, chunk_offset = 0, in_chunk = 0;
      bool taken_over = false;
      for (;;) {
        if (line_no % 1000 == 999) {
          // Long files: the executor's other work goes on, and the validation stays ours.
          tick();
          auto kept = store->renewBatch(b.id, owner, sh.clock.unixMillis() + sh.config.lease_ms);
          if (kept.ok() && !*kept) {
            taken_over = true;
            break;
          }
        }
        auto more = lines.next(text);
        const int64_t offset = lines.offset();  // where the line just read starts
        ++line_no;
        if (!more.ok()) {
          if (more.status().code() != StatusCode::kInvalidArgument) {
            fail(errorEntry("invalid_request", "The input file could not be read.", "file_id", 0));
            break;
          }
          fail(errorEntry("invalid_json_line",
                          "This line is longer than " + std::to_string(sh.config.max_line_bytes) +
                              " bytes (batch.max_line_bytes).",
                          nullptr, line_no));
          continue;
        }
        if (!*more) break;
        if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line
        if (total >= sh.config.max_lines) {
          fail(errorEntry("too_many_tasks",
                          "The input file has more than " + std::to_string(sh.config.max_lines) +
                              " requests (batch.max_lines).",
                          nullptr, line_no));
          break;
        }
        auto parsed = readJson(text);
        if (!parsed.ok() || !parsed->is_object()) {
          fail(errorEntry("invalid_json_line", "This line is not parseable as valid JSON.", nullptr,
                          line_no));
          continue;
        }
        const Json& j = *parsed;
        if (Json e = lineError(j, b, line_no); !e.is_null()) {
          fail(std::move(e));
          continue;
        }
        // Seen before, or the filter's false positive: told apart after the pass.
        if (const uint64_t h = idHash(j["custom_id"].get_ref<const std::string&>()); !ids.insert(h))
          suspects.push_back(h);
        if (in_chunk == 0) {
          chunk_first = line_no;
          chunk_offset = offset;
        }
        ++total;
        enqueued += static_cast<int64_t>(text.size() / 4) + 1;
        if (++in_chunk == sh.config.chunk_lines) {
          chunks.push_back(Chunk{b.id, static_cast<int64_t>(chunks.size()), chunk_first,
                                 line_no - chunk_first + 1, chunk_offset});
          in_chunk = 0;
        }
      }
      if (in_chunk > 0) {
        chunks.push_back(Chunk{b.id, static_cast<int64_t>(chunks.size()), chunk_first,
                               line_no - chunk_first + 1, chunk_offset});
      }
      if (!taken_over && !suspects.empty()) {
        const int64_t last_line = line_no;
        taken_over = !duplicatesPass(b, owner, std::move(suspects), last_line, fail);
        // Its errors came after the first pass's: the list is in line order again.
        auto at = [](const Json& e) {
          return e["line"].is_number() ? e["line"].get<int64_t>() : 0;
        };
        std::stable_sort(errors.begin(), errors.end(),
                         [&](const Json& x, const Json& y) { return at(x) < at(y); });
      }
      if (taken_over) {
        INFERA_LOG(log, warn, "batch {}: the validation was taken over", b.id);
        return true;
      }
      if (total == 0 && error_count == 0)
        fail(errorEntry("empty_file", "The input file has no requests.", nullptr, 0));
    }
  }
  const int64_t done_at = sh.clock.unixMillis();
  Status s = error_count > 0 ? store->failBatch(b.id, owner, dumpJson(errors), done_at)
                             : store->startBatch(b.id, owner, chunks, total, done_at, enqueued,
                                                 sh.config.max_enqueued_tokens);
  if (s.code() == StatusCode::kResourceExhausted) {
    // Over the team's enqueued token limit: the batch fails as OpenAI's does.
    fail(errorEntry("token_limit_exceeded", s.message(), nullptr, 0));
    s = store->failBatch(b.id, owner, dumpJson(errors), done_at);
  }
  if (!s.isOk()) logError("ending a validation", s);
  (error_count > 0 ? sh.metrics.batches_failed : sh.metrics.batches_validated)->inc(0);
  INFERA_LOG(log, info, "batch {}: {} ({} requests, {} chunks, {} errors)", b.id,
             error_count > 0 ? "failed validation" : "validated", total, chunks.size(),
             error_count);
  return true;
}

bool Runner::Impl::finalize(int64_t now) {
  auto claimed = store->claimFinalize(owner, now, sh.config.lease_ms);
  if (!claimed.ok()) {
    logError("claiming a finalization", claimed.status());
    return false;
  }
  if (!*claimed) return false;
  const BatchRow& b = **claimed;
  const std::string out_id = outputFileId(b.id, "output");
  const std::string err_id = outputFileId(b.id, "errors");
  auto out = sh.files.create(out_id);
  auto err = sh.files.create(err_id);
  if (!out.ok() || !err.ok()) {
    logError("creating output files", out.ok() ? err.status() : out.status());
    return false;
  }
  const int64_t no_limit = INT64_MAX;
  int64_t out_lines = 0, err_lines = 0, unrun = 0;
  Status failed;
  auto write = [&](FileDir::Writer& w, const std::string& line) {
    if (!failed.isOk()) return;
    failed = sh.files.append(w, line, no_limit);
    if (failed.isOk()) failed = sh.files.append(w, "\n", no_limit);
  };
  // Lines a batch that stopped early never ran: each gets an error line (read from the input,
  // merged with the answers in line order).
  std::unique_ptr<FileDir::Reader> input;
  std::unique_ptr<LineReader> lines;
  int64_t input_line = 0;
  const bool list_unrun = !b.ending.empty() && b.total > 0;
  if (list_unrun) {
    auto r = sh.files.open(b.input_file_id);
    if (r.ok()) {
      input = std::move(*r);
      lines =
          std::make_unique<LineReader>(*input, 0, static_cast<size_t>(sh.config.max_line_bytes));
    } else if (r.status().code() != StatusCode::kNotFound) {
      logError("opening an input file to list the lines not run", r.status());
      return false;  // tried again when the lease runs out
    } else {
      // The input is gone: the lines not run are counted, not listed.
      INFERA_LOG(log, warn, "batch {}: the input file is gone; its lines not run are not listed",
                 b.id);
    }
  }
  const char* unrun_code = b.ending == "expired" ? "batch_expired" : "batch_cancelled";
  const char* unrun_message = b.ending == "expired"
                                  ? "This request could not be executed before the completion "
                                    "window expired."
                                  : "This request was not executed because the batch was "
                                    "cancelled.";
  std::string text;
  // Input lines before `upto` (exclusive) that have no answer become unrun error lines.
  auto listUnrunBefore = [&](int64_t upto) {
    while (lines && failed.isOk() && input_line + 1 < upto) {
      auto more = lines->next(text);
      ++input_line;
      if (!more.ok()) {
        if (more.status().code() != StatusCode::kInvalidArgument) failed = more.status();
        continue;  // an overlong line (validation refused such files) or a read error
      }
      if (!*more) {
        lines.reset();
        break;
      }
      auto j = readJson(text);
      if (!j.ok() || !j->is_object() || !j->contains("custom_id")) continue;
      ++unrun;
      ++err_lines;
      write(**err, dumpJson(Json{{"id", newRequestId()},
                                 {"custom_id", (*j)["custom_id"]},
                                 {"response", nullptr},
                                 {"error", {{"code", unrun_code}, {"message", unrun_message}}}}));
    }
  };
  int64_t after = 0;
  int64_t listed = 0;
  for (;;) {
    tick();
    auto kept = store->renewBatch(b.id, owner, sh.clock.unixMillis() + sh.config.lease_ms);
    if (kept.ok() && !*kept) {
      INFERA_LOG(log, warn, "batch {}: the finalization was taken over", b.id);
      return true;
    }
    auto page = store->results(b.id, after, kFinalizePage, kFinalizeBytes);
    if (!page.ok()) {
      failed = page.status();
      break;
    }
    listed += static_cast<int64_t>(page->size());
    for (const LineResult& r : *page) {
      listUnrunBefore(r.line);
      if (lines && input_line < r.line) {
        // Skip the answered line itself in the input.
        (void)lines->next(text);
        ++input_line;
      }
      if (r.ok) {
        ++out_lines;
        write(**out, r.line_json);
      } else {
        ++err_lines;
        write(**err, r.line_json);
      }
      after = r.line;
    }
    if (page->empty()) break;
  }
  listUnrunBefore(INT64_MAX);
  if (list_unrun && !input) unrun = std::max<int64_t>(0, b.total - listed);
  if (!failed.isOk()) {
    logError("writing output files", failed);
    return false;
  }
  auto commit = [&](FileDir::Writer& w, const std::string& id, const char* suffix,
                    int64_t n) -> Result<std::string> {
    if (n == 0) return std::string();
    INFERA_ASSIGN_OR_RETURN(const auto cm, sh.files.commit(w));
    FileRow f;
    f.id = id;
    f.team = b.team;
    f.key_id = b.key_id;
    f.purpose = "batch_output";
    f.filename = b.id + suffix;
    f.bytes = cm.size;
    f.sha256 = cm.sha256;
    f.created_ms = sh.clock.unixMillis();
    f.expires_ms = b.output_expires_s > 0 ? f.created_ms + b.output_expires_s * 1000 : 0;
    INFERA_RETURN_IF_ERROR(store->upsertFile(f));
    return id;
  };
  auto out_file = commit(**out, out_id, "_output.jsonl", out_lines);
  auto err_file = commit(**err, err_id, "_error.jsonl", err_lines);
  if (!out_file.ok() || !err_file.ok()) {
    logError("committing output files", out_file.ok() ? err_file.status() : out_file.status());
    return false;
  }
  const std::string final_status = b.ending.empty() ? "completed" : b.ending;
  const Status s = store->finishBatch(b.id, owner, final_status, *out_file, *err_file, unrun,
                                      sh.clock.unixMillis());
  if (!s.isOk()) {
    logError("finishing a batch", s);
    return false;
  }
  // The output files hold the answers now.
  if (const Status d = store->dropResults(b.id); !d.isOk())
    logError("dropping recorded answers", d);
  sh.metrics.batches_finished->inc(0);
  INFERA_LOG(log, info, "batch {}: {} ({} answered, {} failed, {} not run)", b.id, final_status,
             out_lines, err_lines - unrun, unrun);
  return true;
}

void Runner::Impl::renewLeases(int64_t now) {
  for (Slot& s : slots) {
    // A slot stopped because its batch is ending keeps its lease while its lines are out, so the
    // batch is finalized only once their answers are recorded.
    if (!s.active || s.lost) continue;
    auto kept = store->renewChunk(s.chunk, owner, now + sh.config.lease_ms);
    if (!kept.ok()) {
      logError("renewing a lease", kept.status());
    } else if (!*kept) {
      INFERA_LOG(log, warn, "batch {} chunk {}: the lease was taken over; its lines stop here",
                 s.chunk.batch_id, s.chunk.chunk);
      s.dropped = s.lost = true;
      recall(s.chunk.batch_id);
    }
  }
}

void Runner::Impl::tick() {
  const int64_t now = sh.clock.unixMillis();
  if (now - last_renew >= sh.config.lease_ms / 3) {
    last_renew = now;
    renewLeases(now);
  }
  std::atomic<bool> never{false};
  for (LineOutcome& o : mailbox->take(0, never)) handle(std::move(o), now);
  if (unrecorded_count > 0 && now - last_record >= kRecordEveryMs) {
    last_record = now;
    recordResults();
  }
}

bool Runner::Impl::claim(int64_t now) {
  auto free = std::find_if(slots.begin(), slots.end(), [](const Slot& s) { return !s.active; });
  if (free == slots.end()) return false;
  auto c = store->claimChunk(owner, now, sh.config.lease_ms);
  if (!c.ok()) {
    logError("claiming a chunk", c.status());
    return false;
  }
  if (!*c) return false;
  Slot s;
  s.chunk = **c;
  auto b = store->batch(s.chunk.batch_id);
  auto f = sh.files.open(b.ok() && *b ? (*b)->input_file_id : std::string());
  auto rec = store->recordedLines(s.chunk.batch_id, s.chunk.first_line,
                                  s.chunk.first_line + s.chunk.lines - 1);
  if (!b.ok() || !*b || !f.ok() || !rec.ok()) {
    logError("opening a chunk", !b.ok()    ? b.status()
                                : !f.ok()  ? f.status()
                                : rec.ok() ? Status::notFound("batch")
                                           : rec.status());
    // Claimable again only after a while, so that the chunks of other batches go first (and a
    // file that is back, on a volume that was not mounted, is found then).
    (void)store->backOffChunk(s.chunk, owner, now + kBackOffMs);
    return false;
  }
  if (!(*b)->vector_collection.empty() && (loop(0) == nullptr || !loop(0)->vector_upsert)) {
    // A batch into a collection needs the vector index, which this process does not serve: a
    // replica that does takes the chunk (its lines are not failed here).
    INFERA_LOG(log, warn,
               "batch {}: its vectors go to collection '{}', and this process has no vector index "
               "(vectors:): its chunks are left to a replica that has one",
               s.chunk.batch_id, (*b)->vector_collection);
    (void)store->backOffChunk(s.chunk, owner, now + kBackOffMs);
    return false;
  }
  s.batch = std::move(**b);
  s.file = std::move(*f);
  s.lines = std::make_unique<LineReader>(*s.file, s.chunk.offset,
                                         static_cast<size_t>(sh.config.max_line_bytes));
  s.next_line = s.chunk.first_line;
  s.recorded = std::move(*rec);
  s.active = true;
  *free = std::move(s);
  return true;
}

bool Runner::Impl::lineFields(const std::string& text, LineJob& job) {
  const simdjson::padded_string padded(text);
  simdjson::ondemand::document doc;
  if (line_parser.iterate(padded).get(doc) != simdjson::SUCCESS) return false;
  simdjson::ondemand::object obj;
  if (doc.get_object().get(obj) != simdjson::SUCCESS) return false;
  bool have_id = false, have_body = false;
  const bool vectors = !job.collection.empty();
  auto trimmed = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return std::string(s);
  };
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    if (key == "custom_id") {
      std::string_view v;
      if (field.value().get_string().get(v) != simdjson::SUCCESS) return false;
      job.custom_id = std::string(v);
      have_id = true;
    } else if (key == "body") {
      simdjson::ondemand::object b;  // validation checked that it is an object
      std::string_view raw;
      if (field.value().get_object().get(b) != simdjson::SUCCESS ||
          b.raw_json().get(raw) != simdjson::SUCCESS)
        return false;
      job.body = std::string(raw);
      have_body = true;
    } else if (vectors && key == "point_id") {
      std::string_view raw;  // validation checked: an unsigned integer or a UUID string
      if (field.value().raw_json_token().get(raw) != simdjson::SUCCESS) return false;
      job.point_id = trimmed(raw);
    } else if (vectors && key == "payload") {
      simdjson::ondemand::value v;
      if (field.value().get(v) != simdjson::SUCCESS) return false;
      bool null = false;
      if (v.is_null().get(null) != simdjson::SUCCESS) return false;
      if (null) continue;
      simdjson::ondemand::object p;  // validation checked: an object
      std::string_view raw;
      if (v.get_object().get(p) != simdjson::SUCCESS || p.raw_json().get(raw) != simdjson::SUCCESS)
        return false;
      job.payload = trimmed(raw);
    }
  }
  if (vectors && job.point_id.empty() && !pointIdFromCustomId(job.custom_id, job.point_id))
    return false;
  return have_id && have_body;
}

void Runner::Impl::recall(const std::string& batch_id) {
  for (size_t i = 0; i < loops; ++i) {
    LoopLines* l = loop(i);
    if (l != nullptr && loop_out[i] > 0)
      net::asio::post(l->ctx, [l, batch_id] { recallLines(*l, batch_id); });
  }
}

int Runner::Impl::share(size_t loop_index) const {
  const auto c = static_cast<int>(sh.config.concurrency);
  const int n = static_cast<int>(loops);
  return c / n + (static_cast<int>(loop_index) < c % n ? 1 : 0);
}

void Runner::Impl::send(LineJob job) {
  // To the loop with the most room: its share of batch.concurrency plus the lines sent ahead,
  // less what it holds.
  size_t best = 0;
  int64_t best_room = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < loops; ++i) {
    if (share(i) == 0) continue;
    const int64_t room = share(i) + ahead(i) - loop_out[i];
    if (room > best_room) {
      best_room = room;
      best = i;
    }
  }
  ++in_flight;
  ++loop_out[best];
  job.loop = best;
  runLineOn(*loop(best), std::move(job), mailbox, sh.config.max_response_bytes, share(best));
}

bool Runner::Impl::sendDueRetry(int64_t now) {
  for (size_t i = 0; i < retries.size(); ++i) {
    if (retries[i].not_before_ms > now && !slots[retries[i].slot].dropped) continue;
    LineJob job = std::move(retries[i]);
    retries.erase(retries.begin() + static_cast<std::ptrdiff_t>(i));
    if (slots[job.slot].dropped) {
      --slots[job.slot].outstanding;  // its batch is ending (or the chunk was taken over)
      return true;
    }
    sh.metrics.lines_retried->inc(0);
    send(std::move(job));
    return true;
  }
  return false;
}

bool Runner::Impl::sendNewLine() {
  for (size_t si = 0; si < slots.size(); ++si) {
    Slot& s = slots[si];
    if (!s.active || s.dropped || s.exhausted) continue;
    std::string text;
    while (s.next_line < s.chunk.first_line + s.chunk.lines) {
      const int64_t line = s.next_line++;
      auto more = s.lines->next(text);
      if (more.ok() && !*more) break;
      while (s.recorded_at < s.recorded.size() && s.recorded[s.recorded_at] < line) ++s.recorded_at;
      if (s.recorded_at < s.recorded.size() && s.recorded[s.recorded_at] == line) continue;
      if (more.ok() && text.find_first_not_of(" \t\r") == std::string::npos) continue;
      // The line was read whole at validation (readJson: no duplicate key, valid UTF-8); here only
      // its custom_id and the bytes of its body are taken, and the gateway reads those bytes.
      LineJob job;
      job.collection = s.batch.vector_collection;
      const bool parsed = more.ok() && lineFields(text, job);
      // The parser keeps the room of the longest line it read (≈ 6× its size): not past 1 MiB.
      if (line_parser.capacity() > (1u << 20)) line_parser = simdjson::ondemand::parser{};
      if (!parsed) {
        // Validated before: the file changed underneath. The line fails; the rest go on.
        LineResult r;
        r.line = line;
        r.line_json = dumpJson(Json{{"id", newRequestId()},
                                    {"custom_id", nullptr},
                                    {"response", nullptr},
                                    {"error",
                                     {{"code", "invalid_json_line"},
                                      {"message", "This line is not parseable as valid JSON."}}}});
        ++s.outstanding;
        addResult(si, s.chunk.batch_id, std::move(r));
        continue;
      }
      job.batch_id = s.chunk.batch_id;
      job.line = line;
      job.endpoint = s.batch.endpoint;
      job.key_id = s.batch.key_id;
      job.user = s.batch.user;
      job.slot = si;
      ++s.outstanding;
      send(std::move(job));
      return true;
    }
    s.exhausted = true;
  }
  return false;
}

void Runner::Impl::handle(LineOutcome&& o, int64_t now) {
  --in_flight;
  --loop_out[o.job.loop];
  Slot& s = slots[o.job.slot];
  if (o.aborted) {
    sh.metrics.lines_aborted->inc(0);
    --s.outstanding;  // not recorded: it runs again after a restart
    return;
  }
  const bool may_retry = retryable(o.status) && !o.too_large && !o.final;
  if (may_retry && (stopping.load() || s.dropped)) {
    --s.outstanding;  // no retry now: it runs again after a restart (or by the lease's taker)
    return;
  }
  // A 429 that says when to come back (the gateway's own rate limits and budgets do) waits that
  // long and does not spend an attempt: the line runs when the key has room, within the window.
  const bool paced = o.status == 429 && o.retry_after_ms > 0;
  if (may_retry && (paced || o.job.attempt < sh.config.max_attempts)) {
    int64_t backoff = std::min<int64_t>(kMaxBackoffMs,
                                        sh.config.retry_base_ms << std::min(o.job.attempt - 1, 20));
    if (paced) backoff = std::max(backoff / 4, o.retry_after_ms);
    if (!paced) o.job.attempt += 1;
    o.job.not_before_ms = now + backoff;
    retries.push_back(std::move(o.job));
    return;
  }
  LineResult r;
  r.line = o.job.line;
  r.ok = o.status >= 200 && o.status < 300;
  // The output line, written directly: the answer's body goes in as the backend wrote it (keys in
  // its order), minified onto one line, once simdjson has read it as JSON (valid UTF-8 included);
  // an answer that is not JSON goes in as a string.
  std::string& out = r.line_json;
  out.reserve(o.body.size() + 256);
  out = "{\"id\":";
  net::appendJsonString(out, newRequestId());
  out += ",\"custom_id\":";
  net::appendJsonString(out, o.job.custom_id);
  if (o.status == 0) {
    out +=
        ",\"response\":null,\"error\":{\"code\":\"request_timeout\",\"message\":\"The request "
        "got no answer from the model's backends.\"}}";
  } else {
    out += ",\"response\":{\"status_code\":" + std::to_string(o.status) + ",\"request_id\":";
    net::appendJsonString(out, o.request_id);
    out += ",\"body\":";
    if (o.prompt_tokens >= 0) r.prompt_tokens = o.prompt_tokens;  // an embedding's, billed
    simdjson::dom::element doc;
    if (!o.body.empty() && response_parser.parse(o.body).get(doc) == simdjson::SUCCESS) {
      if (simdjson::dom::object usage; doc["usage"].get(usage) == simdjson::SUCCESS) {
        int64_t n = 0;
        if (usage["prompt_tokens"].get(n) == simdjson::SUCCESS) r.prompt_tokens = n;
        if (usage["completion_tokens"].get(n) == simdjson::SUCCESS) r.completion_tokens = n;
      }
      const size_t at = out.size();
      out.resize(at + o.body.size());
      size_t len = 0;
      if (simdjson::minify(o.body.data(), o.body.size(), out.data() + at, len) ==
          simdjson::SUCCESS) {
        out.resize(at + len);
      } else {
        out.resize(at);
        net::appendJsonString(out, o.body);
      }
    } else {
      net::appendJsonString(out, o.body);
    }
    out += "},\"error\":null}";
    // A DOM parser keeps the room of the largest answer it read (≈ 15× its size): not past 1 MiB.
    if (response_parser.capacity() > (1u << 20)) response_parser = simdjson::dom::parser{};
  }
  addResult(o.job.slot, o.job.batch_id, std::move(r));
}

void Runner::Impl::addResult(size_t slot, const std::string& batch_id, LineResult r) {
  unrecorded_bytes += static_cast<int64_t>(r.line_json.size());
  unrecorded[batch_id].push_back(std::move(r));
  unrecorded_slots.push_back(slot);
  ++unrecorded_count;
}

void Runner::Impl::recordResults() {
  if (unrecorded_count == 0) return;
  bool all_ok = true;
  for (auto& [batch_id, results] : unrecorded) {
    const Status s = store->record(batch_id, results);
    if (!s.isOk()) {
      // Not counted: the chunk is given back unfinished and its lines run again.
      logError("recording answers", s);
      all_ok = false;
      continue;
    }
    for (const LineResult& r : results)
      (r.ok ? sh.metrics.lines_ok : sh.metrics.lines_failed)->inc(0);
  }
  for (size_t slot : unrecorded_slots) {
    --slots[slot].outstanding;
    if (!all_ok) slots[slot].dropped = true;
  }
  unrecorded.clear();
  unrecorded_slots.clear();
  unrecorded_count = 0;
  unrecorded_bytes = 0;
}

void Runner::Impl::closeSlots() {
  for (Slot& s : slots) {
    if (!s.active || s.outstanding > 0 || !(s.exhausted || s.dropped)) continue;
    const bool done = s.exhausted && !s.dropped;
    if (const Status st = store->releaseChunk(s.chunk, owner, done); !st.isOk())
      logError("releasing a chunk", st);
    s = Slot{};
  }
}

void Runner::Impl::drain() {
  // Every line still in flight is aborted; its answer is not recorded (it runs again).
  for (size_t i = 0; i < loops; ++i) {
    LoopLines* l = loop(i);
    if (l != nullptr) net::asio::post(l->ctx, [l] { abortLines(*l); });
  }
  // Every line must be back before the routers go (a line suspended in the gateway's handler
  // holds its per-loop state); aborted lines end at once, the gateway's timeouts bound the rest.
  std::atomic<bool> never{false};
  auto next_note = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (in_flight > 0) {
    for (LineOutcome& o : mailbox->take(50, never)) handle(std::move(o), 0);
    if (in_flight > 0 && std::chrono::steady_clock::now() > next_note) {
      INFERA_LOG(log, warn, "batch executor: waiting for {} lines in flight to end", in_flight);
      next_note += std::chrono::seconds(10);
    }
  }
  recordResults();
  for (Slot& s : slots) {
    if (s.active) (void)store->releaseChunk(s.chunk, owner, false);
    s = Slot{};
  }
}

void Runner::Impl::fill(int64_t now) {
  if (stopping.load()) return;  // a stop sends nothing more: drain() aborts what is out
  // Fill the pipeline: retries that are due, lines from the slots held, then a new chunk.
  // Lines waiting for a retry count against new lines, never against their own resend.
  while (in_flight < maxOut()) {
    if (sendDueRetry(now)) continue;
    if (in_flight + static_cast<int64_t>(retries.size()) >= maxOut()) break;
    if (sendNewLine()) continue;
    // A new chunk: only into a free slot, and not again within poll_ms of finding none.
    if (std::none_of(slots.begin(), slots.end(), [](const Slot& x) { return !x.active; })) break;
    if (now - last_claim_miss < sh.config.poll_ms) break;
    if (!claim(sh.clock.unixMillis())) {
      last_claim_miss = now;
      break;
    }
  }
}

void Runner::Impl::run() {
  const int64_t poll = sh.config.poll_ms;
  while (!stopping.load()) {
    const int64_t now = sh.clock.unixMillis();
    if (now - last_housekeeping >= poll) {
      last_housekeeping = now;
      housekeeping(now);
    }
    if (now - last_renew >= sh.config.lease_ms / 3) {
      last_renew = now;
      renewLeases(now);
    }
    fill(now);
    const int64_t wait = retries.empty() ? poll : std::min<int64_t>(poll, 20);
    bool answered = false;
    for (LineOutcome& o : mailbox->take(in_flight > 0 ? wait : poll, stopping)) {
      handle(std::move(o), sh.clock.unixMillis());
      answered = true;
    }
    // The freed places are filled before the answers are written: a commit (and its fsync) must
    // not hold the pipeline empty.
    if (answered) fill(sh.clock.unixMillis());
    if (unrecorded_count >= kRecordBatch || unrecorded_bytes >= kRecordBytes ||
        (unrecorded_count > 0 && sh.clock.unixMillis() - last_record >= kRecordEveryMs) ||
        (unrecorded_count > 0 && in_flight == 0)) {
      last_record = sh.clock.unixMillis();
      recordResults();
    }
    closeSlots();
  }
  drain();
}

Runner::Runner(Shared& shared, std::function<LoopLines*(size_t)> loop, size_t loops)
    : impl_(std::make_unique<Impl>(shared, std::move(loop), loops)) {}

Runner::~Runner() { stop(); }

Status Runner::start() {
  INFERA_ASSIGN_OR_RETURN(impl_->store, BatchStore::open(impl_->sh.config.store));
  Impl* i = impl_.get();
  impl_->thread = std::thread([i] {
    try {
      i->run();
    } catch (const std::exception& e) {
      INFERA_LOG(i->log, critical, "batch executor stopped: {}", e.what());
    }
  });
  return Status::ok();
}

void Runner::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->stopping.store(true);
  impl_->mailbox->wake();
  impl_->thread.join();
}

}  // namespace infera::batch
