"""gpuport.memory and the peer-library hooks (gpuport.cupy, gpuport.numba, gpuport.torch).

gpuport.memory's own tests run on every backend (``device``: host, cuda:0,
rocm:0); the peer hooks need ``cuda:0`` and the peer library and skip with
the reason otherwise. The Numba and PyTorch hooks on the GPU are in
tests/test_plugins_numba_torch.py.
"""

import ctypes
import gc
import json
import os
import subprocess

import pytest

import gpuport
import gpuport.memory as gm

from conftest import build_c_library, live_allocations, need_peer, run_script


# ---- host: gpuport.memory -----------------------------------------------------


def test_alloc_and_free_update_stats(device):
    spec = device.spec
    c0, b0 = live_allocations(spec)
    a = gm.alloc(1000, device=spec)
    assert a.ptr != 0 and int(a) == a.ptr
    assert a.size == 1000 and a.device == spec and not a.freed
    assert live_allocations(spec) == (c0 + 1, b0 + 1000)
    s = gm.stats(spec)
    assert s["peak_bytes"] >= b0 + 1000 and s["total_count"] >= 1
    assert s["pool_in_use"] >= 1000
    gm.free(a)
    assert a.freed
    a.free()  # a second free does nothing
    assert live_allocations(spec) == (c0, b0)


def test_collected_allocation_returns_to_the_pool(device):
    spec = device.spec
    c0, b0 = live_allocations(spec)
    a = gm.alloc(4096, device=spec)
    assert live_allocations(spec) == (c0 + 1, b0 + 4096)
    del a
    gc.collect()
    assert live_allocations(spec) == (c0, b0)


def test_pool_reuses_freed_memory(device):
    spec = device.spec
    # A stream of its own: the pool is the device's current resource, shared
    # with every MemArray of the process, whose blocks freed on the default
    # stream may fit this request as well as ours.
    s = device.create_stream()
    a = gm.alloc(1 << 20, stream=s, device=spec)
    p = a.ptr
    a.free()
    b = gm.alloc(1 << 20, stream=s, device=spec)
    assert b.ptr == p  # same stream: reused at once
    b.free()


def test_alloc_on_a_gpuport_stream(device):
    spec = device.spec
    s = device.create_stream()
    c0, _ = live_allocations(spec)
    a = gm.alloc(64, stream=s, device=spec)
    assert live_allocations(spec)[0] == c0 + 1
    a.free()
    if device.backend == "host":  # on a GPU an int is a stream handle, handed to the driver
        with pytest.raises(ValueError, match="host backend"):
            gm.alloc(64, stream=12345, device=spec)


def test_csv_log(tmp_path, device):
    spec = device.spec
    path = tmp_path / "log.csv"
    gm.enable_logging(path, device=spec)
    try:
        assert gm.log_path(spec) == str(path)
        a = gm.alloc(4096, device=spec)
        ptr = a.ptr
        a.free()
        lines = gm.csv_log(spec).strip().splitlines()
    finally:
        gm.disable_logging(spec)
    assert lines[0] == "timestamp_ns,elapsed_ns,thread,event,device,address,size,stream,free,total"
    rows = [line.split(",") for line in lines[1:]]
    events = [(r[3], int(r[5], 16), int(r[6]), r[4]) for r in rows]
    assert ("allocate", ptr, 4096, spec) in events
    assert ("free", ptr, 4096, spec) in events
    assert events.index(("allocate", ptr, 4096, spec)) < events.index(("free", ptr, 4096, spec))
    assert gm.log_path(spec) is None and gm.csv_log(spec) == ""
    # Nothing is logged once disabled.
    gm.alloc(10, device=spec).free()
    assert len(path.read_text().strip().splitlines()) == len(lines)


def test_log_with_memory_info(tmp_path, device):
    spec = device.spec
    path = tmp_path / "log.csv"
    gm.enable_logging(str(path), device=spec, memory_info=True)
    try:
        gm.alloc(10, device=spec).free()
        rows = [line.split(",") for line in gm.csv_log(spec).strip().splitlines()[1:]]
    finally:
        gm.disable_logging(spec)
    assert rows and all(r[9] != "" and int(r[9]) > 0 for r in rows)


def test_memory_info(device):
    spec = device.spec
    free, total = gm.memory_info(spec)
    assert total > 0 and 0 <= free <= total


