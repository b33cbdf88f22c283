//! The ROCm backend (feature `rocm`), on the HIP runtime and hiprtc.
//!
//! `libamdhip64` and hiprtc are opened at run time through a hand-declared
//! function table ([`sys`]; the module docs there say why no `*-sys` crate
//! is used), so a binary with this backend starts on machines without ROCm.
//! A library that cannot be found is [`Error::LibraryNotFound`] listing every
//! name and path tried; a library that loads but sees no GPU is
//! [`Error::NoDevice`] with the reason "ROCm loaded, no device".
//!
//! This file mirrors `cuda.rs` item for item, in the same order and with the
//! same names, so the two can be diffed. Where HIP differs:
//! - HIP's runtime API has no context objects to retain: `Context` only
//!   remembers the device and makes it current (`hipSetDevice`) per thread.
//! - HIP cannot list a module's kernels or a kernel's parameters; the
//!   built-in module's are known, so only they are checked.
//! - The architecture name (`gfx90a`) comes from `hipDeviceProp_t`, read
//!   through an oversized buffer (see `target_id`).
//! - The memory layer's calls (mapped pinned memory, the default pool, IPC,
//!   shareable pools) are optional symbols: a runtime without one fails only
//!   that operation, with [`Error::Unsupported`] naming the call.
//!   `hipIpcOpenMemHandle`'s flag follows the runtime's version
//!   ([`sys::ipc_open_flags`]); a pool's exported descriptor belongs to the pool.
//!
//! Bindings target the HIP C API of ROCm 5.2 through 7.x (see [`sys`]).
//! Nothing here has run on AMD hardware yet: it was run on Debian's ROCm 5.2
//! without a GPU (the no-device path, hiprtc) and on an NVIDIA GPU through
//! the HIP-on-CUDA test shim in `tests/support/hip_on_cuda`.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

pub mod sys;

use sys::{hipError_t, hiprtcResult, HipApi, Loaded, RtcApi};

use super::{
    check_alloc_size, check_kernel_args, check_range, check_same_device, Backend, Device, DeviceInfo, DeviceLimits,
    DeviceMemory, DeviceMemoryMut, HostMemory, KernelArgs, LaunchConfig, MemoryInfo, MemoryKind, ModuleSource,
};
use crate::error::{BackendKind, DriverError, Error, Result};

/// The runtime's built-in kernels, compiled by hiprtc at first use.
const BUILTINS_SOURCE: &str = include_str!("../../../kernels/hip/builtins.hip");
/// The array kernels' dialect file; each kernel is compiled alone from it.
const ARRAY_OPS_SOURCE: &str = include_str!("../../../kernels/hip/array_ops.hip");
/// Headers the array kernels include, served to hiprtc from memory.
const BUILTIN_HEADERS: &[(&str, &str)] = &[
    ("array_indexer.h", include_str!("../../../kernels/common/array_indexer.h")),
    ("array_ops.h", include_str!("../../../kernels/common/array_ops.h")),
];

/// The ROCm (HIP) backend.
#[derive(Debug, Clone, Copy)]
pub struct Hip;

impl Backend for Hip {
    const KIND: BackendKind = BackendKind::Rocm;
    type Device = HipDevice;
    type Stream = HipStream;
    type Event = HipEvent;
    type Buffer = HipBuffer;
    type PinnedBuffer = HipPinnedBuffer;
    type HostRegistration = HipHostRegistration;
    type Module = HipModule;
    type Kernel = HipKernel;
}

// ---- errors and library loading --------------------------------------------------

/// The loaded HIP runtime, initialized once per process.
pub(crate) struct Runtime {
    loaded: Loaded<HipApi>,
    /// `hipRuntimeGetVersion`, e.g. 50221153 for 5.2.21153.
    version: c_int,
    /// What `hipInit(0)` returned (kept for the no-device message).
    init: hipError_t,
}

impl Runtime {
    fn api(&self) -> &HipApi {
        &self.loaded.api
    }

    /// The status's name from `hipGetErrorName`, e.g. `hipErrorNoDevice`.
    fn error_name(&self, code: hipError_t) -> String {
        // SAFETY: hipGetErrorName returns a static NUL-terminated string (or null) for any status.
        c_str_or(unsafe { (self.api().hipGetErrorName)(code) }, || format!("hipError({code})"))
    }

    /// The status's description from `hipGetErrorString`.
    fn error_string(&self, code: hipError_t) -> String {
        // SAFETY: as in `error_name`.
        c_str_or(unsafe { (self.api().hipGetErrorString)(code) }, String::new)
    }
}

static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// Copies a C string owned by the library, or `fallback()` for null.
fn c_str_or(ptr: *const c_char, fallback: impl FnOnce() -> String) -> String {
    if ptr.is_null() {
        fallback()
    } else {
        // SAFETY: non-null, NUL-terminated and static per the HIP/hiprtc headers.
        unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
    }
}

/// Converts a HIP status into our error, naming the call.
fn driver_error(call: &'static str, code: hipError_t) -> Error {
    let (name, message) = match RUNTIME.get() {
        Some(Ok(rt)) => (rt.error_name(code), rt.error_string(code)),
        _ => (format!("hipError({code})"), String::new()),
    };
    Error::Driver(DriverError { backend: BackendKind::Rocm, call, code: code as i64, name, message })
}

/// Attaches the call name to a HIP status.
fn check(call: &'static str, code: hipError_t) -> Result<()> {
    if code == sys::hipSuccess {
        Ok(())
    } else {
        Err(driver_error(call, code))
    }
}

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
        code: code as i64,
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

/// The HIP runtime search list: `GPUPORT_HIP_LIBRARY` alone, else [`sys::candidates`].
fn hip_candidates() -> Vec<String> {
    match std::env::var(sys::HIP_LIBRARY_ENV) {
        Ok(path) if !path.is_empty() => vec![path],
        _ => sys::candidates(&sys::HIP_NAMES),
    }
}

