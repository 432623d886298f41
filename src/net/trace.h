#pragma once
// Request tracing in the W3C trace-context and OpenTelemetry models: a request's spans recorded
// where it runs (the router opens the server span of every data-port request; the gateway adds
// its steps and the upstream attempts as children) and handed, when the request ends, to a
// TraceSink — the OTLP exporter (obs/otlp.h) — if the trace is kept.
//
// Sampling is decided at the head, per trace: a request that carries a `traceparent` follows its
// sampled flag (parent-based); a new trace is sampled when its id falls under `sample_ratio`
// (trace-id ratio, so every service sampling by the same ratio keeps the same traces). With
// `errors_always`, a trace not sampled is still recorded (a few spans in a vector) and kept when
// the request is answered 5xx. A trace neither sampled nor kept for errors records nothing.
//
//   RequestTrace t(sink, req.header("traceparent"), req.header("tracestate"), "POST /v1/x");
//   const size_t up = t.start("upstream", SpanKind::kClient);
//   headers.push_back({"traceparent", t.traceparent(up)});
//   t.end(up);
//   t.finish(200);
//
// A RequestTrace lives on one request's coroutine (one loop): not thread-safe. TraceSink::submit
// is called from any loop.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace infera::net {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

enum class SpanKind : int { kInternal = 1, kServer = 2, kClient = 3 };

using SpanValue = std::variant<std::string, int64_t, double, bool>;

struct SpanData {
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_id{};  // all zero: a root span
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  uint64_t start_unix_ns = 0;
  uint64_t end_unix_ns = 0;
  std::vector<std::pair<std::string, SpanValue>> attributes;
  bool error = false;  // status ERROR (with status_message); else UNSET
  std::string status_message;
  std::string tracestate;  // the caller's, on the server span
  bool sampled = false;    // the trace's flag (W3C "sampled")
};

// Where finished traces go. sample_ratio and errors_always are read by RequestTrace at its start.
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // The spans of one finished request (the server span first). Must not block.
  virtual void submit(std::vector<SpanData> spans) = 0;
  double sample_ratio = 1.0;
  bool errors_always = true;
};

struct TraceParent {
  TraceId trace_id{};
  SpanId span_id{};
  bool sampled = false;
};
// A `traceparent` header ("00-<32 hex>-<16 hex>-<2 hex>"; a later version's longer value read as
// version 00 as the spec says); nullopt when malformed or an id is all zeros.
std::optional<TraceParent> parseTraceparent(std::string_view header);
std::string formatTraceparent(const TraceId& trace, const SpanId& span, bool sampled);
std::string toHex(const uint8_t* bytes, size_t n);

class RequestTrace {
 public:
  // Opens the server span `name` of a request (sink may be null: nothing is recorded).
  RequestTrace(TraceSink* sink, std::string_view traceparent, std::string_view tracestate,
               std::string name);
  ~RequestTrace();  // finish(0) if not finished
  RequestTrace(const RequestTrace&) = delete;
  RequestTrace& operator=(const RequestTrace&) = delete;

  // Whether spans are being recorded (else every call below is a no-op).
  bool recording() const { return recording_; }
  // The trace's sampled flag (what a backend is told).
  bool sampled() const { return sampled_; }

  static constexpr size_t kRoot = 0;
  // A child span of `parent` starting now; its index (0 when not recording).
  size_t start(std::string name, SpanKind kind = SpanKind::kInternal, size_t parent = kRoot);
  void end(size_t span);
  void attr(size_t span, std::string key, SpanValue value);
  void error(size_t span, std::string message);
  // The traceparent to send downstream from `span` (the current trace when not recording: a
  // caller's traceparent passes through unchanged; "" when there is none).
  std::string traceparent(size_t span) const;
  const std::string& tracestate() const { return tracestate_; }
  // Ends the server span with the HTTP status it answered (http.response.status_code; >= 500 an
  // error) and hands the spans to the sink when the trace is kept.
  void finish(int status);

 private:
  TraceSink* sink_;
  bool recording_ = false;
  bool sampled_ = false;
  bool finished_ = false;
  TraceId trace_id_{};
  std::string incoming_;  // the caller's traceparent when not recording (passed through)
  std::string tracestate_;
  std::vector<SpanData> spans_;
};

// The current time as Unix nanoseconds (span timestamps).
uint64_t unixNanos();

}  // namespace infera::net
