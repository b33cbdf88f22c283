//! Built-in kernel bandwidth: `add_index` on a 512x512x256 f32 array
//! (256 MiB) and on a 1 GiB f32 array, against a device-to-device copy of
//! the same bytes in the same run (the hardware ceiling for a kernel that
//! reads and writes every byte once).
//!
//! ```sh
//! cargo bench --bench kernels --features cuda
//! ```
//!
//! GPU times come from device events around a batch of launches (criterion
//! `iter_custom`), so host overheads do not count. Bandwidth is bytes read +
//! bytes written. Before criterion runs, a paired measurement alternates
//! copy and kernel batches and prints the ratio of medians.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gpuport::{kernels, on_backend, Device, DeviceMemory};

const SHAPES: [(&str, [i64; 3]); 2] = [("512x512x256_f32", [512, 512, 256]), ("1GiB_f32", [256, 1024, 1024])];

/// Device time of `iters` repetitions of `work`, measured with events.
fn device_time<D: Device>(d: &D, iters: u64, mut work: impl FnMut()) -> Duration {
    let s = d.default_stream();
    let (start, end) = (d.create_event().unwrap(), d.create_event().unwrap());
    d.record_event(&start, s).unwrap();
    for _ in 0..iters {
        work();
    }
    d.record_event(&end, s).unwrap();
    d.synchronize_event(&end).unwrap();
    Duration::from_secs_f64(d.elapsed_ms(&start, &end).unwrap() as f64 / 1e3)
}

fn kernel_benches<D: Device>(c: &mut Criterion, d: &D, shapes: &[(&str, [i64; 3])]) {
    let label = d.info().spec();
    for &(name, shape) in shapes {
        let n = shape.iter().product::<i64>() as usize;
        let bytes = n * 4;
        let (mut a, b) = match (d.alloc(bytes), d.alloc(bytes)) {
            (Ok(a), Ok(b)) => (a, b),
            _ => {
                eprintln!("{label}: skipping {name}: cannot allocate 2 x {bytes} bytes");
                continue;
            }
        };
        d.memset(&mut a, 0, bytes, 0).unwrap();
        let s = d.default_stream();
        let copy = || {
            // SAFETY: both buffers outlive every synchronize in this function.
            unsafe { d.copy_device_async(&a, 0, &b, 0, bytes, s) }.unwrap()
        };
        let add = || {
            // SAFETY: `a` holds n f32 and outlives every synchronize here.
            unsafe { kernels::add_index_async::<D, f32, 3>(d, a.device_ptr(), shape, s) }.unwrap()
        };
        add(); // compile/load outside the timing
        d.synchronize(s).unwrap();

        let (mut t_copy, mut t_add) = (Vec::new(), Vec::new());
        for _ in 0..15 {
            t_copy.push(device_time(d, 10, copy).as_secs_f64());
            t_add.push(device_time(d, 10, add).as_secs_f64());
        }
        t_copy.sort_by(f64::total_cmp);
        t_add.sort_by(f64::total_cmp);
        let gbps = |t: f64| 2.0 * bytes as f64 * 10.0 / t / 1e9;
        println!(
            "paired {label} {name}: copy {:.0} GB/s, add_index {:.0} GB/s, add_index/copy = {:.1}%",
            gbps(t_copy[7]),
            gbps(t_add[7]),
            100.0 * t_copy[7] / t_add[7]
        );

        let mut group = c.benchmark_group(format!("bandwidth_{name}"));
        group.throughput(Throughput::Bytes(2 * bytes as u64)).sample_size(20);
        group.bench_function(BenchmarkId::new("d2d_copy", &label), |bench| {
            bench.iter_custom(|it| device_time(d, it, copy))
        });
        group.bench_function(BenchmarkId::new("add_index", &label), |bench| {
            bench.iter_custom(|it| device_time(d, it, add))
        });
        group.finish();
    }
}

