"""Zero-copy exchange between gpuport, NumPy, torch and CuPy, on whatever the
machine has: the first GPU (CUDA, or ROCm), else the host.

    python examples/python/exchange.py            # GPUPORT_DEVICE=host forces the host

On a GPU, torch and CuPy see gpuport's device memory and gpuport sees
theirs, with no copy; on the host, NumPy and torch's CPU tensors do the
same. Libraries that are not installed are skipped with a note.
"""
import numpy as np

import gpuport

dev = gpuport.default_device()
print(f"gpuport on {dev}")

# A gpuport array, filled on the device (add_index: a[i, j] += i + j).
a = gpuport.MemArray((2, 3), "float32", device=dev)
a.add_index()
expected = np.add.outer(np.arange(2), np.arange(3)).astype(np.float32)

try:
    import torch
except ImportError:
    torch = None
    print("torch: not installed, skipped")
if torch is not None:
    t = torch.from_dlpack(a)  # the same memory: a's device copy, or its host copy on the host
    print(f"torch sees {t.device}, same memory: {t.data_ptr() == a.data_ptr}")
    t.mul_(10)  # torch writes on its stream, gpuport reads it back
    if t.is_cuda:
        torch.cuda.synchronize()
    np.testing.assert_array_equal(a.to_numpy(), expected * 10)
    back = gpuport.from_dlpack(t)  # and the other way
    print(f"gpuport sees torch's tensor on {back.device}, same memory: {back.data_ptr == t.data_ptr()}")

if dev.backend == "host":
    n = np.from_dlpack(a)  # NumPy reads the host array in place
    print(f"numpy sees the host array, same memory: {n.ctypes.data == a.data_ptr}")
else:
    try:
        import cupy
    except ImportError:
        cupy = None
        print("cupy: not installed, skipped")
    if cupy is not None and dev.backend == "cuda":
        with cupy.cuda.Device(dev.ordinal):
            c = cupy.from_dlpack(a)
            print(f"cupy sees device {c.device.id}, same memory: {c.data.ptr == a.data_ptr}")
            c += 1
            b = gpuport.from_dlpack(c)
            print(f"gpuport sees cupy's array on {b.device}, same memory: {b.data_ptr == c.data.ptr}")
print("ok")
