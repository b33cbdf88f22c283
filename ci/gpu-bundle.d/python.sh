#!/usr/bin/env bash
# Adds the Python wheel to the GPU bundle: an abi3 wheel (CPython 3.9+)
# with every backend (CUDA and ROCm load at run time), plus the pytest
# suite. Called by ci/gpu-bundle from the repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu/python
if ! command -v maturin >/dev/null; then
    python3 -m pip install -q "maturin>=1.16,<2"
fi
rm -f .gpu/python/*.whl
(cd crates/gpuport-py && maturin build --release --strip --out ../../.gpu/python)
rm -rf .gpu/python/tests && cp -r crates/gpuport-py/tests .gpu/python/tests
cp crates/gpuport-py/pyproject.toml .gpu/python/  # pytest's strict settings
ls -l .gpu/python
