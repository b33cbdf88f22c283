//! Memory of any backend: each device's observed current resource, and
//! allocations, pinned memory, registrations and deferred frees of any
//! backend.
//!
//! The first use of a device here installs an [`ObservedResource`] as the
//! device's current resource (the caching pool wrapped in statistics, with a
//! CSV log switched in while enabled), so every allocation a binding makes
//! for a device, arrays included, shows in [`statistics`].
//!
//! ```
//! use gpuport::dynamic::{memory, AnyStream};
//! let dev = gpuport::open("host")?;
//! let a = memory::alloc(&dev, 1024, &AnyStream::default_for(&dev))?;
//! assert!(memory::statistics(&dev)?.0.current_bytes >= 1024);
//! drop(a);
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::any::Any as StdAny;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use rustc_hash::FxHashMap;

use super::any::{on_backend, Any, DynDevice, PerBackend};
use super::stream::AnyStream;
use crate::backend::registry::AnyDevice;
use crate::backend::{Backend, Device, DeviceMemory, Event, HostMemory, MemoryInfo, Stream};
use crate::error::{BackendKind, Result};
use crate::memory::history::DeviceKey;
use crate::memory::pool::PoolReport;
use crate::memory::{
    current_resource, set_current_resource, Allocator, Block, CachingPool, DeferCleanup, DeviceAllocation, IpcHandle,
    LoggingResource, MemoryResource, PinnedFlags, PinnedMemory, PoolConfig, RefusedFrees, Statistics,
    StatisticsResource,
};

/// The current resource the run-time layer installs on a device: statistics
/// over the caching pool, with a CSV log (like RMM's `csv_log`) switched in
/// while enabled.
pub struct ObservedResource<B: Backend> {
    /// The resource, if it counts statistics itself (the caching pool does,
    /// under its lock), else a [`StatisticsResource`] over it.
    stats: Arc<dyn MemoryResource<B>>,
    log: RwLock<Option<(Arc<LoggingResource<B>>, PathBuf)>>,
    /// Whether `log` is set: allocations skip its lock while it is not.
    logging: AtomicBool,
}

impl<B: Backend> fmt::Debug for ObservedResource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObservedResource({:?})", self.stats)
    }
}

impl<B: Backend> ObservedResource<B> {
    fn new(inner: Arc<dyn MemoryResource<B>>) -> Self {
        ObservedResource {
            stats: match inner.statistics() {
                Some(_) => inner,
                None => Arc::new(StatisticsResource::new(inner)),
            },
            log: RwLock::new(None),
            logging: AtomicBool::new(false),
        }
    }

    /// Where allocations and frees go now: the log while enabled, else the statistics.
    fn front(&self) -> Arc<dyn MemoryResource<B>> {
        match &*self.log.read().unwrap_or_else(|p| p.into_inner()) {
            Some((log, _)) => log.clone(),
            None => self.stats.clone(),
        }
    }

    /// Starts the CSV log at `path` (truncated).
    pub fn enable_log(&self, path: PathBuf, with_memory_info: bool) -> Result<()> {
        let log = LoggingResource::to_file(self.stats.clone(), &path, with_memory_info)?;
        let old = {
            let mut slot = self.log.write().unwrap_or_else(|p| p.into_inner());
            self.logging.store(true, Ordering::Release);
            slot.replace((Arc::new(log), path))
        };
        if let Some((old, _)) = old {
            old.flush()?;
        }
        Ok(())
    }

    /// Stops the CSV log, flushing it.
    pub fn disable_log(&self) -> Result<()> {
        let old = {
            let mut slot = self.log.write().unwrap_or_else(|p| p.into_inner());
            self.logging.store(false, Ordering::Release);
            slot.take()
        };
        match old {
            Some((old, _)) => old.flush(),
            None => Ok(()),
        }
    }

    /// Flushes the log; its path, if enabled.
    pub fn log_path(&self) -> Result<Option<PathBuf>> {
        match &*self.log.read().unwrap_or_else(|p| p.into_inner()) {
            Some((log, path)) => {
                log.flush()?;
                Ok(Some(path.clone()))
            }
            None => Ok(None),
        }
    }
}

