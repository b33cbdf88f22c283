//! Peer access and peer copies between two devices of one backend:
//! [`PeerDevice`].
//!
//! Every backend's device implements it (`Backend::Device` requires it, as
//! it does [`MemoryDevice`](super::MemoryDevice)), so code generic over a
//! device, the dynamic layer and the Python package reach peers without
//! per-vendor code. The GPU backends implement it once, in `gpu/peer.rs`,
//! over their driver's peer calls; the host backend here: its one device is
//! one address space, so a peer is itself and a peer copy is a memcpy.

use super::host::HostDevice;
use super::{Device, DeviceMemory, DeviceMemoryMut, Stream};
use crate::error::Result;

/// A device that can reach another device of its backend: peer access
/// (P2P) and copies between two devices' memory.
///
/// ```
/// use gpuport::{Device, HostDevice, PeerDevice};
/// let dev = HostDevice::open(0)?;
/// assert!(dev.can_access_peer(&dev)?);
/// dev.enable_peer_access(&dev)?; // a device always reaches its own memory
/// let src = dev.alloc(64)?;
/// let mut dst = dev.alloc(64)?;
/// dev.copy_peer(&src, 0, &mut dst, 0, 64)?;
/// # Ok::<(), gpuport::Error>(())
/// ```
pub trait PeerDevice: Device {
    /// Whether this device can address `peer`'s memory directly (kernels
    /// reading its addresses; peer copies without a stop in host memory).
    /// `true` for the device itself and on the host backend.
    ///
    /// ```
    /// use gpuport::{Device, HostDevice, PeerDevice};
    /// let dev = HostDevice::open(0)?;
    /// assert!(dev.can_access_peer(&dev)?);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    fn can_access_peer(&self, peer: &Self) -> Result<bool>;

    /// Lets this device address `peer`'s memory directly, in that direction
    /// only (enable `peer`'s too for both). Idempotent: each pair is enabled
    /// once per process; a no-op for the device itself. Where
    /// [`can_access_peer`](Self::can_access_peer) is `false`,
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    ///
    /// ```
    /// use gpuport::{Device, HostDevice, PeerDevice};
    /// let dev = HostDevice::open(0)?;
    /// dev.enable_peer_access(&dev)?;
    /// dev.enable_peer_access(&dev)?; // again: still fine
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    fn enable_peer_access(&self, peer: &Self) -> Result<()>;

    /// Enqueues on `stream`, a stream of this device, a copy of `len` bytes
    /// from `src[src_offset..]` to `dst[dst_offset..]`, memory of any two
    /// devices of this backend of which one is this device. Works without
    /// peer access (the driver stages through the host), faster with it.
    ///
    /// Errors: [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for
    /// a stream of another device, or when neither buffer is this device's;
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) for a range past
    /// either buffer's end.
    ///
    /// # Safety
    /// Both buffers must stay alive, and `dst`'s bytes unread and unwritten
    /// by anyone else, until `stream` has passed this copy. Work on the
    /// other device that writes `src` or uses `dst` must be ordered by the
    /// caller (an event of the other device that `stream` waits for).
    ///
    /// ```
    /// use gpuport::{Device, HostDevice, PeerDevice};
    /// let dev = HostDevice::open(0)?;
    /// let s = dev.create_stream()?;
    /// let (src, dst) = (dev.alloc(8)?, dev.alloc(8)?);
    /// // SAFETY: both buffers outlive the copy: the stream is synchronized below.
    /// unsafe { dev.copy_peer_async(&src, 0, &dst, 0, 8, &s)? };
    /// dev.synchronize(&s)?;
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    unsafe fn copy_peer_async<S: DeviceMemory<B = Self::B> + ?Sized, M: DeviceMemory<B = Self::B> + ?Sized>(
        &self,
        src: &S,
        src_offset: usize,
        dst: &M,
        dst_offset: usize,
        len: usize,
        stream: &Stream<Self::B>,
    ) -> Result<()>;

    /// [`copy_peer_async`](Self::copy_peer_async) on this device's default
    /// stream, waited for.
    ///
    /// ```
    /// use gpuport::{Device, HostDevice, PeerDevice};
    /// let dev = HostDevice::open(0)?;
    /// let mut src = dev.alloc(4)?;
    /// dev.copy_to_device(&[1, 2, 3, 4], &mut src, 0)?;
    /// let mut dst = dev.alloc(4)?;
    /// dev.copy_peer(&src, 1, &mut dst, 0, 3)?;
    /// let mut out = [0u8; 3];
    /// dev.copy_to_host(&dst, 0, &mut out)?;
    /// assert_eq!(out, [2, 3, 4]);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    fn copy_peer<S: DeviceMemory<B = Self::B> + ?Sized, M: DeviceMemoryMut<B = Self::B> + ?Sized>(
        &self,
        src: &S,
        src_offset: usize,
        dst: &mut M,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let s = self.default_stream();
        // SAFETY: the stream is synchronized before returning, so both
        // buffers outlive the copy, and `&mut dst` keeps every other view of
        // its bytes away meanwhile.
        unsafe { self.copy_peer_async(src, src_offset, &*dst, dst_offset, len, s)? };
        self.synchronize(s)
    }
}

/// The host backend has one device, one address space: every peer is
/// itself, and a peer copy is the device copy.
impl PeerDevice for HostDevice {
    fn can_access_peer(&self, _peer: &Self) -> Result<bool> {
        Ok(true)
    }

    fn enable_peer_access(&self, _peer: &Self) -> Result<()> {
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
        // SAFETY: the caller's contract is `copy_device_async`'s.
        unsafe { self.copy_device_async(src, src_offset, dst, dst_offset, len, stream) }
    }
}
