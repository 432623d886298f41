#pragma once
// Sparse vectors (Qdrant's `sparse_vectors`): one (dimension, weight) list per point and named
// sparse vector, an inverted index over them, exact dot-product search, Qdrant's IDF modifier; and
// the fusions of ranked lists the Query API merges prefetches with (RRF, DBSF).
//
// Scores are exact: every point sharing a dimension with the query is scored (Qdrant's sparse
// search returns only those), accumulated in the query's dimension order in float, so a search and
// a rescoring of the same point give the same bits.
// Threads: const methods may run concurrently; set()/clear() need the collection's exclusive lock.

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace infera::vectors {

// Dimensions strictly increasing; as many values as indices.
struct SparseVector {
  std::vector<uint32_t> indices;
  std::vector<float> values;
  bool empty() const { return indices.empty(); }
};

enum class SparseModifier : uint8_t { kNone = 0, kIdf = 1 };

// A ranked item: a slot and its score (larger is better unless a list says otherwise).
struct Scored {
  uint32_t slot;
  float score;
};

class SparseIndex {
 public:
  explicit SparseIndex(SparseModifier modifier) : modifier_(modifier) {}
  SparseModifier modifier() const { return modifier_; }

  // The vector of `slot` (an empty one removes it). Exclusive lock.
  void set(uint32_t slot, SparseVector v);
  void clear(uint32_t slot) { set(slot, {}); }
  // Null when the slot has none.
  const SparseVector* get(uint32_t slot) const;
  size_t points() const { return points_; }

  // The query's weights as scored: times Qdrant's IDF, ln((N - df + 0.5) / (df + 0.5) + 1) with N
  // the points that have this vector and df those with the dimension, when the modifier is idf.
  SparseVector weigh(const SparseVector& q) const;
  // Dot product of a weighed query with the slot's vector (0 when it has none).
  float score(const SparseVector& weighed, uint32_t slot) const;
  // The `k` best slots sharing a dimension with the weighed query that `allowed` accepts (null:
  // all), best first, ties by slot.
  void search(const SparseVector& weighed, size_t k, const std::function<bool(uint32_t)>* allowed,
              std::vector<Scored>& out) const;

  size_t memoryBytes() const;

 private:
  struct Posting {
    uint32_t slot;
    uint32_t gen;  // the slot's generation when written: an older one is a dead entry
    float value;
  };
  struct List {
    std::vector<Posting> items;
    uint32_t dead = 0;
    size_t live() const { return items.size() - dead; }
  };

  SparseModifier modifier_;
  std::unordered_map<uint32_t, List> postings_;
  std::vector<SparseVector> vectors_;  // by slot
  std::vector<uint32_t> gens_;         // by slot
  size_t points_ = 0;
};

// Reciprocal rank fusion as Qdrant computes it: each list adds 1 / ((rank + 1) / weight + k - 1)
// to the items it ranks (rank from 0; weight 1 when `weights` is empty; a weight <= 0 adds 0).
std::vector<Scored> fuseRrf(const std::vector<std::vector<Scored>>& lists, int k,
                            const std::vector<float>& weights);
// Distribution-based score fusion: each list's scores mapped by (s - (mean - 3 sd)) / (6 sd)
// (sample standard deviation; one item scores 0.5, equal scores 0.5), then summed.
std::vector<Scored> fuseDbsf(std::vector<std::vector<Scored>> lists);

}  // namespace infera::vectors
