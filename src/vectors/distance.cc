#include "vectors/internal/distance.h"

#include <immintrin.h>

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
  for (; i + 8 <= dim; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
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
    const __m256i va = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256i vb = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
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
    const __m256i va = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256i vb = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(va, vb));
  }
  int32_t s = hsumEpi32(acc);
  for (; i < dim; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}

const Kernels kScalar{scalarL2, scalarNegDot, scalarCodeL2, scalarCodeDot, "scalar"};
const Kernels kAvx2{avxL2, avxNegDot, avxCodeL2, avxCodeDot, "avx2+fma"};

}  // namespace

const Kernels& scalarKernels() { return kScalar; }

const Kernels& kernels() {
  static const Kernels* k = [] {
    __builtin_cpu_init();
    return (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? &kAvx2 : &kScalar;
  }();
  return *k;
}

}  // namespace infera::vectors
