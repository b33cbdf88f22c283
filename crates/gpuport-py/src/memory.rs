//! `gpuport.memory`: Python access to each device's current gpuport memory
//! resource, and the C-ABI allocation functions PyTorch's
//! `CUDAPluggableAllocator` calls (`gpuport_torch_malloc`, `gpuport_torch_free`).
//!
//! The first use of a device from this module installs, as the device's
//! current resource, a [`PluginResource`]: the caching pool wrapped in a
//! [`StatisticsResource`], with a [`LoggingResource`] (CSV, like RMM's
//! `csv_log`) switched in while logging is enabled. If Rust code already
//! took the device's current resource, that resource is wrapped instead.
//!
//! Foreign streams (a `CUstream` from CuPy, PyTorch or Numba) are borrowed
//! once per (device, handle) and cached, so the pool sees one stream per
//! handle and reuses a block freed on that stream at once (stream order),
//! as RMM does. A stream destroyed while blocks freed on it are still
//! cached is the caller's hazard, as with RMM.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use gpuport::backend::{Event, HostMemory, MemoryInfo, Stream};
use gpuport::memory::pool::PoolReport;
use gpuport::memory::{
    current_resource, set_current_resource, Allocator, Block, CachingPool, DeferCleanup, DeviceAllocation, IpcHandle,
    IpcKind, LoggingResource, MemoryBackend, MemoryResource, PinnedFlags, PinnedMemory, PoolConfig, Statistics,
    StatisticsResource,
};
use gpuport::{AnyDevice, BackendKind, Device, DeviceMemory};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::device::{resolve_device, spec, PyStream};
use crate::errors::IntoPyResult;

// ---- the resource ---------------------------------------------------------------

/// The current resource this module installs: statistics over the caching
/// pool, with a CSV log switched in while enabled.
pub struct PluginResource<B: MemoryBackend> {
    stats: Arc<StatisticsResource<B>>,
    log: RwLock<Option<(Arc<LoggingResource<B>>, PathBuf)>>,
}

impl<B: MemoryBackend> fmt::Debug for PluginResource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PluginResource({:?})", self.stats)
    }
}

impl<B: MemoryBackend> PluginResource<B> {
    fn new(inner: Arc<dyn MemoryResource<B>>) -> Self {
        PluginResource { stats: Arc::new(StatisticsResource::new(inner)), log: RwLock::new(None) }
    }

    /// Where allocations and frees go now: the log while enabled, else the statistics.
    fn front(&self) -> Arc<dyn MemoryResource<B>> {
        match &*self.log.read().unwrap_or_else(|p| p.into_inner()) {
            Some((log, _)) => log.clone(),
            None => self.stats.clone(),
        }
    }

    fn enable_log(&self, path: PathBuf, with_memory_info: bool) -> gpuport::Result<()> {
        let log = LoggingResource::to_file(self.stats.clone(), &path, with_memory_info)?;
        let old = self.log.write().unwrap_or_else(|p| p.into_inner()).replace((Arc::new(log), path));
        if let Some((old, _)) = old {
            old.flush()?;
        }
        Ok(())
    }

    fn disable_log(&self) -> gpuport::Result<()> {
        let old = self.log.write().unwrap_or_else(|p| p.into_inner()).take();
        match old {
            Some((old, _)) => old.flush(),
            None => Ok(()),
        }
    }

    /// Flushes the log; its path, if enabled.
    fn log_path(&self) -> gpuport::Result<Option<PathBuf>> {
        match &*self.log.read().unwrap_or_else(|p| p.into_inner()) {
            Some((log, path)) => {
                log.flush()?;
                Ok(Some(path.clone()))
            }
            None => Ok(None),
        }
    }
}

