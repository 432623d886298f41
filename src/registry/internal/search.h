#pragma once
// Registry internals: MLflow's search semantics, evaluated in memory over the store's rows (so
// SQLite and PostgreSQL agree exactly: LIKE is case-sensitive on both, ILIKE not): the filter
// grammar (`<clause> [AND <clause>]...`, no OR), order_by keys with their tie-breaks, and page
// tokens (base64 of {"offset": N}, as MLflow writes them). Pure functions.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "registry/registry.h"

namespace infera::registry {

enum class Entity { kRegisteredModel, kModelVersion };

struct FilterClause {
  enum class Field { kName, kRunId, kSource, kVersion, kTag };
  Field field = Field::kName;
  std::string key;  // tag key
  std::string op;   // "=", "!=", "LIKE", "ILIKE", "IN", "<", "<=", ">", ">="
  std::string value;
  std::vector<std::string> values;  // IN
  int64_t number = 0;               // version_number
};

struct Filter {
  std::vector<FilterClause> clauses;
  bool includes_prompts = false;  // a clause asks for prompts (tags.`mlflow.prompt.is_prompt`)
};

// kInvalidArgument with MLflow's message for a filter it would refuse.
Result<Filter> parseFilter(std::string_view filter, Entity entity);
bool matches(const Filter& f, const RegisteredModel& m);
bool matches(const Filter& f, const ModelVersion& v);

// LIKE / ILIKE: '%' any run, '_' one character, anchored at both ends.
bool likeMatch(std::string_view pattern, std::string_view text, bool case_insensitive);

struct OrderKey {
  std::string key;  // name | last_updated_timestamp | creation_timestamp | version_number
  bool ascending = true;
};
// With MLflow's tie-breaks appended (and its default for model versions when `clauses` is empty).
Result<std::vector<OrderKey>> parseOrderBy(const std::vector<std::string>& clauses, Entity entity);
void sortModels(std::vector<RegisteredModel>& models, const std::vector<OrderKey>& order);
void sortVersions(std::vector<ModelVersion>& versions, const std::vector<OrderKey>& order);

// "" = 0. kInvalidArgument with MLflow's messages.
Result<int64_t> decodePageToken(std::string_view token);
std::string encodePageToken(int64_t offset);

std::string base64Encode(std::string_view in);
// False when `in` is not standard base64.
bool base64Decode(std::string_view in, std::string& out);

}  // namespace infera::registry
