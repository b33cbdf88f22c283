//! The per-device current resource, and giving back what the process-wide
//! caches hold ([`release_all`], also run at process exit).
//!
//! Caches built over the current resources (the shared
//! [`PageableCopier`](super::PageableCopier)s) sit above this file: each
//! registers, when it is made, how to empty it ([`release_first`]), and
//! [`release_all`] empties them before it resets the resources.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::backend::{Backend, Device};
use crate::error::{BackendKind, Error, Result};

use super::history::DeviceKey;
use super::pool::{CachingPool, PoolConfig};
use super::report::PoolReport;
use super::Allocator;
#[cfg(doc)]
use super::MemoryResource;

/// Gives back a slot's cached memory: its resource's `reset` (`None`), or
/// its `release_cached` with that patience.
type Release = Arc<dyn Fn(Option<Duration>) -> Result<()> + Send + Sync>;

/// A slot's resource's report, without knowing its backend.
type Report = Arc<dyn Fn() -> Option<PoolReport> + Send + Sync>;

/// How long the release at process exit waits for work still queued.
const EXIT_PATIENCE: Duration = Duration::from_secs(2);

struct Slot {
    /// An `Allocator<B>` for the slot's backend.
    allocator: Box<dyn Any + Send + Sync>,
    /// Resets that allocator, without knowing its backend.
    release: Release,
    /// Reports on that allocator's resource.
    report: Report,
    /// Whether `current_resource` has handed it out.
    used: bool,
}

impl Slot {
    fn new<B: Backend>(allocator: Allocator<B>) -> Self {
        let handle = allocator.clone();
        let release = move |patience: Option<Duration>| match patience {
            None => handle.reset(),
            Some(patience) => handle.resource().release_cached(patience),
        };
        let handle = allocator.clone();
        let report = move || handle.report();
        Slot { allocator: Box::new(allocator), release: Arc::new(release), report: Arc::new(report), used: false }
    }
}

/// How to empty each cache built over the current resources, registered
/// with [`release_first`].
type Caches = Mutex<Vec<fn()>>;

fn caches_above() -> &'static Caches {
    static CACHES: OnceLock<Caches> = OnceLock::new();
    CACHES.get_or_init(Default::default)
}

/// Has [`release_all`] (and the release at process exit) call `empty` before
/// it resets the current resources, so that what a cache over them holds
/// (pinned staging buffers, say) goes back to them first. Called once by each
/// such cache, when it is made.
pub(crate) fn release_first(empty: fn()) {
    caches_above().lock().unwrap_or_else(|p| p.into_inner()).push(empty);
}

fn slots() -> &'static Mutex<HashMap<(BackendKind, usize), Slot>> {
    static SLOTS: OnceLock<Mutex<HashMap<(BackendKind, usize), Slot>>> = OnceLock::new();
    SLOTS.get_or_init(Default::default)
}

fn mismatch(spec: String) -> Error {
    Error::InvalidArgument { name: "current resource", reason: format!("{spec}: stored allocator has another backend") }
}

/// The device's current resource: what every allocation of the library on
/// that device goes through. A [`CachingPool`] unless
/// [`set_current_resource`] replaced it before this first call.
///
/// The first call of the process also arranges for [`release_all`] to run
/// at process exit (see there).
pub fn current_resource<B: Backend>(device: &Arc<B::Device>) -> Result<Allocator<B>> {
    release_at_exit(B::KIND);
    let key = (B::KIND, device.info().ordinal);
    let mut slots = slots().lock().unwrap_or_else(|p| p.into_inner());
    let slot = slots
        .entry(key)
        .or_insert_with(|| Slot::new(Allocator::<B>::new(CachingPool::new(device.clone(), PoolConfig::default()))));
    slot.used = true;
    slot.allocator.downcast_ref::<Allocator<B>>().cloned().ok_or_else(|| mismatch(device.info().spec()))
}

/// Replaces the device's current resource. Refused with
/// [`Error::InvalidArgument`] once [`current_resource`] has handed the old
/// one out, since memory of two resources would then be mixed.
pub fn set_current_resource<B: Backend>(allocator: Allocator<B>) -> Result<()> {
    release_at_exit(<B as Backend>::KIND);
    let device = allocator.device().clone();
    let key = (<B as Backend>::KIND, device.info().ordinal);
    let mut slots = slots().lock().unwrap_or_else(|p| p.into_inner());
    if slots.get(&key).is_some_and(|s| s.used) {
        return Err(Error::InvalidArgument {
            name: "current resource",
            reason: format!(
                "{} already allocates through its current resource; replace it before the first use",
                device.info().spec()
            ),
        });
    }
    slots.insert(key, Slot::new(allocator));
    Ok(())
}

/// The report of every device's current resource that has one (a caching
/// pool's), for `history::snapshot`. The reports are made after the slots'
/// lock is released.
pub(crate) fn current_reports() -> Vec<(DeviceKey, PoolReport)> {
    let reporters: Vec<(DeviceKey, Report)> = slots()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(&(backend, ordinal), slot)| (DeviceKey { backend, ordinal }, slot.report.clone()))
        .collect();
    let mut reports: Vec<_> = reporters.into_iter().filter_map(|(k, r)| r().map(|r| (k, r))).collect();
    reports.sort_by_key(|(k, _)| *k);
    reports
}

