#pragma once
// Batches sent by a bounded set of threads (loadFile, embedFile): the reader pushes batches in
// order, at most `concurrency` are queued or in flight, the first failure stops everything not yet
// started, and `on_prefix` sees the last batch of every new contiguous run of finished batches
// (in order) with the points of every batch up to it, which is what a checkpoint may record.
// Work that throws fails its batch with kInternal (the pipeline stops as on any failure).
//
// Threads: push/finish from one thread (the reader); work and on_prefix on the pipeline's threads
// (on_prefix under the pipeline's lock, so calls never overlap).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace infera::vectors {

struct Batch {
  uint64_t seq = 0;         // 0, 1, 2, ... in push order (set by push)
  uint64_t first_line = 0;  // lines (or records) it holds
  uint64_t last_line = 0;
  uint64_t end_offset = 0;  // input byte offset after its last line
  uint64_t end_hash = 0;    // embedFile: the input's hash up to end_offset
  size_t points = 0;
  std::string body;                 // loadFile: the upsert body
  std::vector<nlohmann::json> ids;  // embedFile: the points to embed
  std::vector<std::string> texts;
  std::vector<nlohmann::json> payloads;
};

class Pipeline {
 public:
  using Work = std::function<Status(Batch&)>;
  using Prefix = std::function<void(const Batch& last, uint64_t prefix_points)>;
  Pipeline(int concurrency, Work work, Prefix on_prefix = {});
  ~Pipeline();  // finish()es
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Queues `b`, waiting while `concurrency` batches are queued or in flight (calling `tick` about
  // every 100 ms while it waits). False once a batch failed: nothing more will be sent.
  bool push(Batch b, const std::function<void()>& tick = {});
  // Waits for every batch (ticking likewise); the first failure, or ok.
  Status finish(const std::function<void()>& tick = {});
  // Points of the batches done so far.
  uint64_t donePoints() const;

 private:
  void run();
  Status guardedWork(Batch& b) noexcept;
  void waitUntil(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                 const std::function<void()>& tick);

  const size_t limit_;
  Work work_;
  Prefix on_prefix_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  size_t in_flight_ = 0;  // queued + running
  bool stop_ = false;
  Status failed_;
  uint64_t next_seq_ = 0;
  uint64_t prefix_seq_ = 0;         // every batch below this is done
  std::map<uint64_t, Batch> done_;  // done, above the prefix (bodies dropped)
  uint64_t done_points_ = 0;
  uint64_t prefix_points_ = 0;  // points of the batches below prefix_seq_
  std::vector<std::thread> threads_;
};

}  // namespace infera::vectors
