//! Moving a [`MemArray`] to another device of its backend
//! ([`MemArray::move_to_device`]): a peer copy of the device copy, in the
//! order of a stream of the new device.

use std::sync::Arc;

use super::capture::not_capturable;
use super::{DeviceCopy, Location, MemArray};
use crate::array::{Element, LockId};
use crate::backend::{PeerDevice, Stream};
use crate::error::Result;
use crate::memory::GuardedRelease;

impl<T: Element, const N: usize, D: PeerDevice> MemArray<T, N, D> {
    /// Moves the array to `device`, another device of its backend, in the
    /// order of `stream`, a stream of `device`: a current device copy is
    /// copied peer to peer (after the array's pending work and the work on
    /// the old copy's stream), the host copy stays where it is, and the
    /// residency does not change. Later work on `stream` sees the data; host
    /// access and other streams wait for it as after [`move_to`](Self::move_to)
    /// with [`Transfer::Async`](super::Transfer::Async). A no-op for the
    /// array's own device.
    ///
    /// DLPack exports and views made before keep the old device's memory,
    /// which is no longer the array's. Refused on a capturing stream
    /// ([`GraphErrorKind::NotCapturable`](crate::GraphErrorKind::NotCapturable));
    /// a stream of another device is [`Error::DeviceMismatch`](crate::Error::DeviceMismatch).
    ///
    /// ```
    /// use gpuport::{Device, array::{Location, MemArray}};
    /// let dev = gpuport::HostDevice::open(0)?; // the host has one device: nothing moves
    /// let mut a = MemArray::<u8, 1, _>::from_vec(&dev, [3], vec![1, 2, 3])?;
    /// a.move_to_device(&dev, dev.default_stream(), None)?;
    /// assert_eq!(a.dl_device(Location::Device).device_id, 0);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn move_to_device(&mut self, device: &Arc<D>, stream: &Stream<D::B>, lock: Option<LockId>) -> Result<()> {
        self.check_lock("move_to_device", lock)?;
        if device.info().ordinal == self.device.info().ordinal {
            return Ok(());
        }
        let _section = self.section(stream); // as in `move_to`
        if device.capture_status(stream)?.is_capturing() {
            return Err(not_capturable::<D::B>(
                "move_to_device",
                "moving an array to another device cannot be captured (the array would own memory a replay \
                 writes, and could not tell which device holds its data); move the array before the capture",
            ));
        }
        self.sync_replays();
        if let Some(ev) = &self.pending {
            // An event of the old device; waiting for it checks that `stream` is `device`'s.
            device.wait_event(stream, ev)?;
        }
        let copy = match &self.buffer {
            Some(src) if self.residency.includes(Location::Device) => Some(self.peer_copy(src, device, stream)?),
            // A stale device copy is dropped: it goes back to its resource in its stream's order.
            _ => None,
        };
        // Recording the end of the move checks the stream where nothing else did.
        let done = device.create_marker_event().and_then(|ev| device.record_event(&ev, stream).map(|()| ev));
        let done = match done {
            Ok(ev) => ev,
            Err(e) => {
                if copy.is_some() {
                    // The copy still reads the old copy: let it finish before that can go.
                    let _ = device.synchronize(stream);
                }
                return Err(e);
            }
        };
        self.device = device.clone();
        // Replays of the old copy (which their graphs keep) no longer concern the array.
        self.detach_replays();
        self.buffer = copy.map(Arc::new);
        self.staged = false;
        self.pending = Some(Arc::new(done));
        self.pending_stream = Some(stream.clone());
        Ok(())
    }

    /// A copy of `src`, the array's device copy, on `device`, enqueued on
    /// `stream` (of `device`) after the work on `src`'s own stream; that
    /// stream then waits for the copy, so the old block goes back to its
    /// resource only after the copy has read it.
    fn peer_copy(&self, src: &Arc<DeviceCopy<D>>, device: &Arc<D>, stream: &Stream<D::B>) -> Result<DeviceCopy<D>> {
        let old = &self.device;
        let ready = old.create_marker_event()?;
        old.record_event(&ready, src.stream())?;
        device.wait_event(stream, &ready)?;
        let bytes = self.len * std::mem::size_of::<T>();
        let memory = self.resource_on(device)?.alloc(bytes, stream)?;
        // SAFETY: `src` is held by the array (and by this call's borrow)
        // until its stream has passed the copy (the wait below); `memory`
        // belongs to `stream`, is new, and is handed to no one before the
        // copy is enqueued; both hold `bytes` bytes.
        unsafe { device.copy_peer_async(&**src, 0, &memory, 0, bytes, stream)? };
        let waited = device.create_marker_event().and_then(|done| {
            device.record_event(&done, stream)?;
            old.wait_event(src.stream(), &done)
        });
        if let Err(e) = waited {
            // Nothing orders the old block's release after the copy: wait here.
            let _ = device.synchronize(stream);
            return Err(e);
        }
        Ok(GuardedRelease::new(memory, device, false))
    }
}
