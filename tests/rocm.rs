//! The ROCm backend's suite: the behaviours checked for `host` and `cuda:0`,
//! on `rocm:0`.
//!
//! Every device test opens `rocm:0` and, when that fails, prints
//! `skipped: <error>` and passes, unless `GPUPORT_EXPECT_ROCM` says what must
//! happen on this machine:
//! - `device`: `rocm:0` must open; a skip is a failure. Set on the GPU machine,
//!   where `GPUPORT_HIP_LIBRARY` points at the HIP-on-CUDA shim.
//! - `no-device`: the HIP library must load and report no device. Set in CI,
//!   which installs Debian's ROCm 5.2 on a machine without an AMD GPU.
//!
//! The hiprtc tests need no device: they compile for `rocm:0`'s target when
//! it opens, else for gfx90a (or `GPUPORT_TEST_HIPRTC_ARCH`).
#![cfg(feature = "rocm")]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuport::backend::hip::{compile_source, RocmBuffer, RocmDevice};
use gpuport::{builtin, BackendKind, Device, DeviceMemory, Error, HostMemory, KernelArgs, LaunchConfig, ModuleSource};

const EXPECT_ENV: &str = "GPUPORT_EXPECT_ROCM";

fn expectation() -> String {
    std::env::var(EXPECT_ENV).unwrap_or_default()
}

/// `rocm:0`, or `None` after printing why the test is skipped.
fn device() -> Option<Arc<RocmDevice>> {
    match gpuport::open("rocm:0") {
        Ok(gpuport::AnyDevice::Rocm(dev)) => Some(dev),
        Ok(other) => panic!("open(\"rocm:0\") returned a {} device", other.backend()),
        Err(e) => {
            assert!(expectation() != "device", "{EXPECT_ENV}=device but rocm:0 did not open: {e}");
            println!("skipped: {e}");
            None
        }
    }
}

/// Bytes 0, 1, 2, … wrapping at 251 (a prime, so offsets show up).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn read_back(dev: &RocmDevice, buf: &RocmBuffer) -> Vec<u8> {
    let mut out = vec![0u8; buf.len()];
    dev.copy_to_host(buf, 0, &mut out).unwrap();
    out
}

/// Enqueues `gpuport_sleep_ns(ns)` on `stream`. The built-in module is
/// compiled at its first use; call `load_module` first where that must not
/// count (it is cached per device).
fn sleep_kernel_ns(dev: &RocmDevice, ns: u64, stream: &gpuport::Stream<gpuport::Rocm>) {
    let module = dev.load_module(ModuleSource::Builtin).unwrap();
    let sleep = dev.kernel(&module, builtin::SLEEP_NS).unwrap();
    let mut args = KernelArgs::new();
    args.push(&ns);
    // SAFETY: one u64 argument, as gpuport_sleep_ns declares; no buffers.
    unsafe { dev.launch(&sleep, LaunchConfig::linear(1, 1), &args, stream) }.unwrap();
}

// ---- availability ------------------------------------------------------------

#[test]
fn opening_rocm_succeeds_or_says_why_not() {
    match (gpuport::open("rocm:0"), expectation().as_str()) {
        (Ok(dev), _) => {
            assert_eq!(dev.backend(), BackendKind::Rocm);
            println!("rocm:0 is {:?}", dev.info());
        }
        (Err(e), "device") => panic!("{EXPECT_ENV}=device but rocm:0 did not open: {e}"),
        (Err(Error::NoDevice { backend, reason }), _) => {
            assert_eq!(backend, BackendKind::Rocm);
            assert!(reason.contains("ROCm loaded, no device"), "{reason}");
            println!("no device, as reported: {reason}");
        }
        (Err(e), "no-device") => panic!("{EXPECT_ENV}=no-device but open(\"rocm:0\") gave: {e}"),
        (Err(Error::LibraryNotFound { backend, library, tried }), _) => {
            assert_eq!(backend, BackendKind::Rocm);
            assert_eq!(library, "libamdhip64");
            assert!(tried.contains("libamdhip64.so.5") && tried.contains("/opt/rocm/lib/"), "{tried}");
            println!("skipped: no HIP library here (tried {tried})");
        }
        (Err(e), _) => panic!("unexpected error opening rocm:0: {e}"),
    }
}

