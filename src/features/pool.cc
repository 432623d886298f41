#include "features/internal/pool.h"

#include "core/utf8.h"

namespace infera::features {

WorkerPool::WorkerPool(int threads, size_t max_queue)
    : log_(componentLogger("features")), max_queue_(max_queue) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { run(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool WorkerPool::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= max_queue_) {
      shed_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

void WorkerPool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued is done
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    // runOnPool's jobs catch their own exceptions (their caller must get an answer); this is for
    // what escapes a raw submit()ted job, which must not end the process either.
    try {
      job();
    } catch (...) {
      (void)jobFailed(std::current_exception());
    }
  }
}

Status WorkerPool::jobFailed(std::exception_ptr e) noexcept {
  failed_.fetch_add(1, std::memory_order_relaxed);
  std::string what;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    // Bounded and made valid UTF-8: a library's message may quote the input it choked on.
    what = toValidUtf8(truncateUtf8(ex.what(), 200));
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  INFERA_LOG(log_, err, "a feature store job threw: {}", what);  // spdlog does not throw
  return Status::internal("a feature store job failed (the server log has the details)");
}

}  // namespace infera::features
