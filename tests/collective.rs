//! Communicators and collectives (src/collective), two ranks per test:
//! on the host backend (both ranks on host:0, in CI), and on cuda:0 +
//! cuda:1 and rocm:0 + rocm:1 where two such devices exist (the ROCm pair
//! through the HIP-on-CUDA shim, with `GPUPORT_RCCL_LIBRARY` pointing at
//! NCCL). A GPU case without two devices skips with a printed reason.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuport::collective::{CallMode, CollectiveBackend, Communicator, Op, OpKind, ReduceOp, TcpStore};
use gpuport::dynamic::DType;
use gpuport::{CollectiveErrorKind, Device, Error, MemArray, StoreErrorKind};

mod common;

/// Two devices of `spec0`'s backend, or a printed skip.
fn pair(spec0: &str, spec1: &str) -> Option<[gpuport::AnyDevice; 2]> {
    let a = common::open_or_skip(spec0)?;
    let b = common::open_or_skip(spec1)?;
    Some([a, b])
}

macro_rules! pair_tests {
    ($($name:ident),* $(,)?) => { $(
        #[rstest::rstest]
        #[case::host("host", "host")]
        #[case::cuda("cuda:0", "cuda:1")]
        #[case::rocm("rocm:0", "rocm:1")]
        fn $name(#[case] spec0: &str, #[case] spec1: &str) {
            let Some([a, b]) = pair(spec0, spec1) else { return };
            gpuport::on_backend!((&a, &b), (a, b) => {
                if super::common::engine_or_skip(a, stringify!($name)) {
                    super::$name([a.clone(), b.clone()])
                }
            }, else => unreachable!("a pair of one backend"))
        }
    )* };
}

/// Runs `body(rank, communicator)` on two threads, one rank each, joined
/// through a store on a free loopback port; returns both results.
fn two_ranks<D, R>(
    devs: &[Arc<D>; 2],
    store_timeout: Duration,
    body: impl Fn(usize, Communicator<D::B>) -> R + Sync,
) -> [R; 2]
where
    D: Device,
    D::B: CollectiveBackend,
    R: Send,
{
    two_ranks_in(CallMode::Blocking, devs, store_timeout, body)
}

/// [`two_ranks`] with communicators whose library calls wait in `mode`.
fn two_ranks_in<D, R>(
    mode: CallMode,
    devs: &[Arc<D>; 2],
    store_timeout: Duration,
    body: impl Fn(usize, Communicator<D::B>) -> R + Sync,
) -> [R; 2]
where
    D: Device,
    D::B: CollectiveBackend,
    R: Send,
{
    let host = TcpStore::host("127.0.0.1:0".parse().unwrap(), store_timeout).unwrap();
    let addr = host.addr();
    std::thread::scope(|s| {
        let body = &body;
        let other = s.spawn(move || {
            let store = TcpStore::connect(addr, store_timeout).unwrap();
            let comm = Communicator::<D::B>::init_rank_with(&devs[1], 1, 2, &store, mode).unwrap();
            body(1, comm)
        });
        let comm = Communicator::<D::B>::init_rank_with(&devs[0], 0, 2, &host, mode).unwrap();
        let mine = body(0, comm);
        [mine, other.join().unwrap()]
    })
}

/// The array's elements, read on the host.
fn read<T: gpuport::Element, const N: usize, D: Device>(a: &mut MemArray<T, N, D>) -> Vec<T> {
    a.move_to(gpuport::Location::Host, a.device().clone().default_stream(), gpuport::Transfer::Sync, None).unwrap();
    a.to_vec(None).unwrap()
}

fn is_collective(e: &Error, want: CollectiveErrorKind) -> bool {
    matches!(e, Error::Collective { kind, .. } if *kind == want)
}

