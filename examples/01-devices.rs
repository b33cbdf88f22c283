//! Lists every backend and device, then opens the default device.
//!
//! `cargo run --example 01-devices` (add `--features cuda` for NVIDIA GPUs).
fn main() -> gpuport::Result<()> {
    for status in gpuport::backends() {
        match &status.devices {
            Ok(devices) => {
                for d in devices {
                    println!("{}: {} ({}), {} MiB", d.spec(), d.name, d.arch, d.total_memory >> 20);
                }
            }
            Err(why) => println!("{}: unavailable: {why}", status.kind),
        }
    }
    let chosen = gpuport::default_device()?;
    for note in &chosen.notes {
        println!("note: {note}");
    }
    println!("default device: {}", chosen.device.info().spec());
    Ok(())
}
