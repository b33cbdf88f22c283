//! The caching pool under stream capture: a capture's allocations come from
//! its graph pool, nobody else gets that memory while the graph lives, and
//! it comes back once the graph is gone (`src/memory/pool/graph_pools.rs`).
//! Tested on `host`, and on `cuda:0` and `rocm:0` (the HIP-on-CUDA shim)
//! where present; skipped with a printed reason elsewhere.

mod common;

use std::sync::Arc;

use gpuport::memory::history::{DeviceKey, Snapshot};
use gpuport::memory::{Allocator, CachingPool, DeviceAllocation, MemoryDevice, PoolConfig};
use gpuport::{
    builtin, Backend, CaptureMode, Device, DeviceMemory, Error, GraphErrorKind, KernelArgs, ModuleSource, Stream,
};

const N: usize = 1024;

/// Enqueues `fill_u32(mem, N, value)` on `stream`.
fn fill<D: Device, M: DeviceMemory<B = D::B>>(d: &D, stream: &Stream<D::B>, mem: &M, value: u32) {
    let k = d.kernel(&d.load_module(ModuleSource::Builtin).unwrap(), builtin::FILL_U32).unwrap();
    let mut args = KernelArgs::new();
    args.push_buffer(mem).push(&(N as u64)).push(&value);
    let cfg = d.default_launch_config(&k, N).unwrap();
    // SAFETY: the arguments match fill_u32; `mem` holds N u32s and the
    // caller keeps it alive until the stream (or the graph) has run.
    unsafe { d.launch(&k, cfg, &args, stream) }.unwrap();
}

fn u32s<D: Device, M: DeviceMemory<B = D::B>>(d: &D, mem: &M) -> Vec<u32> {
    let mut out = vec![0u8; N * 4];
    d.copy_to_host(mem, 0, &mut out).unwrap();
    out.chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect()
}

fn pool<D: MemoryDevice>(d: &Arc<D>, size_limit: Option<usize>) -> (Arc<CachingPool<D::B>>, Allocator<D::B>) {
    let config = PoolConfig { validate: true, size_limit, ..PoolConfig::default() };
    let pool = Arc::new(CachingPool::<D::B>::new(d.clone(), config));
    let alloc = Allocator::from_arc(pool.clone());
    (pool, alloc)
}

/// Allocations outside any capture, `count` of them, on `stream`.
fn outside<D: MemoryDevice>(
    alloc: &Allocator<D::B>,
    stream: &Stream<D::B>,
    count: usize,
) -> Vec<DeviceAllocation<D::B>> {
    (0..count).map(|_| alloc.alloc(N * 4, stream).unwrap()).collect()
}

fn a_capture_allocates_from_its_graph_pool_and_nobody_else_gets_that_memory_while_the_graph_lives<D: MemoryDevice>(
    d: &Arc<D>,
) {
    let (pool, alloc) = pool(d, None);
    let s = d.create_stream().unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    let first = alloc.alloc(N * 4, capture.stream()).expect("a capture's allocation");
    fill(&**d, capture.stream(), &first, 7);
    let first_ptr = first.device_ptr();
    drop(first); // freed inside the capture: back to the graph pool
    let kept = alloc.alloc(N * 4, capture.stream()).unwrap();
    assert_eq!(kept.device_ptr(), first_ptr, "a block freed in the capture serves the capture again");
    fill(&**d, capture.stream(), &kept, 9);
    let graph = capture.end().unwrap();
    let exec = graph.instantiate().unwrap();
    let graph_ptr = kept.device_ptr();
    drop(kept); // parked while the graph lives

    let others = outside::<D>(&alloc, &s, 8);
    assert!(
        others.iter().all(|o| o.device_ptr() != graph_ptr),
        "the graph's memory was handed out while the graph can still replay into it"
    );
    for o in &others {
        fill(&**d, &s, o, 1);
    }
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    for o in &others {
        assert!(u32s(&**d, o).iter().all(|&v| v == 1), "a replay wrote into memory handed out after the capture");
    }
    let counters = pool.report().counters;
    assert_eq!((counters.graph_pools, counters.graph_pools_released), (1, 0));

    drop(exec);
    drop(graph);
    drop(others);
    // The graph is gone: its memory serves everyone again.
    let again = outside::<D>(&alloc, &s, 16);
    assert_eq!(pool.report().counters.graph_pools_released, 1);
    assert!(again.iter().any(|a| a.device_ptr() == graph_ptr), "the graph's memory never came back");
    drop(again);
    d.synchronize(&s).unwrap();
    pool.trim(0).unwrap();
    assert_eq!(pool.report().in_use, 0);
}

