"""Two nodes, one rank each (run by ci/gpu-two-nodes): every collective's values on the GPU, then all-reduce timed against torch.distributed in the same processes, the same NCCL settings (medians of 6 rounds, the order of the contenders rotating). A third contender, gpuport's all_reduce waited for with torch.cuda.synchronize(), tells the call's cost from the wait's."""
import os, sys, time, statistics
import numpy as np, gpuport
from gpuport import distributed as dist
comm = dist.init()
r, n = comm.rank, comm.size
def arr(x):
    return gpuport.asarray(np.asarray(x), device="cuda:0")
a = arr(np.arange(3, dtype=np.float32) + r); comm.all_reduce(a); comm.synchronize()
assert a.to_numpy().tolist() == [float(sum(range(n)) + k * n) for k in range(3)], a.to_numpy()
b = arr(np.full(2, 7 * r, dtype=np.uint8)); comm.broadcast(b, root=n - 1); comm.synchronize()
assert b.to_numpy().tolist() == [7 * (n - 1)] * 2
red = arr(np.array([1.0 + r])); comm.reduce(red, root=0); comm.synchronize()
assert red.to_numpy().tolist() == ([float(sum(1 + k for k in range(n)))] if r == 0 else [1.0 + r])
g = arr(np.zeros(n, dtype=np.int32)); comm.all_gather(arr(np.array([10 * r], dtype=np.int32)), g); comm.synchronize()
assert g.to_numpy().tolist() == [10 * k for k in range(n)], g.to_numpy()
out = arr(np.zeros(1, dtype=np.int32)); comm.reduce_scatter(arr(np.arange(n, dtype=np.int32)), out); comm.synchronize()
assert out.to_numpy().tolist() == [n * r]
x, y = arr(np.full(2, float(r))), arr(np.zeros(2))
comm.group(lambda: (comm.send(x, (r + 1) % n), comm.recv(y, (r - 1) % n))); comm.synchronize()
assert y.to_numpy().tolist() == [float((r - 1) % n)] * 2
print(f"rank {r} values ok", flush=True)
import torch, torch.distributed as td
td.init_process_group("nccl", init_method=f"tcp://{os.environ['TWO_ADDR']}:{int(os.environ['TWO_PORT'])}", rank=r, world_size=n)
torch.cuda.set_device(0)
rows = []
for size in (8, 1 << 21, 1 << 24, 1 << 28):
    t = torch.ones(size // 4, device="cuda")
    m = gpuport.from_dlpack(t)
    def ours():
        comm.all_reduce(m); comm.synchronize()
    def theirs():
        td.all_reduce(t); torch.cuda.synchronize()
    def ours_device_sync():  # gpuport's call, torch's wait: tells the call's cost from the wait's
        comm.all_reduce(m); torch.cuda.synchronize()
    contenders = [("gpuport", ours), ("torch", theirs), ("gpuport+cuda sync", ours_device_sync)]
    for _, f in contenders * 2:
        f()
    reps = 20 if size <= (1 << 24) else 5
    res = {name: [] for name, _ in contenders}
    for rnd in range(6):
        for name, f in contenders[rnd % 3:] + contenders[:rnd % 3]:
            t0 = time.perf_counter()
            for _ in range(reps):
                f()
            res[name].append((time.perf_counter() - t0) / reps * 1e6)
    rows.append((size, res))
if r == 0:
    for size, res in rows:
        tt, gg, dd = (statistics.median(res[k]) for k in ("torch", "gpuport", "gpuport+cuda sync"))
        span = lambda k: f"[{min(res[k]):.1f},{max(res[k]):.1f}]"
        print(f"allreduce {size} B: torch {tt:.1f} us {span('torch')} gpuport {gg:.1f} us {span('gpuport')} ratio {gg/tt:.3f}"
              f"; gpuport+cuda sync {dd:.1f} us {span('gpuport+cuda sync')} ratio {dd/tt:.3f}", flush=True)
td.destroy_process_group()
