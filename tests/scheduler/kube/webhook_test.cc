// Golden AdmissionReview responses: tests/testdata/kube/admission/NAME.request.json (an
// AdmissionReview v1 around kubectl's own pod JSON) against NAME.expected.json, plus the decoded
// JSONPatch applied to the pod (so the golden files are checked by what they do, not only by
// their bytes). INFERA_UPDATE_GOLDEN=1 rewrites the expected files.
#include "scheduler/kube/webhook.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace infera::sched::kube {
namespace {

using Json = nlohmann::json;

std::string dataPath(const std::string& name) {
  return std::string(INFERA_TEST_SOURCE_DIR) + "/tests/testdata/kube/admission/" + name;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

WebhookPolicy testPolicy() {
  auto sc = parseSchedulingConfigString(R"(
gpu_types: [{name: T4, rank: 1, cost: 0.35}, {name: A10, rank: 2, cost: 1.0}, {name: A100, rank: 3, cost: 3.0}]
queues:
  - name: prod
    children:
      - name: vision
        guaranteed: {gpus: {A10: 4}}
  - name: research
  - name: batch
placement:
  - match: {namespace: vision}
    queue: prod/vision
    tier: 0
  - match: {namespace: research, labels: {kind: notebook}}
    queue: research
    tier: 2
  - match: {namespace: research, service_account: batch-runner}
    queue: batch
    tier: 1
  - match: {namespace: research}
    queue: research
)");
  EXPECT_TRUE(sc.ok()) << sc.status().message();
  WebhookPolicy p;
  p.scheduling = *sc;
  p.webhook.cpu_per_gpu = 8;
  p.webhook.memory_gib_per_gpu = 32;
  return p;
}

// RFC 6902 add/replace/remove, enough to apply the webhook's patches.
Json applyPatch(Json doc, const Json& ops) {
  for (const Json& op : ops) {
    const std::string path = op["path"];
    Json::json_pointer ptr(path);
    if (op["op"] == "add" && path.size() >= 2 && path.substr(path.size() - 2) == "/-") {
      doc[Json::json_pointer(path.substr(0, path.size() - 2))].push_back(op["value"]);
    } else if (op["op"] == "add" || op["op"] == "replace") {
      doc[ptr] = op["value"];
    }
  }
  return doc;
}

std::string decode64(const std::string& in) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (const char c : in) {
    if (c == '=') break;
    const auto pos = kAlphabet.find(c);
    if (pos == std::string::npos) continue;
    val = (val << 6) + static_cast<int>(pos);
    bits += 6;
    if (bits >= 0) {
      out += static_cast<char>((val >> bits) & 0xFF);
      bits -= 8;
    }
  }
  return out;
}

struct Answer {
  Json response;
  Json pod;  // the request's pod with the patch applied
};

Answer run(const std::string& name) {
  const std::string request = readFile(dataPath(name + ".request.json"));
  auto out = admissionResponse(request, testPolicy());
  EXPECT_TRUE(out.ok()) << out.status().message();
  const std::string text = out.ok() ? *out + "\n" : std::string();
  const std::string expected_path = dataPath(name + ".expected.json");
  if (std::getenv("INFERA_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(expected_path) << text;
  }
  EXPECT_EQ(text, readFile(expected_path)) << "golden " << expected_path;
  Answer a;
  a.response = Json::parse(text)["response"];
  a.pod = Json::parse(request)["request"]["object"];
  if (a.response.contains("patch")) {
    a.pod = applyPatch(a.pod, Json::parse(decode64(a.response["patch"].get<std::string>())));
  }
  return a;
}

TEST(WebhookTest, NamespaceRuleSetsSchedulerQueueTierAndProportionalShare) {
  const Answer a = run("namespace_rule");
  EXPECT_EQ(a.response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
  EXPECT_TRUE(a.response["allowed"].get<bool>());
  EXPECT_EQ(a.response["patchType"], "JSONPatch");
  EXPECT_EQ(a.pod["spec"]["schedulerName"], "infera");
  EXPECT_EQ(a.pod["metadata"]["annotations"]["infera.ai/queue"], "prod/vision");
  EXPECT_EQ(a.pod["metadata"]["annotations"]["infera.ai/tier"], "0");
  EXPECT_EQ(a.pod["spec"]["containers"][0]["resources"]["requests"]["cpu"], "8");
  EXPECT_EQ(a.pod["spec"]["containers"][0]["resources"]["requests"]["memory"], "32768Mi");
}

TEST(WebhookTest, LabelsRuleAndLadderMinimumAddNodeAffinityAndKeepAnnotations) {
  const Answer a = run("labels_ladder");
  EXPECT_EQ(a.pod["metadata"]["annotations"]["infera.ai/queue"], "research");
  EXPECT_EQ(a.pod["metadata"]["annotations"]["infera.ai/tier"], "2");
  EXPECT_EQ(a.pod["metadata"]["annotations"]["owner"], "ana");
  const Json& expr =
      a.pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
           ["nodeSelectorTerms"][0]["matchExpressions"][0];
  EXPECT_EQ(expr["key"], "nvidia.com/gpu.product");
  EXPECT_EQ(expr["operator"], "In");
  EXPECT_EQ(expr["values"], Json::array({"A10", "A100"}));
  EXPECT_EQ(a.pod["spec"]["containers"][0]["resources"]["requests"]["cpu"], "16");
}

TEST(WebhookTest, ServiceAccountRuleAndExistingAffinityTermsGetTheLadder) {
  const Answer a = run("service_account_affinity");
  EXPECT_EQ(a.pod["metadata"]["annotations"]["infera.ai/queue"], "batch");
  EXPECT_EQ(a.pod["metadata"]["annotations"]["infera.ai/tier"], "1");
  const Json& exprs =
      a.pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
           ["nodeSelectorTerms"][0]["matchExpressions"];
  ASSERT_EQ(exprs.size(), 2u);
  EXPECT_EQ(exprs[0]["key"], "topology.kubernetes.io/zone");
  EXPECT_EQ(exprs[1]["values"], Json::array({"A100"}));
}

TEST(WebhookTest, CpuOnlyPodPassesUnchanged) {
  const Answer a = run("cpu_pod");
  EXPECT_TRUE(a.response["allowed"].get<bool>());
  EXPECT_FALSE(a.response.contains("patch"));
  EXPECT_EQ(a.response["uid"], "c5e0f304-0000-4000-8000-000000000004");
}

TEST(WebhookTest, SharedGpuPodGetsItsShareOfOneGpu) {
  const Answer a = run("shared_gpu");
  EXPECT_EQ(a.pod["spec"]["containers"][0]["resources"]["requests"]["cpu"], "4");
  EXPECT_EQ(a.pod["spec"]["containers"][0]["resources"]["requests"]["memory"], "16384Mi");
}

TEST(WebhookTest, RejectsWhatIsNotAnAdmissionReview) {
  EXPECT_FALSE(admissionResponse("{}", testPolicy()).ok());
  EXPECT_FALSE(admissionResponse("not json", testPolicy()).ok());
  EXPECT_FALSE(admissionResponse(R"({"request":{"operation":"CREATE"}})", testPolicy()).ok());
}

}  // namespace
}  // namespace infera::sched::kube
