//! The `gpuport` command; everything lives in the `gpuport_cli` library
//! (`src/lib.rs`).
//!
//! ```text
//! gpuport                       info, then demo
//! gpuport info                  every backend, whether it loaded and why not, each device
//! gpuport demo [--device SPEC]  a small workload on the default (or given) device
//! gpuport bench [--device SPEC] [--json FILE] [--quick] [--plot FILE.png]
//! ```
//! Exit status: 0 on success, 1 when the work fails, 2 on bad usage.

fn main() -> std::process::ExitCode {
    gpuport_cli::main()
}
