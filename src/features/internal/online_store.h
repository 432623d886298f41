#pragma once
// The online store seam: one interface, two implementations (RocksDB embedded, Redis scale-out)
// that pass one contract suite (tests/features/store_contract_test.cc).
//
// Data model: a view (by storage id) maps entity keys to rows; a row starts with its event time
// (values.h). The contract:
//   - write(): per key the row with the newest event time wins; an older event never replaces a
//     newer one (equal times: the later write wins). All-or-nothing per call for RocksDB (one
//     WriteBatch); Redis applies each key atomically.
//   - put(): unconditional (aggregation states, written by their one writer).
//   - read(): rows in the order of the keys, empty where none is stored. Expiry on read is the
//     serving layer's (it knows each view's ttl and the clock); the stores reclaim space on their
//     own: RocksDB's compaction filter drops rows past event time + ttl + retain_expired, Redis
//     expires the key then (expire_at_us).
//   - dropView(): frees the view's storage (RocksDB: drops its column family; Redis: deletes its
//     keys). meta: one blob (the registry) kept beside the data.
// Times come from the injected clock.
//
// Threads: OnlineStore's methods are blocking and thread-safe (call them from the worker pool or
// the control thread, never from a loop). A Session belongs to one loop: its tasks run there
// and never block it (RocksDB hands the work to the pool; Redis uses the loop's async client).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "net/asio.h"

namespace infera::features {

class WorkerPool;

struct RowWrite {
  uint32_t view = 0;
  std::string key;
  std::string row;           // [event time][entries]
  int64_t expire_at_us = 0;  // 0 = never
};

struct ReadKey {
  uint32_t view = 0;
  std::string_view key;
};

struct StoreStats {
  int64_t keys = 0;   // approximate
  int64_t bytes = 0;  // approximate live bytes (RocksDB: SST + memtables; Redis: used_memory)
};

class Session {
 public:
  virtual ~Session() = default;
  // `rows` is resized to keys.size(); an empty string where nothing (live) is stored.
  virtual net::Task<Status> read(std::span<const ReadKey> keys, std::vector<std::string>& rows) = 0;
  virtual net::Task<Status> write(std::vector<RowWrite> rows) = 0;
};

class OnlineStore {
 public:
  virtual ~OnlineStore() = default;

  // Makes the view's storage exist (idempotent); `ttl_s` + retain is what the store's own expiry
  // uses (RocksDB's compaction filter). setTtl() changes it for an existing view.
  virtual Status createView(uint32_t view, int64_t ttl_s) = 0;
  virtual Status dropView(uint32_t view) = 0;
  // Views with storage the store can list (RocksDB: its column families; Redis: none, scanning
  // every key is too dear), so that storage a crash left behind is freed at start.
  virtual std::vector<uint32_t> storedViews() = 0;

  virtual Status write(std::vector<RowWrite> rows) = 0;
  virtual Status put(std::vector<RowWrite> rows) = 0;
  virtual Status read(std::span<const ReadKey> keys, std::vector<std::string>& rows) = 0;

  virtual Result<std::string> loadMeta() = 0;  // empty when none was saved
  virtual Status saveMeta(const std::string& blob) = 0;

  // The per-loop side; `pool` runs the blocking work of stores that have any.
  virtual std::unique_ptr<Session> session(net::asio::io_context& ctx, WorkerPool& pool) = 0;

  // Forces the store's own expiry now (RocksDB: a full compaction; Redis: nothing to do). Tests.
  virtual Status compact() = 0;
  virtual StoreStats stats() = 0;
  virtual std::string_view kind() const = 0;
};

struct RocksDbOptions {
  std::string path;
  int64_t retain_expired_s = 0;
  bool sync_writes = false;  // fsync the WAL per write (survives power loss; kill -9 needs no sync)
  size_t block_cache_bytes = 256 << 20;
};
Result<std::unique_ptr<OnlineStore>> openRocksDbStore(const RocksDbOptions& options,
                                                      const Clock& clock);

struct RedisStoreOptions {
  std::string url;
  std::string prefix = "infera:f:";
  int64_t retain_expired_s = 0;
  int64_t timeout_ms = 200;
};
Result<std::unique_ptr<OnlineStore>> openRedisStore(const RedisStoreOptions& options,
                                                    const Clock& clock);

}  // namespace infera::features
