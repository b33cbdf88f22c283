//! Expandable segments (PyTorch's `expandable_segments:True`): instead of
//! many fixed segments, the pool keeps one segment per size class (small,
//! large) on a [`GrowableRange`], a range of addresses reserved once and
//! mapped at its end as the pool grows.
//!
//! - **Growing** maps just the bytes missing, rounded up to the mapping
//!   granularity (2 MiB on current GPUs): if the segment's last block is
//!   free for any stream, or for the allocating stream, it is extended,
//!   otherwise a block is added after it. Growths and trims are recorded in
//!   the history as PyTorch's `segment_map` and `segment_unmap`. Blocks are cut from the mapped part like those of plain segments
//!   (`state.rs`); neighbours merge across what were separate growths, so a
//!   large request finds room that plain segments would have split.
//! - **Splitting**: a large block is split whenever 512 bytes or more
//!   would be left, as small blocks are (`State::min_split`; PyTorch's
//!   `should_split` with `expandable_segments`). Plain segments keep up to
//!   1 MiB of slack in a large block, so that a 20 MiB segment is not cut
//!   into slivers; here the slack of a growth (rounded up to the
//!   granularity) or of a reused block stayed mapped and out of use. The
//!   rule holds for every large block of the pool, its plain segments'
//!   too (a fallback's, a graph pool's), as PyTorch's does.
//! - **Freed blocks merge before best fit**: a request that a stream's
//!   cache of recent blocks cannot serve first merges them into the free
//!   set (`State::merge_cached_if_expandable`).
//! - **Trimming** (`trim`, `reset`, the release threshold, an out-of-memory
//!   retry) unmaps the segment's free tail, whole granules only, and frees
//!   its physical memory; the addresses stay reserved, so live blocks never
//!   move.
//! - A reservation that runs out (more than `PoolConfig::expandable_reserve`
//!   in one class) falls back to a plain segment for that request.
//! - Graph pools (`graph_pools.rs`) always use plain segments.
//! - Where the device or driver lacks virtual memory management, the pool
//!   uses plain segments and its report says why
//!   ([`Expandable::FellBack`]); the host backend emulates the range
//!   ([`Expandable::Emulated`], `src/backend/host/growable.rs`).

use super::chain::{Node, NodeState, SegmentEntry, ANY, MAX_RESERVED, NONE};
use super::state::{ExpandableRange, State};
use super::{CachingPool, PoolConfig, Storage};
use crate::backend::growable::round_up;
use crate::backend::{Backend, Device, DeviceMemory, MemoryDevice};
use crate::error::memory::MemoryError;
use crate::error::{BackendKind, Error, Result};
use crate::memory::block::Block;
use crate::memory::history;
use crate::memory::ipc_handle::{IpcHandle, IpcKind};
use crate::memory::report::Expandable;

/// The bytes each range reserves: `config.expandable_reserve`, or half the
/// device's memory.
fn reserve_bytes<B: Backend>(device: &B::Device, config: &PoolConfig) -> Result<usize> {
    match config.expandable_reserve {
        Some(bytes) => Ok(bytes),
        None => Ok((device.memory_info()?.total / 2).max(1)),
    }
}

/// Reserves the two ranges for a pool that asked for expandable segments,
/// and notes in `st` how it went; on any failure the pool keeps plain
/// segments and the report says why.
pub(super) fn reserve_ranges<B: Backend, S: Storage<B>>(
    storage: &S,
    config: &PoolConfig,
    st: &mut State<B, S::Segment>,
) {
    let reserved = reserve_bytes::<B>(storage.device(), config).and_then(|bytes| {
        let small = storage.reserve_growable(bytes)?;
        let large = storage.reserve_growable(bytes)?;
        Ok([small, large])
    });
    match reserved {
        Ok(ranges) => {
            let virtual_memory = ranges.iter().all(|r| r.is_virtual());
            st.expandable_mode = if virtual_memory { Expandable::Virtual } else { Expandable::Emulated };
            st.expandable = ranges.map(|range| Some(ExpandableRange { range, seg: NONE }));
            st.expandable_on = true;
        }
        Err(e) => st.expandable_mode = Expandable::FellBack(e.to_string()),
    }
}

/// Whether `e` says the reservation is full (a plain segment may still fit).
fn reservation_full(e: &Error) -> bool {
    matches!(e, Error::Memory(MemoryError::AddressSpace { .. }))
}

impl<B: Backend, S: Storage<B>> CachingPool<B, S> {
    /// New memory for `size` bytes of the class, for the stream with list
    /// tag `tag` (its id; `None` where the backend has none): from the
    /// class's expandable segment if the pool has one and its reservation
    /// has room, else a plain segment (`grow`). Returns the node to hand out.
    pub(super) fn grow_or_expand(
        &self,
        st: &mut State<B, S::Segment>,
        size: usize,
        small: bool,
        tag: Option<u64>,
    ) -> Result<u32> {
        if st.expandable[usize::from(!small)].is_some() {
            match self.expand(st, size, small, tag) {
                Ok(n) => return Ok(n),
                Err(e) if reservation_full(&e) => {}
                Err(e) => return Err(e),
            }
        }
        self.grow(st, size, small, tag.unwrap_or(0))
    }

