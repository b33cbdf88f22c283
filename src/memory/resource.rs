//! The [`MemoryResource`] trait, the [`Allocator`] handle that users hold,
//! the [`DeviceAllocation`] it hands out, and the two driver-backed resources.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::{
    Buffer, Device, DeviceMemory, DeviceMemoryMut, Event, HostRegistration, MemoryInfo, MemoryKind, Stream,
};
use crate::error::{BackendKind, Error, Result};

use super::ext::{IpcBytes, MemoryBackend, MemoryDevice};
use super::ipc::{close_pool_block, open_pool_block, PoolKey, ShareablePool};
use super::pinned::{PinnedFlags, PinnedMemory};
use super::pool::PoolReport;
use super::stats::Statistics;
use super::INTERFACE_VERSION;

/// A piece of device memory as a resource hands it out and takes it back.
///
/// Users see blocks only inside a [`DeviceAllocation`]; resource authors
/// create them in [`MemoryResource::allocate`] and get them back, unchanged,
/// in [`MemoryResource::deallocate`].
pub struct Block<B: MemoryBackend> {
    /// Device address of the first byte.
    pub ptr: u64,
    /// Bytes requested (the usable size may be larger).
    pub len: usize,
    /// Resource-private number (the caching pool's block index).
    pub token: u64,
    /// The backend buffer, for resources that hand out whole buffers.
    pub buffer: Option<Buffer<B>>,
}

impl<B: MemoryBackend> fmt::Debug for Block<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Block({:#x}, {} bytes, token {})", self.ptr, self.len, self.token)
    }
}

/// The [`MemoryResource`] methods an adaptor passes straight to its `inner`
/// resource (statistics and logging adaptors only watch allocate/deallocate).
/// Expands inside `impl<B: MemoryBackend> MemoryResource<B> for Adaptor<B>`.
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
        fn report(&self) -> Option<PoolReport> {
            self.inner.report()
        }
    };
}
pub(crate) use forward_to_inner;

/// A source of device memory (and pinned host memory) for one device.
///
/// Object safe: the library holds resources as `Arc<dyn MemoryResource<B>>`
/// inside an [`Allocator`], so adaptors can wrap any resource.
pub trait MemoryResource<B: MemoryBackend>: Send + Sync + fmt::Debug + 'static {
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
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>);

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

    /// An IPC handle for `block`, for [`open_ipc`] in another process. By
    /// default the driver's IPC memory handle of the allocation holding the
    /// block ([`IpcKind::Memory`]).
    fn ipc_export(&self, block: &Block<B>) -> Result<IpcHandle> {
        let (handle, base) = self.device().ipc_export(block.ptr)?;
        let info = self.device().info();
        Ok(IpcHandle {
            backend: info.backend,
            ordinal: info.ordinal,
            kind: IpcKind::Memory,
            handle,
            offset: block.ptr - base,
            len: block.len,
        })
    }

    /// Returns every cached byte to the driver (live allocations stay valid).
    fn reset(&self) -> Result<()> {
        Ok(())
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

// ---- the handle -------------------------------------------------------------------

struct Deferred<B: MemoryBackend> {
    block: Block<B>,
    stream: Stream<B>,
    after: Vec<Event<B>>,
}

struct AllocatorInner<B: MemoryBackend> {
    resource: Arc<dyn MemoryResource<B>>,
    /// Live [`DeferCleanup`] guards.
    defer_depth: AtomicUsize,
    deferred: Mutex<Vec<Deferred<B>>>,
}

impl<B: MemoryBackend> AllocatorInner<B> {
    fn release(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) {
        if self.defer_depth.load(Ordering::Acquire) > 0 {
            let mut deferred = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
            // Checked again under the lock: the last guard decrements before
            // it drains, so nothing pushed here is left behind.
            if self.defer_depth.load(Ordering::Acquire) > 0 {
                deferred.push(Deferred { block, stream: stream.clone(), after });
                return;
            }
        }
        self.resource.deallocate(block, stream, after);
    }
}

/// A cloneable handle on a memory resource: what users and the array layer
/// allocate through.
///
/// ```
/// use gpuport::memory::{Allocator, CachingPool, PoolConfig};
/// use gpuport::{Device, DeviceMemory, Host, HostDevice};
///
/// let dev = HostDevice::open(0)?;
/// // The backend cannot be inferred from the device type: name it.
/// let alloc = Allocator::<Host>::new(CachingPool::new(dev.clone(), PoolConfig::default()));
/// let mut block = alloc.alloc(1 << 20, dev.default_stream())?;
/// let len = block.len();
/// dev.memset(&mut block, 0, len, 7)?;
/// drop(block); // back to the pool, reusable on this stream at once
/// # Ok::<(), gpuport::Error>(())
/// ```
pub struct Allocator<B: MemoryBackend> {
    inner: Arc<AllocatorInner<B>>,
}

impl<B: MemoryBackend> Clone for Allocator<B> {
    fn clone(&self) -> Self {
        Allocator { inner: self.inner.clone() }
    }
}

impl<B: MemoryBackend> fmt::Debug for Allocator<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Allocator({:?})", self.inner.resource)
    }
}

