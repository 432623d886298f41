#pragma once
// Private to src/scheduler/kube: Kubernetes objects (core/v1 Node and Pod JSON) read into what the
// engine needs, and the JSON bodies the scheduler sends (Binding, Eviction, Event, the
// PodScheduled condition patch). nlohmann::json stays in this private header.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "scheduler/kube/kube.h"
#include "scheduler/types.h"

namespace infera::sched::kube {

using Json = nlohmann::json;

// resource.Quantity ("3500m", "2", "128Gi", "1e3", "0.5") in milli-units; nothing when malformed.
std::optional<int64_t> parseQuantityMilli(std::string_view text);
// RFC 3339 ("2026-12-02T00:04:33Z") to unix seconds; 0 when malformed.
int64_t parseTimestamp(std::string_view text);
std::string formatTimestamp(int64_t unix_s);

struct KubeNode {
  std::string name;
  std::string resource_version;
  NodeSpec spec;  // spec.closed when cordoned (spec.unschedulable) or not Ready
};

struct KubePod {
  std::string uid;
  std::string ns;
  std::string name;
  std::string resource_version;
  std::string scheduler_name;
  std::string node_name;  // spec.nodeName ("" while pending)
  std::string phase;
  bool deleting = false;  // metadata.deletionTimestamp set
  std::string group;      // gang: pods of one job, placed all or none
  int group_size = 0;     // the gang's size (from the group-size annotation)
  PodSpec spec;           // the engine's view (name = "ns/name")
  bool terminal() const { return phase == "Succeeded" || phase == "Failed"; }
  std::string key() const { return ns + "/" + name; }
};

// A policy/v1 PodDisruptionBudget as the re-packing planner reads it: which pods of its namespace
// it selects (spec.selector: matchLabels and matchExpressions; an empty selector selects every
// pod, a missing one none) and how many of them may be disrupted now (status.disruptionsAllowed,
// kept by the cluster's disruption controller).
struct KubePdb {
  std::string ns;
  std::string name;
  bool has_selector = false;
  LabelSelector selector;
  int64_t disruptions_allowed = 0;
  bool selects(const KubePod& pod) const;
};

Result<KubeNode> nodeFromJson(const Json& node, const KubeConfig& cfg);
Result<KubePdb> pdbFromJson(const Json& pdb);
// A re-packing plan cut to what the budgets allow: node by node in the plan's order, a node's
// moves are kept only when, with the moves kept before, no budget selecting its pods (`budgets`:
// indexes into `pdbs`) goes below zero; otherwise all of that node's moves go (a node is freed
// only when every pod on it moves).
RepackPlan keepWithinBudgets(RepackPlan plan, const std::vector<KubePdb>& pdbs,
                             const std::function<std::vector<size_t>(PodId)>& budgets);
Result<KubePod> podFromJson(const Json& pod, const KubeConfig& cfg);

// Request bodies.
std::string bindingJson(const KubePod& pod, const std::string& node);
std::string evictionJson(const KubePod& pod);
// A core/v1 Event about `pod` (type "Normal" or "Warning").
std::string eventJson(const KubePod& pod, std::string_view type, std::string_view reason,
                      std::string_view message, const std::string& component, int64_t now_s);
// A strategic-merge patch of pods/status setting PodScheduled=False with reason Unschedulable.
std::string unschedulablePatch(std::string_view message, int64_t now_s);
// A strategic-merge patch of pods/status setting status.nominatedNodeName (a preemption's
// beneficiary: the node its victims are leaving); "" clears it.
std::string nominatedNodePatch(const std::string& node);

}  // namespace infera::sched::kube
