"""A Numba External Memory Manager (NBEP 7) backed by gpuport.

Use it through the environment::

    NUMBA_CUDA_MEMORY_MANAGER=gpuport.numba python script.py

or, before Numba creates its CUDA context, ``gpuport.numba.use_gpuport_for_numba()``.

CUDA only: Numba's GPU target is CUDA, so the plugin serves CUDA devices
and refuses a ROCm (or host) device with ``gpuport.UnsupportedError``; on
ROCm, exchange memory with Numba-free code through DLPack instead.

Device memory (``cuda.to_device``, ``device_array``, ...) comes from the
context device's current gpuport resource (the caching pool with the
statistics and optional CSV log of ``gpuport.memory``) and returns to it
when Numba finalizes the array. Pinned and mapped host memory
(``pinned_array``, ``mapped_array``) comes from gpuport's pinned pool.
``mempin`` (page-locking memory Numba did not allocate) registers through
gpuport (``cuMemHostRegister``, portable, mapped on request) and unregisters
when Numba finalizes the pinned object.
``defer_cleanup`` holds back both gpuport frees and Numba's own.
``reset`` (called by ``cuda.close()``) frees every allocation the manager
made: the primary context is reset right after, so pool memory that other
gpuport users (CuPy, PyTorch, gpuport arrays) hold in the same context is
lost then, as with any memory of that context.

Importing this module imports Numba (``numba.cuda``); importing gpuport does not.
"""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from typing import Any, Dict, Iterator

from numba import cuda
from numba.cuda.cudadrv import driver as _drv

from . import _core

__all__ = ["GpuportNumbaMemoryManager", "cuda_spec", "ipc_handle_bytes", "use_gpuport_for_numba"]


def cuda_spec(device: Any = None) -> str:
    """The CUDA device spec (``"cuda:N"``) Numba's memory comes from for
    ``device``: None (cuda:0), a CUDA ordinal, a spec or a ``gpuport.Device``.
    A ROCm or host device is refused with ``gpuport.UnsupportedError``: Numba
    has no ROCm target, so its arrays cannot live there.

        >>> import gpuport.numba as gn
        >>> gn.cuda_spec(), gn.cuda_spec(1), gn.cuda_spec("cuda")
        ('cuda:0', 'cuda:1', 'cuda:0')
        >>> gn.cuda_spec("rocm:0")
        Traceback (most recent call last):
        gpuport.UnsupportedError: gpuport.numba: rocm:0 is a ROCm device, and Numba has no ROCm target ...
    """
    if device is None:
        return "cuda:0"
    if isinstance(device, bool):
        raise TypeError(f"device must be None, a CUDA ordinal, a spec or a gpuport.Device; got {device!r}")
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"a CUDA ordinal is non-negative; got {device}")
        return f"cuda:{device}"
    if isinstance(device, str):
        spec = device.strip()
        backend = spec.split(":", 1)[0]
    elif isinstance(device, _core.Device):
        spec, backend = device.spec, device.backend
    else:
        raise TypeError(f"device must be None, a CUDA ordinal, a spec or a gpuport.Device; got {device!r}")
    if backend == "cuda":
        return spec if ":" in spec else "cuda:0"
    if backend == "rocm":
        raise _core.UnsupportedError(
            f"gpuport.numba: {spec} is a ROCm device, and Numba has no ROCm target (its GPU target is "
            "CUDA only), so Numba's memory cannot come from it; use a CUDA device, or exchange ROCm "
            "memory through DLPack (gpuport.from_dlpack, MemArray.__dlpack__)"
        )
    raise _core.UnsupportedError(
        f"gpuport.numba: {spec!r} is not a CUDA device; Numba's memory manager serves CUDA devices only"
    )


def _binding() -> Any:
    b = getattr(_drv, "binding", None)
    if b is not None:
        return b
    try:
        from cuda.bindings import driver as b2
    except ImportError:  # pragma: no cover - older cuda-python
        from cuda import cuda as b2  # type: ignore[no-redef]
    return b2


def _nv() -> bool:
    """Whether Numba talks to the driver through NVIDIA's bindings (else ctypes)."""
    return bool(getattr(_drv, "USE_NV_BINDING", True))


