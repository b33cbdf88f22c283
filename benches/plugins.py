"""Allocation cost through gpuport's memory plugins against each peer's own
allocator, same machine, same run (issue 9).

For every peer, two fresh processes time the same Python statement, one
with the peer's allocator and one with gpuport plugged in:

- ``torch``: ``torch.empty(1 MiB, device="cuda")`` + ``del``; the caching
  allocator against ``gpuport.torch.use_gpuport_for_torch()``
  (``CUDAPluggableAllocator``). The row ``pluggable-floor`` is the floor
  of any allocator plugged in that way: a ``CUDAPluggableAllocator`` over
  two C functions that only pop and push a preallocated pointer (compiled
  here with ``cc``, the pointers from the driver's ``cuMemAlloc``). What
  PyTorch itself spends per pluggable allocation is that row; gpuport's
  hook costs its row less that one;
- ``cupy``: ``cupy.empty(1 MiB)`` + ``del``; CuPy's memory pool against
  ``gpuport.cupy.use_gpuport_for_cupy()`` (C functions through CuPy's
  ``CFunctionAllocator``), and against the Python-function allocator it
  falls back to (``gpuport.cupy.allocator``, the row ``gpuport-py``).
  The row ``cfunc-floor`` is the floor of any allocator plugged in that way:
  CuPy's ``CFunctionAllocator`` over two C functions that only pop and
  push a preallocated pointer (compiled here with ``cc``; skipped without
  one). What CuPy itself spends per C-function allocation is that row;
  gpuport's hook costs its row less that one;
- ``numba``: ``cuda.device_array(1 MiB)`` + ``del``; Numba's own memory
  manager against ``NUMBA_CUDA_MEMORY_MANAGER=gpuport.numba``. Numba frees
  through its deallocation queue; the timing includes what each
  ``del`` costs, not the deferred free.

Each child reports the median of ``--reps`` timed rounds of ``--inner``
operations (so the clock's resolution does not dominate), after a warm-up.
Each allocator runs in ``--trials`` fresh processes, the order of the
allocators alternating from trial to trial (own first, then gpuport first),
so drift over the run hits both alike; a row shows the median of the
trials' medians and the spread (lowest and highest trial median).

    PYTHONPATH=/tmp/site python3 benches/plugins.py [--trials 3] [--peers cupy] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

# This folder: the child imports the C-function floors from here (cupy_allocators.py, this file).
BENCHES = os.path.dirname(os.path.abspath(__file__))

MIB = 1 << 20

TORCH_FLOOR_SOURCE = (
    "#include <stddef.h>\n"
    "#include <sys/types.h>\n"
    "static void *slots[8]; static int n;\n"
    "void floor_push(void *p) { if (n < 8) slots[n++] = p; }\n"
    "void *floor_malloc(ssize_t size, int dev, void *stream) { return n > 0 ? slots[--n] : (void *)0; }\n"
    "void floor_free(void *p, ssize_t size, int dev, void *stream) { floor_push(p); }\n"
)


def torch_pluggable_floor(torch) -> None:
    """Makes PyTorch's allocator a ``CUDAPluggableAllocator`` over C functions
    that pop and push one of four 1 MiB device pointers (one is live at a
    time): the floor of any allocator plugged into PyTorch that way. The
    pointers come from the driver (``cuMemAlloc`` in device 0's primary
    context, PyTorch's), since PyTorch's own allocator may not run before
    the switch. Needs ``cc`` (``$CC``)."""
    import ctypes

    from cupy_allocators import compile_floor

    so = compile_floor(TORCH_FLOOR_SOURCE)
    lib = ctypes.CDLL(so)
    cu = ctypes.CDLL("libcuda.so.1")

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    ctx = ctypes.c_void_p()
    check(cu.cuInit(0), "cuInit")
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    for _ in range(4):
        p = ctypes.c_uint64()
        check(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(MIB)), "cuMemAlloc")
        lib.floor_push(ctypes.c_void_p(p.value))
    alloc = torch.cuda.memory.CUDAPluggableAllocator(so, "floor_malloc", "floor_free")
    torch.cuda.memory.change_current_allocator(alloc)
    x = torch.empty(MIB, dtype=torch.uint8, device="cuda")
    if x.data_ptr() == 0:
        raise RuntimeError("the floor allocator ran out of pointers")
    del x

CHILD = textwrap.dedent(
    r"""
    import json, statistics, sys, time
    peer, mode, reps, inner = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    plugged = mode not in ("own", "cfunc-floor", "pluggable-floor")
    MIB = 1 << 20
    if peer == "torch":
        import torch
        if plugged:
            import gpuport.torch
            gpuport.torch.use_gpuport_for_torch()
        elif mode == "pluggable-floor":
            sys.path.insert(0, sys.argv[5])  # benches/, for plugins
            from plugins import torch_pluggable_floor
            torch_pluggable_floor(torch)
        def op():
            x = torch.empty(MIB, dtype=torch.uint8, device="cuda")
            del x
        def sync():
            torch.cuda.synchronize()
    elif peer == "cupy":
        import cupy
        if mode == "gpuport":
            import gpuport.cupy
            gpuport.cupy.use_gpuport_for_cupy()
            assert type(cupy.cuda.get_allocator().__self__).__name__ == "CFunctionAllocator"
        elif mode == "gpuport-py":
            import gpuport.cupy
            cupy.cuda.set_allocator(gpuport.cupy.allocator)
        elif mode == "cfunc-floor":
            sys.path.insert(0, sys.argv[5])  # benches/, for cupy_allocators
            from cupy_allocators import cfunc_floor
            cupy.cuda.set_allocator(cfunc_floor(cupy))
        def op():
            x = cupy.empty(MIB, dtype=cupy.uint8)
            del x
        def sync():
            cupy.cuda.runtime.deviceSynchronize()
    elif peer == "numba":
        import numpy as np
        from numba import cuda
        def op():
            x = cuda.device_array(MIB, dtype=np.uint8)
            del x
        def sync():
            cuda.synchronize()
    else:
        raise SystemExit(f"unknown peer {peer}")
    for _ in range(inner):
        op()
    sync()
    rounds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            op()
        rounds.append((time.perf_counter() - t0) / inner * 1e6)
    sync()
    who = "default"
    if plugged:
        import gpuport.memory as gm
        st = gm.stats("cuda:0")
        who = "gpuport: %d allocations made, %d live" % (st["total_count"], st["current_count"])
    print(json.dumps({"median_us": statistics.median(rounds), "min_us": min(rounds), "who": who}))
    """
)


def run(peer: str, mode: str, reps: int, inner: int) -> dict:
    env = dict(os.environ)
    env.pop("NUMBA_CUDA_MEMORY_MANAGER", None)
    if mode == "gpuport" and peer == "numba":
        env["NUMBA_CUDA_MEMORY_MANAGER"] = "gpuport.numba"
    r = subprocess.run(
        [sys.executable, "-c", CHILD, peer, mode, str(reps), str(inner), BENCHES],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"rc {r.returncode}"]}
    return json.loads(lines[-1])


MODES = {
    "torch": ("own", "gpuport", "pluggable-floor"),
    "cupy": ("own", "gpuport", "gpuport-py", "cfunc-floor"),
    "numba": ("own", "gpuport"),
}


def trials(peer: str, n: int, reps: int, inner: int) -> dict[str, dict]:
    """Each mode's result over ``n`` fresh processes, the order alternating per trial."""
    got: dict[str, list[dict]] = {m: [] for m in MODES[peer]}
    for t in range(n):
        order = MODES[peer] if t % 2 == 0 else tuple(reversed(MODES[peer]))
        for mode in order:
            got[mode].append(run(peer, mode, reps, inner))
    out = {}
    for mode, results in got.items():
        ok = [r for r in results if "error" not in r]
        if not ok:
            out[mode] = results[0]
            continue
        medians = sorted(r["median_us"] for r in ok)
        out[mode] = {
            "median_us": statistics.median(medians),
            "low_us": medians[0],
            "high_us": medians[-1],
            "min_us": min(r["min_us"] for r in ok),
            "trials": len(ok),
            "trial_medians_us": medians,
            "who": ok[-1]["who"],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--inner", type=int, default=200)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--peers", default=",".join(MODES), help="comma-separated peers to time (default: all)")
    args = ap.parse_args()
    rows = []
    print(
        f"alloc+free 1 MiB from Python; median of {args.reps} rounds x {args.inner} per process, "
        f"median of {args.trials} processes per allocator (order alternating)"
    )
    print(f"{'peer':<7} {'allocator':<11} {'median us':>10} {'spread us':>15} {'min us':>8}  gpuport/peer")
    for peer in args.peers.split(","):
        if peer not in MODES:
            raise SystemExit(f"unknown peer {peer!r}: choose from {', '.join(MODES)}")
        res = trials(peer, args.trials, args.reps, args.inner)
        own = res["own"]
        for mode, r in res.items():
            if "error" in r:
                print(f"{peer:<7} {mode:<11} skipped: {r['error'][0]}")
                continue
            ratio = ""
            if mode != "own" and "error" not in own:
                ratio = f"{r['median_us'] / own['median_us']:.2f}"
            spread = f"{r['low_us']:.2f}-{r['high_us']:.2f}"
            print(
                f"{peer:<7} {mode:<11} {r['median_us']:>10.2f} {spread:>15} {r['min_us']:>8.2f}  {ratio}  ({r['who']})"
            )
            rows.append({"peer": peer, "allocator": mode, **r})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
