#include "scheduler/kube/internal/api_client.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace infera::sched::kube {

ApiClient::ApiClient(net::asio::io_context& ctx, net::UpstreamAddress address,
                     std::string token_file, std::chrono::milliseconds timeout)
    : ctx_(ctx),
      address_(std::move(address)),
      token_file_(std::move(token_file)),
      timeout_(timeout),
      pool_(net::ConnectionPool::create(ctx, address_, net::PoolConfig{})) {
  refreshToken();
}

void ApiClient::refreshToken() {
  if (token_file_.empty()) return;
  std::ifstream in(token_file_);
  if (!in) return;  // keep the previous token; the server's 401 says the rest
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  token_ = std::move(t);
}

std::vector<net::HttpHeader> ApiClient::headers(std::string_view content_type) const {
  std::vector<net::HttpHeader> h;
  h.push_back({"accept", "application/json"});
  h.push_back({"user-agent", "infera-scheduler/1"});
  if (!content_type.empty()) h.push_back({"content-type", std::string(content_type)});
  if (!token_.empty()) h.push_back({"authorization", "Bearer " + token_});
  return h;
}

net::Task<Result<ApiResponse>> ApiClient::call(std::string_view method, std::string_view target,
                                               std::string_view body,
                                               std::string_view content_type) {
  const auto deadline = net::SteadyClock::now() + timeout_;
  const std::vector<net::HttpHeader> hdrs = headers(body.empty() ? "" : content_type);
  const std::string host = address_.hostHeader();
  const std::string full_target = address_.base_path + std::string(target);
  // A pooled connection the server closed meanwhile fails before any response: retried once on
  // a fresh one (the request was not processed).
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto conn = co_await pool_->acquire(deadline, /*fresh=*/attempt > 0);
    if (!conn.ok()) co_return conn.takeStatus();
    net::ClientRequest req;
    req.method = method;
    req.target = full_target;
    req.host = host;
    req.headers = hdrs;
    req.body = body;
    Status sent = co_await (*conn)->send(req, deadline);
    if (!sent.isOk()) {
      if ((*conn)->reused() && attempt == 0) continue;
      co_return sent;
    }
    auto head = co_await (*conn)->readHead(deadline);
    if (!head.ok()) {
      if ((*conn)->reused() && (*conn)->closedBeforeResponse() && attempt == 0) continue;
      co_return head.takeStatus();
    }
    ApiResponse out;
    out.status = (*head)->status;
    for (;;) {
      auto piece = co_await (*conn)->readBody(deadline);
      if (!piece.ok()) co_return piece.takeStatus();
      if (piece->empty()) break;
      out.body.append(piece->data(), piece->size());
    }
    pool_->release(std::move(*conn));
    co_return out;
  }
  co_return Status::unavailable("API server connection failed twice");
}

net::Task<Status> ApiClient::stream(std::string_view target,
                                    const std::function<Status(std::string_view)>& on_line,
                                    int* http_status) {
  // A watch lives until the server's timeoutSeconds; the deadline only bounds a stuck stream.
  const auto connect_deadline = net::SteadyClock::now() + timeout_;
  const uint64_t generation = abort_generation_;
  auto conn = co_await pool_->acquire(connect_deadline, /*fresh=*/true);
  if (!conn.ok()) co_return conn.takeStatus();
  // abortStreams() while this stream was connecting: it is aborted too.
  if (generation != abort_generation_) co_return Status::cancelled("watch aborted");
  net::UpstreamConnection* raw = conn->get();
  streams_.push_back(raw);
  struct Unregister {
    std::vector<net::UpstreamConnection*>& v;
    net::UpstreamConnection* c;
    ~Unregister() { v.erase(std::remove(v.begin(), v.end(), c), v.end()); }
  } unregister{streams_, raw};
  const std::vector<net::HttpHeader> hdrs = headers("");
  const std::string host = address_.hostHeader();
  const std::string full_target = address_.base_path + std::string(target);
  net::ClientRequest req;
  req.method = "GET";
  req.target = full_target;
  req.host = host;
  req.headers = hdrs;
  Status sent = co_await raw->send(req, connect_deadline);
  if (!sent.isOk()) co_return sent;
  const auto stream_deadline = net::SteadyClock::now() + std::chrono::hours(24);
  auto head = co_await raw->readHead(connect_deadline);
  if (!head.ok()) co_return head.takeStatus();
  *http_status = (*head)->status;
  std::string buffer;
  if ((*head)->status != 200) {
    for (;;) {
      auto piece = co_await raw->readBody(connect_deadline);
      if (!piece.ok() || piece->empty()) break;
      buffer.append(piece->data(), piece->size());
    }
    co_return Status::failedPrecondition("watch answered HTTP " + std::to_string((*head)->status) +
                                         ": " + buffer);
  }
  for (;;) {
    auto piece = co_await raw->readBody(stream_deadline);
    if (!piece.ok())
      co_return Status::unavailable("watch stream broke: " + piece.status().message());
    if (piece->empty()) break;
    buffer.append(piece->data(), piece->size());
    size_t start = 0;
    for (size_t nl = buffer.find('\n', start); nl != std::string::npos;
         nl = buffer.find('\n', start)) {
      const std::string_view line(buffer.data() + start, nl - start);
      start = nl + 1;
      if (line.empty()) continue;
      Status s = on_line(line);
      if (!s.isOk()) co_return s;
    }
    buffer.erase(0, start);
  }
  if (!buffer.empty()) {
    Status s = on_line(buffer);
    if (!s.isOk()) co_return s;
  }
  co_return Status::ok();
}

void ApiClient::abortStreams() {
  ++abort_generation_;
  for (net::UpstreamConnection* c : std::vector<net::UpstreamConnection*>(streams_)) c->abort();
}

}  // namespace infera::sched::kube
