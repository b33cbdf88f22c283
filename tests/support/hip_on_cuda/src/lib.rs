//! # hip_on_cuda: a HIP-on-CUDA test shim
//!
//! A shared library exporting the HIP runtime and hiprtc C functions that
//! gpuport's ROCm backend calls, implemented on the CUDA driver API and NVRTC
//! (through cudarc, loaded at run time). Loaded in place of `libamdhip64`
//! (`GPUPORT_HIP_LIBRARY=.../libhip_on_cuda.so`, and the same for
//! `GPUPORT_HIPRTC_LIBRARY`), it lets the backend's whole test suite run on
//! an NVIDIA GPU through the HIP code path: library loading, symbol
//! resolution, error mapping, streams, events, copies, module loading and
//! kernel launch. It is test-only: nothing of it ships with gpuport.
//!
//! What it emulates:
//! - the exported names and C signatures of ROCm 6+ (`hipGetDevicePropertiesR0600`
//!   layout for `gcnArchName`, which reports the CUDA architecture, `sm_90`;
//!   `hipRuntimeGetVersion` reports 6.4.0);
//! - HIP's per-thread current device (`hipSetDevice`), each device's primary
//!   context being retained on first use and kept for the process;
//! - `hipIpcOpenMemHandle`'s flag check with ROCm 6's `hipIpcMemLazyEnablePeerAccess` (1);
//! - pools whose memory other processes import: `hipMemPoolProps` translated
//!   to `CUmemPoolProps`, and, as ROCm, one exported descriptor per pool that
//!   the pool owns and closes when destroyed (CUDA makes one per export, the
//!   caller's);
//! - HIP status codes: HIP took its numbers from CUDA's, so a `CUresult` is
//!   returned as the `hipError_t` of the same value (out of memory 2, no
//!   device 100, not found 500, not ready 600, ...);
//! - hiprtc, on NVRTC with a pre-included prelude (`src/prelude.h`) and the
//!   options translated (`--offload-arch=sm_90` to `--gpu-architecture=sm_90`,
//!   AMD-only flags dropped). Code objects are cubins.
//!
//! Every exported function catches panics and returns an error code instead:
//! no panic crosses the C boundary.
#![allow(non_snake_case)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::{self as cu, CUdevice_attribute as A, CUmemPool_attribute as P, CUresult};

mod graph;
mod peer;
mod pool;
mod rtc;
mod stream;
mod vmm;

/// `hipError_t`.
type HipError = c_int;

const HIP_SUCCESS: HipError = 0;
const HIP_ERROR_INVALID_VALUE: HipError = 1;
const HIP_ERROR_NO_DEVICE: HipError = 100;
const HIP_ERROR_INVALID_DEVICE: HipError = 101;
const HIP_ERROR_UNKNOWN: HipError = 999;

/// The `HIP_VERSION` reported: 6.4.0, the first layout this shim emulates being ROCm 6's.
const REPORTED_HIP_VERSION: c_int = 60_400_000;

/// `offsetof(hipDeviceProp_tR0600, gcnArchName)` and `sizeof(hipDeviceProp_tR0600)`
/// (ROCm 7 `include/hip/hip_runtime_api.h`, computed with `offsetof`).
const R0600_GCN_ARCH_NAME_OFFSET: usize = 1160;
const R0600_SIZE: usize = 1472;

/// `hipMemLocation`: `{ hipMemLocationType type; int id; }`, the device by
/// ordinal (pools and virtual memory both take it).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HipMemLocation {
    type_: c_int,
    id: c_int,
}

/// A `CUresult` as the `hipError_t` of the same number.
fn hip(r: CUresult) -> HipError {
    r as c_int
}

/// Runs `f`, turning a panic into `hipErrorUnknown`.
fn guard(f: impl FnOnce() -> HipError) -> HipError {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(HIP_ERROR_UNKNOWN)
}

