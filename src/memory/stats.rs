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

/// Counts what passes through to `inner`; lock-free.
pub struct StatisticsResource<B: Backend> {
    inner: Arc<dyn MemoryResource<B>>,
    current_bytes: AtomicUsize,
    peak_bytes: AtomicUsize,
    total_bytes: AtomicUsize,
    current_count: AtomicUsize,
    peak_count: AtomicUsize,
    total_count: AtomicUsize,
}

impl<B: Backend> StatisticsResource<B> {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn MemoryResource<B>>) -> Self {
        StatisticsResource {
            inner,
            current_bytes: AtomicUsize::new(0),
            peak_bytes: AtomicUsize::new(0),
            total_bytes: AtomicUsize::new(0),
            current_count: AtomicUsize::new(0),
            peak_count: AtomicUsize::new(0),
            total_count: AtomicUsize::new(0),
        }
    }

    /// The counts now.
    pub fn get(&self) -> Statistics {
        let l = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        Statistics {
            current_bytes: l(&self.current_bytes),
            peak_bytes: l(&self.peak_bytes),
            total_bytes: l(&self.total_bytes),
            current_count: l(&self.current_count),
            peak_count: l(&self.peak_count),
            total_count: l(&self.total_count),
        }
    }
}

/// Raises `peak` to `now` if `now` is higher. A peak never falls, so one
/// that already reads `now` or more needs no locked instruction: in a
/// steady loop of allocations and frees this saves two of the six atomic
/// read-modify-writes an allocation makes here.
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
        let now = self.current_bytes.fetch_add(len, Ordering::Relaxed) + len;
        raise_peak(&self.peak_bytes, now);
        self.total_bytes.fetch_add(len, Ordering::Relaxed);
        let count = self.current_count.fetch_add(1, Ordering::Relaxed) + 1;
        raise_peak(&self.peak_count, count);
        self.total_count.fetch_add(1, Ordering::Relaxed);
        Ok(block)
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()> {
        let len = block.len();
        // A block `inner` refuses was never counted here (or is counted
        // still, under the block it copies): leave the counts alone.
        self.inner.deallocate(block, stream, after)?;
        self.current_bytes.fetch_sub(len, Ordering::Relaxed);
        self.current_count.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }
    forward_to_inner!();
    fn statistics(&self) -> Option<Statistics> {
        Some(self.get())
    }
}
