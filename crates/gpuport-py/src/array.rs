//! The Python `MemArray`'s methods: a run-time dtype, rank and device over
//! the Rust `MemArray<T, N, D>`, or a zero-copy import of another library's
//! array. The type and its state are in [`crate::convert::memarray`].
//!
//! Dispatch is the core's (`gpuport::dynamic::array`): `on_backend!` over
//! the backends, `with_dtype!` over the element types and `with_rank!` over
//! ranks 0..=8 pick one `Typed<T, N, D>`, used through the object-safe
//! `DynArray` trait.

use gpuport::array::Location;
use gpuport::dynamic::array::{extent_from, new_checked_in, ArrayMemory, GivenExtent};
use gpuport::dynamic::keep;
use gpuport::error::{python, BackendKind};
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::convert::device::{managed_target, resolve_device, spec, PyDevice};
use crate::convert::dtype::{dtype_from_py, DType};
use crate::convert::error::{self, IntoPyResult};
use crate::convert::exchange::{
    dl_pair, export, import_producer, interface_dict, parse_dl_device, parse_version, ExportRequest,
};
use crate::convert::memarray::{AnyArray, PyMemArray};
use crate::convert::stream::resolve_stream;

/// The extents of a `MemArray(shape)` argument: an int or a sequence of
/// ints, each checked by the core's [`extent_from`].
fn parse_shape(shape: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let py = shape.py();
    let type_err = || PyTypeError::new_err("shape must be an int or a sequence of ints");
    let extent = |item: &Bound<'_, PyAny>| -> PyResult<usize> {
        let given = match item.extract::<i64>() {
            Ok(v) => GivenExtent::Int(v),
            Err(_) if item.is_instance_of::<pyo3::types::PyInt>() => GivenExtent::Wide(item.to_string()),
            Err(_) => return Err(type_err()),
        };
        extent_from(given).py_err(py)
    };
    if shape.is_instance_of::<pyo3::types::PyInt>() {
        return Ok(vec![extent(shape)?]);
    }
    if let Ok(t) = shape.cast::<PyTuple>() {
        return t.iter_borrowed().map(|item| extent(&item)).collect();
    }
    let mut out = Vec::new();
    for item in shape.try_iter().map_err(|_| type_err())? {
        out.push(extent(&item?)?);
    }
    Ok(out)
}

impl PyMemArray {
    fn dlpack_device_impl(&self, py: Python<'_>, prefer: Option<Location>) -> PyResult<(i32, i32)> {
        let st = self.state(py)?;
        Ok(dl_pair(st.dl(prefer.unwrap_or_else(|| st.natural()))))
    }

    /// `to_numpy` of a bfloat16 or fp8/fp6/fp4 array: its host elements
    /// exported as `uint16` or `uint8` (NumPy reads neither DLPack type
    /// code) and viewed as the ml_dtypes dtype, zero-copy as for the others.
    fn low_precision_to_numpy<'py>(
        &self,
        py: Python<'py>,
        np: &Bound<'py, PyModule>,
        dtype: DType,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Some(ml) = crate::convert::dtype::ml_dtype(py, dtype) else {
            return Err(error::unsupported_dtype(
                py,
                format!(
                    "to_numpy: NumPy has no dtype {}; install ml_dtypes (pip install ml_dtypes), which registers it, or read the bytes with tobytes()",
                    dtype.name()
                ),
            ));
        };
        let e = {
            let mut guard = self.state(py)?;
            let st: &mut AnyArray = &mut guard;
            py.detach(|| st.export_host_bits()).py_err_in(py, "to_numpy")?
        };
        let producer = Bound::new(py, crate::convert::exchange::PreparedExport::new(e))?;
        np.call_method1("from_dlpack", (producer,))?.call_method1("view", (ml,))
    }

    pub fn dlpack_impl<'py>(&self, py: Python<'py>, req: ExportRequest) -> PyResult<Bound<'py, PyAny>> {
        let mut st = self.state(py)?;
        export(py, &mut st, req)
    }
}

