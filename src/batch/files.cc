#include "batch/internal/files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/log.h"
#include "core/text.h"

namespace infera::batch {

namespace fs = std::filesystem;

namespace {

constexpr size_t kReadPiece = 256 * 1024;

// The detail (with the server's paths) goes to the log; the answer names only the file.
Status storageError(const std::string& id, const std::string& detail) {
  INFERA_LOG(componentLogger("batch"), err, "file {}: {}", id, detail);
  return Status::internal("storing or reading file '" + id +
                          "' failed on the server (see its log)");
}

}  // namespace

struct FileDir::Writer {
  std::string id;
  int fd = -1;
  std::string tmp;
  std::string dest;
  EVP_MD_CTX* sha = nullptr;
  int64_t size = 0;
  bool committed = false;
};

void FileDir::WriterDeleter::operator()(Writer* w) const {
  if (w->fd >= 0) ::close(w->fd);
  if (!w->committed && !w->tmp.empty()) ::unlink(w->tmp.c_str());
  if (w->sha) EVP_MD_CTX_free(w->sha);
  delete w;
}

FileDir::Reader::~Reader() {
  if (fd >= 0) ::close(fd);
}

Status FileDir::init() {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec)
    return Status::internal("cannot create the file directory " + root_ + ": " + ec.message());
  ::chmod(root_.c_str(), 0700);
  // Uploads a killed process left half-written: not listed (no row), but on disk. One untouched
  // for an hour is no live writer's (a writer appends as bytes arrive; replicas share the folder).
  const auto stale = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    std::error_code te;
    if (e.path().filename().string().starts_with(".tmp-") && e.last_write_time(te) < stale && !te)
      fs::remove(e.path(), te);
  }
  return Status::ok();
}

std::string FileDir::pathOf(const std::string& id) const {
  // Ids are made here ("file-" + hex) and checked before they reach a path; no separator gets in.
  return root_ + "/" + id;
}

Result<FileDir::WriterPtr> FileDir::create(const std::string& id) {
  WriterPtr w(new Writer);
  w->id = id;
  w->dest = pathOf(id);
  // A name no other writer (another replica on the shared directory, with the same pid in its
  // container) can hold: O_EXCL fails rather than share it.
  unsigned char rnd[8];
  if (RAND_bytes(rnd, sizeof(rnd)) != 1) return storageError(id, "no random bytes for a name");
  w->tmp = root_ + "/.tmp-" + id + "-" + toHex(rnd, sizeof(rnd));
  w->fd = ::open(w->tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (w->fd < 0) return storageError(id, "cannot create " + w->tmp + ": " + std::strerror(errno));
  w->sha = EVP_MD_CTX_new();
  if (!w->sha || EVP_DigestInit_ex(w->sha, EVP_sha256(), nullptr) != 1)
    return storageError(id, "sha256 init failed");
  return w;
}

Status FileDir::append(Writer& w, std::string_view data, int64_t limit) {
  if (w.size + static_cast<int64_t>(data.size()) > limit)
    return Status::payloadTooLarge("File is too large.");
  EVP_DigestUpdate(w.sha, data.data(), data.size());
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(w.fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == ENOSPC ? Status::unavailable("the file directory is full")
                             : storageError(w.id, "writing " + w.tmp + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  w.size += static_cast<int64_t>(data.size());
  return Status::ok();
}

Result<FileDir::Committed> FileDir::commit(Writer& w) {
  if (::fdatasync(w.fd) != 0)
    return storageError(w.id, "fdatasync " + w.tmp + ": " + std::strerror(errno));
  ::close(w.fd);
  w.fd = -1;
  if (::rename(w.tmp.c_str(), w.dest.c_str()) != 0)
    return storageError(w.id, "rename to " + w.dest + ": " + std::strerror(errno));
  w.committed = true;
  // The rename itself must survive a crash: the directory's entry is synced too.
  const int dir = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    const int rc = ::fsync(dir);
    ::close(dir);
    if (rc != 0) return storageError(w.id, "fsync of the file directory failed");
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(w.sha, md, &len);
  return Committed{w.size, toHex(md, len)};
}

Result<std::unique_ptr<FileDir::Reader>> FileDir::open(const std::string& id) const {
  auto r = std::make_unique<Reader>();
  const std::string path = pathOf(id);
  r->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r->fd < 0) {
    if (errno == ENOENT) return Status::notFound("No such File object: " + id);
    return storageError(id, "cannot open " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(r->fd, &st) != 0)
    return storageError(id, "fstat " + path + ": " + std::strerror(errno));
  r->size = st.st_size;
  return r;
}

Result<std::string> FileDir::read(const Reader& r, int64_t offset, size_t max) {
  std::string out(max, '\0');
  size_t got = 0;
  while (got < max) {
    const ssize_t n =
        ::pread(r.fd, out.data() + got, max - got, offset + static_cast<int64_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::internal(std::string("reading a file: ") + std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

Status FileDir::remove(const std::string& id) const {
  if (::unlink(pathOf(id).c_str()) != 0 && errno != ENOENT)
    return storageError(id, "unlink: " + std::string(std::strerror(errno)));
  return Status::ok();
}

Result<bool> LineReader::next(std::string& line) {
  line.clear();
  bool too_long = false;
  line_start_ = pos_ - static_cast<int64_t>(buf_.size() - at_);
  for (;;) {
    const size_t nl = buf_.find('\n', at_);
    const size_t end = nl == std::string::npos ? buf_.size() : nl;
    if (!too_long) {
      if (line.size() + (end - at_) > max_line_) {
        too_long = true;
        line.clear();
      } else {
        line.append(buf_, at_, end - at_);
      }
    }
    if (nl != std::string::npos) {
      at_ = nl + 1;
      break;
    }
    // The piece ended inside the line: read the next.
    INFERA_ASSIGN_OR_RETURN(std::string piece, FileDir::read(file_, pos_, kReadPiece));
    buf_ = std::move(piece);
    at_ = 0;
    pos_ += static_cast<int64_t>(buf_.size());
    if (buf_.empty()) {
      if (line.empty() && !too_long) return false;  // the end
      break;                                        // a last line without '\n'
    }
  }
  if (too_long)
    return Status::invalidArgument("the line is longer than " + std::to_string(max_line_) +
                                   " bytes");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

}  // namespace infera::batch
