#pragma once
// Distance kernels over contiguous float and int8 vectors. AVX-512 (F+BW) or AVX2+FMA when the CPU
// has them (chosen once at start-up; INFERA_VECTOR_KERNELS=avx2|scalar asks for less), scalar
// otherwise. Every kernel returns a "smaller is closer" value:
//   l2sq: the squared Euclidean distance; negDot: minus the dot product.
// Thread-safe (pure functions).

#include <cstddef>
#include <cstdint>

namespace infera::vectors {

using FloatKernel = float (*)(const float* a, const float* b, size_t dim);
// Over int8 codes: an integer sum (squared difference or dot product), exact for dim < 2^16.
using CodeKernel = int32_t (*)(const int8_t* a, const int8_t* b, size_t dim);
// Over 1-bit codes: the Hamming distance of `words` 64-bit words.
using BitKernel = uint32_t (*)(const uint64_t* a, const uint64_t* b, size_t words);

struct Kernels {
  FloatKernel l2sq;
  FloatKernel neg_dot;
  CodeKernel code_l2sq;
  CodeKernel code_dot;
  BitKernel hamming;
  const char* name;  // "avx512", "avx2+fma" or "scalar"
};

// The best kernels this CPU runs.
const Kernels& kernels();
// The scalar ones (tests compare the two).
const Kernels& scalarKernels();

// Prefetches a vector of `bytes` into the cache.
inline void prefetch(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes && off < 256; off += 64) __builtin_prefetch(c + off, 0, 3);
}

}  // namespace infera::vectors
