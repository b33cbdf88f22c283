"""Graphs from Python (docs/design.md#graphs): ``with stream.capture() as g``,
``Graph.capture``, ``graph_capture``, ``g.replay()``, ``g.update()``.

Runs on every backend (``device``: host, cuda:0, rocm:0; each skips with
its backend's reason where unavailable). Work is captured through
``gpuport.runtime`` (launch_kernel, memcpy_async, memset_async) on memory
from ``malloc``/``malloc_pinned``, the host side of copies pinned so the
same test captures on a GPU.
"""

import ctypes
import gc
import threading
import weakref

import numpy as np
import pytest

import gpuport
import gpuport.memory as gm
from gpuport import runtime as rt

N = 256  # u32 elements per test buffer


def fill_fn(dev):
    return rt.module_get_function(rt.module_load(device=dev), "gpuport_fill_u32")


def fill(f, a, value, stream, n=N):
    rt.launch_kernel(f, (n + 255) // 256, 256, [a, ctypes.c_uint64(n), ctypes.c_uint32(value)], stream=stream)


def u32s(a, n=N):
    """The first ``n`` u32 of ``a``, read with a synchronous copy."""
    out = np.zeros(n, dtype=np.uint32)
    rt.memcpy(out, a, out.nbytes)
    return out


def buffer(dev, n=N, value=None):
    a = rt.malloc(4 * n, device=dev).configure(typestr="<u4")
    if value is not None:
        rt.memset(a, value, 4 * n)
    return a


def collect():
    for _ in range(3):
        gc.collect()


def current_bytes(dev):
    """Bytes allocated on ``dev`` now, after collecting garbage and completed work."""
    collect()
    rt.device_synchronize(dev)
    return gm.stats(dev)["current_bytes"]


# ---- capture and replay --------------------------------------------------------------


def test_captured_work_runs_only_at_replay_and_gives_the_results(device):
    f = fill_fn(device)
    s = gpuport.Stream(device)
    a = buffer(device, value=1)
    out = rt.malloc_pinned(4 * N, device=device)
    with s.capture() as g:
        assert isinstance(g, gpuport.Graph) and g.is_capturing and s.is_capturing
        rt.memset_async(a, 0, 4 * N, stream=s)
        fill(f, a, 7, s, n=N // 2)
        rt.memcpy_async(out, a, 4 * N, stream=s)
    assert not s.is_capturing and not g.is_capturing and g.is_captured
    assert g.node_count >= 3 and g.kept_alive == 3
    assert g.device == device and g.stream is s
    s.synchronize()
    assert (u32s(a) == 0x01010101).all(), "captured work must not run at capture time"
    g.replay(s)
    s.synchronize()
    ref = np.zeros(N, dtype=np.uint32)
    ref[: N // 2] = 7
    np.testing.assert_array_equal(u32s(a), ref)
    np.testing.assert_array_equal(u32s(out), ref)


def test_replay_many_times_each_replay_runs(device):
    s = gpuport.Stream(device)
    src, dst = buffer(device, value=0), buffer(device, value=0)
    with s.capture() as g:
        rt.memcpy_async(dst, src, 4 * N, kind="device_to_device", stream=s)
    for i in range(1, 40):
        rt.memset(src, i, 4 * N)  # outside the capture, on the default stream
        g.replay(s)
        s.synchronize()
        assert (u32s(dst) == i * 0x01010101).all(), f"replay {i}"
    rt.memset(src, 0xAB, 4 * N)
    for _ in range(1000):
        g.launch(s)  # CuPy's name
    g.synchronize()
    s.synchronize()
    assert (u32s(dst) == 0xABABABAB).all()


def test_replay_on_the_default_stream_and_other_streams(device):
    f = fill_fn(device)
    a = buffer(device, value=0)
    with gpuport.graph_capture(device=device) as g:  # a new stream, made for the capture
        fill(f, a, 5, g.stream)
    assert isinstance(g.stream, gpuport.Stream) and g.stream.device == device
    g.replay()  # None: the device's default stream
    rt.device_synchronize(device)
    assert (u32s(a) == 5).all()
    rt.memset(a, 0, 4 * N)
    other = gpuport.Stream(device)
    g.replay(stream=other)
    other.synchronize()
    assert (u32s(a) == 5).all()


def test_three_spellings_capture_alike(device):
    f = fill_fn(device)
    s = gpuport.Stream(device)
    a = buffer(device, value=0)
    g1 = gpuport.Graph()
    assert not g1.is_captured and g1.node_count == 0 and g1.device is None and g1.stream is None
    assert "empty" in repr(g1)
    ctx = g1.capture(s, mode="thread_local")
    assert isinstance(ctx, gpuport.GraphCapture) and ctx.mode == "thread_local" and ctx.stream is s
    with ctx as same:
        assert same is g1
        fill(f, a, 1, s)
    with s.capture(mode="relaxed") as g2:
        fill(f, a, 2, s)
    with gpuport.graph_capture(s) as g3:
        fill(f, a, 3, s)
    for g, v in [(g1, 1), (g2, 2), (g3, 3)]:
        assert g.is_captured and g.node_count == 1, repr(g)
        g.replay(s)
        s.synchronize()
        assert (u32s(a) == v).all()
    with pytest.raises(ValueError, match="relaxed"):
        s.capture(mode="loose")


# ---- ending a capture ----------------------------------------------------------------


class Boom(Exception):
    pass


def test_an_exception_in_the_block_ends_the_capture_and_discards_it(device):
    f = fill_fn(device)
    s = gpuport.Stream(device)
    a = buffer(device, value=0)
    before = current_bytes(device)
    b = buffer(device)
    ctx = s.capture()  # held: its drop cannot be what ends the capture
    with pytest.raises(Boom):
        with ctx as g:
            fill(f, a, 9, s)
            rt.memset_async(b, 1, 4 * N, stream=s)
            raise Boom("inside the capture")
    assert not s.is_capturing, "the capture must end when the block raises"
    assert not g.is_capturing and not g.is_captured and g.node_count == 0
    with pytest.raises(gpuport.GraphError, match="holds no captured work") as e:
        g.replay(s)
    assert e.value.kind == "not_captured"
    # No capture left running: waits work, on the stream and device-wide.
    s.synchronize()
    rt.device_synchronize(device)
    assert (u32s(a) == 0).all(), "discarded work must never run"
    # What the discarded capture kept is released.
    del b
    collect()
    assert current_bytes(device) == before
    # The stream captures again, and so does the graph.
    with g.capture(s):
        fill(f, a, 4, s)
    g.replay(s)
    s.synchronize()
    assert (u32s(a) == 4).all()


def test_an_entered_capture_dropped_without_exit_ends(device):
    s = gpuport.Stream(device)
    ctx = s.capture()
    g = ctx.__enter__()
    assert s.is_capturing and g.is_capturing
    del ctx
    collect()
    assert not s.is_capturing and not g.is_capturing and not g.is_captured
    s.synchronize()


def test_a_capture_ends_on_its_thread_unless_relaxed(device):
    s = gpuport.Stream(device)
    ctx = s.capture(mode="thread_local")
    g = ctx.__enter__()
    errs = []

    def end_elsewhere():
        try:
            ctx.__exit__(None, None, None)
        except gpuport.GraphError as e:
            errs.append(e)

    t = threading.Thread(target=end_elsewhere)
    t.start()
    t.join()
    assert len(errs) == 1 and errs[0].kind == "wrong_thread", errs
    assert "thread" in str(errs[0]) and "relaxed" in str(errs[0])
    assert s.is_capturing and g.is_capturing, "refused: the capture keeps running"
    ctx.__exit__(None, None, None)
    assert not s.is_capturing and g.is_captured
    ctx = s.capture(mode="relaxed")
    g2 = ctx.__enter__()
    t = threading.Thread(target=ctx.__exit__, args=(None, None, None))
    t.start()
    t.join()
    assert not s.is_capturing and g2.is_captured


# ---- lifetimes -----------------------------------------------------------------------


def test_arrays_used_in_a_capture_stay_alive_while_the_graph_lives(device):
    f = fill_fn(device)
    s = gpuport.Stream(device)
    size = 1 << 20
    base = current_bytes(device)
    a = rt.malloc(size, device=device).configure(typestr="<u4")
    out = rt.malloc_pinned(size, device=device)
    with s.capture() as g:
        rt.memset_async(a, 0, size, stream=s)
        fill(f, a, 0x5A5A5A5A, s, n=size // 4)
        rt.memcpy_async(out, a, size, stream=s)
    held = current_bytes(device)
    assert held >= base + size
    del a, out
    collect()
    gpuport._core._pending_operations()  # prunes: nothing of the graph's goes
    assert current_bytes(device) == held, "a graph's arrays must not be freed while it lives"
    # Fresh allocations must not get the graph's memory: replay would write them.
    others = [buffer(device, n=size // 4, value=0x11) for _ in range(3)]
    for _ in range(3):
        g.replay(s)
    s.synchronize()
    assert all((u32s(o, n=size // 4) == 0x11111111).all() for o in others), "a replay wrote memory the graph let go"
    del g
    collect()
    del others
    collect()
    assert current_bytes(device) == base, "the graph's arrays go with the graph"


def test_host_objects_given_to_captured_work_are_held_by_the_graph():
    """On the host backend, NumPy arrays can be kernel targets and copy ends: weakrefs show the hold."""
    dev = gpuport.Device("host")
    f = fill_fn(dev)
    s = gpuport.Stream(dev)
    target = np.zeros(N, dtype=np.uint32)
    copy = np.zeros(N, dtype=np.uint32)
    a = buffer(dev)
    with s.capture() as g:
        fill(f, target, 3, s)
        rt.memcpy_async(a, target, target.nbytes, stream=s)  # host to "device"
        rt.memcpy_async(copy, a, target.nbytes, stream=s)  # and back
        # A copy between two host buffers is made by the host at once: not captured.
        msg = refused("not_capturable", rt.memcpy_async, copy, target, target.nbytes, stream=s)
        assert msg.startswith("memcpy_async:") and "host" in msg
        refused("not_capturable", rt.memset_async, copy, 0, 8, stream=s)
    wt, wc = weakref.ref(target), weakref.ref(copy)
    del target, copy
    collect()
    assert wt() is not None and wc() is not None, "the graph must hold the arrays its work uses"
    g.replay(s)
    s.synchronize()
    assert (wt() == 3).all() and (wc() == 3).all()
    g.reset()
    collect()
    assert wt() is None and wc() is None, "reset releases them"
    assert not g.is_captured and g.kept_alive == 0


def test_graphs_and_operands_go_when_the_graph_object_goes(device):
    f = fill_fn(device)
    s = gpuport.Stream(device)
    base = current_bytes(device)
    a = buffer(device)
    with s.capture() as g:
        fill(f, a, 1, s)
    for _ in range(20):
        g.replay(s)
    del a
    del g  # waits for its replays, then releases `a`
    collect()
    assert current_bytes(device) == base


# ---- refused calls -------------------------------------------------------------------


def refused(kind, fn, *args, **kw):
    with pytest.raises(gpuport.GraphError) as e:
        fn(*args, **kw)
    assert e.value.kind == kind, str(e.value)
    msg = str(e.value)
    assert "::" not in msg and "Some(" not in msg, msg
    return msg


def test_waiting_calls_inside_a_capture_are_refused_and_the_capture_survives(device):
    f = fill_fn(device)
    s = gpuport.Stream(device)
    a = buffer(device, value=0)
    host = np.zeros(N, dtype=np.uint32)
    arr = gpuport.MemArray((4,), "float32", device=device)
    with s.capture() as g:
        fill(f, a, 6, s)
        msg = refused("synchronous_call", s.synchronize)
        assert msg.startswith("Stream.synchronize:") and "capturing" in msg and "replay" in msg
        msg = refused("synchronous_call", rt.memcpy, host, a, host.nbytes, stream=s)
        assert msg.startswith("memcpy:")
        refused("synchronous_call", rt.memset, a, 0, 4 * N, stream=s)
        # Global mode: waits for the device or its default stream are refused too.
        msg = refused("synchronous_call", rt.device_synchronize, device)
        if device.backend == "host":
            assert 'mode="global"' in msg and 'mode="relaxed"' in msg, msg
        else:  # a wait for a whole GPU is refused in every mode
            assert 'mode="global"' in msg and "whole device" in msg, msg
        refused("synchronous_call", device.synchronize)
        refused("synchronous_call", rt.memcpy, host, a, host.nbytes)  # default stream
        # An event recorded inside the capture is recorded only at replay.
        ev = s.record_event()
        if device.backend == "host":
            refused("captured_event", ev.synchronize)
        # A host-resident MemArray's kernel would need a copy to the device,
        # and moves are not captured: refused before enqueuing anything.
        msg = refused("not_capturable", arr.add_index, stream=s)
        assert "move the array to the device before the capture" in msg
        refused("not_capturable", arr.move_memory, "device", stream=s, async_copy=True)
        assert s.is_capturing and g.is_capturing
    assert g.is_captured
    rt.memset(a, 0, 4 * N)
    g.replay(s)
    s.synchronize()
    assert (u32s(a) == 6).all(), "the capture survived every refusal"
    arr.add_index(stream=s)  # after the capture, fine
    s.synchronize()


def test_memarray_kernels_are_captured_and_each_replay_updates_the_array(device):
    s = gpuport.Stream(device)
    arr = gpuport.MemArray((2, 3), "float32", device=device)
    arr.move_memory("device", stream=s)
    with s.capture() as g:
        arr.add_index(stream=s)
    assert g.node_count == 1
    assert arr.to_numpy().tolist() == [[0.0] * 3] * 2, "captured, not run"
    index_sums = np.add.outer(np.arange(2), np.arange(3)).astype(np.float32)
    g.replay(s)
    g.replay(s)
    # No synchronize: reading the array waits for the replays that write it.
    assert (arr.to_numpy() == 2 * index_sums).all()
    # Work on another stream in between: the next replay is ordered after it.
    other = gpuport.Stream(device)
    arr.add_index(stream=other)
    g.replay(s)
    assert (arr.to_numpy() == 4 * index_sums).all()
    # The graph keeps the array alive.
    ref = weakref.ref(arr)
    del arr
    collect()
    assert ref() is not None
    g.replay(s)
    s.synchronize()
    g.reset()
    collect()
    assert ref() is None, "reset lets the array go"


def test_relaxed_and_thread_local_captures_let_other_waits_through(device):
    """On the host device the capture modes decide which waits go through.
    On a GPU a wait for the whole device is refused during any capture, in
    every mode: CUDA and HIP would invalidate the capture."""
    gpu = device.backend != "host"

    def device_wide_wait():
        try:
            rt.device_synchronize(device)
        except gpuport.GraphError as e:
            return e
        return None

    s = gpuport.Stream(device)
    a = buffer(device, value=0)
    with s.capture(mode="relaxed"):
        rt.memset_async(a, 1, 4 * N, stream=s)
        if gpu:
            msg = refused("synchronous_call", rt.device_synchronize, device)
            assert "whole device" in msg and 'mode="relaxed"' in msg, msg
        else:
            rt.device_synchronize(device)  # allowed: nothing forbids it in relaxed mode
        refused("synchronous_call", s.synchronize)  # the capturing stream itself: never
    errs = []
    with s.capture(mode="thread_local"):
        refused("synchronous_call", rt.device_synchronize, device)
        t = threading.Thread(target=lambda: errs.append(device_wide_wait()))
        t.start()
        t.join()
    if gpu:
        assert isinstance(errs[0], gpuport.GraphError) and errs[0].kind == "synchronous_call", errs
    else:
        assert errs == [None], "thread_local forbids waits on the capturing thread only"


def test_streams_that_cannot_be_captured(device):
    s = gpuport.Stream(device)
    msg = refused("default_stream", device.default_stream.capture().__enter__)
    assert "gpuport.Stream" in msg
    with s.capture() as g:
        msg = refused("already_capturing", s.capture().__enter__)
        assert "already capturing" in msg
        msg = refused("capturing", g.replay, s)
        assert "still capturing" in msg
        refused("capturing", g.capture(gpuport.Stream(device)).__enter__)
        refused("capturing", g.reset)
    msg = refused("capturing", g.capture(s).__enter__)
    assert "reset()" in msg
    if device.backend == "host":
        # A foreign stream by handle: the host backend's streams have none.
        with pytest.raises(gpuport.InvalidArgumentError, match="no integer handles"):
            gpuport.Graph().capture(12345, device=device)
    assert not s.is_capturing


def test_work_of_another_device_on_a_capturing_stream_is_refused(device):
    other = next((d for d in gpuport.devices() if d != device), None)
    if other is None:
        pytest.skip(f"only {device.spec} is available here: no second device to mismatch")
    s = gpuport.Stream(device)
    f_other = fill_fn(other)
    a_other = buffer(other, value=0)
    with s.capture() as g:
        with pytest.raises(gpuport.DeviceMismatchError):
            fill(f_other, a_other, 1, s)
    assert g.is_captured and g.node_count == 0


def test_replay_on_another_device_is_refused(device):
    other = next((d for d in gpuport.devices() if d != device), None)
    if other is None:
        pytest.skip(f"only {device.spec} is available here: no second device to replay on")
    f = fill_fn(device)
    s = gpuport.Stream(device)
    a = buffer(device, value=0)
    with s.capture() as g:
        fill(f, a, 1, s)
    with pytest.raises(gpuport.DeviceMismatchError) as e:
        g.replay(gpuport.Stream(other))
    msg = str(e.value)
    assert msg.startswith("Graph.replay:") and device.spec in msg and other.spec in msg, msg
    so = gpuport.Stream(other)
    with so.capture() as g_other:
        rt.memset_async(buffer(other), 0, 4 * N, stream=so)
    with pytest.raises(gpuport.DeviceMismatchError, match="Graph.update"):
        g.update(g_other)
    g.replay(s)  # unchanged, still replays on its own device
    s.synchronize()
    assert (u32s(a) == 1).all()


# ---- update ----------------------------------------------------------------------------


def test_update_takes_a_recaptures_arguments_and_refuses_another_shape(device):
    f = fill_fn(device)
    s = gpuport.Stream(device)
    a, b = buffer(device, value=0), buffer(device, value=0)

    def capture(target, value):
        with s.capture() as g:
            fill(f, target, value, s)
        return g

    g = capture(a, 1)
    g.update(capture(a, 2))  # the re-capture may go: g keeps its operands
    collect()
    g.replay(s)
    s.synchronize()
    assert (u32s(a) == 2).all()
    g.update(capture(b, 3))  # another target: the new argument
    base_b = u32s(b)
    assert (base_b == 0).all()
    rt.memset(a, 0, 4 * N)
    g.replay(s)
    s.synchronize()
    assert (u32s(b) == 3).all() and (u32s(a) == 0).all()
    with s.capture() as other_shape:
        rt.memset_async(a, 1, 4 * N, stream=s)
        fill(f, a, 4, s)
    msg = refused("update_refused", g.update, other_shape)
    assert msg.startswith("Graph.update:") and "same" in msg
    rt.memset(b, 0, 4 * N)
    g.replay(s)
    s.synchronize()
    assert (u32s(b) == 3).all(), "a refused update leaves the graph as it was"
    refused("not_captured", g.update, gpuport.Graph())
    refused("not_captured", gpuport.Graph().update, g)
    g.update(g)  # itself: nothing to do


def test_update_keeps_the_new_operands_alive(device):
    f = fill_fn(device)
    s = gpuport.Stream(device)
    base = current_bytes(device)
    a = buffer(device)
    with s.capture() as g:
        fill(f, a, 1, s)
    b = buffer(device, value=0)
    with s.capture() as g2:
        fill(f, b, 8, s)
    held = current_bytes(device)
    g.update(g2)
    del g2, b
    collect()
    g.replay(s)
    s.synchronize()
    assert current_bytes(device) == held, "after update the graph holds the re-capture's arrays"
    del g
    collect()
    assert current_bytes(device) == held - 4 * N
    del a
    collect()
    assert current_bytes(device) == base


# ---- captures begun by torch on gpuport's streams ----------------------------------------
# The pool asks the driver whether a stream captures only once a stream handle
# has left gpuport (or gpuport itself captures): these prove it sees torch's
# captures in both directions. The second runs in a fresh process, where
# nothing but ``Stream.handle`` shares a handle, so a handle handed out
# without telling the pool fails it.


def torch_cuda_or_skip():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    return torch


def test_a_stream_torch_captures_gets_the_graphs_own_memory_until_the_graph_goes(cuda_device):
    import gc

    torch = torch_cuda_or_skip()
    theirs = torch.cuda.Stream()
    ours = gpuport.Stream.external(theirs, device=cuda_device)
    x = torch.zeros(4, device="cuda:0")
    before = gm.stats(cuda_device)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=theirs, capture_error_mode="relaxed"):
        x += 1
        captured = gm.alloc(4096, stream=ours, device=cuda_device)
        address = captured.ptr
        captured.free()  # back to the graph's pool, for this capture only
    outside = [gm.alloc(4096, stream=ours, device=cuda_device) for _ in range(8)]
    assert all(o.ptr != address for o in outside), "the graph's memory was handed out while the graph lives"
    assert gm.stats(cuda_device)["graph_pools"] == before["graph_pools"] + 1
    g.replay()
    torch.cuda.synchronize()
    assert x.tolist() == [1.0] * 4
    for o in outside:
        o.free()
    del g  # torch's graph goes: the driver releases the pool's hold
    gc.collect()
    torch.cuda.synchronize()
    # The driver releases the hold on a thread of its own, soon after; the
    # pool reclaims at its next call.
    import time

    deadline = time.monotonic() + 10
    while gm.stats(cuda_device)["graph_pools_released"] == before["graph_pools_released"]:
        assert time.monotonic() < deadline, "the graph's pool was not released after the graph went"
        gm.alloc(4096, stream=ours, device=cuda_device).free()
        time.sleep(0.01)
    assert gm.stats(cuda_device)["graph_pools_released"] == before["graph_pools_released"] + 1


OWN_STREAM_CAPTURED_BY_TORCH = """
import torch, gpuport, gpuport.memory as gm
ours = gpuport.Stream("cuda:0")
theirs = torch.cuda.ExternalStream(ours.handle)
x = torch.zeros(4, device="cuda:0")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g, stream=theirs, capture_error_mode="relaxed"):
    x += 1
    a = gm.alloc(4096, stream=ours, device="cuda:0")
    print("served", gm.stats("cuda:0")["graph_pools"])
"""


def test_its_own_stream_captured_by_torch_gets_a_graph_pool(cuda_device):
    torch_cuda_or_skip()
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", OWN_STREAM_CAPTURED_BY_TORCH], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["served", "1"], r.stdout + r.stderr