// SAFETY: blocks pass between the caller and the statistics adaptor (or the
// log over it) unchanged; switching the log in or out never changes which
// resource a block goes back to, since both end in the same inner resource.
unsafe impl<B: MemoryBackend> MemoryResource<B> for PluginResource<B> {
    fn device(&self) -> &Arc<B::Device> {
        self.stats.device()
    }
    fn name(&self) -> &'static str {
        "gpuport-python"
    }
    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> gpuport::Result<Block<B>> {
        self.front().allocate(bytes, stream)
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> gpuport::Result<()> {
        self.front().deallocate(block, stream, after)
    }
    fn memory_info(&self) -> gpuport::Result<MemoryInfo> {
        self.stats.memory_info()
    }
    fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> gpuport::Result<PinnedMemory<B>> {
        self.stats.alloc_pinned(bytes, flags)
    }
    unsafe fn pin(
        &self,
        ptr: *mut u8,
        len: usize,
        mapped: bool,
    ) -> gpuport::Result<gpuport::backend::HostRegistration<B>> {
        // SAFETY: forwarded caller contract.
        unsafe { self.stats.pin(ptr, len, mapped) }
    }
    fn ipc_export(&self, block: &Block<B>) -> gpuport::Result<IpcHandle> {
        self.stats.ipc_export(block)
    }
    fn reset(&self) -> gpuport::Result<()> {
        self.stats.reset()
    }
    fn release_cached(&self, patience: std::time::Duration) -> gpuport::Result<()> {
        self.stats.release_cached(patience)
    }
    fn report(&self) -> Option<PoolReport> {
        self.stats.report()
    }
    fn statistics(&self) -> Option<Statistics> {
        Some(self.stats.get())
    }
}

/// A device's allocator and the resource behind it.
pub struct Entry<B: MemoryBackend> {
    pub allocator: Allocator<B>,
    pub resource: Arc<PluginResource<B>>,
}

impl<B: MemoryBackend> Clone for Entry<B> {
    fn clone(&self) -> Self {
        Entry { allocator: self.allocator.clone(), resource: self.resource.clone() }
    }
}

/// The device's entry, installing the plugin resource on first use.
pub fn entry<B: MemoryBackend>(device: &Arc<B::Device>) -> gpuport::Result<Entry<B>> {
    type Entries = Mutex<HashMap<(BackendKind, usize), Box<dyn Any + Send + Sync>>>;
    static ENTRIES: OnceLock<Entries> = OnceLock::new();
    let key = (B::KIND, device.info().ordinal);
    let mut map = ENTRIES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = map.get(&key).and_then(|e| e.downcast_ref::<Entry<B>>()) {
        return Ok(e.clone());
    }
    let pool: Arc<dyn MemoryResource<B>> = Arc::new(CachingPool::new(device.clone(), PoolConfig::default()));
    let resource = Arc::new(PluginResource::new(pool));
    let mut allocator = Allocator::from_arc(resource.clone());
    let resource = match set_current_resource(allocator.clone()) {
        Ok(()) => {
            // Marks it used, so nobody replaces it under us.
            allocator = current_resource::<B>(device)?;
            resource
        }
        Err(_) => {
            // Rust code already allocates through the current resource: count on top of it.
            let existing = current_resource::<B>(device)?;
            let resource = Arc::new(PluginResource::new(existing.resource().clone()));
            allocator = Allocator::from_arc(resource.clone());
            resource
        }
    };
    let e = Entry { allocator, resource };
    map.insert(key, Box::new(e.clone()));
    Ok(e)
}

// ---- streams ------------------------------------------------------------------------

/// The backend stream for a native handle (0: the device's default stream),
/// borrowed once per handle and cached.
#[cfg(feature = "cuda")]
pub fn cuda_stream(device: &Arc<gpuport::CudaDevice>, raw: usize) -> Stream<gpuport::Cuda> {
    type Streams = Mutex<HashMap<(usize, usize), Stream<gpuport::Cuda>>>;
    static STREAMS: OnceLock<Streams> = OnceLock::new();
    if raw == 0 {
        return device.default_stream().clone();
    }
    let mut map = STREAMS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    map.entry((device.info().ordinal, raw))
        // SAFETY: the caller (PyTorch, CuPy, Numba or a Python user) names a
        // live stream of this device's primary context; gpuport never
        // destroys a borrowed stream, and enqueues on it only while that
        // caller allocates or frees on it.
        .or_insert_with(|| unsafe { device.borrow_stream(raw) })
        .clone()
}

