//! hiprtc on NVRTC.
//!
//! Programs get the prelude (`prelude.h`) as an in-memory header that is
//! pre-included (`--pre-include`), so line numbers in logs match the source.
//! Options are translated: `--offload-arch=sm_XY` becomes
//! `--gpu-architecture=sm_XY`; an AMD target (`gfx…`) cannot be compiled
//! here and is `HIPRTC_ERROR_INVALID_OPTION`; AMD-only code-generation flags
//! and `-O<n>` (NVRTC always optimizes) are dropped; everything else is
//! passed through, so NVRTC rejects what it does not know. hiprtc and NVRTC
//! share their status numbers (0 success ... 6 compilation ... 11 internal).

use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::nvrtc::sys::{self as rtc, nvrtcProgram};

/// `hiprtcResult`.
type RtcResult = c_int;

const SUCCESS: RtcResult = 0;
const INVALID_INPUT: RtcResult = 3;
const INVALID_OPTION: RtcResult = 5;
const INTERNAL_ERROR: RtcResult = 11;

const PRELUDE_NAME: &CStr = c"hip_on_cuda_prelude.h";
const PRELUDE: &str = concat!(include_str!("prelude.h"), "\0");

/// `hiprtcResult` names (`hip/hiprtc.h`).
const NAMES: [&CStr; 12] = [
    c"HIPRTC_SUCCESS",
    c"HIPRTC_ERROR_OUT_OF_MEMORY",
    c"HIPRTC_ERROR_PROGRAM_CREATION_FAILURE",
    c"HIPRTC_ERROR_INVALID_INPUT",
    c"HIPRTC_ERROR_INVALID_PROGRAM",
    c"HIPRTC_ERROR_INVALID_OPTION",
    c"HIPRTC_ERROR_COMPILATION",
    c"HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE",
    c"HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
    c"HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
    c"HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
    c"HIPRTC_ERROR_INTERNAL_ERROR",
];

fn result(r: rtc::nvrtcResult) -> RtcResult {
    r as c_int
}

/// Runs `f` with NVRTC loaded, turning a panic or a missing NVRTC into `HIPRTC_ERROR_INTERNAL_ERROR`.
fn guard(f: impl FnOnce() -> RtcResult) -> RtcResult {
    // SAFETY: only tries to dlopen cudarc's candidate names for libnvrtc.
    if !catch_unwind(|| unsafe { rtc::is_culib_present() }).unwrap_or(false) {
        return INTERNAL_ERROR;
    }
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(INTERNAL_ERROR)
}

/// `const char* hiprtcGetErrorString(hiprtcResult)`.
#[no_mangle]
pub extern "C" fn hiprtcGetErrorString(code: RtcResult) -> *const c_char {
    usize::try_from(code).ok().and_then(|i| NAMES.get(i)).map_or(c"HIPRTC_ERROR_UNKNOWN".as_ptr(), |s| s.as_ptr())
}

/// `hiprtcResult hiprtcCreateProgram(hiprtcProgram*, const char* src, const char* name,
/// int numHeaders, const char** headers, const char** includeNames)`.
///
/// # Safety
/// As `nvrtcCreateProgram`: `src` NUL-terminated, the header arrays hold `num_headers` strings.
#[no_mangle]
pub unsafe extern "C" fn hiprtcCreateProgram(
    prog: *mut nvrtcProgram,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *const *const c_char,
    include_names: *const *const c_char,
) -> RtcResult {
    guard(|| {
        let n = usize::try_from(num_headers).unwrap_or(0);
        let (mut hs, mut names) = (Vec::with_capacity(n + 1), Vec::with_capacity(n + 1));
        if n > 0 {
            if headers.is_null() || include_names.is_null() {
                return INVALID_INPUT;
            }
            // SAFETY: the caller passes `num_headers` entries in each array.
            unsafe {
                hs.extend_from_slice(std::slice::from_raw_parts(headers, n));
                names.extend_from_slice(std::slice::from_raw_parts(include_names, n));
            }
        }
        hs.push(PRELUDE.as_ptr() as *const c_char);
        names.push(PRELUDE_NAME.as_ptr());
        // SAFETY: `hs`/`names` hold n+1 NUL-terminated strings; NVRTC copies them.
        result(unsafe { rtc::nvrtcCreateProgram(prog, src, name, (n + 1) as c_int, hs.as_ptr(), names.as_ptr()) })
    })
}

