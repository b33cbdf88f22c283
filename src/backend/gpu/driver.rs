//! The vendor driver table: what a GPU backend needs of its vendor's library.
//!
//! [`Driver`] is implemented by a value that stands for one opened device of
//! one vendor API (its retained CUDA primary context, its HIP device slot):
//! every object the device hands out holds an `Arc` of it, so the driver
//! state outlives every stream, buffer and module. The generic layer (the
//! rest of `backend::gpu`) makes the device current ([`Driver::bind`]),
//! checks arguments, ranges and devices, and owns every object; a driver
//! method only makes the vendor call and turns its status into an
//! [`Error`](crate::Error) naming that call.

use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::backend::graph::{CaptureMode, CaptureStatus};
use crate::backend::{Advice, DeviceInfo, ExportedPoolFd, IpcBytes, LaunchConfig, ManagedPlace, MemoryInfo, RawPool};
use crate::error::{BackendKind, Result};

use super::compile::Program;
use super::event_pool::EventPool;

/// A vendor handle that is a pointer, which other libraries of the same
/// vendor (PyTorch, CuPy, cuda-python, HIP Python) hand around as an integer.
pub trait RawAddress: Copy {
    /// The handle as an integer.
    fn address(self) -> usize;
    /// The handle an integer names.
    fn from_address(address: usize) -> Self;
}

impl<T> RawAddress for *mut T {
    fn address(self) -> usize {
        self as usize
    }
    fn from_address(address: usize) -> Self {
        address as *mut T
    }
}

