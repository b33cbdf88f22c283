//! The CUDA backend (feature `cuda`): the CUDA driver table of the generic
//! GPU core ([`super::gpu`]), on cudarc's `sys`/`result` layers.
//!
//! cudarc is built with `dynamic-loading`: `libcuda` and `libnvrtc` are
//! opened at run time, so a binary with this backend starts on machines
//! without CUDA; `loading.rs` picks the files first (a copy already
//! loaded, `GPUPORT_CUDA_LIBRARY` / `GPUPORT_NVRTC_LIBRARY`, pip wheels,
//! the loader path). cudarc panics when a library it needs cannot be loaded, so
//! every entry point first probes for the library (`driver`) and turns its
//! absence into [`Error::LibraryNotFound`].
//!
//! cudarc also resolves each driver symbol lazily and panics if the driver is
//! too old to have it: calls newer than CUDA 12.0 are gated on
//! `cuDriverGetVersion` (see `DRIVER_12_4`), and `cuFuncGetParamCount` is
//! looked up by hand (`param_count`).
//!
//! [`CudaDriver`] is one device's retained primary context, held by every
//! object the device hands out. What CUDA does that HIP does not:
//! - built-in kernels precompiled by nvcc at build time, where it ran
//!   (`PREBUILT`), and NVRTC output kept in the on-disk kernel cache;
//! - a module's kernels can be listed (driver 12.4+), and a kernel's
//!   parameter sizes asked for (see `CudaDriver::kernel_params`);
//! - resident grids from the occupancy call (`RESIDENT_GRIDS`);
//! - foreign streams can be borrowed ([`CudaDevice::borrow_stream`]).
//!
//! `mod.rs`: errors and the [`CudaDriver`] table; `loading.rs`: finding,
//! loading and initializing libcuda and NVRTC; `info.rs`: a device's
//! properties; `nvrtc.rs`: the compiler; `graph.rs`: capture and graphs;
//! `peer.rs`: peer access and peer copies.

use std::ffi::{c_void, CStr, CString};
use std::sync::OnceLock;

use cudarc::driver::result as cu;
use cudarc::driver::sys;

mod graph;
mod info;
mod loading;
mod managed;
mod nvrtc;
mod peer;
mod vmm;

use info::{attribute, query_info};
pub(crate) use loading::driver;

use super::gpu::{self, Driver, Params, Program};
use super::{DeviceInfo, ExportedPoolFd, IpcBytes, LaunchConfig, MemoryInfo, RawPool};
use crate::error::{BackendKind, Error, Result};

/// The runtime's built-in kernels ([`ModuleSource::Builtin`](super::ModuleSource::Builtin)).
const BUILTIN_SOURCE: &str = include_str!("../../../kernels/cuda/builtins.cu");
/// The array kernels' dialect file; each kernel is compiled alone from it.
const ARRAY_OPS_SOURCE: &str = include_str!("../../../kernels/cuda/array_ops.cu");

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

gpu::vendor_types! {
    CudaDriver, "CUDA", "cuda" => Cuda, CudaDevice, CudaStream, CudaEvent, CudaBuffer, CudaPinnedBuffer,
    CudaHostRegistration, CudaModule, CudaKernel
}

// ---- errors ----------------------------------------------------------------------

/// Attaches the call name to a cudarc result.
fn check<T>(call: &'static str, r: std::result::Result<T, cu::DriverError>) -> Result<T> {
    r.map_err(|e| gpu::driver_error::<CudaDriver>(call, e.0))
}

/// Attaches the call name to a raw driver status.
fn status(call: &'static str, status: sys::CUresult) -> Result<()> {
    gpu::check::<CudaDriver>(call, status)
}

// ---- the driver --------------------------------------------------------------------

/// The CUDA driver as one device sees it: the device's retained primary
/// context, released when the last object using it goes.
pub struct CudaDriver {
    raw: sys::CUcontext,
    cu_device: sys::CUdevice,
    ordinal: usize,
    driver_version: i32,
    /// Marker events kept for reuse (`gpu/event_pool.rs`).
    marker_events: gpu::EventPool<sys::CUevent>,
}

