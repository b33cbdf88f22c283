#!/usr/bin/env python3
"""CuPy's allocators alternating in one process: CuPy's own memory pool,
gpuport's hook and the C-function floor, over fresh processes.

    python benches/cupy_allocators.py [--procs 5] [--rounds 15] [--calls 2000] [--json FILE]

Each process times ``cupy.empty(1 MiB, dtype=uint8)`` + ``del`` under three
allocators, switched with ``cupy.cuda.set_allocator`` between rounds (the
order rotates each round): ``cupy`` (CuPy's default memory pool),
``gpuport`` (``gpuport.cupy.c_allocator()``: C functions of
``gpuport._core`` through CuPy's ``CFunctionAllocator``) and ``floor``
(``CFunctionAllocator`` over two C functions that only pop and push a
preallocated pointer, compiled here with ``cc``: what CuPy itself spends
on any allocator plugged in that way) and ``floor-stream`` (the same, with
one call of CuPy's ``get_current_stream_ptr`` per allocation, as gpuport's
hook and CuPy's own pool make: ``gpuport − floor-stream`` is what gpuport
itself spends).

Why in one process: on the ``nvidia-h200`` machines every process of
CuPy's ``cupy.empty`` + ``del`` runs in one of two bands, about 1.7 or
3.2 µs, set when the process starts and shared by every allocator
(BENCHMARKS.md: not the core, not address-space randomization, hash seed or
transparent huge pages). Across processes the bands swamp a 0.1 µs
difference; alternating in one process, the allocators share the band. So
the figures to read are per process: ``gpuport / cupy`` (the ratio of the
two medians) and ``gpuport − floor`` (what gpuport's hook costs above
CuPy's own C-function path), then their median and spread over processes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List

MIB = 1 << 20

FLOOR_SOURCE = (
    "#include <stddef.h>\n"
    "static void *slots[8]; static int n;\n"
    "void floor_push(void *p) { if (n < 8) slots[n++] = p; }\n"
    "void *floor_malloc(void *param, size_t size, int dev) { return n > 0 ? slots[--n] : (void *)0; }\n"
    "void floor_free(void *param, void *p, int dev) { floor_push(p); }\n"
    "static long (*stream_fn)(void);\n"
    "void floor_set_stream_fn(void *f) { stream_fn = (long (*)(void))f; }\n"
    "void *floor_stream_malloc(void *param, size_t size, int dev) {\n"
    "  if (stream_fn() == -1) return (void *)-1;\n"
    "  return floor_malloc(param, size, dev);\n"
    "}\n"
)


def compile_floor(source: str) -> str:
    """Compiles a floor allocator's C ``source`` into a shared library in a
    new temporary folder with ``cc`` (``$CC``); returns the library's path.
    benches/plugins.py compiles PyTorch's floor with it too."""
    d = tempfile.mkdtemp(prefix="gpuport-floor-")
    src, so = os.path.join(d, "floor.c"), os.path.join(d, "floor.so")
    with open(src, "w") as f:
        f.write(source)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", so, src], check=True)
    return so


def cfunc_floor(cupy, with_stream: bool = False) -> Callable:
    """CuPy's ``CFunctionAllocator`` over C functions that pop and push one of
    four preallocated 1 MiB pointers (one is live at a time): the floor of any
    C-function allocator. ``with_stream``: each allocation also calls CuPy's
    ``get_current_stream_ptr`` (the capsule gpuport's hook is given). Needs
    ``cc`` (``$CC``)."""
    so = compile_floor(FLOOR_SOURCE)
    lib = ctypes.CDLL(so)
    for p in [cupy.cuda.runtime.malloc(MIB) for _ in range(4)]:
        lib.floor_push(ctypes.c_void_p(p))
    malloc = "floor_malloc"
    if with_stream:
        import cupy.cuda.stream

        capsule = cupy.cuda.stream.__pyx_capi__["get_current_stream_ptr"]
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        lib.floor_set_stream_fn(ctypes.c_void_p(get(capsule, b"intptr_t (void)")))
        malloc = "floor_stream_malloc"
    addr = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value  # noqa: E731
    return cupy.cuda.memory.CFunctionAllocator(0, addr(malloc), addr("floor_free"), lib).malloc


def worker(rounds: int, calls: int) -> Dict[str, float]:
    """One process: each allocator's median round, µs per ``cupy.empty`` + ``del``."""
    import cupy
    import gpuport.cupy

    allocators = {
        "cupy": cupy.get_default_memory_pool().malloc,
        "gpuport": gpuport.cupy.c_allocator(),
        "floor": cfunc_floor(cupy),
        "floor-stream": cfunc_floor(cupy, with_stream=True),
    }
    names = list(allocators)

    def timed(n: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            x = cupy.empty(MIB, dtype=cupy.uint8)
            del x
        return (time.perf_counter_ns() - t0) / n / 1e3

    times: Dict[str, List[float]] = {n: [] for n in names}
    for name in names:  # warm-up: pools grown, code paths resolved
        cupy.cuda.set_allocator(allocators[name])
        timed(1000)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            cupy.cuda.set_allocator(allocators[name])
            times[name].append(timed(calls))
    cupy.cuda.set_allocator(allocators["cupy"])
    cupy.cuda.runtime.deviceSynchronize()
    return {n: statistics.median(ts) for n, ts in times.items()}


def spread(v: List[float]) -> Dict[str, object]:
    return {"median": statistics.median(v), "low": min(v), "high": max(v), "per_process": v}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.rounds, a.calls)))
        return
    try:
        import cupy  # noqa: F401
    except ImportError as e:
        print(f"skipped: CuPy cannot be imported ({e})")
        return
    per_proc: List[Dict[str, float]] = []
    for _ in range(a.procs):
        cmd = [sys.executable, __file__, "--worker", "--rounds", str(a.rounds), "--calls", str(a.calls)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"cupy_allocators.py: a worker failed:\n{done.stderr[-2000:]}")
        per_proc.append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = {n: spread([p[n] for p in per_proc]) for n in per_proc[0]}
    rows["gpuport / cupy"] = spread([p["gpuport"] / p["cupy"] for p in per_proc])
    rows["gpuport - floor"] = spread([p["gpuport"] - p["floor"] for p in per_proc])
    rows["cupy - floor"] = spread([p["cupy"] - p["floor"] for p in per_proc])
    rows["gpuport - floor-stream"] = spread([p["gpuport"] - p["floor-stream"] for p in per_proc])
    rows["cupy - floor-stream"] = spread([p["cupy"] - p["floor-stream"] for p in per_proc])
    print(f"cupy.empty(1 MiB) + del: µs, the allocators alternating in each of {a.procs} processes; "
          "median of the processes [lowest, highest]")
    for n, r in rows.items():
        per = ", ".join(f"{x:.3f}" for x in r["per_process"])
        print(f"  {n:22s} {r['median']:7.3f}  [{r['low']:.3f}, {r['high']:.3f}]  ({per})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"op": "cupy.empty(1 MiB) + del", "rows": rows, "argv": sys.argv}, f, indent=1)


if __name__ == "__main__":
    main()
