#include "vectors/internal/distance.h"

#include <bit>

#include <immintrin.h>

#include <cstdlib>
#include <string_view>

namespace infera::vectors {
namespace {

float scalarL2(const float* a, const float* b, size_t dim) {
  float s = 0;
  for (size_t i = 0; i < dim; ++i) {
    const float d = a[i] - b[i];
    s += d * d;
  }
  return s;
}

float scalarNegDot(const float* a, const float* b, size_t dim) {
  float s = 0;
  for (size_t i = 0; i < dim; ++i) s += a[i] * b[i];
  return -s;
}

int32_t scalarCodeL2(const int8_t* a, const int8_t* b, size_t dim) {
  int32_t s = 0;
  for (size_t i = 0; i < dim; ++i) {
    const int32_t d = int32_t(a[i]) - int32_t(b[i]);
    s += d * d;
  }
  return s;
}

int32_t scalarCodeDot(const int8_t* a, const int8_t* b, size_t dim) {
  int32_t s = 0;
  for (size_t i = 0; i < dim; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Two accumulators of 8 lanes each hide the FMA latency; the tail (dim % 8) is scalar.
__attribute__((target("avx2,fma"))) float avxL2(const float* a, const float* b, size_t dim) {
  __m256 s0 = _mm256_setzero_ps();
  __m256 s1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    s0 = _mm256_fmadd_ps(d0, d0, s0);
    s1 = _mm256_fmadd_ps(d1, d1, s1);
  }
  for (; i + 8 <= dim; i += 8) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    s0 = _mm256_fmadd_ps(d0, d0, s0);
  }
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; i < dim; ++i) {
    const float d = a[i] - b[i];
    s += d * d;
  }
  return s;
}

__attribute__((target("avx2,fma"))) float avxNegDot(const float* a, const float* b, size_t dim) {
  __m256 s0 = _mm256_setzero_ps();
  __m256 s1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= dim; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; i < dim; ++i) s += a[i] * b[i];
  return -s;
}

__attribute__((target("avx2"))) inline int32_t hsumEpi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// int8 -> int16 lanes, then madd (pairs of int16 products summed into int32).
__attribute__((target("avx2"))) int32_t avxCodeL2(const int8_t* a, const int8_t* b, size_t dim) {
  __m256i acc = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256i va =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256i vb =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    const __m256i d = _mm256_sub_epi16(va, vb);
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(d, d));
  }
  int32_t s = hsumEpi32(acc);
  for (; i < dim; ++i) {
    const int32_t d = int32_t(a[i]) - int32_t(b[i]);
    s += d * d;
  }
  return s;
}

__attribute__((target("avx2"))) int32_t avxCodeDot(const int8_t* a, const int8_t* b, size_t dim) {
  __m256i acc = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256i va =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256i vb =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(va, vb));
  }
  int32_t s = hsumEpi32(acc);
  for (; i < dim; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}

// GCC 12's AVX-512 intrinsics (casts, extracts, reductions: their _mm512_undefined_* operands) warn
// falsely with -Wuninitialized at -O3 (GCC bug 105593); the AVX-512 kernels are compiled without
// it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Horizontal sums of 512-bit lanes: the high half shuffled onto the low one, then AVX2's.
__attribute__((target("avx512f,avx2,fma"))) inline float hsum512(__m512 v) {
  const __m512 hi = _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2));
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(hi)));
}

__attribute__((target("avx512f,avx2"))) inline int32_t hsum512Epi32(__m512i v) {
  const __m512i hi = _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2));
  return hsumEpi32(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_castsi512_si256(hi)));
}