/// Loads the HIP runtime and calls `hipInit(0)` once; the outcome (and why it
/// failed) is cached.
///
/// `hipInit` is called right after loading because a dlopen'ed runtime gets
/// no implicit initialization: ROCm 7.2.3 fails the first `hipModuleLoad`
/// with hipErrorSharedObjectInitFailed otherwise (warpfront/hipfire#288).
/// Its failure is not final: ROCm 5.2 without a GPU returns
/// hipErrorInvalidDevice here, and [`HipDevice::count`] reports that case.
pub(crate) fn driver() -> Result<&'static Runtime> {
    let state = RUNTIME.get_or_init(|| {
        // SAFETY: loads only HIP runtime candidates; symbols are resolved with the header signatures.
        let loaded = unsafe { sys::open_first(&hip_candidates(), HipApi::resolve) }?;
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

static HIPRTC: OnceLock<std::result::Result<Loaded<RtcApi>, String>> = OnceLock::new();

/// Loads hiprtc before compiling kernel source.
///
/// Search: `GPUPORT_HIPRTC_LIBRARY` alone if set; else, when
/// `GPUPORT_HIP_LIBRARY` forces a runtime, that library first (so a stand-in
/// runtime is not paired with a system hiprtc); then the `libhiprtc` names;
/// then the HIP runtime itself, which holds hiprtc in ROCm 5.2.
fn hiprtc() -> Result<&'static Loaded<RtcApi>> {
    let state = HIPRTC.get_or_init(|| {
        let candidates = match std::env::var(sys::HIPRTC_LIBRARY_ENV) {
            Ok(path) if !path.is_empty() => vec![path],
            _ => {
                let forced = std::env::var(sys::HIP_LIBRARY_ENV).ok().filter(|p| !p.is_empty());
                let mut c: Vec<String> = forced.into_iter().collect();
                c.extend(sys::candidates(&sys::HIPRTC_NAMES));
                c.extend(hip_candidates().into_iter().filter(|p| !c.contains(p)).collect::<Vec<_>>());
                c
            }
        };
        // SAFETY: loads only hiprtc (or HIP runtime) candidates, resolved with the header signatures.
        unsafe { sys::open_first(&candidates, RtcApi::resolve) }
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
/// hiprtc compiles for the current device. [`Device::load_module`] with
/// [`ModuleSource::Source`] calls this with the device's target added.
/// A rejected program is [`Error::Compile`] carrying hiprtc's log.
pub fn compile_source(code: &str, name: &str, options: &[&str]) -> Result<Vec<u8>> {
    compile_with_headers(code, name, options, &[])
}

/// [`compile_source`] with `(include name, contents)` headers the source may `#include`.
pub(crate) fn compile_with_headers(
    code: &str,
    name: &str,
    options: &[&str],
    headers: &[(&str, &str)],
) -> Result<Vec<u8>> {
    let rtc = hiprtc()?;
    let api = &rtc.api;
    let src = CString::new(code)
        .map_err(|_| Error::InvalidArgument { name: "code", reason: "kernel source contains a NUL byte".into() })?;
    let cname = CString::new(name)
        .map_err(|_| Error::InvalidArgument { name: "name", reason: "program name contains a NUL byte".into() })?;
    let opts = options.iter().map(|o| CString::new(*o)).collect::<std::result::Result<Vec<_>, _>>().map_err(|_| {
        Error::InvalidArgument { name: "options", reason: "a compiler option contains a NUL byte".into() }
    })?;
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let cstrings = |items: Vec<&str>| {
        items
            .into_iter()
            .map(CString::new)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::InvalidArgument { name: "headers", reason: "a header contains a NUL byte".into() })
    };
    let texts = cstrings(headers.iter().map(|(_, t)| *t).collect())?;
    let names = cstrings(headers.iter().map(|(n, _)| *n).collect())?;
    let text_ptrs: Vec<*const c_char> = texts.iter().map(|c| c.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
    let mut prog: sys::hiprtcProgram = std::ptr::null_mut();
    // SAFETY: every string is NUL-terminated and outlives the program; the
    // header arrays hold `headers.len()` entries each.
    let r = unsafe {
        (api.hiprtcCreateProgram)(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            headers.len() as c_int,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    };
    if r != sys::HIPRTC_SUCCESS {
        return Err(hiprtc_error("hiprtcCreateProgram", r));
    }
    let result = (|| {
        let n = c_int::try_from(opt_ptrs.len())
            .map_err(|_| Error::InvalidArgument { name: "options", reason: "too many compiler options".into() })?;
        // SAFETY: `prog` is live; `opt_ptrs` holds `n` NUL-terminated strings that outlive the call.
        let compiled = unsafe { (api.hiprtcCompileProgram)(prog, n, opt_ptrs.as_ptr()) };
        if compiled != sys::HIPRTC_SUCCESS {
            let log = program_log(api, prog);
            if compiled == sys::HIPRTC_ERROR_COMPILATION {
                return Err(Error::Compile { backend: BackendKind::Rocm, name: name.to_string(), log });
            }
            let mut e = hiprtc_error("hiprtcCompileProgram", compiled);
            if let Error::Driver(d) = &mut e {
                if !log.is_empty() {
                    d.message = format!("{}\n{log}", d.message);
                }
            }
            return Err(e);
        }
        let mut size = 0usize;
        // SAFETY: `prog` compiled successfully; writes one size_t.
        let r = unsafe { (api.hiprtcGetCodeSize)(prog, &mut size) };
        if r != sys::HIPRTC_SUCCESS {
            return Err(hiprtc_error("hiprtcGetCodeSize", r));
        }
        let mut code = vec![0u8; size];
        // SAFETY: `code` has the `size` bytes hiprtc asked for.
        let r = unsafe { (api.hiprtcGetCode)(prog, code.as_mut_ptr() as *mut c_char) };
        if r != sys::HIPRTC_SUCCESS {
            return Err(hiprtc_error("hiprtcGetCode", r));
        }
        Ok(code)
    })();
    // SAFETY: destroyed once, after its last use.
    let _ = unsafe { (api.hiprtcDestroyProgram)(&mut prog) };
    result
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
    if unsafe { (api.hiprtcGetProgramLog)(prog, log.as_mut_ptr() as *mut c_char) } != sys::HIPRTC_SUCCESS {
        return String::new();
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end]).trim_end().to_string()
}

// ---- context ---------------------------------------------------------------------

/// A device's slot in the runtime. HIP's runtime API has no context to
/// retain; the current device is per thread, so `bind` selects it.
struct Context {
    rt: &'static Runtime,
    hip_device: sys::hipDevice_t,
    ordinal: usize,
}

impl Context {
    /// Makes this device current on the calling thread (cheap when it already is).
    fn bind(&self) -> Result<()> {
        let mut current: c_int = -1;
        // SAFETY: writes one int.
        check("hipGetDevice", unsafe { (self.rt.api().hipGetDevice)(&mut current) })?;
        if current != self.ordinal as c_int {
            // SAFETY: `ordinal` was validated against hipGetDeviceCount when the device opened.
            check("hipSetDevice", unsafe { (self.rt.api().hipSetDevice)(self.ordinal as c_int) })?;
        }
        Ok(())
    }

    fn api(&self) -> &'static HipApi {
        &self.rt.loaded.api
    }
}

/// A device address as HIP's `hipDeviceptr_t`.
fn dptr(addr: u64) -> sys::hipDeviceptr_t {
    addr as usize as sys::hipDeviceptr_t
}

// ---- memory ------------------------------------------------------------------------

/// Device or managed memory; freed on drop (in stream order if allocated so).
pub struct HipBuffer {
    ptr: u64,
    len: usize,
    kind: MemoryKind,
    /// The stream of a stream-ordered allocation, kept alive to free on it.
    free_on: Option<HipStream>,
    ctx: Arc<Context>,
}

impl fmt::Debug for HipBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HipBuffer(rocm:{}, {:#x}, {} bytes, {:?})", self.ctx.ordinal, self.ptr, self.len, self.kind)
    }
}

// SAFETY: `ptr..ptr+len` is the allocation this buffer made and frees on
// drop; the context it belongs to outlives it (held by `ctx`).
unsafe impl DeviceMemory for HipBuffer {
    type B = Hip;
    fn len(&self) -> usize {
        self.len
    }
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn ordinal(&self) -> usize {
        self.ctx.ordinal
    }
    fn kind(&self) -> MemoryKind {
        self.kind
    }
}

// SAFETY: a HipBuffer is not `Clone` and hands out no second handle on its memory.
unsafe impl DeviceMemoryMut for HipBuffer {}

impl Drop for HipBuffer {
    fn drop(&mut self) {
        // Errors cannot be returned from drop; a failed free leaves the
        // memory to the runtime's teardown.
        if self.ctx.bind().is_err() {
            return;
        }
        let api = self.ctx.api();
        // SAFETY: `ptr` was allocated on this device and is freed once, here;
        // a stream-ordered allocation is freed on its own stream (the
        // allocation path only uses it when `hipFreeAsync` resolved).
        let _ = unsafe {
            match (&self.free_on, api.hipFreeAsync) {
                (Some(stream), Some(free_async)) => free_async(dptr(self.ptr), stream.inner.raw),
                _ => (api.hipFree)(dptr(self.ptr)),
            }
        };
    }
}

/// Page-locked host memory from `hipHostMalloc`.
pub struct HipPinnedBuffer {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<Context>,
}

// SAFETY: plain host bytes owned by this value.
unsafe impl Send for HipPinnedBuffer {}
// SAFETY: `&self` only gives shared access to the bytes.
unsafe impl Sync for HipPinnedBuffer {}

impl fmt::Debug for HipPinnedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HipPinnedBuffer({:p}, {} bytes)", self.ptr, self.len)
    }
}

impl HostMemory for HipPinnedBuffer {
    fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes from `hipHostMalloc`, zeroed at allocation, alive while self is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for HipPinnedBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: allocated by `hipHostMalloc`, freed once.
            let _ = unsafe { (self.ctx.api().hipHostFree)(self.ptr as *mut c_void) };
        }
    }
}

/// Host memory registered with `hipHostRegister`; unregistered on drop.
pub struct HipHostRegistration {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<Context>,
}

// SAFETY: holds only an address for unregistering; no access to the bytes.
unsafe impl Send for HipHostRegistration {}
// SAFETY: as above.
unsafe impl Sync for HipHostRegistration {}

impl fmt::Debug for HipHostRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HipHostRegistration({:p}, {} bytes)", self.ptr, self.len)
    }
}

impl Drop for HipHostRegistration {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: registered by `register_host`, unregistered once.
            let _ = unsafe { (self.ctx.api().hipHostUnregister)(self.ptr as *mut c_void) };
        }
    }
}

// ---- streams and events -----------------------------------------------------------

struct StreamInner {
    raw: sys::hipStream_t,
    /// Tells streams apart for the memory pool (see [`Device::stream_id`]).
    id: u64,
    /// False for the null stream, which is never destroyed.
    owned: bool,
    ctx: Arc<Context>,
}

// SAFETY: HIP streams may be used from any thread.
unsafe impl Send for StreamInner {}
// SAFETY: as above.
unsafe impl Sync for StreamInner {}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.owned && self.ctx.bind().is_ok() {
            // SAFETY: created by `hipStreamCreateWithFlags` on this device, destroyed once.
            // Pending work still completes (hipStreamDestroy semantics).
            let _ = unsafe { (self.ctx.api().hipStreamDestroy)(self.raw) };
        }
    }
}

/// A HIP stream.
#[derive(Clone)]
pub struct HipStream {
    inner: Arc<StreamInner>,
}

