// Definitions as code: the repository's YAML is validated with every error's file, key path and
// line; plans list what changes and refuse what breaks a served feature; storage ids survive.

#include <gtest/gtest.h>

#include "features/internal/registry.h"

namespace infera::features {
namespace {

std::map<std::string, std::string> testRepo() {
  auto files =
      readRepositoryDir(std::string(INFERA_TEST_SOURCE_DIR) + "/tests/testdata/features/repo");
  EXPECT_TRUE(files.ok()) << files.status().message();
  return files.ok() ? *files : std::map<std::string, std::string>{};
}

std::shared_ptr<const Registry> build(const std::map<std::string, std::string>& files,
                                      const StorageIds& ids = {}) {
  auto r = buildRegistry(files, ids);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : nullptr;
}

std::string errorsOf(const std::map<std::string, std::string>& files) {
  auto r = buildRegistry(files, {});
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

const char* kBase = R"(project: p
entities:
  - {name: driver, join_keys: [driver_id], value_type: int64}
push_sources:
  - {name: src}
feature_views:
  - name: stats
    entities: [driver]
    source: src
    ttl: 2h
    schema:
      - {name: a, dtype: int64}
      - {name: b, dtype: double}
  - name: other
    entities: [driver]
    schema:
      - {name: c, dtype: string}
feature_services:
  - {name: svc, features: ["stats:a"]}
)";

TEST(RegistryTest, BuildsTheTestRepository) {
  auto reg = build(testRepo());
  ASSERT_TRUE(reg);
  EXPECT_EQ(reg->project, "rides");
  ASSERT_TRUE(reg->view("driver_hourly_stats"));
  const FeatureView& v = *reg->view("driver_hourly_stats");
  EXPECT_EQ(v.ttl_s, 86400);
  ASSERT_EQ(v.entities.size(), 1u);
  EXPECT_EQ(v.entities[0]->join_key, "driver_id");
  EXPECT_EQ(v.features.size(), 3u);
  EXPECT_EQ(typeName(v.feature("conv_rate")->type), "float");
  EXPECT_EQ(typeName(reg->view("driver_profile")->feature("tags")->type), "list<string>");
  const FeatureView& agg = *reg->view("driver_trip_windows");
  EXPECT_TRUE(agg.aggregated());
  EXPECT_EQ(agg.ttl_s, 86400);                  // the longest window
  EXPECT_EQ(agg.aggregations[1].bucket_s, 60);  // 1h / 60
  EXPECT_EQ(typeName(agg.feature("last_city")->type), "string");
  EXPECT_EQ(reg->views_by_source.at("driver_stats_push_source").size(), 1u);
  const auto& svc = reg->services.at("driver_activity");
  ASSERT_EQ(svc.projections.size(), 2u);
  EXPECT_EQ(svc.projections[0].features.size(), 3u);  // the whole view
  EXPECT_EQ(svc.projections[1].features.size(), 1u);
  EXPECT_EQ(reg->services.at("driver_rates").projections[0].alias, "dhs");
  // Every view and feature has a distinct storage id.
  std::set<uint32_t> ids;
  for (const auto& [n, view] : reg->views) ids.insert(view->id);
  EXPECT_EQ(ids.size(), reg->views.size());
}

TEST(RegistryTest, ReportsEveryErrorWithFileKeyAndLine) {
  const std::string msg = errorsOf({{"bad.yaml", R"(entities:
  - {name: driver, value_type: int64}
feature_views:
  - name: v
    entities: [drivr]
    schema:
      - {name: a, dtype: int64}
      - {name: a, dtype: double}
      - {name: b, dtype: decimal}
feature_services:
  - {name: s, features: ["v:zzz"]}
)"}});
  EXPECT_NE(msg.find("bad.yaml:feature_views[0].entities (line 5): unknown entity 'drivr'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("bad.yaml:feature_views[0].schema[1].name (line 8): duplicate feature 'a'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("bad.yaml:feature_views[0].schema[2].dtype (line 9): bad type 'decimal'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unknown feature 'zzz' in view 'v'"), std::string::npos) << msg;
}

TEST(RegistryTest, RefusesUnknownKeysDuplicatesAndBadWindows) {
  const std::string msg = errorsOf({{"a.yaml", R"(entities: [{name: e, colour: red}]
push_sources: [{name: p}]
feature_views:
  - name: w
    entities: [e]
    source: p
    aggregations:
      - {name: n, function: count, window: 30s}
      - {name: m, function: median, column: x, window: 1h}
      - {name: s, function: sum, column: x, window: 1h, bucket: 7m}
)"},
                                    {"b.yaml", "entities: [{name: e}]\n"}});
  EXPECT_NE(msg.find("a.yaml:entities[0].colour (line 1): unknown key"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be from 1m to 30d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown aggregation 'median'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must divide the window"), std::string::npos) << msg;
  EXPECT_NE(msg.find("entity 'e' is already defined at a.yaml:1"), std::string::npos) << msg;
}

// Feast's `owner` on views and services names the team whose data they are (the serving tests
// show what it permits); it is a plain string, changing it is a planned change, and the other
// keys of a view stay checked.
TEST(RegistryTest, ReadsOwnersOfViewsAndServicesAndPlansTheirChange) {
  std::string owned = kBase;
  owned.replace(owned.find("  - name: stats\n"), 16, "  - name: stats\n    owner: alpha\n");
  owned.replace(owned.find("{name: svc,"), 11, "{name: svc, owner: alpha,");
  auto base = build({{"r.yaml", kBase}});
  auto reg = build({{"r.yaml", owned}}, base->ids);
  ASSERT_TRUE(base && reg);
  EXPECT_EQ(reg->view("stats")->owner, "alpha");
  EXPECT_EQ(reg->view("other")->owner, "") << "no owner: shared";
  EXPECT_EQ(reg->services.at("svc").owner, "alpha");
  const Plan p = planChanges(*base, *reg);
  EXPECT_EQ(p.changes,
            (std::vector<std::string>{"~ feature view stats: owner shared -> team alpha",
                                      "~ feature service svc: owner shared -> team alpha"}));
  EXPECT_TRUE(p.breaking.empty());

  std::string bad = kBase;
  bad.replace(bad.find("  - name: other\n"), 16,
              "  - name: other\n    owner: [a, b]\n    colour: red\n");
  const std::string msg = errorsOf({{"r.yaml", bad}});
  EXPECT_NE(msg.find("r.yaml:feature_views[1].owner (line 15): must be a scalar value"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("r.yaml:feature_views[1].colour (line 16): unknown key"), std::string::npos)
      << msg;
}

// Names from the repository end up in JSON answers and in the stored registry: text only.
TEST(RegistryTest, RefusesAFileThatIsNotUtf8) {
  std::string text = kBase;
  text.replace(text.find("name: other"), 11, "name: oth\xff");
  const std::string msg = errorsOf({{"r.yaml", text}});
  EXPECT_NE(msg.find("r.yaml: not valid UTF-8"), std::string::npos) << msg;
}

TEST(RegistryTest, ReportsYamlSyntaxErrorsWithTheirFile) {
  const std::string msg = errorsOf({{"x.yaml", "entities: [\n"}});
  EXPECT_NE(msg.find("x.yaml: YAML syntax error"), std::string::npos) << msg;
}

TEST(RegistryTest, PlansAdditionsAndRemovalsAndFreesRemovedViews) {
  auto cur = build({{"r.yaml", kBase}});
  std::string next_text = kBase;
  next_text.replace(next_text.find("  - name: other"), std::string::npos,
                    "feature_services:\n  - {name: svc, features: [\"stats:a\"]}\n");
  next_text.replace(next_text.find("      - {name: b, dtype: double}"), 0,
                    "      - {name: z, dtype: bool}\n");
  auto next = build({{"r.yaml", next_text}}, cur->ids);
  Plan p = planChanges(*cur, *next);
  EXPECT_TRUE(p.breaking.empty());
  ASSERT_EQ(p.dropped_views.size(), 1u);
  EXPECT_EQ(p.dropped_views[0], cur->view("other")->id);
  std::string all;
  for (const auto& c : p.changes) all += c + "\n";
  EXPECT_NE(all.find("~ feature view stats: + z"), std::string::npos) << all;
  EXPECT_NE(all.find("- feature view other (its stored values are deleted)"), std::string::npos)
      << all;
  // Kept views and features keep their ids.
  EXPECT_EQ(next->view("stats")->id, cur->view("stats")->id);
  EXPECT_EQ(next->view("stats")->feature("a")->id, cur->view("stats")->feature("a")->id);
  EXPECT_TRUE(planChanges(*next, *next).empty());
}

TEST(RegistryTest, ATypeChangeOfAServedFeatureIsBreaking) {
  auto cur = build({{"r.yaml", kBase}});
  std::string served = kBase;
  served.replace(served.find("{name: a, dtype: int64}"), 23, "{name: a, dtype: string}");
  Plan p = planChanges(*cur, *build({{"r.yaml", served}}, cur->ids));
  ASSERT_EQ(p.breaking.size(), 1u);
  EXPECT_NE(p.breaking[0].find(
                "feature a changes type (int64 -> string) but a feature service serves it"),
            std::string::npos);
  // b is not served: its type may change, under a new id (old values are never read as the new
  // type).
  std::string unserved = kBase;
  unserved.replace(unserved.find("{name: b, dtype: double}"), 24, "{name: b, dtype: string}");
  auto next = build({{"r.yaml", unserved}}, cur->ids);
  EXPECT_TRUE(planChanges(*cur, *next).breaking.empty());
  EXPECT_NE(next->view("stats")->feature("b")->id, cur->view("stats")->feature("b")->id);
}

TEST(RegistryTest, SerializedFormRebuildsTheSameIds) {
  auto reg = build(testRepo());
  auto parsed = parseSerializedRegistry(serializeRegistry(*reg));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto again = build(parsed->first, parsed->second);
  for (const auto& [n, v] : reg->views) {
    EXPECT_EQ(again->view(n)->id, v->id) << n;
    for (const auto& f : v->features)
      EXPECT_EQ(again->view(n)->feature(f.name)->id, f.id) << n << ":" << f.name;
  }
  EXPECT_TRUE(planChanges(*reg, *again).empty());
}

TEST(RegistryTest, ParsesDurations) {
  EXPECT_EQ(*parseDuration("90"), 90);
  EXPECT_EQ(*parseDuration("15m"), 900);
  EXPECT_EQ(*parseDuration("2w"), 14 * 86400);
  EXPECT_FALSE(parseDuration("1y").ok());
  EXPECT_FALSE(parseDuration("-5s").ok());
}

}  // namespace
}  // namespace infera::features
