//! The capture gate of a stream: makes "is this stream capturing?" and the
//! work enqueued on that answer one decision, atomic with respect to other
//! threads (`docs/design.md#graphs`).
//!
//! Every gpuport path that asks whether a stream captures and then
//! enqueues on it (a `MemArray` method, `record_event`, a graph launch,
//! `keep_until_done`) holds a [`GateShared`] of the stream's gate across
//! the question, the enqueues and its bookkeeping; [`Capture`](super::Capture)'s
//! begin and end hold a [`GateExclusive`]. A capture therefore begins or
//! ends between such sections, never inside one.
//!
//! - **Re-entrant on one thread.** A thread already inside a section of a
//!   gate enters it again at once, even while a capture waits to begin, so
//!   nested sections (a method calling another, a drop run inside one)
//!   cannot deadlock against a waiting writer. Taking the gate exclusively
//!   from inside a section of it (a finalizer beginning a capture on the
//!   stream its operation uses) is refused, never a deadlock.
//! - **Cheap uncontended.** A shared section is one thread-local lookup
//!   and one compare-and-swap to enter, one atomic subtraction to leave;
//!   the mutex and condition variable are touched only while a capture
//!   begins or ends.
//! - **Closed on default streams.** gpuport never captures a device's
//!   default stream (`Capture::begin` refuses it, as CUDA and HIP refuse
//!   their legacy stream), so its gate ([`CaptureGate::closed`]) has no
//!   writer to keep out: a section of it is nothing, and taking it
//!   exclusively is refused. The pool's allocations and frees on the
//!   default stream (what Python's `gpuport.memory.alloc` and the allocator
//!   hooks use) then touch no gate.
//! - **Limit.** The gate orders gpuport's own captures. Another library
//!   (PyTorch, CuPy) beginning a capture through the driver on a stream
//!   handle gpuport gave out passes no gate: the GPU paths therefore keep
//!   asking the driver where they did, and refuse or keep owners for the
//!   process as before.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use crate::error::{graph_error, BackendKind, GraphErrorKind, Result};

/// Set while a writer holds the gate or waits for readers to leave.
const WRITER: usize = 1 << (usize::BITS - 1);

/// A reader-writer gate, re-entrant for readers on one thread (public in
/// name only: the backend traits name it; only this crate can use it).
pub struct CaptureGate {
    /// `WRITER`, plus the number of shared sections inside.
    state: AtomicUsize,
    /// Taken only on the slow paths (a writer present), with `changed`.
    lock: Mutex<()>,
    changed: Condvar,
    /// False for the gate of a stream gpuport never captures (a device's
    /// default stream): never taken exclusively, so sections skip it.
    open: bool,
}

impl Default for CaptureGate {
    /// The gate of a stream that may capture.
    fn default() -> Self {
        CaptureGate { state: AtomicUsize::new(0), lock: Mutex::new(()), changed: Condvar::new(), open: true }
    }
}

impl std::fmt::Debug for CaptureGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.open {
            return write!(f, "CaptureGate(closed)");
        }
        let s = self.state.load(Ordering::Relaxed);
        write!(f, "CaptureGate(writer {}, readers {})", s & WRITER != 0, s & !WRITER)
    }
}

thread_local! {
    /// The first gate this thread entered and is still inside: its key and
    /// depth (depth 0: the slot is empty), and how many gates `MORE` holds.
    /// Most threads are inside one gate at most, so a section's entry and
    /// exit touch this cell alone: no destructor, so no registration check,
    /// and no borrow flag (50 instructions fewer per pool allocation and
    /// free on a created stream than with the vector alone, counted with
    /// callgrind).
    static FIRST: Cell<Inside> = const { Cell::new(Inside { key: 0, depth: 0, more: 0 }) };
    /// The other gates this thread is inside (by key), with a depth each.
    static MORE: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
}

/// This thread's first gate (see `FIRST`).
#[derive(Clone, Copy)]
struct Inside {
    key: usize,
    depth: usize,
    more: usize,
}

