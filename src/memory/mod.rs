//! Memory resources: the library's allocation layer.
//!
//! The Rust counterpart of Numba's External Memory Manager interface
//! (NBEP 7; docs/design.md#memory-resources): a [`MemoryResource`] allocates device
//! memory in stream order, pinned host memory with options, pins existing
//! host memory, reports free/total memory, exports IPC handles where the
//! backend can, resets, defers cleanup and states its interface version.
//!
//! | NBEP 7 (Python)        | here                                            |
//! | ---------------------- | ----------------------------------------------- |
//! | `memalloc`             | [`Allocator::alloc`] → [`DeviceAllocation`]     |
//! | `memhostalloc`         | [`Allocator::alloc_pinned`] with [`PinnedFlags`] |
//! | `mempin`               | [`Allocator::pin`]                              |
//! | `get_memory_info`      | [`Allocator::memory_info`]                      |
//! | `get_ipc_handle`       | [`Allocator::ipc_handle`] → [`IpcHandle`], [`open_ipc`] |
//! | `reset`                | [`Allocator::reset`]                            |
//! | `defer_cleanup`        | [`Allocator::defer_cleanup`] → [`DeferCleanup`] |
//! | `interface_version`    | [`Allocator::interface_version`] ([`INTERFACE_VERSION`]) |
//!
//! Resources: [`PlainResource`] (the backend's allocator), [`NativePoolResource`]
//! (the driver's stream-ordered pool: the device's default one, or a
//! [shareable](NativePoolResource::shareable) one of its own whose blocks
//! other processes can open, see [`ipc`]), [`CachingPool`] (ours: size classes,
//! per-stream free lists, splitting and merging, event-gated cross-stream
//! reuse, release and one retry on out-of-memory, a size limit, a release
//! threshold, a fragmentation report), the [`PinnedPool`], and the adaptors
//! [`StatisticsResource`] and [`LoggingResource`]. [`PageableCopier`] moves
//! ordinary host memory through pinned staging buffers on several streams
//! (on a GPU; the host backend's copies are plain).
//!
//! [`history`] records, while asked to, every allocation, free and segment
//! of the caching pools with its stack, and writes snapshots PyTorch's
//! memory viewer reads.
//!
//! Each device has a current resource ([`current_resource`]), a caching pool
//! unless [`set_current_resource`] replaced it before first use. Every
//! allocation of the library goes through it: a
//! [`MemArray`](crate::array::MemArray)'s device copy and pinned host copy,
//! and the [`PageableCopier`]'s staging buffers. (Memory a user asks of the
//! backend directly, `Device::alloc` and friends, does not.)
//!
//! ## Cross-stream lifetime without `record_stream`
//! A [`DeviceAllocation`] belongs to the stream it was allocated on. To use it
//! on another stream, borrow it through [`DeviceAllocation::use_on`]: the
//! returned [`StreamUse`] records an event on that stream when dropped, and
//! the allocation, when freed, goes back to the resource with those events.
//! The caching pool hands a block to another stream only after events show
//! every earlier use complete; a block freed on stream A is reused on A at
//! once (stream order suffices) and on B only after an event recorded on A
//! has completed. There is no code path that moves a block between streams
//! without such an event (see `pool.rs`).
//!
//! ## What safe code trusts, and what it checks
//! A [`DeviceAllocation`] is memory that safe copies and kernels write, so
//! what a resource hands out is trusted: [`MemoryResource`] is an `unsafe
//! trait` whose contract (its `# Safety` section) says what an
//! implementation promises, as is the caching pool's [`Storage`]. What can
//! be checked where a resource's answer crosses into safe code is checked:
//! [`Allocator::alloc`] refuses a block shorter than asked for, of another
//! device, or wrapping around the address space
//! ([`MemoryError::ContractViolation`]), and the pool refuses such a segment.
//! A [`Block`] is opaque (private fields, not `Clone`), stamped with its
//! resource's [`ResourceId`] and a serial number no one can set; resources
//! refuse, freeing nothing, a block they did not hand out or that is not live
//! ([`MemoryError::ForeignBlock`]), and an allocation whose free is refused
//! leaks its memory and records it ([`Allocator::refused_frees`]) rather
//! than free anything twice. [`open_ipc`] is `unsafe`: the driver cannot
//! check an IPC handle's offset and length against the allocation it opens.
//!
//! ## Caches and process exit
//! The per-device current resources and the shared [`PageableCopier`]s live
//! for the process and cache memory no one uses. [`release_all`] gives all
//! of it back (live memory stays valid), and runs at process exit too (an
//! `atexit` handler; its documentation says why that is sound and when it
//! does nothing), so a program that dropped everything it allocated ends
//! with nothing of gpuport's allocated. A pool lets go of streams whose
//! users dropped them (see [`pool`]), and every resource frees all it holds
//! when dropped.
//!
//! ## Memory whose users' streams are unknown
//! An address handed to code we do not see (a DLPack export, a view, a raw
//! pointer) may be used on any stream, so no event can cover its uses.
//! `MemArray` marks such memory exported, and when it is finally released
//! synchronizes the whole device (`Device::synchronize_device`, what a
//! synchronous `cudaFree` implies) before returning it to the resource; see
//! [`GuardedRelease`], which the Python `runtime.malloc` uses too.

mod allocation;
mod block;
mod current;
pub mod ext;
mod guarded_release;
pub mod history;
pub(crate) mod host_copy;
pub mod ipc;
mod ipc_handle;
mod ipc_memory;
pub mod log;
pub(crate) mod no_wait;
mod oom;
pub mod pageable;
pub mod pinned;
pub mod pool;
mod report;
pub mod resource;
pub mod stats;

pub use allocation::{Allocator, DeferCleanup, DeviceAllocation, StreamUse};
pub use block::{Block, MemoryError, ResourceId, SHARED_SERIAL};
pub use current::{current_resource, release_all, set_current_resource};
pub use ext::MemoryDevice;
pub use guarded_release::GuardedRelease;
pub use ipc::{allow_pool_importers, imported_pool_count, PoolImporters};
pub use ipc_handle::{IpcHandle, IpcKind};
pub use ipc_memory::{open_ipc, IpcMemory};
pub use log::LoggingResource;
pub use no_wait::{without_waiting, would_wait, RefusedFrees};
pub use oom::{add_out_of_memory_observer, remove_out_of_memory_observer, ObserverId, OutOfMemoryEvent};
pub use pageable::{pageable_copier, PageableCopier, PipelineConfig};
pub use pinned::{PinnedFlags, PinnedMemory, PinnedPool};
pub use pool::{CachingPool, DeviceStorage, PoolConfig, Storage};
pub use report::{BlockReport, BlockState, Expandable, PoolCounters, PoolReport, SegmentReport, Statistics};
pub use resource::{ManagedResource, MemoryResource, NativePoolResource, PlainResource};
pub use stats::StatisticsResource;

/// The version of the resource interface, as NBEP 7's `interface_version`
/// (version 1: the methods listed in this module's table).
pub const INTERFACE_VERSION: u32 = 1;
