#!/usr/bin/env python3
"""CUDA driver calls per Python operation, gpuport beside torch and cuda-python.

    gcc -O2 -shared -fPIC -o /tmp/libcount.so benches/driver_calls/count.c -ldl
    python3 benches/driver_calls.py --counter /tmp/libcount.so [--device cuda:0] [--calls 2000] [--json FILE]

Each (library, operation) runs in a fresh process with the counter
preloaded (``benches/driver_calls/count.c``): warm-up calls, a snapshot of
the counts, ``--calls`` calls, a second snapshot. A row is the calls per
operation by driver function (the difference over ``--calls``).

Operations:

- ``alloc_free_1MiB``: gpuport ``memory.alloc(1 << 20, None, dev).free()``;
  torch ``torch.empty(1 << 20, dtype=torch.uint8, device=...)`` dropped;
  cuda-python ``cudaMallocAsync`` + ``cudaFreeAsync``.
- ``export_idle``: ``__dlpack__()`` of an idle 1 MiB device array (gpuport's
  ``asarray``, torch's tensor), the capsule dropped.
- ``import_peer``: ``gpuport.from_dlpack`` of a torch tensor, and
  ``torch.from_dlpack`` of a gpuport array.
- ``kernel_1MiB``: one elementwise kernel on a 1 MiB device array on a
  stream: gpuport ``MemArray.add_index(stream=s)``, torch ``t.add_(1)``.
- ``new_from_host_1MiB``: a new device array from a 1 MiB NumPy array:
  ``gpuport.asarray(x, device=dev)``, ``torch.from_numpy(x).to(dev)``.
- ``graph_replay``: a replay of a captured one-kernel graph: gpuport
  ``Graph.replay(s)`` of a captured ``add_index``, torch
  ``CUDAGraph.replay()`` of a captured ``add_(1)``.
- ``kernel_export_busy``: the kernel of ``kernel_1MiB``, then ``__dlpack__``
  of the busy array to another stream of the library (the consumer's
  stream must wait for the kernel): gpuport ``a.__dlpack__(stream=other.handle)``,
  torch ``t.__dlpack__(stream=other.cuda_stream)``. Subtract ``kernel_1MiB``
  for the export's own calls.
- ``kernel_move_to_host``: the kernel of ``kernel_1MiB``, then the array's
  data brought to the host: gpuport ``a.move_memory("host", stream=s)``
  (the host copy becomes current), torch ``h.copy_(t)`` into a CPU tensor.
  Subtract ``kernel_1MiB`` for the move's own calls.
- ``stream_synchronize``: the default stream's ``synchronize()`` (a check
  that the counter sees each library's calls: one ``cuStreamSynchronize``).

CuPy is not in the table: its Cython modules call the driver through their
own link to libcuda, which the counter does not see.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Callable, Dict, List, Tuple

MIB = 1 << 20
ROWS: List[Tuple[str, str]] = [
    ("alloc_free_1MiB", "gpuport"),
    ("alloc_free_1MiB", "torch"),
    ("alloc_free_1MiB", "cuda-python"),
    ("export_idle", "gpuport"),
    ("export_idle", "torch"),
    ("import_peer", "gpuport"),
    ("import_peer", "torch"),
    ("kernel_1MiB", "gpuport"),
    ("kernel_1MiB", "torch"),
    ("new_from_host_1MiB", "gpuport"),
    ("new_from_host_1MiB", "torch"),
    ("graph_replay", "gpuport"),
    ("graph_replay", "torch"),
    ("kernel_export_busy", "gpuport"),
    ("kernel_export_busy", "torch"),
    ("kernel_move_to_host", "gpuport"),
    ("kernel_move_to_host", "torch"),
    ("stream_synchronize", "gpuport"),
    ("stream_synchronize", "torch"),
]


def operation(op: str, who: str, device: str) -> Callable[[], None]:
    ordinal = int(device.split(":")[1]) if ":" in device else 0
    if who == "cuda-python":
        try:
            from cuda.bindings import runtime as rt
        except ImportError:
            from cuda import cudart as rt  # type: ignore[no-redef]
        rt.cudaSetDevice(ordinal)
        _, stream = rt.cudaStreamCreate()

        def m() -> None:
            _, p = rt.cudaMallocAsync(MIB, stream)
            rt.cudaFreeAsync(p, stream)

        return m
    import numpy as np

    if who == "gpuport" or op == "import_peer":
        import gpuport
        import gpuport.memory as gm

        dev = gpuport.Device(device)
    if who == "torch" or op == "import_peer":
        import torch

        tdev = torch.device("cuda", ordinal)
    if op.startswith("kernel") and who == "gpuport":
        s = gpuport.Stream(dev)
        other = gpuport.Stream(dev)
        k = gpuport.MemArray((MIB // 4,), "float32", device=dev)
        k.move_memory("device", stream=s)
        s.synchronize()
        if op == "kernel_export_busy":
            return lambda: (k.add_index(stream=s), k.__dlpack__(stream=other.handle))
        if op == "kernel_move_to_host":
            return lambda: (k.add_index(stream=s), k.move_memory("host", stream=s))
        return lambda: k.add_index(stream=s)
    if op.startswith("kernel"):
        t = torch.zeros(MIB // 4, dtype=torch.float32, device=tdev)
        other_t = torch.cuda.Stream(tdev)
        h = torch.empty(MIB // 4, dtype=torch.float32)
        if op == "kernel_export_busy":
            return lambda: (t.add_(1), t.__dlpack__(stream=other_t.cuda_stream))
        if op == "kernel_move_to_host":
            return lambda: (t.add_(1), h.copy_(t))
        return lambda: t.add_(1)
    if op == "new_from_host_1MiB":
        x = np.zeros(MIB // 4, np.float32)
        if who == "gpuport":
            return lambda: gpuport.asarray(x, device=dev)
        return lambda: torch.from_numpy(x).to(tdev)
    if op == "graph_replay" and who == "gpuport":
        s = gpuport.Stream(dev)
        g_arr = gpuport.MemArray((MIB // 4,), "float32", device=dev)
        g_arr.move_memory("device", stream=s)
        s.synchronize()
        with s.capture() as g:
            g_arr.add_index(stream=s)
        return lambda: g.replay(s)
    if op == "graph_replay":
        t = torch.zeros(MIB // 4, dtype=torch.float32, device=tdev)
        side = torch.cuda.Stream(tdev)
        with torch.cuda.stream(side):
            t.add_(1)  # warm-up outside the capture, as torch's docs ask
        torch.cuda.synchronize()
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            t.add_(1)
        return lambda: cg.replay()
    if op == "stream_synchronize" and who == "gpuport":
        s = dev.default_stream
        return lambda: s.synchronize()
    if op == "stream_synchronize":
        return lambda: torch.cuda.current_stream(tdev).synchronize()
    if op == "alloc_free_1MiB" and who == "gpuport":
        return lambda: gm.alloc(MIB, None, dev).free()
    if op == "alloc_free_1MiB":
        return lambda: torch.empty(MIB, dtype=torch.uint8, device=tdev)
    if op == "export_idle" and who == "gpuport":
        a = gpuport.asarray(np.zeros(MIB // 4, np.float32), device=dev)
        a.synchronize()
        return lambda: a.__dlpack__()
    if op == "export_idle":
        t = torch.zeros(MIB // 4, dtype=torch.float32, device=tdev)
        torch.cuda.synchronize()
        return lambda: t.__dlpack__()
    if who == "gpuport":  # import_peer
        t = torch.zeros(MIB // 4, dtype=torch.float32, device=tdev)
        torch.cuda.synchronize()
        return lambda: gpuport.from_dlpack(t)
    a = gpuport.asarray(np.zeros(MIB // 4, np.float32), device=dev)
    a.synchronize()
    return lambda: torch.from_dlpack(a)


def snapshot(counter, path: str) -> Dict[str, int]:
    open(path, "w").close()
    counter.gp_count_dump(path.encode())
    out: Dict[str, int] = {}
    for line in open(path):
        if line.strip() and line.strip() != "--":
            name, n = line.split()
            out[name] = int(n)
    return out


def worker(op: str, who: str, device: str, calls: int, counter_path: str) -> Dict[str, float]:
    import ctypes

    counter = ctypes.CDLL(counter_path)
    f = operation(op, who, device)
    for _ in range(200):
        f()
    tmp = f"/tmp/driver-calls-{os.getpid()}.txt"
    before = snapshot(counter, tmp)
    for _ in range(calls):
        f()
    after = snapshot(counter, tmp)
    os.unlink(tmp)
    return {k: (v - before.get(k, 0)) / calls for k, v in after.items() if v != before.get(k, 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counter", required=True, help="the built benches/driver_calls/count.c")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", nargs=2, metavar=("OP", "WHO"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    counter = os.path.abspath(a.counter)
    if a.worker:
        print(json.dumps(worker(a.worker[0], a.worker[1], a.device, a.calls, counter)))
        return
    env = dict(os.environ, LD_PRELOAD=counter)
    table = {}
    for op, who in ROWS:
        cmd = [sys.executable, __file__, "--counter", counter, "--device", a.device, "--calls", str(a.calls)]
        done = subprocess.run(cmd + ["--worker", op, who], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]
            print(f"{op:16s} {who:12s} skipped: {reason}")
            continue
        calls = json.loads(done.stdout.strip().splitlines()[-1])
        table[f"{op}/{who}"] = calls
        total = sum(calls.values())
        detail = ", ".join(f"{k} {v:g}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1]))
        print(f"{op:16s} {who:12s} {total:6.2f} driver calls  {detail}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "calls": a.calls, "rows": table}, f, indent=1)


if __name__ == "__main__":
    main()
