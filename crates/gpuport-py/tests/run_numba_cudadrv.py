"""Runs Numba's CUDA driver test suite (``numba.cuda.tests.cudadrv``) twice,
in fresh subprocesses: with Numba's own memory manager and with
``NUMBA_CUDA_MEMORY_MANAGER=gpuport.numba``; prints ran / passed / failed /
errors / skipped for each, and the names of tests that fail only with gpuport.

    python3 crates/gpuport-py/tests/run_numba_cudadrv.py [--timeout 900] [--json out.json]

Not collected by pytest (no ``test_`` prefix). Needs a GPU, Numba with
numba-cuda, and gpuport importable (e.g. ``PYTHONPATH=/tmp/site``).
"""

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import importlib.util, io, json, os, sys, types, unittest
# numba.cuda.testing imports `filecheck` (a numba-cuda test extra) at import
# time; where it is missing, stub it so the driver tests load (only tests
# that FileCheck compiled IR would need it, in both runs alike).
stubbed = importlib.util.find_spec("filecheck") is None
if stubbed:
    class _Missing:
        def __init__(self, *a, **k):
            raise RuntimeError("filecheck is not installed")
    def _pattern_for_opts(*a, **k):
        raise RuntimeError("filecheck is not installed")
    for name, attrs in {
        "filecheck": {},
        "filecheck.matcher": {"Matcher": _Missing},
        "filecheck.options": {"Options": _Missing},
        "filecheck.parser": {"Parser": _Missing, "pattern_for_opts": _pattern_for_opts},
        "filecheck.finput": {"FInput": _Missing},
    }.items():
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
import numba.cuda.tests.cudadrv as pkg
loader = unittest.TestLoader()
suite = loader.loadTestsFromModule(pkg)
if suite.countTestCases() == 0:
    here = os.path.dirname(pkg.__file__)
    top = here
    for _ in pkg.__name__.split("."):
        top = os.path.dirname(top)
    suite = loader.discover(here, pattern="test_*.py", top_level_dir=top)
mm = None
try:
    from numba import cuda
    mm = type(cuda.current_context().memory_manager).__module__ + "." + type(cuda.current_context().memory_manager).__name__
except Exception as e:
    mm = "unavailable: %r" % (e,)
stream = io.StringIO()
result = unittest.TextTestRunner(stream=stream, verbosity=2).run(suite)
import re
def name(t):
    # Parametrised ids embed function addresses ("<function f at 0x7f..>"),
    # which differ between the two runs.
    return re.sub(r" at 0x[0-9a-f]+", "", t.id() if hasattr(t, "id") else str(t))
def names(items):
    return [name(t) for t, _ in items]
out = {
    "memory_manager": mm,
    "filecheck_stubbed": stubbed,
    "ran": result.testsRun,
    "failures": len(result.failures),
    "errors": len(result.errors),
    "skipped": len(result.skipped),
    "expected_failures": len(result.expectedFailures),
    "unexpected_successes": len(result.unexpectedSuccesses),
    "skipped_names": [(name(t), str(why)[:120]) for t, why in result.skipped],
    "failed_names": names(result.failures),
    "error_names": names(result.errors),
    "error_details": [(name(t), tb[-1500:]) for t, tb in (result.failures + result.errors)[:40]],
}
out["passed"] = out["ran"] - out["failures"] - out["errors"] - out["skipped"] - out["expected_failures"] - out["unexpected_successes"]
sys.stdout.write("\n@@RESULT@@" + json.dumps(out) + "\n")
"""


def run(label, env_extra, timeout):
    env = dict(os.environ)
    env.pop("NUMBA_CUDA_MEMORY_MANAGER", None)
    env.update(env_extra)
    try:
        r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"label": label, "error": f"timed out after {timeout} s"}
    for line in r.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            res = json.loads(line[len("@@RESULT@@") :])
            res["label"] = label
            res["returncode"] = r.returncode
            return res
    return {"label": label, "error": f"no result (rc {r.returncode})", "tail": (r.stdout + r.stderr)[-4000:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = [
        run("numba default", {}, args.timeout),
        run("gpuport.numba", {"NUMBA_CUDA_MEMORY_MANAGER": "gpuport.numba"}, args.timeout),
    ]
    print(f"{'memory manager':<16} {'ran':>5} {'passed':>6} {'failed':>6} {'errors':>6} {'skipped':>7} {'xfail':>5}")
    for r in results:
        if "error" in r:
            print(f"{r['label']:<16} ERROR: {r['error']}\n{r.get('tail', '')}")
            continue
        print(
            f"{r['label']:<16} {r['ran']:>5} {r['passed']:>6} {r['failures']:>6} {r['errors']:>6} "
            f"{r['skipped']:>7} {r['expected_failures']:>5}   ({r['memory_manager']}"
            f"{'; filecheck stubbed' if r.get('filecheck_stubbed') else ''})"
        )
    if all("error" not in r for r in results):
        base = set(results[0]["failed_names"] + results[0]["error_names"])
        only = sorted(set(results[1]["failed_names"] + results[1]["error_names"]) - base)
        print(f"failing only with gpuport.numba ({len(only)}):")
        for n in only:
            print("  ", n)
        base_skips = set(n for n, _ in results[0]["skipped_names"])
        extra = [(n, why) for n, why in results[1]["skipped_names"] if n not in base_skips]
        print(f"skipped only with gpuport.numba ({len(extra)}):")
        for n, why in extra:
            print("  ", n, "--", why)
        details = dict((k, v) for k, v in results[1]["error_details"])
        for n in only[:15]:
            if n in details:
                print(f"--- {n}\n{details[n]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