impl<B: MemoryBackend> Allocator<B> {
    /// Wraps a resource.
    pub fn new(resource: impl MemoryResource<B>) -> Self {
        Self::from_arc(Arc::new(resource))
    }

    /// Wraps a shared resource.
    pub fn from_arc(resource: Arc<dyn MemoryResource<B>>) -> Self {
        Allocator {
            inner: Arc::new(AllocatorInner {
                resource,
                defer_depth: AtomicUsize::new(0),
                deferred: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The resource behind this handle.
    pub fn resource(&self) -> &Arc<dyn MemoryResource<B>> {
        &self.inner.resource
    }

    /// The device.
    pub fn device(&self) -> &Arc<B::Device> {
        self.inner.resource.device()
    }

    /// Allocates `bytes` of device memory for work on `stream` (NBEP 7 `memalloc`).
    pub fn alloc(&self, bytes: usize, stream: &Stream<B>) -> Result<DeviceAllocation<B>> {
        let block = self.inner.resource.allocate(bytes, stream)?;
        let device = self.device();
        Ok(DeviceAllocation {
            ptr: block.ptr,
            len: block.len,
            ordinal: device.info().ordinal,
            stream_id: device.stream_id(stream),
            block: Some(block),
            stream: stream.clone(),
            uses: Mutex::new(Vec::new()),
            owner: self.inner.clone(),
        })
    }

    /// Allocates pinned host memory (NBEP 7 `memhostalloc`).
    pub fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<PinnedMemory<B>> {
        self.inner.resource.alloc_pinned(bytes, flags)
    }

    /// Page-locks existing host memory (NBEP 7 `mempin`).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid host memory that outlives the registration.
    pub unsafe fn pin(&self, ptr: *mut u8, len: usize, mapped: bool) -> Result<HostRegistration<B>> {
        // SAFETY: forwarded caller contract.
        unsafe { self.inner.resource.pin(ptr, len, mapped) }
    }

    /// Free and total device memory (NBEP 7 `get_memory_info`).
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        self.inner.resource.memory_info()
    }

    /// An IPC handle for an allocation (NBEP 7 `get_ipc_handle`).
    pub fn ipc_handle(&self, allocation: &DeviceAllocation<B>) -> Result<IpcHandle> {
        match &allocation.block {
            Some(block) => self.inner.resource.ipc_export(block),
            None => Err(Error::InvalidArgument { name: "allocation", reason: "already freed".into() }),
        }
    }

    /// Returns every cached byte to the driver (NBEP 7 `reset`); live
    /// allocations stay valid. Frees held back by a live
    /// [`DeferCleanup`] stay held back.
    pub fn reset(&self) -> Result<()> {
        self.inner.resource.reset()
    }

    /// Holds every free back until the returned guard (and every other live
    /// guard) is dropped (NBEP 7 `defer_cleanup`).
    pub fn defer_cleanup(&self) -> DeferCleanup<B> {
        self.inner.defer_depth.fetch_add(1, Ordering::AcqRel);
        DeferCleanup { inner: self.inner.clone() }
    }

    /// The interface version (NBEP 7 `interface_version`).
    pub fn interface_version(&self) -> u32 {
        self.inner.resource.interface_version()
    }

    /// The resource's usage and fragmentation report, for pools.
    pub fn report(&self) -> Option<PoolReport> {
        self.inner.resource.report()
    }

    /// The resource's statistics, where an adaptor counts them.
    pub fn statistics(&self) -> Option<Statistics> {
        self.inner.resource.statistics()
    }
}

/// Holds frees back while alive; see [`Allocator::defer_cleanup`].
#[must_use = "frees are held back only while the guard lives"]
pub struct DeferCleanup<B: MemoryBackend> {
    inner: Arc<AllocatorInner<B>>,
}

impl<B: MemoryBackend> fmt::Debug for DeferCleanup<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeferCleanup(depth {})", self.inner.defer_depth.load(Ordering::Relaxed))
    }
}

impl<B: MemoryBackend> DeferCleanup<B> {
    /// Number of frees held back so far.
    pub fn held_back(&self) -> usize {
        self.inner.deferred.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl<B: MemoryBackend> Drop for DeferCleanup<B> {
    fn drop(&mut self) {
        if self.inner.defer_depth.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let drained = std::mem::take(&mut *self.inner.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        for d in drained {
            self.inner.resource.deallocate(d.block, &d.stream, d.after);
        }
    }
}

// ---- allocations ------------------------------------------------------------------

/// Device memory from an [`Allocator`]; goes back to its resource when dropped.
///
/// Invariants: `block` is `Some` until drop; `ptr`/`len` are the block's.
/// The allocation belongs to the stream it was allocated on: pass it directly
/// to work on that stream. For work on another stream, borrow it through
/// [`use_on`](Self::use_on), which records that use so the memory is not
/// reused before it completes.
pub struct DeviceAllocation<B: MemoryBackend> {
    ptr: u64,
    len: usize,
    ordinal: usize,
    stream_id: Option<u64>,
    block: Option<Block<B>>,
    stream: Stream<B>,
    /// Events recorded after uses on other streams, with those streams' ids:
    /// at most one per stream that has an id.
    uses: Mutex<Vec<(Option<u64>, Event<B>)>>,
    owner: Arc<AllocatorInner<B>>,
}

impl<B: MemoryBackend> fmt::Debug for DeviceAllocation<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceAllocation({:#x}, {} bytes, {:?})", self.ptr, self.len, self.stream)
    }
}

impl<B: MemoryBackend> DeviceAllocation<B> {
    /// The stream the memory was allocated on (and is freed on).
    pub fn stream(&self) -> &Stream<B> {
        &self.stream
    }

    /// Borrows the allocation for work on `stream`. Enqueue the work, then
    /// drop the returned [`StreamUse`]: it records an event on `stream`, and
    /// the memory is not reused before that event completes. On the
    /// allocation's own stream this records nothing.
    ///
    /// The allocation is stream-ordered: the memory is yours from the point
    /// of the allocation on its own stream, and may have been used by an
    /// earlier owner before that point. So `use_on` also makes `stream` wait
    /// (on the device, without a host wait) for the work enqueued on the
    /// allocation's stream so far.
    pub fn use_on(&self, stream: &Stream<B>) -> Result<StreamUse<'_, B>> {
        let device = self.owner.resource.device();
        let same = matches!((self.stream_id, device.stream_id(stream)), (Some(a), Some(b)) if a == b);
        if same {
            return Ok(StreamUse { allocation: self, stream: stream.clone(), event: None });
        }
        let ready = device.create_event()?;
        device.record_event(&ready, &self.stream)?;
        device.wait_event(stream, &ready)?;
        let event = Some(device.create_event()?);
        Ok(StreamUse { allocation: self, stream: stream.clone(), event })
    }

    /// Number of recorded uses on other streams. A use on a stream replaces
    /// the recorded event of an earlier use on the same stream (which it
    /// follows in stream order), so this counts streams, not uses, where the
    /// backend tells streams apart; an array used on another stream over and
    /// over keeps one event. Where it cannot tell them apart, a new use drops
    /// the events that have completed.
    pub fn foreign_uses(&self) -> usize {
        self.uses.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

// SAFETY: `ptr..ptr+len` is the resource's block, which goes back to the
// resource only when this allocation is dropped.
unsafe impl<B: MemoryBackend> DeviceMemory for DeviceAllocation<B> {
    type B = B;
    fn len(&self) -> usize {
        self.len
    }
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn ordinal(&self) -> usize {
        self.ordinal
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
    fn owner(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        self.block.as_ref().and_then(|b| b.buffer.as_ref()).and_then(|b| b.owner())
    }
}

// SAFETY: a `DeviceAllocation` is not `Clone`; its block is handed to no one
// else until it is dropped, and `use_on` borrows it.
unsafe impl<B: MemoryBackend> DeviceMemoryMut for DeviceAllocation<B> {}

impl<B: MemoryBackend> Drop for DeviceAllocation<B> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            let uses = std::mem::take(self.uses.get_mut().unwrap_or_else(|p| p.into_inner()));
            let after = uses.into_iter().map(|(_, event)| event).collect();
            self.owner.release(block, &self.stream, after);
        }
    }
}

/// An allocation borrowed for work on one stream; see [`DeviceAllocation::use_on`].
pub struct StreamUse<'a, B: MemoryBackend> {
    allocation: &'a DeviceAllocation<B>,
    stream: Stream<B>,
    event: Option<Event<B>>,
}

impl<B: MemoryBackend> fmt::Debug for StreamUse<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamUse({:?} on {:?})", self.allocation, self.stream)
    }
}

