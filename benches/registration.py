"""What buffer registration (``Communicator.register``, NCCL's
``ncclCommRegister``) gains or costs an all-reduce: float32 sum
all-reduces of 1 KiB to 256 MiB (by 4x) on one buffer registered with the
communicator and one of the same size that is not, alternating which goes
first in every round, in the same processes and on the same stream.

Run one process per GPU with the launcher (NCCL_NVLS_ENABLE=0 stays set
where the machine needs it; the launcher passes the environment on):

    python -m gpuport.distributed.run -n 2 benches/registration.py [--max-mib 256] [--out results.json]

Each row is the median of ROUNDS rounds of ITERS back-to-back all-reduces,
each round between two ``synchronize`` calls; bus bandwidth follows
nccl-tests: bytes / time * 2 (n - 1) / n. The values are checked once per
size, on both buffers. ``held`` says whether the library registered the
buffer (False on the host engine and on an NCCL older than 2.19, where
both columns time the same path). ``--device host`` runs it on the host
engine, to check the script without a GPU.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

import gpuport
from gpuport import distributed as dist

SIZES = [1 << k for k in range(10, 29, 2)]  # 1 KiB .. 256 MiB by 4x
ROUNDS = 9


def arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def iters_for(nbytes: int) -> int:
    return max(5, min(200, (256 << 20) // max(nbytes, 1)))


def main() -> None:
    device = arg("--device", "")
    comm = dist.init(device=device or None)
    rank, n = comm.rank, comm.size
    max_bytes = int(arg("--max-mib", "256")) << 20
    if rank == 0:
        print(f"== all_reduce float32 sum, {n} ranks, {comm.engine}, registered against not", flush=True)
        print(f"{'bytes':>11}  {'plain us':>10} {'GB/s':>8}  {'registered us':>13} {'GB/s':>8}  ratio  held", flush=True)
    rows = [measure(comm, nbytes, rank, n) for nbytes in SIZES if nbytes <= max_bytes]
    if rank == 0 and "--out" in sys.argv:
        with open(arg("--out", ""), "w") as f:
            json.dump({"world_size": n, "engine": comm.engine, "rows": rows}, f, indent=1)


def filled(comm: dist.Communicator, count: int, value: float) -> gpuport.MemArray:
    a = gpuport.MemArray((count,), "float32", device=comm.device)
    a.read_numpy_array(np.full(count, value, dtype=np.float32))
    # read_numpy_array leaves the host copy current: registration needs the device's.
    if not str(getattr(comm.device, "spec", comm.device)).startswith("host"):
        a.move_memory("device")
    return a


def check(comm: dist.Communicator, a: gpuport.MemArray, rank: int, n: int) -> None:
    """One all-reduce of every rank's rank + 1 gives n (n + 1) / 2 everywhere."""
    a.read_numpy_array(np.full(a.shape[0], float(rank + 1), dtype=np.float32))
    comm.all_reduce(a)
    comm.synchronize()
    got = a.to_numpy()
    want = n * (n + 1) / 2
    if not (got == want).all():
        raise AssertionError(f"rank {rank}: all-reduce of {a.shape[0]} floats gave {got[:4]}..., not {want}")


def measure(comm: dist.Communicator, nbytes: int, rank: int, n: int) -> dict:
    count = nbytes // 4
    # Values that stay finite over every round: zeros.
    plain, registered = filled(comm, count, 0.0), filled(comm, count, 0.0)
    with comm.register(registered) as reg:
        check(comm, plain, rank, n)
        check(comm, registered, rank, n)
        k = iters_for(nbytes)

        def timed(a: gpuport.MemArray):
            def round_() -> float:
                comm.synchronize()
                start = time.perf_counter()
                for _ in range(k):
                    comm.all_reduce(a)
                comm.synchronize()
                return (time.perf_counter() - start) / k

            return round_

        rounds = {"plain": timed(plain), "registered": timed(registered)}
        for fn in rounds.values():
            fn()  # warm both paths
        times: dict[str, list[float]] = {"plain": [], "registered": []}
        for r in range(ROUNDS):
            order = list(rounds.items())
            if r % 2:
                order.reverse()
            for name, fn in order:
                times[name].append(fn())
        held = reg.held
    row: dict = {"bytes": nbytes, "ranks": n, "held": held}
    for name, ts in times.items():
        med = statistics.median(ts)
        row[f"{name}_us"] = med * 1e6
        row[f"{name}_busbw_gbs"] = nbytes / med * 2 * (n - 1) / n / 1e9 if n > 1 else 0.0
    row["ratio_time"] = row["registered_us"] / row["plain_us"]
    if rank == 0:
        print(
            f"{nbytes:>11}  {row['plain_us']:10.2f} {row['plain_busbw_gbs']:8.2f}  "
            f"{row['registered_us']:13.2f} {row['registered_busbw_gbs']:8.2f}  {row['ratio_time']:.3f}  {held}",
            flush=True,
        )
    return row


if __name__ == "__main__":
    main()
