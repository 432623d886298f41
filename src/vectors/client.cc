#include "vectors/client.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <thread>

#include "core/text.h"
#include "net/client.h"

namespace infera::vectors {
namespace {

bool retryable(int status) {
  return status == 0 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504;
}

// A non-negative number of the header ("2", "0.5"); nothing for an HTTP-date or garbage.
std::optional<double> headerNumber(const std::string& v) {
  if (v.empty()) return std::nullopt;
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || !(x >= 0) || !std::isfinite(x))
    return std::nullopt;
  return x;
}

StatusCode codeOf(int status) {
  switch (status) {
    case 400:
      return StatusCode::kInvalidArgument;
    case 401:
      return StatusCode::kUnauthenticated;
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 409:
      return StatusCode::kAlreadyExists;
    case 413:
      return StatusCode::kPayloadTooLarge;
    case 422:
      return StatusCode::kFailedPrecondition;
    case 429:
      return StatusCode::kResourceExhausted;
    default:
      return status >= 500 ? StatusCode::kUnavailable : StatusCode::kInternal;
  }
}

}  // namespace

std::chrono::milliseconds retryDelay(const RetryPolicy& policy, const HttpAnswer& answer, int retry,
                                     double jitter) {
  using std::chrono::milliseconds;
  // What the server asked for wins (capped by max_delay, so a bogus hour does not hang a load).
  if (auto ms = headerNumber(answer.retry_after_ms)) {
    return std::min(milliseconds(int64_t(std::ceil(*ms))), policy.max_delay);
  }
  if (auto s = headerNumber(answer.retry_after)) {
    return std::min(milliseconds(int64_t(std::ceil(*s * 1000))), policy.max_delay);
  }
  double d = double(policy.base_delay.count()) * std::pow(2.0, std::min(retry, 30));
  d = std::min(d, double(policy.max_delay.count()));
  d *= 1.0 - 0.25 * jitter;
  return milliseconds(int64_t(d));
}

HttpAnswer callWithRetry(const RetryPolicy& policy, const std::function<HttpAnswer()>& attempt,
                         int* retries) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(0, 1);
  HttpAnswer a = attempt();
  for (int i = 0; i + 1 < policy.max_attempts && retryable(a.status); ++i) {
    const auto wait = retryDelay(policy, a, i, u(rng));
    if (policy.sleep) {
      policy.sleep(wait);
    } else {
      std::this_thread::sleep_for(wait);
    }
    if (retries) ++*retries;
    a = attempt();
  }
  return a;
}

Status statusFromAnswer(const HttpAnswer& a, const std::string& what) {
  if (a.status == 0) return Status::unavailable("cannot reach " + what + ": " + a.error);
  std::string msg;
  auto j = nlohmann::json::parse(a.body, nullptr, false);
  if (j.is_object()) {
    if (j.contains("status") && j["status"].is_object() && j["status"].contains("error") &&
        j["status"]["error"].is_string()) {
      msg = j["status"]["error"].get<std::string>();  // Qdrant
    } else if (j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
               j["error"]["message"].is_string()) {
      msg = j["error"]["message"].get<std::string>();  // OpenAI
    }
  }
  if (msg.empty()) msg = a.body.substr(0, 300);
  return Status(codeOf(a.status), what + " answered " + std::to_string(a.status) + ": " + msg);
}

VectorsClient::VectorsClient(ClientConfig config) : config_(std::move(config)) {
  while (!config_.url.empty() && config_.url.back() == '/') config_.url.pop_back();
}

Result<nlohmann::json> VectorsClient::call(const std::string& method, const std::string& path,
                                           const std::string& body) const {
  std::vector<net::HttpHeader> headers;
  if (!config_.api_key.empty()) headers.push_back({"api-key", config_.api_key});
  if (!body.empty()) headers.push_back({"content-type", "application/json"});
  const std::string url = config_.url + path;
  int retries = 0;
  const HttpAnswer a = callWithRetry(
      config_.retry,
      [&] {
        HttpAnswer out;
        auto r = net::fetchBlocking(url, method, body, headers, config_.timeout);
        if (!r.ok()) {
          out.error = r.status().message();
          return out;
        }
        out.status = r->status;
        out.body = std::move(r->body);
        out.retry_after = std::string(r->header("retry-after"));
        out.retry_after_ms = std::string(r->header("retry-after-ms"));
        return out;
      },
      &retries);
  retries_ += retries;
  const std::string what = method + " " + path;
  if (a.status != 200)
    return statusFromAnswer(a, "the vector API (" + config_.url + ") to " + what);
  auto j = nlohmann::json::parse(a.body, nullptr, false);
  if (!j.is_object() || !j.contains("result")) {
    return Status::internal(what +
                            ": the answer is not Qdrant's envelope: " + a.body.substr(0, 200));
  }
  return std::move(j["result"]);
}

Status VectorsClient::createCollection(const std::string& name, const CollectionSpec& spec) const {
  nlohmann::json body;
  body["vectors"] = {{"size", spec.dim}, {"distance", spec.distance}};
  nlohmann::json hnsw = nlohmann::json::object();
  if (spec.m > 0) hnsw["m"] = spec.m;
  if (spec.ef_construct > 0) hnsw["ef_construct"] = spec.ef_construct;
  if (!hnsw.empty()) body["hnsw_config"] = hnsw;
  if (spec.int8) body["quantization_config"] = {{"scalar", {{"type", "int8"}}}};
  auto r = call("PUT", "/collections/" + pathSegment(name), body.dump());
  return r.ok() ? Status::ok() : r.status();
}

Status VectorsClient::deleteCollection(const std::string& name) const {
  INFERA_ASSIGN_OR_RETURN(nlohmann::json r, call("DELETE", "/collections/" + pathSegment(name)));
  if (r.is_boolean() && !r.get<bool>()) return Status::notFound("no collection named " + name);
  return Status::ok();
}

Result<std::vector<std::string>> VectorsClient::listCollections() const {
  INFERA_ASSIGN_OR_RETURN(nlohmann::json r, call("GET", "/collections"));
  std::vector<std::string> out;
  if (r.contains("collections") && r["collections"].is_array()) {
    for (const auto& c : r["collections"]) out.push_back(c.value("name", ""));
  }
  return out;
}

Result<nlohmann::json> VectorsClient::collectionInfo(const std::string& name) const {
  return call("GET", "/collections/" + pathSegment(name));
}

Result<nlohmann::json> VectorsClient::collectionStats(const std::string& name) const {
  return call("GET", "/collections/" + pathSegment(name) + "/stats");
}

Status VectorsClient::upsert(const std::string& name, const std::string& points_body) const {
  auto r = call("PUT", "/collections/" + pathSegment(name) + "/points?wait=true", points_body);
  return r.ok() ? Status::ok() : r.status();
}

int64_t VectorsClient::retries() const { return retries_.load(); }

std::string pathSegment(const std::string& s) { return percentEncode(s); }

}  // namespace infera::vectors
