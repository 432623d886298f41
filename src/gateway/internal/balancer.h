#pragma once
// Private to the gateway. Latency-aware endpoint choice: power of two choices over weighted random
// samples, scored by EWMA latency x (in-flight + 1), with region preference. The second sample
// takes over from the first only when clearly better, and by the weight ratio more when it is the
// lighter one, so endpoints share traffic by weight unless one is clearly slower or loaded.

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace infera::gateway {

struct Candidate {
  uint32_t index = 0;  // the endpoint's index in the route table
  double ewma_s = 0;   // EWMA latency (time to first byte) seen by this worker; 0 = no sample
  int inflight = 0;    // this worker's requests in flight to it
  int weight = 1;
  bool local = false;  // in the gateway's own region
};

// Scores within this ratio of each other count as equal; the first weighted sample then wins,
// so equal endpoints share traffic by weight.
inline constexpr double kScoreTieRatio = 1.5;
// ... and scores closer than this absolute gap (seconds) too: at loopback latencies a thread that
// was idle answers a few hundred microseconds slower, which must not starve the less-used endpoint.
inline constexpr double kScoreTieAbsolute = 0.002;
// The latency assumed for an endpoint with no sample yet when deciding whether to leave the local
// region (within the chosen pool an unsampled endpoint scores 0, so it gets explored).
inline constexpr double kUnsampledPrior = 0.025;

double candidateScore(const Candidate& c);

// How much better than `first` the `second` must score to take its place: the weight ratio when
// `first` is heavier, else 1.
double weightRatio(const Candidate& first, const Candidate& second);

// Picks one of `candidates` (all eligible: healthy, not ejected, under their limit). Region
// preference: if any local candidate exists and the best local score is within (1 + margin) of the
// best remote score, only local candidates are considered; otherwise all (spill-over). Returns the
// position in `candidates`, or -1 when empty. When two were compared and one lost clearly on
// score, its position is stored in *loser (else -1): callers decay a loser's estimate a little, so
// an endpoint judged on one slow outlier is tried again after a few dozen losses.
int pickCandidate(std::span<const Candidate> candidates, double region_margin, std::mt19937_64& rng,
                  int* loser = nullptr);

// How much a loser's latency estimate shrinks per lost comparison.
inline constexpr double kLoserDecay = 0.95;

// Weighted random position in `candidates` among the positions in `pool` other than `exclude`
// (-1 = none); -1 when nothing is left.
int weightedSample(std::span<const Candidate> candidates, std::span<const int> pool,
                   std::mt19937_64& rng, int exclude);

}  // namespace infera::gateway
