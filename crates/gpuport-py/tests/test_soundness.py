"""Issue 15 ("sound by construction"), items 2 to 5: on every backend
(``device``) where the check is about gpuport's own arrays and copies; on
the host backend where it needs host memory behind every export (the
CUDA Array Interface stand-in over NumPy memory, writes through ctypes).

- Errors speak Python: no Rust debug forms or Cargo flags in messages.
- Copies never overrun what gpuport knows the size of, and a byte copy
  refuses non-contiguous memory.
- A writable export (DLPack, array interface, data_ptr, a Pointer) makes
  the exported copy the only current one, so the next read sees the writes.
- Smaller wrong results: lossy casts, negative or huge extents, CUDA Array
  Interface versions, closed get_dlpack contexts, rank-0 add_index.

GPU counterparts (torch, CuPy, Numba) are in test_gpu.py.
"""

import ctypes
import os

import numpy as np
import pytest

import gpuport
from gpuport import runtime as rt

from conftest import DLPackOnly, collect, stats

RUST_FORMS = ("Some(", "None)", "LockId", "exit()", "Location::", "--features", "::", "isize", "usize")


def assert_pythonic(msg):
    for form in RUST_FORMS:
        assert form not in msg, f"{form!r} in {msg!r}"


def host_array(values, dtype="float32", device="host"):
    """A host-resident array on ``device``."""
    a = gpuport.MemArray((len(values),), dtype, device=device)
    a.read_numpy_array(np.asarray(values, dtype=dtype))
    return a


class HostCAI:
    """A CUDA Array Interface over host memory (a NumPy array): its size
    logic can be checked without a GPU; nothing copies through it here."""

    def __init__(self, arr, strides=None, version=3, shape=None, typestr=None):
        self.arr = arr
        self.__cuda_array_interface__ = {
            "shape": arr.shape if shape is None else shape,
            "typestr": arr.dtype.str if typestr is None else typestr,
            "data": (arr.ctypes.data, False),
            "version": version,
            "strides": strides,
        }


# ---- item 2: errors speak Python -----------------------------------------------------


def test_lock_errors_speak_python(device):
    a = gpuport.MemArray((4,), "float32", device=device)
    with a.get_dlpack() as d:
        calls = {
            "add_index": a.add_index,
            "move_memory": lambda: a.move_memory("device"),
            "__dlpack__": a.to_numpy,
            "copy": a.copy,
            "read_numpy_array": lambda: a.read_numpy_array(np.zeros(4, np.float32)),
            "data_ptr": lambda: a.data_ptr,
        }
        for name, call in calls.items():
            with pytest.raises(gpuport.LockError) as e:
                call()
            msg = str(e.value)
            assert_pythonic(msg)
            assert msg.startswith(name + ":"), msg  # the method called, not the core's inner step
            assert "get_dlpack" in msg and str(d.lock_id) in msg
        with pytest.raises(gpuport.LockError) as e:
            with a.get_dlpack():
                pass
        assert_pythonic(str(e.value))
        assert "already locked" in str(e.value)


@pytest.mark.parametrize("backend", ["cuda", "rocm"])
def test_unavailable_device_names_no_cargo_flag(backend):
    """An unavailable backend says so in Python terms; where the backend is
    available (the GPU machine, rocm:0 through the shim), a missing ordinal does."""
    if gpuport.is_available(backend):
        with pytest.raises(gpuport.GpuError) as e:
            gpuport.MemArray(3, device=f"{backend}:99")
        assert_pythonic(str(e.value))
        return
    with pytest.raises(gpuport.DeviceUnavailableError) as e:
        gpuport.MemArray(3, device=f"{backend}:0")
    assert_pythonic(str(e.value))
    assert backend in str(e.value)


def test_missing_hip_library_says_how_to_point_gpuport_at_it(tmp_path):
    """With no HIP runtime where GPUPORT_HIP_LIBRARY points, rocm:0 raises
    DeviceUnavailableError naming the library, what was tried, and the two
    settings that point gpuport at it (a fresh process: backends load once)."""
    import subprocess
    import sys

    missing = tmp_path / "libamdhip64.so"
    code = (
        "import gpuport\n"
        "try:\n"
        "    gpuport.MemArray(3, device='rocm:0')\n"
        "except gpuport.DeviceUnavailableError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    print('NO ERROR')\n"
    )
    env = dict(os.environ, GPUPORT_HIP_LIBRARY=str(missing))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    msg = out.stdout + out.stderr
    assert "libamdhip64" in msg and str(missing) in msg, msg
    assert "GPUPORT_HIP_LIBRARY=" in msg and "ROCM_PATH=" in msg, msg
    assert_pythonic(msg)


