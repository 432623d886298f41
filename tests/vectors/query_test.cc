// Sparse vectors, fusion and the Query API's tree over one collection, checked against references
// computed here independently (brute-force dot products, Qdrant's fusion formulas in double).
#include "vectors/internal/sparse.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "vectors/internal/collection.h"

namespace infera::vectors {
namespace {

SparseVector randomSparse(std::mt19937& rng, uint32_t dims, size_t nnz) {
  std::set<uint32_t> picked;
  while (picked.size() < nnz) picked.insert(rng() % dims);
  SparseVector v;
  std::uniform_real_distribution<float> val(0.05f, 2.0f);
  for (uint32_t d : picked) {
    v.indices.push_back(d);
    v.values.push_back(val(rng));
  }
  return v;
}

// Dot product of two sorted sparse vectors, in the first's order (the index's own order).
float dot(const SparseVector& q, const SparseVector& d) {
  float s = 0;
  for (size_t i = 0; i < q.indices.size(); ++i) {
    for (size_t j = 0; j < d.indices.size(); ++j) {
      if (d.indices[j] == q.indices[i]) s += q.values[i] * d.values[j];
    }
  }
  return s;
}

bool shares(const SparseVector& a, const SparseVector& b) {
  for (uint32_t x : a.indices) {
    if (std::find(b.indices.begin(), b.indices.end(), x) != b.indices.end()) return true;
  }
  return false;
}

TEST(SparseIndex, SearchIsExactThroughReplacementsAndRemovals) {
  std::mt19937 rng(11);
  SparseIndex idx(SparseModifier::kNone);
  std::map<uint32_t, SparseVector> truth;
  // Enough churn on 300 slots over 40 dimensions that posting lists are compacted many times.
  for (int round = 0; round < 4000; ++round) {
    const uint32_t slot = rng() % 300;
    if (rng() % 4 == 0) {
      idx.clear(slot);
      truth.erase(slot);
    } else {
      SparseVector v = randomSparse(rng, 40, 1 + rng() % 6);
      truth[slot] = v;
      idx.set(slot, std::move(v));
    }
  }
  EXPECT_EQ(idx.points(), truth.size());
  for (int q = 0; q < 50; ++q) {
    const SparseVector query = randomSparse(rng, 40, 1 + rng() % 5);
    std::vector<Scored> want;
    for (const auto& [slot, v] : truth) {
      if (shares(query, v)) want.push_back({slot, dot(query, v)});
    }
    std::sort(want.begin(), want.end(), [](const Scored& a, const Scored& b) {
      return a.score != b.score ? a.score > b.score : a.slot < b.slot;
    });
    if (want.size() > 25) want.resize(25);
    std::vector<Scored> got;
    idx.search(idx.weigh(query), 25, nullptr, got);
    ASSERT_EQ(got.size(), want.size()) << "query " << q;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].slot, want[i].slot) << "query " << q << " rank " << i;
      EXPECT_FLOAT_EQ(got[i].score, want[i].score);
      EXPECT_EQ(got[i].score, idx.score(idx.weigh(query), got[i].slot))
          << "a search and a rescoring give the same bits";
    }
  }
  // A filter leaves out what it refuses, and nothing else.
  const SparseVector query = randomSparse(rng, 40, 8);
  const std::function<bool(uint32_t)> even = [](uint32_t s) { return s % 2 == 0; };
  std::vector<Scored> got;
  idx.search(idx.weigh(query), 1000, &even, got);
  size_t expected = 0;
  for (const auto& [slot, v] : truth) expected += slot % 2 == 0 && shares(query, v);
  EXPECT_EQ(got.size(), expected);
  for (const auto& s : got) EXPECT_EQ(s.slot % 2, 0u);
}

