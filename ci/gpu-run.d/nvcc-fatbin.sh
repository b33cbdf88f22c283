#!/usr/bin/env bash
# On the GPU machine: build the built-in kernels with nvcc exactly as build.rs
# would (ci/nvcc-builtins.sh) and check the fatbin loads and runs.
set -euo pipefail
command -v nvcc >/dev/null || { echo "skipped: no nvcc on this machine"; exit 0; }
out=$(mktemp -d)
start=$(date +%s.%N)
bash ci/nvcc-builtins.sh "$out"
echo "nvcc built $(du -h "$out/gpuport_builtins.fatbin" | cut -f1) in $(echo "$(date +%s.%N) - $start" | bc) s"
GPUPORT_TEST_FATBIN="$out/gpuport_builtins.fatbin" .gpu/tests/kernels-* --test-threads=1 --exact a_fatbin_built_by_nvcc_loads_and_runs