// SAFETY: forwards the borrowed allocation's answers; the borrow keeps it alive.
unsafe impl<B: MemoryBackend> DeviceMemory for StreamUse<'_, B> {
    type B = B;
    fn len(&self) -> usize {
        self.allocation.len
    }
    fn device_ptr(&self) -> u64 {
        self.allocation.ptr
    }
    fn ordinal(&self) -> usize {
        self.allocation.ordinal
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
    fn owner(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        self.allocation.owner()
    }
}

impl<B: MemoryBackend> Drop for StreamUse<'_, B> {
    fn drop(&mut self) {
        let Some(event) = self.event.take() else { return };
        let device = self.allocation.owner.resource.device();
        if device.record_event(&event, &self.stream).is_ok() {
            let id = device.stream_id(&self.stream);
            let mut uses = self.allocation.uses.lock().unwrap_or_else(|p| p.into_inner());
            match uses.iter_mut().find(|(s, _)| id.is_some() && *s == id) {
                // Completes after the earlier use on this stream: keep only it.
                Some(slot) => slot.1 = event,
                None => {
                    if id.is_none() {
                        // Streams without ids cannot replace: drop what has completed.
                        uses.retain(|(_, e)| !device.event_is_complete(e).unwrap_or(false));
                    }
                    uses.push((id, event));
                }
            }
        } else {
            // No event, no later proof of completion: wait now instead.
            let _ = device.synchronize(&self.stream);
        }
    }
}

