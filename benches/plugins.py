"""Allocation cost through gpuport's memory plugins against each peer's own
allocator, same machine, same run (issue 9).

For every peer, two fresh processes time the same Python statement, one
with the peer's allocator and one with gpuport plugged in:

- ``torch``: ``torch.empty(1 MiB, device="cuda")`` + ``del``; the caching
  allocator against ``gpuport.torch.use_gpuport_for_torch()``
  (``CUDAPluggableAllocator``);
- ``cupy``: ``cupy.empty(1 MiB)`` + ``del``; CuPy's memory pool against
  ``gpuport.cupy.use_gpuport_for_cupy()``;
- ``numba``: ``cuda.device_array(1 MiB)`` + ``del``; Numba's own memory
  manager against ``NUMBA_CUDA_MEMORY_MANAGER=gpuport.numba``. Numba frees
  through its deallocation queue; the timing includes what each
  ``del`` costs, not the deferred free.

Each child reports the median of ``--reps`` timed rounds of ``--inner``
operations (so the clock's resolution does not dominate), after a warm-up.

    PYTHONPATH=/tmp/site python3 benches/plugins.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    r"""
    import json, statistics, sys, time
    peer, plugged, reps, inner = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
    MIB = 1 << 20
    if peer == "torch":
        import torch
        if plugged:
            import gpuport.torch
            gpuport.torch.use_gpuport_for_torch()
        def op():
            x = torch.empty(MIB, dtype=torch.uint8, device="cuda")
            del x
        def sync():
            torch.cuda.synchronize()
    elif peer == "cupy":
        import cupy
        if plugged:
            import gpuport.cupy
            gpuport.cupy.use_gpuport_for_cupy()
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


def run(peer: str, plugged: bool, reps: int, inner: int) -> dict:
    env = dict(os.environ)
    env.pop("NUMBA_CUDA_MEMORY_MANAGER", None)
    if plugged and peer == "numba":
        env["NUMBA_CUDA_MEMORY_MANAGER"] = "gpuport.numba"
    r = subprocess.run(
        [sys.executable, "-c", CHILD, peer, "1" if plugged else "0", str(reps), str(inner)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"rc {r.returncode}"]}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--inner", type=int, default=200)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    print(f"alloc+free 1 MiB from Python; median of {args.reps} rounds x {args.inner}")
    print(f"{'peer':<7} {'allocator':<10} {'median us':>10} {'min us':>8}  gpuport/peer")
    for peer in ("torch", "cupy", "numba"):
        own = run(peer, False, args.reps, args.inner)
        ours = run(peer, True, args.reps, args.inner)
        for label, res in (("own", own), ("gpuport", ours)):
            if "error" in res:
                print(f"{peer:<7} {label:<10} skipped: {res['error'][0]}")
                continue
            ratio = ""
            if label == "gpuport" and "error" not in own:
                ratio = f"{res['median_us'] / own['median_us']:.2f}"
            print(f"{peer:<7} {label:<10} {res['median_us']:>10.2f} {res['min_us']:>8.2f}  {ratio}  ({res['who']})")
            rows.append({"peer": peer, "allocator": label, **res})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
