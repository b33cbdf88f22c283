//! `gpuport bench --collective`: all-reduce across every device of a
//! backend, driven by this one process, and a peer copy between two of them.
//!
//! [`run`] makes one communicator per device with
//! [`Communicator::init_all`] (NCCL's `ncclCommInitAll` on CUDA, RCCL's on
//! ROCm; on the host backend every rank is `host:0` and the ranks exchange
//! their data through a `TcpStore`), then, for each size of the sweep:
//!
//! - one float32 sum all-reduce per rank, in place on a device buffer, all
//!   ranks' calls inside one [`Communicator::group`] per iteration;
//! - `iters` such iterations per repetition, timed from the moment every
//!   rank's stream is idle until each rank's stream has run them, with
//!   device events on each rank's stream (the slowest rank's time, so host
//!   enqueue time counts, as in nccl-tests' host-clock timing, but not the
//!   polling of [`Communicator::synchronize`], which waits with its
//!   watchdog); one warm-up repetition, then the median of `reps`;
//! - `algbw` = bytes / time and `busbw` = algbw × 2(n−1)/n, nccl-tests'
//!   definitions for all-reduce (busbw is comparable with the links'
//!   bandwidth whatever the number of ranks).
//!
//! Before the sweep, one all-reduce of small known values is checked, so a
//! sweep of wrong results is an error rather than a fast figure.
//!
//! Then a peer copy of `copy_bytes` from rank 0's device to rank 1's
//! (`copy_peer_async` on a stream of device 0, after `enable_peer_access`
//! both ways where `can_access_peer`), timed with device events, against a
//! copy of the same size within device 0 (the ceiling of `gpuport bench`).
//! In the report's figures both count bytes read + written, like the
//! ceiling; [`PeerCopy`] gives them as bytes copied per second.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use gpuport::collective::{CollectiveBackend, Communicator, Op, OpKind, ReduceOp};
use gpuport::dynamic::DType;
use gpuport::memory::MemoryDevice;
use gpuport::{Backend, BackendKind, Buffer, Device, DeviceMemory, Error, Event, PeerDevice, Result, Stream};

use crate::bench::{
    bandwidth, device_report, device_seconds, repeat, summarize, BenchConfig, BenchReport, Ceiling, Figure, Skipped,
    Spec,
};
pub use crate::collective_report::{CollectiveConfig, CollectivePoint, CollectiveReport, PeerCopy};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;

/// The most ranks `--devices` may ask for on the host backend (each is a
/// thread per collective).
pub const MAX_HOST_RANKS: usize = 8;

/// `from`, `from × step`, `from × step²`, … up to `to`, plus `extra`, sorted
/// and without repeats.
fn sweep(from: usize, to: usize, step: usize, extra: &[usize]) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut s = from;
    while s <= to {
        sizes.push(s);
        match s.checked_mul(step) {
            Some(next) if step > 1 => s = next,
            _ => break,
        }
    }
    sizes.extend(extra.iter().copied().filter(|&e| e <= to));
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

impl CollectiveConfig {
    /// For GPUs: 8 B to 1 GiB in ×8 steps plus 64 MiB and 256 MiB, 5
    /// repetitions of 20; a 256 MiB copy. `quick`: 8 B to 64 MiB in ×64
    /// steps, 3 repetitions of 10; a 64 MiB copy.
    pub fn gpu(quick: bool) -> Self {
        if quick {
            CollectiveConfig {
                sizes: sweep(8, 64 * MIB, 64, &[]),
                reps: 3,
                iters: 10,
                copy_bytes: 64 * MIB,
                copy_batch: 4,
            }
        } else {
            CollectiveConfig {
                sizes: sweep(8, GIB, 8, &[64 * MIB, 256 * MIB, GIB]),
                reps: 5,
                iters: 20,
                copy_bytes: 256 * MIB,
                copy_batch: 10,
            }
        }
    }