macro_rules! try_hip {
    ($e:expr) => {{
        let r: HipError = $e;
        if r != HIP_SUCCESS {
            return r;
        }
    }};
}
pub(crate) use try_hip;

// ---- initialization and the current device -----------------------------------------

/// `cuInit(0)` once; `hipErrorNoDevice` where no CUDA driver can be loaded.
fn init() -> HipError {
    static INIT: OnceLock<HipError> = OnceLock::new();
    *INIT.get_or_init(|| {
        // SAFETY: only tries to dlopen cudarc's candidate names for libcuda.
        if !unsafe { cu::is_culib_present() } {
            return HIP_ERROR_NO_DEVICE;
        }
        // SAFETY: the driver library is present.
        hip(unsafe { cu::cuInit(0) })
    })
}

thread_local! {
    /// HIP's current device is per thread and starts at 0.
    static CURRENT: Cell<c_int> = const { Cell::new(0) };
}

/// Number of CUDA devices, after `init`.
fn device_count() -> Result<c_int, HipError> {
    try_ok(init())?;
    let mut n = 0;
    // SAFETY: writes one int; the driver is initialized.
    try_ok(hip(unsafe { cu::cuDeviceGetCount(&mut n) }))?;
    Ok(n)
}

fn try_ok(r: HipError) -> Result<(), HipError> {
    if r == HIP_SUCCESS {
        Ok(())
    } else {
        Err(r)
    }
}

/// The retained primary context of device `ordinal` (kept for the process).
fn primary_context(ordinal: c_int) -> Result<cu::CUcontext, HipError> {
    static CONTEXTS: OnceLock<Mutex<HashMap<c_int, usize>>> = OnceLock::new();
    let mut contexts = CONTEXTS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&ctx) = contexts.get(&ordinal) {
        return Ok(ctx as cu::CUcontext);
    }
    let mut dev = 0;
    // SAFETY: writes one CUdevice; an invalid ordinal is an error.
    try_ok(hip(unsafe { cu::cuDeviceGet(&mut dev, ordinal) }))?;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: `dev` is valid; the context is retained once and never released.
    try_ok(hip(unsafe { cu::cuDevicePrimaryCtxRetain(&mut ctx, dev) }))?;
    contexts.insert(ordinal, ctx as usize);
    Ok(ctx)
}

/// Makes the current device's primary context current on this thread.
fn bind() -> HipError {
    try_hip!(init());
    let ctx = match primary_context(CURRENT.with(Cell::get)) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let mut current = std::ptr::null_mut();
    // SAFETY: writes one handle.
    try_hip!(hip(unsafe { cu::cuCtxGetCurrent(&mut current) }));
    if current != ctx {
        // SAFETY: `ctx` is a retained primary context.
        try_hip!(hip(unsafe { cu::cuCtxSetCurrent(ctx) }));
    }
    HIP_SUCCESS
}

// ---- errors ----------------------------------------------------------------------------

/// (`hipError_t`, name, description) for the statuses this shim returns.
const ERRORS: &[(HipError, &CStr, &CStr)] = &[
    (0, c"hipSuccess", c"no error"),
    (1, c"hipErrorInvalidValue", c"invalid argument"),
    (2, c"hipErrorOutOfMemory", c"out of memory"),
    (3, c"hipErrorNotInitialized", c"initialization error"),
    (4, c"hipErrorDeinitialized", c"driver shutting down"),
    (100, c"hipErrorNoDevice", c"no device is detected"),
    (101, c"hipErrorInvalidDevice", c"invalid device ordinal"),
    (200, c"hipErrorInvalidImage", c"device kernel image is invalid"),
    (201, c"hipErrorInvalidContext", c"invalid device context"),
    (209, c"hipErrorNoBinaryForGpu", c"no kernel image is available for execution on the device"),
    (218, c"hipErrorInvalidKernelFile", c"a PTX JIT compilation failed"),
    (400, c"hipErrorInvalidHandle", c"invalid resource handle"),
    (500, c"hipErrorNotFound", c"named symbol not found"),
    (600, c"hipErrorNotReady", c"device not ready"),
    (700, c"hipErrorIllegalAddress", c"an illegal memory access was encountered"),
    (701, c"hipErrorLaunchOutOfResources", c"too many resources requested for launch"),
    (704, c"hipErrorPeerAccessAlreadyEnabled", c"peer access is already enabled"),
    (705, c"hipErrorPeerAccessNotEnabled", c"peer access has not been enabled"),
    (719, c"hipErrorLaunchFailure", c"unspecified launch failure"),
    (801, c"hipErrorNotSupported", c"operation not supported"),
    (999, c"hipErrorUnknown", c"unknown error"),
];

