#pragma once
// Registry internals: MLflow's model-registry REST API as pure request -> reply functions over a
// RegistryStore (the HTTP glue runs them on a worker thread). Parameters come from the query
// string for GET (repeated keys for lists; a JSON body only when there is no query string) and
// from a JSON object body for POST/PATCH/DELETE; unknown fields are ignored; answers are MLflow's
// JSON (proto field names, unset fields omitted, int64 as numbers, versions as strings) and its
// error body {"error_code","message"} with its statuses.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/text.h"
#include "registry/internal/store.h"

namespace infera::registry {

struct MlflowRequest {
  std::string method;    // GET | POST | PATCH | DELETE
  std::string endpoint;  // after /api/2.0/mlflow/: "registered-models/create"
  std::string query;     // the raw query string (after '?'), "" when none
  std::string body;
  std::string content_type;
  std::string actor;  // who asks (alias history, audit)
  // Which registered models the caller may see (null: all). Searches leave the others out; other
  // calls on them answer PERMISSION_DENIED.
  std::function<bool(const std::string& name)> visible;
};

struct MlflowReply {
  int status = 200;
  std::string body;
  // A write that succeeded: what to audit (action "", nothing to audit) and whether routes may
  // have moved.
  std::string audit_action;
  std::string audit_target;
  std::string audit_detail;  // JSON object
  bool changed = false;
  // model-versions/delete and registered-models/delete: artifact directories to remove.
  std::vector<std::pair<std::string, int64_t>>
      removed_versions;  // (name, version); version 0 = all
};

struct MlflowEndpoint {
  const char* method;
  const char* path;  // after /api/2.0/mlflow/
  bool write;
};
// Every endpoint served (method, path, whether it writes).
const std::vector<MlflowEndpoint>& mlflowEndpoints();

MlflowReply handleMlflow(RegistryStore& store, const MlflowRequest& req);

// {"error_code": code, "message": message} with the status MLflow gives that code.
MlflowReply mlflowError(const Status& s);
MlflowReply mlflowError(std::string_view code, int status, std::string_view message);
// Store/registry statuses in MLflow's terms.
std::string_view mlflowCode(const Status& s);
int mlflowStatus(const Status& s);

// MLflow JSON of a version and a model (also used by the admin API).
std::string versionJson(const ModelVersion& v);
std::string modelJson(const RegisteredModel& m);

}  // namespace infera::registry
