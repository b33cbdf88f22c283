#!/usr/bin/env python3
"""Array creation from Python: gpuport against torch and CuPy, same process, alternating order.

    python benches/creation.py [--device cuda:0] [--rounds 15] [--json FILE]

Every figure is per created array, in microseconds, timed to completion
(the device is synchronized inside the timed region). Each round times every
contender once (``--inner`` creations in a row, the mean taken); the order of
the contenders rotates from round to round, so drift over the run (clocks,
the pool warming up, other processes) hits each alike. The figure is the
median over ``--rounds`` rounds, printed with the spread (lowest and highest
round). A contender that cannot run (no torch, no CuPy, no GPU) is skipped
with the reason.

Operations (n bytes of uint8, n = 1 MiB and 64 MiB):

- ``from_numpy``: a device array holding a NumPy array's data. gpuport:
  ``MemArray((n,), "uint8", device)`` + ``read_numpy_array(x)`` +
  ``move_memory("device")`` + ``synchronize()`` (the seed's API: the array
  keeps a host copy); ``gpuport.asarray``: ``gpuport.asarray(x,
  device=device)`` + ``synchronize()`` (one call: the upload overlaps the
  copy into the pinned host copy); torch: ``torch.from_numpy(x).to(device)``;
  CuPy: ``cupy.asarray(x)``.
- ``zeros``: a zero-filled device array. gpuport: ``MemArray((n,), "uint8",
  device)`` + ``move_memory("device")`` + ``synchronize()``; torch:
  ``torch.zeros(n, device=...)``; CuPy: ``cupy.zeros(n)``.
- ``empty``: a new array whose contents the caller will write. gpuport:
  ``MemArray((n,), "uint8", device)`` (zero-filled by contract, the zeros
  written only on first use); torch: ``torch.empty``; CuPy: ``cupy.empty``.

Ratios are gpuport / peer (below 1: gpuport is faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable

from peer_imports import load_cupy, load_torch

MIB = 1 << 20


def timed(fn: Callable[[], Any], inner: int) -> float:
    """Mean microseconds of ``fn`` over ``inner`` calls."""
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner * 1e6


def add_round(figures: dict[str, list[float]], seconds: tuple[float, ...]) -> None:
    """Appends one round's times (seconds, in the order of ``figures``' keys) as microseconds."""
    for k, v in zip(figures, seconds):
        figures[k].append(v * 1e6)


def print_medians(label: str, figures: dict[str, list[float]]) -> None:
    shown = ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in figures.items())
    print(f"{label} (us, median): {shown}", flush=True)


def breakdown(gpuport: Any, np: Any, dev: Any, reps: int) -> None:
    """Median microseconds of each step of gpuport's ``from_numpy``, one step timed at a time."""
    for n in (MIB, 64 * MIB):
        x = np.ones(n, dtype=np.uint8)
        steps: dict[str, list[float]] = {k: [] for k in ("MemArray()", "read_numpy_array", "move_memory",
                                                         "synchronize", "move_memory(async)", "synchronize(async)",
                                                         "asarray", "synchronize(asarray)")}
        for _ in range(max(reps // (1 if n <= MIB else 10), 5)):
            t0 = time.perf_counter()
            a = gpuport.MemArray((n,), "uint8", device=dev)
            t1 = time.perf_counter()
            a.read_numpy_array(x)
            t2 = time.perf_counter()
            a.move_memory("device")
            t3 = time.perf_counter()
            a.synchronize()
            t4 = time.perf_counter()
            del a
            b = gpuport.MemArray((n,), "uint8", device=dev)
            b.read_numpy_array(x)
            t5 = time.perf_counter()
            b.move_memory("device", async_copy=True)
            t6 = time.perf_counter()
            b.synchronize()
            t7 = time.perf_counter()
            del b
            t8 = time.perf_counter()
            c = gpuport.asarray(x, device=dev)
            t9 = time.perf_counter()
            c.synchronize()
            t10 = time.perf_counter()
            del c
            add_round(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t6 - t5, t7 - t6, t9 - t8, t10 - t9))
        print_medians(f"breakdown {n // MIB} MiB", steps)
    probe_read(gpuport, np, dev, reps)
    probe_zeros(gpuport, dev, reps)


def probe_zeros(gpuport: Any, dev: Any, reps: int) -> None:
    """``zeros`` of 1 and 64 MiB with the default (synchronous) move against an asynchronous move + ``synchronize()``."""
    for n in (MIB, 64 * MIB):
        figures: dict[str, list[float]] = {"sync move": [], "async move + synchronize": []}
        for _ in range(max(reps // 2, 5)):
            t0 = time.perf_counter()
            a = gpuport.MemArray((n,), "uint8", device=dev)
            a.move_memory("device")
            a.synchronize()
            t1 = time.perf_counter()
            del a
            t2 = time.perf_counter()
            b = gpuport.MemArray((n,), "uint8", device=dev)
            b.move_memory("device", async_copy=True)
            b.synchronize()
            t3 = time.perf_counter()
            del b
            add_round(figures, (t1 - t0, t3 - t2))
        print_medians(f"probe zeros {n // MIB} MiB", figures)


def probe_memset(torch: Any, dev: Any, reps: int) -> None:
    """The driver's byte and 32-bit memsets of 64 MiB against torch's ``zero_()``, timed by CUDA events.

    ``cuMemsetD8Async`` and ``cuMemsetD32Async`` are called through ctypes on
    torch's allocation and torch's current stream, so only the memset
    differs; the figure is the median device time (events around the call).
    """
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        print(f"probe memset: skipped ({e})")
        return
    n = 64 * MIB
    t = torch.empty(n, dtype=torch.uint8, device=f"cuda:{dev.ordinal}")
    ptr, stream = ctypes.c_uint64(t.data_ptr()), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    ops: dict[str, Callable[[], Any]] = {
        "cuMemsetD8Async": lambda: cuda.cuMemsetD8Async(ptr, ctypes.c_ubyte(0), ctypes.c_size_t(n), stream),
        "cuMemsetD32Async": lambda: cuda.cuMemsetD32Async(ptr, ctypes.c_uint(0), ctypes.c_size_t(n // 4), stream),
        "torch zero_()": lambda: t.zero_(),
    }
    figures: dict[str, list[float]] = {k: [] for k in ops}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(max(reps, 5)):
        for name, op in ops.items():
            start.record()
            r = op()
            end.record()
            end.synchronize()
            if isinstance(r, int) and r != 0:
                print(f"probe memset: {name} returned CUresult {r}")
                return
            figures[name].append(start.elapsed_time(end) * 1e3)  # ms to us
    print_medians("probe memset 64 MiB, device time", figures)


def probe_read(gpuport: Any, np: Any, dev: Any, reps: int) -> None:
    """Where ``read_numpy_array`` of 1 MiB spends its time: the same copy into a warm or a fresh destination.

    - ``copyto warm heap``: ``np.copyto`` into one NumPy array, again and again;
    - ``copyto warm pinned``: ``np.copyto`` into one array's host copy (pinned on a GPU), seen through NumPy;
    - ``read warm``: ``read_numpy_array`` into one array, again and again;
    - ``read fresh``: ``read_numpy_array`` into a new array each time (as ``from_numpy`` does);
    - ``read fresh, moved``: as above, after the previous array was moved to the device (the pool's block
      was last read by the DMA engine).
    """
    n = MIB
    x = np.ones(n, dtype=np.uint8)
    heap = np.empty(n, dtype=np.uint8)
    viewed = gpuport.MemArray((n,), "uint8", device=dev)
    pinned_view = viewed.to_numpy()
    held = gpuport.MemArray((n,), "uint8", device=dev)  # never exported: reads take the direct path
    figures: dict[str, list[float]] = {k: [] for k in ("copyto warm heap", "copyto warm pinned", "read warm",
                                                      "read fresh", "read fresh, moved")}
    for _ in range(max(reps, 5)):
        t0 = time.perf_counter()
        np.copyto(heap, x)
        t1 = time.perf_counter()
        np.copyto(pinned_view, x)
        t2 = time.perf_counter()
        held.read_numpy_array(x)
        t3 = time.perf_counter()
        a = gpuport.MemArray((n,), "uint8", device=dev)
        t4 = time.perf_counter()
        a.read_numpy_array(x)
        t5 = time.perf_counter()
        a.move_memory("device")
        a.synchronize()
        del a
        b = gpuport.MemArray((n,), "uint8", device=dev)
        t6 = time.perf_counter()
        b.read_numpy_array(x)
        t7 = time.perf_counter()
        del b
        add_round(figures, (t1 - t0, t2 - t1, t3 - t2, t5 - t4, t7 - t6))
    print_medians("probe 1 MiB", figures)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="gpuport device spec (default: gpuport's default device)")
    ap.add_argument("--rounds", type=int, default=15, help="rounds per figure (default 15)")
    ap.add_argument("--json", default=None, help="write the figures and ratios as JSON to this file")
    ap.add_argument("--breakdown", action="store_true", help="also time each step of gpuport's from_numpy")
    args = ap.parse_args()
    try:
        import numpy as np

        import gpuport
    except ImportError as e:
        print(f"creation.py needs numpy and gpuport (pip install ./crates/gpuport-py): {e}", file=sys.stderr)
        return 2
    dev = gpuport.Device(args.device) if args.device else gpuport.default_device()
    on_gpu = dev.backend == "cuda"
    skipped: list[str] = []

    torch, why = load_torch(on_gpu)
    if torch is None:
        skipped.append(f"torch: {why}")
    cp, why = load_cupy(on_gpu, dev.ordinal)
    if cp is None:
        skipped.append(f"cupy: {why}")

    # contenders[(op, nbytes)] = {who: fn}
    contenders: dict[tuple[str, int], dict[str, Callable[[], Any]]] = {}
    for n in (MIB, 64 * MIB):
        x = np.ones(n, dtype=np.uint8)

        def gp_from(x: Any = x, n: int = n) -> None:
            a = gpuport.MemArray((n,), "uint8", device=dev)
            a.read_numpy_array(x)
            a.move_memory("device")
            a.synchronize()

        def gp_asarray(x: Any = x) -> None:
            gpuport.asarray(x, device=dev).synchronize()

        def gp_zeros(n: int = n) -> None:
            a = gpuport.MemArray((n,), "uint8", device=dev)
            a.move_memory("device")
            a.synchronize()

        def gp_empty(n: int = n) -> None:
            gpuport.MemArray((n,), "uint8", device=dev)

        contenders[("from_numpy", n)] = {"gpuport": gp_from, "gpuport.asarray": gp_asarray}
        contenders[("zeros", n)] = {"gpuport": gp_zeros}
        if n == MIB:
            contenders[("empty", n)] = {"gpuport": gp_empty}
        if torch is not None:
            tdev = torch.device(f"cuda:{dev.ordinal}" if on_gpu else "cpu")
            tsync = torch.cuda.synchronize if on_gpu else (lambda: None)

            def t_from(x: Any = x) -> None:
                torch.from_numpy(x).to(tdev)
                tsync()

            def t_zeros(n: int = n) -> None:
                torch.zeros(n, dtype=torch.uint8, device=tdev)
                tsync()

            def t_empty(n: int = n) -> None:
                torch.empty(n, dtype=torch.uint8, device=tdev)

            contenders[("from_numpy", n)]["torch"] = t_from
            contenders[("zeros", n)]["torch"] = t_zeros
            if n == MIB:
                contenders[("empty", n)]["torch"] = t_empty
        if cp is not None:
            csync = cp.cuda.runtime.deviceSynchronize

            def c_from(x: Any = x) -> None:
                cp.asarray(x)
                csync()

            def c_zeros(n: int = n) -> None:
                cp.zeros(n, dtype=cp.uint8)
                csync()

            def c_empty(n: int = n) -> None:
                cp.empty(n, dtype=cp.uint8)

            contenders[("from_numpy", n)]["cupy"] = c_from
            contenders[("zeros", n)]["cupy"] = c_zeros
            if n == MIB:
                contenders[("empty", n)]["cupy"] = c_empty

    print(f"gpuport {dev.spec} ({dev.name}); median of {args.rounds} rounds, order rotating", flush=True)
    if args.breakdown:
        breakdown(gpuport, np, dev, args.rounds * 10)
        if torch is not None and on_gpu:
            probe_memset(torch, dev, args.rounds * 4)
    rows: list[dict[str, Any]] = []
    for (op, n), fns in contenders.items():
        inner = 50 if n <= MIB else 5
        names = list(fns)
        for name in names:  # warm-up: pools, kernels, pinned staging
            timed(fns[name], 2)
        per: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for name in order:
                per[name].append(timed(fns[name], inner))
        for name in names:
            t = per[name]
            rows.append({"op": op, "bytes": n, "who": name, "us": statistics.median(t), "min": min(t), "max": max(t)})

    ours = {(r["op"], r["bytes"], r["who"]): r["us"] for r in rows if r["who"].startswith("gpuport")}
    print(f"\n{'operation':<12} {'size':>7} {'who':<16} {'median':>11} {'spread':>22}  gpuport/peer")
    ratios = []
    for row in rows:
        shown = []
        if not row["who"].startswith("gpuport"):
            for (op, n, who), mine in ours.items():
                if (op, n) == (row["op"], row["bytes"]):
                    x = mine / row["us"]
                    ratios.append({"op": op, "bytes": n, "gpuport": who, "peer": row["who"], "gpuport_over_peer": x})
                    shown.append(f"{who} {x:.2f}")
        size = f"{row['bytes'] // MIB} MiB"
        spread = f"{row['min']:.1f}-{row['max']:.1f} us"
        print(f"{row['op']:<12} {size:>7} {row['who']:<16} {row['us']:>8.1f} us {spread:>22}  {', '.join(shown)}")
    for s in skipped:
        print(f"skipped {s}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.spec, "rounds": args.rounds, "rows": rows, "ratios": ratios,
                       "skipped": skipped}, f, indent=2)
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
