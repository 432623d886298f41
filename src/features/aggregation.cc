#include "features/internal/aggregation.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/hash.h"

namespace infera::features {
namespace {

constexpr int kHllP = 10;
constexpr size_t kHllM = size_t{1} << kHllP;
constexpr size_t kSparseMax = 512;  // 2 bytes each: past this the dense 1 KB form is smaller

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t bucketOf(int64_t ts_us, const Aggregation& a) {
  return floorDiv(ts_us, a.bucket_s * 1'000'000);
}
int64_t bucketsPerWindow(const Aggregation& a) { return a.window_s / a.bucket_s; }

void putDouble(std::string& out, double d) {
  char b[8];
  std::memcpy(b, &d, 8);
  out.append(b, 8);
}
bool getDouble(std::string_view& in, double& d) {
  if (in.size() < 8) return false;
  std::memcpy(&d, in.data(), 8);
  in.remove_prefix(8);
  return true;
}

void hllAdd(AggBucket& b, uint64_t hash) {
  const uint16_t reg = static_cast<uint16_t>(hash >> (64 - kHllP));
  const uint64_t rest = hash << kHllP;
  const uint8_t rank = static_cast<uint8_t>(rest == 0 ? 64 - kHllP + 1 : __builtin_clzll(rest) + 1);
  if (!b.hll_dense.empty()) {
    b.hll_dense[reg] = std::max(b.hll_dense[reg], rank);
    return;
  }
  auto it =
      std::lower_bound(b.hll_sparse.begin(), b.hll_sparse.end(), static_cast<uint16_t>(reg << 6));
  if (it != b.hll_sparse.end() && (*it >> 6) == reg) {
    if ((*it & 63) < rank) *it = static_cast<uint16_t>((reg << 6) | rank);
    return;
  }
  b.hll_sparse.insert(it, static_cast<uint16_t>((reg << 6) | rank));
  if (b.hll_sparse.size() > kSparseMax) {
    b.hll_dense.assign(kHllM, 0);
    for (uint16_t e : b.hll_sparse) b.hll_dense[e >> 6] = static_cast<uint8_t>(e & 63);
    b.hll_sparse.clear();
    b.hll_sparse.shrink_to_fit();
  }
}

void hllMerge(const AggBucket& b, std::vector<uint8_t>& regs) {
  if (!b.hll_dense.empty()) {
    for (size_t i = 0; i < kHllM; ++i) regs[i] = std::max(regs[i], b.hll_dense[i]);
  } else {
    for (uint16_t e : b.hll_sparse)
      regs[e >> 6] = std::max(regs[e >> 6], static_cast<uint8_t>(e & 63));
  }
}

double hllEstimate(const std::vector<uint8_t>& regs) {
  const double m = static_cast<double>(kHllM);
  double z = 0;
  size_t zeros = 0;
  for (uint8_t r : regs) {
    z += std::ldexp(1.0, -r);
    zeros += r == 0;
  }
  const double alpha = 0.7213 / (1 + 1.079 / m);
  double e = alpha * m * m / z;
  if (e <= 2.5 * m && zeros > 0) e = m * std::log(m / static_cast<double>(zeros));
  return e;
}

}  // namespace

uint64_t hashBytes(std::string_view bytes) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a, then a splitmix64 finish for the high bits
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ULL;
  }
  return mix64(h);
}