// ---- allocations ------------------------------------------------------------------

/// A live allocation of any compiled-in backend.
pub enum AnyAllocation {
    Host(DeviceAllocation<gpuport::Host>),
    #[cfg(feature = "cuda")]
    Cuda(DeviceAllocation<gpuport::Cuda>),
}

impl AnyAllocation {
    pub fn ptr(&self) -> u64 {
        match self {
            AnyAllocation::Host(a) => a.device_ptr(),
            #[cfg(feature = "cuda")]
            AnyAllocation::Cuda(a) => a.device_ptr(),
        }
    }
    fn ipc(&self) -> gpuport::Result<IpcHandle> {
        match self {
            AnyAllocation::Host(a) => entry::<gpuport::Host>(&host_device()?)?.allocator.ipc_handle(a),
            #[cfg(feature = "cuda")]
            AnyAllocation::Cuda(a) => {
                let d = gpuport::CudaDevice::open(a.ordinal())?;
                entry::<gpuport::Cuda>(&d)?.allocator.ipc_handle(a)
            }
        }
    }
}

fn host_device() -> gpuport::Result<Arc<gpuport::HostDevice>> {
    gpuport::HostDevice::open(0)
}

/// Allocates `size` bytes (at least 1 is reserved) on `dev`'s current
/// resource, on the stream with native handle `stream` (0: default).
pub fn alloc_on(dev: &AnyDevice, size: usize, stream: StreamArg) -> gpuport::Result<AnyAllocation> {
    let size = size.max(1);
    match dev {
        AnyDevice::Host(d) => {
            let e = entry::<gpuport::Host>(d)?;
            let s = match stream {
                StreamArg::Gpuport(crate::device::AnyStream::Host(_, s)) => s,
                _ => d.default_stream().clone(),
            };
            Ok(AnyAllocation::Host(e.allocator.alloc(size, &s)?))
        }
        #[cfg(feature = "cuda")]
        AnyDevice::Cuda(d) => {
            let e = entry::<gpuport::Cuda>(d)?;
            let s = match stream {
                StreamArg::Gpuport(crate::device::AnyStream::Cuda(_, s)) => s,
                StreamArg::Raw(raw) => cuda_stream(d, raw),
                #[allow(unreachable_patterns)]
                _ => d.default_stream().clone(),
            };
            Ok(AnyAllocation::Cuda(e.allocator.alloc(size, &s)?))
        }
        #[allow(unreachable_patterns)]
        _ => Err(gpuport::Error::Unsupported {
            op: "gpuport.memory",
            backend: dev.backend(),
            hint: Some("use the host or CUDA backend".into()),
        }),
    }
}

/// How a stream was named.
pub enum StreamArg {
    Raw(usize),
    Gpuport(crate::device::AnyStream),
}

// ---- the C ABI for PyTorch ---------------------------------------------------------

fn torch_live() -> &'static Mutex<HashMap<usize, AnyAllocation>> {
    static LIVE: OnceLock<Mutex<HashMap<usize, AnyAllocation>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

fn device_for_ordinal(device: i32) -> gpuport::Result<AnyDevice> {
    if device < 0 {
        return Ok(AnyDevice::Host(host_device()?));
    }
    gpuport::open(&format!("cuda:{device}"))
}

