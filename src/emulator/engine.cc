#include "emulator/internal/engine.h"

#include <algorithm>
#include <cmath>

#include "core/hash.h"
#include "core/status.h"

namespace infera::emulator {
namespace {

bool isSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

BlockHash blockHash(BlockHash parent, int lora, const uint32_t* tokens, int n) {
  uint64_t h = mix64(parent ^ (0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(lora) + 1)));
  for (int i = 0; i < n; ++i) h = mix64(h ^ tokens[i]);
  return h == 0 ? 1 : h;
}

uint32_t tokenId(std::string_view word) {
  uint32_t h = 2166136261u;
  for (unsigned char c : word) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

void appendTokens(std::string_view text, std::vector<uint32_t>& out) {
  const size_t before = out.size();
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && isSpace(text[i])) ++i;
    const size_t start = i;
    while (i < text.size() && !isSpace(text[i])) ++i;
    if (i > start) out.push_back(tokenId(text.substr(start, i - start)));
  }
  if (out.size() == before) out.push_back(tokenId({}));
}

struct EngineModel::Request {
  uint64_t id = 0;
  std::vector<uint32_t> tokens;  // the prompt, then each output token once produced
  size_t prompt_len = 0;
  int max_tokens = 0;
  int lora = 0;
  int num_computed = 0;  // tokens whose KV is in the cache
  int num_output = 0;
  std::vector<int> blocks;
  std::vector<BlockHash> hashes;  // of every full block of `tokens`
  int committed = 0;              // leading blocks registered in the cache (or known duplicates)
  int64_t arrival_us = 0;
  int64_t first_scheduled_us = -1;
  bool running = false;
  bool preempted = false;  // vLLM's prefix-cache counters leave re-admissions out
};

EngineModel::EngineModel(const EngineConfig& config) : config_(config) {
  INFERA_CHECK(config_.block_size > 0 && config_.num_gpu_blocks > 0);
  blocks_.resize(static_cast<size_t>(config_.num_gpu_blocks));
  for (int b = 0; b < config_.num_gpu_blocks; ++b) freeListPushBack(b);
  cached_.reserve(static_cast<size_t>(config_.num_gpu_blocks));
}

EngineModel::~EngineModel() = default;

std::string EngineModel::refuse(size_t prompt_tokens, int max_tokens) const {
  const uint64_t total = prompt_tokens + static_cast<uint64_t>(std::max(max_tokens, 0));
  if (total > static_cast<uint64_t>(config_.max_model_len)) {
    return "This model's maximum context length is " + std::to_string(config_.max_model_len) +
           " tokens. However, you requested " + std::to_string(total) + " tokens (" +
           std::to_string(prompt_tokens) + " in the messages, " + std::to_string(max_tokens) +
           " in the completion). Please reduce the length of the messages or completion.";
  }
  return {};
}

uint64_t EngineModel::add(std::vector<uint32_t> prompt, int max_tokens, int lora, int64_t now_us) {
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->tokens = std::move(prompt);
  r->prompt_len = r->tokens.size();
  r->max_tokens = std::max(max_tokens, 0);
  r->lora = lora;
  r->arrival_us = now_us;
  r->tokens.reserve(r->prompt_len + static_cast<size_t>(r->max_tokens));
  hashNewBlocks(*r);
  Request* raw = r.get();
  requests_.emplace(raw->id, std::move(r));
  waiting_.push_back(raw);
  return raw->id;
}

void EngineModel::abort(uint64_t id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request* r = it->second.get();
  if (r->running) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  }
  releaseBlocks(*r);
  requests_.erase(it);
}

void EngineModel::hashNewBlocks(Request& r) {
  const size_t bs = static_cast<size_t>(config_.block_size);
  while ((r.hashes.size() + 1) * bs <= r.tokens.size()) {
    const size_t b = r.hashes.size();
    const BlockHash parent = b == 0 ? 0 : r.hashes[b - 1];
    r.hashes.push_back(blockHash(parent, r.lora, r.tokens.data() + b * bs, config_.block_size));
  }
}

void EngineModel::freeListRemove(int b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (!blk.in_free) return;
  if (blk.prev >= 0) {
    blocks_[static_cast<size_t>(blk.prev)].next = blk.next;
  } else {
    free_head_ = blk.next;
  }
  if (blk.next >= 0) {
    blocks_[static_cast<size_t>(blk.next)].prev = blk.prev;
  } else {
    free_tail_ = blk.prev;
  }
  blk.prev = blk.next = -1;
  blk.in_free = false;
  --num_free_;
}

void EngineModel::freeListPushBack(int b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  blk.prev = free_tail_;
  blk.next = -1;
  if (free_tail_ >= 0) {
    blocks_[static_cast<size_t>(free_tail_)].next = b;
  } else {
    free_head_ = b;
  }
  free_tail_ = b;
  blk.in_free = true;
  ++num_free_;
}

