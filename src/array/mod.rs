//! Typed arrays on any backend: [`MemArray`], [`ArrayIndexer`] and strided
//! [views](view).
//!
//! A [`MemArray`] keeps a host copy and (once moved there) a device copy of
//! an `N`-dimensional array and knows which copies are current. Views
//! describe strided windows of memory (host, device or managed) and convert
//! to DLPack without heap allocation; [`crate::dlpack`] exports and imports
//! owning DLPack tensors.

pub mod dtype;
pub mod element;
pub mod indexer;
pub mod memarray;
pub mod view;

pub use element::{Element, Scalar};
pub use indexer::ArrayIndexer;
pub use memarray::{DeviceCopyToken, ExportOptions, LockId, MemArray, Residency, Transfer};
pub use view::{DLPackTensor, DLTensorRef, DeviceSpace, HostSpace, ManagedSpace, Space, View};

/// Defined in the error layer (`src/error/array.rs`) so that
/// [`Error`](crate::Error) wraps them without importing this layer; this is
/// their public path.
pub use crate::error::array::{ImportRefusal, Location, LockError, ResidencyError, ShapeError};

/// The number of elements of `shape` and a check that they fit in
/// `isize::MAX` bytes of `elem_size`-byte elements.
pub(crate) fn checked_len(shape: &[usize], elem_size: usize) -> Result<usize, ShapeError> {
    let too_large = || ShapeError::TooLarge { shape: shape.to_vec(), elem_size };
    // DLPack and the indexer carry extents as i64: a larger one, even in an
    // empty shape, would be exported negative.
    if shape.iter().any(|&e| i64::try_from(e).is_err()) {
        return Err(too_large());
    }
    let len = shape.iter().try_fold(1usize, |acc, &e| acc.checked_mul(e)).ok_or_else(too_large)?;
    let bytes = len.checked_mul(elem_size.max(1)).ok_or_else(too_large)?;
    if bytes > isize::MAX as usize {
        return Err(too_large());
    }
    Ok(len)
}

/// Compact row-major strides (in elements) for `shape`.
pub(crate) fn row_major_strides<const N: usize>(shape: &[usize; N]) -> [isize; N] {
    let mut strides = [0isize; N];
    let mut s: isize = 1;
    for axis in (0..N).rev() {
        strides[axis] = s;
        // Callers have checked the total size fits isize; wrapping only ever
        // happens after the last use for a zero-size shape.
        s = s.wrapping_mul(to_isize(shape[axis]));
    }
    strides
}

/// An index or extent of an array or view as an `isize`, wrapping as `as`
/// does. Shapes were checked to fit `isize` bytes ([`checked_len`]) and
/// views' reachable offsets to fit `isize` when made, so an index below its
/// extent fits; a stride product past an empty axis may wrap, and is never
/// used to reach memory.
#[allow(clippy::cast_possible_wrap)]
#[inline]
pub(crate) fn to_isize(i: usize) -> isize {
    i as isize
}

/// An extent as the `i64` that kernels and DLPack take: [`checked_len`]
/// refused extents past `i64::MAX`, even in an empty shape.
#[allow(clippy::cast_possible_wrap)]
pub(crate) fn extent_i64(e: usize) -> i64 {
    e as i64
}
