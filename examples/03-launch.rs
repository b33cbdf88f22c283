//! Loads the built-in kernels and launches one with an occupancy-based configuration.
//!
//! `cargo run --example 03-launch` (host) or with `--features cuda` on a GPU machine.
use gpuport::{builtin, on_backend, Device, KernelArgs, ModuleSource};

fn launch<D: Device>(d: &D) -> gpuport::Result<()> {
    let n = 1000usize;
    let buf = d.alloc(n * 4)?;
    let module = d.load_module(ModuleSource::Builtin)?;
    let fill = d.kernel(&module, builtin::FILL_U32)?;
    let cfg = d.default_launch_config(&fill, n)?;
    let mut args = KernelArgs::new();
    args.push_buffer(&buf).push(&(n as u64)).push(&7u32);
    // SAFETY: the arguments match `gpuport_fill_u32(u32*, u64, u32)` and
    // `buf` (n u32s) outlives the synchronizing copy below.
    unsafe { d.launch(&fill, cfg, &args, d.default_stream())? };
    let mut out = vec![0u8; n * 4];
    d.copy_to_host(&buf, 0, &mut out)?;
    assert!(out.chunks_exact(4).all(|c| c == 7u32.to_le_bytes()));
    println!("{}: filled {n} elements with grid {:?}, block {:?}", d.info().spec(), cfg.grid, cfg.block);
    Ok(())
}

fn main() -> gpuport::Result<()> {
    let dev = gpuport::default_device()?.device;
    on_backend!(&dev, d => launch(d.as_ref()))
}