/// One opened device of a vendor GPU API.
///
/// Public in name only: it lives in a private module, so no crate outside
/// gpuport can name, implement or call it, and `Gpu<D>` is a
/// [`Backend`](crate::Backend) for this crate's drivers alone.
///
/// # Safety
/// The layers above trust what a driver's calls do, so an implementation
/// promises:
/// - its handles (`Stream`, `Event`, `Module`, `Function`) may be used from
///   any thread once the device is current there (both vendor APIs are
///   thread-safe), and live until destroyed through this driver;
/// - an allocation returns the address of at least the requested bytes of
///   the memory kind its name says, on this device, valid until freed
///   through the matching method;
/// - copies, memsets and launches touch no memory but what their arguments
///   name, and a failure is an `Err`, never an invalid handle or address;
/// - its [`GraphCalls`] and [`PeerCalls`] keep their own contracts (the
///   same promises, for capture and graphs, and for peer access and copies
///   between two of its devices).
///
/// Every `unsafe fn` below asks of its caller, beyond what its own `# Safety`
/// says: this device is current on the calling thread ([`bind`](Self::bind)
/// succeeded), and every handle passed was made by this driver and is alive.
pub unsafe trait Driver: Sized + Send + Sync + 'static {
    // ---- identity -------------------------------------------------------------------

    /// Which backend this is.
    const KIND: BackendKind;

    /// How the public type names start (`Cuda` of `CudaBuffer`), for `Debug`.
    const NAME: &'static str;

    /// The platform's name in messages (`"there are 2 CUDA devices"`).
    const PLATFORM: &'static str;

    // ---- statuses -------------------------------------------------------------------

    /// A status code of the vendor API (`CUresult`, `hipError_t`).
    type Status: Copy + PartialEq;

    /// Success.
    const SUCCESS: Self::Status;

    /// A queried stream or event has work still to do.
    const NOT_READY: Self::Status;

    /// An allocation found no memory.
    const OUT_OF_MEMORY: Self::Status;

    /// The status as a number.
    fn code(status: Self::Status) -> i64;

    /// The status's name from the library, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
    fn error_name(status: Self::Status) -> String;

    /// The library's description of the status.
    fn error_string(status: Self::Status) -> String;

    // ---- devices --------------------------------------------------------------------

    /// Number of devices (an error says why there are none).
    fn count() -> Result<usize>;

    /// Opens device `ordinal` (below [`count`](Self::count)): the driver
    /// state for it, and its properties.
    fn open(ordinal: usize) -> Result<(Self, DeviceInfo)>;

    /// The device's ordinal.
    fn ordinal(&self) -> usize;

    /// Makes this device current on the calling thread (cheap when it already is).
    fn bind(&self) -> Result<()>;

    /// Free and total memory (the device is current).
    fn memory_info(&self) -> Result<MemoryInfo>;

    /// Waits for all work on the device (the device is current).
    fn synchronize_device(&self) -> Result<()>;

    // ---- memory ---------------------------------------------------------------------

    /// What [`Error::Unsupported`](crate::Error::Unsupported) says a device
    /// without stream-ordered allocation lacks (`"cuMemAllocAsync"`).
    const ASYNC_ALLOC: &'static str;

    /// Allocates `bytes` of device memory, uninitialized.
    ///
    /// # Safety
    /// As the trait's: the device is current.
    unsafe fn alloc(&self, bytes: usize) -> Result<u64>;

    /// Allocates `bytes` of device memory in the order of `stream`.
    ///
    /// # Safety
    /// As the trait's; the device supports stream-ordered allocation.
    unsafe fn alloc_async(&self, bytes: usize, stream: Self::Stream) -> Result<u64>;

    /// Allocates `bytes` of managed memory.
    ///
    /// # Safety
    /// As the trait's; the device supports managed memory.
    unsafe fn alloc_managed(&self, bytes: usize) -> Result<u64>;

    /// Frees device memory, in the order of `stream` where given.
    ///
    /// # Safety
    /// As the trait's; `ptr` came from an allocation of this driver (on
    /// `stream`, where given), is freed once, and nothing uses it after.
    unsafe fn free(&self, ptr: u64, stream: Option<Self::Stream>) -> Result<()>;

    /// `flags` bit of a host allocation pinned for every device.
    const HOST_ALLOC_PORTABLE: u32;

    /// `flags` bit of a host allocation mapped into the device's address space.
    const HOST_ALLOC_MAPPED: u32;

    /// `flags` bit of a write-combined host allocation.
    const HOST_ALLOC_WRITE_COMBINED: u32;

    /// Allocates `bytes` of page-locked host memory with the vendor's `flags`.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn host_alloc(&self, bytes: usize, flags: u32) -> Result<*mut u8>;

    /// Frees memory from [`host_alloc`](Self::host_alloc).
    ///
    /// # Safety
    /// As the trait's; `ptr` came from `host_alloc`, is freed once, and nothing uses it after.
    unsafe fn host_free(&self, ptr: *mut u8) -> Result<()>;

    /// `flags` bit of a host registration pinned for every device.
    const HOST_REGISTER_PORTABLE: u32;

    /// `flags` bit of a host registration mapped into the device's address space.
    const HOST_REGISTER_MAPPED: u32;

    /// Page-locks `ptr..ptr+len` with the vendor's `flags`.
    ///
    /// # Safety
    /// As the trait's; the range is valid host memory that outlives the registration.
    unsafe fn host_register(&self, ptr: *mut u8, len: usize, flags: u32) -> Result<()>;

    /// Undoes [`host_register`](Self::host_register).
    ///
    /// # Safety
    /// As the trait's; `ptr` was registered here and is unregistered once.
    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()>;

    /// The device address of mapped pinned memory at `host` (the device is
    /// current; an unmapped address is an error).
    fn host_device_ptr(&self, host: *mut u8) -> Result<u64>;

    // ---- streams --------------------------------------------------------------------

    /// A stream handle; [`NULL_STREAM`](Self::NULL_STREAM) is the default stream.
    /// Both vendors' handles are pointers, which other libraries pass around
    /// as integers ([`RawAddress`]).
    type Stream: Copy + fmt::Pointer + RawAddress;

    /// The default (null) stream, which is never destroyed.
    const NULL_STREAM: Self::Stream;

    /// Creates a stream that does not synchronize with the null stream (the device is current).
    fn stream_create(&self) -> Result<Self::Stream>;

    /// Destroys a stream; its pending work still completes.
    ///
    /// # Safety
    /// As the trait's; destroyed once, not used after.
    unsafe fn stream_destroy(&self, stream: Self::Stream) -> Result<()>;

    /// Waits for all work on `stream`.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn stream_synchronize(&self, stream: Self::Stream) -> Result<()>;

    /// Whether all work on `stream` is done.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn stream_query(&self, stream: Self::Stream) -> Result<bool>;

    /// Makes later work on `stream` wait for `event` (of any device).
    ///
    /// # Safety
    /// As the trait's; `event` is alive (it may belong to another device).
    unsafe fn stream_wait_event(&self, stream: Self::Stream, event: Self::Event) -> Result<()>;

    // ---- events ---------------------------------------------------------------------

    /// An event handle.
    type Event: Copy + fmt::Pointer;

    /// Creates an event with timing enabled (the device is current).
    fn event_create(&self) -> Result<Self::Event>;

    /// Creates an event with timing disabled, for ordering and completion
    /// queries only (the device is current): cheaper to record.
    fn event_create_untimed(&self) -> Result<Self::Event>;

    /// The device's pool of marker events for reuse (`event_pool.rs`): a
    /// field of the driver state, whose `Drop` empties it
    /// (`gpu::destroy_pooled_events`) before releasing the context.
    fn marker_events(&self) -> &EventPool<Self::Event>;

    /// Destroys an event.
    ///
    /// # Safety
    /// As the trait's; destroyed once, not used after.
    unsafe fn event_destroy(&self, event: Self::Event) -> Result<()>;

    /// Records `event` at the end of `stream`.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn event_record(&self, event: Self::Event, stream: Self::Stream) -> Result<()>;

    /// Waits for `event`.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn event_synchronize(&self, event: Self::Event) -> Result<()>;

    /// Whether `event` has completed.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn event_query(&self, event: Self::Event) -> Result<bool>;

    /// Milliseconds between two events (unrecorded or incomplete ones are an error).
    ///
    /// # Safety
    /// As the trait's; both events are alive (either may belong to another device).
    unsafe fn event_elapsed(&self, start: Self::Event, end: Self::Event) -> Result<f32>;

    // ---- copies ---------------------------------------------------------------------

    /// Enqueues copying `src` to device address `dst`.
    ///
    /// # Safety
    /// As the trait's; `dst..dst+src.len()` is live device memory, and both
    /// stay alive and untouched until `stream` passes the copy.
    unsafe fn copy_htod_async(&self, dst: u64, src: &[u8], stream: Self::Stream) -> Result<()>;

    /// Enqueues copying `dst.len()` bytes from device address `src` to `dst`.
    ///
    /// # Safety
    /// As [`copy_htod_async`](Self::copy_htod_async), the other way.
    unsafe fn copy_dtoh_async(&self, dst: &mut [u8], src: u64, stream: Self::Stream) -> Result<()>;

    /// Enqueues copying `len` bytes between device addresses.
    ///
    /// # Safety
    /// As [`copy_htod_async`](Self::copy_htod_async), for both ranges.
    unsafe fn copy_dtod_async(&self, dst: u64, src: u64, len: usize, stream: Self::Stream) -> Result<()>;

    /// Enqueues setting `len` bytes at device address `dst` to `value`.
    ///
    /// # Safety
    /// As [`copy_htod_async`](Self::copy_htod_async).
    unsafe fn memset_d8_async(&self, dst: u64, value: u8, len: usize, stream: Self::Stream) -> Result<()>;

    // ---- kernels: compiling ---------------------------------------------------------

    /// The file extension of the kernel dialect (`cu`, `hip`), for program names.
    const SOURCE_EXTENSION: &'static str;

    /// The runtime's built-in kernels ([`ModuleSource::Builtin`](crate::ModuleSource::Builtin)).
    const BUILTIN_SOURCE: &'static str;

    /// The array kernels' dialect file; each kernel is compiled alone from it.
    const ARRAY_OPS_SOURCE: &'static str;

    /// A precompiled image of the built-in kernels, tried before compiling
    /// [`BUILTIN_SOURCE`](Self::BUILTIN_SOURCE) (which stays the fallback
    /// where the device cannot load it).
    fn prebuilt_builtins() -> Option<&'static [u8]> {
        None
    }

    /// Compiler options for the built-in kernels beyond the target.
    fn builtin_options(&self) -> Vec<String> {
        Vec::new()
    }

    /// Compiles `program` for this device. A rejected program is
    /// [`Error::Compile`](crate::Error::Compile) with the compiler's log.
    fn compile(&self, info: &DeviceInfo, program: &Program<'_>) -> Result<Vec<u8>>;

    /// PTX text as an image [`module_load`](Self::module_load) takes, or why not.
    fn ptx_image(ptx: &str) -> Result<CString>;

    /// Refuses a binary image that is none of the vendor's formats, before
    /// the driver could read past a short buffer.
    fn check_image(image: &[u8]) -> Result<()>;

    // ---- modules --------------------------------------------------------------------

    /// A loaded module's handle.
    type Module: Copy + fmt::Pointer;

    /// Loads a module.
    ///
    /// # Safety
    /// As the trait's; `image` is a complete image of a format the vendor
    /// loads (checked, compiled, or NUL-terminated text) alive during the call.
    unsafe fn module_load(&self, image: *const c_void) -> Result<Self::Module>;

    /// Unloads a module.
    ///
    /// # Safety
    /// As the trait's; unloaded once, after the last use of its kernels.
    unsafe fn module_unload(&self, module: Self::Module) -> Result<()>;

    // ---- kernels --------------------------------------------------------------------

    /// A kernel's handle, valid while its module is loaded.
    type Function: Copy;

    /// The kernel `name` of `module`; `None` where the module has no such kernel.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn module_function(&self, module: Self::Module, name: &CStr) -> Result<Option<Self::Function>>;

    /// The names of `module`'s kernels, or a note saying why they cannot be
    /// listed, for [`Error::KernelNotFound`](crate::Error::KernelNotFound).
    /// `builtin`: the module is one of the library's own.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn kernel_names(&self, module: Self::Module, builtin: bool) -> String;

    /// What the driver tells of a kernel's parameters without a failing
    /// call (the built-ins' are known without asking it).
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn kernel_params(&self, function: Self::Function) -> Params;

    /// The size of parameter `index`, or `None` past the last one, where
    /// [`kernel_params`](Self::kernel_params) gave [`Params::Prefix`].
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn param_size(&self, function: Self::Function, index: usize) -> Option<usize> {
        let _ = (function, index);
        None
    }

    // ---- launches -------------------------------------------------------------------

    /// Whether [`Device::resident_launch_config`](crate::Device::resident_launch_config)
    /// caps the grid at the occupancy call's minimum grid for full occupancy;
    /// where not, it is the full grid [`Device::default_launch_config`](crate::Device::default_launch_config) gives.
    const RESIDENT_GRIDS: bool;

    /// The occupancy call's `(minimum grid for full occupancy, block size)`,
    /// without dynamic shared memory or a block-size limit.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn max_potential_block_size(&self, function: Self::Function) -> Result<(i32, i32)>;

    /// Launches kernel `f` with configuration `c` on stream `s`; `p` points
    /// at each argument's bytes.
    ///
    /// # Safety
    /// As the trait's; `p` matches the kernel's parameters, and every buffer
    /// the arguments name stays alive until `s` passes the launch.
    unsafe fn launch(&self, f: Self::Function, c: &LaunchConfig, s: Self::Stream, p: &mut [*mut c_void]) -> Result<()>;

    // ---- memory-resource support (`MemoryDevice`) -----------------------------------

    /// The device's default stream-ordered pool (the device supports them and is current).
    fn default_pool(&self) -> Result<RawPool>;

    /// Sets a pool's release threshold.
    ///
    /// # Safety
    /// As the trait's; `pool` is a live pool of this device.
    unsafe fn pool_set_release_threshold(&self, pool: RawPool, bytes: u64) -> Result<()>;

    /// Bytes a pool holds from the driver now.
    ///
    /// # Safety
    /// As [`pool_set_release_threshold`](Self::pool_set_release_threshold).
    unsafe fn pool_reserved(&self, pool: RawPool) -> Result<u64>;

    /// Releases a pool's unused memory down to `keep` bytes.
    ///
    /// # Safety
    /// As [`pool_set_release_threshold`](Self::pool_set_release_threshold).
    unsafe fn pool_trim_to(&self, pool: RawPool, keep: usize) -> Result<()>;

    /// The IPC handle of the allocation containing `ptr`, and its base (the device is current).
    fn ipc_get_handle(&self, ptr: u64) -> Result<(IpcBytes, u64)>;

    /// Maps another process's allocation; its base here (the device is current).
    fn ipc_open(&self, handle: &IpcBytes) -> Result<u64>;

    /// Unmaps what [`ipc_open`](Self::ipc_open) mapped.
    ///
    /// # Safety
    /// As the trait's; `base` came from `ipc_open`, is closed once, and nothing uses it after.
    unsafe fn ipc_close(&self, base: u64) -> Result<()>;

    /// Creates a pool of pinned device memory exportable as a POSIX file
    /// descriptor (the device supports pools and is current).
    fn pool_create_shareable(&self, info: &DeviceInfo) -> Result<RawPool>;

    /// Allocates from a pool in the order of `stream`; [`free`](Self::free)
    /// on that stream frees it.
    ///
    /// # Safety
    /// As [`pool_set_release_threshold`](Self::pool_set_release_threshold).
    unsafe fn pool_alloc_async(&self, pool: RawPool, bytes: usize, stream: Self::Stream) -> Result<u64>;

    /// Destroys a pool.
    ///
    /// # Safety
    /// As the trait's; live, destroyed once, not used after.
    unsafe fn pool_destroy(&self, pool: RawPool) -> Result<()>;

    /// Exports a pool as a POSIX file descriptor.
    ///
    /// # Safety
    /// As [`pool_set_release_threshold`](Self::pool_set_release_threshold).
    unsafe fn pool_export(&self, pool: RawPool) -> Result<ExportedPoolFd>;

    /// The export data of the pool block at `ptr` (the device is current).
    fn pool_export_pointer(&self, ptr: u64) -> Result<IpcBytes>;

    /// Imports another process's pool from descriptor `fd`, with read-write
    /// access for this device.
    ///
    /// # Safety
    /// As the trait's; `fd` is open and names a pool exported by this vendor.
    unsafe fn pool_import(&self, fd: i32) -> Result<RawPool>;

    /// Maps a block of an imported pool; its address here.
    ///
    /// # Safety
    /// As the trait's; `pool` came from [`pool_import`](Self::pool_import) and is live.
    unsafe fn pool_import_pointer(&self, pool: RawPool, data: &IpcBytes) -> Result<u64>;

    /// Frees a block mapped by [`pool_import_pointer`](Self::pool_import_pointer), synchronously.
    ///
    /// # Safety
    /// As the trait's; freed once, and no queued work uses it any more.
    unsafe fn free_imported(&self, ptr: u64) -> Result<()>;

    // ---- graphs ---------------------------------------------------------------------

    /// The vendor's stream-capture and graph calls, in a file of their own
    /// (`cuda/graph.rs`, `hip/graph.rs`).
    type Graphs: GraphCalls<Self>;

    // ---- peers ----------------------------------------------------------------------

    /// The vendor's peer-access and peer-copy calls, in a file of their own
    /// (`cuda/peer.rs`, `hip/peer.rs`).
    type Peers: PeerCalls<Self>;

    /// The vendor's calls that place managed memory, in a file of their own
    /// (`cuda/managed.rs`, `hip/managed.rs`).
    type Managed: ManagedCalls<Self>;

    /// The vendor's virtual memory management calls, in a file of their
    /// own (`cuda/vmm.rs`, `hip/vmm.rs`).
    type Vmm: VmmCalls<Self>;
}

