//! The measurements behind `gpuport bench`, generic over the device.
//!
//! [`run`] times, on one device and in one process:
//!
//! | figure | how |
//! | --- | --- |
//! | `d2d_copy` (the ceiling) | device events around a batch of device-to-device copies |
//! | `alloc_free_1MiB/{caching_pool,native_async,plain}` | host clock, alloc + free, mean per pair |
//! | `h2d_pinned`, `d2h_pinned` | device events around a batch of async copies |
//! | `h2d_pageable/{plain,pipelined}`, `d2h_pageable/…` | host clock, synchronous copies |
//! | `launch_empty` | host clock, enqueue only (the stream is synchronized outside) |
//! | `add_index_f32` | device events around a batch of launches |
//!
//! Bandwidth counts bytes read + written for device-to-device work (copy,
//! `add_index`) and bytes moved for host-device transfers. The ceiling is the
//! device's own device-to-device copy bandwidth; figures that move device
//! memory only report `fraction_of_ceiling`. Each figure is the median of
//! `reps` repetitions (with the min and max beside it).

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::collective_report::CollectiveReport;

use gpuport::memory::{
    current_resource, Allocator, CachingPool, MemoryDevice, NativePoolResource, PageableCopier, PipelineConfig,
    PoolConfig,
};
use gpuport::{builtin, kernels, Device, DeviceMemory, HostMemory, KernelArgs, LaunchConfig, Result, Stream};

const MIB: usize = 1 << 20;

/// Sizes and repetitions of one bench run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchConfig {
    /// Bytes per copy and per `add_index` array (a multiple of 1 MiB).
    pub bandwidth_bytes: usize,
    /// Bytes per pageable copy.
    pub pageable_bytes: usize,
    /// Bytes per allocation in the allocation-latency figures.
    pub alloc_bytes: usize,
    /// Repetitions of every figure (the median is reported).
    pub reps: u32,
    /// Operations per repetition for bandwidth figures.
    pub batch: u32,
    /// Operations per repetition for pageable copies.
    pub pageable_batch: u32,
    /// Allocation + free pairs per repetition.
    pub alloc_iters: u32,
    /// Launches per repetition.
    pub launch_iters: u32,
}

impl BenchConfig {
    /// The full run: 256 MiB arrays and copies, 11 repetitions.
    pub fn full() -> Self {
        BenchConfig {
            bandwidth_bytes: 256 * MIB,
            pageable_bytes: 256 * MIB,
            alloc_bytes: MIB,
            reps: 11,
            batch: 10,
            pageable_batch: 3,
            alloc_iters: 1000,
            launch_iters: 10_000,
        }
    }

    /// A run of a few seconds at most on the host backend (CI): 4 MiB, 5 repetitions.
    pub fn quick() -> Self {
        BenchConfig {
            bandwidth_bytes: 4 * MIB,
            pageable_bytes: 4 * MIB,
            alloc_bytes: MIB,
            reps: 5,
            batch: 4,
            pageable_batch: 2,
            alloc_iters: 200,
            launch_iters: 1000,
        }
    }
}

/// The device a report was taken on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// The spec that opens it again (`host`, `cuda:0`).
    pub spec: String,
    /// Backend name.
    pub backend: String,
    /// The vendor's name.
    pub name: String,
    /// Architecture (`sm_90`, `gfx90a`, the host CPU arch).
    pub arch: String,
    /// Multiprocessors / compute units / cores.
    pub multiprocessors: u32,
    /// Total memory, bytes.
    pub total_memory_bytes: u64,
    /// Free memory when the run started, bytes.
    pub free_memory_bytes: u64,
    /// The device's current memory resource (what the library allocates through).
    pub memory_resource: String,
}

/// The hardware ceiling the bandwidth figures are compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    /// Which figure it is (`d2d_copy`).
    pub name: String,
    /// Bytes per copy.
    pub bytes: u64,
    /// Bandwidth (read + write), GB/s (1e9 bytes per second).
    pub gb_per_s: f64,
}

