#pragma once
// JSON-lines access log, off the hot path: each worker appends to its own buffer (no lock); every
// flush interval the worker hands the buffer to the writer thread. Bounded: when the writer falls
// behind by more than max_pending_bytes, lines are dropped and counted. Never logs bodies or keys.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace infera::obs {

struct AccessRecord {
  int64_t unix_ms = 0;
  std::string_view request_id;
  std::string_view method;
  std::string_view path;
  std::string_view model;
  std::string_view deployment;
  std::string_view endpoint;
  int status = 0;
  double duration_s = 0;
  double ttfb_s = 0;  // upstream time to first byte (0 when none)
  int attempts = 0;
  bool stream = false;
  uint64_t bytes_out = 0;
};

class AccessLog {
 public:
  // path "-" = stdout. shards = number of workers.
  static Result<std::unique_ptr<AccessLog>> open(const std::string& path, int shards,
                                                 size_t max_pending_bytes = 64 << 20);
  ~AccessLog();

  // Appends a line to the shard's buffer. Called on the shard's worker only.
  void append(int shard, const AccessRecord& record);
  // Hands the shard's buffer to the writer. Called on the shard's worker (e.g. from a timer).
  void flushShard(int shard);
  // Writes everything handed over so far (blocking; for shutdown and tests).
  void sync();
  uint64_t dropped() const { return dropped_.load(); }

 private:
  AccessLog(int fd, bool owns_fd, int shards, size_t max_pending);
  void writerLoop();

  int fd_;
  bool owns_fd_;
  size_t max_pending_;
  struct alignas(64) Shard {
    std::string buf;
  };
  std::vector<Shard> shards_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable synced_cv_;
  std::vector<std::string> pending_;
  size_t pending_bytes_ = 0;
  uint64_t handed_ = 0;
  uint64_t written_ = 0;
  bool stop_ = false;
  std::atomic<uint64_t> dropped_{0};
  std::thread writer_;
};

// A request id: the client's x-request-id if it is sane (<= 128 printable chars), else a new
// 32-hex-digit id from a per-worker generator.
class RequestIdGenerator {
 public:
  explicit RequestIdGenerator(uint64_t seed);
  std::string next();

 private:
  uint64_t state_;
  uint64_t counter_ = 0;
};
bool isAcceptableRequestId(std::string_view id);

}  // namespace infera::obs
