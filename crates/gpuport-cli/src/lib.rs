//! The `gpuport` command: argument parsing, `info`, `demo`, `bench` and
//! `plot`. It is a crate of its own so that the library, `gpuport`, carries
//! none of its dependencies; `src/main.rs` only calls [`main`].
//!
//! ```text
//! gpuport                       info, then demo
//! gpuport info                  every backend, whether it loaded and why not, each device
//! gpuport demo [--device SPEC]  a small workload on the default (or given) device
//! gpuport bench [--device SPEC] [--json FILE] [--quick] [--plot FILE.png]
//! gpuport bench --collective [--device SPEC] [--devices N] [--json FILE] [--quick] [--plot FILE.png]
//!                               all-reduce sweep over the backend's devices, and a peer copy
//! gpuport plot REPORT.json FILE.png   the chart of a saved report
//! ```
//! `bench --collective` ([`collective`]) takes every device of `--device`'s
//! backend (or the first `--devices N`, `--device` first) as one rank each,
//! driven by this process; on the host backend it runs 2 ranks (or
//! `--devices N`) on `host:0` with small sizes only, so CI covers the path.
//! Its chart is bus bandwidth against size (log scale).
//!
//! Exit status: 0 on success, 1 when the work fails, 2 on bad usage
//! (unknown flags, a bad or unavailable `--device`).

#![warn(missing_docs, rust_2018_idioms, unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![deny(unused_must_use)]

pub mod bench;
pub mod collective;
pub mod collective_report;
pub mod memory_plot;
pub mod pickle;
pub mod plot;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};

use bench::{BenchConfig, BenchReport};
use gpuport::memory::{current_resource, MemoryDevice};
use gpuport::{builtin, on_backend, AnyDevice, DeviceMemory, KernelArgs, ModuleSource};

/// Exit status for bad usage.
pub const USAGE_ERROR: u8 = 2;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(name = "gpuport", version = gpuport::VERSION, about = "A portable GPU runtime: device report, demo workload and benchmarks")]
pub struct Cli {
    /// What to do; without one: `info`, then `demo`.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every backend, whether it loaded (and why not), each device, its memory and memory resource.
    Info,
    /// Allocate, copy, launch the built-in fill kernel and verify, on one device.
    Demo {
        /// host, cuda:N or rocm:N (N defaults to 0); default: $GPUPORT_DEVICE, else the first GPU, else host.
        #[arg(long, value_name = "SPEC")]
        device: Option<String>,
    },
    /// Measure allocation, copies, launch latency and kernel bandwidth against the device's own copy bandwidth;
    /// with --collective, all-reduce bus bandwidth across devices and a peer copy.
    Bench {
        /// host, cuda:N or rocm:N (N defaults to 0); default: $GPUPORT_DEVICE, else the first GPU, else host.
        #[arg(long, value_name = "SPEC")]
        device: Option<String>,
        /// Write every figure as JSON to FILE.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Small sizes and few repetitions (seconds on the host backend; for CI).
        #[arg(long)]
        quick: bool,
        /// Draw a bar chart of the figures against the ceiling to FILE.png (PNG only); with --collective,
        /// bus bandwidth against size.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<PathBuf>,
        /// Instead of the single-device figures: float32 sum all-reduce, in place, 8 B to 1 GiB (x8 steps plus
        /// 64 and 256 MiB; --quick: 5 sizes to 64 MiB), one rank per device of --device's backend, with time,
        /// algbw and busbw (nccl-tests' definitions) per size; then a 256 MiB peer copy from the first device to
        /// the second against a copy within the first. On the host backend: 2 ranks on host:0, sizes to 256 KiB.
        #[arg(long)]
        collective: bool,
        /// With --collective: how many ranks (devices); default every device of the backend (host: 2).
        #[arg(long, value_name = "N", requires = "collective")]
        devices: Option<usize>,
    },
    /// Work with memory snapshots (`gpuport.memory.dump_snapshot`, or PyTorch's `_dump_snapshot`).
    Memory {
        /// What to do.
        #[command(subcommand)]
        action: MemoryCommand,
    },
    /// Draw the chart of a saved `bench --json` report (e.g. one from a machine without fonts).
    Plot {
        /// The JSON report written by `gpuport bench --json`.
        #[arg(value_name = "REPORT.json")]
        report: PathBuf,
        /// The PNG to write.
        #[arg(value_name = "FILE.png")]
        out: PathBuf,
    },
}

