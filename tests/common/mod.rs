//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use gpuport::{builtin, AnyDevice, Device, KernelArgs, ModuleSource, Stream};

/// Opens `spec`, or prints `skipped: <reason>` and returns `None` (a GPU
/// test on a machine without that GPU skips instead of failing).
pub fn open_or_skip(spec: &str) -> Option<AnyDevice> {
    match gpuport::open(spec) {
        Ok(dev) => Some(dev),
        Err(e) => {
            println!("skipped: {spec}: {e}");
            None
        }
    }
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
