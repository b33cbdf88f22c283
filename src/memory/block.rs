//! [`Block`]: what a [`MemoryResource`](super::MemoryResource) hands out and
//! takes back; [`ResourceId`], the identity a resource stamps on its blocks;
//! and [`MemoryError`], what a resource says when it refuses one.
//!
//! A block is a receipt, not a capability: its fields are private, it is
//! neither `Clone` nor `Copy`, and it carries a serial number that only
//! [`Block::new`] and [`Block::from_buffer`] assign (never settable), so a
//! resource can tell the block it handed out from any other value with the
//! same address, length and token, and refuse the latter.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{Buffer, DeviceMemory};
use crate::error::Result;

use crate::backend::Backend;

/// The identity of one memory resource, unique in the process: resources
/// stamp it on the blocks they hand out and refuse blocks stamped otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceId(u64);

impl ResourceId {
    /// A new identity, different from every other one made in this process.
    #[allow(clippy::new_without_default)] // a default would be a fresh id: say so by calling `new`
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ResourceId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

pub use crate::error::memory::MemoryError;

/// A piece of device memory as a resource hands it out and takes it back.
///
/// Users see blocks only inside a [`DeviceAllocation`](super::DeviceAllocation);
/// resource authors create them in [`MemoryResource::allocate`](super::MemoryResource::allocate)
/// with [`new`](Self::new) (raw addresses: `unsafe`) or
/// [`from_buffer`](Self::from_buffer) (a buffer the block then owns), and get
/// them back, unchanged, in `deallocate`.
///
/// Dropping a block anywhere but in its resource frees nothing: a buffer it
/// carries is leaked (queued work may still use it), so a refused or lost
/// block can never turn into a double free or a free under a user.
pub struct Block<B: Backend> {
    ptr: u64,
    len: usize,
    ordinal: usize,
    owner: ResourceId,
    token: u64,
    serial: u64,
    buffer: Option<Buffer<B>>,
}

/// Serial numbers of blocks made by [`Block::new`] and [`Block::from_buffer`]:
/// every such block of the process gets its own, with [`SHARED_SERIAL`] set,
/// so none equals a serial a resource numbers itself ([`Block::with_serial`]).
fn next_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed) | SHARED_SERIAL
}

/// The bit that marks a serial number as drawn from the process-wide counter.
pub const SHARED_SERIAL: u64 = 1 << 63;

impl<B: Backend> Block<B> {
    /// A block of `len` bytes at device address `ptr` of device `ordinal`,
    /// handed out by the resource `owner`, with a resource-private `token`
    /// (the caching pool's block index). The block gets a new serial number.
    ///
    /// # Safety
    /// The caller is the resource `owner` and hands the block out from its
    /// `allocate`: `ptr..ptr + len` is live memory of device `ordinal` that
    /// stays valid, and that no one else is handed, until the block comes
    /// back through the resource's `deallocate` (and the work that frees it
    /// waits for, see [`MemoryResource`](super::MemoryResource)).
    pub unsafe fn new(owner: ResourceId, ordinal: usize, ptr: u64, len: usize, token: u64) -> Self {
        Block { ptr, len, ordinal, owner, token, serial: next_serial(), buffer: None }
    }

    /// As [`new`](Self::new), with a serial number the resource chose
    /// instead of one from the process-wide counter (an atomic increment per
    /// block: the caching pool numbers its blocks under its own lock).
    ///
    /// # Safety
    /// As [`new`](Self::new); and `serial` does not have [`SHARED_SERIAL`]
    /// set, and `owner` gives no two live blocks the same serial.
    pub unsafe fn with_serial(
        owner: ResourceId,
        ordinal: usize,
        ptr: u64,
        len: usize,
        token: u64,
        serial: u64,
    ) -> Self {
        debug_assert_eq!(serial & SHARED_SERIAL, 0);
        Block { ptr, len, ordinal, owner, token, serial, buffer: None }
    }

    /// A block of the first `len` bytes of `buffer`, which the block owns
    /// (the resource frees it in `deallocate`, through [`into_buffer`](Self::into_buffer)).
    /// [`MemoryError::ContractViolation`] if `len` is 0 or longer than the buffer.
    pub fn from_buffer(owner: ResourceId, buffer: Buffer<B>, len: usize, token: u64) -> Result<Self> {
        if len == 0 || len > buffer.len() {
            return Err(MemoryError::ContractViolation {
                resource: "Block::from_buffer",
                reason: format!("a block of {len} bytes cannot wrap a buffer of {} bytes", buffer.len()),
            }
            .into());
        }
        Ok(Block {
            ptr: buffer.device_ptr(),
            len,
            ordinal: buffer.ordinal(),
            owner,
            token,
            serial: next_serial(),
            buffer: Some(buffer),
        })
    }

    /// Device address of the first byte.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes usable from [`ptr`](Self::ptr) (at least those requested).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block has no bytes (never, for a block a resource handed out).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Ordinal of the device whose memory this is.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The resource that made the block.
    pub fn owner(&self) -> ResourceId {
        self.owner
    }

    /// The resource-private number given at creation.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The block's serial number: unique in the process, set at creation.
    /// A resource records it when it hands the block out and refuses a
    /// block whose serial it does not hold.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// The buffer the block owns, for blocks made by [`from_buffer`](Self::from_buffer).
    pub fn buffer(&self) -> Option<&Buffer<B>> {
        self.buffer.as_ref()
    }

    /// Takes the buffer out, for the resource to free it (dropping the
    /// buffer frees it; dropping the block would leak it).
    pub fn into_buffer(mut self) -> Option<Buffer<B>> {
        self.buffer.take()
    }

    /// [`MemoryError::ForeignBlock`] unless `owner` made this block.
    pub fn check_owner(&self, owner: ResourceId, resource: &'static str) -> Result<()> {
        if self.owner == owner {
            Ok(())
        } else {
            Err(self.refused(resource, "it was handed out by another resource"))
        }
    }

    /// The [`MemoryError::ForeignBlock`] a resource named `resource` returns
    /// when it refuses this block for `reason`.
    pub fn refused(&self, resource: &'static str, reason: &str) -> crate::Error {
        MemoryError::ForeignBlock { resource, block: format!("{self:?}"), reason: reason.to_string() }.into()
    }
}

impl<B: Backend> Drop for Block<B> {
    fn drop(&mut self) {
        // Only a resource frees a block's buffer (through `into_buffer`). A
        // block dropped anywhere else was refused or lost, and queued work
        // may still use its memory: leak it rather than free it.
        if let Some(buffer) = self.buffer.take() {
            std::mem::forget(buffer);
        }
    }
}

impl<B: Backend> fmt::Debug for Block<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Block({:#x}, {} bytes, device {}, {:?}, token {}, serial {})",
            self.ptr, self.len, self.ordinal, self.owner, self.token, self.serial
        )
    }
}
