//! What the memory layer needs from a device beyond the [`Device`] trait:
//! [`MemoryDevice`], and the plain values its methods take and return.
//!
//! Every backend's device implements it (`Backend::Device` requires it, so
//! code generic over `D: Device` can allocate through the memory layer on
//! any backend), so it lives in the backend layer with `Device`: the host
//! backend implements it in `host.rs`, the GPU backends once in
//! `gpu/resource.rs`. The memory layer re-exports it (`crate::memory`).
//!
//! It has a default for every method (an [`Error::Unsupported`] or the plain
//! `Device` call), so a new backend joins the memory layer with one empty
//! `impl` and gains features method by method.

use super::growable::GrowableRange;
use super::managed::{check_managed, Advice, ManagedPlace};
use super::{Backend, Buffer, Device, HostRegistration, PinnedBuffer, Stream};
use crate::error::{Error, Result};

/// Options of a pinned host allocation (NBEP 7 `memhostalloc`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PinnedFlags {
    /// Map the memory into the device's address space
    /// ([`PinnedMemory::mapped_ptr`](crate::memory::PinnedMemory::mapped_ptr)).
    pub mapped: bool,
    /// Pinned for every context, not just the allocating one.
    pub portable: bool,
    /// Write-combined: fast for the host to write and the device to read,
    /// very slow for the host to read.
    pub write_combined: bool,
}

impl PinnedFlags {
    /// Pinned for every context, nothing else: what `Device::alloc_pinned`
    /// allocates, and what the library's own pinned buffers (array host
    /// copies, copy staging) take from the current resource.
    pub const PORTABLE: PinnedFlags = PinnedFlags { mapped: false, portable: true, write_combined: false };
}

/// Raw bytes of a driver IPC memory handle (`CUipcMemHandle`, `hipIpcMemHandle_t`),
/// or of a pool block's export data (`CUmemPoolPtrExportData`,
/// `hipMemPoolPtrExportData`): both are 64 opaque bytes.
pub type IpcBytes = [u8; 64];

/// A driver memory pool (`CUmemoryPool`, `hipMemPool_t`) as a plain value:
/// a pool the memory layer created ([`MemoryDevice::create_shareable_pool`])
/// or imported ([`MemoryDevice::pool_import`]). The methods that take one are
/// `unsafe`: the value must name a live pool of that device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawPool(pub usize);

/// A pool's POSIX file descriptor from [`MemoryDevice::pool_export`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportedPoolFd {
    /// The descriptor, in this process.
    pub fd: i32,
    /// Whether the caller closes it (CUDA makes a new descriptor per export,
    /// which the caller owns) or the pool does (ROCm makes one per pool,
    /// returns that one on every export and closes it with the pool).
    pub caller_closes: bool,
}

fn unsupported<D: Device>(op: &'static str, hint: &str) -> Error {
    Error::Unsupported { op, backend: <D::B as Backend>::KIND, hint: Some(hint.to_string()) }
}

/// Backend operations used by memory resources.
pub trait MemoryDevice: Device {
    /// Allocates zero-filled pinned host memory with the given options.
    fn alloc_pinned_with(&self, bytes: usize, flags: PinnedFlags) -> Result<PinnedBuffer<Self::B>> {
        if flags.mapped || flags.write_combined {
            return Err(unsupported::<Self>("mapped or write-combined pinned memory", "allocate with default flags"));
        }
        self.alloc_pinned(bytes)
    }

    /// The device address of mapped pinned memory starting at `host`.
    fn mapped_device_ptr(&self, host: *mut u8) -> Result<u64> {
        let _ = host;
        Err(unsupported::<Self>("mapped pinned memory", "copy through the device instead"))
    }

    /// Page-locks existing host memory, optionally mapping it for the device.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid host memory that outlives the registration.
    unsafe fn pin_with(&self, ptr: *mut u8, len: usize, mapped: bool) -> Result<HostRegistration<Self::B>> {
        if mapped {
            return Err(unsupported::<Self>("mapped host registration", "pin without mapping"));
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.register_host(ptr, len) }
    }

    /// Sets the native stream-ordered pool's release threshold in bytes.
    fn set_native_pool_release_threshold(&self, bytes: u64) -> Result<()> {
        let _ = bytes;
        Err(unsupported::<Self>("a native stream-ordered pool", "use CachingPool"))
    }

    /// Bytes the native pool holds from the driver now.
    fn native_pool_reserved(&self) -> Result<u64> {
        Err(unsupported::<Self>("a native stream-ordered pool", "use CachingPool"))
    }

