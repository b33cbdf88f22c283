"""Collective bus bandwidth and latency: gpuport.distributed against
torch.distributed (NCCL backend), in the same processes, on the same
tensors and stream, alternating which goes first in every round.

Operations (``--ops``, default all four): all_reduce, all_gather,
reduce_scatter and broadcast (from rank 0).

Run one process per GPU with the launcher (NCCL_NVLS_ENABLE=0 stays set
where the machine needs it; the launcher passes the environment on):

    python -m gpuport.distributed.run -n 2 benches/collectives.py [--ops all_reduce,broadcast] [--max-mib 256] [--out results.json]

Bus bandwidth follows nccl-tests (``bytes`` is the larger buffer: the
reduced tensor, the gathered output, the scattered input, the broadcast
tensor): all_reduce bytes / time * 2 (n - 1) / n; all_gather and
reduce_scatter bytes / time * (n - 1) / n; broadcast bytes / time. Each row
is the median of ROUNDS rounds of ITERS back-to-back calls, timed with a
device synchronize on both sides of the round.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as td

from gpuport import distributed as dist

SIZES = [8 << (3 * k) for k in range(9)] + [1 << 30]  # 8 B .. 128 MiB by 8x, and 1 GiB
SIZES = sorted(set(SIZES + [64 << 20, 256 << 20]))
ROUNDS = 7


def iters_for(nbytes: int) -> int:
    return max(5, min(200, (256 << 20) // max(nbytes, 1)))


def arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def main() -> None:
    ops = [op for op in arg("--ops", ",".join(OPS)).split(",") if op]
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        sys.exit(f"collectives.py: unknown --ops {unknown}; accepted: {', '.join(OPS)}")
    comm = dist.init()
    rank, n = comm.rank, comm.size
    dev = torch.device(f"cuda:{rank}")
    torch.cuda.set_device(dev)
    os.environ.setdefault("MASTER_ADDR", os.environ.get("GPUPORT_MASTER_ADDR", "127.0.0.1"))
    os.environ.setdefault("MASTER_PORT", str(int(os.environ["GPUPORT_MASTER_PORT"]) + 1))
    td.init_process_group("nccl", rank=rank, world_size=n, device_id=dev)
    stream = torch.cuda.current_stream(dev)
    handle = stream.cuda_stream
    rows = []
    for op in ops:
        if rank == 0:
            print(f"== {op}, {n} ranks", flush=True)
        for nbytes in [s for s in SIZES if s <= int(arg("--max-mib", "1024")) << 20]:
            rows.append(measure(op, nbytes, comm, rank, n, dev, handle))
    comm.synchronize(handle)
    if rank == 0 and "--out" in sys.argv:
        with open(arg("--out", ""), "w") as f:
            json.dump({"world_size": n, "engine": comm.engine, "torch": torch.__version__, "rows": rows}, f, indent=1)
    td.destroy_process_group()


def measure(op: str, nbytes: int, comm, rank: int, n: int, dev, handle) -> dict:
    """Time one operation at one size, torch and gpuport alternating; check gpuport's values once."""
    # Every buffer holds a multiple of n float32 elements, so the per-rank part divides evenly.
    big = max(nbytes // 4, 2 * n) // n * n
    part = big // n
    t = torch.full((big,), float(rank + 1), dtype=torch.float32, device=dev)
    small = torch.full((part,), float(rank + 1), dtype=torch.float32, device=dev)
    out_big = torch.empty(big, dtype=torch.float32, device=dev)
    out_small = torch.empty(part, dtype=torch.float32, device=dev)
    calls = {
        "all_reduce": (lambda: td.all_reduce(t), lambda: comm.all_reduce(t, stream=handle)),
        "all_gather": (
            lambda: td.all_gather_into_tensor(out_big, small),
            lambda: comm.all_gather(small, out_big, stream=handle),
        ),
        "reduce_scatter": (
            lambda: td.reduce_scatter_tensor(out_small, t),
            lambda: comm.reduce_scatter(t, out_small, stream=handle),
        ),
        "broadcast": (lambda: td.broadcast(t, src=0), lambda: comm.broadcast(t, root=0, stream=handle)),
    }
    torch_call, ours_call = calls[op]
    check_values(op, comm, rank, n, dev, handle, big, part)
    k = iters_for(nbytes)

    def timed(call):
        def round_() -> float:
            torch.cuda.synchronize(dev)
            start = time.perf_counter()
            for _ in range(k):
                call()
            torch.cuda.synchronize(dev)
            return (time.perf_counter() - start) / k

        return round_

    torch_round, ours_round = timed(torch_call), timed(ours_call)
    torch_round(), ours_round()  # warm both paths
    times = {"torch": [], "gpuport": []}
    for r in range(ROUNDS):
        order = [("torch", torch_round), ("gpuport", ours_round)]
        if r % 2:
            order.reverse()
        for name, fn in order:
            times[name].append(fn())
    row = {"op": op, "ranks": n, "bytes": big * 4}
    for name, ts in times.items():
        med = statistics.median(ts)
        row[f"{name}_us"] = med * 1e6
        row[f"{name}_busbw_gbs"] = row["bytes"] / med * BUS_FACTOR[op](n) / 1e9
    row["ratio_time"] = row["gpuport_us"] / row["torch_us"]
    if rank == 0:
        print(
            f"{op:<15}{row['bytes']:>12} B  torch {row['torch_us']:10.2f} us {row['torch_busbw_gbs']:8.2f} GB/s   "
            f"gpuport {row['gpuport_us']:10.2f} us {row['gpuport_busbw_gbs']:8.2f} GB/s   time ratio {row['ratio_time']:.3f}",
            flush=True,
        )
    return row


def check_values(op: str, comm, rank: int, n: int, dev, handle, big: int, part: int) -> None:
    """gpuport's result of ``op`` on fresh buffers equals what the operation defines; exits otherwise."""
    x = torch.full((big,), float(rank + 1), dtype=torch.float32, device=dev)
    if op == "all_reduce":
        comm.all_reduce(x, stream=handle)
        want = torch.full((big,), float(n * (n + 1) // 2), device=dev)
        got = x
    elif op == "all_gather":
        got = torch.empty(big, dtype=torch.float32, device=dev)
        comm.all_gather(x[:part].contiguous(), got, stream=handle)
        want = torch.arange(1, n + 1, dtype=torch.float32, device=dev).repeat_interleave(part)
    elif op == "reduce_scatter":
        got = torch.empty(part, dtype=torch.float32, device=dev)
        comm.reduce_scatter(x, got, stream=handle)
        want = torch.full((part,), float(n * (n + 1) // 2), device=dev)
    else:
        comm.broadcast(x, root=0, stream=handle)
        want = torch.full((big,), 1.0, device=dev)
        got = x
    comm.synchronize(handle)
    torch.cuda.synchronize(dev)
    if not torch.equal(got, want):
        sys.exit(f"collectives.py: rank {rank}: gpuport's {op} of {big * 4} B gave wrong values")


if __name__ == "__main__":
    main()
