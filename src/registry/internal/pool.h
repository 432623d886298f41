#pragma once
// Registry internals: the bounded worker pool that keeps store and file work off the event
// loops. Each worker thread owns its own RegistryStore (one SqlDb per thread); a task runs on
// whichever worker is free, and runOnPool() resumes the awaiting coroutine on its own loop with
// the result. A full queue refuses the task (the caller answers 503), so a burst cannot grow
// memory without bound. A job that throws (a bug, or a library that throws where we did not
// expect it) costs its own request a 500, never the process: runOnPool() catches and logs it.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/status.h"
#include "net/asio.h"
#include "registry/internal/store.h"

namespace infera::registry {

class WorkerPool {
 public:
  using Task = std::function<void(RegistryStore&)>;
  using OpenStore = std::function<Result<std::unique_ptr<RegistryStore>>()>;
  WorkerPool(int threads, size_t max_queued);
  // Finishes the queued tasks, then joins the workers.
  ~WorkerPool();
  // Opens one store per worker and starts them.
  Status start(const OpenStore& open);
  // False when the queue is full (or the pool stopped). `task` must not throw (runOnPool's jobs
  // never do: it catches what theirs throw).
  bool submit(Task task);
  size_t queued() const;
  uint64_t rejected() const { return rejected_.load(); }

 private:
  void run(RegistryStore& store);
  const int threads_;
  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::vector<std::unique_ptr<RegistryStore>> stores_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> rejected_{0};
};

template <typename T>
using PoolJob = std::function<Result<T>(RegistryStore&)>;

// The answer to a job that threw: logged (with what it threw) and kInternal, without the text
// (it may name server paths or stored bytes).
Status jobThrew(const char* what);

// Runs `fn` on `store`; an exception becomes jobThrew()'s status. The one place a pool thread
// meets an exception.
template <typename T>
Result<T> runGuarded(const PoolJob<T>& fn, RegistryStore& store) noexcept {
  try {
    return fn(store);
  } catch (const std::exception& e) {
    return jobThrew(e.what());
  } catch (...) {
    return jobThrew("an exception that is not a std::exception");
  }
}

// Runs `fn` (copied) on a worker and resumes on `ctx` (the calling coroutine's loop) with its
// result; kUnavailable when the queue is full. Pass a named job: g++ 12 mishandles temporaries
// with destructors inside co_await expressions.
template <typename T>
net::Task<Result<T>> runOnPool(net::asio::io_context& ctx, WorkerPool& pool, const PoolJob<T>& fn) {
  struct State {
    explicit State(net::asio::io_context& c) : timer(c) {
      timer.expires_at(net::asio::steady_timer::time_point::max());
    }
    net::asio::steady_timer timer;
    std::optional<Result<T>> result;
  };
  auto state = std::make_shared<State>(ctx);
  const bool queued = pool.submit([&ctx, state, fn](RegistryStore& store) mutable {
    Result<T> r = runGuarded(fn, store);
    // The state (and its timer, a service of ctx) moves to ctx's thread with the result: the
    // pool's copy must not be the last one, destroyed here after ctx may be gone (make asan).
    net::asio::post(ctx, [state = std::move(state), r = std::move(r)]() mutable {
      state->result.emplace(std::move(r));
      state->timer.cancel();
    });
  });
  if (!queued)
    co_return Status::unavailable("registry busy: too many queued operations, retry shortly");
  while (!state->result) {
    boost::system::error_code ec;
    co_await state->timer.async_wait(net::asio::redirect_error(net::asio::use_awaitable, ec));
  }
  co_return std::move(*state->result);
}

}  // namespace infera::registry