fn a_block_still_held_when_its_graph_goes_stays_valid_until_freed<D: MemoryDevice>(d: &Arc<D>) {
    let (pool, alloc) = pool(d, None);
    let s = d.create_stream().unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    let output = alloc.alloc(N * 4, capture.stream()).unwrap();
    fill(&**d, capture.stream(), &output, 5);
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&s).unwrap();
    drop(exec); // waits for its launch; the graph is gone, `output` is not
    let others = outside::<D>(&alloc, &s, 16);
    assert!(others.iter().all(|o| o.device_ptr() != output.device_ptr()), "a live block was handed out again");
    assert_eq!(pool.report().counters.graph_pools_released, 1);
    assert!(u32s(&**d, &output).iter().all(|&v| v == 5), "the graph's output changed after the graph went");
    drop(others);
    drop(output);
    d.synchronize(&s).unwrap();
    pool.trim(0).unwrap();
    assert_eq!(pool.report().in_use, 0);
}

fn out_of_memory_in_a_capture_is_a_typed_error_and_the_capture_and_stream_go_on<D: MemoryDevice>(d: &Arc<D>) {
    let limit = 4 << 20;
    let (pool, alloc) = pool(d, Some(limit));
    let s = d.create_stream().unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    let small = alloc.alloc(N * 4, capture.stream()).unwrap();
    fill(&**d, capture.stream(), &small, 3);
    let e = alloc.alloc(2 * limit, capture.stream()).expect_err("more than the pool's limit");
    assert!(
        matches!(e, Error::Graph { kind: GraphErrorKind::OutOfMemory, .. }),
        "expected a graph out-of-memory error, got {e}"
    );
    let exec = capture.end().expect("the capture survives the failed allocation").instantiate().unwrap();
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
    assert!(u32s(&**d, &small).iter().all(|&v| v == 3));
    drop(small);
    drop(exec);
    let after = alloc.alloc(N * 4, &s).expect("the stream allocates again after the capture");
    fill(&**d, &s, &after, 4);
    d.synchronize(&s).unwrap();
    assert!(u32s(&**d, &after).iter().all(|&v| v == 4));
    drop(after);
    assert_eq!(pool.report().counters.oom_failures, 1);
}

fn two_captures_get_two_graph_pools<D: MemoryDevice>(d: &Arc<D>) {
    let (pool, alloc) = pool(d, None);
    let (s1, s2) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let c1 = d.begin_capture(&s1, CaptureMode::ThreadLocal).unwrap();
    let a = alloc.alloc(N * 4, c1.stream()).unwrap();
    let (a_ptr, exec1) = (a.device_ptr(), {
        fill(&**d, c1.stream(), &a, 1);
        drop(a); // freed inside the first capture
        c1.end().unwrap().instantiate().unwrap()
    });
    let c2 = d.begin_capture(&s2, CaptureMode::ThreadLocal).unwrap();
    let b = alloc.alloc(N * 4, c2.stream()).unwrap();
    assert_ne!(b.device_ptr(), a_ptr, "a second capture got the first graph's memory");
    fill(&**d, c2.stream(), &b, 2);
    let exec2 = c2.end().unwrap().instantiate().unwrap();
    assert_eq!(pool.report().counters.graph_pools, 2);
    exec1.launch(&s1).unwrap();
    exec2.launch(&s2).unwrap();
    d.synchronize(&s1).unwrap();
    d.synchronize(&s2).unwrap();
    assert!(u32s(&**d, &b).iter().all(|&v| v == 2), "the first graph's replay wrote into the second's memory");
    drop((b, exec1, exec2));
    let _ = alloc.alloc(N * 4, &s1).unwrap();
    assert_eq!(pool.report().counters.graph_pools_released, 2);
}

fn a_pool_dropped_while_its_graph_lives_leaves_the_graphs_memory_allocated<D: MemoryDevice>(d: &Arc<D>) {
    let (pool, alloc) = pool(d, None);
    let s = d.create_stream().unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    let block = alloc.alloc(N * 4, capture.stream()).unwrap();
    fill(&**d, capture.stream(), &block, 6);
    let exec = capture.end().unwrap().instantiate().unwrap();
    drop(block);
    drop((alloc, pool)); // the pool goes; the graph still replays into its block
    exec.launch(&s).unwrap();
    d.synchronize(&s).unwrap();
}

