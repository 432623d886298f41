#include "vectors/internal/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/log.h"

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
  for (const auto& d : fs::directory_iterator(root, ec)) {
    if (!d.is_directory()) continue;
    if (!fs::exists(d.path() / "config.json")) {
      fs::remove_all(d.path(), ec);  // a create that crashed before it was acknowledged
      continue;
    }
    INFERA_ASSIGN_OR_RETURN(auto entry, openCollection(d.path().string()));
    collections_[entry->name] = std::move(entry);
  }
  if (ec) return Status::internal("cannot list " + root.string() + ": " + ec.message());
  return Status::ok();
}

Result<std::shared_ptr<CollectionEntry>> Store::openCollection(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  auto cfg = parseJson(text.str());
  if (!cfg.ok() || !cfg->is_object() || !(*cfg)["name"].is_string()) {
    return Status::internal("bad " + dir + "/config.json");
  }
  INFERA_ASSIGN_OR_RETURN(CollectionParams params, paramsFromJson((*cfg)["params"]));
  auto e = std::make_shared<CollectionEntry>((*cfg)["name"].get<std::string>(), params);
  e->dir = dir;
  if (fs::exists(dir + "/snapshot.bin")) {
    INFERA_RETURN_IF_ERROR(e->coll.load(dir + "/snapshot.bin"));
  }
  INFERA_ASSIGN_OR_RETURN(e->wal, Wal::open(dir + "/wal.log", options_.fsync));
  const uint64_t base = e->coll.appliedSeq();
  uint64_t replayed = 0;
  INFERA_ASSIGN_OR_RETURN(uint64_t last, e->wal->replay([&](uint64_t seq,
                                                            std::string_view bytes) -> Status {
    if (seq <= base) return Status::ok();  // already in the snapshot
    INFERA_ASSIGN_OR_RETURN(Op op, decodeOp(bytes));
    (void)e->coll.apply(op, seq);  // an op that failed when first applied fails the same way again
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

Status Store::create(const std::string& name, const CollectionParams& params,
                     std::function<void(Status)> done) {
  Task task;
  task.meta = [this, name, params, done = std::move(done)] {
    if (find(name)) {
      done(Status::alreadyExists("Wrong input: Collection `" + name + "` already exists!"));
      return;
    }
    const std::string dir =
        (fs::path(options_.data_dir) / "collections" / encodeDirName(name)).string();
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    auto e = std::make_shared<CollectionEntry>(name, params);
    e->dir = dir;
    e->next_seq = 1;
    Json cfg;
    cfg["name"] = name;
    cfg["params"] = paramsToJson(params);
    Status s = ec ? Status::internal("Service internal error: cannot create " + dir) : Status::ok();
    if (s.isOk()) s = writeFileDurably(dir + "/config.json", dumpJson(cfg));
    if (s.isOk()) {
      auto wal = Wal::open(dir + "/wal.log", options_.fsync);
      if (wal.ok()) {
        e->wal = std::move(*wal);
      } else {
        s = wal.takeStatus();
      }
    }
    if (s.isOk()) {
      std::unique_lock lock(mu_);
      collections_[name] = std::move(e);
    }
    done(std::move(s));
  };
  return enqueue(threadFor(name), std::move(task));
}

Status Store::drop(const std::string& name, std::function<void(bool)> done) {
  Task task;
  task.meta = [this, name, done = std::move(done)] {
    std::shared_ptr<CollectionEntry> e;
    {
      std::unique_lock lock(mu_);
      const auto it = collections_.find(name);
      if (it != collections_.end()) {
        e = it->second;
        collections_.erase(it);
      }
    }
    if (e) {
      e->dropped = true;
      std::error_code ec;
      // config.json goes first: a crash mid-removal leaves a directory load() discards.
      fs::remove(e->dir + "/config.json", ec);
      (void)syncDir(fs::path(e->dir).parent_path().string());
      fs::remove_all(e->dir, ec);
    }
    done(e != nullptr);
  };
  return enqueue(threadFor(name), std::move(task));
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
        task.meta();
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
    Status s = e.coll.apply(task.op, seqs[i]);
    e.ops_since_snapshot += std::max<size_t>(1, task.op.ids.size());
    if (task.applied) task.applied(std::move(s), seqs[i]);
  }
  for (CollectionEntry* e : touched) {
    if (!e->dropped && e->ops_since_snapshot >=
                           std::max<uint64_t>(options_.snapshot_min_points, e->coll.points() / 8)) {
      const Status s = snapshot(*e);
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
    Task task;
    task.meta = [&] {
      if (!e->dropped) (void)snapshot(*e);
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      cv.notify_all();
    };
    if (!enqueue(threadFor(name), std::move(task)).isOk()) continue;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
}

}  // namespace infera::vectors
