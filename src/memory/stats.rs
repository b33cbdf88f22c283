//! An adaptor counting bytes and allocations (current, peak, total), like
//! RMM's `statistics_resource_adaptor`.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::backend::{Event, HostRegistration, MemoryInfo, Stream};
use crate::error::Result;

use super::block::Block;
use super::ipc_handle::IpcHandle;
use super::pinned::{PinnedFlags, PinnedMemory};
use super::report::PoolReport;
use super::resource::{forward_to_inner, MemoryResource};
use crate::backend::Backend;

pub use super::report::Statistics;

/// Counts what passes through to `inner`; lock-free. (The device's observed
/// resource does without it over a caching pool, which counts the same
/// figures under its own lock: [`MemoryResource::statistics`].)
///
/// Allocations and frees each count into their own running totals, so an
/// allocation makes two atomic additions and a free two (the current
/// figures are the totals' difference): a third fewer than counting the
/// current figures as well, on the path every Python `gpuport.memory.alloc`
/// takes (benches/memory.rs, `python_path`).
pub struct StatisticsResource<B: Backend> {
    inner: Arc<dyn MemoryResource<B>>,
    /// Bytes and allocations handed out over the adaptor's life.
    total_bytes: AtomicUsize,
    total_count: AtomicUsize,
    /// Bytes and allocations freed over the adaptor's life.
    freed_bytes: AtomicUsize,
    freed_count: AtomicUsize,
    peak_bytes: AtomicUsize,
    peak_count: AtomicUsize,
}

impl<B: Backend> StatisticsResource<B> {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn MemoryResource<B>>) -> Self {
        StatisticsResource {
            inner,
            total_bytes: AtomicUsize::new(0),
            total_count: AtomicUsize::new(0),
            freed_bytes: AtomicUsize::new(0),
            freed_count: AtomicUsize::new(0),
            peak_bytes: AtomicUsize::new(0),
            peak_count: AtomicUsize::new(0),
        }
    }

    /// The counts now. Under concurrent calls each figure is exact at some
    /// moment of the call, not all at the same one.
    pub fn get(&self) -> Statistics {
        // The frees first: a free's block was counted as allocated before
        // (the allocation's addition happens before the free's), so the
        // totals read after are never below them.
        let freed_bytes = self.freed_bytes.load(Ordering::Acquire);
        let freed_count = self.freed_count.load(Ordering::Acquire);
        Tally {
            freed_bytes,
            freed_count,
            total_bytes: self.total_bytes.load(Ordering::Acquire),
            total_count: self.total_count.load(Ordering::Acquire),
            peak_bytes: self.peak_bytes.load(Ordering::Relaxed),
            peak_count: self.peak_count.load(Ordering::Relaxed),
        }
        .get()
    }
}

/// The same counts for a resource that keeps them under a lock of its own
/// (the caching pool, `src/memory/pool/mod.rs`): plain additions where
/// [`StatisticsResource`] makes two atomic ones per allocation and two per
/// free. The device's observed resource (`src/dynamic/memory.rs`) reads a
/// pool's own counts and skips the adaptor.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    total_bytes: usize,
    total_count: usize,
    freed_bytes: usize,
    freed_count: usize,
    peak_bytes: usize,
    peak_count: usize,
}

impl Tally {
    /// Counts an allocation of `bytes` (as requested).
    #[inline]
    pub(crate) fn allocated(&mut self, bytes: usize) {
        self.total_bytes = self.total_bytes.saturating_add(bytes);
        self.total_count = self.total_count.saturating_add(1);
        self.peak_bytes = self.peak_bytes.max(self.total_bytes.saturating_sub(self.freed_bytes));
        self.peak_count = self.peak_count.max(self.total_count.saturating_sub(self.freed_count));
    }

    /// Counts a free of an allocation of `bytes`.
    #[inline]
    pub(crate) fn freed(&mut self, bytes: usize) {
        self.freed_bytes = self.freed_bytes.saturating_add(bytes);
        self.freed_count = self.freed_count.saturating_add(1);
    }

    /// The counts.
    pub(crate) fn get(&self) -> Statistics {
        Statistics {
            current_bytes: self.total_bytes.saturating_sub(self.freed_bytes),
            peak_bytes: self.peak_bytes,
            total_bytes: self.total_bytes,
            current_count: self.total_count.saturating_sub(self.freed_count),
            peak_count: self.peak_count,
            total_count: self.total_count,
        }
    }
}

/// Raises `peak` to `now` if `now` is higher. A peak never falls, so one
/// that already reads `now` or more needs no locked instruction: in a
/// steady loop of allocations and frees an allocation makes no atomic
/// read-modify-write for its peaks.
#[inline]
fn raise_peak(peak: &AtomicUsize, now: usize) {
    if now > peak.load(Ordering::Relaxed) {
        peak.fetch_max(now, Ordering::Relaxed);
    }
}

impl<B: Backend> fmt::Debug for StatisticsResource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StatisticsResource({:?}, {:?})", self.inner, self.get())
    }
}

// SAFETY: blocks pass between the caller and `inner` unchanged; the
// counters are all this adaptor adds.
unsafe impl<B: Backend> MemoryResource<B> for StatisticsResource<B> {
    fn device(&self) -> &Arc<B::Device> {
        self.inner.device()
    }
    fn name(&self) -> &'static str {
        "statistics"
    }
    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> Result<Block<B>> {
        let block = self.inner.allocate(bytes, stream)?;
        let len = block.len();
        // AcqRel: a free of this block (on any thread) comes after these
        // additions, so `get`'s loads, frees first, never see it freed and
        // not allocated.
        let total = self.total_bytes.fetch_add(len, Ordering::AcqRel) + len;
        let count = self.total_count.fetch_add(1, Ordering::AcqRel) + 1;
        raise_peak(&self.peak_bytes, total.saturating_sub(self.freed_bytes.load(Ordering::Acquire)));
        raise_peak(&self.peak_count, count.saturating_sub(self.freed_count.load(Ordering::Acquire)));
        Ok(block)
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()> {
        let len = block.len();
        // A block `inner` refuses was never counted here (or is counted
        // still, under the block it copies): leave the counts alone.
        self.inner.deallocate(block, stream, after)?;
        self.freed_bytes.fetch_add(len, Ordering::AcqRel);
        self.freed_count.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
    forward_to_inner!();
    fn statistics(&self) -> Option<Statistics> {
        Some(self.get())
    }
}
