//! A stream-ordered caching pool of our own, generic over a tiny [`Storage`]
//! trait (after cubecl's `ComputeStorage`): the pool never sees a driver, so
//! it is tested for real on the host backend.
//!
//! ## How blocks move
//! - Requests are rounded up to 512 bytes. Requests up to 1 MiB ("small")
//!   are cut from 2 MiB segments, larger ones from 20 MiB segments (up to
//!   10 MiB) or from segments of their own size rounded to 2 MiB, so small
//!   blocks never fragment large segments (PyTorch's split).
//! - A free block is tagged with the stream it was freed on and kept in that
//!   stream's free list, or tagged *any stream* in the shared list.
//! - An allocation on stream S looks, best fit, in S's list (reuse without
//!   synchronization: stream order already puts the new work after the old),
//!   then in the shared list, then polls pending fences, then fences the
//!   other streams' lists and polls once more, then grows.
//! - **Fencing** is the only way a block leaves a stream's list for the
//!   shared one: an event is recorded on that stream, the blocks wait in the
//!   pending list, and they join the shared list when the event has
//!   completed. A block used on several streams ([`StreamUse`](super::StreamUse))
//!   goes to the pending list when freed, with every use's event. So a block
//!   is never handed to a stream before events show its last uses complete.
//! - A block freed on its own stream first goes, whole, to that stream's
//!   small cache of recent blocks (8), where a request of its size on the
//!   same stream takes it back without touching the best-fit set; the cache's
//!   oldest block moves on to the set when it is full, and fencing empties it.
//! - Freed neighbours with the same tag merge; a segment whose single free
//!   block is in the shared list can go back to the storage.
//! - On out-of-memory (the storage's or the pool's own `size_limit`) the pool
//!   fences every list, waits for the pending events, releases every free
//!   segment, and retries once; then it returns [`Error::OutOfMemory`].
//! - Above `release_threshold` reserved bytes, a free releases free segments
//!   (and fences its stream's list so the next one can).
//! - With `PoolConfig::expandable` (`GPUPORT_POOL=expandable`), new memory
//!   is mapped at the end of one growable segment per size class instead,
//!   and trimming unmaps its free tail (`expandable.rs`).
//!
//! ## Streams come and go
//! A borrowed stream (another library's handle, `Device::stream_is_borrowed`)
//! may be destroyed by its owner while its list holds blocks: its list is
//! never fenced by naming it. Its blocks serve that stream again (as CuPy's
//! own pool does) and reach other streams only at `trim`, `reset`, an
//! out-of-memory retry or retirement, after one device-wide synchronization.
//!
//! A stream's free list holds a handle on the stream, to record fences on
//! it, so the pool must not keep lists of streams their users dropped (each
//! would live on: a driver stream, or a host worker thread). A list lives
//! only while it holds blocks: fencing empties it and drops it with its
//! handle. When a new stream's list is made and there are many, lists of
//! streams that look gone (unused lately, and idle) are fenced and dropped,
//! and past a hard bound the least recently used one is; [`CachingPool::trim`]
//! and `reset` drop them all. A retired stream's blocks join the shared list
//! once the event recorded on it before its handle went has completed.
//! (The backend cannot yet tell the pool that it holds a stream's last
//! handle; with that, the pool would retire a list the moment its stream is
//! otherwise dropped.)
//!
//! ## Stream capture
//! An allocation on a capturing stream comes from the capture's graph pool,
//! memory nobody else gets while the graph lives (`graph_pools.rs`). A free
//! of an ordinary block on a capturing stream is held back, without any
//! driver call, and done once the stream no longer captures (at the pool's
//! next allocation, free or trim): fencing records events, which a capture
//! would record into the graph instead of on the stream. Fencing likewise
//! skips a capturing stream's list and every graph pool's list. So a
//! capture never sees the pool's events, and the pool's bookkeeping never
//! sees a captured one. (`docs/design.md#graphs`)
//! Asking a GPU driver whether a stream captures costs more than a cached
//! allocation; it is skipped while gpuport runs no capture and no stream
//! handle has left gpuport (`backend/gpu/stream.rs`, `surely_not_capturing`).
//!
//! ## Trust
//! Every block goes back only to the pool that handed it out: blocks carry
//! the pool's [`ResourceId`] and a serial number the pool
//! records, and `deallocate` refuses, freeing nothing, a block whose id,
//! serial, address or length do not match a live block
//! ([`MemoryError::ForeignBlock`]). A
//! segment from the [`Storage`] shorter than asked for, or of another
//! device, is refused before any block is cut from it.

