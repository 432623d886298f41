#include "vectors/internal/hnsw.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace infera::vectors {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Max-heap on dist (the worst result on top) and min-heap (the closest candidate on top).
struct FartherFirst {
  bool operator()(const Neighbor& a, const Neighbor& b) const { return a.dist < b.dist; }
};
struct CloserFirst {
  bool operator()(const Neighbor& a, const Neighbor& b) const { return a.dist > b.dist; }
};

}  // namespace

void SearchScratch::begin(size_t slots) {
  if (tags_.size() < slots) tags_.resize(std::max(slots, tags_.size() * 2), 0);
  if (++epoch_ == 0) {
    std::fill(tags_.begin(), tags_.end(), 0);
    epoch_ = 1;
  }
  cand.clear();
  res.clear();
}

Hnsw::Hnsw(size_t dim, Metric metric, HnswParams params)
    : dim_(dim),
      metric_(metric),
      params_(params),
      dist_(metric == Metric::kL2 ? kernels().l2sq : kernels().neg_dot),
      code_dist_(metric == Metric::kL2 ? kernels().code_l2sq : kernels().code_dot),
      m_(size_t(std::max(2, params.m))),
      m0_(2 * m_),
      level_mult_(1.0 / std::log(double(m_))),
      rng_(params.seed),
      words_((dim + 63) / 64) {}

Hnsw::~Hnsw() {
  if (fd_ >= 0) {
    ::munmap(data_, mapped_bytes_);
    ::close(fd_);
  } else {
    std::free(data_);
  }
}

void Hnsw::growData(size_t cap) {
  const size_t bytes = (cap * dim_ * sizeof(float) + 4095) / 4096 * 4096;
  if (params_.on_disk && fd_ < 0 && !data_) {
    // An unlinked file: nothing to clean up after a crash, and its pages are file-backed, so the
    // kernel can drop clean ones instead of keeping them resident. Durability is the WAL's and
    // the snapshot's, not this file's.
    std::string path = (params_.disk_dir.empty() ? std::string("/tmp") : params_.disk_dir) +
                       "/.infera-vectors-XXXXXX";
    const int fd = ::mkstemp(path.data());
    if (fd >= 0) {
      ::unlink(path.c_str());
      fd_ = fd;
    }
  }
  if (fd_ >= 0) {
    if (::ftruncate(fd_, off_t(bytes)) == 0) {
      void* m = data_ ? ::mremap(data_, mapped_bytes_, bytes, MREMAP_MAYMOVE)
                      : ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
      if (m != MAP_FAILED) {
        ::madvise(m, bytes, MADV_RANDOM);
        data_ = static_cast<float*>(m);
        mapped_bytes_ = bytes;
        return;
      }
    }
    INFERA_CHECK(data_ == nullptr, "cannot grow the mapped vector file");
    ::close(fd_);  // no room on disk for the first mapping: the floats stay in memory
    fd_ = -1;
  }
  auto* fresh = static_cast<float*>(std::aligned_alloc(64, bytes));
  INFERA_CHECK(fresh != nullptr, "out of memory for vectors");
  if (data_) std::memcpy(fresh, data_, size_t(slots_) * dim_ * sizeof(float));
  std::free(data_);
  data_ = fresh;
}

void Hnsw::reserve(size_t n) {
  if (n <= capacity_) return;
  size_t cap = std::max<size_t>({n, capacity_ * 2, 1024});
  growData(cap);
  links0_.resize(cap * (m0_ + 1), 0);
  upper_.resize(cap);
  levels_.resize(cap, 0);
  deleted_.resize(cap, 0);
  if (params_.quantize_int8) codes_.resize(cap * dim_, 0);
  if (bits_ready_) bits_.resize(cap * words_, 0);
  capacity_ = cap;
}

int Hnsw::randomLevel() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double r = std::max(u(rng_), 1e-12);
  return std::min(16, int(-std::log(r) * level_mult_));
}

bool Hnsw::allowed(uint32_t slot, const SlotFilter& f) const {
  if (deleted_[slot]) return false;
  if (f.bits && !((f.bits[slot >> 6] >> (slot & 63)) & 1)) return false;
  return !f.check || (*f.check)(slot);
}

