//! Forming communicators through a store: the handshake before the
//! engine's initialisation (src/collective/rendezvous.rs). A rank whose
//! local steps fail (its library, its device, rank 0's id) writes why, and
//! every other rank fails within 2 s naming it, for `Blocking` and
//! `Bounded` communicators alike; ranks whose engines' versions differ are
//! refused on every rank; a re-formed communicator does not see a former
//! one's failure. On the host backend (in CI) and on cuda:0 + cuda:1 and
//! rocm:0 + rocm:1, which skip with a printed reason where two devices or
//! their library are missing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuport::collective::{CallMode, CollectiveBackend, Communicator, TcpStore};
use gpuport::{CollectiveErrorKind, Device, Error, StoreErrorKind};

mod common;

/// The reason a failing rank gives in these tests.
const REASON: &str = "libnccl.so.2: not found (injected by tests/collective_init.rs)";

macro_rules! engine_tests {
    ($($name:ident),* $(,)?) => { $(
        #[rstest::rstest]
        #[case::host("host", "host")]
        #[case::cuda("cuda:0", "cuda:1")]
        #[case::rocm("rocm:0", "rocm:1")]
        fn $name(
            #[case] spec0: &str,
            #[case] spec1: &str,
            #[values(gpuport::collective::CallMode::Blocking, gpuport::collective::CallMode::Bounded)]
            mode: gpuport::collective::CallMode,
        ) {
            let Some(a) = super::common::open_or_skip(spec0) else { return };
            let Some(b) = super::common::open_or_skip(spec1) else { return };
            gpuport::on_backend!((&a, &b), (a, b) => {
                if super::common::engine_or_skip(a, stringify!($name)) {
                    super::$name(&[a.clone(), b.clone()], mode)
                }
            }, else => unreachable!("a pair of one backend"))
        }
    )* };
}

mod per_engine {
    engine_tests!(
        a_rank_whose_local_steps_fail_fails_every_other_rank_within_two_seconds,
        ranks_of_different_engine_versions_are_refused_on_every_rank,
        a_re_formed_communicator_does_not_see_a_former_ones_failure,
    );
}

/// One result of [`form`]: the communicator or its error, and how long the
/// initialisation took.
type Formed<B> = (gpuport::Result<Communicator<B>>, Duration);

