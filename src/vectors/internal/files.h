#pragma once
// Reading the inputs of loadFile/embedFile: text lines with their byte offsets (for progress and
// the embedding checkpoint), and the error text every reader uses.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/status.h"

namespace infera::vectors {

// FNV-1a over bytes, continued from `h` (the hash of what came before them).
uint64_t fnv1a(const char* p, size_t n, uint64_t h = 1469598103934665603ull);

// Lines of a file without their '\n' (and a '\r' before it), and the FNV-1a hash of every byte
// from the file's start to offset(). Not thread-safe.
class LineReader {
 public:
  LineReader() = default;
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // kNotFound when the file cannot be opened; starts at byte `offset`, counting lines from
  // `first_line` (the 1-based number of the line at that offset); `prefix_hash` is the hash of
  // the bytes before `offset` (0 with offset 0: the empty hash).
  Status open(const std::string& path, uint64_t offset = 0, uint64_t first_line = 1,
              uint64_t prefix_hash = 0);
  // The next line into `line`: false at the end. line() is its number, offset() the byte after it.
  bool next(std::string_view& line);
  uint64_t line() const { return line_; }
  uint64_t offset() const { return offset_; }
  uint64_t size() const { return size_; }
  uint64_t hash() const { return hash_; }
  const std::string& path() const { return path_; }

 private:
  std::FILE* f_ = nullptr;
  char* buf_ = nullptr;
  size_t cap_ = 0;
  std::string path_;
  uint64_t line_ = 0;
  uint64_t offset_ = 0;
  uint64_t size_ = 0;
  uint64_t hash_ = 0;
};

// kInvalidArgument "PATH:LINE:COLUMN: message" (COLUMN 1-based; 0 leaves it out).
Status lineError(const std::string& path, uint64_t line, size_t column, const std::string& message);

}  // namespace infera::vectors
