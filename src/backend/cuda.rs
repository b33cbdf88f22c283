//! The CUDA backend (feature `cuda`), on cudarc's `sys`/`result` layers.
//!
//! cudarc is built with `dynamic-loading`: `libcuda` and `libnvrtc` are
//! opened at run time, so a binary with this backend starts on machines
//! without CUDA. cudarc panics when a library it needs cannot be loaded, so
//! every entry point first probes for the library (`driver()`) and turns its
//! absence into [`Error::LibraryNotFound`].
//!
//! cudarc also resolves each driver symbol lazily and panics if the driver is
//! too old to have it: calls newer than CUDA 12.0 are gated on
//! `cuDriverGetVersion` (see `DRIVER_12_4`).
//!
//! Every object holds an `Arc<Context>` (the device's retained primary
//! context), so the context outlives every stream, buffer and module.

use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use cudarc::nvrtc::{result as rtc, sys as rtc_sys};

use super::{
    check_alloc_size, check_kernel_args, check_range, check_same_device, Backend, Device, DeviceInfo, DeviceLimits,
    DeviceMemory, DeviceMemoryMut, HostMemory, KernelArgs, LaunchConfig, MemoryInfo, MemoryKind, ModuleSource,
};
use crate::error::{BackendKind, DriverError, Error, Result};

/// The runtime's built-in kernels ([`ModuleSource::Builtin`]).
const BUILTIN_SOURCE: &str = include_str!("../../kernels/cuda/builtins.cu");
/// The array kernels' dialect file; each kernel is compiled alone from it.
const ARRAY_OPS_SOURCE: &str = include_str!("../../kernels/cuda/array_ops.cu");
/// Headers the array kernels include, served to NVRTC from memory.
const BUILTIN_HEADERS: &[(&str, &str)] = &[
    ("array_indexer.h", include_str!("../../kernels/common/array_indexer.h")),
    ("array_ops.h", include_str!("../../kernels/common/array_ops.h")),
];

/// The built-in kernels precompiled by nvcc in build.rs, where it ran.
#[cfg(gpuport_prebuilt_cuda)]
const PREBUILT: Option<&[u8]> = Some(include_bytes!(concat!(env!("OUT_DIR"), "/gpuport_builtins.fatbin")));
#[cfg(not(gpuport_prebuilt_cuda))]
const PREBUILT: Option<&[u8]> = None;

/// Set to skip the precompiled fatbin and compile the built-ins with NVRTC.
pub const FORCE_NVRTC_ENV: &str = "GPUPORT_FORCE_NVRTC";

/// First driver version (12.4) with `cuFuncGetParamInfo` and `cuModuleEnumerateFunctions`.
const DRIVER_12_4: i32 = 12040;
/// First driver version (13.2) with `cuFuncGetParamCount`.
const DRIVER_13_2: i32 = 13020;

/// The CUDA backend.
#[derive(Debug, Clone, Copy)]
pub struct Cuda;

impl Backend for Cuda {
    const KIND: BackendKind = BackendKind::Cuda;
    type Device = CudaDevice;
    type Stream = CudaStream;
    type Event = CudaEvent;
    type Buffer = CudaBuffer;
    type PinnedBuffer = CudaPinnedBuffer;
    type HostRegistration = CudaHostRegistration;
    type Module = CudaModule;
    type Kernel = CudaKernel;
}

// ---- errors and library loading --------------------------------------------------

/// Converts a cudarc driver error into ours, naming the call.
fn driver_error(call: &'static str, e: cu::DriverError) -> Error {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
    let mut message = e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    if e.0 == sys::CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED {
        // Seen after `numba.cuda.close()`, which resets the primary context
        // that every library in the process shares.
        message.push_str(
            " (another library reset the device's primary context, e.g. numba.cuda.close() or \
             cudaDeviceReset(): memory, streams and modules made before are gone, and this device \
             cannot be used again in this process)",
        );
    }
    Error::Driver(DriverError { backend: BackendKind::Cuda, call, code: e.0 as i64, name, message })
}

/// Attaches the call name to a cudarc result.
fn check<T>(call: &'static str, r: std::result::Result<T, cu::DriverError>) -> Result<T> {
    r.map_err(|e| driver_error(call, e))
}

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

/// The library names cudarc tries for `lib`, without repeats, comma separated.
fn candidates(lib: &str) -> String {
    let mut names = cudarc::get_lib_name_candidates(lib);
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names.join(", ")
}

/// Loads and initializes the driver once; the outcome (and why it failed) is cached.
pub(crate) fn driver() -> Result<i32> {
    static STATE: OnceLock<std::result::Result<i32, String>> = OnceLock::new();
    let state = STATE.get_or_init(|| {
        // SAFETY: only tries `dlopen` on cudarc's candidate names.
        if !unsafe { sys::is_culib_present() } {
            return Err(format!("libcuda: tried {}", candidates("cuda")));
        }
        cu::init().map_err(|e| driver_error("cuInit", e).to_string())?;
        let mut version = 0;
        // SAFETY: writes one int; the library is loaded (probed above).
        unsafe { sys::cuDriverGetVersion(&mut version) }
            .result()
            .map_err(|e| driver_error("cuDriverGetVersion", e).to_string())?;
        Ok(version)
    });
    match state {
        Ok(v) => Ok(*v),
        Err(msg) if msg.starts_with("libcuda: tried ") => Err(Error::LibraryNotFound {
            backend: BackendKind::Cuda,
            library: "libcuda",
            tried: msg.trim_start_matches("libcuda: tried ").to_string(),
        }),
        Err(msg) => Err(Error::NoDevice { backend: BackendKind::Cuda, reason: msg.clone() }),
    }
}

/// Checks NVRTC can be loaded before cudarc touches it (cudarc would panic).
fn nvrtc_available() -> Result<()> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries `dlopen` on cudarc's candidate names.
    if *PRESENT.get_or_init(|| unsafe { rtc_sys::is_culib_present() }) {
        Ok(())
    } else {
        Err(Error::LibraryNotFound {
            backend: BackendKind::Cuda,
            library: "libnvrtc (needed to compile kernel source)",
            tried: candidates("nvrtc"),
        })
    }
}

// ---- context ---------------------------------------------------------------------

/// A retained primary context; released when the last object using it goes.
struct Context {
    raw: sys::CUcontext,
    cu_device: sys::CUdevice,
    ordinal: usize,
    driver_version: i32,
}

// SAFETY: CUDA contexts may be used from any thread; we bind before each use.
unsafe impl Send for Context {}
// SAFETY: as above; the driver API is thread-safe.
unsafe impl Sync for Context {}

impl Context {
    /// Makes this context current on the calling thread (cheap when it already is).
    fn bind(&self) -> Result<()> {
        if check("cuCtxGetCurrent", cu::ctx::get_current())? != Some(self.raw) {
            // SAFETY: `raw` is a retained primary context, alive while `self` is.
            check("cuCtxSetCurrent", unsafe { cu::ctx::set_current(self.raw) })?;
        }
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `cu_device` came from `cuDeviceGet` and we retained its
        // primary context exactly once in `CudaDevice::open`.
        let _ = unsafe { cu::primary_ctx::release(self.cu_device) };
    }
}

// ---- memory ------------------------------------------------------------------------

/// Device or managed memory; freed on drop (in stream order if allocated so).
pub struct CudaBuffer {
    ptr: sys::CUdeviceptr,
    len: usize,
    kind: MemoryKind,
    /// The stream of a stream-ordered allocation, kept alive to free on it.
    free_on: Option<CudaStream>,
    ctx: Arc<Context>,
}

