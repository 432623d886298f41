#pragma once
// Gateway internals: which arm of an experiment a request goes to. Pure functions: the same
// sticky id and weights always give the same arm (users, keys or a header value stay on their
// arm), and ids spread over the arms in proportion to the weights.

#include <cstdint>
#include <span>
#include <string_view>

namespace infera::gateway {

// A 64-bit hash of the experiment's salt and the sticky id (FNV-1a, then a splitmix64 finaliser
// so that ids differing in one character land far apart).
uint64_t stickyHash(std::string_view salt, std::string_view id);

// The arm whose cumulative weight range holds `hash` mod the total weight; -1 when every weight
// is 0 (or there are none).
int armForHash(std::span<const uint32_t> weights, uint64_t hash);

}  // namespace infera::gateway
