//! [`LockContext`]: one `get_dlpack` block's life, as a binding's context
//! manager (Python's `DLPackContext`) holds it.
//!
//! A context is used once: fresh (exports without a lock, as a plain
//! export), entered (holds the array's lock id; exports with it), then
//! closed (exports nothing more: the array may move or change its data
//! after the block; tensors taken inside keep their memory alive, so they
//! stay valid, but they no longer track the array). [`LockContext::exit`]
//! always gives the lock back and cannot fail.
//!
//! Every method takes the array as `&mut AnyArray` (or `&AnyArray`): the
//! caller holds the array's lock (`src/dynamic/exclusive.rs`) while the
//! phase changes.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use super::exchange::{self, ExportRequest};
use super::export::Export;
use super::{AnyArray, AnyStream};
use crate::array::{Location, LockError, LockId};
use crate::dlpack::{DLDevice, DLPackError};
use crate::error::Result;

const FRESH: u8 = 0;
const ENTERED: u8 = 1;
const CLOSED: u8 = 2;

/// A new lock id: a per-process random odd base plus twice a counter, so
/// every id is odd (never 0) and the ids of one process are distinct.
pub fn next_lock_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(u64::from(std::process::id()));
        h.finish() >> 16
    });
    (base | 1).wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(2))
}

/// One `get_dlpack` block: its lock id, how it exports, and its phase.
#[derive(Debug)]
pub struct LockContext {
    id: u64,
    read_only: bool,
    /// The copy the block exports (and makes current on entry), when the caller named one.
    prefer: Option<Location>,
    /// FRESH, ENTERED or CLOSED; changed only under the array's lock.
    phase: AtomicU8,
}

impl LockContext {
    /// A fresh block with a new lock id; its exports are flagged read-only
    /// when `read_only`, and go to the copy `prefer` names (else the array's
    /// natural copy).
    pub fn new(read_only: bool, prefer: Option<Location>) -> Self {
        LockContext { id: next_lock_id(), read_only, prefer, phase: AtomicU8::new(FRESH) }
    }

    /// The lock id the block holds once entered.
    pub fn lock_id(&self) -> u64 {
        self.id
    }

    /// The copy the block exports, when the caller named one.
    pub fn prefer(&self) -> Option<Location> {
        self.prefer
    }

    /// Enters the block: locks `array` with this block's id and, for an
    /// owned array, makes the preferred copy current again on `stream`
    /// (the array's device's default stream when `None`), waiting.
    /// A block is entered once: [`LockError::BlockEntered`] the second
    /// time, [`LockError::BlockEnded`] after its exit.
    pub fn enter(&self, array: &mut AnyArray, stream: Option<&AnyStream>) -> Result<()> {
        match self.phase.load(Ordering::Acquire) {
            FRESH => {}
            ENTERED => return Err(LockError::BlockEntered { id: self.id }.into()),
            _ => return Err(LockError::BlockEnded { op: "__enter__", id: self.id }.into()),
        }
        let default;
        let prefer = match (self.prefer, stream) {
            (None, _) => None,
            (Some(to), Some(s)) => Some((to, s)),
            (Some(to), None) => {
                default = AnyStream::default_for(&array.device());
                Some((to, &default))
            }
        };
        array.enter_block(self.id, prefer)?;
        self.phase.store(ENTERED, Ordering::Release);
        Ok(())
    }

    /// Closes the block and unlocks `array` if this block holds its lock;
    /// whether the block was entered (a fresh or closed one releases
    /// nothing, and stays as it was).
    pub fn exit(&self, array: &mut AnyArray) -> bool {
        let was_entered = self.phase.compare_exchange(ENTERED, CLOSED, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if was_entered && array.lock_id() == Some(self.id) {
            array.exit();
        }
        was_entered
    }

    /// Exports `array` as [`exchange::export`] does for `req`, with this
    /// block's flags: read-only as made, its preferred copy, and its lock
    /// while entered. A closed block exports nothing ([`DLPackError::BlockEnded`]).
    ///
    /// # Safety
    /// As for [`exchange::export`]: `req.stream`, unless a sentinel, is a
    /// live stream of the array's device.
    pub unsafe fn export(&self, array: &mut AnyArray, mut req: ExportRequest) -> Result<Export> {
        req.lock = match self.phase.load(Ordering::Acquire) {
            FRESH => None,
            ENTERED => Some(LockId(self.id)),
            _ => return Err(DLPackError::BlockEnded { id: self.id }.into()),
        };
        req.read_only = self.read_only;
        req.prefer = self.prefer;
        // SAFETY: the caller vouches for `req.stream` (this function's contract).
        unsafe { exchange::export(array, req) }
    }

    /// The DLPack device an export of `array` through this block names.
    pub fn dl_device(&self, array: &AnyArray) -> DLDevice {
        array.dl(self.prefer.unwrap_or_else(|| array.natural()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ids_are_odd_and_distinct() {
        let (a, b) = (next_lock_id(), next_lock_id());
        assert_ne!(a, b);
        assert_eq!(a & 1, 1);
        assert_eq!(b & 1, 1);
    }
}
