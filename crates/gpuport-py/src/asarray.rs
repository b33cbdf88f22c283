//! `from_dlpack` and `asarray`: a MemArray from another library's array,
//! through DLPack 1.3's C exchange API ([`crate::convert::exchange_api`]), the
//! `__dlpack__` protocol ([`crate::convert::exchange`]) or the CUDA Array Interface
//! ([`crate::convert::cai`]). Where the result goes (in place, a host copy, a device)
//! is the core's decision: `gpuport::dynamic::imported::import_tensor`.

use gpuport::dynamic::exchange::Export;
use gpuport::dynamic::exchange_api::{import_own, is_ordered_by_streams};
use gpuport::dynamic::import_route::{
    asarray_route, from_dlpack_route, protocol_route, AsarrayRoute, DlpackRoute, Offer, ProtocolCall,
};
use gpuport::dynamic::imported::{import_tensor, Placement};
use pyo3::prelude::*;

use crate::convert::capsule::{count_table_export, count_table_import, track, Producer};
use crate::convert::device::resolve_device;
use crate::convert::error::IntoPyResult;
use crate::convert::exchange::{import_producer, imported_from_producer};
use crate::convert::memarray::PyMemArray;
use crate::convert::stream::resolve_stream;

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
    let route = from_dlpack_route(
        copy,
        || Ok(obj.cast::<PyMemArray>().is_ok()),
        || match obj.is_instance_of::<pyo3::types::PyCapsule>() {
            true => Ok(None),
            false => crate::convert::exchange_api::usable_table(obj),
        },
    )?;
    match route {
        DlpackRoute::GpuportArray => from_own_array(py, obj.cast::<PyMemArray>()?.get(), stream),
        DlpackRoute::ExchangeTable(table) => {
            let p = crate::convert::exchange_api::import_through_table(py, obj, table, stream)?;
            Ok(PyMemArray::from_imported(imported_from_producer(py, p)?))
        }
        DlpackRoute::Protocol(call) => from_protocol(py, obj, stream, call),
    }
}

/// `from_dlpack` of a gpuport array, as through its type's exchange table
/// (counted as a table export and import) but with no tensor in between:
/// one call into the core, `gpuport::dynamic::exchange_api::import_own`.
fn from_own_array(py: Python<'_>, a: &PyMemArray, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyMemArray> {
    const CALL: &str = "__dlpack_c_exchange_api__";
    let mut st = a.state(py)?;
    // A stream is asked for only when the exported copy is ordered by
    // streams, as the table path asks for one only then.
    let ours = match stream.filter(|s| !s.is_none()) {
        Some(s) if is_ordered_by_streams(st.dl(st.natural()).device_type) => {
            Some(resolve_stream(py, a.any_device(), Some(s))?)
        }
        _ => None,
    };
    let pack = |e: &mut Export| {
        count_table_export();
        track(e);
        count_table_import();
    };
    // Only pending work or a stream to order can make the import wait: the
    // GIL is released for those, and kept otherwise (it costs a switch).
    let import = if ours.is_some() || st.transfer_pending().py_err_in(py, CALL)? {
        py.detach(|| import_own(&mut st, ours.as_deref(), pack))
    } else {
        import_own(&mut st, None, pack)
    };
    Ok(PyMemArray::from_imported(import.py_err_in(py, CALL)?))
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
    from_protocol(py, obj, stream, protocol_route(copy))
}

/// An import through `__dlpack__` as `call` says.
fn from_protocol(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    call: ProtocolCall,
) -> PyResult<PyMemArray> {
    let p = import_producer(py, obj, stream, call.ask_copy)?;
    if call.host_copy {
        return placed(py, p, Placement::HostCopy, "from_dlpack");
    }
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
    let placement = match device {
        Some(d) => Placement::On(resolve_device(py, Some(d))?),
        None => Placement::InPlace,
    };
    // NumPy's arrays of the other byte order are converted first: DLPack cannot describe them.
    let mut native = None;
    let route = asarray_route(|offer| -> PyResult<bool> {
        Ok(match offer {
            Offer::GpuportArray => obj.cast::<PyMemArray>().is_ok(),
            Offer::Dlpack => native.insert(crate::convert::dtype::native_byte_order(obj)?).hasattr("__dlpack__")?,
            Offer::CudaArrayInterface => native.as_ref().unwrap_or(obj).hasattr("__cuda_array_interface__")?,
        })
    })?;
    let obj = native.as_ref().unwrap_or(obj);
    let a = match route {
        AsarrayRoute::Itself => {
            placement.check(&obj.cast::<PyMemArray>()?.get().meta.device).py_err_in(py, "asarray")?;
            return Ok(obj.clone().unbind());
        }
        AsarrayRoute::Dlpack => match placement {
            Placement::On(_) => placed(py, import_producer(py, obj, None, None)?, placement, "asarray")?,
            _ => from_dlpack(py, obj, None, None)?,
        },
        AsarrayRoute::CudaArrayInterface => from_cuda_array_interface(py, obj, device)?,
        AsarrayRoute::NumpyConversion => {
            let arr = py.import("numpy")?.call_method1("ascontiguousarray", (obj,))?;
            return asarray(py, &arr, device);
        }
    };
    Ok(Bound::new(py, a)?.into_any().unbind())
}

/// A MemArray over, or copied from, the producer's tensor, placed as asked.
fn placed(py: Python<'_>, p: Producer, placement: Placement, call: &str) -> PyResult<PyMemArray> {
    let keep = std::sync::Arc::new(p);
    let a = py.detach(|| import_tensor(keep, placement)).py_err_in(py, call)?;
    Ok(PyMemArray::from_storage(a))
}

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
    let dev = match device {
        Some(d) if !d.is_none() => Some(resolve_device(py, Some(d))?),
        _ => None,
    };
    crate::convert::cai::import(py, obj, dev)
}
