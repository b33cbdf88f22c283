"""All-reduce bus bandwidth and latency: gpuport.distributed against
torch.distributed (NCCL backend), in the same processes, on the same
tensors and stream, alternating which goes first in every round.

Run one process per GPU with the launcher (NCCL_NVLS_ENABLE=0 stays set
where the machine needs it; the launcher passes the environment on):

    python -m gpuport.distributed.run -n 2 benches/collectives.py [--out results.json]

Bus bandwidth follows nccl-tests: bytes / time * 2 (n - 1) / n. Each row
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


def main() -> None:
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
    for nbytes in SIZES:
        t = torch.ones(max(nbytes // 4, 2), dtype=torch.float32, device=dev)
        k = iters_for(nbytes)

        def torch_round() -> float:
            torch.cuda.synchronize(dev)
            start = time.perf_counter()
            for _ in range(k):
                td.all_reduce(t)
            torch.cuda.synchronize(dev)
            return (time.perf_counter() - start) / k

        def ours_round() -> float:
            torch.cuda.synchronize(dev)
            start = time.perf_counter()
            for _ in range(k):
                comm.all_reduce(t, stream=handle)
            torch.cuda.synchronize(dev)
            return (time.perf_counter() - start) / k

        torch_round(), ours_round()  # warm both paths
        times = {"torch": [], "gpuport": []}
        for r in range(ROUNDS):
            order = [("torch", torch_round), ("gpuport", ours_round)]
            if r % 2:
                order.reverse()
            for name, fn in order:
                times[name].append(fn())
        row = {"bytes": t.numel() * 4}
        for name, ts in times.items():
            med = statistics.median(ts)
            row[f"{name}_us"] = med * 1e6
            row[f"{name}_busbw_gbs"] = row["bytes"] / med * 2 * (n - 1) / n / 1e9
        row["ratio_time"] = row["gpuport_us"] / row["torch_us"]
        rows.append(row)
        if rank == 0:
            print(
                f"{row['bytes']:>12} B  torch {row['torch_us']:10.2f} us {row['torch_busbw_gbs']:8.2f} GB/s   "
                f"gpuport {row['gpuport_us']:10.2f} us {row['gpuport_busbw_gbs']:8.2f} GB/s   time ratio {row['ratio_time']:.3f}",
                flush=True,
            )
    comm.synchronize(handle)
    if rank == 0 and "--out" in sys.argv:
        with open(sys.argv[sys.argv.index("--out") + 1], "w") as f:
            json.dump({"world_size": n, "engine": comm.engine, "torch": torch.__version__, "rows": rows}, f, indent=1)
    td.destroy_process_group()


if __name__ == "__main__":
    main()
