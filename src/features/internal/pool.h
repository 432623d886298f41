#pragma once
// A bounded pool of worker threads for blocking work (RocksDB, aggregation updates, batch
// ingest), so the loops never block on disk. runOnPool() awaits a job from a loop: the job runs
// on a worker and its result is posted back to the loop. A full queue sheds the job (the caller
// answers 503) and counts it. A job that throws (a bug, or a library that throws where it should
// not) is logged and counted, and its awaiting caller gets kInternal: an exception on a pool
// thread would otherwise end the process (std::terminate), which the loops' one catch-all does not
// cover.
//
// Thread-safe. Destroying the pool finishes the jobs queued, then joins the threads.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "net/asio.h"

namespace infera::features {

class WorkerPool {
 public:
  WorkerPool(int threads, size_t max_queue);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False when the queue is full (the job is dropped).
  bool submit(std::function<void()> job);
  uint64_t shed() const { return shed_.load(std::memory_order_relaxed); }
  // Jobs that ended with an exception.
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }

  // Runs `fn` here (on a pool thread): its result, or kInternal when it throws (logged, counted).
  template <typename T>
  Result<T> runGuarded(std::function<Result<T>()>& fn) noexcept {
    try {
      return fn();
    } catch (...) {
      return jobFailed(std::current_exception());
    }
  }

 private:
  void run();
  // Logs and counts an exception that escaped a job; the status its caller gets.
  Status jobFailed(std::exception_ptr e) noexcept;
  spdlog::logger* log_ = nullptr;
  std::atomic<uint64_t> failed_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  size_t max_queue_;
  bool stopping_ = false;
  std::atomic<uint64_t> shed_{0};
  std::vector<std::thread> threads_;
};

// Runs `fn` on the pool and resumes on `ctx` with its result; kUnavailable when the pool is full.
template <typename T>
net::Task<Result<T>> runOnPool(WorkerPool& pool, net::asio::io_context& ctx,
                               std::function<Result<T>()> fn) {
  auto initiate = [&pool, &ctx, fn = std::move(fn)](auto handler) mutable {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    const bool queued = pool.submit([h, &pool, &ctx, fn = std::move(fn)]() mutable {
      auto r = std::make_shared<Result<T>>(pool.runGuarded(fn));
      // The handler moves to ctx's thread: the pool's copy is never the last one.
      net::asio::post(ctx, [h = std::move(h), r]() mutable { (*h)(std::move(*r)); });
    });
    if (!queued) {
      net::asio::post(ctx, [h]() mutable {
        (*h)(Result<T>(Status::unavailable("feature store worker pool is full")));
      });
    }
  };
  // Named before co_await (g++ 12 double-destroys temporaries inside co_await expressions).
  auto op = net::asio::async_initiate<const net::asio::use_awaitable_t<>, void(Result<T>)>(
      std::move(initiate), net::asio::use_awaitable);
  Result<T> r = co_await std::move(op);
  co_return r;
}

inline net::Task<Status> runOnPoolStatus(WorkerPool& pool, net::asio::io_context& ctx,
                                         std::function<Status()> fn) {
  struct Unit {};
  std::function<Result<Unit>()> job = [fn = std::move(fn)]() -> Result<Unit> {
    Status s = fn();
    if (!s.isOk()) return s;
    return Unit{};
  };
  auto task = runOnPool<Unit>(pool, ctx, std::move(job));
  Result<Unit> r = co_await std::move(task);
  co_return r.takeStatus();
}

}  // namespace infera::features
