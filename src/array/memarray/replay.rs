//! Graph replays ordered with the arrays they captured, by default
//! (`docs/design.md#graphs`).
//!
//! When a kernel method of a [`MemArray`] is captured, the array and the
//! graph share a [`ReplayLink`] for the array's device copy. The array
//! publishes into it each event it records as its pending work; each
//! [`GraphExec::launch`](crate::GraphExec::launch) makes its stream wait
//! for the latest one, then records the replay's end there and bumps the
//! link's replay count. Every array method first takes the replays it has
//! not seen ([`MemArray::sync_replays`], one atomic load when there are
//! none): the latest replay's end becomes the pending work (it was ordered
//! after the old), and a replay that wrote makes the device copy the only
//! current one. `&self` methods see the same through
//! [`MemArray::residency_now`] and the waits below, without taking them.
//!
//! A launch and a method on two threads do not interleave: both hold the
//! link's order lock (`src/backend/order.rs`) across their step, the
//! method through [`MemArray::section`] or [`MemArray::replay_order`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{MemArray, Residency};
use crate::array::Element;
use crate::backend::gate::GateShared;
use crate::backend::graph::{capture_section, fence_owner, ReplayFence};
use crate::backend::order::{hold_in_order, order_lock, OrderLock, ReplayOrder};
use crate::backend::{Backend, Device, Event, Stream};
use crate::error::Result;

/// The work on one device copy that a graph's replays and its array order
/// themselves after.
pub(super) struct ReplayLink<D: Device> {
    device: Arc<D>,
    /// Bumped by each replay, under `state`'s lock.
    replays: AtomicU64,
    /// Held by each launch and each array method across its step.
    order: OrderLock,
    /// Taken briefly, inside `order` or by a drop (never across other locks).
    state: Mutex<LinkState<D::B>>,
}

struct LinkState<B: Backend> {
    /// The latest work on the device copy, and its stream: the array's
    /// pending work as it published it, or the latest replay's end.
    latest: Option<(Arc<Event<B>>, Stream<B>)>,
    /// A replay the array has not taken yet wrote the copy.
    written: bool,
    /// The array no longer uses the copy (the graph keeps it alone).
    detached: bool,
}

/// The array's side of its link: the replays it has taken.
pub(super) struct ArrayLink<D: Device> {
    link: Arc<ReplayLink<D>>,
    seen: u64,
}

/// What a replay the array has not taken left: the latest work and whether it wrote.
struct Unseen<B: Backend> {
    latest: Option<(Arc<Event<B>>, Stream<B>)>,
    written: bool,
}

impl<D: Device> ReplayLink<D> {
    fn state(&self) -> MutexGuard<'_, LinkState<D::B>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn same_stream(&self, a: &Stream<D::B>, b: &Stream<D::B>) -> bool {
        matches!((self.device.stream_id(a), self.device.stream_id(b)), (Some(a), Some(b)) if a == b)
    }
}

impl<D: Device> ReplayFence<D::B> for ReplayLink<D> {
    fn order(&self) -> OrderLock {
        self.order.clone()
    }

    fn around_launch(&self, stream: &Stream<D::B>, writes: bool, launch: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        // Under `order`: no array method publishes meanwhile. A drop may
        // detach the link meanwhile; the replay no longer concerns it then.
        let (latest, reusable) = {
            let st = self.state();
            if st.detached {
                drop(st);
                return launch();
            }
            // When the link alone holds the latest event (no array took it
            // as its pending work), this replay records its end in that
            // event instead of a new one: no create, and no destroy with its
            // capture-mode exchanges, per replay. A wait enqueued on an
            // event, or begun on it, is for the record made before it (CUDA
            // and HIP event semantics; the host backend's events keep them,
            // `src/backend/host/mod.rs`), so the re-record moves no earlier
            // wait. A holder that clones the event after this check waits
            // for this replay's end instead, which follows the work it stood for.
            let reusable = st.latest.as_ref().filter(|(ev, _)| Arc::strong_count(ev) == 1).map(|(ev, _)| ev.clone());
            (st.latest.clone(), reusable)
        };
        if let Some((ev, on)) = &latest {
            if !self.same_stream(on, stream) {
                self.device.wait_event(stream, ev)?;
            }
        }
        drop(latest);
        let end = match reusable {
            Some(ev) => ev,
            None => Arc::new(self.device.create_marker_event()?),
        };
        launch()?;
        let end = match self.device.record_event(&end, stream) {
            Ok(()) => Some((end, stream.clone())),
            Err(_) => {
                // Nothing would order the array after the replay: wait for it here.
                self.device.synchronize(stream)?;
                None
            }
        };
        let mut st = self.state();
        if !st.detached {
            st.latest = end;
            st.written |= writes;
            self.replays.fetch_add(1, Ordering::Release);
        }
        Ok(())
    }
}

/// The sections array methods run in: the array's replay order, then the
/// capture gate of their stream (`src/backend/order.rs`, `gate.rs`).
pub(crate) struct Section<'s> {
    // Dropped in this order: the gate, then the order.
    _gate: GateShared<'s>,
    _order: ReplayOrder,
}

impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// The order lock of the array's replay link (`None`: no graph replays its device copy).
    pub(crate) fn order_lock(&self) -> Option<OrderLock> {
        self.replay.as_ref().map(|l| l.link.order.clone())
    }

    /// Holds the array's replay order, for a step without a stream: no
    /// replay launches until it is dropped (`src/backend/order.rs`).
    pub(crate) fn replay_order(&self) -> ReplayOrder {
        hold_in_order(self.order_lock())
    }

    /// Holds the array's replay order, then the capture gate of `stream`:
    /// the section of a method that enqueues on `stream`. For several
    /// arrays, take [`hold_in_order`] of all first.
    pub(crate) fn section<'s>(&self, stream: &'s Stream<D::B>) -> Section<'s> {
        let _order = self.replay_order();
        Section { _gate: capture_section::<D::B>(stream), _order }
    }

    /// Shares a link with the graph capturing on `stream`, so that its
    /// replays are ordered with the array's work on the device copy
    /// (`writes`: the captured work writes it). No-op without a device copy.
    pub(super) fn link_for_replays(&mut self, stream: &Stream<D::B>, writes: bool) {
        if self.buffer.is_none() {
            return;
        }
        let link = match &self.replay {
            Some(l) => l.link.clone(),
            None => {
                let latest = self.pending.clone().zip(self.pending_stream.clone());
                let state = Mutex::new(LinkState { latest, written: false, detached: false });
                let link = Arc::new(ReplayLink {
                    device: self.device.clone(),
                    replays: AtomicU64::new(0),
                    order: order_lock(),
                    state,
                });
                self.replay = Some(ArrayLink { link: link.clone(), seen: 0 });
                link
            }
        };
        self.device.keep_for_graph(stream, fence_owner::<D::B>(link, writes));
    }

    /// Takes the replays launched since the array last looked: the latest
    /// one's end becomes the pending work, and the device copy the only
    /// current one if a replay wrote it. One atomic load when there are none.
    pub(super) fn sync_replays(&mut self) {
        let Some(l) = &mut self.replay else { return };
        if l.link.replays.load(Ordering::Acquire) == l.seen {
            return;
        }
        let (latest, written) = {
            let mut st = l.link.state();
            l.seen = l.link.replays.load(Ordering::Acquire);
            (st.latest.clone(), std::mem::take(&mut st.written))
        };
        (self.pending, self.pending_stream) = match latest {
            Some((ev, stream)) => (Some(ev), Some(stream)),
            None => (None, None),
        };
        if written {
            self.set_residency(Residency::Device);
        }
    }

    /// What replays the array has not taken left (`None`: there are none).
    fn unseen_replays(&self) -> Option<Unseen<D::B>> {
        let l = self.replay.as_ref()?;
        if l.link.replays.load(Ordering::Acquire) == l.seen {
            return None;
        }
        let st = l.link.state();
        Some(Unseen { latest: st.latest.clone(), written: st.written })
    }

    /// Which copies are current, counting replays not taken yet.
    pub(super) fn residency_now(&self) -> Residency {
        match self.unseen_replays() {
            Some(u) if u.written => Residency::Device,
            _ => self.residency,
        }
    }

    /// Waits (on the host) for replays not taken yet.
    pub(super) fn wait_unseen_replays(&self) -> Result<()> {
        match self.unseen_replays().and_then(|u| u.latest) {
            Some((ev, _)) => self.device.synchronize_event(&ev),
            None => Ok(()),
        }
    }

    /// Whether a replay not taken yet may still run.
    pub(super) fn unseen_replay_running(&self) -> Result<bool> {
        match self.unseen_replays().and_then(|u| u.latest) {
            Some((ev, _)) => Ok(!self.device.event_is_complete(&ev)?),
            None => Ok(false),
        }
    }

    /// Makes `stream` wait (on the device) for replays not taken yet.
    pub(super) fn order_after_unseen_replays(&self, stream: &Stream<D::B>) -> Result<()> {
        match self.unseen_replays().and_then(|u| u.latest) {
            Some((ev, on)) if !self.same_stream_as(&on, stream) => self.device.wait_event(stream, &ev),
            _ => Ok(()),
        }
    }

    fn same_stream_as(&self, a: &Stream<D::B>, b: &Stream<D::B>) -> bool {
        matches!((self.device.stream_id(a), self.device.stream_id(b)), (Some(a), Some(b)) if a == b)
    }

    /// Publishes `ev`, just recorded on `stream` as the array's pending
    /// work, for the next replay to wait for.
    pub(super) fn publish_pending(&self, ev: &Arc<Event<D::B>>, stream: &Stream<D::B>) {
        if let Some(l) = &self.replay {
            let mut st = l.link.state();
            if !st.detached {
                st.latest = Some((ev.clone(), stream.clone()));
            }
        }
    }

    /// The array stops using the linked device copy (replaced or dropped):
    /// replays no longer need ordering with it. Take the replays first.
    pub(super) fn detach_replays(&mut self) {
        if let Some(l) = self.replay.take() {
            let mut st = l.link.state();
            st.detached = true;
            st.latest = None;
        }
    }
}
