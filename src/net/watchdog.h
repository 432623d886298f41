#pragma once
// Private to net. A lazy per-connection deadline: setting a deadline is a store; the one timer
// re-arms itself only when it fires early or when a deadline moves earlier than its expiry. On
// expiry it calls on_expire (which closes the socket, failing the pending operation).

#include <functional>
#include <memory>

#include "net/asio.h"

namespace infera::net {

class Watchdog {
 public:
  Watchdog(asio::io_context& ctx, std::function<void()> on_expire)
      : state_(std::make_shared<State>(ctx, std::move(on_expire))) {}
  ~Watchdog() {
    state_->dead = true;
    state_->timer.cancel();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void expireAt(Deadline d) {
    state_->deadline = d;
    if (!state_->armed || d < state_->armed_at) {
      arm(state_, d);
    }
  }
  void expireAfter(std::chrono::milliseconds ms) { expireAt(SteadyClock::now() + ms); }
  void disarm() { state_->deadline = Deadline::max(); }
  bool expired() const { return state_->fired; }
  void reset() { state_->fired = false; }

 private:
  struct State {
    State(asio::io_context& ctx, std::function<void()> f) : timer(ctx), on_expire(std::move(f)) {}
    asio::steady_timer timer;
    std::function<void()> on_expire;
    Deadline deadline = Deadline::max();
    Deadline armed_at = Deadline::max();
    bool armed = false;
    bool dead = false;
    bool fired = false;
    uint64_t generation = 0;
  };

  static void arm(const std::shared_ptr<State>& s, Deadline d) {
    if (d == Deadline::max()) return;
    s->armed = true;
    s->armed_at = d;
    const uint64_t gen = ++s->generation;
    s->timer.expires_at(d);
    s->timer.async_wait([s, gen](const boost::system::error_code&) {
      if (s->dead || gen != s->generation) return;
      s->armed = false;
      const auto now = SteadyClock::now();
      if (s->deadline == Deadline::max()) return;
      if (s->deadline > now) {
        arm(s, s->deadline);
        return;
      }
      s->fired = true;
      s->deadline = Deadline::max();
      s->on_expire();
    });
  }

  std::shared_ptr<State> state_;
};

}  // namespace infera::net
