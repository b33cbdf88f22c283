//! The memory layer's own error, [`MemoryError`]: defined here so that
//! [`Error`](super::Error) wraps it without the error layer importing the
//! memory layer (`docs/design.md#layers`). Its public path is
//! `gpuport::memory::MemoryError` (re-exported by `src/memory/block.rs`);
//! the resources, allocators and `without_waiting` it speaks of are in
//! `src/memory/`.

/// Why a resource refused a block, or why a resource's answer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// `MemoryResource::deallocate` was
    /// given a block the resource did not hand out, or that is not live
    /// there (freed already, or forged). Nothing was freed; a buffer the
    /// block carried is leaked rather than freed under a possible user.
    #[error("memory resource {resource:?} refused {block}: {reason}; nothing was freed")]
    ForeignBlock {
        /// The refusing resource's name.
        resource: &'static str,
        /// The block, as its `Debug` prints it.
        block: String,
        /// What did not match.
        reason: String,
    },
    /// A resource broke the contract of `MemoryResource`
    /// in a way `Allocator` can see (a block shorter than
    /// requested, of another device, or wrapping around the address space).
    /// The block was given back to the resource and not handed out.
    #[error("memory resource {resource:?} broke its contract: {reason}")]
    ContractViolation {
        /// The resource's name.
        resource: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// Inside `without_waiting`: the allocation
    /// would have waited for another thread, and nothing changed.
    #[error("memory resource {resource:?} would have waited for another thread (inside `without_waiting`)")]
    WouldWait {
        /// The resource's name.
        resource: &'static str,
    },
    /// Prefetch or advice asked of memory that is not managed (unified)
    /// memory; nothing was done.
    #[error("{op} needs managed memory, and this is {kind} memory; allocate it as managed memory")]
    NotManaged {
        /// `"prefetch"` or `"advise"`.
        op: &'static str,
        /// The memory's kind (`"device"`, `"pinned"`, ...).
        kind: String,
    },
    /// Managed memory cannot be placed there: no such device, or one that
    /// cannot access managed memory concurrently with the host. Nothing was done.
    #[error("{op} to {place}: {reason}")]
    NotAccessible {
        /// `"prefetch"` or `"advise"`.
        op: &'static str,
        /// The place asked for (`"device 3"`).
        place: String,
        /// Why not.
        reason: String,
    },
    /// A reservation of addresses larger than the device's address space
    /// (or than [`MAX_RESERVATION`](crate::backend::MAX_RESERVATION)), or a
    /// growth past the reservation. Nothing was reserved or mapped.
    #[error("cannot reserve {bytes} bytes of device addresses: {reason}")]
    AddressSpace {
        /// The bytes asked for.
        bytes: usize,
        /// Why not.
        reason: String,
    },
    /// IPC of memory from an expandable segment (mapped with the driver's
    /// virtual memory management, which the legacy IPC handles cannot
    /// export). Nothing was exported; use a pool without expandable segments
    /// for memory shared with other processes.
    #[error("{op}: the memory at {ptr:#x} is part of an expandable segment, which IPC cannot share; allocate it from a pool without expandable segments")]
    ExpandableIpc {
        /// The refused operation (`"ipc export"`).
        op: &'static str,
        /// The block's address.
        ptr: u64,
    },
}
