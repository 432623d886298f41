#include "scheduler/kube/webhook.h"

#include <algorithm>
#include <cstdio>

#include "core/json.h"
#include "scheduler/kube/internal/objects.h"

namespace infera::sched::kube {
namespace {

std::string base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) |
                       (static_cast<uint8_t>(in[i + 1]) << 8) | static_cast<uint8_t>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// JSON Pointer escaping of one path segment (RFC 6901).
std::string escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

bool labelsMatch(const std::map<std::string, std::string>& want, const Json& labels) {
  for (const auto& [k, v] : want) {
    if (!labels.is_object() || !labels.contains(k) || !labels[k].is_string() ||
        labels[k].get<std::string>() != v) {
      return false;
    }
  }
  return true;
}

const PlacementRule* matchRule(const SchedulingConfig& sc, const std::string& ns,
                               const Json& labels, const std::string& service_account) {
  for (const PlacementRule& r : sc.placement) {
    if (!r.ns.empty() && r.ns != ns) continue;
    if (!r.service_account.empty() && r.service_account != service_account) continue;
    if (!labelsMatch(r.labels, labels)) continue;
    return &r;
  }
  return nullptr;
}

std::string milliText(int64_t milli) {
  return milli % 1000 == 0 ? std::to_string(milli / 1000) : std::to_string(milli) + "m";
}

// The GPU types a pod accepts by its annotations: an explicit list, or the ladder from a minimum.
std::vector<std::string> acceptedTypes(const KubePod& pod, const SchedulingConfig& sc) {
  std::vector<std::string> types = pod.spec.gpu_types;
  if (!pod.spec.min_gpu_type.empty()) {
    int min_rank = -1;
    for (const GpuTypeInfo& t : sc.gpu_types) {
      if (t.name == pod.spec.min_gpu_type) min_rank = t.rank;
    }
    if (min_rank >= 0) {
      for (const GpuTypeInfo& t : sc.gpu_types) {
        if (t.rank >= min_rank && std::find(types.begin(), types.end(), t.name) == types.end()) {
          types.push_back(t.name);
        }
      }
    }
  }
  return types;
}

void addAffinity(Json& ops, const Json& spec, const std::string& label,
                 const std::vector<std::string>& types) {
  const Json expr = {{"key", label}, {"operator", "In"}, {"values", types}};
  const Json term = {{"matchExpressions", Json::array({expr})}};
  const Json required = {{"nodeSelectorTerms", Json::array({term})}};
  const Json* affinity = spec.contains("affinity") ? &spec["affinity"] : nullptr;
  if (affinity == nullptr || !affinity->is_object()) {
    ops.push_back(
        {{"op", "add"},
         {"path", "/spec/affinity"},
         {"value",
          {{"nodeAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", required}}}}}});
    return;
  }
  const Json* na = affinity->contains("nodeAffinity") ? &(*affinity)["nodeAffinity"] : nullptr;
  if (na == nullptr || !na->is_object()) {
    ops.push_back({{"op", "add"},
                   {"path", "/spec/affinity/nodeAffinity"},
                   {"value", {{"requiredDuringSchedulingIgnoredDuringExecution", required}}}});
    return;
  }
  const char* kReq = "requiredDuringSchedulingIgnoredDuringExecution";
  if (!na->contains(kReq) || !(*na)[kReq].contains("nodeSelectorTerms") ||
      (*na)[kReq]["nodeSelectorTerms"].empty()) {
    ops.push_back({{"op", "add"},
                   {"path", std::string("/spec/affinity/nodeAffinity/") + kReq},
                   {"value", required}});
    return;
  }
  // Terms are ORed: the ladder must hold in each of them.
  const Json& terms = (*na)[kReq]["nodeSelectorTerms"];
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string base = std::string("/spec/affinity/nodeAffinity/") + kReq +
                             "/nodeSelectorTerms/" + std::to_string(i) + "/matchExpressions";
    if (terms[i].contains("matchExpressions")) {
      ops.push_back({{"op", "add"}, {"path", base + "/-"}, {"value", expr}});
    } else {
      ops.push_back({{"op", "add"}, {"path", base}, {"value", Json::array({expr})}});
    }
  }
}

// Raises the first container's request of `resource` so the pod asks for at least `want_milli`.
void addShare(Json& ops, const Json& spec, const std::string& resource, int64_t have_milli,
              int64_t want_milli, bool memory) {
  if (want_milli <= have_milli) return;
  const Json& c0 = spec["containers"][0];
  int64_t first = 0;
  if (c0.contains("resources") && c0["resources"].contains("requests") &&
      c0["resources"]["requests"].contains(resource) &&
      c0["resources"]["requests"][resource].is_string()) {
    first =
        parseQuantityMilli(c0["resources"]["requests"][resource].get<std::string>()).value_or(0);
  }
  const int64_t value = first + (want_milli - have_milli);
  const std::string text =
      memory ? std::to_string((value / 1000 + 1024 * 1024 - 1) / (1024 * 1024)) + "Mi"
             : milliText(value);
  ops.push_back({{"op", "add"},
                 {"path", "/spec/containers/0/resources/requests/" + escape(resource)},
                 {"value", text}});
}

}  // namespace

