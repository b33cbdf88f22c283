//! `Device`'s Python methods (its type, [`PyDevice`], is in
//! [`crate::convert::device`], where device arguments are converted), and
//! the module's device functions (`devices`, `default_device`,
//! `backend_status`).

use gpuport::dynamic::AnyStream;
use gpuport::BackendKind;
use pyo3::prelude::*;

use crate::convert::device::{default_device, device_dl, resolve_device, spec, PyDevice};
use crate::convert::error::IntoPyResult;
use crate::convert::stream::PyStream;

#[pymethods]
impl PyDevice {
    /// Opens a device: `None` for the default (`GPUPORT_DEVICE`, else the
    /// first GPU, else the host), a spec (`"host"`, `"cuda:1"`) or a CUDA ordinal.
    #[new]
    #[pyo3(signature = (spec=None))]
    fn new(py: Python<'_>, spec: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        resolve_device(py, spec).map(PyDevice::from)
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
        out.push(PyDevice::from(py.detach(|| gpuport::open(&s)).py_err(py)?));
    }
    out.sort_by_key(|d| (d.0.backend() != BackendKind::Host, spec(&d.0)));
    Ok(out)
}

/// Each backend as `(name, available, note)`: the note gives the device
/// count of a backend that loaded, else why it is unavailable (the library
/// tried, and where), then each vendor library it loaded, with the file
/// and why it was chosen (`libamdhip64 from /x/torch/lib/libamdhip64.so
/// (pip wheel in /x)`). `gpuport.show_config()` prints it.
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
                let (ok, mut note) = match &s.devices {
                    Ok(d) => (true, format!("{} device(s)", d.len())),
                    // The core's one line, without the backend's name it starts with.
                    Err(_) => {
                        let line = s.to_string();
                        let prefix = format!("{}: unavailable: ", s.kind);
                        (false, line.strip_prefix(&prefix).unwrap_or(&line).to_string())
                    }
                };
                // "; libamdhip64 from /x/torch/lib/libamdhip64.so (pip wheel in /x)" per library loaded.
                for lib in &s.libraries {
                    note.push_str(&format!("; {lib}"));
                }
                (s.kind.name().to_string(), s.compiled && ok, note)
            })
            .collect()
    })
}

/// Adds folders to search for pip wheel copies of vendor libraries
/// (`torch/lib`, `nvidia/cu13/lib`, …), after `GPUPORT_SITE_PACKAGES`'s.
/// The package passes `sys.path` at import, before any library is loaded.
#[pyfunction]
pub fn _set_site_packages(paths: Vec<std::path::PathBuf>) {
    gpuport::backend::library::set_site_packages(paths.into_iter().filter(|p| p.is_dir()));
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
    default_device(py).map(PyDevice::from)
}
