//! NVRTC, the CUDA backend's run-time compiler: CUDA C++ to a cubin for
//! one architecture, through the on-disk kernel cache.

use std::ffi::CStr;
use std::sync::OnceLock;

use cudarc::nvrtc::{result as rtc, sys as rtc_sys};

use super::loading::{self, candidates};
use crate::backend::gpu::{Program, ProgramText};
use crate::error::{BackendKind, DriverError, Error, Result};

/// Converts an NVRTC status into our error.
fn nvrtc_error(call: &'static str, e: rtc::NvrtcError) -> Error {
    // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any status.
    let message = unsafe { CStr::from_ptr(rtc_sys::nvrtcGetErrorString(e.0)) }.to_string_lossy().into_owned();
    Error::Driver(DriverError {
        backend: BackendKind::Cuda,
        call,
        code: e.0 as i64,
        name: format!("{:?}", e.0),
        message,
    })
}

/// Checks NVRTC can be loaded before cudarc touches it (cudarc would panic).
fn nvrtc_available() -> Result<()> {
    static PRESENT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let present = PRESENT.get_or_init(|| {
        let searched = loading::preload(&loading::NVRTC_SPEC);
        // SAFETY: only tries `dlopen` on cudarc's candidate names.
        if !unsafe { rtc_sys::is_culib_present() } {
            let tried = searched.err().unwrap_or_default();
            return Err(format!("{tried}, then cudarc's names {}", candidates("nvrtc", loading::NVRTC_SPEC.names)));
        }
        // SAFETY: present (checked above); cudarc loads it once per process.
        loading::record_used(&loading::NVRTC_SPEC, unsafe { rtc_sys::culib() }, "nvrtcVersion");
        Ok(())
    });
    present.clone().map_err(|tried| Error::LibraryNotFound {
        backend: BackendKind::Cuda,
        library: "libnvrtc (needed to compile kernel source)",
        tried,
    })
}

/// Compiles CUDA C++ to a cubin for `arch` with NVRTC, through the on-disk
/// cache (see [`crate::backend::kernel_cache`]).
pub(super) fn compile(arch: &str, program: &Program<'_>) -> Result<Vec<u8>> {
    nvrtc_available()?;
    let mut opts: Vec<String> = program.options.iter().map(|s| s.to_string()).collect();
    if !opts.iter().any(|o| o.starts_with("-arch") || o.starts_with("--gpu-architecture")) {
        opts.push(format!("--gpu-architecture={arch}"));
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded (checked above); writes two ints.
    unsafe { rtc_sys::nvrtcVersion(&mut major, &mut minor) }.result().map_err(|e| nvrtc_error("nvrtcVersion", e))?;
    let version = format!("nvrtc {major}.{minor}");
    let mut parts: Vec<&[u8]> = vec![version.as_bytes(), arch.as_bytes(), program.code.as_bytes()];
    parts.extend(opts.iter().map(|o| o.as_bytes()));
    for (include, text) in program.headers {
        parts.extend([include.as_bytes(), text.as_bytes()]);
    }
    let key = crate::backend::kernel_cache::key(&parts);
    let dir = crate::backend::kernel_cache::cache_dir();
    let options: Vec<&str> = opts.iter().map(String::as_str).collect();
    let program = Program { options: &options, ..*program };
    let (image, _) = crate::backend::kernel_cache::get_or_build(dir.as_deref(), arch, &key, || run_nvrtc(&program))?;
    Ok(image)
}

/// Runs NVRTC on one program; a rejected program is [`Error::Compile`] with its log.
fn run_nvrtc(program: &Program<'_>) -> Result<Vec<u8>> {
    let text = ProgramText::new(program)?;
    let mut prog = std::ptr::null_mut();
    let create = rtc_sys::nvrtcCreateProgram;
    // SAFETY: every pointer comes from `text`, alive until the program is
    // destroyed below; the counts match the arrays.
    let r = unsafe {
        create(&mut prog, text.code(), text.name(), text.header_count(), text.headers(), text.include_names())
    };
    r.result().map_err(|e| nvrtc_error("nvrtcCreateProgram", e))?;
    let result = (|| {
        // SAFETY: `prog` is a live program created above; the options come from `text`.
        let compiled = unsafe { rtc_sys::nvrtcCompileProgram(prog, text.option_count(), text.options()) }.result();
        if compiled.is_err() {
            // SAFETY: `prog` is live; the log is a NUL-terminated buffer.
            let log = unsafe { rtc::get_program_log(prog) }.unwrap_or_default();
            let log = if log.is_empty() {
                String::new()
            } else {
                // SAFETY: the log buffer is NUL-terminated by NVRTC.
                unsafe { CStr::from_ptr(log.as_ptr()) }.to_string_lossy().into_owned()
            };
            return Err(Error::Compile { backend: BackendKind::Cuda, name: program.name.to_string(), log });
        }
        let mut size = 0usize;
        // SAFETY: `prog` compiled successfully; writes one usize.
        unsafe { rtc_sys::nvrtcGetCUBINSize(prog, &mut size) }
            .result()
            .map_err(|e| nvrtc_error("nvrtcGetCUBINSize", e))?;
        let mut cubin = vec![0u8; size];
        // SAFETY: `cubin` has the `size` bytes NVRTC asked for.
        unsafe { rtc_sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()) }
            .result()
            .map_err(|e| nvrtc_error("nvrtcGetCUBIN", e))?;
        Ok(cubin)
    })();
    // SAFETY: destroyed once, after its last use.
    let _ = unsafe { rtc::destroy_program(prog) };
    result
}
