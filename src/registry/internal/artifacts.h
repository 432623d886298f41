#pragma once
// Registry internals: a version's files under the artifact directory
// (<dir>/<model, percent-encoded>/<version>/<path>). An upload goes to a temporary file beside its
// destination, hashed (sha256) and counted as it is written, fsynced and renamed into place on
// commit, so a reader never sees half a file and a failed upload leaves nothing. Reads are
// positioned (pread) a piece at a time. Blocking: call from the registry's worker pool.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace infera::registry {

class ArtifactFiles {
 public:
  explicit ArtifactFiles(std::string root) : root_(std::move(root)) {}
  // Creates the directory (0700).
  Status init();
  const std::string& root() const { return root_; }

  // kInvalidArgument for a path that is absolute, empty, has an empty, "." or ".." segment, a
  // backslash or a NUL.
  static Status validatePath(const std::string& path);

  struct Upload;
  struct UploadDeleter {
    void operator()(Upload* u) const;
  };
  using UploadPtr = std::unique_ptr<Upload, UploadDeleter>;
  Result<UploadPtr> begin(const std::string& model, int64_t version, const std::string& path);
  // kPayloadTooLarge once more than `limit` bytes were written.
  Status append(Upload& u, std::string_view data, int64_t limit);
  struct Committed {
    int64_t size = 0;
    std::string sha256;  // lower-case hex
  };
  Result<Committed> commit(Upload& u);

  struct Reader {
    int fd = -1;
    int64_t size = 0;
    ~Reader();
  };
  Result<std::unique_ptr<Reader>> open(const std::string& model, int64_t version,
                                       const std::string& path);
  // Up to `max` bytes at `offset` (fewer only at the end of the file).
  Result<std::string> read(Reader& r, int64_t offset, size_t max);

  // Removes a version's files (version 0: every version of the model).
  Status remove(const std::string& model, int64_t version);

 private:
  std::string dirOf(const std::string& model, int64_t version) const;
  std::string root_;
};

// Percent-encodes everything but [A-Za-z0-9_-] (file and URI segments).
std::string encodeSegment(std::string_view s);

}  // namespace infera::registry