#[pymethods]
impl PyMemArray {
    /// A zero-filled array of `shape` (an int or a sequence of 0 to 8 ints,
    /// each non-negative) and `dtype` (default float64) on `device` (default:
    /// the default device). Extents, element count and byte size are at most
    /// 2**63 - 1 (zero extents counted as one). `memory` is the device
    /// copy's memory: `"device"` (default) or `"managed"` (unified memory,
    /// which the host reaches too: see `prefetch`; `UnsupportedError` on a
    /// device without it; on the host backend, the heap); any other value
    /// is `InvalidArgumentError` (a `ValueError`).
    #[new]
    #[pyo3(signature = (shape, dtype=None, device=None, memory="device"))]
    fn new(
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
        memory: &str,
    ) -> PyResult<Self> {
        let shape = parse_shape(shape)?;
        let dtype = match dtype {
            Some(d) => dtype_from_py(d)?,
            None => DType::Float64,
        };
        let memory = ArrayMemory::named(memory).py_err(py)?;
        let dev = resolve_device(py, device)?;
        // A host array's zeros are written on first use: nothing here
        // blocks, so the GIL is kept (releasing it costs a switch).
        let st = if dev.backend() == BackendKind::Host {
            new_checked_in(&dev, dtype, &shape, memory)
        } else {
            py.detach(|| new_checked_in(&dev, dtype, &shape, memory))
        };
        Ok(PyMemArray::from_owned(st.py_err(py)?))
    }