fn every_collective_gives_the_right_values<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    two_ranks(&devs, Duration::from_secs(60), |rank, comm| {
        let d = comm.device().clone();
        let s = d.default_stream();
        let r = rank as f32;
        // all_reduce: sum, avg, max on f32; prod on i32.
        let mut a = MemArray::<f32, 1, D>::from_vec(&d, [4], vec![1.0 + r, 2.0 + r, 3.0 + r, 4.0 + r]).unwrap();
        comm.all_reduce_array(&mut a, ReduceOp::Sum, s).unwrap();
        assert_eq!(read(&mut a), vec![3.0, 5.0, 7.0, 9.0], "sum on rank {rank}");
        comm.all_reduce_array(&mut a, ReduceOp::Avg, s).unwrap();
        assert_eq!(read(&mut a), vec![3.0, 5.0, 7.0, 9.0], "avg of equal values on rank {rank}");
        let mut m = MemArray::<f32, 1, D>::from_vec(&d, [2], vec![r, -r]).unwrap();
        comm.all_reduce_array(&mut m, ReduceOp::Max, s).unwrap();
        assert_eq!(read(&mut m), vec![1.0, 0.0]);
        let mut p = MemArray::<i32, 1, D>::from_vec(&d, [3], vec![2 + rank as i32, 3, -1]).unwrap();
        comm.all_reduce_array(&mut p, ReduceOp::Prod, s).unwrap();
        assert_eq!(read(&mut p), vec![6, 9, 1]);
        // broadcast from rank 1; reduce to rank 0.
        let mut b = MemArray::<u8, 1, D>::from_vec(&d, [3], vec![rank as u8 * 10; 3]).unwrap();
        comm.broadcast_array(&mut b, 1, s).unwrap();
        assert_eq!(read(&mut b), vec![10, 10, 10]);
        let mut red = MemArray::<f64, 1, D>::from_vec(&d, [2], vec![1.5, rank as f64]).unwrap();
        comm.reduce_array(&mut red, ReduceOp::Sum, 0, s).unwrap();
        let want = if rank == 0 { vec![3.0, 1.0] } else { vec![1.5, 1.0] };
        assert_eq!(read(&mut red), want, "reduce to rank 0, seen on rank {rank}");
        // all_gather and reduce_scatter, of 2-D arrays.
        let mut part = MemArray::<i64, 2, D>::from_vec(&d, [1, 2], vec![rank as i64, 100 + rank as i64]).unwrap();
        let mut whole = MemArray::<i64, 2, D>::zeros(&d, [2, 2]).unwrap();
        comm.all_gather_array(&mut part, &mut whole, s).unwrap();
        assert_eq!(read(&mut whole), vec![0, 100, 1, 101]);
        let mut mine = MemArray::<i64, 1, D>::zeros(&d, [2]).unwrap();
        comm.reduce_scatter_array(&mut whole, &mut mine, ReduceOp::Sum, s).unwrap();
        let want = if rank == 0 { vec![0, 200] } else { vec![2, 202] };
        assert_eq!(read(&mut mine), want);
        // a ring step: each sends its rank and receives the other's.
        let mut out = MemArray::<u32, 1, D>::from_vec(&d, [5], vec![rank as u32; 5]).unwrap();
        let mut got = MemArray::<u32, 1, D>::zeros(&d, [5]).unwrap();
        let peer = 1 - rank;
        comm.send_recv_array(&mut out, peer, &mut got, peer, s).unwrap();
        assert_eq!(read(&mut got), vec![peer as u32; 5]);
        // A type no engine reduces still moves.
        let mut c =
            MemArray::<num_complex::Complex<f32>, 1, D>::from_vec(&d, [1], vec![num_complex::Complex::new(r, 1.0)])
                .unwrap();
        let e = comm.all_reduce_array(&mut c, ReduceOp::Sum, s).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "dtype", .. }), "{e}");
        comm.broadcast_array(&mut c, 0, s).unwrap();
        assert_eq!(read(&mut c), vec![num_complex::Complex::new(0.0, 1.0)]);
    });
}

