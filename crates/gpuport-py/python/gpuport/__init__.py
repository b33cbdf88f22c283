"""gpuport: a portable GPU runtime (CUDA, ROCm, host) for Python.

``MemArray`` holds a host copy and a device copy of an N-dimensional array
(0 to 8 dimensions, every dtype in ``DTYPES``) and exchanges memory with
NumPy, PyTorch, CuPy, JAX and Numba without copies, through DLPack
(``__dlpack__``, ``from_dlpack``) and the CUDA Array Interface.

    >>> import gpuport, numpy as np
    >>> a = gpuport.MemArray((2, 3), "float32")
    >>> a.add_index()                      # runs on the default device
    >>> a.to_numpy()                       # a host copy, whatever the device
    array([[0., 1., 2.],
           [1., 2., 3.]], dtype=float32)
"""

import sys
from enum import IntEnum

from . import _core

# Vendor libraries in pip wheels (torch/lib, nvidia/cu13/lib, _rocm_sdk_core/lib)
# are searched under each of these, before the loader path
# (docs/design.md#loading-vendor-libraries); nothing is loaded yet.
_core._set_site_packages([p for p in sys.path if isinstance(p, str) and p])

from . import memory  # noqa: E402
from ._core import (
    CUDA_COMPILED,
    ROCM_COMPILED,
    DTYPES,
    MAX_RANK,
    DeviceMismatchError,
    DeviceUnavailableError,
    DLPackContext,
    DLPackError,
    DriverError,
    GpuError,
    Graph,
    GraphCapture,
    GraphError,
    CollectiveError,
    InvalidArgumentError,
    InvalidDeviceError,
    KernelError,
    LockError,
    MemArray,
    OutOfMemoryError,
    ResidencyError,
    ShapeError,
    UnsupportedDTypeError,
    UnsupportedError,
    Device,
    Event,
    Stream,
    asarray,
    backend_status,
    default_device,
    devices,
    from_cuda_array_interface,
    from_dlpack,
    graph_capture,
)


class DLDeviceType(IntEnum):
    """DLPack device type codes (``DLDeviceType`` in ``dlpack.h``).

        >>> import gpuport
        >>> gpuport.DLDeviceType(gpuport.Device("host").dlpack_device[0])
        <DLDeviceType.kDLCPU: 1>
        >>> int(gpuport.DLDeviceType.kDLCUDA)
        2
    """

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17


class dlpack:  # noqa: N801 - a namespace: gpuport.dlpack.kDLCPU (docs/design.md#the-python-wrapper)
    """DLPack device type constants: ``gpuport.dlpack.kDLCPU`` etc.

        >>> import gpuport
        >>> a = gpuport.MemArray(2, device="host")
        >>> a.move_memory(gpuport.dlpack.kDLCPU)     # the host copy
        >>> a.__dlpack_device__()[0] == gpuport.dlpack.kDLCPU
        True
    """

    DLDeviceType = DLDeviceType
    kDLCPU = DLDeviceType.kDLCPU
    kDLCUDA = DLDeviceType.kDLCUDA
    kDLCUDAHost = DLDeviceType.kDLCUDAHost
    kDLROCM = DLDeviceType.kDLROCM
    kDLROCMHost = DLDeviceType.kDLROCMHost
    kDLCUDAManaged = DLDeviceType.kDLCUDAManaged

from . import runtime  # noqa: E402 - the low-level runtime and its pointer adapters (gpuport.runtime)

