// ANN benchmark: Infera's HNSW, hnswlib 0.6.2 and FAISS 1.7.3 IndexHNSWFlat on the same data, one
// thread, same M and ef_construction, each at several ef: build time, recall@10 against brute
// force, QPS, and (Infera) filtered search, int8 and binary quantization (binary beside float in
// the same rounds). Prints a Markdown table.
//
//   ann_bench sift                      # data/ngt-sift-5k: 4,900 base, 100 held-out queries
//   ann_bench clustered N [Q]           # N x 128 clustered (seed 42), Q queries (default 1000), L2
//   ann_bench cosine N [Q] [DIM]        # N x DIM (default 768) clustered, normalised, cosine
//   ann_bench spread N [Q] [DIM]        # the same with wide clusters centred on 0 (datasets.h)
//   ann_bench lowrank N [Q] [DIM] [R]   # embedding-like: rank-R manifold over DIM, cosine
//   ... --engines infera,hnswlib        # only these (default: infera,filters,hnswlib,faiss,int8;
//                                       # binary on request)
//   ... --rounds R                      # time each (engine, ef) R times, taking turns; median QPS
//   ... --cache DIR                     # keep built indexes and ground truth in DIR, load them
//                                       # next time (the build time printed is the measured one)
#include <faiss/IndexHNSW.h>
#include <faiss/index_io.h>
#include <hnswlib/hnswlib.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
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

struct Options {
  std::string cache;  // --cache DIR: built indexes and ground truth kept between runs
  int rounds = 1;     // --rounds R: each (engine, ef) timed R times, interleaved; median printed
};

// One engine ready to search: what the table prints about it and its search call.
struct Engine {
  std::string name;
  double build_s = 0;  // as measured when the index was built (also when loaded from the cache)
  double bytes = 0;    // index memory per vector
  std::function<std::vector<uint32_t>(const float*, size_t)> search;
};

std::string cachePath(const Options& o, const Data& d, const std::string& what) {
  return o.cache + "/" + d.name + ".m" + std::to_string(kM) + ".efc" +
         std::to_string(kEfConstruction) + "." + what;
}

// The build time is kept beside a cached index, so a loaded index reports what building it took.
bool readSeconds(const std::string& path, double& s) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return false;
  const bool ok = std::fscanf(f, "%lf", &s) == 1;
  std::fclose(f);
  return ok;
}

// Writes through a temporary name, so an interrupted run never leaves a half file to load.
template <typename WriteFn>
void keep(const std::string& path, WriteFn&& write) {
  const std::string tmp = path + ".tmp";
  if (write(tmp) && std::rename(tmp.c_str(), path.c_str()) == 0) return;
  std::fprintf(stderr, "could not write %s (not cached)\n", path.c_str());
  std::remove(tmp.c_str());
}

void keepSeconds(const std::string& path, double s) {
  keep(path, [&](const std::string& tmp) {
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) return false;
    std::fprintf(f, "%.3f\n", s);
    return std::fclose(f) == 0;
  });
}

void groundTruth(Data& d, const Options& o) {
  if (!d.gt.empty()) return;  // the SIFT set ships its own
  const std::string path = cachePath(o, d, "q" + std::to_string(d.nq) + ".gt.ivecs");
  std::vector<uint32_t> flat;
  size_t rows = 0, dim = 0;
  if (!o.cache.empty() && readVecs(path, flat, rows, dim) && rows == d.nq && dim == 10) {
    for (size_t q = 0; q < rows; ++q) d.gt.emplace_back(&flat[q * 10], &flat[q * 10 + 10]);
    std::fprintf(stderr, "%s: ground truth from %s\n", d.name.c_str(), path.c_str());
    return;
  }
  const auto t = Clock::now();
  bruteForceTruth(d, nullptr, d.gt);
  std::fprintf(stderr, "%s: ground truth by brute force in %.1f s\n", d.name.c_str(),
               secondsSince(t));
  if (!o.cache.empty()) keep(path, [&](const std::string& tmp) { return writeIvecs(tmp, d.gt); });
}

// bytes: index memory per vector (vectors, links, codes), 0 when not measured. lo/hi: the slowest
// and fastest of the rounds, printed when there was more than one.
void row(const std::string& engine, const Data& d, double build_s, size_t ef, double r, double qps,
         double bytes = 0, double lo = 0, double hi = 0) {
  std::printf(
      "| %s | %s | %.1f | %zu | %.4f | %.0f | %s | %s |\n", d.name.c_str(), engine.c_str(), build_s,
      ef, r, qps,
      hi > 0 ? (std::to_string(long(lo + 0.5)) + "–" + std::to_string(long(hi + 0.5))).c_str() : "",
      bytes > 0 ? std::to_string(long(bytes + 0.5)).c_str() : "");
  std::fflush(stdout);
}

