//! Operands of asynchronous work, kept alive until the work has run.
//!
//! A binding that enqueues a copy or a launch on memory its caller owns
//! keeps the owners here with [`keep_until_done`]; [`prune`] drops those
//! whose work is complete. The caller decides when to prune (the Python
//! package does it at each runtime call, with the interpreter lock held, so
//! the owners it drops are Python objects released under that lock).
//!
//! ```
//! use gpuport::dynamic::{keep, AnyStream};
//! let dev = gpuport::open("host")?;
//! let s = AnyStream::default_for(&dev);
//! keep::keep_until_done(&s, Box::new(vec![0u8; 16]))?;
//! s.synchronize()?;
//! keep::prune();
//! assert_eq!(keep::pending(), 0);
//! # Ok::<(), gpuport::Error>(())
//! ```
//!
//! Work that reaches its stream only when an enclosing call ends (the
//! collectives of a `Communicator::group`, which the engine enqueues at the
//! group's end) has its owners kept on the calling thread until then, and
//! kept from then on: a marker recorded before would complete before the
//! work ran.
//!
//! # Cost per kept operation
//!
//! This runs once per asynchronous call from Python (every launch with
//! arguments to keep), so it is built to cost little:
//!
//! - The marker event recorded after the work is timing-free
//!   ([`AnyStream::record_marker`]) and comes from a small pool of events
//!   whose earlier record has completed and whose owners were dropped, so a
//!   GPU records an event that exists instead of creating and destroying
//!   one per call.
//! - Kept operations sit in one queue per stream (a *lane*), oldest
//!   first, in the order their markers were recorded (recorded and queued
//!   under one lock). A stream runs its work in order, so its markers
//!   complete in that order: [`prune`] asks the newest marker of each lane
//!   (one query releases everything when the stream has caught up), else
//!   finds the first incomplete one by binary search, instead of asking
//!   every kept operation's event.
//! - A launch prunes only streams with [`LAUNCH_PRUNE_LEN`] or more kept
//!   operations: an event query costs about a third of a launch on an
//!   H200, so a loop of launches asks once per that many.
//!
//! # Soundness
//!
//! Owners are dropped only when their own marker, or a marker recorded
//! after it on the same stream, reports complete (or cannot be asked at all
//! because its device failed, when nothing will run any more). A marker is
//! recorded on the stream after the work it guards was enqueued there, so
//! it completes only once that work has; a stream completes its markers in
//! the order they were recorded, which is a lane's queue order (recorded
//! and queued under one lock). Asking a lane less often, or not at all,
//! only keeps owners longer. An event returns to the pool only after its
//! record was known complete and its entry removed, so no kept operation
//! refers to it any more when it is recorded again.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::graph::StreamKey;
use super::stream::{AnyEvent, AnyStream};
use crate::error::{BackendKind, Result};

struct Kept {
    done: AnyEvent,
    _owners: Box<dyn Send>,
}

/// The kept operations of one stream, oldest first.
struct Lane {
    /// `None` for streams the backend cannot tell apart: such a lane's
    /// markers may come from several streams, so every one is asked.
    key: Option<StreamKey>,
    backend: BackendKind,
    ordinal: usize,
    queue: VecDeque<Kept>,
}

struct State {
    lanes: Vec<Lane>,
    /// Marker events whose last record has completed, free to record again:
    /// (backend, ordinal, event).
    pool: Vec<(BackendKind, usize, AnyEvent)>,
}

/// Events kept for reuse, at most (per process).
const POOL_MAX: usize = 64;

static STATE: Mutex<State> = Mutex::new(State { lanes: Vec::new(), pool: Vec::new() });

/// How many operations the lanes hold, changed only under [`STATE`]'s lock.
/// [`take_completed`] reads it without the lock to skip a launch's prune
/// when no lane can be long enough: a stale figure only skips a prune the
/// next call makes, which keeps owners longer and never drops one early.
static KEPT_LEN: AtomicUsize = AtomicUsize::new(0);

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Owners of work captured into graphs gpuport cannot see (see the module docs).
static FOREIGN: Mutex<Vec<Box<dyn Send>>> = Mutex::new(Vec::new());

