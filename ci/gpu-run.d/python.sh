#!/usr/bin/env bash
# Runs the Python suite on the GPU machine (no network, no Rust): installs
# the bundled abi3 wheel into /tmp/site and runs pytest against it.
# Called by ci/gpu-run from the repository root; output goes to its log.
# The suite runs per backend: host, cuda:0 and rocm:0 (the shim on the H100).
set -uo pipefail
cd "$(dirname "$0")/../.."
# rocm:0 through the HIP-on-CUDA shim the bundle carries (ci/gpu-bundle.d/hip-shim.sh),
# as ci/gpu-run sets it; also when this script runs on its own. With
# GPUPORT_EXPECT_ROCM=device a rocm:0 test that cannot open it fails instead of skipping.
if [ -f .gpu/libhip_on_cuda.so ]; then
    export GPUPORT_HIP_LIBRARY="${GPUPORT_HIP_LIBRARY:-$PWD/.gpu/libhip_on_cuda.so}"
    export GPUPORT_HIPRTC_LIBRARY="${GPUPORT_HIPRTC_LIBRARY:-$PWD/.gpu/libhip_on_cuda.so}"
    export GPUPORT_EXPECT_ROCM="${GPUPORT_EXPECT_ROCM:-device}"
fi
SITE=${GPUPORT_PY_SITE:-/tmp/site}
rm -rf "$SITE"
python3 -m pip install -q --no-deps --no-index --target "$SITE" .gpu/python/*.whl || exit 1
cd .gpu/python
PYTHONPATH="$SITE" python3 -c 'import gpuport; print("gpuport", gpuport.__version__, "devices:", gpuport.devices()); print(gpuport.backend_status())'
PYTHONPATH="$SITE" python3 -m pytest -q -rs -p no:cacheprovider tests
