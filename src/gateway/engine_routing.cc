#include "gateway/internal/engine_routing.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "core/hash.h"

namespace infera::gateway {
namespace {

enum class Series {
  kOther,
  kRunning,
  kWaiting,
  kKvUsage,
  kGpuCacheUsage,
  kLoraInfo,
  kTritonPending
};

Series seriesOf(std::string_view name) {
  if (name == "vllm:num_requests_running") return Series::kRunning;
  if (name == "vllm:num_requests_waiting") return Series::kWaiting;
  if (name == "vllm:kv_cache_usage_perc") return Series::kKvUsage;
  if (name == "vllm:gpu_cache_usage_perc") return Series::kGpuCacheUsage;
  if (name == "vllm:lora_requests_info") return Series::kLoraInfo;
  if (name == "nv_inference_pending_request_count") return Series::kTritonPending;
  return Series::kOther;
}

// Reads `{k="v",...}` from line[i] on; the values of running/waiting adapters when asked.
bool readLabels(std::string_view line, size_t& i, std::string* running, std::string* waiting) {
  ++i;  // '{'
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
    if (i >= line.size()) return false;
    if (line[i] == '}') {
      ++i;
      return true;
    }
    const size_t eq = line.find('=', i);
    if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
    const std::string_view key = line.substr(i, eq - i);
    std::string* into = key == "running_lora_adapters"   ? running
                        : key == "waiting_lora_adapters" ? waiting
                                                         : nullptr;
    i = eq + 2;
    while (true) {
      if (i >= line.size()) return false;
      const char c = line[i++];
      if (c == '"') break;
      if (c == '\\') {
        if (i >= line.size()) return false;
        const char e = line[i++];
        if (into) into->push_back(e == 'n' ? '\n' : e);
      } else if (into) {
        into->push_back(c);
      }
    }
  }
}

void splitAdapters(std::string_view list, std::vector<std::string>& out) {
  size_t start = 0;
  // The signals keep a few adapters: a label listing thousands costs no more than that.
  while (start < list.size() && out.size() < 2 * EngineSignals::kMaxLoras) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    if (comma > start) {
      const std::string name(list.substr(start, comma - start));
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
    start = comma + 1;
  }
}

}  // namespace

bool parseEngineMetrics(std::string_view text, EngineSample& out) {
  out = EngineSample{};
  bool queue = false;
  double kv = -1, gpu_cache = -1, lora_time = -1;
  std::string running_loras, waiting_loras, best_running, best_waiting;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ \t");
    if (name_end == std::string_view::npos) return false;
    const Series s = seriesOf(line.substr(0, name_end));
    if (s == Series::kOther) continue;
    size_t i = name_end;
    running_loras.clear();
    waiting_loras.clear();
    if (line[i] == '{') {
      const bool lora = s == Series::kLoraInfo;
      if (!readLabels(line, i, lora ? &running_loras : nullptr, lora ? &waiting_loras : nullptr)) {
        return false;
      }
    }
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t end = i;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    double v = 0;
    const auto [ptr, ec] = std::from_chars(line.data() + i, line.data() + end, v);
    if (ec != std::errc() || ptr != line.data() + end || !std::isfinite(v) || v < 0) return false;
    switch (s) {
      case Series::kRunning:
        out.running += v;
        queue = true;
        break;
      case Series::kWaiting:
      case Series::kTritonPending:
        out.waiting += v;
        queue = true;
        break;
      case Series::kKvUsage:
        kv = std::max(kv, v);
        break;
      case Series::kGpuCacheUsage:
        gpu_cache = std::max(gpu_cache, v);
        break;
      case Series::kLoraInfo:
        // vLLM sets the current series to the scrape time; older combinations keep older times.
        if (v > lora_time) {
          lora_time = v;
          best_running = running_loras;
          best_waiting = waiting_loras;
        }
        break;
      case Series::kOther:
        break;
    }
  }
  if (!queue) return false;
  out.kv_usage = kv >= 0 ? kv : gpu_cache;
  if (out.kv_usage > 1) out.kv_usage = 1;
  splitAdapters(best_running, out.loras);
  splitAdapters(best_waiting, out.loras);
  return true;
}