/// hiprtc options as NVRTC options, or `None` for one that cannot be honoured here.
fn translate_options(options: &[String]) -> Option<Vec<String>> {
    let mut out = Vec::with_capacity(options.len() + 1);
    for o in options {
        let arch = o.strip_prefix("--offload-arch=").or_else(|| o.strip_prefix("-offload-arch="));
        if let Some(arch) = arch {
            if arch.starts_with("gfx") {
                return None;
            }
            out.push(format!("--gpu-architecture={}", arch.split(':').next().unwrap_or(arch)));
        } else if o.starts_with("-O")
            || o.starts_with("-mcumode")
            || o.starts_with("-mno-cumode")
            || o.starts_with("-mwavefrontsize64")
            || o.starts_with("-mno-wavefrontsize64")
            || o.starts_with("-munsafe-fp-atomics")
            || o.starts_with("-fgpu-rdc")
        {
            continue;
        } else if o == "-ffast-math" {
            out.push("--use_fast_math".into());
        } else {
            out.push(o.clone());
        }
    }
    out.push(format!("--pre-include={}", PRELUDE_NAME.to_string_lossy()));
    Some(out)
}

/// `hiprtcResult hiprtcCompileProgram(hiprtcProgram, int numOptions, const char** options)`.
///
/// # Safety
/// `prog` must be live; `options` holds `num_options` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn hiprtcCompileProgram(
    prog: nvrtcProgram,
    num_options: c_int,
    options: *const *const c_char,
) -> RtcResult {
    guard(|| {
        let n = usize::try_from(num_options).unwrap_or(0);
        if n > 0 && options.is_null() {
            return INVALID_INPUT;
        }
        let given: Vec<String> = (0..n)
            // SAFETY: the caller passes `n` NUL-terminated strings.
            .map(|i| unsafe { CStr::from_ptr(*options.add(i)) }.to_string_lossy().into_owned())
            .collect();
        let Some(translated) = translate_options(&given) else { return INVALID_OPTION };
        let Ok(owned) = translated.into_iter().map(CString::new).collect::<Result<Vec<_>, _>>() else {
            return INVALID_OPTION;
        };
        let ptrs: Vec<*const c_char> = owned.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: `prog` is live; `ptrs` holds NUL-terminated options that outlive the call.
        result(unsafe { rtc::nvrtcCompileProgram(prog, ptrs.len() as c_int, ptrs.as_ptr()) })
    })
}

/// Whether the program has a cubin (compiled for a real `sm_XY`), else PTX is returned.
fn cubin_size(prog: nvrtcProgram) -> Option<usize> {
    let mut size = 0;
    // SAFETY: `prog` is live; writes one size_t.
    let r = unsafe { rtc::nvrtcGetCUBINSize(prog, &mut size) };
    (r == rtc::nvrtcResult::NVRTC_SUCCESS && size > 0).then_some(size)
}

/// `hiprtcResult hiprtcGetCodeSize(hiprtcProgram, size_t*)`: the cubin's size (else the PTX's).
///
/// # Safety
/// `prog` must be live and compiled; `size` writable.
#[no_mangle]
pub unsafe extern "C" fn hiprtcGetCodeSize(prog: nvrtcProgram, size: *mut usize) -> RtcResult {
    guard(|| match cubin_size(prog) {
        Some(s) => {
            // SAFETY: the caller passes a writable size_t.
            unsafe { *size = s };
            SUCCESS
        }
        // SAFETY: as above.
        None => result(unsafe { rtc::nvrtcGetPTXSize(prog, size) }),
    })
}

/// `hiprtcResult hiprtcGetCode(hiprtcProgram, char*)`.
///
/// # Safety
/// `prog` must be live and compiled; `code` has `hiprtcGetCodeSize` bytes.
#[no_mangle]
pub unsafe extern "C" fn hiprtcGetCode(prog: nvrtcProgram, code: *mut c_char) -> RtcResult {
    guard(|| match cubin_size(prog) {
        // SAFETY: the caller sized `code` with hiprtcGetCodeSize.
        Some(_) => result(unsafe { rtc::nvrtcGetCUBIN(prog, code) }),
        // SAFETY: as above.
        None => result(unsafe { rtc::nvrtcGetPTX(prog, code) }),
    })
}

/// `hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram, size_t*)`.
///
/// # Safety
/// `prog` must be live; `size` writable.
#[no_mangle]
pub unsafe extern "C" fn hiprtcGetProgramLogSize(prog: nvrtcProgram, size: *mut usize) -> RtcResult {
    // SAFETY: as documented for the caller.
    guard(|| result(unsafe { rtc::nvrtcGetProgramLogSize(prog, size) }))
}

/// `hiprtcResult hiprtcGetProgramLog(hiprtcProgram, char*)`.
///
/// # Safety
/// `prog` must be live; `log` has `hiprtcGetProgramLogSize` bytes.
#[no_mangle]
pub unsafe extern "C" fn hiprtcGetProgramLog(prog: nvrtcProgram, log: *mut c_char) -> RtcResult {
    // SAFETY: as documented for the caller.
    guard(|| result(unsafe { rtc::nvrtcGetProgramLog(prog, log) }))
}

