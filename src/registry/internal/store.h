#pragma once
// Registry internals: the registry's tables in the metadata store (SQLite file or PostgreSQL,
// through store::SqlDb, so the same code and tests run on both), with MLflow's semantics: soft-
// deleted versions that keep their number, aliases that go with their version, hard deletes of
// models with everything under them. Every change bumps the change generation replicas poll.
//
// Errors carry MLflow's meaning in their code: kInvalidArgument (INVALID_PARAMETER_VALUE),
// kNotFound (RESOURCE_DOES_NOT_EXIST), kAlreadyExists (RESOURCE_ALREADY_EXISTS),
// kFailedPrecondition (a rollback with nothing to go back to), kUnavailable (the store is
// unreachable). Messages are MLflow's texts where MLflow has one.
//
// One thread at a time (it owns one SqlDb); open one per thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "gateway/observer.h"
#include "registry/registry.h"
#include "store/sql.h"

namespace infera::registry {

struct NewVersion {
  std::string name;
  std::string source;
  std::optional<std::string> run_id;
  std::optional<std::string> run_link;
  std::optional<std::string> description;
  std::string model_id;
  std::vector<Tag> tags;
};

// A binding stored by the admin API: `ref` is "3" (a version) or "@alias".
struct Binding {
  std::string model;
  std::string ref;
  std::vector<std::string> deployments;
  int64_t updated_ms = 0;
};

// Data capture of a model version ("name/3").
struct CaptureSettings {
  std::string target;
  double sample = 0;                       // share of requests captured
  bool flag_errors = false;                // flag (and capture) answers with status >= 500
  int64_t flag_slower_ms = 0;              // flag answers slower than this (0 = off)
  std::vector<std::string> flag_contains;  // flag answers containing any of these
  int64_t updated_ms = 0;
};

// One inference in the review queue (or only captured, not flagged).
struct ReviewItem {
  std::string request_id;
  int64_t ts_ms = 0;
  std::string model;
  std::string target;
  std::string arm;
  std::string key_id;
  int status = 0;
  double latency_ms = 0;
  std::string request;
  std::string response;
  bool flagged = false;
  std::string reason;
  std::string flagged_by;
  int64_t flagged_ms = 0;
  std::string verdict;
  std::string label;
  std::string reviewer;
  std::string note;
  int64_t reviewed_ms = 0;
};

struct ReviewQuery {
  std::string model;   // the registered model ("" = all)
  std::string target;  // "name/3" ("" = any version)
  std::string
      state;  // "pending" (flagged, no verdict) | "reviewed" | "flagged" | "captured" | "" (all)
  int limit = 100;
  std::string after;  // request id to page after (ts order)
};

// Everything routing needs, loaded at once.
struct RoutingState {
  int64_t generation = 0;
  struct Version {
    std::string name;
    int64_t version = 0;
  };
  std::vector<Version> versions;  // not deleted
  struct Alias {
    std::string name;
    std::string alias;
    int64_t version = 0;
  };
  std::vector<Alias> aliases;
  std::vector<Binding> bindings;
  std::vector<std::pair<std::string, std::string>> experiments;  // model -> spec JSON
  std::vector<CaptureSettings> captures;
  std::vector<std::string> opt_out_keys;
};

struct ShadowRow {
  gateway::ShadowOutcome outcome;
};

class RegistryStore {
 public:
  static Result<std::unique_ptr<RegistryStore>> open(const std::string& url, const Clock& clock);
  store::SqlDb& db() { return *db_; }
  Result<int64_t> generation();

  // ---- registered models ----
  Result<RegisteredModel> createModel(const std::string& name, const std::string& description,
                                      const std::vector<Tag>& tags);
  Result<RegisteredModel> getModel(const std::string& name);
  Result<RegisteredModel> renameModel(const std::string& name, const std::string& new_name);
  Result<RegisteredModel> updateModel(const std::string& name, const std::string& description);
  Status deleteModel(const std::string& name);
  // Every model with its tags, aliases and latest versions (searches filter and page in memory).
  Result<std::vector<RegisteredModel>> allModels();
  Status setModelTag(const std::string& name, const std::string& key, const std::string& value);
  Status deleteModelTag(const std::string& name, const std::string& key);

  // ---- aliases ----
  Result<AliasMove> setAlias(const std::string& name, const std::string& alias, int64_t version,
                             const std::string& actor, const std::string& reason);
  // Silent when the alias does not exist (MLflow); the move is recorded when it did.
  Status deleteAlias(const std::string& name, const std::string& alias, const std::string& actor,
                     const std::string& reason);
  Result<ModelVersion> versionByAlias(const std::string& name, const std::string& alias);
  Result<std::vector<AliasMove>> aliasHistory(const std::string& name, const std::string& alias,
                                              int limit);
  Result<AliasMove> rollbackAlias(const std::string& name, const std::string& alias,
                                  const std::string& actor, const std::string& reason);

