//! Copies between ordinary (pageable) host memory and the device that do not
//! crawl: the transfer is cut into chunks and pipelined through pinned
//! staging buffers. Lanes, each driven by its own host thread with two
//! staging buffers, take the chunks in turn; the host copies into or out of
//! one buffer while the DMA of the other runs, and several cores share the
//! host-side copying. The lanes share few streams (one by default), so the
//! DMA runs back to back in chunk order and little host copying is left
//! when it ends.
//!
//! A plain pageable `cuMemcpyHtoD` makes the driver stage through its own
//! small pinned buffer with one thread, and serialises with other work
//! (docs/design.md#pageable-copies; NVIDIA/cuCollections#727).
//!
//! On the host backend there is no DMA to overlap with, and every copy goes
//! direct (`pipelines` below says why).

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::backend::{check_range, Device, DeviceMemory, DeviceMemoryMut, Event, HostMemory, Stream};
use crate::error::{BackendKind, Error, Result};

use super::current::{current_resource, release_first};
use super::pinned::{PinnedFlags, PinnedMemory};
use crate::backend::Backend;

/// Settings of a [`PageableCopier`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Bytes per chunk (and per staging buffer).
    pub chunk_bytes: usize,
    /// Lanes: each has two staging buffers and a host thread, and takes every
    /// `lanes`-th chunk.
    pub lanes: usize,
    /// Streams the lanes share (lane `l` uses stream `l % streams`). With one
    /// stream the chunks' DMA runs back to back in issue order, so chunks
    /// finish one after the other and only the last one's host copy is left
    /// when the DMA ends; with a stream per lane the driver interleaves the
    /// lanes and every lane's last chunk finishes at the end together.
    pub streams: usize,
    /// Transfers smaller than this go straight through the driver.
    pub direct_below: usize,
    /// Host-side copies write with non-temporal (streaming) stores, which
    /// skip reading the destination into the cache first: less memory
    /// traffic, which is what bounds the pipeline on a busy host (x86-64
    /// only; elsewhere this is an ordinary copy).
    pub streaming_stores: bool,
}

impl Default for PipelineConfig {
    /// 2 MiB chunks (`GPUPORT_PAGEABLE_CHUNK_KIB` overrides), one lane per
    /// core up to 16 (`GPUPORT_PAGEABLE_LANES`), one shared stream
    /// (`GPUPORT_PAGEABLE_STREAMS`); transfers under 1 MiB go direct;
    /// streaming stores on (`GPUPORT_PAGEABLE_STREAMING=0` turns them off).
    /// The sweep behind these choices (H100, 2026-11-22) is in the git
    /// history of BENCHMARKS.md (`git log -p BENCHMARKS.md`).
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let positive_env =
            |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok()).filter(|&n| n > 0);
        let lanes = positive_env("GPUPORT_PAGEABLE_LANES").unwrap_or(cores.min(16));
        let chunk_kib = positive_env("GPUPORT_PAGEABLE_CHUNK_KIB").unwrap_or(2 << 10).min(1 << 20);
        let streams = positive_env("GPUPORT_PAGEABLE_STREAMS").unwrap_or(1);
        let streaming_stores = std::env::var("GPUPORT_PAGEABLE_STREAMING").map_or(true, |v| v != "0");
        PipelineConfig { chunk_bytes: chunk_kib << 10, lanes, streams, direct_below: 1 << 20, streaming_stores }
    }
}

/// Whether copies on a device of backend `kind` are pipelined through pinned
/// staging at all; where not, [`PageableCopier`] makes no lanes and every
/// copy is one plain copy of the device. The one place this is decided.
///
/// Not on the host backend: its device memory is host memory, so a plain
/// copy is one `memcpy`, while staging copies every byte twice (into a
/// staging buffer, then out of it on the backend's stream thread) with no
/// DMA engine to overlap. On the H100 machine's 16-core host the pipeline ran
/// at 0.64x (H2D) and 0.69x (D2H) of a plain copy, paired
/// (BENCHMARKS.md).
fn pipelines(kind: BackendKind) -> bool {
    kind != BackendKind::Host
}

