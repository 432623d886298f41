#pragma once
// A model backend for tests that records every request it is sent (method, target, headers, body:
// what a real backend would read) and answers an OpenAI-shaped chat completion, or a stream of SSE
// events that it can cut in the middle of an event. A real HTTP server on a free loopback port
// (net::HttpServer), so what reaches it is what the gateway wrote on the wire.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/http.h"

namespace infera::testing {

// How a RecordingBackend answers: a JSON completion (usage 5 + 3); with `stream`, `events` SSE
// events of one token each then [DONE]; with `cut_after_bytes` >= 0, the stream's connection is
// closed after that many bytes of events (mid-event when it falls inside one).
struct RecordingBehaviour {
  bool stream = false;
  int events = 4;
  int64_t cut_after_bytes = -1;
};

class RecordingBackend {
 public:
  using Behaviour = RecordingBehaviour;
  struct Seen {
    std::string method;
    std::string target;
    std::vector<net::HttpHeader> headers;
    std::string body;
    std::string header(std::string_view name) const;
    int headerCount(std::string_view name) const;
  };
  static std::unique_ptr<RecordingBackend> start(Behaviour behaviour = {});
  ~RecordingBackend();
  std::string url() const;
  std::vector<Seen> requests() const;
  size_t count() const;

  class Impl;

 private:
  explicit RecordingBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace infera::testing
