//! Graphs (stream capture, replay, update, lifetimes), tested once for every
//! backend: `host` always, `cuda:0` and `rocm:0` (through the HIP-on-CUDA
//! shim) where present, skipped with a printed reason elsewhere.

mod common;

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::{Duration, Instant};

use gpuport::memory::{Allocator, CachingPool, MemoryDevice, PoolConfig};
use gpuport::{
    builtin, Buffer, CaptureMode, CaptureStatus, Device, DeviceMemory, Error, GraphErrorKind, KernelArgs, LaunchConfig,
    ModuleSource, Stream,
};

const N: usize = 1024;

/// A capture in `CaptureMode::Global` refuses device-wide waits on every
/// thread (the safe copies' synchronize of the default stream included), so
/// the one test that uses it runs alone; the others capture in
/// `ThreadLocal` mode and run side by side.
static SERIAL: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    SERIAL.read().unwrap_or_else(|p| p.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    SERIAL.write().unwrap_or_else(|p| p.into_inner())
}

fn kernel<D: Device>(d: &D, name: &str) -> gpuport::Kernel<D::B> {
    d.kernel(&d.load_module(ModuleSource::Builtin).unwrap(), name).unwrap()
}

/// Enqueues `fill_u32(buf, N, value)` on `stream`; the arguments keep `buf`'s owner.
fn fill<D: Device>(d: &D, stream: &Stream<D::B>, buf: &Buffer<D::B>, value: u32) {
    let k = kernel(d, builtin::FILL_U32);
    let mut args = KernelArgs::new();
    args.push_buffer(buf).push(&(N as u64)).push(&value);
    let cfg = d.default_launch_config(&k, N).unwrap();
    // SAFETY: the arguments match fill_u32; `buf` holds N u32s and its owner
    // travels with the arguments (kept by the stream's work or the graph).
    unsafe { d.launch(&k, cfg, &args, stream) }.unwrap();
}

/// Enqueues the busy-wait kernel for `ms` milliseconds.
fn sleep<D: Device>(d: &D, stream: &Stream<D::B>, ms: u64) {
    let k = kernel(d, builtin::SLEEP_NS);
    let mut args = KernelArgs::new();
    args.push(&(ms * 1_000_000));
    // SAFETY: one u64 argument; touches no memory.
    unsafe { d.launch(&k, LaunchConfig::linear(1, 1), &args, stream) }.unwrap();
}

fn u32s<D: Device>(d: &D, buf: &Buffer<D::B>) -> Vec<u32> {
    let mut out = vec![0u8; buf.len()];
    d.copy_to_host(buf, 0, &mut out).unwrap();
    out.chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect()
}

fn graph_kind(e: &Error) -> Option<GraphErrorKind> {
    match e {
        Error::Graph { kind, .. } => Some(*kind),
        _ => None,
    }
}

fn weak_owner<D: Device>(buf: &Buffer<D::B>) -> Weak<dyn std::any::Any + Send + Sync> {
    Arc::downgrade(&buf.owner().expect("every backend's buffers have an owner"))
}

// ---- capture and replay ------------------------------------------------------------

