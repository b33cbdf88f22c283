#!/usr/bin/env python3
"""DLPack exchange through the C exchange API (DLPack 1.3's
``type(x).__dlpack_c_exchange_api__``) against the Python-level
``__dlpack__`` protocol, for gpuport's and torch's producers, same process.

    python benches/exchange.py [--device cuda:0] [--reps 15] [--inner 2000] [--json FILE]

Consumers, each doing the same work both ways:

- ``take``: a C consumer (``crates/gpuport-py/tests/dlpack_exchange_consumer.c``,
  compiled here with ``cc`` and loaded with ``ctypes.PyDLL``) takes the
  owning tensor of a producer object, asks for the producer's stream, and
  releases the tensor: through the producer type's table
  (``managed_tensor_from_py_object_no_sync`` + ``current_work_stream`` +
  the deleter) against ``__dlpack_device__()`` + ``__dlpack__(max_version=(1, 3))``
  + taking the capsule + the deleter. The loop runs in C, so no Python
  call is timed per exchange: this is what a C extension pays per tensor
  argument.
- ``gpuport→torch`` / ``torch→gpuport``: the same C consumer turns one
  library's object into the other's through the two tables
  (``from_py_object`` of one, ``to_py_object`` of the other) against the
  receiving library's own Python-level ``from_dlpack`` (``torch.from_dlpack``;
  gpuport's with the table lookup off: ``gpuport._core._from_dlpack_protocol``).
- ``torch→torch``: the same with torch's own tensor on both sides, the
  ceiling for ``gpuport→torch``: what torch's table saves against
  ``torch.from_dlpack`` when gpuport is not involved at all.
- ``gpuport.from_dlpack``: gpuport's own consumer, which uses a producer's
  table when it has one, against ``_from_dlpack_protocol`` (the Python loop
  and the new ``MemArray`` are paid on both sides).

Each figure is the median over ``--reps`` rounds of ``--inner`` exchanges
(both ways alternate round by round), in nanoseconds per exchange; the
speedup is the Python-level time over the table's. Arrays are small (1024
float32): the cost per exchange, not per byte. A row whose consumer or
producer is missing (no ``cc``, no torch, a torch without the table, no GPU)
is skipped with the reason.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
CONSUMER_C = os.path.join(HERE, "..", "crates", "gpuport-py", "tests", "dlpack_exchange_consumer.c")


def compile_consumer() -> Any:
    """The C consumer as a ``ctypes.PyDLL`` (raises RuntimeError saying why not)."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise RuntimeError(f"no C compiler ({cc!r} is not on PATH; set CC)")
    out = os.path.join(tempfile.mkdtemp(prefix="gpuport-exchange-"), "consumer.so")
    r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out, CONSUMER_C], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{cc} failed: {r.stderr.strip()[:300]}")
    lib = ctypes.PyDLL(out)
    po = ctypes.py_object
    lib.xc_take_many.argtypes = [po, ctypes.c_long, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    lib.xc_take_many.restype = ctypes.c_int
    lib.xc_exchange_many.argtypes = [po, po, ctypes.c_long]
    lib.xc_exchange_many.restype = ctypes.c_int
    lib.xc_table_version.argtypes = [po]
    lib.xc_table_version.restype = ctypes.c_long
    return lib


def paired_ns(a: Callable[[int], Any], b: Callable[[int], Any], reps: int, inner: int) -> tuple[float, float]:
    """Median ns per exchange of ``a(inner)`` and ``b(inner)``, alternating round by round."""
    a(min(inner, 200))
    b(min(inner, 200))  # warm-up
    ta, tb = [], []
    for i in range(reps):
        for f, out in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
            t0 = time.perf_counter()
            f(inner)
            out.append((time.perf_counter() - t0) / inner * 1e9)
    return statistics.median(ta), statistics.median(tb)


def py_loop(fn: Callable[[], Any]) -> Callable[[int], None]:
    def run(n: int) -> None:
        for _ in range(n):
            fn()

    return run


class Results:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.skipped: list[tuple[str, str]] = []

    def skip(self, what: str, why: object) -> None:
        self.skipped.append((what, str(why).splitlines()[0] if str(why) else type(why).__name__))

    def attempt(self, op: str, producer: str, table: Callable[[int], Any], protocol: Callable[[int], Any],
                reps: int, inner: int) -> None:
        try:
            t, p = paired_ns(table, protocol, reps, inner)
        except Exception as e:  # one producer's failure must not stop the others
            self.skip(f"{op}/{producer}", e)
            return
        self.rows.append({"op": op, "producer": producer, "table_ns": t, "protocol_ns": p, "speedup": p / t})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="gpuport device spec (default: gpuport's default device)")
    ap.add_argument("--reps", type=int, default=15, help="rounds per figure (default 15)")
    ap.add_argument("--inner", type=int, default=2000, help="exchanges per round (default 2000)")
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
    args = ap.parse_args()
    try:
        import numpy as np
        import gpuport
    except ImportError as e:
        print(f"exchange.py needs numpy and gpuport (pip install ./crates/gpuport-py): {e}", file=sys.stderr)
        return 2
    try:
        dev = gpuport.Device(args.device)
    except Exception as e:
        print(f"exchange.py: --device {args.device!r}: {e}", file=sys.stderr)
        return 2
    reps, inner = args.reps, args.inner
    r = Results()
    on_gpu = dev.backend != "host"
    print(f"gpuport {dev.spec} ({dev.name}); median of {reps} rounds x {inner} exchanges", flush=True)

    lib: Optional[Any] = None
    try:
        lib = compile_consumer()
    except Exception as e:
        r.skip("C consumer (take, gpuport<->torch rows)", e)
    info = (ctypes.c_int64 * 8)()

    def take(obj: Any, protocol: int) -> Callable[[int], None]:
        def run(n: int) -> None:
            assert lib is not None
            lib.xc_take_many(obj, n, protocol, info)

        return run

    def exchange(obj: Any, like: Any) -> Callable[[int], None]:
        def run(n: int) -> None:
            assert lib is not None
            lib.xc_exchange_many(obj, like, n)

        return run

    # ---- gpuport's producer ------------------------------------------------------------
    where = ["host"] + ([dev.spec] if on_gpu else [])
    arrays = {}
    for spec in where:
        a = gpuport.MemArray((1024,), "float32", device=spec)
        a.read_numpy_array(np.arange(1024, dtype=np.float32))
        if spec != "host":
            a.move_memory("device")
            a.synchronize()
        arrays[spec] = a
        if lib is not None:
            r.attempt("take", f"gpuport {spec}", take(a, 0), take(a, 1), reps, inner)
        r.attempt("gpuport.from_dlpack", f"gpuport {spec}", py_loop(lambda a=a: gpuport.from_dlpack(a)),
                  py_loop(lambda a=a: gpuport._core._from_dlpack_protocol(a)), reps, inner)

    # ---- torch's producer and consumer ---------------------------------------------------
    try:
        import torch
    except Exception as e:
        torch = None
        r.skip("torch", e)
    if torch is not None:
        cap = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
        if cap is None:
            r.skip("torch rows", f"torch {torch.__version__} offers no __dlpack_c_exchange_api__")
        else:
            if lib is not None:
                v = lib.xc_table_version(torch.ones(1))
                print(f"torch {torch.__version__}: exchange table version {v // 1000}.{v % 1000}", flush=True)
            for spec, a in arrays.items():
                if spec != "host" and (dev.backend != "cuda" or not torch.cuda.is_available()):
                    r.skip(f"torch {spec}", "torch has no CUDA device for it")
                    continue
                tdev = "cpu" if spec == "host" else f"cuda:{dev.ordinal}"
                t = torch.arange(1024, dtype=torch.float32, device=tdev)
                if lib is not None:
                    r.attempt("take", f"torch {tdev}", take(t, 0), take(t, 1), reps, inner)
                    r.attempt("gpuport→torch", f"gpuport {spec}", exchange(a, t),
                              py_loop(lambda a=a: torch.from_dlpack(a)), reps, inner)
                    r.attempt("torch→torch", f"torch {tdev}", exchange(t, t),
                              py_loop(lambda t=t: torch.from_dlpack(t)), reps, inner)
                    r.attempt("torch→gpuport", f"torch {tdev}", exchange(t, a),
                              py_loop(lambda t=t: gpuport._core._from_dlpack_protocol(t)), reps, inner)
                r.attempt("gpuport.from_dlpack", f"torch {tdev}", py_loop(lambda t=t: gpuport.from_dlpack(t)),
                          py_loop(lambda t=t: gpuport._core._from_dlpack_protocol(t)), reps, inner)

    # ---- report ---------------------------------------------------------------------------
    print(f"\n{'exchange':<20} {'producer':<16} {'C table':>10} {'__dlpack__':>11}  speedup")
    for row in r.rows:
        print(f"{row['op']:<20} {row['producer']:<16} {row['table_ns']:>7.0f} ns {row['protocol_ns']:>8.0f} ns"
              f"  {row['speedup']:.2f}x")
    for what, why in r.skipped:
        print(f"skipped {what}: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.spec, "reps": reps, "inner": inner, "rows": r.rows,
                       "skipped": [{"what": w, "why": y} for w, y in r.skipped]}, f, indent=2)
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
