#include "obs/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "core/status.h"

namespace infera::obs {

double Counter::value() const {
  double total = 0;
  for (const auto& c : cells_) total += c.value.load(std::memory_order_relaxed);
  return total;
}

void Gauge::set(double v) {
  double others = 0;
  for (size_t i = 1; i < cells_.size(); ++i)
    others += cells_[i].value.load(std::memory_order_relaxed);
  cells_[0].value.store(v - others, std::memory_order_relaxed);
}

double Gauge::value() const {
  double total = 0;
  for (const auto& c : cells_) total += c.value.load(std::memory_order_relaxed);
  return total;
}

Histogram::Histogram(int shards, const std::vector<double>* bounds)
    : bounds_(bounds), shards_(static_cast<size_t>(shards)) {
  for (auto& s : shards_) {
    s.counts = std::make_unique<std::atomic<uint64_t>[]>(bounds_->size() + 1);
    for (size_t i = 0; i <= bounds_->size(); ++i) s.counts[i].store(0);
  }
}

void Histogram::observe(int shard, double v) {
  auto& s = shards_[static_cast<size_t>(shard)];
  const auto it = std::lower_bound(bounds_->begin(), bounds_->end(), v);
  const size_t idx = static_cast<size_t>(it - bounds_->begin());
  s.counts[idx].store(s.counts[idx].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  s.sum.store(s.sum.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  s.count.store(s.count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void Histogram::snapshot(std::vector<uint64_t>& buckets, uint64_t& count, double& sum) const {
  buckets.assign(bounds_->size() + 1, 0);
  count = 0;
  sum = 0;
  for (const auto& s : shards_) {
    for (size_t i = 0; i <= bounds_->size(); ++i)
      buckets[i] += s.counts[i].load(std::memory_order_relaxed);
    count += s.count.load(std::memory_order_relaxed);
    sum += s.sum.load(std::memory_order_relaxed);
  }
}

double Histogram::quantile(double q) const {
  std::vector<uint64_t> b;
  uint64_t count;
  double sum;
  snapshot(b, count, sum);
  if (count == 0) return 0;
  const double target = q * static_cast<double>(count);
  double seen = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (seen + static_cast<double>(b[i]) >= target) {
      const double lo = i == 0 ? 0 : (*bounds_)[i - 1];
      const double hi = i < bounds_->size() ? (*bounds_)[i] : lo;
      const double frac = b[i] == 0 ? 0 : (target - seen) / static_cast<double>(b[i]);
      return lo + (hi - lo) * frac;
    }
    seen += static_cast<double>(b[i]);
  }
  return bounds_->empty() ? 0 : bounds_->back();
}

Family::Family(std::string name, std::string help, MetricType type,
               std::vector<std::string> label_names, int shards, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      shards_(shards),
      bounds_(std::move(bounds)) {}

Family::Series* Family::series(const std::vector<std::string>& label_values) {
  INFERA_CHECK(label_values.size() == label_names_.size(),
               "metric " + name_ + " expects " + std::to_string(label_names_.size()) + " labels");
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = series_[label_values];
  if (!slot) {
    slot = std::make_unique<Series>();
    slot->labels = label_values;
    switch (type_) {
      case MetricType::kCounter:
        slot->counter = std::make_unique<Counter>(shards_);
        break;
      case MetricType::kGauge:
        slot->gauge = std::make_unique<Gauge>(shards_);
        break;
      case MetricType::kHistogram:
        slot->histogram = std::make_unique<Histogram>(shards_, &bounds_);
        break;
    }
  }
  return slot.get();
}

Counter* Family::counter(const std::vector<std::string>& label_values) {
  INFERA_CHECK(type_ == MetricType::kCounter, name_ + " is not a counter");
  return series(label_values)->counter.get();
}
Gauge* Family::gauge(const std::vector<std::string>& label_values) {
  INFERA_CHECK(type_ == MetricType::kGauge, name_ + " is not a gauge");
  return series(label_values)->gauge.get();
}
Histogram* Family::histogram(const std::vector<std::string>& label_values) {
  INFERA_CHECK(type_ == MetricType::kHistogram, name_ + " is not a histogram");
  return series(label_values)->histogram.get();
}
void Family::remove(const std::vector<std::string>& label_values) {
  std::lock_guard<std::mutex> lock(mu_);
  series_.erase(label_values);
}

void Family::setCallback(std::function<double()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  callback_ = std::move(fn);
}

void Family::setCallback(const std::vector<std::string>& label_values, std::function<double()> fn) {
  Series* s = series(label_values);
  std::lock_guard<std::mutex> lock(mu_);
  s->callback = std::move(fn);
}

namespace {
void appendNumber(std::string& out, double v) {
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.9g", v);
  }
  out += buf;
}
void appendLabelValue(std::string& out, const std::string& v) {
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
}
}  // namespace

std::string Family::labelString(const std::vector<std::string>& values,
                                const std::string& extra) const {
  if (values.empty() && extra.empty()) return {};
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ",";
    out += label_names_[i];
    out += "=\"";
    appendLabelValue(out, values[i]);
    out += "\"";
  }
  if (!extra.empty()) {
    if (!values.empty()) out += ",";
    out += extra;
  }
  out += "}";
  return out;
}

void Family::render(std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  out += "# HELP " + name_ + " " + help_ + "\n";
  out += "# TYPE " + name_ + " ";
  out += type_ == MetricType::kCounter ? "counter"
         : type_ == MetricType::kGauge ? "gauge"
                                       : "histogram";
  out += "\n";
  if (callback_) {
    out += name_ + " ";
    appendNumber(out, callback_());
    out += "\n";
  }
  for (const auto& [values, s] : series_) {
    if (s->counter || s->gauge) {
      out += name_ + labelString(values) + " ";
      appendNumber(out, s->callback  ? s->callback()
                        : s->counter ? s->counter->value()
                                     : s->gauge->value());
      out += "\n";
    } else {
      std::vector<uint64_t> buckets;
      uint64_t count;
      double sum;
      s->histogram->snapshot(buckets, count, sum);
      uint64_t cumulative = 0;
      for (size_t i = 0; i < buckets.size(); ++i) {
        cumulative += buckets[i];
        std::string le = "le=\"";
        if (i < bounds_.size()) {
          appendNumber(le, bounds_[i]);
        } else {
          le += "+Inf";
        }
        le += "\"";
        out += name_ + "_bucket" + labelString(values, le) + " ";
        appendNumber(out, static_cast<double>(cumulative));
        out += "\n";
      }
      out += name_ + "_sum" + labelString(values) + " ";
      appendNumber(out, sum);
      out += "\n" + name_ + "_count" + labelString(values) + " ";
      appendNumber(out, static_cast<double>(count));
      out += "\n";
    }
  }
}

MetricsRegistry::MetricsRegistry(int shards) : shards_(std::clamp(shards, 1, kMaxShards)) {}

Family* MetricsRegistry::family(const std::string& name, const std::string& help, MetricType type,
                                std::vector<std::string> labels, std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    INFERA_CHECK(it->second->type() == type, "metric " + name + " redeclared with another type");
    return it->second;
  }
  families_.emplace_back(name, help, type, std::move(labels), shards_, std::move(bounds));
  by_name_[name] = &families_.back();
  return &families_.back();
}

Family* MetricsRegistry::counterFamily(const std::string& name, const std::string& help,
                                       std::vector<std::string> labels) {
  return family(name, help, MetricType::kCounter, std::move(labels), {});
}
Family* MetricsRegistry::gaugeFamily(const std::string& name, const std::string& help,
                                     std::vector<std::string> labels) {
  return family(name, help, MetricType::kGauge, std::move(labels), {});
}
Family* MetricsRegistry::histogramFamily(const std::string& name, const std::string& help,
                                         std::vector<std::string> labels,
                                         std::vector<double> bounds) {
  std::sort(bounds.begin(), bounds.end());
  return family(name, help, MetricType::kHistogram, std::move(labels), std::move(bounds));
}

std::string MetricsRegistry::scrape() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  out.reserve(16 * 1024);
  for (const auto& [name, fam] : by_name_) fam->render(out);
  return out;
}

std::string MetricsRegistry::scrape(const std::vector<std::string>& names) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& n : names) {
    const auto it = by_name_.find(n);
    if (it != by_name_.end()) it->second->render(out);
  }
  return out;
}

