//! The [`MemoryResource`] trait and the two driver-backed resources,
//! [`PlainResource`] and [`NativePoolResource`]. The [`Allocator`](super::Allocator) handle
//! users hold is in `allocation.rs`, the [`Block`] resources hand out in
//! `block.rs`, IPC handles in `ipc_handle.rs`.

use crate::backend::Backend;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Device, Event, HostRegistration, MemoryInfo, Stream};
use crate::error::{Error, Result};

#[cfg(doc)]
use super::block::MemoryError;
use super::block::{Block, ResourceId};
use super::ext::MemoryDevice;
use super::ipc::ShareablePool;
use super::ipc_handle::{IpcHandle, IpcKind};
use super::pinned::{PinnedFlags, PinnedMemory};
use super::report::{PoolReport, Statistics};
use super::INTERFACE_VERSION;

/// The [`MemoryResource`] methods an adaptor passes straight to its `inner`
/// resource (statistics and logging adaptors only watch allocate/deallocate).
/// Expands inside `unsafe impl<B: Backend> MemoryResource<B> for Adaptor<B>`.
macro_rules! forward_to_inner {
    () => {
        fn memory_info(&self) -> Result<MemoryInfo> {
            self.inner.memory_info()
        }
        fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<PinnedMemory<B>> {
            self.inner.alloc_pinned(bytes, flags)
        }
        unsafe fn pin(&self, ptr: *mut u8, len: usize, mapped: bool) -> Result<HostRegistration<B>> {
            // SAFETY: forwarded caller contract.
            unsafe { self.inner.pin(ptr, len, mapped) }
        }
        fn ipc_export(&self, block: &Block<B>) -> Result<IpcHandle> {
            self.inner.ipc_export(block)
        }
        fn reset(&self) -> Result<()> {
            self.inner.reset()
        }
        fn release_cached(&self, patience: std::time::Duration) -> Result<()> {
            self.inner.release_cached(patience)
        }
        fn report(&self) -> Option<PoolReport> {
            self.inner.report()
        }
    };
}
pub(crate) use forward_to_inner;