def _out_of_memory(size: int, cause: Exception) -> Exception:
    """Numba's error for a failed allocation: ``CudaAPIError`` with
    ``CUDA_ERROR_OUT_OF_MEMORY``, as its own manager raises."""
    if _nv():
        code: Any = _binding().CUresult.CUDA_ERROR_OUT_OF_MEMORY
    else:
        from numba.cuda.cudadrv import enums

        code = enums.CUDA_ERROR_OUT_OF_MEMORY
    return _drv.CudaAPIError(code, f"gpuport could not allocate {size} bytes: {cause}")


def _devptr(ptr: int) -> Any:
    return _binding().CUdeviceptr(ptr) if _nv() else ctypes.c_uint64(ptr)


def _hostptr(ptr: int) -> Any:
    return ptr if _nv() else ctypes.c_void_p(ptr)


def _ipc_handle_from_bytes(raw: bytes) -> Any:
    """A ``CUipcMemHandle`` holding ``raw`` (64 bytes). Some cuda-bindings
    versions have no ``reserved`` field accessor: write through ``getPtr()``."""
    handle = _binding().CUipcMemHandle()
    try:
        handle.reserved = raw
    except AttributeError:
        ctypes.memmove(handle.getPtr(), raw, len(raw))
    return handle


def ipc_handle_bytes(handle: Any) -> bytes:
    """The 64 bytes of a ``CUipcMemHandle`` (or of a ctypes byte array).

        >>> import ctypes, gpuport.numba as gn
        >>> handle = (ctypes.c_byte * 64)(*range(64))
        >>> gn.ipc_handle_bytes(handle) == bytes(range(64))
        True
    """
    reserved = getattr(handle, "reserved", None)
    if reserved is not None:
        return bytes(bytearray(x & 0xFF for x in reserved)) if not isinstance(reserved, bytes) else reserved
    get_ptr = getattr(handle, "getPtr", None)
    if get_ptr is not None:
        return ctypes.string_at(get_ptr(), 64)
    return bytes(bytearray(x & 0xFF for x in handle))


def _ptr_value(memory: Any) -> int:
    dp = memory.device_ctypes_pointer
    v = getattr(dp, "value", dp)
    return int(v or 0)


def _free_later(live: Dict[int, Any], allocation: Any) -> Any:
    ptr = allocation.ptr

    def finalize() -> None:
        # After a reset the address may belong to a newer allocation: drop
        # only our own entry. free() is idempotent.
        if live.get(ptr) is allocation:
            del live[ptr]
        allocation.free()

    return finalize


class _Unpin:
    """Gives a HostRegistration the ``free()`` that ``_host_finalizer`` calls."""

    def __init__(self, reg: Any) -> None:
        self.reg = reg

    def free(self) -> None:
        self.reg.unpin()


def _host_finalizer(allocations: Any, key: int, pinned: Any, mapped: bool) -> Any:
    def finalize() -> None:
        if mapped and allocations:
            allocations.pop(key, None)
        pinned.free()

    return finalize


def _device_ordinal(device: Any) -> int:
    """The ordinal of a Numba context's device: a Numba ``Device`` (``.id``),
    or, for contexts Numba attaches to (a third party's primary context), a
    ``cuda.bindings`` ``CUdevice`` (``int()``)."""
    ordinal = getattr(device, "id", None)
    if ordinal is None:
        try:
            ordinal = int(device)
        except (TypeError, ValueError):
            raise TypeError(
                f"cannot tell the CUDA device ordinal of Numba context device {device!r}: "
                "expected a numba Device (with .id) or a CUdevice (int())"
            ) from None
    return int(ordinal)


