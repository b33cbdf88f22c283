#!/usr/bin/env bash
# The Python package's checks, from a fresh checkout: `bash ci/python.sh`.
# Runs rustfmt and clippy on crates/gpuport-py, builds the wheel users get
# (ci/wheel --dev: abi3, manylinux_2_28, every backend; CUDA and ROCm load at
# run time, so it starts here and falls back to the host; GPU tests skip with
# a reason), installs it into a fresh venv (crates/gpuport-py/.venv-test,
# git-ignored) with numpy, pytest, mypy and ml_dtypes from PyPI, and runs
# pytest (strict: warnings are errors) and mypy's stubtest there with no
# Rust toolchain on the PATH: as a user without Rust would.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PY=${PYTHON:-python3}

echo "=== python: rustfmt, clippy (gpuport-py)"
(cd crates/gpuport-py && cargo fmt --check && cargo clippy --all-targets -- -D warnings)

echo "=== python: build the wheel and the sdist (ci/wheel --dev)"
bash ci/wheel --dev
wheel=$(ls "$root"/dist/gpuport-*-cp310-abi3-manylinux_*_x86_64.whl)

cd crates/gpuport-py
VENV=$PWD/.venv-test
echo "=== python: install $(basename "$wheel") into a fresh $VENV"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
# ml_dtypes: NumPy dtypes for fp8/fp6/fp4 (tests/test_low_precision.py skips without it).
"$VENV/bin/python" -m pip install -q "$wheel" "numpy>=2.1" "pytest>=7" "mypy>=1.10" typing_extensions ml_dtypes

# The PATH without any folder holding cargo or rustc, the venv first.
no_rust=$VENV/bin
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [ -e "$d/cargo" ] || [ -e "$d/rustc" ] || no_rust=$no_rust:$d
done
run() { env -u VIRTUAL_ENV PATH="$no_rust" "$@"; }
if run bash -c 'command -v cargo || command -v rustc'; then
    echo "ci/python.sh: a Rust toolchain is still on the test PATH" >&2
    exit 1
fi
run python -c 'import gpuport, sys; assert gpuport.__file__.startswith(sys.prefix), gpuport.__file__; print("testing", gpuport.__file__)'

echo "=== python: pytest (the installed wheel, no Rust on the PATH)"
run python -m pytest -q -rs tests

echo "=== python: stubtest (python/gpuport/_core.pyi against the binary)"
run python -m mypy.stubtest gpuport._core --allowlist stubtest-allowlist.txt

echo "ci/python.sh: all passed"
