#pragma once
// Gateway internals: the per-worker data plane. Lives on one event loop (its router's routes call
// it); holds that worker's routing snapshot, endpoint latency/in-flight state and upstream pools.

#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "access/access.h"
#include "gateway/internal/routes.h"
#include "gateway/observer.h"
#include "net/server.h"
#include "obs/access_log.h"

namespace simdjson::dom {
class parser;
}

namespace infera::gateway {

struct WorkerEndpoint {
  double ewma_s = 0;       // EWMA of time to response head (connect time excluded)
  int64_t sampled_ns = 0;  // when ewma_s was last updated
  // This worker's slot of the endpoint's shared view (set with each table): inflight and ewma_s
  // are mirrored there for the admin API.
  EndpointShared::WorkerView* view = nullptr;
  int inflight = 0;
  int batch_inflight = 0;  // of those, batch work (Endpoint::max_batch_per_worker)
  std::unique_ptr<net::ConnectionPool> pool;
  // Engine-aware routing: requests this worker sent since the engine's last scrape it saw (the
  // scraped queue does not count them yet).
  uint32_t seen_seq = 0;
  int sent_since_scrape = 0;
};

class ProxyHandler {
 public:
  using StateVector = std::vector<std::shared_ptr<WorkerEndpoint>>;
  // `access`: this loop's access worker (null: no access control).
  // `observer`: where shadow outcomes and captured inferences go (null: none are made).
  ProxyHandler(int shard, net::asio::io_context& ctx, GatewayMetrics& metrics,
               obs::AccessLog* access_log, access::AccessWorker* access,
               InferenceObserver* observer = nullptr);
  ~ProxyHandler();

  // Swaps the routing snapshot (on this worker's loop). Requests in flight keep theirs.
  void setTable(std::shared_ptr<const RouteTable> table);

  // The APIs the data routes lead to (gateway.cc registers them).
  net::Task<void> handleModels(net::HttpRequest& req, net::ResponseWriter& w);  // GET /v1/models
  // POST /v1/chat/completions, /v1/completions, /v1/embeddings
  net::Task<void> handleOpenAi(net::HttpRequest& req, net::ResponseWriter& w);
  net::Task<void> handleKServeMeta(net::HttpRequest& req,
                                   net::ResponseWriter& w);  // /v2, /v2/health/*
  net::Task<void> handleKServe(net::HttpRequest& req,
                               net::ResponseWriter& w);  // /v2/models/{model}/...
  // POST /v1/messages/count_tokens (Anthropic): the gateway's estimate of the input tokens.
  net::Task<void> handleCountTokens(net::HttpRequest& req, net::ResponseWriter& w);
  // A data-port request no route takes: 404, or 405 with the methods `allow`ed.
  net::Task<void> unmatched(net::HttpRequest& request, net::ResponseWriter& writer, int status,
                            std::string allow);

