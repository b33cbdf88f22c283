//! Peer copies: 256 MiB from device 0 to device 1 with peer access
//! enabled (`copy_peer`, enqueue + synchronize), against a 256 MiB copy
//! within device 0 (`copy_device`) in the same run, on `cuda:0`/`cuda:1` and
//! `rocm:0`/`rocm:1` where two devices exist. The host backend's one device
//! is its own peer, so the bench always times something.
//!
//! ```sh
//! cargo bench --bench peer --features cuda,rocm
//! ```

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gpuport::{on_backend, PeerDevice};

const BYTES: usize = 256 << 20;

fn peer_copy<D: PeerDevice>(c: &mut Criterion, d0: &Arc<D>) {
    let d1 = match D::count() {
        Ok(n) if n >= 2 => D::open(1).expect("device 1"),
        _ if d0.info().backend == gpuport::BackendKind::Host => d0.clone(),
        _ => {
            eprintln!("{}: fewer than 2 devices, peer copy benchmark skipped", d0.info().spec());
            return;
        }
    };
    let label = format!("{}->{}", d0.info().spec(), d1.info().spec());
    match d0.enable_peer_access(&d1) {
        Ok(()) => {}
        Err(e) => eprintln!("{label}: no peer access ({e}); timing the staged copy"),
    }
    let mut src = d0.alloc(BYTES).expect("source");
    d0.memset(&mut src, 0, BYTES, 0x5A).expect("fill source");
    let mut dst = d1.alloc(BYTES).expect("destination");
    let mut local = d0.alloc(BYTES).expect("local destination");
    let mut group = c.benchmark_group("copy_256MiB");
    group.throughput(Throughput::Bytes(BYTES as u64));
    group.bench_function(BenchmarkId::new("peer", &label), |b| {
        b.iter(|| d0.copy_peer(&src, 0, &mut dst, 0, BYTES).expect("peer copy"))
    });
    group.bench_function(BenchmarkId::new("same_device", d0.info().spec()), |b| {
        b.iter(|| d0.copy_device(&src, 0, &mut local, 0, BYTES).expect("device copy"))
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let host = gpuport::open("host").expect("host backend");
    on_backend!(&host, d => peer_copy(c, d));
    for spec in ["cuda:0", "rocm:0"] {
        match gpuport::open(spec) {
            Ok(dev) => on_backend!(&dev, d => peer_copy(c, d)),
            Err(e) => eprintln!("{spec} peer benchmarks skipped: {e}"),
        }
    }
}

criterion_group! {
    name = peer;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(peer);