/// A static C string for codes outside [`ERRORS`] (leaked once per code).
fn other_error(code: HipError) -> *const c_char {
    static OTHERS: OnceLock<Mutex<HashMap<HipError, &'static CStr>>> = OnceLock::new();
    let mut others = OTHERS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    others
        .entry(code)
        .or_insert_with(|| {
            let s =
                CString::new(format!("hipError({code}) (CUDA status {code} through hip_on_cuda)")).unwrap_or_default();
            Box::leak(s.into_boxed_c_str())
        })
        .as_ptr()
}

/// `const char* hipGetErrorName(hipError_t)`.
#[no_mangle]
pub extern "C" fn hipGetErrorName(code: HipError) -> *const c_char {
    catch_unwind(|| ERRORS.iter().find(|e| e.0 == code).map_or_else(|| other_error(code), |e| e.1.as_ptr()))
        .unwrap_or(c"hipErrorUnknown".as_ptr())
}

/// `const char* hipGetErrorString(hipError_t)`.
#[no_mangle]
pub extern "C" fn hipGetErrorString(code: HipError) -> *const c_char {
    catch_unwind(|| ERRORS.iter().find(|e| e.0 == code).map_or_else(|| other_error(code), |e| e.2.as_ptr()))
        .unwrap_or(c"unknown error".as_ptr())
}

// ---- devices -------------------------------------------------------------------------

/// `hipError_t hipInit(unsigned int flags)`.
#[no_mangle]
pub extern "C" fn hipInit(_flags: c_uint) -> HipError {
    guard(init)
}

/// `hipError_t hipRuntimeGetVersion(int*)`.
///
/// # Safety
/// `version` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipRuntimeGetVersion(version: *mut c_int) -> HipError {
    guard(|| {
        if version.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        // SAFETY: checked non-null; the caller passes a writable int.
        unsafe { *version = REPORTED_HIP_VERSION };
        HIP_SUCCESS
    })
}

/// `hipError_t hipGetDeviceCount(int*)`: `hipErrorNoDevice` with 0, as ROCm does, when there is none.
///
/// # Safety
/// `count` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> HipError {
    guard(|| {
        if count.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        let (n, r) = match device_count() {
            Ok(0) => (0, HIP_ERROR_NO_DEVICE),
            Ok(n) => (n, HIP_SUCCESS),
            Err(e) if e == CUresult::CUDA_ERROR_NO_DEVICE as c_int => (0, HIP_ERROR_NO_DEVICE),
            Err(e) => (0, e),
        };
        // SAFETY: checked non-null.
        unsafe { *count = n };
        r
    })
}

/// `hipError_t hipGetDevice(int*)`.
///
/// # Safety
/// `device` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipGetDevice(device: *mut c_int) -> HipError {
    guard(|| {
        if device.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        // SAFETY: checked non-null.
        unsafe { *device = CURRENT.with(Cell::get) };
        HIP_SUCCESS
    })
}

/// `hipError_t hipSetDevice(int)`.
#[no_mangle]
pub extern "C" fn hipSetDevice(device: c_int) -> HipError {
    guard(|| {
        let n = match device_count() {
            Ok(n) => n,
            Err(e) => return e,
        };
        if device < 0 || device >= n {
            return HIP_ERROR_INVALID_DEVICE;
        }
        CURRENT.with(|c| c.set(device));
        bind()
    })
}