/// The virtual memory management calls of vendor `D` (`cuMemAddressReserve`,
/// `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`, ...; `hipMem*`), for the
/// generic core's `growable.rs`. Physical allocations are device memory
/// pinned to one device, with no shareable handle (no IPC, no fabric), and
/// never multicast objects.
///
/// # Safety
/// As [`Driver`]'s: each call makes the vendor call its name says and
/// reports failure as an error; `reserve` returns addresses nothing else
/// uses, `create` memory nothing else uses. Every `unsafe fn` asks of its
/// caller what `Driver`'s do: `d`'s device is current, and every handle and
/// range passed came from `d` and is alive.
pub unsafe trait VmmCalls<D: Driver>: 'static {
    /// Whether device `ordinal` supports virtual memory management
    /// (`CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`,
    /// `hipDeviceAttributeVirtualMemoryManagementSupported`); `false` where
    /// the runtime lacks the calls.
    fn supported(d: &D, ordinal: usize) -> Result<bool>;

    /// The recommended granularity of device `ordinal`'s physical allocations.
    fn granularity(d: &D, ordinal: usize) -> Result<usize>;

    /// Reserves `bytes` of addresses aligned to `align`.
    ///
    /// # Safety
    /// As the trait's; `bytes` and `align` are multiples of the granularity.
    unsafe fn reserve(d: &D, bytes: usize, align: usize) -> Result<u64>;

    /// Frees a reservation, which must have nothing mapped.
    ///
    /// # Safety
    /// As the trait's; `ptr..ptr+bytes` is a whole live reservation of `d`.
    unsafe fn free_addresses(d: &D, ptr: u64, bytes: usize) -> Result<()>;

    /// Allocates `bytes` of physical memory on device `ordinal`; a handle.
    ///
    /// # Safety
    /// As the trait's; `bytes` is a multiple of the granularity.
    unsafe fn create(d: &D, ordinal: usize, bytes: usize) -> Result<u64>;

    /// Frees a physical allocation (once unmapped everywhere).
    ///
    /// # Safety
    /// As the trait's; `handle` came from `create` and is released once.
    unsafe fn release(d: &D, handle: u64) -> Result<()>;

    /// Maps the whole of `handle` (`bytes`) at `ptr`.
    ///
    /// # Safety
    /// As the trait's; `ptr..ptr+bytes` lies in a live reservation and has
    /// nothing mapped.
    unsafe fn map(d: &D, ptr: u64, bytes: usize, handle: u64) -> Result<()>;

    /// Lets device `ordinal` read and write `ptr..ptr+bytes`.
    ///
    /// # Safety
    /// As the trait's; the range is mapped.
    unsafe fn set_access(d: &D, ptr: u64, bytes: usize, ordinal: usize) -> Result<()>;

    /// Unmaps `ptr..ptr+bytes`.
    ///
    /// # Safety
    /// As the trait's; the range is one whole mapping, and nothing uses it.
    unsafe fn unmap(d: &D, ptr: u64, bytes: usize) -> Result<()>;
}

