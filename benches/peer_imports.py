"""The peer libraries a Python benchmark compares gpuport against, imported
the same way by each (benches/creation.py, benches/peers.py).

Each loader returns ``(module, None)``, or ``(None, why)`` where ``why`` is
the exception or a sentence saying why the peer cannot run here.
"""

from __future__ import annotations

from typing import Any


def load_torch(on_gpu: bool) -> tuple[Any, object]:
    """torch, which must see a CUDA device when gpuport's device is a GPU."""
    try:
        import torch

        if on_gpu and not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        return torch, None
    except Exception as e:  # any failure to load means: skip this peer
        return None, e


def load_cupy(on_gpu: bool, ordinal: int) -> tuple[Any, object]:
    """CuPy on CUDA device ``ordinal``; only beside a CUDA gpuport device."""
    if not on_gpu:
        return None, "the gpuport device is not a CUDA device"
    try:
        import cupy

        cupy.cuda.Device(ordinal).use()
        return cupy, None
    except Exception as e:  # any failure to load means: skip this peer
        return None, e
