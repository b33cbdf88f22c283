//! The GPU backends' one core, generic over a vendor driver table.
//!
//! Devices, streams, events, buffers (device, managed, stream-ordered,
//! pinned, registered), modules, launches (argument checks, occupancy
//! configurations), the memory layer's device support, and the mapping of
//! vendor statuses to errors are written here once, over a `Driver`: the
//! table of vendor calls one opened device makes. CUDA and ROCm are its two
//! instantiations, `Cuda` = `Gpu<CudaDriver>` and `Rocm` =
//! `Gpu<HipDriver>`, with `CudaDevice`, `CudaBuffer`,
//! `RocmDevice`, `RocmBuffer` … as aliases of the types here. The vendor
//! parts hold only what differs: library loading, the calls and their
//! constants, the kernel compiler, and the few real behavioural differences,
//! each noted where its driver implements it.
//!
//! The generic layer makes the device current before every driver call
//! (asking the driver once per operation where the run-time layer opens a
//! scope: `src/backend/bound.rs`), checks devices, ranges and sizes, and
//! owns every handle; every object holds an `Arc` of the driver state, so a
//! device's context outlives its streams, buffers and modules.
//!
//! `Driver` lives in a private module: no crate outside gpuport can name
//! or implement it, so `Gpu<D>` stays a sealed [`Backend`]'s type.
//!
//! - `driver.rs`: the `Driver` trait, the vendor contract, and what a
//!   driver tells of a kernel's parameters;
//! - `error.rs`: vendor statuses as errors;
//! - `device.rs`: [`GpuDevice`] and its [`Device`](crate::Device) implementation;
//! - `memory.rs`: [`GpuBuffer`], [`GpuPinnedBuffer`], [`GpuHostRegistration`];
//! - `stream.rs`: [`GpuStream`], [`GpuEvent`];
//! - `event_pool.rs`: marker events kept for reuse, per device;
//! - `compile.rs`: what the run-time kernel compilers are given;
//! - `module.rs`: [`GpuModule`], [`GpuKernel`] and its launch-argument check;
//! - `resource.rs`: the memory layer's device support (pinned flags, pools, IPC);
//! - `graph.rs`: stream capture, [`GpuGraph`], [`GpuGraphExec`];
//! - `peer.rs`: peer access and peer copies ([`PeerDevice`](crate::PeerDevice)).

use std::fmt;
use std::marker::PhantomData;

use crate::backend::Backend;
use crate::error::BackendKind;

mod compile;
mod device;
mod driver;
mod error;
mod event_pool;
mod graph;
mod growable;
mod memory;
mod module;
mod peer;
mod resource;
mod stream;

pub(crate) use compile::{Program, ProgramText};
pub use device::GpuDevice;
pub(crate) use driver::{Driver, GraphCalls, ManagedCalls, Params, PeerCalls, RawAddress, VmmCalls};
pub(crate) use error::{check, driver_error, ready};
pub(crate) use event_pool::EventPool;
pub use graph::{GpuGraph, GpuGraphExec};
pub use memory::{GpuBuffer, GpuHostRegistration, GpuPinnedBuffer};
pub use module::{GpuKernel, GpuModule};
pub use stream::{GpuEvent, GpuStream};

/// A GPU backend over driver `D`: `Cuda` (`gpuport::Cuda`) or `Rocm` (`gpuport::Rocm`).
pub struct Gpu<D>(PhantomData<fn() -> D>);

impl<D: Driver> fmt::Debug for Gpu<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(D::NAME)
    }
}

impl<D> Clone for Gpu<D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D> Copy for Gpu<D> {}

impl<D: Driver> Backend for Gpu<D> {
    const KIND: BackendKind = D::KIND;
    type Device = GpuDevice<D>;
    type Stream = GpuStream<D>;
    type Event = GpuEvent<D>;
    type Buffer = GpuBuffer<D>;
    type PinnedBuffer = GpuPinnedBuffer<D>;
    type HostRegistration = GpuHostRegistration<D>;
    type Module = GpuModule<D>;
    type Kernel = GpuKernel<D>;
    type RawGraph = GpuGraph<D>;
    type RawGraphExec = GpuGraphExec<D>;
}

/// Declares a vendor's public names for the generic types (the same nine
/// for every vendor, so the two backends' APIs cannot drift apart):
/// `vendor_types! { CudaDriver, "CUDA", "cuda" => Cuda, CudaDevice, … }`.
macro_rules! vendor_types {
    ($driver:ident, $platform:literal, $spec:literal => $backend:ident, $device:ident, $stream:ident, $event:ident,
     $buffer:ident, $pinned:ident, $registration:ident, $module:ident, $kernel:ident) => {
        #[doc = concat!("The ", $platform, " backend.")]
        pub type $backend = $crate::backend::gpu::Gpu<$driver>;
        #[doc = concat!("A ", $platform, " GPU (`\"", $spec, ":N\"`).")]
        pub type $device = $crate::backend::gpu::GpuDevice<$driver>;
        #[doc = concat!("A ", $platform, " stream.")]
        pub type $stream = $crate::backend::gpu::GpuStream<$driver>;
        #[doc = concat!("A ", $platform, " event.")]
        pub type $event = $crate::backend::gpu::GpuEvent<$driver>;
        #[doc = concat!($platform, " device or managed memory; freed on drop (in stream order if allocated so).")]
        pub type $buffer = $crate::backend::gpu::GpuBuffer<$driver>;
        #[doc = concat!("Page-locked host memory from the ", $platform, " driver.")]
        pub type $pinned = $crate::backend::gpu::GpuPinnedBuffer<$driver>;
        #[doc = concat!("Host memory registered with the ", $platform, " driver; unregistered on drop.")]
        pub type $registration = $crate::backend::gpu::GpuHostRegistration<$driver>;
        #[doc = concat!("A loaded ", $platform, " module.")]
        pub type $module = $crate::backend::gpu::GpuModule<$driver>;
        #[doc = concat!("A ", $platform, " kernel; keeps its module loaded.")]
        pub type $kernel = $crate::backend::gpu::GpuKernel<$driver>;
    };
}
pub(crate) use vendor_types;

/// Destroys the marker events `driver`'s device keeps for reuse: called by
/// a vendor's driver state as it is dropped, before it releases its context
/// (`event_pool.rs`).
pub(crate) fn destroy_pooled_events<D: Driver>(driver: &D) {
    event_pool::destroy_pooled(driver);
}
