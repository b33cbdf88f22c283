//! Reading the CUDA Array Interface (versions 0 to 3), and the layout
//! arithmetic shared by everything that states its extent (CUDA Array
//! Interface and DLPack objects, buffers), a `MemArray`'s own interface
//! (version 3 written) and the import behind `from_cuda_array_interface`
//! (in [`crate::asarray`]).
//!
//! Defined for CUDA memory only. On ROCm the interface is undefined (CuPy
//! refuses it there); DLPack, with its `kDLROCM` device and ROCm stream
//! rules, is the way to exchange ROCm memory.

use std::sync::Arc;

use gpuport::dynamic::cai::{self, CudaArrayInterface, InterfaceExport};
use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::error::IntoPyResult;
use crate::convert::exchange::interface_dict;
use crate::convert::memarray::{AnyArray, PyMemArray};

// ---- layouts (the arithmetic is the core's: `gpuport::dynamic::cai`) -----------------------

pub use gpuport::dynamic::cai::Layout;

/// [`Layout::of`], its refusal as a Python exception.
pub fn layout(shape: &[usize], strides: Option<&[i64]>, itemsize: usize) -> PyResult<Layout> {
    Python::attach(|py| Layout::of(shape, strides, itemsize).py_err(py))
}

/// [`cai::itemsize_of`], its refusal as a Python exception.
pub fn itemsize_of(typestr: &str) -> PyResult<usize> {
    Python::attach(|py| cai::itemsize_of(typestr).py_err(py))
}

// ---- reading an interface ------------------------------------------------------------

/// What an object's `__cuda_array_interface__` says (the core's type).
pub type CaiDesc = CudaArrayInterface;

/// Reading an interface from Python.
pub trait ReadInterface: Sized {
    /// Reads `obj.__cuda_array_interface__`.
    fn read(obj: &Bound<'_, PyAny>) -> PyResult<Self>;
    /// Reads the value of an object's `__cuda_array_interface__`.
    fn from_value(cai: &Bound<'_, PyAny>) -> PyResult<Self>;
}

impl ReadInterface for CudaArrayInterface {
    /// Reads `obj.__cuda_array_interface__`: `data` is required; a `version`
    /// present must be one the interface defines (0 to 3).
    fn read(obj: &Bound<'_, PyAny>) -> PyResult<CaiDesc> {
        Self::from_value(&obj.getattr("__cuda_array_interface__")?)
    }

    /// Reads the value of an object's `__cuda_array_interface__` attribute
    /// (for a caller that already fetched it: a property may be costly).
    fn from_value(cai: &Bound<'_, PyAny>) -> PyResult<CaiDesc> {
        let cai = cai.cast::<PyDict>().map_err(|_| PyTypeError::new_err("__cuda_array_interface__ must be a dict"))?;
        let item = |k: &str| -> PyResult<Option<Bound<'_, PyAny>>> { Ok(cai.get_item(k)?.filter(|v| !v.is_none())) };
        let bad =
            |k: &str, want: &str| PyValueError::new_err(format!("__cuda_array_interface__[{k:?}] must be {want}"));
        let version = match item("version")? {
            Some(v) => {
                let v: i64 = v.extract().map_err(|_| bad("version", "an int"))?;
                if !(0..=3).contains(&v) {
                    return Err(PyValueError::new_err(format!(
                        "CUDA Array Interface version {v} is not one the interface defines; versions 0 to 3 are read"
                    )));
                }
                Some(v)
            }
            None => None,
        };
        let data = item("data")?.ok_or_else(|| PyValueError::new_err("__cuda_array_interface__ has no \"data\""))?;
        let (data, read_only): (u64, bool) =
            data.extract().map_err(|_| bad("data", "a tuple (address: int, read_only: bool)"))?;
        let shape = match item("shape")? {
            Some(s) => Some(s.extract::<Vec<usize>>().map_err(|_| bad("shape", "a tuple of non-negative ints"))?),
            None => None,
        };
        let typestr = match item("typestr")? {
            Some(t) => Some(t.extract::<String>().map_err(|_| bad("typestr", "a str such as \"<f4\""))?),
            None => None,
        };
        let strides = match item("strides")? {
            Some(s) => Some(s.extract::<Vec<i64>>().map_err(|_| bad("strides", "None or a tuple of ints (bytes)"))?),
            None => None,
        };
        let masked = item("mask")?.is_some();
        let stream = match item("stream")? {
            Some(s) => Some(s.extract::<isize>().map_err(|_| bad("stream", "None or an int handle"))?),
            None => None,
        };
        Ok(CaiDesc { version, data, read_only, shape, typestr, strides, masked, stream })
    }
}

// ---- a MemArray's interface ---------------------------------------------------------

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

/// Keeps a Python object alive from Rust (the CAI producer).
struct PyOwner(#[allow(dead_code)] Py<PyAny>);

/// Imports `obj`, which exposes `__cuda_array_interface__`, without a copy,
/// on `dev` (None: cuda:0); see `from_cuda_array_interface`.
pub fn import(py: Python<'_>, obj: &Bound<'_, PyAny>, dev: Option<gpuport::AnyDevice>) -> PyResult<PyMemArray> {
    let desc = CaiDesc::read(obj)?;
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
