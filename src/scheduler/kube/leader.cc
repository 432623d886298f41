#include "scheduler/kube/internal/leader.h"

#include <chrono>

#include "scheduler/kube/internal/objects.h"

namespace infera::sched::kube {
namespace {

// MicroTime as Kubernetes writes it: RFC 3339 with microseconds.
std::string microTimeNow() {
  const auto now = std::chrono::system_clock::now();
  const int64_t us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::string s = formatTimestamp(us / 1'000'000);
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%06lldZ", static_cast<long long>(us % 1'000'000));
  s.pop_back();  // 'Z'
  return s + frac;
}

}  // namespace

LeaderElector::LeaderElector(net::asio::io_context& ctx, ApiClient& api, LeaderElectionConfig cfg)
    : ctx_(ctx), api_(api), cfg_(std::move(cfg)), timer_(ctx) {}

void LeaderElector::stop() {
  stopping_ = true;
  timer_.cancel();
}

net::Task<bool> LeaderElector::tryAcquireOrRenew() {
  const std::string path = "/apis/coordination.k8s.io/v1/namespaces/" + cfg_.lease_namespace +
                           "/leases/" + cfg_.lease_name;
  auto got = co_await api_.call("GET", path);
  if (!got.ok()) co_return false;
  const std::string now = microTimeNow();
  if (got->status == 404) {
    const Json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", cfg_.lease_name}, {"namespace", cfg_.lease_namespace}}},
        {"spec",
         {{"holderIdentity", cfg_.identity},
          {"leaseDurationSeconds", cfg_.lease_duration_s},
          {"acquireTime", now},
          {"renewTime", now},
          {"leaseTransitions", 0}}}};
    const std::string body = lease.dump();
    const std::string collection =
        "/apis/coordination.k8s.io/v1/namespaces/" + cfg_.lease_namespace + "/leases";
    auto created = co_await api_.call("POST", collection, body);
    co_return created.ok() && created->status == 201;
  }
  if (got->status != 200) co_return false;
  Json lease = Json::parse(got->body, nullptr, /*allow_exceptions=*/false);
  if (lease.is_discarded() || !lease.is_object() || !lease.contains("spec") ||
      !lease["spec"].is_object()) {
    co_return false;
  }
  Json& spec = lease["spec"];
  auto text = [&](const char* key) {
    return spec.contains(key) && spec[key].is_string() ? spec[key].get<std::string>() : "";
  };
  auto number = [&](const char* key, int fallback) {
    return spec.contains(key) && spec[key].is_number_integer() ? spec[key].get<int>() : fallback;
  };
  const std::string holder = text("holderIdentity");
  const std::string record = holder + "|" + text("renewTime");
  const auto steady_now = net::SteadyClock::now();
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = steady_now;
  }
  const int duration_s = number("leaseDurationSeconds", cfg_.lease_duration_s);
  const bool expired = steady_now - observed_at_ > std::chrono::seconds(duration_s);
  if (!holder.empty() && holder != cfg_.identity && !expired) co_return false;
  if (holder != cfg_.identity) {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = number("leaseTransitions", 0) + 1;
  }
  spec["holderIdentity"] = cfg_.identity;
  spec["renewTime"] = now;
  spec["leaseDurationSeconds"] = cfg_.lease_duration_s;
  // The resourceVersion we read stays in metadata: the server refuses the update (409) if
  // another replica wrote the lease since.
  const std::string body = lease.dump();
  auto put = co_await api_.call("PUT", path, body);
  if (!put.ok() || put->status != 200) co_return false;
  observed_record_ = cfg_.identity + "|" + now;
  observed_at_ = steady_now;
  co_return true;
}

net::Task<void> LeaderElector::run(std::function<void(bool)> on_change) {
  while (!stopping_) {
    const bool held = co_await tryAcquireOrRenew();
    const auto now = net::SteadyClock::now();
    if (held) last_renew_ = now;
    // A leader that cannot renew steps down before its lease can expire for the others.
    const bool leader =
        held ||
        (leader_ && now - last_renew_ < std::chrono::seconds(cfg_.lease_duration_s) -
                                            std::chrono::milliseconds(cfg_.renew_interval_ms));
    if (leader != leader_) {
      leader_ = leader;
      on_change(leader);
    }
    timer_.expires_after(std::chrono::milliseconds(cfg_.renew_interval_ms));
    boost::system::error_code ec;
    co_await timer_.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
  }
}

}  // namespace infera::sched::kube
