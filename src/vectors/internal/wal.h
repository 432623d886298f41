#pragma once
// A collection's write-ahead log: one append-only file of records [u32 length][u32 crc32][u64
// seq][op bytes]. append() buffers, sync() writes and fdatasyncs (a write is acknowledged only
// after it); replay() stops at the first torn or corrupt record (a crash mid-write) and truncates
// the file there. reset() empties the log once a snapshot holds everything in it.
// Used by the collection's writer thread only.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace infera::vectors {

uint32_t crc32(std::string_view data);

class Wal {
 public:
  static Result<std::unique_ptr<Wal>> open(const std::string& file, bool fsync);
  ~Wal();

  // Calls fn for every intact record in order; returns the last seq seen (0: none).
  Result<uint64_t> replay(const std::function<Status(uint64_t seq, std::string_view op)>& fn);
  void append(uint64_t seq, std::string_view op);
  Status sync();
  Status reset();
  uint64_t bytes() const { return size_; }

 private:
  Wal(int fd, std::string file, bool fsync) : fd_(fd), file_(std::move(file)), fsync_(fsync) {}
  int fd_;
  std::string file_;
  bool fsync_;
  std::string pending_;
  uint64_t size_ = 0;
};

}  // namespace infera::vectors