def test_too_large_shape_speaks_python(device):
    with pytest.raises((gpuport.ShapeError, gpuport.OutOfMemoryError)) as e:
        gpuport.MemArray((1 << 40, 1 << 22), "float64", device=device)
    assert_pythonic(str(e.value))
    assert "(1099511627776, 4194304)" in str(e.value)


def test_every_core_error_the_binding_forwards_speaks_python():
    samples = gpuport._core._error_samples()
    assert len(samples) >= 10
    for cls, msg in samples:
        assert issubclass(cls, gpuport.GpuError)
        assert_pythonic(msg)


def test_binding_errors_and_reprs_speak_python(device):
    a = gpuport.MemArray((2, 3), "float32", device=device)
    assert "shape=(2, 3)" in repr(a)
    with pytest.raises(gpuport.ShapeError) as e:
        a.read_numpy_array(np.zeros((3, 2), np.float32))
    assert "(3, 2)" in str(e.value) and "(2, 3)" in str(e.value)
    assert_pythonic(str(e.value))
    p = gm_pinned_repr(device.spec)
    assert "Some(" not in p and "None" not in p


def gm_pinned_repr(spec):
    import gpuport.memory as gm

    p = gm.alloc_pinned(64, device=spec)
    try:
        return repr(p)
    finally:
        p.free()


# ---- item 3: copies never overrun what gpuport knows ------------------------------------


def test_pointer_of_a_cai_object_knows_its_size():
    buf = np.zeros(4, np.float32)
    assert rt.Pointer(HostCAI(buf)).nbytes == 16
    assert rt.Pointer(HostCAI(np.zeros((3, 5), np.int16))).nbytes == 30
    assert rt.DeviceArray(HostCAI(buf)).nbytes == 16


def test_memcpy_and_memset_check_a_cai_destination_and_source():
    buf = np.zeros(4, np.float32)
    big = np.zeros(64, np.uint8)
    with pytest.raises(ValueError, match=r"dst: 64 bytes exceed the 16 bytes"):
        rt.memcpy(HostCAI(buf), big, 64)
    with pytest.raises(ValueError, match=r"src: 64 bytes exceed the 16 bytes"):
        rt.memcpy(big, HostCAI(buf), 64)
    with pytest.raises(ValueError, match=r"dst: 64 bytes exceed the 16 bytes"):
        rt.memset(HostCAI(buf), 1, 64)
    with pytest.raises(ValueError, match=r"exceed"):
        rt.memcpy_async(HostCAI(buf), big, 17)
    with pytest.raises(ValueError, match=r"exceed"):
        rt.memset_async(HostCAI(buf), 0, 17)
    d = rt.DeviceArray(HostCAI(buf)).configure(shape=(64,), typestr="|u1", _force=True)
    with pytest.raises(ValueError, match=r"dst: 64 bytes exceed the 16 bytes"):
        rt.memcpy(d, big, 64)
    with pytest.raises(ValueError, match=r"exceed the 4 bytes"):
        rt.memcpy(rt.DeviceArray(HostCAI(buf))[3:], big, 8)
    assert not buf.any()


def test_non_contiguous_cai_is_refused_for_a_byte_copy():
    base = np.zeros((4, 4), np.float32)
    view = HostCAI(base, strides=(16, 8), shape=(4, 2))  # every other column
    with pytest.raises(ValueError, match="not contiguous") as e:
        rt.memcpy(view, np.ones(8, np.float32), 32)
    assert "contiguous" in str(e.value) and "accept" in str(e.value)
    with pytest.raises(ValueError, match="not contiguous"):
        rt.memset(view, 1, 32)
    with pytest.raises(ValueError, match="not contiguous"):
        rt.memcpy(np.zeros(8, np.float32), view, 32)
    with pytest.raises(ValueError, match="not contiguous"):
        rt.DeviceArray(view)
    assert rt.Pointer(view).nbytes is None  # an address is still an address (kernel arguments)
    assert not base.any()
    # Compact strides, C or Fortran order, are contiguous.
    c = np.zeros((2, 3), np.float32)
    assert rt.Pointer(HostCAI(c, strides=(12, 4))).nbytes == 24
    assert rt.Pointer(HostCAI(c, strides=(4, 8), shape=(2, 3))).nbytes == 24