mod chain;
mod config;
mod expandable;
mod free;
mod graph_pools;
mod observed;
mod state;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::backend::{check_alloc_size, Device, DeviceMemory, Event, GrowableRange, MemoryDevice, Stream};
use crate::error::{Error, GraphErrorKind, Result};

use super::block::{Block, MemoryError, ResourceId};
use super::history;
use super::no_wait::{self, waiting_refused};
use super::pinned::{PinnedFlags, PinnedMemory, PinnedPool};
pub use super::report::{BlockReport, BlockState, Expandable, PoolCounters, PoolReport, SegmentReport};
use super::resource::MemoryResource;
use crate::backend::Backend;
use chain::{
    HandedOut, Node, NodeState, SegmentEntry, ANY, LARGE_EXACT_ABOVE, LARGE_ROUND, LARGE_SEGMENT, MAX_RESERVED, NONE,
    ROUND, SMALL_MAX, SMALL_SEGMENT,
};
pub use config::PoolConfig;
use state::{st_ordinal, State};

/// Where a pool gets its memory: allocate a segment; dropping it frees it.
///
/// # Safety
/// The pool cuts blocks from each segment and hands them out as memory no
/// one else uses. So every segment `alloc` returns must be memory of
/// [`device`](Self::device) that nothing else uses (no other segment, no
/// other owner) and that stays valid until the segment is dropped. (The
/// pool checks a segment's length and device; it cannot check the rest.)
pub unsafe trait Storage<B: Backend>: Send + Sync + fmt::Debug + 'static {
    /// A segment of device memory, freed when dropped.
    type Segment: DeviceMemory<B = B>;
    /// The device.
    fn device(&self) -> &Arc<B::Device>;
    /// Allocates a segment of `bytes`; [`Error::OutOfMemory`] when the device is full.
    fn alloc(&self, bytes: usize) -> Result<Self::Segment>;
    /// Reserves a growable range of `bytes` for expandable segments (the
    /// device's, by default); the contract above holds for its mapped part.
    fn reserve_growable(&self, bytes: usize) -> Result<Box<dyn GrowableRange>> {
        self.device().reserve_growable(bytes)
    }
}

/// Segments from the device's plain allocator (`cuMemAlloc`).
pub struct DeviceStorage<B: Backend> {
    device: Arc<B::Device>,
}

impl<B: Backend> DeviceStorage<B> {
    /// Storage on `device`.
    pub fn new(device: Arc<B::Device>) -> Self {
        DeviceStorage { device }
    }
}

impl<B: Backend> fmt::Debug for DeviceStorage<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceStorage({})", self.device.info().spec())
    }
}

// SAFETY: each segment is a buffer fresh from the device's allocator, owned
// by the segment alone and freed when it is dropped.
unsafe impl<B: Backend> Storage<B> for DeviceStorage<B> {
    type Segment = crate::backend::Buffer<B>;
    fn device(&self) -> &Arc<B::Device> {
        &self.device
    }
    fn alloc(&self, bytes: usize) -> Result<Self::Segment> {
        self.device.alloc(bytes)
    }
}

/// A caching, stream-ordered pool; see the [module docs](self).
///
/// `repr(C)`: what every allocation and free reads comes first, then the
/// state's lock and its hot fields (`state.rs` says which).
#[repr(C)]
pub struct CachingPool<B: Backend, S: Storage<B> = DeviceStorage<B>> {
    storage: S,
    id: ResourceId,
    /// The number of frees held back (`held_back`).
    held_back_count: std::sync::atomic::AtomicUsize,
    /// Graph pools whose graphs went since the last reclaim (`graph_pools.rs`).
    graphs_gone: Arc<std::sync::atomic::AtomicUsize>,
    config: PoolConfig,
    state: Mutex<State<B, S::Segment>>,
    /// Frees made on capturing streams, held back until those streams stop
    /// capturing (see the module docs).
    held_back: Mutex<Vec<HeldBack<B>>>,
    pinned: PinnedPool<B>,
}

