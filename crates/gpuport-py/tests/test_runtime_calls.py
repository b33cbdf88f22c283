"""gpuport.runtime's calls (docs/design.md#pointer-adapters): malloc and its
DeviceArray, memcpy and memset, kernels launched through launch_kernel on
every device under test, the HIP Python examples re-done on the GPU, and a
fuzz of wrong arguments. The adapters the calls take are tested in
tests/test_runtime.py. Runtime calls run on every backend (``device``:
host, cuda:0, rocm:0), GPU cases on every GPU backend (``gpu_device``), and
the CUDA Array Interface cases on cuda:0 (``cuda_device``); each skips with
the backend's reason where it is unavailable.
"""

import ctypes
import gc
import weakref

import numpy as np
import pytest

import gpuport
from gpuport import runtime as rt

from conftest import FakeCAI, open_or_skip

# ---- DeviceArray ----------------------------------------------------------------------


def test_malloc_returns_a_device_array(device):
    a = rt.malloc(64, device=device)
    assert type(a) is rt.DeviceArray and isinstance(a, rt.Pointer)
    assert a.shape == [64] and a.typestr == "|u1" and a.owns_memory and a.nbytes == 64
    assert a.memory_kind == "device"
    a.configure(typestr="<f4")
    assert a.shape == [16] and a.itemsize == 4
    assert a.configure(shape=(4, 4)) is a
    assert a.shape == [4, 4] and len(a) == 4
    with pytest.raises(ValueError, match="_force"):
        a.configure(shape=(5, 4))
    a.configure(shape=(5, 4), _force=True)
    assert a.shape == [5, 4]
    a.configure(shape=(2, 8), typestr="<f4")
    rt.free(a)


def test_malloc_goes_through_the_current_resource(device):
    # runtime.malloc's device memory is the device's current resource's (the
    # caching pool, counted by gpuport.memory's statistics), and free gives
    # it back.
    spec = device.spec
    before = gpuport.memory.stats(spec)
    a = rt.malloc(3000, device=device)
    during = gpuport.memory.stats(spec)
    assert during["current_count"] == before["current_count"] + 1
    assert during["current_bytes"] == before["current_bytes"] + 3000
    ref = np.arange(750, dtype=np.int32)
    rt.memcpy(a, ref, ref.nbytes)
    out = np.zeros_like(ref)
    rt.memcpy(out, a, ref.nbytes)
    assert out.tolist() == ref.tolist()
    rt.free(a)
    gc.collect()
    after = gpuport.memory.stats(spec)
    assert (after["current_count"], after["current_bytes"]) == (before["current_count"], before["current_bytes"])


def test_large_pageable_copies_round_trip(device):
    # From 1 MiB up, a synchronous memcpy between pageable (NumPy) memory and
    # a GPU goes through the pipelined copier; the bytes must not change,
    # whatever the size and the host array's alignment.
    n = (9 << 20) + 123
    src = np.frombuffer(np.random.default_rng(5).bytes(n + 3), dtype=np.uint8)[3:]
    a = rt.malloc(n, device=device)
    stream = device.create_stream()
    rt.memset(a, 0, n)
    rt.memcpy(a, src, n, stream=stream)
    out = np.zeros(n + 1, dtype=np.uint8)[1:]
    rt.memcpy(out, a, n, stream=stream)
    assert np.array_equal(out, src)
    back = np.zeros(n, dtype=np.uint8)
    rt.memcpy(back, a, n, kind="device_to_host")
    assert np.array_equal(back, src)
    rt.free(a)


def test_device_array_slicing_keeps_the_parent_alive(device):
    a = rt.malloc(4 * 12, device=device).configure(shape=(3, 4), typestr="<i4")
    base = int(a)
    row = a[1]
    assert row.shape == [4] and int(row) == base + 16 and row.nbytes == 16
    assert a[-1].shape == [4] and int(a[-1]) == base + 32
    part = a[1:3]
    assert part.shape == [2, 4] and int(part) == base + 16
    assert a[2, 1:3].shape == [2] and int(a[2, 1:3]) == base + 32 + 4
    assert a[1][1:].shape == [3]
    with pytest.raises(IndexError):
        a[3]
    with pytest.raises(IndexError, match="step"):
        a[::2]
    with pytest.raises(IndexError, match="contiguous"):
        a[:, 1]
    ref = np.arange(12, dtype=np.int32).reshape(3, 4)
    rt.memcpy(a, ref, ref.nbytes)
    del a
    gc.collect()
    out = np.zeros(4, dtype=np.int32)
    rt.memcpy(out, row, 16)  # the parent's memory is still alive
    assert out.tolist() == ref[1].tolist()
    with pytest.raises(ValueError, match="exceed"):
        rt.memcpy(out, row, 32)  # checked against the view's size