uint32_t Hnsw::greedy(const float* q, uint32_t ep, float& ep_dist, int from_level,
                      int to_level) const {
  for (int l = from_level; l > to_level; --l) {
    bool changed = true;
    while (changed) {
      changed = false;
      const uint32_t* ln = links(ep, l);
      const uint32_t n = ln[0];
      for (uint32_t i = 1; i <= n; ++i) {
        const float d = dist_(q, vector(ln[i]), dim_);
        if (d < ep_dist) {
          ep_dist = d;
          ep = ln[i];
          changed = true;
        }
      }
    }
  }
  return ep;
}

// Level-0 beam search (the paper's SEARCH-LAYER): `s.res` ends with the (up to) ef closest allowed
// slots as a max-heap. While fewer than ef allowed slots were found the search keeps going, so a
// selective filter explores further instead of returning too few.
//
// Memory, not arithmetic, bounds this loop once the vectors outgrow the cache (1M x 128 floats is
// 512 MB): each expansion first prefetches the visited marks of all its neighbours, keeps the
// unvisited ones, and then computes their distances with the vectors (`rows`, `row_bytes` apart:
// the floats, or the int8 codes) fetched kAhead rows in advance; the next candidate's link list is
// fetched one whole expansion ahead.
template <typename DistFn>
void Hnsw::searchLevel0(DistFn&& dist, const char* rows, size_t row_bytes, uint32_t ep, size_t ef,
                        const SlotFilter& filter, SearchScratch& s) const {
  constexpr size_t kAhead = 4;
  s.visit(ep);
  const float d0 = dist(ep);
  s.cand.push_back({d0, ep});
  float bound = kInf;
  if (allowed(ep, filter)) {
    s.res.push_back({d0, ep});
    bound = d0;
  }
  const size_t list_bytes = (m0_ + 1) * sizeof(uint32_t);
  s.fresh.resize(m0_);
  uint32_t* fresh = s.fresh.data();
  auto row = [&](uint32_t slot) { return rows + size_t(slot) * row_bytes; };
  while (!s.cand.empty()) {
    const Neighbor c = s.cand.front();
    if (c.dist > bound && s.res.size() >= ef) break;
    std::pop_heap(s.cand.begin(), s.cand.end(), CloserFirst{});
    s.cand.pop_back();
    if (!s.cand.empty()) prefetch(links(s.cand.front().slot, 0), list_bytes);
    const uint32_t* ln = links(c.slot, 0);
    const uint32_t n = ln[0];
    for (uint32_t i = 1; i <= n; ++i) __builtin_prefetch(s.tagAddr(ln[i]));
    size_t nf = 0;
    for (uint32_t i = 1; i <= n; ++i) {
      if (s.visit(ln[i])) fresh[nf++] = ln[i];
    }
    for (size_t j = 0; j < nf && j < kAhead; ++j) prefetch(row(fresh[j]), row_bytes);
    for (size_t j = 0; j < nf; ++j) {
      if (j + kAhead < nf) prefetch(row(fresh[j + kAhead]), row_bytes);
      const uint32_t nb = fresh[j];
      const float d = dist(nb);
      if (s.res.size() < ef || d < bound) {
        s.cand.push_back({d, nb});
        std::push_heap(s.cand.begin(), s.cand.end(), CloserFirst{});
        if (allowed(nb, filter)) {
          s.res.push_back({d, nb});
          std::push_heap(s.res.begin(), s.res.end(), FartherFirst{});
          if (s.res.size() > ef) {
            std::pop_heap(s.res.begin(), s.res.end(), FartherFirst{});
            s.res.pop_back();
          }
          bound = s.res.front().dist;
        }
      }
    }
  }
}