/// `hipError_t hipDeviceGet(hipDevice_t*, int ordinal)`.
///
/// # Safety
/// `device` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGet(device: *mut c_int, ordinal: c_int) -> HipError {
    guard(|| {
        try_hip!(init());
        // SAFETY: the caller passes a writable hipDevice_t (an int, like CUdevice).
        hip(unsafe { cu::cuDeviceGet(device, ordinal) })
    })
}

/// `hipError_t hipDeviceGetName(char*, int len, hipDevice_t)`.
///
/// # Safety
/// `name` must have room for `len` chars.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> HipError {
    guard(|| {
        try_hip!(init());
        // SAFETY: the caller guarantees `len` writable chars.
        hip(unsafe { cu::cuDeviceGetName(name, len, device) })
    })
}

/// The CUDA attribute for a `hipDeviceAttribute_t` (numbering of ROCm 5.2..7.x).
fn cuda_attribute(attr: c_int) -> Option<A> {
    Some(match attr {
        9 => A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
        23 => A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        24 => A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
        26 => A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
        27 => A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
        28 => A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
        29 => A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
        30 => A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
        31 => A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
        56 => A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        61 => A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        63 => A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        74 => A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
        75 => A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        87 => A::CU_DEVICE_ATTRIBUTE_WARP_SIZE,
        88 => A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
        89 => A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        _ => return None,
    })
}

/// `hipError_t hipDeviceGetAttribute(int*, hipDeviceAttribute_t, int deviceId)`;
/// attributes without a CUDA twin are `hipErrorInvalidValue`, as an unknown one is in ROCm.
///
/// # Safety
/// `value` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) -> HipError {
    guard(|| {
        try_hip!(init());
        let Some(cuda_attr) = cuda_attribute(attr) else { return HIP_ERROR_INVALID_VALUE };
        let mut dev = 0;
        // SAFETY: writes one CUdevice.
        try_hip!(hip(unsafe { cu::cuDeviceGet(&mut dev, device) }));
        // SAFETY: the caller passes a writable int.
        hip(unsafe { cu::cuDeviceGetAttribute(value, cuda_attr, dev) })
    })
}

/// `hipError_t hipDeviceTotalMem(size_t*, hipDevice_t)`.
///
/// # Safety
/// `bytes` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceTotalMem(bytes: *mut usize, device: c_int) -> HipError {
    guard(|| {
        try_hip!(init());
        // SAFETY: the caller passes a writable size_t.
        hip(unsafe { cu::cuDeviceTotalMem_v2(bytes, device) })
    })
}

/// `hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600*, int)`: zeroes the
/// struct and fills `name` and `gcnArchName` (`sm_XY`), the fields gpuport reads.
///
/// # Safety
/// `prop` must point to at least `sizeof(hipDeviceProp_tR0600)` (1472) writable bytes.
#[no_mangle]
pub unsafe extern "C" fn hipGetDevicePropertiesR0600(prop: *mut c_void, device: c_int) -> HipError {
    guard(|| {
        if prop.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(init());
        let mut dev = 0;
        // SAFETY: writes one CUdevice.
        try_hip!(hip(unsafe { cu::cuDeviceGet(&mut dev, device) }));
        let (mut major, mut minor) = (0, 0);
        // SAFETY: writes one int each.
        try_hip!(hip(unsafe {
            cu::cuDeviceGetAttribute(&mut major, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        }));
        // SAFETY: as above.
        try_hip!(hip(unsafe {
            cu::cuDeviceGetAttribute(&mut minor, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        }));
        // SAFETY: the caller guarantees R0600_SIZE writable bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(prop as *mut u8, R0600_SIZE) };
        bytes.fill(0);
        // SAFETY: `name` is the struct's first field, char[256]; the driver NUL-terminates.
        try_hip!(hip(unsafe { cu::cuDeviceGetName(bytes.as_mut_ptr() as *mut c_char, 255, dev) }));
        let arch = format!("sm_{major}{minor}");
        bytes[R0600_GCN_ARCH_NAME_OFFSET..R0600_GCN_ARCH_NAME_OFFSET + arch.len()].copy_from_slice(arch.as_bytes());
        HIP_SUCCESS
    })
}

// ---- memory ----------------------------------------------------------------------------

/// `hipError_t hipMemGetInfo(size_t* free, size_t* total)`.
///
/// # Safety
/// Both pointers must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: the caller passes two writable size_t.
        hip(unsafe { cu::cuMemGetInfo_v2(free, total) })
    })
}