impl fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaBuffer(cuda:{}, {:#x}, {} bytes, {:?})", self.ctx.ordinal, self.ptr, self.len, self.kind)
    }
}

// SAFETY: `ptr..ptr+len` is the allocation this buffer made and frees on
// drop; the context it belongs to outlives it (held by `ctx`).
unsafe impl DeviceMemory for CudaBuffer {
    type B = Cuda;
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

// SAFETY: a CudaBuffer is not `Clone` and hands out no second handle on its memory.
unsafe impl DeviceMemoryMut for CudaBuffer {}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        // Errors cannot be returned from drop; a failed free leaves the
        // memory to the context's teardown.
        if self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: `ptr` was allocated by this context and is freed once,
        // here; a stream-ordered allocation is freed on its own stream.
        let _ = unsafe {
            match &self.free_on {
                Some(stream) => cu::free_async(self.ptr, stream.inner.raw),
                None => cu::free_sync(self.ptr),
            }
        };
    }
}

/// Page-locked host memory from `cuMemHostAlloc`.
pub struct CudaPinnedBuffer {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<Context>,
}

// SAFETY: plain host bytes owned by this value.
unsafe impl Send for CudaPinnedBuffer {}
// SAFETY: `&self` only gives shared access to the bytes.
unsafe impl Sync for CudaPinnedBuffer {}

impl fmt::Debug for CudaPinnedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaPinnedBuffer({:p}, {} bytes)", self.ptr, self.len)
    }
}

impl HostMemory for CudaPinnedBuffer {
    fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes from `cuMemHostAlloc`, zeroed at allocation, alive while self is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for CudaPinnedBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: allocated by `cuMemHostAlloc` in this context, freed once.
            let _ = unsafe { cu::free_host(self.ptr as *mut c_void) };
        }
    }
}

/// Host memory registered with `cuMemHostRegister`; unregistered on drop.
pub struct CudaHostRegistration {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<Context>,
}

// SAFETY: holds only an address for unregistering; no access to the bytes.
unsafe impl Send for CudaHostRegistration {}
// SAFETY: as above.
unsafe impl Sync for CudaHostRegistration {}

impl fmt::Debug for CudaHostRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaHostRegistration({:p}, {} bytes)", self.ptr, self.len)
    }
}

impl Drop for CudaHostRegistration {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: registered by `register_host` in this context, unregistered once.
            let _ = unsafe { sys::cuMemHostUnregister(self.ptr as *mut c_void) };
        }
    }
}

// ---- streams and events -----------------------------------------------------------

struct StreamInner {
    raw: sys::CUstream,
    /// Process-unique number (raw handles are reused after `cuStreamDestroy`).
    id: u64,
    /// False for the legacy default (null) stream, which is never destroyed.
    owned: bool,
    ctx: Arc<Context>,
}

// SAFETY: CUDA streams may be used from any thread.
unsafe impl Send for StreamInner {}
// SAFETY: as above.
unsafe impl Sync for StreamInner {}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.owned && self.ctx.bind().is_ok() {
            // SAFETY: created by `cuStreamCreate` in this context, destroyed once.
            // Pending work still completes (cuStreamDestroy semantics).
            let _ = unsafe { cu::stream::destroy(self.raw) };
        }
    }
}

/// A CUDA stream.
#[derive(Clone)]
pub struct CudaStream {
    inner: Arc<StreamInner>,
}

impl fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaStream(cuda:{}, {:p})", self.inner.ctx.ordinal, self.inner.raw)
    }
}

impl CudaStream {
    /// The raw `CUstream`, for interop with other CUDA libraries.
    pub fn as_raw(&self) -> sys::CUstream {
        self.inner.raw
    }
}

/// A CUDA event.
pub struct CudaEvent {
    raw: sys::CUevent,
    ctx: Arc<Context>,
}

// SAFETY: CUDA events may be used from any thread.
unsafe impl Send for CudaEvent {}
// SAFETY: as above.
unsafe impl Sync for CudaEvent {}

impl fmt::Debug for CudaEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaEvent(cuda:{}, {:p})", self.ctx.ordinal, self.raw)
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created by `cuEventCreate` in this context, destroyed once.
            let _ = unsafe { cu::event::destroy(self.raw) };
        }
    }
}

// ---- modules and kernels -----------------------------------------------------------

struct ModuleInner {
    raw: sys::CUmodule,
    ctx: Arc<Context>,
}

// SAFETY: CUDA modules may be used from any thread.
unsafe impl Send for ModuleInner {}
// SAFETY: as above.
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: loaded in this context, unloaded once after the last kernel handle is gone.
            let _ = unsafe { cu::module::unload(self.raw) };
        }
    }
}

/// A loaded CUDA module.
#[derive(Clone)]
pub struct CudaModule {
    inner: Arc<ModuleInner>,
}

impl CudaModule {
    /// Whether both handles name the same loaded module.
    fn same(&self, other: &CudaModule) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for CudaModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaModule(cuda:{}, {:p})", self.inner.ctx.ordinal, self.inner.raw)
    }
}

/// A kernel; keeps its module loaded.
#[derive(Clone)]
pub struct CudaKernel {
    func: sys::CUfunction,
    name: Arc<str>,
    /// What is known of the kernel's parameters, to check launch arguments.
    params: Params,
    module: CudaModule,
}

// SAFETY: CUfunction handles may be used from any thread while the module lives.
unsafe impl Send for CudaKernel {}
// SAFETY: as above.
unsafe impl Sync for CudaKernel {}

impl fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaKernel({}, params {:?})", self.name, self.params)
    }
}

// ---- device ---------------------------------------------------------------------------

/// An NVIDIA GPU (`"cuda:N"`).
pub struct CudaDevice {
    info: DeviceInfo,
    ctx: Arc<Context>,
    default_stream: CudaStream,
    builtins: Mutex<Option<CudaModule>>,
    /// Whether `builtins` is the prebuilt image, which holds every array
    /// kernel too (NVRTC compiles only the runtime's own kernels there).
    builtins_prebuilt: std::sync::atomic::AtomicBool,
    /// Array kernels compiled so far, by name.
    array_kernels: Mutex<HashMap<String, CudaKernel>>,
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaDevice(cuda:{}, {})", self.info.ordinal, self.info.name)
    }
}

/// One `CudaDevice` per ordinal per process, so contexts are retained once.
fn open_devices() -> &'static Mutex<HashMap<usize, Arc<CudaDevice>>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<CudaDevice>>>> = OnceLock::new();
    DEVICES.get_or_init(Default::default)
}

fn attribute(dev: sys::CUdevice, attr: sys::CUdevice_attribute) -> Result<i32> {
    // SAFETY: `dev` came from `cuDeviceGet`; the call writes one int.
    check("cuDeviceGetAttribute", unsafe { cu::device::get_attribute(dev, attr) })
}

