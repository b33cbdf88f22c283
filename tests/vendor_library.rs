//! Where the ROCm backend finds `libamdhip64`, in processes of their own
//! (the backend loads it once per process): a pip wheel's copy under a
//! fake site-packages, a copy already loaded winning over an override and
//! a wheel, and a library that lacks a needed symbol.
//!
//! Each scenario is this binary run again with `GPUPORT_TEST_SCENARIO`
//! set, running only `scenario`. The wheel copies are the system's HIP
//! runtime copied under `torch/lib` (skipped, with the reason, where there
//! is none); the library without HIP's symbols is built with the system C
//! compiler (skipped where there is none).
#![cfg(feature = "rocm")]

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuport::backend::library::{chosen_for, Source};
use gpuport::{BackendKind, Error};

const SCENARIO_ENV: &str = "GPUPORT_TEST_SCENARIO";

/// The system's HIP runtime file, if one is installed where ROCm or a
/// distribution puts it.
fn system_hip() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::env::var("ROCM_PATH").ok().map(|r| Path::new(&r).join("lib")).into_iter().collect();
    dirs.extend(["/opt/rocm/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"].map(PathBuf::from));
    let names = ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"];
    dirs.iter().flat_map(|d| names.map(|n| d.join(n))).find(|p| p.is_file())
}

/// A fresh folder for one scenario.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuport-vendor-library-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Copies `from` to `to`, making the folders.
fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
}

/// Runs `scenario` in a child process with `env`; the child's output is shown.
fn run_scenario(name: &str, env: &[(&str, &Path)]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["scenario", "--exact", "--nocapture"]).env(SCENARIO_ENV, name);
    for var in ["GPUPORT_HIP_LIBRARY", "GPUPORT_HIPRTC_LIBRARY", "GPUPORT_SITE_PACKAGES", "ROCM_PATH", "HIP_PATH"] {
        cmd.env_remove(var);
    }
    for (var, value) in env {
        cmd.env(var, value);
    }
    let out = cmd.output().unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "scenario {name} failed");
}

#[test]
fn a_wheel_copy_under_torch_lib_is_found_and_reported() {
    let Some(hip) = system_hip() else { return println!("skipped: no HIP runtime installed to copy") };
    let site = scratch("wheel");
    copy(&hip, &site.join("torch/lib/libamdhip64.so"));
    run_scenario("wheel", &[("GPUPORT_SITE_PACKAGES", &site)]);
}

#[test]
fn a_copy_already_loaded_wins_over_the_override_and_the_wheel() {
    let Some(hip) = system_hip() else { return println!("skipped: no HIP runtime installed to copy") };
    let dir = scratch("loaded");
    let (first, forced) = (dir.join("first/libamdhip64.so"), dir.join("forced/libamdhip64.so"));
    copy(&hip, &first);
    copy(&hip, &forced);
    copy(&hip, &dir.join("site/torch/lib/libamdhip64.so"));
    run_scenario(
        "loaded",
        &[
            ("GPUPORT_TEST_FIRST", &first),
            ("GPUPORT_HIP_LIBRARY", &forced),
            ("GPUPORT_SITE_PACKAGES", &dir.join("site")),
        ],
    );
}

#[test]
fn a_library_without_the_hip_symbols_makes_the_backend_unavailable_naming_them() {
    let dir = scratch("lacks");
    let (source, lib) = (dir.join("stub.c"), dir.join("libamdhip64.so"));
    std::fs::write(&source, "int gpuport_not_hip(void) { return 0; }\n").unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).args(["-shared", "-fPIC", "-o"]).arg(&lib).arg(&source).status() {
        Ok(s) if s.success() => run_scenario("lacks", &[("GPUPORT_HIP_LIBRARY", &lib)]),
        other => println!("skipped: no C compiler to build a stand-in library ({cc}: {other:?})"),
    }
}

/// One scenario, in the child process `run_scenario` starts.
#[test]
fn scenario() {
    let Ok(name) = std::env::var(SCENARIO_ENV) else { return };
    let rocm = || gpuport::backends().into_iter().find(|s| s.kind == BackendKind::Rocm).unwrap();
    match name.as_str() {
        "wheel" => {
            let status = rocm();
            let site = PathBuf::from(std::env::var("GPUPORT_SITE_PACKAGES").unwrap());
            let libs = chosen_for(BackendKind::Rocm);
            assert_eq!(libs.len(), 1, "{libs:?} ({status})");
            assert_eq!(libs[0].source, Source::Wheel(site.clone()), "{libs:?}");
            assert_eq!(Path::new(&libs[0].path), site.join("torch/lib/libamdhip64.so"));
            assert_eq!(status.libraries, libs, "backends() reports it");
        }
        "loaded" => {
            let first = std::env::var("GPUPORT_TEST_FIRST").unwrap();
            let c = std::ffi::CString::new(first.clone()).unwrap();
            // SAFETY: the HIP runtime, loaded as another library of the process would.
            let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            assert!(!handle.is_null(), "could not load {first}");
            let _ = rocm();
            let libs = chosen_for(BackendKind::Rocm);
            assert_eq!(libs.len(), 1, "{libs:?}");
            assert_eq!((libs[0].path.as_str(), &libs[0].source), (first.as_str(), &Source::AlreadyLoaded));
        }
        "lacks" => {
            let status = rocm();
            match &status.devices {
                Err(Error::LibraryNotFound { tried, .. }) => {
                    assert!(tried.contains("loaded, but lacks ") && tried.contains("hipInit"), "{tried}");
                    assert!(tried.contains("[set by GPUPORT_HIP_LIBRARY]"), "{tried}");
                }
                other => panic!("expected LibraryNotFound naming the symbol, got {other:?}"),
            }
            assert!(chosen_for(BackendKind::Rocm).is_empty());
        }
        other => panic!("unknown scenario {other}"),
    }
}
