#pragma once
// A model-server emulator: vLLM-like OpenAI API (chat, completions, embeddings, models; SSE
// streaming with time-to-first-token and per-token latency; usage incl. the final
// stream_options.include_usage chunk and vLLM's continuous_usage_stats) and the KServe v2 REST
// surface (health, model metadata/ready, infer). Faults can be injected at start and changed at
// run time (thread-safe) for tests. It runs on its own event loops: as `infera emulate`, or
// in-process as a gateway backend of type `emulator`, or inside tests.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "net/tls.h"

namespace infera::emulator {

struct FaultConfig {
  double error_rate = 0;  // share of requests answered with error_status
  int error_status = 500;
  int64_t added_latency_ms = 0;  // before anything is sent
  double hang_rate = 0;          // share of requests never answered (until the client leaves)
  double disconnect_rate = 0;    // share of streams cut (connection closed) mid-stream
  int disconnect_after_tokens = 3;
};

// The engine model (docs/emulator.md "Engine mode"): one emulated endpoint behaves like one vLLM
// engine: a scheduler step loop with continuous batching and chunked prefill, a paged KV cache
// with automatic prefix caching (LRU eviction of freed blocks, preemption with recompute), LoRA
// slots, and vLLM's metrics on /metrics. Off (the simple timed mode) unless `enabled`.
struct EngineConfig {
  bool enabled = false;
  int block_size = 16;                // tokens per KV block
  int num_gpu_blocks = 29205;         // KV capacity = num_gpu_blocks x block_size tokens
  int max_num_seqs = 1024;            // sequences in one step
  int max_num_batched_tokens = 8192;  // tokens in one step (chunked prefill)
  int max_model_len = 32768;          // prompt + max_tokens; longer requests are refused (400)
  bool enable_prefix_caching = true;
  // Step time in ms = step_base_ms + prefill_ms_per_token x prefill tokens computed +
  // decode_ms_per_seq x decoding sequences + kv_ms_per_ktoken x context tokens attended / 1000,
  // plus lora_load_ms per adapter loaded in the step. The defaults are BLIS's fitted profile of
  // Llama-3.1-8B-Instruct on one H100 under vLLM 0.8.4 (docs/emulator.md "Calibration").
  double step_base_ms = 5.7527;
  double prefill_ms_per_token = 0.01725;
  double decode_ms_per_seq = 0.006;
  double kv_ms_per_ktoken = 0;
  // Multiplies every step time (0.1 runs the engine ten times faster than the profile).
  double time_scale = 1.0;
  // LoRA: adapters served (a request names one as its model), GPU slots, load time per swap-in.
  std::vector<std::string> lora_adapters;
  int max_loras = 1;
  double lora_load_ms = 20.0;
  std::string served_model_name;  // the model_name label of the metrics; default: first model
};

struct EmulatorConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  int workers = 1;
  std::vector<std::string> models = {"emulated-model"};
  int64_t ttft_ms = 0;          // time to first token
  double token_ms = 0;          // per-token latency after the first
  int default_max_tokens = 16;  // when the request has no max_tokens
  int embedding_dim = 16;
  uint64_t seed = 42;
  // Completions remembered by x-request-id for usageFor() (tests compare the gateway's usage
  // records with them); 0 keeps none. Off by default: at ~200 B each, a long-running quickstart
  // would otherwise grow by the ledger's size.
  size_t usage_ledger = 0;
  FaultConfig faults;
  EngineConfig engine;
  std::optional<net::TlsServerConfig>
      tls;  // serve HTTPS (an https:// backend for tests and benchmarks)
};

// Reads an emulator mapping (used by `infera emulate -c` and gateway backends of type emulator).
void readEmulatorConfig(ConfigReader& r, EmulatorConfig& cfg);

// Run-time fault settings; every field is read per request.
struct FaultControl {
  std::atomic<double> error_rate{0};
  std::atomic<int> error_status{500};
  std::atomic<int64_t> added_latency_ms{0};
  std::atomic<double> hang_rate{0};
  std::atomic<double> disconnect_rate{0};
  std::atomic<int> disconnect_after_tokens{3};
  std::atomic<int64_t> ttft_ms{0};
  std::atomic<double> token_ms{0};
  void set(const FaultConfig& f);
};

struct EmulatorStats {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> completed_streams{0};
  std::atomic<uint64_t> aborted_streams{0};  // the client left mid-stream
  std::atomic<uint64_t> injected_errors{0};
  std::atomic<uint64_t> completion_tokens{0};
  std::atomic<int64_t> active_streams{0};
};

// What one completion request produced, by the x-request-id it came with (tests compare the
// gateway's usage records with it).
struct RequestUsage {
  int prompt_tokens = 0;
  int completion_tokens = 0;  // tokens fully written to the client
  bool completed = false;     // false: the client left (or the stream was cut) before the end
};

class Emulator {
 public:
  static Result<std::unique_ptr<Emulator>> start(const EmulatorConfig& config);
  virtual ~Emulator() = default;
  virtual uint16_t port() const = 0;
  virtual std::string url() const = 0;  // http://127.0.0.1:PORT (https:// with tls)
  virtual FaultControl& faults() = 0;
  virtual const EmulatorStats& stats() const = 0;
  // The last `usage_ledger` completions that carried an x-request-id (none by default).
  virtual std::optional<RequestUsage> usageFor(const std::string& request_id) const = 0;
  // Graceful stop (drain up to timeout), then the loops stop. Also done by the destructor.
  virtual void stop() = 0;
};

// Deterministic token text used by the emulator: token i of a completion.
std::string_view emulatedToken(int i);
// The emulator's prompt token estimate for a text (whitespace-separated words, at least 1).
int estimateTokens(std::string_view text);

}  // namespace infera::emulator
