#include "vectors/internal/filter.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace infera::vectors {
namespace {

Status formatError(const std::string& what) {
  return Status::invalidArgument("Format error in JSON body: " + what);
}

bool isInteger(const Json& v) {
  return v.is_number_integer();
}  // signed or unsigned, never a float

bool asI64(const Json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(INT64_MAX)) return false;
    out = int64_t(v.get<uint64_t>());
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return true;
  }
  return false;
}

Result<Filter> parseFilterAt(const Json& j, int depth);

Result<Range> parseRange(const Json& j, const char* what) {
  if (!j.is_object()) return formatError(std::string(what) + " must be an object");
  Range r;
  for (const auto& [k, v] : j.items()) {
    if (v.is_null()) continue;
    if (!v.is_number()) return formatError(std::string(what) + "." + k + " must be a number");
    const double d = v.get<double>();
    if (k == "gt")
      r.gt = d;
    else if (k == "gte")
      r.gte = d;
    else if (k == "lt")
      r.lt = d;
    else if (k == "lte")
      r.lte = d;
    else
      return formatError("unknown field `" + k + "` in " + what);
  }
  return r;
}

Status parseMatch(const Json& m, Condition& c) {
  if (!m.is_object()) return formatError("match must be an object");
  auto has = [&](const char* k) { return m.contains(k); };
  if (has("value")) {
    const Json& v = m["value"];
    if (!(v.is_string() || isInteger(v) || v.is_boolean())) {
      return formatError("match.value must be a string, an integer or a bool");
    }
    c.match = Condition::Match::kValue;
    c.value = v;
    return Status::ok();
  }
  for (const char* k : {"any", "except"}) {
    if (!has(k)) continue;
    const Json& l = m[k];
    if (!l.is_array()) return formatError(std::string("match.") + k + " must be a list");
    c.match = std::string_view(k) == "any" ? Condition::Match::kAny : Condition::Match::kExcept;
    c.list_is_strings = l.empty() || l[0].is_string();
    for (const auto& x : l) {
      int64_t i = 0;
      if (c.list_is_strings && x.is_string()) {
        c.strs.push_back(x.get<std::string>());
      } else if (!c.list_is_strings && asI64(x, i)) {
        c.ints.push_back(i);
      } else {
        return formatError(std::string("match.") + k + " must list only strings or only integers");
      }
    }
    return Status::ok();
  }
  const std::pair<const char*, Condition::Match> texts[] = {
      {"text", Condition::Match::kText},
      {"text_any", Condition::Match::kTextAny},
      {"phrase", Condition::Match::kPhrase},
      {"prefix", Condition::Match::kPrefix}};
  for (const auto& [k, kind] : texts) {
    if (!has(k)) continue;
    if (!m[k].is_string()) return formatError(std::string("match.") + k + " must be a string");
    c.match = kind;
    c.text = m[k].get<std::string>();
    return Status::ok();
  }
  return formatError("data did not match any variant of untagged enum Match");
}

