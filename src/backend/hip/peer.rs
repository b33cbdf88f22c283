//! HIP's peer calls ([`PeerCalls`]): `hipDeviceCanAccessPeer`,
//! `hipDeviceEnablePeerAccess`, `hipMemcpyPeerAsync`. Optional symbols: a
//! runtime without one fails peer operations alone, with
//! [`Error::Unsupported`](crate::Error::Unsupported). HIP names devices by
//! ordinal where CUDA passes contexts.

use super::sys::{self, hipError_t};
use super::{check, dptr, HipDriver};
use crate::backend::gpu::PeerCalls;
use crate::error::Result;

/// HIP's peer calls.
pub struct HipPeers;

/// The optional function `$f` of `$d`'s runtime, or `Unsupported` naming it.
macro_rules! peer_fn {
    ($d:expr, $f:ident) => {
        $d.api().$f.ok_or_else(|| $d.missing_function(stringify!($f), "peer access"))?
    };
}

// SAFETY: each method makes the HIP call its name says between the two
// devices' ordinals and reports failure as an error.
unsafe impl PeerCalls<HipDriver> for HipPeers {
    fn can_access_peer(d: &HipDriver, peer: &HipDriver) -> Result<bool> {
        let f = peer_fn!(d, hipDeviceCanAccessPeer);
        let mut can = 0;
        // SAFETY: writes one int; both ids were validated when the devices opened.
        check("hipDeviceCanAccessPeer", unsafe { f(&mut can, d.id, peer.id) })?;
        Ok(can != 0)
    }

    fn enable_peer_access(d: &HipDriver, peer: &HipDriver) -> Result<()> {
        let f = peer_fn!(d, hipDeviceEnablePeerAccess);
        // SAFETY: a valid device id and flags 0 (the only value HIP accepts);
        // the caller made `d`'s device current.
        let status: hipError_t = unsafe { f(peer.id, 0) };
        if status == sys::hipErrorPeerAccessAlreadyEnabled {
            return Ok(());
        }
        check("hipDeviceEnablePeerAccess", status)
    }

    unsafe fn copy_peer_async(
        d: &HipDriver,
        dst: u64,
        dst_dev: &HipDriver,
        src: u64,
        src_dev: &HipDriver,
        len: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        let f = peer_fn!(d, hipMemcpyPeerAsync);
        // SAFETY: the caller's contract: both ranges are live memory of the
        // devices named, alive until the stream passes the copy.
        check("hipMemcpyPeerAsync", unsafe {
            f(dptr(dst), dst_dev.id, dptr(src).cast_const(), src_dev.id, len, stream)
        })
    }
}
