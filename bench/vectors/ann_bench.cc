// ANN benchmark: Infera's HNSW, hnswlib 0.6.2 and FAISS 1.7.3 IndexHNSWFlat on the same data, one
// thread, same M and ef_construction, each at several ef: build time, recall@10 against brute
// force, QPS, and (Infera) filtered search and int8 quantization. Prints a Markdown table.
//
//   ann_bench sift                      # data/ngt-sift-5k: 4,900 base, 100 held-out queries
//   ann_bench clustered N [Q]           # N x 128 clustered (seed 42), Q queries (default 1000), L2
//   ann_bench cosine N [Q] [DIM]        # N x DIM (default 768) clustered, normalised, cosine
//   ... --engines infera,hnswlib        # only these (default: infera,filters,hnswlib,faiss,int8)
#include <faiss/IndexHNSW.h>
#include <hnswlib/hnswlib.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "datasets.h"
#include "vectors/internal/hnsw.h"
#include "vectors/sift.h"

namespace {

using namespace infera::vectors;
using namespace infera::vectors::bench;

Data sift() {
  Data d;
  d.name = "ngt-sift-5k (4,900 + 100 queries)";
  infera::vectors::testing::SiftSet s;
  std::string error;
  if (!infera::vectors::testing::loadSift(s, error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  d.dim = 128, d.n = 4900, d.nq = 100;
  for (size_t i = 0; i < 4900; ++i) d.base.insert(d.base.end(), s.rows[i].begin(), s.rows[i].end());
  for (size_t i = 4900; i < 5000; ++i)
    d.queries.insert(d.queries.end(), s.rows[i].begin(), s.rows[i].end());
  for (auto& g : s.holdout_gt) d.gt.emplace_back(g.begin(), g.begin() + 10);
  return d;
}

double recall(const std::vector<std::vector<uint32_t>>& got,
              const std::vector<std::vector<uint32_t>>& gt) {
  size_t hits = 0, total = 0;
  for (size_t q = 0; q < gt.size(); ++q) {
    std::set<uint32_t> t(gt[q].begin(), gt[q].end());
    for (uint32_t id : got[q]) hits += t.count(id);
    total += gt[q].size();
  }
  return total ? double(hits) / double(total) : 1.0;
}

constexpr int kM = 16;
constexpr int kEfConstruction = 100;
const std::vector<size_t> kEfs = {10, 16, 24, 32, 48, 64, 96, 128, 256, 384, 512};

// bytes: index memory per vector (vectors, links, codes), 0 when not measured.
void row(const char* engine, const Data& d, double build_s, size_t ef, double r, double qps,
         double bytes = 0) {
  std::printf("| %s | %s | %.1f | %zu | %.4f | %.0f | %s |\n", d.name.c_str(), engine, build_s, ef,
              r, qps, bytes > 0 ? std::to_string(long(bytes + 0.5)).c_str() : "");
  std::fflush(stdout);
}

template <typename SearchFn>
void sweep(const char* engine, const Data& d, double build_s, double bytes, SearchFn&& search) {
  std::vector<std::vector<uint32_t>> got(d.nq);
  for (size_t ef : kEfs) {
    // Repeat small query sets so each timing covers at least ~0.3 s.
    size_t reps = 0;
    const auto t = Clock::now();
    do {
      for (size_t q = 0; q < d.nq; ++q) got[q] = search(&d.queries[q * d.dim], ef);
      ++reps;
    } while (secondsSince(t) < 0.3);
    const double qps = double(reps * d.nq) / secondsSince(t);
    row(engine, d, build_s, ef, recall(got, d.gt), qps, bytes);
  }
}

void runInfera(const Data& d, bool quantize, bool filters) {
  HnswParams p;
  p.m = kM;
  p.ef_construct = kEfConstruction;
  p.quantize_int8 = quantize;
  Hnsw index(d.dim, d.cosine ? Metric::kDot : Metric::kL2, p);
  index.reserve(d.n);
  SearchScratch s;
  const auto t = Clock::now();
  for (size_t i = 0; i < d.n; ++i) index.insert(uint32_t(i), &d.base[i * d.dim], s);
  if (quantize) index.trainQuantizer();
  const double build = secondsSince(t);
  const double bytes = double(index.memoryBytes()) / double(d.n);
  std::fprintf(stderr, "infera%s: %.1f bytes/vector, mean degree %.1f\n", quantize ? " int8" : "",
               bytes, index.meanDegree());
  std::vector<Neighbor> out;
  sweep(quantize ? "infera int8+rescore" : "infera", d, build, bytes,
        [&](const float* q, size_t ef) {
          index.search(q, 10, ef, {}, s, out);
          std::vector<uint32_t> ids;
          for (auto& n : out) ids.push_back(n.slot);
          return ids;
        });
  if (quantize || !filters) return;
  // Filtered search at 10% and 1% selectivity (every 10th / 100th point), against the filtered
  // brute force; the planner's exact path is not used here: this is the graph with the filter
  // inside the traversal.
  for (size_t every : {10u, 100u}) {
    std::vector<uint64_t> bits((d.n + 63) / 64, 0);
    for (size_t i = 0; i < d.n; i += every) bits[i >> 6] |= 1ull << (i & 63);
    // At most 200 queries: a 1% filter makes each graph search visit ~100x more nodes.
    Data fd = d;
    fd.nq = std::min<size_t>(d.nq, 200);
    bruteForceTruth(fd, &bits, fd.gt);
    fd.name = d.name + " filter " + std::to_string(100 / every) + "%";
    SlotFilter f;
    f.bits = bits.data();
    std::vector<std::vector<uint32_t>> got(fd.nq);
    for (size_t ef : {16u, 32u, 64u, 128u}) {
      size_t reps = 0;
      const auto t2 = Clock::now();
      do {
        for (size_t q = 0; q < fd.nq; ++q) {
          index.search(&d.queries[q * d.dim], 10, ef, f, s, out);
          got[q].clear();
          for (auto& n : out) got[q].push_back(n.slot);
        }
        ++reps;
      } while (secondsSince(t2) < 0.3);
      row("infera filtered", fd, build, ef, recall(got, fd.gt),
          double(reps * fd.nq) / secondsSince(t2));
    }
    // The planner's alternative for a small subset: exact scan of the candidates.
    std::vector<uint32_t> list;
    for (size_t i = 0; i < d.n; i += every) list.push_back(uint32_t(i));
    size_t reps = 0;
    const auto t3 = Clock::now();
    do {
      for (size_t q = 0; q < fd.nq; ++q) {
        index.bruteForce(&d.queries[q * d.dim], 10, f, &list, out);
        got[q].clear();
        for (auto& n : out) got[q].push_back(n.slot);
      }
      ++reps;
    } while (secondsSince(t3) < 0.3);
    row("infera exact subset", fd, 0, 0, recall(got, fd.gt),
        double(reps * fd.nq) / secondsSince(t3));
  }
}

void runHnswlib(const Data& d) {
  std::unique_ptr<hnswlib::SpaceInterface<float>> space;
  if (d.cosine) {
    space = std::make_unique<hnswlib::InnerProductSpace>(d.dim);
  } else {
    space = std::make_unique<hnswlib::L2Space>(d.dim);
  }
  hnswlib::HierarchicalNSW<float> index(space.get(), d.n, kM, kEfConstruction, 100);
  const auto t = Clock::now();
  for (size_t i = 0; i < d.n; ++i) index.addPoint(&d.base[i * d.dim], i);
  const double build = secondsSince(t);
  // Level-0 block (links, vector, label) per element, plus upper-level link lists.
  double bytes = double(index.size_data_per_element_) * double(d.n);
  for (size_t i = 0; i < d.n; ++i)
    bytes += double(index.size_links_per_element_) * index.element_levels_[i];
  bytes /= double(d.n);
  sweep("hnswlib 0.6.2", d, build, bytes, [&](const float* q, size_t ef) {
    index.setEf(ef);
    auto pq = index.searchKnn(q, 10);
    std::vector<uint32_t> ids;
    while (!pq.empty()) {
      ids.push_back(uint32_t(pq.top().second));
      pq.pop();
    }
    return ids;
  });
}

void runFaiss(const Data& d) {
  faiss::IndexHNSWFlat index(int(d.dim), kM,
                             d.cosine ? faiss::METRIC_INNER_PRODUCT : faiss::METRIC_L2);
  index.hnsw.efConstruction = kEfConstruction;
  const auto t = Clock::now();
  index.add(faiss::Index::idx_t(d.n), d.base.data());
  const double build = secondsSince(t);
  // Flat storage plus the neighbour array, offsets and levels.
  const double bytes =
      (double(d.n) * double(d.dim) * 4 + double(index.hnsw.neighbors.size()) * 4 +
       double(index.hnsw.offsets.size()) * 8 + double(index.hnsw.levels.size()) * 4) /
      double(d.n);
  std::vector<float> dist(10);
  std::vector<faiss::Index::idx_t> ids(10);
  sweep("faiss 1.7.3 HNSWFlat", d, build, bytes, [&](const float* q, size_t ef) {
    index.hnsw.efSearch = int(ef);
    index.search(1, q, 10, dist.data(), ids.data());
    std::vector<uint32_t> out;
    for (auto id : ids) {
      if (id >= 0) out.push_back(uint32_t(id));
    }
    return out;
  });
}

}  // namespace

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  // --engines infera,filters,hnswlib,faiss,int8 (default: all): what fits when the set is large.
  std::string engines = "infera,filters,hnswlib,faiss,int8";
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--engines" && i + 1 < argc) {
      engines = argv[++i];
    } else {
      args.push_back(argv[i]);
    }
  }
  auto on = [&](const char* e) {
    return ("," + engines + ",").find("," + std::string(e) + ",") != std::string::npos;
  };
  const std::string which = args.size() > 0 ? args[0] : "sift";
  Data d;
  if (which == "sift") {
    d = sift();
  } else if (which == "clustered" || which == "cosine") {
    const size_t n = args.size() > 1 ? std::stoul(args[1]) : 100'000;
    const size_t nq = args.size() > 2 ? std::stoul(args[2]) : 1'000;
    const size_t dim = which == "cosine" ? (args.size() > 3 ? std::stoul(args[3]) : 768) : 128;
    d = clustered(n, nq, dim, which == "cosine");
  } else {
    std::fprintf(stderr,
                 "usage: ann_bench sift | clustered N [Q] | cosine N [Q] [DIM]  [--engines "
                 "infera,filters,hnswlib,faiss,int8]\n");
    return 2;
  }
  std::printf("kernels: %s; M=%d, ef_construction=%d, k=10, one thread\n\n", kernels().name, kM,
              kEfConstruction);
  std::printf(
      "| data | engine | build s | ef | recall@10 | QPS | bytes/vector "
      "|\n|---|---|---|---|---|---|---|\n");
  if (on("infera")) runInfera(d, false, on("filters"));
  if (on("hnswlib")) runHnswlib(d);
  if (on("faiss")) runFaiss(d);
  if (on("int8")) runInfera(d, true, false);
  return 0;
}