void EngineModel::emit(KvEvent e) {
  if (max_events_ == 0) return;
  if (events_.size() >= max_events_) {
    events_.pop_front();
    ++dropped_events_;
  }
  events_.push_back(e);
}

std::vector<KvEvent> EngineModel::takeEvents() {
  std::vector<KvEvent> out(events_.begin(), events_.end());
  events_.clear();
  return out;
}

int EngineModel::allocateBlock() {
  const int b = free_head_;
  INFERA_CHECK(b >= 0);
  freeListRemove(b);
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.hash != 0) {
    // The least recently freed cached block gives its place to new content.
    const auto it = cached_.find(blk.hash);
    if (it != cached_.end() && it->second == b) cached_.erase(it);
    emit({KvEvent::Kind::kRemoved, blk.hash, 0, blk.lora});
    ++counters_.evictions;
    blk.hash = 0;
  }
  blk.ref = 1;
  return b;
}

bool EngineModel::ensureBlocks(Request& r, int tokens) {
  const int bs = config_.block_size;
  const int need = (tokens + bs - 1) / bs - static_cast<int>(r.blocks.size());
  if (need <= 0) return true;
  if (num_free_ < need) return false;
  for (int i = 0; i < need; ++i) r.blocks.push_back(allocateBlock());
  return true;
}

void EngineModel::releaseBlocks(Request& r) {
  // Reversed, as vLLM frees them: a request's last blocks are evicted before its prefix.
  for (auto it = r.blocks.rbegin(); it != r.blocks.rend(); ++it) {
    Block& blk = blocks_[static_cast<size_t>(*it)];
    if (--blk.ref == 0) freeListPushBack(*it);
  }
  r.blocks.clear();
  r.committed = 0;
}

void EngineModel::preempt(Request& r) {
  releaseBlocks(r);
  r.num_computed = 0;
  r.running = false;
  r.preempted = true;
  waiting_.push_front(&r);
  ++counters_.preemptions;
}

void EngineModel::commitFullBlocks(Request& r) {
  const int full = r.num_computed / config_.block_size;
  hashNewBlocks(r);
  for (int b = r.committed; b < full; ++b) {
    if (!config_.enable_prefix_caching) break;
    const BlockHash h = r.hashes[static_cast<size_t>(b)];
    const int id = r.blocks[static_cast<size_t>(b)];
    // Another block may already hold the same content (two requests prefilled it at once):
    // the first stays the cached one and this block stays private, as in vLLM.
    if (cached_.emplace(h, id).second) {
      Block& blk = blocks_[static_cast<size_t>(id)];
      blk.hash = h;
      blk.parent = b == 0 ? 0 : r.hashes[static_cast<size_t>(b - 1)];
      blk.lora = r.lora;
      emit({KvEvent::Kind::kStored, h, blk.parent, r.lora});
    }
  }
  r.committed = std::max(r.committed, full);
}

bool EngineModel::loraSchedulable(int lora, std::vector<int>& active) const {
  if (std::find(active.begin(), active.end(), lora) != active.end()) return true;
  return static_cast<int>(active.size()) < config_.max_loras;
}

double EngineModel::loadLora(int lora) {
  const auto it = std::find(loaded_loras_.begin(), loaded_loras_.end(), lora);
  if (it != loaded_loras_.end()) {
    loaded_loras_.erase(it);
    loaded_loras_.push_back(lora);
    return 0;
  }
  if (static_cast<int>(loaded_loras_.size()) >= config_.max_loras) {
    loaded_loras_.erase(loaded_loras_.begin());  // least recently used
  }
  loaded_loras_.push_back(lora);
  ++counters_.lora_loads;
  return config_.lora_load_ms;
}