def test_device_array_from_other_inputs():
    assert rt.DeviceArray(None).shape is None
    d = rt.DeviceArray(FakeCAI(0x9000, shape=(2, 3), typestr="<f8"))
    assert d.shape == [2, 3] and d.typestr == "<f8" and int(d) == 0x9000
    raw = rt.DeviceArray(0x9000)
    assert raw.shape is None
    with pytest.raises(ValueError, match="_force"):
        raw.configure(shape=(4,), typestr="<f4")
    raw.configure(shape=(4,), typestr="<f4", _force=True)
    with pytest.raises(ValueError, match="typestr"):
        raw.configure(typestr="float33", _force=True)
    assert raw.configure(typestr="float64", _force=True).typestr == "<f8"
    assert raw.configure(typestr=np.int16, _force=True).typestr == "<i2"
    assert raw.configure(typestr=np.dtype("uint8"), _force=True).typestr == "|u1"
    a = rt.malloc(8).configure(typestr="<f4")
    assert rt.DeviceArray(a).shape == [2]


def test_hip_python_device_array_example(device):
    """HIP Python's 'Device Arrays' example: configure, slice, copy back, compare with NumPy."""
    shape = (3, 20)
    x = np.arange(60, dtype=np.float32).reshape(shape)
    darr = rt.malloc(x.nbytes, device=device).configure(typestr="float32", shape=shape)
    assert darr.shape == [3, 20] and darr.typestr == "<f4"
    rt.memcpy(darr, x, x.nbytes)
    for i in range(3):
        row = darr[i, :]
        assert row.shape == [20]
        got = np.zeros(20, dtype=np.float32)
        rt.memcpy(got, row, got.nbytes)
        np.testing.assert_array_equal(got, x[i, :])
    part = darr[1][5:10]
    got = np.zeros(5, dtype=np.float32)
    rt.memcpy(got, part, got.nbytes)
    np.testing.assert_array_equal(got, x[1, 5:10])


def test_host_memory_has_no_cuda_array_interface():
    a = rt.malloc(8, device="host")
    assert not hasattr(a, "__cuda_array_interface__")


def test_free(device):
    a = rt.malloc(16, device=device)
    rt.free(a)
    assert int(a) == 0 and not a.owns_memory
    with pytest.raises(ValueError, match="double free"):
        rt.free(a)
    rt.free(None)
    with pytest.raises(ValueError, match="not owned"):
        rt.free(bytearray(4))
    b = rt.malloc(16, device=device)
    with pytest.raises(ValueError, match="does not own"):
        rt.free(b[4:8])


def test_pinned_and_managed(device):
    p = rt.malloc_pinned(32, device=device)
    assert p.memory_kind == "pinned"
    rt.memcpy(p, bytes(range(32)), 32)  # host to host
    out = bytearray(32)
    rt.memcpy(out, p, 32)
    assert out == bytes(range(32))
    try:
        m = rt.malloc_managed(32, device=device)
    except gpuport.UnsupportedError as e:
        pytest.skip(f"managed memory: {e}")
    assert m.memory_kind == "managed"
    rt.memcpy(m, p, 32)
    rt.memcpy(out, m, 32, kind="device_to_host")
    assert out == bytes(range(32))


# ---- memcpy / memset ------------------------------------------------------------------


def test_memcpy_infers_the_direction(device):
    x = np.arange(16, dtype=np.float32)
    a = rt.malloc(x.nbytes, device=device)
    b = rt.malloc(x.nbytes, device=device)
    rt.memcpy(a, x, x.nbytes)  # host to device
    rt.memcpy(b, a, x.nbytes)  # device to device
    y = np.zeros_like(x)
    rt.memcpy(y, b, x.nbytes)  # device to host
    np.testing.assert_array_equal(x, y)
    z = np.zeros_like(x)
    rt.memcpy(z, y, x.nbytes)  # host to host
    np.testing.assert_array_equal(x, z)


