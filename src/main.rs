//! The `gpuport` command.
//!
//! ```text
//! gpuport                      info, then demo
//! gpuport info                  every backend, whether it loaded and why not, each device
//! gpuport demo [--device SPEC]  a small workload on the default (or given) device
//! ```
//! Exit status: 0 on success, 1 when the workload fails, 2 on bad usage.

use std::process::ExitCode;
use std::time::Instant;

use gpuport::{builtin, with_device, Device, DeviceMemory, KernelArgs, ModuleSource};

const USAGE: &str = "usage: gpuport [info | demo [--device SPEC]]   (no command: info, then demo)
  info   list every backend gpuport knows, whether it loaded (and why not), and each device
  demo   allocate, copy, launch the built-in fill kernel and verify, on one device
         SPEC: host | cuda[:N] | rocm[:N]; default: $GPUPORT_DEVICE, else the first GPU, else host";

fn gib(bytes: usize) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn info() -> ExitCode {
    println!("gpuport {}", env!("CARGO_PKG_VERSION"));
    for status in gpuport::backends() {
        match &status.devices {
            Ok(devices) => {
                println!("{}: {} device(s)", status.kind, devices.len());
                for d in devices {
                    println!(
                        "  {:<8} {} | {} | {} multiprocessors | {} | managed: {} | stream-ordered alloc: {}",
                        d.spec(),
                        d.name,
                        d.arch,
                        d.multiprocessors,
                        gib(d.total_memory),
                        d.managed_memory,
                        d.stream_ordered_alloc
                    );
                }
            }
            Err(why) => println!("{}: unavailable: {why}", status.kind),
        }
    }
    match gpuport::default_device() {
        Ok(chosen) => println!("default device: {}", chosen.device.info().spec()),
        Err(e) => println!("default device: none: {e}"),
    }
    ExitCode::SUCCESS
}

/// Fills 16 Mi u32 on the device with the built-in kernel and checks every one.
fn workload<D: Device>(d: &D) -> gpuport::Result<()> {
    const N: usize = 16 << 20;
    let info = d.info();
    println!("running on {} ({}, {})", info.spec(), info.name, info.arch);
    let start = Instant::now();
    let buf = d.alloc(N * 4)?;
    let module = d.load_module(ModuleSource::Builtin)?;
    let fill = d.kernel(&module, builtin::FILL_U32)?;
    let cfg = d.default_launch_config(&fill, N)?;
    let mut args = KernelArgs::new();
    args.push_buffer(&buf).push(&(N as u64)).push(&42u32);
    // SAFETY: (ptr, n, value) matches gpuport_fill_u32; `buf` holds N u32s and
    // lives until after the synchronizing copy below.
    unsafe { d.launch(&fill, cfg, &args, d.default_stream())? };
    let mut out = vec![0u8; buf.len()];
    d.copy_to_host(&buf, 0, &mut out)?;
    let wrong = out.chunks_exact(4).filter(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) != 42).count();
    println!(
        "filled {} MiB with grid {:?} x block {:?}, copied back and checked in {:.1} ms: {}",
        (N * 4) >> 20,
        cfg.grid,
        cfg.block,
        start.elapsed().as_secs_f64() * 1e3,
        if wrong == 0 { "all correct".to_string() } else { format!("{wrong} wrong") }
    );
    if wrong == 0 {
        Ok(())
    } else {
        Err(gpuport::Error::HostTask(format!("{wrong} elements were not filled")))
    }
}

fn demo(spec: Option<&str>) -> ExitCode {
    let device = match spec {
        Some(spec) => gpuport::open(spec),
        None => gpuport::default_device().map(|chosen| {
            for note in &chosen.notes {
                println!("note: {note}");
            }
            chosen.device
        }),
    };
    let device = match device {
        Ok(d) => d,
        Err(e) => {
            eprintln!("gpuport: {e}");
            return ExitCode::from(2);
        }
    };
    match with_device!(device, d => workload(d.as_ref())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuport: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [] => {
            info();
            println!();
            demo(None)
        }
        ["info"] => info(),
        ["demo"] => demo(None),
        ["demo", "--device", spec] => demo(Some(spec)),
        ["-h" | "--help" | "help"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("gpuport: unrecognized arguments {args:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