void Hnsw::search(const float* q, size_t k, size_t ef, const SlotFilter& filter, SearchScratch& s,
                  std::vector<Neighbor>& out, bool use_codes) const {
  out.clear();
  if (entry_ == kNone || k == 0) return;
  ef = std::max(ef, k);
  s.begin(slots_);
  float ep_dist = dist_(q, vector(entry_), dim_);
  const uint32_t ep = greedy(q, entry_, ep_dist, max_level_, 0);
  if (use_codes && params_.quantize_binary && bits_ready_) {
    s.qbits.resize(words_);
    encodeBits(q, s.qbits.data());
    const uint64_t* qb = s.qbits.data();
    const BitKernel hamming = kernels().hamming;
    searchLevel0(
        [&](uint32_t slot) { return float(hamming(qb, &bits_[size_t(slot) * words_], words_)); },
        reinterpret_cast<const char*>(bits_.data()), words_ * sizeof(uint64_t), ep, ef, filter, s);
    for (auto& r : s.res) r.dist = dist_(q, vector(r.slot), dim_);
  } else if (use_codes && quantized()) {
    s.qcode.resize(dim_);
    encode(q, s.qcode.data());
    const int8_t* qc = s.qcode.data();
    // Smaller is closer in the traversal: the code dot product is negated like the float one.
    const float sign = metric_ == Metric::kL2 ? 1.0f : -1.0f;
    searchLevel0(
        [&](uint32_t slot) {
          return sign * float(code_dist_(qc, &codes_[size_t(slot) * dim_], dim_));
        },
        reinterpret_cast<const char*>(codes_.data()), dim_, ep, ef, filter, s);
    // Rescore on the original vectors.
    for (auto& r : s.res) r.dist = dist_(q, vector(r.slot), dim_);
  } else {
    searchLevel0([&](uint32_t slot) { return dist_(q, vector(slot), dim_); },
                 reinterpret_cast<const char*>(data_), dim_ * sizeof(float), ep, ef, filter, s);
  }
  std::sort(s.res.begin(), s.res.end(), [](const Neighbor& a, const Neighbor& b) {
    return a.dist < b.dist || (a.dist == b.dist && a.slot < b.slot);
  });
  if (s.res.size() > k) s.res.resize(k);
  out = s.res;
}

void Hnsw::bruteForce(const float* q, size_t k, const SlotFilter& filter,
                      const std::vector<uint32_t>* candidates, std::vector<Neighbor>& out) const {
  out.clear();
  if (k == 0) return;
  auto consider = [&](uint32_t slot) {
    if (!allowed(slot, filter)) return;
    const float d = dist_(q, vector(slot), dim_);
    if (out.size() < k) {
      out.push_back({d, slot});
      std::push_heap(out.begin(), out.end(), FartherFirst{});
    } else if (d < out.front().dist) {
      std::pop_heap(out.begin(), out.end(), FartherFirst{});
      out.back() = {d, slot};
      std::push_heap(out.begin(), out.end(), FartherFirst{});
    }
  };
  if (candidates) {
    for (uint32_t slot : *candidates) consider(slot);
  } else {
    for (uint32_t slot = 0; slot < slots_; ++slot) consider(slot);
  }
  std::sort(out.begin(), out.end(), [](const Neighbor& a, const Neighbor& b) {
    return a.dist < b.dist || (a.dist == b.dist && a.slot < b.slot);
  });
}

namespace {

// The paper's neighbour-selection heuristic (its algorithm 4, without extending or keeping pruned
// candidates): walk candidates from the closest and keep one unless it is closer to a kept one than
// to the base. `between(a, b)` is the distance of two candidates.
template <typename Between>
void selectNeighbors(std::vector<Neighbor>& sorted_cands, size_t m, Between&& between,
                     std::vector<uint32_t>& out) {
  out.clear();
  if (sorted_cands.size() <= m) {
    for (const auto& c : sorted_cands) out.push_back(c.slot);
    return;
  }
  for (const auto& c : sorted_cands) {
    if (out.size() >= m) break;
    bool keep = true;
    for (uint32_t r : out) {
      if (between(c.slot, r) < c.dist) {
        keep = false;
        break;
      }
    }
    if (keep) out.push_back(c.slot);
  }
}

}  // namespace

