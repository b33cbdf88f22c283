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

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{check_alloc_size, Device, DeviceMemory, Event, Stream};
use crate::error::{Error, Result};

use super::ext::MemoryBackend;
use super::pinned::{PinnedFlags, PinnedMemory, PinnedPool};
use super::resource::{Block, MemoryResource};

/// Where a pool gets its memory: allocate a segment; dropping it frees it.
pub trait Storage<B: MemoryBackend>: Send + Sync + fmt::Debug + 'static {
    /// A segment of device memory, freed when dropped.
    type Segment: DeviceMemory<B = B>;
    /// The device.
    fn device(&self) -> &Arc<B::Device>;
    /// Allocates a segment of `bytes`; [`Error::OutOfMemory`] when the device is full.
    fn alloc(&self, bytes: usize) -> Result<Self::Segment>;
}

/// Segments from the device's plain allocator (`cuMemAlloc`).
pub struct DeviceStorage<B: MemoryBackend> {
    device: Arc<B::Device>,
}

impl<B: MemoryBackend> DeviceStorage<B> {
    /// Storage on `device`.
    pub fn new(device: Arc<B::Device>) -> Self {
        DeviceStorage { device }
    }
}

impl<B: MemoryBackend> fmt::Debug for DeviceStorage<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceStorage({})", self.device.info().spec())
    }
}

impl<B: MemoryBackend> Storage<B> for DeviceStorage<B> {
    type Segment = crate::backend::Buffer<B>;
    fn device(&self) -> &Arc<B::Device> {
        &self.device
    }
    fn alloc(&self, bytes: usize) -> Result<Self::Segment> {
        self.device.alloc(bytes)
    }
}

/// Settings of a [`CachingPool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most bytes the pool may hold from its storage; `None`: no limit.
    pub size_limit: Option<usize>,
    /// Cached bytes above which frees return free segments to the storage.
    /// `usize::MAX` (the default) keeps everything cached.
    pub release_threshold: usize,
    /// Bytes kept for idle pinned buffers by the pool's pinned host pool.
    pub pinned_cache: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig { size_limit: None, release_threshold: usize::MAX, pinned_cache: 1 << 30 }
    }
}

const ROUND: usize = 512;
const SMALL_MAX: usize = 1 << 20;
const SMALL_SEGMENT: usize = 2 << 20;
const LARGE_SEGMENT: usize = 20 << 20;
const LARGE_EXACT_ABOVE: usize = 10 << 20;
const LARGE_ROUND: usize = 2 << 20;
/// Most blocks a stream's list keeps in its `recent` cache.
const RECENT_MAX: usize = 8;
/// Tag of blocks free for any stream.
const ANY: u64 = u64::MAX;
const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeState {
    Allocated {
        requested: usize,
    },
    Free {
        tag: u64,
    },
    /// Freed on stream `tag` and kept whole, unmerged, in that list's
    /// `recent` cache for the next request of its size.
    Cached {
        tag: u64,
    },
    Pending,
    Vacant,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    seg: u32,
    offset: usize,
    size: usize,
    prev: u32,
    next: u32,
    small: bool,
    state: NodeState,
}

struct SegmentEntry<Seg> {
    /// Owns the memory; dropping the entry frees it.
    _memory: Seg,
    base: u64,
    size: usize,
    first: u32,
}

struct FreeList<B: MemoryBackend> {
    tag: u64,
    /// The stream, kept to record fences on it (`None` for the shared list).
    stream: Option<Stream<B>>,
    /// (large class, size, node), ordered for best fit.
    set: BTreeSet<(bool, usize, u32)>,
    /// Blocks freed on this stream most recently (at most [`RECENT_MAX`],
    /// oldest first), handed out again whole to a request of their size
    /// without touching `set`: the common free-then-allocate-the-same-size
    /// cycle costs no tree updates and no split or merge.
    recent: Vec<u32>,
}

impl<B: MemoryBackend> FreeList<B> {
    fn new(tag: u64, stream: Option<Stream<B>>) -> Self {
        FreeList { tag, stream, set: BTreeSet::new(), recent: Vec::new() }
    }
}

struct Fence<B: MemoryBackend> {
    events: Vec<Event<B>>,
    nodes: Vec<u32>,
}

