//! The docstrings of gpuport's own Python exception classes: what a
//! binding shows in `help(gpuport.ShapeError)`, each with a doctest. The
//! classes, their names and bases are in [`super::python`]; a binding
//! makes one class per entry of [`ExceptionClass::GPUPORT`].

use super::python::ExceptionClass;

impl ExceptionClass {
    /// gpuport's own classes, `GpuError` (the base of the others) first.
    ///
    /// ```
    /// use gpuport::error::python::ExceptionClass;
    ///
    /// assert_eq!(ExceptionClass::GPUPORT[0], ExceptionClass::Gpu);
    /// assert!(ExceptionClass::GPUPORT.iter().all(|c| c.doc().is_some()));
    /// assert_eq!(ExceptionClass::Value.doc(), None); // a builtin: Python documents it
    /// ```
    pub const GPUPORT: [ExceptionClass; 16] = [
        ExceptionClass::Gpu,
        ExceptionClass::OutOfMemory,
        ExceptionClass::Unavailable,
        ExceptionClass::InvalidDevice,
        ExceptionClass::DeviceMismatch,
        ExceptionClass::Lock,
        ExceptionClass::Residency,
        ExceptionClass::Shape,
        ExceptionClass::DLPack,
        ExceptionClass::UnsupportedDType,
        ExceptionClass::Unsupported,
        ExceptionClass::InvalidArgument,
        ExceptionClass::Driver,
        ExceptionClass::Kernel,
        ExceptionClass::Graph,
        ExceptionClass::Collective,
    ];

    /// The docstring of one of gpuport's own classes, as a summary and a
    /// doctest example (lines of `>>>` and output); `None` for a builtin.
    pub fn doc(self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            ExceptionClass::Gpu => (
                "Base class of every error gpuport raises (a RuntimeError).",
                r#"
>>> import gpuport
>>> try:
...     gpuport.Device("tpu:0")
... except gpuport.GpuError as e:
...     print(type(e).__name__, isinstance(e, RuntimeError))
InvalidDeviceError True
"#,
            ),
            ExceptionClass::OutOfMemory => (
                "The device (or host) has not enough free memory; freeing memory and retrying may help.",
                r#"
>>> import gpuport
>>> try:
...     gpuport.MemArray(1 << 50, "uint8", device="host")   # 1 PiB
... except MemoryError as e:
...     print(type(e).__name__)
OutOfMemoryError
"#,
            ),
            ExceptionClass::Unavailable => (
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
            ),
            ExceptionClass::InvalidDevice => (
                "A device spec could not be parsed or names a device that does not exist.",
                r#"
>>> import gpuport
>>> gpuport.Device("tpu:0")
Traceback (most recent call last):
gpuport.InvalidDeviceError: invalid device spec "tpu:0": unknown backend "tpu"; accepted: "host", "cuda[:N]", "rocm[:N]"
"#,
            ),
            ExceptionClass::DeviceMismatch => (
                "Objects of two different devices were used together (a stream of cuda:1 for an array on cuda:0, \
             say).",
                r#"
>>> import gpuport
>>> issubclass(gpuport.DeviceMismatchError, ValueError)
True
"#,
            ),
            ExceptionClass::Lock => (
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
            ),
            ExceptionClass::Residency => (
                "An operation needs the host or device copy of an array, and that copy is not current.",
                r#"
>>> import gpuport, numpy as np
>>> gpuport.from_dlpack(np.zeros(3)).copy()      # imported memory stays with its producer
Traceback (most recent call last):
gpuport.ResidencyError: copy of an imported array: do it through its producer library
"#,
            ),
            ExceptionClass::Shape => (
                "A shape, index or rank was not accepted.",
                r#"
>>> import gpuport
>>> gpuport.MemArray((2, -1), device="host")
Traceback (most recent call last):
gpuport.ShapeError: extent -1 is negative; extents must be non-negative
"#,
            ),
            ExceptionClass::DLPack => (
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
            ),
            ExceptionClass::UnsupportedDType => (
                "The dtype is not one gpuport holds, or the operation has no kernel for it.",
                r#"
>>> import gpuport
>>> gpuport.MemArray(2, "bool", device="host").add_index()
Traceback (most recent call last):
gpuport.UnsupportedDTypeError: add_index has no kernel for bool; ...
"#,
            ),
            ExceptionClass::Unsupported => (
                "The backend does not implement the operation.",
                r#"
>>> import gpuport.memory as gm
>>> gm.alloc(64, device="host").ipc_handle()     # IPC handles are a GPU driver's
Traceback (most recent call last):
gpuport.UnsupportedError: IPC memory handles is not supported by the host backend: ...
"#,
            ),
            ExceptionClass::InvalidArgument => (
                "An argument is outside what the operation accepts.",
                r#"
>>> from gpuport import runtime as rt
>>> rt.malloc(0, device="host")
Traceback (most recent call last):
gpuport.InvalidArgumentError: invalid argument bytes: a zero-byte allocation was requested; sizes must be at least 1
"#,
            ),
            ExceptionClass::Driver => (
                "A vendor driver or runtime call failed.",
                r#"
>>> import gpuport
>>> issubclass(gpuport.DriverError, gpuport.GpuError)
True
"#,
            ),
            ExceptionClass::Kernel => (
                "Compiling, finding or launching a kernel failed.",
                r#"
>>> from gpuport import runtime as rt
>>> rt.module_get_function(rt.module_load(device="host"), "no_such_kernel")
Traceback (most recent call last):
gpuport.KernelError: kernel "no_such_kernel" not found in module; available: ...
"#,
            ),
            ExceptionClass::Graph => (
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
            ),
            ExceptionClass::Collective => (
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
            ),
            ExceptionClass::Value
            | ExceptionClass::Buffer
            | ExceptionClass::Index
            | ExceptionClass::Overflow
            | ExceptionClass::Type => return None,
        })
    }
}
