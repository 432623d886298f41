#include "core/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace infera {

std::string ConfigError::toString() const {
  std::string out = path.empty() ? std::string("(root)") : path;
  if (line > 0) {
    out += " (line " + std::to_string(line) + ")";
  }
  out += ": ";
  out += message;
  return out;
}

void ConfigErrors::add(std::string path, int line, std::string message) {
  errors_.push_back(ConfigError{std::move(path), line, std::move(message)});
}

Status ConfigErrors::toStatus(std::string_view source) const {
  if (errors_.empty()) return Status::ok();
  std::string msg;
  if (!source.empty()) {
    msg += std::string(source) + ": ";
  }
  msg +=
      std::to_string(errors_.size()) + (errors_.size() == 1 ? " config error" : " config errors");
  for (const auto& e : errors_) {
    msg += "\n  ";
    msg += e.toString();
  }
  return Status::invalidArgument(std::move(msg));
}

ConfigReader::ConfigReader(YAML::Node node, ConfigErrors* errors, std::string path)
    : node_(std::move(node)), errors_(errors), path_(std::move(path)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    errors_->add(path_, line(), "must be a mapping");
    node_ = YAML::Node(YAML::NodeType::Map);
  }
}

int ConfigReader::lineOf(const YAML::Node& n) const {
  const auto mark = n.Mark();
  return mark.line >= 0 ? mark.line + 1 : 0;
}

int ConfigReader::line() const { return lineOf(node_); }

std::string ConfigReader::childPath(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

bool ConfigReader::present(const std::string& key) const {
  if (!node_.IsMap()) return false;
  const YAML::Node child = node_[key];
  return child.IsDefined() && !child.IsNull();
}

bool ConfigReader::scalar(const std::string& key, YAML::Node& out) {
  markSeen(key);
  if (!present(key)) return false;
  out = node_[key];
  if (!out.IsScalar()) {
    errors_->add(childPath(key), lineOf(out), "must be a scalar value");
    return false;
  }
  return true;
}

bool ConfigReader::optional(const std::string& key, std::string& out) {
  YAML::Node n;
  if (!scalar(key, n)) return false;
  out = n.Scalar();
  return true;
}

bool ConfigReader::optional(const std::string& key, bool& out) {
  YAML::Node n;
  if (!scalar(key, n)) return false;
  const std::string& s = n.Scalar();
  if (s == "true" || s == "yes" || s == "on") {
    out = true;
  } else if (s == "false" || s == "no" || s == "off") {
    out = false;
  } else {
    errors_->add(childPath(key), lineOf(n), "must be true or false, got '" + s + "'");
    return false;
  }
  return true;
}

bool ConfigReader::optional(const std::string& key, double& out, double min, double max) {
  YAML::Node n;
  if (!scalar(key, n)) return false;
  const std::string& s = n.Scalar();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0) {
    errors_->add(childPath(key), lineOf(n), "must be a number, got '" + s + "'");
    return false;
  }
  if (v < min || v > max) {
    std::ostringstream m;
    m << "must be in [" << min << ", " << max << "], got " << s;
    errors_->add(childPath(key), lineOf(n), m.str());
    return false;
  }
  out = v;
  return true;
}

bool ConfigReader::optional(const std::string& key, int64_t& out, int64_t min, int64_t max) {
  YAML::Node n;
  if (!scalar(key, n)) return false;
  const std::string& s = n.Scalar();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0) {
    errors_->add(childPath(key), lineOf(n), "must be an integer, got '" + s + "'");
    return false;
  }
  if (v < min || v > max) {
    errors_->add(childPath(key), lineOf(n),
                 "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + s);
    return false;
  }
  out = v;
  return true;
}

bool ConfigReader::optional(const std::string& key, int& out, int min, int max) {
  int64_t v = out;
  if (!optional(key, v, min, max)) return false;
  out = static_cast<int>(v);
  return true;
}

bool ConfigReader::optional(const std::string& key, std::vector<std::string>& out) {
  markSeen(key);
  if (!present(key)) return false;
  const YAML::Node n = node_[key];
  if (n.IsScalar()) {
    out = {n.Scalar()};
    return true;
  }
  if (!n.IsSequence()) {
    errors_->add(childPath(key), lineOf(n), "must be a list of strings");
    return false;
  }
  out.clear();
  for (size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsScalar()) {
      errors_->add(childPath(key) + "[" + std::to_string(i) + "]", lineOf(n[i]),
                   "must be a string");
      return false;
    }
    out.push_back(n[i].Scalar());
  }
  return true;
}