impl fmt::Debug for HipStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HipStream(rocm:{}, {:p})", self.inner.ctx.ordinal, self.inner.raw)
    }
}

impl HipStream {
    /// The raw `hipStream_t`, for interop with other HIP libraries.
    pub fn as_raw(&self) -> sys::hipStream_t {
        self.inner.raw
    }
}

/// A HIP event.
pub struct HipEvent {
    raw: sys::hipEvent_t,
    ctx: Arc<Context>,
}

// SAFETY: HIP events may be used from any thread.
unsafe impl Send for HipEvent {}
// SAFETY: as above.
unsafe impl Sync for HipEvent {}

impl fmt::Debug for HipEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HipEvent(rocm:{}, {:p})", self.ctx.ordinal, self.raw)
    }
}

impl Drop for HipEvent {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created by `hipEventCreateWithFlags` on this device, destroyed once.
            let _ = unsafe { (self.ctx.api().hipEventDestroy)(self.raw) };
        }
    }
}

// ---- modules and kernels -----------------------------------------------------------

struct ModuleInner {
    raw: sys::hipModule_t,
    /// Whether this is the built-in module (whose kernels gpuport knows).
    builtin: bool,
    ctx: Arc<Context>,
}

// SAFETY: HIP modules may be used from any thread.
unsafe impl Send for ModuleInner {}
// SAFETY: as above.
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: loaded on this device, unloaded once after the last kernel handle is gone.
            let _ = unsafe { (self.ctx.api().hipModuleUnload)(self.raw) };
        }
    }
}

/// A loaded HIP module.
#[derive(Clone)]
pub struct HipModule {
    inner: Arc<ModuleInner>,
}

impl fmt::Debug for HipModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HipModule(rocm:{}, {:p})", self.inner.ctx.ordinal, self.inner.raw)
    }
}

/// A kernel; keeps its module loaded.
#[derive(Clone)]
pub struct HipKernel {
    func: sys::hipFunction_t,
    name: Arc<str>,
    /// Parameter sizes where gpuport knows them (the built-ins), else `None`.
    params: Option<Arc<[usize]>>,
    module: HipModule,
}

// SAFETY: hipFunction_t handles may be used from any thread while the module lives.
unsafe impl Send for HipKernel {}
// SAFETY: as above.
unsafe impl Sync for HipKernel {}

impl fmt::Debug for HipKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HipKernel({}, params {:?})", self.name, self.params)
    }
}

// ---- device ---------------------------------------------------------------------------

/// An AMD GPU (`"rocm:N"`).
pub struct HipDevice {
    info: DeviceInfo,
    /// The full target id, e.g. `gfx90a:sramecc+:xnack-`, passed to hiprtc.
    target_id: Option<String>,
    /// `hipDeviceAttributeWallClockRate` in kHz, where the runtime reports it.
    wall_clock_khz: Option<u32>,
    ctx: Arc<Context>,
    default_stream: HipStream,
    builtins: Mutex<Option<HipModule>>,
    /// Array kernels compiled so far, by name.
    array_kernels: Mutex<HashMap<String, HipKernel>>,
}

impl fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HipDevice(rocm:{}, {})", self.info.ordinal, self.info.name)
    }
}

/// One `HipDevice` per ordinal per process.
fn open_devices() -> &'static Mutex<HashMap<usize, Arc<HipDevice>>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<HipDevice>>>> = OnceLock::new();
    DEVICES.get_or_init(Default::default)
}

fn attribute(rt: &Runtime, ordinal: c_int, attr: sys::hipDeviceAttribute_t) -> Result<i32> {
    let mut value = 0;
    // SAFETY: `ordinal` is a valid device; the call writes one int.
    check("hipDeviceGetAttribute", unsafe { (rt.api().hipDeviceGetAttribute)(&mut value, attr, ordinal) })?;
    Ok(value)
}

/// The device's target id (`gfx90a:sramecc+:xnack-`) from `hipDeviceProp_t.gcnArchName`.
///
/// The struct's layout depends on the ROCm version, so it is never declared
/// here: the runtime fills a zeroed buffer much larger than any layout
/// ([`sys::DEVICE_PROP_BUFFER_BYTES`]), and the name is read at the field's
/// offset in the layout of the symbol that was called. A name that does not
/// look like a target (`gfx…`, or `sm_…` from the test shim) falls back to
/// a scan of the buffer for a field starting with `gfx`. `None` if neither
/// works; hiprtc then compiles for the current device.
fn target_id(rt: &Runtime, ordinal: c_int) -> Option<String> {
    let api = rt.api();
    let (get, offset) = match (api.hipGetDevicePropertiesR0600, api.hipGetDeviceProperties) {
        (Some(f), _) => (f, sys::GCN_ARCH_NAME_OFFSET_R0600),
        (None, Some(f)) => (f, sys::GCN_ARCH_NAME_OFFSET_R0000),
        (None, None) => return None,
    };
    let mut buf = vec![0u64; sys::DEVICE_PROP_BUFFER_BYTES / 8];
    // SAFETY: the buffer is zeroed, 8-byte aligned and more than five times
    // the size of either layout, so the runtime's write stays inside it.
    if unsafe { get(buf.as_mut_ptr() as *mut c_void, ordinal) } != sys::hipSuccess {
        return None;
    }
    // SAFETY: `buf` is `DEVICE_PROP_BUFFER_BYTES` initialized bytes.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, sys::DEVICE_PROP_BUFFER_BYTES) };
    parse_target_id(bytes, offset)
}

/// Reads a target id at `offset` in a `hipDeviceProp_t` image, or scans for one.
fn parse_target_id(bytes: &[u8], offset: usize) -> Option<String> {
    let field = |at: usize| -> Option<&str> {
        let f = bytes.get(at..at.checked_add(sys::GCN_ARCH_NAME_LEN)?)?;
        let end = f.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&f[..end]).ok()
    };
    let plausible = |s: &str| {
        (s.starts_with("gfx") || s.starts_with("sm_")) && s.len() > 3 && s.bytes().all(|b| b.is_ascii_graphic())
    };
    if let Some(s) = field(offset).filter(|s| plausible(s)) {
        return Some(s.to_string());
    }
    (0..bytes.len())
        .filter(|&i| (i == 0 || bytes[i - 1] == 0) && bytes[i..].starts_with(b"gfx"))
        .find_map(|i| field(i).filter(|s| plausible(s)).map(str::to_string))
}

fn query_info(rt: &Runtime, dev: sys::hipDevice_t, ordinal: usize, target: Option<&str>) -> Result<DeviceInfo> {
    use sys::attr::*;
    let id = ordinal as c_int;
    let a = |attr| attribute(rt, id, attr).map(|v| v.max(0) as u32);
    let mut name = [0 as c_char; 256];
    // SAFETY: `name` has room for 256 chars including the NUL; `dev` came from `hipDeviceGet`.
    check("hipDeviceGetName", unsafe { (rt.api().hipDeviceGetName)(name.as_mut_ptr(), 256, dev) })?;
    let mut total_memory = 0usize;
    // SAFETY: writes one size_t.
    check("hipDeviceTotalMem", unsafe { (rt.api().hipDeviceTotalMem)(&mut total_memory, dev) })?;
    // Opt-in shared memory is the launch limit where reported; older runtimes
    // report 0 or fail, and then the plain per-block maximum is the limit.
    let shared = match a(SHARED_MEM_PER_BLOCK_OPTIN) {
        Ok(v) if v > 0 => v,
        _ => a(MAX_SHARED_MEMORY_PER_BLOCK)?,
    };
    Ok(DeviceInfo {
        backend: BackendKind::Rocm,
        ordinal,
        // SAFETY: hipDeviceGetName wrote a NUL-terminated string into `name` (zeroed past it).
        name: unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned(),
        arch: match target {
            Some(t) => t.split(':').next().unwrap_or(t).to_string(),
            None => format!(
                "unknown (compute capability {}.{})",
                a(COMPUTE_CAPABILITY_MAJOR)?,
                a(COMPUTE_CAPABILITY_MINOR)?
            ),
        },
        multiprocessors: a(MULTIPROCESSOR_COUNT)?,
        total_memory,
        managed_memory: a(MANAGED_MEMORY)? != 0,
        stream_ordered_alloc: a(MEMORY_POOLS_SUPPORTED).unwrap_or(0) != 0
            && rt.api().hipMallocAsync.is_some()
            && rt.api().hipFreeAsync.is_some(),
        limits: DeviceLimits {
            max_threads_per_block: a(MAX_THREADS_PER_BLOCK)?,
            max_block_dim: [a(MAX_BLOCK_DIM_X)?, a(MAX_BLOCK_DIM_Y)?, a(MAX_BLOCK_DIM_Z)?],
            max_grid_dim: [a(MAX_GRID_DIM_X)?, a(MAX_GRID_DIM_Y)?, a(MAX_GRID_DIM_Z)?],
            max_shared_memory_per_block: shared as usize,
            warp_size: a(WARP_SIZE)?,
        },
    })
}