namespace {

Result<std::string> respond(std::string_view review_json, const WebhookPolicy& policy) {
  // The floor's reader (depth, duplicate keys, UTF-8): the API server sends one object per review.
  INFERA_ASSIGN_OR_RETURN(const Json review, readJson(review_json));
  if (!review.is_object() || !review.contains("request") || !review["request"].is_object()) {
    return Status::invalidArgument("not an AdmissionReview with a request");
  }
  const Json& req = review["request"];
  if (!req.contains("uid") || !req["uid"].is_string()) {
    return Status::invalidArgument("AdmissionReview request without a uid");
  }
  Json response = {{"uid", req["uid"]}, {"allowed", true}};
  Json ops = Json::array();
  const bool is_pod_create = req.value("operation", "") == "CREATE" && req.contains("object") &&
                             req["object"].is_object() &&
                             req["object"].value("kind", "Pod") == "Pod" && req.contains("kind") &&
                             req["kind"].value("kind", "") == "Pod";
  if (is_pod_create) {
    Json pod = req["object"];
    const std::string ns = req.value("namespace", "");
    if (!pod.contains("metadata") || !pod["metadata"].is_object()) pod["metadata"] = Json::object();
    if (pod["metadata"].value("namespace", "").empty()) pod["metadata"]["namespace"] = ns;
    if (pod["metadata"].value("name", "").empty()) {
      pod["metadata"]["name"] = pod["metadata"].value("generateName", "pod");
    }
    auto parsed = podFromJson(pod, policy.kube);
    const Json& spec = pod.contains("spec") ? pod["spec"] : Json::object();
    if (!parsed.ok()) {
      response["allowed"] = false;
      response["status"] = {
          {"code", 400}, {"reason", "BadRequest"}, {"message", parsed.status().message()}};
    } else if (parsed->spec.num_gpu > 0 || !policy.webhook.gpu_pods_only) {
      const KubePod& kp = *parsed;
      ops.push_back(
          {{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", policy.kube.scheduler_name}});
      const Json& meta = pod["metadata"];
      const Json labels = meta.contains("labels") ? meta["labels"] : Json::object();
      const std::string sa = spec.value("serviceAccountName", "default");
      const PlacementRule* rule = matchRule(policy.scheduling, ns, labels, sa);
      if (!req["object"].contains("metadata") ||
          !req["object"]["metadata"].contains("annotations")) {
        ops.push_back(
            {{"op", "add"}, {"path", "/metadata/annotations"}, {"value", Json::object()}});
      }
      const std::string ann = "/metadata/annotations/";
      if (rule != nullptr && !rule->queue.empty()) {
        ops.push_back({{"op", "add"},
                       {"path", ann + escape(policy.kube.queue_annotation)},
                       {"value", rule->queue}});
      }
      if (rule != nullptr && rule->tier) {
        ops.push_back({{"op", "add"},
                       {"path", ann + escape(policy.kube.tier_annotation)},
                       {"value", std::to_string(static_cast<int>(*rule->tier))}});
      }
      if (kp.spec.num_gpu > 0 && spec.contains("containers") && !spec["containers"].empty()) {
        const Json& c0 = spec["containers"][0];
        const double gpus = kp.spec.num_gpu * (kp.spec.gpu_milli / 1000.0);
        const bool has_res = c0.contains("resources") && c0["resources"].is_object();
        const bool has_req = has_res && c0["resources"].contains("requests");
        const bool cpu = policy.webhook.cpu_per_gpu > 0;
        const bool mem = policy.webhook.memory_gib_per_gpu > 0;
        const int64_t want_cpu = static_cast<int64_t>(gpus * policy.webhook.cpu_per_gpu * 1000);
        const int64_t want_mem =
            static_cast<int64_t>(gpus * policy.webhook.memory_gib_per_gpu * 1024 * 1024 * 1024) *
            1000;
        const bool need = (cpu && want_cpu > kp.spec.cpu_milli) ||
                          (mem && want_mem > kp.spec.memory_mib * 1024 * 1024 * 1000);
        if (need && !has_res) {
          ops.push_back(
              {{"op", "add"}, {"path", "/spec/containers/0/resources"}, {"value", Json::object()}});
        }
        if (need && !has_req) {
          ops.push_back({{"op", "add"},
                         {"path", "/spec/containers/0/resources/requests"},
                         {"value", Json::object()}});
        }
        if (cpu) addShare(ops, spec, "cpu", kp.spec.cpu_milli, want_cpu, false);
        if (mem) {
          addShare(ops, spec, "memory", kp.spec.memory_mib * 1024 * 1024 * 1000, want_mem, true);
        }
      }
      const std::vector<std::string> types = acceptedTypes(kp, policy.scheduling);
      if (!types.empty()) addAffinity(ops, spec, policy.kube.gpu_type_label, types);
    }
  }
  if (!ops.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = base64(dumpJson(ops));
  }
  const Json out = {
      {"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"response", response}};
  return dumpJson(out);
}

}  // namespace

Result<std::string> admissionResponse(std::string_view review_json, const WebhookPolicy& policy) {
  // nlohmann throws on a member of an unexpected type (a string where an object belongs): such a
  // request is malformed, answered 400 by the server.
  try {
    return respond(review_json, policy);
  } catch (const Json::exception& e) {
    return Status::invalidArgument(std::string("malformed AdmissionReview: ") + e.what());
  }
}

}  // namespace infera::sched::kube
