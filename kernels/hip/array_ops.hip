// gpuport's built-in array kernels, HIP dialect. The kernels themselves are
// in kernels/common/array_ops.h (shared with kernels/cuda/array_ops.cu); this
// file supplies HIP's half-precision conversions and instantiates them all.
// Compiled by hiprtc at first use (src/backend/hip/mod.rs), by hipcc --genco
// in CI (ci/rocm.sh), and by NVRTC through the HIP-on-CUDA test shim.
#if !defined(__HIPCC_RTC__) && !defined(__CUDACC_RTC__)
#include <hip/hip_runtime.h>
#endif

#if defined(__CUDA_ARCH__)
// Under the HIP-on-CUDA shim (NVRTC): the PTX conversion instructions.
__device__ inline float gpuport_f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ inline unsigned short gpuport_f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#else
// AMD GPUs: clang's _Float16, converted with round to nearest even.
__device__ inline float gpuport_f16_to_f32(unsigned short h) {
    _Float16 v;
    __builtin_memcpy(&v, &h, 2);
    return (float)v;
}
__device__ inline unsigned short gpuport_f32_to_f16(float f) {
    _Float16 v = (_Float16)f;
    unsigned short h;
    __builtin_memcpy(&h, &v, 2);
    return h;
}
#endif

#include "array_ops.h"

// At run time each kernel is compiled alone (src/kernels/mod.rs).
#ifndef GPUPORT_SELECTED_KERNELS
GPUPORT_ALL_ARRAY_KERNELS
#endif
