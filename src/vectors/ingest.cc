// loadFile and embedFile: a reader on the calling thread cuts the input into batches, a Pipeline
// sends them, and (embedFile) a checkpoint records the offset after the last contiguous batch
// that is upserted.
#include "vectors/ingest.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "net/client.h"
#include "vectors/internal/files.h"
#include "vectors/internal/json.h"
#include "vectors/internal/pipeline.h"
#include "vectors/internal/point_id.h"

namespace infera::vectors {

// ---- Pipeline ----

Pipeline::Pipeline(int concurrency, Work work, Prefix on_prefix)
    : limit_(size_t(std::max(concurrency, 1))),
      work_(std::move(work)),
      on_prefix_(std::move(on_prefix)) {
  for (size_t i = 0; i < limit_; ++i) threads_.emplace_back([this] { run(); });
}

Pipeline::~Pipeline() {
  (void)finish();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Pipeline::waitUntil(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                         const std::function<void()>& tick) {
  while (!done()) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (tick) {
      lock.unlock();
      tick();
      lock.lock();
    }
  }
}

bool Pipeline::push(Batch b, const std::function<void()>& tick) {
  std::unique_lock lock(mu_);
  waitUntil(
      lock, [&] { return in_flight_ < limit_ || !failed_.isOk(); }, tick);
  if (!failed_.isOk()) return false;
  b.seq = next_seq_++;
  queue_.push_back(std::move(b));
  ++in_flight_;
  cv_.notify_all();
  return true;
}

Status Pipeline::finish(const std::function<void()>& tick) {
  std::unique_lock lock(mu_);
  waitUntil(
      lock, [&] { return in_flight_ == 0; }, tick);
  return failed_;
}

uint64_t Pipeline::donePoints() const {
  std::lock_guard lock(mu_);
  return done_points_;
}

// The one place a pipeline thread meets an exception from a batch's work (a bug: the work reports
// errors as Status): the batch fails with kInternal, which stops the pipeline like any failure,
// instead of std::terminate ending the command without saying why.
Status Pipeline::guardedWork(Batch& b) noexcept {
  try {
    return work_(b);
  } catch (const std::exception& e) {
    return Status::internal(std::string("a batch's work threw: ") + e.what());
  } catch (...) {
    return Status::internal("a batch's work threw an exception that is not a std::exception");
  }
}

void Pipeline::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_
    Batch b = std::move(queue_.front());
    queue_.pop_front();
    Status s;
    if (failed_.isOk()) {
      lock.unlock();
      s = guardedWork(b);
      lock.lock();
    } else {
      s = Status::cancelled("not sent: an earlier batch failed");
    }
    --in_flight_;
    if (!s.isOk()) {
      if (failed_.isOk()) failed_ = std::move(s);
    } else if (failed_.isOk()) {
      done_points_ += b.points;
      b.body.clear();
      b.texts.clear();
      b.ids.clear();
      b.payloads.clear();
      const uint64_t seq = b.seq;
      done_.emplace(seq, std::move(b));
      const Batch* last = nullptr;
      for (auto it = done_.find(prefix_seq_); it != done_.end(); it = done_.find(prefix_seq_)) {
        ++prefix_seq_;
        prefix_points_ += it->second.points;
        if (last) done_.erase(last->seq);
        last = &it->second;
      }
      if (last) {
        if (on_prefix_) on_prefix_(*last, prefix_points_);
        done_.erase(last->seq);
      }
    }
    cv_.notify_all();
  }
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string lineRange(uint64_t a, uint64_t b, bool binary) {
  const char* unit = binary ? "records" : "lines";
  return std::string(unit) + " " + std::to_string(a) + "-" + std::to_string(b);
}

// The collection's dimension (kNotFound when it does not exist).
Result<size_t> collectionDim(const VectorsClient& client, const std::string& name) {
  INFERA_ASSIGN_OR_RETURN(nlohmann::json info, client.collectionInfo(name));
  const auto& v = info["config"]["params"]["vectors"];
  if (!v.is_object() || !v["size"].is_number_unsigned()) {
    return Status::internal("collection " + name + ": the server did not say its vector size");
  }
  return v["size"].get<size_t>();
}

