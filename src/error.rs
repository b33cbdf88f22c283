//! The crate's one error type.
//!
//! Every fallible call in gpuport returns [`Result<T>`]. Errors describe what
//! went wrong in terms the caller can act on: which backend, which driver
//! call, which argument, and what would have been accepted.

use std::fmt;

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
#[derive(Debug, thiserror::Error)]
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
    #[error("{backend} is unavailable: could not load {library} (tried {tried})")]
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
    Shape(#[from] crate::array::ShapeError),

    /// A locked array was accessed without its lock id.
    #[error(transparent)]
    Lock(#[from] crate::array::LockError),

    /// An array operation needs a copy (host or device) that is not current.
    #[error(transparent)]
    Residency(#[from] crate::array::ResidencyError),

    /// A DLPack tensor could not be imported or exported.
    #[error(transparent)]
    DLPack(#[from] crate::dlpack::DLPackError),

    /// A memory resource refused a block, or broke its contract.
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryError),
}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
