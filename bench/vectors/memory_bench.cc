// Memory and restart of a collection per storage configuration: N clustered, normalised DIM-d
// vectors (cosine) with a small payload, upserted through Collection::apply as the writer does,
// in a fresh child process per configuration, so each figure is that process's own:
//   RssAnon / point   memory that must stay resident (graph, codes, ids, payloads; the floats
//                     unless on disk)
//   RssFile / point   file-backed pages resident now (the mapped floats): the kernel may drop them
//   after page-out    on disk: the mapped floats' pages handed back (MADV_PAGEOUT, what memory
//                     pressure would do), then Q searches with rescoring: QPS and the pages they
//                     brought back
// then the snapshot write and a restart (a new child loading the snapshot: seconds, RSS).
//
//   memory_bench N DIM [--queries Q] [--configs float,int8,binary,float-disk,binary-disk]
//                [--dir DIR] [--oversampling F]
//
// DIR (default /tmp) holds the snapshots and the mapped files while a configuration runs.
#include <malloc.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "vectors/internal/collection.h"

namespace {

using namespace infera::vectors;
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Rss {
  double anon = 0, file = 0;  // bytes
};

Rss rss() {
  Rss r;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  while (f && std::fgets(line, sizeof line, f)) {
    long kb = 0;
    if (std::sscanf(line, "RssAnon: %ld kB", &kb) == 1) r.anon = double(kb) * 1024;
    if (std::sscanf(line, "RssFile: %ld kB", &kb) == 1) r.file = double(kb) * 1024;
  }
  if (f) std::fclose(f);
  return r;
}

// Hands the pages of this process's mapped vector files back to the kernel (as memory pressure
// would): they are written to their file and unmapped from the process until touched again.
void pageOutVectorFiles() {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  char line[512];
  while (f && std::fgets(line, sizeof line, f)) {
    if (!std::strstr(line, ".infera-vectors-")) continue;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
    if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_PAGEOUT) != 0)
      std::perror("madvise(MADV_PAGEOUT)");
  }
  if (f) std::fclose(f);
}

// The i-th vector of the data set, the same in every process (seeded per vector).
void vectorAt(size_t i, size_t dim, const std::vector<float>& centres, size_t ncentres,
              float* out) {
  std::mt19937_64 rng(0x9e3779b97f4a7c15ULL ^ i);
  std::normal_distribution<float> g;
  const float* c = &centres[(rng() % ncentres) * dim];
  double n = 0;
  for (size_t d = 0; d < dim; ++d) {
    out[d] = c[d] + 0.8f * g(rng);
    n += double(out[d]) * out[d];
  }
  for (size_t d = 0; d < dim; ++d) out[d] = float(out[d] / std::sqrt(n));
}

struct Config {
  std::string name;
  bool int8 = false, binary = false, on_disk = false;
};

CollectionParams paramsOf(const Config& c, size_t dim, const std::string& dir) {
  CollectionParams p;
  p.dim = dim;
  p.distance = Distance::kCosine;
  p.quantization = c.int8;
  p.binary = c.binary;
  p.on_disk = c.on_disk;
  p.disk_dir = dir;
  return p;
}