void appendPoint(std::string& body, const nlohmann::json& id, const float* v, size_t dim,
                 const nlohmann::json& payload) {
  if (body.size() > 11) body.push_back(',');
  body += "{\"id\":";
  body += id.dump();
  body += ",\"vector\":[";
  for (size_t i = 0; i < dim; ++i) {
    if (i) body.push_back(',');
    appendFloat(body, v[i]);
  }
  body.push_back(']');
  if (!payload.is_null()) {
    body += ",\"payload\":";
    body += payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  body.push_back('}');
}

}  // namespace

// ---- loadFile ----

Result<LoadReport> loadFile(const VectorsClient& client, const std::string& collection,
                            const std::string& path, ReadOptions read, const LoadOptions& options) {
  const auto t0 = Clock::now();
  if (read.dim == 0) {
    INFERA_ASSIGN_OR_RETURN(read.dim, collectionDim(client, collection));
  }
  INFERA_ASSIGN_OR_RETURN(auto reader, VectorFileReader::open(path, read));
  const FileFormat format = read.format == FileFormat::kAuto ? formatOf(path) : read.format;
  const bool binary =
      format == FileFormat::kFvecs || format == FileFormat::kIvecs || format == FileFormat::kBvecs;
  LoadReport report;
  Pipeline pipe(options.concurrency, [&](Batch& b) -> Status {
    if (options.dry_run) return Status::ok();
    const Status s = client.upsert(collection, b.body);
    if (!s.isOk()) {
      return Status(s.code(), path + ": the batch of " +
                                  lineRange(b.first_line, b.last_line, binary) +
                                  " was refused: " + s.message());
    }
    return Status::ok();
  });
  auto tick = [&] {
    if (!options.progress) return;
    Progress p;
    p.points = pipe.donePoints();
    p.bytes = reader->offset();
    p.total_bytes = reader->size();
    p.retries = client.retries();
    p.seconds = since(t0);
    options.progress(p);
  };
  Batch b;
  b.body = "{\"points\":[";
  FilePoint pt;
  Status bad;
  for (;;) {
    auto more = reader->next(pt);
    if (!more.ok()) {
      bad = more.takeStatus();
      break;
    }
    if (*more) {
      if (b.points == 0) b.first_line = pt.line;
      b.last_line = pt.line;
      appendPoint(b.body, pt.id, pt.vector.data(), pt.vector.size(), pt.payload);
      ++b.points;
    }
    if (b.points > 0 && (b.points >= options.batch_points || !*more)) {
      b.body += "]}";
      b.end_offset = reader->offset();
      ++report.batches;
      if (!pipe.push(std::move(b), tick)) break;
      b = Batch();
      b.body = "{\"points\":[";
    }
    if (!*more) break;
  }
  const Status sent = pipe.finish(tick);
  tick();
  report.points = pipe.donePoints();
  report.seconds = since(t0);
  report.retries = client.retries();
  if (!sent.isOk()) {
    return Status(sent.code(), sent.message() + "; " + std::to_string(report.points) +
                                   " points of earlier batches were written");
  }
  if (!bad.isOk()) {
    std::string m = bad.message();
    if (b.points > 0) {
      m += std::string("; the batch it belongs to (") + (binary ? "records " : "lines ") +
           std::to_string(b.first_line) + " onwards) was refused, nothing of it sent";
    } else {
      m += "; the batch it belongs to was refused, nothing of it sent";
    }
    m += "; " + std::to_string(report.points) + " points of earlier batches were written";
    if (options.dry_run) m = bad.message() + " (dry run: nothing was sent)";
    return Status(bad.code(), m);
  }
  return report;
}

// ---- embedFile ----

