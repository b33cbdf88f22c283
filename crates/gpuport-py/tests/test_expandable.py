"""Expandable segments from Python: ``GPUPORT_POOL=expandable`` (read once,
so each case runs in a fresh process) and ``gpuport.memory.stats``'s
``pool_expandable``; the host backend emulates them, GPU cases skip with a
reason where absent."""

import json
import os
import subprocess
import sys

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


def run(device, pool):
    env = dict(os.environ)
    env.pop("GPUPORT_POOL", None)
    if pool is not None:
        env["GPUPORT_POOL"] = pool
    out = subprocess.run([sys.executable, "-c", CHILD, device.spec], env=env, capture_output=True, text=True, check=True)
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
