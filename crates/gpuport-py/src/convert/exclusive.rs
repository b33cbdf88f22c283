//! The core's [`Exclusive`] (`gpuport::dynamic::exclusive`) as Python
//! objects use it: state that several threads may call at once, one at a
//! time, whose waits release the GIL.
//!
//! PyO3's own borrow checking of a mutable `#[pyclass]` fails (raising, or
//! panicking through `borrow_mut`) when a second thread calls the object
//! while the first has released the GIL (`Python::detach`) inside a method.
//! Objects that do that are `frozen` and keep their mutable state in an
//! `Exclusive` instead: a call that finds it busy waits *with the GIL
//! released* ([`LockDetached::lock_detached`]), so the holder can take the
//! GIL back and finish. Nobody blocks on an `Exclusive` while holding the
//! GIL: core calls that lock one themselves (a graph replay) run inside
//! `py.detach` too.

pub use gpuport::dynamic::exclusive::{Exclusive, ExclusiveGuard};
use pyo3::prelude::*;

use crate::convert::error;

/// Locking an [`Exclusive`] from Python.
pub trait LockDetached<T> {
    /// The value, waiting (with the GIL released) while another thread
    /// holds it; `LockError` when this thread holds it (a callback run
    /// under the lock called the object again).
    fn lock_detached(&self, py: Python<'_>) -> PyResult<ExclusiveGuard<'_, T>>;
}

impl<T: Send> LockDetached<T> for Exclusive<T> {
    fn lock_detached(&self, py: Python<'_>) -> PyResult<ExclusiveGuard<'_, T>> {
        self.lock_with(|wait| py.detach(wait)).map_err(|e| error::to_py(py, e))
    }
}
