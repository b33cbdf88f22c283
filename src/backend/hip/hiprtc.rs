//! hiprtc, the ROCm backend's run-time compiler: HIP C++ to a code object
//! for one target, loaded at run time like the runtime (see [`super::sys`]).

use std::ffi::c_char;
use std::sync::OnceLock;

use super::runtime::c_str_or;
use super::sys::{self, hiprtcResult, Loaded, RtcApi};
use crate::backend::gpu::{Program, ProgramText};
use crate::backend::library::{self, Candidate, Source};
use crate::error::{BackendKind, DriverError, Error, Result};

/// Converts a hiprtc status into our error.
fn hiprtc_error(call: &'static str, code: hiprtcResult) -> Error {
    let message = match HIPRTC.get() {
        // SAFETY: hiprtcGetErrorString returns a static NUL-terminated string for any status.
        Some(Ok(rtc)) => c_str_or(unsafe { (rtc.api.hiprtcGetErrorString)(code) }, String::new),
        _ => String::new(),
    };
    Error::Driver(DriverError {
        backend: BackendKind::Rocm,
        call,
        code: i64::from(code),
        name: hiprtc_status_name(code).map(str::to_string).unwrap_or_else(|| format!("hiprtcResult({code})")),
        message,
    })
}

/// `hiprtcResult` names, from `hip/hiprtc.h`.
fn hiprtc_status_name(code: hiprtcResult) -> Option<&'static str> {
    const NAMES: [&str; 12] = [
        "HIPRTC_SUCCESS",
        "HIPRTC_ERROR_OUT_OF_MEMORY",
        "HIPRTC_ERROR_PROGRAM_CREATION_FAILURE",
        "HIPRTC_ERROR_INVALID_INPUT",
        "HIPRTC_ERROR_INVALID_PROGRAM",
        "HIPRTC_ERROR_INVALID_OPTION",
        "HIPRTC_ERROR_COMPILATION",
        "HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE",
        "HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        "HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        "HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
        "HIPRTC_ERROR_INTERNAL_ERROR",
    ];
    match code {
        100 => Some("HIPRTC_ERROR_LINKING"),
        c => usize::try_from(c).ok().and_then(|i| NAMES.get(i).copied()),
    }
}

static HIPRTC: OnceLock<std::result::Result<Loaded<RtcApi>, String>> = OnceLock::new();

/// Loads hiprtc before compiling kernel source.
///
/// The search of [`sys::HIPRTC_SPEC`] (a copy already loaded, then
/// `GPUPORT_HIPRTC_LIBRARY`, then wheels, the loader path and the ROCm
/// folders); when the HIP runtime came from elsewhere than a loaded copy
/// or the search, as a stand-in named by `GPUPORT_HIP_LIBRARY`, that file
/// first, so a stand-in runtime is not paired with a system hiprtc; last,
/// the HIP runtime itself, which holds hiprtc in ROCm 5.2.
fn hiprtc() -> Result<&'static Loaded<RtcApi>> {
    let state = HIPRTC.get_or_init(|| {
        let runtime = super::runtime::driver()
            .ok()
            .map(|rt| Candidate { path: rt.loaded.path.clone(), source: rt.loaded.source.clone() });
        let forced = runtime.clone().filter(|c| matches!(c.source, Source::Override(_)));
        let own_override = std::env::var(sys::HIPRTC_LIBRARY_ENV).is_ok_and(|p| !p.is_empty());
        if let (Some(forced), false) = (forced, own_override) {
            // SAFETY: the forced HIP runtime (a stand-in exporting hiprtc too), resolved with the header signatures.
            if let Ok(rtc) = unsafe { library::open_first(std::slice::from_ref(&forced), RtcApi::resolve) } {
                library::record(&sys::HIPRTC_SPEC, &rtc.path, &rtc.source);
                return Ok(rtc);
            }
        }
        // SAFETY: loads only hiprtc (or HIP runtime) candidates, resolved with the header signatures.
        unsafe { sys::search(&sys::HIPRTC_SPEC, runtime.into_iter().collect(), RtcApi::resolve) }
    });
    state.as_ref().map_err(|tried| Error::LibraryNotFound {
        backend: BackendKind::Rocm,
        library: "libhiprtc (needed to compile kernel source)",
        tried: tried.clone(),
    })
}

