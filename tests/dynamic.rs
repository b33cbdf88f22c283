//! The run-time layer (`gpuport::dynamic`): the DLPack stream rules per
//! device type, device checks of streams, arrays of run-time dtype, and the
//! HIP-shaped runtime calls (`dynamic::runtime`) on every backend.
//!
//! Over 800 lines: one binary for these rules, because each test binary
//! links the whole library once per backend configuration CI builds, and
//! CI's time is the tighter limit.

mod common;

use std::sync::Arc;

use gpuport::dlpack::{DLDeviceType, DLPackError};
use gpuport::dynamic::exchange::{consumer_stream, export, stream_for_producer, Export, ExportRequest};
use gpuport::dynamic::{keep, new_owned, AnyArray, AnyModule, AnyStream, Code, DType};
use gpuport::Error;
use gpuport::{builtin, KernelArgs, LaunchConfig};

const CUDA: i32 = DLDeviceType::CUDA.0 as i32;
const ROCM: i32 = DLDeviceType::ROCM.0 as i32;
const CPU: i32 = DLDeviceType::CPU.0 as i32;

fn host() -> gpuport::AnyDevice {
    gpuport::open("host").unwrap()
}

/// `consumer_stream` on a host device, which refuses every handle but 0.
fn consumer(dev: &gpuport::AnyDevice, dl_type: i32, stream: Option<i64>) -> gpuport::Result<Option<AnyStream>> {
    assert_eq!(dev.backend(), gpuport::BackendKind::Host);
    // SAFETY: the host backend borrows no stream handle (0 is its default stream).
    unsafe { consumer_stream(dev, dl_type, stream) }
}

/// `export` of a host array, whose streams have no integer handles.
fn export_host(a: &mut AnyArray, req: ExportRequest) -> gpuport::Result<Export> {
    assert_eq!(a.device().backend(), gpuport::BackendKind::Host);
    // SAFETY: as in `consumer`.
    unsafe { export(a, req) }
}

#[test]
fn cuda_memory_refuses_stream_zero_and_rocm_takes_it() {
    let dev = host();
    let e = consumer(&dev, CUDA, Some(0)).unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::BadStream { .. })), "{e}");
    assert!(e.to_string().contains("ambiguous"), "{e}");
    // ROCm has no 1/2 sentinels: 0 is its default stream.
    let zero = consumer(&dev, ROCM, Some(0)).unwrap().expect("stream=0 on ROCm synchronizes");
    assert_eq!(zero.handle(), 0);
    assert!(consumer(&dev, ROCM, None).unwrap().is_some());
    assert!(consumer(&dev, ROCM, Some(-1)).unwrap().is_none());
    assert!(consumer(&dev, CUDA, Some(-1)).unwrap().is_none());
    let e = consumer(&dev, ROCM, Some(-7)).unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::BadStream { .. })), "{e}");
}

#[test]
fn host_memory_takes_no_stream() {
    let dev = host();
    assert!(consumer(&dev, CPU, None).unwrap().is_none());
    let e = consumer(&dev, CPU, Some(1)).unwrap_err();
    assert!(e.to_string().contains("host memory takes stream=None"), "{e}");
}

#[test]
fn producer_stream_follows_the_device_type() {
    let s = AnyStream::default_for(&host());
    // Our default stream is the null stream: CUDA spells it 1, ROCm 0.
    assert_eq!(stream_for_producer(CUDA, &s), Some(1));
    assert_eq!(stream_for_producer(ROCM, &s), Some(0));
    assert_eq!(stream_for_producer(CPU, &s), None);
}

#[test]
fn host_streams_have_no_integer_handles() {
    // SAFETY: 0 names the default stream; 7 is refused before any use.
    assert!(unsafe { AnyStream::borrow(&host(), 0) }.is_ok());
    let e = unsafe { AnyStream::borrow(&host(), 7) }.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "stream", .. }), "{e}");
}

#[test]
fn export_refuses_read_only_without_a_versioned_capsule() {
    let dev = host();
    let mut a = AnyArray::Owned(new_owned(&dev, DType::Float32, &[3]).unwrap());
    let e = export_host(&mut a, ExportRequest { read_only: true, ..Default::default() }).unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::Refused { .. })), "{e}");
    let ok = export_host(&mut a, ExportRequest { read_only: true, max_version: Some((1, 0)), ..Default::default() });
    let tensor = ok.unwrap().into_versioned();
    assert_eq!(tensor.dl_tensor().ndim, 1);
}

#[test]
fn export_to_another_device_type_is_refused() {
    let dev = host();
    let mut a = AnyArray::Owned(new_owned(&dev, DType::Int16, &[2, 2]).unwrap());
    let e = export_host(&mut a, ExportRequest { dl_device: Some((CUDA, 0)), ..Default::default() }).unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::Refused { .. })), "{e}");
}

#[test]
fn add_index_runs_on_every_dtype_with_a_kernel_and_refuses_the_others() {
    let dev = host();
    let s = AnyStream::default_for(&dev);
    for dt in DType::ALL {
        let mut a = AnyArray::Owned(new_owned(&dev, dt, &[2, 3]).unwrap());
        let r = a.add_index(&s, None);
        assert_eq!(r.is_ok(), dt.has_kernels(), "{dt:?}: {r:?}");
    }
    let e = new_owned(&dev, DType::Float32, &[1; 9]).err().unwrap();
    assert!(e.to_string().contains("9 dimensions"), "{e}");
}

