//! Typed arrays on any backend: [`MemArray`], [`ArrayIndexer`] and strided
//! [views](view).
//!
//! A [`MemArray`] keeps a host copy and (once moved there) a device copy of
//! an `N`-dimensional array and knows which copies are current. Views
//! describe strided windows of memory (host, device or managed) and convert
//! to DLPack without heap allocation; [`crate::dlpack`] exports and imports
//! owning DLPack tensors.

use std::fmt;

pub mod dtype;
pub mod element;
pub mod indexer;
pub mod memarray;
pub mod view;

pub use element::{Element, Scalar};
pub use indexer::ArrayIndexer;
pub use memarray::{DeviceCopyToken, ExportOptions, LockId, MemArray, Residency, Transfer};
pub use view::{DLPackTensor, DLTensorRef, DeviceSpace, HostSpace, ManagedSpace, Space, View};

/// Where a copy of an array lives: host memory or the device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// The host copy (ordinary host memory).
    Host,
    /// The device copy (device memory of the array's device).
    Device,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Location::Host => "host",
            Location::Device => "device",
        })
    }
}

/// A shape, index, slice or stride that an array or view cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// The array would need more than `isize::MAX` bytes.
    #[error("shape {shape:?} of {elem_size}-byte elements needs more than isize::MAX bytes; the element count times the element size must be at most {max}", max = isize::MAX)]
    TooLarge {
        /// The requested shape.
        shape: Vec<usize>,
        /// Size of one element in bytes.
        elem_size: usize,
    },
    /// A slice or vector has the wrong number of elements for the shape.
    #[error("{what}: shape {shape:?} has {expected} elements, but {got} were given")]
    LengthMismatch {
        /// Which argument.
        what: &'static str,
        /// The array's shape.
        shape: Vec<usize>,
        /// The number of elements the shape has.
        expected: usize,
        /// The number of elements given.
        got: usize,
    },
    /// Two arrays that must have one shape do not.
    #[error("{what}: shape {found:?} differs from {expected:?}; the arrays must have the same shape")]
    ShapeMismatch {
        /// Which argument.
        what: &'static str,
        /// The shape required.
        expected: Vec<usize>,
        /// The shape given.
        found: Vec<usize>,
    },
    /// An index is outside its extent.
    #[error("index {index:?} is out of bounds for shape {shape:?}; each index must be below its extent")]
    IndexOutOfBounds {
        /// The index given.
        index: Vec<usize>,
        /// The shape.
        shape: Vec<usize>,
    },
    /// An extent or stride does not fit in `i64`, as DLPack requires.
    #[error("{what} {value} on axis {axis} does not fit in i64 (at most {max}), which DLPack requires", max = i64::MAX)]
    NotI64 {
        /// `"extent"` or `"stride"`.
        what: &'static str,
        /// The axis.
        axis: usize,
        /// The value.
        value: i128,
    },
    /// A slice range, step or axis is invalid.
    #[error("invalid {op} on axis {axis}: {reason}")]
    InvalidSlice {
        /// The operation (`"slice"`, `"step"`, `"permute"`, `"flip"`).
        op: &'static str,
        /// The axis.
        axis: usize,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// A strided layout reaches outside the memory it describes, or its
    /// offsets overflow.
    #[error("strided layout with extents {extents:?} and strides {strides:?} {reason}")]
    OutOfRange {
        /// The extents.
        extents: Vec<usize>,
        /// The strides, in elements.
        strides: Vec<isize>,
        /// What it reaches or overflows.
        reason: String,
    },
}

/// Access to a locked array without the id that locked it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The array is locked and no id was given.
    #[error("{op}: the array is locked by id {held}; pass Some(LockId({held})), or call exit() first")]
    Locked {
        /// The operation.
        op: &'static str,
        /// The id holding the lock.
        held: u64,
    },
    /// The array is locked by a different id.
    #[error("{op}: lock id {given} was given, but the array is locked by id {held}")]
    WrongId {
        /// The operation.
        op: &'static str,
        /// The id holding the lock.
        held: u64,
        /// The id given.
        given: u64,
    },
    /// `enter` on an array that is already locked.
    #[error("enter({requested}): the array is already locked by id {held}; call exit() first")]
    AlreadyLocked {
        /// The id holding the lock.
        held: u64,
        /// The id that tried to enter.
        requested: u64,
    },
}

/// An operation needs a copy of the array that is not current.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} needs the {needed} copy, but only the {current} copy is current; call move_to(Location::{needed:?}, ..) first")]
pub struct ResidencyError {
    /// The operation.
    pub op: &'static str,
    /// The copy it needs.
    pub needed: Location,
    /// The copy that is current.
    pub current: Location,
}

impl ResidencyError {
    pub(crate) fn new(op: &'static str, needed: Location, current: Location) -> Self {
        ResidencyError { op, needed, current }
    }
}

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
