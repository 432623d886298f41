#pragma once
// Private to the gateway. Engine-aware endpoint choice (docs/routing.md): the signals kept per
// endpoint and the Prometheus text they are read from, the approximate prefix index, the prompt's
// block hashes, and the scoring. The scoring path takes no lock and allocates nothing.

#include <simdjson.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gateway/config.h"

namespace infera::gateway {

// What one scrape of an engine's metrics said.
struct EngineSample {
  double running = 0;
  double waiting = 0;
  double kv_usage = -1;            // -1: not exposed
  std::vector<std::string> loras;  // adapters running or waiting there
};
// Reads vLLM's metrics (vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc or the older vllm:gpu_cache_usage_perc, vllm:lora_requests_info; several
// series of one name are summed, the KV usage is their maximum) and Triton's queue
// (nv_inference_pending_request_count as waiting) from a Prometheus text exposition. False when
// the text is malformed (a sample line that does not parse, a value that is not a finite
// non-negative number) or has none of the queue metrics: the endpoint's signals are then unknown.
bool parseEngineMetrics(std::string_view text, EngineSample& out);

// Hash of an adapter (model) name as the signals keep it; never 0.
uint64_t loraHash(std::string_view name);

// One endpoint's engine signals, shared by every worker (in EndpointShared): written by the one
// scraping thread, read by the workers with relaxed loads. A torn read across fields (a queue from
// one scrape, the KV usage from the next) is harmless: each is an estimate.
struct EngineSignals {
  static constexpr int kMaxLoras = 8;
  std::atomic<int64_t> updated_ns{0};  // monotonic time of the last good scrape; 0 = never
  std::atomic<uint32_t> seq{0};        // good scrapes so far
  std::atomic<int32_t> load{0};        // running + waiting
  std::atomic<int32_t> waiting{0};
  std::atomic<float> kv_usage{-1};
  std::atomic<uint64_t> loras[kMaxLoras] = {};  // loraHash of adapters there; 0 = none
  std::atomic<uint64_t> failures{0};            // scrapes that failed or did not parse
  std::atomic<bool> in_flight{false};
  void store(const EngineSample& s, int64_t now_ns);
};

// The prompt in blocks, each block's hash chaining the previous one's, so equal hashes at block
// i mean equal prompts up to its end. Chat messages are rendered in order (role, a newline, the
// content's text, a newline), completions' prompt strings and embeddings' inputs likewise. Only
// full blocks count; at most out.size() are hashed (bounded work for any prompt). Returns the
// number written.
size_t promptBlockHashes(const simdjson::dom::element& body, size_t block_bytes,
                         std::span<uint64_t> out);

// An approximate, bounded index of which endpoints were last sent which prompt blocks, shared by
// every worker of the gateway for one model. A fixed table of block hashes, each with a bit per
// endpoint slot (64 slots); lock-free: entries are atomics, races between workers can lose or mix
// an update (a misroute at worst, never a crash). A full probe window overwrites its oldest entry
// (counted).
class PrefixIndex {
 public:
  explicit PrefixIndex(size_t entries);
  // For each slot set in `slots`, the number of leading blocks recorded for it (matched[slot]);
  // stops at the first block no candidate has.
  void match(std::span<const uint64_t> blocks, uint64_t slots, uint16_t matched[64]) const;
  void record(std::span<const uint64_t> blocks, int slot, uint32_t tick);
  // A stable slot for an endpoint key (the control thread, when a table is built); -1 when the
  // 64 slots are taken.
  int slotFor(const std::string& endpoint_key);
  // Whether these endpoints all have or can get a slot (else a fresh index serves them: the slots
  // of endpoints long gone are never reused, their bits would mislead).
  bool fits(const std::vector<std::string>& endpoint_keys);
  uint64_t overwrites() const { return overwrites_.load(std::memory_order_relaxed); }
  size_t capacity() const { return mask_ + 1; }

