//! A typed array with a host and a device copy, a strided view, and a
//! zero-copy DLPack round trip.
//!
//! `GPUPORT_DEVICE=cuda:0 cargo run --example 05-arrays-dlpack --features cuda`
use gpuport::dlpack::ImportedTensor;
use gpuport::{on_backend, Device, Location, MemArray, Transfer};

fn arrays<D: Device>(d: &std::sync::Arc<D>) -> gpuport::Result<()> {
    let stream = d.create_stream()?;
    // 2 x 3 floats, written on the host: the host copy is current.
    let mut a = MemArray::<f32, 2, D>::from_vec(d, [2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    // The built-in kernel adds the sum of each element's indices, on the device.
    a.move_to(Location::Device, &stream, Transfer::Sync, None)?;
    a.add_index(&stream, None)?;
    a.move_to(Location::Host, &stream, Transfer::Sync, None)?;
    assert_eq!(a.to_vec(None)?, vec![1.0, 3.0, 5.0, 5.0, 7.0, 9.0]);

    // Export the host copy as a DLPack tensor and import it again: the
    // same memory, no copy (NumPy, torch and CuPy consume the same tensor).
    let exported = a.to_dlpack(Location::Host, false, None)?;
    // SAFETY: a live tensor gpuport produced, handed over once.
    let imported = unsafe { ImportedTensor::from_legacy(exported.into_raw()) }?;
    assert_eq!(imported.shape(), &[2, 3]);
    assert_eq!(imported.as_slice::<f32>()?, &[1.0, 3.0, 5.0, 5.0, 7.0, 9.0]);
    assert_eq!(a.live_exports(), 1); // the array knows a consumer holds its memory
    drop(imported);

    // Mistakes are typed errors: a shape of the wrong size.
    let err = MemArray::<f32, 2, D>::from_vec(d, [4, 4], vec![0.0; 3]).unwrap_err();
    println!("expected error: {err}");
    println!("{}: arrays and DLPack ok", d.info().spec());
    Ok(())
}

fn main() -> gpuport::Result<()> {
    let dev = gpuport::default_device()?.device;
    on_backend!(&dev, d => arrays(d))
}
