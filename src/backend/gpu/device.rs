//! A GPU device and its [`Device`] implementation, over any [`Driver`].

use std::any::Any;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use super::compile::Program;
use super::driver::{Driver, Params};
use super::error::out_of_memory;
use super::memory::{GpuBuffer, GpuHostRegistration, GpuPinnedBuffer};
use super::module::{builtin_kernel_from, GpuKernel, GpuModule, BUILTIN_HEADERS};
use super::stream::{apart_from_captures, apart_from_captures_if_any, GpuEvent, GpuStream};
use super::Gpu;
use crate::backend::graph::{self, CaptureStream};
use crate::backend::{
    check_alloc_size, check_range, check_same_device, Device, DeviceInfo, DeviceMemory, KernelArgs, LaunchConfig,
    MemoryInfo, MemoryKind, ModuleSource,
};
use crate::error::{graph_error, BackendKind, Error, GraphErrorKind, Result};

/// A GPU (`"cuda:N"`, `"rocm:N"`).
pub struct GpuDevice<D: Driver> {
    info: DeviceInfo,
    driver: Arc<D>,
    default_stream: GpuStream<D>,
    /// The built-in module once loaded, and whether it holds every array
    /// kernel too (the prebuilt image does; the compiled built-in source
    /// holds only the runtime's own kernels).
    builtins: Mutex<Option<(GpuModule<D>, bool)>>,
    /// Array kernels compiled so far, by name.
    array_kernels: Mutex<HashMap<String, GpuKernel<D>>>,
}

impl<D: Driver> fmt::Debug for GpuDevice<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Device({}:{}, {})", D::NAME, D::KIND, self.info.ordinal, self.info.name)
    }
}

/// Every opened GPU device, by backend and ordinal.
type Devices = HashMap<(BackendKind, usize), Arc<dyn Any + Send + Sync>>;

/// One device per backend and ordinal per process, so driver state (a
/// retained CUDA context) is set up once.
fn open_devices() -> &'static Mutex<Devices> {
    static DEVICES: OnceLock<Mutex<Devices>> = OnceLock::new();
    DEVICES.get_or_init(Default::default)
}

/// Ordinals below this are also kept in [`opened`]'s slots.
const OPENED_SLOTS: usize = 16;

/// The slot of an opened device that `open` reads without the lock: an
/// export's `current_work_stream` and every DLPack import open the device of
/// their memory, and the lock, the map's hash and the downcast's extra
/// reference were about a sixth of the exchange table's export (measured with perf).
/// `None` for ordinals past the slots (those take the lock).
fn opened(kind: BackendKind, ordinal: usize) -> Option<&'static OnceLock<Arc<dyn Any + Send + Sync>>> {
    type Slots = [OnceLock<Arc<dyn Any + Send + Sync>>; OPENED_SLOTS];
    static CUDA: Slots = [const { OnceLock::new() }; OPENED_SLOTS];
    static ROCM: Slots = [const { OnceLock::new() }; OPENED_SLOTS];
    let slots = match kind {
        BackendKind::Cuda => &CUDA,
        BackendKind::Rocm => &ROCM,
        _ => return None,
    };
    slots.get(ordinal)
}

impl<D: Driver> GpuDevice<D> {
    /// The driver state of this device, for the vendor part's own methods.
    pub(crate) fn driver(&self) -> &Arc<D> {
        &self.driver
    }

    /// A handle to a stream of this device that gpuport does not own: it is
    /// never destroyed by gpuport.
    ///
    /// # Safety
    /// `raw` is a stream of this device (or a special handle the vendor
    /// accepts as one) and stays alive while the returned handle is used.
    pub(crate) unsafe fn foreign_stream(&self, raw: D::Stream) -> GpuStream<D> {
        GpuStream::new(self.driver.clone(), raw, false)
    }

    /// A handle to a stream gpuport does not own, named by its address as
    /// other libraries of the vendor pass it (PyTorch, CuPy, cuda-python, HIP
    /// Python), or a special handle the vendor accepts as a stream (CUDA's
    /// `CU_STREAM_LEGACY` 1 and `CU_STREAM_PER_THREAD` 2, HIP's
    /// `hipStreamPerThread` 2). It is never destroyed by gpuport, so work can
    /// join a foreign stream's order without synchronizing. 0 is the null stream.
    ///
    /// # Safety
    /// `address` must be 0, a special handle of the vendor, or a live stream
    /// of this device, and stay alive while the returned handle is used.
    pub unsafe fn borrow_stream(&self, address: usize) -> GpuStream<D> {
        // SAFETY: forwarded caller contract.
        unsafe { self.foreign_stream(super::driver::RawAddress::from_address(address)) }
    }

