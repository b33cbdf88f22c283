#!/usr/bin/env bash
# On the NVIDIA GPU machine (no ROCm, no Rust): runs the ROCm backend's tests
# through the HIP-on-CUDA shim. Build the bundle first, on the build machine,
# with `bash ci/build-hip-shim.sh`. Run from the repository root:
#   bash ci/gpu-rocm.sh
# GPUPORT_EXPECT_ROCM=device turns every "skipped" into a failure, so a shim
# that does not load cannot pass silently. libcuda.so.1 and libnvrtc.so.13
# must be on the loader path (they are there).
set -euo pipefail
cd "$(dirname "$0")/.."
shim="$PWD/.gpu/libhip_on_cuda.so"
if [ ! -f "$shim" ]; then
    echo "missing $shim: run 'bash ci/build-hip-shim.sh' on the build machine" >&2
    exit 1
fi
export GPUPORT_HIP_LIBRARY="$shim" GPUPORT_HIPRTC_LIBRARY="$shim" GPUPORT_EXPECT_ROCM=device
ran=0
for t in .gpu/rocm-* .gpu/rocm_no_library-*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    echo "== $t"
    "$t" --test-threads=1
    ran=$((ran + 1))
done
if [ "$ran" -lt 2 ]; then
    echo "expected the rocm-* and rocm_no_library-* test binaries in .gpu/" >&2
    exit 1
fi
echo "ci/gpu-rocm.sh: $ran ROCm test binaries passed through the shim"