// SAFETY: blocks pass between the caller and the statistics adaptor (or the
// log over it) unchanged; switching the log in or out never changes which
// resource a block goes back to, since both end in the same inner resource.
unsafe impl<B: Backend> MemoryResource<B> for ObservedResource<B> {
    fn device(&self) -> &Arc<B::Device> {
        self.stats.device()
    }
    fn name(&self) -> &'static str {
        "gpuport-observed"
    }
    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> Result<Block<B>> {
        if !self.logging.load(Ordering::Acquire) {
            return self.stats.allocate(bytes, stream);
        }
        self.front().allocate(bytes, stream)
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()> {
        if !self.logging.load(Ordering::Acquire) {
            return self.stats.deallocate(block, stream, after);
        }
        if crate::memory::no_wait::waiting_refused() {
            // The log writes a line per free: made later, outside.
            return Err(crate::memory::no_wait::bounce(self.name(), block, stream, after));
        }
        self.front().deallocate(block, stream, after)
    }
    fn memory_info(&self) -> Result<MemoryInfo> {
        self.stats.memory_info()
    }
    fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<PinnedMemory<B>> {
        self.stats.alloc_pinned(bytes, flags)
    }
    unsafe fn pin(&self, ptr: *mut u8, len: usize, mapped: bool) -> Result<crate::backend::HostRegistration<B>> {
        // SAFETY: forwarded caller contract.
        unsafe { self.stats.pin(ptr, len, mapped) }
    }
    fn ipc_export(&self, block: &Block<B>) -> Result<IpcHandle> {
        self.stats.ipc_export(block)
    }
    fn reset(&self) -> Result<()> {
        self.stats.reset()
    }
    fn release_cached(&self, patience: std::time::Duration) -> Result<()> {
        self.stats.release_cached(patience)
    }
    fn report(&self) -> Option<PoolReport> {
        self.stats.report()
    }
    fn statistics(&self) -> Option<Statistics> {
        self.stats.statistics()
    }
}

/// A device's allocator and the observed resource behind it.
pub struct Resources<B: Backend> {
    /// The device's current resource, as an allocator.
    pub allocator: Allocator<B>,
    /// The observed resource behind it.
    pub resource: Arc<ObservedResource<B>>,
}

impl<B: Backend> fmt::Debug for Resources<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Resources({:?})", self.resource)
    }
}

impl<B: Backend> Clone for Resources<B> {
    fn clone(&self) -> Self {
        Resources { allocator: self.allocator.clone(), resource: self.resource.clone() }
    }
}

/// The device's resources, installing the observed resource as its current
/// resource on first use. If Rust code already took the device's current
/// resource, that resource is observed instead.
pub fn resources<D: Device>(device: &Arc<D>) -> Result<Arc<Resources<D::B>>> {
    resources_of::<D::B>(device)
}

type ResourcesKey = (BackendKind, usize);

thread_local! {
    /// The devices' resources this thread has looked up (a few entries):
    /// allocations from Python skip the process-wide map's lock and hash.
    static SEEN: RefCell<Vec<(ResourcesKey, Arc<dyn StdAny + Send + Sync>)>> = const { RefCell::new(Vec::new()) };
}

fn resources_of<B: Backend>(device: &Arc<B::Device>) -> Result<Arc<Resources<B>>> {
    let key = (B::KIND, device.info().ordinal);
    let seen = SEEN.try_with(|seen| {
        let seen = seen.borrow();
        seen.iter().find(|(k, _)| *k == key).and_then(|(_, e)| e.clone().downcast::<Resources<B>>().ok())
    });
    if let Ok(Some(e)) = seen {
        return Ok(e);
    }
    let e = resources_in_map::<B>(device, key)?;
    let _ = SEEN.try_with(|seen| seen.borrow_mut().push((key, e.clone())));
    Ok(e)
}

