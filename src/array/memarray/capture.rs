//! Stream capture of `MemArray`'s kernel methods, and the graph replays
//! that follow (`docs/design.md#graphs`): what may be captured and who
//! keeps the device copy. Replays are ordered with the array's own work by
//! `GraphExec::launch` itself, through the link `replay.rs` describes;
//! [`MemArray::before_replay`] and [`MemArray::after_replay`] are no longer
//! needed.

use std::sync::{Arc, Mutex, Weak};

use super::{DeviceCopy, Location, MemArray, Residency};
use crate::array::Element;
use crate::array::LockId;
use crate::backend::graph::{capture_section, Owner};
use crate::backend::{Backend, Device, Stream};
use crate::error::{Error, GraphErrorKind, Result};

/// Names the device copy a graph captured work on, for
/// [`MemArray::after_replay`]: it tells that copy apart from any other,
/// and gives no access to it (nor keeps it alive).
#[derive(Clone)]
pub struct DeviceCopyToken(Weak<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for DeviceCopyToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceCopyToken({:p})", self.0.as_ptr())
    }
}

impl DeviceCopyToken {
    pub(super) fn of<D: Device>(copy: &Arc<DeviceCopy<D>>) -> Self {
        let weak: Weak<dyn std::any::Any + Send + Sync> = Arc::downgrade(copy) as _;
        DeviceCopyToken(weak)
    }

    /// Whether the token names `copy`. The `Weak` keeps the allocation of
    /// the `Arc` it came from, so no other copy can have its address.
    fn names<D: Device>(&self, copy: &Arc<DeviceCopy<D>>) -> bool {
        std::ptr::addr_eq(self.0.as_ptr(), Arc::as_ptr(copy))
    }
}

/// Owners of arrays dropped while their pending work was recorded in a
/// capture gpuport no longer sees (another library's, or one that has
/// ended): a graph may still replay work on them, so they are kept for
/// the rest of the process rather than freed.
static KEPT_FOR_UNSEEN_GRAPHS: Mutex<Vec<Owner>> = Mutex::new(Vec::new());

/// How many owners [`MemArray`]'s drop kept for graphs it could not see.
#[cfg(test)]
fn kept_for_unseen_graphs() -> usize {
    KEPT_FOR_UNSEEN_GRAPHS.lock().unwrap_or_else(|p| p.into_inner()).len()
}

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
    /// gives the device copy to the capture's graph, and links the graph's
    /// replays with the array (`writes`: the captured work writes the copy).
    pub(super) fn check_capturable(
        &mut self,
        op: &'static str,
        stream: &Stream<D::B>,
        lock: Option<LockId>,
        writes: bool,
    ) -> Result<()> {
        self.check_lock(op, lock)?;
        self.sync_replays();
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
        self.link_for_replays(stream, writes);
        Ok(())
    }

    /// The device copy, as the token [`after_replay`](Self::after_replay)
    /// takes: a graph captured now writes this copy. `None` for an empty
    /// array. The token names the copy and nothing more.
    pub fn device_copy_token(&self) -> Option<DeviceCopyToken> {
        self.buffer.as_ref().map(DeviceCopyToken::of)
    }

    /// A replay is enqueued, so `stream` must not capture (`NotCapturable`).
    fn refuse_replay_in_capture(&self, op: &'static str, stream: &Stream<D::B>) -> Result<()> {
        match self.device.capture_status(stream)?.is_capturing() {
            true => Err(not_capturable::<D::B>(op, "replays are ordered with arrays outside captures")),
            false => Ok(()),
        }
    }

    /// Orders `stream` after the array's pending work, before a replay on
    /// `stream` of a graph that captured kernel methods of the array.
    /// A capturing `stream` is [`GraphErrorKind::NotCapturable`].
    ///
    /// No longer needed: [`GraphExec::launch`](crate::GraphExec::launch)
    /// orders each replay after the arrays it captured by itself.
    pub fn before_replay(&self, stream: &Stream<D::B>) -> Result<()> {
        let _section = self.section(stream);
        self.refuse_replay_in_capture("before_replay", stream)?;
        self.order_stream(stream)
    }

    /// After a replay on `stream` of a graph that captured work on the
    /// array's device copy `written` ([`device_copy_token`](Self::device_copy_token)):
    /// the replay's end becomes the array's pending work (so host access and
    /// drop wait for it), and, when the graph `writes` the copy, the device
    /// copy becomes the only current one. The new pending work is ordered
    /// after the old (on another stream, `stream` first waits for it), so
    /// nothing the array enqueued is forgotten. Nothing changes if the
    /// array no longer has that copy (the replay used memory the graph
    /// keeps, no longer the array's). A capturing `stream` is
    /// [`GraphErrorKind::NotCapturable`].
    ///
    /// No longer needed for graphs gpuport captured:
    /// [`GraphExec::launch`](crate::GraphExec::launch) makes each replay
    /// the pending work of the arrays it captured by itself (the loop below
    /// gives the same result without `before_replay` and `after_replay`).
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
    /// let written = a.device_copy_token().unwrap();
    /// for _ in 0..2 {
    ///     a.before_replay(&s)?;
    ///     exec.launch(&s)?;
    ///     a.after_replay(&s, &written, true)?;
    /// }
    /// a.move_to(Location::Host, &s, Transfer::Sync, None)?;
    /// assert_eq!(a.get([2], None)?, 4);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn after_replay(&mut self, stream: &Stream<D::B>, written: &DeviceCopyToken, writes: bool) -> Result<()> {
        let _section = self.section(stream);
        self.sync_replays();
        let Some(copy) = &self.buffer else { return Ok(()) };
        if !written.names(copy) {
            return Ok(());
        }
        self.refuse_replay_in_capture("after_replay", stream)?;
        // The event recorded below stands for all the array's work: it must
        // come after the old pending work too.
        self.order_stream(stream)?;
        if writes {
            self.set_residency(Residency::Device);
        }
        self.record_pending(stream)
    }

    /// A kernel method on a capturing stream is captured, to run at each
    /// replay, on the device copy the array has now: it must be current
    /// (a copy to the device, or an allocation, cannot be captured
    /// correctly), and the array's pending work must be on the capturing
    /// stream or complete (a capture cannot wait for another stream). The
    /// graph keeps that copy alive; `pending` stays as it is, since an
    /// event recorded inside a capture only means something once the graph
    /// runs. The graph and the array share a link (`replay.rs`): each
    /// launch waits for the array's latest work and becomes its pending work.
    pub(super) fn prepare_captured_kernel(
        &mut self,
        stream: &Stream<D::B>,
        lock: Option<LockId>,
    ) -> Result<Option<Arc<DeviceCopy<D>>>> {
        self.check_capturable("kernel", stream, lock, true)?;
        self.set_residency(Residency::Device);
        Ok(self.buffer.clone())
    }

    /// Records the kernel just enqueued as pending work, unless it was captured
    /// (inside the method's [`kernel_bind_scope`]).
    pub(super) fn finish_kernel(&mut self, stream: &Stream<D::B>, captured: bool) -> Result<()> {
        if captured {
            return Ok(());
        }
        self.record_pending(stream)
    }

    /// For `Drop`, when the wait for the pending work was refused because
    /// its event was recorded inside a capture: work a graph replays may
    /// use the host copy and the device copy, so neither may be freed.
    /// While a gpuport capture runs on the pending stream, its graph keeps
    /// them; otherwise no graph gpuport sees does, and they are kept for
    /// the process.
    fn defer_release(&mut self) {
        let host: Owner = self.host.clone();
        let owners = std::iter::once(host).chain(self.buffer.clone().map(|c| c as Owner));
        if let Some(stream) = &self.pending_stream {
            let _section = capture_section::<D::B>(stream);
            if self.device.capture_status(stream).is_ok_and(|s| s.is_capturing()) {
                // A gpuport capture's recorder, or kept for the process (another library's).
                owners.for_each(|o| self.device.keep_for_graph(stream, o));
                return;
            }
        }
        KEPT_FOR_UNSEEN_GRAPHS.lock().unwrap_or_else(|p| p.into_inner()).extend(owners);
    }
}

