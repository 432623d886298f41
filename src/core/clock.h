#pragma once
// Time behind an interface so tests and the simulator can use a fake.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace infera {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds.
  virtual int64_t nowNanos() const = 0;
  // Wall clock, unix milliseconds.
  virtual int64_t unixMillis() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t nowNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t unixMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  // A process-wide instance; stateless, so sharing it is safe.
  static const SystemClock& instance() {
    static const SystemClock clock;
    return clock;
  }
};

// Thread-safe fake: time moves only when advanced.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_nanos = 1'000'000'000) : now_(start_nanos) {}
  // Starts at the system's wall time now (so that its times agree with times stored elsewhere).
  struct AtSystemTime {};
  explicit FakeClock(AtSystemTime)
      : now_((SystemClock::instance().unixMillis() - 1'700'000'000'000) * 1'000'000) {}
  int64_t nowNanos() const override { return now_.load(std::memory_order_relaxed); }
  int64_t unixMillis() const override { return 1'700'000'000'000 + nowNanos() / 1'000'000; }
  void advance(std::chrono::nanoseconds d) { now_.fetch_add(d.count(), std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

inline int64_t monoNanos() { return SystemClock::instance().nowNanos(); }

}  // namespace infera
