#pragma once
// What a limited resource (a model, a deployment; a feature service or collection next) carries
// for access control: its limits and the names of their counters, each with the in-process
// counter it stands for remembered after its first use (so a request's reservation finds its
// counters without hashing their names).

#include <atomic>
#include <string>
#include <string_view>

#include "access/config.h"

namespace infera::access {

struct LocalCounterEntry;  // LocalCounters' state of one counter (internal/limiter.h)

struct CounterName {
  std::string name;
  // Set by LocalCounters at first use; a copy starts unresolved. Must not outlive that
  // LocalCounters: another LocalCounters finding the memo reads the entry's owner to re-resolve
  // (snapshots and route tables do not outlive their Access).
  mutable std::atomic<LocalCounterEntry*> local{nullptr};

  CounterName() = default;
  CounterName(std::string n)
      : name(std::move(n)) {}  // NOLINT: implicit, names are built as strings
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

// A resource's own limits (all callers together) and their counters, e.g. "m:<model>:r" and
// "m:<model>:t". The owner (a route table) must not outlive the Access whose counters it names.
struct LimitedResource {
  LimitConfig limits;
  CounterName req, tok;
  bool limited() const { return limits.rpm > 0 || limits.tpm > 0; }
};

}  // namespace infera::access
