//! The caching pool's expandable segments (`src/memory/pool/expandable.rs`),
//! once for every backend: `host` (emulated over one allocation),
//! `cuda:0` and `rocm:0` (the driver's virtual memory management; skipped
//! with a printed reason where the device is absent or lacks it).

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use gpuport::memory::{
    Allocator, CachingPool, DeviceStorage, Expandable, MemoryDevice, MemoryError, MemoryResource, PoolConfig, Storage,
};
use gpuport::{Backend, BackendKind, Device, DeviceMemory, Error, GrowableRange, MAX_RESERVATION};

const MIB: usize = 1 << 20;

/// Held by the tests that compare the device's memory in use before and
/// after: other tests of this binary must not allocate meanwhile.
static DEVICE_MEMORY: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    DEVICE_MEMORY.lock().unwrap_or_else(|p| p.into_inner())
}

fn config(reserve: usize) -> PoolConfig {
    PoolConfig { expandable: true, expandable_reserve: Some(reserve), validate: true, ..PoolConfig::default() }
}

/// A pool and an allocator over it.
type PoolAndAllocator<B> = (Arc<CachingPool<B>>, Allocator<B>);

/// An expandable pool on `d`, or `None` (printing why) where it fell back.
fn expandable_pool<D: MemoryDevice>(d: &Arc<D>, reserve: usize) -> Option<PoolAndAllocator<D::B>> {
    let pool = Arc::new(CachingPool::new(d.clone(), config(reserve)));
    match pool.report().expandable {
        Expandable::Virtual | Expandable::Emulated => Some((pool.clone(), Allocator::from_arc(pool))),
        other => {
            let _ = writeln!(std::io::stderr(), "skipped on {}: expandable segments {other}", d.info().spec());
            None
        }
    }
}

fn used<D: Device>(d: &D) -> usize {
    let info = d.memory_info().unwrap();
    info.total - info.free
}

fn write<D: Device, M: gpuport::DeviceMemoryMut<B = D::B>>(d: &D, m: &mut M, seed: u8) {
    d.copy_to_device(&common::pattern(m.len(), seed), m, 0).unwrap();
}

fn read<D: Device, M: DeviceMemory<B = D::B>>(d: &D, m: &M) -> Vec<u8> {
    let mut out = vec![0u8; m.len()];
    d.copy_to_host(m, 0, &mut out).unwrap();
    out
}

fn segments_map_as_the_pool_grows_and_addresses_stay_valid<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    let Some((pool, alloc)) = expandable_pool(d, 256 * MIB) else { return };
    let s = d.create_stream().unwrap();
    let mut first = alloc.alloc(3 * MIB, &s).unwrap();
    write(&**d, &mut first, 1);
    let grown = pool.report();
    assert_eq!(grown.segments, 1, "one expandable segment");
    assert!(grown.reserved >= 3 * MIB && grown.reserved < 20 * MIB, "only the granules needed: {}", grown.reserved);
    let mut later = Vec::new();
    for i in 0..4u8 {
        let mut b = alloc.alloc(5 * MIB, &s).unwrap();
        write(&**d, &mut b, 10 + i);
        later.push(b);
    }
    let report = pool.report();
    assert_eq!(report.segments, 1, "the segment grew instead of new ones: {report}");
    let seg = &report.segment_map[0];
    assert_eq!(seg.address, first.device_ptr(), "the segment still starts at the first block");
    assert!(later.iter().all(|b| b.device_ptr() > first.device_ptr()), "growth maps at the end");
    // Each growth maps what the free tail lacks, rounded up to the 2 MiB
    // granule: 3 + 4 * 5 MiB, in 24 MiB. Plain segments would hold two of 20 MiB.
    assert!(report.reserved >= 23 * MIB && report.reserved <= 28 * MIB, "reserved {}", report.reserved);
    d.synchronize(&s).unwrap();
    assert_eq!(read(&**d, &first), common::pattern(3 * MIB, 1), "the first block kept its contents");
    for (i, b) in later.iter().enumerate() {
        assert_eq!(read(&**d, b), common::pattern(5 * MIB, 10 + i as u8));
    }
}

