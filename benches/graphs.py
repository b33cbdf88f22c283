#!/usr/bin/env python3
"""Graph replay against launches from Python: gpuport, torch and CuPy, same process, same run.

    python benches/graphs.py [--device cuda:0] [--kernels 1000] [--reps 21] [--json FILE]

For each runtime, ``--kernels`` launches of an empty (or the smallest)
kernel from Python, against one replay of a graph that captured the same
launches. Both are timed with ``time.perf_counter`` to completion (enqueue
plus a stream synchronize inside the timed region); rounds alternate
between the two so drift hits both, after one warm-up each, and the figure
is the median of ``--reps`` rounds, per kernel. The goal of issue 19 is a
replay at most a third of the launches' time per kernel on the H100.

Rows:

- ``gpuport``: ``gpuport.runtime.launch_kernel`` of the built-in
  ``gpuport_empty`` on a ``gpuport.Stream`` against ``Graph.replay`` of
  ``with stream.capture() as g:`` around the same launches. Runs on every
  backend (``--device host`` included: the host backend replays the
  captured closures on its stream's worker thread).
- ``torch``: ``x.zero_()`` on a one-element CUDA tensor (the smallest kernel
  torch launches from Python) against ``torch.cuda.CUDAGraph.replay`` of
  the same calls captured with ``torch.cuda.graph``.
- ``torch+gpuport``: ``torch.cuda.graph`` capturing gpuport launches made on
  torch's capture stream (``capture_error_mode="relaxed"``: gpuport prunes
  its finished work with event queries, which a global-mode capture of
  another library forbids).
- ``cupy``: a ``cupy.RawKernel`` empty kernel against a CuPy graph
  (``Stream.begin_capture``/``end_capture``, ``Graph.launch``).

A peer that is not importable, has no CUDA device, or is not on the
device under test (``--device host``) is skipped with a printed note.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable, Optional


def paired(launches: Callable[[], None], replay: Callable[[], None], reps: int, kernels: int) -> tuple[float, float]:
    """Medians in microseconds per kernel of ``launches`` and ``replay``, timed in alternating rounds."""
    launches()
    replay()  # warm-up
    a: list[float] = []
    b: list[float] = []
    for _ in range(reps):
        t0 = time.perf_counter()
        launches()
        t1 = time.perf_counter()
        replay()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return statistics.median(a) * 1e6 / kernels, statistics.median(b) * 1e6 / kernels


class Results:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.skipped: list[tuple[str, str]] = []

    def add(self, who: str, launch_us: float, replay_us: float, capture_ms: Optional[float]) -> None:
        self.rows.append(
            {
                "who": who,
                "launch_us_per_kernel": launch_us,
                "replay_us_per_kernel": replay_us,
                "replay_over_launch": replay_us / launch_us,
                "capture_ms": capture_ms,
            }
        )

    def skip(self, what: str, why: object) -> None:
        text = str(why).splitlines()[0] if str(why) else type(why).__name__
        self.skipped.append((what, text))
        print(f"skipped {what}: {text}", flush=True)

    def attempt(self, who: str, fn: Callable[[], tuple[float, float, Optional[float]]]) -> None:
        try:
            self.add(who, *fn())
        except Exception as e:  # a peer's failure must not stop the others
            self.skip(who, f"{type(e).__name__}: {e}")


def timed_ms(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="gpuport device spec (default: gpuport's default device)")
    ap.add_argument("--kernels", type=int, default=1000, help="kernels launched, and captured, per round (default 1000)")
    ap.add_argument("--reps", type=int, default=21, help="rounds per figure (default 21)")
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
    args = ap.parse_args()

    try:
        import gpuport
        from gpuport import runtime as rt
    except ImportError as e:
        print(f"graphs.py needs gpuport (pip install ./crates/gpuport-py): {e}", file=sys.stderr)
        return 2
    try:
        dev = gpuport.Device(args.device)
    except Exception as e:
        print(f"graphs.py: --device {args.device!r}: {e}", file=sys.stderr)
        return 2

    n, reps = args.kernels, args.reps
    r = Results()
    print(f"gpuport {dev.spec} ({dev.name}); {n} kernels per round; median of {reps} alternating rounds", flush=True)

    # ---- gpuport -----------------------------------------------------------------------
    empty = rt.module_get_function(rt.module_load(device=dev), "gpuport_empty")
    s = gpuport.Stream(dev)
    # Bound once, as CuPy's loop below calls its kernel object directly (no
    # module attribute lookup per launch), and as benches/launch.py does.
    launch = rt.launch_kernel

    def gp_launch_only() -> None:
        for _ in range(n):
            launch(empty, 1, 1, stream=s)

    def gp_launches() -> None:
        gp_launch_only()
        s.synchronize()

    def gp_capture() -> Any:
        with s.capture() as g:
            gp_launch_only()
        return g

    def gp() -> tuple[float, float, Optional[float]]:
        g, capture_ms = timed_ms(gp_capture)
        assert g.node_count == n, f"captured {g.node_count} nodes, expected {n}"

        def replay() -> None:
            g.replay(s)
            s.synchronize()

        return (*paired(gp_launches, replay, reps, n), capture_ms)

    r.attempt("gpuport", gp)

    # ---- torch -------------------------------------------------------------------------
    torch: Any = None
    if dev.backend != "cuda":
        r.skip("torch", f"the device under test is {dev.spec}; torch.cuda graphs need a CUDA device (--device cuda:0)")
    else:
        try:
            import torch as torch_mod

            if not torch_mod.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
            torch = torch_mod
        except Exception as e:
            r.skip("torch", e)
    if torch is not None:
        tdev = torch.device("cuda", dev.ordinal)
        torch.cuda.set_device(tdev)
        x = torch.zeros(1, device=tdev)
        side = torch.cuda.Stream(device=tdev)

        def t_launch_only() -> None:
            for _ in range(n):
                x.zero_()

        def t_launches() -> None:
            with torch.cuda.stream(side):
                t_launch_only()
            side.synchronize()

        def t() -> tuple[float, float, Optional[float]]:
            t_launches()  # warm up the caching allocator and the kernel before capture
            g = torch.cuda.CUDAGraph()

            def cap() -> None:
                with torch.cuda.graph(g, stream=side):
                    t_launch_only()

            _, capture_ms = timed_ms(cap)

            def replay() -> None:
                with torch.cuda.stream(side):
                    g.replay()
                side.synchronize()

            return (*paired(t_launches, replay, reps, n), capture_ms)

        r.attempt("torch", t)

        def tg() -> tuple[float, float, Optional[float]]:
            ours = gpuport.Stream.external(side, device=dev)
            g = torch.cuda.CUDAGraph()

            def cap() -> None:
                with torch.cuda.graph(g, stream=side, capture_error_mode="relaxed"):
                    for _ in range(n):
                        launch(empty, 1, 1, stream=ours)

            _, capture_ms = timed_ms(cap)

            def launches() -> None:
                for _ in range(n):
                    launch(empty, 1, 1, stream=ours)
                side.synchronize()

            def replay() -> None:
                with torch.cuda.stream(side):
                    g.replay()
                side.synchronize()

            return (*paired(launches, replay, reps, n), capture_ms)

        r.attempt("torch+gpuport", tg)

    # ---- CuPy --------------------------------------------------------------------------
    cp: Any = None
    if dev.backend != "cuda":
        r.skip("cupy", f"the device under test is {dev.spec}; CuPy graphs need a CUDA device (--device cuda:0)")
    else:
        try:
            import cupy as cupy_mod

            cupy_mod.cuda.Device(dev.ordinal).use()
            cp = cupy_mod
        except Exception as e:
            r.skip("cupy", e)
    if cp is not None:

        def c() -> tuple[float, float, Optional[float]]:
            k = cp.RawKernel('extern "C" __global__ void empty() {}', "empty")
            cs = cp.cuda.Stream(non_blocking=True)

            def launch_only() -> None:
                with cs:  # RawKernel launches on the current stream
                    for _ in range(n):
                        k((1,), (1,), ())

            def launches() -> None:
                launch_only()
                cs.synchronize()

            launches()  # compiles the kernel before capture

            def cap() -> Any:
                cs.begin_capture()
                launch_only()
                return cs.end_capture()

            g, capture_ms = timed_ms(cap)

            def replay() -> None:
                g.launch(stream=cs)
                cs.synchronize()

            return (*paired(launches, replay, reps, n), capture_ms)

        r.attempt("cupy", c)

    # ---- report ------------------------------------------------------------------------
    print(f"\n{'who':<16} {'launch us/kernel':>17} {'replay us/kernel':>17} {'replay/launch':>14} {'capture ms':>11}")
    for row in r.rows:
        cap = f"{row['capture_ms']:.1f}" if row["capture_ms"] is not None else "-"
        goal = "  (goal <= 0.33: met)" if row["replay_over_launch"] <= 1 / 3 else "  (goal <= 0.33: not met)"
        print(
            f"{row['who']:<16} {row['launch_us_per_kernel']:>17.3f} {row['replay_us_per_kernel']:>17.3f} "
            f"{row['replay_over_launch']:>14.3f} {cap:>11}{goal}"
        )
    ours = next((row for row in r.rows if row["who"] == "gpuport"), None)
    cross = []
    if ours is not None:
        for row in r.rows:
            if row["who"] != "gpuport":
                x = ours["replay_us_per_kernel"] / row["replay_us_per_kernel"]
                cross.append({"peer": row["who"], "gpuport_replay_over_peer_replay": x})
                print(f"gpuport replay / {row['who']} replay, per kernel: {x:.2f}")
    for what, why in r.skipped:
        print(f"skipped {what}: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": dev.spec,
                    "kernels": n,
                    "reps": reps,
                    "rows": r.rows,
                    "cross": cross,
                    "skipped": [{"what": w, "why": y} for w, y in r.skipped],
                },
                f,
                indent=2,
            )
        print(f"JSON: {args.json}")
    return 0 if ours is not None else 1


if __name__ == "__main__":
    sys.exit(main())