    pub(crate) fn check_stream(&self, stream: &GpuStream<D>) -> Result<()> {
        check_same_device("stream", D::KIND, self.info.ordinal, stream.ordinal())
    }

    fn check_buffer<M: DeviceMemory + ?Sized>(&self, what: &'static str, buffer: &M) -> Result<()> {
        check_same_device(what, D::KIND, self.info.ordinal, buffer.ordinal())
    }

    /// Refuses `op`, which waits for `stream`, while `stream` captures, or,
    /// for the default stream, while a capture's mode forbids it (CUDA
    /// would invalidate the capture; see `graph::check_device_wide_wait`).
    /// The caller has made the device current (`bind`).
    fn refuse_wait_in_capture(&self, stream: &GpuStream<D>, op: &'static str) -> Result<()> {
        if stream.id() == self.default_stream.id() {
            return graph::check_default_stream_wait(D::KIND, self.info.ordinal, op);
        }
        graph::check_not_capturing(D::KIND, op, stream.capture_status_bound())
    }

    /// Refuses a stream-ordered allocation on a capturing stream: the
    /// driver would make it a node of the graph, whose memory exists only
    /// while the graph runs, and the buffer's drop would free it outside
    /// the graph. (The caching pool serves captures from graph pools instead:
    /// `memory/pool/graph_pools.rs`.)
    pub(crate) fn refuse_allocation_in_capture(&self, stream: &GpuStream<D>, op: &'static str) -> Result<()> {
        if stream.capture_status_bound()? == graph::CaptureStatus::None {
            return Ok(());
        }
        Err(graph_error(
            D::KIND,
            op,
            GraphErrorKind::NotCapturable,
            "stream-ordered allocations are not captured (a graph's allocation exists only while the graph runs, \
             and the buffer would be freed outside it); allocate before the capture and keep the memory as long \
             as the graph"
                .into(),
        ))
    }

    /// `e`, as [`Error::OutOfMemory`] where the driver found no memory for `bytes`.
    pub(crate) fn out_of_memory(&self, e: Error, bytes: usize) -> Error {
        out_of_memory::<D>(e, self.info.ordinal, bytes)
    }

    pub(crate) fn buffer(&self, ptr: u64, len: usize, kind: MemoryKind, free_on: Option<GpuStream<D>>) -> GpuBuffer<D> {
        GpuBuffer::new(self.driver.clone(), ptr, len, kind, free_on)
    }

    /// Page-locked host memory with the vendor's allocation `flags`; zero-filled.
    pub(crate) fn alloc_pinned_flags(&self, bytes: usize, flags: u32) -> Result<GpuPinnedBuffer<D>> {
        check_alloc_size(bytes)?;
        self.driver.bind()?;
        // SAFETY: the device is current; the flags are the driver's own bits.
        let ptr = unsafe { self.driver.host_alloc(bytes, flags) }.map_err(|e| self.out_of_memory(e, bytes))?;
        // SAFETY: `ptr` addresses `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(GpuPinnedBuffer::new(self.driver.clone(), ptr, bytes))
    }

    /// Page-locks host memory with the vendor's registration `flags`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid host memory that outlives the registration.
    pub(crate) unsafe fn register_host_flags(
        &self,
        ptr: *mut u8,
        len: usize,
        flags: u32,
    ) -> Result<GpuHostRegistration<D>> {
        if ptr.is_null() {
            return Err(Error::InvalidArgument { name: "ptr", reason: "null pointer".into() });
        }
        check_alloc_size(len)?;
        self.driver.bind()?;
        // SAFETY: the device is current; the caller guarantees the range is
        // valid and outlives the registration.
        unsafe { self.driver.host_register(ptr, len, flags) }?;
        Ok(GpuHostRegistration::new(self.driver.clone(), ptr, len))
    }

