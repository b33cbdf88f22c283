//! The host backend's [`GrowableRange`]: an emulation over one plain
//! allocation of the whole reservation, left unwritten so that the system
//! backs its pages only when touched (a zero-filled one would touch them
//! all: Rust zeroes aligned allocations by hand). Growing zero-fills the
//! granules it "maps", as fresh device memory is initialized; shrinking
//! moves the mark alone, so memory does not go back to the system until
//! the range is dropped. It lets the caching pool's expandable segments
//! (`src/memory/pool/expandable.rs`) run, and be tested, without a GPU.

use std::alloc::Layout;

use crate::backend::growable::{round_up, too_large, GrowableRange};
use crate::backend::MAX_RESERVATION;
use crate::error::{Error, Result};

/// Granularity of the emulation: 2 MiB, as CUDA's on current GPUs.
const HOST_GRANULARITY: usize = 2 << 20;

/// A host reservation; see the [module docs](self).
pub(super) struct HostGrowable {
    ptr: *mut u8,
    layout: Layout,
    reserved: usize,
    mapped: usize,
}

// SAFETY: the allocation is plain bytes owned by this struct; access is
// governed by the pool that owns the range, as for device memory.
unsafe impl Send for HostGrowable {}
// SAFETY: as above; `&HostGrowable` only exposes the address and sizes.
unsafe impl Sync for HostGrowable {}

impl Drop for HostGrowable {
    fn drop(&mut self) {
        // SAFETY: allocated in `reserve` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

impl std::fmt::Debug for HostGrowable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostGrowable({:#x}, {} of {} bytes mapped)", self.base(), self.mapped, self.reserved)
    }
}

impl HostGrowable {
    /// Reserves `bytes` rounded up to the granularity.
    pub(super) fn reserve(bytes: usize) -> Result<Self> {
        if bytes > MAX_RESERVATION {
            return Err(too_large(bytes, MAX_RESERVATION, "more than the address space"));
        }
        let reserved = round_up(bytes.max(1), HOST_GRANULARITY)?;
        let layout = Layout::from_size_align(reserved, HOST_GRANULARITY)
            .map_err(|e| Error::InvalidArgument { name: "bytes", reason: e.to_string() })?;
        // SAFETY: `layout` has non-zero size (at least one granule).
        let ptr = unsafe { std::alloc::alloc(layout) };
        // An allocation the system refuses (more than it can ever give) is
        // an address-space error here, not an out-of-memory one.
        if ptr.is_null() {
            return Err(too_large(bytes, reserved, "the system refused it"));
        }
        Ok(HostGrowable { ptr, layout, reserved, mapped: 0 })
    }
}

// SAFETY: the range is one allocation owned by this struct alone, valid
// until it is dropped, whose mapped part was zero-filled when it grew;
// `base` is its fixed address and `mapped` stays a multiple of the
// granularity within `reserved` (checked in `grow_to`).
unsafe impl GrowableRange for HostGrowable {
    fn base(&self) -> u64 {
        self.ptr as u64
    }
    fn reserved(&self) -> usize {
        self.reserved
    }
    fn mapped(&self) -> usize {
        self.mapped
    }
    fn granularity(&self) -> usize {
        HOST_GRANULARITY
    }
    fn ordinal(&self) -> usize {
        0
    }
    fn is_virtual(&self) -> bool {
        false
    }
    fn grow_to(&mut self, bytes: usize) -> Result<()> {
        let want = round_up(bytes, HOST_GRANULARITY)?;
        if want > self.reserved {
            return Err(too_large(want, self.reserved, "past the end of the reservation"));
        }
        if want > self.mapped {
            // SAFETY: `mapped..want` lies in the allocation (`want <= reserved`),
            // and nothing uses it: it is past the mapped part.
            unsafe { self.ptr.add(self.mapped).write_bytes(0, want - self.mapped) };
            self.mapped = want;
        }
        Ok(())
    }
    unsafe fn shrink_to(&mut self, bytes: usize) -> Result<()> {
        let keep = round_up(bytes, HOST_GRANULARITY)?;
        self.mapped = self.mapped.min(keep);
        Ok(())
    }
}