fn captured_work_runs_only_when_the_graph_is_launched_and_then_every_time<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let (mut a, mut b) = (d.alloc(4 * N).unwrap(), d.alloc(4 * N).unwrap());
    d.memset(&mut a, 0, 4 * N, 0).unwrap();
    d.memset(&mut b, 0, 4 * N, 0).unwrap();

    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    assert_eq!(capture.status().unwrap(), CaptureStatus::Active);
    assert_eq!(d.capture_status(&s).unwrap(), CaptureStatus::Active);
    fill(d, capture.stream(), &a, 7);
    // SAFETY: both buffers outlive the graph (dropped at the end of the test).
    unsafe { d.copy_device_async(&a, 0, &b, 0, 4 * N, capture.stream()) }.unwrap();
    // SAFETY: as above.
    unsafe { d.memset_async(&a, 0, 4, 0xFF, capture.stream()) }.unwrap();
    let graph = capture.end().unwrap();
    assert_eq!(d.capture_status(&s).unwrap(), CaptureStatus::None);
    assert!(graph.node_count().unwrap() >= 3, "{graph:?}");

    d.synchronize(&s).unwrap();
    assert!(u32s(d, &a).iter().all(|&x| x == 0), "captured work ran at capture time");
    let exec = graph.instantiate().unwrap();
    for round in 0..3 {
        d.memset(&mut b, 0, 4 * N, 0).unwrap();
        exec.launch(&s).unwrap();
        d.synchronize(&s).unwrap();
        let (got_a, got_b) = (u32s(d, &a), u32s(d, &b));
        assert!(got_b.iter().all(|&x| x == 7), "round {round}: the copy node");
        assert_eq!(got_a[0], u32::MAX, "round {round}: the memset node");
        assert!(got_a[1..].iter().all(|&x| x == 7), "round {round}: the kernel node");
    }
    // Another stream of the device replays it too.
    let other = d.create_stream().unwrap();
    d.memset(&mut b, 0, 4 * N, 0).unwrap();
    exec.launch(&other).unwrap();
    d.synchronize(&other).unwrap();
    assert!(u32s(d, &b).iter().all(|&x| x == 7));
}

fn events_recorded_and_waited_inside_a_capture_become_part_of_the_graph<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let mut a = d.alloc(4 * N).unwrap();
    d.memset(&mut a, 0, 4 * N, 0).unwrap();
    let event = d.create_event().unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    fill(d, capture.stream(), &a, 3);
    d.record_event(&event, capture.stream()).unwrap();
    d.wait_event(capture.stream(), &event).unwrap();
    fill(d, capture.stream(), &a, 4);
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &a).iter().all(|&x| x == 4));
}

// ---- lifetimes --------------------------------------------------------------------

/// A buffer dropped while a graph uses it stays allocated until the last
/// executable graph goes, and replays still write it: the copy out of it
/// proves the memory was not reused.
fn a_buffer_dropped_while_a_graph_uses_it_stays_alive_until_the_graph_goes<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let mut out = d.alloc(4 * N).unwrap();
    d.memset(&mut out, 0, 4 * N, 0).unwrap();
    let temp = d.alloc(4 * N).unwrap();
    let weak = weak_owner::<D>(&temp);

    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    fill(d, capture.stream(), &temp, 11); // kept through KernelArgs::push_buffer
                                          // SAFETY: `temp` is kept by the graph (its owner); `out` outlives it.
    unsafe { d.copy_device_async(&temp, 0, &out, 0, 4 * N, capture.stream()) }.unwrap();
    let graph = capture.end().unwrap();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    drop(temp);
    assert!(weak.upgrade().is_some(), "the graph let the dropped buffer's memory go");

    // Memory allocated now must not be the dropped buffer's.
    let mut fresh = d.alloc(4 * N).unwrap();
    d.memset(&mut fresh, 0, 4 * N, 0x5A).unwrap();
    exec.launch(&s).unwrap();
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &out).iter().all(|&x| x == 11));
    assert!(u32s(d, &fresh).iter().all(|&x| x == 0x5A5A_5A5A), "a replay wrote into memory handed out again");

    drop(exec);
    assert!(weak.upgrade().is_none(), "the memory outlived the last executable graph");
}

/// Only the kernel's arguments name the buffer: `push_buffer` keeps it.
fn launch_arguments_keep_their_buffers_alive_in_a_graph<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let temp = d.alloc(4 * N).unwrap();
    let weak = weak_owner::<D>(&temp);
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    fill(d, capture.stream(), &temp, 1);
    let graph = capture.end().unwrap();
    drop(temp);
    assert!(weak.upgrade().is_some(), "a buffer named only in launch arguments was released");
    let exec = graph.instantiate().unwrap();
    drop(graph);
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    drop(exec);
    assert!(weak.upgrade().is_none());
}

