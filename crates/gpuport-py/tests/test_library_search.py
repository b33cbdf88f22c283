"""Where gpuport finds the vendor libraries, and how it reports them: a
copy in a pip wheel's folder under a site-packages folder (here a fake one:
the system's HIP runtime copied to ``torch/lib``), named by
``GPUPORT_SITE_PACKAGES`` or found on ``sys.path``. Each case is a fresh
process, because a backend loads its library once per process. Skips, with
the reason, where no HIP runtime is installed to copy."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_NAMES = ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"]


def system_hip() -> Path:
    """The system's HIP runtime file, or a skip."""
    dirs = [Path(os.environ["ROCM_PATH"]) / "lib"] if os.environ.get("ROCM_PATH") else []
    dirs += [Path(d) for d in ("/opt/rocm/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")]
    for d in dirs:
        for name in _NAMES:
            if (d / name).is_file():
                return d / name
    pytest.skip("no HIP runtime installed to copy into a fake torch/lib")


def fake_wheel(site: Path) -> None:
    """The system's HIP runtime as a torch wheel would hold it under ``site``."""
    lib = site / "torch" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(system_hip(), lib / "libamdhip64.so")


def rocm_note(env: dict) -> str:
    """``backend_status()``'s note for rocm in a fresh process with ``env``."""
    code = "import gpuport\nprint([n for b, ok, n in gpuport.backend_status() if b == 'rocm'][0])\n"
    base = {k: v for k, v in os.environ.items() if k not in ("GPUPORT_HIP_LIBRARY", "GPUPORT_SITE_PACKAGES")}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_wheel_copy_named_by_gpuport_site_packages_is_used_and_reported(tmp_path):
    fake_wheel(tmp_path)
    note = rocm_note({"GPUPORT_SITE_PACKAGES": str(tmp_path)})
    assert f"libamdhip64 from {tmp_path}/torch/lib/libamdhip64.so (pip wheel in {tmp_path})" in note, note


def test_a_wheel_copy_on_sys_path_is_used_and_reported(tmp_path):
    """The package hands ``sys.path`` to the search at import."""
    fake_wheel(tmp_path)
    pythonpath = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    note = rocm_note({"PYTHONPATH": pythonpath})
    assert f"(pip wheel in {tmp_path})" in note, note


def test_a_library_without_the_hip_calls_is_named_with_what_it_lacks(tmp_path):
    """A file that loads but lacks HIP's symbols: rocm is unavailable, the
    note names the symbols, and nothing panics."""
    from conftest import build_c_library

    lib = build_c_library("not_hip_stub.c", tmp_path, "a library without HIP's symbols")
    note = rocm_note({"GPUPORT_HIP_LIBRARY": lib._name})
    assert "loaded, but lacks" in note and "hipInit" in note and "set by GPUPORT_HIP_LIBRARY" in note, note
