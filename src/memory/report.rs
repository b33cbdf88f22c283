//! What a resource reports of itself: a pool's usage and fragmentation
//! ([`PoolReport`], with its [`PoolCounters`] and a map of every segment's
//! blocks; [`MemoryResource::report`](super::MemoryResource::report)), and the
//! counts of a [`StatisticsResource`](super::StatisticsResource)
//! ([`Statistics`]; [`MemoryResource::statistics`](super::MemoryResource::statistics)).
//! Plain data, below the resources that fill it in and the trait that returns it.

use std::fmt;

#[cfg(doc)]
use crate::error::Error;

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
    /// Streams whose free lists the pool retired, fencing their blocks into
    /// the shared list and letting go of its handle on the stream.
    pub streams_released: u64,
    /// Frees refused: blocks the pool did not hand out, or not live in it
    /// ([`MemoryError::ForeignBlock`](crate::memory::MemoryError::ForeignBlock)).
    pub refused_frees: u64,
    /// Freed blocks kept out of reuse for good: a block freed on a borrowed
    /// stream (`Device::stream_is_borrowed`) after uses on other streams,
    /// when neither those uses nor the device could be waited for.
    pub blocks_withheld: u64,
    /// Graph pools made: captures that allocated (see `memory/pool/graph_pools.rs`).
    pub graph_pools: u64,
    /// Graph pools given back to the pool once their graphs were gone.
    pub graph_pools_released: u64,
    /// Allocations in a capture served from blocks freed earlier in it.
    pub graph_reuses: u64,
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
    /// Size in bytes (of an expandable segment: the bytes mapped).
    pub size: usize,
    /// The id of the stream whose allocation made the segment (0 where the
    /// backend has none); its free blocks may serve other streams too.
    pub stream: u64,
    /// Whether its blocks are of the small class (requests up to 1 MiB,
    /// `memory/pool/mod.rs`), PyTorch's small pool.
    pub small: bool,
    /// Whether it is an expandable segment (`memory/pool/expandable.rs`).
    pub expandable: bool,
    /// The id of the capture whose graph pool holds the segment
    /// (`memory/pool/graph_pools.rs`; `Device::capture_id`), `None` for
    /// the pool's shared memory.
    pub graph_capture: Option<u64>,
    /// Its blocks.
    pub blocks: Vec<BlockReport>,
}

/// Usage and fragmentation of a [`CachingPool`](super::CachingPool) (after cubecl's `memory_report`).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolReport {
    /// Bytes held from the storage: of expandable segments, the bytes
    /// mapped (physical memory), not the addresses reserved for them.
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
    /// Whether the pool grows expandable segments, and how.
    pub expandable: Expandable,
    /// Bytes of device addresses the expandable segments' ranges reserve
    /// (0 without them). Addresses only: no memory, not in `reserved`.
    pub address_space: usize,
}

/// Whether a [`CachingPool`](super::CachingPool) grows expandable segments
/// (`PoolConfig::expandable`, `GPUPORT_POOL=expandable`), in its [`PoolReport`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Expandable {
    /// Not asked for: plain segments.
    #[default]
    Off,
    /// On, over the driver's virtual memory management: physical memory is
    /// mapped and unmapped at the end of one reserved range per size class.
    Virtual,
    /// On, emulated over one plain allocation per size class (the host
    /// backend): the same bookkeeping, but trimming returns nothing to the
    /// system until the pool goes.
    Emulated,
    /// Asked for, but the device or driver cannot: plain segments, for the
    /// reason given.
    FellBack(String),
}

impl fmt::Display for Expandable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expandable::Off => write!(f, "off"),
            Expandable::Virtual => write!(f, "on (virtual memory)"),
            Expandable::Emulated => write!(f, "on (emulated over one allocation)"),
            Expandable::FellBack(why) => write!(f, "fell back to plain segments: {why}"),
        }
    }
}

impl fmt::Display for PoolReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // For display: f64 rounding of a byte count is fine.
        #[allow(clippy::cast_precision_loss)]
        let mib = |b: usize| b as f64 / f64::from(1u32 << 20);
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
        if self.expandable != Expandable::Off {
            writeln!(
                f,
                "  expandable segments: {} ({:.2} MiB of addresses reserved)",
                self.expandable,
                mib(self.address_space)
            )?;
        }
        let c = &self.counters;
        writeln!(
            f,
            "  {} allocations ({} same-stream reuses, {} shared reuses), {} frees, {} segments allocated, {} released, {} fences, {} OOM retries, {} OOM failures, {} streams released, {} refused frees",
            c.allocations, c.same_stream_reuses, c.shared_reuses, c.frees, c.segments_allocated, c.segments_released, c.fences, c.oom_retries, c.oom_failures, c.streams_released, c.refused_frees
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

/// Counts of a [`StatisticsResource`](super::StatisticsResource) (bytes as requested).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Statistics {
    /// Bytes allocated and not yet freed.
    pub current_bytes: usize,
    /// Highest `current_bytes` seen.
    pub peak_bytes: usize,
    /// Bytes allocated over the adaptor's life.
    pub total_bytes: usize,
    /// Allocations not yet freed.
    pub current_count: usize,
    /// Highest `current_count` seen.
    pub peak_count: usize,
    /// Allocations over the adaptor's life.
    pub total_count: usize,
}
