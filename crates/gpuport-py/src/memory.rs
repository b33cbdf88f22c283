//! `gpuport.memory`: Python access to each device's current gpuport memory
//! resource, and its out-of-memory observers. (The C functions PyTorch's
//! `CUDAPluggableAllocator` calls are in `torch_hook.rs`.)
//!
//! Everything here converts Python arguments and calls the core's
//! run-time layer (`gpuport::dynamic::memory`), which installs each device's
//! observed resource and borrows foreign streams once per handle. The pool
//! never names a borrowed stream after the call that passed it (its owner
//! may destroy it meanwhile; see src/memory/pool/mod.rs). A new stream that
//! gets a destroyed one's handle is the same stream to gpuport and reuses
//! its blocks without waiting for the destroyed stream's work, as in CuPy's pool.

use std::path::PathBuf;

use gpuport::dynamic::memory as core_memory;
use gpuport::dynamic::memory_handles::{
    self as handles, AllocationHandle, DeferCleanupHandle, PinHandle, PinnedHandle, ReleaseOnce,
};
use gpuport::memory::RefusedFrees;
use gpuport::memory::{self as core_mem, ObserverId, PinnedFlags};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::convert::device::{given_device, open_device, resolve_device};
use crate::convert::error::IntoPyResult;
use crate::convert::stream::resolve_stream;

// ---- Python -----------------------------------------------------------------------

/// Device memory from the device's current gpuport resource; goes back to it
/// on `free()` or when this object is collected (`gpuport.memory.alloc`).
///
///     >>> import gpuport.memory as gm
///     >>> a = gm.alloc(256, device="host")
///     >>> a.size, a.device, a.freed, a.ptr != 0, int(a) == a.ptr
///     (256, 'host', False, True, True)
///     >>> a.free()
///     >>> a.freed
///     True
#[pyclass(module = "gpuport._core", name = "Allocation", frozen)]
pub struct PyAllocation(AllocationHandle);

#[pymethods]
impl PyAllocation {
    /// The device address (an int).
    #[getter]
    fn ptr(&self) -> u64 {
        self.0.ptr()
    }
    /// Bytes requested.
    #[getter]
    fn size(&self) -> usize {
        self.0.size()
    }
    /// The device spec (`"cuda:0"`, `"host"`).
    #[getter]
    fn device(&self) -> String {
        self.0.device().spec()
    }
    /// Whether `free()` was called.
    #[getter]
    fn freed(&self) -> bool {
        self.0.is_freed()
    }
    /// Returns the memory to the resource now (once; later calls do nothing).
    ///
    ///     >>> import gpuport.memory as gm
    ///     >>> a = gm.alloc(64, device="host")
    ///     >>> a.free(); a.free()
    ///     >>> a.freed
    ///     True
    fn free(&self, py: Python<'_>) {
        finish(py, self.0.free());
    }
    /// `(handle, offset)`: the 64-byte driver IPC handle of the allocation's
    /// base and the allocation's offset from that base; another process
    /// opens it with `cuIpcOpenMemHandle`. GPU memory only:
    ///
    ///     >>> import gpuport.memory as gm
    ///     >>> gm.alloc(64, device="host").ipc_handle()
    ///     Traceback (most recent call last):
    ///     gpuport.UnsupportedError: IPC memory handles is not supported by the host backend: ...
    fn ipc_handle<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyBytes>, u64)> {
        // Numba and CuPy open these bytes with cuIpcOpenMemHandle.
        let h = self.0.driver_ipc_handle().py_err_in(py, "ipc_handle")?;
        Ok((PyBytes::new(py, &h.handle), h.offset))
    }
    fn __int__(&self) -> u64 {
        self.0.ptr()
    }
    fn __repr__(&self) -> String {
        format!("Allocation({:#x}, {} bytes, {})", self.0.ptr(), self.0.size(), self.0.device().spec())
    }
}

/// Makes a free that would have waited for another thread, with the GIL released.
fn finish(py: Python<'_>, frees: Option<RefusedFrees>) {
    if let Some(frees) = frees {
        py.detach(|| frees.finish());
    }
}

impl Drop for PyAllocation {
    fn drop(&mut self) {
        let frees = self.0.free_on_drop();
        if frees.is_some() {
            Python::attach(|py| finish(py, frees));
        }
    }
}

