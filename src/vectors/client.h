#pragma once
// A client of the vector index's Qdrant REST API (and of an OpenAI-shaped /v1/embeddings), over
// HTTP only: what `infera vectors ...` uses, and what a program that loads or embeds files links.
//
//   vectors::ClientConfig c;
//   c.url = "http://127.0.0.1:8080";
//   vectors::VectorsClient client(c);
//   INFERA_RETURN_IF_ERROR(client.createCollection("docs", {.dim = 768}));
//   INFERA_ASSIGN_OR_RETURN(auto hits, client.call("POST", "/collections/docs/points/query",
//   body));
//
// Threads: every method may be called from any thread at once (each call has its own connection).
// Errors: the API's own message (`status.error` of Qdrant's envelope, `error.message` of an
// OpenAI error) with a code from the HTTP status (400 kInvalidArgument, 401 kUnauthenticated,
// 403 kPermissionDenied, 404 kNotFound, 409 kAlreadyExists, 422 kFailedPrecondition, 429
// kResourceExhausted, 5xx kUnavailable); kUnavailable "cannot reach ..." when no answer came.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace infera::vectors {

// Retries of one call on 429, 500, 502, 503, 504 and on no answer at all (refused, reset, timed
// out): `retry-after` (seconds) or `retry-after-ms` is waited when the answer has one, else an
// exponential back-off (base_delay, doubling, at most max_delay, with jitter of up to a quarter).
struct RetryPolicy {
  int max_attempts = 8;  // tries in total (1 = no retry)
  std::chrono::milliseconds base_delay{200};
  std::chrono::milliseconds max_delay{10'000};
  // How a wait is done (tests record instead of sleeping). Empty: std::this_thread::sleep_for.
  std::function<void(std::chrono::milliseconds)> sleep;
};

// One HTTP exchange's outcome as the retry logic sees it (status 0: no answer; `error` says why).
struct HttpAnswer {
  int status = 0;
  std::string body;
  std::string retry_after;     // the header's value, "" when absent
  std::string retry_after_ms;  // likewise
  std::string error;
};

// Runs `attempt` until it answers something not retryable or the tries are used up; returns the
// last answer. `retries` (optional) counts the retries made.
HttpAnswer callWithRetry(const RetryPolicy& policy, const std::function<HttpAnswer()>& attempt,
                         int* retries = nullptr);
// The wait before retry number `retry` (0-based) after `answer`, as callWithRetry computes it;
// `jitter` in [0, 1) picks the jitter.
std::chrono::milliseconds retryDelay(const RetryPolicy& policy, const HttpAnswer& answer, int retry,
                                     double jitter);

struct ClientConfig {
  std::string url = "http://127.0.0.1:8080";   // the data port (with path_prefix, if any)
  std::string api_key;                         // sent as `api-key` (Qdrant's header)
  std::chrono::milliseconds timeout{120'000};  // per try
  RetryPolicy retry;
};

struct CollectionSpec {
  size_t dim = 0;
  std::string distance = "Cosine";  // Cosine | Euclid | Dot
  int m = 0;                        // 0: the server's default
  int ef_construct = 0;             // 0: the server's default
  bool int8 = false;                // scalar int8 quantization
};

class VectorsClient {
 public:
  explicit VectorsClient(ClientConfig config);

  // One call of the Qdrant API: `path` after the base URL ("/collections/x"), `body` JSON text or
  // empty. Returns the envelope's `result`. Retried per the policy.
  Result<nlohmann::json> call(const std::string& method, const std::string& path,
                              const std::string& body = {}) const;

  Status createCollection(const std::string& name, const CollectionSpec& spec) const;
  // kNotFound when there is none of that name.
  Status deleteCollection(const std::string& name) const;
  Result<std::vector<std::string>> listCollections() const;
  // GET /collections/{name}: points_count, config.params.vectors.{size,distance}, ...
  Result<nlohmann::json> collectionInfo(const std::string& name) const;
  // GET /collections/{name}/stats (Infera's): points, slots, index_bytes, mean_degree, ...
  Result<nlohmann::json> collectionStats(const std::string& name) const;
  // PUT /collections/{name}/points?wait=true with `points_body` ({"points":[...]}): idempotent by
  // id, so a retried or replayed batch writes each point once.
  Status upsert(const std::string& name, const std::string& points_body) const;
  // The retries made by every call so far (progress displays).
  int64_t retries() const;

  const ClientConfig& config() const { return config_; }

 private:
  ClientConfig config_;
  mutable std::atomic<int64_t> retries_{0};
};

// `s` percent-encoded for one path segment (a collection name).
std::string pathSegment(const std::string& s);

// The Status for an HTTP answer that is not a success: the API's message (Qdrant or OpenAI error
// shapes, else the body's start) with a code from the status.
Status statusFromAnswer(const HttpAnswer& answer, const std::string& what);

}  // namespace infera::vectors
