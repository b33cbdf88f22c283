//! Stream capture of `MemArray`'s kernel methods, and the graph replays
//! that follow (`docs/design.md#graphs`): what may be captured, who keeps
//! the device copy, and how replays are ordered with the array's own work.

use std::sync::Arc;

use super::{Location, MemArray, Residency};
use crate::array::Element;
use crate::array::LockId;
use crate::backend::graph::Owner;
use crate::backend::{Backend, Device, Stream};
use crate::error::{Error, Result};

/// [`GraphErrorKind::NotCapturable`](crate::GraphErrorKind::NotCapturable) for `op` on a capturing stream.
pub(super) fn not_capturable<B: Backend>(op: &'static str, why: &str) -> Error {
    Error::Graph {
        backend: B::KIND,
        op,
        kind: crate::error::GraphErrorKind::NotCapturable,
        reason: format!("the stream is capturing a graph, and {why}"),
    }
}

/// Graph replays of captured kernel methods (see `add_index`).
impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// The checks of [`prepare_captured_kernel`](Self::prepare_captured_kernel);
    /// gives the device copy to the capture's graph.
    pub(super) fn check_capturable(&self, op: &'static str, stream: &Stream<D::B>, lock: Option<LockId>) -> Result<()> {
        self.check_lock(op, lock)?;
        let refuse = |why: &str| not_capturable::<D::B>(op, why);
        if self.len > 0 && (!self.residency.includes(Location::Device) || self.buffer.is_none()) {
            return Err(refuse(
                "the array's current data is on the host: a copy to the device cannot be captured (it would \
                 copy whatever the host copy holds at each replay, into memory allocated now); move the array to \
                 the device before the capture",
            ));
        }
        if let Some(ev) = &self.pending {
            if !self.pending_on(stream) && !self.device.event_is_complete(ev)? {
                return Err(refuse(
                    "the array has work pending on another stream, which a capture cannot wait for; synchronize \
                     the array before the capture",
                ));
            }
        }
        if let Some(copy) = &self.buffer {
            self.device.keep_for_graph(stream, copy.clone());
        }
        Ok(())
    }

    /// The device copy, as the token [`after_replay`](Self::after_replay)
    /// takes: a graph captured now writes this copy. `None` for an empty array.
    pub fn device_copy_owner(&self) -> Option<Owner> {
        self.buffer.clone().map(|c| c as Owner)
    }

    /// Orders `stream` after the array's pending work, before a replay on
    /// `stream` of a graph that captured kernel methods of the array.
    pub fn before_replay(&self, stream: &Stream<D::B>) -> Result<()> {
        self.order_after_pending(stream)
    }

    /// After a replay on `stream` of a graph that captured work on the
    /// array's device copy `written` ([`device_copy_owner`](Self::device_copy_owner)):
    /// the replay's end becomes the array's pending work (so host access and
    /// drop wait for it), and, when the graph `writes` the copy, the device
    /// copy becomes the only current one. Nothing changes if the array no
    /// longer has that copy (the replay used memory the graph keeps, no
    /// longer the array's).
    ///
    /// ```
    /// use gpuport::{Device, array::{Location, MemArray, Transfer}};
    /// let dev = gpuport::HostDevice::open(0)?;
    /// let s = dev.create_stream()?;
    /// let mut a = MemArray::<i32, 1, _>::from_vec(&dev, [3], vec![0; 3])?;
    /// a.move_to(Location::Device, &s, Transfer::Sync, None)?;
    /// let capture = dev.begin_capture(&s, gpuport::CaptureMode::Global)?;
    /// a.add_index(&s, None)?; // captured, not run
    /// let exec = capture.end()?.instantiate()?;
    /// let written = a.device_copy_owner().unwrap();
    /// for _ in 0..2 {
    ///     a.before_replay(&s)?;
    ///     exec.launch(&s)?;
    ///     a.after_replay(&s, &written, true)?;
    /// }
    /// a.move_to(Location::Host, &s, Transfer::Sync, None)?;
    /// assert_eq!(a.get([2], None)?, 4);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn after_replay(&mut self, stream: &Stream<D::B>, written: &Owner, writes: bool) -> Result<()> {
        let Some(copy) = &self.buffer else { return Ok(()) };
        if !std::ptr::addr_eq(Arc::as_ptr(copy), Arc::as_ptr(written)) {
            return Ok(());
        }
        if writes {
            self.set_residency(Residency::Device);
        }
        self.record_pending(stream)
    }
}
