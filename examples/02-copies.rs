//! Allocates device and pinned memory and copies bytes both ways.
//!
//! `GPUPORT_DEVICE=cuda:0 cargo run --example 02-copies --features cuda`
use gpuport::{on_backend, Device, HostMemory};

fn copies<D: Device>(d: &D) -> gpuport::Result<()> {
    let n = 1 << 20;
    let mut buf = d.alloc(n)?;
    let mut staging = d.alloc_pinned(n)?; // page-locked: fast, truly asynchronous copies
    staging.as_mut_slice().iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);

    let stream = d.create_stream()?;
    // SAFETY: `staging` and `buf` stay alive until the synchronize below.
    unsafe { d.copy_to_device_async(staging.as_slice(), &buf, 0, &stream)? };
    d.synchronize(&stream)?;

    let mut back = vec![0u8; n];
    d.copy_to_host(&buf, 0, &mut back)?; // the synchronous form
    assert_eq!(back, staging.as_slice());
    println!("{}: 1 MiB round trip ok", d.info().spec());

    // Mistakes are typed errors, not crashes:
    let err = d.copy_to_device(&[0u8; 16], &mut buf, n - 8).unwrap_err();
    println!("expected error: {err}");
    Ok(())
}

fn main() -> gpuport::Result<()> {
    let dev = gpuport::default_device()?.device;
    on_backend!(&dev, d => copies(d.as_ref()))
}
