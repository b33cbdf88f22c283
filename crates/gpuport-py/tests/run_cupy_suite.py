"""Runs CuPy's own test suite (a checkout of CuPy's ``tests/`` folder of the
installed CuPy's version) twice, in fresh pytest processes: with CuPy's own
allocators and with ``gpuport.cupy.use_gpuport_for_cupy()`` installed before
any test runs, one pytest process per module and allocator; prints passed /
failed / errors / skipped for each, the tests that fail only with gpuport,
and any process that crashed (with the head of its stderr).

    python3 crates/gpuport-py/tests/run_cupy_suite.py --tests DIR [--json out.json] \\
        [--timeout 1800] [--jobs 4] [--shards 1] [MODULE ...]

MODULE paths are relative to DIR (default: the graph, stream, memory and
pinned-array tests, and the creation and random modules). Not collected by
pytest (no ``test_`` prefix). Needs a GPU, CuPy and gpuport importable (e.g.
``PYTHONPATH=/tmp/site``). Exits 1 if any test fails with gpuport alone.
"""

import argparse
import re
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

DEFAULT_MODULES = [
    "cupy_tests/cuda_tests/test_graph.py",
    "cupy_tests/cuda_tests/test_stream.py",
    "cupy_tests/cuda_tests/test_memory.py",
    "cupy_tests/cuda_tests/test_pinned_memory.py",
    "cupyx_tests/test_pinned_array.py",
    "cupy_tests/creation_tests",
    "cupy_tests/random_tests",
]

# Modules with tests that take most of the GPU's memory (test_memory.py's
# `*_large_chunk`: 70% of it from CuPy's async pool). With --jobs above 1
# they run after the others, one process at a time: beside other pytest
# processes on the same GPU such a test fails with either allocator,
# depending on what the others hold at that moment (seen on an H200 with
# --jobs 6, 2026-11-29: it failed with gpuport's hook and passed with CuPy's
# allocator, then passed with the hook when run alone).
EXCLUSIVE = {"cupy_tests/cuda_tests/test_memory.py"}

# A pytest plugin (loaded with -p) that routes CuPy's allocations through
# gpuport before the first test.
PLUGIN = """
import gpuport.cupy

def pytest_configure(config):
    gpuport.cupy.use_gpuport_for_cupy()
"""

# A pytest plugin (loaded with -p) that keeps one shard of the collected
# tests: every N-th, from K, where GPUPORT_CUPY_SHARD is "K/N". Long modules
# (math_tests/test_arithmetic.py runs for over 9 minutes) are split over
# several processes this way.
SHARD_PLUGIN = """
import os

def pytest_collection_modifyitems(config, items):
    k, n = map(int, os.environ["GPUPORT_CUPY_SHARD"].split("/"))
    items[:] = items[k::n]
"""


def outcomes(junit):
    """{test id: ("passed" | "failed" | "error" | "skipped", message)} from a
    JUnit XML file; the message is the head of a failure's or error's."""
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        found = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        kind = {"failure": "failed", None: "passed"}.get(found.tag if found is not None else None, None)
        kind = kind or found.tag
        message = (found.get("message") or "")[:300] if found is not None and kind != "skipped" else ""
        result[name] = (kind, message)
    return result


VERBOSE_LINE = re.compile(r"^(\S+::\S+(?: \S+)*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def outcomes_from_verbose(lines):
    """{test id: (outcome, "")} from pytest -v lines: what a process that was
    killed or timed out had finished."""
    kinds = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "error"}
    result = {}
    for line in lines:
        m = VERBOSE_LINE.match(line)
        if m:
            result[m.group(1)] = (kinds.get(m.group(2), "skipped"), "")
    return result


