//! # gpuport
//!
//! A portable GPU runtime: one API for NVIDIA GPUs (CUDA, feature `cuda`),
//! AMD GPUs (ROCm/HIP, feature `rocm`) and an always-present host backend.
//!
//! ```
//! use gpuport::{on_backend, Device, DeviceMemory};
//!
//! // `GPUPORT_DEVICE`, else the first GPU, else the host.
//! let chosen = gpuport::default_device()?;
//! on_backend!(&chosen.device, dev => {
//!     let mut buf = dev.alloc(1024)?;
//!     dev.copy_to_device(&[7u8; 1024], &mut buf, 0)?;
//!     let mut back = vec![0u8; 1024];
//!     dev.copy_to_host(&buf, 0, &mut back)?;
//!     assert_eq!(back, vec![7u8; 1024]);
//!     Ok::<(), gpuport::Error>(())
//! })?;
//! # Ok::<(), gpuport::Error>(())
//! ```
//!
//! ## Design choices
//! - **Static dispatch per backend** (after wgpu-hal): [`Backend`] names each
//!   backend's stream, event, buffer and kernel types, so objects of two
//!   backends cannot be mixed; objects of two devices of one backend are
//!   checked at run time ([`Error::DeviceMismatch`]).
//! - **Run-time choice through one closed enum**: [`Any`](backend::any::Any)
//!   (a device is an [`AnyDevice`], a stream an `AnyStream`, a communicator
//!   an `AnyCommunicator`) and one macro, [`on_backend!`], instead of trait objects and downcasts.
//! - **Vendor libraries load at run time**: a binary built with every
//!   feature starts anywhere; a missing library is an [`Error`], never a panic.
//! - **Asynchronous operations are `unsafe`**, with their obligations in
//!   `# Safety`; each has a safe synchronous twin.
#![warn(missing_docs, rust_2018_idioms, unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![deny(unused_must_use)]
// Integer conversions are checked (`try_from`, a typed error where a caller's
// value could overflow), lossless (`From`), or an `as` allowed on the
// smallest item with why it cannot overflow; these lints keep them so in
// every layer.
#![warn(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless,
    clippy::cast_precision_loss,
    clippy::ptr_as_ptr
)]

pub mod array;
pub mod backend;
pub mod collective;
pub mod dlpack;
pub mod dynamic;
pub mod error;
pub mod kernels;
pub mod memory;

/// This crate's version (`Cargo.toml`): the one the Python package
/// (`gpuport.__version__`) and the `gpuport` command report.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use array::{ArrayIndexer, Element, Location, LockId, MemArray, Transfer, View};
pub use backend::host::{Host, HostDevice};
pub use backend::registry::{
    backends, default_device, open, open_kind, parse_spec, AnyDevice, BackendStatus, DefaultDevice,
};
pub use backend::{
    builtin, Advice, Backend, Buffer, Capture, CaptureMode, CaptureStatus, Device, DeviceInfo, DeviceLimits,
    DeviceMemory, DeviceMemoryMut, Event, GrowableRange, HostMemory, Kernel, KernelArg, KernelArgs, LaunchConfig,
    ManagedPlace, MemoryInfo, MemoryKind, Module, ModuleSource, PeerDevice, PinnedBuffer, Stream, MAX_RESERVATION,
};
pub use backend::{Graph, GraphExec};
pub use error::{BackendKind, CollectiveErrorKind, DriverError, Error, GraphErrorKind, Result, StoreErrorKind};

#[cfg(feature = "cuda")]
pub use backend::cuda::{Cuda, CudaDevice};
#[cfg(feature = "rocm")]
pub use backend::hip::{Rocm, RocmDevice};
