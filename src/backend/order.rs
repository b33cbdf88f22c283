//! Replay order locks: one step at a time on memory that graph replays and
//! other work share (`docs/design.md#graphs`).
//!
//! A `MemArray` whose kernel methods a graph captured shares a link with
//! the graph (`src/array/memarray/replay.rs`). The link's [`OrderLock`] is
//! held by each [`GraphExec::launch`](super::GraphExec::launch) across its
//! waits, launch and records, and by each array method across its checks,
//! enqueues and bookkeeping: a replay on one thread and a method on another
//! therefore never interleave, and each is ordered after the other's work.
//!
//! Rules, which keep these locks and the capture gates (`gate.rs`) free of
//! deadlocks:
//! - **Before gates.** An order lock is taken before any capture gate: a
//!   thread inside a gate section only re-enters order locks it holds.
//! - **In address order.** Work on several links takes their locks at once
//!   ([`hold_in_order`]), lowest address first, as launches do.
//! - **Re-entrant.** A method calling another re-enters the lock.
//!
//! Debug builds check the first two on each first entry.

use std::cell::RefCell;
use std::sync::Arc;

use parking_lot::{ArcReentrantMutexGuard, RawMutex, RawThreadId, ReentrantMutex};

use super::gate::CaptureGate;

/// The lock of one replay link (re-entrant on one thread).
pub(crate) type OrderLock = Arc<ReentrantMutex<()>>;

/// A new, unheld [`OrderLock`].
pub(crate) fn order_lock() -> OrderLock {
    Arc::new(ReentrantMutex::new(()))
}

thread_local! {
    /// The addresses of the order locks this thread holds, as first taken
    /// (kept in debug builds only, for the rules' checks).
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Order locks held together; dropping it releases them.
#[must_use = "the locks are released when the guard is dropped"]
pub(crate) struct ReplayOrder {
    /// With the address of each lock taken first by this hold (for `HELD`).
    guards: Vec<(ArcReentrantMutexGuard<RawMutex, RawThreadId, ()>, Option<usize>)>,
}

impl ReplayOrder {
    /// Holds nothing (work on memory no graph replays).
    pub(crate) fn none() -> Self {
        ReplayOrder { guards: Vec::new() }
    }
}

/// Takes `locks`, each once, lowest address first (see the module docs).
pub(crate) fn hold_in_order(locks: impl IntoIterator<Item = OrderLock>) -> ReplayOrder {
    let mut locks: Vec<OrderLock> = locks.into_iter().collect();
    if locks.is_empty() {
        return ReplayOrder::none();
    }
    let address = |l: &OrderLock| Arc::as_ptr(l) as usize;
    locks.sort_by_key(address);
    locks.dedup_by_key(|l| address(l));
    let guards = locks
        .iter()
        .map(|lock| {
            if lock.is_owned_by_current_thread() {
                return (lock.lock_arc(), None);
            }
            let at = address(lock);
            debug_assert!(
                !CaptureGate::any_held_here(),
                "a replay order lock taken inside a capture gate section (take it first: `backend/order.rs`)"
            );
            debug_assert!(
                HELD.try_with(|h| h.borrow().iter().all(|&held| held < at)).unwrap_or(true),
                "replay order locks taken out of address order (take them together: `hold_in_order`)"
            );
            let guard = lock.lock_arc();
            if cfg!(debug_assertions) {
                let _ = HELD.try_with(|h| h.borrow_mut().push(at));
            }
            (guard, Some(at))
        })
        .collect();
    ReplayOrder { guards }
}

impl Drop for ReplayOrder {
    fn drop(&mut self) {
        for (guard, first) in self.guards.drain(..).rev() {
            if let (true, Some(at)) = (cfg!(debug_assertions), first) {
                let _ = HELD.try_with(|h| h.borrow_mut().retain(|&held| held != at));
            }
            drop(guard);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_hold_excludes_other_threads_and_re_enters_on_its_own() {
        let (a, b) = (order_lock(), order_lock());
        let outer = hold_in_order([b.clone(), a.clone(), a.clone()]);
        let inner = hold_in_order([a.clone()]); // re-entered, not a deadlock
        let entered = Arc::new(AtomicBool::new(false));
        let (lock, e) = (a.clone(), entered.clone());
        let other = std::thread::spawn(move || {
            let _hold = hold_in_order([lock]);
            e.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(inner);
        assert!(!entered.load(Ordering::SeqCst), "another thread entered while the lock was held");
        drop(outer);
        other.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
        assert!(HELD.with(|h| h.borrow().is_empty()));
    }
}
