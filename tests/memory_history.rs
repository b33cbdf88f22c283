//! The allocation history (`memory::history`): what it records, its ring
//! bound, snapshots and their pickle, and out-of-memory observers' snapshot.
//! One body per backend; GPU cases skip with a printed reason where absent.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use gpuport::memory::history::{self, Action, Frame, HistoryConfig, SnapshotBlockState};
use gpuport::memory::{self, Allocator, CachingPool, Expandable, MemoryDevice, PoolConfig};
use gpuport::Device;
use gpuport::DeviceMemory;

/// The history is process-wide: its tests take turns.
fn history_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    history::stop();
    history::clear();
    history::set_frame_source(None);
    guard
}

/// A pool and an allocator over it.
type PoolAndAllocator<B> = (Arc<CachingPool<B>>, Allocator<B>);

fn pool<D: MemoryDevice>(d: &Arc<D>, config: PoolConfig) -> PoolAndAllocator<D::B> {
    let pool = Arc::new(CachingPool::new(d.clone(), config));
    (pool.clone(), Allocator::from_arc(pool))
}

/// Plain segments, whatever `GPUPORT_POOL` says: for the checks of their
/// segment events and sizes (the expandable counterparts are below).
fn plain() -> PoolConfig {
    PoolConfig { expandable: false, ..PoolConfig::default() }
}

fn frame(name: &str) -> Frame {
    Frame { filename: "test.py".into(), line: 7, name: name.into() }
}

fn nothing_is_recorded_while_recording_is_off<D: MemoryDevice>(d: &Arc<D>) {
    let _turn = history_lock();
    let (_pool, alloc) = pool(d, PoolConfig::default());
    drop(alloc.alloc(4096, d.default_stream()).unwrap());
    assert!(history::entries().is_empty());
}

fn allocations_frees_and_segments_are_recorded_in_order_with_stacks<D: MemoryDevice>(d: &Arc<D>) {
    let _turn = history_lock();
    history::set_frame_source(Some(Arc::new(|| vec![frame("train_step")])));
    let (pool, alloc) = pool(d, plain());
    history::start(HistoryConfig::default());
    let a = alloc.alloc(1000, d.default_stream()).unwrap();
    let ptr = gpuport::DeviceMemory::device_ptr(&a);
    // While it lives, the snapshot's block carries the allocation's stack.
    let live = history::Snapshot::of_pool(history_key(d), &pool.report());
    let block = live.segments.iter().flat_map(|s| &s.blocks).find(|b| b.address == ptr).unwrap();
    assert_eq!(block.state, SnapshotBlockState::ActiveAllocated);
    assert_eq!(block.requested_size, 1000);
    assert_eq!(&block.frames[..], &[frame("train_step")]);
    drop(a);
    pool.trim(0).unwrap();
    history::stop();
    let entries = history::entries();
    let actions: Vec<Action> = entries.iter().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [Action::SegmentAlloc, Action::Alloc, Action::FreeRequested, Action::FreeCompleted, Action::SegmentFree]
    );
    let alloc_entry = &entries[1];
    assert_eq!((alloc_entry.addr, alloc_entry.size), (ptr, 1000));
    assert_eq!(alloc_entry.stream, d.stream_id(d.default_stream()).unwrap_or(0));
    assert_eq!(&alloc_entry.frames[..], &[frame("train_step")]);
    assert!(entries[0].frames.is_empty(), "segment events carry no stack");
    assert!(entries.windows(2).all(|w| w[0].time_us <= w[1].time_us));
    assert_eq!(entries[4].addr, entries[0].addr);
    // Recording off: nothing more.
    drop(alloc.alloc(1000, d.default_stream()).unwrap());
    assert_eq!(history::entries().len(), 5);
    history::clear();
}

fn the_history_keeps_only_its_newest_entries<D: MemoryDevice>(d: &Arc<D>) {
    let _turn = history_lock();
    let (_pool, alloc) = pool(d, PoolConfig::default());
    drop(alloc.alloc(512, d.default_stream()).unwrap()); // the segment, before recording
    history::start(HistoryConfig { max_entries: 4, ..HistoryConfig::default() });
    for size in 1..=10 {
        drop(alloc.alloc(size * 512, d.default_stream()).unwrap());
    }
    history::stop();
    let entries = history::entries();
    assert_eq!(entries.len(), 4);
    // The last two allocations' alloc, free_requested, free_completed: the newest four.
    assert_eq!(entries[0].action, Action::FreeCompleted);
    assert_eq!(entries[1].size, 10 * 512);
    assert_eq!(entries[3].action, Action::FreeCompleted);
    history::clear();
}

fn a_rust_backtrace_is_recorded_when_asked_for<D: MemoryDevice>(d: &Arc<D>) {
    let _turn = history_lock();
    let (_pool, alloc) = pool(d, PoolConfig::default());
    history::start(HistoryConfig { rust_backtrace: true, ..HistoryConfig::default() });
    drop(alloc.alloc(512, d.default_stream()).unwrap());
    history::stop();
    let entries = history::entries();
    let alloc_entry = entries.iter().find(|e| e.action == Action::Alloc).unwrap();
    assert!(!alloc_entry.frames.is_empty(), "no backtrace frames");
    history::clear();
}

