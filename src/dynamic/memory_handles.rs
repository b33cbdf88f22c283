//! The handles a binding gives out for the run-time layer's memory
//! ([`super::memory`]), with the rules of their life: each is released at
//! most once, by an explicit call or else when the handle drops; a released
//! handle still answers what it was (address, size); and the statistics a
//! binding shows, as named entries. A binding only converts these.
//!
//! ```
//! use gpuport::dynamic::memory_handles::AllocationHandle;
//! use gpuport::dynamic::AnyStream;
//! let dev = gpuport::open("host")?;
//! let a = AllocationHandle::alloc(&dev, 64, &AnyStream::default_for(&dev))?;
//! assert!(!a.is_freed());
//! assert!(a.free().is_none()); // nothing to finish: the free did not wait
//! assert!(a.is_freed() && a.free().is_none()); // a second free does nothing
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::sync::Mutex;

use super::memory::{self as run_time, AnyAllocation, AnyDeferCleanup, AnyPinned, AnyRegistration};
use super::stream::AnyStream;
use crate::backend::registry::AnyDevice;
use crate::error::{BackendKind, Error, Result};
use crate::memory::history::DeviceKey;
use crate::memory::pool::PoolReport;
use crate::memory::{Expandable, IpcHandle, IpcKind, PinnedFlags, RefusedFrees, Statistics};

/// A value released at most once: the first [`take`](Self::take) gets it,
/// later ones get `None`.
#[derive(Debug)]
pub struct ReleaseOnce<T>(Mutex<Option<T>>);

impl<T> ReleaseOnce<T> {
    /// Holds `value` until it is taken.
    pub fn new(value: T) -> Self {
        ReleaseOnce(Mutex::new(Some(value)))
    }

    /// The value, the first time; `None` once taken.
    pub fn take(&self) -> Option<T> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// As [`take`](Self::take), without locking (the holder is dropping).
    pub fn take_mut(&mut self) -> Option<T> {
        self.0.get_mut().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Whether the value was taken.
    pub fn is_released(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    /// `f` of the value while it is held; `None` once taken.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(f)
    }
}

/// Device memory from a device's current resource (`gpuport.memory.alloc`):
/// goes back to it on [`free`](Self::free), once, or when dropped.
#[derive(Debug)]
pub struct AllocationHandle {
    slot: ReleaseOnce<AnyAllocation>,
    ptr: u64,
    size: usize,
    /// The device as a key, not a handle: a handle's clone and drop would
    /// be two atomic operations per allocation.
    device: DeviceKey,
}

impl AllocationHandle {
    /// A handle of `a`, `size` bytes asked for.
    #[inline]
    pub fn new(a: AnyAllocation, size: usize) -> Self {
        AllocationHandle { ptr: a.ptr(), device: a.device_key(), slot: ReleaseOnce::new(a), size }
    }

    /// Allocates `size` bytes on `dev`'s current resource in `stream`'s
    /// order (see [`run_time::alloc`]).
    pub fn alloc(dev: &AnyDevice, size: usize, stream: &AnyStream) -> Result<Self> {
        Ok(Self::new(run_time::alloc(dev, size, stream)?, size))
    }

    /// The device address (also after the free).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes asked for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The device (also after the free).
    pub fn device(&self) -> DeviceKey {
        self.device
    }

    /// Whether the memory went back.
    pub fn is_freed(&self) -> bool {
        self.slot.is_released()
    }

    /// Gives the memory back, the first time; later calls do nothing. A
    /// free that would wait for another thread is returned, to
    /// [`finish`](RefusedFrees::finish) where waiting is allowed (see
    /// [`run_time::free_without_waiting`]).
    #[inline]
    pub fn free(&self) -> Option<RefusedFrees> {
        self.slot.take().and_then(run_time::free_without_waiting)
    }

    /// [`free`](Self::free) as the handle drops.
    pub fn free_on_drop(&mut self) -> Option<RefusedFrees> {
        self.slot.take_mut().and_then(run_time::free_without_waiting)
    }

