#pragma once
// The benchmark data sets shared by ann_bench, vecgen and http_search: clustered Gaussian vectors
// with a fixed seed (the same bytes on every machine), exact ground truth by brute force, and the
// TEXMEX .fvecs/.ivecs files they are written to and read from.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "vectors/internal/distance.h"

namespace infera::vectors::bench {

using Clock = std::chrono::steady_clock;
inline double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Data {
  std::string name;
  size_t dim = 0, n = 0, nq = 0;
  bool cosine = false;
  std::vector<float> base, queries;
  std::vector<std::vector<uint32_t>> gt;  // top-10 per query
};

// Exact top-10 per query; queries are split over the box's 2 cores (only the ground truth: every
// engine is timed on one thread).
inline void bruteForceTruth(Data& d, const std::vector<uint64_t>* bits,
                            std::vector<std::vector<uint32_t>>& out) {
  out.assign(d.nq, {});
  const auto& k = kernels();
#pragma omp parallel for num_threads(2) schedule(dynamic, 8)
  for (size_t q = 0; q < d.nq; ++q) {
    std::vector<std::pair<float, uint32_t>> all;
    for (size_t i = 0; i < d.n; ++i) {
      if (bits && !(((*bits)[i >> 6] >> (i & 63)) & 1)) continue;
      const float* b = &d.base[i * d.dim];
      const float* qv = &d.queries[q * d.dim];
      all.push_back({d.cosine ? k.neg_dot(qv, b, d.dim) : k.l2sq(qv, b, d.dim), uint32_t(i)});
    }
    const size_t top = std::min<size_t>(10, all.size());
    std::partial_sort(all.begin(), all.begin() + long(top), all.end());
    for (size_t i = 0; i < top; ++i) out[q].push_back(all[i].second);
  }
}

// Clustered Gaussian data: 100 centres uniform in [0, 1)^dim, points N(centre, 0.1^2 I); queries
// drawn the same way; seed 42. Cosine: every vector normalised.
// `spread`: centres drawn N(0, 1) and points N(centre, 0.8) (a cluster as wide as the space
// between clusters, every dimension centred on 0), cosine; otherwise centres U(0, 1) and points
// N(centre, 0.1): tight clusters, every component positive.
inline Data clustered(size_t n, size_t nq, size_t dim, bool cosine, bool truth = true,
                      bool spread = false) {
  Data d;
  d.name = (spread   ? "spread-"
            : cosine ? "cosine-"
                     : "clustered-") +
           std::to_string(n) + "x" + std::to_string(dim);
  d.dim = dim, d.n = n, d.nq = nq, d.cosine = cosine || spread;
  cosine = d.cosine;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> u(0, 1);
  std::normal_distribution<float> unit(0, 1.0f);
  std::normal_distribution<float> g(0, spread ? 0.8f : 0.1f);
  const size_t clusters = 100;
  std::vector<float> centres(clusters * dim);
  for (auto& x : centres) x = spread ? unit(rng) : u(rng);
  auto draw = [&](std::vector<float>& out, size_t count) {
    out.resize(count * dim);
    for (size_t i = 0; i < count; ++i) {
      const size_t c = rng() % clusters;
      double norm = 0;
      for (size_t j = 0; j < dim; ++j) {
        out[i * dim + j] = centres[c * dim + j] + g(rng);
        norm += double(out[i * dim + j]) * out[i * dim + j];
      }
      if (cosine) {
        for (size_t j = 0; j < dim; ++j)
          out[i * dim + j] = float(out[i * dim + j] / std::sqrt(norm));
      }
    }
  };
  draw(d.base, n);
  draw(d.queries, nq);
  if (truth) {
    const auto t = Clock::now();
    bruteForceTruth(d, nullptr, d.gt);
    std::fprintf(stderr, "%s: ground truth by brute force in %.1f s\n", d.name.c_str(),
                 secondsSince(t));
  }
  return d;
}

// Embedding-like: each vector W z + e, normalised (cosine), with z ~ N(0, I) in `rank` dimensions,
// W a fixed random dim x rank matrix and e ~ N(0, 0.1^2) per component: a low-dimensional manifold
// spread over every dimension, as sentence embeddings are (their intrinsic dimension is far below
// their width), which is what 1-bit codes (hyperplane signs) preserve.
inline Data lowRank(size_t n, size_t nq, size_t dim, size_t rank) {
  Data d;
  d.name = "lowrank" + std::to_string(rank) + "-" + std::to_string(n) + "x" + std::to_string(dim);
  d.dim = dim, d.n = n, d.nq = nq, d.cosine = true;
  std::mt19937_64 rng(42);
  std::normal_distribution<float> unit(0, 1.0f), noise(0, 0.1f);
  std::vector<float> w(dim * rank);
  for (auto& x : w) x = unit(rng) / std::sqrt(float(rank));
  auto draw = [&](std::vector<float>& out, size_t count) {
    out.resize(count * dim);
    std::vector<float> z(rank);
    for (size_t i = 0; i < count; ++i) {
      for (auto& x : z) x = unit(rng);
      double norm = 0;
      for (size_t j = 0; j < dim; ++j) {
        float v = noise(rng);
        for (size_t r = 0; r < rank; ++r) v += w[j * rank + r] * z[r];
        out[i * dim + j] = v;
        norm += double(v) * v;
      }
      for (size_t j = 0; j < dim; ++j) out[i * dim + j] = float(out[i * dim + j] / std::sqrt(norm));
    }
  };
  draw(d.base, n);
  draw(d.queries, nq);
  return d;
}

// `rows` vectors of `dim` from `v` as .fvecs; false on an I/O error.
inline bool writeFvecs(const std::string& path, const float* v, size_t rows, size_t dim) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const int32_t d = int32_t(dim);
  bool ok = true;
  for (size_t i = 0; i < rows && ok; ++i) {
    ok = std::fwrite(&d, 4, 1, f) == 1 && std::fwrite(v + i * dim, 4, dim, f) == dim;
  }
  return std::fclose(f) == 0 && ok;
}

inline bool writeIvecs(const std::string& path, const std::vector<std::vector<uint32_t>>& rows) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = true;
  for (const auto& r : rows) {
    const int32_t d = int32_t(r.size());
    ok = ok && std::fwrite(&d, 4, 1, f) == 1 && std::fwrite(r.data(), 4, r.size(), f) == r.size();
  }
  return std::fclose(f) == 0 && ok;
}

// Reads a whole .fvecs (or .ivecs as uint32 when T = uint32_t) file: rows x dim; false on error.
template <typename T>
bool readVecs(const std::string& path, std::vector<T>& out, size_t& rows, size_t& dim) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  out.clear();
  rows = 0;
  dim = 0;
  int32_t d = 0;
  while (std::fread(&d, 4, 1, f) == 1) {
    if (d <= 0 || (dim && size_t(d) != dim)) break;
    dim = size_t(d);
    out.resize(out.size() + dim);
    if (std::fread(&out[out.size() - dim], sizeof(T), dim, f) != dim) break;
    ++rows;
  }
  std::fclose(f);
  return rows > 0 && out.size() == rows * dim;
}

}  // namespace infera::vectors::bench
