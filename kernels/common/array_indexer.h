/* The C twin of gpuport's Rust `ArrayIndexer<T, N>` (src/array/indexer.rs).
 *
 * Layout, identical to the Rust `#[repr(C)]` struct:  T* data; int64_t shape[N];
 * Passed by value to kernels: a base address and the extents, no stored size.
 * Indexing is row-major (the last axis is contiguous). N must be >= 1.
 *
 * Usable from CUDA (nvcc/NVRTC), HIP (hipcc/hiprtc) and plain C/C++ (gcc, clang):
 * functions are marked GPUPORT_HD, which is `__host__ __device__` only when a
 * GPU compiler is active.
 *
 *   C:    GPUPORT_ARRAY_INDEXER(float, 3, indexer_f32_3)  declares the struct
 *         `indexer_f32_3` and functions `indexer_f32_3_size`, `_linear`, `_indices`.
 *   C++:  gpuport::ArrayIndexer<float, 3>  with size(), linear(), indices().
 *
 * tests/indexer_c_layout.rs compiles this header and compares sizeof/offsetof
 * with the Rust type, so the two cannot drift apart silently. */
#ifndef GPUPORT_ARRAY_INDEXER_H
#define GPUPORT_ARRAY_INDEXER_H

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__)
#define GPUPORT_HD __host__ __device__
#else
#define GPUPORT_HD
#endif

#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__)
/* The runtime compilers have no <stdint.h>. */
typedef long long gpuport_i64;
#else
#include <stdint.h>
typedef int64_t gpuport_i64;
#endif

#define GPUPORT_ARRAY_INDEXER(T, N, NAME)                                              \
  typedef struct NAME {                                                                \
    T *data;                                                                           \
    gpuport_i64 shape[N];                                                              \
  } NAME;                                                                              \
  /* Number of elements: the product of the extents. */                                \
  static inline GPUPORT_HD gpuport_i64 NAME##_size(const NAME *ix) {                   \
    gpuport_i64 s = 1;                                                                 \
    for (int a = 0; a < (N); ++a) s *= ix->shape[a];                                   \
    return s;                                                                          \
  }                                                                                    \
  /* Row-major linear index of idx; -1 if any index is out of bounds. */              \
  static inline GPUPORT_HD gpuport_i64 NAME##_linear(const NAME *ix, const gpuport_i64 *idx) { \
    gpuport_i64 lin = 0;                                                               \
    for (int a = 0; a < (N); ++a) {                                                    \
      if (idx[a] < 0 || idx[a] >= ix->shape[a]) return -1;                             \
      lin = lin * ix->shape[a] + idx[a];                                               \
    }                                                                                  \
    return lin;                                                                        \
  }                                                                                    \
  /* Index tuple of linear index lin (0 <= lin < size) into out[N]. */                 \
  static inline GPUPORT_HD void NAME##_indices(const NAME *ix, gpuport_i64 lin, gpuport_i64 *out) { \
    for (int a = (N) - 1; a >= 0; --a) {                                               \
      out[a] = lin % ix->shape[a];                                                     \
      lin /= ix->shape[a];                                                             \
    }                                                                                  \
  }

#ifdef __cplusplus
namespace gpuport {

/* C++ (and CUDA/HIP) form: the same layout as GPUPORT_ARRAY_INDEXER. */
template <typename T, int N>
struct ArrayIndexer {
  static_assert(N >= 1, "ArrayIndexer needs at least one dimension");
  T *data;
  gpuport_i64 shape[N];

  GPUPORT_HD gpuport_i64 size() const {
    gpuport_i64 s = 1;
    for (int a = 0; a < N; ++a) s *= shape[a];
    return s;
  }
  /* Row-major linear index; -1 if any index is out of bounds. */
  GPUPORT_HD gpuport_i64 linear(const gpuport_i64 (&idx)[N]) const {
    gpuport_i64 lin = 0;
    for (int a = 0; a < N; ++a) {
      if (idx[a] < 0 || idx[a] >= shape[a]) return -1;
      lin = lin * shape[a] + idx[a];
    }
    return lin;
  }
  /* Index tuple of linear index lin (0 <= lin < size()). */
  GPUPORT_HD void indices(gpuport_i64 lin, gpuport_i64 (&out)[N]) const {
    for (int a = N - 1; a >= 0; --a) {
      out[a] = lin % shape[a];
      lin /= shape[a];
    }
  }
  GPUPORT_HD T &operator[](gpuport_i64 lin) const { return data[lin]; }
};

}  // namespace gpuport
#endif /* __cplusplus */

#endif /* GPUPORT_ARRAY_INDEXER_H */
