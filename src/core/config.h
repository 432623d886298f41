#pragma once
// Helpers for mapping YAML onto plain config structs with validation that reports every error
// with its key path and line, and rejects unknown keys (see STYLE.md "Configuration").
//
//   ConfigErrors errors;
//   ConfigReader r(root, &errors);
//   r.optional("workers", cfg.workers, 1, 256);
//   r.forEach("backends", [&](ConfigReader& b) { b.required("url", be.url); });
//   r.finish();                 // unknown keys under this node become errors
//   INFERA_RETURN_IF_ERROR(errors.toStatus());
//
// Not thread-safe; used on the control thread only. Never throws (yaml-cpp exceptions are
// caught and converted).

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace infera {

struct ConfigError {
  std::string path;  // "backends[2].max_connections"
  int line = 0;      // 1-based, 0 when unknown
  std::string message;
  std::string toString() const;
};

class ConfigErrors {
 public:
  void add(std::string path, int line, std::string message);
  bool empty() const { return errors_.empty(); }
  const std::vector<ConfigError>& all() const { return errors_; }
  // kInvalidArgument listing every error, one per line; ok when there are none.
  Status toStatus(std::string_view source = {}) const;

 private:
  std::vector<ConfigError> errors_;
};

class ConfigReader {
 public:
  ConfigReader(YAML::Node node, ConfigErrors* errors, std::string path = {});

  bool present(const std::string& key) const;
  const std::string& path() const { return path_; }
  int line() const;
  const YAML::Node& node() const { return node_; }

  // Scalars. The `optional` forms leave `out` (its default) untouched when the key is absent.
  bool optional(const std::string& key, std::string& out);
  bool optional(const std::string& key, bool& out);
  bool optional(const std::string& key, double& out,
                double min = -std::numeric_limits<double>::max(),
                double max = std::numeric_limits<double>::max());
  bool optional(const std::string& key, int64_t& out,
                int64_t min = std::numeric_limits<int64_t>::min(),
                int64_t max = std::numeric_limits<int64_t>::max());
  bool optional(const std::string& key, int& out, int min = std::numeric_limits<int>::min(),
                int max = std::numeric_limits<int>::max());
  bool optional(const std::string& key, std::vector<std::string>& out);
  // One of `allowed`.
  bool optionalEnum(const std::string& key, std::string& out,
                    const std::vector<std::string>& allowed);
  template <typename T, typename... Args>
  bool required(const std::string& key, T& out, Args&&... args) {
    if (!present(key)) {
      errors_->add(childPath(key), line(), "is required");
      markSeen(key);
      return false;
    }
    return optional(key, out, std::forward<Args>(args)...);
  }

  // Sub-mapping; calls fn with a reader for it, then checks its unknown keys.
  void object(const std::string& key, const std::function<void(ConfigReader&)>& fn,
              bool required = false);
  // Sequence of mappings; fn gets each element's reader and index.
  void forEach(const std::string& key, const std::function<void(ConfigReader&, size_t)>& fn,
               bool required = false);
  // Mapping of name -> mapping; fn gets the entry's name and reader.
  void forEachEntry(const std::string& key,
                    const std::function<void(const std::string&, ConfigReader&)>& fn,
                    bool required = false);

  // Reports an error at `key` (or at this node when key is empty).
  void error(const std::string& key, const std::string& message);
  // Reports every key of this mapping that no accessor asked for. Once: a reader that finishes
  // itself inside object()/forEach() is not finished again (which would say every error twice).
  void finish();

  std::string childPath(const std::string& key) const;

 private:
  void markSeen(const std::string& key) { seen_.insert(key); }
  bool scalar(const std::string& key, YAML::Node& out);
  int lineOf(const YAML::Node& n) const;

  YAML::Node node_;
  ConfigErrors* errors_;
  std::string path_;
  std::set<std::string> seen_;
  bool finished_ = false;
};

// The key of `known` nearest to `key` when `key` looks like a typo of it (a third of its letters
// off at most, and 2), else "": the "did you mean" of an unknown key.
std::string nearestKey(std::string_view key, const std::set<std::string>& known);

// Loads YAML text/file; parse errors become kInvalidArgument naming the line.
Result<YAML::Node> loadYamlFile(const std::string& file);
Result<YAML::Node> loadYamlString(const std::string& text);

}  // namespace infera
