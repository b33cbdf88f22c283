//! Captures begun by another thread, replays and arrays (issue 36, items
//! 3 to 6 and 11), tested once for every backend: `host` always, `cuda:0`
//! and `rocm:0` (through the HIP-on-CUDA shim) where present, skipped with
//! a printed reason elsewhere.
//!
//! The races loop: one thread begins and ends captures on a stream while
//! another uses the stream through gpuport. `GPUPORT_RACE_ROUNDS` sets the
//! rounds (200 by default; fewer under valgrind).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use gpuport::array::{Location, MemArray, Transfer};
use gpuport::{builtin, CaptureMode, Device, Error, GraphErrorKind, KernelArgs, LaunchConfig, ModuleSource, Stream};

/// A `Global` capture refuses device-wide waits on every thread: the test
/// that makes one runs alone.
static SERIAL: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    SERIAL.read().unwrap_or_else(|p| p.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    SERIAL.write().unwrap_or_else(|p| p.into_inner())
}

fn rounds() -> usize {
    std::env::var("GPUPORT_RACE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(200)
}

fn graph_kind(e: &Error) -> Option<GraphErrorKind> {
    match e {
        Error::Graph { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// Runs `f` on another thread; panics with `what` if it has not returned within 20 s.
fn returns_within<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("{what} never returned"))
}

/// Begins and ends `Relaxed` captures of `s` on its own thread until `stop`.
fn capture_loop<D: Device>(dev: Arc<D>, s: Stream<D::B>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            let capture = dev.begin_capture(&s, CaptureMode::Relaxed).unwrap();
            std::thread::yield_now();
            // Whatever was captured is dropped unlaunched, as the program did.
            drop(capture.end());
            std::thread::yield_now();
            n += 1;
        }
        n
    })
}

fn sleep_on<D: Device>(d: &D, s: &Stream<D::B>, ms: u64) {
    let k = d.kernel(&d.load_module(ModuleSource::Builtin).unwrap(), builtin::SLEEP_NS).unwrap();
    let mut args = KernelArgs::new();
    args.push(&(ms * 1_000_000));
    // SAFETY: one u64 argument; touches no memory.
    unsafe { d.launch(&k, LaunchConfig::linear(1, 1), &args, s) }.unwrap();
}

// ---- item 4: an upload never lands half in a capture ------------------------------------