/// `gpuport memory` subcommands.
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Draw memory in use over time, one line per stream, from a snapshot's history, as a PNG.
    Plot {
        /// The snapshot pickle.
        #[arg(value_name = "FILE")]
        snapshot: PathBuf,
        /// The PNG to write.
        #[arg(short = 'o', long = "out", value_name = "FILE.png")]
        out: PathBuf,
    },
}

/// Runs the command line `args` (without the program name's handling: the
/// first item is the program name, as in `std::env::args`).
pub fn main_with<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0; usage errors to stderr with 2.
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(USAGE_ERROR) } else { ExitCode::SUCCESS };
        }
    };
    match cli.command {
        None => {
            info();
            println!();
            // `info` has just said why each GPU backend is unavailable.
            demo(None, Notes::Quiet)
        }
        Some(Command::Info) => info(),
        Some(Command::Demo { device }) => demo(device.as_deref(), Notes::Print),
        Some(Command::Bench { device, json, quick, plot, collective, devices }) => {
            let mode = if collective { Mode::Collective { ranks: devices } } else { Mode::Single };
            bench(device.as_deref(), json, quick, plot, mode)
        }
        Some(Command::Plot { report, out }) => plot_saved(&report, &out),
        Some(Command::Memory { action: MemoryCommand::Plot { snapshot, out } }) => plot_memory(&snapshot, &out),
    }
}

/// Runs the command line of this process.
pub fn main() -> ExitCode {
    main_with(std::env::args_os())
}