    /// Loads an image; `builtin` marks the library's own modules.
    ///
    /// # Safety
    /// As [`Driver::module_load`]: a complete image of a format the vendor
    /// loads, alive during the call.
    unsafe fn load_image(&self, image: *const c_void, builtin: bool) -> Result<GpuModule<D>> {
        self.driver.bind()?;
        // SAFETY: the device is current; the caller's contract covers the image.
        let raw = unsafe { self.driver.module_load(image) }?;
        Ok(GpuModule::new(self.driver.clone(), raw, builtin))
    }

    /// Compiles `program` for this device and loads it; `builtin` marks the
    /// library's own modules.
    fn compile_and_load(&self, program: Program<'_>, builtin: bool) -> Result<GpuModule<D>> {
        let image = self.driver.compile(&self.info, &program)?;
        // SAFETY: the compiler's output, alive for the call.
        unsafe { self.load_image(image.as_ptr().cast::<c_void>(), builtin) }
    }

    /// The built-in module: a prebuilt image where there is one this device
    /// can load (it holds every array kernel: `true`), else compiled from
    /// the vendor's built-in source (`false`).
    fn load_builtins(&self) -> Result<(GpuModule<D>, bool)> {
        // SAFETY: the vendor's prebuilt image, whole and static.
        let prebuilt =
            D::prebuilt_builtins().and_then(|image| unsafe { self.load_image(image.as_ptr().cast(), true) }.ok());
        if let Some(module) = prebuilt {
            return Ok((module, true));
        }
        let options = self.driver.builtin_options();
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let name = format!("gpuport_builtins.{}", D::SOURCE_EXTENSION);
        let program = Program { code: D::BUILTIN_SOURCE, name: &name, options: &options, headers: &[] };
        Ok((self.compile_and_load(program, true)?, false))
    }

    /// The built-in module (loaded once) and whether it holds every array kernel.
    fn builtins(&self) -> Result<(GpuModule<D>, bool)> {
        let mut cached = self.builtins.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(loaded) = cached.as_ref() {
            return Ok(loaded.clone());
        }
        let loaded = self.load_builtins()?;
        *cached = Some(loaded.clone());
        Ok(loaded)
    }

    /// The occupancy call's (minimum grid, block size) for `kernel`, each at least 1.
    fn occupancy(&self, kernel: &GpuKernel<D>) -> Result<(u32, u32)> {
        self.driver.bind()?;
        // SAFETY: the device is current; the kernel's module is alive.
        let (min_grid, block) = unsafe { self.driver.max_potential_block_size(kernel.func()) }?;
        // Each is positive after `max(1)`, so its magnitude is its value.
        Ok((min_grid.max(1).unsigned_abs(), block.max(1).unsigned_abs()))
    }
}

impl<D: Driver> Device for GpuDevice<D> {
    type B = Gpu<D>;

    fn open(ordinal: usize) -> Result<Arc<Self>> {
        let slot = opened(D::KIND, ordinal);
        if let Some(dev) = slot.and_then(OnceLock::get).and_then(|d| d.clone().downcast::<Self>().ok()) {
            return Ok(dev);
        }
        let mut devices = open_devices().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(dev) = devices.get(&(D::KIND, ordinal)) {
            if let Ok(dev) = dev.clone().downcast::<Self>() {
                return Ok(dev);
            }
        }
        let count = Self::count()?;
        if ordinal >= count {
            return Err(Error::InvalidDeviceSpec {
                spec: format!("{}:{ordinal}", D::KIND),
                reason: format!(
                    "there are {count} {} devices ({kind}:0..{kind}:{})",
                    D::PLATFORM,
                    count.saturating_sub(1),
                    kind = D::KIND
                ),
            });
        }
        let (driver, info) = D::open(ordinal)?;
        let driver = Arc::new(driver);
        let default_stream = GpuStream::default_of(driver.clone());
        let dev = Arc::new(GpuDevice {
            info,
            driver,
            default_stream,
            builtins: Mutex::new(None),
            array_kernels: Default::default(),
        });
        devices.insert((D::KIND, ordinal), dev.clone());
        if let Some(slot) = slot {
            // Set once, under the lock, to the device the map holds.
            let _ = slot.set(dev.clone());
        }
        Ok(dev)
    }

    fn count() -> Result<usize> {
        D::count()
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        self.driver.bind()?;
        self.driver.memory_info()
    }

