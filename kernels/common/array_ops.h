/* gpuport's built-in array kernels, written once for CUDA and HIP.
 *
 * kernels/cuda/array_ops.cu and kernels/hip/array_ops.hip include this file,
 * supply their dialect's pieces (half-precision conversions) and instantiate
 * the templates below as extern "C" kernels with the names
 * src/kernels/mod.rs computes:
 *
 *   gpuport_add_index_<dtype>_<rank>(ArrayIndexer<T, rank>)        x[i] += sum of i's indices
 *   gpuport_scale_<dtype>(T* x, u64 n, A alpha)                   x[i] *= alpha
 *   gpuport_axpy_<dtype>(T* y, const T* x, u64 n, A alpha)        y[i] += alpha * x[i]
 *   gpuport_fill_<bytes>(void* x, u64 n, Bytes<bytes> value)      x[i] = value
 *   gpuport_copy_strided_<bytes>_<rank>(Strided dst, Strided src) dst[idx] = src[idx] for every idx
 *
 * A is the compute type of T (float for f16/bf16, T otherwise). The host
 * backend's Rust versions (src/kernels/host.rs) define the same results.
 *
 * Performance: element-wise kernels are memory bound. They move 16-byte
 * vectors when the data is 16-byte aligned, keep several vectors in flight
 * per thread (UNROLL), use 32-bit index arithmetic when the array fits, and
 * are grid-stride loops launched with a resident-sized grid. */
#ifndef GPUPORT_ARRAY_OPS_H
#define GPUPORT_ARRAY_OPS_H

#include "array_indexer.h"

typedef unsigned long long gpuport_u64;