// Queries per second of `search` over the whole query set, repeated to cover at least ~0.3 s.
template <typename SearchFn>
double timeQps(size_t nq, SearchFn&& search) {
  size_t reps = 0;
  const auto t = Clock::now();
  do {
    for (size_t q = 0; q < nq; ++q) search(q);
    ++reps;
  } while (secondsSince(t) < 0.3);
  return double(reps * nq) / secondsSince(t);
}

// Every engine at every ef, `rounds` times. Within an ef the engines take turns, and who goes
// first rotates with the round, so a busy spell on the machine falls on all of them alike. Prints
// per engine the median QPS (and the range over the rounds).
void compare(const std::vector<Engine>& engines, const Data& d, int rounds) {
  const size_t ne = engines.size();
  std::vector<std::vector<double>> recalls(ne, std::vector<double>(kEfs.size()));
  std::vector<std::vector<std::vector<double>>> qps(ne,
                                                    std::vector<std::vector<double>>(kEfs.size()));
  std::vector<std::vector<uint32_t>> got(d.nq);
  for (size_t k = 0; k < kEfs.size(); ++k) {
    for (int r = 0; r < rounds; ++r) {
      for (size_t j = 0; j < ne; ++j) {
        const size_t e = (j + size_t(r)) % ne;
        const double v = timeQps(
            d.nq, [&](size_t q) { got[q] = engines[e].search(&d.queries[q * d.dim], kEfs[k]); });
        qps[e][k].push_back(v);
        recalls[e][k] = recall(got, d.gt);  // the same every round: searches are deterministic
        std::fprintf(stderr, "  %s ef=%zu round %d: recall %.4f, %.0f QPS\n",
                     engines[e].name.c_str(), kEfs[k], r + 1, recalls[e][k], v);
      }
    }
  }
  for (size_t e = 0; e < ne; ++e) {
    for (size_t k = 0; k < kEfs.size(); ++k) {
      auto v = qps[e][k];
      std::sort(v.begin(), v.end());
      const double median =
          v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
      row(engines[e].name, d, engines[e].build_s, kEfs[k], recalls[e][k], median, engines[e].bytes,
          rounds > 1 ? v.front() : 0, rounds > 1 ? v.back() : 0);
    }
  }
}

// `quant`: "", "int8" or "binary".
std::shared_ptr<Hnsw> inferaIndex(const Data& d, const std::string& quant, const Options& o,
                                  double& build) {
  HnswParams p;
  p.m = kM;
  p.ef_construct = kEfConstruction;
  p.quantize_int8 = quant == "int8";
  p.quantize_binary = quant == "binary";
  const bool quantize = !quant.empty();
  auto index = std::make_shared<Hnsw>(d.dim, d.cosine ? Metric::kDot : Metric::kL2, p);
  const std::string path = cachePath(o, d, quantize ? "infera-" + quant + ".hnsw" : "infera.hnsw");
  if (!o.cache.empty() && readSeconds(path + ".build_s", build)) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    const infera::Status st = f ? index->load(f) : infera::Status::internal("cannot open");
    if (f) std::fclose(f);
    if (st.isOk() && index->slots() == d.n) {
      std::fprintf(stderr, "infera: loaded %s\n", path.c_str());
      return index;
    }
    index = std::make_shared<Hnsw>(d.dim, d.cosine ? Metric::kDot : Metric::kL2, p);
  }
  index->reserve(d.n);
  SearchScratch s;
  const auto t = Clock::now();
  for (size_t i = 0; i < d.n; ++i) index->insert(uint32_t(i), &d.base[i * d.dim], s);
  if (quantize) index->trainQuantizer();
  build = secondsSince(t);
  if (!o.cache.empty()) {
    keep(path, [&](const std::string& tmp) {
      std::FILE* f = std::fopen(tmp.c_str(), "wb");
      if (!f) return false;
      const bool ok = index->save(f).isOk();
      return std::fclose(f) == 0 && ok;
    });
    keepSeconds(path + ".build_s", build);
  }
  return index;
}

Engine inferaEngine(const std::shared_ptr<Hnsw>& index, double build, const std::string& quant) {
  Engine e;
  e.name = quant.empty() ? "infera" : "infera " + quant + "+rescore";
  e.build_s = build;
  e.bytes = double(index->memoryBytes()) / double(index->slots());
  std::fprintf(stderr, "%s: %.1f bytes/vector, mean degree %.1f\n", e.name.c_str(), e.bytes,
               index->meanDegree());
  auto s = std::make_shared<SearchScratch>();
  auto out = std::make_shared<std::vector<Neighbor>>();
  e.search = [index, s, out](const float* q, size_t ef) {
    index->search(q, 10, ef, {}, *s, *out);
    std::vector<uint32_t> ids;
    for (auto& n : *out) ids.push_back(n.slot);
    return ids;
  };
  return e;
}

