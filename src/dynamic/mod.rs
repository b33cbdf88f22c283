//! The run-time layer: devices, streams, events, element types, modules,
//! memory and arrays whose backend, element type and rank are chosen at run
//! time, as wgpu's dynamic layer stands over wgpu-hal.
//!
//! A binding (the Python package today, a C API tomorrow) converts its
//! objects to these and calls them. The choice of backend, the DLPack
//! export negotiation and import, the keep-alive of operands and the
//! per-device memory resources live here, once, for every backend; a
//! binding holds no backend dispatch of its own.
//!
//! - [`any`]: [`Any`] (the backend layer's, re-exported), the closed enum every type here is made of, and [`OnDevice`].
//! - [`stream`]: [`AnyStream`], [`AnyEvent`].
//! - [`stream_protocol`]: a foreign stream object's handle (`__cuda_stream__`'s rule).
//! - [`dtype`]: [`DType`], the run-time element type.
//! - [`array`](mod@array): [`AnyArray`], an owned `MemArray` of run-time dtype and rank, or an import.
//! - [`array_access`]: an [`AnyArray`]'s data used directly (moves, host views and bytes, copies), and what an import refuses.
//! - [`cai`]: the CUDA Array Interface as data: layouts, its import with the interface's rules, and its export from an array.
//! - [`device_array`]: raw memory with a shape and a type string (a binding's `DeviceArray`): configure, index, free.
//! - [`import_route`]: which route `from_dlpack` and `asarray` take for what an object offers, and `__dlpack__`'s versions.
//! - [`imported`]: arrays over other libraries' memory, and where an import is placed ([`imported::import_tensor`]).
//! - [`exchange`]: DLPack export negotiation (`__dlpack__`'s arguments) and import.
//! - [`exchange_api`]: DLPack 1.3's C exchange API (`__dlpack_c_exchange_api__`), producer and consumer.
//! - [`managed`]: managed memory at run time: an array's kind of memory, where to place it, an array's prefetch and advice.
//! - [`memory`]: each device's observed resource, allocations of any backend.
//! - [`module`]: [`AnyModule`], [`AnyKernel`] and launch.
//! - [`raw`]: copies, memsets and allocations on address ranges, and the registry of live allocations.
//! - [`runtime`]: the calls of a HIP-shaped runtime (`gpuport.runtime`) as whole operations: device and stream choice, checks, the wait or the keeping of owners.
//! - [`keep`]: operands kept alive until their work has run.
//! - [`graph`]: capture on an [`AnyStream`], [`AnyGraph`], [`AnyGraphExec`].
//! - [`exclusive`]: [`Exclusive`], a value threads use one at a time, whose waits a binding can run without its interpreter lock.
//! - [`graph_slot`]: one captured graph's life (empty, capturing, ready), as a binding's `Graph` holds it.
//! - [`lock_context`]: one `get_dlpack` block's life (fresh, entered, closed): its lock id, and which export it allows when.
//! - [`peer`]: peer access between two devices of one backend.
//! - [`target`]: which copy of an array a move or an export goes to, as a caller names it.

pub mod any;
pub mod array;
pub mod array_access;
pub mod cai;
/// The run-time element type, at home in [`crate::array::dtype`] (re-exported).
pub mod dtype {
    pub use crate::array::dtype::*;
}
pub mod device_array;
pub mod exchange;
pub mod exchange_api;
pub mod exclusive;
pub mod export;
pub mod graph;
pub mod graph_slot;
pub mod import_route;
pub mod imported;
pub mod keep;
pub mod lock_context;
pub mod managed;
pub mod memory;
pub mod memory_handles;
pub mod module;
pub mod peer;
pub mod raw;
pub mod runtime;
pub mod stream;
pub mod stream_protocol;
pub mod target;

pub use any::{same_device, Any, DynDevice, OnDevice, PerBackend};
pub use array::{device_for_dl, new_owned, AnyArray, DynArray, ImportedArray, RawImport, Shape, Strides};
pub use dtype::{DType, MAX_RANK};
pub use exclusive::{Exclusive, ExclusiveGuard};
pub use graph::{AnyCapture, AnyGraph, AnyGraphExec};
pub use module::{AnyKernel, AnyModule, Code};
pub use stream::{AnyEvent, AnyStream};
