// Stream aggregations over sliding windows with time passed in (the injected clock's role):
// golden results for each function as events arrive, late, out of order, and as windows slide.

#include <gtest/gtest.h>

#include <cmath>

#include "features/internal/aggregation.h"

namespace infera::features {
namespace {

constexpr int64_t kMin = 60'000'000;  // µs
constexpr int64_t kT0 =
    1'700'000'000LL * 1'000'000 - (1'700'000'000LL * 1'000'000) % (60 * kMin);  // an hour boundary

std::shared_ptr<const Registry> repo() {
  auto r = buildRegistry({{"a.yaml", R"(entities: [{name: d, join_keys: [d_id]}]
push_sources: [{name: p}]
feature_views:
  - name: w
    entities: [d]
    source: p
    aggregations:
      - {name: n_10m, function: count, window: 10m, bucket: 1m}
      - {name: sum_1h, function: sum, column: x, window: 1h, bucket: 1m}
      - {name: avg_1h, function: avg, column: x, window: 1h, bucket: 1m}
      - {name: min_1h, function: min, column: x, window: 1h, bucket: 1m}
      - {name: max_1h, function: max, column: x, window: 1h, bucket: 1m}
      - {name: last_1h, function: last, column: s, dtype: string, window: 1h, bucket: 1m}
      - {name: distinct_1d, function: distinct_count, column: s, dtype: string, window: 1d}
)"}},
                         {});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

class AggregationTest : public ::testing::Test {
 protected:
  void add(int64_t ts, double x, const std::string& s, int64_t now) {
    std::vector<AggInput> in(view_.aggregations.size());
    for (auto& i : in) {
      i.present = true;
      i.number = x;
      i.hash = hashBytes(s);
    }
    in[5].encoded =
        std::string(1, static_cast<char>(Scalar::kString)) + static_cast<char>(s.size()) + s;
    addEvent(view_, state_, ts, in, now);
    // Every update is stored and read back as bytes.
    std::string bytes;
    encodeAggState(view_, state_, bytes);
    const int64_t latest = state_.latest_ts;
    state_ = decodeAggState(view_, bytes);
    state_.latest_ts = latest;
  }
  std::string value(size_t agg, int64_t now) {
    std::string out;
    bool null = false;
    appendAggJson(view_, state_, agg, now, out, null);
    return out;
  }
  std::shared_ptr<const Registry> reg_ = repo();
  const FeatureView& view_ = *reg_->view("w");
  AggState state_;
};

TEST_F(AggregationTest, EachFunctionOverItsWindow) {
  add(kT0 + 1 * kMin, 10, "a", kT0 + 1 * kMin);
  add(kT0 + 2 * kMin, 4, "b", kT0 + 2 * kMin);
  add(kT0 + 2 * kMin + 5, 7, "a", kT0 + 2 * kMin + 5);
  const int64_t now = kT0 + 3 * kMin;
  EXPECT_EQ(value(0, now), "3");
  EXPECT_EQ(value(1, now), "21.0");
  EXPECT_EQ(value(2, now), "7.0");
  EXPECT_EQ(value(3, now), "4.0");
  EXPECT_EQ(value(4, now), "10.0");
  EXPECT_EQ(value(5, now), "\"a\"");  // the latest event's
  EXPECT_EQ(value(6, now), "2");
}

TEST_F(AggregationTest, WindowsSlideWithTimeAlone) {
  add(kT0, 1, "a", kT0);
  add(kT0 + 5 * kMin, 2, "b", kT0 + 5 * kMin);
  EXPECT_EQ(value(0, kT0 + 9 * kMin), "2");
  EXPECT_EQ(value(0, kT0 + 10 * kMin), "1");  // the first event's bucket left the 10-minute window
  EXPECT_EQ(value(0, kT0 + 15 * kMin), "0");
  EXPECT_EQ(value(1, kT0 + 15 * kMin), "3.0");  // still inside the hour
  EXPECT_EQ(value(1, kT0 + 60 * kMin), "2.0");
  EXPECT_EQ(value(2, kT0 + 65 * kMin), "null");  // an empty window has no average
  EXPECT_EQ(value(4, kT0 + 65 * kMin), "null");
  EXPECT_EQ(value(1, kT0 + 65 * kMin), "0.0");
  EXPECT_EQ(value(6, kT0 + 65 * kMin), "2");  // the day window still has both
}

TEST_F(AggregationTest, OutOfOrderEventsLandInTheirBucketAndLastKeepsTheNewest) {
  add(kT0 + 5 * kMin, 1, "new", kT0 + 5 * kMin);
  add(kT0 + 2 * kMin, 1, "old", kT0 + 5 * kMin);  // late, still in every window
  EXPECT_EQ(value(0, kT0 + 6 * kMin), "2");
  EXPECT_EQ(value(5, kT0 + 6 * kMin), "\"new\"");
  EXPECT_EQ(value(0, kT0 + 12 * kMin), "1");  // the late one slides out first
}

TEST_F(AggregationTest, EventsOlderThanTheWindowAreDropped) {
  add(kT0 + 30 * kMin, 5, "a", kT0 + 30 * kMin);
  add(kT0 + 5 * kMin, 5, "a", kT0 + 30 * kMin);  // 25 minutes late: outside the 10-minute count
  EXPECT_EQ(value(0, kT0 + 30 * kMin), "1");
  EXPECT_EQ(value(1, kT0 + 30 * kMin), "10.0");  // inside the hour
}

TEST_F(AggregationTest, DistinctCountIsWithinItsErrorBound) {
  for (int i = 0; i < 5000; ++i)
    add(kT0 + (i % 50) * kMin / 50, 1, "rider-" + std::to_string(i % 2000), kT0 + kMin);
  const double est = std::stod(value(6, kT0 + kMin));
  EXPECT_NEAR(est, 2000, 2000 * 0.1);  // p = 10: ~3% standard error; 10% is > 3 sigma
}

}  // namespace
}  // namespace infera::features
