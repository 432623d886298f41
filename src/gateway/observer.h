#pragma once
// What the gateway tells a component about requests it served for a route that asks for it:
// shadow outcomes (a request mirrored to a shadow target after the primary answered) and captured
// inferences (a sample of a model version's requests and responses, and those a rule flagged).
// The model registry implements it and keeps them in its store.

#include <cstdint>
#include <string>

namespace infera::gateway {

struct ShadowOutcome {
  int64_t ts_ms = 0;
  std::string request_id;
  std::string model;    // as the client named it ("fraud")
  std::string primary;  // the route that answered the client ("fraud/3")
  std::string shadow;   // the shadow route ("fraud/4")
  int status = 0;       // the shadow's HTTP status; 0 when it gave none (timeout, connect failure)
  std::string error;    // "" | "timeout" | "unavailable" | "shed" | "no_endpoint"
  double latency_ms = 0;
  double primary_latency_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int matched = -1;  // deterministic requests: 1 when the shadow's output equals the primary's, 0
                     // not; -1 not compared
};

struct CapturedInference {
  int64_t ts_ms = 0;
  std::string request_id;
  std::string model;   // as the client named it
  std::string target;  // the route that served it ("fraud/3")
  std::string arm;     // the experiment arm, if any
  std::string key_id;  // the caller's key (access control on)
  int status = 0;
  double latency_ms = 0;
  std::string request;   // body, cut to the route's capture limit
  std::string response;  // body (or SSE text), cut likewise
  bool flagged = false;  // a capture rule flagged it for review
  std::string reason;
};

class InferenceObserver {
 public:
  virtual ~InferenceObserver() = default;
  // Called on a worker loop: must not block (queue the record and return).
  virtual void shadowDone(ShadowOutcome&& outcome) = 0;
  virtual void captured(CapturedInference&& inference) = 0;
};

}  // namespace infera::gateway
