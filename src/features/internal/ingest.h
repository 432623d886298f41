#pragma once
// Writing features: a column-major data frame (Feast's `df`: column -> list, scalars broadcast)
// checked against a view and turned into store rows, or into aggregation events that update the
// views' bucketed states. Validation comes first and covers the whole frame: a bad value names
// its row and column and nothing is written.
//
// Functions; applyAggEvents serialises the updates of one view with a lock held by it.

#include <simdjson.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "features/internal/aggregation.h"
#include "features/internal/online_store.h"
#include "features/internal/registry.h"

namespace infera::features {

struct DataFrame {
  struct Column {
    std::string_view name;
    std::vector<simdjson::dom::element> values;  // empty with `scalar` set: broadcast
    simdjson::dom::element scalar;
    bool broadcast = false;
  };
  std::vector<Column> columns;
  size_t rows = 0;
  const Column* find(std::string_view n) const {
    for (const auto& c : columns) {
      if (c.name == n) return &c;
    }
    return nullptr;
  }
  simdjson::dom::element at(const Column& c, size_t row) const {
    return c.broadcast ? c.scalar : c.values[row];
  }
};

// kInvalidArgument for a df that is not an object of lists/scalars or whose lists differ in length.
Status readDataFrame(simdjson::dom::element df, DataFrame& out);

struct AggEvent {
  std::string key;
  int64_t ts_us = 0;
  std::vector<AggInput> inputs;  // one per aggregation
};

struct ViewBatch {
  const FeatureView* view = nullptr;
  std::vector<RowWrite> rows;    // plain views
  std::vector<AggEvent> events;  // aggregation views
  size_t expired = 0;            // rows already past ttl + retain: not written
};

struct IngestOptions {
  bool lenient = false;  // CSV ingest: numeric strings for numbers, "true"/"false" for bools
  size_t first_row = 0;  // added to row numbers in messages
  int64_t now_us = 0;
  int64_t retain_expired_s = 0;
};

// Checks every row of `df` against `view` (join keys, the event timestamp column, every feature
// or aggregation input) and appends the rows to `out`. `timestamp_field` is the push source's
// ("event_timestamp" when there is none, and accepted as a fallback name).
Status buildViewBatch(const FeatureView& view, const std::string& timestamp_field,
                      const DataFrame& df, const IngestOptions& options, ViewBatch& out);

// Folds the events into the view's stored states (read, add, put), with `lock` held. Blocking.
Status applyAggEvents(OnlineStore& store, const FeatureView& view, std::vector<AggEvent>& events,
                      int64_t now_us, int64_t retain_expired_s, std::mutex& lock);

// An entity key from its columns' encoded parts (one per join key, the view's entity order).
void appendEntityKeyPart(std::string& key, std::string_view part);

}  // namespace infera::features