bool ConfigReader::optionalEnum(const std::string& key, std::string& out,
                                const std::vector<std::string>& allowed) {
  std::string v;
  if (!optional(key, v)) return false;
  for (const auto& a : allowed) {
    if (a == v) {
      out = v;
      return true;
    }
  }
  std::string list;
  for (const auto& a : allowed) {
    list += list.empty() ? a : ", " + a;
  }
  errors_->add(childPath(key), lineOf(node_[key]),
               "must be one of [" + list + "], got '" + v + "'");
  return false;
}

void ConfigReader::object(const std::string& key, const std::function<void(ConfigReader&)>& fn,
                          bool required) {
  markSeen(key);
  if (!present(key)) {
    if (required) errors_->add(childPath(key), line(), "is required");
    return;
  }
  ConfigReader child(node_[key], errors_, childPath(key));
  fn(child);
  child.finish();
}

void ConfigReader::forEach(const std::string& key,
                           const std::function<void(ConfigReader&, size_t)>& fn, bool required) {
  markSeen(key);
  if (!present(key)) {
    if (required) errors_->add(childPath(key), line(), "is required");
    return;
  }
  const YAML::Node seq = node_[key];
  if (!seq.IsSequence()) {
    errors_->add(childPath(key), lineOf(seq), "must be a list");
    return;
  }
  for (size_t i = 0; i < seq.size(); ++i) {
    ConfigReader child(seq[i], errors_, childPath(key) + "[" + std::to_string(i) + "]");
    fn(child, i);
    child.finish();
  }
}

void ConfigReader::forEachEntry(const std::string& key,
                                const std::function<void(const std::string&, ConfigReader&)>& fn,
                                bool required) {
  markSeen(key);
  if (!present(key)) {
    if (required) errors_->add(childPath(key), line(), "is required");
    return;
  }
  const YAML::Node map = node_[key];
  if (!map.IsMap()) {
    errors_->add(childPath(key), lineOf(map), "must be a mapping");
    return;
  }
  for (const auto& kv : map) {
    const std::string name = kv.first.Scalar();
    ConfigReader child(kv.second, errors_, childPath(key) + "." + name);
    fn(name, child);
    child.finish();
  }
}

void ConfigReader::error(const std::string& key, const std::string& message) {
  if (key.empty()) {
    errors_->add(path_, line(), message);
  } else {
    const YAML::Node n = node_.IsMap() ? node_[key] : YAML::Node();
    errors_->add(childPath(key), n.IsDefined() ? lineOf(n) : line(), message);
  }
}

namespace {

// Levenshtein distance, stopping early: more than `cap` is returned as cap + 1.
size_t editDistance(std::string_view a, std::string_view b, size_t cap) {
  if (a.size() > b.size() + cap || b.size() > a.size() + cap) return cap + 1;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    size_t best = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
      best = std::min(best, row[j]);
    }
    if (best > cap) return cap + 1;
  }
  return row[b.size()];
}

}  // namespace

// The known key nearest to `key` (a typo: at most a third of its letters off, 2 at most), or "".
std::string nearestKey(std::string_view key, const std::set<std::string>& known) {
  const size_t cap = std::min<size_t>(2, std::max<size_t>(1, key.size() / 3));
  std::string best;
  size_t best_d = cap + 1;
  for (const auto& k : known) {
    const size_t d = editDistance(key, k, cap);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

void ConfigReader::finish() {
  if (finished_ || !node_.IsMap()) return;
  finished_ = true;
  for (const auto& kv : node_) {
    const std::string key = kv.first.Scalar();
    if (seen_.count(key) == 0) {
      const std::string near = nearestKey(key, seen_);
      errors_->add(childPath(key), lineOf(kv.first),
                   near.empty() ? "unknown key" : "unknown key (did you mean '" + near + "'?)");
    }
  }
}

Result<YAML::Node> loadYamlString(const std::string& text) {
  try {
    YAML::Node n = YAML::Load(text);
    if (!n.IsDefined() || n.IsNull()) {
      n = YAML::Node(YAML::NodeType::Map);
    }
    return n;
  } catch (const YAML::Exception& e) {
    return Status::invalidArgument("YAML syntax error at line " + std::to_string(e.mark.line + 1) +
                                   ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

Result<YAML::Node> loadYamlFile(const std::string& file) {
  std::ifstream in(file);
  if (!in) {
    return Status::notFound("cannot open config file " + file);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = loadYamlString(ss.str());
  if (!r.ok()) return r.status().withContext(file);
  return r;
}

}  // namespace infera