/// Counters of a pool's life, in its [`PoolReport`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Successful allocations.
    pub allocations: u64,
    /// Frees.
    pub frees: u64,
    /// Allocations served from the same stream's free list.
    pub same_stream_reuses: u64,
    /// Allocations served from blocks freed for any stream (after an event).
    pub shared_reuses: u64,
    /// Segments taken from the storage.
    pub segments_allocated: u64,
    /// Segments given back to the storage.
    pub segments_released: u64,
    /// Events recorded to move free blocks between streams.
    pub fences: u64,
    /// Out-of-memory events that released the cache and retried.
    pub oom_retries: u64,
    /// Requests refused with [`Error::OutOfMemory`] after the retry.
    pub oom_failures: u64,
}

struct State<B: MemoryBackend, Seg> {
    segments: Vec<Option<SegmentEntry<Seg>>>,
    vacant_segments: Vec<u32>,
    nodes: Vec<Node>,
    vacant_nodes: Vec<u32>,
    /// `lists[0]` is the shared list.
    lists: Vec<FreeList<B>>,
    pending: Vec<Fence<B>>,
    spare_events: Vec<Event<B>>,
    reserved: usize,
    in_use: usize,
    requested: usize,
    counters: PoolCounters,
}

/// A caching, stream-ordered pool; see the [module docs](self).
pub struct CachingPool<B: MemoryBackend, S: Storage<B> = DeviceStorage<B>> {
    storage: S,
    config: PoolConfig,
    pinned: PinnedPool<B>,
    state: Mutex<State<B, S::Segment>>,
}

impl<B: MemoryBackend> CachingPool<B> {
    /// A pool over `device`'s plain allocator.
    pub fn new(device: Arc<B::Device>, config: PoolConfig) -> Self {
        Self::with_storage(DeviceStorage::new(device), config)
    }
}

impl<B: MemoryBackend, S: Storage<B>> CachingPool<B, S> {
    /// A pool over any storage.
    pub fn with_storage(storage: S, config: PoolConfig) -> Self {
        let pinned = PinnedPool::new(storage.device().clone(), config.pinned_cache);
        let shared = FreeList::new(ANY, None);
        CachingPool {
            storage,
            config,
            pinned,
            state: Mutex::new(State {
                segments: Vec::new(),
                vacant_segments: Vec::new(),
                nodes: Vec::new(),
                vacant_nodes: Vec::new(),
                lists: vec![shared],
                pending: Vec::new(),
                spare_events: Vec::new(),
                reserved: 0,
                in_use: 0,
                requested: 0,
                counters: PoolCounters::default(),
            }),
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

    fn lock(&self) -> MutexGuard<'_, State<B, S::Segment>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dev(&self) -> &B::Device {
        self.storage.device()
    }

    /// Waits for every pending fence and releases free segments until at
    /// most `keep` bytes stay reserved.
    pub fn trim(&self, keep: usize) -> Result<()> {
        let mut st = self.lock();
        st.fence_all(self.dev());
        st.wait_pending(self.dev());
        st.release_free_segments(keep);
        Ok(())
    }

    /// A usage and fragmentation report.
    pub fn report(&self) -> PoolReport {
        self.lock().report()
    }

    fn grow(&self, st: &mut State<B, S::Segment>, size: usize, small: bool) -> Result<u32> {
        let mut seg_size = if small {
            SMALL_SEGMENT
        } else if size <= LARGE_EXACT_ABOVE {
            LARGE_SEGMENT
        } else {
            size.div_ceil(LARGE_ROUND).saturating_mul(LARGE_ROUND)
        };
        let oom = || Error::OutOfMemory {
            backend: <B as crate::backend::Backend>::KIND,
            ordinal: st_ordinal(self.dev()),
            bytes: size,
        };
        if let Some(limit) = self.config.size_limit {
            if st.reserved.saturating_add(seg_size) > limit {
                // Fall back to a segment of exactly the request before giving up.
                seg_size = size;
                if st.reserved.saturating_add(seg_size) > limit {
                    return Err(oom());
                }
            }
        }
        let seg = self.storage.alloc(seg_size)?;
        st.counters.segments_allocated += 1;
        st.reserved += seg_size;
        let base = seg.device_ptr();
        let seg_index = match st.vacant_segments.pop() {
            Some(i) => i,
            None => {
                st.segments.push(None);
                (st.segments.len() - 1) as u32
            }
        };
        let node = st.new_node(Node {
            seg: seg_index,
            offset: 0,
            size: seg_size,
            prev: NONE,
            next: NONE,
            small,
            state: NodeState::Pending,
        });
        st.segments[seg_index as usize] = Some(SegmentEntry { _memory: seg, base, size: seg_size, first: node });
        Ok(node)
    }
}

/// Whether `GPUPORT_POOL_VALIDATE` asks for a full consistency check on
/// every allocation and free (slow; for debugging). Read once.
fn validate_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("GPUPORT_POOL_VALIDATE").is_some())
}

