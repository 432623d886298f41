#pragma once
// The Redis store's Lua scripts (src/features/lua/*.lua), embedded at build time.

#include <string_view>

namespace infera::features::lua {

std::string_view write_newest();
std::string_view put();

}  // namespace infera::features::lua
