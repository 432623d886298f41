#include "registry/internal/search.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json.h"
#include "core/utf8.h"

namespace infera::registry {
namespace {

constexpr std::string_view kPromptTag = "mlflow.prompt.is_prompt";

std::string upper(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string lowerStr(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Token {
  enum class Kind { kWord, kString, kOp, kOpen, kClose, kComma } kind;
  std::string text;
};

Status invalidClause(std::string_view filter) {
  return Status::invalidArgument("Invalid clause(s) in filter string: " + std::string(filter));
}

// Words are identifiers (tags.`a b` and tags."a b" included), keywords and bare numbers.
Result<std::vector<Token>> tokenize(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  auto isWordChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
           c == ':' || c == '+';
  };
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '\'' || c == '"') {
      const size_t end = s.find(c, i + 1);
      if (end == std::string_view::npos) return invalidClause(s);
      out.push_back({Token::Kind::kString, std::string(s.substr(i + 1, end - i - 1))});
      i = end + 1;
      continue;
    }
    if (c == '(' || c == ')' || c == ',') {
      out.push_back({c == '('   ? Token::Kind::kOpen
                     : c == ')' ? Token::Kind::kClose
                                : Token::Kind::kComma,
                     {}});
      ++i;
      continue;
    }
    if (c == '=' || c == '!' || c == '<' || c == '>') {
      std::string op(1, c);
      if (i + 1 < s.size() && s[i + 1] == '=') op += '=';
      if (op == "!") return invalidClause(s);
      out.push_back({Token::Kind::kOp, op});
      i += op.size();
      continue;
    }
    if (isWordChar(c) || c == '`') {
      std::string word;
      while (i < s.size()) {
        if (s[i] == '`' || ((s[i] == '"') && !word.empty() && word.back() == '.')) {
          const char q = s[i];
          const size_t end = s.find(q, i + 1);
          if (end == std::string_view::npos) return invalidClause(s);
          word += '\x01';  // marks a quoted part: its characters are literal
          word.append(s.substr(i + 1, end - i - 1));
          word += '\x01';
          i = end + 1;
          continue;
        }
        if (!isWordChar(s[i])) break;
        word += s[i++];
      }
      out.push_back({Token::Kind::kWord, std::move(word)});
      continue;
    }
    return invalidClause(s);
  }
  return out;
}

std::string unquoted(std::string_view w) {
  std::string out;
  for (char c : w) {
    if (c != '\x01') out += c;
  }
  return out;
}

// The identifier's entity and key: "name", "attribute.name", "tags.k", "tag.`k k`".
Status splitIdentifier(const std::string& word, std::string& entity, std::string& key) {
  // Split at the first '.' outside a quoted part.
  bool quoted = false;
  size_t dot = std::string::npos;
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] == '\x01') quoted = !quoted;
    if (word[i] == '.' && !quoted) {
      dot = i;
      break;
    }
  }
  if (dot == std::string::npos) {
    entity = "attribute";
    key = unquoted(word);
    return Status::ok();
  }
  entity = unquoted(word.substr(0, dot));
  key = unquoted(word.substr(dot + 1));
  if (entity != "attribute" && entity != "tag" && entity != "tags") {
    return Status::invalidArgument("Invalid entity type '" + entity +
                                   "'. Valid entity types are ('attribute', 'tag', 'tags')");
  }
  return Status::ok();
}

Status unquotedValue(const std::string& v) {
  return Status::invalidArgument(
      "Parameter value is either not quoted or unidentified quote types used for string "
      "value " +
      v + ". Use either single or double quotes.");
}

bool compareString(const std::string& op, const std::string& value, std::string_view actual) {
  if (op == "=") return actual == value;
  if (op == "!=") return actual != value;
  if (op == "LIKE") return likeMatch(value, actual, false);
  if (op == "ILIKE") return likeMatch(value, actual, true);
  return false;
}

const std::string* tagValue(const std::vector<Tag>& tags, const std::string& key) {
  for (const auto& t : tags) {
    if (t.key == key) return &t.value;
  }
  return nullptr;
}

bool matchTag(const FilterClause& c, const std::vector<Tag>& tags) {
  const std::string* v = tagValue(tags, c.key);
  // For the prompt marker, an entity without the tag counts as 'false'.
  static const std::string kFalse = "false";
  if (!v && c.key == kPromptTag) v = &kFalse;
  if (!v) return false;
  return compareString(c.op, c.value, *v);
}

