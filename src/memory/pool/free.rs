//! The caching pool's free path: `deallocate`'s checks, the frees held
//! back on capturing streams, the variant inside `without_waiting`, and
//! filing a freed block for reuse, in its stream's list or behind a fence.

use super::chain::NodeState;
use super::state::{Fence, State};
use super::{capturing, CachingPool, HeldBack, Storage};
use crate::backend::{Backend, Device, Event, Stream};
use crate::error::{Error, Result};
use crate::memory::block::Block;
use crate::memory::no_wait::{self, waiting_refused};
use crate::memory::resource::MemoryResource;

impl<B: Backend, S: Storage<B>> CachingPool<B, S> {
    /// `deallocate` inside [`without_waiting`](crate::memory::without_waiting): the
    /// block is sent back ([`no_wait::bounce`]) if the free would wait for
    /// another thread (the gate, the lock, the pool's upkeep), for the
    /// device (a borrowed stream, segments to release) or would need a
    /// capture's rules; otherwise the free `deallocate` would make.
    fn deallocate_without_waiting(
        &self,
        block: Block<B>,
        stream: &Stream<B>,
        mut after: Vec<Event<B>>,
        count: bool,
    ) -> Result<()> {
        let device = self.dev();
        let simple = !self.upkeep_due()
            && !device.stream_is_borrowed(stream)
            && block.check_owner(self.id, self.name()).is_ok()
            && matches!(device.capture_id(stream), Ok(None));
        let section = simple.then(|| crate::backend::graph::try_capture_section::<B>(stream)).flatten();
        let st = section.as_ref().and_then(|_| match self.state.try_lock() {
            Ok(st) => Some(st),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        });
        // Past the threshold a free gives segments back to the driver, which may wait.
        let Some(mut st) = st.filter(|st| st.reserved <= self.config.release_threshold) else {
            return Err(no_wait::bounce(self.name(), block, stream, after));
        };
        let freed = self.free_locked(&mut st, &block, stream, None, &mut after, count);
        if !st.released.is_empty() {
            Self::unlock_then_release(st);
        }
        // The owner was checked: a refusal here is a block freed twice or forged.
        match freed {
            true => Ok(()),
            false => Err(self.not_live(&block)),
        }
    }

    /// The refusal of a block that is not live in this pool.
    #[cold]
    fn not_live(&self, block: &Block<B>) -> Error {
        block.refused(self.name(), "it is not a live block of this pool (freed already, or forged)")
    }

    /// Whether frees held back or graph pools to reclaim wait for the
    /// next allocation (which takes locks for them).
    pub(super) fn upkeep_due(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.held_back_count.load(Ordering::Acquire) != 0
            || self.graphs_gone.load(Ordering::Acquire) != 0
            || crate::backend::graph::released_pending()
    }

    /// Does the frees held back on streams that no longer capture.
    #[inline]
    pub(super) fn free_held_back(&self) {
        if self.held_back_count.load(std::sync::atomic::Ordering::Acquire) != 0 {
            self.free_held_back_now();
        }
    }

    #[cold]
    fn free_held_back_now(&self) {
        use std::sync::atomic::Ordering;
        let ready: Vec<HeldBack<B>> = {
            let mut held = self.held_back.lock().unwrap_or_else(|p| p.into_inner());
            let (ready, still): (Vec<_>, Vec<_>) =
                std::mem::take(&mut *held).into_iter().partition(|(_, s, _)| !capturing::<B>(self.dev(), s));
            *held = still;
            self.held_back_count.store(held.len(), Ordering::Release);
            ready
        };
        // Recorded in the history, and counted in the statistics, when they
        // were held back.
        for (block, stream, after) in ready {
            let _ = self.deallocate_block(block, &stream, after, false);
        }
    }

