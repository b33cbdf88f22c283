//! Runtime-core benchmarks: empty-kernel launch latency and 1 MiB host-to-device
//! copies through gpuport, and the same operations through raw cudarc in the
//! same run (with `--features cuda` on a machine with a GPU).
//!
//! ```sh
//! cargo bench --bench runtime --features cuda
//! ```
//!
//! Launches are timed enqueue-only (the stream is synchronized outside the
//! timed region), the way cudarc's own figure is taken. Copies are timed to
//! completion (enqueue + synchronize).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gpuport::{builtin, on_backend, Device, HostMemory, KernelArgs, LaunchConfig, ModuleSource};

const COPY_BYTES: usize = 1 << 20;

fn gpuport_benches<D: Device>(c: &mut Criterion, d: &D) {
    let label = d.info().spec();
    let stream = d.create_stream().expect("stream");
    let module = d.load_module(ModuleSource::Builtin).expect("builtin module");
    let empty = d.kernel(&module, builtin::EMPTY).expect("empty kernel");
    let args = KernelArgs::new();
    let cfg = LaunchConfig::linear(1, 1);

    let mut group = c.benchmark_group("launch_empty");
    group.bench_function(BenchmarkId::new("gpuport", &label), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                // SAFETY: the empty kernel takes no arguments and touches no memory.
                unsafe { d.launch(&empty, cfg, &args, &stream) }.expect("launch");
            }
            let elapsed = start.elapsed();
            d.synchronize(&stream).expect("sync");
            elapsed
        })
    });
    group.finish();

    let dst = d.alloc(COPY_BYTES).expect("alloc");
    let mut pinned = d.alloc_pinned(COPY_BYTES).expect("pinned");
    pinned.as_mut_slice().fill(1);
    let pageable = vec![1u8; COPY_BYTES];
    let mut group = c.benchmark_group("h2d_1MiB");
    group.throughput(Throughput::Bytes(COPY_BYTES as u64));
    for (kind, src) in [("pinned", pinned.as_slice()), ("pageable", &pageable[..])] {
        group.bench_function(BenchmarkId::new(format!("gpuport/{kind}"), &label), |b| {
            b.iter(|| {
                // SAFETY: `src` and `dst` outlive the synchronize right after.
                unsafe { d.copy_to_device_async(src, &dst, 0, &stream) }.expect("copy");
                d.synchronize(&stream).expect("sync");
            })
        });
    }
    group.finish();
}

#[cfg(feature = "cuda")]
fn cudarc_benches(c: &mut Criterion, arch: &str) {
    use cudarc::driver::{CudaContext, LaunchConfig as CuConfig};
    let ctx = CudaContext::new(0).expect("cudarc context");
    let stream = ctx.new_stream().expect("cudarc stream");
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(Box::leak(arch.to_string().into_boxed_str())),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(include_str!("../kernels/cuda/builtins.cu"), opts).expect("nvrtc");
    let module = ctx.load_module(ptx).expect("module");
    let empty = module.load_function(builtin::EMPTY).expect("function");
    let cfg = CuConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };

    paired_launch_comparison(&empty, cfg, &stream);

    let mut group = c.benchmark_group("launch_empty");
    group.bench_function(BenchmarkId::new("cudarc", "cuda:0"), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                // SAFETY: the empty kernel takes no arguments.
                unsafe { stream.launch_builder(&empty).launch(cfg) }.expect("launch");
            }
            let elapsed = start.elapsed();
            stream.synchronize().expect("sync");
            elapsed
        })
    });
    group.finish();

    let mut dst = stream.alloc_zeros::<u8>(COPY_BYTES).expect("alloc");
    // SAFETY: filled right below before any read.
    let mut pinned =
        unsafe { ctx.alloc_pinned_with_flags::<u8>(COPY_BYTES, cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE) }
            .expect("pinned");
    pinned.as_mut_slice().expect("pinned slice").fill(1);
    let pageable = vec![1u8; COPY_BYTES];
    let mut group = c.benchmark_group("h2d_1MiB");
    group.throughput(Throughput::Bytes(COPY_BYTES as u64));
    group.bench_function(BenchmarkId::new("cudarc/pinned", "cuda:0"), |b| {
        b.iter(|| {
            stream.memcpy_htod(&pinned, &mut dst).expect("copy");
            stream.synchronize().expect("sync");
        })
    });
    group.bench_function(BenchmarkId::new("cudarc/pageable", "cuda:0"), |b| {
        b.iter(|| {
            stream.memcpy_htod(&pageable, &mut dst).expect("copy");
            stream.synchronize().expect("sync");
        })
    });
    group.finish();
}

/// Alternates blocks of gpuport and cudarc launches (20 rounds of 5000 each)
/// so clock and thermal drift hit both equally; prints the medians and ratio.
#[cfg(feature = "cuda")]
fn paired_launch_comparison(
    cu_empty: &cudarc::driver::CudaFunction,
    cu_cfg: cudarc::driver::LaunchConfig,
    cu_stream: &std::sync::Arc<cudarc::driver::CudaStream>,
) {
    const ROUNDS: usize = 20;
    const PER_ROUND: u32 = 5000;
    let dev = gpuport::CudaDevice::open(0).expect("cuda:0");
    let stream = dev.create_stream().expect("stream");
    let module = dev.load_module(ModuleSource::Builtin).expect("module");
    let empty = dev.kernel(&module, builtin::EMPTY).expect("kernel");
    let (args, cfg) = (KernelArgs::new(), LaunchConfig::linear(1, 1));
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..PER_ROUND {
            // SAFETY: the empty kernel takes no arguments.
            unsafe { dev.launch(&empty, cfg, &args, &stream) }.expect("launch");
        }
        ours.push(start.elapsed().as_nanos() as f64 / PER_ROUND as f64);
        dev.synchronize(&stream).expect("sync");
        let start = Instant::now();
        for _ in 0..PER_ROUND {
            // SAFETY: the empty kernel takes no arguments.
            unsafe { cu_stream.launch_builder(cu_empty).launch(cu_cfg) }.expect("launch");
        }
        theirs.push(start.elapsed().as_nanos() as f64 / PER_ROUND as f64);
        cu_stream.synchronize().expect("sync");
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (median(&mut ours), median(&mut theirs));
    println!(
        "paired launch_empty (median of {ROUNDS} alternating rounds x {PER_ROUND}): gpuport {:.2} us, cudarc {:.2} us, ratio {:.3}",
        a / 1e3,
        b / 1e3,
        a / b
    );
}

fn benches(c: &mut Criterion) {
    let host = gpuport::open("host").expect("host backend");
    on_backend!(&host, d => gpuport_benches(c, d.as_ref()));
    match gpuport::open("cuda:0") {
        Ok(dev) => {
            let arch = dev.info().arch.clone();
            on_backend!(&dev, d => gpuport_benches(c, d.as_ref()));
            #[cfg(feature = "cuda")]
            cudarc_benches(c, &arch);
            let _ = arch;
        }
        Err(e) => eprintln!("cuda:0 benchmarks skipped: {e}"),
    }
}

criterion_group! {
    name = runtime;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(runtime);
