#include "net/trace.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

namespace infera::net {
namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is invalid in traceparent
}

bool parseHex(std::string_view s, uint8_t* out, size_t n) {
  if (s.size() != 2 * n) return false;
  bool nonzero = false;
  for (size_t i = 0; i < n; ++i) {
    const int hi = hexValue(s[2 * i]);
    const int lo = hexValue(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
    nonzero |= out[i] != 0;
  }
  return nonzero;
}

// Ids from a per-thread generator seeded by the OS (ids need to be unique, not secret).
std::mt19937_64& rng() {
  thread_local std::mt19937_64 g([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }());
  return g;
}

template <size_t N>
std::array<uint8_t, N> randomId() {
  std::array<uint8_t, N> id{};
  do {
    for (size_t i = 0; i < N; i += 8) {
      const uint64_t v = rng()();
      std::memcpy(id.data() + i, &v, std::min<size_t>(8, N - i));
    }
  } while (std::all_of(id.begin(), id.end(), [](uint8_t b) { return b == 0; }));
  return id;
}

// The trace-id ratio sampler's test: the id's last 8 bytes as a number below ratio * 2^64.
bool underRatio(const TraceId& id, double ratio) {
  if (ratio >= 1) return true;
  if (ratio <= 0) return false;
  uint64_t v = 0;
  for (size_t i = 8; i < 16; ++i) v = v << 8 | id[i];
  return static_cast<double>(v) < ratio * 18446744073709551616.0;
}

}  // namespace

uint64_t unixNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string toHex(const uint8_t* bytes, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

std::optional<TraceParent> parseTraceparent(std::string_view h) {
  // version "-" trace-id "-" parent-id "-" flags; version ff is invalid; a later version may
  // append fields after another '-'.
  if (h.size() < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  uint8_t version = 0;
  if (!parseHex(h.substr(0, 2), &version, 1) && h.substr(0, 2) != "00") return std::nullopt;
  if (h.substr(0, 2) == "ff") return std::nullopt;
  if (version == 0 && h.size() != 55) return std::nullopt;
  if (version != 0 && h.size() > 55 && h[55] != '-') return std::nullopt;
  TraceParent p;
  if (!parseHex(h.substr(3, 32), p.trace_id.data(), 16)) return std::nullopt;
  if (!parseHex(h.substr(36, 16), p.span_id.data(), 8)) return std::nullopt;
  const int hi = hexValue(h[53]);
  const int lo = hexValue(h[54]);
  if (hi < 0 || lo < 0) return std::nullopt;
  p.sampled = (lo & 1) != 0;
  return p;
}

std::string formatTraceparent(const TraceId& trace, const SpanId& span, bool sampled) {
  return "00-" + toHex(trace.data(), trace.size()) + "-" + toHex(span.data(), span.size()) +
         (sampled ? "-01" : "-00");
}

RequestTrace::RequestTrace(TraceSink* sink, std::string_view traceparent,
                           std::string_view tracestate, std::string name)
    : sink_(sink) {
  const auto parent = traceparent.empty() ? std::nullopt : parseTraceparent(traceparent);
  if (!sink_) {
    if (parent) incoming_ = std::string(traceparent);
    return;
  }
  SpanData root;
  if (parent) {
    trace_id_ = parent->trace_id;
    root.parent_id = parent->span_id;
    sampled_ = parent->sampled;
    // tracestate belongs to the caller's trace: kept only with a valid traceparent, and bounded
    // (the spec's 32 members of at most 256 bytes: 8 KiB).
    if (tracestate.size() <= 8192) tracestate_ = std::string(tracestate);
  } else {
    trace_id_ = randomId<16>();
    sampled_ = underRatio(trace_id_, sink_->sample_ratio);
  }
  recording_ = sampled_ || sink_->errors_always;
  if (!recording_) {
    if (parent) incoming_ = std::string(traceparent);
    return;
  }
  root.trace_id = trace_id_;
  root.span_id = randomId<8>();
  root.name = std::move(name);
  root.kind = SpanKind::kServer;
  root.start_unix_ns = unixNanos();
  root.tracestate = tracestate_;
  root.sampled = sampled_;
  spans_.reserve(6);
  spans_.push_back(std::move(root));
}

RequestTrace::~RequestTrace() {
  if (!finished_) finish(0);
}

size_t RequestTrace::start(std::string name, SpanKind kind, size_t parent) {
  if (!recording_ || finished_) return 0;
  SpanData s;
  s.trace_id = trace_id_;
  s.span_id = randomId<8>();
  s.parent_id = spans_[parent < spans_.size() ? parent : 0].span_id;
  s.name = std::move(name);
  s.kind = kind;
  s.start_unix_ns = unixNanos();
  s.sampled = sampled_;
  spans_.push_back(std::move(s));
  return spans_.size() - 1;
}

void RequestTrace::end(size_t span) {
  if (!recording_ || span >= spans_.size() || spans_[span].end_unix_ns != 0) return;
  spans_[span].end_unix_ns = unixNanos();
}

void RequestTrace::attr(size_t span, std::string key, SpanValue value) {
  if (!recording_ || span >= spans_.size()) return;
  spans_[span].attributes.emplace_back(std::move(key), std::move(value));
}

void RequestTrace::error(size_t span, std::string message) {
  if (!recording_ || span >= spans_.size()) return;
  spans_[span].error = true;
  spans_[span].status_message = std::move(message);
}

std::string RequestTrace::traceparent(size_t span) const {
  if (!recording_) return incoming_;
  return formatTraceparent(trace_id_, spans_[span < spans_.size() ? span : 0].span_id, sampled_);
}

void RequestTrace::finish(int status) {
  if (finished_) return;
  finished_ = true;
  if (!recording_) return;
  const uint64_t now = unixNanos();
  for (auto& s : spans_) {
    if (s.end_unix_ns == 0) s.end_unix_ns = now;  // a span left open ends with the request
  }
  SpanData& root = spans_[0];
  if (status > 0) root.attributes.emplace_back("http.response.status_code", int64_t{status});
  if (status >= 500) {
    root.error = true;
    if (root.status_message.empty()) root.status_message = "HTTP " + std::to_string(status);
  }
  if (sampled_ || (sink_->errors_always && status >= 500)) sink_->submit(std::move(spans_));
  spans_.clear();
}

}  // namespace infera::net