bool isPrompt(const std::vector<Tag>& tags) {
  const std::string* v = tagValue(tags, std::string(kPromptTag));
  return v && lowerStr(*v) == "true";
}

}  // namespace

bool likeMatch(std::string_view p, std::string_view t, bool ci) {
  auto eq = [ci](char a, char b) {
    if (!ci) return a == b;
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  };
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '%') {
      star = pi++;
      mark = ti;
    } else if (pi < p.size() && (p[pi] == '_' || eq(p[pi], t[ti]))) {
      ++pi;
      ++ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '%') ++pi;
  return pi == p.size();
}

Result<Filter> parseFilter(std::string_view filter, Entity entity) {
  Filter f;
  std::string_view trimmed = filter;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.front())))
    trimmed.remove_prefix(1);
  if (trimmed.empty()) return f;
  INFERA_ASSIGN_OR_RETURN(std::vector<Token> toks, tokenize(filter));
  size_t i = 0;
  auto word = [&](size_t k) -> const Token* {
    return k < toks.size() && toks[k].kind == Token::Kind::kWord ? &toks[k] : nullptr;
  };
  while (i < toks.size()) {
    if (!word(i)) return invalidClause(filter);
    std::string ent, key;
    INFERA_RETURN_IF_ERROR(splitIdentifier(toks[i].text, ent, key));
    ++i;
    FilterClause c;
    if (ent == "attribute") {
      if (key == "name") {
        c.field = FilterClause::Field::kName;
      } else if (entity == Entity::kModelVersion && key == "run_id") {
        c.field = FilterClause::Field::kRunId;
      } else if (entity == Entity::kModelVersion && key == "source_path") {
        c.field = FilterClause::Field::kSource;
      } else if (entity == Entity::kModelVersion && key == "version_number") {
        c.field = FilterClause::Field::kVersion;
      } else {
        return Status::invalidArgument(
            entity == Entity::kRegisteredModel
                ? "Invalid attribute key '" + key + "' specified. Valid keys are '{'name'}'"
                : "Invalid attribute key '" + key +
                      "' specified. Valid keys are '{'name', 'run_id', 'source_path', "
                      "'version_number'}'");
      }
    } else {
      c.field = FilterClause::Field::kTag;
      c.key = key;
    }
    // The comparator.
    if (i >= toks.size()) return invalidClause(filter);
    if (toks[i].kind == Token::Kind::kOp) {
      c.op = toks[i].text;
    } else if (toks[i].kind == Token::Kind::kWord) {
      c.op = upper(toks[i].text);
      if (c.op == "NOT" && word(i + 1) &&
          (upper(toks[i + 1].text) == "LIKE" || upper(toks[i + 1].text) == "ILIKE")) {
        return invalidClause(filter);
      }
    } else {
      return invalidClause(filter);
    }
    ++i;
    const bool numeric = c.field == FilterClause::Field::kVersion;
    const std::set<std::string> string_ops = {"=", "!=", "LIKE", "ILIKE"};
    const std::set<std::string> number_ops = {"=", "!=", "<", "<=", ">", ">="};
    if (c.op == "IN") {
      if (c.field != FilterClause::Field::kRunId) return invalidClause(filter);
      if (i >= toks.size() || toks[i].kind != Token::Kind::kOpen) return invalidClause(filter);
      ++i;
      bool any = false;
      while (i < toks.size() && toks[i].kind != Token::Kind::kClose) {
        if (toks[i].kind == Token::Kind::kComma) {
          ++i;
          continue;
        }
        if (toks[i].kind != Token::Kind::kString) return unquotedValue(toks[i].text);
        any = true;
        const std::string& v = toks[i].text;
        // MLflow drops values with upper-case letters (run ids are lower-case hex).
        if (std::none_of(v.begin(), v.end(),
                         [](char ch) { return std::isupper(static_cast<unsigned char>(ch)); })) {
          c.values.push_back(v);
        }
        ++i;
      }
      if (i >= toks.size()) return invalidClause(filter);
      ++i;  // ')'
      if (!any) {
        return Status::invalidArgument(
            "While parsing a list in the query, expected a non-empty list of string "
            "values, but got empty list");
      }
    } else if (numeric) {
      if (!number_ops.count(c.op)) return invalidClause(filter);
      if (i >= toks.size() || toks[i].kind != Token::Kind::kWord) return invalidClause(filter);
      const std::string& n = toks[i].text;
      if (n.empty() || n.size() > 18 ||
          !std::all_of(n.begin(), n.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
        return invalidClause(filter);
      }
      c.number = std::stoll(n);
      ++i;
    } else {
      if (!string_ops.count(c.op)) return invalidClause(filter);
      if (i >= toks.size()) return invalidClause(filter);
      if (toks[i].kind == Token::Kind::kWord) return unquotedValue(toks[i].text);
      if (toks[i].kind != Token::Kind::kString) return invalidClause(filter);
      c.value = toks[i].text;
      ++i;
    }
    if (c.field == FilterClause::Field::kTag && c.key == kPromptTag &&
        ((c.op == "=" && lowerStr(c.value) == "true") ||
         (c.op == "!=" && lowerStr(c.value) == "false"))) {
      f.includes_prompts = true;
    }
    f.clauses.push_back(std::move(c));
    if (i < toks.size()) {
      if (!word(i) || upper(toks[i].text) != "AND") return invalidClause(filter);
      ++i;
      if (i >= toks.size()) return invalidClause(filter);
    }
  }
  return f;
}

