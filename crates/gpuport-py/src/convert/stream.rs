//! Streams from Python arguments: `None`, a `Stream`, an int handle or a
//! foreign stream object. The type of `Stream`, [`PyStream`], is here for
//! that reason (its Python methods are in [`crate::stream`]).

pub use gpuport::dynamic::runtime::StreamChoice;
use gpuport::dynamic::stream_protocol::{
    cuda_stream_handle, keeps_stream_object, stream_handle, GivenItem, GivenValue,
};
pub use gpuport::dynamic::{AnyEvent, AnyStream};
use gpuport::AnyDevice;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::error::{self, IntoPyResult};

/// A stream argument on its device, and the foreign stream object it was
/// named by: the object is kept, once the call is done with the stream,
/// until the work the call enqueued on it has run (`Drop`), so the stream
/// lives as long as gpuport uses its handle. Derefs to the stream.
pub struct StreamArg {
    stream: AnyStream,
    owner: Option<Py<PyAny>>,
}

impl std::ops::Deref for StreamArg {
    type Target = AnyStream;
    fn deref(&self) -> &AnyStream {
        &self.stream
    }
}

impl StreamArg {
    /// The stream alone, for a caller that keeps the stream object itself
    /// (`Stream.external`'s wrapper).
    pub fn into_stream(mut self) -> AnyStream {
        self.owner = None;
        self.stream.clone()
    }
}

impl Drop for StreamArg {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            // An error here (the device lost) leaves nothing to order the
            // release after; the owner then goes at once, as the work failed.
            let _ = gpuport::dynamic::keep::keep_until_done(&self.stream, Box::new(owner));
        }
    }
}

/// The stream a Python argument names, on `dev`, with the foreign stream
/// object it came from kept while the call's work runs ([`StreamArg`]).
///
/// Accepted: `None` or `0` (the device's default stream), a `Stream`, an int
/// handle (CUDA: a `CUstream`, or 1 / 2 for the legacy / per-thread default
/// stream), or an object with `__cuda_stream__` (cuda.core protocol, see
/// [`foreign_handle`]), `cuda_stream` (PyTorch) or `ptr` (CuPy).
pub fn resolve_stream(py: Python<'_>, dev: &AnyDevice, obj: Option<&Bound<'_, PyAny>>) -> PyResult<StreamArg> {
    let chosen = stream_choice(obj)?;
    let stream = chosen.choice.on(dev).py_err(py)?;
    Ok(StreamArg { stream, owner: chosen.owner })
}

/// A stream argument before the device of the call is known, and the
/// foreign stream object it came from: the call keeps `owner` with its
/// operands until its work has run.
pub struct ChosenStream<'a> {
    /// The stream, for the core's call (a `gpuport.Stream`'s, borrowed).
    pub choice: StreamChoice<'a>,
    /// The foreign stream object that named a handle, if one did.
    pub owner: Option<Py<PyAny>>,
}

/// The stream a Python argument names, before the device of the call is
/// known (accepted: as [`resolve_stream`]).
pub fn stream_choice<'a>(obj: Option<&'a Bound<'_, PyAny>>) -> PyResult<ChosenStream<'a>> {
    let Some(o) = obj.filter(|o| !o.is_none()) else {
        return Ok(ChosenStream { choice: StreamChoice::Default, owner: None });
    };
    if let Ok(s) = o.cast::<PyStream>() {
        return Ok(ChosenStream { choice: StreamChoice::borrowed(&s.get().inner), owner: None });
    }
    let handle = stream_handle(foreign_handle(o)?).map_err(|e| error::stream_arg(o.py(), e))?;
    let owner = keeps_stream_object(handle, o.extract::<isize>().is_ok()).then(|| o.clone().unbind());
    // SAFETY: the caller handed us this handle as a live stream of the
    // device the call runs on (or a sentinel of its vendor); its object,
    // where there is one, is kept until the call's work has run.
    Ok(ChosenStream { choice: unsafe { StreamChoice::handle(handle) }, owner })
}

/// The integer handle of a foreign stream object (or of an int).
///
/// `__cuda_stream__` (the cuda.core protocol) is called where it is a
/// method and read where it is an attribute; it must give a 2-tuple of
/// ints `(version, handle)` with version 0 (`TypeError` for another
/// shape or type, `ValueError` for another version).
pub fn foreign_handle(o: &Bound<'_, PyAny>) -> PyResult<isize> {
    if let Ok(i) = o.extract::<isize>() {
        return Ok(i);
    }
    if let Ok(protocol) = o.getattr("__cuda_stream__") {
        return cuda_stream_handle_of(o, &protocol);
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

/// The handle in `o.__cuda_stream__` (`protocol`), read for the core's
/// [`cuda_stream_handle`].
fn cuda_stream_handle_of(o: &Bound<'_, PyAny>, protocol: &Bound<'_, PyAny>) -> PyResult<isize> {
    let type_name = |v: &Bound<'_, PyAny>| -> PyResult<String> { Ok(v.get_type().name()?.to_string()) };
    let value = if protocol.is_callable() { protocol.call0()? } else { protocol.clone() };
    let given = match value.cast::<PyTuple>() {
        Ok(pair) => GivenValue::Tuple(
            pair.iter()
                .map(|item| match item.extract::<isize>() {
                    Ok(i) => Ok(GivenItem::Int(i)),
                    Err(_) => Ok(GivenItem::Other(type_name(&item).unwrap_or_default())),
                })
                .collect::<PyResult<_>>()?,
        ),
        Err(_) => GivenValue::Other(type_name(&value)?),
    };
    cuda_stream_handle(&type_name(o)?, given).map_err(|e| error::stream_arg(o.py(), e))
}

/// The stream with native handle `handle` on `dev` (0: the default stream).
pub fn stream_from_handle(py: Python<'_>, dev: &AnyDevice, handle: isize) -> PyResult<AnyStream> {
    let handle = stream_handle(handle).map_err(|e| error::stream_arg(py, e))?;
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