/// The managed-memory placement calls of vendor `D` (`cuMemPrefetchAsync`,
/// `hipMemAdvise`, ...), for the generic core's `resource.rs`.
///
/// # Safety
/// As [`Driver`]'s: each call makes the vendor call its name says and
/// reports failure as an error. Prefetching and advice move or map pages of
/// the range they name and never change its contents. Every `unsafe fn`
/// asks of its caller what `Driver`'s do: `d`'s device is current, and
/// every handle passed was made by `d` and is alive.
pub unsafe trait ManagedCalls<D: Driver>: 'static {
    /// Whether device `ordinal` of the vendor can access managed memory
    /// concurrently with the host, which prefetching to it needs
    /// (`CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`,
    /// `hipDeviceAttributeConcurrentManagedAccess`).
    fn concurrent_managed_access(d: &D, ordinal: usize) -> Result<bool>;

    /// Enqueues on `stream` (of `d`) moving `ptr..ptr+len` toward `to`.
    ///
    /// # Safety
    /// As the trait's; `ptr..ptr+len` is live managed memory, alive until
    /// `stream` passes the prefetch, and `to` names the host or an existing
    /// device.
    unsafe fn prefetch(d: &D, ptr: u64, len: usize, to: ManagedPlace, stream: D::Stream) -> Result<()>;

    /// Gives the driver `advice` about `ptr..ptr+len`, for `place`.
    ///
    /// # Safety
    /// As the trait's; `ptr..ptr+len` is live managed memory and `place`
    /// names the host or an existing device.
    unsafe fn advise(d: &D, ptr: u64, len: usize, advice: Advice, place: ManagedPlace) -> Result<()>;
}

