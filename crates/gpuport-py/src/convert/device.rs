//! Devices from Python arguments: `None`, a spec string, a CUDA ordinal or a
//! `Device`, whose type, [`PyDevice`], is here for that reason (its Python
//! methods are in [`crate::device`]).

use std::sync::{Mutex, OnceLock};

use gpuport::dynamic::managed::ManagedTarget;
use gpuport::dynamic::memory::AnyResources;
use gpuport::dynamic::AnyStream;
use gpuport::AnyDevice;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::convert::error::IntoPyResult;

/// The spec that opens `dev` again (`"host"`, `"cuda:0"`).
pub fn spec(dev: &AnyDevice) -> String {
    dev.info().spec()
}

pub use gpuport::dynamic::same_device;

/// The DLPack device of `dev`'s device memory.
pub fn device_dl(dev: &AnyDevice) -> (i32, i32) {
    let d = gpuport::dynamic::target::device_copy_dl(dev);
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
    if let Some(d) = given_device(py, obj)? {
        return Ok(d.0.clone());
    }
    // `given_device` answers `None` (the default device), a `Device` and
    // UTF-8 text; what is left is an ordinal or a mistake. Its answer for no
    // argument is always `Some`: the `None` arm only spares a panic path.
    match obj {
        Some(o) => open_ordinal(py, o),
        None => default_device(py),
    }
}

/// A device argument as a [`PyDevice`], whose caches a hot call uses: the
/// `Device` given, the default device's for `None`, the kept one of a spec
/// string ([`spec_py_device`]); `None` (the caller opens it with
/// [`open_device`]) for an ordinal or another object.
pub fn given_device<'a>(py: Python<'_>, obj: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<&'a PyDevice>> {
    match obj {
        Some(o) if !o.is_none() => {
            if let Ok(d) = o.cast::<PyDevice>() {
                return Ok(Some(d.get()));
            }
            // Text that is not UTF-8 goes to `open_device`'s type error.
            match o.cast::<PyString>().ok().and_then(|s| s.to_str().ok()) {
                Some(spec) => spec_py_device(py, spec).map(Some),
                None => Ok(None),
            }
        }
        _ => default_py_device(py).map(Some),
    }
}

/// The [`PyDevice`] of a spec string (`"host"`, `"cuda:0"`), kept for the
/// process as the default device's is: a device, once opened, is the
/// process's for good (`gpuport::open` gives the same one again), so a hot
/// call given a spec skips the parse, the open (with the GIL released) and
/// the resource lookup, and uses the kept stream and resources as a
/// `Device` does ([`open_device`] takes it for every other call given a
/// spec). One `PyDevice` per device; at most [`KEPT_SPECS`]
/// spellings are remembered (others open the device each call, as before).
/// A spec that fails to open is not kept: its error is raised each time.
fn spec_py_device(py: Python<'_>, spec: &str) -> PyResult<&'static PyDevice> {
    static KEPT: Mutex<KeptDevices> = Mutex::new(KeptDevices { devices: Vec::new(), specs: Vec::new() });
    let kept = || KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let known = kept().specs.iter().find(|(s, _)| **s == *spec).map(|&(_, d)| d);
    if let Some(d) = known {
        return Ok(d);
    }
    let dev = py.detach(|| gpuport::open(spec)).py_err(py)?;
    let mut k = kept();
    let d = match k.devices.iter().find(|d| same_device(&d.0, &dev)) {
        Some(d) => *d,
        None => {
            // One per device of the process: a bounded leak.
            let d: &'static PyDevice = Box::leak(Box::new(PyDevice::from(dev)));
            k.devices.push(d);
            d
        }
    };
    if k.specs.len() < KEPT_SPECS {
        k.specs.push((spec.into(), d));
    }
    Ok(d)
}

/// What [`spec_py_device`] keeps: one `PyDevice` per device opened, and the
/// spellings that named them.
struct KeptDevices {
    devices: Vec<&'static PyDevice>,
    specs: Vec<(Box<str>, &'static PyDevice)>,
}

/// How many spellings of device specs [`spec_py_device`] remembers.
const KEPT_SPECS: usize = 16;

/// The default device as a [`PyDevice`], kept for the process (the choice
/// is made once per process).
fn default_py_device(py: Python<'_>) -> PyResult<&'static PyDevice> {
    static DEFAULT: OnceLock<PyDevice> = OnceLock::new();
    if let Some(d) = DEFAULT.get() {
        return Ok(d);
    }
    let d = PyDevice::from(default_device(py)?);
    Ok(DEFAULT.get_or_init(|| d))
}

/// Opens a device from a CUDA ordinal; any other object is a type error.
fn open_ordinal(py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<AnyDevice> {
    if let Ok(i) = o.extract::<usize>() {
        return py.detach(|| gpuport::open(&format!("cuda:{i}"))).py_err(py);
    }
    Err(PyTypeError::new_err(format!(
        "device must be None, a Device, a spec such as \"host\" or \"cuda:0\", or a CUDA ordinal; got {}",
        o.get_type().name()?
    )))
}

/// The default device; the first call picks it without the GIL (it may load
/// vendor libraries), later ones take the kept choice with it.
pub fn default_device(py: Python<'_>) -> PyResult<AnyDevice> {
    static CHOSEN: OnceLock<AnyDevice> = OnceLock::new();
    if let Some(d) = CHOSEN.get() {
        return Ok(d.clone());
    }
    let d = py.detach(gpuport::dynamic::runtime::default_device).py_err(py)?;
    Ok(CHOSEN.get_or_init(|| d).clone())
}

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
pub struct PyDevice(pub AnyDevice, OnceLock<AllocTarget>);

/// What an allocation on a device's default stream needs, looked up once
/// per `Device` object ([`PyDevice::alloc_target`]).
pub struct AllocTarget {
    /// The device's default stream.
    pub stream: AnyStream,
    /// The device's resources (installed by the lookup).
    pub resources: AnyResources,
}

impl From<AnyDevice> for PyDevice {
    fn from(dev: AnyDevice) -> Self {
        PyDevice(dev, OnceLock::new())
    }
}

impl Clone for PyDevice {
    fn clone(&self) -> Self {
        PyDevice::from(self.0.clone())
    }
}

impl PyDevice {
    /// The default stream and resources of the device, looked up on the
    /// first call (which installs the memory resource, as [`resolve_device`]).
    pub fn alloc_target(&self, py: Python<'_>) -> PyResult<&AllocTarget> {
        if let Some(t) = self.1.get() {
            return Ok(t);
        }
        let resources = gpuport::dynamic::memory::resources_of_any(&self.0).py_err(py)?;
        let t = AllocTarget { stream: AnyStream::default_for(&self.0), resources };
        Ok(self.1.get_or_init(|| t))
    }
}

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

/// Where to place managed memory, from `None` (the memory's own device),
/// a name (`"device"`, `"host"`, `"cpu"`, or a device spec such as
/// `"cuda:1"`), an int (a CUDA ordinal) or a `Device`; the rule is the
/// core's ([`ManagedTarget`]).
pub fn managed_target(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<ManagedTarget> {
    let Some(o) = obj.filter(|o| !o.is_none()) else {
        return Ok(ManagedTarget::Own);
    };
    if let Ok(name) = o.extract::<String>() {
        return ManagedTarget::named(&name).py_err(py);
    }
    Ok(ManagedTarget::Device(open_device(py, Some(o))?))
}
