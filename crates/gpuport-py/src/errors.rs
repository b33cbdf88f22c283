//! The exception classes and the one mapping from `gpuport::Error` to them.
//!
//! Some classes derive from two bases (`OutOfMemoryError(GpuError,
//! MemoryError)`), which PyO3's `create_exception!` cannot express, so they
//! are made once at import with `type(name, bases, namespace)` and kept in
//! a `PyOnceLock`.

use gpuport::{BackendKind, Error, GraphErrorKind};
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
    pub graph: Py<PyType>,
    pub collective: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

/// An exception class `name` of `bases` in module `gpuport`, whose docstring
/// is `summary` and then `example` (doctest lines) indented as a code block.
fn make(
    py: Python<'_>,
    name: &str,
    bases: Vec<Bound<'_, PyType>>,
    summary: &str,
    example: &str,
) -> PyResult<Py<PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__module__", "gpuport")?;
    ns.set_item("__doc__", with_example(summary, example))?;
    let bases = PyTuple::new(py, bases)?;
    let ty = py.import("builtins")?.getattr("type")?.call1((name, bases, ns))?;
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
        "GpuError",
        vec![py.get_type::<PyRuntimeError>()],
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
    let g = || gpu.bind(py).clone();
    Ok(Classes {
        out_of_memory: make(
            py,
            "OutOfMemoryError",
            vec![g(), py.get_type::<PyMemoryError>()],
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
            "DeviceUnavailableError",
            vec![g()],
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
            "InvalidDeviceError",
            vec![g(), py.get_type::<PyValueError>()],
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
            "DeviceMismatchError",
            vec![g(), py.get_type::<PyValueError>()],
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
            "LockError",
            vec![g()],
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
            "ResidencyError",
            vec![g()],
            "An operation needs the host or device copy of an array, and that copy is not current.",
            r#"
>>> import gpuport, numpy as np
>>> gpuport.from_dlpack(np.zeros(3)).copy()      # imported memory stays with its producer
Traceback (most recent call last):
gpuport.ResidencyError: copy() of an imported array: copy it in its producer library
"#,
        )?,
        shape: make(
            py,
            "ShapeError",
            vec![g(), py.get_type::<PyValueError>()],
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
            "DLPackError",
            vec![g(), py.get_type::<PyBufferError>()],
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
            "UnsupportedDTypeError",
            vec![g(), py.get_type::<PyTypeError>()],
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
            "UnsupportedError",
            vec![g(), py.get_type::<PyNotImplementedError>()],
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
            "InvalidArgumentError",
            vec![g(), py.get_type::<PyValueError>()],
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
            "DriverError",
            vec![g()],
            "A vendor driver or runtime call failed.",
            r#"
>>> import gpuport
>>> issubclass(gpuport.DriverError, gpuport.GpuError)
True
"#,
        )?,
        kernel: make(
            py,
            "KernelError",
            vec![g()],
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
            "GraphError",
            vec![g()],
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
            "CollectiveError",
            vec![g()],
            "A collective or a communicator of gpuport.distributed failed. `kind` says how: \"library\" (NCCL or \
             RCCL missing or too old), \"engine\" (a call of the engine failed), \"mismatch\" (the ranks called \
             different collectives, counts, types or roots), \"timeout\" (no progress in time; the communicator \
             was aborted), \"aborted\" or \"remote_failure\" (another rank or the network failed).",
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

fn raise(py: Python<'_>, pick: impl FnOnce(&Classes) -> &Py<PyType>, msg: String) -> PyErr {
    match classes(py) {
        Ok(c) => PyErr::from_type(pick(c).bind(py).clone(), msg),
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
    // The array API standard names these: a bad `stream` is a ValueError, an
    // export that cannot be made as asked a BufferError.
    match &e {
        Error::DLPack(gpuport::dlpack::DLPackError::BadStream { reason }) => {
            return pyo3::exceptions::PyValueError::new_err(reason.clone())
        }
        Error::DLPack(gpuport::dlpack::DLPackError::Refused { reason }) => {
            return pyo3::exceptions::PyBufferError::new_err(reason.clone())
        }
        _ => {}
    }
    let msg = message(&e, call);
    if let Error::Graph { kind, .. } = &e {
        return graph_error(py, graph_kind_name(*kind), msg);
    }
    if let Error::Collective { kind, .. } = &e {
        let err = raise(py, |c| &c.collective, msg);
        if let Err(e) = err.value(py).setattr("kind", collective_kind_name(*kind)) {
            return e;
        }
        return err;
    }
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

/// The `kind` a `CollectiveError` carries.
pub fn collective_kind_name(kind: gpuport::CollectiveErrorKind) -> &'static str {
    use gpuport::CollectiveErrorKind as K;
    match kind {
        K::Library => "library",
        K::Engine => "engine",
        K::Mismatch => "mismatch",
        K::Timeout => "timeout",
        K::Aborted => "aborted",
        K::RemoteFailure => "remote_failure",
        _ => "other",
    }
}

/// The `kind` a `GraphError` carries for a core graph rule.
pub fn graph_kind_name(kind: GraphErrorKind) -> &'static str {
    match kind {
        GraphErrorKind::SynchronousCall => "synchronous_call",
        GraphErrorKind::AlreadyCapturing => "already_capturing",
        GraphErrorKind::DefaultStream => "default_stream",
        GraphErrorKind::Invalidated => "invalidated",
        GraphErrorKind::Isolation => "isolation",
        GraphErrorKind::CapturedEvent => "captured_event",
        GraphErrorKind::UpdateRefused => "update_refused",
        GraphErrorKind::PoolAllocation => "pool_allocation",
        GraphErrorKind::OutOfMemory => "out_of_memory",
        GraphErrorKind::NestedLaunch => "nested_launch",
        GraphErrorKind::WrongThread => "wrong_thread",
        GraphErrorKind::NotCapturable => "not_capturable",
        _ => "other",
    }
}

/// A `GraphError` with `kind` set (the binding's own kinds: "capturing",
/// "not_captured"; the core's through [`graph_kind_name`]).
pub fn graph_error(py: Python<'_>, kind: &str, msg: String) -> PyErr {
    let err = raise(py, |c| &c.graph, msg);
    if let Err(e) = err.value(py).setattr("kind", kind) {
        return e;
    }
    err
}

/// The Python text of a graph rule broken by `call` (the core's `op` where
/// no call is named): what was wrong and what is accepted instead.
fn graph_message(backend: BackendKind, op: &str, kind: GraphErrorKind, reason: &str, call: Option<&str>) -> String {
    let call = call.unwrap_or(op);
    let leave = "leave the `with ... capture()` block first";
    match kind {
        GraphErrorKind::SynchronousCall if reason.starts_with("the stream is capturing") => format!(
            "{call}: the stream is capturing a graph, so its work has not run (it runs at each Graph.replay()) and \
             nothing can wait for it; {leave}, and enqueue only asynchronous work (launch_kernel, memcpy_async, \
             memset_async) on a capturing stream"
        ),
        GraphErrorKind::SynchronousCall => {
            let mode = if reason.contains("ThreadLocal") { "thread_local" } else { "global" };
            format!(
                "{call}: a graph capture in mode=\"{mode}\" is running ({}), and this call would wait for the \
                 device or its default stream, which such a capture forbids{}; {leave}, or capture with \
                 mode=\"relaxed\" to allow waits outside the capturing stream",
                if backend == BackendKind::Host { "on the host device" } else { "on a GPU: the rule spans every GPU" },
                if mode == "thread_local" { " on the thread that began it" } else { " on every thread" }
            )
        }
        GraphErrorKind::AlreadyCapturing => format!(
            "{call}: the stream is already capturing into another graph; a stream captures one graph at a time: \
             {leave}, or capture on another gpuport.Stream"
        ),
        GraphErrorKind::DefaultStream => format!(
            "{call}: the device's default stream cannot be captured (CUDA and HIP refuse it); capture on a stream \
             made by gpuport.Stream(device), or pass stream=None to Graph.capture() to have one made"
        ),
        GraphErrorKind::Invalidated => format!(
            "{call}: the capture was invalidated ({reason}) and what it recorded is discarded; the stream is usable \
             again: capture again"
        ),
        GraphErrorKind::Isolation => {
            format!("{call}: {reason}; inside a capture, wait only for events recorded inside the same capture")
        }
        GraphErrorKind::CapturedEvent => format!(
            "{call}: the event was recorded inside a graph capture, so it is recorded only when the graph replays; \
             wait for it after Graph.replay(), or wait for the stream the graph replays on"
        ),
        GraphErrorKind::UpdateRefused => format!(
            "{call}: the graphs differ in shape ({reason}); update takes a re-capture of the same work (the same \
             kernels, copies and memsets in the same order) with new arguments; capture a new Graph for other work"
        ),
        GraphErrorKind::PoolAllocation => format!(
            "{call}: the stream is capturing, and this runtime cannot say which capture ({reason}), so the caching \
             pool cannot give the capture memory of its own; allocate before the capture (gpuport.runtime.malloc) \
             and keep the memory as long as the graph"
        ),
        GraphErrorKind::OutOfMemory => format!(
            "{call}: out of memory inside a graph capture ({reason}); the capture is still running: end it (leave \
             the `with ... capture()` block) or free memory held outside it"
        ),
        GraphErrorKind::NestedLaunch => format!(
            "{call}: on the {backend} backend a graph cannot be replayed into a capturing stream; replay it after \
             the capture ends, or on another stream"
        ),
        GraphErrorKind::WrongThread => format!(
            "{call}: the capture was begun on another thread, and a capture in mode \"global\" or \"thread_local\" \
             ends on the thread that began it (it keeps running until then); capture with mode=\"relaxed\" to end \
             it from any thread"
        ),
        GraphErrorKind::NotCapturable => format!("{call}: {reason}"),
        _ => format!("{call}: {reason}"),
    }
}

/// A shape as Python writes a tuple: `(2, 3)`, `(5,)`, `()`.
pub fn py_shape(shape: &[usize]) -> String {
    match shape {
        [x] => format!("({x},)"),
        _ => format!("({})", shape.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// `(1, 2)` for a slice of ints.
pub fn py_tuple(v: &[i64]) -> String {
    match v {
        [x] => format!("({x},)"),
        _ => format!("({})", v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// The Python name of an array operation the Rust core names.
fn py_op(op: &str) -> &str {
    match op {
        "move_to" => "move_memory",
        "clone" => "copy",
        "copy_from_slice" => "read_numpy_array",
        "kernel" => "add_index",
        "to_dlpack" | "host_view" | "device_view" => "the export",
        "host_ptr" | "host_ptr_mut" | "device_ptr" | "device_ptr_mut" => "the export of an address",
        "get" | "as_slice" => "a read",
        "set" | "as_mut_slice" | "fill" => "a write",
        other => other,
    }
}

/// The message of a gpuport error, in Python's terms: the core's texts name
/// Rust things (`Some(LockId(..))`, `exit()`, `Location::Host`, Cargo
/// features, `isize::MAX`), which a Python caller can neither type nor use.
pub fn message(e: &Error, call: Option<&str>) -> String {
    use gpuport::array::{LockError, ShapeError};
    use gpuport::dlpack::DLPackError;
    const MAX: u64 = i64::MAX as u64;
    let py_op = |op: &'static str| call.unwrap_or(py_op(op)).to_string();
    let tuple = |v: &[i64]| py_tuple(v);
    match e {
        Error::Lock(LockError::Locked { op, held }) => format!(
            "{}: the array is locked by a `with array.get_dlpack()` block (lock id {held}), in this thread or \
             another; inside that block use its context object (e.g. numpy.from_dlpack(ctx)), or call this after the block",
            py_op(op)
        ),
        Error::Lock(LockError::WrongId { op, held, given }) => format!(
            "{}: the get_dlpack block with lock id {given} does not hold the array; the block with lock id {held} does",
            py_op(op)
        ),
        Error::Lock(LockError::AlreadyLocked { held, .. }) => format!(
            "get_dlpack: the array is already locked by a `with array.get_dlpack()` block (lock id {held}); blocks on \
             one array cannot nest or overlap, in one thread or several"
        ),
        Error::Residency(r) => format!(
            "{} needs the {} copy, but only the {} copy is current; call move_memory(\"{}\") first",
            py_op(r.op),
            r.needed,
            r.current,
            r.needed
        ),
        Error::BackendNotCompiled { backend, .. } => format!(
            "the {backend} backend is not compiled into this gpuport build; install a gpuport package built with {backend} support"
        ),
        Error::Shape(ShapeError::TooLarge { shape, elem_size }) => format!(
            "shape {} of {elem_size}-byte elements is too large: the number of elements times the element size must be at most {MAX} bytes",
            py_shape(shape)
        ),
        Error::Shape(ShapeError::NotI64 { what, axis, value }) => {
            format!("{what} {value} on axis {axis} is too large: DLPack takes at most {MAX}")
        }
        Error::Shape(ShapeError::LengthMismatch { what, shape, expected, got }) => format!(
            "{}: shape {} has {expected} elements, but {got} were given",
            py_op(what),
            py_shape(shape)
        ),
        Error::Shape(ShapeError::ShapeMismatch { what, expected, found }) => format!(
            "{what}: shape {} differs from {}; the arrays must have the same shape",
            py_shape(found),
            py_shape(expected)
        ),
        Error::Shape(ShapeError::IndexOutOfBounds { index, shape }) => format!(
            "index {} is out of bounds for shape {}; each index must be below its extent",
            py_shape(index),
            py_shape(shape)
        ),
        Error::Shape(ShapeError::OutOfRange { extents, strides, reason }) => {
            let strides: Vec<i64> = strides.iter().map(|&s| s as i64).collect();
            format!(
                "strided layout with extents {} and strides {} {reason}",
                py_shape(extents),
                py_tuple(&strides)
            )
        }
        Error::OutOfBounds { what, offset, len, capacity } => {
            format!("{what}: {len} bytes at offset {offset} reach past the end of a buffer of {capacity} bytes")
        }
        Error::DLPack(DLPackError::NotContiguous { shape, strides }) => format!(
            "DLPack tensor with shape {} and strides {} (elements) is not compact row-major; export a contiguous copy",
            tuple(shape),
            tuple(strides)
        ),
        Error::DLPack(DLPackError::Overflow { shape, strides, byte_offset }) => format!(
            "DLPack tensor shape {} with strides {} and byte offset {byte_offset} overflows the address space",
            tuple(shape),
            tuple(strides)
        ),
        Error::Graph { backend, op, kind, reason } => graph_message(*backend, op, *kind, reason, call),
        other => other.to_string(),
    }
}

/// Every core error the binding forwards, as `(class, message)`: for tests
/// that check the messages speak Python.
#[pyfunction]
pub fn _error_samples(py: Python<'_>) -> PyResult<Vec<(Py<PyType>, String)>> {
    use gpuport::array::Location;
    use gpuport::array::{LockError, ResidencyError, ShapeError};
    use gpuport::dlpack::DLPackError;
    let samples: Vec<Error> = vec![
        LockError::Locked { op: "move_to", held: 7 }.into(),
        LockError::WrongId { op: "to_dlpack", held: 7, given: 9 }.into(),
        LockError::AlreadyLocked { held: 7, requested: 9 }.into(),
        ResidencyError { op: "host_view", needed: Location::Host, current: Location::Device }.into(),
        Error::BackendNotCompiled { backend: BackendKind::Rocm, feature: "rocm" },
        ShapeError::TooLarge { shape: vec![1 << 40, 1 << 40], elem_size: 8 }.into(),
        ShapeError::NotI64 { what: "extent", axis: 1, value: 1 << 70 }.into(),
        ShapeError::LengthMismatch { what: "copy_from_slice", shape: vec![2, 3], expected: 6, got: 5 }.into(),
        ShapeError::ShapeMismatch { what: "x", expected: vec![2], found: vec![3] }.into(),
        ShapeError::IndexOutOfBounds { index: vec![4], shape: vec![3] }.into(),
        ShapeError::InvalidSlice { op: "step", axis: 0, reason: "step 0 is not allowed".into() }.into(),
        ShapeError::OutOfRange { extents: vec![4], strides: vec![-1], reason: "reaches before the start".into() }
            .into(),
        DLPackError::NotContiguous { shape: vec![4, 4], strides: vec![1, 8] }.into(),
        DLPackError::ReadOnly.into(),
        DLPackError::UnsupportedVersion { major: 2, minor: 0 }.into(),
        Error::Unsupported { op: "add_index", backend: BackendKind::Host, hint: None },
        Error::Unsupported { op: "add_index", backend: BackendKind::Host, hint: Some("use float32".into()) },
        Error::InvalidArgument { name: "shape", reason: "negative extent -1".into() },
        Error::OutOfBounds { what: "dst", offset: 0, len: 64, capacity: 16 },
        Error::OutOfMemory { backend: BackendKind::Cuda, ordinal: 0, bytes: 1 << 40 },
        Error::DeviceMismatch { what: "stream", expected: "cuda:0".into(), found: "host".into() },
        Error::InvalidDeviceSpec { spec: "tpu:0".into(), reason: "unknown backend \"tpu\"".into() },
        Error::NoDevice { backend: BackendKind::Cuda, reason: "no device".into() },
        Error::HostTask("a kernel panicked".into()),
    ];
    let mut samples = samples;
    for (kind, op, reason) in [
        (
            GraphErrorKind::SynchronousCall,
            "synchronize",
            "the stream is capturing (Active): its work has not run and will run only when the graph is launched",
        ),
        (
            GraphErrorKind::SynchronousCall,
            "synchronize_device",
            "a capture in ThreadLocal mode is running on host:0; end the capture first, or capture in CaptureMode::Relaxed",
        ),
        (GraphErrorKind::AlreadyCapturing, "begin_capture", "the stream is already capturing"),
        (GraphErrorKind::DefaultStream, "begin_capture", "capture a stream made by create_stream"),
        (GraphErrorKind::Invalidated, "end_capture", "the capture was invalidated: an earlier error"),
        (GraphErrorKind::Isolation, "wait_event", "waiting inside a capture for an event recorded outside it"),
        (GraphErrorKind::CapturedEvent, "synchronize_event", "recorded only when the graph runs"),
        (GraphErrorKind::UpdateRefused, "update", "the graph has 3 nodes, this one 2"),
        (GraphErrorKind::PoolAllocation, "alloc", "hipStreamGetCaptureInfo_v2 is missing"),
        (GraphErrorKind::OutOfMemory, "alloc", "the capture's graph pool could not grow by 1048576 bytes"),
        (GraphErrorKind::NestedLaunch, "launch", "not captured"),
        (GraphErrorKind::WrongThread, "end_capture", "CaptureMode::Global"),
        (GraphErrorKind::NotCapturable, "add_index", "MemArray operations are not captured"),
    ] {
        samples.push(Error::Graph { backend: BackendKind::Host, op, kind, reason: reason.into() });
    }
    samples
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

/// A `DeviceMismatchError`.
pub fn device_mismatch(py: Python<'_>, msg: String) -> PyErr {
    raise(py, |c| &c.device_mismatch, msg)
}

/// A `LockError`.
pub fn lock(py: Python<'_>, msg: String) -> PyErr {
    raise(py, |c| &c.lock, msg)
}

/// A `ResidencyError`.
pub fn residency(py: Python<'_>, msg: String) -> PyErr {
    raise(py, |c| &c.residency, msg)
}
