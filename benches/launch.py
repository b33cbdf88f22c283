#!/usr/bin/env python3
"""Per-launch cost of ``gpuport.runtime.launch_kernel`` from Python.

    python benches/launch.py [--device host] [--n 20000] [--reps 15]

Times ``--n`` launches back to back (enqueue only; the stream is
synchronized outside the timed region) and prints the median over
``--reps`` rounds in microseconds per launch, for several argument shapes:
no arguments, by-value ctypes, a DeviceArray and ctypes values (as a list
and as a prebuilt KernelArgs), a NumPy array (buffer protocol), and a raw
int address. On the host backend the kernel is the built-in
``gpuport_empty`` (the host runs it itself, so this is the binding's cost
plus the host backend's enqueue), and ``gpuport_fill_u32`` with n = 0 for
the cases with arguments; on a GPU the same built-ins.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from typing import Any, Callable


def per_launch_us(fn: Callable[[], None], n: int, reps: int, sync: Callable[[], None]) -> float:
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        sync()
    return statistics.median(times) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="host")
    ap.add_argument("--n", type=int, default=20000, help="launches per round")
    ap.add_argument("--reps", type=int, default=15, help="rounds (median)")
    ap.add_argument("--only", default=None, help="run only the case with this name")
    args = ap.parse_args()

    import numpy as np

    import gpuport
    from gpuport import runtime as rt

    dev = gpuport.Device(args.device)
    s = gpuport.Stream(dev)
    empty = rt.module_get_function(rt.module_load(device=dev), "gpuport_empty")
    buf = rt.malloc(1024, device=dev)
    host = np.zeros(256, dtype=np.uint32)
    n = args.n
    fill = rt.module_get_function(rt.module_load(device=dev), "gpuport_fill_u32")
    # n = 0 elements: the host backend's kernel does no work, so the figure is the launch path's.
    v64, v32 = ctypes.c_uint64(0), ctypes.c_uint32(7)
    kargs = rt.KernelArgs([buf, v64, v32])
    addr = int(buf)

    def loop(call: Callable[[], Any]) -> Callable[[], None]:
        def f() -> None:
            for _ in range(n):
                call()

        return f

    cases: dict[str, Callable[[], None]] = {
        "no_args": loop(lambda: rt.launch_kernel(empty, 1, 1, stream=s)),
        "values": loop(lambda: rt.launch_kernel(fill, 1, 1, [None, v64, v32], stream=s)),
        "array_list": loop(lambda: rt.launch_kernel(fill, 1, 256, [buf, v64, v32], stream=s)),
        "array_kernelargs": loop(lambda: rt.launch_kernel(fill, 1, 256, kargs, stream=s)),
        "numpy_list": loop(lambda: rt.launch_kernel(fill, 1, 256, [host, v64, v32], stream=s)),
        "int_addr_list": loop(lambda: rt.launch_kernel(fill, 1, 256, [addr, v64, v32], stream=s)),
    }
    # A bare Python call of the same arity, for the interpreter's share.
    cases["python_noop"] = loop(lambda: len([buf, v64, v32]))
    print(f"gpuport {dev.spec}; {n} launches per round, median of {args.reps}; us per launch", flush=True)
    for name, fn in cases.items():
        if args.only and name != args.only:
            continue
        us = per_launch_us(fn, n, args.reps, s.synchronize)
        print(f"{name:<18} {us:8.3f}", flush=True)
    print(f"pending after sync: {gpuport._core._pending_operations()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
