#pragma once
// The one way to include Asio in Infera. Boost 1.74's asio/awaitable.hpp misses <utility>, so it
// comes first. Asio is compiled separately (BOOST_ASIO_SEPARATE_COMPILATION, see net/CMakeLists)
// so these headers declare only. Beast never appears in a header outside src/net/*.cc.
//
// The net layer is Infera's Asio layer: components above it (gateway, emulator) write their
// request flows as asio::awaitable coroutines on the per-core loops that net owns.

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace infera::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;
template <typename T = void>
using Task = asio::awaitable<T>;

// Spawns a coroutine on `ex`. Unlike co_spawn(..., detached) on Boost 1.74, an escaping
// exception is logged and counted instead of dropped silently.
void spawn(asio::io_context& ctx, Task<void> task, const char* what);

// Sleeps until `d` (or is cancelled).
Task<void> sleepUntil(Deadline d);

// The number of coroutines spawned by spawn() that ended with an exception (for tests/metrics).
uint64_t spawnFailures();

}  // namespace infera::net
