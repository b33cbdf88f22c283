//! `from_dlpack` and `asarray`: a MemArray from another library's array,
//! through DLPack 1.3's C exchange API ([`crate::exchange_api`]), the
//! `__dlpack__` protocol ([`crate::exchange`]) or the CUDA Array Interface
//! ([`crate::cai`]).

use gpuport::dlpack::ImportedTensor;
use gpuport::dlpack::{is_host_accessible, DLDeviceType};
use gpuport::dynamic::{new_owned, same_device, DynArray};
use gpuport::AnyDevice;
use gpuport::BackendKind;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;

use crate::device::{resolve_device, resolve_stream, spec};
use crate::dtype::{unsupported_dlpack_dtype, DType};
use crate::errors::{self, IntoPyResult};
use crate::exchange::{import_producer, imported_from_producer};
use crate::memarray::{check_extents, PyMemArray};

/// Imports any DLPack producer (NumPy, PyTorch, CuPy, JAX, another
/// MemArray, or a capsule) without a copy. The result keeps the producer's
/// memory alive; the producer's deleter runs once when it goes.
///
/// With `copy=None`, a producer whose type offers DLPack 1.3's C exchange
/// API (`type(obj).__dlpack_c_exchange_api__`, a table of a known major
/// version with the functions a consumer needs) is imported through it,
/// with no Python call; any other producer through `__dlpack__`.
///
///     >>> import gpuport, numpy as np
///     >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
///     >>> a = gpuport.from_dlpack(x)          # shares x's memory
///     >>> a.shape, a.dtype, a.is_imported, a.device.spec
///     ((2, 3), 'float32', True, 'host')
///     >>> x[0, 0] = 7
///     >>> float(np.from_dlpack(a)[0, 0])
///     7.0
#[pyfunction]
#[pyo3(signature = (obj, /, *, stream=None, copy=None))]
pub fn from_dlpack(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    copy: Option<bool>,
) -> PyResult<PyMemArray> {
    if copy.is_none() && !obj.is_instance_of::<pyo3::types::PyCapsule>() {
        if let Some(p) = crate::exchange_api::import_through_table(py, obj, stream)? {
            return Ok(PyMemArray::from_imported(imported_from_producer(py, p)?));
        }
    }
    from_dlpack_protocol(py, obj, stream, copy)
}

/// `from_dlpack` through the Python-level `__dlpack__` protocol only, even
/// for a producer that offers the C exchange API (for tests and benchmarks
/// that compare the two).
#[pyfunction]
#[pyo3(signature = (obj, /, *, stream=None, copy=None))]
pub fn _from_dlpack_protocol(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    copy: Option<bool>,
) -> PyResult<PyMemArray> {
    from_dlpack_protocol(py, obj, stream, copy)
}

fn from_dlpack_protocol(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    copy: Option<bool>,
) -> PyResult<PyMemArray> {
    if copy == Some(true) {
        // An owned copy: import, then copy into a new host-backend array.
        let p = import_producer(py, obj, stream, None)?;
        let t = &p.0;
        if !is_host_accessible(t.device().device_type) {
            return Err(PyBufferError::new_err("from_dlpack(copy=True) copies host-accessible tensors only"));
        }
        let host = py.detach(|| gpuport::open("host")).py_err(py)?;
        let s = resolve_stream(py, &host, None)?;
        let mut a = new_like(py, t, &host)?;
        py.detach(|| a.read_imported(p.tensor(), &s, None)).py_err(py)?;
        return Ok(PyMemArray::from_owned(a));
    }
    let p = import_producer(py, obj, stream, copy)?;
    Ok(PyMemArray::from_imported(imported_from_producer(py, p)?))
}

