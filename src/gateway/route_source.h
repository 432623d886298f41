#pragma once
// Where the gateway's routes come from: the models it serves, their aliases, deployments and
// endpoints. The config file is one source (StaticRouteSource, set by src/server on start and
// reload); the model registry is the next (aliases, versions, experiment arms, shadow targets).
// The gateway reads models() whenever it builds its route table: at start, on reload, and when
// the source tells it that its routes changed (Gateway::rebuild).

#include <mutex>
#include <utility>
#include <vector>

#include "gateway/config.h"

namespace infera::gateway {

class RouteSource {
 public:
  virtual ~RouteSource() = default;
  // The models to route now, validated as the config validates them. Thread-safe; called on the
  // control path (never per request).
  virtual std::vector<ModelConfig> models() const = 0;
};

// A fixed list of models (the config file's), replaced by set().
class StaticRouteSource final : public RouteSource {
 public:
  explicit StaticRouteSource(std::vector<ModelConfig> models = {}) : models_(std::move(models)) {}
  std::vector<ModelConfig> models() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return models_;
  }
  void set(std::vector<ModelConfig> models) {
    std::lock_guard<std::mutex> lock(mu_);
    models_ = std::move(models);
  }

 private:
  mutable std::mutex mu_;
  std::vector<ModelConfig> models_;
};

}  // namespace infera::gateway