#[test]
fn parked_operands_live_until_their_work_is_done() {
    let dev = host();
    let s = AnyStream::create(&dev).unwrap();
    // Work that takes a while: the host backend's sleep kernel, 300 ms.
    let sleep = AnyModule::load(&dev, &Code::Builtin, "builtins", &[]).unwrap().kernel(builtin::SLEEP_NS).unwrap();
    let mut args = KernelArgs::new();
    args.push(&300_000_000u64);
    // SAFETY: the sleep kernel takes one u64 and touches no memory.
    unsafe { sleep.launch(LaunchConfig::linear(1, 1), &args, &s) }.unwrap();
    let owner = std::sync::Arc::new(());
    keep::keep_until_done(&s, Box::new(owner.clone())).unwrap();
    keep::prune();
    assert_eq!(std::sync::Arc::strong_count(&owner), 2, "prune must keep the operands of unfinished work");
    s.synchronize().unwrap();
    keep::prune();
    assert_eq!(std::sync::Arc::strong_count(&owner), 1, "prune drops the operands of finished work");
}

/// A range over a Rust slice, held and kept alive by the test for the call.
fn held(bytes: &[u8]) -> gpuport::dynamic::raw::RawRange {
    use gpuport::dynamic::raw::{Place, RawRange};
    // SAFETY: the slice outlives every synchronous call the tests make with
    // the range, which is read-only.
    unsafe { RawRange::new(bytes.as_ptr() as u64, Place::Host, Some(bytes.len()), None, false) }
}

/// A writable range over a Rust slice.
fn held_mut(bytes: &mut [u8]) -> gpuport::dynamic::raw::RawRange {
    use gpuport::dynamic::raw::{Place, RawRange};
    // SAFETY: the address comes from a `&mut` slice that outlives every
    // synchronous call the tests make with the range, and that the test
    // reads only after those calls have returned.
    unsafe { RawRange::new(bytes.as_mut_ptr() as u64, Place::Host, Some(bytes.len()), None, true) }
}

#[test]
fn raw_copies_check_every_operand_before_touching_memory() {
    use gpuport::array::Location;
    use gpuport::dynamic::raw::{self, Place, RawRange};
    let dev = host();
    let s = AnyStream::default_for(&dev);
    let src = vec![5u8; 32];
    let mut dst = vec![0u8; 16];
    let d = held_mut(&mut dst);
    let r = held(&src);
    // Past the destination's 16 bytes: refused, nothing written.
    let e = raw::copy(&dev, &s, &d, &r, 32, None, true).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "dst", .. }), "{e}");
    assert!(e.to_string().contains("32 bytes exceed the 16 bytes"), "{e}");
    // A read-only destination.
    let e = raw::copy(&dev, &s, &r, &d, 16, Some((Location::Host, Location::Host)), true).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    // A bare host address is never dereferenced.
    // SAFETY: not held: the core must refuse to read it on the host.
    let bare = unsafe { RawRange::new(src.as_ptr() as u64, Place::Host, None, None, false) };
    let e = raw::copy(&dev, &s, &d, &bare, 16, None, true).unwrap_err();
    assert!(e.to_string().contains("raw host address"), "{e}");
    // NULL.
    // SAFETY: the NULL range is refused before any use.
    let null = unsafe { RawRange::new(0, Place::Null, None, None, true) };
    assert!(raw::memset(&dev, &s, &null, 1, 4, true).unwrap_err().to_string().contains("NULL"));
    assert!(dst.iter().all(|&b| b == 0));
    raw::copy(&dev, &s, &d, &r, 16, None, true).unwrap();
    raw::memset(&dev, &s, &d, 9, 4, true).unwrap();
    s.synchronize().unwrap();
    drop(d);
    assert_eq!(&dst[..4], &[9; 4]);
    assert_eq!(&dst[4..], &[5; 12]);
}

#[test]
fn raw_allocations_are_device_memory_of_the_current_resource() {
    use gpuport::dynamic::{memory, raw};
    let dev = host();
    // Cumulative totals: other tests may free memory meanwhile, never un-allocate it.
    let before = memory::statistics(&dev).unwrap().0.total_bytes;
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 4096).unwrap();
    assert_eq!(a.kind(), gpuport::MemoryKind::Device);
    let after = memory::statistics(&dev).unwrap().0.total_bytes;
    assert!(after >= before + 4096, "total bytes {before} -> {after}");
    drop(a);
}

#[test]
fn a_raw_import_is_checked_before_its_memory_is_trusted() {
    use gpuport::dlpack::DLDevice;
    use gpuport::dynamic::{ImportedArray, RawImport, Shape, Strides};
    let dev = host();
    let mut v = vec![10i32; 4];
    let good = RawImport {
        dtype: DType::Int32,
        shape: Shape::from_slice(&[4]),
        strides: Strides::from_slice(&[1]),
        data: v.as_mut_ptr() as usize as u64,
        dl: DLDevice { device_type: DLDeviceType::CPU, device_id: 0 },
        read_only: false,
        device: dev.clone(),
    };
    let bad = [
        (RawImport { strides: Strides::from_slice(&[1, 1]), ..good.clone() }, "strides"),
        (RawImport { data: 0, ..good.clone() }, "data"),
        (RawImport { shape: Shape::from_slice(&[usize::MAX / 2]), ..good.clone() }, "shape"),
        (RawImport { dl: DLDevice { device_type: DLDeviceType::CUDA, device_id: 0 }, ..good.clone() }, "device"),
    ];
    for (desc, field) in bad {
        // SAFETY: each description is refused before its memory is used.
        let e = unsafe { ImportedArray::from_raw(desc, std::sync::Arc::new(())) }.map(drop).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name, .. } if name == field), "{field}: {e}");
    }
    // SAFETY: `v`'s four i32s, alive and not borrowed until the import is dropped.
    let f = unsafe { ImportedArray::from_raw(good, std::sync::Arc::new(())) }.unwrap();
    let mut a = AnyArray::Imported(f);
    a.add_index(&AnyStream::default_for(&dev), None).unwrap();
    drop(a);
    assert_eq!(v, [10, 11, 12, 13]);
}

