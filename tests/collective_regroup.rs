//! Communicators made from others (src/collective/regroup.rs): split and,
//! after a rank died, shrink; on the host engine, ranks on threads. The
//! GPU paths (`ncclCommSplit`, `ncclCommShrink`) need two GPUs and NCCL
//! (tests/collective.rs), and four for [`four_ranks_go_on_without_one_that_exits`].

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use gpuport::collective::{CollectiveBackend, Communicator, ReduceOp, TcpStore};
use gpuport::{CollectiveErrorKind, Device, Error, Host, HostDevice, Location, MemArray, Transfer};

mod common;

/// Runs `body(rank, communicator)` for `size` ranks on threads, meeting
/// through one store whose reads wait `timeout`; returns their results.
fn ranks<R: Send>(size: usize, timeout: Duration, body: impl Fn(usize, Communicator<Host>) -> R + Sync) -> Vec<R> {
    let host = TcpStore::host("127.0.0.1:0".parse().unwrap(), timeout).unwrap();
    let addr = host.addr();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let (body, host) = (&body, &host);
                s.spawn(move || {
                    let dev = HostDevice::open(0).unwrap();
                    let own;
                    let store = if rank == 0 {
                        host
                    } else {
                        own = TcpStore::connect(addr, timeout).unwrap();
                        &own
                    };
                    let mut comm = Communicator::<Host>::init_rank(&dev, rank, size, store).unwrap();
                    comm.set_timeout(timeout).unwrap();
                    body(rank, comm)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The sum over `comm`'s ranks of `[x, 10 x]`.
fn sum(comm: &Communicator<Host>, x: f32) -> gpuport::Result<Vec<f32>> {
    let dev: Arc<HostDevice> = comm.device().clone();
    let s = dev.default_stream();
    let mut a = MemArray::<f32, 1, _>::from_vec(&dev, [2], vec![x, 10.0 * x])?;
    comm.all_reduce_array(&mut a, ReduceOp::Sum, s)?;
    a.move_to(Location::Host, s, Transfer::Sync, None)?;
    a.to_vec(None)
}

#[test]
fn split_groups_ranks_by_color_and_orders_them_by_key() {
    let out = ranks(5, Duration::from_secs(20), |rank, comm| {
        // Ranks 0, 2, 4: color 0, keyed in reverse; 1: color 1 alone; 3: no color.
        let color = match rank {
            1 => 1,
            3 => -1,
            _ => 0,
        };
        let key = -(rank as i32);
        let child = comm.split(color, key).unwrap();
        // The parent still works after the split.
        assert_eq!(sum(&comm, 1.0).unwrap(), vec![5.0, 50.0], "rank {rank}");
        let Some(child) = child else { return (rank, None) };
        child.set_checks(true).unwrap();
        let total = sum(&child, rank as f32 + 1.0).unwrap();
        (rank, Some((child.rank(), child.size(), total)))
    });
    assert_eq!(out[0], (0, Some((2, 3, vec![9.0, 90.0]))));
    assert_eq!(out[1], (1, Some((0, 1, vec![2.0, 20.0]))), "a color of one rank is a communicator of one");
    assert_eq!(out[2], (2, Some((1, 3, vec![9.0, 90.0]))));
    assert_eq!(out[3], (3, None), "a negative color is in no group");
    assert_eq!(out[4], (4, Some((0, 3, vec![9.0, 90.0]))));
}

#[test]
fn split_of_a_group_made_without_a_store_meets_through_the_host_engine() {
    let dev = HostDevice::open(0).unwrap();
    let comms = Communicator::<Host>::init_all(&[dev.clone(), dev.clone(), dev]).unwrap();
    let out: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let child = c.split(i32::from(c.rank() == 0), 0).unwrap().unwrap();
                    (child.size(), sum(&child, c.rank() as f32).unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(out, vec![(1, vec![0.0, 0.0]), (2, vec![3.0, 30.0]), (2, vec![3.0, 30.0])]);
}

#[test]
fn an_aborted_communicator_cannot_split() {
    ranks(1, Duration::from_secs(10), |_, comm| {
        comm.abort().unwrap();
        let e = comm.split(0, 0).unwrap_err();
        assert!(matches!(e, Error::Collective { kind: CollectiveErrorKind::Aborted, .. }), "{e}");
    });
}

#[test]
fn shrink_refuses_this_rank_and_ranks_outside_the_group() {
    ranks(2, Duration::from_secs(10), |rank, comm| {
        for bad in [vec![rank], vec![2]] {
            let e = comm.shrink(&bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { name: "exclude", .. }), "{e}");
        }
    });
}

/// Four ranks; rank 2 leaves after one all-reduce. The survivors' next
/// all-reduce times out, they abort and shrink without it, and the new
/// communicator all-reduces the right values, again and again; the
/// former's unfinished round (the survivors' messages of it are still in
/// the store) does not reach it.
#[test]
fn survivors_of_a_dead_rank_shrink_and_go_on() {
    let out = ranks(4, Duration::from_secs(30), |rank, mut comm| {
        assert_eq!(sum(&comm, 1.0).unwrap(), vec![4.0, 40.0]);
        if rank == 2 {
            // This rank dies: it leaves without a word.
            comm.abort().unwrap();
            return None;
        }
        comm.set_timeout(Duration::from_secs(1)).unwrap();
        let e = sum(&comm, 1.0).unwrap_err();
        assert!(matches!(e, Error::Collective { kind: CollectiveErrorKind::Timeout, .. }), "rank {rank}: {e}");
        assert!(comm.is_aborted());
        let smaller = comm.shrink(&[2]).unwrap();
        let want_rank = if rank == 3 { 2 } else { rank };
        assert_eq!((smaller.rank(), smaller.size()), (want_rank, 3));
        let mut seen = Vec::new();
        for round in 0..3 {
            seen.push(sum(&smaller, rank as f32 + round as f32).unwrap());
        }
        Some(seen)
    });
    let want = vec![vec![4.0, 40.0], vec![7.0, 70.0], vec![10.0, 100.0]];
    for (rank, seen) in out.iter().enumerate() {
        match rank {
            2 => assert!(seen.is_none()),
            _ => assert_eq!(seen.as_ref(), Some(&want), "rank {rank}"),
        }
    }
}

/// The sum over `comm`'s ranks of `[x, 10 x]`, on any backend.
fn sum_on<B: CollectiveBackend>(comm: &Communicator<B>, x: f32) -> Vec<f32> {
    let dev = comm.device().clone();
    let s = dev.default_stream();
    let mut a = MemArray::<f32, 1, _>::from_vec(&dev, [2], vec![x, 10.0 * x]).unwrap();
    comm.all_reduce_array(&mut a, ReduceOp::Sum, s).unwrap();
    a.move_to(Location::Host, s, Transfer::Sync, None).unwrap();
    a.to_vec(None).unwrap()
}

/// Four ranks, one device each (all on host:0 on the host backend); rank 3
/// exits after an all-reduce. The three survivors abort, shrink with rank 3
/// excluded (NCCL 2.27 on: `ncclCommShrink` of the aborted communicator with
/// the exclusion list and `NCCL_SHRINK_ABORT`; else through the store), and
/// go on all-reducing the right values.
fn four_ranks_go_on_without_one_that_exits<D: Device>(first: &Arc<D>)
where
    D::B: CollectiveBackend,
{
    let test = "four_ranks_go_on_without_one_that_exits";
    if let Err(e) = Communicator::<D::B>::engine_on(first) {
        let _ = writeln!(std::io::stderr(), "skipped: {test} on {}: {e}", first.info().spec());
        return;
    }
    let mut devs = vec![first.clone()];
    for ordinal in 1..4 {
        if first.info().backend == gpuport::BackendKind::Host {
            devs.push(first.clone());
            continue;
        }
        match D::open(ordinal) {
            Ok(d) => devs.push(d),
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "skipped: {test}: four devices are needed: {e}");
                return;
            }
        }
    }
    let timeout = Duration::from_secs(60);
    let host = TcpStore::host("127.0.0.1:0".parse().unwrap(), timeout).unwrap();
    let addr = host.addr();
    let out: Vec<Option<Vec<Vec<f32>>>> = std::thread::scope(|s| {
        let handles: Vec<_> = devs
            .iter()
            .enumerate()
            .map(|(rank, dev)| {
                let host = &host;
                s.spawn(move || {
                    let own;
                    let store = if rank == 0 {
                        host
                    } else {
                        own = TcpStore::connect(addr, timeout).unwrap();
                        &own
                    };
                    let comm = Communicator::<D::B>::init_rank(dev, rank, 4, store).unwrap();
                    assert_eq!(sum_on(&comm, 1.0), vec![4.0, 40.0], "rank {rank}");
                    if rank == 3 {
                        // This rank exits: a dead process frees nothing in order.
                        comm.abort().unwrap();
                        return None;
                    }
                    comm.abort().unwrap();
                    let smaller = comm.shrink(&[3]).unwrap();
                    assert_eq!((smaller.rank(), smaller.size()), (rank, 3), "rank {rank}");
                    Some((0..3).map(|round| sum_on(&smaller, (rank + round) as f32)).collect())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Ranks 0, 1, 2 give 0+1+2, then one more each round.
    let want = vec![vec![3.0, 30.0], vec![6.0, 60.0], vec![9.0, 90.0]];
    for (rank, seen) in out.iter().enumerate() {
        match rank {
            3 => assert!(seen.is_none()),
            _ => assert_eq!(seen.as_ref(), Some(&want), "rank {rank}"),
        }
    }
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn four_ranks_go_on_without_one_that_exits_on(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    gpuport::on_backend!(&dev, d => four_ranks_go_on_without_one_that_exits(d));
}