    /// For the host backend, whose all-reduce goes through a TCP store:
    /// small sizes only (8 B to 256 KiB, ×8 steps; `quick`: to 4 KiB) so
    /// that it runs in seconds.
    pub fn host(quick: bool) -> Self {
        if quick {
            CollectiveConfig { sizes: sweep(8, 4 * KIB, 8, &[]), reps: 3, iters: 3, copy_bytes: MIB, copy_batch: 2 }
        } else {
            CollectiveConfig {
                sizes: sweep(8, 256 * KIB, 8, &[]),
                reps: 3,
                iters: 5,
                copy_bytes: 4 * MIB,
                copy_batch: 4,
            }
        }
    }

    /// The configuration for `backend`.
    pub fn for_backend(backend: BackendKind, quick: bool) -> Self {
        if backend == BackendKind::Host {
            Self::host(quick)
        } else {
            Self::gpu(quick)
        }
    }

    /// How many progress steps [`run`] reports: the check, each size, the copies, done.
    pub fn steps(&self) -> usize {
        self.sizes.len() + 3
    }
}

/// The devices of the ranks: on the host backend, `host:0` `ranks` times
/// (default 2, at most [`MAX_HOST_RANKS`]); on a GPU backend `first`, then
/// the backend's other devices in order, `ranks` of them (default: all).
/// The error is a usage error: what was asked and what is accepted.
pub fn rank_devices<D: Device>(first: &Arc<D>, ranks: Option<usize>) -> std::result::Result<Vec<Arc<D>>, String> {
    let info = first.info();
    let backend = info.backend;
    if backend == BackendKind::Host {
        let n = ranks.unwrap_or(2);
        if !(2..=MAX_HOST_RANKS).contains(&n) {
            return Err(format!(
                "--devices {n}: the host backend's collective bench runs 2 to {MAX_HOST_RANKS} ranks, every one on \
                 host:0; accepted: --devices 2..={MAX_HOST_RANKS}"
            ));
        }
        return Ok(vec![first.clone(); n]);
    }
    let count = D::count().map_err(|e| format!("cannot count the {backend} devices: {e}"))?;
    let n = ranks.unwrap_or(count);
    if count < 2 {
        return Err(format!(
            "the collective bench needs two or more {backend} devices, and this machine has {count}; for the code \
             path without GPUs, accepted: --device host (2 ranks on host:0)"
        ));
    }
    if !(2..=count).contains(&n) {
        return Err(format!(
            "--devices {n}: this machine has {count} {backend} devices; accepted: --devices 2..={count}"
        ));
    }
    let others = (0..count).filter(|&o| o != info.ordinal);
    let mut devices = vec![first.clone()];
    for ordinal in others.take(n - 1) {
        devices.push(D::open(ordinal).map_err(|e| format!("cannot open {backend}:{ordinal}: {e}"))?);
    }
    Ok(devices)
}

/// A start and an end event.
type Timer<B> = (Event<B>, Event<B>);

/// The ranks' communicators, buffers, streams and timing events.
struct Ranks<'a, B: CollectiveBackend> {
    comms: &'a [Communicator<B>],
    buffers: &'a [Buffer<B>],
    streams: &'a [Stream<B>],
    /// A start and an end event per rank.
    events: &'a [Timer<B>],
}