#[test]
fn read_only_device_memory_is_a_source_never_a_destination() {
    use gpuport::array::Location;
    use gpuport::dynamic::raw::{self, Place, RawRange};
    let dev = host();
    let s = AnyStream::default_for(&dev);
    let ro = vec![7u8; 8];
    let mut rw = vec![0u8; 8];
    // SAFETY: the host backend's device memory is host memory: `ro` outlives
    // every synchronous call below and is never written (read-only range).
    let ro_dev = unsafe { RawRange::new(ro.as_ptr() as u64, Place::Device(Some(dev.clone())), Some(8), None, false) };
    // SAFETY: from a `&mut` slice read only after the calls have returned.
    let rw_dev =
        unsafe { RawRange::new(rw.as_mut_ptr() as u64, Place::Device(Some(dev.clone())), Some(8), None, true) };
    let host_src = held(&ro);
    for (dir, src) in [((Location::Device, Location::Device), &rw_dev), ((Location::Host, Location::Device), &host_src)]
    {
        let e = raw::copy(&dev, &s, &ro_dev, src, 8, Some(dir), true).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "dst", .. }), "{dir:?}: {e}");
        assert!(e.to_string().contains("read-only") && e.to_string().contains("source"), "{e}");
    }
    let e = raw::memset(&dev, &s, &ro_dev, 1, 8, true).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    assert_eq!(ro, [7u8; 8]);
    raw::copy(&dev, &s, &rw_dev, &ro_dev, 8, Some((Location::Device, Location::Device)), true).unwrap();
    s.synchronize().unwrap(); // `sync` says the caller waits for the stream
    drop(rw_dev);
    assert_eq!(rw, [7u8; 8]);
}

// ---- dynamic::runtime, on every backend ---------------------------------------------------

use common::{busy, whole};
use gpuport::dynamic::raw::{self, RawAllocation, RawRange};
use gpuport::dynamic::runtime::{self, StreamChoice};

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn runtime_calls_run_on_the_device_their_operands_name(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 64).unwrap();
    // No stream given: the device is the allocation's, the stream its default.
    let e = runtime::memset(&whole(&a), 0x5A, 64, StreamChoice::Default, false).unwrap();
    let s = e.stream().expect("an asynchronous call hands back its stream").clone();
    assert!(gpuport::dynamic::same_device(&s.device(), &dev));
    assert_eq!(s.handle(), AnyStream::default_for(&dev).handle());
    e.keep(a.clone()).unwrap();
    let mut out = [0u8; 64];
    let host = held_mut(&mut out);
    let waited = runtime::memcpy(&host, &whole(&a), 64, None, StreamChoice::Default, true).unwrap();
    assert!(waited.stream().is_none(), "a waiting call leaves nothing running");
    waited.keep(()).unwrap();
    assert_eq!(out, [0x5A; 64]);
    // Sizes past an operand are refused before anything runs.
    let e = runtime::memset(&whole(&a), 1, 65, StreamChoice::Default, true).err().expect("65 bytes of 64");
    assert!(matches!(e, Error::InvalidArgument { name: "dst", .. }), "{e}");
    let e = runtime::memcpy(&host, &whole(&a), 65, None, StreamChoice::Default, true).err().expect("65 of 64");
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert_eq!(out, [0x5A; 64], "a refused copy wrote");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn runtime_keeps_the_operands_of_asynchronous_work_until_it_has_run(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 1 << 20).unwrap();
    busy(&s, 300);
    let owner = Arc::new(());
    runtime::memset(&whole(&a), 3, 1 << 20, StreamChoice::stream(s.clone()), false)
        .unwrap()
        .keep((a.clone(), owner.clone()))
        .unwrap();
    keep::prune();
    assert_eq!(Arc::strong_count(&owner), 2, "the owners went before the memset ran");
    s.synchronize().unwrap();
    keep::prune();
    assert_eq!(Arc::strong_count(&owner), 1, "the owners outlived the memset");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_waiting_runtime_call_on_a_capturing_stream_is_refused_before_it_enqueues(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 64).unwrap();
    let mut capture = s.begin_capture(gpuport::CaptureMode::Relaxed).unwrap();
    let e =
        runtime::memset(&whole(&a), 1, 64, StreamChoice::stream(s.clone()), true).err().expect("a wait in a capture");
    assert!(matches!(e, Error::Graph { kind: gpuport::GraphErrorKind::SynchronousCall, .. }), "{e}");
    let graph = capture.end().expect("the capture is still valid");
    assert_eq!(graph.node_count().unwrap(), 0, "the refused memset was captured");
}

