#!/usr/bin/env python3
"""Per-launch cost of ``gpuport.runtime.launch_kernel`` from Python.

    python benches/launch.py [--device host] [--n 20000] [--reps 15] [--json FILE]

Times ``--n`` launches back to back (enqueue only; the stream is
synchronized outside the timed region) and prints the median over
``--reps`` rounds in microseconds per launch, for several argument shapes:
no arguments, by-value ctypes, a DeviceArray and ctypes values (as a list
and as a prebuilt KernelArgs), a NumPy array (buffer protocol), and a raw
int address. On the host backend the kernel is the built-in
``gpuport_empty`` (the host runs it itself, so this is the binding's cost
plus the host backend's enqueue), and ``gpuport_fill_u32`` with n = 0 for
the cases with arguments; on a GPU the same built-ins, and, in the same
rounds, an empty kernel through CuPy's ``RawKernel`` and through
cuda-python's ``cuLaunchKernel``, and CuPy's ``RawKernel`` with a CuPy
array and two values (the shape of the argument cases), where those import. Cases alternate: each
round runs every case once, the order rotating from round to round.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from typing import Callable


def add_peers(cases: dict[str, Callable[[], None]], device: str, n: int) -> None:
    """The same empty kernel launched by CuPy's ``RawKernel`` and by cuda-python's ``cuLaunchKernel``
    (the driver call with the least Python in front of it), where they import and the device is CUDA."""
    if not device.startswith("cuda:"):
        return
    ordinal = int(device.split(":")[1])
    try:
        import cupy

        with cupy.cuda.Device(ordinal):
            kernel = cupy.RawKernel('extern "C" __global__ void empty() {}', "empty")
            stream = cupy.cuda.Stream(non_blocking=True)
            kernel((1,), (1,), (), stream=stream)
            stream.synchronize()

        def cupy_loop() -> None:
            for _ in range(n):
                kernel((1,), (1,), (), stream=stream)

        cases["cupy_rawkernel"] = cupy_loop
        _PEER_SYNCS.append(stream.synchronize)
        # The shape of gpuport's argument cases: an array, a 64-bit and a 32-bit value.
        with cupy.cuda.Device(ordinal):
            fill = cupy.RawKernel(
                'extern "C" __global__ void fill(unsigned int* p, unsigned long long n, unsigned int v) '
                "{ if (threadIdx.x < n) p[threadIdx.x] = v; }",
                "fill",
            )
            arr = cupy.zeros(256, dtype=cupy.uint32)
            n0, v7 = cupy.uint64(0), cupy.uint32(7)
            fill((1,), (256,), (arr, n0, v7), stream=stream)
            stream.synchronize()

        def cupy_args_loop() -> None:
            for _ in range(n):
                fill((1,), (256,), (arr, n0, v7), stream=stream)

        cases["cupy_rawkernel_array_args"] = cupy_args_loop
        func = kernel.kernel.ptr  # CUfunction of the loaded module
    except Exception as e:  # noqa: BLE001 - a missing or broken peer is a skipped row, said so
        print(f"skipped cupy_rawkernel: {e}")
        return
    try:
        from cuda.bindings import driver

        launch = driver.cuLaunchKernel
        hstream = driver.CUstream(stream.ptr)
        hfunc = driver.CUfunction(func)

        def driver_loop() -> None:
            for _ in range(n):
                launch(hfunc, 1, 1, 1, 1, 1, 1, 0, hstream, 0, 0)  # no parameters: NULL kernelParams and extra

        cases["cuda_python_cuLaunchKernel"] = driver_loop
    except Exception as e:  # noqa: BLE001
        print(f"skipped cuda_python_cuLaunchKernel: {e}")


_PEER_SYNCS: list[Callable[[], None]] = []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="host")
    ap.add_argument("--n", type=int, default=20000, help="launches per round")
    ap.add_argument("--reps", type=int, default=15, help="rounds (median)")
    ap.add_argument("--only", default=None, help="run only the case with this name")
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
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

    launch = rt.launch_kernel

    # Each case is a loop that calls the launch itself, with no Python
    # frame in between, as the peers' loops below do.
    def no_args() -> None:
        for _ in range(n):
            launch(empty, 1, 1, stream=s)

    def values() -> None:
        for _ in range(n):
            launch(fill, 1, 1, [None, v64, v32], stream=s)

    def array_list() -> None:
        for _ in range(n):
            launch(fill, 1, 256, [buf, v64, v32], stream=s)

    def array_kernelargs() -> None:
        for _ in range(n):
            launch(fill, 1, 256, kargs, stream=s)

    def numpy_list() -> None:
        for _ in range(n):
            launch(fill, 1, 256, [host, v64, v32], stream=s)

    def int_addr_list() -> None:
        for _ in range(n):
            launch(fill, 1, 256, [addr, v64, v32], stream=s)

    def python_noop() -> None:  # a bare C call of the same arity: the interpreter's share
        for _ in range(n):
            len([buf, v64, v32])

    cases: dict[str, Callable[[], None]] = {
        f.__name__: f for f in (no_args, values, array_list, array_kernelargs, numpy_list, int_addr_list, python_noop)
    }
    add_peers(cases, args.device, n)
    if args.only:
        cases = {k: v for k, v in cases.items() if k == args.only}
    print(f"gpuport {dev.spec}; {n} launches per round, median of {args.reps} rounds, cases alternating; us per launch",
          flush=True)
    syncs = [s.synchronize] + _PEER_SYNCS

    def sync() -> None:
        for f in syncs:
            f()

    names = list(cases)
    for name in names:  # warm-up: kernels loaded, argument layouts cached
        cases[name]()
    sync()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.reps):
        for name in names[r % len(names):] + names[: r % len(names)]:
            t0 = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - t0)
            sync()
    rows = []
    for name in names:
        t = [x / n * 1e6 for x in times[name]]
        rows.append({"case": name, "us": statistics.median(t), "min": min(t), "max": max(t)})
        print(f"{name:<22} {rows[-1]['us']:8.3f}   [{min(t):.3f}, {max(t):.3f}]", flush=True)
    print(f"pending after sync: {gpuport._core._pending_operations()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.spec, "launches": n, "reps": args.reps, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