fn query_info(dev: sys::CUdevice, ordinal: usize) -> Result<DeviceInfo> {
    use sys::CUdevice_attribute::*;
    let a = |attr| attribute(dev, attr).map(|v| v.max(0) as u32);
    Ok(DeviceInfo {
        backend: BackendKind::Cuda,
        ordinal,
        name: check("cuDeviceGetName", cu::device::get_name(dev))?,
        arch: format!(
            "sm_{}{}",
            a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
        ),
        multiprocessors: a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        // SAFETY: `dev` came from `cuDeviceGet`.
        total_memory: check("cuDeviceTotalMem", unsafe { cu::device::total_mem(dev) })?,
        managed_memory: a(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? != 0,
        stream_ordered_alloc: a(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? != 0,
        limits: DeviceLimits {
            max_threads_per_block: a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block_dim: [
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid_dim: [
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            max_shared_memory_per_block: a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize,
            warp_size: a(CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        },
    })
}

impl CudaDevice {
    /// A handle to a stream gpuport does not own: one another library created
    /// (PyTorch, CuPy, cuda-python), or the special handles `CU_STREAM_LEGACY`
    /// (1) and `CU_STREAM_PER_THREAD` (2). It is never destroyed by gpuport,
    /// so work can join a foreign stream's order without synchronizing.
    ///
    /// # Safety
    /// `raw` must be 0, 1, 2 or a live `CUstream` of this device's primary
    /// context, and stay alive while the returned handle is used.
    pub unsafe fn borrow_stream(&self, raw: usize) -> CudaStream {
        CudaStream {
            inner: Arc::new(StreamInner {
                raw: raw as sys::CUstream,
                id: super::next_stream_id(),
                owned: false,
                ctx: self.ctx.clone(),
            }),
        }
    }

    fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        check_same_device("stream", BackendKind::Cuda, self.info.ordinal, stream.inner.ctx.ordinal)
    }

    fn check_buffer<M: DeviceMemory + ?Sized>(&self, what: &'static str, buffer: &M) -> Result<()> {
        check_same_device(what, BackendKind::Cuda, self.info.ordinal, buffer.ordinal())
    }

    fn out_of_memory(&self, call: &'static str, bytes: usize, e: cu::DriverError) -> Error {
        if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory { backend: BackendKind::Cuda, ordinal: self.info.ordinal, bytes }
        } else {
            driver_error(call, e)
        }
    }

    fn buffer(&self, ptr: sys::CUdeviceptr, len: usize, kind: MemoryKind, free_on: Option<CudaStream>) -> CudaBuffer {
        CudaBuffer { ptr, len, kind, free_on, ctx: self.ctx.clone() }
    }

    /// Compiles CUDA C++ to a cubin for this device with NVRTC, through the
    /// on-disk cache (see [`crate::kernels::cache`]). `headers` are
    /// `(include name, contents)` pairs the source may `#include`.
    fn compile(&self, code: &str, name: &str, options: &[&str], headers: &[(&str, &str)]) -> Result<Vec<u8>> {
        nvrtc_available()?;
        let mut opts: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        if !opts.iter().any(|o| o.starts_with("-arch") || o.starts_with("--gpu-architecture")) {
            opts.push(format!("--gpu-architecture={}", self.info.arch));
        }
        let (mut major, mut minor) = (0, 0);
        // SAFETY: NVRTC is loaded (checked above); writes two ints.
        unsafe { rtc_sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|e| nvrtc_error("nvrtcVersion", e))?;
        let version = format!("nvrtc {major}.{minor}");
        let mut parts: Vec<&[u8]> = vec![version.as_bytes(), self.info.arch.as_bytes(), code.as_bytes()];
        parts.extend(opts.iter().map(|o| o.as_bytes()));
        for (include, text) in headers {
            parts.extend([include.as_bytes(), text.as_bytes()]);
        }
        let key = crate::kernels::cache::key(&parts);
        let dir = crate::kernels::cache::cache_dir();
        let (image, _) = crate::kernels::cache::get_or_build(dir.as_deref(), &self.info.arch, &key, || {
            self.run_nvrtc(code, name, &opts, headers)
        })?;
        Ok(image)
    }

    fn run_nvrtc(&self, code: &str, name: &str, opts: &[String], headers: &[(&str, &str)]) -> Result<Vec<u8>> {
        let cstring = |s: &str, what: &'static str| {
            CString::new(s)
                .map_err(|_| Error::InvalidArgument { name: what, reason: format!("{what} contains a NUL byte") })
        };
        let src = cstring(code, "code")?;
        let cname = cstring(name, "name")?;
        let header_texts = headers.iter().map(|(_, t)| cstring(t, "header")).collect::<Result<Vec<_>>>()?;
        let header_names = headers.iter().map(|(n, _)| cstring(n, "header name")).collect::<Result<Vec<_>>>()?;
        let text_ptrs: Vec<*const std::ffi::c_char> = header_texts.iter().map(|c| c.as_ptr()).collect();
        let name_ptrs: Vec<*const std::ffi::c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
        let mut prog = std::ptr::null_mut();
        // SAFETY: every pointer is a NUL-terminated string kept alive until
        // the program is destroyed below; the counts match the arrays.
        unsafe {
            rtc_sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                headers.len() as i32,
                text_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        }
        .result()
        .map_err(|e| nvrtc_error("nvrtcCreateProgram", e))?;
        let result = (|| {
            // SAFETY: `prog` is a live program created above.
            let compiled = unsafe { rtc::compile_program(prog, opts) };
            if compiled.is_err() {
                // SAFETY: `prog` is live; the log is a NUL-terminated buffer.
                let log = unsafe { rtc::get_program_log(prog) }.unwrap_or_default();
                let log = if log.is_empty() {
                    String::new()
                } else {
                    // SAFETY: the log buffer is NUL-terminated by NVRTC.
                    unsafe { CStr::from_ptr(log.as_ptr()) }.to_string_lossy().into_owned()
                };
                return Err(Error::Compile { backend: BackendKind::Cuda, name: name.to_string(), log });
            }
            let mut size = 0usize;
            // SAFETY: `prog` compiled successfully; writes one usize.
            unsafe { rtc_sys::nvrtcGetCUBINSize(prog, &mut size) }
                .result()
                .map_err(|e| nvrtc_error("nvrtcGetCUBINSize", e))?;
            let mut cubin = vec![0u8; size];
            // SAFETY: `cubin` has the `size` bytes NVRTC asked for.
            unsafe { rtc_sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut _) }
                .result()
                .map_err(|e| nvrtc_error("nvrtcGetCUBIN", e))?;
            Ok(cubin)
        })();
        // SAFETY: destroyed once, after its last use.
        let _ = unsafe { rtc::destroy_program(prog) };
        result
    }

    fn load_image(&self, image: *const c_void) -> Result<CudaModule> {
        self.ctx.bind()?;
        // SAFETY: callers pass a cubin/fatbin or a NUL-terminated PTX image
        // that stays alive for the duration of the call.
        let raw = check("cuModuleLoadData", unsafe { cu::module::load_data(image) })?;
        Ok(CudaModule { inner: Arc::new(ModuleInner { raw, ctx: self.ctx.clone() }) })
    }

    /// Names of the kernels in a module (driver 12.4+), for error messages.
    fn kernel_names(&self, module: &CudaModule) -> String {
        if self.ctx.driver_version < DRIVER_12_4 {
            return "(listing needs a CUDA 12.4+ driver)".into();
        }
        let mut count = 0u32;
        // SAFETY: module is loaded; writes one uint.
        if unsafe { sys::cuModuleGetFunctionCount(&mut count, module.inner.raw) }.result().is_err() {
            return String::new();
        }
        let mut funcs = vec![std::ptr::null_mut(); count as usize];
        // SAFETY: `funcs` has room for `count` handles.
        if unsafe { sys::cuModuleEnumerateFunctions(funcs.as_mut_ptr(), count, module.inner.raw) }.result().is_err() {
            return String::new();
        }
        let mut names: Vec<String> = funcs
            .into_iter()
            .filter_map(|f| {
                let mut name = std::ptr::null();
                // SAFETY: `f` is a function of a loaded module; the driver returns a static C string.
                unsafe { sys::cuFuncGetName(&mut name, f) }.result().ok()?;
                // SAFETY: non-null, NUL-terminated, owned by the driver.
                Some(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
            })
            .collect();
        names.sort();
        names.join(", ")
    }

    /// Looks `name` up in `module`; `builtin` says the module is one of
    /// ours, whose kernels' parameters are known without asking the driver.
    fn kernel_in(&self, module: &CudaModule, name: &str, builtin: bool) -> Result<CudaKernel> {
        check_same_device("module", BackendKind::Cuda, self.info.ordinal, module.inner.ctx.ordinal)?;
        self.ctx.bind()?;
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument { name: "name", reason: "kernel name contains a NUL byte".into() })?;
        // SAFETY: the module is loaded and kept alive by the returned kernel.
        let func = match unsafe { cu::module::get_function(module.inner.raw, cname) } {
            Ok(f) => f,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => {
                return Err(Error::KernelNotFound { name: name.to_string(), available: self.kernel_names(module) })
            }
            Err(e) => return Err(driver_error("cuModuleGetFunction", e)),
        };
        let params = self.params_of(func, builtin.then(|| crate::backend::host::builtin_params(name)).flatten());
        Ok(CudaKernel { func, name: name.into(), params, module: module.clone() })
    }

    /// What can be known of a kernel's parameters without a failing driver
    /// call. Probing `cuFuncGetParamInfo` until it fails, as this once did,
    /// makes every kernel lookup report a CUDA API error, which buries real
    /// errors under compute-sanitizer (288 reports in `tests/kernels.rs`).
    /// So: our own kernels use the table the host backend shares; a 13.2+
    /// driver tells the count (`cuFuncGetParamCount`); older 12.4+ drivers
    /// get the sizes of as many parameters as a launch passes, checked then.
    fn params_of(&self, func: sys::CUfunction, known: Option<&'static [usize]>) -> Params {
        if let Some(sizes) = known {
            return Params::Exact(sizes.into());
        }
        if self.ctx.driver_version < DRIVER_12_4 {
            return Params::Unknown;
        }
        if self.ctx.driver_version >= DRIVER_13_2 {
            if let Some(count) = param_count(func) {
                let sizes: Option<Vec<usize>> = (0..count).map(|i| param_size(func, i)).collect();
                if let Some(sizes) = sizes {
                    return Params::Exact(sizes.into());
                }
            }
        }
        Params::Prefix(Arc::new(Mutex::new(Vec::new())))
    }
}

/// What a [`CudaKernel`] knows of its parameters.
#[derive(Clone, Debug)]
enum Params {
    /// Every parameter's size.
    Exact(Arc<[usize]>),
    /// The sizes of the first parameters, learnt from launches so far; a
    /// launch passing more arguments asks the driver for the next ones.
    Prefix(Arc<Mutex<Vec<usize>>>),
    /// Nothing (a driver older than 12.4).
    Unknown,
}

impl Params {
    /// Checks `args` against what is known, asking the driver for sizes
    /// not yet known. A prefix cannot tell a launch with too few arguments;
    /// the launch is `unsafe` and its contract requires matching arguments.
    fn check(&self, kernel: &CudaKernel, args: &KernelArgs) -> Result<()> {
        match self {
            Params::Exact(sizes) => check_kernel_args(&kernel.name, sizes, args),
            Params::Unknown => Ok(()),
            Params::Prefix(known) => {
                let mut known = known.lock().unwrap_or_else(|p| p.into_inner());
                while known.len() < args.len() {
                    match param_size(kernel.func, known.len()) {
                        Some(size) => known.push(size),
                        None => {
                            return Err(Error::KernelArguments {
                                kernel: kernel.name.to_string(),
                                reason: format!("takes {} arguments, {} were given", known.len(), args.len()),
                            })
                        }
                    }
                }
                check_kernel_args(&kernel.name, &known[..args.len()], args)
            }
        }
    }
}

/// The size of parameter `index` of `func`, or `None` past the last one
/// (driver 12.4+; the caller checks the version).
fn param_size(func: sys::CUfunction, index: usize) -> Option<usize> {
    let (mut offset, mut size) = (0usize, 0usize);
    // SAFETY: `func` is a live function; the driver writes two `size_t`s.
    let r = unsafe { sys::cuFuncGetParamInfo(func, index, &mut offset, &mut size) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(size)
}

/// `cuFuncGetParamCount` (driver 13.2+), looked up by hand: cudarc declares
/// it only for its CUDA 13.2 feature, and its lazy loader panics on a driver
/// without the symbol, where this returns `None`.
fn param_count(func: sys::CUfunction) -> Option<usize> {
    type GetParamCount = unsafe extern "C" fn(sys::CUfunction, *mut usize) -> sys::CUresult;
    static SYMBOL: OnceLock<Option<GetParamCount>> = OnceLock::new();
    // SAFETY: libcuda is loaded (every device was opened through `driver()`),
    // and the symbol, where present, has the C signature declared above
    // (cuda.h of CUDA 13.2).
    let get = (*SYMBOL
        .get_or_init(|| unsafe { sys::culib().get::<GetParamCount>(b"cuFuncGetParamCount").ok().map(|s| *s) }))?;
    let mut count = 0usize;
    // SAFETY: `func` is a live function; the driver writes one `size_t`.
    (unsafe { get(func, &mut count) } == sys::CUresult::CUDA_SUCCESS).then_some(count)
}

// ---- memory-resource support (used by `crate::memory`) ----------------------------

/// Raw bytes of a `CUipcMemHandle` or a `CUmemPoolPtrExportData`.
pub(crate) type IpcBytes = crate::memory::ext::IpcBytes;
use crate::memory::ext::{ExportedPoolFd, RawPool};

impl CudaDevice {
    /// `cuMemHostAlloc` with explicit `CU_MEMHOSTALLOC_*` flags; zero-filled.
    pub(crate) fn alloc_pinned_flags(&self, bytes: usize, flags: u32) -> Result<CudaPinnedBuffer> {
        check_alloc_size(bytes)?;
        self.ctx.bind()?;
        // SAFETY: the context is current; the flags are the driver's own bits.
        let ptr = unsafe { cu::malloc_host(bytes, flags) }
            .map_err(|e| self.out_of_memory("cuMemHostAlloc", bytes, e))? as *mut u8;
        // SAFETY: `ptr` addresses `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(CudaPinnedBuffer { ptr, len: bytes, ctx: self.ctx.clone() })
    }

    /// The device address of mapped pinned memory (`cuMemHostGetDevicePointer`).
    pub(crate) fn mapped_device_ptr(&self, host: *mut u8) -> Result<u64> {
        self.ctx.bind()?;
        let mut dptr = 0;
        // SAFETY: writes one device pointer; an unmapped address is reported as an error.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, host as *mut c_void, 0) }
            .result()
            .map_err(|e| driver_error("cuMemHostGetDevicePointer", e))?;
        Ok(dptr)
    }

    /// `cuMemHostRegister` with explicit `CU_MEMHOSTREGISTER_*` flags.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid host memory that outlives the registration.
    pub(crate) unsafe fn register_host_flags(
        &self,
        ptr: *mut u8,
        len: usize,
        flags: u32,
    ) -> Result<CudaHostRegistration> {
        if ptr.is_null() {
            return Err(Error::InvalidArgument { name: "ptr", reason: "null pointer".into() });
        }
        check_alloc_size(len)?;
        self.ctx.bind()?;
        // SAFETY: the caller guarantees the range is valid and outlives the registration.
        unsafe { sys::cuMemHostRegister_v2(ptr as *mut c_void, len, flags) }
            .result()
            .map_err(|e| driver_error("cuMemHostRegister", e))?;
        Ok(CudaHostRegistration { ptr, len, ctx: self.ctx.clone() })
    }

    /// The device's default memory pool (the one `cuMemAllocAsync` uses).
    fn default_mem_pool(&self) -> Result<sys::CUmemoryPool> {
        if !self.info.stream_ordered_alloc {
            return Err(Error::Unsupported {
                op: "stream-ordered memory pools",
                backend: BackendKind::Cuda,
                hint: Some(format!("{} does not support cuMemAllocAsync", self.info.name)),
            });
        }
        self.ctx.bind()?;
        let mut pool = std::ptr::null_mut();
        // SAFETY: writes one pool handle for a device of this context.
        unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, self.ctx.cu_device) }
            .result()
            .map_err(|e| driver_error("cuDeviceGetDefaultMemPool", e))?;
        Ok(pool)
    }

    /// Sets `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD` of the default pool: memory
    /// above it goes back to the driver at the next synchronization.
    pub(crate) fn set_pool_release_threshold(&self, bytes: u64) -> Result<()> {
        let pool = self.default_mem_pool()?;
        // SAFETY: the default pool lives as long as the device.
        unsafe { set_release_threshold(pool, bytes) }
    }

    /// Bytes the default pool holds from the driver now (`RESERVED_MEM_CURRENT`).
    pub(crate) fn pool_reserved(&self) -> Result<u64> {
        let pool = self.default_mem_pool()?;
        let mut value = 0u64;
        // SAFETY: the attribute is a cuuint64_t, written into `value`.
        unsafe {
            sys::cuMemPoolGetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                &mut value as *mut u64 as *mut c_void,
            )
        }
        .result()
        .map_err(|e| driver_error("cuMemPoolGetAttribute", e))?;
        Ok(value)
    }

    /// Releases the default pool's unused memory down to `keep` bytes.
    pub(crate) fn trim_pool(&self, keep: usize) -> Result<()> {
        let pool = self.default_mem_pool()?;
        // SAFETY: the default pool lives as long as the device.
        unsafe { trim_to(pool, keep) }
    }

    /// `cuIpcGetMemHandle` for the allocation containing `ptr`, and that allocation's base.
    pub(crate) fn ipc_get_handle(&self, ptr: u64) -> Result<(IpcBytes, u64)> {
        self.ctx.bind()?;
        let (mut base, mut size) = (0, 0usize);
        // SAFETY: writes the base and size of the allocation containing `ptr`.
        unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) }
            .result()
            .map_err(|e| driver_error("cuMemGetAddressRange", e))?;
        let mut handle = std::mem::MaybeUninit::<sys::CUipcMemHandle>::uninit();
        // SAFETY: writes one 64-byte handle; pool (cuMemAllocAsync) memory is refused by the driver.
        unsafe { sys::cuIpcGetMemHandle(handle.as_mut_ptr(), base) }
            .result()
            .map_err(|e| driver_error("cuIpcGetMemHandle", e))?;
        // SAFETY: initialized by the successful call above.
        let handle = unsafe { handle.assume_init() };
        Ok((handle.reserved.map(|b| b as u8), base))
    }

    /// `cuIpcOpenMemHandle`: maps another process's allocation; returns its base here.
    pub(crate) fn ipc_open(&self, bytes: &IpcBytes) -> Result<u64> {
        self.ctx.bind()?;
        let handle = sys::CUipcMemHandle { reserved: bytes.map(|b| b as std::ffi::c_char) };
        let mut ptr = 0;
        // SAFETY: writes one device pointer; a stale or foreign handle is reported as an error.
        unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                handle,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as std::ffi::c_uint,
            )
        }
        .result()
        .map_err(|e| driver_error("cuIpcOpenMemHandle", e))?;
        Ok(ptr)
    }

    /// `cuIpcCloseMemHandle` on a base returned by [`ipc_open`](Self::ipc_open).
    ///
    /// # Safety
    /// `base` came from `ipc_open` on this device and is closed once, after its last use.
    pub(crate) unsafe fn ipc_close(&self, base: u64) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the caller's contract.
        unsafe { sys::cuIpcCloseMemHandle(base) }.result().map_err(|e| driver_error("cuIpcCloseMemHandle", e))
    }

    // ---- pools of our own that other processes can import ----------------------------
    //
    // CUDA's documented way to share stream-ordered memory (the
    // streamOrderedAllocationIPC sample): a pool created with a shareable
    // handle type, exported once as a POSIX file descriptor, and each block
    // exported as 64 bytes of `CUmemPoolPtrExportData`. The methods below
    // are `MemoryDevice`'s of the same names; their contracts are there.

    /// `cuMemPoolCreate`: pinned memory of this device, exportable as a POSIX
    /// file descriptor (`CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`).
    pub(crate) fn create_shareable_pool(&self) -> Result<RawPool> {
        self.default_mem_pool()?; // the same "no stream-ordered pools" error
        let handle_types =
            attribute(self.ctx.cu_device, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES)?;
        let posix_fd = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        if handle_types as u32 & posix_fd.0 == 0 {
            return Err(Error::Unsupported {
                op: "IPC of stream-ordered pool memory",
                backend: BackendKind::Cuda,
                hint: Some(format!(
                    "{} (or its driver) cannot export pools as POSIX file descriptors \
                     (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES = {handle_types:#x}); share memory of \
                     CachingPool or PlainResource instead, which use cuIpcGetMemHandle",
                    self.info.name
                )),
            });
        }
        // SAFETY: CUmemPoolProps is a C struct of enums with a 0 value, an
        // int, a pointer, sizes and reserved bytes: all zero is valid, and is
        // what the driver requires of the fields not set below.
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = posix_fd;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = self.ctx.cu_device;
        let mut pool = std::ptr::null_mut();
        // SAFETY: the context is current (default_mem_pool bound it); writes one pool handle.
        unsafe { sys::cuMemPoolCreate(&mut pool, &props) }.result().map_err(|e| driver_error("cuMemPoolCreate", e))?;
        Ok(RawPool(pool as usize))
    }

    /// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD` of one of our pools.
    pub(crate) unsafe fn pool_set_release_threshold(&self, pool: RawPool, bytes: u64) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the caller's contract: a live pool of this device.
        unsafe { set_release_threshold(cu_pool(pool), bytes) }
    }

    /// `cuMemPoolTrimTo` on one of our pools.
    pub(crate) unsafe fn pool_trim(&self, pool: RawPool, keep: usize) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the caller's contract: a live pool of this device.
        unsafe { trim_to(cu_pool(pool), keep) }
    }

    /// `cuMemAllocFromPoolAsync`; the buffer is freed with `cuMemFreeAsync` on `stream`.
    pub(crate) unsafe fn pool_alloc(&self, pool: RawPool, bytes: usize, stream: &CudaStream) -> Result<CudaBuffer> {
        check_alloc_size(bytes)?;
        self.check_stream(stream)?;
        self.ctx.bind()?;
        let mut ptr = 0;
        // SAFETY: a live pool of this device (the caller's contract) and a
        // stream of this context (checked); the buffer keeps the stream alive to free on it.
        unsafe { sys::cuMemAllocFromPoolAsync(&mut ptr, bytes, cu_pool(pool), stream.inner.raw) }
            .result()
            .map_err(|e| self.out_of_memory("cuMemAllocFromPoolAsync", bytes, e))?;
        Ok(self.buffer(ptr, bytes, MemoryKind::Device, Some(stream.clone())))
    }

    /// `cuMemPoolDestroy`.
    pub(crate) unsafe fn pool_destroy(&self, pool: RawPool) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the caller's contract: live, destroyed once, not used after.
        unsafe { sys::cuMemPoolDestroy(cu_pool(pool)) }.result().map_err(|e| driver_error("cuMemPoolDestroy", e))
    }

    /// `cuMemPoolExportToShareableHandle`: a new descriptor, which the caller owns.
    pub(crate) unsafe fn pool_export(&self, pool: RawPool) -> Result<ExportedPoolFd> {
        self.ctx.bind()?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR the driver
        // writes one int; the pool is live (the caller's contract); flags must be 0.
        unsafe {
            sys::cuMemPoolExportToShareableHandle(
                &mut fd as *mut std::ffi::c_int as *mut c_void,
                cu_pool(pool),
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        }
        .result()
        .map_err(|e| driver_error("cuMemPoolExportToShareableHandle", e))?;
        Ok(ExportedPoolFd { fd, caller_closes: true })
    }

    /// `cuMemPoolExportPointer` for the pool block at `ptr`.
    pub(crate) fn pool_export_pointer(&self, ptr: u64) -> Result<IpcBytes> {
        self.ctx.bind()?;
        let mut data = sys::CUmemPoolPtrExportData { reserved: [0; 64] };
        // SAFETY: writes 64 bytes; memory not of an exportable pool is reported as an error.
        unsafe { sys::cuMemPoolExportPointer(&mut data, ptr) }
            .result()
            .map_err(|e| driver_error("cuMemPoolExportPointer", e))?;
        Ok(data.reserved)
    }

    /// `cuMemPoolImportFromShareableHandle`, then read-write access for this
    /// device where the imported pool does not grant it already (as the
    /// streamOrderedAllocationIPC sample does).
    pub(crate) unsafe fn pool_import(&self, fd: i32) -> Result<RawPool> {
        self.ctx.bind()?;
        let mut pool = std::ptr::null_mut();
        // SAFETY: the driver takes a POSIX descriptor as its value cast to a
        // pointer (as the sample passes it); it is open (the caller's
        // contract) and stays ours: the driver does not close it.
        unsafe {
            sys::cuMemPoolImportFromShareableHandle(
                &mut pool,
                fd as isize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        }
        .result()
        .map_err(|e| driver_error("cuMemPoolImportFromShareableHandle", e))?;
        // SAFETY: `pool` was just imported; on failure it is destroyed once, here.
        unsafe { self.grant_access(pool) }.inspect_err(|_| {
            // SAFETY: as above.
            let _ = unsafe { sys::cuMemPoolDestroy(pool) };
        })?;
        Ok(RawPool(pool as usize))
    }

    /// Read-write access to `pool` for this device, if it lacks it.
    ///
    /// # Safety
    /// `pool` is a live pool; the context is current.
    unsafe fn grant_access(&self, pool: sys::CUmemoryPool) -> Result<()> {
        let mut location =
            sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: self.ctx.cu_device };
        let read_write = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
        // SAFETY: writes one flags value for a live pool (the caller's contract).
        unsafe { sys::cuMemPoolGetAccess(&mut flags, pool, &mut location) }
            .result()
            .map_err(|e| driver_error("cuMemPoolGetAccess", e))?;
        if flags == read_write {
            return Ok(());
        }
        let desc = sys::CUmemAccessDesc { location, flags: read_write };
        // SAFETY: one descriptor, read by the driver during the call.
        unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) }.result().map_err(|e| driver_error("cuMemPoolSetAccess", e))
    }

    /// `cuMemPoolImportPointer`: the block's address in this process.
    pub(crate) unsafe fn pool_import_pointer(&self, pool: RawPool, data: &IpcBytes) -> Result<u64> {
        self.ctx.bind()?;
        let mut data = sys::CUmemPoolPtrExportData { reserved: *data };
        let mut ptr = 0;
        // SAFETY: an imported pool of this device (the caller's contract);
        // the driver reads the 64 bytes and writes one pointer.
        unsafe { sys::cuMemPoolImportPointer(&mut ptr, cu_pool(pool), &mut data) }
            .result()
            .map_err(|e| driver_error("cuMemPoolImportPointer", e))?;
        Ok(ptr)
    }

    /// `cuMemFree` of an imported pool block (the driver documents cuMemFree
    /// or cuMemFreeAsync for these; the synchronous one completes before the
    /// exporter may free the block).
    pub(crate) unsafe fn pool_free_imported(&self, ptr: u64) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the caller's contract: imported here, freed once, no queued work uses it.
        unsafe { sys::cuMemFree_v2(ptr) }.result().map_err(|e| driver_error("cuMemFree", e))
    }
}

