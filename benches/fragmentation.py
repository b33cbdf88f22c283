#!/usr/bin/env python3
"""Fragmentation of caching allocators, side by side: a replayed training trace.

    python benches/fragmentation.py [--device cuda:0] [--rounds 5] [--steps 12]
        [--hidden 2048] [--layers 16] [--batch 4] [--seq 256:2048]
        [--contenders gpuport,gpuport-expandable,torch,torch-expandable,cupy] [--json FILE]

A trace of a transformer training step is generated (seeded, the same for
every contender): long-lived parameters, gradients and two optimizer
states; then, for each step, a sequence length that grows from the first to
the last value of ``--seq`` (with jitter), activations allocated layer by
layer in the forward pass (some freed at once, the rest saved), freed in
reverse in the backward pass while gradient temporaries come and go, and an
optimizer step's temporaries. The allocation sizes are those of fp16
activations, fp32 optimizer state and attention scores of that shape.

Each contender replays the trace in a fresh process (torch reads
``PYTORCH_CUDA_ALLOC_CONF`` once, gpuport ``GPUPORT_POOL`` once):

- ``gpuport``: gpuport's caching pool, plain segments;
- ``gpuport-expandable``: the same with ``GPUPORT_POOL=expandable``;
- ``torch``: PyTorch's caching allocator;
- ``torch-expandable``: with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``;
- ``cupy``: CuPy's default memory pool.

Reported, per contender (median over ``--rounds`` replays; the first
replay, which grows the pool, is measured for the peaks):

- ``peak_reserved``: the most bytes the allocator held from the driver;
- ``peak_in_use``: the most bytes the trace held live (the same for all);
- ``reserved/in_use``: their ratio, 1.0 at best;
- ``largest_after``: the largest single allocation that still succeeds at
  the end, with the long-lived state still allocated (binary search in
  2 MiB steps; the allocator may free its cache to serve it);
- ``alloc_free_us``: the replay's time over its number of allocations, µs
  per alloc+free pair.

A contender that cannot be imported, or has no GPU, is skipped with the
reason. ``--device host`` runs gpuport alone on the host backend (a smoke
test of the script; its expandable pool is an emulation).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

MIB = 1 << 20
CONTENDERS = ["gpuport", "gpuport-expandable", "torch", "torch-expandable", "cupy"]
SKIP_EXIT = 3

# ---- the trace -------------------------------------------------------------------------

Op = Tuple[str, int, int]  # ("a", id, bytes) or ("f", id, 0)


def generate_trace(hidden: int, layers: int, batch: int, seq: Tuple[int, int], steps: int, seed: int = 0) -> Dict[str, Any]:
    """The ops of one replay: ``long`` (allocated first, freed last) and ``steps``."""
    rng = random.Random(seed)
    ids = iter(range(1 << 62))
    long_ops: List[Op] = []
    long_ids: List[int] = []

    def long_lived(nbytes: int) -> None:
        i = next(ids)
        long_ops.append(("a", i, nbytes))
        long_ids.append(i)

    per_layer = [3 * hidden * hidden, hidden * hidden, 4 * hidden * hidden, 4 * hidden * hidden, 2 * hidden, 2 * hidden]
    for _ in range(layers):
        for n in per_layer:
            long_lived(2 * n)  # fp16 weights
            long_lived(2 * n)  # fp16 gradients
            long_lived(4 * n)  # fp32 Adam m
            long_lived(4 * n)  # fp32 Adam v
    heads = max(1, hidden // 128)
    ops: List[Op] = []
    for step in range(steps):
        frac = step / max(1, steps - 1)
        s = int(seq[0] + (seq[1] - seq[0]) * frac)
        s = max(16, int(s * rng.uniform(0.85, 1.0)) // 8 * 8)
        tokens = batch * s
        saved: List[List[int]] = []
        for _ in range(layers):
            keep: List[int] = []
            act = [2 * tokens * hidden, 6 * tokens * hidden, 2 * batch * heads * s * s, 2 * tokens * hidden,
                   8 * tokens * hidden, 8 * tokens * hidden, 2 * tokens * hidden]
            for j, n in enumerate(act):
                i = next(ids)
                ops.append(("a", i, n))
                if j in (2, 5):  # softmax input and GELU input: temporaries
                    tmp = next(ids)
                    ops.append(("a", tmp, n))
                    ops.append(("f", tmp, 0))
                keep.append(i)
            saved.append(keep)
        loss = next(ids)
        ops.append(("a", loss, 4 * tokens))
        for keep in reversed(saved):
            for i in reversed(keep):
                g = next(ids)
                ops.append(("a", g, 2 * tokens * hidden * rng.choice((1, 3, 4))))
                ops.append(("f", i, 0))
                ops.append(("f", g, 0))
        ops.append(("f", loss, 0))
        for n in per_layer:  # the optimizer's temporaries
            t = next(ids)
            ops.append(("a", t, 4 * n))
            ops.append(("f", t, 0))
    return {"long": long_ops, "long_ids": long_ids, "steps": ops}


def peak_in_use(trace: Dict[str, Any]) -> int:
    live: Dict[int, int] = {}
    cur = peak = 0
    for kind, i, n in trace["long"] + trace["steps"]:
        if kind == "a":
            live[i] = n
            cur += n
            peak = max(peak, cur)
        else:
            cur -= live.pop(i)
    return peak


# ---- the contenders, in a worker process -------------------------------------------------


class Skip(Exception):
    """The contender cannot run here."""


def make_allocator(name: str, device: str) -> Tuple[Callable[[int], Any], Callable[[Any], None], Callable[[], int], Callable[[], None]]:
    """(alloc, free, reserved_bytes, release_cache) for contender ``name``."""
    if name.startswith("gpuport"):
        try:
            import gpuport
            import gpuport.memory as gm
        except ImportError as e:
            raise Skip(f"gpuport cannot be imported: {e}")
        dev = gpuport.Device(device)
        alloc = gm.alloc
        return (lambda n: alloc(n, None, dev), lambda a: a.free(),
                lambda: gm.stats(dev)["pool_reserved"], lambda: gm.reset(dev))
    if name.startswith("torch"):
        try:
            import torch
        except ImportError as e:
            raise Skip(f"torch cannot be imported: {e}")
        if not torch.cuda.is_available() or not device.startswith("cuda"):
            raise Skip("torch sees no CUDA device")
        tdev = torch.device(device)
        torch.cuda.set_device(tdev)
        u8 = torch.uint8
        return (lambda n: torch.empty(n, dtype=u8, device=tdev), lambda a: None,
                lambda: torch.cuda.memory_reserved(tdev), torch.cuda.empty_cache)
    if name == "cupy":
        try:
            import cupy
        except ImportError as e:
            raise Skip(f"cupy cannot be imported: {e}")
        if not device.startswith("cuda"):
            raise Skip("cupy runs on CUDA devices only")
        try:
            cupy.cuda.Device(int(device.split(":")[1]) if ":" in device else 0).use()
        except Exception as e:  # noqa: BLE001 - no GPU, no driver
            raise Skip(f"cupy sees no CUDA device: {e}")
        pool = cupy.get_default_memory_pool()
        return (lambda n: cupy.cuda.alloc(n), lambda a: None, pool.total_bytes, pool.free_all_blocks)
    raise Skip(f"unknown contender {name}")


def replay(trace: Dict[str, Any], alloc: Callable[[int], Any], free: Callable[[Any], None],
           reserved: Optional[Callable[[], int]], keep_long: bool) -> Tuple[float, int, Dict[int, Any]]:
    """Replays the trace; (seconds, peak reserved sampled after each allocation or 0, long-lived blocks kept)."""
    live: Dict[int, Any] = {}
    peak = 0
    ops = trace["long"] + trace["steps"]
    t0 = time.perf_counter()
    if reserved is None:
        for kind, i, n in ops:
            if kind == "a":
                live[i] = alloc(n)
            else:
                free(live.pop(i))
    else:
        for kind, i, n in ops:
            if kind == "a":
                live[i] = alloc(n)
                peak = max(peak, reserved())
            else:
                free(live.pop(i))
    elapsed = time.perf_counter() - t0
    if not keep_long:
        for i in trace["long_ids"]:
            free(live.pop(i))
        live.clear()
    return elapsed, peak, live


def largest_allocation(alloc: Callable[[int], Any], free: Callable[[Any], None], limit: int) -> int:
    """The largest single allocation (2 MiB steps) that succeeds, by binary search."""
    lo, hi = 0, limit // (2 * MIB)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            block = alloc(mid * 2 * MIB)
        except Exception:  # noqa: BLE001 - each library raises its own out-of-memory error
            hi = mid - 1
            continue
        free(block)
        del block
        lo = mid
    return lo * 2 * MIB


def worker(args: argparse.Namespace) -> int:
    with open(args.trace) as f:
        trace = json.load(f)
    try:
        alloc, free, reserved, release = make_allocator(args.worker, args.device)
    except Skip as e:
        print(json.dumps({"skipped": str(e)}))
        return SKIP_EXIT
    note = ""
    if args.worker.startswith("gpuport"):
        import gpuport.memory as gm

        mode = gm.stats(args.device).get("pool_expandable", 0)
        note = {0: "plain segments", 1: "expandable (virtual memory)", 2: "expandable (emulated)"}.get(
            mode, "asked for expandable, fell back to plain segments")
    allocations = sum(1 for op in trace["long"] + trace["steps"] if op[0] == "a")
    _, peak, _ = replay(trace, alloc, free, reserved, keep_long=False)
    times = []
    for _ in range(args.rounds):
        seconds, _, _ = replay(trace, alloc, free, None, keep_long=False)
        times.append(seconds)
    # The end state: the long-lived state allocated, the cache as the trace left it.
    _, _, kept = replay(trace, alloc, free, None, keep_long=True)
    largest = largest_allocation(alloc, free, args.probe_limit)
    for block in list(kept.values()):
        free(block)
    kept.clear()
    release()
    print(json.dumps({
        "peak_reserved": peak,
        "alloc_free_us": statistics.median(times) / allocations * 1e6,
        "largest_after": largest,
        "allocations": allocations,
        "note": note,
    }))
    return 0


# ---- the driver ---------------------------------------------------------------------------


def env_for(name: str) -> Dict[str, str]:
    env = dict(os.environ)
    env.pop("GPUPORT_POOL", None)
    conf = [c for c in env.get("PYTORCH_CUDA_ALLOC_CONF", "").split(",") if c and not c.startswith("expandable_segments")]
    if name == "gpuport-expandable":
        env["GPUPORT_POOL"] = "expandable"
    if name == "torch-expandable":
        conf.append("expandable_segments:True")
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = ",".join(conf)
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return env


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="See the module docstring for what is measured.")
    p.add_argument("--device", default="cuda:0", help="cuda:N (every contender) or host (gpuport only)")
    p.add_argument("--rounds", type=int, default=5, help="timed replays per contender (median)")
    p.add_argument("--steps", type=int, default=12, help="training steps in the trace")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", default="256:2048", help="first:last sequence length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--probe-limit", type=int, default=256 << 30, help="largest size the end probe tries (bytes)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--trace", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    first, last = (int(x) for x in args.seq.split(":"))
    trace = generate_trace(args.hidden, args.layers, args.batch, (first, last), args.steps, args.seed)
    in_use = peak_in_use(trace)
    names = [n for n in args.contenders.split(",") if n]
    if args.device == "host":
        names = [n for n in names if n.startswith("gpuport")]
    results: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        with open(path, "w") as f:
            json.dump(trace, f)
        for name in names:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--trace", path,
                   "--device", args.device, "--rounds", str(args.rounds), "--probe-limit", str(args.probe_limit)]
            proc = subprocess.run(cmd, env=env_for(name), capture_output=True, text=True)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            out = json.loads(lines[-1]) if lines else {}
            if proc.returncode == SKIP_EXIT or "skipped" in out:
                print(f"skipped {name}: {out.get('skipped', proc.stderr.strip()[-300:])}", file=sys.stderr)
                continue
            if proc.returncode != 0 or not out:
                print(f"failed {name} (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}", file=sys.stderr)
                continue
            out["peak_in_use"] = in_use
            results[name] = out
    print(f"trace: {len(trace['long']) + len(trace['steps'])} ops, peak in use {in_use / MIB:.0f} MiB "
          f"(hidden {args.hidden}, layers {args.layers}, batch {args.batch}, seq {args.seq}, {args.steps} steps)")
    header = f"{'contender':<20} {'peak reserved MiB':>18} {'reserved/in use':>16} {'largest after MiB':>18} {'alloc+free µs':>14}"
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        print(f"{name:<20} {r['peak_reserved'] / MIB:>18.0f} {r['peak_reserved'] / in_use:>16.3f} "
              f"{r['largest_after'] / MIB:>18.0f} {r['alloc_free_us']:>14.2f}  {r.get('note', '')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "peak_in_use": in_use, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