#[test]
fn backends_list_rocm_as_compiled_in() {
    let all = gpuport::backends();
    let rocm = all.iter().find(|s| s.kind == BackendKind::Rocm).unwrap();
    assert!(rocm.compiled);
    match &rocm.devices {
        Ok(devices) => assert!(!devices.is_empty()),
        Err(e) => assert!(matches!(e, Error::NoDevice { .. } | Error::LibraryNotFound { .. }), "{e}"),
    }
}

#[test]
fn the_default_device_falls_back_with_a_note_when_rocm_is_unusable() {
    if std::env::var("GPUPORT_DEVICE").is_ok() {
        println!("skipped: GPUPORT_DEVICE is set");
        return;
    }
    let chosen = gpuport::default_device().unwrap();
    if chosen.device.backend() == BackendKind::Host {
        assert!(chosen.notes.iter().any(|n| n.contains("rocm")), "{:?}", chosen.notes);
    }
}

#[test]
fn invalid_specs_are_rejected() {
    for bad in ["rocm:x", "rocm:-1", "hip:", "rocm:0:1"] {
        assert!(matches!(gpuport::open(bad), Err(Error::InvalidDeviceSpec { .. })), "{bad:?}");
    }
    if device().is_some() {
        let err = gpuport::open("rocm:4096").unwrap_err();
        assert!(matches!(err, Error::InvalidDeviceSpec { .. }), "{err}");
    }
}

// ---- properties and memory ---------------------------------------------------

#[test]
fn device_info_describes_the_gpu() {
    let Some(dev) = device() else { return };
    let info = dev.info();
    println!("{info:?}");
    assert_eq!(info.backend, BackendKind::Rocm);
    assert_eq!(info.spec(), "rocm:0");
    assert!(!info.name.is_empty());
    assert!(info.arch.starts_with("gfx") || info.arch.starts_with("sm_"), "arch {:?}", info.arch);
    assert!(info.multiprocessors > 0);
    assert!(info.total_memory > 0);
    assert!(info.limits.max_threads_per_block >= 256);
    assert!(matches!(info.limits.warp_size, 32 | 64), "warp size {}", info.limits.warp_size);
    assert!(info.limits.max_shared_memory_per_block >= 16 * 1024);
}

#[test]
fn memory_info_reports_free_within_total() {
    let Some(dev) = device() else { return };
    let m = dev.memory_info().unwrap();
    assert!(m.total > 0 && m.free <= m.total, "{m:?}");
}

#[test]
fn bytes_round_trip_through_device_memory() {
    let Some(dev) = device() else { return };
    let data = pattern(1 << 20);
    let mut buf = dev.alloc(data.len()).unwrap();
    assert_eq!(buf.len(), data.len());
    assert_eq!(buf.kind(), gpuport::MemoryKind::Device);
    dev.copy_to_device(&data, &mut buf, 0).unwrap();
    assert_eq!(read_back(&dev, &buf), data);
    // Offsets on both sides.
    dev.copy_to_device(&[9u8; 100], &mut buf, 1000).unwrap();
    let mut part = vec![0u8; 102];
    dev.copy_to_host(&buf, 999, &mut part).unwrap();
    assert_eq!(part[0], data[999]);
    assert!(part[1..101].iter().all(|&b| b == 9));
    assert_eq!(part[101], data[1100]);
}

