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
mod rtc;
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

// ---- stream-ordered memory pools --------------------------------------------------------

/// The CUDA attribute for a `hipMemPoolAttr` (HIP took CUDA's numbering: 1 to 8).
fn cuda_pool_attribute(attr: c_int) -> Option<P> {
    Some(match attr {
        1 => P::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
        2 => P::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
        3 => P::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
        4 => P::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
        5 => P::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
        6 => P::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
        7 => P::CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
        8 => P::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
        _ => return None,
    })
}

/// `hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t*, int device)`.
///
/// # Safety
/// `pool` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetDefaultMemPool(pool: *mut cu::CUmemoryPool, device: c_int) -> HipError {
    guard(|| {
        try_hip!(init());
        let mut dev = 0;
        // SAFETY: writes one CUdevice; an invalid ordinal is an error.
        try_hip!(hip(unsafe { cu::cuDeviceGet(&mut dev, device) }));
        // SAFETY: the caller passes a writable handle.
        hip(unsafe { cu::cuDeviceGetDefaultMemPool(pool, dev) })
    })
}

/// `hipError_t hipMemPoolSetAttribute(hipMemPool_t, hipMemPoolAttr, void* value)`;
/// an attribute outside HIP's enum is `hipErrorInvalidValue`.
///
/// # Safety
/// `pool` must be live; `value` must point to the attribute's type (int or uint64_t).
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolSetAttribute(pool: cu::CUmemoryPool, attr: c_int, value: *mut c_void) -> HipError {
    guard(|| {
        let Some(cuda_attr) = cuda_pool_attribute(attr) else { return HIP_ERROR_INVALID_VALUE };
        try_hip!(bind());
        // SAFETY: as documented for the caller; CUDA's attribute has the same value type.
        hip(unsafe { cu::cuMemPoolSetAttribute(pool, cuda_attr, value) })
    })
}

/// `hipError_t hipMemPoolGetAttribute(hipMemPool_t, hipMemPoolAttr, void* value)`;
/// an attribute outside HIP's enum is `hipErrorInvalidValue`.
///
/// # Safety
/// `pool` must be live; `value` must be writable as the attribute's type.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolGetAttribute(pool: cu::CUmemoryPool, attr: c_int, value: *mut c_void) -> HipError {
    guard(|| {
        let Some(cuda_attr) = cuda_pool_attribute(attr) else { return HIP_ERROR_INVALID_VALUE };
        try_hip!(bind());
        // SAFETY: as documented for the caller; CUDA's attribute has the same value type.
        hip(unsafe { cu::cuMemPoolGetAttribute(pool, cuda_attr, value) })
    })
}

/// `hipError_t hipMemPoolTrimTo(hipMemPool_t, size_t min_bytes_to_hold)`.
///
/// # Safety
/// `pool` must be live.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolTrimTo(pool: cu::CUmemoryPool, keep: usize) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemPoolTrimTo(pool, keep) })
    })
}

// ---- pools of the caller's own, and their IPC -------------------------------------------
//
// HIP's structs have CUDA's layouts and HIP's enums CUDA's values for what is
// used here (pinned = 1, POSIX fd = 1, device location = 1, read-write = 3);
// what differs: a HIP location names a device by ordinal, a CUDA one by
// CUdevice; HIP's flags are `unsigned int`, CUDA's `unsigned long long`; and
// ROCm returns one descriptor per pool, which the pool owns, where CUDA makes
// a new one per export that the caller owns. The shim does as ROCm does.

/// `hipMemLocation`: `{ hipMemLocationType type; int id; }`, the device by ordinal.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HipMemLocation {
    type_: c_int,
    id: c_int,
}

/// `hipMemAccessDesc`: `{ hipMemLocation location; hipMemAccessFlags flags; }`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HipMemAccessDesc {
    location: HipMemLocation,
    flags: c_int,
}

/// `hipMemPoolProps` as ROCm 6+ declares it (`maxSize`, then `reserved[56]`;
/// ROCm 5 has `reserved[64]` there: same size and offsets).
#[repr(C)]
pub struct HipMemPoolProps {
    alloc_type: c_int,
    handle_types: c_int,
    location: HipMemLocation,
    win32_security_attributes: *mut c_void,
    max_size: usize,
    reserved: [u8; 56],
}

/// `hipMemLocationTypeDevice`, `hipMemAllocationTypePinned`: 1 in HIP and CUDA.
const HIP_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
const HIP_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;

