//! Marker events kept for reuse, per device.
//!
//! An array records a marker event after each kernel or upload
//! (`MemArray::record_pending`) and drops the one before it, so without a
//! pool every such operation created one event and destroyed another:
//! `cuEventCreate`, and `cuEventDestroy` with a current-context check and
//! two capture-mode exchanges around it (`apart_from_captures` in
//! `stream.rs`). Dropping a marker event instead puts its handle back in
//! its device's pool, and the next marker event of the device takes it:
//! no driver call either way.
//!
//! Rules the rest of the GPU core relies on:
//! - **Sole owner.** An [`OwnedEvent`] is the only handle of its event; it
//!   is not `Clone`, and it goes back to the pool in its `Drop`, so nothing
//!   refers to an event in the pool, and a reused event is never observed by
//!   an earlier holder. (A wait enqueued on an event, or begun on it, is for
//!   the record made before it, CUDA's and HIP's rule: a later record by the
//!   next holder changes no earlier wait.)
//! - **Marker events only.** Only events made without timing are kept
//!   (`Driver::event_create_untimed`), and only those last recorded outside
//!   a capture: an event recorded inside one belongs to that capture's
//!   graph, and is destroyed as before (`GpuEvent`'s `Drop`).
//! - **Bounded.** A device keeps at most [`KEPT_PER_DEVICE`] events; more
//!   are destroyed.
//! - **Emptied before the context goes.** The pool lives in its driver
//!   state (`Driver::marker_events`), whose `Drop` destroys the events it
//!   holds ([`destroy_pooled`]) before releasing the context, as every live
//!   event's `Arc` of the driver state keeps the context until the event is
//!   destroyed.
//!
//! An event taken from the pool keeps the state of its previous holder's
//! last record until it is recorded again: gpuport records every marker
//! event it takes at once (`Device::create_marker_event` says so).

use std::sync::{Arc, Mutex};

use crate::error::Result;

/// The most marker events one device keeps for reuse. An operation drops
/// one event as it makes the next, so a handful covers a thread; 64 leave
/// room for many threads and streams (events are small driver objects).
pub(crate) const KEPT_PER_DEVICE: usize = 64;

/// The free marker events of one device (public in name only: the driver
/// table names it).
pub struct EventPool<E> {
    free: Mutex<Vec<E>>,
    capacity: usize,
}

// SAFETY: a pool is made only by `with_capacity`, whose caller promises that
// its events may be used from any thread; the mutex serializes the list.
unsafe impl<E> Send for EventPool<E> {}
// SAFETY: as above.
unsafe impl<E> Sync for EventPool<E> {}

impl<E> EventPool<E> {
    /// A pool that keeps at most [`KEPT_PER_DEVICE`] events.
    ///
    /// # Safety
    /// As [`with_capacity`](Self::with_capacity).
    pub(crate) unsafe fn per_device() -> Self {
        // SAFETY: the caller's contract, forwarded.
        unsafe { Self::with_capacity(KEPT_PER_DEVICE) }
    }

    /// A pool that keeps at most `capacity` events.
    ///
    /// # Safety
    /// `E`'s values may be moved to and used from any thread (a vendor's
    /// handles: `Driver`'s contract).
    pub(crate) unsafe fn with_capacity(capacity: usize) -> Self {
        EventPool { free: Mutex::new(Vec::new()), capacity }
    }

    fn free(&self) -> std::sync::MutexGuard<'_, Vec<E>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free event, removed from the pool; `None` when there is none.
    pub(crate) fn take(&self) -> Option<E> {
        self.free().pop()
    }

    /// Keeps `event` for reuse; gives it back (`Some`) when the pool is
    /// full, for the caller to destroy.
    pub(crate) fn give_back(&self, event: E) -> Option<E> {
        let mut free = self.free();
        if free.len() >= self.capacity {
            return Some(event);
        }
        free.push(event);
        None
    }

    /// Empties the pool: the events it held, for the caller to destroy.
    pub(crate) fn drain(&self) -> Vec<E> {
        std::mem::take(&mut *self.free())
    }

