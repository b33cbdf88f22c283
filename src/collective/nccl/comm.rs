//! One library communicator ([`Comm`]), which frees it once, and the
//! bounded waits of non-blocking communicators: after a call that returned
//! `ncclInProgress` ([`Comm::settle`]), and after a group's `ncclGroupEnd`,
//! which must poll every communicator the group used ([`settle_group`],
//! with the members this thread's group recorded).
//!
//! On NCCL or RCCL older than 2.14 communicators are blocking: every call
//! returns its final status, and these waits return at once.

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::backend::gpu::{Driver, GpuDevice};
use crate::error::{CollectiveErrorKind, Error, Result};

use super::wait::{self, Waited};
use super::{engine_name, status_error, sys};

/// One rank's `ncclComm_t`, owned: aborted or destroyed once.
pub(super) struct Comm<D: Driver> {
    /// `ncclComm_t`, as an address: the library allows its use from any
    /// thread, one call at a time per communicator, which `Communicator`'s
    /// callers already order on streams.
    pub(super) handle: usize,
    pub(super) device: Arc<GpuDevice<D>>,
    pub(super) lib: &'static sys::Nccl,
    pub(super) rank: usize,
    /// Set once the communicator was aborted or destroyed (and so freed).
    pub(super) released: AtomicBool,
    /// How long a call may stay `ncclInProgress` (`Communicator::set_timeout`).
    pub(super) timeout: Mutex<Duration>,
    /// Made non-blocking (`ncclCommInitRankConfig` with `blocking = 0`).
    pub(super) non_blocking: bool,
}

impl<D: Driver> Comm<D> {
    /// Owns `handle`, made for `device` by `lib` as `rank` (non-blocking
    /// or not); its timeout starts as `timeout`.
    pub(super) fn new(
        handle: usize,
        device: &Arc<GpuDevice<D>>,
        lib: &'static sys::Nccl,
        rank: usize,
        timeout: Duration,
        non_blocking: bool,
    ) -> Self {
        Comm {
            handle,
            device: device.clone(),
            lib,
            rank,
            released: AtomicBool::new(false),
            timeout: Mutex::new(timeout),
            non_blocking,
        }
    }

    pub(super) fn raw(&self) -> sys::ncclComm_t {
        self.handle as sys::ncclComm_t
    }

    pub(super) fn timeout(&self) -> Duration {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn set_timeout(&self, timeout: Duration) {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner()) = timeout;
    }

    pub(super) fn check(&self, call: &str, status: c_int) -> Result<()> {
        if status == sys::ncclSuccess {
            return Ok(());
        }
        // `ncclGetLastError` is not given a communicator that was freed.
        let live = if self.released.load(Ordering::Acquire) { 0 } else { self.handle };
        Err(status_error(D::KIND, self.lib, Some(self.rank), live, call, status))
    }

    /// An `Aborted` error for `what` once the communicator was freed
    /// (`what` is formatted only then: this runs on every enqueue).
    pub(super) fn refuse_if_released(&self, what: impl std::fmt::Display) -> Result<()> {
        if !self.released.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(Error::Collective {
            engine: engine_name(D::KIND, self.lib),
            rank: Some(self.rank),
            kind: CollectiveErrorKind::Aborted,
            reason: format!("{what} on a communicator that was aborted; make a new one"),
        })
    }

    /// `ncclCommGetAsyncError`'s state: `ncclSuccess`, `ncclInProgress`
    /// while a non-blocking call goes on, or an error.
    pub(super) fn state(&self) -> Result<c_int> {
        self.refuse_if_released("ncclCommGetAsyncError")?;
        let mut state: c_int = sys::ncclSuccess;
        // SAFETY: a live communicator (not released); writes one int.
        let status = unsafe { (self.lib.api.fns.ncclCommGetAsyncError)(self.raw(), &mut state) };
        self.check("ncclCommGetAsyncError", status)?;
        Ok(state)
    }

    /// `ncclCommAbort`, once; it stops the library's threads and kernels
    /// of this communicator and returns without waiting for peers.
    pub(super) fn abort(&self) -> Result<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.device.driver().bind()?;
        // SAFETY: the communicator is live (not released before) and freed here once.
        let status = unsafe { (self.lib.api.fns.ncclCommAbort)(self.raw()) };
        self.check("ncclCommAbort", status)
    }

    /// The end of `call`, which returned `status` at `start`: at once, or
    /// after polling while it is `ncclInProgress`, for up to the timeout;
    /// past it the communicator is aborted and the error is a `Timeout`
    /// (`check` says what to look at).
    pub(super) fn settle(&self, call: &str, status: c_int, start: Instant, check: &str) -> Result<()> {
        if status != sys::ncclInProgress {
            return self.check(call, status);
        }
        let waited = wait::until_done(start, self.timeout(), || self.state())?;
        self.finish(call, waited, check)
    }

    /// [`settle`](Self::settle), asking `peer_failed` every
    /// [`POLL`](super::super::rendezvous::POLL) of the wait whether another
    /// rank reported a failure: its error ends the wait (the caller aborts).
    pub(super) fn settle_watched(
        &self,
        call: &str,
        status: c_int,
        start: Instant,
        check: &str,
        peer_failed: &dyn Fn() -> Result<()>,
    ) -> Result<()> {
        if status != sys::ncclInProgress {
            return self.check(call, status);
        }
        let mut looked = Instant::now();
        let waited = wait::until_done(start, self.timeout(), || {
            if looked.elapsed() >= super::super::rendezvous::POLL {
                peer_failed()?;
                looked = Instant::now();
            }
            self.state()
        })?;
        self.finish(call, waited, check)
    }

    /// The error, if any, of a wait on `call` that ended as `waited`.
    pub(super) fn finish(&self, call: &str, waited: Waited, check: &str) -> Result<()> {
        match waited {
            Waited::Done(s) => self.check(&format!("{call} (finishing in the library's thread)"), s),
            Waited::TimedOut => {
                let _ = self.abort();
                let reason = wait::timeout_reason(call, &format!("rank {}", self.rank), self.timeout(), check);
                Err(Error::Collective {
                    engine: engine_name(D::KIND, self.lib),
                    rank: Some(self.rank),
                    kind: CollectiveErrorKind::Timeout,
                    reason,
                })
            }
        }
    }
}

