#pragma once
// The feature repository: definitions as code (YAML files in a directory) parsed and validated
// into an immutable Registry, the stable ids that storage uses (kept across applies), and the
// plan between two registries (what `infera features plan|apply` shows and refuses).
//
// A repository file may hold any of these top-level keys (the repository is the union of its
// files; `project` is given once):
//   project: rides
//   entities:        [{name, join_keys: [one key], value_type, description}]
//   push_sources:    [{name, timestamp_field: event_timestamp, created_timestamp_column,
//                      description}]
//   feature_views:   [{name, entities: [names], ttl: 1d, online: true, source: <push source>,
//                      schema: [{name, dtype}], aggregations: [{name, function, column, dtype,
//                      window, bucket}], description, owner}]
//   feature_services:[{name, features: ["view", "view:feature", ...],
//                      projections: [{view, features: [names], alias}], description, owner}]
// `owner` (Feast's field) is the team whose data a view or service is: only that team's keys read
// or write it on the data port, and other teams see it as unknown; without an owner it is shared
// (every team). Entities and push sources accept `owner` and ignore it: they hold no data.
// Durations: an integer of seconds or "90s", "15m", "1h", "7d", "2w" (0 = forever for ttl).
//
// Immutable once built; shared between loops as shared_ptr<const Registry>.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/text.h"
#include "features/internal/values.h"

namespace infera::features {

// Where a definition was written, for messages.
struct Origin {
  std::string file;
  int line = 0;
  std::string where() const { return file + (line > 0 ? ":" + std::to_string(line) : ""); }
};

struct Entity {
  std::string name;
  std::string join_key;
  Scalar type = Scalar::kInt64;
  Origin origin;
};

enum class AggFunction { kCount, kSum, kAvg, kMin, kMax, kLast, kDistinctCount };
const char* aggFunctionName(AggFunction f);

struct Aggregation {
  AggFunction function = AggFunction::kCount;
  std::string column;  // input column (empty for count: counts events)
  FeatureType column_type{Scalar::kDouble, false};
  int64_t window_s = 3600;
  int64_t bucket_s = 60;
};

struct Feature {
  std::string name;
  FeatureType type;  // an aggregation's output type
  uint32_t id = 0;   // stable across applies; a new id when the type changes
  int agg = -1;      // index into FeatureView::aggregations, or -1
};

struct FeatureView {
  std::string name;
  uint32_t id = 0;  // storage: RocksDB column family / Redis key prefix; new when re-created
  std::vector<const Entity*> entities;
  int64_t ttl_s = 0;  // 0 = forever
  bool online = true;
  std::string source;  // push source name, or empty
  std::string owner;   // the owning team; empty = shared
  std::vector<Feature> features;
  std::vector<Aggregation> aggregations;  // non-empty: a stream-aggregation view
  std::unordered_map<std::string, size_t, TransparentStringHash, std::equal_to<>> by_name;
  uint32_t max_feature_id = 0;
  Origin origin;

  bool aggregated() const { return !aggregations.empty(); }
  const Feature* feature(std::string_view n) const {
    auto it = by_name.find(n);
    return it == by_name.end() ? nullptr : &features[it->second];
  }
};

struct PushSource {
  std::string name;
  std::string timestamp_field = "event_timestamp";
  std::string created_column;
  Origin origin;
};

struct Projection {
  const FeatureView* view = nullptr;
  std::string alias;             // name_to_use(): alias or the view's name
  std::vector<size_t> features;  // indices into view->features
};

struct FeatureService {
  std::string name;
  std::string owner;  // the owning team; empty = shared
  std::vector<Projection> projections;
  Origin origin;
};

// Storage ids of a repository's views and features, persisted with it.
struct StorageIds {
  struct View {
    uint32_t id = 0;
    std::map<std::string, std::pair<uint32_t, std::string>> features;  // name -> (id, type name)
    uint32_t next_feature = 1;
  };
  std::map<std::string, View> views;
  uint32_t next_view = 1;
};

struct Registry {
  std::string project = "default";
  std::map<std::string, std::string> files;  // name -> YAML text, as applied
  std::map<std::string, std::unique_ptr<Entity>> entities;
  std::map<std::string, std::unique_ptr<FeatureView>> views;
  std::map<std::string, PushSource> push_sources;
  std::map<std::string, FeatureService> services;
  std::unordered_map<std::string, const Entity*, TransparentStringHash, std::equal_to<>>
      by_join_key;
  std::map<std::string, std::vector<const FeatureView*>> views_by_source;
  StorageIds ids;

  const FeatureView* view(std::string_view n) const {
    auto it = views.find(std::string(n));
    return it == views.end() ? nullptr : it->second.get();
  }
  const FeatureView* viewById(uint32_t id) const;
};

// Parses and validates a repository (file name -> YAML text), assigning storage ids continued
// from `previous` (ids of views and features that are kept stay; new ones get fresh ids).
// kInvalidArgument listing every error as "file: path (line N): message".
Result<std::shared_ptr<const Registry>> buildRegistry(
    const std::map<std::string, std::string>& files, const StorageIds& previous);
// Reads every *.yaml / *.yml file directly in `dir`.
Result<std::map<std::string, std::string>> readRepositoryDir(const std::string& dir);

// What applying `next` over `current` changes. `breaking` lists changes that break a served
// feature (a type change of a feature a feature service in both keeps serving, or of a served
// view's entity key); apply refuses them.
struct Plan {
  std::vector<std::string> changes;  // "+ feature view driver_stats (3 features)", ...
  std::vector<std::string> breaking;
  std::vector<uint32_t> dropped_views;  // storage to free
  std::vector<const FeatureView*> created_views;
  bool empty() const { return changes.empty(); }
};
Plan planChanges(const Registry& current, const Registry& next);

// The persisted form (files and ids) and back.
std::string serializeRegistry(const Registry& r);
Result<std::pair<std::map<std::string, std::string>, StorageIds>> parseSerializedRegistry(
    const std::string& blob);

// "90s", "15m", "1h", "7d", "2w", or a number of seconds.
Result<int64_t> parseDuration(std::string_view s);

}  // namespace infera::features
