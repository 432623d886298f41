#include "registry/internal/artifacts.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/text.h"

namespace infera::registry {

namespace fs = std::filesystem;

std::string encodeSegment(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

struct ArtifactFiles::Upload {
  int fd = -1;
  std::string tmp;
  std::string dest;
  EVP_MD_CTX* sha = nullptr;
  int64_t size = 0;
  bool committed = false;
};

void ArtifactFiles::UploadDeleter::operator()(Upload* u) const {
  if (u->fd >= 0) ::close(u->fd);
  if (!u->committed && !u->tmp.empty()) ::unlink(u->tmp.c_str());
  if (u->sha) EVP_MD_CTX_free(u->sha);
  delete u;
}

ArtifactFiles::Reader::~Reader() {
  if (fd >= 0) ::close(fd);
}

Status ArtifactFiles::init() {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec)
    return Status::internal("cannot create the artifact directory " + root_ + ": " + ec.message());
  ::chmod(root_.c_str(), 0700);
  return Status::ok();
}

Status ArtifactFiles::validatePath(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') {
    return Status::invalidArgument("artifact path '" + path + "' must be a relative file path");
  }
  if (path.find('\\') != std::string::npos || path.find('\0') != std::string::npos ||
      path.size() > 1024) {
    return Status::invalidArgument("artifact path '" + path +
                                   "' has a backslash or NUL, or is too long");
  }
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    const std::string_view seg(path.data() + i, j - i);
    if (seg.empty() || seg == "." || seg == "..") {
      return Status::invalidArgument("artifact path '" + path +
                                     "' has an empty, '.' or '..' segment");
    }
    if (seg.starts_with(".upload-"))
      return Status::invalidArgument("artifact names may not start with .upload-");
    i = j + 1;
  }
  return Status::ok();
}

std::string ArtifactFiles::dirOf(const std::string& model, int64_t version) const {
  std::string d = root_ + "/" + encodeSegment(model);
  if (version > 0) d += "/" + std::to_string(version);
  return d;
}

Result<ArtifactFiles::UploadPtr> ArtifactFiles::begin(const std::string& model, int64_t version,
                                                      const std::string& path) {
  INFERA_RETURN_IF_ERROR(validatePath(path));
  UploadPtr u(new Upload);
  u->dest = dirOf(model, version) + "/" + path;
  const fs::path parent = fs::path(u->dest).parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return Status::internal("cannot create " + parent.string() + ": " + ec.message());
  u->tmp = (parent / (".upload-" + std::to_string(::getpid()) + "-" +
                      std::to_string(reinterpret_cast<uintptr_t>(u.get()))))
               .string();
  u->fd = ::open(u->tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (u->fd < 0) return Status::internal("cannot create " + u->tmp + ": " + std::strerror(errno));
  u->sha = EVP_MD_CTX_new();
  if (!u->sha || EVP_DigestInit_ex(u->sha, EVP_sha256(), nullptr) != 1)
    return Status::internal("sha256 init failed");
  return u;
}

Status ArtifactFiles::append(Upload& u, std::string_view data, int64_t limit) {
  if (u.size + static_cast<int64_t>(data.size()) > limit) {
    return Status::payloadTooLarge("artifact exceeds the limit of " + std::to_string(limit) +
                                   " bytes (registry.max_artifact_bytes)");
  }
  EVP_DigestUpdate(u.sha, data.data(), data.size());
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(u.fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == ENOSPC ? Status::unavailable("artifact directory is full: " +
                                                   std::string(std::strerror(errno)))
                             : Status::internal("writing " + u.tmp + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  u.size += static_cast<int64_t>(data.size());
  return Status::ok();
}

Result<ArtifactFiles::Committed> ArtifactFiles::commit(Upload& u) {
  if (::fdatasync(u.fd) != 0)
    return Status::internal("fdatasync " + u.tmp + ": " + std::strerror(errno));
  ::close(u.fd);
  u.fd = -1;
  if (::rename(u.tmp.c_str(), u.dest.c_str()) != 0) {
    return Status::internal("rename to " + u.dest + ": " + std::strerror(errno));
  }
  u.committed = true;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(u.sha, md, &len);
  return Committed{u.size, toHex(md, len)};
}

Result<std::unique_ptr<ArtifactFiles::Reader>> ArtifactFiles::open(const std::string& model,
                                                                   int64_t version,
                                                                   const std::string& path) {
  INFERA_RETURN_IF_ERROR(validatePath(path));
  const std::string file = dirOf(model, version) + "/" + path;
  auto r = std::make_unique<Reader>();
  r->fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (r->fd < 0) {
    if (errno == ENOENT)
      return Status::notFound("artifact " + path + " of " + model + "/" + std::to_string(version) +
                              " not found");
    return Status::internal("cannot open " + file + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(r->fd, &st) != 0)
    return Status::internal("fstat " + file + ": " + std::strerror(errno));
  r->size = st.st_size;
  return r;
}

Result<std::string> ArtifactFiles::read(Reader& r, int64_t offset, size_t max) {
  std::string out(max, '\0');
  size_t got = 0;
  while (got < max) {
    const ssize_t n =
        ::pread(r.fd, out.data() + got, max - got, offset + static_cast<int64_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::internal(std::string("reading an artifact: ") + std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

Status ArtifactFiles::remove(const std::string& model, int64_t version) {
  std::error_code ec;
  fs::remove_all(dirOf(model, version), ec);
  if (ec) return Status::internal("removing artifacts of " + model + ": " + ec.message());
  return Status::ok();
}

}  // namespace infera::registry