/// Adds one to the depth of gate `key` in this thread's sections if it is
/// there; whether it was.
#[inline]
fn reenter(key: usize) -> bool {
    let first = FIRST.get();
    if first.depth > 0 && first.key == key {
        FIRST.set(Inside { depth: first.depth + 1, ..first });
        return true;
    }
    // With the thread's locals gone (an exit handler), `MORE` reads as empty.
    first.more > 0
        && MORE
            .try_with(|m| match m.borrow_mut().iter_mut().find(|(k, _)| *k == key) {
                Some((_, depth)) => {
                    *depth += 1;
                    true
                }
                None => false,
            })
            .unwrap_or(false)
}

/// Records a first section of gate `key` on this thread.
#[inline]
fn note_entered(key: usize) {
    let first = FIRST.get();
    if first.depth == 0 {
        FIRST.set(Inside { key, depth: 1, ..first });
    } else if MORE.try_with(|m| m.borrow_mut().push((key, 1))).is_ok() {
        FIRST.set(Inside { more: first.more + 1, ..first });
    }
    // Else (an exit handler) it is not tracked for re-entry: a thread that
    // runs no capture cannot deadlock.
}

/// Takes one off the depth of gate `key` in this thread's sections.
#[inline]
fn note_left(key: usize) {
    let first = FIRST.get();
    if first.depth > 0 && first.key == key {
        FIRST.set(Inside { depth: first.depth - 1, ..first });
        return;
    }
    if first.more == 0 {
        return;
    }
    let _ = MORE.try_with(|m| {
        let mut m = m.borrow_mut();
        if let Some(i) = m.iter().position(|(k, _)| *k == key) {
            m[i].1 -= 1;
            if m[i].1 == 0 {
                m.swap_remove(i);
                FIRST.set(Inside { more: first.more - 1, ..first });
            }
        }
    });
}

impl CaptureGate {
    /// The gate of a stream gpuport never captures (a device's default
    /// stream): its sections cost nothing and [`exclusive`](Self::exclusive)
    /// is refused ([`GraphErrorKind::DefaultStream`]).
    pub(crate) fn closed() -> Self {
        CaptureGate { open: false, ..Default::default() }
    }

    fn key(&self) -> usize {
        self as *const Self as usize
    }

    /// Whether this thread is inside a shared section of the gate.
    pub(crate) fn held_here(&self) -> bool {
        if !self.open {
            return false;
        }
        let key = self.key();
        let first = FIRST.get();
        (first.depth > 0 && first.key == key)
            || (first.more > 0 && MORE.try_with(|m| m.borrow().iter().any(|(k, _)| *k == key)).unwrap_or(false))
    }

    /// Whether this thread is inside a shared section of any gate.
    pub(crate) fn any_held_here() -> bool {
        let first = FIRST.get();
        first.depth > 0 || first.more > 0
    }

