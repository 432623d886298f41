#include "features/internal/registry.h"

#include <dirent.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/config.h"
#include "core/json.h"
#include "core/utf8.h"

namespace infera::features {
namespace {

constexpr int64_t kMinWindow = 60;
constexpr int64_t kMaxWindow = 30 * 86400;
constexpr int64_t kMaxBuckets = 1440;

int lineOf(const YAML::Node& n) {
  const auto m = n.Mark();
  return m.line >= 0 ? m.line + 1 : 0;
}

bool numeric(Scalar s) {
  return s == Scalar::kInt64 || s == Scalar::kInt32 || s == Scalar::kDouble || s == Scalar::kFloat;
}

std::optional<AggFunction> parseAggFunction(const std::string& s) {
  if (s == "count") return AggFunction::kCount;
  if (s == "sum") return AggFunction::kSum;
  if (s == "avg" || s == "mean") return AggFunction::kAvg;
  if (s == "min") return AggFunction::kMin;
  if (s == "max") return AggFunction::kMax;
  if (s == "last") return AggFunction::kLast;
  if (s == "distinct_count" || s == "approx_count_distinct") return AggFunction::kDistinctCount;
  return std::nullopt;
}

// The definitions of one file, read with ConfigReader; cross-references are checked afterwards.
struct RawView {
  FeatureView view;
  std::vector<std::pair<std::string, int>> entity_names;  // with lines
  std::string path;
  int source_line = 0;
};
struct RawProjection {
  std::string view;
  std::vector<std::string> features;
  std::string alias;
  std::string path;
  int line = 0;
};
struct RawService {
  FeatureService service;
  std::vector<RawProjection> projections;
};

struct Builder {
  ConfigErrors errors;
  std::shared_ptr<Registry> reg = std::make_shared<Registry>();
  std::vector<RawView> views;
  std::vector<RawService> services;
  std::map<std::string, std::string> names;  // every definition's name -> where
  bool project_seen = false;

  void duplicate(ConfigReader& r, const std::string& kind, const std::string& name,
                 const std::string& file) {
    const std::string key = kind + ":" + name;
    auto [it, inserted] = names.emplace(key, file + ":" + std::to_string(r.line()));
    if (!inserted) r.error("name", kind + " '" + name + "' is already defined at " + it->second);
  }

  void readDuration(ConfigReader& r, const std::string& key, int64_t& out) {
    if (!r.present(key)) {
      r.optional(key, out);  // marks it seen
      return;
    }
    std::string s;
    if (!r.optional(key, s)) return;
    auto d = parseDuration(s);
    if (!d.ok()) {
      r.error(key, d.status().message());
      return;
    }
    out = *d;
  }

  void readFile(const std::string& file, const YAML::Node& root) {
    ConfigReader r(root, &errors, file + ":");
    // The path prefix "file:" makes every message read "file:key (line N): ..."; childPath adds
    // '.'.
    std::string project;
    if (r.optional("project", project)) {
      if (project_seen && project != reg->project) {
        r.error("project", "the project is already named '" + reg->project + "' in another file");
      }
      project_seen = true;
      reg->project = project;
    }
    r.forEach("entities", [&](ConfigReader& e, size_t) {
      auto ent = std::make_unique<Entity>();
      e.required("name", ent->name);
      ent->origin = {file, e.line()};
      std::vector<std::string> keys;
      if (e.optional("join_keys", keys)) {
        if (keys.size() != 1)
          e.error("join_keys",
                  "an entity has exactly one join key, got " + std::to_string(keys.size()));
      }
      ent->join_key = keys.empty() ? ent->name : keys[0];
      std::string vt = "int64";
      e.optional("value_type", vt);
      auto t = parseFeatureType(vt);
      if (!t || t->list || t->scalar == Scalar::kDouble || t->scalar == Scalar::kFloat) {
        e.error("value_type", "bad entity key type '" + vt +
                                  "' (int64, int32, string, bytes, bool or unix_timestamp)");
      } else {
        ent->type = t->scalar;
      }
      std::string ignored;
      e.optional("description", ignored);
      e.optional("owner", ignored);
      if (ent->name.empty()) return;
      duplicate(e, "entity", ent->name, file);
      reg->entities.emplace(ent->name, std::move(ent));
    });
    r.forEach("push_sources", [&](ConfigReader& p, size_t) {
      PushSource ps;
      p.required("name", ps.name);
      ps.origin = {file, p.line()};
      p.optional("timestamp_field", ps.timestamp_field);
      p.optional("created_timestamp_column", ps.created_column);
      std::string ignored;
      p.optional("description", ignored);
      p.optional("owner", ignored);
      if (ps.name.empty()) return;
      duplicate(p, "push source", ps.name, file);
      reg->push_sources.emplace(ps.name, std::move(ps));
    });
    r.forEach("feature_views", [&](ConfigReader& v, size_t) { readView(file, v); });
    r.forEach("feature_services", [&](ConfigReader& s, size_t) { readService(file, s); });
    r.finish();
  }