// AVX-512: 16 lanes, two accumulators, the tail as one masked load (no scalar loop). At 768-d the
// traversal is distance-bound and this is what hnswlib gets from -march=native here: the AVX2
// kernels measured half its QPS on 100k x 768 (docs/benchmarks.md).
__attribute__((target("avx512f,avx2,fma"))) float avx512L2(const float* a, const float* b,
                                                           size_t dim) {
  __m512 s0 = _mm512_setzero_ps();
  __m512 s1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
    s0 = _mm512_fmadd_ps(d0, d0, s0);
    s1 = _mm512_fmadd_ps(d1, d1, s1);
  }
  for (; i + 16 <= dim; i += 16) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    s0 = _mm512_fmadd_ps(d0, d0, s0);
  }
  if (i < dim) {
    const __mmask16 m = __mmask16((1u << (dim - i)) - 1);
    const __m512 d0 =
        _mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i));
    s1 = _mm512_fmadd_ps(d0, d0, s1);
  }
  return hsum512(_mm512_add_ps(s0, s1));
}

__attribute__((target("avx512f,avx2,fma"))) float avx512NegDot(const float* a, const float* b,
                                                               size_t dim) {
  __m512 s0 = _mm512_setzero_ps();
  __m512 s1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
  }
  for (; i + 16 <= dim; i += 16)
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
  if (i < dim) {
    const __mmask16 m = __mmask16((1u << (dim - i)) - 1);
    s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
  }
  return -hsum512(_mm512_add_ps(s0, s1));
}

// int8 -> int16 in 32 lanes, madd into 16 int32 lanes.
__attribute__((target("avx512f,avx512bw,avx2"))) int32_t avx512CodeL2(const int8_t* a,
                                                                      const int8_t* b, size_t dim) {
  __m512i acc = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    const __m512i va =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)));
    const __m512i vb =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    const __m512i d = _mm512_sub_epi16(va, vb);
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(d, d));
  }
  int32_t s = hsum512Epi32(acc);
  for (; i < dim; ++i) {
    const int32_t d = int32_t(a[i]) - int32_t(b[i]);
    s += d * d;
  }
  return s;
}

__attribute__((target("avx512f,avx512bw,avx2"))) int32_t avx512CodeDot(const int8_t* a,
                                                                       const int8_t* b,
                                                                       size_t dim) {
  __m512i acc = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    const __m512i va =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)));
    const __m512i vb =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(va, vb));
  }
  int32_t s = hsum512Epi32(acc);
  for (; i < dim; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}

#pragma GCC diagnostic pop

uint32_t scalarHamming(const uint64_t* a, const uint64_t* b, size_t words) {
  uint32_t s = 0;
  for (size_t i = 0; i < words; ++i) s += uint32_t(std::popcount(a[i] ^ b[i]));
  return s;
}

// Every CPU with AVX2 has POPCNT: one instruction per word.
__attribute__((target("popcnt"))) uint32_t popcntHamming(const uint64_t* a, const uint64_t* b,
                                                         size_t words) {
  uint32_t s = 0;
  for (size_t i = 0; i < words; ++i) s += uint32_t(__builtin_popcountll(a[i] ^ b[i]));
  return s;
}

const Kernels kScalar{scalarL2, scalarNegDot, scalarCodeL2, scalarCodeDot, scalarHamming, "scalar"};
const Kernels kAvx2{avxL2, avxNegDot, avxCodeL2, avxCodeDot, popcntHamming, "avx2+fma"};
const Kernels kAvx512{avx512L2, avx512NegDot, avx512CodeL2, avx512CodeDot, popcntHamming, "avx512"};

}  // namespace

const Kernels& scalarKernels() { return kScalar; }

const Kernels& kernels() {
  static const Kernels* k = [] {
    __builtin_cpu_init();
    // INFERA_VECTOR_KERNELS=avx2|scalar picks lesser kernels (benchmarks compare them).
    const char* want = std::getenv("INFERA_VECTOR_KERNELS");
    const std::string_view w = want ? want : "";
    if (w != "avx2" && w != "scalar" && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw")) {
      return &kAvx512;
    }
    if (w != "scalar" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return &kAvx2;
    return &kScalar;
  }();
  return *k;
}

}  // namespace infera::vectors