fn trimming_unmaps_the_free_tail_and_memory_comes_back<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    let baseline = used(&**d);
    let Some((pool, alloc)) = expandable_pool(d, 256 * MIB) else { return };
    let virtual_memory = pool.report().expandable == Expandable::Virtual;
    let s = d.create_stream().unwrap();
    let mut keep = alloc.alloc(3 * MIB, &s).unwrap();
    write(&**d, &mut keep, 7);
    let tail: Vec<_> = (0..6).map(|_| alloc.alloc(8 * MIB, &s).unwrap()).collect();
    let base = pool.report().segment_map[0].address;
    let peak = pool.report().reserved;
    if virtual_memory {
        assert!(used(&**d) >= baseline + 48 * MIB, "the growth is device memory in use");
    }
    drop(tail);
    pool.trim(0).unwrap();
    let trimmed = pool.report();
    assert!(trimmed.reserved < peak && trimmed.reserved <= 4 * MIB, "the tail was unmapped: {trimmed}");
    assert_eq!(trimmed.segments, 1);
    assert_eq!(read(&**d, &keep), common::pattern(3 * MIB, 7), "the block below the tail stays valid");
    drop(keep);
    pool.trim(0).unwrap();
    let empty = pool.report();
    assert_eq!((empty.reserved, empty.segments), (0, 0), "everything unmapped: {empty}");
    assert!(empty.counters.segments_released >= 2);
    if virtual_memory {
        // The stream and the driver's own bookkeeping may take a little: allow 8 MiB.
        assert!(used(&**d) <= baseline + 8 * MIB, "device memory in use is back to {baseline}: {}", used(&**d));
    }
    // The range stays reserved: the segment comes back at the same address.
    let again = alloc.alloc(3 * MIB, &s).unwrap();
    assert_eq!(again.device_ptr(), base, "the same reserved range");
    drop(again);
    d.synchronize(&s).unwrap();
}

fn freed_neighbours_merge_across_growths<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    let Some((pool, alloc)) = expandable_pool(d, 256 * MIB) else { return };
    let s = d.create_stream().unwrap();
    // Three growths, freed: one free block of their sum serves a larger request.
    let blocks: Vec<_> = (0..3).map(|_| alloc.alloc(12 * MIB, &s).unwrap()).collect();
    drop(blocks);
    pool.trim(usize::MAX).unwrap();
    let before = pool.report().reserved;
    let big = alloc.alloc(30 * MIB, &s).unwrap();
    assert_eq!(pool.report().reserved, before, "the merged free block served it without growing");
    drop(big);
    d.synchronize(&s).unwrap();
}

fn a_tail_freed_on_the_allocating_stream_is_extended_not_mapped_again<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    let Some((pool, alloc)) = expandable_pool(d, 256 * MIB) else { return };
    let s = d.create_stream().unwrap();
    let first = alloc.alloc(2 * MIB, &s).unwrap();
    let tail = alloc.alloc(2 * MIB, &s).unwrap();
    let tail_at = tail.device_ptr();
    let before = pool.report().reserved;
    // Freed on `s`: free on `s`'s own list, not yet for every stream.
    drop(tail);
    let big = alloc.alloc(6 * MIB, &s).unwrap();
    let grew = pool.report().reserved - before;
    assert_eq!(big.device_ptr(), tail_at, "the free tail was extended");
    assert!(grew < 6 * MIB, "only the bytes the tail lacked were mapped, not {grew}");
    drop((first, big));
    d.synchronize(&s).unwrap();
}

fn a_tail_freed_on_another_stream_is_not_extended<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    let Some((pool, alloc)) = expandable_pool(d, 256 * MIB) else { return };
    let (s, other) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    if d.stream_id(&s).is_none() {
        return; // without stream ids every free block serves every stream
    }
    let tail = alloc.alloc(2 * MIB, &other).unwrap();
    let tail_at = tail.device_ptr();
    drop(tail);
    common::hold_stream(d, &other, std::time::Duration::from_millis(50));
    let big = alloc.alloc(6 * MIB, &s).unwrap();
    assert_ne!(big.device_ptr(), tail_at, "another stream's free block is not handed out unfenced");
    assert!(pool.report().reserved >= 8 * MIB);
    drop(big);
    d.synchronize(&s).unwrap();
    d.synchronize(&other).unwrap();
}

