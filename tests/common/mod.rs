//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use gpuport::{builtin, Device, KernelArgs, ModuleSource, Stream};

/// Opens `spec`, or prints why the test is skipped and returns `None`.
///
/// The reason goes straight to the process's stderr (not through `eprintln!`,
/// which the test harness captures), so a skip is visible in every run.
pub fn open_or_skip(spec: &str) -> Option<gpuport::AnyDevice> {
    match gpuport::open(spec) {
        Ok(dev) => Some(dev),
        Err(e) => {
            let name = std::thread::current().name().unwrap_or("?").to_string();
            let _ = writeln!(std::io::stderr(), "skipped: {name} on {spec}: {e}");
            None
        }
    }
}

/// Runs a generic test body on `spec` if that device can be opened.
#[macro_export]
macro_rules! on_device {
    ($spec:expr, $body:path) => {
        if let Some(dev) = common::open_or_skip($spec) {
            gpuport::on_backend!(&dev, d => $body(d.as_ref()));
        }
    };
}

/// Turns generic test bodies `fn name<D: Device>(d: &D)` into one rstest
/// test per backend (`name::case_1_host`, `case_2_cuda`, `case_3_rocm`), each
/// skipping with a printed reason where its device cannot be opened. Invoke
/// it inside a child module that has `use super::*;`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => { $(
        #[rstest::rstest]
        #[case::host("host")]
        #[case::cuda("cuda:0")]
        #[case::rocm("rocm:0")]
        fn $name(#[case] spec: &str) {
            on_device!(spec, super::$name);
        }
    )* };
}

/// As [`backend_tests!`], for bodies that take the device's `Arc`
/// (`fn name<D: ...>(d: &Arc<D>)`: a caching pool, or a thread, needs one).
#[macro_export]
macro_rules! arc_backend_tests {
    ($($name:ident),* $(,)?) => { $(
        #[rstest::rstest]
        #[case::host("host")]
        #[case::cuda("cuda:0")]
        #[case::rocm("rocm:0")]
        fn $name(#[case] spec: &str) {
            if let Some(dev) = $crate::common::open_or_skip(spec) {
                gpuport::on_backend!(&dev, d => super::$name(d));
            }
        }
    )* };
}

/// A deterministic byte pattern of length `n`.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Enqueues the built-in busy-wait kernel on `stream`, holding it busy.
pub fn hold_stream<D: Device>(dev: &Arc<D>, stream: &Stream<D::B>, for_: Duration) {
    let module = dev.load_module(ModuleSource::Builtin).unwrap();
    let kernel = dev.kernel(&module, builtin::SLEEP_NS).unwrap();
    let mut args = KernelArgs::new();
    args.push(&(for_.as_nanos() as u64));
    let cfg = dev.default_launch_config(&kernel, 1).unwrap();
    // SAFETY: the kernel takes one u64 and touches no memory.
    unsafe { dev.launch(&kernel, cfg, &args, stream).unwrap() };
}

/// Enqueues the built-in `fill_u32` kernel writing `value` to `n` u32s at `ptr`.
///
/// # Safety
/// `ptr` must address `n` u32s of device memory alive until the stream passes.
pub unsafe fn fill_u32<D: Device>(dev: &Arc<D>, stream: &Stream<D::B>, ptr: u64, n: usize, value: u32) {
    let module = dev.load_module(ModuleSource::Builtin).unwrap();
    let kernel = dev.kernel(&module, builtin::FILL_U32).unwrap();
    let mut args = KernelArgs::new();
    args.push(&ptr).push(&(n as u64)).push(&value);
    let cfg = dev.default_launch_config(&kernel, n).unwrap();
    // SAFETY: forwarded to the caller.
    unsafe { dev.launch(&kernel, cfg, &args, stream).unwrap() };
}

/// Whether the test should skip because it makes `backend`'s driver return
/// errors on purpose (an impossible allocation, a bad kernel) and the run is
/// under compute-sanitizer (`GPUPORT_SANITIZE=1`, set by `ci/gpu-sanitize`),
/// which reports every CUDA API error; such tests run in the plain
/// `ci/gpu-run`. The host backend has no driver: never. Prints the reason
/// when it skips.
pub fn provokes_driver_errors(backend: gpuport::BackendKind, what: &str) -> bool {
    if backend == gpuport::BackendKind::Host || std::env::var_os("GPUPORT_SANITIZE").is_none() {
        return false;
    }
    let name = std::thread::current().name().unwrap_or("?").to_string();
    let _ = writeln!(std::io::stderr(), "skipped: {name} under compute-sanitizer: it provokes {what} on purpose");
    true
}

/// A range over all of a raw allocation (the run-time layer's tests).
pub fn whole(a: &gpuport::dynamic::raw::RawAllocation) -> gpuport::dynamic::raw::RawRange {
    // SAFETY: every caller keeps `a` until the work given the range has run
    // (a waiting call, or the allocation is among the owners it keeps).
    unsafe { gpuport::dynamic::raw::RawRange::new(a.ptr(), a.place(), Some(a.len()), None, true) }
}

/// Work that takes a while on `s`: the built-in sleep kernel, `ms`
/// milliseconds, launched through the run-time layer (its owners kept).
pub fn busy(s: &gpuport::dynamic::AnyStream, ms: u64) {
    use gpuport::dynamic::runtime::{self, StreamChoice};
    use gpuport::dynamic::{AnyModule, Code};
    let sleep =
        AnyModule::load(&s.device(), &Code::Builtin, "builtins", &[]).unwrap().kernel(builtin::SLEEP_NS).unwrap();
    let mut args = KernelArgs::new();
    args.push(&(ms * 1_000_000));
    let on = StreamChoice::stream(s.clone());
    // SAFETY: the sleep kernel takes one u64 and touches no memory.
    unsafe { runtime::launch(&sleep, builtin::SLEEP_NS, gpuport::LaunchConfig::linear(1, 1), &args, None, on) }
        .unwrap()
        .keep(())
        .unwrap();
}

/// Whether `device`'s collective engine loads; else a printed skip (a GPU
/// without NCCL or RCCL).
pub fn engine_or_skip<D: Device>(device: &Arc<D>, test: &str) -> bool
where
    D::B: gpuport::collective::CollectiveBackend,
{
    match gpuport::collective::Communicator::<D::B>::engine_on(device) {
        Ok(_) => true,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "skipped: {test} on {}: {e}", device.info().spec());
            false
        }
    }
}

/// `f`'s result, run on a thread of its own; a test failure instead of a
/// hang when it has not returned within `limit` (the thread is left behind).
pub fn within<R: Send + 'static>(limit: Duration, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(r) => r,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("still waiting after {limit:?}: a hang"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the body panicked (see above)"),
    }
}

/// The checkout whose source files (kernel headers) a test reads: the
/// working directory when it is one (it holds `kernels/common`), else the
/// one the test was built from. A GPU bundle built in one folder runs from
/// another (ci/gpu-run changes to the checkout's root), where
/// `CARGO_MANIFEST_DIR` names a folder that does not exist.
pub fn source_root() -> std::path::PathBuf {
    match std::env::current_dir() {
        Ok(dir) if dir.join("kernels/common/array_indexer.h").is_file() => dir,
        _ => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
    }
}