fn one_process_drives_both_ranks_in_a_group<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    let comms = Communicator::<D::B>::init_all(&devs).unwrap();
    assert_eq!((comms[0].rank(), comms[1].rank(), comms[1].size()), (0, 1, 2));
    let mut a = MemArray::<f32, 1, D>::from_vec(&devs[0], [1 << 16], vec![1.0; 1 << 16]).unwrap();
    let mut b = MemArray::<f32, 1, D>::from_vec(&devs[1], [1 << 16], vec![2.0; 1 << 16]).unwrap();
    let streams = [devs[0].default_stream(), devs[1].default_stream()];
    Communicator::all_reduce_arrays(&comms, &mut [&mut a, &mut b], ReduceOp::Sum, &streams).unwrap();
    assert!(read(&mut a).iter().chain(&read(&mut b)).all(|&x| x == 3.0));
    // Array collectives refuse to run inside a user's group.
    let e = Communicator::<D::B>::group(|| comms[0].all_reduce_array(&mut a, ReduceOp::Sum, streams[0])).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "group", .. }), "{e}");
    // The unsafe buffer path, grouped by hand.
    let mut bufs = [devs[0].alloc(16).unwrap(), devs[1].alloc(16).unwrap()];
    for (i, (d, b)) in devs.iter().zip(&mut bufs).enumerate() {
        d.copy_to_device(&[i as u8 + 1; 16], b, 0).unwrap();
    }
    let op = Op { kind: OpKind::AllReduce(ReduceOp::Max), dtype: DType::UInt8, count: 16 };
    Communicator::<D::B>::group(|| {
        for (i, c) in comms.iter().enumerate() {
            // SAFETY: the buffers live to the end of the test, after the synchronize below.
            unsafe { c.enqueue(&op, &bufs[i], &bufs[i], streams[i])? };
        }
        Ok(())
    })
    .unwrap();
    for (i, c) in comms.iter().enumerate() {
        c.synchronize(streams[i]).unwrap();
        let mut out = [0u8; 16];
        devs[i].copy_to_host(&bufs[i], 0, &mut out).unwrap();
        assert_eq!(out, [2u8; 16], "rank {i}");
    }
}

fn registered_memory_runs_collectives_and_another_devices_is_refused<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    let comms = Communicator::<D::B>::init_all(&devs).unwrap();
    let mut bufs = [devs[0].alloc(1 << 20).unwrap(), devs[1].alloc(1 << 20).unwrap()];
    for (i, (d, b)) in devs.iter().zip(&mut bufs).enumerate() {
        d.copy_to_device(&vec![i as u8 + 1; 1 << 20], b, 0).unwrap();
    }
    {
        let held: Vec<_> = comms.iter().zip(&bufs).map(|(c, b)| c.register(b).unwrap()).collect();
        let op = Op { kind: OpKind::AllReduce(ReduceOp::Sum), dtype: DType::UInt8, count: 1 << 20 };
        let streams = [devs[0].default_stream(), devs[1].default_stream()];
        Communicator::<D::B>::group(|| {
            for (i, c) in comms.iter().enumerate() {
                // SAFETY: the buffers live to the end of the test, after the synchronize below.
                unsafe { c.enqueue(&op, &bufs[i], &bufs[i], streams[i])? };
            }
            Ok(())
        })
        .unwrap();
        for (i, c) in comms.iter().enumerate() {
            c.synchronize(streams[i]).unwrap();
            let mut out = vec![0u8; 1 << 20];
            devs[i].copy_to_host(&bufs[i], 0, &mut out).unwrap();
            assert!(out.iter().all(|&x| x == 3), "rank {i}");
        }
        drop(held);
    }
    if devs[0].info().ordinal != devs[1].info().ordinal {
        let e = comms[0].register(&bufs[1]).unwrap_err();
        assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    }
}

