//! The crate's one error type.
//!
//! Every fallible call in gpuport returns [`Result<T>`]. Errors describe what
//! went wrong in terms the caller can act on: which backend, which driver
//! call, which argument, and what would have been accepted. [`python`]
//! words the same errors for the Python package.

use std::fmt;

pub(crate) mod array;
pub(crate) mod collective;
pub(crate) mod device_array;
pub(crate) mod dlpack;
pub(crate) mod memory;
pub mod python;
mod python_classes;

use dlpack::DLPackError;

/// Which backend an object or error belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// The always-present CPU backend.
    Host,
    /// NVIDIA GPUs through the CUDA driver API (feature `cuda`).
    Cuda,
    /// AMD GPUs through HIP (feature `rocm`).
    Rocm,
}

impl BackendKind {
    /// Every backend gpuport knows, compiled in or not, in probing order.
    pub const ALL: [BackendKind; 3] = [BackendKind::Cuda, BackendKind::Rocm, BackendKind::Host];

    /// The name used in device specs (`"cuda:0"`, `"rocm:1"`, `"host"`).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Host => "host",
            BackendKind::Cuda => "cuda",
            BackendKind::Rocm => "rocm",
        }
    }

    /// The Cargo feature that compiles this backend in (`None` for host).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            BackendKind::Host => None,
            BackendKind::Cuda => Some("cuda"),
            BackendKind::Rocm => Some("rocm"),
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failure reported by a vendor library, with the call that reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverError {
    /// The backend whose library failed.
    pub backend: BackendKind,
    /// The API call, e.g. `"cuMemAlloc"`.
    pub call: &'static str,
    /// The numeric status code the call returned.
    pub code: i64,
    /// The status name, e.g. `"CUDA_ERROR_OUT_OF_MEMORY"`.
    pub name: String,
    /// The library's description of the status.
    pub message: String,
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} failed with {} ({}): {}", self.backend, self.call, self.name, self.code, self.message)
    }
}

