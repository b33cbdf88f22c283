//! The host backend's [`GrowableRange`]: an emulation over one plain
//! allocation of the whole reservation (zero-filled, so the system maps its
//! pages only when touched). Growing and shrinking move the mark alone;
//! nothing is unmapped, so memory does not go back to the system until the
//! range is dropped. It lets the caching pool's expandable segments
//! (`src/memory/pool/expandable.rs`) run, and be tested, without a GPU.

use super::Allocation;
use crate::backend::growable::{round_up, too_large, GrowableRange};
use crate::backend::MAX_RESERVATION;
use crate::error::Result;

/// Granularity of the emulation: 2 MiB, as CUDA's on current GPUs.
const HOST_GRANULARITY: usize = 2 << 20;

/// A host reservation; see the [module docs](self).
pub(super) struct HostGrowable {
    memory: Allocation,
    reserved: usize,
    mapped: usize,
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
        // An allocation the system refuses (more than it can ever give) is
        // an address-space error here, not an out-of-memory one.
        let memory = Allocation::new(reserved).map_err(|_| too_large(bytes, reserved, "the system refused it"))?;
        Ok(HostGrowable { memory, reserved, mapped: 0 })
    }
}

// SAFETY: the range is one allocation owned by this struct alone, valid
// until it is dropped; `base` is its fixed address and `mapped` stays a
// multiple of the granularity within `reserved` (checked in `grow_to`).
unsafe impl GrowableRange for HostGrowable {
    fn base(&self) -> u64 {
        self.memory.ptr as u64
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
        self.mapped = self.mapped.max(want);
        Ok(())
    }
    unsafe fn shrink_to(&mut self, bytes: usize) -> Result<()> {
        let keep = round_up(bytes, HOST_GRANULARITY)?;
        self.mapped = self.mapped.min(keep);
        Ok(())
    }
}
