//! Memory benchmarks, ours against the driver's own paths in the same run:
//!
//! - `alloc_free_1MiB`: caching pool vs plain `cuMemAlloc`/`cuMemFree` vs
//!   `cuMemAllocAsync`/`cuMemFreeAsync` directly and through our
//!   `NativePoolResource` (issue target: pool median ≤ 0.25 µs), and the
//!   pool with the allocation history recording (`pool_history_on`; `pool`
//!   is the same with recording off), and `python_path`: the calls
//!   `gpuport.memory.alloc` and `Allocation.free` make below Python (the
//!   device's observed resource with its statistics, over the current pool,
//!   inside `without_waiting`), the Rust part of the Python figure; and
//!   `hook_path`: what CuPy's and PyTorch's allocator hooks call per
//!   allocation and free (crates/gpuport-py/src/cupy_hook.rs): the device
//!   by backend and ordinal, the stream by handle (0 here), the allocation
//!   kept by its address and freed by it;
//! - `pinned_h2d_64MiB`, `pinned_d2h_64MiB`: a pooled pinned buffer vs a plain
//!   pinned buffer, async copy + synchronize (target: ≥ 95% of plain);
//! - `pageable_h2d_256MiB`, `pageable_d2h_256MiB`: the pipelined
//!   [`PageableCopier`] vs a plain pageable copy (target: ≥ 3×).
//!
//! - `paired pageable_*` lines: plain and pipelined pageable copies alternated
//!   round by round, with a pinned copy as the ceiling; set
//!   `GPUPORT_PAGEABLE_SWEEP=16:2048:1:1,8:4096:16:0`
//!   (lanes:chunk_KiB:streams:streaming-stores)
//!   to compare pipelines.
//!
//! Host variants run everywhere, so the bench always times something.
//!
//! ```sh
//! cargo bench --bench memory --features cuda
//! GPUPORT_PAGEABLE_LANES=8 GPUPORT_PAGEABLE_CHUNK_MIB=4 cargo bench --bench memory --features cuda -- pageable
//! ```

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gpuport::memory::{
    history, Allocator, CachingPool, MemoryDevice, NativePoolResource, PageableCopier, PinnedFlags, PipelineConfig,
    PoolConfig,
};
use gpuport::{on_backend, HostMemory};

const MIB: usize = 1 << 20;
const ALLOC_BYTES: usize = MIB;
const PINNED_BYTES: usize = 64 * MIB;
const PAGEABLE_BYTES: usize = 256 * MIB;

fn alloc_free<D: MemoryDevice>(c: &mut Criterion, d: &Arc<D>) {
    let label = d.info().spec();
    let stream = d.create_stream().expect("stream");
    let pool = Allocator::<D::B>::new(CachingPool::new(d.clone(), PoolConfig::default()));
    drop(pool.alloc(ALLOC_BYTES, &stream).expect("warm the pool"));
    let mut group = c.benchmark_group("alloc_free_1MiB");
    group.bench_function(BenchmarkId::new("pool", &label), |b| {
        b.iter(|| drop(std::hint::black_box(pool.alloc(ALLOC_BYTES, &stream).expect("pool alloc"))))
    });
    // The pool with the allocation history recording (no stacks, a small
    // ring): `pool` above is the same path with recording off, which costs
    // one relaxed atomic load per allocation and free (`memory::history`).
    history::start(history::HistoryConfig { max_entries: 1024, rust_backtrace: false });
    group.bench_function(BenchmarkId::new("pool_history_on", &label), |b| {
        b.iter(|| drop(std::hint::black_box(pool.alloc(ALLOC_BYTES, &stream).expect("pool alloc"))))
    });
    history::stop();
    history::clear();
    group.bench_function(BenchmarkId::new("plain", &label), |b| {
        b.iter(|| drop(std::hint::black_box(d.alloc(ALLOC_BYTES).expect("alloc"))))
    });
    // The driver's pool, keeping 1 GiB cached across synchronizations (the
    // driver's default threshold, 0, would return memory at every sync).
    // `native_async` is the driver call itself (the peer figure);
    // `native_resource` is the same pool through our `NativePoolResource`.
    match NativePoolResource::<D::B>::new(d.clone(), Some(1 << 30)) {
        Ok(native) => {
            group.bench_function(BenchmarkId::new("native_async", &label), |b| {
                b.iter(|| drop(std::hint::black_box(d.alloc_async(ALLOC_BYTES, &stream).expect("alloc_async"))))
            });
            let native = Allocator::<D::B>::new(native);
            group.bench_function(BenchmarkId::new("native_resource", &label), |b| {
                b.iter(|| drop(std::hint::black_box(native.alloc(ALLOC_BYTES, &stream).expect("native alloc"))))
            });
        }
        Err(e) => eprintln!("native_async on {label} skipped: {e}"),
    }
    group.finish();
    d.synchronize(&stream).expect("sync");
}