    /// Events in the pool now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.free().len()
    }
}

/// Where an [`OwnedEvent`] comes from and goes to: a device's driver state
/// (`Driver`, in `stream.rs`), or a fake in the tests.
pub(crate) trait EventSource: Send + Sync + 'static {
    /// The vendor's event handle.
    type Event: Copy;

    /// The device's pool of marker events.
    fn pool(&self) -> &EventPool<Self::Event>;

    /// Creates a marker event (no timing).
    fn create_marker(&self) -> Result<Self::Event>;

    /// Destroys `events`.
    ///
    /// # Safety
    /// Each was made by this source, is destroyed once, and is not used after.
    unsafe fn destroy(&self, events: Vec<Self::Event>);
}

/// The one handle of an event: destroys it, or, for a reusable marker
/// event, gives it back to its device's pool, when dropped.
pub(crate) struct OwnedEvent<S: EventSource> {
    raw: S::Event,
    source: Arc<S>,
    /// A marker event, which may go back to the pool.
    reusable: bool,
}

impl<S: EventSource> OwnedEvent<S> {
    /// Takes ownership of `raw`, an event made by `source` that is not a
    /// marker event (it is destroyed with its handle).
    pub(crate) fn new(source: Arc<S>, raw: S::Event) -> Self {
        OwnedEvent { raw, source, reusable: false }
    }

    /// A marker event of `source`: one from its pool, else a new one.
    pub(crate) fn marker(source: Arc<S>) -> Result<Self> {
        let raw = match source.pool().take() {
            Some(raw) => raw,
            None => source.create_marker()?,
        };
        Ok(OwnedEvent { raw, source, reusable: true })
    }

    pub(crate) fn raw(&self) -> S::Event {
        self.raw
    }

    pub(crate) fn source(&self) -> &Arc<S> {
        &self.source
    }

    /// Destroys the event when dropped, even a marker event (one recorded
    /// inside a capture belongs to the capture's graph).
    pub(crate) fn keep_out_of_pool(&mut self) {
        self.reusable = false;
    }
}

impl<S: EventSource> Drop for OwnedEvent<S> {
    fn drop(&mut self) {
        let destroy = match self.reusable {
            true => self.source.pool().give_back(self.raw),
            false => Some(self.raw),
        };
        if let Some(raw) = destroy {
            // SAFETY: made by `source`; this was its one handle, and it is
            // not in the pool (`give_back` kept it out), so it is destroyed
            // once and nothing uses it after.
            unsafe { self.source.destroy(vec![raw]) };
        }
    }
}