def test_defer_cleanup_holds_frees_back(device):
    spec = device.spec
    c0, b0 = live_allocations(spec)
    with gm.defer_cleanup(spec) as g:
        a = gm.alloc(100, device=spec)
        a.free()
        assert g.held_back == 1
        assert live_allocations(spec) == (c0 + 1, b0 + 100)  # the free has not reached the resource
    assert g.held_back == 0
    assert live_allocations(spec) == (c0, b0)


def test_reset_keeps_live_allocations(device):
    spec = device.spec
    a = gm.alloc(1 << 16, device=spec)
    gm.reset(spec)
    assert not a.freed and gm.stats(spec)["current_bytes"] >= 1 << 16
    a.free()


def test_pinned_host_memory(device):
    spec = device.spec
    p = gm.alloc_pinned(256, device=spec)
    assert p.ptr != 0 and p.size == 256 and p.device_ptr is None
    ctypes.memset(p.ptr, 7, 256)
    assert ctypes.string_at(p.ptr, 256) == b"\x07" * 256
    p.free()
    assert p.freed


def test_pin_existing_host_memory(device):
    spec = device.spec
    buf = ctypes.create_string_buffer(4096)
    r = gpuport._core._mem_pin(ctypes.addressof(buf), 4096, device=spec)
    assert r.ptr == ctypes.addressof(buf) and r.size == 4096 and not r.mapped and not r.unpinned
    r.unpin()
    assert r.unpinned
    r.unpin()
    with pytest.raises(ValueError):
        gpuport._core._mem_pin(0, 16, device=spec)


def test_ipc_is_unsupported_on_the_host():
    a = gm.alloc(64, device="host")
    with pytest.raises(gpuport.UnsupportedError):
        a.ipc_handle()
    a.free()
    with pytest.raises(ValueError):
        a.ipc_handle()


# ---- host: the C ABI for PyTorch ---------------------------------------------------


@pytest.fixture(scope="module")
def torch_abi():
    path, alloc_fn, free_fn = gm.torch_allocator_library()
    assert path == gpuport._core.__file__
    lib = ctypes.CDLL(path)
    malloc = getattr(lib, alloc_fn)
    malloc.restype = ctypes.c_void_p
    malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    free = getattr(lib, free_fn)
    free.restype = None
    free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    live = lib.gpuport_torch_live_count
    live.restype = ctypes.c_size_t
    live.argtypes = []
    return malloc, free, live


def test_c_abi_round_trip_updates_stats(torch_abi):
    malloc, free, live = torch_abi
    c0, b0 = live_allocations()
    n0 = live()
    ptr = malloc(1 << 16, -1, None)  # device -1: the host backend
    assert ptr
    assert live_allocations() == (c0 + 1, b0 + (1 << 16)) and live() == n0 + 1
    free(ptr, 1 << 16, -1, None)
    assert live_allocations() == (c0, b0) and live() == n0


def _try_malloc():
    lib = ctypes.CDLL(gpuport._core.__file__)
    f = lib.gpuport_torch_try_malloc
    f.restype = ctypes.c_void_p
    f.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]

    def call(size, device):
        message = ctypes.create_string_buffer(1024)
        return f(size, device, None, message, len(message)), message.value.decode()

    return call


def test_c_abi_failures_say_why_and_never_unwind(torch_abi):
    _, free, _ = torch_abi
    try_malloc = _try_malloc()
    c0, b0 = live_allocations()
    p, why = try_malloc(-1, -1)
    assert not p and "gpuport could not allocate -1 bytes" in why, why
    p, why = try_malloc(1 << 62, -1)
    assert not p and str(1 << 62) in why and "gpuport" in why, why
    p, why = try_malloc(16, 99)  # no such CUDA device here
    assert not p and why, why
    free(12345, 16, -1, None)  # unknown pointer: ignored
    free(None, 0, -1, None)
    assert live_allocations() == (c0, b0)
    assert try_malloc(0, -1) == (None, ""), "zero bytes: null, as from torch's own allocator"


# A C++ caller, as PyTorch's CUDAPluggableAllocator is: a failed allocation
# reaches it as a std::runtime_error (PyTorch's bindings raise it in Python).
CXX_CALLER = r"""
#include <cstdio>
#include <stdexcept>
#include <sys/types.h>
using Malloc = void* (*)(ssize_t, int, void*);
extern "C" int call_and_catch(void* fn, ssize_t size, char* out, size_t cap, void** ptr) {
    try {
        *ptr = reinterpret_cast<Malloc>(fn)(size, -1, nullptr);
        return 0;
    } catch (const std::runtime_error& e) {
        std::snprintf(out, cap, "%s", e.what());
        return 1;
    }
}
"""


