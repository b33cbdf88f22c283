#!/usr/bin/env bash
# The Python package's checks, from a fresh checkout: `bash ci/python.sh`.
# Makes a venv under crates/gpuport-py/.venv-ci (git-ignored), installs
# maturin, numpy, pytest, mypy and ml_dtypes from PyPI, builds the extension in debug
# (it always carries every backend: CUDA and ROCm load at run time, so it
# starts here and falls back to the host; GPU tests skip with a reason), then runs clippy,
# rustfmt, pytest (strict: warnings are errors) and mypy's stubtest.
set -euo pipefail
cd "$(dirname "$0")/../crates/gpuport-py"
PY=${PYTHON:-python3}
VENV=.venv-ci
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip >/dev/null
# ml_dtypes: NumPy dtypes for fp8/fp6/fp4 (tests/test_low_precision.py skips without it).
python -m pip install -q "maturin>=1.16,<2" "numpy>=2.1" "pytest>=7" "mypy>=1.10" typing_extensions ml_dtypes

echo "=== python: rustfmt, clippy (gpuport-py)"
cargo fmt --check
cargo clippy --all-targets -- -D warnings

echo "=== python: build (debug, every backend) and install into $VENV"
maturin develop

echo "=== python: pytest"
python -m pytest -q -rs tests

echo "=== python: stubtest (python/gpuport/_core.pyi against the binary)"
python -m mypy.stubtest gpuport._core --allowlist stubtest-allowlist.txt

echo "ci/python.sh: all passed"