/// The peer calls of vendor `D` (`cuDeviceCanAccessPeer`,
/// `hipMemcpyPeerAsync`, ...), for the generic core's `peer.rs`.
///
/// # Safety
/// As [`Driver`]'s: each call makes the vendor call its name says, between
/// the two devices it is given, and reports failure as an error. A peer copy
/// touches no memory but the two ranges it names. Every `unsafe fn` asks of
/// its caller what `Driver`'s do, for `d`: `d`'s device is current and every
/// handle passed was made by `d` and is alive.
pub unsafe trait PeerCalls<D: Driver>: 'static {
    /// Whether `d`'s device can address `peer`'s memory directly
    /// (`cuDeviceCanAccessPeer`, `hipDeviceCanAccessPeer`). `d` and `peer`
    /// are different devices.
    fn can_access_peer(d: &D, peer: &D) -> Result<bool>;

    /// Lets `d`'s device (current) address `peer`'s memory
    /// (`cuCtxEnablePeerAccess`, `hipDeviceEnablePeerAccess`); the vendor's
    /// "already enabled" status is success. `d` and `peer` are different devices.
    fn enable_peer_access(d: &D, peer: &D) -> Result<()>;

    /// Enqueues on `stream` (of `d`) copying `len` bytes from `src` of
    /// device `src_dev` to `dst` of device `dst_dev` (`cuMemcpyPeerAsync`,
    /// `hipMemcpyPeerAsync`); works without peer access.
    ///
    /// # Safety
    /// As the trait's; `src..src+len` is live memory of `src_dev`'s device
    /// and `dst..dst+len` of `dst_dev`'s, both alive and untouched by others
    /// until `stream` passes the copy; `d` is `src_dev` or `dst_dev`.
    unsafe fn copy_peer_async(
        d: &D,
        dst: u64,
        dst_dev: &D,
        src: u64,
        src_dev: &D,
        len: usize,
        stream: D::Stream,
    ) -> Result<()>;
}