#[rstest::rstest]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_gpuport_stream_of_another_device_is_refused(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 64).unwrap();
    let on_host = StreamChoice::stream(AnyStream::default_for(&host()));
    // The stream names the device: the allocation is then memory of another one.
    let e = runtime::memset(&whole(&a), 1, 64, on_host.clone(), true).err().expect("memory of another device");
    assert!(matches!(e, Error::InvalidArgument { .. } | Error::DeviceMismatch { .. }), "{e}");
    let e = on_host.on(&dev).expect_err("a host stream on a GPU");
    assert!(matches!(e, Error::DeviceMismatch { what: "stream", .. }), "{e}");
    // A launch given the stream itself (which it borrows, unchecked by
    // `on`) is refused by the kernel's own check, with the same error.
    let empty = AnyModule::load(&dev, &Code::Builtin, "builtins", &[]).unwrap().kernel(builtin::EMPTY).unwrap();
    let none = KernelArgs::new();
    for keep in [false, true] {
        // SAFETY: the empty kernel takes no arguments (and is refused before it runs).
        let e = unsafe {
            if keep {
                runtime::launch_and_keep(
                    &empty,
                    builtin::EMPTY,
                    LaunchConfig::linear(1, 1),
                    &none,
                    None,
                    on_host.clone(),
                    None::<()>,
                )
            } else {
                runtime::launch(&empty, builtin::EMPTY, LaunchConfig::linear(1, 1), &none, None, on_host.clone())
                    .map(drop)
            }
        }
        .expect_err("a GPU kernel on a host stream");
        assert!(matches!(e, Error::DeviceMismatch { what: "stream", .. }), "{e}");
    }
}

#[test]
fn the_registry_finds_live_allocations_and_keeps_none_alive() {
    let dev = host();
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 100).unwrap();
    let inside = RawAllocation::containing(a.ptr() + 99).expect("the last byte");
    assert!(Arc::ptr_eq(&inside, &a));
    drop(inside);
    assert!(
        RawAllocation::containing(a.ptr() + 100).is_none_or(|b| !Arc::ptr_eq(&b, &a)),
        "one past the end is not inside"
    );
    let weak = Arc::downgrade(&a);
    drop(a);
    assert!(weak.upgrade().is_none(), "the registry kept an allocation alive");
}

#[test]
fn host_launches_run_only_the_builtins_whose_targets_are_checked() {
    let dev = host();
    let module = AnyModule::load(&dev, &Code::Builtin, "builtins", &[]).unwrap();
    let fill = module.kernel(builtin::FILL_U32).unwrap();
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 64).unwrap();
    let args = |ptr: u64, n: u64| {
        let mut k = KernelArgs::new();
        k.push(&ptr);
        k.push(&n);
        k.push(&9u32);
        k
    };
    let launch = |k: &KernelArgs, first: Option<&RawRange>| {
        // SAFETY: the host backend runs only the checked built-ins.
        unsafe {
            runtime::launch(&fill, builtin::FILL_U32, LaunchConfig::linear(16, 16), k, first, StreamChoice::Default)
        }
    };
    // A bare address inside a live allocation: found, kept, filled.
    launch(&args(a.ptr(), 16), None).unwrap().keep(()).unwrap();
    let mut out = [0u8; 64];
    runtime::memcpy(&held_mut(&mut out), &whole(&a), 64, None, StreamChoice::Default, true).unwrap().keep(()).unwrap();
    assert!(out.chunks(4).all(|c| c == 9u32.to_ne_bytes()), "{out:?}");
    // Past the allocation's end, from its middle.
    let e = launch(&args(a.ptr() + 8, 15), None).err().expect("60 bytes at offset 8 of 64");
    assert!(e.to_string().contains("exceed the 56 writable bytes"), "{e}");
    // An address gpuport does not hold.
    let e = launch(&args(0xDEAD_0000, 1), None).err().expect("unknown memory");
    assert!(e.to_string().contains("not memory gpuport holds"), "{e}");
    // A read-only first pointer argument.
    let ro = [0u8; 64];
    let e = launch(&args(ro.as_ptr() as u64, 1), Some(&held(&ro))).err().expect("read-only");
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // Kernels whose pointers cannot be checked do not run on the host.
    let add = module.kernel("gpuport_add_index_f32_1");
    if let Ok(add) = add {
        // SAFETY: refused before it runs (the test asserts so).
        let e = unsafe {
            runtime::launch(
                &add,
                "gpuport_add_index_f32_1",
                LaunchConfig::linear(1, 1),
                &KernelArgs::new(),
                None,
                StreamChoice::Default,
            )
        }
        .err()
        .expect("an unchecked kernel on the host");
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    }
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_launch_keeps_its_owners_until_it_has_run_and_drops_those_of_finished_work(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let fill = AnyModule::load(&dev, &Code::Builtin, "builtins", &[]).unwrap().kernel(builtin::FILL_U32).unwrap();
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 64).unwrap();
    let mut args = KernelArgs::new();
    args.push(&a.ptr());
    args.push(&16u64);
    args.push(&7u32);
    let launch = |owner: Option<Arc<()>>| {
        // SAFETY: fill_u32 takes (ptr, n, value); `a` holds the 64 bytes it
        // writes and is kept with the launch (host: found and checked).
        unsafe {
            runtime::launch_and_keep(
                &fill,
                builtin::FILL_U32,
                LaunchConfig::linear(1, 16),
                &args,
                Some(&whole(&a)),
                StreamChoice::stream(s.clone()),
                owner.map(|o| (o, a.clone())),
            )
        }
    };
    busy(&s, 300);
    let owner = Arc::new(());
    launch(Some(owner.clone())).unwrap();
    // A launch asks a stream once it holds `keep::LAUNCH_PRUNE_LEN` kept operations.
    for _ in 1..gpuport::dynamic::keep::LAUNCH_PRUNE_LEN {
        launch(Some(Arc::new(()))).unwrap();
    }
    assert_eq!(Arc::strong_count(&owner), 2, "the owners went before the launch ran");
    s.synchronize().unwrap();
    // The next launch drops the owners of the finished ones first; with no
    // owners of its own it keeps nothing.
    launch(None).unwrap();
    assert_eq!(Arc::strong_count(&owner), 1, "the owners of finished work were not dropped");
    let mut out = [0u8; 64];
    runtime::memcpy(&held_mut(&mut out), &whole(&a), 64, None, StreamChoice::stream(s.clone()), true)
        .unwrap()
        .keep(())
        .unwrap();
    assert!(out.chunks(4).all(|c| c == 7u32.to_ne_bytes()), "{out:?}");
}