/// One measured figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Stable name, e.g. `alloc_free_1MiB/caching_pool`.
    pub name: String,
    /// `copy`, `allocation`, `transfer`, `launch` or `kernel`.
    pub category: String,
    /// `us` (latency, lower is better) or `GB/s` (bandwidth, higher is better).
    pub unit: String,
    /// Median over the repetitions, in `unit`.
    pub median: f64,
    /// Best repetition, in `unit` (lowest latency or highest bandwidth).
    pub best: f64,
    /// Worst repetition, in `unit`.
    pub worst: f64,
    /// Repetitions.
    pub reps: u32,
    /// Operations per repetition.
    pub iters_per_rep: u32,
    /// Bytes per operation (0 for launches).
    pub bytes: u64,
    /// `device-events` or `host-clock`.
    pub timing: String,
    /// Bandwidth as a fraction of the ceiling, for figures that move device
    /// memory only; `null` otherwise.
    pub fraction_of_ceiling: Option<f64>,
    /// The figure this one is compared with in `speedup`, or `null`.
    pub baseline: Option<String>,
    /// How many times faster than `baseline` (above 1: faster), or `null`.
    pub speedup: Option<f64>,
}

/// A figure that could not be taken on this device, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    /// The figure's name.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// Everything one `gpuport bench` run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// Version of this layout (1).
    pub schema: u32,
    /// gpuport's version.
    pub gpuport_version: String,
    /// Seconds since the Unix epoch when the run started.
    pub unix_time: u64,
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// Sizes and repetitions.
    pub config: BenchConfig,
    /// The device.
    pub device: DeviceReport,
    /// The device-to-device copy bandwidth.
    pub ceiling: Ceiling,
    /// Every figure taken, the ceiling's own included.
    pub figures: Vec<Figure>,
    /// Figures this device cannot take.
    pub skipped: Vec<Skipped>,
    /// The all-reduce sweep and peer copy of `gpuport bench --collective`;
    /// absent from other runs (whose figures are the single-device ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<CollectiveReport>,
}

impl BenchReport {
    /// The figure named `name`.
    pub fn figure(&self, name: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.name == name)
    }
}

/// Names of every step [`run`] reports progress for, in order.
pub const STEPS: [&str; 7] =
    ["d2d copy", "allocation", "pinned copies", "pageable copies", "launch", "add_index", "done"];

/// Median, best and worst of per-repetition values in `unit`.
pub(crate) fn summarize(mut values: Vec<f64>, higher_is_better: bool) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let median = values.get(values.len() / 2).copied().unwrap_or(f64::NAN);
    let (lo, hi) = (values.first().copied().unwrap_or(f64::NAN), values.last().copied().unwrap_or(f64::NAN));
    if higher_is_better {
        (median, hi, lo)
    } else {
        (median, lo, hi)
    }
}

pub(crate) struct Spec<'a> {
    pub(crate) name: &'a str,
    pub(crate) category: &'a str,
    pub(crate) bytes: usize,
    pub(crate) iters: u32,
    pub(crate) timing: &'a str,
}

/// A bandwidth figure from per-repetition seconds for `iters` operations
/// moving `moved` bytes each.
pub(crate) fn bandwidth(spec: Spec<'_>, moved: usize, seconds: &[f64]) -> Figure {
    let gbps: Vec<f64> = seconds.iter().map(|&t| moved as f64 * spec.iters as f64 / t.max(1e-12) / 1e9).collect();
    let (median, best, worst) = summarize(gbps, true);
    Figure {
        name: spec.name.to_string(),
        category: spec.category.to_string(),
        unit: "GB/s".into(),
        median,
        best,
        worst,
        reps: seconds.len() as u32,
        iters_per_rep: spec.iters,
        bytes: spec.bytes as u64,
        timing: spec.timing.to_string(),
        fraction_of_ceiling: None,
        baseline: None,
        speedup: None,
    }
}

/// A latency figure (µs per operation) from per-repetition seconds for `iters` operations.
fn latency(spec: Spec<'_>, seconds: &[f64]) -> Figure {
    let us: Vec<f64> = seconds.iter().map(|&t| t * 1e6 / spec.iters.max(1) as f64).collect();
    let (median, best, worst) = summarize(us, false);
    Figure {
        name: spec.name.to_string(),
        category: spec.category.to_string(),
        unit: "us".into(),
        median,
        best,
        worst,
        reps: seconds.len() as u32,
        iters_per_rep: spec.iters,
        bytes: spec.bytes as u64,
        timing: spec.timing.to_string(),
        fraction_of_ceiling: None,
        baseline: None,
        speedup: None,
    }
}

/// Sets `figure.speedup` against `baseline` (latency: baseline / this; bandwidth: this / baseline).
fn compare(figure: &mut Figure, baseline: &Figure) {
    let speedup = if figure.unit == "us" { baseline.median / figure.median } else { figure.median / baseline.median };
    if speedup.is_finite() && speedup > 0.0 {
        figure.baseline = Some(baseline.name.clone());
        figure.speedup = Some(speedup);
    }
}