def test_a_failed_torch_allocation_throws_to_its_cxx_caller_and_the_next_one_works(tmp_path, torch_abi):
    import shutil

    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler here to build the caller")
    src = tmp_path / "caller.cpp"
    src.write_text(CXX_CALLER)
    so = tmp_path / "caller.so"
    subprocess.run([cxx, "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True)
    caller = ctypes.CDLL(str(so)).call_and_catch
    caller.restype = ctypes.c_int
    caller.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    malloc, free, _ = torch_abi
    fn = ctypes.cast(malloc, ctypes.c_void_p)
    out, ptr = ctypes.create_string_buffer(1024), ctypes.c_void_p()
    assert caller(fn, 1 << 62, out, len(out), ctypes.byref(ptr)) == 1, "no exception for an impossible size"
    assert out.value.decode().startswith("gpuport could not allocate 4611686018427387904 bytes"), out.value
    assert caller(fn, 4096, out, len(out), ctypes.byref(ptr)) == 0 and ptr.value, "the next allocation failed"
    free(ptr.value, 4096, -1, None)
    assert caller(fn, 0, out, len(out), ctypes.byref(ptr)) == 0 and not ptr.value, "zero bytes: null, no exception"


# ---- host: lazy imports -----------------------------------------------------------


def test_importing_gpuport_imports_no_peer():
    out = run_script(
        """
        import sys, json
        import gpuport, gpuport.memory, gpuport.cupy, gpuport.torch
        print(json.dumps(sorted(m for m in ("cupy", "numba", "torch") if m in sys.modules)))
        """
    )
    assert json.loads(out.strip().splitlines()[-1]) == []


# ---- host: the C functions behind gpuport.cupy -----------------------------------------

_STREAM_FN_NAME = b"intptr_t (void)"  # kept alive: a capsule does not copy its name


@pytest.fixture(scope="module")
def cupy_c_functions(tmp_path_factory):
    """gpuport's CuPy malloc/free, installed on the host backend with a C stand-in
    for CuPy's get_current_stream_ptr (tests/cupy_stream_stub.c), called as
    CuPy's Cython calls them: GIL held, an exception set by the call raised."""
    stub = build_c_library(
        "cupy_stream_stub.c", tmp_path_factory.mktemp("cupy_stub"), "the stand-in for CuPy's stream function"
    )
    stub.stub_set_stream.argtypes = [ctypes.c_ssize_t]
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

    def install(fn_name):
        cap = new_capsule(ctypes.cast(getattr(stub, fn_name), ctypes.c_void_p), _STREAM_FN_NAME, None)
        m, f = gpuport._core._cupy_allocator_functions(cap, "host")
        malloc = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)(m)
        free = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)(f)
        return malloc, free

    return stub, new_capsule, install


def test_cupy_c_malloc_takes_from_the_pool_and_free_gives_back(cupy_c_functions):
    stub, _, install = cupy_c_functions
    stub.stub_set_stream(0)
    malloc, free = install("stub_current_stream")
    c0, b0 = live_allocations("host")
    p = malloc(None, 4096, 0)
    assert p not in (None, 0, 2**64 - 1)
    assert live_allocations("host") == (c0 + 1, b0 + 4096)
    ctypes.memset(p, 7, 4096)  # the memory is really there
    free(None, p, 0)
    assert live_allocations("host") == (c0, b0)


def test_cupy_c_malloc_failure_raises_in_the_caller(cupy_c_functions):
    stub, _, install = cupy_c_functions
    stub.stub_set_stream(0)
    malloc, _ = install("stub_current_stream")
    c0, b0 = live_allocations("host")
    with pytest.raises(ValueError, match=r"cannot allocate 9223372036854775808 bytes: more than isize::MAX"):
        malloc(None, 1 << 63, 0)
    with pytest.raises(ValueError, match=r"device id: -1 is negative; device ids are 0 or more"):
        malloc(None, 64, -1)
    stub.stub_set_stream(7)  # the host backend has no integer stream handles
    with pytest.raises(ValueError, match=r"stream 7: the host backend's streams have no integer handles"):
        malloc(None, 64, 0)
    stub.stub_set_stream(0)
    assert live_allocations("host") == (c0, b0)


def test_cupy_c_malloc_raises_what_cupys_stream_function_raised(cupy_c_functions):
    stub, _, install = cupy_c_functions
    malloc, _ = install("stub_failing_stream")
    c0, b0 = live_allocations("host")
    with pytest.raises(LookupError, match="stub: no current stream"):
        malloc(None, 64, 0)
    assert live_allocations("host") == (c0, b0)
    install("stub_current_stream")