/// A source of device memory (and pinned host memory) for one device.
///
/// Object safe: the library holds resources as `Arc<dyn MemoryResource<B>>`
/// inside an [`Allocator`](super::Allocator), so adaptors can wrap any resource.
///
/// # Safety
/// Safe code trusts what a resource hands out: an [`Allocator`](super::Allocator) turns each
/// block into a [`DeviceAllocation`](super::DeviceAllocation), which safe copies, memsets and kernel
/// launches then read and write through its address and length. An
/// implementation promises:
///
/// 1. [`device`](Self::device) names the same device on every call.
/// 2. A block returned by [`allocate(bytes, stream)`](Self::allocate) is live
///    memory of that device: `block.ptr()..block.ptr() + block.len()`, with
///    `block.len() >= bytes` and `block.ordinal()` the device's ordinal,
///    usable by work enqueued on `stream` after the call. ([`Allocator::alloc`](super::Allocator::alloc)
///    checks the length, the device and that the range does not wrap, and
///    refuses a block that fails with [`MemoryError::ContractViolation`]; it
///    cannot check the rest.)
/// 3. That memory is handed to no one else, by this resource or any
///    resource it draws from, until the block comes back through
///    [`deallocate`](Self::deallocate); and then not to work that could run
///    before both the work enqueued on the free's `stream` up to the free
///    and the events in `after` have completed.
/// 4. The memory stays valid until then: neither [`reset`](Self::reset) nor
///    anything else frees memory of a block that has not come back. (The
///    resource outlives its allocations: they hold it through the `Allocator`.)
/// 5. `deallocate` frees nothing of a block it did not hand out or that is
///    not live in it (another resource's, freed already, forged): it returns
///    [`MemoryError::ForeignBlock`] instead (a [`ResourceId`] stamped on the
///    resource's blocks, and the block's serial number, tell them apart).
///
/// An adaptor that passes blocks between its caller and an inner resource
/// unchanged keeps these promises by forwarding them.
pub unsafe trait MemoryResource<B: Backend>: Send + Sync + fmt::Debug + 'static {
    /// The device whose memory this is.
    fn device(&self) -> &Arc<B::Device>;

    /// A short name for logs and reports, e.g. `"caching-pool"`.
    fn name(&self) -> &'static str;

    /// Allocates `bytes` (at least 1) usable by work on `stream` enqueued after this call.
    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> Result<Block<B>>;

    /// Takes back a block from [`allocate`](Self::allocate), freed in the
    /// order of `stream` (the stream it was allocated on). `after` holds
    /// events recorded on other streams that used the block: it must not be
    /// handed out again before they complete.
    ///
    /// [`MemoryError::ForeignBlock`] for a block this resource did not hand
    /// out or that is not live in it; nothing is freed then (the block is
    /// dropped, which leaks a buffer it carries).
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()>;

    /// Free and total memory of the device.
    fn memory_info(&self) -> Result<MemoryInfo> {
        self.device().memory_info()
    }

    /// Allocates pinned host memory (contents unspecified when pooled).
    fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<PinnedMemory<B>> {
        PinnedMemory::unpooled(self.device(), bytes, flags)
    }

    /// Page-locks existing host memory until the registration is dropped.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid host memory that outlives the registration.
    unsafe fn pin(&self, ptr: *mut u8, len: usize, mapped: bool) -> Result<HostRegistration<B>> {
        // SAFETY: forwarded caller contract.
        unsafe { self.device().pin_with(ptr, len, mapped) }
    }

    /// An IPC handle for `block`, for [`open_ipc`](super::open_ipc) in another
    /// process. By default the driver's IPC memory handle of the allocation
    /// holding the block ([`IpcKind::Memory`]).
    fn ipc_export(&self, block: &Block<B>) -> Result<IpcHandle> {
        let (handle, base) = self.device().ipc_export(block.ptr())?;
        let info = self.device().info();
        Ok(IpcHandle {
            backend: info.backend,
            ordinal: info.ordinal,
            kind: IpcKind::Memory,
            handle,
            offset: block.ptr() - base,
            len: block.len(),
        })
    }

    /// Returns every cached byte to the driver (live allocations stay valid).
    fn reset(&self) -> Result<()> {
        Ok(())
    }

    /// As [`reset`](Self::reset), but waiting for queued work no longer than
    /// `patience`: what cannot be released by then stays cached. What
    /// [`release_all`](super::release_all) runs at process exit, so a program
    /// that exits with work still running does not hang there. By default
    /// `reset`, for resources whose reset does not wait for work.
    fn release_cached(&self, patience: Duration) -> Result<()> {
        let _ = patience;
        self.reset()
    }

    /// A usage and fragmentation report, for pools.
    fn report(&self) -> Option<PoolReport> {
        None
    }

    /// Allocation statistics, where a [`StatisticsResource`](super::StatisticsResource) counts them.
    fn statistics(&self) -> Option<Statistics> {
        None
    }

    /// The interface version this resource implements.
    fn interface_version(&self) -> u32 {
        INTERFACE_VERSION
    }
}

// ---- driver-backed resources ----------------------------------------------------------

/// The backend's plain allocator (`cuMemAlloc`/`cuMemFree`): no caching.
pub struct PlainResource<B: Backend> {
    device: Arc<B::Device>,
    id: ResourceId,
}

impl<B: Backend> PlainResource<B> {
    /// A resource allocating straight from `device`.
    pub fn new(device: Arc<B::Device>) -> Self {
        PlainResource { device, id: ResourceId::new() }
    }
}

impl<B: Backend> fmt::Debug for PlainResource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PlainResource({})", self.device.info().spec())
    }
}

// SAFETY: every block wraps a buffer fresh from the device's allocator,
// owned by the block (so no one else has it) and freed only in `deallocate`,
// after the free's stream and the `after` events (a synchronous free waits
// for them); blocks of other resources, and blocks without a buffer, are
// refused before anything is freed.
unsafe impl<B: Backend> MemoryResource<B> for PlainResource<B> {
    fn device(&self) -> &Arc<B::Device> {
        &self.device
    }
    fn name(&self) -> &'static str {
        "plain"
    }
    fn allocate(&self, bytes: usize, _stream: &Stream<B>) -> Result<Block<B>> {
        Block::from_buffer(self.id, self.device.alloc(bytes)?, bytes, 0)
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()> {
        let buffer = take_own_buffer(block, self.id, self.name())?;
        free_after_work::<B, _>(&self.device, buffer, stream, &after);
        Ok(())
    }
}

