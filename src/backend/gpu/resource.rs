//! What the memory layer asks of a GPU device beyond [`Device`]: pinned
//! memory with options, the driver's stream-ordered pools, and IPC
//! ([`MemoryDevice`], whose contracts apply to every method here).

use super::device::GpuDevice;
use super::driver::{Driver, ManagedCalls, VmmCalls};
use super::stream::apart_from_captures;
use crate::backend::managed::{check_managed, check_place};
use crate::backend::{check_alloc_size, Buffer, Device, HostRegistration, MemoryKind, PinnedBuffer, Stream};
use crate::backend::{Advice, DeviceMemory, ManagedPlace};
use crate::backend::{ExportedPoolFd, IpcBytes, MemoryDevice, PinnedFlags, RawPool};
use crate::error::memory::MemoryError;
use crate::error::{Error, Result};

impl<D: Driver> GpuDevice<D> {
    /// The device's default stream-ordered pool (the one `alloc_async` uses).
    fn default_mem_pool(&self) -> Result<RawPool> {
        if !self.info().stream_ordered_alloc {
            return Err(Error::Unsupported {
                op: "stream-ordered memory pools",
                backend: D::KIND,
                hint: Some(format!("{} does not support {}", self.info().name, D::ASYNC_ALLOC)),
            });
        }
        self.driver().bind()?;
        self.driver().default_pool()
    }
}

impl<D: Driver> MemoryDevice for GpuDevice<D> {
    fn growable_is_virtual(&self) -> Result<bool> {
        D::Vmm::supported(self.driver(), self.info().ordinal)
    }

    fn reserve_growable(&self, bytes: usize) -> Result<Box<dyn crate::backend::GrowableRange>> {
        let info = self.info();
        Ok(Box::new(super::growable::GpuGrowable::reserve(self.driver(), info.ordinal, &info.name, bytes)?))
    }

    fn prefetch_managed(&self, memory: &Buffer<Self::B>, to: ManagedPlace, stream: &Stream<Self::B>) -> Result<()> {
        check_managed("prefetch", memory)?;
        self.check_stream(stream)?;
        check_place("prefetch", to, D::count()?)?;
        if let ManagedPlace::Device(n) = to {
            if !D::Managed::concurrent_managed_access(self.driver(), n)? {
                let reason = "that device cannot access managed memory concurrently with the host \
                              (no concurrent managed access), so the driver cannot prefetch to it"
                    .to_string();
                return Err(MemoryError::NotAccessible { op: "prefetch", place: to.to_string(), reason }.into());
            }
        }
        if memory.len() == 0 {
            return Ok(());
        }
        self.driver().bind()?;
        // SAFETY: the buffer is live managed memory (checked) borrowed for
        // the call; a managed buffer is freed with the synchronous free,
        // which waits for the device, so it outlives the queued prefetch.
        // The stream is this device's (checked), the device is current, and
        // `to` names the host or an existing device (checked).
        unsafe { D::Managed::prefetch(self.driver(), memory.device_ptr(), memory.len(), to, stream.raw()) }
    }

    fn advise_managed(&self, memory: &Buffer<Self::B>, advice: Advice, place: ManagedPlace) -> Result<()> {
        check_managed("advise", memory)?;
        check_place("advise", place, D::count()?)?;
        if memory.len() == 0 {
            return Ok(());
        }
        self.driver().bind()?;
        // SAFETY: the buffer is live managed memory (checked) borrowed for
        // the call, the device is current, and `place` names the host or an
        // existing device (checked).
        unsafe { D::Managed::advise(self.driver(), memory.device_ptr(), memory.len(), advice, place) }
    }

    fn alloc_pinned_with(&self, bytes: usize, flags: PinnedFlags) -> Result<PinnedBuffer<Self::B>> {
        let mut bits = 0;
        if flags.portable {
            bits |= D::HOST_ALLOC_PORTABLE;
        }
        if flags.mapped {
            bits |= D::HOST_ALLOC_MAPPED;
        }
        if flags.write_combined {
            bits |= D::HOST_ALLOC_WRITE_COMBINED;
        }
        self.alloc_pinned_flags(bytes, bits)
    }

    fn mapped_device_ptr(&self, host: *mut u8) -> Result<u64> {
        self.driver().bind()?;
        self.driver().host_device_ptr(host)
    }

    unsafe fn pin_with(&self, ptr: *mut u8, len: usize, mapped: bool) -> Result<HostRegistration<Self::B>> {
        let mut bits = D::HOST_REGISTER_PORTABLE;
        if mapped {
            bits |= D::HOST_REGISTER_MAPPED;
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.register_host_flags(ptr, len, bits) }
    }

