// Kubernetes objects (kubectl's own JSON in tests/testdata/kube) read into the engine's view, and
// the serve config's errors.
#include "scheduler/kube/internal/objects.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "scheduler/kube/kube.h"
#include "scheduler/scheduler.h"

namespace infera::sched::kube {
namespace {

Json fixture(const std::string& name) {
  std::ifstream in(std::string(INFERA_TEST_SOURCE_DIR) + "/tests/testdata/kube/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

TEST(KubeObjectsTest, ParsesQuantitiesAsKubernetesDoes) {
  EXPECT_EQ(parseQuantityMilli("2"), 2000);
  EXPECT_EQ(parseQuantityMilli("3500m"), 3500);
  EXPECT_EQ(parseQuantityMilli("0.5"), 500);
  EXPECT_EQ(parseQuantityMilli("1Ki"), 1024 * 1000);
  EXPECT_EQ(parseQuantityMilli("16Gi"), 16LL * 1024 * 1024 * 1024 * 1000);
  EXPECT_EQ(parseQuantityMilli("1k"), 1000 * 1000);
  EXPECT_EQ(parseQuantityMilli("1e3"), 1000 * 1000);
  EXPECT_EQ(parseQuantityMilli("100n"), 1);  // rounded up to the smallest unit (milli)
  EXPECT_FALSE(parseQuantityMilli("").has_value());
  EXPECT_FALSE(parseQuantityMilli("abc").has_value());
  EXPECT_FALSE(parseQuantityMilli("1Qi").has_value());
}

TEST(KubeObjectsTest, NodeFromKubeletShapeUsesAllocatableAndGpuProductLabel) {
  auto n = nodeFromJson(fixture("node.json"), KubeConfig{});
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(n->name, "gpu-a10-0");
  EXPECT_EQ(n->spec.cpu_milli, 47800);
  EXPECT_EQ(n->spec.memory_mib, 194633376LL / 1024);
  EXPECT_EQ(n->spec.gpus, 4);
  EXPECT_EQ(n->spec.gpu_model, "A10");
  EXPECT_FALSE(n->spec.closed);
  EXPECT_TRUE(n->spec.taints.empty());
}

// A cordoned or not-Ready node is closed and carries the taint Kubernetes' node controllers put
// on it (once, when the object already has it), so only pods tolerating it go there.
TEST(KubeObjectsTest, CordonedAndNotReadyNodesAreClosedWithTheNodeControllersTaints) {
  auto taintKeys = [](const KubeNode& n) {
    std::vector<std::string> keys;
    for (const Taint& t : n.spec.taints) keys.push_back(t.key + ":" + t.effect);
    return keys;
  };
  Json cordoned = fixture("node.json");
  cordoned["spec"]["unschedulable"] = true;
  auto n = nodeFromJson(cordoned, KubeConfig{});
  ASSERT_TRUE(n.ok());
  EXPECT_TRUE(n->spec.closed);
  EXPECT_EQ(taintKeys(*n), std::vector<std::string>{"node.kubernetes.io/unschedulable:NoSchedule"});
  cordoned["spec"]["taints"] =
      Json::array({{{"key", "node.kubernetes.io/unschedulable"}, {"effect", "NoSchedule"}},
                   {{"key", "gpu"}, {"value", "x"}, {"effect", "PreferNoSchedule"}}});
  n = nodeFromJson(cordoned, KubeConfig{});
  EXPECT_EQ(taintKeys(*n), (std::vector<std::string>{"node.kubernetes.io/unschedulable:NoSchedule",
                                                     "gpu:PreferNoSchedule"}));
  // unschedulable given but false, or not a boolean: open.
  cordoned = fixture("node.json");
  cordoned["spec"]["unschedulable"] = "true";
  EXPECT_FALSE(nodeFromJson(cordoned, KubeConfig{})->spec.closed);
  for (const auto& [status, key] : std::vector<std::pair<std::string, std::string>>{
           {"False", "node.kubernetes.io/not-ready"},
           {"Unknown", "node.kubernetes.io/unreachable"}}) {
    Json j = fixture("node.json");
    j["status"]["conditions"] = Json::array({{{"type", "Ready"}, {"status", status}}});
    n = nodeFromJson(j, KubeConfig{});
    ASSERT_TRUE(n.ok());
    EXPECT_TRUE(n->spec.closed) << status;
    EXPECT_EQ(taintKeys(*n), std::vector<std::string>{key + ":NoSchedule"}) << status;
  }
  Json ready = fixture("node.json");
  ready["status"]["conditions"] = Json::array(
      {{{"type", "MemoryPressure"}, {"status", "True"}}, {{"type", "Ready"}, {"status", "True"}}});
  EXPECT_FALSE(nodeFromJson(ready, KubeConfig{})->spec.closed);
}

TEST(KubeObjectsTest, PodRequestsGpusFromLimitsAndQueueTierFromAnnotations) {
  Json j = fixture("gpu-pod.json");
  j["metadata"]["annotations"] = {{"infera.ai/queue", "prod/vision"}, {"infera.ai/tier", "0"}};
  auto p = podFromJson(j, KubeConfig{});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->key(), "ml/train");
  EXPECT_EQ(p->scheduler_name, "infera");
  EXPECT_EQ(p->spec.cpu_milli, 4000);
  EXPECT_EQ(p->spec.memory_mib, 16 * 1024);
  EXPECT_EQ(p->spec.num_gpu, 1);
  EXPECT_EQ(p->spec.gpu_milli, 1000);
  EXPECT_EQ(p->spec.queue, "prod/vision");
  EXPECT_EQ(p->spec.tier, Tier::kGuaranteed);
  EXPECT_FALSE(p->deleting);
  EXPECT_FALSE(p->spec.terminating);
  // Being deleted: the engine is told (topology spread stops counting it); null is not deleting.
  j["metadata"]["deletionTimestamp"] = "2026-12-04T10:00:00Z";
  auto d = podFromJson(j, KubeConfig{});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->deleting);
  EXPECT_TRUE(d->spec.terminating);
  j["metadata"]["deletionTimestamp"] = nullptr;
  EXPECT_FALSE(podFromJson(j, KubeConfig{}).value().spec.terminating);
}

TEST(KubeObjectsTest, MilliGpuAnnotationMakesASharingPod) {
  Json j = fixture("gpu-pod.json");
  j["metadata"]["annotations"] = {{"infera.ai/gpu-milli", "250"}};
  auto p = podFromJson(j, KubeConfig{});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->spec.num_gpu, 1);
  EXPECT_EQ(p->spec.gpu_milli, 250);
  j["metadata"]["annotations"] = {{"infera.ai/tier", "7"}};
  EXPECT_FALSE(podFromJson(j, KubeConfig{}).ok());
}

TEST(KubeObjectsTest, BindingAndEvictionBodiesAreKubernetesShapes) {
  auto p = podFromJson(fixture("gpu-pod.json"), KubeConfig{});
  ASSERT_TRUE(p.ok());
  const Json b = Json::parse(bindingJson(*p, "gpu-a10-0"));
  EXPECT_EQ(b["kind"], "Binding");
  EXPECT_EQ(b["target"]["kind"], "Node");
  EXPECT_EQ(b["target"]["name"], "gpu-a10-0");
  const Json e = Json::parse(evictionJson(*p));
  EXPECT_EQ(e["apiVersion"], "policy/v1");
  EXPECT_EQ(e["kind"], "Eviction");
  const Json patch = Json::parse(unschedulablePatch("no node fits", 0));
  EXPECT_EQ(patch["status"]["conditions"][0]["type"], "PodScheduled");
  EXPECT_EQ(patch["status"]["conditions"][0]["reason"], "Unschedulable");
  EXPECT_EQ(formatTimestamp(parseTimestamp("2026-12-02T00:04:33Z")), "2026-12-02T00:04:33Z");
}

TEST(KubeServeConfigTest, ErrorsNameKeyPathAndLine) {
  auto cfg = parseServeConfigString(R"(kube:
  api_server: ftp://x
  watch_timeout_s: 0
policy: nope
webhook:
  port: 8443
scheduling:
  queues:
    - name: a
  bogus: 1
)");
  ASSERT_FALSE(cfg.ok());
  const std::string m = cfg.status().message();
  EXPECT_NE(m.find("kube.api_server (line 2)"), std::string::npos) << m;
  EXPECT_NE(m.find("kube.watch_timeout_s (line 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("policy (line 4)"), std::string::npos) << m;
  EXPECT_NE(m.find("webhook.tls"), std::string::npos) << m;
  EXPECT_NE(m.find("scheduling.bogus (line 10)"), std::string::npos) << m;
  // Each error once (the scheduling section's reader is not finished twice).
  EXPECT_EQ(m.find("scheduling.bogus", m.find("scheduling.bogus") + 1), std::string::npos) << m;
}

TEST(KubeServeConfigTest, RestartNeededNamesWhatAReloadCannotChange) {
  auto base = parseServeConfigString(R"(kube: {api_server: "https://127.0.0.1:6443"}
scheduling:
  queues: [{name: a, max: {gpus: {"*": 4}}}]
)");
  ASSERT_TRUE(base.ok()) << base.status().message();
  ServeConfig next = *base;
  next.policy = "best-fit";
  next.scheduling.queues[0].max.gpu_milli["*"] = 8000;
  next.webhook.cpu_per_gpu = 4;
  next.reclaim.dry_run = true;
  next.repack.max_moves = 3;
  EXPECT_TRUE(restartNeeded(*base, next).empty());
  next.kube.api_server = "https://10.0.0.1:6443";
  next.metrics.port = 9100;
  next.leader_election.enabled = true;
  next.webhook.enabled = true;
  next.reclaim.prometheus_url = "http://prom:9090";
  EXPECT_EQ(restartNeeded(*base, next),
            (std::vector<std::string>{"kube", "metrics", "leader_election", "webhook.enabled",
                                      "reclaim.prometheus_url"}));
}

TEST(KubeServeConfigTest, InClusterDefaultsDoNotMakeEveryReloadNeedARestart) {
  // In a pod, api_server and token_file are left empty and filled in at create(); the same file
  // read again must still reload.
  ::setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  // (The system's CA bundle stands in for the service account's ca.crt.)
  const std::string yaml = R"(kube: {ca_file: /etc/ssl/certs/ca-certificates.crt}
scheduling:
  queues: [{name: a, max: {gpus: {"*": 4}}}]
)";
  auto cfg = parseServeConfigString(yaml);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto server = KubeScheduler::create(*cfg);
  ASSERT_TRUE(server.ok()) << server.status().message();
  EXPECT_TRUE((*server)->reload(*cfg).isOk());
  ServeConfig next = *cfg;
  next.scheduling.queues[0].max.gpu_milli["*"] = 8000;
  EXPECT_TRUE((*server)->reload(next).isOk());
  next.kube.token_file = "/elsewhere/token";
  const Status refused = (*server)->reload(next);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("need a restart: kube"), std::string::npos) << refused.message();
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
}

TEST(KubeObjectsTest, PodNodeConstraintsAndNodeTaintsAreRead) {
  // kubectl's own JSON for a pod with a nodeSelector, required node affinity and tolerations.
  auto p = podFromJson(fixture("constrained-pod.json"), KubeConfig{});
  ASSERT_TRUE(p.ok()) << p.status().message();
  const NodeConstraints& c = p->spec.constraints;
  EXPECT_EQ(c.node_selector,
            (std::map<std::string, std::string>{{"topology.kubernetes.io/zone", "z2"}}));
  ASSERT_EQ(c.required_terms.size(), 2u);
  ASSERT_EQ(c.required_terms[0].match_expressions.size(), 2u);
  EXPECT_EQ(c.required_terms[0].match_expressions[0].key, "pool");
  EXPECT_EQ(c.required_terms[0].match_expressions[0].op, "In");
  EXPECT_EQ(c.required_terms[0].match_expressions[0].values,
            (std::vector<std::string>{"train", "batch"}));
  EXPECT_EQ(c.required_terms[0].match_expressions[1].op, "DoesNotExist");
  ASSERT_EQ(c.required_terms[1].match_fields.size(), 1u);
  EXPECT_EQ(c.required_terms[1].match_fields[0].key, "metadata.name");
  ASSERT_EQ(c.tolerations.size(), 2u);
  EXPECT_EQ(c.tolerations[0].key, "nvidia.com/gpu");
  EXPECT_EQ(c.tolerations[0].op, "Exists");
  EXPECT_EQ(c.tolerations[1].op, "Equal");
  EXPECT_EQ(c.tolerations[1].value, "vision");
  EXPECT_EQ(c.tolerations[1].effect, "NoSchedule");
  // A pod without any has none.
  EXPECT_TRUE(podFromJson(fixture("gpu-pod.json"), KubeConfig{})->spec.constraints.empty());

  Json node = fixture("node.json");
  node["spec"]["taints"] = Json::parse(
      R"([{"key":"team","value":"vision","effect":"NoSchedule"},{"key":"spot","effect":"PreferNoSchedule"}])");
  auto n = nodeFromJson(node, KubeConfig{});
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(n->spec.taints.size(), 2u);
  EXPECT_EQ(n->spec.taints[0], (Taint{"team", "vision", "NoSchedule"}));
  EXPECT_EQ(n->spec.taints[1], (Taint{"spot", "", "PreferNoSchedule"}));
}

TEST(KubeObjectsTest, PodAffinityAntiAffinityAndHardSpreadAreRead) {
  // kubectl's own JSON: required anti-affinity by host (a preferred term beside it), required
  // affinity by zone (two namespaces) and by region (namespaceSelector {}: every namespace), a
  // DoNotSchedule spread with matchLabelKeys and minDomains, and a ScheduleAnyway one (soft).
  Json pod = fixture("spread-pod.json");
  pod["metadata"]["labels"]["pod-template-hash"] = "7d9f";
  auto p = podFromJson(pod, KubeConfig{});
  ASSERT_TRUE(p.ok()) << p.status().message();
  const PodConstraints& c = p->spec.pod_constraints;
  EXPECT_TRUE(c.unsupported.empty()) << c.unsupported;
  ASSERT_EQ(c.anti_affinity.size(), 1u);  // the preferred term is not a constraint
  EXPECT_EQ(c.anti_affinity[0].topology_key, "kubernetes.io/hostname");
  EXPECT_EQ(c.anti_affinity[0].selector.match_labels,
            (std::map<std::string, std::string>{{"app", "serve"}}));
  ASSERT_EQ(c.affinity.size(), 2u);
  EXPECT_EQ(c.affinity[0].namespaces, (std::vector<std::string>{"ml", "shared"}));
  ASSERT_EQ(c.affinity[0].selector.match_expressions.size(), 1u);
  EXPECT_EQ(c.affinity[0].selector.match_expressions[0].values,
            (std::vector<std::string>{"cache", "kv"}));
  EXPECT_FALSE(c.affinity[0].all_namespaces);
  EXPECT_TRUE(c.affinity[1].all_namespaces);
  ASSERT_EQ(c.spread.size(), 1u);  // ScheduleAnyway is soft
  EXPECT_EQ(c.spread[0].max_skew, 2);
  EXPECT_EQ(c.spread[0].min_domains, 3);
  EXPECT_EQ(c.spread[0].topology_key, "topology.kubernetes.io/zone");
  // matchLabelKeys: the pod's own pod-template-hash ANDed into the selector.
  EXPECT_TRUE(
      selectorMatches(c.spread[0].selector, {{"app", "serve"}, {"pod-template-hash", "7d9f"}}));
  EXPECT_FALSE(
      selectorMatches(c.spread[0].selector, {{"app", "serve"}, {"pod-template-hash", "1111"}}));
  // The terms select as the API server reads them.
  EXPECT_TRUE(termSelects(c.affinity[0], "ml", "shared", {{"app", "kv"}}));
  EXPECT_FALSE(termSelects(c.affinity[0], "ml", "other", {{"app", "kv"}}));
  EXPECT_TRUE(termSelects(c.affinity[1], "ml", "other", {{"tier", "edge"}}));
  EXPECT_TRUE(termSelects(c.anti_affinity[0], "ml", "ml", {{"app", "serve"}}));
  EXPECT_FALSE(termSelects(c.anti_affinity[0], "ml", "team-b", {{"app", "serve"}}));
  // A null labelSelector selects nothing; a namespaceSelector with labels is not supported, and
  // says so (the engine then refuses the pod with it).
  pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
      .erase("labelSelector");
  pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][1]
     ["namespaceSelector"] = Json::parse(R"({"matchLabels":{"team":"a"}})");
  p = podFromJson(pod, KubeConfig{});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(termSelects(p->spec.pod_constraints.anti_affinity[0], "ml", "ml", {}));
  EXPECT_FALSE(
      termSelects(p->spec.pod_constraints.anti_affinity[0], "ml", "ml", {{"app", "serve"}}));
  EXPECT_NE(p->spec.pod_constraints.unsupported.find("namespaceSelector"), std::string::npos);
  // A pod without any has none.
  EXPECT_TRUE(podFromJson(fixture("gpu-pod.json"), KubeConfig{})->spec.pod_constraints.empty());
}