/// A free made on a capturing stream: the block, its stream and its events.
type HeldBack<B> = (Block<B>, Stream<B>, Vec<Event<B>>);

/// Whether `stream` is capturing (a failed query counts as not).
fn capturing<B: Backend>(device: &B::Device, stream: &Stream<B>) -> bool {
    device.capture_status(stream).map(|s| s.is_capturing()).unwrap_or(false)
}

impl<B: Backend> CachingPool<B> {
    /// A pool over `device`'s plain allocator.
    pub fn new(device: Arc<B::Device>, config: PoolConfig) -> Self {
        Self::with_storage(DeviceStorage::new(device), config)
    }
}

impl<B: Backend, S: Storage<B>> CachingPool<B, S> {
    /// A pool over any storage.
    pub fn with_storage(storage: S, config: PoolConfig) -> Self {
        let pinned = PinnedPool::new(storage.device().clone(), config.pinned_cache);
        let mut state = State::new();
        if config.expandable {
            expandable::reserve_ranges(&storage, &config, &mut state);
        }
        CachingPool {
            storage,
            config,
            id: ResourceId::new(),
            pinned,
            state: Mutex::new(state),
            held_back: Mutex::new(Vec::new()),
            held_back_count: Default::default(),
            graphs_gone: Default::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// The pool's pinned host pool.
    pub fn pinned_pool(&self) -> &PinnedPool<B> {
        &self.pinned
    }

    /// Runs `f` on the state under the pool's lock. Stream handles the pool
    /// let go of meanwhile (`State::released`) are dropped after the lock
    /// is: dropping a stream's last handle may wait for its queued work (a
    /// host stream joins its worker), which must not hold up other threads'
    /// allocations. (If `f` panics they stay in `released`, for the next
    /// call to drop.) A closure rather than a guard with a `Drop`: the
    /// guard's drop was not inlined, and cost a call and two branches on
    /// every allocation and free.
    #[inline(always)]
    fn locked<R>(&self, f: impl FnOnce(&mut State<B, S::Segment>) -> R) -> R {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let r = f(&mut st);
        if !st.released.is_empty() {
            Self::unlock_then_release(st);
        }
        r
    }

    #[cold]
    #[inline(never)]
    fn unlock_then_release(mut st: MutexGuard<'_, State<B, S::Segment>>) {
        let released = std::mem::take(&mut st.released);
        drop(st);
        drop(released);
    }

    fn dev(&self) -> &B::Device {
        self.storage.device()
    }

    /// Fences every stream's free list (and lets go of the pool's handles on
    /// those streams), waits for every pending fence, and releases free
    /// segments until at most `keep` bytes stay reserved.
    pub fn trim(&self, keep: usize) -> Result<()> {
        self.free_held_back();
        self.locked(|st| {
            st.fence_all(self.dev());
            st.wait_pending(self.dev());
            st.release_free_segments(keep);
        });
        Ok(())
    }

    /// A usage and fragmentation report.
    pub fn report(&self) -> PoolReport {
        self.locked(|st| st.report())
    }

    /// A new plain segment for `size` bytes of the class, allocated for
    /// stream `stream` (its id, 0 for none); returns its one node (pending,
    /// out of every list, for `hand_out`).
    fn grow(&self, st: &mut State<B, S::Segment>, size: usize, small: bool, stream: u64) -> Result<u32> {
        let mut seg_size = if small {
            SMALL_SEGMENT
        } else if size <= LARGE_EXACT_ABOVE {
            LARGE_SEGMENT
        } else {
            size.div_ceil(LARGE_ROUND).saturating_mul(LARGE_ROUND)
        };
        let ordinal = st_ordinal(self.dev());
        let oom = || Error::OutOfMemory { backend: <B as crate::backend::Backend>::KIND, ordinal, bytes: size };
        if let Some(limit) = self.config.size_limit {
            if st.reserved.saturating_add(seg_size) > limit {
                // Fall back to a segment of exactly the request before giving up.
                seg_size = size;
                if st.reserved.saturating_add(seg_size) > limit {
                    return Err(oom());
                }
            }
        }
        // Node and segment indices are u32s below NONE while the pool holds
        // at most MAX_RESERVED bytes (checked here, once per segment).
        if st.reserved.saturating_add(seg_size) > MAX_RESERVED {
            return Err(oom());
        }
        let seg = self.storage.alloc(seg_size)?;
        // Blocks are cut from `seg_size` bytes: a shorter segment (or one of
        // another device) would hand out memory the segment does not own.
        if seg.len() < seg_size || seg.ordinal() != ordinal || seg.device_ptr().checked_add(seg_size as u64).is_none() {
            let reason = format!(
                "asked for a segment of {seg_size} bytes of device {ordinal}, got {} bytes at {:#x} of device {}",
                seg.len(),
                seg.device_ptr(),
                seg.ordinal()
            );
            return Err(MemoryError::ContractViolation { resource: "caching-pool storage", reason }.into());
        }
        st.counters.segments_allocated += 1;
        st.reserved += seg_size;
        let base = seg.device_ptr();
        let seg_index = st.segment_slot();
        let node = st.new_node(Node {
            seg: seg_index,
            offset: 0,
            size: seg_size,
            prev: NONE,
            next: NONE,
            small,
            state: NodeState::Pending,
        });
        st.segments[seg_index as usize] =
            Some(SegmentEntry { _memory: Some(seg), base, size: seg_size, first: node, graph: 0, stream });
        if history::recording() {
            history::record_segment(history::Action::SegmentAlloc, self.history_key(), base, seg_size, stream);
        }
        Ok(node)
    }

    /// `allocate` under the lock: the node handed out for `bytes` (`size`
    /// rounded), for `allocate` to make the block.
    fn allocate_locked(
        &self,
        st: &mut State<B, S::Segment>,
        bytes: usize,
        size: usize,
        stream: &Stream<B>,
    ) -> Result<HandedOut> {
        let small = size <= SMALL_MAX;
        let device = self.dev();
        let tag = device.stream_id(stream);
        st.clock += 1;
        if self.config.validate {
            st.validate();
        }
        // 1. The same stream's blocks: stream order makes reuse safe.
        if let Some(t) = tag {
            if let Some(l) = st.list_of(t) {
                st.touch(l);
                if let Some(n) = st.take_recent(l, size, small) {
                    st.counters.same_stream_reuses += 1;
                    return Ok(st.hand_out(n, size, bytes, t));
                }
            }
            // Then the set; if nothing fits, the cached blocks merged into it
            // (an expandable class merges them first: `expandable.rs` says why).
            st.merge_cached_if_expandable(t, small);
            let mut n = st.take_best(t, size, small);
            if n.is_none() && st.list_of(t).is_some_and(|l| st.flush_recent(l)) {
                n = st.take_best(t, size, small);
            }
            if let Some(n) = n {
                st.counters.same_stream_reuses += 1;
                return Ok(st.hand_out(n, size, bytes, t));
            }
        }
        // 2. Blocks every stream may use (their events have completed).
        if let Some(n) = st.take_best(ANY, size, small) {
            st.counters.shared_reuses += 1;
            return Ok(st.hand_out(n, size, bytes, ANY));
        }
        // 3. Fences that completed since, then fence the other streams' lists.
        for fence_others in [false, true] {
            if fence_others {
                for l in 1..st.lists.len() {
                    if Some(st.lists[l].tag) != tag {
                        st.fence(device, l);
                    }
                }
                st.prune_empty_lists();
            }
            if !st.pending.is_empty() && st.poll_pending(device) {
                if let Some(n) = st.take_best(ANY, size, small) {
                    st.counters.shared_reuses += 1;
                    return Ok(st.hand_out(n, size, bytes, ANY));
                }
            }
        }
        // 4. New memory; on out-of-memory release everything free and retry once.
        let node = match self.grow_or_expand(st, size, small, tag) {
            Ok(n) => n,
            // The retry waits for device work: not inside `without_waiting`.
            Err(Error::OutOfMemory { .. }) if waiting_refused() => return Err(no_wait::refused(self.name())),
            Err(Error::OutOfMemory { .. }) => {
                st.counters.oom_retries += 1;
                st.fence_all(device);
                st.wait_pending(device);
                if let Some(n) = st.take_best(ANY, size, small) {
                    st.counters.shared_reuses += 1;
                    return Ok(st.hand_out(n, size, bytes, ANY));
                }
                st.release_free_segments(0);
                match self.grow_or_expand(st, size, small, tag) {
                    Ok(n) => n,
                    Err(e) => {
                        st.counters.oom_failures += 1;
                        return Err(e);
                    }
                }
            }
            Err(e) => return Err(e),
        };
        // The new segment's block is filed under the caller's stream (or the
        // shared list for a backend without stream ids).
        let t = match tag {
            Some(t) => {
                let l = st.list_for(device, t, stream);
                st.touch(l);
                t
            }
            None => ANY,
        };
        Ok(st.hand_out(node, size, bytes, t))
    }
}

impl<B: Backend, S: Storage<B>> Drop for CachingPool<B, S> {
    fn drop(&mut self) {
        // Blocks freed on a stream may still be in use by its queued work;
        // wait for it before the segments go (with the state, below).
        let device = self.storage.device().clone();
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        st.fence_all(&device);
        st.wait_pending(&device);
        // A graph that is still alive replays into its pool's segments: they
        // go to the graph's hold, freed when the graph goes, not under it.
        for g in &st.graph_pools {
            let mut orphans = g.orphans.lock().unwrap_or_else(|p| p.into_inner());
            for slot in &mut st.segments {
                if slot.as_ref().is_some_and(|seg| seg.graph == g.serial) {
                    if let Some(seg) = slot.take() {
                        orphans.push(Box::new(seg));
                    }
                }
            }
        }
    }
}

impl<B: Backend, S: Storage<B>> fmt::Debug for CachingPool<B, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (reserved, in_use) = self.locked(|st| (st.reserved, st.in_use));
        write!(f, "CachingPool({:?}, {reserved} reserved, {in_use} in use)", self.storage)
    }
}

