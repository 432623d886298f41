#include "gateway/balancer.h"

#include <algorithm>
#include <limits>

namespace infera::gateway {

double candidateScore(const Candidate& c) {
  // An endpoint without samples yet scores as a fast one (1 ms) so it gets explored.
  const double latency = c.ewma_s > 0 ? c.ewma_s : 0.001;
  return latency * static_cast<double>(c.inflight + 1) / static_cast<double>(std::max(c.weight, 1));
}

int weightedSample(std::span<const Candidate> candidates, std::span<const int> pool, std::mt19937_64& rng) {
  int64_t total = 0;
  for (int p : pool) total += std::max(candidates[static_cast<size_t>(p)].weight, 1);
  if (total == 0) return -1;
  int64_t r = std::uniform_int_distribution<int64_t>(0, total - 1)(rng);
  for (int p : pool) {
    r -= std::max(candidates[static_cast<size_t>(p)].weight, 1);
    if (r < 0) return p;
  }
  return pool.back();
}

int pickCandidate(std::span<const Candidate> candidates, double region_margin, std::mt19937_64& rng) {
  if (candidates.empty()) return -1;
  // Small fixed-capacity pools: no heap allocation for the usual handful of endpoints.
  int local_buf[64];
  int all_buf[64];
  std::vector<int> local_vec, all_vec;
  int n_local = 0, n_all = 0;
  const bool small = candidates.size() <= 64;
  if (!small) {
    local_vec.reserve(candidates.size());
    all_vec.reserve(candidates.size());
  }
  double best_local = std::numeric_limits<double>::infinity();
  double best_remote = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double s = candidateScore(candidates[i]);
    if (candidates[i].local) {
      best_local = std::min(best_local, s);
      if (small) local_buf[n_local++] = static_cast<int>(i); else local_vec.push_back(static_cast<int>(i));
    } else {
      best_remote = std::min(best_remote, s);
    }
    if (small) all_buf[n_all++] = static_cast<int>(i); else all_vec.push_back(static_cast<int>(i));
  }
  std::span<const int> local = small ? std::span<const int>(local_buf, static_cast<size_t>(n_local))
                                     : std::span<const int>(local_vec);
  std::span<const int> all = small ? std::span<const int>(all_buf, static_cast<size_t>(n_all))
                                   : std::span<const int>(all_vec);
  std::span<const int> pool = all;
  if (!local.empty() && best_local <= best_remote * (1.0 + region_margin)) pool = local;
  if (pool.size() == 1) return pool[0];
  const int a = weightedSample(candidates, pool, rng);
  int b = weightedSample(candidates, pool, rng);
  for (int tries = 0; b == a && tries < 4; ++tries) b = weightedSample(candidates, pool, rng);
  const double sa = candidateScore(candidates[static_cast<size_t>(a)]);
  const double sb = candidateScore(candidates[static_cast<size_t>(b)]);
  if (sb * kScoreTieRatio < sa) return b;
  return a;
}

}  // namespace infera::gateway
