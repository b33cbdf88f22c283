//! The allocation history (`memory::history`): what it records, its ring
//! bound, snapshots and their pickle, and out-of-memory observers' snapshot.
//! One body per backend; GPU cases skip with a printed reason where absent.

mod common;

use std::sync::{Arc, Mutex, MutexGuard};

use gpuport::memory::history::{self, Action, Frame, HistoryConfig, SnapshotBlockState};
use gpuport::memory::{self, Allocator, CachingPool, MemoryDevice, PoolConfig};
use gpuport::Device;

/// The history is process-wide: its tests take turns.
fn history_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    history::stop();
    history::clear();
    history::set_frame_source(None);
    guard
}

fn pool<D: MemoryDevice>(d: &Arc<D>, config: PoolConfig) -> (Arc<CachingPool<D::B>>, Allocator<D::B>) {
    let pool = Arc::new(CachingPool::new(d.clone(), config));
    (pool.clone(), Allocator::from_arc(pool))
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
    let (pool, alloc) = pool(d, PoolConfig::default());
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
    let (pool, alloc) = pool(d, PoolConfig::default());
    history::start(HistoryConfig::default());
    let a = alloc.alloc(3 << 20, d.default_stream()).unwrap();
    history::stop();
    let snap = history::Snapshot::of_pool(history_key(d), &pool.report());
    let seg = &snap.segments[0];
    assert_eq!(seg.total_size, 20 << 20);
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
    );
}
