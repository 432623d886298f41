// The Files and Batches APIs (OpenAI's shapes, as the official SDKs call them).

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "access/access.h"
#include "batch/internal/multipart.h"
#include "batch/internal/service.h"
#include "core/json.h"
#include "core/log.h"
#include "core/text.h"
#include "core/utf8.h"
#include "net/server.h"

namespace infera::batch {

using Json = nlohmann::json;
using net::Task;

namespace {

constexpr size_t kWriteChunk = 1 << 20;
constexpr size_t kDownloadChunk = 256 * 1024;
constexpr const char* kComponent = "batch API";

// The purposes an upload may name (OpenAI's), and those only the executor writes.
const std::set<std::string, std::less<>> kUploadPurposes = {"assistants", "batch",     "fine-tune",
                                                            "vision",     "user_data", "evals"};

int httpStatusOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kPayloadTooLarge:  // OpenAI: 400 "File is too large."
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAlreadyExists:
      return 409;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

std::string errorBody(int status, std::string_view message, std::string_view type, const Json& code,
                      const Json& param) {
  std::string t(type);
  if (t.empty()) {
    t = status == 401   ? "authentication_error"
        : status == 403 ? "permission_error"
        : status >= 500 ? "server_error"
                        : "invalid_request_error";
  }
  return dumpJson(
      Json{{"error",
            {{"message", toValidUtf8(message)}, {"type", t}, {"param", param}, {"code", code}}}});
}

// An id as this API makes them ("file-…", "batch_…"): anything else names nothing.
bool plausibleId(std::string_view id) {
  if (id.empty() || id.size() > 96) return false;
  return std::all_of(id.begin(), id.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_'; });
}

Json nullable(int64_t ms) { return ms > 0 ? Json(ms / 1000) : Json(nullptr); }

// ?limit=: a whole number in [1, max], else the default; kInvalidArgument when malformed.
// An expiry policy as OpenAI takes it ({"anchor": "created_at", "seconds": 3600..2592000}; a
// multipart upload sends its two fields as `expires_after[anchor]` and `expires_after[seconds]`):
// the seconds. `what` names the parameter in errors; a null field is missing.
Result<int64_t> expiresAfter(const std::string* anchor, const std::string* seconds,
                             std::string_view what = "expires_after") {
  const std::string name(what);
  if (anchor == nullptr)
    return Status::invalidArgument("Missing required parameter: '" + name + ".anchor'.");
  if (seconds == nullptr)
    return Status::invalidArgument("Missing required parameter: '" + name + ".seconds'.");
  if (*anchor != "created_at") {
    return Status::invalidArgument("Invalid value for '" + name + ".anchor': '" +
                                   toValidUtf8(anchor->substr(0, 64)) +
                                   "'. Supported values are: 'created_at'.");
  }
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(seconds->data(), seconds->data() + seconds->size(), n);
  if (ec != std::errc() || end != seconds->data() + seconds->size() || n < 3600 || n > 2'592'000) {
    return Status::invalidArgument("Invalid value for '" + name +
                                   ".seconds': expected an integer from 3600 (1 hour) to 2592000 "
                                   "(30 days).");
  }
  return n;
}

Result<int64_t> limitParam(std::string_view query, int64_t fallback, int64_t max) {
  const auto v = queryValues(query, "limit");
  if (v.empty() || v.back().empty()) return fallback;
  int64_t n = 0;
  for (char c : v.back()) {
    if (c < '0' || c > '9' || n > 1'000'000'000) {
      return Status::invalidArgument("Invalid 'limit': expected an integer between 1 and " +
                                     std::to_string(max) + ".");
    }
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > max) {
    return Status::invalidArgument("Invalid 'limit': expected an integer between 1 and " +
                                   std::to_string(max) + ".");
  }
  return n;
}

std::string lastValue(std::string_view query, std::string_view key) {
  auto v = queryValues(query, key);
  return v.empty() ? std::string() : v.back();
}

std::string_view queryPart(const net::HttpRequest& req) {
  const size_t q = req.target.find('?');
  return q == std::string::npos ? std::string_view() : std::string_view(req.target).substr(q + 1);
}

template <typename Row>
std::string listJson(std::vector<Row>& rows, int64_t limit, std::string (*one)(const Row&)) {
  const bool more = static_cast<int64_t>(rows.size()) > limit;
  if (more) rows.resize(static_cast<size_t>(limit));
  std::string out = "{\"object\":\"list\",\"data\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0) out += ',';
    out += one(rows[i]);
  }
  out += "],\"first_id\":";
  out += rows.empty() ? "null" : dumpJson(Json(rows.front().id));
  out += ",\"last_id\":";
  out += rows.empty() ? "null" : dumpJson(Json(rows.back().id));
  out += more ? ",\"has_more\":true}" : ",\"has_more\":false}";
  return out;
}

class Api {
 public:
  Api(Shared& sh, net::asio::io_context& ctx, access::AccessWorker* aw, const LoopLines& lines)
      : sh_(sh), ctx_(ctx), aw_(aw), lines_(lines) {}