#[test]
fn module_code_is_inferred_from_its_bytes_unless_its_kind_is_given() {
    let infer = |b: &[u8]| Code::from_bytes(b.to_vec(), None).unwrap();
    assert!(matches!(infer(b"\x7fELF\x02\x01"), Code::Binary(_)));
    assert!(matches!(infer(&[0x50, 0xed, 0x55, 0xba, 1, 0]), Code::Binary(_)));
    assert!(matches!(infer(&[0xff, 0xfe]), Code::Binary(_)), "bytes that are not UTF-8 are a binary");
    assert!(matches!(infer(b".version 8.0\n.target sm_90\n"), Code::Ptx(_)));
    assert!(matches!(infer(b"extern \"C\" __global__ void k() {}"), Code::Source(_)));
    // A given kind wins; text kinds need UTF-8; unknown kinds are refused.
    assert!(matches!(Code::from_bytes(b".version".to_vec(), Some("source")).unwrap(), Code::Source(_)));
    assert!(matches!(Code::from_bytes(Vec::new(), Some("builtin")).unwrap(), Code::Builtin));
    let e = Code::from_bytes(vec![0xff], Some("ptx")).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "code", .. }), "{e}");
    let e = Code::from_bytes(Vec::new(), Some("cubin")).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "kind", .. }), "{e}");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn inferred_kernel_source_compiles_on_gpus_and_is_refused_on_the_host(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let code = Code::from_bytes(b"extern \"C\" __global__ void gpuport_test_k() {}".to_vec(), None).unwrap();
    let loaded = AnyModule::load(&dev, &code, "inferred", &[]);
    if dev.backend() == gpuport::BackendKind::Host {
        let Err(e) = loaded else { panic!("the host backend compiled kernel source") };
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    } else {
        loaded.unwrap().kernel("gpuport_test_k").unwrap();
    }
}

// ---- dynamic::graph_slot, on every backend ------------------------------------------------

use gpuport::dynamic::graph_slot::GraphSlot;
use gpuport::GraphErrorKind;

