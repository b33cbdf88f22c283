"""Shared fixtures: the devices to run on (host always, CUDA when present)."""

import ctypes
import gc

import numpy as np
import pytest

import gpuport

CUDA = gpuport.cuda_devices()

# Dtypes NumPy can hold; bfloat16 and complex32 are tested through raw bytes.
NUMPY_DTYPES = [d for d in gpuport.DTYPES if d not in ("bfloat16", "complex32")]
SHAPES = [(5,), (3, 4), (2, 3, 4), (2, 1, 3, 2)]

_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def capsule_name_is(capsule, name: str) -> bool:
    return _api.PyCapsule_IsValid(capsule, name.encode()) == 1


def devices_under_test():
    out = [pytest.param("host", id="host")]
    for d in CUDA:
        out.append(pytest.param(d.spec, id=d.spec))
    return out


@pytest.fixture(params=devices_under_test())
def device(request):
    return gpuport.Device(request.param)


@pytest.fixture
def cuda_device():
    if not CUDA:
        reasons = "; ".join(f"{b}: {note}" for b, ok, note in gpuport.backend_status() if b == "cuda")
        pytest.skip(f"no CUDA device ({reasons})")
    return CUDA[0]


def init_array(shape, dtype):
    """Distinct, exactly representable values (for docs/design.md#the-test-kernel)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt == np.bool_:
        return (np.arange(n) % 3 == 0).reshape(shape)
    vals = np.arange(n) % 50
    if dt.kind == "c":
        return (vals + 1j * (vals % 7)).astype(dt).reshape(shape)
    return vals.astype(dt).reshape(shape)


def ref_add_index(arr):
    """What add_index computes, in NumPy: each element plus the sum of its indices."""
    idx = np.indices(arr.shape).sum(axis=0)
    if arr.dtype.kind in "iu":
        return (arr.astype(np.int64) + idx).astype(arr.dtype)
    return (arr.astype(np.float64) + idx).astype(arr.dtype)


def collect():
    for _ in range(3):
        gc.collect()


def stats():
    return gpuport._core._dlpack_stats()