/// Keeps `owners` alive until the work enqueued on `stream` so far has run,
/// or, on a capturing stream, as long as the graph (see the module docs).
pub fn keep_until_done(stream: &AnyStream, owners: Box<dyn Send>) -> Result<()> {
    // The capture state asked below holds for the marker recorded after it
    // (`gate.rs`): a capture begun in between would take the marker as a
    // node, and `prune` would count it complete while the work still runs.
    let _section = stream.capture_section();
    let owners = match super::graph::keep_for_capture(stream, owners) {
        Ok(()) => return Ok(()),
        Err(owners) => owners,
    };
    // A stream whose state cannot be asked (CUDA's legacy default stream
    // while another blocking stream captures) is not capturing itself.
    if stream.capture_status().is_ok_and(|s| s.is_capturing()) {
        FOREIGN.lock().unwrap_or_else(|e| e.into_inner()).push(owners);
        return Ok(());
    }
    let backend = stream.backend();
    let ordinal = stream.device().info().ordinal;
    let key = stream.key();
    // Recorded under the lock: a lane's queue is then in the order its
    // markers were recorded, which `take_completed`'s search relies on.
    let mut st = state();
    let at = st.pool.iter().rposition(|(b, o, _)| *b == backend && *o == ordinal);
    let reuse = at.map(|i| st.pool.swap_remove(i).2);
    let done = stream.record_marker(reuse)?;
    let kept = Kept { done, _owners: owners };
    KEPT_LEN.fetch_add(1, Ordering::Relaxed);
    match key.and_then(|k| st.lanes.iter_mut().find(|l| l.key == Some(k))) {
        Some(lane) => lane.queue.push_back(kept),
        None => {
            let lane = match key {
                Some(_) => None,
                None => st.lanes.iter_mut().find(|l| l.key.is_none() && l.backend == backend && l.ordinal == ordinal),
            };
            match lane {
                Some(lane) => lane.queue.push_back(kept),
                None => st.lanes.push(Lane { key, backend, ordinal, queue: VecDeque::from([kept]) }),
            }
        }
    }
    Ok(())
}

// ---- work that reaches its stream when a scope ends --------------------------------------

/// Owners whose work has not reached their stream yet, with the stream.
type Deferred = Vec<(AnyStream, Box<dyn Send>)>;

thread_local! {
    /// Owners given to [`keep_at_scope_end`] inside this thread's open
    /// [`deferring`] scope; `None` outside one.
    static DEFERRED: RefCell<Option<Deferred>> = const { RefCell::new(None) };
}

/// Runs `f` as a scope whose work reaches its streams only when it ends (a
/// collective group: NCCL enqueues the group's calls at `ncclGroupEnd`, the
/// host engine runs them then). Owners given to [`keep_at_scope_end`] inside
/// it are kept as [`keep_until_done`] keeps them once `f` has returned (or
/// unwound): a marker recorded before would complete before the work ran.
/// Scopes nest; the outermost keeps everything. Its error, if keeping
/// failed, comes after `f`'s own.
pub(crate) fn deferring<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    let outer = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        let outer = d.is_none();
        if outer {
            *d = Some(Vec::new());
        }
        outer
    });
    if !outer {
        return f();
    }
    /// Keeps what the scope collected even when `f` unwinds.
    struct End;
    impl Drop for End {
        fn drop(&mut self) {
            let _ = keep_deferred();
        }
    }
    let end = End;
    let out = f();
    std::mem::forget(end);
    let kept = keep_deferred();
    let out = out?;
    kept.map(|()| out)
}

/// Ends this thread's scope: keeps each owner it collected on its stream.
fn keep_deferred() -> Result<()> {
    let deferred = DEFERRED.with(|d| d.borrow_mut().take()).unwrap_or_default();
    let mut first = Ok(());
    for (stream, owners) in deferred {
        let kept = keep_until_done(&stream, owners);
        if first.is_ok() {
            first = kept;
        }
    }
    first
}

/// [`keep_until_done`] for work that reaches `stream` when this thread's
/// open [`deferring`] scope ends: kept until then. Outside a scope, at once.
pub(crate) fn keep_at_scope_end(stream: &AnyStream, owners: Box<dyn Send>) -> Result<()> {
    let owners = DEFERRED.with(|d| match d.borrow_mut().as_mut() {
        Some(list) => {
            list.push((stream.clone(), owners));
            None
        }
        None => Some(owners),
    });
    match owners {
        Some(owners) => keep_until_done(stream, owners),
        None => Ok(()),
    }
}

/// Whether an event of `dev` may be queried now: not while a capture on the
/// device forbids waits (CUDA and HIP count an event query among the calls
/// that invalidate a capture in Global mode, from any thread, or in
/// ThreadLocal mode, from its thread); such owners wait for the next prune.
fn may_query(backend: BackendKind, ordinal: usize) -> bool {
    crate::backend::graph::check_device_wide_wait(backend, ordinal, "prune").is_ok()
}