// ---- IPC --------------------------------------------------------------------------

/// A handle another process opens with [`open_ipc`] to reach an allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpcHandle {
    /// Backend of the exporting device.
    pub backend: BackendKind,
    /// Ordinal of the exporting device.
    pub ordinal: usize,
    /// What `handle` is, and what else opening it takes.
    pub kind: IpcKind,
    /// The driver's 64 bytes: an IPC memory handle, or a pool block's export data.
    pub handle: IpcBytes,
    /// Offset of the exported block from the address `handle` opens as.
    pub offset: u64,
    /// Length of the exported block in bytes.
    pub len: usize,
}

/// The two kinds of [`IpcHandle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IpcKind {
    /// `handle` is the driver's IPC memory handle (`cuIpcGetMemHandle`,
    /// `hipIpcGetMemHandle`) of the allocation holding the block, which
    /// starts `offset` bytes into it: memory of [`PlainResource`] and
    /// [`CachingPool`](super::CachingPool).
    #[default]
    Memory,
    /// `handle` is the block's export data (`cuMemPoolPtrExportData`,
    /// `hipMemPoolPtrExportData`) from a pool of
    /// [`NativePoolResource::shareable`]; the pool itself is reached through
    /// descriptor `fd` of process `pid` (see [`crate::memory::ipc`]).
    PoolBlock {
        /// The exporting process.
        pid: u32,
        /// The pool's file descriptor in that process.
        fd: i32,
        /// The pool's number in that process (imported once per exporter and pool).
        pool: u64,
    },
}

impl IpcHandle {
    /// A printable form, for environment variables, pipes or files:
    /// `backend:ordinal:offset:len:hex` for [`IpcKind::Memory`] (as before
    /// pool handles existed), followed by `:pool:pid:fd:pool-id` for
    /// [`IpcKind::PoolBlock`] (which an older parser rejects rather than misreads).
    pub fn to_text(&self) -> String {
        let hex: String = self.handle.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{}:{}:{}:{}:{hex}", self.backend, self.ordinal, self.offset, self.len);
        match self.kind {
            IpcKind::Memory => text,
            IpcKind::PoolBlock { pid, fd, pool } => format!("{text}:pool:{pid}:{fd}:{pool}"),
        }
    }

