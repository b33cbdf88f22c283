"""Shared fixtures: the devices to run on.

``device`` runs a test on "host", "cuda:0" and "rocm:0" (as the Rust suite's
``backend_tests!``), ``gpu_device`` on "cuda:0" and "rocm:0". A backend that
is not available here skips with the reason ``gpuport.backend_status()``
gives (e.g. "could not load libcuda ..."). With ``GPUPORT_EXPECT_ROCM=device``
(the GPU machine, where ``GPUPORT_HIP_LIBRARY`` points at the HIP-on-CUDA
shim) an unavailable rocm:0 is a failure instead of a skip.
``cuda_device`` is for checks that need CUDA-only peers (torch, CuPy,
Numba, cuda.core, the CUDA Array Interface).
"""

import ctypes
import gc
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import numpy as np
import pytest

import gpuport
import gpuport.memory

# The DLPack 1.1 fp8/fp6/fp4 dtypes: NumPy has none of them (ml_dtypes
# registers them); tests/test_low_precision.py covers them.
LOW_PRECISION_DTYPES = [d for d in gpuport.DTYPES if d.startswith(("float8_", "float6_", "float4_"))]
# Dtypes NumPy can hold; bfloat16 and complex32 are tested through raw bytes.
NUMPY_DTYPES = [d for d in gpuport.DTYPES if d not in ("bfloat16", "complex32", *LOW_PRECISION_DTYPES)]
SHAPES = [(5,), (3, 4), (2, 3, 4), (2, 1, 3, 2)]


class FakeCAI:
    """An object exposing only the CUDA Array Interface (never dereferenced on the host)."""

    def __init__(self, addr=0x7F0000001000, shape=(4,), typestr="<f4"):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (addr, False),
            "version": 3,
            "strides": None,
        }


class DLPackOnly:
    """A DLPack producer without the buffer protocol (wraps a NumPy array)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, **kw):
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def build_c_library(source: str, out_dir, what: str) -> "ctypes.PyDLL":
    """``tests/<source>`` built as a shared library with the system C compiler
    (``$CC``, Python's ``CC``, else ``cc``) into ``out_dir`` and loaded with
    ``ctypes.PyDLL`` (every call with the GIL held; a Python error a call
    sets is raised). Skips, naming ``what``, without a compiler or when the
    build fails."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None and shutil.which("cc") is None:
        pytest.skip(f"no C compiler: neither {cc!r} nor 'cc' is on PATH, so {what} cannot be built")
    if shutil.which(cc) is None:
        cc = "cc"
    src = os.path.join(os.path.dirname(__file__), source)
    out = os.path.join(str(out_dir), os.path.splitext(source)[0] + ".so")
    r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out, src], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"{cc} could not build {what}: {r.stderr.strip()[:500]}")
    return ctypes.PyDLL(out)


_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def capsule_name_is(capsule, name: str) -> bool:
    return _api.PyCapsule_IsValid(capsule, name.encode()) == 1


BACKEND_SPECS = ["host", "cuda:0", "rocm:0"]
GPU_SPECS = ["cuda:0", "rocm:0"]


def backend_reason(backend: str) -> str:
    """Why ``backend`` is unavailable, as ``gpuport.backend_status()`` says."""
    notes = [note for name, ok, note in gpuport.backend_status() if name == backend]
    return "; ".join(notes) if notes else "not reported by gpuport.backend_status()"


def open_or_skip(spec: str) -> "gpuport.Device":
    """``gpuport.Device(spec)``, or a skip saying why its backend is unavailable."""
    backend = spec.split(":", 1)[0]
    if not gpuport.is_available(backend):
        msg = f"{spec}: {backend} is unavailable here: {backend_reason(backend)}"
        if backend == "rocm" and os.environ.get("GPUPORT_EXPECT_ROCM") == "device":
            pytest.fail(f"GPUPORT_EXPECT_ROCM=device, but {msg}")
        pytest.skip(msg)
    return gpuport.Device(spec)


@pytest.fixture(params=[pytest.param(s, id=s) for s in BACKEND_SPECS])
def device(request):
    """Each backend in turn: host, cuda:0, rocm:0 (skipped with the reason where unavailable)."""
    return open_or_skip(request.param)


@pytest.fixture(params=[pytest.param(s, id=s) for s in GPU_SPECS])
def gpu_device(request):
    """Each GPU backend in turn: cuda:0, rocm:0 (skipped with the reason where unavailable)."""
    return open_or_skip(request.param)


@pytest.fixture
def cuda_device():
    """cuda:0, for checks that need a CUDA-only peer (torch, CuPy, Numba, the CUDA Array Interface)."""
    return open_or_skip("cuda:0")


def dl_device_type(dev) -> int:
    """The DLPack device type of ``dev``'s device memory."""
    return {
        "host": gpuport.DLDeviceType.kDLCPU,
        "cuda": gpuport.DLDeviceType.kDLCUDA,
        "rocm": gpuport.DLDeviceType.kDLROCM,
    }[dev.backend]


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


def live_allocations(dev="host"):
    """The count and bytes of ``dev``'s live allocations (``gpuport.memory.stats``)."""
    s = gpuport.memory.stats(dev)
    return s["current_count"], s["current_bytes"]


def need_peer(peer):
    """Skips unless cuda:0 opens and the peer library ``peer`` is installed."""
    open_or_skip("cuda:0")  # the peers are CUDA libraries
    if importlib.util.find_spec(peer) is None:
        pytest.skip(f"{peer} is not installed")


def run_script(code, env=None, timeout=300):
    """Runs ``code`` in a fresh interpreter with ``env`` added; fails the test
    unless it exits 0. Returns its standard output."""
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e, timeout=timeout
    )
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    assert r.returncode == 0, f"subprocess failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout
