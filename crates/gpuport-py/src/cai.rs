//! The CUDA Array Interface of a `MemArray` (version 3 written) and
//! `from_cuda_array_interface` (versions 0 to 3 read, through
//! [`crate::convert::cai`]).
//!
//! Defined for CUDA memory only. On ROCm the interface is undefined (CuPy
//! refuses it there); DLPack, with its `kDLROCM` device and ROCm stream
//! rules, is the way to exchange ROCm memory.

use std::sync::Arc;

use gpuport::dynamic::cai::{self, InterfaceExport};
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::cai::{CaiDesc, ReadInterface};
use crate::convert::device::resolve_device;
use crate::errors::IntoPyResult;
use crate::exchange::interface_dict;
use crate::memarray::{AnyArray, PyMemArray};

// ---- export ---------------------------------------------------------------------------

/// `__cuda_array_interface__` of `st` (which arrays have it, the copy made
/// current and the stream handed out are the core's: [`cai::export`]);
/// absent (`AttributeError`, so `hasattr` is false) where it has none.
pub fn export<'py>(py: Python<'py>, st: &mut AnyArray) -> PyResult<Bound<'py, PyDict>> {
    match py.detach(|| cai::export(st)).py_err_in(py, "__cuda_array_interface__")? {
        InterfaceExport::Absent(why) => Err(PyAttributeError::new_err(why)),
        InterfaceExport::Present(i) => {
            interface_dict(py, &i.shape, i.typestr, i.data, i.read_only, i.strides, Some(i.stream), 3)
        }
    }
}

// ---- import ---------------------------------------------------------------------------

/// Keeps a Python object alive from Rust (the CAI producer).
struct PyOwner(#[allow(dead_code)] Py<PyAny>);

/// Imports an object exposing `__cuda_array_interface__` (versions 0 to 3)
/// without a copy; the object is kept alive while the result (or an export
/// of it) is. With a `stream` in the interface, our default stream waits for
/// it through an event. `device` names the CUDA device of the pointer
/// (default cuda:0). CuPy, Numba and PyTorch CUDA arrays have the interface;
/// so can any object:
///
///     >>> import gpuport
///     >>> class Floats:
///     ...     __cuda_array_interface__ = {
///     ...         "version": 3, "shape": (4,), "typestr": "<f4", "data": (0, False)}
///     >>> gpuport.from_cuda_array_interface(Floats(), device="host")
///     Traceback (most recent call last):
///     gpuport.DeviceUnavailableError: cuda is unavailable: CUDA Array Interface memory needs a CUDA device, not host
#[pyfunction]
#[pyo3(signature = (obj, /, device=None))]
pub fn from_cuda_array_interface(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyMemArray> {
    let desc = CaiDesc::read(obj)?;
    let dev = match device {
        Some(d) if !d.is_none() => Some(resolve_device(py, Some(d))?),
        _ => None,
    };
    let keep = Arc::new(PyOwner(obj.clone().unbind()));
    // SAFETY: the CUDA Array Interface's producer states that `data` is
    // device memory of the shape, strides and type it describes, valid
    // while `obj` lives (kept here) and writable unless flagged read-only,
    // and that its `stream` is a live stream of the device. Opening the
    // default device, or waiting for the producer's stream, can take long:
    // without the GIL.
    let f = py.detach(|| unsafe { desc.import(dev.as_ref(), keep) });
    Ok(PyMemArray::from_imported(f.py_err(py)?))
}
