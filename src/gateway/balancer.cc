#include "gateway/internal/balancer.h"

#include <algorithm>
#include <limits>

namespace infera::gateway {

double candidateScore(const Candidate& c) {
  // An endpoint without samples yet scores 0, so it is tried as soon as it is drawn. Weight is
  // not in the score: it shapes the sampling, so similar endpoints split traffic by weight.
  return c.ewma_s * static_cast<double>(c.inflight + 1);
}

double weightRatio(const Candidate& first, const Candidate& second) {
  const int wf = std::max(first.weight, 1);
  const int ws = std::max(second.weight, 1);
  return wf > ws ? static_cast<double>(wf) / ws : 1.0;
}

int weightedSample(std::span<const Candidate> candidates, std::span<const int> pool,
                   std::mt19937_64& rng, int exclude) {
  int64_t total = 0;
  for (int p : pool) {
    if (p != exclude) total += std::max(candidates[static_cast<size_t>(p)].weight, 1);
  }
  if (total == 0) return -1;
  int64_t r = std::uniform_int_distribution<int64_t>(0, total - 1)(rng);
  for (int p : pool) {
    if (p == exclude) continue;
    r -= std::max(candidates[static_cast<size_t>(p)].weight, 1);
    if (r < 0) return p;
  }
  return -1;
}

int pickCandidate(std::span<const Candidate> candidates, double region_margin, std::mt19937_64& rng,
                  int* loser) {
  if (loser) *loser = -1;
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
    const Candidate& c = candidates[i];
    const double s =
        (c.ewma_s > 0 ? c.ewma_s : kUnsampledPrior) * static_cast<double>(c.inflight + 1);
    if (candidates[i].local) {
      best_local = std::min(best_local, s);
      if (small)
        local_buf[n_local++] = static_cast<int>(i);
      else
        local_vec.push_back(static_cast<int>(i));
    } else {
      best_remote = std::min(best_remote, s);
    }
    if (small)
      all_buf[n_all++] = static_cast<int>(i);
    else
      all_vec.push_back(static_cast<int>(i));
  }
  std::span<const int> local = small ? std::span<const int>(local_buf, static_cast<size_t>(n_local))
                                     : std::span<const int>(local_vec);
  std::span<const int> all = small ? std::span<const int>(all_buf, static_cast<size_t>(n_all))
                                   : std::span<const int>(all_vec);
  std::span<const int> pool = all;
  if (!local.empty() && best_local <= best_remote * (1.0 + region_margin) + kScoreTieAbsolute)
    pool = local;
  if (pool.size() == 1) return pool[0];
  const int a = weightedSample(candidates, pool, rng, -1);
  const int b = weightedSample(candidates, pool, rng, a);
  const Candidate& ca = candidates[static_cast<size_t>(a)];
  const Candidate& cb = candidates[static_cast<size_t>(b)];
  const double sa = candidateScore(ca);
  const double sb = candidateScore(cb);
  // The second draw overrides the first (weighted) one only when clearly better, and a lighter
  // endpoint must be better by its weight ratio more: with two endpoints the second draw is
  // always the other one, so without the factor a weight-1 endpoint beside a weight-60 one won
  // whenever its estimate had decayed (halved every idle second) below the other's by 2 ms: a
  // share set by the decay, not by its weight.
  if ((sb * kScoreTieRatio + kScoreTieAbsolute) * weightRatio(ca, cb) < sa) {
    if (loser) *loser = a;
    return b;
  }
  if (loser && (sa * kScoreTieRatio + kScoreTieAbsolute) * weightRatio(cb, ca) < sb) *loser = b;
  return a;
}

}  // namespace infera::gateway