    /// The driver's IPC memory handle of `block` (as
    /// `MemoryResource::ipc_export`'s default), but memory of an expandable
    /// segment is refused with [`MemoryError::ExpandableIpc`]: the legacy
    /// IPC handles cannot export memory mapped with virtual memory management.
    /// The host backend, which has no IPC at all, refuses with its own
    /// [`Error::Unsupported`] first: advice to use plain segments would not help.
    pub(super) fn ipc_export_unless_expandable(&self, block: &Block<B>) -> Result<IpcHandle> {
        let has_ipc = B::KIND != BackendKind::Host;
        if has_ipc && self.locked(|st| st.in_expandable(block.ptr())) {
            return Err(MemoryError::ExpandableIpc { op: "ipc export", ptr: block.ptr() }.into());
        }
        let (handle, base) = self.dev().ipc_export(block.ptr())?;
        let info = self.dev().info();
        let (backend, ordinal, offset, len) = (info.backend, info.ordinal, block.ptr() - base, block.len());
        Ok(IpcHandle { backend, ordinal, kind: IpcKind::Memory, handle, offset, len })
    }

    /// Maps enough at the end of the class's expandable segment for a free
    /// block of `size` bytes there, and returns that block's node (pending,
    /// out of every list, for `hand_out`), for the stream with list tag `tag`.
    ///
    /// The segment's last block, if free for every stream or free on this
    /// stream's own list, is extended: only the bytes it lacks are mapped.
    /// PyTorch does the same with the free block before the unmapped range
    /// of the stream's own segment (`allocatable(c->prev)` in
    /// `CUDACachingAllocator.cpp`). Taking only blocks free for any stream,
    /// as before, mapped the whole request again whenever the tail had been
    /// freed on the allocating stream, which in a one-stream workload is
    /// nearly always: the free tail stayed mapped beside the new memory.
    /// Handing this stream its own free block needs no wait (stream order,
    /// as for every reuse from its list); another stream's free tail is
    /// left alone.
    fn expand(&self, st: &mut State<B, S::Segment>, size: usize, small: bool, tag: Option<u64>) -> Result<u32> {
        let stream = tag.unwrap_or(0);
        let class = usize::from(!small);
        let ordinal = self.dev().info().ordinal;
        let oom = || Error::OutOfMemory { backend: B::KIND, ordinal, bytes: size };
        let Some(exp) = st.expandable[class].as_ref() else { return Err(oom()) };
        let (seg, mapped) = (exp.seg, exp.range.mapped());
        // The segment's last block, if it is free for every stream or for this one.
        let tail = (seg != NONE).then(|| st.last_node(seg)).filter(|&t| match st.nodes[t as usize].state {
            NodeState::Free { tag: free_for } => free_for == ANY || Some(free_for) == tag,
            _ => false,
        });
        let extend = tail.map_or(0, |t| st.nodes[t as usize].size);
        let growth = round_up(size - extend.min(size), exp.range.granularity())?;
        if let Some(limit) = self.config.size_limit {
            if st.reserved.saturating_add(growth) > limit {
                return Err(oom());
            }
        }
        if st.reserved.saturating_add(growth) > MAX_RESERVED {
            return Err(oom());
        }
        let Some(exp) = st.expandable[class].as_mut() else { return Err(oom()) };
        exp.range.grow_to(mapped + growth)?;
        // A range that mapped less than asked would hand out memory it does not back.
        if exp.range.mapped() != mapped + growth {
            let reason = format!("asked to map {} bytes, {} are mapped", mapped + growth, exp.range.mapped());
            return Err(MemoryError::ContractViolation { resource: "expandable range", reason }.into());
        }
        let base = exp.range.base();
        st.reserved += growth;
        st.counters.segments_allocated += 1;
        if history::recording() {
            history::record_segment(
                history::Action::SegmentMap,
                self.history_key(),
                base + mapped as u64,
                growth,
                stream,
            );
        }
        let node = if seg == NONE {
            // The first growth since the segment was empty: a new segment entry.
            let seg_index = st.segment_slot();
            let n = st.new_node(Node {
                seg: seg_index,
                offset: 0,
                size: growth,
                prev: NONE,
                next: NONE,
                small,
                state: NodeState::Pending,
            });
            st.segments[seg_index as usize] =
                Some(SegmentEntry { _memory: None, base, size: growth, first: n, graph: 0, stream });
            if let Some(exp) = st.expandable[class].as_mut() {
                exp.seg = seg_index;
            }
            n
        } else {
            if let Some(entry) = st.segments[seg as usize].as_mut() {
                entry.size += growth;
            }
            match tail {
                Some(t) => {
                    st.take_free(t);
                    st.nodes[t as usize].size += growth;
                    st.nodes[t as usize].state = NodeState::Pending;
                    t
                }
                None => {
                    let last = st.last_node(seg);
                    let n = st.new_node(Node {
                        seg,
                        offset: mapped,
                        size: growth,
                        prev: last,
                        next: NONE,
                        small,
                        state: NodeState::Pending,
                    });
                    st.nodes[last as usize].next = n;
                    n
                }
            }
        };
        Ok(node)
    }
}

