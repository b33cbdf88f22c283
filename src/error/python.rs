//! Errors as the Python package words them: the exception class each
//! [`Error`] raises, its message, and the `kind` it carries.
//!
//! `Display` speaks Rust: it names `Some(LockId(..))`, `exit()`,
//! `Location::Host`, Cargo features and `isize::MAX`, which a Python caller
//! can neither type nor use. Here the same errors are worded in the Python
//! API's terms (`with array.get_dlpack()`, `move_memory("host")`,
//! `Graph.replay()`), next to the errors themselves, as pydantic-core keeps
//! `message_template_python` beside each error type. The binding
//! (`crates/gpuport-py`) only converts: it raises the class that
//! [`Error::python_class`] names with [`Error::python_message`] and sets
//! [`Error::python_kind`].
//!
//! ```
//! use gpuport::error::python::ExceptionClass;
//! use gpuport::{BackendKind, Error};
//!
//! let e = Error::BackendNotCompiled { backend: BackendKind::Rocm, feature: "rocm" };
//! assert_eq!(e.python_class(), ExceptionClass::Unavailable);
//! assert_eq!(e.python_class().name(), "DeviceUnavailableError");
//! assert_eq!(
//!     e.python_message(None),
//!     "the rocm backend is not compiled into this gpuport build; install a gpuport package built with rocm support"
//! );
//! ```

use std::fmt;

use super::collective::ArgumentError;
use super::dlpack::DLPackError;
use super::memory::MemoryError;
use super::{BackendKind, CollectiveErrorKind, Error, GraphErrorKind};
use crate::error::array::{ImportRefusal, LockError, ShapeError};

/// The Python exception class an [`Error`] raises: one of the package's
/// classes (each a subclass of `gpuport.GpuError`), or one of the two
/// builtins the array API standard names for `__dlpack__`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExceptionClass {
    /// `GpuError(RuntimeError)`, the base of every gpuport class; raised for
    /// errors no subclass names (memory resources, the collective store).
    Gpu,
    /// `OutOfMemoryError(GpuError, MemoryError)`.
    OutOfMemory,
    /// `DeviceUnavailableError`: not compiled in, no library, or no device.
    Unavailable,
    /// `InvalidDeviceError(GpuError, ValueError)`: a bad device spec.
    InvalidDevice,
    /// `DeviceMismatchError(GpuError, ValueError)`.
    DeviceMismatch,
    /// `LockError`: a locked array accessed without its lock.
    Lock,
    /// `ResidencyError`: the needed copy of an array is not current.
    Residency,
    /// `ShapeError(GpuError, ValueError)`.
    Shape,
    /// `DLPackError(GpuError, BufferError)`.
    DLPack,
    /// `UnsupportedDTypeError(GpuError, TypeError)`; raised by the binding
    /// for dtypes it cannot name to the core.
    UnsupportedDType,
    /// `UnsupportedError(GpuError, NotImplementedError)`.
    Unsupported,
    /// `InvalidArgumentError(GpuError, ValueError)`.
    InvalidArgument,
    /// `DriverError`: a vendor call, or work on a host stream, failed.
    Driver,
    /// `KernelError`: compiling, finding or launching a kernel failed.
    Kernel,
    /// `GraphError`, with a `kind` ([`GraphErrorKind::name`]).
    Graph,
    /// `CollectiveError`, with a `kind` ([`CollectiveErrorKind::name`]).
    Collective,
    /// The builtin `ValueError`: a `stream` argument of `__dlpack__` that
    /// the memory's device does not accept.
    Value,
    /// The builtin `BufferError`: an export that cannot be made as asked.
    Buffer,
    /// The builtin `IndexError`: an index a `DeviceArray` does not have.
    Index,
    /// The builtin `OverflowError`: a `DeviceArray` shape past the address space.
    Overflow,
    /// The builtin `TypeError`: a `DeviceArray` without the axes a call needs.
    Type,
}

