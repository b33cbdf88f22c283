#!/usr/bin/env bash
# Adds the Python wheel to the GPU bundle: the release wheel of ci/wheel
# (abi3 for CPython 3.10+, manylinux_2_28, every backend: CUDA and ROCm load
# at run time), plus the pytest suite. Called by ci/gpu-bundle from the
# repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu/python
rm -f .gpu/python/*.whl
# GPUPORT_BUNDLE_REUSE_WHEEL=1 takes the wheel already in dist/ (a release
# wheel takes about a quarter of an hour to build on two cores).
if [ "${GPUPORT_BUNDLE_REUSE_WHEEL:-0}" = 1 ] && ls dist/gpuport-*-cp310-abi3-manylinux_*_x86_64.whl >/dev/null 2>&1; then
    echo "ci/gpu-bundle.d/python.sh: reusing $(ls dist/gpuport-*-cp310-abi3-manylinux_*_x86_64.whl)"
else
    bash ci/wheel
fi
cp dist/gpuport-*-cp310-abi3-manylinux_*_x86_64.whl .gpu/python/
rm -rf .gpu/python/tests && cp -r crates/gpuport-py/tests .gpu/python/tests
cp crates/gpuport-py/pyproject.toml .gpu/python/  # pytest's strict settings
ls -l .gpu/python
