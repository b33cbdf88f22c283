//! `DLPackContext`, what `MemArray.get_dlpack()` returns: a context manager
//! that locks the array for its `with` block and exports it through DLPack
//! with the lock id. Its life (fresh, entered, closed) and which export it
//! allows when are the core's `LockContext` (`src/dynamic/lock_context.rs`);
//! this class converts arguments and holds the array and the stream.

use gpuport::array::Location;
use gpuport::dynamic::exchange::{dl_pair, ExportRequest};
use gpuport::dynamic::lock_context::LockContext;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::capsule::make_capsule;
use crate::convert::error::IntoPyResult;
use crate::convert::exchange::{parse_dl_device, parse_version};
use crate::convert::memarray::PyMemArray;
use crate::convert::stream::{resolve_stream, StreamArg};

/// The object `MemArray.get_dlpack()` returns: a context manager that locks
/// the array for its block and exports it through DLPack with the lock id.
///
///     >>> import gpuport, numpy as np
///     >>> a = gpuport.MemArray(2, "int32", device="host")
///     >>> ctx = a.get_dlpack()
///     >>> ctx.array is a
///     True
///     >>> with ctx:
///     ...     x = np.from_dlpack(ctx)              # `ctx.__dlpack__`, with the lock
///     ...     a.lock_id == ctx.lock_id
///     True
///     >>> x
///     array([0, 0], dtype=int32)
#[pyclass(module = "gpuport._core", name = "DLPackContext", frozen)]
pub struct DLPackContext {
    array: Py<PyMemArray>,
    block: LockContext,
    /// The stream to move the copy `get_dlpack(device_type)` asked for on
    /// (a foreign stream's object kept with it).
    stream: Option<StreamArg>,
}

impl DLPackContext {
    pub fn new(array: Py<PyMemArray>, readonly: bool, prefer: Option<(Location, StreamArg)>) -> Self {
        let (prefer, stream) = prefer.unzip();
        DLPackContext { array, block: LockContext::new(readonly, prefer), stream }
    }
}

#[pymethods]
impl DLPackContext {
    /// The lock id this context holds inside its `with` block.
    #[getter]
    fn lock_id(&self) -> u64 {
        self.block.lock_id()
    }

    /// The array.
    #[getter]
    fn array(&self, py: Python<'_>) -> Py<PyMemArray> {
        self.array.clone_ref(py)
    }

    /// Locks the array with this context's id (and makes the copy
    /// `get_dlpack(device_type)` named current, under the lock).
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        let me = slf.get();
        let mut st = me.array.bind(py).get().state(py)?;
        let stream = me.stream.as_deref();
        // A move waits for the device: without the GIL.
        let entered = match me.block.prefer() {
            Some(_) => py.detach(|| me.block.enter(&mut st, stream)),
            None => me.block.enter(&mut st, stream),
        };
        entered.py_err_in(py, "get_dlpack")?;
        drop(st);
        Ok(slf)
    }

    /// Unlocks the array (whatever happened in the block) and closes the context.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        let mut st = self.array.bind(py).get().state(py)?;
        self.block.exit(&mut st);
        Ok(false)
    }

    /// As `MemArray.__dlpack__`, with this context's lock (and READ_ONLY
    /// when made with `readonly=True`); refused once the block has ended.
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
            ..Default::default()
        };
        let mut st = self.array.bind(py).get().state(py)?;
        // SAFETY: `stream` is the consumer's, as `__dlpack__` received it:
        // the DLPack standard requires it to be a sentinel or a live stream
        // of the array's device.
        let e = py.detach(|| unsafe { self.block.export(&mut st, req) }).py_err_in(py, "__dlpack__")?;
        make_capsule(py, e)
    }

    fn __dlpack_device__(&self, py: Python<'_>) -> PyResult<(i32, i32)> {
        let st = self.array.bind(py).get().state(py)?;
        Ok(dl_pair(self.block.dl_device(&st)))
    }
}

/// `MemArray.get_dlpack`, written here beside the context it opens.
#[pymethods]
impl PyMemArray {
    /// A context manager that moves the array to `device_type` (if given),
    /// locks it for the `with` block and exports it through DLPack:
    /// `with a.get_dlpack() as d: x = np.from_dlpack(d)`. Inside the block,
    /// use of the array without the context (from any thread) raises
    /// `LockError`. Tensors taken from the context keep the memory alive
    /// after the block; once the block has ended the context exports nothing
    /// more (`DLPackError`), since the array may move or change its data.
    ///
    ///     >>> import gpuport, numpy as np
    ///     >>> a = gpuport.MemArray(3, "float32", device="host")
    ///     >>> with a.get_dlpack("host", readonly=True) as ctx:
    ///     ...     x = np.from_dlpack(ctx)
    ///     ...     a.lock_id == ctx.lock_id
    ///     True
    ///     >>> x, x.flags.writeable, a.lock_id
    ///     (array([0., 0., 0.], dtype=float32), False, None)
    #[pyo3(signature = (device_type=None, device_id=None, stream=None, readonly=false))]
    fn get_dlpack(
        slf: &Bound<'_, Self>,
        device_type: Option<&Bound<'_, PyAny>>,
        device_id: Option<usize>,
        stream: Option<&Bound<'_, PyAny>>,
        readonly: bool,
    ) -> PyResult<DLPackContext> {
        let py = slf.py();
        let me = slf.get();
        let prefer = match device_type.filter(|d| !d.is_none()) {
            Some(d) => {
                let to = me.target(py, d, device_id)?;
                let s = resolve_stream(py, &me.meta.device, stream)?;
                me.move_locked(py, to, &s, false, None, "get_dlpack")?;
                Some((to, s))
            }
            None => None,
        };
        Ok(DLPackContext::new(slf.clone().unbind(), readonly, prefer))
    }
}
