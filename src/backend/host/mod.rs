//! The host backend: always compiled, the default where no GPU is present.
//!
//! It behaves like a GPU backend for real, so code tested here exercises the
//! same ordering rules it will meet on a GPU:
//! - "device" memory is separate host allocations (never the caller's memory);
//! - each stream is an in-order queue run by its own worker thread
//!   (`host/stream.rs`), so async copies return before they happen and
//!   events complete later;
//! - kernels are the library's built-ins implemented in Rust (the array
//!   kernels in `host/kernels.rs`); a foreign source or binary is [`Error::Unsupported`].
//!
//! Queued work holds a reference to every buffer it touches, so dropping a
//! host buffer while work on it is queued cannot free it early.
//!
//! A capturing stream keeps the closures it would have queued, with those
//! references, as the nodes of a graph that replays them in order
//! (`graph.rs`, [`crate::backend::graph`]).

mod kernels;

use crate::backend::managed::{check_managed, check_place};
use crate::backend::{Advice, ManagedPlace};
use std::alloc::Layout;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use super::{
    builtin, check_alloc_size, check_kernel_args, check_range, Backend, Device, DeviceInfo, DeviceLimits, DeviceMemory,
    DeviceMemoryMut, HostMemory, KernelArgs, LaunchConfig, MemoryDevice, MemoryInfo, MemoryKind, ModuleSource,
    PinnedFlags,
};
use crate::error::{BackendKind, Error, Result};

mod capture;
mod graph;
mod growable;
mod stream;

use capture::NodeKind;
pub use graph::{HostGraph, HostGraphExec};
use stream::Pending;
pub use stream::{HostEvent, HostStream};

/// Alignment of host "device" allocations, matching what GPU allocators give.
const ALIGN: usize = 256;

/// The host backend.
#[derive(Debug, Clone, Copy)]
pub struct Host;

impl Backend for Host {
    const KIND: BackendKind = BackendKind::Host;
    type Device = HostDevice;
    type Stream = HostStream;
    type Event = HostEvent;
    type Buffer = HostBuffer;
    type PinnedBuffer = HostBuffer;
    type HostRegistration = HostRegistration;
    type Module = HostModule;
    type Kernel = HostKernel;
    type RawGraph = HostGraph;
    type RawGraphExec = HostGraphExec;
}

// ---- memory -----------------------------------------------------------------