fn mismatched_calls_are_errors_on_every_rank<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    let errors = two_ranks(&devs, Duration::from_secs(30), |rank, comm| {
        comm.set_checks(true).unwrap();
        let d = comm.device().clone();
        let n = if rank == 0 { 4 } else { 8 };
        let mut a = MemArray::<f32, 1, D>::zeros(&d, [n]).unwrap();
        let counts = comm.all_reduce_array(&mut a, ReduceOp::Sum, d.default_stream()).unwrap_err();
        let mut i = MemArray::<i32, 1, D>::zeros(&d, [4]).unwrap();
        let mut f = MemArray::<f32, 1, D>::zeros(&d, [4]).unwrap();
        let types = if rank == 0 {
            comm.all_reduce_array(&mut i, ReduceOp::Sum, d.default_stream()).unwrap_err()
        } else {
            comm.all_reduce_array(&mut f, ReduceOp::Sum, d.default_stream()).unwrap_err()
        };
        let roots = comm.broadcast_array(&mut f, rank, d.default_stream()).unwrap_err();
        // After the errors, matching calls still work.
        comm.all_reduce_array(&mut f, ReduceOp::Sum, d.default_stream()).unwrap();
        [counts, types, roots]
    });
    for (rank, errs) in errors.iter().enumerate() {
        for e in errs {
            assert!(is_collective(e, CollectiveErrorKind::Mismatch), "rank {rank}: {e}");
        }
        assert!(errs[0].to_string().contains("all_reduce(sum) of 8 float32"), "rank {rank}: {}", errs[0]);
        assert!(errs[1].to_string().contains("int32") && errs[1].to_string().contains("float32"), "{}", errs[1]);
    }
}

fn an_aborted_communicator_refuses_work<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    let comms = Communicator::<D::B>::init_all(&devs).unwrap();
    comms[0].abort().unwrap();
    assert!(comms[0].is_aborted() && !comms[1].is_aborted());
    let mut a = MemArray::<f32, 1, D>::zeros(&devs[0], [4]).unwrap();
    let e = comms[0].all_reduce_array(&mut a, ReduceOp::Sum, devs[0].default_stream()).unwrap_err();
    assert!(is_collective(&e, CollectiveErrorKind::Aborted), "{e}");
}

/// The sum over `comm`'s ranks of `[x, 2 x]`, read on the host.
fn sum_of<B: CollectiveBackend>(comm: &Communicator<B>, x: f32) -> Vec<f32> {
    let d = comm.device().clone();
    let mut a = MemArray::<f32, 1, _>::from_vec(&d, [2], vec![x, 2.0 * x]).unwrap();
    comm.all_reduce_array(&mut a, ReduceOp::Sum, d.default_stream()).unwrap();
    read(&mut a)
}

/// Split (over `ncclCommSplit` where the library has it) and shrink of a
/// healthy communicator (`ncclCommShrink`, NCCL 2.27) make communicators
/// that all-reduce the right values.
fn split_and_shrink_make_working_communicators<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    common::within(Duration::from_secs(120), move || {
        two_ranks(&devs, Duration::from_secs(60), |rank, comm| {
            let alone = comm.split(rank as i32, 0).unwrap().unwrap();
            assert_eq!((alone.rank(), alone.size()), (0, 1));
            assert_eq!(sum_of(&alone, 3.0), vec![3.0, 6.0]);
            let reversed = comm.split(7, -(rank as i32)).unwrap().unwrap();
            assert_eq!((reversed.rank(), reversed.size()), (1 - rank, 2));
            assert_eq!(sum_of(&reversed, 1.0 + rank as f32), vec![3.0, 6.0]);
            assert!(comm.split(-1, 0).unwrap().is_none());
            let same = comm.shrink(&[]).unwrap();
            assert_eq!((same.rank(), same.size()), (rank, 2));
            assert_eq!(sum_of(&same, 2.0), vec![4.0, 8.0]);
            // The parent goes on too.
            assert_eq!(sum_of(&comm, 1.0), vec![2.0, 4.0]);
        });
    });
}

