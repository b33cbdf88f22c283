"""PyTorch allocations through gpuport: ``gpuport.torch.use_gpuport_for_torch()``.

PyTorch's ``torch.cuda.memory.CUDAPluggableAllocator`` loads two C functions
from a shared library; the extension module ``gpuport._core`` exports them:

- ``void* gpuport_torch_malloc(ssize_t size, int device, cudaStream_t stream)``
- ``void gpuport_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream)``

They allocate from the device's current gpuport resource (the caching pool
with statistics and the optional CSV log of ``gpuport.memory``), in the
order of PyTorch's stream. A failed allocation raises in the PyTorch call
that asked for it (``RuntimeError`` with gpuport's message, naming the size);
a request of 0 bytes gets a null pointer, as from PyTorch's own allocator.
Allocations while ``torch.cuda.graph`` captures come from memory of the
graph's own, which nothing else gets while the graph lives. A ROCm build of
PyTorch (``torch.version.hip``) allocates on gpuport's ``rocm`` devices.

PyTorch allows the swap only before its first CUDA allocation in the
process: call :func:`use_gpuport_for_torch` right after ``import torch``,
before any tensor is put on a GPU (else PyTorch raises).

PyTorch is imported only when :func:`use_gpuport_for_torch` runs.
"""

from __future__ import annotations

from typing import Any

from .memory import torch_allocator_library

__all__ = ["torch_allocator_library", "use_gpuport_for_torch"]


def use_gpuport_for_torch() -> Any:
    """Makes gpuport PyTorch's CUDA allocator; returns the ``CUDAPluggableAllocator``.

    Needs PyTorch and a CUDA device; call it before PyTorch's first CUDA allocation.

        >>> import torch, gpuport.torch, gpuport.memory as gm
        >>> allocator = gpuport.torch.use_gpuport_for_torch()
        >>> x = torch.ones(1 << 20, device="cuda:0")      # 4 MiB from gpuport's pool
        >>> gm.stats("cuda:0")["current_bytes"] >= x.nbytes
        True
    """
    import torch

    from . import _core

    _core._torch_allocator_backend("rocm" if getattr(torch.version, "hip", None) else "cuda")
    path, alloc_fn, free_fn = torch_allocator_library()
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, alloc_fn, free_fn)
    torch.cuda.memory.change_current_allocator(allocator)
    return allocator
