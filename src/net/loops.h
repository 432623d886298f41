#pragma once
// EventLoops: N threads, each driving its own io_context(1). A connection, its upstream pools and
// its timers stay on one loop for life (see STYLE.md "The gateway's threads").

#include <memory>
#include <thread>
#include <vector>

#include "net/asio.h"

namespace infera::net {

class EventLoops {
 public:
  // n <= 0 means one per core.
  explicit EventLoops(int n);
  ~EventLoops();
  EventLoops(const EventLoops&) = delete;
  EventLoops& operator=(const EventLoops&) = delete;

  int size() const { return static_cast<int>(loops_.size()); }
  asio::io_context& loop(int i) { return *loops_[static_cast<size_t>(i)]->ctx; }

  // Starts one thread per loop. Loops keep running (work guards) until stop().
  void start();
  // Stops every loop and joins the threads. Idempotent.
  void stop();
  // After stop(): destroys every handler still queued or waiting on the loops (coroutine frames
  // included) and shuts their services down, as ~io_context would first. What those handlers
  // point into may be destroyed after this, and so may I/O objects (timers, sockets) still alive,
  // which must not outlive the loops themselves. Idempotent.
  void shutdown();

 private:
  // An io_context whose shutdown (the first half of its destructor) can be called on its own.
  struct Context : asio::io_context {
    using asio::execution_context::shutdown;
    using asio::io_context::io_context;
  };
  struct Loop {
    std::unique_ptr<Context> ctx;
    std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> guard;
    std::thread thread;
  };
  std::vector<std::unique_ptr<Loop>> loops_;
  bool started_ = false;
};

}  // namespace infera::net
