#include "core/config.h"
#include "batch/batch.h"

namespace infera::batch {

Result<int64_t> parseWindow(const std::string& window) {
  if (window.size() < 2 || window.size() > 8)
    return Status::invalidArgument("a completion window is a number and 'h' or 'm' (24h)");
  int64_t n = 0;
  for (size_t i = 0; i + 1 < window.size(); ++i) {
    if (window[i] < '0' || window[i] > '9')
      return Status::invalidArgument("a completion window is a number and 'h' or 'm' (24h)");
    n = n * 10 + (window[i] - '0');
  }
  const char unit = window.back();
  if (n <= 0 || (unit != 'h' && unit != 'm'))
    return Status::invalidArgument("a completion window is a number and 'h' or 'm' (24h)");
  const int64_t ms = n * (unit == 'h' ? 3'600'000 : 60'000);
  if (ms > 30LL * 86'400'000)
    return Status::invalidArgument("a completion window is at most 30 days");
  return ms;
}

void readBatchConfig(ConfigReader& r, BatchConfig& c) {
  c.enabled = true;
  c.line = r.line();
  r.optional("store", c.store);
  r.optional("data_dir", c.data_dir);
  r.optional("file_dir", c.file_dir);
  r.optional("max_file_bytes", c.max_file_bytes, 1, 1LL << 40);
  r.optional("max_lines", c.max_lines, 1, 10'000'000);
  r.optional("max_line_bytes", c.max_line_bytes, 64, 64LL << 20);
  r.optional("max_response_bytes", c.max_response_bytes, 1024, 256LL << 20);
  r.optional("concurrency", c.concurrency, 1, 4096);
  r.optional("chunk_lines", c.chunk_lines, 1, 1'000'000);
  r.optional("lease_ms", c.lease_ms, 100, 3'600'000);
  r.optional("poll_ms", c.poll_ms, 10, 60'000);
  r.optional("max_attempts", c.max_attempts, 1, 20);
  r.optional("retry_base_ms", c.retry_base_ms, 1, 60'000);
  r.optional("threads", c.threads, 1, 64);
  r.optional("max_queued", c.max_queued, 1, 1'000'000);
  r.optional("max_open_batches", c.max_open_batches, 1, 1'000'000);
  r.optional("price_factor", c.price_factor, 0.0, 10.0);
  r.optional("max_enqueued_tokens", c.max_enqueued_tokens, 0, 1LL << 50);
  if (r.optional("batch_file_expiry_s", c.batch_file_expiry_s, 0, 10LL * 365 * 86'400) &&
      c.batch_file_expiry_s > 0 && c.batch_file_expiry_s < 3600)
    r.error("batch_file_expiry_s", "must be 0 (kept until deleted) or at least 3600 (1 hour)");
  if (r.optional("endpoints", c.endpoints)) {
    if (c.endpoints.empty()) r.error("endpoints", "must name at least one endpoint");
    for (const auto& e : c.endpoints) {
      if (!e.starts_with("/v1/") && !e.starts_with("/v2/"))
        r.error("endpoints", "'" + e + "' is not a /v1/ or /v2/ path the gateway serves");
      if (e.starts_with("/v1/files") || e.starts_with("/v1/batches"))
        r.error("endpoints", "'" + e + "' is the batch API itself, not a model endpoint");
    }
  }
  if (r.optional("completion_windows", c.completion_windows)) {
    if (c.completion_windows.empty()) r.error("completion_windows", "must name at least one");
    for (const auto& w : c.completion_windows) {
      if (auto ms = parseWindow(w); !ms.ok())
        r.error("completion_windows", "'" + w + "': " + ms.status().message());
    }
  }
}

std::vector<std::string> restartNeeded(const BatchConfig& a, const BatchConfig& b) {
  if (a.enabled != b.enabled || a.store != b.store || a.data_dir != b.data_dir ||
      a.file_dir != b.file_dir || a.max_file_bytes != b.max_file_bytes ||
      a.max_lines != b.max_lines || a.max_line_bytes != b.max_line_bytes ||
      a.max_response_bytes != b.max_response_bytes || a.concurrency != b.concurrency ||
      a.chunk_lines != b.chunk_lines || a.lease_ms != b.lease_ms || a.poll_ms != b.poll_ms ||
      a.max_attempts != b.max_attempts || a.retry_base_ms != b.retry_base_ms ||
      a.threads != b.threads || a.max_queued != b.max_queued ||
      a.max_open_batches != b.max_open_batches || a.price_factor != b.price_factor ||
      a.batch_file_expiry_s != b.batch_file_expiry_s ||
      a.max_enqueued_tokens != b.max_enqueued_tokens || a.endpoints != b.endpoints ||
      a.completion_windows != b.completion_windows) {
    return {"batch"};
  }
  return {};
}

}  // namespace infera::batch
