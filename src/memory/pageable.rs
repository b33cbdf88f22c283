//! Copies between ordinary (pageable) host memory and the device that do not
//! crawl: the transfer is cut into chunks, pipelined through pinned staging
//! buffers on several streams, each lane driven by its own host thread, so
//! host-side copying (into or out of staging) overlaps DMA and several host
//! cores share the memcpy.
//!
//! A plain pageable `cuMemcpyHtoD` makes the driver stage through its own
//! small pinned buffer with one thread, and serialises with other work
//! (PEERS.md pain point 9; NVIDIA/cuCollections#727).

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::backend::{check_range, Device, DeviceMemory, Event, HostMemory, Stream};
use crate::error::Result;

use super::current::current_resource;
use super::ext::MemoryBackend;
use super::pinned::{PinnedFlags, PinnedMemory};

/// Settings of a [`PageableCopier`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Bytes per chunk (and per staging buffer).
    pub chunk_bytes: usize,
    /// Lanes: each has a stream, two staging buffers and a host thread.
    pub lanes: usize,
    /// Transfers smaller than this go straight through the driver.
    pub direct_below: usize,
}

impl Default for PipelineConfig {
    /// 4 MiB chunks (`GPUPORT_PAGEABLE_CHUNK_MIB` overrides); one lane per
    /// core up to 16 (`GPUPORT_PAGEABLE_LANES` overrides); transfers under
    /// 1 MiB go direct. On the H100's 16-core host (docs/gpu-runs, run 10),
    /// 256 MiB H2D/D2H ran 5.4x/3.6x a plain pageable copy with 8 lanes,
    /// 5.8x/3.8x with 16, and 8 MiB chunks were slower than 4 MiB.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let positive_env =
            |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok()).filter(|&n| n > 0);
        let lanes = positive_env("GPUPORT_PAGEABLE_LANES").unwrap_or(cores.min(16));
        let chunk_mib = positive_env("GPUPORT_PAGEABLE_CHUNK_MIB").unwrap_or(4).min(1 << 10);
        PipelineConfig { chunk_bytes: chunk_mib << 20, lanes, direct_below: 1 << 20 }
    }
}

struct Lane<B: MemoryBackend> {
    stream: Stream<B>,
    /// From the device's current resource; back to its pinned pool when the
    /// copier is dropped (every lane has synchronized its stream by then).
    staging: [PinnedMemory<B>; 2],
    events: [Event<B>; 2],
}

/// Pipelined pageable copies on one device; see the [module docs](self).
///
/// The staging buffers and streams are made once, in [`new`](Self::new).
/// Calls are synchronous (they return when the data has arrived) and
/// serialised with each other.
pub struct PageableCopier<B: MemoryBackend> {
    device: Arc<B::Device>,
    config: PipelineConfig,
    lanes: Mutex<Vec<Lane<B>>>,
}

impl<B: MemoryBackend> fmt::Debug for PageableCopier<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageableCopier({}, {:?})", self.device.info().spec(), self.config)
    }
}

impl<B: MemoryBackend> PageableCopier<B> {
    /// Creates the lanes: `lanes` streams and `2 * lanes` pinned buffers of
    /// `chunk_bytes`, taken from the device's current resource.
    pub fn new(device: Arc<B::Device>, config: PipelineConfig) -> Result<Self> {
        crate::backend::check_alloc_size(config.chunk_bytes)?;
        let allocator = current_resource::<B>(&device)?;
        let staging = || allocator.alloc_pinned(config.chunk_bytes, PinnedFlags::PORTABLE);
        let mut lanes = Vec::with_capacity(config.lanes.max(1));
        for _ in 0..config.lanes.max(1) {
            lanes.push(Lane {
                stream: device.create_stream()?,
                staging: [staging()?, staging()?],
                events: [device.create_event()?, device.create_event()?],
            });
        }
        Ok(PageableCopier { device, config, lanes: Mutex::new(lanes) })
    }

    /// The settings.
    pub fn config(&self) -> PipelineConfig {
        self.config
    }