    /// `deallocate` while the history records: the free, and its record
    /// once made.
    #[cold]
    #[inline(never)]
    pub(super) fn deallocate_recorded(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()> {
        let (ptr, len) = (block.ptr(), block.len());
        let freed = self.deallocate_block(block, stream, after, true);
        if freed.is_ok() {
            self.record_block(crate::memory::history::Action::FreeCompleted, ptr, len, stream);
        }
        freed
    }

    /// `deallocate` without the history's record; `count`: whether the free
    /// counts in the statistics (false for a free held back, counted then).
    #[inline(always)]
    pub(super) fn deallocate_block(
        &self,
        block: Block<B>,
        stream: &Stream<B>,
        mut after: Vec<Event<B>>,
        count: bool,
    ) -> Result<()> {
        if waiting_refused() {
            return self.deallocate_without_waiting(block, stream, after, count);
        }
        let device = self.dev();
        self.reclaim_graph_pools();
        // The capture check and the free's record on the stream are one
        // decision: no gpuport capture begins or ends between them.
        let _section = crate::backend::graph::capture_section::<B>(stream);
        if let Err(e) = block.check_owner(self.id, self.name()) {
            self.locked(|st| st.counters.refused_frees += 1);
            return Err(e);
        }
        // A borrowed stream may have been destroyed by its owner before this
        // free (a CuPy array outliving its stream): it is not asked about
        // captures (see `State::fence`), and its frees are never held back.
        // On a capturing stream, a block of the capture's graph pool goes
        // back to it; any other is held back until the capture is over.
        let capture = if device.stream_is_borrowed(stream) {
            None
        } else {
            match device.capture_id(stream) {
                Ok(capture) => capture,
                Err(_) if capturing::<B>(device, stream) => Some(0),
                Err(_) => None,
            }
        };
        if let Some(capture) = capture {
            let freed = self.locked(|st| {
                let freed = self.free_in_capture(st, &block, stream, capture, &mut after, count);
                if freed.is_none() && count {
                    // Held back below: freed for the statistics now, as for
                    // the caller (a statistics adaptor over the pool counts
                    // it when `deallocate` returns).
                    st.tally.freed(block.len());
                }
                freed
            });
            let Some(freed) = freed else {
                let mut held = self.held_back.lock().unwrap_or_else(|p| p.into_inner());
                held.push((block, stream.clone(), after));
                self.held_back_count.store(held.len(), std::sync::atomic::Ordering::Release);
                return Ok(());
            };
            return if freed { Ok(()) } else { Err(self.not_live(&block)) };
        }
        // Only the bookkeeping runs under the lock: a refusal's message is
        // made, and the block and the events not kept are dropped, after it.
        if self.locked(|st| self.free_locked(st, &block, stream, None, &mut after, count)) {
            Ok(())
        } else {
            Err(self.not_live(&block))
        }
    }

    /// `deallocate` under the lock, of a block stamped with this pool's id,
    /// on a stream that does not capture, or a borrowed one (`capture` is
    /// `None` then: not asked), or on a stream capturing `capture`, for a
    /// block of that capture's graph pool: frees it, or, if it is not a
    /// live block of the pool, counts the refusal and returns false. Takes
    /// the events of `after` that it keeps. `count`: whether the free
    /// counts in the statistics (see `deallocate_block`).
    pub(super) fn free_locked(
        &self,
        st: &mut State<B, S::Segment>,
        block: &Block<B>,
        stream: &Stream<B>,
        capture: Option<u64>,
        after: &mut Vec<Event<B>>,
        count: bool,
    ) -> bool {
        let Some((n, size, requested)) = st.live_block(block.token(), block.serial(), block.ptr(), block.len()) else {
            st.counters.refused_frees += 1;
            return false;
        };
        st.clock += 1;
        st.counters.frees += 1;
        if count {
            st.tally.freed(block.len());
        }
        let graph = st.graph_of(n);
        if graph != 0 {
            st.in_use -= size;
            st.requested -= requested;
            self.free_to_graph_pool(st, n, graph, stream, capture, after);
            return true;
        }
        self.file_free(st, n, size, requested, stream, after);
        if self.config.validate {
            st.validate();
        }
        true
    }

    /// Files freed node `n` (`size` bytes held, `requested` asked for), last
    /// used on `stream` and after `after`'s events, for reuse.
    pub(super) fn file_free(
        &self,
        st: &mut State<B, S::Segment>,
        n: u32,
        size: usize,
        requested: usize,
        stream: &Stream<B>,
        after: &mut Vec<Event<B>>,
    ) {
        let device = self.dev();
        // A borrowed stream is not named (it may be gone, see `State::fence`):
        // its other streams' uses are waited for on the host (or, failing
        // that, by a device-wide synchronization), then the block joins the
        // stream's own list, whose reuse is ordered after the stream's work.
        // If neither wait succeeds, the block stays out of reuse for good
        // (and counted in use).
        if device.stream_is_borrowed(stream) && !after.is_empty() {
            let waited = after.iter().all(|e| device.synchronize_event(e).is_ok());
            if !(waited || (!st.captures_may_run() && device.synchronize_device().is_ok())) {
                st.counters.blocks_withheld += 1;
                return;
            }
            after.clear();
        }
        st.in_use -= size;
        st.requested -= requested;
        let tag = device.stream_id(stream);
        match tag {
            Some(t) if after.is_empty() => {
                let l = st.list_for(device, t, stream);
                st.touch(l);
                st.free_recent(n, l);
            }
            _ => {
                // Used on other streams (or streams without ids): wait for
                // every use, including this stream's, before any reuse.
                st.nodes[n as usize].state = NodeState::Pending;
                let mut events = std::mem::take(after);
                match st.take_event(device) {
                    Some(event) if device.record_event(&event, stream).is_ok() => events.push(event),
                    _ => {
                        let _ = device.synchronize(stream);
                    }
                }
                st.pending.push(Fence { events, nodes: vec![n] });
            }
        }
        if st.reserved > self.config.release_threshold {
            st.poll_pending(device);
            st.release_free_segments(self.config.release_threshold);
            if st.reserved > self.config.release_threshold {
                if let Some(l) = tag.and_then(|t| st.list_of(t)) {
                    st.fence(device, l);
                    st.prune_empty_lists();
                }
            }
        }
    }
}