@pytest.mark.parametrize(
    "kinds",
    [
        ("host_to_device", "device_to_device", "device_to_host"),
        ("HtoD", "DtoD", "DtoH"),
        (1, 3, 2),
        ("default", None, 4),
    ],
)
def test_memcpy_explicit_kinds(device, kinds):
    x = np.arange(8, dtype=np.int64)
    a = rt.malloc(x.nbytes, device=device)
    b = rt.malloc(x.nbytes, device=device)
    rt.memcpy(a, x, x.nbytes, kinds[0])
    rt.memcpy(b, a, x.nbytes, kind=kinds[1])
    y = np.zeros_like(x)
    rt.memcpy(y, b, x.nbytes, kind=kinds[2])
    np.testing.assert_array_equal(x, y)
    h = bytearray(x.nbytes)
    rt.memcpy(h, x, x.nbytes, kind=0)
    assert bytes(h) == x.tobytes()


def test_memcpy_checks(device):
    a = rt.malloc(16, device=device)
    with pytest.raises(ValueError, match="exceed"):
        rt.memcpy(a, bytes(32), 32)
    with pytest.raises(ValueError, match="read-only"):
        rt.memcpy(b"immutable!!!!!!!", a, 16)
    with pytest.raises(ValueError):
        rt.memcpy(bytearray(4), 0xDEAD_BEEF, 4)  # a raw address of unknown memory
    with pytest.raises(ValueError, match="raw host address"):
        rt.memcpy(a, 0xDEAD_BEEF, 4, kind="host_to_device")
    with pytest.raises(ValueError, match="NULL"):
        rt.memcpy(None, a, 4)
    with pytest.raises(ValueError, match="kind"):
        rt.memcpy(a, bytes(4), 4, kind="sideways")
    with pytest.raises(ValueError):
        rt.memcpy(a, bytes(4), 4, kind=9)
    rt.memcpy(a, bytes(4), 0)  # nothing to do


def test_memcpy_raw_int_inside_allocation(device):
    a = rt.malloc(16, device=device)
    rt.memcpy(int(a) + 8, b"\x01" * 8, 8)  # an int inside a live allocation is recognized
    out = bytearray(16)
    rt.memset(a, 0, 8)
    rt.memcpy(out, ctypes.c_void_p(int(a)), 16)
    assert out == b"\x00" * 8 + b"\x01" * 8


def test_memcpy_async_keeps_operands_alive(device):
    s = gpuport.Stream(device)
    a = rt.malloc(1 << 16, device=device)
    src = bytearray(b"\x05" * (1 << 16))
    rt.memcpy_async(a, src, len(src), stream=s)
    del src
    gc.collect()
    out = np.zeros(1 << 16, dtype=np.uint8)
    rt.memcpy_async(out, a, out.nbytes, stream=s)
    s.synchronize()
    assert (out == 5).all()
    rt.device_synchronize(device)
    assert gpuport._core._pending_operations() == 0


def test_memcpy_peer_on_one_device(device):
    """A device is its own peer: memcpy_peer works with both ends on one device."""
    spec = device.spec
    a, b = rt.malloc(64, device=device), rt.malloc(64, device=device)
    rt.memset(a, 9, 64)
    rt.memcpy_peer(b, spec, a, device, 64)
    out = bytearray(64)
    rt.memcpy(out, b, 64)
    assert out == b"\x09" * 64
    s = gpuport.Stream(device)
    rt.memset_async(a, 4, 64, stream=s)
    rt.memcpy_peer_async(b, device, a, spec, 64, stream=s)
    del a
    gc.collect()  # the parked operands keep `a` alive
    s.synchronize()
    rt.memcpy(out, b, 64)
    assert out == b"\x04" * 64
    rt.device_synchronize(device)
    assert gpuport._core._pending_operations() == 0
    with pytest.raises(gpuport.InvalidArgumentError, match="65 bytes exceed the 64 bytes"):
        rt.memcpy_peer(b, spec, b, spec, 65)
    rt.memcpy_peer(b, spec, b, spec, 0)  # nothing to copy


def test_memcpy_peer_refuses_two_backends(gpu_device):
    host = gpuport.Device("host")
    a, b = rt.malloc(8, device=host), rt.malloc(8, device=gpu_device)
    with pytest.raises(gpuport.InvalidArgumentError, match="two backends"):
        rt.memcpy_peer(b, gpu_device, a, host, 8)


def two_cuda_devices():
    """cuda:0 and cuda:1, or a skip saying why not."""
    first = open_or_skip("cuda:0")
    n = sum(1 for d in gpuport.devices() if d.spec.startswith("cuda:"))
    if n < 2:
        pytest.skip(f"needs 2 CUDA devices; this machine has {n}")
    return first, gpuport.Device("cuda:1")


