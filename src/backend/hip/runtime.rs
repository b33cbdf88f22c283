//! Loading the HIP runtime (`libamdhip64`) once per process, through the
//! hand-declared table of [`super::sys`].

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use super::sys::{self, hipError_t, HipApi, Loaded};
use crate::error::{BackendKind, Error, Result};

/// The loaded HIP runtime, initialized once per process.
pub(crate) struct Runtime {
    pub(super) loaded: Loaded<HipApi>,
    /// `hipRuntimeGetVersion`, e.g. 50221153 for 5.2.21153.
    pub(super) version: c_int,
    /// What `hipInit(0)` returned (kept for the no-device message).
    pub(super) init: hipError_t,
}

impl Runtime {
    pub(super) fn api(&self) -> &HipApi {
        &self.loaded.api
    }

    /// The status's name from `hipGetErrorName`, e.g. `hipErrorNoDevice`.
    pub(super) fn error_name(&self, code: hipError_t) -> String {
        // SAFETY: hipGetErrorName returns a static NUL-terminated string (or null) for any status.
        c_str_or(unsafe { (self.api().hipGetErrorName)(code) }, || format!("hipError({code})"))
    }

    /// The status's description from `hipGetErrorString`.
    pub(super) fn error_string(&self, code: hipError_t) -> String {
        // SAFETY: as in `error_name`.
        c_str_or(unsafe { (self.api().hipGetErrorString)(code) }, String::new)
    }
}

pub(super) static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// Copies a C string owned by the library, or `fallback()` for null.
pub(super) fn c_str_or(ptr: *const c_char, fallback: impl FnOnce() -> String) -> String {
    if ptr.is_null() {
        fallback()
    } else {
        // SAFETY: non-null, NUL-terminated and static per the HIP/hiprtc headers.
        unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
    }
}

/// Loads the HIP runtime and calls `hipInit(0)` once; the outcome (and why it
/// failed) is cached.
///
/// `hipInit` is called right after loading because a dlopen'ed runtime gets
/// no implicit initialization: ROCm 7.2.3 fails the first `hipModuleLoad`
/// with hipErrorSharedObjectInitFailed otherwise (warpfront/hipfire#288).
/// Its failure is not final: ROCm 5.2 without a GPU returns
/// hipErrorInvalidDevice here, and `HipDriver::count` reports that case.
pub(crate) fn driver() -> Result<&'static Runtime> {
    let state = RUNTIME.get_or_init(|| {
        // SAFETY: loads only HIP runtime candidates; symbols are resolved with the header signatures.
        let loaded = unsafe { sys::search(&sys::HIP_SPEC, Vec::new(), HipApi::resolve) }?;
        // SAFETY: the library is loaded and resolved; hipInit takes flags only.
        let init = unsafe { (loaded.api.hipInit)(0) };
        let mut version = 0;
        // SAFETY: writes one int.
        let _ = unsafe { (loaded.api.hipRuntimeGetVersion)(&mut version) };
        Ok(Runtime { loaded, version, init })
    });
    match state {
        Ok(rt) => Ok(rt),
        Err(tried) => {
            Err(Error::LibraryNotFound { backend: BackendKind::Rocm, library: "libamdhip64", tried: tried.clone() })
        }
    }
}
