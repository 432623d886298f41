#include <algorithm>
#include <charconv>

#include "scheduler/cluster.h"
#include "scheduler/scheduler.h"

namespace infera::sched {
namespace {

bool parseInt64(const std::string& s, int64_t* out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

bool contains(const std::vector<std::string>& values, const std::string& v) {
  for (const std::string& x : values) {
    if (x == v) return true;
  }
  return false;
}

// One requirement against a value that is there (`present`) or not: the operators of
// k8s.io/apimachinery's labels.Requirement, as NodeSelectorRequirement uses them. A requirement
// that does not parse (unknown operator, In without values, Gt/Lt without one integer) matches
// nothing, so its term matches nothing: kube-scheduler skips such a term, other terms still count.
bool requirementMatches(const NodeSelectorRequirement& r, bool present, const std::string& value) {
  if (r.op == "In") return !r.values.empty() && present && contains(r.values, value);
  if (r.op == "NotIn") return !r.values.empty() && (!present || !contains(r.values, value));
  if (r.op == "Exists") return r.values.empty() && present;
  if (r.op == "DoesNotExist") return r.values.empty() && !present;
  if (r.op == "Gt" || r.op == "Lt") {
    int64_t have = 0;
    int64_t want = 0;
    if (!present || r.values.size() != 1 || !parseInt64(value, &have) ||
        !parseInt64(r.values[0], &want)) {
      return false;
    }
    return r.op == "Gt" ? have > want : have < want;
  }
  return false;  // an unknown operator matches nothing
}

bool termMatches(const NodeSelectorTerm& t, const NodeSpec& node) {
  if (t.match_expressions.empty() && t.match_fields.empty()) return false;
  for (const NodeSelectorRequirement& r : t.match_expressions) {
    const auto it = node.labels.find(r.key);
    const bool present = it != node.labels.end();
    if (!requirementMatches(r, present, present ? it->second : std::string())) return false;
  }
  for (const NodeSelectorRequirement& r : t.match_fields) {
    // As Kubernetes validates field requirements: metadata.name, In or NotIn, one value.
    if (r.key != "metadata.name" || (r.op != "In" && r.op != "NotIn") || r.values.size() != 1 ||
        !requirementMatches(r, true, node.name)) {
      return false;
    }
  }
  return true;
}

// v1helper.TolerationsTolerateTaint: effect (if set) and key (if set) equal, then Exists or an
// equal value.
bool tolerates(const Toleration& t, const Taint& taint) {
  if (!t.effect.empty() && t.effect != taint.effect) return false;
  if (!t.key.empty() && t.key != taint.key) return false;
  if (t.op == "Exists") return true;
  return (t.op.empty() || t.op == "Equal") && t.value == taint.value;
}

bool isHard(const Taint& t) { return t.effect == "NoSchedule" || t.effect == "NoExecute"; }

void appendField(std::string& out, const std::string& s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

void appendRequirements(std::string& out, char tag,
                        const std::vector<NodeSelectorRequirement>& rs) {
  for (const NodeSelectorRequirement& r : rs) {
    out += tag;
    appendField(out, r.key);
    appendField(out, r.op);
    out += std::to_string(r.values.size());
    out += '#';
    for (const std::string& v : r.values) appendField(out, v);
  }
}

}  // namespace

bool hasHardTaint(const NodeSpec& node) {
  for (const Taint& t : node.taints) {
    if (isHard(t)) return true;
  }
  return false;
}

bool constraintsAllow(const NodeConstraints& c, const NodeSpec& node) {
  if (!nodeAffinityAllows(c, node)) return false;
  for (const Taint& taint : node.taints) {
    if (!isHard(taint)) continue;
    bool tolerated = false;
    for (const Toleration& t : c.tolerations) {
      if (tolerates(t, taint)) {
        tolerated = true;
        break;
      }
    }
    if (!tolerated) return false;
  }
  return true;
}

bool nodeAffinityAllows(const NodeConstraints& c, const NodeSpec& node) {
  for (const auto& [k, v] : c.node_selector) {
    const auto it = node.labels.find(k);
    if (it == node.labels.end() || it->second != v) return false;
  }
  if (!c.required_terms.empty()) {
    bool any = false;
    for (const NodeSelectorTerm& t : c.required_terms) {
      if (termMatches(t, node)) {
        any = true;
        break;
      }
    }
    if (!any) return false;
  }
  return true;
}

bool nodeTermMatches(const NodeSelectorTerm& t, const NodeSpec& node) {
  return termMatches(t, node);
}

int intolerablePreferNoSchedule(const std::vector<Toleration>& tolerations, const NodeSpec& node) {
  int count = 0;
  for (const Taint& taint : node.taints) {
    if (taint.effect != "PreferNoSchedule") continue;
    const bool tolerated =
        std::any_of(tolerations.begin(), tolerations.end(), [&](const Toleration& t) {
          return (t.effect.empty() || t.effect == "PreferNoSchedule") && tolerates(t, taint);
        });
    count += tolerated ? 0 : 1;
  }
  return count;
}

std::string constraintKey(const NodeConstraints& c) {
  std::string out;
  for (const auto& [k, v] : c.node_selector) {
    out += 's';
    appendField(out, k);
    appendField(out, v);
  }
  for (const NodeSelectorTerm& t : c.required_terms) {
    out += '|';
    appendRequirements(out, 'e', t.match_expressions);
    appendRequirements(out, 'f', t.match_fields);
  }
  for (const Toleration& t : c.tolerations) {
    out += 't';
    appendField(out, t.key);
    appendField(out, t.op);
    appendField(out, t.value);
    appendField(out, t.effect);
  }
  return out;
}

bool selectorMatches(const LabelSelector& s, const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : s.match_labels) {
    const auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  for (const NodeSelectorRequirement& r : s.match_expressions) {
    const auto it = labels.find(r.key);
    const bool present = it != labels.end();
    const bool in =
        present && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
    bool ok = false;
    if (r.op == "In") {
      ok = in;
    } else if (r.op == "NotIn") {
      ok = !in;
    } else if (r.op == "Exists") {
      ok = present;
    } else if (r.op == "DoesNotExist") {
      ok = !present;
    }
    if (!ok) return false;
  }
  return true;
}

bool termSelects(const PodAffinityTerm& t, const std::string& owner_ns, const std::string& ns,
                 const std::map<std::string, std::string>& labels) {
  if (!t.all_namespaces) {
    const bool in_ns = t.namespaces.empty() ? ns == owner_ns
                                            : std::find(t.namespaces.begin(), t.namespaces.end(),
                                                        ns) != t.namespaces.end();
    if (!in_ns) return false;
  }
  return selectorMatches(t.selector, labels);
}

}  // namespace infera::sched