def test_cupy_c_free_ignores_the_failure_value_and_unknown_pointers(cupy_c_functions):
    stub, _, install = cupy_c_functions
    stub.stub_set_stream(0)
    malloc, free = install("stub_current_stream")
    p = malloc(None, 64, 0)
    c0, b0 = live_allocations("host")
    free(None, 2**64 - 1, 0)  # what a failed malloc returned
    free(None, 0x1234, 0)
    free(None, None, 0)
    assert live_allocations("host") == (c0, b0)
    free(None, p, 0)
    assert live_allocations("host") == (c0 - 1, b0 - 64)


def test_cupy_c_functions_refuse_what_is_not_cupys_stream_function(cupy_c_functions):
    stub, new_capsule, _ = cupy_c_functions
    with pytest.raises(TypeError, match="stream_fn must be CuPy's get_current_stream_ptr capsule, not int"):
        gpuport._core._cupy_allocator_functions(42, "cuda")
    wrong = new_capsule(ctypes.cast(stub.stub_current_stream, ctypes.c_void_p), b"void (void)", None)
    with pytest.raises(TypeError, match=r"named b?'void \(void\)'|named .*void \(void\)"):
        gpuport._core._cupy_allocator_functions(wrong, "cuda")
    right = new_capsule(ctypes.cast(stub.stub_current_stream, ctypes.c_void_p), _STREAM_FN_NAME, None)
    with pytest.raises(ValueError, match=r'backend "tpu" is not one CuPy runs on; accepted: "cuda", "rocm"'):
        gpuport._core._cupy_allocator_functions(right, "tpu")


# ---- GPU ------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_alloc_stats_ipc_and_c_abi(cuda_device, torch_abi):
    """CUDA IPC handles and the torch C ABI (CUDA ordinals) on cuda:0."""
    dev = cuda_device.spec
    c0, b0 = live_allocations(dev)
    a = gm.alloc(1 << 20, device=dev)
    assert live_allocations(dev) == (c0 + 1, b0 + (1 << 20))
    if os.environ.get("GPUPORT_POOL", "").strip().lower() == "expandable":
        # Memory of expandable segments refuses IPC (MemoryError::ExpandableIpc).
        with pytest.raises(gpuport.GpuError, match="expandable segment"):
            a.ipc_handle()
    else:
        handle, offset = a.ipc_handle()
        assert len(handle) == 64 and offset >= 0
    free, total = gm.memory_info(dev)
    assert 0 < free <= total
    s = gpuport.Device(dev).create_stream()
    b = gm.alloc(256, stream=s, device=dev)
    b.free()
    a.free()
    assert live_allocations(dev) == (c0, b0)
    malloc, free_fn, _ = torch_abi
    p = malloc(4096, 0, None)
    assert p and live_allocations(dev) == (c0 + 1, b0 + 4096)
    free_fn(p, 4096, 0, None)
    assert live_allocations(dev) == (c0, b0)
    m = gm.alloc_pinned(4096, mapped=True, device=dev)
    assert m.device_ptr is not None
    m.free()


@pytest.fixture
def cupy_hooked():
    need_peer("cupy")
    import cupy

    import gpuport.cupy as gc_

    get = getattr(cupy.cuda, "get_allocator", None)
    prev = get() if get is not None else cupy.get_default_memory_pool().malloc
    gc_.use_gpuport_for_cupy()
    try:
        yield cupy
    finally:
        cupy.cuda.set_allocator(prev)
        cupy.cuda.set_pinned_memory_allocator(cupy.get_default_pinned_memory_pool().malloc)


@pytest.mark.gpu
def test_cupy_arrays_come_from_gpuport(cupy_hooked, tmp_path):
    cupy = cupy_hooked
    dev = "cuda:0"
    gm.enable_logging(tmp_path / "cupy.csv", device=dev)
    try:
        c0, b0 = live_allocations(dev)
        x = cupy.arange(1000, dtype=cupy.int64)
        ptr = x.data.ptr
        c1, b1 = live_allocations(dev)
        assert c1 >= c0 + 1 and b1 >= b0 + 8000
        assert int(x.sum()) == 499500
        assert int((x * 2)[999]) == 1998
        del x
        gc.collect()
        cupy.cuda.get_current_stream().synchronize()
        assert live_allocations(dev) == (c0, b0)
        rows = [r.split(",") for r in gm.csv_log(dev).strip().splitlines()[1:]]
    finally:
        gm.disable_logging(dev)
    events = [(r[3], int(r[5], 16), int(r[6])) for r in rows]
    assert ("allocate", ptr, 8000) in events and ("free", ptr, 8000) in events