namespace {

// The hash of the input's first `offset` bytes (a rerun checks the input still has them).
Result<uint64_t> prefixHash(const std::string& path, uint64_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::notFound("cannot open " + path);
  uint64_t h = fnv1a(nullptr, 0);
  std::vector<char> buf(1 << 20);
  uint64_t left = offset;
  while (left > 0) {
    const size_t want = size_t(std::min<uint64_t>(left, buf.size()));
    in.read(buf.data(), std::streamsize(want));
    if (uint64_t(in.gcount()) != want)
      return Status::failedPrecondition(path + " is shorter than the checkpoint's offset");
    h = fnv1a(buf.data(), want, h);
    left -= want;
  }
  return h;
}

struct Checkpoint {
  std::string input, collection, model;
  uint64_t offset = 0, line = 0, points = 0;
  uint64_t prefix_hash = 0;  // of the input's bytes before offset
};

Status writeCheckpoint(const std::string& path, const Checkpoint& c) {
  nlohmann::json j = {{"version", 1},
                      {"input", c.input},
                      {"collection", c.collection},
                      {"model", c.model},
                      {"offset", c.offset},
                      {"line", c.line},
                      {"points", c.points},
                      {"prefix_hash", c.prefix_hash}};
  const std::string text = j.dump(1) + "\n";
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::internal("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::internal("cannot write " + path + ": " + std::strerror(errno));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

Result<std::optional<Checkpoint>> readCheckpoint(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::optional<Checkpoint>();
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j["offset"].is_number_unsigned() || !j["line"].is_number_unsigned()) {
    return Status::failedPrecondition("the checkpoint " + path +
                                      " is not readable (remove it, or --restart)");
  }
  Checkpoint c;
  c.input = j.value("input", "");
  c.collection = j.value("collection", "");
  c.model = j.value("model", "");
  c.offset = j["offset"].get<uint64_t>();
  c.line = j["line"].get<uint64_t>();
  c.points = j.value("points", uint64_t{0});
  c.prefix_hash = j.value("prefix_hash", uint64_t{0});
  return std::optional<Checkpoint>(std::move(c));
}

// One embeddings call for `texts`: their vectors in input order.
Result<std::vector<std::vector<float>>> embedTexts(const VectorsClient& client,
                                                   const EmbedOptions& o,
                                                   const std::vector<std::string>& texts,
                                                   int64_t* retries) {
  nlohmann::json req = {{"model", o.model}, {"input", texts}};
  const std::string body = req.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::vector<net::HttpHeader> headers = {{"content-type", "application/json"}};
  if (!o.gateway_key.empty()) headers.push_back({"authorization", "Bearer " + o.gateway_key});
  std::string base = o.gateway_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  const std::string url = base + "/v1/embeddings";
  int n = 0;
  const HttpAnswer a = callWithRetry(
      client.config().retry,
      [&] {
        HttpAnswer out;
        auto r = net::fetchBlocking(url, "POST", body, headers, client.config().timeout);
        if (!r.ok()) {
          out.error = r.status().message();
          return out;
        }
        out.status = r->status;
        out.body = std::move(r->body);
        out.retry_after = std::string(r->header("retry-after"));
        out.retry_after_ms = std::string(r->header("retry-after-ms"));
        return out;
      },
      &n);
  *retries += n;
  if (a.status != 200) return statusFromAnswer(a, "the embeddings API (" + url + ")");
  auto j = nlohmann::json::parse(a.body, nullptr, false);
  if (!j.is_object() || !j["data"].is_array())
    return Status::internal(url + ": the answer has no `data` list");
  std::vector<std::vector<float>> out(texts.size());
  for (const auto& d : j["data"]) {
    const size_t index = d.value("index", size_t(-1));
    if (index >= texts.size() || !d["embedding"].is_array() || !out[index].empty()) {
      return Status::internal(url + ": the answer's `data` does not match the " +
                              std::to_string(texts.size()) + " inputs");
    }
    for (const auto& x : d["embedding"]) {
      if (!x.is_number()) return Status::internal(url + ": an embedding holds a non-number");
      out[index].push_back(float(x.get<double>()));
    }
  }
  for (const auto& v : out) {
    if (v.empty()) return Status::internal(url + ": the answer misses embeddings for some inputs");
  }
  return out;
}

// One input line {"id", "text", "payload"}.
Status parseTextLine(const LineReader& lines, std::string_view line, nlohmann::json& id,
                     std::string& text, nlohmann::json& payload) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    return lineError(lines.path(), lines.line(), e.byte == 0 ? 1 : e.byte,
                     "not JSON (" + std::string(e.what()) + ")");
  }
  auto col = [&](const char* key) {
    std::string quoted_key = "\"";
    quoted_key += key;
    quoted_key += '"';
    const size_t at = line.find(quoted_key);
    return at == std::string_view::npos ? size_t(1) : at + 1;
  };
  auto err = [&](const char* key, const std::string& m) {
    return lineError(lines.path(), lines.line(), col(key), m);
  };
  if (!j.is_object())
    return lineError(lines.path(), lines.line(), 1,
                     "a line must be a JSON object {\"id\", \"text\", \"payload\"}");
  const nlohmann::json& jid = j["id"];
  if (jid.is_number_unsigned() || (jid.is_number_integer() && jid.get<int64_t>() >= 0)) {
    id = jid.get<uint64_t>();
  } else if (jid.is_string()) {
    PointId p;
    if (!parseUuid(jid.get<std::string>(), p))
      return err("id", "\"id\" " + jid.dump().substr(0, 40) + " is not a UUID");
    id = p.toString();
  } else {
    return err("id",
               j.contains("id") ? "\"id\" is not an unsigned integer or a UUID" : "missing \"id\"");
  }
  if (!j["text"].is_string() || j["text"].get<std::string>().empty()) {
    return err("text", "\"text\" must be a non-empty string");
  }
  text = j["text"].get<std::string>();
  payload = nlohmann::json::object();
  if (j.contains("payload") && !j["payload"].is_null()) {
    if (!j["payload"].is_object()) return err("payload", "\"payload\" must be an object");
    payload = std::move(j["payload"]);
  }
  return Status::ok();
}

}  // namespace