// SAFETY: blocks are cut from segments the `Storage` contract gives the pool
// alone, and checked for length and device when they arrive (`grow`). A
// node is handed out only from the free state, and goes back to a free list
// only through `deallocate`, which refuses anything but the live block it
// handed out (resource id, serial, address, length). A block freed on its
// own stream with no foreign uses is reused on that stream only (stream
// order); everything else reaches other streams only through fences, whose
// events were recorded after the free (and after every foreign use). Whole
// segments are released only when free in the shared list, so `reset` and
// `trim` never free live memory; the pool outlives its blocks, and its drop
// waits for pending fences before the segments go.
unsafe impl<B: Backend, S: Storage<B>> MemoryResource<B> for CachingPool<B, S> {
    fn device(&self) -> &Arc<B::Device> {
        self.storage.device()
    }

    fn name(&self) -> &'static str {
        "caching-pool"
    }

    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> Result<Block<B>> {
        check_alloc_size(bytes)?;
        let no_wait = waiting_refused();
        if no_wait && self.upkeep_due() {
            return Err(no_wait::refused(self.name()));
        }
        self.reclaim_graph_pools();
        // No gpuport capture begins or ends on the stream from the capture
        // check to the hand-out (a capture's first allocation gives its graph
        // the pool's hold). The gate comes before the pool's lock, always.
        let _section = match no_wait {
            false => crate::backend::graph::capture_section::<B>(stream),
            true => {
                crate::backend::graph::try_capture_section::<B>(stream).ok_or_else(|| no_wait::refused(self.name()))?
            }
        };
        let capture = match self.dev().capture_id(stream) {
            Ok(capture) => capture,
            Err(e) if capturing::<B>(self.dev(), stream) => {
                return Err(Error::Graph {
                    backend: <B as crate::backend::Backend>::KIND,
                    op: "allocate",
                    kind: GraphErrorKind::PoolAllocation,
                    reason: format!(
                        "the stream is capturing, and the runtime cannot say which capture ({e}), so the caching \
                         pool cannot give it memory of its own; allocate before the capture, and keep the \
                         memory as long as the graph"
                    ),
                });
            }
            Err(_) => None,
        };
        self.free_held_back();
        let size = bytes.checked_next_multiple_of(ROUND).ok_or_else(|| Error::InvalidArgument {
            name: "bytes",
            reason: format!("{bytes} bytes cannot be rounded up to {ROUND}"),
        })?;
        // Not `locked`, which copies its result out after the unlock: here
        // the block goes straight to the return slot before the guard drops,
        // and the unlock's atomic swap commits those stores. The caller copies
        // the block with wider loads than they are; from stores still in
        // flight, that stalls (store forwarding fails), ~5 ns an allocation.
        let mut st = match no_wait {
            false => self.state.lock().unwrap_or_else(|p| p.into_inner()),
            // A capture's allocation takes the graph-pool path: not here.
            true if capture.is_some() => return Err(no_wait::refused(self.name())),
            true => match self.state.try_lock() {
                Ok(st) => st,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return Err(no_wait::refused(self.name())),
            },
        };
        if !st.graph_pools.is_empty() {
            st.note_capture_of(self.dev().stream_id(stream).unwrap_or(0), capture);
        }
        let handed_out = match capture {
            // An invalidated capture never becomes a graph: nothing will
            // replay into the block, so it needs no graph pool.
            Some(_) if self.dev().capture_status(stream).is_ok_and(|c| c == crate::CaptureStatus::Invalidated) => {
                self.allocate_locked(&mut st, bytes, size, stream)
            }
            None => self.allocate_locked(&mut st, bytes, size, stream),
            Some(capture) => self.allocate_in_capture(&mut st, bytes, size, stream, capture),
        };
        let h = match handed_out {
            Ok(h) => {
                st.tally.allocated(bytes);
                // The history's record runs with no lock or capture section
                // held (its frame source may run foreign code); the block is
                // handed out already.
                let record = history::recording();
                if record || !st.released.is_empty() {
                    Self::unlock_then_release(st);
                }
                if record {
                    drop(_section);
                    self.record_block(history::Action::Alloc, h.ptr, bytes, stream);
                }
                h
            }
            Err(e) => {
                // The observers may ask the pool for its report: unlocked first.
                Self::unlock_then_release(st);
                if no_wait::would_wait(&e) {
                    return Err(e);
                }
                return Err(self.out_of_memory_observed(e, bytes, stream, capture.is_some()));
            }
        };
        // SAFETY: node `h.token` is `size >= bytes` bytes at `h.ptr` of a live
        // segment of this pool's device (its length and device checked in
        // `grow`), just marked allocated under serial `h.serial`: no other
        // block covers it until this one comes back through `deallocate`,
        // which checks that serial, and segments are released only when
        // wholly free. The serial is new (`State::hand_out`, never repeated)
        // and below `SHARED_SERIAL`.
        Ok(unsafe { Block::with_serial(self.id, st_ordinal(self.dev()), h.ptr, bytes, h.token, h.serial) })
    }

    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()> {
        // Recording is rare: its free is out of line, and the common one
        // carries nothing across the free for it.
        if history::recording() {
            return self.deallocate_recorded(block, stream, after);
        }
        self.deallocate_block(block, stream, after, true)
    }

    fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<PinnedMemory<B>> {
        self.pinned.alloc(bytes, flags)
    }

    /// The driver's IPC memory handle, as the trait's default; memory of
    /// an expandable segment is refused ([`MemoryError::ExpandableIpc`]).
    fn ipc_export(&self, block: &Block<B>) -> Result<super::ipc_handle::IpcHandle> {
        self.ipc_export_unless_expandable(block)
    }

    fn reset(&self) -> Result<()> {
        self.trim(0)?;
        self.pinned.release();
        Ok(())
    }

    /// Fences every list, then polls the pending fences (without blocking,
    /// and without holding the lock between polls) until they have all
    /// completed or `patience` is over, and releases every free segment:
    /// blocks whose work is still queued then stay cached.
    fn release_cached(&self, patience: Duration) -> Result<()> {
        let deadline = Instant::now() + patience;
        self.locked(|st| st.fence_all(self.dev()));
        loop {
            let done = self.locked(|st| {
                st.poll_pending(self.dev());
                let done = st.pending.is_empty() || Instant::now() >= deadline;
                if done {
                    st.release_free_segments(0);
                }
                done
            });
            if done {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.pinned.release();
        Ok(())
    }

    fn report(&self) -> Option<PoolReport> {
        Some(CachingPool::report(self))
    }

    /// Counted under the pool's lock (`Tally` in src/memory/stats.rs):
    /// what passes through `allocate` and `deallocate`, as a
    /// [`StatisticsResource`](crate::memory::StatisticsResource) over the
    /// pool would count it.
    fn statistics(&self) -> Option<crate::memory::report::Statistics> {
        Some(self.locked(|st| st.tally.get()))
    }
}