uint64_t loraHash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  h = mix64(h);
  return h == 0 ? 1 : h;
}

void EngineSignals::store(const EngineSample& s, int64_t now_ns) {
  const double total = std::min(s.running + s.waiting, 1e9);
  load.store(static_cast<int32_t>(total), std::memory_order_relaxed);
  waiting.store(static_cast<int32_t>(std::min(s.waiting, 1e9)), std::memory_order_relaxed);
  kv_usage.store(static_cast<float>(s.kv_usage), std::memory_order_relaxed);
  for (int i = 0; i < kMaxLoras; ++i) {
    const size_t k = static_cast<size_t>(i);
    loras[i].store(k < s.loras.size() ? loraHash(s.loras[k]) : 0, std::memory_order_relaxed);
  }
  seq.fetch_add(1, std::memory_order_relaxed);
  updated_ns.store(now_ns, std::memory_order_release);
}

namespace {

// One block's bytes, hashed in four independent lanes (a multiply and a shift per eight bytes
// each), so blocks and lanes overlap in the CPU instead of waiting on one multiply chain.
uint64_t blockContentHash(const char* p, size_t n) {
  constexpr uint64_t kMul = 0xff51afd7ed558ccdULL;
  uint64_t lane[4] = {0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL, 0xa4093822299f31d0ULL,
                      0x082efa98ec4e6c89ULL};
  auto step = [](uint64_t h, uint64_t w) {
    h = (h ^ w) * kMul;
    return h ^ (h >> 32);
  };
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (size_t k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = step(lane[k], w);
    }
  }
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    lane[0] = step(lane[0], w);
  }
  for (; i < n; ++i) lane[0] = (lane[0] ^ static_cast<unsigned char>(p[i])) * 0x100000001b3ULL;
  return mix64(lane[0] ^ std::rotl(lane[1], 17) ^ std::rotl(lane[2], 31) ^ std::rotl(lane[3], 47) ^
               n);
}

// Hashes the rendered prompt block by block without building it: a block's hash chains its
// parent's (one multiply on the chain; the content hashes are independent of each other).
class BlockHasher {
 public:
  BlockHasher(size_t block_bytes, std::span<uint64_t> out)
      : block_(std::min(block_bytes, kMaxBlock)), out_(out) {}
  bool full() const { return n_ == out_.size(); }
  size_t count() const { return n_; }
  void add(std::string_view s) {
    while (!s.empty() && !full()) {
      if (fill_ == 0 && s.size() >= block_) {
        // Whole blocks straight from the text, no copy.
        finishBlock(s.data());
        s.remove_prefix(block_);
        continue;
      }
      const size_t take = std::min(s.size(), block_ - fill_);
      std::memcpy(buf_ + fill_, s.data(), take);
      fill_ += take;
      s.remove_prefix(take);
      if (fill_ == block_) finishBlock(buf_);
    }
  }

 private:
  static constexpr size_t kMaxBlock = 4096;
  void finishBlock(const char* p) {
    uint64_t h = (parent_ ^ blockContentHash(p, block_)) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
    if (h == 0) h = 1;
    out_[n_++] = h;
    parent_ = h;
    fill_ = 0;
  }
  size_t block_;
  std::span<uint64_t> out_;
  size_t n_ = 0;
  size_t fill_ = 0;
  uint64_t parent_ = 0;
  char buf_[kMaxBlock];
};

void addContent(const simdjson::dom::element& content, BlockHasher& h) {
  std::string_view text;
  if (content.get(text) == simdjson::SUCCESS) {
    h.add(text);
    return;
  }
  simdjson::dom::array parts;
  if (content.get(parts) != simdjson::SUCCESS) return;
  for (auto part : parts) {
    if (h.full()) return;
    if (part.get(text) == simdjson::SUCCESS || part["text"].get(text) == simdjson::SUCCESS) {
      h.add(text);
    }
  }
}

}  // namespace