// Filtered search at 10% and 1% selectivity (every 10th / 100th point), against the filtered brute
// force; the planner's exact path is not used here: this is the graph with the filter inside the
// traversal.
void runFilters(const Hnsw& index, const Data& d, double build) {
  SearchScratch s;
  std::vector<Neighbor> out;
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
    auto ids = [&](size_t q) {
      got[q].clear();
      for (auto& n : out) got[q].push_back(n.slot);
    };
    for (size_t ef : {16u, 32u, 64u, 128u}) {
      const double qps = timeQps(fd.nq, [&](size_t q) {
        index.search(&d.queries[q * d.dim], 10, ef, f, s, out);
        ids(q);
      });
      row("infera filtered", fd, build, ef, recall(got, fd.gt), qps);
    }
    // The planner's alternative for a small subset: exact scan of the candidates.
    std::vector<uint32_t> list;
    for (size_t i = 0; i < d.n; i += every) list.push_back(uint32_t(i));
    const double qps = timeQps(fd.nq, [&](size_t q) {
      index.bruteForce(&d.queries[q * d.dim], 10, f, &list, out);
      ids(q);
    });
    row("infera exact subset", fd, 0, 0, recall(got, fd.gt), qps);
  }
}

// hnswlib's index and the space it points into, kept together.
struct HnswlibIndex {
  std::unique_ptr<hnswlib::SpaceInterface<float>> space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> index;
};

Engine hnswlibEngine(const Data& d, const Options& o) {
  auto h = std::make_shared<HnswlibIndex>();
  if (d.cosine) {
    h->space = std::make_unique<hnswlib::InnerProductSpace>(d.dim);
  } else {
    h->space = std::make_unique<hnswlib::L2Space>(d.dim);
  }
  Engine e;
  e.name = "hnswlib 0.6.2";
  const std::string path = cachePath(o, d, "hnswlib.bin");
  if (!o.cache.empty() && readSeconds(path + ".build_s", e.build_s)) {
    h->index = std::make_unique<hnswlib::HierarchicalNSW<float>>(h->space.get(), path);
    std::fprintf(stderr, "hnswlib: loaded %s\n", path.c_str());
  } else {
    h->index = std::make_unique<hnswlib::HierarchicalNSW<float>>(h->space.get(), d.n, kM,
                                                                 kEfConstruction, 100);
    const auto t = Clock::now();
    for (size_t i = 0; i < d.n; ++i) h->index->addPoint(&d.base[i * d.dim], i);
    e.build_s = secondsSince(t);
    if (!o.cache.empty()) {
      keep(path, [&](const std::string& tmp) {
        h->index->saveIndex(tmp);
        return true;
      });
      keepSeconds(path + ".build_s", e.build_s);
    }
  }
  auto& index = *h->index;
  // Level-0 block (links, vector, label) per element, plus upper-level link lists.
  double bytes = double(index.size_data_per_element_) * double(d.n);
  for (size_t i = 0; i < d.n; ++i)
    bytes += double(index.size_links_per_element_) * index.element_levels_[i];
  e.bytes = bytes / double(d.n);
  e.search = [h](const float* q, size_t ef) {
    h->index->setEf(ef);
    auto pq = h->index->searchKnn(q, 10);
    std::vector<uint32_t> ids;
    while (!pq.empty()) {
      ids.push_back(uint32_t(pq.top().second));
      pq.pop();
    }
    return ids;
  };
  return e;
}

