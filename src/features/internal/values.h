#pragma once
// Feature values: their types, the bytes they are stored as (one codec for both online stores),
// how JSON becomes those bytes (Feast's conversion rules, §6.1 of the Feast notes) and how the
// bytes become JSON again (Feast's native encodings, §6.3), and event timestamps.
//
// Stored row (a view's features for one entity, RocksDB value or Redis string):
//   [event time: 8 bytes, big-endian signed microseconds][entries...]
//   entry = varint feature id, then a value: a tag byte (0 = null, else the scalar type code),
//   then the payload: int32/int64/unix_timestamp zigzag varint, double 8 bytes LE, float 4 bytes
//   LE, bool 1 byte, string/bytes varint length + bytes; a list: tag | 0x80, varint count, then
//   each element's payload.
// Entity key: per join key, its payload (strings/bytes length-prefixed), in the view's entity
// order.
//
// Pure functions, thread-safe.

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace infera::features {

enum class Scalar : uint8_t {
  kInt64 = 1,
  kInt32 = 2,
  kDouble = 3,
  kFloat = 4,
  kString = 5,
  kBytes = 6,
  kBool = 7,
  kUnixTimestamp = 8,
};

struct FeatureType {
  Scalar scalar = Scalar::kInt64;
  bool list = false;
  bool operator==(const FeatureType&) const = default;
};

// "int64", "Int64", "float64"/"double", "float32"/"float", "string", "bytes", "bool",
// "unix_timestamp"/"UnixTimestamp", "Array(T)" or "list<T>" (case-insensitive). Nothing if unknown.
std::optional<FeatureType> parseFeatureType(std::string_view name);
// The canonical name: "int64", "list<float>", ...
std::string typeName(FeatureType t);

// One JSON value converted to `t` and appended to `out` as a tagged value. `lenient` (batch
// ingest from CSV) also accepts numeric strings for every numeric type and "true"/"false" for
// bool. kInvalidArgument saying what was expected.
Status encodeJsonValue(simdjson::dom::element v, FeatureType t, bool lenient, std::string& out);
// The same for an entity key value (no tag byte; null is an error).
Status encodeJsonKey(simdjson::dom::element v, Scalar t, std::string& out);

// Reads one tagged value of `t` at `in` (advancing it) and appends its JSON to `json`. False when
// the bytes are not a value of `t` (a type changed under stored data): nothing appended.
bool appendValueJson(std::string_view& in, FeatureType t, std::string& json, bool& was_null);
// Skips one tagged value; false when malformed.
bool skipValue(std::string_view& in);
// Appends a JSON number the way Python's repr prints a float (always a '.' or an exponent; NaN
// and infinities become null).
void appendDouble(std::string& json, double v);

// Varints.
void putVarint(std::string& out, uint64_t v);
bool getVarint(std::string_view& in, uint64_t& v);
inline uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t unzigzag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// The 8-byte event-time prefix of a row.
void putEventTime(std::string& out, int64_t ts_us);
int64_t eventTimeOf(std::string_view row);  // row.size() >= 8
inline constexpr size_t kRowHeader = 8;

// Event timestamps: "2022-05-13 10:59:42+00:00", "2024-01-01T12:00:00.123456", "...Z", a date
// "2024-01-01" (naive = UTC), or a number of seconds/ms/µs/ns since the epoch (by magnitude:
// < 1e11 seconds, < 1e14 ms, < 1e17 µs, else ns). Microseconds since the epoch.
Result<int64_t> parseTimestamp(simdjson::dom::element v);
Result<int64_t> parseTimestampText(std::string_view s);
// RFC 3339 UTC with 'Z': no fraction when whole seconds, else 3 or 6 digits (Feast's form).
void appendTimestamp(std::string& json, int64_t ts_us);

}  // namespace infera::features
