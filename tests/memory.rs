//! Memory resources, tested once for every backend (`host` always, `cuda:0`
//! and `rocm:0` where present; skipped with a printed reason elsewhere).

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::{fill_u32, pattern};
use gpuport::memory::pool::SegmentReport;
use gpuport::memory::{
    self, Allocator, BlockState, CachingPool, LoggingResource, MemoryDevice, MemoryError, MemoryResource,
    NativePoolResource, PageableCopier, PinnedFlags, PipelineConfig, PlainResource, PoolConfig, StatisticsResource,
};
use gpuport::{
    builtin, Device, DeviceMemory, Error, HostMemory, KernelArgs, LaunchConfig, Location, MemArray, ModuleSource,
    Transfer,
};

const MIB: usize = 1 << 20;

type Dev<D> = Arc<D>;

/// Held by the tests that use the device's native stream-ordered pool: it is
/// one per device and process (and, through the HIP-on-CUDA shim, `cuda:0`'s
/// and `rocm:0`'s are the same), so their reserved-byte checks must not overlap.
static NATIVE_POOL: Mutex<()> = Mutex::new(());

fn native_pool_lock() -> std::sync::MutexGuard<'static, ()> {
    NATIVE_POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Asserts that the `n` u32s at `host` all hold `value`.
fn assert_u32s(host: &[u8], n: usize, value: u32, what: &str) {
    let expected = value.to_ne_bytes().repeat(n);
    assert!(
        host[..4 * n] == expected[..],
        "{what}: the device's writes through the mapped address are not in host memory"
    );
}

fn pool<D: MemoryDevice>(d: &Dev<D>, config: PoolConfig) -> (Arc<CachingPool<D::B>>, Allocator<D::B>) {
    let pool = Arc::new(CachingPool::new(d.clone(), config));
    (pool.clone(), Allocator::from_arc(pool))
}

/// Holds `stream` busy for `ms` milliseconds.
fn hold_stream<D: Device>(d: &D, stream: &gpuport::Stream<D::B>, ms: u64) {
    let module = d.load_module(ModuleSource::Builtin).expect("builtin module");
    let sleep = d.kernel(&module, builtin::SLEEP_NS).expect("sleep kernel");
    let mut args = KernelArgs::new();
    args.push(&(ms * 1_000_000));
    // SAFETY: the sleep kernel takes one u64 and touches no memory.
    unsafe { d.launch(&sleep, LaunchConfig::linear(1, 1), &args, stream) }.expect("launch sleep");
}

fn read<D: Device, M: DeviceMemory<B = D::B>>(d: &D, m: &M) -> Vec<u8> {
    let mut out = vec![0u8; m.len()];
    d.copy_to_host(m, 0, &mut out).expect("copy to host");
    out
}

// ---- the caching pool ----------------------------------------------------------------

fn a_freed_block_is_reused_on_its_stream_at_once<D: MemoryDevice>(d: &Dev<D>) {
    let (pool, alloc) = pool(d, PoolConfig::default());
    let s = d.create_stream().unwrap();
    let first = alloc.alloc(MIB, &s).unwrap();
    let addr = first.device_ptr();
    drop(first);
    let second = alloc.alloc(MIB, &s).unwrap();
    assert_eq!(second.device_ptr(), addr, "same stream, same size: the same block comes back");
    assert_eq!(pool.report().counters.same_stream_reuses, 1);
    drop(second);
    d.synchronize(&s).unwrap();
}

fn a_block_freed_on_one_stream_reaches_another_only_after_an_event<D: MemoryDevice>(d: &Dev<D>) {
    let (pool, alloc) = pool(d, PoolConfig::default());
    let (a, b) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    // 12 MiB blocks get segments of their own: no remainder to reuse.
    let block = alloc.alloc(12 * MIB, &a).unwrap();
    let addr = block.device_ptr();
    hold_stream(d.as_ref(), &a, 300);
    // SAFETY: the block outlives the memset: the pool keeps it from other
    // streams until `a` has passed it.
    unsafe { d.memset_async(&block, 0, block.len(), 0xAB, &a) }.unwrap();
    drop(block);
    let t = Instant::now();
    let other = alloc.alloc(12 * MIB, &b).unwrap();
    assert!(t.elapsed().as_millis() < 200, "allocating on another stream must not wait for `a`");
    assert_ne!(other.device_ptr(), addr, "stream `a` is still busy: its block must not go to `b`");
    let report = pool.report();
    assert!(report.counters.fences >= 1, "moving blocks between streams takes an event: {report}");
    assert!(report.segment_map.iter().flat_map(|s| &s.blocks).any(|b| b.state == BlockState::Pending));
    d.synchronize(&a).unwrap();
    let again = alloc.alloc(12 * MIB, &b).unwrap();
    assert_eq!(again.device_ptr(), addr, "once the event has completed the block is shared");
    drop((other, again));
    d.synchronize(&b).unwrap();
}