fn a_full_reservation_falls_back_to_plain_segments<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    let Some((pool, alloc)) = expandable_pool(d, 4 * MIB) else { return };
    let s = d.create_stream().unwrap();
    let small_enough = alloc.alloc(3 * MIB, &s).unwrap();
    let too_big = alloc.alloc(16 * MIB, &s).unwrap();
    let report = pool.report();
    assert_eq!(report.segments, 2, "the expandable one and a plain one: {report}");
    drop((small_enough, too_big));
    pool.trim(0).unwrap();
    assert_eq!(pool.report().reserved, 0);
    d.synchronize(&s).unwrap();
}

/// An expandable pool with `config`'s other settings, or `None` (printing why).
fn expandable_pool_with<D: MemoryDevice>(d: &Arc<D>, config: PoolConfig) -> Option<PoolAndAllocator<D::B>> {
    let pool = Arc::new(CachingPool::new(d.clone(), PoolConfig { expandable: true, ..config }));
    match pool.report().expandable {
        Expandable::Virtual | Expandable::Emulated => Some((pool.clone(), Allocator::from_arc(pool))),
        other => {
            let _ = writeln!(std::io::stderr(), "skipped on {}: expandable segments {other}", d.info().spec());
            None
        }
    }
}

/// The counterpart of `tests/memory.rs`'s case for plain segments, which
/// release the cached segment and retry: here the freed block is the
/// segment's free tail, so the larger request maps only what it lacks.
fn out_of_memory_under_a_limit_is_a_typed_error_and_the_free_tail_grows<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    let Some((pool, alloc)) = expandable_pool_with(d, PoolConfig { size_limit: Some(8 * MIB), ..config(64 * MIB) })
    else {
        return;
    };
    let s = d.create_stream().unwrap();
    let big = alloc.alloc(6 * MIB, &s).unwrap();
    match alloc.alloc(4 * MIB, &s) {
        Err(Error::OutOfMemory { bytes, .. }) => assert_eq!(bytes, 4 * MIB),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert_eq!(pool.report().counters.oom_failures, 1);
    drop(big);
    let mut seven = alloc.alloc(7 * MIB, &s).unwrap();
    write(&**d, &mut seven, 3);
    let report = pool.report();
    assert_eq!(report.counters.oom_retries, 1, "only the failed request retried: {report}");
    assert_eq!((report.reserved, report.segments), (8 * MIB, 1), "{report}");
    drop(seven);
    d.synchronize(&s).unwrap();
}

/// The counterpart of `tests/memory.rs`'s release-threshold case: a free
/// above the threshold unmaps the free tail instead of releasing segments.
fn the_release_threshold_unmaps_the_free_tail<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    for (threshold, expect_released) in [(16 * MIB, true), (usize::MAX, false)] {
        let config = PoolConfig { release_threshold: threshold, ..config(256 * MIB) };
        let Some((pool, alloc)) = expandable_pool_with(d, config) else { return };
        let s = d.create_stream().unwrap();
        let blocks: Vec<_> = (0..4).map(|_| alloc.alloc(12 * MIB, &s).unwrap()).collect();
        assert_eq!(pool.report().reserved, 48 * MIB, "one segment, mapped as it grew");
        drop(blocks);
        d.synchronize(&s).unwrap();
        // The next free sees the completed fences and trims.
        drop(alloc.alloc(4096, &s).unwrap());
        let report = pool.report();
        if expect_released {
            assert!(report.reserved <= threshold, "{report}");
            assert!(report.counters.segments_released >= 1, "the large segment's tail was unmapped: {report}");
        } else {
            assert_eq!(report.reserved, 50 * MIB, "{report}");
        }
        d.synchronize(&s).unwrap();
    }
}

/// One step of a replayed trace: allocate `bytes` as block `id`, or free it.
#[derive(Debug, Clone, Copy)]
enum Op {
    Alloc(usize, usize),
    Free(usize),
}