/// The smallest remainder worth splitting off a block of the class.
fn min_split(small: bool) -> usize {
    if small {
        ROUND
    } else {
        SMALL_MAX + 1
    }
}

fn st_ordinal<D: Device>(d: &D) -> usize {
    d.info().ordinal
}

impl<B: MemoryBackend, Seg: DeviceMemory<B = B>> State<B, Seg> {
    fn new_node(&mut self, node: Node) -> u32 {
        match self.vacant_nodes.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn vacate(&mut self, n: u32) {
        self.nodes[n as usize].state = NodeState::Vacant;
        self.vacant_nodes.push(n);
    }

    fn list_of(&self, tag: u64) -> Option<usize> {
        if tag == ANY {
            return Some(0);
        }
        self.lists.iter().position(|l| l.tag == tag)
    }

    fn key(&self, n: u32) -> (bool, usize, u32) {
        let node = &self.nodes[n as usize];
        (!node.small, node.size, n)
    }

    /// Removes a free node from its list.
    fn unlink_free(&mut self, n: u32) {
        if let NodeState::Free { tag } = self.nodes[n as usize].state {
            let key = self.key(n);
            if let Some(l) = self.list_of(tag) {
                self.lists[l].set.remove(&key);
            }
        }
    }

    /// Marks `n` free with `tag`, merges it with free neighbours of the same
    /// tag, and files the result in the tag's list (which must exist).
    fn free_and_merge(&mut self, n: u32, tag: u64) {
        let mut n = n;
        let next = self.nodes[n as usize].next;
        if next != NONE && self.nodes[next as usize].state == (NodeState::Free { tag }) {
            self.unlink_free(next);
            let (size, after) = (self.nodes[next as usize].size, self.nodes[next as usize].next);
            self.nodes[n as usize].size += size;
            self.nodes[n as usize].next = after;
            if after != NONE {
                self.nodes[after as usize].prev = n;
            }
            self.vacate(next);
        }
        let prev = self.nodes[n as usize].prev;
        if prev != NONE && self.nodes[prev as usize].state == (NodeState::Free { tag }) {
            self.unlink_free(prev);
            let (size, after) = (self.nodes[n as usize].size, self.nodes[n as usize].next);
            self.nodes[prev as usize].size += size;
            self.nodes[prev as usize].next = after;
            if after != NONE {
                self.nodes[after as usize].prev = prev;
            }
            self.vacate(n);
            n = prev;
        }
        self.nodes[n as usize].state = NodeState::Free { tag };
        let key = self.key(n);
        if let Some(l) = self.list_of(tag) {
            self.lists[l].set.insert(key);
        }
    }

    /// Takes a block of list `l`'s `recent` cache that [`hand_out`](Self::hand_out)
    /// would hand out whole for `size` bytes of the class, newest first.
    fn take_recent(&mut self, l: usize, size: usize, small: bool) -> Option<u32> {
        let nodes = &self.nodes;
        let fits = |&n: &u32| {
            let node = &nodes[n as usize];
            node.small == small && node.size >= size && node.size - size < min_split(small)
        };
        let i = self.lists[l].recent.iter().rposition(fits)?;
        Some(self.lists[l].recent.remove(i))
    }

    /// Frees `n`, just used on stream `tag` (list `l`), into that list's
    /// `recent` cache; the oldest cached block, if the cache is full, goes
    /// to the free set.
    fn free_recent(&mut self, n: u32, l: usize) {
        let tag = self.lists[l].tag;
        if self.lists[l].recent.len() == RECENT_MAX {
            let oldest = self.lists[l].recent.remove(0);
            self.free_and_merge(oldest, tag);
        }
        self.nodes[n as usize].state = NodeState::Cached { tag };
        self.lists[l].recent.push(n);
    }

    /// Moves list `l`'s cached blocks to its free set, merging them with
    /// their free neighbours; whether there were any.
    fn flush_recent(&mut self, l: usize) -> bool {
        let recent = std::mem::take(&mut self.lists[l].recent);
        let tag = self.lists[l].tag;
        let any = !recent.is_empty();
        for n in recent {
            self.free_and_merge(n, tag);
        }
        any
    }

    /// Takes the best-fitting free block of the right class from `tag`'s list.
    fn take_best(&mut self, tag: u64, size: usize, small: bool) -> Option<u32> {
        let l = self.list_of(tag)?;
        let key = *self.lists[l].set.range((!small, size, 0)..(!small, usize::MAX, NONE)).next()?;
        self.lists[l].set.remove(&key);
        Some(key.2)
    }

    /// Cuts `size` bytes off the front of free node `n` (tag `tag`), files the
    /// remainder, marks `n` allocated and returns its address.
    fn hand_out(&mut self, n: u32, size: usize, requested: usize, tag: u64) -> u64 {
        let node = self.nodes[n as usize];
        debug_assert!(
            matches!(node.state, NodeState::Free { .. } | NodeState::Cached { .. } | NodeState::Pending),
            "handing out {n}: {node:?}"
        );
        let rest = node.size - size;
        let min_split = min_split(node.small);
        if rest >= min_split {
            let r = self.new_node(Node {
                seg: node.seg,
                offset: node.offset + size,
                size: rest,
                prev: n,
                next: node.next,
                small: node.small,
                state: NodeState::Free { tag },
            });
            if node.next != NONE {
                self.nodes[node.next as usize].prev = r;
            }
            self.nodes[n as usize].next = r;
            self.nodes[n as usize].size = size;
            let key = self.key(r);
            if let Some(l) = self.list_of(tag) {
                self.lists[l].set.insert(key);
            }
        }
        let node = &mut self.nodes[n as usize];
        node.state = NodeState::Allocated { requested };
        let (held, offset, seg) = (node.size, node.offset, node.seg);
        self.in_use += held;
        self.requested += requested;
        self.counters.allocations += 1;
        let base = self.segments[seg as usize].as_ref().map(|s| s.base).unwrap_or(0);
        base + offset as u64
    }

    fn take_event(&mut self, device: &B::Device) -> Option<Event<B>> {
        self.spare_events.pop().or_else(|| device.create_event().ok())
    }

    /// Moves every block of list `l` (a stream's) to the pending list behind
    /// an event recorded on that stream now.
    fn fence(&mut self, device: &B::Device, l: usize) {
        if l == 0 || (self.lists[l].set.is_empty() && self.lists[l].recent.is_empty()) {
            return;
        }
        let mut nodes: Vec<u32> = std::mem::take(&mut self.lists[l].set).into_iter().map(|k| k.2).collect();
        nodes.append(&mut self.lists[l].recent);
        for &n in &nodes {
            self.nodes[n as usize].state = NodeState::Pending;
        }
        self.counters.fences += 1;
        let stream = self.lists[l].stream.clone();
        let event = self.take_event(device);
        match (stream, event) {
            (Some(stream), Some(event)) if device.record_event(&event, &stream).is_ok() => {
                self.pending.push(Fence { events: vec![event], nodes });
            }
            (stream, _) => {
                // No event to prove completion: wait for the stream instead.
                if let Some(stream) = stream {
                    let _ = device.synchronize(&stream);
                }
                for n in nodes {
                    self.free_and_merge(n, ANY);
                }
            }
        }
    }

    fn fence_all(&mut self, device: &B::Device) {
        for l in 1..self.lists.len() {
            self.fence(device, l);
        }
    }

    /// Moves the blocks of completed fences to the shared list.
    fn poll_pending(&mut self, device: &B::Device) -> bool {
        let mut moved = false;
        let mut i = 0;
        while i < self.pending.len() {
            let done = self.pending[i].events.iter().all(|e| device.event_is_complete(e).unwrap_or(false));
            if done {
                let fence = self.pending.swap_remove(i);
                self.finish_fence(fence);
                moved = true;
            } else {
                i += 1;
            }
        }
        moved
    }

    fn wait_pending(&mut self, device: &B::Device) {
        for fence in std::mem::take(&mut self.pending) {
            for e in &fence.events {
                let _ = device.synchronize_event(e);
            }
            self.finish_fence(fence);
        }
    }

    fn finish_fence(&mut self, fence: Fence<B>) {
        for n in fence.nodes {
            self.free_and_merge(n, ANY);
        }
        if self.spare_events.len() < 64 {
            self.spare_events.extend(fence.events);
        }
    }

    /// Gives whole free segments of the shared list back until `reserved <= keep`.
    fn release_free_segments(&mut self, keep: usize) {
        let mut s = 0;
        while self.reserved > keep && s < self.segments.len() {
            let whole = match &self.segments[s] {
                Some(seg) => {
                    let n = &self.nodes[seg.first as usize];
                    n.state == (NodeState::Free { tag: ANY }) && n.size == seg.size
                }
                None => false,
            };
            if whole {
                if let Some(seg) = self.segments[s].take() {
                    self.unlink_free(seg.first);
                    self.vacate(seg.first);
                    self.reserved -= seg.size;
                    self.vacant_segments.push(s as u32);
                    self.counters.segments_released += 1;
                    drop(seg); // frees the memory
                }
            }
            s += 1;
        }
    }

    /// Checks the block lists against the free lists (debug builds, tests).
    #[allow(dead_code)]
    fn validate(&self) {
        let mut listed = std::collections::HashSet::new();
        for l in &self.lists {
            for &(large, size, n) in &l.set {
                let node = &self.nodes[n as usize];
                assert_eq!(node.state, NodeState::Free { tag: l.tag }, "node {n} listed under {}", l.tag);
                assert_eq!((large, size), (!node.small, node.size), "stale key for node {n}");
                assert!(listed.insert(n), "node {n} listed twice");
            }
            assert!(l.recent.len() <= RECENT_MAX, "list {} caches {} blocks", l.tag, l.recent.len());
            for &n in &l.recent {
                assert_eq!(self.nodes[n as usize].state, NodeState::Cached { tag: l.tag }, "node {n} cached");
                assert!(listed.insert(n), "node {n} listed twice");
            }
        }
        for seg in self.segments.iter().flatten() {
            let (mut n, mut offset, mut prev) = (seg.first, 0, NONE);
            while n != NONE {
                let node = &self.nodes[n as usize];
                assert_eq!((node.offset, node.prev), (offset, prev), "broken chain at node {n}");
                if let NodeState::Free { .. } | NodeState::Cached { .. } = node.state {
                    assert!(listed.contains(&n), "free node {n} in no list");
                }
                assert_ne!(node.state, NodeState::Vacant);
                offset += node.size;
                prev = n;
                n = node.next;
            }
            assert_eq!(offset, seg.size);
        }
    }

    fn report(&self) -> PoolReport {
        let mut segment_map = Vec::new();
        let (mut free, mut pending, mut free_blocks, mut largest) = (0, 0, 0, 0);
        for seg in self.segments.iter().flatten() {
            let mut blocks = Vec::new();
            let mut n = seg.first;
            while n != NONE {
                let node = &self.nodes[n as usize];
                let state = match node.state {
                    NodeState::Allocated { requested } => BlockState::Allocated { requested },
                    NodeState::Free { tag: ANY } => BlockState::FreeForAnyStream,
                    NodeState::Free { tag } | NodeState::Cached { tag } => BlockState::FreeForStream(tag),
                    NodeState::Pending | NodeState::Vacant => BlockState::Pending,
                };
                match state {
                    BlockState::FreeForAnyStream | BlockState::FreeForStream(_) => {
                        free += node.size;
                        free_blocks += 1;
                        largest = largest.max(node.size);
                    }
                    BlockState::Pending => pending += node.size,
                    BlockState::Allocated { .. } => {}
                }
                blocks.push(BlockReport { offset: node.offset, size: node.size, state });
                n = node.next;
            }
            segment_map.push(SegmentReport { address: seg.base, size: seg.size, blocks });
        }
        PoolReport {
            reserved: self.reserved,
            in_use: self.in_use,
            requested: self.requested,
            free,
            pending,
            segments: segment_map.len(),
            free_blocks,
            largest_free_block: largest,
            fragmentation: if free == 0 { 0.0 } else { 1.0 - largest as f64 / free as f64 },
            counters: self.counters,
            segment_map,
        }
    }
}

impl<B: MemoryBackend, S: Storage<B>> Drop for CachingPool<B, S> {
    fn drop(&mut self) {
        // Blocks freed on a stream may still be in use by its queued work;
        // wait for it before the segments go.
        let device = self.storage.device().clone();
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        st.fence_all(&device);
        st.wait_pending(&device);
    }
}

impl<B: MemoryBackend, S: Storage<B>> fmt::Debug for CachingPool<B, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        write!(f, "CachingPool({:?}, {} reserved, {} in use)", self.storage, st.reserved, st.in_use)
    }
}

