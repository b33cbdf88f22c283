"""CuPy allocations through gpuport: ``gpuport.cupy.use_gpuport_for_cupy()``.

:func:`allocator` is for ``cupy.cuda.set_allocator``: each CuPy array's
memory comes from the current CUDA device's gpuport resource (so
``gpuport.memory.stats()`` and the CSV log show it), allocated on CuPy's
current stream, and goes back to the pool when CuPy drops it.
:func:`pinned_allocator` is for ``cupy.cuda.set_pinned_memory_allocator``.

CuPy is imported only when these functions run; importing gpuport (or this
module) does not import it.
"""

from __future__ import annotations

from typing import Any

from . import _core

__all__ = ["allocator", "pinned_allocator", "use_gpuport_for_cupy"]


def allocator(size: int) -> Any:
    """``size`` bytes on CuPy's current device and stream, as a ``cupy.cuda.MemoryPointer``.

    Needs CuPy and a CUDA device.

        >>> import cupy, gpuport.cupy, gpuport.memory as gm
        >>> mem = gpuport.cupy.allocator(1024)
        >>> isinstance(mem, cupy.cuda.MemoryPointer), mem.mem.size
        (True, 1024)
        >>> gm.stats("cuda:0")["current_bytes"] >= 1024
        True
    """
    import cupy

    dev = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream().ptr
    a = _core.mem_alloc(size, stream, f"cuda:{dev}")
    # The owner is the gpuport allocation: when CuPy drops the memory, the
    # allocation is collected and its block goes back to the pool.
    mem = cupy.cuda.UnownedMemory(a.ptr, size, a, dev)
    return cupy.cuda.MemoryPointer(mem, 0)


def pinned_allocator(size: int) -> Any:
    """``size`` bytes of pinned host memory, as a ``cupy.cuda.PinnedMemoryPointer``.

    Needs CuPy and a CUDA device.

        >>> import cupy, gpuport.cupy
        >>> mem = gpuport.cupy.pinned_allocator(4096)
        >>> isinstance(mem, cupy.cuda.PinnedMemoryPointer), mem.ptr != 0
        (True, True)
    """
    import cupy

    dev = cupy.cuda.runtime.getDevice()
    p = _core.mem_alloc_pinned(size, False, True, False, f"cuda:{dev}")
    # PinnedMemoryPointer(mem, offset) reads mem.ptr and mem.size and keeps
    # mem alive; the PinnedAllocation returns to gpuport's pinned pool when collected.
    return cupy.cuda.PinnedMemoryPointer(p, 0)


def use_gpuport_for_cupy(pinned: bool = True) -> None:
    """Routes CuPy's device (and, with ``pinned``, pinned host) allocations through gpuport.

    Needs CuPy and a CUDA device.

        >>> import cupy, gpuport.cupy, gpuport.memory as gm
        >>> gpuport.cupy.use_gpuport_for_cupy()
        >>> x = cupy.ones(1 << 20, dtype=cupy.float32)   # 4 MiB from gpuport's pool
        >>> gm.stats("cuda:0")["current_bytes"] >= x.nbytes
        True
    """
    import cupy

    cupy.cuda.set_allocator(allocator)
    if pinned:
        cupy.cuda.set_pinned_memory_allocator(pinned_allocator)
