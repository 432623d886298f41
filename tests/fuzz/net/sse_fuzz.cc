// Fuzz target: net::SseReader, the incremental server-sent-events reader (the input is a stream).
//
// Properties:
//  - the events read do not depend on how the stream is cut into pieces;
//  - on a stream whose lines end in LF or CRLF (no lone CR, no byte-order mark), the events are
//    those of the WHATWG event-stream algorithm (html.spec.whatwg.org, "Interpreting an event
//    stream"), with SseReader's two documented choices: an event with an `event:` line but no data
//    is dispatched, and `id` belongs to its event (not carried to the next);
//  - events written with appendSseEvent/appendSseData (payloads without CR/LF, as their contract
//    asks) read back as written.

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "net/sse.h"

namespace {

using infera::fuzz::printable;
using infera::net::SseEvent;

bool sameEvents(const std::vector<SseEvent>& a, const std::vector<SseEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].event != b[i].event || a[i].data != b[i].data || a[i].id != b[i].id) return false;
  }
  return true;
}

std::string showEvents(const std::vector<SseEvent>& events) {
  std::string out;
  for (const auto& e : events)
    out += "[" + printable(e.event) + "|" + printable(e.data) + "|" + printable(e.id) + "]";
  return out;
}

std::vector<SseEvent> readAll(std::string_view stream, size_t piece) {
  infera::net::SseReader reader;
  std::vector<SseEvent> events;
  for (size_t i = 0; i < stream.size(); i += piece) {
    const bool ok =
        reader.feed(stream.substr(i, piece), [&](const SseEvent& e) { events.push_back(e); });
    FUZZ_CHECK(ok, "a short stream overflowed the reader: " + printable(stream));
  }
  return events;
}

// The WHATWG algorithm on LF/CRLF lines, with SseReader's two choices (see the top).
std::vector<SseEvent> reference(std::string_view stream) {
  std::vector<SseEvent> events;
  SseEvent cur;
  std::string data;
  bool has_data = false;
  size_t start = 0;
  for (;;) {
    const size_t nl = stream.find('\n', start);
    if (nl == std::string_view::npos) break;  // an unterminated last line is never processed
    std::string_view line = stream.substr(start, nl - start);
    start = nl + 1;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty()) {
      if (has_data || !cur.event.empty()) {
        if (!data.empty() && data.back() == '\n') data.pop_back();
        cur.data = data;
        events.push_back(cur);
      }
      cur = SseEvent{};
      data.clear();
      has_data = false;
      continue;
    }
    if (line.front() == ':') continue;
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value =
        colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (value.starts_with(' ')) value.remove_prefix(1);
    if (field == "event") {
      cur.event = value;
    } else if (field == "data") {
      data += value;
      data += '\n';
      has_data = true;
    } else if (field == "id") {
      cur.id = value;
    }
  }
  return events;
}

bool hasLoneCr(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r' && (i + 1 == s.size() || s[i + 1] != '\n')) return true;
  }
  return false;
}

// Events from the input (NUL-separated; "name|payload" names the event), written with the
// formatters and read back.
void checkRoundTrip(std::string_view input) {
  std::vector<SseEvent> written;
  std::string stream;
  size_t start = 0;
  while (start <= input.size() && written.size() < 64) {
    size_t end = input.find('\0', start);
    if (end == std::string_view::npos) end = input.size();
    std::string seg;
    for (const char c : input.substr(start, end - start)) {
      if (c != '\r' && c != '\n') seg += c;
    }
    start = end + 1;
    SseEvent e;
    const size_t bar = seg.find('|');
    if (bar != std::string::npos) {
      e.event = seg.substr(0, bar);
      e.data = seg.substr(bar + 1);
      infera::net::appendSseEvent(stream, e.event, e.data);
    } else {
      e.data = seg;
      infera::net::appendSseData(stream, e.data);
    }
    written.push_back(e);
  }
  const auto read = readAll(stream, 7);
  FUZZ_CHECK(sameEvents(read, written), "formatted events read back differently: wrote " +
                                            showEvents(written) + ", read " + showEvents(read));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view stream(reinterpret_cast<const char*>(data), size);
  const auto whole = readAll(stream, stream.size() + 1);
  const auto pieces = readAll(stream, 3);
  FUZZ_CHECK(sameEvents(whole, pieces), "events depend on the pieces: " + printable(stream) +
                                            "\nat once " + showEvents(whole) + "\nin pieces " +
                                            showEvents(pieces));
  if (!hasLoneCr(stream) && !stream.starts_with("\xEF\xBB\xBF")) {
    const auto want = reference(stream);
    FUZZ_CHECK(sameEvents(whole, want), "events differ from the spec's: " + printable(stream) +
                                            "\nread " + showEvents(whole) + "\nspec " +
                                            showEvents(want));
  }
  checkRoundTrip(stream);
  return 0;
}
