#pragma once
// Server-sent events: an incremental reader (feed it bytes as they arrive, get whole events) and a
// formatter. Not thread-safe.

#include <functional>
#include <string>
#include <string_view>

namespace infera::net {

struct SseEvent {
  std::string event;  // "" means the default "message"
  std::string data;   // data lines joined with '\n'
  std::string id;
};

class SseReader {
 public:
  // Calls on_event for each complete event in `bytes` (events may span calls). Returns false if the
  // buffered partial event exceeds max_event_bytes (the stream is then unusable).
  bool feed(std::string_view bytes, const std::function<void(const SseEvent&)>& on_event);
  size_t max_event_bytes = 4 * 1024 * 1024;

 private:
  void processLine(std::string_view line, const std::function<void(const SseEvent&)>& on_event);
  std::string buffer_;
  SseEvent current_;
  bool has_data_ = false;
};

// "data: <payload>\n\n" (payload must not contain newlines; JSON never does once serialized).
void appendSseData(std::string& out, std::string_view payload);
// "event: <name>\ndata: <payload>\n\n"
void appendSseEvent(std::string& out, std::string_view event, std::string_view payload);

}  // namespace infera::net
