//! Where the memory layer trusts, and checks, what crosses into safe code:
//! blocks go back only to the resource that handed them out, a resource's
//! short or foreign-device block is refused before anyone can write it, a
//! pool's storage is checked the same way, a refused free is recorded and
//! leaks instead of freeing twice, and an IPC handle's range is checked
//! before anything is opened. Every backend (`host` always, `cuda:0` and
//! `rocm:0` where present).

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use gpuport::backend::host::HostBuffer;
use gpuport::backend::Backend;
use gpuport::memory::{
    open_ipc, Allocator, Block, CachingPool, Expandable, IpcHandle, LoggingResource, MemoryDevice, MemoryError,
    MemoryResource, PlainResource, PoolConfig, ResourceId, StatisticsResource, Storage,
};
use gpuport::{Device, DeviceMemory, Error, Event, GrowableRange, Host, HostDevice, Stream};

const MIB: usize = 1 << 20;

type Dev<D> = Arc<D>;

fn refused<T: std::fmt::Debug>(result: gpuport::Result<T>, by: &str) {
    match result {
        Err(Error::Memory(MemoryError::ForeignBlock { resource, .. })) => assert_eq!(resource, by),
        other => panic!("expected {by} to refuse the block, got {other:?}"),
    }
}

fn broke_contract<T: std::fmt::Debug>(result: gpuport::Result<T>, who: &str, what: &str) {
    match result {
        Err(Error::Memory(MemoryError::ContractViolation { resource, reason })) => {
            assert_eq!(resource, who);
            assert!(reason.contains(what), "{reason}");
        }
        other => panic!("expected a contract violation of {who}, got {other:?}"),
    }
}

// ---- blocks go back only where they came from ----------------------------------------------

fn a_block_of_another_resource_is_refused_and_nothing_is_freed<D: MemoryDevice>(d: &Dev<D>) {
    let s = d.create_stream().unwrap();
    let (a, b) =
        (CachingPool::new(d.clone(), PoolConfig::default()), CachingPool::new(d.clone(), PoolConfig::default()));
    let plain = PlainResource::new(d.clone());
    // Each pool's first block: the same token (node 0) in both.
    let block = a.allocate(4096, &s).unwrap();
    let b_live = b.allocate(4096, &s).unwrap();
    assert_eq!(block.token(), b_live.token());
    refused(b.deallocate(block, &s, Vec::new()), "caching-pool");
    let report = b.report();
    let counts = (report.counters.refused_frees, report.counters.frees, report.in_use);
    assert_eq!(counts, (1, 0, 4096), "`b` freed nothing, its own block at that token least of all: {report}");
    b.deallocate(b_live, &s, Vec::new()).unwrap();
    // `a` still counts it handed out: the refused block was leaked, not freed anywhere.
    assert_eq!(a.report().in_use, 4096, "{}", a.report());

    // Across resource kinds too.
    refused(plain.deallocate(a.allocate(512, &s).unwrap(), &s, Vec::new()), "plain");
    // Through the adaptors: the innermost resource refuses, and the counts stay.
    let inner: Arc<dyn MemoryResource<D::B>> = Arc::new(CachingPool::new(d.clone(), PoolConfig::default()));
    let stats = StatisticsResource::new(inner);
    let mine = stats.allocate(1000, &s).unwrap();
    refused(stats.deallocate(a.allocate(1000, &s).unwrap(), &s, Vec::new()), "caching-pool");
    assert_eq!((stats.get().current_count, stats.get().current_bytes), (1, 1000), "a refused free is not counted");
    stats.deallocate(mine, &s, Vec::new()).unwrap();
    assert_eq!(stats.get().current_count, 0);
    d.synchronize(&s).unwrap();
}

/// A copy of `block` under another serial: what only a forger can make.
fn forge<B: Backend>(block: &Block<B>) -> Block<B> {
    // SAFETY: deliberately breaks `Block::new`'s contract (this is not the
    // resource) to show that the pool refuses the forgery: the copy gets a
    // serial number of its own, which no live block of the pool has, and
    // nothing reads or writes the memory it names.
    unsafe { Block::new(block.owner(), block.ordinal(), block.ptr(), block.len(), block.token()) }
}