size_t promptBlockHashes(const simdjson::dom::element& body, size_t block_bytes,
                         std::span<uint64_t> out) {
  BlockHasher h(std::max<size_t>(block_bytes, 1), out);
  simdjson::dom::array messages;
  simdjson::dom::element e;
  if (body["messages"].get(messages) == simdjson::SUCCESS) {
    for (auto m : messages) {
      if (h.full()) break;
      std::string_view role;
      if (m["role"].get(role) == simdjson::SUCCESS) h.add(role);
      h.add("\n");
      if (m["content"].get(e) == simdjson::SUCCESS) addContent(e, h);
      h.add("\n");
    }
  } else if (body["prompt"].get(e) == simdjson::SUCCESS ||
             body["input"].get(e) == simdjson::SUCCESS) {
    addContent(e, h);
  }
  return h.count();
}

PrefixIndex::PrefixIndex(size_t entries) {
  const size_t n = std::bit_ceil(std::max<size_t>(entries, kProbe));
  entries_ = std::make_unique<Entry[]>(n);
  mask_ = n - 1;
}

void PrefixIndex::match(std::span<const uint64_t> blocks, uint64_t slots,
                        uint16_t matched[64]) const {
  for (uint64_t s = slots; s != 0; s &= s - 1) matched[std::countr_zero(s)] = 0;
  uint64_t alive = slots;
  size_t b = 0;
  for (; b < blocks.size() && alive != 0; ++b) {
    const uint64_t key = blocks[b];
    uint64_t has = 0;
    for (size_t p = 0; p < kProbe; ++p) {
      const Entry& e = entries_[(key + p) & mask_];
      if (e.key.load(std::memory_order_relaxed) == key) {
        has = e.slots.load(std::memory_order_relaxed);
        break;
      }
    }
    // Slots that held every block so far but not this one stop here.
    for (uint64_t s = alive & ~has; s != 0; s &= s - 1) {
      matched[std::countr_zero(s)] = static_cast<uint16_t>(b);
    }
    alive &= has;
  }
  for (uint64_t s = alive; s != 0; s &= s - 1) {
    matched[std::countr_zero(s)] = static_cast<uint16_t>(b);
  }
}

void PrefixIndex::record(std::span<const uint64_t> blocks, int slot, uint32_t tick) {
  if (slot < 0 || slot >= 64) return;
  const uint64_t bit = uint64_t{1} << slot;
  for (const uint64_t key : blocks) {
    // The entry holding this block, else an empty one, else the least recently recorded.
    Entry* victim = nullptr;
    uint64_t victim_key = 0;
    uint32_t victim_tick = 0;
    bool found = false;
    for (size_t p = 0; p < kProbe; ++p) {
      Entry& e = entries_[(key + p) & mask_];
      const uint64_t k = e.key.load(std::memory_order_relaxed);
      if (k == key) {
        e.slots.fetch_or(bit, std::memory_order_relaxed);
        e.tick.store(tick, std::memory_order_relaxed);
        found = true;
        break;
      }
      const uint32_t t = e.tick.load(std::memory_order_relaxed);
      const bool better = victim == nullptr || (victim_key != 0 && (k == 0 || t < victim_tick));
      if (better) {
        victim = &e;
        victim_key = k;
        victim_tick = t;
      }
    }
    if (found) continue;
    if (victim_key != 0) overwrites_.fetch_add(1, std::memory_order_relaxed);
    victim->key.store(0, std::memory_order_relaxed);
    victim->slots.store(bit, std::memory_order_relaxed);
    victim->tick.store(tick, std::memory_order_relaxed);
    victim->key.store(key, std::memory_order_release);
  }
}

bool PrefixIndex::fits(const std::vector<std::string>& endpoint_keys) {
  std::lock_guard<std::mutex> lock(slots_mu_);
  size_t missing = 0;
  for (const auto& k : endpoint_keys) missing += slots_.count(k) == 0 ? 1 : 0;
  return slots_.size() + missing <= 64;
}

