"""Driver calls that follow from the design, counted (issue 37), per
operation, 500 times:

- a Python alloc+free from the pool, and ``__dlpack__`` of an idle device
  array, make no CUDA driver call;
- ``MemArray.add_index`` on a device-resident array makes one
  current-context check (the launch and the pending event's record share a
  bind scope, ``src/backend/bound.rs``), the launch and the record: the
  event comes from the device's pool and the previous one goes back to it
  (``src/backend/gpu/event_pool.rs``), so no create, destroy or capture-mode
  exchange;
- ``gpuport.asarray`` of a 1 MiB NumPy array, dropped: one context check
  for the upload's four pieces and its record, and one for the drop's wait
  for the upload, which alone exchanges the capture mode (a pair: relaxed,
  then back; ``synchronize_event`` in ``src/backend/gpu/device.rs`` says why);
- a replay of a captured ``add_index``: one context check for the launch
  and its two records;
- ``add_index``, then ``__dlpack__(stream=other)`` of the busy array: the
  kernel's three calls, then the export's seven (three context checks,
  three capture-state queries: ``cuStreamIsCapturing`` twice and
  ``cuStreamGetCaptureInfo``, and the consumer stream's wait on the
  kernel's event: no event is created, torch creates one per export);
- ``add_index``, then ``move_memory("host")``: the kernel's three calls,
  then the move's eight (three context checks, the copy, its record, and
  the wait for it under a relaxed capture mode, a pair of exchanges).

``benches/driver_calls/count.c`` is preloaded into a child process per
operation (as ``benches/driver_calls.py`` does) and counts every ``cu*``
function looked up through ``dlsym`` or ``cuGetProcAddress``; a stream
synchronize shows the counter sees gpuport's calls. Set
``GPUPORT_DRIVER_COUNTER`` to a built counter, or let the test build it from
the repository with the C compiler; otherwise it skips with the reason.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

SOURCE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "benches", "driver_calls", "count.c")

CHILD = r"""
import ctypes, json, os, sys
import numpy as np
import gpuport, gpuport.memory as gm
counter = ctypes.CDLL(sys.argv[1])
def snapshot():
    path = f"/tmp/gpuport-driver-calls-{os.getpid()}.txt"
    open(path, "w").close()
    counter.gp_count_dump(path.encode())
    counts = dict(l.split() for l in open(path) if l.strip() not in ("", "--"))
    os.unlink(path)
    return {k: int(v) for k, v in counts.items()}
dev = gpuport.Device(sys.argv[2])
name = sys.argv[3]
if name == "alloc_free":
    f = lambda: gm.alloc(1 << 20, None, dev).free()
elif name == "export_idle":
    a = gpuport.asarray(np.zeros(1 << 18, np.float32), device=dev)
    a.synchronize()
    f = lambda: a.__dlpack__()
elif name == "synchronize":
    f = dev.default_stream.synchronize
elif name == "kernel":
    s = gpuport.Stream(dev)
    k = gpuport.MemArray((1 << 18,), "float32", device=dev)
    k.move_memory("device", stream=s)
    s.synchronize()
    f = lambda: k.add_index(stream=s)
elif name == "new_from_host":
    x = np.zeros(1 << 18, np.float32)
    f = lambda: gpuport.asarray(x, device=dev)
elif name == "graph_replay":
    s = gpuport.Stream(dev)
    g_arr = gpuport.MemArray((1 << 18,), "float32", device=dev)
    g_arr.move_memory("device", stream=s)
    s.synchronize()
    with s.capture() as g:
        g_arr.add_index(stream=s)
    f = lambda: g.replay(s)
elif name in ("kernel_export_busy", "kernel_move_to_host"):
    s, other = gpuport.Stream(dev), gpuport.Stream(dev)
    k = gpuport.MemArray((1 << 18,), "float32", device=dev)
    k.move_memory("device", stream=s)
    s.synchronize()
    if name == "kernel_export_busy":
        f = lambda: (k.add_index(stream=s), k.__dlpack__(stream=other.handle))
    else:
        f = lambda: (k.add_index(stream=s), k.move_memory("host", stream=s))
for _ in range(50):
    f()
before = snapshot()
for _ in range(500):
    f()
after = snapshot()
print(json.dumps({k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}))
"""

# What 500 calls of each operation make, by driver function.
EXPECTED = {
    "alloc_free": {},
    "export_idle": {},
    "kernel": {"cuCtxGetCurrent": 500, "cuLaunchKernel": 500, "cuEventRecord": 500},
    "new_from_host": {
        "cuCtxGetCurrent": 1000,
        "cuMemcpyHtoDAsync_v2": 2000,
        "cuThreadExchangeStreamCaptureMode": 1000,
        "cuEventRecord": 500,
        "cuEventSynchronize": 500,
    },
    "graph_replay": {"cuCtxGetCurrent": 500, "cuEventRecord": 1000, "cuGraphLaunch": 500},
    "kernel_export_busy": {
        "cuCtxGetCurrent": 2000,
        "cuLaunchKernel": 500,
        "cuEventRecord": 500,
        "cuStreamIsCapturing": 1000,
        "cuStreamGetCaptureInfo_v3": 500,
        "cuStreamWaitEvent": 500,
    },
    "kernel_move_to_host": {
        "cuCtxGetCurrent": 2000,
        "cuLaunchKernel": 500,
        "cuEventRecord": 1000,
        "cuThreadExchangeStreamCaptureMode": 1000,
        "cuEventSynchronize": 500,
        "cuMemcpyDtoHAsync_v2": 500,
    },
}


def counter_library(tmp_path) -> str:
    given = os.environ.get("GPUPORT_DRIVER_COUNTER")
    if given:
        return os.path.abspath(given)
    if not os.path.exists(SOURCE):
        pytest.skip("no driver-call counter: set GPUPORT_DRIVER_COUNTER (benches/driver_calls/count.c, built)")
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build benches/driver_calls/count.c; set GPUPORT_DRIVER_COUNTER")
    out = str(tmp_path / "libcount.so")
    r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out, SOURCE, "-ldl"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"{cc} could not build the driver-call counter: {r.stderr.strip()[:300]}")
    return out


def calls_of(counter: str, spec: str, name: str) -> dict:
    env = dict(os.environ, LD_PRELOAD=counter)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, counter, spec, name], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_driver_calls_per_operation_are_the_designed_ones(cuda_device, tmp_path, name):
    counter = counter_library(tmp_path)
    synchronize = calls_of(counter, cuda_device.spec, "synchronize")
    assert synchronize.get("cuStreamSynchronize") == 500, f"the counter does not see gpuport: {synchronize}"
    calls = calls_of(counter, cuda_device.spec, name)
    assert calls == EXPECTED[name], f"500 calls of {name}: {calls}, expected {EXPECTED[name]}"
