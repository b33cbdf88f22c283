//! The runtime core, tested once for every backend.
//!
//! Each test body is generic over `D: Device`; rstest instantiates it for
//! `host` (always) and `cuda:0` (skipped with a printed reason where the
//! backend is not compiled in or no device is present).

mod common;

use std::time::{Duration, Instant};

use common::pattern;
use gpuport::{
    builtin, BackendKind, Device, DeviceMemory, Error, HostMemory, KernelArgs, LaunchConfig, MemoryKind, ModuleSource,
};

const SLEEP_MS: u64 = 300;

fn sleep_kernel<D: Device>(d: &D) -> gpuport::Kernel<D::B> {
    let module = d.load_module(ModuleSource::Builtin).expect("builtin module loads");
    d.kernel(&module, builtin::SLEEP_NS).expect("sleep kernel exists")
}

/// Holds `stream` busy for `ms` milliseconds.
fn hold_stream<D: Device>(d: &D, stream: &gpuport::Stream<D::B>, ms: u64) {
    let mut args = KernelArgs::new();
    args.push(&(ms * 1_000_000));
    // SAFETY: the sleep kernel takes one u64 and touches no memory.
    unsafe { d.launch(&sleep_kernel(d), LaunchConfig::linear(1, 1), &args, stream) }.expect("launch sleep");
}

fn read_back<D: Device>(d: &D, buf: &gpuport::Buffer<D::B>) -> Vec<u8> {
    let mut out = vec![0u8; buf.len()];
    d.copy_to_host(buf, 0, &mut out).expect("copy to host");
    out
}

// ---- memory and copies -------------------------------------------------------------

fn bytes_survive_a_round_trip_through_the_device<D: Device>(d: &D) {
    for n in [1usize, 7, 4096, 1 << 20, (1 << 20) + 3] {
        let data = pattern(n, 5);
        let mut buf = d.alloc(n).unwrap();
        assert_eq!(buf.len(), n);
        assert_eq!(buf.ordinal(), d.info().ordinal);
        d.copy_to_device(&data, &mut buf, 0).unwrap();
        assert_eq!(read_back(d, &buf), data, "n = {n}");
    }
}

fn copies_honour_offsets<D: Device>(d: &D) {
    let mut buf = d.alloc(64).unwrap();
    d.memset(&mut buf, 0, 64, 0).unwrap();
    d.copy_to_device(&[1, 2, 3, 4], &mut buf, 10).unwrap();
    let mut four = [0u8; 4];
    d.copy_to_host(&buf, 10, &mut four).unwrap();
    assert_eq!(four, [1, 2, 3, 4]);
    let all = read_back(d, &buf);
    assert!(all[..10].iter().chain(&all[14..]).all(|&b| b == 0));
}

fn memset_and_device_copy_move_the_right_bytes<D: Device>(d: &D) {
    let (mut a, mut b) = (d.alloc(1000).unwrap(), d.alloc(1000).unwrap());
    d.memset(&mut a, 0, 1000, 0xAB).unwrap();
    d.memset(&mut b, 0, 1000, 0).unwrap();
    d.memset(&mut a, 100, 50, 0x11).unwrap();
    d.copy_device(&a, 90, &mut b, 0, 100).unwrap();
    let got = read_back(d, &b);
    assert!(got[..10].iter().all(|&x| x == 0xAB));
    assert!(got[10..60].iter().all(|&x| x == 0x11));
    assert!(got[60..100].iter().all(|&x| x == 0xAB));
    assert!(got[100..].iter().all(|&x| x == 0));
}

fn memsets_touch_exactly_their_range<D: Device>(d: &D) {
    // Aligned whole words (the 32-bit memset) and odd offsets or lengths
    // (the byte memset), each against a model of the buffer.
    let mut a = d.alloc(64).unwrap();
    let mut model = vec![0x5Au8; 64];
    d.memset(&mut a, 0, 64, 0x5A).unwrap();
    for (offset, len, value) in [(4, 8, 0xC3u8), (1, 7, 0x01), (16, 13, 0xFE), (33, 4, 0x77), (40, 24, 0x00)] {
        d.memset(&mut a, offset, len, value).unwrap();
        model[offset..offset + len].fill(value);
        assert_eq!(read_back(d, &a), model, "after memset({offset}, {len}, {value:#x})");
    }
}

