#pragma once
// Private to the emulator. The model of one vLLM engine (V1 scheduler), on a virtual clock in
// microseconds so tests drive it step by step without sockets. Single-threaded: the emulator
// owns one per endpoint and calls it from one loop.
//
// Scheduling follows vLLM V1: each step first continues the running sequences in order (a decode
// needs one token, a prompt still being prefilled takes what is left of the step's token budget),
// preempting the most recently admitted running sequence when the KV cache has no block left (its
// blocks are freed and it is recomputed later, prefix hits included); then, if nothing was
// preempted, admits waiting requests in order while the budget, max_num_seqs and free blocks
// allow. A waiting request first takes the longest run of its full prompt blocks already in the
// cache (at least one token is always computed). A block's hash chains its parent's hash, its
// tokens and the LoRA adapter, so equal prefixes share blocks. Freed blocks stay cached until
// reused, oldest first (a request's last block before its first, as vLLM frees them reversed).

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "emulator/emulator.h"

namespace infera::emulator {

using BlockHash = uint64_t;

// The hash of a full block: chains the parent's hash (0 for the first block), the adapter and
// the block's token ids. Never 0.
BlockHash blockHash(BlockHash parent, int lora, const uint32_t* tokens, int n);

// The emulator's tokenizer (docs/emulator.md "Tokens"): a token per whitespace-separated word,
// its id the word's 32-bit FNV-1a hash; text with no word is one token (id of the empty word).
void appendTokens(std::string_view text, std::vector<uint32_t>& out);
// The token id of one word (the same rule).
uint32_t tokenId(std::string_view word);

// What a finished step did for one request.
struct StepOutput {
  uint64_t id = 0;
  bool token = false;     // one new output token (the first one is the time to first token)
  bool finished = false;  // reached max_tokens (finish_reason "length" or "stop")
  int64_t arrival_us = 0;
  int64_t first_scheduled_us = -1;
  int num_output = 0;  // output tokens so far
};

// A KV cache event, as vLLM publishes them (BlockStored / BlockRemoved / AllBlocksCleared).
struct KvEvent {
  enum class Kind { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  BlockHash hash = 0;
  BlockHash parent = 0;  // stored: the parent block's hash (0 for a first block)
  int lora = 0;
};

struct EngineCounters {
  // Prompt tokens of admitted requests and, of those, tokens found in the cache (vLLM counts
  // tokens, and leaves out the re-admission of a preempted request).
  uint64_t prefix_queries = 0;
  uint64_t prefix_hits = 0;
  uint64_t preemptions = 0;
  uint64_t evictions = 0;      // cached blocks reused for other content
  uint64_t prompt_tokens = 0;  // whole prompts (hits included), counted at the first token
  uint64_t generation_tokens = 0;
  uint64_t finished = 0;
  uint64_t lora_loads = 0;
  uint64_t steps = 0;
};

class EngineModel {
 public:
  explicit EngineModel(const EngineConfig& config);
  ~EngineModel();
  EngineModel(const EngineModel&) = delete;
  EngineModel& operator=(const EngineModel&) = delete;

  // Why a request cannot be served at all (too long for max_model_len or for the whole cache);
  // empty when it can.
  std::string refuse(size_t prompt_tokens, int max_tokens) const;
  // Queues a request (check refuse() first). lora: 0 for the base model, else 1 + the adapter's
  // index in the config. Returns its id.
  uint64_t add(std::vector<uint32_t> prompt, int max_tokens, int lora, int64_t now_us);
  // Drops a request wherever it is (the client left); its blocks are freed.
  void abort(uint64_t id);

  bool hasWork() const { return !running_.empty() || !waiting_.empty(); }
  // Plans one step at now_us; returns its duration in µs, 0 when nothing could be scheduled.
  int64_t schedule(int64_t now_us);
  // Ends the planned step at now_us: appends one output per request that produced a token or
  // finished.
  void complete(int64_t now_us, std::vector<StepOutput>& out);

  int numRunning() const { return static_cast<int>(running_.size()); }
  int numWaiting() const { return static_cast<int>(waiting_.size()); }
  // Waiting requests the last step passed over for want of a LoRA slot (vLLM's "deferred").
  int numDeferred() const { return num_deferred_; }
  // Share of KV blocks held by requests (cached-but-free blocks count as free), 0..1.
  double kvUsage() const;
  int cachedBlocks() const { return static_cast<int>(cached_.size()); }
  bool isCached(BlockHash h) const { return cached_.count(h) != 0; }
  const EngineCounters& counters() const { return counters_; }
  // Adapters (1-based ids) of running and of waiting requests; adapters loaded in GPU slots.
  std::vector<int> runningLoras() const;
  std::vector<int> waitingLoras() const;
  const std::vector<int>& loadedLoras() const { return loaded_loras_; }
  // KV events since the last call (kept only when enabled; bounded: the oldest are dropped and
  // the drop counted).
  void enableEvents(size_t max_pending) { max_events_ = max_pending; }
  std::vector<KvEvent> takeEvents();
  uint64_t droppedEvents() const { return dropped_events_; }

 private:
  struct Request;
  struct Block {
    int ref = 0;
    BlockHash hash = 0;  // 0: not cached
    BlockHash parent = 0;
    int lora = 0;
    int prev = -1;  // free-list links (in the list only while ref == 0)
    int next = -1;
    bool in_free = false;
  };
  struct Scheduled {
    uint64_t id;
    int tokens;
  };

  void freeListRemove(int b);
  void freeListPushBack(int b);
  int allocateBlock();
  void releaseBlocks(Request& r);
  bool ensureBlocks(Request& r, int tokens);
  void preempt(Request& r);
  void commitFullBlocks(Request& r);
  void hashNewBlocks(Request& r);
  bool loraSchedulable(int lora, std::vector<int>& active) const;
  double loadLora(int lora);
  void emit(KvEvent e);

  EngineConfig config_;
  std::vector<Block> blocks_;
  int free_head_ = -1;
  int free_tail_ = -1;
  int num_free_ = 0;
  std::unordered_map<BlockHash, int> cached_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;
  std::deque<Request*> waiting_;
  std::vector<Scheduled> step_;
  std::vector<int> loaded_loras_;  // least recently used first
  uint64_t next_id_ = 1;
  int num_deferred_ = 0;
  EngineCounters counters_;
  size_t max_events_ = 0;
  std::deque<KvEvent> events_;
  uint64_t dropped_events_ = 0;
};

}  // namespace infera::emulator
