#pragma once
// Registry internals: what the gateway serves from the registry, derived from the store's routing
// state (versions, aliases, bindings, experiments, capture settings) and the config's bindings.
// Pure functions; the control thread runs them on every change and hands the result to the
// gateway as models of its RouteSource.
//
//   "name/3"        a bound version: the deployments of its binding
//   "name@alias"    an alias: its own binding's deployments, or else an alias of its version's
//   route "name"          the model: an experiment's split (and shadow), or else its default alias

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gateway/config.h"
#include "registry/internal/store.h"

namespace infera::registry {

struct ArmSpec {
  std::string name;
  std::string ref;  // "3" (a version) or "@alias"
  int weight = 1;
};

struct ExperimentSpec {
  std::vector<ArmSpec> arms;
  std::string sticky = "user";  // user | key | header
  std::string header;           // sticky: header
  std::string salt;             // "" = the model's name
  std::string shadow;           // "" | "3" | "@alias"
  double shadow_share = 0;
  int64_t shadow_timeout_ms = 10'000;
  int shadow_max_concurrent = 16;
};

// Parses and checks an experiment's JSON (kInvalidArgument naming the field).
Result<ExperimentSpec> parseExperiment(const std::string& json);
std::string experimentJson(const ExperimentSpec& spec);

// "3" -> "name/3", "@a" -> "name@a"; "" for anything else.
std::string routeName(const std::string& model, const std::string& ref);

struct DerivedRoutes {
  std::vector<gateway::ModelConfig> models;
  std::string fingerprint;            // equal fingerprints: the same routes
  std::string json;                   // {"name":"target",...} for GET /admin/registry/routes
  std::vector<std::string> warnings;  // bindings naming unknown deployments, names taken, ...
};

DerivedRoutes deriveRoutes(const RoutingState& state,
                           const std::vector<BindingConfig>& config_bindings,
                           const std::vector<gateway::ModelConfig>& base,
                           const std::string& default_alias, int64_t capture_max_bytes);

// The deployment a binding names ("d1" or "model/d1") among `base`'s; null when none.
const gateway::DeploymentConfig* findDeployment(const std::vector<gateway::ModelConfig>& base,
                                                const std::string& ref);

}  // namespace infera::registry