  Task<void> uploadFile(net::HttpRequest& req, net::ResponseWriter& w);
  Task<void> listFiles(net::HttpRequest& req, net::ResponseWriter& w);
  Task<void> getFile(net::HttpRequest& req, net::ResponseWriter& w, std::string id);
  Task<void> fileContent(net::HttpRequest& req, net::ResponseWriter& w, std::string id);
  Task<void> deleteFile(net::HttpRequest& req, net::ResponseWriter& w, std::string id);
  Task<void> createBatch(net::HttpRequest& req, net::ResponseWriter& w);
  Task<void> listBatches(net::HttpRequest& req, net::ResponseWriter& w);
  Task<void> getBatch(net::HttpRequest& req, net::ResponseWriter& w, std::string id);
  Task<void> cancelBatch(net::HttpRequest& req, net::ResponseWriter& w, std::string id);

 private:
  struct Caller {
    access::Grant grant;
    std::optional<access::Denial> denied;
    Viewer viewer;
    std::string key_id;
    std::string user;
  };
  Caller caller(const net::HttpRequest& req) {
    Caller c;
    if (aw_ == nullptr) {
      c.viewer.all = true;  // no access control: the operator
      return c;
    }
    c.denied = aw_->authenticateRequest(req, c.grant);
    if (!c.denied) {
      // A caller without a key (require_keys: false) is the team "anonymous": what it makes is
      // its own, not shared with every team.
      c.viewer.team = std::string(c.grant.principal().team);
      const access::Principal p = c.grant.principal();
      c.key_id = std::string(p.key_id);
      c.user = std::string(p.user);
    }
    return c;
  }
  // Whether `c` sees a row owned by `team` (another team's is answered as absent): its own, and
  // the shared rows made without access control.
  // A file past its expiry is gone for its readers, before the executor's sweep deletes it.
  bool live(const FileRow& f) const { return f.expires_ms == 0 || f.expires_ms > sh_.nowMs(); }

  static bool sees(const Caller& c, const std::string& team) {
    return c.viewer.all || team.empty() || team == c.viewer.team;
  }
  // Whether `c` may delete or cancel it: its own only (shared rows are the operator's).
  static bool owns(const Caller& c, const std::string& team) {
    return c.viewer.all || (!team.empty() && team == c.viewer.team);
  }

  template <typename T>
  Task<Result<T>> onPool(const net::PoolJob<BatchStore, T>& job) {
    return net::runOnPool<BatchStore, T>(ctx_, sh_.pool, job, kComponent);
  }

  // What a handler answers, built first and sent by reply(): g++ 12 mishandles temporaries with
  // destructors inside co_await expressions, so none is made there.
  struct Answer {
    int status = 200;
    std::string body;
    std::vector<net::HttpHeader> headers;
  };
  static Task<void> reply(net::ResponseWriter& w, const Answer& a) {
    co_await w.send(a.status, "application/json", a.body, a.headers);
  }
  static Answer jsonAnswer(int status, std::string body) { return {status, std::move(body), {}}; }
  // no_retry: an upload the SDK retried would send its (used up) body again; tell it not to.
  static Answer errorAnswer(int status, std::string_view message, const Json& code = nullptr,
                            const Json& param = nullptr, bool no_retry = false) {
    Answer a{status, errorBody(status, message, "", code, param), {}};
    if (no_retry) a.headers.push_back({"x-should-retry", "false"});
    return a;
  }
  static Answer statusAnswer(const Status& s, bool no_retry = false) {
    return errorAnswer(httpStatusOf(s), s.message(), nullptr, nullptr, no_retry);
  }
  static Answer deniedAnswer(const access::Denial& d, bool no_retry = false) {
    Answer a{d.status, errorBody(d.status, d.message, d.type, Json(d.code), nullptr), {}};
    if (no_retry) a.headers.push_back({"x-should-retry", "false"});
    return a;
  }

