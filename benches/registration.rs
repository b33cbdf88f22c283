//! Buffer registration (`Communicator::register`, NCCL's
//! `ncclCommRegister`): all-reduces of 1 MiB and 64 MiB of float32 across
//! two devices driven by one process, on buffers registered with the
//! communicators against the same buffers unregistered, in the same run.
//! On `cuda:0`/`cuda:1` and `rocm:0`/`rocm:1` where two devices and the
//! library exist; the host backend's pair (its engine registers nothing)
//! checks that the bench runs.
//!
//! ```sh
//! NCCL_NVLS_ENABLE=0 cargo bench --bench registration --features cuda,rocm
//! ```

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gpuport::collective::{CollectiveBackend, Communicator, Op, OpKind, ReduceOp};
use gpuport::dynamic::DType;
use gpuport::{on_backend, Device};

/// One grouped all-reduce of `op` over both ranks' buffers, waited for.
fn all_reduce<D: Device>(comms: &[Communicator<D::B>], bufs: &[gpuport::Buffer<D::B>], devs: &[Arc<D>; 2], op: &Op)
where
    D::B: CollectiveBackend,
{
    Communicator::<D::B>::group(|| {
        for (i, c) in comms.iter().enumerate() {
            // SAFETY: the buffers outlive the synchronize below.
            unsafe { c.enqueue(op, &bufs[i], &bufs[i], devs[i].default_stream())? };
        }
        Ok(())
    })
    .expect("all-reduce");
    for (i, c) in comms.iter().enumerate() {
        c.synchronize(devs[i].default_stream()).expect("synchronize");
    }
}

fn registration<D: Device>(c: &mut Criterion, d0: &Arc<D>)
where
    D::B: CollectiveBackend,
{
    let d1 = if d0.info().backend == gpuport::BackendKind::Host {
        d0.clone()
    } else {
        match D::open(1) {
            Ok(d) => d,
            Err(e) => return eprintln!("{}: no second device ({e}); registration benchmark skipped", d0.info().spec()),
        }
    };
    let devs = [d0.clone(), d1];
    let comms = match Communicator::<D::B>::init_all(&devs) {
        Ok(c) => c,
        Err(e) => return eprintln!("{}: no communicators ({e}); registration benchmark skipped", d0.info().spec()),
    };
    let mut group = c.benchmark_group("all_reduce_registered");
    for bytes in [1usize << 20, 64 << 20] {
        let bufs = [devs[0].alloc(bytes).expect("buffer 0"), devs[1].alloc(bytes).expect("buffer 1")];
        let op = Op { kind: OpKind::AllReduce(ReduceOp::Sum), dtype: DType::Float32, count: bytes / 4 };
        group.throughput(Throughput::Bytes(bytes as u64));
        let label = format!("{} {} MiB", d0.info().spec(), bytes >> 20);
        group.bench_function(BenchmarkId::new("unregistered", &label), |b| {
            b.iter(|| all_reduce(&comms, &bufs, &devs, &op))
        });
        let held: Vec<_> = comms.iter().zip(&bufs).map(|(c, b)| c.register(b).expect("register")).collect();
        eprintln!("{label}: registered with the library: {}", held.iter().all(|r| r.is_held()));
        group.bench_function(BenchmarkId::new("registered", &label), |b| {
            b.iter(|| all_reduce(&comms, &bufs, &devs, &op))
        });
        drop(held);
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    let host = gpuport::open("host").expect("host backend");
    on_backend!(&host, d => registration(c, d));
    for spec in ["cuda:0", "rocm:0"] {
        match gpuport::open(spec) {
            Ok(dev) => on_backend!(&dev, d => registration(c, d)),
            Err(e) => eprintln!("{spec} registration benchmarks skipped: {e}"),
        }
    }
}

criterion_group! {
    name = registered;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(registered);
