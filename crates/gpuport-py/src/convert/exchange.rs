//! DLPack and array interfaces of a `MemArray`'s storage: exporting
//! (`__dlpack__` following the array API standard, the interface dicts) and
//! importing (the producer's capsule; `from_dlpack` and `asarray` in
//! [`crate::asarray`]).
//!
//! A writable export hands out the address of one copy (host or device) and
//! makes that copy the only current one, so whatever the consumer writes
//! there is what the array's next read sees (the other copy is refreshed
//! from it). Read-only exports leave both copies current.

use gpuport::dlpack::{is_host_memory, DLDevice};
pub use gpuport::dynamic::exchange::dl_pair;
pub use gpuport::dynamic::exchange::ExportRequest;
use gpuport::dynamic::exchange::{self as core_exchange, consumer_device_for, stream_for_producer};
use gpuport::dynamic::{device_for_dl, AnyArray, ImportedArray};
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::convert::capsule::{dlpack_capsule, make_capsule, take_capsule, Producer};
use crate::convert::dtype::{unsupported_dlpack_dtype, DType};
use crate::convert::error::{self, IntoPyResult};
use crate::convert::stream::resolve_stream;

/// Exports `st` as a DLPack capsule following the array API standard (the
/// negotiation is the core's: `gpuport::dynamic::exchange::export`).
pub fn export<'py>(py: Python<'py>, st: &mut AnyArray, req: ExportRequest) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `req.stream` is the consumer's, as `__dlpack__` received it:
    // the DLPack standard requires it to be a sentinel or a live stream of
    // the array's device, as CUDA Array Interface producers vouch for theirs.
    let e = py.detach(|| unsafe { core_exchange::export(st, req) }).py_err_in(py, "__dlpack__")?;
    make_capsule(py, e)
}

/// The gpuport device whose kernels reach memory of DLPack device `dl`.
pub fn device_of(py: Python<'_>, dl: DLDevice) -> PyResult<gpuport::AnyDevice> {
    py.detach(|| device_for_dl(dl)).py_err(py)
}

/// An imported array over a producer's tensor.
pub fn imported_from_producer(py: Python<'_>, p: Producer) -> PyResult<ImportedArray> {
    let dtype = p.0.dtype();
    if DType::from_dlpack(dtype).is_none() {
        // The core's error names DLPack codes; this one names the dtypes too.
        return Err(error::dlpack(py, unsupported_dlpack_dtype(dtype)));
    }
    let on_host = is_host_memory(p.0.device().device_type);
    let producer = std::sync::Arc::new(p);
    if on_host {
        // Host memory belongs to the host device, opened at once: no reason
        // to release the GIL (which costs about as much as the rest here).
        return ImportedArray::from_tensor(producer).py_err(py);
    }
    // Opening a GPU device for the first time can take long: without the GIL.
    py.detach(|| ImportedArray::from_tensor(producer)).py_err(py)
}

/// Calls `obj.__dlpack__` as a consumer on `dev`'s default stream and takes the capsule.
pub fn import_producer(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Producer> {
    if obj.is_instance_of::<pyo3::types::PyCapsule>() {
        return take_capsule(py, obj);
    }
    if let Some(dt) = crate::convert::dtype::low_precision_numpy_dtype(obj)? {
        // NumPy exports no ml_dtypes dtype through DLPack (BufferError; or
        // float8_e5m2 as an 8-bit kDLFloat, which is no DLPack type): import
        // the same memory as unsigned integers of the element's size and
        // read them as the dtype.
        let uint = if dt.itemsize() == 2 { "uint16" } else { "uint8" };
        let bytes = obj.call_method1("view", (py.import("numpy")?.getattr(uint)?,))?;
        let mut p = import_producer(py, &bytes, stream, copy)?;
        p.0.reinterpret(dt.dlpack()).py_err(py)?;
        return Ok(p);
    }
    if !obj.hasattr("__dlpack__")? {
        return Err(PyTypeError::new_err(format!(
            "{} does not support DLPack (no __dlpack__ method)",
            obj.get_type().name()?
        )));
    }
    let dl: (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    // The consumer's stream, where the memory takes one: ours, as the standard's integer.
    let stream_arg = match py.detach(|| consumer_device_for(dl)).py_err(py)? {
        Some(dev) => stream_for_producer(dl.0, &*resolve_stream(py, &dev, stream)?),
        None => None,
    };
    take_capsule(py, &dlpack_capsule(obj, stream_arg, copy)?)
}

pub fn parse_version(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(u32, u32)>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => Ok(Some(v.extract()?)),
    }
}

pub fn parse_dl_device(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(i32, i32)>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => Ok(Some(v.extract()?)),
    }
}

/// A one-shot DLPack producer of an export already negotiated (the bytes of
/// a low-precision array, as `uint8`, for `to_numpy`): `numpy.from_dlpack`
/// takes objects with `__dlpack__`, not capsules.
#[pyclass(module = "gpuport._core", name = "_PreparedExport", frozen)]
pub struct PreparedExport {
    export: std::sync::Mutex<Option<core_exchange::Export>>,
    device: (i32, i32),
}

impl PreparedExport {
    pub fn new(e: core_exchange::Export) -> Self {
        let device = dl_pair(e.device());
        PreparedExport { export: std::sync::Mutex::new(Some(e)), device }
    }
}

#[pymethods]
impl PreparedExport {
    /// The capsule, once: versioned when `max_version >= (1, 0)`, else legacy.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (stream, dl_device, copy); // negotiated when the export was made
        let taken = self.export.lock().ok().and_then(|mut e| e.take());
        let mut e = taken.ok_or_else(|| PyBufferError::new_err("this prepared export was already consumed"))?;
        e.set_max_version(parse_version(max_version)?).py_err_in(py, "__dlpack__")?;
        make_capsule(py, e)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        self.device
    }
}

/// An array-interface dict (`__array_interface__` / `__cuda_array_interface__`).
#[allow(clippy::too_many_arguments)]
pub fn interface_dict<'py>(
    py: Python<'py>,
    shape: &[usize],
    typestr: &str,
    data: u64,
    read_only: bool,
    strides: Option<Vec<i64>>,
    stream: Option<Option<usize>>,
    version: u32,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("shape", PyTuple::new(py, shape)?)?;
    d.set_item("typestr", typestr)?;
    d.set_item("descr", PyList::new(py, [("", typestr)])?)?;
    d.set_item("data", (data, read_only))?;
    match strides {
        Some(s) => d.set_item("strides", PyTuple::new(py, s)?)?,
        None => d.set_item("strides", py.None())?,
    }
    d.set_item("version", version)?;
    if let Some(s) = stream {
        d.set_item("stream", s)?;
    }
    Ok(d)
}