fn a_block_used_on_another_stream_waits_for_that_use<D: MemoryDevice>(d: &Dev<D>) {
    let (pool, alloc) = pool(d, PoolConfig::default());
    let (home, side) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let block = alloc.alloc(MIB, &home).unwrap();
    let addr = block.device_ptr();
    hold_stream(d.as_ref(), &side, 300);
    {
        let on_side = block.use_on(&side).unwrap();
        // SAFETY: `on_side` records an event after the memset; the pool waits for it.
        unsafe { d.memset_async(&on_side, 0, MIB, 1, &side) }.unwrap();
    }
    assert_eq!(block.foreign_uses(), 1);
    {
        let at_home = block.use_on(&home).unwrap();
        drop(at_home);
    }
    assert_eq!(block.foreign_uses(), 1, "a use on the allocation's own stream needs no event");
    drop(block);
    let next = alloc.alloc(MIB, &home).unwrap();
    assert_ne!(next.device_ptr(), addr, "the side stream still uses the block: not even its home stream gets it");
    d.synchronize(&side).unwrap();
    drop(next);
    pool.trim(usize::MAX).unwrap();
    let report = pool.report();
    assert_eq!(report.pending, 0, "{report}");
    assert_eq!(report.in_use, 0);
}

fn out_of_memory_under_a_limit_is_a_typed_error_and_the_pool_stays_usable<D: MemoryDevice>(d: &Dev<D>) {
    // Plain segments (whatever GPUPORT_POOL says): the retry below is theirs.
    let config = PoolConfig { size_limit: Some(8 * MIB), expandable: false, ..PoolConfig::default() };
    let (pool, alloc) = pool(d, config);
    let s = d.create_stream().unwrap();
    let big = alloc.alloc(6 * MIB, &s).unwrap();
    match alloc.alloc(4 * MIB, &s) {
        Err(Error::OutOfMemory { bytes, .. }) => assert_eq!(bytes, 4 * MIB),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert_eq!(pool.report().counters.oom_failures, 1);
    drop(big);
    // 7 MiB does not fit beside the cached 6 MiB segment: the pool releases
    // it and retries once.
    let seven = alloc.alloc(7 * MIB, &s).unwrap();
    // SAFETY: `seven` outlives the synchronize below.
    unsafe { d.memset_async(&seven, 0, seven.len(), 3, &s) }.unwrap();
    d.synchronize(&s).unwrap();
    let report = pool.report();
    assert_eq!(report.counters.oom_retries, 2, "{report}");
    assert!(report.reserved <= 8 * MIB);
    drop(seven);
    d.synchronize(&s).unwrap();
}

fn the_release_threshold_returns_cached_memory<D: MemoryDevice>(d: &Dev<D>) {
    for (threshold, expect_released) in [(16 * MIB, true), (usize::MAX, false)] {
        // Plain segments (whatever GPUPORT_POOL says): the counts below are theirs.
        let config = PoolConfig { release_threshold: threshold, expandable: false, ..PoolConfig::default() };
        let (pool, alloc) = pool(d, config);
        let s = d.create_stream().unwrap();
        let blocks: Vec<_> = (0..4).map(|_| alloc.alloc(12 * MIB, &s).unwrap()).collect();
        assert_eq!(pool.report().reserved, 48 * MIB);
        drop(blocks);
        d.synchronize(&s).unwrap();
        // The next free sees the completed fences and trims.
        drop(alloc.alloc(4096, &s).unwrap());
        let report = pool.report();
        if expect_released {
            assert!(report.reserved <= threshold, "{report}");
            assert!(report.counters.segments_released >= 3, "{report}");
        } else {
            assert_eq!(report.reserved, 50 * MIB, "{report}");
        }
        d.synchronize(&s).unwrap();
    }
}

fn the_fragmentation_report_shows_holes_and_merges_them<D: MemoryDevice>(d: &Dev<D>) {
    let (pool, alloc) = pool(d, PoolConfig::default());
    let s = d.create_stream().unwrap();
    // 8 blocks of 192 KiB: 1.5 MiB of one 2 MiB small-block segment.
    let mut blocks: Vec<_> = (0..8).map(|_| Some(alloc.alloc(192 * 1024, &s).unwrap())).collect();
    for b in blocks.iter_mut().step_by(2) {
        *b = None;
    }
    let report = pool.report();
    assert_eq!(report.segments, 1);
    assert_eq!(report.in_use, 4 * 192 * 1024);
    assert!(report.free_blocks >= 4, "{report}");
    assert!(report.fragmentation > 0.0, "{report}");
    assert!(report.to_string().contains("fragmentation"));
    blocks.clear();
    // The stream's cache of recent blocks holds the last 8 frees whole.
    let report = pool.report();
    assert_eq!(report.free_blocks, 9, "8 cached blocks and the rest of the segment: {report}");
    // A request that no cached block and not the 512 KiB rest fit merges the
    // cache back into the set, and then fits in the same segment.
    let big = alloc.alloc(MIB, &s).unwrap();
    assert_eq!(pool.report().segments, 1, "{}", pool.report());
    drop(big);
    pool.trim(usize::MAX).unwrap();
    let report = pool.report();
    assert_eq!(report.free_blocks, 1, "freed neighbours merge back into one block: {report}");
    assert_eq!(report.largest_free_block, 2 * MIB);
    assert_eq!(report.fragmentation, 0.0);
    d.synchronize(&s).unwrap();
}

// ---- adaptors, handle, registry -------------------------------------------------------

fn statistics_count_current_and_peak_bytes<D: MemoryDevice>(d: &Dev<D>) {
    let inner: Arc<dyn MemoryResource<D::B>> = Arc::new(CachingPool::new(d.clone(), PoolConfig::default()));
    let alloc = Allocator::new(StatisticsResource::new(inner));
    let s = d.default_stream();
    let a = alloc.alloc(1000, s).unwrap();
    let b = alloc.alloc(3000, s).unwrap();
    drop(a);
    let st = alloc.statistics().unwrap();
    assert_eq!((st.current_bytes, st.peak_bytes, st.total_bytes), (3000, 4000, 4000));
    assert_eq!((st.current_count, st.peak_count, st.total_count), (1, 2, 2));
    drop(b);
    assert_eq!(alloc.statistics().unwrap().current_bytes, 0);
}

#[derive(Clone, Default)]
struct SharedSink(Arc<Mutex<Vec<u8>>>);
impl Write for SharedSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Nanoseconds since the Unix epoch now.
fn epoch_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

fn the_log_adaptor_writes_one_csv_line_per_event<D: MemoryDevice>(d: &Dev<D>) {
    if common::provokes_driver_errors(d.info().backend, "an allocation the device cannot make") {
        return;
    }
    let sink = SharedSink::default();
    let inner: Arc<dyn MemoryResource<D::B>> = Arc::new(PlainResource::new(d.clone()));
    let (before, started) = (epoch_ns(), Instant::now());
    let log = Arc::new(LoggingResource::new(inner, Box::new(sink.clone()), true).unwrap());
    let alloc = Allocator::from_arc(log.clone());
    let s = d.create_stream().unwrap();
    let block = alloc.alloc(4096, &s).unwrap();
    let addr = format!("{:#x}", block.device_ptr());
    drop(block);
    // A request the device cannot meet: an `allocate_failure` line.
    let huge = 1usize << 62;
    assert!(alloc.alloc(huge, &s).is_err());
    // A block the plain resource did not hand out: a `free_failure` line.
    let other = CachingPool::new(d.clone(), PoolConfig::default());
    let foreign = other.allocate(512, &s).unwrap();
    let foreign_addr = format!("{:#x}", foreign.ptr());
    assert!(matches!(log.deallocate(foreign, &s, Vec::new()), Err(Error::Memory(MemoryError::ForeignBlock { .. }))));
    let (after, elapsed) = (epoch_ns(), started.elapsed().as_nanos());

    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], memory::log::CSV_HEADER);
    assert_eq!(lines.len(), 5, "{text}");
    let thread: String = format!("{:?}", std::thread::current().id()).chars().filter(char::is_ascii_digit).collect();
    let total = d.memory_info().unwrap().total;
    let expected = [
        ("allocate", addr.as_str(), 4096),
        ("free", addr.as_str(), 4096),
        ("allocate_failure", "0x0", huge),
        ("free_failure", foreign_addr.as_str(), 512),
    ];
    let mut last = (0u128, 0u128);
    for (line, (event, address, size)) in lines[1..].iter().zip(expected) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 10, "{line}");
        let (stamp, since) = (f[0].parse::<u128>().unwrap(), f[1].parse::<u128>().unwrap());
        assert!(before <= stamp && stamp <= after, "timestamp {stamp} outside [{before}, {after}]: {line}");
        assert!(since <= elapsed, "elapsed_ns {since} is more than the {elapsed} ns since the log began: {line}");
        assert!(stamp >= last.0 && since >= last.1, "time runs backwards at {line}");
        last = (stamp, since);
        assert_eq!(f[2], thread, "the thread column names the allocating thread: {line}");
        assert_eq!((f[3], f[4], f[5]), (event, d.info().spec().as_str(), address), "{line}");
        assert_eq!(f[6], size.to_string(), "{line}");
        assert_eq!(f[7], d.stream_id(&s).unwrap().to_string(), "{line}");
        let (free, line_total) = (f[8].parse::<usize>().unwrap(), f[9].parse::<usize>().unwrap());
        assert_eq!(line_total, total, "the total column is the device's memory: {line}");
        assert!(free <= line_total, "{line}");
    }
}