/// Drops `buffer` (a synchronous free) once `stream`'s queued work and the
/// `after` events are done: the free must not overtake them (a prefetch of
/// managed memory included).
fn free_after_work<B: Backend, T>(device: &Arc<B::Device>, buffer: T, stream: &Stream<B>, after: &[Event<B>]) {
    for event in after {
        let _ = device.synchronize_event(event);
    }
    let _ = device.synchronize(stream);
    drop(buffer);
}

/// Managed memory straight from the device (`cuMemAllocManaged`,
/// `hipMallocManaged`; the host backend's heap): no caching. Its blocks
/// carry their buffers, so [`MemoryDevice::prefetch_managed`] and
/// [`advise_managed`](MemoryDevice::advise_managed) can place them (see
/// [`DeviceAllocation::buffer`](super::DeviceAllocation::buffer)).
pub struct ManagedResource<B: Backend> {
    device: Arc<B::Device>,
    id: ResourceId,
}

impl<B: Backend> ManagedResource<B> {
    /// A resource of `device`'s managed memory; [`Error::Unsupported`] where
    /// the device has none.
    pub fn new(device: Arc<B::Device>) -> Result<Self> {
        if !device.info().managed_memory {
            return Err(Error::Unsupported {
                op: "managed memory",
                backend: B::KIND,
                hint: Some(format!("{} has no managed memory; use device memory", device.info().spec())),
            });
        }
        Ok(ManagedResource { device, id: ResourceId::new() })
    }
}

impl<B: Backend> fmt::Debug for ManagedResource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ManagedResource({})", self.device.info().spec())
    }
}

// SAFETY: as `PlainResource`'s: every block wraps a managed buffer fresh from
// the device, owned by the block alone and freed only in `deallocate`, after
// the free's stream and the `after` events; other blocks are refused.
unsafe impl<B: Backend> MemoryResource<B> for ManagedResource<B> {
    fn device(&self) -> &Arc<B::Device> {
        &self.device
    }
    fn name(&self) -> &'static str {
        "managed"
    }
    fn allocate(&self, bytes: usize, _stream: &Stream<B>) -> Result<Block<B>> {
        Block::from_buffer(self.id, self.device.alloc_managed(bytes)?, bytes, 0)
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()> {
        let buffer = take_own_buffer(block, self.id, self.name())?;
        free_after_work::<B, _>(&self.device, buffer, stream, &after);
        Ok(())
    }
}

/// The driver's stream-ordered pool (`cuMemAllocAsync`/`cuMemFreeAsync`, or
/// `hipMallocAsync`/`hipFreeAsync`), with its release threshold set: the
/// device's default pool ([`new`](Self::new)), or a pool of its own whose
/// memory other processes can open ([`shareable`](Self::shareable)).
///
/// Memory of the default pool cannot be exported over IPC: that pool is not
/// created with a shareable handle type, and `cuIpcGetMemHandle` refuses pool
/// memory (docs/design.md#ipc-of-pooled-memory, cudarc#521); its
/// [`ipc_export`](MemoryResource::ipc_export) says so with
/// [`Error::Unsupported`] on every backend. A shareable pool exports its
/// blocks as [`IpcKind::PoolBlock`] handles (see [`crate::memory::ipc`]).
pub struct NativePoolResource<B: Backend> {
    device: Arc<B::Device>,
    id: ResourceId,
    /// The pool of [`shareable`](Self::shareable); `None`: the default pool.
    own: Option<ShareablePool<B>>,
}

impl<B: Backend> NativePoolResource<B> {
    /// Uses `device`'s default stream-ordered pool. `release_threshold`
    /// (bytes kept cached across synchronizations; the driver's default is 0,
    /// which returns everything at every sync) is set when given.
    pub fn new(device: Arc<B::Device>, release_threshold: Option<u64>) -> Result<Self> {
        if let Some(bytes) = release_threshold {
            device.set_native_pool_release_threshold(bytes)?;
        }
        Ok(NativePoolResource { device, id: ResourceId::new(), own: None })
    }

