#pragma once
// Qdrant's filter grammar (must / should / must_not / min_should over field conditions, is_empty,
// is_null, has_id, nested, sub-filters) parsed from JSON into a tree, and evaluated on one point's
// payload with Qdrant's semantics (docs/vectors.md "Filters"): a missing key matches no `match` or
// `range`; an array matches when any element does; `should: []` matches nothing.
// Pure values; thread-compatible.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "vectors/internal/json.h"
#include "vectors/internal/point_id.h"

namespace infera::vectors {

// A payload key: a.b, a[], a[].b, a[0], "quoted.key".
struct JsonPath {
  struct Step {
    enum Kind { kKey, kAll, kIndex } kind;
    std::string key;
    size_t index = 0;
  };
  std::vector<Step> steps;
  std::string text;
};
// At most this many steps ("a.b[0].c": 4): a payload set under a key nests that deep, and a stored
// payload stays within the floor's depth limit (core/json.h JsonLimits::max_depth).
inline constexpr size_t kMaxJsonPathSteps = 32;
Result<JsonPath> parseJsonPath(std::string_view text);
// Every value at `path` in `payload` (a key step descends into objects only).
void valuesAt(const Json& payload, const JsonPath& path, std::vector<const Json*>& out);

struct Range {
  std::optional<double> gt, gte, lt, lte;
  bool contains(double v) const {
    return (!gt || v > *gt) && (!gte || v >= *gte) && (!lt || v < *lt) && (!lte || v <= *lte);
  }
};

struct Filter;

struct Condition {
  enum class Kind { kMatch, kRange, kValuesCount, kIsEmpty, kIsNull, kHasId, kNested, kFilter };
  enum class Match { kValue, kAny, kExcept, kText, kTextAny, kPhrase, kPrefix };
  Kind kind = Kind::kMatch;
  JsonPath key;
  Match match = Match::kValue;
  Json value;                     // kValue: a string, integer or bool
  std::vector<std::string> strs;  // kAny/kExcept over strings
  std::vector<int64_t> ints;      // kAny/kExcept over integers
  bool list_is_strings = true;
  std::string text;                   // kText, kTextAny, kPhrase, kPrefix
  Range range;                        // kRange, kValuesCount
  bool flag = true;                   // is_empty / is_null given as a field condition's bool
  std::vector<PointId> ids;           // kHasId
  std::shared_ptr<const Filter> sub;  // kNested (over key[]), kFilter
};

struct Filter {
  std::vector<Condition> must, should, must_not;
  bool has_should = false;
  std::vector<Condition> min_should;
  size_t min_count = 0;
  bool has_min_should = false;
};

// kInvalidArgument "Format error in JSON body: ..." for a malformed filter (unknown keys too);
// kFailedPrecondition "Validation error in JSON body: ..." for an empty field condition.
Result<Filter> parseFilter(const Json& j);

bool matches(const Filter& f, const Json& payload, const PointId& id);
bool matches(const Condition& c, const Json& payload, const PointId& id);

}  // namespace infera::vectors