TEST(SparseIndex, IdfWeighsAQueryByHowRareEachDimensionIs) {
  SparseIndex idx(SparseModifier::kIdf);
  // Dimension 1 in all 4 points, dimension 2 in one.
  idx.set(0, {{1, 2}, {1, 1}});
  idx.set(1, {{1}, {1}});
  idx.set(2, {{1}, {1}});
  idx.set(3, {{1}, {1}});
  idx.clear(3);  // removed points no longer count
  idx.set(4, {{1}, {1}});
  const SparseVector w = idx.weigh({{1, 2, 9}, {1, 1, 1}});
  const double n = 4;
  auto idf = [&](double df) { return std::log((n - df + 0.5) / (df + 0.5) + 1.0); };
  EXPECT_NEAR(w.values[0], idf(4), 1e-6);
  EXPECT_NEAR(w.values[1], idf(1), 1e-6);
  EXPECT_NEAR(w.values[2], idf(0), 1e-6);
  EXPECT_GT(w.values[1], w.values[0]) << "the rare dimension weighs more";
  std::vector<Scored> got;
  idx.search(w, 10, nullptr, got);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].slot, 0u) << "the point with the rare dimension ranks first";
  EXPECT_NEAR(got[0].score, idf(4) + idf(1), 1e-6);
}

TEST(Fusion, RrfAndDbsfComputeQdrantsFormulas) {
  const std::vector<std::vector<Scored>> lists = {{{7, 0.9f}, {3, 0.8f}, {5, 0.1f}},
                                                  {{3, 12.0f}, {9, 11.0f}}};
  // RRF, k = 2: 1 / (rank + k) with rank from 1.
  auto rrf = fuseRrf(lists, 2, {});
  std::map<uint32_t, double> want = {
      {7, 1.0 / 2}, {3, 1.0 / 3 + 1.0 / 2}, {5, 1.0 / 4}, {9, 1.0 / 3}};
  ASSERT_EQ(rrf.size(), want.size());
  EXPECT_EQ(rrf[0].slot, 3u);
  for (const auto& s : rrf) EXPECT_NEAR(s.score, want[s.slot], 1e-6) << s.slot;
  // Weighted, k = 60: 1 / ((rank) / w + k - 1).
  auto weighted = fuseRrf(lists, 60, {3.0f, 1.0f});
  for (const auto& s : weighted) {
    double expect = 0;
    for (size_t l = 0; l < lists.size(); ++l) {
      const double w = l == 0 ? 3.0 : 1.0;
      for (size_t r = 0; r < lists[l].size(); ++r) {
        if (lists[l][r].slot == s.slot) expect += 1.0 / (double(r + 1) / w + 60 - 1);
      }
    }
    EXPECT_NEAR(s.score, expect, 1e-6) << s.slot;
  }
  // DBSF: each list normalised by mean +- 3 sample standard deviations, then summed.
  auto norm = [](const std::vector<Scored>& l) {
    std::map<uint32_t, double> out;
    double mean = 0;
    for (const auto& s : l) mean += s.score;
    mean /= double(l.size());
    double var = 0;
    for (const auto& s : l) var += (s.score - mean) * (s.score - mean);
    const double sd = std::sqrt(var / double(l.size() - 1));
    for (const auto& s : l) out[s.slot] = (s.score - (mean - 3 * sd)) / (6 * sd);
    return out;
  };
  std::map<uint32_t, double> dbsf_want;
  for (const auto& l : lists) {
    for (const auto& [slot, v] : norm(l)) dbsf_want[slot] += v;
  }
  auto dbsf = fuseDbsf(lists);
  ASSERT_EQ(dbsf.size(), dbsf_want.size());
  for (size_t i = 0; i + 1 < dbsf.size(); ++i) EXPECT_GE(dbsf[i].score, dbsf[i + 1].score);
  for (const auto& s : dbsf) EXPECT_NEAR(s.score, dbsf_want[s.slot], 1e-5) << s.slot;
  // One item scores 0.5; a list of equal scores too.
  auto single = fuseDbsf({{{4, 100.0f}}, {{6, 2.0f}, {8, 2.0f}}});
  for (const auto& s : single) EXPECT_FLOAT_EQ(s.score, 0.5f);
}

// A collection with a named dense vector and two sparse ones, 400 points.
struct Hybrid {
  CollectionParams params;
  std::unique_ptr<Collection> coll;
  std::vector<std::vector<float>> dense;
  std::vector<SparseVector> text, title;

