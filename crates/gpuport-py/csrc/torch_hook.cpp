// The allocation function gpuport gives PyTorch's CUDAPluggableAllocator.
//
// PyTorch calls `alloc_fn(size, device, stream)` and never checks the
// pointer it gets: a null pointer becomes a tensor at address 0. Its
// caching allocator reports out-of-memory by throwing instead, and torch's
// Python bindings turn a C++ exception into a Python one (a
// std::runtime_error becomes RuntimeError). So this function asks gpuport
// (`gpuport_torch_try_malloc`, Rust, which never unwinds) and throws with
// gpuport's message where it failed. It is C++ because only C++ can throw
// the exception torch catches; the Rust function that PyTorch finds by name
// (`gpuport_torch_malloc`, crates/gpuport-py/src/torch_hook.rs) calls it
// with the "C-unwind" ABI, so the exception crosses that one frame soundly.
#include <cstddef>
#include <stdexcept>
#include <sys/types.h>

extern "C" void* gpuport_torch_try_malloc(ssize_t size, int device, void* stream, char* message, size_t capacity);

extern "C" void* gpuport_torch_malloc_or_throw(ssize_t size, int device, void* stream) {
    char message[1024] = {0};
    void* ptr = gpuport_torch_try_malloc(size, device, stream, message, sizeof message);
    if (ptr == nullptr && size != 0) {
        throw std::runtime_error(message);
    }
    return ptr;
}
