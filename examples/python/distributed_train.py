"""Data-parallel training across two ranks with gpuport.distributed.

Each rank fits a linear model on its own shard of the data and the ranks
average their gradients with an all-reduce every step, as
DistributedDataParallel does. Run as a script, it starts itself twice
through the launcher (``python -m gpuport.distributed.run -n 2``): on two
GPUs when there are two, else on the host backend.

    python examples/python/distributed_train.py
"""

import os
import sys

import numpy as np

import gpuport
from gpuport import distributed as dist


def on_device(x: np.ndarray, device) -> gpuport.MemArray:
    a = gpuport.MemArray(x.shape, str(x.dtype), device=device)
    a.read_numpy_array(x)
    return a


def train() -> None:
    comm = dist.init(device=os.environ["EXAMPLE_DEVICE"] or None)
    rank, size = comm.rank, comm.size
    rng = np.random.default_rng(rank)
    true_w = np.array([2.0, -3.0, 0.5], dtype=np.float32)
    x = rng.normal(size=(256, 3)).astype(np.float32)  # this rank's shard
    y = x @ true_w
    w = np.zeros(3, dtype=np.float32)
    for _ in range(200):
        grad = 2 * x.T @ (x @ w - y) / len(x)
        g = on_device(grad.astype(np.float32), comm.device)
        comm.all_reduce(g, op="avg")  # the mean gradient over every rank's shard
        comm.synchronize()
        w -= 0.1 * g.to_numpy()
    assert np.allclose(w, true_w, atol=1e-3), w
    # Every rank holds the same weights: check it with a max and a min.
    hi = on_device(w, comm.device)
    lo = on_device(w, comm.device)
    comm.all_reduce(hi, op="max")
    comm.all_reduce(lo, op="min")
    comm.synchronize()
    assert np.array_equal(hi.to_numpy(), lo.to_numpy())
    print(f"rank {rank} of {size} on {comm.device.spec} ({comm.engine}): w = {np.round(w, 3)}")


def main() -> None:
    if "GPUPORT_RANK" in os.environ:
        train()
        return
    cuda = [d for d in gpuport.devices() if d.backend == "cuda"]
    os.environ["EXAMPLE_DEVICE"] = "" if len(cuda) >= 2 else "host"
    from gpuport.distributed import run

    status = run.main(["-n", "2", __file__])
    if status != 0:
        sys.exit(status)
    print("ok")


if __name__ == "__main__":
    main()
