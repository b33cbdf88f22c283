//! Lists every backend and device, then opens the default device.
//!
//! `cargo run --example 01-devices` (add `--features cuda` for NVIDIA GPUs).
fn main() -> gpuport::Result<()> {
    for status in gpuport::backends() {
        // "host: 1 device(s)", "cuda: unavailable: could not load libcuda (tried …)".
        println!("{status}");
        for d in status.devices.iter().flatten() {
            println!("  {}: {} ({}), {} MiB", d.spec(), d.name, d.arch, d.total_memory >> 20);
        }
    }
    // The spec, and after a fallback why each GPU backend was passed over
    // (also in `chosen.notes`, and logged once through the `log` crate).
    let chosen = gpuport::default_device()?;
    println!("default device: {chosen}");
    Ok(())
}