/// Dropping an executable graph waits for its launches before what they
/// use is released.
fn dropping_an_executable_graph_waits_for_its_launches<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let mut out = d.alloc(4 * N).unwrap();
    d.memset(&mut out, 0, 4 * N, 0).unwrap();
    let temp = d.alloc(4 * N).unwrap();
    let weak = weak_owner::<D>(&temp);
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    sleep(d, capture.stream(), 200);
    fill(d, capture.stream(), &temp, 9);
    // SAFETY: `temp` is kept by the graph; `out` outlives it.
    unsafe { d.copy_device_async(&temp, 0, &out, 0, 4 * N, capture.stream()) }.unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    drop(temp);
    let start = Instant::now();
    exec.launch(&s).unwrap();
    drop(exec);
    assert!(start.elapsed() >= Duration::from_millis(150), "the drop did not wait for the launch");
    assert!(weak.upgrade().is_none());
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &out).iter().all(|&x| x == 9));
}

fn capture_keep_alive_holds_what_it_is_given<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let buf = d.alloc(64).unwrap();
    let token: Arc<dyn std::any::Any + Send + Sync> = Arc::new(5u32);
    let weak = Arc::downgrade(&token);
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    capture.keep_alive(token);
    capture.keep(&buf).unwrap();
    let graph = capture.end().unwrap();
    assert!(graph.kept_alive() >= 2);
    assert!(weak.upgrade().is_some());
    drop(graph);
    assert!(weak.upgrade().is_none());
}

// ---- errors -----------------------------------------------------------------------

fn calls_that_wait_inside_a_capture_are_refused_and_the_capture_survives<D: Device>(d: &D) {
    let _serial = exclusive();
    let s = d.create_stream().unwrap();
    let mut a = d.alloc(4 * N).unwrap();
    d.memset(&mut a, 0, 4 * N, 0).unwrap();
    let capture = d.begin_capture(&s, CaptureMode::Global).unwrap();
    fill(d, capture.stream(), &a, 5);
    let refused = |r: gpuport::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(graph_kind(&e), Some(GraphErrorKind::SynchronousCall), "{what}: {e}");
    };
    refused(d.synchronize(&s), "synchronize the capturing stream");
    refused(d.is_idle(&s).map(drop), "query the capturing stream");
    refused(d.synchronize_device(), "synchronize the device");
    let mut host = vec![0u8; 16];
    refused(d.copy_to_host(&a, 0, &mut host), "a blocking copy on the default stream");
    assert_eq!(capture.status().unwrap(), CaptureStatus::Active, "a refused call invalidated the capture");
    fill(d, capture.stream(), &a, 6);
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &a).iter().all(|&x| x == 6));
}

/// What gpuport does on its own behalf during someone's global capture
/// (frees, destroys, event waits and queries, mostly from drops, which a
/// Python finalizer can run at any moment, on any thread) must not
/// invalidate it: CUDA and HIP invalidate a global capture on such a call
/// from any thread whose capture mode is not relaxed.
fn cleanup_during_a_global_capture_leaves_it_valid<D: Device>(d: &D) {
    let _serial = exclusive();
    let s = d.create_stream().unwrap();
    let mut a = d.alloc(4 * N).unwrap();
    d.memset(&mut a, 0, 4 * N, 0).unwrap();
    let other = d.create_stream().unwrap();
    let (freed_here, freed_elsewhere) = (d.alloc(4 * N).unwrap(), d.alloc(4 * N).unwrap());
    let pinned = d.alloc_pinned(4096).unwrap();
    let done = d.create_event().unwrap();
    fill(d, &other, &freed_here, 1);
    d.record_event(&done, &other).unwrap();
    let old_graph = {
        let capture = d.begin_capture(&other, CaptureMode::ThreadLocal).unwrap();
        fill(d, capture.stream(), &freed_here, 2);
        capture.end().unwrap()
    };
    let old_exec = old_graph.instantiate().unwrap();
    old_exec.launch(&other).unwrap();

    let capture = d.begin_capture(&s, CaptureMode::Global).unwrap();
    fill(d, capture.stream(), &a, 3);
    d.synchronize_event(&done).unwrap();
    assert!(d.event_is_complete(&done).unwrap());
    drop(done);
    drop((old_exec, old_graph));
    drop(freed_here);
    drop(pinned);
    drop(other);
    std::thread::spawn(move || drop(freed_elsewhere)).join().unwrap();
    assert_eq!(capture.status().unwrap(), CaptureStatus::Active, "gpuport's own cleanup invalidated the capture");
    fill(d, capture.stream(), &a, 4);
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &a).iter().all(|&x| x == 4));
}

