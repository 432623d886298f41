#pragma once
// The mutating admission webhook of Infera's Kubernetes scheduler: an AdmissionReview v1 request
// (a Pod being created) in, an AdmissionReview response out, echoing the request's uid, with a
// base64 JSONPatch that
//   - sets spec.schedulerName to Infera's,
//   - maps the pod to its queue (and tier) by the scheduling config's placement rules (namespace,
//     labels, service account; first match wins) into the queue/tier annotations,
//   - raises its CPU/memory requests to the per-GPU share (cpu_per_gpu, memory_gib_per_gpu),
//   - adds a required node affinity for its GPU ladder (min-gpu-type annotation: that type and
//     every type ranked above it; or the gpu-types annotation's list) on the GPU-type label.
// Pods without GPUs pass unchanged (unless gpu_pods_only is false). A pure function: the HTTPS
// server (kube.h) calls it; tests compare its output with golden files.

#include <string>
#include <string_view>

#include "core/status.h"
#include "scheduler/kube/kube.h"
#include "scheduler/queues.h"

namespace infera::sched::kube {

struct WebhookPolicy {
  KubeConfig kube;
  SchedulingConfig scheduling;
  WebhookConfig webhook;
};

// kInvalidArgument when `review_json` is not an AdmissionReview v1 with a request.uid. Any
// well-formed request gets an answer (allowed; with a patch when the pod is mutated).
Result<std::string> admissionResponse(std::string_view review_json, const WebhookPolicy& policy);

}  // namespace infera::sched::kube
