#include "gateway/internal/split.h"

#include "core/hash.h"

namespace infera::gateway {

uint64_t stickyHash(std::string_view salt, std::string_view id) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](std::string_view s) {
    for (const char c : s) {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001b3ULL;
    }
  };
  mix(salt);
  h ^= 0xff;  // a separator: ("ab", "c") and ("a", "bc") differ
  h *= 0x100000001b3ULL;
  mix(id);
  h += 0x9e3779b97f4a7c15ULL;
  return mix64(h);
}

int armForHash(std::span<const uint32_t> weights, uint64_t hash) {
  uint64_t total = 0;
  for (const uint32_t w : weights) total += w;
  if (total == 0) return -1;
  uint64_t point = hash % total;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (point < weights[i]) return static_cast<int>(i);
    point -= weights[i];
  }
  return -1;  // unreachable: point < total
}

}  // namespace infera::gateway