/// The stream-capture and graph calls of vendor `D` (`cuStreamBeginCapture`,
/// `hipGraphLaunch`, ...), for the generic core's `graph.rs`.
///
/// # Safety
/// As [`Driver`]'s: each call makes the vendor call its name says and
/// reports failure as an error, never an invalid handle. Every `unsafe fn`
/// asks of its caller what `Driver`'s do: `d`'s device is current, and
/// every handle passed was made by `d` and is alive.
pub unsafe trait GraphCalls<D: Driver>: 'static {
    /// A captured graph (`CUgraph`, `hipGraph_t`).
    type Graph: Copy + fmt::Pointer;
    /// An executable graph (`CUgraphExec`, `hipGraphExec_t`).
    type Exec: Copy + fmt::Pointer;

    /// The status an operation on an invalidated capture returns
    /// (`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`, `hipErrorStreamCaptureInvalidated`).
    const CAPTURE_INVALIDATED: D::Status;

    /// Starts capturing `stream` in `mode`.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn begin_capture(d: &D, stream: D::Stream, mode: CaptureMode) -> Result<()>;

    /// Ends the capture of `stream`: its graph, or the error (the capture
    /// ends either way).
    ///
    /// # Safety
    /// As the trait's; `stream` is capturing.
    unsafe fn end_capture(d: &D, stream: D::Stream) -> Result<Self::Graph>;

    /// Whether `stream` is capturing.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn capture_status(d: &D, stream: D::Stream) -> Result<CaptureStatus>;

    /// Sets the calling thread's capture interaction mode and returns the
    /// one it had (`cuThreadExchangeStreamCaptureMode`,
    /// `hipThreadExchangeStreamCaptureMode`). In `Relaxed`, the thread's
    /// calls that could be unsafe during a capture (a free, an event query)
    /// no longer invalidate a global or thread-local capture.
    fn exchange_capture_mode(d: &D, mode: CaptureMode) -> Result<CaptureMode>;

    /// Number of nodes of `graph`.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn node_count(d: &D, graph: Self::Graph) -> Result<usize>;

    /// Instantiates `graph`.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn instantiate(d: &D, graph: Self::Graph) -> Result<Self::Exec>;

    /// Launches `exec` on `stream`.
    ///
    /// # Safety
    /// As the trait's; what the graph references is alive until the launch completes.
    unsafe fn launch(d: &D, exec: Self::Exec, stream: D::Stream) -> Result<()>;

    /// Updates `exec` from `graph`: `Ok(None)` when done, `Ok(Some(why))`
    /// when the driver refused (`exec` unchanged).
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn update(d: &D, exec: Self::Exec, graph: Self::Graph) -> Result<Option<String>>;

    /// Destroys `graph`.
    ///
    /// # Safety
    /// As the trait's; destroyed once, not used after.
    unsafe fn destroy_graph(d: &D, graph: Self::Graph) -> Result<()>;

    /// Destroys `exec` (launches in flight still complete).
    ///
    /// # Safety
    /// As the trait's; destroyed once, not used after.
    unsafe fn destroy_exec(d: &D, exec: Self::Exec) -> Result<()>;

    /// The driver's id of the capture running on `stream`
    /// (`cuStreamGetCaptureInfo`, `hipStreamGetCaptureInfo`), `None` when
    /// the stream does not capture. Ids are unique in the process.
    ///
    /// # Safety
    /// As the trait's.
    unsafe fn capture_id(d: &D, stream: D::Stream) -> Result<Option<u64>>;

    /// Hands `data` to the graph being captured on `stream`: the driver calls
    /// `release(data)`, once, on a thread of its own, when that graph and
    /// every executable graph made from it are destroyed and their launches
    /// have completed (`cuUserObjectCreate`, `cuGraphRetainUserObject` with
    /// `CU_GRAPH_USER_OBJECT_MOVE`). On an error `release` is never called:
    /// the caller treats `data` as held for good.
    ///
    /// # Safety
    /// As the trait's; `stream` is capturing; `release(data)` is sound to
    /// call once from any thread, and makes no call of this driver.
    unsafe fn retain_in_capture(
        d: &D,
        stream: D::Stream,
        data: *mut std::ffi::c_void,
        release: unsafe extern "C" fn(*mut std::ffi::c_void),
    ) -> Result<()>;
}

/// What a kernel's handle knows of its parameters.
#[derive(Clone, Debug)]
pub enum Params {
    /// Every parameter's size.
    Exact(Arc<[usize]>),
    /// The sizes of the first parameters, learnt from launches so far; a
    /// launch passing more arguments asks the driver for the next ones
    /// ([`Driver::param_size`]).
    Prefix(Arc<Mutex<Vec<usize>>>),
    /// Nothing: arguments are not checked.
    Unknown,
}
