//! Placing managed memory (`MemoryDevice::prefetch_managed`,
//! `advise_managed`, and `MemArray::prefetch`/`advise` on arrays made with
//! `MemArray::managed`): on a GPU the driver's prefetch and advice, on the
//! host backend checks only; typed errors for memory that is not managed
//! and for places that cannot take it. GPU cases skip with a printed reason
//! where the device is absent or has no managed memory. The run-time
//! layer's managed arrays (`MemArray(..., memory="managed")` in Python):
//! made, placed, refused and exported as host-accessible memory.

mod common;

use std::io::Write;
use std::sync::Arc;

use gpuport::array::{Location, MemArray, Transfer};
use gpuport::dlpack::{is_host_accessible, DLDeviceType};
use gpuport::dynamic::array::{new_checked_in, ArrayMemory};
use gpuport::dynamic::managed::ManagedTarget;
use gpuport::dynamic::{AnyArray, AnyStream, DType};
use gpuport::memory::{MemoryDevice, MemoryError};
use gpuport::{Advice, Device, Error, ManagedPlace, MemoryKind};

/// Whether `d` has managed memory; prints why the test is skipped if not.
fn has_managed<D: Device>(d: &D) -> bool {
    if !d.info().managed_memory {
        let _ = writeln!(std::io::stderr(), "skipped on {}: no managed memory", d.info().spec());
    }
    d.info().managed_memory
}

fn prefetching_and_advice_keep_the_contents<D: MemoryDevice>(d: &D) {
    if !has_managed(d) {
        return;
    }
    let mut m = d.alloc_managed(1 << 20).unwrap();
    let data = common::pattern(1 << 20, 3);
    d.copy_to_device(&data, &mut m, 0).unwrap();
    let stream = d.create_stream().unwrap();
    let here = ManagedPlace::Device(d.info().ordinal);
    for advice in Advice::ALL {
        d.advise_managed(&m, advice, here).unwrap();
        d.advise_managed(&m, advice, ManagedPlace::Host).unwrap();
    }
    d.prefetch_managed(&m, here, &stream).unwrap();
    d.prefetch_managed(&m, ManagedPlace::Host, &stream).unwrap();
    d.prefetch_managed(&m, here, &stream).unwrap();
    d.synchronize(&stream).unwrap();
    let mut back = vec![0u8; 1 << 20];
    d.copy_to_host(&m, 0, &mut back).unwrap();
    assert_eq!(back, data);
}

fn memory_that_is_not_managed_is_refused<D: MemoryDevice>(d: &D) {
    let m = d.alloc(4096).unwrap();
    let here = ManagedPlace::Device(d.info().ordinal);
    let e = d.prefetch_managed(&m, here, d.default_stream()).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotManaged { op: "prefetch", .. })), "{e}");
    let e = d.advise_managed(&m, Advice::SetReadMostly, here).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotManaged { op: "advise", .. })), "{e}");
    assert!(e.to_string().contains("managed memory"), "{e}");
}

fn a_device_that_does_not_exist_is_refused<D: MemoryDevice>(d: &D) {
    if !has_managed(d) {
        return;
    }
    let m = d.alloc_managed(4096).unwrap();
    let nowhere = ManagedPlace::Device(4096);
    let e = d.prefetch_managed(&m, nowhere, d.default_stream()).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotAccessible { op: "prefetch", .. })), "{e}");
    assert!(e.to_string().contains("device 4096"), "{e}");
    let e = d.advise_managed(&m, Advice::SetAccessedBy, nowhere).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotAccessible { op: "advise", .. })), "{e}");
}

/// A device without concurrent managed access (CUDA under Windows or WSL,
/// some ROCm parts) cannot take a prefetch: a typed error, nothing queued.
/// Where the device has it, the prefetch runs and the case says it skipped.
fn a_device_without_concurrent_managed_access_refuses_a_prefetch<D: MemoryDevice>(d: &D) {
    if !has_managed(d) {
        return;
    }
    let m = d.alloc_managed(4096).unwrap();
    let here = ManagedPlace::Device(d.info().ordinal);
    match d.prefetch_managed(&m, here, d.default_stream()) {
        Ok(()) => {
            d.synchronize(d.default_stream()).unwrap();
            let _ = writeln!(
                std::io::stderr(),
                "skipped on {}: it takes the prefetch (concurrent managed access)",
                d.info().spec()
            );
        }
        Err(Error::Memory(MemoryError::NotAccessible { op: "prefetch", place, reason })) => {
            assert_eq!(place, here.to_string());
            assert!(reason.contains("concurrent"), "{reason}");
        }
        Err(e) => panic!("expected MemoryError::NotAccessible, got {e}"),
    }
}

