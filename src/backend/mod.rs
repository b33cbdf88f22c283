//! The backend layer: the [`Device`] trait and one module per backend.
//!
//! Design (after wgpu-hal): each backend is a zero-sized type implementing
//! [`Backend`], whose associated types name that backend's streams, events,
//! buffers and kernels. Static dispatch means a CUDA buffer cannot even be
//! passed where a host device is expected. Run-time choice ("cuda:0" from a
//! string) goes through the closed enum [`Any`](any::Any) (a device is an
//! [`AnyDevice`](crate::AnyDevice)) and the
//! [`on_backend!`](crate::on_backend) macro, which monomorphizes generic
//! code once per compiled-in backend.
//!
//! Asynchronous operations are `unsafe fn`s: the GPU (or a host worker
//! thread) reads and writes the memory after the call returns, so the caller
//! must keep every operand alive and untouched until the stream has passed
//! the operation. Each has a safe synchronous twin that waits for completion.

use std::fmt;
use std::sync::Arc;

use crate::error::{BackendKind, Error, Result};

pub use graph::{Capture, CaptureMode, CaptureStatus, Graph, GraphExec, Owner};
pub use growable::{GrowableRange, MAX_RESERVATION};
pub(crate) use launch::check_kernel_args;
pub use launch::{KernelArg, KernelArgs, LaunchConfig};
pub use managed::{Advice, ManagedPlace};
pub use memory_device::{ExportedPoolFd, IpcBytes, MemoryDevice, PinnedFlags, RawPool};
pub use peer::PeerDevice;

pub mod any;
pub(crate) mod array_kernels;
pub(crate) mod bound;
pub(crate) mod gate;
pub mod graph;
pub(crate) mod growable;
pub mod host;
pub(crate) mod kernel_cache;
mod launch;
pub mod library;
pub(crate) mod managed;
mod memory_device;
pub(crate) mod order;
mod peer;
pub mod registry;

#[cfg(feature = "cuda")]
pub mod cuda;

#[cfg(any(feature = "cuda", feature = "rocm"))]
pub mod gpu;

#[cfg(feature = "rocm")]
pub mod hip;

/// Keeps [`Backend`] (and so [`Device`], whose backend names it) closed to
/// this crate's backends: the array, memory and DLPack layers' unsafe code
/// relies on what a backend's copies, buffers and kernels do.
pub(crate) mod sealed {
    use super::any::PerHostOrGpu;

    /// What every backend is: the host, or the GPU core over a driver.
    pub trait Sealed {
        /// `M::Host` on the host backend, `M::Gpu<D>` on the GPU backend
        /// over driver `D`.
        type Pick<M: PerHostOrGpu>: Send + Sync + std::fmt::Debug;
    }
    impl Sealed for super::host::Host {
        type Pick<M: PerHostOrGpu> = M::Host;
    }
    // Every `Gpu<D>`: `D` is a `gpu::Driver`, which only this crate can name.
    #[cfg(any(feature = "cuda", feature = "rocm"))]
    impl<D: super::gpu::Driver> Sealed for super::gpu::Gpu<D> {
        type Pick<M: PerHostOrGpu> = M::Gpu<D>;
    }
}