fn pinned_copies<D: MemoryDevice>(c: &mut Criterion, d: &Arc<D>) {
    let label = d.info().spec();
    let stream = d.create_stream().expect("stream");
    let dev = d.alloc(PINNED_BYTES).expect("device buffer");
    let pool = Allocator::<D::B>::new(CachingPool::new(d.clone(), PoolConfig::default()));
    let mut pooled = pool.alloc_pinned(PINNED_BYTES, PinnedFlags::default()).expect("pooled pinned");
    let mut plain = d.alloc_pinned(PINNED_BYTES).expect("plain pinned");
    pooled.as_mut_slice().fill(1);
    plain.as_mut_slice().fill(1);
    let mut group = c.benchmark_group("pinned_h2d_64MiB");
    group.throughput(Throughput::Bytes(PINNED_BYTES as u64));
    for (name, src) in [("pool", pooled.as_slice()), ("plain", plain.as_slice())] {
        group.bench_function(BenchmarkId::new(name, &label), |b| {
            b.iter(|| {
                // SAFETY: `src` and `dev` outlive the synchronize right after.
                unsafe { d.copy_to_device_async(src, &dev, 0, &stream) }.expect("copy");
                d.synchronize(&stream).expect("sync");
            })
        });
    }
    group.finish();
    let mut group = c.benchmark_group("pinned_d2h_64MiB");
    group.throughput(Throughput::Bytes(PINNED_BYTES as u64));
    for (name, dst) in [("pool", pooled.as_mut_slice()), ("plain", plain.as_mut_slice())] {
        group.bench_function(BenchmarkId::new(name, &label), |b| {
            b.iter(|| {
                // SAFETY: `dst` and `dev` outlive the synchronize right after.
                unsafe { d.copy_to_host_async(&dev, 0, dst, &stream) }.expect("copy");
                d.synchronize(&stream).expect("sync");
            })
        });
    }
    group.finish();
}

fn pageable_copies<D: MemoryDevice>(c: &mut Criterion, d: &Arc<D>) {
    let label = d.info().spec();
    let config = PipelineConfig::default();
    eprintln!("pageable pipeline on {label}: {config:?}");
    let copier = PageableCopier::new(d.clone(), config).expect("copier");
    let mut dev = d.alloc(PAGEABLE_BYTES).expect("device buffer");
    let src = vec![3u8; PAGEABLE_BYTES];
    let mut dst = vec![0u8; PAGEABLE_BYTES];
    let mut group = c.benchmark_group("pageable_h2d_256MiB");
    group.throughput(Throughput::Bytes(PAGEABLE_BYTES as u64));
    group.bench_function(BenchmarkId::new("pipelined", &label), |b| {
        b.iter(|| copier.copy_to_device(&src, &mut dev, 0).expect("copy"))
    });
    group.bench_function(BenchmarkId::new("plain", &label), |b| {
        b.iter(|| d.copy_to_device(&src, &mut dev, 0).expect("copy"))
    });
    group.finish();
    let mut group = c.benchmark_group("pageable_d2h_256MiB");
    group.throughput(Throughput::Bytes(PAGEABLE_BYTES as u64));
    group.bench_function(BenchmarkId::new("pipelined", &label), |b| {
        b.iter(|| copier.copy_to_host(&dev, 0, &mut dst).expect("copy"))
    });
    group.bench_function(BenchmarkId::new("plain", &label), |b| {
        b.iter(|| d.copy_to_host(&dev, 0, &mut dst).expect("copy"))
    });
    group.finish();
}

