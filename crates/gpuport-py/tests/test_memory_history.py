"""The allocation history from Python: ``record_memory_history``,
``snapshot``, ``dump_snapshot`` and out-of-memory observers with a snapshot.

The checks on the snapshot are those ``torch.cuda._memory_viz`` makes of
one (``segsum``, ``trace``, ``_block_extra``), so the file loads in
PyTorch's viewer; ``test_torch_memory_viz_reads_a_dump`` runs the viewer's
own code where torch and a CUDA device are present."""

import os
import pickle

import pytest

import gpuport
import gpuport.memory as gm

from conftest import open_or_skip

TRACE_ACTIONS = {
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom"
}


@pytest.fixture
def recording():
    gm.record_memory_history(None, clear_history=True)
    yield
    gm.record_memory_history(None, clear_history=True)


def allocate_here(device, size):
    return gm.alloc(size, device=device)


def check_viewer_fields(snap):
    """What _memory_viz's segment and trace plots read from a snapshot."""
    assert set(snap) >= {"segments", "device_traces"}
    for seg in snap["segments"]:
        for key in ("device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                    "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"):
            assert key in seg, key
        assert seg["segment_type"] in ("small", "large")
        assert isinstance(seg["is_expandable"], bool) and isinstance(seg["stream"], int)
        offset, allocated, free_internal, free_external = 0, 0, 0, 0
        for b in seg["blocks"]:
            assert b["address"] == seg["address"] + offset
            assert b["state"] in ("active_allocated", "active_awaiting_free", "inactive")
            assert isinstance(b["frames"], list)
            if b["state"] == "active_allocated":
                allocated += b["requested_size"]
                free_internal += b["size"] - b["requested_size"]
            else:
                free_external += b["size"]
            offset += b["size"]
        # segsum's invariant.
        assert free_internal + free_external + allocated == seg["total_size"]
        assert seg["allocated_size"] == sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
    for trace in snap["device_traces"]:
        for e in trace:
            assert e["action"] in TRACE_ACTIONS
            for key in ("addr", "size", "stream", "time_us", "frames"):
                assert key in e, key
            if e["action"] == "oom":
                assert "device_free" in e
            for f in e["frames"]:
                assert isinstance(f["filename"], str) and isinstance(f["line"], int) and isinstance(f["name"], str)
    pickle.dumps(snap)  # what _format_viz does first


def test_allocations_are_recorded_with_their_python_frames(device, recording):
    gm.record_memory_history(max_entries=1000)
    a = allocate_here(device, 4096)
    live = gm.snapshot(device.backend)
    check_viewer_fields(live)
    blocks = [b for s in live["segments"] for b in s["blocks"] if b["address"] == a.ptr]
    assert blocks and blocks[0]["state"] == "active_allocated" and blocks[0]["requested_size"] == 4096
    assert blocks[0]["frames"][0]["name"] == "allocate_here"
    a.free()
    gm.record_memory_history(None)
    snap = gm.snapshot(device.backend)
    check_viewer_fields(snap)
    trace = snap["device_traces"][device.ordinal]
    mine = [e for e in trace if e["addr"] == a.ptr and e["size"] == 4096]
    assert [e["action"] for e in mine][-3:] == ["alloc", "free_requested", "free_completed"]
    assert mine[-3]["frames"][0] == {
        "filename": __file__, "line": mine[-3]["frames"][0]["line"], "name": "allocate_here"
    }
    # Recording is off now: nothing more is added.
    gm.alloc(4096, device=device).free()
    assert len(gm.snapshot(device.backend)["device_traces"][device.ordinal]) == len(trace)


def test_snapshot_segments_add_up_to_the_pools_stats(device):
    """The snapshot's segments are the pool's own: their sizes add up to
    ``stats()``'s, and each says its class as the pool cut it."""
    small = gm.alloc(1000, device=device)
    large = gm.alloc(3 << 20, device=device)
    stats = gm.stats(device)
    snap = gm.snapshot(device.backend)
    check_viewer_fields(snap)
    segs = [s for s in snap["segments"] if s["device"] == device.ordinal]
    assert len(segs) == stats["pool_segments"]
    assert sum(s["total_size"] for s in segs) == stats["pool_reserved"]
    assert sum(s["allocated_size"] for s in segs) == stats["pool_in_use"]
    assert sum(s["requested_size"] for s in segs) == stats["current_bytes"]

    def segment_of(ptr):
        return next(s for s in segs if any(b["address"] == ptr for b in s["blocks"]))

    s, l = segment_of(small.ptr), segment_of(large.ptr)
    assert (s["segment_type"], l["segment_type"]) == ("small", "large")
    expandable = stats["pool_expandable"] in (1, 2)
    assert s["is_expandable"] == l["is_expandable"] == expandable
    block = next(b for b in s["blocks"] if b["address"] == small.ptr)
    assert (block["size"], block["requested_size"], block["state"]) == (1024, 1000, "active_allocated")
    small.free()
    large.free()


def test_a_graph_pools_segments_carry_its_pool_id(device):
    """As PyTorch's snapshot: ``segment_pool_id`` is (0, 0) for the pool's
    shared memory and (capture id, 0) for a capture's private (graph) pool,
    one id per capture."""
    s = gpuport.Stream(device)
    shared = gm.alloc(4096, stream=s, device=device)
    captured = []
    graphs = []
    for _ in range(2):
        with s.capture() as g:
            captured.append([gm.alloc(4096, stream=s, device=device) for _ in range(2)])
        graphs.append(g)
    snap = gm.snapshot(device.backend)
    check_viewer_fields(snap)
    segs = [seg for seg in snap["segments"] if seg["device"] == device.ordinal]

    def pool_id(ptr):
        return next(seg for seg in segs if any(b["address"] == ptr for b in seg["blocks"]))["segment_pool_id"]

    assert pool_id(shared.ptr) == (0, 0)
    ids = [{pool_id(a.ptr) for a in allocations} for allocations in captured]
    assert all(len(i) == 1 for i in ids), f"one pool id per capture: {ids}"
    (first,), (second,) = ids
    assert first[0] != 0 and second[0] != 0 and first[1] == second[1] == 0, ids
    assert first != second, "two captures, two graph pools"
    for a in [shared] + [a for allocations in captured for a in allocations]:
        a.free()
    del graphs


def test_the_history_keeps_at_most_max_entries(recording):
    gm.record_memory_history(max_entries=5, stacks=None)
    for _ in range(10):
        gm.alloc(512, device="host").free()
    gm.record_memory_history(None)
    trace = gm.snapshot("host")["device_traces"][0]
    assert len(trace) == 5
    assert all(e["frames"] == [] for e in trace)


def test_dump_snapshot_writes_the_pickle_and_an_unwritable_path_raises_oserror(tmp_path, recording):
    gm.record_memory_history()
    gm.alloc(1 << 20, device="host").free()
    gm.record_memory_history(None)
    before = gm.snapshot("host")
    with pytest.raises(OSError):
        gm.dump_snapshot(tmp_path / "missing" / "snap.pickle", backend="host")
    assert gm.snapshot("host")["device_traces"] == before["device_traces"], "the history is kept"
    path = tmp_path / "snap.pickle"
    gm.dump_snapshot(path, backend="host")
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    check_viewer_fields(loaded)
    assert loaded["device_traces"] == before["device_traces"]


def test_bad_arguments_are_refused(recording):
    with pytest.raises(ValueError):
        gm.record_memory_history("everything")
    with pytest.raises(ValueError):
        gm.record_memory_history(stacks="cpp")
    with pytest.raises(ValueError):
        gm.snapshot("tpu")


def test_an_out_of_memory_observer_gets_a_snapshot_with_the_failure(recording):
    seen = []
    observer = gm.on_out_of_memory(lambda *args: seen.append(args), with_snapshot=True)
    gm.record_memory_history()
    try:
        with pytest.raises(MemoryError):
            gm.alloc(1 << 62, device="host")
    finally:
        gm.record_memory_history(None)
        assert observer.remove()
    device, size, in_capture, report, snap = seen[-1]
    assert (device, size, in_capture) == ("host", 1 << 62, False)
    check_viewer_fields(snap)
    ooms = [e for t in snap["device_traces"] for e in t if e["action"] == "oom" and e["size"] == 1 << 62]
    assert ooms and ooms[-1]["frames"], "the failing call's Python stack"


def test_torch_memory_viz_reads_a_dump(tmp_path, recording):
    """GPU only: the dumped file goes through torch's own viewer code."""
    dev = open_or_skip("cuda:0")
    try:
        from torch.cuda import _memory_viz
    except Exception as e:  # noqa: BLE001 - any import failure means torch is not usable here
        pytest.skip(f"torch is not usable here: {e}")
    gm.record_memory_history()
    keep = gm.alloc(3 << 20, device=dev)
    gm.alloc(1 << 20, device=dev).free()
    gm.record_memory_history(None)
    path = tmp_path / "snap.pickle"
    gm.dump_snapshot(path, backend="cuda")
    with open(path, "rb") as f:
        data = pickle.load(f)
    assert "Device 0" in _memory_viz.trace(data)
    assert "segments:" in _memory_viz.segsum(data)
    assert "<html>" in _memory_viz.trace_plot(data)
    assert "<html>" in _memory_viz.segment_plot(data)
    keep.free()
    assert os.path.getsize(path) > 0


def test_stacks_of_calls_with_no_python_caller_are_empty_not_an_error(monkeypatch):
    """The pool asks for the Python stack from allocations that C code makes
    (PyTorch's autograd threads, through the torch hook). A function that C
    calls with no Python frame above it has no caller: its stack is empty,
    not a ValueError from ``sys._getframe``."""
    import _thread
    import sys
    import time

    raised = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: raised.append(u.exc_value))
    before = _thread._count()
    # The new thread's first frame is _python_frames itself, called from C.
    _thread.start_new_thread(gm._python_frames, ())
    deadline = time.monotonic() + 10
    time.sleep(0.05)
    while _thread._count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert not raised, raised
