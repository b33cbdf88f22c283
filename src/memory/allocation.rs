//! The [`Allocator`] handle users hold on a [`MemoryResource`], the
//! [`DeviceAllocation`] it hands out, and [`StreamUse`], an allocation
//! borrowed for another stream.
//!
//! The allocator is where the resource's answers cross into safe code: it
//! checks every block against what was asked (length, device, address
//! range) before a `DeviceAllocation` exposes it, and a free the resource
//! refuses is recorded and its memory leaked, never freed twice.

use std::fmt;
use std::io::Write;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::{
    Buffer, Device, DeviceMemory, DeviceMemoryMut, Event, HostRegistration, MemoryInfo, MemoryKind, Stream,
};
use crate::error::{Error, Result};

use super::block::{Block, MemoryError};
use super::ipc_handle::IpcHandle;
use super::pinned::{PinnedFlags, PinnedMemory};
use super::report::{PoolReport, Statistics};
use super::resource::MemoryResource;
use crate::backend::Backend;

struct Deferred<B: Backend> {
    block: Block<B>,
    stream: Stream<B>,
    after: Vec<Event<B>>,
}

struct AllocatorInner<B: Backend> {
    resource: Arc<dyn MemoryResource<B>>,
    /// The ordinal of the resource's device (the same on every call: the
    /// resource's contract), read once.
    ordinal: usize,
    /// Live [`DeferCleanup`] guards.
    defer_depth: AtomicUsize,
    deferred: Mutex<Vec<Deferred<B>>>,
    /// Frees the resource refused (their memory is leaked), and the last reason.
    refused: AtomicUsize,
    last_refusal: Mutex<Option<String>>,
}

impl<B: Backend> AllocatorInner<B> {
    /// Gives `block` back to the resource, or holds it back while a
    /// [`DeferCleanup`] lives.
    #[inline]
    fn release(self: &Arc<Self>, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) {
        if self.defer_depth.load(Ordering::Acquire) > 0 {
            self.defer(block, stream, after);
        } else {
            self.deallocate(block, stream, after);
        }
    }

    /// [`release`](Self::release) while a guard may live. Out of line: inlined,
    /// it made every free copy the block piecewise (its padding in two
    /// overlapping moves), and reading such a copy back stalls store forwarding.
    #[cold]
    #[inline(never)]
    fn defer(self: &Arc<Self>, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) {
        let mut deferred = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
        // Checked again under the lock: the last guard decrements before
        // it drains, so nothing pushed here is left behind.
        if self.defer_depth.load(Ordering::Acquire) > 0 {
            deferred.push(Deferred { block, stream: stream.clone(), after });
            return;
        }
        drop(deferred);
        self.deallocate(block, stream, after);
    }

    /// Gives `block` back to the resource; a refusal (a resource that does
    /// not know its own block: a broken resource) is recorded and reported
    /// on stderr, and the memory is leaked: the block was dropped unfreed.
    #[inline]
    fn deallocate(self: &Arc<Self>, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) {
        if let Err(e) = self.resource.deallocate(block, stream, after) {
            self.refused_free(e);
        }
    }

    #[cold]
    #[inline(never)]
    fn refused_free(self: &Arc<Self>, e: Error) {
        // Inside `without_waiting`: made later, by its caller.
        if let Some((block, stream, after)) = super::no_wait::take_bounced::<B>().filter(|_| super::would_wait(&e)) {
            let inner = self.clone();
            return super::no_wait::refuse_free(Box::new(move || inner.deallocate(block, &stream, after)));
        }
        self.broken_free(&e);
    }

    #[cold]
    #[inline(never)]
    fn broken_free(&self, e: &Error) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let message = e.to_string();
        let _ = writeln!(std::io::stderr(), "gpuport: a free was refused, its memory is leaked: {message}");
        *self.last_refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(message);
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
pub struct Allocator<B: Backend> {
    inner: Arc<AllocatorInner<B>>,
}

impl<B: Backend> Clone for Allocator<B> {
    fn clone(&self) -> Self {
        Allocator { inner: self.inner.clone() }
    }
}

impl<B: Backend> fmt::Debug for Allocator<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Allocator({:?})", self.inner.resource)
    }
}

impl<B: Backend> Allocator<B> {
    /// Wraps a resource.
    pub fn new(resource: impl MemoryResource<B>) -> Self {
        Self::from_arc(Arc::new(resource))
    }

