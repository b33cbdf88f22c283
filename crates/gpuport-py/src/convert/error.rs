//! The exception classes and the one mapping from `gpuport::Error` to them.
//!
//! The core decides which class an error raises, its message and its `kind`
//! (`gpuport::error::python`); this file makes the classes and converts.
//! Some classes derive from two bases (`OutOfMemoryError(GpuError,
//! MemoryError)`), which PyO3's `create_exception!` cannot express, so they
//! are made once at import with `type(name, bases, namespace)` and kept in
//! a `PyOnceLock`.

use gpuport::error::python::{self, ExceptionClass};
use gpuport::Error;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// gpuport's own exception classes, made once per interpreter: one per
/// [`ExceptionClass::GPUPORT`] entry, in its order (`GpuError` first).
pub struct Classes(Vec<(ExceptionClass, Py<PyType>)>);

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

/// The class `class` in module `gpuport`, named and based as the core says:
/// on `gpu` (`GpuError`; none for `GpuError` itself) and on the builtin the
/// core names where `gpu` is not one already. Its docstring is `summary` and
/// then `example` (doctest lines) indented as a code block.
fn make(
    py: Python<'_>,
    gpu: Option<&Py<PyType>>,
    class: ExceptionClass,
    summary: &str,
    example: &str,
) -> PyResult<Py<PyType>> {
    let builtins = py.import("builtins")?;
    let builtin = builtins.getattr(class.builtin())?;
    let bases = match gpu {
        None => vec![builtin],
        // `RuntimeError` is already `GpuError`'s base.
        Some(gpu) if class.builtin() == "RuntimeError" => vec![gpu.bind(py).clone().into_any()],
        Some(gpu) => vec![gpu.bind(py).clone().into_any(), builtin],
    };
    let ns = PyDict::new(py);
    ns.set_item("__module__", "gpuport")?;
    ns.set_item("__doc__", with_example(summary, example))?;
    let bases = PyTuple::new(py, bases)?;
    let ty = builtins.getattr("type")?.call1((class.name(), bases, ns))?;
    Ok(ty.cast_into::<PyType>()?.unbind())
}

/// `summary`, a blank line, and each line of `example` indented by four spaces.
fn with_example(summary: &str, example: &str) -> String {
    let mut doc = format!("{summary}\n\n");
    for line in example.trim_matches('\n').lines() {
        doc.push_str("    ");
        doc.push_str(line);
        doc.push('\n');
    }
    doc
}

fn build(py: Python<'_>) -> PyResult<Classes> {
    let mut made: Vec<(ExceptionClass, Py<PyType>)> = Vec::new();
    for class in ExceptionClass::GPUPORT {
        let (summary, example) = class.doc().unwrap_or_default();
        let gpu = made.first().map(|(_, ty)| ty);
        let ty = make(py, gpu, class, summary, example)?;
        // Each GraphError and CollectiveError sets its own `kind`; the
        // class has one for type checkers.
        if matches!(class, ExceptionClass::Graph | ExceptionClass::Collective) {
            ty.bind(py).setattr("kind", "")?;
        }
        made.push((class, ty));
    }
    Ok(Classes(made))
}

/// The classes (made on first use; `lib.rs` makes them at import).
pub fn classes(py: Python<'_>) -> PyResult<&'static Classes> {
    CLASSES.get_or_try_init(py, || build(py))
}

/// Adds every class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for (_, ty) in &classes(m.py())?.0 {
        let ty = ty.bind(m.py());
        m.add(ty.name()?, ty)?;
    }
    Ok(())
}

/// The Python class of `class`: a builtin, or one of gpuport's own
/// (`GpuError` for a class the core adds before this binding makes it).
fn class_of<'py>(py: Python<'py>, c: &'static Classes, class: ExceptionClass) -> Bound<'py, PyType> {
    use pyo3::exceptions::{PyBufferError, PyIndexError, PyOverflowError, PyTypeError, PyValueError};
    match class {
        ExceptionClass::Value => py.get_type::<PyValueError>(),
        ExceptionClass::Buffer => py.get_type::<PyBufferError>(),
        ExceptionClass::Index => py.get_type::<PyIndexError>(),
        ExceptionClass::Overflow => py.get_type::<PyOverflowError>(),
        ExceptionClass::Type => py.get_type::<PyTypeError>(),
        _ => {
            let own = c.0.iter().find(|(k, _)| *k == class).unwrap_or(&c.0[0]);
            own.1.bind(py).clone()
        }
    }
}