    fn alloc(&self, bytes: usize) -> Result<GpuBuffer<D>> {
        check_alloc_size(bytes)?;
        self.driver.bind()?;
        // In relaxed capture mode: `cuMemAlloc` is not a stream operation,
        // but CUDA refuses it (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) on a
        // thread whose mode forbids "unsafe" calls while a capture runs; the
        // caching pool grows a capture's graph pool this way (PyTorch's
        // allocator sets the mode likewise).
        // SAFETY: the device is current; the memory is returned uninitialized as documented.
        let ptr = super::stream::apart_from_captures_if_any(&*self.driver, || unsafe { self.driver.alloc(bytes) })
            .map_err(|e| self.out_of_memory(e, bytes))?;
        Ok(self.buffer(ptr, bytes, MemoryKind::Device, None))
    }

    fn alloc_async(&self, bytes: usize, stream: &GpuStream<D>) -> Result<GpuBuffer<D>> {
        check_alloc_size(bytes)?;
        self.check_stream(stream)?;
        if !self.info.stream_ordered_alloc {
            return self.alloc(bytes);
        }
        self.driver.bind()?;
        self.refuse_allocation_in_capture(stream, "alloc_async")?;
        // SAFETY: the device is current and supports stream-ordered
        // allocation; the stream belongs to it (checked), and the buffer
        // keeps the stream alive to free on it.
        let ptr = unsafe { self.driver.alloc_async(bytes, stream.raw()) }.map_err(|e| self.out_of_memory(e, bytes))?;
        Ok(self.buffer(ptr, bytes, MemoryKind::Device, Some(stream.clone())))
    }

