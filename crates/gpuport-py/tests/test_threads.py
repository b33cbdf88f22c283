"""One MemArray (and one adapter) shared between threads (issue 15, item 1).

Concurrent calls on one object serialize: no PyO3 borrow error or panic
(``pyo3_runtime.PanicException`` is a BaseException that ``except
Exception`` misses) may escape, no ``get_dlpack`` lock may stay held, the
values stay right, and every export and allocation is returned at the end.
A ``get_dlpack`` block still locks the array for its holder: other threads
get a ``LockError`` (a ``GpuError``) saying so, in Python terms.
"""

import random
import threading
import time

import numpy as np
import pytest

import gpuport
import gpuport.memory as gm
from gpuport import runtime as rt

from conftest import collect, stats

THREADS = 8
SECONDS = 2.0
RUST_FORMS = ("Some(", "LockId", "exit()", "Location::", "--features", "::")


def _no_rust(msg):
    for form in RUST_FORMS:
        assert form not in msg, f"{form!r} in {msg!r}"


def _run_threads(target, n=THREADS):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - PanicException is a BaseException; record everything
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
        assert not t.is_alive(), "a thread is stuck (deadlock?)"
    return errors


def test_eight_threads_mix_contexts_kernels_reads_and_moves(device):
    """On every backend (host, cuda:0, rocm:0)."""
    spec = device.spec
    collect()
    exports_before = stats()["exports_live"]
    mem_before = gm.stats(spec)["current_bytes"]
    shape = (48, 33)
    idx = np.indices(shape).sum(axis=0).astype(np.int64)
    init = (np.arange(idx.size, dtype=np.int64) % 50).reshape(shape)
    a = gpuport.MemArray(shape, "int64", device=spec)
    a.read_numpy_array(init)

    adds = 0
    counts = {"ctx": 0, "add": 0, "read": 0, "move": 0, "locked": 0}
    tally = threading.Lock()
    barrier = threading.Barrier(THREADS)
    stop = [0.0]

    def worker(seed):
        nonlocal adds
        rng = random.Random(seed)
        barrier.wait()
        if seed == 0:
            stop[0] = time.monotonic() + SECONDS
        while stop[0] == 0.0:
            time.sleep(0.001)
        while time.monotonic() < stop[0]:
            op = rng.choice(["ctx", "ctx", "add", "read", "move"])
            try:
                if op == "ctx":
                    with a.get_dlpack("host") as d:
                        x = np.from_dlpack(d).copy()
                        assert a.lock_id == d.lock_id
                    # Inside the block nobody else could change the array:
                    # one consistent state init + k * idx.
                    k = int(x[0, 1] - init[0, 1])
                    np.testing.assert_array_equal(x, init + k * idx)
                elif op == "add":
                    a.add_index()
                    with tally:
                        adds += 1
                elif op == "read":
                    x = a.to_numpy()
                    assert x.shape == shape and x.dtype == np.int64
                else:
                    a.move_memory(rng.choice(["host", "device"]))
                with tally:
                    counts[op] += 1
            except gpuport.LockError as e:
                # Another thread's get_dlpack block holds the array.
                assert "get_dlpack" in str(e), str(e)
                _no_rust(str(e))
                with tally:
                    counts["locked"] += 1

    errors = _run_threads(worker)
    assert not errors, [f"{type(e).__module__}.{type(e).__name__}: {e}" for e in errors]
    assert a.lock_id is None, "a get_dlpack lock stayed held"
    assert counts["ctx"] > 0 and counts["add"] > 0, counts
    np.testing.assert_array_equal(a.to_numpy(), init + adds * idx)
    with a.get_dlpack("host") as d:  # still usable
        np.testing.assert_array_equal(np.from_dlpack(d), init + adds * idx)
    del a, d
    collect()
    rt.device_synchronize(spec)
    assert stats()["exports_live"] == exports_before
    assert gm.stats(spec)["current_bytes"] == mem_before