  // ---- versions ----
  Result<ModelVersion> createVersion(const NewVersion& v);
  Result<ModelVersion> getVersion(const std::string& name, int64_t version);
  Result<ModelVersion> updateVersion(const std::string& name, int64_t version,
                                     const std::optional<std::string>& description);
  Status deleteVersion(const std::string& name, int64_t version, const std::string& actor);
  // Every version that is not deleted, with tags and aliases.
  Result<std::vector<ModelVersion>> allVersions();
  Result<std::vector<ModelVersion>> latestVersions(const std::string& name,
                                                   const std::vector<std::string>& stages);
  Result<ModelVersion> transitionStage(const std::string& name, int64_t version,
                                       const std::string& stage, bool archive_existing);
  Status setVersionTag(const std::string& name, int64_t version, const std::string& key,
                       const std::string& value);
  Status deleteVersionTag(const std::string& name, int64_t version, const std::string& key);
  Result<std::string> downloadUri(const std::string& name, int64_t version);
  // After an artifact upload: the version's storage location becomes `location` and its totals
  // are recounted.
  Status recordArtifact(const std::string& name, int64_t version, const std::string& path,
                        int64_t size, const std::string& sha256, const std::string& location);
  struct Artifact {
    std::string path;
    int64_t size = 0;
    std::string sha256;
    int64_t created_ms = 0;
  };
  Result<std::vector<Artifact>> artifacts(const std::string& name, int64_t version);
  Result<std::optional<Artifact>> artifact(const std::string& name, int64_t version,
                                           const std::string& path);

  // ---- serving ----
  Result<std::vector<Binding>> bindings(const std::string& name);
  Status setBinding(const Binding& b);
  Status deleteBinding(const std::string& name, const std::string& ref);
  Result<std::optional<std::string>> experiment(const std::string& name);
  Status setExperiment(const std::string& name, const std::string& spec_json);
  Status deleteExperiment(const std::string& name);
  Result<RoutingState> routingState();

  // ---- shadow outcomes, capture and review ----
  Status insertShadow(const std::vector<gateway::ShadowOutcome>& batch, int64_t max_rows);
  Result<std::vector<gateway::ShadowOutcome>> shadowOutcomes(const std::string& model, int limit);
  Result<std::optional<CaptureSettings>> captureSettings(const std::string& target);
  Status setCapture(const CaptureSettings& c);
  Status deleteCapture(const std::string& target);
  Result<std::vector<std::string>> optOutKeys();
  Status setOptOut(const std::string& key_id, bool out);
  // Captured inferences (merged with flags that came first); keeps at most max_rows per target,
  // removing unflagged rows first.
  Status insertCaptures(const std::vector<gateway::CapturedInference>& batch, int64_t max_rows);
  // A flag by request id: marks the captured inference, or records the flag alone. `model` and
  // `target` fill in what the store does not know yet.
  Status flag(const std::string& request_id, const std::string& reason, const std::string& by,
              const std::string& model, const std::string& target);
  Status review(const std::string& request_id, const std::string& verdict, const std::string& label,
                const std::string& reviewer, const std::string& note);
  Result<std::vector<ReviewItem>> reviews(const ReviewQuery& q);
  Result<std::optional<ReviewItem>> reviewItem(const std::string& request_id);

 private:
  RegistryStore(std::unique_ptr<store::SqlDb> db, const Clock& clock)
      : db_(std::move(db)), clock_(clock) {}
  Status migrate();
  int64_t now() const { return clock_.unixMillis(); }
  // Runs `body` in a transaction that also bumps the generation; retried when a concurrent
  // writer (PostgreSQL) took the same key first.
  Status mutate(const std::function<Status()>& body);
  Status requireModel(const std::string& name);
  Result<ModelVersion> loadVersion(const std::string& name, int64_t version, bool with_aliases);
  Status fillModel(RegisteredModel& m);
  Result<AliasMove> moveAliasLocked(const std::string& name, const std::string& alias, int64_t to,
                                    const std::string& actor, const std::string& reason);
  std::unique_ptr<store::SqlDb> db_;
  const Clock& clock_;
};

// MLflow's stage names, canonicalised case-insensitively; nothing for an unknown one.
std::optional<std::string> canonicalStage(std::string_view stage);
// "3" -> 3; kInvalidArgument "Parameter 'version' must be an integer, got '...'."
Result<int64_t> parseVersion(std::string_view version);
// MLflow's checks of names, aliases and tags (kInvalidArgument with MLflow's message).
Status validateAlias(const std::string& alias);
Status validateTag(const std::string& key, const std::string& value);

}  // namespace infera::registry