void Hnsw::plan(uint32_t slot, const float* vec, SearchScratch& s, InsertPlan& p) const {
  INFERA_CHECK(slot < capacity_, "insert beyond capacity");
  p.slot = slot;
  p.vec = vec;
  p.links.clear();
  p.updates.clear();
  const bool reuse = slot < slots_;
  p.level = reuse ? levels_[slot] : const_cast<Hnsw*>(this)->randomLevel();
  p.links.resize(size_t(p.level) + 1);
  if (entry_ == kNone) return;

  // The vector of a slot as it will be after this insert.
  auto vecOf = [&](uint32_t x) { return x == slot ? vec : vector(x); };
  auto between = [&](uint32_t a, uint32_t b) { return dist_(vecOf(a), vecOf(b), dim_); };
  // A node's list as it will be (a planned update wins over the stored list).
  struct View {
    const uint32_t* p;
    uint32_t n;
  };
  auto viewOf = [&](uint32_t node, int level) {
    if (!p.updates.empty()) {
      const auto it = p.updates.find((uint64_t(level) << 32) | node);
      if (it != p.updates.end()) return View{it->second.data(), uint32_t(it->second.size())};
    }
    const uint32_t* ln = links(node, level);
    return View{ln + 1, ln[0]};
  };
  auto listOf = [&](uint32_t node, int level) {
    const View v = viewOf(node, level);
    return std::vector<uint32_t>(v.p, v.p + v.n);
  };
  std::vector<Neighbor> cands;
  std::vector<uint32_t> chosen;

  // A reused slot: the lists that pointed at its old vector are rebuilt from their other links and
  // the old vector's own links, as if the old vector had been removed from the graph.
  // Nodes linking to the old vector are looked for among its neighbours and theirs (links are
  // mostly but not always mutual; in-links come from close by).
  if (reuse) {
    std::vector<uint32_t> near;
    for (int l = 0; l <= p.level; ++l) {
      const uint32_t* old = links(slot, l);
      near.assign(old + 1, old + 1 + old[0]);
      for (uint32_t i = 1; i <= old[0]; ++i) {
        const uint32_t* ln = links(old[i], l);
        near.insert(near.end(), ln + 1, ln + 1 + ln[0]);
      }
      std::sort(near.begin(), near.end());
      near.erase(std::unique(near.begin(), near.end()), near.end());
      for (const uint32_t n : near) {
        if (n == slot || levels_[n] < l) continue;
        std::vector<uint32_t> list = listOf(n, l);
        const auto at = std::find(list.begin(), list.end(), slot);
        if (at == list.end()) continue;
        // The other links stay; the old vector's neighbours fill the free places, each kept only
        // if no link already covers it (the selection heuristic's test).
        list.erase(at);
        cands.clear();
        for (uint32_t j = 1; j <= old[0]; ++j) {
          const uint32_t x = old[j];
          if (x == n || x == slot || deleted_[x] ||
              std::find(list.begin(), list.end(), x) != list.end())
            continue;
          cands.push_back({dist_(vector(n), vector(x), dim_), x});
        }
        std::sort(cands.begin(), cands.end(),
                  [](const Neighbor& a, const Neighbor& b) { return a.dist < b.dist; });
        chosen = list;
        for (const auto& c : cands) {
          if (chosen.size() >= maxLinks(l)) break;
          bool keep = true;
          for (uint32_t r : chosen) {
            if (dist_(vector(c.slot), vector(r), dim_) < c.dist) {
              keep = false;
              break;
            }
          }
          if (keep) chosen.push_back(c.slot);
        }
        p.updates[(uint64_t(l) << 32) | n] = chosen;
      }
    }
  }

  float ep_dist = dist_(vec, vector(entry_), dim_);
  uint32_t ep = greedy(vec, entry_, ep_dist, max_level_, p.level);
  const size_t vec_bytes = dim_ * sizeof(float);
  for (int l = std::min(p.level, max_level_); l >= 0; --l) {
    // SEARCH-LAYER at level l with ef_construct, every slot a candidate but this one and the
    // deleted (they are passed through, not linked to).
    s.begin(slots_);
    s.visit(ep);
    s.cand.push_back({ep_dist, ep});
    auto usable = [&](uint32_t x) { return x != slot && !deleted_[x]; };
    float bound = kInf;
    if (usable(ep)) {
      s.res.push_back({ep_dist, ep});
      bound = ep_dist;
    }
    const size_t ef = size_t(params_.ef_construct);
    while (!s.cand.empty()) {
      const Neighbor c = s.cand.front();
      if (c.dist > bound && s.res.size() >= ef) break;
      std::pop_heap(s.cand.begin(), s.cand.end(), CloserFirst{});
      s.cand.pop_back();
      const View ln = viewOf(c.slot, l);
      for (uint32_t i = 0; i < ln.n; ++i) {
        if (i + 1 < ln.n) prefetch(vector(ln.p[i + 1]), vec_bytes);
        const uint32_t nb = ln.p[i];
        if (!s.visit(nb)) continue;
        const float d = dist_(vec, vector(nb), dim_);
        if (s.res.size() < ef || d < bound) {
          s.cand.push_back({d, nb});
          std::push_heap(s.cand.begin(), s.cand.end(), CloserFirst{});
          if (usable(nb)) {
            s.res.push_back({d, nb});
            std::push_heap(s.res.begin(), s.res.end(), FartherFirst{});
            if (s.res.size() > ef) {
              std::pop_heap(s.res.begin(), s.res.end(), FartherFirst{});
              s.res.pop_back();
            }
            bound = s.res.front().dist;
          }
        }
      }
    }
    cands = s.res;
    std::sort(cands.begin(), cands.end(),
              [](const Neighbor& a, const Neighbor& b) { return a.dist < b.dist; });
    if (!cands.empty()) {
      ep = cands.front().slot;
      ep_dist = cands.front().dist;
    }
    selectNeighbors(cands, m_, between, chosen);
    p.links[size_t(l)] = chosen;
    // Each new neighbour links back, pruned by the same heuristic when its list is full.
    for (uint32_t n : chosen) {
      std::vector<uint32_t> list = listOf(n, l);
      if (std::find(list.begin(), list.end(), slot) != list.end()) continue;
      if (list.size() < maxLinks(l)) {
        list.push_back(slot);
      } else {
        std::vector<Neighbor> nc;
        nc.reserve(list.size() + 1);
        nc.push_back({dist_(vector(n), vec, dim_), slot});
        for (uint32_t x : list) nc.push_back({dist_(vector(n), vector(x), dim_), x});
        std::sort(nc.begin(), nc.end(),
                  [](const Neighbor& a, const Neighbor& b) { return a.dist < b.dist; });
        std::vector<uint32_t> pruned;
        selectNeighbors(nc, maxLinks(l), between, pruned);
        list = std::move(pruned);
      }
      p.updates[(uint64_t(l) << 32) | n] = std::move(list);
    }
  }
}