/// Ranks `0..devs.len()` on threads, rank `r` on `devs[r]`, each on its own
/// connection to `host`'s store (rank 0 on a new one too, so that its
/// communicator numbers start at 0 as the others' do); `before(rank)` runs
/// on each rank's thread just before its `init_rank_with`.
fn form<D>(host: &TcpStore, devs: &[Arc<D>], mode: CallMode, before: impl Fn(usize) + Sync) -> Vec<Formed<D::B>>
where
    D: Device,
    D::B: CollectiveBackend,
{
    let (addr, timeout) = (host.addr(), host.timeout());
    std::thread::scope(|s| {
        let before = &before;
        let ranks: Vec<_> = devs
            .iter()
            .enumerate()
            .map(|(rank, dev)| {
                s.spawn(move || {
                    let store = TcpStore::connect(addr, timeout).unwrap();
                    before(rank);
                    let start = Instant::now();
                    let r = Communicator::<D::B>::init_rank_with(dev, rank, devs.len(), &store, mode);
                    (r, start.elapsed())
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A store whose reads wait 60 s: a test that passes within 2 s did not wait for it.
fn patient_store() -> TcpStore {
    TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(60)).unwrap()
}

/// Rank `failing` fails one of its local steps (the test hook stands for
/// a missing library) 300 ms after the others started waiting: each other
/// rank fails within 2 s with `PeerInitFailed` naming it and its reason.
fn check_a_failing_rank_fails_the_others<B: CollectiveBackend>(results: &[Formed<B>], failing: usize) {
    for (rank, (r, took)) in results.iter().enumerate() {
        let e = r.as_ref().map(|_| ()).unwrap_err();
        if rank == failing {
            assert!(matches!(e, Error::Collective { kind: CollectiveErrorKind::Engine, .. }), "{e}");
            assert!(e.to_string().contains(REASON), "{e}");
            continue;
        }
        assert!(
            matches!(e, Error::Collective { kind: CollectiveErrorKind::PeerInitFailed { rank }, rank: Some(me), .. }
                if *rank == failing && *me != failing),
            "rank {rank}: {e}"
        );
        assert!(e.to_string().contains(REASON), "rank {rank}: {e}");
        assert!(*took < Duration::from_secs(2), "rank {rank} took {took:?}");
    }
}

/// Sets the failure of rank `failing`, once the others wait for it.
fn fail_late(rank: usize, failing: usize) {
    if rank == failing {
        std::thread::sleep(Duration::from_millis(300));
        gpuport::collective::fail_next_init_on_this_thread(REASON);
    }
}

fn a_rank_whose_local_steps_fail_fails_every_other_rank_within_two_seconds<D>(devs: &[Arc<D>; 2], mode: CallMode)
where
    D: Device,
    D::B: CollectiveBackend,
{
    for failing in [1, 0] {
        let devs = devs.clone();
        let results = common::within(Duration::from_secs(30), move || {
            form(&patient_store(), &devs, mode, |rank| fail_late(rank, failing))
        });
        check_a_failing_rank_fails_the_others(&results, failing);
    }
}

fn ranks_of_different_engine_versions_are_refused_on_every_rank<D>(devs: &[Arc<D>; 2], mode: CallMode)
where
    D: Device,
    D::B: CollectiveBackend,
{
    let real = Communicator::<D::B>::engine_on(&devs[0]).unwrap();
    let other = "NCCL 0.0.1 (a version tests/collective_init.rs claims)";
    let devs = devs.clone();
    let results = common::within(Duration::from_secs(30), move || {
        form(&patient_store(), &devs, mode, |rank| {
            if rank == 1 {
                gpuport::collective::fake_next_engine_version_on_this_thread(other);
            }
        })
    });
    for (rank, (r, took)) in results.iter().enumerate() {
        let e = r.as_ref().map(|_| ()).unwrap_err();
        let peer = 1 - rank;
        assert!(
            matches!(e, Error::Collective { kind: CollectiveErrorKind::VersionMismatch { rank }, .. } if *rank == peer),
            "rank {rank}: {e}"
        );
        let text = e.to_string();
        assert!(text.contains(&real) && text.contains(other), "rank {rank} does not name both versions: {text}");
        assert!(*took < Duration::from_secs(2), "rank {rank} took {took:?}");
    }
}

/// Both ranks fail to form a communicator (rank 1's library is missing),
/// then form it again on new connections to the same store, whose
/// communicator numbers start at 0 again: the second formation meets
/// under fresh keys and succeeds, instead of reading rank 1's former
/// failure.
fn a_re_formed_communicator_does_not_see_a_former_ones_failure<D>(devs: &[Arc<D>; 2], mode: CallMode)
where
    D: Device,
    D::B: CollectiveBackend,
{
    let devs = devs.clone();
    common::within(Duration::from_secs(120), move || {
        let host = patient_store();
        let first = form(&host, &devs, mode, |rank| fail_late(rank, 1));
        check_a_failing_rank_fails_the_others(&first, 1);
        let again = form(&host, &devs, mode, |_| {});
        for (rank, (r, _)) in again.into_iter().enumerate() {
            let comm = r.unwrap_or_else(|e| panic!("rank {rank} of the re-formed communicator: {e}"));
            assert_eq!((comm.rank(), comm.size()), (rank, 2));
        }
    });
}

/// Host ranks of a group of `size` on threads; rank `failing` fails its
/// local steps: every other rank fails within 2 s, naming it and why.
fn host_ranks_with_one_failing(size: usize, failing: usize, mode: CallMode) {
    let dev = gpuport::HostDevice::open(0).unwrap();
    let devs = vec![dev; size];
    let results = common::within(Duration::from_secs(20), move || {
        form(&patient_store(), &devs, mode, |rank| fail_late(rank, failing))
    });
    check_a_failing_rank_fails_the_others(&results, failing);
}

#[rstest::rstest]
fn a_rank_whose_init_fails_fails_the_others_within_two_seconds(
    #[values(gpuport::collective::CallMode::Blocking, gpuport::collective::CallMode::Bounded)]
    mode: gpuport::collective::CallMode,
) {
    host_ranks_with_one_failing(4, 2, mode);
}

#[rstest::rstest]
fn a_rank_zero_whose_init_fails_fails_the_others_waiting_for_its_status(
    #[values(gpuport::collective::CallMode::Blocking, gpuport::collective::CallMode::Bounded)]
    mode: gpuport::collective::CallMode,
) {
    host_ranks_with_one_failing(3, 0, mode);
}

#[test]
fn ranks_that_disagree_on_the_world_size_are_refused_at_init() {
    let dev = gpuport::HostDevice::open(0).unwrap();
    let host = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(20)).unwrap();
    let addr = host.addr();
    let d = dev.clone();
    // Rank 1 thinks the world has 3 ranks, rank 0 that it has 2.
    let other = std::thread::spawn(move || {
        let store = TcpStore::connect(addr, Duration::from_secs(20)).unwrap();
        Communicator::<gpuport::Host>::init_rank(&d, 1, 3, &store).map(|_| ())
    });
    let mine = Communicator::<gpuport::Host>::init_rank(&dev, 0, 2, &host).map(|_| ());
    let theirs = other.join().unwrap();
    // Rank 0, which waits for 2 ranks, finds the difference; rank 1, which
    // waits for a third, learns of it through the store, as of any rank's
    // failure at init.
    assert!(matches!(&mine, Err(Error::Store { kind: StoreErrorKind::Protocol, .. })), "rank 0: {mine:?}");
    assert!(
        matches!(&theirs, Err(Error::Collective { kind: CollectiveErrorKind::PeerInitFailed { rank: 0 }, reason, .. })
            if reason.contains("world size")),
        "rank 1: {theirs:?}"
    );
}

/// A binding whose rank cannot open its device reports it
/// (`AnyCommunicator::report_failed_init`): the other rank, already waiting
/// in `init_rank`, fails within 2 s naming it and why.
#[test]
fn a_rank_whose_device_does_not_open_fails_the_others_within_two_seconds() {
    let host = patient_store();
    let (addr, timeout) = (host.addr(), host.timeout());
    let (e, took) = common::within(Duration::from_secs(20), move || {
        std::thread::scope(|s| {
            s.spawn(move || {
                let store = TcpStore::connect(addr, timeout).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                let e = gpuport::open("cuda:99").map(|_| ()).unwrap_err();
                gpuport::collective::AnyCommunicator::report_failed_init(1, 2, &store, &format!("cuda:99: {e}"));
            });
            let dev = gpuport::HostDevice::open(0).unwrap();
            let start = Instant::now();
            let e = Communicator::<gpuport::Host>::init_rank(&dev, 0, 2, &host).unwrap_err();
            (e, start.elapsed())
        })
    });
    assert!(matches!(&e, Error::Collective { kind: CollectiveErrorKind::PeerInitFailed { rank: 1 }, .. }), "{e}");
    assert!(e.to_string().contains("cuda:99"), "{e}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

/// Two processes given rank 1 of 2 (threads on their own connections
/// here): one forms with rank 0; the other comes under the next round of
/// the communicator, waits alone, and its timeout says that another
/// process may have its rank.
#[test]
fn a_second_process_with_one_rank_is_told_so_at_its_timeout() {
    let dev = gpuport::HostDevice::open(0).unwrap();
    let host = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(1)).unwrap();
    let addr = host.addr();
    let results = common::within(Duration::from_secs(20), move || {
        std::thread::scope(|s| {
            let ranks: Vec<_> = [0, 1, 1]
                .into_iter()
                .enumerate()
                .map(|(i, rank)| {
                    let dev = dev.clone();
                    s.spawn(move || {
                        let store = TcpStore::connect(addr, Duration::from_secs(1)).unwrap();
                        // The second rank 1 comes once the first has taken its round (mostly).
                        std::thread::sleep(Duration::from_millis(if i == 2 { 200 } else { 0 }));
                        Communicator::<gpuport::Host>::init_rank(&dev, rank, 2, &store).map(|_| ())
                    })
                })
                .collect();
            ranks.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
    });
    assert!(results[0].is_ok(), "rank 0: {:?}", results[0]);
    // Whichever rank 1 came second (on a busy machine, not always the later thread):
    let (formed, refused): (Vec<_>, Vec<_>) = results[1..].iter().partition(|r| r.is_ok());
    assert_eq!((formed.len(), refused.len()), (1, 1), "{results:?}");
    let e = refused[0].as_ref().unwrap_err();
    assert!(matches!(e, Error::Store { kind: StoreErrorKind::Timeout, .. }), "{e}");
    assert!(e.to_string().contains("another process was given rank 1 too"), "{e}");
}

/// The rank that runs the store (rank 0, whose process ends with its
/// error, and the store with it) keeps the store up after it learns of
/// another rank's failure until every rank has read it: rank 2, slow to
/// come, still fails naming rank 1 and its reason, not with a broken
/// connection.
#[test]
fn the_rank_that_runs_the_store_keeps_a_peers_failure_readable_for_a_late_rank() {
    let dev = gpuport::HostDevice::open(0).unwrap();
    let host = patient_store();
    let (addr, timeout) = (host.addr(), host.timeout());
    let results = common::within(Duration::from_secs(20), move || {
        std::thread::scope(|s| {
            let d = dev.clone();
            let zero = s.spawn(move || {
                let r = Communicator::<gpuport::Host>::init_rank(&d, 0, 3, &host).map(|_| ());
                drop(host); // rank 0's process ends here
                r
            });
            let others: Vec<_> = [1usize, 2]
                .into_iter()
                .map(|rank| {
                    let d = dev.clone();
                    s.spawn(move || {
                        let store = TcpStore::connect(addr, timeout).unwrap();
                        if rank == 1 {
                            std::thread::sleep(Duration::from_millis(300));
                            gpuport::collective::fail_next_init_on_this_thread(REASON);
                        } else {
                            std::thread::sleep(Duration::from_millis(900));
                        }
                        Communicator::<gpuport::Host>::init_rank(&d, rank, 3, &store).map(|_| ())
                    })
                })
                .collect();
            let mut all = vec![zero.join().unwrap()];
            all.extend(others.into_iter().map(|h| h.join().unwrap()));
            all
        })
    });
    for rank in [0, 2] {
        let e = results[rank].as_ref().unwrap_err();
        assert!(
            matches!(e, Error::Collective { kind: CollectiveErrorKind::PeerInitFailed { rank: 1 }, .. }),
            "rank {rank}: {e}"
        );
        assert!(e.to_string().contains(REASON), "rank {rank}: {e}");
    }
}