std::string checkpointPath(const std::string& input, const std::string& collection,
                           const std::string& state_dir) {
  std::string name = std::filesystem::path(input).filename().string() + "." +
                     pathSegment(collection) + ".embed-checkpoint";
  if (state_dir.empty()) return input + "." + pathSegment(collection) + ".embed-checkpoint";
  return (std::filesystem::path(state_dir) / name).string();
}

Result<EmbedReport> embedFile(const VectorsClient& client, const std::string& collection,
                              const std::string& input, const EmbedOptions& o) {
  const auto t0 = Clock::now();
  if (o.model.empty())
    return Status::invalidArgument("no model: --model names the embedding model");
  EmbedReport report;
  report.checkpoint = checkpointPath(input, collection, o.state_dir);
  if (!o.state_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.state_dir, ec);
    if (ec) return Status::internal("cannot create " + o.state_dir + ": " + ec.message());
  }
  const std::string abs_input = std::filesystem::absolute(input).lexically_normal().string();

  // Where to start: the checkpoint's offset, if it is this job's and the input still has its bytes.
  Checkpoint cp;
  cp.input = abs_input;
  cp.collection = collection;
  cp.model = o.model;
  if (!o.restart) {
    INFERA_ASSIGN_OR_RETURN(auto prev, readCheckpoint(report.checkpoint));
    if (prev) {
      if (prev->collection != collection || prev->model != o.model) {
        return Status::failedPrecondition("the checkpoint " + report.checkpoint +
                                          " is for collection " + prev->collection + " and model " +
                                          prev->model + " (--restart to start over)");
      }
      auto h = prefixHash(input, prev->offset);
      if (!h.ok() || *h != prev->prefix_hash) {
        return Status::failedPrecondition(
            input + " changed before line " + std::to_string(prev->line + 1) +
            " since the checkpoint " + report.checkpoint + " (--restart to start over)");
      }
      cp = *prev;
      cp.input = abs_input;
      report.resumed_from_line = cp.line + 1;
    }
  }
  LineReader lines;
  INFERA_RETURN_IF_ERROR(lines.open(input, cp.offset, cp.line + 1, cp.prefix_hash));

  // The collection's dimension (or create it with the model's).
  size_t dim = 0;
  auto have = collectionDim(client, collection);
  int64_t retries = 0;
  std::mutex retries_mu;
  if (have.ok()) {
    dim = *have;
  } else if (have.status().code() == StatusCode::kNotFound && o.create) {
    INFERA_ASSIGN_OR_RETURN(auto probe, embedTexts(client, o, {"dimension probe"}, &retries));
    CollectionSpec spec;
    spec.dim = probe[0].size();
    const Status s = client.createCollection(collection, spec);
    if (!s.isOk() && s.code() != StatusCode::kAlreadyExists) return s;
    dim = spec.dim;
  } else {
    return have.status();
  }

  std::mutex cp_mu;  // cp, cp_status and the checkpoint file
  Status cp_status;
  const uint64_t base_points = cp.points;
  Pipeline pipe(
      o.concurrency,
      [&](Batch& b) -> Status {
        if (b.texts.empty()) return Status::ok();  // only blank lines: the checkpoint still moves
        int64_t r = 0;
        auto vecs = embedTexts(client, o, b.texts, &r);
        {
          std::lock_guard lock(retries_mu);
          retries += r;
        }
        if (!vecs.ok())
          return vecs.status().withContext("lines " + std::to_string(b.first_line) + "-" +
                                           std::to_string(b.last_line));
        std::string body = "{\"points\":[";
        for (size_t i = 0; i < b.texts.size(); ++i) {
          const auto& v = (*vecs)[i];
          if (v.size() != dim) {
            return Status::failedPrecondition("model " + o.model + " returns " +
                                              std::to_string(v.size()) +
                                              "-dimensional vectors; collection " + collection +
                                              " has dimension " + std::to_string(dim));
          }
          nlohmann::json payload = std::move(b.payloads[i]);
          if (!o.text_key.empty()) payload[o.text_key] = b.texts[i];
          appendPoint(body, b.ids[i], v.data(), v.size(), payload);
        }
        body += "]}";
        const Status s = client.upsert(collection, body);
        if (!s.isOk())
          return s.withContext("lines " + std::to_string(b.first_line) + "-" +
                               std::to_string(b.last_line));
        return Status::ok();
      },
      [&](const Batch& b, uint64_t prefix_points) {
        std::lock_guard lock(cp_mu);
        Checkpoint next = cp;
        next.offset = b.end_offset;
        next.line = b.last_line;
        next.points = base_points + prefix_points;
        next.prefix_hash = b.end_hash;
        if (Status s = writeCheckpoint(report.checkpoint, next); !s.isOk()) {
          if (cp_status.isOk()) cp_status = s;
          return;
        }
        cp = next;
      });
  auto tick = [&] {
    if (!o.progress) return;
    Progress p;
    p.points = pipe.donePoints();
    p.bytes = lines.offset();
    p.total_bytes = lines.size();
    {
      std::lock_guard lock(retries_mu);
      p.retries = retries + client.retries();
    }
    p.seconds = since(t0);
    o.progress(p);
  };

  Batch b;
  std::string_view line;
  Status bad;
  for (;;) {
    const bool more = lines.next(line);
    if (more && line.find_first_not_of(" \t") != std::string_view::npos) {
      nlohmann::json id, payload;
      std::string text;
      if (Status s = parseTextLine(lines, line, id, text, payload); !s.isOk()) {
        bad = std::move(s);
        break;
      }
      if (b.points == 0) b.first_line = lines.line();
      b.ids.push_back(std::move(id));
      b.texts.push_back(std::move(text));
      b.payloads.push_back(std::move(payload));
      ++b.points;
    }
    if (more) {
      b.last_line = lines.line();
      b.end_offset = lines.offset();
      b.end_hash = lines.hash();
    }
    const bool full = b.points >= std::max<size_t>(o.batch, 1);
    if ((full || !more) && (b.points > 0 || b.end_offset > cp.offset)) {
      if (!pipe.push(std::move(b), tick)) break;
      b = Batch();
    }
    if (!more) break;
  }
  const Status sent = pipe.finish(tick);
  tick();
  report.points = pipe.donePoints();
  report.seconds = since(t0);
  report.retries = retries + client.retries();
  {
    std::lock_guard lock(cp_mu);
    report.lines = cp.line;
  }
  if (!sent.isOk()) {
    return Status(sent.code(), sent.message() + "; the checkpoint " + report.checkpoint +
                                   " holds lines 1-" + std::to_string(report.lines) +
                                   " (rerun to resume)");
  }
  if (!cp_status.isOk()) return cp_status;
  if (!bad.isOk()) {
    return Status(bad.code(), bad.message() +
                                  "; its batch was refused, nothing of it sent; lines 1-" +
                                  std::to_string(report.lines) + " are upserted (checkpoint " +
                                  report.checkpoint + ")");
  }
  return report;
}

}  // namespace infera::vectors
