#!/usr/bin/env python3
"""gpuport's Python API against torch, cupy and cuda-python, same process, same run.

    python benches/peers.py [--device cuda:0] [--mib 64] [--reps 21] [--json FILE]

Each operation is timed with ``time.perf_counter`` to completion (the device
is synchronized inside the timed region), after one warm-up call; the figure
is the median of ``--reps``. A peer that is not importable (or has no GPU)
is skipped with the reason. Ratios are gpuport / peer for times (below 1:
gpuport is faster) and peer-independent bandwidth is printed in GB/s.

Operations, chosen so each side does the same work:

- ``new_1MiB``: a new 1 MiB device array from host data (allocation + H2D):
  ``MemArray`` + ``read_numpy_array`` + ``move_memory("device")``, against
  ``torch.from_numpy(x).to(dev)``, ``cupy.asarray(x)``, and cuda-python's
  ``cudaMallocAsync`` + ``cudaMemcpyAsync`` + ``cudaFreeAsync``;
- ``alloc_free_1MiB`` (peers only, for reference: gpuport's Python API
  allocates only together with data): ``torch.empty``, ``cupy.empty``,
  ``cudaMalloc``/``cudaFree``, ``cudaMallocAsync``/``cudaFreeAsync``;
- ``h2d``/``d2h`` of ``--mib`` MiB: gpuport ``move_memory`` (after making the
  other copy current outside the timed region) against torch ``copy_`` from
  pinned and pageable tensors and cupy ``set``/``get``;
- ``h2d``/``d2h`` rows "gpuport pageable": ``gpuport.runtime.memcpy`` between a
  NumPy array (pageable) and ``runtime.malloc`` memory, which pipelines the
  copy through pinned staging, against the same torch/cupy pageable rows;
- ``into_torch``/``into_cupy``: ``torch.from_dlpack``/``cupy.from_dlpack`` of
  a gpuport array against the same call on the other peer's array;
  ``from_dlpack``: ``gpuport.from_dlpack(torch tensor)`` against
  ``torch.from_dlpack(cupy array)`` and ``cupy.from_dlpack(torch tensor)``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable, Optional

from peer_imports import load_cupy, load_torch

MIB = 1 << 20


def median_us(fn: Callable[[], Any], reps: int, setup: Optional[Callable[[], Any]] = None) -> float:
    """Median wall time of ``fn`` in microseconds; ``setup`` runs untimed before each call."""
    if setup:
        setup()
    fn()  # warm-up
    times = []
    for _ in range(reps):
        if setup:
            setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


class Results:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.skipped: list[tuple[str, str]] = []

    def add(self, op: str, who: str, us: float, nbytes: int = 0) -> None:
        row: dict[str, Any] = {"op": op, "who": who, "us": us, "bytes": nbytes}
        if nbytes:
            row["gb_per_s"] = nbytes / (us * 1e-6) / 1e9
        self.rows.append(row)

    def skip(self, what: str, why: object) -> None:
        self.skipped.append((what, str(why).splitlines()[0] if str(why) else type(why).__name__))

    def attempt(self, op: str, who: str, fn: Callable[[], float], nbytes: int = 0) -> None:
        try:
            self.add(op, who, fn(), nbytes)
        except Exception as e:  # a peer's failure must not stop the others
            self.skip(f"{op}/{who}", e)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="gpuport device spec (default: gpuport's default device)")
    ap.add_argument("--mib", type=int, default=64, help="MiB per H2D/D2H copy (default 64)")
    ap.add_argument("--reps", type=int, default=21, help="repetitions per figure (default 21)")
    ap.add_argument("--json", default=None, help="write the rows and ratios as JSON to this file")
    args = ap.parse_args()

    try:
        import numpy as np
        import gpuport
    except ImportError as e:
        print(f"peers.py needs numpy and gpuport (pip install ./crates/gpuport-py): {e}", file=sys.stderr)
        return 2
    try:
        dev = gpuport.Device(args.device)
    except Exception as e:
        print(f"peers.py: --device {args.device!r}: {e}", file=sys.stderr)
        return 2

    reps, nbig = args.reps, args.mib * MIB
    r = Results()
    on_gpu = dev.backend == "cuda"
    print(f"gpuport {dev.spec} ({dev.name}); {args.mib} MiB copies; median of {reps}", flush=True)

    # ---- gpuport ---------------------------------------------------------
    small = np.ones(MIB, dtype=np.uint8)

    def gp_new() -> None:
        a = gpuport.MemArray((MIB,), "uint8", device=dev)
        a.read_numpy_array(small)
        a.move_memory("device")
        a.synchronize()

    r.attempt("new_1MiB", "gpuport", lambda: median_us(gp_new, reps), MIB)

    big = np.ones(nbig, dtype=np.uint8)
    a = gpuport.MemArray((nbig,), "uint8", device=dev)
    a.read_numpy_array(big)

    def host_current() -> None:
        a.read_numpy_array(big)  # the host copy becomes the only current one

    def device_current() -> None:
        a.move_memory("device")
        a.add_index()  # runs on the device: the device copy becomes the only current one
        a.synchronize()

    def to_device() -> None:
        a.move_memory("device")
        a.synchronize()

    def to_host() -> None:
        a.move_memory("host")

    r.attempt("h2d", "gpuport", lambda: median_us(to_device, reps, host_current), nbig)
    r.attempt("d2h", "gpuport", lambda: median_us(to_host, reps, device_current), nbig)
    raw = gpuport.runtime.malloc(nbig, device=dev)
    big_out = np.zeros(nbig, dtype=np.uint8)
    r.attempt("h2d", "gpuport pageable", lambda: median_us(lambda: gpuport.runtime.memcpy(raw, big, nbig), reps), nbig)
    r.attempt(
        "d2h", "gpuport pageable", lambda: median_us(lambda: gpuport.runtime.memcpy(big_out, raw, nbig), reps), nbig
    )
    # A small device-resident array for the DLPack exports.
    a_small = gpuport.MemArray((MIB // 4,), "float32", device=dev)
    a_small.add_index()
    a_small.synchronize()

    # ---- torch -------------------------------------------------------------
    torch, why = load_torch(on_gpu)
    if torch is None:
        r.skip("torch", why)
    if torch is not None:
        tdev = torch.device(f"cuda:{dev.ordinal}" if on_gpu else "cpu")
        sync = torch.cuda.synchronize if on_gpu else (lambda: None)

        def t_new() -> None:
            torch.from_numpy(small).to(tdev)
            sync()

        def t_alloc() -> None:
            x = torch.empty(MIB, dtype=torch.uint8, device=tdev)
            del x

        r.attempt("new_1MiB", "torch", lambda: median_us(t_new, reps), MIB)
        r.attempt("alloc_free_1MiB", "torch", lambda: median_us(t_alloc, reps))
        if on_gpu:
            dst = torch.empty(nbig, dtype=torch.uint8, device=tdev)
            pageable = torch.from_numpy(big)
            pinned = pageable.pin_memory()
            host_out = torch.empty(nbig, dtype=torch.uint8).pin_memory()
            host_out_pageable = torch.empty(nbig, dtype=torch.uint8)

            def copy(d: Any, s: Any) -> Callable[[], None]:
                def f() -> None:
                    d.copy_(s)
                    sync()

                return f

            r.attempt("h2d", "torch pinned", lambda: median_us(copy(dst, pinned), reps), nbig)
            r.attempt("h2d", "torch pageable", lambda: median_us(copy(dst, pageable), reps), nbig)
            r.attempt("d2h", "torch pinned", lambda: median_us(copy(host_out, dst), reps), nbig)
            r.attempt("d2h", "torch pageable", lambda: median_us(copy(host_out_pageable, dst), reps), nbig)
            t_small = torch.ones(MIB // 4, dtype=torch.float32, device=tdev)
            r.attempt("into_torch", "gpuport", lambda: median_us(lambda: torch.from_dlpack(a_small), reps))
            r.attempt("from_dlpack", "gpuport", lambda: median_us(lambda: gpuport.from_dlpack(t_small), reps))

    # ---- cupy --------------------------------------------------------------
    cp, why = load_cupy(on_gpu, dev.ordinal)
    if cp is None:
        r.skip("cupy", why)
    if cp is not None:
        csync = cp.cuda.runtime.deviceSynchronize

        def c_new() -> None:
            cp.asarray(small)
            csync()

        def c_alloc() -> None:
            x = cp.empty(MIB, dtype=cp.uint8)
            del x

        r.attempt("new_1MiB", "cupy", lambda: median_us(c_new, reps), MIB)
        r.attempt("alloc_free_1MiB", "cupy", lambda: median_us(c_alloc, reps))
        cdst = cp.empty(nbig, dtype=cp.uint8)
        out = np.empty(nbig, dtype=np.uint8)

        def c_h2d() -> None:
            cdst.set(big)
            csync()

        def c_d2h() -> None:
            cdst.get(out=out)

        r.attempt("h2d", "cupy pageable", lambda: median_us(c_h2d, reps), nbig)
        r.attempt("d2h", "cupy pageable", lambda: median_us(c_d2h, reps), nbig)
        c_small = cp.ones(MIB // 4, dtype=cp.float32)
        r.attempt("into_cupy", "gpuport", lambda: median_us(lambda: cp.from_dlpack(a_small), reps))
        if torch is not None:
            t_ref = torch.ones(MIB // 4, dtype=torch.float32, device=tdev)
            r.attempt("into_cupy", "torch", lambda: median_us(lambda: cp.from_dlpack(t_ref), reps))
            r.attempt("into_torch", "cupy", lambda: median_us(lambda: torch.from_dlpack(c_small), reps))
            # A consumer importing a foreign array: gpuport (of torch) against torch (of cupy) and cupy (of torch).
            r.attempt("from_dlpack", "torch.from_dlpack(cupy)", lambda: median_us(lambda: torch.from_dlpack(c_small), reps))
            r.attempt("from_dlpack", "cupy.from_dlpack(torch)", lambda: median_us(lambda: cp.from_dlpack(t_ref), reps))

    # ---- cuda-python (cuda.bindings.runtime) ----------------------------------
    if on_gpu:
        try:
            from cuda.bindings import runtime as rt

            def ok(res: Any) -> Any:
                err = res[0] if isinstance(res, tuple) else res
                if int(err) != 0:
                    raise RuntimeError(f"CUDA runtime error {err}")
                return res[1] if isinstance(res, tuple) and len(res) > 1 else None

            ok(rt.cudaSetDevice(dev.ordinal))
            stream = ok(rt.cudaStreamCreate())

            def m_alloc() -> None:
                p = ok(rt.cudaMalloc(MIB))
                ok(rt.cudaFree(p))

            def m_alloc_async() -> None:
                p = ok(rt.cudaMallocAsync(MIB, stream))
                ok(rt.cudaFreeAsync(p, stream))
                ok(rt.cudaStreamSynchronize(stream))

            def m_new() -> None:
                p = ok(rt.cudaMallocAsync(MIB, stream))
                ok(rt.cudaMemcpyAsync(p, small.ctypes.data, MIB, rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream))
                ok(rt.cudaFreeAsync(p, stream))
                ok(rt.cudaStreamSynchronize(stream))

            r.attempt("alloc_free_1MiB", "cudaMalloc", lambda: median_us(m_alloc, reps))
            r.attempt("alloc_free_1MiB", "cudaMallocAsync", lambda: median_us(m_alloc_async, reps))
            r.attempt("new_1MiB", "cuda-python", lambda: median_us(m_new, reps), MIB)
        except Exception as e:
            r.skip("cuda-python", e)

    # ---- report ---------------------------------------------------------------
    # A peer's pageable copy is compared with gpuport's pageable one where
    # there is one, every other row with plain "gpuport".
    ours = {(row["op"], row["who"]): row for row in r.rows if row["who"].startswith("gpuport")}
    ratios = []
    print(f"\n{'operation':<16} {'who':<22} {'median':>12} {'GB/s':>8}  gpuport/peer")
    for row in r.rows:
        mine = ours.get((row["op"], "gpuport"))
        if "pageable" in row["who"]:
            mine = ours.get((row["op"], "gpuport pageable"), mine)
        ratio = ""
        if mine is not None and not row["who"].startswith("gpuport"):
            x = mine["us"] / row["us"]
            ratios.append({"op": row["op"], "peer": row["who"], "gpuport_over_peer": x})
            ratio = f"{x:.2f}"
        gb = f"{row['gb_per_s']:.1f}" if "gb_per_s" in row else "-"
        print(f"{row['op']:<16} {row['who']:<22} {row['us']:>9.2f} us {gb:>8}  {ratio}")
    for what, why in r.skipped:
        print(f"skipped {what}: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.spec, "mib": args.mib, "reps": reps, "rows": r.rows, "ratios": ratios,
                       "skipped": [{"what": w, "why": y} for w, y in r.skipped]}, f, indent=2)
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
