//! Streams from Python arguments: `None`, a `Stream`, an int handle or a
//! foreign stream object. The type of `Stream`, [`PyStream`], is here for
//! that reason (its Python methods are in [`crate::stream`]).

pub use gpuport::dynamic::runtime::StreamChoice;
pub use gpuport::dynamic::{AnyEvent, AnyStream};
use gpuport::AnyDevice;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::IntoPyResult;

/// The stream a Python argument names, on `dev`, and the Python object that
/// must stay alive while it is used (a foreign stream's owner).
///
/// Accepted: `None` or `0` (the device's default stream), a `Stream`, an int
/// handle (CUDA: a `CUstream`, or 1 / 2 for the legacy / per-thread default
/// stream), or an object with `__cuda_stream__()` (cuda.core protocol),
/// `cuda_stream` (PyTorch) or `ptr` (CuPy).
pub fn resolve_stream(py: Python<'_>, dev: &AnyDevice, obj: Option<&Bound<'_, PyAny>>) -> PyResult<AnyStream> {
    stream_choice(obj)?.on(dev).py_err(py)
}

/// The stream a Python argument names, before the device of the call is
/// known (accepted: as [`resolve_stream`]).
pub fn stream_choice(obj: Option<&Bound<'_, PyAny>>) -> PyResult<StreamChoice> {
    let Some(o) = obj.filter(|o| !o.is_none()) else {
        return Ok(StreamChoice::Default);
    };
    if let Ok(s) = o.cast::<PyStream>() {
        return Ok(StreamChoice::stream(s.get().inner.clone()));
    }
    let handle = foreign_handle(o)?;
    let handle = usize::try_from(handle)
        .map_err(|_| PyValueError::new_err(format!("stream {handle} is not a stream handle")))?;
    // SAFETY: the caller handed us this handle as a live stream of the
    // device the call runs on (or a sentinel of its vendor), used only
    // during this call, as HIP Python takes a `hipStream_t`.
    Ok(unsafe { StreamChoice::handle(handle) })
}

/// The integer handle of a foreign stream object (or of an int).
pub fn foreign_handle(o: &Bound<'_, PyAny>) -> PyResult<isize> {
    if let Ok(i) = o.extract::<isize>() {
        return Ok(i);
    }
    if o.hasattr("__cuda_stream__")? {
        let t = o.call_method0("__cuda_stream__")?;
        let t = t.cast::<PyTuple>()?;
        return t.get_item(1)?.extract::<isize>();
    }
    for attr in ["cuda_stream", "ptr"] {
        if let Ok(v) = o.getattr(attr) {
            if let Ok(i) = v.extract::<isize>() {
                return Ok(i);
            }
        }
    }
    Err(PyTypeError::new_err(format!(
        "stream must be None, a gpuport.Stream, an int handle, or an object with __cuda_stream__, cuda_stream or ptr; got {}",
        o.get_type().name()?
    )))
}

/// The stream with native handle `handle` on `dev` (0: the default stream).
pub fn stream_from_handle(py: Python<'_>, dev: &AnyDevice, handle: isize) -> PyResult<AnyStream> {
    let handle = usize::try_from(handle)
        .map_err(|_| PyValueError::new_err(format!("stream {handle} is not a stream handle")))?;
    // SAFETY: the caller handed us this handle as a live stream of this
    // device (or a sentinel of its vendor); the borrowed handle is used only
    // during this call or, for `Stream.external`, while the owner object is
    // kept alive.
    unsafe { AnyStream::borrow(dev, handle) }.py_err(py)
}

/// An in-order queue of work on one device; gpuport's own or a foreign
/// one (`Stream.external`).
///
///     >>> import gpuport
///     >>> s = gpuport.Stream("host")
///     >>> s.device.spec, s.handle, int(s), s.is_external, s.is_capturing
///     ('host', 0, 0, False, False)
///     >>> a = gpuport.MemArray(3, "float32", device="host")
///     >>> a.add_index(stream=s)              # work in the stream's order
///     >>> s.synchronize()
///     >>> a.to_numpy()
///     array([0., 1., 2.], dtype=float32)
#[pyclass(module = "gpuport._core", name = "Stream", frozen)]
pub struct PyStream {
    pub inner: AnyStream,
    /// The foreign stream object, kept alive while this handle is.
    pub(crate) owner: Option<Py<PyAny>>,
}
