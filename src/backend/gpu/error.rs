//! Vendor statuses as the library's [`Error`]s, written once for every driver.

use super::driver::Driver;
use crate::error::{DriverError, Error, Result};

/// The error for `status` returned by vendor call `call`.
pub(crate) fn driver_error<D: Driver>(call: &'static str, status: D::Status) -> Error {
    Error::Driver(DriverError {
        backend: D::KIND,
        call,
        code: D::code(status),
        name: D::error_name(status),
        message: D::error_string(status),
    })
}

/// `Ok` for success, else the error naming `call`.
pub(crate) fn check<D: Driver>(call: &'static str, status: D::Status) -> Result<()> {
    if status == D::SUCCESS {
        Ok(())
    } else {
        Err(driver_error::<D>(call, status))
    }
}

/// A query's answer: `true` for success (done), `false` for not ready, else
/// the error naming `call`.
pub(crate) fn ready<D: Driver>(call: &'static str, status: D::Status) -> Result<bool> {
    if status == D::SUCCESS {
        Ok(true)
    } else if status == D::NOT_READY {
        Ok(false)
    } else {
        Err(driver_error::<D>(call, status))
    }
}

/// An allocation's error: [`Error::OutOfMemory`] where the driver found no
/// memory, else `e` unchanged.
pub(crate) fn out_of_memory<D: Driver>(e: Error, ordinal: usize, bytes: usize) -> Error {
    match &e {
        Error::Driver(d) if d.backend == D::KIND && d.code == D::code(D::OUT_OF_MEMORY) => {
            Error::OutOfMemory { backend: D::KIND, ordinal, bytes }
        }
        _ => e,
    }
}