void Hnsw::commit(const InsertPlan& p) {
  const uint32_t slot = p.slot;
  const bool fresh = slot >= slots_;
  std::memcpy(data_ + size_t(slot) * dim_, p.vec, dim_ * sizeof(float));
  if (params_.quantize_int8 && quant_ready_) encode(p.vec, &codes_[size_t(slot) * dim_]);
  if (bits_ready_) encodeBits(p.vec, &bits_[size_t(slot) * words_]);
  if (fresh) {
    levels_[slot] = int8_t(p.level);
    upper_[slot].assign(size_t(p.level) * (m_ + 1), 0);
    slots_ = slot + 1;
  }
  for (int l = 0; l <= p.level; ++l) {
    uint32_t* ln = links(slot, l);
    const auto& src = p.links[size_t(l)];
    ln[0] = uint32_t(src.size());
    std::copy(src.begin(), src.end(), ln + 1);
  }
  for (const auto& [key, list] : p.updates) {
    uint32_t* ln = links(uint32_t(key & 0xffffffffu), int(key >> 32));
    ln[0] = uint32_t(list.size());
    std::copy(list.begin(), list.end(), ln + 1);
  }
  if (fresh || deleted_[slot]) ++live_;
  deleted_[slot] = 0;
  if (entry_ == kNone || p.level > max_level_) {
    entry_ = slot;
    max_level_ = p.level;
  }
}

void Hnsw::markDeleted(uint32_t slot) {
  if (slot < slots_ && !deleted_[slot]) {
    deleted_[slot] = 1;
    --live_;
  }
}