impl<B: MemoryBackend, S: Storage<B>> MemoryResource<B> for CachingPool<B, S> {
    fn device(&self) -> &Arc<B::Device> {
        self.storage.device()
    }

    fn name(&self) -> &'static str {
        "caching-pool"
    }

    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> Result<Block<B>> {
        check_alloc_size(bytes)?;
        let size = bytes.checked_next_multiple_of(ROUND).ok_or_else(|| Error::InvalidArgument {
            name: "bytes",
            reason: format!("{bytes} bytes cannot be rounded up to {ROUND}"),
        })?;
        let small = size <= SMALL_MAX;
        let device = self.dev();
        let tag = device.stream_id(stream);
        let mut st = self.lock();
        if validate_enabled() {
            st.validate();
        }
        let block = |st: &mut State<B, S::Segment>, n: u32, tag: u64| Block {
            ptr: st.hand_out(n, size, bytes, tag),
            len: bytes,
            token: n as u64,
            buffer: None,
        };
        // 1. The same stream's blocks: stream order makes reuse safe.
        if let Some(t) = tag {
            if let Some(n) = st.list_of(t).and_then(|l| st.take_recent(l, size, small)) {
                st.counters.same_stream_reuses += 1;
                return Ok(block(&mut st, n, t));
            }
            // Then the set; if nothing fits, the cached blocks merged into it.
            let mut n = st.take_best(t, size, small);
            if n.is_none() && st.list_of(t).is_some_and(|l| st.flush_recent(l)) {
                n = st.take_best(t, size, small);
            }
            if let Some(n) = n {
                st.counters.same_stream_reuses += 1;
                return Ok(block(&mut st, n, t));
            }
        }
        // 2. Blocks every stream may use (their events have completed).
        if let Some(n) = st.take_best(ANY, size, small) {
            st.counters.shared_reuses += 1;
            return Ok(block(&mut st, n, ANY));
        }
        // 3. Fences that completed since, then fence the other streams' lists.
        for fence_others in [false, true] {
            if fence_others {
                for l in 1..st.lists.len() {
                    if Some(st.lists[l].tag) != tag {
                        st.fence(device, l);
                    }
                }
            }
            if !st.pending.is_empty() && st.poll_pending(device) {
                if let Some(n) = st.take_best(ANY, size, small) {
                    st.counters.shared_reuses += 1;
                    return Ok(block(&mut st, n, ANY));
                }
            }
        }
        // 4. New memory; on out-of-memory release everything free and retry once.
        let node = match self.grow(&mut st, size, small) {
            Ok(n) => n,
            Err(Error::OutOfMemory { .. }) => {
                st.counters.oom_retries += 1;
                st.fence_all(device);
                st.wait_pending(device);
                if let Some(n) = st.take_best(ANY, size, small) {
                    st.counters.shared_reuses += 1;
                    return Ok(block(&mut st, n, ANY));
                }
                st.release_free_segments(0);
                match self.grow(&mut st, size, small) {
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
                if st.list_of(t).is_none() {
                    st.lists.push(FreeList::new(t, Some(stream.clone())));
                }
                t
            }
            None => ANY,
        };
        Ok(block(&mut st, node, t))
    }

    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, mut after: Vec<Event<B>>) {
        let device = self.dev();
        let n = block.token as u32;
        let mut st = self.lock();
        let Some(&Node { state: NodeState::Allocated { requested }, size, .. }) = st.nodes.get(n as usize) else {
            debug_assert!(false, "deallocate of a block this pool does not hold: {block:?}");
            return;
        };
        st.in_use -= size;
        st.requested -= requested;
        st.counters.frees += 1;
        let tag = device.stream_id(stream);
        match tag {
            Some(t) if after.is_empty() => {
                let l = match st.list_of(t) {
                    Some(l) => l,
                    None => {
                        st.lists.push(FreeList::new(t, Some(stream.clone())));
                        st.lists.len() - 1
                    }
                };
                st.free_recent(n, l);
            }
            _ => {
                // Used on other streams (or streams without ids): wait for
                // every use, including this stream's, before any reuse.
                st.nodes[n as usize].state = NodeState::Pending;
                match st.take_event(device) {
                    Some(event) if device.record_event(&event, stream).is_ok() => after.push(event),
                    _ => {
                        let _ = device.synchronize(stream);
                    }
                }
                st.pending.push(Fence { events: after, nodes: vec![n] });
            }
        }
        if validate_enabled() {
            st.validate();
        }
        if st.reserved > self.config.release_threshold {
            st.poll_pending(device);
            st.release_free_segments(self.config.release_threshold);
            if st.reserved > self.config.release_threshold {
                if let Some(l) = tag.and_then(|t| st.list_of(t)) {
                    st.fence(device, l);
                }
            }
        }
    }

    fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<PinnedMemory<B>> {
        self.pinned.alloc(bytes, flags)
    }

    fn reset(&self) -> Result<()> {
        self.trim(0)?;
        self.pinned.release();
        Ok(())
    }

    fn report(&self) -> Option<PoolReport> {
        Some(CachingPool::report(self))
    }
}