impl<B: CollectiveBackend> Ranks<'_, B> {
    /// Waits for every rank's stream; the first error, after waiting for all.
    fn synchronize(&self) -> Result<()> {
        let mut first = Ok(());
        for (c, s) in self.comms.iter().zip(self.streams) {
            let r = c.synchronize(s);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// `iters` in-place float32 sum all-reduces of `count` elements, each
    /// one group of every rank's call; seconds from idle streams until the
    /// last rank's stream has run them (device events on each rank's
    /// stream, the slowest rank's time).
    fn time(&self, count: usize, iters: u32) -> Result<f64> {
        let op = Op { kind: OpKind::AllReduce(ReduceOp::Sum), dtype: DType::Float32, count };
        self.synchronize()?;
        for ((c, s), (start, _)) in self.comms.iter().zip(self.streams).zip(self.events) {
            c.device().record_event(start, s)?;
        }
        let mut enqueued = Ok(());
        for _ in 0..iters {
            enqueued = Communicator::<B>::group(|| {
                for ((c, b), s) in self.comms.iter().zip(self.buffers).zip(self.streams) {
                    // SAFETY: `self` borrows every buffer until the
                    // synchronize below, which also runs when enqueueing
                    // fails, so no buffer is freed while a collective may
                    // use it; nothing else uses them meanwhile. In-place
                    // all-reduce (send = recv) is allowed.
                    unsafe { c.enqueue(&op, b, b, s)? };
                }
                Ok(())
            });
            if enqueued.is_err() {
                break;
            }
        }
        if enqueued.is_ok() {
            for ((c, s), (_, end)) in self.comms.iter().zip(self.streams).zip(self.events) {
                enqueued = c.device().record_event(end, s);
                if enqueued.is_err() {
                    break;
                }
            }
        }
        // Waits with the communicators' watchdog; the events time the work.
        let waited = self.synchronize();
        enqueued?;
        waited?;
        let mut seconds = 0.0f64;
        for (c, (start, end)) in self.comms.iter().zip(self.events) {
            seconds = seconds.max(f64::from(c.device().elapsed_ms(start, end)?) / 1e3);
        }
        Ok(seconds)
    }
}

/// One all-reduce of rank r's first elements set to r + 1 must give
/// n(n+1)/2 on every rank; the buffers are zeroed again after it.
fn check<D: MemoryDevice>(
    devices: &[Arc<D>],
    comms: &[Communicator<D::B>],
    buffers: &mut [Buffer<D::B>],
    streams: &[Stream<D::B>],
    events: &[Timer<D::B>],
) -> Result<()>
where
    D::B: CollectiveBackend,
{
    const COUNT: usize = 64;
    let n = devices.len();
    let count = buffers.iter().map(|b| b.len() / 4).min().unwrap_or(0).min(COUNT);
    for (r, (d, b)) in devices.iter().zip(buffers.iter_mut()).enumerate() {
        let bytes: Vec<u8> = std::iter::repeat_n((r as f32 + 1.0).to_ne_bytes(), count).flatten().collect();
        d.copy_to_device(&bytes, b, 0)?;
    }
    Ranks { comms, buffers: &*buffers, streams, events }.time(count, 1)?;
    let want = (n * (n + 1) / 2) as f32;
    for (r, (d, b)) in devices.iter().zip(buffers.iter_mut()).enumerate() {
        let mut out = vec![0u8; count * 4];
        d.copy_to_host(b, 0, &mut out)?;
        let got = out.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
        if let Some(bad) = got.into_iter().find(|&x| x != want) {
            return Err(Error::HostTask(format!(
                "all-reduce check: rank {r} ({}) holds {bad} where the sum over {n} ranks is {want}",
                d.info().spec()
            )));
        }
        let len = b.len();
        d.memset(b, 0, len, 0)?;
    }
    Ok(())
}

/// Runs the sweep and the copies on `devices` (rank r on `devices[r]`, at
/// least two; see [`rank_devices`]). `progress` is called with each step's
/// name as it begins ([`CollectiveConfig::steps`] calls).
pub fn run<D>(
    devices: &[Arc<D>],
    config: &CollectiveConfig,
    quick: bool,
    mut progress: impl FnMut(&str),
) -> Result<BenchReport>
where
    D: MemoryDevice + PeerDevice,
    D::B: CollectiveBackend + Backend<Device = D>,
{
    let unix_time = SystemTime::now().duration_since(UNIX_EPOCH).map(|t| t.as_secs()).unwrap_or(0);
    let (Some(d0), Some(d1)) = (devices.first(), devices.get(1)) else {
        return Err(Error::InvalidArgument {
            name: "devices",
            reason: format!("the collective bench needs two or more ranks, not {}", devices.len()),
        });
    };
    if let Some(bad) = config.sizes.iter().find(|&&s| s == 0 || s % 4 != 0) {
        return Err(Error::InvalidArgument {
            name: "sizes",
            reason: format!("{bad} bytes is not a whole, non-zero number of float32; accepted: multiples of 4"),
        });
    }
    let device = device_report(d0)?;
    let n = devices.len();

    // ---- the all-reduce sweep ----------------------------------------------
    progress("all-reduce check");
    let comms = Communicator::<D::B>::init_all(devices)?;
    let engine = comms.first().map(|c| c.engine()).unwrap_or_default();
    let max = config.sizes.iter().copied().max().unwrap_or(4);
    let mut buffers = devices
        .iter()
        .map(|d| {
            let mut b = d.alloc(max)?;
            d.memset(&mut b, 0, max, 0)?;
            Ok(b)
        })
        .collect::<Result<Vec<_>>>()?;
    let streams = devices.iter().map(|d| d.create_stream()).collect::<Result<Vec<_>>>()?;
    let events = devices.iter().map(|d| Ok((d.create_event()?, d.create_event()?))).collect::<Result<Vec<_>>>()?;
    check(devices, &comms, &mut buffers, &streams, &events)?;
    let ranks = Ranks { comms: &comms, buffers: &buffers, streams: &streams, events: &events };
    let factor = 2.0 * (n as f64 - 1.0) / n as f64;
    let mut points = Vec::with_capacity(config.sizes.len());
    for &bytes in &config.sizes {
        progress(&format!("all-reduce {}", size_name(bytes)));
        let count = bytes / 4;
        let seconds = repeat(config.reps, || ranks.time(count, config.iters))?;
        let per_op: Vec<f64> = seconds.iter().map(|t| t / f64::from(config.iters.max(1))).collect();
        let (median, best, worst) = summarize(per_op, false);
        let algbw = bytes as f64 / median.max(1e-12) / 1e9;
        points.push(CollectivePoint {
            bytes: bytes as u64,
            count: count as u64,
            reps: config.reps,
            iters_per_rep: config.iters,
            time_us: median * 1e6,
            time_us_best: best * 1e6,
            time_us_worst: worst * 1e6,
            algbw_gb_per_s: algbw,
            busbw_gb_per_s: algbw * factor,
            busbw_gb_per_s_best: bytes as f64 / best.max(1e-12) / 1e9 * factor,
        });
    }
    drop(buffers);
    drop(comms);

    // ---- the peer copy against the copy within device 0 --------------------
    progress("peer copy");
    let mut skipped = Vec::new();
    let copy = peer_copy(d0, d1, config);
    let (figures, ceiling, peer) = match copy {
        Ok((d2d, peer, summary)) => {
            let ceiling = Ceiling { name: d2d.name.clone(), bytes: d2d.bytes, gb_per_s: d2d.median };
            (vec![d2d, peer], ceiling, Some(summary))
        }
        Err(e) => {
            skipped.push(Skipped { name: "peer_copy_0to1".into(), reason: e.to_string() });
            (Vec::new(), Ceiling { name: "d2d_copy".into(), bytes: 0, gb_per_s: 0.0 }, None)
        }
    };
    progress("done");

    let collective = CollectiveReport {
        backend: d0.info().backend.to_string(),
        engine,
        devices: devices.iter().map(|d| d.info().spec()).collect(),
        ranks: n,
        collective: "all_reduce(sum)".into(),
        dtype: DType::Float32.name().into(),
        timing: "device-events".into(),
        config: config.clone(),
        points,
        peer_copy: peer,
    };
    let common = if quick { BenchConfig::quick() } else { BenchConfig::full() };
    let bench =
        BenchConfig { bandwidth_bytes: config.copy_bytes, batch: config.copy_batch, reps: config.reps, ..common };
    Ok(BenchReport {
        schema: 1,
        gpuport_version: gpuport::VERSION.to_string(),
        unix_time,
        quick,
        config: bench,
        device,
        ceiling,
        figures,
        skipped,
        collective: Some(collective),
    })
}

/// The copy d0 → d1 and the copy within d0: the report's `d2d_copy` and
/// `peer_copy_0to1` figures (bytes read + written) and their summary.
fn peer_copy<D>(d0: &Arc<D>, d1: &Arc<D>, config: &CollectiveConfig) -> Result<(Figure, Figure, PeerCopy)>
where
    D: MemoryDevice + PeerDevice,
{
    let nbytes = config.copy_bytes;
    let access = d0.can_access_peer(d1)? && d1.can_access_peer(d0)?;
    if access {
        d0.enable_peer_access(d1)?;
        d1.enable_peer_access(d0)?;
    }
    let (mut src, mut local, mut dst) = (d0.alloc(nbytes)?, d0.alloc(nbytes)?, d1.alloc(nbytes)?);
    d0.memset(&mut src, 0, nbytes, 1)?;
    d0.memset(&mut local, 0, nbytes, 0)?;
    d1.memset(&mut dst, 0, nbytes, 0)?;
    let stream = d0.create_stream()?;
    let s = &stream;
    let batch = config.copy_batch;
    // Alternating: each repetition times the peer copy, then the local one.
    let mut local_times = Vec::new();
    let peer_times = repeat(config.reps, || {
        let peer = device_seconds(d0.as_ref(), s, batch, || {
            // SAFETY: `src` and `dst` outlive the event synchronize inside
            // device_seconds; `dst` is used by nothing else meanwhile.
            unsafe { d0.copy_peer_async(&src, 0, &dst, 0, nbytes, s) }
        })?;
        let within = device_seconds(d0.as_ref(), s, batch, || {
            // SAFETY: `src` and `local` outlive the event synchronize inside device_seconds.
            unsafe { d0.copy_device_async(&src, 0, &local, 0, nbytes, s) }
        })?;
        local_times.push(within);
        Ok(peer)
    })?;
    // The first pair was the warm-up.
    let local_times = local_times.get(1..).unwrap_or_default();
    let mut check = vec![0u8; nbytes.min(4096)];
    d1.copy_to_host(&dst, 0, &mut check)?;
    if let Some(bad) = check.iter().position(|&b| b != 1) {
        return Err(Error::HostTask(format!(
            "peer copy check: byte {bad} on {} is {} where the copy from {} wrote 1",
            d1.info().spec(),
            check[bad],
            d0.info().spec()
        )));
    }
    let timing = "device-events";
    let spec = Spec { name: "d2d_copy", category: "copy", bytes: nbytes, iters: batch, timing };
    let mut d2d = bandwidth(spec, 2 * nbytes, local_times);
    d2d.fraction_of_ceiling = Some(1.0);
    let spec = Spec { name: "peer_copy_0to1", category: "copy", bytes: nbytes, iters: batch, timing };
    let mut peer = bandwidth(spec, 2 * nbytes, &peer_times);
    peer.fraction_of_ceiling = Some(peer.median / d2d.median);
    let summary = PeerCopy {
        src: d0.info().spec(),
        dst: d1.info().spec(),
        bytes: nbytes as u64,
        peer_access: access,
        gb_per_s: peer.median / 2.0,
        local_gb_per_s: d2d.median / 2.0,
        fraction_of_local: peer.median / d2d.median,
    };
    Ok((d2d, peer, summary))
}

/// `8 B`, `4 KiB`, `64 MiB`, `1 GiB`.
pub fn size_name(bytes: usize) -> String {
    let units = [(GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")];
    for (unit, name) in units {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} B")
}

/// The sweep as an aligned text table, nccl-tests' columns.
pub fn table(c: &CollectiveReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{} in place, {}, {} ranks ({}), {}; {} x {} per size, {}",
        c.collective,
        c.dtype,
        c.ranks,
        c.devices.join(", "),
        c.engine,
        c.config.reps,
        c.config.iters,
        c.timing
    );
    let _ = writeln!(
        out,
        "{:>10} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "size", "count", "time us", "algbw GB/s", "busbw GB/s", "best busbw"
    );
    for p in &c.points {
        let _ = writeln!(
            out,
            "{:>10} {:>12} {:>12.2} {:>12.2} {:>12.2} {:>12.2}",
            size_name(p.bytes as usize),
            p.count,
            p.time_us,
            p.algbw_gb_per_s,
            p.busbw_gb_per_s,
            p.busbw_gb_per_s_best
        );
    }
    if let Some(p) = &c.peer_copy {
        let _ = writeln!(
            out,
            "peer copy {} -> {} of {}: {:.1} GB/s copied ({:.1}% of the copy within {}, {:.1} GB/s); peer access: {}",
            p.src,
            p.dst,
            size_name(p.bytes as usize),
            p.gb_per_s,
            100.0 * p.fraction_of_local,
            p.src,
            p.local_gb_per_s,
            if p.peer_access { "enabled" } else { "not possible, the driver stages through the host" }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_are_the_asked_sizes() {
        let full = CollectiveConfig::gpu(false).sizes;
        assert_eq!(full.first(), Some(&8));
        assert_eq!(full.last(), Some(&GIB));
        for s in [64, 512, 4 * KIB, 32 * KIB, 256 * KIB, 2 * MIB, 16 * MIB, 64 * MIB, 128 * MIB, 256 * MIB] {
            assert!(full.contains(&s), "{s} missing from {full:?}");
        }
        assert_eq!(full.len(), 12, "{full:?}");
        assert!(CollectiveConfig::gpu(true).sizes.len() < full.len());
        assert!(CollectiveConfig::host(false).sizes.iter().all(|&s| s <= 256 * KIB));
        assert_eq!(size_name(8), "8 B");
        assert_eq!(size_name(4 * KIB), "4 KiB");
        assert_eq!(size_name(GIB), "1 GiB");
    }

    #[test]
    fn host_ranks_default_to_two_and_refuse_one() {
        let dev = gpuport::HostDevice::open(0).expect("host");
        assert_eq!(rank_devices(&dev, None).map(|v| v.len()), Ok(2));
        assert_eq!(rank_devices(&dev, Some(3)).map(|v| v.len()), Ok(3));
        let err = rank_devices(&dev, Some(1)).err().unwrap_or_default();
        assert!(err.contains("accepted: --devices 2..="), "{err}");
    }

    #[test]
    fn tiny_host_sweep() {
        let dev = gpuport::HostDevice::open(0).expect("host");
        let devices = rank_devices(&dev, None).expect("ranks");
        let config =
            CollectiveConfig { sizes: vec![8, 64, 4 * KIB], reps: 2, iters: 2, copy_bytes: 64 * KIB, copy_batch: 2 };
        let mut steps = Vec::new();
        let report = run(&devices, &config, false, |s| steps.push(s.to_string())).expect("run");
        assert_eq!(steps.len(), config.steps(), "{steps:?}");
        let c = report.collective.as_ref().expect("collective section");
        assert_eq!((c.ranks, c.engine.as_str(), c.backend.as_str()), (2, "host", "host"));
        assert_eq!(c.devices, vec!["host", "host"]);
        assert_eq!(c.points.iter().map(|p| p.bytes).collect::<Vec<_>>(), vec![8, 64, 4096]);
        for p in &c.points {
            assert!(p.time_us > 0.0 && p.algbw_gb_per_s > 0.0, "{p:?}");
            // n = 2: busbw = algbw × 2(n−1)/n = algbw.
            assert!((p.busbw_gb_per_s - p.algbw_gb_per_s).abs() <= 1e-9 * p.algbw_gb_per_s, "{p:?}");
            assert_eq!(p.count * 4, p.bytes);
        }
        let peer = c.peer_copy.as_ref().expect("peer copy");
        assert!(peer.gb_per_s > 0.0 && peer.local_gb_per_s > 0.0 && peer.peer_access, "{peer:?}");
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        assert_eq!(report.ceiling.name, "d2d_copy");
        assert!(report.figure("peer_copy_0to1").and_then(|f| f.fraction_of_ceiling).is_some_and(|x| x > 0.0));
        // The JSON round-trips, with the section.
        let text = serde_json::to_string(&report).expect("json");
        let back: BenchReport = serde_json::from_str(&text).expect("parse");
        let back = back.collective.expect("collective section");
        assert_eq!((back.points.len(), back.config, back.devices), (3, config, c.devices.clone()));
        // The chart is the collective one (taller than the bar chart of two figures).
        let png = std::env::temp_dir().join(format!("gpuport-collective-test-{}.png", std::process::id()));
        crate::plot::draw(&report, &png).expect("draw");
        let bytes = std::fs::read(&png).expect("read");
        let _ = std::fs::remove_file(&png);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }
}
