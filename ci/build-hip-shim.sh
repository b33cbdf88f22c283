#!/usr/bin/env bash
# Builds what the GPU machine needs to run the ROCm backend's tests through
# the HIP-on-CUDA shim, into the git-ignored .gpu/ folder:
#   .gpu/libhip_on_cuda.so            the shim (tests/support/hip_on_cuda), release
#   .gpu/rocm-<hash>                  tests/rocm.rs,            --release --features cuda,rocm
#   .gpu/rocm_no_library-<hash>       tests/rocm_no_library.rs, --release --features cuda,rocm
# Then, on the GPU machine, from the repository root: bash ci/gpu-rocm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu

echo "== shim"
cargo build --release --locked --manifest-path tests/support/hip_on_cuda/Cargo.toml --target-dir target
cp target/release/libhip_on_cuda.so .gpu/libhip_on_cuda.so
strip --strip-debug .gpu/libhip_on_cuda.so 2>/dev/null || true

echo "== ROCm test binaries"
rm -f .gpu/rocm-* .gpu/rocm_no_library-*
CARGO_PROFILE_RELEASE_DEBUG=0 cargo test --release --features cuda,rocm --test rocm --test rocm_no_library --no-run \
    --message-format=json |
    python3 -c 'import sys, json
for line in sys.stdin:
    j = json.loads(line)
    if j.get("executable") and j.get("profile", {}).get("test"):
        print(j["executable"])' |
    while read -r bin; do
        cp "$bin" .gpu/
        strip --strip-debug ".gpu/$(basename "$bin")" 2>/dev/null || true
    done
ls -la .gpu/libhip_on_cuda.so .gpu/rocm-* .gpu/rocm_no_library-*
