//! The ROCm backend (feature `rocm`): the HIP driver table of the generic
//! GPU core ([`super::gpu`]), on the HIP runtime and hiprtc.
//!
//! `libamdhip64` and hiprtc are opened at run time through a hand-declared
//! function table ([`sys`]; the module docs there say why no `*-sys` crate
//! is used), so a binary with this backend starts on machines without ROCm.
//! A library that cannot be found is [`Error::LibraryNotFound`] listing every
//! name and path tried; a library that loads but sees no GPU is
//! [`Error::NoDevice`] with the reason "ROCm loaded, no device".
//!
//! Where HIP differs from CUDA (each noted where [`HipDriver`] implements it):
//! - HIP's runtime API has no context objects to retain: [`HipDriver`] only
//!   remembers the device and makes it current (`hipSetDevice`) per thread.
//! - HIP cannot list a module's kernels or a kernel's parameters; the
//!   built-in module's are known, so only they are checked.
//! - The architecture name (`gfx90a`) comes from `hipDeviceProp_t`, read
//!   through an oversized buffer (see `target_id`); hiprtc compiles for it.
//! - The built-ins are compiled by hiprtc at first use (no build-time
//!   image, no on-disk cache), with the device's wall-clock rate.
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
//!
//! `mod.rs`: errors and the [`HipDriver`] table; `graph.rs`: capture and
//! graphs; `peer.rs`: peer access and copies; `runtime.rs`: loading the
//! runtime; `sys.rs`: the hand-declared library table; `info.rs`: a
//! device's properties; `hiprtc.rs`: the compiler; `tests.rs`: the
//! kernel sources and the runtime's symbols checked.

use std::ffi::{c_int, c_void, CStr, CString};

mod graph;
mod hiprtc;
mod info;
mod managed;
mod peer;
mod runtime;
pub mod sys;
mod vmm;

pub use hiprtc::compile_source;

use info::{attribute, device_id, query_info, target_id};
use runtime::{driver, Runtime, RUNTIME};
use sys::{hipError_t, HipApi};

use super::gpu::{self, Driver, Params, Program};
use super::{DeviceInfo, ExportedPoolFd, IpcBytes, LaunchConfig, MemoryInfo, RawPool};
use crate::error::{BackendKind, Error, Result};

/// The runtime's built-in kernels, compiled by hiprtc at first use.
const BUILTINS_SOURCE: &str = include_str!("../../../kernels/hip/builtins.hip");
/// The array kernels' dialect file; each kernel is compiled alone from it.
const ARRAY_OPS_SOURCE: &str = include_str!("../../../kernels/hip/array_ops.hip");

gpu::vendor_types! {
    HipDriver, "ROCm", "rocm" => Rocm, RocmDevice, RocmStream, RocmEvent, RocmBuffer, RocmPinnedBuffer,
    RocmHostRegistration, RocmModule, RocmKernel
}

/// Attaches the call name to a HIP status.
fn check(call: &'static str, code: hipError_t) -> Result<()> {
    gpu::check::<HipDriver>(call, code)
}

// ---- the driver --------------------------------------------------------------------

/// The optional HIP function `$f` (see [`sys::HipApi`]), or
/// [`Error::Unsupported`] for `$op` naming the library that lacks it.
macro_rules! optional_fn {
    ($driver:expr, $f:ident, $op:expr) => {
        $driver.api().$f.ok_or_else(|| $driver.missing_function(stringify!($f), $op))
    };
}

/// The HIP runtime as one device sees it: the device's slot in the runtime.
/// HIP's runtime API has no context to retain; the current device is per
/// thread, so `bind` selects it.
pub struct HipDriver {
    rt: &'static Runtime,
    ordinal: usize,
    /// `ordinal` as the runtime's device id, converted once in `open`.
    id: c_int,
    /// The full target id, e.g. `gfx90a:sramecc+:xnack-`, passed to hiprtc.
    target_id: Option<String>,
    /// `hipDeviceAttributeWallClockRate` in kHz, where the runtime reports it.
    wall_clock_khz: Option<u32>,
    /// Marker events kept for reuse (`gpu/event_pool.rs`).
    marker_events: gpu::EventPool<sys::hipEvent_t>,
}

