#include "features/internal/ingest.h"

#include <algorithm>
#include <unordered_map>

namespace infera::features {
namespace {

Status cellError(const IngestOptions& o, size_t row, std::string_view column, const Status& s) {
  return Status::invalidArgument("row " + std::to_string(o.first_row + row) + ", column " +
                                 std::string(column) + ": " + s.message());
}

Status missingColumn(std::string_view what, std::string_view name, const FeatureView& v) {
  return Status::invalidArgument("column " + std::string(name) + " (" + std::string(what) +
                                 " of feature view " + v.name + ") is missing");
}

bool numberOf(simdjson::dom::element e, bool lenient, double& out) {
  if (e.get(out) == simdjson::SUCCESS) return true;
  bool b;
  if (e.get(b) == simdjson::SUCCESS) {
    out = b ? 1 : 0;
    return true;
  }
  std::string_view s;
  if (lenient && e.get(s) == simdjson::SUCCESS) {
    char* end = nullptr;
    const std::string tmp(s);
    out = std::strtod(tmp.c_str(), &end);
    return !tmp.empty() && end == tmp.c_str() + tmp.size();
  }
  return false;
}

}  // namespace

void appendEntityKeyPart(std::string& key, std::string_view part) { key.append(part); }

Status readDataFrame(simdjson::dom::element df, DataFrame& out) {
  simdjson::dom::object obj;
  if (df.get(obj) != simdjson::SUCCESS)
    return Status::invalidArgument("df must be an object of columns");
  bool any_list = false;
  size_t rows = 0;
  for (auto field : obj) {
    DataFrame::Column c;
    c.name = field.key;
    simdjson::dom::array arr;
    if (field.value.get(arr) == simdjson::SUCCESS) {
      c.values.reserve(arr.size());
      for (simdjson::dom::element e : arr) c.values.push_back(e);
      if (any_list && c.values.size() != rows) {
        return Status::invalidArgument(
            "All arrays must be of the same length (column " + std::string(c.name) + " has " +
            std::to_string(c.values.size()) + " values, others " + std::to_string(rows) + ")");
      }
      any_list = true;
      rows = c.values.size();
    } else {
      c.scalar = field.value;
      c.broadcast = true;
    }
    out.columns.push_back(std::move(c));
  }
  if (!any_list && !out.columns.empty()) {
    return Status::invalidArgument(
        "If using all scalar values, you must pass an index (df columns must be lists)");
  }
  out.rows = rows;
  return Status::ok();
}

Status buildViewBatch(const FeatureView& view, const std::string& timestamp_field,
                      const DataFrame& df, const IngestOptions& o, ViewBatch& out) {
  out.view = &view;
  if (df.rows == 0) return Status::ok();
  std::vector<const DataFrame::Column*> keys;
  for (const Entity* e : view.entities) {
    const auto* c = df.find(e->join_key);
    if (!c) return missingColumn("join key", e->join_key, view);
    keys.push_back(c);
  }
  const DataFrame::Column* ts = df.find(timestamp_field);
  if (!ts) ts = df.find("event_timestamp");
  if (!ts) return missingColumn("event timestamp", timestamp_field, view);

  std::vector<const DataFrame::Column*> cols;
  if (view.aggregated()) {
    for (const auto& a : view.aggregations) {
      const DataFrame::Column* c = nullptr;
      if (!a.column.empty()) {
        c = df.find(a.column);
        if (!c) return missingColumn("aggregation input", a.column, view);
      }
      cols.push_back(c);
    }
  } else {
    for (const auto& f : view.features) {
      const auto* c = df.find(f.name);
      if (!c) return missingColumn("feature", f.name, view);
      cols.push_back(c);
    }
  }

  std::string scratch;
  for (size_t r = 0; r < df.rows; ++r) {
    std::string key;
    for (size_t k = 0; k < keys.size(); ++k) {
      scratch.clear();
      Status s = encodeJsonKey(df.at(*keys[k], r), view.entities[k]->type, scratch);
      if (!s.isOk()) return cellError(o, r, keys[k]->name, s);
      appendEntityKeyPart(key, scratch);
    }
    auto t = parseTimestamp(df.at(*ts, r));
    if (!t.ok()) return cellError(o, r, ts->name, t.status());
    const int64_t ts_us = *t;
    if (view.aggregated()) {
      AggEvent ev;
      ev.key = std::move(key);
      ev.ts_us = ts_us;
      ev.inputs.resize(view.aggregations.size());
      for (size_t i = 0; i < view.aggregations.size(); ++i) {
        const Aggregation& a = view.aggregations[i];
        AggInput& in = ev.inputs[i];
        if (!cols[i]) {
          in.present = true;
          continue;
        }
        const simdjson::dom::element v = df.at(*cols[i], r);
        if (v.is_null()) continue;
        in.present = true;
        switch (a.function) {
          case AggFunction::kSum:
          case AggFunction::kAvg:
          case AggFunction::kMin:
          case AggFunction::kMax:
            if (!numberOf(v, o.lenient, in.number)) {
              return cellError(o, r, cols[i]->name, Status::invalidArgument("expected a number"));
            }
            break;
          case AggFunction::kCount:
            break;
          case AggFunction::kLast:
          case AggFunction::kDistinctCount: {
            scratch.clear();
            Status s = encodeJsonValue(v, a.column_type, o.lenient, scratch);
            if (!s.isOk()) return cellError(o, r, cols[i]->name, s);
            if (a.function == AggFunction::kLast) {
              in.encoded = scratch;
            } else {
              in.hash = hashBytes(scratch);
            }
            break;
          }
        }
      }
      out.events.push_back(std::move(ev));
      continue;
    }
    RowWrite w;
    w.view = view.id;
    w.key = std::move(key);
    putEventTime(w.row, ts_us);
    for (size_t i = 0; i < view.features.size(); ++i) {
      putVarint(w.row, view.features[i].id);
      Status s = encodeJsonValue(df.at(*cols[i], r), view.features[i].type, o.lenient, w.row);
      if (!s.isOk()) return cellError(o, r, cols[i]->name, s);
    }
    if (view.ttl_s > 0) {
      w.expire_at_us = ts_us + (view.ttl_s + o.retain_expired_s) * 1'000'000;
      if (w.expire_at_us <= o.now_us) {
        ++out.expired;
        continue;
      }
    }
    out.rows.push_back(std::move(w));
  }
  return Status::ok();
}

Status applyAggEvents(OnlineStore& store, const FeatureView& view, std::vector<AggEvent>& events,
                      int64_t now_us, int64_t retain_expired_s, std::mutex& lock) {
  if (events.empty()) return Status::ok();
  // One state per entity: read each once, fold its events, write each once. Folding needs no
  // time order (an event lands in its bucket; `last` compares event times, and on a tie the later
  // arrival wins), so the events are taken as they came.
  std::unordered_map<std::string_view, size_t> slot;
  std::vector<std::string_view> keys;
  std::vector<size_t> slot_of(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    auto [it, inserted] = slot.emplace(events[i].key, keys.size());
    if (inserted) keys.push_back(events[i].key);
    slot_of[i] = it->second;
  }
  std::vector<ReadKey> rk;
  rk.reserve(keys.size());
  for (auto k : keys) rk.push_back({view.id, k});
  std::lock_guard<std::mutex> guard(lock);
  std::vector<std::string> rows;
  INFERA_RETURN_IF_ERROR(store.read(rk, rows));
  std::vector<AggState> states(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (rows[i].size() >= kRowHeader) {
      states[i] = decodeAggState(view, std::string_view(rows[i]).substr(kRowHeader));
      states[i].latest_ts = eventTimeOf(rows[i]);
    }
  }
  std::vector<bool> changed(keys.size(), false);
  for (size_t k = 0; k < events.size(); ++k) {
    const size_t i = slot_of[k];
    if (addEvent(view, states[i], events[k].ts_us, events[k].inputs, now_us)) changed[i] = true;
  }
  std::vector<RowWrite> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!changed[i]) continue;
    RowWrite w;
    w.view = view.id;
    w.key = std::string(keys[i]);
    putEventTime(w.row, states[i].latest_ts);
    encodeAggState(view, states[i], w.row);
    w.expire_at_us = states[i].latest_ts + (view.ttl_s + retain_expired_s) * 1'000'000;
    out.push_back(std::move(w));
  }
  return store.put(std::move(out));
}

}  // namespace infera::features