/// A small transformer training trace in `benches/fragmentation.py`'s shape
/// (deterministic, about 880 MiB live at its peak): long-lived parameters
/// and optimizer state, then steps whose sequence length grows, each a
/// forward pass saving activations layer by layer (with temporaries), a
/// backward pass freeing them in reverse while gradients of other sizes
/// come and go, and the optimizer's temporaries. The backward pass is what
/// left holes mapped in an expandable segment: a gradient went past the
/// activation just freed (still in the stream's cache of recent blocks,
/// out of best fit's sight), and large blocks kept up to 1 MiB of slack.
/// (`src/memory/pool/expandable.rs`)
fn training_trace() -> Vec<Op> {
    let (hidden, layers, batch, steps, seq) = (512usize, 4usize, 8usize, 8usize, (256usize, 1024usize));
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next_random = move |below: usize| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize % below
    };
    let mut ops = Vec::new();
    let mut ids = 0..;
    let mut alloc = |ops: &mut Vec<Op>, bytes: usize| {
        let id = ids.next().unwrap();
        ops.push(Op::Alloc(id, bytes));
        id
    };
    let per_layer = [3 * hidden * hidden, hidden * hidden, 4 * hidden * hidden, 4 * hidden * hidden, 2 * hidden];
    for _ in 0..layers {
        for n in per_layer {
            for bytes_per_element in [2, 2, 4, 4] {
                alloc(&mut ops, bytes_per_element * n); // weights, gradients, two optimizer states
            }
        }
    }
    let heads = hidden / 128;
    for step in 0..steps {
        let s = seq.0 + (seq.1 - seq.0) * step / (steps - 1);
        let s = (s * (85 + next_random(16)) / 100 / 8 * 8).max(16);
        let tokens = batch * s;
        let mut saved = Vec::new();
        for _ in 0..layers {
            let (unit, scores) = (tokens * hidden, 2 * batch * heads * s * s);
            let activations = [2 * unit, 6 * unit, scores, 2 * unit, 8 * unit, 8 * unit, 2 * unit];
            for (j, bytes) in activations.into_iter().enumerate() {
                saved.push(alloc(&mut ops, bytes));
                if j == 2 || j == 5 {
                    let temporary = alloc(&mut ops, bytes); // softmax and GELU inputs
                    ops.push(Op::Free(temporary));
                }
            }
        }
        let loss = alloc(&mut ops, 4 * tokens);
        for activation in saved.into_iter().rev() {
            let gradient = alloc(&mut ops, 2 * tokens * hidden * [1, 3, 4][next_random(3)]);
            ops.push(Op::Free(activation));
            ops.push(Op::Free(gradient));
        }
        ops.push(Op::Free(loss));
        for n in per_layer {
            let temporary = alloc(&mut ops, 4 * n);
            ops.push(Op::Free(temporary));
        }
    }
    ops
}

fn a_training_trace_maps_little_more_than_it_holds_live<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    let Some((pool, alloc)) = expandable_pool(d, 1 << 30) else { return };
    let s = d.create_stream().unwrap();
    let mut live = std::collections::HashMap::new();
    let (mut held, mut peak_held, mut peak_mapped) = (0, 0, 0);
    for op in training_trace() {
        match op {
            Op::Alloc(id, bytes) => {
                live.insert(id, alloc.alloc(bytes, &s).unwrap());
                held += bytes;
                peak_held = usize::max(peak_held, held);
                peak_mapped = usize::max(peak_mapped, pool.report().reserved);
            }
            Op::Free(id) => {
                let block = live.remove(&id).unwrap();
                held -= block.len();
            }
        }
    }
    // A granule (2 MiB) per class at most beyond 0.5%: the small class maps
    // a whole one for a few KiB, and each growth rounds up to one.
    let bound = peak_held + peak_held / 200 + 4 * MIB;
    assert!(
        peak_mapped <= bound,
        "peak mapped {peak_mapped} bytes for {peak_held} live ({:.4}x), more than {bound}",
        peak_mapped as f64 / peak_held as f64
    );
    drop(live);
    d.synchronize(&s).unwrap();
}

/// A storage whose device cannot reserve growable ranges.
#[derive(Debug)]
struct NoVirtualMemory<B: Backend>(DeviceStorage<B>);

