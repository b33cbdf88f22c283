//! Peer access between two [`AnyDevice`]s of one backend
//! ([`crate::PeerDevice`]), for bindings.

use std::sync::Arc;

use super::any::{mismatch, DynDevice};
use crate::backend::{Backend, PeerDevice};
use crate::error::Result;
use crate::{on_backend, AnyDevice};

/// `peer` as a device of `d`'s backend, or [`Error::DeviceMismatch`](crate::Error::DeviceMismatch).
fn peer_of<D: DynDevice + PeerDevice>(d: &Arc<D>, peer: &AnyDevice) -> Result<Arc<D>> {
    if peer.backend() != <D::B as Backend>::KIND {
        return Err(mismatch("peer device", &D::any_device(d), peer));
    }
    D::open(peer.info().ordinal)
}

/// Whether `device` can address `peer`'s memory directly; `true` for the
/// device itself, a mismatch error for a device of another backend.
///
/// ```
/// let host = gpuport::open("host")?;
/// assert!(gpuport::dynamic::peer::can_access_peer(&host, &host)?);
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn can_access_peer(device: &AnyDevice, peer: &AnyDevice) -> Result<bool> {
    on_backend!(device, d => peer_of(d, peer).and_then(|p| d.can_access_peer(&p)))
}

/// Lets `device` address `peer`'s memory directly (idempotent; see
/// [`PeerDevice::enable_peer_access`]).
///
/// ```
/// let host = gpuport::open("host")?;
/// gpuport::dynamic::peer::enable_peer_access(&host, &host)?;
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn enable_peer_access(device: &AnyDevice, peer: &AnyDevice) -> Result<()> {
    on_backend!(device, d => peer_of(d, peer).and_then(|p| d.enable_peer_access(&p)))
}