fn a_double_free_or_a_forged_copy_is_refused_and_the_live_block_survives_trim<D: MemoryDevice>(d: &Dev<D>) {
    let s = d.create_stream().unwrap();
    let pool = Arc::new(CachingPool::new(d.clone(), PoolConfig::default()));
    // 12 MiB: a segment of its own, which `trim(0)` would release if the
    // pool took a forged free of its block for the real one.
    let block = pool.allocate(12 * MIB, &s).unwrap();
    let (ptr, token) = (block.ptr(), block.token());
    refused(pool.deallocate(forge(&block), &s, Vec::new()), "caching-pool");
    pool.trim(0).unwrap();
    let report = pool.report();
    assert_eq!((report.in_use, report.reserved), (12 * MIB, 12 * MIB), "the live block keeps its segment: {report}");

    // The real block goes back; a second free of it is refused.
    let copy = forge(&block);
    pool.deallocate(block, &s, Vec::new()).unwrap();
    refused(pool.deallocate(copy, &s, Vec::new()), "caching-pool");

    // The next owner of the same memory (same stream, same size: same node)
    // is not freed by the old block's copy either.
    let next = pool.allocate(12 * MIB, &s).unwrap();
    assert_eq!((next.ptr(), next.token()), (ptr, token), "the freed block comes back to its stream");
    let stale = forge(&next);
    refused(pool.deallocate(stale, &s, Vec::new()), "caching-pool");
    pool.trim(0).unwrap();
    assert_eq!(pool.report().reserved, 12 * MIB, "{}", pool.report());
    assert_eq!(pool.report().counters.refused_frees, 3);
    pool.deallocate(next, &s, Vec::new()).unwrap();
    pool.trim(0).unwrap();
    assert_eq!(pool.report().reserved, 0);

    // The same through an allocation that safe code writes: forged frees of
    // every token leave its memory in place.
    let alloc = Allocator::from_arc(pool.clone());
    let mut live = alloc.alloc(12 * MIB, &s).unwrap();
    let probe = pool.allocate(512, &s).unwrap();
    for token in 0..64 {
        // SAFETY: as in `forge`: refused, and nothing touches the memory.
        let forged =
            unsafe { Block::<D::B>::new(probe.owner(), probe.ordinal(), live.device_ptr(), live.len(), token) };
        refused(pool.deallocate(forged, &s, Vec::new()), "caching-pool");
    }
    pool.deallocate(probe, &s, Vec::new()).unwrap();
    alloc.reset().unwrap();
    d.synchronize(&s).unwrap();
    let n = live.len();
    d.memset(&mut live, 0, n, 0x5A).unwrap();
    let mut back = vec![0u8; live.len()];
    d.copy_to_host(&live, 0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0x5A));
    assert_eq!(pool.report().in_use, 12 * MIB, "{}", pool.report());
    drop(live);
    assert_eq!(alloc.refused_frees(), 0, "the allocation's own free was accepted");
}

// ---- resources that break their contract ------------------------------------------------

/// Hands out 16-byte blocks whatever is asked: the lie `Allocator::alloc` must catch.
#[derive(Debug)]
struct ShortChanger<B: Backend>(CachingPool<B>);

// SAFETY: a deliberately lying test resource (its blocks are shorter than
// asked). It is used only through `Allocator`, whose length check under test
// refuses every block before anything can write it; the blocks themselves
// are the inner pool's, given back to it unchanged.
unsafe impl<B: Backend> MemoryResource<B> for ShortChanger<B> {
    fn device(&self) -> &Arc<B::Device> {
        self.0.device()
    }
    fn name(&self) -> &'static str {
        "short-changer"
    }
    fn allocate(&self, _bytes: usize, stream: &Stream<B>) -> gpuport::Result<Block<B>> {
        self.0.allocate(16, stream)
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> gpuport::Result<()> {
        self.0.deallocate(block, stream, after)
    }
}

/// Hands out the inner pool's blocks labelled as memory of the next device.
#[derive(Debug)]
struct WrongDevice<B: Backend> {
    inner: CachingPool<B>,
    id: ResourceId,
    real: Mutex<Vec<Block<B>>>,
}