/// `upload_from_slice` on a stream another thread captures: either refused
/// (`NotCapturable`, the capture ran when it looked) or whole: both copies
/// hold the data, and the pending work is real work that completes.
fn an_upload_is_never_split_by_a_capture_begun_on_another_thread<D: Device>(dev: &Arc<D>) {
    let _serial = shared();
    let s = dev.create_stream().unwrap();
    let check = dev.create_stream().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let captures = capture_loop(dev.clone(), s.clone(), stop.clone());
    const LEN: usize = 1 << 18; // 1 MiB of f32: four pieces
    let (mut whole, mut refused) = (0, 0);
    for round in 0..rounds() {
        let mut a = MemArray::<f32, 1, D>::zeros(dev, [LEN]).unwrap();
        // The device copy belongs to `check`: the caching pool then makes no
        // call on `s` outside the array's own (its own gate is another item).
        a.move_to(Location::Device, &check, Transfer::Sync, None).unwrap();
        let data: Vec<f32> = (0..LEN).map(|i| (i % 1000) as f32 + round as f32).collect();
        match a.upload_from_slice(&data, &s, None) {
            Ok(()) => whole += 1,
            Err(e) if graph_kind(&e) == Some(GraphErrorKind::NotCapturable) => {
                refused += 1;
                continue;
            }
            Err(e) => panic!("upload_from_slice: {e}"),
        }
        a.synchronize().unwrap_or_else(|e| panic!("round {round}: the upload's pending work was captured: {e}"));
        // The device copy holds the data: a kernel on it, read back on a stream no one captures.
        a.scale(2.0, &check, None).unwrap();
        a.move_to(Location::Host, &check, Transfer::Sync, None).unwrap();
        for i in [0, LEN / 3, LEN - 1] {
            assert_eq!(a.get([i], None).unwrap(), 2.0 * data[i], "round {round}: the device copy missed the upload");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let n = captures.join().unwrap();
    eprintln!("uploads: {whole} whole, {refused} refused, {n} captures");
}

// ---- item 6: an event recorded outside a capture completes ------------------------------

/// `record_event`, `synchronize_event` and graph launches on a stream
/// another thread captures: every record made outside a capture
/// completes, and every launch made outside one runs (`GraphExec::wait` returns).
fn events_and_launches_are_never_lost_to_a_capture_begun_on_another_thread<D: Device>(dev: &Arc<D>) {
    let _serial = shared();
    let s = dev.create_stream().unwrap();
    let other = dev.create_stream().unwrap();
    let exec = {
        let capture = dev.begin_capture(&other, CaptureMode::Relaxed).unwrap();
        sleep_on(dev.as_ref(), capture.stream(), 0);
        Arc::new(capture.end().unwrap().instantiate().unwrap())
    };
    let stop = Arc::new(AtomicBool::new(false));
    let captures = capture_loop(dev.clone(), s.clone(), stop.clone());
    let ev = Arc::new(dev.create_event().unwrap());
    let (mut recorded, mut launched) = (0, 0);
    for round in 0..rounds() * 10 {
        std::thread::yield_now();
        let captured = dev.record_event(&ev, &s).is_ok() && dev.event_is_complete(&ev).is_err();
        if !captured {
            recorded += 1;
            let (d, e) = (dev.clone(), ev.clone());
            returns_within(&format!("round {round}: synchronize_event"), move || d.synchronize_event(&e))
                .unwrap_or_else(|e| panic!("round {round}: synchronize_event: {e}"));
        }
        match exec.launch(&s) {
            Ok(()) => launched += 1,
            Err(e) if graph_kind(&e) == Some(GraphErrorKind::NestedLaunch) => {}
            // A GPU captures launches into the outer graph, which is dropped unlaunched.
            Err(e) => panic!("launch: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let n = captures.join().unwrap();
    let e = exec.clone();
    returns_within("GraphExec::wait", move || e.wait());
    eprintln!("events: {recorded} recorded outside captures, {launched} launches, {n} captures");
}

// ---- item 3: launches of one executable are ordered --------------------------------------

/// One executable graph launched on two streams at once: the launches run
/// one after the other (CUDA's rule, and the host backend's), so no
/// update of the captured read-modify-write is lost.
fn launches_of_one_executable_on_two_streams_do_not_overlap<D: Device>(dev: &Arc<D>) {
    let _serial = shared();
    let (s1, s2) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
    const LEN: usize = 1 << 20;
    let mut a = MemArray::<f32, 1, D>::zeros(dev, [LEN]).unwrap();
    a.move_to(Location::Device, &s1, Transfer::Sync, None).unwrap();
    let capture = dev.begin_capture(&s1, CaptureMode::ThreadLocal).unwrap();
    a.add_index(capture.stream(), None).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    let rounds = 4;
    for _ in 0..rounds {
        exec.launch(&s1).unwrap();
        exec.launch(&s2).unwrap();
    }
    exec.wait();
    a.move_to(Location::Host, &s1, Transfer::Sync, None).unwrap();
    for i in [1, LEN / 2, LEN - 1] {
        assert_eq!(a.get([i], None).unwrap(), (2 * rounds * i) as f32, "two launches of one executable overlapped");
    }
    // Timed, which does not depend on how two sweeps interleave: two
    // launches of a 150 ms graph take 300 ms when ordered.
    let capture = dev.begin_capture(&s1, CaptureMode::ThreadLocal).unwrap();
    sleep_on(dev.as_ref(), capture.stream(), 150);
    let slow = capture.end().unwrap().instantiate().unwrap();
    let t = std::time::Instant::now();
    slow.launch(&s1).unwrap();
    slow.launch(&s2).unwrap();
    slow.wait();
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(290), "two launches of one executable ran at once ({took:?})");
}

// ---- item 3: replays are ordered with the arrays they captured, by default ------------------

/// A graph that captured `add_index` on an array, launched on one stream
/// while the array copies its device copy on others, with no
/// `before_replay`/`after_replay`: each copy to the host sees exactly the
/// replays launched before it, and each replay waits for the array's own
/// work launched before it. The graph sleeps before its kernel and the
/// array's upload waits behind a longer sleep, so a missing order shows.
fn replays_are_ordered_with_the_arrays_they_captured_by_default<D: Device>(dev: &Arc<D>) {
    let _serial = shared();
    let (s1, s2, s3) = (dev.create_stream().unwrap(), dev.create_stream().unwrap(), dev.create_stream().unwrap());
    const LEN: usize = 1 << 20;
    let mut a = MemArray::<f32, 1, D>::zeros(dev, [LEN]).unwrap();
    a.move_to(Location::Device, &s1, Transfer::Sync, None).unwrap();
    let capture = dev.begin_capture(&s1, CaptureMode::ThreadLocal).unwrap();
    sleep_on(dev.as_ref(), capture.stream(), 30);
    a.add_index(capture.stream(), None).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    // The array waits for the replays: no copy reads the device copy under one.
    for k in 1..=4usize {
        exec.launch(&s2).unwrap();
        a.move_to(Location::Host, &s3, Transfer::Sync, None).unwrap();
        for i in [1, LEN / 2, LEN - 1] {
            assert_eq!(a.get([i], None).unwrap(), (k * i) as f32, "after {k} replays, at {i}");
        }
    }
    // The replay waits for the array: an upload queued behind a long kernel lands first.
    a.fill(0.0, None).unwrap();
    sleep_on(dev.as_ref(), &s3, 100);
    a.move_to(Location::Device, &s3, Transfer::Async, None).unwrap();
    exec.launch(&s2).unwrap();
    a.move_to(Location::Host, &s1, Transfer::Sync, None).unwrap();
    for i in [1, LEN / 2, LEN - 1] {
        assert_eq!(a.get([i], None).unwrap(), i as f32, "the replay ran before the upload it follows, at {i}");
    }
    // A dropped array's drop waits for the replays; later launches need it no more.
    exec.launch(&s2).unwrap();
    drop(a);
    exec.launch(&s3).unwrap();
    exec.wait();
}

/// `order_stream` orders a consumer stream after a replay the array has
/// not taken yet, where `pending_event` alone would not.
fn order_stream_waits_for_replays_not_taken_yet<D: Device>(dev: &Arc<D>) {
    let _serial = shared();
    let (s1, s2, s3) = (dev.create_stream().unwrap(), dev.create_stream().unwrap(), dev.create_stream().unwrap());
    let mut a = MemArray::<f32, 1, D>::zeros(dev, [1024]).unwrap();
    a.move_to(Location::Device, &s1, Transfer::Sync, None).unwrap();
    let capture = dev.begin_capture(&s1, CaptureMode::ThreadLocal).unwrap();
    sleep_on(dev.as_ref(), capture.stream(), 200);
    a.add_index(capture.stream(), None).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&s2).unwrap();
    a.order_stream(&s3).unwrap();
    dev.synchronize(&s3).unwrap();
    assert!(!a.is_transfer_pending().unwrap(), "the consumer stream did not wait for the replay");
}

/// Replays launched on one thread while another runs methods of the array
/// they captured: each replay and each method run one after the other on
/// the device copy, whatever the interleaving of the two threads.
fn replays_on_another_thread_are_ordered_with_the_array_methods<D: Device>(dev: &Arc<D>) {
    let _serial = shared();
    let (s1, s2) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
    const LEN: usize = 1 << 20;
    let mut a = MemArray::<f64, 1, D>::zeros(dev, [LEN]).unwrap();
    a.move_to(Location::Device, &s1, Transfer::Sync, None).unwrap();
    let capture = dev.begin_capture(&s2, CaptureMode::ThreadLocal).unwrap();
    a.add_index(capture.stream(), None).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    // Kernels and replays both add the index: no update may be lost.
    let rounds = rounds().clamp(4, 60);
    std::thread::scope(|scope| {
        scope.spawn(|| (0..rounds).for_each(|_| exec.launch(&s2).unwrap()));
        (0..rounds).for_each(|_| a.add_index(&s1, None).unwrap());
    });
    a.move_to(Location::Host, &s1, Transfer::Sync, None).unwrap();
    for i in [1, LEN / 3, LEN - 1] {
        let want = (2 * rounds * i) as f64; // exact: below 2^53
        assert_eq!(a.get([i], None).unwrap(), want, "{rounds} kernels and {rounds} replays at {i}: updates were lost");
    }
    // A replay launched while a long upload is being enqueued runs wholly
    // before or wholly after it: the array is all zeros or all indices.
    let zeros = vec![0.0f64; 8 * LEN];
    let mut b = MemArray::<f64, 1, D>::zeros(dev, [8 * LEN]).unwrap();
    b.move_to(Location::Device, &s1, Transfer::Sync, None).unwrap();
    let capture = dev.begin_capture(&s2, CaptureMode::ThreadLocal).unwrap();
    b.add_index(capture.stream(), None).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    for round in 0..rounds.min(8) {
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(1)); // inside the upload, most rounds
                exec.launch(&s2).unwrap();
            });
            b.upload_from_slice(&zeros, &s1, None).unwrap();
        });
        b.move_to(Location::Host, &s1, Transfer::Sync, None).unwrap();
        let v = b.as_slice(None).unwrap();
        let after = v[1] == 1.0;
        let torn = (1..v.len()).step_by(4099).find(|&i| v[i] != if after { i as f64 } else { 0.0 });
        assert_eq!(torn, None, "round {round}: a replay ran in the middle of an upload (element 1 is {})", v[1]);
    }
    exec.wait();
}

