#pragma once
// Small non-cryptographic hashes shared by components. Stable across runs, builds and machines:
// split assignments, feature state keys and KV block hashes depend on their values.

#include <cstdint>

namespace infera {

// splitmix64's finaliser: every input bit reaches every output bit.
inline uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace infera