    /// Copies `src` into `dst[dst_offset..]` and waits for it.
    pub fn copy_to_device<M: DeviceMemory<B = B> + ?Sized>(
        &self,
        src: &[u8],
        dst: &M,
        dst_offset: usize,
    ) -> Result<()> {
        check_range("destination", dst_offset, src.len(), dst.len())?;
        if src.len() < self.config.direct_below {
            return self.device.copy_to_device(src, dst, dst_offset);
        }
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let parts = self.parts(src.len(), lanes.len());
        let device = &*self.device;
        let chunk = self.config.chunk_bytes;
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            for (lane, (start, len)) in lanes.iter_mut().zip(parts) {
                let part = &src[start..start + len];
                let at = dst_offset + start;
                handles.push(scope.spawn(move || lane_to_device(device, lane, part, dst, at, chunk)));
            }
            join_all(handles)
        })
    }

    /// Copies `src[src_offset..src_offset + dst.len()]` into `dst` and waits.
    pub fn copy_to_host<M: DeviceMemory<B = B> + ?Sized>(
        &self,
        src: &M,
        src_offset: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        check_range("source", src_offset, dst.len(), src.len())?;
        if dst.len() < self.config.direct_below {
            return self.device.copy_to_host(src, src_offset, dst);
        }
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let parts = self.parts(dst.len(), lanes.len());
        let device = &*self.device;
        let chunk = self.config.chunk_bytes;
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            let mut rest = dst;
            for (lane, (start, len)) in lanes.iter_mut().zip(parts) {
                let (part, tail) = rest.split_at_mut(len);
                rest = tail;
                let at = src_offset + start;
                handles.push(scope.spawn(move || lane_to_host(device, lane, src, at, part, chunk)));
            }
            join_all(handles)
        })
    }

    /// Splits `total` bytes into at most `lanes` contiguous parts of whole chunks.
    fn parts(&self, total: usize, lanes: usize) -> Vec<(usize, usize)> {
        let chunk = self.config.chunk_bytes;
        let chunks = total.div_ceil(chunk);
        let per_lane = chunks.div_ceil(lanes.max(1)).max(1) * chunk;
        (0..total).step_by(per_lane).map(|start| (start, per_lane.min(total - start))).collect()
    }
}

fn join_all(handles: Vec<std::thread::ScopedJoinHandle<'_, Result<()>>>) -> Result<()> {
    let mut first = Ok(());
    for h in handles {
        let outcome = h.join().unwrap_or_else(|_| Err(crate::Error::HostTask("a copy lane panicked".into())));
        if first.is_ok() {
            first = outcome;
        }
    }
    first
}

/// One lane of a host-to-device copy: fill staging buffer `i % 2` while the
/// other one's DMA runs.
fn lane_to_device<B: MemoryBackend, M: DeviceMemory<B = B> + ?Sized>(
    d: &B::Device,
    lane: &mut Lane<B>,
    src: &[u8],
    dst: &M,
    dst_offset: usize,
    chunk: usize,
) -> Result<()> {
    let mut busy = [false; 2];
    let run = (|| {
        for (i, piece) in src.chunks(chunk).enumerate() {
            let s = i % 2;
            if busy[s] {
                d.synchronize_event(&lane.events[s])?;
            }
            lane.staging[s].as_mut_slice()[..piece.len()].copy_from_slice(piece);
            // SAFETY: staging buffer `s` is not written again before
            // `events[s]` (recorded right after) completes, and `dst` and the
            // staging buffers outlive the synchronize at the end of this lane.
            unsafe {
                d.copy_to_device_async(
                    &lane.staging[s].as_slice()[..piece.len()],
                    dst,
                    dst_offset + i * chunk,
                    &lane.stream,
                )?
            };
            d.record_event(&lane.events[s], &lane.stream)?;
            busy[s] = true;
        }
        Ok(())
    })();
    // Always drain the stream: queued copies read the staging buffers.
    let synced = d.synchronize(&lane.stream);
    run.and(synced)
}

/// One lane of a device-to-host copy: DMA into staging `i % 2` while the host
/// copies the other one out.
fn lane_to_host<B: MemoryBackend, M: DeviceMemory<B = B> + ?Sized>(
    d: &B::Device,
    lane: &mut Lane<B>,
    src: &M,
    src_offset: usize,
    dst: &mut [u8],
    chunk: usize,
) -> Result<()> {
    let n = dst.len().div_ceil(chunk);
    let total = dst.len();
    let len_of = move |i: usize| chunk.min(total - i * chunk);
    let run = (|| {
        let issue = |lane: &mut Lane<B>, i: usize| -> Result<()> {
            let s = i % 2;
            // SAFETY: staging buffer `s` is read by the host only after
            // `events[s]` completes, and not reissued before it is read; the
            // stream is synchronized before this lane returns.
            unsafe {
                d.copy_to_host_async(
                    src,
                    src_offset + i * chunk,
                    &mut lane.staging[s].as_mut_slice()[..len_of(i)],
                    &lane.stream,
                )?
            };
            d.record_event(&lane.events[s], &lane.stream)
        };
        for i in 0..n.min(2) {
            issue(lane, i)?;
        }
        for i in 0..n {
            let s = i % 2;
            d.synchronize_event(&lane.events[s])?;
            let len = len_of(i);
            dst[i * chunk..i * chunk + len].copy_from_slice(&lane.staging[s].as_slice()[..len]);
            if i + 2 < n {
                issue(lane, i + 2)?;
            }
        }
        Ok(())
    })();
    let synced = d.synchronize(&lane.stream);
    run.and(synced)
}