  explicit Hybrid(uint64_t seed) {
    params.dim = 8;
    params.distance = Distance::kDot;
    params.dense_name = "dense";
    params.sparse = {{"text", SparseModifier::kIdf}, {"title", SparseModifier::kNone}};
    coll = std::make_unique<Collection>("h", params);
    std::mt19937 rng{uint32_t(seed)};
    std::normal_distribution<float> g;
    Op op;
    op.type = Op::Type::kUpsert;
    for (uint64_t i = 0; i < 400; ++i) {
      op.ids.push_back(PointId::num(i));
      std::vector<float> v(8);
      for (float& x : v) x = g(rng);
      dense.push_back(v);
      op.vectors.insert(op.vectors.end(), v.begin(), v.end());
      op.payloads.push_back(Json{{"group", int(i % 4)}});
      text.push_back(randomSparse(rng, 60, 1 + rng() % 5));
      title.push_back(i % 3 == 0 ? SparseVector{} : randomSparse(rng, 20, 2));
      std::vector<std::pair<std::string, SparseVector>> sp = {{"text", text.back()}};
      if (!title.back().empty()) sp.emplace_back("title", title.back());
      op.sparse.push_back(std::move(sp));
    }
    EXPECT_TRUE(coll->apply(op, 1).isOk());
  }
  std::vector<uint64_t> ids(const std::vector<Record>& rs) const {
    std::vector<uint64_t> out;
    for (const auto& r : rs) out.push_back(r.id.lo);
    return out;
  }
  Result<std::vector<Record>> run(const QueryNode& q, size_t offset = 0) const {
    SearchScratch scratch;
    PayloadSelector none;
    return coll->query(q, offset, none, true, scratch);
  }
};

QueryNode denseLeaf(const std::vector<float>& v, size_t limit) {
  QueryNode n;
  n.kind = QueryNode::Kind::kDense;
  n.dense = v;
  n.exact = true;
  n.limit = limit;
  return n;
}
QueryNode sparseLeaf(const std::string& name, SparseVector v, size_t limit) {
  QueryNode n;
  n.kind = QueryNode::Kind::kSparse;
  n.sparse_name = name;
  n.sparse = std::move(v);
  n.limit = limit;
  return n;
}

TEST(QueryTree, HybridRrfFusesWhatTheTwoLeavesReturnAlone) {
  Hybrid h(5);
  std::mt19937 rng(9);
  for (int t = 0; t < 20; ++t) {
    const QueryNode d = denseLeaf(h.dense[rng() % 400], 30);
    const QueryNode s = sparseLeaf("text", randomSparse(rng, 60, 3), 30);
    auto rd = h.run(d);
    auto rs = h.run(s);
    ASSERT_TRUE(rd.ok() && rs.ok());
    // The fusion computed here from the two answers, by point id.
    std::map<uint64_t, double> want;
    for (const auto* list : {&*rd, &*rs}) {
      for (size_t r = 0; r < list->size(); ++r) want[(*list)[r].id.lo] += 1.0 / (double(r) + 2);
    }
    QueryNode root;
    root.kind = QueryNode::Kind::kRrf;
    root.prefetch = {d, s};
    root.limit = 10;
    auto fused = h.run(root);
    ASSERT_TRUE(fused.ok());
    ASSERT_EQ(fused->size(), std::min<size_t>(10, want.size()));
    std::vector<double> sorted;
    for (const auto& [id, v] : want) sorted.push_back(v);
    std::sort(sorted.rbegin(), sorted.rend());
    for (size_t i = 0; i < fused->size(); ++i) {
      EXPECT_NEAR((*fused)[i].score, want[(*fused)[i].id.lo], 1e-6);
      EXPECT_NEAR((*fused)[i].score, sorted[i], 1e-6) << "rank " << i << " holds the i-th best";
    }
    // Offset pages through the same ranking.
    auto page = h.run(root, 3);
    ASSERT_TRUE(page.ok());
    ASSERT_GE(want.size(), 30u);
    ASSERT_EQ(page->size(), 10u);
    for (size_t i = 0; i + 3 < fused->size(); ++i)
      EXPECT_EQ((*page)[i].id.lo, (*fused)[i + 3].id.lo);
  }
}

