#pragma once
// Access internals: the rate limiter's Lua scripts (src/access/lua/*.lua), embedded at build time.

#include <string_view>

namespace infera::access::lua {

std::string_view counters();  // shared by the three scripts below (prepended to each)
std::string_view reserve();
std::string_view adjust();
std::string_view cancel();

}  // namespace infera::access::lua
