// FGD fragmentation model. Classes are grouped by GPU demand (types, count, milli); a class's
// CPU/memory fit reduces to comparing threshold ranks, so a node state is keyed by (type, ranks,
// sorted free GPUs) and memoised.
#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "scheduler/cluster.h"

namespace infera::sched {
namespace {

uint64_t hashKey(const uint64_t (&words)[5]) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (const uint64_t w : words) {
    h ^= w + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  return h ^ (h >> 29);
}

// out = in[0..gpus) in descending order (insertion sort: at most 16 elements, mostly sorted).
void sortDescending(const int16_t* in, int16_t* out, int gpus) {
  for (int g = 0; g < gpus; ++g) {
    int j = g;
    while (j > 0 && out[j - 1] < in[g]) {
      out[j] = out[j - 1];
      --j;
    }
    out[j] = in[g];
  }
}

// How many of the sorted values are <= x (std::upper_bound's index).
int countAtMost(const std::vector<int64_t>& sorted, int64_t x) {
  return static_cast<int>(std::upper_bound(sorted.begin(), sorted.end(), x) - sorted.begin());
}

}  // namespace

void applyToNode(NodeState& n, int64_t cpu, int64_t mem, int gpu_milli,
                 const std::vector<int>& gpus, int shape, int sign) {
  n.cpu_free -= sign * cpu;
  n.mem_free -= sign * mem;
  for (const int g : gpus) {
    const bool was_full = n.gpu_free[g] == kMilliPerGpu;
    n.gpu_free[g] = static_cast<int16_t>(n.gpu_free[g] - sign * gpu_milli);
    n.gpu_free_total -= sign * gpu_milli;
    const bool is_full = n.gpu_free[g] == kMilliPerGpu;
    n.full_free_gpus += static_cast<int>(is_full) - static_cast<int>(was_full);
  }
  n.pods += sign;
  n.shape_count[shape] += sign;
  if (!gpus.empty()) sortDescending(n.gpu_free.data(), n.sorted_free.data(), n.gpus);
}

FragModel::FragModel(std::vector<Class> classes) : classes_(std::move(classes)) {
  for (const Class& c : classes_) {
    if (c.req.num_gpu == 0) {
      cpu_only_weight_ += c.weight;
      continue;
    }
    cpu_thresholds_.push_back(c.req.cpu_milli);
    mem_thresholds_.push_back(c.req.memory_mib);
  }
  for (auto* v : {&cpu_thresholds_, &mem_thresholds_}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  std::map<std::tuple<TypeMask, int, int>, size_t> index;
  for (const Class& c : classes_) {
    if (c.req.num_gpu == 0) continue;
    const auto key = std::make_tuple(c.req.types, c.req.num_gpu, c.req.gpu_milli);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, groups_.size()).first;
      groups_.push_back(Group{c.req.types, c.req.num_gpu, c.req.gpu_milli, {}, 0});
    }
    Group& g = groups_[it->second];
    // Rank i fits when the node's rank (thresholds <= free) exceeds i.
    const auto cpu_rank = static_cast<uint16_t>(
        std::lower_bound(cpu_thresholds_.begin(), cpu_thresholds_.end(), c.req.cpu_milli) -
        cpu_thresholds_.begin());
    const auto mem_rank = static_cast<uint16_t>(
        std::lower_bound(mem_thresholds_.begin(), mem_thresholds_.end(), c.req.memory_mib) -
        mem_thresholds_.begin());
    g.members.push_back(Member{cpu_rank, mem_rank, c.weight});
    g.weight += c.weight;
  }
  for (Group& g : groups_) {
    std::sort(g.members.begin(), g.members.end(),
              [](const Member& a, const Member& b) { return a.cpu_rank < b.cpu_rank; });
  }
  slots_.assign(1 << 14, Slot{});
}

double FragModel::compute(int type, int cpu_rank, int mem_rank, const int16_t* sorted_free,
                          int gpus) const {
  int total = 0;
  int full = 0;
  for (int g = 0; g < gpus; ++g) {
    total += sorted_free[g];
    full += sorted_free[g] == kMilliPerGpu;
  }
  if (total == 0) return 0;
  double frag = cpu_only_weight_ * total;
  for (const Group& grp : groups_) {
    if (type < 0 || ((grp.types >> type) & 1u) == 0) {
      frag += grp.weight * total;
      continue;
    }
    double fit_weight = 0;
    for (const Member& m : grp.members) {
      if (m.cpu_rank >= cpu_rank) break;  // sorted by cpu rank: the rest need more CPU
      if (m.mem_rank < mem_rank) fit_weight += m.weight;
    }
    int part;
    if (grp.gpu_milli >= kMilliPerGpu) {
      part = full >= grp.num_gpu ? total - full * kMilliPerGpu : total;
    } else {
      // sorted_free is descending: usable GPUs first.
      int unusable = 0;
      bool any = false;
      for (int g = 0; g < gpus; ++g) {
        if (sorted_free[g] < grp.gpu_milli) {
          unusable += sorted_free[g];
        } else {
          any = true;
        }
      }
      part = any ? unusable : total;
    }
    frag += fit_weight * part + (grp.weight - fit_weight) * total;
  }
  return frag;
}