fn resources_in_map<B: Backend>(device: &Arc<B::Device>, key: ResourcesKey) -> Result<Arc<Resources<B>>> {
    type Entries = Mutex<HashMap<ResourcesKey, Arc<dyn StdAny + Send + Sync>>>;
    static ENTRIES: OnceLock<Entries> = OnceLock::new();
    let mut map = ENTRIES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = map.get(&key).and_then(|e| e.clone().downcast::<Resources<B>>().ok()) {
        return Ok(e);
    }
    let pool: Arc<dyn MemoryResource<B>> = Arc::new(CachingPool::new(device.clone(), PoolConfig::default()));
    let resource = Arc::new(ObservedResource::new(pool));
    let mut allocator = Allocator::from_arc(resource.clone());
    let resource = match set_current_resource(allocator.clone()) {
        Ok(()) => {
            // Marks it used, so nobody replaces it under us.
            allocator = current_resource::<B>(device)?;
            resource
        }
        Err(_) => {
            // Rust code already allocates through the current resource: count on top of it.
            let existing = current_resource::<B>(device)?;
            let resource = Arc::new(ObservedResource::new(existing.resource().clone()));
            allocator = Allocator::from_arc(resource.clone());
            resource
        }
    };
    let e = Arc::new(Resources { allocator, resource });
    map.insert(key, e.clone());
    Ok(e)
}

/// Installs the observed resource on `dev` if it is not yet.
pub fn install(dev: &AnyDevice) -> Result<()> {
    on_backend!(dev, d => resources(d).map(drop))
}

/// The statistics of `dev`'s current resource, and its pool's report.
pub fn statistics(dev: &AnyDevice) -> Result<(Statistics, Option<PoolReport>)> {
    on_backend!(dev, d => {
        let r = resources(d)?;
        Ok((r.allocator.statistics().unwrap_or_default(), r.allocator.report()))
    })
}

/// Starts a CSV log of every allocation and free on `dev` at `path` (truncated).
pub fn enable_log(dev: &AnyDevice, path: PathBuf, with_memory_info: bool) -> Result<()> {
    on_backend!(dev, d => resources(d)?.resource.enable_log(path, with_memory_info))
}

/// Stops `dev`'s CSV log, flushing it.
pub fn disable_log(dev: &AnyDevice) -> Result<()> {
    on_backend!(dev, d => resources(d)?.resource.disable_log())
}

/// Flushes `dev`'s CSV log; its path, if logging is on.
pub fn log_path(dev: &AnyDevice) -> Result<Option<PathBuf>> {
    on_backend!(dev, d => resources(d)?.resource.log_path())
}

/// Free and total memory of `dev`.
pub fn memory_info(dev: &AnyDevice) -> Result<MemoryInfo> {
    on_backend!(dev, d => resources(d)?.allocator.memory_info())
}

/// Returns `dev`'s cached pool memory to the driver (live allocations stay valid).
pub fn reset(dev: &AnyDevice) -> Result<()> {
    on_backend!(dev, d => resources(d)?.allocator.reset())
}

/// `v`, a value of `d`'s backend, as an [`Any`].
fn wrap<D: DynDevice, F: PerBackend>(_d: &Arc<D>, v: F::Of<D::B>) -> Any<F> {
    D::wrap::<F>(v)
}

/// What [`AnyAllocation`] holds per backend.
#[derive(Debug)]
pub struct Allocations;
impl PerBackend for Allocations {
    type Of<B: Backend> = DeviceAllocation<B>;
}

/// Device memory of any backend from its device's current resource; goes
/// back to it (in the order of the stream it was allocated on) when dropped.
pub type AnyAllocation = Any<Allocations>;

impl AnyAllocation {
    /// The device address.
    pub fn ptr(&self) -> u64 {
        on_backend!(self, a => a.device_ptr())
    }

    /// The allocation's device, as a key (no handle of the device is cloned).
    pub fn device_key(&self) -> DeviceKey {
        DeviceKey { backend: self.backend(), ordinal: on_backend!(self, a => a.ordinal()) }
    }

    /// The driver IPC handle of the allocation (through its resource).
    pub fn ipc_handle(&self) -> Result<IpcHandle> {
        on_backend!(self, a => ipc_handle_of(a))
    }
}

fn ipc_handle_of<B: Backend>(a: &DeviceAllocation<B>) -> Result<IpcHandle> {
    let d = <B::Device as Device>::open(a.ordinal())?;
    resources_of::<B>(&d)?.allocator.ipc_handle(a)
}

