#pragma once
// Batch internals: file bytes under the file directory, one file per id. A new file is written to
// a temporary name beside its destination, hashed (sha256) and counted as it is written, synced
// and renamed into place on commit, so a reader never sees half a file and a failed upload leaves
// nothing. Reads are positioned (pread), a piece at a time. Blocking: call from a pool thread or
// the executor.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace infera::batch {

class FileDir {
 public:
  explicit FileDir(std::string root) : root_(std::move(root)) {}
  // Creates the directory (0700) and removes half-written files untouched for an hour (a killed
  // upload's).
  Status init();

  struct Writer;
  struct WriterDeleter {
    void operator()(Writer* w) const;  // an uncommitted file is removed
  };
  using WriterPtr = std::unique_ptr<Writer, WriterDeleter>;
  Result<WriterPtr> create(const std::string& id);
  // kPayloadTooLarge once more than `limit` bytes were written.
  Status append(Writer& w, std::string_view data, int64_t limit);
  struct Committed {
    int64_t size = 0;
    std::string sha256;
  };
  Result<Committed> commit(Writer& w);

  struct Reader {
    int fd = -1;
    int64_t size = 0;
    ~Reader();
  };
  Result<std::unique_ptr<Reader>> open(const std::string& id) const;
  // Up to `max` bytes at `offset` (fewer only at the end of the file).
  static Result<std::string> read(const Reader& r, int64_t offset, size_t max);
  Status remove(const std::string& id) const;

 private:
  std::string pathOf(const std::string& id) const;
  std::string root_;
};

// Reads a file a line at a time from a byte offset, in pieces, holding at most one line (up to
// `max_line` bytes) and one piece.
class LineReader {
 public:
  LineReader(const FileDir::Reader& file, int64_t offset, size_t max_line)
      : file_(file), pos_(offset), max_line_(max_line) {}
  // The next line without its '\n' (and a '\r' before it); false at the end of the file.
  // kInvalidArgument for a line longer than max_line (the rest of it is skipped).
  Result<bool> next(std::string& line);
  // The byte offset of the line next() returns next.
  int64_t offset() const { return line_start_; }

 private:
  const FileDir::Reader& file_;
  int64_t pos_;  // the file offset of buf_'s end
  size_t max_line_;
  std::string buf_;
  size_t at_ = 0;
  int64_t line_start_ = -1;
};

}  // namespace infera::batch