/// Inside `without_waiting`, an allocation that would wait (for device
/// work after an out-of-memory, or on a capturing stream) is refused with
/// nothing changed, and the same call outside does what it always did; a
/// free that would is handed back, and made by `RefusedFrees::finish`.
fn allocations_without_waiting_are_refused_where_they_would_wait<D: MemoryDevice>(d: &Arc<D>) {
    use gpuport::memory::{without_waiting, would_wait};
    const MIB: usize = 1 << 20;
    let (pool, alloc) = pool(d, Some(8 * MIB));
    let s = d.create_stream().unwrap();
    let one = without_waiting(|| alloc.alloc(MIB, &s)).0.expect("a pool with room serves without waiting");
    let big = alloc.alloc(6 * MIB, &s).unwrap();
    let before = pool.report().counters;
    let e = without_waiting(|| alloc.alloc(4 * MIB, &s)).0.expect_err("past the limit");
    assert!(would_wait(&e), "the out-of-memory retry waits for the device: {e}");
    let after = pool.report().counters;
    assert_eq!((after.oom_retries, after.oom_failures), (before.oom_retries, before.oom_failures), "nothing changed");
    assert!(matches!(alloc.alloc(4 * MIB, &s), Err(Error::OutOfMemory { .. })), "outside: the usual error");
    drop((one, big));
    let pool = Arc::new(CachingPool::<D::B>::new(d.clone(), PoolConfig::default()));
    let alloc = Allocator::from_arc(pool.clone());
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    let e = without_waiting(|| alloc.alloc(MIB, capture.stream())).0.expect_err("a capturing stream");
    assert!(would_wait(&e), "{e}");
    let in_capture = alloc.alloc(MIB, capture.stream()).expect("outside: the capture's graph pool");
    // A free on a capturing stream follows the capture's rules: refused, made by `finish`.
    let ((), frees) = without_waiting(|| drop(in_capture));
    assert!(!frees.is_empty(), "a free on a capturing stream was made without waiting");
    let in_use = pool.report().in_use;
    frees.finish();
    assert!(pool.report().in_use < in_use, "the refused free was not made by finish");
    drop(capture.end().unwrap());
    // A plain free is made at once.
    let plain = alloc.alloc(MIB, &s).unwrap();
    let ((), frees) = without_waiting(|| drop(plain));
    assert!(frees.is_empty(), "{frees:?}");
    d.synchronize(&s).unwrap();
}

fn a_graph_pools_segments_carry_its_capture_id_in_reports_and_snapshots<D: MemoryDevice>(d: &Arc<D>) {
    let (pool, alloc) = pool(d, None);
    let s = d.create_stream().unwrap();
    let shared = alloc.alloc(N * 4, &s).unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    let id = d.capture_id(capture.stream()).unwrap().expect("a capturing stream has a capture id");
    let held = alloc.alloc(N * 4, capture.stream()).unwrap();
    let graph = capture.end().unwrap();
    let report = pool.report();
    let segment_of = |ptr: u64| {
        let seg = report.segment_map.iter().find(|g| g.address <= ptr && ptr < g.address + g.size as u64);
        seg.expect("a segment holds the block").clone()
    };
    assert_eq!(segment_of(held.device_ptr()).graph_capture, Some(id), "the graph pool's segment");
    assert_eq!(segment_of(shared.device_ptr()).graph_capture, None, "the shared segment");
    let key = DeviceKey { backend: <D::B as Backend>::KIND, ordinal: d.info().ordinal };
    let snapshot = Snapshot::of_pool(key, &report);
    let pool_id_of = |ptr: u64| {
        let seg = snapshot.segments.iter().find(|g| g.address <= ptr && ptr < g.address + g.total_size as u64);
        seg.expect("a snapshot segment holds the block").pool_id
    };
    assert_eq!(pool_id_of(held.device_ptr()), (id, 0), "PyTorch's id of a capture's private pool");
    assert_eq!(pool_id_of(shared.device_ptr()), (0, 0), "PyTorch's id of the default pool");

    let graph_ptr = held.device_ptr();
    drop((held, graph));
    // The graph is gone: once the pool takes its memory back, the segment is shared.
    drop(alloc.alloc(N * 4, &s).unwrap());
    assert_eq!(pool.report().counters.graph_pools_released, 1);
    assert_eq!(
        pool.report()
            .segment_map
            .iter()
            .find(|g| g.address <= graph_ptr && graph_ptr < g.address + g.size as u64)
            .map(|g| g.graph_capture),
        Some(None)
    );
    drop(shared);
    d.synchronize(&s).unwrap();
}