fn defer_cleanup_holds_frees_back_until_the_guard_goes<D: MemoryDevice>(d: &Dev<D>) {
    let inner: Arc<dyn MemoryResource<D::B>> = Arc::new(CachingPool::new(d.clone(), PoolConfig::default()));
    let alloc = Allocator::new(StatisticsResource::new(inner));
    assert_eq!(alloc.interface_version(), memory::INTERFACE_VERSION);
    let guard = alloc.defer_cleanup();
    let inner_guard = alloc.defer_cleanup();
    drop(alloc.alloc(512, d.default_stream()).unwrap());
    assert_eq!(guard.held_back(), 1);
    assert_eq!(alloc.statistics().unwrap().current_count, 1, "the free has not reached the resource");
    drop(inner_guard);
    assert_eq!(alloc.statistics().unwrap().current_count, 1, "an outer guard still holds it");
    drop(guard);
    assert_eq!(alloc.statistics().unwrap().current_count, 0);
    alloc.reset().unwrap();
    let info = alloc.memory_info().unwrap();
    assert!(info.free <= info.total);
}

fn the_current_resource_is_replaceable_only_before_first_use<D: MemoryDevice>(d: &Dev<D>) {
    // A caching pool under the statistics: `a_memarray_used_on_another_stream_..`
    // reads the current resource's pool report, whichever test runs first.
    let pool: Arc<dyn MemoryResource<D::B>> = Arc::new(CachingPool::new(d.clone(), PoolConfig::default()));
    let mine = Allocator::<D::B>::new(StatisticsResource::new(pool));
    match memory::set_current_resource(mine.clone()) {
        Ok(()) => {
            let current = memory::current_resource::<D::B>(d).unwrap();
            assert_eq!(current.resource().name(), "statistics");
        }
        // Another test of this process used the device's resource first.
        Err(Error::InvalidArgument { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    let current = memory::current_resource::<D::B>(d).unwrap();
    drop(current.alloc(100, d.default_stream()).unwrap());
    assert!(matches!(memory::set_current_resource(mine), Err(Error::InvalidArgument { .. })));
}

fn plain_and_native_resources_allocate_and_native_memory_refuses_ipc<D: MemoryDevice>(d: &Dev<D>) {
    let _native = native_pool_lock();
    let s = d.create_stream().unwrap();
    let native = match NativePoolResource::new(d.clone(), Some(64 * MIB as u64)) {
        Ok(r) => Allocator::new(r),
        Err(Error::Unsupported { .. }) => return,
        Err(e) => panic!("{e}"),
    };
    for alloc in [Allocator::new(PlainResource::new(d.clone())), native.clone()] {
        let mut block = alloc.alloc(MIB + 1, &s).unwrap();
        // Stream-ordered memory of `s`; the copies below run on the default stream.
        d.synchronize(&s).unwrap();
        d.copy_to_device(&pattern(MIB + 1, 4), &mut block, 0).unwrap();
        assert_eq!(read(d.as_ref(), &block), pattern(MIB + 1, 4));
    }
    let block = native.alloc(4096, &s).unwrap();
    assert!(matches!(native.ipc_handle(&block), Err(Error::Unsupported { .. })));
    drop(block);
    native.reset().unwrap();
}

fn pinned_memory_is_pooled_and_honours_its_flags<D: MemoryDevice>(d: &Dev<D>) {
    let (pool, alloc) = pool(d, PoolConfig::default());
    let flags = PinnedFlags { mapped: true, portable: true, write_combined: false };
    let mut p = alloc.alloc_pinned(100_000, flags).unwrap();
    assert_eq!(p.as_slice().len(), 100_000);
    assert!(p.mapped_ptr().is_some());
    p.as_mut_slice().copy_from_slice(&pattern(100_000, 8));
    let mut dev = alloc.alloc(100_000, d.default_stream()).unwrap();
    d.copy_to_device(p.as_slice(), &mut dev, 0).unwrap();
    assert_eq!(read(d.as_ref(), &dev), pattern(100_000, 8));
    drop(p);
    // Four classes per power of two: 100 000 bytes take 7 x 16 KiB.
    assert_eq!(pool.pinned_pool().cached_bytes(), 112 * 1024);
    let again = alloc.alloc_pinned(110_000, flags).unwrap();
    assert_eq!(pool.pinned_pool().cached_bytes(), 0, "same class and flags: the cached buffer is reused");
    assert_eq!(again.capacity(), 112 * 1024);
    let other = alloc.alloc_pinned(70_000, flags).unwrap();
    assert_eq!(other.capacity(), 80 * 1024, "70 000 bytes are another class (5 x 16 KiB), not 128 KiB");
    let three = alloc.alloc_pinned(3 * MIB, PinnedFlags::default()).unwrap();
    assert_eq!(three.capacity(), 3 * MIB, "3 MiB is a class of its own, not rounded up to 4 MiB");
    drop((other, three));
    assert_eq!(pool.pinned_pool().cached_bytes(), 80 * 1024 + 3 * MIB);
    let mut host = pattern(8192, 1);
    // SAFETY: `host` outlives the registration, dropped first.
    let reg = unsafe { alloc.pin(host.as_mut_ptr(), host.len(), false) }.unwrap();
    drop(reg);
}

fn mapped_pinned_memory_is_written_by_the_device_through_its_mapped_address<D: MemoryDevice>(d: &Dev<D>) {
    let s = d.default_stream();
    let alloc = Allocator::new(PlainResource::new(d.clone()));
    let flags = PinnedFlags { mapped: true, portable: false, write_combined: false };
    let mut p = alloc.alloc_pinned(4096, flags).unwrap();
    let mapped = p.mapped_ptr().expect("mapped pinned memory has a device address");
    assert_eq!(mapped, d.mapped_device_ptr(p.as_mut_slice().as_mut_ptr()).unwrap());
    // SAFETY: `p` holds 1024 u32s and outlives the synchronize below.
    unsafe { fill_u32(d, s, mapped, 1024, 0x00C0_FFEE) };
    d.synchronize(s).unwrap();
    assert_u32s(p.as_slice(), 1024, 0x00C0_FFEE, "hipHostMalloc/cuMemHostAlloc memory");

    let mut host = vec![0u8; 8192];
    // SAFETY: `host` outlives the registration, dropped before it.
    let reg = unsafe { alloc.pin(host.as_mut_ptr(), host.len(), true) }.unwrap();
    let mapped = d.mapped_device_ptr(host.as_mut_ptr()).unwrap();
    // SAFETY: `host` holds 2048 u32s, registered and mapped until after the synchronize.
    unsafe { fill_u32(d, s, mapped, 2048, 7) };
    d.synchronize(s).unwrap();
    drop(reg);
    assert_u32s(&host, 2048, 7, "registered memory");

    let wc = PinnedFlags { mapped: false, portable: true, write_combined: true };
    let mut w = alloc.alloc_pinned(10_000, wc).unwrap();
    w.as_mut_slice().copy_from_slice(&pattern(10_000, 5));
    let mut dev = alloc.alloc(10_000, s).unwrap();
    d.copy_to_device(w.as_slice(), &mut dev, 0).unwrap();
    assert_eq!(read(d.as_ref(), &dev), pattern(10_000, 5), "write-combined memory copies like any pinned memory");
}

fn the_native_pool_keeps_memory_up_to_its_threshold_and_trims_it<D: MemoryDevice>(d: &Dev<D>) {
    let _native = native_pool_lock();
    let s = d.create_stream().unwrap();
    match d.set_native_pool_release_threshold(64 * MIB as u64) {
        Ok(()) => {}
        Err(Error::Unsupported { .. }) if !d.info().stream_ordered_alloc => {
            let _ = writeln!(std::io::stderr(), "skipped: native pool on {}: no stream-ordered pool", d.info().spec());
            return;
        }
        Err(e) => panic!("{e}"),
    }
    let block = d.alloc_async(8 * MIB, &s).unwrap();
    let held = d.native_pool_reserved().unwrap();
    drop(block);
    d.synchronize(&s).unwrap();
    let kept = d.native_pool_reserved().unwrap();
    d.trim_native_pool(0).unwrap();
    let trimmed = d.native_pool_reserved().unwrap();
    if d.info().backend == gpuport::BackendKind::Host {
        assert_eq!((held, kept, trimmed), (0, 0, 0), "the host's native pool is the plain allocator");
        return;
    }
    assert!(held >= 8 * MIB as u64, "the pool holds at least the live block: {held}");
    assert!(kept >= 8 * MIB as u64, "under the 64 MiB threshold a freed block stays across a sync: {kept}");
    assert_eq!(trimmed, 0, "nothing is in use: trimming to 0 returns every byte (was {kept})");
}

fn pageable_copies_round_trip_through_the_pipeline<D: MemoryDevice>(d: &Dev<D>) {
    // One stream shared by every lane, two for three lanes, one per lane.
    for streams in [1, 2, 3] {
        let config =
            PipelineConfig { chunk_bytes: MIB, lanes: 3, streams, direct_below: 4096, streaming_stores: streams != 2 };
        let copier = PageableCopier::new(d.clone(), config).unwrap();
        let n = 9 * MIB + 123;
        let data = pattern(n, 6 + streams as u8);
        let mut dev = d.alloc(n + 10).unwrap();
        copier.copy_to_device(&data, &mut dev, 10).unwrap();
        let mut back = vec![0u8; n];
        copier.copy_to_host(&dev, 10, &mut back).unwrap();
        assert!(back == data, "pipelined round trip changed the bytes ({streams} streams)");
        let mut direct = vec![0u8; n];
        d.copy_to_host(&dev, 10, &mut direct).unwrap();
        assert!(direct == data, "the device holds what was sent ({streams} streams)");
        assert!(matches!(copier.copy_to_device(&data, &mut dev, 11), Err(Error::OutOfBounds { .. })));
        let mut small = vec![0u8; 100];
        copier.copy_to_host(&dev, 10, &mut small).unwrap();
        assert_eq!(small, data[..100]);
    }
}

/// Pipelining through pinned staging pays only where a DMA engine runs beside
/// the host's copying: on the host backend every copy is one plain copy, and
/// nothing is staged whatever the size.
fn pageable_copies_are_staged_on_a_gpu_and_direct_on_the_host<D: MemoryDevice>(d: &Dev<D>) {
    let config = PipelineConfig { chunk_bytes: MIB, lanes: 2, streams: 1, direct_below: 4096, streaming_stores: true };
    let copier = PageableCopier::new(d.clone(), config).unwrap();
    let n = 9 * MIB + 123;
    let data = pattern(n, 11);
    let mut dev = d.alloc(n).unwrap();
    copier.copy_to_device(&data, &mut dev, 0).unwrap();
    let mut back = vec![0u8; n];
    copier.copy_to_host(&dev, 0, &mut back).unwrap();
    assert!(back == data, "the round trip changed the bytes");
    let shared = memory::pageable_copier::<D::B>(d).unwrap();
    shared.copy_to_device(&data, &mut dev, 0).unwrap();
    if d.info().backend == gpuport::BackendKind::Host {
        assert_eq!((copier.staged_chunks(), shared.staged_chunks()), (0, 0), "the host backend stages nothing");
    } else {
        assert_eq!(copier.staged_chunks(), 2 * n.div_ceil(MIB), "each way, every 1 MiB chunk is staged");
        assert!(shared.staged_chunks() > 0, "the shared copier stages too");
    }
}

// ---- arrays through the current resource ----------------------------------------------

fn a_memarray_used_on_another_stream_keeps_its_block_from_the_pool_until_that_work_is_done<D: MemoryDevice>(
    d: &Dev<D>,
) {
    let current = memory::current_resource::<D::B>(d).unwrap();
    let (home, side) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let home_id = d.stream_id(&home).expect("every backend tells streams apart");
    // 12 MiB: a pool segment of its own, so the array's block is easy to find.
    let n = 12 * MIB / 4;
    let mut a = MemArray::<f32, 1, D>::from_vec(d, [n], vec![1.0; n]).unwrap();
    a.move_to(Location::Device, &home, Transfer::Sync, None).unwrap();
    let report = current.report().expect("the current resource is a caching pool");
    let is_ours =
        |s: &&SegmentReport| s.blocks.iter().any(|b| b.state == BlockState::Allocated { requested: 12 * MIB });
    let segment = report.segment_map.iter().find(is_ours).expect("the array's block").address;
    // GPU backends compile an array kernel on its first use: do that now, not
    // while `side` is held below.
    a.scale(1.0, &home, None).unwrap();

    hold_stream(d.as_ref(), &side, 300);
    a.scale(3.0, &side, None).unwrap(); // queued on `side` behind 300 ms
    assert!(!d.is_idle(&side).unwrap());
    drop(a); // waits for the kernel (the array's pending work), then frees on `home`
    let state = |report: &memory::PoolReport| {
        let seg = report.segment_map.iter().find(|s| s.address == segment).expect("the segment is still cached");
        seg.blocks[0].state
    };
    let freed = state(&current.report().unwrap());
    assert_ne!(
        freed,
        BlockState::FreeForStream(home_id),
        "used on `side`: the block must wait for an event, not go straight back to `home`'s list"
    );
    hold_stream(d.as_ref(), &side, 300);
    let before = current.report().unwrap().counters;
    let next = current.alloc(12 * MIB, &home).unwrap();
    let after = current.report().unwrap().counters;
    assert_eq!(after.same_stream_reuses, before.same_stream_reuses, "not reused from `home`'s own list");
    if next.device_ptr() == segment {
        assert!(after.shared_reuses > before.shared_reuses, "reused only through the event-gated shared list");
    }
    drop(next);
    d.synchronize(&side).unwrap();
    d.synchronize(&home).unwrap();
}

fn exported_memarray_memory_goes_back_only_when_the_device_is_idle<D: MemoryDevice>(d: &Dev<D>) {
    let (s, consumer) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let n = MIB / 4;
    let mut a = MemArray::<u32, 1, D>::from_vec(d, [n], vec![1; n]).unwrap();
    a.move_to(Location::Device, &s, Transfer::Sync, None).unwrap();
    let export = a.to_dlpack(Location::Device, false, None).unwrap();
    let ptr = export.dl_tensor().data as u64;
    // A consumer writes the memory on a stream the array never sees.
    hold_stream(d.as_ref(), &consumer, 300);
    // SAFETY: the export keeps the memory alive, and its release waits for
    // the whole device (the rule under test).
    unsafe { common::fill_u32(d, &consumer, ptr, n, 7) };
    drop(a);
    drop(export); // the last holder of the device copy
    assert!(d.is_idle(&consumer).unwrap(), "exported memory went back before the consumer's work was done");

    // An array that never handed out an address does not wait for the device.
    let mut b = MemArray::<u32, 1, D>::from_vec(d, [n], vec![1; n]).unwrap();
    b.move_to(Location::Device, &s, Transfer::Sync, None).unwrap();
    hold_stream(d.as_ref(), &consumer, 300);
    drop(b);
    assert!(!d.is_idle(&consumer).unwrap(), "dropping an unexported array synchronized the device");
    d.synchronize(&consumer).unwrap();
}

// ---- the stress test -------------------------------------------------------------------

/// Live ranges of every thread; inserting an overlapping range panics.
#[derive(Default)]
struct RangeChecker(Mutex<BTreeMap<u64, u64>>);

impl RangeChecker {
    fn insert(&self, start: u64, len: u64) {
        let mut m = self.0.lock().unwrap();
        if let Some((&s, &e)) = m.range(..start + len).next_back() {
            assert!(e <= start, "live blocks overlap: [{s:#x}, {e:#x}) and [{start:#x}, {:#x})", start + len);
        }
        m.insert(start, start + len);
    }
    fn remove(&self, start: u64) {
        assert!(self.0.lock().unwrap().remove(&start).is_some());
    }
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Queues a busy-wait of `ns` nanoseconds on `stream`.
fn delay<D: Device>(d: &D, sleep: &gpuport::Kernel<D::B>, stream: &gpuport::Stream<D::B>, ns: u64) {
    let mut args = KernelArgs::new();
    args.push(&ns);
    // SAFETY: the sleep kernel takes one u64 and touches no memory.
    unsafe { d.launch(sleep, LaunchConfig::linear(1, 1), &args, stream) }.unwrap();
}

/// Checks that every byte of `block` is its owner's `value`, after every
/// write queued anywhere on the device has landed: a write of an earlier
/// owner that the pool let run after the block changed hands shows here.
fn verify<D: MemoryDevice>(d: &D, block: &memory::DeviceAllocation<D::B>, value: u8, pool: &CachingPool<D::B>) {
    d.synchronize_device().unwrap();
    let got = read(d, block);
    if got != vec![value; got.len()] {
        let i = got.iter().position(|&b| b != value).unwrap_or(0);
        panic!(
            "a block was written after it changed hands: {block:?} expected {value:#x}, byte {i} of {} is {:#x} ({} bytes differ); {}",
            got.len(),
            got[i],
            got.iter().filter(|&&b| b != value).count(),
            pool.report().to_string().lines().take(2).collect::<Vec<_>>().join(" | ")
        );
    }
}

/// The stress test: threads allocate and free at random on streams of their
/// own, each block filled with a value of its owner's and checked at every
/// free. Some blocks get a late write (queued behind a busy-wait) on another
/// stream or on their own, and are freed at once, while that write is still
/// queued: a pool that reused such a block before the write ran (skipping a
/// cross-stream event or a fence) would let the late write land on the next
/// owner's data, which that owner's check then sees.
fn stress<D: MemoryDevice>(d: &Dev<D>, ops: usize, validate: bool) {
    let threads: usize = std::env::var("GPUPORT_STRESS_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(4);
    let late_ns: u64 = 300_000;
    let config = PoolConfig { release_threshold: 64 * MIB, validate, ..Default::default() };
    let pool = Arc::new(CachingPool::new(d.clone(), config));
    let stats = Arc::new(StatisticsResource::new(pool.clone()));
    let alloc = Allocator::from_arc(stats.clone());
    let checker = RangeChecker::default();
    let shared = d.create_stream().unwrap();
    let module = d.load_module(ModuleSource::Builtin).unwrap();
    let fill = d.kernel(&module, builtin::FILL_U32).unwrap();
    let sleep = d.kernel(&module, builtin::SLEEP_NS).unwrap();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (alloc, checker, shared, fill, sleep, pool) = (&alloc, &checker, &shared, &fill, &sleep, &pool);
            scope.spawn(move || {
                let s = d.create_stream().unwrap();
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ ((t as u64 + 1) * 0x1234_5678);
                let mut live: Vec<(gpuport::memory::DeviceAllocation<D::B>, u8)> = Vec::new();
                for _ in 0..ops / threads {
                    let r = xorshift(&mut rng);
                    if !(live.len() < 48 && (live.is_empty() || !r.is_multiple_of(3))) {
                        let (block, value) = live.swap_remove((r >> 16) as usize % live.len());
                        verify(d.as_ref(), &block, value, pool);
                        checker.remove(block.device_ptr());
                        drop(block);
                        continue;
                    }
                    let size = match r % 100 {
                        0..=84 => 1 + (r >> 8) as usize % (64 * 1024),
                        85..=98 => 64 * 1024 + (r >> 8) as usize % MIB,
                        _ => MIB + (r >> 8) as usize % (12 * MIB),
                    };
                    let block = alloc.alloc(size, &s).unwrap();
                    checker.insert(block.device_ptr(), block.len() as u64);
                    let value = (r >> 40) as u8;
                    match (r >> 4) % 16 {
                        0 => {
                            // A late write on another stream; freed while it is queued.
                            let on_shared = block.use_on(shared).unwrap();
                            delay(d.as_ref(), sleep, shared, late_ns);
                            // SAFETY: `on_shared` records the use after the memset; the pool waits for it.
                            unsafe { d.memset_async(&on_shared, 0, size, !value, shared) }.unwrap();
                            drop(on_shared);
                            checker.remove(block.device_ptr());
                            drop(block);
                            continue;
                        }
                        1 => {
                            // A late write on its own stream; freed while it is queued.
                            delay(d.as_ref(), sleep, &s, late_ns);
                            // SAFETY: the pool hands the block to another stream only after a fence on `s`.
                            unsafe { d.memset_async(&block, 0, size, !value, &s) }.unwrap();
                            checker.remove(block.device_ptr());
                            drop(block);
                            continue;
                        }
                        2 => {
                            // Written on another stream and kept: its free waits for that use.
                            let on_shared = block.use_on(shared).unwrap();
                            // SAFETY: as above.
                            unsafe { d.memset_async(&on_shared, 0, size, value, shared) }.unwrap();
                        }
                        3 if size % 4 == 0 && size <= 64 * 1024 => {
                            let mut args = KernelArgs::new();
                            args.push_buffer(&block).push(&(size as u64 / 4)).push(&u32::from_ne_bytes([value; 4]));
                            let cfg = d.default_launch_config(fill, size / 4).unwrap();
                            // SAFETY: fill_u32 writes size/4 u32s of `block`, which outlives the work (pool ordering).
                            unsafe { d.launch(fill, cfg, &args, &s) }.unwrap();
                        }
                        _ => {
                            // SAFETY: the block outlives the memset (pool ordering).
                            unsafe { d.memset_async(&block, 0, size, value, &s) }.unwrap();
                        }
                    }
                    live.push((block, value));
                }
                for (block, value) in live.drain(..) {
                    verify(d.as_ref(), &block, value, pool);
                    checker.remove(block.device_ptr());
                }
                d.synchronize(&s).unwrap();
            });
        }
    });
    let elapsed = start.elapsed();
    d.synchronize(&shared).unwrap();
    let st = stats.get();
    assert_eq!((st.current_bytes, st.current_count), (0, 0), "{st:?}");
    // Each thread holds at most 48 blocks, and one more between an
    // allocation and its free: the peak is a count of blocks live at once,
    // not of blocks ever allocated.
    assert!(st.peak_count <= threads * 49 && st.peak_count < st.total_count, "{st:?}");
    // The pool's own statistics (counted under its lock) saw every call the
    // adaptor saw. The peaks may differ: the adaptor counts after the pool,
    // so at an instant either may see a free the other does not yet.
    let own = pool.statistics().expect("the caching pool counts statistics");
    let figures = |s: &gpuport::memory::Statistics| (s.total_bytes, s.total_count, s.current_bytes, s.current_count);
    assert_eq!(figures(&own), figures(&st));
    assert!(own.peak_count <= threads * 49 && own.peak_count < own.total_count, "{own:?}");
    let report = pool.report();
    assert_eq!((report.in_use, report.requested), (0, 0), "{report}");
    assert!(report.counters.fences > 0 && report.counters.shared_reuses > 0, "blocks changed streams: {report}");
    pool.trim(0).unwrap();
    assert_eq!(pool.report().reserved, 0, "{}", pool.report());
    let _ = writeln!(
        std::io::stderr(),
        "stress on {} (validate {validate}): {ops} operations, {} allocations, peak {} blocks / {:.1} MiB, {:.2} s; {}",
        d.info().spec(),
        st.total_count,
        st.peak_count,
        st.peak_bytes as f64 / MIB as f64,
        elapsed.as_secs_f64(),
        report.to_string().lines().take(2).collect::<Vec<_>>().join(" | ")
    );
}

fn stress_ops(default: usize) -> usize {
    std::env::var("GPUPORT_STRESS_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn random_allocations_on_many_streams_never_overlap_and_leave_nothing<D: MemoryDevice>(d: &Dev<D>) {
    stress(d, stress_ops(40_000), false);
}

fn the_stress_test_passes_the_pools_own_validator<D: MemoryDevice>(d: &Dev<D>) {
    stress(d, stress_ops(40_000) / 8, true);
}

// ---- instantiation ---------------------------------------------------------------------

mod cases {
    crate::arc_backend_tests!(
        a_freed_block_is_reused_on_its_stream_at_once,
        a_block_freed_on_one_stream_reaches_another_only_after_an_event,
        a_block_used_on_another_stream_waits_for_that_use,
        out_of_memory_under_a_limit_is_a_typed_error_and_the_pool_stays_usable,
        the_release_threshold_returns_cached_memory,
        the_fragmentation_report_shows_holes_and_merges_them,
        statistics_count_current_and_peak_bytes,
        the_log_adaptor_writes_one_csv_line_per_event,
        defer_cleanup_holds_frees_back_until_the_guard_goes,
        the_current_resource_is_replaceable_only_before_first_use,
        plain_and_native_resources_allocate_and_native_memory_refuses_ipc,
        pinned_memory_is_pooled_and_honours_its_flags,
        mapped_pinned_memory_is_written_by_the_device_through_its_mapped_address,
        the_native_pool_keeps_memory_up_to_its_threshold_and_trims_it,
        pageable_copies_round_trip_through_the_pipeline,
        pageable_copies_are_staged_on_a_gpu_and_direct_on_the_host,
        a_memarray_used_on_another_stream_keeps_its_block_from_the_pool_until_that_work_is_done,
        exported_memarray_memory_goes_back_only_when_the_device_is_idle,
        random_allocations_on_many_streams_never_overlap_and_leave_nothing,
        the_stress_test_passes_the_pools_own_validator,
    );
}

#[test]
fn ipc_handles_survive_a_text_round_trip() {
    let h = memory::IpcHandle {
        backend: gpuport::BackendKind::Cuda,
        ordinal: 1,
        kind: memory::IpcKind::Memory,
        handle: [7u8; 64],
        offset: 4096,
        len: 99,
    };
    assert_eq!(h.to_text(), format!("cuda:1:4096:99:{}", "07".repeat(64)), "the memory-handle text is unchanged");
    assert_eq!(memory::IpcHandle::from_text(&h.to_text()).unwrap(), h);
    assert!(memory::IpcHandle::from_text("cuda:0:zz").is_err());
}