// SAFETY: CUDA contexts may be used from any thread; we bind before each use.
unsafe impl Send for CudaDriver {}
// SAFETY: as above; the driver API is thread-safe.
unsafe impl Sync for CudaDriver {}

impl Drop for CudaDriver {
    fn drop(&mut self) {
        // The pooled events first, while the context is still retained.
        gpu::destroy_pooled_events(self);
        // SAFETY: `cu_device` came from `cuDeviceGet` and we retained its
        // primary context exactly once in `CudaDriver::open`.
        let _ = unsafe { cu::primary_ctx::release(self.cu_device) };
    }
}

// SAFETY: every method makes the CUDA call its name says on this context's
// device and reports failure as an error; CUDA handles may be used from any
// thread once the context is current there.
unsafe impl Driver for CudaDriver {
    const KIND: BackendKind = BackendKind::Cuda;

    const NAME: &'static str = "Cuda";

    const PLATFORM: &'static str = "CUDA";

    type Status = sys::CUresult;

    const SUCCESS: sys::CUresult = sys::CUresult::CUDA_SUCCESS;

    const NOT_READY: sys::CUresult = sys::CUresult::CUDA_ERROR_NOT_READY;

    const OUT_OF_MEMORY: sys::CUresult = sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY;

    fn code(status: sys::CUresult) -> i64 {
        status as i64
    }

    fn error_name(status: sys::CUresult) -> String {
        let e = cu::DriverError(status);
        e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{status:?}"))
    }

    fn error_string(status: sys::CUresult) -> String {
        let mut message =
            cu::DriverError(status).error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if status == sys::CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED {
            // Seen after `numba.cuda.close()`, which resets the primary context
            // that every library in the process shares.
            message.push_str(
                " (another library reset the device's primary context, e.g. numba.cuda.close() or \
                 cudaDeviceReset(): memory, streams and modules made before are gone, and this device \
                 cannot be used again in this process)",
            );
        }
        message
    }

    fn count() -> Result<usize> {
        driver()?;
        match cu::device::get_count() {
            Ok(0) => Err(Error::NoDevice { backend: BackendKind::Cuda, reason: "driver loaded, no device".into() }),
            Ok(n) => usize::try_from(n).map_err(|_| Error::NoDevice {
                backend: BackendKind::Cuda,
                reason: format!("cuDeviceGetCount reported {n} devices"),
            }),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => Err(Error::NoDevice {
                backend: BackendKind::Cuda,
                reason: "driver loaded, no device (CUDA_ERROR_NO_DEVICE)".into(),
            }),
            Err(e) => Err(gpu::driver_error::<Self>("cuDeviceGetCount", e.0)),
        }
    }

    fn open(ordinal: usize) -> Result<(Self, DeviceInfo)> {
        let driver_version = driver()?;
        let id = std::ffi::c_int::try_from(ordinal).map_err(|_| Error::InvalidDeviceSpec {
            spec: format!("cuda:{ordinal}"),
            reason: "the ordinal is out of the driver's int range".into(),
        })?;
        let cu_device = check("cuDeviceGet", cu::device::get(id))?;
        let info = query_info(cu_device, ordinal)?;
        // SAFETY: `cu_device` came from `cuDeviceGet`; released in `CudaDriver::drop`.
        let raw = check("cuDevicePrimaryCtxRetain", unsafe { cu::primary_ctx::retain(cu_device) })?;
        // SAFETY: CUDA events may be used from any thread (the `Driver` contract).
        let marker_events = unsafe { gpu::EventPool::per_device() };
        Ok((CudaDriver { raw, cu_device, ordinal, driver_version, marker_events }, info))
    }

    fn ordinal(&self) -> usize {
        self.ordinal
    }