int PrefixIndex::slotFor(const std::string& endpoint_key) {
  std::lock_guard<std::mutex> lock(slots_mu_);
  const auto it = slots_.find(endpoint_key);
  if (it != slots_.end()) return it->second;
  if (slots_.size() >= 64) return -1;
  const int slot = static_cast<int>(slots_.size());
  slots_.emplace(endpoint_key, slot);
  return slot;
}

EngineChoice pickEngineCandidate(const EngineRoutingConfig& cfg,
                                 std::span<const EngineCandidate> candidates,
                                 const uint16_t matched[64], size_t blocks, std::mt19937_64& rng,
                                 std::atomic<uint64_t>* turn) {
  EngineChoice choice;
  if (candidates.empty()) return choice;
  auto past = [&](const EngineCandidate& c) {
    return c.known && ((cfg.max_waiting > 0 && c.waiting >= cfg.max_waiting) ||
                       (cfg.max_kv_usage > 0 && c.kv_usage >= cfg.max_kv_usage));
  };
  bool any_under = false;
  for (const auto& c : candidates) any_under = any_under || !past(c);
  choice.filtered = !any_under;
  if (cfg.pick == EnginePick::kRoundRobin && turn != nullptr) {
    size_t eligible = 0;
    for (const auto& c : candidates) eligible += any_under && past(c) ? 0 : 1;
    size_t k = turn->fetch_add(1, std::memory_order_relaxed) % eligible;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (any_under && past(candidates[i])) continue;
      if (k-- == 0) {
        choice.position = static_cast<int>(i);
        break;
      }
    }
    const EngineCandidate& chosen = candidates[static_cast<size_t>(choice.position)];
    choice.matched = blocks > 0 && chosen.slot >= 0 ? matched[chosen.slot] : 0;
    return choice;
  }
  double min_load = std::numeric_limits<double>::infinity(), max_load = -1, max_ewma = 0;
  uint64_t max_session = 0;
  for (const auto& c : candidates) {
    if (any_under && past(c)) continue;
    if (c.known) {
      min_load = std::min(min_load, c.load);
      max_load = std::max(max_load, c.load);
    }
    max_ewma = std::max(max_ewma, c.ewma_s);
    max_session = std::max(max_session, c.session);
  }
  double best = -1;
  int ties = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const EngineCandidate& c = candidates[i];
    if (any_under && past(c)) continue;
    double s = 0;
    if (blocks > 0 && c.slot >= 0) {
      s += cfg.prefix_weight * static_cast<double>(matched[c.slot]) / static_cast<double>(blocks);
    }
    // Unknown signals score as the worst known: an engine that does not answer is never idle.
    if (c.known) {
      s += cfg.queue_weight *
           (max_load > min_load ? (max_load - c.load) / (max_load - min_load) : 1);
      s += cfg.kv_weight * (1 - std::clamp(c.kv_usage, 0.0, 1.0));
    }
    if (c.lora) s += cfg.lora_weight;
    if (max_session != 0 && c.session == max_session) s += cfg.session_weight;
    if (max_ewma > 0) s += cfg.latency_weight * (c.ewma_s > 0 ? 1 - c.ewma_s / max_ewma : 1);
    if (s > best + 1e-9) {
      best = s;
      ties = 1;
      choice.position = static_cast<int>(i);
    } else if (s >= best - 1e-9) {
      // Equal scores: each of the tied is as likely (reservoir sampling).
      ++ties;
      if (std::uniform_int_distribution<int>(0, ties - 1)(rng) == 0) {
        choice.position = static_cast<int>(i);
      }
    }
  }
  const EngineCandidate& chosen = candidates[static_cast<size_t>(choice.position)];
  choice.matched = blocks > 0 && chosen.slot >= 0 ? matched[chosen.slot] : 0;
  return choice;
}

bool parsePriority(std::string_view name, Priority& out) {
  for (int i = 0; i < kPriorities; ++i) {
    const std::string_view candidate = priorityName(static_cast<Priority>(i));
    const bool same = name.size() == candidate.size() &&
                      std::equal(name.begin(), name.end(), candidate.begin(), [](char a, char b) {
                        return std::tolower(static_cast<unsigned char>(a)) == b;
                      });
    if (same) {
      out = static_cast<Priority>(i);
      return true;
    }
  }
  return false;
}

