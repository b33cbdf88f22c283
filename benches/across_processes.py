#!/usr/bin/env python3
"""Run one Python bench in several fresh processes and report, per figure,
the median over the processes and the spread (lowest, highest).

    python benches/across_processes.py --procs 5 [--json FILE] -- benches/launch.py --device cuda:0

A figure from one process moves by up to 1.6x between processes and
machines; the median of several fresh processes, each of which already
alternates ours and the peer's in rounds, is what BENCHMARKS.md reports.

The bench must accept ``--json FILE`` and write its rows there as lists of
flat dicts (``launch.py``, ``creation.py``, ``exchange.py``, ``graphs.py``
do). A row is named by its text and integer fields (``op``, ``who``,
``bytes``, ...); its float fields are the figures aggregated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any


def rows_of(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, float]]:
    """``(list name, row name) -> {figure: value}`` for every list of dicts in ``report``."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for table, rows in report.items():
        if not isinstance(rows, list):
            continue
        for row in rows:
            if not isinstance(row, dict):
                continue
            name = " ".join(f"{v}" for v in row.values() if isinstance(v, (str, int)) and not isinstance(v, bool))
            # A row's own spread over its rounds (min, max) is not carried: the spread here is across processes.
            figures = {k: float(v) for k, v in row.items() if isinstance(v, float) and k not in ("min", "max")}
            if figures:
                out[(table, name)] = figures
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=5, help="fresh processes (default 5)")
    ap.add_argument("--json", default=None, help="write medians and spreads as JSON to this file")
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...]")
    args = ap.parse_args()
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        ap.error("name the bench after --, for example: -- benches/launch.py --device host")
    if args.procs < 1:
        ap.error("--procs takes a positive integer")
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.procs):
            path = os.path.join(tmp, f"{k}.json")
            done = subprocess.run([sys.executable, *bench, "--json", path], capture_output=True, text=True)
            if done.returncode != 0 or not os.path.exists(path):
                print(done.stdout[-2000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
                print(f"across_processes.py: process {k} of {' '.join(bench)} failed (exit {done.returncode})",
                      file=sys.stderr)
                return 1
            for line in done.stdout.splitlines():
                if line.startswith("skipped"):
                    print(f"process {k}: {line}")
            with open(path) as f:
                reports.append(rows_of(json.load(f)))
    keys = [key for key in reports[0] if all(key in r for r in reports)]
    result = []
    print(f"{' '.join(bench)}: median of {args.procs} fresh processes [lowest, highest]")
    for table, name in keys:
        for figure in reports[0][(table, name)]:
            values = [r[(table, name)][figure] for r in reports if figure in r[(table, name)]]
            med = statistics.median(values)
            result.append({"table": table, "row": name, "figure": figure, "median": med,
                           "lowest": min(values), "highest": max(values), "processes": len(values)})
            print(f"{table:<8} {name:<48} {figure:<24} {med:>12.4g}  [{min(values):.4g}, {max(values):.4g}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": bench, "procs": args.procs, "figures": result}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