#[test]
fn device_to_device_copies_move_the_given_range() {
    let Some(dev) = device() else { return };
    let data = pattern(4096);
    let mut a = dev.alloc(4096).unwrap();
    let mut b = dev.alloc(4096).unwrap();
    dev.copy_to_device(&data, &mut a, 0).unwrap();
    dev.memset(&mut b, 0, 4096, 0).unwrap();
    dev.copy_device(&a, 100, &mut b, 200, 1000).unwrap();
    let out = read_back(&dev, &b);
    assert!(out[..200].iter().all(|&x| x == 0));
    assert_eq!(&out[200..1200], &data[100..1100]);
    assert!(out[1200..].iter().all(|&x| x == 0));
}

#[test]
fn memset_sets_only_the_given_range() {
    let Some(dev) = device() else { return };
    let mut buf = dev.alloc(1000).unwrap();
    dev.memset(&mut buf, 0, 1000, 0x11).unwrap();
    dev.memset(&mut buf, 10, 20, 0xAB).unwrap();
    let out = read_back(&dev, &buf);
    assert!(out[..10].iter().all(|&x| x == 0x11));
    assert!(out[10..30].iter().all(|&x| x == 0xAB));
    assert!(out[30..].iter().all(|&x| x == 0x11));
}

#[test]
fn zero_size_allocations_are_refused() {
    let Some(dev) = device() else { return };
    assert!(matches!(dev.alloc(0), Err(Error::InvalidArgument { name: "bytes", .. })));
    assert!(matches!(dev.alloc_pinned(0), Err(Error::InvalidArgument { name: "bytes", .. })));
    assert!(matches!(dev.alloc_managed(0), Err(Error::InvalidArgument { name: "bytes", .. })));
    assert!(matches!(dev.alloc_async(0, dev.default_stream()), Err(Error::InvalidArgument { name: "bytes", .. })));
}

#[test]
fn an_impossible_allocation_is_out_of_memory() {
    if common::provokes_driver_errors(BackendKind::Rocm, "an allocation the device cannot make") {
        return;
    }
    let Some(dev) = device() else { return };
    match dev.alloc(1 << 50) {
        Err(Error::OutOfMemory { backend: BackendKind::Rocm, ordinal: 0, bytes }) => assert_eq!(bytes, 1 << 50),
        other => panic!("expected OutOfMemory for 1 PiB, got {other:?}"),
    }
    // The device still works afterwards.
    let mut buf = dev.alloc(16).unwrap();
    dev.memset(&mut buf, 0, 16, 1).unwrap();
}

#[test]
fn out_of_bounds_copies_are_refused() {
    let Some(dev) = device() else { return };
    let mut buf = dev.alloc(64).unwrap();
    let mut other = dev.alloc(64).unwrap();
    let oob = |r: gpuport::Result<()>| matches!(r, Err(Error::OutOfBounds { .. }));
    assert!(oob(dev.copy_to_device(&[0u8; 65], &mut buf, 0)));
    assert!(oob(dev.copy_to_device(&[0u8; 10], &mut buf, 60)));
    assert!(oob(dev.copy_to_device(&[0u8; 1], &mut buf, usize::MAX)));
    assert!(oob(dev.copy_to_host(&buf, 1, &mut [0u8; 64])));
    assert!(oob(dev.copy_device(&buf, 0, &mut other, 32, 64)));
    assert!(oob(dev.copy_device(&buf, 63, &mut other, 0, 2)));
    assert!(oob(dev.memset(&mut buf, 64, 1, 0)));
    // Empty copies at the end are fine.
    dev.copy_to_device(&[], &mut buf, 64).unwrap();
}

#[test]
fn pinned_memory_is_zeroed_and_copies_both_ways() {
    let Some(dev) = device() else { return };
    let mut pinned = dev.alloc_pinned(4096).unwrap();
    assert!(pinned.as_slice().iter().all(|&b| b == 0));
    pinned.as_mut_slice().copy_from_slice(&pattern(4096));
    let mut buf = dev.alloc(4096).unwrap();
    dev.copy_to_device(pinned.as_slice(), &mut buf, 0).unwrap();
    let mut back = dev.alloc_pinned(4096).unwrap();
    dev.copy_to_host(&buf, 0, back.as_mut_slice()).unwrap();
    assert_eq!(back.as_slice(), &pattern(4096)[..]);
}

