#pragma once
// A bounded pool of threads for blocking work (SQL, files), so the event loops never block on
// them. Each thread owns a `State` (e.g. its own SQL connection: a SqlDb is used by one thread at
// a time); a job runs on whichever thread is free with that thread's state, and runOnPool()
// resumes the awaiting coroutine on its own loop with the result. A full queue refuses the job
// (the caller answers 503), so a burst cannot grow memory without bound. A job that throws costs
// its own request a kInternal, never the process.
//
//   net::BlockingPool<Store> pool(2, 1024);
//   INFERA_RETURN_IF_ERROR(pool.start([] { return Store::open(url); }));
//   const net::PoolJob<Store, Row> job = [id](Store& s) { return s.get(id); };
//   auto row = co_await net::runOnPool(ctx, pool, job);
//
// Thread-safe. Destroying the pool finishes the queued jobs, then joins the threads.

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "net/asio.h"

namespace infera::net {

template <typename State>
class BlockingPool {
 public:
  using Job = std::function<void(State&)>;
  using Open = std::function<Result<std::unique_ptr<State>>()>;
  BlockingPool(int threads, size_t max_queued)
      : threads_(std::max(1, threads)), max_queued_(std::max<size_t>(1, max_queued)) {}
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;
  ~BlockingPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_v_) t.join();
  }

  // Opens one state per thread and starts the threads.
  Status start(const Open& open) {
    for (int i = 0; i < threads_; ++i) {
      INFERA_ASSIGN_OR_RETURN(auto state, open());
      states_.push_back(std::move(state));
    }
    for (auto& s : states_) {
      State* state = s.get();
      threads_v_.emplace_back([this, state] { run(*state); });
    }
    return Status::ok();
  }
  // False when the queue is full (or the pool stopped). `job` must not throw (runOnPool's never
  // do: it catches what theirs throw).
  bool submit(Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ || queue_.size() >= max_queued_ || threads_v_.empty()) return false;
      queue_.push_back(std::move(job));
    }
    cv_.notify_one();
    return true;
  }

 private:
  void run(State& state) {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job(state);
    }
  }
  const int threads_;
  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::vector<std::unique_ptr<State>> states_;
  std::vector<std::thread> threads_v_;
};

template <typename State, typename T>
using PoolJob = std::function<Result<T>(State&)>;

// The answer to a job that threw: logged under `component` (with what it threw) and kInternal,
// without the text (it may name server paths or stored bytes).
inline Status poolJobThrew(const char* component, const char* what) noexcept {
  try {
    INFERA_LOG(componentLogger(component), err, "a {} operation threw: {}", component, what);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a logger that throws must not end the process
  }
  return Status::internal(std::string("internal error in the ") + component +
                          " (see the server log)");
}

// Runs `fn` (copied) on a pool thread and resumes on `ctx` (the calling coroutine's loop) with
// its result; kUnavailable when the queue is full. Pass a named job: g++ 12 mishandles
// temporaries with destructors inside co_await expressions.
template <typename State, typename T>
Task<Result<T>> runOnPool(asio::io_context& ctx, BlockingPool<State>& pool,
                          const PoolJob<State, T>& fn, const char* component) {
  struct Waiter {
    explicit Waiter(asio::io_context& c) : timer(c) {
      timer.expires_at(asio::steady_timer::time_point::max());
    }
    asio::steady_timer timer;
    std::optional<Result<T>> result;
  };
  auto waiter = std::make_shared<Waiter>(ctx);
  const bool queued = pool.submit([&ctx, waiter, fn, component](State& state) mutable {
    std::optional<Result<T>> r;
    try {
      r.emplace(fn(state));
    } catch (const std::exception& e) {
      r.emplace(poolJobThrew(component, e.what()));
    } catch (...) {
      r.emplace(poolJobThrew(component, "an exception that is not a std::exception"));
    }
    // The waiter (and its timer, a service of ctx) moves to ctx's thread with the result: the
    // pool's copy must not be the last one, destroyed here after ctx may be gone.
    asio::post(ctx, [waiter = std::move(waiter), r = std::move(*r)]() mutable {
      waiter->result.emplace(std::move(r));
      waiter->timer.cancel();
    });
  });
  if (!queued)
    co_return Status::unavailable(std::string(component) +
                                  " busy: too many queued operations, retry shortly");
  while (!waiter->result) {
    boost::system::error_code ec;
    co_await waiter->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return std::move(*waiter->result);
}

}  // namespace infera::net
