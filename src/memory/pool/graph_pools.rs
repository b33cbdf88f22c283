//! Graph pools: the caching pool's memory for stream captures, after
//! PyTorch's graph-private pools.
//!
//! A graph replays into the addresses its capture was given, long after
//! the capture, so memory handed out on a capturing stream must not go to
//! anyone else while the graph can run. The rules:
//! - An allocation on a capturing stream is served from the **graph pool**
//!   of that capture (made at its first allocation): from blocks freed
//!   earlier in the same capture on the same stream (stream order inside
//!   the graph makes that reuse safe, as it does outside), else from new
//!   segments that belong to the graph pool alone.
//! - The graph pool lives as long as the graph and every executable graph
//!   made from it: the capture is handed an owner (`Device::keep_for_graph`)
//!   whose drop marks the pool gone. For gpuport's own captures the graph
//!   keeps it ([`Capture`](crate::Capture)); for another library's (a
//!   `torch.cuda.graph`, a CuPy capture on a foreign stream) the driver's
//!   graph does, through a CUDA/HIP user object, which the driver releases
//!   once the graph, its executables and their launches are gone.
//! - A block of a graph pool freed outside its capture (after it, or on a
//!   stream the capture did not allocate on) is **parked**: nobody gets it
//!   while the graph lives. So is a block freed on another library's stream
//!   (a `torch.cuda.graph` or CuPy capture), even inside the capture: the
//!   pool never asks the driver about a stream whose owner may have
//!   destroyed it, so it cannot tell, and such a capture's memory is the sum
//!   of its allocations.
//! - When the graph is gone, the pool's free blocks join the shared list,
//!   parked blocks are filed as frees on their streams, and its segments
//!   become ordinary: their live blocks (a graph's outputs still held) are
//!   freed as any other.
//! - Out of memory in a capture: free cached segments are released (no
//!   waiting: a capture forbids it) and the growth is tried once more; then
//!   [`GraphErrorKind::OutOfMemory`]. The capture itself is untouched.
//!
//! - A pool dropped while a graph of its lives leaves that graph's segments
//!   allocated for good, rather than free them under the graph.
//!
//! Limits: a graph pool serves one capture; PyTorch's `pool=` sharing
//! between graphs cannot be seen through `CUDAPluggableAllocator`'s two
//! functions.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use super::chain::{HandedOut, NodeState, ANY, PRIVATE, SMALL_MAX};
use super::state::{GraphPool, Orphans, State};
use super::{CachingPool, Storage};
use crate::backend::{Backend, Device, Event, Stream};
use crate::error::{Error, GraphErrorKind, Result};

/// What the graph holds for its pool: dropped with the graph.
struct GraphHold {
    gone: Arc<AtomicBool>,
    pools_gone: Arc<AtomicUsize>,
    orphans: Orphans,
}

impl Drop for GraphHold {
    fn drop(&mut self) {
        self.gone.store(true, Ordering::Release);
        self.pools_gone.fetch_add(1, Ordering::AcqRel);
        // Segments the caching pool left to the graph go with it.
        drop(std::mem::take(&mut *self.orphans.lock().unwrap_or_else(|p| p.into_inner())));
    }
}

impl<B: Backend> GraphPool<B> {
    /// Whether the pool's capture may still run: not seen over, and its
    /// graph not gone.
    fn capture_may_run(&self) -> bool {
        !self.capture_over && !self.gone.load(Ordering::Acquire)
    }
}

impl<B: Backend, Seg> State<B, Seg> {
    /// Whether a capture the pool has served may still run. A device-wide
    /// synchronization would invalidate it (CUDA forbids synchronizing a
    /// device while any of its streams captures, in every mode), and the
    /// pool cannot see another library's capture end: it makes none then.
    pub(super) fn captures_may_run(&self) -> bool {
        self.graph_pools.iter().any(GraphPool::capture_may_run)
    }

    /// Notes that `stream` (`stream_tag`) captures `capture` now (`None`:
    /// nothing): a graph pool whose capture allocated on that stream and is
    /// another is over, since a stream stays in a capture it took part in
    /// until that capture ends.
    pub(super) fn note_capture_of(&mut self, stream_tag: u64, capture: Option<u64>) {
        for pool in &mut self.graph_pools {
            if !pool.capture_over && Some(pool.capture) != capture && pool.lists.iter().any(|(s, _)| *s == stream_tag) {
                pool.capture_over = true;
            }
        }
    }
}