void Hnsw::encode(const float* v, int8_t* out) const {
  const float offset =
      metric_ == Metric::kL2 ? q_inv_scale_ : 0.0f;  // q_inv_scale_ holds the L2 offset
  for (size_t i = 0; i < dim_; ++i) {
    const float x = std::nearbyint((v[i] - offset) * q_scale_);
    out[i] = int8_t(std::clamp(x, -127.0f, 127.0f));
  }
}

void Hnsw::encodeBits(const float* v, uint64_t* out) const {
  std::fill(out, out + words_, 0);
  for (size_t i = 0; i < dim_; ++i) {
    if (v[i] > bit_mid_[i]) out[i >> 6] |= 1ull << (i & 63);
  }
}

void Hnsw::trainQuantizer() {
  if (params_.quantize_binary && slots_ > 0) {
    // Each dimension's threshold: its mean over up to 65,536 stored vectors (a sign bit would
    // make every bit of a non-negative feature, as SIFT's, the same).
    const size_t step = std::max<size_t>(1, slots_ / 65536);
    std::vector<double> sum(dim_, 0.0);
    size_t n = 0;
    for (size_t s = 0; s < slots_; s += step, ++n) {
      const float* v = vector(uint32_t(s));
      for (size_t i = 0; i < dim_; ++i) sum[i] += v[i];
    }
    bit_mid_.resize(dim_);
    for (size_t i = 0; i < dim_; ++i) bit_mid_[i] = float(sum[i] / double(n));
    bits_.assign(capacity_ * words_, 0);
    for (uint32_t s = 0; s < slots_; ++s) encodeBits(vector(s), &bits_[size_t(s) * words_]);
    bits_ready_ = true;
    return;
  }
  if (!params_.quantize_int8 || slots_ == 0) return;
  // The range from a sample of up to 2^20 values: [lo, hi] quantiles for L2 (codes centred on
  // their middle), the symmetric |x| quantile for dot products (an offset would change them).
  std::vector<float> sample;
  const size_t total = size_t(slots_) * dim_;
  const size_t step = std::max<size_t>(1, total / (1u << 20));
  for (size_t i = 0; i < total; i += step) sample.push_back(data_[i]);
  const float q = std::clamp(params_.quantile, 0.5f, 1.0f);
  auto at = [&](double frac) {
    const size_t idx = std::min(sample.size() - 1, size_t(frac * double(sample.size() - 1)));
    std::nth_element(sample.begin(), sample.begin() + long(idx), sample.end());
    return sample[idx];
  };
  if (metric_ == Metric::kL2) {
    const float lo = at(1.0 - q), hi = at(q);
    const float range = std::max(hi - lo, 1e-6f);
    q_scale_ = 254.0f / range;
    q_inv_scale_ = (lo + hi) / 2;
  } else {
    for (float& x : sample) x = std::fabs(x);
    const float a = std::max(at(q), 1e-6f);
    q_scale_ = 127.0f / a;
    q_inv_scale_ = 0;
  }
  codes_.resize(capacity_ * dim_);
  quant_ready_ = true;
  for (uint32_t s = 0; s < slots_; ++s) encode(vector(s), &codes_[size_t(s) * dim_]);
}

size_t Hnsw::memoryBytes() const {
  size_t b = (fd_ >= 0 ? 0 : capacity_ * dim_ * sizeof(float)) + codes_.size() +
             bits_.size() * sizeof(uint64_t) + links0_.size() * sizeof(uint32_t) + levels_.size() +
             deleted_.size() + upper_.size() * sizeof(std::vector<uint32_t>);
  for (uint32_t s = 0; s < slots_; ++s) b += upper_[s].capacity() * sizeof(uint32_t);
  return b;
}

double Hnsw::meanDegree() const {
  size_t sum = 0, n = 0;
  for (uint32_t s = 0; s < slots_; ++s) {
    if (deleted_[s]) continue;
    sum += links(s, 0)[0];
    ++n;
  }
  return n ? double(sum) / double(n) : 0.0;
}