def test_bad_cai_descriptions_are_value_errors():
    buf = np.zeros(4, np.float32)
    for kw in [dict(version=99), dict(version=-1)]:
        with pytest.raises(ValueError, match="version"):
            rt.memcpy(HostCAI(buf, **kw), bytes(4), 4)
    with pytest.raises(ValueError, match="strides"):
        rt.Pointer(HostCAI(buf, strides=(4, 4)))
    with pytest.raises(ValueError, match="too large|exceed"):
        rt.Pointer(HostCAI(buf, shape=(1 << 40, 1 << 40)))
    with pytest.raises(ValueError, match="typestr"):
        rt.Pointer(HostCAI(buf, typestr="float"))


def test_non_contiguous_numpy_views_are_refused_for_a_byte_copy():
    base = np.zeros((4, 4), np.float32)
    for view in [base[:, ::2], base[::2], base.T[1:3]]:
        with pytest.raises(ValueError, match="not contiguous") as e:
            rt.memcpy(view, np.ones(view.size, np.float32), view.nbytes)
        assert "accept" in str(e.value)
        with pytest.raises(ValueError, match="not contiguous"):
            rt.memcpy(np.zeros(view.size, np.float32), view, view.nbytes)
        with pytest.raises(ValueError, match="not contiguous"):
            rt.memset(view, 0, view.nbytes)
        with pytest.raises(ValueError, match="not contiguous"):
            rt.memcpy(DLPackOnly(view), bytes(view.nbytes), view.nbytes)
    assert not base.any()
    with pytest.raises(BufferError):  # a Pointer still refuses them outright, as before
        rt.Pointer(base[:, ::2])


def test_buffers_and_memarrays_are_checked(device):
    m = gpuport.MemArray((4,), "float32", device=device)
    with pytest.raises(ValueError, match="exceed the 16 bytes"):
        rt.memcpy(m, bytes(64), 64)
    with pytest.raises(ValueError, match="exceed the 16 bytes"):
        rt.memcpy(bytearray(64), m, 64)
    with pytest.raises(ValueError, match="exceed the 16 bytes"):
        rt.memset(m, 0, 64)
    with pytest.raises(ValueError, match="exceed the 16 bytes"):
        rt.memcpy(np.zeros(4, np.float32), bytes(64), 64)
    rt.memcpy(m, np.arange(4, dtype=np.float32), 16)
    np.testing.assert_array_equal(m.to_numpy(), np.arange(4))


def test_raw_addresses_stay_unchecked_as_in_hip_python():
    assert rt.Pointer(0x1000).nbytes is None
    assert rt.Pointer(ctypes.c_void_p(0x1000)).nbytes is None
    assert "unchecked" in rt.memcpy.__doc__ and "unchecked" in rt.Pointer.__doc__


# ---- item 4: writable exports make the next read see the writes -------------------------


def _both(values, device="host"):
    """An array whose host and device copies are both current."""
    a = host_array(values, device=device)
    a.move_memory("device")
    assert a.residency == "both"
    return a


def _write_dlpack(a):
    np.from_dlpack(a)[:] = 7


def _write_array_interface(a):
    ai = a.__array_interface__
    (ctypes.c_float * 4).from_address(ai["data"][0])[:] = [7.0] * 4


def _write_data_ptr(a):
    (ctypes.c_float * 4).from_address(a.data_ptr)[:] = [7.0] * 4


def _write_pointer(a):
    rt.memcpy(a, np.full(4, 7, np.float32), 16)


def _write_context(a):
    with a.get_dlpack("host") as d:
        np.from_dlpack(d)[:] = 7


def _write_numpy_asarray(a):
    np.asarray(a)[:] = 7


