#include "scheduler/kube/internal/objects.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <limits>

#include "scheduler/scheduler.h"

namespace infera::sched::kube {
namespace {

const Json* find(const Json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string str(const Json& j, std::string_view key) {
  const Json* v = find(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

std::map<std::string, std::string> stringMap(const Json* j) {
  std::map<std::string, std::string> out;
  if (j == nullptr || !j->is_object()) return out;
  for (const auto& [k, v] : j->items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

// A quantity field of a resource list (requests, limits, allocatable), in milli-units.
int64_t quantity(const Json* list, const std::string& name) {
  if (list == nullptr) return 0;
  const Json* v = find(*list, name);
  if (v == nullptr) return 0;
  std::optional<int64_t> q;
  if (v->is_string()) q = parseQuantityMilli(v->get<std::string>());
  if (v->is_number()) q = static_cast<int64_t>(v->get<double>() * 1000);
  return q.value_or(0);
}

bool parseInt(const std::string& s, int64_t* out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

struct Requests {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t gpus = 0;
  int64_t gpu_milli = 0;
};

// One container's requests; extended resources (GPUs) may be given as limits only.
Requests containerRequests(const Json& c, const KubeConfig& cfg) {
  Requests r;
  const Json* res = find(c, "resources");
  if (res == nullptr) return r;
  const Json* req = find(*res, "requests");
  const Json* lim = find(*res, "limits");
  auto pick = [&](const std::string& name) {
    const int64_t v = quantity(req, name);
    return v != 0 ? v : quantity(lim, name);
  };
  r.cpu_milli = pick("cpu");
  r.memory_bytes = pick("memory") / 1000;
  r.gpus = pick(cfg.gpu_resource) / 1000;
  r.gpu_milli = pick(cfg.gpu_milli_resource) / 1000;
  return r;
}

std::vector<std::string> stringList(const Json* j) {
  std::vector<std::string> out;
  if (j == nullptr || !j->is_array()) return out;
  for (const Json& v : *j) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

std::vector<NodeSelectorRequirement> requirements(const Json* list) {
  std::vector<NodeSelectorRequirement> out;
  if (list == nullptr || !list->is_array()) return out;
  for (const Json& r : *list) {
    out.push_back(
        NodeSelectorRequirement{str(r, "key"), str(r, "operator"), stringList(find(r, "values"))});
  }
  return out;
}

// spec.nodeSelector, spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
// and spec.tolerations: the hard constraints kube-scheduler's filters apply.
NodeConstraints podConstraints(const Json& spec) {
  NodeConstraints c;
  c.node_selector = stringMap(find(spec, "nodeSelector"));
  const Json* affinity = find(spec, "affinity");
  const Json* node_affinity = affinity != nullptr ? find(*affinity, "nodeAffinity") : nullptr;
  const Json* required =
      node_affinity != nullptr
          ? find(*node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
          : nullptr;
  const Json* terms = required != nullptr ? find(*required, "nodeSelectorTerms") : nullptr;
  if (terms != nullptr && terms->is_array()) {
    for (const Json& t : *terms) {
      c.required_terms.push_back(NodeSelectorTerm{requirements(find(t, "matchExpressions")),
                                                  requirements(find(t, "matchFields"))});
    }
  }
  const Json* tolerations = find(spec, "tolerations");
  if (tolerations != nullptr && tolerations->is_array()) {
    for (const Json& t : *tolerations) {
      Toleration tol;
      tol.key = str(t, "key");
      tol.op = str(t, "operator");
      if (tol.op.empty()) tol.op = "Equal";
      tol.value = str(t, "value");
      tol.effect = str(t, "effect");
      c.tolerations.push_back(std::move(tol));
    }
  }
  return c;
}

LabelSelector labelSelector(const Json* sel) {
  LabelSelector out;
  if (sel == nullptr || !sel->is_object()) return out;
  out.match_labels = stringMap(find(*sel, "matchLabels"));
  out.match_expressions = requirements(find(*sel, "matchExpressions"));
  return out;
}

// A selector that selects nothing (what a null labelSelector does in an affinity term or a
// spread constraint): an expression no label satisfies.
LabelSelector selectsNothing() {
  LabelSelector out;
  out.match_expressions.push_back({"", "In", {}});
  return out;
}

// An integer field as an int, clamped to int's range (a narrowing cast would turn 10^12 into a
// negative skew); `fallback` when absent or not an integer.
int clampedInt(const Json* v, int fallback) {
  if (v == nullptr || !v->is_number_integer()) return fallback;
  if (v->is_number_unsigned()) {
    return static_cast<int>(
        std::min<uint64_t>(v->get<uint64_t>(), uint64_t{std::numeric_limits<int>::max()}));
  }
  return static_cast<int>(std::clamp<int64_t>(v->get<int64_t>(), std::numeric_limits<int>::min(),
                                              std::numeric_limits<int>::max()));
}

// A preferred term's weight, within the API server's 1-100 (0 when absent: it adds nothing).
int preferredWeight(const Json& term) {
  return std::clamp(clampedInt(find(term, "weight"), 0), 0, 100);
}

// spec.affinity.<kind>.<when> (requiredDuring... or preferredDuring...) when it is a list.
const Json* affinityList(const Json& spec, const char* kind, const char* when) {
  const Json* affinity = find(spec, "affinity");
  const Json* a = affinity != nullptr ? find(*affinity, kind) : nullptr;
  const Json* list = a != nullptr ? find(*a, when) : nullptr;
  return list != nullptr && list->is_array() ? list : nullptr;
}

// The labelSelector of a term or a spread constraint: a null (or non-object) one selects nothing.
LabelSelector termSelector(const Json& from) {
  const Json* sel = find(from, "labelSelector");
  return sel != nullptr && sel->is_object() ? labelSelector(sel) : selectsNothing();
}

// matchLabelKeys: the pod's own values of those labels, ANDed into the selector as kube-scheduler
// does (a key the pod lacks is ignored).
void addMatchLabelKeys(LabelSelector& sel, const Json& from,
                       const std::map<std::string, std::string>& labels) {
  for (const std::string& key : stringList(find(from, "matchLabelKeys"))) {
    const auto it = labels.find(key);
    if (it != labels.end()) sel.match_expressions.push_back({key, "In", {it->second}});
  }
}

// One PodAffinityTerm. False when its namespaceSelector has labels: namespaces are not watched,
// so their labels are unknown (the term is then read as selecting every namespace).
bool affinityTerm(const Json& t, const std::map<std::string, std::string>& labels,
                  PodAffinityTerm& term) {
  term.selector = termSelector(t);
  addMatchLabelKeys(term.selector, t, labels);
  term.namespaces = stringList(find(t, "namespaces"));
  // mismatchLabelKeys (and matchLabelKeys of these terms) the API server has already merged
  // into labelSelector; ANDing matchLabelKeys once more changes nothing.
  term.topology_key = str(t, "topologyKey");
  const Json* ns_sel = find(t, "namespaceSelector");
  if (ns_sel == nullptr || !ns_sel->is_object()) return true;
  const LabelSelector nss = labelSelector(ns_sel);
  term.all_namespaces = true;  // {} (or empty lists): every namespace
  return nss.match_labels.empty() && nss.match_expressions.empty();
}

// A topologySpreadConstraints entry. False when it asks for node inclusion policies the engine
// does not model.
bool spreadConstraint(const Json& c, const std::map<std::string, std::string>& labels,
                      SpreadConstraint& sc) {
  sc.max_skew = std::max(1, clampedInt(find(c, "maxSkew"), 1));  // the API server wants > 0
  sc.min_domains = clampedInt(find(c, "minDomains"), 1);
  sc.topology_key = str(c, "topologyKey");
  sc.selector = termSelector(c);
  addMatchLabelKeys(sc.selector, c, labels);
  return str(c, "nodeAffinityPolicy") != "Ignore" && str(c, "nodeTaintsPolicy") != "Honor";
}

// spec.affinity.podAffinity / podAntiAffinity (their required terms) and
// spec.topologySpreadConstraints (those with whenUnsatisfiable DoNotSchedule). What the engine
// cannot honour is named in `unsupported`, and such a pod is not placed.
PodConstraints podTerms(const Json& spec, const std::map<std::string, std::string>& labels) {
  PodConstraints pc;
  std::string& unsupported = pc.unsupported;
  auto terms = [&](const char* kind, std::vector<PodAffinityTerm>& out) {
    const Json* req = affinityList(spec, kind, "requiredDuringSchedulingIgnoredDuringExecution");
    if (req == nullptr) return;
    for (const Json& t : *req) {
      PodAffinityTerm term;
      if (!affinityTerm(t, labels, term)) {
        // Such a pod is refused; as a running pod (bound by another scheduler) its anti-affinity
        // keeps every namespace's selected pods out, a superset of what it asks.
        unsupported = std::string(kind) + " namespaceSelector with labels";
        term.all_namespaces = std::string_view(kind) == "podAntiAffinity";
      }
      out.push_back(std::move(term));
    }
  };
  terms("podAffinity", pc.affinity);
  terms("podAntiAffinity", pc.anti_affinity);
  const Json* spread = find(spec, "topologySpreadConstraints");
  if (spread != nullptr && spread->is_array()) {
    for (const Json& c : *spread) {
      if (str(c, "whenUnsatisfiable") != "DoNotSchedule") continue;  // ScheduleAnyway: soft
      SpreadConstraint sc;
      if (!spreadConstraint(c, labels, sc)) {
        unsupported =
            "topologySpreadConstraints nodeAffinityPolicy Ignore / nodeTaintsPolicy Honor";
      }
      pc.spread.push_back(std::move(sc));
    }
  }
  return pc;
}

// The preferred terms (preferredDuringSchedulingIgnoredDuringExecution of nodeAffinity,
// podAffinity and podAntiAffinity) and ScheduleAnyway spread constraints. Being soft, what the
// engine cannot evaluate (a namespaceSelector with labels, node inclusion policies) is left out
// rather than refused: the pod may go anywhere such a term would have let it.
SoftConstraints softTerms(const Json& spec, const std::map<std::string, std::string>& labels) {
  SoftConstraints sc;
  auto preferred = [&](const char* kind) {
    return affinityList(spec, kind, "preferredDuringSchedulingIgnoredDuringExecution");
  };
  if (const Json* p = preferred("nodeAffinity")) {
    for (const Json& w : *p) {
      const Json* pref = find(w, "preference");
      if (pref == nullptr || !pref->is_object()) continue;
      sc.node_affinity.push_back(
          {preferredWeight(w), NodeSelectorTerm{requirements(find(*pref, "matchExpressions")),
                                                requirements(find(*pref, "matchFields"))}});
    }
  }
  auto podPreferred = [&](const char* kind, std::vector<WeightedPodTerm>& out) {
    const Json* p = preferred(kind);
    if (p == nullptr) return;
    for (const Json& w : *p) {
      const Json* t = find(w, "podAffinityTerm");
      WeightedPodTerm wt;
      wt.weight = preferredWeight(w);
      if (t != nullptr && t->is_object() && affinityTerm(*t, labels, wt.term)) {
        out.push_back(std::move(wt));
      }
    }
  };
  podPreferred("podAffinity", sc.affinity);
  podPreferred("podAntiAffinity", sc.anti_affinity);
  const Json* spread = find(spec, "topologySpreadConstraints");
  if (spread != nullptr && spread->is_array()) {
    for (const Json& c : *spread) {
      if (str(c, "whenUnsatisfiable") != "ScheduleAnyway") continue;
      SpreadConstraint s;
      if (spreadConstraint(c, labels, s)) sc.spread.push_back(std::move(s));
    }
  }
  return sc;
}

}  // namespace

std::optional<int64_t> parseQuantityMilli(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t i = 0;
  bool neg = false;
  if (text[0] == '+' || text[0] == '-') {
    neg = text[0] == '-';
    ++i;
  }
  size_t num_end = i;
  bool digits = false;
  while (num_end < text.size() &&
         ((text[num_end] >= '0' && text[num_end] <= '9') || text[num_end] == '.')) {
    digits |= text[num_end] != '.';
    ++num_end;
  }
  if (!digits) return std::nullopt;
  double value = 0;
  const auto [vp, vec] = std::from_chars(text.data() + i, text.data() + num_end, value);
  if (vec != std::errc() || vp != text.data() + num_end) return std::nullopt;
  const std::string_view suffix = text.substr(num_end);
  double scale = 1;
  if (suffix.empty()) {
    scale = 1;
  } else if (suffix == "m") {
    scale = 1e-3;
  } else if (suffix == "u") {
    scale = 1e-6;
  } else if (suffix == "n") {
    scale = 1e-9;
  } else if (suffix == "k") {
    scale = 1e3;
  } else if (suffix == "M") {
    scale = 1e6;
  } else if (suffix == "G") {
    scale = 1e9;
  } else if (suffix == "T") {
    scale = 1e12;
  } else if (suffix == "P") {
    scale = 1e15;
  } else if (suffix == "E") {
    scale = 1e18;
  } else if (suffix == "Ki") {
    scale = 1024.0;
  } else if (suffix == "Mi") {
    scale = 1024.0 * 1024;
  } else if (suffix == "Gi") {
    scale = 1024.0 * 1024 * 1024;
  } else if (suffix == "Ti") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (suffix == "Pi") {
    scale = 1024.0 * 1024 * 1024 * 1024 * 1024;
  } else if (suffix == "Ei") {
    scale = 1024.0 * 1024 * 1024 * 1024 * 1024 * 1024;
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    int exp = 0;
    const char* first = suffix.data() + 1;
    if (first < suffix.data() + suffix.size() && *first == '+') ++first;
    const auto [ep, eec] = std::from_chars(first, suffix.data() + suffix.size(), exp);
    if (eec != std::errc() || ep != suffix.data() + suffix.size() || exp > 30 || exp < -30) {
      return std::nullopt;
    }
    scale = std::pow(10.0, exp);
  } else {
    return std::nullopt;
  }
  // Kubernetes rounds a quantity up to its smallest unit; milli is ours.
  const double milli = std::ceil(value * scale * 1000 - 1e-6);
  if (milli > 9.2e18) return std::nullopt;
  return neg ? -static_cast<int64_t>(milli) : static_cast<int64_t>(milli);
}

int64_t parseTimestamp(std::string_view text) {
  std::tm tm{};
  int y, mo, d, h, mi, s;
  if (text.size() < 20 || std::sscanf(std::string(text).c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo,
                                      &d, &h, &mi, &s) != 6) {
    return 0;
  }
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<int64_t>(timegm(&tm));
}

std::string formatTimestamp(int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<KubeNode> nodeFromJson(const Json& node, const KubeConfig& cfg) {
  const Json* meta = find(node, "metadata");
  if (meta == nullptr || str(*meta, "name").empty()) {
    return Status::invalidArgument("node without metadata.name");
  }
  KubeNode out;
  out.name = str(*meta, "name");
  out.resource_version = str(*meta, "resourceVersion");
  out.spec.name = out.name;
  out.spec.labels = stringMap(find(*meta, "labels"));
  const Json* status = find(node, "status");
  const Json* alloc = status != nullptr ? find(*status, "allocatable") : nullptr;
  if (alloc == nullptr && status != nullptr) alloc = find(*status, "capacity");
  out.spec.cpu_milli = quantity(alloc, "cpu");
  out.spec.memory_mib = quantity(alloc, "memory") / 1000 / (1024 * 1024);
  const int64_t gpus = quantity(alloc, cfg.gpu_resource) / 1000;
  out.spec.gpus = static_cast<int>(std::min<int64_t>(gpus, kMaxGpusPerNode));
  if (out.spec.gpus > 0) {
    const auto it = out.spec.labels.find(cfg.gpu_type_label);
    out.spec.gpu_model = it != out.spec.labels.end() ? it->second : cfg.default_gpu_type;
  }
  const Json* spec = find(node, "spec");
  bool cordoned = false;
  if (spec != nullptr) {
    const Json* u = find(*spec, "unschedulable");
    cordoned = u != nullptr && u->is_boolean() && u->get<bool>();
    const Json* taints = find(*spec, "taints");
    if (taints != nullptr && taints->is_array()) {
      for (const Json& t : *taints) {
        out.spec.taints.push_back(Taint{str(t, "key"), str(t, "value"), str(t, "effect")});
      }
    }
  }
  std::string ready = "True";
  if (status != nullptr) {
    const Json* conds = find(*status, "conditions");
    if (conds != nullptr && conds->is_array()) {
      for (const Json& c : *conds) {
        if (str(c, "type") == "Ready") ready = str(c, "status");
      }
    }
  }
  // A closed node keeps its pods (they count for quota and for other pods' inter-pod terms) and
  // takes only pods that tolerate the taint Kubernetes' node controllers put on it
  // (TaintNodesByCondition; kube-scheduler's NodeUnschedulable filter checks the same toleration).
  // The taint is added here too, as the controllers may not have written it yet.
  auto closeWith = [&](const char* key) {
    out.spec.closed = true;
    const bool tainted =
        std::any_of(out.spec.taints.begin(), out.spec.taints.end(),
                    [&](const Taint& t) { return t.key == key && t.effect == "NoSchedule"; });
    if (!tainted) out.spec.taints.push_back(Taint{key, "", "NoSchedule"});
  };
  if (cordoned) closeWith("node.kubernetes.io/unschedulable");
  if (ready == "False") closeWith("node.kubernetes.io/not-ready");
  if (ready != "True" && ready != "False") closeWith("node.kubernetes.io/unreachable");
  return out;
}

Result<KubePod> podFromJson(const Json& pod, const KubeConfig& cfg) {
  const Json* meta = find(pod, "metadata");
  if (meta == nullptr || str(*meta, "name").empty()) {
    return Status::invalidArgument("pod without metadata.name");
  }
  KubePod out;
  out.uid = str(*meta, "uid");
  out.ns = str(*meta, "namespace");
  out.name = str(*meta, "name");
  out.resource_version = str(*meta, "resourceVersion");
  out.deleting =
      find(*meta, "deletionTimestamp") != nullptr && !find(*meta, "deletionTimestamp")->is_null();
  const auto annotations = stringMap(find(*meta, "annotations"));
  auto annotation = [&](const std::string& key) {
    const auto it = annotations.find(key);
    return it == annotations.end() ? std::string() : it->second;
  };
  PodSpec& s = out.spec;
  s.name = out.key();
  s.ns = out.ns;
  s.labels = stringMap(find(*meta, "labels"));
  s.terminating = out.deleting;
  s.creation_s = parseTimestamp(str(*meta, "creationTimestamp"));
  const Json* spec = find(pod, "spec");
  if (spec != nullptr) {
    out.scheduler_name = str(*spec, "schedulerName");
    out.node_name = str(*spec, "nodeName");
    s.service_account = str(*spec, "serviceAccountName");
    s.constraints = podConstraints(*spec);
    s.pod_constraints = podTerms(*spec, s.labels);
    s.soft = softTerms(*spec, s.labels);
    if (s.service_account.empty()) s.service_account = "default";
    s.priority = clampedInt(find(*spec, "priority"), s.priority);
    // Requests: the sum over containers, or the largest init container if larger (what
    // kube-scheduler's resource fit uses), plus the pod overhead.
    Requests sum;
    const Json* containers = find(*spec, "containers");
    if (containers != nullptr && containers->is_array()) {
      for (const Json& c : *containers) {
        const Requests r = containerRequests(c, cfg);
        sum.cpu_milli += r.cpu_milli;
        sum.memory_bytes += r.memory_bytes;
        sum.gpus += r.gpus;
        sum.gpu_milli += r.gpu_milli;
      }
    }
    const Json* inits = find(*spec, "initContainers");
    if (inits != nullptr && inits->is_array()) {
      for (const Json& c : *inits) {
        const Requests r = containerRequests(c, cfg);
        sum.cpu_milli = std::max(sum.cpu_milli, r.cpu_milli);
        sum.memory_bytes = std::max(sum.memory_bytes, r.memory_bytes);
        sum.gpus = std::max(sum.gpus, r.gpus);
      }
    }
    const Json* overhead = find(*spec, "overhead");
    sum.cpu_milli += quantity(overhead, "cpu");
    sum.memory_bytes += quantity(overhead, "memory") / 1000;
    s.cpu_milli = sum.cpu_milli;
    s.memory_mib = (sum.memory_bytes + 1024 * 1024 - 1) / (1024 * 1024);
    if (sum.gpus > kMaxGpusPerNode) {
      return Status::invalidArgument("pod " + out.key() + ": more GPUs than a node holds");
    }
    s.num_gpu = static_cast<int>(sum.gpus);
    int64_t milli = sum.gpu_milli;
    const std::string milli_text = annotation(cfg.gpu_milli_annotation);
    if (!milli_text.empty() && !parseInt(milli_text, &milli)) {
      return Status::invalidArgument("pod " + out.key() + ": annotation " +
                                     cfg.gpu_milli_annotation + " is not a number");
    }
    if (milli > 0) {
      if (milli > kMilliPerGpu) {
        return Status::invalidArgument("pod " + out.key() + ": " + cfg.gpu_milli_annotation +
                                       " above 1000 (use whole GPUs)");
      }
      s.num_gpu = 1;
      s.gpu_milli = static_cast<int>(milli);
    } else if (s.num_gpu > 0) {
      s.gpu_milli = kMilliPerGpu;
    }
  }
  const Json* status = find(pod, "status");
  if (status != nullptr) out.phase = str(*status, "phase");
  s.queue = annotation(cfg.queue_annotation);
  const std::string tier = annotation(cfg.tier_annotation);
  if (!tier.empty()) {
    if (tier != "0" && tier != "1" && tier != "2") {
      return Status::invalidArgument("pod " + out.key() + ": annotation " + cfg.tier_annotation +
                                     " must be 0, 1 or 2");
    }
    s.tier = static_cast<Tier>(tier[0] - '0');
  }
  const std::string types = annotation(cfg.gpu_types_annotation);
  size_t start = 0;
  while (start < types.size()) {
    size_t comma = types.find(',', start);
    if (comma == std::string::npos) comma = types.size();
    if (comma > start) s.gpu_types.push_back(types.substr(start, comma - start));
    start = comma + 1;
  }
  s.min_gpu_type = annotation(cfg.min_gpu_type_annotation);
  out.group = annotation(cfg.group_annotation);
  if (!out.group.empty()) {
    const std::string n = annotation(cfg.group_size_annotation);
    int64_t size = 1;
    if (!n.empty() && !parseInt(n, &size)) size = 0;
    out.group_size = static_cast<int>(std::clamp<int64_t>(size, 0, 1'000'000));
    if (out.group_size < 1 || out.group_size > 10'000) {
      return Status::invalidArgument("pod " + out.key() + ": annotation " +
                                     cfg.group_size_annotation + " must be in [1, 10000]");
    }
  }
  return out;
}

std::string bindingJson(const KubePod& pod, const std::string& node) {
  Json j = {{"apiVersion", "v1"},
            {"kind", "Binding"},
            {"metadata", {{"name", pod.name}, {"namespace", pod.ns}, {"uid", pod.uid}}},
            {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  return j.dump();
}

std::string evictionJson(const KubePod& pod) {
  Json j = {{"apiVersion", "policy/v1"},
            {"kind", "Eviction"},
            {"metadata", {{"name", pod.name}, {"namespace", pod.ns}}}};
  return j.dump();
}

std::string eventJson(const KubePod& pod, std::string_view type, std::string_view reason,
                      std::string_view message, const std::string& component, int64_t now_s) {
  const std::string ts = formatTimestamp(now_s);
  Json j = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"generateName", pod.name + "."}, {"namespace", pod.ns}}},
      {"involvedObject",
       {{"apiVersion", "v1"},
        {"kind", "Pod"},
        {"name", pod.name},
        {"namespace", pod.ns},
        {"uid", pod.uid},
        {"resourceVersion", pod.resource_version}}},
      {"reason", std::string(reason)},
      {"message", std::string(message)},
      {"type", std::string(type)},
      {"source", {{"component", component}}},
      {"reportingComponent", component},
      {"reportingInstance", component},
      {"firstTimestamp", ts},
      {"lastTimestamp", ts},
      {"count", 1},
  };
  return j.dump();
}

std::string nominatedNodePatch(const std::string& node) {
  Json j = {{"status", {{"nominatedNodeName", node.empty() ? Json(nullptr) : Json(node)}}}};
  return j.dump();
}

std::string unschedulablePatch(std::string_view message, int64_t now_s) {
  Json cond = {{"type", "PodScheduled"},    {"status", "False"},
               {"reason", "Unschedulable"}, {"message", std::string(message)},
               {"lastProbeTime", nullptr},  {"lastTransitionTime", formatTimestamp(now_s)}};
  Json j = {{"status", {{"conditions", Json::array({cond})}}}};
  return j.dump();
}

Result<KubePdb> pdbFromJson(const Json& pdb) {
  const Json* meta = find(pdb, "metadata");
  if (meta == nullptr) return Status::invalidArgument("PodDisruptionBudget without metadata");
  KubePdb out;
  out.ns = str(*meta, "namespace");
  out.name = str(*meta, "name");
  const Json* spec = find(pdb, "spec");
  const Json* sel = spec != nullptr ? find(*spec, "selector") : nullptr;
  if (sel != nullptr && sel->is_object()) {
    out.has_selector = true;
    out.selector = labelSelector(sel);
  }
  // No status yet (the disruption controller has not seen it), or one older than the spec
  // (observedGeneration < metadata.generation: minAvailable just edited, say): nothing may be
  // disrupted, as the API server's eviction check treats it (429).
  auto integer = [](const Json* v) {
    return v != nullptr && v->is_number_integer() ? v->get<int64_t>() : int64_t{0};
  };
  const Json* status = find(pdb, "status");
  const int64_t generation = integer(find(*meta, "generation"));
  const int64_t observed = status != nullptr ? integer(find(*status, "observedGeneration")) : 0;
  if (status != nullptr && observed >= generation) {
    out.disruptions_allowed = integer(find(*status, "disruptionsAllowed"));
  }
  return out;
}

RepackPlan keepWithinBudgets(RepackPlan plan, const std::vector<KubePdb>& pdbs,
                             const std::function<std::vector<size_t>(PodId)>& budgets) {
  std::vector<int64_t> left(pdbs.size());
  for (size_t b = 0; b < pdbs.size(); ++b) left[b] = pdbs[b].disruptions_allowed;
  RepackPlan out;
  out.candidates = plan.candidates;
  for (const std::string& node : plan.nodes_emptied) {
    std::vector<int64_t> need(pdbs.size(), 0);
    std::vector<const Migration*> moves;
    for (const Migration& m : plan.moves) {
      if (m.from != node) continue;
      moves.push_back(&m);
      for (const size_t b : budgets(m.pod)) {
        if (b < need.size()) ++need[b];
      }
    }
    bool fits = true;
    for (size_t b = 0; b < pdbs.size(); ++b) fits = fits && need[b] <= left[b];
    if (!fits) continue;
    for (size_t b = 0; b < pdbs.size(); ++b) left[b] -= need[b];
    for (const Migration* m : moves) {
      out.moves.push_back(*m);
      out.gpu_milli_freed += m->gpu_milli;
    }
    out.nodes_emptied.push_back(node);
  }
  // Nothing dropped: the planner's own figure (the freed nodes' whole GPUs); otherwise the moved
  // pods' GPU demand on the nodes kept.
  if (out.nodes_emptied.size() == plan.nodes_emptied.size())
    out.gpu_milli_freed = plan.gpu_milli_freed;
  return out;
}

bool KubePdb::selects(const KubePod& pod) const {
  return has_selector && pod.ns == ns && selectorMatches(selector, pod.spec.labels);
}

}  // namespace infera::sched::kube
