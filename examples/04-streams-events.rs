//! Orders work across two streams with an event, without blocking the host.
//!
//! `cargo run --example 04-streams-events`
use gpuport::{builtin, on_backend, Device, KernelArgs, LaunchConfig, ModuleSource};

fn streams<D: Device>(d: &D) -> gpuport::Result<()> {
    let (producer, consumer) = (d.create_stream()?, d.create_stream()?);
    let (src, dst) = (d.alloc(1024)?, d.alloc(1024)?);
    let ready = d.create_event()?;

    // The producer sleeps 100 ms on the device, then writes `src`.
    let module = d.load_module(ModuleSource::Builtin)?;
    let sleep = d.kernel(&module, builtin::SLEEP_NS)?;
    let mut args = KernelArgs::new();
    args.push(&100_000_000u64);
    // SAFETY: the sleep kernel takes one u64 and touches no memory; `src`
    // and `dst` outlive the synchronizes below.
    unsafe {
        d.launch(&sleep, LaunchConfig::linear(1, 1), &args, &producer)?;
        d.memset_async(&src, 0, 1024, 9, &producer)?;
    }
    d.record_event(&ready, &producer)?;

    // The consumer waits for the event on the device, not on the host.
    d.wait_event(&consumer, &ready)?;
    // SAFETY: as above.
    unsafe { d.copy_device_async(&src, 0, &dst, 0, 1024, &consumer)? };
    println!("enqueued; consumer idle yet? {}", d.is_idle(&consumer)?);
    d.synchronize(&consumer)?;

    let mut out = vec![0u8; 1024];
    d.copy_to_host(&dst, 0, &mut out)?;
    assert!(out.iter().all(|&b| b == 9));
    println!("{}: consumer saw the producer's data after the event", d.info().spec());
    Ok(())
}

fn main() -> gpuport::Result<()> {
    let dev = gpuport::default_device()?.device;
    on_backend!(&dev, d => streams(d.as_ref()))
}