@pytest.mark.parametrize(
    "write",
    [_write_dlpack, _write_array_interface, _write_data_ptr, _write_pointer, _write_context, _write_numpy_asarray],
    ids=["dlpack", "array_interface", "data_ptr", "pointer", "get_dlpack", "np.asarray"],
)
def test_a_write_through_an_export_is_seen_by_the_next_read(write):
    a = _both([1, 2, 3, 4])
    write(a)
    assert a.residency != "both"  # the other copy is stale now
    a.add_index()  # runs on the device copy: it must hold the written values
    np.testing.assert_array_equal(a.to_numpy(), 7 + np.arange(4))
    b = _both([1, 2, 3, 4])
    write(b)
    b.move_memory("device")
    b.move_memory("host")
    np.testing.assert_array_equal(b.to_numpy(), [7, 7, 7, 7])


def test_a_write_through_a_pointer_or_context_is_seen_on_every_backend(device):
    """The writes that reach either copy without the host touching device
    memory: a byte copy into the array (its export as a Pointer) and a
    get_dlpack("host") block. (The other writers in the test above write
    through the host address of the exported copy, which is device memory on
    a GPU backend.)"""
    for write in (_write_pointer, _write_context):
        a = _both([1, 2, 3, 4], device)
        write(a)
        assert a.residency != "both"
        a.add_index()
        np.testing.assert_array_equal(a.to_numpy(), 7 + np.arange(4))
        b = _both([1, 2, 3, 4], device)
        write(b)
        b.move_memory("device")
        b.move_memory("host")
        np.testing.assert_array_equal(b.to_numpy(), [7, 7, 7, 7])


def test_device_copy_export_then_host_read():
    a = host_array([1, 2, 3, 4])
    a.add_index()  # device copy only
    (ctypes.c_float * 4).from_address(a.data_ptr)[:] = [9.0] * 4  # the device copy's address
    a.move_memory("host")
    np.testing.assert_array_equal(a.to_numpy(), [9, 9, 9, 9])
    b = _both([1, 2, 3, 4])
    with b.get_dlpack("device") as d:
        np.from_dlpack(d)[:] = 5
    assert b.residency == "device"
    b.move_memory("host")
    np.testing.assert_array_equal(b.to_numpy(), [5, 5, 5, 5])


def test_read_only_exports_keep_both_copies(device):
    a = _both([1, 2, 3, 4], device)
    with a.get_dlpack("host", readonly=True) as d:
        np.from_dlpack(d)
    assert a.residency == "both"
    a.tobytes()
    assert a.residency == "both"


# ---- item 5: smaller wrong results ------------------------------------------------------


def test_read_numpy_array_refuses_lossy_casts_by_default():
    a = gpuport.MemArray((3,), "int32", device="host")
    with pytest.raises(TypeError, match="same_kind") as e:
        a.read_numpy_array(np.array([np.nan, 1.5, 2.0]))
    assert "casting='unsafe'" in str(e.value)
    c = gpuport.MemArray((2,), "float64", device="host")
    with pytest.raises(TypeError, match="complex128"):
        c.read_numpy_array(np.array([1 + 2j, 3 + 4j]))
    c.read_numpy_array(np.array([1 + 2j, 3 + 4j]), casting="unsafe")  # asked for: the imaginary part goes
    np.testing.assert_array_equal(c.to_numpy(), [1, 3])
    a.read_numpy_array(np.array([1.0, 2.0, 3.0]), casting="unsafe")
    np.testing.assert_array_equal(a.to_numpy(), [1, 2, 3])
    a.read_numpy_array(np.array([1, 2, 3], np.int16))  # safe
    f = gpuport.MemArray((2,), "float32", device="host")
    f.read_numpy_array(np.array([0.5, 1.5]))  # float64 -> float32: same kind
    with pytest.raises(TypeError, match="'safe'"):
        f.read_numpy_array(np.array([0.5, 1.5]), casting="safe")
    with pytest.raises(TypeError, match="'no'"):
        f.read_numpy_array(np.array([0.5, 1.5]), casting="no")
    f.read_numpy_array(np.array([0.5, 1.5], ">f4"), casting="equiv")  # byte order only
    np.testing.assert_array_equal(f.to_numpy(), [0.5, 1.5])
    with pytest.raises(TypeError, match="'equiv'"):
        f.read_numpy_array(np.array([0.5, 1.5], ">f4"), casting="no")
    with pytest.raises(ValueError, match="casting must be one of"):
        f.read_numpy_array(np.array([0.5, 1.5]), casting="lossy")


