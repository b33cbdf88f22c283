//! The pool's bookkeeping: segments cut into a doubly linked chain of
//! nodes (`chain.rs`), per-stream free lists and the shared one, the fences
//! that move blocks between them, and the data of the expandable ranges and
//! graph pools (their rules: `expandable.rs`, `graph_pools.rs`). Everything
//! here runs under the pool's lock.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use super::chain::{index, is_private, HandedOut, Node, NodeState, SegmentEntry, ANY, NONE, ROUND, SMALL_MAX};
use crate::backend::{Backend, Device, DeviceMemory, Event, GrowableRange, Stream};
use crate::memory::history;
use crate::memory::report::{BlockReport, BlockState, PoolCounters, PoolReport, SegmentReport};

/// Most blocks a stream's list keeps in its `recent` cache.
const RECENT_MAX: usize = 8;

/// Stream lists a pool keeps before it retires lists of streams that may be
/// gone (unused for [`IDLE_OPS`] pool operations) when it makes a new one.
/// A workload that interleaves more streams than this on one pool, each
/// coming back less often than every `IDLE_OPS` operations, pays a fence
/// (one event) per retired list.
const SOFT_STREAM_LISTS: usize = 8;
/// Pool operations after which an unused stream's list may be retired.
const IDLE_OPS: u64 = 16;

/// The free blocks of one stream (or, `lists[0]`, of any stream).
///
/// A stream's list holds a handle on its stream, to record fences on it:
/// while the list exists the stream (a driver stream, or a host worker
/// thread) cannot go away. So a list lives only while it has blocks, and
/// lists of streams that look gone are retired (fenced, then dropped with
/// their handle) when new streams come; see [`State::make_list`].
///
/// `repr(C)`: what a same-stream allocation or free reads (`tag`,
/// `last_used`, `recent`) comes first, in one or two cache lines.
#[repr(C)]
pub(super) struct FreeList<B: Backend> {
    pub(super) tag: u64,
    /// The pool's operation count when the list was last used.
    last_used: u64,
    /// Blocks freed on this stream most recently (at most [`RECENT_MAX`],
    /// oldest first), handed out again whole to a request of their size
    /// without touching `set`: the common free-then-allocate-the-same-size
    /// cycle costs no tree updates and no split or merge.
    recent: Vec<u32>,
    /// The stream, kept to record fences on it (`None` for the shared list).
    stream: Option<Stream<B>>,
    /// (large class, size, node), ordered for best fit.
    set: BTreeSet<(bool, usize, u32)>,
    /// The stream is another library's (`Device::stream_is_borrowed`),
    /// which may destroy it at any time: the list is never fenced by naming
    /// the stream, only released after a device-wide synchronization.
    borrowed: bool,
    /// A graph pool's list ([`is_private`]): never fenced, retired or
    /// released; its blocks leave it only when the graph is gone.
    private: bool,
}