namespace gpuport {

/* ---- element types ---------------------------------------------------- */

/* Half-precision values travel as their 16 bits. */
struct f16 { unsigned short bits; };
struct bf16 { unsigned short bits; };

union F32Bits { float f; unsigned int u; };

__device__ inline float bf16_to_f32(unsigned short b) {
  F32Bits v; v.u = ((unsigned int)b) << 16; return v.f;
}
__device__ inline unsigned short f32_to_bf16(float f) {  /* round to nearest even, NaN kept quiet */
  F32Bits v; v.f = f;
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((v.u >> 16) | 0x40u);
  unsigned int rounding = 0x7fffu + ((v.u >> 16) & 1u);
  return (unsigned short)((v.u + rounding) >> 16);
}

/* Arithmetic of each element type, through its compute type. */
/* Multiply-add in the compute type: fused for floating point (as the host
 * backend's `mul_add`), plain (wrapping) for integers. */
template <typename C> __device__ inline C madd(C a, C x, C y) { return a * x + y; }
template <> __device__ inline float madd<float>(float a, float x, float y) { return fmaf(a, x, y); }
template <> __device__ inline double madd<double>(double a, double x, double y) { return fma(a, x, y); }

template <typename T> struct Arith {
  typedef T Compute;
  __device__ static Compute load(T x) { return x; }
  __device__ static T store(Compute c) { return c; }
  __device__ static Compute from_index(long long s) { return (Compute)s; }
};
template <> struct Arith<f16> {
  typedef float Compute;
  __device__ static float load(f16 x) { return gpuport_f16_to_f32(x.bits); }
  __device__ static f16 store(float c) { f16 r; r.bits = gpuport_f32_to_f16(c); return r; }
  __device__ static float from_index(long long s) { return (float)s; }
};
template <> struct Arith<bf16> {
  typedef float Compute;
  __device__ static float load(bf16 x) { return bf16_to_f32(x.bits); }
  __device__ static bf16 store(float c) { bf16 r; r.bits = f32_to_bf16(c); return r; }
  __device__ static float from_index(long long s) { return (float)s; }
};

/* ---- vector access ----------------------------------------------------- */

/* 16 bytes of T, moved as one load/store instruction. */
template <typename T> struct alignas(16) Vec16 {
  enum { LANES = 16 / sizeof(T) };
  T v[LANES];
};

template <int BYTES> struct Bytes { unsigned char b[BYTES]; };

__device__ inline long long global_thread() {
  return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ inline long long grid_threads() {
  return (long long)gridDim.x * blockDim.x;
}

/* ---- add_index ----------------------------------------------------------- */

/* Division by a divisor fixed for the whole kernel, as a multiply and a
 * shift (CUTLASS's FastDivmod): exact for dividends below 2^31 with
 * p = 31 + ceil(log2 d) and m = ceil(2^p / d). Integer division is a long
 * instruction sequence on GPUs; this keeps add_index memory bound. */
struct FastDiv {
  unsigned d;
  unsigned p;
  gpuport_u64 m;
  __device__ void init(unsigned divisor) {
    d = divisor;
    unsigned l = 0;
    while ((1ull << l) < divisor) ++l;
    p = 31 + l;
    m = ((1ull << p) + divisor - 1) / divisor;
  }
  __device__ unsigned div(unsigned n) const { return d == 1 ? n : (unsigned)(((gpuport_u64)n * m) >> p); }
};

/* Sum of the indices of a row-major linear index, and its index along the
 * last axis, in the integer type I. */
template <int N, typename I> struct IndexSum;

/* Arrays below 2^31 elements: 32-bit arithmetic with FastDiv. */
template <int N> struct IndexSum<N, unsigned> {
  FastDiv fd[N];
  __device__ explicit IndexSum(const gpuport_i64 (&shape)[N]) {
    for (int a = 0; a < N; ++a) fd[a].init((unsigned)shape[a]);
  }
  __device__ void operator()(unsigned lin, unsigned &sum, unsigned &last) const {
    unsigned q = fd[N - 1].div(lin);
    last = lin - q * fd[N - 1].d;
    sum = last;
    for (int a = N - 2; a >= 1; --a) {
      unsigned q2 = fd[a].div(q);
      sum += q - q2 * fd[a].d;
      q = q2;
    }
    if (N > 1) sum += q; /* the first index is what is left */
  }
};

/* Larger arrays: 64-bit division. */
template <int N> struct IndexSum<N, long long> {
  gpuport_i64 shape[N];
  __device__ explicit IndexSum(const gpuport_i64 (&s)[N]) {
    for (int a = 0; a < N; ++a) shape[a] = s[a];
  }
  __device__ void operator()(long long lin, long long &sum, long long &last) const {
    last = lin % shape[N - 1];
    lin /= shape[N - 1];
    sum = last;
    for (int a = N - 2; a >= 1; --a) {
      sum += lin % shape[a];
      lin /= shape[a];
    }
    if (N > 1) sum += lin;
  }
};

/* Vectors in flight per thread and loop step (overridable for tuning). */
#ifndef GPUPORT_UNROLL
#define GPUPORT_UNROLL 4
#endif
enum { UNROLL = GPUPORT_UNROLL };

template <typename T, int N, typename I>
__device__ inline void add_index_body(ArrayIndexer<T, N> ix) {
  typedef Arith<T> A;
  typedef Vec16<T> V;
  const IndexSum<N, I> index_sum(ix.shape);
  const I size = (I)ix.size();
  const I row = (I)ix.shape[N - 1];
  const bool aligned = ((gpuport_u64)ix.data % 16) == 0;
  const I nvec = aligned ? size / V::LANES : 0;
  const I tid = (I)global_thread(), stride = (I)grid_threads();
  V *vecs = reinterpret_cast<V *>(ix.data);

  /* UNROLL vectors per thread per step: all loads issue before any store. */
  I v = tid;
  for (; v + (UNROLL - 1) * stride < nvec; v += UNROLL * stride) {
    V buf[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) buf[u] = vecs[v + u * stride];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      I sum, last;
      index_sum((v + u * stride) * V::LANES, sum, last);
#pragma unroll
      for (int j = 0; j < V::LANES; ++j) {
        I s = sum + j;
        if (last + j >= row) {  /* the vector crosses a row: recompute */
          I l2;
          index_sum((v + u * stride) * V::LANES + j, s, l2);
        }
        buf[u].v[j] = A::store(A::load(buf[u].v[j]) + A::from_index((long long)s));
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) vecs[v + u * stride] = buf[u];
  }
  for (; v < nvec; v += stride) {
    V x = vecs[v];
#pragma unroll
    for (int j = 0; j < V::LANES; ++j) {
      I s, l;
      index_sum(v * V::LANES + j, s, l);
      x.v[j] = A::store(A::load(x.v[j]) + A::from_index((long long)s));
    }
    vecs[v] = x;
  }
  /* The elements after the last whole vector (all of them if unaligned). */
  for (I i = nvec * V::LANES + tid; i < size; i += stride) {
    I s, l;
    index_sum(i, s, l);
    ix.data[i] = A::store(A::load(ix.data[i]) + A::from_index((long long)s));
  }
}

template <typename T, int N>
__device__ inline void add_index(ArrayIndexer<T, N> ix) {
  /* FastDiv's 32-bit path needs every linear index below 2^31. */
  if (ix.size() < 2147483647LL) add_index_body<T, N, unsigned>(ix);
  else add_index_body<T, N, long long>(ix);
}

/* ---- scale, axpy, fill ------------------------------------------------------ */

template <typename T>
__device__ inline void scale(T *x, gpuport_u64 n, typename Arith<T>::Compute alpha) {
  typedef Arith<T> A;
  for (long long i = global_thread(); i < (long long)n; i += grid_threads()) x[i] = A::store(A::load(x[i]) * alpha);
}

template <typename T>
__device__ inline void axpy(T *y, const T *x, gpuport_u64 n, typename Arith<T>::Compute alpha) {
  typedef Arith<T> A;
  for (long long i = global_thread(); i < (long long)n; i += grid_threads())
    y[i] = A::store(madd(alpha, A::load(x[i]), A::load(y[i])));
}

template <int BYTES>
__device__ inline void fill(void *ptr, gpuport_u64 n, Bytes<BYTES> value) {
  Bytes<BYTES> *x = (Bytes<BYTES> *)ptr;
  for (long long i = global_thread(); i < (long long)n; i += grid_threads()) x[i] = value;
}

/* ---- strided copy -------------------------------------------------------------- */

/* A strided view: base address, extents and strides in elements. */
template <int N> struct Strided {
  char *data;
  gpuport_i64 shape[N];
  gpuport_i64 strides[N];
};

/* dst[idx] = src[idx] for every index tuple of dst's shape (src has the same
 * shape): gather when dst is compact, scatter when src is. */
template <int BYTES, int N>
__device__ inline void copy_strided(Strided<N> dst, Strided<N> src) {
  long long size = 1;
  for (int a = 0; a < N; ++a) size *= dst.shape[a];
  for (long long i = global_thread(); i < size; i += grid_threads()) {
    long long lin = i, d = 0, s = 0;
    for (int a = N - 1; a >= 0; --a) {
      long long k = lin % dst.shape[a];
      lin /= dst.shape[a];
      d += k * dst.strides[a];
      s += k * src.strides[a];
    }
    *(Bytes<BYTES> *)(dst.data + d * BYTES) = *(const Bytes<BYTES> *)(src.data + s * BYTES);
  }
}

}  /* namespace gpuport */

/* ---- instantiation: extern "C" names ------------------------------------------ */

#define GPUPORT_ADD_INDEX(T, NAME, N)                                                     \
  extern "C" __global__ void gpuport_add_index_##NAME##_##N(gpuport::ArrayIndexer<T, N> ix) { \
    gpuport::add_index<T, N>(ix);                                                          \
  }