/// An aligned heap allocation, freed when the last reference goes.
struct Allocation {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the allocation is plain bytes owned by this struct; access is
// governed by the `Device` trait's contracts, as for GPU memory.
unsafe impl Send for Allocation {}
// SAFETY: as above; `&Allocation` only exposes the address.
unsafe impl Sync for Allocation {}

impl Allocation {
    fn new(bytes: usize) -> Result<Self> {
        check_alloc_size(bytes)?;
        let layout = Layout::from_size_align(bytes, ALIGN)
            .map_err(|e| Error::InvalidArgument { name: "bytes", reason: e.to_string() })?;
        // SAFETY: `layout` has non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::OutOfMemory { backend: BackendKind::Host, ordinal: 0, bytes });
        }
        Ok(Allocation { ptr, layout })
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with this `layout`, once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// Host memory standing in for device, managed or pinned memory.
///
/// Not `Clone`: two handles on one allocation would let safe code hold
/// `&[u8]` and `&mut [u8]` of the same bytes. Queued work keeps the
/// allocation alive through [`DeviceMemory::owner`] instead.
pub struct HostBuffer {
    alloc: Arc<Allocation>,
    kind: MemoryKind,
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer")
            .field("ptr", &self.alloc.ptr)
            .field("len", &self.alloc.layout.size())
            .field("kind", &self.kind)
            .finish()
    }
}

// SAFETY: the answers describe `alloc`, which lives while this buffer or
// the owner handed out (the same `Arc`) does.
unsafe impl DeviceMemory for HostBuffer {
    type B = Host;
    fn len(&self) -> usize {
        self.alloc.layout.size()
    }
    fn device_ptr(&self) -> u64 {
        self.alloc.ptr as u64
    }
    fn ordinal(&self) -> usize {
        0
    }
    fn kind(&self) -> MemoryKind {
        self.kind
    }
    fn owner(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        Some(self.alloc.clone())
    }
}

// SAFETY: `HostBuffer` is not `Clone` and hands out no second handle; views
// of its bytes (`as_slice`, `View::from_buffer`) borrow it.
unsafe impl DeviceMemoryMut for HostBuffer {}

impl HostMemory for HostBuffer {
    fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation is `len` initialized (zeroed) bytes alive as
        // long as `self`; pinned buffers are only written through `&mut self`
        // or by queued copies whose contract forbids concurrent host access.
        unsafe { std::slice::from_raw_parts(self.alloc.ptr, self.len()) }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` excludes other borrows of this handle.
        unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr, self.len()) }
    }
}

/// Host memory "pinned" on the host backend: a no-op registration.
#[derive(Debug)]
pub struct HostRegistration {
    _len: usize,
}

// ---- kernels ------------------------------------------------------------------

/// A built-in kernel implemented in Rust: runs the whole grid on the worker.
pub(crate) type HostKernelFn = fn(&KernelArgs, LaunchConfig) -> std::result::Result<(), String>;

/// A built-in kernel: its name, implementation and parameter sizes in bytes.
#[derive(Clone, Copy)]
pub(crate) struct HostKernelDef {
    pub(crate) name: &'static str,
    pub(crate) func: HostKernelFn,
    pub(crate) params: &'static [usize],
}

/// The built-in module of the host backend.
pub struct HostModule {
    kernels: &'static HashMap<&'static str, HostKernelDef>,
}

impl fmt::Debug for HostModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.kernels.keys()).finish()
    }
}

/// A host kernel.
#[derive(Clone)]
pub struct HostKernel {
    /// The built-in table's entry (which lives as long as the process).
    def: &'static HostKernelDef,
}

impl fmt::Debug for HostKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostKernel({})", self.def.name)
    }
}

fn arg<T: super::KernelArg>(args: &KernelArgs, index: usize, what: &str) -> std::result::Result<T, String> {
    args.get::<T>(index).ok_or_else(|| format!("argument {index} ({what}) must be a {}", std::any::type_name::<T>()))
}

fn kernel_empty(_: &KernelArgs, _: LaunchConfig) -> std::result::Result<(), String> {
    Ok(())
}

fn kernel_sleep_ns(args: &KernelArgs, _: LaunchConfig) -> std::result::Result<(), String> {
    thread::sleep(Duration::from_nanos(arg::<u64>(args, 0, "ns")?));
    Ok(())
}

fn kernel_fill_u32(args: &KernelArgs, _: LaunchConfig) -> std::result::Result<(), String> {
    let ptr = arg::<u64>(args, 0, "ptr")? as *mut u32;
    let n = arg::<u64>(args, 1, "n")?;
    let n = usize::try_from(n).map_err(|_| format!("argument 1 (n) is {n}, more elements than this host addresses"))?;
    let value = arg::<u32>(args, 2, "value")?;
    // The CUDA/HIP versions are grid-stride loops: every element is written
    // whatever the grid size, and so it is here.
    for i in 0..n {
        // SAFETY: the launch contract says `ptr` addresses at least `n` u32s
        // of a live buffer, and i < n.
        unsafe { ptr.add(i).write_unaligned(value) };
    }
    Ok(())
}

/// The runtime built-ins and the array kernels (`host/kernels.rs`), built once.
fn builtin_module() -> HostModule {
    HostModule { kernels: builtin_table() }
}

/// Parameter sizes of a built-in kernel (the same on every backend), for
/// backends whose driver cannot report them.
#[cfg_attr(not(feature = "rocm"), allow(dead_code))]
pub(crate) fn builtin_params(name: &str) -> Option<&'static [usize]> {
    builtin_table().get(name).map(|def| def.params)
}

fn builtin_table() -> &'static HashMap<&'static str, HostKernelDef> {
    static TABLE: OnceLock<HashMap<&'static str, HostKernelDef>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let def = |name, func, params| (name, HostKernelDef { name, func, params });
        let runtime: [(&'static str, HostKernelDef); 3] = [
            def(builtin::EMPTY, kernel_empty, &[]),
            def(builtin::SLEEP_NS, kernel_sleep_ns, &[8]),
            def(builtin::FILL_U32, kernel_fill_u32, &[8, 8, 4]),
        ];
        runtime.into_iter().chain(kernels::array_kernels()).collect()
    })
}

// ---- device -------------------------------------------------------------------

/// The host device (`"host"`).
pub struct HostDevice {
    info: DeviceInfo,
    default_stream: HostStream,
    /// The work accounting of every stream made on this device (dead ones
    /// pruned when a stream is made), for `synchronize_device`.
    streams: Mutex<Vec<Weak<Pending>>>,
}

impl fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostDevice({})", self.info.name)
    }
}

/// Raw pointer that may cross to a worker thread; the `Device` contracts
/// make the pointee outlive the queued work.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: see the type's doc: the async-op contracts keep the pointee alive
// and unaliased until the worker has run.
unsafe impl Send for SendPtr {}
// SAFETY: the address itself is shared, not the pointee: a captured node
// holding it runs on the worker of the stream it is launched on, under the
// same contracts as queued work.
unsafe impl Sync for SendPtr {}

/// The host address `offset` bytes into `memory` (range-checked by the caller).
fn target<M: DeviceMemory + ?Sized>(memory: &M, offset: usize) -> SendPtr {
    SendPtr((super::address_to_usize(memory.device_ptr()) + offset) as *mut u8)
}

fn host_memory_info() -> MemoryInfo {
    // /proc/meminfo is Linux-only; elsewhere report what we cannot measure as 0.
    let read = || -> Option<(usize, usize)> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let field = |name: &str| -> Option<usize> {
            let line = text.lines().find(|l| l.starts_with(name))?;
            let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        };
        Some((field("MemAvailable:")?, field("MemTotal:")?))
    };
    let (free, total) = read().unwrap_or((0, 0));
    MemoryInfo { free, total }
}

impl Device for HostDevice {
    type B = Host;

    fn open(ordinal: usize) -> Result<Arc<Self>> {
        if ordinal != 0 {
            return Err(Error::InvalidDeviceSpec {
                spec: format!("host:{ordinal}"),
                reason: "the host backend has exactly one device, host:0".into(),
            });
        }
        static SHARED: OnceLock<Arc<HostDevice>> = OnceLock::new();
        if let Some(dev) = SHARED.get() {
            return Ok(dev.clone());
        }
        // More cores than a u32 counts are reported as u32::MAX.
        let cores = thread::available_parallelism().map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX)).unwrap_or(1);
        let info = DeviceInfo {
            backend: BackendKind::Host,
            ordinal: 0,
            name: format!("host CPU ({cores} cores)"),
            arch: std::env::consts::ARCH.to_string(),
            multiprocessors: cores,
            total_memory: host_memory_info().total,
            managed_memory: true,
            stream_ordered_alloc: true,
            limits: DeviceLimits {
                max_threads_per_block: 1024,
                max_block_dim: [1024, 1024, 64],
                max_grid_dim: [u32::MAX, 65535, 65535],
                max_shared_memory_per_block: 48 * 1024,
                warp_size: 1,
            },
        };
        let default_stream = HostStream::default_of_device()?;
        let streams = Mutex::new(vec![Arc::downgrade(&default_stream.inner.pending)]);
        let dev = Arc::new(HostDevice { info, default_stream, streams });
        Ok(SHARED.get_or_init(|| dev).clone())
    }

    fn count() -> Result<usize> {
        Ok(1)
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        Ok(host_memory_info())
    }

    fn alloc(&self, bytes: usize) -> Result<HostBuffer> {
        Ok(HostBuffer { alloc: Arc::new(Allocation::new(bytes)?), kind: MemoryKind::Host })
    }

    fn alloc_async(&self, bytes: usize, _stream: &HostStream) -> Result<HostBuffer> {
        self.alloc(bytes)
    }

    fn alloc_managed(&self, bytes: usize) -> Result<HostBuffer> {
        Ok(HostBuffer { alloc: Arc::new(Allocation::new(bytes)?), kind: MemoryKind::Managed })
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<HostBuffer> {
        Ok(HostBuffer { alloc: Arc::new(Allocation::new(bytes)?), kind: MemoryKind::Pinned })
    }

    unsafe fn register_host(&self, ptr: *mut u8, len: usize) -> Result<HostRegistration> {
        if ptr.is_null() {
            return Err(Error::InvalidArgument { name: "ptr", reason: "null pointer".into() });
        }
        check_alloc_size(len)?;
        Ok(HostRegistration { _len: len })
    }

    fn default_stream(&self) -> &HostStream {
        &self.default_stream
    }

    fn create_stream(&self) -> Result<HostStream> {
        let stream = HostStream::new()?;
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        streams.retain(|s| s.strong_count() > 0);
        streams.push(Arc::downgrade(&stream.inner.pending));
        Ok(stream)
    }

    fn stream_id(&self, stream: &HostStream) -> Option<u64> {
        Some(stream.inner.id)
    }

    fn synchronize(&self, stream: &HostStream) -> Result<()> {
        if stream.inner.id == self.default_stream.inner.id {
            crate::backend::graph::check_default_stream_wait(BackendKind::Host, 0, "synchronize (default stream)")?;
        }
        stream.synchronize()
    }

    fn synchronize_device(&self) -> Result<()> {
        crate::backend::graph::check_device_wide_wait(BackendKind::Host, 0, "synchronize_device")?;
        let live: Vec<Arc<Pending>> =
            self.streams.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect();
        for pending in live {
            drop(pending.wait_idle());
        }
        Ok(())
    }

    fn is_idle(&self, stream: &HostStream) -> Result<bool> {
        stream.refuse_if_capturing("is_idle")?;
        Ok(stream.is_idle())
    }

    fn create_event(&self) -> Result<HostEvent> {
        Ok(HostEvent::default())
    }

    fn record_event(&self, event: &HostEvent, stream: &HostStream) -> Result<()> {
        // The capture state, the event's state and the enqueue agree: a
        // capture begun in between would take the record as a node while
        // the event counts it as due now (and a wait for it would hang).
        let _section = crate::backend::graph::capture_section::<Host>(stream);
        if let Some(capture) = stream.capture_id() {
            return graph::record_in_capture(event, stream, capture);
        }
        let generation = {
            let mut st = event.inner.0.lock().unwrap_or_else(|p| p.into_inner());
            st.recorded += 1;
            st.captured_in = None;
            st.recorded
        };
        let ev = event.clone();
        stream.enqueue(NodeKind::EventRecord, move || {
            let (lock, cvar) = &*ev.inner;
            let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
            if st.completed < generation {
                st.completed = generation;
                st.at = Some(Instant::now());
            }
            cvar.notify_all();
        })
    }

    fn wait_event(&self, stream: &HostStream, event: &HostEvent) -> Result<()> {
        let (target, captured_in) = {
            let st = event.inner.0.lock().unwrap_or_else(|p| p.into_inner());
            (st.recorded, st.captured_in)
        };
        let _section = crate::backend::graph::capture_section::<Host>(stream);
        if let Some(capture) = stream.capture_id() {
            return graph::wait_in_capture(stream, capture, captured_in);
        }
        if captured_in.is_some() {
            return Err(graph::isolation("wait_event", "the event was last recorded inside a capture"));
        }
        let ev = event.clone();
        stream.enqueue(NodeKind::EventWait, move || ev.wait_for(target))
    }

    fn synchronize_event(&self, event: &HostEvent) -> Result<()> {
        let target = {
            let st = event.inner.0.lock().unwrap_or_else(|p| p.into_inner());
            graph::refuse_captured_event(&st, "synchronize_event")?;
            st.recorded
        };
        event.wait_for(target);
        Ok(())
    }

    fn event_is_complete(&self, event: &HostEvent) -> Result<bool> {
        let st = event.inner.0.lock().unwrap_or_else(|p| p.into_inner());
        graph::refuse_captured_event(&st, "event_is_complete")?;
        Ok(st.completed >= st.recorded)
    }

    fn elapsed_ms(&self, start: &HostEvent, end: &HostEvent) -> Result<f32> {
        let time = |e: &HostEvent, which: &'static str| -> Result<Instant> {
            let st = e.inner.0.lock().unwrap_or_else(|p| p.into_inner());
            graph::refuse_captured_event(&st, "elapsed_ms")?;
            match st.at {
                Some(at) if st.recorded > 0 && st.completed >= st.recorded => Ok(at),
                _ => Err(Error::InvalidArgument {
                    name: which,
                    reason: "the event has not been recorded, or has not completed yet".into(),
                }),
            }
        };
        let (a, b) = (time(start, "start")?, time(end, "end")?);
        let ms = if b >= a { (b - a).as_secs_f64() * 1e3 } else { -((a - b).as_secs_f64() * 1e3) };
        // The trait's milliseconds are an f32: rounding to it is intended.
        #[allow(clippy::cast_possible_truncation)]
        let ms = ms as f32;
        Ok(ms)
    }

    unsafe fn copy_to_device_async<M: DeviceMemory<B = Host> + ?Sized>(
        &self,
        src: &[u8],
        dst: &M,
        dst_offset: usize,
        stream: &HostStream,
    ) -> Result<()> {
        check_range("destination", dst_offset, src.len(), dst.len())?;
        let (from, to, len, keep) = (SendPtr(src.as_ptr() as *mut u8), target(dst, dst_offset), src.len(), dst.owner());
        stream.enqueue(NodeKind::Copy, move || {
            let (from, to, _keep) = (&from, &to, &keep);
            // SAFETY: the caller keeps `src` and `dst` alive until the stream
            // passes this point (`keep` also holds reference-counted
            // memory); the range was checked; `copy` tolerates overlap.
            unsafe { std::ptr::copy(from.0, to.0, len) }
        })
    }

    unsafe fn copy_to_host_async<M: DeviceMemory<B = Host> + ?Sized>(
        &self,
        src: &M,
        src_offset: usize,
        dst: &mut [u8],
        stream: &HostStream,
    ) -> Result<()> {
        check_range("source", src_offset, dst.len(), src.len())?;
        let (from, to, len, keep) = (target(src, src_offset), SendPtr(dst.as_mut_ptr()), dst.len(), src.owner());
        stream.enqueue(NodeKind::Copy, move || {
            let (from, to, _keep) = (&from, &to, &keep);
            // SAFETY: as in `copy_to_device_async`; the caller leaves `dst`
            // untouched until the stream passes this point.
            unsafe { std::ptr::copy(from.0, to.0, len) }
        })
    }

    unsafe fn copy_device_async<S: DeviceMemory<B = Host> + ?Sized, M: DeviceMemory<B = Host> + ?Sized>(
        &self,
        src: &S,
        src_offset: usize,
        dst: &M,
        dst_offset: usize,
        len: usize,
        stream: &HostStream,
    ) -> Result<()> {
        check_range("source", src_offset, len, src.len())?;
        check_range("destination", dst_offset, len, dst.len())?;
        let (from, to, keep) = (target(src, src_offset), target(dst, dst_offset), (src.owner(), dst.owner()));
        stream.enqueue(NodeKind::Copy, move || {
            let (from, to, _keep) = (&from, &to, &keep);
            // SAFETY: as in `copy_to_device_async`, for both buffers.
            unsafe { std::ptr::copy(from.0, to.0, len) }
        })
    }

    unsafe fn memset_async<M: DeviceMemory<B = Host> + ?Sized>(
        &self,
        dst: &M,
        offset: usize,
        len: usize,
        value: u8,
        stream: &HostStream,
    ) -> Result<()> {
        check_range("destination", offset, len, dst.len())?;
        let (to, keep) = (target(dst, offset), dst.owner());
        stream.enqueue(NodeKind::Memset, move || {
            let (to, _keep) = (&to, &keep);
            // SAFETY: as in `copy_to_device_async`.
            unsafe { std::ptr::write_bytes(to.0, value, len) }
        })
    }

    fn load_module(&self, source: ModuleSource<'_>) -> Result<HostModule> {
        let hint = "the host backend runs only gpuport's built-in kernels; use ModuleSource::Builtin, or a GPU backend for foreign code";
        match source {
            ModuleSource::Builtin => Ok(builtin_module()),
            ModuleSource::Source { .. } => Err(Error::Unsupported {
                op: "compiling kernel source",
                backend: BackendKind::Host,
                hint: Some(hint.into()),
            }),
            ModuleSource::Ptx(_) => {
                Err(Error::Unsupported { op: "loading PTX", backend: BackendKind::Host, hint: Some(hint.into()) })
            }
            ModuleSource::Binary(_) => Err(Error::Unsupported {
                op: "loading a kernel binary",
                backend: BackendKind::Host,
                hint: Some(hint.into()),
            }),
        }
    }

    fn kernel(&self, module: &HostModule, name: &str) -> Result<HostKernel> {
        match module.kernels.get(name) {
            Some(def) => Ok(HostKernel { def }),
            None => {
                let mut names: Vec<_> = module.kernels.keys().copied().collect();
                names.sort_unstable();
                Err(Error::KernelNotFound { name: name.to_string(), available: names.join(", ") })
            }
        }
    }

    fn default_launch_config(&self, _kernel: &HostKernel, n: usize) -> Result<LaunchConfig> {
        LaunchConfig::for_elements(n, 256)
    }

    unsafe fn launch(
        &self,
        kernel: &HostKernel,
        config: LaunchConfig,
        args: &KernelArgs,
        stream: &HostStream,
    ) -> Result<()> {
        let def = kernel.def;
        check_kernel_args(def.name, def.params, args)?;
        config.validate(&self.info.limits)?;
        let args = args.clone();
        let task = move || {
            if let Err(msg) = (def.func)(&args, config) {
                // Reported by the stream's next synchronize, like a GPU fault.
                panic!("kernel {}: {msg}", def.name);
            }
        };
        // Every launch boxes the closure for the worker, so its size is paid
        // in malloc and free each time. It holds the table entry by
        // reference (one pointer for name and function): 112 bytes, within
        // glibc's fast bins (requests up to 120 bytes). Holding the name and
        // the function apart made it 128 bytes, and cost about 100 more
        // instructions per launch in malloc and 65 in the worker's free
        // (callgrind, benches/runtime.rs launch_empty on the host).
        debug_assert!(std::mem::size_of_val(&task) <= 120, "the launch closure outgrew malloc's fast bins");
        stream.enqueue(NodeKind::Kernel(def.name), task)
    }
}

// ---- memory-layer support -------------------------------------------------------

/// The host backend: pinned memory is ordinary host memory (flags change
/// nothing, a "mapped" address is the host address), the native pool is the
/// plain allocator (nothing cached, nothing to trim), and there is no IPC.
impl MemoryDevice for HostDevice {
    fn reserve_growable(&self, bytes: usize) -> Result<Box<dyn crate::backend::GrowableRange>> {
        Ok(Box::new(growable::HostGrowable::reserve(bytes)?))
    }

    fn alloc_pinned_with(&self, bytes: usize, _flags: PinnedFlags) -> Result<HostBuffer> {
        self.alloc_pinned(bytes)
    }

    fn mapped_device_ptr(&self, host: *mut u8) -> Result<u64> {
        Ok(host as u64)
    }

    unsafe fn pin_with(&self, ptr: *mut u8, len: usize, _mapped: bool) -> Result<HostRegistration> {
        // SAFETY: forwarded caller contract.
        unsafe { self.register_host(ptr, len) }
    }

    fn set_native_pool_release_threshold(&self, _bytes: u64) -> Result<()> {
        Ok(())
    }

    fn native_pool_reserved(&self) -> Result<u64> {
        Ok(0)
    }

    fn trim_native_pool(&self, _keep: usize) -> Result<()> {
        Ok(())
    }

    /// Checks as a GPU does, and moves nothing: host memory is where it is.
    fn prefetch_managed(&self, memory: &HostBuffer, to: ManagedPlace, _stream: &HostStream) -> Result<()> {
        check_managed("prefetch", memory)?;
        check_place("prefetch", to, 1)
    }

    /// Checks as a GPU does, and does nothing.
    fn advise_managed(&self, memory: &HostBuffer, _advice: Advice, place: ManagedPlace) -> Result<()> {
        check_managed("advise", memory)?;
        check_place("advise", place, 1)
    }
}