/// Allocates ``size`` bytes on the device's current resource
/// (``gpuport.memory.alloc``).
///
/// Returns an :class:`Allocation`: ``.ptr`` is the device address; the
/// memory goes back to the pool (in ``stream``'s order) on ``.free()`` or
/// when the object is collected.
///
///     >>> import gpuport.memory as gm
///     >>> a = gm.alloc(1024, device="host")
///     >>> a.size, a.device
///     (1024, 'host')
///     >>> a.free()
#[pyfunction]
#[pyo3(name = "mem_alloc", signature = (size, stream=None, device=None))]
pub fn mem_alloc(
    py: Python<'_>,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyAllocation> {
    // The hot path: a `Device` (or the default device) and its default
    // stream, with the stream and resources the `Device` keeps.
    if stream.is_none_or(|s| s.is_none()) {
        if let Some(d) = given_device(py, device)? {
            let t = d.alloc_target(py)?;
            let a = match core_memory::alloc_from_without_waiting(&t.resources, size, &t.stream) {
                Some(done) => done,
                // It would wait for another thread, which may need the GIL.
                None => py.detach(|| core_memory::alloc_from(&t.resources, size, &t.stream)),
            }
            .py_err(py)?;
            return Ok(PyAllocation(AllocationHandle::new(a, size)));
        }
    }
    let dev = open_device(py, device)?; // the allocation installs the resource
    let s = resolve_stream(py, &dev, stream)?;
    let a = match core_memory::alloc_without_waiting(&dev, size, &s) {
        Some(done) => done,
        // It would wait for another thread, which may need the GIL.
        None => py.detach(|| core_memory::alloc(&dev, size, &s)),
    }
    .py_err(py)?;
    Ok(PyAllocation(AllocationHandle::new(a, size)))
}

