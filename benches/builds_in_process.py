"""Two builds of gpuport's extension module, timed inside one process.

Machines of one kind differ, and so do fresh processes on one machine (the
bands BENCHMARKS.md describes), by more than one change moves a figure.
So both builds' ``_core`` modules are loaded into each fresh process under
their own names (``extension module`` loaders; each build keeps its own
pools and caches), and their rounds alternate, the order rotating each
round: both share the process's band. Per process: each build's median
round; then the median and spread over processes of each build, of new ÷
old and of new − old.

Cases (µs per operation):

- ``alloc``: ``mem_alloc(1 MiB, None, Device(device)).free()``, what
  ``gpuport.memory.alloc`` is;
- ``launch``: ``launch_kernel(gpuport_empty, 1, 1, stream=s)`` on a
  created stream (``gpuport.runtime.launch_kernel``), then a synchronize
  per round;
- ``cupy``: ``cupy.empty(1 MiB)`` + ``del`` with each build's CuPy
  allocator (``gpuport.cupy.c_allocator()``'s C functions), switched with
  ``cupy.cuda.set_allocator`` before each round.

    pip install --target /tmp/site-old OLD.whl; pip install --target /tmp/site-new NEW.whl
    python3 benches/builds_in_process.py /tmp/site-new/gpuport/_core.abi3.so \\
        /tmp/site-old/gpuport/_core.abi3.so alloc --device host [--procs 7] [--rounds 15]
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from types import ModuleType
from typing import Callable, Dict, List

MIB = 1 << 20
CALLS = {"alloc": 20000, "launch": 5000, "cupy": 2000}


def load(path: str, name: str) -> ModuleType:
    """The extension module at ``path``, imported as ``name`` (its last part must be ``_core``)."""
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def operation(core: ModuleType, case: str, device: str, calls: int) -> Callable[[], None]:
    """One round of ``calls`` operations of ``case`` through ``core``."""
    if case == "alloc":
        dev, alloc = core.Device(device), core.mem_alloc

        def run() -> None:
            for _ in range(calls):
                alloc(MIB, None, dev).free()

        return run
    if case == "launch":
        dev = core.Device(device)
        stream = core.Stream(dev)
        empty = core.module_get_function(core.module_load(device=dev), "gpuport_empty")
        launch = core.launch_kernel

        def run() -> None:
            for _ in range(calls):
                launch(empty, 1, 1, stream=stream)
            stream.synchronize()

        return run
    if case == "cupy":
        import cupy
        from cupy.cuda import memory
        from cupy.cuda import stream as cupy_stream

        capsule = cupy_stream.__pyx_capi__["get_current_stream_ptr"]
        backend = "rocm" if cupy.cuda.runtime.is_hip else "cuda"
        malloc_fn, free_fn = core._cupy_allocator_functions(capsule, backend)
        malloc = memory.CFunctionAllocator(0, malloc_fn, free_fn, core).malloc
        empty, u8 = cupy.empty, cupy.uint8

        def run() -> None:
            cupy.cuda.set_allocator(malloc)
            for _ in range(calls):
                a = empty(MIB, dtype=u8)
                del a

        return run
    raise SystemExit(f"unknown case {case!r}: alloc, launch or cupy")


def worker(new: str, old: str, case: str, device: str, rounds: int) -> Dict[str, float]:
    """Each build's median round (µs per operation) in this process."""
    calls = CALLS[case]
    runs = {name: operation(load(path, f"gpuport_{name}._core"), case, device, calls)
            for name, path in (("new", new), ("old", old))}
    for run in runs.values():
        run()  # warm: pools, kernels, allocator
    times: Dict[str, List[float]] = {name: [] for name in runs}
    order = list(runs)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            t = time.perf_counter()
            runs[name]()
            times[name].append((time.perf_counter() - t) / calls * 1e6)
    return {name: statistics.median(v) for name, v in times.items()}


def spread(values: List[float], fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("new", help="the new build's _core.abi3.so")
    ap.add_argument("old", help="the old build's _core.abi3.so")
    ap.add_argument("case", choices=sorted(CALLS))
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--procs", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.new, args.old, args.case, args.device, args.rounds)))
        return
    rows = []
    for _ in range(args.procs):
        cmd = [sys.executable, __file__, args.new, args.old, args.case, "--device", args.device,
               "--rounds", str(args.rounds), "--worker"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"a worker failed:\n{out.stderr[-2000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    label = f"{args.case} on {args.device}"
    print(f"{label}: µs per operation, median of {args.procs} processes [lowest, highest]")
    for name in ("new", "old"):
        values = [r[name] for r in rows]
        print(f"  {name:<9} {spread(values)}  ({' '.join(f'{x:.3f}' for x in values)})")
    ratios = [r["new"] / r["old"] for r in rows]
    print(f"  new / old {spread(ratios)}  ({' '.join(f'{x:.3f}' for x in ratios)})")
    print(f"  new - old {spread([r['new'] - r['old'] for r in rows], '{:+.3f}')} µs")


if __name__ == "__main__":
    main()