fn graph_kind(e: &Error) -> Option<GraphErrorKind> {
    match e {
        Error::Graph { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// Captures a memset of `value` over `a` on `s` into `slot`.
fn capture_fill(slot: &mut GraphSlot, s: &AnyStream, a: &Arc<RawAllocation>, value: u8) {
    slot.begin_capture(s, gpuport::CaptureMode::Relaxed).unwrap();
    runtime::memset(&whole(a), value, a.len(), StreamChoice::stream(s.clone()), false)
        .unwrap()
        .keep(a.clone())
        .unwrap();
    slot.end_capture(false).unwrap();
}

/// The first byte of `a`, read with a waiting copy.
fn first_byte(a: &RawAllocation) -> u8 {
    let mut out = [0u8; 1];
    runtime::memcpy(&held_mut(&mut out), &whole(a), 1, None, StreamChoice::Default, true).unwrap().keep(()).unwrap();
    out[0]
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_graph_slot_replays_only_what_a_finished_capture_holds(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 256).unwrap();
    runtime::memset(&whole(&a), 0, 256, StreamChoice::Default, true).unwrap().keep(()).unwrap();
    let mut slot = GraphSlot::default();
    let e = slot.replay(StreamChoice::Default).expect_err("an empty slot");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::NotCaptured), "{e}");
    slot.begin_capture(&s, gpuport::CaptureMode::Relaxed).unwrap();
    runtime::memset(&whole(&a), 4, 256, StreamChoice::stream(s.clone()), false).unwrap().keep(a.clone()).unwrap();
    // While capturing: no replay, reset, second capture or update.
    for e in [
        slot.replay(StreamChoice::stream(s.clone())).expect_err("capturing"),
        slot.reset().err().expect("capturing"),
        slot.begin_capture(&s, gpuport::CaptureMode::Relaxed).expect_err("capturing"),
        slot.update(&GraphSlot::default()).expect_err("capturing"),
    ] {
        assert_eq!(graph_kind(&e), Some(GraphErrorKind::Capturing), "{e}");
    }
    slot.end_capture(false).unwrap();
    assert!(slot.is_captured() && slot.node_count().unwrap() == 1 && slot.kept() == 1);
    let e = slot.begin_capture(&s, gpuport::CaptureMode::Relaxed).expect_err("holds a graph");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::Capturing), "{e}");
    assert_eq!(first_byte(&a), 0, "the captured memset ran at capture time");
    slot.replay(StreamChoice::Default).unwrap();
    slot.synchronize().unwrap();
    assert_eq!(first_byte(&a), 4, "the replay did not run");
    // A reset empties the slot; it can capture again.
    let retired = slot.reset().unwrap();
    retired.wait();
    drop(retired);
    assert!(!slot.is_captured() && slot.kept() == 0);
    capture_fill(&mut slot, &s, &a, 6);
    slot.replay(StreamChoice::stream(s.clone())).unwrap();
    s.synchronize().unwrap();
    assert_eq!(first_byte(&a), 6);
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_discarded_capture_leaves_the_slot_empty_and_the_stream_usable(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 64).unwrap();
    let mut slot = GraphSlot::default();
    // ThreadLocal, not Global: a Global capture would refuse the other
    // tests' waits on this device while it runs.
    slot.begin_capture(&s, gpuport::CaptureMode::ThreadLocal).unwrap();
    runtime::memset(&whole(&a), 1, 64, StreamChoice::stream(s.clone()), false).unwrap().keep(a.clone()).unwrap();
    slot.end_capture(true).unwrap();
    assert!(!slot.is_captured() && !slot.is_capturing());
    let e = slot.replay(StreamChoice::Default).expect_err("discarded");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::NotCaptured), "{e}");
    let e = slot.end_capture(false).expect_err("nothing running");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::NotCaptured), "{e}");
    s.synchronize().expect("the stream is not left capturing");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_capture_block_is_entered_once_and_exited_once(#[case] spec: &str) {
    use gpuport::dynamic::graph_slot::{BlockExit, CaptureBlock};
    let Some(dev) = common::open_or_skip(spec) else { return };
    let (s, mode) = (AnyStream::create(&dev).unwrap(), gpuport::CaptureMode::ThreadLocal);
    let (block, mut slot) = (CaptureBlock::default(), GraphSlot::default());
    let e = block.exit(&mut slot, false).expect_err("never entered");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::NotCaptured), "{e}");
    assert!(e.python_message(Some("Graph.capture")).contains("__exit__ without a running capture"), "{e}");
    block.enter(&mut slot, &s, mode).unwrap();
    assert!(block.is_entered() && slot.is_capturing());
    assert!(matches!(block.exit(&mut slot, false).unwrap(), BlockExit::Over(Ok(()))));
    assert!(!block.is_entered() && slot.is_captured());
    // A block whose capture another call ended stays entered: not again.
    let (block, mut slot) = (CaptureBlock::default(), GraphSlot::default());
    block.enter(&mut slot, &s, mode).unwrap();
    slot.end_capture(true).unwrap();
    let e = block.enter(&mut slot, &s, mode).expect_err("entered already");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::Capturing), "{e}");
    assert!(e.python_message(Some("Graph.capture")).contains("already entered"), "{e}");
    // A block that raised: its capture is discarded, and ending it reports nothing.
    let (block, mut slot) = (CaptureBlock::default(), GraphSlot::default());
    block.enter(&mut slot, &s, mode).unwrap();
    assert!(matches!(block.exit(&mut slot, true).unwrap(), BlockExit::Over(Ok(()))));
    assert!(!slot.is_captured() && !slot.is_capturing() && !block.is_entered());
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_graph_slot_takes_the_arguments_of_a_recapture(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 64).unwrap();
    let (mut first, mut second) = (GraphSlot::default(), GraphSlot::default());
    let e = first.update(&second).expect_err("both empty");
    assert!(e.to_string().contains("the graph holds no captured work"), "{e}");
    capture_fill(&mut first, &s, &a, 2);
    let e = first.update(&second).expect_err("the other is empty");
    assert!(e.to_string().contains("the other graph holds no captured work"), "{e}");
    capture_fill(&mut second, &s, &a, 3);
    first.update(&second).unwrap();
    first.replay(StreamChoice::stream(s.clone())).unwrap();
    s.synchronize().unwrap();
    assert_eq!(first_byte(&a), 3, "the update's arguments were not taken");
}

#[rstest::rstest]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_graph_slot_replays_on_streams_of_its_device_only(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 64).unwrap();
    let mut slot = GraphSlot::default();
    capture_fill(&mut slot, &s, &a, 5);
    let e = slot.replay(StreamChoice::stream(AnyStream::default_for(&host()))).expect_err("a host stream");
    assert!(matches!(e, Error::DeviceMismatch { what: "stream", .. }), "{e}");
    let said = e.python_message_of_graph_call("Graph.replay");
    assert!(said.contains(&format!("this graph was captured on {spec}; pass a stream of {spec}")), "{said}");
}

// ---- dynamic::cai ---------------------------------------------------------------------------

use gpuport::dynamic::cai::{CudaArrayInterface, Layout};

/// An interface over `a` as `n` little-endian floats.
fn floats(a: &RawAllocation, n: usize) -> CudaArrayInterface {
    CudaArrayInterface {
        version: Some(3),
        data: a.ptr(),
        shape: Some(vec![n]),
        typestr: Some("<f4".into()),
        ..CudaArrayInterface::default()
    }
}

