//! Graph replays through the run-time layer, ordered with the arrays they
//! use by the core (`AnyGraphExec::launch` and the replay link of
//! `src/array/memarray/replay.rs`), on every backend. A replay takes no
//! lock of the arrays: it goes on while another thread holds one (its
//! `Exclusive`), even the thread that replays, and the holder's later work
//! is ordered after it.

mod common;

use std::sync::Arc;

use gpuport::array::{Location, Transfer};
use gpuport::dynamic::{new_owned, AnyArray, AnyGraphExec, AnyStream, DType, Exclusive};
use gpuport::CaptureMode;

type Shared = Arc<Exclusive<AnyArray>>;

/// A zero-filled float32 array of `len` elements on `dev`, its device copy current.
fn shared_of(dev: &gpuport::AnyDevice, s: &AnyStream, len: usize) -> Shared {
    let mut a = new_owned(dev, DType::Float32, &[len]).unwrap();
    a.move_to(Location::Device, s, Transfer::Sync, None).unwrap();
    Arc::new(Exclusive::new(AnyArray::Owned(a), "MemArray"))
}

/// [`shared_of`] 4 elements.
fn shared_on_device(dev: &gpuport::AnyDevice, s: &AnyStream) -> Shared {
    shared_of(dev, s, 4)
}

/// A graph that runs `add_index` on `a` once per replay, captured on `s`.
fn add_index_graph(a: &Shared, s: &AnyStream) -> AnyGraphExec {
    let mut capture = s.begin_capture(CaptureMode::Relaxed).unwrap();
    a.lock().unwrap().add_index(s, None).unwrap().expect("captured: the copy the graph writes");
    let graph = capture.end().unwrap();
    assert_eq!(graph.node_count().unwrap(), 1, "one captured kernel");
    graph.instantiate().unwrap()
}

/// The array's first 4 elements, read from its host copy.
fn host_values(a: &Shared, s: &AnyStream) -> Vec<f32> {
    host_values_of(a, s, 4)
}

/// The array's first `len` elements, read from its host copy.
fn host_values_of(a: &Shared, s: &AnyStream, len: usize) -> Vec<f32> {
    let mut held = a.lock().unwrap();
    let AnyArray::Owned(a) = &mut *held else { unreachable!("an owned array") };
    a.move_to(Location::Host, s, Transfer::Sync, None).unwrap();
    let (ptr, _keep) = a.parts(Location::Host, None).unwrap();
    let ptr = usize::try_from(ptr).unwrap();
    // SAFETY: the host copy of at least `len` f32 (the caller's array),
    // current and idle (moved synchronously), kept alive by `_keep`, and
    // `held` keeps the array's methods out.
    unsafe { std::slice::from_raw_parts(ptr as *const f32, len) }.to_vec()
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_replay_goes_on_while_another_thread_holds_the_array(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = shared_on_device(&dev, &s);
    let exec = add_index_graph(&a, &s);
    let other = AnyStream::create(&dev).unwrap();
    let mut held = a.lock().unwrap();
    // Would deadlock if the replay waited for the holder, who joins it.
    std::thread::scope(|scope| scope.spawn(|| exec.launch(&s).unwrap()).join().unwrap());
    // The holder's work on another stream is ordered after the replay.
    assert!(held.add_index(&other, None).unwrap().is_none(), "not captured");
    drop(held);
    assert_eq!(host_values(&a, &s), [0.0, 2.0, 4.0, 6.0], "the replay's add_index, then the holder's");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_replay_on_the_thread_that_holds_the_array_runs(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let a = shared_on_device(&dev, &s);
    let exec = add_index_graph(&a, &s);
    let held = a.lock().unwrap();
    exec.launch(&s).unwrap();
    drop(held);
    assert_eq!(host_values(&a, &s), [0.0, 1.0, 2.0, 3.0], "one replay, one add_index");
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

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_replay_on_another_stream_is_ordered_after_the_arrays_work(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let other = AnyStream::create(&dev).unwrap();
    // Large enough that two unordered passes over it overlap and lose adds.
    // (16 times an index below 2^20 stays exact in f32.)
    const LEN: usize = 1 << 20;
    let a = shared_of(&dev, &s, LEN);
    let exec = add_index_graph(&a, &s);
    // Work on `other`, then replays on `s` and `other` in turn: each waits
    // for the one before, so no add is lost; a host read sees them all.
    for i in 0..8 {
        a.lock().unwrap().add_index(&other, None).unwrap();
        exec.launch(if i % 2 == 0 { &s } else { &other }).unwrap();
    }
    let values = host_values_of(&a, &s, LEN);
    let wrong = (0..LEN).filter(|&i| values[i] != 16.0 * i as f32).count();
    assert_eq!(wrong, 0, "8 add_index calls and 8 replays: every element 16 times its index");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn replays_alternating_streams_with_no_array_work_between_are_ordered(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let other = AnyStream::create(&dev).unwrap();
    // As above: large enough that two unordered replays overlap and lose adds.
    const LEN: usize = 1 << 20;
    let a = shared_of(&dev, &s, LEN);
    let exec = add_index_graph(&a, &s);
    // Nothing but replays: the link alone holds the latest replay's end, so
    // each replay records its end in the event the one before recorded
    // (`src/array/memarray/replay.rs`), after its stream waited for that one.
    for i in 0..8 {
        exec.launch(if i % 2 == 0 { &s } else { &other }).unwrap();
    }
    let values = host_values_of(&a, &s, LEN);
    let wrong = (0..LEN).filter(|&i| values[i] != 8.0 * i as f32).count();
    assert_eq!(wrong, 0, "8 replays on two streams: every element 8 times its index");
}