impl HipDevice {
    fn check_stream(&self, stream: &HipStream) -> Result<()> {
        check_same_device("stream", BackendKind::Rocm, self.info.ordinal, stream.inner.ctx.ordinal)
    }

    fn check_buffer<M: DeviceMemory + ?Sized>(&self, what: &'static str, buffer: &M) -> Result<()> {
        check_same_device(what, BackendKind::Rocm, self.info.ordinal, buffer.ordinal())
    }

    fn out_of_memory(&self, call: &'static str, bytes: usize, code: hipError_t) -> Error {
        if code == sys::hipErrorOutOfMemory {
            Error::OutOfMemory { backend: BackendKind::Rocm, ordinal: self.info.ordinal, bytes }
        } else {
            driver_error(call, code)
        }
    }

    fn buffer(&self, ptr: u64, len: usize, kind: MemoryKind, free_on: Option<HipStream>) -> HipBuffer {
        HipBuffer { ptr, len, kind, free_on, ctx: self.ctx.clone() }
    }

    fn api(&self) -> &'static HipApi {
        self.ctx.api()
    }

    /// Compiles HIP C++ to a code object for this device with hiprtc.
    fn compile(&self, code: &str, name: &str, options: &[&str], headers: &[(&str, &str)]) -> Result<Vec<u8>> {
        let mut opts: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        if let Some(target) = &self.target_id {
            if !opts.iter().any(|o| o.starts_with("--offload-arch") || o.starts_with("--gpu-architecture")) {
                opts.push(format!("--offload-arch={target}"));
            }
        }
        // hiprtc compiles for the current device when no target is given.
        self.ctx.bind()?;
        let refs: Vec<&str> = opts.iter().map(String::as_str).collect();
        compile_with_headers(code, name, &refs, headers)
    }

    fn load_image(&self, image: *const c_void, builtin: bool) -> Result<HipModule> {
        self.ctx.bind()?;
        let mut raw: sys::hipModule_t = std::ptr::null_mut();
        // SAFETY: callers pass a code object, offload bundle or cubin (shim)
        // that stays alive for the duration of the call.
        check("hipModuleLoadData", unsafe { (self.api().hipModuleLoadData)(&mut raw, image) })?;
        Ok(HipModule { inner: Arc::new(ModuleInner { raw, builtin, ctx: self.ctx.clone() }) })
    }

    /// Names of the kernels in a module, for error messages: HIP cannot list
    /// them, so only the built-in module's are known.
    fn kernel_names(&self, module: &HipModule) -> String {
        if module.inner.builtin {
            crate::kernels::all_kernel_names().join(", ")
        } else {
            "(HIP cannot list a module's kernels)".into()
        }
    }

    /// Parameter sizes of a kernel, known for the built-ins only.
    fn param_sizes(&self, module: &HipModule, name: &str) -> Option<Arc<[usize]>> {
        if !module.inner.builtin {
            return None;
        }
        crate::backend::host::builtin_params(name).map(Into::into)
    }
}

// ---- memory-resource support (used by `crate::memory`) ----------------------------

/// Raw bytes of a `hipIpcMemHandle_t` or a `hipMemPoolPtrExportData`.
pub(crate) type IpcBytes = crate::memory::ext::IpcBytes;
use crate::memory::ext::{ExportedPoolFd, RawPool};

/// The optional HIP function `$f` (see [`sys::HipApi`]), or
/// [`Error::Unsupported`] for `$op` naming the library that lacks it.
macro_rules! optional_fn {
    ($dev:expr, $f:ident, $op:expr) => {
        $dev.api().$f.ok_or_else(|| $dev.missing_function(stringify!($f), $op))
    };
}

impl HipDevice {
    /// The error for an optional HIP function the loaded runtime does not export.
    fn missing_function(&self, call: &'static str, op: &'static str) -> Error {
        let rt = self.ctx.rt;
        Error::Unsupported {
            op,
            backend: BackendKind::Rocm,
            hint: Some(format!("{} (HIP {}) does not export {call}", rt.loaded.path, sys::version_string(rt.version))),
        }
    }

    /// `hipHostMalloc` with explicit `hipHostMalloc*` flags; zero-filled.
    pub(crate) fn alloc_pinned_flags(&self, bytes: usize, flags: c_uint) -> Result<HipPinnedBuffer> {
        check_alloc_size(bytes)?;
        self.ctx.bind()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the device is current; the flags are the runtime's own bits.
        let r = unsafe { (self.api().hipHostMalloc)(&mut ptr, bytes, flags) };
        if r != sys::hipSuccess {
            return Err(self.out_of_memory("hipHostMalloc", bytes, r));
        }
        let ptr = ptr as *mut u8;
        // SAFETY: `ptr` addresses `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(HipPinnedBuffer { ptr, len: bytes, ctx: self.ctx.clone() })
    }

    /// The device address of mapped pinned memory (`hipHostGetDevicePointer`).
    pub(crate) fn mapped_device_ptr(&self, host: *mut u8) -> Result<u64> {
        let get = optional_fn!(self, hipHostGetDevicePointer, "mapped pinned memory")?;
        self.ctx.bind()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes one device pointer; an unmapped address is reported as an error.
        check("hipHostGetDevicePointer", unsafe { get(&mut ptr, host as *mut c_void, 0) })?;
        Ok(ptr as u64)
    }

    /// `hipHostRegister` with explicit `hipHostRegister*` flags.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid host memory that outlives the registration.
    pub(crate) unsafe fn register_host_flags(
        &self,
        ptr: *mut u8,
        len: usize,
        flags: c_uint,
    ) -> Result<HipHostRegistration> {
        if ptr.is_null() {
            return Err(Error::InvalidArgument { name: "ptr", reason: "null pointer".into() });
        }
        check_alloc_size(len)?;
        self.ctx.bind()?;
        // SAFETY: the caller guarantees the range is valid and outlives the registration.
        check("hipHostRegister", unsafe { (self.api().hipHostRegister)(ptr as *mut c_void, len, flags) })?;
        Ok(HipHostRegistration { ptr, len, ctx: self.ctx.clone() })
    }

    /// The device's default memory pool (the one `hipMallocAsync` uses).
    fn default_mem_pool(&self) -> Result<sys::hipMemPool_t> {
        if !self.info.stream_ordered_alloc {
            return Err(Error::Unsupported {
                op: "stream-ordered memory pools",
                backend: BackendKind::Rocm,
                hint: Some(format!("{} does not support hipMallocAsync (or the runtime lacks it)", self.info.name)),
            });
        }
        let get = optional_fn!(self, hipDeviceGetDefaultMemPool, "stream-ordered memory pools")?;
        self.ctx.bind()?;
        let mut pool = std::ptr::null_mut();
        // SAFETY: writes one pool handle for this device's ordinal.
        check("hipDeviceGetDefaultMemPool", unsafe { get(&mut pool, self.info.ordinal as c_int) })?;
        Ok(pool)
    }

    /// Sets `hipMemPoolAttrReleaseThreshold` of the default pool: memory
    /// above it goes back to the driver at the next synchronization.
    pub(crate) fn set_pool_release_threshold(&self, bytes: u64) -> Result<()> {
        let pool = self.default_mem_pool()?;
        // SAFETY: the default pool lives as long as the device.
        unsafe { self.set_release_threshold(pool, bytes) }
    }

    /// Sets `hipMemPoolAttrReleaseThreshold` of `pool`.
    ///
    /// # Safety
    /// `pool` is a live pool of this device.
    unsafe fn set_release_threshold(&self, pool: sys::hipMemPool_t, bytes: u64) -> Result<()> {
        let set = optional_fn!(self, hipMemPoolSetAttribute, "stream-ordered memory pools")?;
        let mut value = bytes;
        // SAFETY: the attribute takes a uint64_t, which `value` is; the pool is live (the caller's contract).
        check("hipMemPoolSetAttribute", unsafe {
            set(pool, sys::hipMemPoolAttrReleaseThreshold, &mut value as *mut u64 as *mut c_void)
        })
    }

    /// Bytes the default pool holds from the driver now (`hipMemPoolAttrReservedMemCurrent`).
    pub(crate) fn pool_reserved(&self) -> Result<u64> {
        let pool = self.default_mem_pool()?;
        let get = optional_fn!(self, hipMemPoolGetAttribute, "stream-ordered memory pools")?;
        let mut value = 0u64;
        // SAFETY: the attribute is a uint64_t, written into `value`.
        check("hipMemPoolGetAttribute", unsafe {
            get(pool, sys::hipMemPoolAttrReservedMemCurrent, &mut value as *mut u64 as *mut c_void)
        })?;
        Ok(value)
    }

