//! Precompiles the built-in CUDA kernels when `nvcc` is available.
//!
//! With feature `cuda` and an `nvcc` (from `$NVCC`, `$CUDA_PATH/bin`, or the
//! `PATH`), `ci/nvcc-builtins.sh` builds a fatbin (sm_80, sm_90, PTX for
//! newer) that is embedded in the library, and the cfg
//! `gpuport_prebuilt_cuda` is set. Without nvcc (or with
//! `GPUPORT_NO_NVCC=1`), the sources are embedded and NVRTC compiles them at
//! first use (cached on disk). Either way the build needs no CUDA installed.

use std::path::PathBuf;
use std::process::Command;

fn find_nvcc() -> Option<PathBuf> {
    let candidates = std::env::var_os("NVCC")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("CUDA_PATH").map(|p| PathBuf::from(p).join("bin/nvcc")))
        .chain([PathBuf::from("nvcc"), PathBuf::from("/usr/local/cuda/bin/nvcc")]);
    candidates.into_iter().find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(gpuport_prebuilt_cuda)");
    println!("cargo::rerun-if-changed=kernels");
    println!("cargo::rerun-if-changed=ci/nvcc-builtins.sh");
    for var in ["NVCC", "CUDA_PATH", "GPUPORT_NO_NVCC"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() || std::env::var_os("GPUPORT_NO_NVCC").is_some() {
        return;
    }
    let Some(nvcc) = find_nvcc() else { return };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let status = Command::new("bash").arg("ci/nvcc-builtins.sh").arg(&out).arg(&nvcc).status();
    match status {
        Ok(s) if s.success() => println!("cargo::rustc-cfg=gpuport_prebuilt_cuda"),
        other => println!(
            "cargo::warning=nvcc ({}) failed to precompile the built-in kernels ({other:?}); NVRTC will compile them at run time",
            nvcc.display()
        ),
    }
}
