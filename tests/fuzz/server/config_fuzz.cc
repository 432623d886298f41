// Fuzz target: loading `infera serve`'s YAML config (server::loadConfigString: yaml-cpp, core's
// ConfigReader and every component's section reader). The input is the file's text.
//
// Properties:
//  - loading never throws and never crashes: any input is a Config or an invalid-argument Status
//    with a message (this file has no try: an exception escaping is a finding);
//  - a loaded config holds only finite numbers within the ranges the readers declare for them
//    (checked for the floating-point settings: a NaN passes every `v < min || v > max` test);
//  - a config compared with itself needs no restart.

#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "server/config.h"

namespace {

using infera::fuzz::printable;

void checkRange(double v, double min, double max, const std::string& name,
                const std::string& yaml) {
  FUZZ_CHECK(std::isfinite(v) && v >= min && v <= max,
             name + " = " + std::to_string(v) + " was accepted: " + printable(yaml));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  const auto cfg = infera::server::loadConfigString(yaml);
  if (!cfg.ok()) {
    FUZZ_CHECK(cfg.status().code() == infera::StatusCode::kInvalidArgument &&
                   !cfg.status().message().empty(),
               "a refusal that is not an invalid-argument Status: " + cfg.status().message());
    return 0;
  }
  checkRange(cfg->gateway.region_margin, 0, 100, "region_margin", yaml);
  for (const auto& m : cfg->gateway.models) {
    checkRange(m.price.prompt_per_1m, 0, 1e9, "price.prompt_per_1m", yaml);
    checkRange(m.price.completion_per_1m, 0, 1e9, "price.completion_per_1m", yaml);
  }
  for (const auto& [name, e] : cfg->emulators) {
    checkRange(e.token_ms, 0, 60'000, "token_ms", yaml);
    checkRange(e.faults.error_rate, 0, 1, "faults.error_rate", yaml);
    checkRange(e.faults.hang_rate, 0, 1, "faults.hang_rate", yaml);
    checkRange(e.faults.disconnect_rate, 0, 1, "faults.disconnect_rate", yaml);
  }
  FUZZ_CHECK(infera::server::restartNeeded(*cfg, *cfg).empty(),
             "a config differs from itself: " + printable(yaml));
  return 0;
}