fn stream_ordered_allocations_work_in_stream_order<D: Device>(d: &D) {
    let s = d.create_stream().unwrap();
    let data = pattern(1 << 16, 9);
    let mut out = d.alloc_pinned(data.len()).unwrap();
    {
        let buf = d.alloc_async(data.len(), &s).unwrap();
        // SAFETY: `data`, `buf` and `out` outlive the synchronize below.
        unsafe {
            d.copy_to_device_async(&data, &buf, 0, &s).unwrap();
            d.copy_to_host_async(&buf, 0, out.as_mut_slice(), &s).unwrap();
        }
        d.synchronize(&s).unwrap();
    } // freed in stream order on `s`
    assert_eq!(out.as_slice(), &data[..]);
    d.synchronize(&s).unwrap();
}

fn pinned_memory_is_zeroed_and_copies_both_ways<D: Device>(d: &D) {
    let mut pinned = d.alloc_pinned(4096).unwrap();
    assert!(pinned.as_slice().iter().all(|&b| b == 0));
    pinned.as_mut_slice().copy_from_slice(&pattern(4096, 3));
    let mut buf = d.alloc(4096).unwrap();
    d.copy_to_device(pinned.as_slice(), &mut buf, 0).unwrap();
    assert_eq!(read_back(d, &buf), pattern(4096, 3));
}

fn registered_host_memory_can_be_copied<D: Device>(d: &D) {
    let mut host = pattern(1 << 16, 1);
    // SAFETY: `host` outlives the registration, dropped at the end of scope first.
    let reg = unsafe { d.register_host(host.as_mut_ptr(), host.len()) }.unwrap();
    let mut buf = d.alloc(host.len()).unwrap();
    d.copy_to_device(&host, &mut buf, 0).unwrap();
    assert_eq!(read_back(d, &buf), host);
    drop(reg);
}