void encodeAggState(const FeatureView& view, const AggState& state, std::string& out) {
  for (size_t i = 0; i < view.aggregations.size(); ++i) {
    const Aggregation& a = view.aggregations[i];
    static const std::vector<AggBucket> kNone;
    const auto& buckets = i < state.per_agg.size() ? state.per_agg[i] : kNone;
    putVarint(out, buckets.size());
    int64_t prev = 0;
    for (const AggBucket& b : buckets) {
      putVarint(out, zigzag(b.index - prev));
      prev = b.index;
      switch (a.function) {
        case AggFunction::kCount:
          putVarint(out, static_cast<uint64_t>(b.count));
          break;
        case AggFunction::kSum:
          putDouble(out, b.sum);
          break;
        case AggFunction::kAvg:
          putVarint(out, static_cast<uint64_t>(b.count));
          putDouble(out, b.sum);
          break;
        case AggFunction::kMin:
          putDouble(out, b.min);
          break;
        case AggFunction::kMax:
          putDouble(out, b.max);
          break;
        case AggFunction::kLast:
          putVarint(out, zigzag(b.last_ts));
          putVarint(out, b.last.size());
          out += b.last;
          break;
        case AggFunction::kDistinctCount:
          if (!b.hll_dense.empty()) {
            putVarint(out, kSparseMax + 1);
            out.append(reinterpret_cast<const char*>(b.hll_dense.data()), kHllM);
          } else {
            putVarint(out, b.hll_sparse.size());
            for (uint16_t e : b.hll_sparse) {
              out += static_cast<char>(e >> 8);
              out += static_cast<char>(e & 0xff);
            }
          }
          break;
      }
    }
  }
}

