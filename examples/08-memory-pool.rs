//! The device's current memory resource, a caching pool: allocations reuse
//! freed blocks, and the pool reports what it holds.
//!
//! `GPUPORT_DEVICE=cuda:0 cargo run --example 08-memory-pool --features cuda`
use std::sync::Arc;

use gpuport::memory::current_resource;
use gpuport::{on_backend, Device, DeviceMemory};

fn pool<D: Device>(d: &Arc<D>) -> gpuport::Result<()> {
    let allocator = current_resource::<D::B>(d)?;
    let stream = d.create_stream()?;
    let first = allocator.alloc(1 << 20, &stream)?;
    let address = first.device_ptr();
    drop(first); // back to the pool, not to the driver
    let second = allocator.alloc(1 << 20, &stream)?;
    // Freed on this stream and asked again on it: the same block, at once.
    assert_eq!(second.device_ptr(), address);
    if let Some(report) = allocator.report() {
        println!("in use {} bytes, reserved {} bytes", report.in_use, report.reserved);
    }
    drop(second);
    println!("{}: memory pool ok", d.info().spec());
    Ok(())
}

fn main() -> gpuport::Result<()> {
    let dev = gpuport::default_device()?.device;
    on_backend!(&dev, d => pool(d))
}