fn a_snapshot_pickles_and_a_failed_write_keeps_the_history<D: MemoryDevice>(d: &Arc<D>) {
    let _turn = history_lock();
    let (pool, alloc) = pool(d, plain());
    snapshot_pickles_and_a_failed_write_keeps_the_history_of(d, &pool, &alloc, 20 << 20);
    // An expandable segment: only the 2 MiB granules it mapped.
    if let Some((pool, alloc)) = expandable_pool(d) {
        snapshot_pickles_and_a_failed_write_keeps_the_history_of(d, &pool, &alloc, 4 << 20);
    }
}

/// Records a 3 MiB allocation of `pool`, whose segment then holds
/// `segment_size` bytes, and checks its snapshot, the pickle, and that a
/// failed write keeps the history.
fn snapshot_pickles_and_a_failed_write_keeps_the_history_of<D: MemoryDevice>(
    d: &Arc<D>,
    pool: &CachingPool<D::B>,
    alloc: &Allocator<D::B>,
    segment_size: usize,
) {
    history::clear();
    history::start(HistoryConfig::default());
    let a = alloc.alloc(3 << 20, d.default_stream()).unwrap();
    history::stop();
    let snap = history::Snapshot::of_pool(history_key(d), &pool.report());
    let seg = &snap.segments[0];
    assert_eq!(seg.total_size, segment_size);
    assert_eq!(seg.allocated_size, 3 << 20);
    assert_eq!(seg.requested_size, 3 << 20);
    assert_eq!(snap.device_traces()[d.info().ordinal].len(), 2);
    let bytes = snap.to_pickle();
    assert_eq!(&bytes[..2], &[0x80, 2]);
    assert_eq!(bytes.last(), Some(&b'.'));
    let dir = std::env::temp_dir().join(format!("gpuport-history-{}", std::process::id()));
    let path = dir.join("no-such-dir").join("snap.pickle");
    assert!(snap.write_pickle(&path).is_err());
    assert_eq!(history::entries().len(), 2, "the history stays after a failed write");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("snap.pickle");
    snap.write_pickle(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let _ = std::fs::remove_dir_all(&dir);
    drop(a);
    history::clear();
}

fn out_of_memory_observers_get_a_snapshot_with_the_failure<D: MemoryDevice>(d: &Arc<D>) {
    let _turn = history_lock();
    let (_pool, alloc) = pool(d, PoolConfig { size_limit: Some(4 << 20), ..PoolConfig::default() });
    let keep = alloc.alloc(1 << 20, d.default_stream()).unwrap();
    let seen = Arc::new(Mutex::new(None));
    let into = seen.clone();
    let id = memory::add_out_of_memory_observer(move |e| {
        *into.lock().unwrap() = Some(e.snapshot());
    });
    history::start(HistoryConfig::default());
    assert!(alloc.alloc(8 << 20, d.default_stream()).is_err());
    history::stop();
    assert!(memory::remove_out_of_memory_observer(id));
    // Other tests' pools may fail meanwhile: find this pool's snapshot.
    let snap = seen.lock().unwrap().take().expect("the observer ran");
    let oom = snap.traces.iter().find(|e| e.action == Action::Oom && e.size == 8 << 20).expect("an oom entry");
    assert_eq!(oom.addr, 0);
    let ptr = gpuport::DeviceMemory::device_ptr(&keep);
    assert!(snap.segments.iter().flat_map(|s| &s.blocks).any(|b| b.address == ptr));
    drop(keep);
    history::clear();
}

/// An expandable pool on `d` (64 MiB of addresses a class), or `None`,
/// printing why, where the device cannot grow one.
fn expandable_pool<D: MemoryDevice>(d: &Arc<D>) -> Option<PoolAndAllocator<D::B>> {
    let config = PoolConfig { expandable: true, expandable_reserve: Some(64 << 20), ..PoolConfig::default() };
    let (pool, alloc) = pool(d, config);
    match pool.report().expandable {
        Expandable::Virtual | Expandable::Emulated => Some((pool, alloc)),
        other => {
            let _ = writeln!(std::io::stderr(), "skipped on {}: expandable segments {other}", d.info().spec());
            None
        }
    }
}

fn expandable_segments_record_maps_and_unmaps<D: MemoryDevice>(d: &Arc<D>) {
    let _turn = history_lock();
    let Some((pool, alloc)) = expandable_pool(d) else { return };
    history::start(HistoryConfig::default());
    let a = alloc.alloc(3 << 20, d.default_stream()).unwrap();
    let mapped = pool.report().reserved;
    drop(a);
    pool.trim(0).unwrap();
    history::stop();
    let entries = history::entries();
    let actions: Vec<Action> = entries.iter().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [Action::SegmentMap, Action::Alloc, Action::FreeRequested, Action::FreeCompleted, Action::SegmentUnmap]
    );
    let (map, unmap) = (&entries[0], &entries[4]);
    assert_eq!((map.action.name(), unmap.action.name()), ("segment_map", "segment_unmap"));
    assert_eq!(map.size, mapped, "the map covers what the pool reserved");
    assert_eq!((unmap.addr, unmap.size), (map.addr, map.size), "the trim unmapped all of it");
    let stream = d.stream_id(d.default_stream()).unwrap_or(0);
    assert_eq!((map.stream, unmap.stream), (stream, stream));
    history::clear();
}