  void readView(const std::string& file, ConfigReader& v) {
    RawView raw;
    FeatureView& fv = raw.view;
    raw.path = v.path();
    v.required("name", fv.name);
    fv.origin = {file, v.line()};
    if (v.present("entities")) {
      const YAML::Node n = v.node()["entities"];
      std::vector<std::string> given;
      if (v.optional("entities", given)) {
        for (size_t i = 0; i < given.size(); ++i) {
          raw.entity_names.push_back({given[i], lineOf(n.IsSequence() ? n[i] : n)});
        }
      }
    } else {
      v.error("", "a feature view needs at least one entity (entities: [...])");
      std::vector<std::string> none;
      v.optional("entities", none);
    }
    readDuration(v, "ttl", fv.ttl_s);
    v.optional("online", fv.online);
    if (v.optional("source", fv.source)) raw.source_line = lineOf(v.node()["source"]);
    std::string ignored;
    v.optional("description", ignored);
    v.optional("owner", fv.owner);
    v.forEach("schema", [&](ConfigReader& f, size_t) {
      Feature feat;
      f.required("name", feat.name);
      std::string dtype;
      if (f.required("dtype", dtype)) {
        auto t = parseFeatureType(dtype);
        if (!t) {
          f.error("dtype",
                  "bad type '" + dtype +
                      "' (int64, int32, double, float, string, bytes, bool, unix_timestamp, or "
                      "Array(T) of them)");
        } else {
          feat.type = *t;
        }
      }
      f.optional("description", ignored);
      addFeature(f, fv, std::move(feat));
    });
    v.forEach("aggregations", [&](ConfigReader& a, size_t) {
      Feature feat;
      Aggregation agg;
      a.required("name", feat.name);
      std::string fn;
      if (a.required("function", fn)) {
        auto f = parseAggFunction(fn);
        if (!f) {
          a.error("function", "unknown aggregation '" + fn +
                                  "' (count, sum, avg, min, max, last, distinct_count)");
        } else {
          agg.function = *f;
        }
      }
      a.optional("column", agg.column);
      std::string dtype = "double";
      if (a.optional("dtype", dtype)) {
        auto t = parseFeatureType(dtype);
        if (!t || t->list) {
          a.error("dtype", "bad input type '" + dtype + "' (a scalar type)");
        } else {
          agg.column_type = *t;
        }
      }
      if (agg.column.empty() && agg.function != AggFunction::kCount) {
        a.error("", std::string(aggFunctionName(agg.function)) + " needs a column");
      }
      if ((agg.function == AggFunction::kSum || agg.function == AggFunction::kAvg ||
           agg.function == AggFunction::kMin || agg.function == AggFunction::kMax) &&
          !numeric(agg.column_type.scalar)) {
        a.error("dtype", std::string(aggFunctionName(agg.function)) + " needs a numeric column");
      }
      agg.window_s = 0;
      readDuration(a, "window", agg.window_s);
      if (!a.present("window")) a.error("", "window is required");
      if (agg.window_s && (agg.window_s < kMinWindow || agg.window_s > kMaxWindow)) {
        a.error("window", "must be from 1m to 30d");
      }
      agg.bucket_s = std::max<int64_t>(agg.window_s / 60, 1);
      readDuration(a, "bucket", agg.bucket_s);
      if (agg.bucket_s <= 0 || (agg.window_s && agg.window_s % agg.bucket_s != 0)) {
        a.error("bucket", "must divide the window");
      } else if (agg.window_s / agg.bucket_s > kMaxBuckets) {
        a.error("bucket", "at most " + std::to_string(kMaxBuckets) + " buckets per window");
      }
      switch (agg.function) {
        case AggFunction::kCount:
        case AggFunction::kDistinctCount:
          feat.type = {Scalar::kInt64, false};
          break;
        case AggFunction::kLast:
          feat.type = agg.column_type;
          break;
        default:
          feat.type = {Scalar::kDouble, false};
          break;
      }
      feat.agg = static_cast<int>(fv.aggregations.size());
      fv.aggregations.push_back(agg);
      addFeature(a, fv, std::move(feat));
    });
    if (!fv.aggregated() && fv.features.empty() && !fv.name.empty()) {
      v.error("", "feature view '" + fv.name + "' has no features (schema: or aggregations:)");
    }
    if (fv.aggregated() && v.present("schema")) {
      v.error("schema", "a view has either schema: or aggregations:, not both");
    }
    if (fv.aggregated() && fv.source.empty())
      v.error("", "an aggregation view needs a push source (source:)");
    if (fv.aggregated() && fv.ttl_s == 0) {
      for (const auto& a : fv.aggregations) fv.ttl_s = std::max(fv.ttl_s, a.window_s);
    }
    if (fv.name.empty()) return;
    duplicate(v, "feature view", fv.name, file);
    views.push_back(std::move(raw));
  }

