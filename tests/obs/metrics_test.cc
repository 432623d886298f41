#include "obs/metrics.h"

#include <gtest/gtest.h>

#include <thread>

namespace infera::obs {
namespace {

TEST(MetricsTest, ShardedCountersSumAtScrape) {
  MetricsRegistry r(2);
  auto* fam = r.counterFamily("infera_test_requests_total", "Requests.", {"model"});
  auto* a = fam->counter({"a"});
  std::thread t0([&] {
    for (int i = 0; i < 100000; ++i) a->inc(0);
  });
  std::thread t1([&] {
    for (int i = 0; i < 100000; ++i) a->inc(1);
  });
  t0.join();
  t1.join();
  EXPECT_EQ(a->value(), 200000);
  const std::string text = r.scrape();
  EXPECT_NE(text.find("# HELP infera_test_requests_total Requests.\n# TYPE "
                      "infera_test_requests_total counter\n"),
            std::string::npos);
  EXPECT_NE(text.find("infera_test_requests_total{model=\"a\"} 200000\n"), std::string::npos)
      << text;
}

TEST(MetricsTest, HistogramRendersCumulativeBucketsSumAndCount) {
  MetricsRegistry r(1);
  auto* h = r.histogramFamily("infera_test_latency_seconds", "Latency.", {}, {0.1, 1})->histogram();
  h->observe(0, 0.05);
  h->observe(0, 0.5);
  h->observe(0, 5);
  const std::string text = r.scrape();
  EXPECT_NE(text.find("infera_test_latency_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("infera_test_latency_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("infera_test_latency_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("infera_test_latency_seconds_sum 5.55\n"), std::string::npos);
  EXPECT_NE(text.find("infera_test_latency_seconds_count 3\n"), std::string::npos);
}

TEST(MetricsTest, GaugesAddAcrossShardsAndEscapeLabels) {
  MetricsRegistry r(2);
  auto* g = r.gaugeFamily("infera_test_in_flight", "In flight.", {"who"})->gauge({"a\"b"});
  g->add(0, 3);
  g->add(1, -1);
  EXPECT_EQ(g->value(), 2);
  EXPECT_NE(r.scrape().find("infera_test_in_flight{who=\"a\\\"b\"} 2\n"), std::string::npos)
      << r.scrape();
  EXPECT_EQ(r.sum("infera_test_in_flight"), 2);
}

TEST(MetricsTest, ProcessMetricsIncludeBuildInfoAndRss) {
  MetricsRegistry r(1);
  registerProcessMetrics(r, "1.2.3", "abc");
  const std::string text = r.scrape();
  EXPECT_NE(text.find("infera_build_info{version=\"1.2.3\",commit=\"abc\"} 1"), std::string::npos);
  EXPECT_GT(r.sum("process_resident_memory_bytes"), 1e6);
}

}  // namespace
}  // namespace infera::obs