/// A backend: a family of devices and the types they hand out.
///
/// Sealed: only this crate's backends implement it, because unsafe code
/// above the backend layer trusts their copies, buffers and launches.
pub trait Backend: sealed::Sealed + 'static + Sized + Send + Sync + fmt::Debug {
    /// Which backend this is.
    const KIND: BackendKind;
    /// A device of this backend. Every device also implements
    /// [`MemoryDevice`], what the memory layer needs of it, so generic code
    /// over `D: Device` can allocate through the device's current resource
    /// (`crate::memory::current_resource::<D::B>`), and [`PeerDevice`], for
    /// peer access and copies between two devices of the backend.
    type Device: Device<B = Self> + MemoryDevice + PeerDevice;
    /// An in-order queue of work on one device; clones name the same queue.
    type Stream: Clone + Send + Sync + fmt::Debug + graph::CaptureStream<Self>;
    /// A marker recorded on a stream, to wait for or to time.
    type Event: Send + Sync + fmt::Debug;
    /// Device memory (or managed memory) owned by gpuport; freed on drop.
    type Buffer: DeviceMemoryMut<B = Self>;
    /// Page-locked host memory, readable and writable as a byte slice.
    type PinnedBuffer: HostMemory;
    /// Existing host memory pinned for fast copies until this is dropped.
    type HostRegistration: Send + Sync + fmt::Debug;
    /// A loaded module of kernels.
    type Module: Send + Sync + fmt::Debug;
    /// A kernel, kept valid by the module it came from.
    type Kernel: Clone + Send + Sync + fmt::Debug;
    /// A captured graph, as the backend holds it (inside a [`Graph`]).
    type RawGraph: graph::RawGraph<Self>;
    /// An executable graph, as the backend holds it (inside a [`GraphExec`]).
    type RawGraphExec: graph::RawGraphExec<Self>;
}

/// Shorthand for a backend's stream type.
pub type Stream<B> = <B as Backend>::Stream;
/// Shorthand for a backend's event type.
pub type Event<B> = <B as Backend>::Event;
/// Shorthand for a backend's device buffer type.
pub type Buffer<B> = <B as Backend>::Buffer;
/// Shorthand for a backend's pinned host buffer type.
pub type PinnedBuffer<B> = <B as Backend>::PinnedBuffer;
/// Shorthand for a backend's host-registration type.
pub type HostRegistration<B> = <B as Backend>::HostRegistration;
/// Shorthand for a backend's module type.
pub type Module<B> = <B as Backend>::Module;
/// Shorthand for a backend's kernel type.
pub type Kernel<B> = <B as Backend>::Kernel;

/// Where a buffer's memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Ordinary device memory.
    Device,
    /// Unified (managed) memory, reachable from host and device.
    Managed,
    /// Page-locked host memory.
    Pinned,
    /// Ordinary host memory (the host backend's "device" memory).
    Host,
}

/// A range of device memory of backend `B`: a buffer, or a piece of one
/// (a pool sub-allocation, an imported tensor). Copies, memsets and kernel
/// arguments accept any `DeviceMemory` of the device's own backend, so
/// memory of another backend is a compile error.
///
/// Reading needs `&M`; the safe calls that write ([`Device::copy_to_device`],
/// [`Device::copy_device`], [`Device::memset`]) need `&mut M` of a
/// [`DeviceMemoryMut`], so no shared view of the bytes can be alive while
/// they are written.
///
/// # Safety
/// The library's safe calls copy to and from `device_ptr()..device_ptr() +
/// len()` on the strength of these answers alone, so an implementation
/// promises, for as long as the value is alive:
/// - `device_ptr()..device_ptr() + len()` is one live allocation (or a part
///   of one) of device `ordinal()` of backend `B`, of memory kind `kind()`,
///   that the device may read and write, and that no one frees before this
///   value (and, where [`owner`](Self::owner) returns one, that owner) is
///   dropped;
/// - the four answers never change;
/// - where `owner()` returns `Some`, holding that owner keeps the memory
///   allocated even after this value is dropped.
pub unsafe trait DeviceMemory: Send + Sync + fmt::Debug {
    /// The backend whose device owns the memory.
    type B: Backend;
    /// Size in bytes.
    fn len(&self) -> usize;
    /// Whether the buffer has zero bytes (never true: zero-size allocations are refused).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The address as the device sees it (`CUdeviceptr`, or a host address).
    fn device_ptr(&self) -> u64;
    /// The ordinal of the device that owns the memory.
    fn ordinal(&self) -> usize;
    /// Where the memory lives.
    fn kind(&self) -> MemoryKind;
    /// A reference-counted owner that keeps the memory alive, where there is
    /// one. Backends that run queued work on host threads hold it until the
    /// work has run, so dropping the handle early cannot free the memory.
    fn owner(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        None
    }
}