/// `hipError_t hipMalloc(void**, size_t)`.
///
/// # Safety
/// `ptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> HipError {
    guard(|| {
        try_hip!(bind());
        let mut d = 0;
        // SAFETY: writes one device pointer; the context is current.
        try_hip!(hip(unsafe { cu::cuMemAlloc_v2(&mut d, size) }));
        // SAFETY: the caller passes a writable pointer.
        unsafe { *ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipFree(void*)`.
///
/// # Safety
/// `ptr` must come from `hipMalloc`/`hipMallocManaged` (or be null).
#[no_mangle]
pub unsafe extern "C" fn hipFree(ptr: *mut c_void) -> HipError {
    guard(|| {
        if ptr.is_null() {
            return HIP_SUCCESS;
        }
        try_hip!(bind());
        // SAFETY: the caller passes memory from cuMemAlloc/cuMemAllocManaged.
        hip(unsafe { cu::cuMemFree_v2(ptr as usize as u64) })
    })
}

/// `hipError_t hipMallocAsync(void**, size_t, hipStream_t)`.
///
/// # Safety
/// `ptr` must be writable; `stream` a live stream or null.
#[no_mangle]
pub unsafe extern "C" fn hipMallocAsync(ptr: *mut *mut c_void, size: usize, stream: cu::CUstream) -> HipError {
    guard(|| {
        try_hip!(bind());
        let mut d = 0;
        // SAFETY: writes one device pointer; the stream is the caller's.
        try_hip!(hip(unsafe { cu::cuMemAllocAsync(&mut d, size, stream) }));
        // SAFETY: the caller passes a writable pointer.
        unsafe { *ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipFreeAsync(void*, hipStream_t)`.
///
/// # Safety
/// `ptr` must come from `hipMallocAsync`; `stream` a live stream or null.
#[no_mangle]
pub unsafe extern "C" fn hipFreeAsync(ptr: *mut c_void, stream: cu::CUstream) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemFreeAsync(ptr as usize as u64, stream) })
    })
}

/// `hipError_t hipMallocManaged(void**, size_t, unsigned flags)`; `hipMemAttachGlobal`
/// (1) and `hipMemAttachHost` (2) have CUDA's values.
///
/// # Safety
/// `ptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipMallocManaged(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> HipError {
    guard(|| {
        try_hip!(bind());
        let mut d = 0;
        // SAFETY: writes one device pointer.
        try_hip!(hip(unsafe { cu::cuMemAllocManaged(&mut d, size, flags) }));
        // SAFETY: the caller passes a writable pointer.
        unsafe { *ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// HIP's device id for managed placement (`hipCpuDeviceId`, -1: the host) as CUDA's location.
fn managed_location(device: c_int) -> cu::CUmemLocation {
    use cu::CUmemLocationType::{CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST};
    match device {
        -1 => cu::CUmemLocation { type_: CU_MEM_LOCATION_TYPE_HOST, id: 0 },
        n => cu::CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: n },
    }
}

/// `hipError_t hipMemPrefetchAsync(const void*, size_t, int device, hipStream_t)`.
///
/// # Safety
/// `ptr..ptr+count` must be managed memory; `stream` a live stream or null.
#[no_mangle]
pub unsafe extern "C" fn hipMemPrefetchAsync(
    ptr: *const c_void,
    count: usize,
    device: c_int,
    stream: cu::CUstream,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: the caller's range and stream; flags must be 0.
        hip(unsafe { cu::cuMemPrefetchAsync_v2(ptr as usize as u64, count, managed_location(device), 0, stream) })
    })
}