/// Checks a snapshot's segments against the pool's own report.
fn check_segments_against_report(snap: &history::Snapshot, report: &memory::PoolReport) {
    assert_eq!(snap.segments.len(), report.segments);
    assert_eq!(snap.segments.iter().map(|s| s.total_size).sum::<usize>(), report.reserved);
    assert_eq!(snap.segments.iter().map(|s| s.allocated_size).sum::<usize>(), report.in_use);
    assert_eq!(snap.segments.iter().map(|s| s.requested_size).sum::<usize>(), report.requested);
    for (seg, rep) in snap.segments.iter().zip(&report.segment_map) {
        assert_eq!((seg.address, seg.total_size, seg.stream), (rep.address, rep.size, rep.stream));
        assert_eq!((seg.small, seg.expandable), (rep.small, rep.expandable));
        assert_eq!(seg.blocks.iter().map(|b| b.size).sum::<usize>(), seg.total_size);
        let mut address = seg.address;
        for b in &seg.blocks {
            assert_eq!(b.address, address, "blocks in address order, without gaps");
            address += b.size as u64;
        }
    }
}

fn snapshot_segments_carry_the_pools_own_figures<D: MemoryDevice>(d: &Arc<D>) {
    let _turn = history_lock();
    let (pool, alloc) = pool(d, plain());
    let small = alloc.alloc(1000, d.default_stream()).unwrap();
    let large = alloc.alloc(3 << 20, d.default_stream()).unwrap();
    let report = pool.report();
    let snap = history::Snapshot::of_pool(history_key(d), &report);
    check_segments_against_report(&snap, &report);
    let stream = d.stream_id(d.default_stream()).unwrap_or(0);
    let of = |ptr: u64| snap.segments.iter().find(|s| s.blocks.iter().any(|b| b.address == ptr)).unwrap();
    let (s, l) = (of(small.device_ptr()), of(large.device_ptr()));
    assert_eq!((s.small, s.total_size, s.stream, s.expandable), (true, 2 << 20, stream, false));
    assert_eq!((l.small, l.total_size, l.stream, l.expandable), (false, 20 << 20, stream, false));
    assert_eq!((s.allocated_size, s.requested_size), (1024, 1000), "rounded to 512 bytes, as asked");
    assert_eq!((l.allocated_size, l.active_size, l.requested_size), (3 << 20, 3 << 20, 3 << 20));
    assert_eq!(l.blocks[1].state, SnapshotBlockState::Inactive);
    drop((small, large));
}

fn snapshot_segments_of_an_expandable_pool_are_marked_and_sized_by_what_is_mapped<D: MemoryDevice>(d: &Arc<D>) {
    let _turn = history_lock();
    let Some((pool, alloc)) = expandable_pool(d) else { return };
    let small = alloc.alloc(4096, d.default_stream()).unwrap();
    let large = alloc.alloc(3 << 20, d.default_stream()).unwrap();
    let report = pool.report();
    let snap = history::Snapshot::of_pool(history_key(d), &report);
    check_segments_against_report(&snap, &report);
    assert_eq!(snap.segments.len(), 2, "one segment a class");
    assert!(snap.segments.iter().all(|s| s.expandable));
    assert_eq!(snap.segments.iter().filter(|s| s.small).count(), 1);
    assert!(report.reserved < report.address_space, "mapped {} of {}", report.reserved, report.address_space);
    assert_eq!(report.address_space, 2 * (64 << 20));
    drop((small, large));
}

fn history_key<D: Device>(d: &Arc<D>) -> history::DeviceKey {
    history::DeviceKey { backend: d.info().backend, ordinal: d.info().ordinal }
}

mod per_backend {
    use super::*;
    arc_backend_tests!(
        nothing_is_recorded_while_recording_is_off,
        allocations_frees_and_segments_are_recorded_in_order_with_stacks,
        the_history_keeps_only_its_newest_entries,
        a_rust_backtrace_is_recorded_when_asked_for,
        a_snapshot_pickles_and_a_failed_write_keeps_the_history,
        out_of_memory_observers_get_a_snapshot_with_the_failure,
        expandable_segments_record_maps_and_unmaps,
        snapshot_segments_carry_the_pools_own_figures,
        snapshot_segments_of_an_expandable_pool_are_marked_and_sized_by_what_is_mapped,
    );
}