/// Gives back to the driver every byte the process-wide caches hold and no
/// one uses: the shared [`PageableCopier`](super::PageableCopier)s are
/// dropped (their pinned staging buffers go back to the current resources),
/// then every device's current resource is reset (a caching pool returns its
/// free segments and idle pinned buffers, and lets go of the streams it kept).
///
/// Memory still in use stays valid and stays allocated; the caches fill again
/// on later use. So a program (or a test harness) that dropped everything it
/// allocated and then calls this ends with nothing of gpuport's allocated,
/// which is what a leak checker (`compute-sanitizer --leak-check full`)
/// wants to see. Returns the first error of a reset; every resource is
/// reset anyway.
///
/// It also runs at process exit, one backend at a time: the first
/// [`current_resource`] or [`set_current_resource`] call for a backend
/// registers that backend's release with `atexit`, unless the environment
/// variable `GPUPORT_RELEASE_AT_EXIT` is `0` then. Why that is
/// sound, and when it does nothing: a C `atexit` handler runs when `main`
/// returns or `exit` is called, in reverse order of registration, and all of
/// them run before the shared libraries' destructors (`_dl_fini` runs last).
/// The CUDA driver and the HIP runtime are loaded at the first device open,
/// before that backend's first current resource exists, so whatever
/// exit-time teardown they register then, and their library destructors,
/// run after that backend's handler: the driver is still up when it frees. Other threads may still run then:
/// the handler only takes the same locks as any other caller and frees only
/// memory no one holds. It frees nothing (a free fails, is ignored, and the
/// memory goes with the process) if a library loaded *after* the backend's
/// first current resource tore the driver's context down in its own exit handler,
/// and it does not run at all on `_exit`, on an abort, or on a fatal signal. At exit it waits for work still queued
/// no longer than 2 seconds (see [`MemoryResource::release_cached`]): a
/// program that exits while a kernel runs does not hang, and what that
/// work still uses stays allocated until the driver tears down. A child of
/// `fork` that calls `exit` skips it (CUDA and HIP do not survive a fork,
/// nor do the host backend's stream threads).
pub fn release_all() -> Result<()> {
    release(None, None)
}

/// [`release_all`], with resets (`None`) or with that patience for queued
/// work, for the slots of `only` that backend (every slot with `None`).
fn release(patience: Option<Duration>, only: Option<BackendKind>) -> Result<()> {
    // Releases a capture deferred, where no capture forbids them any more.
    crate::backend::graph::release_deferred();
    // Called outside the lock: emptying a cache can drop streams.
    let caches = caches_above().lock().unwrap_or_else(|p| p.into_inner()).clone();
    caches.into_iter().for_each(|empty| empty());
    // Called outside the lock: a reset waits for streams.
    let releases: Vec<Release> = slots()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|((kind, _), _)| only.is_none_or(|o| o == *kind))
        .map(|(_, s)| s.release.clone())
        .collect();
    let mut outcome = Ok(());
    for release in releases {
        let result = release(patience);
        if outcome.is_ok() {
            outcome = result;
        }
    }
    outcome
}

/// The process that registered the exit handlers (a `fork` child skips them).
static PROCESS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The exit-time release of one backend's slots.
fn release_at_exit_of(kind: BackendKind) {
    // A child made by fork() that calls exit() inherits the handler, but not
    // the driver's state nor the host streams' threads: skip.
    if std::process::id() != PROCESS.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    // Never unwind into C; errors change nothing at exit.
    let _ = std::panic::catch_unwind(|| release(Some(EXIT_PATIENCE), Some(kind)));
}

extern "C" fn at_exit_host() {
    release_at_exit_of(BackendKind::Host);
}
extern "C" fn at_exit_cuda() {
    release_at_exit_of(BackendKind::Cuda);
}
extern "C" fn at_exit_rocm() {
    release_at_exit_of(BackendKind::Rocm);
}

/// Registers the exit-time release of `kind`'s slots with `atexit`, once per
/// process and backend, when that backend's first current resource is made.
///
/// One handler per backend, each registered after its backend's driver was
/// loaded (a device is opened before its current resource exists): `atexit`
/// handlers run last-registered first, so each runs before the exit-time
/// teardown its driver registered when it was initialized. A single handler
/// registered at the host backend's first use ran after CUDA's teardown in
/// every test binary whose host cases ran first, and its frees failed: on
/// the H100, `compute-sanitizer --leak-check full` reported one array's
/// memory leaked in four binaries that were clean test by test.
fn release_at_exit(kind: BackendKind) {
    static REGISTERED: [std::sync::Once; 3] = [std::sync::Once::new(), std::sync::Once::new(), std::sync::Once::new()];
    let (index, handler): (usize, extern "C" fn()) = match kind {
        BackendKind::Host => (0, at_exit_host),
        BackendKind::Cuda => (1, at_exit_cuda),
        BackendKind::Rocm => (2, at_exit_rocm),
    };
    REGISTERED[index].call_once(|| {
        if std::env::var("GPUPORT_RELEASE_AT_EXIT").is_ok_and(|v| v == "0") {
            return;
        }
        PROCESS.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: registers a function that takes no arguments, never
        // unwinds (catch_unwind in `release_at_exit_of`), and touches only
        // gpuport's own process-wide state, which lives in statics that are
        // never dropped. A failed registration (returned non-zero) only means
        // no release at exit.
        unsafe {
            libc::atexit(handler);
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    static EMPTIED: AtomicUsize = AtomicUsize::new(0);

    fn empty() {
        EMPTIED.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn release_all_empties_the_caches_registered_above_the_current_resources() {
        super::release_first(empty);
        let before = EMPTIED.load(Ordering::SeqCst);
        super::release_all().unwrap();
        assert!(EMPTIED.load(Ordering::SeqCst) > before);
    }
}