impl<B: Backend, S: Storage<B>> CachingPool<B, S> {
    /// Reclaims the graph pools whose graphs are gone, and drops owners the
    /// driver released (one atomic load each when there are none).
    #[inline]
    pub(super) fn reclaim_graph_pools(&self) {
        crate::backend::graph::drop_released();
        if self.graphs_gone.load(Ordering::Acquire) != 0 {
            self.reclaim_graph_pools_now();
        }
    }

    #[cold]
    fn reclaim_graph_pools_now(&self) {
        // Zeroed first: a graph that goes during the scan counts again.
        self.graphs_gone.store(0, Ordering::Release);
        let left = self.locked(|st| self.reclaim_locked(st));
        if left {
            self.graphs_gone.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Gives the memory of every gone graph back to the pool; whether one
    /// is left (a parked block's stream captures now: tried again later).
    fn reclaim_locked(&self, st: &mut State<B, S::Segment>) -> bool {
        let device = self.dev();
        let mut left = false;
        let mut i = 0;
        while i < st.graph_pools.len() {
            if !st.graph_pools[i].gone.load(Ordering::Acquire) {
                i += 1;
                continue;
            }
            // Free blocks: only the graph used them, and it is gone.
            for &(_, tag) in &st.graph_pools[i].lists.clone() {
                if let Some(l) = st.list_of(tag) {
                    for n in st.lists[l].take_nodes() {
                        st.free_and_merge(n, ANY);
                    }
                }
            }
            // Parked blocks: freed on their streams, as any free.
            for (n, stream, mut after) in std::mem::take(&mut st.graph_pools[i].parked) {
                // Under the pool's lock: a stream's gate only if entered at once.
                let section = crate::backend::graph::try_capture_section::<B>(&stream);
                let capturing = !device.stream_is_borrowed(&stream) && super::capturing::<B>(device, &stream);
                if section.is_none() || capturing {
                    drop(section);
                    st.graph_pools[i].parked.push((n, stream, after));
                    continue;
                }
                // `free_to_graph_pool` took the block out of the counts already.
                let size = st.nodes[n as usize].size;
                st.in_use += size;
                self.file_free(st, n, size, 0, &stream, &mut after);
            }
            if !st.graph_pools[i].parked.is_empty() {
                left = true;
                i += 1;
                continue;
            }
            let serial = st.graph_pools.swap_remove(i).serial;
            for seg in st.segments.iter_mut().flatten() {
                if seg.graph == serial {
                    seg.graph = 0;
                }
            }
            st.counters.graph_pools_released += 1;
        }
        st.prune_empty_lists();
        left
    }

    /// `allocate` on a stream capturing `capture`, under the lock: from the
    /// capture's graph pool (see the module docs).
    pub(super) fn allocate_in_capture(
        &self,
        st: &mut State<B, S::Segment>,
        bytes: usize,
        size: usize,
        stream: &Stream<B>,
        capture: u64,
    ) -> Result<HandedOut> {
        let device = self.dev();
        let small = size <= SMALL_MAX;
        st.clock += 1;
        let g = match st.graph_pools.iter().position(|g| g.capture == capture && !g.capture_over) {
            Some(g) => g,
            None => {
                st.graph_serials += 1;
                let (gone, orphans) = (Arc::new(AtomicBool::new(false)), Orphans::default());
                let hold =
                    GraphHold { gone: gone.clone(), pools_gone: self.graphs_gone.clone(), orphans: orphans.clone() };
                st.graph_pools.push(GraphPool {
                    serial: st.graph_serials,
                    capture,
                    capture_over: false,
                    lists: Vec::new(),
                    parked: Vec::new(),
                    gone,
                    orphans,
                });
                st.counters.graph_pools += 1;
                // The graph keeps the hold; if the capture is over already
                // (a race with its end), the hold drops now and the pool is
                // reclaimed at the next call.
                device.keep_for_graph(stream, Arc::new(hold));
                st.graph_pools.len() - 1
            }
        };
        let serial = st.graph_pools[g].serial;
        let stream_tag = device.stream_id(stream).unwrap_or(0);
        let tag = match st.graph_pools[g].lists.iter().find(|(s, _)| *s == stream_tag) {
            Some(&(_, tag)) => tag,
            None => {
                st.private_tags += 1;
                let tag = PRIVATE | st.private_tags;
                st.graph_pools[g].lists.push((stream_tag, tag));
                tag
            }
        };
        let l = st.list_for(device, tag, stream);
        st.touch(l);
        let mut n = st.take_recent(l, size, small).or_else(|| st.take_best(tag, size, small));
        if n.is_none() && st.flush_recent(l) {
            n = st.take_best(tag, size, small);
        }
        if let Some(n) = n {
            st.counters.graph_reuses += 1;
            return Ok(st.hand_out(n, size, bytes, tag));
        }
        let node = match self.grow(st, size, small, stream_tag) {
            Ok(node) => node,
            Err(Error::OutOfMemory { .. }) => {
                // Cached segments free for any stream need no wait: release them.
                st.counters.oom_retries += 1;
                st.release_free_segments(0);
                self.grow(st, size, small, stream_tag).map_err(|e| {
                    st.counters.oom_failures += 1;
                    Error::Graph {
                        backend: B::KIND,
                        op: "allocate",
                        kind: GraphErrorKind::OutOfMemory,
                        reason: format!(
                            "the capture's graph pool could not grow by {size} bytes ({e}); the capture is \
                             still running, and can be ended or discarded"
                        ),
                    }
                })?
            }
            Err(e) => return Err(e),
        };
        let seg = st.nodes[node as usize].seg as usize;
        if let Some(entry) = st.segments[seg].as_mut() {
            entry.graph = serial;
        }
        Ok(st.hand_out(node, size, bytes, tag))
    }

    /// `deallocate` on a stream capturing `capture`, under the lock: frees
    /// the block if it belongs to that capture's graph pool (`Some(true)`,
    /// or `Some(false)` for a block that is not live); `None` for any other
    /// block, which the caller holds back until the capture is over.
    pub(super) fn free_in_capture(
        &self,
        st: &mut State<B, S::Segment>,
        block: &crate::memory::block::Block<B>,
        stream: &Stream<B>,
        capture: u64,
        after: &mut Vec<Event<B>>,
        count: bool,
    ) -> Option<bool> {
        let (n, ..) = st.live_block(block.token(), block.serial(), block.ptr(), block.len())?;
        let graph = st.graph_of(n);
        let ours = graph != 0 && st.graph_pools.iter().any(|g| g.serial == graph && g.capture == capture);
        ours.then(|| self.free_locked(st, block, stream, Some(capture), after, count))
    }

    /// Frees node `n` of graph pool `graph` (the caller took it out of the
    /// counts), on `stream` after `after`: back into the pool's list of
    /// `stream` if the free is part of the pool's capture, else parked.
    /// `capture` is the stream's capture if the caller asked (`None`: not
    /// asked, for a borrowed stream).
    pub(super) fn free_to_graph_pool(
        &self,
        st: &mut State<B, S::Segment>,
        n: u32,
        graph: u64,
        stream: &Stream<B>,
        capture: Option<u64>,
        after: &mut Vec<Event<B>>,
    ) {
        let device = self.dev();
        let Some(g) = st.graph_pools.iter().position(|p| p.serial == graph) else {
            // Unreachable: a pool's segments are unstamped when it goes.
            st.nodes[n as usize].state = NodeState::Pending;
            st.counters.blocks_withheld += 1;
            return;
        };
        let stream_tag = device.stream_id(stream).unwrap_or(0);
        let back_to = {
            let pool = &mut st.graph_pools[g];
            let open = after.is_empty() && pool.capture_may_run();
            match pool.lists.iter().find(|(s, _)| *s == stream_tag) {
                // A stream the capture allocated on, which the caller found
                // capturing. The caller does not ask about another library's
                // stream (its owner may have destroyed it: the driver then
                // crashed inside cuStreamGetCaptureInfo under CuPy's graph
                // tests), so such a free is parked.
                Some(&(_, tag)) if open => {
                    let now = capture;
                    if now.is_some() {
                        pool.capture_over = now != Some(pool.capture);
                    }
                    (now == Some(pool.capture)).then_some(tag)
                }
                _ => None,
            }
        };
        match back_to {
            Some(tag) => {
                let l = st.list_for(device, tag, stream);
                st.touch(l);
                st.free_recent(n, l);
            }
            None => {
                st.nodes[n as usize].state = NodeState::Pending;
                st.graph_pools[g].parked.push((n, stream.clone(), std::mem::take(after)));
            }
        }
    }
}