    /// Enters a shared section: no capture begins or ends on the stream
    /// until it is left. Waits while a capture is beginning or ending.
    /// A closed gate's section is this inlined check alone; an open gate's
    /// work is out of line, so that the check needs no stack frame.
    #[inline]
    pub(crate) fn shared(&self) -> GateShared<'_> {
        if !self.open {
            return GateShared::new(self);
        }
        self.shared_open()
    }

    /// [`shared`](Self::shared) of an open gate.
    #[inline(never)]
    fn shared_open(&self) -> GateShared<'_> {
        // Re-entered, or entered with no writer present: one look at the
        // thread's sections.
        if let Some(g) = self.enter_unless_writer() {
            return g;
        }
        // Not inside (this thread's sections cannot have changed since):
        // wait while a capture begins or ends.
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & WRITER == 0 {
                if self.state.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    break;
                }
                continue;
            }
            let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            while self.state.load(Ordering::Relaxed) & WRITER != 0 {
                g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
            }
        }
        note_entered(self.key());
        GateShared::new(self)
    }

    /// Enters a shared section if that needs no wait: `None` while a
    /// capture is beginning or ending (for callers that hold a lock others
    /// wait for inside sections, such as the caching pool's, and must not
    /// wait for a capture in turn).
    #[inline]
    pub(crate) fn try_shared(&self) -> Option<GateShared<'_>> {
        if !self.open {
            return Some(GateShared::new(self));
        }
        self.try_shared_open()
    }

    /// [`try_shared`](Self::try_shared) of an open gate.
    #[inline(never)]
    fn try_shared_open(&self) -> Option<GateShared<'_>> {
        self.enter_unless_writer()
    }

    /// Re-enters a section this thread is inside, or enters one while no
    /// writer holds or waits for the gate; `None` otherwise. Inlined into
    /// both entries, so that `shared` makes one call.
    #[inline(always)]
    fn enter_unless_writer(&self) -> Option<GateShared<'_>> {
        let key = self.key();
        // Re-entered at once if inside, else entered with a compare-and-swap
        // and recorded.
        if reenter(key) {
            // Inside already: the count is above 0, so no writer holds the
            // gate (one may wait, for this very section).
            self.state.fetch_add(1, Ordering::Acquire);
            return Some(GateShared::new(self));
        }
        if !self.try_enter() {
            return None;
        }
        note_entered(key);
        Some(GateShared::new(self))
    }

    /// One compare-and-swap into the shared count, refused while a writer
    /// holds or waits for the gate.
    #[inline]
    fn try_enter(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s & WRITER == 0 && self.state.compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Takes the gate exclusively: waits for every shared section to be
    /// left and keeps new ones out until dropped. From inside a shared
    /// section of the gate on this thread: [`GraphErrorKind::AlreadyCapturing`]
    /// (`op` names the call), instead of a deadlock.
    pub(crate) fn exclusive(&self, backend: BackendKind, op: &'static str) -> Result<GateExclusive<'_>> {
        if !self.open {
            return Err(default_stream_refused(backend, op));
        }
        if self.held_here() {
            return Err(graph_error(
                backend,
                op,
                GraphErrorKind::AlreadyCapturing,
                "called from inside an operation on the same stream (a drop or callback it ran); the capture \
                 state cannot change while that operation runs"
                    .into(),
            ));
        }
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.state.load(Ordering::Relaxed) & WRITER != 0 {
            g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        self.state.fetch_or(WRITER, Ordering::Acquire);
        while self.state.load(Ordering::Acquire) & !WRITER != 0 {
            g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        Ok(GateExclusive { gate: self })
    }
}

/// [`GraphErrorKind::DefaultStream`] for `op`: a capture of a device's
/// default stream (refused by `Capture::begin`, and by its closed gate).
pub(crate) fn default_stream_refused(backend: BackendKind, op: &'static str) -> crate::Error {
    graph_error(
        backend,
        op,
        GraphErrorKind::DefaultStream,
        "the default stream cannot be captured (CUDA and HIP refuse their legacy default stream); capture a stream \
         made by create_stream"
            .into(),
    )
}

/// A shared section of a [`CaptureGate`]; leaving it is dropping it.
/// Not `Send`: the section is recorded in the entering thread's locals,
/// and left from another thread it would stay recorded there, letting that
/// thread re-enter past a writer.
#[must_use = "the section ends when the guard is dropped"]
pub(crate) struct GateShared<'a> {
    gate: &'a CaptureGate,
    _thread: PhantomData<*const ()>,
}

impl<'a> GateShared<'a> {
    fn new(gate: &'a CaptureGate) -> Self {
        GateShared { gate, _thread: PhantomData }
    }
}

impl Drop for GateShared<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.gate.open {
            self.leave();
        }
    }
}

impl GateShared<'_> {
    /// Leaves a section of an open gate (out of line, as `shared_open`).
    #[inline(never)]
    fn leave(&self) {
        note_left(self.gate.key());
        let before = self.gate.state.fetch_sub(1, Ordering::Release);
        if before & WRITER != 0 && before & !WRITER == 1 {
            // The last reader a waiting writer waits for: under the lock, so
            // the writer is either before its check or already waiting.
            let _g = self.gate.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.gate.changed.notify_all();
        }
    }
}

/// The exclusive hold of a [`CaptureGate`] (a capture beginning or ending).
#[must_use = "the gate is released when the guard is dropped"]
pub(crate) struct GateExclusive<'a> {
    gate: &'a CaptureGate,
}

