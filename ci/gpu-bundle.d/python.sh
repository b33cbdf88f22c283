#!/usr/bin/env bash
# Adds the Python wheel to the GPU bundle: the release wheel of ci/wheel
# (abi3 for CPython 3.10+, manylinux_2_28, every backend: CUDA and ROCm load
# at run time), plus the pytest suite. Called by ci/gpu-bundle from the
# repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu/python
rm -f .gpu/python/*.whl
bash ci/wheel
cp dist/gpuport-*-cp310-abi3-manylinux_*_x86_64.whl .gpu/python/
rm -rf .gpu/python/tests && cp -r crates/gpuport-py/tests .gpu/python/tests
cp crates/gpuport-py/pyproject.toml .gpu/python/  # pytest's strict settings
ls -l .gpu/python