 private:
  static constexpr size_t kProbe = 4;
  struct Entry {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> slots{0};
    std::atomic<uint32_t> tick{0};
  };
  std::unique_ptr<Entry[]> entries_;
  size_t mask_ = 0;
  std::atomic<uint64_t> overwrites_{0};
  std::mutex slots_mu_;
  std::unordered_map<std::string, int> slots_;
};

// One candidate as the engine scorer sees it.
struct EngineCandidate {
  uint32_t index = 0;  // the endpoint's index in the route table
  int slot = -1;       // its prefix-index slot (-1: none)
  bool known = false;  // fresh signals
  double load = 0;     // running + waiting (+ what this worker sent since the scrape)
  double waiting = 0;
  double kv_usage = 0;   // 0..1
  bool lora = false;     // the adapter asked for is there
  double ewma_s = 0;     // this worker's latency estimate (0 = none)
  uint64_t session = 0;  // rendezvous weight for the session (0: no session)
};

// Why the scorer chose what it chose (tests, metrics).
struct EngineChoice {
  int position = -1;      // in the candidates; -1 when none
  uint16_t matched = 0;   // prefix blocks the chosen endpoint held
  bool filtered = false;  // every candidate was past a filter (all were considered)
};

// Picks the candidate with the highest weighted score (docs/routing.md "Scorers"); ties go to a
// random one. `matched[slot]`: leading prompt blocks per slot (PrefixIndex::match); `blocks`: the
// prompt's block count. `policy: round_robin` takes the `*turn`-th of the endpoints the filters
// leave and advances it (one counter per route, shared by the workers); `random` has no scorer,
// so every one ties.
EngineChoice pickEngineCandidate(const EngineRoutingConfig& cfg,
                                 std::span<const EngineCandidate> candidates,
                                 const uint16_t matched[64], size_t blocks, std::mt19937_64& rng,
                                 std::atomic<uint64_t>* turn = nullptr);

// Flow control (docs/routing.md "Flow control"): priority classes, most urgent first.
enum class Priority : uint8_t { kCritical = 0, kStandard = 1, kBatch = 2, kSheddable = 3 };
inline constexpr int kPriorities = 4;
bool parsePriority(std::string_view name, Priority& out);
std::string_view priorityName(Priority p);

// One worker's wait queue for one model. The next admitted is the most urgent priority's; within
// it, the fairness key (team or user) with the fewest tokens admitted so far goes first (so a team
// sending many long prompts does not starve one sending a few short ones), then arrival order. A
// key that starts waiting after a pause starts at the queue's virtual time (start-time fair
// queuing): no credit for having been away. Not thread-safe (one worker).
class FlowQueue {
 public:
  struct Waiter {
    Priority priority = Priority::kStandard;
    std::string key;  // fairness key ("" = none)
    double cost = 1;  // tokens it may use (prompt estimate + max tokens)
    uint64_t seq = 0;
    bool admitted = false;
    bool shed = false;
    void* wake = nullptr;  // the waiter's timer (the caller's)
  };
  size_t size() const { return waiters_.size(); }
  void push(Waiter* w);
  void remove(Waiter* w);
  // The next to admit (null when empty); popNext() removes it and counts its cost to its key.
  Waiter* next() const;
  Waiter* popNext();
  // When the queue is full and `newcomer` (not queued) arrives: the waiter to shed in its place,
  // the one that would be served last — the least urgent; within it, the key served the most
  // (a heavy team's, not a light newcomer's); then the newest — or null when that is the newcomer.
  Waiter* shedFor(const Waiter& newcomer) const;
  size_t count(Priority p) const { return by_priority_[static_cast<int>(p)]; }

 private:
  // What w's key has been served (a key with nothing queued: from the virtual time on).
  double servedOf(const Waiter& w, bool queued) const;
  std::vector<Waiter*> waiters_;
  mutable std::unordered_map<std::string, double> served_;
  double vtime_ = 0;  // the served count at the start of the last admitted waiter's cost
  size_t by_priority_[kPriorities] = {};
  uint64_t seq_ = 0;
};

}  // namespace infera::gateway