/// Destroys the events `source`'s pool holds (a driver state's `Drop`,
/// before it releases its context).
pub(crate) fn destroy_pooled<S: EventSource>(source: &S) {
    let events = source.pool().drain();
    if !events.is_empty() {
        // SAFETY: the pool held each event alone (no handle refers to an
        // event in it), and `drain` removed them: destroyed once, unused after.
        unsafe { source.destroy(events) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Events are numbers; the source counts what it creates and destroys.
    struct Fake {
        pool: EventPool<u64>,
        created: AtomicU64,
        destroyed: Mutex<Vec<u64>>,
    }

    impl Fake {
        fn with_capacity(capacity: usize) -> Arc<Self> {
            // SAFETY: numbers may go to any thread.
            let pool = unsafe { EventPool::with_capacity(capacity) };
            Arc::new(Fake { pool, created: AtomicU64::new(0), destroyed: Mutex::default() })
        }
        fn created(&self) -> u64 {
            self.created.load(Ordering::SeqCst)
        }
        fn destroyed(&self) -> Vec<u64> {
            self.destroyed.lock().unwrap().clone()
        }
    }

    impl EventSource for Fake {
        type Event = u64;
        fn pool(&self) -> &EventPool<u64> {
            &self.pool
        }
        fn create_marker(&self) -> Result<u64> {
            Ok(self.created.fetch_add(1, Ordering::SeqCst) + 1)
        }
        unsafe fn destroy(&self, events: Vec<u64>) {
            self.destroyed.lock().unwrap().extend(events);
        }
    }

    #[test]
    fn a_dropped_marker_event_is_taken_again_instead_of_created() {
        let fake = Fake::with_capacity(4);
        let first = OwnedEvent::marker(fake.clone()).unwrap();
        let raw = first.raw();
        drop(first);
        assert_eq!(fake.pool.len(), 1, "the dropped event went back to the pool");
        let again = OwnedEvent::marker(fake.clone()).unwrap();
        assert_eq!(again.raw(), raw, "the pooled event was not reused");
        assert_eq!(fake.created(), 1, "a second event was created");
        assert_eq!(fake.pool.len(), 0, "a taken event stayed in the pool");
        assert!(fake.destroyed().is_empty());
    }

    #[test]
    fn an_event_is_pooled_only_when_its_last_holder_goes() {
        let fake = Fake::with_capacity(4);
        // Held as arrays hold their pending event: shared through an `Arc`.
        let held = Arc::new(OwnedEvent::marker(fake.clone()).unwrap());
        let other_holder = held.clone();
        drop(held);
        assert_eq!(fake.pool.len(), 0, "pooled while a holder remains");
        // Another operation takes an event meanwhile: a new one, never the held one.
        let next = OwnedEvent::marker(fake.clone()).unwrap();
        assert_ne!(next.raw(), other_holder.raw(), "a held event was handed out again");
        let raws = [next.raw(), other_holder.raw()];
        drop(next);
        drop(other_holder);
        assert_eq!(fake.pool.len(), 2);
        // Live takes never share an event.
        let (a, b) = (OwnedEvent::marker(fake.clone()).unwrap(), OwnedEvent::marker(fake.clone()).unwrap());
        assert_ne!(a.raw(), b.raw(), "two live holders got the same event");
        assert!(raws.contains(&a.raw()) && raws.contains(&b.raw()));
        assert_eq!(fake.created(), 2);
    }

    #[test]
    fn the_pool_keeps_at_most_its_bound_and_destroys_the_rest() {
        let fake = Fake::with_capacity(3);
        let events: Vec<_> = (0..5).map(|_| OwnedEvent::marker(fake.clone()).unwrap()).collect();
        drop(events);
        assert_eq!(fake.pool.len(), 3, "the pool kept more or fewer than its bound");
        assert_eq!(fake.destroyed().len(), 2, "events beyond the bound were not destroyed");
        // SAFETY: numbers may go to any thread.
        assert_eq!(unsafe { EventPool::<u64>::per_device() }.capacity, KEPT_PER_DEVICE);
    }

    #[test]
    fn timed_and_captured_events_are_destroyed_not_pooled() {
        let fake = Fake::with_capacity(4);
        drop(OwnedEvent::new(fake.clone(), 77));
        let mut captured = OwnedEvent::marker(fake.clone()).unwrap();
        let raw = captured.raw();
        captured.keep_out_of_pool();
        drop(captured);
        assert_eq!(fake.pool.len(), 0, "a timed or captured event went to the pool");
        assert_eq!(fake.destroyed(), vec![77, raw]);
    }

    #[test]
    fn teardown_destroys_every_pooled_event_once() {
        let fake = Fake::with_capacity(8);
        let events: Vec<_> = (0..3).map(|_| OwnedEvent::marker(fake.clone()).unwrap()).collect();
        let live = OwnedEvent::marker(fake.clone()).unwrap();
        drop(events);
        destroy_pooled(&*fake);
        let mut destroyed = fake.destroyed();
        destroyed.sort_unstable();
        assert_eq!(destroyed, vec![1, 2, 3], "the pooled events, each once, and not the live one");
        assert_eq!(fake.pool.len(), 0);
        destroy_pooled(&*fake);
        assert_eq!(fake.destroyed().len(), 3, "a second teardown destroyed again");
        drop(live);
        assert_eq!(fake.pool.len(), 1, "a holder outliving teardown pools its event (its own `Arc` of the source)");
    }
}
