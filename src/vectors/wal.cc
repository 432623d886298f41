#include "vectors/internal/wal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

namespace infera::vectors {

uint32_t crc32(std::string_view data) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  for (unsigned char b : data) c = kTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

Result<std::unique_ptr<Wal>> Wal::open(const std::string& file, bool fsync) {
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::internal("cannot open " + file + ": " + std::strerror(errno));
  return std::unique_ptr<Wal>(new Wal(fd, file, fsync));
}

Wal::~Wal() { ::close(fd_); }

Result<uint64_t> Wal::replay(const std::function<Status(uint64_t, std::string_view)>& fn) {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Status::internal("stat " + file_ + " failed");
  std::string data(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::pread(fd_, data.data() + got, data.size() - got, off_t(got));
    if (n <= 0) return Status::internal("reading " + file_ + " failed");
    got += size_t(n);
  }
  size_t off = 0;
  uint64_t last = 0;
  while (off + 16 <= data.size()) {
    uint32_t len = 0, crc = 0;
    uint64_t seq = 0;
    std::memcpy(&len, data.data() + off, 4);
    std::memcpy(&crc, data.data() + off + 4, 4);
    std::memcpy(&seq, data.data() + off + 8, 8);
    if (off + 16 + len > data.size()) break;  // torn tail
    const std::string_view body(data.data() + off + 8, 8 + size_t(len));
    if (crc32(body) != crc) break;  // corrupt tail
    INFERA_RETURN_IF_ERROR(fn(seq, body.substr(8)));
    last = seq;
    off += 16 + len;
  }
  if (off != data.size() && ::ftruncate(fd_, off_t(off)) != 0) {
    return Status::internal("truncating the torn tail of " + file_ + " failed");
  }
  size_ = off;
  ::lseek(fd_, off_t(off), SEEK_SET);
  return last;
}

void Wal::append(uint64_t seq, std::string_view op) {
  std::string body(8 + op.size(), '\0');
  std::memcpy(body.data(), &seq, 8);
  std::memcpy(body.data() + 8, op.data(), op.size());
  const uint32_t len = uint32_t(op.size());
  const uint32_t crc = crc32(body);
  pending_.append(reinterpret_cast<const char*>(&len), 4);
  pending_.append(reinterpret_cast<const char*>(&crc), 4);
  pending_ += body;
}

Status Wal::sync() {
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n =
        ::pwrite(fd_, pending_.data() + done, pending_.size() - done, off_t(size_ + done));
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      pending_.clear();
      return Status::unavailable("writing " + file_ + " failed: " + why);
    }
    done += size_t(n);
  }
  size_ += done;
  pending_.clear();
  if (fsync_ && done > 0 && ::fdatasync(fd_) != 0) {
    return Status::unavailable("fdatasync " + file_ + " failed: " + std::strerror(errno));
  }
  return Status::ok();
}

Status Wal::reset() {
  pending_.clear();
  if (::ftruncate(fd_, 0) != 0 || (fsync_ && ::fdatasync(fd_) != 0)) {
    return Status::internal("truncating " + file_ + " failed");
  }
  size_ = 0;
  return Status::ok();
}

}  // namespace infera::vectors
