#include "vectors/internal/collection.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <unordered_set>

namespace infera::vectors {

// ---- names and params ----

std::string_view distanceName(Distance d) {
  switch (d) {
    case Distance::kCosine:
      return "Cosine";
    case Distance::kEuclid:
      return "Euclid";
    case Distance::kDot:
      return "Dot";
  }
  return "Cosine";
}

namespace {
constexpr std::pair<std::string_view, PayloadType> kTypeNames[] = {
    {"keyword", PayloadType::kKeyword},   {"integer", PayloadType::kInteger},
    {"float", PayloadType::kFloat},       {"bool", PayloadType::kBool},
    {"text", PayloadType::kText},         {"uuid", PayloadType::kUuid},
    {"datetime", PayloadType::kDatetime}, {"geo", PayloadType::kGeo}};
}  // namespace

std::string_view payloadTypeName(PayloadType t) {
  for (const auto& [n, v] : kTypeNames) {
    if (v == t) return n;
  }
  return "keyword";
}

bool payloadTypeFromName(std::string_view s, PayloadType& out) {
  for (const auto& [n, v] : kTypeNames) {
    if (n == s) {
      out = v;
      return true;
    }
  }
  return false;
}

Json paramsToJson(const CollectionParams& p) {
  Json j;
  j["size"] = p.dim;
  j["distance"] = std::string(distanceName(p.distance));
  j["m"] = p.m;
  j["ef_construct"] = p.ef_construct;
  j["full_scan_threshold"] = p.full_scan_threshold_kb;
  j["quantization"] = p.quantization;
  j["quantile"] = p.quantile;
  j["always_ram"] = p.always_ram;
  j["on_disk_payload"] = p.on_disk_payload;
  if (p.binary) j["binary"] = true;
  if (p.on_disk) j["on_disk"] = true;
  if (!p.dense_name.empty()) j["dense_name"] = p.dense_name;
  if (!p.extra_dense.empty()) {
    Json ex = Json::array();
    for (const auto& d : p.extra_dense) {
      ex.push_back({{"name", d.name},
                    {"size", d.dim},
                    {"distance", std::string(distanceName(d.distance))},
                    {"m", d.m},
                    {"ef_construct", d.ef_construct},
                    {"quantization", d.quantization},
                    {"quantile", d.quantile},
                    {"always_ram", d.always_ram},
                    {"binary", d.binary},
                    {"on_disk", d.on_disk}});
    }
    j["extra_dense"] = ex;
  }
  if (!p.sparse.empty()) {
    Json sp = Json::object();
    for (const auto& [name, m] : p.sparse) sp[name] = m == SparseModifier::kIdf ? "idf" : "none";
    j["sparse"] = sp;
  }
  return j;
}

Result<CollectionParams> paramsFromJson(const Json& j) {
  CollectionParams p;
  if (!j.is_object() || !j.contains("size") || !j["size"].is_number_unsigned()) {
    return Status::internal("bad collection config");
  }
  p.dim = j["size"].get<size_t>();
  auto distance = [](const std::string& d) {
    return d == "Euclid" ? Distance::kEuclid : d == "Dot" ? Distance::kDot : Distance::kCosine;
  };
  p.distance = distance(j.value("distance", "Cosine"));
  p.m = j.value("m", 16);
  p.ef_construct = j.value("ef_construct", 100);
  p.full_scan_threshold_kb = j.value("full_scan_threshold", int64_t(10'000));
  p.quantization = j.value("quantization", false);
  p.quantile = j.value("quantile", 0.99f);
  p.always_ram = j.value("always_ram", true);
  p.on_disk_payload = j.value("on_disk_payload", true);
  p.binary = j.value("binary", false);
  p.on_disk = j.value("on_disk", false);
  p.dense_name = j.value("dense_name", std::string());
  if (const auto ex = j.find("extra_dense"); ex != j.end() && ex->is_array()) {
    for (const auto& x : *ex) {
      if (!x.is_object() || !x.contains("size") || !x["size"].is_number_unsigned())
        return Status::internal("bad collection config");
      DenseParams d;
      d.name = x.value("name", std::string());
      d.dim = x["size"].get<size_t>();
      d.distance = distance(x.value("distance", "Cosine"));
      d.m = x.value("m", 16);
      d.ef_construct = x.value("ef_construct", 100);
      d.quantization = x.value("quantization", false);
      d.quantile = x.value("quantile", 0.99f);
      d.always_ram = x.value("always_ram", true);
      d.binary = x.value("binary", false);
      d.on_disk = x.value("on_disk", false);
      p.extra_dense.push_back(std::move(d));
    }
  }
  if (const auto sp = j.find("sparse"); sp != j.end() && sp->is_object()) {
    for (const auto& [name, m] : sp->items())
      p.sparse[name] = m == "idf" ? SparseModifier::kIdf : SparseModifier::kNone;
  }
  return p;
}

int CollectionParams::denseIndex(const std::string& name) const {
  if (name == dense_name) return 0;
  for (size_t i = 0; i < extra_dense.size(); ++i) {
    if (extra_dense[i].name == name) return int(i) + 1;
  }
  return -1;
}

DenseParams CollectionParams::dense(int i) const {
  if (i > 0) return extra_dense.at(size_t(i) - 1);
  DenseParams d;
  d.name = dense_name;
  d.dim = dim;
  d.distance = distance;
  d.m = m;
  d.ef_construct = ef_construct;
  d.quantization = quantization;
  d.quantile = quantile;
  d.always_ram = always_ram;
  d.binary = binary;
  d.on_disk = on_disk;
  return d;
}

// ---- ops: a compact binary form for the WAL ----

namespace {

struct Writer {
  std::string out;
  template <typename T>
  void put(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(std::string_view s) {
    put(uint32_t(s.size()));
    out.append(s);
  }
  void id(const PointId& p) {
    put(uint8_t(p.uuid));
    put(p.hi);
    put(p.lo);
  }
};

struct Reader {
  std::string_view in;
  bool ok = true;
  template <typename T>
  T get() {
    T v{};
    if (in.size() < sizeof v) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data(), sizeof v);
    in.remove_prefix(sizeof v);
    return v;
  }
  std::string str() {
    const auto n = get<uint32_t>();
    if (!ok || in.size() < n) {
      ok = false;
      return {};
    }
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  }
  PointId id() {
    PointId p;
    p.uuid = get<uint8_t>() != 0;
    p.hi = get<uint64_t>();
    p.lo = get<uint64_t>();
    return p;
  }
};

}  // namespace

std::string encodeOp(const Op& op) {
  Writer w;
  w.put(uint8_t(op.type));
  w.put(uint64_t(op.ids.size()));
  for (const auto& id : op.ids) w.id(id);
  w.put(uint64_t(op.vectors.size()));
  w.out.append(reinterpret_cast<const char*>(op.vectors.data()), op.vectors.size() * sizeof(float));
  w.put(uint64_t(op.payloads.size()));
  for (const auto& p : op.payloads) w.str(p.is_null() ? std::string() : dumpJson(p));
  w.str(op.filter.is_null() ? std::string() : dumpJson(op.filter));
  w.put(uint64_t(op.keys.size()));
  for (const auto& k : op.keys) w.str(k);
  w.str(op.key);
  w.put(uint8_t(op.index_type));
  // Tagged sections last: an op written before they existed ends here and decodes without them.
  auto floats = [&](const std::vector<float>& v) {
    w.put(uint64_t(v.size()));
    w.out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  if (!op.sparse.empty()) {
    w.put(uint8_t('S'));
    w.put(uint64_t(op.sparse.size()));
    for (const auto& point : op.sparse) {
      w.put(uint32_t(point.size()));
      for (const auto& [name, v] : point) {
        w.str(name);
        w.put(uint32_t(v.indices.size()));
        w.out.append(reinterpret_cast<const char*>(v.indices.data()), v.indices.size() * 4);
        w.out.append(reinterpret_cast<const char*>(v.values.data()), v.values.size() * 4);
      }
    }
  }
  if (!op.extra_vectors.empty()) {
    w.put(uint8_t('E'));
    w.put(uint32_t(op.extra_vectors.size()));
    for (const auto& v : op.extra_vectors) floats(v);
  }
  if (!op.dense_updates.empty()) {
    w.put(uint8_t('U'));
    w.put(uint64_t(op.dense_updates.size()));
    for (const auto& point : op.dense_updates) {
      w.put(uint32_t(point.size()));
      for (const auto& [index, v] : point) {
        w.put(int32_t(index));
        floats(v);
      }
    }
  }
  return std::move(w.out);
}

Result<Op> decodeOp(std::string_view bytes) {
  Reader r{bytes};
  Op op;
  op.type = Op::Type(r.get<uint8_t>());
  const auto nids = r.get<uint64_t>();
  if (!r.ok || nids > bytes.size()) return Status::internal("corrupt op");
  for (uint64_t i = 0; i < nids && r.ok; ++i) op.ids.push_back(r.id());
  const auto nvec = r.get<uint64_t>();
  if (!r.ok || nvec * sizeof(float) > r.in.size()) return Status::internal("corrupt op");
  op.vectors.resize(nvec);
  if (nvec) std::memcpy(op.vectors.data(), r.in.data(), nvec * sizeof(float));
  r.in.remove_prefix(nvec * sizeof(float));
  const auto npay = r.get<uint64_t>();
  if (!r.ok || npay > bytes.size()) return Status::internal("corrupt op");
  for (uint64_t i = 0; i < npay && r.ok; ++i) {
    const std::string s = r.str();
    if (s.empty()) {
      op.payloads.emplace_back(nullptr);
    } else {
      auto j = parseStoredJson(s);
      if (!j.ok()) return Status::internal("corrupt payload in op");
      op.payloads.push_back(std::move(*j));
    }
  }
  const std::string f = r.str();
  if (!f.empty()) {
    auto j = parseStoredJson(f);
    if (!j.ok()) return Status::internal("corrupt filter in op");
    op.filter = std::move(*j);
  }
  const auto nkeys = r.get<uint64_t>();
  if (!r.ok || nkeys > bytes.size()) return Status::internal("corrupt op");
  for (uint64_t i = 0; i < nkeys && r.ok; ++i) op.keys.push_back(r.str());
  op.key = r.str();
  op.index_type = PayloadType(r.get<uint8_t>());
  if (!r.ok) return Status::internal("truncated op");
  auto floats = [&](std::vector<float>& v) {
    const auto n = r.get<uint64_t>();
    if (!r.ok || n > r.in.size() / sizeof(float)) {
      r.ok = false;
      return;
    }
    v.resize(n);
    if (n) std::memcpy(v.data(), r.in.data(), n * sizeof(float));
    r.in.remove_prefix(n * sizeof(float));
  };
  while (!r.in.empty()) {
    const auto tag = r.get<uint8_t>();
    if (tag == 'E') {
      const auto n = r.get<uint32_t>();
      if (!r.ok || n > r.in.size()) return Status::internal("corrupt dense vectors in op");
      op.extra_vectors.resize(n);
      for (auto& v : op.extra_vectors) floats(v);
      if (!r.ok) return Status::internal("truncated op");
      continue;
    }
    if (tag == 'U') {
      const auto npoints = r.get<uint64_t>();
      if (!r.ok || npoints != op.ids.size()) return Status::internal("corrupt vector updates");
      op.dense_updates.resize(npoints);
      for (auto& point : op.dense_updates) {
        const auto n = r.get<uint32_t>();
        if (!r.ok || n > r.in.size()) return Status::internal("corrupt vector updates");
        for (uint32_t i = 0; i < n && r.ok; ++i) {
          const int index = r.get<int32_t>();
          std::vector<float> v;
          floats(v);
          point.emplace_back(index, std::move(v));
        }
      }
      if (!r.ok) return Status::internal("truncated op");
      continue;
    }
    if (tag != 'S') return Status::internal("corrupt op: unknown section");
    const auto npoints = r.get<uint64_t>();
    if (!r.ok || npoints != op.ids.size()) return Status::internal("corrupt sparse vectors in op");
    op.sparse.resize(npoints);
    for (auto& point : op.sparse) {
      const auto nnamed = r.get<uint32_t>();
      if (!r.ok || nnamed > r.in.size()) return Status::internal("corrupt sparse vectors in op");
      for (uint32_t i = 0; i < nnamed && r.ok; ++i) {
        std::string name = r.str();
        const auto n = r.get<uint32_t>();
        if (!r.ok || uint64_t(n) * 8 > r.in.size())
          return Status::internal("corrupt sparse vectors in op");
        SparseVector v;
        v.indices.resize(n);
        v.values.resize(n);
        if (n) {
          std::memcpy(v.indices.data(), r.in.data(), size_t(n) * 4);
          std::memcpy(v.values.data(), r.in.data() + size_t(n) * 4, size_t(n) * 4);
        }
        r.in.remove_prefix(size_t(n) * 8);
        point.emplace_back(std::move(name), std::move(v));
      }
    }
    if (!r.ok) return Status::internal("truncated op");
  }
  return op;
}

// ---- payload selectors ----

Result<PayloadSelector> parsePayloadSelector(const Json& j) {
  PayloadSelector s;
  auto paths = [&](const Json& list) -> Status {
    if (!list.is_array())
      return Status::invalidArgument(
          "Format error in JSON body: with_payload paths must be a list");
    for (const auto& x : list) {
      if (!x.is_string())
        return Status::invalidArgument(
            "Format error in JSON body: with_payload paths must be strings");
      INFERA_ASSIGN_OR_RETURN(JsonPath p, parseJsonPath(x.get<std::string>()));
      s.paths.push_back(std::move(p));
    }
    return Status::ok();
  };
  if (j.is_null()) return s;
  if (j.is_boolean()) {
    s.mode = j.get<bool>() ? PayloadSelector::Mode::kAll : PayloadSelector::Mode::kNone;
    return s;
  }
  if (j.is_array()) {
    s.mode = PayloadSelector::Mode::kInclude;
    INFERA_RETURN_IF_ERROR(paths(j));
    return s;
  }
  if (j.is_object() && j.size() == 1) {
    if (j.contains("include")) {
      s.mode = PayloadSelector::Mode::kInclude;
      INFERA_RETURN_IF_ERROR(paths(j["include"]));
      return s;
    }
    if (j.contains("exclude")) {
      s.mode = PayloadSelector::Mode::kExclude;
      INFERA_RETURN_IF_ERROR(paths(j["exclude"]));
      return s;
    }
    if (j.contains("enable") && j["enable"].is_boolean()) {
      s.mode = j["enable"].get<bool>() ? PayloadSelector::Mode::kAll : PayloadSelector::Mode::kNone;
      return s;
    }
  }
  return Status::invalidArgument(
      "Format error in JSON body: data did not match any variant of untagged enum "
      "WithPayloadInterface");
}

namespace {

// Copies the value at `path` (key steps only; other steps copy the whole first-level value) into
// `out`, building the objects on the way.
void includePath(const Json& src, const JsonPath& path, Json& out) {
  const Json* cur = &src;
  Json* dst = &out;
  for (size_t i = 0; i < path.steps.size(); ++i) {
    const auto& st = path.steps[i];
    if (st.kind != JsonPath::Step::kKey || !cur->is_object()) {
      if (cur != &src) *dst = *cur;
      return;
    }
    const auto it = cur->find(st.key);
    if (it == cur->end()) return;
    cur = &*it;
    if (i + 1 == path.steps.size()) {
      (*dst)[st.key] = *cur;
      return;
    }
    Json& next = (*dst)[st.key];
    if (!next.is_object()) next = Json::object();
    dst = &next;
  }
}

void excludePath(Json& j, const JsonPath& path) {
  Json* cur = &j;
  for (size_t i = 0; i < path.steps.size(); ++i) {
    const auto& st = path.steps[i];
    if (st.kind != JsonPath::Step::kKey || !cur->is_object()) return;
    if (i + 1 == path.steps.size()) {
      cur->erase(st.key);
      return;
    }
    const auto it = cur->find(st.key);
    if (it == cur->end()) return;
    cur = &*it;
  }
}

}  // namespace

// ---- locks ----

class Collection::ReadLock {
 public:
  explicit ReadLock(pthread_rwlock_t& l) : l_(l) { pthread_rwlock_rdlock(&l_); }
  ~ReadLock() { pthread_rwlock_unlock(&l_); }

 private:
  pthread_rwlock_t& l_;
};
class Collection::WriteLock {
 public:
  explicit WriteLock(pthread_rwlock_t& l) : l_(l) { pthread_rwlock_wrlock(&l_); }
  ~WriteLock() { pthread_rwlock_unlock(&l_); }

 private:
  pthread_rwlock_t& l_;
};

// ---- payload indexes ----

// One indexed field: postings per keyword/bool/integer value and a sorted map of numbers (ranges).
// Every value at the path is indexed (array elements one by one), so a lookup answers exactly
// what the filter's per-point check would for the conditions it supports.
struct Collection::FieldIndex {
  PayloadType type;
  JsonPath path;
  std::unordered_map<std::string, std::vector<uint32_t>> keys;  // keyword; bool as "true"/"false"
  std::unordered_map<int64_t, std::vector<uint32_t>> ints;
  std::multimap<double, uint32_t> numbers;
  size_t points = 0;

  template <typename Fn>
  void forValues(const Json& payload, Fn&& fn) const {
    std::vector<const Json*> vals;
    valuesAt(payload, path, vals);
    for (const Json* v : vals) {
      if (v->is_array()) {
        for (const auto& e : *v) fn(e);
      } else {
        fn(*v);
      }
    }
  }

  static void erase(std::vector<uint32_t>& list, uint32_t slot) {
    const auto it = std::find(list.begin(), list.end(), slot);
    if (it != list.end()) {
      *it = list.back();
      list.pop_back();
    }
  }

  void update(uint32_t slot, const Json& payload, bool add) {
    bool any = false;
    forValues(payload, [&](const Json& v) {
      std::string key;
      if ((type == PayloadType::kKeyword || type == PayloadType::kUuid) && v.is_string())
        key = v.get<std::string>();
      if (type == PayloadType::kBool && v.is_boolean()) key = v.get<bool>() ? "true" : "false";
      if (!key.empty() || ((type == PayloadType::kKeyword) && v.is_string())) {
        any = true;
        if (add) {
          auto& l = keys[key];
          if (std::find(l.begin(), l.end(), slot) == l.end()) l.push_back(slot);
        } else if (auto it = keys.find(key); it != keys.end()) {
          erase(it->second, slot);
          if (it->second.empty()) keys.erase(it);
        }
      }
      if ((type == PayloadType::kInteger || type == PayloadType::kFloat) && v.is_number()) {
        any = true;
        const double d = v.get<double>();
        if (add) {
          numbers.emplace(d, slot);
        } else {
          auto [lo, hi] = numbers.equal_range(d);
          for (auto it = lo; it != hi; ++it) {
            if (it->second == slot) {
              numbers.erase(it);
              break;
            }
          }
        }
        if (type == PayloadType::kInteger && v.is_number_integer() &&
            !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))) {
          const int64_t i = v.get<int64_t>();
          if (add) {
            auto& l = ints[i];
            if (std::find(l.begin(), l.end(), slot) == l.end()) l.push_back(slot);
          } else if (auto it = ints.find(i); it != ints.end()) {
            erase(it->second, slot);
            if (it->second.empty()) ints.erase(it);
          }
        }
      }
    });
    if (any) points = add ? points + 1 : points - std::min<size_t>(points, 1);
  }
};

// What the payload indexes say about a filter: `known` = the set `bits` holds every matching slot;
// `exact` = it holds exactly them (no per-point check needed).
struct Collection::Candidates {
  bool known = false;
  bool exact = false;
  std::vector<uint64_t> bits;
};

namespace {
void setBit(std::vector<uint64_t>& b, uint32_t s) { b[s >> 6] |= 1ull << (s & 63); }
}  // namespace

Collection::Candidates Collection::planCondition(const Condition& c) const {
  Candidates out;
  using K = Condition::Kind;
  using M = Condition::Match;
  if (c.kind == K::kHasId) {
    out.known = out.exact = true;
    out.bits.assign(words(), 0);
    for (const auto& id : c.ids) {
      if (auto it = ids_.find(id); it != ids_.end()) setBit(out.bits, it->second);
    }
    return out;
  }
  if (c.kind == K::kFilter) return plan(*c.sub);
  if (c.kind != K::kMatch && c.kind != K::kRange) return out;
  const auto it = field_indexes_.find(c.key.text);
  if (it == field_indexes_.end()) return out;
  const FieldIndex& fi = *it->second;
  auto addList = [&](const std::vector<uint32_t>* l) {
    if (l) {
      for (uint32_t s : *l) setBit(out.bits, s);
    }
  };
  auto keyList = [&](const std::string& k) -> const std::vector<uint32_t>* {
    const auto f = fi.keys.find(k);
    return f == fi.keys.end() ? nullptr : &f->second;
  };
  auto intList = [&](int64_t k) -> const std::vector<uint32_t>* {
    const auto f = fi.ints.find(k);
    return f == fi.ints.end() ? nullptr : &f->second;
  };
  if (c.kind == K::kRange) {
    if (fi.type != PayloadType::kInteger && fi.type != PayloadType::kFloat) return out;
    out.bits.assign(words(), 0);
    auto lo = fi.numbers.begin();
    if (c.range.gt || c.range.gte) {
      const double bound =
          std::max(c.range.gt.value_or(-HUGE_VAL), c.range.gte.value_or(-HUGE_VAL));
      lo = fi.numbers.lower_bound(bound);
    }
    for (auto i = lo; i != fi.numbers.end(); ++i) {
      if (c.range.contains(i->first)) {
        setBit(out.bits, i->second);
      } else if ((c.range.lt && i->first >= *c.range.lt) ||
                 (c.range.lte && i->first > *c.range.lte)) {
        break;
      }
    }
    out.known = out.exact = true;
    return out;
  }
  const bool kw = fi.type == PayloadType::kKeyword || fi.type == PayloadType::kUuid;
  if (c.match == M::kValue) {
    out.bits.assign(words(), 0);
    if (c.value.is_string() && kw) {
      addList(keyList(c.value.get<std::string>()));
    } else if (c.value.is_boolean() && fi.type == PayloadType::kBool) {
      addList(keyList(c.value.get<bool>() ? "true" : "false"));
    } else if (c.value.is_number_integer() && fi.type == PayloadType::kInteger) {
      addList(intList(c.value.get<int64_t>()));
    } else {
      out.bits.clear();
      return out;
    }
    out.known = out.exact = true;
    return out;
  }
  if (c.match == M::kAny) {
    out.bits.assign(words(), 0);
    if (c.list_is_strings && kw) {
      for (const auto& s : c.strs) addList(keyList(s));
    } else if (!c.list_is_strings && fi.type == PayloadType::kInteger) {
      for (int64_t i : c.ints) addList(intList(i));
    } else {
      out.bits.clear();
      return out;
    }
    out.known = out.exact = true;
  }
  return out;
}

Collection::Candidates Collection::plan(const Filter& f) const {
  Candidates out;
  bool all_exact = true;
  auto intersect = [&](Candidates&& c) {
    if (!c.known) {
      all_exact = false;
      return;
    }
    all_exact = all_exact && c.exact;
    if (!out.known) {
      out.known = true;
      out.bits = std::move(c.bits);
    } else {
      for (size_t i = 0; i < out.bits.size(); ++i) out.bits[i] &= c.bits[i];
    }
  };
  for (const auto& c : f.must) intersect(planCondition(c));
  if (f.has_should) {
    Candidates u;
    u.known = u.exact = true;
    u.bits.assign(words(), 0);
    for (const auto& c : f.should) {
      Candidates x = planCondition(c);
      if (!x.known) {
        u.known = false;
        break;
      }
      u.exact = u.exact && x.exact;
      for (size_t i = 0; i < u.bits.size(); ++i) u.bits[i] |= x.bits[i];
    }
    intersect(std::move(u));
  }
  if (!f.must_not.empty()) {
    Candidates n;
    n.known = n.exact = true;
    n.bits.assign(words(), ~0ull);
    for (const auto& c : f.must_not) {
      Candidates x = planCondition(c);
      if (!x.known || !x.exact) {
        n.known = false;
        break;
      }
      for (size_t i = 0; i < n.bits.size(); ++i) n.bits[i] &= ~x.bits[i];
    }
    intersect(std::move(n));
  }
  if (f.has_min_should) all_exact = false;
  if (f.must.empty() && !f.has_should && f.must_not.empty() && !f.has_min_should) {
    out.known = false;  // {} matches everything: no candidate set needed
    all_exact = true;
  }
  out.exact = out.known && all_exact;
  return out;
}

void Collection::indexSlot(uint32_t slot, bool add) {
  for (auto& [name, fi] : field_indexes_) fi->update(slot, payloads_[slot], add);
}

// ---- the collection ----

HnswParams hnswParams(const DenseParams& d, const std::string& disk_dir) {
  HnswParams h;
  h.m = d.m;
  h.ef_construct = d.ef_construct;
  h.quantize_int8 = d.quantization;
  h.quantile = d.quantile;
  h.quantize_binary = d.binary;
  h.on_disk = d.on_disk;
  h.disk_dir = disk_dir;
  return h;
}

Collection::Collection(std::string name, CollectionParams params)
    : name_(std::move(name)),
      params_(params),
      index_(params.dim, params.distance == Distance::kEuclid ? Metric::kL2 : Metric::kDot,
             hnswParams(params.dense(0), params.disk_dir)) {
  for (const auto& [n, m] : params_.sparse) sparse_.emplace(n, SparseIndex(m));
  for (const auto& d : params_.extra_dense) {
    extra_.push_back(
        std::make_unique<Hnsw>(d.dim, d.distance == Distance::kEuclid ? Metric::kL2 : Metric::kDot,
                               hnswParams(d, params_.disk_dir)));
  }
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&lock_, &attr);
  pthread_rwlockattr_destroy(&attr);
}

Collection::~Collection() { pthread_rwlock_destroy(&lock_); }

float Collection::score(float dist, int dense_index) const {
  const Distance d =
      dense_index == 0 ? params_.distance : params_.extra_dense[size_t(dense_index) - 1].distance;
  if (d == Distance::kEuclid) return std::sqrt(std::max(0.0f, dist));
  return -dist;
}

bool Collection::matchesSlot(const Filter& f, uint32_t slot) const {
  return matches(f, payloads_[slot], slot_ids_[slot]);
}

Json selectPayload(const Json& payload, const PayloadSelector& sel) {
  const Json& p = payload.is_null() ? Json::object() : payload;
  switch (sel.mode) {
    case PayloadSelector::Mode::kAll:
      return p.is_null() ? Json::object() : p;
    case PayloadSelector::Mode::kInclude: {
      Json out = Json::object();
      for (const auto& path : sel.paths) includePath(p, path, out);
      return out;
    }
    case PayloadSelector::Mode::kExclude: {
      Json out = p.is_null() ? Json::object() : p;
      for (const auto& path : sel.paths) excludePath(out, path);
      return out;
    }
    case PayloadSelector::Mode::kNone:
      break;
  }
  return Json::object();
}

Record Collection::record(uint32_t slot, const PayloadSelector& sel, bool with_vector) const {
  Record r;
  r.id = slot_ids_[slot];
  r.version = versions_[slot];
  if (sel.mode != PayloadSelector::Mode::kNone) r.payload = selectPayload(payloads_[slot], sel);
  if (with_vector) {
    const float* v = index_.vector(slot);
    r.vector = std::vector<float>(v, v + params_.dim);
    for (const auto& h : extra_) {
      const float* x = h->vector(slot);
      r.extra.emplace_back(x, x + h->dim());
    }
    for (const auto& [name, idx] : sparse_) {
      if (const SparseVector* sv = idx.get(slot)) r.sparse.emplace_back(name, *sv);
    }
  }
  return r;
}

namespace {
// `a` AND `b` (either may be null); `holder` keeps a combined filter alive.
const Filter* bothFilters(const Filter* a, const Filter* b, Filter& holder) {
  if (!a) return b;
  if (!b) return a;
  Condition ca, cb;
  ca.kind = cb.kind = Condition::Kind::kFilter;
  ca.sub = std::make_shared<const Filter>(*a);
  cb.sub = std::make_shared<const Filter>(*b);
  holder.must = {std::move(ca), std::move(cb)};
  return &holder;
}
}  // namespace

void Collection::nearest(int dense_index, const float* vec, const Filter* filter, size_t want,
                         size_t hnsw_ef, bool exact, SearchScratch& scratch,
                         std::vector<Neighbor>& found, Plan* plan_out, const QueryNode* q) const {
  const Hnsw& index = hnsw(dense_index);
  std::function<bool(uint32_t)> check;
  SlotFilter sf;
  Candidates cands;
  Plan plan_used = Plan::kHnsw;
  if (filter) {
    cands = plan(*filter);
    if (!cands.exact) check = [&](uint32_t s) { return matchesSlot(*filter, s); };
  }
  if (cands.known) sf.bits = cands.bits.data();
  if (check) sf.check = &check;
  const size_t vec_kb_x1024 = index.dim() * sizeof(float);
  const bool filtered = filter && (cands.known || check);
  if (exact) {
    plan_used = Plan::kExactAll;
    index.bruteForce(vec, want, sf, nullptr, found);
  } else if (filtered && cands.known) {
    size_t n = 0;
    for (uint64_t w : cands.bits) n += size_t(std::popcount(w));
    if (int64_t(n * vec_kb_x1024 / 1024) < params_.full_scan_threshold_kb) {
      plan_used = Plan::kExactSubset;
      std::vector<uint32_t> list;
      list.reserve(n);
      for (size_t w = 0; w < cands.bits.size(); ++w) {
        for (uint64_t b = cands.bits[w]; b; b &= b - 1)
          list.push_back(uint32_t(w * 64 + size_t(std::countr_zero(b))));
      }
      index.bruteForce(vec, want, sf, &list, found);
    }
  } else if (filtered &&
             int64_t(index.live() * vec_kb_x1024 / 1024) < params_.full_scan_threshold_kb) {
    plan_used = Plan::kExactAll;  // no index to estimate with, and the whole collection is small
    index.bruteForce(vec, want, sf, nullptr, found);
  }
  if (plan_used == Plan::kHnsw) {
    if (filtered) plan_used = Plan::kHnswFiltered;
    size_t ef = hnsw_ef ? hnsw_ef : std::max<size_t>(size_t(index.params().ef_construct), want);
    // Oversampling: at least limit x oversampling candidates from the codes, all rescored.
    if (q && q->oversampling > 1.0f)
      ef = std::max(ef, std::min<size_t>(size_t(std::ceil(double(want) * double(q->oversampling))),
                                         std::max<size_t>(want, 100'000)));
    index.search(vec, want, std::max(ef, want), sf, scratch, found, !(q && q->quant_ignore));
  }
  if (plan_out) *plan_out = plan_used;
}

Result<std::vector<Record>> Collection::search(const SearchRequest& req, SearchScratch& scratch,
                                               Plan* plan_out) const {
  ReadLock lock(lock_);
  const size_t want = req.limit + req.offset + (req.exclude ? 1 : 0);
  std::vector<Neighbor> found;
  nearest(0, req.vector.data(), req.filter ? &*req.filter : nullptr, want, req.hnsw_ef, req.exact,
          scratch, found, plan_out);
  std::vector<Record> out;
  size_t skipped = 0;
  for (const auto& n : found) {
    if (req.exclude && slot_ids_[n.slot] == *req.exclude) continue;
    const float s = score(n.dist);
    if (req.score_threshold) {
      const bool keep = params_.distance == Distance::kEuclid ? s < *req.score_threshold
                                                              : s > *req.score_threshold;
      if (!keep) break;  // ranked: the rest are worse
    }
    if (skipped < req.offset) {
      ++skipped;
      continue;
    }
    if (out.size() >= req.limit) break;
    Record r = record(n.slot, req.with_payload, req.with_vector);
    r.score = s;
    out.push_back(std::move(r));
  }
  return out;
}

bool Collection::higherIsBetter(const QueryNode& q) const {
  return !(q.kind == QueryNode::Kind::kDense &&
           params_.dense(q.dense_index).distance == Distance::kEuclid);
}

std::vector<Scored> Collection::rank(const QueryNode& q, const Filter* inherited, size_t limit,
                                     SearchScratch& scratch) const {
  using K = QueryNode::Kind;
  Filter holder;
  const Filter* f = bothFilters(inherited, q.filter ? &*q.filter : nullptr, holder);
  const bool higher = higherIsBetter(q);
  auto keep = [&](float s) {
    return !q.score_threshold || (higher ? s > *q.score_threshold : s < *q.score_threshold);
  };
  std::vector<Scored> out;
  // MMR picks `limit` of a wider set of candidates.
  const size_t fetch = q.mmr ? std::max(limit, q.mmr_candidates) : limit;
  if (q.prefetch.empty()) {
    if (q.kind == K::kDense) {
      std::vector<Neighbor> found;
      nearest(q.dense_index, q.dense.data(), f, fetch, q.hnsw_ef, q.exact, scratch, found, nullptr,
              &q);
      for (const auto& n : found) {
        const float s = score(n.dist, q.dense_index);
        if (!keep(s)) break;  // ranked: the rest are worse
        out.push_back({n.slot, s});
      }
    } else if (q.kind == K::kSparse) {
      const SparseIndex& idx = sparse_.at(q.sparse_name);
      std::function<bool(uint32_t)> allowed;
      Candidates cands;
      if (f) {
        cands = plan(*f);
        allowed = [&](uint32_t s) {
          if (cands.known && !((cands.bits[s >> 6] >> (s & 63)) & 1)) return false;
          return cands.exact || matchesSlot(*f, s);
        };
      }
      idx.search(idx.weigh(q.sparse), limit, f ? &allowed : nullptr, out);
      while (!out.empty() && !keep(out.back().score)) out.pop_back();
    } else {
      // No query: points in id order, each scored 1 (a leaf for a rescoring above it).
      for (const auto& [id, slot] : ids_) {
        if (out.size() >= limit) break;
        if (!f || matchesSlot(*f, slot)) out.push_back({slot, 1.0f});
      }
    }
    return q.mmr ? mmrSelect(std::move(out), q, limit) : out;
  }
  std::vector<std::vector<Scored>> lists;
  lists.reserve(q.prefetch.size());
  for (const QueryNode& p : q.prefetch) lists.push_back(rank(p, f, p.limit, scratch));
  if (q.kind == K::kRrf || q.kind == K::kDbsf) {
    out = q.kind == K::kRrf ? fuseRrf(lists, q.rrf_k, q.weights) : fuseDbsf(std::move(lists));
  } else {
    // Rescoring: every candidate once, scored exactly with this level's vector.
    std::vector<uint32_t> slots;
    for (const auto& l : lists) {
      for (const Scored& s : l) slots.push_back(s.slot);
    }
    std::sort(slots.begin(), slots.end());
    slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
    if (q.kind == K::kDense) {
      const Hnsw& index = hnsw(q.dense_index);
      for (uint32_t slot : slots)
        out.push_back({slot, score(index.distance(q.dense.data(), slot), q.dense_index)});
    } else if (q.kind == K::kSparse) {
      const SparseIndex& idx = sparse_.at(q.sparse_name);
      const SparseVector w = idx.weigh(q.sparse);
      for (uint32_t slot : slots) {
        if (idx.get(slot)) out.push_back({slot, idx.score(w, slot)});
      }
    }
    std::sort(out.begin(), out.end(), [&](const Scored& a, const Scored& b) {
      if (a.score != b.score) return higher ? a.score > b.score : a.score < b.score;
      return a.slot < b.slot;
    });
  }
  size_t n = 0;
  while (n < out.size() && n < fetch && keep(out[n].score)) ++n;
  out.resize(n);
  return q.mmr ? mmrSelect(std::move(out), q, limit) : out;
}

std::vector<Scored> Collection::mmrSelect(std::vector<Scored> cands, const QueryNode& q,
                                          size_t limit) const {
  if (cands.size() < 2 || limit == 0) {
    if (cands.size() > limit) cands.resize(limit);
    return cands;
  }
  const Hnsw& h = hnsw(q.dense_index);
  const bool euclid = params_.dense(q.dense_index).distance == Distance::kEuclid;
  // Similarities, larger is more alike: the dot product, or minus the Euclidean distance.
  auto sim = [&](uint32_t a, uint32_t b) {
    const float d = h.distance(h.vector(a), b);
    return euclid ? -std::sqrt(std::max(0.0f, d)) : -d;
  };
  auto relevance = [&](const Scored& s) { return euclid ? -s.score : s.score; };
  std::vector<Scored> picked;
  std::vector<float> closest(cands.size(), -std::numeric_limits<float>::infinity());
  std::vector<bool> taken(cands.size(), false);
  size_t next = 0;  // the most relevant first (cands are ranked)
  while (picked.size() < limit) {
    taken[next] = true;
    picked.push_back(cands[next]);
    size_t best = cands.size();
    float best_mmr = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < cands.size(); ++i) {
      if (taken[i]) continue;
      closest[i] = std::max(closest[i], sim(cands[i].slot, cands[next].slot));
      const float m = q.mmr_lambda * relevance(cands[i]) - (1.0f - q.mmr_lambda) * closest[i];
      if (best == cands.size() || m > best_mmr) best = i, best_mmr = m;
    }
    if (best == cands.size()) break;
    next = best;
  }
  return picked;
}

Result<std::vector<Record>> Collection::query(const QueryNode& root, size_t offset,
                                              const PayloadSelector& with_payload, bool with_vector,
                                              SearchScratch& scratch) const {
  ReadLock lock(lock_);
  const std::vector<Scored> ranked = rank(root, nullptr, root.limit + offset, scratch);
  std::vector<Record> out;
  for (size_t i = offset; i < ranked.size(); ++i) {
    Record r = record(ranked[i].slot, with_payload, with_vector);
    r.score = ranked[i].score;
    out.push_back(std::move(r));
  }
  return out;
}

Result<SparseVector> Collection::sparseOf(const PointId& id, const std::string& name) const {
  ReadLock lock(lock_);
  const auto it = ids_.find(id);
  if (it == ids_.end())
    return Status::notFound("Not found: No point with id " + id.toString() + " found");
  const auto sp = sparse_.find(name);
  const SparseVector* v = sp == sparse_.end() ? nullptr : sp->second.get(it->second);
  return v ? *v : SparseVector{};
}

Result<std::vector<float>> Collection::vectorOf(const PointId& id, int dense_index) const {
  ReadLock lock(lock_);
  const auto it = ids_.find(id);
  if (it == ids_.end())
    return Status::notFound("Not found: No point with id " + id.toString() + " found");
  const Hnsw& index = hnsw(dense_index);
  const float* v = index.vector(it->second);
  return std::vector<float>(v, v + index.dim());
}

std::vector<Record> Collection::retrieve(const std::vector<PointId>& ids,
                                         const PayloadSelector& sel, bool with_vector) const {
  ReadLock lock(lock_);
  std::vector<Record> out;
  for (const auto& id : ids) {
    const auto it = ids_.find(id);
    if (it != ids_.end()) out.push_back(record(it->second, sel, with_vector));
  }
  return out;
}

std::vector<Record> Collection::scroll(const ScrollRequest& req,
                                       std::optional<PointId>& next) const {
  ReadLock lock(lock_);
  std::vector<Record> out;
  next.reset();
  auto it = req.offset ? ids_.lower_bound(*req.offset) : ids_.begin();
  for (; it != ids_.end(); ++it) {
    if (req.filter && !matchesSlot(*req.filter, it->second)) continue;
    if (out.size() == req.limit) {
      next = it->first;
      break;
    }
    out.push_back(record(it->second, req.with_payload, req.with_vector));
  }
  return out;
}

size_t Collection::count(const Filter* filter) const {
  ReadLock lock(lock_);
  if (!filter) return ids_.size();
  const Candidates c = plan(*filter);
  size_t n = 0;
  if (c.exact) {
    for (size_t w = 0; w < c.bits.size(); ++w) {
      for (uint64_t b = c.bits[w]; b; b &= b - 1) {
        const uint32_t s = uint32_t(w * 64 + size_t(std::countr_zero(b)));
        n += s < index_.slots() && !index_.isDeleted(s);
      }
    }
    return n;
  }
  for (const auto& [id, slot] : ids_) {
    if (c.known && !((c.bits[slot >> 6] >> (slot & 63)) & 1)) continue;
    n += matchesSlot(*filter, slot);
  }
  return n;
}

size_t Collection::points() const {
  ReadLock lock(lock_);
  return ids_.size();
}

Json Collection::info() const {
  ReadLock lock(lock_);
  Json j;
  j["status"] = "green";
  j["optimizer_status"] = "ok";
  j["indexed_vectors_count"] = index_.live();
  j["points_count"] = ids_.size();
  j["segments_count"] = 1;
  Json params;
  const Json dense = {{"size", params_.dim},
                      {"distance", std::string(distanceName(params_.distance))}};
  Json first = dense;
  if (params_.on_disk) first["on_disk"] = true;
  params["vectors"] = params_.named() ? Json{{params_.dense_name, first}} : first;
  for (const auto& d : params_.extra_dense) {
    Json x = {{"size", d.dim}, {"distance", std::string(distanceName(d.distance))}};
    if (d.m != params_.m || d.ef_construct != params_.ef_construct)
      x["hnsw_config"] = {{"m", d.m}, {"ef_construct", d.ef_construct}};
    if (d.on_disk) x["on_disk"] = true;
    if (d.binary) {
      x["quantization_config"] = {{"binary", {{"always_ram", d.always_ram}}}};
    } else if (d.quantization) {
      x["quantization_config"] = {
          {"scalar", {{"type", "int8"}, {"quantile", d.quantile}, {"always_ram", d.always_ram}}}};
    }
    params["vectors"][d.name] = x;
  }
  if (!params_.sparse.empty()) {
    Json sp = Json::object();
    for (const auto& [name, m] : params_.sparse)
      sp[name] = m == SparseModifier::kIdf ? Json{{"modifier", "idf"}} : Json::object();
    params["sparse_vectors"] = sp;
  }
  params["shard_number"] = 1;
  params["replication_factor"] = 1;
  params["write_consistency_factor"] = 1;
  params["on_disk_payload"] = params_.on_disk_payload;
  Json config;
  config["params"] = params;
  config["hnsw_config"] = {{"m", params_.m},
                           {"ef_construct", params_.ef_construct},
                           {"full_scan_threshold", params_.full_scan_threshold_kb},
                           {"max_indexing_threads", 0},
                           {"on_disk", false}};
  config["optimizer_config"] = {
      {"deleted_threshold", 0.2},    {"vacuum_min_vector_number", 1000},
      {"default_segment_number", 0}, {"max_segment_size", nullptr},
      {"memmap_threshold", nullptr}, {"indexing_threshold", 10000},
      {"flush_interval_sec", 5},     {"max_optimization_threads", nullptr}};
  config["wal_config"] = {
      {"wal_capacity_mb", 32}, {"wal_segments_ahead", 0}, {"wal_retain_closed", 1}};
  if (params_.binary) {
    config["quantization_config"] = {{"binary", {{"always_ram", params_.always_ram}}}};
  } else if (params_.quantization) {
    config["quantization_config"] = {
        {"scalar",
         {{"type", "int8"}, {"quantile", params_.quantile}, {"always_ram", params_.always_ram}}}};
  } else {
    config["quantization_config"] = nullptr;
  }
  j["config"] = config;
  Json schema = Json::object();
  for (const auto& [name, fi] : field_indexes_) {
    schema[name] = {{"data_type", std::string(payloadTypeName(fi->type))},
                    {"params", {{"type", std::string(payloadTypeName(fi->type))}}},
                    {"points", fi->points}};
    schema[name].erase("params");
  }
  j["payload_schema"] = schema;
  return j;
}

Json Collection::stats() const {
  ReadLock lock(lock_);
  Json j;
  j["points"] = ids_.size();
  j["slots"] = index_.slots();
  j["free_slots"] = free_slots_.size();
  j["dim"] = params_.dim;
  j["distance"] = std::string(distanceName(params_.distance));
  j["m"] = params_.m;
  j["ef_construct"] = params_.ef_construct;
  j["index_bytes"] = index_.memoryBytes();
  j["index_bytes_per_point"] =
      ids_.empty() ? 0.0 : double(index_.memoryBytes()) / double(ids_.size());
  j["payload_indexes"] = field_indexes_.size();
  for (const auto& [name, idx] : sparse_) {
    j["sparse"][name] = {{"points", idx.points()}, {"bytes", idx.memoryBytes()}};
  }
  j["mean_degree"] = index_.meanDegree();
  j["quantized"] = index_.quantized();
  j["quantization"] = params_.binary ? "binary" : params_.quantization ? "int8" : "none";
  j["mapped_bytes"] = index_.mappedBytes();
  for (size_t i = 0; i < extra_.size(); ++i) {
    j["dense"][params_.extra_dense[i].name] = {{"index_bytes", extra_[i]->memoryBytes()},
                                               {"mapped_bytes", extra_[i]->mappedBytes()},
                                               {"mean_degree", extra_[i]->meanDegree()},
                                               {"quantized", extra_[i]->quantized()}};
  }
  j["kernels"] = kernels().name;
  j["applied_seq"] = applied_seq_;
  return j;
}

// ---- writes ----

std::vector<uint32_t> Collection::resolveTargets(const Op& op, Status& status) const {
  std::vector<uint32_t> slots;
  if (!op.filter.is_null()) {
    auto f = parseFilter(op.filter);
    if (!f.ok()) {
      status = f.takeStatus();
      return {};
    }
    for (const auto& [id, slot] : ids_) {
      if (matchesSlot(*f, slot)) slots.push_back(slot);
    }
    return slots;
  }
  for (const auto& id : op.ids) {
    const auto it = ids_.find(id);
    if (it == ids_.end()) {
      if (op.type == Op::Type::kDelete) continue;  // deleting a missing point is not an error
      status = Status::notFound("Not found: No point with id " + id.toString() + " found");
      return {};
    }
    slots.push_back(it->second);
  }
  return slots;
}

void Collection::removeSlot(uint32_t slot) {
  indexSlot(slot, false);
  ids_.erase(slot_ids_[slot]);
  payloads_[slot] = nullptr;
  for (auto& [name, idx] : sparse_) idx.clear(slot);
  index_.markDeleted(slot);
  for (auto& h : extra_) h->markDeleted(slot);
  free_slots_.push_back(slot);
}

void Collection::setPayloadLocked(uint32_t slot, Json payload) {
  indexSlot(slot, false);
  payloads_[slot] = std::move(payload);
  indexSlot(slot, true);
}

void Collection::trainQuantizers() {
  for (int i = 0; i < int(params_.denseCount()); ++i) {
    Hnsw& h = hnsw(i);
    if ((h.params().quantize_int8 || h.params().quantize_binary) && !h.quantized() &&
        h.live() >= 1024) {
      WriteLock lock(lock_);
      h.trainQuantizer();
    }
  }
}

Status Collection::updateVectors(const Op& op, uint64_t seq) {
  if (op.dense_updates.size() != op.ids.size() ||
      (!op.sparse.empty() && op.sparse.size() != op.ids.size()))
    return Status::internal("malformed vector update");
  // Every point must exist before anything changes (the API checked the names and sizes).
  std::vector<uint32_t> slots;
  for (const auto& id : op.ids) {
    const auto it = ids_.find(id);
    if (it == ids_.end())
      return Status::notFound("Not found: No point with id " + id.toString() + " found");
    slots.push_back(it->second);
  }
  for (size_t i = 0; i < op.ids.size(); ++i) {
    const uint32_t slot = slots[i];
    for (const auto& [index, v] : op.dense_updates[i]) {
      if (index < 0 || index >= int(params_.denseCount()) || v.size() != hnsw(index).dim())
        return Status::internal("malformed vector update");
      Hnsw::InsertPlan p;
      hnsw(index).plan(slot, v.data(), writer_scratch_, p);
      WriteLock lock(lock_);
      hnsw(index).commit(p);
    }
    WriteLock lock(lock_);
    if (i < op.sparse.size()) {
      for (const auto& [name, v] : op.sparse[i]) {
        if (auto sp = sparse_.find(name); sp != sparse_.end()) sp->second.set(slot, v);
      }
    }
    versions_[slot] = seq;
  }
  trainQuantizers();
  return Status::ok();
}

Status Collection::upsert(const Op& op, uint64_t seq) {
  const size_t dim = params_.dim;
  if (op.vectors.size() != op.ids.size() * dim || op.payloads.size() != op.ids.size() ||
      (!op.sparse.empty() && op.sparse.size() != op.ids.size()) ||
      op.extra_vectors.size() != extra_.size()) {
    return Status::internal("malformed upsert");
  }
  for (size_t k = 0; k < extra_.size(); ++k) {
    if (op.extra_vectors[k].size() != op.ids.size() * extra_[k]->dim())
      return Status::internal("malformed upsert");
  }
  std::vector<Hnsw::InsertPlan> extra_plans(extra_.size());
  Hnsw::InsertPlan p;
  for (size_t i = 0; i < op.ids.size(); ++i) {
    const PointId& id = op.ids[i];
    uint32_t slot;
    const auto it = ids_.find(id);
    if (it != ids_.end()) {
      slot = it->second;  // replaced in place (atomic for readers)
    } else if (!free_slots_.empty()) {
      slot = free_slots_.back();
    } else {
      slot = index_.slots();
      if (slot >= index_.capacity()) {
        WriteLock lock(lock_);
        index_.reserve(size_t(slot) + 1);
        for (auto& h : extra_) h->reserve(index_.capacity());
        slot_ids_.resize(index_.capacity());
        payloads_.resize(index_.capacity());
        versions_.resize(index_.capacity(), 0);
      }
    }
    const float* vec = op.vectors.data() + i * dim;
    index_.plan(slot, vec, writer_scratch_, p);
    for (size_t k = 0; k < extra_.size(); ++k) {
      extra_[k]->plan(slot, op.extra_vectors[k].data() + i * extra_[k]->dim(), writer_scratch_,
                      extra_plans[k]);
    }
    WriteLock lock(lock_);
    index_.commit(p);
    for (size_t k = 0; k < extra_.size(); ++k) extra_[k]->commit(extra_plans[k]);
    if (it == ids_.end()) {
      if (!free_slots_.empty() && free_slots_.back() == slot) free_slots_.pop_back();
      ids_[id] = slot;
      slot_ids_[slot] = id;
    }
    versions_[slot] = seq;
    setPayloadLocked(slot, op.payloads[i].is_null() ? Json::object() : op.payloads[i]);
    // An upsert replaces the whole point: sparse vectors it does not name are gone.
    for (auto& [name, idx] : sparse_) idx.clear(slot);
    if (i < op.sparse.size()) {
      for (const auto& [name, v] : op.sparse[i]) {
        if (auto sp = sparse_.find(name); sp != sparse_.end()) sp->second.set(slot, v);
      }
    }
  }
  trainQuantizers();
  return Status::ok();
}

namespace {

void mergeObject(Json& into, const Json& from) {
  for (const auto& [k, v] : from.items()) {
    if (v.is_null()) {
      into.erase(k);
    } else {
      into[k] = v;
    }
  }
}

}  // namespace

Status Collection::apply(const Op& op, uint64_t seq) {
  Status status;
  if (op.type == Op::Type::kUpsert) {
    status = upsert(op, seq);
  } else if (op.type == Op::Type::kUpdateVectors) {
    status = updateVectors(op, seq);
  } else if (op.type == Op::Type::kCreateIndex) {
    WriteLock lock(lock_);
    auto fi = std::make_unique<FieldIndex>();
    fi->type = op.index_type;
    auto path = parseJsonPath(op.key);
    if (!path.ok()) {
      status = path.takeStatus();
    } else {
      fi->path = std::move(*path);
      for (const auto& [id, slot] : ids_) fi->update(slot, payloads_[slot], true);
      field_indexes_[op.key] = std::move(fi);
    }
  } else if (op.type == Op::Type::kDeleteIndex) {
    WriteLock lock(lock_);
    field_indexes_.erase(op.key);
  } else {
    const std::vector<uint32_t> slots = resolveTargets(op, status);
    if (status.isOk()) {
      WriteLock lock(lock_);
      for (uint32_t slot : slots) {
        Json payload = payloads_[slot].is_object() ? payloads_[slot] : Json::object();
        switch (op.type) {
          case Op::Type::kDelete:
            removeSlot(slot);
            continue;
          case Op::Type::kDeleteVectors:
            for (const auto& name : op.keys) {
              if (auto sp = sparse_.find(name); sp != sparse_.end()) sp->second.clear(slot);
            }
            versions_[slot] = seq;
            continue;
          case Op::Type::kSetPayload:
            if (op.key.empty()) {
              mergeObject(payload, op.payloads.at(0));
            } else {
              Json* at = &payload;
              auto path = parseJsonPath(op.key);
              if (path.ok()) {
                for (const auto& st : path->steps) {
                  if (st.kind != JsonPath::Step::kKey) break;
                  Json& next = (*at)[st.key];
                  if (!next.is_object()) next = Json::object();
                  at = &next;
                }
              }
              mergeObject(*at, op.payloads.at(0));
            }
            break;
          case Op::Type::kOverwritePayload:
            payload = op.payloads.at(0);
            break;
          case Op::Type::kDeletePayloadKeys:
            for (const auto& k : op.keys) {
              auto path = parseJsonPath(k);
              if (path.ok()) excludePath(payload, *path);
            }
            break;
          case Op::Type::kClearPayload:
            payload = Json::object();
            break;
          default:
            break;
        }
        versions_[slot] = seq;
        setPayloadLocked(slot, std::move(payload));
      }
    }
  }
  applied_seq_ = seq;
  any_seq_ = true;
  return status;
}

// ---- snapshots ----

Status Collection::save(const std::string& file) const {
  ReadLock lock(lock_);
  std::FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) return Status::internal("cannot write " + file + ": " + std::strerror(errno));
  std::vector<char> buf(1 << 20);
  std::setvbuf(f, buf.data(), _IOFBF, buf.size());
  Json head;
  head["params"] = paramsToJson(params_);
  head["applied_seq"] = applied_seq_;
  Json idx = Json::array();
  for (const auto& [name, fi] : field_indexes_)
    idx.push_back({{"field", name}, {"type", std::string(payloadTypeName(fi->type))}});
  head["indexes"] = idx;
  const std::string h = dumpJson(head);
  const uint64_t hn = h.size();
  bool ok = std::fwrite(&hn, sizeof hn, 1, f) == 1 && std::fwrite(h.data(), 1, hn, f) == hn;
  Status s = index_.save(f);
  ok = ok && s.isOk();
  std::string rows;
  for (uint32_t slot = 0; slot < index_.slots() && ok; ++slot) {
    rows.clear();
    const uint8_t live = index_.isDeleted(slot) ? 0 : 1;
    rows.push_back(char(live));
    if (live) {
      const PointId& id = slot_ids_[slot];
      rows.push_back(char(id.uuid));
      rows.append(reinterpret_cast<const char*>(&id.hi), 8);
      rows.append(reinterpret_cast<const char*>(&id.lo), 8);
      rows.append(reinterpret_cast<const char*>(&versions_[slot]), 8);
      const std::string p =
          payloads_[slot].is_object() && !payloads_[slot].empty() ? dumpJson(payloads_[slot]) : "";
      const uint32_t pn = uint32_t(p.size());
      rows.append(reinterpret_cast<const char*>(&pn), 4);
      rows += p;
    }
    ok = std::fwrite(rows.data(), 1, rows.size(), f) == rows.size();
  }
  // Sparse vectors after the rows (a snapshot written before them ends at the rows):
  // "SPRS", then per named sparse vector its name and (slot, n, indices, values) entries.
  if (ok && !sparse_.empty()) {
    rows.assign("SPRS");
    for (const auto& [name, sidx] : sparse_) {
      const uint32_t nn = uint32_t(name.size());
      rows.append(reinterpret_cast<const char*>(&nn), 4);
      rows += name;
      const uint64_t count = sidx.points();
      rows.append(reinterpret_cast<const char*>(&count), 8);
      for (uint32_t slot = 0; slot < index_.slots(); ++slot) {
        const SparseVector* v = index_.isDeleted(slot) ? nullptr : sidx.get(slot);
        if (!v) continue;
        const uint32_t n = uint32_t(v->indices.size());
        rows.append(reinterpret_cast<const char*>(&slot), 4);
        rows.append(reinterpret_cast<const char*>(&n), 4);
        rows.append(reinterpret_cast<const char*>(v->indices.data()), size_t(n) * 4);
        rows.append(reinterpret_cast<const char*>(v->values.data()), size_t(n) * 4);
      }
    }
    ok = std::fwrite(rows.data(), 1, rows.size(), f) == rows.size();
  }
  // The dense vectors after the first: "DENS", then each graph as the first's is written.
  if (ok && !extra_.empty()) {
    ok = std::fwrite("DENS", 1, 4, f) == 4;
    for (const auto& g : extra_) ok = ok && g->save(f).isOk();
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  return ok ? Status::ok() : Status::internal("writing snapshot " + file + " failed");
}

Status Collection::load(const std::string& file) {
  WriteLock lock(lock_);
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) return Status::internal("cannot read " + file);
  std::vector<char> buf(1 << 20);
  std::setvbuf(f, buf.data(), _IOFBF, buf.size());
  auto fail = [&](const std::string& why) {
    std::fclose(f);
    return Status::internal("snapshot " + file + ": " + why);
  };
  uint64_t hn = 0;
  if (std::fread(&hn, sizeof hn, 1, f) != 1 || hn > (1 << 26)) return fail("bad header");
  std::string h(hn, '\0');
  if (std::fread(h.data(), 1, hn, f) != hn) return fail("bad header");
  auto head = parseStoredJson(h);
  if (!head.ok() || !head->is_object()) return fail("bad header");
  applied_seq_ = head->value("applied_seq", uint64_t(0));
  if (Status s = index_.load(f); !s.isOk()) return fail(s.message());
  const uint32_t slots = index_.slots();
  slot_ids_.assign(index_.capacity(), PointId{});
  payloads_.assign(index_.capacity(), Json());
  versions_.assign(index_.capacity(), 0);
  std::string p;
  for (uint32_t slot = 0; slot < slots; ++slot) {
    uint8_t live = 0;
    if (std::fread(&live, 1, 1, f) != 1) return fail("truncated");
    if (!live) {
      free_slots_.push_back(slot);
      continue;
    }
    PointId id;
    uint8_t u = 0;
    uint32_t pn = 0;
    bool ok = std::fread(&u, 1, 1, f) == 1 && std::fread(&id.hi, 8, 1, f) == 1 &&
              std::fread(&id.lo, 8, 1, f) == 1 && std::fread(&versions_[slot], 8, 1, f) == 1 &&
              std::fread(&pn, 4, 1, f) == 1;
    id.uuid = u != 0;
    if (!ok) return fail("truncated");
    p.resize(pn);
    if (pn && std::fread(p.data(), 1, pn, f) != pn) return fail("truncated");
    if (pn) {
      auto j = parseStoredJson(p);
      if (!j.ok()) return fail("bad payload");
      payloads_[slot] = std::move(*j);
    } else {
      payloads_[slot] = Json::object();
    }
    slot_ids_[slot] = id;
    ids_[id] = slot;
  }
  char magic[4];
  bool have_dense = extra_.empty();
  while (std::fread(magic, 1, 4, f) == 4) {
    if (std::memcmp(magic, "DENS", 4) == 0) {
      for (auto& g : extra_) {
        if (Status s = g->load(f); !s.isOk()) return fail(s.message());
        if (g->slots() != slots) return fail("a dense vector's slots differ from the points'");
      }
      have_dense = true;
      continue;
    }
    if (std::memcmp(magic, "SPRS", 4) != 0) return fail("unknown section");
    for (size_t k = 0; k < params_.sparse.size(); ++k) {
      uint32_t nn = 0;
      uint64_t count = 0;
      if (std::fread(&nn, 4, 1, f) != 1 || nn > 4096) return fail("truncated sparse section");
      std::string name(nn, '\0');
      if (std::fread(name.data(), 1, nn, f) != nn || std::fread(&count, 8, 1, f) != 1)
        return fail("truncated sparse section");
      const auto idx = sparse_.find(name);
      if (idx == sparse_.end()) return fail("unknown sparse vector " + name);
      for (uint64_t i = 0; i < count; ++i) {
        uint32_t slot = 0, n = 0;
        if (std::fread(&slot, 4, 1, f) != 1 || std::fread(&n, 4, 1, f) != 1 || slot >= slots ||
            n > (1u << 24))
          return fail("truncated sparse section");
        SparseVector v;
        v.indices.resize(n);
        v.values.resize(n);
        if (std::fread(v.indices.data(), 4, n, f) != n || std::fread(v.values.data(), 4, n, f) != n)
          return fail("truncated sparse section");
        idx->second.set(slot, std::move(v));
      }
    }
  }
  if (!have_dense) return fail("the dense vectors after the first are missing");
  std::fclose(f);
  std::reverse(free_slots_.begin(), free_slots_.end());
  for (const auto& ix : head->value("indexes", Json::array())) {
    auto fi = std::make_unique<FieldIndex>();
    const std::string field = ix.value("field", "");
    payloadTypeFromName(ix.value("type", "keyword"), fi->type);
    auto path = parseJsonPath(field);
    if (!path.ok()) continue;
    fi->path = std::move(*path);
    for (const auto& [id, slot] : ids_) fi->update(slot, payloads_[slot], true);
    field_indexes_[field] = std::move(fi);
  }
  any_seq_ = true;
  return Status::ok();
}

}  // namespace infera::vectors
