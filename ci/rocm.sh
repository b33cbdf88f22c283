#!/usr/bin/env bash
# CI for the ROCm backend on a machine without an AMD GPU.
#
#   bash ci/rocm.sh            # from the repository root
#
# 1. Installs Debian's ROCm 5.2 HIP runtime and hipcc when hipcc is missing
#    (Debian 12: libamdhip64-dev, hipcc; root, or sudo).
# 2. Type-checks --features rocm, warning-free.
# 3. Runs the ROCm tests against the real libamdhip64.so.5 with
#    GPUPORT_EXPECT_ROCM=no-device: the library must load, report
#    "ROCm loaded, no device", and hiprtc must compile the built-in kernels.
#    Checks the test binary does not link libamdhip64 (it must start without ROCm).
# 4. Compiles every kernel in kernels/hip with `hipcc --genco` for gfx90a
#    (wave64) and gfx1030 (wave32), so a kernel that stops compiling, or that
#    one target cannot generate code for, fails CI. (Debian's hipcc 5.2 does
#    not know gfx942 or gfx1100; users get those from hiprtc at run time.)
#    At -O0 by default: code generation for both targets, without LLVM's
#    optimizer, which took 297 s (gfx90a) and 313 s (gfx1030) for
#    array_ops.hip on one core of the development machine against 8 s at -O0
#    (2026-11-28). GPUPORT_HIPCC_OPT=-O3 compiles as hiprtc does at run time.
#
# Measured on the 2-core development machine (2026-11-22): 21 s for
# `apt-get update` + the install on a machine without them. In a fresh-clone
# run of ci/test (2026-11-29) the rest took 129 s. The script prints each
# step's time.
set -euo pipefail
cd "$(dirname "$0")/.."

step_start=$SECONDS
step() {
    printf '\n== %s (%ss so far)\n' "$1" "$((SECONDS - step_start))"
}

HIP_ARCHS=(gfx90a gfx1030)
OUT=target/hip-code-objects

step "ROCm toolchain"
if ! command -v hipcc >/dev/null 2>&1 || ! ldconfig -p | grep -q 'libamdhip64\.so'; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends libamdhip64-dev hipcc
    # The downloaded packages are not needed once installed, and CI's disk
    # is short (ci/test says how it ran out).
    $SUDO apt-get clean
fi
hipcc --version 2>/dev/null | grep -m1 -i 'HIP version' || true

# The ROCm-only configuration is type-checked (its warnings count). The
# configuration with every backend is not built here: ci/test's clippy
# (--all-targets --features cuda,rocm -D warnings) already rejects its
# warnings, and the tests below (and ci/test's examples step, for the
# library and the command) build what they run.
step "check --features rocm"
log=$(mktemp)
cargo check --features rocm 2>&1 | tee "$log"
if grep -qE '^(warning|error)' "$log"; then
    echo "ci/rocm.sh: the build printed warnings (above); the project builds warning-free" >&2
    exit 1
fi

step "ROCm tests (real libamdhip64, no AMD GPU)"
GPUPORT_EXPECT_ROCM=no-device cargo test --features cuda,rocm --lib --test rocm --test rocm_no_library -- \
    --test-threads=2

step "test binary starts without ROCm (no link-time dependency)"
bin=$(cargo test --features cuda,rocm --test rocm --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$bin" ] || ldd "$bin" | grep -E 'amdhip64|hiprtc|libcuda|nvrtc'; then
    echo "ci/rocm.sh: $bin links a GPU library at build time (or was not found)" >&2
    exit 1
fi
echo "$bin: no GPU library among its DT_NEEDED entries"

step "hipcc --genco ${GPUPORT_HIPCC_OPT:--O0} for ${HIP_ARCHS[*]}"
mkdir -p "$OUT"
shopt -s nullglob
kernels=(kernels/hip/*.hip)
if [ ${#kernels[@]} -eq 0 ]; then
    echo "ci/rocm.sh: no kernels in kernels/hip" >&2
    exit 1
fi
# One hipcc per (kernel, target), two at a time: at -O3 the array kernels
# take minutes per target on a CI core.
compile_one() { # kernel arch
    local out="$OUT/$(basename "${1%.hip}")-$2.co"
    hipcc --genco "$HIPCC_OPT" -I kernels/common --offload-arch="$2" "$1" -o "$out"
    echo "$1 ($2) -> $out ($(stat -c %s "$out") bytes)"
}
export -f compile_one
HIPCC_OPT=${GPUPORT_HIPCC_OPT:--O0}
export OUT HIPCC_OPT
for k in "${kernels[@]}"; do for a in "${HIP_ARCHS[@]}"; do echo "$k $a"; done; done |
    xargs -P 2 -L 1 bash -c 'compile_one "$0" "$1"'

step "done"
