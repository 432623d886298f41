#pragma once
// Infera's HNSW graph (Malkov & Yashunin, 2016) over contiguous storage: the vectors of every slot
// in one aligned array, level-0 links in one array of fixed-size blocks (count + 2M slots), upper
// levels per slot. Distances use the SIMD kernels of distance.h; optional int8 scalar or 1-bit
// binary quantization (codes traversed, the best candidates rescored on the original floats); the
// original floats optionally in a memory-mapped file (`on_disk`), so the kernel may page them out
// and only the graph and the codes need to stay in RAM.
//
// Slots: the caller (a collection) owns the id -> slot map. A slot is written by insert() once new
// (slot == slots()) or again after markDeleted() (reuse). Deleted slots stay in the graph as
// waypoints (searches pass through them, never return them); reusing one repairs the lists that
// pointed at it before the new vector is linked, and keeps the slot's level (levels are drawn
// independently of the vectors, so the level distribution is unchanged).
//
// Threads: const methods may run concurrently with each other. A single writer may also run
// plan() concurrently with readers (it only reads); commit(), markDeleted(), reserve() and load()
// mutate and need the caller's exclusive lock against readers. commit() only copies lists that
// plan() computed, so the exclusive section is short.

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "vectors/internal/distance.h"

namespace infera::vectors {

enum class Metric : uint8_t { kL2 = 0, kDot = 1 };  // cosine = kDot over normalized vectors

struct HnswParams {
  int m = 16;
  int ef_construct = 100;
  uint64_t seed = 0x5eed'1e55'ab1e'0001ULL;
  bool quantize_int8 = false;
  float quantile = 0.99f;  // of |x| values that set the int8 range
  // 1 bit per dimension: set when the component is above that dimension's mean (from a sample of
  // the vectors stored when trained), traversed by Hamming distance.
  bool quantize_binary = false;
  // The original floats in an unlinked file under `disk_dir` mapped shared (MADV_RANDOM): clean
  // pages can be dropped by the kernel. The graph, codes and ids stay in RAM.
  bool on_disk = false;
  std::string disk_dir;
};

struct Neighbor {
  float dist;  // smaller is closer (squared L2, or minus the dot product)
  uint32_t slot;
};

// Per-thread search state (visited marks, heaps), reused across searches. Not thread-safe.
class SearchScratch {
 public:
  void begin(size_t slots);
  bool visit(uint32_t slot) {  // true the first time in this search
    if (tags_[slot] == epoch_) return false;
    tags_[slot] = epoch_;
    return true;
  }
  const uint32_t* tagAddr(uint32_t slot) const { return &tags_[slot]; }
  std::vector<Neighbor> cand, res;
  std::vector<int8_t> qcode;
  std::vector<uint64_t> qbits;
  std::vector<uint32_t> fresh;  // one expansion's unvisited neighbours
  uint64_t distances = 0;       // distance computations (stats)

 private:
  std::vector<uint32_t> tags_;
  uint32_t epoch_ = 0;
};

// Which slots a search may return, besides not deleted: those set in `bits` (null: all), then those
// `check` accepts (null: all). `check` runs at most once per visited slot.
struct SlotFilter {
  const uint64_t* bits = nullptr;
  const std::function<bool(uint32_t)>* check = nullptr;
};

class Hnsw {
 public:
  Hnsw(size_t dim, Metric metric, HnswParams params);
  ~Hnsw();
  Hnsw(const Hnsw&) = delete;
  Hnsw& operator=(const Hnsw&) = delete;

  size_t dim() const { return dim_; }
  Metric metric() const { return metric_; }
  const HnswParams& params() const { return params_; }
  size_t capacity() const { return capacity_; }
  uint32_t slots() const { return slots_; }  // slots ever written (the next new slot)
  size_t live() const { return live_; }
  bool isDeleted(uint32_t slot) const { return deleted_[slot] != 0; }
  const float* vector(uint32_t slot) const { return data_ + size_t(slot) * dim_; }
  // Smaller is closer, as the kernels.
  float distance(const float* q, uint32_t slot) const { return dist_(q, vector(slot), dim_); }
  bool quantized() const {
    return (params_.quantize_int8 && quant_ready_) || (params_.quantize_binary && bits_ready_);
  }
  // Bytes of the original floats held in a file mapping rather than anonymous memory.
  size_t mappedBytes() const { return fd_ >= 0 ? mapped_bytes_ : 0; }

