#!/usr/bin/env python3
"""Peer copies between devices from Python: gpuport against torch, same process, same buffers.

    python benches/peer.py [--mib 256] [--reps 21] [--copies 10] [--pairs 0,1 | all] [--json FILE]

The source is a torch tensor of ``--mib`` MiB on the pair's first device
(cuda:0 by default), the destination one on its second (cuda:1); every contestant copies that tensor into that tensor (or, for
``.to``, into a new one from torch's caching allocator). Peer access is
enabled both ways first (gpuport's ``Device.enable_peer_access``; torch
enables it itself on its first peer copy), so every row takes the same
path. Rows:

- ``gpuport memcpy_peer_async``: ``gpuport.runtime.memcpy_peer_async(b,
  "cuda:1", a, "cuda:0", n, stream=s)`` on a ``gpuport.Stream`` of cuda:0;
- ``gpuport memcpy_async``: ``gpuport.runtime.memcpy_async(b, a, n,
  stream=s)``: a torch tensor's CUDA Array Interface names no device, so
  this is cuda:0's device-to-device copy between two unified addresses
  (``memcpy`` makes a peer copy by itself where both operands name their
  device: ``runtime.malloc`` arrays, DLPack tensors);
- ``torch copy_``: ``b.copy_(a)`` on torch's current stream;
- ``torch .to``: ``a.to("cuda:1")``.

Each round times ``--copies`` copies with ``time.perf_counter`` to
completion (both devices synchronized inside the timed region); the rows
run in a rotating order each round (so drift and warm-up hit every row),
after one warm-up round; the figure is the median of ``--reps`` rounds.
Bandwidth is bytes copied per second (GB/s = 1e9 B/s); the ratio is
gpuport's bandwidth over torch's ``copy_`` (above 1: gpuport is faster).

Without torch, or with fewer than 2 CUDA devices (for gpuport or torch),
it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable


def skip(reason: str) -> None:
    print(f"peer.py: skipped: {reason}")
    sys.exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB per copy (default 256)")
    parser.add_argument("--reps", type=int, default=21, help="timed rounds (default 21)")
    parser.add_argument("--copies", type=int, default=10, help="copies per round and row (default 10)")
    parser.add_argument("--pairs", default="0,1", help="'all' (every ordered pair of devices) or two indices, default 0,1")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON to FILE")
    args = parser.parse_args()
    if args.mib <= 0 or args.reps <= 0 or args.copies <= 0:
        parser.error("--mib, --reps and --copies take positive integers")

    import gpuport
    from gpuport import runtime as rt

    if not gpuport.is_available("cuda"):
        notes = "; ".join(note for name, ok, note in gpuport.backend_status() if name == "cuda")
        skip(f"gpuport's cuda backend is unavailable: {notes}")
    cuda = [d for d in gpuport.devices() if d.spec.startswith("cuda:")]
    if len(cuda) < 2:
        skip(f"needs 2 CUDA devices, gpuport sees {len(cuda)}")
    try:
        import torch
    except ImportError as e:
        skip(f"torch is not importable: {e}")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        skip(f"needs 2 CUDA devices, torch sees {torch.cuda.device_count() if torch.cuda.is_available() else 0}")

    if args.pairs == "all":
        count = min(len(cuda), torch.cuda.device_count())
        pairs = [(i, j) for i in range(count) for j in range(count) if i != j]
    else:
        try:
            i, j = (int(k) for k in args.pairs.split(","))
        except ValueError:
            parser.error(f"--pairs takes 'all' or two device indices like '0,1', not {args.pairs!r}")
        pairs = [(i, j)]
    reports = [measure_pair(args, gpuport, rt, torch, i, j) for i, j in pairs]
    if len(reports) > 1:
        print(f"\nevery ordered pair, {args.mib} MiB: gpuport memcpy_peer_async against torch copy_")
        print(f"{'pair':<8} {'gpuport GB/s':>13} {'torch GB/s':>11} {'ratio':>7}")
        for r in reports:
            g, t = r["gb_per_s"]["gpuport memcpy_peer_async"], r["gb_per_s"]["torch copy_"]
            print(f"{r['pair']:<8} {g:>13.1f} {t:>11.1f} {g / t:>6.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports[0] if len(reports) == 1 else reports, f, indent=2)
        print(f"JSON: {args.json}")


def measure_pair(args: argparse.Namespace, gpuport: Any, rt: Any, torch: Any, i: int, j: int) -> dict[str, Any]:
    """Time every row copying cuda:i -> cuda:j; exits if gpuport's copy is wrong."""
    src, dst = f"cuda:{i}", f"cuda:{j}"
    d0, d1 = gpuport.Device(src), gpuport.Device(dst)
    access = d0.can_access_peer(d1) and d1.can_access_peer(d0)
    if access:
        d0.enable_peer_access(d1)
        d1.enable_peer_access(d0)
    n = args.mib << 20
    a = torch.full((n,), 7, dtype=torch.uint8, device=src)
    b = torch.zeros((n,), dtype=torch.uint8, device=dst)
    s = gpuport.Stream(src)

    def sync() -> None:
        s.synchronize()
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)

    def gp_peer() -> None:
        for _ in range(args.copies):
            rt.memcpy_peer_async(b, dst, a, src, n, stream=s)

    def gp_memcpy() -> None:
        for _ in range(args.copies):
            rt.memcpy_async(b, a, n, stream=s)

    def torch_copy() -> None:
        for _ in range(args.copies):
            b.copy_(a)

    def torch_to() -> None:
        for _ in range(args.copies):
            a.to(dst)

    rows: list[tuple[str, Callable[[], None]]] = [
        ("gpuport memcpy_peer_async", gp_peer),
        ("gpuport memcpy_async", gp_memcpy),
        ("torch copy_", torch_copy),
        ("torch .to", torch_to),
    ]
    times: dict[str, list[float]] = {name: [] for name, _ in rows}
    for r in range(args.reps + 1):
        order = rows[r % len(rows) :] + rows[: r % len(rows)]
        for name, fn in order:
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            if r > 0:  # round 0 is the warm-up
                times[name].append(time.perf_counter() - t0)

    # Every row wrote b (or a copy of a): check gpuport's last one did copy.
    b.zero_()
    rt.memcpy_peer(b, dst, a, src, n)
    if not bool((b == 7).all()):
        print(f"peer.py: gpuport's peer copy {src} -> {dst} did not copy the source", file=sys.stderr)
        sys.exit(1)

    gbps = {name: n * args.copies / statistics.median(t) / 1e9 for name, t in times.items()}
    base = gbps["torch copy_"]
    print(
        f"peer copy {src} -> {dst}, {args.mib} MiB, {args.copies} copies per round, median of {args.reps} rounds, "
        f"peer access: {'enabled' if access else 'not possible (staged through the host)'}"
    )
    print(f"{'row':<28} {'GB/s':>10} {'vs torch copy_':>15}")
    for name, _ in rows:
        print(f"{name:<28} {gbps[name]:>10.1f} {gbps[name] / base:>14.2f}x")
    return {
        "pair": f"{i}->{j}",
        "bytes": n,
        "copies_per_round": args.copies,
        "reps": args.reps,
        "peer_access": access,
        "gb_per_s": gbps,
        "ratio_vs_torch_copy_": {k: v / base for k, v in gbps.items()},
        "torch": torch.__version__,
        "devices": [torch.cuda.get_device_name(i), torch.cuda.get_device_name(j)],
    }


if __name__ == "__main__":
    main()
