#pragma once
// Private to the gateway: the per-worker data-plane handler. Lives on one event loop; holds that
// worker's routing snapshot, endpoint latency/in-flight state and upstream connection pools.

#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gateway/governance.h"
#include "gateway/routes.h"
#include "net/server.h"
#include "obs/access_log.h"

namespace simdjson::dom {
class parser;
}

namespace infera::gateway {

struct WorkerEndpoint {
  double ewma_s = 0;  // EWMA of time to response head (connect time excluded)
  int64_t sampled_ns = 0;  // when ewma_s was last updated
  int inflight = 0;
  std::unique_ptr<net::ConnectionPool> pool;
};

class ProxyHandler final : public net::HttpHandler {
 public:
  using StateVector = std::vector<std::shared_ptr<WorkerEndpoint>>;
  ProxyHandler(int shard, net::asio::io_context& ctx, GatewayMetrics& metrics, obs::AccessLog* access_log,
               Governance* governance = nullptr);
  ~ProxyHandler() override;

  // Swaps the routing snapshot (on this worker's loop). Requests in flight keep theirs.
  void setTable(std::shared_ptr<const RouteTable> table);
  // Swaps the key/team snapshot (on this worker's loop).
  void setGovernance(std::shared_ptr<const GovSnapshot> snapshot);
  net::Task<void> handle(net::HttpRequest& request, net::ResponseWriter& writer) override;

 private:
  struct Exchange;
  net::Task<void> handleOpenAi(Exchange& x);
  net::Task<void> handleKServe(Exchange& x);
  net::Task<void> forward(Exchange& x, const std::vector<uint32_t>& candidates);
  net::Task<void> sendError(Exchange& x, int status, std::string_view message, std::string_view type,
                            std::string_view code);
  int pick(const RouteTable& table, const StateVector& state, const std::vector<uint32_t>& candidates,
           std::span<const uint32_t> tried, int64_t now_ns);
  void recordFailure(const RouteTable& table, const Endpoint& ep, int64_t now_ns);
  void recordSuccess(const Endpoint& ep, int64_t now_ns);
  void finishExchange(Exchange& x);
  // Governance: false when it answered the request itself (401/403/429 or a cache hit).
  net::Task<bool> authenticate(Exchange& x);
  net::Task<bool> admit(Exchange& x);
  void finishGovernance(Exchange& x);
  // Reads usage from whole SSE events in `piece` (buffering partial ones); with `out`, writes the
  // events the client should see (usage the client did not ask for removed).
  void scanSse(Exchange& x, std::string_view piece, std::string* out);
  void readUsage(Exchange& x, std::string_view json);
  void readUsageObject(Exchange& x, std::string_view usage);
  void buildUpstreamBody(Exchange& x, const Deployment& dep, std::string_view& body);
  std::span<const net::HttpHeader> responseHeaders(Exchange& x, net::HttpHeader& rid);

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
  std::unique_ptr<GovWorker> gov_;
};

}  // namespace infera::gateway
