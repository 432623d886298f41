#pragma once
// Every collection of a data directory, and the writer threads that change them. A write is
// appended to its collection's WAL and fsynced (one fsync per collection per group of queued
// writes), then applied; `durable` runs after the fsync, `applied` once searches see it. Creating
// and dropping collections runs on the same threads (a collection always goes to the same one), so
// a collection's operations stay in order. Every `periodic snapshot` writes the collection's state
// and empties its WAL. Callbacks run on a writer thread: post to a loop from them.
//
// Layout: DATA_DIR/collections/<encoded name>/{config.json, snapshot.bin, wal.log}. config.json
// holds the name, the parameters and the owning team ("owner"; absent in stores written before
// ownership was recorded, which read as shared).
// A job that throws on a writer thread (a bug) is logged and answered kInternal; it never ends
// the thread or the process.
// Thread-safe.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "vectors/internal/collection.h"
#include "vectors/internal/wal.h"

namespace infera::vectors {

struct StoreOptions {
  std::string data_dir;
  int write_threads = 1;
  size_t max_queued = 1024;  // per thread; beyond it writes are refused (503)
  // A snapshot once this many points were written since the last (or an eighth of the collection,
  // if more): bounds both the WAL to replay at a restart and the snapshot work per write.
  uint64_t snapshot_min_points = 20'000;
  bool fsync = true;
};

struct CollectionEntry {
  CollectionEntry(std::string n, CollectionParams p, std::string team = {})
      : name(n), owner(std::move(team)), coll(std::move(n), p) {}
  std::string name;
  // The team that created it through the data port; empty: shared (made on the admin port, without
  // access control, or before ownership was recorded). Set once, before the entry is published.
  std::string owner;
  std::string dir;
  Collection coll;
  std::unique_ptr<Wal> wal;  // writer thread only
  uint64_t next_seq = 0;     // writer thread only
  uint64_t ops_since_snapshot = 0;
  std::atomic<bool> dropped{false};
};

class Store {
 public:
  using Done = std::function<void(Status, uint64_t op_id)>;
  using Job = std::function<Status()>;

  // Opens the data dir, loads every collection (snapshot, then its WAL's tail), starts the writers.
  static Result<std::unique_ptr<Store>> open(StoreOptions options);
  // Finishes the queued writes, then stops the writers.
  ~Store();

  std::shared_ptr<CollectionEntry> find(const std::string& name) const;
  std::vector<std::string> names() const;
  std::vector<std::shared_ptr<CollectionEntry>> entries() const;

  // kResourceExhausted when the writer's queue is full.
  Status submit(std::shared_ptr<CollectionEntry> entry, Op op, Done durable, Done applied);
  // result: ok, or kAlreadyExists (an existing collection is never replaced, whoever owns it).
  // `owner`: the owning team ("" = shared).
  Status create(const std::string& name, const CollectionParams& params, const std::string& owner,
                std::function<void(Status)> done);
  // Drops `entry` if it is still the collection of its name (one re-created since it was looked
  // up, maybe by another team, is left alone). result: ok, or kNotFound when it was not.
  Status drop(std::shared_ptr<CollectionEntry> entry, std::function<void(Status)> done);
  // Runs `job` on the writer thread of collection `name`, in order with that collection's writes;
  // `done` (on that thread) gets its result, or kInternal when it threw (logged). The returned
  // status: kResourceExhausted when the writer's queue is full (then nothing runs).
  Status runOnWriter(const std::string& name, Job job, std::function<void(Status)> done);

  // Writes a snapshot of every collection now (tests, shutdown). Blocking.
  void snapshotAll();
  // How long opening took, and what it loaded (the restart figures).
  double openSeconds() const { return open_seconds_; }
  uint64_t replayedOps() const { return replayed_ops_; }

 private:
  struct Task {
    std::shared_ptr<CollectionEntry> entry;  // an op
    Op op;
    Done durable, applied;
    Job meta;  // or a job (create, drop, snapshot): runs alone, then meta_done gets its result
    std::function<void(Status)> meta_done;
    std::string meta_collection;  // for the log
  };
  struct Thread {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Task> queue;
    bool stop = false;
    std::thread thread;
  };
  explicit Store(StoreOptions options) : options_(std::move(options)) {}
  Status load();
  Result<std::shared_ptr<CollectionEntry>> openCollection(const std::string& dir);
  Thread& threadFor(const std::string& name);
  Status enqueue(Thread& t, Task task);
  void run(Thread& t);
  void flushGroup(std::vector<Task>& group);
  Status snapshot(CollectionEntry& e);

  StoreOptions options_;
  mutable std::shared_mutex mu_;
  std::map<std::string, std::shared_ptr<CollectionEntry>> collections_;
  std::vector<std::unique_ptr<Thread>> threads_;
  double open_seconds_ = 0;
  uint64_t replayed_ops_ = 0;
};

// A collection's directory name: [A-Za-z0-9_-] kept, other bytes as %XX.
std::string encodeDirName(const std::string& name);

}  // namespace infera::vectors
