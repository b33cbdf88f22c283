//! `Device`, `Stream` and `Event`, and how Python objects name streams.
//! `Stream`'s Python methods are in [`crate::stream`].

use gpuport::dlpack::dl_device;
pub use gpuport::dynamic::runtime::StreamChoice;
pub use gpuport::dynamic::{AnyEvent, AnyStream};
use gpuport::{AnyDevice, BackendKind, MemoryKind};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::IntoPyResult;

/// The spec that opens `dev` again (`"host"`, `"cuda:0"`).
pub fn spec(dev: &AnyDevice) -> String {
    dev.info().spec()
}

pub use gpuport::dynamic::same_device;

/// The DLPack device of `dev`'s device memory.
pub fn device_dl(dev: &AnyDevice) -> (i32, i32) {
    let d = dl_device(dev.backend(), MemoryKind::Device, dev.info().ordinal);
    (d.device_type.0 as i32, d.device_id)
}

/// Opens a device from `None` (the default device), a spec string, an int
/// (a CUDA ordinal) or a `Device`.
///
/// Also installs the Python package's memory resource (statistics and CSV
/// log over a caching pool) as the device's current resource, so that every
/// allocation made for Python, `MemArray`s included, shows in
/// `gpuport.memory.stats()` whichever call touched the device first.
pub fn resolve_device(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<AnyDevice> {
    let dev = open_device(py, obj)?;
    // Errors surface at the first allocation, with the call that made it.
    let _ = gpuport::dynamic::memory::install(&dev);
    Ok(dev)
}

/// [`resolve_device`] without installing the memory resource, for calls
/// that allocate at once (which installs it).
pub fn open_device(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<AnyDevice> {
    match obj {
        None => default_device(py),
        Some(o) if o.is_none() => default_device(py),
        Some(o) => {
            if let Ok(d) = o.cast::<PyDevice>() {
                return Ok(d.get().0.clone());
            }
            if let Ok(s) = o.extract::<String>() {
                return py.detach(|| gpuport::open(&s)).py_err(py);
            }
            if let Ok(i) = o.extract::<usize>() {
                return py.detach(|| gpuport::open(&format!("cuda:{i}"))).py_err(py);
            }
            Err(PyTypeError::new_err(format!(
                "device must be None, a Device, a spec such as \"host\" or \"cuda:0\", or a CUDA ordinal; got {}",
                o.get_type().name()?
            )))
        }
    }
}

pub fn default_device(py: Python<'_>) -> PyResult<AnyDevice> {
    py.detach(gpuport::dynamic::runtime::default_device).py_err(py)
}

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

// ---- Python classes ---------------------------------------------------------------

/// A device: the host backend (`"host"`) or a GPU (`"cuda:0"`).
///
///     >>> import gpuport
///     >>> d = gpuport.Device("host")
///     >>> d.backend, d.spec, d.ordinal, d.dlpack_device
///     ('host', 'host', 0, (1, 0))
///     >>> d == gpuport.Device("host"), d.total_memory > 0
///     (True, True)
///     >>> d.name.startswith("host"), isinstance(d.arch, str)
///     (True, True)
///     >>> d.default_stream.handle                # the host backend's streams have no handle
///     0
#[pyclass(module = "gpuport._core", name = "Device", frozen, eq, hash)]
#[derive(Clone)]
pub struct PyDevice(pub AnyDevice);

impl PartialEq for PyDevice {
    fn eq(&self, other: &Self) -> bool {
        same_device(&self.0, &other.0)
    }
}

impl std::hash::Hash for PyDevice {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        spec(&self.0).hash(state)
    }
}

#[pymethods]
impl PyDevice {
    /// Opens a device: `None` for the default (`GPUPORT_DEVICE`, else the
    /// first GPU, else the host), a spec (`"host"`, `"cuda:1"`) or a CUDA ordinal.
    #[new]
    #[pyo3(signature = (spec=None))]
    fn new(py: Python<'_>, spec: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        resolve_device(py, spec).map(PyDevice)
    }

    /// The backend: `"host"`, `"cuda"` or `"rocm"`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.0.backend().name()
    }

    /// Index of the device within its backend.
    #[getter]
    fn ordinal(&self) -> usize {
        self.0.info().ordinal
    }

    /// The vendor's name for the device.
    #[getter]
    fn name(&self) -> String {
        self.0.info().name.clone()
    }

    /// The architecture (`sm_90`, or the host CPU's).
    #[getter]
    fn arch(&self) -> String {
        self.0.info().arch.clone()
    }

    /// Total memory in bytes.
    #[getter]
    fn total_memory(&self) -> usize {
        self.0.info().total_memory
    }

    /// The spec that opens this device (`"host"`, `"cuda:0"`).
    #[getter]
    fn spec(&self) -> String {
        spec(&self.0)
    }

    /// The DLPack `(device_type, device_id)` of this device's memory.
    #[getter]
    fn dlpack_device(&self) -> (i32, i32) {
        device_dl(&self.0)
    }

    /// The device's default stream.
    #[getter]
    fn default_stream(&self) -> PyStream {
        PyStream { inner: AnyStream::default_for(&self.0), owner: None }
    }

    /// A new stream on this device.
    ///
    ///     >>> import gpuport
    ///     >>> s = gpuport.Device("host").create_stream()
    ///     >>> s.device.spec, s.is_external
    ///     ('host', False)
    fn create_stream(&self, py: Python<'_>) -> PyResult<PyStream> {
        Ok(PyStream { inner: AnyStream::create(&self.0).py_err(py)?, owner: None })
    }

    /// Blocks until the default stream's work is done.
    ///
    ///     >>> import gpuport
    ///     >>> a = gpuport.MemArray(4, "int32", device="host")
    ///     >>> a.add_index()                      # enqueued on the default stream
    ///     >>> a.device.synchronize()
    ///     >>> a.transfer_pending
    ///     False
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let s = AnyStream::default_for(&self.0);
        py.detach(|| s.synchronize()).py_err_in(py, "Device.synchronize")
    }

    /// Whether this device can address ``peer``'s memory directly (peer
    /// access: kernels reading its addresses, copies without a stop in host
    /// memory). ``True`` for the device itself; a device of another backend
    /// raises ``DeviceMismatchError``.
    ///
    ///     >>> import gpuport
    ///     >>> d = gpuport.Device("host")
    ///     >>> d.can_access_peer(d)
    ///     True
    fn can_access_peer(&self, py: Python<'_>, peer: PyRef<'_, PyDevice>) -> PyResult<bool> {
        let (d, p) = (self.0.clone(), peer.0.clone());
        py.detach(|| gpuport::dynamic::peer::can_access_peer(&d, &p)).py_err_in(py, "Device.can_access_peer")
    }

    /// Lets this device address ``peer``'s memory directly, in that direction
    /// only. Idempotent; a no-op for the device itself; ``UnsupportedError``
    /// where ``can_access_peer`` is ``False``.
    ///
    ///     >>> import gpuport
    ///     >>> d = gpuport.Device("host")
    ///     >>> d.enable_peer_access(d)
    ///     >>> d.enable_peer_access(d)          # again: still fine
    fn enable_peer_access(&self, py: Python<'_>, peer: PyRef<'_, PyDevice>) -> PyResult<()> {
        let (d, p) = (self.0.clone(), peer.0.clone());
        py.detach(|| gpuport::dynamic::peer::enable_peer_access(&d, &p)).py_err_in(py, "Device.enable_peer_access")
    }

    fn __repr__(&self) -> String {
        format!("Device({:?}, name={:?})", spec(&self.0), self.0.info().name)
    }
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

