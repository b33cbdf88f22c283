//! Out-of-memory observers: told of every allocation the caching pool could
//! not serve, after the pool gave back its cached blocks and retried, just
//! before it returns [`Error::OutOfMemory`](crate::Error::OutOfMemory) (or a
//! capture's [`GraphErrorKind::OutOfMemory`](crate::GraphErrorKind::OutOfMemory)).
//! PyTorch's `attachOutOfMemoryObserver` and RMM's failure callback play
//! the same part: training stacks dump a memory report there.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use gpuport::memory::{self, CachingPool, MemoryResource, PoolConfig};
//! use gpuport::{Device, Host, HostDevice};
//!
//! let seen = Arc::new(AtomicUsize::new(0));
//! let count = seen.clone();
//! let id = memory::add_out_of_memory_observer(move |e| {
//!     assert_eq!(e.requested, 8 << 20);
//!     count.fetch_add(1, Ordering::Relaxed);
//! });
//! let d = HostDevice::open(0)?;
//! let pool = CachingPool::<Host>::new(d.clone(), PoolConfig { size_limit: Some(4 << 20), ..PoolConfig::default() });
//! assert!(pool.allocate(8 << 20, d.default_stream()).is_err());
//! assert_eq!(seen.load(Ordering::Relaxed), 1);
//! assert!(memory::remove_out_of_memory_observer(id));
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use super::history::{DeviceKey, Snapshot};
use super::report::PoolReport;

/// An allocation the pool could not serve.
#[derive(Debug)]
pub struct OutOfMemoryEvent<'a> {
    /// The device, as `gpuport::open` names it (`"cuda:0"`).
    pub device: String,
    /// The device, as the allocation history names it.
    pub device_key: DeviceKey,
    /// Bytes asked for.
    pub requested: usize,
    /// Whether the allocation was for a stream capture (a graph pool's).
    pub in_capture: bool,
    /// The pool's report after its retry.
    pub report: &'a PoolReport,
}

impl OutOfMemoryEvent<'_> {
    /// A snapshot of the failing pool's segments and the allocation
    /// history recorded so far (`memory::history`; no entries unless it
    /// records), for `Snapshot::write_pickle`.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::of_pool(self.device_key, self.report)
    }
}

type Observer = Arc<dyn Fn(&OutOfMemoryEvent<'_>) + Send + Sync>;

/// Names an observer for [`remove_out_of_memory_observer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObserverId(u64);

static OBSERVERS: RwLock<Vec<(u64, Observer)>> = RwLock::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Registers `observer`, called (on the allocating thread, with no lock of
/// the pool held) for every allocation a caching pool of any device could
/// not serve. A panic in it is caught and logged; the allocation fails as
/// it would have.
pub fn add_out_of_memory_observer(observer: impl Fn(&OutOfMemoryEvent<'_>) + Send + Sync + 'static) -> ObserverId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut all = OBSERVERS.write().unwrap_or_else(|p| p.into_inner());
    all.push((id, Arc::new(observer)));
    COUNT.store(all.len(), Ordering::Release);
    ObserverId(id)
}

/// Unregisters an observer; false if it was not registered.
pub fn remove_out_of_memory_observer(id: ObserverId) -> bool {
    let mut all = OBSERVERS.write().unwrap_or_else(|p| p.into_inner());
    let before = all.len();
    all.retain(|(i, _)| *i != id.0);
    COUNT.store(all.len(), Ordering::Release);
    all.len() != before
}

/// Whether any observer is registered (one atomic load).
pub(crate) fn observed() -> bool {
    COUNT.load(Ordering::Acquire) != 0
}

/// Calls every observer with `event`; a panicking one is logged and skipped.
pub(crate) fn notify(event: &OutOfMemoryEvent<'_>) {
    // Copied out, so that an observer may add or remove observers.
    let observers: Vec<Observer> =
        OBSERVERS.read().unwrap_or_else(|p| p.into_inner()).iter().map(|(_, o)| o.clone()).collect();
    for observer in observers {
        if catch_unwind(AssertUnwindSafe(|| observer(event))).is_err() {
            log::error!(
                "gpuport: an out-of-memory observer panicked (allocation of {} bytes on {}); ignored",
                event.requested,
                event.device
            );
        }
    }
}
