//! One collective as a binding calls it (`AnyCommunicator::collective`,
//! src/collective/operands.rs): the operands' checks, in place, the owners
//! kept until the stream has run the collective (from a group's end on,
//! inside a group), captures, a binding's objects sorted into sides
//! (`Sides`) and the precedence of its group's errors (`group_with`). On the
//! host backend always, and on cuda:0 and rocm:0 with a one-rank NCCL or
//! RCCL communicator where the device and the library exist (skipped with a
//! printed reason otherwise).

mod common;

use std::io::Write;
use std::sync::Arc;

use gpuport::array::Residency;
use gpuport::collective::{AnyCommunicator, ArgumentError, CallMode, Op, OpKind, Operand, Operands, ReduceOp};
use gpuport::dynamic::raw::{self, Place, RawAllocation, RawRange};
use gpuport::dynamic::runtime::{self, StreamChoice};
use gpuport::dynamic::{keep, new_owned, AnyArray, AnyStream, DType};
use gpuport::{builtin, AnyDevice, BackendKind, Error, KernelArgs, LaunchConfig, Location, Transfer};

/// A one-rank communicator on `spec`, or a printed skip.
fn one_rank(spec: &str) -> Option<(AnyDevice, AnyCommunicator)> {
    let dev = common::open_or_skip(spec)?;
    // NCCL's own communicator init (ncclCommInitAll) asks cudaFuncGetAttributes
    // of kernels its build lacks for the GPU, which compute-sanitizer reports
    // (cudaErrorNoKernelImageForDevice; seen on an H200 with NCCL 2.28): not
    // gpuport's calls, but they fail `ci/gpu-sanitize`. The plain run covers these tests.
    if dev.backend() == BackendKind::Cuda
        && common::provokes_driver_errors(dev.backend(), "NCCL's own init errors (cudaFuncGetAttributes)")
    {
        return None;
    }
    match AnyCommunicator::init_all(std::slice::from_ref(&dev), CallMode::Blocking) {
        Ok(mut comms) => Some((dev, comms.remove(0))),
        Err(e) => {
            let name = std::thread::current().name().unwrap_or("?").to_string();
            let _ = writeln!(std::io::stderr(), "skipped: {name} on {spec}: no collective engine: {e}");
            None
        }
    }
}

fn all_reduce(count: usize) -> Op {
    Op { kind: OpKind::AllReduce(ReduceOp::Sum), dtype: DType::Float32, count }
}

/// An owned float32 array of `n` elements on `dev`, every one `value`
/// (the host copy current).
fn array(dev: &AnyDevice, n: usize, value: f32) -> AnyArray {
    let mut a = AnyArray::Owned(new_owned(dev, DType::Float32, &[n]).unwrap());
    a.fill_bytes(&value.to_ne_bytes(), None).unwrap();
    a
}

/// The elements of an owned float32 array, through its host copy.
fn values(a: &mut AnyArray) -> Vec<f32> {
    let AnyArray::Owned(a) = a else { panic!("an owned array") };
    let s = AnyStream::default_for(&a.device());
    a.move_to(Location::Host, &s, Transfer::Sync, None).unwrap();
    let n = a.shape().iter().product::<usize>();
    let (ptr, keep) = a.parts(Location::Host, None).unwrap();
    // SAFETY: `ptr` is the current host copy of `n` float32 elements, kept
    // alive by `keep`; the synchronous move above finished every write.
    let v = unsafe { std::slice::from_raw_parts(ptr as usize as *const f32, n) }.to_vec();
    drop(keep);
    v
}

/// A writable range over all of a raw allocation.
fn whole(a: &RawAllocation) -> RawRange {
    // SAFETY: every caller keeps `a` until the work given the range has run
    // (it waits, or `a` is among the owners it keeps).
    unsafe { RawRange::new(a.ptr(), a.place(), Some(a.len()), None, true) }
}