/// The pool counts its statistics itself (`Tally`, src/memory/stats.rs): a
/// free held back on a capturing stream counts as freed when `deallocate`
/// returns, as a statistics adaptor over the pool counts it, and not again
/// when the pool makes it after the capture.
fn a_free_held_back_in_a_capture_counts_as_freed_once<D: MemoryDevice>(d: &Arc<D>) {
    use gpuport::memory::MemoryResource;
    let (pool, alloc) = pool(d, None);
    let s = d.create_stream().unwrap();
    let (held, kept) = (alloc.alloc(N * 4, &s).unwrap(), alloc.alloc(N * 8, &s).unwrap());
    let before = pool.statistics().expect("the caching pool counts statistics");
    assert_eq!((before.current_count, before.current_bytes), (2, N * 12));
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    drop(held); // its stream captures: held back until the capture is over
    let during = pool.statistics().unwrap();
    assert_eq!((during.current_count, during.current_bytes), (1, N * 8), "freed for the caller: {during:?}");
    drop(capture.end().unwrap());
    let next = alloc.alloc(N * 4, &s).unwrap(); // makes the frees held back
    let after = pool.statistics().unwrap();
    assert_eq!((after.current_count, after.current_bytes), (2, N * 12), "the held-back free counted once: {after:?}");
    assert_eq!((after.total_count, after.peak_count, after.peak_bytes), (3, 2, N * 12));
    drop((next, kept));
    d.synchronize(&s).unwrap();
    assert_eq!(pool.statistics().unwrap().current_bytes, 0);
}

mod per_backend {
    crate::arc_backend_tests!(
        a_free_held_back_in_a_capture_counts_as_freed_once,
        a_capture_allocates_from_its_graph_pool_and_nobody_else_gets_that_memory_while_the_graph_lives,
        a_block_still_held_when_its_graph_goes_stays_valid_until_freed,
        out_of_memory_in_a_capture_is_a_typed_error_and_the_capture_and_stream_go_on,
        two_captures_get_two_graph_pools,
        a_pool_dropped_while_its_graph_lives_leaves_the_graphs_memory_allocated,
        allocations_without_waiting_are_refused_where_they_would_wait,
        a_graph_pools_segments_carry_its_capture_id_in_reports_and_snapshots,
    );
}

/// Observers are process-wide: this one counts only its own request size.
#[test]
fn out_of_memory_observers_are_told_once_per_failure_and_a_panicking_one_is_contained() {
    use gpuport::memory::{add_out_of_memory_observer, remove_out_of_memory_observer, MemoryResource};
    use std::sync::atomic::{AtomicUsize, Ordering};

    let d = gpuport::HostDevice::open(0).unwrap();
    let limit = 4 << 20;
    let pool =
        CachingPool::<gpuport::Host>::new(d.clone(), PoolConfig { size_limit: Some(limit), ..PoolConfig::default() });
    let unique = (8 << 20) + 7 * 512;
    let (seen, in_capture) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let panicking = add_out_of_memory_observer(move |e| {
        if e.requested == unique {
            panic!("an observer that panics");
        }
    });
    let (count, captured) = (seen.clone(), in_capture.clone());
    let counting = add_out_of_memory_observer(move |e| {
        if e.requested == unique {
            assert!(e.report.reserved <= limit, "{:?}", e.report);
            assert_eq!(e.device, "host");
            count.fetch_add(1, Ordering::Relaxed);
            captured.fetch_add(usize::from(e.in_capture), Ordering::Relaxed);
        }
    });
    let e = pool.allocate(unique, d.default_stream()).expect_err("past the limit");
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    assert_eq!(seen.load(Ordering::Relaxed), 1);
    let s = d.create_stream().unwrap();
    let capture = d.begin_capture(&s, CaptureMode::ThreadLocal).unwrap();
    let e = pool.allocate(unique, capture.stream()).expect_err("past the limit, in a capture");
    assert!(matches!(e, Error::Graph { kind: GraphErrorKind::OutOfMemory, .. }), "{e}");
    drop(capture.end().unwrap());
    assert_eq!((seen.load(Ordering::Relaxed), in_capture.load(Ordering::Relaxed)), (2, 1));
    assert!(pool.allocate(4096, d.default_stream()).is_ok(), "the pool serves after a failure");
    assert!(remove_out_of_memory_observer(panicking) && remove_out_of_memory_observer(counting));
    assert!(!remove_out_of_memory_observer(counting), "removed twice");
}