/// Rank 1 leaves (aborts its communicator); rank 0 shrinks past it
/// (`ncclCommShrink` where the library has it) and all-reduces alone.
fn a_survivor_shrinks_past_a_rank_that_left<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    common::within(Duration::from_secs(120), move || {
        two_ranks(&devs, Duration::from_secs(60), |rank, comm| {
            assert_eq!(sum_of(&comm, 1.0), vec![2.0, 4.0]);
            if rank == 1 {
                comm.abort().unwrap();
                return;
            }
            let alone = comm.shrink(&[1]).unwrap();
            // The former communicator is done with (the host engine's rank 0
            // would otherwise wait, on drop, for rank 1 to leave it).
            comm.abort().unwrap();
            assert_eq!((alone.rank(), alone.size()), (0, 1));
            assert_eq!(sum_of(&alone, 5.0), vec![5.0, 10.0]);
        });
    });
}

fn a_rank_that_stops_calling_is_a_timeout_not_a_hang<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    let results = two_ranks(&devs, Duration::from_secs(3), |rank, mut comm| {
        comm.set_timeout(Duration::from_secs(3)).unwrap();
        let d = comm.device().clone();
        let mut a = MemArray::<f32, 1, D>::zeros(&d, [1024]).unwrap();
        // One collective together, then rank 1 dies: a dead process runs no
        // clean-up, so its communicator is aborted (freed without waiting
        // for peers), not destroyed.
        comm.all_reduce_array(&mut a, ReduceOp::Sum, d.default_stream()).unwrap();
        comm.synchronize(d.default_stream()).unwrap();
        if rank == 1 {
            comm.abort().unwrap();
            return None;
        }
        let start = std::time::Instant::now();
        let e = comm
            .all_reduce_array(&mut a, ReduceOp::Sum, d.default_stream())
            .and_then(|()| comm.synchronize(d.default_stream()));
        Some((e, start.elapsed(), comm.is_aborted()))
    });
    let (e, took, aborted) = results[0].as_ref().unwrap();
    let e = e.as_ref().unwrap_err();
    let typed = matches!(e, Error::Store { kind: StoreErrorKind::Timeout | StoreErrorKind::Closed, .. })
        || is_collective(e, CollectiveErrorKind::Timeout)
        || is_collective(e, CollectiveErrorKind::RemoteFailure);
    assert!(typed, "{e}");
    assert!(*took < Duration::from_secs(30), "took {took:?}");
    let _ = writeln!(std::io::stderr(), "a rank that stopped: {e} (aborted: {aborted}, after {took:?})");
}