/// Drops the owners of completed work (an event that cannot be queried
/// counts as complete: its device failed, and nothing will run). Work on a
/// device where a capture forbids event queries is left for a later prune.
///
/// Finds each stream's completed markers with a few queries (see the
/// module docs).
pub fn prune() {
    drop(take_completed(1));
}

/// Kept operations a stream gathers before a launch's prune asks about
/// them (from [`runtime::launch_and_keep`](super::runtime::launch_and_keep)):
/// an event query costs about a third of a launch on an H200 (1.3 µs, ten
/// times the marker's record), so a launch loop asks once per this many
/// launches, in a few queries, and keeps at most this many launches'
/// operands longer than their work.
pub const LAUNCH_PRUNE_LEN: usize = 8;

/// The owners of completed work, taken out of the queues; dropping it drops
/// them. [`prune`] drops them at once; a caller inside a
/// `backend::bound` scope drops them after the scope ends (an owner's drop
/// may run code that changes the thread's current device).
#[must_use = "dropping it drops the owners of completed work"]
pub(crate) struct Completed {
    _released: Vec<Kept>,
}

/// [`prune`]'s queries, with the owners handed back instead of dropped.
/// Streams with fewer than `min_len` kept operations are not asked.
pub(crate) fn take_completed(min_len: usize) -> Completed {
    let mut released: Vec<Kept> = Vec::new();
    if KEPT_LEN.load(Ordering::Relaxed) < min_len {
        // No lane holds `min_len` operations: nothing to ask.
        return Completed { _released: released };
    }
    {
        // No capture begins between `may_query` and the queries (`gate.rs`).
        let _section = crate::backend::graph::device_wide_section();
        let mut st = state();
        if st.lanes.is_empty() {
            return Completed { _released: released };
        }
        let State { lanes, pool } = &mut *st;
        lanes.retain_mut(|lane| {
            if lane.queue.len() < min_len || !may_query(lane.backend, lane.ordinal) {
                return true;
            }
            if lane.key.is_none() {
                // Markers of several streams: ask each.
                let (done, keep): (VecDeque<_>, VecDeque<_>) =
                    std::mem::take(&mut lane.queue).into_iter().partition(|p| p.done.is_complete().unwrap_or(true));
                lane.queue = keep;
                released.extend(done);
                return !lane.queue.is_empty();
            }
            let (complete, reusable) = completed_prefix(&lane.queue);
            for p in lane.queue.drain(..complete) {
                if reusable && pool.len() < POOL_MAX {
                    // Its owners go below; the event is free to record again.
                    pool.push((lane.backend, lane.ordinal, p.done.clone()));
                }
                released.push(p);
            }
            !lane.queue.is_empty()
        });
        KEPT_LEN.fetch_sub(released.len(), Ordering::Relaxed);
    }
    // Dropped outside the lock (an owner's drop may keep more work), by the caller.
    Completed { _released: released }
}