    fn alloc_managed(&self, bytes: usize) -> Result<GpuBuffer<D>> {
        check_alloc_size(bytes)?;
        if !self.info.managed_memory {
            return Err(Error::Unsupported {
                op: "managed memory",
                backend: D::KIND,
                hint: Some(format!("{} does not support managed memory", self.info.name)),
            });
        }
        self.driver.bind()?;
        // SAFETY: the device is current and supports managed memory.
        let ptr = unsafe { self.driver.alloc_managed(bytes) }.map_err(|e| self.out_of_memory(e, bytes))?;
        Ok(self.buffer(ptr, bytes, MemoryKind::Managed, None))
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<GpuPinnedBuffer<D>> {
        // PORTABLE makes it pinned for every context and device.
        self.alloc_pinned_flags(bytes, D::HOST_ALLOC_PORTABLE)
    }

    unsafe fn register_host(&self, ptr: *mut u8, len: usize) -> Result<GpuHostRegistration<D>> {
        // SAFETY: forwarded caller contract.
        unsafe { self.register_host_flags(ptr, len, D::HOST_REGISTER_PORTABLE) }
    }

    fn default_stream(&self) -> &GpuStream<D> {
        &self.default_stream
    }

    fn create_stream(&self) -> Result<GpuStream<D>> {
        self.driver.bind()?;
        let raw = self.driver.stream_create()?;
        Ok(GpuStream::new(self.driver.clone(), raw, true))
    }

    fn stream_id(&self, stream: &GpuStream<D>) -> Option<u64> {
        Some(stream.id())
    }

    fn stream_is_borrowed(&self, stream: &GpuStream<D>) -> bool {
        stream.is_borrowed()
    }

    fn synchronize(&self, stream: &GpuStream<D>) -> Result<()> {
        self.check_stream(stream)?;
        self.driver.bind()?;
        self.refuse_wait_in_capture(stream, "synchronize")?;
        // SAFETY: the device is current; the stream is alive (we hold it) and belongs to it.
        unsafe { self.driver.stream_synchronize(stream.raw()) }
    }

    fn synchronize_device(&self) -> Result<()> {
        graph::check_device_wide_wait(D::KIND, self.info.ordinal, "synchronize_device")?;
        self.driver.bind()?;
        self.driver.synchronize_device()
    }

    fn is_idle(&self, stream: &GpuStream<D>) -> Result<bool> {
        self.check_stream(stream)?;
        self.driver.bind()?;
        self.refuse_wait_in_capture(stream, "is_idle")?;
        // SAFETY: the device is current; the stream is alive and belongs to it.
        unsafe { self.driver.stream_query(stream.raw()) }
    }

    fn create_event(&self) -> Result<GpuEvent<D>> {
        self.driver.bind()?;
        let raw = self.driver.event_create()?;
        Ok(GpuEvent::new(self.driver.clone(), raw))
    }

    /// One of the device's pooled marker events where there is one (no
    /// driver call), else a new one (`event_pool.rs`).
    fn create_marker_event(&self) -> Result<GpuEvent<D>> {
        GpuEvent::marker(self.driver.clone())
    }

    fn record_event(&self, event: &GpuEvent<D>, stream: &GpuStream<D>) -> Result<()> {
        self.check_stream(stream)?;
        check_same_device("event", D::KIND, self.info.ordinal, event.driver().ordinal())?;
        self.driver.bind()?;
        // The capture asked about and the record agree (`gate.rs`); the
        // event remembers which capture, if any, it was recorded in.
        let _section = stream.gate_ref().shared();
        let capture = CaptureStream::capture_id(stream)?;
        // SAFETY: the device is current; both handles are alive and belong to it.
        unsafe { self.driver.event_record(event.raw(), stream.raw()) }?;
        event.set_captured_in(capture);
        Ok(())
    }

    /// As the host backend: inside a capture, only an event recorded in the
    /// same capture is waited for by the driver (an event recorded outside
    /// is the driver's to refuse); outside captures, an event recorded in
    /// one is [`GraphErrorKind::Isolation`], without a driver call.
    fn wait_event(&self, stream: &GpuStream<D>, event: &GpuEvent<D>) -> Result<()> {
        self.check_stream(stream)?;
        self.driver.bind()?;
        let _section = stream.gate_ref().shared();
        if let Some(recorded_in) = event.captured_in() {
            if CaptureStream::capture_id(stream)? != Some(recorded_in) {
                return Err(graph_error(
                    D::KIND,
                    "wait_event",
                    GraphErrorKind::Isolation,
                    "the event was last recorded inside a capture, and the stream does not capture in it: the \
                     event is recorded only when the graph runs"
                        .into(),
                ));
            }
        }
        // SAFETY: the device is current; both handles are alive (an event of
        // another device is allowed by both vendors).
        unsafe { self.driver.stream_wait_event(stream.raw(), event.raw()) }
    }

    fn synchronize_event(&self, event: &GpuEvent<D>) -> Result<()> {
        refuse_captured_event(event, "synchronize_event")?;
        event.driver().bind()?;
        // Relaxed for the call, always: `MemArray`'s drop waits here for its
        // pending work, and a drop may run in a finalizer while a global
        // capture runs on another thread, on a stream gpuport never saw
        // (`torch.cuda.graph`), which `surely_not_capturing` cannot know of;
        // CUDA and HIP invalidate such a capture when a thread in global
        // mode waits for an event. The two exchanges are the one pair of an
        // array's upload-then-drop (`docs/design.md#graphs`).
        // SAFETY: the event's device is current; the event is alive.
        apart_from_captures(event.driver(), || unsafe { event.driver().event_synchronize(event.raw()) })
    }

    fn event_is_complete(&self, event: &GpuEvent<D>) -> Result<bool> {
        refuse_captured_event(event, "event_is_complete")?;
        event.driver().bind()?;
        // SAFETY: as in `synchronize_event`.
        apart_from_captures_if_any(event.driver(), || unsafe { event.driver().event_query(event.raw()) })
    }

    fn elapsed_ms(&self, start: &GpuEvent<D>, end: &GpuEvent<D>) -> Result<f32> {
        refuse_captured_event(start, "elapsed_ms")?;
        refuse_captured_event(end, "elapsed_ms")?;
        self.driver.bind()?;
        // SAFETY: the device is current; both events are alive. The driver
        // reports unrecorded or incomplete events as errors.
        unsafe { self.driver.event_elapsed(start.raw(), end.raw()) }
    }

    unsafe fn copy_to_device_async<M: DeviceMemory<B = Gpu<D>> + ?Sized>(
        &self,
        src: &[u8],
        dst: &M,
        dst_offset: usize,
        stream: &GpuStream<D>,
    ) -> Result<()> {
        self.check_buffer("destination buffer", dst)?;
        self.check_stream(stream)?;
        check_range("destination", dst_offset, src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.driver.bind()?;
        // The owners kept and the enqueue agree on the capture state (`gate.rs`).
        let _section = stream.gate_ref().shared();
        if stream.in_capture() {
            stream.keep(dst.owner());
        }
        // SAFETY: the device is current; range checked; the caller keeps
        // `src` and `dst` alive until the stream passes the copy.
        unsafe { self.driver.copy_htod_async(dst.device_ptr() + dst_offset as u64, src, stream.raw()) }
    }

    unsafe fn copy_to_host_async<M: DeviceMemory<B = Gpu<D>> + ?Sized>(
        &self,
        src: &M,
        src_offset: usize,
        dst: &mut [u8],
        stream: &GpuStream<D>,
    ) -> Result<()> {
        self.check_buffer("source buffer", src)?;
        self.check_stream(stream)?;
        check_range("source", src_offset, dst.len(), src.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.driver.bind()?;
        // The owners kept and the enqueue agree on the capture state (`gate.rs`).
        let _section = stream.gate_ref().shared();
        if stream.in_capture() {
            stream.keep(src.owner());
        }
        // SAFETY: the device is current; range checked; the caller keeps both
        // alive until the stream passes the copy.
        unsafe { self.driver.copy_dtoh_async(dst, src.device_ptr() + src_offset as u64, stream.raw()) }
    }

    unsafe fn copy_device_async<S: DeviceMemory<B = Gpu<D>> + ?Sized, M: DeviceMemory<B = Gpu<D>> + ?Sized>(
        &self,
        src: &S,
        src_offset: usize,
        dst: &M,
        dst_offset: usize,
        len: usize,
        stream: &GpuStream<D>,
    ) -> Result<()> {
        self.check_buffer("source buffer", src)?;
        self.check_buffer("destination buffer", dst)?;
        self.check_stream(stream)?;
        check_range("source", src_offset, len, src.len())?;
        check_range("destination", dst_offset, len, dst.len())?;
        if len == 0 {
            return Ok(());
        }
        self.driver.bind()?;
        // The owners kept and the enqueue agree on the capture state (`gate.rs`).
        let _section = stream.gate_ref().shared();
        if stream.in_capture() {
            stream.keep(src.owner().into_iter().chain(dst.owner()));
        }
        // SAFETY: the device is current; ranges checked; the caller keeps
        // both buffers alive until the stream passes the copy.
        unsafe {
            self.driver.copy_dtod_async(
                dst.device_ptr() + dst_offset as u64,
                src.device_ptr() + src_offset as u64,
                len,
                stream.raw(),
            )
        }
    }

    unsafe fn memset_async<M: DeviceMemory<B = Gpu<D>> + ?Sized>(
        &self,
        dst: &M,
        offset: usize,
        len: usize,
        value: u8,
        stream: &GpuStream<D>,
    ) -> Result<()> {
        self.check_buffer("destination buffer", dst)?;
        self.check_stream(stream)?;
        check_range("destination", offset, len, dst.len())?;
        if len == 0 {
            return Ok(());
        }
        self.driver.bind()?;
        // The owners kept and the enqueue agree on the capture state (`gate.rs`).
        let _section = stream.gate_ref().shared();
        if stream.in_capture() {
            stream.keep(dst.owner());
        }
        // SAFETY: the device is current; range checked; the caller keeps
        // `dst` alive until the stream passes the memset.
        unsafe { self.driver.memset_d8_async(dst.device_ptr() + offset as u64, value, len, stream.raw()) }
    }

    fn load_module(&self, source: ModuleSource<'_>) -> Result<GpuModule<D>> {
        match source {
            ModuleSource::Builtin => Ok(self.builtins()?.0),
            ModuleSource::Source { code, name, options } => {
                self.compile_and_load(Program { code, name, options, headers: &[] }, false)
            }
            ModuleSource::Ptx(ptx) => {
                let image = D::ptx_image(ptx)?;
                // SAFETY: NUL-terminated PTX text, alive for the call.
                unsafe { self.load_image(image.as_ptr().cast::<c_void>(), false) }
            }
            ModuleSource::Binary(image) => {
                D::check_image(image)?;
                // SAFETY: an image of the vendor's formats (checked above), alive for the call.
                unsafe { self.load_image(image.as_ptr().cast::<c_void>(), false) }
            }
        }
    }

    fn kernel(&self, module: &GpuModule<D>, name: &str) -> Result<GpuKernel<D>> {
        check_same_device("module", D::KIND, self.info.ordinal, module.ordinal())?;
        self.driver.bind()?;
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument { name: "name", reason: "kernel name contains a NUL byte".into() })?;
        // SAFETY: the device is current; the module is loaded and kept alive by the returned kernel.
        let Some(func) = (unsafe { self.driver.module_function(module.raw(), &cname) })? else {
            // SAFETY: as above.
            let available = unsafe { self.driver.kernel_names(module.raw(), module.is_builtin()) };
            return Err(Error::KernelNotFound { name: name.to_string(), available });
        };
        // Our own kernels' parameters are in the table the host backend
        // shares; others' are what the driver can tell.
        let known = module.is_builtin().then(|| crate::backend::host::builtin_params(name)).flatten();
        let params = match known {
            Some(sizes) => Params::Exact(sizes.into()),
            // SAFETY: the function was just looked up in a loaded module.
            None => unsafe { self.driver.kernel_params(func) },
        };
        Ok(GpuKernel::new(module, func, name, params))
    }

    fn builtin_kernel(&self, name: &str) -> Result<GpuKernel<D>> {
        let (module, holds_every_kernel) = self.builtins()?;
        builtin_kernel_from(
            || self.kernel(&module, name),
            holds_every_kernel,
            &self.array_kernels,
            D::ARRAY_OPS_SOURCE,
            name,
            |program| {
                let file = format!("{name}.{}", D::SOURCE_EXTENSION);
                let array_kernel = Program { code: program, name: &file, options: &[], headers: BUILTIN_HEADERS };
                let module = self.compile_and_load(array_kernel, true)?;
                self.kernel(&module, name)
            },
        )
    }

    fn default_launch_config(&self, kernel: &GpuKernel<D>, n: usize) -> Result<LaunchConfig> {
        let (_, block) = self.occupancy(kernel)?;
        LaunchConfig::for_elements(n, block)
    }

    fn resident_launch_config(&self, kernel: &GpuKernel<D>, n: usize) -> Result<LaunchConfig> {
        if !D::RESIDENT_GRIDS {
            return self.default_launch_config(kernel, n);
        }
        let (min_grid, block) = self.occupancy(kernel)?;
        let needed = n.div_ceil(block as usize).max(1);
        // More blocks than a u32 holds are more than `min_grid` too.
        let grid = u32::try_from(needed).map_or(min_grid, |needed| needed.min(min_grid));
        Ok(LaunchConfig::linear(grid, block))
    }

    unsafe fn launch(
        &self,
        kernel: &GpuKernel<D>,
        config: LaunchConfig,
        args: &KernelArgs,
        stream: &GpuStream<D>,
    ) -> Result<()> {
        self.check_stream(stream)?;
        check_same_device("kernel", D::KIND, self.info.ordinal, kernel.ordinal())?;
        kernel.check_args(args)?;
        config.validate(&self.info.limits)?;
        self.driver.bind()?;
        // Parameter pointers live on the stack for up to 16 arguments: no
        // allocation on the launch path.
        let (mut stack, mut heap) = ([std::ptr::null_mut(); 16], Vec::new());
        let pointers: &mut [*mut c_void] = if args.len() <= stack.len() {
            &mut stack[..args.len()]
        } else {
            heap.resize(args.len(), std::ptr::null_mut());
            &mut heap
        };
        args.fill_param_pointers(pointers);
        // The owners kept and the enqueue agree on the capture state (`gate.rs`).
        let _section = stream.gate_ref().shared();
        if stream.in_capture() {
            stream.keep(args.owners().iter().cloned().chain([kernel.owner()]));
        }
        // SAFETY: the device is current; the kernel's module is alive;
        // `pointers` point into `args`, which outlives this call (the driver
        // copies parameters at launch); the caller guarantees argument types
        // and buffer lifetimes.
        unsafe { self.driver.launch(kernel.func(), &config, stream.raw(), pointers) }
    }
}

/// [`GraphErrorKind::CapturedEvent`] for `op` where the event's latest
/// recording was made inside a capture (see `GpuEvent::captured_in`).
fn refuse_captured_event<D: Driver>(event: &GpuEvent<D>, op: &'static str) -> Result<()> {
    match event.captured_in() {
        None => Ok(()),
        Some(_) => Err(graph_error(
            D::KIND,
            op,
            GraphErrorKind::CapturedEvent,
            "the event was last recorded inside a capture: it is recorded only when the graph runs".into(),
        )),
    }
}