    fn bind(&self) -> Result<()> {
        // Asked once per `bound::scope` (`src/backend/bound.rs`).
        crate::backend::bound::bind_once(BackendKind::Cuda, self.raw as usize, || {
            if check("cuCtxGetCurrent", cu::ctx::get_current())? != Some(self.raw) {
                // SAFETY: `raw` is a retained primary context, alive while `self` is.
                check("cuCtxSetCurrent", unsafe { cu::ctx::set_current(self.raw) })?;
            }
            Ok(())
        })
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        let (free, total) = check("cuMemGetInfo", cu::mem_get_info())?;
        Ok(MemoryInfo { free, total })
    }

    fn synchronize_device(&self) -> Result<()> {
        check("cuCtxSynchronize", cu::ctx::synchronize())
    }

    const ASYNC_ALLOC: &'static str = "cuMemAllocAsync";

    unsafe fn alloc(&self, bytes: usize) -> Result<u64> {
        // SAFETY: the context is current (the caller's contract).
        check("cuMemAlloc", unsafe { cu::malloc_sync(bytes) })
    }

    unsafe fn alloc_async(&self, bytes: usize, stream: sys::CUstream) -> Result<u64> {
        // SAFETY: the context is current and `stream` is one of it (the caller's contract).
        check("cuMemAllocAsync", unsafe { cu::malloc_async(stream, bytes) })
    }