/// A raw allocation of `n` float32 elements on `dev`, every one `value`.
fn raw_floats(dev: &AnyDevice, n: usize, value: f32) -> Arc<RawAllocation> {
    let a = raw::alloc(dev, gpuport::MemoryKind::Device, n * 4).unwrap();
    let mut bytes: Vec<u8> = std::iter::repeat_n(value.to_ne_bytes(), n).flatten().collect();
    // SAFETY: `bytes` outlives the synchronous copy below.
    let src = unsafe { RawRange::new(bytes.as_mut_ptr() as u64, Place::Host, Some(bytes.len()), None, false) };
    runtime::memcpy(&whole(&a), &src, n * 4, None, StreamChoice::Default, true).unwrap().keep(()).unwrap();
    a
}

/// The float32 elements of a raw allocation.
fn raw_values(a: &RawAllocation) -> Vec<f32> {
    let mut out = vec![0u8; a.len()];
    // SAFETY: `out` outlives the synchronous copy below.
    let dst = unsafe { RawRange::new(out.as_mut_ptr() as u64, Place::Host, Some(out.len()), None, true) };
    runtime::memcpy(&dst, &whole(a), a.len(), None, StreamChoice::Default, true).unwrap().keep(()).unwrap();
    out.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect()
}

/// Work that takes `ms` milliseconds on `s` (the built-in sleep kernel).
fn busy(s: &AnyStream, ms: u64) {
    let dev = s.device();
    let m = gpuport::dynamic::AnyModule::load(&dev, &gpuport::dynamic::Code::Builtin, "builtins", &[]).unwrap();
    let sleep = m.kernel(builtin::SLEEP_NS).unwrap();
    let mut args = KernelArgs::new();
    args.push(&(ms * 1_000_000));
    // SAFETY: the sleep kernel takes one u64 and touches no memory.
    unsafe { sleep.launch(LaunchConfig::linear(1, 1), &args, s) }.unwrap();
}

fn is_argument(e: &Error, f: impl Fn(&ArgumentError) -> bool) -> bool {
    matches!(e, Error::CollectiveArgument(a) if f(a))
}

// ---- the collective's name, reduction, root and peer ------------------------------------

#[test]
fn each_collective_takes_the_root_peer_or_reduction_it_has() {
    let kind = |name, op| OpKind::from_name(name, op, 1, 2);
    assert_eq!(kind("all_reduce", "avg").unwrap(), OpKind::AllReduce(ReduceOp::Avg));
    assert_eq!(kind("reduce", "min").unwrap(), OpKind::Reduce { op: ReduceOp::Min, root: 1 });
    assert_eq!(kind("broadcast", "sum").unwrap(), OpKind::Broadcast { root: 1 });
    assert_eq!(kind("reduce_scatter", "prod").unwrap(), OpKind::ReduceScatter(ReduceOp::Prod));
    assert_eq!(kind("all_gather", "sum").unwrap(), OpKind::AllGather);
    assert_eq!(kind("send", "sum").unwrap(), OpKind::Send { peer: 2 });
    assert_eq!(kind("recv", "sum").unwrap(), OpKind::Recv { peer: 2 });
    // A reduction is read only where the collective has one.
    for name in ["broadcast", "all_gather", "send", "recv"] {
        assert!(kind(name, "mean").is_ok(), "{name} read the reduction");
    }
    for name in ["all_reduce", "reduce", "reduce_scatter"] {
        let e = kind(name, "mean").unwrap_err();
        assert!(is_argument(&e, |a| matches!(a, ArgumentError::UnknownReduction(op) if op == "mean")), "{e}");
        assert_eq!(e.python_message(None), "op \"mean\": use \"sum\", \"prod\", \"max\", \"min\" or \"avg\"");
    }
    let e = kind("scan", "sum").unwrap_err();
    assert!(is_argument(&e, |a| matches!(a, ArgumentError::UnknownCollective(_))), "{e}");
    assert!(e.to_string().contains("use all_reduce, broadcast"), "{e}");
}