#[test]
fn managed_memory_round_trips_or_is_unsupported() {
    let Some(dev) = device() else { return };
    match dev.alloc_managed(4096) {
        Ok(mut buf) => {
            assert_eq!(buf.kind(), gpuport::MemoryKind::Managed);
            dev.copy_to_device(&pattern(4096), &mut buf, 0).unwrap();
            assert_eq!(read_back(&dev, &buf), pattern(4096));
        }
        Err(Error::Unsupported { .. }) => assert!(!dev.info().managed_memory),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn stream_ordered_allocations_work_on_their_stream() {
    let Some(dev) = device() else { return };
    let stream = dev.create_stream().unwrap();
    let buf = dev.alloc_async(1 << 16, &stream).unwrap();
    let data = pattern(1 << 16);
    let mut out = vec![0u8; 1 << 16];
    // SAFETY: `data`, `out` and `buf` outlive the synchronize below.
    unsafe {
        dev.copy_to_device_async(&data, &buf, 0, &stream).unwrap();
        dev.copy_to_host_async(&buf, 0, &mut out, &stream).unwrap();
    }
    dev.synchronize(&stream).unwrap();
    assert_eq!(out, data);
    drop(buf); // freed in stream order
    dev.synchronize(&stream).unwrap();
}

#[test]
fn registered_host_memory_copies_like_pinned_memory() {
    let Some(dev) = device() else { return };
    // Page-aligned, as older drivers required for registration.
    let mut backing = vec![0u8; (1 << 16) + 4096];
    let start = backing.as_ptr().align_offset(4096);
    let host = &mut backing[start..start + (1 << 16)];
    host.copy_from_slice(&pattern(1 << 16));
    // SAFETY: `host` outlives the registration, dropped before it below.
    let reg = unsafe { dev.register_host(host.as_mut_ptr(), host.len()) }.unwrap();
    let mut buf = dev.alloc(host.len()).unwrap();
    dev.copy_to_device(host, &mut buf, 0).unwrap();
    assert_eq!(read_back(&dev, &buf), host);
    drop(reg);
    // SAFETY: a null pointer is refused before any use.
    assert!(matches!(unsafe { dev.register_host(std::ptr::null_mut(), 8) }, Err(Error::InvalidArgument { .. })));
}

// ---- streams and events -------------------------------------------------------

#[test]
fn a_copy_queued_behind_a_sleeping_kernel_is_not_visible_before_synchronize() {
    let Some(dev) = device() else { return };
    let stream = dev.create_stream().unwrap();
    let mut buf = dev.alloc(4096).unwrap();
    dev.memset(&mut buf, 0, 4096, 0x5A).unwrap();
    let mut pinned = dev.alloc_pinned(4096).unwrap();
    let done = dev.create_event().unwrap();
    sleep_kernel_ns(&dev, 300_000_000, &stream);
    // SAFETY: `buf` and `pinned` outlive the synchronize below; the host only
    // reads `pinned` (volatile, one byte) while the copy is pending.
    unsafe { dev.copy_to_host_async(&buf, 0, pinned.as_mut_slice(), &stream) }.unwrap();
    dev.record_event(&done, &stream).unwrap();
    // SAFETY: reads one initialized byte of a live allocation.
    let early = unsafe { std::ptr::read_volatile(pinned.as_slice().as_ptr()) };
    assert_eq!(early, 0, "the copy ran before the kernel ahead of it finished");
    assert!(!dev.is_idle(&stream).unwrap());
    assert!(!dev.event_is_complete(&done).unwrap());
    dev.synchronize_event(&done).unwrap();
    assert!(dev.event_is_complete(&done).unwrap());
    assert!(dev.is_idle(&stream).unwrap());
    assert!(pinned.as_slice().iter().all(|&b| b == 0x5A));
}

#[test]
fn async_calls_return_before_the_work_is_done() {
    let Some(dev) = device() else { return };
    let stream = dev.create_stream().unwrap();
    dev.load_module(ModuleSource::Builtin).unwrap(); // compile outside the timed part
    let t = Instant::now();
    sleep_kernel_ns(&dev, 200_000_000, &stream);
    let enqueue = t.elapsed();
    dev.synchronize(&stream).unwrap();
    let total = t.elapsed();
    assert!(enqueue < Duration::from_millis(100), "launch blocked for {enqueue:?}");
    assert!(total >= Duration::from_millis(190), "a 200 ms sleep kernel finished after {total:?}");
}

#[test]
fn events_time_the_work_between_them() {
    let Some(dev) = device() else { return };
    let stream = dev.create_stream().unwrap();
    let (start, end) = (dev.create_event().unwrap(), dev.create_event().unwrap());
    dev.record_event(&start, &stream).unwrap();
    sleep_kernel_ns(&dev, 50_000_000, &stream);
    dev.record_event(&end, &stream).unwrap();
    dev.synchronize_event(&end).unwrap();
    let ms = dev.elapsed_ms(&start, &end).unwrap();
    assert!((45.0..5000.0).contains(&ms), "a 50 ms sleep timed as {ms} ms");
}

#[test]
fn wait_event_orders_work_across_streams() {
    let Some(dev) = device() else { return };
    let (first, second) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
    let mut buf = dev.alloc(1024).unwrap();
    dev.memset(&mut buf, 0, 1024, 0).unwrap();
    let written = dev.create_event().unwrap();
    sleep_kernel_ns(&dev, 100_000_000, &first);
    let mut out = dev.alloc_pinned(1024).unwrap();
    // SAFETY: `buf` and `out` outlive the synchronizes below.
    unsafe {
        dev.memset_async(&buf, 0, 1024, 7, &first).unwrap();
        dev.record_event(&written, &first).unwrap();
        dev.wait_event(&second, &written).unwrap();
        dev.copy_to_host_async(&buf, 0, out.as_mut_slice(), &second).unwrap();
    }
    dev.synchronize(&second).unwrap();
    assert!(out.as_slice().iter().all(|&b| b == 7), "the second stream did not wait for the first");
    dev.synchronize(&first).unwrap();
}

// ---- kernels -----------------------------------------------------------------

#[test]
fn the_builtin_fill_kernel_writes_every_element() {
    let Some(dev) = device() else { return };
    let n = 1_000_003usize;
    let mut buf = dev.alloc(n * 4).unwrap();
    dev.memset(&mut buf, 0, n * 4, 0).unwrap();
    let module = dev.load_module(ModuleSource::Builtin).unwrap();
    let fill = dev.kernel(&module, builtin::FILL_U32).unwrap();
    let config = dev.default_launch_config(&fill, n).unwrap();
    assert!(config.total_threads() >= n as u64);
    let mut args = KernelArgs::new();
    args.push_buffer(&buf).push(&(n as u64)).push(&0xDEADBEEFu32);
    // SAFETY: arguments match gpuport_fill_u32(ptr, n, value); `buf` holds n u32s and outlives the sync.
    unsafe { dev.launch(&fill, config, &args, dev.default_stream()) }.unwrap();
    dev.synchronize(dev.default_stream()).unwrap();
    let out = read_back(&dev, &buf);
    assert!(out.chunks_exact(4).all(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == 0xDEADBEEF));
    // A small grid covers everything too (grid-stride loop).
    dev.memset(&mut buf, 0, n * 4, 0).unwrap();
    // SAFETY: as above.
    unsafe { dev.launch(&fill, LaunchConfig::linear(3, 64), &args, dev.default_stream()) }.unwrap();
    assert!(read_back(&dev, &buf).chunks_exact(4).all(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == 0xDEADBEEF));
}

#[test]
fn the_empty_kernel_launches() {
    let Some(dev) = device() else { return };
    let module = dev.load_module(ModuleSource::Builtin).unwrap();
    let empty = dev.kernel(&module, builtin::EMPTY).unwrap();
    // SAFETY: gpuport_empty takes no arguments.
    unsafe { dev.launch(&empty, LaunchConfig::linear(1, 1), &KernelArgs::new(), dev.default_stream()) }.unwrap();
    dev.synchronize(dev.default_stream()).unwrap();
}

#[test]
fn builtin_kernels_refuse_mismatched_arguments() {
    let Some(dev) = device() else { return };
    let module = dev.load_module(ModuleSource::Builtin).unwrap();
    let fill = dev.kernel(&module, builtin::FILL_U32).unwrap();
    let mut args = KernelArgs::new();
    args.push(&0u64).push(&1u32);
    // SAFETY: refused before launch (argument count).
    let err = unsafe { dev.launch(&fill, LaunchConfig::linear(1, 1), &args, dev.default_stream()) }.unwrap_err();
    assert!(matches!(err, Error::KernelArguments { .. }), "{err}");
    args.push(&1u64);
    // SAFETY: refused before launch (argument 1 is 4 bytes, the kernel takes 8).
    let err = unsafe { dev.launch(&fill, LaunchConfig::linear(1, 1), &args, dev.default_stream()) }.unwrap_err();
    assert!(matches!(err, Error::KernelArguments { .. }), "{err}");
}

#[test]
fn launch_configs_beyond_the_device_limits_are_refused() {
    let Some(dev) = device() else { return };
    let module = dev.load_module(ModuleSource::Builtin).unwrap();
    let empty = dev.kernel(&module, builtin::EMPTY).unwrap();
    let too_wide = LaunchConfig::linear(1, dev.info().limits.max_threads_per_block + 1);
    for config in [too_wide, LaunchConfig::linear(0, 1)] {
        // SAFETY: refused before launch.
        let err = unsafe { dev.launch(&empty, config, &KernelArgs::new(), dev.default_stream()) }.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { name: "launch config", .. }), "{err}");
    }
}

