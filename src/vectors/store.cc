#include "vectors/internal/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/log.h"
#include "core/utf8.h"

namespace infera::vectors {
namespace {

namespace fs = std::filesystem;

Status syncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::internal("cannot open " + dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::ok() : Status::internal("fsync " + dir + " failed");
}

Status writeFileDurably(const std::string& file, const std::string& text) {
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return Status::internal("cannot write " + tmp);
  }
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) return Status::internal("cannot rename " + tmp + ": " + ec.message());
  return syncDir(fs::path(file).parent_path().string());
}

// The one place a writer thread meets an exception from the work it runs (a bug: the engine
// reports errors as Status): logged and turned into kInternal, so it costs one request, never the
// writer thread (whose queue would stall) or the process (std::terminate).
template <typename F>
Status guarded(std::string_view what, const std::string& collection, F&& job) noexcept {
  std::string why;
  try {
    return job();
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
    why = "an exception that is not a std::exception";
  }
  why = toValidUtf8(why);
  INFERA_LOG(componentLogger("vectors"), err, "vectors: {} of collection {} threw: {}", what,
             toValidUtf8(collection), why);
  return Status::internal("Service internal error: " + std::string(what) + " failed: " + why);
}

}  // namespace

std::string encodeDirName(const std::string& name) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : name) {
    if (std::isalnum(c) || c == '_' || c == '-') {
      out.push_back(char(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

Result<std::unique_ptr<Store>> Store::open(StoreOptions options) {
  std::unique_ptr<Store> s(new Store(std::move(options)));
  const auto t0 = std::chrono::steady_clock::now();
  INFERA_RETURN_IF_ERROR(s->load());
  s->open_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < std::max(1, s->options_.write_threads); ++i) {
    s->threads_.push_back(std::make_unique<Thread>());
  }
  for (auto& t : s->threads_) {
    Thread* raw = t.get();
    Store* self = s.get();
    t->thread = std::thread([self, raw] { self->run(*raw); });
  }
  return s;
}

Store::~Store() {
  for (auto& t : threads_) {
    {
      std::lock_guard<std::mutex> lock(t->mu);
      t->stop = true;
    }
    t->cv.notify_all();
  }
  for (auto& t : threads_) {
    if (t->thread.joinable()) t->thread.join();
  }
}

Status Store::load() {
  std::error_code ec;
  const fs::path root = fs::path(options_.data_dir) / "collections";
  fs::create_directories(root, ec);
  if (ec) return Status::internal("cannot create " + root.string() + ": " + ec.message());
  std::vector<fs::path> dirs;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    if (!d.is_directory()) continue;
    if (!fs::exists(d.path() / "config.json")) {
      fs::remove_all(d.path(), ec);  // a create that crashed before it was acknowledged
      continue;
    }
    dirs.push_back(d.path());
  }
  if (ec) return Status::internal("cannot list " + root.string() + ": " + ec.message());
  std::sort(dirs.begin(), dirs.end());  // the same spellings below at every start
  std::vector<std::shared_ptr<CollectionEntry>> renamed;
  for (const fs::path& d : dirs) {
    INFERA_ASSIGN_OR_RETURN(auto entry, openCollection(d.string()));
    if (!validUtf8(entry->name) || collections_.count(entry->name)) {
      renamed.push_back(std::move(entry));
      continue;
    }
    collections_[entry->name] = std::move(entry);
  }
  // Names stored before the door refused ill-formed UTF-8: an older version wrote them to
  // config.json with U+FFFD in place of the bytes, so two of them may read the same. Each is
  // served under a unique valid spelling, so it can be listed, read and dropped.
  for (auto& entry : renamed) {
    std::string shown = toValidUtf8(entry->name);
    while (collections_.count(shown)) shown += "~";
    INFERA_LOG(componentLogger("vectors"), warn,
               "vectors: the collection in {} is named like another or not in valid UTF-8; "
               "served as \"{}\"",
               entry->dir, shown);
    entry->name = shown;
    collections_[shown] = std::move(entry);
  }
  return Status::ok();
}

Result<std::shared_ptr<CollectionEntry>> Store::openCollection(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  auto cfg = parseStoredJson(text.str());
  if (!cfg.ok() || !cfg->is_object() || !(*cfg)["name"].is_string()) {
    return Status::internal("bad " + dir + "/config.json");
  }
  INFERA_ASSIGN_OR_RETURN(CollectionParams params, paramsFromJson((*cfg)["params"]));
  params.disk_dir = dir;  // on_disk vectors map their files here
  // No "owner": written before ownership was recorded, so shared.
  const Json& owner = cfg->contains("owner") ? (*cfg)["owner"] : Json();
  auto e = std::make_shared<CollectionEntry>((*cfg)["name"].get<std::string>(), params,
                                             owner.is_string() ? owner.get<std::string>() : "");
  e->dir = dir;
  if (fs::exists(dir + "/snapshot.bin")) {
    INFERA_RETURN_IF_ERROR(e->coll.load(dir + "/snapshot.bin"));
  }
  INFERA_ASSIGN_OR_RETURN(e->wal, Wal::open(dir + "/wal.log", options_.fsync));
  const uint64_t base = e->coll.appliedSeq();
  uint64_t replayed = 0;
  INFERA_ASSIGN_OR_RETURN(
      uint64_t last, e->wal->replay([&](uint64_t seq, std::string_view bytes) -> Status {
        if (seq <= base) return Status::ok();  // already in the snapshot
        INFERA_ASSIGN_OR_RETURN(Op op, decodeOp(bytes));
        // An op that failed when first applied (or threw) fails the same way again.
        (void)guarded("replaying an operation", e->name, [&] { return e->coll.apply(op, seq); });
        replayed += std::max<size_t>(1, op.ids.size());
        return Status::ok();
      }));
  e->next_seq = std::max(base, last) + 1;
  e->ops_since_snapshot = replayed;
  replayed_ops_ += replayed;
  return e;
}

std::shared_ptr<CollectionEntry> Store::find(const std::string& name) const {
  std::shared_lock lock(mu_);
  const auto it = collections_.find(name);
  return it == collections_.end() ? nullptr : it->second;
}

std::vector<std::string> Store::names() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [n, e] : collections_) out.push_back(n);
  return out;
}