#[test]
fn layouts_say_which_strides_fill_one_range() {
    assert_eq!(Layout::of(&[3, 4], None, 2).unwrap(), Layout { bytes: 24, c_order: true, f_order: false });
    assert!(Layout::of(&[3, 4], Some(&[2, 6]), 2).unwrap().f_order);
    assert!(!Layout::of(&[3, 4], Some(&[16, 2]), 2).unwrap().is_dense(), "rows with gaps");
    assert!(Layout::of(&[3, 1], Some(&[2, 999]), 2).unwrap().c_order, "an extent of 1 takes any stride");
    assert!(Layout::of(&[0, 5], Some(&[7, 7]), 2).unwrap().is_dense(), "nothing to lay out");
    assert!(Layout::of(&[3], Some(&[2, 2]), 2).is_err(), "strides of another rank");
    assert!(Layout::of(&[usize::MAX, 2], None, 1).is_err(), "past MAX_EXTENT");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn cuda_array_interfaces_are_checked_before_their_memory_is_trusted(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 64).unwrap();
    let keep: Arc<dyn Send + Sync> = a.clone();
    // SAFETY (every import below): the interface describes 16 floats of `a`,
    // device memory of `dev` kept alive by `keep`; no stream is given.
    let import = |c: CudaArrayInterface| unsafe { c.import(Some(&dev), keep.clone()) };
    let refused = |c: CudaArrayInterface, says: &str| {
        let e = import(c).err().expect("refused");
        assert!(e.to_string().contains(says), "{e} (expected {says:?})");
    };
    refused(CudaArrayInterface { version: None, ..floats(&a, 16) }, "no \"version\"");
    refused(CudaArrayInterface { masked: true, ..floats(&a, 16) }, "masked");
    refused(CudaArrayInterface { typestr: None, ..floats(&a, 16) }, "no \"typestr\"");
    refused(CudaArrayInterface { typestr: Some("<V4".into()), ..floats(&a, 16) }, "not supported");
    refused(CudaArrayInterface { strides: Some(vec![6]), ..floats(&a, 16) }, "not whole 4-byte elements");
    refused(CudaArrayInterface { shape: Some(vec![usize::MAX / 2, 4]), ..floats(&a, 16) }, "too large");
    if dev.backend() != gpuport::BackendKind::Cuda {
        let e = import(floats(&a, 16)).err().expect("not a CUDA device");
        assert!(matches!(e, Error::NoDevice { .. }), "{e}");
        return;
    }
    refused(CudaArrayInterface { data: 0, ..floats(&a, 16) }, "null");
    refused(CudaArrayInterface { stream: Some(0), ..floats(&a, 16) }, "stream 0 is disallowed");
    let f = import(CudaArrayInterface { strides: Some(vec![8]), ..floats(&a, 8) }).unwrap();
    assert_eq!((f.data(), f.shape().as_slice(), f.strides().as_slice()), (a.ptr(), &[8usize][..], &[2i64][..]));
    let empty = import(CudaArrayInterface { data: 0, shape: Some(vec![0]), ..floats(&a, 0) }).unwrap();
    assert_eq!(empty.shape().as_slice(), &[0]);
}

// ---- dynamic::imported::import_tensor ---------------------------------------------------------

use gpuport::array::{ExportOptions, Location, MemArray, Transfer};
use gpuport::dlpack::ImportedTensor;
use gpuport::dynamic::imported::{import_tensor, Placement};

/// A tensor another library handed over, as a binding holds it.
struct Handed(ImportedTensor);

impl AsRef<ImportedTensor> for Handed {
    fn as_ref(&self) -> &ImportedTensor {
        &self.0
    }
}

// SAFETY: the tensors here are gpuport's own exports, whose deleters may run
// on any thread; only the description's plain fields are read.
unsafe impl Send for Handed {}
// SAFETY: as above; shared access only reads plain fields.
unsafe impl Sync for Handed {}