def test_with_block_releases_its_lock_while_another_thread_keeps_the_array_busy(device):
    """``__enter__``/``__exit__`` wait for a call running in another thread
    (GIL released) instead of failing, and ``__exit__`` always unlocks, also
    when the block raises."""
    n = 1 << 21
    a = gpuport.MemArray((n,), "float32", device=device)
    stop = threading.Event()
    busy_errors = []

    def busy(_):
        while not stop.is_set():
            try:
                a.add_index()
                a.move_memory("host")
            except gpuport.LockError:
                pass
            except BaseException as e:  # noqa: BLE001
                busy_errors.append(e)
                return

    t = threading.Thread(target=busy, args=(0,))
    t.start()
    try:
        deadline = time.monotonic() + SECONDS
        rounds = 0
        while time.monotonic() < deadline:
            with pytest.raises(KeyError):
                with a.get_dlpack():
                    raise KeyError("boom")
            assert a.lock_id is None
            with a.get_dlpack("host") as d:
                assert a.lock_id == d.lock_id
            assert a.lock_id is None
            rounds += 1
        assert rounds > 0
    finally:
        stop.set()
        t.join(60)
    assert not busy_errors, busy_errors
    assert a.lock_id is None


def test_nested_and_repeated_context_use_never_leaves_a_lock(device):
    a = gpuport.MemArray((4,), "float32", device=device)
    with a.get_dlpack() as outer:
        with pytest.raises(gpuport.LockError) as e:
            with a.get_dlpack():
                pass
        _no_rust(str(e.value))
        assert a.lock_id == outer.lock_id
    assert a.lock_id is None
    d = a.get_dlpack()
    d.__exit__(None, None, None)  # exit without enter: nothing to release
    assert a.lock_id is None
    with d:
        pass
    d.__exit__(None, None, None)  # a second exit: nothing more to release
    assert a.lock_id is None
    a.add_index()


def test_reentrant_index_on_a_device_array_is_not_an_in_use_error(device):
    """``DeviceArray.__getitem__`` reads slice bounds through ``__index__``
    (Python code), which may use the same adapter again, here or in another
    thread."""
    d = rt.malloc(64, device=device)
    d.configure(shape=(4, 4), typestr="<f4")

    class Idx:
        def __index__(self):
            d.configure(shape=(4, 4), typestr="<f4")  # re-enters the adapter
            assert int(d) != 0 and d.shape == [4, 4]
            return 1

    rows = d[Idx():]
    assert rows.shape == [3, 4] and int(rows) == int(d) + 16


def test_threads_share_adapters(device):
    d = rt.malloc(1 << 12, device=device)
    src = np.arange(1 << 10, dtype=np.float32)
    stop = time.monotonic() + SECONDS / 2

    def worker(seed):
        rng = random.Random(seed)
        while time.monotonic() < stop:
            op = rng.randrange(4)
            if op == 0:
                d.configure(shape=(1 << 10,), typestr="<f4")
            elif op == 1:
                assert d[rng.randrange(1 << 10)].nbytes == 4
            elif op == 2:
                rt.memcpy(d, src, src.nbytes)
            else:
                out = np.zeros_like(src)
                rt.memcpy(out, d, out.nbytes)
                np.testing.assert_array_equal(out, src)

    d.configure(shape=(1 << 10,), typestr="<f4")
    rt.memcpy(d, src, src.nbytes)
    errors = _run_threads(worker)
    assert not errors, [f"{type(e).__name__}: {e}" for e in errors]


def test_a_consumer_told_gpu_memory_gets_it_though_the_array_moved_to_the_host_since(gpu_device):
    """``__dlpack_device__`` said GPU; another thread moved the array to the
    host before ``__dlpack__(stream=...)``: the export is the device copy
    (brought back), not a refusal."""
    a = gpuport.MemArray((64,), "float32", gpu_device)
    a.read_numpy_array(np.arange(64, dtype=np.float32))
    a.move_memory("device")
    told = a.__dlpack_device__()
    assert told[0] in (2, 10), told  # kDLCUDA or kDLROCM
    a.move_memory("host")  # what another thread did in between
    stream = 1 if told[0] == 2 else 0

    class Consumer:
        def __dlpack_device__(self):
            return told

        def __dlpack__(self, **kw):
            return a.__dlpack__(stream=stream, max_version=(1, 0))

    b = gpuport.from_dlpack(Consumer())
    assert b.__dlpack_device__() == told
    assert a.__dlpack_device__() == told, "the device copy was brought back"
    back = np.zeros(64, dtype=np.float32)
    rt.memcpy(back, b, back.nbytes)
    assert np.array_equal(back, np.arange(64, dtype=np.float32))