/// The statistics of the device's current resource.
#[pyfunction]
#[pyo3(name = "mem_stats", signature = (device=None))]
pub fn mem_stats<'py>(py: Python<'py>, device: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyDict>> {
    let dev = resolve_device(py, device)?;
    let entries = py.detach(|| handles::statistics(&dev)).py_err(py)?;
    let d = PyDict::new(py);
    for (key, value) in entries {
        d.set_item(key, value)?;
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
    py.detach(|| core_memory::enable_log(&dev, path, memory_info)).py_err(py)
}

/// Stops the CSV log (flushing it).
#[pyfunction]
#[pyo3(name = "mem_disable_logging", signature = (device=None))]
pub fn mem_disable_logging(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let dev = resolve_device(py, device)?;
    py.detach(|| core_memory::disable_log(&dev)).py_err(py)
}

/// Flushes the CSV log; its path, or None when logging is off.
#[pyfunction]
#[pyo3(name = "mem_log_path", signature = (device=None))]
pub fn mem_log_path(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    let dev = resolve_device(py, device)?;
    let p = py.detach(|| core_memory::log_path(&dev)).py_err(py)?;
    Ok(p.map(|p| p.to_string_lossy().into_owned()))
}

/// `(free, total)` device memory in bytes.
#[pyfunction]
#[pyo3(name = "mem_info", signature = (device=None))]
pub fn mem_info(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<(usize, usize)> {
    let dev = resolve_device(py, device)?;
    let m = py.detach(|| core_memory::memory_info(&dev)).py_err(py)?;
    Ok((m.free, m.total))
}

/// Returns the pool's cached memory to the driver (live allocations stay valid).
#[pyfunction]
#[pyo3(name = "mem_reset", signature = (device=None))]
pub fn mem_reset(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let dev = resolve_device(py, device)?;
    py.detach(|| core_memory::reset(&dev)).py_err(py)
}

/// Holds every free on the device back until `release()` (or `__exit__`)
/// (`gpuport.memory.defer_cleanup`).
///
///     >>> import gpuport.memory as gm
///     >>> with gm.defer_cleanup("host") as guard:
///     ...     gm.alloc(64, device="host").free()     # held back
///     ...     guard.held_back
///     1
///     >>> guard.held_back                          # released at the end of the block
///     0
#[pyclass(module = "gpuport._core", name = "DeferCleanup", frozen)]
pub struct PyDeferCleanup(DeferCleanupHandle);

#[pymethods]
impl PyDeferCleanup {
    /// Frees held back so far (0 once released).
    #[getter]
    fn held_back(&self) -> usize {
        self.0.held_back()
    }
    /// Lets the held-back frees happen (once every guard is released).
    ///
    ///     >>> import gpuport.memory as gm
    ///     >>> guard = gm.defer_cleanup("host")
    ///     >>> gm.alloc(64, device="host").free()
    ///     >>> guard.release()
    ///     >>> guard.held_back
    ///     0
    fn release(&self, py: Python<'_>) {
        let guard = self.0.release();
        py.detach(|| drop(guard));
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
    Ok(PyDeferCleanup(py.detach(|| DeferCleanupHandle::new(&dev)).py_err(py)?))
}

/// Pinned host memory from the device's current resource
/// (`gpuport.memory.alloc_pinned`).
///
///     >>> import gpuport.memory as gm
///     >>> p = gm.alloc_pinned(64, device="host")
///     >>> p.size, p.freed, p.ptr != 0, p.device_ptr
///     (64, False, True, None)
///     >>> p.free(); p.freed
///     True
#[pyclass(module = "gpuport._core", name = "PinnedAllocation", frozen)]
pub struct PyPinned(PinnedHandle);

#[pymethods]
impl PyPinned {
    /// The host address.
    #[getter]
    fn ptr(&self) -> usize {
        self.0.ptr()
    }
    /// The device address of mapped memory, else None.
    #[getter]
    fn device_ptr(&self) -> Option<u64> {
        self.0.device_ptr()
    }
    /// Bytes requested.
    #[getter]
    fn size(&self) -> usize {
        self.0.size()
    }
    /// Whether `free()` was called.
    #[getter]
    fn freed(&self) -> bool {
        self.0.is_freed()
    }
    /// Returns the memory now (once; later calls do nothing).
    ///
    ///     >>> import gpuport.memory as gm
    ///     >>> p = gm.alloc_pinned(64, device="host")
    ///     >>> p.free(); p.free()
    ///     >>> p.freed
    ///     True
    fn free(&self, py: Python<'_>) {
        let memory = self.0.free();
        py.detach(|| drop(memory));
    }
    fn __repr__(&self) -> String {
        let (ptr, size) = (self.0.ptr(), self.0.size());
        match self.0.device_ptr() {
            Some(d) => format!("PinnedAllocation({ptr:#x}, {size} bytes, mapped at device address {d:#x})"),
            None => format!("PinnedAllocation({ptr:#x}, {size} bytes, not mapped)"),
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
    Ok(PyPinned(py.detach(|| PinnedHandle::alloc(&dev, size, flags)).py_err(py)?))
}

/// Host memory page-locked by `mem_pin`; unregistered on `unpin()` or collection.
#[pyclass(module = "gpuport._core", name = "HostRegistration", frozen)]
pub struct PyRegistration(PinHandle);

#[pymethods]
impl PyRegistration {
    /// The host address.
    #[getter]
    fn ptr(&self) -> usize {
        self.0.ptr()
    }
    /// Bytes registered.
    #[getter]
    fn size(&self) -> usize {
        self.0.size()
    }
    /// Whether the memory is mapped for the device.
    #[getter]
    fn mapped(&self) -> bool {
        self.0.is_mapped()
    }
    /// Whether `unpin()` was called.
    #[getter]
    fn unpinned(&self) -> bool {
        self.0.is_unpinned()
    }
    /// Unregisters now (once).
    #[allow(clippy::drop_non_drop)] // the host backend's registration has nothing to undo
    fn unpin(&self, py: Python<'_>) {
        let registration = self.0.unpin();
        py.detach(|| drop(registration));
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
    let dev = resolve_device(py, device)?;
    // SAFETY: the Python caller guarantees `ptr..ptr+size` is live host
    // memory that outlives the registration (see above).
    Ok(PyRegistration(py.detach(|| unsafe { PinHandle::pin(&dev, ptr, size, mapped) }).py_err(py)?))
}

/// An out-of-memory observer registered from Python
/// (`gpuport.memory.on_out_of_memory`); `remove()` unregisters it.
#[pyclass(name = "OutOfMemoryObserver", module = "gpuport._core", frozen)]
pub struct PyOomObserver {
    id: ReleaseOnce<ObserverId>,
}

#[pymethods]
impl PyOomObserver {
    /// Unregisters the observer; false if it was already removed.
    fn remove(&self) -> bool {
        self.id.take().is_some_and(core_mem::remove_out_of_memory_observer)
    }
}

/// The pool's report as a dict (the keys of `PoolReport`'s sizes).
fn report_dict<'py>(py: Python<'py>, r: &core_mem::PoolReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (key, value) in handles::out_of_memory_entries(r) {
        d.set_item(key, value)?;
    }
    Ok(d)
}

/// Calls `callback(device, size, in_capture, report)` for every allocation a
/// caching pool could not serve (after its retry), before the error is
/// raised; with `with_snapshot`, `callback(device, size, in_capture,
/// report, snapshot)`, the snapshot as `mem_snapshot_pickle` pickles it
/// (the failing pool's segments and the history). An exception in it goes
/// to `sys.unraisablehook`.
#[pyfunction]
#[pyo3(signature = (callback, with_snapshot=false))]
pub fn mem_on_out_of_memory(callback: Py<PyAny>, with_snapshot: bool) -> PyOomObserver {
    let id = core_mem::add_out_of_memory_observer(move |e| {
        let snapshot = with_snapshot.then(|| e.snapshot().to_pickle());
        Python::attach(|py| {
            let called = report_dict(py, e.report).and_then(|r| {
                let (device, size, in_capture) = (e.device.clone(), e.requested, e.in_capture);
                match &snapshot {
                    None => callback.call1(py, (device, size, in_capture, r)),
                    Some(bytes) => {
                        let snap = py.import("pickle")?.call_method1("loads", (PyBytes::new(py, bytes),))?;
                        callback.call1(py, (device, size, in_capture, r, snap))
                    }
                }
            });
            if let Err(err) = called {
                err.write_unraisable(py, Some(callback.bind(py)));
            }
        })
    });
    PyOomObserver { id: ReleaseOnce::new(id) }
}

/// Starts (`enabled`) or stops recording the allocation history
/// (`gpuport::memory::history`), keeping at most `max_entries`. While it
/// records, `frame_source()` (if given) is called on every allocation,
/// free and failure for the Python stack: a list of `(filename, line,
/// name)`, innermost first. `rust_backtrace` adds the Rust frames.
#[pyfunction]
#[pyo3(signature = (enabled, max_entries=100_000, rust_backtrace=false, frame_source=None))]
pub fn mem_record_history(enabled: bool, max_entries: usize, rust_backtrace: bool, frame_source: Option<Py<PyAny>>) {
    use gpuport::memory::history;
    if !enabled {
        history::stop();
        history::set_frame_source(None);
        return;
    }
    let source = frame_source.map(|f| -> history::FrameSource {
        std::sync::Arc::new(move || {
            // At interpreter shutdown there is no Python to ask: no frames.
            Python::try_attach(|py| {
                let frames = f.call0(py).and_then(|l| l.extract::<Vec<(String, u32, String)>>(py));
                match frames {
                    Ok(frames) => frames
                        .into_iter()
                        .map(|(filename, line, name)| history::Frame { filename, line, name })
                        .collect(),
                    Err(err) => {
                        err.write_unraisable(py, Some(f.bind(py)));
                        Vec::new()
                    }
                }
            })
            .unwrap_or_default()
        })
    });
    history::set_frame_source(source);
    history::start(history::HistoryConfig { max_entries, rust_backtrace });
}

/// Forgets the recorded history.
#[pyfunction]
pub fn mem_clear_history() {
    gpuport::memory::history::clear();
}

/// The snapshot of every device's current resource and the history, as
/// the pickle PyTorch's memory viewer reads; with `backend` (`"cuda"`,
/// `"rocm"`, `"host"`), only that backend's.
#[pyfunction]
#[pyo3(signature = (backend=None))]
pub fn mem_snapshot_pickle<'py>(py: Python<'py>, backend: Option<&str>) -> PyResult<Bound<'py, PyBytes>> {
    let backend = handles::snapshot_backend(backend).py_err(py)?;
    let bytes = py.detach(|| gpuport::memory::history::snapshot(backend).to_pickle());
    Ok(PyBytes::new(py, &bytes))
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
    m.add_function(wrap_pyfunction!(mem_on_out_of_memory, m)?)?;
    m.add_function(wrap_pyfunction!(mem_record_history, m)?)?;
    m.add_function(wrap_pyfunction!(mem_clear_history, m)?)?;
    m.add_function(wrap_pyfunction!(mem_snapshot_pickle, m)?)?;
    m.add_class::<PyOomObserver>()?;
    Ok(())
}