/// The host copy of an owned array, as floats (after its stream's work).
fn host_floats(a: &AnyArray) -> Vec<f32> {
    let AnyArray::Owned(o) = a else { panic!("not a copy") };
    AnyStream::default_for(&o.device()).synchronize().unwrap();
    let (ptr, keep) = o.parts(Location::Host, None).unwrap();
    let n = o.shape().iter().product::<usize>();
    // SAFETY: `keep` holds the host copy of `n` floats, current after the sync.
    let v = unsafe { std::slice::from_raw_parts(ptr as usize as *const f32, n) }.to_vec();
    drop(keep);
    v
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn imports_are_placed_where_asked_and_copied_only_from_the_host(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let on_host = host();
    let values = vec![1.0f32, 2.0, 3.0, 4.0];
    let h = gpuport::on_backend!(&on_host, d => MemArray::from_vec(d, [4], values.clone()).unwrap().to_dlpack(Location::Host, false, None).unwrap());
    // SAFETY: a live tensor we produced, handed over once.
    let t = Arc::new(Handed(unsafe { ImportedTensor::from_legacy(h.into_raw()) }.unwrap()));
    let in_place = import_tensor(t.clone(), Placement::InPlace).unwrap();
    assert!(matches!(in_place, AnyArray::Imported(_)) && in_place.device().backend() == gpuport::BackendKind::Host);
    let copy = import_tensor(t.clone(), Placement::HostCopy).unwrap();
    assert_eq!(host_floats(&copy), values);
    let placed = import_tensor(t.clone(), Placement::On(dev.clone())).unwrap();
    assert!(gpuport::dynamic::same_device(&placed.device(), &dev));
    if dev.backend() == gpuport::BackendKind::Host {
        assert!(matches!(placed, AnyArray::Imported(_)), "host data on the host: no copy");
        return;
    }
    // Host data for a GPU: copied up, both copies current.
    let AnyArray::Owned(o) = &placed else { panic!("host data for a GPU is copied") };
    assert!(o.residency().includes(Location::Device) && o.residency().includes(Location::Host));
    assert_eq!(host_floats(&placed), values);
    // GPU data is imported where it is, or refused elsewhere: never copied between devices.
    let s = AnyStream::create(&dev).unwrap();
    let g = gpuport::on_backend!(&dev, d => {
        let mut a = MemArray::from_vec(d, [4], values.clone()).unwrap();
        a.move_to(Location::Device, s.of(d).unwrap(), Transfer::Sync, None).unwrap();
        a.to_dlpack_versioned(Location::Device, ExportOptions::default(), None).unwrap()
    });
    // SAFETY: as above.
    let t = Arc::new(Handed(unsafe { ImportedTensor::from_versioned(g.into_raw()) }.unwrap()));
    assert!(matches!(import_tensor(t.clone(), Placement::On(dev.clone())).unwrap(), AnyArray::Imported(_)));
    let e = import_tensor(t.clone(), Placement::On(on_host.clone())).err().expect("GPU data for the host");
    assert!(e.to_string().contains(&format!("the data is on {spec}, not host")), "{e}");
    let e = import_tensor(t, Placement::HostCopy).err().expect("a host copy of device memory");
    assert!(matches!(e, Error::DLPack(DLPackError::Refused { .. })), "{e}");
}

// ---- dynamic::target ----------------------------------------------------------------

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_gpu_array_names_its_device_copy_by_backend_or_dlpack_type(#[case] spec: &str) {
    use gpuport::dynamic::target::{device_copy_dl, move_target, TargetName};
    let Some(dev) = common::open_or_skip(spec) else { return };
    let own = i64::from(device_copy_dl(&dev).device_type.0);
    let to = |t: TargetName<'_>, id: Option<usize>| move_target(&dev, t, id);
    assert_eq!(to(TargetName::DLPack(CPU.into()), Some(5)).unwrap(), Location::Host, "the host copy takes any id");
    if dev.backend() == gpuport::BackendKind::Host {
        assert_eq!(own, i64::from(CPU));
        assert!(to(TargetName::Name("cuda"), None).is_err());
        return;
    }
    for name in [spec, &spec.to_ascii_uppercase(), dev.backend().name()] {
        assert_eq!(to(TargetName::Name(name), None).unwrap(), Location::Device, "{name}");
    }
    assert_eq!(to(TargetName::DLPack(own), Some(dev.info().ordinal)).unwrap(), Location::Device);
    let e = to(TargetName::DLPack(own), Some(dev.info().ordinal + 1)).unwrap_err();
    assert!(matches!(e, Error::DeviceMismatch { what: "device_id", .. }), "{e}");
    let other = if own == i64::from(CUDA) { ROCM } else { CUDA };
    let e = to(TargetName::DLPack(other.into()), None).unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::NoCopyOn { .. })), "{e}");
    assert_eq!(e.python_class().name(), "DeviceUnavailableError");
}

// ---- dynamic::cai::export -----------------------------------------------------------

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_cuda_array_interface_is_exported_from_a_current_cuda_device_copy_only(#[case] spec: &str) {
    use gpuport::dynamic::cai::{export, InterfaceExport};
    let Some(dev) = common::open_or_skip(spec) else { return };
    let absent = |a: &mut AnyArray, says: &str| match export(a).unwrap() {
        InterfaceExport::Absent(why) => assert!(why.contains(says), "{why} (expected {says:?})"),
        InterfaceExport::Present(i) => panic!("exported {i:?}, expected absent: {says}"),
    };
    let mut b = AnyArray::Owned(new_owned(&dev, DType::BFloat16, &[2]).unwrap());
    absent(&mut b, "bfloat16 has no array-interface type string");
    let mut a = AnyArray::Owned(new_owned(&dev, DType::Float32, &[2, 3]).unwrap());
    if dev.backend() != gpuport::BackendKind::Cuda {
        absent(&mut a, &format!("this array is on {spec}"));
        let h = gpuport::on_backend!(&host(), d => MemArray::from_vec(d, [2], vec![1.0f32, 2.0]).unwrap().to_dlpack(Location::Host, false, None).unwrap());
        // SAFETY: a live tensor we produced, handed over once.
        let t = Arc::new(Handed(unsafe { ImportedTensor::from_legacy(h.into_raw()) }.unwrap()));
        absent(&mut import_tensor(t, Placement::InPlace).unwrap(), "imported array is on DLPack device 1");
        return;
    }
    let AnyArray::Owned(o) = &mut a else { unreachable!() };
    if !o.residency().includes(Location::Device) {
        absent(&mut a, "device copy is not current");
    }
    let s = AnyStream::default_for(&dev);
    a.add_index(&s, None).unwrap();
    let InterfaceExport::Present(i) = export(&mut a).unwrap() else { panic!("a CUDA device copy") };
    assert_eq!((i.shape.as_slice(), i.typestr, i.read_only, &i.strides), (&[2usize, 3][..], "<f4", false, &None));
    if let Some(h) = i.stream {
        assert_eq!(h, AnyStream::export_stream(&dev).unwrap().handle(), "pending work is handed over");
    }
    let AnyArray::Owned(o) = &a else { unreachable!() };
    assert!(
        !o.residency().includes(Location::Host),
        "the consumer may write the device copy: it is the only current one"
    );
}
