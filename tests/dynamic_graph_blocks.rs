//! The graph rules a binding's `Graph` and `GraphCapture` leave to the core
//! (`src/dynamic/graph_slot.rs`), on every backend: capture mode names,
//! the stream a capture runs on, what a slot keeps of the stream a block
//! captured, abandoning a block, a binding's whole replay, and updating two
//! slots from each other.

mod common;

use std::sync::Arc;

use gpuport::dynamic::exclusive::Exclusive;
use gpuport::dynamic::graph_slot::{
    capture_mode_name, capture_mode_named, capture_stream, replay_and_keep, update_between, BlockExit, CaptureBlock,
    GraphSlot,
};
use gpuport::dynamic::runtime::StreamChoice;
use gpuport::dynamic::{keep, same_device, AnyStream};
use gpuport::{CaptureMode, Error, GraphErrorKind};

/// ThreadLocal, not Global: a Global capture would refuse the other tests'
/// waits on the device while it runs.
const MODE: CaptureMode = CaptureMode::ThreadLocal;

/// An owner whose drop the test can see: the slot holds the only other count.
fn owner() -> (Arc<()>, Box<dyn std::any::Any + Send + Sync>) {
    let mine = Arc::new(());
    (mine.clone(), Box::new(mine))
}

/// A slot holding a graph of an empty capture of `s`.
fn captured(s: &AnyStream) -> Exclusive<GraphSlot> {
    let (block, mut slot) = (CaptureBlock::default(), GraphSlot::default());
    block.enter(&mut slot, s, MODE).unwrap();
    assert!(matches!(block.exit(&mut slot, false).unwrap(), BlockExit::Over(Ok(()))));
    Exclusive::new(slot, "Graph")
}