fn torch_malloc(size: isize, device: i32, stream: usize) -> gpuport::Result<*mut std::ffi::c_void> {
    let size = usize::try_from(size)
        .map_err(|_| gpuport::Error::InvalidArgument { name: "size", reason: format!("{size} < 0") })?;
    let dev = device_for_ordinal(device)?;
    let a = alloc_on(&dev, size, StreamArg::Raw(stream))?;
    let ptr = a.ptr() as usize;
    torch_live().lock().unwrap_or_else(|p| p.into_inner()).insert(ptr, a);
    Ok(ptr as *mut std::ffi::c_void)
}

/// Allocates `size` bytes on device `device` (a CUDA ordinal; -1: the host
/// backend, for tests) on stream `stream` (a `cudaStream_t`; 0: default)
/// from the device's current gpuport resource. Returns null on failure.
/// Never unwinds. For `torch.cuda.memory.CUDAPluggableAllocator`.
#[no_mangle]
pub extern "C" fn gpuport_torch_malloc(
    size: isize,
    device: i32,
    stream: *mut std::ffi::c_void,
) -> *mut std::ffi::c_void {
    let stream = stream as usize;
    match std::panic::catch_unwind(|| torch_malloc(size, device, stream)) {
        Ok(Ok(p)) => p,
        _ => std::ptr::null_mut(),
    }
}

/// Frees memory from [`gpuport_torch_malloc`] (in the order of the stream it
/// was allocated on). Unknown pointers are ignored. Never unwinds.
#[no_mangle]
pub extern "C" fn gpuport_torch_free(
    ptr: *mut std::ffi::c_void,
    _size: isize,
    _device: i32,
    _stream: *mut std::ffi::c_void,
) {
    let ptr = ptr as usize;
    let _ = std::panic::catch_unwind(|| {
        let a = torch_live().lock().unwrap_or_else(|p| p.into_inner()).remove(&ptr);
        drop(a);
    });
}

/// Number of live allocations made through [`gpuport_torch_malloc`].
#[no_mangle]
pub extern "C" fn gpuport_torch_live_count() -> usize {
    std::panic::catch_unwind(|| torch_live().lock().unwrap_or_else(|p| p.into_inner()).len()).unwrap_or(0)
}

// ---- Python -----------------------------------------------------------------------

/// Device memory from the device's current gpuport resource; goes back to it
/// on `free()` or when this object is collected.
#[pyclass(module = "gpuport._core", name = "Allocation", frozen)]
pub struct PyAllocation {
    inner: Mutex<Option<AnyAllocation>>,
    ptr: u64,
    size: usize,
    device: String,
}

#[pymethods]
impl PyAllocation {
    /// The device address (an int).
    #[getter]
    fn ptr(&self) -> u64 {
        self.ptr
    }
    /// Bytes requested.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }
    /// The device spec (`"cuda:0"`, `"host"`).
    #[getter]
    fn device(&self) -> String {
        self.device.clone()
    }
    /// Whether `free()` was called.
    #[getter]
    fn freed(&self) -> bool {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }
    /// Returns the memory to the resource now (once; later calls do nothing).
    fn free(&self, py: Python<'_>) {
        let a = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(|| drop(a));
    }
    /// `(handle, offset)`: the 64-byte driver IPC handle of the allocation's
    /// base and the allocation's offset from that base.
    fn ipc_handle<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyBytes>, u64)> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Some(a) = guard.as_ref() else {
            return Err(PyValueError::new_err("allocation already freed"));
        };
        let h = a.ipc().py_err(py)?;
        // Numba and CuPy open these bytes with cuIpcOpenMemHandle: only a
        // driver memory handle means that (a shareable native pool's block does not).
        if h.kind != IpcKind::Memory {
            return Err(PyValueError::new_err(format!(
                "the allocation's resource exports {:?} handles, not cuIpcGetMemHandle handles",
                h.kind
            )));
        }
        Ok((PyBytes::new(py, &h.handle), h.offset))
    }
    fn __int__(&self) -> u64 {
        self.ptr
    }
    fn __repr__(&self) -> String {
        format!("Allocation({:#x}, {} bytes, {})", self.ptr, self.size, self.device)
    }
}

