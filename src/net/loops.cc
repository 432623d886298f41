#include "net/loops.h"

#include <atomic>
#include <exception>

#include "core/log.h"

namespace infera::net {

namespace {
std::atomic<uint64_t> g_spawn_failures{0};
}

uint64_t spawnFailures() { return g_spawn_failures.load(std::memory_order_relaxed); }

void spawn(asio::io_context& ctx, Task<void> task, const char* what) {
  asio::co_spawn(ctx, std::move(task), [what](std::exception_ptr e) {
    if (!e) return;
    g_spawn_failures.fetch_add(1, std::memory_order_relaxed);
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      INFERA_LOG(componentLogger("net"), err, "{} ended with an exception: {}", what, ex.what());
    } catch (...) {
      INFERA_LOG(componentLogger("net"), err, "{} ended with an unknown exception", what);
    }
  });
}

Task<void> sleepUntil(Deadline d) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(d);
  boost::system::error_code ec;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

EventLoops::EventLoops(int n) {
  if (n <= 0) {
    n = static_cast<int>(std::thread::hardware_concurrency());
    if (n <= 0) n = 1;
  }
  for (int i = 0; i < n; ++i) {
    auto loop = std::make_unique<Loop>();
    // Each socket is used by its own loop's thread only, so the reactor needs no per-descriptor
    // locks; the scheduler keeps its lock because other threads post to the loop.
    loop->ctx = std::make_unique<Context>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO);
    loop->guard = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
        loop->ctx->get_executor());
    loops_.push_back(std::move(loop));
  }
}

EventLoops::~EventLoops() { stop(); }

void EventLoops::start() {
  if (started_) return;
  started_ = true;
  for (auto& l : loops_) {
    asio::io_context* ctx = l->ctx.get();
    l->thread = std::thread([ctx] { ctx->run(); });
  }
}

void EventLoops::stop() {
  for (auto& l : loops_) {
    l->guard.reset();
    l->ctx->stop();
  }
  for (auto& l : loops_) {
    if (l->thread.joinable()) l->thread.join();
  }
}

void EventLoops::shutdown() {
  stop();
  for (auto& l : loops_) l->ctx->shutdown();
}

}  // namespace infera::net
