"""gpuport's memory pool from Python, and as the allocator of other libraries.

    python examples/python/memory.py            # GPUPORT_DEVICE=host forces the host

`gpuport.memory.alloc` takes memory from the device's caching pool (freed
blocks are reused without a driver call); `gpuport.memory.stats` counts
everything the pool serves. On a CUDA device the hooks route torch's,
CuPy's and Numba's allocations through the same pool, so one pool, one set
of statistics and one out-of-memory policy serve them all. Libraries that
are not installed are skipped with a note.
"""
import gpuport
import gpuport.memory as gm

dev = gpuport.default_device()
print(f"gpuport on {dev}")
before = gm.stats(dev)["current_bytes"]
a = gm.alloc(1 << 20, device=dev)
print(f"allocated 1 MiB at {a.ptr:#x}; the pool now serves {gm.stats(dev)['current_bytes'] - before} more bytes")
address = a.ptr
a.free()
b = gm.alloc(1 << 20, device=dev)  # the freed block again, from the pool
print(f"the same block again: {b.ptr == address}")
b.free()

if dev.backend != "cuda":
    print(f"torch and CuPy hooks: they serve CUDA devices, not {dev.backend}; skipped")
else:
    try:
        import torch
    except ImportError:
        torch = None
        print("torch: not installed, skipped")
    if torch is not None:
        import gpuport.torch

        gpuport.torch.use_gpuport_for_torch()  # before torch's first CUDA allocation
        t = torch.ones(1 << 18, device="cuda")
        print(f"torch tensor of {t.numel() * 4} bytes from gpuport's pool: {gm.stats(dev)['current_bytes'] >= t.numel() * 4}")
print("memory ok")