TEST(QueryTree, RescoringAPrefetchOfEverythingEqualsTheDirectQuery) {
  Hybrid h(6);
  std::mt19937 rng(3);
  // As Qdrant's own test: a query over `prefetch: {limit: 1000}` (every point, id order) answers
  // what the query alone does.
  for (int t = 0; t < 10; ++t) {
    QueryNode all;
    all.limit = 1000;
    const QueryNode direct_dense = denseLeaf(h.dense[rng() % 400], 10);
    QueryNode rescored_dense = direct_dense;
    rescored_dense.prefetch = {all};
    const QueryNode direct_sparse = sparseLeaf("text", randomSparse(rng, 60, 4), 10);
    QueryNode rescored_sparse = direct_sparse;
    rescored_sparse.prefetch = {all};
    EXPECT_EQ(h.ids(*h.run(direct_dense)), h.ids(*h.run(rescored_dense)));
    EXPECT_EQ(h.ids(*h.run(direct_sparse)), h.ids(*h.run(rescored_sparse)));
  }
  // Rescoring only sees what the prefetch brought: a dense rescoring of a sparse prefetch returns
  // a subset of the sparse candidates, ordered by the dense score.
  QueryNode sp = sparseLeaf("title", randomSparse(rng, 20, 3), 15);
  auto cands = h.run(sp);
  ASSERT_TRUE(cands.ok());
  QueryNode re = denseLeaf(h.dense[0], 5);
  re.prefetch = {sp};
  auto got = h.run(re);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), std::min<size_t>(5, cands->size()));
  std::set<uint64_t> cand_ids;
  for (const auto& r : *cands) cand_ids.insert(r.id.lo);
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_TRUE(cand_ids.contains((*got)[i].id.lo));
    if (i) {
      EXPECT_GE((*got)[i - 1].score, (*got)[i].score);
    }
  }
}

TEST(QueryTree, FiltersGoDownToEveryLeafAndThresholdsCutEachLevel) {
  Hybrid h(7);
  std::mt19937 rng(4);
  auto filter = parseFilter(*readBody(R"({"must":[{"key":"group","match":{"value":2}}]})"));
  ASSERT_TRUE(filter.ok());
  QueryNode root;
  root.kind = QueryNode::Kind::kDbsf;
  root.filter = *filter;  // the root's filter reaches both leaves
  root.prefetch = {denseLeaf(h.dense[1], 40), sparseLeaf("text", randomSparse(rng, 60, 6), 40)};
  root.limit = 100;
  auto got = h.run(root);
  ASSERT_TRUE(got.ok());
  ASSERT_FALSE(got->empty());
  for (const auto& r : *got) EXPECT_EQ(r.id.lo % 4, 2u) << "point " << r.id.lo;
  // A prefetch's own threshold cuts its list.
  QueryNode cut = denseLeaf(h.dense[1], 400);
  cut.score_threshold = 1.0f;
  auto above = h.run(cut);
  ASSERT_TRUE(above.ok());
  size_t want = 0;
  for (const auto& v : h.dense) {
    float s = 0;
    for (size_t i = 0; i < 8; ++i) s += v[i] * h.dense[1][i];
    want += s > 1.0f;
  }
  EXPECT_EQ(above->size(), want);
  for (const auto& r : *above) EXPECT_GT(r.score, 1.0f);
}

TEST(QueryTree, SparseVectorsSurviveSnapshotsOpEncodingAndReplacement) {
  Hybrid h(8);
  const std::string file = ::testing::TempDir() + "/sparse_snapshot.bin";
  ASSERT_TRUE(h.coll->save(file).isOk());
  Collection back("h", h.params);
  ASSERT_TRUE(back.load(file).isOk());
  std::remove(file.c_str());
  for (uint64_t i : {0ull, 1ull, 3ull, 399ull}) {
    auto t = back.sparseOf(PointId::num(i), "text");
    auto ti = back.sparseOf(PointId::num(i), "title");
    ASSERT_TRUE(t.ok() && ti.ok());
    EXPECT_EQ(t->indices, h.text[i].indices);
    EXPECT_EQ(t->values, h.text[i].values);
    EXPECT_EQ(ti->indices, h.title[i].indices) << i;
  }
  EXPECT_EQ(back.stats()["sparse"]["text"]["points"], 400);
  // An upsert replaces the whole point: a sparse vector it does not name is gone.
  Op op;
  op.type = Op::Type::kUpsert;
  op.ids = {PointId::num(1)};
  op.vectors = h.dense[1];
  op.payloads = {Json()};
  op.sparse = {{{"title", SparseVector{{3}, {1.0f}}}}};
  const auto decoded = decodeOp(encodeOp(op));
  ASSERT_TRUE(decoded.ok());
  ASSERT_EQ(decoded->sparse.size(), 1u);
  EXPECT_EQ(decoded->sparse[0][0].first, "title");
  EXPECT_EQ(decoded->sparse[0][0].second.indices, std::vector<uint32_t>{3});
  ASSERT_TRUE(back.apply(*decoded, 2).isOk());
  EXPECT_TRUE(back.sparseOf(PointId::num(1), "text")->empty());
  EXPECT_EQ(back.sparseOf(PointId::num(1), "title")->values, std::vector<float>{1.0f});
  // An op written before sparse vectors existed (no section) still decodes, with none.
  Op old = op;
  old.sparse.clear();
  const auto plain = decodeOp(encodeOp(old));
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->sparse.empty());
  // A cut sparse section is refused, not read short.
  const std::string bytes = encodeOp(op);
  EXPECT_FALSE(decodeOp(bytes.substr(0, bytes.size() - 3)).ok());
}