/// Every usable device: the host, then each GPU of each compiled-in
/// backend that loads.
///
///     >>> import gpuport
///     >>> devs = gpuport.devices()
///     >>> devs[0].spec                        # the host comes first
///     'host'
///     >>> all(gpuport.is_available(d.backend) for d in devs)
///     True
#[pyfunction]
pub fn devices(py: Python<'_>) -> PyResult<Vec<PyDevice>> {
    let specs: Vec<String> = py.detach(|| {
        gpuport::backends().into_iter().filter_map(|s| s.devices.ok()).flatten().map(|info| info.spec()).collect()
    });
    let mut out = Vec::new();
    for s in specs {
        out.push(PyDevice(py.detach(|| gpuport::open(&s)).py_err(py)?));
    }
    out.sort_by_key(|d| (d.0.backend() != BackendKind::Host, spec(&d.0)));
    Ok(out)
}

/// Each backend as `(name, available, note)`: the note gives the device
/// count of a backend that loaded, else why it is unavailable (the library
/// tried, and where). `gpuport.show_config()` prints it.
///
///     >>> import gpuport
///     >>> status = {name: ok for name, ok, note in gpuport.backend_status()}
///     >>> sorted(status), status["host"]
///     (['cuda', 'host', 'rocm'], True)
///     >>> [note for name, ok, note in gpuport.backend_status() if name == "host"]
///     ['1 device(s)']
#[pyfunction]
pub fn backend_status(py: Python<'_>) -> Vec<(String, bool, String)> {
    py.detach(|| {
        gpuport::backends()
            .into_iter()
            .map(|s| {
                let (ok, note) = match &s.devices {
                    Ok(d) => (true, format!("{} device(s)", d.len())),
                    // The core's one line, without the backend's name it starts with.
                    Err(_) => {
                        let line = s.to_string();
                        let prefix = format!("{}: unavailable: ", s.kind);
                        (false, line.strip_prefix(&prefix).unwrap_or(&line).to_string())
                    }
                };
                (s.kind.name().to_string(), s.compiled && ok, note)
            })
            .collect()
    })
}

/// The default device (`GPUPORT_DEVICE`, else the first GPU, else the host),
/// chosen once per process.
///
///     >>> import gpuport
///     >>> d = gpuport.default_device()
///     >>> d in gpuport.devices(), d == gpuport.Device()
///     (True, True)
#[pyfunction(name = "default_device")]
pub fn py_default_device(py: Python<'_>) -> PyResult<PyDevice> {
    default_device(py).map(PyDevice)
}

pub use gpuport::dynamic::exchange::is_cuda_type as is_cuda_dl;
