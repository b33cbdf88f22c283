//! Streams and events (`hipStreamCreateWithFlags`, `hipEventRecord`, ...)
//! and copies (`hipMemcpy*`, `hipMemset*`) on their CUDA driver twins. A
//! module of its own so that lib.rs stays under 800 lines; the functions
//! are the ones lib.rs held before, unchanged.

use super::*;

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