# The DLPack 1.1 low-precision float dtypes (type codes 7 to 17), by the names
# ml_dtypes and PyTorch give them. NumPy has no dtype for them, so they are
# names here: ``MemArray(shape, gpuport.float8_e4m3fn)``. With ml_dtypes
# installed, ``to_numpy()``, ``read_numpy_array`` and ``fill`` with numbers
# use its dtypes, and ``from_dlpack``/``asarray`` take its arrays; PyTorch's
# ``torch.float8_e4m3fn`` tensors travel through DLPack. gpuport holds the
# 6- and 4-bit types padded, one element per byte.
float8_e3m4 = "float8_e3m4"
float8_e4m3 = "float8_e4m3"
float8_e4m3b11fnuz = "float8_e4m3b11fnuz"
float8_e4m3fn = "float8_e4m3fn"
float8_e4m3fnuz = "float8_e4m3fnuz"
float8_e5m2 = "float8_e5m2"
float8_e5m2fnuz = "float8_e5m2fnuz"
float8_e8m0fnu = "float8_e8m0fnu"
float6_e2m3fn = "float6_e2m3fn"
float6_e3m2fn = "float6_e3m2fn"
float4_e2m1fn = "float4_e2m1fn"
LOW_PRECISION_DTYPES = (
    float8_e3m4,
    float8_e4m3,
    float8_e4m3b11fnuz,
    float8_e4m3fn,
    float8_e4m3fnuz,
    float8_e5m2,
    float8_e5m2fnuz,
    float8_e8m0fnu,
    float6_e2m3fn,
    float6_e3m2fn,
    float4_e2m1fn,
)


_BACKENDS = ("host", "cuda", "rocm")


def is_available(backend: str) -> bool:
    """Whether ``backend`` ("host", "cuda" or "rocm") loaded and has a device.

        >>> import gpuport
        >>> gpuport.is_available("host")
        True
    """
    if backend not in _BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(_BACKENDS)}")
    return any(name == backend and ok for name, ok, _ in backend_status())


def show_config(file=None) -> None:
    """Prints each backend: loaded with its devices, or why not (the library
    tried and where, and how to point gpuport at it).

        >>> import gpuport
        >>> gpuport.show_config()  # doctest: +ELLIPSIS
        gpuport ...
        host: 1 device(s)
        ...
    """
    import sys

    out = sys.stdout if file is None else file
    print(f"gpuport {__version__}", file=out)
    by_backend: "dict[str, list[Device]]" = {}
    for d in devices():
        by_backend.setdefault(d.backend, []).append(d)
    for name, ok, note in sorted(backend_status(), key=lambda s: _BACKENDS.index(s[0]) if s[0] in _BACKENDS else 9):
        if ok:
            print(f"{name}: {note}", file=out)
            for d in by_backend.get(name, []):
                print(f"  {d!r}", file=out)
        else:
            hint = {
                "cuda": " (install the NVIDIA driver, or put its libcuda.so.1 on LD_LIBRARY_PATH)",
                "rocm": " (set GPUPORT_HIP_LIBRARY, ROCM_PATH, or GPUPORT_SITE_PACKAGES for a wheel's torch/lib)",
            }.get(name, "")
            print(f"{name}: unavailable: {note}{hint}", file=out)


def cuda_devices() -> "list[Device]":
    """The CUDA devices gpuport can use (empty without CUDA).

        >>> import gpuport
        >>> cuda = gpuport.cuda_devices()
        >>> all(d.backend == "cuda" for d in cuda), bool(cuda) == gpuport.is_available("cuda")
        (True, True)
    """
    return [d for d in devices() if d.backend == "cuda"]


__all__ = [
    "CUDA_COMPILED",
    "ROCM_COMPILED",
    "DTYPES",
    "LOW_PRECISION_DTYPES",
    "MAX_RANK",
    "DLDeviceType",
    "DLPackContext",
    "Device",
    "DeviceMismatchError",
    "DeviceUnavailableError",
    "DLPackError",
    "DriverError",
    "Event",
    "GpuError",
    "Graph",
    "GraphCapture",
    "GraphError",
    "CollectiveError",
    "InvalidArgumentError",
    "InvalidDeviceError",
    "KernelError",
    "LockError",
    "MemArray",
    "OutOfMemoryError",
    "ResidencyError",
    "ShapeError",
    "Stream",
    "UnsupportedDTypeError",
    "UnsupportedError",
    "asarray",
    "backend_status",
    "cuda_devices",
    "default_device",
    "devices",
    "dlpack",
    "from_cuda_array_interface",
    "from_dlpack",
    "graph_capture",
    "is_available",
    "runtime",
    "show_config",
    "memory",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
]
# The crate's version (gpuport::VERSION): one number for the crate, the
# package and both `gpuport` commands (tests/test_version.py checks them).
__version__: str = _core.__version__