struct Lane<B: Backend> {
    /// One of the copier's streams, shared with other lanes.
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
/// serialised with each other. On the host backend there are none, and every
/// copy is the device's own plain copy.
pub struct PageableCopier<B: Backend> {
    device: Arc<B::Device>,
    config: PipelineConfig,
    /// Empty where the backend is not pipelined.
    lanes: Mutex<Vec<Lane<B>>>,
    /// Chunks handed to the lanes so far.
    staged_chunks: AtomicUsize,
}

impl<B: Backend> fmt::Debug for PageableCopier<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageableCopier({}, {:?})", self.device.info().spec(), self.config)
    }
}

impl<B: Backend> PageableCopier<B> {
    /// Creates the lanes: `streams` streams and `2 * lanes` pinned buffers
    /// of `chunk_bytes`, taken from the device's current resource. None on
    /// the host backend, whose copies all go direct.
    pub fn new(device: Arc<B::Device>, config: PipelineConfig) -> Result<Self> {
        crate::backend::check_alloc_size(config.chunk_bytes)?;
        let lanes = if pipelines(B::KIND) { Self::make_lanes(&device, config)? } else { Vec::new() };
        Ok(PageableCopier { device, config, lanes: Mutex::new(lanes), staged_chunks: AtomicUsize::new(0) })
    }

    fn make_lanes(device: &Arc<B::Device>, config: PipelineConfig) -> Result<Vec<Lane<B>>> {
        let allocator = current_resource::<B>(device)?;
        let staging = || allocator.alloc_pinned(config.chunk_bytes, PinnedFlags::PORTABLE);
        let lane_count = config.lanes.max(1);
        let streams =
            (0..config.streams.clamp(1, lane_count)).map(|_| device.create_stream()).collect::<Result<Vec<_>>>()?;
        let mut lanes = Vec::with_capacity(lane_count);
        for l in 0..lane_count {
            lanes.push(Lane {
                stream: streams[l % streams.len()].clone(),
                staging: [staging()?, staging()?],
                events: [device.create_event()?, device.create_event()?],
            });
        }
        Ok(lanes)
    }

    /// The settings.
    pub fn config(&self) -> PipelineConfig {
        self.config
    }

    /// Chunks this copier has sent through its pinned staging buffers so far:
    /// none for transfers below [`direct_below`](PipelineConfig::direct_below),
    /// and none ever on the host backend.
    pub fn staged_chunks(&self) -> usize {
        self.staged_chunks.load(Ordering::Relaxed)
    }

    /// Whether a transfer of `len` bytes is one plain copy of the device.
    fn direct(&self, len: usize) -> bool {
        !pipelines(B::KIND) || len < self.config.direct_below
    }

    /// Copies `src` into `dst[dst_offset..]` and waits for it.
    pub fn copy_to_device<M: DeviceMemoryMut<B = B> + ?Sized>(
        &self,
        src: &[u8],
        dst: &mut M,
        dst_offset: usize,
    ) -> Result<()> {
        check_range("destination", dst_offset, src.len(), dst.len())?;
        if self.direct(src.len()) {
            return self.device.copy_to_device(src, dst, dst_offset);
        }
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let chunk = self.config.chunk_bytes;
        self.staged_chunks.fetch_add(src.len().div_ceil(chunk), Ordering::Relaxed);
        let work = deal(lanes.len(), src.chunks(chunk).enumerate().map(|(i, piece)| (dst_offset + i * chunk, piece)));
        let nt = self.config.streaming_stores;
        self.run_lanes(&mut lanes, work, |d, lane, pieces| lane_to_device(d, lane, &pieces, &*dst, nt))
    }

    /// Copies `src[src_offset..src_offset + dst.len()]` into `dst` and waits.
    pub fn copy_to_host<M: DeviceMemory<B = B> + ?Sized>(
        &self,
        src: &M,
        src_offset: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        check_range("source", src_offset, dst.len(), src.len())?;
        if self.direct(dst.len()) {
            return self.device.copy_to_host(src, src_offset, dst);
        }
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let chunk = self.config.chunk_bytes;
        self.staged_chunks.fetch_add(dst.len().div_ceil(chunk), Ordering::Relaxed);
        let work =
            deal(lanes.len(), dst.chunks_mut(chunk).enumerate().map(|(i, piece)| (src_offset + i * chunk, piece)));
        let nt = self.config.streaming_stores;
        self.run_lanes(&mut lanes, work, |d, lane, mut pieces| lane_to_host(d, lane, src, &mut pieces, nt))
    }