def run(tests, module, with_gpuport, timeout, shard=None):
    """One pytest process over `module`: its outcomes (by test path), and the
    reason if it did not finish (a crash: the head of its stderr, which
    names the test; a timeout). The tests it finished count either way."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.join(tmp, "junit.xml")
        env = dict(os.environ)
        args = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        env["PYTHONPATH"] = os.pathsep.join([tmp, env.get("PYTHONPATH", "")])
        if with_gpuport:
            with open(os.path.join(tmp, "gpuport_cupy_plugin.py"), "w") as f:
                f.write(PLUGIN)
            args += ["-p", "gpuport_cupy_plugin"]
        if shard:
            with open(os.path.join(tmp, "gpuport_shard_plugin.py"), "w") as f:
                f.write(SHARD_PLUGIN)
            env["GPUPORT_CUPY_SHARD"] = shard
            args += ["-p", "gpuport_shard_plugin"]
        out_path = os.path.join(tmp, "out.txt")
        with open(out_path, "w") as out:
            try:
                r = subprocess.run(args + [module], cwd=tests, env=env, stdout=out, stderr=subprocess.PIPE,
                                   text=True, timeout=timeout)
                why = None if os.path.exists(junit) else f"no report (exit {r.returncode}): {r.stderr[:1500]}"
            except subprocess.TimeoutExpired:
                why = f"timed out after {timeout} s"
        with open(out_path) as f:
            result = outcomes_from_verbose(f)
        if os.path.exists(junit):
            # The failure messages, matched to pytest's test paths.
            messages = outcomes(junit)
            for path, (kind, _) in result.items():
                message = messages.get(junit_name(path), ("", ""))[1]
                if message:
                    result[path] = (kind, message)
        return result, why


def junit_name(path):
    """The "classname::name" JUnit gives the test pytest calls `path`:
    "a/b/test_m.py::TestC::test_f[x]" is "a.b.test_m.TestC::test_f[x]".

        >>> junit_name("cupy_tests/cuda_tests/test_memory.py::TestMemoryAsyncPool::test_alloc")
        'cupy_tests.cuda_tests.test_memory.TestMemoryAsyncPool::test_alloc'
        >>> junit_name("m/test_x.py::test_f")
        'm.test_x::test_f'
    """
    module, *middle, name = path.split("::")
    classname = ".".join([module.removesuffix(".py").replace("/", "."), *middle])
    return f"{classname}::{name}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tests", required=True, help="CuPy's tests/ folder")
    p.add_argument("--json")
    p.add_argument("--timeout", type=float, default=600, help="seconds per pytest process (one module, one allocator)")
    p.add_argument("--jobs", type=int, default=1, help="pytest processes at once")
    p.add_argument("--shards", type=int, default=1, help="pytest processes per module and allocator, each with every N-th test")
    p.add_argument("modules", nargs="*", default=DEFAULT_MODULES)
    a = p.parse_args()
    theirs, ours, crashed = {}, {}, []
    shards = [None] if a.shards <= 1 else [f"{k}/{a.shards}" for k in range(a.shards)]
    runs = [
        (m, s, label, with_gpuport)
        for m in a.modules
        for s in shards
        for label, with_gpuport in (("cupy", False), ("gpuport", True))
    ]
    shared = [r for r in runs if r[0] not in EXCLUSIVE]
    alone = [r for r in runs if r[0] in EXCLUSIVE]
    for batch, jobs in ((shared, a.jobs), (alone, 1)):
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {
                pool.submit(run, a.tests, m, g, a.timeout, s): (m + (f" [shard {s}]" if s else ""), label, g)
                for m, s, label, g in batch
            }
            for future in concurrent.futures.as_completed(futures):
                module, label, with_gpuport = futures[future]
                res, why = future.result()
                (ours if with_gpuport else theirs).update(res)
                print(f"done {module} with {label}'s allocator: {len(res)} tests", flush=True)
                if why:
                    crashed.append(f"{module} with {label}'s allocator: {why}")
                    print(f"CRASH {module} with {label}'s allocator: {why}", flush=True)
                if a.json:  # so far, in case the whole run is cut short
                    with open(a.json, "w") as f:
                        json.dump({"cupy": theirs, "gpuport": ours, "crashed": crashed}, f)
    report = {}
    for label, res in (("cupy", theirs), ("gpuport", ours)):
        counts = {k: sum(1 for v, _ in res.values() if v == k) for k in ("passed", "failed", "error", "skipped")}
        report[label] = counts
        print(f"{label:8} {counts}")
    # Only tests both runs finished are compared (a timeout cuts each short elsewhere).
    only_ours = sorted(
        t for t, (v, _) in ours.items() if v in ("failed", "error") and theirs.get(t, ("",))[0] == "passed"
    )
    report["compared"] = len(set(ours) & set(theirs))
    report["fail_with_gpuport_only"] = {t: ours[t][1] for t in only_ours}
    report["crashed"] = crashed
    # Every test's outcome and message with each allocator, as the partial reports above had them.
    report["by_test"] = {"cupy": theirs, "gpuport": ours}
    print(f"fail with gpuport only: {len(only_ours)}")
    for t in only_ours:
        print("  ", t, "::", ours[t][1][:200].replace("\n", " "))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(1 if only_ours or any("gpuport's" in c for c in crashed) else 0)


if __name__ == "__main__":
    main()
