"""gpuport.runtime: the low-level runtime with HIP-Python-style pointer adapters.

Every pointer argument accepts anything ``Pointer`` accepts, in this order:
None (NULL), a ``Pointer`` (or subclass; no ownership transfer), an int
address, a ``ctypes.c_void_p``, an object with ``__cuda_array_interface__``,
a contiguous buffer-protocol object (held until the adapter is destroyed),
or a DLPack producer.

Sizes: ``memcpy``/``memset`` (and their ``_async`` forms) check ``size``
against every operand that states its extent: a buffer, a DLPack tensor, a
CUDA Array Interface object (its shape, strides and typestr: torch and CuPy
arrays, Numba device arrays), a ``MemArray``, a ``DeviceArray`` or an
allocation. Going past it raises ``ValueError``, and so does an operand that
is not one contiguous range (a strided view such as ``t[:, ::2]``; pass
``t.contiguous()`` or ``numpy.ascontiguousarray(x)``).

Raw addresses (ints, ``c_void_p``) are unchecked: not owned and of unknown
size, they are, as in HIP Python, the caller's responsibility: gpuport passes raw *device* addresses to the
driver unchecked, but never dereferences an address on the host unless it
lies in memory gpuport holds (a ``malloc`` allocation, a held buffer or
DLPack tensor). On the host backend, where "device" memory is host memory,
raw addresses outside live allocations are refused.

    >>> from gpuport import runtime as rt
    >>> import ctypes
    >>> a = rt.malloc(16)                          # DeviceArray, shape (16,), "|u1"
    >>> rt.memcpy(a, bytes(range(16)), 16)         # direction inferred: host to device
    >>> out = bytearray(16)
    >>> rt.memcpy(out, a, 16)                      # device to host
    >>> f = rt.module_get_function(rt.module_load(), "gpuport_fill_u32")
    >>> rt.launch_kernel(f, 1, 1, [a, ctypes.c_uint64(4), ctypes.c_uint32(7)])
    >>> rt.device_synchronize()
    >>> rt.free(a)
"""

from ._core import (
    DeviceArray,
    Event,
    Function,
    KernelArgs,
    ListOfBytes,
    ListOfInt,
    ListOfPointer,
    ListOfUnsigned,
    ListOfUnsignedLong,
    Module,
    Pointer,
    Stream,
    device_synchronize,
    free,
    launch_kernel,
    malloc,
    malloc_managed,
    malloc_pinned,
    memcpy,
    memcpy_async,
    memcpy_peer,
    memcpy_peer_async,
    memset,
    memset_async,
    module_get_function,
    module_load,
)

#: hipMemcpyKind-style direction names (``memcpy(..., kind=...)`` also takes the ints 0..4).
MEMCPY_HOST_TO_HOST = "host_to_host"
MEMCPY_HOST_TO_DEVICE = "host_to_device"
MEMCPY_DEVICE_TO_HOST = "device_to_host"
MEMCPY_DEVICE_TO_DEVICE = "device_to_device"
MEMCPY_DEFAULT = "default"

__all__ = [
    "DeviceArray",
    "Event",
    "Function",
    "KernelArgs",
    "ListOfBytes",
    "ListOfInt",
    "ListOfPointer",
    "ListOfUnsigned",
    "ListOfUnsignedLong",
    "MEMCPY_DEFAULT",
    "MEMCPY_DEVICE_TO_DEVICE",
    "MEMCPY_DEVICE_TO_HOST",
    "MEMCPY_HOST_TO_DEVICE",
    "MEMCPY_HOST_TO_HOST",
    "Module",
    "Pointer",
    "Stream",
    "device_synchronize",
    "free",
    "launch_kernel",
    "malloc",
    "malloc_managed",
    "malloc_pinned",
    "memcpy",
    "memcpy_async",
    "memcpy_peer",
    "memcpy_peer_async",
    "memset",
    "memset_async",
    "module_get_function",
    "module_load",
]


# ---- HIP-style functional spellings of the Stream and Event methods ------------------


def stream_create(device=None) -> Stream:
    """A new stream on ``device`` (``gpuport.Stream(device)``).

        >>> from gpuport import runtime as rt
        >>> rt.stream_create("host")
        Stream(host, handle=0x0)
    """
    return Stream(device)


def stream_synchronize(stream: Stream) -> None:
    """Blocks until ``stream``'s work is done.

        >>> from gpuport import runtime as rt
        >>> s = rt.stream_create("host")
        >>> a = rt.malloc(8, device="host")
        >>> rt.memset_async(a, 5, 8, stream=s)
        >>> rt.stream_synchronize(s)
        >>> out = bytearray(8); rt.memcpy(out, a, 8); out[0]
        5
    """
    stream.synchronize()


def event_record(stream: Stream) -> Event:
    """An event recorded at the current end of ``stream``.

        >>> from gpuport import runtime as rt
        >>> e = rt.event_record(rt.stream_create("host"))
        >>> rt.event_synchronize(e); e.query()
        True
    """
    return stream.record_event()


def event_synchronize(event: Event) -> None:
    """Blocks until ``event`` has completed.

        >>> from gpuport import runtime as rt
        >>> s = rt.stream_create("host")
        >>> a = rt.malloc(1 << 20, device="host")
        >>> rt.memset_async(a, 0, 1 << 20, stream=s)
        >>> done = rt.event_record(s)
        >>> rt.event_synchronize(done)
        >>> done.query()
        True
    """
    event.synchronize()


def event_elapsed_time(start: Event, end: Event) -> float:
    """Milliseconds from ``start`` to ``end`` (both completed).

        >>> from gpuport import runtime as rt
        >>> s = rt.stream_create("host")
        >>> start = rt.event_record(s)
        >>> rt.memset_async(rt.malloc(1 << 20, device="host"), 0, 1 << 20, stream=s)
        >>> end = rt.event_record(s)
        >>> rt.event_synchronize(end)
        >>> rt.event_elapsed_time(start, end) >= 0
        True
    """
    return start.elapsed_ms(end)


__all__ += [
    "event_elapsed_time",
    "event_record",
    "event_synchronize",
    "stream_create",
    "stream_synchronize",
]