    /// Parses [`to_text`](Self::to_text)'s output; anything else is
    /// [`Error::InvalidArgument`] saying what is wrong.
    pub fn from_text(text: &str) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidArgument { name: "IPC handle", reason: reason.to_string() };
        let parts: Vec<&str> = text.trim().split(':').collect();
        let (common, kind) = match parts[..] {
            [_, _, _, _, _] => (&parts[..], None),
            [_, _, _, _, _, "pool", pid, fd, pool] => (&parts[..5], Some((pid, fd, pool))),
            [_, _, _, _, _, kind, _, _, _] => {
                return Err(bad(&format!("unknown handle kind {kind:?}; the one kind after the hex is \"pool\"")))
            }
            _ => {
                return Err(bad("expected backend:ordinal:offset:len:hex, optionally followed by :pool:pid:fd:pool-id"))
            }
        };
        let &[backend, ordinal, offset, len, hex] = common else { unreachable!("five parts matched above") };
        let backend =
            BackendKind::ALL.into_iter().find(|b| b.name() == backend).ok_or_else(|| bad("unknown backend name"))?;
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad("offset, ordinal and length must be integers"));
        if hex.len() != 128 || !hex.is_ascii() {
            return Err(bad("the handle must be 128 hex digits"));
        }
        let mut handle = [0u8; 64];
        for (i, byte) in handle.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad("the handle must be hex"))?;
        }
        let kind = match kind {
            None => IpcKind::Memory,
            Some((pid, fd, pool)) => IpcKind::PoolBlock {
                pid: pid.parse().ok().filter(|&p| p > 0).ok_or_else(|| bad("the pid must be a positive integer"))?,
                fd: fd.parse().ok().filter(|&f| f >= 0).ok_or_else(|| bad("the fd must be a non-negative integer"))?,
                pool: pool.parse().map_err(|_| bad("the pool id must be an integer"))?,
            },
        };
        Ok(IpcHandle {
            backend,
            ordinal: num(ordinal)? as usize,
            kind,
            handle,
            offset: num(offset)?,
            len: num(len)? as usize,
        })
    }
}

/// Device memory of another process, opened from an [`IpcHandle`]; closed on drop.
pub struct IpcMemory<B: MemoryBackend> {
    device: Arc<B::Device>,
    ptr: u64,
    len: usize,
    opened: Opened,
}

/// What [`open_ipc`] did, to undo on drop.
enum Opened {
    /// `ipc_import` mapped the allocation at `base`.
    Memory { base: u64 },
    /// `open_pool_block` mapped a block of an imported pool at `ptr`.
    PoolBlock { key: PoolKey, ptr: u64 },
}

impl<B: MemoryBackend> fmt::Debug for IpcMemory<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcMemory({:#x}, {} bytes)", self.ptr, self.len)
    }
}

/// Opens an [`IpcHandle`] exported by another process.
///
/// The returned memory must not be used by work that is still queued when
/// it is dropped (closing unmaps it); synchronize first. A pool block must
/// be closed here before the exporter frees it, and opening one takes the
/// pool's descriptor out of the exporter ([`crate::memory::ipc`] says what
/// that needs).
pub fn open_ipc<B: MemoryBackend>(device: &Arc<B::Device>, handle: &IpcHandle) -> Result<IpcMemory<B>> {
    let info = device.info();
    if handle.backend != info.backend || handle.ordinal != info.ordinal {
        return Err(Error::DeviceMismatch {
            what: "IPC handle",
            expected: info.spec(),
            found: format!("{}:{}", handle.backend, handle.ordinal),
        });
    }
    let (at, opened) = match handle.kind {
        IpcKind::Memory => {
            let base = device.ipc_import(&handle.handle)?;
            (base, Opened::Memory { base })
        }
        IpcKind::PoolBlock { .. } => {
            let (ptr, key) = open_pool_block(device.as_ref(), handle)?;
            (ptr, Opened::PoolBlock { key, ptr })
        }
    };
    Ok(IpcMemory { device: device.clone(), ptr: at + handle.offset, len: handle.len, opened })
}

