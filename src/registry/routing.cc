#include "registry/internal/routing.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json.h"

namespace infera::registry {

using Json = nlohmann::json;

namespace {

bool validRef(const std::string& ref) {
  if (ref.starts_with("@")) return validateAlias(ref.substr(1)).isOk();
  return parseVersion(ref).ok();
}

Json deploymentJson(const gateway::DeploymentConfig& d) {
  Json eps = Json::array();
  for (const auto& e : d.endpoints)
    eps.push_back({e.url, e.emulator, e.region, e.weight, e.max_concurrent});
  return {{"name", d.name}, {"upstream_model", d.upstream_model}, {"endpoints", eps}};
}

}  // namespace

Result<ExperimentSpec> parseExperiment(const std::string& json) {
  Result<Json> read = readJson(json);
  if (!read.ok()) return Status::invalidArgument("experiment: " + read.status().message());
  const Json& j = *read;
  if (!j.is_object()) return Status::invalidArgument("experiment: the body must be a JSON object");
  ExperimentSpec e;
  if (j.contains("arms")) {
    if (!j["arms"].is_array()) return Status::invalidArgument("experiment.arms: must be a list");
    std::set<std::string> names;
    for (size_t i = 0; i < j["arms"].size(); ++i) {
      const Json& a = j["arms"][i];
      const std::string at = "experiment.arms[" + std::to_string(i) + "]";
      if (!a.is_object()) return Status::invalidArgument(at + ": must be an object");
      ArmSpec arm;
      if (!a.contains("target") || !a["target"].is_string())
        return Status::invalidArgument(at + ".target: required (\"3\" or \"@alias\")");
      arm.ref = a["target"].get<std::string>();
      if (!validRef(arm.ref))
        return Status::invalidArgument(
            at + ".target: must be a version (\"3\") or an alias (\"@champion\"), got '" + arm.ref +
            "'");
      arm.name =
          a.contains("name") && a["name"].is_string() ? a["name"].get<std::string>() : arm.ref;
      if (arm.name.empty() || arm.name.size() > 64)
        return Status::invalidArgument(at + ".name: 1 to 64 characters");
      if (!names.insert(arm.name).second)
        return Status::invalidArgument(at + ".name: '" + arm.name + "' is used twice");
      if (a.contains("weight")) {
        if (!a["weight"].is_number_integer() || a["weight"].get<int64_t>() < 0 ||
            a["weight"].get<int64_t>() > 1'000'000) {
          return Status::invalidArgument(at + ".weight: an integer in [0, 1000000]");
        }
        arm.weight = static_cast<int>(a["weight"].get<int64_t>());
      }
      e.arms.push_back(std::move(arm));
    }
    if (e.arms.size() > 32) return Status::invalidArgument("experiment.arms: at most 32 arms");
  }
  if (j.contains("sticky")) {
    if (!j["sticky"].is_string())
      return Status::invalidArgument("experiment.sticky: user, key or header");
    e.sticky = j["sticky"].get<std::string>();
    if (e.sticky != "user" && e.sticky != "key" && e.sticky != "header") {
      return Status::invalidArgument("experiment.sticky: user, key or header (got '" + e.sticky +
                                     "')");
    }
  }
  if (j.contains("header") && j["header"].is_string()) {
    e.header = j["header"].get<std::string>();
    for (auto& c : e.header) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (e.sticky == "header" && e.header.empty())
    return Status::invalidArgument("experiment.header: required with sticky: header");
  if (j.contains("salt") && j["salt"].is_string()) e.salt = j["salt"].get<std::string>();
  if (j.contains("shadow") && !j["shadow"].is_null()) {
    const Json& s = j["shadow"];
    if (!s.is_object()) return Status::invalidArgument("experiment.shadow: must be an object");
    if (!s.contains("target") || !s["target"].is_string() ||
        !validRef(s["target"].get<std::string>())) {
      return Status::invalidArgument(
          "experiment.shadow.target: a version (\"4\") or an alias (\"@challenger\")");
    }
    e.shadow = s["target"].get<std::string>();
    // Typed reads: value() would throw on a string where a number belongs ("share": "half").
    const auto present = [&](const char* k) { return s.contains(k) && !s[k].is_null(); };
    e.shadow_share = 1.0;
    if (present("share")) {
      if (!s["share"].is_number())
        return Status::invalidArgument("experiment.shadow.share: a number in [0, 1]");
      e.shadow_share = s["share"].get<double>();
    }
    if (!(e.shadow_share >= 0 && e.shadow_share <= 1))
      return Status::invalidArgument("experiment.shadow.share: in [0, 1]");
    if (present("timeout_ms")) {
      if (!s["timeout_ms"].is_number_integer())
        return Status::invalidArgument("experiment.shadow.timeout_ms: an integer in [1, 600000]");
      e.shadow_timeout_ms = s["timeout_ms"].get<int64_t>();
    }
    if (e.shadow_timeout_ms < 1 || e.shadow_timeout_ms > 600'000) {
      return Status::invalidArgument("experiment.shadow.timeout_ms: in [1, 600000]");
    }
    if (present("max_concurrent")) {
      const Json& m = s["max_concurrent"];
      if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > 100'000)
        return Status::invalidArgument("experiment.shadow.max_concurrent: in [1, 100000]");
      e.shadow_max_concurrent = static_cast<int>(m.get<int64_t>());
    }
    if (e.shadow_max_concurrent < 1 || e.shadow_max_concurrent > 100'000) {
      return Status::invalidArgument("experiment.shadow.max_concurrent: in [1, 100000]");
    }
  }
  if (e.arms.empty() && e.shadow.empty())
    return Status::invalidArgument("experiment: needs arms or a shadow");
  return e;
}

std::string experimentJson(const ExperimentSpec& e) {
  Json arms = Json::array();
  for (const auto& a : e.arms)
    arms.push_back({{"name", a.name}, {"target", a.ref}, {"weight", a.weight}});
  Json j = {{"arms", arms}, {"sticky", e.sticky}};
  if (!e.header.empty()) j["header"] = e.header;
  if (!e.salt.empty()) j["salt"] = e.salt;
  if (!e.shadow.empty()) {
    j["shadow"] = {{"target", e.shadow},
                   {"share", e.shadow_share},
                   {"timeout_ms", e.shadow_timeout_ms},
                   {"max_concurrent", e.shadow_max_concurrent}};
  }
  return dumpJson(j);
}

std::string routeName(const std::string& model, const std::string& ref) {
  if (ref.starts_with("@") && ref.size() > 1) return model + ref;
  if (!ref.empty() && parseVersion(ref).ok()) return model + "/" + ref;
  return {};
}

const gateway::DeploymentConfig* findDeployment(const std::vector<gateway::ModelConfig>& base,
                                                const std::string& ref) {
  const size_t slash = ref.find('/');
  for (const auto& m : base) {
    if (slash != std::string::npos && m.name != ref.substr(0, slash)) continue;
    const std::string dep = slash == std::string::npos ? ref : ref.substr(slash + 1);
    for (const auto& d : m.deployments) {
      if (d.name == dep) return &d;
    }
  }
  return nullptr;
}

DerivedRoutes deriveRoutes(const RoutingState& state,
                           const std::vector<BindingConfig>& config_bindings,
                           const std::vector<gateway::ModelConfig>& base,
                           const std::string& default_alias, int64_t capture_max_bytes) {
  DerivedRoutes out;
  std::set<std::string> taken;
  for (const auto& m : base) {
    taken.insert(m.name);
    for (const auto& a : m.aliases) taken.insert(a);
  }
  std::set<std::pair<std::string, int64_t>> versions;
  std::set<std::string> model_names;
  for (const auto& v : state.versions) {
    versions.insert({v.name, v.version});
    model_names.insert(v.name);
  }
  std::map<std::pair<std::string, std::string>, int64_t> aliases;  // (name, alias) -> version
  for (const auto& a : state.aliases) aliases[{a.name, a.alias}] = a.version;

  // Bindings: the store's, then the config's where the store has none for the same ref.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> bindings;
  for (const auto& b : state.bindings) bindings[{b.model, b.ref}] = b.deployments;
  for (const auto& b : config_bindings)
    bindings.emplace(std::make_pair(b.model, b.ref), b.deployments);

  std::map<std::string, size_t> route_of;  // route name -> index in out.models
  auto claim = [&](const std::string& name) {
    if (taken.count(name) || route_of.count(name)) {
      out.warnings.push_back("registry route " + name +
                             " is not served: the name is taken by the config's models");
      return false;
    }
    return true;
  };
  for (const auto& [key, deps] : bindings) {
    const auto& [model, ref] = key;
    if (ref.starts_with("@")) {
      if (!aliases.count({model, ref.substr(1)})) continue;  // an alias that does not exist (yet)
    } else {
      auto v = parseVersion(ref);
      if (!v.ok() || !versions.count({model, *v})) continue;
    }
    const std::string name = routeName(model, ref);
    if (name.empty() || !claim(name)) continue;
    gateway::ModelConfig mc;
    mc.name = name;
    mc.tag_responses = true;
    for (const auto& d : deps) {
      const gateway::DeploymentConfig* dc = findDeployment(base, d);
      if (!dc) {
        out.warnings.push_back("binding " + name + " names unknown deployment '" + d + "'");
        continue;
      }
      mc.deployments.push_back(*dc);
    }
    if (mc.deployments.empty()) continue;
    route_of[name] = out.models.size();
    out.models.push_back(std::move(mc));
  }
  // Aliases without a binding of their own serve their version's route.
  for (const auto& [key, version] : aliases) {
    const std::string name = key.first + "@" + key.second;
    if (route_of.count(name)) continue;
    const auto it = route_of.find(key.first + "/" + std::to_string(version));
    if (it == route_of.end() || taken.count(name)) continue;
    out.models[it->second].aliases.push_back(name);
    route_of[name] = it->second;
  }
  for (const auto& a : state.aliases) model_names.insert(a.name);
  std::map<std::string, std::string> experiments(state.experiments.begin(),
                                                 state.experiments.end());
  for (const auto& [name, spec] : experiments) model_names.insert(name);
  // The model's own name: its experiment, else its default alias.
  for (const auto& name : model_names) {
    if (taken.count(name) || route_of.count(name)) continue;
    const auto ex = experiments.find(name);
    if (ex != experiments.end()) {
      auto spec = parseExperiment(ex->second);
      if (!spec.ok()) {
        out.warnings.push_back("experiment of " + name +
                               " is not valid: " + spec.status().message());
      } else {
        gateway::ModelConfig mc;
        mc.name = name;
        mc.tag_responses = true;
        mc.split.sticky_by = spec->sticky == "key"      ? gateway::StickyBy::kKey
                             : spec->sticky == "header" ? gateway::StickyBy::kHeader
                                                        : gateway::StickyBy::kUser;
        mc.split.sticky_header = spec->header;
        mc.split.salt = spec->salt.empty() ? name : spec->salt;
        for (const auto& a : spec->arms) {
          const std::string target = routeName(name, a.ref);
          if (!route_of.count(target)) {
            out.warnings.push_back("experiment of " + name + ": arm " + a.name + " targets " +
                                   target + ", which is not served (no binding)");
            continue;
          }
          mc.split.arms.push_back({a.name, target, a.weight});
        }
        if (mc.split.arms.empty()) {
          // A shadow alone: one arm, the default alias.
          const std::string def = name + "@" + default_alias;
          if (route_of.count(def)) mc.split.arms.push_back({default_alias, def, 1});
        }
        if (!spec->shadow.empty()) {
          const std::string target = routeName(name, spec->shadow);
          if (route_of.count(target)) {
            mc.shadow.target = target;
            mc.shadow.share = spec->shadow_share;
            mc.shadow.timeout_ms = spec->shadow_timeout_ms;
            mc.shadow.max_concurrent = spec->shadow_max_concurrent;
          } else {
            out.warnings.push_back("experiment of " + name + ": shadow " + target +
                                   " is not served (no binding)");
          }
        }
        if (!mc.split.arms.empty()) {
          route_of[name] = out.models.size();
          out.models.push_back(std::move(mc));
          continue;
        }
      }
    }
    const auto def = route_of.find(name + "@" + default_alias);
    if (def == route_of.end()) continue;
    out.models[def->second].aliases.push_back(name);
    route_of[name] = def->second;
  }
  // Data capture of versions that are served.
  for (const auto& c : state.captures) {
    const auto it = route_of.find(c.target);
    if (it == route_of.end()) continue;
    gateway::CaptureConfig& cc = out.models[it->second].capture;
    cc.sample = c.sample;
    cc.max_bytes = capture_max_bytes;
    cc.flag_errors = c.flag_errors;
    cc.flag_slower_ms = c.flag_slower_ms;
    cc.flag_contains = c.flag_contains;
    cc.opt_out_keys = state.opt_out_keys;
  }
  Json fp = Json::array();
  Json routes = Json::object();
  for (const auto& m : out.models) {
    Json deps = Json::array();
    for (const auto& d : m.deployments) deps.push_back(deploymentJson(d));
    Json arms = Json::array();
    for (const auto& a : m.split.arms) arms.push_back({a.name, a.target, a.weight});
    fp.push_back({m.name, m.aliases, deps, arms, static_cast<int>(m.split.sticky_by),
                  m.split.sticky_header, m.split.salt, m.shadow.target, m.shadow.share,
                  m.shadow.timeout_ms, m.shadow.max_concurrent, m.capture.sample,
                  m.capture.max_bytes, m.capture.flag_errors, m.capture.flag_slower_ms,
                  m.capture.flag_contains, m.capture.opt_out_keys});
    Json r = Json::object();
    if (!m.split.arms.empty()) {
      Json a = Json::array();
      for (const auto& arm : m.split.arms)
        a.push_back({{"arm", arm.name}, {"target", arm.target}, {"weight", arm.weight}});
      r["arms"] = a;
    } else {
      Json d = Json::array();
      for (const auto& dep : m.deployments) d.push_back(dep.name);
      r["deployments"] = d;
    }
    if (!m.shadow.target.empty())
      r["shadow"] = {{"target", m.shadow.target}, {"share", m.shadow.share}};
    if (m.capture.enabled()) r["capture"] = {{"sample", m.capture.sample}};
    routes[m.name] = r;
    for (const auto& a : m.aliases) routes[a] = {{"route", m.name}};
  }
  out.fingerprint = dumpJson(fp);
  out.json = dumpJson(routes);
  return out;
}

}  // namespace infera::registry