    /// The driver IPC handle (`cuIpcGetMemHandle`'s) of the allocation's
    /// base, which other processes open with `cuIpcOpenMemHandle`. A freed
    /// allocation, or a resource that exports another kind of handle (a
    /// shareable pool's block), is [`Error::InvalidArgument`].
    pub fn driver_ipc_handle(&self) -> Result<IpcHandle> {
        let handle = self
            .slot
            .with(AnyAllocation::ipc_handle)
            .ok_or_else(|| Error::InvalidArgument { name: "allocation", reason: "already freed".into() })??;
        if handle.kind != IpcKind::Memory {
            return Err(Error::InvalidArgument {
                name: "allocation",
                reason: format!(
                    "the allocation's resource exports {:?} handles, not cuIpcGetMemHandle handles",
                    handle.kind
                ),
            });
        }
        Ok(handle)
    }
}

/// A guard holding back every free on a device until released
/// (`gpuport.memory.defer_cleanup`).
#[derive(Debug)]
pub struct DeferCleanupHandle(ReleaseOnce<AnyDeferCleanup>);

impl DeferCleanupHandle {
    /// Holds back the frees on `dev`.
    pub fn new(dev: &AnyDevice) -> Result<Self> {
        Ok(DeferCleanupHandle(ReleaseOnce::new(run_time::defer_cleanup(dev)?)))
    }

    /// Frees held back so far (0 once released).
    pub fn held_back(&self) -> usize {
        self.0.with(AnyDeferCleanup::held_back).unwrap_or(0)
    }

    /// The guard, the first time, to drop (which lets the frees happen,
    /// once every guard of the device is dropped; it may wait); later
    /// calls get `None`.
    pub fn release(&self) -> Option<AnyDeferCleanup> {
        self.0.take()
    }
}

/// Pinned host memory from a device's current resource
/// (`gpuport.memory.alloc_pinned`), returned once.
#[derive(Debug)]
pub struct PinnedHandle {
    slot: ReleaseOnce<AnyPinned>,
    ptr: usize,
    device_ptr: Option<u64>,
    size: usize,
}

impl PinnedHandle {
    /// Allocates `size` bytes (at least 1 is reserved) of pinned host memory for `dev`.
    pub fn alloc(dev: &AnyDevice, size: usize, flags: PinnedFlags) -> Result<Self> {
        let mut m = run_time::alloc_pinned(dev, size, flags)?;
        let (ptr, device_ptr) = (m.host_ptr(), m.mapped_ptr());
        Ok(PinnedHandle { slot: ReleaseOnce::new(m), ptr, device_ptr, size })
    }

    /// The host address.
    pub fn ptr(&self) -> usize {
        self.ptr
    }

    /// The device address of mapped memory.
    pub fn device_ptr(&self) -> Option<u64> {
        self.device_ptr
    }

    /// Bytes asked for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the memory was returned.
    pub fn is_freed(&self) -> bool {
        self.slot.is_released()
    }

    /// The memory, the first time, to drop (which returns it); then `None`.
    pub fn free(&self) -> Option<AnyPinned> {
        self.slot.take()
    }
}

/// Host memory page-locked for a device (`mem_pin`), unregistered once.
#[derive(Debug)]
pub struct PinHandle {
    slot: ReleaseOnce<AnyRegistration>,
    ptr: usize,
    size: usize,
    mapped: bool,
}

impl PinHandle {
    /// Page-locks `size` bytes at `ptr` for `dev`; a null `ptr` or a zero
    /// `size` is [`Error::InvalidArgument`].
    ///
    /// # Safety
    /// As [`run_time::pin`]: `ptr..ptr + size` is live host memory that
    /// outlives the registration and is not moved while registered.
    pub unsafe fn pin(dev: &AnyDevice, ptr: usize, size: usize, mapped: bool) -> Result<Self> {
        if ptr == 0 || size == 0 {
            return Err(Error::InvalidArgument {
                name: "ptr",
                reason: "mem_pin needs a non-null pointer and a size > 0".into(),
            });
        }
        // SAFETY: forwarded caller contract.
        let r = unsafe { run_time::pin(dev, ptr as *mut u8, size, mapped)? };
        Ok(PinHandle { slot: ReleaseOnce::new(r), ptr, size, mapped })
    }

