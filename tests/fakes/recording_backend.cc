#include "fakes/recording_backend.h"

#include "net/loops.h"
#include "net/server.h"

namespace infera::testing {

std::string RecordingBackend::Seen::header(std::string_view name) const {
  for (const auto& h : headers) {
    if (h.name == name) return h.value;
  }
  return "";
}

int RecordingBackend::Seen::headerCount(std::string_view name) const {
  int n = 0;
  for (const auto& h : headers) n += h.name == name ? 1 : 0;
  return n;
}

class RecordingBackend::Impl {
 public:
  explicit Impl(Behaviour b) : behaviour(b) {}
  Behaviour behaviour;
  mutable std::mutex mu;
  std::vector<Seen> seen;
  net::EventLoops loops{1};
  std::unique_ptr<net::HttpServer> server;
};

namespace {

std::string event(int i) {
  return "data: "
         "{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{"
         "\"content\":\"t" +
         std::to_string(i) + "\"}}]}\n\n";
}

class Handler final : public net::HttpHandler {
 public:
  explicit Handler(RecordingBackend::Impl& impl) : impl_(impl) {}
  net::Task<void> handle(net::HttpRequest& req, net::ResponseWriter& w) override {
    {
      std::lock_guard<std::mutex> lock(impl_.mu);
      impl_.seen.push_back({req.method, req.target, req.headers, req.body});
    }
    const auto& b = impl_.behaviour;
    if (req.path() == "/health") {
      co_await w.send(200, "text/plain", "ok");
      co_return;
    }
    if (!b.stream) {
      const std::string body =
          R"({"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},)"
          R"("finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}})";
      co_await w.send(200, "application/json", body);
      co_return;
    }
    std::string all;
    for (int i = 0; i < b.events; ++i) all += event(i);
    all += "data: [DONE]\n\n";
    if (!co_await w.start(200, "text/event-stream")) co_return;
    if (b.cut_after_bytes >= 0 && static_cast<size_t>(b.cut_after_bytes) < all.size()) {
      co_await w.writeChunk(
          std::string_view(all).substr(0, static_cast<size_t>(b.cut_after_bytes)));
      w.closeAfterResponse();
      co_return;  // never finished: the server closes the connection
    }
    for (int i = 0; i < b.events; ++i) {
      const std::string e = event(i);
      if (!co_await w.writeChunk(e)) co_return;
    }
    co_await w.writeChunk("data: [DONE]\n\n");
    co_await w.finish();
  }

 private:
  RecordingBackend::Impl& impl_;
};

}  // namespace

std::unique_ptr<RecordingBackend> RecordingBackend::start(Behaviour behaviour) {
  auto impl = std::make_unique<Impl>(behaviour);
  impl->loops.start();
  Impl* raw = impl.get();
  auto s = net::HttpServer::create(
      impl->loops, net::ServerConfig{},
      [raw](int, net::asio::io_context&) { return std::make_unique<Handler>(*raw); });
  if (!s.ok()) return nullptr;
  impl->server = std::move(*s);
  return std::unique_ptr<RecordingBackend>(new RecordingBackend(std::move(impl)));
}

RecordingBackend::RecordingBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RecordingBackend::~RecordingBackend() {
  impl_->server.reset();
  impl_->loops.stop();
}

std::string RecordingBackend::url() const {
  return "http://127.0.0.1:" + std::to_string(impl_->server->port());
}

std::vector<RecordingBackend::Seen> RecordingBackend::requests() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->seen;
}

size_t RecordingBackend::count() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->seen.size();
}

}  // namespace infera::testing