    /// The extents.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.meta.shape)
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.meta.shape.len()
    }

    /// The number of elements.
    #[getter]
    fn size(&self) -> usize {
        self.meta.shape.iter().product()
    }

    /// The dtype's name (`"float32"`, `"bfloat16"`, ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.meta.dtype.name()
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.meta.dtype.itemsize()
    }

    /// Bytes of all elements.
    #[getter]
    fn nbytes(&self) -> usize {
        self.size() * self.itemsize()
    }

    /// The device that holds the array's device copy.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice::from(self.meta.device.clone())
    }

    /// Which copies are current: `"host"`, `"device"` or `"both"`
    /// (`"imported"` for an array imported from another library).
    #[getter]
    fn residency(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.state(py)?.residency_name())
    }

    /// Whether this array wraps another library's memory (`from_dlpack`).
    #[getter]
    fn is_imported(&self) -> bool {
        self.meta.imported
    }

    /// Whether consumers must not write (an imported read-only tensor).
    #[getter]
    fn readonly(&self) -> bool {
        self.meta.read_only
    }

    /// The id of the `get_dlpack` block holding the lock, or None.
    #[getter]
    fn lock_id(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        Ok(self.state(py)?.lock_id())
    }

    /// Whether an asynchronous copy or kernel may still be running.
    #[getter]
    fn transfer_pending(&self, py: Python<'_>) -> PyResult<bool> {
        self.state(py)?.transfer_pending().py_err(py)
    }

    /// Address of the copy `__dlpack__` exports by default (a device
    /// address for device memory). A writable address: that copy becomes
    /// the only current one, so writes through it are what the next read
    /// sees (pending work on host-reachable memory is waited for first).
    #[getter]
    fn data_ptr(&self, py: Python<'_>) -> PyResult<u64> {
        let mut st = self.state(py)?;
        py.detach(|| st.data_ptr()).py_err_in(py, "data_ptr")
    }

    /// DLPack exports and views that still share this array's memory.
    #[getter]
    fn live_exports(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.state(py)?.live_exports())
    }

    /// Makes the copy named by `device_type` current: a DLPack device type
    /// (`kDLCPU` for the host copy, `kDLCUDA` for a CUDA array's device
    /// copy), `"host"` or `"device"`. `stream` is None/0 (the device's
    /// default stream), a `Stream`, or a foreign stream; with `async_copy`
    /// the copy is only enqueued (host access waits for it).
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray(3, "int32", device="host")
    ///     >>> a.add_index()
    ///     >>> a.residency
    ///     'device'
    ///     >>> a.move_memory("host")              # or gpuport.dlpack.kDLCPU
    ///     >>> a.residency                        # the copies are the same now
    ///     'both'
    #[pyo3(signature = (device_type, device_id=None, stream=None, async_copy=false))]
    fn move_memory(
        &self,
        py: Python<'_>,
        device_type: &Bound<'_, PyAny>,
        device_id: Option<usize>,
        stream: Option<&Bound<'_, PyAny>>,
        async_copy: bool,
    ) -> PyResult<()> {
        let to = self.target(py, device_type, device_id)?;
        let s = resolve_stream(py, &self.meta.device, stream)?;
        self.move_locked(py, to, &s, async_copy, None, "move_memory")
    }

    /// Waits for pending asynchronous copies and kernels.
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray(3, "int32", device="host")
    ///     >>> a.add_index()
    ///     >>> a.synchronize()
    ///     >>> a.transfer_pending
    ///     False
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = self.state(py)?;
        py.detach(|| st.synchronize()).py_err_in(py, "synchronize")
    }

    /// Copies `array` (anything with `__dlpack__` on host memory, e.g. a
    /// NumPy array) into the host copy, which becomes the current copy. On
    /// a GPU device, when the array is new or its device copy was current
    /// (and no export of it is alive), the copy is also uploaded as it is
    /// made, on the default stream, so a later `move_memory("device")` has
    /// nothing left to copy unless the host copy is written first. The
    /// shape must match. A different dtype is cast with NumPy under the
    /// rule `casting` (as `numpy.can_cast`: "no", "equiv", "safe",
    /// "same_kind" (the default, as for `numpy.copyto`) or "unsafe"); a
    /// cast the rule does not allow raises `TypeError` (float to int or
    /// complex to real needs casting="unsafe"). Non-native byte order is
    /// converted as `asarray` converts it, under any rule but "no" (NumPy's
    /// rule that allows no change at all).
    ///
    ///     >>> import gpuport, numpy as np
    ///     >>> a = gpuport.MemArray((2, 2), "float64", device="host")
    ///     >>> a.read_numpy_array(np.arange(4).reshape(2, 2))   # int64 to float64
    ///     >>> a.to_numpy()
    ///     array([[0., 1.],
    ///            [2., 3.]])
    ///     >>> a.read_numpy_array(np.full((2, 2), 1j))
    ///     Traceback (most recent call last):
    ///     TypeError: read_numpy_array: cannot cast complex128 to float64 under casting='same_kind' ...
    #[pyo3(signature = (array, casting="same_kind"))]
    fn read_numpy_array(&self, py: Python<'_>, array: &Bound<'_, PyAny>, casting: &str) -> PyResult<()> {
        let src = crate::convert::dtype::cast_for_read(array, self.meta.dtype, casting)?;
        // The producer's `__dlpack__` is Python code: called before taking the lock.
        let p = import_producer(py, &src, None, None)?;
        let s = resolve_stream(py, &self.meta.device, None)?;
        let mut st = self.state(py)?;
        py.detach(|| st.read_host("read_numpy_array", p.tensor(), &s)).py_err_in(py, "read_numpy_array")
    }

    /// The array as a NumPy array: zero-copy for a current host copy (the
    /// host copy then becomes the only current one: NumPy may write it), a
    /// copy (DLPack `IS_COPIED`) for device-only data. The fp8/fp6/fp4
    /// dtypes need ml_dtypes (NumPy has no such dtype; ml_dtypes registers
    /// them), else `UnsupportedDTypeError`.
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray((2, 2), "int16", device="host")
    ///     >>> a.add_index()
    ///     >>> a.to_numpy()
    ///     array([[0, 1],
    ///            [1, 2]], dtype=int16)
    fn to_numpy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let np = py.import("numpy")?;
        let dtype = slf.get().meta.dtype;
        if dtype.in_ml_dtypes() {
            return slf.get().low_precision_to_numpy(py, &np, dtype);
        }
        // Always asked for on the CPU: which copy is current can change
        // between asking and exporting when threads share the array.
        let kw = PyDict::new(py);
        kw.set_item("device", "cpu")?;
        match np.call_method("from_dlpack", (slf,), Some(&kw)) {
            // NumPy before 2.1 has no `device`: it reads host memory only.
            Err(e) if e.is_instance_of::<PyTypeError>(py) && e.to_string().contains("device") => {
                np.call_method1("from_dlpack", (slf,))
            }
            other => other,
        }
    }

    /// Sets every element to `value`: a Python number or NumPy scalar,
    /// converted by NumPy to the dtype (by ml_dtypes for bfloat16 and the
    /// fp8/fp6/fp4 dtypes, when it is installed), or `bytes` holding one
    /// element (`itemsize` bytes, e.g. `b"\x38"`, the bits of 1.0 in
    /// float8_e4m3fn). Writes the host copy, which becomes the only current
    /// one. An imported array is filled in its producer library.
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray(3, "float32", device="host")
    ///     >>> a.fill(2.5)
    ///     >>> a.to_numpy()
    ///     array([2.5, 2.5, 2.5], dtype=float32)
    ///     >>> b = gpuport.MemArray(2, "bfloat16", device="host")
    ///     >>> b.fill(b"\x80\x3f")                 # the bits of 1.0 in bfloat16
    ///     >>> b.tobytes()
    ///     b'\x80?\x80?'
    fn fill(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let value = crate::convert::dtype::fill_value(value, self.meta.dtype)?;
        let mut st = self.state(py)?;
        py.detach(|| st.fill_value(value)).py_err_in(py, "fill")
    }

    /// Adds to every element the sum of its indices ("The test kernel" in
    /// `docs/design.md`), on the device, on `stream`; the device copy becomes current.
    /// A 0-d array is one element whose index sum is 0.
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray((2, 3), "int32", device="host")
    ///     >>> a.fill(10)
    ///     >>> a.add_index()
    ///     >>> a.to_numpy()
    ///     array([[10, 11, 12],
    ///            [11, 12, 13]], dtype=int32)
    #[pyo3(signature = (stream=None))]
    fn add_index(slf: &Bound<'_, Self>, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let this = slf.get();
        let s = resolve_stream(py, &this.meta.device, stream)?;
        let mut st = this.state(py)?;
        let written = py.detach(|| st.add_index(&s, None)).py_err_in(py, "add_index")?;
        drop(st);
        if written.is_some() {
            // Captured (the core orders the replays with the array): the
            // graph keeps the object, as it keeps a runtime call's operands.
            keep::keep_until_done(&s, Box::new(slf.clone().unbind())).py_err_in(py, "add_index")?;
        }
        Ok(())
    }

    /// The current host copy's bytes in row-major order (for dtypes NumPy
    /// lacks: bfloat16, complex32). Raises `ResidencyError` when the data is
    /// only in GPU memory (call `move_memory("host")` first).
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray(2, "uint16", device="host")
    ///     >>> a.fill(258)
    ///     >>> a.tobytes()                        # little-endian 0x0102, twice
    ///     b'\x02\x01\x02\x01'
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut st = self.state(py)?;
        let st: &mut AnyArray = &mut st;
        let bytes = py.detach(|| st.host_bytes_view("tobytes")).py_err_in(py, "tobytes")?;
        Ok(PyBytes::new(py, bytes.as_slice()))
    }

    /// A deep copy (an owned array; imported arrays cannot be copied here).
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray(3, "int32", device="host")
    ///     >>> b = a.copy()
    ///     >>> b.add_index()
    ///     >>> a.to_numpy(), b.to_numpy()
    ///     (array([0, 0, 0], dtype=int32), array([0, 1, 2], dtype=int32))
    fn copy(&self, py: Python<'_>) -> PyResult<PyMemArray> {
        let st = self.state(py)?;
        Ok(PyMemArray::from_owned(py.detach(|| st.deep_copy("copy")).py_err_in(py, "copy")?))
    }

    /// DLPack export (array API standard): a versioned capsule when
    /// `max_version >= (1, 0)`, else a legacy one. `stream`: CUDA: None or
    /// 1 = legacy default stream, 2 = per-thread default, a handle, -1 = no
    /// synchronization (the consumer's stream waits on our work through an
    /// event), 0 refused as ambiguous; ROCm: None or 0 = default stream, a
    /// handle, -1 (no 1/2 sentinels); host memory: None or -1. `dl_device`/`copy` are honoured (a copy to
    /// host sets `IS_COPIED`) or refused with `BufferError`. The exported
    /// copy becomes the only current one (the consumer may write it).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = ExportRequest {
            stream,
            max_version: parse_version(max_version)?,
            dl_device: parse_dl_device(dl_device)?,
            copy,
            ..ExportRequest::default()
        };
        self.dlpack_impl(py, req)
    }

    /// DLPack 1.3's C exchange API: a `PyCapsule` named
    /// "dlpack_exchange_api" holding gpuport's `DLPackExchangeAPI` table
    /// (on every backend), for consumers that exchange without Python calls.
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::convert::exchange_api::capsule(py)
    }

    /// `(device_type, device_id)` of the memory `__dlpack__` exports.
    fn __dlpack_device__(&self, py: Python<'_>) -> PyResult<(i32, i32)> {
        self.dlpack_device_impl(py, None)
    }

    /// The NumPy array interface (v3) of a host-resident array; NumPy's
    /// `asarray` uses it without a copy and keeps this array alive. The
    /// exported copy becomes the only current one (NumPy may write it).
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dtype = self.meta.dtype;
        let typestr = dtype
            .typestr()
            .ok_or_else(|| PyAttributeError::new_err(format!("{} has no array-interface type string", dtype.name())))?;
        let mut st = self.state(py)?;
        let Some(view) = py.detach(|| st.host_interface()).py_err_in(py, "__array_interface__")? else {
            return Err(PyAttributeError::new_err(
                "__array_interface__ is defined for host-resident arrays only; use __dlpack__ or move_memory(\"host\")",
            ));
        };
        let (data, strides, ro) = (view.data, view.byte_strides, view.read_only);
        drop(st);
        interface_dict(py, &self.meta.shape, typestr, data, ro, strides, None, 3)
    }

    /// The CUDA Array Interface (v3) of a CUDA-resident array, with `stream`
    /// set to a stream that waits for pending work (None when there is none).
    /// The device copy becomes the only current one (the consumer may write it).
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut st = self.state(py)?;
        crate::convert::cai::export(py, &mut st)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.meta.shape.first().copied().ok_or_else(|| PyTypeError::new_err("len() of a 0-d MemArray"))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "MemArray(shape={}, dtype={}, device={:?}, residency={})",
            python::tuple(&self.meta.shape),
            self.meta.dtype.name(),
            spec(&self.meta.device),
            self.residency(py).unwrap_or("busy")
        )
    }

    // ---- managed memory (`MemArray(..., memory="managed")`) ----

    /// Whether the device copy is managed memory (`memory="managed"`).
    ///
    ///     >>> import gpuport
    ///     >>> gpuport.MemArray(3, device="host", memory="managed").is_managed
    ///     True
    #[getter]
    fn is_managed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.state(py)?.is_managed())
    }

    /// Enqueues on `stream` moving a managed array's device copy toward
    /// `location` (`cudaMemPrefetchAsync`): `"device"` or None (the
    /// array's device), `"host"`, or a device of its backend (a `Device`,
    /// a spec, a CUDA ordinal). Contents and residency do not change. An
    /// array that is not managed raises `GpuError` (create it with
    /// `memory="managed"`); a device that cannot take the memory raises
    /// `GpuError`, one of another backend `InvalidArgumentError`. On the
    /// host backend nothing moves.
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray(4, "float32", device="host", memory="managed")
    ///     >>> a.prefetch("host")
    ///     >>> a.prefetch()
    ///     >>> gpuport.MemArray(4, device="host").prefetch()
    ///     Traceback (most recent call last):
    ///     gpuport.GpuError: prefetch: needs managed memory, and this is device memory; create the array with MemArray(shape, dtype, device, memory="managed") ...
    #[pyo3(signature = (location=None, stream=None))]
    fn prefetch(
        &self,
        py: Python<'_>,
        location: Option<&Bound<'_, PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let to = managed_target(py, location)?;
        let s = resolve_stream(py, &self.meta.device, stream)?;
        let mut st = self.state(py)?;
        py.detach(|| st.prefetch(&to, &s, None)).py_err_in(py, "prefetch")
    }

    /// Gives the driver `advice` about a managed array's device copy for
    /// `device` (`cudaMemAdvise`): `"set_read_mostly"`,
    /// `"unset_read_mostly"`, `"set_preferred_location"`,
    /// `"unset_preferred_location"`, `"set_accessed_by"` or
    /// `"unset_accessed_by"` (as `DeviceArray.advise`); `device` as
    /// `prefetch`'s `location`. Errors as `prefetch`'s; an unknown advice is
    /// `InvalidArgumentError`.
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray(4, "float32", device="host", memory="managed")
    ///     >>> a.advise("set_read_mostly")
    ///     >>> a.advise("set_preferred_location", "host")
    #[pyo3(signature = (advice, device=None))]
    fn advise(&self, py: Python<'_>, advice: &str, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let advice = gpuport::Advice::named(advice).py_err_in(py, "advise")?;
        let place = managed_target(py, device)?;
        let mut st = self.state(py)?;
        py.detach(|| st.advise(advice, &place, None)).py_err_in(py, "advise")
    }
}