/// The pipelines to compare in [`paired_pageable`]: `GPUPORT_PAGEABLE_SWEEP`
/// as `lanes:chunk_KiB:streams:streaming` items separated by commas, else the default.
fn sweep_configs() -> Vec<PipelineConfig> {
    let default = PipelineConfig::default();
    let Ok(list) = std::env::var("GPUPORT_PAGEABLE_SWEEP") else { return vec![default] };
    list.split(',')
        .map(|item| {
            let n: Vec<usize> =
                item.split(':').map(|x| x.trim().parse().expect("lanes:chunk_KiB:streams:streaming")).collect();
            let [lanes, chunk_kib, streams, streaming] = n[..] else {
                panic!("{item}: expected lanes:chunk_KiB:streams:streaming (streaming 0 or 1)")
            };
            PipelineConfig { lanes, chunk_bytes: chunk_kib << 10, streams, streaming_stores: streaming != 0, ..default }
        })
        .collect()
}

/// Pageable 256 MiB copies, plain and pipelined, alternated round by round
/// and in alternating order (so drift and the state of the host's caches
/// hit both alike), with a
/// pinned `cuMemcpy*Async` of the same size as the ceiling. Prints the
/// medians and the median of the per-round ratios for each pipeline.
fn paired_pageable<D: MemoryDevice>(d: &Arc<D>) {
    const ROUNDS: usize = 12;
    let label = d.info().spec();
    let stream = d.create_stream().expect("stream");
    let mut dev = d.alloc(PAGEABLE_BYTES).expect("device buffer");
    let src = vec![3u8; PAGEABLE_BYTES];
    let mut dst = vec![0u8; PAGEABLE_BYTES];
    let mut pinned = d.alloc_pinned(PAGEABLE_BYTES).expect("pinned buffer");
    pinned.as_mut_slice().fill(1);
    let gib_s = |seconds: f64| PAGEABLE_BYTES as f64 / seconds / (1u64 << 30) as f64;
    let time = |f: &mut dyn FnMut()| {
        let start = std::time::Instant::now();
        f();
        start.elapsed().as_secs_f64()
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // The host backend has no DMA to overlap, and its copier copies directly
    // (no staging): it times the default only, as a check that pipelined
    // equals plain there.
    let configs =
        if d.info().backend == gpuport::BackendKind::Host { vec![PipelineConfig::default()] } else { sweep_configs() };
    for config in configs {
        let copier = PageableCopier::new(d.clone(), config).expect("copier");
        // [plain, pipelined, pinned] seconds per round, H2D then D2H.
        let mut h2d = [Vec::new(), Vec::new(), Vec::new()];
        let mut d2h = [Vec::new(), Vec::new(), Vec::new()];
        for round in 0..=ROUNDS {
            // Plain first in even rounds, pipelined first in odd ones: what a
            // copy leaves in the caches (a 256 MiB buffer fits in a large
            // L3) then favours neither.
            let order = if round % 2 == 0 { [0, 1, 2] } else { [1, 0, 2] };
            let (mut h, mut g) = ([0.0; 3], [0.0; 3]);
            for k in order {
                h[k] = time(&mut || match k {
                    0 => d.copy_to_device(&src, &mut dev, 0).expect("plain H2D"),
                    1 => copier.copy_to_device(&src, &mut dev, 0).expect("pipelined H2D"),
                    _ => {
                        // SAFETY: `pinned` and `dev` outlive the synchronize right after.
                        unsafe { d.copy_to_device_async(pinned.as_slice(), &dev, 0, &stream) }.expect("pinned H2D");
                        d.synchronize(&stream).expect("sync");
                    }
                });
            }
            for k in order {
                g[k] = time(&mut || match k {
                    0 => d.copy_to_host(&dev, 0, &mut dst).expect("plain D2H"),
                    1 => copier.copy_to_host(&dev, 0, &mut dst).expect("pipelined D2H"),
                    _ => {
                        // SAFETY: `pinned` and `dev` outlive the synchronize right after.
                        unsafe { d.copy_to_host_async(&dev, 0, pinned.as_mut_slice(), &stream) }.expect("pinned D2H");
                        d.synchronize(&stream).expect("sync");
                    }
                });
            }
            if round > 0 {
                // Round 0 warms up (first touch, staging, driver buffers).
                (0..3).for_each(|k| (h2d[k].push(h[k]), d2h[k].push(g[k])).1);
            }
        }
        for (dir, t) in [("h2d", &h2d), ("d2h", &d2h)] {
            let ratios: Vec<f64> = t[0].iter().zip(&t[1]).map(|(plain, piped)| plain / piped).collect();
            let (plain, piped, pin) = (median(t[0].clone()), median(t[1].clone()), median(t[2].clone()));
            println!(
                "paired pageable_{dir}_256MiB on {label} (lanes {}, chunk {} KiB, streams {}, streaming {}; median of {ROUNDS} \
                 rounds, order alternating): plain {:.2} GiB/s, pipelined {:.2} GiB/s, pinned {:.2} GiB/s; \
                 pipelined/plain {:.2}x (per-round median {:.2}x, min {:.2}x), pipelined/pinned {:.0}%",
                config.lanes,
                config.chunk_bytes >> 10,
                config.streams,
                config.streaming_stores,
                gib_s(plain),
                gib_s(piped),
                gib_s(pin),
                plain / piped,
                median(ratios.clone()),
                ratios.iter().copied().fold(f64::INFINITY, f64::min),
                100.0 * pin / piped,
            );
        }
    }
}

/// Whether the command line's filters (if any) ask for pageable copies.
fn pageable_wanted() -> bool {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    filters.is_empty() || filters.iter().any(|f| f.contains("pageable"))
}

fn run_all<D: MemoryDevice>(c: &mut Criterion, d: &Arc<D>) {
    if pageable_wanted() {
        paired_pageable(d);
    }
    alloc_free(c, d);
    pinned_copies(c, d);
    pageable_copies(c, d);
}

/// The Rust calls under the Python binding: `python_path`, what
/// `gpuport.memory.alloc(1 << 20, None, device)` and `.free()` do
/// (crates/gpuport-py/src/memory.rs: the device's resources kept, its
/// default stream, both calls inside `without_waiting`); `hook_path`, what
/// the CuPy and torch allocator hooks call (`memory::alloc_kept` and
/// `memory::release_by_address`; crates/gpuport-py/src/cupy_hook.rs,
/// torch_hook.rs).
fn binding_paths(c: &mut Criterion, dev: &gpuport::AnyDevice) {
    use gpuport::dynamic::{memory, AnyStream};
    let resources = memory::resources_of_any(dev).expect("resources");
    let stream = AnyStream::default_for(dev);
    let mut group = c.benchmark_group("alloc_free_1MiB");
    group.bench_function(BenchmarkId::new("python_path", dev.info().spec()), |b| {
        b.iter(|| {
            let a = memory::alloc_from_without_waiting(&resources, ALLOC_BYTES, &stream)
                .expect("no other thread waits here")
                .expect("alloc");
            assert!(memory::free_without_waiting(std::hint::black_box(a)).is_none());
        })
    });
    group.bench_function(BenchmarkId::new("hook_path", dev.info().spec()), |b| {
        let (kind, ordinal) = (dev.backend(), dev.info().ordinal as i32);
        b.iter(|| {
            // SAFETY: 0 is the device's default stream.
            let ptr = unsafe { memory::alloc_kept(kind, ordinal, memory::NegativeId::Refused, 0, ALLOC_BYTES) };
            assert!(memory::release_by_address(std::hint::black_box(ptr.expect("alloc"))));
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let host = gpuport::open("host").expect("host backend");
    on_backend!(&host, d => run_all(c, d));
    binding_paths(c, &host);
    match gpuport::open("cuda:0") {
        Ok(dev) => {
            on_backend!(&dev, d => run_all(c, d));
            binding_paths(c, &dev);
        }
        Err(e) => eprintln!("cuda:0 memory benchmarks skipped: {e}"),
    }
}

criterion_group! {
    name = memory;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(memory);