 private:
  struct Exchange;
  struct Failure;
  struct Served;
  void begin(Exchange& x);
  net::Task<void> notReady(Exchange& x);
  // Sends the request to one of `candidates` (retrying on others), relays the answer.
  net::Task<void> forward(Exchange& x, const std::vector<uint32_t>& candidates);
  // The steps of forward: a deployment's own limits (false: full, `f` says why), one try at an
  // endpoint (the response head, or why not), relaying the answer, and the answer when no try
  // got one.
  net::Task<bool> reserveDeployment(Exchange& x, const Deployment& dep, Failure& f);
  net::Task<Result<const net::ClientResponseHead*>> tryEndpoint(
      Exchange& x, const Endpoint& ep, WorkerEndpoint& ws,
      std::unique_ptr<net::UpstreamConnection>& conn, net::Deadline total);
  net::Task<void> relay(Exchange& x, const Endpoint& ep, WorkerEndpoint& ws,
                        net::UpstreamConnection& conn, const net::ClientResponseHead& h,
                        net::Deadline total, bool& keep_conn);
  net::Task<void> answerUnserved(Exchange& x, const Failure& f);
  // Anthropic's Messages and OpenAI's Responses (proxy_translate.cc): the body read and
  // translated to a chat completion (false: answered with an error; `count_only`: Messages'
  // max_tokens not required), the answer relayed translated, and a chat answer (or a backend's
  // error) as the API's answer.
  net::Task<bool> readTranslated(Exchange& x, bool count_only);
  net::Task<void> relayTranslated(Exchange& x, const Endpoint& ep, net::UpstreamConnection& conn,
                                  const net::ClientResponseHead& h, net::Deadline total,
                                  bool& keep_conn);
  // `status` becomes 502 when a 200 answer is not a chat completion.
  std::string translatedAnswer(Exchange& x, int& status, std::string_view chat);
  // The client left: the upstream call is dropped and the request counted as aborted.
  void clientLeft(Exchange& x, net::UpstreamConnection* conn);
  net::Task<void> sendError(Exchange& x, int status, std::string_view message,
                            std::string_view type, std::string_view code);
  // `x`: the request when its route is engine-aware (null: latency balancing).
  int pick(const RouteTable& table, const StateVector& state,
           const std::vector<uint32_t>& candidates, std::span<const uint32_t> tried, int64_t now_ns,
           Exchange* x = nullptr);
  int pickEngine(Exchange& x, const RouteTable& table, const StateVector& state,
                 const std::vector<uint32_t>& candidates, std::span<const uint32_t> tried,
                 int64_t now_ns);
  // The prompt's prefix blocks of an engine-aware route's request, read from its one parse.
  void hashPrompt(Exchange& x);
  // Flow control: true when the request may go on (now or after waiting), false when it was
  // answered (429 past the queue deadline, shed, or the client left).
  net::Task<bool> waitForRoom(Exchange& x);
  // The request's priority class (its key's, team's, user's and x-infera-priority's: docs/
  // routing.md); false when the header names no class.
  bool readPriority(Exchange& x);
  // Where the route has flow control (and `flow`: OpenAI routes) or a batch cap: reads the
  // priority, then waits for room, or turns batch work away past max_batch_share. True when the
  // request may go on; false when it was answered.
  net::Task<bool> prioritize(Exchange& x, const std::vector<uint32_t>& endpoints, bool flow);
  // Batch work `endpoints` may take now under their deployments' max_batch_share.
  int batchRoom(const RouteTable& table, const StateVector& state,
                const std::vector<uint32_t>& endpoints, int64_t now_ns);
  // Endpoints of `route` with room now (eligible and, when their signals are known, under the
  // filters), less the waiters admitted but not sent yet.
  int roomFor(const RouteTable& table, const StateVector& state, const Route& route,
              int64_t now_ns);
  struct FlowState;
  // Admits waiters of `model` while its endpoints have room; arms the queue's tick while any wait.
  void dispatch(const std::string& model);
  obs::Counter* flowCounter(const Route& route, Priority p, std::string_view team,
                            std::string_view outcome);
  void recordFailure(const RouteTable& table, const Endpoint& ep, int64_t now_ns);
  void recordSuccess(const Endpoint& ep, int64_t now_ns);
  void finishExchange(Exchange& x);
  void traceExchange(Exchange& x);
  // Access control: false when it answered the request itself (401/403/429 or a cache hit).
  net::Task<bool> authenticate(Exchange& x);
  net::Task<bool> admit(Exchange& x);
  void finishAccess(Exchange& x);
  void buildUpstreamBody(Exchange& x, const Deployment& dep, std::string_view& body);
  // The response's own headers: `rid` (x-request-id) alone, or first of x's extra headers (moved
  // there: the caller's copy is spent).
  std::span<const net::HttpHeader> responseHeaders(Exchange& x, net::HttpHeader& rid);
  // Experiments: the keys a request is sticky by; the per-arm metrics, data capture and the
  // shadow copy once the client has its answer.
  RequestKeys requestKeys(Exchange& x, const Route& route);
  void applyTargets(Exchange& x, const Targets& t);
  void finishExperiment(Exchange& x, double seconds);
  void capture(Exchange& x, double seconds);
  struct ShadowJob;
  void startShadow(Exchange& x, double seconds);
  net::Task<void> runShadow(std::unique_ptr<ShadowJob> job);

  int shard_;
  net::asio::io_context& ctx_;
  GatewayMetrics& metrics_;
  obs::AccessLog* access_log_;
  std::shared_ptr<const RouteTable> table_;
  // Parallel to table_->endpoints; swapped together with it, and captured by each request with
  // its table so a retry after a reload still indexes the matching state.
  std::shared_ptr<const StateVector> state_;
  std::unordered_map<std::string, std::shared_ptr<WorkerEndpoint>> state_by_key_;
  std::mt19937_64 rng_;
  std::unique_ptr<simdjson::dom::parser> parser_;
  obs::RequestIdGenerator ids_;
  std::string rewritten_body_;
  std::unique_ptr<net::asio::steady_timer> flush_timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for the flush timer's callback
  access::AccessWorker* access_;
  InferenceObserver* observer_;
  // Shadow requests in flight on this worker, by shadow route (its per-worker cap).
  std::unordered_map<std::string, int, TransparentStringHash, std::equal_to<>> shadow_inflight_;
  // Prefix-block buffers (kMaxPrefixBlocks each) lent to requests of engine-aware routes and
  // taken back when they end: no allocation per request once as many exist as run at once.
  std::vector<std::unique_ptr<uint64_t[]>> block_buffers_;
  // Flow control: this worker's wait queue per model, and its per-team counters (looked up only by
  // requests that wait).
  std::unordered_map<std::string, std::unique_ptr<FlowState>, TransparentStringHash,
                     std::equal_to<>>
      flow_;
  std::unordered_map<std::string, obs::Counter*, TransparentStringHash, std::equal_to<>>
      flow_counters_;
};

}  // namespace infera::gateway
