#!/usr/bin/env bash
# Compiles gpuport's built-in CUDA kernels ahead of time with nvcc into
# OUT_DIR/gpuport_builtins.fatbin: SASS for sm_80 and sm_90 and PTX for newer
# GPUs (the driver JIT-compiles it). build.rs runs this when nvcc is found;
# the GPU bundle runs it on the GPU machine to test the fatbin it makes.
#   ci/nvcc-builtins.sh OUT_DIR [NVCC]
set -euo pipefail
out=$1
nvcc=${2:-nvcc}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
# One program, as the NVRTC path compiles it (src/backend/cuda/mod.rs BUILTIN_SOURCE).
cat "$root/kernels/cuda/builtins.cu" "$root/kernels/cuda/array_ops.cu" > "$out/gpuport_builtins.cu"
"$nvcc" --fatbin -std=c++17 -I "$root/kernels/common" \
    -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_90,code=sm_90 \
    -gencode arch=compute_90,code=compute_90 \
    -o "$out/gpuport_builtins.fatbin" "$out/gpuport_builtins.cu"