std::vector<std::shared_ptr<CollectionEntry>> Store::entries() const {
  std::shared_lock lock(mu_);
  std::vector<std::shared_ptr<CollectionEntry>> out;
  for (const auto& [n, e] : collections_) out.push_back(e);
  return out;
}

Store::Thread& Store::threadFor(const std::string& name) {
  return *threads_[std::hash<std::string>{}(name) % threads_.size()];
}

Status Store::enqueue(Thread& t, Task task) {
  {
    std::lock_guard<std::mutex> lock(t.mu);
    if (t.queue.size() >= options_.max_queued) {
      return Status::unavailable("Service internal error: the write queue is full, retry later");
    }
    t.queue.push_back(std::move(task));
  }
  t.cv.notify_one();
  return Status::ok();
}

Status Store::submit(std::shared_ptr<CollectionEntry> entry, Op op, Done durable, Done applied) {
  Thread& t = threadFor(entry->name);
  Task task;
  task.entry = std::move(entry);
  task.op = std::move(op);
  task.durable = std::move(durable);
  task.applied = std::move(applied);
  return enqueue(t, std::move(task));
}

Status Store::runOnWriter(const std::string& name, Job job, std::function<void(Status)> done) {
  Task task;
  task.meta = std::move(job);
  task.meta_done = std::move(done);
  task.meta_collection = name;
  return enqueue(threadFor(name), std::move(task));
}

Status Store::create(const std::string& name, const CollectionParams& params,
                     const std::string& owner, std::function<void(Status)> done) {
  // On the collection's writer thread, so it is ordered with every other create and drop of the
  // name: the check below cannot race another create.
  return runOnWriter(
      name,
      [this, name, params, owner]() -> Status {
        if (!validUtf8(name)) {
          return Status::invalidArgument(
              "Validation error in path parameters: [collection_name: must be valid UTF-8]");
        }
        if (find(name)) {
          return Status::alreadyExists("Wrong input: Collection `" + name + "` already exists!");
        }
        const std::string dir =
            (fs::path(options_.data_dir) / "collections" / encodeDirName(name)).string();
        std::error_code ec;
        // A directory with a config.json belongs to a collection served under another name (one
        // stored before the door refused ill-formed UTF-8, renamed at start): never reused. One
        // without is a create that failed half-way, cleared.
        if (fs::exists(fs::path(dir) / "config.json", ec)) {
          return Status::alreadyExists("Wrong input: Collection `" + name +
                                       "` cannot be created: its directory " + dir +
                                       " holds a collection served under another name");
        }
        fs::remove_all(dir, ec);
        fs::create_directories(dir, ec);
        if (ec) return Status::internal("Service internal error: cannot create " + dir);
        CollectionParams in_dir = params;
        in_dir.disk_dir = dir;  // on_disk vectors map their files here
        auto e = std::make_shared<CollectionEntry>(name, in_dir, owner);
        e->dir = dir;
        e->next_seq = 1;
        Json cfg;
        cfg["name"] = name;
        cfg["params"] = paramsToJson(params);
        if (!owner.empty()) cfg["owner"] = owner;
        INFERA_RETURN_IF_ERROR(writeFileDurably(dir + "/config.json", dumpJson(cfg)));
        INFERA_ASSIGN_OR_RETURN(e->wal, Wal::open(dir + "/wal.log", options_.fsync));
        std::unique_lock lock(mu_);
        collections_[name] = std::move(e);
        return Status::ok();
      },
      std::move(done));
}