/// A stream-ordered allocation on a capturing GPU stream is refused before
/// the driver sees it (it would be a node of the graph, freed outside it),
/// and the capture goes on. Host memory is not stream-ordered: the host
/// backend allocates.
fn stream_ordered_allocations_are_refused_in_a_capture<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    let got = d.alloc_async(4096, capture.stream());
    if d.info().backend == gpuport::BackendKind::Host {
        assert_eq!(got.unwrap().len(), 4096);
    } else {
        let e = got.expect_err("a stream-ordered allocation inside a capture");
        assert_eq!(graph_kind(&e), Some(GraphErrorKind::NotCapturable), "{e}");
    }
    assert_eq!(capture.status().unwrap(), CaptureStatus::Active, "the refusal invalidated the capture");
    assert_eq!(capture.end().unwrap().node_count().unwrap(), 0);
    let after = d.alloc_async(4096, &s).unwrap();
    assert_eq!(after.len(), 4096);
}

fn a_relaxed_capture_lets_other_streams_wait<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let mut a = d.alloc(4 * N).unwrap();
    d.memset(&mut a, 0, 4 * N, 1).unwrap();
    let capture = d.begin_capture(&s, CaptureMode::Relaxed).unwrap();
    fill(d, capture.stream(), &a, 2);
    // Blocking work on the default stream is allowed beside a relaxed capture.
    let mut host = vec![0u8; 4 * N];
    d.copy_to_host(&a, 0, &mut host).unwrap();
    assert!(host.iter().all(|&x| x == 1));
    let e = d.synchronize(&s).expect_err("the capturing stream itself still refuses");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::SynchronousCall));
    if d.info().backend != gpuport::BackendKind::Host {
        // CUDA invalidates a capture of any mode when its device is synchronized.
        let e = d.synchronize_device().expect_err("a device-wide wait beside a relaxed GPU capture");
        assert_eq!(graph_kind(&e), Some(GraphErrorKind::SynchronousCall));
    }
    assert_eq!(capture.status().unwrap(), CaptureStatus::Active, "a refused call invalidated the capture");
    capture.end().unwrap();
}

/// An event recorded inside a capture is recorded only when the graph
/// runs: its query, host wait and timing are `CapturedEvent`, a wait
/// outside the capture is `Isolation`, all without invalidating the
/// capture, and still after the graph is gone (CUDA crashed inside
/// `cuEventQuery` there), until the event is recorded outside a capture.
fn an_event_recorded_in_a_capture_is_refused_until_recorded_outside<D: Device>(d: &D) {
    let _serial = shared();
    let (s, other) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let event = d.create_event().unwrap();
    let capture = d.begin_capture(&s, CaptureMode::Relaxed).unwrap();
    d.record_event(&event, capture.stream()).unwrap();
    let refused = |what: &str, kind: GraphErrorKind| {
        let check = |r: gpuport::Result<()>, call: &str| {
            let e = r.expect_err(&format!("{what}: {call}"));
            let expected = if call == "wait_event" { GraphErrorKind::Isolation } else { kind };
            assert_eq!(graph_kind(&e), Some(expected), "{what}: {call}: {e}");
        };
        check(d.event_is_complete(&event).map(drop), "event_is_complete");
        check(d.synchronize_event(&event), "synchronize_event");
        check(d.elapsed_ms(&event, &event).map(drop), "elapsed_ms");
        check(d.wait_event(&other, &event), "wait_event");
    };
    refused("during the capture", GraphErrorKind::CapturedEvent);
    assert_eq!(capture.status().unwrap(), CaptureStatus::Active, "a refused call invalidated the capture");
    drop(capture.end().unwrap());
    refused("after the graph is gone", GraphErrorKind::CapturedEvent);
    d.record_event(&event, &s).unwrap();
    d.synchronize_event(&event).unwrap();
    assert!(d.event_is_complete(&event).unwrap());
    d.wait_event(&other, &event).unwrap();
}

