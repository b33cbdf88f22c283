//! Peer access and peer copies: `hipDeviceCanAccessPeer`,
//! `hipDeviceEnablePeerAccess`, `hipMemcpyPeerAsync`, on
//! `cuDeviceCanAccessPeer`, `cuCtxEnablePeerAccess` and `cuMemcpyPeerAsync`.
//! HIP names devices by ordinal where CUDA takes `CUdevice`s and contexts;
//! the statuses keep their numbers (`hipErrorPeerAccessAlreadyEnabled` is
//! CUDA's 704, an invalid device 101 in both).

use std::ffi::{c_int, c_uint, c_void};

use cudarc::driver::sys as cu;

use super::{bind, guard, hip, init, primary_context, try_hip, HipError, HIP_ERROR_INVALID_VALUE, HIP_SUCCESS};

/// The `CUdevice` of HIP device `ordinal`, or the status why not.
fn cu_device(ordinal: c_int) -> Result<cu::CUdevice, HipError> {
    let mut dev = 0;
    // SAFETY: writes one CUdevice; an invalid ordinal is an error.
    match hip(unsafe { cu::cuDeviceGet(&mut dev, ordinal) }) {
        HIP_SUCCESS => Ok(dev),
        e => Err(e),
    }
}

/// `hipError_t hipDeviceCanAccessPeer(int* canAccessPeer, int deviceId, int peerDeviceId)`.
///
/// # Safety
/// `can` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int) -> HipError {
    guard(|| {
        if can.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(init());
        let (dev, peer) = match (cu_device(device), cu_device(peer)) {
            (Ok(d), Ok(p)) => (d, p),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        // SAFETY: checked non-null; both devices came from cuDeviceGet.
        hip(unsafe { cu::cuDeviceCanAccessPeer(can, dev, peer) })
    })
}

/// `hipError_t hipDeviceEnablePeerAccess(int peerDeviceId, unsigned int flags)`: the current
/// device's context gains access to the peer's primary context.
#[no_mangle]
pub extern "C" fn hipDeviceEnablePeerAccess(peer: c_int, flags: c_uint) -> HipError {
    guard(|| {
        try_hip!(bind());
        let ctx = match primary_context(peer) {
            Ok(c) => c,
            Err(e) => return e,
        };
        // SAFETY: `ctx` is a retained primary context; the current device's is current (bind).
        hip(unsafe { cu::cuCtxEnablePeerAccess(ctx, flags) })
    })
}

/// `hipError_t hipMemcpyPeerAsync(void* dst, int dstDeviceId, const void* src, int srcDevice,
/// size_t sizeBytes, hipStream_t stream)`.
///
/// # Safety
/// `dst` must be `size` bytes of device `dst_device`'s memory and `src` of
/// `src_device`'s, valid until the stream passes the copy.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyPeerAsync(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    size: usize,
    stream: cu::CUstream,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        let (dst_ctx, src_ctx) = match (primary_context(dst_device), primary_context(src_device)) {
            (Ok(d), Ok(s)) => (d, s),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        // SAFETY: as documented for the caller; both contexts are retained.
        hip(unsafe { cu::cuMemcpyPeerAsync(dst as usize as u64, dst_ctx, src as usize as u64, src_ctx, size, stream) })
    })
}