/// Device memory that a `&mut` borrow has to itself: what the safe writing
/// calls take.
///
/// # Safety
/// While a `&mut Self` is alive, no other value reachable from safe code
/// reads or writes these bytes: the type hands out no second handle (a
/// clone, a shared `Arc`) or view of the same memory except by borrowing
/// `self`. An `Arc<M>` is therefore never `DeviceMemoryMut`.
pub unsafe trait DeviceMemoryMut: DeviceMemory {}

/// Shared memory is still memory to read: an `Arc` of a buffer can be passed
/// wherever a buffer is read (arrays share their device copy with DLPack
/// exports). It cannot be written through safely: `Arc` is not
/// [`DeviceMemoryMut`].
// SAFETY: every answer is forwarded to the one value the `Arc` keeps alive.
unsafe impl<M: DeviceMemory + ?Sized> DeviceMemory for Arc<M> {
    type B = M::B;
    fn len(&self) -> usize {
        (**self).len()
    }
    fn device_ptr(&self) -> u64 {
        (**self).device_ptr()
    }
    fn ordinal(&self) -> usize {
        (**self).ordinal()
    }
    fn kind(&self) -> MemoryKind {
        (**self).kind()
    }
    fn owner(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        (**self).owner()
    }
}

/// Host memory handed out by a backend (pinned buffers).
pub trait HostMemory: Send + Sync + fmt::Debug {
    /// The memory as bytes.
    fn as_slice(&self) -> &[u8];
    /// The memory as mutable bytes.
    fn as_mut_slice(&mut self) -> &mut [u8];
}

/// Static properties of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Which backend.
    pub backend: BackendKind,
    /// Index of the device within its backend.
    pub ordinal: usize,
    /// The vendor's name for it.
    pub name: String,
    /// Architecture: `sm_90` (CUDA), `gfx90a` (ROCm) or the host CPU arch.
    pub arch: String,
    /// Streaming multiprocessors / compute units / CPU cores.
    pub multiprocessors: u32,
    /// Total memory in bytes.
    pub total_memory: usize,
    /// Whether the device supports managed (unified) memory.
    pub managed_memory: bool,
    /// Whether the device supports stream-ordered allocation.
    pub stream_ordered_alloc: bool,
    /// Launch limits.
    pub limits: DeviceLimits,
}

impl DeviceInfo {
    /// The spec that opens this device again, e.g. `"cuda:0"`.
    pub fn spec(&self) -> String {
        match self.backend {
            BackendKind::Host => "host".to_string(),
            b => format!("{b}:{}", self.ordinal),
        }
    }
}

/// Launch limits of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Most threads in one block.
    pub max_threads_per_block: u32,
    /// Most threads per block along x, y, z.
    pub max_block_dim: [u32; 3],
    /// Most blocks along x, y, z.
    pub max_grid_dim: [u32; 3],
    /// Most static + dynamic shared memory per block, in bytes.
    pub max_shared_memory_per_block: usize,
    /// Threads that execute in lockstep (32 on NVIDIA, 32/64 on AMD, 1 on host).
    pub warp_size: u32,
}

/// Free and total memory of a device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes free now.
    pub free: usize,
    /// Bytes in total.
    pub total: usize,
}