/// Allocates `size` bytes (at least 1 is reserved) from `dev`'s current
/// resource, in the order of `stream` (a stream of `dev`).
pub fn alloc(dev: &AnyDevice, size: usize, stream: &AnyStream) -> Result<AnyAllocation> {
    on_backend!(dev, d => alloc_on(d, size.max(1), stream))
}

/// [`alloc`], unless it would wait for another thread (see
/// [`without_waiting`](crate::memory::without_waiting)): `None` then, with
/// nothing changed. For callers that hold a lock another thread may need
/// (Python's GIL) and release it only for the `alloc` that may wait.
pub fn alloc_without_waiting(dev: &AnyDevice, size: usize, stream: &AnyStream) -> Option<Result<AnyAllocation>> {
    // A free refused inside (a block the pool's contract check sent back) is made on return.
    match crate::memory::without_waiting(|| alloc(dev, size, stream)).0 {
        Err(e) if crate::memory::would_wait(&e) => None,
        done => Some(done),
    }
}

/// Drops `a` (its memory goes back to its resource), unless that would
/// wait for another thread: then returns the free to make later, where
/// waiting is allowed (see [`without_waiting`](crate::memory::without_waiting)).
#[inline]
pub fn free_without_waiting(a: AnyAllocation) -> Option<RefusedFrees> {
    let ((), frees) = crate::memory::without_waiting(|| drop(a));
    (!frees.is_empty()).then_some(frees)
}

/// What [`AnyResources`] holds per backend.
#[derive(Debug)]
pub struct ResourcesOf;
impl PerBackend for ResourcesOf {
    type Of<B: Backend> = Arc<Resources<B>>;
}

/// A device's [`Resources`] of any backend, for a caller that allocates on
/// the device often and keeps them, skipping the per-call lookup (the
/// Python `Device` object does).
pub type AnyResources = Any<ResourcesOf>;

/// `dev`'s resources, installing the observed resource on first use.
pub fn resources_of_any(dev: &AnyDevice) -> Result<AnyResources> {
    on_backend!(dev, d => Ok(wrap::<_, ResourcesOf>(d, resources(d)?)))
}

/// [`alloc_without_waiting`] from resources already looked up; `stream`
/// must be a stream of their device.
#[inline]
pub fn alloc_from_without_waiting(
    resources: &AnyResources,
    size: usize,
    stream: &AnyStream,
) -> Option<Result<AnyAllocation>> {
    match crate::memory::without_waiting(|| alloc_from(resources, size, stream)).0 {
        Err(e) if crate::memory::would_wait(&e) => None,
        done => Some(done),
    }
}

/// [`alloc`] from resources already looked up; `stream` must be a stream of their device.
///
/// ```
/// use gpuport::dynamic::{memory, AnyStream};
/// let dev = gpuport::open("host")?;
/// let kept = memory::resources_of_any(&dev)?;
/// let before = memory::statistics(&dev)?.0.total_count;
/// let a = memory::alloc_from(&kept, 1024, &AnyStream::default_for(&dev))?;
/// assert_eq!(memory::statistics(&dev)?.0.total_count, before + 1, "the device's observed resource");
/// drop(a);
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn alloc_from(resources: &AnyResources, size: usize, stream: &AnyStream) -> Result<AnyAllocation> {
    on_backend!(resources, r => {
        let d = r.resource.device();
        Ok(wrap::<_, Allocations>(d, r.allocator.alloc(size.max(1), stream.of(d)?)?))
    })
}

fn alloc_on<D: DynDevice>(d: &Arc<D>, size: usize, stream: &AnyStream) -> Result<AnyAllocation> {
    let s = stream.of(d)?;
    Ok(D::wrap::<Allocations>(resources(d)?.allocator.alloc(size, s)?))
}

/// What [`AnyDeferCleanup`] holds per backend.
#[derive(Debug)]
pub struct Deferrals;
impl PerBackend for Deferrals {
    type Of<B: Backend> = DeferCleanup<B>;
}

/// Holds every free on a device back until dropped (see [`DeferCleanup`]).
pub type AnyDeferCleanup = Any<Deferrals>;