impl Drop for HipDriver {
    fn drop(&mut self) {
        gpu::destroy_pooled_events(self);
    }
}

impl HipDriver {
    fn api(&self) -> &'static HipApi {
        &self.rt.loaded.api
    }

    /// The error for an optional HIP function the loaded runtime does not export.
    fn missing_function(&self, call: &'static str, op: &'static str) -> Error {
        let rt = self.rt;
        Error::Unsupported {
            op,
            backend: BackendKind::Rocm,
            hint: Some(format!("{} (HIP {}) does not export {call}", rt.loaded.path, sys::version_string(rt.version))),
        }
    }

    /// The error for a pool IPC call that reported success and wrote nothing:
    /// an early ROCm/clr `hip_mempool.cpp` (2022) has the IPC calls as stubs
    /// that return hipSuccess and write nothing, so what they write is checked.
    fn stub_call(&self, call: &'static str) -> Error {
        let rt = self.rt;
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

    /// Read-write access to `pool` for this device, if it lacks it.
    ///
    /// # Safety
    /// `pool` is a live pool; the device is current.
    unsafe fn grant_access(&self, pool: sys::hipMemPool_t) -> Result<()> {
        let get = optional_fn!(self, hipMemPoolGetAccess, "IPC of stream-ordered pool memory")?;
        let set = optional_fn!(self, hipMemPoolSetAccess, "IPC of stream-ordered pool memory")?;
        let mut location = sys::hipMemLocation { type_: sys::hipMemLocationTypeDevice, id: self.id };
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
}

/// A [`RawPool`] as HIP's handle.
fn hip_pool(pool: RawPool) -> sys::hipMemPool_t {
    pool.0 as sys::hipMemPool_t
}

/// A device address as HIP's `hipDeviceptr_t`.
fn dptr(addr: u64) -> sys::hipDeviceptr_t {
    super::address_to_usize(addr) as sys::hipDeviceptr_t
}

// SAFETY: every method makes the HIP call its name says on this device and
// reports failure as an error; HIP handles may be used from any thread once
// the device is current there.
unsafe impl Driver for HipDriver {
    const KIND: BackendKind = BackendKind::Rocm;

    const NAME: &'static str = "Rocm";

    const PLATFORM: &'static str = "ROCm";

    type Status = hipError_t;

    const SUCCESS: hipError_t = sys::hipSuccess;

    const NOT_READY: hipError_t = sys::hipErrorNotReady;

    const OUT_OF_MEMORY: hipError_t = sys::hipErrorOutOfMemory;

    fn code(status: hipError_t) -> i64 {
        i64::from(status)
    }

    /// `hipGetErrorName`, or the number where the runtime is not loaded.
    fn error_name(status: hipError_t) -> String {
        match RUNTIME.get() {
            Some(Ok(rt)) => rt.error_name(status),
            _ => format!("hipError({status})"),
        }
    }

    fn error_string(status: hipError_t) -> String {
        match RUNTIME.get() {
            Some(Ok(rt)) => rt.error_string(status),
            _ => String::new(),
        }
    }

    fn count() -> Result<usize> {
        let rt = driver()?;
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        let status = unsafe { (rt.api().hipGetDeviceCount)(&mut n) };
        match (status, usize::try_from(n)) {
            (sys::hipSuccess, Ok(count)) if count > 0 => Ok(count),
            (code @ (sys::hipSuccess | sys::hipErrorNoDevice), _) => Err(Error::NoDevice {
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
            (code, _) => Err(gpu::driver_error::<Self>("hipGetDeviceCount", code)),
        }
    }

    fn open(ordinal: usize) -> Result<(Self, DeviceInfo)> {
        let rt = driver()?;
        let id = device_id(ordinal)?;
        let mut hip_device: sys::hipDevice_t = 0;
        // SAFETY: `ordinal` < device count; writes one int.
        check("hipDeviceGet", unsafe { (rt.api().hipDeviceGet)(&mut hip_device, id) })?;
        // SAFETY: HIP events may be used from any thread (the `Driver` contract).
        let marker_events = unsafe { gpu::EventPool::per_device() };
        let mut driver = HipDriver { rt, ordinal, id, target_id: None, wall_clock_khz: None, marker_events };
        driver.bind()?;
        driver.target_id = target_id(rt, id);
        let info = query_info(rt, hip_device, ordinal, driver.target_id.as_deref())?;
        driver.wall_clock_khz =
            attribute(rt, id, sys::attr::WALL_CLOCK_RATE).ok().and_then(|v| u32::try_from(v).ok()).filter(|&v| v > 0);
        Ok((driver, info))
    }

    fn ordinal(&self) -> usize {
        self.ordinal
    }

    fn bind(&self) -> Result<()> {
        // Asked once per `bound::scope` (`src/backend/bound.rs`).
        crate::backend::bound::bind_once(BackendKind::Rocm, usize::try_from(self.id).unwrap_or(usize::MAX), || {
            let mut current: c_int = -1;
            // SAFETY: writes one int.
            check("hipGetDevice", unsafe { (self.api().hipGetDevice)(&mut current) })?;
            if current != self.id {
                // SAFETY: `ordinal` was validated against hipGetDeviceCount when the device opened.
                check("hipSetDevice", unsafe { (self.api().hipSetDevice)(self.id) })?;
            }
            Ok(())
        })
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two size_t.
        check("hipMemGetInfo", unsafe { (self.api().hipMemGetInfo)(&mut free, &mut total) })?;
        Ok(MemoryInfo { free, total })
    }

    fn synchronize_device(&self) -> Result<()> {
        // SAFETY: the call takes no pointers.
        check("hipDeviceSynchronize", unsafe { (self.api().hipDeviceSynchronize)() })
    }

    const ASYNC_ALLOC: &'static str = "hipMallocAsync (or the runtime lacks it)";

    unsafe fn alloc(&self, bytes: usize) -> Result<u64> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the device is current (the caller's contract); writes one pointer.
        check("hipMalloc", unsafe { (self.api().hipMalloc)(&mut ptr, bytes) })?;
        Ok(ptr as u64)
    }

    /// `hipMallocAsync`, which the device info's `stream_ordered_alloc`
    /// requires (with `hipFreeAsync`), so it is always there when called.
    unsafe fn alloc_async(&self, bytes: usize, stream: sys::hipStream_t) -> Result<u64> {
        let malloc_async = optional_fn!(self, hipMallocAsync, "stream-ordered memory pools")?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the device is current and `stream` is one of it (the caller's contract).
        check("hipMallocAsync", unsafe { malloc_async(&mut ptr, bytes, stream) })?;
        Ok(ptr as u64)
    }

    unsafe fn alloc_managed(&self, bytes: usize) -> Result<u64> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the device is current (the caller's contract); writes one pointer.
        check("hipMallocManaged", unsafe { (self.api().hipMallocManaged)(&mut ptr, bytes, sys::hipMemAttachGlobal) })?;
        Ok(ptr as u64)
    }

    /// In stream order only where `hipFreeAsync` resolved (the stream-ordered
    /// allocations that need it are made only then).
    unsafe fn free(&self, ptr: u64, stream: Option<sys::hipStream_t>) -> Result<()> {
        match (stream, self.api().hipFreeAsync) {
            // SAFETY: the caller's contract: allocated here on `stream`, freed once.
            (Some(stream), Some(free_async)) => check("hipFreeAsync", unsafe { free_async(dptr(ptr), stream) }),
            // SAFETY: the caller's contract: allocated here, freed once.
            _ => check("hipFree", unsafe { (self.api().hipFree)(dptr(ptr)) }),
        }
    }

    const HOST_ALLOC_PORTABLE: u32 = sys::hipHostMallocPortable;

    const HOST_ALLOC_MAPPED: u32 = sys::hipHostMallocMapped;

    const HOST_ALLOC_WRITE_COMBINED: u32 = sys::hipHostMallocWriteCombined;

    unsafe fn host_alloc(&self, bytes: usize, flags: u32) -> Result<*mut u8> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the device is current; the flags are the runtime's own bits.
        check("hipHostMalloc", unsafe { (self.api().hipHostMalloc)(&mut ptr, bytes, flags) })?;
        Ok(ptr.cast::<u8>())
    }

    unsafe fn host_free(&self, ptr: *mut u8) -> Result<()> {
        // SAFETY: the caller's contract: allocated by `hipHostMalloc`, freed once.
        check("hipHostFree", unsafe { (self.api().hipHostFree)(ptr.cast::<c_void>()) })
    }

    const HOST_REGISTER_PORTABLE: u32 = sys::hipHostRegisterPortable;

    const HOST_REGISTER_MAPPED: u32 = sys::hipHostRegisterMapped;

    unsafe fn host_register(&self, ptr: *mut u8, len: usize, flags: u32) -> Result<()> {
        // SAFETY: the caller guarantees the range is valid and outlives the registration.
        check("hipHostRegister", unsafe { (self.api().hipHostRegister)(ptr.cast::<c_void>(), len, flags) })
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()> {
        // SAFETY: the caller's contract: registered here, unregistered once.
        check("hipHostUnregister", unsafe { (self.api().hipHostUnregister)(ptr.cast::<c_void>()) })
    }

    fn host_device_ptr(&self, host: *mut u8) -> Result<u64> {
        let get = optional_fn!(self, hipHostGetDevicePointer, "mapped pinned memory")?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes one device pointer; an unmapped address is reported as an error.
        check("hipHostGetDevicePointer", unsafe { get(&mut ptr, host.cast::<c_void>(), 0) })?;
        Ok(ptr as u64)
    }

    type Stream = sys::hipStream_t;

    const NULL_STREAM: sys::hipStream_t = std::ptr::null_mut();

    fn stream_create(&self) -> Result<sys::hipStream_t> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the device is current; writes one handle.
        check("hipStreamCreateWithFlags", unsafe {
            (self.api().hipStreamCreateWithFlags)(&mut raw, sys::hipStreamNonBlocking)
        })?;
        Ok(raw)
    }

    unsafe fn stream_destroy(&self, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller's contract: created here, destroyed once.
        check("hipStreamDestroy", unsafe { (self.api().hipStreamDestroy)(stream) })
    }

    unsafe fn stream_synchronize(&self, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller's contract: a live stream of this device.
        check("hipStreamSynchronize", unsafe { (self.api().hipStreamSynchronize)(stream) })
    }

    unsafe fn stream_query(&self, stream: sys::hipStream_t) -> Result<bool> {
        // SAFETY: the caller's contract: a live stream of this device.
        gpu::ready::<Self>("hipStreamQuery", unsafe { (self.api().hipStreamQuery)(stream) })
    }

    unsafe fn stream_wait_event(&self, stream: sys::hipStream_t, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the caller's contract: both alive; an event of another device is allowed by HIP.
        check("hipStreamWaitEvent", unsafe { (self.api().hipStreamWaitEvent)(stream, event, 0) })
    }

    type Event = sys::hipEvent_t;

    fn event_create(&self) -> Result<sys::hipEvent_t> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the device is current; writes one handle.
        check("hipEventCreateWithFlags", unsafe {
            (self.api().hipEventCreateWithFlags)(&mut raw, sys::hipEventDefault)
        })?;
        Ok(raw)
    }

    fn event_create_untimed(&self) -> Result<sys::hipEvent_t> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the device is current; writes one handle.
        check("hipEventCreateWithFlags", unsafe {
            (self.api().hipEventCreateWithFlags)(&mut raw, sys::hipEventDisableTiming)
        })?;
        Ok(raw)
    }

    fn marker_events(&self) -> &gpu::EventPool<sys::hipEvent_t> {
        &self.marker_events
    }

    unsafe fn event_destroy(&self, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the caller's contract: created here, destroyed once.
        check("hipEventDestroy", unsafe { (self.api().hipEventDestroy)(event) })
    }

    unsafe fn event_record(&self, event: sys::hipEvent_t, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller's contract: both alive and of this device.
        check("hipEventRecord", unsafe { (self.api().hipEventRecord)(event, stream) })
    }

    unsafe fn event_synchronize(&self, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the caller's contract: the event is alive.
        check("hipEventSynchronize", unsafe { (self.api().hipEventSynchronize)(event) })
    }

    unsafe fn event_query(&self, event: sys::hipEvent_t) -> Result<bool> {
        // SAFETY: the caller's contract: the event is alive.
        gpu::ready::<Self>("hipEventQuery", unsafe { (self.api().hipEventQuery)(event) })
    }

    unsafe fn event_elapsed(&self, start: sys::hipEvent_t, end: sys::hipEvent_t) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: the caller's contract: both events are alive; writes one float.
        check("hipEventElapsedTime", unsafe { (self.api().hipEventElapsedTime)(&mut ms, start, end) })?;
        Ok(ms)
    }

    unsafe fn copy_htod_async(&self, dst: u64, src: &[u8], stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller's contract: `dst` has `src.len()` live bytes;
        // both stay alive until the stream passes the copy. HIP declares the
        // source `void*` but only reads it.
        check("hipMemcpyHtoDAsync", unsafe {
            (self.api().hipMemcpyHtoDAsync)(dptr(dst), src.as_ptr() as *mut c_void, src.len(), stream)
        })
    }

    unsafe fn copy_dtoh_async(&self, dst: &mut [u8], src: u64, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: as in `copy_htod_async`.
        check("hipMemcpyDtoHAsync", unsafe {
            (self.api().hipMemcpyDtoHAsync)(dst.as_mut_ptr().cast::<c_void>(), dptr(src), dst.len(), stream)
        })
    }

    unsafe fn copy_dtod_async(&self, dst: u64, src: u64, len: usize, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: as in `copy_htod_async`, for both ranges.
        check("hipMemcpyDtoDAsync", unsafe { (self.api().hipMemcpyDtoDAsync)(dptr(dst), dptr(src), len, stream) })
    }

    unsafe fn memset_d8_async(&self, dst: u64, value: u8, len: usize, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: as in `copy_htod_async`.
        check("hipMemsetD8Async", unsafe { (self.api().hipMemsetD8Async)(dptr(dst), value, len, stream) })
    }

    const SOURCE_EXTENSION: &'static str = "hip";

    const BUILTIN_SOURCE: &'static str = BUILTINS_SOURCE;

    const ARRAY_OPS_SOURCE: &'static str = ARRAY_OPS_SOURCE;

    /// The wall-clock rate for `gpuport_sleep_ns`, where the runtime reports it.
    fn builtin_options(&self) -> Vec<String> {
        self.wall_clock_khz.map(|khz| format!("-DGPUPORT_WALL_CLOCK_KHZ={khz}ull")).into_iter().collect()
    }

    /// hiprtc for the device's target id (no on-disk cache, unlike NVRTC's);
    /// without one, hiprtc compiles for the current device, so it is bound.
    fn compile(&self, _info: &DeviceInfo, program: &Program<'_>) -> Result<Vec<u8>> {
        let mut options = program.options.to_vec();
        let target = self.target_id.as_ref().map(|t| format!("--offload-arch={t}"));
        if !options.iter().any(|o| o.starts_with("--offload-arch") || o.starts_with("--gpu-architecture")) {
            options.extend(target.as_deref());
        }
        self.bind()?;
        hiprtc::compile_program(&Program { options: &options, ..*program })
    }

    fn ptx_image(_ptx: &str) -> Result<CString> {
        Err(Error::Unsupported {
            op: "loading PTX",
            backend: BackendKind::Rocm,
            hint: Some("pass HIP source (ModuleSource::Source) or a code object (ModuleSource::Binary)".into()),
        })
    }

    fn check_image(image: &[u8]) -> Result<()> {
        // Code objects are ELF; hipcc --genco writes a clang offload
        // bundle, compressed ("CCOB") in newer ROCm.
        const ELF: &[u8] = b"\x7fELF";
        const BUNDLE: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
        const COMPRESSED_BUNDLE: &[u8] = b"CCOB";
        if [ELF, BUNDLE, COMPRESSED_BUNDLE].iter().any(|magic| image.starts_with(magic)) {
            Ok(())
        } else {
            Err(Error::InvalidArgument {
                name: "image",
                reason: "not a HIP code object (ELF) or clang offload bundle; pass HIP source as \
                         ModuleSource::Source"
                    .into(),
            })
        }
    }

    type Module = sys::hipModule_t;

    unsafe fn module_load(&self, image: *const c_void) -> Result<sys::hipModule_t> {
        let mut raw: sys::hipModule_t = std::ptr::null_mut();
        // SAFETY: the caller passes a code object, offload bundle or cubin
        // (shim) that stays alive for the duration of the call.
        check("hipModuleLoadData", unsafe { (self.api().hipModuleLoadData)(&mut raw, image) })?;
        Ok(raw)
    }

    unsafe fn module_unload(&self, module: sys::hipModule_t) -> Result<()> {
        // SAFETY: the caller's contract: loaded here, unloaded once.
        check("hipModuleUnload", unsafe { (self.api().hipModuleUnload)(module) })
    }

    type Function = sys::hipFunction_t;

    unsafe fn module_function(&self, module: sys::hipModule_t, name: &CStr) -> Result<Option<sys::hipFunction_t>> {
        let mut func = std::ptr::null_mut();
        // SAFETY: the caller's contract: the module is loaded.
        match unsafe { (self.api().hipModuleGetFunction)(&mut func, module, name.as_ptr()) } {
            sys::hipSuccess => Ok(Some(func)),
            // ROCm's module code returns hipErrorNotFound for an unknown name;
            // hipErrorInvalidDeviceFunction is the runtime-API status for the
            // same case and is treated alike (not yet seen on AMD hardware).
            sys::hipErrorNotFound | sys::hipErrorInvalidDeviceFunction => Ok(None),
            e => Err(gpu::driver_error::<Self>("hipModuleGetFunction", e)),
        }
    }

    /// HIP cannot list a module's kernels, so only the built-in module's are known.
    unsafe fn kernel_names(&self, _module: sys::hipModule_t, builtin: bool) -> String {
        if builtin {
            crate::backend::array_kernels::all_kernel_names().join(", ")
        } else {
            "(HIP cannot list a module's kernels)".into()
        }
    }

    /// HIP has no call for a kernel's parameters: only the built-ins' (known
    /// without asking) are checked.
    unsafe fn kernel_params(&self, _func: sys::hipFunction_t) -> Params {
        Params::Unknown
    }

    /// Not yet: the HIP backend has launched grid-stride kernels on full
    /// grids (`default_launch_config`) since it was written, and a grid capped
    /// at `hipModuleOccupancyMaxPotentialBlockSize`'s minimum is unmeasured on
    /// AMD hardware; CUDA's measurement (99% of a D2D copy on the H100) does
    /// not carry over.
    const RESIDENT_GRIDS: bool = false;

    unsafe fn max_potential_block_size(&self, func: sys::hipFunction_t) -> Result<(i32, i32)> {
        let (mut grid, mut block) = (0, 0);
        // SAFETY: the caller's contract: the kernel's module is alive; no
        // dynamic shared memory, no block limit.
        check("hipModuleOccupancyMaxPotentialBlockSize", unsafe {
            (self.api().hipModuleOccupancyMaxPotentialBlockSize)(&mut grid, &mut block, func, 0, 0)
        })?;
        Ok((grid, block))
    }

    unsafe fn launch(&self, f: Self::Function, c: &LaunchConfig, s: Self::Stream, p: &mut [*mut c_void]) -> Result<()> {
        let ([gx, gy, gz], [bx, by, bz]) = (c.grid, c.block);
        let launch = self.api().hipModuleLaunchKernel;
        // SAFETY: the caller's contract: a live kernel, matching parameters
        // (the runtime copies them at launch) and buffers that outlive the launch.
        check("hipModuleLaunchKernel", unsafe {
            launch(f, gx, gy, gz, bx, by, bz, c.shared_mem_bytes, s, p.as_mut_ptr(), std::ptr::null_mut())
        })
    }

    fn default_pool(&self) -> Result<RawPool> {
        let get = optional_fn!(self, hipDeviceGetDefaultMemPool, "stream-ordered memory pools")?;
        let mut pool = std::ptr::null_mut();
        // SAFETY: writes one pool handle for this device's ordinal.
        check("hipDeviceGetDefaultMemPool", unsafe { get(&mut pool, self.id) })?;
        Ok(RawPool(pool as usize))
    }

    unsafe fn pool_set_release_threshold(&self, pool: RawPool, bytes: u64) -> Result<()> {
        let set = optional_fn!(self, hipMemPoolSetAttribute, "stream-ordered memory pools")?;
        let mut value = bytes;
        // SAFETY: the attribute takes a uint64_t, which `value` is; the pool is live (the caller's contract).
        check("hipMemPoolSetAttribute", unsafe {
            set(hip_pool(pool), sys::hipMemPoolAttrReleaseThreshold, std::ptr::from_mut(&mut value).cast::<c_void>())
        })
    }

    unsafe fn pool_reserved(&self, pool: RawPool) -> Result<u64> {
        let get = optional_fn!(self, hipMemPoolGetAttribute, "stream-ordered memory pools")?;
        let mut value = 0u64;
        // SAFETY: the attribute is a uint64_t, written into `value`; the pool is live.
        check("hipMemPoolGetAttribute", unsafe {
            get(hip_pool(pool), sys::hipMemPoolAttrReservedMemCurrent, std::ptr::from_mut(&mut value).cast::<c_void>())
        })?;
        Ok(value)
    }

    unsafe fn pool_trim_to(&self, pool: RawPool, keep: usize) -> Result<()> {
        let trim = optional_fn!(self, hipMemPoolTrimTo, "stream-ordered memory pools")?;
        // SAFETY: a live pool (the caller's contract); trimming never frees memory in use.
        check("hipMemPoolTrimTo", unsafe { trim(hip_pool(pool), keep) })
    }

    fn ipc_get_handle(&self, ptr: u64) -> Result<(IpcBytes, u64)> {
        let range = optional_fn!(self, hipMemGetAddressRange, "IPC memory handles")?;
        let get = optional_fn!(self, hipIpcGetMemHandle, "IPC memory handles")?;
        let (mut base, mut size) = (std::ptr::null_mut(), 0usize);
        // SAFETY: writes the base and size of the allocation containing `ptr`.
        check("hipMemGetAddressRange", unsafe { range(&mut base, &mut size, dptr(ptr)) })?;
        let mut handle = sys::hipIpcMemHandle_t { reserved: [0; sys::HIP_IPC_HANDLE_SIZE] };
        // SAFETY: writes one 64-byte handle; the base is exported, so the handle carries no offset.
        check("hipIpcGetMemHandle", unsafe { get(&mut handle, base) })?;
        // The handle's C chars, byte for byte.
        Ok((bytemuck::cast(handle.reserved), base as u64))
    }

    /// The flag is `hipIpcMemLazyEnablePeerAccess` as the loaded runtime's
    /// version defines it (0 before ROCm 6.0, 1 since; see [`sys::ipc_open_flags`]).
    fn ipc_open(&self, bytes: &IpcBytes) -> Result<u64> {
        let open = optional_fn!(self, hipIpcOpenMemHandle, "IPC memory handles")?;
        let handle = sys::hipIpcMemHandle_t { reserved: bytemuck::cast(*bytes) };
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes one device pointer; a stale or foreign handle is reported as an error.
        check("hipIpcOpenMemHandle", unsafe { open(&mut ptr, handle, sys::ipc_open_flags(self.rt.version)) })?;
        Ok(ptr as u64)
    }

    unsafe fn ipc_close(&self, base: u64) -> Result<()> {
        let close = optional_fn!(self, hipIpcCloseMemHandle, "IPC memory handles")?;
        // SAFETY: the caller's contract.
        check("hipIpcCloseMemHandle", unsafe { close(dptr(base)) })
    }

    /// `hipMemPoolCreate` with `hipMemHandleTypePosixFileDescriptor`.
    fn pool_create_shareable(&self, _info: &DeviceInfo) -> Result<RawPool> {
        let create = optional_fn!(self, hipMemPoolCreate, "a shareable stream-ordered pool")?;
        let props = sys::hipMemPoolProps {
            allocType: sys::hipMemAllocationTypePinned,
            handleTypes: sys::hipMemHandleTypePosixFileDescriptor,
            location: sys::hipMemLocation { type_: sys::hipMemLocationTypeDevice, id: self.id },
            win32SecurityAttributes: std::ptr::null_mut(),
            reserved: [0; 64],
        };
        let mut pool = std::ptr::null_mut();
        // SAFETY: the device is current; writes one pool handle.
        check("hipMemPoolCreate", unsafe { create(&mut pool, &props) })?;
        if pool.is_null() {
            return Err(self.stub_call("hipMemPoolCreate"));
        }
        Ok(RawPool(pool as usize))
    }

    unsafe fn pool_alloc_async(&self, pool: RawPool, bytes: usize, stream: sys::hipStream_t) -> Result<u64> {
        let malloc = optional_fn!(self, hipMallocFromPoolAsync, "a shareable stream-ordered pool")?;
        // The buffer's drop frees in stream order only where hipFreeAsync resolved.
        optional_fn!(self, hipFreeAsync, "a shareable stream-ordered pool")?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a live pool of this device and a stream of it (the caller's contract).
        check("hipMallocFromPoolAsync", unsafe { malloc(&mut ptr, bytes, hip_pool(pool), stream) })?;
        Ok(ptr as u64)
    }

    unsafe fn pool_destroy(&self, pool: RawPool) -> Result<()> {
        let destroy = optional_fn!(self, hipMemPoolDestroy, "a shareable stream-ordered pool")?;
        // SAFETY: the caller's contract: live, destroyed once, not used after.
        check("hipMemPoolDestroy", unsafe { destroy(hip_pool(pool)) })
    }

    /// `hipMemPoolExportToShareableHandle`: unlike CUDA, ROCm makes one
    /// descriptor per pool and returns it on every export; the pool owns and
    /// closes it (`hip_mempool_impl.cpp`, `MemoryPool::Export`), not the caller.
    unsafe fn pool_export(&self, pool: RawPool) -> Result<ExportedPoolFd> {
        let export = optional_fn!(self, hipMemPoolExportToShareableHandle, "IPC of stream-ordered pool memory")?;
        let mut fd: c_int = -1;
        // SAFETY: for hipMemHandleTypePosixFileDescriptor the runtime writes
        // one int; the pool is live (the caller's contract); flags must be 0.
        check("hipMemPoolExportToShareableHandle", unsafe {
            export(
                std::ptr::from_mut(&mut fd).cast::<c_void>(),
                hip_pool(pool),
                sys::hipMemHandleTypePosixFileDescriptor,
                0,
            )
        })?;
        if fd < 0 {
            return Err(self.stub_call("hipMemPoolExportToShareableHandle"));
        }
        Ok(ExportedPoolFd { fd, caller_closes: false })
    }

    fn pool_export_pointer(&self, ptr: u64) -> Result<IpcBytes> {
        let export = optional_fn!(self, hipMemPoolExportPointer, "IPC of stream-ordered pool memory")?;
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
    unsafe fn pool_import(&self, fd: i32) -> Result<RawPool> {
        let import = optional_fn!(self, hipMemPoolImportFromShareableHandle, "IPC of stream-ordered pool memory")?;
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

    unsafe fn pool_import_pointer(&self, pool: RawPool, data: &IpcBytes) -> Result<u64> {
        let import = optional_fn!(self, hipMemPoolImportPointer, "IPC of stream-ordered pool memory")?;
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

    /// `hipFree` (HIP documents hipFree or hipFreeAsync for imported pool blocks).
    unsafe fn free_imported(&self, ptr: u64) -> Result<()> {
        // As on CUDA (see `CudaDriver::free_imported`): in stream order on the
        // null stream and waited for, where `hipFreeAsync` resolved (it does
        // wherever pools can be imported, ROCm 5.1+); `hipFree` otherwise.
        match self.api().hipFreeAsync {
            Some(free_async) => {
                // SAFETY: the caller's contract: imported here, freed once, no
                // queued work uses it; the device is current.
                check("hipFreeAsync", unsafe { free_async(dptr(ptr), std::ptr::null_mut()) })?;
                // SAFETY: the null stream is the device's default stream.
                check("hipStreamSynchronize", unsafe { (self.api().hipStreamSynchronize)(std::ptr::null_mut()) })
            }
            // SAFETY: the caller's contract: imported here, freed once, no queued work uses it.
            None => check("hipFree", unsafe { (self.api().hipFree)(dptr(ptr)) }),
        }
    }

    type Graphs = graph::HipGraphs;

    type Peers = peer::HipPeers;

    type Managed = managed::HipManaged;
    type Vmm = vmm::HipVmm;
}

#[cfg(test)]
mod tests;
