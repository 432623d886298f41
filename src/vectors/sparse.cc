#include "vectors/internal/sparse.h"

#include <algorithm>
#include <cmath>

namespace infera::vectors {

namespace {
// Best first, ties by slot; a NaN (which the API's bounds keep out) sorts last rather than
// breaking the ordering the sorts rely on.
bool better(const Scored& a, const Scored& b) {
  const float x = std::isnan(a.score) ? -HUGE_VALF : a.score;
  const float y = std::isnan(b.score) ? -HUGE_VALF : b.score;
  return x != y ? x > y : a.slot < b.slot;
}
// Summed scores by slot, best first.
std::vector<Scored> ranked(const std::unordered_map<uint32_t, float>& acc) {
  std::vector<Scored> out;
  out.reserve(acc.size());
  for (const auto& [slot, s] : acc) out.push_back({slot, s});
  std::sort(out.begin(), out.end(), better);
  return out;
}

}  // namespace

void SparseIndex::set(uint32_t slot, SparseVector v) {
  if (slot >= vectors_.size()) {
    vectors_.resize(size_t(slot) + 1);
    gens_.resize(size_t(slot) + 1, 0);
  }
  const SparseVector old = std::move(vectors_[slot]);
  ++gens_[slot];  // every posting of the old vector is dead from here
  if (!old.empty()) {
    --points_;
    for (uint32_t d : old.indices) {
      const auto it = postings_.find(d);
      if (it == postings_.end()) continue;
      List& l = it->second;
      ++l.dead;
      if (l.dead == l.items.size()) {
        postings_.erase(it);
      } else if (l.dead * 2 > l.items.size()) {
        // Compacted once most entries are dead: amortised O(1) per removal.
        std::erase_if(l.items, [&](const Posting& p) { return p.gen != gens_[p.slot]; });
        l.dead = 0;
      }
    }
  }
  vectors_[slot] = std::move(v);
  const SparseVector& now = vectors_[slot];
  if (now.empty()) return;
  ++points_;
  for (size_t i = 0; i < now.indices.size(); ++i)
    postings_[now.indices[i]].items.push_back({slot, gens_[slot], now.values[i]});
}

const SparseVector* SparseIndex::get(uint32_t slot) const {
  return slot < vectors_.size() && !vectors_[slot].empty() ? &vectors_[slot] : nullptr;
}

SparseVector SparseIndex::weigh(const SparseVector& q) const {
  SparseVector out = q;
  if (modifier_ != SparseModifier::kIdf) return out;
  const float n = float(points_);
  for (size_t i = 0; i < out.indices.size(); ++i) {
    const auto it = postings_.find(out.indices[i]);
    const float df = it == postings_.end() ? 0.0f : float(it->second.live());
    out.values[i] *= std::log((n - df + 0.5f) / (df + 0.5f) + 1.0f);
  }
  return out;
}

float SparseIndex::score(const SparseVector& q, uint32_t slot) const {
  const SparseVector* d = get(slot);
  if (!d) return 0.0f;
  float s = 0.0f;
  size_t j = 0;
  for (size_t i = 0; i < q.indices.size(); ++i) {
    while (j < d->indices.size() && d->indices[j] < q.indices[i]) ++j;
    if (j == d->indices.size()) break;
    if (d->indices[j] == q.indices[i]) s += q.values[i] * d->values[j];
  }
  return s;
}

void SparseIndex::search(const SparseVector& q, size_t k,
                         const std::function<bool(uint32_t)>* allowed,
                         std::vector<Scored>& out) const {
  out.clear();
  std::unordered_map<uint32_t, float> acc;
  for (size_t i = 0; i < q.indices.size(); ++i) {
    const auto it = postings_.find(q.indices[i]);
    if (it == postings_.end()) continue;
    for (const Posting& p : it->second.items) {
      if (p.gen != gens_[p.slot]) continue;
      acc[p.slot] += q.values[i] * p.value;
    }
  }
  out.reserve(acc.size());
  for (const auto& [slot, s] : acc) {
    if (allowed && !(*allowed)(slot)) continue;
    out.push_back({slot, s});
  }
  if (out.size() > k) {
    std::partial_sort(out.begin(), out.begin() + long(k), out.end(), better);
    out.resize(k);
  } else {
    std::sort(out.begin(), out.end(), better);
  }
}

size_t SparseIndex::memoryBytes() const {
  size_t b = vectors_.capacity() * sizeof(SparseVector) + gens_.capacity() * sizeof(uint32_t);
  for (const auto& v : vectors_) b += v.indices.capacity() * 4 + v.values.capacity() * 4;
  for (const auto& [d, l] : postings_) b += 48 + l.items.capacity() * sizeof(Posting);
  return b;
}

std::vector<Scored> fuseRrf(const std::vector<std::vector<Scored>>& lists, int k,
                            const std::vector<float>& weights) {
  std::unordered_map<uint32_t, float> acc;
  for (size_t l = 0; l < lists.size(); ++l) {
    const float w = weights.empty() ? 1.0f : weights[l];
    for (size_t pos = 0; pos < lists[l].size(); ++pos) {
      const float s = w <= 0.0f ? 0.0f : 1.0f / (float(pos + 1) / w + float(k) - 1.0f);
      acc[lists[l][pos].slot] += s;
    }
  }
  return ranked(acc);
}

std::vector<Scored> fuseDbsf(std::vector<std::vector<Scored>> lists) {
  std::unordered_map<uint32_t, float> acc;
  for (auto& list : lists) {
    if (list.size() == 1) list[0].score = 0.5f;
    if (list.size() > 1) {
      // Welford's one-pass mean and variance (in double: float, as Qdrant uses, overflows for
      // scores past ~1e19, which dot products of large vectors reach).
      double mean = 0.0, agg = 0.0;
      size_t k = 0;
      for (const Scored& s : list) {
        ++k;
        const double d0 = double(s.score) - mean;
        mean += d0 / double(k);
        agg += d0 * (double(s.score) - mean);
      }
      const double sd = std::sqrt(agg / double(list.size() - 1));
      const double lo = mean - 3.0 * sd, hi = mean + 3.0 * sd;
      for (Scored& s : list) s.score = lo == hi ? 0.5f : float((double(s.score) - lo) / (hi - lo));
    }
    for (const Scored& s : list) acc[s.slot] += s.score;
  }
  return ranked(acc);
}

}  // namespace infera::vectors