fn a_managed_arrays_device_copy_is_managed_and_keeps_its_contents_when_placed<D: MemoryDevice>(d: &Arc<D>) {
    if !has_managed(d.as_ref()) {
        return;
    }
    let mut a = MemArray::<f32, 1, D>::managed(d, [4096]).unwrap();
    assert!(a.is_managed());
    let stream = d.create_stream().unwrap();
    // A kernel writes the device copy: element i becomes i.
    a.add_index(&stream, None).unwrap();
    let ptr = a.device_ptr(None).unwrap();
    let here = ManagedPlace::Device(d.info().ordinal);
    for advice in Advice::ALL {
        a.advise(advice, here, None).unwrap();
    }
    a.prefetch(ManagedPlace::Host, &stream, None).unwrap();
    a.prefetch(here, &stream, None).unwrap();
    assert_eq!(a.device_ptr(None).unwrap(), ptr, "placing moves no addresses");
    a.move_to(Location::Host, &stream, Transfer::Sync, None).unwrap();
    let expected: Vec<f32> = (0..4096u16).map(f32::from).collect();
    assert_eq!(a.to_vec(None).unwrap(), expected);
    let copy = a.try_clone(None).unwrap();
    assert!(copy.is_managed(), "a clone's device copy is managed too");
}

fn an_array_that_is_not_managed_cannot_be_placed<D: MemoryDevice>(d: &Arc<D>) {
    let mut a = MemArray::<f32, 1, D>::zeros(d, [256]).unwrap();
    assert!(!a.is_managed());
    let here = ManagedPlace::Device(d.info().ordinal);
    let e = a.prefetch(here, d.default_stream(), None).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotManaged { op: "prefetch", .. })), "{e}");
    let e = a.advise(Advice::SetReadMostly, here, None).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotManaged { op: "advise", .. })), "{e}");
}

fn a_managed_array_cannot_be_placed_where_no_device_is<D: MemoryDevice>(d: &Arc<D>) {
    if !has_managed(d.as_ref()) {
        return;
    }
    let mut a = MemArray::<f32, 1, D>::managed(d, [256]).unwrap();
    let nowhere = ManagedPlace::Device(4096);
    let e = a.prefetch(nowhere, d.default_stream(), None).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotAccessible { op: "prefetch", .. })), "{e}");
    let e = a.advise(Advice::SetPreferredLocation, nowhere, None).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotAccessible { op: "advise", .. })), "{e}");
}

fn a_managed_resource_hands_out_managed_memory<D: MemoryDevice>(d: &Arc<D>) {
    if !has_managed(d.as_ref()) {
        let e = gpuport::memory::ManagedResource::<D::B>::new(d.clone()).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        return;
    }
    let resource = gpuport::memory::ManagedResource::<D::B>::new(d.clone()).unwrap();
    let alloc = gpuport::memory::Allocator::new(resource);
    let m = alloc.alloc(4096, d.default_stream()).unwrap();
    assert_eq!(gpuport::DeviceMemory::kind(&m), MemoryKind::Managed);
    let buffer = m.buffer().expect("a whole buffer");
    d.prefetch_managed(buffer, ManagedPlace::Host, d.default_stream()).unwrap();
    d.synchronize(d.default_stream()).unwrap();
}

mod per_backend {
    use super::*;
    backend_tests!(
        prefetching_and_advice_keep_the_contents,
        memory_that_is_not_managed_is_refused,
        a_device_that_does_not_exist_is_refused,
        a_device_without_concurrent_managed_access_refuses_a_prefetch,
    );
}

mod per_backend_arc {
    use super::*;
    arc_backend_tests!(
        a_managed_arrays_device_copy_is_managed_and_keeps_its_contents_when_placed,
        an_array_that_is_not_managed_cannot_be_placed,
        a_managed_array_cannot_be_placed_where_no_device_is,
        a_managed_resource_hands_out_managed_memory,
    );
}