  void addFeature(ConfigReader& f, FeatureView& fv, Feature feat) {
    if (feat.name.empty()) return;
    if (!fv.by_name.emplace(feat.name, fv.features.size()).second) {
      f.error("name", "duplicate feature '" + feat.name + "' in view '" + fv.name + "'");
      return;
    }
    fv.features.push_back(std::move(feat));
  }

  void readService(const std::string& file, ConfigReader& s) {
    RawService raw;
    s.required("name", raw.service.name);
    raw.service.origin = {file, s.line()};
    std::string ignored;
    s.optional("description", ignored);
    s.optional("owner", raw.service.owner);
    // features: ["view", "view:feature", ...]; projections: [{view, features, alias}].
    std::vector<std::string> refs;
    if (s.optional("features", refs)) {
      const YAML::Node list = s.node()["features"];
      for (size_t i = 0; i < refs.size(); ++i) {
        RawProjection p;
        p.path = s.childPath("features") + "[" + std::to_string(i) + "]";
        p.line = lineOf(list.IsSequence() ? list[i] : list);
        const size_t colon = refs[i].find(':');
        p.view = refs[i].substr(0, colon);
        if (colon != std::string::npos) p.features.push_back(refs[i].substr(colon + 1));
        // "view:a" and "view:b" are one projection of the view.
        auto same = std::find_if(
            raw.projections.begin(), raw.projections.end(),
            [&](const RawProjection& q) { return q.view == p.view && q.alias.empty(); });
        if (same != raw.projections.end() && !p.features.empty() && !same->features.empty()) {
          same->features.push_back(p.features[0]);
          continue;
        }
        raw.projections.push_back(std::move(p));
      }
    }
    s.forEach("projections", [&](ConfigReader& pr, size_t) {
      RawProjection p;
      p.path = pr.path();
      p.line = pr.line();
      pr.required("view", p.view);
      pr.optional("features", p.features);
      pr.optional("alias", p.alias);
      raw.projections.push_back(std::move(p));
    });
    if (raw.projections.empty())
      s.error("", "a feature service needs features: [...] or projections: [...]");
    if (raw.service.name.empty()) return;
    duplicate(s, "feature service", raw.service.name, file);
    services.push_back(std::move(raw));
  }