    /// Runs `job` for every lane with work, each on its own thread (the
    /// calling thread takes the first), and returns the first error.
    fn run_lanes<W: Send>(
        &self,
        lanes: &mut [Lane<B>],
        work: Vec<Vec<W>>,
        job: impl Fn(&B::Device, &mut Lane<B>, Vec<W>) -> Result<()> + Sync,
    ) -> Result<()> {
        let device = &*self.device;
        let job = &job;
        let mut busy = lanes.iter_mut().zip(work).filter(|(_, w)| !w.is_empty());
        let Some((first_lane, first_work)) = busy.next() else { return Ok(()) };
        std::thread::scope(|scope| {
            let handles: Vec<_> = busy.map(|(lane, w)| scope.spawn(move || job(device, lane, w))).collect();
            let mut outcome = job(device, first_lane, first_work);
            for h in handles {
                let joined = h.join().unwrap_or_else(|_| Err(Error::HostTask("a copy lane panicked".into())));
                outcome = outcome.and(joined);
            }
            outcome
        })
    }
}

/// Deals `pieces` to `lanes` lanes in turn: lane `l` gets pieces `l`,
/// `l + lanes`, `l + 2 * lanes`, ...
fn deal<W>(lanes: usize, pieces: impl Iterator<Item = W>) -> Vec<Vec<W>> {
    let mut work: Vec<Vec<W>> = (0..lanes).map(|_| Vec::new()).collect();
    for (i, piece) in pieces.enumerate() {
        work[i % lanes].push(piece);
    }
    work
}

/// The device's shared [`PageableCopier`], made on first use with
/// [`PipelineConfig::default`] (its staging buffers, `2 * lanes` chunks of
/// pinned memory, come from the device's current resource and stay until
/// [`release_all`](super::release_all)). What the Python `gpuport.runtime.memcpy` uses for synchronous
/// copies between pageable host memory and a GPU.
///
/// ```
/// use gpuport::memory::pageable_copier;
/// use gpuport::{Device, Host, HostDevice};
///
/// let dev = HostDevice::open(0)?;
/// let copier = pageable_copier::<Host>(&dev)?;
/// let mut buf = dev.alloc(3 << 20)?;
/// copier.copy_to_device(&vec![7u8; 3 << 20], &mut buf, 0)?;
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn pageable_copier<B: Backend>(device: &Arc<B::Device>) -> Result<Arc<PageableCopier<B>>> {
    let key = (B::KIND, device.info().ordinal);
    let mut copiers = copiers().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(copier) = copiers.get(&key).and_then(|c| c.downcast_ref::<Arc<PageableCopier<B>>>()) {
        return Ok(copier.clone());
    }
    let copier = Arc::new(PageableCopier::new(device.clone(), PipelineConfig::default())?);
    copiers.insert(key, Box::new(copier.clone()));
    Ok(copier)
}

type Copiers = Mutex<HashMap<(BackendKind, usize), Box<dyn Any + Send + Sync>>>;

/// The shared copiers of [`pageable_copier`], by device; made with the
/// first, which registers [`release_copiers`] with
/// [`release_all`](super::release_all).
fn copiers() -> &'static Copiers {
    static COPIERS: OnceLock<Copiers> = OnceLock::new();
    COPIERS.get_or_init(|| {
        release_first(release_copiers);
        Default::default()
    })
}

/// Drops the shared copiers (made again on next use), so their staging
/// buffers go back to the current resources' pinned pools once no caller
/// holds a copier any more; see [`release_all`](super::release_all).
fn release_copiers() {
    let drained = std::mem::take(&mut *copiers().lock().unwrap_or_else(|p| p.into_inner()));
    drop(drained); // outside the lock: dropping a copier drops its streams
}

