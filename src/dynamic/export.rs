//! [`Export`]: what an export of this layer describes, apart from how it
//! is made (`exchange.rs`) so that an import of one (`imported.rs`) can
//! name it without importing the export code.

use std::sync::Arc;

use super::array::{Shape, Strides};
use crate::array::dtype::DType;
use crate::dlpack::DLDevice;

/// What an export describes: memory, layout, and how to package it.
///
/// Made only by this layer's exports (its fields are private: the tensor it
/// becomes hands its address to consumers as valid memory).
pub struct Export {
    /// Address of the element at index 0.
    pub(super) data: u64,
    /// Where the memory is.
    pub(super) device: DLDevice,
    /// The element type.
    pub(super) dtype: DType,
    /// Extents.
    pub(super) shape: Shape,
    /// Strides in elements; `None` for compact row-major.
    pub(super) strides: Option<Strides>,
    /// Keeps the memory alive.
    pub(super) keep: Arc<dyn Send + Sync>,
    /// `Some(minor)` for a versioned tensor of version `1.minor`; `None` for a legacy one.
    pub(super) versioned_minor: Option<u32>,
    /// Flag the export read-only.
    pub(super) read_only: bool,
    /// The export is a copy (DLPack's `IS_COPIED` flag).
    pub(super) copied: bool,
}
