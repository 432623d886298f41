#pragma once
// Private to src/scheduler/kube: calls to the Kubernetes API server over net's HTTP/1.1 client
// (keep-alive pool, TLS), with the bearer token; and watch streams read line by line. Lives on
// one event loop (not thread-safe).

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "net/client.h"

namespace infera::sched::kube {

struct ApiResponse {
  int status = 0;
  std::string body;
};

class ApiClient {
 public:
  ApiClient(net::asio::io_context& ctx, net::UpstreamAddress address, std::string token_file,
            std::chrono::milliseconds timeout);
  // One request; kUnavailable when the server could not be reached or the connection broke.
  // Any HTTP status is a response (callers decide on 4xx/5xx).
  net::Task<Result<ApiResponse>> call(std::string_view method, std::string_view target,
                                      std::string_view body = {},
                                      std::string_view content_type = "application/json");
  // A watch: sends GET `target` and calls on_line with each newline-delimited JSON object until
  // the server ends the stream (ok), on_line returns an error (that error), or the connection
  // breaks (kUnavailable). A non-200 answer is kFailedPrecondition with the status in the message
  // and *http_status set.
  net::Task<Status> stream(std::string_view target,
                           const std::function<Status(std::string_view line)>& on_line,
                           int* http_status);
  // Closes every open stream, and any still connecting (their stream() calls return).
  void abortStreams();
  // Re-reads the token file (the kubelet rotates projected tokens).
  void refreshToken();

 private:
  std::vector<net::HttpHeader> headers(std::string_view content_type) const;

  net::asio::io_context& ctx_;
  net::UpstreamAddress address_;
  std::string token_file_;
  std::string token_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<net::ConnectionPool> pool_;
  std::vector<net::UpstreamConnection*> streams_;
  uint64_t abort_generation_ = 0;  // streams started before an abortStreams() end too
};

}  // namespace infera::sched::kube
