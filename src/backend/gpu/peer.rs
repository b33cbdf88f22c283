//! Peer access and peer copies of a GPU device ([`PeerDevice`]), written
//! once over the vendor's [`PeerCalls`]: the checks (streams, devices,
//! ranges), the pairs already enabled, and which device's driver state
//! each end of a copy is.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use super::device::GpuDevice;
use super::driver::{Driver, PeerCalls};
use crate::backend::{check_range, Device, DeviceMemory, PeerDevice, Stream};
use crate::error::{BackendKind, Error, Result};

/// The (backend, device, peer) pairs whose peer access this process enabled.
fn enabled() -> &'static Mutex<HashSet<(BackendKind, usize, usize)>> {
    static ENABLED: OnceLock<Mutex<HashSet<(BackendKind, usize, usize)>>> = OnceLock::new();
    ENABLED.get_or_init(Default::default)
}

impl<D: Driver> GpuDevice<D> {
    fn ordinal(&self) -> usize {
        self.info().ordinal
    }
}

impl<D: Driver> PeerDevice for GpuDevice<D> {
    fn can_access_peer(&self, peer: &Self) -> Result<bool> {
        if peer.ordinal() == self.ordinal() {
            return Ok(true);
        }
        D::Peers::can_access_peer(self.driver(), peer.driver())
    }

    fn enable_peer_access(&self, peer: &Self) -> Result<()> {
        let key = (D::KIND, self.ordinal(), peer.ordinal());
        if key.1 == key.2 || enabled().lock().unwrap_or_else(|p| p.into_inner()).contains(&key) {
            return Ok(());
        }
        if !self.can_access_peer(peer)? {
            return Err(Error::Unsupported {
                op: "peer access",
                backend: D::KIND,
                hint: Some(format!(
                    "{}:{} cannot address {}:{}'s memory directly (the driver reports no peer path); \
                     copy_peer still copies between them, through host memory",
                    D::KIND,
                    key.1,
                    D::KIND,
                    key.2
                )),
            });
        }
        self.driver().bind()?;
        D::Peers::enable_peer_access(self.driver(), peer.driver())?;
        enabled().lock().unwrap_or_else(|p| p.into_inner()).insert(key);
        Ok(())
    }

    unsafe fn copy_peer_async<S: DeviceMemory<B = Self::B> + ?Sized, M: DeviceMemory<B = Self::B> + ?Sized>(
        &self,
        src: &S,
        src_offset: usize,
        dst: &M,
        dst_offset: usize,
        len: usize,
        stream: &Stream<Self::B>,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let (here, from, to) = (self.ordinal(), src.ordinal(), dst.ordinal());
        if from != here && to != here {
            return Err(Error::DeviceMismatch {
                what: "peer copy's buffers (one must be the stream's device's)",
                expected: format!("{}:{here}", D::KIND),
                found: format!("{kind}:{from} and {kind}:{to}", kind = D::KIND),
            });
        }
        if from == to {
            // SAFETY: the caller's contract is `copy_device_async`'s.
            return unsafe { self.copy_device_async(src, src_offset, dst, dst_offset, len, stream) };
        }
        check_range("source", src_offset, len, src.len())?;
        check_range("destination", dst_offset, len, dst.len())?;
        if len == 0 {
            return Ok(());
        }
        // Devices are opened once per process: this is the one `other`'s buffer came from.
        let other = Self::open(if from == here { to } else { from })?;
        let (src_dev, dst_dev) =
            if from == here { (self.driver(), other.driver()) } else { (other.driver(), self.driver()) };
        self.driver().bind()?;
        // The owners kept and the enqueue agree on the capture state (`gate.rs`).
        let _section = stream.gate_ref().shared();
        if stream.in_capture() {
            stream.keep(src.owner().into_iter().chain(dst.owner()));
        }
        // SAFETY: this device is current and the stream is its own
        // (checked); both ranges lie in their buffers (checked), which are
        // memory of `src_dev`'s and `dst_dev`'s devices (their ordinals, the
        // `DeviceMemory` contract); the caller keeps both alive and
        // untouched until the stream passes the copy.
        unsafe {
            D::Peers::copy_peer_async(
                self.driver(),
                dst.device_ptr() + dst_offset as u64,
                dst_dev,
                src.device_ptr() + src_offset as u64,
                src_dev,
                len,
                stream.raw(),
            )
        }
    }
}