#[test]
fn capture_modes_are_named_as_torch_names_them() {
    for mode in [CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed] {
        assert_eq!(capture_mode_named(capture_mode_name(mode)).unwrap(), mode);
    }
    assert_eq!(capture_mode_name(CaptureMode::ThreadLocal), "thread_local");
    let e = capture_mode_named("local").unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "mode", .. }), "{e}");
    assert!(e.python_message(None).contains("capture mode \"local\": use \"global\""), "{e}");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_slot_keeps_the_stream_owner_while_it_is_not_empty(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();

    // Kept through a capture that ends in a graph, until the reset.
    let (block, mut slot) = (CaptureBlock::default(), GraphSlot::default());
    let (mine, kept) = owner();
    block.enter_keeping(&mut slot, &s, MODE, kept).unwrap();
    assert!(slot.stream_owner::<Arc<()>>().is_some_and(|o| Arc::ptr_eq(o, &mine)));
    assert!(slot.stream_owner::<String>().is_none(), "another type is not the owner");
    assert!(slot.captured_device().is_none() && slot.device().is_some(), "capturing: no graph's device yet");
    assert!(matches!(block.exit(&mut slot, false).unwrap(), BlockExit::Over(Ok(()))));
    assert!(slot.is_captured() && Arc::strong_count(&mine) == 2, "a captured graph keeps the owner");
    assert!(slot.captured_device().is_some_and(|d| same_device(&d, &dev)));
    let retired = slot.reset().unwrap();
    retired.wait();
    assert!(slot.stream_owner::<Arc<()>>().is_none() && Arc::strong_count(&mine) == 1);

    // Dropped when the block raised (its capture is discarded).
    let (block, mut slot) = (CaptureBlock::default(), GraphSlot::default());
    let (mine, kept) = owner();
    block.enter_keeping(&mut slot, &s, MODE, kept).unwrap();
    assert!(matches!(block.exit(&mut slot, true).unwrap(), BlockExit::Over(Ok(()))));
    assert_eq!(Arc::strong_count(&mine), 1, "a discarded capture keeps nothing");

    // Dropped when the block is abandoned (its object went away unexited).
    let (block, mut slot) = (CaptureBlock::default(), GraphSlot::default());
    let (mine, kept) = owner();
    block.enter_keeping(&mut slot, &s, MODE, kept).unwrap();
    block.abandon(&mut slot);
    assert!(!slot.is_capturing() && !block.is_entered() && Arc::strong_count(&mine) == 1);
    block.abandon(&mut slot); // nothing entered: nothing happens
    s.synchronize().expect("the stream is not left capturing");

    // A block that fails to enter keeps nothing.
    let mut busy = GraphSlot::default();
    busy.begin_capture(&s, MODE).unwrap();
    let (mine, kept) = owner();
    let e = CaptureBlock::default().enter_keeping(&mut busy, &s, MODE, kept).unwrap_err();
    assert!(matches!(e, Error::Graph { kind: GraphErrorKind::Capturing, .. }), "{e}");
    assert_eq!(Arc::strong_count(&mine), 1);
    busy.end_capture(true).unwrap();
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn slots_update_from_each_other_on_two_threads_without_deadlock(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let (a, b) = (captured(&s), captured(&s));
    // From itself: nothing to do, and no second lock of the same slot.
    update_between(&a, &a, |wait| wait()).unwrap();
    std::thread::scope(|scope| {
        let one = scope.spawn(|| (0..200).try_for_each(|_| update_between(&a, &b, |wait| wait())));
        let two = scope.spawn(|| (0..200).try_for_each(|_| update_between(&b, &a, |wait| wait())));
        one.join().unwrap().unwrap();
        two.join().unwrap().unwrap();
    });
    // From an empty slot: the rule of `GraphSlot::update`.
    let empty = Exclusive::new(GraphSlot::default(), "Graph");
    let e = update_between(&a, &empty, |wait| wait()).unwrap_err();
    assert!(matches!(e, Error::Graph { kind: GraphErrorKind::NotCaptured, .. }), "{e}");
}

/// Whether a capture into a slot from `from` is seen on `on`: the two are one stream.
fn same_stream(from: &AnyStream, on: &AnyStream) -> bool {
    let mut slot = GraphSlot::default();
    slot.begin_capture(from, MODE).unwrap();
    let seen = on.capture_status().unwrap().is_capturing();
    slot.end_capture(true).unwrap();
    seen
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_capture_runs_on_a_new_stream_the_stream_given_or_a_handle_borrowed_on_the_device(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let default = AnyStream::default_for(&dev);

    // No stream: a new one on the device, not its default stream.
    let new = capture_stream(&StreamChoice::Default, Some(&dev)).unwrap();
    assert!(same_device(&new.device(), &dev));
    assert!(!same_stream(&new, &default), "no stream given: a new stream, not the default one");

    // A gpuport stream: that very stream, with or without its device named.
    let mine = AnyStream::create(&dev).unwrap();
    for device in [None, Some(&dev)] {
        let chosen = capture_stream(&StreamChoice::stream(mine.clone()), device).unwrap();
        assert!(same_stream(&chosen, &mine), "the stream given is the one captured");
    }

    // A handle (0: the default stream) is borrowed on the device named.
    // SAFETY: 0 names the device's default stream, live as long as the device.
    let borrowed = capture_stream(&unsafe { StreamChoice::handle(0) }, Some(&dev)).unwrap();
    assert!(same_device(&borrowed.device(), &dev) && borrowed.handle() == default.handle());

    // A gpuport stream of another device than the one named is refused.
    if spec != "host" {
        let host = gpuport::open("host").unwrap();
        let e = capture_stream(&StreamChoice::stream(AnyStream::create(&host).unwrap()), Some(&dev)).unwrap_err();
        assert!(matches!(e, Error::DeviceMismatch { what: "stream", .. }), "{e}");
    }
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_whole_replay_prunes_first_and_keeps_the_stream_owner_until_it_has_run(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let slot = captured(&s);

    // The owner of work that has run goes before the replay.
    let finished = Arc::new(());
    keep::keep_until_done(&s, Box::new(finished.clone())).unwrap();
    s.synchronize().unwrap();
    let (mine, kept) = owner();
    replay_and_keep(&slot, StreamChoice::stream(s.clone()), Some(kept), |op| op()).unwrap();
    assert_eq!(Arc::strong_count(&finished), 1, "the owners of finished work were not dropped first");
    assert_eq!(Arc::strong_count(&mine), 2, "the stream's owner is kept while the replay may run");
    s.synchronize().unwrap();
    keep::prune();
    assert_eq!(Arc::strong_count(&mine), 1, "the owner goes once the replay has run");

    // A refused replay keeps nothing.
    let empty = Exclusive::new(GraphSlot::default(), "Graph");
    let (mine, kept) = owner();
    let e = replay_and_keep(&empty, StreamChoice::Default, Some(kept), |op| op()).unwrap_err();
    assert!(matches!(e, Error::Graph { kind: GraphErrorKind::NotCaptured, .. }), "{e}");
    assert_eq!(Arc::strong_count(&mine), 1);
}
