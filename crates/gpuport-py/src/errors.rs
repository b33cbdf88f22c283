//! The exception classes and the one mapping from `gpuport::Error` to them.
//!
//! Some classes derive from two bases (`OutOfMemoryError(GpuError,
//! MemoryError)`), which PyO3's `create_exception!` cannot express, so they
//! are made once at import with `type(name, bases, namespace)` and kept in
//! a `PyOnceLock`.

use gpuport::Error;
use pyo3::exceptions::{
    PyBufferError, PyMemoryError, PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The exception classes, made once per interpreter.
pub struct Classes {
    pub gpu: Py<PyType>,
    pub out_of_memory: Py<PyType>,
    pub unavailable: Py<PyType>,
    pub invalid_device: Py<PyType>,
    pub device_mismatch: Py<PyType>,
    pub lock: Py<PyType>,
    pub residency: Py<PyType>,
    pub shape: Py<PyType>,
    pub dlpack: Py<PyType>,
    pub unsupported_dtype: Py<PyType>,
    pub unsupported: Py<PyType>,
    pub invalid_argument: Py<PyType>,
    pub driver: Py<PyType>,
    pub kernel: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn make(py: Python<'_>, name: &str, bases: Vec<Bound<'_, PyType>>, doc: &str) -> PyResult<Py<PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__module__", "gpuport")?;
    ns.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, bases)?;
    let ty = py.import("builtins")?.getattr("type")?.call1((name, bases, ns))?;
    Ok(ty.cast_into::<PyType>()?.unbind())
}

fn build(py: Python<'_>) -> PyResult<Classes> {
    let gpu = make(
        py,
        "GpuError",
        vec![py.get_type::<PyRuntimeError>()],
        "Base class of every error gpuport raises (a RuntimeError).",
    )?;
    let g = || gpu.bind(py).clone();
    Ok(Classes {
        out_of_memory: make(
            py,
            "OutOfMemoryError",
            vec![g(), py.get_type::<PyMemoryError>()],
            "The device (or host) has not enough free memory; freeing memory and retrying may help.",
        )?,
        unavailable: make(
            py,
            "DeviceUnavailableError",
            vec![g()],
            "A backend is not compiled in, its library could not be loaded, or it has no device.",
        )?,
        invalid_device: make(
            py,
            "InvalidDeviceError",
            vec![g(), py.get_type::<PyValueError>()],
            "A device spec could not be parsed or names a device that does not exist.",
        )?,
        device_mismatch: make(
            py,
            "DeviceMismatchError",
            vec![g(), py.get_type::<PyValueError>()],
            "Objects of two different devices were used together.",
        )?,
        lock: make(
            py,
            "LockError",
            vec![g()],
            "A locked array (inside `with array.get_dlpack()`) was accessed without its lock.",
        )?,
        residency: make(
            py,
            "ResidencyError",
            vec![g()],
            "An operation needs the host or device copy of an array, and that copy is not current.",
        )?,
        shape: make(
            py,
            "ShapeError",
            vec![g(), py.get_type::<PyValueError>()],
            "A shape, index or rank was not accepted.",
        )?,
        dlpack: make(
            py,
            "DLPackError",
            vec![g(), py.get_type::<PyBufferError>()],
            "A DLPack tensor could not be imported or exported.",
        )?,
        unsupported_dtype: make(
            py,
            "UnsupportedDTypeError",
            vec![g(), py.get_type::<PyTypeError>()],
            "The dtype is not one gpuport holds, or the operation has no kernel for it.",
        )?,
        unsupported: make(
            py,
            "UnsupportedError",
            vec![g(), py.get_type::<PyNotImplementedError>()],
            "The backend does not implement the operation.",
        )?,
        invalid_argument: make(
            py,
            "InvalidArgumentError",
            vec![g(), py.get_type::<PyValueError>()],
            "An argument is outside what the operation accepts.",
        )?,
        driver: make(py, "DriverError", vec![g()], "A vendor driver or runtime call failed.")?,
        kernel: make(py, "KernelError", vec![g()], "Compiling, finding or launching a kernel failed.")?,
        gpu,
    })
}

/// The classes (made on first use; `lib.rs` makes them at import).
pub fn classes(py: Python<'_>) -> PyResult<&'static Classes> {
    CLASSES.get_or_try_init(py, || build(py))
}

/// Adds every class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let c = classes(m.py())?;
    for ty in [
        &c.gpu,
        &c.out_of_memory,
        &c.unavailable,
        &c.invalid_device,
        &c.device_mismatch,
        &c.lock,
        &c.residency,
        &c.shape,
        &c.dlpack,
        &c.unsupported_dtype,
        &c.unsupported,
        &c.invalid_argument,
        &c.driver,
        &c.kernel,
    ] {
        let ty = ty.bind(m.py());
        m.add(ty.name()?, ty)?;
    }
    Ok(())
}

fn raise(py: Python<'_>, pick: impl FnOnce(&Classes) -> &Py<PyType>, msg: String) -> PyErr {
    match classes(py) {
        Ok(c) => PyErr::from_type(pick(c).bind(py).clone(), msg),
        Err(e) => e,
    }
}

/// The Python exception for a gpuport error (the one mapping).
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    let pick: fn(&Classes) -> &Py<PyType> = match &e {
        Error::OutOfMemory { .. } => |c| &c.out_of_memory,
        Error::LibraryNotFound { .. } | Error::NoDevice { .. } | Error::BackendNotCompiled { .. } => |c| &c.unavailable,
        Error::InvalidDeviceSpec { .. } => |c| &c.invalid_device,
        Error::DeviceMismatch { .. } => |c| &c.device_mismatch,
        Error::OutOfBounds { .. } | Error::InvalidArgument { .. } => |c| &c.invalid_argument,
        Error::Unsupported { .. } => |c| &c.unsupported,
        Error::Compile { .. } | Error::KernelNotFound { .. } | Error::KernelArguments { .. } => |c| &c.kernel,
        Error::Driver(_) | Error::HostTask(_) => |c| &c.driver,
        Error::Shape(_) => |c| &c.shape,
        Error::Lock(_) => |c| &c.lock,
        Error::Residency(_) => |c| &c.residency,
        Error::DLPack(_) => |c| &c.dlpack,
        _ => |c| &c.gpu,
    };
    raise(py, pick, msg)
}

/// `Result<T, gpuport::Error>` to `PyResult<T>`.
pub trait IntoPyResult<T> {
    /// Maps the error through [`to_py`].
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for gpuport::Result<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// An `UnsupportedDTypeError`.
pub fn unsupported_dtype(py: Python<'_>, msg: String) -> PyErr {
    raise(py, |c| &c.unsupported_dtype, msg)
}

/// A `ShapeError`.
pub fn shape(py: Python<'_>, msg: String) -> PyErr {
    raise(py, |c| &c.shape, msg)
}

/// A `DLPackError` (also a `BufferError`).
pub fn dlpack(py: Python<'_>, msg: String) -> PyErr {
    raise(py, |c| &c.dlpack, msg)
}

/// A `DeviceUnavailableError`.
pub fn unavailable(py: Python<'_>, msg: String) -> PyErr {
    raise(py, |c| &c.unavailable, msg)
}

/// A `LockError`.
pub fn lock(py: Python<'_>, msg: String) -> PyErr {
    raise(py, |c| &c.lock, msg)
}

/// A `ResidencyError`.
pub fn residency(py: Python<'_>, msg: String) -> PyErr {
    raise(py, |c| &c.residency, msg)
}