/// One lane of a host-to-device copy: fill staging buffer `i % 2` while the
/// other one's DMA runs. `pieces` are (device offset, source bytes).
fn lane_to_device<B: Backend, M: DeviceMemory<B = B> + ?Sized>(
    d: &B::Device,
    lane: &mut Lane<B>,
    pieces: &[(usize, &[u8])],
    dst: &M,
    streaming: bool,
) -> Result<()> {
    let mut busy = [false; 2];
    let run = (|| {
        for (i, &(at, piece)) in pieces.iter().enumerate() {
            let s = i % 2;
            if busy[s] {
                d.synchronize_event(&lane.events[s])?;
            }
            host_copy(&mut lane.staging[s].as_mut_slice()[..piece.len()], piece, streaming);
            // SAFETY: staging buffer `s` is not written again before
            // `events[s]` (recorded right after) completes, and `dst` and the
            // staging buffers outlive the synchronize at the end of this lane.
            unsafe { d.copy_to_device_async(&lane.staging[s].as_slice()[..piece.len()], dst, at, &lane.stream)? };
            busy[s] = true;
            d.record_event(&lane.events[s], &lane.stream)?;
        }
        Ok(())
    })();
    // Always wait for this lane's copies: they read the staging buffers.
    let drained = drain(d, lane, busy, run.is_err());
    run.and(drained)
}

/// One lane of a device-to-host copy: DMA into staging `i % 2` while the host
/// copies the other one out. `pieces` are (device offset, destination bytes).
fn lane_to_host<B: Backend, M: DeviceMemory<B = B> + ?Sized>(
    d: &B::Device,
    lane: &mut Lane<B>,
    src: &M,
    pieces: &mut [(usize, &mut [u8])],
    streaming: bool,
) -> Result<()> {
    let n = pieces.len();
    let mut busy = [false; 2];
    let run = (|| {
        let issue = |lane: &mut Lane<B>, busy: &mut [bool; 2], i: usize, at: usize, len: usize| -> Result<()> {
            let s = i % 2;
            // SAFETY: staging buffer `s` is read by the host only after
            // `events[s]` completes, and not reissued before it is read; the
            // lane waits for its copies before it returns.
            unsafe { d.copy_to_host_async(src, at, &mut lane.staging[s].as_mut_slice()[..len], &lane.stream)? };
            busy[s] = true;
            d.record_event(&lane.events[s], &lane.stream)
        };
        for (i, &(at, ref out)) in pieces.iter().enumerate().take(2) {
            issue(lane, &mut busy, i, at, out.len())?;
        }
        for i in 0..n {
            let s = i % 2;
            d.synchronize_event(&lane.events[s])?;
            busy[s] = false;
            let out = &mut *pieces[i].1;
            host_copy(out, &lane.staging[s].as_slice()[..out.len()], streaming);
            if i + 2 < n {
                issue(lane, &mut busy, i + 2, pieces[i + 2].0, pieces[i + 2].1.len())?;
            }
        }
        Ok(())
    })();
    let drained = drain(d, lane, busy, run.is_err());
    run.and(drained)
}

/// Waits for the lane's copies: through its events (not its stream, which
/// lanes still working may share), or, after an error, when an event may
/// not have been recorded behind a queued copy, through the whole stream.
/// Either way no copy into or out of staging is left running.
fn drain<B: Backend>(d: &B::Device, lane: &Lane<B>, busy: [bool; 2], failed: bool) -> Result<()> {
    if failed {
        return d.synchronize(&lane.stream);
    }
    lane.events.iter().zip(busy).filter(|(_, b)| *b).try_for_each(|(event, _)| d.synchronize_event(event))
}

/// Copies `src` into `dst` (same length), with streaming stores if asked
/// and the target has them.
fn host_copy(dst: &mut [u8], src: &[u8], streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if streaming {
        return super::host_copy::streaming_copy(dst, src);
    }
    let _ = streaming;
    dst.copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::host_copy;

    #[test]
    fn host_copy_matches_copy_from_slice_at_every_alignment_and_length() {
        #[allow(clippy::cast_possible_truncation)] // wrapping to a byte pattern is the point
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for streaming in [false, true] {
            for offset in 0..17 {
                for len in [0, 1, 15, 16, 17, 63, 64, 65, 127, 1000, 4000] {
                    let mut dst = vec![0u8; 4096 + 32];
                    host_copy(&mut dst[offset..offset + len], &src[..len], streaming);
                    assert_eq!(&dst[offset..offset + len], &src[..len], "offset {offset}, len {len}, {streaming}");
                    assert!(dst[..offset].iter().chain(&dst[offset + len..]).all(|&b| b == 0), "wrote outside");
                }
            }
        }
    }
}