@pytest.mark.gpu
def test_cupy_uses_the_c_allocator_and_its_failures_raise(cupy_hooked):
    cupy = cupy_hooked
    malloc = cupy.cuda.get_allocator()
    assert type(malloc.__self__).__name__ == "CFunctionAllocator"
    dev = "cuda:0"
    c0, b0 = live_allocations(dev)
    with pytest.raises(ValueError, match="more than isize::MAX"):
        cupy.cuda.alloc(1 << 63)  # through CuPy's Cython, not ctypes
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        x = cupy.full(1 << 18, 3, dtype=cupy.float32)  # allocated in s's order
        assert float(x.sum()) == 3.0 * (1 << 18)
    s.synchronize()
    assert live_allocations(dev)[0] >= c0 + 1
    del x
    gc.collect()
    s.synchronize()
    assert live_allocations(dev) == (c0, b0)


@pytest.mark.gpu
def test_cupy_streams_destroyed_while_their_blocks_are_cached_are_never_named():
    """A CuPy stream destroyed while gpuport's pool caches blocks freed on it:
    the pool's later work (fences for other streams, reset) must not record
    events on it or ask it about captures. Naming it once crashed the process
    at exit (rc -11) while every test passed, so the check is a fresh
    process's exit status, after the pool had every reason to name the stream."""
    need_peer("cupy")
    out = run_script(
        """
        import gc, cupy, gpuport, gpuport.cupy, gpuport.memory as gm
        gpuport.cupy.use_gpuport_for_cupy()
        for round in range(3):
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                xs = [cupy.full(n, 1, dtype=cupy.uint8) for n in (1 << 10, 1 << 16, 1 << 20, 3 << 20)]
                assert int(sum(int(x.sum()) for x in xs)) == (1 << 10) + (1 << 16) + (1 << 20) + (3 << 20)
            s.synchronize()
            del xs
            gc.collect()
            del s  # destroyed now; the pool still caches its blocks
            gc.collect()
            other = gpuport.Device("cuda:0").create_stream()
            for n in (1 << 10, 1 << 16, 1 << 20, 3 << 20, 5 << 20):  # misses: the pool fences other lists
                a = gm.alloc(n, stream=other, device="cuda:0")
                a.free()
            arr = gpuport.MemArray((1 << 20,), "uint8", device="cuda:0")
            arr.move_memory("device")
            arr.synchronize()
            del arr
            other.synchronize()
        gm.reset("cuda:0")
        print("clean")
        """
    )
    assert "clean" in out


@pytest.mark.gpu
def test_cupy_captures_survive_a_pool_that_has_seen_many_streams():
    """CuPy's fork-join capture (two streams, CuPy's test_graph.py), after
    CuPy allocated on more streams than the pool keeps lists for: making the
    capture's lists once synchronized the device to let the old lists go,
    which invalidated the capture (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED at
    the next launch). A blocking stream's capture too."""
    need_peer("cupy")
    out = run_script(
        """
        import cupy, gpuport.cupy
        gpuport.cupy.use_gpuport_for_cupy()
        kept = []
        for _ in range(24):
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                x = cupy.ones(1000)
                del x
            kept.append(s)
        a = cupy.random.random((100,))
        for blocking in (False, True):
            s1 = cupy.cuda.Stream(non_blocking=not blocking)
            s2 = cupy.cuda.Stream(non_blocking=True)
            e1, e2 = cupy.cuda.Event(), cupy.cuda.Event()
            cupy.cuda.get_current_stream().synchronize()
            with s1:
                s1.begin_capture()
                out1 = a * 100
                e1.record(s1)
                s2.wait_event(e1)
                with s2:
                    out2 = 3 * out1 + 1
                    e2.record(s2)
                s1.wait_event(e2)
                g = s1.end_capture()
            g.launch()
            s1.synchronize()
            cupy.testing.assert_allclose(out2, 3 * (a * 100) + 1)
        print("captured")
        """
    )
    assert "captured" in out


@pytest.mark.gpu
def test_cupy_pinned_memory_from_gpuport(cupy_hooked):
    cupy = cupy_hooked
    m = cupy.cuda.alloc_pinned_memory(1024)
    ctypes.memset(m.ptr, 3, 1024)
    assert ctypes.string_at(m.ptr, 16) == b"\x03" * 16
    x = cupy.arange(256, dtype=cupy.float32)
    assert (x.get() == list(range(256))).all()
    del m