/// `hipError_t hipMemAdvise(const void*, size_t, hipMemoryAdvise, int device)`;
/// the advice values 1 to 6 are CUDA's.
///
/// # Safety
/// `ptr..ptr+count` must be managed memory.
#[no_mangle]
pub unsafe extern "C" fn hipMemAdvise(ptr: *const c_void, count: usize, advice: c_int, device: c_int) -> HipError {
    use cu::CUmem_advise::*;
    guard(|| {
        let advice = match advice {
            1 => CU_MEM_ADVISE_SET_READ_MOSTLY,
            2 => CU_MEM_ADVISE_UNSET_READ_MOSTLY,
            3 => CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
            4 => CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
            5 => CU_MEM_ADVISE_SET_ACCESSED_BY,
            6 => CU_MEM_ADVISE_UNSET_ACCESSED_BY,
            _ => return HIP_ERROR_INVALID_VALUE,
        };
        try_hip!(bind());
        // SAFETY: the caller's range.
        hip(unsafe { cu::cuMemAdvise_v2(ptr as usize as u64, count, advice, managed_location(device)) })
    })
}

/// `hipError_t hipHostMalloc(void**, size_t, unsigned flags)`; the portable (1),
/// mapped (2) and write-combined (4) flags have CUDA's values.
///
/// # Safety
/// `ptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: the caller passes a writable pointer.
        hip(unsafe { cu::cuMemHostAlloc(ptr, size, flags & 0x7) })
    })
}

/// `hipError_t hipHostFree(void*)`.
///
/// # Safety
/// `ptr` must come from `hipHostMalloc`.
#[no_mangle]
pub unsafe extern "C" fn hipHostFree(ptr: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemFreeHost(ptr) })
    })
}

/// `hipError_t hipHostRegister(void*, size_t, unsigned flags)`; portable (1) and mapped (2) as in CUDA.
///
/// # Safety
/// `ptr..ptr+size` must be valid host memory.
#[no_mangle]
pub unsafe extern "C" fn hipHostRegister(ptr: *mut c_void, size: usize, flags: c_uint) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemHostRegister_v2(ptr, size, flags & 0x3) })
    })
}

/// `hipError_t hipHostUnregister(void*)`.
///
/// # Safety
/// `ptr` must have been registered.
#[no_mangle]
pub unsafe extern "C" fn hipHostUnregister(ptr: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemHostUnregister(ptr) })
    })
}