    /// Returns the native pool's unused memory to the driver, keeping `keep` bytes.
    fn trim_native_pool(&self, keep: usize) -> Result<()> {
        let _ = keep;
        Err(unsupported::<Self>("a native stream-ordered pool", "use CachingPool"))
    }

    /// Exports the allocation containing `ptr`: its IPC handle and base address.
    fn ipc_export(&self, ptr: u64) -> Result<(IpcBytes, u64)> {
        let _ = ptr;
        Err(unsupported::<Self>("IPC memory handles", "share memory between processes on a GPU backend"))
    }

    /// Opens another process's IPC handle; returns the allocation's base here.
    fn ipc_import(&self, handle: &IpcBytes) -> Result<u64> {
        let _ = handle;
        Err(unsupported::<Self>("IPC memory handles", "share memory between processes on a GPU backend"))
    }

    /// Closes a mapping made by [`ipc_import`](Self::ipc_import).
    ///
    /// # Safety
    /// `base` came from `ipc_import` on this device, is closed once, and
    /// no queued work uses it any more.
    unsafe fn ipc_close(&self, base: u64) -> Result<()> {
        let _ = base;
        Err(unsupported::<Self>("IPC memory handles", "nothing to close"))
    }

    // ---- stream-ordered pools of the memory layer's own, shareable between processes ----

    /// Creates a stream-ordered pool of this device's memory whose blocks
    /// other processes can import: pinned device memory, exportable as a
    /// POSIX file descriptor (`cuMemPoolCreate`, `hipMemPoolCreate`).
    fn create_shareable_pool(&self) -> Result<RawPool> {
        Err(unsupported::<Self>("a shareable stream-ordered pool", "share memory between processes on a GPU backend"))
    }

    /// Sets a pool's release threshold in bytes.
    ///
    /// # Safety
    /// `pool` came from [`create_shareable_pool`](Self::create_shareable_pool)
    /// on this device and is not destroyed.
    unsafe fn pool_set_release_threshold(&self, pool: RawPool, bytes: u64) -> Result<()> {
        let _ = (pool, bytes);
        Err(unsupported::<Self>("a shareable stream-ordered pool", "use CachingPool"))
    }

    /// Returns a pool's unused memory to the driver, keeping `keep` bytes.
    ///
    /// # Safety
    /// As [`pool_set_release_threshold`](Self::pool_set_release_threshold).
    unsafe fn pool_trim(&self, pool: RawPool, keep: usize) -> Result<()> {
        let _ = (pool, keep);
        Err(unsupported::<Self>("a shareable stream-ordered pool", "use CachingPool"))
    }

    /// Allocates from a pool in the order of `stream`; the buffer is freed
    /// on `stream` when dropped.
    ///
    /// # Safety
    /// As [`pool_set_release_threshold`](Self::pool_set_release_threshold).
    unsafe fn pool_alloc(&self, pool: RawPool, bytes: usize, stream: &Stream<Self::B>) -> Result<Buffer<Self::B>> {
        let _ = (pool, bytes, stream);
        Err(unsupported::<Self>("a shareable stream-ordered pool", "use CachingPool"))
    }

    /// Destroys a pool made by [`create_shareable_pool`](Self::create_shareable_pool)
    /// or [`pool_import`](Self::pool_import). Memory still allocated from it
    /// stays valid; the driver releases the pool when that memory is freed.
    ///
    /// # Safety
    /// `pool` is a live pool of this device, destroyed once, and not used after.
    unsafe fn pool_destroy(&self, pool: RawPool) -> Result<()> {
        let _ = pool;
        Err(unsupported::<Self>("a shareable stream-ordered pool", "nothing to destroy"))
    }

    /// Exports a pool as a POSIX file descriptor, for another process to
    /// take (see [`crate::memory::ipc`]) and pass to [`pool_import`](Self::pool_import).
    ///
    /// # Safety
    /// As [`pool_set_release_threshold`](Self::pool_set_release_threshold).
    unsafe fn pool_export(&self, pool: RawPool) -> Result<ExportedPoolFd> {
        let _ = pool;
        Err(unsupported::<Self>("IPC of stream-ordered pool memory", "share memory between processes on a GPU backend"))
    }

