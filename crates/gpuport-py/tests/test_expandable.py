"""Expandable segments from Python: ``GPUPORT_POOL=expandable`` (read once,
so each case runs in a fresh process) and ``gpuport.memory.stats``'s
``pool_expandable``; the host backend emulates them, GPU cases skip with a
reason where absent. What is reported of them: reserved is the bytes mapped,
not the addresses reserved, in ``stats()``, the snapshot, Numba's
``get_memory_info`` and CuPy's ``OutOfMemoryError``."""

import json
import os
import subprocess
import sys

import pytest

CHILD = r"""
import json, sys
import gpuport.memory as gm
dev = sys.argv[1]
before = gm.stats(dev)
blocks = [gm.alloc(3 << 20, None, dev) for _ in range(4)]
grown = gm.stats(dev)
for b in blocks:
    b.free()
gm.reset(dev)
print(json.dumps({"mode": before["pool_expandable"], "grown": grown["pool_reserved"],
                  "segments": grown["pool_segments"], "after": gm.stats(dev)["pool_reserved"]}))
"""


def run(device, pool, child=CHILD):
    env = dict(os.environ)
    env.pop("GPUPORT_POOL", None)
    if pool is not None:
        env["GPUPORT_POOL"] = pool
    out = subprocess.run([sys.executable, "-c", child, device.spec], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_expandable_pool_grows_one_segment_and_trims_to_nothing(device):
    r = run(device, "expandable")
    assert r["mode"] in (1, 2, -1), r
    if r["mode"] == -1:
        return  # fell back: the device has no virtual memory management; the stats say so
    assert r["segments"] == 1, r
    assert r["grown"] <= 16 << 20, r  # 4 x 3 MiB in 2 MiB granules, not a 20 MiB segment
    assert r["after"] == 0, r


def test_without_the_variable_the_pool_keeps_plain_segments(device):
    r = run(device, None)
    assert r["mode"] == 0, r
    assert r["grown"] == 20 << 20, r


SNAPSHOT_CHILD = r"""
import json, sys
import gpuport.memory as gm
dev = sys.argv[1]
backend = dev.split(":")[0]
gm.record_memory_history(stacks=None)
keep = [gm.alloc(1000, None, dev), gm.alloc(3 << 20, None, dev)]
stats = gm.stats(dev)
segs = gm.snapshot(backend)["segments"]
for b in keep:
    b.free()
gm.reset(dev)
gm.record_memory_history(None)
trace = [e for t in gm.snapshot(backend)["device_traces"] for e in t]
print(json.dumps({
    "mode": stats["pool_expandable"], "reserved": stats["pool_reserved"], "space": stats["pool_address_space"],
    "segments": stats["pool_segments"], "total": sum(s["total_size"] for s in segs),
    "allocated": sum(s["allocated_size"] for s in segs), "in_use": stats["pool_in_use"],
    "expandable": [s["is_expandable"] for s in segs], "types": sorted(s["segment_type"] for s in segs),
    "actions": [e["action"] for e in trace],
    "mapped": sum(e["size"] for e in trace if e["action"] == "segment_map"),
    "unmapped": sum(e["size"] for e in trace if e["action"] == "segment_unmap"),
}))
"""


def test_an_expandable_pools_snapshot_and_history_show_what_is_mapped(device):
    r = run(device, "expandable", SNAPSHOT_CHILD)
    if r["mode"] == -1:
        pytest.skip(f"{device.spec}: expandable segments fell back to plain segments here")
    assert r["mode"] in (1, 2), r
    assert r["expandable"] == [True, True] and r["types"] == ["large", "small"], r
    assert r["total"] == r["reserved"] < r["space"], r
    assert (r["segments"], r["allocated"]) == (2, r["in_use"]), r
    # Growths are maps and trims unmaps (PyTorch's names), never plain segments.
    assert "segment_alloc" not in r["actions"] and "segment_free" not in r["actions"], r
    assert r["mapped"] == r["reserved"] == r["unmapped"], r


NUMBA_CHILD = r"""
import json
from numba import cuda
import gpuport.numba, gpuport.memory as gm
gpuport.numba.use_gpuport_for_numba("cuda:0")
mm = cuda.current_context().memory_manager
free0, total = mm.get_memory_info()
a = cuda.device_array(3 << 20, dtype="u1")
free1, _ = mm.get_memory_info()
st = gm.stats("cuda:0")
print(json.dumps({"mode": st["pool_expandable"], "drop": free0 - free1, "reserved": st["pool_reserved"],
                  "space": st["pool_address_space"], "total": total}))
"""


def test_numba_memory_info_counts_what_an_expandable_pool_maps(cuda_device):
    pytest.importorskip("numba.cuda")
    r = run(cuda_device, "expandable", NUMBA_CHILD)
    if r["mode"] != 1:
        pytest.skip(f"expandable segments are not on virtual memory here (mode {r['mode']})")
    # The 3 MiB array mapped a few granules; the addresses reserved (half the
    # device's memory a size class) are no memory, and the driver's free
    # figure says so.
    assert 3 << 20 <= r["reserved"] < 16 << 20 and r["space"] >= r["total"] // 2, r
    assert r["reserved"] <= r["drop"] <= r["reserved"] + (64 << 20), r


CUPY_CHILD = r"""
import json
import cupy
import gpuport.cupy, gpuport.memory as gm
gpuport.cupy.use_gpuport_for_cupy(pinned=False)
x = cupy.ones(3 << 20, dtype=cupy.uint8)
held = gpuport.cupy.held_bytes("cuda:0")
st = gm.stats("cuda:0")
try:
    cupy.empty(1 << 40, dtype=cupy.uint8)
    message = None
except cupy.cuda.memory.OutOfMemoryError as e:
    message = str(e)
print(json.dumps({"mode": st["pool_expandable"], "held": held, "reserved": st["pool_reserved"],
                  "space": st["pool_address_space"], "message": message}))
"""


def test_cupy_reports_the_bytes_an_expandable_pool_maps(cuda_device):
    pytest.importorskip("cupy")
    r = run(cuda_device, "expandable", CUPY_CHILD)
    if r["mode"] != 1:
        pytest.skip(f"expandable segments are not on virtual memory here (mode {r['mode']})")
    assert r["held"] == r["reserved"] < r["space"], r
    assert r["message"] is not None, "a 1 TiB array must not fit"
    assert f"{r['held']:,}" in r["message"] or str(r["held"]) in r["message"], r