def test_exports_to_a_gpu_consumer_while_other_threads_move_the_array(gpu_device):
    """Threads export (as torch does: ``__dlpack_device__``, then
    ``__dlpack__`` with a stream) while others move the same arrays: every
    export is on the device it was told, and no error escapes."""
    arrays = [gpuport.MemArray((1024,), "float32", gpu_device) for _ in range(4)]
    for x in arrays:
        x.read_numpy_array(np.ones(1024, dtype=np.float32))
    deadline = time.monotonic() + SECONDS
    wrong = []

    def work(i):
        rng = random.Random(i)
        while time.monotonic() < deadline:
            x = rng.choice(arrays)
            if i % 2:
                x.move_memory(rng.choice(["host", "device"]))
                continue
            told = x.__dlpack_device__()
            if told[0] not in (2, 10):
                continue
            cap = x.__dlpack__(stream=1 if told[0] == 2 else 0, max_version=(1, 0))

            class Once:
                def __dlpack_device__(self):
                    return told

                def __dlpack__(self, **kw):
                    return cap

            got = gpuport.from_dlpack(Once()).__dlpack_device__()
            if got != told:
                wrong.append((told, got))

    errors = _run_threads(work)
    assert not errors, errors[:3]
    assert not wrong, wrong[:3]


def test_allocations_and_frees_while_another_thread_captures_their_stream(device):
    """``gpuport.memory.alloc`` and ``free`` keep the GIL only where they
    cannot wait (``src/memory/no_wait.rs``): on a stream another thread
    keeps beginning and ending captures on, every call returns, none
    deadlocks, and every byte goes back once the graphs are gone."""
    s = gpuport.Stream(device)
    before = gm.stats(device)["current_bytes"]
    stop = threading.Event()

    def capture_loop():
        while not stop.is_set():
            with s.capture(mode="thread_local"):
                time.sleep(0.0005)

    def allocate(i):
        end = time.monotonic() + 1.0
        kept = []
        while time.monotonic() < end:
            a = gm.alloc(4096 * (1 + i % 3), s, device)
            if random.random() < 0.5:
                a.free()
            else:
                kept.append(a)  # collected below, in another order
            if len(kept) > 16:
                del kept[:8]

    capturer = threading.Thread(target=capture_loop)
    capturer.start()
    try:
        errors = _run_threads(allocate, n=6)
    finally:
        stop.set()
        capturer.join(30)
    assert not capturer.is_alive(), "the capturing thread is stuck"
    assert not errors, [repr(e) for e in errors[:3]]
    collect()
    s.synchronize()
    assert gm.stats(device)["current_bytes"] == before


def test_threads_share_one_device_object_to_allocate_and_race_to_free(device):
    """``gpuport.memory.alloc`` with a ``Device`` uses the default stream and
    resources the object keeps (``crates/gpuport-py/src/convert/device.rs``):
    threads sharing one object, and racing to free the same allocations,
    leave every byte back in the pool, each allocation freed once."""
    dev = gpuport.Device(device)
    before = gm.stats(dev)["current_bytes"]
    shared = [gm.alloc(4096, None, dev) for _ in range(64)]

    def work(i):
        for a in shared:
            a.free()
        for _ in range(200):
            gm.alloc(4096 * (1 + i % 3), None, dev).free()

    errors = _run_threads(work, n=6)
    assert not errors, [repr(e) for e in errors[:3]]
    assert all(a.freed for a in shared)
    collect()
    dev.synchronize()
    assert gm.stats(dev)["current_bytes"] == before