double FragModel::lookup(int type, int64_t cpu_free, int64_t mem_free, const int16_t* sorted,
                         int gpus) const {
  const int cpu_rank = countAtMost(cpu_thresholds_, cpu_free);
  const int mem_rank = countAtMost(mem_thresholds_, mem_free);
  Key key{};
  key.w[0] = static_cast<uint64_t>(static_cast<uint8_t>(type)) |
             (static_cast<uint64_t>(gpus) << 8) | (static_cast<uint64_t>(cpu_rank) << 16) |
             (static_cast<uint64_t>(mem_rank) << 32);
  static_assert(sizeof(int16_t) * kMaxGpusPerNode == sizeof(uint64_t) * 4);
  std::memcpy(&key.w[1], sorted, sizeof(int16_t) * kMaxGpusPerNode);
  key.w[0] |= uint64_t{1} << 63;  // used
  const uint64_t h = hashKey(key.w);
  size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].key.w[0] != 0) {
    if (slots_[i].key == key) return slots_[i].value;
    i = (i + 1) & mask;
  }
  const double v = compute(type, cpu_rank, mem_rank, sorted, gpus);
  if ((size_ + 1) * 2 > slots_.size()) {
    // Grow and rehash.
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{});
    mask = slots_.size() - 1;
    for (const Slot& o : old) {
      if (o.key.w[0] == 0) continue;
      size_t k = hashKey(o.key.w) & mask;
      while (slots_[k].key.w[0] != 0) k = (k + 1) & mask;
      slots_[k] = o;
    }
    i = h & mask;
    while (slots_[i].key.w[0] != 0) i = (i + 1) & mask;
  }
  slots_[i] = Slot{key, v};
  ++size_;
  return v;
}

double FragModel::nodeFrag(const NodeState& n) const {
  if (n.gpus == 0) return 0;
  return lookup(n.type, n.cpu_free, n.mem_free, n.sorted_free.data(), n.gpus);
}

double FragModel::fragAfter(const NodeState& n, const PodReq& r, int gpu) const {
  if (n.gpus == 0) return 0;
  // The after state's sorted free GPUs, from the node's sorted ones.
  std::array<int16_t, kMaxGpusPerNode> s = n.sorted_free;
  if (r.num_gpu > 0) {
    if (r.sharing() && gpu >= 0) {
      const int16_t v = n.gpu_free[gpu];
      int i = 0;
      while (s[i] != v) ++i;
      s[i] = static_cast<int16_t>(v - r.gpu_milli);
      for (; i + 1 < n.gpus && s[i + 1] > s[i]; ++i) std::swap(s[i], s[i + 1]);
    } else {
      // Whole GPUs (or a share of a full one): the first full GPUs, which sort first.
      const int take = std::min(r.num_gpu, n.full_free_gpus);
      const auto left = static_cast<int16_t>(kMilliPerGpu - r.gpu_milli);
      if (left == 0) {  // the taken GPUs drop to the end: shift the rest forward
        for (int g = take; g < n.gpus; ++g) s[g - take] = s[g];
        for (int g = n.gpus - take; g < n.gpus; ++g) s[g] = 0;
      } else {
        std::array<int16_t, kMaxGpusPerNode> in = s;
        for (int g = 0; g < take; ++g) in[g] = left;
        sortDescending(in.data(), s.data(), n.gpus);
      }
    }
  }
  return lookup(n.type, n.cpu_free - r.cpu_milli, n.mem_free - r.memory_mib, s.data(), n.gpus);
}

FragModel buildFragModel(const std::vector<PodReq>& pods, double coverage, bool with_memory) {
  using Key = std::tuple<int64_t, int64_t, int, int, TypeMask>;
  std::map<Key, double> counts;
  for (const PodReq& p : pods) {
    counts[Key{p.cpu_milli, with_memory ? p.memory_mib : 0, p.num_gpu, p.gpu_milli, p.types}] += 1;
  }
  std::vector<std::pair<Key, double>> sorted(counts.begin(), counts.end());
  // Most popular first; ties in key order so the model is deterministic.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<FragModel::Class> classes;
  double covered = 0;
  const double total = static_cast<double>(pods.size());
  for (const auto& [key, count] : sorted) {
    if (covered >= coverage * total && !classes.empty()) break;
    FragModel::Class c;
    std::tie(c.req.cpu_milli, c.req.memory_mib, c.req.num_gpu, c.req.gpu_milli, c.req.types) = key;
    c.weight = count;
    covered += count;
    classes.push_back(c);
  }
  for (auto& c : classes) {
    c.weight /= covered;
  }
  return FragModel(std::move(classes));
}

int bestFitGpu(const NodeState& n, int gpu_milli) {
  int best = -1;
  for (int g = 0; g < n.gpus; ++g) {
    if (n.gpu_free[g] >= gpu_milli && (best < 0 || n.gpu_free[g] < n.gpu_free[best])) {
      best = g;
    }
  }
  return best;
}

}  // namespace infera::sched
