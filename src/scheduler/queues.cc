#include "scheduler/queues.h"

#include <fstream>
#include <set>
#include <sstream>

#include "core/config.h"

namespace infera::sched {
namespace {

constexpr double kMaxGpus = 1e7;

void readQuota(ConfigReader& r, Quota& q, const std::set<std::string>& types) {
  r.object("gpus", [&](ConfigReader& g) {
    if (!g.node().IsMap()) return;
    for (const auto& kv : g.node()) {
      const std::string type = kv.first.Scalar();
      double gpus = 0;
      if (!types.empty() && type != "*" && types.count(type) == 0) {
        g.error(type, "unknown GPU type '" + type + "' (not in gpu_types)");
      }
      if (g.optional(type, gpus, 0, kMaxGpus)) {
        q.gpu_milli[type] = static_cast<int64_t>(gpus * kMilliPerGpu + 0.5);
      }
    }
  });
  double cpu = 0;
  if (r.optional("cpu", cpu, 0, 1e9)) {
    q.cpu_milli = static_cast<int64_t>(cpu * 1000 + 0.5);
  }
  double mem_gib = 0;
  if (r.optional("memory_gib", mem_gib, 0, 1e9)) {
    q.memory_mib = static_cast<int64_t>(mem_gib * 1024 + 0.5);
  }
}

int64_t quotaGpu(const Quota& q, const std::string& type) {
  const auto it = q.gpu_milli.find(type);
  return it == q.gpu_milli.end() ? -1 : it->second;
}

void readQueue(ConfigReader& r, const std::string& parent, SchedulingConfig& cfg,
               std::set<std::string>& names, const std::set<std::string>& types) {
  QueueSpec spec;
  std::string name;
  r.required("name", name);
  if (!name.empty() && name.find('/') != std::string::npos) {
    r.error("name", "must not contain '/': nesting is expressed with children");
  }
  spec.name = parent.empty() ? name : parent + "/" + name;
  spec.parent = parent;
  r.object("guaranteed", [&](ConfigReader& q) { readQuota(q, spec.guaranteed, types); });
  r.object("max", [&](ConfigReader& q) { readQuota(q, spec.max, types); });
  if (!name.empty() && !names.insert(spec.name).second) {
    r.error("name", "duplicate queue '" + spec.name + "'");
  }
  // Guaranteed must not exceed max, type by type, nor the max over all types ("*"): no type's
  // guarantee, and not their sum.
  const auto gpus = [](int64_t milli) {
    std::ostringstream o;
    o << static_cast<double>(milli) / kMilliPerGpu;
    return o.str();
  };
  const int64_t max_all = quotaGpu(spec.max, "*");
  int64_t typed_sum = 0;
  for (const auto& [type, milli] : spec.guaranteed.gpu_milli) {
    const int64_t max_milli = quotaGpu(spec.max, type);
    if (max_milli >= 0 && milli > max_milli) {
      r.error("guaranteed", "guaranteed " + type + " GPUs exceed max");
    } else if (max_all >= 0 && milli > max_all) {
      r.error("guaranteed",
              "guaranteed " + type + " GPUs (" + gpus(milli) +
                  ") exceed the max over all types (max.gpus.\"*\": " + gpus(max_all) + ")");
    }
    if (type != "*") typed_sum += milli;
  }
  if (max_all >= 0 && typed_sum > max_all) {
    bool reported = false;  // one type alone above it was named already
    for (const auto& [type, milli] : spec.guaranteed.gpu_milli) reported |= milli > max_all;
    if (!reported) {
      r.error("guaranteed",
              "guaranteed GPUs of all types together (" + gpus(typed_sum) +
                  ") exceed the max over all types (max.gpus.\"*\": " + gpus(max_all) + ")");
    }
  }
  cfg.queues.push_back(spec);
  const std::string self = spec.name;
  r.forEach("children", [&](ConfigReader& c, size_t) { readQueue(c, self, cfg, names, types); });
}

}  // namespace

Result<SchedulingConfig> parseSchedulingConfigString(const std::string& yaml_text) {
  INFERA_ASSIGN_OR_RETURN(YAML::Node root, loadYamlString(yaml_text));
  SchedulingConfig cfg;
  ConfigErrors errors;
  ConfigReader r(root, &errors);
  readSchedulingConfig(r, cfg);
  INFERA_RETURN_IF_ERROR(errors.toStatus());
  return cfg;
}

void readSchedulingConfig(ConfigReader& r, SchedulingConfig& cfg) {
  std::set<std::string> type_names;
  r.forEach("gpu_types", [&](ConfigReader& t, size_t) {
    GpuTypeInfo info;
    t.required("name", info.name);
    t.optional("rank", info.rank, 0, 1000);
    t.optional("cost", info.cost, 0.0, 1e9);
    if (!info.name.empty() && !type_names.insert(info.name).second) {
      t.error("name", "duplicate GPU type '" + info.name + "'");
    }
    cfg.gpu_types.push_back(info);
  });
  std::set<std::string> queue_names;
  r.forEach("queues",
            [&](ConfigReader& q, size_t) { readQueue(q, "", cfg, queue_names, type_names); });

  r.forEach("placement", [&](ConfigReader& p, size_t) {
    PlacementRule rule;
    p.object("match", [&](ConfigReader& m) {
      m.optional("namespace", rule.ns);
      m.optional("service_account", rule.service_account);
      m.object("labels", [&](ConfigReader& l) {
        if (!l.node().IsMap()) return;
        for (const auto& kv : l.node()) {
          std::string v;
          if (l.optional(kv.first.Scalar(), v)) rule.labels[kv.first.Scalar()] = v;
        }
      });
    });
    p.optional("queue", rule.queue);
    p.optional("spread", rule.spread);
    int tier = -1;
    if (p.optional("tier", tier, 0, 2)) rule.tier = static_cast<Tier>(tier);
    if (rule.queue.empty() == rule.spread.empty()) {
      p.error("", "needs exactly one of queue or spread");
    }
    std::vector<std::string> targets = rule.spread;
    if (!rule.queue.empty()) targets.push_back(rule.queue);
    for (const auto& q : targets) {
      if (!queue_names.empty() && queue_names.count(q) == 0) {
        p.error(rule.queue.empty() ? "spread" : "queue", "unknown queue '" + q + "'");
      }
    }
    cfg.placement.push_back(rule);
  });

  r.object("proportional", [&](ConfigReader& p) {
    p.optional("enabled", cfg.proportional.enabled);
    p.optional("slack", cfg.proportional.slack, 0.0, 10.0);
    std::string mode = "check";
    p.optionalEnum("mode", mode, {"check", "set"});
    cfg.proportional.set_requests = mode == "set";
  });

  r.forEach("idle_reclaim", [&](ConfigReader& p, size_t) {
    IdlePolicy pol;
    p.required("name", pol.name);
    p.object("match", [&](ConfigReader& m) {
      m.object("labels", [&](ConfigReader& l) {
        if (!l.node().IsMap()) return;
        for (const auto& kv : l.node()) {
          std::string v;
          if (l.optional(kv.first.Scalar(), v)) pol.match_labels[kv.first.Scalar()] = v;
        }
      });
    });
    p.required("idle_hours", pol.idle_hours, 0.0, 24.0 * 365);
    p.optional("utilization_below", pol.utilization_below, 0.0, 1.0);
    cfg.idle_reclaim.push_back(pol);
  });
  r.finish();
}

Result<SchedulingConfig> loadSchedulingConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::notFound("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parseSchedulingConfigString(ss.str());
  if (!r.ok()) return r.status().withContext(path);
  return r;
}

}  // namespace infera::sched