// ---- item 5: after_replay keeps the old pending work --------------------------------------

/// `after_replay` on another stream than the array's pending work: the new
/// pending work comes after the old, so waiting for it waits for a copy
/// still queued behind a long kernel.
fn after_replay_on_another_stream_orders_after_the_old_pending_work<D: Device>(dev: &Arc<D>) {
    let _serial = shared();
    let (s1, s2) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
    const LEN: usize = 1 << 16;
    let mut a = MemArray::<f32, 1, D>::zeros(dev, [LEN]).unwrap();
    a.add_index(&s1, None).unwrap(); // the device copy holds i; the host copy is stale
    dev.synchronize(&s1).unwrap();
    let token = a.device_copy_token().unwrap();
    sleep_on(dev.as_ref(), &s1, 300);
    a.move_to(Location::Host, &s1, Transfer::Async, None).unwrap(); // pending on s1, behind the sleep
    a.after_replay(&s2, &token, false).unwrap();
    a.synchronize().unwrap();
    assert_eq!(a.get([LEN - 1], None).unwrap(), (LEN - 1) as f32, "after_replay forgot the pending copy on s1");
    // Inside a capture it is refused, and leaves the capture valid.
    let capture = dev.begin_capture(&s2, CaptureMode::ThreadLocal).unwrap();
    let refused = a.after_replay(capture.stream(), &token, false).unwrap_err();
    assert_eq!(graph_kind(&refused), Some(GraphErrorKind::NotCapturable), "{refused}");
    assert_eq!(graph_kind(&a.before_replay(capture.stream()).unwrap_err()), Some(GraphErrorKind::NotCapturable));
    assert_eq!(capture.end().unwrap().node_count().unwrap(), 0);
}