Engine faissEngine(const Data& d, const Options& o) {
  Engine e;
  e.name = "faiss 1.7.3 HNSWFlat";
  std::shared_ptr<faiss::IndexHNSWFlat> index;
  const std::string path = cachePath(o, d, "faiss.index");
  if (!o.cache.empty() && readSeconds(path + ".build_s", e.build_s)) {
    index.reset(dynamic_cast<faiss::IndexHNSWFlat*>(faiss::read_index(path.c_str())));
    std::fprintf(stderr, "faiss: loaded %s\n", path.c_str());
  }
  if (!index) {
    index = std::make_shared<faiss::IndexHNSWFlat>(
        int(d.dim), kM, d.cosine ? faiss::METRIC_INNER_PRODUCT : faiss::METRIC_L2);
    index->hnsw.efConstruction = kEfConstruction;
    const auto t = Clock::now();
    index->add(faiss::Index::idx_t(d.n), d.base.data());
    e.build_s = secondsSince(t);
    if (!o.cache.empty()) {
      keep(path, [&](const std::string& tmp) {
        faiss::write_index(index.get(), tmp.c_str());
        return true;
      });
      keepSeconds(path + ".build_s", e.build_s);
    }
  }
  // Flat storage plus the neighbour array, offsets and levels.
  e.bytes = (double(d.n) * double(d.dim) * 4 + double(index->hnsw.neighbors.size()) * 4 +
             double(index->hnsw.offsets.size()) * 8 + double(index->hnsw.levels.size()) * 4) /
            double(d.n);
  auto dist = std::make_shared<std::vector<float>>(10);
  auto ids = std::make_shared<std::vector<faiss::Index::idx_t>>(10);
  e.search = [index, dist, ids](const float* q, size_t ef) {
    index->hnsw.efSearch = int(ef);
    index->search(1, q, 10, dist->data(), ids->data());
    std::vector<uint32_t> out;
    for (auto id : *ids) {
      if (id >= 0) out.push_back(uint32_t(id));
    }
    return out;
  };
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  // --engines infera,filters,hnswlib,faiss,int8 (default: all): what fits when the set is large.
  std::string engines = "infera,filters,hnswlib,faiss,int8";
  Options o;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--engines" && i + 1 < argc) {
      engines = argv[++i];
    } else if (a == "--cache" && i + 1 < argc) {
      o.cache = argv[++i];
    } else if (a == "--rounds" && i + 1 < argc) {
      o.rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      args.push_back(a);
    }
  }
  auto on = [&](const char* e) {
    return ("," + engines + ",").find("," + std::string(e) + ",") != std::string::npos;
  };
  const std::string which = args.size() > 0 ? args[0] : "sift";
  Data d;
  if (which == "sift") {
    d = sift();
  } else if (which == "lowrank") {
    const size_t n = args.size() > 1 ? std::stoul(args[1]) : 100'000;
    const size_t nq = args.size() > 2 ? std::stoul(args[2]) : 1'000;
    const size_t dim = args.size() > 3 ? std::stoul(args[3]) : 768;
    const size_t rank = args.size() > 4 ? std::stoul(args[4]) : 64;
    d = lowRank(n, nq, dim, rank);
  } else if (which == "clustered" || which == "cosine" || which == "spread") {
    const size_t n = args.size() > 1 ? std::stoul(args[1]) : 100'000;
    const size_t nq = args.size() > 2 ? std::stoul(args[2]) : 1'000;
    const size_t dim = which != "clustered" ? (args.size() > 3 ? std::stoul(args[3]) : 768) : 128;
    d = clustered(n, nq, dim, which == "cosine", /*truth=*/false, which == "spread");
  } else {
    std::fprintf(
        stderr,
        "usage: ann_bench sift | clustered N [Q] | cosine|spread N [Q] [DIM] | lowrank N [Q] [DIM] "
        "[R]  [--engines "
        "infera,filters,hnswlib,faiss,int8,binary] [--rounds R] [--cache DIR]\n");
    return 2;
  }
  groundTruth(d, o);
  std::printf("kernels: %s; M=%d, ef_construction=%d, k=10, one thread, %d round(s)\n\n",
              kernels().name, kM, kEfConstruction, o.rounds);
  std::printf(
      "| data | engine | build s | ef | recall@10 | QPS | QPS min–max | bytes/vector "
      "|\n|---|---|---|---|---|---|---|---|\n");
  std::vector<Engine> side;
  std::shared_ptr<Hnsw> infera;
  double infera_build = 0;
  if (on("infera")) {
    infera = inferaIndex(d, "", o, infera_build);
    side.push_back(inferaEngine(infera, infera_build, ""));
  }
  if (on("hnswlib")) side.push_back(hnswlibEngine(d, o));
  if (on("faiss")) side.push_back(faissEngine(d, o));
  compare(side, d, o.rounds);
  if (infera && on("filters")) runFilters(*infera, d, infera_build);
  if (on("int8")) {
    double build = 0;
    auto q = inferaIndex(d, "int8", o, build);
    compare({inferaEngine(q, build, "int8")}, d, o.rounds);
  }
  if (on("binary")) {
    // Beside the float index in the same rounds (its QPS ratio is the figure).
    double build = 0, float_build = 0;
    auto b = inferaIndex(d, "binary", o, build);
    auto f = infera ? infera : inferaIndex(d, "", o, float_build);
    compare({inferaEngine(f, infera ? infera_build : float_build, ""),
             inferaEngine(b, build, "binary")},
            d, o.rounds);
  }
  return 0;
}