  Shared& sh_;
  net::asio::io_context& ctx_;
  access::AccessWorker* aw_;
  const LoopLines& lines_;  // this loop's: the vector index's routes (vector_collection)
};

// ---------------- files ----------------

Task<void> Api::uploadFile(net::HttpRequest& req, net::ResponseWriter& w) {
  INFERA_CHECK(req.body_reader != nullptr, "file uploads are streamed routes");
  net::BodyReader& body = *req.body_reader;
  Caller c = caller(req);
  if (c.denied) {
    {
      const Answer ans = deniedAnswer(*c.denied, true);
      co_await reply(w, ans);
    }
    co_return;
  }
  auto boundary = multipartBoundary(req.header("content-type"));
  if (!boundary.ok()) {
    {
      const Answer ans = statusAnswer(boundary.status(), true);
      co_await reply(w, ans);
    }
    co_return;
  }
  const std::string id = newFileId();
  FileDir* files = &sh_.files;
  using WriterRef = std::shared_ptr<FileDir::Writer>;
  const net::PoolJob<BatchStore, WriterRef> create_job = [files,
                                                          id](BatchStore&) -> Result<WriterRef> {
    INFERA_ASSIGN_OR_RETURN(auto wr, files->create(id));
    return WriterRef(wr.release(), FileDir::WriterDeleter{});
  };
  auto created = co_await onPool<WriterRef>(create_job);
  if (!created.ok()) {
    {
      const Answer ans = statusAnswer(created.status(), true);
      co_await reply(w, ans);
    }
    co_return;
  }
  const WriterRef writer = *created;

  // The parts: `purpose` (a short text), `file` (streamed to the writer), `expires_after[anchor]`
  // and `expires_after[seconds]` (the SDKs' form of the object); others are ignored.
  std::string purpose, filename, current, anchor, seconds;
  bool has_purpose = false, has_file = false, has_anchor = false, has_seconds = false;
  std::string pending;  // file bytes not yet written
  size_t field_bytes = 0;
  MultipartReader::Sink sink;
  sink.begin = [&](const PartHead& h) -> Status {
    current = h.name;
    field_bytes = 0;
    if (current == "file") {
      if (has_file) return Status::invalidArgument("more than one 'file' part");
      has_file = true;
      filename = h.filename.empty() ? "upload" : h.filename;
    } else if (current == "purpose") {
      purpose.clear();
      has_purpose = true;
    } else if (current == "expires_after[anchor]") {
      anchor.clear();
      has_anchor = true;
    } else if (current == "expires_after[seconds]") {
      seconds.clear();
      has_seconds = true;
    }
    return Status::ok();
  };
  sink.data = [&](std::string_view d) -> Status {
    if (current == "file") {
      pending.append(d);
      return Status::ok();
    }
    field_bytes += d.size();
    if (field_bytes > 64 * 1024)
      return Status::invalidArgument("the form field '" + current + "' is over 64 KiB");
    if (current == "purpose") purpose.append(d);
    if (current == "expires_after[anchor]") anchor.append(d);
    if (current == "expires_after[seconds]") seconds.append(d);
    return Status::ok();
  };
  sink.end = [&]() -> Status {
    current.clear();
    return Status::ok();
  };
  MultipartReader reader(std::move(*boundary), std::move(sink));
  const int64_t limit = sh_.config.max_file_bytes;
  Status failed;
  for (;;) {
    auto piece = co_await body.read();
    if (!piece.ok()) {
      failed = piece.status().code() == StatusCode::kPayloadTooLarge
                   ? Status::payloadTooLarge("File is too large.")
                   : piece.status();
      break;
    }
    const bool end = piece->empty();
    if (!end) {
      failed = reader.feed(*piece);
      if (!failed.isOk()) break;
    }
    if (pending.size() >= kWriteChunk || (end && !pending.empty())) {
      // The bytes go to the worker by pointer: this coroutine waits for it, so they stay put.
      const std::string* data = &pending;
      const net::PoolJob<BatchStore, bool> write_job = [files, writer, data,
                                                        limit](BatchStore&) -> Result<bool> {
        INFERA_RETURN_IF_ERROR(files->append(*writer, *data, limit));
        return true;
      };
      auto wrote = co_await onPool<bool>(write_job);
      pending.clear();
      if (!wrote.ok()) {
        failed = wrote.status();
        break;
      }
    }
    if (end) {
      failed = reader.finish();
      break;
    }
  }
  if (failed.isOk() && !has_purpose)
    failed = Status::invalidArgument("'purpose' is a required property");
  if (failed.isOk() && !has_file) failed = Status::invalidArgument("'file' is a required property");
  if (failed.isOk() && !kUploadPurposes.contains(purpose)) {
    failed = Status::invalidArgument(
        "'" + toValidUtf8(purpose) +
        "' is not one of ['assistants', 'batch', 'fine-tune', 'vision', 'user_data', 'evals'] - "
        "'purpose'");
  }
  if (failed.isOk() && !validUtf8(filename))
    failed = Status::invalidArgument("the file name is not valid UTF-8");
  int64_t expires_s = purpose == "batch" ? sh_.config.batch_file_expiry_s : 0;
  if (failed.isOk() && (has_anchor || has_seconds)) {
    auto after = expiresAfter(has_anchor ? &anchor : nullptr, has_seconds ? &seconds : nullptr);
    if (after.ok()) {
      expires_s = *after;
    } else {
      failed = after.status();
    }
  }
  if (!failed.isOk()) {
    if (!body.done()) w.closeAfterResponse();
    {
      const Answer ans = statusAnswer(failed, true);
      co_await reply(w, ans);
    }
    co_return;
  }
  FileRow row;
  row.id = id;
  row.team = c.viewer.team;
  row.key_id = c.key_id;
  row.purpose = purpose;
  row.filename = filename.substr(0, validUtf8Prefix(std::string_view(filename).substr(0, 512)));
  row.created_ms = sh_.nowMs();
  row.expires_ms = expires_s > 0 ? row.created_ms + expires_s * 1000 : 0;
  const net::PoolJob<BatchStore, FileRow> commit_job = [files, writer,
                                                        row](BatchStore& s) -> Result<FileRow> {
    FileRow r = row;
    INFERA_ASSIGN_OR_RETURN(const FileDir::Committed cm, files->commit(*writer));
    r.bytes = cm.size;
    r.sha256 = cm.sha256;
    const Status put = s.insertFile(r);
    if (!put.isOk()) {
      (void)files->remove(r.id);
      return put;
    }
    return r;
  };
  auto done = co_await onPool<FileRow>(commit_job);
  if (!done.ok()) {
    {
      const Answer ans = statusAnswer(done.status(), true);
      co_await reply(w, ans);
    }
    co_return;
  }
  {
    const Answer ans = jsonAnswer(200, fileJson(*done));
    co_await reply(w, ans);
  }
}

Task<void> Api::listFiles(net::HttpRequest& req, net::ResponseWriter& w) {
  Caller c = caller(req);
  if (c.denied) {
    {
      const Answer ans = deniedAnswer(*c.denied);
      co_await reply(w, ans);
    }
    co_return;
  }
  const std::string_view q = queryPart(req);
  auto limit = limitParam(q, 10'000, 10'000);
  if (!limit.ok()) {
    {
      const Answer ans = errorAnswer(400, limit.status().message(), nullptr, "limit");
      co_await reply(w, ans);
    }
    co_return;
  }
  Page page;
  page.limit = *limit;
  page.after = lastValue(q, "after");
  page.purpose = lastValue(q, "purpose");
  page.now_ms = sh_.nowMs();
  const std::string order = lastValue(q, "order");
  if (!order.empty() && order != "asc" && order != "desc") {
    {
      const Answer ans =
          errorAnswer(400, "Invalid 'order': expected 'asc' or 'desc'.", nullptr, "order");
      co_await reply(w, ans);
    }
    co_return;
  }
  page.ascending = order == "asc";
  if (!validUtf8(page.after) || !validUtf8(page.purpose)) {
    {
      const Answer ans = errorAnswer(400, "query values must be valid UTF-8");
      co_await reply(w, ans);
    }
    co_return;
  }
  const Viewer v = c.viewer;
  const net::PoolJob<BatchStore, std::string> job = [v,
                                                     page](BatchStore& s) -> Result<std::string> {
    INFERA_ASSIGN_OR_RETURN(auto rows, s.files(v, page));
    return listJson<FileRow>(rows, page.limit, &fileJson);
  };
  auto r = co_await onPool<std::string>(job);
  if (!r.ok()) {
    {
      const Answer ans = statusAnswer(r.status());
      co_await reply(w, ans);
    }
    co_return;
  }
  {
    const Answer ans = jsonAnswer(200, *r);
    co_await reply(w, ans);
  }
}

Task<void> Api::getFile(net::HttpRequest& req, net::ResponseWriter& w, std::string id) {
  Caller c = caller(req);
  if (c.denied) {
    {
      const Answer ans = deniedAnswer(*c.denied);
      co_await reply(w, ans);
    }
    co_return;
  }
  const net::PoolJob<BatchStore, std::optional<FileRow>> job = [id](BatchStore& s) {
    return s.file(id);
  };
  Result<std::optional<FileRow>> r = std::optional<FileRow>();
  if (plausibleId(id)) r = co_await onPool<std::optional<FileRow>>(job);
  if (!r.ok()) {
    {
      const Answer ans = statusAnswer(r.status());
      co_await reply(w, ans);
    }
    co_return;
  }
  if (!*r || !sees(c, (*r)->team) || !live(**r)) {
    {
      const Answer ans = errorAnswer(404, "No such File object: " + id, nullptr, "id");
      co_await reply(w, ans);
    }
    co_return;
  }
  {
    const Answer ans = jsonAnswer(200, fileJson(**r));
    co_await reply(w, ans);
  }
}

Task<void> Api::fileContent(net::HttpRequest& req, net::ResponseWriter& w, std::string id) {
  Caller c = caller(req);
  if (c.denied) {
    {
      const Answer ans = deniedAnswer(*c.denied);
      co_await reply(w, ans);
    }
    co_return;
  }
  if (!plausibleId(id)) {
    {
      const Answer ans = errorAnswer(404, "No such File object: " + id, nullptr, "id");
      co_await reply(w, ans);
    }
    co_return;
  }
  FileDir* files = &sh_.files;
  using ReaderRef = std::shared_ptr<FileDir::Reader>;
  struct Opened {
    FileRow row;
    ReaderRef reader;
  };
  const net::PoolJob<BatchStore, std::optional<Opened>> job =
      [files, id](BatchStore& s) -> Result<std::optional<Opened>> {
    INFERA_ASSIGN_OR_RETURN(const auto row, s.file(id));
    if (!row) return std::optional<Opened>();
    INFERA_ASSIGN_OR_RETURN(auto r, files->open(id));
    return std::optional<Opened>(Opened{*row, ReaderRef(std::move(r))});
  };
  auto opened = co_await onPool<std::optional<Opened>>(job);
  if (!opened.ok()) {
    {
      const Answer ans = statusAnswer(opened.status());
      co_await reply(w, ans);
    }
    co_return;
  }
  if (!*opened || !sees(c, (*opened)->row.team) || !live((*opened)->row)) {
    {
      const Answer ans = errorAnswer(404, "No such File object: " + id, nullptr, "id");
      co_await reply(w, ans);
    }
    co_return;
  }
  const ReaderRef reader = (*opened)->reader;
  const std::vector<net::HttpHeader> headers = {{"etag", "\"" + (*opened)->row.sha256 + "\""}};
  if (!co_await w.start(200, "application/octet-stream", headers, reader->size)) co_return;
  int64_t offset = 0;
  while (offset < reader->size) {
    const net::PoolJob<BatchStore, std::string> read_job = [reader, offset](BatchStore&) {
      return FileDir::read(*reader, offset, kDownloadChunk);
    };
    auto piece = co_await onPool<std::string>(read_job);
    if (!piece.ok() || piece->empty()) {
      w.closeAfterResponse();  // the head is out: all that is left is to cut the answer short
      co_return;
    }
    offset += static_cast<int64_t>(piece->size());
    if (!co_await w.writeChunk(*piece)) co_return;
  }
  co_await w.finish();
}

Task<void> Api::deleteFile(net::HttpRequest& req, net::ResponseWriter& w, std::string id) {
  Caller c = caller(req);
  if (c.denied) {
    {
      const Answer ans = deniedAnswer(*c.denied);
      co_await reply(w, ans);
    }
    co_return;
  }
  FileDir* files = &sh_.files;
  const Caller* cp = &c;
  const net::PoolJob<BatchStore, bool> job = [files, id, cp](BatchStore& s) -> Result<bool> {
    INFERA_ASSIGN_OR_RETURN(const auto row, s.file(id));
    if (!row || !owns(*cp, row->team)) return false;
    const Status d = s.deleteFile(id);
    if (d.code() == StatusCode::kNotFound) return false;
    INFERA_RETURN_IF_ERROR(d);
    INFERA_RETURN_IF_ERROR(files->remove(id));
    return true;
  };
  Result<bool> r = false;
  if (plausibleId(id)) r = co_await onPool<bool>(job);
  if (!r.ok()) {
    {
      const Answer ans = statusAnswer(r.status());
      co_await reply(w, ans);
    }
    co_return;
  }
  if (!*r) {
    {
      const Answer ans = errorAnswer(404, "No such File object: " + id, nullptr, "id");
      co_await reply(w, ans);
    }
    co_return;
  }
  {
    const Answer ans =
        jsonAnswer(200, dumpJson(Json{{"id", id}, {"object", "file"}, {"deleted", true}}));
    co_await reply(w, ans);
  }
}

// ---------------- batches ----------------

Task<void> Api::createBatch(net::HttpRequest& req, net::ResponseWriter& w) {
  Caller c = caller(req);
  if (c.denied) {
    {
      const Answer ans = deniedAnswer(*c.denied);
      co_await reply(w, ans);
    }
    co_return;
  }
  auto parsed = readJson(req.body);
  if (!parsed.ok()) {
    {
      const Answer ans = statusAnswer(parsed.status());
      co_await reply(w, ans);
    }
    co_return;
  }
  const Json& b = *parsed;
  if (!b.is_object()) {
    {
      const Answer ans = errorAnswer(400, "The request body must be a JSON object.");
      co_await reply(w, ans);
    }
    co_return;
  }
  auto str = [&](const char* key, std::string& out) -> bool {
    const auto it = b.find(key);
    if (it == b.end() || !it->is_string()) return false;
    out = it->get<std::string>();
    return true;
  };
  BatchRow row;
  for (const char* key : {"input_file_id", "endpoint", "completion_window"}) {
    std::string v;
    if (!str(key, v)) {
      const bool missing = !b.contains(key);
      {
        const Answer ans =
            errorAnswer(400,
                        missing ? "Missing required parameter: '" + std::string(key) + "'."
                                : "Invalid type for '" + std::string(key) + "': expected a string.",
                        missing ? "missing_required_parameter" : "invalid_type", key);
        co_await reply(w, ans);
      }
      co_return;
    }
    if (std::string_view(key) == "input_file_id") row.input_file_id = v;
    if (std::string_view(key) == "endpoint") row.endpoint = v;
    if (std::string_view(key) == "completion_window") row.completion_window = v;
  }
  const auto& eps = sh_.config.endpoints;
  if (std::find(eps.begin(), eps.end(), row.endpoint) == eps.end()) {
    std::string supported;
    for (size_t i = 0; i < eps.size(); ++i) supported += (i ? ", '" : "'") + eps[i] + "'";
    {
      const Answer ans = errorAnswer(
          400, "Invalid value: '" + row.endpoint + "'. Supported values are: " + supported + ".",
          "invalid_value", "endpoint");
      co_await reply(w, ans);
    }
    co_return;
  }
  const auto& windows = sh_.config.completion_windows;
  if (std::find(windows.begin(), windows.end(), row.completion_window) == windows.end()) {
    std::string supported;
    for (size_t i = 0; i < windows.size(); ++i) supported += (i ? ", '" : "'") + windows[i] + "'";
    {
      const Answer ans = errorAnswer(400,
                                     "Invalid value: '" + row.completion_window +
                                         "'. Supported values are: " + supported + ".",
                                     "invalid_value", "completion_window");
      co_await reply(w, ans);
    }
    co_return;
  }
  if (const auto m = b.find("metadata"); m != b.end() && !m->is_null()) {
    std::string bad;
    if (!m->is_object()) {
      bad = "Invalid type for 'metadata': expected an object.";
    } else if (m->size() > 16) {
      bad = "Invalid 'metadata': at most 16 keys.";
    } else {
      for (const auto& [k, v] : m->items()) {
        if (!v.is_string()) {
          bad = "Invalid type for 'metadata." + k + "': expected a string.";
        } else if (k.size() > 64 || v.get_ref<const std::string&>().size() > 512) {
          bad = "Invalid 'metadata." + k + "': keys are at most 64 and values 512 characters.";
        }
        if (!bad.empty()) break;
      }
    }
    if (!bad.empty()) {
      {
        const Answer ans = errorAnswer(400, bad, "invalid_type", "metadata");
        co_await reply(w, ans);
      }
      co_return;
    }
    row.metadata = dumpJson(*m);
  }
  // Infera's extension: the vectors of a /v1/embeddings batch go straight into a collection.
  if (const auto vc = b.find("vector_collection"); vc != b.end() && !vc->is_null()) {
    std::string bad;
    if (!vc->is_string() || vc->get_ref<const std::string&>().empty() ||
        vc->get_ref<const std::string&>().size() > 255) {
      bad = "Invalid 'vector_collection': expected a collection name (1 to 255 characters).";
    } else if (row.endpoint != "/v1/embeddings") {
      bad = "'vector_collection' is for batches of endpoint '/v1/embeddings'.";
    }
    if (!bad.empty()) {
      {
        const Answer ans = errorAnswer(400, bad, "invalid_value", "vector_collection");
        co_await reply(w, ans);
      }
      co_return;
    }
    row.vector_collection = vc->get<std::string>();
    // Asked of the vector index now, as the caller (its route checks the key's access), so a
    // missing or foreign collection fails the create, not each line after its embedding is paid.
    const std::string name = percentEncode(row.vector_collection);
    int status = 404;
    if (lines_.vector_info) {
      net::HttpRequest probe;
      probe.method = "GET";
      probe.target = lines_.vector_prefix + "/collections/" + name;
      const net::InProcessCaller as{c.key_id, c.user, false, 1.0};
      probe.in_process = &as;
      net::PathParams params;
      params.push("name", name);
      CaptureWriter cw(1 << 20);
      net::Task<void> handled = lines_.vector_info(probe, cw, params);
      co_await std::move(handled);
      status = cw.status();
    }
    if (status != 200) {
      {
        const Answer ans = errorAnswer(
            400,
            !lines_.vector_info
                ? "'vector_collection' needs the vector index, which this server does not run."
                : "Collection '" + row.vector_collection +
                      "' does not exist or is not accessible to you (the vector index answered " +
                      std::to_string(status) + ").",
            "invalid_value", "vector_collection");
        co_await reply(w, ans);
      }
      co_return;
    }
  }
  if (const auto oe = b.find("output_expires_after"); oe != b.end() && !oe->is_null()) {
    Result<int64_t> after = Status::invalidArgument(
        "Invalid type for 'output_expires_after': expected an object with 'anchor' and 'seconds'.");
    if (oe->is_object()) {
      const auto a = oe->find("anchor");
      const auto n = oe->find("seconds");
      std::string anchor, seconds;
      if (a != oe->end()) anchor = a->is_string() ? a->get<std::string>() : a->dump();
      // Only an integer is one: 3600.0, "3600" and true are refused like any other type.
      if (n != oe->end()) seconds = n->is_number_integer() ? n->dump() : std::string("-");
      after = expiresAfter(a != oe->end() ? &anchor : nullptr, n != oe->end() ? &seconds : nullptr,
                           "output_expires_after");
    }
    if (!after.ok()) {
      {
        const Answer ans =
            errorAnswer(400, after.status().message(), "invalid_value", "output_expires_after");
        co_await reply(w, ans);
      }
      co_return;
    }
    row.output_expires_s = *after;
  }
  if (!plausibleId(row.input_file_id)) {
    const Answer ans = errorAnswer(400, "Invalid 'input_file_id': not a file id.", "invalid_value",
                                   "input_file_id");
    co_await reply(w, ans);
    co_return;
  }
  auto window = parseWindow(row.completion_window);
  row.id = newBatchId();
  row.team = c.viewer.team;
  row.key_id = c.key_id;
  row.user = c.user;
  row.status = "validating";
  row.created_ms = sh_.nowMs();
  row.expires_ms = row.created_ms + (window.ok() ? *window : 86'400'000);
  const int64_t max_open = sh_.config.max_open_batches;
  const net::PoolJob<BatchStore, BatchRow> job = [row,
                                                  max_open](BatchStore& s) -> Result<BatchRow> {
    INFERA_ASSIGN_OR_RETURN(const int64_t open, s.openBatches(row.team));
    if (open >= max_open) {
      return Status::resourceExhausted(
          "The team has " + std::to_string(open) +
          " batches that have not ended (batch.max_open_batches); wait for some to end.");
    }
    INFERA_RETURN_IF_ERROR(s.insertBatch(row));
    return row;
  };
  auto r = co_await onPool<BatchRow>(job);
  if (!r.ok()) {
    {
      const Answer ans = statusAnswer(r.status());
      co_await reply(w, ans);
    }
    co_return;
  }
  {
    const Answer ans = jsonAnswer(200, batchJson(*r));
    co_await reply(w, ans);
  }
}

Task<void> Api::listBatches(net::HttpRequest& req, net::ResponseWriter& w) {
  Caller c = caller(req);
  if (c.denied) {
    {
      const Answer ans = deniedAnswer(*c.denied);
      co_await reply(w, ans);
    }
    co_return;
  }
  const std::string_view q = queryPart(req);
  auto limit = limitParam(q, 20, 100);
  if (!limit.ok()) {
    {
      const Answer ans = errorAnswer(400, limit.status().message(), nullptr, "limit");
      co_await reply(w, ans);
    }
    co_return;
  }
  Page page;
  page.limit = *limit;
  page.after = lastValue(q, "after");
  if (!validUtf8(page.after)) {
    {
      const Answer ans = errorAnswer(400, "query values must be valid UTF-8");
      co_await reply(w, ans);
    }
    co_return;
  }
  const Viewer v = c.viewer;
  const net::PoolJob<BatchStore, std::string> job = [v,
                                                     page](BatchStore& s) -> Result<std::string> {
    INFERA_ASSIGN_OR_RETURN(auto rows, s.batches(v, page));
    return listJson<BatchRow>(rows, page.limit, &batchJson);
  };
  auto r = co_await onPool<std::string>(job);
  if (!r.ok()) {
    {
      const Answer ans = statusAnswer(r.status());
      co_await reply(w, ans);
    }
    co_return;
  }
  {
    const Answer ans = jsonAnswer(200, *r);
    co_await reply(w, ans);
  }
}

Task<void> Api::getBatch(net::HttpRequest& req, net::ResponseWriter& w, std::string id) {
  Caller c = caller(req);
  if (c.denied) {
    {
      const Answer ans = deniedAnswer(*c.denied);
      co_await reply(w, ans);
    }
    co_return;
  }
  const net::PoolJob<BatchStore, std::optional<BatchRow>> job = [id](BatchStore& s) {
    return s.batch(id);
  };
  Result<std::optional<BatchRow>> r = std::optional<BatchRow>();
  if (plausibleId(id)) r = co_await onPool<std::optional<BatchRow>>(job);
  if (!r.ok()) {
    {
      const Answer ans = statusAnswer(r.status());
      co_await reply(w, ans);
    }
    co_return;
  }
  if (!*r || !sees(c, (*r)->team)) {
    {
      const Answer ans =
          errorAnswer(404, "No batch found with id '" + id + "'.", "batch_not_found", "id");
      co_await reply(w, ans);
    }
    co_return;
  }
  {
    const Answer ans = jsonAnswer(200, batchJson(**r));
    co_await reply(w, ans);
  }
}

Task<void> Api::cancelBatch(net::HttpRequest& req, net::ResponseWriter& w, std::string id) {
  Caller c = caller(req);
  if (c.denied) {
    {
      const Answer ans = deniedAnswer(*c.denied);
      co_await reply(w, ans);
    }
    co_return;
  }
  const int64_t now = sh_.nowMs();
  const Caller* cp = &c;
  const net::PoolJob<BatchStore, std::optional<BatchRow>> job =
      [id, now, cp](BatchStore& s) -> Result<std::optional<BatchRow>> {
    INFERA_ASSIGN_OR_RETURN(const auto row, s.batch(id));
    if (!row || !owns(*cp, row->team)) return std::optional<BatchRow>();
    return s.cancel(id, now);
  };
  Result<std::optional<BatchRow>> r = std::optional<BatchRow>();
  if (plausibleId(id)) r = co_await onPool<std::optional<BatchRow>>(job);
  if (!r.ok()) {
    {
      const Answer ans =
          errorAnswer(httpStatusOf(r.status()), r.status().message(), nullptr, nullptr, true);
      co_await reply(w, ans);
    }
    co_return;
  }
  if (!*r) {
    {
      const Answer ans =
          errorAnswer(404, "No batch found with id '" + id + "'.", "batch_not_found", "id");
      co_await reply(w, ans);
    }
    co_return;
  }
  {
    const Answer ans = jsonAnswer(200, batchJson(**r));
    co_await reply(w, ans);
  }
}

}  // namespace

// ---------------- the operator's view (admin port) ----------------

// A Batch object with who made it (the admin API's rows).
std::string adminBatchJson(const BatchRow& b) {
  auto parsed = readJson(batchJson(b));
  Json j = parsed.ok() ? std::move(*parsed) : Json::object();
  j["team"] = b.team;
  j["key_id"] = b.key_id;
  j["user"] = b.user;
  return dumpJson(j);
}

class AdminApi {
 public:
  AdminApi(Shared& sh, net::asio::io_context& ctx) : sh_(sh), ctx_(ctx) {}