// SAFETY: `ptr..ptr+len` lies in the mapping `opened` keeps open until drop.
unsafe impl<B: MemoryBackend> DeviceMemory for IpcMemory<B> {
    type B = B;
    fn len(&self) -> usize {
        self.len
    }
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn ordinal(&self) -> usize {
        self.device.info().ordinal
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
}

// SAFETY: an `IpcMemory` is not `Clone`. Its memory is GPU device memory (the
// host backend has no IPC), which safe code reaches only through driver
// copies, never through Rust references, so another opening of the same
// handle cannot alias a reference.
unsafe impl<B: MemoryBackend> DeviceMemoryMut for IpcMemory<B> {}

impl<B: MemoryBackend> Drop for IpcMemory<B> {
    fn drop(&mut self) {
        let _ = match self.opened {
            // SAFETY: `base` came from `ipc_import` on this device and is closed
            // once, here; the type's contract says no queued work uses it any more.
            Opened::Memory { base } => unsafe { self.device.ipc_close(base) },
            // SAFETY: `key` and `ptr` came from one `open_pool_block` on this
            // device and are closed once, here; no queued work uses the block (as above).
            Opened::PoolBlock { key, ptr } => unsafe { close_pool_block(self.device.as_ref(), key, ptr) },
        };
    }
}

// ---- driver-backed resources ----------------------------------------------------------

/// The backend's plain allocator (`cuMemAlloc`/`cuMemFree`): no caching.
pub struct PlainResource<B: MemoryBackend> {
    device: Arc<B::Device>,
}

impl<B: MemoryBackend> PlainResource<B> {
    /// A resource allocating straight from `device`.
    pub fn new(device: Arc<B::Device>) -> Self {
        PlainResource { device }
    }
}

impl<B: MemoryBackend> fmt::Debug for PlainResource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PlainResource({})", self.device.info().spec())
    }
}

impl<B: MemoryBackend> MemoryResource<B> for PlainResource<B> {
    fn device(&self) -> &Arc<B::Device> {
        &self.device
    }
    fn name(&self) -> &'static str {
        "plain"
    }
    fn allocate(&self, bytes: usize, _stream: &Stream<B>) -> Result<Block<B>> {
        let buffer = self.device.alloc(bytes)?;
        Ok(Block { ptr: buffer.device_ptr(), len: bytes, token: 0, buffer: Some(buffer) })
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) {
        // A synchronous free must not overtake queued work: wait for it.
        for event in &after {
            let _ = self.device.synchronize_event(event);
        }
        let _ = self.device.synchronize(stream);
        drop(block);
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
pub struct NativePoolResource<B: MemoryBackend> {
    device: Arc<B::Device>,
    /// The pool of [`shareable`](Self::shareable); `None`: the default pool.
    own: Option<ShareablePool<B>>,
}

impl<B: MemoryBackend> NativePoolResource<B> {
    /// Uses `device`'s default stream-ordered pool. `release_threshold`
    /// (bytes kept cached across synchronizations; the driver's default is 0,
    /// which returns everything at every sync) is set when given.
    pub fn new(device: Arc<B::Device>, release_threshold: Option<u64>) -> Result<Self> {
        if let Some(bytes) = release_threshold {
            device.set_native_pool_release_threshold(bytes)?;
        }
        Ok(NativePoolResource { device, own: None })
    }

    /// Creates a stream-ordered pool of `device` for this resource alone
    /// (`cuMemPoolCreate`/`hipMemPoolCreate`: pinned device memory,
    /// exportable as a POSIX file descriptor), with `release_threshold` set
    /// when given, and allocates from it (`cuMemAllocFromPoolAsync`,
    /// `hipMallocFromPoolAsync`). Its blocks can be exported with
    /// [`Allocator::ipc_handle`] and opened in another process with
    /// [`open_ipc`] (Linux; [`crate::memory::ipc`] says what that needs).
    ///
    /// The pool is destroyed, after synchronizing the device, when the
    /// resource is dropped; handles of its blocks cannot be opened after that.
    /// [`Error::Unsupported`] where the device or driver has no such pools.
    pub fn shareable(device: Arc<B::Device>, release_threshold: Option<u64>) -> Result<Self> {
        let own = ShareablePool::new(device.clone(), release_threshold)?;
        Ok(NativePoolResource { device, own: Some(own) })
    }
}

impl<B: MemoryBackend> fmt::Debug for NativePoolResource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.own {
            None => write!(f, "NativePoolResource({})", self.device.info().spec()),
            Some(pool) => write!(f, "NativePoolResource({}, {pool:?})", self.device.info().spec()),
        }
    }
}

impl<B: MemoryBackend> MemoryResource<B> for NativePoolResource<B> {
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
        Ok(Block { ptr: buffer.device_ptr(), len: bytes, token: 0, buffer: Some(buffer) })
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) {
        // The free is ordered on `stream`; make it wait for the other streams' uses.
        for event in &after {
            if self.device.wait_event(stream, event).is_err() {
                let _ = self.device.synchronize_event(event);
            }
        }
        drop(block);
        drop(after);
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
        match &self.own {
            None => self.device.trim_native_pool(0),
            Some(pool) => pool.trim(0),
        }
    }
}