impl<B: Backend> FreeList<B> {
    pub(super) fn shared() -> Self {
        FreeList {
            tag: ANY,
            last_used: 0,
            recent: Vec::new(),
            stream: None,
            set: BTreeSet::new(),
            borrowed: false,
            private: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.recent.is_empty()
    }

    /// Empties the list, returning its blocks' nodes.
    pub(super) fn take_nodes(&mut self) -> Vec<u32> {
        let mut nodes: Vec<u32> = std::mem::take(&mut self.set).into_iter().map(|k| k.2).collect();
        nodes.append(&mut self.recent);
        nodes
    }
}

pub(super) struct Fence<B: Backend> {
    pub(super) events: Vec<Event<B>>,
    pub(super) nodes: Vec<u32>,
}

/// The memory of one capture and the graph made from it (`graph_pools.rs`).
pub(super) struct GraphPool<B: Backend> {
    /// Serial number, stamped on the pool's segments (`SegmentEntry::graph`).
    pub(super) serial: u64,
    /// The id of the capture it serves (`Device::capture_id`).
    pub(super) capture: u64,
    /// The capture has been seen over: no block goes back to the pool's lists.
    pub(super) capture_over: bool,
    /// (stream tag, list tag) of each stream the capture allocated on.
    pub(super) lists: Vec<(u64, u64)>,
    /// Blocks freed outside the capture while the graph lives: node, stream, events.
    pub(super) parked: Vec<(u32, Stream<B>, Vec<Event<B>>)>,
    /// Set when the graph (and every executable made from it) is gone.
    pub(super) gone: Arc<AtomicBool>,
    /// The pool's segments, handed over if the caching pool goes first
    /// (`CachingPool::drop`): freed with the graph's hold.
    pub(super) orphans: Orphans,
}

/// Segments of a graph pool whose caching pool is gone.
pub(super) type Orphans = Arc<Mutex<Vec<Box<dyn Send>>>>;

/// One size class's range and the segment on it (`expandable.rs`).
pub(super) struct ExpandableRange {
    pub(super) range: Box<dyn GrowableRange>,
    /// The segment's index in [`State::segments`]; [`NONE`] while nothing is mapped.
    pub(super) seg: u32,
}

/// `repr(C)`: what a same-stream allocation and free read and write comes
/// first (the lists, nodes and segments, the sizes and clocks, the tally,
/// the first counters), so that a call between other work (a Python
/// interpreter's, an allocator hook's caller's) touches few cache lines.
#[repr(C)]
pub(super) struct State<B: Backend, Seg> {
    /// `lists[0]` is the shared list.
    pub(super) lists: Vec<FreeList<B>>,
    pub(super) nodes: Vec<Node>,
    pub(super) segments: Vec<Option<SegmentEntry<Seg>>>,
    /// Pool operations so far (allocations and frees), the clock of `last_used`.
    pub(super) clock: u64,
    /// The last serial number handed out (`next_serial`).
    serials: u64,
    pub(super) reserved: usize,
    pub(super) in_use: usize,
    pub(super) requested: usize,
    /// Whether `expandable` holds the ranges (both classes have one, or
    /// neither; `expandable.rs`): read by every allocation.
    pub(super) expandable_on: bool,
    /// The statistics (`MemoryResource::statistics`): allocations as handed
    /// out, frees as the pool takes them (or holds them back).
    pub(super) tally: crate::memory::stats::Tally,
    /// Handles of streams whose lists were retired, to drop after the lock
    /// is released (dropping a stream's last handle may wait for its work).
    pub(super) released: Vec<Stream<B>>,
    /// The graph pools: memory of captures and of the graphs made from them
    /// (`graph_pools.rs`).
    pub(super) graph_pools: Vec<GraphPool<B>>,
    pub(super) counters: PoolCounters,
    pub(super) vacant_segments: Vec<u32>,
    vacant_nodes: Vec<u32>,
    pub(super) pending: Vec<Fence<B>>,
    spare_events: Vec<Event<B>>,
    /// The last private list tag and graph pool serial handed out.
    pub(super) private_tags: u64,
    pub(super) graph_serials: u64,
    /// The expandable ranges, small class then large (`expandable.rs`;
    /// `expandable_on` says whether they are there);
    /// dropped after `segments`, whose expandable entries own nothing.
    pub(super) expandable: [Option<ExpandableRange>; 2],
    /// What the report says of expandable segments.
    pub(super) expandable_mode: crate::memory::report::Expandable,
}

pub(super) fn st_ordinal<D: Device>(d: &D) -> usize {
    d.info().ordinal
}

impl<B: Backend, Seg: DeviceMemory<B = B>> State<B, Seg> {
    pub(super) fn new() -> Self {
        State {
            segments: Vec::new(),
            vacant_segments: Vec::new(),
            nodes: Vec::new(),
            vacant_nodes: Vec::new(),
            lists: vec![FreeList::shared()],
            pending: Vec::new(),
            spare_events: Vec::new(),
            reserved: 0,
            in_use: 0,
            requested: 0,
            expandable_on: false,
            counters: PoolCounters::default(),
            tally: Default::default(),
            clock: 0,
            serials: 0,
            released: Vec::new(),
            graph_pools: Vec::new(),
            private_tags: 0,
            graph_serials: 0,
            expandable: [None, None],
            expandable_mode: crate::memory::report::Expandable::Off,
        }
    }