fn managed_memory_is_allocated_where_supported<D: Device>(d: &D) {
    match d.alloc_managed(1 << 12) {
        Ok(mut buf) => {
            assert_eq!(buf.kind(), MemoryKind::Managed);
            d.copy_to_device(&pattern(1 << 12, 2), &mut buf, 0).unwrap();
            assert_eq!(read_back(d, &buf), pattern(1 << 12, 2));
        }
        Err(Error::Unsupported { .. }) => assert!(!d.info().managed_memory),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn device_reports_sane_properties<D: Device>(d: &D) {
    let info = d.info();
    assert!(!info.name.is_empty());
    assert!(!info.arch.is_empty());
    assert!(info.multiprocessors >= 1);
    assert!(info.limits.max_threads_per_block >= 1);
    let mem = d.memory_info().unwrap();
    assert!(mem.free <= mem.total, "{mem:?}");
    if info.backend != BackendKind::Host {
        assert!(mem.total > 0 && info.total_memory > 0);
    }
    assert_eq!(gpuport::open(&info.spec()).unwrap().info(), info);
}

// ---- asynchrony -----------------------------------------------------------------------

fn work_behind_a_long_operation_is_not_visible_before_the_stream_completes<D: Device>(d: &D) {
    let (busy, other) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let mut buf = d.alloc(256).unwrap();
    d.memset(&mut buf, 0, 256, 0).unwrap();
    let start = Instant::now();
    hold_stream(d, &busy, SLEEP_MS);
    // SAFETY: `buf` outlives the synchronize below.
    unsafe { d.memset_async(&buf, 0, 256, 0x5A, &busy).unwrap() };
    let enqueue_time = start.elapsed();
    assert!(enqueue_time < Duration::from_millis(SLEEP_MS / 2), "enqueueing blocked for {enqueue_time:?}");
    assert!(!d.is_idle(&busy).unwrap(), "stream should still be busy");

    // Read through an independent stream while `busy` still sleeps.
    let mut early = vec![0xFFu8; 256];
    // SAFETY: `early` and `buf` outlive the synchronize right after.
    unsafe { d.copy_to_host_async(&buf, 0, &mut early, &other).unwrap() };
    d.synchronize(&other).unwrap();
    assert!(start.elapsed() < Duration::from_millis(SLEEP_MS), "read on the other stream waited for the busy one");
    assert!(early.iter().all(|&b| b == 0), "memset became visible before its stream completed");

    d.synchronize(&busy).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(SLEEP_MS * 9 / 10));
    assert!(d.is_idle(&busy).unwrap());
    assert!(read_back(d, &buf).iter().all(|&b| b == 0x5A));
}

fn events_order_work_across_two_streams<D: Device>(d: &D) {
    let (producer, consumer) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let (mut src, mut dst) = (d.alloc(4096).unwrap(), d.alloc(4096).unwrap());
    d.memset(&mut src, 0, 4096, 0).unwrap();
    d.memset(&mut dst, 0, 4096, 0).unwrap();
    let ready = d.create_event().unwrap();

    hold_stream(d, &producer, SLEEP_MS);
    // SAFETY: all buffers outlive the synchronizes below.
    unsafe { d.memset_async(&src, 0, 4096, 7, &producer).unwrap() };
    d.record_event(&ready, &producer).unwrap();
    assert!(!d.event_is_complete(&ready).unwrap());

    d.wait_event(&consumer, &ready).unwrap();
    // SAFETY: as above.
    unsafe { d.copy_device_async(&src, 0, &dst, 0, 4096, &consumer).unwrap() };
    d.synchronize(&consumer).unwrap();
    assert!(d.event_is_complete(&ready).unwrap());
    assert!(read_back(d, &dst).iter().all(|&b| b == 7), "consumer ran before the producer's event");
    d.synchronize(&producer).unwrap();
}

fn events_time_the_work_between_them<D: Device>(d: &D) {
    let s = d.create_stream().unwrap();
    let (start, end) = (d.create_event().unwrap(), d.create_event().unwrap());
    d.record_event(&start, &s).unwrap();
    hold_stream(d, &s, 50);
    d.record_event(&end, &s).unwrap();
    d.synchronize_event(&end).unwrap();
    let ms = d.elapsed_ms(&start, &end).unwrap();
    assert!((45.0..2000.0).contains(&ms), "elapsed {ms} ms for a 50 ms sleep");
}

// ---- kernels ---------------------------------------------------------------------------

fn builtin_fill_kernel_writes_every_element<D: Device>(d: &D) {
    let module = d.load_module(ModuleSource::Builtin).unwrap();
    let fill = d.kernel(&module, builtin::FILL_U32).unwrap();
    for n in [1usize, 31, 1000, 65_537] {
        let mut buf = d.alloc(n * 4 + 4).unwrap();
        d.memset(&mut buf, 0, n * 4 + 4, 0xEE).unwrap(); // poison, including one guard element
        let cfg = d.default_launch_config(&fill, n).unwrap();
        assert!(cfg.total_threads() >= n as u64);
        let mut args = KernelArgs::new();
        args.push_buffer(&buf).push(&(n as u64)).push(&0xC0FFEEu32);
        // SAFETY: (ptr, n, value) matches the kernel; `buf` holds n+1 u32s and outlives the sync.
        unsafe { d.launch(&fill, cfg, &args, d.default_stream()).unwrap() };
        d.synchronize(d.default_stream()).unwrap();
        let bytes = read_back(d, &buf);
        let words: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        assert!(words[..n].iter().all(|&w| w == 0xC0FFEE), "n = {n}");
        assert_eq!(words[n], 0xEEEEEEEE, "wrote past the end for n = {n}");
    }
}

fn empty_kernel_launches_and_completes<D: Device>(d: &D) {
    let module = d.load_module(ModuleSource::Builtin).unwrap();
    let empty = d.kernel(&module, builtin::EMPTY).unwrap();
    let s = d.create_stream().unwrap();
    let (start, end) = (d.create_event().unwrap(), d.create_event().unwrap());
    d.record_event(&start, &s).unwrap();
    for _ in 0..100 {
        // SAFETY: the empty kernel takes no arguments.
        unsafe { d.launch(&empty, LaunchConfig::linear(1, 32), &KernelArgs::new(), &s).unwrap() };
    }
    d.record_event(&end, &s).unwrap();
    d.synchronize(&s).unwrap();
    assert!(d.is_idle(&s).unwrap(), "the stream still has work after synchronize");
    assert!(d.event_is_complete(&end).unwrap(), "the event after the launches did not complete");
    let ms = d.elapsed_ms(&start, &end).unwrap();
    assert!((0.0..10_000.0).contains(&ms), "100 empty launches took {ms} ms");
    // The empty kernel takes no arguments: one is refused, not launched.
    let mut one = KernelArgs::new();
    one.push(&1u32);
    // SAFETY: refused before launch (the kernel's parameters are known for the built-ins).
    let refused = unsafe { d.launch(&empty, LaunchConfig::linear(1, 1), &one, &s) };
    assert!(matches!(refused, Err(Error::KernelArguments { .. })), "{refused:?}");
}

fn unknown_kernel_names_list_the_available_ones<D: Device>(d: &D) {
    if common::provokes_driver_errors(d.info().backend, "a kernel lookup that fails") {
        return;
    }
    let module = d.load_module(ModuleSource::Builtin).unwrap();
    match d.kernel(&module, "no_such_kernel") {
        Err(Error::KernelNotFound { name, available }) => {
            assert_eq!(name, "no_such_kernel");
            if !available.starts_with('(') {
                assert!(available.contains(builtin::FILL_U32), "{available}");
            }
        }
        other => panic!("expected KernelNotFound, got {other:?}"),
    }
}

fn wrong_kernel_arguments_are_rejected<D: Device>(d: &D) {
    let module = d.load_module(ModuleSource::Builtin).unwrap();
    let fill = d.kernel(&module, builtin::FILL_U32).unwrap();
    let mut too_few = KernelArgs::new();
    too_few.push(&0u64);
    let mut wrong_size = KernelArgs::new();
    wrong_size.push(&0u64).push(&0u64).push(&0u64);
    for args in [too_few, wrong_size] {
        // SAFETY: the launch is rejected before anything is enqueued (asserted).
        let r = unsafe { d.launch(&fill, LaunchConfig::linear(1, 1), &args, d.default_stream()) };
        assert!(matches!(r, Err(Error::KernelArguments { .. })), "{r:?}");
    }
}

fn launch_configs_beyond_the_device_limits_are_rejected<D: Device>(d: &D) {
    let module = d.load_module(ModuleSource::Builtin).unwrap();
    let empty = d.kernel(&module, builtin::EMPTY).unwrap();
    let limits = d.info().limits;
    let too_wide = LaunchConfig::linear(1, limits.max_threads_per_block + 1);
    let zero = LaunchConfig::linear(0, 32);
    let mut shared = LaunchConfig::linear(1, 32);
    shared.shared_mem_bytes = (limits.max_shared_memory_per_block + 1) as u32;
    for cfg in [too_wide, zero, shared] {
        // SAFETY: rejected before launch (asserted).
        let r = unsafe { d.launch(&empty, cfg, &KernelArgs::new(), d.default_stream()) };
        assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{cfg:?}: {r:?}");
    }
}

fn kernel_source_compiles_or_is_refused_clearly<D: Device>(d: &D) {
    let code = r#"extern "C" __global__ void twice(unsigned int* p, unsigned long long n) {
        unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
        if (i < n) p[i] *= 2u;
    }"#;
    let source = ModuleSource::Source { code, name: "twice.cu", options: &[] };
    match d.info().backend {
        BackendKind::Host => {
            assert!(matches!(d.load_module(source), Err(Error::Unsupported { .. })));
            assert!(matches!(d.load_module(ModuleSource::Ptx(".version 8.0")), Err(Error::Unsupported { .. })));
        }
        _ => {
            let module = d.load_module(source).unwrap();
            let twice = d.kernel(&module, "twice").unwrap();
            let mut buf = d.alloc(400).unwrap();
            let input: Vec<u8> = (0..100u32).flat_map(|x| x.to_le_bytes()).collect();
            d.copy_to_device(&input, &mut buf, 0).unwrap();
            let mut args = KernelArgs::new();
            args.push_buffer(&buf).push(&100u64);
            let cfg = d.default_launch_config(&twice, 100).unwrap();
            // SAFETY: (ptr, n) matches; `buf` holds 100 u32 and outlives the sync.
            unsafe { d.launch(&twice, cfg, &args, d.default_stream()).unwrap() };
            let out = read_back(d, &buf);
            for (i, c) in out.chunks_exact(4).enumerate() {
                assert_eq!(u32::from_le_bytes(c.try_into().unwrap()), 2 * i as u32);
            }
            let broken = ModuleSource::Source { code: "__global__ void f( { }", name: "broken.cu", options: &[] };
            match d.load_module(broken) {
                Err(Error::Compile { log, name, .. }) => {
                    assert_eq!(name, "broken.cu");
                    assert!(log.contains("error"), "log: {log}");
                }
                other => panic!("expected a compile error, got {other:?}"),
            }
            let r = d.load_module(ModuleSource::Binary(b"definitely not a cubin"));
            assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
        }
    }
}