Result<Condition> parseCondition(const Json& j, int depth) {
  if (!j.is_object()) return formatError("a condition must be an object");
  Condition c;
  if (j.contains("key")) {
    if (!j["key"].is_string()) return formatError("key must be a string");
    INFERA_ASSIGN_OR_RETURN(c.key, parseJsonPath(j["key"].get<std::string>()));
    if (j.contains("nested")) return formatError("a field condition cannot be nested");
    int set = 0;
    for (const auto& [k, v] : j.items()) {
      if (k == "key" || v.is_null()) continue;
      ++set;
      if (k == "match") {
        c.kind = Condition::Kind::kMatch;
        INFERA_RETURN_IF_ERROR(parseMatch(v, c));
      } else if (k == "range") {
        // RFC 3339 datetime ranges are not supported (docs/vectors.md).
        c.kind = Condition::Kind::kRange;
        INFERA_ASSIGN_OR_RETURN(c.range, parseRange(v, "range"));
      } else if (k == "values_count") {
        c.kind = Condition::Kind::kValuesCount;
        INFERA_ASSIGN_OR_RETURN(c.range, parseRange(v, "values_count"));
      } else if (k == "is_empty" || k == "is_null") {
        if (!v.is_boolean()) return formatError(k + " must be a bool");
        c.kind = k == "is_empty" ? Condition::Kind::kIsEmpty : Condition::Kind::kIsNull;
        c.flag = v.get<bool>();
      } else if (k.starts_with("geo_")) {
        return Status::invalidArgument("Bad request: geo conditions are not supported by Infera");
      } else {
        return formatError("unknown field `" + k + "` in a field condition");
      }
    }
    if (set == 0) {
      return Status::failedPrecondition(
          "Validation error in JSON body: [filter: At least one field condition must be "
          "specified]");
    }
    if (set > 1)
      return formatError("a field condition takes exactly one of match, range, values_count, ...");
    return c;
  }
  if (j.size() == 1) {
    // Named, not bound to *j.items().begin(): that proxy is a temporary (g++ -O3 caught the
    // dangling key).
    const auto first = j.begin();
    const std::string k = first.key();
    const Json& v = first.value();
    if (k == "is_empty" || k == "is_null") {
      if (!v.is_object() || !v.contains("key") || !v["key"].is_string())
        return formatError(k + " needs a key");
      c.kind = k == "is_empty" ? Condition::Kind::kIsEmpty : Condition::Kind::kIsNull;
      INFERA_ASSIGN_OR_RETURN(c.key, parseJsonPath(v["key"].get<std::string>()));
      return c;
    }
    if (k == "has_id") {
      if (!v.is_array()) return formatError("has_id must be a list of point ids");
      c.kind = Condition::Kind::kHasId;
      for (const auto& x : v) {
        INFERA_ASSIGN_OR_RETURN(PointId id, pointIdFromJson(x));
        c.ids.push_back(id);
      }
      std::sort(c.ids.begin(), c.ids.end());
      return c;
    }
    if (k == "nested") {
      if (!v.is_object() || !v.contains("key") || !v["key"].is_string() || !v.contains("filter")) {
        return formatError("nested needs a key and a filter");
      }
      c.kind = Condition::Kind::kNested;
      INFERA_ASSIGN_OR_RETURN(c.key, parseJsonPath(v["key"].get<std::string>() + "[]"));
      INFERA_ASSIGN_OR_RETURN(Filter sub, parseFilterAt(v["filter"], depth + 1));
      c.sub = std::make_shared<const Filter>(std::move(sub));
      return c;
    }
    if (k == "has_vector") {  // the unnamed vector: every point has it
      c.kind = Condition::Kind::kFilter;
      c.sub = std::make_shared<const Filter>();
      return c;
    }
  }
  // Otherwise a sub-filter.
  c.kind = Condition::Kind::kFilter;
  INFERA_ASSIGN_OR_RETURN(Filter sub, parseFilterAt(j, depth + 1));
  c.sub = std::make_shared<const Filter>(std::move(sub));
  return c;
}

Status parseList(const Json& v, int depth, std::vector<Condition>& out) {
  if (v.is_null()) return Status::ok();
  if (v.is_object()) {
    INFERA_ASSIGN_OR_RETURN(Condition c, parseCondition(v, depth));
    out.push_back(std::move(c));
    return Status::ok();
  }
  if (!v.is_array()) return formatError("a clause must be a condition or a list of conditions");
  for (const auto& x : v) {
    INFERA_ASSIGN_OR_RETURN(Condition c, parseCondition(x, depth));
    out.push_back(std::move(c));
  }
  return Status::ok();
}

Result<Filter> parseFilterAt(const Json& j, int depth) {
  if (depth > 32) return formatError("filter nested too deeply");
  if (!j.is_object()) return formatError("invalid type: expected struct Filter");
  Filter f;
  for (const auto& [k, v] : j.items()) {
    if (k == "must") {
      INFERA_RETURN_IF_ERROR(parseList(v, depth, f.must));
    } else if (k == "should") {
      INFERA_RETURN_IF_ERROR(parseList(v, depth, f.should));
      f.has_should = !v.is_null();
    } else if (k == "must_not") {
      INFERA_RETURN_IF_ERROR(parseList(v, depth, f.must_not));
    } else if (k == "min_should") {
      if (v.is_null()) continue;
      if (!v.is_object() || !v.contains("conditions") || !v.contains("min_count") ||
          !v["min_count"].is_number_unsigned()) {
        return formatError("min_should needs conditions and min_count");
      }
      INFERA_RETURN_IF_ERROR(parseList(v["conditions"], depth, f.min_should));
      f.min_count = v["min_count"].get<size_t>();
      f.has_min_should = true;
    } else {
      return formatError("unknown field `" + k +
                         "`, expected one of `should`, `min_should`, `must`, `must_not`");
    }
  }
  return f;
}