/// Where a module's code comes from.
#[derive(Debug, Clone, Copy)]
pub enum ModuleSource<'a> {
    /// Source in the backend's kernel dialect (CUDA C++ / HIP C++), compiled
    /// at run time by NVRTC / hiprtc with the given options.
    Source {
        /// The program text.
        code: &'a str,
        /// A name for logs and error messages.
        name: &'a str,
        /// Compiler options, e.g. `["-default-device"]`.
        options: &'a [&'a str],
    },
    /// PTX text (CUDA only).
    Ptx(&'a str),
    /// A cubin, fatbin or HIP code object.
    Binary(&'a [u8]),
    /// The library's built-in kernels (see [`builtin`]).
    Builtin,
}

/// Names of the built-in kernels every backend provides in its
/// [`ModuleSource::Builtin`] module.
pub mod builtin {
    /// Does nothing; for launch-latency measurement. No arguments.
    pub const EMPTY: &str = "gpuport_empty";
    /// Busy-waits on the device for `ns: u64` nanoseconds (one thread suffices).
    /// Used to hold a stream busy in tests of asynchronous behaviour.
    pub const SLEEP_NS: &str = "gpuport_sleep_ns";
    /// `fill_u32(ptr: u64, n: u64, value: u32)`: writes `value` to `n` u32s.
    pub const FILL_U32: &str = "gpuport_fill_u32";
    /// Every built-in kernel name.
    pub const ALL: [&str; 3] = [EMPTY, SLEEP_NS, FILL_U32];
}

/// A `device_ptr` (a device, managed or mapped address, or a host-backend
/// buffer's host address) as a `usize`, to make a raw pointer of. Every
/// backend's addresses are of the host's pointer width: the host backend's
/// are host pointers widened to `u64`, and CUDA and ROCm run on 64-bit hosts
/// only, so narrowing loses nothing.
#[allow(clippy::cast_possible_truncation)] // see above: a pointer-wide address in a u64
pub(crate) fn address_to_usize(device_ptr: u64) -> usize {
    device_ptr as usize
}

/// A process-wide unique id for a new stream wrapper ([`Device::stream_id`]),
/// shared by the GPU backends.
#[allow(dead_code)] // unused when no GPU backend is compiled in
pub(crate) fn next_stream_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A device of one backend: memory, streams, events, copies and kernels.
///
/// Every object a device hands out remembers its device; passing an object
/// of another device of the same backend is an [`Error::DeviceMismatch`].
/// Objects of another backend cannot be passed at all: the types differ.
pub trait Device: Send + Sync + fmt::Debug + Sized + 'static {
    /// The backend this device belongs to.
    type B: Backend<Device = Self>;

    /// Opens device `ordinal` of this backend.
    fn open(ordinal: usize) -> Result<Arc<Self>>;
    /// Number of devices this backend can see (an error says why none).
    fn count() -> Result<usize>;

    /// Static properties.
    fn info(&self) -> &DeviceInfo;
    /// Free and total memory now.
    fn memory_info(&self) -> Result<MemoryInfo>;

    // ---- memory ----------------------------------------------------------

    /// Allocates `bytes` of device memory (contents unspecified).
    fn alloc(&self, bytes: usize) -> Result<Buffer<Self::B>>;
    /// Allocates `bytes` of device memory in stream order: the memory may be
    /// used by work on `stream` enqueued after this call, and is freed in
    /// stream order on `stream` when dropped.
    fn alloc_async(&self, bytes: usize, stream: &Stream<Self::B>) -> Result<Buffer<Self::B>>;
    /// Allocates managed (unified) memory, or [`Error::Unsupported`].
    fn alloc_managed(&self, bytes: usize) -> Result<Buffer<Self::B>>;
    /// Allocates page-locked host memory, zero-filled.
    fn alloc_pinned(&self, bytes: usize) -> Result<PinnedBuffer<Self::B>>;
    /// Page-locks existing host memory until the registration is dropped.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid host memory that outlives the returned
    /// registration.
    unsafe fn register_host(&self, ptr: *mut u8, len: usize) -> Result<HostRegistration<Self::B>>;

    // ---- streams and events ----------------------------------------------

    /// The device's default stream.
    fn default_stream(&self) -> &Stream<Self::B>;
    /// Creates a new stream that does not synchronize with the default stream.
    fn create_stream(&self) -> Result<Stream<Self::B>>;
    /// A number naming `stream` (and its clones) that no other stream of this
    /// process ever gets, or `None` where the backend cannot tell streams
    /// apart. Memory pools key their per-stream free lists on it; with `None`
    /// they treat every free as a cross-stream one (correct, slower).
    fn stream_id(&self, stream: &Stream<Self::B>) -> Option<u64> {
        let _ = stream;
        None
    }
    /// Whether `stream` is a handle borrowed from another library (not made
    /// by gpuport, not a default stream): its owner may destroy it while
    /// gpuport still holds the handle, so code that keeps a stream for later
    /// (a pool's free lists) must not name it once the call that passed it
    /// in has returned.
    fn stream_is_borrowed(&self, stream: &Stream<Self::B>) -> bool {
        let _ = stream;
        false
    }
    /// Blocks until all work on `stream` is done.
    fn synchronize(&self, stream: &Stream<Self::B>) -> Result<()>;
    /// Blocks until all work on every stream of this device is done
    /// (`cuCtxSynchronize`, `hipDeviceSynchronize`): what a synchronous
    /// free implies, for memory whose users' streams are unknown.
    fn synchronize_device(&self) -> Result<()>;
    /// Whether all work enqueued on `stream` so far is done.
    fn is_idle(&self, stream: &Stream<Self::B>) -> Result<bool>;
    /// Creates an event (with timing enabled).
    fn create_event(&self) -> Result<Event<Self::B>>;
    /// Creates an event for ordering and completion queries only: no
    /// timing ([`elapsed_ms`](Self::elapsed_ms) may refuse it), which makes
    /// recording it cheaper on GPUs (`CU_EVENT_DISABLE_TIMING`). The
    /// default is [`create_event`](Self::create_event). On GPUs the event
    /// may be one a dropped marker event left to its device's pool
    /// (`src/backend/gpu/event_pool.rs`): record it before waiting on it or
    /// querying it, or it may still stand for its earlier holder's work.
    fn create_marker_event(&self) -> Result<Event<Self::B>> {
        self.create_event()
    }
    /// Records `event` at the current end of `stream`.
    fn record_event(&self, event: &Event<Self::B>, stream: &Stream<Self::B>) -> Result<()>;
    /// Makes later work on `stream` wait until `event` completes (no host wait).
    fn wait_event(&self, stream: &Stream<Self::B>, event: &Event<Self::B>) -> Result<()>;
    /// Blocks until `event` has completed.
    fn synchronize_event(&self, event: &Event<Self::B>) -> Result<()>;
    /// Whether `event` has completed.
    fn event_is_complete(&self, event: &Event<Self::B>) -> Result<bool>;
    /// Milliseconds between two completed events.
    fn elapsed_ms(&self, start: &Event<Self::B>, end: &Event<Self::B>) -> Result<f32>;

    // ---- graphs (see [`graph`]) -------------------------------------------

    /// Starts capturing `stream` into a graph: work enqueued on it is
    /// recorded, not run, until [`Capture::end`] returns the [`Graph`].
    /// A stream already capturing is [`GraphErrorKind::AlreadyCapturing`](crate::GraphErrorKind::AlreadyCapturing),
    /// the default stream [`GraphErrorKind::DefaultStream`](crate::GraphErrorKind::DefaultStream).
    fn begin_capture(&self, stream: &Stream<Self::B>, mode: CaptureMode) -> Result<Capture<Self::B>> {
        Capture::begin(self, stream, mode)
    }

    /// Whether `stream` is capturing (on GPUs, the driver's answer:
    /// `cuStreamIsCapturing`, `hipStreamIsCapturing`).
    fn capture_status(&self, stream: &Stream<Self::B>) -> Result<CaptureStatus> {
        graph::CaptureStream::capture_status(stream)
    }

    /// While a gpuport capture runs on `stream`, gives `owner` to its graph,
    /// which keeps it as long as the graph and every executable graph made
    /// from it. While another library's capture runs there (a foreign
    /// stream that library captures), the driver's graph holds it the same
    /// way (a CUDA/HIP user object), or, where the driver cannot, it is kept
    /// for the rest of the process. Otherwise drops it.
    fn keep_for_graph(&self, stream: &Stream<Self::B>, owner: graph::Owner) {
        graph::CaptureStream::keep_for_graph(stream, owner)
    }

    /// The id of the capture running on `stream` (gpuport's, or on GPUs
    /// another library's), `None` when it does not capture: what the
    /// caching pool files a capture's memory under.
    fn capture_id(&self, stream: &Stream<Self::B>) -> Result<Option<u64>> {
        graph::CaptureStream::capture_id(stream)
    }

    // ---- copies ----------------------------------------------------------

    /// Enqueues a copy of `src` into `dst[dst_offset..]` on `stream`.
    ///
    /// # Safety
    /// `src` and `dst` must stay alive, `src` unmodified, and `dst`'s bytes
    /// unread by anyone else (no host view of them), until `stream` has
    /// passed this copy (synchronize the stream or an event after it).
    unsafe fn copy_to_device_async<M: DeviceMemory<B = Self::B> + ?Sized>(
        &self,
        src: &[u8],
        dst: &M,
        dst_offset: usize,
        stream: &Stream<Self::B>,
    ) -> Result<()>;

    /// Enqueues a copy of `src[src_offset..src_offset+dst.len()]` into `dst`.
    ///
    /// # Safety
    /// `src` and `dst` must stay alive, and `dst` unread and unwritten by the
    /// host, until `stream` has passed this copy.
    unsafe fn copy_to_host_async<M: DeviceMemory<B = Self::B> + ?Sized>(
        &self,
        src: &M,
        src_offset: usize,
        dst: &mut [u8],
        stream: &Stream<Self::B>,
    ) -> Result<()>;

    /// Enqueues a device-to-device copy of `len` bytes.
    ///
    /// # Safety
    /// Both buffers must stay alive, and `dst`'s bytes unread by anyone else
    /// (no host view of them), until `stream` has passed this copy.
    unsafe fn copy_device_async<S: DeviceMemory<B = Self::B> + ?Sized, M: DeviceMemory<B = Self::B> + ?Sized>(
        &self,
        src: &S,
        src_offset: usize,
        dst: &M,
        dst_offset: usize,
        len: usize,
        stream: &Stream<Self::B>,
    ) -> Result<()>;

    /// Enqueues setting `len` bytes of `dst` from `offset` to `value`.
    ///
    /// # Safety
    /// `dst` must stay alive, and its bytes unread by anyone else (no host
    /// view of them), until `stream` has passed this operation.
    unsafe fn memset_async<M: DeviceMemory<B = Self::B> + ?Sized>(
        &self,
        dst: &M,
        offset: usize,
        len: usize,
        value: u8,
        stream: &Stream<Self::B>,
    ) -> Result<()>;

    /// Copies `src` into `dst[dst_offset..]` and waits for it.
    fn copy_to_device<M: DeviceMemoryMut<B = Self::B> + ?Sized>(
        &self,
        src: &[u8],
        dst: &mut M,
        dst_offset: usize,
    ) -> Result<()> {
        let s = self.default_stream();
        // SAFETY: we wait for the stream before returning, so `src` and
        // `dst` outlive the copy, and `&mut dst` keeps every other view of
        // its bytes away meanwhile.
        unsafe { self.copy_to_device_async(src, &*dst, dst_offset, s)? };
        self.synchronize(s)
    }

    /// Copies `src[src_offset..src_offset + dst.len()]` into `dst` and waits.
    fn copy_to_host<M: DeviceMemory<B = Self::B> + ?Sized>(
        &self,
        src: &M,
        src_offset: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        let s = self.default_stream();
        // SAFETY: as in `copy_to_device`.
        unsafe { self.copy_to_host_async(src, src_offset, dst, s)? };
        self.synchronize(s)
    }

    /// Copies `len` bytes between device buffers and waits.
    fn copy_device<S: DeviceMemory<B = Self::B> + ?Sized, M: DeviceMemoryMut<B = Self::B> + ?Sized>(
        &self,
        src: &S,
        src_offset: usize,
        dst: &mut M,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let s = self.default_stream();
        // SAFETY: as in `copy_to_device`.
        unsafe { self.copy_device_async(src, src_offset, &*dst, dst_offset, len, s)? };
        self.synchronize(s)
    }

    /// Sets `len` bytes of `dst` from `offset` to `value` and waits.
    fn memset<M: DeviceMemoryMut<B = Self::B> + ?Sized>(
        &self,
        dst: &mut M,
        offset: usize,
        len: usize,
        value: u8,
    ) -> Result<()> {
        let s = self.default_stream();
        // SAFETY: as in `copy_to_device`.
        unsafe { self.memset_async(&*dst, offset, len, value, s)? };
        self.synchronize(s)
    }

    // ---- kernels ---------------------------------------------------------

    /// Loads a module from source, PTX, a binary, or the built-ins.
    fn load_module(&self, source: ModuleSource<'_>) -> Result<Module<Self::B>>;
    /// Looks a kernel up by name.
    fn kernel(&self, module: &Module<Self::B>, name: &str) -> Result<Kernel<Self::B>>;
    /// A built-in kernel by name: the runtime's ([`builtin`]) and the array
    /// kernels of [`crate::kernels`]. GPU backends compile array kernels on
    /// first use, one per program, and cache them.
    fn builtin_kernel(&self, name: &str) -> Result<Kernel<Self::B>> {
        let module = self.load_module(ModuleSource::Builtin)?;
        self.kernel(&module, name)
    }

    /// A launch configuration covering `n` threads with the block size the
    /// occupancy API suggests for `kernel` (or a fixed default without one).
    fn default_launch_config(&self, kernel: &Kernel<Self::B>, n: usize) -> Result<LaunchConfig>;
    /// A launch configuration for a grid-stride kernel doing `n` items of
    /// work: the occupancy-suggested block size, and no more blocks than the
    /// device runs at once (nor than `n` needs).
    fn resident_launch_config(&self, kernel: &Kernel<Self::B>, n: usize) -> Result<LaunchConfig> {
        self.default_launch_config(kernel, n)
    }

    /// Enqueues a kernel launch.
    ///
    /// # Safety
    /// - `args` must match the kernel's parameters in number, order and type;
    ///   where the backend can check counts and sizes it does, but it cannot
    ///   check types.
    /// - Every buffer whose address is in `args` must stay alive until
    ///   `stream` has passed the launch, and the kernel must not access
    ///   memory outside those buffers.
    unsafe fn launch(
        &self,
        kernel: &Kernel<Self::B>,
        config: LaunchConfig,
        args: &KernelArgs,
        stream: &Stream<Self::B>,
    ) -> Result<()>;
}

/// Checks that `offset..offset+len` lies inside a buffer of `capacity` bytes.
pub(crate) fn check_range(what: &'static str, offset: usize, len: usize, capacity: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(Error::OutOfBounds { what, offset, len, capacity }),
    }
}

/// Refuses zero-size allocations with a clear message.
pub(crate) fn check_alloc_size(bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Err(Error::InvalidArgument {
            name: "bytes",
            reason: "a zero-byte allocation was requested; sizes must be at least 1".into(),
        });
    }
    if bytes > isize::MAX as usize {
        return Err(Error::InvalidArgument {
            name: "bytes",
            reason: format!("{bytes} bytes exceeds the largest possible allocation ({})", isize::MAX),
        });
    }
    Ok(())
}

/// Checks that an object of device `found` may be used on device `expected`.
#[cfg_attr(not(any(feature = "cuda", feature = "rocm")), allow(dead_code))]
pub(crate) fn check_same_device(what: &'static str, backend: BackendKind, expected: usize, found: usize) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(Error::DeviceMismatch {
            what,
            expected: format!("{backend}:{expected}"),
            found: format!("{backend}:{found}"),
        })
    }
}
