//! Graph replays ordered with the arrays they use
//! (`gpuport::dynamic::replayed`): a replay takes a shared array's lock in
//! the core, waits while another thread holds it, and is refused
//! (`LockError::Busy`) on the thread that holds it, on every backend.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gpuport::array::{Location, LockError, Transfer};
use gpuport::dynamic::{new_owned, AnyArray, AnyGraphExec, AnyStream, DType, Exclusive, ReplayedArray, SharedArray};
use gpuport::{CaptureMode, Error};

/// A zero-filled float32 array of 4 elements on `dev`, its device copy current.
fn shared_on_device(dev: &gpuport::AnyDevice, s: &AnyStream) -> SharedArray {
    let mut a = new_owned(dev, DType::Float32, &[4]).unwrap();
    a.move_to(Location::Device, s, Transfer::Sync, None).unwrap();
    Arc::new(Exclusive::new(AnyArray::Owned(a), "MemArray"))
}

/// A graph that runs `add_index` on `a` once per replay, captured on `s`,
/// its replays ordered with `a`.
fn add_index_graph(a: &SharedArray, s: &AnyStream) -> AnyGraphExec {
    let mut capture = s.begin_capture(CaptureMode::Relaxed).unwrap();
    let used = a.lock().unwrap().add_index(s, None).unwrap().expect("captured: the copy the graph writes");
    assert!(ReplayedArray::order_replays(s, a, used, true), "a gpuport capture runs on `s`");
    let graph = capture.end().unwrap();
    assert_eq!(graph.node_count().unwrap(), 1, "one captured kernel");
    graph.instantiate().unwrap()
}

/// The array's elements, read from its host copy.
fn host_values(a: &SharedArray, s: &AnyStream) -> Vec<f32> {
    let mut held = a.lock().unwrap();
    let AnyArray::Owned(a) = &mut *held else { unreachable!("an owned array") };
    a.move_to(Location::Host, s, Transfer::Sync, None).unwrap();
    let (ptr, _keep) = a.parts(Location::Host, None).unwrap();
    let ptr = usize::try_from(ptr).unwrap();
    // SAFETY: the host copy of 4 f32, current and idle (moved synchronously),
    // kept alive by `_keep`, and `held` keeps the array's methods out.
    unsafe { std::slice::from_raw_parts(ptr as *const f32, 4) }.to_vec()
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_replay_waits_while_another_thread_holds_the_array(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = shared_on_device(&dev, &s);
    let exec = add_index_graph(&a, &s);
    let other = AnyStream::create(&dev).unwrap();
    let launched = AtomicBool::new(false);
    let mut held = a.lock().unwrap();
    std::thread::scope(|scope| {
        let replay = scope.spawn(|| {
            exec.launch(&s).unwrap();
            launched.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!launched.load(Ordering::SeqCst), "the replay waits for the array's holder");
        // The holder's work on another stream: the replay is ordered after it.
        assert!(held.add_index(&other, None).unwrap().is_none(), "not captured");
        drop(held);
        replay.join().unwrap();
    });
    assert!(launched.load(Ordering::SeqCst));
    assert_eq!(host_values(&a, &s), [0.0, 2.0, 4.0, 6.0], "the holder's add_index, then the replay's");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_replay_on_the_thread_that_holds_the_array_is_refused(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = shared_on_device(&dev, &s);
    let exec = add_index_graph(&a, &s);
    let held = a.lock().unwrap();
    match exec.launch(&s) {
        Err(Error::Lock(LockError::Busy { what: "MemArray" })) => {}
        other => panic!("expected LockError::Busy, got {other:?}"),
    }
    drop(held);
    exec.launch(&s).unwrap();
    assert_eq!(host_values(&a, &s), [0.0, 1.0, 2.0, 3.0], "the refused replay ran nothing");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn replays_make_the_device_copy_current_after_a_host_read(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = shared_on_device(&dev, &s);
    let exec = add_index_graph(&a, &s);
    assert_eq!(host_values(&a, &s), [0.0; 4], "captured, not run");
    for _ in 0..3 {
        exec.launch(&s).unwrap();
    }
    assert_eq!(host_values(&a, &s), [0.0, 3.0, 6.0, 9.0], "three replays, each one add_index");
}