/// What one block of a pool segment is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out; `requested` bytes were asked for.
    Allocated {
        /// Bytes requested.
        requested: usize,
    },
    /// Free, reusable at once on the stream with this id.
    FreeForStream(u64),
    /// Free for any stream (events showed its last uses complete).
    FreeForAnyStream,
    /// Freed, waiting for events of its last uses.
    Pending,
}

/// One block of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockReport {
    /// Offset in the segment.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// State.
    pub state: BlockState,
}

/// One segment taken from the storage, block by block in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentReport {
    /// Device address.
    pub address: u64,
    /// Size in bytes.
    pub size: usize,
    /// Its blocks.
    pub blocks: Vec<BlockReport>,
}

/// Usage and fragmentation of a [`CachingPool`] (after cubecl's `memory_report`).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolReport {
    /// Bytes held from the storage.
    pub reserved: usize,
    /// Bytes in handed-out blocks (rounded sizes).
    pub in_use: usize,
    /// Bytes requested by the handed-out blocks.
    pub requested: usize,
    /// Bytes in free blocks.
    pub free: usize,
    /// Bytes freed but waiting for events.
    pub pending: usize,
    /// Number of segments.
    pub segments: usize,
    /// Number of free blocks.
    pub free_blocks: usize,
    /// The largest free block: the largest request served without growing.
    pub largest_free_block: usize,
    /// `1 - largest_free_block / free`: 0 when free memory is one block,
    /// near 1 when it is scattered in small pieces.
    pub fragmentation: f64,
    /// Life-time counters.
    pub counters: PoolCounters,
    /// Every segment's blocks.
    pub segment_map: Vec<SegmentReport>,
}

