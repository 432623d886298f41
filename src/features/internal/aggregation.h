#pragma once
// Stream aggregations over sliding windows, kept as time buckets: an aggregation view's state for
// one entity is, per aggregation, the non-empty buckets (bucket = floor(event_time / bucket_s)) of
// the last window/bucket_s buckets. An event adds to its bucket; reading at time `now` folds the
// buckets (floor(now/bucket) - N, floor(now/bucket)], so a window slides as time passes even with
// no new events, at the bucket's granularity. Events older than the window at ingest are dropped;
// distinct-count is a HyperLogLog (p = 10, ~3% standard error), sparse while small.
//
// Pure functions over bytes (the state is stored as a row's payload); thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "features/internal/registry.h"

namespace infera::features {

// One event's input to one aggregation.
struct AggInput {
  bool present = false;  // the column was null: the event is counted by count only
  double number = 0;     // sum, avg, min, max
  uint64_t hash = 0;     // distinct_count
  std::string encoded;   // last: the tagged value
};

struct AggBucket {
  int64_t index = 0;
  int64_t count = 0;
  double sum = 0;
  double min = 0;
  double max = 0;
  int64_t last_ts = INT64_MIN;
  std::string last;
  std::vector<uint16_t> hll_sparse;  // (register << 6) | rank, sorted by register
  std::vector<uint8_t> hll_dense;    // 1024 registers once the sparse list is large
};

struct AggState {
  int64_t latest_ts = INT64_MIN;                // µs
  std::vector<std::vector<AggBucket>> per_agg;  // by aggregation, buckets sorted by index
};

// The state's payload bytes (after the row's event-time header) and back; an empty or unreadable
// payload is an empty state.
void encodeAggState(const FeatureView& view, const AggState& state, std::string& out);
AggState decodeAggState(const FeatureView& view, std::string_view payload);

// Adds one event at `ts_us` (µs) with one input per aggregation; `now_us` prunes buckets that left
// every window. False when the event is older than every window (nothing changed).
bool addEvent(const FeatureView& view, AggState& state, int64_t ts_us,
              const std::vector<AggInput>& inputs, int64_t now_us);

// Appends aggregation `agg`'s value at `now_us` as JSON; `null` when it has none (avg/min/max/last
// of an empty window).
void appendAggJson(const FeatureView& view, const AggState& state, size_t agg, int64_t now_us,
                   std::string& json, bool& null);

uint64_t hashBytes(std::string_view bytes);

}  // namespace infera::features
