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
    pub graph: Py<PyType>,
    pub collective: Py<PyType>,
}

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
    let classes = build_classes(py)?;
    // Each GraphError sets its own `kind`; the class has one for type checkers.
    classes.graph.bind(py).setattr("kind", "")?;
    classes.collective.bind(py).setattr("kind", "")?;
    Ok(classes)
}

fn build_classes(py: Python<'_>) -> PyResult<Classes> {
    let gpu = make(
        py,
        None,
        ExceptionClass::Gpu,
        "Base class of every error gpuport raises (a RuntimeError).",
        r#"
>>> import gpuport
>>> try:
...     gpuport.Device("tpu:0")
... except gpuport.GpuError as e:
...     print(type(e).__name__, isinstance(e, RuntimeError))
InvalidDeviceError True
"#,
    )?;
    let g = Some(&gpu);
    Ok(Classes {
        out_of_memory: make(
            py,
            g,
            ExceptionClass::OutOfMemory,
            "The device (or host) has not enough free memory; freeing memory and retrying may help.",
            r#"
>>> import gpuport
>>> try:
...     gpuport.MemArray(1 << 50, "uint8", device="host")   # 1 PiB
... except MemoryError as e:
...     print(type(e).__name__)
OutOfMemoryError
"#,
        )?,
        unavailable: make(
            py,
            g,
            ExceptionClass::Unavailable,
            "A backend is not compiled in, its library could not be loaded, or it has no device.",
            r#"
>>> import gpuport
>>> def cuda_or_host():
...     try:
...         return gpuport.Device("cuda:0")
...     except gpuport.DeviceUnavailableError:   # no CUDA driver or GPU here
...         return gpuport.Device("host")
>>> cuda_or_host().backend in ("cuda", "host")
True
"#,
        )?,
        invalid_device: make(
            py,
            g,
            ExceptionClass::InvalidDevice,
            "A device spec could not be parsed or names a device that does not exist.",
            r#"
>>> import gpuport
>>> gpuport.Device("tpu:0")
Traceback (most recent call last):
gpuport.InvalidDeviceError: invalid device spec "tpu:0": unknown backend "tpu"; accepted: "host", "cuda[:N]", "rocm[:N]"
"#,
        )?,
        device_mismatch: make(
            py,
            g,
            ExceptionClass::DeviceMismatch,
            "Objects of two different devices were used together (a stream of cuda:1 for an array on cuda:0, \
             say).",
            r#"
>>> import gpuport
>>> issubclass(gpuport.DeviceMismatchError, ValueError)
True
"#,
        )?,
        lock: make(
            py,
            g,
            ExceptionClass::Lock,
            "A locked array (inside `with array.get_dlpack()`) was accessed without its lock, or an object was \
             called again from a callback of a call still running on it.",
            r#"
>>> import gpuport
>>> a = gpuport.MemArray(2, device="host")
>>> with a.get_dlpack() as ctx:
...     a.to_numpy()                    # inside the block, use ctx instead
Traceback (most recent call last):
gpuport.LockError: __dlpack__: the array is locked by a `with array.get_dlpack()` block ...
"#,
        )?,
        residency: make(
            py,
            g,
            ExceptionClass::Residency,
            "An operation needs the host or device copy of an array, and that copy is not current.",
            r#"
>>> import gpuport, numpy as np
>>> gpuport.from_dlpack(np.zeros(3)).copy()      # imported memory stays with its producer
Traceback (most recent call last):
gpuport.ResidencyError: copy of an imported array: do it through its producer library
"#,
        )?,
        shape: make(
            py,
            g,
            ExceptionClass::Shape,
            "A shape, index or rank was not accepted.",
            r#"
>>> import gpuport
>>> gpuport.MemArray((2, -1), device="host")
Traceback (most recent call last):
gpuport.ShapeError: extent -1 is negative; extents must be non-negative
"#,
        )?,
        dlpack: make(
            py,
            g,
            ExceptionClass::DLPack,
            "A DLPack tensor could not be imported or exported.",
            r#"
>>> import gpuport, numpy as np
>>> a = gpuport.MemArray(2, device="host")
>>> with a.get_dlpack() as ctx:
...     pass
>>> np.from_dlpack(ctx)                    # the block has ended
Traceback (most recent call last):
gpuport.DLPackError: __dlpack__: this get_dlpack block has ended ...
"#,
        )?,
        unsupported_dtype: make(
            py,
            g,
            ExceptionClass::UnsupportedDType,
            "The dtype is not one gpuport holds, or the operation has no kernel for it.",
            r#"
>>> import gpuport
>>> gpuport.MemArray(2, "bool", device="host").add_index()
Traceback (most recent call last):
gpuport.UnsupportedDTypeError: add_index has no kernel for bool; ...
"#,
        )?,
        unsupported: make(
            py,
            g,
            ExceptionClass::Unsupported,
            "The backend does not implement the operation.",
            r#"
>>> import gpuport.memory as gm
>>> gm.alloc(64, device="host").ipc_handle()     # IPC handles are a GPU driver's
Traceback (most recent call last):
gpuport.UnsupportedError: IPC memory handles is not supported by the host backend: ...
"#,
        )?,
        invalid_argument: make(
            py,
            g,
            ExceptionClass::InvalidArgument,
            "An argument is outside what the operation accepts.",
            r#"
>>> from gpuport import runtime as rt
>>> rt.malloc(0, device="host")
Traceback (most recent call last):
gpuport.InvalidArgumentError: invalid argument bytes: a zero-byte allocation was requested; sizes must be at least 1
"#,
        )?,
        driver: make(
            py,
            g,
            ExceptionClass::Driver,
            "A vendor driver or runtime call failed.",
            r#"
>>> import gpuport
>>> issubclass(gpuport.DriverError, gpuport.GpuError)
True
"#,
        )?,
        kernel: make(
            py,
            g,
            ExceptionClass::Kernel,
            "Compiling, finding or launching a kernel failed.",
            r#"
>>> from gpuport import runtime as rt
>>> rt.module_get_function(rt.module_load(device="host"), "no_such_kernel")
Traceback (most recent call last):
gpuport.KernelError: kernel "no_such_kernel" not found in module; available: ...
"#,
        )?,
        graph: make(
            py,
            g,
            ExceptionClass::Graph,
            "A rule of graph capture or replay was broken (a waiting call during a capture, a stream that cannot \
             be captured, an update with a graph of another shape...). `kind` names the rule: \"synchronous_call\", \
             \"already_capturing\", \"default_stream\", \"invalidated\", \"isolation\", \"captured_event\", \
             \"update_refused\", \"pool_allocation\", \"nested_launch\", \"wrong_thread\", \"not_capturable\", \
             \"capturing\" or \"not_captured\". The stream stays usable.",
            r#"
>>> import gpuport
>>> s = gpuport.Stream("host")
>>> with s.capture():
...     try:
...         s.synchronize()              # captured work runs only at replay
...     except gpuport.GraphError as e:
...         print(e.kind)
synchronous_call
"#,
        )?,
        collective: make(
            py,
            g,
            ExceptionClass::Collective,
            "A collective or a communicator of gpuport.distributed failed. `kind` says how: \"library\" (NCCL or \
             RCCL missing or too old), \"engine\" (a call of the engine failed), \"mismatch\" (the ranks called \
             different collectives, counts, types or roots), \"timeout\" (no progress in time; the communicator \
             was aborted), \"aborted\", \"remote_failure\" (another rank or the network failed), \
             \"peer_init_failed\" (another rank's initialisation failed; the message names it and says why) or \
             \"version_mismatch\" (another rank loaded another version of NCCL or RCCL; the message names both).",
            r#"
>>> import gpuport
>>> from gpuport import distributed as dist
>>> (comm,) = dist.init_all(["host"])
>>> comm.abort()
>>> try:
...     comm.synchronize(); comm.all_reduce(gpuport.asarray([1.0], device="host"))
... except gpuport.CollectiveError as e:
...     print(e.kind)
aborted
"#,
        )?,
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
        &c.graph,
        &c.collective,
    ] {
        let ty = ty.bind(m.py());
        m.add(ty.name()?, ty)?;
    }
    Ok(())
}

/// The Python class of `class` (the one table).
fn class_of<'py>(py: Python<'py>, c: &'static Classes, class: ExceptionClass) -> Bound<'py, PyType> {
    use pyo3::exceptions::{PyBufferError, PyIndexError, PyOverflowError, PyTypeError, PyValueError};
    let ty = match class {
        ExceptionClass::Value => return py.get_type::<PyValueError>(),
        ExceptionClass::Buffer => return py.get_type::<PyBufferError>(),
        ExceptionClass::Index => return py.get_type::<PyIndexError>(),
        ExceptionClass::Overflow => return py.get_type::<PyOverflowError>(),
        ExceptionClass::Type => return py.get_type::<PyTypeError>(),
        ExceptionClass::OutOfMemory => &c.out_of_memory,
        ExceptionClass::Unavailable => &c.unavailable,
        ExceptionClass::InvalidDevice => &c.invalid_device,
        ExceptionClass::DeviceMismatch => &c.device_mismatch,
        ExceptionClass::Lock => &c.lock,
        ExceptionClass::Residency => &c.residency,
        ExceptionClass::Shape => &c.shape,
        ExceptionClass::DLPack => &c.dlpack,
        ExceptionClass::UnsupportedDType => &c.unsupported_dtype,
        ExceptionClass::Unsupported => &c.unsupported,
        ExceptionClass::InvalidArgument => &c.invalid_argument,
        ExceptionClass::Driver => &c.driver,
        ExceptionClass::Kernel => &c.kernel,
        ExceptionClass::Graph => &c.graph,
        ExceptionClass::Collective => &c.collective,
        // `Gpu`, and a class the core adds before this binding makes it.
        _ => &c.gpu,
    };
    ty.bind(py).clone()
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
