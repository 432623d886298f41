#pragma once
// Prometheus metrics with per-worker cells (see STYLE.md "Logs and metrics").
//
// Families and their label sets are declared at start-up (or on the control thread); the hot path
// holds a Counter/Gauge/Histogram handle and calls inc(shard, ...) with its worker index. Each
// shard's cell is written by one thread only (relaxed load+store, no lock prefix, no mutex) and
// read by scrape(), which sums the shards. Declaring series takes a mutex; never do it per request.

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace infera::obs {

inline constexpr int kMaxShards = 64;

struct alignas(64) Cell {
  std::atomic<double> value{0};
  void add(double v) {
    value.store(value.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
};

class Counter {
 public:
  explicit Counter(int shards) : cells_(static_cast<size_t>(shards)) {}
  void inc(int shard, double v = 1) { cells_[static_cast<size_t>(shard)].add(v); }
  double value() const;

 private:
  std::vector<Cell> cells_;
};

// Gauges are sums of per-shard deltas (in-flight, open connections).
class Gauge {
 public:
  explicit Gauge(int shards) : cells_(static_cast<size_t>(shards)) {}
  void add(int shard, double v) { cells_[static_cast<size_t>(shard)].add(v); }
  // For a gauge written by one thread only: sets shard 0 and zeroes the others' effect.
  void set(double v);
  double value() const;

 private:
  std::vector<Cell> cells_;
};

class Histogram {
 public:
  Histogram(int shards, const std::vector<double>* bounds);
  void observe(int shard, double v);
  // Per-bucket counts (non-cumulative, last is +Inf), count and sum summed over shards.
  void snapshot(std::vector<uint64_t>& buckets, uint64_t& count, double& sum) const;
  // Approximate quantile (linear within bucket); for tests and summaries.
  double quantile(double q) const;

 private:
  struct alignas(64) Shard {
    std::unique_ptr<std::atomic<uint64_t>[]> counts;
    std::atomic<double> sum{0};
    std::atomic<uint64_t> count{0};
  };
  const std::vector<double>* bounds_;
  std::vector<Shard> shards_;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// One metric name with its help, type and label names; series are created per label values.
class Family {
 public:
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
         int shards, std::vector<double> bounds = {});
  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }

  // Returns the series for these label values (created on first use; pointer stable for life).
  Counter* counter(const std::vector<std::string>& label_values = {});
  Gauge* gauge(const std::vector<std::string>& label_values = {});
  Histogram* histogram(const std::vector<std::string>& label_values = {});
  // A gauge computed at scrape time.
  void setCallback(std::function<double()> fn);
  // One series computed at scrape time (a value counted elsewhere, as net's server stats).
  void setCallback(const std::vector<std::string>& label_values, std::function<double()> fn);
  // Drops a series from the family (a queue a reload removed): no longer rendered. Only for
  // series whose pointer nobody holds (callers that look theirs up on every use).
  void remove(const std::vector<std::string>& label_values);

  void render(std::string& out) const;

 private:
  struct Series {
    std::vector<std::string> labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> callback;
  };
  Series* series(const std::vector<std::string>& label_values);
  std::string labelString(const std::vector<std::string>& values,
                          const std::string& extra = {}) const;

  std::string name_;
  std::string help_;
  MetricType type_;
  std::vector<std::string> label_names_;
  int shards_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>> series_;
  std::function<double()> callback_;
};

class MetricsRegistry {
 public:
  explicit MetricsRegistry(int shards);
  int shards() const { return shards_; }

  // Declares a family; declaring the same name twice returns the first (types must match).
  Family* counterFamily(const std::string& name, const std::string& help,
                        std::vector<std::string> labels = {});
  Family* gaugeFamily(const std::string& name, const std::string& help,
                      std::vector<std::string> labels = {});
  Family* histogramFamily(const std::string& name, const std::string& help,
                          std::vector<std::string> labels, std::vector<double> bounds);

  // Prometheus text exposition format 0.0.4.
  std::string scrape() const;
  // The same for the families named in `names` only (unknown names are skipped).
  std::string scrape(const std::vector<std::string>& names) const;
  // Sum over all series of a family whose labels contain every given (name=value); for tests.
  double sum(const std::string& name) const;

  // Default latency buckets in seconds: 100 µs .. 60 s.
  static std::vector<double> latencyBuckets();

 private:
  Family* family(const std::string& name, const std::string& help, MetricType type,
                 std::vector<std::string> labels, std::vector<double> bounds);
  int shards_;
  mutable std::mutex mu_;
  std::deque<Family> families_;
  std::map<std::string, Family*> by_name_;
};

// Adds infera_build_info{version,commit} 1 and process gauges (RSS, open fds, start time).
void registerProcessMetrics(MetricsRegistry& registry, const std::string& version,
                            const std::string& commit);

// Resident set size of this process in bytes (from /proc/self/statm).
int64_t residentBytes();

}  // namespace infera::obs