  void link() {
    for (const auto& [name, ent] : reg->entities) {
      auto [it, inserted] = reg->by_join_key.emplace(ent->join_key, ent.get());
      if (!inserted && it->second->type != ent->type) {
        errors.add(ent->origin.file + ":entities", ent->origin.line,
                   "join key '" + ent->join_key + "' of entity '" + name +
                       "' has another type in entity '" + it->second->name + "'");
      }
    }
    for (auto& raw : views) {
      FeatureView& fv = raw.view;
      std::set<std::string> keys;
      for (const auto& [en, line] : raw.entity_names) {
        auto it = reg->entities.find(en);
        if (it == reg->entities.end()) {
          errors.add(raw.path + ".entities", line, "unknown entity '" + en + "'");
          continue;
        }
        if (!keys.insert(it->second->join_key).second) {
          errors.add(raw.path + ".entities", line,
                     "join key '" + it->second->join_key + "' appears twice");
        }
        fv.entities.push_back(it->second.get());
      }
      for (const auto& f : fv.features) {
        if (keys.count(f.name)) {
          errors.add(raw.path, fv.origin.line,
                     "feature '" + f.name + "' has the name of a join key");
        }
      }
      if (!fv.source.empty() && !reg->push_sources.count(fv.source)) {
        errors.add(raw.path + ".source", raw.source_line,
                   "unknown push source '" + fv.source + "'");
      }
      for (const auto& a : fv.aggregations) {
        if (!a.column.empty() && keys.count(a.column)) {
          errors.add(raw.path + ".aggregations", fv.origin.line,
                     "column '" + a.column + "' is a join key");
        }
      }
    }
    for (auto& raw : views) {
      auto v = std::make_unique<FeatureView>(std::move(raw.view));
      if (!v->source.empty()) reg->views_by_source[v->source].push_back(v.get());
      reg->views.emplace(v->name, std::move(v));
    }
    for (auto& raw : services) {
      FeatureService svc = std::move(raw.service);
      std::set<std::string> used;
      for (auto& p : raw.projections) {
        const FeatureView* v = reg->view(p.view);
        if (!v) {
          errors.add(p.path, p.line, "unknown feature view '" + p.view + "'");
          continue;
        }
        Projection proj;
        proj.view = v;
        proj.alias = p.alias.empty() ? v->name : p.alias;
        if (!used.insert(proj.alias).second) {
          errors.add(p.path, p.line,
                     "view '" + proj.alias + "' is projected twice (give one an alias)");
        }
        if (p.features.empty()) {
          for (size_t i = 0; i < v->features.size(); ++i) proj.features.push_back(i);
        }
        for (const auto& f : p.features) {
          auto it = v->by_name.find(f);
          if (it == v->by_name.end()) {
            errors.add(p.path, p.line, "unknown feature '" + f + "' in view '" + v->name + "'");
          } else {
            proj.features.push_back(it->second);
          }
        }
        svc.projections.push_back(std::move(proj));
      }
      reg->services.emplace(svc.name, std::move(svc));
    }
  }