#define GPUPORT_SCALE(T, NAME)                                                                   \
  extern "C" __global__ void gpuport_scale_##NAME(T *x, gpuport_u64 n, gpuport::Arith<T>::Compute alpha) { \
    gpuport::scale<T>(x, n, alpha);                                                             \
  }
#define GPUPORT_AXPY(T, NAME)                                                                    \
  extern "C" __global__ void gpuport_axpy_##NAME(T *y, const T *x, gpuport_u64 n,               \
                                                  gpuport::Arith<T>::Compute alpha) {           \
    gpuport::axpy<T>(y, x, n, alpha);                                                           \
  }
#define GPUPORT_FILL(BYTES)                                                                      \
  extern "C" __global__ void gpuport_fill_##BYTES(void *x, gpuport_u64 n, gpuport::Bytes<BYTES> v) { \
    gpuport::fill<BYTES>(x, n, v);                                                               \
  }
#define GPUPORT_COPY(BYTES, N)                                                                  \
  extern "C" __global__ void gpuport_copy_strided_##BYTES##_##N(gpuport::Strided<N> dst,        \
                                                                 gpuport::Strided<N> src) {      \
    gpuport::copy_strided<BYTES, N>(dst, src);                                                   \
  }

/* Every instantiation, for ahead-of-time builds (nvcc, hipcc). At run time
 * src/kernels/mod.rs compiles one kernel per program instead (defining
 * GPUPORT_SELECTED_KERNELS and one of the macros above): the whole set takes
 * minutes to compile. */
