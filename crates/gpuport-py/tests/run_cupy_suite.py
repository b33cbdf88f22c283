"""Runs CuPy's own test suite (a checkout of CuPy's ``tests/`` folder of the
installed CuPy's version) twice, in fresh pytest processes: with CuPy's own
allocators and with ``gpuport.cupy.use_gpuport_for_cupy()`` installed before
any test runs, one pytest process per module and allocator; prints passed /
failed / errors / skipped for each, the tests that fail only with gpuport,
and any process that crashed (with the head of its stderr).

    python3 crates/gpuport-py/tests/run_cupy_suite.py --tests DIR [--json out.json] \\
        [--timeout 1800] [--jobs 4] [MODULE ...]

MODULE paths are relative to DIR (default: the graph, stream, memory and
pinned-array tests, and the creation and random modules). Not collected by
pytest (no ``test_`` prefix). Needs a GPU, CuPy and gpuport importable (e.g.
``PYTHONPATH=/tmp/site``). Exits 1 if any test fails with gpuport alone.
"""

import argparse
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

# A pytest plugin (loaded with -p) that routes CuPy's allocations through
# gpuport before the first test.
PLUGIN = """
import gpuport.cupy

def pytest_configure(config):
    gpuport.cupy.use_gpuport_for_cupy()
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


def run(tests, module, with_gpuport, timeout):
    """One pytest process over `module`: its outcomes, and the reason if it
    wrote no report (a crash: the head of its stderr, which names the test)."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.join(tmp, "junit.xml")
        env = dict(os.environ)
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        if with_gpuport:
            with open(os.path.join(tmp, "gpuport_cupy_plugin.py"), "w") as f:
                f.write(PLUGIN)
            env["PYTHONPATH"] = os.pathsep.join([tmp, env.get("PYTHONPATH", "")])
            args += ["-p", "gpuport_cupy_plugin"]
        try:
            r = subprocess.run(args + [module], cwd=tests, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {}, f"timed out after {timeout} s"
        if not os.path.exists(junit):
            return {}, f"no report (exit {r.returncode}): {r.stderr[:1500]}"
        return outcomes(junit), None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tests", required=True, help="CuPy's tests/ folder")
    p.add_argument("--json")
    p.add_argument("--timeout", type=float, default=600, help="seconds per pytest process (one module, one allocator)")
    p.add_argument("--jobs", type=int, default=1, help="pytest processes at once")
    p.add_argument("modules", nargs="*", default=DEFAULT_MODULES)
    a = p.parse_args()
    theirs, ours, crashed = {}, {}, []
    runs = [(m, label, with_gpuport) for m in a.modules for label, with_gpuport in (("cupy", False), ("gpuport", True))]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        done = pool.map(lambda r: (r, run(a.tests, r[0], r[2], a.timeout)), runs)
        for (module, label, with_gpuport), (res, why) in done:
            (ours if with_gpuport else theirs).update(res)
            if why:
                crashed.append(f"{module} with {label}'s allocator: {why}")
                print(f"CRASH {module} with {label}'s allocator: {why}", flush=True)
    report = {}
    for label, res in (("cupy", theirs), ("gpuport", ours)):
        counts = {k: sum(1 for v, _ in res.values() if v == k) for k in ("passed", "failed", "error", "skipped")}
        report[label] = counts
        print(f"{label:8} {counts}")
    only_ours = sorted(
        t for t, (v, _) in ours.items() if v in ("failed", "error") and theirs.get(t, ("",))[0] == "passed"
    )
    report["fail_with_gpuport_only"] = {t: ours[t][1] for t in only_ours}
    report["crashed"] = crashed
    print(f"fail with gpuport only: {len(only_ours)}")
    for t in only_ours:
        print("  ", t, "::", ours[t][1][:200].replace("\n", " "))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(1 if only_ours or any("gpuport's" in c for c in crashed) else 0)


if __name__ == "__main__":
    main()