class GpuportNumbaMemoryManager(cuda.HostOnlyCUDAMemoryManager):  # type: ignore[misc]
    """NBEP 7 plugin: Numba's memory from gpuport's current resource.

    Numba calls its methods; the examples call them directly. Needs Numba
    and a CUDA device.

        >>> import numpy as np
        >>> from numba import cuda
        >>> import gpuport.numba, gpuport.memory as gm
        >>> gpuport.numba.use_gpuport_for_numba()
        >>> d = cuda.to_device(np.arange(256, dtype=np.float32))   # through gpuport
        >>> gm.stats("cuda:0")["current_bytes"] >= d.nbytes
        True
        >>> mm = cuda.current_context().memory_manager
        >>> type(mm).__name__, mm.interface_version
        ('GpuportNumbaMemoryManager', 1)
    """

    def initialize(self) -> None:
        """Binds the manager to its context's CUDA device (Numba calls it
        when it makes the context; again, it keeps what is live).

            >>> from numba import cuda
            >>> import gpuport.numba
            >>> gpuport.numba.use_gpuport_for_numba()
            >>> mm = cuda.current_context().memory_manager   # initialized
            >>> mm.initialize()
            >>> mm.get_memory_info().total > 0
            True
        """
        # May be called more than once: keep what is live.
        self._spec = cuda_spec(_device_ordinal(self.context.device))
        if not hasattr(self, "_live"):
            self._live: Dict[int, Any] = {}
        _core.mem_stats(self._spec)  # installs the resource now

    def memalloc(self, size: int) -> Any:
        """``size`` bytes of device memory (``cuda.device_array`` calls it).

            >>> from numba import cuda
            >>> import gpuport.numba
            >>> gpuport.numba.use_gpuport_for_numba()
            >>> mem = cuda.current_context().memory_manager.memalloc(1024)
            >>> mem.size
            1024
        """
        try:
            a = _core.mem_alloc(size, None, self._spec)
        except _core.OutOfMemoryError:
            # As Numba's own manager does: run the deallocations it has
            # pending, then retry once; then fail with Numba's own error.
            self.deallocations.clear()
            try:
                a = _core.mem_alloc(size, None, self._spec)
            except _core.OutOfMemoryError as e:
                raise _out_of_memory(size, e) from e
        self._live[a.ptr] = a
        return _drv.MemoryPointer(self.context, _devptr(a.ptr), size, finalizer=_free_later(self._live, a))

    def memhostalloc(self, size: int, mapped: bool = False, portable: bool = False, wc: bool = False) -> Any:
        """``size`` bytes of pinned (``mapped``: also device-mapped) host memory
        from gpuport's pinned pool (``cuda.pinned_array``, ``cuda.mapped_array``).

            >>> from numba import cuda
            >>> import gpuport.numba
            >>> gpuport.numba.use_gpuport_for_numba()
            >>> mem = cuda.current_context().memory_manager.memhostalloc(4096, mapped=True)
            >>> mem.size
            4096
        """
        p = _core.mem_alloc_pinned(size, mapped, portable, wc, self._spec)
        finalizer = _host_finalizer(self.allocations, p.ptr, p, mapped)
        ctx = weakref.proxy(self.context)
        if mapped:
            mem = _drv.MappedMemory(ctx, _hostptr(p.ptr), size, finalizer=finalizer)
            self.allocations[p.ptr] = mem
            return mem.own()
        return _drv.PinnedMemory(ctx, _hostptr(p.ptr), size, finalizer=finalizer)

    def mempin(self, owner: Any, pointer: Any, size: int, mapped: bool = False) -> Any:
        """Page-locks ``size`` bytes at ``pointer`` that ``owner`` holds
        (``cuda.pinned``); unregistered when Numba finalizes the result.

            >>> import numpy as np
            >>> from numba import cuda
            >>> import gpuport.numba
            >>> gpuport.numba.use_gpuport_for_numba()
            >>> host = np.zeros(4096, dtype=np.uint8)
            >>> mm = cuda.current_context().memory_manager
            >>> mm.mempin(host, host.ctypes.data, host.nbytes).size
            4096
        """
        ptr = int(getattr(pointer, "value", pointer) or 0)
        reg = _core._mem_pin(ptr, size, mapped, self._spec)
        finalizer = _host_finalizer(self.allocations, ptr, _Unpin(reg), mapped)
        ctx = weakref.proxy(self.context)
        if mapped:
            mem = _drv.MappedMemory(ctx, _hostptr(ptr), size, owner=owner, finalizer=finalizer)
            self.allocations[ptr] = mem
            return mem.own()
        return _drv.PinnedMemory(ctx, _hostptr(ptr), size, owner=owner, finalizer=finalizer)

    def get_memory_info(self) -> Any:
        """``(free, total)`` memory of the device (``Context.get_memory_info``).

            >>> from numba import cuda
            >>> import gpuport.numba
            >>> gpuport.numba.use_gpuport_for_numba()
            >>> free, total = cuda.current_context().memory_manager.get_memory_info()
            >>> 0 < free <= total
            True
        """
        free, total = _core.mem_info(self._spec)
        return _drv.MemoryInfo(free=free, total=total)

    def get_ipc_handle(self, memory: Any) -> Any:
        """An IPC handle to memory this manager allocated (``DeviceNDArray.get_ipc_handle``).

            >>> import numpy as np
            >>> from numba import cuda
            >>> import gpuport.numba
            >>> gpuport.numba.use_gpuport_for_numba()
            >>> d = cuda.device_array(1024, dtype=np.uint8)
            >>> handle = cuda.current_context().memory_manager.get_ipc_handle(d.gpu_data)
            >>> handle.size
            1024
        """
        p = _ptr_value(memory)
        for base, a in list(self._live.items()):
            if base <= p < base + a.size:
                break
        else:
            raise ValueError(f"{p:#x} was not allocated by gpuport's Numba memory manager")
        raw, offset = a.ipc_handle()
        if _nv():
            handle = _ipc_handle_from_bytes(raw)
        else:
            handle = (ctypes.c_byte * 64).from_buffer_copy(raw)
        source_info = self.context.device.get_device_identity()
        return _drv.IpcHandle(memory, handle, memory.size, source_info, offset=offset + (p - base))

    def reset(self) -> None:
        """Frees everything this manager allocated (NBEP 7), then returns the
        pool's cached memory to the driver. Numba calls this from
        ``Context.reset`` (``cuda.close()``) just before it resets the primary
        context, which would otherwise leave pool segments dangling.

            >>> import numpy as np
            >>> from numba import cuda
            >>> import gpuport.numba, gpuport.memory as gm
            >>> gpuport.numba.use_gpuport_for_numba()
            >>> d = cuda.device_array(1 << 20, dtype=np.uint8)
            >>> cuda.close()                          # calls reset()
            >>> gm.stats("cuda:0")["current_bytes"]
            0
        """
        super().reset()
        live = getattr(self, "_live", None)
        if live:
            for a in list(live.values()):
                a.free()
            live.clear()
        spec = getattr(self, "_spec", None)
        if spec is not None:  # else never initialized: nothing allocated
            _core.mem_reset(spec)

    @contextlib.contextmanager
    def defer_cleanup(self) -> Iterator[None]:
        """Holds back Numba's and gpuport's frees for the block (``cuda.defer_cleanup()``).

            >>> import numpy as np
            >>> from numba import cuda
            >>> import gpuport.numba
            >>> gpuport.numba.use_gpuport_for_numba()
            >>> with cuda.current_context().memory_manager.defer_cleanup():
            ...     d = cuda.device_array(1024, dtype=np.uint8)
            ...     del d                                 # freed after the block
        """
        with super().defer_cleanup():
            guard = _core.mem_defer_cleanup(getattr(self, "_spec", None))
            try:
                yield
            finally:
                guard.release()

    @property
    def interface_version(self) -> int:
        return 1


#: Read by Numba when ``NUMBA_CUDA_MEMORY_MANAGER=gpuport.numba``.
_numba_memory_manager = GpuportNumbaMemoryManager


def use_gpuport_for_numba(device: Any = None) -> None:
    """Makes gpuport Numba's memory manager (before Numba's first CUDA context).

    ``device`` (optional) names the device the caller means Numba to use; it
    must be a CUDA one (see ``cuda_spec``): a ROCm device is refused with
    ``gpuport.UnsupportedError`` before anything changes, as Numba has no
    ROCm target. The manager itself follows Numba's context device.

        >>> from numba import cuda
        >>> import gpuport.numba
        >>> gpuport.numba.use_gpuport_for_numba()
        >>> type(cuda.current_context().memory_manager).__name__
        'GpuportNumbaMemoryManager'
    """
    cuda_spec(device)
    cuda.set_memory_manager(GpuportNumbaMemoryManager)