def test_memcpy_peer_between_two_gpus():
    d0, d1 = two_cuda_devices()
    if d0.can_access_peer(d1):
        d0.enable_peer_access(d1)
    n = 1 << 20
    a, b = rt.malloc(n, device=d0), rt.malloc(n, device=d1)
    rt.memset(a, 3, n)
    rt.memcpy_peer(b, d1, a, d0, n)
    out = np.zeros(n, dtype=np.uint8)
    rt.memcpy(out, b, n)
    assert (out == 3).all()
    # memcpy sees both devices and makes the same peer copy, on either device's stream.
    rt.memset(a, 5, n)
    rt.memcpy(b, a, n)
    rt.memcpy(out, b, n)
    assert (out == 5).all()
    s1 = gpuport.Stream(d1)
    rt.memset(a, 6, n)
    rt.memcpy_peer_async(b, d1, a, d0, n, stream=s1)
    s1.synchronize()
    rt.memcpy(out, b, n)
    assert (out == 6).all()
    # Memory of another device than the one named.
    with pytest.raises(gpuport.InvalidArgumentError, match="is memory of cuda:1, not of cuda:0"):
        rt.memcpy_peer(b, d0, a, d0, n)


def test_memset(device):
    a = rt.malloc(32, device=device)
    rt.memset(a, 0xAB, 32)
    rt.memset(a[8:16], 1, 8)
    out = bytearray(32)
    rt.memcpy(out, a, 32)
    assert out == b"\xab" * 8 + b"\x01" * 8 + b"\xab" * 16
    h = bytearray(8)
    rt.memset(h, 7, 8)
    assert h == b"\x07" * 8
    s = gpuport.Stream(device)
    rt.memset_async(a, 2, 32, stream=s)
    s.synchronize()
    rt.memcpy(out, a, 32)
    assert out == b"\x02" * 32
    with pytest.raises(ValueError, match="exceed"):
        rt.memset(a, 0, 33)
    with pytest.raises(ValueError):
        rt.memset(b"readonly", 0, 8)


# ---- kernels --------------------------------------------------------------------------