fn capturing_a_capturing_stream_or_the_default_stream_is_refused<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let e = d.begin_capture(d.default_stream(), CaptureMode::ThreadLocal).expect_err("default stream");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::DefaultStream), "{e}");
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    let e = d.begin_capture(&s, CaptureMode::ThreadLocal).expect_err("twice");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::AlreadyCapturing), "{e}");
    assert_eq!(capture.status().unwrap(), CaptureStatus::Active);
    assert_eq!(capture.end().unwrap().node_count().unwrap(), 0);
}

fn a_dropped_capture_is_discarded_and_the_stream_runs_work_again<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let mut a = d.alloc(4 * N).unwrap();
    d.memset(&mut a, 0, 4 * N, 0).unwrap();
    {
        let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
        fill(d, capture.stream(), &a, 8);
    } // dropped without end
    assert_eq!(d.capture_status(&s).unwrap(), CaptureStatus::None);
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &a).iter().all(|&x| x == 0), "discarded work ran");
    fill(d, &s, &a, 12);
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &a).iter().all(|&x| x == 12));
    d.synchronize_device().unwrap();
}

/// Waiting inside a capture for an event recorded outside it crosses the
/// capture's boundary: the capture is invalidated (on CUDA by the driver,
/// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`), ending it is a typed error, and
/// the stream works again afterwards.
fn an_invalidated_capture_ends_with_a_typed_error_and_the_stream_stays_usable<D: Device>(d: &D) {
    let _serial = shared();
    if common::provokes_driver_errors(d.info().backend, "a capture isolation error") {
        return;
    }
    let s = d.create_stream().unwrap();
    let mut a = d.alloc(4 * N).unwrap();
    d.memset(&mut a, 0, 4 * N, 0).unwrap();
    let outside = d.create_event().unwrap();
    d.record_event(&outside, d.default_stream()).unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    fill(d, capture.stream(), &a, 1);
    assert!(d.wait_event(capture.stream(), &outside).is_err(), "a wait across the boundary was accepted");
    assert_eq!(capture.status().unwrap(), CaptureStatus::Invalidated);
    let e = capture.end().expect_err("an invalidated capture gave a graph");
    assert_eq!(graph_kind(&e), Some(GraphErrorKind::Invalidated), "{e}");
    assert_eq!(d.capture_status(&s).unwrap(), CaptureStatus::None);
    fill(d, &s, &a, 2);
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &a).iter().all(|&x| x == 2));
}