fn stream_arg(py: Python<'_>, dev: &AnyDevice, stream: Option<&Bound<'_, PyAny>>) -> PyResult<StreamArg> {
    let Some(o) = stream.filter(|o| !o.is_none()) else {
        return Ok(StreamArg::Raw(0));
    };
    if o.cast::<PyStream>().is_ok() {
        return Ok(StreamArg::Gpuport(crate::device::resolve_stream(py, dev, Some(o))?));
    }
    let h = crate::device::foreign_handle(o)?;
    if h < 0 {
        return Err(PyValueError::new_err(format!("stream {h} is not a stream handle")));
    }
    if h != 0 && matches!(dev, AnyDevice::Host(_)) {
        return Err(PyValueError::new_err(format!(
            "stream {h}: the host backend's streams have no integer handles; pass None, 0 or a gpuport.Stream"
        )));
    }
    Ok(StreamArg::Raw(h as usize))
}

/// Allocates `size` bytes from the device's current resource.
#[pyfunction]
#[pyo3(name = "mem_alloc", signature = (size, stream=None, device=None))]
pub fn mem_alloc(
    py: Python<'_>,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyAllocation> {
    let dev = resolve_device(py, device)?;
    let s = stream_arg(py, &dev, stream)?;
    let a = py.detach(|| alloc_on(&dev, size, s)).py_err(py)?;
    Ok(PyAllocation { ptr: a.ptr(), size, device: spec(&dev), inner: Mutex::new(Some(a)) })
}

macro_rules! with_entry {
    ($dev:expr, $e:ident => $body:expr) => {{
        match $dev {
            AnyDevice::Host(d) => match entry::<gpuport::Host>(d) {
                Ok($e) => $body,
                Err(err) => Err(err),
            },
            #[cfg(feature = "cuda")]
            AnyDevice::Cuda(d) => match entry::<gpuport::Cuda>(d) {
                Ok($e) => $body,
                Err(err) => Err(err),
            },
            #[allow(unreachable_patterns)]
            other => Err(gpuport::Error::Unsupported {
                op: "gpuport.memory",
                backend: other.backend(),
                hint: Some("use the host or CUDA backend".into()),
            }),
        }
    }};
}

/// Installs the plugin resource on `dev` if it is not yet (see [`entry`]).
/// A backend without Python memory support is left alone: its allocations
/// go through its default current resource.
pub fn install(dev: &AnyDevice) {
    let _ = with_entry!(dev, _e => Ok(()));
}

/// The statistics of the device's current resource.
#[pyfunction]
#[pyo3(name = "mem_stats", signature = (device=None))]
pub fn mem_stats<'py>(py: Python<'py>, device: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyDict>> {
    let dev = resolve_device(py, device)?;
    let (s, report) =
        with_entry!(&dev, e => Ok((e.allocator.statistics().unwrap_or_default(), e.allocator.report()))).py_err(py)?;
    let d = PyDict::new(py);
    d.set_item("current_bytes", s.current_bytes)?;
    d.set_item("peak_bytes", s.peak_bytes)?;
    d.set_item("total_bytes", s.total_bytes)?;
    d.set_item("current_count", s.current_count)?;
    d.set_item("peak_count", s.peak_count)?;
    d.set_item("total_count", s.total_count)?;
    if let Some(r) = report {
        d.set_item("pool_reserved", r.reserved)?;
        d.set_item("pool_in_use", r.in_use)?;
        d.set_item("pool_free", r.free)?;
        d.set_item("pool_allocations", r.counters.allocations)?;
        d.set_item("pool_frees", r.counters.frees)?;
    }
    Ok(d)
}