// ---- bad input --------------------------------------------------------------------------

fn zero_and_impossible_allocations_are_typed_errors<D: Device>(d: &D) {
    if common::provokes_driver_errors(d.info().backend, "an allocation the device cannot make") {
        return;
    }
    assert!(matches!(d.alloc(0), Err(Error::InvalidArgument { .. })));
    assert!(matches!(d.alloc_pinned(0), Err(Error::InvalidArgument { .. })));
    assert!(matches!(d.alloc(usize::MAX), Err(Error::InvalidArgument { .. })));
    let huge = 1usize << 60; // 1 EiB: no device has it
    assert!(matches!(d.alloc(huge), Err(Error::OutOfMemory { bytes, .. }) if bytes == huge), "{:?}", d.alloc(huge));
}

fn copies_past_either_end_are_typed_errors<D: Device>(d: &D) {
    let (mut a, mut b) = (d.alloc(100).unwrap(), d.alloc(50).unwrap());
    let oob = |r: gpuport::Result<()>| assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
    oob(d.copy_to_device(&[0u8; 101], &mut a, 0));
    oob(d.copy_to_device(&[0u8; 10], &mut a, 95));
    oob(d.copy_to_device(&[0u8; 1], &mut a, usize::MAX));
    oob(d.copy_to_host(&a, 60, &mut [0u8; 41]));
    oob(d.copy_device(&a, 0, &mut b, 0, 51));
    oob(d.copy_device(&a, 90, &mut b, 0, 20));
    oob(d.memset(&mut b, 40, 11, 0));
    // Nothing was enqueued by the failed calls: the stream is usable.
    d.copy_to_device(&[1u8; 100], &mut a, 0).unwrap();
}

