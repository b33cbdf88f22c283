//! The array layer's own errors, and [`Location`], which they name:
//! defined here so that [`Error`](super::Error) wraps them without the error
//! layer importing the array layer (`docs/design.md#layers`). Their public
//! paths are `gpuport::array::{Location, ShapeError, LockError,
//! ResidencyError, ImportRefusal}` (`src/array/mod.rs` re-exports them).

use std::fmt;

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
    /// An extent given as a signed integer is negative.
    #[error("extent {value} is negative; extents must be non-negative")]
    NegativeExtent {
        /// The extent given.
        value: i64,
    },
    /// An extent given as an integer does not fit in `i64`.
    #[error("extent {given} is out of range: extents must be non-negative and at most {max}", max = i64::MAX)]
    ExtentOutOfRange {
        /// The extent given, as decimal text.
        given: String,
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
    /// A lock context (`src/dynamic/lock_context.rs`) entered a second time.
    #[error("the lock context with id {id} is already entered; a context is entered once")]
    BlockEntered {
        /// The block's lock id.
        id: u64,
    },
    /// A lock context used after its exit.
    #[error("{op}: the lock context with id {id} has exited; make a new LockContext")]
    BlockEnded {
        /// The operation.
        op: &'static str,
        /// The block's lock id.
        id: u64,
    },
    /// A thread that holds an object's `Exclusive` (`src/dynamic/exclusive.rs`)
    /// locked it again (a callback run under the lock called the object).
    #[error("this {what} is already locked by this thread: a call on it is still running and called it again")]
    Busy {
        /// The object's name ("MemArray").
        what: &'static str,
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

/// What an array over another library's memory (an import) refuses: its
/// memory and where it lives are its producer's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportRefusal {
    /// A move: an import stays where its producer put it.
    #[error("{op}: an imported array stays where its producer put it ({at}); it has no {to} copy to move to")]
    Move {
        /// The operation.
        op: &'static str,
        /// Where the import's memory is (a device spec, such as `cuda:0`).
        at: String,
        /// The copy asked for.
        to: Location,
    },
    /// Writing into the import, or copying it: done through its producer.
    #[error("{op} of an imported array: do it in its producer library")]
    ProducerOnly {
        /// The operation.
        op: &'static str,
    },
    /// Reading the import's bytes on the host needs compact host memory.
    #[error("{op} needs compact (row-major) host memory; the import is not")]
    NotCompactHost {
        /// The operation.
        op: &'static str,
    },
}
