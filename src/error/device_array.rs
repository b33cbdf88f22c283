//! [`DeviceArrayError`]: a shape, type, index or placement that a
//! `DeviceArray` (`src/dynamic/device_array.rs`, a binding's raw memory with
//! shape and type) does not accept. Public as
//! `gpuport::dynamic::device_array::DeviceArrayError`.
//!
//! Each is raised in Python as the builtin exception that Python's own
//! sequences raise for it ([`DeviceArrayError::builtin`]), so the texts
//! name the Python API's arguments (`shape=`, `_force=True`).

use super::python::{tuple, ExceptionClass};

/// A `DeviceArray` request that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceArrayError {
    /// A retype without a shape to keep.
    #[error("configure: this array has no shape; pass shape=")]
    NoShapeToKeep,
    /// The array has no shape, so it cannot be indexed.
    #[error("a DeviceArray without a shape cannot be indexed")]
    NotIndexable,
    /// `len()` needs a first axis.
    #[error("len() of a DeviceArray without a first axis")]
    NoFirstAxis,
    /// Shape times item size overflows.
    #[error("shape {} is too large{}", tuple(.shape), if *.indexing { " to index" } else { "" })]
    TooLarge {
        /// The shape.
        shape: Vec<usize>,
        /// The overflow came from an index.
        indexing: bool,
    },
    /// The shape and type need more bytes than the memory has.
    #[error("configure: {need} bytes ({} of {typestr}) exceed the {have} bytes of the memory; pass _force=True to override", tuple(.shape))]
    ExceedsMemory {
        /// Bytes needed.
        need: usize,
        /// The shape asked for.
        shape: Vec<usize>,
        /// The type string asked for.
        typestr: String,
        /// Bytes of the memory.
        have: usize,
    },
    /// The memory's size is unknown (a raw address).
    #[error("configure: the size of this memory is not known (a raw address); pass _force=True")]
    UnknownSize,
    /// A type that is neither a type string nor an element type.
    #[error("typestr {given}: pass an array-interface type string such as \"<f4\" or a dtype such as \"float32\"")]
    BadTypestr {
        /// The type as the caller wrote it.
        given: String,
    },
    /// An element type without an array-interface type string.
    #[error("{dtype} has no array-interface type string")]
    NoTypestr {
        /// The element type's name.
        dtype: String,
    },
    /// More indices than axes.
    #[error("{given} indices for {ndim} dimensions")]
    TooManyIndices {
        /// Indices given.
        given: usize,
        /// Axes of the array.
        ndim: usize,
    },
    /// A slice with step 0.
    #[error("slice step cannot be zero")]
    ZeroStep,
    /// A slice with a step other than 1.
    #[error("DeviceArray slices need step 1 (sub-arrays are contiguous)")]
    StepNotOne,
    /// A slice after a partial slice that is not whole.
    #[error("only contiguous sub-arrays: after a partial slice, the remaining axes must be whole")]
    PartialSliceThenSlice,
    /// An integer index after a slice.
    #[error("only contiguous sub-arrays: integer indices must come before slices")]
    IntAfterSlice,
    /// An integer index past its axis.
    #[error("index {index} is out of bounds for axis {axis} of size {size}")]
    IndexOutOfBounds {
        /// The index as given.
        index: isize,
        /// The axis.
        axis: usize,
        /// The axis's extent.
        size: usize,
    },
    /// `free` of an array already freed.
    #[error("free: this DeviceArray was already freed (double free)")]
    DoubleFree,
    /// `free` of memory the array does not own.
    #[error("free: this DeviceArray does not own its memory (only arrays returned by malloc are freed by gpuport)")]
    NotOwner,
    /// `free` of a bare address other than NULL: gpuport frees only what its
    /// `malloc` returned.
    #[error("free: {addr:#x} is not owned by gpuport; pass the DeviceArray that malloc returned")]
    NotGpuportMemory {
        /// The address given.
        addr: u64,
    },
    /// A `DeviceArray` over a CUDA Array Interface whose strides are not C order.
    #[error(
        "DeviceArray: the {producer} (shape {}, strides {} bytes) is not contiguous in C order, and a DeviceArray \
         describes C-contiguous memory; pass a C-contiguous array (e.g. tensor.contiguous())",
        tuple(.shape),
        tuple(.strides)
    )]
    NotCContiguous {
        /// The producer's type, as the caller names it (`Tensor`).
        producer: String,
        /// The interface's shape.
        shape: Vec<usize>,
        /// The interface's strides, in bytes.
        strides: Vec<i64>,
    },
    /// An operation on the owned allocation of an array that owns none.
    #[error("{op}: this DeviceArray owns no memory (only malloc_managed's is placed)")]
    NoAllocation {
        /// The operation.
        op: &'static str,
    },
}

impl DeviceArrayError {
    /// The Python builtin exception class it raises.
    pub fn builtin(&self) -> ExceptionClass {
        use DeviceArrayError as E;
        match self {
            E::NotIndexable | E::NoFirstAxis => ExceptionClass::Type,
            E::TooLarge { .. } => ExceptionClass::Overflow,
            E::TooManyIndices { .. }
            | E::StepNotOne
            | E::PartialSliceThenSlice
            | E::IntAfterSlice
            | E::IndexOutOfBounds { .. } => ExceptionClass::Index,
            E::NoShapeToKeep
            | E::ExceedsMemory { .. }
            | E::UnknownSize
            | E::BadTypestr { .. }
            | E::NoTypestr { .. }
            | E::ZeroStep
            | E::DoubleFree
            | E::NotOwner
            | E::NotGpuportMemory { .. }
            | E::NotCContiguous { .. }
            | E::NoAllocation { .. } => ExceptionClass::Value,
        }
    }
}