/// A [`RawPool`] as the driver's handle.
fn cu_pool(pool: RawPool) -> sys::CUmemoryPool {
    pool.0 as sys::CUmemoryPool
}

/// Sets `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD` of `pool`.
///
/// # Safety
/// `pool` is live; its device's context is current.
unsafe fn set_release_threshold(pool: sys::CUmemoryPool, bytes: u64) -> Result<()> {
    let mut value = bytes;
    // SAFETY: the attribute takes a cuuint64_t, which `value` is; the pool is live (the caller's contract).
    unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut value as *mut u64 as *mut c_void,
        )
    }
    .result()
    .map_err(|e| driver_error("cuMemPoolSetAttribute", e))
}

/// `cuMemPoolTrimTo`: releases `pool`'s unused memory down to `keep` bytes.
///
/// # Safety
/// As [`set_release_threshold`].
unsafe fn trim_to(pool: sys::CUmemoryPool, keep: usize) -> Result<()> {
    // SAFETY: a live pool (the caller's contract); trimming never frees memory in use.
    unsafe { sys::cuMemPoolTrimTo(pool, keep) }.result().map_err(|e| driver_error("cuMemPoolTrimTo", e))
}

impl Device for CudaDevice {
    type B = Cuda;

    fn open(ordinal: usize) -> Result<Arc<Self>> {
        let driver_version = driver()?;
        let mut devices = open_devices().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(dev) = devices.get(&ordinal) {
            return Ok(dev.clone());
        }
        let count = Self::count()?;
        if ordinal >= count {
            return Err(Error::InvalidDeviceSpec {
                spec: format!("cuda:{ordinal}"),
                reason: format!("there are {count} CUDA devices (cuda:0..cuda:{})", count.saturating_sub(1)),
            });
        }
        let cu_device = check("cuDeviceGet", cu::device::get(ordinal as i32))?;
        let info = query_info(cu_device, ordinal)?;
        // SAFETY: `cu_device` came from `cuDeviceGet`; released in `Context::drop`.
        let raw = check("cuDevicePrimaryCtxRetain", unsafe { cu::primary_ctx::retain(cu_device) })?;
        let ctx = Arc::new(Context { raw, cu_device, ordinal, driver_version });
        let default_stream = CudaStream {
            inner: Arc::new(StreamInner {
                raw: cu::stream::null(),
                id: super::next_stream_id(),
                owned: false,
                ctx: ctx.clone(),
            }),
        };
        let dev = Arc::new(CudaDevice {
            info,
            ctx,
            default_stream,
            builtins: Mutex::new(None),
            builtins_prebuilt: std::sync::atomic::AtomicBool::new(false),
            array_kernels: Default::default(),
        });
        devices.insert(ordinal, dev.clone());
        Ok(dev)
    }

