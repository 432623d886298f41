#pragma once
// Gateway internals: token usage read from a backend's answer, in place and without parsing the
// whole answer: the top-level "usage" object of a JSON answer, or of each event of an SSE stream
// (where usage the client did not ask for is also removed). Pure functions of their inputs; the
// proxy holds one UsageScan per exchange. Not thread-safe.

#include <cstdint>
#include <string>
#include <string_view>

namespace infera::gateway {

struct UsageScan {
  // Set before the answer: usage the gateway asked the backend for and the client did not.
  bool strip_final_usage = false;  // the usage-only final chunk, and "usage" members, are removed
  bool strip_continuous = false;   // per-chunk usage is nulled in chunks that carry a choice
  // An API whose tokens are all input (embeddings, rerank, score): what the usage counts as
  // completion (a total beyond the prompt) is prompt.
  bool input_only = false;
  // Read from the answer.
  bool seen = false;  // a usage object with prompt_tokens or total_tokens was read
  int64_t prompt = 0;
  int64_t completion = 0;
  int64_t content_events = 0;  // SSE events that carry a choice
  std::string sse_buf;         // the partial SSE event kept between pieces
};

// Reads the top-level "usage" object of a JSON answer (keys compared as written), if any.
void readUsage(UsageScan& s, std::string_view json);
// Reads prompt_tokens, completion_tokens and total_tokens (non-negative integers) from a usage
// object; `s` is left as it was unless prompt_tokens or total_tokens is there.
void readUsageObject(UsageScan& s, std::string_view usage);
// Reads usage from the whole SSE events in `piece` (buffering a partial one in s.sse_buf); with
// `out`, appends the events the client should see (usage it did not ask for removed).
void scanSse(UsageScan& s, std::string_view piece, std::string* out);

}  // namespace infera::gateway
