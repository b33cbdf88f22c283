#!/usr/bin/env bash
# Adds the HIP-on-CUDA test shim to the bundle: ci/gpu-run then points the
# ROCm backend at it, so every test binary's rocm:0 cases run on the NVIDIA
# GPU through the HIP code path (see tests/support/hip_on_cuda/README.md).
set -euo pipefail
cargo build --release --locked --manifest-path tests/support/hip_on_cuda/Cargo.toml --target-dir target
cp target/release/libhip_on_cuda.so .gpu/libhip_on_cuda.so
strip --strip-debug .gpu/libhip_on_cuda.so 2>/dev/null || true