int64_t EngineModel::schedule(int64_t now_us) {
  step_.clear();
  num_deferred_ = 0;
  if (!hasWork()) return 0;
  int budget = config_.max_num_batched_tokens;
  int64_t prefill_tokens = 0;
  int64_t decodes = 0;
  int64_t attended = 0;
  double lora_ms = 0;
  std::vector<int> active;
  auto account = [&](Request& r, int n) {
    const bool decode =
        r.num_output > 0 && n == 1 && static_cast<size_t>(r.num_computed) + 1 == r.tokens.size();
    if (decode) {
      ++decodes;
    } else {
      prefill_tokens += n;
    }
    attended += r.num_computed + n;
    if (r.lora != 0) {
      if (std::find(active.begin(), active.end(), r.lora) == active.end()) {
        active.push_back(r.lora);
      }
      lora_ms += loadLora(r.lora);
    }
    step_.push_back({r.id, n});
    budget -= n;
  };

  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int n = std::min(static_cast<int>(r->tokens.size()) - r->num_computed, budget);
    bool scheduled = true;
    while (!ensureBlocks(*r, r->num_computed + n)) {
      Request* victim = running_.back();
      running_.pop_back();
      preempt(*victim);
      preempted = true;
      if (victim == r) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    account(*r, n);
    ++i;
  }

  if (!preempted) {
    std::vector<Request*> skipped;
    const int bs = config_.block_size;
    while (!waiting_.empty() && budget > 0 &&
           static_cast<int>(running_.size()) < config_.max_num_seqs) {
      Request* r = waiting_.front();
      if (r->lora != 0 && !loraSchedulable(r->lora, active)) {
        // vLLM keeps it waiting, in order, until an adapter slot is free in a step.
        waiting_.pop_front();
        skipped.push_back(r);
        continue;
      }
      std::vector<int> hits;
      if (config_.enable_prefix_caching) {
        // At least one token is computed, so a fully cached prompt still recomputes its last.
        const size_t max_hit = (r->tokens.size() - 1) / static_cast<size_t>(bs);
        for (size_t b = 0; b < max_hit && b < r->hashes.size(); ++b) {
          const auto it = cached_.find(r->hashes[b]);
          if (it == cached_.end()) break;
          hits.push_back(it->second);
        }
      }
      const int cached_tokens = static_cast<int>(hits.size()) * bs;
      const int n = std::min(static_cast<int>(r->tokens.size()) - cached_tokens, budget);
      const int need = (cached_tokens + n + bs - 1) / bs - static_cast<int>(hits.size());
      int hits_free = 0;
      for (int b : hits) hits_free += blocks_[static_cast<size_t>(b)].ref == 0 ? 1 : 0;
      if (num_free_ - hits_free < need) break;  // the cache is full: it waits
      for (int b : hits) {
        Block& blk = blocks_[static_cast<size_t>(b)];
        if (blk.ref == 0) freeListRemove(b);
        ++blk.ref;
        r->blocks.push_back(b);
      }
      r->committed = static_cast<int>(hits.size());
      r->num_computed = cached_tokens;
      INFERA_CHECK(ensureBlocks(*r, cached_tokens + n));
      if (!r->preempted) {
        counters_.prefix_queries += r->tokens.size();
        counters_.prefix_hits += static_cast<uint64_t>(cached_tokens);
      }
      waiting_.pop_front();
      r->running = true;
      running_.push_back(r);
      if (r->first_scheduled_us < 0) r->first_scheduled_us = now_us;
      account(*r, n);
    }
    num_deferred_ = static_cast<int>(skipped.size());
    for (auto it = skipped.rbegin(); it != skipped.rend(); ++it) waiting_.push_front(*it);
  }
  if (step_.empty()) return 0;
  const double ms = config_.step_base_ms +
                    config_.prefill_ms_per_token * static_cast<double>(prefill_tokens) +
                    config_.decode_ms_per_seq * static_cast<double>(decodes) +
                    config_.kv_ms_per_ktoken * static_cast<double>(attended) / 1000.0 + lora_ms;
  return std::max<int64_t>(1, std::llround(ms * config_.time_scale * 1000.0));
}

void EngineModel::complete(int64_t now_us, std::vector<StepOutput>& out) {
  (void)now_us;
  if (step_.empty()) return;
  ++counters_.steps;
  for (const Scheduled& s : step_) {
    const auto it = requests_.find(s.id);
    if (it == requests_.end()) continue;  // aborted during the step
    Request& r = *it->second;
    if (!r.running) continue;
    r.num_computed += s.tokens;
    commitFullBlocks(r);
    if (static_cast<size_t>(r.num_computed) < r.tokens.size()) continue;  // a prefill chunk
    StepOutput o;
    o.id = r.id;
    o.arrival_us = r.arrival_us;
    o.first_scheduled_us = r.first_scheduled_us;
    if (r.num_output < r.max_tokens) {
      if (r.num_output == 0) counters_.prompt_tokens += r.prompt_len;
      r.tokens.push_back(tokenId(emulatedToken(r.num_output)));
      ++r.num_output;
      ++counters_.generation_tokens;
      o.token = true;
    }
    o.num_output = r.num_output;
    if (r.num_output >= r.max_tokens) {
      o.finished = true;
      ++counters_.finished;
      running_.erase(std::find(running_.begin(), running_.end(), &r));
      releaseBlocks(r);
      out.push_back(o);
      requests_.erase(it);
      continue;
    }
    out.push_back(o);
  }
  step_.clear();
}

double EngineModel::kvUsage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(config_.num_gpu_blocks);
}

std::vector<int> EngineModel::runningLoras() const {
  std::vector<int> out;
  for (const Request* r : running_) {
    if (r->lora != 0 && std::find(out.begin(), out.end(), r->lora) == out.end()) {
      out.push_back(r->lora);
    }
  }
  return out;
}

std::vector<int> EngineModel::waitingLoras() const {
  std::vector<int> out;
  for (const Request* r : waiting_) {
    if (r->lora != 0 && std::find(out.begin(), out.end(), r->lora) == out.end()) {
      out.push_back(r->lora);
    }
  }
  return out;
}

}  // namespace infera::emulator