const ADD_ONE: &str = r#"
#if !defined(__HIPCC_RTC__) && !defined(__CUDACC_RTC__)
#include <hip/hip_runtime.h>
#endif
extern "C" __global__ void add_one(int* data, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1;
}
"#;

#[test]
fn a_source_module_compiles_loads_and_runs() {
    let Some(dev) = device() else { return };
    let module =
        dev.load_module(ModuleSource::Source { code: ADD_ONE, name: "add_one.hip", options: &["-DUNUSED=1"] }).unwrap();
    let add_one = dev.kernel(&module, "add_one").unwrap();
    let n = 1000u32;
    let host: Vec<u8> = (0..n as i32).flat_map(|i| i.to_ne_bytes()).collect();
    let mut buf = dev.alloc(host.len()).unwrap();
    dev.copy_to_device(&host, &mut buf, 0).unwrap();
    let mut args = KernelArgs::new();
    args.push_buffer(&buf).push(&n);
    let config = dev.default_launch_config(&add_one, n as usize).unwrap();
    // SAFETY: arguments match add_one(int*, unsigned); `buf` holds n ints and outlives the sync.
    unsafe { dev.launch(&add_one, config, &args, dev.default_stream()) }.unwrap();
    let out = read_back(&dev, &buf);
    for (i, w) in out.chunks_exact(4).enumerate() {
        assert_eq!(i32::from_ne_bytes([w[0], w[1], w[2], w[3]]), i as i32 + 1);
    }
}