impl Drop for GateExclusive<'_> {
    fn drop(&mut self) {
        let _g = self.gate.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.gate.state.fetch_and(!WRITER, Ordering::Release);
        self.gate.changed.notify_all();
    }
}

/// The process-wide gate of calls that ask whether any capture forbids a
/// device-wide call and then make it (the dynamic layer's `prune`, which
/// queries events only while no capture forbids it): every capture's begin
/// takes it exclusively, after its stream's gate.
pub(crate) static DEVICE_WIDE: CaptureGate =
    CaptureGate { state: AtomicUsize::new(0), lock: Mutex::new(()), changed: Condvar::new(), open: true };

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn shared_sections_nest_and_a_writer_waits_for_them() {
        let gate = Arc::new(CaptureGate::default());
        let outer = gate.shared();
        let inner = gate.shared();
        assert!(gate.exclusive(BackendKind::Host, "test").is_err(), "refused from inside, not a deadlock");
        let entered = Arc::new(AtomicBool::new(false));
        let (g, e) = (gate.clone(), entered.clone());
        let writer = std::thread::spawn(move || {
            let _x = g.exclusive(BackendKind::Host, "test").unwrap();
            e.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!entered.load(Ordering::SeqCst), "the writer entered during a shared section");
        // Re-entering while the writer waits does not deadlock.
        drop(gate.shared());
        drop(inner);
        assert!(!entered.load(Ordering::SeqCst));
        drop(outer);
        writer.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
        assert!(!gate.held_here());
        drop(gate.exclusive(BackendKind::Host, "test").unwrap());
    }

    #[test]
    fn sections_of_several_gates_are_tracked_apart_in_any_order() {
        // The first gate sits in the thread's slot, the others in its list:
        // leave the first while inside the others, enter a third into the
        // freed slot, and re-enter one of the list while a writer waits.
        let (a, b, c) = (CaptureGate::default(), Arc::new(CaptureGate::default()), CaptureGate::default());
        let in_a = a.shared();
        let in_b = b.shared();
        assert!(a.held_here() && b.held_here() && !c.held_here());
        drop(in_a);
        assert!(!a.held_here() && b.held_here(), "leaving the first gate left the second tracked");
        let in_c = c.shared();
        assert!(c.held_here() && b.held_here());
        let writer = {
            let b = b.clone();
            std::thread::spawn(move || drop(b.exclusive(BackendKind::Host, "test").unwrap()))
        };
        while b.state.load(Ordering::Relaxed) & WRITER == 0 {
            std::thread::yield_now();
        }
        // Re-entered at once although the writer waits: it is this thread's.
        let again = b.try_shared().expect("a section this thread is inside is re-entered, not refused");
        assert!(a.try_shared().is_some() && c.try_shared().is_some());
        assert!(b.exclusive(BackendKind::Host, "test").is_err(), "refused from inside, not a deadlock");
        drop((again, in_c));
        assert!(b.held_here() && CaptureGate::any_held_here());
        drop(in_b);
        writer.join().unwrap();
        assert!(!a.held_here() && !b.held_here() && !c.held_here() && !CaptureGate::any_held_here());
        assert_eq!([&a, &*b, &c].map(|g| g.state.load(Ordering::Relaxed)), [0, 0, 0]);
    }

    #[test]
    fn a_closed_gate_is_never_taken_exclusively_and_its_sections_are_not_tracked() {
        let gate = CaptureGate::closed();
        let outer = gate.shared();
        let inner = gate.try_shared().expect("a closed gate has no writer to wait for");
        assert!(!gate.held_here(), "sections of a closed gate are not tracked");
        assert!(!CaptureGate::any_held_here());
        assert_eq!(gate.state.load(Ordering::Relaxed), 0, "no count is kept");
        drop((inner, outer));
        let refused = gate.exclusive(BackendKind::Host, "test").err().expect("a closed gate is never taken");
        assert!(matches!(refused, crate::Error::Graph { kind: GraphErrorKind::DefaultStream, .. }), "{refused:?}");
        // An open gate still counts its sections.
        let open = CaptureGate::default();
        let _s = open.shared();
        assert!(open.held_here());
        assert_eq!(open.state.load(Ordering::Relaxed), 1);
    }
}