    fn count() -> Result<usize> {
        driver()?;
        match cu::device::get_count() {
            Ok(0) => Err(Error::NoDevice { backend: BackendKind::Cuda, reason: "driver loaded, no device".into() }),
            Ok(n) => Ok(n as usize),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => Err(Error::NoDevice {
                backend: BackendKind::Cuda,
                reason: "driver loaded, no device (CUDA_ERROR_NO_DEVICE)".into(),
            }),
            Err(e) => Err(driver_error("cuDeviceGetCount", e)),
        }
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        self.ctx.bind()?;
        let (free, total) = check("cuMemGetInfo", cu::mem_get_info())?;
        Ok(MemoryInfo { free, total })
    }

    fn alloc(&self, bytes: usize) -> Result<CudaBuffer> {
        check_alloc_size(bytes)?;
        self.ctx.bind()?;
        // SAFETY: the context is current; the memory is returned uninitialized as documented.
        let ptr = unsafe { cu::malloc_sync(bytes) }.map_err(|e| self.out_of_memory("cuMemAlloc", bytes, e))?;
        Ok(self.buffer(ptr, bytes, MemoryKind::Device, None))
    }

    fn alloc_async(&self, bytes: usize, stream: &CudaStream) -> Result<CudaBuffer> {
        check_alloc_size(bytes)?;
        self.check_stream(stream)?;
        if !self.info.stream_ordered_alloc {
            return self.alloc(bytes);
        }
        self.ctx.bind()?;
        // SAFETY: the stream belongs to this context (checked); the buffer
        // keeps the stream alive to free on it.
        let ptr = unsafe { cu::malloc_async(stream.inner.raw, bytes) }
            .map_err(|e| self.out_of_memory("cuMemAllocAsync", bytes, e))?;
        Ok(self.buffer(ptr, bytes, MemoryKind::Device, Some(stream.clone())))
    }

