"""The device's current gpuport memory resource, from Python.

Every device has one current resource: gpuport's caching pool wrapped in a
statistics adaptor, with a CSV log (like RMM's ``csv_log``) switched in by
:func:`enable_logging`. The peer-library hooks (``gpuport.cupy``,
``gpuport.numba``, ``gpuport.torch``) allocate through it, so
:func:`stats` and the log show their arrays too.

    >>> import gpuport.memory as gm
    >>> a = gm.alloc(1 << 20, device="host")
    >>> gm.stats("host")["current_bytes"] >= 1 << 20
    True
    >>> a.free()

``device`` arguments take what :class:`gpuport.Device` takes (``None``: the
default device, a spec such as ``"cuda:0"``, a CUDA ordinal, a Device).
``stream`` takes ``None``/``0`` (the default stream), a
:class:`gpuport.Stream`, an int ``CUstream`` or an object with
``__cuda_stream__``, ``cuda_stream`` (PyTorch) or ``ptr`` (CuPy).
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _core
from ._core import Allocation, DeferCleanup, PinnedAllocation

__all__ = [
    "Allocation",
    "DeferCleanup",
    "PinnedAllocation",
    "alloc",
    "alloc_pinned",
    "csv_log",
    "defer_cleanup",
    "disable_logging",
    "dump_snapshot",
    "enable_logging",
    "free",
    "log_path",
    "memory_info",
    "on_out_of_memory",
    "record_memory_history",
    "reset",
    "snapshot",
    "stats",
    "torch_allocator_library",
]


# The extension's function itself, with no Python frame on the hot path
# (its docstring is the one below): ``alloc(size, stream=None, device=None)``.
alloc: Callable[..., Allocation] = _core.mem_alloc


def free(allocation: Allocation) -> None:
    """Returns an allocation's memory now (the same as ``allocation.free()``).

        >>> import gpuport.memory as gm
        >>> a = gm.alloc(1024, device="host")
        >>> gm.free(a)
        >>> a.freed
        True
    """
    allocation.free()


def alloc_pinned(
    size: int, mapped: bool = False, portable: bool = False, write_combined: bool = False, device: Any = None
) -> PinnedAllocation:
    """Allocates pinned host memory (``mapped``: with a device address, ``.device_ptr``).

        >>> import gpuport.memory as gm
        >>> p = gm.alloc_pinned(4096, mapped=True, device="host")
        >>> p.size, p.device_ptr == p.ptr          # the host's "device" address is the host one
        (4096, True)
        >>> p.free()
    """
    return _core.mem_alloc_pinned(size, mapped, portable, write_combined, device)


def stats(device: Any = None) -> Dict[str, int]:
    """Statistics of the device's current resource.

    Keys: ``current_bytes``, ``peak_bytes``, ``total_bytes``,
    ``current_count``, ``peak_count``, ``total_count`` (bytes as
    requested), and for the caching pool ``pool_reserved`` (bytes held
    from the driver: of expandable segments, the bytes mapped, not the
    addresses reserved), ``pool_in_use``, ``pool_free``,
    ``pool_allocations``, ``pool_frees``, ``pool_oom_failures``,
    ``graph_pools`` (captures that allocated: each gets memory of its own),
    ``graph_pools_released`` (given back once their graphs were gone),
    ``pool_segments`` (an expandable segment counts once, however often
    it grew), ``pool_expandable``: whether the pool grows expandable
    segments (``GPUPORT_POOL=expandable``, read once at start): 0 no, 1
    over the driver's virtual memory, 2 emulated (the host backend), -1
    asked for but the device cannot (plain segments), and
    ``pool_address_space``: bytes of addresses the expandable segments'
    ranges reserve (no memory; 0 without them).

        >>> import gpuport.memory as gm
        >>> before = gm.stats("host")
        >>> a = gm.alloc(1 << 20, device="host")
        >>> after = gm.stats("host")
        >>> after["total_bytes"] - before["total_bytes"], after["total_count"] - before["total_count"]
        (1048576, 1)
        >>> after["current_bytes"] >= a.size
        True
        >>> a.free()
    """
    return dict(_core.mem_stats(device))


def enable_logging(path: "str | os.PathLike[str]", device: Any = None, memory_info: bool = False) -> None:
    """Logs every allocation and free on the device as CSV to ``path`` (truncated).

    Columns: ``timestamp_ns,elapsed_ns,thread,event,device,address,size,stream,free,total``
    (``event`` is ``allocate``, ``free`` or ``allocate_failure``; ``free`` and
    ``total`` are filled only with ``memory_info=True``, one driver query per line).

        >>> import csv, io, os, tempfile, gpuport.memory as gm
        >>> tmp = tempfile.TemporaryDirectory()
        >>> gm.enable_logging(os.path.join(tmp.name, "host.csv"), device="host")
        >>> a = gm.alloc(64, device="host")
        >>> a.free()
        >>> for row in csv.DictReader(io.StringIO(gm.csv_log("host"))):
        ...     if row["address"] == hex(a.ptr):
        ...         print(row["event"], row["device"], row["size"])
        allocate host 64
        free host 64
        >>> gm.disable_logging("host"); tmp.cleanup()
    """
    _core.mem_enable_logging(os.fspath(path), device, memory_info)


def disable_logging(device: Any = None) -> None:
    """Stops the log (flushing it).

        >>> import os, tempfile, gpuport.memory as gm
        >>> tmp = tempfile.TemporaryDirectory()
        >>> gm.enable_logging(os.path.join(tmp.name, "host.csv"), device="host")
        >>> gm.disable_logging("host")
        >>> print(gm.log_path("host"))
        None
        >>> tmp.cleanup()
    """
    _core.mem_disable_logging(device)


def log_path(device: Any = None) -> Optional[str]:
    """Flushes the log and returns its path (None when logging is off).

        >>> import os, tempfile, gpuport.memory as gm
        >>> tmp = tempfile.TemporaryDirectory()
        >>> path = os.path.join(tmp.name, "host.csv")
        >>> gm.enable_logging(path, device="host")
        >>> gm.log_path("host") == path
        True
        >>> gm.disable_logging("host"); tmp.cleanup()
    """
    p = _core.mem_log_path(device)
    return None if p is None else os.fspath(p)


def csv_log(device: Any = None) -> str:
    """The CSV log so far (header included), flushed first; ``""`` when logging is off.

        >>> import os, tempfile, gpuport.memory as gm
        >>> tmp = tempfile.TemporaryDirectory()
        >>> gm.enable_logging(os.path.join(tmp.name, "host.csv"), device="host")
        >>> print(gm.csv_log("host"), end="")
        timestamp_ns,elapsed_ns,thread,event,device,address,size,stream,free,total
        >>> gm.disable_logging("host"); tmp.cleanup()
        >>> gm.csv_log("host")
        ''
    """
    p = log_path(device)
    if p is None:
        return ""
    with open(p, encoding="utf-8") as f:
        return f.read()


def memory_info(device: Any = None) -> Tuple[int, int]:
    """``(free, total)`` device memory in bytes.

        >>> import gpuport.memory as gm
        >>> free, total = gm.memory_info("host")  # the host's RAM
        >>> 0 <= free <= total
        True
    """
    return _core.mem_info(device)


def reset(device: Any = None) -> None:
    """Returns the pool's cached memory to the driver; live allocations stay valid.

        >>> import gpuport.memory as gm
        >>> live = gm.alloc(1 << 20, device="host")
        >>> gm.alloc(1 << 20, device="host").free()          # cached by the pool
        >>> gm.reset("host")
        >>> gm.stats("host")["pool_in_use"] >= live.size
        True
        >>> live.free()
    """
    _core.mem_reset(device)


def defer_cleanup(device: Any = None) -> DeferCleanup:
    """A guard (also a context manager) holding every free on the device back until released.

        >>> import gpuport.memory as gm
        >>> with gm.defer_cleanup("host") as guard:
        ...     gm.alloc(64, device="host").free()
        ...     guard.held_back
        1
    """
    return _core.mem_defer_cleanup(device)


def on_out_of_memory(callback: Callable[..., Any], with_snapshot: bool = False) -> Any:
    """Calls ``callback(device, size, in_capture, report)`` for every allocation
    a caching pool could not serve, after it gave back its cached memory and
    retried, just before the error is raised (PyTorch's out-of-memory
    observers play the same part). ``report`` has the pool's ``reserved``,
    ``in_use``, ``requested``, ``free``, ``pending``, ``segments`` and
    ``largest_free_block``. With ``with_snapshot``, the call is
    ``callback(device, size, in_capture, report, snapshot)``: ``snapshot``
    is a :func:`snapshot` dict of the failing pool's segments and the
    recorded history (see :func:`record_memory_history`), ready for
    ``pickle.dump``. An exception in ``callback`` goes to
    ``sys.unraisablehook``; the allocation fails as it would have. Returns an
    object whose ``remove()`` unregisters the callback.

        >>> import gpuport.memory as gm
        >>> seen = []
        >>> observer = gm.on_out_of_memory(lambda dev, size, in_capture, report: seen.append((dev, size)))
        >>> try:
        ...     gm.alloc(1 << 62, device="host")
        ... except MemoryError:
        ...     pass
        >>> seen[-1]
        ('host', 4611686018427387904)
        >>> observer.remove()
        True
    """
    return _core.mem_on_out_of_memory(callback, with_snapshot)


def _python_frames() -> List[Tuple[str, int, str]]:
    """The caller's Python stack, innermost first, without gpuport's own frames.

    Empty when there is no Python caller: the pool asks from allocations
    that C code makes, such as PyTorch's autograd threads through the torch
    hook, where ``sys._getframe(1)`` would raise.
    """
    frames = []
    f: Any = sys._getframe().f_back
    here = __file__
    while f is not None:
        code = f.f_code
        if code.co_filename != here:
            frames.append((code.co_filename, f.f_lineno or 0, code.co_name))
        f = f.f_back
    return frames


def record_memory_history(
    enabled: Optional[str] = "all",
    max_entries: int = 100_000,
    stacks: Optional[str] = "python",
    clear_history: bool = False,
) -> None:
    """Starts (``enabled="all"``) or stops (``enabled=None``) recording every
    allocation, free, segment and out-of-memory failure of gpuport's caching
    pools, like ``torch.cuda.memory._record_memory_history``. At most
    ``max_entries`` are kept (the oldest go first). ``stacks``: ``"python"``
    records the Python stack of each allocation and free, ``"all"`` adds
    the Rust backtrace (slower), ``None`` records none. While recording is
    off the pools pay nothing for it.

        >>> import gpuport.memory as gm
        >>> gm.record_memory_history(max_entries=100, clear_history=True)
        >>> gm.alloc(1024, device="host").free()
        >>> gm.record_memory_history(None)
        >>> [e["action"] for e in gm.snapshot("host")["device_traces"][0]][-3:]
        ['alloc', 'free_requested', 'free_completed']
    """
    if clear_history:
        _core.mem_clear_history()
    if enabled is None:
        _core.mem_record_history(False)
        return
    if enabled not in ("all", "state"):
        raise ValueError(f"enabled must be 'all', 'state' or None, not {enabled!r}")
    if stacks not in ("python", "all", None):
        raise ValueError(f"stacks must be 'python', 'all' or None, not {stacks!r}")
    source = None if stacks is None else _python_frames
    _core.mem_record_history(True, max_entries, stacks == "all", source)


def snapshot(backend: Optional[str] = None) -> Dict[str, Any]:
    """The segments of every device's caching pool, block by block, and the
    recorded history, as ``torch.cuda.memory._snapshot()`` lays them out:
    ``{"segments": [...], "device_traces": [[...], ...]}`` (one trace list
    per device ordinal). ``backend`` (``"cuda"``, ``"rocm"``, ``"host"``)
    keeps only that backend's devices.

        >>> import gpuport.memory as gm
        >>> a = gm.alloc(1 << 20, device="host")
        >>> snap = gm.snapshot("host")
        >>> any(b["address"] == a.ptr and b["state"] == "active_allocated"
        ...     for s in snap["segments"] for b in s["blocks"])
        True
        >>> a.free()
    """
    snap: Dict[str, Any] = pickle.loads(_core.mem_snapshot_pickle(backend))
    return snap


def dump_snapshot(path: "str | os.PathLike[str]", backend: Optional[str] = None) -> None:
    """Writes :func:`snapshot` to ``path`` as the pickle PyTorch's memory
    viewer (pytorch.org/memory_viz, ``torch.cuda._memory_viz``) reads. A path
    that cannot be written raises ``OSError``; the history is kept.

        >>> import os, pickle, tempfile
        >>> import gpuport.memory as gm
        >>> path = os.path.join(tempfile.mkdtemp(), "snapshot.pickle")
        >>> gm.dump_snapshot(path, backend="host")
        >>> with open(path, "rb") as f:
        ...     sorted(pickle.load(f))
        ['device_traces', 'segments']
    """
    data = _core.mem_snapshot_pickle(backend)
    with open(os.fspath(path), "wb") as f:
        f.write(data)


def torch_allocator_library() -> Tuple[str, str, str]:
    """``(path, alloc_fn, free_fn)`` for ``torch.cuda.memory.CUDAPluggableAllocator``.

    The C functions are exported by the extension module itself:
    ``void* gpuport_torch_malloc(ssize_t size, int device, cudaStream_t stream)``
    and ``void gpuport_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream)``.
    ``device`` -1 selects the host backend (for tests without a GPU).

        >>> import gpuport.memory as gm
        >>> path, alloc_fn, free_fn = gm.torch_allocator_library()
        >>> alloc_fn, free_fn
        ('gpuport_torch_malloc', 'gpuport_torch_free')
        >>> import gpuport._core
        >>> path == gpuport._core.__file__
        True
    """
    alloc_fn, free_fn = _core._torch_allocator_symbols()
    path = _core.__file__
    assert path is not None
    return path, alloc_fn, free_fn