bool matches(const Filter& f, const RegisteredModel& m) {
  if (!f.includes_prompts && isPrompt(m.tags)) return false;
  for (const auto& c : f.clauses) {
    const bool ok = c.field == FilterClause::Field::kTag ? matchTag(c, m.tags)
                                                         : compareString(c.op, c.value, m.name);
    if (!ok) return false;
  }
  return true;
}

bool matches(const Filter& f, const ModelVersion& v) {
  if (!f.includes_prompts && isPrompt(v.tags)) return false;
  for (const auto& c : f.clauses) {
    bool ok = false;
    switch (c.field) {
      case FilterClause::Field::kName:
        ok = compareString(c.op, c.value, v.name);
        break;
      case FilterClause::Field::kSource:
        ok = compareString(c.op, c.value, v.source);
        break;
      case FilterClause::Field::kTag:
        ok = matchTag(c, v.tags);
        break;
      case FilterClause::Field::kRunId: {
        const std::string run = v.run_id.value_or("");
        if (c.op == "IN") {
          ok = std::find(c.values.begin(), c.values.end(), run) != c.values.end();
        } else {
          ok = compareString(c.op, c.value, run);
        }
        break;
      }
      case FilterClause::Field::kVersion: {
        const int64_t n = v.version;
        ok = c.op == "="    ? n == c.number
             : c.op == "!=" ? n != c.number
             : c.op == "<"  ? n < c.number
             : c.op == "<=" ? n <= c.number
             : c.op == ">"  ? n > c.number
                            : n >= c.number;
        break;
      }
    }
    if (!ok) return false;
  }
  return true;
}

Result<std::vector<OrderKey>> parseOrderBy(const std::vector<std::string>& clauses, Entity entity) {
  std::vector<OrderKey> out;
  std::vector<std::string> seen;
  for (const auto& clause : clauses) {
    std::string c = clause;
    while (!c.empty() && std::isspace(static_cast<unsigned char>(c.back()))) c.pop_back();
    size_t start = 0;
    while (start < c.size() && std::isspace(static_cast<unsigned char>(c[start]))) ++start;
    c = c.substr(start);
    std::string key = c, dir;
    const size_t sp = c.find_last_of(" \t");
    if (sp != std::string::npos) {
      key = c.substr(0, sp);
      dir = upper(c.substr(sp + 1));
      while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
    }
    if (key.size() >= 2 && key.front() == '`' && key.back() == '`')
      key = key.substr(1, key.size() - 2);
    if (key.starts_with("attribute.")) key = key.substr(10);
    if (!dir.empty() && dir != "ASC" && dir != "DESC") {
      return Status::invalidArgument("Invalid ordering key in order_by clause '" + clause + "'.");
    }
    if (entity == Entity::kRegisteredModel) {
      if (key == "timestamp") key = "last_updated_timestamp";
      if (key != "name" && key != "last_updated_timestamp") {
        return Status::invalidArgument(
            "Invalid order by key '" + key +
            "' specified. Valid keys are '{'name', 'timestamp', 'last_updated_timestamp'}'");
      }
    } else if (key != "name" && key != "version_number" && key != "creation_timestamp" &&
               key != "last_updated_timestamp") {
      return Status::invalidArgument(
          "Invalid attribute key '" + key +
          "' specified. Valid keys are '{'name', 'version_number', 'creation_timestamp', "
          "'last_updated_timestamp'}'");
    }
    seen.push_back(key);
    out.push_back({key, dir != "DESC"});
  }
  std::vector<std::string> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    std::string list;
    for (const auto& k : seen) list += (list.empty() ? "" : ", ") + ("'" + k + "'");
    return Status::invalidArgument("`order_by` contains duplicate fields: [" + list + "]");
  }
  auto has = [&](const std::string& k) {
    return std::any_of(out.begin(), out.end(), [&](const OrderKey& o) { return o.key == k; });
  };
  if (entity == Entity::kModelVersion && out.empty()) {
    out = {{"last_updated_timestamp", false}, {"name", true}, {"version_number", false}};
  }
  if (!has("name")) out.push_back({"name", true});
  if (entity == Entity::kModelVersion && !has("version_number"))
    out.push_back({"version_number", false});
  return out;
}

