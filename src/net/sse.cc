#include "net/sse.h"

namespace infera::net {

bool SseReader::feed(std::string_view bytes, const std::function<void(const SseEvent&)>& on_event) {
  buffer_.append(bytes.data(), bytes.size());
  size_t start = 0;
  for (;;) {
    const size_t nl = buffer_.find('\n', start);
    if (nl == std::string::npos) break;
    size_t end = nl;
    if (end > start && buffer_[end - 1] == '\r') --end;
    processLine(std::string_view(buffer_).substr(start, end - start), on_event);
    start = nl + 1;
  }
  buffer_.erase(0, start);
  return buffer_.size() <= max_event_bytes;
}

void SseReader::processLine(std::string_view line,
                            const std::function<void(const SseEvent&)>& on_event) {
  if (line.empty()) {
    if (has_data_ || !current_.event.empty()) {
      on_event(current_);
    }
    current_ = SseEvent{};
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // comment
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) current_.data.push_back('\n');
    current_.data.append(value.data(), value.size());
    has_data_ = true;
  } else if (field == "event") {
    current_.event.assign(value.data(), value.size());
  } else if (field == "id") {
    current_.id.assign(value.data(), value.size());
  }
}

void appendSseData(std::string& out, std::string_view payload) {
  out += "data: ";
  out += payload;
  out += "\n\n";
}

void appendSseEvent(std::string& out, std::string_view event, std::string_view payload) {
  out += "event: ";
  out += event;
  out += "\n";
  appendSseData(out, payload);
}

}  // namespace infera::net
