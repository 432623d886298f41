#pragma once
// Private to the gateway: the name of a rate-limit counter as the key/team snapshot and the route
// table hold it, with the in-process counter it stands for remembered after its first use (so a
// request's reservation finds its counters without hashing their names).

#include <atomic>
#include <string>
#include <string_view>

namespace infera::gateway {

struct LocalCounterEntry;  // LocalCounters' state of one counter (limiter.h)

struct CounterName {
  std::string name;
  // Set by LocalCounters at first use; a copy starts unresolved. Must not outlive that
  // LocalCounters: another LocalCounters finding the memo reads the entry's owner to re-resolve
  // (a gateway's snapshots and route tables do not outlive its governance).
  mutable std::atomic<LocalCounterEntry*> local{nullptr};

  CounterName() = default;
  CounterName(std::string n) : name(std::move(n)) {}  // NOLINT: implicit, names are built as strings
  CounterName(const CounterName& o) : name(o.name) {}
  CounterName& operator=(const CounterName& o) {
    name = o.name;
    local.store(nullptr, std::memory_order_relaxed);
    return *this;
  }
  CounterName& operator=(std::string n) {
    name = std::move(n);
    local.store(nullptr, std::memory_order_relaxed);
    return *this;
  }
  operator std::string_view() const { return name; }  // NOLINT
  bool empty() const { return name.empty(); }
};

}  // namespace infera::gateway