/// Starts a CSV log of every allocation and free at `path` (truncated).
#[pyfunction]
#[pyo3(name = "mem_enable_logging", signature = (path, device=None, memory_info=false))]
pub fn mem_enable_logging(
    py: Python<'_>,
    path: PathBuf,
    device: Option<&Bound<'_, PyAny>>,
    memory_info: bool,
) -> PyResult<()> {
    let dev = resolve_device(py, device)?;
    py.detach(|| with_entry!(&dev, e => e.resource.enable_log(path, memory_info))).py_err(py)
}

/// Stops the CSV log (flushing it).
#[pyfunction]
#[pyo3(name = "mem_disable_logging", signature = (device=None))]
pub fn mem_disable_logging(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let dev = resolve_device(py, device)?;
    py.detach(|| with_entry!(&dev, e => e.resource.disable_log())).py_err(py)
}

/// Flushes the CSV log; its path, or None when logging is off.
#[pyfunction]
#[pyo3(name = "mem_log_path", signature = (device=None))]
pub fn mem_log_path(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    let dev = resolve_device(py, device)?;
    let p = py.detach(|| with_entry!(&dev, e => e.resource.log_path())).py_err(py)?;
    Ok(p.map(|p| p.to_string_lossy().into_owned()))
}

/// `(free, total)` device memory in bytes.
#[pyfunction]
#[pyo3(name = "mem_info", signature = (device=None))]
pub fn mem_info(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<(usize, usize)> {
    let dev = resolve_device(py, device)?;
    let m = py.detach(|| with_entry!(&dev, e => e.allocator.memory_info())).py_err(py)?;
    Ok((m.free, m.total))
}

/// Returns the pool's cached memory to the driver (live allocations stay valid).
#[pyfunction]
#[pyo3(name = "mem_reset", signature = (device=None))]
pub fn mem_reset(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let dev = resolve_device(py, device)?;
    py.detach(|| with_entry!(&dev, e => e.allocator.reset())).py_err(py)
}

enum AnyDefer {
    Host(DeferCleanup<gpuport::Host>),
    #[cfg(feature = "cuda")]
    Cuda(DeferCleanup<gpuport::Cuda>),
}

/// Holds every free on the device back until `release()` (or `__exit__`).
#[pyclass(module = "gpuport._core", name = "DeferCleanup", frozen)]
pub struct PyDeferCleanup {
    inner: Mutex<Option<AnyDefer>>,
}

#[pymethods]
impl PyDeferCleanup {
    /// Frees held back so far (0 once released).
    #[getter]
    fn held_back(&self) -> usize {
        match &*self.inner.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(AnyDefer::Host(g)) => g.held_back(),
            #[cfg(feature = "cuda")]
            Some(AnyDefer::Cuda(g)) => g.held_back(),
            None => 0,
        }
    }
    /// Lets the held-back frees happen (once every guard is released).
    fn release(&self, py: Python<'_>) {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(|| drop(g));
    }
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.release(py);
        false
    }
}

