#include "access/internal/cache.h"

namespace infera::access {

std::optional<ResponseCache::Entry> ResponseCache::get(const std::string& key, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  if (it->second->entry.expires_ms <= now_ms) {
    bytes_ -= static_cast<int64_t>(it->second->key.size() + it->second->entry.body.size());
    lru_.erase(it->second);
    index_.erase(it);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->entry;
}

void ResponseCache::put(const std::string& key, Entry e) {
  const int64_t size = static_cast<int64_t>(key.size() + e.body.size());
  if (size > max_entry_ || size > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(key);
  if (it != index_.end()) {
    bytes_ -= static_cast<int64_t>(it->second->key.size() + it->second->entry.body.size());
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front(Node{key, std::move(e)});
  index_[key] = lru_.begin();
  bytes_ += size;
  while (bytes_.load() > max_bytes_ && !lru_.empty()) {
    const Node& last = lru_.back();
    bytes_ -= static_cast<int64_t>(last.key.size() + last.entry.body.size());
    index_.erase(last.key);
    lru_.pop_back();
  }
}

size_t ResponseCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

std::string cacheKey(std::string_view model, std::string_view canonical_request,
                     std::string_view team) {
  std::string key(model);
  key += '\n';
  if (!team.empty()) {
    key += "team ";
    key += team;
    key += '\n';
  }
  key += canonical_request;
  return key;
}

}  // namespace infera::access