fn raise(py: Python<'_>, class: ExceptionClass, msg: String) -> PyErr {
    match classes(py) {
        Ok(c) => PyErr::from_type(class_of(py, c, class), msg),
        Err(e) => e,
    }
}

/// `err` with its `kind` attribute set.
fn with_kind(py: Python<'_>, err: PyErr, kind: &str) -> PyErr {
    match err.value(py).setattr("kind", kind) {
        Ok(()) => err,
        Err(e) => e,
    }
}

/// The Python exception for a gpuport error (the one mapping).
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    to_py_in(py, e, None)
}

/// As [`to_py`], naming `call` (the Python method that failed) where the
/// core names its own inner operation (a lock or residency check).
pub fn to_py_in(py: Python<'_>, e: Error, call: Option<&str>) -> PyErr {
    let msg = e.python_message(call);
    raise_as(py, &e, msg)
}

/// As [`to_py_in`], for `call` on a captured graph: worded by
/// [`Error::python_message_of_graph_call`].
pub fn to_py_graph_call(py: Python<'_>, e: Error, call: &str) -> PyErr {
    let msg = e.python_message_of_graph_call(call);
    raise_as(py, &e, msg)
}

/// `e`'s exception class and kind, with the message `msg`.
fn raise_as(py: Python<'_>, e: &Error, msg: String) -> PyErr {
    let err = raise(py, e.python_class(), msg);
    match e.python_kind() {
        Some(kind) => with_kind(py, err, kind),
        None => err,
    }
}

/// Every core error the binding forwards, as `(class, message)`: for tests
/// that check the messages speak Python.
#[pyfunction]
pub fn _error_samples(py: Python<'_>) -> PyResult<Vec<(Py<PyType>, String)>> {
    python::samples()
        .into_iter()
        .map(|e| {
            let err = to_py(py, e);
            let msg = err.value(py).str()?.to_string();
            Ok((err.get_type(py).unbind(), msg))
        })
        .collect()
}

/// `Result<T, gpuport::Error>` to `PyResult<T>`.
pub trait IntoPyResult<T> {
    /// Maps the error through [`to_py`].
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
    /// Maps the error through [`to_py_in`], naming the Python method `call`.
    fn py_err_in(self, py: Python<'_>, call: &str) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for gpuport::Result<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
    fn py_err_in(self, py: Python<'_>, call: &str) -> PyResult<T> {
        self.map_err(|e| to_py_in(py, e, Some(call)))
    }
}

/// An `UnsupportedDTypeError`.
pub fn unsupported_dtype(py: Python<'_>, msg: String) -> PyErr {
    raise(py, ExceptionClass::UnsupportedDType, msg)
}

/// A `ShapeError`.
pub fn shape(py: Python<'_>, msg: String) -> PyErr {
    raise(py, ExceptionClass::Shape, msg)
}

/// The exception for a stream argument that names no stream (its class and
/// wording are the core's).
pub fn stream_arg(py: Python<'_>, e: gpuport::dynamic::stream_protocol::StreamArgError) -> PyErr {
    raise(py, e.python_class(), e.to_string())
}

/// A `DLPackError` (also a `BufferError`).
pub fn dlpack(py: Python<'_>, msg: String) -> PyErr {
    raise(py, ExceptionClass::DLPack, msg)
}

/// A `DeviceUnavailableError`.
pub fn unavailable(py: Python<'_>, msg: String) -> PyErr {
    raise(py, ExceptionClass::Unavailable, msg)
}

/// A `DeviceMismatchError`.
pub fn device_mismatch(py: Python<'_>, msg: String) -> PyErr {
    raise(py, ExceptionClass::DeviceMismatch, msg)
}

/// A `LockError`.
pub fn lock(py: Python<'_>, msg: String) -> PyErr {
    raise(py, ExceptionClass::Lock, msg)
}

/// A `ResidencyError`.
pub fn residency(py: Python<'_>, msg: String) -> PyErr {
    raise(py, ExceptionClass::Residency, msg)
}