fn update_takes_new_parameters_and_refuses_another_shape<D: Device>(d: &D) {
    let _serial = shared();
    let s = d.create_stream().unwrap();
    let (mut a, b) = (d.alloc(4 * N).unwrap(), d.alloc(4 * N).unwrap());
    d.memset(&mut a, 0, 4 * N, 0).unwrap();
    let capture_fill = |buf: &Buffer<D::B>, value: u32| {
        let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
        fill(d, capture.stream(), buf, value);
        capture.end().unwrap()
    };
    let mut exec = capture_fill(&a, 1).instantiate().unwrap();
    exec.update(&capture_fill(&a, 2)).unwrap();
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &a).iter().all(|&x| x == 2), "the update's value");

    let other_shape = {
        let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
        fill(d, capture.stream(), &b, 3);
        fill(d, capture.stream(), &a, 3);
        capture.end().unwrap()
    };
    if !common::provokes_driver_errors(d.info().backend, "a refused graph update") {
        let e = exec.update(&other_shape).expect_err("an update to another shape");
        assert_eq!(graph_kind(&e), Some(GraphErrorKind::UpdateRefused), "{e}");
    }
    d.memset(&mut a, 0, 4 * N, 0).unwrap();
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    assert!(u32s(d, &a).iter().all(|&x| x == 2), "a refused update changed the graph");
}

fn a_graph_launched_on_another_device_is_refused<D: Device>(d: &D) {
    let _serial = shared();
    let count = D::count().unwrap_or(1);
    if count < 2 {
        use std::io::Write;
        let name = std::thread::current().name().unwrap_or("?").to_string();
        let _ = writeln!(std::io::stderr(), "skipped: {name}: {} has one device", d.info().backend);
        return;
    }
    let other = D::open(1 - d.info().ordinal.min(1)).unwrap();
    let s = d.create_stream().unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    sleep(d, capture.stream(), 1);
    let exec = capture.end().unwrap().instantiate().unwrap();
    let e = exec.launch(&other.create_stream().unwrap()).expect_err("another device's stream");
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
}

// ---- the caching pool -------------------------------------------------------------

fn the_caching_pool_keeps_its_events_out_of_graphs<D: MemoryDevice>(d: &Arc<D>) {
    let _serial = shared();
    let pool = Arc::new(CachingPool::<D::B>::new(d.clone(), PoolConfig { validate: true, ..PoolConfig::default() }));
    let alloc = Allocator::from_arc(pool.clone());
    let s = d.create_stream().unwrap();
    let early = alloc.alloc(4096, &s).unwrap();
    let used_elsewhere = alloc.alloc(4096, &s).unwrap();
    {
        let other = d.create_stream().unwrap();
        let _use = used_elsewhere.use_on(&other).unwrap(); // a free with an event
    }
    let before = pool.report();

    let capture = d.begin_capture(&s, CaptureMode::Relaxed).unwrap();
    // From the capture's graph pool (tests/graph_pools.rs has its rules).
    let in_capture = alloc.alloc(4096, &s).expect("a pool allocation on a capturing stream");
    assert_ne!(in_capture.device_ptr(), early.device_ptr());
    drop(early); // held back: no event may be recorded into the capture
    drop(used_elsewhere);
    pool.trim(usize::MAX).unwrap(); // fences skip the capturing stream
    let graph = capture.end().unwrap();
    assert_eq!(graph.node_count().unwrap(), 0, "the pool recorded work into the capture");
    assert_eq!(before.counters.frees, pool.report().counters.frees, "a free ran during the capture");

    // After the capture the held-back frees happen and the pool serves again.
    let again = alloc.alloc(4096, &s).unwrap();
    assert_eq!(pool.report().counters.frees, before.counters.frees + 2);
    drop(again);
    drop(in_capture);
    drop(graph);
    d.synchronize(&s).unwrap();
    pool.trim(0).unwrap();
    assert_eq!(pool.report().in_use, 0);
}

// ---- MemArray kernels ----------------------------------------------------------------