// ---- item 11: frees refused by a Global capture happen at its end --------------------------

/// A raw allocation (its address handed out) freed inside a `Global`
/// capture: its release waits for the device, which the capture forbids,
/// so it is deferred to the capture's end, not leaked.
fn raw_allocations_freed_in_a_global_capture_are_freed_when_it_ends<D: Device>(dev: &Arc<D>) {
    use gpuport::dynamic::{memory, raw};
    let _serial = exclusive();
    let any = gpuport::open(&dev.info().spec()).unwrap();
    let s = dev.create_stream().unwrap();
    let before = memory::statistics(&any).unwrap().0.current_bytes;
    let a = raw::alloc(&any, gpuport::MemoryKind::Device, 1 << 20).unwrap();
    assert!(memory::statistics(&any).unwrap().0.current_bytes >= before + (1 << 20));
    let capture = dev.begin_capture(&s, CaptureMode::Global).unwrap();
    drop(a);
    assert!(
        memory::statistics(&any).unwrap().0.current_bytes >= before + (1 << 20),
        "freed without the device wait the capture forbids"
    );
    drop(capture.end().unwrap());
    assert_eq!(
        memory::statistics(&any).unwrap().0.current_bytes,
        before,
        "the allocation freed inside the capture was never freed"
    );
}

mod cases {
    crate::arc_backend_tests!(
        an_upload_is_never_split_by_a_capture_begun_on_another_thread,
        events_and_launches_are_never_lost_to_a_capture_begun_on_another_thread,
        launches_of_one_executable_on_two_streams_do_not_overlap,
        replays_are_ordered_with_the_arrays_they_captured_by_default,
        replays_on_another_thread_are_ordered_with_the_array_methods,
        order_stream_waits_for_replays_not_taken_yet,
        after_replay_on_another_stream_orders_after_the_old_pending_work,
        raw_allocations_freed_in_a_global_capture_are_freed_when_it_ends,
    );
}
