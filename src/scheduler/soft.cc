// The soft constraints' normalisation: kube-scheduler's NormalizeScore of each Score plugin over
// the nodes that fit, then the plugins' default weights.
#include <algorithm>
#include <cmath>
#include <limits>

#include "scheduler/cluster.h"

namespace infera::sched {
namespace {

constexpr int64_t kMaxNodeScore = 100;

// helper.DefaultNormalizeScore: score * 100 / max (reversed: 100 minus that); all 0 (reversed:
// all 100) when the max is 0.
void defaultNormalize(const std::vector<int64_t>& raw, const std::vector<int>& nodes, bool reverse,
                      int64_t weight, std::vector<int64_t>& out) {
  int64_t max = 0;
  for (const int n : nodes) max = std::max(max, raw[static_cast<size_t>(n)]);
  for (size_t i = 0; i < nodes.size(); ++i) {
    int64_t s = 0;
    if (max == 0) {
      s = reverse ? kMaxNodeScore : 0;
    } else {
      s = kMaxNodeScore * raw[static_cast<size_t>(nodes[i])] / max;
      if (reverse) s = kMaxNodeScore - s;
    }
    out[i] += weight * s;
  }
}

// InterPodAffinity's: (score - min) / (max - min) * 100, truncated; all 0 when they are equal.
void minMaxNormalize(const std::vector<int64_t>& raw, const std::vector<int>& nodes, int64_t weight,
                     std::vector<int64_t>& out) {
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = std::numeric_limits<int64_t>::min();
  for (const int n : nodes) {
    lo = std::min(lo, raw[static_cast<size_t>(n)]);
    hi = std::max(hi, raw[static_cast<size_t>(n)]);
  }
  if (nodes.empty() || hi - lo <= 0) return;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const double f = static_cast<double>(kMaxNodeScore) *
                     (static_cast<double>(raw[static_cast<size_t>(nodes[i])] - lo) /
                      static_cast<double>(hi - lo));
    out[i] += weight * static_cast<int64_t>(f);
  }
}

// PodTopologySpread's: per node sum of count * log(domains + 2) + (maxSkew - 1) over the
// constraints, rounded; then 100 * (max + min - score) / max over the scored nodes (all 100 when
// the max is 0); nodes without the keys score 0. `domains` counts the domains among `nodes`
// (for kubernetes.io/hostname: the scored nodes).
void spreadNormalize(const SoftRaw& raw, const std::vector<int>& nodes, int64_t weight,
                     std::vector<int64_t>& out) {
  std::vector<double> log_weight;
  for (const SoftRaw::Spread& c : raw.spread) {
    size_t size = 0;
    if (c.hostname) {
      for (const int n : nodes) size += raw.spread_scored[static_cast<size_t>(n)];
    } else {
      std::vector<uint8_t> seen(static_cast<size_t>(c.domains), 0);
      for (const int n : nodes) {
        const int d = c.domain[static_cast<size_t>(n)];
        if (d >= 0 && !seen[static_cast<size_t>(d)]) {
          seen[static_cast<size_t>(d)] = 1;
          ++size;
        }
      }
    }
    log_weight.push_back(std::log(static_cast<double>(size) + 2));
  }
  std::vector<int64_t> score(nodes.size(), 0);
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto n = static_cast<size_t>(nodes[i]);
    if (!raw.spread_scored[n]) continue;
    double s = 0;
    for (size_t c = 0; c < raw.spread.size(); ++c) {
      s += static_cast<double>(raw.spread[c].count[n]) * log_weight[c] +
           static_cast<double>(raw.spread[c].max_skew - 1);
    }
    score[i] = static_cast<int64_t>(std::llround(s));
    lo = std::min(lo, score[i]);
    hi = std::max(hi, score[i]);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!raw.spread_scored[static_cast<size_t>(nodes[i])]) continue;
    out[i] += weight * (hi == 0 ? kMaxNodeScore : kMaxNodeScore * (hi + lo - score[i]) / hi);
  }
}

}  // namespace

void softTotals(const SoftRaw& raw, const std::vector<int>& nodes, std::vector<int64_t>& out) {
  out.assign(nodes.size(), 0);
  if (raw.node_affinity.on) defaultNormalize(raw.node_affinity.value, nodes, false, 2, out);
  if (raw.taints.on) defaultNormalize(raw.taints.value, nodes, true, 3, out);
  if (raw.pod_affinity.on) minMaxNormalize(raw.pod_affinity.value, nodes, 2, out);
  if (!raw.spread.empty()) spreadNormalize(raw, nodes, 2, out);
}

}  // namespace infera::sched