    /// The smallest remainder worth splitting off a block of the class: a
    /// large block keeps up to 1 MiB more than asked, unless the pool grows
    /// an expandable segment for the class (`expandable.rs` says why).
    #[inline]
    pub(super) fn min_split(&self, small: bool) -> usize {
        if small || self.expandable_on {
            ROUND
        } else {
            SMALL_MAX + 1
        }
    }

    /// A free index in `segments` for a new segment (a vacant one, else a
    /// new slot at the end, left `None` for the caller to fill).
    pub(super) fn segment_slot(&mut self) -> u32 {
        match self.vacant_segments.pop() {
            Some(i) => i,
            None => {
                self.segments.push(None);
                index(self.segments.len() - 1)
            }
        }
    }

    pub(super) fn new_node(&mut self, node: Node) -> u32 {
        match self.vacant_nodes.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                index(self.nodes.len() - 1)
            }
        }
    }

    pub(super) fn vacate(&mut self, n: u32) {
        self.nodes[n as usize].state = NodeState::Vacant;
        self.vacant_nodes.push(n);
    }

    /// The index of `tag`'s list. Only the shared list (index 0) has tag
    /// [`ANY`], so a stream's tag is looked for from index 1: a stream's
    /// allocation or free does not touch the shared list's memory.
    #[inline]
    pub(super) fn list_of(&self, tag: u64) -> Option<usize> {
        if tag == ANY {
            return Some(0);
        }
        self.lists[1..].iter().position(|l| l.tag == tag).map(|i| i + 1)
    }

    fn key(&self, n: u32) -> (bool, usize, u32) {
        let node = &self.nodes[n as usize];
        (!node.small, node.size, n)
    }

    /// Takes free node `n` out of its list (it stays marked free).
    pub(super) fn take_free(&mut self, n: u32) {
        self.unlink_free(n);
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
    pub(super) fn free_and_merge(&mut self, n: u32, tag: u64) {
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
    #[inline]
    pub(super) fn take_recent(&mut self, l: usize, size: usize, small: bool) -> Option<u32> {
        let (nodes, min_split) = (&self.nodes, self.min_split(small));
        let fits = |&n: &u32| {
            let node = &nodes[n as usize];
            node.small == small && node.size >= size && node.size - size < min_split
        };
        let recent = &mut self.lists[l].recent;
        let i = recent.iter().rposition(fits)?;
        // Nearly always the newest: a pop, with nothing to shift.
        if i + 1 == recent.len() {
            recent.pop()
        } else {
            Some(recent.remove(i))
        }
    }

    /// Frees `n`, just used on stream `tag` (list `l`), into that list's
    /// `recent` cache; the oldest cached block, if the cache is full, goes
    /// to the free set.
    #[inline]
    pub(super) fn free_recent(&mut self, n: u32, l: usize) {
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
    pub(super) fn flush_recent(&mut self, l: usize) -> bool {
        let recent = std::mem::take(&mut self.lists[l].recent);
        let tag = self.lists[l].tag;
        let any = !recent.is_empty();
        for n in recent {
            self.free_and_merge(n, tag);
        }
        any
    }

    /// Takes the best-fitting free block of the right class from `tag`'s list.
    pub(super) fn take_best(&mut self, tag: u64, size: usize, small: bool) -> Option<u32> {
        let l = self.list_of(tag)?;
        let key = *self.lists[l].set.range((!small, size, 0)..(!small, usize::MAX, NONE)).next()?;
        self.lists[l].set.remove(&key);
        Some(key.2)
    }

    /// Cuts `size` bytes off the front of free node `n` (tag `tag`), files the
    /// remainder, and marks `n` allocated under a new serial number.
    #[inline]
    pub(super) fn hand_out(&mut self, n: u32, size: usize, requested: usize, tag: u64) -> HandedOut {
        let node = self.nodes[n as usize];
        debug_assert!(
            matches!(node.state, NodeState::Free { .. } | NodeState::Cached { .. } | NodeState::Pending),
            "handing out {n}: {node:?}"
        );
        let rest = node.size - size;
        if rest >= self.min_split(node.small) {
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
        let serial = self.next_serial();
        let node = &mut self.nodes[n as usize];
        node.state = NodeState::Allocated { requested, serial };
        let (held, offset, seg) = (node.size, node.offset, node.seg);
        self.in_use += held;
        self.requested += requested;
        self.counters.allocations += 1;
        let base = self.segments[seg as usize].as_ref().map(|s| s.base).unwrap_or(0);
        HandedOut { token: u64::from(n), ptr: base + offset as u64, serial }
    }

    /// The graph pool segment `n` belongs to (its serial), 0 for none.
    #[inline]
    pub(super) fn graph_of(&self, n: u32) -> u64 {
        let seg = self.nodes[n as usize].seg;
        self.segments[seg as usize].as_ref().map_or(0, |s| s.graph)
    }

    pub(super) fn take_event(&mut self, device: &B::Device) -> Option<Event<B>> {
        self.spare_events.pop().or_else(|| device.create_event().ok())
    }

    /// Moves every block of list `l` (a stream's) to the pending list behind
    /// an event recorded on that stream now.
    ///
    /// A borrowed stream's list is left alone: its stream may be gone, and
    /// an event recorded on a destroyed stream is undefined behaviour (it
    /// crashed the CUDA driver at exit). Its blocks serve the same
    /// stream, and reach others through [`State::release_borrowed`].
    pub(super) fn fence(&mut self, device: &B::Device, l: usize) {
        if l == 0 || self.lists[l].borrowed || self.lists[l].private || self.lists[l].is_empty() {
            return;
        }
        // A capturing stream would record the fence's event into its graph.
        // The capture check and the record are one section of the stream's
        // gate, entered only if that needs no wait: the pool's lock is held,
        // and a thread inside a section may be waiting for it. A stream whose
        // capture is beginning or ending is fenced later.
        let Some(stream) = self.lists[l].stream.clone() else { return };
        let Some(_section) = crate::backend::graph::try_capture_section::<B>(&stream) else { return };
        if device.capture_status(&stream).map(|c| c.is_capturing()).unwrap_or(false) {
            return;
        }
        let nodes = self.lists[l].take_nodes();
        for &n in &nodes {
            self.nodes[n as usize].state = NodeState::Pending;
        }
        self.counters.fences += 1;
        match self.take_event(device) {
            Some(event) if device.record_event(&event, &stream).is_ok() => {
                self.pending.push(Fence { events: vec![event], nodes });
            }
            _ => {
                // No event to prove completion: wait for the stream instead.
                let _ = device.synchronize(&stream);
                for n in nodes {
                    self.free_and_merge(n, ANY);
                }
            }
        }
    }

    /// Fences every stream's list, releases the borrowed streams' lists, and
    /// drops the lists (and their stream handles).
    pub(super) fn fence_all(&mut self, device: &B::Device) {
        for l in 1..self.lists.len() {
            self.fence(device, l);
        }
        self.release_borrowed(device, |_| true);
        self.prune_empty_lists();
    }

    /// Moves the blocks of the borrowed streams' lists that `which` picks to
    /// the shared list, after one device-wide synchronization (which covers
    /// every stream without naming any), and drops those lists. Without
    /// such a list, while a capture the pool served may run (the
    /// synchronization would invalidate it: `captures_may_run`), or if the
    /// synchronization fails, nothing happens.
    pub(super) fn release_borrowed(&mut self, device: &B::Device, which: impl Fn(&FreeList<B>) -> bool) {
        let picked: Vec<usize> = (1..self.lists.len())
            .filter(|&l| self.lists[l].borrowed && !self.lists[l].is_empty() && which(&self.lists[l]))
            .collect();
        if picked.is_empty() || self.captures_may_run() || device.synchronize_device().is_err() {
            return;
        }
        self.counters.fences += 1;
        for &l in &picked {
            for n in self.lists[l].take_nodes() {
                self.nodes[n as usize].state = NodeState::Pending;
                self.free_and_merge(n, ANY);
            }
        }
        self.prune_empty_lists();
    }

    /// Drops the stream lists that hold no blocks, with their stream handles.
    pub(super) fn prune_empty_lists(&mut self) {
        let mut l = 1;
        while l < self.lists.len() {
            if self.lists[l].is_empty() {
                self.drop_list(l);
            } else {
                l += 1;
            }
        }
    }

    /// Removes empty list `l` (not the shared one); its stream handle goes to
    /// `released`, dropped once the lock is.
    fn drop_list(&mut self, l: usize) {
        debug_assert!(l > 0 && self.lists[l].is_empty());
        let list = self.lists.swap_remove(l);
        if let Some(stream) = list.stream {
            self.released.push(stream);
            self.counters.streams_released += 1;
        }
    }

    /// Fences list `l` and drops it.
    fn retire(&mut self, device: &B::Device, l: usize) {
        self.fence(device, l);
        self.drop_list(l);
    }

    /// Marks list `l` used now.
    pub(super) fn touch(&mut self, l: usize) {
        self.lists[l].last_used = self.clock;
    }

    /// The list of stream `tag`, made (holding a handle on `stream`) if missing.
    ///
    /// Making one is when the pool looks for streams that may be gone, since
    /// it cannot see a stream's other handles drop: with more than
    /// [`SOFT_STREAM_LISTS`] stream lists, every list unused for the last
    /// [`IDLE_OPS`] pool operations is retired (its blocks fenced into the
    /// shared list, its stream handle dropped). So at most
    /// `max(SOFT_STREAM_LISTS, IDLE_OPS)` lists survive a new list, and a
    /// stream its users dropped is let go of once that many other lists were
    /// made, or at the next `trim`/`reset`. A retired stream that is still
    /// alive loses only its same-stream fast path for those blocks: they
    /// reach it (and every stream) through the shared list once the fence's
    /// event completes, and its next free makes a new list.
    #[inline]
    pub(super) fn list_for(&mut self, device: &B::Device, tag: u64, stream: &Stream<B>) -> usize {
        match self.list_of(tag) {
            Some(l) => l,
            None => self.make_list(device, tag, stream),
        }
    }

    /// [`list_for`](Self::list_for) of a stream without a list.
    #[inline(never)]
    fn make_list(&mut self, device: &B::Device, tag: u64, stream: &Stream<B>) -> usize {
        if self.lists.len() > SOFT_STREAM_LISTS {
            let clock = self.clock;
            let idle = move |list: &FreeList<B>| list.last_used.saturating_add(IDLE_OPS) < clock;
            self.release_borrowed(device, idle);
            let mut l = 1;
            while l < self.lists.len() {
                if !self.lists[l].borrowed && !self.lists[l].private && idle(&self.lists[l]) {
                    self.retire(device, l);
                } else {
                    l += 1;
                }
            }
        }
        let list = FreeList {
            tag,
            last_used: self.clock,
            recent: Vec::new(),
            stream: Some(stream.clone()),
            set: BTreeSet::new(),
            borrowed: !is_private(tag) && device.stream_is_borrowed(stream),
            private: is_private(tag),
        };
        self.lists.push(list);
        self.lists.len() - 1
    }

    /// Node `n`'s address.
    pub(super) fn address(&self, n: u32) -> u64 {
        let node = &self.nodes[n as usize];
        self.segments[node.seg as usize].as_ref().map(|s| s.base).unwrap_or(0) + node.offset as u64
    }

    /// A serial number for the next block handed out: never 0, below
    /// `SHARED_SERIAL`, never repeated. Reaching `SHARED_SERIAL` would take
    /// 2^63 allocations (about 300 years at one per nanosecond), so a plain
    /// increment keeps the bound.
    fn next_serial(&mut self) -> u64 {
        self.serials += 1;
        debug_assert!(self.serials < crate::memory::block::SHARED_SERIAL);
        self.serials
    }

    /// The node of the live block `token` with this serial, address and
    /// length, and its rounded size and requested bytes; `None` for
    /// anything else (freed already, forged, another pool's).
    pub(super) fn live_block(&self, token: u64, serial: u64, ptr: u64, len: usize) -> Option<(u32, usize, usize)> {
        let n = u32::try_from(token).ok()?;
        let node = self.nodes.get(n as usize)?;
        match node.state {
            NodeState::Allocated { requested, serial: s }
                if s == serial && requested == len && self.address(n) == ptr =>
            {
                Some((n, node.size, requested))
            }
            _ => None,
        }
    }

    /// Moves the blocks of completed fences to the shared list.
    pub(super) fn poll_pending(&mut self, device: &B::Device) -> bool {
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

    pub(super) fn wait_pending(&mut self, device: &B::Device) {
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
    pub(super) fn release_free_segments(&mut self, keep: usize) {
        let mut s = 0;
        while self.reserved > keep && s < self.segments.len() {
            let whole = match &self.segments[s] {
                // Expandable segments shrink instead (below).
                Some(seg) if seg._memory.is_none() => false,
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
                    self.vacant_segments.push(index(s));
                    self.counters.segments_released += 1;
                    if history::recording() {
                        let ordinal = seg._memory.as_ref().map_or(0, |m| m.ordinal());
                        let device = history::DeviceKey { backend: B::KIND, ordinal };
                        history::record_segment(history::Action::SegmentFree, device, seg.base, seg.size, seg.stream);
                    }
                    drop(seg); // frees the memory
                }
            }
            s += 1;
        }
        if self.reserved > keep {
            self.shrink_expandable();
        }
    }

    /// Checks the block lists against the free lists (debug builds, tests).
    pub(super) fn validate(&self) {
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

    pub(super) fn report(&self) -> PoolReport {
        let mut segment_map = Vec::new();
        let (mut free, mut pending, mut free_blocks, mut largest) = (0, 0, 0, 0);
        for seg in self.segments.iter().flatten() {
            let mut blocks = Vec::new();
            let mut n = seg.first;
            while n != NONE {
                let node = &self.nodes[n as usize];
                let state = match node.state {
                    NodeState::Allocated { requested, .. } => BlockState::Allocated { requested },
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
            segment_map.push(SegmentReport {
                address: seg.base,
                size: seg.size,
                stream: seg.stream,
                small: self.nodes[seg.first as usize].small,
                expandable: seg._memory.is_none(),
                graph_capture: self
                    .graph_pools
                    .iter()
                    .find(|g| seg.graph != 0 && g.serial == seg.graph)
                    .map(|g| g.capture),
                blocks,
            });
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
            // A ratio for the report: f64 rounding of byte counts is fine.
            #[allow(clippy::cast_precision_loss)]
            fragmentation: if free == 0 { 0.0 } else { 1.0 - largest as f64 / free as f64 },
            counters: self.counters,
            segment_map,
            expandable: self.expandable_mode.clone(),
            address_space: self.expandable_address_space(),
        }
    }
}