TEST(QueryTree, EachDenseVectorHasItsOwnGraphDistanceAndUpdates) {
  CollectionParams p;
  p.dim = 4;
  p.distance = Distance::kEuclid;
  p.dense_name = "image";
  DenseParams text;
  text.name = "text";
  text.dim = 6;
  text.distance = Distance::kDot;
  p.extra_dense = {text};
  Collection c("m", p);
  std::mt19937 rng(21);
  std::normal_distribution<float> g;
  std::vector<std::vector<float>> image(300, std::vector<float>(4)),
      txt(300, std::vector<float>(6));
  Op op;
  op.type = Op::Type::kUpsert;
  op.extra_vectors.resize(1);
  for (uint64_t i = 0; i < 300; ++i) {
    for (float& x : image[i]) x = g(rng);
    for (float& x : txt[i]) x = g(rng);
    op.ids.push_back(PointId::num(i));
    op.vectors.insert(op.vectors.end(), image[i].begin(), image[i].end());
    op.extra_vectors[0].insert(op.extra_vectors[0].end(), txt[i].begin(), txt[i].end());
    op.payloads.push_back(Json());
  }
  ASSERT_TRUE(c.apply(*decodeOp(encodeOp(op)), 1).isOk());
  auto best = [&](const std::vector<std::vector<float>>& all, const std::vector<float>& q,
                  bool l2) {
    uint64_t arg = 0;
    float top = l2 ? 1e30f : -1e30f;
    for (uint64_t i = 0; i < all.size(); ++i) {
      float s = 0;
      for (size_t d = 0; d < q.size(); ++d)
        s += l2 ? (all[i][d] - q[d]) * (all[i][d] - q[d]) : all[i][d] * q[d];
      if (l2 ? s < top : s > top) top = s, arg = i;
    }
    return arg;
  };
  auto first = [&](int index, const std::vector<float>& q) {
    QueryNode n;
    n.kind = QueryNode::Kind::kDense;
    n.dense_index = index;
    n.dense = q;
    n.exact = true;
    n.limit = 1;
    SearchScratch scratch;
    auto r = c.query(n, 0, PayloadSelector{}, true, scratch);
    EXPECT_TRUE(r.ok() && r->size() == 1);
    return r.ok() && !r->empty() ? r->front() : Record{};
  };
  for (int t = 0; t < 20; ++t) {
    std::vector<float> qi(4), qt(6);
    for (float& x : qi) x = g(rng);
    for (float& x : qt) x = g(rng);
    EXPECT_EQ(first(0, qi).id.lo, best(image, qi, true));
    EXPECT_EQ(first(1, qt).id.lo, best(txt, qt, false));
  }
  // Replacing the text vector of point 7 leaves its image vector where it was.
  Op upd;
  upd.type = Op::Type::kUpdateVectors;
  upd.ids = {PointId::num(7)};
  std::vector<float> big = {9, 9, 9, 9, 9, 9};
  upd.dense_updates = {{{1, big}}};
  ASSERT_TRUE(c.apply(*decodeOp(encodeOp(upd)), 2).isOk());
  EXPECT_EQ(first(1, std::vector<float>(6, 1.0f)).id.lo, 7u);
  EXPECT_EQ(first(0, image[7]).id.lo, 7u);
  EXPECT_EQ(*c.vectorOf(PointId::num(7), 1), big);
  EXPECT_EQ(*c.vectorOf(PointId::num(7), 0), image[7]);
  // An update naming a missing point changes nothing.
  upd.ids = {PointId::num(8), PointId::num(5000)};
  upd.dense_updates = {{{1, big}}, {{1, big}}};
  EXPECT_FALSE(c.apply(upd, 3).isOk());
  EXPECT_NE(*c.vectorOf(PointId::num(8), 1), big);
  // Both graphs come back from a snapshot.
  const std::string file = ::testing::TempDir() + "/multi_dense_snapshot.bin";
  ASSERT_TRUE(c.save(file).isOk());
  Collection back("m", p);
  ASSERT_TRUE(back.load(file).isOk());
  std::remove(file.c_str());
  EXPECT_EQ(*back.vectorOf(PointId::num(7), 1), big);
  EXPECT_EQ(*back.vectorOf(PointId::num(9), 0), image[9]);
  EXPECT_EQ(*back.vectorOf(PointId::num(9), 1), txt[9]);
}