    /// The export data of the pool block at `ptr` (its first byte, as the
    /// pool allocated it), for [`pool_import_pointer`](Self::pool_import_pointer)
    /// in a process that imported the pool.
    fn pool_export_pointer(&self, ptr: u64) -> Result<IpcBytes> {
        let _ = ptr;
        Err(unsupported::<Self>("IPC of stream-ordered pool memory", "share memory between processes on a GPU backend"))
    }

    /// Imports another process's pool from a descriptor of this process
    /// (which the caller still owns and may close once this returns).
    ///
    /// # Safety
    /// `fd` is open and refers to a pool exported by [`pool_export`](Self::pool_export)
    /// of the same backend (ROCm maps the file behind it and reads it).
    unsafe fn pool_import(&self, fd: i32) -> Result<RawPool> {
        let _ = fd;
        Err(unsupported::<Self>("IPC of stream-ordered pool memory", "share memory between processes on a GPU backend"))
    }

    /// Maps a block of an imported pool; returns its address here.
    ///
    /// # Safety
    /// `pool` came from [`pool_import`](Self::pool_import) on this device and is not destroyed.
    unsafe fn pool_import_pointer(&self, pool: RawPool, data: &IpcBytes) -> Result<u64> {
        let _ = (pool, data);
        Err(unsupported::<Self>("IPC of stream-ordered pool memory", "share memory between processes on a GPU backend"))
    }

    /// Frees a block mapped by [`pool_import_pointer`](Self::pool_import_pointer)
    /// (`cuMemFree`, `hipFree`, as the drivers document for imported pool memory).
    ///
    /// # Safety
    /// `ptr` came from `pool_import_pointer` on this device, is freed once,
    /// and no queued work uses it any more.
    unsafe fn pool_free_imported(&self, ptr: u64) -> Result<()> {
        let _ = ptr;
        Err(unsupported::<Self>("IPC of stream-ordered pool memory", "nothing to free"))
    }

    // ---- managed memory -----------------------------------------------------------

    /// Enqueues on `stream` moving the managed `memory` toward `to`
    /// (`cuMemPrefetchAsync`, `hipMemPrefetchAsync`), so that work there
    /// finds it in place. Memory that is not managed is
    /// [`MemoryError::NotManaged`](crate::memory::MemoryError::NotManaged);
    /// a place that cannot take it (no such device, or a device without
    /// concurrent managed access) is
    /// [`MemoryError::NotAccessible`](crate::memory::MemoryError::NotAccessible).
    /// The host backend checks the same and moves nothing.
    fn prefetch_managed(&self, memory: &Buffer<Self::B>, to: ManagedPlace, stream: &Stream<Self::B>) -> Result<()> {
        check_managed("prefetch", memory)?;
        let _ = (to, stream);
        Err(unsupported::<Self>("prefetching managed memory", "leave the driver to migrate it on access"))
    }

    /// Gives the driver `advice` about the managed `memory` for `place`
    /// (`cuMemAdvise`, `hipMemAdvise`); the read-mostly advice ignores
    /// `place`. Errors as [`prefetch_managed`](Self::prefetch_managed)'s;
    /// the host backend checks and does nothing.
    fn advise_managed(&self, memory: &Buffer<Self::B>, advice: Advice, place: ManagedPlace) -> Result<()> {
        check_managed("advise", memory)?;
        let _ = (advice, place);
        Err(unsupported::<Self>("advice on managed memory", "leave the driver to place it"))
    }

    // ---- growable ranges ----------------------------------------------------------

    /// Whether [`reserve_growable`](Self::reserve_growable) maps physical
    /// memory on demand (the driver's virtual memory management, probed at
    /// run time: `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`,
    /// `hipDeviceAttributeVirtualMemoryManagementSupported`); `Ok(false)`
    /// where it is unsupported or emulated.
    fn growable_is_virtual(&self) -> Result<bool> {
        Ok(false)
    }

    /// Reserves `bytes` of device addresses (rounded up to the mapping
    /// granularity), none mapped yet: the memory of the caching pool's
    /// expandable segments. More than the address space is
    /// [`MemoryError::AddressSpace`](crate::memory::MemoryError::AddressSpace);
    /// a device or driver without virtual memory management is
    /// [`Error::Unsupported`]. The host backend emulates it with one plain
    /// allocation of the whole range (untouched pages cost nothing).
    fn reserve_growable(&self, bytes: usize) -> Result<Box<dyn GrowableRange>> {
        let _ = bytes;
        Err(unsupported::<Self>("growable ranges (virtual memory management)", "use plain segments"))
    }
}
