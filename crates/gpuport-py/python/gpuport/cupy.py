"""CuPy allocations through gpuport: ``gpuport.cupy.use_gpuport_for_cupy()``.

:func:`c_allocator` is for ``cupy.cuda.set_allocator``: a CuPy
``CFunctionAllocator`` over two C functions of ``gpuport._core``
(crates/gpuport-py/src/cupy_hook.rs), so an allocation costs no Python call
of gpuport's. Each CuPy array's memory comes from the current device's
gpuport resource (so ``gpuport.memory.stats()`` and the CSV log show it),
allocated on CuPy's current stream, and goes back to the pool when CuPy
drops it. A failure raises in CuPy's caller (``MemoryError`` for out of
memory). :func:`allocator` does the same through a Python function; it is
the fallback where CuPy lacks what the C path needs.
:func:`pinned_allocator` is for ``cupy.cuda.set_pinned_memory_allocator``.

CuPy is imported only when these functions run; importing gpuport (or this
module) does not import it.
"""

from __future__ import annotations

from typing import Any

from . import _core

__all__ = ["allocator", "c_allocator", "held_bytes", "pinned_allocator", "use_gpuport_for_cupy"]

# A size gpuport refuses before allocating anything: the probe of the C
# allocator's error path (see _c_allocator_raises).
_PROBE_SIZE = 1 << 63


def _backend(cupy: Any) -> str:
    """The gpuport backend of CuPy's devices: "rocm" for CuPy's ROCm build."""
    return "rocm" if cupy.cuda.runtime.is_hip else "cuda"


def c_allocator() -> Any:
    """gpuport's C allocation functions as a CuPy ``CFunctionAllocator``'s ``malloc``.

    Needs CuPy (built for CUDA or ROCm) with ``cupy.cuda.stream``'s C
    function ``get_current_stream_ptr``; raises ``TypeError`` or
    ``AttributeError`` where CuPy lacks it.

        >>> import cupy, gpuport.cupy
        >>> malloc = gpuport.cupy.c_allocator()
        >>> mem = malloc(1024)
        >>> isinstance(mem, cupy.cuda.MemoryPointer), mem.mem.size
        (True, 1024)
    """
    import cupy
    from cupy.cuda import memory, stream

    backend = _backend(cupy)
    capsule = stream.__pyx_capi__["get_current_stream_ptr"]
    malloc, free = _core._cupy_allocator_functions(capsule, backend)
    # The owner keeps the functions' module alive while CuPy holds them.
    return memory.CFunctionAllocator(0, malloc, free, _core).malloc


def _c_allocator_raises(malloc: Any) -> bool:
    """Whether a failing C allocation reaches the caller as an exception."""
    try:
        malloc(_PROBE_SIZE)
    except Exception:  # noqa: BLE001 - any exception is the wanted outcome
        return True
    return False


def held_bytes(device: Any) -> int:
    """What the device's gpuport resource holds from the driver: the bytes
    CuPy's ``OutOfMemoryError`` reports as "allocated so far" (as CuPy's own
    pool reports its ``total_bytes()``).

    A caching pool's ``pool_reserved`` (of expandable segments, the bytes
    mapped, not the addresses reserved), else the bytes live.

        >>> import gpuport.cupy, gpuport.memory as gm
        >>> gpuport.cupy.held_bytes("host") == gm.stats("host")["pool_reserved"]
        True
    """
    stats = _core.mem_stats(device)
    return int(stats.get("pool_reserved", stats["current_bytes"]))


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

    if size == 0:
        # As CuPy's own pool and allocator: a null pointer, nothing allocated.
        return cupy.cuda.MemoryPointer(cupy.cuda.memory.Memory(0), 0)
    dev = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream().ptr
    try:
        a = _core.mem_alloc(size, stream, f"{_backend(cupy)}:{dev}")
    except _core.OutOfMemoryError as e:
        raise cupy.cuda.memory.OutOfMemoryError(size, held_bytes(f"{_backend(cupy)}:{dev}")) from e
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

    if size == 0:
        # As CuPy's pinned pool and allocator: a null pointer, nothing
        # allocated (NumPy's strides of an empty array over it follow).
        return cupy.cuda.PinnedMemoryPointer(cupy.cuda.PinnedMemory(0), 0)
    dev = cupy.cuda.runtime.getDevice()
    p = _core.mem_alloc_pinned(size, False, True, False, f"{_backend(cupy)}:{dev}")
    # PinnedMemoryPointer(mem, offset) reads mem.ptr and mem.size and keeps
    # mem alive; the PinnedAllocation returns to gpuport's pinned pool when collected.
    return cupy.cuda.PinnedMemoryPointer(p, 0)


def use_gpuport_for_cupy(pinned: bool = True) -> None:
    """Routes CuPy's device (and, with ``pinned``, pinned host) allocations through gpuport.

    Device allocations go through :func:`c_allocator`; where CuPy lacks
    what it needs, or a failing allocation would not raise, through
    :func:`allocator` with a ``RuntimeWarning`` saying why.

    Needs CuPy and a CUDA device.

        >>> import cupy, gpuport.cupy, gpuport.memory as gm
        >>> gpuport.cupy.use_gpuport_for_cupy()
        >>> x = cupy.ones(1 << 20, dtype=cupy.float32)   # 4 MiB from gpuport's pool
        >>> gm.stats("cuda:0")["current_bytes"] >= x.nbytes
        True
    """
    import cupy

    try:
        malloc = c_allocator()
        reason = None if _c_allocator_raises(malloc) else "a failing allocation did not raise"
    except (AttributeError, KeyError, TypeError) as e:
        reason = f"CuPy {cupy.__version__} has no usable get_current_stream_ptr ({e})"
    if reason is not None:
        import warnings

        warnings.warn(f"gpuport.cupy: using the Python allocator: {reason}", RuntimeWarning, stacklevel=2)
        malloc = allocator
    cupy.cuda.set_allocator(malloc)
    if pinned:
        cupy.cuda.set_pinned_memory_allocator(pinned_allocator)
