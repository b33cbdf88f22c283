"""Driver calls that follow from the design, counted (issue 37): a Python
alloc+free from the pool, and ``__dlpack__`` of an idle device array, make
no CUDA driver call. ``benches/driver_calls/count.c`` is preloaded into a
child process and counts every ``cu*`` function looked up through ``dlsym``
or ``cuGetProcAddress``; a stream synchronize shows the counter sees
gpuport's calls. Set ``GPUPORT_DRIVER_COUNTER`` to a built counter, or let
the test build it from the repository with the C compiler; otherwise it skips
with the reason.
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
a = gpuport.asarray(np.zeros(1 << 18, np.float32), device=dev)
a.synchronize()
s = dev.default_stream
ops = {
    "alloc_free": lambda: gm.alloc(1 << 20, None, dev).free(),
    "export_idle": lambda: a.__dlpack__(),
    "synchronize": lambda: s.synchronize(),
}
out = {}
for name, f in ops.items():
    for _ in range(50):
        f()
    before = snapshot()
    for _ in range(500):
        f()
    after = snapshot()
    out[name] = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
print(json.dumps(out))
"""


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


def test_pool_alloc_free_and_idle_exports_make_no_driver_call(cuda_device, tmp_path):
    counter = counter_library(tmp_path)
    env = dict(os.environ, LD_PRELOAD=counter)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, counter, cuda_device.spec], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    calls = json.loads(r.stdout.strip().splitlines()[-1])
    assert calls["synchronize"].get("cuStreamSynchronize") == 500, f"the counter does not see gpuport: {calls}"
    assert calls["alloc_free"] == {}, f"500 alloc+free from the pool called the driver: {calls['alloc_free']}"
    assert calls["export_idle"] == {}, f"500 exports of an idle array called the driver: {calls['export_idle']}"