    /// The host address.
    pub fn ptr(&self) -> usize {
        self.ptr
    }

    /// Bytes registered.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the memory is mapped for the device.
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// Whether it was unregistered.
    pub fn is_unpinned(&self) -> bool {
        self.slot.is_released()
    }

    /// The registration, the first time, to drop (which unregisters); then `None`.
    pub fn unpin(&self) -> Option<AnyRegistration> {
        self.slot.take()
    }
}

/// A count as a signed entry (saturating; no count comes near).
fn entry(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `pool_expandable`'s code: 0 off, 1 on over virtual memory, 2 on
/// emulated (the host backend), -1 asked for but fell back.
pub fn expandable_code(e: &Expandable) -> i64 {
    match e {
        Expandable::Off => 0,
        Expandable::Virtual => 1,
        Expandable::Emulated => 2,
        _ => -1,
    }
}

/// The entries of `gpuport.memory.stats()`: the statistics of a device's
/// current resource, and, where it is a caching pool, its report.
pub fn statistics_entries(s: &Statistics, report: Option<&PoolReport>) -> Vec<(&'static str, i64)> {
    let n = |v: usize| entry(v as u64);
    let mut out = vec![
        ("current_bytes", n(s.current_bytes)),
        ("peak_bytes", n(s.peak_bytes)),
        ("total_bytes", n(s.total_bytes)),
        ("current_count", n(s.current_count)),
        ("peak_count", n(s.peak_count)),
        ("total_count", n(s.total_count)),
    ];
    if let Some(r) = report {
        out.extend([
            ("pool_reserved", n(r.reserved)),
            ("pool_in_use", n(r.in_use)),
            ("pool_free", n(r.free)),
            ("pool_allocations", entry(r.counters.allocations)),
            ("pool_frees", entry(r.counters.frees)),
            ("pool_oom_failures", entry(r.counters.oom_failures)),
            ("graph_pools", entry(r.counters.graph_pools)),
            ("graph_pools_released", entry(r.counters.graph_pools_released)),
            ("pool_expandable", expandable_code(&r.expandable)),
            ("pool_segments", n(r.segments)),
            ("pool_address_space", n(r.address_space)),
        ]);
    }
    out
}

/// [`statistics_entries`] of `dev`'s current resource.
pub fn statistics(dev: &AnyDevice) -> Result<Vec<(&'static str, i64)>> {
    let (s, report) = run_time::statistics(dev)?;
    Ok(statistics_entries(&s, report.as_ref()))
}

/// The sizes of a pool's report that an out-of-memory observer gets.
pub fn out_of_memory_entries(r: &PoolReport) -> [(&'static str, usize); 7] {
    [
        ("reserved", r.reserved),
        ("in_use", r.in_use),
        ("requested", r.requested),
        ("free", r.free),
        ("pending", r.pending),
        ("segments", r.segments),
        ("largest_free_block", r.largest_free_block),
    ]
}

/// The backend a memory snapshot is limited to: `None` for every backend,
/// else the backend named `name` (`"cuda"`, `"rocm"`, `"host"`); another
/// name is [`Error::InvalidArgument`].
pub fn snapshot_backend(name: Option<&str>) -> Result<Option<BackendKind>> {
    let Some(name) = name else { return Ok(None) };
    BackendKind::ALL.into_iter().find(|b| b.name() == name).map(Some).ok_or_else(|| Error::InvalidArgument {
        name: "backend",
        reason: format!("unknown backend {name:?}; one of cuda, rocm, host"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> AnyDevice {
        crate::open("host").unwrap()
    }

    #[test]
    fn an_allocation_is_freed_once_and_keeps_its_address() {
        let dev = host();
        let mut a = AllocationHandle::alloc(&dev, 64, &AnyStream::default_for(&dev)).unwrap();
        let ptr = a.ptr();
        assert_ne!(ptr, 0);
        assert!(a.free().is_none());
        assert!(a.is_freed());
        assert!(a.free().is_none() && a.free_on_drop().is_none());
        assert_eq!((a.ptr(), a.size()), (ptr, 64));
        let e = a.driver_ipc_handle().unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "allocation", .. }), "{e}");
        assert!(e.to_string().contains("already freed"), "{e}");
    }

    #[test]
    fn a_live_allocation_asks_its_resource_for_the_handle() {
        let dev = host();
        let a = AllocationHandle::alloc(&dev, 64, &AnyStream::default_for(&dev)).unwrap();
        // The host backend has no IPC: the resource's own refusal, not "freed".
        assert!(matches!(a.driver_ipc_handle().unwrap_err(), Error::Unsupported { .. }));
    }

    #[test]
    fn a_defer_cleanup_guard_holds_frees_back_until_released_once() {
        let dev = host();
        let guard = DeferCleanupHandle::new(&dev).unwrap();
        let a = AllocationHandle::alloc(&dev, 64, &AnyStream::default_for(&dev)).unwrap();
        drop(a.free());
        // At least this free: tests running beside this one free on the
        // same host device while the guard holds.
        assert!(guard.held_back() >= 1);
        assert!(guard.release().is_some());
        assert_eq!(guard.held_back(), 0);
        assert!(guard.release().is_none());
    }

    #[test]
    fn pinned_memory_and_pins_are_released_once() {
        let dev = host();
        let p = PinnedHandle::alloc(&dev, 0, PinnedFlags::default()).unwrap();
        assert_ne!(p.ptr(), 0);
        assert_eq!((p.size(), p.device_ptr()), (0, None));
        assert!(p.free().is_some() && p.is_freed() && p.free().is_none());

        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` outlives the registration, which is dropped below.
        let r = unsafe { PinHandle::pin(&dev, buf.as_mut_ptr() as usize, buf.len(), false) }.unwrap();
        assert!(!r.is_unpinned() && !r.is_mapped());
        assert!(r.unpin().is_some() && r.is_unpinned() && r.unpin().is_none());
        // SAFETY: refused before any memory is touched.
        let e = unsafe { PinHandle::pin(&dev, 0, 16, false) }.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "ptr", .. }), "{e}");
        // SAFETY: as above.
        assert!(unsafe { PinHandle::pin(&dev, buf.as_mut_ptr() as usize, 0, false) }.is_err());
    }

    #[test]
    fn statistics_name_every_entry_and_code_expandable() {
        let s = Statistics {
            current_bytes: 1,
            peak_bytes: 2,
            total_bytes: 3,
            current_count: 4,
            peak_count: 5,
            total_count: 6,
        };
        let names: Vec<_> = statistics_entries(&s, None).into_iter().collect();
        assert_eq!(
            names,
            [
                ("current_bytes", 1),
                ("peak_bytes", 2),
                ("total_bytes", 3),
                ("current_count", 4),
                ("peak_count", 5),
                ("total_count", 6)
            ]
        );
        let codes: Vec<_> =
            [Expandable::Off, Expandable::Virtual, Expandable::Emulated, Expandable::FellBack("no VMM".into())]
                .iter()
                .map(expandable_code)
                .collect();
        assert_eq!(codes, [0, 1, 2, -1]);
        let dev = host();
        drop(AllocationHandle::alloc(&dev, 8, &AnyStream::default_for(&dev)).unwrap());
        let entries = statistics(&dev).unwrap();
        let keys: Vec<_> = entries.iter().map(|(k, _)| *k).collect();
        for key in ["current_bytes", "pool_reserved", "pool_expandable", "pool_address_space", "graph_pools_released"] {
            assert!(keys.contains(&key), "{key} missing from {keys:?}");
        }
    }

    #[test]
    fn a_snapshot_backend_is_named_or_refused() {
        assert_eq!(snapshot_backend(None).unwrap(), None);
        assert_eq!(snapshot_backend(Some("host")).unwrap(), Some(BackendKind::Host));
        let e = snapshot_backend(Some("metal")).unwrap_err();
        assert!(e.to_string().contains("unknown backend \"metal\"; one of cuda, rocm, host"), "{e}");
    }
}
