//! Placing managed memory (`MemoryDevice::prefetch_managed`,
//! `advise_managed`): on a GPU the driver's prefetch and advice, on the host
//! backend checks only; typed errors for memory that is not managed and for
//! places that cannot take it. GPU cases skip with a printed reason where
//! the device is absent or has no managed memory.

mod common;

use std::io::Write;

use gpuport::memory::{MemoryDevice, MemoryError};
use gpuport::{Advice, Device, Error, ManagedPlace};

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

mod per_backend {
    use super::*;
    backend_tests!(
        prefetching_and_advice_keep_the_contents,
        memory_that_is_not_managed_is_refused,
        a_device_that_does_not_exist_is_refused,
    );
}
