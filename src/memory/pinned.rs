//! Pinned (page-locked) host memory with options, and a pool of it.

use crate::backend::Backend;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::{Device, HostMemory, PinnedBuffer};
use crate::error::Result;

use super::ext::MemoryDevice;

// The options live in the backend layer, whose `MemoryDevice` takes them.
pub use crate::backend::PinnedFlags;

/// Pinned host memory; goes back to its [`PinnedPool`] (if any) when dropped.
///
/// Invariant: `buffer` is `Some` until drop and holds at least `len` bytes.
pub struct PinnedMemory<B: Backend> {
    buffer: Option<PinnedBuffer<B>>,
    len: usize,
    flags: PinnedFlags,
    mapped_ptr: Option<u64>,
    home: Option<Arc<PoolInner<B>>>,
}

impl<B: Backend> fmt::Debug for PinnedMemory<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PinnedMemory({} bytes, {:?}, pooled {})", self.len, self.flags, self.home.is_some())
    }
}

impl<B: Backend> PinnedMemory<B> {
    /// Allocates straight from the device, outside any pool.
    pub fn unpooled(device: &Arc<B::Device>, bytes: usize, flags: PinnedFlags) -> Result<Self> {
        let mut buffer = device.alloc_pinned_with(bytes, flags)?;
        let mapped_ptr =
            if flags.mapped { Some(device.mapped_device_ptr(buffer.as_mut_slice().as_mut_ptr())?) } else { None };
        Ok(PinnedMemory { buffer: Some(buffer), len: bytes, flags, mapped_ptr, home: None })
    }

    /// The options it was allocated with.
    pub fn flags(&self) -> PinnedFlags {
        self.flags
    }

    /// The device address of mapped memory, `None` unless allocated `mapped`.
    pub fn mapped_ptr(&self) -> Option<u64> {
        self.mapped_ptr
    }

    /// Bytes actually reserved (a pool rounds sizes up).
    pub fn capacity(&self) -> usize {
        self.buffer.as_ref().map(|b| b.as_slice().len()).unwrap_or(0)
    }
}

impl<B: Backend> HostMemory for PinnedMemory<B> {
    fn as_slice(&self) -> &[u8] {
        match &self.buffer {
            Some(b) => &b.as_slice()[..self.len],
            None => &[],
        }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.buffer {
            Some(b) => &mut b.as_mut_slice()[..self.len],
            None => &mut [],
        }
    }
}

impl<B: Backend> Drop for PinnedMemory<B> {
    fn drop(&mut self) {
        if let (Some(home), Some(buffer)) = (self.home.take(), self.buffer.take()) {
            home.give_back(self.flags, self.mapped_ptr, buffer);
        }
    }
}

/// The smallest size class of a [`PinnedPool`]: one 4 KiB page.
pub const MIN_CLASS: usize = 4096;

type Cached<B> = (Option<u64>, PinnedBuffer<B>);
/// Idle buffers by (flags, capacity), and the bytes they hold.
type Cache<B> = (HashMap<(PinnedFlags, usize), Vec<Cached<B>>>, usize);

struct PoolInner<B: Backend> {
    device: Arc<B::Device>,
    max_cached: usize,
    /// Cached buffers by (flags, capacity) and the bytes they hold.
    cache: Mutex<Cache<B>>,
    /// Bytes (capacities) of the buffers handed out and not yet back.
    in_use: AtomicUsize,
}

impl<B: Backend> PoolInner<B> {
    fn give_back(&self, flags: PinnedFlags, mapped_ptr: Option<u64>, buffer: PinnedBuffer<B>) {
        let capacity = buffer.as_slice().len();
        self.in_use.fetch_sub(capacity, Ordering::Relaxed);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.1 + capacity <= self.max_cached {
            cache.1 += capacity;
            cache.0.entry((flags, capacity)).or_default().push((mapped_ptr, buffer));
        }
        // Else the buffer is dropped (unpinned) here.
    }
}

