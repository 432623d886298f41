// Fuzz target: the vector index's reading of Qdrant request bodies (vectors/internal/json.h
// readBody: the floor's reader; filter.h parseFilter and matches; point_id.h). The input is a
// request body such as POST /collections/{c}/points/scroll takes: {"filter": ..., "ids": [...]}.
//
// Properties, for every input:
//  - nothing throws or aborts, however deep, wrong-typed or ill-formed the body;
//  - a filter that parses and its negation ({"must_not":[filter]}) disagree on every payload of a
//    fixed set: the reading of a filter is a predicate, not a crash or a guess;
//  - an id that reads from JSON reads back from its own text as the same id.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "vectors/internal/filter.h"
#include "vectors/internal/json.h"
#include "vectors/internal/point_id.h"

namespace {

using infera::fuzz::printable;
using infera::vectors::Json;

const std::vector<Json>& payloads() {
  static const std::vector<Json> p = {
      Json::object(),
      Json::parse(R"({"color":"red","n":5,"tags":["a","b"],"geo":{"lat":52.5,"lon":13.4}})"),
      Json::parse(R"({"color":"blue","n":-1.5,"nested":[{"a":1},{"a":2}],"empty":[],"null":null})"),
      Json::parse(R"({"n":10,"text":"the quick brown fox","flag":true,"color":["red","green"]})"),
  };
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    auto read = infera::vectors::readBody(body);
    if (!read.ok() || !read->is_object()) return 0;
    const Json& j = *read;
    if (j.contains("filter")) {
      auto f = infera::vectors::parseFilter(j["filter"]);
      if (f.ok()) {
        Json negated = Json::object();
        negated["must_not"] = Json::array({j["filter"]});
        auto n = infera::vectors::parseFilter(negated);
        FUZZ_CHECK(n.ok(), "a filter parses but its negation does not: " + printable(body) + " (" +
                               n.status().message() + ")");
        const auto id = infera::vectors::PointId::num(7);
        for (const auto& p : payloads()) {
          FUZZ_CHECK(infera::vectors::matches(*f, p, id) != infera::vectors::matches(*n, p, id),
                     "a filter and its negation agree on " + p.dump() + ": " + printable(body));
        }
      }
    }
    if (j.contains("ids") && j["ids"].is_array()) {
      for (const auto& v : j["ids"]) {
        auto id = infera::vectors::pointIdFromJson(v);
        if (!id.ok()) continue;
        auto again = infera::vectors::pointIdFromText(id->toString());
        FUZZ_CHECK(again.ok() && *again == *id,
                   "an id does not read back from its text: " + v.dump() + " -> " + id->toString());
      }
    }
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, std::string("an exception escaped: ") + e.what() + " on " + printable(body));
  }
  return 0;
}