    /// Creates a stream-ordered pool of `device` for this resource alone
    /// (`cuMemPoolCreate`/`hipMemPoolCreate`: pinned device memory,
    /// exportable as a POSIX file descriptor), with `release_threshold` set
    /// when given, and allocates from it (`cuMemAllocFromPoolAsync`,
    /// `hipMallocFromPoolAsync`). Its blocks can be exported with
    /// [`Allocator::ipc_handle`](super::Allocator::ipc_handle) and opened in another process with
    /// [`open_ipc`](super::open_ipc) (Linux; [`crate::memory::ipc`] says what that needs).
    ///
    /// The pool is destroyed, after synchronizing the device, when the
    /// resource is dropped; handles of its blocks cannot be opened after that.
    /// [`Error::Unsupported`] where the device or driver has no such pools.
    pub fn shareable(device: Arc<B::Device>, release_threshold: Option<u64>) -> Result<Self> {
        let own = ShareablePool::new(device.clone(), release_threshold)?;
        Ok(NativePoolResource { device, id: ResourceId::new(), own: Some(own) })
    }
}

impl<B: Backend> fmt::Debug for NativePoolResource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.own {
            None => write!(f, "NativePoolResource({})", self.device.info().spec()),
            Some(pool) => write!(f, "NativePoolResource({}, {pool:?})", self.device.info().spec()),
        }
    }
}

// SAFETY: every block wraps a buffer fresh from the driver's stream-ordered
// pool, owned by the block and freed only in `deallocate`, in the order of
// the free's stream after it waited for the `after` events (so the driver
// reuses it for no work that could run before them); foreign and bufferless
// blocks are refused before anything is freed. The pool outlives the blocks
// (they hold the resource through their `Allocator`).
unsafe impl<B: Backend> MemoryResource<B> for NativePoolResource<B> {
    fn device(&self) -> &Arc<B::Device> {
        &self.device
    }
    fn name(&self) -> &'static str {
        match self.own {
            None => "native-pool",
            Some(_) => "shareable-native-pool",
        }
    }
    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> Result<Block<B>> {
        let buffer = match &self.own {
            None => self.device.alloc_async(bytes, stream)?,
            Some(pool) => pool.alloc(bytes, stream)?,
        };
        Block::from_buffer(self.id, buffer, bytes, 0)
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()> {
        let buffer = take_own_buffer(block, self.id, self.name())?;
        // The free is ordered on `stream`; make it wait for the other streams' uses.
        for event in &after {
            if self.device.wait_event(stream, event).is_err() {
                let _ = self.device.synchronize_event(event);
            }
        }
        drop(buffer);
        drop(after);
        Ok(())
    }
    fn ipc_export(&self, block: &Block<B>) -> Result<IpcHandle> {
        match &self.own {
            Some(pool) => pool.export(block),
            None => Err(Error::Unsupported {
                op: "IPC export of the default stream-ordered pool's memory",
                backend: self.device.info().backend,
                hint: Some(
                    "the driver's default pool has no shareable handle type, so cuIpcGetMemHandle (and \
                     hipIpcGetMemHandle) refuses its memory; allocate through NativePoolResource::shareable \
                     (a pool of its own, exported as a file descriptor), or through PlainResource or \
                     CachingPool, to share it"
                        .into(),
                ),
            }),
        }
    }
    fn reset(&self) -> Result<()> {
        self.device.synchronize(self.device.default_stream())?;
        self.release_cached(Duration::ZERO)
    }
    fn release_cached(&self, _patience: Duration) -> Result<()> {
        // The driver releases only memory no queued free still holds back.
        match &self.own {
            None => self.device.trim_native_pool(0),
            Some(pool) => pool.trim(0),
        }
    }
}

/// The buffer of a block that resource `id` (named `name`) made with
/// [`Block::from_buffer`]; [`MemoryError::ForeignBlock`] for any other block.
fn take_own_buffer<B: Backend>(block: Block<B>, id: ResourceId, name: &'static str) -> Result<B::Buffer> {
    block.check_owner(id, name)?;
    if block.buffer().is_none() {
        return Err(block.refused(name, "it carries no buffer, so this resource did not hand it out"));
    }
    block.into_buffer().ok_or_else(|| unreachable_error(name))
}

fn unreachable_error(name: &'static str) -> Error {
    Error::InvalidArgument { name: "block", reason: format!("{name}: internal: the buffer checked above is gone") }
}