    /// Releases the default pool's unused memory down to `keep` bytes.
    pub(crate) fn trim_pool(&self, keep: usize) -> Result<()> {
        let pool = self.default_mem_pool()?;
        // SAFETY: the default pool lives as long as the device.
        unsafe { self.trim_to(pool, keep) }
    }

    /// `hipMemPoolTrimTo`: releases `pool`'s unused memory down to `keep` bytes.
    ///
    /// # Safety
    /// `pool` is a live pool of this device.
    unsafe fn trim_to(&self, pool: sys::hipMemPool_t, keep: usize) -> Result<()> {
        let trim = optional_fn!(self, hipMemPoolTrimTo, "stream-ordered memory pools")?;
        // SAFETY: a live pool (the caller's contract); trimming never frees memory in use.
        check("hipMemPoolTrimTo", unsafe { trim(pool, keep) })
    }

    /// `hipIpcGetMemHandle` for the allocation containing `ptr`, and that allocation's base.
    pub(crate) fn ipc_get_handle(&self, ptr: u64) -> Result<(IpcBytes, u64)> {
        let range = optional_fn!(self, hipMemGetAddressRange, "IPC memory handles")?;
        let get = optional_fn!(self, hipIpcGetMemHandle, "IPC memory handles")?;
        self.ctx.bind()?;
        let (mut base, mut size) = (std::ptr::null_mut(), 0usize);
        // SAFETY: writes the base and size of the allocation containing `ptr`.
        check("hipMemGetAddressRange", unsafe { range(&mut base, &mut size, dptr(ptr)) })?;
        let mut handle = sys::hipIpcMemHandle_t { reserved: [0; sys::HIP_IPC_HANDLE_SIZE] };
        // SAFETY: writes one 64-byte handle; the base is exported, so the handle carries no offset.
        check("hipIpcGetMemHandle", unsafe { get(&mut handle, base) })?;
        Ok((handle.reserved.map(|b| b as u8), base as u64))
    }

    /// `hipIpcOpenMemHandle`: maps another process's allocation; returns its base here.
    ///
    /// The flag is `hipIpcMemLazyEnablePeerAccess` as the loaded runtime's
    /// version defines it (0 before ROCm 6.0, 1 since; see [`sys::ipc_open_flags`]).
    pub(crate) fn ipc_open(&self, bytes: &IpcBytes) -> Result<u64> {
        let open = optional_fn!(self, hipIpcOpenMemHandle, "IPC memory handles")?;
        self.ctx.bind()?;
        let handle = sys::hipIpcMemHandle_t { reserved: bytes.map(|b| b as c_char) };
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes one device pointer; a stale or foreign handle is reported as an error.
        check("hipIpcOpenMemHandle", unsafe { open(&mut ptr, handle, sys::ipc_open_flags(self.ctx.rt.version)) })?;
        Ok(ptr as u64)
    }

    /// `hipIpcCloseMemHandle` on a base returned by [`ipc_open`](Self::ipc_open).
    ///
    /// # Safety
    /// `base` came from `ipc_open` on this device and is closed once, after its last use.
    pub(crate) unsafe fn ipc_close(&self, base: u64) -> Result<()> {
        let close = optional_fn!(self, hipIpcCloseMemHandle, "IPC memory handles")?;
        self.ctx.bind()?;
        // SAFETY: the caller's contract.
        check("hipIpcCloseMemHandle", unsafe { close(dptr(base)) })
    }

    // ---- pools of our own that other processes can import ----------------------------
    //
    // `cuda.rs`'s calls on HIP's twins (the `MemoryDevice` contracts apply).
    // Where HIP differs: ROCm makes one descriptor per pool and returns it on
    // every export (the pool owns and closes it; `hip_mempool_impl.cpp`,
    // `MemoryPool::Export`), and an early ROCm has the IPC calls as stubs
    // that succeed without writing anything, so what they write is checked.

    /// The error for a pool IPC call that reported success and wrote nothing.
    fn stub_call(&self, call: &'static str) -> Error {
        let rt = self.ctx.rt;
        Error::Unsupported {
            op: "IPC of stream-ordered pool memory",
            backend: BackendKind::Rocm,
            hint: Some(format!(
                "{call} of {} (HIP {}) returned hipSuccess but wrote nothing (a stub); share memory of \
                 CachingPool or PlainResource instead, which use hipIpcGetMemHandle",
                rt.loaded.path,
                sys::version_string(rt.version)
            )),
        }
    }

    /// `hipMemPoolCreate`: pinned memory of this device, exportable as a POSIX
    /// file descriptor (`hipMemHandleTypePosixFileDescriptor`).
    pub(crate) fn create_shareable_pool(&self) -> Result<RawPool> {
        self.default_mem_pool()?; // the same "no stream-ordered pools" error
        let create = optional_fn!(self, hipMemPoolCreate, "a shareable stream-ordered pool")?;
        let props = sys::hipMemPoolProps {
            allocType: sys::hipMemAllocationTypePinned,
            handleTypes: sys::hipMemHandleTypePosixFileDescriptor,
            location: sys::hipMemLocation { type_: sys::hipMemLocationTypeDevice, id: self.info.ordinal as c_int },
            win32SecurityAttributes: std::ptr::null_mut(),
            reserved: [0; 64],
        };
        let mut pool = std::ptr::null_mut();
        // SAFETY: the device is current (default_mem_pool bound it); writes one pool handle.
        check("hipMemPoolCreate", unsafe { create(&mut pool, &props) })?;
        if pool.is_null() {
            return Err(self.stub_call("hipMemPoolCreate"));
        }
        Ok(RawPool(pool as usize))
    }

