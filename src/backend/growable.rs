//! Growable ranges of device memory ([`GrowableRange`]): a large range of
//! addresses reserved once, backed by physical memory from its start up to
//! a mark that moves up and down, so that memory handed out from the
//! mapped part keeps its address as the range grows and shrinks. On CUDA
//! and HIP this is the driver's virtual memory management
//! (`cuMemAddressReserve`/`cuMemCreate`/`cuMemMap`/`cuMemSetAccess`,
//! `src/backend/gpu/growable.rs`); the host backend emulates it with one
//! plain allocation of the whole range (`src/backend/host/growable.rs`).
//! The caching pool's expandable segments are made of these
//! (`src/memory/pool/expandable.rs`).

use std::fmt;

use crate::error::memory::MemoryError;
use crate::error::Result;

/// Most bytes a range may reserve: 2^47 (128 TiB), the user half of a
/// 48-bit address space, which no device's virtual address space exceeds
/// for one process. A larger reservation is refused with
/// [`MemoryError::AddressSpace`] before any driver call.
pub const MAX_RESERVATION: usize = 1 << 47;

/// A reserved range of device addresses whose first [`mapped`](Self::mapped)
/// bytes are backed by physical memory of one device.
///
/// # Safety
/// An implementation promises that `base()..base() + mapped()` is memory
/// of the device that made it, used by nothing but the range's owner,
/// valid until [`shrink_to`](Self::shrink_to) unmaps it or the range is
/// dropped; that `base()` never changes; that `mapped()` is a multiple of
/// [`granularity`](Self::granularity) no larger than
/// [`reserved`](Self::reserved); and that memory already mapped keeps its
/// contents and address across [`grow_to`](Self::grow_to).
pub unsafe trait GrowableRange: Send + Sync + fmt::Debug + 'static {
    /// The first address of the range.
    fn base(&self) -> u64;
    /// Bytes of addresses reserved.
    fn reserved(&self) -> usize;
    /// Bytes mapped from the start of the range.
    fn mapped(&self) -> usize;
    /// The unit of mapping: every growth and shrink is a multiple of it.
    fn granularity(&self) -> usize;
    /// The device's ordinal.
    fn ordinal(&self) -> usize;
    /// Whether physical memory is really mapped and unmapped (the driver's
    /// virtual memory management), or the range is an emulation over one
    /// plain allocation (the host backend).
    fn is_virtual(&self) -> bool;
    /// Maps physical memory at the end of the mapped part until at least
    /// `bytes` (rounded up to the granularity) are mapped. Nothing changes
    /// on failure: [`Error::OutOfMemory`](crate::Error::OutOfMemory) when
    /// the device is full, [`MemoryError::AddressSpace`] past the
    /// reservation.
    fn grow_to(&mut self, bytes: usize) -> Result<()>;
    /// Unmaps and frees the physical memory past `bytes` (rounded up to the
    /// granularity); does nothing if no more than that is mapped.
    ///
    /// # Safety
    /// Nothing uses the memory past `bytes` any more: no block handed out,
    /// no queued device work.
    unsafe fn shrink_to(&mut self, bytes: usize) -> Result<()>;
}

/// [`MemoryError::AddressSpace`] for a reservation of `bytes` past `limit`.
pub(crate) fn too_large(bytes: usize, limit: usize, why: &str) -> crate::error::Error {
    MemoryError::AddressSpace { bytes, reason: format!("{why} (at most {limit} bytes)") }.into()
}

/// `bytes` rounded up to `unit`, or [`MemoryError::AddressSpace`] if that overflows.
pub(crate) fn round_up(bytes: usize, unit: usize) -> Result<usize> {
    bytes.checked_next_multiple_of(unit.max(1)).ok_or_else(|| too_large(bytes, usize::MAX, "cannot be rounded"))
}
