// gpuport built-in kernels, HIP dialect. Compiled at first use by hiprtc
// (see src/backend/hip/mod.rs) and, in CI, by `hipcc --genco` for gfx90a
// and gfx1030 (ci/rocm.sh), so a kernel that stops compiling fails CI.
// This file mirrors kernels/cuda/builtins.cu: names and parameters must
// match src/backend/mod.rs `builtin` and the host backend's Rust versions.
//
// The same text also compiles under NVRTC with the HIP-on-CUDA test shim's
// prelude (tests/support/hip_on_cuda), which is how it runs on the NVIDIA
// test machine. Code that differs between the two targets is guarded:
// `__AMDGCN__` is defined when clang compiles for an AMD GPU (hipcc, hiprtc);
// `__CUDA_ARCH__` when NVRTC compiles for an NVIDIA GPU.

// Runtime compilers (hiprtc, NVRTC) provide the device API without an
// include; offline compilers (hipcc --genco) need the header.
#if !defined(__HIPCC_RTC__) && !defined(__CUDACC_RTC__)
#include <hip/hip_runtime.h>
#endif

// Rate of `wall_clock64()` in kHz. The backend passes the device's
// `hipDeviceAttributeWallClockRate` when the runtime reports it (ROCm 5.3+);
// 100 MHz is the rate AMD GPUs have reported for it so far.
#ifndef GPUPORT_WALL_CLOCK_KHZ
#define GPUPORT_WALL_CLOCK_KHZ 100000ull
#endif

// No work: measures launch latency.
extern "C" __global__ void gpuport_empty() {}

// Holds the stream for at least `ns` nanoseconds (thread 0 of block 0 only);
// used to test asynchronous behaviour.
extern "C" __global__ void gpuport_sleep_ns(unsigned long long ns) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
#if defined(__AMDGCN__)
    // wall_clock64() is a constant-rate counter; ROCm's headers return -1
    // where the target has none (ROCm 5.2 on some gfx10/11), so fall back to
    // the shader clock, assuming at most 5 GHz so the wait is never shorter.
    if (wall_clock64() >= 0) {
        const unsigned long long ticks = ns * (unsigned long long)GPUPORT_WALL_CLOCK_KHZ / 1000000ull + 1;
        const unsigned long long start = (unsigned long long)wall_clock64();
        while ((unsigned long long)wall_clock64() - start < ticks) {
            __builtin_amdgcn_s_sleep(127);
        }
    } else {
        const unsigned long long cycles = ns * 5ull + 1;
        const unsigned long long start = (unsigned long long)clock64();
        while ((unsigned long long)clock64() - start < cycles) {
            __builtin_amdgcn_s_sleep(127);
        }
    }
#elif defined(__CUDA_ARCH__)
    // NVIDIA through the test shim: the global nanosecond timer, as in builtins.cu.
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
#endif
}

// Writes `value` to ptr[0..n): a grid-stride loop, so any grid covers all n.
extern "C" __global__ void gpuport_fill_u32(unsigned int* ptr, unsigned long long n, unsigned int value) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        ptr[i] = value;
    }
}
