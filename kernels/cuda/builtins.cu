// gpuport built-in kernels, CUDA dialect. Compiled at first use by NVRTC
// (see src/backend/cuda.rs); kernels/hip/builtins.hip mirrors this file.
// Names and parameters must match src/backend/mod.rs `builtin` and the
// host backend's Rust versions in src/backend/host.rs.

// No work: measures launch latency.
extern "C" __global__ void gpuport_empty() {}

// Holds the stream for `ns` nanoseconds (thread 0 only), reading the
// device's global nanosecond timer; used to test asynchronous behaviour.
extern "C" __global__ void gpuport_sleep_ns(unsigned long long ns) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

// Writes `value` to ptr[0..n): a grid-stride loop, so any grid covers all n.
extern "C" __global__ void gpuport_fill_u32(unsigned int* ptr, unsigned long long n, unsigned int value) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        ptr[i] = value;
    }
}