    /// Wraps a shared resource.
    pub fn from_arc(resource: Arc<dyn MemoryResource<B>>) -> Self {
        Allocator {
            inner: Arc::new(AllocatorInner {
                ordinal: resource.device().info().ordinal,
                resource,
                defer_depth: AtomicUsize::new(0),
                deferred: Mutex::new(Vec::new()),
                refused: AtomicUsize::new(0),
                last_refusal: Mutex::new(None),
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
    ///
    /// The resource's block is checked before it is handed out: a block
    /// shorter than `bytes`, of another device, or whose range wraps around
    /// the address space goes back to the resource, and the call fails with
    /// [`MemoryError::ContractViolation`].
    pub fn alloc(&self, bytes: usize, stream: &Stream<B>) -> Result<DeviceAllocation<B>> {
        let block = self.alloc_block(bytes, stream)?;
        Ok(DeviceAllocation {
            block: ManuallyDrop::new(block),
            len: bytes,
            stream: stream.clone(),
            uses: Mutex::new(Vec::new()),
            owner: self.inner.clone(),
        })
    }

    /// [`alloc`](Self::alloc)'s checked block without the allocation
    /// around it: for the allocator hooks, which keep blocks by address
    /// (`dynamic::memory::alloc_kept`; no stream or owner handle cloned per
    /// request) and give each back with [`release_block`](Self::release_block)
    /// on the same `stream`.
    #[inline]
    pub(crate) fn alloc_block(&self, bytes: usize, stream: &Stream<B>) -> Result<Block<B>> {
        let block = self.inner.resource.allocate(bytes, stream)?;
        let ordinal = self.inner.ordinal;
        if block.len() < bytes || block.ordinal() != ordinal || block.ptr().checked_add(block.len() as u64).is_none() {
            return Err(self.refuse_block(block, bytes, ordinal, stream));
        }
        Ok(block)
    }

    /// Gives back a block of [`alloc_block`](Self::alloc_block) in the
    /// order of `stream`, the stream it was allocated for, as dropping a
    /// [`DeviceAllocation`] used on its own stream only does (held back
    /// while a [`DeferCleanup`] lives; a refusal is recorded, as there).
    #[inline]
    pub(crate) fn release_block(&self, block: Block<B>, stream: &Stream<B>) {
        self.inner.release(block, stream, Vec::new());
    }

    /// [`alloc`](Self::alloc)'s answer to a block that breaks the resource's
    /// contract: the block goes back, and the error says what was wrong.
    #[cold]
    #[inline(never)]
    fn refuse_block(&self, block: Block<B>, bytes: usize, ordinal: usize, stream: &Stream<B>) -> Error {
        let resource = &self.inner.resource;
        let reason = if block.len() < bytes {
            format!("asked for {bytes} bytes, it returned a block of {}", block.len())
        } else if block.ordinal() != ordinal {
            format!("asked for memory of device {ordinal}, it returned a block of device {}", block.ordinal())
        } else {
            format!("its block {:#x} + {} bytes wraps around the address space", block.ptr(), block.len())
        };
        let name = resource.name();
        let _ = resource.deallocate(block, stream, Vec::new());
        MemoryError::ContractViolation { resource: name, reason }.into()
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
        if !Arc::ptr_eq(&allocation.owner, &self.inner)
            && !std::ptr::addr_eq(Arc::as_ptr(&allocation.owner.resource), Arc::as_ptr(&self.inner.resource))
        {
            return Err(Error::InvalidArgument {
                name: "allocation",
                reason: "it was allocated through another resource; export it through that one".into(),
            });
        }
        self.inner.resource.ipc_export(&allocation.block)
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

    /// How many frees through this handle the resource refused
    /// ([`MemoryError::ForeignBlock`]: a resource that did not know its own
    /// block). Their memory was leaked, not freed; each was also reported on
    /// stderr. Zero for a resource that keeps its contract.
    pub fn refused_frees(&self) -> usize {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// The message of the latest refused free, if any.
    pub fn last_refused_free(&self) -> Option<String> {
        self.inner.last_refusal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Holds frees back while alive; see [`Allocator::defer_cleanup`].
#[must_use = "frees are held back only while the guard lives"]
pub struct DeferCleanup<B: Backend> {
    inner: Arc<AllocatorInner<B>>,
}

impl<B: Backend> fmt::Debug for DeferCleanup<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeferCleanup(depth {})", self.inner.defer_depth.load(Ordering::Relaxed))
    }
}

impl<B: Backend> DeferCleanup<B> {
    /// Number of frees held back so far.
    pub fn held_back(&self) -> usize {
        self.inner.deferred.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl<B: Backend> Drop for DeferCleanup<B> {
    fn drop(&mut self) {
        if self.inner.defer_depth.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let drained = std::mem::take(&mut *self.inner.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        for d in drained {
            self.inner.deallocate(d.block, &d.stream, d.after);
        }
    }
}

// ---- allocations ------------------------------------------------------------------

/// Device memory from an [`Allocator`]; goes back to its resource when dropped.
///
/// Invariants: `block` is there until drop; `len <= block.len()`.
/// The allocation belongs to the stream it was allocated on: pass it directly
/// to work on that stream. For work on another stream, borrow it through
/// [`use_on`](Self::use_on), which records that use so the memory is not
/// reused before it completes.
pub struct DeviceAllocation<B: Backend> {
    /// The resource's block: its address and device are the allocation's.
    /// Taken out only in `drop`. (Not an `Option`, and nothing kept twice,
    /// so that the allocation stays small enough to move without a call.)
    block: ManuallyDrop<Block<B>>,
    /// Bytes requested (the block may be longer).
    len: usize,
    stream: Stream<B>,
    /// Events recorded after uses on other streams, with those streams' ids:
    /// at most one per stream that has an id.
    uses: Mutex<Vec<(Option<u64>, Event<B>)>>,
    owner: Arc<AllocatorInner<B>>,
}

impl<B: Backend> fmt::Debug for DeviceAllocation<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceAllocation({:#x}, {} bytes, {:?})", self.block.ptr(), self.len, self.stream)
    }
}

impl<B: Backend> DeviceAllocation<B> {
    /// The stream the memory was allocated on (and is freed on).
    pub fn stream(&self) -> &Stream<B> {
        &self.stream
    }

    /// The buffer behind the allocation, where its resource hands out whole
    /// buffers ([`PlainResource`](super::PlainResource),
    /// [`ManagedResource`](super::ManagedResource)); `None` for a block cut
    /// from a pool's segment.
    pub fn buffer(&self) -> Option<&Buffer<B>> {
        self.block.buffer()
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
        let same = matches!((device.stream_id(&self.stream), device.stream_id(stream)), (Some(a), Some(b)) if a == b);
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

// SAFETY: `ptr..ptr+len` is the resource's block (checked against the request
// in `Allocator::alloc`), which goes back to the resource only when this
// allocation is dropped.
unsafe impl<B: Backend> DeviceMemory for DeviceAllocation<B> {
    type B = B;
    fn len(&self) -> usize {
        self.len
    }
    fn device_ptr(&self) -> u64 {
        self.block.ptr()
    }
    fn ordinal(&self) -> usize {
        self.block.ordinal()
    }
    fn kind(&self) -> MemoryKind {
        self.block.buffer().map_or(MemoryKind::Device, |b| b.kind())
    }
    fn owner(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        self.block.buffer().and_then(|b| b.owner())
    }
}

// SAFETY: a `DeviceAllocation` is not `Clone`; its block is handed to no one
// else until it is dropped, and `use_on` borrows it.
unsafe impl<B: Backend> DeviceMemoryMut for DeviceAllocation<B> {}

impl<B: Backend> Drop for DeviceAllocation<B> {
    fn drop(&mut self) {
        let uses = self.uses.get_mut().unwrap_or_else(|p| p.into_inner());
        // Most allocations were used on their own stream only: no events.
        let after = if uses.is_empty() {
            Vec::new()
        } else {
            std::mem::take(uses).into_iter().map(|(_, event)| event).collect()
        };
        // SAFETY: the block is taken out once, here, and not used afterwards.
        let block = unsafe { ManuallyDrop::take(&mut self.block) };
        self.owner.release(block, &self.stream, after);
    }
}

/// An allocation borrowed for work on one stream; see [`DeviceAllocation::use_on`].
pub struct StreamUse<'a, B: Backend> {
    allocation: &'a DeviceAllocation<B>,
    stream: Stream<B>,
    event: Option<Event<B>>,
}

impl<B: Backend> fmt::Debug for StreamUse<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamUse({:?} on {:?})", self.allocation, self.stream)
    }
}

// SAFETY: forwards the borrowed allocation's answers; the borrow keeps it alive.
unsafe impl<B: Backend> DeviceMemory for StreamUse<'_, B> {
    type B = B;
    fn len(&self) -> usize {
        self.allocation.len
    }
    fn device_ptr(&self) -> u64 {
        self.allocation.device_ptr()
    }
    fn ordinal(&self) -> usize {
        self.allocation.ordinal()
    }
    fn kind(&self) -> MemoryKind {
        self.allocation.kind()
    }
    fn owner(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        self.allocation.owner()
    }
}

impl<B: Backend> Drop for StreamUse<'_, B> {
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
