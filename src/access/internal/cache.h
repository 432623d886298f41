#pragma once
// Access internals: the response cache's process tier (an LRU by bytes) and its key.

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "access/access.h"

namespace infera::access {

class ResponseCache {
 public:
  ResponseCache(int64_t max_bytes, int64_t max_entry_bytes)
      : max_bytes_(max_bytes), max_entry_(max_entry_bytes) {}
  using Entry = CachedAnswer;
  std::optional<Entry> get(const std::string& key, int64_t now_ms);
  void put(const std::string& key, Entry e);
  int64_t bytes() const { return bytes_.load(); }
  size_t size();

 private:
  struct Node {
    std::string key;
    Entry entry;
  };
  std::mutex mu_;
  std::list<Node> lru_;  // front = most recent
  std::unordered_map<std::string, std::list<Node>::iterator> index_;
  std::atomic<int64_t> bytes_{0};
  int64_t max_bytes_;
  int64_t max_entry_;
};

// Cache key of a request for `model`: its canonical form (the caller's one reading of the body,
// see AccessWorker::cacheKey) and the team (empty for a cache shared by all teams).
std::string cacheKey(std::string_view model, std::string_view canonical_request,
                     std::string_view team = {});

}  // namespace infera::access