TEST(KubeObjectsTest, PreferredTermsScheduleAnywaySpreadAndTolerationsAreReadAsSoft) {
  // kubectl's own JSON: two preferred node terms, a preferred pod affinity by zone, two preferred
  // anti-affinity terms (one with a namespaceSelector with labels), a PreferNoSchedule
  // toleration and a ScheduleAnyway spread.
  auto p = podFromJson(fixture("preferred-pod.json"), KubeConfig{});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->spec.pod_constraints.empty());  // nothing hard
  EXPECT_TRUE(p->spec.pod_constraints.unsupported.empty());
  const SoftConstraints& s = p->spec.soft;
  ASSERT_EQ(s.node_affinity.size(), 2u);
  EXPECT_EQ(s.node_affinity[0].weight, 40);
  ASSERT_EQ(s.node_affinity[0].term.match_expressions.size(), 1u);
  EXPECT_EQ(s.node_affinity[0].term.match_expressions[0].key, "disk");
  EXPECT_EQ(s.node_affinity[1].weight, 5);
  ASSERT_EQ(s.node_affinity[1].term.match_fields.size(), 1u);
  EXPECT_EQ(s.node_affinity[1].term.match_fields[0].op, "NotIn");
  ASSERT_EQ(s.affinity.size(), 1u);
  EXPECT_EQ(s.affinity[0].weight, 20);
  EXPECT_EQ(s.affinity[0].term.topology_key, "topology.kubernetes.io/zone");
  EXPECT_TRUE(termSelects(s.affinity[0].term, "ml", "ml", {{"app", "cache"}}));
  EXPECT_FALSE(termSelects(s.affinity[0].term, "ml", "other", {{"app", "cache"}}));
  // The term with a namespaceSelector with labels cannot be evaluated: being soft, it is left
  // out, and the pod is not refused for it.
  ASSERT_EQ(s.anti_affinity.size(), 1u);
  EXPECT_EQ(s.anti_affinity[0].weight, 100);
  EXPECT_EQ(s.anti_affinity[0].term.topology_key, "kubernetes.io/hostname");
  ASSERT_EQ(s.spread.size(), 1u);
  EXPECT_EQ(s.spread[0].topology_key, "topology.kubernetes.io/zone");
  EXPECT_TRUE(selectorMatches(s.spread[0].selector, {{"app", "serve"}}));
  ASSERT_EQ(p->spec.constraints.tolerations.size(), 1u);
  EXPECT_EQ(p->spec.constraints.tolerations[0].effect, "PreferNoSchedule");
  // The DoNotSchedule fixture's ScheduleAnyway constraint and preferred term are soft ones too.
  auto hard = podFromJson(fixture("spread-pod.json"), KubeConfig{});
  ASSERT_TRUE(hard.ok());
  ASSERT_EQ(hard->spec.soft.spread.size(), 1u);
  EXPECT_EQ(hard->spec.soft.spread[0].topology_key, "kubernetes.io/hostname");
  ASSERT_EQ(hard->spec.soft.affinity.size(), 0u);
  ASSERT_EQ(hard->spec.soft.anti_affinity.size(), 1u);
  EXPECT_EQ(hard->spec.soft.anti_affinity[0].weight, 10);
  // Wrong types are read as absent; a weight out of range is clamped to the API server's 1-100
  // (never wrapped, and never INT_MIN, which the anti-affinity sign would overflow).
  Json broken = fixture("preferred-pod.json");
  auto& na =
      broken["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
  na[0]["preference"] = "ssd";
  na[1]["weight"] = 1000000000000LL;
  broken["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        ["podAffinityTerm"] = Json::array();
  p = podFromJson(broken, KubeConfig{});
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->spec.soft.node_affinity.size(), 1u);
  EXPECT_EQ(p->spec.soft.node_affinity[0].weight, 100);
  broken["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0]["weight"] = -1099511627776LL;
  broken["spec"]["topologySpreadConstraints"][0]["maxSkew"] = -5;
  p = podFromJson(broken, KubeConfig{});
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->spec.soft.anti_affinity.size(), 1u);
  EXPECT_EQ(p->spec.soft.anti_affinity[0].weight, 0);
  ASSERT_EQ(p->spec.soft.spread.size(), 1u);
  EXPECT_EQ(p->spec.soft.spread[0].max_skew, 1);
  EXPECT_TRUE(p->spec.soft.affinity.empty());
  EXPECT_TRUE(podFromJson(fixture("gpu-pod.json"), KubeConfig{})->spec.soft.empty());
}