    /// `hipMemPoolAttrReleaseThreshold` of one of our pools.
    pub(crate) unsafe fn pool_set_release_threshold(&self, pool: RawPool, bytes: u64) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the caller's contract: a live pool of this device.
        unsafe { self.set_release_threshold(hip_pool(pool), bytes) }
    }

    /// `hipMemPoolTrimTo` on one of our pools.
    pub(crate) unsafe fn pool_trim(&self, pool: RawPool, keep: usize) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the caller's contract: a live pool of this device.
        unsafe { self.trim_to(hip_pool(pool), keep) }
    }

    /// `hipMallocFromPoolAsync`; the buffer is freed with `hipFreeAsync` on `stream`.
    pub(crate) unsafe fn pool_alloc(&self, pool: RawPool, bytes: usize, stream: &HipStream) -> Result<HipBuffer> {
        check_alloc_size(bytes)?;
        self.check_stream(stream)?;
        let malloc = optional_fn!(self, hipMallocFromPoolAsync, "a shareable stream-ordered pool")?;
        // The buffer's drop frees in stream order only where hipFreeAsync resolved.
        optional_fn!(self, hipFreeAsync, "a shareable stream-ordered pool")?;
        self.ctx.bind()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a live pool of this device (the caller's contract) and a
        // stream of this device (checked); the buffer keeps the stream alive to free on it.
        let r = unsafe { malloc(&mut ptr, bytes, hip_pool(pool), stream.inner.raw) };
        if r != sys::hipSuccess {
            return Err(self.out_of_memory("hipMallocFromPoolAsync", bytes, r));
        }
        Ok(self.buffer(ptr as u64, bytes, MemoryKind::Device, Some(stream.clone())))
    }

    /// `hipMemPoolDestroy`.
    pub(crate) unsafe fn pool_destroy(&self, pool: RawPool) -> Result<()> {
        let destroy = optional_fn!(self, hipMemPoolDestroy, "a shareable stream-ordered pool")?;
        self.ctx.bind()?;
        // SAFETY: the caller's contract: live, destroyed once, not used after.
        check("hipMemPoolDestroy", unsafe { destroy(hip_pool(pool)) })
    }

    /// `hipMemPoolExportToShareableHandle`: the pool's own descriptor (ROCm
    /// closes it with the pool; the caller does not).
    pub(crate) unsafe fn pool_export(&self, pool: RawPool) -> Result<ExportedPoolFd> {
        let export = optional_fn!(self, hipMemPoolExportToShareableHandle, "IPC of stream-ordered pool memory")?;
        self.ctx.bind()?;
        let mut fd: c_int = -1;
        // SAFETY: for hipMemHandleTypePosixFileDescriptor the runtime writes
        // one int; the pool is live (the caller's contract); flags must be 0.
        check("hipMemPoolExportToShareableHandle", unsafe {
            export(&mut fd as *mut c_int as *mut c_void, hip_pool(pool), sys::hipMemHandleTypePosixFileDescriptor, 0)
        })?;
        if fd < 0 {
            return Err(self.stub_call("hipMemPoolExportToShareableHandle"));
        }
        Ok(ExportedPoolFd { fd, caller_closes: false })
    }

    /// `hipMemPoolExportPointer` for the pool block at `ptr`.
    pub(crate) fn pool_export_pointer(&self, ptr: u64) -> Result<IpcBytes> {
        let export = optional_fn!(self, hipMemPoolExportPointer, "IPC of stream-ordered pool memory")?;
        self.ctx.bind()?;
        let mut data = sys::hipMemPoolPtrExportData { reserved: [0; 64] };
        // SAFETY: writes 64 bytes; memory not of an exportable pool is reported as an error.
        check("hipMemPoolExportPointer", unsafe { export(&mut data, dptr(ptr)) })?;
        if data.reserved == [0; 64] {
            return Err(self.stub_call("hipMemPoolExportPointer"));
        }
        Ok(data.reserved)
    }

    /// `hipMemPoolImportFromShareableHandle`, then read-write access for this
    /// device where the imported pool does not grant it already (ROCm ties
    /// an imported pool to device 0 and grants access to that one).
    pub(crate) unsafe fn pool_import(&self, fd: i32) -> Result<RawPool> {
        let import = optional_fn!(self, hipMemPoolImportFromShareableHandle, "IPC of stream-ordered pool memory")?;
        self.ctx.bind()?;
        let mut pool = std::ptr::null_mut();
        // SAFETY: the runtime takes a POSIX descriptor as its value cast to
        // a pointer (ROCm/clr reads it back through a union); it is open (the
        // caller's contract) and stays ours: ROCm maps it and does not close it.
        check("hipMemPoolImportFromShareableHandle", unsafe {
            import(&mut pool, fd as isize as *mut c_void, sys::hipMemHandleTypePosixFileDescriptor, 0)
        })?;
        if pool.is_null() {
            return Err(self.stub_call("hipMemPoolImportFromShareableHandle"));
        }
        // SAFETY: `pool` was just imported; on failure it is destroyed once, here.
        unsafe { self.grant_access(pool) }.inspect_err(|_| {
            if let Some(destroy) = self.api().hipMemPoolDestroy {
                // SAFETY: as above.
                let _ = unsafe { destroy(pool) };
            }
        })?;
        Ok(RawPool(pool as usize))
    }

    /// Read-write access to `pool` for this device, if it lacks it.
    ///
    /// # Safety
    /// `pool` is a live pool; the device is current.
    unsafe fn grant_access(&self, pool: sys::hipMemPool_t) -> Result<()> {
        let get = optional_fn!(self, hipMemPoolGetAccess, "IPC of stream-ordered pool memory")?;
        let set = optional_fn!(self, hipMemPoolSetAccess, "IPC of stream-ordered pool memory")?;
        let mut location = sys::hipMemLocation { type_: sys::hipMemLocationTypeDevice, id: self.info.ordinal as c_int };
        let mut flags: c_int = 0;
        // SAFETY: writes one flags value for a live pool (the caller's contract).
        check("hipMemPoolGetAccess", unsafe { get(&mut flags, pool, &mut location) })?;
        if flags == sys::hipMemAccessFlagsProtReadWrite {
            return Ok(());
        }
        let desc = sys::hipMemAccessDesc { location, flags: sys::hipMemAccessFlagsProtReadWrite };
        // SAFETY: one descriptor, read by the runtime during the call.
        check("hipMemPoolSetAccess", unsafe { set(pool, &desc, 1) })
    }

    /// `hipMemPoolImportPointer`: the block's address in this process.
    pub(crate) unsafe fn pool_import_pointer(&self, pool: RawPool, data: &IpcBytes) -> Result<u64> {
        let import = optional_fn!(self, hipMemPoolImportPointer, "IPC of stream-ordered pool memory")?;
        self.ctx.bind()?;
        let mut data = sys::hipMemPoolPtrExportData { reserved: *data };
        let mut ptr = std::ptr::null_mut();
        // SAFETY: an imported pool of this device (the caller's contract);
        // the runtime reads the 64 bytes and writes one pointer.
        check("hipMemPoolImportPointer", unsafe { import(&mut ptr, hip_pool(pool), &mut data) })?;
        if ptr.is_null() {
            return Err(self.stub_call("hipMemPoolImportPointer"));
        }
        Ok(ptr as u64)
    }

    /// `hipFree` of an imported pool block (HIP documents hipFree or hipFreeAsync for these).
    pub(crate) unsafe fn pool_free_imported(&self, ptr: u64) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the caller's contract: imported here, freed once, no queued work uses it.
        check("hipFree", unsafe { (self.api().hipFree)(dptr(ptr)) })
    }
}

/// A [`RawPool`] as HIP's handle.
fn hip_pool(pool: RawPool) -> sys::hipMemPool_t {
    pool.0 as sys::hipMemPool_t
}

impl Device for HipDevice {
    type B = Hip;

    fn open(ordinal: usize) -> Result<Arc<Self>> {
        let rt = driver()?;
        let mut devices = open_devices().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(dev) = devices.get(&ordinal) {
            return Ok(dev.clone());
        }
        let count = Self::count()?;
        if ordinal >= count {
            return Err(Error::InvalidDeviceSpec {
                spec: format!("rocm:{ordinal}"),
                reason: format!("there are {count} ROCm devices (rocm:0..rocm:{})", count.saturating_sub(1)),
            });
        }
        let id = ordinal as c_int;
        let mut hip_device: sys::hipDevice_t = 0;
        // SAFETY: `ordinal` < device count; writes one int.
        check("hipDeviceGet", unsafe { (rt.api().hipDeviceGet)(&mut hip_device, id) })?;
        let ctx = Arc::new(Context { rt, hip_device, ordinal });
        ctx.bind()?;
        let target = target_id(rt, id);
        let info = query_info(rt, ctx.hip_device, ordinal, target.as_deref())?;
        let wall_clock_khz = attribute(rt, id, sys::attr::WALL_CLOCK_RATE).ok().filter(|&v| v > 0).map(|v| v as u32);
        let default_stream = HipStream {
            inner: Arc::new(StreamInner {
                raw: std::ptr::null_mut(),
                id: crate::backend::next_stream_id(),
                owned: false,
                ctx: ctx.clone(),
            }),
        };
        let dev = Arc::new(HipDevice {
            info,
            target_id: target,
            wall_clock_khz,
            ctx,
            default_stream,
            builtins: Mutex::new(None),
            array_kernels: Default::default(),
        });
        devices.insert(ordinal, dev.clone());
        Ok(dev)
    }

    fn count() -> Result<usize> {
        let rt = driver()?;
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        match unsafe { (rt.api().hipGetDeviceCount)(&mut n) } {
            sys::hipSuccess if n > 0 => Ok(n as usize),
            code @ (sys::hipSuccess | sys::hipErrorNoDevice) => Err(Error::NoDevice {
                backend: BackendKind::Rocm,
                reason: format!(
                    "ROCm loaded, no device (hipGetDeviceCount returned {}, {n} devices; hipInit returned {}; \
                     HIP {} from {})",
                    rt.error_name(code),
                    rt.error_name(rt.init),
                    sys::version_string(rt.version),
                    rt.loaded.path
                ),
            }),
            code => Err(driver_error("hipGetDeviceCount", code)),
        }
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        self.ctx.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two size_t.
        check("hipMemGetInfo", unsafe { (self.api().hipMemGetInfo)(&mut free, &mut total) })?;
        Ok(MemoryInfo { free, total })
    }

    fn alloc(&self, bytes: usize) -> Result<HipBuffer> {
        check_alloc_size(bytes)?;
        self.ctx.bind()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the device is current; the memory is returned uninitialized as documented.
        let r = unsafe { (self.api().hipMalloc)(&mut ptr, bytes) };
        if r != sys::hipSuccess {
            return Err(self.out_of_memory("hipMalloc", bytes, r));
        }
        Ok(self.buffer(ptr as u64, bytes, MemoryKind::Device, None))
    }

    fn alloc_async(&self, bytes: usize, stream: &HipStream) -> Result<HipBuffer> {
        check_alloc_size(bytes)?;
        self.check_stream(stream)?;
        let malloc_async = match self.api().hipMallocAsync {
            Some(f) if self.info.stream_ordered_alloc => f,
            _ => return self.alloc(bytes),
        };
        self.ctx.bind()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the stream belongs to this device (checked); the buffer
        // keeps the stream alive to free on it.
        let r = unsafe { malloc_async(&mut ptr, bytes, stream.inner.raw) };
        if r != sys::hipSuccess {
            return Err(self.out_of_memory("hipMallocAsync", bytes, r));
        }
        Ok(self.buffer(ptr as u64, bytes, MemoryKind::Device, Some(stream.clone())))
    }

