//! The pool's vocabulary: size classes, list tags, and the nodes that cut
//! segments into blocks (`state.rs` keeps them; `expandable.rs` and
//! `graph_pools.rs` work on them).

/// Every request is rounded up to a multiple of this.
pub(super) const ROUND: usize = 512;
/// The largest request of the small class.
pub(super) const SMALL_MAX: usize = 1 << 20;
/// The size of a small-class segment.
pub(super) const SMALL_SEGMENT: usize = 2 << 20;
/// The size of a shared large-class segment.
pub(super) const LARGE_SEGMENT: usize = 20 << 20;
/// Large requests above this get a segment of their own.
pub(super) const LARGE_EXACT_ABOVE: usize = 10 << 20;
/// A segment of its own is rounded up to a multiple of this.
pub(super) const LARGE_ROUND: usize = 2 << 20;
/// Tag of blocks free for any stream.
pub(super) const ANY: u64 = u64::MAX;
/// The bit that marks a graph pool's list (see `graph_pools.rs`): stream
/// ids stay far below it.
pub(super) const PRIVATE: u64 = 1 << 63;

/// Whether `tag` names a list of a graph pool.
pub(super) fn is_private(tag: u64) -> bool {
    tag != ANY && tag & PRIVATE != 0
}

/// No node or segment: the end of a chain, an unmapped range.
pub(super) const NONE: u32 = u32::MAX;
/// Most bytes a pool reserves at once (2 TiB; `grow` checks it): every node
/// covers at least [`ROUND`] bytes of a segment, so below this there are
/// fewer than [`NONE`] nodes and segments, and [`index`] cannot wrap.
pub(super) const MAX_RESERVED: usize = (NONE as usize).saturating_mul(ROUND);

/// Position `i` of the node or segment table as its `u32` index.
#[allow(clippy::cast_possible_truncation)] // i < NONE: the tables stay under MAX_RESERVED / ROUND
pub(super) fn index(i: usize) -> u32 {
    debug_assert!(i < NONE as usize, "pool index {i} past u32");
    i as u32
}

/// What a node's bytes are now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeState {
    /// Handed out as the block with serial number `serial`.
    Allocated {
        requested: usize,
        serial: u64,
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

/// A block of a segment, linked to its neighbours in the segment by index.
/// Aligned to a cache line: an allocation or free reads one node, and a
/// node spread over two lines cost a second miss between other work.
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
pub(super) struct Node {
    pub(super) seg: u32,
    pub(super) offset: usize,
    pub(super) size: usize,
    pub(super) prev: u32,
    pub(super) next: u32,
    pub(super) small: bool,
    pub(super) state: NodeState,
}

/// A segment of the pool and its first node.
pub(super) struct SegmentEntry<Seg> {
    /// Owns the memory; dropping the entry frees it. `None` for an
    /// expandable segment, whose memory is its range's (`State::expandable`).
    pub(super) _memory: Option<Seg>,
    pub(super) base: u64,
    pub(super) size: usize,
    pub(super) first: u32,
    /// The graph pool the segment's blocks belong to (its serial), 0 for none.
    pub(super) graph: u64,
    /// The id of the stream whose allocation made the segment (0 where the
    /// backend has none): the segment's stream in reports and snapshots,
    /// as PyTorch's. Its blocks serve every stream all the same.
    pub(super) stream: u64,
}

/// A node just handed out (`State::hand_out`): the block's token (the
/// node's index), address and serial number. All `u64`: a `u32` field was
/// read back with a wider load, which stalls store forwarding.
#[derive(Debug, Clone, Copy)]
pub(super) struct HandedOut {
    pub(super) token: u64,
    pub(super) ptr: u64,
    pub(super) serial: u64,
}