/// A HIP device location as CUDA's (the ordinal's CUdevice).
fn cuda_location(location: &HipMemLocation) -> Result<cu::CUmemLocation, HipError> {
    if location.type_ != HIP_MEM_LOCATION_TYPE_DEVICE {
        return Err(HIP_ERROR_INVALID_VALUE);
    }
    try_ok(init())?;
    let mut dev = 0;
    // SAFETY: writes one CUdevice; an invalid ordinal is an error.
    try_ok(hip(unsafe { cu::cuDeviceGet(&mut dev, location.id) }))?;
    Ok(cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: dev })
}

/// `hipMemAccessFlags` as CUDA's (none 0, read 1, read-write 3 in both).
fn cuda_access(flags: c_int) -> Option<cu::CUmemAccess_flags> {
    use cu::CUmemAccess_flags::*;
    Some(match flags {
        0 => CU_MEM_ACCESS_FLAGS_PROT_NONE,
        1 => CU_MEM_ACCESS_FLAGS_PROT_READ,
        3 => CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        _ => return None,
    })
}

/// The descriptor each exported pool was given (ROCm: one per pool, closed with it).
fn exported_pools() -> &'static Mutex<HashMap<usize, c_int>> {
    static EXPORTED: OnceLock<Mutex<HashMap<usize, c_int>>> = OnceLock::new();
    EXPORTED.get_or_init(Default::default)
}

/// `hipError_t hipMemPoolCreate(hipMemPool_t*, const hipMemPoolProps*)`: `cuMemPoolCreate`
/// with the props translated (allocation type, handle types, device location, maxSize).
///
/// # Safety
/// `pool` must be writable; `props` readable.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolCreate(pool: *mut cu::CUmemoryPool, props: *const HipMemPoolProps) -> HipError {
    guard(|| {
        if pool.is_null() || props.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        // SAFETY: checked non-null; the caller passes a readable struct.
        let props = unsafe { &*props };
        if props.alloc_type != HIP_MEM_ALLOCATION_TYPE_PINNED {
            return HIP_ERROR_INVALID_VALUE;
        }
        let location = match cuda_location(&props.location) {
            Ok(l) => l,
            Err(e) => return e,
        };
        try_hip!(bind());
        // SAFETY: CUmemPoolProps is a C struct for which all zero is valid
        // (and what the driver requires of the fields not set below).
        let mut cuda: cu::CUmemPoolProps = unsafe { std::mem::zeroed() };
        cuda.allocType = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        cuda.handleTypes = cu::CUmemAllocationHandleType(props.handle_types as u32);
        cuda.location = location;
        cuda.win32SecurityAttributes = props.win32_security_attributes;
        cuda.maxSize = props.max_size;
        // SAFETY: the caller passes a writable handle; `cuda` is read during the call.
        hip(unsafe { cu::cuMemPoolCreate(pool, &cuda) })
    })
}

/// `hipError_t hipMemPoolDestroy(hipMemPool_t)`; closes the pool's exported descriptor, as ROCm does.
///
/// # Safety
/// `pool` must be live, and not used after.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolDestroy(pool: cu::CUmemoryPool) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        let r = hip(unsafe { cu::cuMemPoolDestroy(pool) });
        if r == HIP_SUCCESS {
            let fd = exported_pools().lock().unwrap_or_else(|p| p.into_inner()).remove(&(pool as usize));
            if let Some(fd) = fd {
                // SAFETY: the descriptor cuMemPoolExportToShareableHandle gave this pool, owned here.
                drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
            }
        }
        r
    })
}

