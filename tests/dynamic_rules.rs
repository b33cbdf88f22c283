//! Rules of the run-time layer that a binding's calls follow, on every
//! backend: a `get_dlpack` block's life (`dynamic::lock_context`), the
//! default device of a CUDA Array Interface import (`dynamic::cai`),
//! the runtime's argument names and whole calls (`dynamic::runtime`), and
//! a `DeviceArray`'s shape, type, index, interface and free rules
//! (`dynamic::device_array`).

mod common;

use gpuport::array::{Location, LockError};
use gpuport::dlpack::{DLDeviceType, DLPackError};
use gpuport::dynamic::exchange::{self, Export, ExportRequest};
use gpuport::dynamic::lock_context::LockContext;
use gpuport::dynamic::{new_owned, AnyArray, DType};
use gpuport::Error;

/// A versioned export request with no consumer stream.
fn versioned() -> ExportRequest {
    ExportRequest { max_version: Some((1, 0)), ..Default::default() }
}

/// `block`'s export of `a`, with no consumer stream.
fn export_in(block: &LockContext, a: &mut AnyArray, req: ExportRequest) -> gpuport::Result<Export> {
    assert!(req.stream.is_none());
    // SAFETY: no stream handle is passed.
    unsafe { block.export(a, req) }
}

/// The error of a call that must fail (`Export` has no `Debug` for `expect_err`).
fn refused<T>(r: gpuport::Result<T>, what: &str) -> Error {
    match r {
        Ok(_) => panic!("{what}: not refused"),
        Err(e) => e,
    }
}

fn array_on(spec: &str) -> Option<AnyArray> {
    let dev = common::open_or_skip(spec)?;
    Some(AnyArray::Owned(new_owned(&dev, DType::Float32, &[4]).unwrap()))
}