Status Store::drop(std::shared_ptr<CollectionEntry> entry, std::function<void(Status)> done) {
  const std::string name = entry->name;
  return runOnWriter(
      name,
      [this, entry = std::move(entry)]() -> Status {
        {
          std::unique_lock lock(mu_);
          const auto it = collections_.find(entry->name);
          if (it == collections_.end() || it->second != entry) {
            return Status::notFound("Not found: Collection `" + entry->name + "` doesn't exist!");
          }
          collections_.erase(it);
        }
        entry->dropped = true;
        std::error_code ec;
        // config.json goes first: a crash mid-removal leaves a directory load() discards.
        fs::remove(entry->dir + "/config.json", ec);
        (void)syncDir(fs::path(entry->dir).parent_path().string());
        fs::remove_all(entry->dir, ec);
        return Status::ok();
      },
      std::move(done));
}

void Store::run(Thread& t) {
  std::vector<Task> batch;
  std::vector<Task> group;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(t.mu);
      t.cv.wait(lock, [&] { return t.stop || !t.queue.empty(); });
      if (t.queue.empty() && t.stop) return;
      while (!t.queue.empty() && batch.size() < 512) {
        batch.push_back(std::move(t.queue.front()));
        t.queue.pop_front();
      }
    }
    for (auto& task : batch) {
      if (task.meta) {
        flushGroup(group);
        Status s = guarded("a job", task.meta_collection, task.meta);
        if (task.meta_done) task.meta_done(std::move(s));
      } else {
        group.push_back(std::move(task));
      }
    }
    flushGroup(group);
    batch.clear();
  }
}

// One group commit: every op appended to its WAL, one fsync per collection, then applied in order.
void Store::flushGroup(std::vector<Task>& group) {
  if (group.empty()) return;
  std::vector<uint64_t> seqs(group.size(), 0);
  std::vector<CollectionEntry*> touched;
  for (size_t i = 0; i < group.size(); ++i) {
    CollectionEntry& e = *group[i].entry;
    if (e.dropped) continue;
    seqs[i] = e.next_seq++;
    e.wal->append(seqs[i], encodeOp(group[i].op));
    if (std::find(touched.begin(), touched.end(), &e) == touched.end()) touched.push_back(&e);
  }
  std::vector<std::pair<CollectionEntry*, Status>> synced;
  for (CollectionEntry* e : touched) synced.emplace_back(e, e->wal->sync());
  auto syncStatus = [&](CollectionEntry* e) {
    for (auto& [x, s] : synced) {
      if (x == e) return s;
    }
    return Status::ok();
  };
  for (size_t i = 0; i < group.size(); ++i) {
    Task& task = group[i];
    CollectionEntry& e = *task.entry;
    if (e.dropped) {
      const Status gone = Status::notFound("Not found: Collection `" + e.name + "` doesn't exist!");
      if (task.durable) task.durable(gone, 0);
      if (task.applied) task.applied(gone, 0);
      continue;
    }
    Status s = syncStatus(&e);
    if (!s.isOk()) {
      if (task.durable) task.durable(s, seqs[i]);
      if (task.applied) task.applied(s, seqs[i]);
      continue;
    }
    if (task.durable) task.durable(Status::ok(), seqs[i]);
  }
  for (size_t i = 0; i < group.size(); ++i) {
    Task& task = group[i];
    CollectionEntry& e = *task.entry;
    if (e.dropped || !syncStatus(&e).isOk()) continue;
    Status s =
        guarded("applying an operation", e.name, [&] { return e.coll.apply(task.op, seqs[i]); });
    e.ops_since_snapshot += std::max<size_t>(1, task.op.ids.size());
    if (task.applied) task.applied(std::move(s), seqs[i]);
  }
  for (CollectionEntry* e : touched) {
    if (!e->dropped && e->ops_since_snapshot >=
                           std::max<uint64_t>(options_.snapshot_min_points, e->coll.points() / 8)) {
      const Status s = guarded("a snapshot", e->name, [&] { return snapshot(*e); });
      if (!s.isOk())
        INFERA_LOG(componentLogger("vectors"), err, "snapshot of {} failed: {}", e->name,
                   s.message());
    }
  }
  group.clear();
}

Status Store::snapshot(CollectionEntry& e) {
  const std::string tmp = e.dir + "/snapshot.tmp";
  INFERA_RETURN_IF_ERROR(e.coll.save(tmp));
  std::error_code ec;
  fs::rename(tmp, e.dir + "/snapshot.bin", ec);
  if (ec) return Status::internal("cannot rename " + tmp);
  INFERA_RETURN_IF_ERROR(syncDir(e.dir));
  INFERA_RETURN_IF_ERROR(e.wal->reset());
  e.ops_since_snapshot = 0;
  return Status::ok();
}

void Store::snapshotAll() {
  for (const auto& name : names()) {
    auto e = find(name);
    if (!e) continue;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    const Status queued = runOnWriter(
        name, [&] { return e->dropped ? Status::ok() : snapshot(*e); },
        [&](Status) {
          std::lock_guard<std::mutex> lock(mu);
          done = true;
          cv.notify_all();
        });
    if (!queued.isOk()) continue;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
}

}  // namespace infera::vectors