// What a hostile or broken object does to the reader: wrong types are read as absent (a term
// with a selector that is not an object selects nothing), numbers out of int range are clamped,
// a key given twice is read once (the last, as the API server's decoder keeps), and nothing
// throws.
TEST(KubeObjectsTest, PodTermsSurviveWrongTypesHugeNumbersAndRepeatedKeys) {
  Json pod = fixture("spread-pod.json");
  auto& anti =
      pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
  anti[0]["labelSelector"] = Json::array({1, 2});
  anti[0]["namespaces"] = "ml";
  anti.push_back(Json::parse(
      R"({"labelSelector":{"matchLabels":{"app":7},"matchExpressions":[{"key":"k","operator":"In","values":[1,"v"]}]},"topologyKey":5})"));
  auto& spread = pod["spec"]["topologySpreadConstraints"];
  spread[0]["maxSkew"] = 1000000000000LL;
  spread[0]["minDomains"] = -1000000000000LL;
  spread.push_back(
      Json::parse(R"({"maxSkew":"2","whenUnsatisfiable":"DoNotSchedule","topologyKey":"zone"})"));
  pod["spec"]["affinity"]["podAffinity"] = "not an object";
  auto p = podFromJson(pod, KubeConfig{});
  ASSERT_TRUE(p.ok()) << p.status().message();
  const PodConstraints& c = p->spec.pod_constraints;
  ASSERT_EQ(c.anti_affinity.size(), 2u);
  EXPECT_FALSE(termSelects(c.anti_affinity[0], "ml", "ml", {{"app", "serve"}}));  // selects nothing
  EXPECT_TRUE(c.anti_affinity[0].namespaces.empty());  // not a list: the pod's own namespace
  EXPECT_TRUE(c.anti_affinity[1].topology_key.empty());
  EXPECT_TRUE(c.affinity.empty());
  ASSERT_EQ(c.spread.size(), 2u);
  EXPECT_EQ(c.spread[0].max_skew, std::numeric_limits<int>::max());
  EXPECT_EQ(c.spread[0].min_domains, std::numeric_limits<int>::min());
  EXPECT_EQ(c.spread[1].max_skew, 1);  // a string is no number: the default
  // A key given twice in the body: the last one is the one read.
  const std::string body = R"({"metadata":{"name":"d","namespace":"ml","labels":{"app":"x"}},
    "spec":{"containers":[{"name":"c","image":"i"}],"affinity":{"podAntiAffinity":{
    "requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{"matchLabels":{"app":"a"},
    "matchLabels":{"app":"b"}},"topologyKey":"h","topologyKey":"kubernetes.io/hostname"}]}}}})";
  p = podFromJson(Json::parse(body), KubeConfig{});
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->spec.pod_constraints.anti_affinity.size(), 1u);
  EXPECT_EQ(p->spec.pod_constraints.anti_affinity[0].topology_key, "kubernetes.io/hostname");
  EXPECT_TRUE(termSelects(p->spec.pod_constraints.anti_affinity[0], "ml", "ml", {{"app", "b"}}));
  EXPECT_FALSE(termSelects(p->spec.pod_constraints.anti_affinity[0], "ml", "ml", {{"app", "a"}}));
}