AggState decodeAggState(const FeatureView& view, std::string_view in) {
  AggState s;
  s.per_agg.resize(view.aggregations.size());
  for (size_t i = 0; i < view.aggregations.size(); ++i) {
    const Aggregation& a = view.aggregations[i];
    uint64_t n = 0;
    if (!getVarint(in, n) || n > 100'000)
      return AggState{INT64_MIN, std::vector<std::vector<AggBucket>>(view.aggregations.size())};
    int64_t prev = 0;
    auto& out = s.per_agg[i];
    out.reserve(n);
    for (uint64_t k = 0; k < n; ++k) {
      AggBucket b;
      uint64_t v = 0;
      bool ok = getVarint(in, v);
      b.index = prev + unzigzag(v);
      prev = b.index;
      switch (a.function) {
        case AggFunction::kCount:
          ok = ok && getVarint(in, v);
          b.count = static_cast<int64_t>(v);
          break;
        case AggFunction::kSum:
          ok = ok && getDouble(in, b.sum);
          break;
        case AggFunction::kAvg:
          ok = ok && getVarint(in, v) && getDouble(in, b.sum);
          b.count = static_cast<int64_t>(v);
          break;
        case AggFunction::kMin:
          ok = ok && getDouble(in, b.min);
          break;
        case AggFunction::kMax:
          ok = ok && getDouble(in, b.max);
          break;
        case AggFunction::kLast: {
          uint64_t len = 0;
          ok = ok && getVarint(in, v) && getVarint(in, len) && len <= in.size();
          if (ok) {
            b.last_ts = unzigzag(v);
            b.last.assign(in.substr(0, len));
            in.remove_prefix(len);
          }
          break;
        }
        case AggFunction::kDistinctCount: {
          ok = ok && getVarint(in, v);
          if (ok && v == kSparseMax + 1) {
            ok = in.size() >= kHllM;
            if (ok) {
              b.hll_dense.assign(in.begin(), in.begin() + kHllM);
              in.remove_prefix(kHllM);
            }
          } else if (ok) {
            ok = v <= kSparseMax && in.size() >= 2 * v;
            for (uint64_t e = 0; ok && e < v; ++e) {
              b.hll_sparse.push_back(static_cast<uint16_t>((static_cast<uint8_t>(in[0]) << 8) |
                                                           static_cast<uint8_t>(in[1])));
              in.remove_prefix(2);
            }
          }
          break;
        }
      }
      if (!ok)
        return AggState{INT64_MIN, std::vector<std::vector<AggBucket>>(view.aggregations.size())};
      out.push_back(std::move(b));
    }
  }
  return s;
}

bool addEvent(const FeatureView& view, AggState& state, int64_t ts_us,
              const std::vector<AggInput>& inputs, int64_t now_us) {
  state.per_agg.resize(view.aggregations.size());
  bool changed = false;
  for (size_t i = 0; i < view.aggregations.size(); ++i) {
    const Aggregation& a = view.aggregations[i];
    auto& buckets = state.per_agg[i];
    const int64_t oldest =
        bucketOf(now_us, a) - bucketsPerWindow(a) + 1;  // first bucket still in the window
    auto keep = std::lower_bound(buckets.begin(), buckets.end(), oldest,
                                 [](const AggBucket& b, int64_t idx) { return b.index < idx; });
    buckets.erase(buckets.begin(), keep);
    const int64_t idx = bucketOf(ts_us, a);
    if (idx < oldest) continue;
    const AggInput& in = inputs[i];
    if (a.function != AggFunction::kCount && !in.present) continue;
    auto it = std::lower_bound(buckets.begin(), buckets.end(), idx,
                               [](const AggBucket& b, int64_t x) { return b.index < x; });
    if (it == buckets.end() || it->index != idx) {
      it = buckets.insert(it, AggBucket{});
      it->index = idx;
      it->min = in.number;
      it->max = in.number;
    }
    AggBucket& b = *it;
    ++b.count;
    switch (a.function) {
      case AggFunction::kCount:
        break;
      case AggFunction::kSum:
      case AggFunction::kAvg:
        b.sum += in.number;
        break;
      case AggFunction::kMin:
        b.min = std::min(b.min, in.number);
        break;
      case AggFunction::kMax:
        b.max = std::max(b.max, in.number);
        break;
      case AggFunction::kLast:
        if (ts_us >= b.last_ts) {
          b.last_ts = ts_us;
          b.last = in.encoded;
        }
        break;
      case AggFunction::kDistinctCount:
        hllAdd(b, in.hash);
        break;
    }
    changed = true;
  }
  if (changed) state.latest_ts = std::max(state.latest_ts, ts_us);
  return changed;
}

void appendAggJson(const FeatureView& view, const AggState& state, size_t agg, int64_t now_us,
                   std::string& json, bool& null) {
  const Aggregation& a = view.aggregations[agg];
  const int64_t last = bucketOf(now_us, a);
  const int64_t first = last - bucketsPerWindow(a) + 1;
  int64_t count = 0;  // avg and count only: the others do not store it
  bool any = false;
  double sum = 0, mn = INFINITY, mx = -INFINITY;
  int64_t last_ts = INT64_MIN;
  const std::string* last_val = nullptr;
  std::vector<uint8_t> regs;
  if (a.function == AggFunction::kDistinctCount) regs.assign(kHllM, 0);
  if (agg < state.per_agg.size()) {
    for (const AggBucket& b : state.per_agg[agg]) {
      if (b.index < first || b.index > last) continue;
      any = true;
      count += b.count;
      sum += b.sum;
      mn = std::min(mn, b.min);
      mx = std::max(mx, b.max);
      if (b.last_ts >= last_ts && !b.last.empty()) {
        last_ts = b.last_ts;
        last_val = &b.last;
      }
      if (a.function == AggFunction::kDistinctCount) hllMerge(b, regs);
    }
  }
  null = false;
  switch (a.function) {
    case AggFunction::kCount:
      json += std::to_string(count);
      return;
    case AggFunction::kSum:
      appendDouble(json, sum);
      return;
    case AggFunction::kAvg:
      if (count == 0) break;
      appendDouble(json, sum / static_cast<double>(count));
      return;
    case AggFunction::kMin:
      if (!any) break;
      appendDouble(json, mn);
      return;
    case AggFunction::kMax:
      if (!any) break;
      appendDouble(json, mx);
      return;
    case AggFunction::kLast: {
      if (!last_val) break;
      std::string_view v = *last_val;
      if (appendValueJson(v, a.column_type, json, null)) return;
      break;
    }
    case AggFunction::kDistinctCount:
      json += std::to_string(static_cast<int64_t>(std::llround(any ? hllEstimate(regs) : 0.0)));
      return;
  }
  null = true;
  json += "null";
}

}  // namespace infera::features
