#include "registry/internal/pool.h"

#include "core/log.h"

namespace infera::registry {

Status jobThrew(const char* what) {
  try {
    INFERA_LOG(componentLogger("registry"), err, "a registry operation threw: {}", what);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a logger that throws must not end the process
    return Status::internal("internal error in the registry (the log could not be written)");
  }
  return Status::internal("internal error in the registry (see the server log)");
}

WorkerPool::WorkerPool(int threads, size_t max_queued)
    : threads_(std::max(1, threads)), max_queued_(std::max<size_t>(1, max_queued)) {}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

Status WorkerPool::start(const OpenStore& open) {
  for (int i = 0; i < threads_; ++i) {
    INFERA_ASSIGN_OR_RETURN(auto store, open());
    stores_.push_back(std::move(store));
  }
  for (auto& s : stores_) {
    RegistryStore* store = s.get();
    workers_.emplace_back([this, store] { run(*store); });
  }
  return Status::ok();
}

bool WorkerPool::submit(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queue_.size() >= max_queued_ || workers_.empty()) {
      rejected_.fetch_add(1);
      return false;
    }
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

size_t WorkerPool::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void WorkerPool::run(RegistryStore& store) {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task(store);
  }
}

}  // namespace infera::registry
