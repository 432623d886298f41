#include "server/internal/config_api.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/json.h"

namespace infera::server {
namespace {

using json = nlohmann::ordered_json;

bool isNullWord(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

bool isBoolWord(const std::string& s, bool& out) {
  if (s == "true" || s == "True" || s == "TRUE") {
    out = true;
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    out = false;
    return true;
  }
  return false;
}

bool allDigits(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

std::string_view withoutSign(std::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return s;
}

bool isInteger(const std::string& s) { return s.size() < 19 && allDigits(withoutSign(s)); }

// YAML 1.2 core schema floats: [-+]?(.d+|d+(.d*)?)([eE][-+]?d+)?, .inf, .nan.
bool isFloat(const std::string& text) {
  std::string_view s = withoutSign(text);
  if (s == ".inf" || s == ".Inf" || s == ".INF") return true;
  if (text == ".nan" || text == ".NaN" || text == ".NAN") return true;
  const size_t e = s.find_first_of("eE");
  if (e != std::string_view::npos) {
    std::string_view exp = s.substr(e + 1);
    if (!allDigits(withoutSign(exp))) return false;
    s = s.substr(0, e);
  }
  const size_t dot = s.find('.');
  if (dot == std::string_view::npos) return allDigits(s);
  const std::string_view whole = s.substr(0, dot), frac = s.substr(dot + 1);
  if (whole.empty()) return allDigits(frac);
  return allDigits(whole) && (frac.empty() || allDigits(frac));
}

// Whether a plain scalar with this text would read back as something other than a string.
bool readsAsOtherType(const std::string& s) {
  bool b = false;
  return isNullWord(s) || isBoolWord(s, b) || isInteger(s) || isFloat(s);
}

json scalarToJson(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted: a string whatever it says
  bool b = false;
  if (isNullWord(s)) return nullptr;
  if (isBoolWord(s, b)) return b;
  if (isInteger(s)) return std::strtoll(s.c_str(), nullptr, 10);
  if (isFloat(s) && s.find_first_of("iInN") == std::string::npos)
    return std::strtod(s.c_str(), nullptr);
  return s;
}

void emit(YAML::Emitter& out, const json& j) {
  switch (j.type()) {
    case json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [k, v] : j.items()) {
        out << YAML::Key << k << YAML::Value;
        emit(out, v);
      }
      out << YAML::EndMap;
      break;
    case json::value_t::array: {
      bool scalars = true;
      for (const auto& v : j) scalars = scalars && !v.is_structured();
      out << (scalars ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
      for (const auto& v : j) emit(out, v);
      out << YAML::EndSeq;
      break;
    }
    case json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      if (readsAsOtherType(s)) out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case json::value_t::null:
      out << YAML::Null;
      break;
    case json::value_t::number_float: {
      // 2.0 and 2 are one value to the config (and to a browser, which sends 2): one text.
      const double d = j.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) {
        out << std::to_string(static_cast<int64_t>(d));
      } else {
        out << dumpJson(j);
      }
      break;
    }
    default:  // integers and booleans: JSON's text is YAML's
      out << dumpJson(j);
      break;
  }
}

json* member(json& j, const char* section, const char* key) {
  if (!j.is_object() || !j.contains(section) || !j[section].is_object()) return nullptr;
  json& s = j[section];
  if (!s.contains(key)) return nullptr;
  return &s[key];
}

// One line of ConfigErrors::toStatus: "  path (line N): message".
bool parseErrorLine(std::string_view line, ConfigError& out) {
  if (line.size() < 2 || line.substr(0, 2) != "  ") return false;
  line.remove_prefix(2);
  const size_t colon = line.find(": ");
  if (colon == std::string_view::npos) return false;
  std::string_view head = line.substr(0, colon);
  out.message = std::string(line.substr(colon + 2));
  out.line = 0;
  const size_t paren = head.rfind(" (line ");
  if (paren != std::string_view::npos && head.back() == ')') {
    out.line = std::atoi(std::string(head.substr(paren + 7)).c_str());
    head = head.substr(0, paren);
  }
  out.path = head == "(root)" ? std::string() : std::string(head);
  return true;
}

}  // namespace

json yamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.Scalar()] = yamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& v : node) out.push_back(yamlToJson(v));
      return out;
    }
    case YAML::NodeType::Scalar:
      return scalarToJson(node);
    default:
      return nullptr;
  }
}