  // Room for `n` slots (mutates: exclusive lock).
  void reserve(size_t n);

  struct InsertPlan {
    uint32_t slot = 0;
    const float* vec = nullptr;  // the caller keeps it alive until commit
    int level = 0;
    std::vector<std::vector<uint32_t>> links;  // per level 0..level
    std::unordered_map<uint64_t, std::vector<uint32_t>>
        updates;  // (level << 32 | node) -> new list
  };
  // What inserting `vec` at `slot` changes (reads only; see Threads).
  void plan(uint32_t slot, const float* vec, SearchScratch& scratch, InsertPlan& out) const;
  // Writes the vector and the planned lists (exclusive lock).
  void commit(const InsertPlan& plan);
  void insert(uint32_t slot, const float* vec, SearchScratch& scratch) {
    InsertPlan p;
    plan(slot, vec, scratch, p);
    commit(p);
  }
  // Tombstones a live slot (exclusive lock).
  void markDeleted(uint32_t slot);

  // The k closest allowed slots, closest first. ef >= k is the search breadth at level 0.
  // `use_codes` false traverses the floats even when quantized (Qdrant's `quantization.ignore`).
  void search(const float* q, size_t k, size_t ef, const SlotFilter& filter, SearchScratch& scratch,
              std::vector<Neighbor>& out, bool use_codes = true) const;
  // Exact: every live allowed slot (or only `candidates` when given), k closest first.
  void bruteForce(const float* q, size_t k, const SlotFilter& filter,
                  const std::vector<uint32_t>* candidates, std::vector<Neighbor>& out) const;

  // The int8 range or the binary thresholds from the vectors stored so far, and codes for all of
  // them (exclusive lock).
  void trainQuantizer();

  // Bytes of memory held (vectors, codes, links).
  size_t memoryBytes() const;
  // Average level-0 degree of live slots (a graph health figure).
  double meanDegree() const;

  Status save(std::FILE* f) const;
  Status load(std::FILE* f);

 private:
  size_t maxLinks(int level) const { return level == 0 ? m0_ : m_; }
  uint32_t* links(uint32_t slot, int level) {
    return level == 0 ? &links0_[size_t(slot) * (m0_ + 1)]
                      : &upper_[slot][size_t(level - 1) * (m_ + 1)];
  }
  const uint32_t* links(uint32_t slot, int level) const {
    return level == 0 ? &links0_[size_t(slot) * (m0_ + 1)]
                      : &upper_[slot][size_t(level - 1) * (m_ + 1)];
  }
  int randomLevel();
  template <typename DistFn>
  void searchLevel0(DistFn&& dist, const char* rows, size_t row_bytes, uint32_t ep, size_t ef,
                    const SlotFilter& filter, SearchScratch& s) const;
  uint32_t greedy(const float* q, uint32_t ep, float& ep_dist, int from_level, int to_level) const;
  bool allowed(uint32_t slot, const SlotFilter& f) const;
  void encode(const float* v, int8_t* out) const;
  void encodeBits(const float* v, uint64_t* out) const;
  void growData(size_t cap);

  size_t dim_;
  Metric metric_;
  HnswParams params_;
  FloatKernel dist_;
  CodeKernel code_dist_;
  size_t m_, m0_;
  double level_mult_;
  std::mt19937_64 rng_;

  size_t capacity_ = 0;
  uint32_t slots_ = 0;
  size_t live_ = 0;
  float* data_ = nullptr;  // capacity_ * dim_, 64-byte aligned
  std::vector<int8_t> codes_;
  float q_scale_ = 1, q_inv_scale_ = 1;  // code = round(x * q_scale_)
  bool quant_ready_ = false;
  size_t words_ = 0;            // 64-bit words per binary code
  std::vector<uint64_t> bits_;  // binary codes, capacity_ * words_
  std::vector<float> bit_mid_;  // per dimension: a component above it is a 1
  bool bits_ready_ = false;
  int fd_ = -1;  // on_disk: the unlinked file data_ maps
  size_t mapped_bytes_ = 0;
  std::vector<uint32_t> links0_;
  std::vector<std::vector<uint32_t>> upper_;
  std::vector<int8_t> levels_;
  std::vector<uint8_t> deleted_;
  static constexpr uint32_t kNone = 0xffffffffu;
  uint32_t entry_ = kNone;
  int max_level_ = -1;
};

}  // namespace infera::vectors
