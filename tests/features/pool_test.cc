// The worker pool: a job that throws costs its caller an internal error, never the process (an
// exception on a pool thread would call std::terminate), and the pool goes on running jobs.

#include "features/internal/pool.h"

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <future>
#include <optional>
#include <stdexcept>

namespace infera::features {
namespace {

struct Outcomes {
  std::optional<Result<int>> thrown;
  std::optional<Status> thrown_status;
  std::optional<Result<int>> after;
};

net::Task<void> throwThenRun(WorkerPool& pool, net::asio::io_context& ctx, Outcomes& out) {
  std::function<Result<int>()> bad = []() -> Result<int> { throw std::runtime_error("boom"); };
  auto first = runOnPool<int>(pool, ctx, std::move(bad));
  out.thrown.emplace(co_await std::move(first));
  std::function<Status()> bad_status = []() -> Status { throw 7; };  // not a std::exception
  auto second = runOnPoolStatus(pool, ctx, std::move(bad_status));
  out.thrown_status.emplace(co_await std::move(second));
  std::function<Result<int>()> good = []() -> Result<int> { return 42; };
  auto third = runOnPool<int>(pool, ctx, std::move(good));
  out.after.emplace(co_await std::move(third));
}

TEST(WorkerPoolTest, AJobThatThrowsIsAnInternalErrorAndThePoolKeepsWorking) {
  WorkerPool pool(1, 16);
  net::asio::io_context ctx;
  auto work = net::asio::make_work_guard(ctx);
  Outcomes out;
  net::asio::co_spawn(ctx, throwThenRun(pool, ctx, out), [&](std::exception_ptr e) {
    EXPECT_FALSE(e) << "the coroutine itself must not throw";
    work.reset();
  });
  // Bounded: a job whose exception is lost never answers its caller.
  ctx.run_for(std::chrono::seconds(20));
  ASSERT_TRUE(out.thrown && out.thrown_status && out.after) << "a caller was never answered";
  ASSERT_FALSE(out.thrown->ok());
  EXPECT_EQ(out.thrown->status().code(), StatusCode::kInternal);
  EXPECT_EQ(out.thrown_status->code(), StatusCode::kInternal);
  ASSERT_TRUE(out.after->ok()) << out.after->status().message();
  EXPECT_EQ(**out.after, 42);
  EXPECT_EQ(pool.failed(), 2u);
}

TEST(WorkerPoolTest, ARawJobThatThrowsDoesNotStopTheThread) {
  WorkerPool pool(1, 16);
  ASSERT_TRUE(pool.submit([] { throw std::logic_error("raw"); }));
  std::promise<int> ran;
  ASSERT_TRUE(pool.submit([&ran] { ran.set_value(1); }));
  auto f = ran.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(f.get(), 1);
  EXPECT_EQ(pool.failed(), 1u);
}

}  // namespace
}  // namespace infera::features