    fn alloc_managed(&self, bytes: usize) -> Result<CudaBuffer> {
        check_alloc_size(bytes)?;
        if !self.info.managed_memory {
            return Err(Error::Unsupported {
                op: "managed memory",
                backend: BackendKind::Cuda,
                hint: Some(format!("{} does not support managed memory", self.info.name)),
            });
        }
        self.ctx.bind()?;
        // SAFETY: the context is current.
        let ptr = unsafe { cu::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
            .map_err(|e| self.out_of_memory("cuMemAllocManaged", bytes, e))?;
        Ok(self.buffer(ptr, bytes, MemoryKind::Managed, None))
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<CudaPinnedBuffer> {
        check_alloc_size(bytes)?;
        self.ctx.bind()?;
        // SAFETY: the context is current; PORTABLE makes it pinned for every context.
        let ptr = unsafe { cu::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map_err(|e| self.out_of_memory("cuMemHostAlloc", bytes, e))? as *mut u8;
        // SAFETY: `ptr` addresses `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(CudaPinnedBuffer { ptr, len: bytes, ctx: self.ctx.clone() })
    }

    unsafe fn register_host(&self, ptr: *mut u8, len: usize) -> Result<CudaHostRegistration> {
        if ptr.is_null() {
            return Err(Error::InvalidArgument { name: "ptr", reason: "null pointer".into() });
        }
        check_alloc_size(len)?;
        self.ctx.bind()?;
        // SAFETY: the caller guarantees `ptr..ptr+len` is valid host memory
        // outliving the registration.
        unsafe { sys::cuMemHostRegister_v2(ptr as *mut c_void, len, sys::CU_MEMHOSTREGISTER_PORTABLE) }
            .result()
            .map_err(|e| driver_error("cuMemHostRegister", e))?;
        Ok(CudaHostRegistration { ptr, len, ctx: self.ctx.clone() })
    }

    fn default_stream(&self) -> &CudaStream {
        &self.default_stream
    }

    fn create_stream(&self) -> Result<CudaStream> {
        self.ctx.bind()?;
        let raw = check("cuStreamCreate", cu::stream::create(cu::stream::StreamKind::NonBlocking))?;
        Ok(CudaStream {
            inner: Arc::new(StreamInner { raw, id: super::next_stream_id(), owned: true, ctx: self.ctx.clone() }),
        })
    }

    fn stream_id(&self, stream: &CudaStream) -> Option<u64> {
        Some(stream.inner.id)
    }

    fn synchronize(&self, stream: &CudaStream) -> Result<()> {
        self.check_stream(stream)?;
        self.ctx.bind()?;
        // SAFETY: the stream is alive (we hold it) and belongs to this context.
        check("cuStreamSynchronize", unsafe { cu::stream::synchronize(stream.inner.raw) })
    }

    fn synchronize_device(&self) -> Result<()> {
        self.ctx.bind()?;
        check("cuCtxSynchronize", cu::ctx::synchronize())
    }

    fn is_idle(&self, stream: &CudaStream) -> Result<bool> {
        self.check_stream(stream)?;
        self.ctx.bind()?;
        // SAFETY: the stream is alive and belongs to this context.
        match unsafe { sys::cuStreamQuery(stream.inner.raw) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(driver_error("cuStreamQuery", cu::DriverError(e))),
        }
    }

    fn create_event(&self) -> Result<CudaEvent> {
        self.ctx.bind()?;
        let raw = check("cuEventCreate", cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        Ok(CudaEvent { raw, ctx: self.ctx.clone() })
    }

    fn record_event(&self, event: &CudaEvent, stream: &CudaStream) -> Result<()> {
        self.check_stream(stream)?;
        check_same_device("event", BackendKind::Cuda, self.info.ordinal, event.ctx.ordinal)?;
        self.ctx.bind()?;
        // SAFETY: both handles are alive and belong to this context.
        check("cuEventRecord", unsafe { cu::event::record(event.raw, stream.inner.raw) })
    }

    fn wait_event(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        self.check_stream(stream)?;
        self.ctx.bind()?;
        // SAFETY: both handles are alive; an event of another device is allowed by CUDA.
        check("cuStreamWaitEvent", unsafe {
            cu::stream::wait_event(stream.inner.raw, event.raw, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        })
    }

    fn synchronize_event(&self, event: &CudaEvent) -> Result<()> {
        event.ctx.bind()?;
        // SAFETY: the event is alive.
        check("cuEventSynchronize", unsafe { cu::event::synchronize(event.raw) })
    }

    fn event_is_complete(&self, event: &CudaEvent) -> Result<bool> {
        event.ctx.bind()?;
        // SAFETY: the event is alive.
        match unsafe { sys::cuEventQuery(event.raw) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(driver_error("cuEventQuery", cu::DriverError(e))),
        }
    }

    fn elapsed_ms(&self, start: &CudaEvent, end: &CudaEvent) -> Result<f32> {
        self.ctx.bind()?;
        // SAFETY: both events are alive; the driver reports unrecorded or incomplete events as errors.
        check("cuEventElapsedTime", unsafe { cu::event::elapsed(start.raw, end.raw) })
    }

    unsafe fn copy_to_device_async<M: DeviceMemory<B = Cuda> + ?Sized>(
        &self,
        src: &[u8],
        dst: &M,
        dst_offset: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_buffer("destination buffer", dst)?;
        self.check_stream(stream)?;
        check_range("destination", dst_offset, src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: range checked; the caller keeps `src` and `dst` alive until the stream passes the copy.
        check("cuMemcpyHtoDAsync", unsafe {
            cu::memcpy_htod_async(dst.device_ptr() + dst_offset as u64, src, stream.inner.raw)
        })
    }

    unsafe fn copy_to_host_async<M: DeviceMemory<B = Cuda> + ?Sized>(
        &self,
        src: &M,
        src_offset: usize,
        dst: &mut [u8],
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_buffer("source buffer", src)?;
        self.check_stream(stream)?;
        check_range("source", src_offset, dst.len(), src.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: range checked; the caller keeps both alive until the stream passes the copy.
        check("cuMemcpyDtoHAsync", unsafe {
            cu::memcpy_dtoh_async(dst, src.device_ptr() + src_offset as u64, stream.inner.raw)
        })
    }

    unsafe fn copy_device_async<S: DeviceMemory<B = Cuda> + ?Sized, M: DeviceMemory<B = Cuda> + ?Sized>(
        &self,
        src: &S,
        src_offset: usize,
        dst: &M,
        dst_offset: usize,
        len: usize,
        stream: &CudaStream,
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
        check("cuMemcpyDtoDAsync", unsafe {
            cu::memcpy_dtod_async(
                dst.device_ptr() + dst_offset as u64,
                src.device_ptr() + src_offset as u64,
                len,
                stream.inner.raw,
            )
        })
    }

    unsafe fn memset_async<M: DeviceMemory<B = Cuda> + ?Sized>(
        &self,
        dst: &M,
        offset: usize,
        len: usize,
        value: u8,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_buffer("destination buffer", dst)?;
        self.check_stream(stream)?;
        check_range("destination", offset, len, dst.len())?;
        if len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: range checked; the caller keeps `dst` alive until the stream passes the memset.
        check("cuMemsetD8Async", unsafe {
            cu::memset_d8_async(dst.device_ptr() + offset as u64, value, len, stream.inner.raw)
        })
    }

    fn load_module(&self, source: ModuleSource<'_>) -> Result<CudaModule> {
        match source {
            ModuleSource::Builtin => {
                let mut cached = self.builtins.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(module) = cached.as_ref() {
                    return Ok(module.clone());
                }
                // The fatbin from build.rs if there is one and this GPU can
                // run it (SASS or PTX for its architecture), else NVRTC.
                let prebuilt = PREBUILT
                    .filter(|_| std::env::var_os(FORCE_NVRTC_ENV).is_none())
                    .and_then(|fatbin| self.load_image(fatbin.as_ptr() as *const c_void).ok());
                let module = match prebuilt {
                    Some(module) => {
                        self.builtins_prebuilt.store(true, std::sync::atomic::Ordering::Release);
                        module
                    }
                    None => {
                        let cubin = self.compile(BUILTIN_SOURCE, "gpuport_builtins.cu", &[], &[])?;
                        self.load_image(cubin.as_ptr() as *const c_void)?
                    }
                };
                *cached = Some(module.clone());
                Ok(module)
            }
            ModuleSource::Source { code, name, options } => {
                let cubin = self.compile(code, name, options, &[])?;
                self.load_image(cubin.as_ptr() as *const c_void)
            }
            ModuleSource::Ptx(ptx) => {
                let ptx = CString::new(ptx)
                    .map_err(|_| Error::InvalidArgument { name: "ptx", reason: "PTX contains a NUL byte".into() })?;
                self.load_image(ptx.as_ptr() as *const c_void)
            }
            ModuleSource::Binary(image) => {
                // cubin and fatbin images start with their magic numbers; reject
                // anything else rather than let the driver read past a short buffer.
                const ELF: &[u8] = b"\x7fELF";
                const FATBIN: [u8; 4] = 0xBA55_ED50u32.to_le_bytes();
                if !(image.starts_with(ELF) || image.starts_with(&FATBIN)) {
                    return Err(Error::InvalidArgument {
                        name: "image",
                        reason: "not a cubin (ELF) or fatbin image; pass PTX text as ModuleSource::Ptx".into(),
                    });
                }
                self.load_image(image.as_ptr() as *const c_void)
            }
        }
    }

    fn kernel(&self, module: &CudaModule, name: &str) -> Result<CudaKernel> {
        let builtin = self.builtins.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|b| b.same(module));
        self.kernel_in(module, name, builtin)
    }

    fn builtin_kernel(&self, name: &str) -> Result<CudaKernel> {
        let module = self.load_module(ModuleSource::Builtin)?;
        crate::kernels::builtin_kernel_from(
            || self.kernel(&module, name),
            self.builtins_prebuilt.load(std::sync::atomic::Ordering::Acquire),
            &self.array_kernels,
            ARRAY_OPS_SOURCE,
            name,
            |program| {
                let cubin = self.compile(program, &format!("{name}.cu"), &[], BUILTIN_HEADERS)?;
                self.kernel_in(&self.load_image(cubin.as_ptr() as *const c_void)?, name, true)
            },
        )
    }

    fn default_launch_config(&self, kernel: &CudaKernel, n: usize) -> Result<LaunchConfig> {
        self.ctx.bind()?;
        // SAFETY: the kernel's module is alive; no dynamic shared memory callback.
        let (_, block) = check("cuOccupancyMaxPotentialBlockSize", unsafe {
            cu::occupancy::max_potential_block_size(kernel.func, None, 0, 0)
        })?;
        LaunchConfig::for_elements(n, block.max(1) as u32)
    }

    fn resident_launch_config(&self, kernel: &CudaKernel, n: usize) -> Result<LaunchConfig> {
        self.ctx.bind()?;
        // SAFETY: the kernel's module is alive; no dynamic shared memory callback.
        let (min_grid, block) = check("cuOccupancyMaxPotentialBlockSize", unsafe {
            cu::occupancy::max_potential_block_size(kernel.func, None, 0, 0)
        })?;
        let block = block.max(1) as u32;
        let needed = n.div_ceil(block as usize).max(1);
        Ok(LaunchConfig::linear(needed.min(min_grid.max(1) as usize) as u32, block))
    }

    unsafe fn launch(
        &self,
        kernel: &CudaKernel,
        config: LaunchConfig,
        args: &KernelArgs,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_stream(stream)?;
        check_same_device("kernel", BackendKind::Cuda, self.info.ordinal, kernel.module.inner.ctx.ordinal)?;
        kernel.params.check(kernel, args)?;
        config.validate(&self.info.limits)?;
        self.ctx.bind()?;
        // Parameter pointers live on the stack for up to 16 arguments: no
        // allocation on the launch path.
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
        // which outlives this call (the driver copies parameters at launch);
        // the caller guarantees argument types and buffer lifetimes.
        check("cuLaunchKernel", unsafe {
            cu::launch_kernel(
                kernel.func,
                (gx, gy, gz),
                (bx, by, bz),
                config.shared_mem_bytes,
                stream.inner.raw,
                pointers,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::builtin;

    #[test]
    fn builtin_source_defines_every_builtin_kernel() {
        let src = include_str!("../../kernels/cuda/builtins.cu");
        for name in builtin::ALL {
            assert!(src.contains(&format!("void {name}(")), "{name} missing from kernels/cuda/builtins.cu");
        }
    }

    #[test]
    fn builtin_program_includes_only_headers_it_is_given() {
        for line in super::BUILTIN_SOURCE
            .lines()
            .chain(super::ARRAY_OPS_SOURCE.lines())
            .chain(super::BUILTIN_HEADERS.iter().flat_map(|(_, t)| t.lines()))
        {
            if let Some(rest) = line.trim().strip_prefix("#include") {
                let name = rest.trim().trim_matches(|c| c == '"' || c == '<' || c == '>');
                assert!(
                    super::BUILTIN_HEADERS.iter().any(|(n, _)| *n == name) || name == "stdint.h",
                    "{name} is included but not served to NVRTC"
                );
            }
        }
    }
}