/// `hipError_t hipHostGetDevicePointer(void** devPtr, void* hstPtr, unsigned flags)`; flags must be 0, as in CUDA.
///
/// # Safety
/// `dev_ptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipHostGetDevicePointer(
    dev_ptr: *mut *mut c_void,
    host: *mut c_void,
    flags: c_uint,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        let mut d = 0;
        // SAFETY: writes one device pointer; an unmapped address is an error.
        try_hip!(hip(unsafe { cu::cuMemHostGetDevicePointer_v2(&mut d, host, flags) }));
        // SAFETY: the caller passes a writable pointer.
        unsafe { *dev_ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemGetAddressRange(hipDeviceptr_t* pbase, size_t* psize, hipDeviceptr_t dptr)`.
///
/// # Safety
/// `base` and `size` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipMemGetAddressRange(base: *mut *mut c_void, size: *mut usize, ptr: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        let mut b = 0;
        // SAFETY: writes one device pointer and, through the caller's pointer, one size_t.
        try_hip!(hip(unsafe { cu::cuMemGetAddressRange_v2(&mut b, size, ptr as usize as u64) }));
        // SAFETY: the caller passes a writable pointer.
        unsafe { *base = b as usize as *mut c_void };
        HIP_SUCCESS
    })
}

// ---- modules and launch ------------------------------------------------------------------

/// `hipError_t hipModuleLoadData(hipModule_t*, const void* image)`: a cubin, fatbin or PTX.
///
/// # Safety
/// `module` must be writable; `image` a complete image.
#[no_mangle]
pub unsafe extern "C" fn hipModuleLoadData(module: *mut cu::CUmodule, image: *const c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuModuleLoadData(module, image) })
    })
}

/// `hipError_t hipModuleUnload(hipModule_t)`.
///
/// # Safety
/// `module` must be loaded.
#[no_mangle]
pub unsafe extern "C" fn hipModuleUnload(module: cu::CUmodule) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuModuleUnload(module) })
    })
}

/// `hipError_t hipModuleGetFunction(hipFunction_t*, hipModule_t, const char*)`:
/// `hipErrorNotFound` (500, CUDA's too) for an unknown name.
///
/// # Safety
/// `function` must be writable, `module` loaded, `name` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn hipModuleGetFunction(
    function: *mut cu::CUfunction,
    module: cu::CUmodule,
    name: *const c_char,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuModuleGetFunction(function, module, name) })
    })
}

/// `hipError_t hipModuleLaunchKernel(hipFunction_t, unsigned gx, gy, gz, bx, by, bz,
/// unsigned shared, hipStream_t, void** params, void** extra)`.
///
/// # Safety
/// As `cuLaunchKernel`: parameters must match the kernel.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hipModuleLaunchKernel(
    f: cu::CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: cu::CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra) })
    })
}

/// `hipError_t hipModuleOccupancyMaxPotentialBlockSize(int* grid, int* block,
/// hipFunction_t, size_t dynSharedMem, int blockSizeLimit)`.
///
/// # Safety
/// `grid` and `block` must be writable; `f` a live kernel.
#[no_mangle]
pub unsafe extern "C" fn hipModuleOccupancyMaxPotentialBlockSize(
    grid: *mut c_int,
    block: *mut c_int,
    f: cu::CUfunction,
    dynamic_shared: usize,
    limit: c_int,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller; no block-size callback.
        hip(unsafe { cu::cuOccupancyMaxPotentialBlockSize(grid, block, f, None, dynamic_shared, limit) })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_a_name_and_a_message() {
        for code in [0, 2, 100, 500, 600, 12345] {
            // SAFETY: both return static NUL-terminated strings.
            let (name, msg) =
                unsafe { (CStr::from_ptr(hipGetErrorName(code)), CStr::from_ptr(hipGetErrorString(code))) };
            assert!(!name.to_bytes().is_empty() && !msg.to_bytes().is_empty());
        }
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(hipGetErrorName(100)) }, c"hipErrorNoDevice");
    }

    #[test]
    fn hip_attributes_map_to_their_cuda_twins() {
        assert_eq!(cuda_attribute(87), Some(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE));
        assert_eq!(cuda_attribute(63), Some(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
        assert_eq!(cuda_attribute(10017), None);
    }

    #[test]
    fn hip_pool_structs_have_the_header_layout_and_cuda_the_same_size() {
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<HipMemPoolProps>(), 88);
        assert_eq!(offset_of!(HipMemPoolProps, max_size), 24);
        assert_eq!(size_of::<HipMemPoolProps>(), size_of::<cu::CUmemPoolProps>());
        assert_eq!(size_of::<HipMemLocation>(), size_of::<cu::CUmemLocation>());
        assert_eq!(size_of::<HipMemAccessDesc>(), size_of::<cu::CUmemAccessDesc>());
        assert_eq!(cuda_access(3), Some(cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
        assert_eq!(cuda_access(2), None);
    }

    #[test]
    fn hip_pool_attributes_map_to_their_cuda_twins() {
        assert_eq!(cuda_pool_attribute(4), Some(P::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD));
        assert_eq!(cuda_pool_attribute(5), Some(P::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
        assert_eq!(cuda_pool_attribute(9), None);
    }
}