/// Tuning sweep for add_index on 1 GiB f32: unroll depth and launch shape
/// (resident grid-stride vs one step per thread), each paired with the copy.
#[cfg(feature = "cuda")]
fn add_index_variants<D: Device>(d: &D) {
    use gpuport::{KernelArgs, LaunchConfig, ModuleSource};
    let shape = [256i64, 1024, 1024];
    let bytes = (shape.iter().product::<i64>() * 4) as usize;
    let (mut a, b) = (d.alloc(bytes).unwrap(), d.alloc(bytes).unwrap());
    d.memset(&mut a, 0, bytes, 0).unwrap();
    let s = d.default_stream();
    let inline = |src: &str| {
        src.replace("#include \"array_ops.h\"", include_str!("../kernels/common/array_ops.h"))
            .replace("#include \"array_indexer.h\"", include_str!("../kernels/common/array_indexer.h"))
    };
    let base = kernels::single_kernel_program(include_str!("../kernels/cuda/array_ops.cu"), "gpuport_add_index_f32_3")
        .expect("program");
    for unroll in [1, 2, 4, 8] {
        let code = inline(&format!("#define GPUPORT_UNROLL {unroll}\n{base}"));
        let module = d.load_module(ModuleSource::Source { code: &code, name: "variant.cu", options: &[] }).unwrap();
        let k = d.kernel(&module, "gpuport_add_index_f32_3").unwrap();
        let work = bytes / 16 / unroll;
        let configs = [
            ("resident", d.resident_launch_config(&k, work).unwrap()),
            ("full-256", LaunchConfig::for_elements(work, 256).unwrap()),
            ("full-512", LaunchConfig::for_elements(work, 512).unwrap()),
        ];
        for (label, cfg) in configs {
            let mut args = KernelArgs::new();
            args.push(&kernels::IndexerArg { data: a.device_ptr(), shape });
            // SAFETY: the argument matches; `a` outlives every synchronize here.
            let add = || unsafe { d.launch(&k, cfg, &args, s) }.unwrap();
            // SAFETY: both buffers outlive every synchronize here.
            let copy = || unsafe { d.copy_device_async(&a, 0, &b, 0, bytes, s) }.unwrap();
            let (mut tc, mut ta) = (Vec::new(), Vec::new());
            for _ in 0..11 {
                tc.push(device_time(d, 10, copy).as_secs_f64());
                ta.push(device_time(d, 10, add).as_secs_f64());
            }
            tc.sort_by(f64::total_cmp);
            ta.sort_by(f64::total_cmp);
            println!(
                "variant unroll={unroll} {label} grid {:?} block {:?}: add_index/copy = {:.1}%",
                cfg.grid,
                cfg.block,
                100.0 * tc[5] / ta[5]
            );
        }
    }
}

fn benches(c: &mut Criterion) {
    // The first load compiles every built-in kernel (NVRTC on CUDA) unless cached.
    match gpuport::open("cuda:0") {
        Ok(dev) => on_backend!(&dev, d => {
            let start = Instant::now();
            d.load_module(gpuport::ModuleSource::Builtin).expect("builtin module");
            println!("{}: first load of the built-in module (cache: {:?}): {:.0} ms",
                d.info().spec(), kernels::cache::cache_dir(), start.elapsed().as_secs_f64() * 1e3);
            #[cfg(feature = "cuda")]
            if std::env::var_os("GPUPORT_BENCH_VARIANTS").is_some() {
                add_index_variants(d.as_ref());
            }
            kernel_benches(c, d.as_ref(), &SHAPES)
        }),
        Err(e) => eprintln!("cuda:0 benchmarks skipped: {e}"),
    }
    let host = gpuport::open("host").expect("host");
    on_backend!(&host, d => kernel_benches(c, d.as_ref(), &SHAPES[..1]));
}

criterion_group! {
    name = kernel_bandwidth;
    config = Criterion::default().warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(kernel_bandwidth);