  // Keeps the ids of kept views and features; a feature whose type changed gets a new id (the
  // stored values of the old type are never read as the new one).
  void assignIds(const StorageIds& previous) {
    StorageIds& ids = reg->ids;
    ids.next_view = previous.next_view;
    for (auto& [name, v] : reg->views) {
      auto prev = previous.views.find(name);
      StorageIds::View sv;
      if (prev != previous.views.end()) {
        sv.id = prev->second.id;
        sv.next_feature = prev->second.next_feature;
      } else {
        sv.id = ids.next_view++;
      }
      v->id = sv.id;
      for (auto& f : v->features) {
        const std::string tn =
            typeName(f.type) +
            (f.agg >= 0 ? std::string("/") + aggFunctionName(v->aggregations[f.agg].function) : "");
        if (prev != previous.views.end()) {
          auto pf = prev->second.features.find(f.name);
          if (pf != prev->second.features.end() && pf->second.second == tn) {
            f.id = pf->second.first;
          }
        }
        if (f.id == 0) f.id = sv.next_feature++;
        sv.features[f.name] = {f.id, tn};
        v->max_feature_id = std::max(v->max_feature_id, f.id);
      }
      ids.views[name] = std::move(sv);
    }
  }
};

}  // namespace

const char* aggFunctionName(AggFunction f) {
  switch (f) {
    case AggFunction::kCount:
      return "count";
    case AggFunction::kSum:
      return "sum";
    case AggFunction::kAvg:
      return "avg";
    case AggFunction::kMin:
      return "min";
    case AggFunction::kMax:
      return "max";
    case AggFunction::kLast:
      return "last";
    case AggFunction::kDistinctCount:
      return "distinct_count";
  }
  return "?";
}

const FeatureView* Registry::viewById(uint32_t id) const {
  for (const auto& [n, v] : views) {
    if (v->id == id) return v.get();
  }
  return nullptr;
}

Result<int64_t> parseDuration(std::string_view s) {
  if (s.empty()) return Status::invalidArgument("empty duration");
  int64_t n = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || n < 0) {
    return Status::invalidArgument("bad duration '" + std::string(s) + "' (e.g. 90s, 15m, 1h, 7d)");
  }
  const std::string_view unit(p, static_cast<size_t>(s.data() + s.size() - p));
  int64_t mult = 0;
  if (unit.empty() || unit == "s") mult = 1;
  if (unit == "m") mult = 60;
  if (unit == "h") mult = 3600;
  if (unit == "d") mult = 86400;
  if (unit == "w") mult = 7 * 86400;
  if (mult == 0)
    return Status::invalidArgument("bad duration unit in '" + std::string(s) + "' (s, m, h, d, w)");
  return n * mult;
}

Result<std::shared_ptr<const Registry>> buildRegistry(
    const std::map<std::string, std::string>& files, const StorageIds& previous) {
  Builder b;
  b.reg->files = files;
  std::vector<std::string> syntax;
  for (const auto& [name, text] : files) {
    // The registry is written out as JSON and its names into answers: text, not bytes.
    if (!validUtf8(text) || !validUtf8(name)) {
      syntax.push_back(toValidUtf8(name) + ": not valid UTF-8");
      continue;
    }
    auto root = loadYamlString(text);
    if (!root.ok()) {
      syntax.push_back(name + ": " + root.status().message());
      continue;
    }
    b.readFile(name, *root);
  }
  if (!syntax.empty()) {
    std::string msg;
    for (const auto& s : syntax) msg += (msg.empty() ? "" : "\n") + s;
    return Status::invalidArgument(msg);
  }
  b.link();
  // ConfigReader joined "file:" and the key with '.', giving "file:.key": drop the dot.
  if (!b.errors.empty()) {
    ConfigErrors fixed;
    for (auto e : b.errors.all()) {
      const size_t at = e.path.find(":.");
      if (at != std::string::npos) e.path.erase(at + 1, 1);
      fixed.add(e.path, e.line, e.message);
    }
    return fixed.toStatus("feature repository");
  }
  b.assignIds(previous);
  return std::shared_ptr<const Registry>(std::move(b.reg));
}

