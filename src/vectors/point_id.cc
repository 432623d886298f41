#include "vectors/internal/point_id.h"

#include <charconv>
#include <cmath>

#include "core/text.h"

namespace infera::vectors {

bool parseUuid(std::string_view s, PointId& out) {
  if (s.starts_with("urn:uuid:")) s.remove_prefix(9);
  if (s.size() == 38 && s.front() == '{' && s.back() == '}') s = s.substr(1, 36);
  std::string hex;
  if (s.size() == 36) {
    for (size_t i = 0; i < 36; ++i) {
      const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash != (s[i] == '-')) return false;
      if (!dash) hex.push_back(s[i]);
    }
  } else if (s.size() == 32) {
    hex = s;
  } else {
    return false;
  }
  uint64_t hi = 0, lo = 0;
  for (size_t i = 0; i < 32; ++i) {
    const int v = hexDigitValue(hex[i]);
    if (v < 0) return false;
    (i < 16 ? hi : lo) = ((i < 16 ? hi : lo) << 4) | uint64_t(v);
  }
  out = {true, hi, lo};
  return true;
}

std::string PointId::toString() const {
  if (!uuid) return std::to_string(lo);
  static const char* kHex = "0123456789abcdef";
  std::string s;
  s.reserve(36);
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) s.push_back('-');
    const uint64_t w = i < 16 ? hi : lo;
    s.push_back(kHex[(w >> (60 - 4 * (i % 16))) & 0xf]);
  }
  return s;
}

void PointId::appendJson(std::string& out) const {
  if (uuid) {
    out.push_back('"');
    out += toString();
    out.push_back('"');
  } else {
    out += std::to_string(lo);
  }
}

Json PointId::toJson() const {
  if (uuid) return toString();
  return Json(lo);
}

Result<PointId> pointIdFromJson(const Json& j) {
  if (j.is_number_unsigned()) return PointId::num(j.get<uint64_t>());
  if (j.is_number_integer() && j.get<int64_t>() >= 0)
    return PointId::num(uint64_t(j.get<int64_t>()));
  if (j.is_string()) {
    PointId id;
    if (parseUuid(j.get_ref<const std::string&>(), id)) return id;
  }
  return Status::invalidArgument(
      "Format error in JSON body: value " + dumpJson(j) +
      " is not a valid point ID, valid values are either an unsigned integer or a UUID");
}

Result<PointId> pointIdFromText(std::string_view s) {
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return PointId::num(n);
  PointId id;
  if (parseUuid(s, id)) return id;
  return Status::invalidArgument("Wrong input: Can not recognize \"" + std::string(s) +
                                 "\" as point id");
}

void appendFloat(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace infera::vectors