double MetricsRegistry::sum(const std::string& name) const {
  // Parse our own exposition: simple and exact for counters/gauges.
  const std::string text = scrape();
  double total = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t eol = text.find('\n', pos);
    const std::string line = text.substr(pos, eol - pos);
    pos = eol == std::string::npos ? text.size() : eol + 1;
    if (line.empty() || line[0] == '#') continue;
    if (line.compare(0, name.size(), name) != 0) continue;
    if (line.size() > name.size() && line[name.size()] != ' ' && line[name.size()] != '{') continue;
    const size_t sp = line.rfind(' ');
    total += std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return total;
}

std::vector<double> MetricsRegistry::latencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
}

int64_t residentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages_total = 0, pages_resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<int64_t>(pages_resident) * sysconf(_SC_PAGESIZE);
}

void registerProcessMetrics(MetricsRegistry& registry, const std::string& version,
                            const std::string& commit) {
  registry.gaugeFamily("infera_build_info", "Build information; always 1.", {"version", "commit"})
      ->gauge({version, commit})
      ->set(1);
  registry.gaugeFamily("process_resident_memory_bytes", "Resident memory size in bytes.")
      ->setCallback([] { return static_cast<double>(residentBytes()); });
  const double start = static_cast<double>(std::time(nullptr));
  registry.gaugeFamily("process_start_time_seconds", "Start time of the process since unix epoch.")
      ->setCallback([start] { return start; });
  registry.gaugeFamily("process_open_fds", "Number of open file descriptors.")->setCallback([] {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (readdir(d) != nullptr) ++n;
      closedir(d);
    }
    return static_cast<double>(n > 2 ? n - 2 : n);
  });
}

}  // namespace infera::obs
