#pragma once
// Logging: spdlog behind INFERA_LOG, one named logger per component. Never log prompts,
// completions, features, keys or auth headers. Thread-safe.

#include <spdlog/spdlog.h>

#include <string>

namespace infera {

// Returns the logger for `component` ("gateway", "net", ...), creating it on first use.
// Call at start-up and keep the pointer; lookup takes a lock.
spdlog::logger* componentLogger(const std::string& component);

// "trace|debug|info|warn|error|off"; unknown levels leave the level unchanged and return false.
bool setLogLevel(const std::string& level);

}  // namespace infera

#define INFERA_LOG(logger, lvl, ...) SPDLOG_LOGGER_CALL((logger), spdlog::level::lvl, __VA_ARGS__)