fn objects_of_another_device_are_refused<D: Device>(d: &D) {
    // Needs two devices of one backend; the host backend has one.
    let Ok(count) = D::count() else { return };
    if count < 2 {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("skipped: cross-device check needs 2 {} devices, found {count}\n", d.info().backend).as_bytes(),
        );
        return;
    }
    let other = D::open(1 - d.info().ordinal.min(1)).unwrap();
    let mut foreign_buf = other.alloc(16).unwrap();
    let foreign_stream = other.create_stream().unwrap();
    let mine = d.alloc(16).unwrap();
    let mismatch = |r: gpuport::Result<()>| assert!(matches!(r, Err(Error::DeviceMismatch { .. })), "{r:?}");
    mismatch(d.copy_to_device(&[0u8; 16], &mut foreign_buf, 0));
    // SAFETY: rejected before anything is enqueued (asserted).
    mismatch(unsafe { d.copy_to_device_async(&[0u8; 16], &mine, 0, &foreign_stream) });
    mismatch(d.synchronize(&foreign_stream));
}

// Each body above becomes one test per backend: `<name>::case_1_host`, `<name>::case_2_cuda`.
mod per_backend {
    use super::*;
    backend_tests!(
        bytes_survive_a_round_trip_through_the_device,
        copies_honour_offsets,
        memset_and_device_copy_move_the_right_bytes,
        memsets_touch_exactly_their_range,
        stream_ordered_allocations_work_in_stream_order,
        pinned_memory_is_zeroed_and_copies_both_ways,
        registered_host_memory_can_be_copied,
        managed_memory_is_allocated_where_supported,
        device_reports_sane_properties,
        work_behind_a_long_operation_is_not_visible_before_the_stream_completes,
        events_order_work_across_two_streams,
        events_time_the_work_between_them,
        builtin_fill_kernel_writes_every_element,
        empty_kernel_launches_and_completes,
        unknown_kernel_names_list_the_available_ones,
        wrong_kernel_arguments_are_rejected,
        launch_configs_beyond_the_device_limits_are_rejected,
        kernel_source_compiles_or_is_refused_clearly,
        zero_and_impossible_allocations_are_typed_errors,
        copies_past_either_end_are_typed_errors,
        objects_of_another_device_are_refused,
    );
}

// ---- registry ----------------------------------------------------------------------------

#[test]
fn invalid_device_specs_are_typed_errors() {
    for spec in ["", "tpu:0", "cuda:abc", "host:1", "cuda:9999"] {
        match gpuport::open(spec) {
            Err(Error::InvalidDeviceSpec { .. })
            | Err(Error::BackendNotCompiled { .. })
            | Err(Error::LibraryNotFound { .. })
            | Err(Error::NoDevice { .. }) => {}
            other => panic!("{spec:?}: expected a typed error, got {other:?}"),
        }
    }
    let msg = gpuport::open("tpu:0").unwrap_err().to_string();
    assert!(msg.contains("tpu") && msg.contains("accepted"), "{msg}");
}

#[test]
fn an_unavailable_gpu_backend_is_an_error_that_says_why() {
    for status in gpuport::backends() {
        if let Err(e) = &status.devices {
            let text = e.to_string();
            assert!(text.contains(status.kind.name()), "{text}");
            if !status.compiled {
                assert!(matches!(e, Error::BackendNotCompiled { .. }));
                assert!(text.contains("--features"), "{text}");
            }
        }
    }
}

#[test]
fn the_default_device_falls_back_to_host_with_notes() {
    // Runs in its own process state: GPUPORT_DEVICE is not set by the suite.
    if std::env::var(gpuport::backend::registry::DEVICE_ENV).is_ok() {
        return;
    }
    let chosen = gpuport::default_device().unwrap();
    if chosen.device.backend() == BackendKind::Host {
        assert!(!chosen.notes.is_empty(), "falling back to host must say why");
    }
}