// MMR as Qdrant computes it, checked against the same greedy rule evaluated here in double over
// the exact candidates: the first pick is the most relevant, each next one maximises
// lambda x relevance - (1 - lambda) x its largest similarity to the picks; scores stay the query's.
TEST(QueryTree, MmrPicksByMarginalRelevanceAndKeepsTheQueryScores) {
  CollectionParams p;
  p.dim = 8;
  p.distance = Distance::kCosine;
  Collection c("mmr", p);
  std::mt19937 rng(5);
  std::normal_distribution<float> g;
  std::vector<std::vector<float>> rows(200, std::vector<float>(8));
  Op op;
  op.type = Op::Type::kUpsert;
  for (uint64_t i = 0; i < 200; ++i) {
    double n = 0;
    for (float& x : rows[i]) x = g(rng), n += double(x) * x;
    for (float& x : rows[i]) x = float(x / std::sqrt(n));
    op.ids.push_back(PointId::num(i));
    op.vectors.insert(op.vectors.end(), rows[i].begin(), rows[i].end());
    op.payloads.push_back(Json());
  }
  ASSERT_TRUE(c.apply(op, 1).isOk());
  auto dot = [&](const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < 8; ++i) s += double(a[i]) * b[i];
    return s;
  };
  for (float lambda : {0.0f, 0.3f, 0.7f, 1.0f}) {
    const std::vector<float>& q = rows[17];
    QueryNode n;
    n.kind = QueryNode::Kind::kDense;
    n.dense = q;
    n.exact = true;
    n.limit = 6;
    n.mmr = true;
    n.mmr_lambda = lambda;
    n.mmr_candidates = 30;
    SearchScratch scratch;
    auto got = c.query(n, 0, PayloadSelector{}, false, scratch);
    ASSERT_TRUE(got.ok());
    // The reference: the 30 most similar, then the greedy rule.
    std::vector<uint64_t> order(200);
    for (uint64_t i = 0; i < 200; ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](uint64_t a, uint64_t b) { return dot(q, rows[a]) > dot(q, rows[b]); });
    order.resize(30);
    std::vector<uint64_t> picked = {order[0]};
    std::vector<bool> taken(30, false);
    taken[0] = true;
    while (picked.size() < 6) {
      size_t best = 0;
      double best_m = -1e300;
      for (size_t i = 0; i < 30; ++i) {
        if (taken[i]) continue;
        double closest = -1e300;
        for (uint64_t s : picked) closest = std::max(closest, dot(rows[order[i]], rows[s]));
        const double m = lambda * dot(q, rows[order[i]]) - (1 - lambda) * closest;
        if (m > best_m) best = i, best_m = m;
      }
      taken[best] = true;
      picked.push_back(order[best]);
    }
    ASSERT_EQ(got->size(), 6u);
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ((*got)[i].id.lo, picked[i]) << "lambda " << lambda << " pick " << i;
      EXPECT_NEAR((*got)[i].score, dot(q, rows[picked[i]]), 1e-5) << "the query's own score";
    }
    if (lambda == 1.0f) {
      for (size_t i = 0; i < 6; ++i) EXPECT_EQ(picked[i], order[i]) << "relevance alone";
    }
  }
}

}  // namespace
}  // namespace infera::vectors