/// A guard holding frees on the device back while it lives (NBEP 7 `defer_cleanup`).
#[pyfunction]
#[pyo3(name = "mem_defer_cleanup", signature = (device=None))]
pub fn mem_defer_cleanup(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<PyDeferCleanup> {
    let dev = resolve_device(py, device)?;
    let g = match &dev {
        AnyDevice::Host(d) => entry::<gpuport::Host>(d).map(|e| AnyDefer::Host(e.allocator.defer_cleanup())),
        #[cfg(feature = "cuda")]
        AnyDevice::Cuda(d) => entry::<gpuport::Cuda>(d).map(|e| AnyDefer::Cuda(e.allocator.defer_cleanup())),
        #[allow(unreachable_patterns)]
        other => Err(gpuport::Error::Unsupported { op: "gpuport.memory", backend: other.backend(), hint: None }),
    }
    .py_err(py)?;
    Ok(PyDeferCleanup { inner: Mutex::new(Some(g)) })
}

/// Held only to be dropped (which frees the memory).
#[allow(dead_code)]
enum AnyPinned {
    Host(PinnedMemory<gpuport::Host>),
    #[cfg(feature = "cuda")]
    Cuda(PinnedMemory<gpuport::Cuda>),
}

/// Pinned host memory from the device's current resource.
#[pyclass(module = "gpuport._core", name = "PinnedAllocation", frozen)]
pub struct PyPinned {
    inner: Mutex<Option<AnyPinned>>,
    ptr: usize,
    device_ptr: Option<u64>,
    size: usize,
}

#[pymethods]
impl PyPinned {
    /// The host address.
    #[getter]
    fn ptr(&self) -> usize {
        self.ptr
    }
    /// The device address of mapped memory, else None.
    #[getter]
    fn device_ptr(&self) -> Option<u64> {
        self.device_ptr
    }
    /// Bytes requested.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }
    /// Whether `free()` was called.
    #[getter]
    fn freed(&self) -> bool {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }
    /// Returns the memory now (once).
    fn free(&self, py: Python<'_>) {
        let p = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(|| drop(p));
    }
    fn __repr__(&self) -> String {
        match self.device_ptr {
            Some(d) => {
                format!("PinnedAllocation({:#x}, {} bytes, mapped at device address {d:#x})", self.ptr, self.size)
            }
            None => format!("PinnedAllocation({:#x}, {} bytes, not mapped)", self.ptr, self.size),
        }
    }
}

/// Allocates pinned host memory (NBEP 7 `memhostalloc`).
#[pyfunction]
#[pyo3(name = "mem_alloc_pinned", signature = (size, mapped=false, portable=false, write_combined=false, device=None))]
pub fn mem_alloc_pinned(
    py: Python<'_>,
    size: usize,
    mapped: bool,
    portable: bool,
    write_combined: bool,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyPinned> {
    let dev = resolve_device(py, device)?;
    let flags = PinnedFlags { mapped, portable, write_combined };
    let size1 = size.max(1);
    let (p, ptr, device_ptr) = py
        .detach(|| -> gpuport::Result<(AnyPinned, usize, Option<u64>)> {
            match &dev {
                AnyDevice::Host(d) => {
                    let mut m = entry::<gpuport::Host>(d)?.allocator.alloc_pinned(size1, flags)?;
                    let (ptr, dp) = (m.as_mut_slice().as_mut_ptr() as usize, m.mapped_ptr());
                    Ok((AnyPinned::Host(m), ptr, dp))
                }
                #[cfg(feature = "cuda")]
                AnyDevice::Cuda(d) => {
                    let mut m = entry::<gpuport::Cuda>(d)?.allocator.alloc_pinned(size1, flags)?;
                    let (ptr, dp) = (m.as_mut_slice().as_mut_ptr() as usize, m.mapped_ptr());
                    Ok((AnyPinned::Cuda(m), ptr, dp))
                }
                #[allow(unreachable_patterns)]
                other => {
                    Err(gpuport::Error::Unsupported { op: "gpuport.memory", backend: other.backend(), hint: None })
                }
            }
        })
        .py_err(py)?;
    Ok(PyPinned { inner: Mutex::new(Some(p)), ptr, device_ptr, size })
}

/// Held only to be dropped (which unregisters the memory).
#[allow(dead_code)]
enum AnyRegistration {
    Host(gpuport::backend::HostRegistration<gpuport::Host>),
    #[cfg(feature = "cuda")]
    Cuda(gpuport::backend::HostRegistration<gpuport::Cuda>),
}

/// Host memory page-locked by `mem_pin`; unregistered on `unpin()` or collection.
#[pyclass(module = "gpuport._core", name = "HostRegistration", frozen)]
pub struct PyRegistration {
    inner: Mutex<Option<AnyRegistration>>,
    ptr: usize,
    size: usize,
    mapped: bool,
}

#[pymethods]
impl PyRegistration {
    /// The host address.
    #[getter]
    fn ptr(&self) -> usize {
        self.ptr
    }
    /// Bytes registered.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }
    /// Whether the memory is mapped for the device.
    #[getter]
    fn mapped(&self) -> bool {
        self.mapped
    }
    /// Whether `unpin()` was called.
    #[getter]
    fn unpinned(&self) -> bool {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }
    /// Unregisters now (once).
    #[allow(clippy::drop_non_drop)] // the host backend's registration has nothing to undo
    fn unpin(&self, py: Python<'_>) {
        let r = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(|| drop(r));
    }
}

/// Page-locks `size` bytes of existing host memory at `ptr` (NBEP 7
/// `mempin`). The caller must keep that memory alive and unmoved until the
/// returned registration is unpinned or collected (Numba's `mempin` keeps
/// the owner alive that long).
#[pyfunction]
#[pyo3(name = "_mem_pin", signature = (ptr, size, mapped=false, device=None))]
pub fn mem_pin(
    py: Python<'_>,
    ptr: usize,
    size: usize,
    mapped: bool,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyRegistration> {
    if ptr == 0 || size == 0 {
        return Err(PyValueError::new_err("mem_pin needs a non-null pointer and a size > 0"));
    }
    let dev = resolve_device(py, device)?;
    let r = py
        .detach(|| -> gpuport::Result<AnyRegistration> {
            match &dev {
                AnyDevice::Host(d) => {
                    let a = entry::<gpuport::Host>(d)?.allocator;
                    // SAFETY: the Python caller guarantees `ptr..ptr+size` is
                    // live host memory that outlives the registration (see above).
                    Ok(AnyRegistration::Host(unsafe { a.pin(ptr as *mut u8, size, mapped) }?))
                }
                #[cfg(feature = "cuda")]
                AnyDevice::Cuda(d) => {
                    let a = entry::<gpuport::Cuda>(d)?.allocator;
                    // SAFETY: as above.
                    Ok(AnyRegistration::Cuda(unsafe { a.pin(ptr as *mut u8, size, mapped) }?))
                }
                #[allow(unreachable_patterns)]
                other => {
                    Err(gpuport::Error::Unsupported { op: "gpuport.memory", backend: other.backend(), hint: None })
                }
            }
        })
        .py_err(py)?;
    Ok(PyRegistration { inner: Mutex::new(Some(r)), ptr, size, mapped })
}

/// Name of the C functions for `CUDAPluggableAllocator`, and the file they are in.
#[pyfunction]
#[pyo3(name = "_torch_allocator_symbols")]
pub fn torch_allocator_symbols() -> (&'static str, &'static str) {
    ("gpuport_torch_malloc", "gpuport_torch_free")
}

/// Registers this module's classes and functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAllocation>()?;
    m.add_class::<PyDeferCleanup>()?;
    m.add_class::<PyPinned>()?;
    m.add_class::<PyRegistration>()?;
    m.add_function(wrap_pyfunction!(mem_alloc, m)?)?;
    m.add_function(wrap_pyfunction!(mem_alloc_pinned, m)?)?;
    m.add_function(wrap_pyfunction!(mem_pin, m)?)?;
    m.add_function(wrap_pyfunction!(mem_stats, m)?)?;
    m.add_function(wrap_pyfunction!(mem_enable_logging, m)?)?;
    m.add_function(wrap_pyfunction!(mem_disable_logging, m)?)?;
    m.add_function(wrap_pyfunction!(mem_log_path, m)?)?;
    m.add_function(wrap_pyfunction!(mem_info, m)?)?;
    m.add_function(wrap_pyfunction!(mem_reset, m)?)?;
    m.add_function(wrap_pyfunction!(mem_defer_cleanup, m)?)?;
    m.add_function(wrap_pyfunction!(torch_allocator_symbols, m)?)?;
    Ok(())
}