TEST(KubeServeConfigTest, ParsesTheSchedulingSection) {
  auto cfg =
      parseServeConfigString(R"(kube: {api_server: "https://127.0.0.1:6443", scheduler_name: gpu}
scheduling:
  gpu_types: [{name: A10, rank: 1}]
  queues: [{name: a, guaranteed: {gpus: {A10: 2}}}]
  placement: [{match: {namespace: a, service_account: runner}, queue: a, tier: 0}]
)");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->kube.scheduler_name, "gpu");
  ASSERT_EQ(cfg->scheduling.queues.size(), 1u);
  EXPECT_EQ(cfg->scheduling.placement[0].service_account, "runner");
}

KubePod podWith(std::string ns, std::map<std::string, std::string> labels) {
  KubePod p;
  p.ns = std::move(ns);
  p.name = "p";
  p.spec.labels = std::move(labels);
  return p;
}

// policy/v1 PodDisruptionBudgets as the API server returns them (status from the disruption
// controller): matchLabels and matchExpressions ANDed, an empty selector selects the whole
// namespace, a missing one nothing, and no status means no disruption allowed.
TEST(KubeObjectsTest, PodDisruptionBudgetSelectsAsLabelSelectorsDo) {
  auto pdb = pdbFromJson(Json::parse(R"({"metadata":{"name":"b","namespace":"ml"},
      "spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"web"},
        "matchExpressions":[{"key":"tier","operator":"NotIn","values":["batch"]},
                            {"key":"team","operator":"Exists"}]}},
      "status":{"disruptionsAllowed":2,"currentHealthy":3}})"));
  ASSERT_TRUE(pdb.ok()) << pdb.status().message();
  EXPECT_EQ(pdb->disruptions_allowed, 2);
  EXPECT_TRUE(pdb->selects(podWith("ml", {{"app", "web"}, {"team", "a"}})));
  EXPECT_TRUE(pdb->selects(podWith("ml", {{"app", "web"}, {"team", "a"}, {"tier", "serve"}})));
  EXPECT_FALSE(pdb->selects(podWith("ml", {{"app", "web"}, {"team", "a"}, {"tier", "batch"}})));
  EXPECT_FALSE(pdb->selects(podWith("ml", {{"app", "web"}})));  // no team label
  EXPECT_FALSE(pdb->selects(podWith("ml", {{"app", "db"}, {"team", "a"}})));
  EXPECT_FALSE(pdb->selects(podWith("other", {{"app", "web"}, {"team", "a"}})));

  auto all = pdbFromJson(Json::parse(R"({"metadata":{"name":"all","namespace":"ml"},
      "spec":{"maxUnavailable":0,"selector":{}}})"));
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->selects(podWith("ml", {})));
  EXPECT_EQ(all->disruptions_allowed, 0);  // no status yet
  auto none = pdbFromJson(Json::parse(R"({"metadata":{"name":"n","namespace":"ml"},"spec":{}})"));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->selects(podWith("ml", {})));
  auto odd = pdbFromJson(Json::parse(R"({"metadata":{"name":"o","namespace":"ml"},
      "spec":{"selector":{"matchExpressions":[{"key":"a","operator":"Gt","values":["1"]}]}}})"));
  ASSERT_TRUE(odd.ok());
  EXPECT_FALSE(odd->selects(podWith("ml", {{"a", "5"}})));  // not a label-selector operator
  EXPECT_FALSE(pdbFromJson(Json::parse(R"({"spec":{}})")).ok());
  // A status the disruption controller has not brought up to the spec yet allows nothing.
  auto stale = pdbFromJson(Json::parse(R"({"metadata":{"name":"s","namespace":"ml","generation":3},
      "spec":{"selector":{}},"status":{"disruptionsAllowed":4,"observedGeneration":2}})"));
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->disruptions_allowed, 0);
  auto fresh = pdbFromJson(Json::parse(R"({"metadata":{"name":"s","namespace":"ml","generation":3},
      "spec":{"selector":{}},"status":{"disruptionsAllowed":4,"observedGeneration":3}})"));
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->disruptions_allowed, 4);
}