/// The bind scope of a kernel method's launch and pending event
/// (`src/backend/bound.rs`): the device is made current once for both.
/// Opened after `prepare_kernel`, whose move may allocate through the
/// current memory resource (code of the caller's choosing); from there to
/// the method's end only gpuport's own code runs: the launch, the event's
/// record, and the drop of the array's previous event.
pub(super) fn kernel_bind_scope() -> crate::backend::bound::BindScope {
    crate::backend::bound::scope()
}

impl<T: Element, const N: usize, D: Device> Drop for MemArray<T, N, D> {
    fn drop(&mut self) {
        // Replays of the device copy count as pending work; later ones no
        // longer concern the array (the graph keeps the copy).
        self.sync_replays();
        self.detach_replays();
        // A pending copy reads or writes the host block through a pointer the
        // stream holds; wait for it before the block can be freed. A refused
        // wait (the event was recorded in a capture) is not a completed one:
        // the copies are kept for the graph. Another error cannot be
        // returned; the stream has failed and is not retried.
        if let Some(ev) = self.pending.take() {
            if let Err(Error::Graph { kind: GraphErrorKind::CapturedEvent | GraphErrorKind::Isolation, .. }) =
                self.device.synchronize_event(&ev)
            {
                self.defer_release();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CaptureMode;
    use crate::HostDevice;

    /// An array dropped while its pending event was recorded in a capture
    /// (which the capture gate keeps gpuport's own methods from doing, but
    /// another library's capture can) keeps its copies for the graph: the
    /// refused wait is not a completed one.
    #[test]
    fn a_drop_whose_wait_a_capture_refuses_keeps_the_copies_for_the_graph() {
        let dev = HostDevice::open(0).unwrap();
        let s = dev.create_stream().unwrap();
        let mut a = MemArray::<f32, 1, _>::zeros(&dev, [16]).unwrap();
        a.move_to(Location::Device, &s, crate::array::Transfer::Sync, None).unwrap();
        let host = Arc::downgrade(&a.host);
        let capture = dev.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
        a.record_pending(&s).unwrap(); // as a method racing a capture used to
        drop(a);
        assert!(host.upgrade().is_some(), "the host copy was freed under the graph's work");
        let graph = capture.end().unwrap();
        assert!(host.upgrade().is_some(), "the graph does not keep the host copy");
        drop(graph);
        assert!(host.upgrade().is_none(), "the host copy outlived the graph");
        // Without a running capture to hand them to, the copies are kept for the process.
        let mut b = MemArray::<f32, 1, _>::zeros(&dev, [16]).unwrap();
        let capture = dev.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
        b.record_pending(&s).unwrap();
        drop(capture.end().unwrap());
        let before = kept_for_unseen_graphs();
        drop(b);
        assert_eq!(kept_for_unseen_graphs(), before + 1);
    }
}