Result<std::string> jsonToYaml(const json& root) {
  if (!root.is_object()) return Status::invalidArgument("the config must be a JSON object");
  YAML::Emitter out;
  out.SetIndent(2);
  emit(out, root);
  if (!out.good())
    return Status::invalidArgument("cannot write the config as YAML: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

std::vector<ConfigError> configErrorsOf(const Status& status) {
  std::vector<ConfigError> out;
  const std::string& msg = status.message();
  size_t start = msg.find('\n');  // the first line counts the errors
  while (start != std::string::npos) {
    const size_t end = msg.find('\n', start + 1);
    const std::string_view line = std::string_view(msg).substr(
        start + 1, end == std::string::npos ? std::string::npos : end - start - 1);
    ConfigError e;
    if (parseErrorLine(line, e)) out.push_back(std::move(e));
    start = end;
  }
  if (out.empty()) {
    ConfigError e;
    const size_t at = msg.find("YAML syntax error at line ");
    if (at != std::string::npos) e.line = std::atoi(msg.c_str() + at + 26);
    e.message = msg;
    out.push_back(std::move(e));
  }
  return out;
}

void redactSecrets(json& config) {
  for (const char* key : {"admin_token", "key_secret"}) {
    if (json* v = member(config, "governance", key);
        v && v->is_string() && !v->get_ref<const std::string&>().empty()) {
      *v = std::string(kRedacted);
    }
  }
}

void restoreSecrets(json& config, const json& file) {
  json copy = file;
  for (const char* key : {"admin_token", "key_secret"}) {
    json* v = member(config, "governance", key);
    if (!v || !v->is_string() || v->get_ref<const std::string&>() != kRedacted) continue;
    if (const json* orig = member(copy, "governance", key)) {
      *v = *orig;
    } else {
      config["governance"].erase(key);
    }
  }
}

namespace {

Result<std::string> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::notFound("cannot open config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return Status::internal("cannot write " + path);
  return Status::ok();
}

std::string directoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

// One value's new text at a byte range of the original file.
struct Edit {
  size_t pos = 0, len = 0;
  std::string text;
};

// The source span of a scalar that starts at `pos`: a quoted scalar up to its closing quote, a
// plain one exactly its value (so a plain scalar folded over lines, which reads differently from
// its text, is not edited in place). 0 when the span cannot be told.
size_t scalarSpan(const std::string& text, size_t pos, const std::string& value) {
  if (pos >= text.size()) return 0;
  const char q = text[pos];
  if (q == '"' || q == '\'') {
    for (size_t i = pos + 1; i < text.size(); ++i) {
      if (text[i] == '\n') return 0;  // multi-line quoted scalars are rewritten instead
      if (q == '"' && text[i] == '\\') {
        ++i;
      } else if (text[i] == q) {
        if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
          ++i;
        } else {
          return i + 1 - pos;
        }
      }
    }
    return 0;
  }
  if (value.empty() || text.compare(pos, value.size(), value) != 0) return 0;
  return value.size();
}

size_t lineStartOf(const std::string& text, size_t pos) {
  if (pos == 0) return 0;
  const size_t nl = text.rfind('\n', pos - 1);
  return nl == std::string::npos ? 0 : nl + 1;
}

// Where a block collection (or one entry of it) that starts on the line of `pos` ends: after its
// last line of content (blank and comment lines after it are left to what follows). `indent`:
// the column of its entries (a map's keys, a sequence's dashes). A whole block runs while lines
// are indented at least that much (at the same column: another key of a map, or a dash of the
// sequence or of a key's value sequence); one entry (`entry`) stops at the next one.
size_t blockEnd(const std::string& text, size_t pos, size_t indent, bool seq, bool entry) {
  const size_t first_eol = text.find('\n', pos);
  size_t end = first_eol == std::string::npos ? text.size() : first_eol + 1;
  for (size_t at = end; at < text.size();) {
    const size_t eol = text.find('\n', at);
    const size_t next = eol == std::string::npos ? text.size() : eol + 1;
    size_t c = at;
    while (c < next && text[c] == ' ') ++c;
    if (c >= next || text[c] == '\n' || text[c] == '\r' || text[c] == '#') {
      at = next;
      continue;
    }
    const size_t col = c - at;
    if (col < indent) break;
    if (col == indent) {
      const bool dash = text[c] == '-' && (c + 1 >= next || text[c + 1] == ' ' ||
                                           text[c + 1] == '\n' || text[c + 1] == '\r');
      if (seq && (entry || !dash)) break;
      if (!seq &&
          ((entry && !dash) || text.compare(c, 3, "---") == 0 || text.compare(c, 3, "...") == 0)) {
        break;
      }
    }
    end = next;
    at = next;
  }
  return end;
}

// `value` (a map's added keys, or a sequence's added item) as block YAML at column `indent`,
// inserted at `at`.
bool insertion(const std::string& text, size_t at, size_t indent, const json& value,
               std::vector<Edit>& out) {
  YAML::Emitter e;
  e.SetIndent(2);
  emit(e, value);
  if (!e.good()) return false;
  const std::string line_end = text.find("\r\n") != std::string::npos ? "\r\n" : "\n";
  std::string block = at > 0 && text[at - 1] != '\n' ? line_end : "";
  const std::string emitted = e.c_str();
  for (size_t start = 0; start < emitted.size();) {
    const size_t eol = emitted.find('\n', start);
    const std::string_view line = std::string_view(emitted).substr(
        start, eol == std::string::npos ? std::string::npos : eol - start);
    block.append(indent, ' ');
    block.append(line);
    block += line_end;
    start = eol == std::string::npos ? emitted.size() : eol + 1;
  }
  out.push_back({at, 0, std::move(block)});
  return true;
}

// A block collection's entry column, or nullopt for a flow collection ({...}, [...]).
std::optional<size_t> blockIndent(const std::string& text, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.pos < 0 || static_cast<size_t>(mark.pos) >= text.size()) return std::nullopt;
  const size_t pos = static_cast<size_t>(mark.pos);
  if (text[pos] == '{' || text[pos] == '[') return std::nullopt;
  return pos - lineStartOf(text, pos);
}

// The edits that turn the file's tree `node` (read as `have`) into `want`: changed scalar values
// replaced where they stand; in block collections, keys added or removed and sequence items
// appended or one removed, as lines of their own at the collection's indentation (the lines
// around them, comments included, kept). False when that cannot express the change.
bool scalarEdits(const std::string& text, const YAML::Node& node, const json& have,
                 const json& want, std::vector<Edit>& out) {
  if (have == want) return true;
  if (have.is_object() && want.is_object() && node.IsMap()) {
    // A duplicate key (the loader reads the first, the JSON holds the last): not edited in place.
    if (node.size() != have.size()) return false;
    json added = json::object();
    for (const auto& [k, v] : want.items()) {
      if (!have.contains(k)) added[k] = v;
    }
    const bool same_keys = added.empty() && have.size() == want.size();
    std::optional<size_t> indent;
    if (!same_keys) {
      indent = blockIndent(text, node);
      if (!indent || want.empty()) return false;
    }
    for (const auto& kv : node) {
      const std::string& key = kv.first.Scalar();
      if (!have.contains(key)) return false;
      if (!want.contains(key)) {  // removed: its lines go
        const YAML::Mark m = kv.first.Mark();
        if (m.pos < 0) return false;
        const size_t start = lineStartOf(text, static_cast<size_t>(m.pos));
        const size_t end = blockEnd(text, static_cast<size_t>(m.pos), *indent, false, true);
        out.push_back({start, end - start, std::string()});
        continue;
      }
      if (!scalarEdits(text, kv.second, have[key], want[key], out)) return false;
    }
    if (!added.empty()) {
      const size_t at = blockEnd(text, static_cast<size_t>(node.Mark().pos), *indent, false, false);
      if (!insertion(text, at, *indent, added, out)) return false;
    }
    return true;
  }
  if (have.is_array() && want.is_array() && node.IsSequence()) {
    if (node.size() != have.size()) return false;
    if (have.size() == want.size()) {
      for (size_t i = 0; i < have.size(); ++i) {
        if (!scalarEdits(text, node[i], have[i], want[i], out)) return false;
      }
      return true;
    }
    const auto indent = blockIndent(text, node);
    if (!indent || want.empty()) return false;
    if (want.size() == have.size() + 1 &&
        std::equal(have.begin(), have.end(), want.begin(), want.end() - 1)) {  // appended
      const size_t at = blockEnd(text, static_cast<size_t>(node.Mark().pos), *indent, true, false);
      return insertion(text, at, *indent, json::array({want.back()}), out);
    }
    if (have.size() == want.size() + 1) {  // one item removed: which one
      for (size_t k = 0; k < have.size(); ++k) {
        bool match = true;
        for (size_t i = 0, j = 0; i < have.size() && match; ++i) {
          if (i == k) continue;
          match = have[i] == want[j++];
        }
        if (!match) continue;
        const YAML::Mark m = node[k].Mark();
        if (m.pos < 0) return false;
        const size_t start = lineStartOf(text, static_cast<size_t>(m.pos));
        const size_t end = blockEnd(text, static_cast<size_t>(m.pos), *indent, true, true);
        out.push_back({start, end - start, std::string()});
        return true;
      }
    }
    return false;
  }
  if (have.is_structured() || want.is_structured() || !node.IsScalar()) return false;
  const YAML::Mark mark = node.Mark();
  if (mark.pos < 0) return false;
  const size_t len = scalarSpan(text, static_cast<size_t>(mark.pos), node.Scalar());
  if (len == 0) return false;
  // A string keeps the quotes it had; other values are written as the whole-file writer would.
  std::string value;
  const char quote = text[static_cast<size_t>(mark.pos)];
  if (want.is_string() && quote == '\'') {
    value = "'";
    for (const char ch : want.get_ref<const std::string&>())
      value += ch == '\'' ? "''" : std::string(1, ch);
    value += "'";
  } else {
    YAML::Emitter e;
    if (want.is_string() && quote == '"') e << YAML::DoubleQuoted;
    emit(e, want);
    if (!e.good()) return false;
    value = e.c_str();
  }
  if (value.find('\n') != std::string::npos) return false;
  out.push_back({static_cast<size_t>(mark.pos), len, std::move(value)});
  return true;
}

// Equal as JSON values, object keys in any order (numbers by value, as nlohmann compares them).
bool sameJson(const json& a, const json& b) {
  if (a.is_object() && b.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      const auto it = b.find(k);
      if (it == b.end() || !sameJson(v, *it)) return false;
    }
    return true;
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!sameJson(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

std::optional<std::string> editScalarsInPlace(const std::string& file, const json& want) {
  // yaml-cpp's marks do not count a UTF-8 byte order mark: the edits are made after it.
  const std::string bom = file.rfind("\xEF\xBB\xBF", 0) == 0 ? file.substr(0, 3) : "";
  const std::string text = file.substr(bom.size());
  auto root = loadYamlString(text);
  if (!root.ok()) return std::nullopt;
  std::vector<Edit> edits;
  if (!scalarEdits(text, *root, yamlToJson(*root), want, edits)) return std::nullopt;
  // Stable: insertions at one place (a nested block and the blocks around it all ending there)
  // stay in the order they were made, innermost first, and are joined in that order.
  std::stable_sort(edits.begin(), edits.end(),
                   [](const Edit& a, const Edit& b) { return a.pos > b.pos; });
  std::vector<Edit> merged;
  for (Edit& e : edits) {
    if (merged.empty() || merged.back().pos != e.pos) {
      merged.push_back(std::move(e));
    } else if (merged.back().len == 0 && e.len == 0) {
      merged.back().text += e.text;
    } else if (merged.back().len != e.len || merged.back().text != e.text) {
      // A value reached twice through an alias is one edit (two different texts for it: none).
      return std::nullopt;
    }
  }
  edits = std::move(merged);
  std::string out = text;
  for (const Edit& e : edits) out.replace(e.pos, e.len, e.text);
  // The edited file must read back as exactly the config asked for (an anchor shared by two
  // values, a value that reads differently in a flow collection, ...), or it is not used. Key
  // order aside: the file keeps its own.
  auto back = loadYamlString(out);
  if (!back.ok() || !sameJson(yamlToJson(*back), want)) return std::nullopt;
  return bom + out;
}

Result<json> readConfigDocument(const std::string& path) {
  INFERA_ASSIGN_OR_RETURN(std::string text, readFile(path));
  return configDocumentOf(text);
}

Result<json> configDocumentOf(const std::string& text) {
  INFERA_ASSIGN_OR_RETURN(YAML::Node root, loadYamlString(text));
  json config = yamlToJson(root);
  if (!config.is_object()) config = json::object();
  redactSecrets(config);
  INFERA_ASSIGN_OR_RETURN(std::string yaml, jsonToYaml(config));
  return json{{"config", std::move(config)}, {"yaml", std::move(yaml)}};
}

Result<CheckedConfig> checkConfigDocument(json proposed, const std::string& path,
                                          const std::string* current) {
  if (!proposed.is_object()) return Status::invalidArgument("field 'config' must be an object");
  CheckedConfig out;
  INFERA_ASSIGN_OR_RETURN(out.redacted_yaml, jsonToYaml(proposed));
  std::optional<std::string> in_place;
  if (auto file = current ? Result<std::string>(*current) : readFile(path); file.ok()) {
    if (auto root = loadYamlString(*file); root.ok()) {
      restoreSecrets(proposed, yamlToJson(*root));
      in_place = editScalarsInPlace(*file, proposed);
    }
  }
  out.edited_in_place = in_place.has_value();
  if (in_place) {
    out.yaml = std::move(*in_place);
  } else {
    INFERA_ASSIGN_OR_RETURN(out.yaml, jsonToYaml(proposed));
  }
  // Unique per check: two applies on different loops never validate each other's bytes.
  static std::atomic<uint64_t> checks{0};
  const std::string tmp = path + ".check-" + std::to_string(::getpid()) + "-" +
                          std::to_string(checks.fetch_add(1)) + ".tmp";
  INFERA_RETURN_IF_ERROR(writeFile(tmp, out.yaml));
  auto cfg = loadConfig(tmp);
  std::remove(tmp.c_str());
  if (!cfg.ok()) {
    // The loader names the temporary file; the errors are the config's.
    std::string msg = cfg.status().message();
    if (msg.rfind(tmp + ": ", 0) == 0) msg = msg.substr(tmp.size() + 2);
    return Status::invalidArgument(msg);
  }
  out.config = std::move(*cfg);
  return out;
}

Result<std::string> writeConfigFile(const std::string& path, const std::string& text) {
  const std::string backup = path + ".bak";
  INFERA_ASSIGN_OR_RETURN(std::string current, readFile(path));
  INFERA_RETURN_IF_ERROR(writeFile(backup, current));
  const std::string tmp = path + ".new-" + std::to_string(::getpid()) + ".tmp";
  INFERA_RETURN_IF_ERROR(writeFile(tmp, text));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::internal("cannot replace " + path);
  }
  return backup;
}

bool configWritable(const std::string& path) {
  return ::access(path.c_str(), W_OK) == 0 && ::access(directoryOf(path).c_str(), W_OK) == 0;
}

}  // namespace infera::server