impl<D: Driver> Drop for Comm<D> {
    fn drop(&mut self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.device.driver().bind().is_ok() {
            // SAFETY: a live communicator, freed once; NCCL waits for its
            // enqueued work. An error cannot be returned from a drop.
            let destroyed = unsafe { (self.lib.api.fns.ncclCommDestroy)(self.raw()) };
            if destroyed != sys::ncclSuccess {
                // A communicator in an error state refuses ncclCommDestroy
                // (it checks the state first) and stays allocated.
                // SAFETY: as above: not freed by the refused destroy.
                let _ = unsafe { (self.lib.api.fns.ncclCommAbort)(self.raw()) };
            }
        }
    }
}

/// A communicator of any driver, as a group's member.
pub(super) trait Member: Send + Sync {
    fn comm(&self) -> usize;
    fn rank(&self) -> usize;
    fn timeout(&self) -> Duration;
    fn is_released(&self) -> bool;
    fn state(&self) -> Result<c_int>;
    fn abort(&self) -> Result<()>;
    fn finish(&self, call: &str, waited: Waited, check: &str) -> Result<()>;
    fn engine(&self) -> String;
}

impl<D: Driver> Member for Comm<D> {
    fn comm(&self) -> usize {
        self.handle
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn timeout(&self) -> Duration {
        Comm::timeout(self)
    }
    fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }
    fn state(&self) -> Result<c_int> {
        Comm::state(self)
    }
    fn abort(&self) -> Result<()> {
        Comm::abort(self)
    }
    fn finish(&self, call: &str, waited: Waited, check: &str) -> Result<()> {
        Comm::finish(self, call, waited, check)
    }
    fn engine(&self) -> String {
        engine_name(D::KIND, self.lib)
    }
}

/// This thread's open group: its depth, and the communicators its calls used.
#[derive(Default)]
struct Group {
    depth: usize,
    members: Vec<Arc<dyn Member>>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// Counts an `ncclGroupStart` that succeeded.
pub(super) fn group_opened() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Counts an `ncclGroupEnd`; the members of the group, once the outermost ended.
pub(super) fn group_closed() -> Vec<Arc<dyn Member>> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.depth = g.depth.saturating_sub(1);
        if g.depth == 0 {
            std::mem::take(&mut g.members)
        } else {
            Vec::new()
        }
    })
}

/// Whether this thread is inside a group (`ncclGroupStart` without its end).
pub(super) fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Records `comm` as used by this thread's open group; false outside a
/// group (without touching `comm`'s count: this runs on every enqueue).
pub(super) fn join_group<M: Member + 'static>(comm: &Arc<M>) -> bool {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return false;
        }
        if !g.members.iter().any(|m| m.comm() == comm.comm()) {
            g.members.push(comm.clone());
        }
        true
    })
}

/// After an `ncclGroupEnd` (`call`) that returned `ncclInProgress` at
/// `start`: polls every member until it leaves `ncclInProgress`, each for
/// up to its timeout. Members still in progress then are aborted, and the
/// error is one `Timeout` naming their ranks; else the first member's error.
pub(super) fn settle_group(members: &[Arc<dyn Member>], call: &str, start: Instant, check: &str) -> Result<()> {
    let mut late = Vec::new();
    let mut failed = None;
    for m in members.iter().filter(|m| !m.is_released()) {
        match wait::until_done(start, m.timeout(), || m.state())? {
            Waited::TimedOut => late.push(m),
            done => {
                if let Err(e) = m.finish(call, done, check) {
                    failed.get_or_insert(e);
                }
            }
        }
    }
    match late.as_slice() {
        [] => failed.map_or(Ok(()), Err),
        [one] => one.finish(call, Waited::TimedOut, check),
        many => {
            for m in many {
                let _ = m.abort();
            }
            let ranks = many.iter().map(|m| m.rank().to_string()).collect::<Vec<_>>().join(", ");
            let timeout = many.iter().map(|m| m.timeout()).max().unwrap_or_default();
            Err(Error::Collective {
                engine: many[0].engine(),
                rank: None,
                kind: CollectiveErrorKind::Timeout,
                reason: wait::timeout_reason(call, &format!("ranks {ranks}"), timeout, check),
            })
        }
    }
}
