"""One version: the gpuport crate's (root Cargo.toml) is ``gpuport.__version__``,
the installed package's metadata and what ``gpuport --version`` prints."""

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import gpuport

# crates/gpuport-py/tests/ here, .gpu/python/tests/ in the GPU bundle.
REPO = Path(__file__).resolve().parents[3]


def package_version(cargo_toml: Path) -> str:
    """The ``version`` of the ``[package]`` table of a Cargo.toml."""
    text = cargo_toml.read_text(encoding="utf-8")
    package = re.search(r"^\[package\]\n(.*?)(?=^\[)", text, re.M | re.S)
    assert package, f"{cargo_toml} has no [package] table"
    version = re.search(r'^version\s*=\s*"([^"]+)"', package.group(1), re.M)
    assert version, f"{cargo_toml} states no literal [package] version"
    return version.group(1)


@pytest.mark.skipif(not (REPO / "Cargo.toml").exists(), reason=f"no checkout of the repository at {REPO}")
def test_the_crate_version_is_the_package_version() -> None:
    crate = package_version(REPO / "Cargo.toml")
    assert gpuport.__version__ == crate
    assert gpuport._core.__version__ == crate
    # maturin takes the distribution's version from the binding's Cargo.toml.
    assert package_version(REPO / "crates" / "gpuport-py" / "Cargo.toml") == crate
    assert metadata.version("gpuport") == crate


def test_both_commands_print_the_version() -> None:
    out = subprocess.run([sys.executable, "-m", "gpuport", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"gpuport {gpuport.__version__}\n"
    # The console script installed beside this interpreter, where there is one.
    script = shutil.which("gpuport", path=os.path.dirname(sys.executable))
    if script is not None:
        out = subprocess.run([script, "--version"], capture_output=True, text=True, check=True)
        assert out.stdout == f"gpuport {gpuport.__version__}\n"