/// Rank 0 of a 2-rank id whose rank 1 never calls `init_with_id`: a
/// timeout after the deadline, not a hang (NCCL's and RCCL's
/// initialisation waits for every rank; devs[1] is not used).
fn init_with_id_times_out_when_a_rank_never_comes<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    let limit = Duration::from_secs(3);
    let dev = devs[0].clone();
    let (e, took) = common::within(Duration::from_secs(120), move || {
        let id = Communicator::<D::B>::new_id(&dev).unwrap();
        let start = Instant::now();
        let e = Communicator::<D::B>::init_with_id_timeout(&dev, 0, 2, &id, limit).unwrap_err();
        (e, start.elapsed())
    });
    let _ = writeln!(std::io::stderr(), "a rank that never came: {e} (after {took:?})");
    if devs[0].info().backend == gpuport::BackendKind::Host {
        // The host engine meets the other ranks through the id's store.
        assert!(matches!(e, Error::Store { kind: StoreErrorKind::Timeout, .. }), "{e}");
    } else {
        assert!(matches!(&e, Error::Collective { kind: CollectiveErrorKind::Timeout, rank: Some(0), .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("3s") && text.contains("did not arrive"), "{text}");
    }
    assert!(took >= limit - Duration::from_millis(50), "gave up early: {took:?}");
    assert!(took < limit + Duration::from_secs(30), "took {took:?}");
}

/// Rank 1 fails once the ranks have met, a second after rank 0 went into
/// its library's initialisation (a `Bounded` communicator: NCCL's
/// non-blocking `ncclCommInitRankConfig`, src/collective/nccl/init.rs): rank 0 reads
/// the failure in the store while it waits there, aborts, and fails
/// within 2 s of it, naming rank 1 and its reason, though its store would
/// wait 120 s. The host engine meets inside its own store, where nothing
/// is polled: its case is skipped.
fn a_peer_failing_while_this_rank_waits_in_the_librarys_init_fails_it_fast<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    if devs[0].info().backend == gpuport::BackendKind::Host {
        let _ = writeln!(std::io::stderr(), "skipped: the host engine's init waits in its store, not in a library");
        return;
    }
    let pause = Duration::from_secs(1);
    let (e, took) = common::within(Duration::from_secs(120), move || {
        let timeout = Duration::from_secs(120);
        let host = TcpStore::host("127.0.0.1:0".parse().unwrap(), timeout).unwrap();
        let addr = host.addr();
        std::thread::scope(|s| {
            let d1 = devs[1].clone();
            let other = s.spawn(move || {
                let store = TcpStore::connect(addr, timeout).unwrap();
                gpuport::collective::fail_next_engine_init_on_this_thread("an injected failure", pause);
                Communicator::<D::B>::init_rank_with(&d1, 1, 2, &store, CallMode::Bounded).unwrap_err()
            });
            let start = Instant::now();
            let e = Communicator::<D::B>::init_rank_with(&devs[0], 0, 2, &host, CallMode::Bounded).unwrap_err();
            let took = start.elapsed();
            let theirs = other.join().unwrap();
            assert!(theirs.to_string().contains("an injected failure"), "{theirs}");
            (e, took)
        })
    });
    let _ = writeln!(std::io::stderr(), "rank 0 told of rank 1's failure: {e} (after {took:?})");
    assert!(matches!(&e, Error::Collective { kind: CollectiveErrorKind::PeerInitFailed { rank: 1 }, .. }), "{e}");
    assert!(e.to_string().contains("an injected failure"), "{e}");
    assert!(took < pause + Duration::from_secs(2), "took {took:?}");
}

/// Two ranks initialise together (NCCL connects its all-reduce ring
/// then), rank 1 dies, and rank 0 then sends to and receives from it for
/// the first time: NCCL connects p2p peers inside `ncclGroupEnd`, which
/// must give up after the communicator's timeout instead of waiting for
/// the dead peer.
fn a_peer_gone_before_the_first_send_recv_is_a_timeout_not_a_hang<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    let limit = Duration::from_secs(3);
    let host = devs[0].info().backend == gpuport::BackendKind::Host;
    let results = common::within(Duration::from_secs(180), move || {
        let gone = std::sync::Barrier::new(2);
        // Bounded: with blocking calls the first send/recv would wait for
        // the dead peer for good (NCCL connects p2p peers lazily).
        two_ranks_in(CallMode::Bounded, &devs, Duration::from_secs(60), |rank, mut comm| {
            comm.set_timeout(limit).unwrap();
            if rank == 1 {
                // A dead process runs no clean-up: its communicator is
                // aborted (freed without waiting for peers), not destroyed.
                comm.abort().unwrap();
                gone.wait();
                return None;
            }
            gone.wait();
            let d = comm.device().clone();
            let s = d.default_stream();
            let mut out = MemArray::<u32, 1, D>::from_vec(&d, [256], vec![7; 256]).unwrap();
            let mut got = MemArray::<u32, 1, D>::zeros(&d, [256]).unwrap();
            let start = Instant::now();
            let e = comm.send_recv_array(&mut out, 1, &mut got, 1, s).and_then(|()| comm.synchronize(s));
            Some((e, start.elapsed(), comm.is_aborted()))
        })
    });
    let (e, took, aborted) = results.into_iter().next().flatten().unwrap();
    let e = e.unwrap_err();
    let _ = writeln!(std::io::stderr(), "a peer gone before send/recv: {e} (after {took:?}, aborted: {aborted})");
    if host {
        // The host engine runs a group's calls at its end, through the
        // store, whose timeout comes out of the group as it is.
        assert!(matches!(e, Error::Store { kind: StoreErrorKind::Timeout, .. }), "{e}");
    } else {
        assert!(matches!(e, Error::Collective { kind: CollectiveErrorKind::Timeout, rank: Some(0), .. }), "{e}");
        assert!(aborted, "the communicator that timed out was not aborted");
    }
    assert!(took < limit + Duration::from_secs(30), "took {took:?}");
}