impl ExceptionClass {
    /// The class's Python name, e.g. `"OutOfMemoryError"`.
    pub fn name(self) -> &'static str {
        match self {
            ExceptionClass::Gpu => "GpuError",
            ExceptionClass::OutOfMemory => "OutOfMemoryError",
            ExceptionClass::Unavailable => "DeviceUnavailableError",
            ExceptionClass::InvalidDevice => "InvalidDeviceError",
            ExceptionClass::DeviceMismatch => "DeviceMismatchError",
            ExceptionClass::Lock => "LockError",
            ExceptionClass::Residency => "ResidencyError",
            ExceptionClass::Shape => "ShapeError",
            ExceptionClass::DLPack => "DLPackError",
            ExceptionClass::UnsupportedDType => "UnsupportedDTypeError",
            ExceptionClass::Unsupported => "UnsupportedError",
            ExceptionClass::InvalidArgument => "InvalidArgumentError",
            ExceptionClass::Driver => "DriverError",
            ExceptionClass::Kernel => "KernelError",
            ExceptionClass::Graph => "GraphError",
            ExceptionClass::Collective => "CollectiveError",
            ExceptionClass::Value => "ValueError",
            ExceptionClass::Buffer => "BufferError",
            ExceptionClass::Index => "IndexError",
            ExceptionClass::Overflow => "OverflowError",
            ExceptionClass::Type => "TypeError",
        }
    }

    /// The builtin exception every instance of this class also is, and so
    /// what code that catches only builtins catches it as: the class itself
    /// for `Value` and `Buffer`, a gpuport class's builtin base
    /// (`MemoryError` for `OutOfMemoryError`), else `RuntimeError`, the base
    /// of `GpuError`.
    ///
    /// ```
    /// use gpuport::error::python::ExceptionClass;
    ///
    /// assert_eq!(ExceptionClass::Shape.builtin(), "ValueError");
    /// assert_eq!(ExceptionClass::Lock.builtin(), "RuntimeError");
    /// ```
    pub fn builtin(self) -> &'static str {
        match self {
            ExceptionClass::OutOfMemory => "MemoryError",
            ExceptionClass::InvalidDevice
            | ExceptionClass::DeviceMismatch
            | ExceptionClass::Shape
            | ExceptionClass::InvalidArgument
            | ExceptionClass::Value => "ValueError",
            ExceptionClass::DLPack | ExceptionClass::Buffer => "BufferError",
            ExceptionClass::UnsupportedDType | ExceptionClass::Type => "TypeError",
            ExceptionClass::Index => "IndexError",
            ExceptionClass::Overflow => "OverflowError",
            ExceptionClass::Unsupported => "NotImplementedError",
            ExceptionClass::Gpu
            | ExceptionClass::Unavailable
            | ExceptionClass::Lock
            | ExceptionClass::Residency
            | ExceptionClass::Driver
            | ExceptionClass::Kernel
            | ExceptionClass::Graph
            | ExceptionClass::Collective => "RuntimeError",
        }
    }
}

impl GraphErrorKind {
    /// The `kind` of the Python `GraphError`, e.g. `"synchronous_call"`.
    pub fn name(self) -> &'static str {
        match self {
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
            GraphErrorKind::Capturing => "capturing",
            GraphErrorKind::NotCaptured => "not_captured",
        }
    }
}

impl CollectiveErrorKind {
    /// The `kind` of the Python `CollectiveError`, e.g. `"remote_failure"`.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveErrorKind::Library => "library",
            CollectiveErrorKind::Engine => "engine",
            CollectiveErrorKind::Mismatch => "mismatch",
            CollectiveErrorKind::Timeout => "timeout",
            CollectiveErrorKind::Aborted => "aborted",
            CollectiveErrorKind::RemoteFailure => "remote_failure",
            CollectiveErrorKind::PeerInitFailed { .. } => "peer_init_failed",
            CollectiveErrorKind::VersionMismatch { .. } => "version_mismatch",
        }
    }
}

