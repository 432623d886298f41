#include "vectors/internal/collection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "vectors/internal/wal.h"

namespace infera::vectors {
namespace {

Json j(const char* text) { return *readBody(text); }

Filter filterOf(const char* text) {
  auto f = parseFilter(j(text));
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f.ok() ? std::move(*f) : Filter{};
}

bool match(const char* filter, const char* payload, PointId id = PointId::num(1)) {
  return matches(filterOf(filter), j(payload), id);
}

TEST(FilterSemantics, FollowsQdrant) {
  EXPECT_TRUE(match(R"({"must":[{"key":"city","match":{"value":"London"}}]})",
                    R"({"city":["Paris","London"]})"));
  EXPECT_FALSE(
      match(R"({"must":[{"key":"city","match":{"value":"London"}}]})", R"({"town":"London"})"));
  EXPECT_FALSE(match(R"({"should":[]})", R"({"a":1})")) << "an empty should matches nothing";
  EXPECT_TRUE(match(R"({"must":[]})", R"({"a":1})"));
  EXPECT_FALSE(match(R"({"must":[{"key":"n","match":{"value":1}}]})", R"({"n":1.0})"))
      << "a float is not an integer";
  EXPECT_TRUE(match(R"({"must":[{"key":"n","range":{"gt":1,"lte":2}}]})", R"({"n":1.5})"));
  EXPECT_FALSE(match(R"({"must":[{"key":"n","range":{"gt":1}}]})", R"({"n":"5"})"));
  EXPECT_TRUE(match(R"({"must":[{"key":"c","match":{"except":["a"]}}]})", R"({"c":["a","b"]})"));
  EXPECT_FALSE(match(R"({"must":[{"key":"c","match":{"except":["a"]}}]})", R"({})"))
      << "missing: false";
  EXPECT_TRUE(match(R"({"must":[{"key":"c","match":{"except":["a"]}}]})", R"({"c":5})"))
      << "other type: true";
  EXPECT_TRUE(match(R"({"must":[{"is_empty":{"key":"x"}}]})", R"({"x":[]})"));
  EXPECT_TRUE(match(R"({"must":[{"is_empty":{"key":"x"}}]})", R"({})"));
  EXPECT_FALSE(match(R"({"must":[{"is_empty":{"key":"x"}}]})", R"({"x":[null]})"));
  EXPECT_TRUE(match(R"({"must":[{"is_null":{"key":"x"}}]})", R"({"x":null})"));
  EXPECT_FALSE(match(R"({"must":[{"key":"a.b","match":{"value":1}}]})", R"({"a":[{"b":1}]})"))
      << "a key step needs []";
  EXPECT_TRUE(match(R"({"must":[{"key":"a[].b","match":{"value":1}}]})", R"({"a":[{"b":1}]})"));
  EXPECT_TRUE(match(R"({"must_not":[{"has_id":[2,3]}]})", R"({})", PointId::num(1)));
  EXPECT_FALSE(match(R"({"must_not":[{"has_id":[1]}]})", R"({})", PointId::num(1)));
  EXPECT_TRUE(match(
      R"({"must":[{"nested":{"key":"d","filter":{"must":[{"key":"x","match":{"value":1}},{"key":"y","match":{"value":2}}]}}}]})",
      R"({"d":[{"x":1,"y":0},{"x":1,"y":2}]})"));
  EXPECT_FALSE(match(
      R"({"must":[{"nested":{"key":"d","filter":{"must":[{"key":"x","match":{"value":1}},{"key":"y","match":{"value":2}}]}}}]})",
      R"({"d":[{"x":1,"y":0},{"x":0,"y":2}]})"));
  EXPECT_TRUE(match(
      R"({"min_should":{"conditions":[{"key":"a","match":{"value":1}},{"key":"b","match":{"value":1}},{"key":"c","match":{"value":1}}],"min_count":2}})",
      R"({"a":1,"c":1})"));
}

TEST(FilterSemantics, MalformedFiltersAreErrors) {
  EXPECT_EQ(parseFilter(j(R"({"wrong":1})")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parseFilter(j(R"({"must":[{"key":"a","match":{"value":[1]}}]})")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(parseFilter(j(R"({"must":[{"key":"a"}]})")).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(parseFilter(j(R"({"must":[{"has_id":["nope"]}]})")).status().code(),
            StatusCode::kInvalidArgument);
}

Op upsertOp(uint64_t first, size_t n, size_t dim, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0, 1);
  Op op;
  op.type = Op::Type::kUpsert;
  for (size_t i = 0; i < n; ++i) {
    op.ids.push_back(PointId::num(first + i));
    for (size_t d = 0; d < dim; ++d) op.vectors.push_back(u(rng));
    const uint64_t id = first + i;
    op.payloads.push_back(Json{{"color", id % 10 == 0 ? "red" : "blue"}, {"n", int64_t(id % 100)}});
  }
  return op;
}

std::set<uint64_t> ids(const std::vector<Record>& rs) {
  std::set<uint64_t> out;
  for (const auto& r : rs) out.insert(r.id.lo);
  return out;
}

TEST(CollectionPlanner, IndexedAndUnindexedFiltersGiveTheSameExactAnswers) {
  CollectionParams p;
  p.dim = 16;
  p.distance = Distance::kEuclid;
  Collection plain("a", p), indexed("b", p);
  std::mt19937 rng(1);
  const Op op = upsertOp(0, 3000, 16, rng);
  ASSERT_TRUE(plain.apply(op, 1).isOk());
  ASSERT_TRUE(indexed.apply(op, 1).isOk());
  Op ix;
  ix.type = Op::Type::kCreateIndex;
  ix.key = "color";
  ix.index_type = PayloadType::kKeyword;
  ASSERT_TRUE(indexed.apply(ix, 2).isOk());
  ix.key = "n";
  ix.index_type = PayloadType::kInteger;
  ASSERT_TRUE(indexed.apply(ix, 3).isOk());
  SearchScratch s;
  for (
      const char* f :
      {R"({"must":[{"key":"color","match":{"value":"red"}}]})",
       R"({"must":[{"key":"n","range":{"gte":10,"lt":13}}],"must_not":[{"key":"color","match":{"value":"red"}}]})",
       R"({"should":[{"key":"n","match":{"any":[1,2]}},{"has_id":[5,6]}]})"}) {
    SearchRequest req;
    req.vector.assign(16, 0.5f);
    req.limit = 10;
    req.filter = filterOf(f);
    Plan pi = Plan::kHnsw, pp = Plan::kHnsw;
    auto a = indexed.search(req, s, &pi);
    req.exact = true;
    auto exact = plain.search(req, s, &pp);
    ASSERT_TRUE(a.ok() && exact.ok());
    EXPECT_EQ(pi, Plan::kExactSubset) << f << ": the index says the subset is small";
    // An oracle of its own, so that two equally wrong (or empty) answers cannot agree: every
    // point of the op that the filter matches, by squared distance to the query, the 10 nearest.
    std::vector<std::pair<float, uint64_t>> oracle;
    for (size_t i = 0; i < op.ids.size(); ++i) {
      if (!matches(*req.filter, op.payloads[i], op.ids[i])) continue;
      float d = 0;
      for (size_t k = 0; k < 16; ++k) {
        const float diff = op.vectors[i * 16 + k] - 0.5f;
        d += diff * diff;
      }
      oracle.emplace_back(d, op.ids[i].lo);
    }
    const size_t matching = oracle.size();
    std::sort(oracle.begin(), oracle.end());
    std::set<uint64_t> nearest;
    for (size_t i = 0; i < oracle.size() && i < 10; ++i) nearest.insert(oracle[i].second);
    ASSERT_EQ(nearest.size(), 10u) << f << ": the filter should match at least 10 points";
    EXPECT_EQ(ids(*exact), nearest) << f;
    EXPECT_EQ(ids(*a), nearest) << f;
    EXPECT_EQ(indexed.count(&*req.filter), matching) << f;
    EXPECT_EQ(plain.count(&*req.filter), matching) << f;
    for (const auto& r : *a) {
      EXPECT_TRUE(matches(
          *req.filter,
          *indexed.retrieve({r.id}, {PayloadSelector::Mode::kAll, {}}, false)[0].payload, r.id));
    }
  }
}

TEST(CollectionWrites, DeletesReuseSlotsAndPayloadOpsOnMissingPointsChangeNothing) {
  CollectionParams p;
  p.dim = 8;
  Collection c("c", p);
  std::mt19937 rng(2);
  ASSERT_TRUE(c.apply(upsertOp(0, 100, 8, rng), 1).isOk());
  Op del;
  del.type = Op::Type::kDelete;
  del.filter = j(R"({"must":[{"key":"color","match":{"value":"red"}}]})");
  ASSERT_TRUE(c.apply(del, 2).isOk());
  EXPECT_EQ(c.points(), 90u);
  ASSERT_TRUE(c.apply(upsertOp(1000, 10, 8, rng), 3).isOk());
  EXPECT_EQ(c.points(), 100u);
  EXPECT_EQ(c.stats()["slots"].get<uint32_t>(), 100u) << "the 10 freed slots were reused";
  Op set;
  set.type = Op::Type::kSetPayload;
  set.ids = {PointId::num(1), PointId::num(424242)};
  set.payloads = {j(R"({"tag":"x"})")};
  const Status s = c.apply(set, 4);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "Not found: No point with id 424242 found");
  PayloadSelector all{PayloadSelector::Mode::kAll, {}};
  EXPECT_FALSE(c.retrieve({PointId::num(1)}, all, false)[0].payload->contains("tag"))
      << "nothing changed";
}

TEST(CollectionConcurrency, SearchesRunWhileTheWriterInserts) {
  CollectionParams p;
  p.dim = 32;
  p.distance = Distance::kEuclid;
  Collection c("c", p);
  std::mt19937 rng(3);
  ASSERT_TRUE(c.apply(upsertOp(0, 500, 32, rng), 1).isOk());
  std::atomic<bool> done{false};
  std::atomic<size_t> searches{0}, bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      SearchScratch s;
      SearchRequest req;
      req.vector.assign(32, 0.5f);
      req.limit = 10;
      while (!done.load()) {
        auto r = c.search(req, s);
        if (!r.ok() || r->size() != 10) ++bad;
        ++searches;
      }
    });
  }
  for (uint64_t b = 0; b < 20; ++b)
    ASSERT_TRUE(c.apply(upsertOp(1000 + b * 100, 100, 32, rng), 2 + b).isOk());
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(searches.load(), 0u);
  EXPECT_EQ(c.points(), 2500u);
}

TEST(CollectionSnapshot, SaveAndLoadKeepPointsPayloadsAndIndexes) {
  CollectionParams p;
  p.dim = 8;
  Collection c("c", p);
  std::mt19937 rng(4);
  ASSERT_TRUE(c.apply(upsertOp(0, 200, 8, rng), 1).isOk());
  Op ix;
  ix.type = Op::Type::kCreateIndex;
  ix.key = "color";
  ASSERT_TRUE(c.apply(ix, 2).isOk());
  const std::string file = ::testing::TempDir() + "/collection_snapshot.bin";
  ASSERT_TRUE(c.save(file).isOk());
  Collection back("c", p);
  ASSERT_TRUE(back.load(file).isOk());
  EXPECT_EQ(back.points(), 200u);
  EXPECT_EQ(back.appliedSeq(), 2u);
  EXPECT_EQ(back.info()["payload_schema"]["color"]["points"].get<size_t>(), 200u);
  std::remove(file.c_str());
}

TEST(WalReplay, StopsAtATornTailAndTruncatesIt) {
  const std::string file = ::testing::TempDir() + "/wal_test.log";
  std::remove(file.c_str());
  {
    auto w = Wal::open(file, true);
    ASSERT_TRUE(w.ok());
    (*w)->append(1, "one");
    (*w)->append(2, "two");
    ASSERT_TRUE((*w)->sync().isOk());
  }
  {
    std::FILE* f = std::fopen(file.c_str(), "ab");
    std::fwrite("\x10\0\0\0garbage", 1, 11, f);  // a record cut short by a crash
    std::fclose(f);
  }
  auto w = Wal::open(file, true);
  ASSERT_TRUE(w.ok());
  std::vector<std::string> seen;
  auto last = (*w)->replay([&](uint64_t, std::string_view op) {
    seen.emplace_back(op);
    return Status::ok();
  });
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, 2u);
  EXPECT_EQ(seen, (std::vector<std::string>{"one", "two"}));
  (*w)->append(3, "three");
  ASSERT_TRUE((*w)->sync().isOk());
  auto again = Wal::open(file, true);
  seen.clear();
  ASSERT_EQ(*(*again)->replay([&](uint64_t, std::string_view op) {
    seen.emplace_back(op);
    return Status::ok();
  }),
            3u);
  EXPECT_EQ(seen.size(), 3u) << "the torn bytes were cut before the next append";
  std::remove(file.c_str());
}

TEST(OpEncoding, RoundTrips) {
  Op op;
  op.type = Op::Type::kUpsert;
  PointId u;
  ASSERT_TRUE(parseUuid("550e8400-e29b-41d4-a716-446655440000", u));
  op.ids = {PointId::num(7), u};
  op.vectors = {1, 2, 3, 4};
  op.payloads = {j(R"({"a":1})"), Json()};
  op.filter = j(R"({"must":[]})");
  auto back = decodeOp(encodeOp(op));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->ids, op.ids);
  EXPECT_EQ(back->vectors, op.vectors);
  EXPECT_EQ(back->payloads[0], op.payloads[0]);
  EXPECT_TRUE(back->payloads[1].is_null());
  EXPECT_EQ(back->ids[1].toString(), "550e8400-e29b-41d4-a716-446655440000");
  EXPECT_FALSE(decodeOp(encodeOp(op).substr(0, 10)).ok());
}

}  // namespace
}  // namespace infera::vectors