bool isEmptyValue(const Json& v) { return v.is_null() || (v.is_array() && v.empty()); }

bool matchOne(const Condition& c, const Json& v) {
  using M = Condition::Match;
  switch (c.match) {
    case M::kValue:
      if (c.value.is_string())
        return v.is_string() &&
               v.get_ref<const std::string&>() == c.value.get_ref<const std::string&>();
      if (c.value.is_boolean()) return v.is_boolean() && v.get<bool>() == c.value.get<bool>();
      {
        int64_t a = 0, b = 0;
        return asI64(v, a) && asI64(c.value, b) && a == b;
      }
    case M::kAny:
      if (c.list_is_strings) {
        return v.is_string() && std::find(c.strs.begin(), c.strs.end(),
                                          v.get_ref<const std::string&>()) != c.strs.end();
      } else {
        int64_t a = 0;
        return asI64(v, a) && std::find(c.ints.begin(), c.ints.end(), a) != c.ints.end();
      }
    case M::kExcept:
      if (v.is_null()) return false;
      if (c.list_is_strings && v.is_string()) {
        return std::find(c.strs.begin(), c.strs.end(), v.get_ref<const std::string&>()) ==
               c.strs.end();
      }
      if (!c.list_is_strings && isInteger(v)) {
        int64_t a = 0;
        return !asI64(v, a) || std::find(c.ints.begin(), c.ints.end(), a) == c.ints.end();
      }
      return true;  // another type never equals a listed value
    case M::kText:
    case M::kPhrase:
      return v.is_string() && v.get_ref<const std::string&>().find(c.text) != std::string::npos;
    case M::kPrefix:
      return v.is_string() && v.get_ref<const std::string&>().starts_with(c.text);
    case M::kTextAny: {
      if (!v.is_string()) return false;
      std::istringstream in(c.text);
      std::string tok;
      while (in >> tok) {
        if (v.get_ref<const std::string&>().find(tok) != std::string::npos) return true;
      }
      return false;
    }
  }
  return false;
}

template <typename Fn>
bool anyValue(const std::vector<const Json*>& values, Fn&& fn) {
  for (const Json* v : values) {
    if (v->is_array()) {
      for (const auto& e : *v) {
        if (fn(e)) return true;
      }
    } else if (fn(*v)) {
      return true;
    }
  }
  return false;
}

}  // namespace

Result<JsonPath> parseJsonPath(std::string_view text) {
  JsonPath p;
  p.text = std::string(text);
  size_t i = 0;
  auto bad = [&] { return formatError("invalid payload key `" + std::string(text) + "`"); };
  if (text.empty()) return bad();
  // A set-payload under a key nests the payload that deep: a key of 200,000 steps built a payload
  // no JSON writer could walk back (a stack overflow at every read and at every restart's replay).
  size_t steps = 1;
  for (const char c : text) steps += c == '.' || c == '[';
  if (steps > kMaxJsonPathSteps) {
    return formatError("payload key of more than " + std::to_string(kMaxJsonPathSteps) + " steps");
  }
  bool need_key = true;
  while (i < text.size()) {
    if (text[i] == '[') {
      const size_t close = text.find(']', i);
      if (close == std::string_view::npos) return bad();
      const std::string_view inner = text.substr(i + 1, close - i - 1);
      if (inner.empty()) {
        p.steps.push_back({JsonPath::Step::kAll, "", 0});
      } else {
        size_t idx = 0;
        for (char ch : inner) {
          if (ch < '0' || ch > '9') return bad();
          idx = idx * 10 + size_t(ch - '0');
        }
        p.steps.push_back({JsonPath::Step::kIndex, "", idx});
      }
      i = close + 1;
      need_key = false;
      continue;
    }
    if (text[i] == '.') {
      if (need_key) return bad();
      ++i;
      need_key = true;
      continue;
    }
    if (!need_key) return bad();
    std::string key;
    if (text[i] == '"') {
      const size_t close = text.find('"', i + 1);
      if (close == std::string_view::npos) return bad();
      key = std::string(text.substr(i + 1, close - i - 1));
      i = close + 1;
    } else {
      while (i < text.size() && text[i] != '.' && text[i] != '[') key.push_back(text[i++]);
    }
    if (key.empty()) return bad();
    p.steps.push_back({JsonPath::Step::kKey, std::move(key), 0});
    need_key = false;
  }
  if (need_key) return bad();
  return p;
}