/// A `MemArray`'s kernel methods on a capturing stream are captured: the
/// graph keeps the device copy it writes after the array is dropped, and
/// `before_replay`/`after_replay` order replays with the array's own work.
fn memarray_kernels_are_captured_and_the_graph_keeps_the_device_copy<D: Device>(dev: &Arc<D>) {
    use gpuport::array::{Location, MemArray, Transfer};
    let _serial = shared();
    let d = dev.as_ref();
    let s = d.create_stream().unwrap();
    let mut a = MemArray::<f32, 1, D>::from_vec(dev, [N], vec![0.0; N]).unwrap();
    let refused = |e: Error| matches!(e, Error::Graph { kind: GraphErrorKind::NotCapturable, .. });

    // Host-resident data: refused (the copy to the device would be captured).
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    assert!(refused(a.add_index(capture.stream(), None).unwrap_err()));
    assert_eq!(capture.status().unwrap(), CaptureStatus::Active, "the refusal left the capture valid");
    drop(capture);

    a.move_to(Location::Device, &s, Transfer::Sync, None).unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    a.add_index(capture.stream(), None).unwrap();
    assert!(refused(a.move_to(Location::Host, capture.stream(), Transfer::Async, None).unwrap_err()));
    let exec = capture.end().unwrap().instantiate().unwrap();
    let written = a.device_copy_token().unwrap();
    for _ in 0..3 {
        a.before_replay(&s).unwrap();
        exec.launch(&s).unwrap();
        a.after_replay(&s, &written, true).unwrap();
    }
    a.move_to(Location::Host, &s, Transfer::Sync, None).unwrap();
    assert_eq!(a.get([N - 1], None).unwrap(), 3.0 * (N - 1) as f32, "three replays, each one add_index");

    // scale and axpy (which reads `b`) are captured too: a = 2a + b per replay.
    let mut b = MemArray::<f32, 1, D>::from_vec(dev, [N], vec![1.0; N]).unwrap();
    b.move_to(Location::Device, &s, Transfer::Sync, None).unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    a.scale(2.0, capture.stream(), None).unwrap();
    a.axpy(1.0, &mut b, capture.stream(), None).unwrap();
    let both = capture.end().unwrap().instantiate().unwrap();
    a.before_replay(&s).unwrap();
    b.before_replay(&s).unwrap();
    both.launch(&s).unwrap();
    a.after_replay(&s, &written, true).unwrap();
    a.move_to(Location::Host, &s, Transfer::Sync, None).unwrap();
    assert_eq!(a.get([N - 1], None).unwrap(), 6.0 * (N - 1) as f32 + 1.0, "one replay of scale and axpy");
    drop(both);

    // Dropped array: the graph keeps its device copy until the last executable goes.
    let weak = Arc::downgrade(&a.device_parts(None).unwrap().1);
    drop(written);
    drop(a);
    assert!(weak.upgrade().is_some(), "the graph let the dropped array's device copy go");
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    drop(exec);
    assert!(weak.upgrade().is_none(), "the device copy outlived the last executable graph");
}

// ---- instantiation ------------------------------------------------------------------

mod cases {
    use super::*;
    backend_tests!(
        captured_work_runs_only_when_the_graph_is_launched_and_then_every_time,
        events_recorded_and_waited_inside_a_capture_become_part_of_the_graph,
        a_buffer_dropped_while_a_graph_uses_it_stays_alive_until_the_graph_goes,
        launch_arguments_keep_their_buffers_alive_in_a_graph,
        dropping_an_executable_graph_waits_for_its_launches,
        capture_keep_alive_holds_what_it_is_given,
        calls_that_wait_inside_a_capture_are_refused_and_the_capture_survives,
        cleanup_during_a_global_capture_leaves_it_valid,
        stream_ordered_allocations_are_refused_in_a_capture,
        a_relaxed_capture_lets_other_streams_wait,
        an_event_recorded_in_a_capture_is_refused_until_recorded_outside,
        capturing_a_capturing_stream_or_the_default_stream_is_refused,
        a_dropped_capture_is_discarded_and_the_stream_runs_work_again,
        an_invalidated_capture_ends_with_a_typed_error_and_the_stream_stays_usable,
        update_takes_new_parameters_and_refuses_another_shape,
        a_graph_launched_on_another_device_is_refused,
    );

    crate::arc_backend_tests!(
        memarray_kernels_are_captured_and_the_graph_keeps_the_device_copy,
        the_caching_pool_keeps_its_events_out_of_graphs,
    );
}