#define GPUPORT_ADD_INDEX_RANKS(T, NAME)                                                  \
  GPUPORT_ADD_INDEX(T, NAME, 1) GPUPORT_ADD_INDEX(T, NAME, 2) GPUPORT_ADD_INDEX(T, NAME, 3) \
  GPUPORT_ADD_INDEX(T, NAME, 4) GPUPORT_ADD_INDEX(T, NAME, 5) GPUPORT_ADD_INDEX(T, NAME, 6) \
  GPUPORT_ADD_INDEX(T, NAME, 7) GPUPORT_ADD_INDEX(T, NAME, 8)
#define GPUPORT_ELEMENTWISE(T, NAME) GPUPORT_ADD_INDEX_RANKS(T, NAME) GPUPORT_SCALE(T, NAME) GPUPORT_AXPY(T, NAME)
#define GPUPORT_BYTEWISE(BYTES)                                                                  \
  GPUPORT_FILL(BYTES)                                                                            \
  GPUPORT_COPY(BYTES, 1) GPUPORT_COPY(BYTES, 2) GPUPORT_COPY(BYTES, 3) GPUPORT_COPY(BYTES, 4)    \
  GPUPORT_COPY(BYTES, 5) GPUPORT_COPY(BYTES, 6) GPUPORT_COPY(BYTES, 7) GPUPORT_COPY(BYTES, 8)

#define GPUPORT_ALL_ARRAY_KERNELS                                   \
  GPUPORT_ELEMENTWISE(signed char, i8)                              \
  GPUPORT_ELEMENTWISE(short, i16)                                   \
  GPUPORT_ELEMENTWISE(int, i32)                                     \
  GPUPORT_ELEMENTWISE(long long, i64)                               \
  GPUPORT_ELEMENTWISE(unsigned char, u8)                            \
  GPUPORT_ELEMENTWISE(unsigned short, u16)                          \
  GPUPORT_ELEMENTWISE(unsigned int, u32)                            \
  GPUPORT_ELEMENTWISE(unsigned long long, u64)                      \
  GPUPORT_ELEMENTWISE(gpuport::f16, f16)                            \
  GPUPORT_ELEMENTWISE(gpuport::bf16, bf16)                          \
  GPUPORT_ELEMENTWISE(float, f32)                                   \
  GPUPORT_ELEMENTWISE(double, f64)                                  \
  GPUPORT_BYTEWISE(1) GPUPORT_BYTEWISE(2) GPUPORT_BYTEWISE(4)       \
  GPUPORT_BYTEWISE(8) GPUPORT_BYTEWISE(16)

#endif /* GPUPORT_ARRAY_OPS_H */
