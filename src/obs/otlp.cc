#include "obs/otlp.h"

#include <charconv>

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>

#include "core/config.h"
#include "core/log.h"
#include "net/client.h"
#include "obs/metrics.h"

namespace infera::obs {
namespace {

// Protocol buffers' wire format, as much as OTLP's trace messages need.
class Pb {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_ += static_cast<char>(v | 0x80);
      v >>= 7;
    }
    out_ += static_cast<char>(v);
  }
  void tag(int field, int wire) {
    varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire));
  }
  void bytes(int field, const void* p, size_t n) {
    tag(field, 2);
    varint(n);
    out_.append(static_cast<const char*>(p), n);
  }
  void str(int field, std::string_view s) { bytes(field, s.data(), s.size()); }
  void message(int field, const Pb& m) { bytes(field, m.out_.data(), m.out_.size()); }
  void uint(int field, uint64_t v) {
    tag(field, 0);
    varint(v);
  }
  void fixed64(int field, uint64_t v) {
    tag(field, 1);
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));  // little-endian
    out_.append(b, 8);
  }
  void dbl(int field, double d) {
    uint64_t v = 0;
    std::memcpy(&v, &d, sizeof v);
    fixed64(field, v);
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// KeyValue { key = 1; AnyValue value = 2 }, AnyValue { string 1, bool 2, int64 3, double 4 }.
Pb keyValue(std::string_view key, const net::SpanValue& v) {
  Pb any;
  if (const auto* s = std::get_if<std::string>(&v)) {
    any.str(1, *s);
  } else if (const auto* b = std::get_if<bool>(&v)) {
    any.uint(2, *b ? 1 : 0);
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    any.uint(3, static_cast<uint64_t>(*i));
  } else {
    any.dbl(4, std::get<double>(v));
  }
  Pb kv;
  kv.str(1, key);
  kv.message(2, any);
  return kv;
}

bool allZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace

void readTracingConfig(ConfigReader& r, TracingConfig& c) {
  c.enabled = true;
  r.required("endpoint", c.endpoint);
  if (!c.endpoint.empty() && c.endpoint.rfind("http://", 0) != 0 &&
      c.endpoint.rfind("https://", 0) != 0) {
    r.error("endpoint",
            "must be an http:// or https:// URL (OTLP/HTTP, e.g. "
            "http://otel-collector:4318/v1/traces), got \"" +
                c.endpoint + "\"");
  }
  r.optional("sample_ratio", c.sample_ratio, 0.0, 1.0);
  r.optional("errors_always", c.errors_always);
  r.optional("service_name", c.service_name);
  r.object("headers", [&](ConfigReader& h) {
    if (!h.node().IsMap()) return;
    for (const auto& kv : h.node()) {
      const std::string name = kv.first.Scalar();
      std::string value;
      if (h.optional(name, value)) {
        const bool bad_name =
            name.empty() || name.find_first_of(" \t\r\n:()<>@,;\\\"/[]?={}") != std::string::npos;
        if (bad_name || value.find_first_of("\r\n") != std::string::npos) {
          h.error(name, "an HTTP header name (a token) with a value on one line");
          continue;
        }
        std::string lower = name;
        for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        c.headers[lower] = value;
      }
    }
  });
  r.optional("max_queue_spans", c.max_queue_spans, 1, 10'000'000);
  r.optional("batch_spans", c.batch_spans, 1, 100'000);
  r.optional("export_interval_ms", c.export_interval_ms, 10, 600'000);
  r.optional("timeout_ms", c.timeout_ms, 10, 600'000);
  r.optional("max_retries", c.max_retries, 0, 10);
}

std::string encodeTraceRequest(const std::vector<net::SpanData>& spans,
                               const std::vector<std::pair<std::string, std::string>>& resource,
                               const std::string& version) {
  // ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }
  // ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2 }
  // Resource { repeated KeyValue attributes = 1 }
  // ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2 }
  // InstrumentationScope { string name = 1; string version = 2 }
  Pb res;
  for (const auto& [k, v] : resource) res.message(1, keyValue(k, v));
  Pb scope;
  scope.str(1, "infera");
  scope.str(2, version);
  Pb scope_spans;
  scope_spans.message(1, scope);
  for (const auto& s : spans) {
    // Span { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3;
    //        bytes parent_span_id = 4; string name = 5; SpanKind kind = 6;
    //        fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
    //        repeated KeyValue attributes = 9; Status status = 15 }
    Pb span;
    span.bytes(1, s.trace_id.data(), s.trace_id.size());
    span.bytes(2, s.span_id.data(), s.span_id.size());
    if (!s.tracestate.empty()) span.str(3, s.tracestate);
    if (!allZero(s.parent_id.data(), s.parent_id.size())) {
      span.bytes(4, s.parent_id.data(), s.parent_id.size());
    }
    span.str(5, s.name);
    span.uint(6, static_cast<uint64_t>(s.kind));
    span.fixed64(7, s.start_unix_ns);
    span.fixed64(8, s.end_unix_ns);
    for (const auto& [k, v] : s.attributes) span.message(9, keyValue(k, v));
    if (s.error) {
      Pb status;  // Status { string message = 2; StatusCode code = 3 (2: ERROR) }
      status.str(2, s.status_message);
      status.uint(3, 2);
      span.message(15, status);
    }
    scope_spans.message(2, span);
  }
  Pb rs;
  rs.message(1, res);
  rs.message(2, scope_spans);
  Pb req;
  req.message(1, rs);
  return std::move(req.out());
}

OtlpExporter::OtlpExporter(const TracingConfig& config, MetricsRegistry& metrics,
                           std::string version)
    : config_(config), version_(std::move(version)) {
  sample_ratio = config.sample_ratio;
  errors_always = config.errors_always;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  resource_ = {{"service.name", config.service_name},
               {"service.version", version_},
               {"service.instance.id", std::string(host) + ":" + std::to_string(::getpid())},
               {"telemetry.sdk.name", "infera"},
               {"telemetry.sdk.language", "cpp"}};
  headers_.push_back({"content-type", "application/x-protobuf"});
  for (const auto& [k, v] : config.headers) headers_.push_back({k, v});
  auto* spans = metrics.counterFamily("infera_trace_spans_total",
                                      "Spans of finished traces: exported, dropped (queue full) or "
                                      "failed (the export failed).",
                                      {"outcome"});
  exported_ = spans->counter({"exported"});
  dropped_ = spans->counter({"dropped"});
  failed_ = spans->counter({"failed"});
  auto* exports = metrics.counterFamily("infera_trace_exports_total",
                                        "OTLP export requests by result.", {"result"});
  exports_ok_ = exports->counter({"ok"});
  exports_error_ = exports->counter({"error"});
  exports_retried_ = exports->counter({"retried"});
}

Result<std::unique_ptr<OtlpExporter>> OtlpExporter::start(const TracingConfig& config,
                                                          MetricsRegistry& metrics,
                                                          const std::string& version) {
  auto url = net::resolveUrl(config.endpoint);
  if (!url.ok()) return url.status().withContext("tracing.endpoint");
  std::unique_ptr<OtlpExporter> e(new OtlpExporter(config, metrics, version));
  e->thread_ = std::thread([p = e.get()] { p->run(); });
  return e;
}

OtlpExporter::~OtlpExporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OtlpExporter::submit(std::vector<net::SpanData> spans) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_ || queue_.size() + spans.size() > static_cast<size_t>(config_.max_queue_spans)) {
    dropped_->inc(0, static_cast<double>(spans.size()));
    return;
  }
  for (auto& s : spans) queue_.push_back(std::move(s));
  if (queue_.size() >= static_cast<size_t>(config_.batch_spans)) cv_.notify_one();
}

void OtlpExporter::run() {
  const auto interval = std::chrono::milliseconds(config_.export_interval_ms);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, interval, [&] {
      return stop_ || queue_.size() >= static_cast<size_t>(config_.batch_spans);
    });
    // Everything queued goes, a batch at a time (at stop too: the last traces are not lost).
    while (!queue_.empty()) {
      std::vector<net::SpanData> batch;
      const size_t n = std::min(queue_.size(), static_cast<size_t>(config_.batch_spans));
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      lock.unlock();
      const bool ok = exportBatch(std::move(batch));
      lock.lock();
      if (!ok && stop_) {
        // Stopping with the collector failing: the rest is dropped (counted), not tried batch by
        // batch for timeout_ms each.
        failed_->inc(0, static_cast<double>(queue_.size()));
        queue_.clear();
      }
    }
    if (stop_) return;
  }
}

