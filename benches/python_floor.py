#!/usr/bin/env python3
"""Python calls at the floor: gpuport against its peers, over fresh processes.

    python benches/python_floor.py [--device cuda:0] [--procs 5] [--rounds 7] [--calls 20000] [--json FILE]

A single figure from a single process moves by up to 1.6x between runs
(``BENCHMARKS.md``). So each operation runs in ``--procs`` fresh
processes; in each, every contender runs ``--rounds`` rounds of ``--calls``
calls, the contenders alternating (their order rotates each round), and the
process reports each contender's median round. The table gives the median
over processes and the spread (lowest and highest process). A ratio counts
only when the spreads of the two rows do not overlap.

Operations (µs per call):

- ``alloc_free_1MiB``: allocate 1 MiB of device memory and free it.
  gpuport: ``gpuport.memory.alloc(1 << 20, None, device).free()``; torch:
  ``torch.empty(1 << 20, dtype=torch.uint8, device=...)`` dropped; CuPy:
  ``cupy.empty(1 << 20, dtype=cupy.uint8)`` dropped; cuda-python:
  ``cudaMallocAsync`` + ``cudaFreeAsync`` on a stream (the driver's
  stream-ordered pool). On ``--device host`` only gpuport runs, with the
  floor.

The floor (``floor`` row, every device): the interpreter's own cost for the
same shape of Python code, two calls into C that make one object and drop
it (``bytearray(0).clear()``), timed in the same process. ``gpuport −
floor`` (per process, then the median and spread over processes) is what
gpuport's alloc+free costs above that floor: the Rust call and what the
binding adds. Compare it with the Rust part measured on the same machine,
``bench-memory --bench alloc_free_1MiB/python_path`` (benches/memory.rs):
the issue "Python at the floor" asks that the Python call cost the Rust
call plus one C call.

A contender that cannot be imported, or has no GPU, is skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

MIB = 1 << 20


def contenders(device: str) -> Dict[str, Callable[[], None]]:
    """The calls to time, by name; a peer that cannot run is left out (reason on stderr)."""
    import gpuport
    import gpuport.memory

    out: Dict[str, Callable[[], None]] = {}
    dev = gpuport.Device(device)
    alloc = gpuport.memory.alloc

    def gp() -> None:
        alloc(MIB, None, dev).free()

    out["gpuport"] = gp
    ba = bytearray

    def floor() -> None:
        ba(0).clear()

    out["floor"] = floor
    if not device.startswith("cuda"):
        return out
    ordinal = int(device.split(":")[1]) if ":" in device else 0
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch has no GPU")
        tdev = torch.device("cuda", ordinal)
        empty, u8 = torch.empty, torch.uint8

        def t() -> None:
            empty(MIB, dtype=u8, device=tdev)

        out["torch"] = t
    except Exception as e:  # noqa: BLE001 - any reason to skip a peer
        print(f"skipped torch: {e}", file=sys.stderr)
    try:
        import cupy

        cupy.cuda.Device(ordinal).use()
        cempty, cu8 = cupy.empty, cupy.uint8

        def c() -> None:
            cempty(MIB, dtype=cu8)

        out["cupy"] = c
    except Exception as e:  # noqa: BLE001
        print(f"skipped cupy: {e}", file=sys.stderr)
    try:
        try:
            from cuda.bindings import runtime as rt
        except ImportError:
            from cuda import cudart as rt  # type: ignore[no-redef]
        err, = rt.cudaSetDevice(ordinal)
        err, stream = rt.cudaStreamCreate()
        if int(err) != 0:
            raise RuntimeError(f"cudaStreamCreate: {err}")
        malloc, free = rt.cudaMallocAsync, rt.cudaFreeAsync

        def m() -> None:
            _, p = malloc(MIB, stream)
            free(p, stream)

        out["cudaMallocAsync"] = m
    except Exception as e:  # noqa: BLE001
        print(f"skipped cuda-python: {e}", file=sys.stderr)
    return out


def worker(device: str, rounds: int, calls: int) -> Dict[str, float]:
    """One process: each contender's median round, µs per call."""
    runs = contenders(device)
    names = list(runs)
    for f in runs.values():  # warm-up: pools grown, code paths resolved
        for _ in range(1000):
            f()
    times: Dict[str, List[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            f = runs[n]
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                f()
            times[n].append((time.perf_counter_ns() - t0) / calls / 1e3)
    return {n: statistics.median(ts) for n, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="gpuport device spec (default: cuda:0 if present, else host)")
    ap.add_argument("--procs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    device = a.device
    if device is None:
        import gpuport

        device = gpuport.default_device().spec if hasattr(gpuport, "default_device") else "host"
    if a.worker:
        print(json.dumps(worker(device, a.rounds, a.calls)))
        return
    per_proc: List[Dict[str, float]] = []
    for _ in range(a.procs):
        cmd = [sys.executable, __file__, "--worker", "--device", device, "--rounds", str(a.rounds), "--calls", str(a.calls)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        sys.stderr.write(done.stderr)
        per_proc.append(json.loads(done.stdout.strip().splitlines()[-1]))
    names = list(per_proc[0])
    rows = {}
    print(f"alloc_free_1MiB on {device}: µs per call, median of {a.procs} processes [lowest, highest]")
    for n in names:
        v = [p[n] for p in per_proc]
        rows[n] = {"median": statistics.median(v), "low": min(v), "high": max(v), "per_process": v}
        print(f"  {n:16s} {rows[n]['median']:7.3f}  [{rows[n]['low']:.3f}, {rows[n]['high']:.3f}]")
    g = rows["gpuport"]
    above = [p["gpuport"] - p["floor"] for p in per_proc]
    rows["gpuport - floor"] = {"median": statistics.median(above), "low": min(above), "high": max(above), "per_process": above}
    print(f"  gpuport - floor  {statistics.median(above):7.3f}  [{min(above):.3f}, {max(above):.3f}]  (same process)")
    for n in names:
        if n in ("gpuport", "floor"):
            continue
        r = rows[n]
        apart = g["high"] < r["low"] or r["high"] < g["low"]
        print(f"  {n} / gpuport = {r['median'] / g['median']:.2f}x ({'spreads apart' if apart else 'spreads overlap'})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": device, "op": "alloc_free_1MiB", "rows": rows, "argv": sys.argv}, f, indent=1)


if __name__ == "__main__":
    main()