def test_launch_builtin_fill(device):
    m = rt.module_load(device=device)
    f = rt.module_get_function(m, "gpuport_fill_u32")
    assert f.name == "gpuport_fill_u32"
    n = 1000
    a = rt.malloc(4 * n, device=device).configure(typestr="<u4")
    rt.launch_kernel(f, (n + 255) // 256, 256, [a, ctypes.c_uint64(n), ctypes.c_uint32(42)])
    rt.device_synchronize(device)
    out = np.zeros(n, dtype=np.uint32)
    rt.memcpy(out, a, out.nbytes)
    np.testing.assert_array_equal(out, np.full(n, 42, dtype=np.uint32))
    # A KernelArgs adapter, a sub-array and a stream.
    s = gpuport.Stream(device)
    args = rt.KernelArgs([a[10:20], ctypes.c_uint64(10), ctypes.c_uint32(7)])
    assert isinstance(args, rt.Pointer) and args.sizes() == [8, 8, 4] and len(args) == 3
    rt.launch_kernel(f, (1, 1, 1), (32,), args, shared_mem=0, stream=s)
    s.synchronize()
    rt.memcpy(out, a, out.nbytes)
    ref = np.full(n, 42, dtype=np.uint32)
    ref[10:20] = 7
    np.testing.assert_array_equal(out, ref)


def test_launch_builtin_on_host_buffer():
    """On the host backend the target may be any writable buffer gpuport holds."""
    f = rt.module_get_function(rt.module_load(device="host"), "gpuport_fill_u32")
    target = np.zeros(8, dtype=np.uint32)
    rt.launch_kernel(f, 1, 8, [target, ctypes.c_uint64(8), ctypes.c_uint32(3)])
    rt.device_synchronize("host")
    assert target.tolist() == [3] * 8


def test_host_launch_checks_pointer_arguments():
    f = rt.module_get_function(rt.module_load(device="host"), "gpuport_fill_u32")
    a = rt.malloc(16, device="host")
    with pytest.raises(ValueError, match="exceed"):
        rt.launch_kernel(f, 1, 1, [a, ctypes.c_uint64(5), ctypes.c_uint32(1)])
    with pytest.raises(ValueError, match="not memory gpuport holds"):
        rt.launch_kernel(f, 1, 1, [0xDEAD_0000, ctypes.c_uint64(1), ctypes.c_uint32(1)])
    with pytest.raises(ValueError, match="not memory gpuport holds"):
        rt.launch_kernel(f, 1, 1, [ctypes.c_uint64(0xDEAD_0000), ctypes.c_uint64(1), ctypes.c_uint32(1)])
    with pytest.raises(ValueError, match="exceed"):
        rt.launch_kernel(f, 1, 1, [b"read-only buffer", ctypes.c_uint64(1), ctypes.c_uint32(1)])
    with pytest.raises(gpuport.KernelError):
        rt.launch_kernel(f, 1, 1, [a, ctypes.c_uint64(1)])
    with pytest.raises(gpuport.InvalidArgumentError):
        rt.launch_kernel(f, 0, 1, [a, ctypes.c_uint64(1), ctypes.c_uint32(1)])
    m = rt.module_load(device="host")
    names = [n for n in ["gpuport_add_index_f32_1", "gpuport_scale_f32", "gpuport_fill_4"] if _has(m, n)]
    assert names, "the host backend's array kernels are launchable only from Rust"
    for name in names:
        with pytest.raises(gpuport.UnsupportedError):
            rt.launch_kernel(rt.module_get_function(m, name), 1, 1, [a])
    with pytest.raises(gpuport.KernelError):
        rt.module_get_function(m, "no_such_kernel")
    # sleep and empty take no pointers
    rt.launch_kernel(rt.module_get_function(m, "gpuport_empty"), 1, 1)
    rt.launch_kernel(rt.module_get_function(m, "gpuport_sleep_ns"), 1, 1, [ctypes.c_uint64(1000)])
    rt.device_synchronize("host")


def _has(m, name):
    try:
        rt.module_get_function(m, name)
        return True
    except gpuport.KernelError:
        return False


def test_foreign_code_on_the_host_backend_is_a_clear_error():
    for code, kind in [("extern \"C\" __global__ void k() {}", None), (b"\x7fELF....", None), (".version 8.0\n.target sm_90\n", None)]:
        with pytest.raises(gpuport.UnsupportedError, match="host backend"):
            rt.module_load(code, options=[b"-O3"], kind=kind, device="host")
    with pytest.raises(TypeError, match="options"):
        rt.module_load(None, options=b"-O3", device="host")
    with pytest.raises(TypeError):
        rt.module_load(12, device="host")
    with pytest.raises(ValueError, match="kind"):
        rt.module_load("x", kind="cobol", device="host")


def test_kernel_args_adapter():
    buf = bytearray(8)
    k = rt.KernelArgs([ctypes.c_int8(-1), ctypes.c_double(1.5), buf, None, ctypes.c_void_p(16)])
    assert k.sizes() == [1, 8, 8, 8, 8]
    packed = k.packed()
    assert packed[:1] == b"\xff" and packed[1:9] == bytes(ctypes.c_double(1.5))
    assert int.from_bytes(packed[9:17], "little") == ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert int(k) != 0
    with pytest.raises(TypeError, match="kernel argument 1"):
        rt.KernelArgs([ctypes.c_int(1), 2.5])
    with pytest.raises(TypeError, match="list or tuple"):
        rt.KernelArgs(3)


# ---- GPU: the HIP Python examples re-done ---------------------------------------------


def test_gpu_device_array_cai_and_configure(cuda_device):
    a = rt.malloc(4 * 12, device=cuda_device).configure(shape=(3, 4), typestr="<f4")
    cai = a.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["data"][0] == int(a) and cai["version"] == 3
    sub = a[1:]
    assert sub.__cuda_array_interface__["data"][0] == int(a) + 16
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    rt.memcpy(a, x, x.nbytes)
    m = gpuport.from_cuda_array_interface(sub, device=cuda_device)
    assert m.shape == (2, 4) or list(m.shape) == [2, 4]
    got = np.zeros((2, 4), dtype=np.float32)
    rt.memcpy(got, m, got.nbytes)  # the MemArray's own CAI points back into `a`
    np.testing.assert_array_equal(got, x[1:])
    back = rt.DeviceArray(m)  # a MemArray exporting the CUDA Array Interface
    assert int(back) == int(a) + 16 and back.shape == [2, 4] and back.typestr == "<f4"


def arch_options(dev):
    """Compiler options for ``dev``'s architecture: NVRTC's on CUDA, hiprtc's on ROCm."""
    if dev.backend == "cuda":
        return [b"--gpu-architecture=" + dev.arch.encode(), b"-default-device"]
    return [b"--offload-arch=" + dev.arch.encode()]


def test_gpu_kernel_from_source_with_mixed_arguments(gpu_device):
    """HIP Python's 'Kernels with Arguments' example: scale a vector in place."""
    source = r"""
    extern "C" __global__ void scale_vector(float factor, int n, short unused1, int unused2,
                                            float unused3, float *x) {
        int tid = threadIdx.x + blockIdx.x * blockDim.x;
        if (tid < n) { x[tid] *= factor; }
    }
    """
    m = rt.module_load(source, options=arch_options(gpu_device), device=gpu_device)
    f = rt.module_get_function(m, "scale_vector")
    n = 100
    x_h = np.random.default_rng(0).random(n, dtype=np.float32)
    x_d = rt.malloc(x_h.nbytes, device=gpu_device)
    rt.memcpy(x_d, x_h, x_h.nbytes)
    block = 32
    rt.launch_kernel(
        f,
        ((n + block - 1) // block,),
        (block,),
        [ctypes.c_float(2.0), ctypes.c_int(n), ctypes.c_short(5), ctypes.c_int(2), ctypes.c_float(5.0), x_d],
    )
    out = np.zeros_like(x_h)
    rt.memcpy(out, x_d, out.nbytes)
    np.testing.assert_allclose(out, 2.0 * x_h)
    rt.free(x_d)


def test_gpu_options_as_list_of_bytes_adapter(gpu_device):
    opts = rt.ListOfBytes(arch_options(gpu_device))
    m = rt.module_load('extern "C" __global__ void k(int *p) { *p = 5; }', options=opts, device=gpu_device)
    f = rt.module_get_function(m, "k")
    a = rt.malloc(4, device=gpu_device)
    rt.launch_kernel(f, 1, 1, rt.KernelArgs([a]))
    out = np.zeros(1, dtype=np.int32)
    rt.memcpy(out, a, 4)
    assert out[0] == 5


# ---- fuzz: nothing a script passes crashes the interpreter ----------------------------

BAD = [None, -1, 0, 1, 2**64, 2**200, 1.5, float("nan"), "s", b"b", object(), [], [1, "x"], {}, (1, 2, 3, 4),
       memoryview(bytearray(8))[::2], FakeCAI(0), FakeCAI(1), ctypes.c_void_p(8), ctypes.c_int(3), 1j]


def test_fuzz_wrong_arguments_raise_cleanly():
    fill = rt.module_get_function(rt.module_load(device="host"), "gpuport_fill_u32")
    calls = [
        lambda x: rt.Pointer(x),
        lambda x: rt.DeviceArray(x),
        lambda x: rt.ListOfBytes(x),
        lambda x: rt.ListOfPointer(x),
        lambda x: rt.ListOfInt(x),
        lambda x: rt.ListOfUnsigned(x),
        lambda x: rt.ListOfUnsignedLong(x),
        lambda x: rt.KernelArgs(x),
        lambda x: rt.malloc(x, device="host"),
        lambda x: rt.malloc(16, device=x),
        lambda x: rt.malloc(16, device="host", kind=x),
        lambda x: rt.free(x),
        lambda x: rt.memcpy(x, bytearray(8), 8),
        lambda x: rt.memcpy(bytearray(8), x, 8),
        lambda x: rt.memcpy(rt.malloc(8, device="host"), bytes(8), x),
        lambda x: rt.memcpy(rt.malloc(8, device="host"), bytes(8), 8, kind=x),
        lambda x: rt.memcpy(rt.malloc(8, device="host"), bytes(8), 8, stream=x),
        lambda x: rt.memcpy_async(x, x, 8),
        lambda x: rt.memset(x, 0, 8),
        lambda x: rt.memset(bytearray(8), x, 8),
        lambda x: rt.module_load(x, device="host"),
        lambda x: rt.module_load(None, options=x, device="host"),
        lambda x: rt.module_get_function(x, "k"),
        lambda x: rt.launch_kernel(fill, x, 1, [rt.malloc(8, device="host"), ctypes.c_uint64(1), ctypes.c_uint32(1)]),
        lambda x: rt.launch_kernel(fill, 1, x, [rt.malloc(8, device="host"), ctypes.c_uint64(1), ctypes.c_uint32(1)]),
        lambda x: rt.launch_kernel(fill, 1, 1, [x, ctypes.c_uint64(2), ctypes.c_uint32(1)]),
        lambda x: rt.launch_kernel(fill, 1, 1, [rt.malloc(8, device="host"), x, ctypes.c_uint32(1)]),
        lambda x: rt.launch_kernel(fill, 1, 1, x),
        lambda x: rt.launch_kernel(x, 1, 1),
        lambda x: rt.malloc(64, device="host").configure(shape=x),
        lambda x: rt.malloc(64, device="host").configure(typestr=x),
        lambda x: rt.malloc(64, device="host")[x],
    ]
    for call in calls:
        for x in BAD:
            try:
                call(x)
            except (TypeError, ValueError, OverflowError, BufferError, IndexError, RuntimeError, NotImplementedError, MemoryError):
                pass
    rt.device_synchronize("host")


def test_host_launch_keeps_a_raw_target_alive():
    f = rt.module_get_function(rt.module_load(device="host"), "gpuport_fill_u32")
    a = rt.malloc(4 * 4096, device="host")
    rt.launch_kernel(f, 16, 256, [ctypes.c_uint64(int(a)), ctypes.c_uint64(4096), ctypes.c_uint32(9)])
    rt.free(a)  # the launch still holds the allocation
    del a
    gc.collect()
    rt.device_synchronize("host")
    assert gpuport._core._pending_operations() == 0


def test_a_launch_keeps_the_arrays_of_its_argument_list_until_its_work_has_run():
    """Host backend: the stream sleeps first, so the fill is still queued when
    its target, a NumPy array passed in the list, loses its last reference."""
    s = gpuport.Stream("host")
    m = rt.module_load(device="host")
    rt.launch_kernel(rt.module_get_function(m, "gpuport_sleep_ns"), 1, 1, [ctypes.c_uint64(200_000_000)], stream=s)
    target = np.zeros(4096, dtype=np.uint32)
    ref = weakref.ref(target)
    fill = rt.module_get_function(m, "gpuport_fill_u32")
    rt.launch_kernel(fill, 16, 256, [target, ctypes.c_uint64(4096), ctypes.c_uint32(9)], stream=s)
    del target
    gc.collect()
    assert ref() is not None, "the launch let its queued target go"
    s.synchronize()
    rt.device_synchronize("host")  # prunes what has run
    gc.collect()
    assert ref() is None, "the launch kept its target after its work had run"
    assert gpuport._core._pending_operations() == 0


def test_memarray_is_a_pointer_input():
    m = gpuport.MemArray((2, 3), "float32", device="host")
    p = rt.Pointer(m)
    assert p.memory_kind == "host" and p.nbytes == 24
    out = np.ones((2, 3), dtype=np.float32)
    rt.memcpy(out, p, 24)
    np.testing.assert_array_equal(out, np.zeros((2, 3), dtype=np.float32))


def test_gpu_directions_that_would_touch_device_memory_from_the_host(gpu_device):
    a = rt.malloc(16, device=gpu_device)
    with pytest.raises(ValueError, match="device memory"):
        rt.memcpy(bytearray(16), a, 16, kind="host_to_host")
    with pytest.raises(ValueError, match="device memory"):
        rt.memcpy(a, bytearray(16), 16, kind="host_to_host")
    with pytest.raises(ValueError, match="pageable host memory"):
        rt.memcpy(a, bytearray(16), 16, kind="device_to_device")
    if gpu_device.backend == "cuda":
        assert a.__cuda_array_interface__["data"][0] == int(a)
    else:  # the CUDA Array Interface is defined for CUDA memory only
        assert not hasattr(a, "__cuda_array_interface__")
    p = rt.malloc_pinned(16, device=gpu_device)
    rt.memcpy(p, b"\x03" * 16, 16)
    rt.memcpy(a, p, 16)  # pinned to device, inferred
    out = bytearray(16)
    rt.memcpy(out, a, 16)
    assert out == b"\x03" * 16
    assert not hasattr(p, "__cuda_array_interface__")


def test_gpu_raw_device_addresses_go_to_the_driver(gpu_device):
    """Raw device ints inside live allocations are recognized; unknown ones are the caller's."""
    a = rt.malloc(64, device=gpu_device)
    b = rt.malloc(64, device=gpu_device)
    rt.memset(a, 4, 64)
    rt.memcpy(int(b), int(a), 64)  # both recognized as device memory: device to device
    out = bytearray(64)
    rt.memcpy(out, b, 64)
    assert out == b"\x04" * 64
    with pytest.raises(ValueError, match="infer"):
        rt.memcpy(out, 0x10, 8)  # unknown memory: pass kind=


def test_streams_and_events_functional_spellings(device):
    s = rt.stream_create(device)
    a = rt.malloc(1 << 12, device=device)
    start = rt.event_record(s)
    rt.memset_async(a, 1, 1 << 12, stream=s)
    end = rt.event_record(s)
    rt.event_synchronize(end)
    rt.stream_synchronize(s)
    assert rt.event_elapsed_time(start, end) >= 0.0


def test_ctypes_pointer_kernel_argument_is_passed_by_value():
    x = ctypes.c_int(5)
    k = rt.KernelArgs([ctypes.pointer(x)])
    assert k.sizes() == [ctypes.sizeof(ctypes.c_void_p)]
    assert int.from_bytes(k.packed(), "little") == ctypes.addressof(x)


def test_huge_shapes_do_not_overflow():
    d = rt.DeviceArray(FakeCAI(0x9000, shape=(0, 2**40, 2**40), typestr="<f8"))
    with pytest.raises((OverflowError, IndexError)):
        d[0]
    with pytest.raises(OverflowError):
        d[:, :1]
    with pytest.raises(OverflowError):
        rt.malloc(64, device="host").configure(shape=(2**40, 2**40))


def test_ctypes_scalar_as_in_out_argument(device):
    """HIP Python's in-out scalars: a ctypes value is a buffer, so its storage is the pointer."""
    a = rt.malloc(8, device=device)
    rt.memcpy(a, ctypes.c_int64(-12345), 8)
    x = ctypes.c_int64(0)
    rt.memcpy(x, a, 8)
    assert x.value == -12345
    assert int(rt.Pointer(x)) == ctypes.addressof(x)


def test_launch_parks_only_arguments_that_hold_memory():
    f = rt.module_get_function(rt.module_load(device="host"), "gpuport_fill_u32")
    s = gpuport.Stream("host")
    s.synchronize()
    assert gpuport._core._pending_operations() == 0
    # Values and NULL: the launch copies the bytes, nothing is parked.
    rt.launch_kernel(f, 1, 1, [None, ctypes.c_uint64(0), ctypes.c_uint32(1)], stream=s)
    rt.launch_kernel(f, 1, 1, rt.KernelArgs([None, ctypes.c_uint64(0), ctypes.c_uint32(1)]), stream=s)
    assert gpuport._core._pending_operations() == 0
    # Memory gpuport holds is parked per launch (list, tuple and KernelArgs
    # alike), kept while pending, and released once the stream passed it,
    # with the marker events reused.
    out = np.zeros(4, dtype=np.uint32)
    for i in range(200):
        a = rt.malloc(16, device="host")
        args = [a, ctypes.c_uint64(4), ctypes.c_uint32(i)]
        if i % 3 == 1:
            args = tuple(args)
        elif i % 3 == 2:
            args = rt.KernelArgs(args)
        rt.launch_kernel(f, 1, 4, args, stream=s)
        rt.free(a)  # the pending launch still holds the allocation
        del a, args
    b = rt.malloc(16, device="host")
    rt.launch_kernel(f, 1, 4, (b, ctypes.c_uint64(4), ctypes.c_uint32(7)), stream=s)
    rt.memcpy_async(out, b, 16, stream=s)
    s.synchronize()
    assert (out == 7).all()
    gc.collect()
    assert gpuport._core._pending_operations() == 0


def test_device_synchronize_waits_for_every_stream_of_the_device(device):
    """As ``hipDeviceSynchronize``: work on a stream other than the default
    one (here a gpuport stream kept busy for 0.2 s) is done when it returns."""
    s = gpuport.Stream(device)
    sleep = rt.module_get_function(rt.module_load(device=device), "gpuport_sleep_ns")
    buf = rt.malloc(1 << 16, device=device)
    rt.launch_kernel(sleep, 1, 1, [ctypes.c_uint64(200_000_000)], stream=s)
    rt.memset_async(buf, 7, 1 << 16, stream=s)
    marker = s.record_event()
    rt.device_synchronize(device=device)
    assert marker.query(), "device_synchronize returned before another stream's work was done"
    out = bytearray(1 << 16)
    rt.memcpy(out, buf, 1 << 16)
    assert out.count(7) == 1 << 16, f"{out.count(7)} of {1 << 16} bytes set"