bool OtlpExporter::exportBatch(std::vector<net::SpanData> batch) {
  const std::string body = encodeTraceRequest(batch, resource_, version_);
  Result<net::SimpleResponse> r = Status::unavailable("not sent");
  for (int64_t attempt = 0;; ++attempt) {
    r = net::fetchBlocking(config_.endpoint, "POST", body, headers_,
                           std::chrono::milliseconds(config_.timeout_ms));
    if (r.ok() && r->status >= 200 && r->status < 300) break;
    // OTLP/HTTP: retry when nothing was received, or on 429, 502, 503 and 504; not otherwise.
    const bool retryable =
        !r.ok() || r->status == 429 || r->status == 502 || r->status == 503 || r->status == 504;
    if (!retryable || attempt >= config_.max_retries) break;
    auto wait = std::min(std::chrono::milliseconds(250) * (int64_t{1} << attempt),
                         std::chrono::milliseconds(5'000));
    if (r.ok()) {
      int64_t seconds = 0;
      const std::string_view after = r->header("retry-after");
      if (!after.empty() &&
          std::from_chars(after.data(), after.data() + after.size(), seconds).ec == std::errc() &&
          seconds >= 0) {
        wait = std::chrono::milliseconds(std::min<int64_t>(seconds, 30) * 1000);
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_ || cv_.wait_for(lock, wait, [&] { return stop_; })) break;  // stopping: no retry
    exports_retried_->inc(0);
  }
  const bool ok = r.ok() && r->status >= 200 && r->status < 300;
  std::lock_guard<std::mutex> lock(mu_);  // the counters' one writer at a time
  if (ok) {
    exports_ok_->inc(0);
    exported_->inc(0, static_cast<double>(batch.size()));
    return true;
  }
  exports_error_->inc(0);
  failed_->inc(0, static_cast<double>(batch.size()));
  static auto log = componentLogger("trace");
  INFERA_LOG(log, warn, "OTLP export of {} spans to {} failed: {}", batch.size(), config_.endpoint,
             r.ok() ? "HTTP " + std::to_string(r->status) : r.status().message());
  return false;
}

}  // namespace infera::obs