/// A MemArray from anything array-like: a MemArray (returned as is), a DLPack
/// producer (zero-copy), a CUDA Array Interface producer (zero-copy), or any
/// other object NumPy can convert (copied).
///
/// `device` (a `Device` or a spec such as `"cuda:0"`) is where the result
/// lives. Data already there is imported without a copy; host data (NumPy,
/// lists, CPU tensors) for a GPU device is copied into a new MemArray whose
/// host and device copies both hold it, the upload overlapping the copy into
/// the pinned host copy and left pending on the device's default stream
/// (kernels and exports there see the data; host access waits for it). Data
/// on another device is refused (`ValueError`): import it where it is. For a
/// CUDA Array Interface producer, `device` names the CUDA device of its
/// pointer (as for `from_cuda_array_interface`). A NumPy array in
/// non-native byte order is first converted by NumPy (a copy), as
/// `read_numpy_array` does; ml_dtypes arrays (bfloat16, fp8/fp6/fp4) are
/// taken as their dtype.
///
///     >>> import gpuport
///     >>> a = gpuport.asarray([[1.0, 2.0], [3.0, 4.0]])   # copied by NumPy
///     >>> a.shape, a.dtype, a.device.spec
///     ((2, 2), 'float64', 'host')
///     >>> gpuport.asarray(a) is a
///     True
///     >>> import numpy as np
///     >>> b = gpuport.asarray(np.ones(4, np.float32), device="host")  # already there: zero-copy
///     >>> b.is_imported
///     True
#[pyfunction]
#[pyo3(signature = (obj, /, *, device=None))]
pub fn asarray(py: Python<'_>, obj: &Bound<'_, PyAny>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
    let device = device.filter(|d| !d.is_none());
    if let Ok(a) = obj.cast::<PyMemArray>() {
        if let Some(d) = device {
            let to = resolve_device(py, Some(d))?;
            let on = &a.get().meta.device;
            if !same_device(on, &to) {
                return Err(elsewhere(on, &to));
            }
        }
        return Ok(obj.clone().unbind());
    }
    let obj = &crate::dtype::native_byte_order(obj)?;
    if obj.hasattr("__dlpack__")? {
        let a = match device {
            None => from_dlpack(py, obj, None, None)?,
            Some(d) => dlpack_on(py, obj, &resolve_device(py, Some(d))?)?,
        };
        return Ok(Bound::new(py, a)?.into_any().unbind());
    }
    if obj.hasattr("__cuda_array_interface__")? {
        return Ok(Bound::new(py, crate::cai::from_cuda_array_interface(py, obj, device)?)?.into_any().unbind());
    }
    let arr = py.import("numpy")?.call_method1("ascontiguousarray", (obj,))?;
    asarray(py, &arr, device)
}

/// A DLPack producer's data as a MemArray on `dev`: imported where it is
/// there, uploaded from host memory to a GPU device, refused otherwise.
fn dlpack_on(py: Python<'_>, obj: &Bound<'_, PyAny>, dev: &AnyDevice) -> PyResult<PyMemArray> {
    let p = import_producer(py, obj, None, None)?;
    let t = &p.0;
    if dev.backend() != BackendKind::Host && t.device().device_type == DLDeviceType::CPU {
        let s = resolve_stream(py, dev, None)?;
        let mut a = new_like(py, t, dev)?;
        py.detach(|| a.upload_imported(p.tensor(), &s, None)).py_err_in(py, "asarray")?;
        return Ok(PyMemArray::from_owned(a));
    }
    let a = imported_from_producer(py, p)?;
    if !same_device(a.device(), dev) {
        return Err(elsewhere(a.device(), dev));
    }
    Ok(PyMemArray::from_imported(a))
}

/// A new owned array on `dev` with the dtype and shape of tensor `t`, its
/// extents checked as `MemArray(...)` checks them (its exports' strides
/// must fit DLPack's 64-bit integers).
fn new_like(py: Python<'_>, t: &ImportedTensor, dev: &AnyDevice) -> PyResult<Box<dyn DynArray>> {
    let dtype = DType::from_dlpack(t.dtype()).ok_or_else(|| errors::dlpack(py, unsupported_dlpack_dtype(t.dtype())))?;
    let shape: Vec<usize> = t.shape().iter().map(|&e| e as usize).collect();
    check_extents(py, &shape, dtype.itemsize())?;
    py.detach(|| new_owned(dev, dtype, &shape)).py_err(py)
}

/// `asarray(x, device=to)` of data on another device `on`.
fn elsewhere(on: &AnyDevice, to: &AnyDevice) -> PyErr {
    PyValueError::new_err(format!(
        "asarray: the data is on {}, not {}; asarray copies host data to a device, not data between devices \
         (call asarray without device to import it where it is)",
        spec(on),
        spec(to)
    ))
}