/// `hipError_t hipMallocFromPoolAsync(void**, size_t, hipMemPool_t, hipStream_t)`.
///
/// # Safety
/// `ptr` must be writable; `pool` live; `stream` a live stream or null.
#[no_mangle]
pub unsafe extern "C" fn hipMallocFromPoolAsync(
    ptr: *mut *mut c_void,
    size: usize,
    pool: cu::CUmemoryPool,
    stream: cu::CUstream,
) -> HipError {
    guard(|| {
        if ptr.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let mut d = 0;
        // SAFETY: writes one device pointer; pool and stream are the caller's.
        try_hip!(hip(unsafe { cu::cuMemAllocFromPoolAsync(&mut d, size, pool, stream) }));
        // SAFETY: checked non-null.
        unsafe { *ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemPoolExportToShareableHandle(void*, hipMemPool_t, hipMemAllocationHandleType,
/// unsigned flags)`: writes the pool's one descriptor (made by the first export, kept by the pool).
///
/// # Safety
/// `handle` must be writable as an int; `pool` live.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolExportToShareableHandle(
    handle: *mut c_void,
    pool: cu::CUmemoryPool,
    handle_type: c_int,
    flags: c_uint,
) -> HipError {
    guard(|| {
        if handle.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let mut exported = exported_pools().lock().unwrap_or_else(|p| p.into_inner());
        let fd = match exported.get(&(pool as usize)) {
            Some(&fd) => fd,
            None => {
                let mut fd: c_int = -1;
                // SAFETY: for a POSIX descriptor the driver writes one int; the pool is the caller's.
                try_hip!(hip(unsafe {
                    cu::cuMemPoolExportToShareableHandle(
                        &mut fd as *mut c_int as *mut c_void,
                        pool,
                        cu::CUmemAllocationHandleType(handle_type as u32),
                        flags as u64,
                    )
                }));
                exported.insert(pool as usize, fd);
                fd
            }
        };
        // SAFETY: checked non-null; the caller passes a writable int.
        unsafe { *(handle as *mut c_int) = fd };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemPoolImportFromShareableHandle(hipMemPool_t*, void* handle,
/// hipMemAllocationHandleType, unsigned flags)`: the descriptor's value cast to a pointer, as in CUDA.
///
/// # Safety
/// `pool` must be writable; `handle` an open pool descriptor (as a pointer value).
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolImportFromShareableHandle(
    pool: *mut cu::CUmemoryPool,
    handle: *mut c_void,
    handle_type: c_int,
    flags: c_uint,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller; the driver does not take the descriptor.
        hip(unsafe {
            cu::cuMemPoolImportFromShareableHandle(
                pool,
                handle,
                cu::CUmemAllocationHandleType(handle_type as u32),
                flags as u64,
            )
        })
    })
}

/// `hipError_t hipMemPoolExportPointer(hipMemPoolPtrExportData*, void*)`; both export data are 64 bytes.
///
/// # Safety
/// `data` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolExportPointer(data: *mut cu::CUmemPoolPtrExportData, ptr: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: `hipMemPoolPtrExportData` and `CUmemPoolPtrExportData` are both 64 bytes; writable (the caller's).
        hip(unsafe { cu::cuMemPoolExportPointer(data, ptr as usize as u64) })
    })
}

/// `hipError_t hipMemPoolImportPointer(void**, hipMemPool_t, hipMemPoolPtrExportData*)`.
///
/// # Safety
/// `ptr` must be writable; `pool` an imported pool; `data` 64 readable bytes.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolImportPointer(
    ptr: *mut *mut c_void,
    pool: cu::CUmemoryPool,
    data: *mut cu::CUmemPoolPtrExportData,
) -> HipError {
    guard(|| {
        if ptr.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let mut d = 0;
        // SAFETY: as documented for the caller; writes one device pointer.
        try_hip!(hip(unsafe { cu::cuMemPoolImportPointer(&mut d, pool, data) }));
        // SAFETY: checked non-null.
        unsafe { *ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemPoolGetAccess(hipMemAccessFlags*, hipMemPool_t, hipMemLocation*)`.
///
/// # Safety
/// `flags` must be writable as an int; `location` readable; `pool` live.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolGetAccess(
    flags: *mut c_int,
    pool: cu::CUmemoryPool,
    location: *mut HipMemLocation,
) -> HipError {
    guard(|| {
        if flags.is_null() || location.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        // SAFETY: checked non-null; the caller passes a readable location.
        let mut location = match cuda_location(unsafe { &*location }) {
            Ok(l) => l,
            Err(e) => return e,
        };
        try_hip!(bind());
        let mut access = cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
        // SAFETY: writes one flags value; the pool is the caller's.
        try_hip!(hip(unsafe { cu::cuMemPoolGetAccess(&mut access, pool, &mut location) }));
        // SAFETY: checked non-null; HIP's flags have CUDA's values.
        unsafe { *flags = access as c_int };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemPoolSetAccess(hipMemPool_t, const hipMemAccessDesc*, size_t count)`.
///
/// # Safety
/// `descs` must point to `count` descriptors; `pool` live.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolSetAccess(
    pool: cu::CUmemoryPool,
    descs: *const HipMemAccessDesc,
    count: usize,
) -> HipError {
    guard(|| {
        if descs.is_null() && count > 0 {
            return HIP_ERROR_INVALID_VALUE;
        }
        let descs = if count == 0 {
            &[][..]
        } else {
            // SAFETY: checked non-null; the caller passes `count` descriptors.
            unsafe { std::slice::from_raw_parts(descs, count) }
        };
        let mut cuda = Vec::with_capacity(count);
        for d in descs {
            let (location, flags) = match (cuda_location(&d.location), cuda_access(d.flags)) {
                (Ok(l), Some(f)) => (l, f),
                (Err(e), _) => return e,
                (_, None) => return HIP_ERROR_INVALID_VALUE,
            };
            cuda.push(cu::CUmemAccessDesc { location, flags });
        }
        try_hip!(bind());
        // SAFETY: `cuda` holds `count` descriptors, read during the call; the pool is the caller's.
        hip(unsafe { cu::cuMemPoolSetAccess(pool, cuda.as_ptr(), cuda.len()) })
    })
}

// ---- IPC ----------------------------------------------------------------------------------

/// `hipIpcMemLazyEnablePeerAccess` of the ROCm 6+ headers this shim emulates
/// (0 before ROCm 6.0); `hipIpcOpenMemHandle` accepts no other flags, as ROCm's does.
const HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

/// `hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t*, void* devPtr)`; both handles are 64 bytes.
///
/// # Safety
/// `handle` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipIpcGetMemHandle(handle: *mut cu::CUipcMemHandle, ptr: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: `hipIpcMemHandle_t` and `CUipcMemHandle` are both `char[64]`; the caller passes a writable one.
        hip(unsafe { cu::cuIpcGetMemHandle(handle, ptr as usize as u64) })
    })
}

/// `hipError_t hipIpcOpenMemHandle(void** devPtr, hipIpcMemHandle_t, unsigned flags)`:
/// `hipErrorInvalidValue` unless `flags` is ROCm 6's `hipIpcMemLazyEnablePeerAccess` (1).
///
/// # Safety
/// `dev_ptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipIpcOpenMemHandle(
    dev_ptr: *mut *mut c_void,
    handle: cu::CUipcMemHandle,
    flags: c_uint,
) -> HipError {
    guard(|| {
        if dev_ptr.is_null() || flags != HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let mut d = 0;
        let lazy = cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint;
        // SAFETY: writes one device pointer; a stale or foreign handle is an error.
        try_hip!(hip(unsafe { cu::cuIpcOpenMemHandle_v2(&mut d, handle, lazy) }));
        // SAFETY: checked non-null.
        unsafe { *dev_ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipIpcCloseMemHandle(void* devPtr)`.
///
/// # Safety
/// `ptr` must come from `hipIpcOpenMemHandle`.
#[no_mangle]
pub unsafe extern "C" fn hipIpcCloseMemHandle(ptr: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuIpcCloseMemHandle(ptr as usize as u64) })
    })
}

// ---- streams and events ---------------------------------------------------------------

/// `hipError_t hipStreamCreateWithFlags(hipStream_t*, unsigned)`; `hipStreamNonBlocking` is CUDA's 1.
///
/// # Safety
/// `stream` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipStreamCreateWithFlags(stream: *mut cu::CUstream, flags: c_uint) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: the caller passes a writable handle.
        hip(unsafe { cu::cuStreamCreate(stream, flags & 0x1) })
    })
}

/// `hipError_t hipStreamDestroy(hipStream_t)`.
///
/// # Safety
/// `stream` must be live.
#[no_mangle]
pub unsafe extern "C" fn hipStreamDestroy(stream: cu::CUstream) -> HipError {
    // SAFETY: as documented for the caller.
    guard(|| hip(unsafe { cu::cuStreamDestroy_v2(stream) }))
}

/// `hipError_t hipDeviceSynchronize(void)`: the current context's `cuCtxSynchronize`.
#[no_mangle]
pub extern "C" fn hipDeviceSynchronize() -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: takes no arguments; synchronizes the context `bind` made current.
        hip(unsafe { cu::cuCtxSynchronize() })
    })
}

/// `hipError_t hipStreamSynchronize(hipStream_t)`.
///
/// # Safety
/// `stream` must be live or null.
#[no_mangle]
pub unsafe extern "C" fn hipStreamSynchronize(stream: cu::CUstream) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuStreamSynchronize(stream) })
    })
}

/// `hipError_t hipStreamQuery(hipStream_t)`: `hipErrorNotReady` (600, as CUDA) while work is pending.
///
/// # Safety
/// `stream` must be live or null.
#[no_mangle]
pub unsafe extern "C" fn hipStreamQuery(stream: cu::CUstream) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuStreamQuery(stream) })
    })
}

/// `hipError_t hipStreamWaitEvent(hipStream_t, hipEvent_t, unsigned flags)`.
///
/// # Safety
/// Both handles must be live (the stream may be null).
#[no_mangle]
pub unsafe extern "C" fn hipStreamWaitEvent(stream: cu::CUstream, event: cu::CUevent, flags: c_uint) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuStreamWaitEvent(stream, event, flags) })
    })
}

/// `hipError_t hipEventCreateWithFlags(hipEvent_t*, unsigned)`; default (0), blocking
/// sync (1), disable timing (2) and interprocess (4) have CUDA's values.
///
/// # Safety
/// `event` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipEventCreateWithFlags(event: *mut cu::CUevent, flags: c_uint) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: the caller passes a writable handle.
        hip(unsafe { cu::cuEventCreate(event, flags & 0x7) })
    })
}

/// `hipError_t hipEventDestroy(hipEvent_t)`.
///
/// # Safety
/// `event` must be live.
#[no_mangle]
pub unsafe extern "C" fn hipEventDestroy(event: cu::CUevent) -> HipError {
    // SAFETY: as documented for the caller.
    guard(|| hip(unsafe { cu::cuEventDestroy_v2(event) }))
}

/// `hipError_t hipEventRecord(hipEvent_t, hipStream_t)`.
///
/// # Safety
/// Both handles must be live (the stream may be null).
#[no_mangle]
pub unsafe extern "C" fn hipEventRecord(event: cu::CUevent, stream: cu::CUstream) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuEventRecord(event, stream) })
    })
}

/// `hipError_t hipEventSynchronize(hipEvent_t)`.
///
/// # Safety
/// `event` must be live.
#[no_mangle]
pub unsafe extern "C" fn hipEventSynchronize(event: cu::CUevent) -> HipError {
    // SAFETY: as documented for the caller.
    guard(|| hip(unsafe { cu::cuEventSynchronize(event) }))
}

/// `hipError_t hipEventQuery(hipEvent_t)`.
///
/// # Safety
/// `event` must be live.
#[no_mangle]
pub unsafe extern "C" fn hipEventQuery(event: cu::CUevent) -> HipError {
    // SAFETY: as documented for the caller.
    guard(|| hip(unsafe { cu::cuEventQuery(event) }))
}

/// `hipError_t hipEventElapsedTime(float*, hipEvent_t, hipEvent_t)` (`cuEventElapsedTime_v2` in CUDA 13).
///
/// # Safety
/// `ms` must be writable; both events live.
#[no_mangle]
pub unsafe extern "C" fn hipEventElapsedTime(ms: *mut f32, start: cu::CUevent, end: cu::CUevent) -> HipError {
    // SAFETY: as documented for the caller.
    guard(|| hip(unsafe { cu::cuEventElapsedTime_v2(ms, start, end) }))
}

// ---- copies -----------------------------------------------------------------------------

/// `hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t, void*, size_t, hipStream_t)`.
///
/// # Safety
/// Both ranges must be valid for `size` bytes until the stream passes the copy.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyHtoDAsync(
    dst: *mut c_void,
    src: *mut c_void,
    size: usize,
    stream: cu::CUstream,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemcpyHtoDAsync_v2(dst as usize as u64, src, size, stream) })
    })
}

/// `hipError_t hipMemcpyDtoHAsync(void*, hipDeviceptr_t, size_t, hipStream_t)`.
///
/// # Safety
/// Both ranges must be valid for `size` bytes until the stream passes the copy.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyDtoHAsync(
    dst: *mut c_void,
    src: *mut c_void,
    size: usize,
    stream: cu::CUstream,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemcpyDtoHAsync_v2(dst, src as usize as u64, size, stream) })
    })
}

/// `hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t, hipDeviceptr_t, size_t, hipStream_t)`.
///
/// # Safety
/// Both ranges must be valid for `size` bytes until the stream passes the copy.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyDtoDAsync(
    dst: *mut c_void,
    src: *mut c_void,
    size: usize,
    stream: cu::CUstream,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemcpyDtoDAsync_v2(dst as usize as u64, src as usize as u64, size, stream) })
    })
}

/// `hipError_t hipMemsetD8Async(hipDeviceptr_t, unsigned char, size_t, hipStream_t)`.
///
/// # Safety
/// `dst` must be valid for `count` bytes until the stream passes the memset.
#[no_mangle]
pub unsafe extern "C" fn hipMemsetD8Async(dst: *mut c_void, value: u8, count: usize, stream: cu::CUstream) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemsetD8Async(dst as usize as u64, value, count, stream) })
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
