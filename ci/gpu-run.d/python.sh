#!/usr/bin/env bash
# Runs the Python suite on the GPU machine (no network, no Rust): installs
# the bundled abi3 wheel into /tmp/site and runs pytest against it.
# Called by ci/gpu-run from the repository root; output goes to its log.
set -uo pipefail
cd "$(dirname "$0")/../.."
SITE=${GPUPORT_PY_SITE:-/tmp/site}
rm -rf "$SITE"
python3 -m pip install -q --no-deps --no-index --target "$SITE" .gpu/python/*.whl || exit 1
cd .gpu/python
PYTHONPATH="$SITE" python3 -c 'import gpuport; print("gpuport", gpuport.__version__, "devices:", gpuport.devices()); print(gpuport.backend_status())'
PYTHONPATH="$SITE" python3 -m pytest -q -rs -p no:cacheprovider tests
