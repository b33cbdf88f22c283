/* Lets a host C++ compiler check the syntax of the device kernel sources
 * (tests/kernel_sources.rs): the CUDA/HIP keywords become nothing and the
 * built-in variables plain globals. It does not make the kernels runnable. */
#include <math.h>
#define __global__
#define __device__
#define __host__
struct gpuport_dim3 { unsigned x, y, z; };
extern gpuport_dim3 blockIdx, blockDim, gridDim, threadIdx;
inline float gpuport_f16_to_f32(unsigned short h) { return (float)h; }
inline unsigned short gpuport_f32_to_f16(float f) { return (unsigned short)f; }