fn gib(bytes: usize) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Free/total memory and the current memory resource's name.
fn memory_line<D: MemoryDevice>(d: &std::sync::Arc<D>) -> String {
    let memory = match d.memory_info() {
        Ok(m) => format!("memory {} free of {}", gib(m.free), gib(m.total)),
        Err(e) => format!("memory: unknown ({e})"),
    };
    let resource = match current_resource::<D::B>(d) {
        Ok(a) => a.resource().name().to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    format!("{memory} | memory resource: {resource}")
}

fn info() -> ExitCode {
    println!("gpuport {}", gpuport::VERSION);
    for status in gpuport::backends() {
        // One line per backend, naming it once ("cuda: unavailable: could not load libcuda ...").
        println!("{status}");
        // Which file each vendor library came from, and why it was chosen.
        for lib in &status.libraries {
            println!("  {:<8} {} ({})", lib.library, lib.path, lib.source);
        }
        for d in status.devices.iter().flatten() {
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
            match gpuport::open(&d.spec()) {
                Ok(dev) => println!("           {}", on_backend!(&dev, x => memory_line(x))),
                Err(e) => println!("           cannot open: {e}"),
            }
        }
    }
    match gpuport::default_device() {
        Ok(chosen) => println!("default device: {}", chosen.device.info().spec()),
        Err(e) => println!("default device: none: {e}"),
    }
    ExitCode::SUCCESS
}

/// Fills 16 Mi u32 on the device with the built-in kernel and checks every
/// one; the buffer comes from the device's current resource.
fn workload<D: gpuport::memory::MemoryDevice>(d: &std::sync::Arc<D>) -> gpuport::Result<()> {
    const N: usize = 16 << 20;
    let info = d.info();
    println!("running on {} ({}, {})", info.spec(), info.name, info.arch);
    let start = Instant::now();
    let buf = gpuport::memory::current_resource::<D::B>(d)?.alloc(N * 4, d.default_stream())?;
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

/// Whether [`open_device`] prints why the default device passed GPUs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notes {
    Print,
    /// Already said (by `info`).
    Quiet,
}

/// Opens `--device SPEC`, or the default device (printing why GPUs were passed over).
fn open_device(spec: Option<&str>, notes: Notes) -> Result<AnyDevice, ExitCode> {
    let device = match spec {
        Some(spec) => gpuport::open(spec).map_err(|e| format!("--device {spec:?}: {e}")),
        None => gpuport::default_device()
            .map(|chosen| {
                if notes == Notes::Print {
                    for note in &chosen.notes {
                        eprintln!("note: {note}");
                    }
                }
                chosen.device
            })
            .map_err(|e| e.to_string()),
    };
    device.map_err(|e| {
        eprintln!("gpuport: {e}");
        ExitCode::from(USAGE_ERROR)
    })
}

fn demo(spec: Option<&str>, notes: Notes) -> ExitCode {
    let device = match open_device(spec, notes) {
        Ok(d) => d,
        Err(code) => return code,
    };
    match on_backend!(&device, d => workload(d)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuport: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Checks, before any work, that `path` can be written: an existing file
/// that opens for writing, or a new name in an existing, writable folder
/// (tried by creating and removing the file). `chart` also requires the
/// `.png` extension, the only format [`plot::draw`] writes.
pub fn check_output(flag: &str, path: &Path, chart: bool) -> Result<(), String> {
    let shown = path.display();
    if chart && !path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        return Err(format!("{flag} {shown}: the chart is a PNG image; accepted: a file name ending in .png"));
    }
    if path.is_dir() {
        return Err(format!("{flag} {shown}: is a folder; accepted: a file in an existing, writable folder"));
    }
    if path.exists() {
        return std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| format!("{flag} {shown}: cannot be written: {e}"));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(format!("{flag} {shown}: folder {} does not exist", parent.display()));
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|file| {
            drop(file);
            std::fs::remove_file(path)
        })
        .map_err(|e| format!("{flag} {shown}: cannot create a file in {}: {e}", parent.display()))
}

/// Prints a usage error and returns its exit status.
fn usage_error(message: &str) -> ExitCode {
    eprintln!("gpuport: {message}");
    ExitCode::from(USAGE_ERROR)
}

/// `gpuport plot REPORT.json FILE.png`: a bad or unreadable report, or an
/// output that cannot be written, exits 2.
fn plot_memory(snapshot: &Path, out: &Path) -> ExitCode {
    if let Err(e) = check_output("FILE.png", out, true) {
        return usage_error(&e);
    }
    match memory_plot::plot_file(snapshot, out) {
        Ok(note) => {
            println!("chart: {}{}", out.display(), note.map(|n| format!(" ({n})")).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpuport: cannot plot {}: {e}", snapshot.display());
            ExitCode::FAILURE
        }
    }
}

fn plot_saved(report: &Path, out: &Path) -> ExitCode {
    if let Err(e) = check_output("FILE.png", out, true) {
        return usage_error(&e);
    }
    let parsed = std::fs::read_to_string(report)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str::<bench::BenchReport>(&text).map_err(|e| e.to_string()));
    let report_data = match parsed {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpuport: {} is not a `gpuport bench --json` report: {e}", report.display());
            return ExitCode::from(2);
        }
    };
    match plot::draw(&report_data, out) {
        Ok(note) => {
            println!("chart: {}{}", out.display(), note.map(|n| format!(" ({n})")).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpuport: cannot draw {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}

/// Which `bench`: the single-device figures, or `--collective`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Single,
    Collective {
        /// `--devices N`.
        ranks: Option<usize>,
    },
}

/// `bench --collective` on `d`'s backend: the ranks' devices (a usage error
/// when there are too few), then the run.
fn run_collective<D>(
    d: &std::sync::Arc<D>,
    ranks: Option<usize>,
    quick: bool,
    progress: &mut dyn FnMut(&str),
    steps: &mut dyn FnMut(usize),
) -> Result<gpuport::Result<BenchReport>, String>
where
    D: MemoryDevice + gpuport::PeerDevice,
    D::B: gpuport::collective::CollectiveBackend + gpuport::Backend<Device = D>,
{
    let devices = collective::rank_devices(d, ranks)?;
    let config = collective::CollectiveConfig::for_backend(d.info().backend, quick);
    steps(config.steps());
    Ok(collective::run(&devices, &config, quick, progress))
}

fn bench(spec: Option<&str>, json: Option<PathBuf>, quick: bool, plot_file: Option<PathBuf>, mode: Mode) -> ExitCode {
    // Bad output paths are usage errors, found before the run rather than after it.
    let outputs = [("--json", &json, false), ("--plot", &plot_file, true)];
    for (flag, path, chart) in outputs {
        if let Some(Err(e)) = path.as_deref().map(|p| check_output(flag, p, chart)) {
            return usage_error(&e);
        }
    }
    let device = match open_device(spec, Notes::Print) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let config = if quick { BenchConfig::quick() } else { BenchConfig::full() };
    let bar = indicatif::ProgressBar::new(bench::STEPS.len() as u64 - 1);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    let spec_name = device.info().spec();
    let mut first = true;
    let mut progress = |step: &str| {
        if !first {
            bar.inc(1);
        }
        first = false;
        bar.set_message(format!("{spec_name}: {step}"));
    };
    let result = match mode {
        Mode::Single => on_backend!(&device, d => bench::run(d, config, &mut progress)),
        Mode::Collective { ranks } => {
            let mut steps = |n: usize| bar.set_length(n.saturating_sub(1) as u64);
            match on_backend!(&device, d => run_collective(d, ranks, quick, &mut progress, &mut steps)) {
                Ok(result) => result,
                Err(usage) => {
                    bar.finish_and_clear();
                    return usage_error(&usage);
                }
            }
        }
    };
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpuport: bench on {spec_name} failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", table(&report));
    let mut status = ExitCode::SUCCESS;
    if let Some(path) = json {
        let written = serde_json::to_string_pretty(&report)
            .map_err(|e| e.to_string())
            .and_then(|text| std::fs::write(&path, text + "\n").map_err(|e| e.to_string()));
        match written {
            Ok(()) => println!("JSON: {}", path.display()),
            Err(e) => {
                eprintln!("gpuport: cannot write {}: {e}", path.display());
                status = ExitCode::FAILURE;
            }
        }
    }
    if let Some(path) = plot_file {
        match plot::draw(&report, &path) {
            Ok(note) => println!("chart: {}{}", path.display(), note.map(|n| format!(" ({n})")).unwrap_or_default()),
            Err(e) => {
                eprintln!("gpuport: cannot draw {}: {e}", path.display());
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}

/// The report as an aligned text table.
pub fn table(r: &BenchReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let d = &r.device;
    let _ = writeln!(
        out,
        "gpuport {} bench{} on {} ({}, {}, {} free of {}, memory resource {})",
        r.gpuport_version,
        if r.quick { " --quick" } else { "" },
        d.spec,
        d.name,
        d.arch,
        gib(d.free_memory_bytes as usize),
        gib(d.total_memory_bytes as usize),
        d.memory_resource
    );
    if r.ceiling.bytes > 0 {
        let _ = writeln!(
            out,
            "ceiling: device-to-device copy of {} MiB = {:.1} GB/s (bytes read + written)\n",
            r.ceiling.bytes >> 20,
            r.ceiling.gb_per_s
        );
    }
    let _ = writeln!(
        out,
        "{:<30} {:>12} {:>6} {:>12} {:>12} {:>9}  {:<14} speedup",
        "figure", "median", "unit", "best", "worst", "ceiling", "timing"
    );
    for f in &r.figures {
        let frac = f.fraction_of_ceiling.map(|x| format!("{:.1}%", 100.0 * x)).unwrap_or_else(|| "-".into());
        let speedup = match (&f.baseline, f.speedup) {
            (Some(b), Some(s)) => format!("{s:.2}x vs {b}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{:<30} {:>12.3} {:>6} {:>12.3} {:>12.3} {:>9}  {:<14} {}",
            f.name, f.median, f.unit, f.best, f.worst, frac, f.timing, speedup
        );
    }
    for s in &r.skipped {
        let _ = writeln!(out, "{:<30} skipped: {}", s.name, s.reason);
    }
    if let Some(c) = &r.collective {
        out += &collective::table(c);
    }
    out
}