// SAFETY: every segment is the device's plain allocator's (`DeviceStorage`).
unsafe impl<B: Backend> Storage<B> for NoVirtualMemory<B> {
    type Segment = <DeviceStorage<B> as Storage<B>>::Segment;
    fn device(&self) -> &Arc<B::Device> {
        self.0.device()
    }
    fn alloc(&self, bytes: usize) -> gpuport::Result<Self::Segment> {
        self.0.alloc(bytes)
    }
    fn reserve_growable(&self, _: usize) -> gpuport::Result<Box<dyn GrowableRange>> {
        Err(Error::Unsupported { op: "growable ranges", backend: B::KIND, hint: Some("a test storage".into()) })
    }
}

fn without_virtual_memory_the_pool_falls_back_and_says_so<D: MemoryDevice>(d: &Arc<D>) {
    let storage = NoVirtualMemory::<D::B>(DeviceStorage::new(d.clone()));
    let pool = Arc::new(CachingPool::with_storage(storage, config(256 * MIB)));
    let report = pool.report();
    assert!(
        matches!(&report.expandable, Expandable::FellBack(why) if why.contains("growable ranges")),
        "the report says why: {:?}",
        report.expandable
    );
    assert!(report.to_string().contains("fell back to plain segments"), "{report}");
    let s = d.create_stream().unwrap();
    let block = pool.allocate(3 * MIB, &s).unwrap();
    assert_eq!(pool.report().reserved, 20 * MIB, "a plain 20 MiB segment");
    pool.deallocate(block, &s, Vec::new()).unwrap();
    d.synchronize(&s).unwrap();
}

fn a_reservation_larger_than_the_address_space_is_a_typed_error<D: MemoryDevice>(d: &Arc<D>) {
    match d.reserve_growable(MAX_RESERVATION + 1) {
        Err(Error::Memory(MemoryError::AddressSpace { bytes, .. })) => assert_eq!(bytes, MAX_RESERVATION + 1),
        Err(Error::Unsupported { .. }) if !d.growable_is_virtual().unwrap() && d.info().spec() != "host" => {
            let _ = writeln!(std::io::stderr(), "skipped on {}: no virtual memory management", d.info().spec());
        }
        other => panic!("expected MemoryError::AddressSpace, got {other:?}"),
    }
    let pool = CachingPool::<D::B>::new(d.clone(), config(usize::MAX));
    assert!(
        matches!(&pool.report().expandable, Expandable::FellBack(why) if why.contains("cannot reserve")),
        "a pool asked for too much falls back and says why: {:?}",
        pool.report().expandable
    );
}

fn ipc_of_expandable_memory_is_refused_with_a_typed_error<D: MemoryDevice>(d: &Arc<D>) {
    let _guard = lock();
    let Some((pool, _)) = expandable_pool(d, 64 * MIB) else { return };
    let s = d.create_stream().unwrap();
    let block = pool.allocate(3 * MIB, &s).unwrap();
    match pool.ipc_export(&block) {
        Err(Error::Memory(MemoryError::ExpandableIpc { ptr, .. })) => assert_eq!(ptr, block.ptr()),
        // The host backend has no IPC at all, and says so rather than blame the segment.
        Err(Error::Unsupported { op, .. }) if <D::B as Backend>::KIND == BackendKind::Host => {
            assert_eq!(op, "IPC memory handles")
        }
        other => panic!("expected MemoryError::ExpandableIpc, got {other:?}"),
    }
    pool.deallocate(block, &s, Vec::new()).unwrap();
    d.synchronize(&s).unwrap();
}

mod cases {
    crate::arc_backend_tests!(
        segments_map_as_the_pool_grows_and_addresses_stay_valid,
        trimming_unmaps_the_free_tail_and_memory_comes_back,
        freed_neighbours_merge_across_growths,
        a_tail_freed_on_the_allocating_stream_is_extended_not_mapped_again,
        a_tail_freed_on_another_stream_is_not_extended,
        a_training_trace_maps_little_more_than_it_holds_live,
        a_full_reservation_falls_back_to_plain_segments,
        out_of_memory_under_a_limit_is_a_typed_error_and_the_free_tail_grows,
        the_release_threshold_unmaps_the_free_tail,
        without_virtual_memory_the_pool_falls_back_and_says_so,
        a_reservation_larger_than_the_address_space_is_a_typed_error,
        ipc_of_expandable_memory_is_refused_with_a_typed_error,
    );
}