def test_read_numpy_array_from_its_own_memory(device):
    a = host_array([1, 2, 3, 4], device=device)
    a.read_numpy_array(a)
    a.read_numpy_array(a.to_numpy())
    np.testing.assert_array_equal(a.to_numpy(), [1, 2, 3, 4])


def test_negative_extents_say_so():
    for shape in [-1, (3, -1), [-2]]:
        with pytest.raises(gpuport.ShapeError, match="non-negative") as e:
            gpuport.MemArray(shape)
        assert isinstance(e.value, ValueError)
        assert "must be an int" not in str(e.value)


def test_extents_beyond_int64_are_refused(device):
    for shape in [(0, 2**63), (2**64,), (2**63,), (0, 2**40, 2**40, 2**40)]:
        with pytest.raises(gpuport.ShapeError, match="9223372036854775807") as e:
            gpuport.MemArray(shape, "uint8", device=device)
        assert_pythonic(str(e.value))
    with pytest.raises(TypeError, match="int"):
        gpuport.MemArray((1.5, 2))


def test_cuda_array_interface_versions_0_to_3_only():
    buf = np.zeros(4, np.float32)
    for v in [99, 4, -1]:
        with pytest.raises(ValueError, match=r"version .*0 to 3"):
            gpuport.from_cuda_array_interface(HostCAI(buf, version=v))
    for v in [0, 1, 2, 3]:
        try:
            gpuport.from_cuda_array_interface(HostCAI(buf, version=v))
        except gpuport.DeviceUnavailableError as e:  # no GPU here; the version was accepted
            assert "version" not in str(e)
        except ValueError as e:
            assert "version" not in str(e), str(e)


def test_a_closed_get_dlpack_context_refuses_to_export(device):
    collect()
    live = stats()["exports_live"]
    a = host_array([1, 2, 3, 4], device=device)
    with a.get_dlpack("host") as d:
        x = np.from_dlpack(d)
    with pytest.raises(gpuport.DLPackError, match="block has ended") as e:
        np.from_dlpack(d)
    assert isinstance(e.value, BufferError)
    with pytest.raises(gpuport.DLPackError, match="block has ended"):
        d.__dlpack__()
    with pytest.raises(gpuport.LockError, match="block has ended"):
        with d:
            pass
    # What was taken inside keeps the memory alive.
    del a, d
    collect()
    np.testing.assert_array_equal(x, [1, 2, 3, 4])
    x[:] = 0
    del x
    collect()
    assert stats()["exports_live"] == live


def test_add_index_on_a_rank_0_array_is_one_element(device):
    a = gpuport.MemArray((), "float32", device=device)
    a.read_numpy_array(np.array(5, np.float32))
    a.add_index()  # the one element's index sum is 0
    assert a.to_numpy().shape == ()
    assert float(a.to_numpy()) == 5.0
    z = gpuport.from_dlpack(np.array(3, np.int64))
    z.add_index()
    assert int(np.from_dlpack(z)) == 3


def test_exit_with_cached_stream_blocks_is_quiet():
    """The pool's release at exit fences its stream lists after the thread's
    locals are gone: no panic may be printed (or abort the exit)."""
    import subprocess
    import sys

    code = (
        "import gpuport, gpuport.memory as gm\n"
        "s = gpuport.Stream('host')\n"
        "a = gm.alloc(4096, stream=s, device='host')\n"
        "a.free()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "panicked" not in r.stderr, r.stderr


def test_alloc_given_a_spec_string_is_the_devices_and_a_bad_spec_raises_every_time():
    # A spec string takes the cached path a Device takes (one Device kept per
    # device opened, a bounded number of spellings remembered): every
    # spelling still names its device, and a spec that fails is never kept.
    import gpuport.memory as gm

    spellings = ["host", "HOST", "host:0", " host", "cpu", "cpu:0", "Host:0"] + [f"host:{'0' * k}" for k in range(1, 16)]
    for spec in spellings * 2:  # more spellings than are remembered, each twice
        a = gm.alloc(64, None, spec)
        assert a.device == "host" and a.size == 64
        a.free()
    for _ in range(3):
        with pytest.raises(gpuport.InvalidDeviceError, match="tpu"):
            gm.alloc(64, None, "tpu:0")
    with pytest.raises(TypeError):
        gm.alloc(64, None, b"host")