  Task<void> list(net::HttpRequest& req, net::ResponseWriter& w) {
    const std::string_view q = queryPart(req);
    Page page;
    auto limit = limitParam(q, 100, 1000);
    std::string answer;
    int status = 200;
    if (!limit.ok()) {
      status = 400;
      answer = errorBody(400, limit.status().message(), "", nullptr, "limit");
    } else {
      page.limit = *limit;
      page.after = lastValue(q, "after");
      page.team = lastValue(q, "team");
      page.status = lastValue(q, "status");
      const net::PoolJob<BatchStore, std::string> job =
          [page](BatchStore& s) -> Result<std::string> {
        INFERA_ASSIGN_OR_RETURN(auto rows, s.batches(Viewer{true, ""}, page));
        return listJson<BatchRow>(rows, page.limit, &adminBatchJson);
      };
      auto r = co_await net::runOnPool<BatchStore, std::string>(ctx_, sh_.pool, job, kComponent);
      status = r.ok() ? 200 : httpStatusOf(r.status());
      answer =
          r.ok() ? std::move(*r) : errorBody(status, r.status().message(), "", nullptr, nullptr);
    }
    co_await w.send(status, "application/json", answer);
  }

  Task<void> one(net::HttpRequest& req, net::ResponseWriter& w, std::string id, bool cancel) {
    const int64_t now = sh_.nowMs();
    const std::string_view who = req.header("x-infera-actor");
    const std::string actor = who.empty() ? "admin" : toValidUtf8(who.substr(0, 128));
    access::Access* audit = sh_.access;
    const net::PoolJob<BatchStore, std::optional<BatchRow>> job =
        [id, cancel, now, actor, audit](BatchStore& s) -> Result<std::optional<BatchRow>> {
      if (!plausibleId(id)) return std::optional<BatchRow>();
      INFERA_ASSIGN_OR_RETURN(auto row, s.batch(id));
      if (!row || !cancel) return row;
      INFERA_ASSIGN_OR_RETURN(auto after, s.cancel(id, now));
      if (audit != nullptr && after) {
        // An operator's change, in the audit log like the others.
        const Json detail = {{"team", after->team}, {"status", after->status}};
        const Status a = audit->audit(actor, "batch.cancel", id, dumpJson(detail));
        if (!a.isOk())
          INFERA_LOG(componentLogger("batch"), warn, "audit of a batch cancel failed: {}",
                     a.message());
      }
      return after;
    };
    auto r = co_await net::runOnPool<BatchStore, std::optional<BatchRow>>(ctx_, sh_.pool, job,
                                                                          kComponent);
    int status = 200;
    std::string answer;
    if (!r.ok()) {
      status = httpStatusOf(r.status());
      answer = errorBody(status, r.status().message(), "", nullptr, nullptr);
    } else if (!*r) {
      status = 404;
      answer = errorBody(404, "No batch found with id '" + id + "'.", "", "batch_not_found", "id");
    } else {
      answer = adminBatchJson(**r);
    }
    co_await w.send(status, "application/json", answer);
  }