// ---- dynamic::lock_context ------------------------------------------------------------

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_lock_context_is_entered_once_and_exports_with_its_lock_only_while_entered(#[case] spec: &str) {
    let Some(mut a) = array_on(spec) else { return };
    let block = LockContext::new(false, None);
    export_in(&block, &mut a, versioned()).expect("a fresh block exports as a plain export");
    assert_eq!(a.lock_id(), None, "a fresh block holds no lock");
    block.enter(&mut a, None).unwrap();
    assert_eq!(a.lock_id(), Some(block.lock_id()));
    // SAFETY: no stream handle is passed.
    let e = refused(unsafe { exchange::export(&mut a, versioned()) }, "a plain export of a locked array");
    assert!(matches!(e, Error::Lock(LockError::Locked { .. })), "{e}");
    export_in(&block, &mut a, versioned()).expect("the entered block exports with its lock");
    let e = block.enter(&mut a, None).unwrap_err();
    assert!(matches!(e, Error::Lock(LockError::BlockEntered { .. })), "{e}");
    assert_eq!(a.lock_id(), Some(block.lock_id()), "a refused second entry keeps the lock");

    assert!(block.exit(&mut a), "an entered block closes");
    assert_eq!(a.lock_id(), None);
    let e = refused(export_in(&block, &mut a, versioned()), "an export after the block");
    assert!(matches!(e, Error::DLPack(DLPackError::BlockEnded { .. })), "{e}");
    assert!(e.python_message(Some("__dlpack__")).starts_with("__dlpack__: this get_dlpack block has ended"), "{e}");
    assert_eq!(e.python_class().name(), "DLPackError");
    let e = block.enter(&mut a, None).unwrap_err();
    assert!(matches!(e, Error::Lock(LockError::BlockEnded { op: "__enter__", .. })), "{e}");
    assert_eq!(e.python_class().name(), "LockError");
    assert!(!block.exit(&mut a), "a closed block closes once");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn exiting_a_block_releases_only_its_own_lock(#[case] spec: &str) {
    let Some(mut a) = array_on(spec) else { return };
    let fresh = LockContext::new(false, None);
    assert!(!fresh.exit(&mut a), "a fresh block releases nothing");
    let first = LockContext::new(false, None);
    first.enter(&mut a, None).unwrap();
    a.exit();
    let second = LockContext::new(false, None);
    assert_ne!(first.lock_id(), second.lock_id(), "two blocks share a lock id");
    second.enter(&mut a, None).unwrap();
    assert!(first.exit(&mut a));
    assert_eq!(a.lock_id(), Some(second.lock_id()), "the first block released the second's lock");
    let e = fresh.enter(&mut a, None).unwrap_err();
    assert!(matches!(e, Error::Lock(LockError::AlreadyLocked { .. })), "{e}");
    assert!(!fresh.exit(&mut a), "a block whose entry failed stays fresh");
    assert!(second.exit(&mut a));
    fresh.enter(&mut a, None).expect("entered once the array is free");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_block_exports_the_copy_it_prefers_with_the_flags_it_was_made_with(#[case] spec: &str) {
    let Some(mut a) = array_on(spec) else { return };
    let block = LockContext::new(true, Some(Location::Host));
    assert_eq!(block.dl_device(&a).device_type, DLDeviceType::CPU);
    block.enter(&mut a, None).unwrap();
    let e = refused(export_in(&block, &mut a, ExportRequest::default()), "a read-only legacy export");
    assert!(matches!(e, Error::DLPack(DLPackError::Refused { .. })), "{e}");
    let t = export_in(&block, &mut a, versioned()).unwrap().into_versioned();
    assert_eq!(t.dl_tensor().device.device_type, DLDeviceType::CPU);
    assert!(block.exit(&mut a));
}

// ---- dynamic::cai ---------------------------------------------------------------------

#[test]
fn a_cuda_array_interface_without_a_device_is_imported_on_cuda_0() {
    use gpuport::dynamic::cai::{CudaArrayInterface, DEFAULT_DEVICE};
    let empty = CudaArrayInterface {
        version: Some(3),
        shape: Some(vec![0]),
        typestr: Some("<f4".into()),
        ..Default::default()
    };
    // SAFETY: an empty array: no memory is read or written.
    let imported = unsafe { empty.import(None, std::sync::Arc::new(())) };
    match gpuport::open(DEFAULT_DEVICE) {
        Ok(dev) => {
            let a = AnyArray::Imported(imported.unwrap());
            assert!(gpuport::dynamic::same_device(&a.device(), &dev), "imported on {}", a.device().info().spec());
        }
        Err(open) => {
            let e = imported.err().expect("no CUDA device here, yet imported");
            assert_eq!(e.to_string(), open.to_string(), "the error is not the default device's");
        }
    }
    assert_eq!(DEFAULT_DEVICE, "cuda:0");
}

// ---- dynamic::exchange: the consumer's stream ------------------------------------------

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_consumer_passes_a_stream_for_gpu_memory_only_on_the_memorys_device(#[case] spec: &str) {
    use gpuport::dynamic::exchange::{consumer_device_for, stream_for_producer};
    let Some(dev) = common::open_or_skip(spec) else { return };
    let dl = gpuport::dynamic::target::device_copy_dl(&dev);
    let pair = (dl.device_type.0 as i32, dl.device_id);
    let ours = gpuport::dynamic::AnyStream::default_for(&dev);
    match consumer_device_for(pair).unwrap() {
        Some(d) => assert!(gpuport::dynamic::same_device(&d, &dev), "{spec}'s memory named {}", d.info().spec()),
        None => assert_eq!(dev.backend(), gpuport::BackendKind::Host, "{spec}'s memory takes no stream"),
    }
    let passes = consumer_device_for(pair).unwrap().is_some();
    assert_eq!(stream_for_producer(pair.0, &ours).is_some(), passes, "the stream's rule and its device's differ");
    for host in [DLDeviceType::CPU, DLDeviceType::CUDA_HOST, DLDeviceType::ROCM_HOST] {
        assert!(consumer_device_for((host.0 as i32, 0)).unwrap().is_none(), "{host:?} takes no stream");
    }
    assert!(consumer_device_for((-1, 0)).unwrap().is_none(), "a negative type is no GPU memory");
}

// ---- dynamic::runtime: names and whole calls ------------------------------------------

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{busy, whole};
use gpuport::dynamic::raw::{self, Place, RawRange};
use gpuport::dynamic::runtime::{self, CopyDirection, StreamChoice, Whole};
use gpuport::dynamic::{keep, AnyStream};
use gpuport::MemoryKind;

#[test]
fn copy_directions_are_named_as_hip_names_them_and_a_bad_name_lists_the_good_ones() {
    use CopyDirection::*;
    let table = [
        ("host_to_host", "HtoH", HostToHost),
        ("host_to_device", "HtoD", HostToDevice),
        ("device_to_host", "DtoH", DeviceToHost),
        ("device_to_device", "DtoD", DeviceToDevice),
    ];
    for (kind, (long, short, dir)) in table.into_iter().enumerate() {
        assert_eq!(CopyDirection::from_name(long).unwrap(), dir);
        assert_eq!(CopyDirection::from_name(short).unwrap(), dir);
        assert_eq!(CopyDirection::from_hip_kind(kind as i64).unwrap(), dir, "hipMemcpyKind {kind}");
        assert_eq!(dir.name(), long);
    }
    assert_eq!(CopyDirection::from_name("default").unwrap(), Default);
    assert_eq!(CopyDirection::from_hip_kind(4).unwrap(), Default);
    assert_eq!(Default.locations(), None);
    assert_eq!(HostToDevice.locations(), Some((Location::Host, Location::Device)));
    assert_eq!(DeviceToHost.locations(), Some((Location::Device, Location::Host)));
    let e = CopyDirection::from_name("sideways").unwrap_err();
    assert!(
        e.to_string().ends_with(
            r#"memcpy kind "sideways": use "host_to_host", "host_to_device", "device_to_host", "device_to_device" or "default""#
        ),
        "{e}"
    );
    assert_eq!(e.python_class().name(), "InvalidArgumentError");
    for bad in [-1, 5, 9, i64::MAX] {
        let e = CopyDirection::from_hip_kind(bad).unwrap_err();
        assert!(e.to_string().ends_with(&format!("memcpy kind {bad}: 0..=4 (hipMemcpyKind order)")), "{e}");
    }
    assert!(CopyDirection::from_name("Default").is_err(), "names are case-sensitive");
}

#[test]
fn malloc_kinds_are_device_pinned_or_managed() {
    assert_eq!(runtime::memory_kind_from_name("device").unwrap(), MemoryKind::Device);
    assert_eq!(runtime::memory_kind_from_name("pinned").unwrap(), MemoryKind::Pinned);
    assert_eq!(runtime::memory_kind_from_name("host").unwrap(), MemoryKind::Pinned);
    assert_eq!(runtime::memory_kind_from_name("managed").unwrap(), MemoryKind::Managed);
    let e = runtime::memory_kind_from_name("shared").unwrap_err();
    assert!(e.to_string().ends_with(r#"kind "shared": use "device", "pinned" or "managed""#), "{e}");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_whole_runtime_call_prunes_first_runs_unlocked_once_and_keeps_its_owners_until_its_work_has_run(
    #[case] spec: &str,
) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = raw::alloc(&dev, MemoryKind::Device, 1 << 20).unwrap();
    let unlocked_runs = AtomicUsize::new(0);
    let call = |stream: StreamChoice<'static>, wait: bool, owners: Arc<()>| Whole {
        stream,
        wait,
        owners: (a.clone(), owners),
        unlocked: |op: runtime::Blocking<'_>| {
            unlocked_runs.fetch_add(1, Ordering::Relaxed);
            op()
        },
    };
    let owner = Arc::new(());
    busy(&s, 300);
    runtime::memset_and_keep(&whole(&a), 3, 1 << 20, call(StreamChoice::stream(s.clone()), false, owner.clone()))
        .unwrap();
    keep::prune();
    assert_eq!(Arc::strong_count(&owner), 2, "the owners went before the memset ran");
    s.synchronize().unwrap();
    // The next whole call drops the owners of the finished memset first.
    let mut out = [0u8; 16];
    // SAFETY: `out` outlives the waiting copy below.
    let host = unsafe { RawRange::new(out.as_mut_ptr() as u64, Place::Host, Some(16), None, true) };
    let copied = Arc::new(());
    let dir = CopyDirection::Default;
    runtime::memcpy_and_keep(&host, &whole(&a), 16, dir, call(StreamChoice::Default, true, copied.clone())).unwrap();
    assert_eq!(Arc::strong_count(&owner), 1, "the finished memset's owners outlived the next call");
    assert_eq!(Arc::strong_count(&copied), 1, "a waiting call keeps nothing");
    assert_eq!(out, [3; 16]);
    let refused = Arc::new(());
    let e = runtime::memset_and_keep(&whole(&a), 1, (1 << 20) + 1, call(StreamChoice::Default, true, refused.clone()))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "dst", .. }), "{e}");
    assert_eq!(Arc::strong_count(&refused), 1, "a refused call kept its owners");
    let peer = call(StreamChoice::stream(s.clone()), true, Arc::new(()));
    let b = raw::alloc(&dev, MemoryKind::Device, 16).unwrap();
    runtime::memcpy_peer_and_keep((&whole(&b), &dev), (&whole(&a), &dev), 16, peer).unwrap();
    assert_eq!(unlocked_runs.load(Ordering::Relaxed), 4, "each call runs its enqueue unlocked once");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn malloc_prunes_first_reads_its_kind_before_allocating_and_allocates_unlocked_once(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let finished = Arc::new(());
    keep::keep_until_done(&s, Box::new(finished.clone())).unwrap();
    s.synchronize().unwrap();
    let unlocked_runs = AtomicUsize::new(0);
    let unlocked = |op: runtime::Allocating<'_>| {
        unlocked_runs.fetch_add(1, Ordering::Relaxed);
        op()
    };
    let a = runtime::malloc(&dev, "pinned", 64, unlocked).unwrap();
    assert_eq!(Arc::strong_count(&finished), 1, "malloc kept the owners of finished work");
    assert_eq!((a.kind(), a.len()), (MemoryKind::Pinned, 64));
    assert!(gpuport::dynamic::same_device(a.device(), &dev));
    assert_eq!(runtime::malloc(&dev, "device", 16, unlocked).unwrap().kind(), MemoryKind::Device);
    assert_eq!(unlocked_runs.load(Ordering::Relaxed), 2, "each malloc allocates unlocked once");
    let e = runtime::malloc(&dev, "shared", 16, unlocked).unwrap_err();
    assert!(e.to_string().ends_with(r#"kind "shared": use "device", "pinned" or "managed""#), "{e}");
    assert_eq!(e.python_class().name(), "InvalidArgumentError");
    assert_eq!(unlocked_runs.load(Ordering::Relaxed), 2, "a refused kind allocated");
}

// ---- dynamic::device_array ------------------------------------------------------------

use std::sync::Mutex;

use gpuport::dynamic::cai::CudaArrayInterface;
use gpuport::dynamic::device_array::{self, ArrayDims, DeviceArray, DeviceArrayError, FreeTarget, IndexKey, TypeName};

fn device_array_error(e: Error) -> DeviceArrayError {
    match e {
        Error::DeviceArray(d) => d,
        other => panic!("expected a DeviceArrayError, got {other:?}"),
    }
}

fn slice(start: Option<isize>, stop: Option<isize>) -> IndexKey {
    IndexKey::Slice { start, stop, step: None }
}

#[test]
fn configure_keeps_the_bytes_of_one_axis_and_refuses_sizes_past_the_memory_unless_forced() {
    let bytes = ArrayDims::bytes(Some(16));
    let f4 = bytes.configured(None, Some(&TypeName::Text("<u4".into())), Some(16), false).unwrap();
    assert_eq!((f4.shape(), f4.typestr(), f4.itemsize()), (Some(&[4usize][..]), "<u4", 4));
    let square = f4.configured(Some(vec![2, 2]), None, Some(16), false).unwrap();
    assert_eq!(square.shape(), Some(&[2usize, 2][..]));
    assert_eq!(square.configured(None, None, Some(16), false).unwrap().shape(), Some(&[2usize, 2][..]), "2-D kept");
    let e = f4.configured(Some(vec![8]), None, Some(16), false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "configure: 32 bytes ((8,) of <u4) exceed the 16 bytes of the memory; pass _force=True to override"
    );
    assert_eq!(e.python_class().name(), "ValueError");
    assert!(f4.configured(Some(vec![8]), None, Some(16), true).is_ok(), "forced");
    let e = f4.configured(Some(vec![1]), None, None, false).unwrap_err();
    assert_eq!(device_array_error(e), DeviceArrayError::UnknownSize);
    assert!(f4.configured(Some(vec![1]), None, None, true).is_ok());
    let e = ArrayDims::bytes(None).configured(None, None, Some(16), true).unwrap_err();
    assert_eq!(device_array_error(e), DeviceArrayError::NoShapeToKeep);
    let e = bytes.configured(Some(vec![1 << 40, 1 << 40]), None, None, true).unwrap_err();
    assert_eq!(e.python_class().name(), "OverflowError");
    assert_eq!(ArrayDims::bytes(None).nbytes().unwrap(), 0);
    assert_eq!(device_array_error(ArrayDims::bytes(None).len().unwrap_err()), DeviceArrayError::NoFirstAxis);
}

#[test]
fn a_type_is_a_type_string_as_given_or_the_type_string_of_an_element_type() {
    let text = |s: &str| TypeName::Text(s.into()).typestr();
    assert_eq!(text("<f4").unwrap(), "<f4");
    assert_eq!(text("float64").unwrap(), "<f8");
    assert_eq!(TypeName::DType(gpuport::dynamic::DType::Int16).typestr().unwrap(), "<i2");
    let e = text("float33").unwrap_err();
    assert!(e.to_string().starts_with("typestr 'float33': pass an array-interface type string"), "{e}");
    assert_eq!(e.python_class().name(), "ValueError");
    let e = TypeName::Unknown("<object>".into()).typestr().unwrap_err();
    assert!(e.to_string().starts_with("typestr <object>:"), "{e}");
}

#[test]
fn indexing_selects_one_contiguous_range_or_says_why_not() {
    let dims = ArrayDims::new(Some(vec![3, 4]), Some("<i4".into())).unwrap();
    let row = dims.index(&[IndexKey::Int(1)]).unwrap();
    assert_eq!((row.dims.shape(), row.byte_offset, row.nbytes), (Some(&[4usize][..]), 16, 16));
    let last = dims.index(&[IndexKey::Int(-1), slice(Some(1), Some(3))]).unwrap();
    assert_eq!((last.dims.shape(), last.byte_offset, last.nbytes), (Some(&[2usize][..]), 36, 8));
    let rows = dims.index(&[slice(Some(1), None), slice(None, None)]).unwrap();
    assert_eq!((rows.dims.shape(), rows.byte_offset), (Some(&[2usize, 4][..]), 16));
    let clamped = dims.index(&[slice(Some(-10), Some(isize::MAX))]).unwrap();
    assert_eq!((clamped.dims.shape(), clamped.byte_offset), (Some(&[3usize, 4][..]), 0), "bounds clamp as Python's");
    assert_eq!(dims.index(&[slice(Some(2), Some(1))]).unwrap().dims.shape(), Some(&[0usize, 4][..]));
    assert_eq!(rows.window(48), 32);
    assert_eq!(last.window(20), 0, "known bytes before the sub-array");
    let refused = |keys: &[IndexKey]| device_array_error(dims.index(keys).unwrap_err());
    assert_eq!(refused(&[IndexKey::Int(3)]), DeviceArrayError::IndexOutOfBounds { index: 3, axis: 0, size: 3 });
    assert_eq!(refused(&[IndexKey::Int(-4)]), DeviceArrayError::IndexOutOfBounds { index: -4, axis: 0, size: 3 });
    assert_eq!(refused(&[IndexKey::Int(0); 3]), DeviceArrayError::TooManyIndices { given: 3, ndim: 2 });
    let step = |step| IndexKey::Slice { start: None, stop: None, step: Some(step) };
    assert_eq!(refused(&[step(2)]), DeviceArrayError::StepNotOne);
    assert_eq!(refused(&[step(0)]), DeviceArrayError::ZeroStep);
    assert_eq!(refused(&[slice(Some(1), None), slice(Some(1), None)]), DeviceArrayError::PartialSliceThenSlice);
    assert_eq!(refused(&[slice(None, None), IndexKey::Int(0)]), DeviceArrayError::IntAfterSlice);
    let e = dims.index(&[IndexKey::Int(3)]).unwrap_err();
    assert_eq!(e.python_class().name(), "IndexError");
    assert_eq!(e.to_string(), "index 3 is out of bounds for axis 0 of size 3");
    let e = ArrayDims::bytes(None).index(&[]).unwrap_err();
    assert_eq!(e.python_class().name(), "TypeError");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_device_array_frees_what_it_owns_once(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let a = raw::alloc(&dev, MemoryKind::Managed, 64).unwrap();
    let mut owner = DeviceArray::owning(a.clone());
    assert_eq!(owner.dims().shape(), Some(&[64usize][..]));
    assert!(owner.owns_memory());
    assert!(Arc::ptr_eq(&owner.allocation("prefetch").unwrap(), &a));
    assert!(Arc::ptr_eq(&owner.free().unwrap(), &a));
    assert_eq!(owner.dims().shape(), Some(&[0usize][..]), "a freed array has no bytes");
    assert_eq!(device_array_error(owner.free().unwrap_err()), DeviceArrayError::DoubleFree);
    let mut view = DeviceArray::over(ArrayDims::bytes(Some(64)));
    assert_eq!(device_array_error(view.free().unwrap_err()), DeviceArrayError::NotOwner);
    assert_eq!(
        device_array_error(view.allocation("advise").unwrap_err()),
        DeviceArrayError::NoAllocation { op: "advise" }
    );
}

#[test]
fn a_device_array_takes_the_shape_and_type_of_an_interface_in_c_order_only() {
    let cai = |shape: Vec<usize>, strides: Option<Vec<i64>>| CudaArrayInterface {
        version: Some(3),
        data: 0x1000,
        shape: Some(shape),
        typestr: Some("<f4".into()),
        strides,
        ..Default::default()
    };
    let dims = ArrayDims::of_interface(&cai(vec![2, 3], None), "Tensor").unwrap();
    assert_eq!((dims.shape(), dims.typestr(), dims.itemsize()), (Some(&[2usize, 3][..]), "<f4", 4));
    let dense = ArrayDims::of_interface(&cai(vec![2, 3], Some(vec![12, 4])), "Tensor").unwrap();
    assert_eq!(dense, dims, "C-order strides are C order");
    let e = ArrayDims::of_interface(&cai(vec![2, 3], Some(vec![4, 8])), "Tensor").unwrap_err();
    assert_eq!(
        e.to_string(),
        "DeviceArray: the Tensor (shape (2, 3), strides (4, 8) bytes) is not contiguous in C order, and a \
         DeviceArray describes C-contiguous memory; pass a C-contiguous array (e.g. tensor.contiguous())"
    );
    assert_eq!(e.python_class().name(), "ValueError");
    let every_other = ArrayDims::of_interface(&cai(vec![4], Some(vec![8])), "ndarray").unwrap_err();
    assert!(matches!(device_array_error(every_other), DeviceArrayError::NotCContiguous { .. }));
    let untyped = CudaArrayInterface { shape: Some(vec![4]), ..Default::default() };
    let bytes = ArrayDims::of_interface(&untyped, "object").unwrap();
    assert_eq!((bytes.shape(), bytes.typestr()), (Some(&[4usize][..]), "|u1"), "no type string: bytes");
    let bad = CudaArrayInterface { typestr: Some("f4".into()), ..cai(vec![4], Some(vec![8])) };
    assert!(matches!(ArrayDims::of_interface(&bad, "object"), Err(Error::InvalidArgument { name: "typestr", .. })));
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn free_prunes_first_frees_an_array_once_passes_null_and_refuses_a_bare_address(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = raw::alloc(&dev, MemoryKind::Device, 64).unwrap();
    let finished = Arc::new(());
    keep::keep_until_done(&s, Box::new(finished.clone())).unwrap();
    s.synchronize().unwrap();
    let owner = Mutex::new(DeviceArray::owning(a.clone()));
    let freed = device_array::free(FreeTarget::Array(&owner)).unwrap().expect("the owned allocation");
    assert!(Arc::ptr_eq(&freed, &a));
    assert_eq!(Arc::strong_count(&finished), 1, "free kept the owners of finished work");
    assert!(!owner.lock().unwrap().owns_memory());
    let e = device_array::free(FreeTarget::Array(&owner)).unwrap_err();
    assert_eq!(e.to_string(), "free: this DeviceArray was already freed (double free)");
    assert!(device_array::free(FreeTarget::Address(0)).unwrap().is_none(), "NULL is freed as nothing");
    let e = device_array::free(FreeTarget::Address(a.ptr())).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("free: {:#x} is not owned by gpuport; pass the DeviceArray that malloc returned", a.ptr())
    );
    assert_eq!(e.python_class().name(), "ValueError");
    assert_eq!(device_array_error(e), DeviceArrayError::NotGpuportMemory { addr: a.ptr() });
    let view = Mutex::new(DeviceArray::over(ArrayDims::bytes(Some(64))));
    let e = device_array::free(FreeTarget::Array(&view)).unwrap_err();
    assert_eq!(device_array_error(e), DeviceArrayError::NotOwner);
    let held = view.lock().unwrap();
    let e = device_array::free(FreeTarget::Array(&view)).unwrap_err();
    assert!(matches!(e, Error::Lock(LockError::Busy { what: "DeviceArray" })), "{e}");
    drop(held);
}