std::string_view priorityName(Priority p) {
  switch (p) {
    case Priority::kCritical:
      return "critical";
    case Priority::kStandard:
      return "standard";
    case Priority::kBatch:
      return "batch";
    case Priority::kSheddable:
      return "sheddable";
  }
  return "standard";
}

void FlowQueue::push(Waiter* w) {
  w->seq = ++seq_;
  if (!w->key.empty()) {
    // A key with nothing queued starts at the queue's virtual time (start-time fair queuing): no
    // credit for having been away, and no debt older than what the others have been served since.
    bool queued = false;
    for (const Waiter* o : waiters_) queued = queued || o->key == w->key;
    double& mine = served_[w->key];
    if (!queued) mine = std::max(mine, vtime_);
  }
  waiters_.push_back(w);
  ++by_priority_[static_cast<int>(w->priority)];
  // Bounded under sustained saturation too (keys may be caller-named users): keys with nothing
  // queued and not ahead of the virtual time are forgotten (push() would start them there anyway).
  if (served_.size() > 2 * waiters_.size() + 1024) {
    std::unordered_set<std::string_view> queued;
    for (const Waiter* o : waiters_) queued.insert(o->key);
    std::erase_if(served_, [&](const auto& kv) {
      return kv.second <= vtime_ && queued.count(kv.first) == 0;
    });
  }
}

void FlowQueue::remove(Waiter* w) {
  const auto it = std::find(waiters_.begin(), waiters_.end(), w);
  if (it == waiters_.end()) return;
  waiters_.erase(it);
  --by_priority_[static_cast<int>(w->priority)];
  if (waiters_.empty() && served_.size() > 4096) served_.clear();
}

FlowQueue::Waiter* FlowQueue::popNext() {
  Waiter* best = next();
  if (best == nullptr) return nullptr;
  remove(best);
  if (!best->key.empty()) {
    double& s = served_[best->key];
    s += best->cost;
    vtime_ = std::max(vtime_, s - best->cost);
  }
  return best;
}

FlowQueue::Waiter* FlowQueue::next() const {
  Waiter* best = nullptr;
  double best_served = 0;
  for (Waiter* w : waiters_) {
    const double s = w->key.empty() ? 0 : served_[w->key];
    if (best == nullptr || w->priority < best->priority ||
        (w->priority == best->priority &&
         (s < best_served || (s == best_served && w->seq < best->seq)))) {
      best = w;
      best_served = s;
    }
  }
  return best;
}

double FlowQueue::servedOf(const Waiter& w, bool queued) const {
  if (w.key.empty()) return 0;
  const auto it = served_.find(w.key);
  const double s = it == served_.end() ? 0 : it->second;
  return queued ? s : std::max(s, vtime_);
}

FlowQueue::Waiter* FlowQueue::shedFor(const Waiter& newcomer) const {
  // Each waiter's finish tag: what its key has been served plus the cost of its key's waiters up
  // to and including it (waiters_ is in arrival order), i.e. where next() would reach it. Keyless
  // waiters share one key, so among them the newest has the highest tag.
  std::unordered_map<std::string_view, double> backlog;
  Waiter* worst = nullptr;
  double worst_tag = 0;
  for (Waiter* w : waiters_) {
    double& queued = backlog[w->key];
    queued += w->cost;
    const double tag = servedOf(*w, true) + queued;
    if (worst == nullptr || w->priority > worst->priority ||
        (w->priority == worst->priority &&
         (tag > worst_tag || (tag == worst_tag && w->seq > worst->seq)))) {
      worst = w;
      worst_tag = tag;
    }
  }
  if (worst == nullptr || newcomer.priority > worst->priority) return nullptr;
  if (newcomer.priority < worst->priority) return worst;
  const auto it = backlog.find(newcomer.key);
  const double ahead = it == backlog.end() ? 0 : it->second;
  // Equal tags: the newcomer is the newest.
  return servedOf(newcomer, ahead > 0) + ahead + newcomer.cost < worst_tag ? worst : nullptr;
}

}  // namespace infera::gateway
