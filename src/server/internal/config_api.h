#pragma once
// The admin config API's parts (GET/POST /admin/config, which the console's config screen drives;
// server.cc registers the routes): the config file as JSON (plain YAML scalars typed as YAML's
// core schema reads them, quoted ones kept as strings), JSON written back as block YAML that reads
// back to the same JSON, a config-validation error message split into its key paths, the check of
// a proposed config with the config loader itself, and the write-back with a backup.
//
// JSON objects keep the file's key order (ordered_json), so a file written back keeps it too.
// Thread-safe (no shared state); the file functions block on disk (the admin loop's work).

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "server/config.h"

namespace infera::server {

// The value that stands for a secret in GET /admin/config; a POST that sends it back keeps the
// file's value.
inline constexpr std::string_view kRedacted = "(redacted)";

nlohmann::ordered_json yamlToJson(const YAML::Node& node);
// Block YAML (sequences of scalars in flow style); strings that would read back as another type
// are quoted. kInvalidArgument when the root is not an object.
Result<std::string> jsonToYaml(const nlohmann::ordered_json& root);

// The errors of a failed config load (ConfigErrors::toStatus's lines, "path (line N): message",
// or a YAML syntax error), each with its key path ("" for the file as a whole).
std::vector<ConfigError> configErrorsOf(const Status& status);

// Replaces governance.admin_token and governance.key_secret with kRedacted (when set).
void redactSecrets(nlohmann::ordered_json& config);
// Puts back the values of `file` where `config` holds kRedacted.
void restoreSecrets(nlohmann::ordered_json& config, const nlohmann::ordered_json& file);

// The file at `path` for GET /admin/config: {"config": JSON with secrets redacted, "yaml": that
// JSON written as YAML}. kNotFound/kInvalidArgument when it cannot be read or parsed.
Result<nlohmann::ordered_json> readConfigDocument(const std::string& path);
// The same for a config's text (the shared store's generation).
Result<nlohmann::ordered_json> configDocumentOf(const std::string& text);

// A proposed config (JSON) checked as the file it would become at `path`: secrets sent back as
// kRedacted restored from the current file, written as YAML, loaded by loadConfig from a
// temporary file beside `path` (so relative paths resolve alike). On success `config` is what
// would run and `yaml` the file's new text; else the loader's kInvalidArgument (configErrorsOf).
struct CheckedConfig {
  Config config;
  std::string yaml;              // the new file
  std::string redacted_yaml;     // the same with secrets redacted (for the diff the console shows)
  bool edited_in_place = false;  // `yaml` is the old file with only changed values replaced
};

// The file `file` with only the values that differ from `want` replaced where they stand, so its
// comments, key order, quoting and layout stay; nullopt when the change is more than scalar
// values (keys or list items added or removed) or the edited text would not read back as `want`
// (the caller then writes the whole file anew).
std::optional<std::string> editScalarsInPlace(const std::string& file,
                                              const nlohmann::ordered_json& want);

// `current`: the config's text now when it is not the file at `path` (the shared store's newest
// generation); secrets and the in-place edit are taken from it.
Result<CheckedConfig> checkConfigDocument(nlohmann::ordered_json proposed, const std::string& path,
                                          const std::string* current = nullptr);

// Replaces the file at `path` with `text`: the current file copied to `<path>.bak` first, the new
// one written beside and renamed over (a reader sees the old file or the new, never half). Returns
// the backup's path.
Result<std::string> writeConfigFile(const std::string& path, const std::string& text);
// Whether `path` and its directory are writable by this process.
bool configWritable(const std::string& path);

}  // namespace infera::server