// SAFETY: a deliberately lying test resource (its blocks name another
// device). Used only through `Allocator`, whose device check under test
// refuses every block; the real blocks go back to the inner pool unchanged.
unsafe impl<B: Backend> MemoryResource<B> for WrongDevice<B> {
    fn device(&self) -> &Arc<B::Device> {
        self.inner.device()
    }
    fn name(&self) -> &'static str {
        "wrong-device"
    }
    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> gpuport::Result<Block<B>> {
        let real = self.inner.allocate(bytes, stream)?;
        // SAFETY: the block is this resource's own (its id), over the inner
        // block's memory, which it keeps until this block comes back.
        let fake = unsafe { Block::new(self.id, real.ordinal() + 1, real.ptr(), real.len(), 0) };
        self.real.lock().unwrap().push(real);
        Ok(fake)
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> gpuport::Result<()> {
        block.check_owner(self.id, self.name())?;
        let mut real = self.real.lock().unwrap();
        let i =
            real.iter().position(|r| r.ptr() == block.ptr()).ok_or_else(|| block.refused(self.name(), "unknown"))?;
        self.inner.deallocate(real.swap_remove(i), stream, after)
    }
}

fn a_block_shorter_than_asked_or_of_another_device_is_refused_by_the_allocator<D: MemoryDevice>(d: &Dev<D>) {
    let s = d.create_stream().unwrap();
    let short = Arc::new(ShortChanger(CachingPool::<D::B>::new(d.clone(), PoolConfig::default())));
    let alloc = Allocator::from_arc(short.clone());
    broke_contract(alloc.alloc(4096, &s), "short-changer", "asked for 4096 bytes, it returned a block of 16");
    let report = short.0.report();
    assert_eq!((report.in_use, report.counters.frees), (0, 1), "the short block went back: {report}");
    // A request the lie happens to meet is handed out.
    let fits = alloc.alloc(16, &s).unwrap();
    assert_eq!(fits.len(), 16);
    drop(fits);

    let inner = CachingPool::<D::B>::new(d.clone(), PoolConfig::default());
    let wrong = Arc::new(WrongDevice { inner, id: ResourceId::new(), real: Mutex::new(Vec::new()) });
    let alloc = Allocator::from_arc(wrong.clone());
    let expected = format!("it returned a block of device {}", d.info().ordinal + 1);
    broke_contract(alloc.alloc(4096, &s), "wrong-device", &expected);
    assert_eq!(wrong.inner.report().in_use, 0, "the block went back to the resource");
    d.synchronize(&s).unwrap();
}

/// Refuses every free, as a broken resource that lost track of its blocks would.
#[derive(Debug)]
struct Forgetful<B: Backend>(CachingPool<B>);

// SAFETY: blocks are the inner pool's, unchanged; refusing a free frees
// nothing (the contract's point 5, taken to the extreme).
unsafe impl<B: Backend> MemoryResource<B> for Forgetful<B> {
    fn device(&self) -> &Arc<B::Device> {
        self.0.device()
    }
    fn name(&self) -> &'static str {
        "forgetful"
    }
    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> gpuport::Result<Block<B>> {
        self.0.allocate(bytes, stream)
    }
    fn deallocate(&self, block: Block<B>, _: &Stream<B>, _: Vec<Event<B>>) -> gpuport::Result<()> {
        Err(block.refused(self.name(), "it forgot the block"))
    }
}

fn a_refused_free_is_recorded_and_its_memory_leaked_not_freed<D: MemoryDevice>(d: &Dev<D>) {
    let s = d.create_stream().unwrap();
    let forgetful = Arc::new(Forgetful(CachingPool::<D::B>::new(d.clone(), PoolConfig::default())));
    let alloc = Allocator::from_arc(forgetful.clone());
    let block = alloc.alloc(MIB, &s).unwrap();
    assert_eq!(alloc.refused_frees(), 0);
    drop(block);
    assert_eq!(alloc.refused_frees(), 1);
    assert!(alloc.last_refused_free().unwrap().contains("forgot the block"));
    let guard = alloc.defer_cleanup();
    drop(alloc.alloc(MIB, &s).unwrap());
    drop(guard);
    assert_eq!(alloc.refused_frees(), 2, "a deferred free that is refused is recorded too");
    forgetful.0.trim(0).unwrap();
    assert_eq!(forgetful.0.report().in_use, 2 * MIB, "leaked: still allocated in the pool, never reused");
    d.synchronize(&s).unwrap();
}

// ---- a pool's storage ------------------------------------------------------------------

/// Storage whose segments are half the size asked for.
#[derive(Debug)]
struct HalfStorage<D: Device>(Arc<D>);