namespace {
void walk(const Json& v, const std::vector<JsonPath::Step>& steps, size_t i,
          std::vector<const Json*>& out) {
  if (i == steps.size()) {
    out.push_back(&v);
    return;
  }
  const auto& s = steps[i];
  switch (s.kind) {
    case JsonPath::Step::kKey:
      if (v.is_object()) {
        const auto it = v.find(s.key);
        if (it != v.end()) walk(*it, steps, i + 1, out);
      }
      break;
    case JsonPath::Step::kAll:
      if (v.is_array()) {
        for (const auto& e : v) walk(e, steps, i + 1, out);
      }
      break;
    case JsonPath::Step::kIndex:
      if (v.is_array() && s.index < v.size()) walk(v[s.index], steps, i + 1, out);
      break;
  }
}
}  // namespace

void valuesAt(const Json& payload, const JsonPath& path, std::vector<const Json*>& out) {
  walk(payload, path.steps, 0, out);
}

Result<Filter> parseFilter(const Json& j) { return parseFilterAt(j, 0); }

bool matches(const Condition& c, const Json& payload, const PointId& id) {
  using K = Condition::Kind;
  switch (c.kind) {
    case K::kHasId:
      return std::binary_search(c.ids.begin(), c.ids.end(), id);
    case K::kFilter:
      return matches(*c.sub, payload, id);
    default:
      break;
  }
  std::vector<const Json*> values;
  valuesAt(payload, c.key, values);
  switch (c.kind) {
    case K::kMatch:
      return anyValue(values, [&](const Json& v) { return matchOne(c, v); });
    case K::kRange:
      return anyValue(values, [&](const Json& v) {
        return v.is_number() && c.range.contains(v.get<double>());
      });
    case K::kValuesCount: {
      size_t n = 0;
      for (const Json* v : values) n += v->is_array() ? v->size() : (v->is_null() ? 0 : 1);
      return c.range.contains(double(n));
    }
    case K::kIsEmpty: {
      const bool empty =
          std::all_of(values.begin(), values.end(), [](const Json* v) { return isEmptyValue(*v); });
      return empty == c.flag;
    }
    case K::kIsNull: {
      const bool null =
          std::any_of(values.begin(), values.end(), [](const Json* v) { return v->is_null(); });
      return null == c.flag;
    }
    case K::kNested:
      // key[] gave each element; one element must satisfy the whole inner filter.
      return std::any_of(values.begin(), values.end(),
                         [&](const Json* v) { return v->is_object() && matches(*c.sub, *v, id); });
    default:
      return false;
  }
}

bool matches(const Filter& f, const Json& payload, const PointId& id) {
  for (const auto& c : f.must) {
    if (!matches(c, payload, id)) return false;
  }
  for (const auto& c : f.must_not) {
    if (matches(c, payload, id)) return false;
  }
  if (f.has_should) {
    bool any = false;
    for (const auto& c : f.should) {
      if (matches(c, payload, id)) {
        any = true;
        break;
      }
    }
    if (!any) return false;
  }
  if (f.has_min_should) {
    size_t n = 0;
    for (const auto& c : f.min_should) n += matches(c, payload, id) ? 1 : 0;
    if (n < f.min_count) return false;
  }
  return true;
}

}  // namespace infera::vectors