/// A cache of pinned host buffers by size class (see [`class_of`](Self::class_of)),
/// since pinning and unpinning cost far more than a copy of a few MiB.
///
/// Reused buffers are not cleared. A buffer is reused only after its
/// [`PinnedMemory`] was dropped, which the async-copy contracts allow only
/// once the copies using it have completed.
pub struct PinnedPool<B: Backend> {
    inner: Arc<PoolInner<B>>,
}

impl<B: Backend> Clone for PinnedPool<B> {
    fn clone(&self) -> Self {
        PinnedPool { inner: self.inner.clone() }
    }
}

impl<B: Backend> fmt::Debug for PinnedPool<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PinnedPool({}, {} bytes cached)", self.inner.device.info().spec(), self.cached_bytes())
    }
}

impl<B: Backend> PinnedPool<B> {
    /// A pool that keeps at most `max_cached` bytes of idle buffers.
    pub fn new(device: Arc<B::Device>, max_cached: usize) -> Self {
        let cache = Mutex::new((HashMap::new(), 0));
        PinnedPool { inner: Arc::new(PoolInner { device, max_cached, cache, in_use: AtomicUsize::new(0) }) }
    }

    /// The size class of a request: [`MIN_CLASS`] up to that size, then
    /// four classes per power of two (1, 1.25, 1.5 and 1.75 × 2^k) in whole
    /// `MIN_CLASS` pages. Above 16 KiB a buffer is less than a quarter larger
    /// than its request: 3 MiB takes 3 MiB, not 4.
    ///
    /// ```
    /// use gpuport::memory::PinnedPool;
    /// type P = PinnedPool<gpuport::Host>;
    /// assert_eq!(P::class_of(1), 4096);
    /// assert_eq!(P::class_of(3 << 20), 3 << 20);
    /// assert_eq!(P::class_of((4 << 20) + 1), 5 << 20);
    /// assert_eq!(P::class_of(100_000), 7 * 16384);
    /// ```
    pub fn class_of(bytes: usize) -> usize {
        if bytes <= MIN_CLASS {
            return MIN_CLASS;
        }
        let power = 1usize << (usize::BITS - 1 - bytes.leading_zeros());
        let step = (power / 4).max(MIN_CLASS);
        bytes.checked_next_multiple_of(step).unwrap_or(bytes)
    }

    /// A pinned buffer of `bytes`, cached or new.
    pub fn alloc(&self, bytes: usize, flags: PinnedFlags) -> Result<PinnedMemory<B>> {
        crate::backend::check_alloc_size(bytes)?;
        let class = Self::class_of(bytes);
        let cached = {
            let mut cache = self.inner.cache.lock().unwrap_or_else(|p| p.into_inner());
            let hit = cache.0.get_mut(&(flags, class)).and_then(Vec::pop);
            if hit.is_some() {
                cache.1 -= class;
            }
            hit
        };
        let (mapped_ptr, buffer) = match cached {
            Some(hit) => hit,
            None => {
                let mut fresh = PinnedMemory::<B>::unpooled(&self.inner.device, class, flags)?;
                (fresh.mapped_ptr, fresh.buffer.take().ok_or_else(unreachable_none)?)
            }
        };
        self.inner.in_use.fetch_add(buffer.as_slice().len(), Ordering::Relaxed);
        Ok(PinnedMemory { buffer: Some(buffer), len: bytes, flags, mapped_ptr, home: Some(self.inner.clone()) })
    }

    /// Bytes (capacities) of the pool's buffers handed out and not yet dropped.
    pub fn in_use_bytes(&self) -> usize {
        self.inner.in_use.load(Ordering::Relaxed)
    }

    /// Bytes held by idle cached buffers.
    pub fn cached_bytes(&self) -> usize {
        self.inner.cache.lock().unwrap_or_else(|p| p.into_inner()).1
    }

    /// Unpins every idle cached buffer.
    pub fn release(&self) {
        let drained = std::mem::take(&mut *self.inner.cache.lock().unwrap_or_else(|p| p.into_inner()));
        drop(drained);
    }
}

fn unreachable_none() -> crate::Error {
    crate::Error::InvalidArgument { name: "pinned buffer", reason: "internal: fresh buffer missing".into() }
}
