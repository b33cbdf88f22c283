//! The current resource sees every allocation of a `MemArray`.
//!
//! A binary of its own: the current resource is per process and device, and
//! must be replaced before anything uses it, which the other tests of a
//! shared binary (running in parallel threads) would race. The one test
//! below has one case per backend, and each case touches only its device.

mod common;

use std::sync::Arc;

use gpuport::memory::{self, Allocator, CachingPool, MemoryResource, PoolConfig, StatisticsResource};
use gpuport::{Backend, BackendKind, Device, Location, MemArray, Transfer};
use rstest::rstest;

const LEN: usize = 1000;
const BYTES: usize = LEN * std::mem::size_of::<f32>();

fn a_statistics_resource_installed_first_sees_every_memarray_allocation_and_free<D: Device>(d: &Arc<D>) {
    let pool = Arc::new(CachingPool::new(d.clone(), PoolConfig::default()));
    let inner: Arc<dyn MemoryResource<D::B>> = pool.clone();
    let stats = Arc::new(StatisticsResource::new(inner));
    memory::set_current_resource(Allocator::<D::B>::from_arc(stats.clone()))
        .expect("nothing in this binary has used the device's current resource yet");
    let s = d.create_stream().unwrap();

    let mut a = MemArray::<f32, 1, D>::from_vec(d, [LEN], (0..LEN).map(|i| i as f32).collect()).unwrap();
    assert_eq!(stats.get().current_count, 0, "the host copy is not device memory");
    a.move_to(Location::Device, &s, Transfer::Async, None).unwrap();
    let st = stats.get();
    assert_eq!((st.current_count, st.current_bytes), (1, BYTES), "the device copy comes from the resource");
    a.scale(2.0, &s, None).unwrap();
    assert_eq!(stats.get().current_count, 1, "a kernel reuses the device copy");

    let mut b = a.try_clone(None).unwrap();
    assert_eq!(stats.get().current_count, 2, "a clone's device copy comes from the resource too");
    b.move_to(Location::Host, &s, Transfer::Sync, None).unwrap();
    assert_eq!(b.get([7], None).unwrap(), 14.0);
    drop(b);
    assert_eq!(stats.get().current_count, 1, "the clone's device copy went back");

    // An export keeps the device copy past the array; it goes back with the export.
    let export = a.to_dlpack(Location::Device, false, None).unwrap();
    drop(a);
    assert_eq!(stats.get().current_count, 1, "the export still holds the device copy");
    drop(export);
    let st = stats.get();
    assert_eq!((st.current_count, st.current_bytes), (0, 0), "{st:?}");
    assert_eq!((st.total_count, st.total_bytes, st.peak_count), (2, 2 * BYTES, 2), "{st:?}");
    let report = pool.report();
    assert_eq!((report.in_use, report.requested), (0, 0), "{report}");

    // On GPU backends the host copies were pinned memory of the same
    // resource, now idle in its pinned pool.
    if <D::B as Backend>::KIND != BackendKind::Host {
        assert!(pool.pinned_pool().cached_bytes() >= BYTES, "host copies come from the resource's pinned pool");
    }
    d.synchronize(&s).unwrap();
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_statistics_resource_installed_first_sees_every_memarray_allocation(#[case] spec: &str) {
    if let Some(dev) = common::open_or_skip(spec) {
        gpuport::on_backend!(&dev, d => a_statistics_resource_installed_first_sees_every_memarray_allocation_and_free(d));
    }
}