impl AnyDeferCleanup {
    /// Frees held back so far.
    pub fn held_back(&self) -> usize {
        on_backend!(self, g => g.held_back())
    }
}

/// Holds back every free on `dev` until the guard is dropped.
pub fn defer_cleanup(dev: &AnyDevice) -> Result<AnyDeferCleanup> {
    on_backend!(dev, d => Ok(wrap::<_, Deferrals>(d, resources(d)?.allocator.defer_cleanup())))
}

/// What [`AnyPinned`] holds per backend.
#[derive(Debug)]
pub struct Pinned;
impl PerBackend for Pinned {
    type Of<B: Backend> = PinnedMemory<B>;
}

/// Pinned host memory of any backend from its device's current resource.
pub type AnyPinned = Any<Pinned>;

impl AnyPinned {
    /// The host address.
    pub fn host_ptr(&mut self) -> usize {
        on_backend!(self, m => m.as_mut_slice().as_mut_ptr() as usize)
    }
    /// The device address of mapped memory.
    pub fn mapped_ptr(&self) -> Option<u64> {
        on_backend!(self, m => m.mapped_ptr())
    }
}

/// Allocates `size` bytes (at least 1) of pinned host memory for `dev`.
pub fn alloc_pinned(dev: &AnyDevice, size: usize, flags: PinnedFlags) -> Result<AnyPinned> {
    on_backend!(dev, d => Ok(wrap::<_, Pinned>(d, resources(d)?.allocator.alloc_pinned(size.max(1), flags)?)))
}

/// What [`AnyRegistration`] holds per backend.
#[derive(Debug)]
pub struct Registrations;
impl PerBackend for Registrations {
    type Of<B: Backend> = crate::backend::HostRegistration<B>;
}

/// Host memory page-locked for a device of any backend until dropped.
pub type AnyRegistration = Any<Registrations>;

/// Page-locks `len` bytes at `ptr` for `dev`.
///
/// # Safety
/// `ptr..ptr + len` is live host memory that outlives the registration and
/// is not moved while registered.
pub unsafe fn pin(dev: &AnyDevice, ptr: *mut u8, len: usize, mapped: bool) -> Result<AnyRegistration> {
    // SAFETY: forwarded caller contract.
    on_backend!(dev, d => Ok(wrap::<_, Registrations>(d, unsafe { resources(d)?.allocator.pin(ptr, len, mapped) }?)))
}

/// Allocations kept by address until released, for C interfaces that free
/// by pointer (PyTorch's `CUDAPluggableAllocator`, CuPy's allocator hook).
/// Hashed with rustc-hash's Fx hash, not the standard SipHash: the keys are
/// addresses gpuport's own resources handed out, nobody's chosen input, and
/// SipHash was about a seventh of the hooks' instructions per alloc+free
/// (benches/memory.rs, `hook_path`, under callgrind).
fn kept_by_address() -> &'static Mutex<FxHashMap<u64, AnyKeptBlock>> {
    static KEPT: OnceLock<Mutex<FxHashMap<u64, AnyKeptBlock>>> = OnceLock::new();
    KEPT.get_or_init(Default::default)
}

/// Frees the allocation [`alloc_kept`] keeps at `ptr`; false if there is none.
pub fn release_by_address(ptr: u64) -> bool {
    // The block goes back after the map's lock is released.
    let kept = kept_by_address().lock().unwrap_or_else(|p| p.into_inner()).remove(&ptr);
    kept.is_some()
}

