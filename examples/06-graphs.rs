//! Records a kernel launch into a graph once and replays it.
//!
//! `GPUPORT_DEVICE=cuda:0 cargo run --example 06-graphs --features cuda`
use gpuport::{builtin, on_backend, CaptureMode, Device, KernelArgs, ModuleSource};

fn graphs<D: Device>(d: &D) -> gpuport::Result<()> {
    let n = 256u64;
    let stream = d.create_stream()?;
    let buf = d.alloc(4 * n as usize)?;
    let fill = d.kernel(&d.load_module(ModuleSource::Builtin)?, builtin::FILL_U32)?;

    // Everything enqueued on `stream` until `end` is recorded, not run.
    let capture = d.begin_capture(&stream, CaptureMode::Global)?;
    let mut args = KernelArgs::new();
    // The graph keeps `buf` alive.
    args.push_buffer(&buf).push(&n).push(&7u32);
    // SAFETY: the arguments match fill_u32 (pointer, count, value).
    unsafe { d.launch(&fill, d.default_launch_config(&fill, n as usize)?, &args, capture.stream())? };
    // A call that would wait for the capturing stream is refused, and the capture survives it.
    let refused = d.synchronize(capture.stream()).unwrap_err();
    println!("expected error: {refused}");
    let graph = capture.end()?;
    println!("captured {} operation(s)", graph.node_count()?);

    let exec = graph.instantiate()?;
    for _ in 0..3 {
        exec.launch(&stream)?; // each replay runs the whole recording again
    }
    d.synchronize(&stream)?;
    let mut back = vec![0u8; 4 * n as usize];
    d.copy_to_host(&buf, 0, &mut back)?;
    assert!(back.chunks(4).all(|c| c == 7u32.to_ne_bytes()));
    println!("{}: graphs ok", d.info().spec());
    Ok(())
}

fn main() -> gpuport::Result<()> {
    let dev = gpuport::default_device()?.device;
    on_backend!(&dev, d => graphs(d.as_ref()))
}
