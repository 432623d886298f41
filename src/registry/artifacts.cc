#include "registry/internal/artifacts.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/log.h"
#include "core/text.h"

namespace infera::registry {

namespace fs = std::filesystem;

namespace {

// A failure of the artifact directory: the detail (with the server's paths) goes to the log, the
// answer names only the artifact.
Status storageError(const std::string& artifact, const std::string& detail) {
  INFERA_LOG(componentLogger("registry"), err, "artifact {}: {}", artifact, detail);
  return Status::internal("storing or reading artifact '" + artifact +
                          "' failed on the server (see its log)");
}

Status conflictWithFile(const std::string& path, const std::string& file) {
  return Status::failedPrecondition("artifact path '" + path + "' conflicts with the artifact '" +
                                    file + "' (a file cannot also be a directory)");
}

Status conflictWithDirectory(const std::string& path) {
  return Status::failedPrecondition("artifact path '" + path +
                                    "' conflicts with the artifacts under '" + path +
                                    "/' (a directory cannot also be a file)");
}

// Whether `path` can be a file of the version in `dir`: none of its parents is a file and it is
// not a directory.
Status checkNoConflict(const std::string& dir, const std::string& path) {
  struct stat st {};
  for (size_t slash = path.find('/'); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string parent = path.substr(0, slash);
    if (::stat((dir + "/" + parent).c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      return conflictWithFile(path, parent);
  }
  if (::stat((dir + "/" + path).c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return conflictWithDirectory(path);
  return Status::ok();
}

}  // namespace

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
  std::string path;  // the artifact's path in its version (what messages name)
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
  const std::string dir = dirOf(model, version);
  INFERA_RETURN_IF_ERROR(checkNoConflict(dir, path));
  UploadPtr u(new Upload);
  u->path = path;
  u->dest = dir + "/" + path;
  const fs::path parent = fs::path(u->dest).parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) {
    // Another upload made a parent a file since the check.
    if (ec == std::errc::not_a_directory || ec == std::errc::file_exists) {
      INFERA_RETURN_IF_ERROR(checkNoConflict(dir, path));
    }
    return storageError(path, "cannot create " + parent.string() + ": " + ec.message());
  }
  u->tmp = (parent / (".upload-" + std::to_string(::getpid()) + "-" +
                      std::to_string(reinterpret_cast<uintptr_t>(u.get()))))
               .string();
  u->fd = ::open(u->tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (u->fd < 0) return storageError(path, "cannot create " + u->tmp + ": " + std::strerror(errno));
  u->sha = EVP_MD_CTX_new();
  if (!u->sha || EVP_DigestInit_ex(u->sha, EVP_sha256(), nullptr) != 1)
    return storageError(path, "sha256 init failed");
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
      return errno == ENOSPC
                 ? Status::unavailable("artifact directory is full: " +
                                       std::string(std::strerror(errno)))
                 : storageError(u.path, "writing " + u.tmp + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  u.size += static_cast<int64_t>(data.size());
  return Status::ok();
}

Result<ArtifactFiles::Committed> ArtifactFiles::commit(Upload& u) {
  if (::fdatasync(u.fd) != 0)
    return storageError(u.path, "fdatasync " + u.tmp + ": " + std::strerror(errno));
  ::close(u.fd);
  u.fd = -1;
  if (::rename(u.tmp.c_str(), u.dest.c_str()) != 0) {
    const int err = errno;
    // Another upload made the destination a directory since begin() checked.
    if (err == EISDIR || err == ENOTEMPTY || err == EEXIST) return conflictWithDirectory(u.path);
    return storageError(u.path, "rename to " + u.dest + ": " + std::strerror(err));
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
    return storageError(path, "cannot open " + file + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(r->fd, &st) != 0)
    return storageError(path, "fstat " + file + ": " + std::strerror(errno));
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
  if (ec) return storageError(model, "removing " + dirOf(model, version) + ": " + ec.message());
  return Status::ok();
}

}  // namespace infera::registry