/// Everything that can go wrong in gpuport.
///
/// `Debug` prints the same message as `Display`, so `fn main() ->
/// gpuport::Result<()>` and `unwrap` report the error readably; the
/// alternate form (`{:#?}`, as `dbg!` uses) puts the variant's name first.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A vendor driver or runtime-compiler call failed.
    #[error("{0}")]
    Driver(DriverError),

    /// The device has not enough free memory for the request. Freeing memory
    /// (or emptying a pool) and retrying is a reasonable response.
    #[error("{backend}:{ordinal}: out of device memory allocating {bytes} bytes")]
    OutOfMemory {
        /// Backend of the device.
        backend: BackendKind,
        /// Ordinal of the device.
        ordinal: usize,
        /// Size of the failed request.
        bytes: usize,
    },

    /// A vendor library could not be loaded; the backend is unavailable.
    #[error("{backend} is unavailable: could not load {library} (tried {tried}){}", library_hint(*backend))]
    LibraryNotFound {
        /// The backend that needs the library.
        backend: BackendKind,
        /// The library's name, e.g. `libcuda`.
        library: &'static str,
        /// The names and paths that were tried, comma separated.
        tried: String,
    },

    /// The backend loaded but reports no usable device.
    #[error("{backend} is unavailable: {reason}")]
    NoDevice {
        /// The backend.
        backend: BackendKind,
        /// What the backend said.
        reason: String,
    },

    /// A device spec named a backend that this binary was built without.
    #[error("the {backend} backend is not compiled in: rebuild with `--features {feature}`")]
    BackendNotCompiled {
        /// The requested backend.
        backend: BackendKind,
        /// The Cargo feature that enables it.
        feature: &'static str,
    },

    /// A device spec could not be parsed or names a device that does not exist.
    #[error("invalid device spec {spec:?}: {reason}; accepted: \"host\", \"cuda[:N]\", \"rocm[:N]\"")]
    InvalidDeviceSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Objects of two different devices were used together.
    #[error("{what} belongs to {found}, but the operation runs on {expected}")]
    DeviceMismatch {
        /// What was passed (e.g. `"destination buffer"`).
        what: &'static str,
        /// The device of the operation, e.g. `cuda:0`.
        expected: String,
        /// The device of the object, e.g. `cuda:1`.
        found: String,
    },

    /// A copy or memset reaches past the end of a buffer.
    #[error("{what}: range {offset}..{offset}+{len} is out of bounds for a buffer of {capacity} bytes")]
    OutOfBounds {
        /// Which operand.
        what: &'static str,
        /// Start of the range in bytes.
        offset: usize,
        /// Length of the range in bytes.
        len: usize,
        /// Size of the buffer in bytes.
        capacity: usize,
    },

    /// An argument is outside what the operation accepts.
    #[error("invalid argument {name}: {reason}")]
    InvalidArgument {
        /// The argument's name.
        name: &'static str,
        /// What is wrong and what is accepted.
        reason: String,
    },

    /// The backend does not implement this operation.
    #[error("{op} is not supported by the {backend} backend{}", hint.as_deref().map(|h| format!(": {h}")).unwrap_or_default())]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The backend.
        backend: BackendKind,
        /// What to do instead, if anything.
        hint: Option<String>,
    },

    /// An arithmetic kernel was asked of an element type it has no
    /// instantiation for (fill and copies move any element type).
    #[error("{op} has no kernel for {dtype}; it runs on int8..int64, uint8..uint64, float16, bfloat16, float32, float64 (fill and copies move any dtype)")]
    NoKernel {
        /// The kernel's operation (`add_index`).
        op: &'static str,
        /// The element type's name.
        dtype: String,
        /// The backend asked.
        backend: BackendKind,
    },

    /// A number was given for an element type the binding cannot convert
    /// numbers to (its value library has no such dtype); one element's
    /// bytes are accepted instead.
    #[error("{op}: no conversion of a number to {dtype}; pass one element's {itemsize} byte(s) as bytes")]
    NoValueConversion {
        /// The operation (`fill`).
        op: &'static str,
        /// The element type's name.
        dtype: String,
        /// Bytes of one element.
        itemsize: usize,
        /// The element type is one of ml_dtypes' (installing it gives the conversion).
        in_ml_dtypes: bool,
    },

    /// The runtime compiler rejected a kernel source; `log` is its output.
    #[error("{backend}: compiling {name} failed:\n{log}")]
    Compile {
        /// The backend whose compiler ran.
        backend: BackendKind,
        /// The program's name.
        name: String,
        /// The compiler's log.
        log: String,
    },

    /// No kernel of that name in the module.
    #[error("kernel {name:?} not found in module; available: {available}")]
    KernelNotFound {
        /// The requested name.
        name: String,
        /// The names the module has, where the backend can list them.
        available: String,
    },

    /// Kernel arguments do not match what the kernel declares.
    #[error("kernel {kernel:?}: {reason}")]
    KernelArguments {
        /// The kernel's name.
        kernel: String,
        /// What did not match.
        reason: String,
    },

    /// A work item on a host stream panicked; the stream's later work still ran.
    #[error("host stream work failed: {0}")]
    HostTask(String),

    /// An array shape, index, slice or stride was not accepted.
    #[error(transparent)]
    Shape(#[from] array::ShapeError),

    /// A locked array was accessed without its lock id.
    #[error(transparent)]
    Lock(#[from] array::LockError),

    /// An array operation needs a copy (host or device) that is not current.
    #[error(transparent)]
    Residency(#[from] array::ResidencyError),

    /// An imported array cannot do this: its memory is its producer's.
    #[error(transparent)]
    Import(#[from] array::ImportRefusal),

    /// A DLPack tensor could not be imported or exported.
    #[error(transparent)]
    DLPack(#[from] DLPackError),

    /// A `DeviceArray`'s shape, type, index or placement was not accepted.
    #[error(transparent)]
    DeviceArray(#[from] device_array::DeviceArrayError),

    /// A memory resource refused a block, or broke its contract.
    #[error(transparent)]
    Memory(#[from] memory::MemoryError),

    /// A rule of stream capture or graphs was broken (see
    /// [`crate::backend::graph`]); `kind` says which. The stream, the
    /// capture (unless `kind` is [`GraphErrorKind::Invalidated`]) and the
    /// graph stay usable.
    #[error("{backend}: {op}: {reason}")]
    Graph {
        /// The backend.
        backend: BackendKind,
        /// The operation refused, e.g. `"synchronize"`.
        op: &'static str,
        /// Which rule.
        kind: GraphErrorKind,
        /// What happened and what to do instead.
        reason: String,
    },

    /// The store through which the ranks of a job meet
    /// ([`crate::collective::TcpStore`]) failed; `kind` says how.
    #[error("gpuport store at {addr}: {reason}")]
    Store {
        /// Rank 0's address (`GPUPORT_MASTER_ADDR:GPUPORT_MASTER_PORT`).
        addr: String,
        /// How it failed.
        kind: StoreErrorKind,
        /// What happened and what to check.
        reason: String,
    },

    /// A collective or a communicator ([`crate::collective::Communicator`])
    /// failed; `kind` says how.
    #[error("{engine} communicator{}: {reason}", rank.map(|r| format!(" (rank {r})")).unwrap_or_default())]
    Collective {
        /// The engine, e.g. `"NCCL 2.28.5"`, `"RCCL 2.20.5"` or `"host"`.
        engine: String,
        /// The calling rank, once the communicator exists.
        rank: Option<usize>,
        /// How it failed.
        kind: CollectiveErrorKind,
        /// What happened and what to check.
        reason: String,
    },

    /// A collective's arguments that its communicator cannot take: an
    /// unknown collective or reduction, or a buffer that is missing, too
    /// small, read-only or in the wrong place (see
    /// [`crate::collective::Operands`]).
    #[error(transparent)]
    CollectiveArgument(#[from] collective::ArgumentError),
}

/// How a collective failed ([`Error::Collective`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CollectiveErrorKind {
    /// NCCL or RCCL could not be loaded, or is older than gpuport needs.
    Library,
    /// A call of the engine returned an error status.
    Engine,
    /// The ranks called different collectives, or the same one with
    /// different counts, element types or roots.
    Mismatch,
    /// A collective did not finish in time (a rank may have died or called
    /// something else); the communicator was aborted.
    Timeout,
    /// The communicator was aborted; make a new one.
    Aborted,
    /// Another rank failed, or the engine reported an asynchronous error;
    /// the communicator was aborted.
    RemoteFailure,
    /// Another rank's part of the communicator's initialisation failed
    /// (its library, device or version); the reason says why.
    PeerInitFailed {
        /// The rank that failed.
        rank: usize,
    },
    /// Another rank loaded another version of the engine's library; the
    /// reason names both versions.
    VersionMismatch {
        /// The rank whose version differs from this rank's.
        rank: usize,
    },
}

/// How a [`TcpStore`](crate::collective::TcpStore) call failed ([`Error::Store`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// Nobody answered in time: no rank 0 listening, or a key nobody set
    /// (a rank may have died).
    Timeout,
    /// Rank 0 could not listen on the address (taken, or not this host's).
    Bind,
    /// The connection to rank 0 broke (rank 0 stopped).
    Closed,
    /// An answer or a use that breaks the store's rules.
    Protocol,
    /// `GPUPORT_MASTER_ADDR`, `GPUPORT_MASTER_PORT`, `GPUPORT_STORE_TIMEOUT`,
    /// `GPUPORT_COLLECTIVE_TIMEOUT` or the rank variables missing or malformed.
    Config,
}

/// Which rule of stream capture or graphs an [`Error::Graph`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GraphErrorKind {
    /// A call that waits for the device (a synchronize, a blocking copy, a
    /// stream query) was made on a capturing stream, or on the default
    /// stream or the whole device while a capture forbids it. Refused
    /// before the driver saw it: the capture is still valid.
    SynchronousCall,
    /// `begin_capture` on a stream that is already capturing.
    AlreadyCapturing,
    /// The default stream cannot be captured (CUDA and HIP refuse its
    /// legacy form); capture a stream from `create_stream`.
    DefaultStream,
    /// The capture was invalidated by an earlier error; ending it returns
    /// this and leaves the stream usable, not capturing.
    Invalidated,
    /// A dependency across the capture's boundary: waiting inside a capture
    /// for an event recorded outside it (this invalidates the capture, as
    /// on CUDA), or on another stream for an event recorded inside it.
    Isolation,
    /// An event last recorded inside a capture was waited for or queried
    /// on the host: it is recorded only when the graph runs.
    CapturedEvent,
    /// `GraphExec::update` with a graph of another shape; the executable
    /// graph is unchanged.
    UpdateRefused,
    /// An allocation from the caching pool on a capturing stream whose
    /// capture the runtime cannot identify (an old HIP without
    /// `hipStreamGetCaptureInfo_v2`); elsewhere such allocations come from
    /// the capture's graph pool (see `docs/design.md#graphs`).
    PoolAllocation,
    /// A capture's graph pool could not grow: the device (or the pool's
    /// size limit) is full. The capture keeps running.
    OutOfMemory,
    /// A graph launched into a capturing stream of the host backend.
    NestedLaunch,
    /// An operation that is not captured into graphs (a `MemArray`
    /// operation, a stream-ordered allocation: see `docs/design.md#graphs`)
    /// was given a capturing stream. Refused before it enqueued anything: the capture is still valid.
    NotCapturable,
    /// A capture in [`CaptureMode::Global`](crate::CaptureMode::Global) or
    /// [`CaptureMode::ThreadLocal`](crate::CaptureMode::ThreadLocal) ended
    /// from a thread other than the one that began it (CUDA's rule, applied
    /// on every backend by the run-time layer's
    /// `AnyCapture`, `src/dynamic/graph.rs`); the capture keeps
    /// running and can be ended on its own thread.
    WrongThread,
    /// A `GraphSlot` (`src/dynamic/graph_slot.rs`) is capturing
    /// and the call needs it not to (a replay, an update, a reset, another
    /// capture), or a capture into a slot that already holds a graph.
    Capturing,
    /// A replay or update of a
    /// `GraphSlot` (`src/dynamic/graph_slot.rs`) that holds no
    /// captured graph.
    NotCaptured,
}

/// How to point gpuport at a vendor library it did not find.
fn library_hint(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Rocm => {
            "; point gpuport at it with GPUPORT_HIP_LIBRARY=/path/to/libamdhip64.so, ROCM_PATH=/path/to/rocm, or \
             GPUPORT_SITE_PACKAGES=/path/to/site-packages (for torch/lib or _rocm_sdk_core/lib)"
        }
        BackendKind::Cuda => "; it comes with the NVIDIA driver, and the loader searches LD_LIBRARY_PATH",
        BackendKind::Host => "",
    }
}

/// An [`Error::Graph`]: `op` on `backend` broke the rule `kind`; `reason`
/// says what happened and what to do instead.
pub(crate) fn graph_error(backend: BackendKind, op: &'static str, kind: GraphErrorKind, reason: String) -> Error {
    Error::Graph { backend, op, kind, reason }
}

impl Error {
    /// The variant's name, e.g. `"OutOfMemory"`.
    fn variant_name(&self) -> &'static str {
        match self {
            Error::Driver(_) => "Driver",
            Error::OutOfMemory { .. } => "OutOfMemory",
            Error::LibraryNotFound { .. } => "LibraryNotFound",
            Error::NoDevice { .. } => "NoDevice",
            Error::BackendNotCompiled { .. } => "BackendNotCompiled",
            Error::InvalidDeviceSpec { .. } => "InvalidDeviceSpec",
            Error::DeviceMismatch { .. } => "DeviceMismatch",
            Error::OutOfBounds { .. } => "OutOfBounds",
            Error::InvalidArgument { .. } => "InvalidArgument",
            Error::Unsupported { .. } => "Unsupported",
            Error::NoKernel { .. } => "NoKernel",
            Error::NoValueConversion { .. } => "NoValueConversion",
            Error::Compile { .. } => "Compile",
            Error::KernelNotFound { .. } => "KernelNotFound",
            Error::KernelArguments { .. } => "KernelArguments",
            Error::HostTask(_) => "HostTask",
            Error::Shape(_) => "Shape",
            Error::Lock(_) => "Lock",
            Error::Residency(_) => "Residency",
            Error::Import(_) => "Import",
            Error::DLPack(_) => "DLPack",
            Error::DeviceArray(_) => "DeviceArray",
            Error::Memory(_) => "Memory",
            Error::Graph { .. } => "Graph",
            Error::Store { .. } => "Store",
            Error::Collective { .. } => "Collective",
            Error::CollectiveArgument(_) => "CollectiveArgument",
        }
    }
}

/// The message, as `Display` writes it; `{:#?}` adds the variant's name
/// (`Error::OutOfMemory: cuda:0: out of device memory ...`).
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            write!(f, "Error::{}: ", self.variant_name())?;
        }
        fmt::Display::fmt(self, f)
    }
}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Error> {
        vec![
            Error::BackendNotCompiled { backend: BackendKind::Cuda, feature: "cuda" },
            Error::OutOfMemory { backend: BackendKind::Rocm, ordinal: 1, bytes: 4096 },
            Error::Driver(DriverError {
                backend: BackendKind::Cuda,
                call: "cuMemAlloc",
                code: 2,
                name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
                message: "out of memory".into(),
            }),
            Error::InvalidArgument { name: "size", reason: "must be positive".into() },
        ]
    }

    #[test]
    fn debug_prints_the_display_message() {
        for e in samples() {
            // What `fn main() -> gpuport::Result<()>` prints after "Error: ".
            let shown = format!("{e:?}");
            assert_eq!(shown, e.to_string());
            assert!(!shown.contains(" { ") && !shown.contains("backend: "), "struct syntax in {shown:?}");
        }
        let e = Error::BackendNotCompiled { backend: BackendKind::Cuda, feature: "cuda" };
        assert_eq!(format!("{e:?}"), "the cuda backend is not compiled in: rebuild with `--features cuda`");
    }

    #[test]
    fn alternate_debug_names_the_variant() {
        for e in samples() {
            let pretty = format!("{e:#?}");
            assert!(pretty.starts_with("Error::"), "{pretty}");
            assert!(pretty.ends_with(&e.to_string()), "{pretty}");
        }
        let e = Error::OutOfMemory { backend: BackendKind::Cuda, ordinal: 0, bytes: 8 };
        assert_eq!(format!("{e:#?}"), "Error::OutOfMemory: cuda:0: out of device memory allocating 8 bytes");
    }
}