void sortModels(std::vector<RegisteredModel>& models, const std::vector<OrderKey>& order) {
  std::stable_sort(models.begin(), models.end(),
                   [&](const RegisteredModel& a, const RegisteredModel& b) {
                     for (const auto& o : order) {
                       int c = 0;
                       if (o.key == "name") {
                         c = a.name.compare(b.name);
                       } else {
                         c = a.updated_ms < b.updated_ms ? -1 : a.updated_ms > b.updated_ms ? 1 : 0;
                       }
                       if (c != 0) return o.ascending ? c < 0 : c > 0;
                     }
                     return false;
                   });
}

void sortVersions(std::vector<ModelVersion>& versions, const std::vector<OrderKey>& order) {
  std::stable_sort(versions.begin(), versions.end(),
                   [&](const ModelVersion& a, const ModelVersion& b) {
                     for (const auto& o : order) {
                       int c = 0;
                       auto cmp = [](int64_t x, int64_t y) { return x < y ? -1 : x > y ? 1 : 0; };
                       if (o.key == "name") {
                         c = a.name.compare(b.name);
                       } else if (o.key == "version_number") {
                         c = cmp(a.version, b.version);
                       } else if (o.key == "creation_timestamp") {
                         c = cmp(a.created_ms, b.created_ms);
                       } else {
                         c = cmp(a.updated_ms, b.updated_ms);
                       }
                       if (c != 0) return o.ascending ? c < 0 : c > 0;
                     }
                     return false;
                   });
}

namespace {
constexpr const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t n = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kB64[(n >> 18) & 63];
    out += kB64[(n >> 12) & 63];
    out += kB64[(n >> 6) & 63];
    out += kB64[n & 63];
  }
  if (i < in.size()) {
    uint32_t n = uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) n |= uint8_t(in[i + 1]) << 8;
    out += kB64[(n >> 18) & 63];
    out += kB64[(n >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool base64Decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.size() % 4 != 0) return false;
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + static_cast<size_t>(k)];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return false;
      v[k] = val(c);
      if (v[k] < 0) return false;
    }
    const uint32_t n =
        (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return true;
}

Result<int64_t> decodePageToken(std::string_view token) {
  if (token.empty()) return int64_t{0};
  std::string decoded;
  if (!base64Decode(token, decoded))
    return Status::invalidArgument("Invalid page token, could not base64-decode");
  // Decoded bytes did not pass the door's UTF-8 check: they must not reach the message as they are.
  if (!validUtf8(decoded))
    return Status::invalidArgument("Invalid page token, decoded value is not UTF-8");
  // A token is {"offset": N}: small and flat, whatever a client sends.
  Result<nlohmann::json> read = readJson(decoded, JsonLimits{4096, 4});
  if (!read.ok()) return Status::invalidArgument("Invalid page token, decoded value=" + decoded);
  const nlohmann::json& j = *read;
  if (!j.is_object() || !j.contains("offset") || !j["offset"].is_number_integer() ||
      j["offset"].get<int64_t>() < 0) {
    return Status::invalidArgument("Invalid page token, parsed value=" + dumpJson(j));
  }
  return j["offset"].get<int64_t>();
}

std::string encodePageToken(int64_t offset) {
  // Python's json.dumps: a space after the colon.
  return base64Encode("{\"offset\": " + std::to_string(offset) + "}");
}

}  // namespace infera::registry