#[test]
fn argument_errors_are_value_errors_worded_for_python_in_the_error_layer() {
    use gpuport::error::python::ExceptionClass;
    let e: Error = ArgumentError::HostMemory { what: "send", device: "cuda:0".into() }.into();
    assert_eq!(e.python_class(), ExceptionClass::InvalidArgument);
    assert_eq!(e.python_class().builtin(), "ValueError");
    assert_eq!(
        e.python_message(Some("all_reduce")),
        "send is host memory; a cuda:0 communicator needs memory of its device: move the array there first \
         (a MemArray of cuda:0: move_memory(\"device\"))"
    );
    assert_eq!(e.to_string(), "send is host memory; a cuda:0 communicator needs memory of its device");
    let e: Error = ArgumentError::NotHeld { what: "recv" }.into();
    assert_eq!(
        e.python_message(None),
        "recv: the host communicator reads and writes host memory it can check; pass the array or buffer object (a \
         raw address is not dereferenced)"
    );
    // The others keep their `Display` text, which names no Rust.
    let e: Error = ArgumentError::ReadOnly { op: "all_reduce(sum) of 4 float32".into(), what: "recv" }.into();
    assert_eq!(e.python_message(None), "all_reduce(sum) of 4 float32: recv is read-only");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_root_or_peer_that_is_not_a_rank_is_refused(#[case] spec: &str) {
    let Some((dev, comm)) = one_rank(spec) else { return };
    let x = raw_floats(&dev, 4, 1.0);
    for (kind, what) in [(OpKind::Broadcast { root: 3 }, "root"), (OpKind::Send { peer: 0 }, "peer")] {
        let op = Op { kind, dtype: DType::Float32, count: 4 };
        let e = comm
            .collective(&op, Operands::in_place(Operand::Raw(whole(&x))), &StreamChoice::Default)
            .err()
            .expect("not a rank");
        assert!(matches!(e, Error::InvalidArgument { name, .. } if name == what), "{e}");
    }
}

// ---- in place, and arrays ---------------------------------------------------------------

#[test]
fn an_array_in_place_is_read_and_written_once_per_rank() {
    let dev = gpuport::open("host").unwrap();
    let comms = AnyCommunicator::init_all(&[dev.clone(), dev.clone()], CallMode::Bounded).unwrap();
    let (mut a, mut b) = (array(&dev, 3, 1.0), array(&dev, 3, 10.0));
    AnyCommunicator::group(BackendKind::Host, || {
        for (comm, x) in comms.iter().zip([&mut a, &mut b]) {
            let (e, captured) =
                comm.collective(&all_reduce(3), Operands::in_place(Operand::Array(x)), &StreamChoice::Default)?;
            assert!(captured.send.is_none() && captured.recv.is_none(), "nothing captured");
            e.keep(())?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(values(&mut a), [11.0; 3], "rank 0's array");
    assert_eq!(values(&mut b), [11.0; 3], "rank 1's array");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_collective_on_arrays_makes_the_written_device_copy_current(#[case] spec: &str) {
    let Some((dev, comm)) = one_rank(spec) else { return };
    // In place: the one array is written, so only its device copy is current.
    let mut x = array(&dev, 4, 2.5);
    let (e, _) =
        comm.collective(&all_reduce(4), Operands::in_place(Operand::Array(&mut x)), &StreamChoice::Default).unwrap();
    e.keep(()).unwrap();
    let AnyArray::Owned(owned) = &x else { unreachable!() };
    assert_eq!(owned.residency(), Residency::Device, "the in-place collective's write was not recorded");
    assert_eq!(values(&mut x), [2.5; 4]);
    // Two arrays: the send one is read (both copies stay current), the receive one written.
    let (mut send, mut recv) = (array(&dev, 4, 7.0), array(&dev, 4, 0.0));
    let op = Op { kind: OpKind::AllGather, dtype: DType::Float32, count: 4 };
    let operands = Operands::new(Operand::Array(&mut send), Operand::Array(&mut recv));
    comm.collective(&op, operands, &StreamChoice::Default).unwrap().0.keep(()).unwrap();
    assert_eq!(values(&mut recv), [7.0; 4], "the receive array");
    let AnyArray::Owned(owned) = &send else { unreachable!() };
    assert_eq!(owned.residency(), Residency::Both, "the send array was marked written");
    // An array and a raw range, either way round.
    let out = raw_floats(&dev, 4, 0.0);
    let operands = Operands::new(Operand::Array(&mut send), Operand::Raw(whole(&out)));
    comm.collective(&all_reduce(4), operands, &StreamChoice::Default).unwrap().0.keep(out.clone()).unwrap();
    assert_eq!(raw_values(&out), [7.0; 4]);
    let (src, mut dst) = (raw_floats(&dev, 4, 3.0), array(&dev, 4, 0.0));
    let operands = Operands::new(Operand::Raw(whole(&src)), Operand::Array(&mut dst));
    comm.collective(&all_reduce(4), operands, &StreamChoice::Default).unwrap().0.keep(src.clone()).unwrap();
    assert_eq!(values(&mut dst), [3.0; 4]);
}

// ---- keeping the owners -----------------------------------------------------------------

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn the_owners_are_kept_until_the_stream_has_run_the_collective(#[case] spec: &str) {
    let Some((dev, comm)) = one_rank(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let (x, y) = (raw_floats(&dev, 1 << 16, 1.0), raw_floats(&dev, 1 << 16, 0.0));
    let owner = Arc::new(());
    busy(&s, 300);
    let operands = Operands::new(Operand::Raw(whole(&x)), Operand::Raw(whole(&y)));
    let (e, _) = comm.collective(&all_reduce(1 << 16), operands, &StreamChoice::stream(s.clone())).unwrap();
    assert!(e.stream().is_some(), "a collective leaves work on its stream");
    e.keep((x.clone(), y.clone(), owner.clone())).unwrap();
    assert_eq!(Arc::strong_count(&owner), 2, "the owners were dropped, not kept");
    keep::prune();
    if dev.backend() != BackendKind::Host {
        // A GPU engine enqueues behind the sleep: the collective has not run.
        assert_eq!(Arc::strong_count(&owner), 2, "the owners went before the collective ran");
    }
    comm.synchronize(&s).unwrap();
    keep::prune();
    assert_eq!(Arc::strong_count(&owner), 1, "the owners outlived the collective");
    assert_eq!(raw_values(&y)[..4], [1.0; 4]);
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn inside_a_group_the_owners_are_kept_from_the_groups_end_on(#[case] spec: &str) {
    let Some((dev, comm)) = one_rank(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let x = raw_floats(&dev, 64, 4.0);
    let owner = Arc::new(());
    AnyCommunicator::group(dev.backend(), || {
        let operands = Operands::in_place(Operand::Raw(whole(&x)));
        let (e, _) = comm.collective(&all_reduce(64), operands, &StreamChoice::stream(s.clone()))?;
        e.keep((x.clone(), owner.clone()))?;
        // The engine enqueues the call at the group's end: a marker recorded
        // now would complete at once on the idle stream.
        s.synchronize()?;
        keep::prune();
        assert_eq!(Arc::strong_count(&owner), 2, "the owners went before the group enqueued the collective");
        Ok(())
    })
    .unwrap();
    comm.synchronize(&s).unwrap();
    keep::prune();
    assert_eq!(Arc::strong_count(&owner), 1, "the owners outlived the group's work");
    assert_eq!(raw_values(&x), [4.0; 64]);
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn an_imported_arrays_memory_is_kept_until_the_collective_has_run(#[case] spec: &str) {
    use gpuport::dynamic::{ImportedArray, RawImport, Shape, Strides};
    let Some((dev, comm)) = one_rank(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let x = raw_floats(&dev, 1 << 16, 2.0);
    let keeper: Arc<RawAllocation> = x.clone();
    let desc = RawImport {
        dtype: DType::Float32,
        shape: Shape::from_slice(&[1 << 16]),
        strides: Strides::from_slice(&[1]),
        data: x.ptr(),
        dl: gpuport::dlpack::dl_device(dev.backend(), gpuport::MemoryKind::Device, dev.info().ordinal),
        read_only: false,
        device: dev.clone(),
    };
    drop(x);
    // SAFETY: `keeper` holds the allocation, which holds the 65536 float32s.
    let mut import = AnyArray::Imported(unsafe { ImportedArray::from_raw(desc, keeper.clone()) }.unwrap());
    busy(&s, 300);
    let (e, _) = comm
        .collective(
            &all_reduce(1 << 16),
            Operands::in_place(Operand::Array(&mut import)),
            &StreamChoice::stream(s.clone()),
        )
        .unwrap();
    // The caller drops the import and hands over nothing: the call keeps the memory itself.
    drop((e, import));
    assert!(Arc::strong_count(&keeper) > 1, "the import's memory was let go before the collective ran");
    comm.synchronize(&s).unwrap();
    keep::prune();
    assert_eq!(Arc::strong_count(&keeper), 1, "the import's memory outlived the collective");
    assert_eq!(raw_values(&keeper)[..4], [2.0; 4]);
}

// ---- what the engine cannot use ---------------------------------------------------------

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn buffers_the_collective_cannot_use_are_refused_before_it_runs(#[case] spec: &str) {
    let Some((dev, comm)) = one_rank(spec) else { return };
    let call = |op: &Op, operands: Operands<'_>| {
        comm.collective(op, operands, &StreamChoice::Default).err().expect("a refused collective")
    };
    let x = raw_floats(&dev, 4, 1.0);
    let y = raw_floats(&dev, 4, 5.0);
    // A missing side.
    let e = call(&all_reduce(4), Operands::new(Operand::Raw(whole(&x)), Operand::None));
    assert!(is_argument(&e, |a| matches!(a, ArgumentError::Missing { what: "recv", elems: 4, .. })), "{e}");
    // More bytes than a range or an array holds.
    let e = call(&all_reduce(5), Operands::new(Operand::Raw(whole(&x)), Operand::Raw(whole(&y))));
    assert!(matches!(e, Error::InvalidArgument { name: "send", .. }), "{e}");
    let mut small = array(&dev, 2, 0.0);
    let e = call(&all_reduce(4), Operands::new(Operand::Raw(whole(&x)), Operand::Array(&mut small)));
    assert!(is_argument(&e, |a| matches!(a, ArgumentError::TooSmall { what: "recv", have: 8, need: 16, .. })), "{e}");
    assert_eq!(e.python_message(None), "all_reduce(sum) of 4 float32: recv holds 8 bytes, and the collective needs 16");
    let e = call(&all_reduce(usize::MAX), Operands::in_place(Operand::Raw(whole(&x))));
    assert!(is_argument(&e, |a| matches!(a, ArgumentError::TooManyElements { .. })), "{e}");
    // A read-only receive side is not written.
    // SAFETY: `y` outlives the refused call.
    let read_only = unsafe { RawRange::new(y.ptr(), y.place(), Some(y.len()), None, false) };
    let e = call(&all_reduce(4), Operands::new(Operand::Raw(whole(&x)), Operand::Raw(read_only)));
    assert!(is_argument(&e, |a| matches!(a, ArgumentError::ReadOnly { what: "recv", .. })), "{e}");
    assert_eq!(raw_values(&y), [5.0; 4], "a refused collective wrote");
    // Memory the engine cannot reach.
    let mut host_bytes = [0u8; 16];
    // SAFETY: refused before anything reads or writes it.
    let host = unsafe { RawRange::new(host_bytes.as_mut_ptr() as u64, Place::Host, Some(16), None, true) };
    // SAFETY: a bare address, refused before anything dereferences it.
    let bare = unsafe { RawRange::new(x.ptr(), Place::Unknown, None, None, true) };
    if dev.backend() == BackendKind::Host {
        let e = call(&all_reduce(4), Operands::new(Operand::Raw(whole(&x)), Operand::Raw(bare)));
        assert!(is_argument(&e, |a| matches!(a, ArgumentError::NotHeld { what: "recv" })), "{e}");
        assert!(e.python_message(None).contains("pass the array or buffer object"), "{e}");
    } else {
        let e = call(&all_reduce(4), Operands::new(Operand::Raw(host), Operand::Raw(whole(&y))));
        assert!(is_argument(&e, |a| matches!(a, ArgumentError::HostMemory { what: "send", .. })), "{e}");
        assert!(e.python_message(None).contains("move the array there first"), "{e}");
        // An array or a stream of another device.
        let mut on_host = array(&gpuport::open("host").unwrap(), 4, 0.0);
        let e = call(&all_reduce(4), Operands::in_place(Operand::Array(&mut on_host)));
        assert!(matches!(e, Error::DeviceMismatch { what: "send", .. }), "{e}");
        let host_stream = StreamChoice::stream(AnyStream::default_for(&gpuport::open("host").unwrap()));
        let e = comm
            .collective(&all_reduce(4), Operands::in_place(Operand::Raw(whole(&y))), &host_stream)
            .err()
            .expect("a stream of another device");
        assert!(matches!(e, Error::DeviceMismatch { what: "stream", .. }), "{e}");
    }
    assert_eq!(host_bytes, [0u8; 16]);
    assert_eq!(raw_values(&y), [5.0; 4], "a refused collective wrote");
}

// ---- captures ---------------------------------------------------------------------------

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_captured_collective_hands_back_the_array_copies_its_replays_use(#[case] spec: &str) {
    let Some((dev, comm)) = one_rank(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let (mut send, mut recv) = (array(&dev, 8, 1.0), array(&dev, 8, 0.0));
    for a in [&mut send, &mut recv] {
        let AnyArray::Owned(o) = a else { unreachable!() };
        o.move_to(Location::Device, &s, Transfer::Sync, None).unwrap();
    }
    let mut capture = s.begin_capture(gpuport::CaptureMode::Relaxed).unwrap();
    let operands = Operands::new(Operand::Array(&mut send), Operand::Array(&mut recv));
    let called = comm.collective(&all_reduce(8), operands, &StreamChoice::stream(s.clone()));
    match dev.backend() {
        BackendKind::Host => {
            // The host engine runs on the calling thread: nothing to capture.
            let e = called.err().expect("the host engine refuses a capture");
            assert!(matches!(e, Error::Graph { .. }), "{e}");
        }
        _ => {
            let (e, captured) = called.unwrap();
            assert!(captured.send.is_some() && captured.recv.is_some(), "the graph's array copies");
            e.keep(()).unwrap();
        }
    }
    capture.end().expect("the capture is still valid");
}

// ---- a binding's objects (Sides) and groups (group_with) -----------------------------------

#[test]
fn one_object_as_both_sides_is_one_operand_in_place_and_two_objects_are_two() {
    use gpuport::collective::Sides;
    let dev = gpuport::open("host").unwrap();
    let comms = AnyCommunicator::init_all(&[dev.clone(), dev.clone()], CallMode::Bounded).unwrap();
    let (mut a, mut b, mut c) = (array(&dev, 3, 1.0), array(&dev, 3, 10.0), array(&dev, 3, 0.0));
    // Rank 0 passes `a` as both sides; rank 1 passes `b` and a separate `c`
    // (objects named, and compared by name as Python's `is` compares them).
    let rank0 = Sides::of(Some("a"), Some("a"), |x, y| x == y);
    let rank1 = Sides::of(Some("b"), Some("c"), |x, y| x == y);
    assert!(rank0.is_in_place() && !rank1.is_in_place());
    let mut objects = std::collections::HashMap::from([("a", &mut a), ("b", &mut b), ("c", &mut c)]);
    AnyCommunicator::group(BackendKind::Host, || {
        // Each object is converted (and entered) once: a second take would find it gone.
        let mut take = |name| Operand::Array(objects.remove(name).expect("converted once"));
        let operands = [Operands::from(rank0.map(&mut take)), Operands::from(rank1.map(&mut take))];
        for (comm, operands) in comms.iter().zip(operands) {
            comm.collective(&all_reduce(3), operands, &StreamChoice::Default)?.0.keep(())?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(values(&mut a), [11.0; 3], "in place: read and written");
    assert_eq!((values(&mut b), values(&mut c)), (vec![10.0; 3], vec![11.0; 3]), "apart: b read, c written");
    let absent = Sides::of(Some(1), None, |_, _| true);
    assert_eq!((absent.send(), absent.recv()), (Some(&1), None));
    assert_eq!(absent.into_vec(), [1]);
}

#[test]
fn a_groups_body_error_is_reported_before_its_ends() {
    use gpuport::collective::GroupFailure;
    let dev = gpuport::open("host").unwrap();
    // Two ranks of which only rank 0 calls: the group's end waits for rank 1, in vain.
    let unmatched = || {
        let mut comms = AnyCommunicator::init_all(&[dev.clone(), dev.clone()], CallMode::Bounded).unwrap();
        comms[0].set_timeout(std::time::Duration::from_millis(200)).unwrap();
        (comms, array(&dev, 3, 1.0))
    };
    let (comms, mut x) = unmatched();
    let ended = AnyCommunicator::group_with(BackendKind::Host, || {
        let operands = Operands::in_place(Operand::Array(&mut x));
        comms[0].collective(&all_reduce(3), operands, &StreamChoice::Default)?.0.keep(())
    });
    let Err(GroupFailure::End(e)) = ended else { panic!("the end fails: rank 1 never joins") };
    assert!(matches!(e, Error::Store { .. } | Error::Collective { .. }), "{e}");
    let (comms, mut x) = unmatched();
    let ended = AnyCommunicator::group_with(BackendKind::Host, || {
        let operands = Operands::in_place(Operand::Array(&mut x));
        comms[0].collective(&all_reduce(3), operands, &StreamChoice::Default).unwrap().0.keep(()).unwrap();
        Err::<(), _>("the body raised")
    });
    assert!(matches!(ended, Err(GroupFailure::Body("the body raised"))), "the body's error comes first");
}

/// A range registered with one communicator (`register_range`, for
/// bindings) is released by that one; another refuses it. A bare address
/// has no size to register, and a GPU engine refuses host memory.
#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_registered_range_is_released_by_the_communicator_that_made_it(#[case] spec: &str) {
    let Some((dev, comm)) = one_rank(spec) else { return };
    let (_, other) = one_rank(spec).expect("a second communicator where the first was made");
    let a = raw_floats(&dev, 16, 1.0);
    // SAFETY: `a` outlives the registrations (each is released below, or
    // left to `comm`, which is dropped before `a`).
    let r = unsafe { comm.register_range(&whole(&a)) }.unwrap();
    assert_eq!(r.bytes(), 64);
    let e = other.deregister(r).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "registration", .. }), "{e}");
    // SAFETY: as above.
    let r = unsafe { comm.register_range(&whole(&a)) }.unwrap();
    comm.deregister(r).unwrap();
    // SAFETY: a bare address is refused before it is used.
    let bare = unsafe { RawRange::new(a.ptr(), Place::Unknown, None, None, true) };
    // SAFETY: as above.
    let e = unsafe { comm.register_range(&bare) }.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "memory", .. }), "{e}");
    if dev.backend() != BackendKind::Host {
        let mut host = vec![0u8; 64];
        // SAFETY: `host` outlives the call, which refuses it.
        let range = unsafe { RawRange::new(host.as_mut_ptr() as u64, Place::Host, Some(64), None, true) };
        // SAFETY: as above.
        let e = unsafe { comm.register_range(&range) }.unwrap_err();
        assert!(is_argument(&e, |a| matches!(a, ArgumentError::HostMemory { .. })), "{e}");
    }
    drop((comm, other));
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_given_object_is_an_entered_array_or_its_memory_and_keeps_what_owns_it(#[case] spec: &str) {
    use gpuport::collective::Given;
    let Some(dev) = common::open_or_skip(spec) else { return };
    let mut a = array(&dev, 4, 1.0);
    let raw = raw_floats(&dev, 4, 2.0);
    let (as_array, as_raw) =
        (Given::<&str, Arc<RawAllocation>>::Array("array object"), Given::<&str, _>::Raw(raw.clone()));
    assert_eq!(as_array.array(), Some(&"array object"));
    assert!(as_raw.array().is_none(), "memory has no state to enter");
    assert!(matches!(as_array.operand(Some(&mut a), |r| whole(r)), Operand::Array(_)));
    assert!(matches!(as_array.operand(None, |r| whole(r)), Operand::None), "an array not entered");
    match as_raw.operand(None, |r| whole(r)) {
        Operand::Raw(r) => assert_eq!(r.addr(), whole(&raw).addr()),
        _ => panic!("memory is a raw operand"),
    }
    // Kept: the memory itself, or what the binding makes of the array object.
    assert!(Arc::ptr_eq(&as_raw.into_kept(|_| unreachable!()), &raw));
    let kept = as_array.into_kept(|object| {
        assert_eq!(object, "array object");
        raw.clone()
    });
    assert!(Arc::ptr_eq(&kept, &raw));
}
