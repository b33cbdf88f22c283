//! ROCm where its libraries cannot be found: a process of its own, because
//! the backend loads the HIP runtime once per process.
//!
//! `GPUPORT_HIP_LIBRARY` and `GPUPORT_HIPRTC_LIBRARY` point at paths that do
//! not exist, which replaces the search, so this runs the same with or without
//! ROCm (or the test shim) installed.
#![cfg(feature = "rocm")]

use gpuport::{BackendKind, Error};

const MISSING_HIP: &str = "/nonexistent/gpuport-test/libamdhip64.so.6";
const MISSING_HIPRTC: &str = "/nonexistent/gpuport-test/libhiprtc.so.6";

#[test]
fn a_missing_hip_library_is_reported_with_every_path_tried_and_the_host_still_works() {
    // The only test in this binary, so no other thread reads the environment.
    std::env::set_var("GPUPORT_HIP_LIBRARY", MISSING_HIP);
    std::env::set_var("GPUPORT_HIPRTC_LIBRARY", MISSING_HIPRTC);

    match gpuport::open("rocm:0") {
        Err(Error::LibraryNotFound { backend, library, tried }) => {
            assert_eq!(backend, BackendKind::Rocm);
            assert_eq!(library, "libamdhip64");
            assert_eq!(tried, format!("{MISSING_HIP} [set by GPUPORT_HIP_LIBRARY]"), "the override alone, with why");
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    // The outcome is cached, and reported the same way again.
    let again = gpuport::open("rocm:0").unwrap_err().to_string();
    assert!(again.contains("rocm is unavailable") && again.contains(MISSING_HIP), "{again}");

    // hiprtc is looked for on its own, where it was forced to be.
    match gpuport::backend::hip::compile_source("extern \"C\" __global__ void k() {}", "k.hip", &[]) {
        Err(Error::LibraryNotFound { backend: BackendKind::Rocm, tried, .. }) => {
            assert_eq!(tried, format!("{MISSING_HIPRTC} [set by GPUPORT_HIPRTC_LIBRARY]"))
        }
        other => panic!("expected LibraryNotFound for hiprtc, got {other:?}"),
    }

    // The backend is listed with the reason, and the default device falls back.
    let status = gpuport::backends().into_iter().find(|s| s.kind == BackendKind::Rocm).unwrap();
    assert!(status.compiled);
    assert!(matches!(status.devices, Err(Error::LibraryNotFound { .. })));
    // (Where CUDA works, the default device is cuda:0 and ROCm is never tried.)
    if std::env::var("GPUPORT_DEVICE").is_err() {
        let chosen = gpuport::default_device().unwrap();
        if chosen.device.backend() == BackendKind::Host {
            assert!(chosen.notes.iter().any(|n| n.contains(MISSING_HIP)), "{:?}", chosen.notes);
        }
    }
    let host = gpuport::open("host").unwrap();
    assert_eq!(host.backend(), BackendKind::Host);
}