// SAFETY: a deliberately lying test storage (segments shorter than asked).
// Each segment is a fresh buffer owned by the segment alone; the pool's
// length check under test refuses them before cutting any block.
unsafe impl<D: MemoryDevice> Storage<D::B> for HalfStorage<D> {
    type Segment = gpuport::Buffer<D::B>;
    fn device(&self) -> &Arc<D> {
        &self.0
    }
    fn alloc(&self, bytes: usize) -> gpuport::Result<Self::Segment> {
        self.0.alloc(bytes / 2)
    }
}

fn a_pool_refuses_a_segment_shorter_than_it_asked_for<D: MemoryDevice>(d: &Dev<D>) {
    // Plain segments, whatever GPUPORT_POOL says: they come from `alloc`.
    let config = PoolConfig { expandable: false, ..PoolConfig::default() };
    let pool = Arc::new(CachingPool::with_storage(HalfStorage(d.clone()), config));
    let alloc = Allocator::from_arc(pool.clone());
    broke_contract(alloc.alloc(4096, d.default_stream()), "caching-pool storage", "asked for a segment of 2097152");
    assert_eq!(pool.report().reserved, 0, "nothing was cut from the short segment");
}

/// A growable range that says it grew but maps nothing.
#[derive(Debug)]
struct NeverMaps(Box<dyn GrowableRange>);

// SAFETY: a deliberately lying test range: `grow_to` succeeds without
// mapping. It forwards every other answer to a real range, whose mapped
// part (none) it never hands out; the pool's check under test refuses the
// growth before cutting any block.
unsafe impl GrowableRange for NeverMaps {
    fn base(&self) -> u64 {
        self.0.base()
    }
    fn reserved(&self) -> usize {
        self.0.reserved()
    }
    fn mapped(&self) -> usize {
        self.0.mapped()
    }
    fn granularity(&self) -> usize {
        self.0.granularity()
    }
    fn ordinal(&self) -> usize {
        self.0.ordinal()
    }
    fn is_virtual(&self) -> bool {
        self.0.is_virtual()
    }
    fn grow_to(&mut self, _: usize) -> gpuport::Result<()> {
        Ok(())
    }
    unsafe fn shrink_to(&mut self, bytes: usize) -> gpuport::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.0.shrink_to(bytes) }
    }
}

/// Storage whose growable ranges never map what they are asked to.
#[derive(Debug)]
struct NeverMapsStorage<D: Device>(Arc<D>);

// SAFETY: hands out no plain segment of its own making (the device's
// buffers), and ranges that map nothing, which the pool refuses (the check
// under test).
unsafe impl<D: MemoryDevice> Storage<D::B> for NeverMapsStorage<D> {
    type Segment = gpuport::Buffer<D::B>;
    fn device(&self) -> &Arc<D> {
        &self.0
    }
    fn alloc(&self, bytes: usize) -> gpuport::Result<Self::Segment> {
        self.0.alloc(bytes)
    }
    fn reserve_growable(&self, bytes: usize) -> gpuport::Result<Box<dyn GrowableRange>> {
        Ok(Box::new(NeverMaps(self.0.reserve_growable(bytes)?)))
    }
}

fn a_pool_refuses_an_expandable_growth_that_mapped_less_than_asked<D: MemoryDevice>(d: &Dev<D>) {
    let config = PoolConfig { expandable: true, expandable_reserve: Some(64 * MIB), ..PoolConfig::default() };
    let pool = Arc::new(CachingPool::with_storage(NeverMapsStorage(d.clone()), config));
    let mode = pool.report().expandable;
    if !matches!(mode, Expandable::Virtual | Expandable::Emulated) {
        let _ = writeln!(std::io::stderr(), "skipped on {}: expandable segments {mode}", d.info().spec());
        return;
    }
    let alloc = Allocator::from_arc(pool.clone());
    broke_contract(alloc.alloc(4096, d.default_stream()), "expandable range", "bytes, 0 are mapped");
    let report = pool.report();
    assert_eq!((report.reserved, report.segments), (0, 0), "nothing was cut from the unmapped range: {report}");
}

// ---- the log adaptor passes refusals on ---------------------------------------------------