// Runs `fn` in a child process and waits for it.
template <typename Fn>
void inChild(Fn&& fn) {
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) {
    fn();
    std::fflush(stdout);
    std::_Exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::fprintf(stderr, "child failed\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: memory_bench N DIM [--queries Q] [--configs "
                 "float,int8,binary,float-disk,binary-disk] [--dir DIR] [--oversampling F]\n");
    return 2;
  }
  const size_t n = std::stoul(argv[1]), dim = std::stoul(argv[2]);
  size_t nq = 1000;
  std::string configs = "float,int8,binary,float-disk,binary-disk", dir = "/tmp";
  float oversampling = 2.0f;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--queries") nq = std::stoul(argv[i + 1]);
    if (a == "--configs") configs = argv[i + 1];
    if (a == "--dir") dir = argv[i + 1];
    if (a == "--oversampling") oversampling = std::stof(argv[i + 1]);
  }
  constexpr size_t kCentres = 100;
  std::vector<float> centres(kCentres * dim);
  {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> g;
    for (float& x : centres) x = g(rng);
  }
  std::vector<Config> all;
  for (const char* name : {"float", "int8", "binary", "float-disk", "binary-disk"}) {
    if (("," + configs + ",").find("," + std::string(name) + ",") == std::string::npos) continue;
    Config c;
    c.name = name;
    c.int8 = c.name == "int8";
    c.binary = c.name.starts_with("binary");
    c.on_disk = c.name.ends_with("-disk");
    all.push_back(c);
  }
  std::printf(
      "%zu x %zu cosine (floats: %zu bytes/point), %zu queries, limit 10, ef 64, "
      "oversampling %.1f\n\n",
      n, dim, dim * sizeof(float), nq, double(oversampling));
  std::printf(
      "| config | build s | RssAnon B/point | RssFile B/point | RssFile after page-out | QPS | "
      "RssAnon after searches | RssFile after searches | snapshot s | restart s | RssAnon after "
      "restart | RssFile after restart |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Config& c : all) {
    const std::string snap = dir + "/memory_bench." + c.name + ".snapshot";
    const std::string rows = dir + "/memory_bench." + c.name + ".row";
    inChild([&] {
      const Rss before = rss();
      const auto t0 = Clock::now();
      {
        Collection coll("bench", paramsOf(c, dim, dir));
        std::vector<float> v(dim);
        uint64_t seq = 0;
        for (size_t start = 0; start < n; start += 1000) {
          Op op;
          op.type = Op::Type::kUpsert;
          for (size_t i = start; i < std::min(n, start + 1000); ++i) {
            vectorAt(i, dim, centres, kCentres, v.data());
            op.ids.push_back(PointId::num(i));
            op.vectors.insert(op.vectors.end(), v.begin(), v.end());
            op.payloads.push_back(Json{{"n", i}});
          }
          if (!coll.apply(op, ++seq).isOk()) std::_Exit(1);
        }
        const double build_s = secondsSince(t0);
        ::malloc_trim(0);
        const Rss built = rss();
        if (c.on_disk) pageOutVectorFiles();
        const Rss paged = rss();
        SearchScratch scratch;
        QueryNode q;
        q.kind = QueryNode::Kind::kDense;
        q.limit = 10;
        q.hnsw_ef = 64;
        q.oversampling = oversampling;
        q.dense.resize(dim);
        const auto t1 = Clock::now();
        for (size_t i = 0; i < nq; ++i) {
          vectorAt(n + i, dim, centres, kCentres, q.dense.data());
          if (!coll.query(q, 0, PayloadSelector{}, false, scratch).ok()) std::_Exit(1);
        }
        const double qps = double(nq) / secondsSince(t1);
        const Rss searched = rss();
        const auto t2 = Clock::now();
        if (!coll.save(snap).isOk()) std::_Exit(1);
        const double snap_s = secondsSince(t2);
        std::FILE* f = std::fopen(rows.c_str(), "w");
        std::fprintf(f, "| %s | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f ",
                     c.name.c_str(), build_s, (built.anon - before.anon) / double(n),
                     (built.file - before.file) / double(n), (paged.file - before.file) / double(n),
                     qps, (searched.anon - before.anon) / double(n),
                     (searched.file - before.file) / double(n), snap_s);
        std::fclose(f);
      }
    });
    inChild([&] {
      const Rss before = rss();
      const auto t = Clock::now();
      Collection coll("bench", paramsOf(c, dim, dir));
      if (!coll.load(snap).isOk()) std::_Exit(1);
      const double s = secondsSince(t);
      ::malloc_trim(0);
      const Rss after = rss();
      std::FILE* f = std::fopen(rows.c_str(), "a");
      std::fprintf(f, "| %.2f | %.0f | %.0f |\n", s, (after.anon - before.anon) / double(n),
                   (after.file - before.file) / double(n));
      std::fclose(f);
    });
    std::FILE* f = std::fopen(rows.c_str(), "r");
    char line[1024];
    while (f && std::fgets(line, sizeof line, f)) std::fputs(line, stdout);
    if (f) std::fclose(f);
    std::remove(rows.c_str());
    std::remove(snap.c_str());
  }
  return 0;
}
