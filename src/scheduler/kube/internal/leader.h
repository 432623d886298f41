#pragma once
// Private to src/scheduler/kube: leader election on a coordination.k8s.io/v1 Lease, the way
// client-go's leaderelection does it: the holder renews spec.renewTime every renew interval; a
// candidate takes the lease (PUT with the resourceVersion it read, so two candidates cannot both
// win) once the record it observed has not changed for leaseDurationSeconds, measured on its own
// monotonic clock (no trust in the other replica's wall clock). Lives on one event loop.

#include <functional>
#include <string>

#include "net/asio.h"
#include "scheduler/kube/internal/api_client.h"
#include "scheduler/kube/kube.h"

namespace infera::sched::kube {

class LeaderElector {
 public:
  LeaderElector(net::asio::io_context& ctx, ApiClient& api, LeaderElectionConfig cfg);
  // Runs until stop(); calls on_change(true) when this replica becomes the leader and
  // on_change(false) when it loses the lease (or cannot renew it within the lease duration).
  net::Task<void> run(std::function<void(bool)> on_change);
  void stop();
  bool leader() const { return leader_; }
  const std::string& identity() const { return cfg_.identity; }

 private:
  // One attempt to acquire or renew; true when we hold the lease afterwards.
  net::Task<bool> tryAcquireOrRenew();

  net::asio::io_context& ctx_;
  ApiClient& api_;
  LeaderElectionConfig cfg_;
  net::asio::steady_timer timer_;
  bool stopping_ = false;
  bool leader_ = false;
  std::string observed_record_;  // holder + renewTime last seen
  net::SteadyClock::time_point observed_at_{};
  net::SteadyClock::time_point last_renew_{};
};

}  // namespace infera::sched::kube