fn bad_ranks_and_devices_are_refused<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    let store = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(5)).unwrap();
    let e = Communicator::<D::B>::init_rank(&devs[0], 2, 2, &store).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "rank", .. }), "{e}");
    let e = Communicator::<D::B>::init_with_id(&devs[0], 0, 1, b"not an id").unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "id", .. }), "{e}");
    let comms = Communicator::<D::B>::init_all(&devs).unwrap();
    let mut a = MemArray::<f32, 1, D>::zeros(&devs[0], [4]).unwrap();
    let e = comms[0].broadcast_array(&mut a, 5, devs[0].default_stream()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "root", .. }), "{e}");
    let e = comms[0].send_array(&mut a, 0, devs[0].default_stream()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "peer", .. }), "{e}");
    let mut whole = MemArray::<f32, 1, D>::zeros(&devs[0], [5]).unwrap();
    let e = comms[0].all_gather_array(&mut a, &mut whole, devs[0].default_stream()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "recv", .. }), "{e}");
    if devs[0].info().ordinal != devs[1].info().ordinal {
        let mut other = MemArray::<f32, 1, D>::zeros(&devs[1], [4]).unwrap();
        let e = comms[0].all_reduce_array(&mut other, ReduceOp::Sum, devs[0].default_stream()).unwrap_err();
        assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    }
}

fn host_reads_wait_for_a_collective_on_another_stream<D: Device>(devs: [Arc<D>; 2])
where
    D::B: CollectiveBackend,
{
    two_ranks(&devs, Duration::from_secs(60), |rank, comm| {
        let d = comm.device().clone();
        let side = d.create_stream().unwrap();
        // 64 MiB of f32 on a GPU: long enough that an unordered read sees old data
        // (the host engine runs in the call and sends every byte through the store).
        let n = if d.info().backend == gpuport::BackendKind::Host { 1 << 16 } else { 1 << 24 };
        let mut a = MemArray::<f32, 1, D>::from_vec(&d, [n], vec![1.0 + rank as f32; n]).unwrap();
        // The array's upload is pending on the default stream; the collective
        // runs on `side`, and the read below is on the default stream again.
        comm.all_reduce_array(&mut a, ReduceOp::Sum, &side).unwrap();
        comm.all_reduce_array(&mut a, ReduceOp::Sum, &side).unwrap();
        let v = read(&mut a);
        assert!(v.iter().all(|&x| x == 6.0), "rank {rank}: first wrong value {:?}", v.iter().find(|&&x| x != 6.0));
    });
}

mod pairs {
    use super::*;
    pair_tests!(
        every_collective_gives_the_right_values,
        one_process_drives_both_ranks_in_a_group,
        registered_memory_runs_collectives_and_another_devices_is_refused,
        split_and_shrink_make_working_communicators,
        a_survivor_shrinks_past_a_rank_that_left,
        mismatched_calls_are_errors_on_every_rank,
        an_aborted_communicator_refuses_work,
        a_rank_that_stops_calling_is_a_timeout_not_a_hang,
        init_with_id_times_out_when_a_rank_never_comes,
        a_peer_failing_while_this_rank_waits_in_the_librarys_init_fails_it_fast,
        a_peer_gone_before_the_first_send_recv_is_a_timeout_not_a_hang,
        bad_ranks_and_devices_are_refused,
        host_reads_wait_for_a_collective_on_another_stream,
    );
}