impl Error {
    /// The Python exception class this error raises.
    pub fn python_class(&self) -> ExceptionClass {
        use ExceptionClass as C;
        match self {
            // The array API standard names these two for `__dlpack__`.
            Error::DLPack(DLPackError::BadStream { .. }) => C::Value,
            Error::DLPack(DLPackError::Refused { .. }) => C::Buffer,
            // No copy of the array lives where the DLPack device type says.
            Error::DLPack(DLPackError::NoCopyOn { .. }) => C::Unavailable,
            Error::DLPack(_) => C::DLPack,
            Error::DeviceArray(e) => e.builtin(),
            Error::OutOfMemory { .. } => C::OutOfMemory,
            Error::LibraryNotFound { .. } | Error::NoDevice { .. } | Error::BackendNotCompiled { .. } => C::Unavailable,
            Error::InvalidDeviceSpec { .. } => C::InvalidDevice,
            Error::DeviceMismatch { .. } => C::DeviceMismatch,
            Error::OutOfBounds { .. } | Error::InvalidArgument { .. } | Error::CollectiveArgument(_) => {
                C::InvalidArgument
            }
            Error::Unsupported { .. } => C::Unsupported,
            Error::NoKernel { .. } | Error::NoValueConversion { .. } => C::UnsupportedDType,
            Error::Compile { .. } | Error::KernelNotFound { .. } | Error::KernelArguments { .. } => C::Kernel,
            Error::Driver(_) | Error::HostTask(_) => C::Driver,
            Error::Shape(_) => C::Shape,
            Error::Lock(_) => C::Lock,
            Error::Residency(_) | Error::Import(_) => C::Residency,
            Error::Graph { .. } => C::Graph,
            Error::Collective { .. } => C::Collective,
            Error::Memory(_) | Error::Store { .. } => C::Gpu,
        }
    }