    unsafe fn alloc_managed(&self, bytes: usize) -> Result<u64> {
        // SAFETY: the context is current (the caller's contract).
        check("cuMemAllocManaged", unsafe { cu::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) })
    }

    unsafe fn free(&self, ptr: u64, stream: Option<sys::CUstream>) -> Result<()> {
        match stream {
            // SAFETY: the caller's contract: allocated here on `stream`, freed once.
            Some(stream) => check("cuMemFreeAsync", unsafe { cu::free_async(ptr, stream) }),
            // SAFETY: the caller's contract: allocated here, freed once.
            None => check("cuMemFree", unsafe { cu::free_sync(ptr) }),
        }
    }

    const HOST_ALLOC_PORTABLE: u32 = sys::CU_MEMHOSTALLOC_PORTABLE;

    const HOST_ALLOC_MAPPED: u32 = sys::CU_MEMHOSTALLOC_DEVICEMAP;

    const HOST_ALLOC_WRITE_COMBINED: u32 = sys::CU_MEMHOSTALLOC_WRITECOMBINED;

    unsafe fn host_alloc(&self, bytes: usize, flags: u32) -> Result<*mut u8> {
        // SAFETY: the context is current; the flags are the driver's own bits.
        Ok(check("cuMemHostAlloc", unsafe { cu::malloc_host(bytes, flags) })?.cast::<u8>())
    }

    unsafe fn host_free(&self, ptr: *mut u8) -> Result<()> {
        // SAFETY: the caller's contract: allocated by `cuMemHostAlloc`, freed once.
        check("cuMemFreeHost", unsafe { cu::free_host(ptr.cast::<c_void>()) })
    }

    const HOST_REGISTER_PORTABLE: u32 = sys::CU_MEMHOSTREGISTER_PORTABLE;

    const HOST_REGISTER_MAPPED: u32 = sys::CU_MEMHOSTREGISTER_DEVICEMAP;

    unsafe fn host_register(&self, ptr: *mut u8, len: usize, flags: u32) -> Result<()> {
        // SAFETY: the caller guarantees the range is valid and outlives the registration.
        status("cuMemHostRegister", unsafe { sys::cuMemHostRegister_v2(ptr.cast::<c_void>(), len, flags) })
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()> {
        // SAFETY: the caller's contract: registered here, unregistered once.
        status("cuMemHostUnregister", unsafe { sys::cuMemHostUnregister(ptr.cast::<c_void>()) })
    }

    fn host_device_ptr(&self, host: *mut u8) -> Result<u64> {
        let mut dptr = 0;
        // SAFETY: writes one device pointer; an unmapped address is reported as an error.
        status("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dptr, host.cast::<c_void>(), 0)
        })?;
        Ok(dptr)
    }

    type Stream = sys::CUstream;

    /// The legacy default stream.
    const NULL_STREAM: sys::CUstream = std::ptr::null_mut();

    fn stream_create(&self) -> Result<sys::CUstream> {
        check("cuStreamCreate", cu::stream::create(cu::stream::StreamKind::NonBlocking))
    }

    unsafe fn stream_destroy(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract: created here, destroyed once.
        check("cuStreamDestroy", unsafe { cu::stream::destroy(stream) })
    }

    unsafe fn stream_synchronize(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract: a live stream of this context.
        check("cuStreamSynchronize", unsafe { cu::stream::synchronize(stream) })
    }

    unsafe fn stream_query(&self, stream: sys::CUstream) -> Result<bool> {
        // SAFETY: the caller's contract: a live stream of this context.
        gpu::ready::<Self>("cuStreamQuery", unsafe { sys::cuStreamQuery(stream) })
    }

    unsafe fn stream_wait_event(&self, stream: sys::CUstream, event: sys::CUevent) -> Result<()> {
        // SAFETY: the caller's contract: both alive; an event of another device is allowed by CUDA.
        check("cuStreamWaitEvent", unsafe {
            cu::stream::wait_event(stream, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        })
    }

    type Event = sys::CUevent;

    fn event_create(&self) -> Result<sys::CUevent> {
        check("cuEventCreate", cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT))
    }

    fn event_create_untimed(&self) -> Result<sys::CUevent> {
        check("cuEventCreate", cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
    }

    fn marker_events(&self) -> &gpu::EventPool<sys::CUevent> {
        &self.marker_events
    }

    unsafe fn event_destroy(&self, event: sys::CUevent) -> Result<()> {
        // SAFETY: the caller's contract: created here, destroyed once.
        check("cuEventDestroy", unsafe { cu::event::destroy(event) })
    }

    unsafe fn event_record(&self, event: sys::CUevent, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract: both alive and of this context.
        check("cuEventRecord", unsafe { cu::event::record(event, stream) })
    }

    unsafe fn event_synchronize(&self, event: sys::CUevent) -> Result<()> {
        // SAFETY: the caller's contract: the event is alive.
        check("cuEventSynchronize", unsafe { cu::event::synchronize(event) })
    }

    unsafe fn event_query(&self, event: sys::CUevent) -> Result<bool> {
        // SAFETY: the caller's contract: the event is alive.
        gpu::ready::<Self>("cuEventQuery", unsafe { sys::cuEventQuery(event) })
    }

    unsafe fn event_elapsed(&self, start: sys::CUevent, end: sys::CUevent) -> Result<f32> {
        // SAFETY: the caller's contract: both events are alive.
        check("cuEventElapsedTime", unsafe { cu::event::elapsed(start, end) })
    }

    unsafe fn copy_htod_async(&self, dst: u64, src: &[u8], stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract: `dst` has `src.len()` live bytes;
        // both stay alive until the stream passes the copy.
        check("cuMemcpyHtoDAsync", unsafe { cu::memcpy_htod_async(dst, src, stream) })
    }

    unsafe fn copy_dtoh_async(&self, dst: &mut [u8], src: u64, stream: sys::CUstream) -> Result<()> {
        // SAFETY: as in `copy_htod_async`.
        check("cuMemcpyDtoHAsync", unsafe { cu::memcpy_dtoh_async(dst, src, stream) })
    }

    unsafe fn copy_dtod_async(&self, dst: u64, src: u64, len: usize, stream: sys::CUstream) -> Result<()> {
        // SAFETY: as in `copy_htod_async`, for both ranges.
        check("cuMemcpyDtoDAsync", unsafe { cu::memcpy_dtod_async(dst, src, len, stream) })
    }

    unsafe fn memset_d8_async(&self, dst: u64, value: u8, len: usize, stream: sys::CUstream) -> Result<()> {
        // SAFETY: as in `copy_htod_async`.
        check("cuMemsetD8Async", unsafe { cu::memset_d8_async(dst, value, len, stream) })
    }

    const SOURCE_EXTENSION: &'static str = "cu";

    const BUILTIN_SOURCE: &'static str = BUILTIN_SOURCE;

    const ARRAY_OPS_SOURCE: &'static str = ARRAY_OPS_SOURCE;

    /// The fatbin from build.rs if there is one (a GPU it has neither SASS
    /// nor PTX for fails to load it, and NVRTC compiles instead).
    fn prebuilt_builtins() -> Option<&'static [u8]> {
        PREBUILT.filter(|_| std::env::var_os(FORCE_NVRTC_ENV).is_none())
    }

    fn compile(&self, info: &DeviceInfo, program: &Program<'_>) -> Result<Vec<u8>> {
        nvrtc::compile(&info.arch, program)
    }

    fn ptx_image(ptx: &str) -> Result<CString> {
        CString::new(ptx).map_err(|_| Error::InvalidArgument { name: "ptx", reason: "PTX contains a NUL byte".into() })
    }

    fn check_image(image: &[u8]) -> Result<()> {
        // cubin and fatbin images start with their magic numbers.
        const ELF: &[u8] = b"\x7fELF";
        const FATBIN: [u8; 4] = 0xBA55_ED50u32.to_le_bytes();
        if image.starts_with(ELF) || image.starts_with(&FATBIN) {
            Ok(())
        } else {
            Err(Error::InvalidArgument {
                name: "image",
                reason: "not a cubin (ELF) or fatbin image; pass PTX text as ModuleSource::Ptx".into(),
            })
        }
    }

    type Module = sys::CUmodule;

    unsafe fn module_load(&self, image: *const c_void) -> Result<sys::CUmodule> {
        // SAFETY: the caller passes a cubin/fatbin or NUL-terminated PTX
        // image that stays alive for the duration of the call.
        check("cuModuleLoadData", unsafe { cu::module::load_data(image) })
    }

    unsafe fn module_unload(&self, module: sys::CUmodule) -> Result<()> {
        // SAFETY: the caller's contract: loaded here, unloaded once.
        check("cuModuleUnload", unsafe { cu::module::unload(module) })
    }

    type Function = sys::CUfunction;

    unsafe fn module_function(&self, module: sys::CUmodule, name: &CStr) -> Result<Option<sys::CUfunction>> {
        // SAFETY: the caller's contract: the module is loaded.
        match unsafe { cu::module::get_function(module, name.to_owned()) } {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
            Err(e) => Err(gpu::driver_error::<Self>("cuModuleGetFunction", e.0)),
        }
    }

    /// Lists the module's kernels through the driver (12.4+), built-in or not.
    unsafe fn kernel_names(&self, module: sys::CUmodule, _builtin: bool) -> String {
        if self.driver_version < DRIVER_12_4 {
            return "(listing needs a CUDA 12.4+ driver)".into();
        }
        let mut count = 0u32;
        // SAFETY: module is loaded; writes one uint.
        if unsafe { sys::cuModuleGetFunctionCount(&mut count, module) }.result().is_err() {
            return String::new();
        }
        let mut funcs = vec![std::ptr::null_mut(); count as usize];
        // SAFETY: `funcs` has room for `count` handles.
        if unsafe { sys::cuModuleEnumerateFunctions(funcs.as_mut_ptr(), count, module) }.result().is_err() {
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

    /// What can be known of a kernel's parameters without a failing driver
    /// call. Probing `cuFuncGetParamInfo` until it fails, as this once did,
    /// makes every kernel lookup report a CUDA API error, which buries real
    /// errors under compute-sanitizer (288 reports in `tests/kernels.rs`).
    /// So: a 13.2+ driver tells the count (`cuFuncGetParamCount`); older
    /// 12.4+ drivers get the sizes of as many parameters as a launch passes,
    /// checked then; older ones nothing.
    unsafe fn kernel_params(&self, func: sys::CUfunction) -> Params {
        if self.driver_version < DRIVER_12_4 {
            return Params::Unknown;
        }
        if self.driver_version >= DRIVER_13_2 {
            if let Some(count) = param_count(func) {
                let sizes: Option<Vec<usize>> = (0..count).map(|i| param_size(func, i)).collect();
                if let Some(sizes) = sizes {
                    return Params::Exact(sizes.into());
                }
            }
        }
        Params::Prefix(Default::default())
    }

    unsafe fn param_size(&self, func: sys::CUfunction, index: usize) -> Option<usize> {
        param_size(func, index)
    }

    /// Measured on the H100 (`add_index`, 2026-11-22; `git log -p BENCHMARKS.md`): grid-stride kernels
    /// on as many blocks as run at once reached 93-95% of a device-to-device copy; `add_index` itself
    /// launches a full grid (99%).
    const RESIDENT_GRIDS: bool = true;

    unsafe fn max_potential_block_size(&self, func: sys::CUfunction) -> Result<(i32, i32)> {
        // SAFETY: the caller's contract: the kernel's module is alive; no
        // dynamic shared memory callback.
        check("cuOccupancyMaxPotentialBlockSize", unsafe { cu::occupancy::max_potential_block_size(func, None, 0, 0) })
    }

    unsafe fn launch(&self, f: Self::Function, c: &LaunchConfig, s: Self::Stream, p: &mut [*mut c_void]) -> Result<()> {
        let (grid, block) = (c.grid.into(), c.block.into());
        // SAFETY: the caller's contract: a live kernel, matching parameters
        // (the driver copies them at launch) and buffers that outlive the launch.
        check("cuLaunchKernel", unsafe { cu::launch_kernel(f, grid, block, c.shared_mem_bytes, s, p) })
    }

    fn default_pool(&self) -> Result<RawPool> {
        let mut pool = std::ptr::null_mut();
        // SAFETY: writes one pool handle for a device of this context.
        status("cuDeviceGetDefaultMemPool", unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, self.cu_device) })?;
        Ok(RawPool(pool as usize))
    }

    unsafe fn pool_set_release_threshold(&self, pool: RawPool, bytes: u64) -> Result<()> {
        let mut value = bytes;
        // SAFETY: the attribute takes a cuuint64_t, which `value` is; the pool is live (the caller's contract).
        status("cuMemPoolSetAttribute", unsafe {
            sys::cuMemPoolSetAttribute(
                cu_pool(pool),
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                std::ptr::from_mut(&mut value).cast::<c_void>(),
            )
        })
    }

    unsafe fn pool_reserved(&self, pool: RawPool) -> Result<u64> {
        let mut value = 0u64;
        // SAFETY: the attribute is a cuuint64_t, written into `value`; the pool is live.
        status("cuMemPoolGetAttribute", unsafe {
            sys::cuMemPoolGetAttribute(
                cu_pool(pool),
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                std::ptr::from_mut(&mut value).cast::<c_void>(),
            )
        })?;
        Ok(value)
    }

    unsafe fn pool_trim_to(&self, pool: RawPool, keep: usize) -> Result<()> {
        // SAFETY: a live pool (the caller's contract); trimming never frees memory in use.
        status("cuMemPoolTrimTo", unsafe { sys::cuMemPoolTrimTo(cu_pool(pool), keep) })
    }

    fn ipc_get_handle(&self, ptr: u64) -> Result<(IpcBytes, u64)> {
        let (mut base, mut size) = (0, 0usize);
        // SAFETY: writes the base and size of the allocation containing `ptr`.
        status("cuMemGetAddressRange", unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) })?;
        let mut handle = std::mem::MaybeUninit::<sys::CUipcMemHandle>::uninit();
        // SAFETY: writes one 64-byte handle; pool (cuMemAllocAsync) memory is refused by the driver.
        status("cuIpcGetMemHandle", unsafe { sys::cuIpcGetMemHandle(handle.as_mut_ptr(), base) })?;
        // SAFETY: initialized by the successful call above.
        let handle = unsafe { handle.assume_init() };
        // The handle's C chars, byte for byte.
        Ok((bytemuck::cast(handle.reserved), base))
    }

    fn ipc_open(&self, bytes: &IpcBytes) -> Result<u64> {
        let handle = sys::CUipcMemHandle { reserved: bytemuck::cast(*bytes) };
        let mut ptr = 0;
        // SAFETY: writes one device pointer; a stale or foreign handle is reported as an error.
        status("cuIpcOpenMemHandle", unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                handle,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as std::ffi::c_uint,
            )
        })?;
        Ok(ptr)
    }

    unsafe fn ipc_close(&self, base: u64) -> Result<()> {
        // SAFETY: the caller's contract.
        status("cuIpcCloseMemHandle", unsafe { sys::cuIpcCloseMemHandle(base) })
    }

    /// `cuMemPoolCreate` with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`,
    /// where the device (and driver) can export pools so.
    fn pool_create_shareable(&self, info: &DeviceInfo) -> Result<RawPool> {
        let handle_types =
            attribute(self.cu_device, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES)?;
        let posix_fd = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        // A bit mask of handle types: `as` between equal widths keeps every bit.
        #[allow(clippy::cast_sign_loss)]
        let supported = handle_types as u32;
        if supported & posix_fd.0 == 0 {
            return Err(Error::Unsupported {
                op: "IPC of stream-ordered pool memory",
                backend: BackendKind::Cuda,
                hint: Some(format!(
                    "{} (or its driver) cannot export pools as POSIX file descriptors \
                     (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES = {handle_types:#x}); share memory of \
                     CachingPool or PlainResource instead, which use cuIpcGetMemHandle",
                    info.name
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
        props.location.id = self.cu_device;
        let mut pool = std::ptr::null_mut();
        // SAFETY: the context is current; writes one pool handle.
        status("cuMemPoolCreate", unsafe { sys::cuMemPoolCreate(&mut pool, &props) })?;
        Ok(RawPool(pool as usize))
    }

    unsafe fn pool_alloc_async(&self, pool: RawPool, bytes: usize, stream: sys::CUstream) -> Result<u64> {
        let mut ptr = 0;
        // SAFETY: a live pool of this device and a stream of this context (the caller's contract).
        status("cuMemAllocFromPoolAsync", unsafe {
            sys::cuMemAllocFromPoolAsync(&mut ptr, bytes, cu_pool(pool), stream)
        })?;
        Ok(ptr)
    }

    unsafe fn pool_destroy(&self, pool: RawPool) -> Result<()> {
        // SAFETY: the caller's contract: live, destroyed once, not used after.
        status("cuMemPoolDestroy", unsafe { sys::cuMemPoolDestroy(cu_pool(pool)) })
    }

    /// `cuMemPoolExportToShareableHandle`: a new descriptor per export, which
    /// the caller owns (ROCm differs).
    unsafe fn pool_export(&self, pool: RawPool) -> Result<ExportedPoolFd> {
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR the driver
        // writes one int; the pool is live (the caller's contract); flags must be 0.
        status("cuMemPoolExportToShareableHandle", unsafe {
            sys::cuMemPoolExportToShareableHandle(
                std::ptr::from_mut(&mut fd).cast::<c_void>(),
                cu_pool(pool),
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        Ok(ExportedPoolFd { fd, caller_closes: true })
    }

    fn pool_export_pointer(&self, ptr: u64) -> Result<IpcBytes> {
        let mut data = sys::CUmemPoolPtrExportData { reserved: [0; 64] };
        // SAFETY: writes 64 bytes; memory not of an exportable pool is reported as an error.
        status("cuMemPoolExportPointer", unsafe { sys::cuMemPoolExportPointer(&mut data, ptr) })?;
        Ok(data.reserved)
    }

    /// `cuMemPoolImportFromShareableHandle`, then read-write access for this
    /// device where the imported pool does not grant it already (as the
    /// streamOrderedAllocationIPC sample does).
    unsafe fn pool_import(&self, fd: i32) -> Result<RawPool> {
        let mut pool = std::ptr::null_mut();
        // SAFETY: the driver takes a POSIX descriptor as its value cast to a
        // pointer (as the sample passes it); it is open (the caller's
        // contract) and stays ours: the driver does not close it.
        status("cuMemPoolImportFromShareableHandle", unsafe {
            sys::cuMemPoolImportFromShareableHandle(
                &mut pool,
                fd as isize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        // SAFETY: `pool` was just imported; on failure it is destroyed once, here.
        unsafe { self.grant_access(pool) }.inspect_err(|_| {
            // SAFETY: as above.
            let _ = unsafe { sys::cuMemPoolDestroy(pool) };
        })?;
        Ok(RawPool(pool as usize))
    }

    unsafe fn pool_import_pointer(&self, pool: RawPool, data: &IpcBytes) -> Result<u64> {
        let mut data = sys::CUmemPoolPtrExportData { reserved: *data };
        let mut ptr = 0;
        // SAFETY: an imported pool of this device (the caller's contract);
        // the driver reads the 64 bytes and writes one pointer.
        status("cuMemPoolImportPointer", unsafe { sys::cuMemPoolImportPointer(&mut ptr, cu_pool(pool), &mut data) })?;
        Ok(ptr)
    }

    /// `cuMemFree` (the driver documents cuMemFree or cuMemFreeAsync for
    /// imported pool blocks; the synchronous one completes before the
    /// exporter may free the block).
    unsafe fn free_imported(&self, ptr: u64) -> Result<()> {
        // Freed in stream order on the legacy default stream and waited for,
        // which cuMemPoolImportPointer's documentation allows as well as
        // cuMemFree. compute-sanitizer's leak check reported imported blocks
        // freed with cuMemFree as leaked; this way it
        // sees the pool free.
        // SAFETY: the caller's contract: imported here, freed once, no queued
        // work uses it; the context is current (the caller binds it).
        status("cuMemFreeAsync", unsafe { sys::cuMemFreeAsync(ptr, std::ptr::null_mut()) })?;
        // SAFETY: the null stream is the context's legacy default stream.
        status("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) })
    }

    type Graphs = graph::CudaGraphs;

    type Peers = peer::CudaPeers;

    type Managed = managed::CudaManaged;
    type Vmm = vmm::CudaVmm;
}

/// A [`RawPool`] as the driver's handle.
fn cu_pool(pool: RawPool) -> sys::CUmemoryPool {
    pool.0 as sys::CUmemoryPool
}

impl CudaDriver {
    /// Read-write access to `pool` for this device, if it lacks it.
    ///
    /// # Safety
    /// `pool` is a live pool; the context is current.
    unsafe fn grant_access(&self, pool: sys::CUmemoryPool) -> Result<()> {
        let mut location =
            sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: self.cu_device };
        let read_write = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
        // SAFETY: writes one flags value for a live pool (the caller's contract).
        status("cuMemPoolGetAccess", unsafe { sys::cuMemPoolGetAccess(&mut flags, pool, &mut location) })?;
        if flags == read_write {
            return Ok(());
        }
        let desc = sys::CUmemAccessDesc { location, flags: read_write };
        // SAFETY: one descriptor, read by the driver during the call.
        status("cuMemPoolSetAccess", unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) })
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

#[cfg(test)]
mod tests {
    use crate::backend::builtin;

    #[test]
    fn builtin_source_defines_every_builtin_kernel() {
        for name in builtin::ALL {
            assert!(
                super::BUILTIN_SOURCE.contains(&format!("void {name}(")),
                "{name} missing from kernels/cuda/builtins.cu"
            );
        }
    }
}
