// hip_on_cuda prelude: pre-included (NVRTC --pre-include) into every program
// compiled through the shim's hiprtc, so HIP device code compiles as CUDA.
//
// HIP's device language is CUDA's (__global__, __device__, __shared__,
// threadIdx, blockIdx, blockDim, gridDim, __syncthreads, atomics, clock64),
// so only what HIP adds or spells differently is defined here. Code meant for
// AMD only must be guarded with __AMDGCN__, which is never defined here.
#pragma once

#define __HIP_PLATFORM_NVIDIA__ 1
#define __HIP_PLATFORM_NVCC__ 1
// As under hiprtc: runtime-compiled, device code only, no includes needed.
#define __HIPCC_RTC__ 1
#define __HIP_DEVICE_COMPILE__ 1

#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipThreadIdx_z threadIdx.z
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipBlockDim_y blockDim.y
#define hipBlockDim_z blockDim.z
#define hipGridDim_x gridDim.x
#define hipGridDim_y gridDim.y
#define hipGridDim_z gridDim.z

#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];
#define HIP_DYNAMIC_SHARED_ATTRIBUTE

// HIP's constant-rate counter; AMD GPUs run it at 100 MHz, so this one
// counts 10 ns ticks of the global nanosecond timer.
__device__ inline long long wall_clock64() {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return (long long)(ns / 10);
}
