//! Placing managed memory (`MemoryDevice::prefetch_managed`,
//! `advise_managed`, and `MemArray::prefetch`/`advise` on arrays made with
//! `MemArray::managed`): on a GPU the driver's prefetch and advice, on the
//! host backend checks only; typed errors for memory that is not managed
//! and for places that cannot take it. GPU cases skip with a printed reason
//! where the device is absent or has no managed memory.

mod common;

use std::io::Write;
use std::sync::Arc;

use gpuport::array::{Location, MemArray, Transfer};
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