    fn alloc_managed(&self, bytes: usize) -> Result<HipBuffer> {
        check_alloc_size(bytes)?;
        if !self.info.managed_memory {
            return Err(Error::Unsupported {
                op: "managed memory",
                backend: BackendKind::Rocm,
                hint: Some(format!("{} does not support managed memory", self.info.name)),
            });
        }
        self.ctx.bind()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the device is current.
        let r = unsafe { (self.api().hipMallocManaged)(&mut ptr, bytes, sys::hipMemAttachGlobal) };
        if r != sys::hipSuccess {
            return Err(self.out_of_memory("hipMallocManaged", bytes, r));
        }
        Ok(self.buffer(ptr as u64, bytes, MemoryKind::Managed, None))
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<HipPinnedBuffer> {
        // PORTABLE makes it pinned for every device.
        self.alloc_pinned_flags(bytes, sys::hipHostMallocPortable)
    }

    unsafe fn register_host(&self, ptr: *mut u8, len: usize) -> Result<HipHostRegistration> {
        // SAFETY: forwarded caller contract.
        unsafe { self.register_host_flags(ptr, len, sys::hipHostRegisterPortable) }
    }

    fn default_stream(&self) -> &HipStream {
        &self.default_stream
    }

    fn create_stream(&self) -> Result<HipStream> {
        self.ctx.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the device is current; writes one handle.
        check("hipStreamCreateWithFlags", unsafe {
            (self.api().hipStreamCreateWithFlags)(&mut raw, sys::hipStreamNonBlocking)
        })?;
        Ok(HipStream {
            inner: Arc::new(StreamInner {
                raw,
                id: crate::backend::next_stream_id(),
                owned: true,
                ctx: self.ctx.clone(),
            }),
        })
    }

    fn stream_id(&self, stream: &HipStream) -> Option<u64> {
        Some(stream.inner.id)
    }

    fn synchronize(&self, stream: &HipStream) -> Result<()> {
        self.check_stream(stream)?;
        self.ctx.bind()?;
        // SAFETY: the stream is alive (we hold it) and belongs to this device.
        check("hipStreamSynchronize", unsafe { (self.api().hipStreamSynchronize)(stream.inner.raw) })
    }

    fn synchronize_device(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the device is current (bound above); the call takes no pointers.
        check("hipDeviceSynchronize", unsafe { (self.api().hipDeviceSynchronize)() })
    }

    fn is_idle(&self, stream: &HipStream) -> Result<bool> {
        self.check_stream(stream)?;
        self.ctx.bind()?;
        // SAFETY: the stream is alive and belongs to this device.
        match unsafe { (self.api().hipStreamQuery)(stream.inner.raw) } {
            sys::hipSuccess => Ok(true),
            sys::hipErrorNotReady => Ok(false),
            e => Err(driver_error("hipStreamQuery", e)),
        }
    }

    fn create_event(&self) -> Result<HipEvent> {
        self.ctx.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the device is current; writes one handle.
        check("hipEventCreateWithFlags", unsafe {
            (self.api().hipEventCreateWithFlags)(&mut raw, sys::hipEventDefault)
        })?;
        Ok(HipEvent { raw, ctx: self.ctx.clone() })
    }

    fn record_event(&self, event: &HipEvent, stream: &HipStream) -> Result<()> {
        self.check_stream(stream)?;
        check_same_device("event", BackendKind::Rocm, self.info.ordinal, event.ctx.ordinal)?;
        self.ctx.bind()?;
        // SAFETY: both handles are alive and belong to this device.
        check("hipEventRecord", unsafe { (self.api().hipEventRecord)(event.raw, stream.inner.raw) })
    }

    fn wait_event(&self, stream: &HipStream, event: &HipEvent) -> Result<()> {
        self.check_stream(stream)?;
        self.ctx.bind()?;
        // SAFETY: both handles are alive; an event of another device is allowed by HIP.
        check("hipStreamWaitEvent", unsafe { (self.api().hipStreamWaitEvent)(stream.inner.raw, event.raw, 0) })
    }

    fn synchronize_event(&self, event: &HipEvent) -> Result<()> {
        event.ctx.bind()?;
        // SAFETY: the event is alive.
        check("hipEventSynchronize", unsafe { (self.api().hipEventSynchronize)(event.raw) })
    }

    fn event_is_complete(&self, event: &HipEvent) -> Result<bool> {
        event.ctx.bind()?;
        // SAFETY: the event is alive.
        match unsafe { (self.api().hipEventQuery)(event.raw) } {
            sys::hipSuccess => Ok(true),
            sys::hipErrorNotReady => Ok(false),
            e => Err(driver_error("hipEventQuery", e)),
        }
    }

    fn elapsed_ms(&self, start: &HipEvent, end: &HipEvent) -> Result<f32> {
        self.ctx.bind()?;
        let mut ms = 0f32;
        // SAFETY: both events are alive; the runtime reports unrecorded or incomplete events as errors.
        check("hipEventElapsedTime", unsafe { (self.api().hipEventElapsedTime)(&mut ms, start.raw, end.raw) })?;
        Ok(ms)
    }

    unsafe fn copy_to_device_async<M: DeviceMemory<B = Hip> + ?Sized>(
        &self,
        src: &[u8],
        dst: &M,
        dst_offset: usize,
        stream: &HipStream,
    ) -> Result<()> {
        self.check_buffer("destination buffer", dst)?;
        self.check_stream(stream)?;
        check_range("destination", dst_offset, src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: range checked; the caller keeps `src` and `dst` alive until the stream passes the copy.
        // HIP declares the source `void*` but only reads it.
        check("hipMemcpyHtoDAsync", unsafe {
            (self.api().hipMemcpyHtoDAsync)(
                dptr(dst.device_ptr() + dst_offset as u64),
                src.as_ptr() as *mut c_void,
                src.len(),
                stream.inner.raw,
            )
        })
    }

    unsafe fn copy_to_host_async<M: DeviceMemory<B = Hip> + ?Sized>(
        &self,
        src: &M,
        src_offset: usize,
        dst: &mut [u8],
        stream: &HipStream,
    ) -> Result<()> {
        self.check_buffer("source buffer", src)?;
        self.check_stream(stream)?;
        check_range("source", src_offset, dst.len(), src.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: range checked; the caller keeps both alive until the stream passes the copy.
        check("hipMemcpyDtoHAsync", unsafe {
            (self.api().hipMemcpyDtoHAsync)(
                dst.as_mut_ptr() as *mut c_void,
                dptr(src.device_ptr() + src_offset as u64),
                dst.len(),
                stream.inner.raw,
            )
        })
    }

    unsafe fn copy_device_async<S: DeviceMemory<B = Hip> + ?Sized, M: DeviceMemory<B = Hip> + ?Sized>(
        &self,
        src: &S,
        src_offset: usize,
        dst: &M,
        dst_offset: usize,
        len: usize,
        stream: &HipStream,
    ) -> Result<()> {
        self.check_buffer("source buffer", src)?;
        self.check_buffer("destination buffer", dst)?;
        self.check_stream(stream)?;
        check_range("source", src_offset, len, src.len())?;
        check_range("destination", dst_offset, len, dst.len())?;
        if len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: ranges checked; the caller keeps both buffers alive until the stream passes the copy.
        check("hipMemcpyDtoDAsync", unsafe {
            (self.api().hipMemcpyDtoDAsync)(
                dptr(dst.device_ptr() + dst_offset as u64),
                dptr(src.device_ptr() + src_offset as u64),
                len,
                stream.inner.raw,
            )
        })
    }

    unsafe fn memset_async<M: DeviceMemory<B = Hip> + ?Sized>(
        &self,
        dst: &M,
        offset: usize,
        len: usize,
        value: u8,
        stream: &HipStream,
    ) -> Result<()> {
        self.check_buffer("destination buffer", dst)?;
        self.check_stream(stream)?;
        check_range("destination", offset, len, dst.len())?;
        if len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: range checked; the caller keeps `dst` alive until the stream passes the memset.
        check("hipMemsetD8Async", unsafe {
            (self.api().hipMemsetD8Async)(dptr(dst.device_ptr() + offset as u64), value, len, stream.inner.raw)
        })
    }

    fn load_module(&self, source: ModuleSource<'_>) -> Result<HipModule> {
        match source {
            ModuleSource::Builtin => {
                let mut cached = self.builtins.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(module) = cached.as_ref() {
                    return Ok(module.clone());
                }
                let rate = self.wall_clock_khz.map(|khz| format!("-DGPUPORT_WALL_CLOCK_KHZ={khz}ull"));
                let options: Vec<&str> = rate.iter().map(String::as_str).collect();
                let code = self.compile(BUILTINS_SOURCE, "gpuport_builtins.hip", &options, &[])?;
                let module = self.load_image(code.as_ptr() as *const c_void, true)?;
                *cached = Some(module.clone());
                Ok(module)
            }
            ModuleSource::Source { code, name, options } => {
                let image = self.compile(code, name, options, &[])?;
                self.load_image(image.as_ptr() as *const c_void, false)
            }
            ModuleSource::Ptx(_) => Err(Error::Unsupported {
                op: "loading PTX",
                backend: BackendKind::Rocm,
                hint: Some("pass HIP source (ModuleSource::Source) or a code object (ModuleSource::Binary)".into()),
            }),
            ModuleSource::Binary(image) => {
                // Code objects are ELF; hipcc --genco writes a clang offload
                // bundle, compressed ("CCOB") in newer ROCm. Reject anything
                // else rather than let the runtime read past a short buffer.
                const ELF: &[u8] = b"\x7fELF";
                const BUNDLE: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
                const COMPRESSED_BUNDLE: &[u8] = b"CCOB";
                if ![ELF, BUNDLE, COMPRESSED_BUNDLE].iter().any(|magic| image.starts_with(magic)) {
                    return Err(Error::InvalidArgument {
                        name: "image",
                        reason: "not a HIP code object (ELF) or clang offload bundle; pass HIP source as \
                                 ModuleSource::Source"
                            .into(),
                    });
                }
                self.load_image(image.as_ptr() as *const c_void, false)
            }
        }
    }

    fn kernel(&self, module: &HipModule, name: &str) -> Result<HipKernel> {
        check_same_device("module", BackendKind::Rocm, self.info.ordinal, module.inner.ctx.ordinal)?;
        self.ctx.bind()?;
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument { name: "name", reason: "kernel name contains a NUL byte".into() })?;
        let mut func = std::ptr::null_mut();
        // SAFETY: the module is loaded and kept alive by the returned kernel.
        match unsafe { (self.api().hipModuleGetFunction)(&mut func, module.inner.raw, cname.as_ptr()) } {
            sys::hipSuccess => {}
            // ROCm's module code returns hipErrorNotFound for an unknown name;
            // hipErrorInvalidDeviceFunction is the runtime-API status for the
            // same case and is treated alike (not yet seen on AMD hardware).
            sys::hipErrorNotFound | sys::hipErrorInvalidDeviceFunction => {
                return Err(Error::KernelNotFound { name: name.to_string(), available: self.kernel_names(module) })
            }
            e => return Err(driver_error("hipModuleGetFunction", e)),
        }
        Ok(HipKernel { func, name: name.into(), params: self.param_sizes(module, name), module: module.clone() })
    }

    fn builtin_kernel(&self, name: &str) -> Result<HipKernel> {
        let module = self.load_module(ModuleSource::Builtin)?;
        crate::kernels::builtin_kernel_from(
            || self.kernel(&module, name),
            false, // the built-in module is compiled from the runtime's kernels only
            &self.array_kernels,
            ARRAY_OPS_SOURCE,
            name,
            |program| {
                let code = self.compile(program, &format!("{name}.hip"), &[], BUILTIN_HEADERS)?;
                self.kernel(&self.load_image(code.as_ptr() as *const c_void, true)?, name)
            },
        )
    }

    fn default_launch_config(&self, kernel: &HipKernel, n: usize) -> Result<LaunchConfig> {
        self.ctx.bind()?;
        let (mut grid, mut block) = (0, 0);
        // SAFETY: the kernel's module is alive; no dynamic shared memory, no block limit.
        check("hipModuleOccupancyMaxPotentialBlockSize", unsafe {
            (self.api().hipModuleOccupancyMaxPotentialBlockSize)(&mut grid, &mut block, kernel.func, 0, 0)
        })?;
        LaunchConfig::for_elements(n, block.max(1) as u32)
    }

    unsafe fn launch(
        &self,
        kernel: &HipKernel,
        config: LaunchConfig,
        args: &KernelArgs,
        stream: &HipStream,
    ) -> Result<()> {
        self.check_stream(stream)?;
        check_same_device("kernel", BackendKind::Rocm, self.info.ordinal, kernel.module.inner.ctx.ordinal)?;
        if let Some(params) = &kernel.params {
            check_kernel_args(&kernel.name, params, args)?;
        }
        config.validate(&self.info.limits)?;
        self.ctx.bind()?;
        // Parameter pointers on the stack for up to 16 arguments, as in cuda.rs.
        let (mut stack, mut heap) = ([std::ptr::null_mut(); 16], Vec::new());
        let pointers: &mut [*mut c_void] = if args.len() <= stack.len() {
            &mut stack[..args.len()]
        } else {
            heap.resize(args.len(), std::ptr::null_mut());
            &mut heap
        };
        args.fill_param_pointers(pointers);
        let [gx, gy, gz] = config.grid;
        let [bx, by, bz] = config.block;
        // SAFETY: the kernel's module is alive; `pointers` point into `args`,
        // which outlives this call (the runtime copies parameters at launch);
        // the caller guarantees argument types and buffer lifetimes.
        check("hipModuleLaunchKernel", unsafe {
            (self.api().hipModuleLaunchKernel)(
                kernel.func,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                config.shared_mem_bytes,
                stream.inner.raw,
                pointers.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::builtin;

    #[test]
    fn builtin_source_defines_every_builtin_kernel() {
        for name in builtin::ALL {
            assert!(BUILTINS_SOURCE.contains(&format!("void {name}(")), "{name} missing from kernels/hip/builtins.hip");
        }
    }

    #[test]
    fn builtin_sources_of_both_backends_define_the_same_kernels() {
        let cuda = include_str!("../../../kernels/cuda/builtins.cu");
        for name in builtin::ALL {
            let sig = format!("extern \"C\" __global__ void {name}(");
            assert!(cuda.contains(&sig), "{name} missing from kernels/cuda/builtins.cu");
            assert!(BUILTINS_SOURCE.contains(&sig), "{name} missing from kernels/hip/builtins.hip");
        }
    }

    #[test]
    fn target_id_is_read_at_the_layout_offset() {
        let mut props = vec![0u8; sys::DEVICE_PROP_BUFFER_BYTES];
        props[..18].copy_from_slice(b"AMD Instinct MI210");
        let id = b"gfx90a:sramecc+:xnack-";
        let at = sys::GCN_ARCH_NAME_OFFSET_R0600;
        props[at..at + id.len()].copy_from_slice(id);
        assert_eq!(parse_target_id(&props, at).as_deref(), Some("gfx90a:sramecc+:xnack-"));
    }

    #[test]
    fn target_id_is_found_by_scanning_when_the_offset_is_wrong() {
        let mut props = vec![0u8; sys::DEVICE_PROP_BUFFER_BYTES];
        let at = sys::GCN_ARCH_NAME_OFFSET_R0000;
        props[at..at + 7].copy_from_slice(b"gfx1030");
        assert_eq!(parse_target_id(&props, sys::GCN_ARCH_NAME_OFFSET_R0600).as_deref(), Some("gfx1030"));
        assert_eq!(parse_target_id(&vec![0u8; 4096], 396), None);
    }

    #[test]
    fn the_memory_layer_calls_resolve_in_the_loaded_runtime() {
        // CI loads Debian's ROCm 5.2 (no device), the GPU machine the shim;
        // where no HIP runtime loads there is nothing to check.
        let Ok(rt) = driver() else { return };
        let api = rt.api();
        macro_rules! missing {
            ($($f:ident),*) => { [$((stringify!($f), api.$f.is_some())),*]
                .into_iter().filter(|(_, found)| !found).map(|(name, _)| name).collect::<Vec<_>>() };
        }
        let mut missing = missing!(
            hipHostGetDevicePointer,
            hipMemGetAddressRange,
            hipIpcGetMemHandle,
            hipIpcOpenMemHandle,
            hipIpcCloseMemHandle
        );
        // The stream-ordered pool calls came with ROCm 5.1.
        if rt.version >= 50_100_000 {
            missing.extend(missing!(
                hipDeviceGetDefaultMemPool,
                hipMemPoolSetAttribute,
                hipMemPoolGetAttribute,
                hipMemPoolTrimTo,
                hipMemPoolCreate,
                hipMemPoolDestroy,
                hipMallocFromPoolAsync,
                hipMemPoolExportToShareableHandle,
                hipMemPoolImportFromShareableHandle,
                hipMemPoolExportPointer,
                hipMemPoolImportPointer,
                hipMemPoolGetAccess,
                hipMemPoolSetAccess
            ));
        }
        assert!(missing.is_empty(), "{} (HIP {}) lacks {missing:?}", rt.loaded.path, sys::version_string(rt.version));
    }

    #[test]
    fn hiprtc_statuses_have_header_names() {
        assert_eq!(hiprtc_status_name(6), Some("HIPRTC_ERROR_COMPILATION"));
        assert_eq!(hiprtc_status_name(100), Some("HIPRTC_ERROR_LINKING"));
        assert_eq!(hiprtc_status_name(-1), None);
    }
}