Result<std::map<std::string, std::string>> readRepositoryDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Status::notFound("cannot open feature repository directory " + dir);
  std::map<std::string, std::string> files;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.empty() || n[0] == '.') continue;
    if (!(n.ends_with(".yaml") || n.ends_with(".yml"))) continue;
    std::ifstream in(dir + "/" + n);
    if (!in) continue;
    std::stringstream ss;
    ss << in.rdbuf();
    files[n] = ss.str();
  }
  ::closedir(d);
  if (files.empty()) return Status::notFound("no *.yaml files in feature repository " + dir);
  return files;
}

namespace {
std::string ownerChange(const std::string& from, const std::string& to) {
  auto name = [](const std::string& o) { return o.empty() ? std::string("shared") : "team " + o; };
  return "owner " + name(from) + " -> " + name(to);
}
}  // namespace

Plan planChanges(const Registry& cur, const Registry& next) {
  Plan plan;
  auto count = [](size_t n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  for (const auto& [n, e] : next.entities) {
    auto it = cur.entities.find(n);
    if (it == cur.entities.end()) {
      plan.changes.push_back("+ entity " + n + " (join key " + e->join_key + ", " +
                             typeName({e->type, false}) + ")");
    } else if (it->second->join_key != e->join_key || it->second->type != e->type) {
      plan.changes.push_back("~ entity " + n + ": join key " + it->second->join_key + " " +
                             typeName({it->second->type, false}) + " -> " + e->join_key + " " +
                             typeName({e->type, false}));
    }
  }
  for (const auto& [n, e] : cur.entities) {
    if (!next.entities.count(n)) plan.changes.push_back("- entity " + n);
  }
  for (const auto& [n, ps] : next.push_sources) {
    if (!cur.push_sources.count(n)) plan.changes.push_back("+ push source " + n);
  }
  for (const auto& [n, ps] : cur.push_sources) {
    if (!next.push_sources.count(n)) plan.changes.push_back("- push source " + n);
  }
  // Features a service keeps serving in both registries: their type and keys must not change.
  std::set<std::pair<std::string, std::string>> served;
  for (const auto& [sn, svc] : cur.services) {
    auto nit = next.services.find(sn);
    if (nit == next.services.end()) continue;
    for (const auto& p : nit->second.projections) {
      for (size_t fi : p.features) served.insert({p.view->name, p.view->features[fi].name});
    }
  }
  for (const auto& [n, v] : next.views) {
    const FeatureView* old = cur.view(n);
    if (!old) {
      plan.changes.push_back(
          "+ feature view " + n + " (" +
          count(v->features.size(), v->aggregated() ? "aggregation" : "feature") + ")");
      plan.created_views.push_back(v.get());
      continue;
    }
    std::vector<std::string> diffs;
    for (const auto& f : v->features) {
      const Feature* of = old->feature(f.name);
      if (!of) {
        diffs.push_back("+ " + f.name);
      } else if (of->id != f.id) {
        diffs.push_back(f.name + " " + typeName(of->type) + " -> " + typeName(f.type));
        if (served.count({n, f.name})) {
          plan.breaking.push_back("feature view " + n + ": feature " + f.name + " changes type (" +
                                  typeName(of->type) + " -> " + typeName(f.type) +
                                  ") but a feature service serves it");
        }
      }
    }
    for (const auto& f : old->features) {
      if (!v->feature(f.name)) diffs.push_back("- " + f.name);
    }
    std::vector<std::string> oldkeys, newkeys;
    for (const auto* e : old->entities)
      oldkeys.push_back(e->join_key + ":" + typeName({e->type, false}));
    for (const auto* e : v->entities)
      newkeys.push_back(e->join_key + ":" + typeName({e->type, false}));
    if (oldkeys != newkeys) {
      diffs.push_back("entity keys change");
      bool is_served = false;
      for (const auto& [vn, fn] : served) is_served = is_served || vn == n;
      if (is_served)
        plan.breaking.push_back("feature view " + n +
                                ": its entity keys change but a feature service serves it");
    }
    if (old->ttl_s != v->ttl_s)
      diffs.push_back("ttl " + std::to_string(old->ttl_s) + "s -> " + std::to_string(v->ttl_s) +
                      "s");
    if (old->source != v->source)
      diffs.push_back("source '" + old->source + "' -> '" + v->source + "'");
    if (old->online != v->online)
      diffs.push_back(std::string("online ") + (v->online ? "on" : "off"));
    if (old->owner != v->owner) diffs.push_back(ownerChange(old->owner, v->owner));
    if (!diffs.empty()) {
      std::string s = "~ feature view " + n + ":";
      for (const auto& d : diffs) s += " " + d + ";";
      s.pop_back();
      plan.changes.push_back(s);
    }
  }
  for (const auto& [n, v] : cur.views) {
    if (!next.view(n)) {
      plan.changes.push_back("- feature view " + n + " (its stored values are deleted)");
      plan.dropped_views.push_back(v->id);
    }
  }
  for (const auto& [n, s] : next.services) {
    auto it = cur.services.find(n);
    size_t nf = 0;
    for (const auto& p : s.projections) nf += p.features.size();
    if (it == cur.services.end()) {
      plan.changes.push_back("+ feature service " + n + " (" + count(nf, "feature") + ")");
      continue;
    }
    size_t of = 0;
    for (const auto& p : it->second.projections) of += p.features.size();
    bool same = of == nf && it->second.projections.size() == s.projections.size();
    for (size_t i = 0; same && i < s.projections.size(); ++i) {
      same = s.projections[i].view->name == it->second.projections[i].view->name &&
             s.projections[i].features == it->second.projections[i].features &&
             s.projections[i].alias == it->second.projections[i].alias;
    }
    if (!same) plan.changes.push_back("~ feature service " + n + " (" + count(nf, "feature") + ")");
    if (it->second.owner != s.owner)
      plan.changes.push_back("~ feature service " + n + ": " +
                             ownerChange(it->second.owner, s.owner));
  }
  for (const auto& [n, s] : cur.services) {
    if (!next.services.count(n)) plan.changes.push_back("- feature service " + n);
  }
  if (cur.project != next.project)
    plan.changes.push_back("~ project " + cur.project + " -> " + next.project);
  return plan;
}

std::string serializeRegistry(const Registry& r) {
  nlohmann::json j;
  j["files"] = r.files;
  j["next_view"] = r.ids.next_view;
  nlohmann::json views = nlohmann::json::object();
  for (const auto& [n, v] : r.ids.views) {
    nlohmann::json fs = nlohmann::json::object();
    for (const auto& [fn, f] : v.features) fs[fn] = {f.first, f.second};
    views[n] = {{"id", v.id}, {"next_feature", v.next_feature}, {"features", fs}};
  }
  j["views"] = views;
  return dumpJson(j);
}

Result<std::pair<std::map<std::string, std::string>, StorageIds>> parseSerializedRegistry(
    const std::string& blob) {
  try {
    const nlohmann::json j = nlohmann::json::parse(blob);
    std::map<std::string, std::string> files =
        j.at("files").get<std::map<std::string, std::string>>();
    StorageIds ids;
    ids.next_view = j.at("next_view").get<uint32_t>();
    for (const auto& [n, v] : j.at("views").items()) {
      StorageIds::View sv;
      sv.id = v.at("id").get<uint32_t>();
      sv.next_feature = v.at("next_feature").get<uint32_t>();
      for (const auto& [fn, f] : v.at("features").items()) {
        sv.features[fn] = {f.at(0).get<uint32_t>(), f.at(1).get<std::string>()};
      }
      ids.views[n] = std::move(sv);
    }
    return std::make_pair(std::move(files), std::move(ids));
  } catch (const std::exception& e) {
    return Status::internal(std::string("the stored feature registry is unreadable: ") + e.what());
  }
}

}  // namespace infera::features
