//! [`Any`] (at home in [`crate::backend::any`], re-exported): one value of
//! any compiled-in backend, which every run-time type of this layer is made
//! of, and what this layer adds to it: [`OnDevice`], a value with its
//! device, and the checks that two values share a device.
//!
//! `on_backend!` ([`crate::on_backend`]) runs generic code on whichever
//! variant is there (`on_backend!(map …)` makes the same variant with other
//! contents);
//! [`DynDevice`] moves a value of a known backend into and out of the enum.

use std::fmt;
use std::sync::Arc;

use crate::backend::registry::AnyDevice;
use crate::backend::{Backend, Device};
use crate::error::Error;

pub use crate::backend::any::{Any, DynDevice, PerBackend};
pub(crate) use crate::on_backend;

/// A value of backend `B` and the device it belongs to.
pub struct OnDevice<B: Backend, T> {
    /// The device.
    pub device: Arc<B::Device>,
    /// The value.
    pub item: T,
}

impl<B: Backend, T: Clone> Clone for OnDevice<B, T> {
    fn clone(&self) -> Self {
        OnDevice { device: self.device.clone(), item: self.item.clone() }
    }
}

impl<B: Backend, T: fmt::Debug> fmt::Debug for OnDevice<B, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} on {}", self.item, self.device.info().spec())
    }
}

/// Whether two handles name the same device.
pub fn same_device(a: &AnyDevice, b: &AnyDevice) -> bool {
    a.backend() == b.backend() && a.info().ordinal == b.info().ordinal
}

/// The error for a value of device `found` given where `expected`'s was needed.
pub fn mismatch(what: &'static str, expected: &AnyDevice, found: &AnyDevice) -> Error {
    Error::DeviceMismatch { what, expected: expected.info().spec(), found: found.info().spec() }
}
