"""gpuport's CuPy allocator hook in two builds, against each other and
against CuPy's C-function floor, in alternating fresh processes.

Each process times ``cupy.empty(1 MiB)`` + ``del`` as benches/plugins.py's
child does (``--reps`` rounds of ``--inner`` operations, the median
round), with gpuport imported from the ``--old`` or the ``--new``
directory (``pip install --target DIR`` of each wheel) or, for the row
``floor``, CuPy's ``CFunctionAllocator`` over two C functions that only pop
and push a pointer. The order of the builds alternates from trial to
trial. Processes run on one core (``taskset -c CORE``) where ``taskset``
exists. ``--no-aslr`` runs them under ``setarch -R``; ``--hash-seed``
fixes ``PYTHONHASHSEED``: the per-process bands BENCHMARKS.md describes
persist under both.

    python3 benches/plugins_ab.py --old /tmp/site-old --new /tmp/site-new [--trials 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plugins  # noqa: E402  (the child's code)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="directory with the old build of gpuport")
    ap.add_argument("--new", required=True, help="directory with the new build of gpuport")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--inner", type=int, default=1000)
    ap.add_argument("--core", type=int, default=3)
    ap.add_argument("--no-aslr", action="store_true")
    ap.add_argument("--hash-seed", default=None)
    a = ap.parse_args()
    prefix = ["taskset", "-c", str(a.core)] if shutil.which("taskset") else []
    if a.no_aslr:
        prefix = ["setarch", os.uname().machine, "-R"] + prefix
    rows: dict[str, list[tuple[float, float]]] = {"old": [], "new": [], "floor": []}
    for t in range(a.trials):
        order = ["old", "new", "floor"] if t % 2 == 0 else ["new", "old", "floor"]
        for name in order:
            env = dict(os.environ, PYTHONPATH=a.new if name == "floor" else getattr(a, name))
            if a.hash_seed is not None:
                env["PYTHONHASHSEED"] = a.hash_seed
            mode = "cfunc-floor" if name == "floor" else "gpuport"
            cmd = prefix + [sys.executable, "-c", plugins.CHILD, "cupy", mode, str(a.reps), str(a.inner), plugins.BENCHES]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
            if out.returncode != 0:
                print(f"trial {t} {name}: the process failed:\n{out.stderr[-800:]}", file=sys.stderr)
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            rows[name].append((r["median_us"], r["min_us"]))
            print(f"trial {t} {name:5s} median {r['median_us']:.3f} µs, lowest round {r['min_us']:.3f}", flush=True)
    print(f"cupy.empty(1 MiB) + del, µs: median of the processes [lowest, highest], lowest round")
    for name, v in rows.items():
        if v:
            med = [m for m, _ in v]
            print(f"  {name:5s} {statistics.median(med):.3f} [{min(med):.3f}, {max(med):.3f}], "
                  f"lowest round {min(x for _, x in v):.3f} ({len(v)} processes)")


if __name__ == "__main__":
    main()