/// Compiles HIP C++ source to a code object with hiprtc, without a device.
///
/// Pass the target in `options` (`--offload-arch=gfx90a`); without one,
/// hiprtc compiles for the current device. [`Device::load_module`](crate::Device::load_module) with
/// [`ModuleSource::Source`](crate::ModuleSource::Source) calls this with the device's target added.
/// A rejected program is [`Error::Compile`] carrying hiprtc's log.
pub fn compile_source(code: &str, name: &str, options: &[&str]) -> Result<Vec<u8>> {
    compile_program(&Program { code, name, options, headers: &[] })
}

/// Compiles `program` with hiprtc (see [`compile_source`]).
pub(super) fn compile_program(program: &Program<'_>) -> Result<Vec<u8>> {
    let api = &hiprtc()?.api;
    let text = ProgramText::new(program)?;
    let mut prog: sys::hiprtcProgram = std::ptr::null_mut();
    let create = api.hiprtcCreateProgram;
    // SAFETY: every pointer comes from `text`, alive until the program is
    // destroyed below; the counts match the arrays.
    let r = unsafe {
        create(&mut prog, text.code(), text.name(), text.header_count(), text.headers(), text.include_names())
    };
    if r != sys::HIPRTC_SUCCESS {
        return Err(hiprtc_error("hiprtcCreateProgram", r));
    }
    let result = (|| {
        // SAFETY: `prog` is live; the options come from `text`.
        let compiled = unsafe { (api.hiprtcCompileProgram)(prog, text.option_count(), text.options()) };
        if compiled != sys::HIPRTC_SUCCESS {
            return Err(rejected(program.name, compiled, program_log(api, prog)));
        }
        let mut size = 0usize;
        // SAFETY: `prog` compiled successfully; writes one size_t.
        let r = unsafe { (api.hiprtcGetCodeSize)(prog, &mut size) };
        if r != sys::HIPRTC_SUCCESS {
            return Err(hiprtc_error("hiprtcGetCodeSize", r));
        }
        let mut code = vec![0u8; size];
        // SAFETY: `code` has the `size` bytes hiprtc asked for.
        let r = unsafe { (api.hiprtcGetCode)(prog, code.as_mut_ptr().cast::<c_char>()) };
        if r != sys::HIPRTC_SUCCESS {
            return Err(hiprtc_error("hiprtcGetCode", r));
        }
        Ok(code)
    })();
    // SAFETY: destroyed once, after its last use.
    let _ = unsafe { (api.hiprtcDestroyProgram)(&mut prog) };
    result
}

/// The error for a program hiprtc did not compile: [`Error::Compile`] with
/// the log where hiprtc rejected the source (unlike NVRTC, hiprtc fails for
/// other reasons too, e.g. an option it does not know), else the status with
/// the log appended.
fn rejected(name: &str, status: hiprtcResult, log: String) -> Error {
    if status == sys::HIPRTC_ERROR_COMPILATION {
        return Error::Compile { backend: BackendKind::Rocm, name: name.to_string(), log };
    }
    let mut e = hiprtc_error("hiprtcCompileProgram", status);
    if let Error::Driver(d) = &mut e {
        if !log.is_empty() {
            d.message = format!("{}\n{log}", d.message);
        }
    }
    e
}

/// The compiler's log for `prog` (empty if there is none).
fn program_log(api: &RtcApi, prog: sys::hiprtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: `prog` is live; writes one size_t.
    if unsafe { (api.hiprtcGetProgramLogSize)(prog, &mut size) } != sys::HIPRTC_SUCCESS || size == 0 {
        return String::new();
    }
    let mut log = vec![0u8; size];
    // SAFETY: `log` has the `size` bytes hiprtc asked for.
    if unsafe { (api.hiprtcGetProgramLog)(prog, log.as_mut_ptr().cast::<c_char>()) } != sys::HIPRTC_SUCCESS {
        return String::new();
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end]).trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hiprtc_statuses_have_header_names() {
        assert_eq!(hiprtc_status_name(6), Some("HIPRTC_ERROR_COMPILATION"));
        assert_eq!(hiprtc_status_name(100), Some("HIPRTC_ERROR_LINKING"));
        assert_eq!(hiprtc_status_name(-1), None);
    }
}