#[test]
fn an_unknown_kernel_name_is_kernel_not_found() {
    if common::provokes_driver_errors(BackendKind::Rocm, "a kernel lookup that fails") {
        return;
    }
    let Some(dev) = device() else { return };
    let module = dev.load_module(ModuleSource::Builtin).unwrap();
    match dev.kernel(&module, "no_such_kernel") {
        Err(Error::KernelNotFound { name, available }) => {
            assert_eq!(name, "no_such_kernel");
            assert!(available.contains(builtin::FILL_U32), "{available}");
        }
        other => panic!("expected KernelNotFound, got {other:?}"),
    }
}

#[test]
fn compile_errors_in_a_source_module_return_the_log() {
    let Some(dev) = device() else { return };
    let bad = "extern \"C\" __global__ void broken() { this is not valid; }";
    match dev.load_module(ModuleSource::Source { code: bad, name: "broken.hip", options: &[] }) {
        Err(Error::Compile { backend: BackendKind::Rocm, name, log }) => {
            assert_eq!(name, "broken.hip");
            assert!(log.contains("error"), "log: {log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn foreign_module_formats_are_refused() {
    let Some(dev) = device() else { return };
    let err = dev.load_module(ModuleSource::Binary(b"not a code object")).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { name: "image", .. }), "{err}");
    let err = dev.load_module(ModuleSource::Ptx(".version 8.0")).unwrap_err();
    assert!(matches!(err, Error::Unsupported { backend: BackendKind::Rocm, .. }), "{err}");
}

#[test]
fn a_compiled_code_object_loads_as_a_binary_module() {
    let Some(dev) = device() else { return };
    let image = compile_source(ADD_ONE, "add_one.hip", &[&format!("--offload-arch={}", dev.info().arch)]).unwrap();
    let module = dev.load_module(ModuleSource::Binary(&image)).unwrap();
    dev.kernel(&module, "add_one").unwrap();
}

// ---- hiprtc without a device ----------------------------------------------------

/// The target to compile for: `GPUPORT_TEST_HIPRTC_ARCH` if set (`sm_90` to
/// run these through the shim on a machine without a GPU), else `rocm:0`'s
/// where it opens, else gfx90a. `None` (skip) where hiprtc cannot be loaded.
fn hiprtc_target() -> Option<String> {
    let arch = match (std::env::var("GPUPORT_TEST_HIPRTC_ARCH"), gpuport::open("rocm:0")) {
        (Ok(arch), _) if !arch.is_empty() => arch,
        (_, Ok(dev)) => dev.info().arch.clone(),
        _ => "gfx90a".to_string(),
    };
    match compile_source("extern \"C\" __global__ void probe() {}", "probe.hip", &[&format!("--offload-arch={arch}")]) {
        Ok(_) => Some(arch),
        Err(e @ Error::LibraryNotFound { .. }) => {
            assert!(!matches!(expectation().as_str(), "device" | "no-device"), "hiprtc must load here: {e}");
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("hiprtc failed on an empty kernel: {e}"),
    }
}

#[test]
fn hiprtc_compiles_the_builtin_kernels() {
    let Some(arch) = hiprtc_target() else { return };
    let source = include_str!("../kernels/hip/builtins.hip");
    let image = compile_source(source, "builtins.hip", &[&format!("--offload-arch={arch}")]).unwrap();
    assert!(image.starts_with(b"\x7fELF"), "hiprtc returned no ELF code object for {arch}");
}

#[test]
fn hiprtc_compile_errors_carry_the_log() {
    let Some(arch) = hiprtc_target() else { return };
    let bad = "extern \"C\" __global__ void k() { undeclared_name = 1; }";
    match compile_source(bad, "bad.hip", &[&format!("--offload-arch={arch}")]) {
        Err(Error::Compile { name, log, .. }) => {
            assert_eq!(name, "bad.hip");
            assert!(log.contains("undeclared_name"), "log: {log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn sources_with_nul_bytes_are_refused() {
    let err = compile_source("a\0b", "nul.hip", &[]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { name: "code", .. } | Error::LibraryNotFound { .. }), "{err}");
}
