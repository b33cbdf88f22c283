// gpuport's built-in array kernels, CUDA dialect. The kernels themselves are
// in kernels/common/array_ops.h (shared with kernels/hip/array_ops.hip); this
// file supplies CUDA's half-precision conversions and instantiates them all.
// Compiled by NVRTC at first use (src/backend/cuda.rs), or by nvcc in build.rs
// when nvcc is present.

// f16 <-> f32 with the hardware conversion instructions (round to nearest even).
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

#include "array_ops.h"

// At run time each kernel is compiled alone (src/kernels/mod.rs).
#ifndef GPUPORT_SELECTED_KERNELS
GPUPORT_ALL_ARRAY_KERNELS
#endif
