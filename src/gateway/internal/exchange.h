#pragma once
// The gateway's proxy internals shared by its files (proxy.cc: the request's path through
// routing, access control, forwarding and relaying; proxy_flow.cc: flow control;
// proxy_experiments.cc: experiments, capture and shadows; proxy_translate.cc: Anthropic's Messages
// and OpenAI's Responses API): one exchange's state and the helpers they share.

#include <simdjson.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/internal/anthropic.h"
#include "gateway/internal/proxy.h"
#include "gateway/internal/request_scan.h"
#include "gateway/internal/responses.h"
#include "gateway/internal/usage_scan.h"

namespace infera::gateway {

// Which API the client speaks: OpenAI's (as it is), or one translated to chat completions
// (proxy_translate.cc): Anthropic's Messages, OpenAI's Responses.
enum class ClientApi : uint8_t { kOpenAi, kMessages, kResponses };

struct ProxyHandler::Exchange {
  Exchange(net::HttpRequest& r, net::ResponseWriter& wr) : req(r), w(wr) {}
  net::HttpRequest& req;
  net::ResponseWriter& w;
  std::shared_ptr<const RouteTable> table;
  std::shared_ptr<const StateVector> state;  // matches `table`
  const Route* route = nullptr;
  const Deployment* deployment = nullptr;
  const Endpoint* endpoint = nullptr;
  int64_t start_ns = 0;
  std::string request_id;
  RequestFields fields;
  bool rewrite_model = false;
  std::string kserve_tail;  // after /v2/models/{m}
  std::string target;
  std::string body_override;
  net::UpstreamConnection* current = nullptr;
  bool client_gone = false;
  int status = 0;
  int attempts = 0;
  bool sent_upstream = false;  // a backend got the whole request (it may have read the prompt)
  bool stream = false;
  uint64_t bytes_out = 0;
  double ttfb_s = 0;
  // Access control (only when it is on).
  access::Grant grant;
  std::vector<net::HttpHeader> extra;  // x-request-id first, then rate-limit and cache headers
  UsageScan usage;  // the backend's usage, and what of it the client must not see
  double ttft_s = 0;
  bool aborted = false;
  bool capture = false;
  std::string sse_out;
  bool mid_event = false;  // the last bytes relayed ended inside an SSE event
  std::string resp_body;
  std::string resp_content_type;
  bool cacheable = false;
  bool cache_hit = false;
  std::string cache_key;
  // Experiments (registry routes).
  const Route* split = nullptr;  // the experiment route an arm was chosen from
  const Arm* arm = nullptr;
  const Route* shadow = nullptr;  // mirror after answering
  bool want_usage = false;        // read usage from the answer without access control too
  bool compare = false;           // deterministic: keep the primary's output for the shadow's
  std::string primary_output;
  bool keep_answer = false;  // data capture: keep the answer's first bytes
  std::string answer;
  // Engine-aware routing: the prompt's prefix block hashes (a buffer lent by the handler).
  std::unique_ptr<uint64_t[]> blocks;
  size_t n_blocks = 0;
  // Flow control: the timer the request waits on in the gateway's queue (null when not waiting).
  net::asio::steady_timer* flow_timer = nullptr;
  // Its priority class (read when the route has flow control or a batch cap), and whether that
  // makes it batch work (max_batch_share).
  Priority priority = Priority::kStandard;
  bool batch_work = false;
  // Tracing (req.trace, when the request is traced): the current upstream attempt's span.
  size_t upstream_span = 0;
  // Anthropic's Messages API: the model as the client named it, and the stream's translator.
  ClientApi api = ClientApi::kOpenAi;
  std::string client_model;
  std::string client_path;  // the path the client called (the access log's), before translation
  nlohmann::json client_request;  // Responses: the request, whose fields the answer echoes
  std::unique_ptr<anthropic::StreamTranslator> messages_stream;
  std::string messages_out;
};

struct ProxyHandler::FlowState {
  FlowQueue queue;
  int pending = 0;        // admitted waiters not yet on their way to an endpoint
  int pending_batch = 0;  // of those, batch work
  std::unique_ptr<net::asio::steady_timer> tick;
  bool ticking = false;
};

// Each API's coroutine owns its exchange (one coroutine frame less per request than a dispatcher
// in front of them): this guard starts it and, however the coroutine ends, finishes it.
struct ProxyHandler::Served {
  ProxyHandler& h;
  Exchange& x;
  Served(ProxyHandler& handler, Exchange& exchange) : h(handler), x(exchange) { h.begin(x); }
  ~Served() {
    h.finishExchange(x);
    h.metrics_.in_flight->add(h.shard_, -1);
  }
};

namespace proxy_detail {

// How a request's tokens are reserved and billed, by its path: generation (a prompt and a
// completion: chat, completions, messages), input only (embeddings, rerank, score), or none
// (tokenize, detokenize, KServe).
enum class TokenUse : uint8_t { kNone, kInput, kGeneration };
inline TokenUse tokenUse(std::string_view path) {
  if (path == "/v1/embeddings" || path.ends_with("/rerank") || path == "/rerank" ||
      path == "/v1/score" || path == "/score") {
    return TokenUse::kInput;
  }
  if (path == "/tokenize" || path == "/detokenize") return TokenUse::kNone;
  return path.starts_with("/v1/") ? TokenUse::kGeneration : TokenUse::kNone;
}

constexpr double kEwmaAlpha = 0.2;
// An endpoint's latency estimate halves for every second it goes without a new sample, so one
// slow outlier cannot keep an endpoint from being tried again for ever.
constexpr double kEwmaHalfLifeNs = 1e9;

inline net::Deadline deadlineAfter(int64_t ms) {
  return net::SteadyClock::now() + std::chrono::milliseconds(ms);
}

// Whether `s` ends at an SSE event boundary (a blank line).
inline bool endsEvent(std::string_view s) { return s.ends_with("\n\n") || s.ends_with("\r\n\r\n"); }

// What a deterministic answer said: its "choices" (chat, completions) or "data" (embeddings),
// without the id and timestamps that differ between two answers to the same request.
inline std::string_view answerOutput(std::string_view json) {
  size_t b = 0, e = 0;
  if (findTopLevelValue(json, "choices", b, e) || findTopLevelValue(json, "data", b, e))
    return json.substr(b, e - b);
  return json;
}

// What batch work may hold of an endpoint on this worker now: its deployment's batch share, or all
// of its share of max_concurrent once no interactive request has come for batch_idle_ms.
inline int batchCap(const Endpoint& ep, int64_t now_ns) {
  if (ep.batch_idle_ns > 0 &&
      now_ns - ep.shared->interactive_ns.load(std::memory_order_relaxed) >= ep.batch_idle_ns)
    return ep.max_inflight_per_worker;
  return ep.max_batch_per_worker;
}

// An endpoint a request may go to now: healthy, not ejected, under this worker's share of its
// concurrency limit (and, for batch work, of its deployment's batch share).
inline bool available(const Endpoint& ep, const WorkerEndpoint& ws, int64_t now_ns,
                      bool batch = false) {
  return ep.shared->healthy.load(std::memory_order_relaxed) &&
         ep.shared->ejected_until_ns.load(std::memory_order_relaxed) <= now_ns &&
         ws.inflight < ep.max_inflight_per_worker &&
         (!batch || ws.batch_inflight < batchCap(ep, now_ns));
}

// How soon batch work turned away by a deployment's max_batch_share may come back.
constexpr int64_t kBatchCapRetryMs = 100;

// Whether an endpoint's engine signals are fresh; when they are, this worker's count of what it
// sent there since the scrape it last saw starts again at each new scrape.
inline bool freshSignals(const EngineSignals& sig, WorkerEndpoint& ws, int64_t now_ns,
                         int64_t stale_ns) {
  const int64_t updated = sig.updated_ns.load(std::memory_order_acquire);
  if (updated == 0 || now_ns - updated > stale_ns) return false;
  const uint32_t seq = sig.seq.load(std::memory_order_relaxed);
  if (seq != ws.seen_seq) {
    ws.seen_seq = seq;
    ws.sent_since_scrape = 0;
  }
  return true;
}

}  // namespace proxy_detail

// The proxy files' shorthands (this header is theirs alone).
using net::Deadline;
using net::HttpHeader;
using net::SteadyClock;
using net::Task;
using namespace proxy_detail;  // NOLINT(google-build-using-namespace)

}  // namespace infera::gateway