fn the_log_adaptor_passes_a_refusal_on<D: MemoryDevice>(d: &Dev<D>) {
    let s = d.create_stream().unwrap();
    let inner: Arc<dyn MemoryResource<D::B>> = Arc::new(CachingPool::new(d.clone(), PoolConfig::default()));
    let log = LoggingResource::new(inner, Box::new(std::io::sink()), false).unwrap();
    let other = CachingPool::new(d.clone(), PoolConfig::default());
    refused(log.deallocate(other.allocate(100, &s).unwrap(), &s, Vec::new()), "caching-pool");
}

// ---- IPC handles ---------------------------------------------------------------------

fn an_ipc_handle_whose_range_cannot_be_memory_is_refused_before_opening<D: MemoryDevice>(d: &Dev<D>) {
    let info = d.info();
    let handle = |offset: u64, len: usize| IpcHandle {
        backend: info.backend,
        ordinal: info.ordinal,
        kind: gpuport::memory::IpcKind::Memory,
        handle: [0; 64],
        offset,
        len,
    };
    for (offset, len) in [(u64::MAX - 10, 100), (0, info.total_memory + 1), (info.total_memory as u64, 1), (0, 0)] {
        // SAFETY: the handle is refused before anything is opened (the check under test).
        match unsafe { open_ipc::<D::B>(d, &handle(offset, len)) } {
            Err(Error::InvalidArgument { name: "IPC handle", .. }) => {}
            other => panic!("offset {offset}, length {len}: expected a refusal, got {other:?}"),
        }
    }
}

// ---- instantiation ---------------------------------------------------------------------

mod cases {
    crate::arc_backend_tests!(
        a_block_of_another_resource_is_refused_and_nothing_is_freed,
        a_double_free_or_a_forged_copy_is_refused_and_the_live_block_survives_trim,
        a_block_shorter_than_asked_or_of_another_device_is_refused_by_the_allocator,
        a_refused_free_is_recorded_and_its_memory_leaked_not_freed,
        a_pool_refuses_a_segment_shorter_than_it_asked_for,
        a_pool_refuses_an_expandable_growth_that_mapped_less_than_asked,
        the_log_adaptor_passes_a_refusal_on,
        an_ipc_handle_whose_range_cannot_be_memory_is_refused_before_opening,
    );
}

/// A plain resource's block (which owns a buffer) given to a pool is refused
/// and its buffer leaked, not freed: host only, where a leak is ordinary
/// memory (on a GPU it would show in a leak checker's report).
#[test]
fn a_buffer_block_refused_by_a_pool_is_leaked_not_freed() {
    let d = HostDevice::open(0).unwrap();
    let s = d.default_stream();
    let plain = PlainResource::new(d.clone());
    let pool = CachingPool::<Host>::new(d.clone(), PoolConfig::default());
    let block = plain.allocate(4096, s).unwrap();
    let owner = block.buffer().and_then(|b: &HostBuffer| b.owner()).expect("host buffers have owners");
    let before = Arc::strong_count(&owner);
    refused(pool.deallocate(block, s, Vec::new()), "caching-pool");
    assert_eq!(Arc::strong_count(&owner), before, "the buffer was not dropped: leaked, so never freed under a user");
}

/// Storage that counts what it is asked for and has nothing to give.
#[derive(Debug)]
struct CountingStorage(Arc<HostDevice>, Arc<AtomicUsize>);

// SAFETY: hands out no segment at all.
unsafe impl Storage<Host> for CountingStorage {
    type Segment = HostBuffer;
    fn device(&self) -> &Arc<HostDevice> {
        &self.0
    }
    fn alloc(&self, bytes: usize) -> gpuport::Result<HostBuffer> {
        self.1.fetch_add(1, Ordering::Relaxed);
        Err(Error::OutOfMemory { backend: gpuport::BackendKind::Host, ordinal: 0, bytes })
    }
}

/// A pool indexes its blocks with u32s, so it holds at most 2 TiB: a request
/// past that is out of memory before the storage is asked (not a wrapped index).
#[test]
fn a_pool_refuses_to_grow_past_what_its_indices_can_count() {
    let d = HostDevice::open(0).unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let pool = CachingPool::with_storage(CountingStorage(d.clone(), asked.clone()), PoolConfig::default());
    match pool.allocate(3 << 40, d.default_stream()) {
        Err(Error::OutOfMemory { bytes, .. }) => assert_eq!(bytes, 3 << 40),
        other => panic!("expected out of memory, got {other:?}"),
    }
    assert_eq!(asked.load(Ordering::Relaxed), 0, "the storage was not asked");
}