impl<B: Backend, Seg: DeviceMemory<B = B>> State<B, Seg> {
    /// Whether `ptr` lies in one of the expandable ranges.
    pub(super) fn in_expandable(&self, ptr: u64) -> bool {
        self.expandable.iter().flatten().any(|e| {
            let base = e.range.base();
            ptr >= base && ptr - base < e.range.reserved() as u64
        })
    }

    /// Bytes of addresses the expandable ranges reserve (mapped or not).
    pub(super) fn expandable_address_space(&self) -> usize {
        self.expandable.iter().flatten().map(|e| e.range.reserved()).sum()
    }

    /// Before a best-fit search of stream `tag`'s list for a block of the
    /// class, when the class grows an expandable segment: moves the list's
    /// cached blocks (its `recent` cache, `state.rs`) to its free set,
    /// merged with their free neighbours, so the search sees them.
    ///
    /// Left in the cache, the blocks freed last were invisible to best fit
    /// until nothing else fitted: a request went to an older free block,
    /// often higher in the segment or its free tail, and the holes just
    /// freed stayed behind, mapped. On a replayed training trace
    /// (`benches/fragmentation.py`: the backward pass frees activations
    /// while gradients of other sizes come and go) that kept a few percent
    /// more mapped than was ever live; PyTorch, which has no such cache,
    /// merges every free at once (`free_block` in `CUDACachingAllocator.cpp`).
    /// A request of a cached block's size still takes it back first, without
    /// touching the set. Pools of plain segments are left as they were.
    #[inline]
    pub(super) fn merge_cached_if_expandable(&mut self, tag: u64, small: bool) {
        if self.expandable[usize::from(!small)].is_some() {
            if let Some(l) = self.list_of(tag) {
                self.flush_recent(l);
            }
        }
    }

    /// The last node of segment `seg`'s chain.
    pub(super) fn last_node(&self, seg: u32) -> u32 {
        let mut n = self.segments[seg as usize].as_ref().map_or(NONE, |s| s.first);
        while n != NONE && self.nodes[n as usize].next != NONE {
            n = self.nodes[n as usize].next;
        }
        n
    }

    /// Unmaps the free tails of the expandable segments (whole granules),
    /// and drops a segment left empty; its range stays reserved.
    pub(super) fn shrink_expandable(&mut self) {
        for class in 0..2 {
            let Some(exp) = self.expandable[class].as_ref() else { continue };
            let seg = exp.seg;
            if seg == NONE {
                continue;
            }
            let tail = self.last_node(seg);
            if self.nodes[tail as usize].state != (NodeState::Free { tag: ANY }) {
                continue;
            }
            let (offset, size) = (self.nodes[tail as usize].offset, self.nodes[tail as usize].size);
            let Some(exp) = self.expandable[class].as_mut() else { continue };
            let Ok(keep) = round_up(offset, exp.range.granularity()) else { continue };
            let end = offset + size;
            if keep >= end {
                continue;
            }
            // SAFETY: the bytes past `keep` lie in the segment's last block,
            // free for every stream: no block handed out covers them, and the
            // events of their last uses have completed (that is how a block
            // becomes free for any stream, `state.rs`).
            if unsafe { exp.range.shrink_to(keep) }.is_err() {
                continue;
            }
            let ordinal = exp.range.ordinal();
            let base = exp.range.base();
            self.reserved -= end - keep;
            self.counters.segments_released += 1;
            if history::recording() {
                let device = history::DeviceKey { backend: B::KIND, ordinal };
                let stream = self.segments[seg as usize].as_ref().map_or(0, |s| s.stream);
                history::record_segment(history::Action::SegmentUnmap, device, base + keep as u64, end - keep, stream);
            }
            self.take_free(tail);
            if keep > offset {
                // Part of the block stays mapped: it stays free, shorter.
                self.nodes[tail as usize].size = keep - offset;
                self.free_and_merge(tail, ANY);
            } else {
                let prev = self.nodes[tail as usize].prev;
                self.vacate(tail);
                if prev == NONE {
                    // Nothing left mapped: the segment goes, the range stays.
                    self.segments[seg as usize] = None;
                    self.vacant_segments.push(seg);
                    if let Some(exp) = self.expandable[class].as_mut() {
                        exp.seg = NONE;
                    }
                    continue;
                }
                self.nodes[prev as usize].next = NONE;
            }
            if let Some(entry) = self.segments[seg as usize].as_mut() {
                entry.size = keep;
            }
        }
    }
}