/// How many of a stream's kept operations, oldest first, have completed,
/// and whether their events may be recorded again (not where a query
/// failed: the device is lost, and the events go with their owners).
///
/// The markers of one stream were recorded in queue order
/// ([`keep_until_done`] records and queues under one lock) and complete in
/// that order, so a complete marker means every older one is: the newest
/// is asked first (one query when the stream has caught up), then a binary
/// search finds the first incomplete one (about log2 of the length).
fn completed_prefix(queue: &VecDeque<Kept>) -> (usize, bool) {
    let mut reusable = true;
    let mut complete = |i: usize| match queue[i].done.is_complete() {
        Ok(done) => done,
        Err(_) => {
            reusable = false;
            true
        }
    };
    let len = queue.len();
    if len == 0 {
        return (0, true);
    }
    if complete(len - 1) {
        return (len, reusable);
    }
    // The first incomplete index lies in [lo, hi]; `hi` is known incomplete.
    let (mut lo, mut hi) = (0, len - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if complete(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    (lo, reusable)
}

/// Number of kept operations, completed or not.
pub fn pending() -> usize {
    state().lanes.iter().map(|l| l.queue.len()).sum()
}

/// Number of operations whose owners are kept for captures gpuport did not begin.
pub fn kept_for_foreign_captures() -> usize {
    FOREIGN.lock().unwrap_or_else(|e| e.into_inner()).len()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::backend::builtin;
    use crate::dynamic::{AnyModule, Code};
    use crate::{KernelArgs, LaunchConfig};

    /// Counts its drops.
    struct Owner(Arc<AtomicUsize>);
    impl Drop for Owner {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn sleep_on(s: &AnyStream, ns: u64) {
        let dev = s.device();
        let m = AnyModule::load(&dev, &Code::Builtin, "keep-test", &[]).unwrap();
        let k = m.kernel(builtin::SLEEP_NS).unwrap();
        let mut args = KernelArgs::new();
        args.push(&ns);
        // SAFETY: the built-in sleep takes one u64 and touches no memory.
        unsafe { k.launch(LaunchConfig::linear(1, 1), &args, s) }.unwrap();
    }

    #[test]
    fn owners_go_only_after_their_work_and_in_stream_order() {
        let dev = crate::open("host").unwrap();
        let s = AnyStream::create(&dev).unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        // Warm the pool: a marker seen complete is recorded again below.
        keep_until_done(&s, Box::new(Owner(dropped.clone()))).unwrap();
        s.synchronize().unwrap();
        prune();
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        sleep_on(&s, 200_000_000);
        for _ in 0..10 {
            keep_until_done(&s, Box::new(Owner(dropped.clone()))).unwrap();
        }
        prune();
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "owners of pending work were dropped");
        s.synchronize().unwrap();
        prune();
        assert_eq!(dropped.load(Ordering::SeqCst), 11);
    }

    #[test]
    fn a_prune_releases_exactly_the_completed_prefix_of_a_stream() {
        let dev = crate::open("host").unwrap();
        let s = AnyStream::create(&dev).unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        // Other tests of this binary capture on host:0 at the same time, and
        // a prune leaves the device's work alone while one does
        // (`may_query`): prune again until `n` are released or 500 ms pass.
        let prune_until = |n: usize, at_start: usize| {
            let start = std::time::Instant::now();
            loop {
                prune();
                let released = dropped.load(Ordering::SeqCst) - at_start;
                if released >= n || start.elapsed() > std::time::Duration::from_millis(500) {
                    return released;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        for done_before in [1, 3, 6] {
            let at_start = dropped.load(Ordering::SeqCst);
            for _ in 0..done_before {
                keep_until_done(&s, Box::new(Owner(dropped.clone()))).unwrap();
            }
            s.synchronize().unwrap();
            // Longer than `prune_until` waits: the 5 below stay pending.
            sleep_on(&s, 1_000_000_000);
            for _ in 0..5 {
                keep_until_done(&s, Box::new(Owner(dropped.clone()))).unwrap();
            }
            assert_eq!(
                prune_until(done_before, at_start),
                done_before,
                "{done_before} completed before 5 pending: a prune releases those, and only those"
            );
            s.synchronize().unwrap();
            assert_eq!(prune_until(done_before + 5, at_start), done_before + 5);
        }
    }

    #[test]
    fn a_launch_releases_a_streams_completed_operations_once_it_has_enough() {
        let dev = crate::open("host").unwrap();
        let s = AnyStream::create(&dev).unwrap();
        let m = AnyModule::load(&dev, &Code::Builtin, "keep-test", &[]).unwrap();
        let k = m.kernel(builtin::EMPTY).unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let launch = |owner: Option<Owner>| {
            let choice = crate::dynamic::runtime::StreamChoice::stream(s.clone());
            // SAFETY: the built-in empty kernel takes no arguments.
            unsafe {
                crate::dynamic::runtime::launch_and_keep(
                    &k,
                    builtin::EMPTY,
                    LaunchConfig::linear(1, 1),
                    &KernelArgs::new(),
                    None,
                    choice,
                    owner,
                )
            }
            .unwrap()
        };
        // Behind a sleep, so no prune (other tests prune every stream)
        // releases any of them before the stream is synchronized.
        sleep_on(&s, 50_000_000);
        for _ in 0..LAUNCH_PRUNE_LEN {
            launch(Some(Owner(dropped.clone())));
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        s.synchronize().unwrap();
        launch(None);
        let key = s.key();
        let left = state().lanes.iter().filter(|l| l.key == key).map(|l| l.queue.len()).sum::<usize>();
        assert_eq!(
            (dropped.load(Ordering::SeqCst), left),
            (LAUNCH_PRUNE_LEN, 0),
            "all complete: one launch releases them"
        );
    }
}