impl fmt::Display for PoolReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        writeln!(
            f,
            "pool: {:.2} MiB reserved in {} segments; {:.2} MiB in use ({:.2} MiB requested); {:.2} MiB free in {} blocks (largest {:.2} MiB, fragmentation {:.1}%); {:.2} MiB pending",
            mib(self.reserved),
            self.segments,
            mib(self.in_use),
            mib(self.requested),
            mib(self.free),
            self.free_blocks,
            mib(self.largest_free_block),
            self.fragmentation * 100.0,
            mib(self.pending)
        )?;
        let c = &self.counters;
        writeln!(
            f,
            "  {} allocations ({} same-stream reuses, {} shared reuses), {} frees, {} segments allocated, {} released, {} fences, {} OOM retries, {} OOM failures",
            c.allocations, c.same_stream_reuses, c.shared_reuses, c.frees, c.segments_allocated, c.segments_released, c.fences, c.oom_retries, c.oom_failures
        )?;
        for seg in &self.segment_map {
            write!(f, "  {:#x} {:>10} B:", seg.address, seg.size)?;
            for b in &seg.blocks {
                let s = match b.state {
                    BlockState::Allocated { .. } => "A".to_string(),
                    BlockState::FreeForStream(t) => format!("F{t}"),
                    BlockState::FreeForAnyStream => "F*".to_string(),
                    BlockState::Pending => "P".to_string(),
                };
                write!(f, " [{}+{} {s}]", b.offset, b.size)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
