//! Graph replay against plain launches: 1000 launches of the empty kernel
//! against one replay of a graph that captured the same 1000 launches, in
//! the same run, on the host backend and on `cuda:0` / `rocm:0` where
//! present. Both are timed to completion (enqueue + synchronize), and a
//! paired comparison (alternating rounds) prints the ratio per kernel; the
//! goal on the H100 is a replay at most a third of the launches' time.
//!
//! ```sh
//! cargo bench --bench graphs --features cuda
//! ```

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gpuport::{builtin, on_backend, CaptureMode, Device, GraphExec, KernelArgs, LaunchConfig, ModuleSource};

const KERNELS: usize = 1000;

struct Setup<D: Device> {
    stream: gpuport::Stream<D::B>,
    empty: gpuport::Kernel<D::B>,
    exec: GraphExec<D::B>,
}

fn setup<D: Device>(d: &D) -> Setup<D> {
    let stream = d.create_stream().expect("stream");
    let module = d.load_module(ModuleSource::Builtin).expect("builtin module");
    let empty = d.kernel(&module, builtin::EMPTY).expect("empty kernel");
    let capture = d.begin_capture(&stream, CaptureMode::ThreadLocal).expect("begin capture");
    for _ in 0..KERNELS {
        // SAFETY: the empty kernel takes no arguments and touches no memory.
        unsafe { d.launch(&empty, LaunchConfig::linear(1, 1), &KernelArgs::new(), capture.stream()) }
            .expect("capture launch");
    }
    let exec = capture.end().expect("end capture").instantiate().expect("instantiate");
    Setup { stream, empty, exec }
}

fn launches<D: Device>(d: &D, s: &Setup<D>) {
    let args = KernelArgs::new();
    for _ in 0..KERNELS {
        // SAFETY: as in `setup`.
        unsafe { d.launch(&s.empty, LaunchConfig::linear(1, 1), &args, &s.stream) }.expect("launch");
    }
    d.synchronize(&s.stream).expect("sync");
}

fn replay<D: Device>(d: &D, s: &Setup<D>) {
    s.exec.launch(&s.stream).expect("graph launch");
    d.synchronize(&s.stream).expect("sync");
}

/// Alternating rounds of both, so drift hits both; prints medians and the ratio.
fn paired<D: Device>(d: &D, s: &Setup<D>) {
    const ROUNDS: usize = 21;
    let time = |f: &dyn Fn()| {
        let start = Instant::now();
        f();
        start.elapsed().as_nanos() as f64 / KERNELS as f64
    };
    let (mut plain, mut graph) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        plain.push(time(&|| launches(d, s)));
        graph.push(time(&|| replay(d, s)));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (p, g) = (median(&mut plain), median(&mut graph));
    println!(
        "paired graph_{KERNELS}_empty on {} (median of {ROUNDS} alternating rounds, to completion): \
         launches {:.3} us/kernel, replay {:.3} us/kernel, replay/launch {:.3} (goal <= 0.333: {})",
        d.info().spec(),
        p / 1e3,
        g / 1e3,
        g / p,
        if g / p <= 1.0 / 3.0 { "met" } else { "not met" }
    );
}

fn bench_device<D: Device>(c: &mut Criterion, d: &D) {
    let s = setup(d);
    paired(d, &s);
    let label = d.info().spec();
    let mut group = c.benchmark_group(format!("graph_{KERNELS}_empty"));
    group.bench_function(BenchmarkId::new("launches", &label), |b| b.iter(|| launches(d, &s)));
    group.bench_function(BenchmarkId::new("replay", &label), |b| b.iter(|| replay(d, &s)));
    group.finish();
}

fn benches(c: &mut Criterion) {
    for spec in ["host", "cuda:0", "rocm:0"] {
        match gpuport::open(spec) {
            Ok(dev) => on_backend!(&dev, d => bench_device(c, d.as_ref())),
            Err(e) => eprintln!("{spec} graph benchmarks skipped: {e}"),
        }
    }
}

criterion_group! {
    name = graphs;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(graphs);
