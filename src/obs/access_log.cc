#include "obs/access_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "net/http.h"

namespace infera::obs {

Result<std::unique_ptr<AccessLog>> AccessLog::open(const std::string& path, int shards,
                                                   size_t max_pending_bytes) {
  int fd = 1;
  bool owns = false;
  if (path != "-") {
    if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);  // a failure shows in open()
    }
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      return Status::unavailable("cannot open access log " + path + ": " + std::strerror(errno));
    }
    owns = true;
  }
  return std::unique_ptr<AccessLog>(new AccessLog(fd, owns, shards, max_pending_bytes));
}

AccessLog::AccessLog(int fd, bool owns_fd, int shards, size_t max_pending)
    : fd_(fd), owns_fd_(owns_fd), max_pending_(max_pending), shards_(static_cast<size_t>(shards)) {
  writer_ = std::thread([this] { writerLoop(); });
}

AccessLog::~AccessLog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
  if (owns_fd_) ::close(fd_);
}

void AccessLog::append(int shard, const AccessRecord& r) {
  std::string& b = shards_[static_cast<size_t>(shard)].buf;
  char num[64];
  b += "{\"ts_ms\":";
  b += std::to_string(r.unix_ms);
  b += ",\"request_id\":";
  net::appendJsonString(b, r.request_id);
  b += ",\"method\":";
  net::appendJsonString(b, r.method);
  b += ",\"path\":";
  net::appendJsonString(b, r.path);
  if (!r.model.empty()) {
    b += ",\"model\":";
    net::appendJsonString(b, r.model);
  }
  if (!r.deployment.empty()) {
    b += ",\"deployment\":";
    net::appendJsonString(b, r.deployment);
  }
  if (!r.endpoint.empty()) {
    b += ",\"endpoint\":";
    net::appendJsonString(b, r.endpoint);
  }
  std::snprintf(num, sizeof(num), ",\"status\":%d,\"duration_s\":%.6f", r.status, r.duration_s);
  b += num;
  if (r.ttfb_s > 0) {
    std::snprintf(num, sizeof(num), ",\"upstream_ttfb_s\":%.6f", r.ttfb_s);
    b += num;
  }
  std::snprintf(num, sizeof(num), ",\"attempts\":%d,\"stream\":%s,\"bytes_out\":%llu}\n",
                r.attempts, r.stream ? "true" : "false",
                static_cast<unsigned long long>(r.bytes_out));
  b += num;
  if (b.size() > (1 << 20)) flushShard(shard);
}

void AccessLog::flushShard(int shard) {
  std::string& b = shards_[static_cast<size_t>(shard)].buf;
  if (b.empty()) return;
  std::string out;
  out.swap(b);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_bytes_ + out.size() > max_pending_) {
      dropped_.fetch_add(1);
      return;
    }
    pending_bytes_ += out.size();
    pending_.push_back(std::move(out));
    ++handed_;
  }
  cv_.notify_one();
}

void AccessLog::sync() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = handed_;
  synced_cv_.wait(lock, [&] { return written_ >= target; });
}

void AccessLog::writerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    std::vector<std::string> batch;
    batch.swap(pending_);
    pending_bytes_ = 0;
    lock.unlock();
    for (const auto& s : batch) {
      size_t off = 0;
      while (off < s.size()) {
        const ssize_t n = ::write(fd_, s.data() + off, s.size() - off);
        if (n < 0) {
          if (errno == EINTR) continue;
          break;
        }
        off += static_cast<size_t>(n);
      }
    }
    lock.lock();
    written_ += batch.size();
    synced_cv_.notify_all();
    if (stop_ && pending_.empty()) return;
  }
}

RequestIdGenerator::RequestIdGenerator(uint64_t seed) : state_(seed ^ 0x9E3779B97F4A7C15ULL) {}

std::string RequestIdGenerator::next() {
  // splitmix64 over (state, counter): unique per worker, no syscalls.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  const uint64_t a = mix(state_ + ++counter_ * 0x9E3779B97F4A7C15ULL);
  const uint64_t b = mix(a ^ counter_);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[static_cast<size_t>(15 - i)] = kHex[(a >> (4 * i)) & 0xf];
    out[static_cast<size_t>(31 - i)] = kHex[(b >> (4 * i)) & 0xf];
  }
  return out;
}

bool isAcceptableRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace infera::obs
