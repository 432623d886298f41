#pragma once
// A point's id: an unsigned 64-bit integer or a UUID (Qdrant's ExtendedPointId). Integers order
// before UUIDs; UUIDs order by their bytes (= their lower-case hyphenated text).

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "vectors/internal/json.h"

namespace infera::vectors {

struct PointId {
  bool uuid = false;
  uint64_t hi = 0;  // UUID bytes 0..7 (big-endian); 0 for an integer id
  uint64_t lo = 0;  // the integer, or UUID bytes 8..15

  static PointId num(uint64_t n) { return {false, 0, n}; }
  auto operator<=>(const PointId&) const = default;
  bool operator==(const PointId&) const = default;

  // 42, or "550e8400-e29b-41d4-a716-446655440000".
  void appendJson(std::string& out) const;
  Json toJson() const;
  std::string toString() const;
};

struct PointIdHash {
  size_t operator()(const PointId& p) const {
    return size_t(p.lo * 0x9E3779B97F4A7C15ULL ^ (p.hi + (p.uuid ? 0x51ed27 : 0)));
  }
};

// A UUID in any form Qdrant accepts: hyphenated, 32 hex digits, {braced}, urn:uuid:.
bool parseUuid(std::string_view s, PointId& out);
// From a JSON body: an unsigned integer or a UUID string; kInvalidArgument otherwise.
Result<PointId> pointIdFromJson(const Json& j);
// From a URL path segment: a u64 first, then a UUID.
Result<PointId> pointIdFromText(std::string_view s);

}  // namespace infera::vectors
