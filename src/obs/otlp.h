#pragma once
// The OTLP/HTTP trace exporter: finished requests' spans (net/trace.h) batched on a thread of its
// own and POSTed to a collector as `ExportTraceServiceRequest` in binary protobuf
// (application/x-protobuf), OpenTelemetry's OTLP 1.x over HTTP. A request never waits on it:
// submit() only queues (past max_queue_spans a trace is dropped and counted), and an export that
// fails is counted and dropped, never fatal.
//
//   tracing: {endpoint: "http://otel-collector:4318/v1/traces", sample_ratio: 0.01}
//
// Metrics: infera_trace_spans_total{outcome=exported|dropped|failed},
// infera_trace_exports_total{result=ok|error}.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "net/http.h"
#include "net/trace.h"

namespace infera {
class ConfigReader;
}

namespace infera::obs {

class MetricsRegistry;
class Counter;

struct TracingConfig {
  bool enabled = false;  // true when the config has a `tracing:` section
  std::string endpoint;  // http(s)://host:4318/v1/traces
  double sample_ratio = 1.0;
  bool errors_always = true;
  std::string service_name = "infera";
  std::map<std::string, std::string> headers;  // sent to the collector (e.g. authorization)
  int64_t max_queue_spans = 16'384;
  int64_t batch_spans = 512;
  int64_t export_interval_ms = 1'000;
  int64_t timeout_ms = 5'000;
  // A failed export that OTLP calls retryable (no connection, 429, 502, 503, 504) is sent again
  // up to max_retries times, after 250 ms, 500 ms, 1 s, ... (at most 5 s; a Retry-After of the
  // collector's is followed up to 30 s); never while stopping.
  int64_t max_retries = 3;
};
void readTracingConfig(ConfigReader& r, TracingConfig& c);

// One ExportTraceServiceRequest for `spans` from one resource (service.name and the given
// attributes) and one instrumentation scope ("infera", `version`).
std::string encodeTraceRequest(const std::vector<net::SpanData>& spans,
                               const std::vector<std::pair<std::string, std::string>>& resource,
                               const std::string& version);

class OtlpExporter final : public net::TraceSink {
 public:
  static Result<std::unique_ptr<OtlpExporter>> start(const TracingConfig& config,
                                                     MetricsRegistry& metrics,
                                                     const std::string& version);
  // Exports what is queued (each export bounded by timeout_ms, no retries; after a failed one the
  // rest is dropped and counted), then stops.
  ~OtlpExporter() override;
  void submit(std::vector<net::SpanData> spans) override;

 private:
  OtlpExporter(const TracingConfig& config, MetricsRegistry& metrics, std::string version);
  void run();
  bool exportBatch(std::vector<net::SpanData> batch);  // false: failed (counted)

  TracingConfig config_;
  std::string version_;
  std::vector<std::pair<std::string, std::string>> resource_;
  std::vector<net::HttpHeader> headers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<net::SpanData> queue_;
  bool stop_ = false;
  Counter* exported_;
  Counter* dropped_;
  Counter* failed_;
  Counter* exports_ok_;
  Counter* exports_error_;
  Counter* exports_retried_;
  std::thread thread_;
};

}  // namespace infera::obs
