//! Element access through the host copy of a [`MemArray`]: checked and
//! unchecked reads and writes of one element, the copy as a slice, and
//! copies between it and caller slices.

use super::{Element, Location, LockId, MemArray, Residency};
use crate::backend::Device;
use crate::error::Result;

impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// Reads the element at `index` from the host copy.
    ///
    /// Errors: locked without the id, the host copy not current, or out of bounds.
    pub fn get(&self, index: [usize; N], lock: Option<LockId>) -> Result<T> {
        self.check_lock("get", lock)?;
        self.check_resident("get", Location::Host)?;
        let lin = self.linear(index)?;
        self.wait_pending()?;
        // SAFETY: `lin < len` (checked); no copy is writing (waited), and
        // writes through this array need `&mut self`.
        Ok(unsafe { self.host.slice()[lin] })
    }

    /// Writes the element at `index` in the host copy; the device copy
    /// becomes stale.
    ///
    /// Errors: locked without the id, the host copy not current, or out of bounds.
    pub fn set(&mut self, index: [usize; N], value: T, lock: Option<LockId>) -> Result<()> {
        self.check_lock("set", lock)?;
        self.check_resident("set", Location::Host)?;
        let lin = self.linear(index)?;
        self.synchronize()?;
        // SAFETY: `lin < len`; `&mut self` and the finished copies exclude
        // every other access through this array.
        unsafe { self.host.slice_mut()[lin] = value };
        self.set_residency(Residency::Host);
        Ok(())
    }

    /// Reads the element at `index` without any check.
    ///
    /// # Safety
    /// - every `index[i] < shape[i]`;
    /// - the host copy is current and no asynchronous copy is pending
    ///   (otherwise the value is stale or the read races the copy).
    pub unsafe fn get_unchecked(&self, index: [usize; N]) -> T {
        let lin = self.linear_unchecked(index);
        // SAFETY: the caller guarantees the index is in bounds and no copy
        // writes the block.
        unsafe { *self.host.ptr().add(lin) }
    }

    /// Writes the element at `index` without any check; the device copy
    /// becomes stale.
    ///
    /// # Safety
    /// - every `index[i] < shape[i]`;
    /// - no asynchronous copy is pending (the write would race it).
    pub unsafe fn set_unchecked(&mut self, index: [usize; N], value: T) {
        let _order = self.replay_order();
        self.sync_replays();
        let lin = self.linear_unchecked(index);
        // SAFETY: the caller guarantees bounds and no concurrent copy.
        unsafe { *self.host.ptr().add(lin) = value };
        self.set_residency(Residency::Host);
    }

    fn linear_unchecked(&self, index: [usize; N]) -> usize {
        index.iter().zip(&self.shape).fold(0usize, |lin, (&i, &e)| lin.wrapping_mul(e).wrapping_add(i))
    }

    /// The host copy as a slice (row-major).
    pub fn as_slice(&self, lock: Option<LockId>) -> Result<&[T]> {
        self.check_lock("as_slice", lock)?;
        self.check_resident("as_slice", Location::Host)?;
        self.wait_pending()?;
        // SAFETY: no copy is writing (waited); writes through this array need
        // `&mut self`, which the returned borrow excludes.
        Ok(unsafe { self.host.slice() })
    }

    /// The host copy as a mutable slice; the device copy becomes stale.
    pub fn as_mut_slice(&mut self, lock: Option<LockId>) -> Result<&mut [T]> {
        self.check_lock("as_mut_slice", lock)?;
        self.check_resident("as_mut_slice", Location::Host)?;
        self.synchronize()?;
        self.set_residency(Residency::Host);
        // SAFETY: `&mut self` is borrowed for the slice's lifetime and no copy
        // is pending, so the slice is the only access.
        Ok(unsafe { self.host.slice_mut() })
    }

    /// Copies `src` (row-major, `len()` elements) into the host copy, which
    /// becomes the only current copy.
    pub fn copy_from_slice(&mut self, src: &[T], lock: Option<LockId>) -> Result<()> {
        self.check_lock("copy_from_slice", lock)?;
        self.check_len("copy_from_slice", src.len())?;
        self.synchronize()?;
        // SAFETY: as in `as_mut_slice`; `src.len()` is the length, checked above.
        unsafe { self.host.overwrite_from(src) };
        self.set_residency(Residency::Host);
        Ok(())
    }

    /// Sets every element of the host copy to `value`; the device copy becomes stale.
    pub fn fill(&mut self, value: T, lock: Option<LockId>) -> Result<()> {
        self.check_lock("fill", lock)?;
        self.synchronize()?;
        // SAFETY: as in `as_mut_slice`.
        unsafe { self.host.overwrite_with(value) };
        self.set_residency(Residency::Host);
        Ok(())
    }

    /// Copies the host copy (row-major) into `dst`, which must have `len()` elements.
    pub fn copy_to_slice(&self, dst: &mut [T], lock: Option<LockId>) -> Result<()> {
        self.check_len("copy_to_slice", dst.len())?;
        dst.copy_from_slice(self.as_slice(lock)?);
        Ok(())
    }

    /// The host copy as a new `Vec` (row-major).
    pub fn to_vec(&self, lock: Option<LockId>) -> Result<Vec<T>> {
        Ok(self.as_slice(lock)?.to_vec())
    }
}