    /// The `kind` attribute of the Python exception: the rule a
    /// `GraphError` reports, or how a `CollectiveError` failed.
    pub fn python_kind(&self) -> Option<&'static str> {
        match self {
            Error::Graph { kind, .. } => Some(kind.name()),
            Error::Collective { kind, .. } => Some(kind.name()),
            _ => None,
        }
    }

    /// The message in Python's terms. `call` names the Python method that
    /// failed where the core names its own inner operation (a lock,
    /// residency or graph check); without it the core's operation is
    /// translated (`move_to` is `move_memory`). Errors with nothing
    /// Rust-specific in them keep their `Display` text.
    ///
    /// ```
    /// use gpuport::array::LockError;
    /// use gpuport::Error;
    ///
    /// let e = Error::from(LockError::WrongId { op: "move_to", held: 7, given: 9 });
    /// assert_eq!(
    ///     e.python_message(Some("to_numpy")),
    ///     "to_numpy: the get_dlpack block with lock id 9 does not hold the array; the block with lock id 7 does"
    /// );
    /// ```
    pub fn python_message(&self, call: Option<&str>) -> String {
        let op = |op: &'static str| call.unwrap_or(py_op(op)).to_string();
        match self {
            Error::Lock(LockError::Locked { op: o, held }) => format!(
                "{}: the array is locked by a `with array.get_dlpack()` block (lock id {held}), in this thread or \
                 another; inside that block use its context object (e.g. numpy.from_dlpack(ctx)), or call this after the block",
                op(o)
            ),
            Error::Lock(LockError::WrongId { op: o, held, given }) => format!(
                "{}: the get_dlpack block with lock id {given} does not hold the array; the block with lock id {held} does",
                op(o)
            ),
            Error::Lock(LockError::AlreadyLocked { held, .. }) => format!(
                "get_dlpack: the array is already locked by a `with array.get_dlpack()` block (lock id {held}); blocks on \
                 one array cannot nest or overlap, in one thread or several"
            ),
            Error::Lock(LockError::BlockEntered { id }) => {
                format!("this get_dlpack block (lock id {id}) is already entered; a context is entered once")
            }
            Error::Lock(LockError::BlockEnded { op: o, id }) => format!(
                "{o}: this get_dlpack block has ended (lock id {id}); call array.get_dlpack() again for a new block"
            ),
            Error::DLPack(DLPackError::BlockEnded { id }) => format!(
                "{}: this get_dlpack block has ended (lock id {id}); the array may have moved or changed since, \
                 so call array.get_dlpack() again (tensors taken inside the block stay valid)",
                call.unwrap_or("__dlpack__")
            ),
            Error::Lock(LockError::Busy { what }) => format!(
                "this {what} is busy in this thread: a call on it is still running and the Python code it ran \
                 (a callback such as __index__, __dlpack__ or __del__) called it again; call it after that call returns"
            ),
            Error::Residency(r) => format!(
                "{} needs the {} copy, but only the {} copy is current; call move_memory(\"{}\") first",
                op(r.op),
                r.needed,
                r.current,
                r.needed
            ),
            Error::Import(ImportRefusal::Move { op: o, at, to }) => format!(
                "{}: an imported array stays where its producer put it ({at}); move_memory(\"{to}\") is not possible",
                op(o)
            ),
            Error::Import(ImportRefusal::ProducerOnly { op: o }) => {
                format!("{} of an imported array: do it through its producer library", op(o))
            }
            Error::Import(ImportRefusal::NotCompactHost { op: o }) => {
                format!("{} needs compact host memory; the imported array is not", op(o))
            }
            Error::Memory(MemoryError::NotManaged { op: o, kind }) => format!(
                "{}: needs managed memory, and this is {kind} memory; create the array with \
                 MemArray(shape, dtype, device, memory=\"managed\") (raw memory: runtime.malloc_managed)",
                op(o)
            ),
            Error::NoValueConversion { op: o, dtype, itemsize, in_ml_dtypes } => format!(
                "{o}: NumPy has no dtype {dtype}{}; pass one element's {itemsize} byte(s) as bytes",
                if *in_ml_dtypes { " (install ml_dtypes to fill it from numbers)" } else { "" }
            ),
            Error::BackendNotCompiled { backend, .. } => format!(
                "the {backend} backend is not compiled into this gpuport build; install a gpuport package built with {backend} support"
            ),
            Error::Shape(ShapeError::TooLarge { shape, elem_size }) => format!(
                "shape {} of {elem_size}-byte elements is too large: the number of elements times the element size must be at most {} bytes",
                tuple(shape),
                i64::MAX
            ),
            Error::Shape(ShapeError::NotI64 { what, axis, value }) => {
                format!("{what} {value} on axis {axis} is too large: DLPack takes at most {}", i64::MAX)
            }
            Error::Shape(ShapeError::LengthMismatch { what, shape, expected, got }) => {
                format!("{}: shape {} has {expected} elements, but {got} were given", op(what), tuple(shape))
            }
            Error::Shape(ShapeError::ShapeMismatch { what, expected, found }) => format!(
                "{what}: shape {} differs from {}; the arrays must have the same shape",
                tuple(found),
                tuple(expected)
            ),
            Error::Shape(ShapeError::IndexOutOfBounds { index, shape }) => format!(
                "index {} is out of bounds for shape {}; each index must be below its extent",
                tuple(index),
                tuple(shape)
            ),
            Error::Shape(ShapeError::OutOfRange { extents, strides, reason }) => {
                format!("strided layout with extents {} and strides {} {reason}", tuple(extents), tuple(strides))
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
            Error::DLPack(DLPackError::NoCopyOn { device_type, device, device_copy }) => format!(
                "DLPack device type {device_type} is not where this array can live: it is on {device} (device copy: \
                 DLPack type {device_copy}, host copy: 1); use \"device\" for the device copy"
            ),
            Error::Graph { backend, op, kind, reason } => graph_message(*backend, op, *kind, reason, call),
            Error::CollectiveArgument(ArgumentError::HostMemory { what, device }) => format!(
                "{what} is host memory; a {device} communicator needs memory of its device: move the array there first \
                 (a MemArray of {device}: move_memory(\"device\"))"
            ),
            Error::CollectiveArgument(ArgumentError::NotHeld { what }) => format!(
                "{what}: the host communicator reads and writes host memory it can check; pass the array or buffer \
                 object (a raw address is not dereferenced)"
            ),
            other => other.to_string(),
        }
    }
}