// A plan cut to its budgets: a node whose pods would take a budget below zero keeps none of its
// moves (it would not come free), and the budget a kept node uses is gone for the nodes after it.
TEST(KubeObjectsTest, RepackPlanKeepsWithinDisruptionBudgets) {
  RepackPlan plan;
  auto move = [](PodId pod, std::string from) {
    Migration m;
    m.pod = pod;
    m.from = std::move(from);
    m.to = "target";
    m.gpu_milli = 1000;
    return m;
  };
  // node-a: pod 1 (budget 0); node-b: pods 2 and 3 (budget 0 both); node-c: pod 4 (budget 0);
  // node-d: pod 5 (budget 1).
  plan.moves = {move(1, "node-a"), move(2, "node-b"), move(3, "node-b"), move(4, "node-c"),
                move(5, "node-d")};
  plan.nodes_emptied = {"node-a", "node-b", "node-c", "node-d"};
  plan.gpu_milli_freed = 5000;
  std::vector<KubePdb> pdbs(2);
  pdbs[0].disruptions_allowed = 2;
  pdbs[1].disruptions_allowed = 0;
  const std::function<std::vector<size_t>(PodId)> budgets = [](PodId id) {
    return id == 5 ? std::vector<size_t>{1} : std::vector<size_t>{0};
  };
  const RepackPlan out = keepWithinBudgets(plan, pdbs, budgets);
  // node-a uses 1 of budget 0's 2; node-b needs 2 more (only 1 left): dropped whole; node-c takes
  // the last one; node-d's budget allows none.
  EXPECT_EQ(out.nodes_emptied, (std::vector<std::string>{"node-a", "node-c"}));
  ASSERT_EQ(out.moves.size(), 2u);
  EXPECT_EQ(out.moves[0].pod, 1u);
  EXPECT_EQ(out.moves[1].pod, 4u);
  EXPECT_EQ(out.gpu_milli_freed, 2000);
  // No budget selects anything: the plan is kept as it is.
  const std::function<std::vector<size_t>(PodId)> unprotected = [](PodId) {
    return std::vector<size_t>{};
  };
  EXPECT_EQ(keepWithinBudgets(plan, pdbs, unprotected).moves.size(), 5u);
}

}  // namespace
}  // namespace infera::sched::kube
