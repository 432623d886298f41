// Writes a benchmark data set as TEXMEX files, for `infera vectors load` and http_search:
//
//   vecgen clustered N Q DIR        # N x 128 clustered (seed 42; ann_bench's vectors), L2
//   vecgen cosine N Q DIM DIR       # N x DIM clustered, normalised, cosine
//
// DIR/base.fvecs, DIR/queries.fvecs and DIR/gt.ivecs (the exact top-10 of each query, as 0-based
// rows of base = the point ids `infera vectors load` gives them).
#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "datasets.h"

int main(int argc, char** argv) {
  using namespace infera::vectors::bench;
  const std::string which = argc > 1 ? argv[1] : "";
  if (!((which == "clustered" && argc == 5) || (which == "cosine" && argc == 6))) {
    std::fprintf(stderr, "usage: vecgen clustered N Q DIR | vecgen cosine N Q DIM DIR\n");
    return 2;
  }
  const size_t n = std::stoul(argv[2]), nq = std::stoul(argv[3]);
  const size_t dim = which == "cosine" ? std::stoul(argv[4]) : 128;
  const std::string dir = argv[argc - 1];
  std::filesystem::create_directories(dir);
  const Data d = clustered(n, nq, dim, which == "cosine");
  if (!writeFvecs(dir + "/base.fvecs", d.base.data(), d.n, d.dim) ||
      !writeFvecs(dir + "/queries.fvecs", d.queries.data(), d.nq, d.dim) ||
      !writeIvecs(dir + "/gt.ivecs", d.gt)) {
    std::fprintf(stderr, "cannot write %s\n", dir.c_str());
    return 1;
  }
  std::printf("%s: %zu base, %zu queries, dim %zu -> %s\n", d.name.c_str(), d.n, d.nq, d.dim,
              dir.c_str());
  return 0;
}
