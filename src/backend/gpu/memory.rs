//! Memory a GPU device hands out: device and managed buffers, pinned host
//! buffers, and host registrations. Each frees itself on drop.

use std::fmt;
use std::sync::Arc;

use super::driver::Driver;
use super::stream::{apart_from_captures, GpuStream};
use super::Gpu;
use crate::backend::{DeviceMemory, DeviceMemoryMut, HostMemory, MemoryKind};

/// Device or managed memory; freed on drop (in stream order if allocated
/// so), once the last [`owner`](DeviceMemory::owner) handed out (a graph
/// that captured work on it) is gone too.
pub struct GpuBuffer<D: Driver> {
    alloc: Arc<Allocation<D>>,
    kind: MemoryKind,
}

/// The memory of a [`GpuBuffer`], freed when the last reference goes.
struct Allocation<D: Driver> {
    ptr: u64,
    len: usize,
    /// The stream of a stream-ordered allocation, kept alive to free on it.
    free_on: Option<GpuStream<D>>,
    driver: Arc<D>,
}

impl<D: Driver> GpuBuffer<D> {
    /// Takes ownership of `len` bytes at `ptr`, allocated by `driver` (on
    /// `free_on`, where given).
    pub(crate) fn new(driver: Arc<D>, ptr: u64, len: usize, kind: MemoryKind, free_on: Option<GpuStream<D>>) -> Self {
        GpuBuffer { alloc: Arc::new(Allocation { ptr, len, free_on, driver }), kind }
    }
}

impl<D: Driver> fmt::Debug for GpuBuffer<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}Buffer({}:{}, {:#x}, {} bytes, {:?})",
            D::NAME,
            D::KIND,
            self.ordinal(),
            self.alloc.ptr,
            self.alloc.len,
            self.kind
        )
    }
}

// SAFETY: `ptr..ptr+len` is the allocation this buffer made, freed when the
// last of this buffer and the owners it handed out is dropped; the driver
// state it belongs to outlives it (held by `driver`).
unsafe impl<D: Driver> DeviceMemory for GpuBuffer<D> {
    type B = Gpu<D>;
    fn len(&self) -> usize {
        self.alloc.len
    }
    fn device_ptr(&self) -> u64 {
        self.alloc.ptr
    }
    fn ordinal(&self) -> usize {
        self.alloc.driver.ordinal()
    }
    fn kind(&self) -> MemoryKind {
        self.kind
    }
    fn owner(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        Some(self.alloc.clone())
    }
}

// SAFETY: a GpuBuffer is not `Clone` and hands out no second handle on its
// memory: an owner only keeps it allocated, it gives no access to the bytes.
unsafe impl<D: Driver> DeviceMemoryMut for GpuBuffer<D> {}

// SAFETY: holds an address and handles the driver lets any thread use.
unsafe impl<D: Driver> Send for Allocation<D> {}
// SAFETY: as above; `&Allocation` gives no access to the bytes.
unsafe impl<D: Driver> Sync for Allocation<D> {}

impl<D: Driver> Drop for Allocation<D> {
    fn drop(&mut self) {
        // Errors cannot be returned from drop; a failed free leaves the
        // memory to the driver's teardown.
        if self.driver.bind().is_err() {
            return;
        }
        // SAFETY: `ptr` was allocated by this driver and is freed once,
        // here; a stream-ordered allocation is freed on its own stream,
        // which `free_on` keeps alive.
        let _ = apart_from_captures(&*self.driver, || unsafe {
            self.driver.free(self.ptr, self.free_on.as_ref().map(GpuStream::raw))
        });
    }
}

/// Page-locked host memory (`cuMemHostAlloc`, `hipHostMalloc`).
pub struct GpuPinnedBuffer<D: Driver> {
    ptr: *mut u8,
    len: usize,
    driver: Arc<D>,
}

// SAFETY: plain host bytes owned by this value.
unsafe impl<D: Driver> Send for GpuPinnedBuffer<D> {}
// SAFETY: `&self` only gives shared access to the bytes.
unsafe impl<D: Driver> Sync for GpuPinnedBuffer<D> {}

impl<D: Driver> GpuPinnedBuffer<D> {
    /// Takes ownership of `len` zeroed bytes at `ptr` from `driver.host_alloc`.
    pub(crate) fn new(driver: Arc<D>, ptr: *mut u8, len: usize) -> Self {
        GpuPinnedBuffer { ptr, len, driver }
    }
}

impl<D: Driver> fmt::Debug for GpuPinnedBuffer<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}PinnedBuffer({:p}, {} bytes)", D::NAME, self.ptr, self.len)
    }
}

impl<D: Driver> HostMemory for GpuPinnedBuffer<D> {
    fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes from `host_alloc`, zeroed at allocation, alive while self is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<D: Driver> Drop for GpuPinnedBuffer<D> {
    fn drop(&mut self) {
        if self.driver.bind().is_ok() {
            // SAFETY: allocated by `host_alloc` of this driver, freed once.
            let _ = apart_from_captures(&*self.driver, || unsafe { self.driver.host_free(self.ptr) });
        }
    }
}

/// Host memory registered (page-locked) with the driver; unregistered on drop.
pub struct GpuHostRegistration<D: Driver> {
    ptr: *mut u8,
    len: usize,
    driver: Arc<D>,
}

// SAFETY: holds only an address for unregistering; no access to the bytes.
unsafe impl<D: Driver> Send for GpuHostRegistration<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for GpuHostRegistration<D> {}

impl<D: Driver> GpuHostRegistration<D> {
    /// Takes over the registration of `ptr..ptr+len` made by `driver.host_register`.
    pub(crate) fn new(driver: Arc<D>, ptr: *mut u8, len: usize) -> Self {
        GpuHostRegistration { ptr, len, driver }
    }
}

impl<D: Driver> fmt::Debug for GpuHostRegistration<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}HostRegistration({:p}, {} bytes)", D::NAME, self.ptr, self.len)
    }
}

impl<D: Driver> Drop for GpuHostRegistration<D> {
    fn drop(&mut self) {
        if self.driver.bind().is_ok() {
            // SAFETY: registered by `host_register` of this driver, unregistered once.
            let _ = apart_from_captures(&*self.driver, || unsafe { self.driver.host_unregister(self.ptr) });
        }
    }
}
