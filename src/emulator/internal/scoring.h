#pragma once
// The emulator's pooling and tokenizer APIs as vLLM serves them (docs/emulator.md "Rerank, score,
// tokenize"): rerank (`/rerank`, `/v1/rerank`, `/v2/rerank`), score (`/score`, `/v1/score`),
// `/tokenize` and `/detokenize`. Deterministic: a pair's score is the share of words the two
// texts have in common (Jaccard over lower-cased words), a text's tokens are its words (the
// engine mode's token ids). Each takes the parsed body and answers a JSON body, or
// kInvalidArgument naming what is wrong.

#include <simdjson.h>

#include <string>
#include <string_view>

#include "core/status.h"

namespace infera::emulator {

Result<std::string> rerankAnswer(simdjson::dom::element request, std::string_view id);
Result<std::string> scoreAnswer(simdjson::dom::element request, std::string_view id,
                                int64_t created);
Result<std::string> tokenizeAnswer(simdjson::dom::element request, int max_model_len);
Result<std::string> detokenizeAnswer(simdjson::dom::element request);

// The emulated relevance of `document` to `query`, in [0, 1].
double relevance(std::string_view query, std::string_view document);

}  // namespace infera::emulator