#[test]
fn a_rank_whose_peers_never_come_times_out_at_init() {
    let dev = gpuport::HostDevice::open(0).unwrap();
    let store = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_millis(500)).unwrap();
    let e = Communicator::<gpuport::Host>::init_rank(&dev, 0, 2, &store).unwrap_err();
    assert!(matches!(e, Error::Store { kind: StoreErrorKind::Timeout, .. }), "{e}");
}

/// One host rank, an all-reduce of 16 bytes, and a buffer holding `x`.
fn one_host_rank() -> (Arc<gpuport::HostDevice>, Communicator<gpuport::Host>, Op, gpuport::Buffer<gpuport::Host>) {
    let dev = gpuport::HostDevice::open(0).unwrap();
    let comm = Communicator::<gpuport::Host>::init_all(std::slice::from_ref(&dev)).unwrap().remove(0);
    let op = Op { kind: OpKind::AllReduce(ReduceOp::Sum), dtype: DType::UInt8, count: 16 };
    let mut x = dev.alloc(16).unwrap();
    dev.copy_to_device(&[5u8; 16], &mut x, 0).unwrap();
    (dev, comm, op, x)
}

fn bytes_of(dev: &gpuport::HostDevice, b: &gpuport::Buffer<gpuport::Host>) -> [u8; 16] {
    let mut out = [0u8; 16];
    dev.copy_to_host(b, 0, &mut out).unwrap();
    out
}

#[test]
fn run_refuses_inside_a_group_and_touches_nothing() {
    let (dev, comm, op, x) = one_host_rank();
    let s = dev.default_stream();
    let mut y = dev.alloc(16).unwrap();
    let e = Communicator::<gpuport::Host>::group(|| comm.run(&op, &x, &mut y, s)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "group", .. }), "{e}");
    // The group's end ran nothing into `y`, and outside a group `run` runs.
    assert_eq!(bytes_of(&dev, &y), [0; 16]);
    comm.run(&op, &x, &mut y, s).unwrap();
    assert_eq!(bytes_of(&dev, &y), [5; 16]);
}

#[test]
fn a_panic_inside_a_group_ends_it_and_drops_its_calls() {
    let (dev, comm, op, x) = one_host_rank();
    let s = dev.default_stream();
    let lost = dev.alloc(16).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Communicator::<gpuport::Host>::group(|| -> gpuport::Result<()> {
            // SAFETY: `lost` outlives the group; the host engine drops the
            // call when the group panics, so it never runs.
            unsafe { comm.enqueue(&op, &x, &lost, s)? };
            panic!("a panic inside the group");
        })
    }));
    assert!(panicked.is_err());
    // The thread is out of the group: a later group runs its own call only,
    // and `run` runs at once.
    let grouped = dev.alloc(16).unwrap();
    Communicator::<gpuport::Host>::group(|| {
        // SAFETY: `grouped` lives to the end of the test, after the synchronize below.
        unsafe { comm.enqueue(&op, &x, &grouped, s) }
    })
    .unwrap();
    comm.synchronize(s).unwrap();
    assert_eq!(bytes_of(&dev, &grouped), [5; 16]);
    assert_eq!(bytes_of(&dev, &lost), [0; 16], "the panicked group's call ran");
    let mut y = dev.alloc(16).unwrap();
    comm.run(&op, &x, &mut y, s).unwrap();
    assert_eq!(bytes_of(&dev, &y), [5; 16]);
}

#[test]
fn a_timeout_past_the_clock_waits_without_a_deadline() {
    let (dev, mut comm, op, x) = one_host_rank();
    comm.set_timeout(Duration::MAX).unwrap();
    let mut y = dev.alloc(16).unwrap();
    comm.run(&op, &x, &mut y, dev.default_stream()).unwrap();
    assert_eq!(bytes_of(&dev, &y), [5; 16]);
    assert_eq!(comm.timeout(), Duration::MAX);
}