/// What a peer library's allocator hook does per request: `size` bytes on
/// the device its `id` names ([`hook_device`]: device `id` of `kind`, or for
/// a negative id what `negative` says), from the device's current resource
/// in the order of the stream `handle` (0: the default stream), kept until
/// [`release_by_address`] is called with the address it returns.
///
/// ```
/// use gpuport::dynamic::memory::{alloc_kept, release_by_address, NegativeId};
/// use gpuport::BackendKind;
/// // SAFETY: 0 is the default stream.
/// let ptr = unsafe { alloc_kept(BackendKind::Host, 0, NegativeId::Refused, 0, 4096) }?;
/// assert!(release_by_address(ptr));
/// assert!(!release_by_address(ptr), "freed once");
/// # Ok::<(), gpuport::Error>(())
/// ```
///
/// # Safety
/// `handle` is 0, a special handle of the vendor, or a live stream of the
/// device, alive while the allocation is used and until it is released
/// (as for [`AnyStream::borrow`]).
pub unsafe fn alloc_kept(kind: BackendKind, id: i32, negative: NegativeId, handle: usize, size: usize) -> Result<u64> {
    let key = (kind, id, negative, handle);
    // A request like an earlier one on this thread: its target as looked
    // up then (no device opened, no handle cloned: 8 atomic operations
    // fewer per request, and for a stream other than the default one the
    // lock of `AnyStream::borrow`'s map). A nested request (an
    // out-of-memory observer's) finds the cell borrowed too, which is fine.
    let seen = HOOK_TARGETS.try_with(|targets| {
        let targets = targets.borrow();
        let (_, t) = targets.iter().find(|(k, _)| *k == key)?;
        Some(keep_block(t, size))
    });
    if let Ok(Some(ptr)) = seen {
        return ptr;
    }
    let dev = hook_device(kind, id, negative)?;
    // SAFETY: forwarded caller contract.
    let stream = unsafe { AnyStream::borrow(&dev, handle) }?;
    let target: AnyHookTarget = on_backend!(&dev, d => {
        let allocator = resources(d)?.allocator.clone();
        wrap::<_, HookTargets>(d, Arc::new(HookTarget { allocator, stream: stream.of(d)?.clone() }))
    });
    let ptr = keep_block(&target, size)?;
    // Remembered once the allocation succeeded, unless the cell is borrowed
    // (a nested request): it is only a shortcut.
    let _ = HOOK_TARGETS.try_with(|targets| {
        if let Ok(mut targets) = targets.try_borrow_mut() {
            if targets.len() == HOOK_TARGETS_MAX {
                targets.remove(0);
            }
            targets.push((key, target));
        }
    });
    Ok(ptr)
}

/// Allocates `size` bytes (at least 1) for `target` and keeps the block by
/// its address; returns the address.
#[inline]
fn keep_block(target: &AnyHookTarget, size: usize) -> Result<u64> {
    let ptr: u64;
    let kept: AnyKeptBlock = on_backend!(map target, t => {
        let block = t.allocator.alloc_block(size.max(1), &t.stream)?;
        ptr = block.ptr();
        KeptBlock { block: Some(block), target: t.clone() }
    });
    kept_by_address().lock().unwrap_or_else(|p| p.into_inner()).insert(ptr, kept);
    Ok(ptr)
}

/// What [`alloc_kept`] looked up for a request: the device's allocator (of
/// its current resource) and the stream, which stay the same for the same
/// request key (a device is opened once per process, its resources
/// installed once, and a handle borrowed once, see [`AnyStream::borrow`]).
struct HookTarget<B: Backend> {
    allocator: Allocator<B>,
    stream: Stream<B>,
}

impl<B: Backend> fmt::Debug for HookTarget<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HookTarget({:?}, {:?})", self.allocator, self.stream)
    }
}

/// What [`AnyHookTarget`] holds per backend.
#[derive(Debug)]
struct HookTargets;
impl PerBackend for HookTargets {
    type Of<B: Backend> = Arc<HookTarget<B>>;
}

/// A [`HookTarget`] of any backend.
type AnyHookTarget = Any<HookTargets>;

/// An allocation [`alloc_kept`] keeps: the block its target's allocator
/// handed out, given back to it on the target's stream when dropped (by
/// [`release_by_address`]). A block and not a [`DeviceAllocation`]: the
/// hooks' memory is never used through gpuport, so it needs no record of
/// uses on other streams, and each request clones no stream or owner handle.
struct KeptBlock<B: Backend> {
    /// `Some` until dropped.
    block: Option<Block<B>>,
    target: Arc<HookTarget<B>>,
}

impl<B: Backend> fmt::Debug for KeptBlock<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeptBlock({:?}, {:?})", self.block, self.target)
    }
}