/// `hiprtcResult hiprtcDestroyProgram(hiprtcProgram*)`.
///
/// # Safety
/// `prog` must point to a live program, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn hiprtcDestroyProgram(prog: *mut nvrtcProgram) -> RtcResult {
    // SAFETY: as documented for the caller.
    guard(|| result(unsafe { rtc::nvrtcDestroyProgram(prog) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offload_arch_becomes_gpu_architecture_and_amd_flags_go() {
        let given: Vec<String> =
            ["--offload-arch=sm_90", "-O3", "-mcumode", "-DX=1", "-ffast-math"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            translate_options(&given).unwrap(),
            ["--gpu-architecture=sm_90", "-DX=1", "--use_fast_math", "--pre-include=hip_on_cuda_prelude.h"]
        );
        assert_eq!(translate_options(&["--offload-arch=gfx90a".to_string()]), None);
    }

    /// Compiles `source` for sm_90 through the shim; the status, the log and the code.
    fn compile(source: &str) -> (RtcResult, String, Vec<u8>) {
        let source = CString::new(source).unwrap();
        let mut prog = std::ptr::null_mut();
        // SAFETY: valid NUL-terminated strings, no headers.
        let r = unsafe {
            hiprtcCreateProgram(&mut prog, source.as_ptr(), c"test.hip".as_ptr(), 0, std::ptr::null(), std::ptr::null())
        };
        assert_eq!(r, SUCCESS);
        let opts = [c"--offload-arch=sm_90".as_ptr(), c"-DGPUPORT_WALL_CLOCK_KHZ=100000ull".as_ptr()];
        // SAFETY: `prog` is live; two options.
        let status = unsafe { hiprtcCompileProgram(prog, 2, opts.as_ptr()) };
        let mut size = 0;
        // SAFETY: `prog` is live.
        unsafe { hiprtcGetProgramLogSize(prog, &mut size) };
        let mut log = vec![0u8; size.max(1)];
        // SAFETY: `log` has the size NVRTC asked for.
        unsafe { hiprtcGetProgramLog(prog, log.as_mut_ptr() as *mut c_char) };
        let log = String::from_utf8_lossy(&log).trim_end_matches('\0').to_string();
        let mut code = Vec::new();
        if status == SUCCESS {
            let mut code_size = 0;
            // SAFETY: compiled.
            assert_eq!(unsafe { hiprtcGetCodeSize(prog, &mut code_size) }, SUCCESS);
            code = vec![0u8; code_size];
            // SAFETY: sized as asked.
            assert_eq!(unsafe { hiprtcGetCode(prog, code.as_mut_ptr() as *mut c_char) }, SUCCESS);
        }
        // SAFETY: destroyed once.
        assert_eq!(unsafe { hiprtcDestroyProgram(&mut prog) }, SUCCESS);
        (status, log, code)
    }

    fn nvrtc_missing() -> bool {
        // SAFETY: only tries to dlopen libnvrtc.
        let missing = !unsafe { rtc::is_culib_present() };
        if missing {
            println!("skipped: libnvrtc not found (LD_LIBRARY_PATH must reach libnvrtc.so.13)");
        }
        missing
    }

    /// The real NVRTC runs without a GPU, so these run wherever it can be loaded.
    #[test]
    fn the_hip_builtins_compile_under_nvrtc_with_the_prelude() {
        if nvrtc_missing() {
            return;
        }
        let (status, log, code) = compile(include_str!("../../../../kernels/hip/builtins.hip"));
        assert_eq!(status, SUCCESS, "log: {log}");
        assert!(code.starts_with(b"\x7fELF"), "expected a cubin");
    }

    #[test]
    fn hip_spellings_from_the_prelude_compile() {
        if nvrtc_missing() {
            return;
        }
        let source = r#"
            extern "C" __global__ void k(long long* out) {
                HIP_DYNAMIC_SHARED(int, scratch)
                scratch[hipThreadIdx_x] = hipBlockIdx_x * hipBlockDim_x;
                __syncthreads();
                out[hipThreadIdx_x] = wall_clock64() + scratch[0] + hipGridDim_x;
            }
        "#;
        let (status, log, _) = compile(source);
        assert_eq!(status, SUCCESS, "log: {log}");
    }

    #[test]
    fn compile_errors_come_back_with_the_log() {
        if nvrtc_missing() {
            return;
        }
        let (status, log, _) = compile("extern \"C\" __global__ void k() { undeclared_name = 1; }");
        assert_eq!(status, 6, "HIPRTC_ERROR_COMPILATION");
        assert!(log.contains("undeclared_name"), "log: {log}");
    }
}