impl Error {
    /// The message in Python's terms of an error that `call`, a call on a
    /// captured graph (`Graph.replay`, `Graph.launch`, `Graph.update`),
    /// raised: an operand of another device is said in the graph's terms
    /// (the graph was captured on the device expected); any other error is
    /// worded as [`python_message`](Self::python_message) words it for
    /// `call`.
    ///
    /// ```
    /// use gpuport::Error;
    ///
    /// let e = Error::DeviceMismatch { what: "stream", expected: "cuda:0".into(), found: "cuda:1".into() };
    /// assert_eq!(
    ///     e.python_message_of_graph_call("Graph.replay"),
    ///     "Graph.replay: the stream belongs to cuda:1, but this graph was captured on cuda:0; pass a stream of \
    ///      cuda:0 (None: its default stream)"
    /// );
    /// ```
    pub fn python_message_of_graph_call(&self, call: &str) -> String {
        match self {
            Error::DeviceMismatch { what, expected, found } => format!(
                "{call}: the {what} belongs to {found}, but this graph was captured on {expected}; pass a {what} of \
                 {expected}{}",
                if *what == "stream" { " (None: its default stream)" } else { "" }
            ),
            other => other.python_message(Some(call)),
        }
    }
}

/// A sequence as Python writes a tuple: `(2, 3)`, `(5,)`, `()`.
///
/// ```
/// use gpuport::error::python::tuple;
///
/// assert_eq!(tuple(&[2usize, 3]), "(2, 3)");
/// assert_eq!(tuple(&[-1i64]), "(-1,)");
/// assert_eq!(tuple::<i64>(&[]), "()");
/// ```
pub fn tuple<T: fmt::Display>(items: &[T]) -> String {
    match items {
        [x] => format!("({x},)"),
        _ => format!("({})", items.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// The Python name of an array operation the core names.
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

/// "the other graph" where a graph rule's reason is about the other
/// operand of `Graph.update`, else "the graph".
fn which_graph(reason: &str) -> &'static str {
    if reason.starts_with("the other graph") {
        "the other graph"
    } else {
        "the graph"
    }
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
        GraphErrorKind::SynchronousCall if reason.contains("wait for the whole device") => {
            let mode = ["Global", "ThreadLocal", "Relaxed"]
                .into_iter()
                .zip(["global", "thread_local", "relaxed"])
                .find(|(rust, _)| reason.contains(&format!("({rust} mode)")))
                .map_or("", |(_, python)| python);
            format!(
                "{call}: a graph capture (mode=\"{mode}\") is running on this GPU, and a wait for the whole device \
                 would invalidate it in every mode (CUDA and HIP refuse it); {leave}, or wait for the streams you \
                 need (Stream.synchronize) instead"
            )
        }
        GraphErrorKind::SynchronousCall => {
            let thread_local = reason.contains("ThreadLocal");
            format!(
                "{call}: a graph capture in mode=\"{}\" is running ({}), and this call would wait for the \
                 device or its default stream, which such a capture forbids{}; {leave}, or capture with \
                 mode=\"relaxed\" to allow waits outside the capturing stream",
                if thread_local { "thread_local" } else { "global" },
                if backend == BackendKind::Host { "on the host device" } else { "on a GPU: the rule spans every GPU" },
                if thread_local { " on the thread that began it" } else { " on every thread" }
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
        GraphErrorKind::Capturing if reason.contains("is still capturing") => {
            format!("{call}: {} is still capturing; {leave}", which_graph(reason))
        }
        GraphErrorKind::Capturing => format!("{call}: {reason}"),
        GraphErrorKind::NotCaptured if op == "exit_capture_block" => {
            format!("{call}: __exit__ without a running capture")
        }
        GraphErrorKind::NotCaptured => format!(
            "{call}: {} holds no captured work; capture first with `with g.capture(stream):` (a capture whose \
             block raised holds nothing)",
            which_graph(reason)
        ),
    }
}

/// Errors the binding forwards, of every family and most wordings above, for
/// the tests that check the wording speaks Python: this module's and the
/// binding's `_error_samples`, which raises each one. Each raises a subclass
/// of `GpuError` (neither builtin).
#[doc(hidden)]
pub fn samples() -> Vec<Error> {
    use crate::error::array::{Location, ResidencyError};
    let mut samples: Vec<Error> = vec![
        LockError::Locked { op: "move_to", held: 7 }.into(),
        LockError::WrongId { op: "to_dlpack", held: 7, given: 9 }.into(),
        LockError::AlreadyLocked { held: 7, requested: 9 }.into(),
        LockError::Busy { what: "MemArray" }.into(),
        LockError::BlockEntered { id: 7 }.into(),
        LockError::BlockEnded { op: "__enter__", id: 7 }.into(),
        DLPackError::BlockEnded { id: 7 }.into(),
        ResidencyError { op: "host_view", needed: Location::Host, current: Location::Device }.into(),
        Error::BackendNotCompiled { backend: BackendKind::Rocm, feature: "rocm" },
        ShapeError::TooLarge { shape: vec![1 << 40, 1 << 40], elem_size: 8 }.into(),
        ShapeError::NotI64 { what: "extent", axis: 1, value: 1 << 70 }.into(),
        ShapeError::LengthMismatch { what: "copy_from_slice", shape: vec![2, 3], expected: 6, got: 5 }.into(),
        ShapeError::ShapeMismatch { what: "x", expected: vec![2], found: vec![3] }.into(),
        ShapeError::IndexOutOfBounds { index: vec![4], shape: vec![3] }.into(),
        ShapeError::NegativeExtent { value: -1 }.into(),
        ShapeError::ExtentOutOfRange { given: "18446744073709551616".into() }.into(),
        ShapeError::InvalidSlice { op: "step", axis: 0, reason: "step 0 is not allowed".into() }.into(),
        ShapeError::OutOfRange { extents: vec![4], strides: vec![-1], reason: "reaches before the start".into() }
            .into(),
        DLPackError::NotContiguous { shape: vec![4, 4], strides: vec![1, 8] }.into(),
        DLPackError::ReadOnly.into(),
        DLPackError::LazyView { type_name: "Tensor".into(), bit: "conjugate", resolve: "resolve_conj()" }.into(),
        DLPackError::NoCopyOn { device_type: 2, device: "host".into(), device_copy: 1 }.into(),
        DLPackError::UnsupportedVersion { major: 2, minor: 0 }.into(),
        Error::Unsupported { op: "add_index", backend: BackendKind::Host, hint: None },
        Error::NoKernel { op: "add_index", dtype: "bool".into(), backend: BackendKind::Host },
        Error::NoValueConversion { op: "fill", dtype: "float8_e4m3fn".into(), itemsize: 1, in_ml_dtypes: true },
        Error::Unsupported { op: "add_index", backend: BackendKind::Host, hint: Some("use float32".into()) },
        Error::InvalidArgument { name: "shape", reason: "negative extent -1".into() },
        Error::OutOfBounds { what: "dst", offset: 0, len: 64, capacity: 16 },
        Error::OutOfMemory { backend: BackendKind::Cuda, ordinal: 0, bytes: 1 << 40 },
        Error::DeviceMismatch { what: "stream", expected: "cuda:0".into(), found: "host".into() },
        Error::InvalidDeviceSpec { spec: "tpu:0".into(), reason: "unknown backend \"tpu\"".into() },
        Error::NoDevice { backend: BackendKind::Cuda, reason: "no device".into() },
        Error::HostTask("a kernel panicked".into()),
        MemoryError::NotManaged { op: "prefetch", kind: "device".into() }.into(),
        ArgumentError::UnknownReduction("mean".into()).into(),
        ArgumentError::HostMemory { what: "send", device: "cuda:0".into() }.into(),
        ArgumentError::NotHeld { what: "recv" }.into(),
    ];
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
        (GraphErrorKind::Capturing, "replay", "the graph is still capturing; end the capture first"),
        (GraphErrorKind::NotCaptured, "replay", "the graph holds no captured work; capture first"),
    ] {
        samples.push(Error::Graph { backend: BackendKind::Host, op, kind, reason: reason.into() });
    }
    samples.extend([
        Error::KernelNotFound { name: "no_such_kernel".into(), available: "add_index".into() },
        Error::Driver(super::DriverError {
            backend: BackendKind::Cuda,
            call: "cuMemAlloc",
            code: 2,
            name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            message: "out of memory".into(),
        }),
        Error::Collective {
            engine: "host".into(),
            rank: Some(1),
            kind: CollectiveErrorKind::Mismatch,
            reason: "rank 0 called all_reduce, this rank broadcast".into(),
        },
    ]);
    samples
}

#[cfg(test)]
#[path = "python_tests.rs"]
mod tests;
