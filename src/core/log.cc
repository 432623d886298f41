#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

namespace infera {

spdlog::logger* componentLogger(const std::string& component) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto existing = spdlog::get(component);
  if (existing) return existing.get();
  auto logger = spdlog::stderr_color_mt(component);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  logger->set_level(spdlog::get_level());
  return logger.get();
}

bool setLogLevel(const std::string& level) {
  const auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") return false;
  spdlog::set_level(lvl);
  spdlog::apply_all([lvl](const std::shared_ptr<spdlog::logger>& l) { l->set_level(lvl); });
  return true;
}

}  // namespace infera
