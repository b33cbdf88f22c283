"""gpuport: a portable GPU runtime (CUDA, ROCm, host) for Python.

``MemArray`` holds a host copy and a device copy of an N-dimensional array
(0 to 8 dimensions, every dtype in ``DTYPES``) and exchanges memory with
NumPy, PyTorch, CuPy, JAX and Numba without copies, through DLPack
(``__dlpack__``, ``from_dlpack``) and the CUDA Array Interface.

    >>> import gpuport, numpy as np
    >>> a = gpuport.MemArray((2, 3), "float32")
    >>> a.add_index()                      # runs on the default device
    >>> a.move_memory("host")
    >>> np.from_dlpack(a)
    array([[0., 1., 2.],
           [1., 2., 3.]], dtype=float32)
"""

from enum import IntEnum

from . import _core, memory
from ._core import (
    CUDA_COMPILED,
    DTYPES,
    MAX_RANK,
    DeviceMismatchError,
    DeviceUnavailableError,
    DLPackContext,
    DLPackError,
    DriverError,
    GpuError,
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
)


class DLDeviceType(IntEnum):
    """DLPack device type codes (``DLDeviceType`` in ``dlpack.h``)."""

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
    """DLPack device type constants: ``gpuport.dlpack.kDLCPU`` etc."""

    DLDeviceType = DLDeviceType
    kDLCPU = DLDeviceType.kDLCPU
    kDLCUDA = DLDeviceType.kDLCUDA
    kDLCUDAHost = DLDeviceType.kDLCUDAHost
    kDLROCM = DLDeviceType.kDLROCM
    kDLROCMHost = DLDeviceType.kDLROCMHost
    kDLCUDAManaged = DLDeviceType.kDLCUDAManaged

from . import runtime  # noqa: E402 - the low-level runtime and its pointer adapters (gpuport.runtime)


def cuda_devices() -> "list[Device]":
    """The CUDA devices gpuport can use (empty without CUDA)."""
    return [d for d in devices() if d.backend == "cuda"]


__all__ = [
    "CUDA_COMPILED",
    "DTYPES",
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
    "runtime",
    "memory",
]
__version__ = "0.1.0"