/// Seconds of device time for `iters` calls of `work` on `stream`, from events.
pub(crate) fn device_seconds<D: Device>(
    d: &D,
    stream: &Stream<D::B>,
    iters: u32,
    mut work: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let (start, end) = (d.create_event()?, d.create_event()?);
    d.record_event(&start, stream)?;
    for _ in 0..iters {
        work()?;
    }
    d.record_event(&end, stream)?;
    d.synchronize_event(&end)?;
    Ok(f64::from(d.elapsed_ms(&start, &end)?) / 1e3)
}

/// Host seconds for `iters` calls of `work`.
fn host_seconds(iters: u32, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    let start = Instant::now();
    for _ in 0..iters {
        work()?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// `reps` repetitions of `one` (after one warm-up call, not counted).
pub(crate) fn repeat(reps: u32, mut one: impl FnMut() -> Result<f64>) -> Result<Vec<f64>> {
    one()?;
    (0..reps).map(|_| one()).collect()
}

/// What `d` is, its free memory now and its current memory resource.
pub(crate) fn device_report<D: MemoryDevice>(d: &Arc<D>) -> Result<DeviceReport> {
    let info = d.info().clone();
    let memory = d.memory_info()?;
    let resource = current_resource::<D::B>(d)?.resource().name().to_string();
    Ok(DeviceReport {
        spec: info.spec(),
        backend: info.backend.to_string(),
        name: info.name.clone(),
        arch: info.arch.clone(),
        multiprocessors: info.multiprocessors,
        total_memory_bytes: memory.total as u64,
        free_memory_bytes: memory.free as u64,
        memory_resource: resource,
    })
}

/// Runs every figure on `d`. `progress` is called with each step's name
/// (from [`STEPS`]) as it begins.
pub fn run<D: MemoryDevice>(d: &Arc<D>, config: BenchConfig, mut progress: impl FnMut(&str)) -> Result<BenchReport> {
    let unix_time = SystemTime::now().duration_since(UNIX_EPOCH).map(|t| t.as_secs()).unwrap_or(0);
    let device = device_report(d)?;
    let stream = d.create_stream()?;
    let s = &stream;
    let mut figures = Vec::new();
    let mut skipped = Vec::new();
    let c = config;
    let nbytes = c.bandwidth_bytes;

    // ---- the ceiling: device-to-device copy --------------------------------
    progress(STEPS[0]);
    let (mut a, mut b) = (d.alloc(nbytes)?, d.alloc(nbytes)?);
    d.memset(&mut a, 0, nbytes, 0)?;
    d.memset(&mut b, 0, nbytes, 0)?;
    let times = repeat(c.reps, || {
        device_seconds(d.as_ref(), s, c.batch, || {
            // SAFETY: `a` and `b` outlive the event synchronize inside device_seconds.
            unsafe { d.copy_device_async(&a, 0, &b, 0, nbytes, s) }
        })
    })?;
    let spec = Spec { name: "d2d_copy", category: "copy", bytes: nbytes, iters: c.batch, timing: "device-events" };
    let mut d2d = bandwidth(spec, 2 * nbytes, &times);
    d2d.fraction_of_ceiling = Some(1.0);
    let ceiling = Ceiling { name: d2d.name.clone(), bytes: nbytes as u64, gb_per_s: d2d.median };
    figures.push(d2d);

    // ---- allocation latency -----------------------------------------------
    progress(STEPS[1]);
    let ab = c.alloc_bytes;
    let alloc_name = |what: &str| format!("alloc_free_{}MiB/{what}", ab / MIB);
    let pool = Allocator::<D::B>::new(CachingPool::new(d.clone(), PoolConfig::default()));
    let times = repeat(c.reps, || {
        host_seconds(c.alloc_iters, || {
            drop(std::hint::black_box(pool.alloc(ab, s)?));
            Ok(())
        })
    })?;
    let spec = Spec {
        name: &alloc_name("caching_pool"),
        category: "allocation",
        bytes: ab,
        iters: c.alloc_iters,
        timing: "host-clock",
    };
    let mut pool_fig = latency(spec, &times);
    drop(pool);
    let times = repeat(c.reps, || {
        host_seconds(c.alloc_iters, || {
            drop(std::hint::black_box(d.alloc(ab)?));
            Ok(())
        })
    })?;
    let spec = Spec {
        name: &alloc_name("plain"),
        category: "allocation",
        bytes: ab,
        iters: c.alloc_iters,
        timing: "host-clock",
    };
    let plain_fig = latency(spec, &times);
    compare(&mut pool_fig, &plain_fig);
    figures.push(pool_fig);
    // The driver's pool, keeping 1 GiB cached across synchronizations (its
    // default threshold, 0, returns memory at every sync).
    let native = NativePoolResource::<D::B>::new(d.clone(), Some(1 << 30)).and_then(|_| {
        repeat(c.reps, || {
            host_seconds(c.alloc_iters, || {
                drop(std::hint::black_box(d.alloc_async(ab, s)?));
                Ok(())
            })
        })
    });
    match native {
        Ok(times) => {
            let spec = Spec {
                name: &alloc_name("native_async"),
                category: "allocation",
                bytes: ab,
                iters: c.alloc_iters,
                timing: "host-clock",
            };
            let mut fig = latency(spec, &times);
            compare(&mut fig, &plain_fig);
            figures.push(fig);
        }
        Err(e) => skipped.push(Skipped { name: alloc_name("native_async"), reason: e.to_string() }),
    }
    d.synchronize(s)?;
    figures.push(plain_fig);

    // ---- pinned transfers ---------------------------------------------------
    progress(STEPS[2]);
    let mut pinned = d.alloc_pinned(nbytes)?;
    pinned.as_mut_slice().fill(1);
    let times = repeat(c.reps, || {
        device_seconds(d.as_ref(), s, c.batch, || {
            // SAFETY: `pinned` and `a` outlive the event synchronize inside device_seconds.
            unsafe { d.copy_to_device_async(pinned.as_slice(), &a, 0, s) }
        })
    })?;
    let spec =
        Spec { name: "h2d_pinned", category: "transfer", bytes: nbytes, iters: c.batch, timing: "device-events" };
    figures.push(bandwidth(spec, nbytes, &times));
    let times = repeat(c.reps, || {
        let dst = pinned.as_mut_slice();
        device_seconds(d.as_ref(), s, c.batch, || {
            // SAFETY: `dst` and `a` outlive the event synchronize inside
            // device_seconds; the host touches `dst` only after it.
            unsafe { d.copy_to_host_async(&a, 0, &mut *dst, s) }
        })
    })?;
    let spec =
        Spec { name: "d2h_pinned", category: "transfer", bytes: nbytes, iters: c.batch, timing: "device-events" };
    figures.push(bandwidth(spec, nbytes, &times));
    drop(pinned);

    // ---- pageable transfers -------------------------------------------------
    progress(STEPS[3]);
    let pb = c.pageable_bytes;
    let mut dev = d.alloc(pb)?;
    let src = vec![3u8; pb];
    let mut dst = vec![0u8; pb];
    let copier = PageableCopier::new(d.clone(), PipelineConfig::default())?;
    let pageable = |name: &str, times: &[f64]| {
        let spec = Spec { name, category: "transfer", bytes: pb, iters: c.pageable_batch, timing: "host-clock" };
        bandwidth(spec, pb, times)
    };
    let t = repeat(c.reps, || host_seconds(c.pageable_batch, || d.copy_to_device(&src, &mut dev, 0)))?;
    let h2d_plain = pageable("h2d_pageable/plain", &t);
    let t = repeat(c.reps, || host_seconds(c.pageable_batch, || copier.copy_to_device(&src, &mut dev, 0)))?;
    let mut h2d_pipe = pageable("h2d_pageable/pipelined", &t);
    compare(&mut h2d_pipe, &h2d_plain);
    let t = repeat(c.reps, || host_seconds(c.pageable_batch, || d.copy_to_host(&dev, 0, &mut dst)))?;
    let d2h_plain = pageable("d2h_pageable/plain", &t);
    let t = repeat(c.reps, || host_seconds(c.pageable_batch, || copier.copy_to_host(&dev, 0, &mut dst)))?;
    let mut d2h_pipe = pageable("d2h_pageable/pipelined", &t);
    compare(&mut d2h_pipe, &d2h_plain);
    figures.extend([h2d_plain, h2d_pipe, d2h_plain, d2h_pipe]);
    drop((copier, dev, src, dst));

    // ---- empty-kernel launch latency ---------------------------------------
    progress(STEPS[4]);
    let empty = d.builtin_kernel(builtin::EMPTY)?;
    let args = KernelArgs::new();
    let cfg = LaunchConfig::linear(1, 1);
    let times = repeat(c.reps, || {
        let t = host_seconds(c.launch_iters, || {
            // SAFETY: the empty kernel takes no arguments and touches no memory.
            unsafe { d.launch(&empty, cfg, &args, s) }
        });
        d.synchronize(s)?;
        t
    })?;
    let spec = Spec { name: "launch_empty", category: "launch", bytes: 0, iters: c.launch_iters, timing: "host-clock" };
    figures.push(latency(spec, &times));

    // ---- add_index bandwidth -------------------------------------------------
    progress(STEPS[5]);
    // 512 x 512 x (bytes / 1 MiB) f32: 256 MiB is the 512x512x256 array of benches/kernels.rs.
    let shape = [(nbytes / MIB) as i64, 512, 512];
    let times = repeat(c.reps, || {
        device_seconds(d.as_ref(), s, c.batch, || {
            // SAFETY: `a` holds shape.product() f32 (nbytes) and outlives the
            // event synchronize inside device_seconds.
            unsafe { kernels::add_index_async::<D, f32, 3>(d.as_ref(), a.device_ptr(), shape, s) }
        })
    })?;
    let spec =
        Spec { name: "add_index_f32", category: "kernel", bytes: nbytes, iters: c.batch, timing: "device-events" };
    let mut add = bandwidth(spec, 2 * nbytes, &times);
    add.fraction_of_ceiling = Some(add.median / ceiling.gb_per_s);
    figures.push(add);
    d.synchronize(s)?;
    drop((a, b));
    progress(STEPS[6]);

    Ok(BenchReport {
        schema: 1,
        gpuport_version: gpuport::VERSION.to_string(),
        unix_time,
        quick: config == BenchConfig::quick(),
        config,
        device,
        ceiling,
        figures,
        skipped,
        collective: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> BenchConfig {
        BenchConfig {
            bandwidth_bytes: MIB,
            pageable_bytes: 2 * MIB,
            alloc_bytes: MIB,
            reps: 3,
            batch: 2,
            pageable_batch: 1,
            alloc_iters: 20,
            launch_iters: 50,
        }
    }

    #[test]
    fn host_run_has_every_figure_positive() {
        let dev = gpuport::open("host").expect("host");
        let mut steps = Vec::new();
        let report = gpuport::on_backend!(&dev, d => run(d, tiny(), |s| steps.push(s.to_string()))).expect("run");
        assert_eq!(steps, STEPS.map(String::from).to_vec());
        for name in [
            "d2d_copy",
            "alloc_free_1MiB/caching_pool",
            "alloc_free_1MiB/native_async",
            "alloc_free_1MiB/plain",
            "h2d_pinned",
            "d2h_pinned",
            "h2d_pageable/plain",
            "h2d_pageable/pipelined",
            "d2h_pageable/plain",
            "d2h_pageable/pipelined",
            "launch_empty",
            "add_index_f32",
        ] {
            let f = report.figure(name).unwrap_or_else(|| panic!("{name} missing"));
            assert!(f.median > 0.0 && f.best > 0.0 && f.worst > 0.0, "{f:?}");
            assert_eq!(f.reps, 3);
        }
        assert!(report.ceiling.gb_per_s > 0.0);
        assert_eq!(report.figure("d2d_copy").and_then(|f| f.fraction_of_ceiling), Some(1.0));
        assert!(report.figure("add_index_f32").and_then(|f| f.fraction_of_ceiling).is_some_and(|x| x > 0.0));
        assert!(report.figure("alloc_free_1MiB/caching_pool").and_then(|f| f.speedup).is_some());
        assert_eq!(report.device.spec, "host");
        assert!(!report.quick);
    }

    #[test]
    fn summarize_orders_best_and_worst() {
        assert_eq!(summarize(vec![3.0, 1.0, 2.0], false), (2.0, 1.0, 3.0));
        assert_eq!(summarize(vec![3.0, 1.0, 2.0], true), (2.0, 3.0, 1.0));
    }

    #[test]
    fn speedup_direction() {
        let spec = |name| Spec { name, category: "x", bytes: 1, iters: 1, timing: "host-clock" };
        let mut fast = latency(spec("fast"), &[1e-6]);
        let slow = latency(spec("slow"), &[4e-6]);
        compare(&mut fast, &slow);
        assert!((fast.speedup.unwrap_or(0.0) - 4.0).abs() < 1e-9);
        let mut wide = bandwidth(spec("wide"), 1000, &[1e-6]);
        let narrow = bandwidth(spec("narrow"), 1000, &[2e-6]);
        compare(&mut wide, &narrow);
        assert!((wide.speedup.unwrap_or(0.0) - 2.0).abs() < 1e-9);
    }
}