impl<B: Backend> Drop for KeptBlock<B> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.target.allocator.release_block(block, &self.target.stream);
        }
    }
}

/// What [`AnyKeptBlock`] holds per backend.
#[derive(Debug)]
struct KeptBlocks;
impl PerBackend for KeptBlocks {
    type Of<B: Backend> = KeptBlock<B>;
}

/// A [`KeptBlock`] of any backend.
type AnyKeptBlock = Any<KeptBlocks>;

/// What names a request's target: `alloc_kept`'s arguments but the size.
type HookKey = (BackendKind, i32, NegativeId, usize);

/// How many request targets a thread remembers (a few devices and streams;
/// the oldest is forgotten first).
const HOOK_TARGETS_MAX: usize = 8;

thread_local! {
    static HOOK_TARGETS: RefCell<Vec<(HookKey, AnyHookTarget)>> = const { RefCell::new(Vec::new()) };
}

/// Number of allocations [`alloc_kept`] keeps.
pub fn kept_by_address_count() -> usize {
    kept_by_address().lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// A request to an allocator hook past what an allocation may span.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate {size} bytes: more than isize::MAX")]
pub struct RequestTooLarge {
    /// The bytes asked for.
    pub size: usize,
}

/// The bytes PyTorch's allocator hook allocates for a request of `size`
/// (its `ssize_t`): `None` for 0 (the hook gives a null pointer, as
/// PyTorch's own allocator does); a negative size is
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
///
/// ```
/// use gpuport::dynamic::memory::signed_request;
/// assert_eq!(signed_request(64)?, Some(64));
/// assert_eq!(signed_request(0)?, None);
/// assert!(signed_request(-1).is_err());
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn signed_request(size: isize) -> Result<Option<usize>> {
    match usize::try_from(size) {
        Ok(0) => Ok(None),
        Ok(bytes) => Ok(Some(bytes)),
        Err(_) => Err(crate::Error::InvalidArgument { name: "size", reason: format!("{size} < 0") }),
    }
}

/// What a peer library's allocator hook means by a negative device id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NegativeId {
    /// The host backend: PyTorch's pluggable allocator passes -1 for CPU memory.
    Host,
    /// No device: CuPy's allocator names devices by ordinals only.
    Refused,
}

/// The device a peer library's allocator hook names by `id`: device `id`
/// of backend `kind`, or for a negative id what `negative` says.
///
/// ```
/// use gpuport::dynamic::memory::{hook_device, NegativeId};
/// use gpuport::BackendKind;
/// assert_eq!(hook_device(BackendKind::Host, 0, NegativeId::Refused)?.info().spec(), "host");
/// assert_eq!(hook_device(BackendKind::Cuda, -1, NegativeId::Host)?.info().spec(), "host");
/// let refused = hook_device(BackendKind::Cuda, -1, NegativeId::Refused).unwrap_err();
/// assert_eq!(refused.to_string(), "invalid argument device id: -1 is negative; device ids are 0 or more");
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn hook_device(kind: BackendKind, id: i32, negative: NegativeId) -> Result<AnyDevice> {
    match (usize::try_from(id), negative) {
        (Ok(ordinal), _) => crate::open_kind(kind, ordinal),
        (Err(_), NegativeId::Host) => crate::open_kind(BackendKind::Host, 0),
        (Err(_), NegativeId::Refused) => Err(crate::Error::InvalidArgument {
            name: "device id",
            reason: format!("{id} is negative; device ids are 0 or more"),
        }),
    }
}

/// The bytes CuPy's allocator hook allocates for a request of `size` (its
/// `size_t`): at most `isize::MAX`, as every allocation ([`alloc`] reserves
/// at least 1 byte for 0).
///
/// ```
/// use gpuport::dynamic::memory::unsigned_request;
/// assert_eq!(unsigned_request(64), Ok(64));
/// assert!(unsigned_request(usize::MAX).is_err());
/// ```
pub fn unsigned_request(size: usize) -> std::result::Result<usize, RequestTooLarge> {
    match isize::try_from(size) {
        Ok(_) => Ok(size),
        Err(_) => Err(RequestTooLarge { size }),
    }
}