namespace {

struct Out {
  std::FILE* f;
  bool ok = true;
  void raw(const void* p, size_t n) {
    if (ok && n && std::fwrite(p, 1, n, f) != n) ok = false;
  }
  template <typename T>
  void put(T v) {
    raw(&v, sizeof v);
  }
};
struct In {
  std::FILE* f;
  bool ok = true;
  void raw(void* p, size_t n) {
    if (ok && n && std::fread(p, 1, n, f) != n) ok = false;
  }
  template <typename T>
  T get() {
    T v{};
    raw(&v, sizeof v);
    return v;
  }
};
constexpr uint32_t kMagic = 0x48'4e'53'57;  // "HNSW"

}  // namespace

Status Hnsw::save(std::FILE* f) const {
  Out o{f};
  o.put(kMagic);
  o.put(uint32_t(bits_ready_ ? 2 : 1));  // 2: binary thresholds follow the int8 range
  o.put(uint64_t(dim_));
  o.put(uint8_t(metric_));
  o.put(uint32_t(m_));
  o.put(uint32_t(params_.ef_construct));
  o.put(uint8_t(quant_ready_));
  o.put(q_scale_);
  o.put(q_inv_scale_);
  if (bits_ready_) o.raw(bit_mid_.data(), dim_ * sizeof(float));
  o.put(slots_);
  o.put(uint64_t(live_));
  o.put(entry_);
  o.put(int32_t(max_level_));
  o.put(rng_);
  o.raw(data_, size_t(slots_) * dim_ * sizeof(float));
  o.raw(levels_.data(), slots_);
  o.raw(deleted_.data(), slots_);
  o.raw(links0_.data(), size_t(slots_) * (m0_ + 1) * sizeof(uint32_t));
  for (uint32_t s = 0; s < slots_; ++s)
    o.raw(upper_[s].data(), upper_[s].size() * sizeof(uint32_t));
  return o.ok ? Status::ok() : Status::internal("writing the index failed");
}

Status Hnsw::load(std::FILE* f) {
  In in{f};
  if (in.get<uint32_t>() != kMagic) return Status::internal("not an index file");
  const auto version = in.get<uint32_t>();
  if (version != 1 && version != 2) return Status::internal("not an index file");
  const auto dim = in.get<uint64_t>();
  const auto metric = in.get<uint8_t>();
  const auto m = in.get<uint32_t>();
  const auto efc = in.get<uint32_t>();
  if (!in.ok || dim != dim_ || metric != uint8_t(metric_) || m != m_) {
    return Status::internal("index file does not match the collection's parameters");
  }
  params_.ef_construct = int(efc);
  quant_ready_ = in.get<uint8_t>() != 0;
  q_scale_ = in.get<float>();
  q_inv_scale_ = in.get<float>();
  if (version == 2) {
    bit_mid_.resize(dim_);
    in.raw(bit_mid_.data(), dim_ * sizeof(float));
  }
  const auto slots = in.get<uint32_t>();
  live_ = size_t(in.get<uint64_t>());
  entry_ = in.get<uint32_t>();
  max_level_ = in.get<int32_t>();
  rng_ = in.get<std::mt19937_64>();
  if (!in.ok) return Status::internal("truncated index file");
  reserve(slots);
  slots_ = slots;
  if (quant_ready_) codes_.resize(capacity_ * dim_);
  in.raw(data_, size_t(slots) * dim_ * sizeof(float));
  in.raw(levels_.data(), slots);
  in.raw(deleted_.data(), slots);
  in.raw(links0_.data(), size_t(slots) * (m0_ + 1) * sizeof(uint32_t));
  for (uint32_t s = 0; s < slots && in.ok; ++s) {
    if (levels_[s] < 0 || levels_[s] > 16) return Status::internal("corrupt index file");
    upper_[s].assign(size_t(levels_[s]) * (m_ + 1), 0);
    in.raw(upper_[s].data(), upper_[s].size() * sizeof(uint32_t));
  }
  if (!in.ok) return Status::internal("truncated index file");
  if (quant_ready_) {
    for (uint32_t s = 0; s < slots_; ++s) encode(vector(s), &codes_[size_t(s) * dim_]);
  }
  if (version == 2 && params_.quantize_binary) {
    bits_.assign(capacity_ * words_, 0);
    for (uint32_t s = 0; s < slots_; ++s) encodeBits(vector(s), &bits_[size_t(s) * words_]);
    bits_ready_ = true;
  }
  return Status::ok();
}

}  // namespace infera::vectors