 private:
  Shared& sh_;
  net::asio::io_context& ctx_;
};

std::string fileJson(const FileRow& f) {
  return dumpJson(Json{{"id", f.id},
                       {"object", "file"},
                       {"bytes", f.bytes},
                       {"created_at", f.created_ms / 1000},
                       {"expires_at", nullable(f.expires_ms)},
                       {"filename", f.filename},
                       {"purpose", f.purpose},
                       {"status", "processed"},
                       {"status_details", nullptr}});
}

std::string batchJson(const BatchRow& b) {
  Json errors = nullptr;
  if (!b.errors.empty()) {
    auto e = readJson(b.errors);
    errors = Json{{"object", "list"}, {"data", e.ok() ? *e : Json::array()}};
  }
  Json metadata = nullptr;
  if (!b.metadata.empty()) {
    auto m = readJson(b.metadata);
    if (m.ok()) metadata = *m;
  }
  auto fileOrNull = [](const std::string& id) { return id.empty() ? Json(nullptr) : Json(id); };
  Json out{
      {"id", b.id},
      {"object", "batch"},
      {"endpoint", b.endpoint},
      {"errors", errors},
      {"input_file_id", b.input_file_id},
      {"completion_window", b.completion_window},
      {"status", b.status},
      {"output_file_id", fileOrNull(b.output_file_id)},
      {"error_file_id", fileOrNull(b.error_file_id)},
      {"created_at", b.created_ms / 1000},
      {"in_progress_at", nullable(b.in_progress_ms)},
      {"expires_at", nullable(b.expires_ms)},
      {"finalizing_at", nullable(b.finalizing_ms)},
      {"completed_at", nullable(b.completed_ms)},
      {"failed_at", nullable(b.failed_ms)},
      {"expired_at", nullable(b.expired_ms)},
      {"cancelling_at", nullable(b.cancelling_ms)},
      {"cancelled_at", nullable(b.cancelled_ms)},
      {"request_counts", {{"total", b.total}, {"completed", b.completed}, {"failed", b.failed}}},
      {"usage",
       {{"input_tokens", b.prompt_tokens},
        {"input_tokens_details", {{"cached_tokens", 0}}},
        {"output_tokens", b.completion_tokens},
        {"output_tokens_details", {{"reasoning_tokens", 0}}},
        {"total_tokens", b.prompt_tokens + b.completion_tokens}}},
      {"metadata", metadata}};
  if (!b.vector_collection.empty()) out["vector_collection"] = b.vector_collection;
  return dumpJson(out);
}

void addApiRoutes(Shared& sh, net::asio::io_context& ctx, net::Router& router,
                  access::AccessWorker* aw, const LoopLines& lines) {
  auto api = std::make_unique<Api>(sh, ctx, aw, lines);
  Api* a = api.get();
  router.own(std::move(api));
  // The multipart framing around the file: a little over the file's own limit.
  const uint64_t upload_limit = static_cast<uint64_t>(sh.config.max_file_bytes) + 64 * 1024;
  router.addStreamed(
      "POST", "/v1/files",
      [a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams) {
        return a->uploadFile(r, w);
      },
      upload_limit);
  router.add("GET", "/v1/files", [a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams) {
    return a->listFiles(r, w);
  });
  router.add("GET", "/v1/files/{id}",
             [a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams p) {
               return a->getFile(r, w, std::string(p["id"]));
             });
  router.add("DELETE", "/v1/files/{id}",
             [a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams p) {
               return a->deleteFile(r, w, std::string(p["id"]));
             });
  router.add("GET", "/v1/files/{id}/content",
             [a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams p) {
               return a->fileContent(r, w, std::string(p["id"]));
             });
  router.add("POST", "/v1/batches",
             [a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams) {
               return a->createBatch(r, w);
             });
  router.add("GET", "/v1/batches",
             [a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams) {
               return a->listBatches(r, w);
             });
  router.add("GET", "/v1/batches/{id}",
             [a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams p) {
               return a->getBatch(r, w, std::string(p["id"]));
             });
  router.add("POST", "/v1/batches/{id}/cancel",
             [a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams p) {
               return a->cancelBatch(r, w, std::string(p["id"]));
             });
}

void addAdminApiRoutes(Shared& sh, net::asio::io_context& ctx, net::Router& admin,
                       const net::RouteGuard& guard) {
  auto api = std::make_unique<AdminApi>(sh, ctx);
  AdminApi* a = api.get();
  admin.own(std::move(api));
  admin.add("GET", "/admin/batches",
            guard([a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams) {
              return a->list(r, w);
            }));
  admin.add("GET", "/admin/batches/{id}",
            guard([a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams p) {
              return a->one(r, w, std::string(p["id"]), false);
            }));
  admin.add("POST", "/admin/batches/{id}/cancel",
            guard([a](net::HttpRequest& r, net::ResponseWriter& w, net::PathParams p) {
              return a->one(r, w, std::string(p["id"]), true);
            }));
}

}  // namespace infera::batch
