//! CUDA's peer calls ([`PeerCalls`]): `cuDeviceCanAccessPeer`,
//! `cuCtxEnablePeerAccess`, `cuMemcpyPeerAsync` (all in every CUDA 12 driver).

use cudarc::driver::sys;

use super::CudaDriver;
use crate::backend::gpu::{self, PeerCalls};
use crate::error::Result;

/// CUDA's peer calls.
pub struct CudaPeers;

fn status(call: &'static str, s: sys::CUresult) -> Result<()> {
    gpu::check::<CudaDriver>(call, s)
}

// SAFETY: each method makes the CUDA call its name says between the two
// devices' primary contexts and reports failure as an error.
unsafe impl PeerCalls<CudaDriver> for CudaPeers {
    fn can_access_peer(d: &CudaDriver, peer: &CudaDriver) -> Result<bool> {
        let mut can = 0;
        // SAFETY: writes one int; both devices came from `cuDeviceGet`.
        status("cuDeviceCanAccessPeer", unsafe { sys::cuDeviceCanAccessPeer(&mut can, d.cu_device, peer.cu_device) })?;
        Ok(can != 0)
    }

    fn enable_peer_access(_: &CudaDriver, peer: &CudaDriver) -> Result<()> {
        // SAFETY: `peer.raw` is a retained primary context, alive while `peer`
        // is; the caller made `d`'s context current.
        match unsafe { sys::cuCtxEnablePeerAccess(peer.raw, 0) } {
            sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
            s => status("cuCtxEnablePeerAccess", s),
        }
    }

    unsafe fn copy_peer_async(
        _: &CudaDriver,
        dst: u64,
        dst_dev: &CudaDriver,
        src: u64,
        src_dev: &CudaDriver,
        len: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        // SAFETY: the caller's contract: both ranges are live memory of the
        // contexts named, alive until the stream passes the copy.
        status("cuMemcpyPeerAsync", unsafe { sys::cuMemcpyPeerAsync(dst, dst_dev.raw, src, src_dev.raw, len, stream) })
    }
}
