//! `Stream` and `Event`, over the core's run-time streams and events
//! (`gpuport::dynamic::stream`). The type of `Stream`, [`PyStream`], is in
//! [`crate::convert::stream`], where stream arguments are converted;
//! `Stream.capture` is in [`crate::graph`], beside the captures it starts.

use gpuport::dynamic::{AnyEvent, AnyStream};
use gpuport::{AnyDevice, BackendKind};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::convert::device::{resolve_device, spec, PyDevice};
use crate::convert::error::IntoPyResult;
use crate::convert::stream::{foreign_handle, stream_from_handle, PyStream};

impl PyStream {
    /// A new stream of gpuport's on `dev`.
    pub fn create(py: Python<'_>, dev: &AnyDevice) -> PyResult<Self> {
        Ok(PyStream { inner: AnyStream::create(dev).py_err(py)?, owner: None })
    }

    /// `inner`, keeping `owner` (a foreign stream object) alive with it.
    pub fn wrap(inner: AnyStream, owner: Option<Py<PyAny>>) -> Self {
        PyStream { inner, owner }
    }
}

#[pymethods]
impl PyStream {
    /// A new stream on `device` (default: the default device).
    #[new]
    #[pyo3(signature = (device=None))]
    fn new(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let dev = resolve_device(py, device)?;
        Ok(PyStream { inner: AnyStream::create(&dev).py_err(py)?, owner: None })
    }

    /// Wraps a stream another library owns (a PyTorch or CuPy stream, a
    /// cuda-python stream, an object with `__cuda_stream__`, or an int
    /// handle) without synchronizing; the object is kept alive.
    ///
    ///     >>> import gpuport
    ///     >>> class TheirStream:                 # the cuda.core protocol: (version, handle)
    ///     ...     def __cuda_stream__(self):
    ///     ...         return (0, 0)                # 0: the default stream
    ///     >>> s = gpuport.Stream.external(TheirStream(), device="host")
    ///     >>> s.is_external, s.handle
    ///     (True, 0)
    #[staticmethod]
    #[pyo3(signature = (stream, device=None))]
    fn external(py: Python<'_>, stream: &Bound<'_, PyAny>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let dev = resolve_device(py, device)?;
        let handle = foreign_handle(stream)?;
        let inner = stream_from_handle(py, &dev, handle)?;
        Ok(PyStream { inner, owner: Some(stream.clone().unbind()) })
    }

    /// The stream's device.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice::from(self.inner.device())
    }

    /// The native handle (`CUstream` as an int; 0 on the host backend).
    #[getter]
    fn handle(&self) -> usize {
        self.inner.handle()
    }

    /// Whether the stream is a foreign one wrapped by `Stream.external`.
    #[getter]
    fn is_external(&self) -> bool {
        self.owner.is_some()
    }

    fn __int__(&self) -> usize {
        self.inner.handle()
    }

    /// The cuda.core stream protocol: `(0, handle)`, the `CUstream` of a
    /// CUDA stream or, as torch's ROCm build does, the `hipStream_t` of a
    /// ROCm stream. A host stream has no handle to give (`TypeError`).
    fn __cuda_stream__(&self) -> PyResult<(i32, usize)> {
        match self.inner.device().backend() {
            BackendKind::Cuda | BackendKind::Rocm => Ok((0, self.inner.handle())),
            b => Err(PyTypeError::new_err(format!(
                "a {b} stream is not a CUDA or ROCm stream: it has no handle for __cuda_stream__"
            ))),
        }
    }

    /// Blocks until the stream's work is done.
    ///
    ///     >>> import gpuport
    ///     >>> s = gpuport.Stream("host")
    ///     >>> a = gpuport.MemArray(3, "int32", device="host")
    ///     >>> a.add_index(stream=s)
    ///     >>> s.synchronize()
    ///     >>> a.transfer_pending
    ///     False
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.synchronize()).py_err_in(py, "Stream.synchronize")
    }

    /// Whether the stream is capturing into a graph (gpuport's capture or,
    /// for a foreign stream, another library's).
    #[getter]
    fn is_capturing(&self, py: Python<'_>) -> PyResult<bool> {
        self.inner.capture_status().map(|s| s.is_capturing()).py_err(py)
    }

    /// Records an event at the current end of the stream.
    ///
    ///     >>> import gpuport
    ///     >>> e = gpuport.Stream("host").record_event()
    ///     >>> e.synchronize(); e.query()
    ///     True
    fn record_event(&self, py: Python<'_>) -> PyResult<PyEvent> {
        Ok(PyEvent(self.inner.record().py_err(py)?))
    }

    /// Makes later work on this stream wait for `event`, without blocking the host.
    ///
    ///     >>> import gpuport
    ///     >>> producer, consumer = gpuport.Stream("host"), gpuport.Stream("host")
    ///     >>> a = gpuport.MemArray(3, "int32", device="host")
    ///     >>> a.add_index(stream=producer)
    ///     >>> done = producer.record_event()
    ///     >>> consumer.wait_event(done)
    ///     >>> consumer.synchronize()               # so the producer's work is done too
    ///     >>> done.query()
    ///     True
    fn wait_event(&self, py: Python<'_>, event: PyRef<'_, PyEvent>) -> PyResult<()> {
        self.inner.wait(&event.0).py_err(py)
    }

    fn __repr__(&self) -> String {
        format!("Stream({}, handle={:#x})", spec(&self.inner.device()), self.inner.handle())
    }
}

/// A marker recorded on a stream (`Stream.record_event`).
///
///     >>> import gpuport
///     >>> s = gpuport.Stream("host")
///     >>> start = s.record_event()
///     >>> a = gpuport.MemArray(1000, device="host")
///     >>> a.add_index(stream=s)
///     >>> end = s.record_event()
///     >>> end.synchronize()
///     >>> start.query(), end.query(), start.elapsed_ms(end) >= 0
///     (True, True, True)
#[pyclass(module = "gpuport._core", name = "Event", frozen)]
pub struct PyEvent(pub AnyEvent);

#[pymethods]
impl PyEvent {
    /// Blocks until the event has completed.
    ///
    ///     >>> import gpuport
    ///     >>> e = gpuport.Stream("host").record_event()
    ///     >>> e.synchronize()
    ///     >>> e.query()
    ///     True
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.0.synchronize()).py_err_in(py, "Event.synchronize")
    }

    /// Whether the event has completed; does not wait.
    ///
    ///     >>> import gpuport
    ///     >>> e = gpuport.Stream("host").record_event()
    ///     >>> e.query() in (True, False)          # the stream may still be running
    ///     True
    ///     >>> e.synchronize(); e.query()
    ///     True
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        self.0.is_complete().py_err_in(py, "Event.query")
    }

    /// Milliseconds from this event to `end` (both completed).
    ///
    ///     >>> import gpuport
    ///     >>> s = gpuport.Stream("host")
    ///     >>> start, end = s.record_event(), s.record_event()
    ///     >>> end.synchronize()
    ///     >>> ms = start.elapsed_ms(end)
    ///     >>> isinstance(ms, float) and ms >= 0
    ///     True
    fn elapsed_ms(&self, py: Python<'_>, end: PyRef<'_, PyEvent>) -> PyResult<f32> {
        self.0.elapsed_ms(&end.0).py_err(py)
    }
}