    fn set_native_pool_release_threshold(&self, bytes: u64) -> Result<()> {
        let pool = self.default_mem_pool()?;
        // SAFETY: the device is current (bound above); the default pool lives as long as the device.
        unsafe { self.driver().pool_set_release_threshold(pool, bytes) }
    }

    fn native_pool_reserved(&self) -> Result<u64> {
        let pool = self.default_mem_pool()?;
        // SAFETY: as in `set_native_pool_release_threshold`.
        unsafe { self.driver().pool_reserved(pool) }
    }

    fn trim_native_pool(&self, keep: usize) -> Result<()> {
        let pool = self.default_mem_pool()?;
        // SAFETY: as in `set_native_pool_release_threshold`.
        unsafe { self.driver().pool_trim_to(pool, keep) }
    }

    fn ipc_export(&self, ptr: u64) -> Result<(IpcBytes, u64)> {
        self.driver().bind()?;
        self.driver().ipc_get_handle(ptr)
    }

    fn ipc_import(&self, handle: &IpcBytes) -> Result<u64> {
        self.driver().bind()?;
        self.driver().ipc_open(handle)
    }

    unsafe fn ipc_close(&self, base: u64) -> Result<()> {
        self.driver().bind()?;
        // SAFETY: the device is current; the caller's contract covers `base`.
        apart_from_captures(&**self.driver(), || unsafe { self.driver().ipc_close(base) })
    }

    // ---- pools of our own that other processes can import ----------------------------
    //
    // Both vendors' documented way to share stream-ordered memory (CUDA's
    // streamOrderedAllocationIPC sample): a pool created with a shareable
    // handle type, exported once as a POSIX file descriptor, and each block
    // exported as 64 bytes of pointer export data.

    fn create_shareable_pool(&self) -> Result<RawPool> {
        self.default_mem_pool()?; // the same "no stream-ordered pools" error
        self.driver().pool_create_shareable(self.info())
    }

    unsafe fn pool_set_release_threshold(&self, pool: RawPool, bytes: u64) -> Result<()> {
        self.driver().bind()?;
        // SAFETY: the device is current; the caller's contract: a live pool of this device.
        unsafe { self.driver().pool_set_release_threshold(pool, bytes) }
    }

    unsafe fn pool_trim(&self, pool: RawPool, keep: usize) -> Result<()> {
        self.driver().bind()?;
        // SAFETY: as in `pool_set_release_threshold`.
        unsafe { self.driver().pool_trim_to(pool, keep) }
    }

    unsafe fn pool_alloc(&self, pool: RawPool, bytes: usize, stream: &Stream<Self::B>) -> Result<Buffer<Self::B>> {
        check_alloc_size(bytes)?;
        self.check_stream(stream)?;
        self.driver().bind()?;
        self.refuse_allocation_in_capture(stream, "pool_alloc")?;
        // SAFETY: the device is current; a live pool of this device (the
        // caller's contract) and a stream of it (checked); the buffer keeps
        // the stream alive to free on it.
        let ptr = unsafe { self.driver().pool_alloc_async(pool, bytes, stream.raw()) }
            .map_err(|e| self.out_of_memory(e, bytes))?;
        Ok(self.buffer(ptr, bytes, MemoryKind::Device, Some(stream.clone())))
    }

    unsafe fn pool_destroy(&self, pool: RawPool) -> Result<()> {
        self.driver().bind()?;
        // SAFETY: the device is current; the caller's contract: live, destroyed once, not used after.
        apart_from_captures(&**self.driver(), || unsafe { self.driver().pool_destroy(pool) })
    }

    unsafe fn pool_export(&self, pool: RawPool) -> Result<ExportedPoolFd> {
        self.driver().bind()?;
        // SAFETY: as in `pool_set_release_threshold`.
        unsafe { self.driver().pool_export(pool) }
    }

    fn pool_export_pointer(&self, ptr: u64) -> Result<IpcBytes> {
        self.driver().bind()?;
        self.driver().pool_export_pointer(ptr)
    }

    unsafe fn pool_import(&self, fd: i32) -> Result<RawPool> {
        self.driver().bind()?;
        // SAFETY: the device is current; the caller's contract: `fd` is open
        // and names a pool of this backend.
        unsafe { self.driver().pool_import(fd) }
    }

    unsafe fn pool_import_pointer(&self, pool: RawPool, data: &IpcBytes) -> Result<u64> {
        self.driver().bind()?;
        // SAFETY: the device is current; the caller's contract: an imported, live pool.
        unsafe { self.driver().pool_import_pointer(pool, data) }
    }

    unsafe fn pool_free_imported(&self, ptr: u64) -> Result<()> {
        self.driver().bind()?;
        // SAFETY: the device is current; the caller's contract: imported
        // here, freed once, no queued work uses it.
        apart_from_captures(&**self.driver(), || unsafe { self.driver().free_imported(ptr) })
    }
}