/// A managed run-time array of `n` float32 on `dev`, or `None` (with the
/// reason printed) where the device has no managed memory.
fn managed_any_array(dev: &gpuport::AnyDevice, n: usize) -> Option<AnyArray> {
    if !dev.info().managed_memory {
        let _ = writeln!(std::io::stderr(), "skipped on {}: no managed memory", dev.info().spec());
        let e = new_checked_in(dev, DType::Float32, &[n], ArrayMemory::Managed).map(drop).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        return None;
    }
    Some(AnyArray::Owned(new_checked_in(dev, DType::Float32, &[n], ArrayMemory::Managed).unwrap()))
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_managed_run_time_array_is_placed_and_keeps_its_contents(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let Some(mut a) = managed_any_array(&dev, 1024) else { return };
    assert!(a.is_managed());
    let s = AnyStream::default_for(&dev);
    a.add_index(&s, None).unwrap();
    for advice in Advice::ALL {
        a.advise(advice, &ManagedTarget::Own, None).unwrap();
        a.advise(advice, &ManagedTarget::Host, None).unwrap();
    }
    a.prefetch(&ManagedTarget::Host, &s, None).unwrap();
    a.prefetch(&ManagedTarget::named("device").unwrap(), &s, None).unwrap();
    a.prefetch(&ManagedTarget::Device(dev.clone()), &s, None).unwrap();
    a.move_to(Location::Host, &s, Transfer::Sync, None).unwrap();
    let (ptr, _keep) = a.host_bytes("test").unwrap();
    // SAFETY: 1024 float32 of the current, idle host copy, kept alive by
    // `_keep`; `a` is not used meanwhile.
    let back = unsafe { std::slice::from_raw_parts(usize::try_from(ptr).unwrap() as *const f32, 1024) };
    assert!(back.iter().enumerate().all(|(i, &v)| v == i as f32));
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_managed_run_time_arrays_device_copy_is_host_accessible_where_dlpack_says_so(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let Some(mut a) = managed_any_array(&dev, 16) else { return };
    a.add_index(&AnyStream::default_for(&dev), None).unwrap();
    let dl = a.dl(Location::Device);
    let expected = match dev.backend() {
        gpuport::BackendKind::Host => DLDeviceType::CPU,
        gpuport::BackendKind::Cuda => DLDeviceType::CUDA_MANAGED,
        // DLPack has no type for ROCm's managed memory.
        gpuport::BackendKind::Rocm => DLDeviceType::ROCM,
    };
    assert_eq!(dl.device_type, expected);
    let interface = a.host_interface().unwrap();
    assert_eq!(
        interface.is_some(),
        is_host_accessible(dl.device_type),
        "the NumPy interface where the host reaches it"
    );
    if let Some(view) = interface {
        let data = usize::try_from(view.data).unwrap();
        // SAFETY: 16 float32 of host-accessible memory whose work
        // `host_interface` waited for, kept alive by `a`, which is not used meanwhile.
        let back = unsafe { std::slice::from_raw_parts(data as *const f32, 16) };
        assert!(back.iter().enumerate().all(|(i, &v)| v == i as f32));
    }
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_run_time_array_that_is_not_managed_or_placed_elsewhere_is_refused(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::default_for(&dev);
    let mut plain = AnyArray::Owned(new_checked_in(&dev, DType::Float32, &[4], ArrayMemory::Device).unwrap());
    assert!(!plain.is_managed());
    let e = plain.prefetch(&ManagedTarget::Own, &s, None).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotManaged { op: "prefetch", .. })), "{e}");
    let e = plain.advise(Advice::SetReadMostly, &ManagedTarget::Own, None).unwrap_err();
    assert!(matches!(e, Error::Memory(MemoryError::NotManaged { op: "advise", .. })), "{e}");
    let Some(mut a) = managed_any_array(&dev, 4) else { return };
    if dev.backend() != gpuport::BackendKind::Host {
        let host = gpuport::open("host").unwrap();
        let e = a.prefetch(&ManagedTarget::Device(host), &s, None).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "location", .. }), "{e}");
    }
    let e = ArrayMemory::named("pinned").unwrap_err();
    assert!(e.to_string().contains("one of 'device', 'managed'"), "{e}");
}
